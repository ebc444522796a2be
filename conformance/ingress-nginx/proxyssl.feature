# Ported from kubernetes/ingress-nginx test/e2e/annotations/proxyssl.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# The Secret is upstream's CreateIngressMASecret (see authtls.feature),
# named without namespace. The cases' nginx.conf checks (`proxy_ssl_*`)
# are left out: the backend is the plain echo, as upstream's, so no
# proxy TLS is made; what stays is the TLS Ingress's redirect of plain
# HTTP (308, ssl-redirect's default) and the HTTPS request.
@ingress-nginx
Feature: ingress-nginx proxy-ssl-* annotations

  Scenario: should set valid proxy-ssl-secret
    Given a new random namespace
    Given a mutual TLS secret named "proxyssl.foo.com" for the "proxyssl.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxyssl.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-ssl-secret: "proxyssl.foo.com"
    spec:
      tls:
        - hosts:
            - proxyssl.foo.com
          secretName: proxyssl.foo.com
      rules:
        - host: proxyssl.foo.com
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
    When I send a "GET" request to "http://proxyssl.foo.com/" without following redirects
    Then the response status-code must be 308
    When I send a "GET" request to "https://proxyssl.foo.com/" with the client certificate
    Then the response status-code must be 200

  Scenario: should set valid proxy-ssl-secret, proxy-ssl-verify to on, proxy-ssl-verify-depth to 2, and proxy-ssl-server-name to on
    Given a new random namespace
    Given a mutual TLS secret named "proxyssl.foo.com" for the "proxyssl.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxyssl.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-ssl-secret: "proxyssl.foo.com"
        nginx.ingress.kubernetes.io/proxy-ssl-verify: "on"
        nginx.ingress.kubernetes.io/proxy-ssl-verify-depth: "2"
        nginx.ingress.kubernetes.io/proxy-ssl-server-name: "on"
    spec:
      tls:
        - hosts:
            - proxyssl.foo.com
          secretName: proxyssl.foo.com
      rules:
        - host: proxyssl.foo.com
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
    When I send a "GET" request to "http://proxyssl.foo.com/" without following redirects
    Then the response status-code must be 308
    When I send a "GET" request to "https://proxyssl.foo.com/" with the client certificate
    Then the response status-code must be 200

  Scenario: should set valid proxy-ssl-secret, proxy-ssl-ciphers to HIGH:!AES
    Given a new random namespace
    Given a mutual TLS secret named "proxyssl.foo.com" for the "proxyssl.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxyssl.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-ssl-secret: "proxyssl.foo.com"
        nginx.ingress.kubernetes.io/proxy-ssl-ciphers: "HIGH:!AES"
    spec:
      tls:
        - hosts:
            - proxyssl.foo.com
          secretName: proxyssl.foo.com
      rules:
        - host: proxyssl.foo.com
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
    When I send a "GET" request to "http://proxyssl.foo.com/" without following redirects
    Then the response status-code must be 308
    When I send a "GET" request to "https://proxyssl.foo.com/" with the client certificate
    Then the response status-code must be 200

  Scenario: should set valid proxy-ssl-secret, proxy-ssl-protocols
    Given a new random namespace
    Given a mutual TLS secret named "proxyssl.foo.com" for the "proxyssl.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxyssl.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-ssl-secret: "proxyssl.foo.com"
        nginx.ingress.kubernetes.io/proxy-ssl-protocols: "TLSv1.2 TLSv1.3"
    spec:
      tls:
        - hosts:
            - proxyssl.foo.com
          secretName: proxyssl.foo.com
      rules:
        - host: proxyssl.foo.com
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
    When I send a "GET" request to "http://proxyssl.foo.com/" without following redirects
    Then the response status-code must be 308
    When I send a "GET" request to "https://proxyssl.foo.com/" with the client certificate
    Then the response status-code must be 200
