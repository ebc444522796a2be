# Ported from kubernetes/ingress-nginx test/e2e/annotations/redirect.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations; cases that inspect the generated nginx.conf check the
# header or status that configuration produces.
@ingress-nginx
Feature: ingress-nginx permanent-redirect permanent-redirect-code annotations

  Scenario: should respond with a standard redirect code
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: redirect
      annotations:
        nginx.ingress.kubernetes.io/permanent-redirect: "http://redirect.example.com"
    spec:
      rules:
        - host: redirect
          http:
            paths:
              - path: /something
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://redirect/something" without following redirects
    Then the response status-code must be 301
    And the response header "Location" must be "http://redirect.example.com"

  Scenario: should respond with a custom redirect code
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: redirect
      annotations:
        nginx.ingress.kubernetes.io/permanent-redirect: "http://redirect.example.com"
        nginx.ingress.kubernetes.io/permanent-redirect-code: "302"
    spec:
      rules:
        - host: redirect
          http:
            paths:
              - path: /something
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://redirect/something" without following redirects
    Then the response status-code must be 302
    And the response header "Location" must be "http://redirect.example.com"
