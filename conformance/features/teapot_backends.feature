@teapot
Feature: Teapot backends, scaling and TLS
  Endpoint changes are picked up without a restart, an empty backend answers
  503, and TLS is terminated with the certificate of the matching Secret.

  Scenario: A backend scaled to zero answers 503, and recovers when scaled up
    Given a new random namespace
    Given an Ingress resource named "elastic" with this spec:
    """
    ingressClassName: teapot
    rules:
      - host: elastic.example.test
        http:
          paths:
            - path: /
              pathType: Prefix
              backend:
                service:
                  name: elastic-svc
                  port:
                    number: 9000
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Then The backend deployment "elastic-svc" for the ingress resource is scaled to 0
    When I send 4 requests to "http://elastic.example.test/work"
    Then all the responses status-code must be 503 and the response body should contain the IP address of 0 different Kubernetes pods
    Then The backend deployment "elastic-svc" for the ingress resource is scaled to 3
    When I send 30 requests to "http://elastic.example.test/work"
    Then all the responses status-code must be 200 and the response body should contain the IP address of 3 different Kubernetes pods
    Then The backend deployment "elastic-svc" for the ingress resource is scaled to 1
    When I send 10 requests to "http://elastic.example.test/work"
    Then all the responses status-code must be 200 and the response body should contain the IP address of 1 different Kubernetes pods

  Scenario: A wildcard TLS Secret serves every single-label subdomain
    Given a new random namespace
    Given a self-signed TLS secret named "wild-tls" for the "*.secure.example.test" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: secure
    spec:
      tls:
        - hosts:
            - "*.secure.example.test"
          secretName: wild-tls
      rules:
        - host: "*.secure.example.test"
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: secure-web
                    port:
                      name: https-web
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "PATCH" request to "https://shop.secure.example.test/cart"
    Then the secure connection must verify the "shop.secure.example.test" hostname
    And the response status-code must be 200
    And the response must be served by the "secure-web" service
    And the request method must be "PATCH"
    And the request host must be "shop.secure.example.test"
    And the request path must be "/cart"

  Scenario: Two Ingresses in one namespace route side by side
    Given a new random namespace
    Given an Ingress resource named "first" with this spec:
    """
    rules:
      - host: one.example.test
        http:
          paths:
            - path: /
              pathType: Prefix
              backend:
                service:
                  name: one-svc
                  port:
                    number: 8081
    """
    Given an Ingress resource named "second" with this spec:
    """
    rules:
      - host: two.example.test
        http:
          paths:
            - path: /
              pathType: Prefix
              backend:
                service:
                  name: two-svc
                  port:
                    number: 8082
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://one.example.test/"
    Then the response must be served by the "one-svc" service
    When I send a "GET" request to "http://two.example.test/"
    Then the response must be served by the "two-svc" service
    When I send a "GET" request to "http://three.example.test/"
    Then the response status-code must be 404
