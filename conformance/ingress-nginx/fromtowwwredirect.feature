# Ported from kubernetes/ingress-nginx test/e2e/annotations/fromtowwwredirect.go
# as data: each ginkgo case is a scenario with the same Ingress, requests and
# expectations. "should redirect from www HTTPS to HTTPS" names the nip.io
# name of the controller's address and checks a header that a
# configuration-snippet sets (`ExpectedHost`); here the host is
# fromtowwwredirect.bar.com with a self-signed certificate, and the header
# check is the Host the backend receives.
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

  Scenario: should redirect from www HTTPS to HTTPS
    Given a new random namespace
    Given a self-signed TLS secret named "fromtowwwredirect.bar.com" for the "fromtowwwredirect.bar.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: fromtowwwredirect.bar.com
      annotations:
        nginx.ingress.kubernetes.io/from-to-www-redirect: "true"
    spec:
      tls:
        - hosts:
            - fromtowwwredirect.bar.com
            - www.fromtowwwredirect.bar.com
          secretName: fromtowwwredirect.bar.com
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
    When I send a "GET" request to "https://www.fromtowwwredirect.bar.com/" without following redirects
    Then the response status-code must be 308
    And the response header "Location" must be "https://fromtowwwredirect.bar.com:443"
    When I send a "GET" request to "https://fromtowwwredirect.bar.com/"
    Then the response status-code must be 200
    And the request host must be "fromtowwwredirect.bar.com"
