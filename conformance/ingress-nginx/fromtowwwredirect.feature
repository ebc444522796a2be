# Ported from kubernetes/ingress-nginx test/e2e/annotations/fromtowwwredirect.go
# as data: each ginkgo case is a scenario with the same Ingress, requests and
# expectations. "should redirect from www HTTPS to HTTPS" is not ported: it
# checks a header a configuration-snippet sets (snippets are refused) on the
# nip.io name of the controller's address.
@ingress-nginx
Feature: ingress-nginx from-to-www-redirect annotation

  Scenario: should redirect from www HTTP to HTTP
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: fromtowwwredirect.bar.com
      annotations:
        nginx.ingress.kubernetes.io/from-to-www-redirect: "true"
    spec:
      rules:
        - host: fromtowwwredirect.bar.com
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
    When I send a "GET" request to "http://www.fromtowwwredirect.bar.com/foo" without following redirects
    Then the response status-code must be 308
    And the response header "Location" must be "http://fromtowwwredirect.bar.com:80/foo"
