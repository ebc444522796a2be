# Ported from kubernetes/ingress-nginx test/e2e/annotations/ipdenylist.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations; cases that inspect the generated nginx.conf check the
# header or status that configuration produces.
@ingress-nginx
Feature: ingress-nginx denylist-source-range annotation (from the test client, 127.0.0.1)

  Scenario: only deny explicitly denied IPs, allow all others
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: ipdenylist
      annotations:
        nginx.ingress.kubernetes.io/denylist-source-range: "18.0.0.0/8, 56.0.0.1"
    spec:
      rules:
        - host: ipdenylist.foo.com
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
    When I send a "GET" request to "http://ipdenylist.foo.com/"
    Then the response status-code must be 200

  Scenario: only allow explicitly allowed IPs, deny all others
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: ipdenylist
      annotations:
        nginx.ingress.kubernetes.io/denylist-source-range: "18.1.0.0/16, 56.0.0.0/8"
        nginx.ingress.kubernetes.io/whitelist-source-range: "18.0.0.0/8, 55.0.0.0/8"
    spec:
      rules:
        - host: ipdenylist.foo.com
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
    When I send a "GET" request to "http://ipdenylist.foo.com/"
    Then the response status-code must be 403
