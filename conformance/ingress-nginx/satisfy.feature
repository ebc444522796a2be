# Ported from kubernetes/ingress-nginx test/e2e/annotations/satisfy.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# The first case sets `satisfy` to each value in Go's map order; here
# `any`, then `all`. The htpasswd Secret's bcrypt hash has cost 10 where
# upstream's has 14: teapot bounds bcrypt's cost at 12 (each step
# doubles the CPU a guess costs the fleet). The authentication service
# is httpbun at `${HTTPBUN}`, as in auth.feature.
@ingress-nginx
Feature: ingress-nginx satisfy annotation

  Scenario: should configure satisfy directive correctly
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: satisfy
      annotations:
        nginx.ingress.kubernetes.io/satisfy: "all"
    spec:
      rules:
        - host: satisfy
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When the Ingress resource named "satisfy" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: satisfy
      annotations:
        nginx.ingress.kubernetes.io/satisfy: "any"
    spec:
      rules:
        - host: satisfy
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    When I send a "GET" request to "http://satisfy/"
    Then the response status-code must be 200
    And the request host must be "satisfy"
    When the Ingress resource named "satisfy" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: satisfy
      annotations:
        nginx.ingress.kubernetes.io/satisfy: "all"
    spec:
      rules:
        - host: satisfy
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    When I send a "GET" request to "http://satisfy/"
    Then the response status-code must be 200
    And the request host must be "satisfy"

  Scenario: should allow multiple auth with satisfy any
    Given a new random namespace
    Given an httpbun authentication service
    Given a Secret resource
    """
    apiVersion: v1
    kind: Secret
    metadata:
      name: basic-secret
    type: Opaque
    stringData:
      auth: "uname:$2a$10$GTJ/anOPVcX.XZyoRxWNzOe6ms9Uevq/F61XEgScuNPqCzs.cMp92\n"
    """
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-type: "basic"
        nginx.ingress.kubernetes.io/auth-secret: "basic-secret"
        nginx.ingress.kubernetes.io/auth-realm: "test basic auth"
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/satisfy: "any"
    spec:
      rules:
        - host: auth
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://auth/" with the header "Authorization" set to "Basic dW5hbWU6cHdk"
    Then the response status-code must be 200
    When I send a "GET" request to "http://auth/?a=b&c=d" without following redirects
    Then the response status-code must be 302
    And the response header "Location" must be "http://auth/auth/start?rd=http://auth%2F%3Fa%3Db%26c%3Dd"
