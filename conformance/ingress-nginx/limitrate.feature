# Ported from kubernetes/ingress-nginx test/e2e/annotations/limitrate.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# The case inspects nginx.conf (`limit_rate 1k;`, then `90k` after an
# update); here the rate is what the client sees: a response of more
# than 4 KiB (the echo reflects a 4 KiB request header) at 1 KiB/s takes
# at least two seconds. After the update the request is served.
@ingress-nginx
Feature: ingress-nginx limit-rate annotation

  Scenario: Check limit-rate annotation
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: limit-rate-annotation
      annotations:
        nginx.ingress.kubernetes.io/proxy-buffering: "on"
        nginx.ingress.kubernetes.io/limit-rate: "1"
    spec:
      rules:
        - host: limit-rate-annotation
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
    When I send a "GET" request to "http://limit-rate-annotation/" with the header "X-Pad" of 4096 bytes
    Then the response status-code must be 200
    And the response must have taken at least 2000 ms
    When the Ingress resource named "limit-rate-annotation" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: limit-rate-annotation
      annotations:
        nginx.ingress.kubernetes.io/proxy-buffering: "on"
        nginx.ingress.kubernetes.io/limit-rate: "90"
    spec:
      rules:
        - host: limit-rate-annotation
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
    When I send a "GET" request to "http://limit-rate-annotation/"
    Then the response status-code must be 200
