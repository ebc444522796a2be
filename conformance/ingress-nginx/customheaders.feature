# Ported from kubernetes/ingress-nginx test/e2e/annotations/customheaders.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# The ConfigMap is named without its namespace (upstream writes
# `NAMESPACE/custom-headers`; the scenario's namespace is random) and
# the controller ConfigMap's `global-allowed-response-headers`, which
# upstream sets to allow both names, has no counterpart: a scenario
# cannot set a fleet flag. The 503 body (nginx's page) is not compared.
@ingress-nginx
Feature: ingress-nginx custom-headers annotation

  Scenario: should return status code 200 when no custom-headers is configured
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: custom-headers
    spec:
      rules:
        - host: custom-headers
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
    When I send a "GET" request to "http://custom-headers/"
    Then the response status-code must be 200
    And the request host must be "custom-headers"

  Scenario: should return status code 503 when custom-headers is configured with an invalid secret
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: custom-headers
      annotations:
        nginx.ingress.kubernetes.io/custom-headers: "custom-headers"
    spec:
      rules:
        - host: custom-headers
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
    When I send a "GET" request to "http://custom-headers/"
    Then the response status-code must be 503

  Scenario: should set "more_set_headers 'My-Custom-Header' '42';" when custom-headers are set
    Given a new random namespace
    Given a ConfigMap resource
    """
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: custom-headers
    data:
      My-Custom-Header: "42"
      My-Custom-Header-Dollar: "$remote_addr"
    """
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: custom-headers
      annotations:
        nginx.ingress.kubernetes.io/custom-headers: "custom-headers"
    spec:
      rules:
        - host: custom-headers
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
    When I send a "GET" request to "http://custom-headers/"
    Then the response status-code must be 200
    And the response header "My-Custom-Header" must contain "42"
    And the response header "My-Custom-Header-Dollar" must contain "$remote_addr"
