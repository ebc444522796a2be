# Ported from kubernetes/ingress-nginx test/e2e/annotations/disableproxyintercepterrors.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# The backend is httpbun (`/status/404`), the default backend the echo;
# the echo Service gets its pod from an extra Exact rule (upstream's
# NewEchoDeployment). The nginx.conf check (no `proxy_intercept_errors`)
# is the 404 passing unchanged (httpbun's empty body). X-Request-ID is
# checked to be present, not to be the client's: teapot keeps a
# client's request ID only under --trust-request-id (see
# customhttperrors.feature).
@ingress-nginx
Feature: ingress-nginx disable-proxy-intercept-errors annotation

  Scenario: configures Nginx correctly
    Given a new random namespace
    Given an httpbun authentication service
    Given the "httpbun" service is the httpbun service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: pie.foo.com
      annotations:
        nginx.ingress.kubernetes.io/custom-http-errors: "404"
        nginx.ingress.kubernetes.io/disable-proxy-intercept-errors: "true"
        nginx.ingress.kubernetes.io/default-backend: "echo"
    spec:
      rules:
        - host: pie.foo.com
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
              - path: /echo-pod
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://pie.foo.com/status/404" with the header "X-Request-Id" set to "proxy_intercept_errors"
    Then the response status-code must be 404
    And the response body must not contain "{"
    When the Ingress resource named "pie.foo.com" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: pie.foo.com
      annotations:
        nginx.ingress.kubernetes.io/custom-http-errors: "404"
        nginx.ingress.kubernetes.io/disable-proxy-intercept-errors: "false"
        nginx.ingress.kubernetes.io/default-backend: "echo"
    spec:
      rules:
        - host: pie.foo.com
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
              - path: /echo-pod
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    When I send a "GET" request to "http://pie.foo.com/status/404" with the header "X-Request-Id" set to "proxy_intercept_errors"
    Then the response status-code must be 200
    And the response must be served by the "echo" service
    And the request header "X-Code" must be "404"
    And the request header "X-Ingress-Name" must be "pie.foo.com"
    And the request header "X-Service-Name" must be "httpbun"
    And the request header "X-Request-Id" must be present
