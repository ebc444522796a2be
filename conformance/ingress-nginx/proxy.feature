# Ported from kubernetes/ingress-nginx test/e2e/annotations/proxy.go as data:
# the timeout cases. They inspect the generated nginx.conf (which
# proxy_*_timeout lines it holds); here the Ingress with them is served, and
# with invalid values served with the defaults (teapot reports the values in
# the Ingress's status). That a route's timeouts apply is checked by
# teapot/tests/traffic_policy_e2e.rs. The other cases of proxy.go are listed
# in docs/migrate-from-ingress-nginx.md.
@ingress-nginx
Feature: ingress-nginx proxy timeout annotations

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
