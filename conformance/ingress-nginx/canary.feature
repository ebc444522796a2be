# Ported from kubernetes/ingress-nginx test/e2e/annotations/canary.go as data:
# each ginkgo case is a scenario with the same Ingresses (the mainline to
# the "httpbun" service, the canary to "echo-canary"), requests and
# expectations; where a case repeats a request 50 times, it is sent once.
# A case that modifies an Ingress writes its whole new manifest over it.
# The multiple-paths crash case checks that the mainline is still served.
# The split cases send 200 requests, as upstream, and want each service to
# answer at least 40 % of them (upstream's TestMainlineCanaryDistribution).
# The catch-all and server-name cases inspect nginx.conf's server blocks;
# here what they configure: the catch-all is the mainline's, and a host
# only a canary names has no route (404). In the sticky affinity cases,
# the 50 requests with the cookie are two.
@ingress-nginx
Feature: ingress-nginx canary annotations

  Scenario: should response with a 200 status from the mainline upstream when requests are made to the mainline ingress
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service

  Scenario: should return 404 status for requests to the canary if no matching ingress is found
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "always"
    Then the response status-code must be 404

  Scenario: should route requests to the correct upstream if mainline ingress is created before the canary ingress
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "never"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "always"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service

  Scenario: should route requests to the correct upstream if mainline ingress is created after the canary ingress
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "never"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "always"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service

  Scenario: when canaried by header with no value should route requests to the correct upstream
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "always"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "never"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "badheadervalue"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service

  Scenario: when canaried by header with value should route requests to the correct upstream
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
        nginx.ingress.kubernetes.io/canary-by-header-value: "DoCanary"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "DoCanary"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "always"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "never"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "otherheadervalue"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service

  Scenario: when canaried by header with value and pattern should route requests to the correct upstream (pattern)
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
        nginx.ingress.kubernetes.io/canary-by-header-pattern: "^Do[A-Z][a-z]+y$"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "DoCanary"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "Docanary"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service

  Scenario: when canaried by header with value and pattern should route requests to the correct upstream (value and pattern)
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
        nginx.ingress.kubernetes.io/canary-by-header-value: "DoCanary"
        nginx.ingress.kubernetes.io/canary-by-header-pattern: "^Do[A-Z][a-z]+y$"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "DoCananry"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service

  Scenario: should routes to mainline upstream when the given Regex causes error
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
        nginx.ingress.kubernetes.io/canary-by-header-pattern: "[][**da?$&*"
        nginx.ingress.kubernetes.io/canary-by-cookie: "CanaryByCookie"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "DoCanary" and the header "Cookie" set to "CanaryByCookie=always"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service

  Scenario: when canaried by header with value and cookie should route requests to the correct upstream
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
        nginx.ingress.kubernetes.io/canary-by-header-value: "DoCanary"
        nginx.ingress.kubernetes.io/canary-by-cookie: "CanaryByCookie"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "otherheadervalue" and the header "Cookie" set to "CanaryByCookie=always"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service

  Scenario: when canaried by cookie respects always and never values
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-cookie: "Canary-By-Cookie"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "Cookie" set to "Canary-By-Cookie=always"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service
    When I send a "GET" request to "http://foo/info" with the header "Cookie" set to "Canary-By-Cookie=never"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service
    When I send a "GET" request to "http://foo/info" with the header "Cookie" set to "Canary-By-Cookie=badcookievalue"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service

  Scenario: should route requests only to mainline if canary weight is 0
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-weight: "0"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service

  Scenario: should route requests only to canary if canary weight is 100
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-weight: "100"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service

  Scenario: should route requests only to canary if canary weight is equal to canary weight total
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-weight: "1000"
        nginx.ingress.kubernetes.io/canary-weight-total: "1000"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service

  Scenario: canary affinity behavior always routes traffic to canary if first request was affinitized to canary (default behavior)
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "aff"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "ForceCanary"
        nginx.ingress.kubernetes.io/canary-by-header-value: "yes"
        nginx.ingress.kubernetes.io/canary-weight: "1"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "ForceCanary" set to "yes"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service
    When I send a "GET" request to "http://foo/info" with the cookie "aff" of the last response
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service
    When I send a "GET" request to "http://foo/info" with the cookie "aff" of the last response
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service

  Scenario: canary affinity behavior always routes traffic to canary if first request was affinitized to canary (explicit sticky behavior)
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "aff"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "ForceCanary"
        nginx.ingress.kubernetes.io/canary-by-header-value: "yes"
        nginx.ingress.kubernetes.io/canary-weight: "1"
        nginx.ingress.kubernetes.io/affinity-canary-behavior: "sticky"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "ForceCanary" set to "yes"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service
    When I send a "GET" request to "http://foo/info" with the cookie "aff" of the last response
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service
    When I send a "GET" request to "http://foo/info" with the cookie "aff" of the last response
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service

  Scenario: should route requests to the correct upstream if the mainline ingress is modified
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When the Ingress resource named "foo" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
      annotations:
        foo: "bar"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "never"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "always"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service

  Scenario: should route requests to the correct upstream if the canary ingress is modified
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When the Ingress resource named "foo-canary" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader2"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader2" set to "never"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader2" set to "always"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service

  Scenario: does not crash when canary ingress has multiple paths to the same non-matching backend
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /foo
                pathType: Prefix
                backend:
                  service:
                    name: httpy-svc-canary
                    port:
                      number: 80
              - path: /bar
                pathType: Prefix
                backend:
                  service:
                    name: httpy-svc-canary
                    port:
                      number: 80
    """
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service

  Scenario: should route requests split between mainline and canary if canary weight is 50
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-weight: "50"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send 200 requests to "http://foo/info"
    Then all the responses status-code must be 200 and the response body should contain the IP address of 2 different Kubernetes pods
    And the responses must come from 2 different services, each at least 80 times

  Scenario: should route requests split between mainline and canary if canary weight is 100 and weight total is 200
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-weight: "100"
        nginx.ingress.kubernetes.io/canary-weight-total: "200"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send 200 requests to "http://foo/info"
    Then all the responses status-code must be 200 and the response body should contain the IP address of 2 different Kubernetes pods
    And the responses must come from 2 different services, each at least 80 times

  Scenario: canary affinity behavior routes traffic to either mainline or canary backend (legacy behavior)
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "aff"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "ForceCanary"
        nginx.ingress.kubernetes.io/canary-by-header-value: "yes"
        nginx.ingress.kubernetes.io/canary-weight: "50"
        nginx.ingress.kubernetes.io/affinity-canary-behavior: "legacy"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info" with the header "ForceCanary" set to "yes"
    Then the response status-code must be 200
    And the response must be served by the "echo-canary" service
    And the response header "Set-Cookie" must be absent
    When I send 200 requests to "http://foo/info"
    Then all the responses status-code must be 200 and the response body should contain the IP address of 2 different Kubernetes pods
    And the responses must come from 2 different services, each at least 80 times

  Scenario: should not use canary as a catch-all server
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
    spec:
      defaultBackend:
        service:
          name: echo-canary
          port:
            number: 80
    """
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      defaultBackend:
        service:
          name: httpbun
          port:
            number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/info"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service
    When I send a "GET" request to "http://foo/info" with the header "CanaryByHeader" set to "never"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service

  Scenario: should not use canary with domain as a server
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo-canary
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-by-header: "CanaryByHeader"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: echo-canary
                    port:
                      number: 80
    """
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: bar
    spec:
      rules:
        - host: bar
          http:
            paths:
              - path: /info
                pathType: Prefix
                backend:
                  service:
                    name: httpbun
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://bar/info"
    Then the response status-code must be 200
    And the response must be served by the "httpbun" service
    When I send a "GET" request to "http://foo/info"
    Then the response status-code must be 404
