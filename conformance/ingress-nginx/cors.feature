# Ported from kubernetes/ingress-nginx test/e2e/annotations/cors.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations; cases that inspect the generated nginx.conf check the
# header or status that configuration produces.
@ingress-nginx
Feature: ingress-nginx cors-* annotations

  Scenario: should enable cors
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "*"
    And the response header "Access-Control-Allow-Methods" must be "GET, PUT, POST, DELETE, PATCH, OPTIONS"
    And the response header "Access-Control-Allow-Headers" must be "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization"
    And the response header "Access-Control-Max-Age" must be "1728000"
    And the response header "Access-Control-Allow-Credentials" must be "true"

  Scenario: should set cors methods to only allow POST, GET
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-methods: "POST, GET"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Methods" must be "POST, GET"

  Scenario: should set cors max-age
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-max-age: "200"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/"
    Then the response status-code must be 200
    And the response header "Access-Control-Max-Age" must be "200"

  Scenario: should disable cors allow credentials
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-credentials: "false"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Credentials" must not be present

  Scenario: should allow origin for cors
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "https://origin.cors.com:8080"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "https://origin.cors.com:8080"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "https://origin.cors.com:8080"

  Scenario: should allow headers for cors
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-headers: "DNT, User-Agent"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Headers" must be "DNT, User-Agent"

  Scenario: should expose headers for cors
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-expose-headers: "X-CustomResponseHeader, X-CustomSecondHeader"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/"
    Then the response status-code must be 200
    And the response header "Access-Control-Expose-Headers" must be "X-CustomResponseHeader, X-CustomSecondHeader"

  Scenario: should allow - single origin for multiple cors values
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "https://origin.cors.com:8080, https://origin2.cors.com"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "https://origin.cors.com:8080"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "https://origin.cors.com:8080"

  Scenario: should not allow - single origin for multiple cors values
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "http://origin2.cors.com, https://origin.com"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://no.origin.com"
    And the response header "Access-Control-Allow-Origin" must not be present

  Scenario: should allow correct origins - single origin for multiple cors values
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "origin.cors.com:8080, https://origin2.cors.com, https://origin.com"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "origin.cors.com:8080"
    And the response header "Access-Control-Allow-Origin" must not be present
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "https://origin2.cors.com"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "https://origin2.cors.com"
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "https://origin.com"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "https://origin.com"

  Scenario: should not break functionality
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "*"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "*"

  Scenario: should not break functionality - without `*`
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "*"

  Scenario: should not break functionality with extra domain
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "*, foo.bar.com"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "*"

  Scenario: should not match
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "https://foo.bar.com"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "https://fooxbar.com"
    And the response header "Access-Control-Allow-Origin" must not be present

  Scenario: should allow - single origin with required port
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "http://origin.cors.com:8080, http://origin.com:8080"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://origin.com:8080"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "http://origin.com:8080"

  Scenario: should not allow - single origin with port and origin without port
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "https://origin2.cors.com, http://origin.com"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://origin.com:8080"
    And the response header "Access-Control-Allow-Origin" must not be present

  Scenario: should not allow - single origin without port and origin with required port
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "http://origin.cors.com:8080, http://origin.com:8080"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://origin.com"
    And the response header "Access-Control-Allow-Origin" must not be present

  Scenario: should allow - matching origin with wildcard origin (2 subdomains)
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "http://*.origin.cors.com, http://*.origin.com:8080"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://foo.origin.cors.com"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "http://foo.origin.cors.com"
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://bar-foo.origin.com:8080"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "http://bar-foo.origin.com:8080"

  Scenario: should not allow - unmatching origin with wildcard origin (2 subdomains)
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "http://*.origin.cors.com, http://*.origin.com:8080"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://bar.foo.origin.cors.com"
    And the response header "Access-Control-Allow-Origin" must not be present

  Scenario: should allow - matching origin+port with wildcard origin
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "http://*.origin.cors.com:8080, http://*.origin.com:8080"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://abc.origin.com:8080"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "http://abc.origin.com:8080"
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://abc.origin.cors.com:8080"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "http://abc.origin.cors.com:8080"

  Scenario: should not allow - portless origin with wildcard origin
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "http://origin.cors.com:8080, http://*.origin.com:8080"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://abc.origin.com"
    And the response header "Access-Control-Allow-Origin" must not be present

  Scenario: should allow correct origins - missing subdomain + origin with wildcard origin and correct origin
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "http://origin.cors.com:8080, http://*.origin.com:8080"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://origin.com:8080"
    And the response header "Access-Control-Allow-Origin" must not be present
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://origin.cors.com:8080"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "http://origin.cors.com:8080"

  Scenario: should allow - missing origins (should allow all origins)
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "      "
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://origin.com"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "*"
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "http://book.origin.com"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "*"
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "test.origin.com"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "*"

  Scenario: should allow correct origin but not others - cors allow origin annotations contain trailing comma
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "https://origin-123.cors.com:8080,   ,https://origin-321.cors.com:8080,"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "https://origin-123.cors.com:8080"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "https://origin-123.cors.com:8080"
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "https://origin-321.cors.com:8080"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "https://origin-321.cors.com:8080"
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "https://unknown.cors.com:8080"
    And the response header "Access-Control-Allow-Origin" must not be present

  Scenario: should allow - origins with non-http[s] protocols
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cors
      annotations:
        nginx.ingress.kubernetes.io/enable-cors: "true"
        nginx.ingress.kubernetes.io/cors-allow-origin: "test://localhost, tauri://localhost:3000"
    spec:
      rules:
        - host: cors.foo.com
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
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "test://localhost"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "test://localhost"
    When I send a "GET" request to "http://cors.foo.com/" with the header "Origin" set to "tauri://localhost:3000"
    Then the response status-code must be 200
    And the response header "Access-Control-Allow-Origin" must be "tauri://localhost:3000"
