# Ported from kubernetes/ingress-nginx test/e2e/annotations/customhttperrors.go
# and test/e2e/annotations/default_backend.go as data. customhttperrors.go
# inspects the generated nginx.conf (`proxy_intercept_errors on`, an
# `error_page` and a `@custom_` location per code); each of its steps is a
# scenario here checking what that configuration does: a listed status of
# the backend is answered by the default backend with X-Code, an unlisted
# one passes. teapot has no fleet-wide default backend, so every scenario
# names `default-backend` (customhttperrors.go's last step); the Service it
# names gets its echo pod from an extra Exact rule, the harness's way of
# creating a backend. The backend is httpbun, as in ingress-nginx's
# disable-proxy-intercept-errors case, and its status comes from
# `/status/<code>` (a header hook would travel to the error backend with
# the client's other fields and set its status too).
# default_backend.go's X-Request-ID is checked to be present, not to be
# the client's "something-unique": teapot keeps a client's request ID only
# for namespaces the operator trusts (--trust-request-id, docs/operations.md),
# and the error backend gets the ID the backend would have got.
@ingress-nginx
Feature: ingress-nginx custom-http-errors and default-backend annotations

  Scenario: configures Nginx correctly: turning on proxy_intercept_errors for the listed codes (404)
    Given a new random namespace
    Given an httpbun authentication service
    Given the "echo" service is the httpbun service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: customerrors.foo.com
      annotations:
        nginx.ingress.kubernetes.io/custom-http-errors: "404,500"
        nginx.ingress.kubernetes.io/default-backend: "from-annotation"
    spec:
      rules:
        - host: customerrors.foo.com
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
              - path: /from-annotation-pod
                pathType: Exact
                backend:
                  service:
                    name: from-annotation
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://customerrors.foo.com/status/404"
    Then the response status-code must be 200
    And the response must be served by the "from-annotation" service
    And the request header "X-Code" must be "404"
    And the request header "X-Ingress-Name" must be "customerrors.foo.com"
    And the request header "X-Service-Name" must be "echo"
    And the request header "X-Original-URI" must be "/status/404"

  Scenario: configures Nginx correctly: an error_page for each listed code (500)
    Given a new random namespace
    Given an httpbun authentication service
    Given the "echo" service is the httpbun service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: customerrors.foo.com
      annotations:
        nginx.ingress.kubernetes.io/custom-http-errors: "404,500"
        nginx.ingress.kubernetes.io/default-backend: "from-annotation"
    spec:
      rules:
        - host: customerrors.foo.com
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
              - path: /from-annotation-pod
                pathType: Exact
                backend:
                  service:
                    name: from-annotation
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://customerrors.foo.com/status/500"
    Then the response status-code must be 200
    And the response must be served by the "from-annotation" service
    And the request header "X-Code" must be "500"
    And the request header "X-Ingress-Name" must be "customerrors.foo.com"
    And the request header "X-Service-Name" must be "echo"
    And the request header "X-Original-URI" must be "/status/500"

  Scenario: configures Nginx correctly: a status not listed is not intercepted
    Given a new random namespace
    Given an httpbun authentication service
    Given the "echo" service is the httpbun service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: customerrors.foo.com
      annotations:
        nginx.ingress.kubernetes.io/custom-http-errors: "404,500"
        nginx.ingress.kubernetes.io/default-backend: "from-annotation"
    spec:
      rules:
        - host: customerrors.foo.com
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
              - path: /from-annotation-pod
                pathType: Exact
                backend:
                  service:
                    name: from-annotation
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://customerrors.foo.com/status/503"
    Then the response status-code must be 503
    And the response body must not contain "from-annotation"

  Scenario: configures Nginx correctly: updating configuration when only custom-http-error value changes
    Given a new random namespace
    Given an httpbun authentication service
    Given the "echo" service is the httpbun service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: customerrors.foo.com
      annotations:
        nginx.ingress.kubernetes.io/custom-http-errors: "503"
        nginx.ingress.kubernetes.io/default-backend: "from-annotation"
    spec:
      rules:
        - host: customerrors.foo.com
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
              - path: /from-annotation-pod
                pathType: Exact
                backend:
                  service:
                    name: from-annotation
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://customerrors.foo.com/status/503"
    Then the response status-code must be 200
    And the response must be served by the "from-annotation" service
    And the request header "X-Code" must be "503"
    And the request header "X-Ingress-Name" must be "customerrors.foo.com"
    And the request header "X-Service-Name" must be "echo"
    And the request header "X-Original-URI" must be "/status/503"
    When I send a "GET" request to "http://customerrors.foo.com/status/404"
    Then the response status-code must be 404
    And the response body must not contain "from-annotation"

  Scenario: configures Nginx correctly: ignoring duplicate values (503 in this case) per server
    Given a new random namespace
    Given an httpbun authentication service
    Given the "echo" service is the httpbun service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: customerrors.foo.com-else
      annotations:
        nginx.ingress.kubernetes.io/custom-http-errors: "404, 503, 503"
        nginx.ingress.kubernetes.io/default-backend: "from-annotation"
    spec:
      rules:
        - host: customerrors.foo.com
          http:
            paths:
              - path: /else
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
              - path: /from-annotation-pod
                pathType: Exact
                backend:
                  service:
                    name: from-annotation
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://customerrors.foo.com/else/status/503"
    Then the response status-code must be 200
    And the response must be served by the "from-annotation" service
    And the request header "X-Code" must be "503"
    And the request header "X-Ingress-Name" must be "customerrors.foo.com-else"
    And the request header "X-Service-Name" must be "echo"
    And the request header "X-Original-URI" must be "/else/status/503"
    When I send a "GET" request to "http://customerrors.foo.com/else/status/404"
    Then the response status-code must be 200
    And the response must be served by the "from-annotation" service
    And the request header "X-Code" must be "404"
    And the request header "X-Ingress-Name" must be "customerrors.foo.com-else"
    And the request header "X-Service-Name" must be "echo"
    And the request header "X-Original-URI" must be "/else/status/404"

  Scenario: configures Nginx correctly: using the custom default-backend from annotation for upstream
    Given a new random namespace
    Given an httpbun authentication service
    Given the "echo" service is the httpbun service
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: customerrors.foo.com
      annotations:
        nginx.ingress.kubernetes.io/custom-http-errors: "503"
        nginx.ingress.kubernetes.io/default-backend: "from-annotation"
    spec:
      rules:
        - host: customerrors.foo.com
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
              - path: /from-annotation-pod
                pathType: Exact
                backend:
                  service:
                    name: from-annotation
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a "GET" request to "http://customerrors.foo.com/status/503"
    Then the response status-code must be 200
    And the response must be served by the "from-annotation" service
    And the request header "X-Code" must be "503"
    And the request header "X-Service-Port" must be "80"

  Scenario: default-backend when default backend annotation is enabled should use a custom default backend as upstream
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: default-backend
      annotations:
        nginx.ingress.kubernetes.io/default-backend: "echo"
    spec:
      rules:
        - host: default-backend
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: invalid
                    port:
                      number: 80
              - path: /echo-pod
                pathType: Exact
                backend:
                  service:
                    name: echo
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Given The backend deployment "invalid" for the ingress resource is scaled to 0
    When I send a "GET" request to "http://default-backend/alma/armud" with the header "X-Request-Id" set to "something-unique"
    Then the response status-code must be 200
    And the response must be served by the "echo" service
    And the request header "X-Code" must be "503"
    And the request header "X-Ingress-Name" must be "default-backend"
    And the request header "X-Service-Name" must be "invalid"
    And the request header "X-Request-Id" must be present
