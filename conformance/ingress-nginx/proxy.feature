# Ported from kubernetes/ingress-nginx test/e2e/annotations/proxy.go as data:
# the cases whose directive a client can see. They inspect the generated
# nginx.conf; here the Ingress with valid timeouts is served, and with
# invalid values served with the defaults (teapot reports the values in the
# Ingress's status; that a route's timeouts apply is checked by
# teapot/tests/traffic_policy_e2e.rs). `proxy-body-size: 8m` admits a
# 2 MiB body, which nginx's default (1m) refuses; an invalid size leaves
# the Ingress served. `proxy-http-version: 1.0` is the version the backend
# sees. The other cases of proxy.go are listed in NOT-PORTED.md.
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
