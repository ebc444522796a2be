# Ported from kubernetes/ingress-nginx test/e2e/annotations/clientbodybuffersize.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# Each case also inspects nginx.conf's `client_body_buffer_size` line (a
# buffer size has no effect a client sees); the request each sends is
# ported.
@ingress-nginx
Feature: ingress-nginx client-body-buffer-size annotation

  Scenario: should set client_body_buffer_size to 1000
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: client-body-buffer-size.com
      annotations:
        nginx.ingress.kubernetes.io/client-body-buffer-size: "1000"
    spec:
      rules:
        - host: client-body-buffer-size.com
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
    When I send a "GET" request to "http://client-body-buffer-size.com/"
    Then the response status-code must be 200

  Scenario: should set client_body_buffer_size to 1K
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: client-body-buffer-size.com
      annotations:
        nginx.ingress.kubernetes.io/client-body-buffer-size: "1K"
    spec:
      rules:
        - host: client-body-buffer-size.com
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
    When I send a "GET" request to "http://client-body-buffer-size.com/"
    Then the response status-code must be 200

  Scenario: should set client_body_buffer_size to 1k
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: client-body-buffer-size.com
      annotations:
        nginx.ingress.kubernetes.io/client-body-buffer-size: "1k"
    spec:
      rules:
        - host: client-body-buffer-size.com
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
    When I send a "GET" request to "http://client-body-buffer-size.com/"
    Then the response status-code must be 200

  Scenario: should set client_body_buffer_size to 1m
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: client-body-buffer-size.com
      annotations:
        nginx.ingress.kubernetes.io/client-body-buffer-size: "1m"
    spec:
      rules:
        - host: client-body-buffer-size.com
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
    When I send a "GET" request to "http://client-body-buffer-size.com/"
    Then the response status-code must be 200

  Scenario: should set client_body_buffer_size to 1M
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: client-body-buffer-size.com
      annotations:
        nginx.ingress.kubernetes.io/client-body-buffer-size: "1M"
    spec:
      rules:
        - host: client-body-buffer-size.com
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
    When I send a "GET" request to "http://client-body-buffer-size.com/"
    Then the response status-code must be 200

  Scenario: should not set client_body_buffer_size to invalid 1b
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: client-body-buffer-size.com
      annotations:
        nginx.ingress.kubernetes.io/client-body-buffer-size: "1b"
    spec:
      rules:
        - host: client-body-buffer-size.com
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
    When I send a "GET" request to "http://client-body-buffer-size.com/"
    Then the response status-code must be 200
