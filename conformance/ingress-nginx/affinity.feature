# Ported from kubernetes/ingress-nginx test/e2e/annotations/affinity.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations; cases that inspect the generated nginx.conf check the
# header or status that configuration produces.
@ingress-nginx
Feature: ingress-nginx affinity session-cookie-* annotations

  Scenario: should set sticky cookie SERVERID
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: sticky
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "SERVERID"
    spec:
      rules:
        - host: sticky.foo.com
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
    When I send a "GET" request to "http://sticky.foo.com/"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "SERVERID="

  Scenario: should set the path to /something on the generated cookie
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: path
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "SERVERID"
    spec:
      rules:
        - host: path.foo.com
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
    When I send a "GET" request to "http://path.foo.com/something"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "Path=/something"

  Scenario: should set cookie with expires
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cookieexpires
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "ExpiresCookie"
        nginx.ingress.kubernetes.io/session-cookie-expires: "172800"
        nginx.ingress.kubernetes.io/session-cookie-max-age: "259200"
    spec:
      rules:
        - host: cookieexpires.foo.com
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
    When I send a "GET" request to "http://cookieexpires.foo.com/"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "Expires="
    And the response header "Set-Cookie" must contain "Max-Age=259200"

  Scenario: should set secure in cookie with provided true annotation on http
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: secure
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "SERVERID"
        nginx.ingress.kubernetes.io/session-cookie-secure: "true"
    spec:
      rules:
        - host: foo.com
          http:
            paths:
              - path: /bar
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo.com/bar"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "; Secure"

  Scenario: should not set secure in cookie with provided false annotation on http
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: insecure
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "SERVERID"
        nginx.ingress.kubernetes.io/session-cookie-secure: "false"
    spec:
      rules:
        - host: foo.com
          http:
            paths:
              - path: /bar
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo.com/bar"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must not contain "; Secure"

  Scenario: should set secure in cookie with provided false annotation on https
    Given a new random namespace
    Given a self-signed TLS secret named "securetls-tls" for the "foo.com" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: securetls
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "SERVERID"
        nginx.ingress.kubernetes.io/session-cookie-secure: "false"
    spec:
      tls:
        - hosts:
            - foo.com
          secretName: securetls-tls
      rules:
        - host: foo.com
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
    When I send a "GET" request to "https://foo.com/"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "; Secure"

  Scenario: should not set cookie without domain annotation
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: nodomain
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "SERVERID"
    spec:
      rules:
        - host: cookie.foo.com
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
    When I send a "GET" request to "http://cookie.foo.com/"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "SERVERID="
    And the response header "Set-Cookie" must not contain "Domain"

  Scenario: should set sticky cookie without host
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: default-no-host
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "SERVERID"
    spec:
      defaultBackend:
        service:
          name: echo
          port:
            number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http:///"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "SERVERID="

  Scenario: does not set the path to / on the generated cookie if there's more than one rule referring to the same backend
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: morethanonerule
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "SERVERID"
    spec:
      rules:
        - host: morethanonerule.foo.com
          http:
            paths:
              - path: /something
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
              - path: /somewhereelse
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://morethanonerule.foo.com/something"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "Path=/something"
    When I send a "GET" request to "http://morethanonerule.foo.com/somewhereelse"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "Path=/somewhereelse"

  Scenario: should work with use-regex annotation and session-cookie-path
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: useregex.foo.com
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "SERVERID"
        nginx.ingress.kubernetes.io/use-regex: "true"
        nginx.ingress.kubernetes.io/session-cookie-path: "/foo/bar"
    spec:
      rules:
        - host: useregex.foo.com
          http:
            paths:
              - path: /foo/.*
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://useregex.foo.com/foo/bar"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "Path=/foo/bar"
    And the response header "Set-Cookie" must contain "SERVERID="

  Scenario: should change cookie name on ingress definition change
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: change.foo.com
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "SERVERID"
    spec:
      rules:
        - host: change.foo.com
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
    When I send a "GET" request to "http://change.foo.com/"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "SERVERID"
    When the Ingress resource named "change.foo.com" is updated:
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: change.foo.com
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "OTHERCOOKIENAME"
    spec:
      rules:
        - host: change.foo.com
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
    When I send a "GET" request to "http://change.foo.com/"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "OTHERCOOKIENAME"

  Scenario: should set cookie with domain
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: cookiedomain.foo.com
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "DomainCookie"
        nginx.ingress.kubernetes.io/session-cookie-domain: "foo.bar"
    spec:
      rules:
        - host: cookiedomain.foo.com
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
    When I send a "GET" request to "http://cookiedomain.foo.com/"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "Domain=foo.bar"

  Scenario: should not set affinity across all server locations when using separate ingresses
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: ingress1
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
    spec:
      rules:
        - host: separate.foo.com
          http:
            paths:
              - path: /foo/bar
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
      name: ingress2
    spec:
      rules:
        - host: separate.foo.com
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
    When I send a "GET" request to "http://separate.foo.com/foo"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must be absent
    When I send a "GET" request to "http://separate.foo.com/foo/bar"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "Path=/foo/bar"

  Scenario: should work with server-alias annotation
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: foo.com
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "SERVERID"
        nginx.ingress.kubernetes.io/server-alias: "a1.foo.com,a2.foo.com"
    spec:
      rules:
        - host: foo.com
          http:
            paths:
              - path: /bar
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://foo.com/bar"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "SERVERID="
    When I send a "GET" request to "http://a1.foo.com/bar"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "SERVERID="
    When I send a "GET" request to "http://a2.foo.com/bar"
    Then the response status-code must be 200
    And the response header "Set-Cookie" must contain "SERVERID="
