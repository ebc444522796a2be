# Ported from kubernetes/ingress-nginx test/e2e/annotations/proxy.go as data:
# the cases whose directive a client can see. They inspect the generated
# nginx.conf; here the Ingress with valid timeouts is served, and with
# invalid values served with the defaults (teapot reports the values in the
# Ingress's status; that a route's timeouts apply is checked by
# teapot/tests/traffic_policy_e2e.rs). `proxy-body-size: 8m` admits a
# 2 MiB body, which nginx's default (1m) refuses; an invalid size leaves
# the Ingress served. `proxy-http-version: 1.0` is the version the backend
# sees. The proxy_redirect and proxy cookie cases check what a client
# sees of the directive: the backend is httpbun, whose
# `/response-headers` answers with the `Location` or `Set-Cookie` the
# query names, and the response carries it rewritten (or, for `off` and
# `default`, as the backend wrote it). The proxy-buffering and
# proxy-request-buffering cases check nginx.conf's buffer lines; here the
# Ingress is served with them (teapot/tests/buffering_e2e.rs shows what
# they do). The other cases of proxy.go are listed in NOT-PORTED.md.
@ingress-nginx
Feature: ingress-nginx proxy-* annotations

  Scenario: should set valid proxy timeouts
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxy.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-connect-timeout: "50"
        nginx.ingress.kubernetes.io/proxy-send-timeout: "20"
        nginx.ingress.kubernetes.io/proxy-read-timeout: "20"
    spec:
      rules:
        - host: proxy.foo.com
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
    When I send a "GET" request to "http://proxy.foo.com/"
    Then the response status-code must be 200

  Scenario: should not set invalid proxy timeouts
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxy.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-connect-timeout: "50k"
        nginx.ingress.kubernetes.io/proxy-send-timeout: "20k"
        nginx.ingress.kubernetes.io/proxy-read-timeout: "20k"
    spec:
      rules:
        - host: proxy.foo.com
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
    When I send a "GET" request to "http://proxy.foo.com/"
    Then the response status-code must be 200

  Scenario: should set proxy client-max-body-size to 8m
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxy.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-body-size: "8m"
    spec:
      rules:
        - host: proxy.foo.com
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
    When I send a "POST" request to "http://proxy.foo.com/" with a body of 2097152 bytes
    Then the response status-code must be 200

  Scenario: should not set proxy client-max-body-size to incorrect value
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxy.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-body-size: "15r"
    spec:
      rules:
        - host: proxy.foo.com
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
    When I send a "GET" request to "http://proxy.foo.com/"
    Then the response status-code must be 200

  Scenario: should change the default proxy HTTP version
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxy.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-http-version: "1.0"
    spec:
      rules:
        - host: proxy.foo.com
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
    When I send a "GET" request to "http://proxy.foo.com/"
    Then the response status-code must be 200
    And the request proto must be "HTTP/1.0"

  Scenario: should set proxy_redirect to off
    Given a new random namespace
    Given an httpbun authentication service
    Given the "echo" service is the httpbun service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxy.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-redirect-from: "off"
        nginx.ingress.kubernetes.io/proxy-redirect-to: "goodbye.com"
    spec:
      rules:
        - host: proxy.foo.com
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
    When I send a "GET" request to "http://proxy.foo.com/response-headers?Location=hello.com/path"
    Then the response status-code must be 200
    And the response header "Location" must be "hello.com/path"

  Scenario: should set proxy_redirect to default
    Given a new random namespace
    Given an httpbun authentication service
    Given the "echo" service is the httpbun service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxy.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-redirect-from: "default"
        nginx.ingress.kubernetes.io/proxy-redirect-to: "goodbye.com"
    spec:
      rules:
        - host: proxy.foo.com
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
    When I send a "GET" request to "http://proxy.foo.com/response-headers?Location=hello.com/path"
    Then the response status-code must be 200
    And the response header "Location" must be "hello.com/path"

  Scenario: should set proxy_redirect to hello.com goodbye.com
    Given a new random namespace
    Given an httpbun authentication service
    Given the "echo" service is the httpbun service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxy.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-redirect-from: "hello.com"
        nginx.ingress.kubernetes.io/proxy-redirect-to: "goodbye.com"
    spec:
      rules:
        - host: proxy.foo.com
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
    When I send a "GET" request to "http://proxy.foo.com/response-headers?Location=hello.com/path"
    Then the response status-code must be 200
    And the response header "Location" must be "goodbye.com/path"

  Scenario: should setup proxy cookies
    Given a new random namespace
    Given an httpbun authentication service
    Given the "echo" service is the httpbun service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxy.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-cookie-domain: "localhost example.org"
        nginx.ingress.kubernetes.io/proxy-cookie-path: "/one/ /"
    spec:
      rules:
        - host: proxy.foo.com
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
    When I send a "GET" request to "http://proxy.foo.com/response-headers?Set-Cookie=a=b;Domain=localhost;Path=/one/two"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must be "a=b; Domain=example.org; Path=/two"

  Scenario: should turn on proxy-buffering
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxy.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-buffering: "on"
        nginx.ingress.kubernetes.io/proxy-buffers-number: "8"
        nginx.ingress.kubernetes.io/proxy-buffer-size: "8k"
    spec:
      rules:
        - host: proxy.foo.com
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
    When I send a "GET" request to "http://proxy.foo.com/"
    Then the response status-code must be 200

  Scenario: should turn off proxy-request-buffering
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: proxy.foo.com
      annotations:
        nginx.ingress.kubernetes.io/proxy-request-buffering: "off"
    spec:
      rules:
        - host: proxy.foo.com
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
    When I send a "GET" request to "http://proxy.foo.com/"
    Then the response status-code must be 200
