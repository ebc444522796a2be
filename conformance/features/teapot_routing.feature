@teapot
Feature: Teapot routing beyond the upstream suite
  Written for teapot in the format of the Kubernetes
  ingress-controller-conformance suite. They use only the upstream step
  vocabulary plus the single-header assertions the runner adds.

  Background:
    Given an Ingress resource in a new random namespace
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: shop-paths
    spec:
      rules:
        - host: shop.example.test
          http:
            paths:
              - path: /api
                pathType: Prefix
                backend:
                  service:
                    name: api-prefix
                    port:
                      number: 80
              - path: /api/v2
                pathType: Prefix
                backend:
                  service:
                    name: api-v2
                    port:
                      number: 80
              - path: /api/v2/status
                pathType: Exact
                backend:
                  service:
                    name: status-exact
                    port:
                      number: 80
              - path: /static/
                pathType: ImplementationSpecific
                backend:
                  service:
                    name: static-files
                    port:
                      name: files
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed

  Scenario Outline: The longest matching path wins, Exact before Prefix
    When I send a "<method>" request to "http://shop.example.test<path>"
    Then the response status-code must be 200
    And the response must be served by the "<service>" service
    And the request method must be "<method>"
    And the request path must be "<path>"
    And the request host must be "shop.example.test"

    Examples:
      | method  | path               | service      |
      | GET     | /api               | api-prefix   |
      | POST    | /api/              | api-prefix   |
      | PUT     | /api/v1/orders     | api-prefix   |
      | GET     | /api/v2            | api-v2       |
      | OPTIONS | /api/v2/status     | status-exact |
      | DELETE  | /api/v2/status/old | api-v2       |
      | GET     | /static            | static-files |
      | GET     | /static/app.js     | static-files |

  Scenario Outline: Paths that match no rule get 404
    When I send a "GET" request to "http://shop.example.test<path>"
    Then the response status-code must be 404

    Examples:
      | path      |
      | /         |
      | /apiv2    |
      | /API      |
      | /statics  |

  Scenario: Host names match case-insensitively and ignore the port
    When I send a "GET" request to "http://SHOP.Example.Test:8080/api/v2/x"
    Then the response status-code must be 200
    And the response must be served by the "api-v2" service
    And the request host must be "SHOP.Example.Test:8080"

  Scenario: The query string reaches the backend unchanged
    When I send a "GET" request to "http://shop.example.test/api/search?q=tea&page=2"
    Then the response status-code must be 200
    And the response must be served by the "api-prefix" service
    And the request path must be "/api/search?q=tea&page=2"

  Scenario: The proxy answers with the headers of an ordinary HTTP/1.1 server
    When I send a "GET" request to "http://shop.example.test/api"
    Then the response status-code must be 200
    And the response proto must be "HTTP/1.1"
    And the response header "Content-Type" must contain "application/json"
    And the response must contain the header "Date"
    And the request proto must be "HTTP/1.1"
    And the request header "User-Agent" must be "Go-http-client/1.1"
    And the request must contain the header "X-Forwarded-For"
    And the request header "Connection" must not be present
