# Ported from kubernetes/ingress-nginx test/e2e/annotations/preservetrailingslash.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# Upstream's TLS Secret is the controller's default certificate; here a
# self-signed one is named.
@ingress-nginx
Feature: ingress-nginx preserve-trailing-slash annotation

  Scenario: should allow preservation of trailing slashes
    Given a new random namespace
    Given a self-signed TLS secret named "forcesslredirect.bar.com" for the "forcesslredirect.bar.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: forcesslredirect.bar.com
      annotations:
        nginx.ingress.kubernetes.io/ssl-redirect: "true"
        nginx.ingress.kubernetes.io/preserve-trailing-slash: "true"
    spec:
      tls:
        - hosts:
            - forcesslredirect.bar.com
          secretName: forcesslredirect.bar.com
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
    And the response header "Location" must be "https://forcesslredirect.bar.com/"
