# Ported from kubernetes/ingress-nginx test/e2e/annotations/upstreamvhost.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# The case inspects nginx.conf (`proxy_set_header Host`); here the Host
# the backend receives is checked.
@ingress-nginx
Feature: ingress-nginx upstream-vhost annotation

  Scenario: set host to upstreamvhost.bar.com
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: upstreamvhost.foo.com
      annotations:
        nginx.ingress.kubernetes.io/upstream-vhost: "upstreamvhost.bar.com"
    spec:
      rules:
        - host: upstreamvhost.foo.com
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
    When I send a "GET" request to "http://upstreamvhost.foo.com/"
    Then the response status-code must be 200
    And the request host must be "upstreamvhost.bar.com"
