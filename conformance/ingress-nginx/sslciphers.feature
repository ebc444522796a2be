# Ported from kubernetes/ingress-nginx test/e2e/annotations/sslciphers.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# Both cases inspect nginx.conf (`ssl_ciphers`, `ssl_prefer_server_ciphers`)
# and send one HTTPS request, which is ported.
@ingress-nginx
Feature: ingress-nginx ssl-ciphers annotation

  Scenario: should change ssl ciphers
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: ciphers.foo.com
      annotations:
        nginx.ingress.kubernetes.io/ssl-ciphers: "ALL:!aNULL:!EXPORT56:RC4+RSA:+HIGH:+MEDIUM:+LOW:+SSLv2:+EXP"
        nginx.ingress.kubernetes.io/ssl-prefer-server-ciphers: "false"
    spec:
      rules:
        - host: ciphers.foo.com
          http:
            paths:
              - path: /something
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "https://ciphers.foo.com/something"
    Then the response status-code must be 200

  Scenario: should keep ssl ciphers
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: ciphers.foo.com
      annotations:
        nginx.ingress.kubernetes.io/ssl-ciphers: "ALL:!aNULL:!EXPORT56:RC4+RSA@STRENGTH:+HIGH@SECLEVEL=0:+MEDIUM:+LOW:+SSLv2:+EXP"
        nginx.ingress.kubernetes.io/ssl-prefer-server-ciphers: "true"
    spec:
      rules:
        - host: ciphers.foo.com
          http:
            paths:
              - path: /something
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "https://ciphers.foo.com/something"
    Then the response status-code must be 200
