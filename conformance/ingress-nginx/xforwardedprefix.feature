# Ported from kubernetes/ingress-nginx test/e2e/annotations/xforwardedprefix.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations; cases that inspect the generated nginx.conf check the
# header or status that configuration produces.
@ingress-nginx
Feature: ingress-nginx x-forwarded-prefix annotation

  Scenario: should set the X-Forwarded-Prefix to the annotation value
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: xfp
      annotations:
        nginx.ingress.kubernetes.io/x-forwarded-prefix: "/test/value"
        nginx.ingress.kubernetes.io/rewrite-target: "/foo"
    spec:
      rules:
        - host: xfp.baz.com
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
    When I send a "GET" request to "http://xfp.baz.com/"
    Then the response status-code must be 200
    And the request header "X-Forwarded-Prefix" must be "/test/value"

  Scenario: should not add X-Forwarded-Prefix if the annotation value is empty
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: noxfp
      annotations:
        nginx.ingress.kubernetes.io/x-forwarded-prefix: ""
        nginx.ingress.kubernetes.io/rewrite-target: "/foo"
    spec:
      rules:
        - host: noxfp.baz.com
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
    When I send a "GET" request to "http://noxfp.baz.com/"
    Then the response status-code must be 200
    And the request header "X-Forwarded-Prefix" must not be present
