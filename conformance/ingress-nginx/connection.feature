# Ported from kubernetes/ingress-nginx test/e2e/annotations/connection.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
@ingress-nginx
Feature: ingress-nginx connection-proxy-header annotation

  Scenario: set connection header to keep-alive
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: connection.foo.com
      annotations:
        nginx.ingress.kubernetes.io/connection-proxy-header: "keep-alive"
    spec:
      rules:
        - host: connection.foo.com
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
    When I send a "GET" request to "http://connection.foo.com/"
    Then the response status-code must be 200
    And the request header "Connection" must be "keep-alive"
