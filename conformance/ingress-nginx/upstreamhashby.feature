# Ported from kubernetes/ingress-nginx test/e2e/annotations/upstreamhashby.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# The echo Deployment has six replicas (scaled after the Ingress); the
# 100 requests count the pods that answer.
@ingress-nginx
Feature: ingress-nginx upstream-hash-by annotations

  Scenario: should connect to the same pod
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: upstream-hash-by.foo.com
      annotations:
        nginx.ingress.kubernetes.io/upstream-hash-by: "$request_uri"
    spec:
      rules:
        - host: upstream-hash-by.foo.com
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
    Then The backend deployment "echo" for the ingress resource is scaled to 6
    When I send 100 requests to "http://upstream-hash-by.foo.com/"
    Then all the responses status-code must be 200 and the response body should contain the IP address of 1 different Kubernetes pods

  Scenario: should connect to the same subset of pods
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: upstream-hash-by.foo.com
      annotations:
        nginx.ingress.kubernetes.io/upstream-hash-by: "$request_uri"
        nginx.ingress.kubernetes.io/upstream-hash-by-subset: "true"
        nginx.ingress.kubernetes.io/upstream-hash-by-subset-size: "3"
    spec:
      rules:
        - host: upstream-hash-by.foo.com
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
    Then The backend deployment "echo" for the ingress resource is scaled to 6
    When I send 100 requests to "http://upstream-hash-by.foo.com/"
    Then all the responses status-code must be 200 and the response body should contain the IP address of 3 different Kubernetes pods
