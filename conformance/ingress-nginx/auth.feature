# Ported from kubernetes/ingress-nginx test/e2e/annotations/auth.go as
# data: each ginkgo case is a scenario with the same Ingresses, requests
# and expectations. The authentication service is httpbun's
# /basic-auth/user/password, as in ingress-nginx's e2e framework;
# `${HTTPBUN}` is its address (the cases name its pod IP).
# Basic authentication: the htpasswd Secret is upstream's buildSecret
# (`foo:` and bcrypt of `bar`; auth-map: the key `foo`), with bcrypt cost
# 10 where upstream's is 14: teapot bounds the cost at 12 (each step
# doubles the CPU a guess costs the fleet). The bodies nginx writes
# ("401 Authorization Required", "503 Service Temporarily Unavailable")
# are not compared.
# The auth cookie cases: upstream's auth service is an nginx answering
# `/cookies/set/alma/armud` with that cookie and its backend answers 503 on
# `/error`; here httpbun answers the cookie path the same way and the
# echo's X-Echo-Status hook makes the 503.
# The caching cases stop the authentication service where upstream
# deletes its Deployment.
# Not ported (NOT-PORTED.md): auth-snippet, auth-proxy-set-headers,
# auth-cache-key's and auth-keepalive*'s nginx.conf checks, "should add
# error to the config".
@ingress-nginx
Feature: ingress-nginx auth-* annotations

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

  Scenario: should return status code 503 when authentication is configured with an invalid secret
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-type: "basic"
        nginx.ingress.kubernetes.io/auth-secret: "something"
        nginx.ingress.kubernetes.io/auth-realm: "test auth"
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
    Then the response status-code must be 503

  Scenario: should return status code 401 when authentication is configured but Authorization header is not configured
    Given a new random namespace
    Given a Secret resource
    """
    apiVersion: v1
    kind: Secret
    metadata:
      name: test
    type: Opaque
    stringData:
      auth: "foo:$2a$10$5Oy1pLCQbagdiZ60vBeuUesbFGWSj8ef3H5sQjwx7DZEiuj6nxgxi\n"
    """
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-type: "basic"
        nginx.ingress.kubernetes.io/auth-secret: "test"
        nginx.ingress.kubernetes.io/auth-realm: "test auth"
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
    Then the response status-code must be 401

  Scenario: should return status code 401 when authentication is configured and Authorization header is sent with invalid credentials
    Given a new random namespace
    Given a Secret resource
    """
    apiVersion: v1
    kind: Secret
    metadata:
      name: test
    type: Opaque
    stringData:
      auth: "foo:$2a$10$5Oy1pLCQbagdiZ60vBeuUesbFGWSj8ef3H5sQjwx7DZEiuj6nxgxi\n"
    """
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-type: "basic"
        nginx.ingress.kubernetes.io/auth-secret: "test"
        nginx.ingress.kubernetes.io/auth-realm: "test auth"
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
    When I send a "GET" request to "http://auth/" with the header "Authorization" set to "Basic dXNlcjpwYXNz"
    Then the response status-code must be 401

  Scenario: should return status code 401 and cors headers when authentication and cors is configured but Authorization header is not configured
    Given a new random namespace
    Given a Secret resource
    """
    apiVersion: v1
    kind: Secret
    metadata:
      name: test
    type: Opaque
    stringData:
      auth: "foo:$2a$10$5Oy1pLCQbagdiZ60vBeuUesbFGWSj8ef3H5sQjwx7DZEiuj6nxgxi\n"
    """
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-type: "basic"
        nginx.ingress.kubernetes.io/auth-secret: "test"
        nginx.ingress.kubernetes.io/auth-realm: "test auth"
        nginx.ingress.kubernetes.io/enable-cors: "true"
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
    Then the response status-code must be 401
    And the response header "Access-Control-Allow-Origin" must be "*"

  Scenario: should return status code 200 when authentication is configured and Authorization header is sent
    Given a new random namespace
    Given a Secret resource
    """
    apiVersion: v1
    kind: Secret
    metadata:
      name: test
    type: Opaque
    stringData:
      auth: "foo:$2a$10$5Oy1pLCQbagdiZ60vBeuUesbFGWSj8ef3H5sQjwx7DZEiuj6nxgxi\n"
    """
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-type: "basic"
        nginx.ingress.kubernetes.io/auth-secret: "test"
        nginx.ingress.kubernetes.io/auth-realm: "test auth"
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
    When I send a "GET" request to "http://auth/" with the header "Authorization" set to "Basic Zm9vOmJhcg=="
    Then the response status-code must be 200

  Scenario: should return status code 200 when authentication is configured with a map and Authorization header is sent
    Given a new random namespace
    Given a Secret resource
    """
    apiVersion: v1
    kind: Secret
    metadata:
      name: test
    type: Opaque
    stringData:
      foo: "$2a$10$5Oy1pLCQbagdiZ60vBeuUesbFGWSj8ef3H5sQjwx7DZEiuj6nxgxi"
    """
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-type: "basic"
        nginx.ingress.kubernetes.io/auth-secret: "test"
        nginx.ingress.kubernetes.io/auth-realm: "test auth"
        nginx.ingress.kubernetes.io/auth-secret-type: "auth-map"
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
    When I send a "GET" request to "http://auth/" with the header "Authorization" set to "Basic Zm9vOmJhcg=="
    Then the response status-code must be 200

  Scenario: should return status code 401 when authentication is configured with invalid content and Authorization header is sent
    Given a new random namespace
    Given a Secret resource
    """
    apiVersion: v1
    kind: Secret
    metadata:
      name: test
    type: Opaque
    stringData:
      auth: "foo:"
    """
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-type: "basic"
        nginx.ingress.kubernetes.io/auth-secret: "test"
        nginx.ingress.kubernetes.io/auth-realm: "test auth"
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
    When I send a "GET" request to "http://auth/" with the header "Authorization" set to "Basic Zm9vOmJhcg=="
    Then the response status-code must be 401

  Scenario: cookie set by external authentication server user retains cookie by default
    Given a new random namespace
    Given an httpbun authentication service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth-check-cookies
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/cookies/set/alma/armud"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
    spec:
      rules:
        - host: auth-check-cookies
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
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth-check-cookies-error
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/cookies/set/alma/armud"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
    spec:
      rules:
        - host: auth-check-cookies
          http:
            paths:
              - path: /error
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://auth-check-cookies/?a=b&c=d"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "alma=armud"

  Scenario: cookie set by external authentication server user does not retain cookie if upstream returns error status code
    Given a new random namespace
    Given an httpbun authentication service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth-check-cookies
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/cookies/set/alma/armud"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
    spec:
      rules:
        - host: auth-check-cookies
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
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth-check-cookies-error
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/cookies/set/alma/armud"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
    spec:
      rules:
        - host: auth-check-cookies
          http:
            paths:
              - path: /error
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://auth-check-cookies/error?a=b&c=d" with the header "X-Echo-Status" set to "503"
    Then the response status-code must be 503

  Scenario: cookie set by external authentication server user with annotated ingress retains cookie if upstream returns error status code
    Given a new random namespace
    Given an httpbun authentication service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth-check-cookies
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/cookies/set/alma/armud"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
    spec:
      rules:
        - host: auth-check-cookies
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
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth-check-cookies-error
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/cookies/set/alma/armud"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
    spec:
      rules:
        - host: auth-check-cookies
          http:
            paths:
              - path: /error
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When the Ingress resource named "auth-check-cookies" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth-check-cookies
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/cookies/set/alma/armud"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-always-set-cookie: "true"
    spec:
      rules:
        - host: auth-check-cookies
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
    When the Ingress resource named "auth-check-cookies-error" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth-check-cookies-error
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/cookies/set/alma/armud"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-always-set-cookie: "true"
    spec:
      rules:
        - host: auth-check-cookies
          http:
            paths:
              - path: /error
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    When I send a "GET" request to "http://auth-check-cookies/error?a=b&c=d" with the header "X-Echo-Status" set to "503"
    Then the response status-code must be 503
    And the response header "Set-Cookie" must contain "alma=armud"

  Scenario: when external authentication is configured keeps processing new ingresses even if one of the existing ingresses is misconfigured
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
    When the Ingress resource named "auth" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-type: "basic"
        nginx.ingress.kubernetes.io/auth-secret: "something"
        nginx.ingress.kubernetes.io/auth-realm: "test auth"
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
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: different
    spec:
      rules:
        - host: different
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
    When I send a "GET" request to "http://different/"
    Then the response status-code must be 200

  Scenario: when external authentication is configured with a custom redirect param keeps processing new ingresses even if one of the existing ingresses is misconfigured
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
    When the Ingress resource named "auth" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: auth
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-signin-redirect-param: "orig"
        nginx.ingress.kubernetes.io/auth-type: "basic"
        nginx.ingress.kubernetes.io/auth-secret: "something"
        nginx.ingress.kubernetes.io/auth-realm: "test auth"
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
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: different
    spec:
      rules:
        - host: different
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
    When I send a "GET" request to "http://different/"
    Then the response status-code must be 200

  Scenario: when external authentication with caching is configured should return status code 200 when signed in after auth backend is deleted
    Given a new random namespace
    Given an httpbun authentication service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-auth-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: auth
          http:
            paths:
              - path: /foo
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: bar-auth-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: auth
          http:
            paths:
              - path: /bar
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-different-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: different
          http:
            paths:
              - path: /foo
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: bar-different-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: different
          http:
            paths:
              - path: /bar
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://auth/foo" with the header "Authorization" set to "Basic dXNlcjpwYXNzd29yZA=="
    Then the response status-code must be 200
    When the httpbun authentication service is stopped
    When I send a "GET" request to "http://auth/foo" with the header "Authorization" set to "Basic dXNlcjpwYXNzd29yZA=="
    Then the response status-code must be 200

  Scenario: when external authentication with caching is configured should deny login for different location on same server
    Given a new random namespace
    Given an httpbun authentication service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-auth-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: auth
          http:
            paths:
              - path: /foo
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: bar-auth-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: auth
          http:
            paths:
              - path: /bar
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-different-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: different
          http:
            paths:
              - path: /foo
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: bar-different-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: different
          http:
            paths:
              - path: /bar
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://auth/foo" with the header "Authorization" set to "Basic dXNlcjpwYXNzd29yZA=="
    Then the response status-code must be 200
    When the httpbun authentication service is stopped
    When I send a "GET" request to "http://auth/foo" with the header "Authorization" set to "Basic dXNlcjpwYXNzd29yZA=="
    Then the response status-code must be 200
    When I send a "GET" request to "http://auth/bar" with the header "Authorization" set to "Basic dXNlcjpwYXNzd29yZA=="
    Then the response status-code must be 500

  Scenario: when external authentication with caching is configured should deny login for different servers
    Given a new random namespace
    Given an httpbun authentication service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-auth-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: auth
          http:
            paths:
              - path: /foo
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: bar-auth-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: auth
          http:
            paths:
              - path: /bar
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-different-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: different
          http:
            paths:
              - path: /foo
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: bar-different-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: different
          http:
            paths:
              - path: /bar
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://auth/foo" with the header "Authorization" set to "Basic dXNlcjpwYXNzd29yZA=="
    Then the response status-code must be 200
    When the httpbun authentication service is stopped
    When I send a "GET" request to "http://auth/foo" with the header "Authorization" set to "Basic dXNlcjpwYXNzd29yZA=="
    Then the response status-code must be 200
    When I send a "GET" request to "http://different/foo" with the header "Authorization" set to "Basic dXNlcjpwYXNzd29yZA=="
    Then the response status-code must be 500

  Scenario: when external authentication with caching is configured should redirect to signin url when not signed in
    Given a new random namespace
    Given an httpbun authentication service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-auth-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: auth
          http:
            paths:
              - path: /foo
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: bar-auth-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: auth
          http:
            paths:
              - path: /bar
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-different-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: different
          http:
            paths:
              - path: /foo
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: bar-different-ing
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/basic-auth/user/password"
        nginx.ingress.kubernetes.io/auth-signin: "http://$host/auth/start"
        nginx.ingress.kubernetes.io/auth-cache-key: "fixed"
        nginx.ingress.kubernetes.io/auth-cache-duration: "200 201 401 30m"
    spec:
      rules:
        - host: different
          http:
            paths:
              - path: /bar
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
