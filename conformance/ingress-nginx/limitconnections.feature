# Ported from kubernetes/ingress-nginx test/e2e/annotations/limitconnections.go as data:
# the Ingress is created without the annotation, then updated with
# `limit-connections: 8`; 20 requests at once, each held 2 s by the
# backend (upstream's slow echo holds `/sleep/10` 10 s: the runner gives
# a request 10 s), must be 8 answered 200 and 12 answered 503.
@ingress-nginx
Feature: ingress-nginx limit-connections annotation

  Scenario: should limit-connections
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: limit-connections
    spec:
      rules:
        - host: limit-connections
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
    When the Ingress resource named "limit-connections" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: limit-connections
      annotations:
        nginx.ingress.kubernetes.io/limit-connections: "8"
    spec:
      rules:
        - host: limit-connections
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
    When I send 20 concurrent requests to "http://limit-connections/" with the header "X-Echo-Delay-Ms" set to "2000"
    Then 8 of the responses status-code must be 200
    And 12 of the responses status-code must be 503
