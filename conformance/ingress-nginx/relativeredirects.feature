# Ported from kubernetes/ingress-nginx test/e2e/annotations/relativeredirects.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
@ingress-nginx
Feature: ingress-nginx relative-redirects annotation

  Scenario: should respond with absolute URL in Location
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: rr.foo.com
      annotations:
        nginx.ingress.kubernetes.io/permanent-redirect: "/new-location"
        nginx.ingress.kubernetes.io/relative-redirects: "false"
    spec:
      rules:
        - host: rr.foo.com
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
    When I send a "GET" request to "http://rr.foo.com/something" without following redirects
    Then the response status-code must be 301
    And the response header "Location" must be "http://rr.foo.com/new-location"

  Scenario: should respond with relative URL in Location
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: rr.foo.com
      annotations:
        nginx.ingress.kubernetes.io/permanent-redirect: "/new-location"
        nginx.ingress.kubernetes.io/relative-redirects: "true"
    spec:
      rules:
        - host: rr.foo.com
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
    When I send a "GET" request to "http://rr.foo.com/something" without following redirects
    Then the response status-code must be 301
    And the response header "Location" must be "/new-location"
