# Ported from kubernetes/ingress-nginx test/e2e/annotations/auth.go as
# data: the external authentication cases (auth-url and its companions).
# The authentication service is httpbun's /basic-auth/user/password, as in
# ingress-nginx's e2e framework; `${HTTPBUN}` is its address (the cases
# name its pod IP). The basic-auth (auth-type, auth-secret), auth-snippet,
# auth-proxy-set-headers, auth-keepalive*, auth-cache-* and cookie
# (auth-always-set-cookie) cases are for annotations teapot does not serve,
# or inspect nginx.conf.
@ingress-nginx
Feature: ingress-nginx auth-* annotations (external authentication)

  Scenario: should return status code 200 when no authentication is configured
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
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
    When I send a "GET" request to "http://auth/"
    Then the response status-code must be 200

  Scenario: when external authentication is configured should return status code 200 when signed in
    Given a new random namespace
    Given an httpbun authentication service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
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
    When I send a "GET" request to "http://auth/" with the header "Authorization" set to "Basic dXNlcjpwYXNzd29yZA=="
    Then the response status-code must be 200

  Scenario: when external authentication is configured should redirect to signin url when not signed in
    Given a new random namespace
    Given an httpbun authentication service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
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
    When I send a "GET" request to "http://auth/?a=b&c=d" without following redirects
    Then the response status-code must be 302
    And the response header "Location" must be "http://auth/auth/start?rd=http://auth%2F%3Fa%3Db%26c%3Dd"

  Scenario: when external authentication is configured should overwrite Foo header with auth response
    Given a new random namespace
    Given an httpbun authentication service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-response-headers: "Foo"
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
    When I send a "GET" request to "http://auth/" with the header "Foo" set to "bar" and the header "Authorization" set to "Basic dXNlcjpwYXNzd29yZA=="
    Then the response status-code must be 200
    And the request header "Foo" must be absent

  Scenario: when external authentication is configured with a custom redirect param should return status code 200 when signed in
    Given a new random namespace
    Given an httpbun authentication service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-signin-redirect-param: "orig"
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
    When I send a "GET" request to "http://auth/" with the header "Authorization" set to "Basic dXNlcjpwYXNzd29yZA=="
    Then the response status-code must be 200

  Scenario: when external authentication is configured with a custom redirect param should redirect to signin url when not signed in
    Given a new random namespace
    Given an httpbun authentication service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-signin-redirect-param: "orig"
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
    When I send a "GET" request to "http://auth/?a=b&c=d" without following redirects
    Then the response status-code must be 302
    And the response header "Location" must be "http://auth/auth/start?orig=http://auth%2F%3Fa%3Db%26c%3Dd"

  Scenario: with invalid auth-url should deny whole location should return 503 (location was denied)
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "https://invalid..auth.url"
    spec:
      rules:
        - host: auth
          http:
            paths:
              - path: /denied-auth
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://auth/denied-auth"
    Then the response status-code must be 503
