# Where ingress-nginx's routing and redirects decide differently from a
# plain reading of the Ingress API, teapot decides as ingress-nginx does
# (docs/migrate-from-ingress-nginx.md).
Feature: ingress-nginx's routing rules

  Scenario: temporal-redirect wins over permanent-redirect
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: both-redirects
      annotations:
        nginx.ingress.kubernetes.io/permanent-redirect: "https://permanent.example.com/"
        nginx.ingress.kubernetes.io/temporal-redirect: "https://temporal.example.com/"
    spec:
      rules:
        - host: redirects.example
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
    When I send a "GET" request to "http://redirects.example/" without following redirects
    Then the response status-code must be 302
    And the response header "Location" must be "https://temporal.example.com/"

  Scenario: A Prefix path and its trailing-slash twin on two Ingresses are two rules
    Given a new random namespace
    Given an Ingress resource named "test-ingress-1" with this spec:
    """
    rules:
      - host: test.com
        http:
          paths:
            - path: /foo/bar
              pathType: Prefix
              backend:
                service:
                  name: service1
                  port:
                    number: 80
    """
    Given an Ingress resource named "test-ingress-2" with this spec:
    """
    rules:
      - host: test.com
        http:
          paths:
            - path: /foo/bar/
              pathType: Prefix
              backend:
                service:
                  name: service2
                  port:
                    number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://test.com/foo/bar"
    Then the response status-code must be 200
    And the response must be served by the "service1" service
    When I send a "GET" request to "http://test.com/foo/bar/"
    Then the response status-code must be 200
    And the response must be served by the "service2" service
    When I send a "GET" request to "http://test.com/foo/bar/1"
    Then the response status-code must be 200
    And the response must be served by the "service2" service

  Scenario: An Ingress with TLS redirects plain HTTP to HTTPS without an annotation
    Given a new random namespace
    Given a self-signed TLS secret named "secure-tls" for the "secure.example.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: secure
    spec:
      tls:
        - hosts:
            - secure.example.com
          secretName: secure-tls
      rules:
        - host: secure.example.com
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
    When I send a "GET" request to "http://secure.example.com/cart" without following redirects
    Then the response status-code must be 308
    And the response header "Location" must be "https://secure.example.com/cart"

  Scenario: use-regex on one Ingress makes the host's other paths regexes
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: regex
      annotations:
        nginx.ingress.kubernetes.io/use-regex: "true"
    spec:
      rules:
        - host: regex.example.com
          http:
            paths:
              - path: /api/v[0-9]+
                pathType: ImplementationSpecific
                backend:
                  service:
                    name: api
                    port:
                      number: 80
    """
    Given an Ingress resource named "plain" with this spec:
    """
    rules:
      - host: regex.example.com
        http:
          paths:
            - path: /Static
              pathType: Prefix
              backend:
                service:
                  name: web
                  port:
                    number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://regex.example.com/static/app.js"
    Then the response status-code must be 200
    And the response must be served by the "web" service
