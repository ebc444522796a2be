# Ported from kubernetes/ingress-nginx test/e2e/annotations/ipallowlist.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations; cases that inspect the generated nginx.conf check the
# header or status that configuration produces.
@ingress-nginx
Feature: ingress-nginx allowlist-source-range annotation (the test client, 127.0.0.1, is outside the list)

  Scenario: should set valid ip allowlist range
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: ipallowlist
      annotations:
        nginx.ingress.kubernetes.io/allowlist-source-range: "18.0.0.0/8, 56.0.0.0/8"
    spec:
      rules:
        - host: ipallowlist.foo.com
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
    When I send a "GET" request to "http://ipallowlist.foo.com/"
    Then the response status-code must be 403
