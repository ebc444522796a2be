# Ported from kubernetes/ingress-nginx test/e2e/annotations/authtls.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# The Secret is upstream's CreateIngressMASecret: the server certificate
# for the host, its key and the CA that signs it and the client
# certificate (CN `authtls.foo.com-client`); it is both the Ingress's TLS
# Secret and its auth-tls-secret (named without namespace: the scenario's
# namespace is random). nginx.conf checks (`ssl_verify_client`, ...) are
# left out; the requests with and without the client certificate stay.
# auth-tls-error-page names `http://error.foo.com/error` where upstream
# names the controller's own address.
@ingress-nginx
Feature: ingress-nginx auth-tls-* annotations

  Scenario: should set sslClientCertificate, sslVerifyClient and sslVerifyDepth with auth-tls-secret
    Given a new random namespace
    Given a mutual TLS secret named "authtls.foo.com" for the "authtls.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authtls.foo.com
    spec:
      tls:
        - hosts:
            - authtls.foo.com
          secretName: authtls.foo.com
      rules:
        - host: authtls.foo.com
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
    When the Ingress resource named "authtls.foo.com" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authtls.foo.com
      annotations:
        nginx.ingress.kubernetes.io/auth-tls-secret: "authtls.foo.com"
    spec:
      tls:
        - hosts:
            - authtls.foo.com
          secretName: authtls.foo.com
      rules:
        - host: authtls.foo.com
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
    When I send a "GET" request to "https://authtls.foo.com/"
    Then the response status-code must be 400
    When I send a "GET" request to "https://authtls.foo.com/" with the client certificate
    Then the response status-code must be 200

  Scenario: should set valid auth-tls-secret, sslVerify to off, and sslVerifyDepth to 2
    Given a new random namespace
    Given a mutual TLS secret named "authtls.foo.com" for the "authtls.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authtls.foo.com
      annotations:
        nginx.ingress.kubernetes.io/auth-tls-secret: "authtls.foo.com"
        nginx.ingress.kubernetes.io/auth-tls-verify-client: "off"
        nginx.ingress.kubernetes.io/auth-tls-verify-depth: "2"
    spec:
      tls:
        - hosts:
            - authtls.foo.com
          secretName: authtls.foo.com
      rules:
        - host: authtls.foo.com
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
    When I send a "GET" request to "https://authtls.foo.com/"
    Then the response status-code must be 200

  Scenario: should 302 redirect to error page instead of 400 when auth-tls-error-page is set
    Given a new random namespace
    Given a mutual TLS secret named "authtls.foo.com" for the "authtls.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authtls.foo.com
      annotations:
        nginx.ingress.kubernetes.io/auth-tls-secret: "authtls.foo.com"
        nginx.ingress.kubernetes.io/auth-tls-error-page: "http://error.foo.com/error"
    spec:
      tls:
        - hosts:
            - authtls.foo.com
          secretName: authtls.foo.com
      rules:
        - host: authtls.foo.com
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
    When I send a "GET" request to "https://authtls.foo.com/" without following redirects
    Then the response status-code must be 302
    And the response header "Location" must be "http://error.foo.com/error"
    When I send a "GET" request to "https://authtls.foo.com/" with the client certificate
    Then the response status-code must be 200

  Scenario: should pass URL-encoded certificate to upstream
    Given a new random namespace
    Given a mutual TLS secret named "authtls.foo.com" for the "authtls.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authtls.foo.com
      annotations:
        nginx.ingress.kubernetes.io/auth-tls-secret: "authtls.foo.com"
        nginx.ingress.kubernetes.io/auth-tls-pass-certificate-to-upstream: "true"
    spec:
      tls:
        - hosts:
            - authtls.foo.com
          secretName: authtls.foo.com
      rules:
        - host: authtls.foo.com
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
    When I send a "GET" request to "https://authtls.foo.com/"
    Then the response status-code must be 400
    When I send a "GET" request to "https://authtls.foo.com/" with the client certificate
    Then the response status-code must be 200
    And the request header "ssl-client-cert" must contain "-----BEGIN%20CERTIFICATE-----%0A"

  Scenario: should validate auth-tls-verify-client
    Given a new random namespace
    Given a mutual TLS secret named "authtls.foo.com" for the "authtls.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authtls.foo.com
      annotations:
        nginx.ingress.kubernetes.io/auth-tls-secret: "authtls.foo.com"
        nginx.ingress.kubernetes.io/auth-tls-verify-client: "on"
    spec:
      tls:
        - hosts:
            - authtls.foo.com
          secretName: authtls.foo.com
      rules:
        - host: authtls.foo.com
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
    When I send a "GET" request to "https://authtls.foo.com/" with the client certificate
    Then the response status-code must be 200
    When I send a "GET" request to "https://authtls.foo.com/"
    Then the response status-code must be 400
    When the Ingress resource named "authtls.foo.com" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authtls.foo.com
      annotations:
        nginx.ingress.kubernetes.io/auth-tls-secret: "authtls.foo.com"
        nginx.ingress.kubernetes.io/auth-tls-verify-client: "off"
    spec:
      tls:
        - hosts:
            - authtls.foo.com
          secretName: authtls.foo.com
      rules:
        - host: authtls.foo.com
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
    When I send a "GET" request to "https://authtls.foo.com/" with the client certificate
    Then the response status-code must be 200
    When I send a "GET" request to "https://authtls.foo.com/"
    Then the response status-code must be 200

  Scenario: should return 403 using auth-tls-match-cn with no matching CN from client
    Given a new random namespace
    Given a mutual TLS secret named "authtls.foo.com" for the "authtls.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authtls.foo.com
      annotations:
        nginx.ingress.kubernetes.io/auth-tls-secret: "authtls.foo.com"
        nginx.ingress.kubernetes.io/auth-tls-verify-client: "on"
        nginx.ingress.kubernetes.io/auth-tls-match-cn: "CN=notgonnamatch"
    spec:
      tls:
        - hosts:
            - authtls.foo.com
          secretName: authtls.foo.com
      rules:
        - host: authtls.foo.com
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
    When I send a "GET" request to "https://authtls.foo.com/" with the client certificate
    Then the response status-code must be 403

  Scenario: should return 200 using auth-tls-match-cn with matching CN from client
    Given a new random namespace
    Given a mutual TLS secret named "authtls.foo.com" for the "authtls.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authtls.foo.com
      annotations:
        nginx.ingress.kubernetes.io/auth-tls-secret: "authtls.foo.com"
        nginx.ingress.kubernetes.io/auth-tls-verify-client: "on"
        nginx.ingress.kubernetes.io/auth-tls-match-cn: "CN=authtls"
    spec:
      tls:
        - hosts:
            - authtls.foo.com
          secretName: authtls.foo.com
      rules:
        - host: authtls.foo.com
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
    When I send a "GET" request to "https://authtls.foo.com/" with the client certificate
    Then the response status-code must be 200

  Scenario: should reload the nginx config when auth-tls-match-cn is updated
    Given a new random namespace
    Given a mutual TLS secret named "authtls.foo.com" for the "authtls.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authtls.foo.com
      annotations:
        nginx.ingress.kubernetes.io/auth-tls-secret: "authtls.foo.com"
        nginx.ingress.kubernetes.io/auth-tls-verify-client: "on"
        nginx.ingress.kubernetes.io/auth-tls-match-cn: "CN=notvalid"
    spec:
      tls:
        - hosts:
            - authtls.foo.com
          secretName: authtls.foo.com
      rules:
        - host: authtls.foo.com
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
    When I send a "GET" request to "https://authtls.foo.com/" with the client certificate
    Then the response status-code must be 403
    When the Ingress resource named "authtls.foo.com" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authtls.foo.com
      annotations:
        nginx.ingress.kubernetes.io/auth-tls-secret: "authtls.foo.com"
        nginx.ingress.kubernetes.io/auth-tls-verify-client: "on"
        nginx.ingress.kubernetes.io/auth-tls-match-cn: "CN=authtls"
    spec:
      tls:
        - hosts:
            - authtls.foo.com
          secretName: authtls.foo.com
      rules:
        - host: authtls.foo.com
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
    When I send a "GET" request to "https://authtls.foo.com/" with the client certificate
    Then the response status-code must be 200

  Scenario: should return 200 using auth-tls-match-cn where atleast one of the regex options matches CN from client
    Given a new random namespace
    Given a mutual TLS secret named "authtls.foo.com" for the "authtls.foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authtls.foo.com
      annotations:
        nginx.ingress.kubernetes.io/auth-tls-secret: "authtls.foo.com"
        nginx.ingress.kubernetes.io/auth-tls-verify-client: "on"
        nginx.ingress.kubernetes.io/auth-tls-match-cn: "CN=(itwillmatch|withthenextoption|authtls)"
    spec:
      tls:
        - hosts:
            - authtls.foo.com
          secretName: authtls.foo.com
      rules:
        - host: authtls.foo.com
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
    When I send a "GET" request to "https://authtls.foo.com/" with the client certificate
    Then the response status-code must be 200
