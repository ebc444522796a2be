# Ported from kubernetes/ingress-nginx test/e2e/annotations/alias.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# The 404 body (nginx's "404 Not Found" page) is not compared.
@ingress-nginx
Feature: ingress-nginx server-alias annotation

  Scenario: should return status code 200 for host 'foo' and 404 for 'bar'
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
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/"
    Then the response status-code must be 200
    And the request host must be "foo"
    When I send a "GET" request to "http://bar/"
    Then the response status-code must be 404

  Scenario: should return status code 200 for host 'foo' and 'bar'
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
      annotations:
        nginx.ingress.kubernetes.io/server-alias: "bar"
    spec:
      rules:
        - host: foo
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
    When I send a "GET" request to "http://foo/"
    Then the response status-code must be 200
    And the request host must be "foo"
    When I send a "GET" request to "http://bar/"
    Then the response status-code must be 200
    And the request host must be "bar"

  Scenario: should return status code 200 for hosts defined in two ingresses, different path with one alias
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: app-a
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /app-a
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
      name: app-b
      annotations:
        nginx.ingress.kubernetes.io/server-alias: "bar"
    spec:
      rules:
        - host: foo
          http:
            paths:
              - path: /app-b
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo/app-a"
    Then the response status-code must be 200
    And the request host must be "foo"
    When I send a "GET" request to "http://bar/app-a"
    Then the response status-code must be 200
    And the request host must be "bar"
