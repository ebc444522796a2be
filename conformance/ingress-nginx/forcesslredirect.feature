# Ported from kubernetes/ingress-nginx test/e2e/annotations/forcesslredirect.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations; cases that inspect the generated nginx.conf check the
# header or status that configuration produces.
@ingress-nginx
Feature: ingress-nginx force-ssl-redirect annotation

  Scenario: should redirect to https
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: forcesslredirect
      annotations:
        nginx.ingress.kubernetes.io/force-ssl-redirect: "true"
    spec:
      rules:
        - host: forcesslredirect.bar.com
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
    When I send a "GET" request to "http://forcesslredirect.bar.com/" without following redirects
    Then the response status-code must be 308
    And the response header "Location" must be "https://forcesslredirect.bar.com"
