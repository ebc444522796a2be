# Ported from kubernetes/ingress-nginx test/e2e/annotations/rewrite.go as data:
# each ginkgo case is a scenario with the same Ingresses, requests and
# expectations. The cases read `request_uri` from the echo's body; here the
# request path the echo backend got. "should write rewrite logs" checks
# nginx's rewrite log, which teapot does not write (enable-rewrite-log is
# not served): ported is what the rewrite does to the request.
@ingress-nginx
Feature: ingress-nginx rewrite-target and use-regex annotations

  Scenario: should write rewrite logs
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: rewrite-log
      annotations:
        nginx.ingress.kubernetes.io/rewrite-target: "/"
        nginx.ingress.kubernetes.io/enable-rewrite-log: "true"
    spec:
      rules:
        - host: rewrite.bar.com
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
    When I send a "GET" request to "http://rewrite.bar.com/something"
    Then the response status-code must be 200
    And the request path must be "/"

  Scenario: should use correct longest path match
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: kube-lego
    spec:
      rules:
        - host: rewrite.bar.com
          http:
            paths:
              - path: /.well-known/acme/challenge
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://rewrite.bar.com/.well-known/acme/challenge"
    Then the response status-code must be 200
    And the request path must be "/.well-known/acme/challenge"
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: rewrite-index
      annotations:
        nginx.ingress.kubernetes.io/rewrite-target: "/new/backend"
    spec:
      rules:
        - host: rewrite.bar.com
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
    When I send a "GET" request to "http://rewrite.bar.com/.well-known/acme/challenge"
    Then the response status-code must be 200
    And the request path must be "/.well-known/acme/challenge"

  Scenario: should use ~* location modifier if regex annotation is present
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: rewrite.bar.com
          http:
            paths:
              - path: /foo
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: regex
      annotations:
        nginx.ingress.kubernetes.io/use-regex: "true"
        nginx.ingress.kubernetes.io/rewrite-target: "/new/backend"
    spec:
      rules:
        - host: rewrite.bar.com
          http:
            paths:
              - path: /foo.+
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://rewrite.bar.com/foo"
    Then the response status-code must be 200
    And the request path must be "/foo"
    When I send a "GET" request to "http://rewrite.bar.com/foo/bar"
    Then the response status-code must be 200
    And the request path must be "/new/backend"

  Scenario: should fail to use longest match for documented warning
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo
    spec:
      rules:
        - host: rewrite.bar.com
          http:
            paths:
              - path: /foo/bar/bar
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: regex
      annotations:
        nginx.ingress.kubernetes.io/use-regex: "true"
        nginx.ingress.kubernetes.io/rewrite-target: "/new/backend"
    spec:
      rules:
        - host: rewrite.bar.com
          http:
            paths:
              - path: /foo/bar/[a-z]{3}
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://rewrite.bar.com/foo/bar/bar"
    Then the response status-code must be 200
    And the request path must be "/new/backend"

  Scenario: should allow for custom rewrite parameters
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: regex
      annotations:
        nginx.ingress.kubernetes.io/use-regex: "true"
        nginx.ingress.kubernetes.io/rewrite-target: "/new/backend/$1"
    spec:
      rules:
        - host: rewrite.bar.com
          http:
            paths:
              - path: /foo/bar/(.+)
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://rewrite.bar.com/foo/bar/bar"
    Then the response status-code must be 200
    And the request path must be "/new/backend/bar"
