# Ported from kubernetes/ingress-nginx test/e2e/annotations/affinitymode.go as data:
# "Check persistent affinity mode" with the same Ingress, scaling and
# requests: the pod that answered first keeps answering the client's
# cookie while the Deployment grows from 5 to 15 replicas, 503 without
# replicas, another pod once two new ones run. Its first check, that
# the Ingress read back from the API server has the annotations written,
# is a Kubernetes round trip (no request) and is left out, as is the
# "Balanced affinity mode should balance" case, which is only that check.
@ingress-nginx
Feature: ingress-nginx affinity-mode annotation

  Scenario: Check persistent affinity mode
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: affinity-mode-persistent.com
      annotations:
        nginx.ingress.kubernetes.io/affinity: "cookie"
        nginx.ingress.kubernetes.io/session-cookie-name: "hello-cookie"
        nginx.ingress.kubernetes.io/session-cookie-expires: "172800"
        nginx.ingress.kubernetes.io/session-cookie-max-age: "172800"
        nginx.ingress.kubernetes.io/ssl-redirect: "false"
        nginx.ingress.kubernetes.io/affinity-mode: "persistent"
        nginx.ingress.kubernetes.io/session-cookie-hash: "sha1"
    spec:
      rules:
        - host: affinity-mode-persistent.com
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: affinitypersistentecho
                    port:
                      number: 80
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    Then The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 5
    When I send a "GET" request to "http://affinity-mode-persistent.com/"
    Then the response status-code must be 200
    And the pod that served the response is remembered as "original"
    When The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 6
    And I send a "GET" request to "http://affinity-mode-persistent.com/" with the cookie "hello-cookie" of the last response
    Then the response status-code must be 200
    And the response must be served by the pod "original"
    When The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 7
    And I send a "GET" request to "http://affinity-mode-persistent.com/" with the cookie "hello-cookie" of the last response
    Then the response status-code must be 200
    And the response must be served by the pod "original"
    When The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 8
    And I send a "GET" request to "http://affinity-mode-persistent.com/" with the cookie "hello-cookie" of the last response
    Then the response status-code must be 200
    And the response must be served by the pod "original"
    When The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 9
    And I send a "GET" request to "http://affinity-mode-persistent.com/" with the cookie "hello-cookie" of the last response
    Then the response status-code must be 200
    And the response must be served by the pod "original"
    When The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 10
    And I send a "GET" request to "http://affinity-mode-persistent.com/" with the cookie "hello-cookie" of the last response
    Then the response status-code must be 200
    And the response must be served by the pod "original"
    When The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 11
    And I send a "GET" request to "http://affinity-mode-persistent.com/" with the cookie "hello-cookie" of the last response
    Then the response status-code must be 200
    And the response must be served by the pod "original"
    When The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 12
    And I send a "GET" request to "http://affinity-mode-persistent.com/" with the cookie "hello-cookie" of the last response
    Then the response status-code must be 200
    And the response must be served by the pod "original"
    When The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 13
    And I send a "GET" request to "http://affinity-mode-persistent.com/" with the cookie "hello-cookie" of the last response
    Then the response status-code must be 200
    And the response must be served by the pod "original"
    When The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 14
    And I send a "GET" request to "http://affinity-mode-persistent.com/" with the cookie "hello-cookie" of the last response
    Then the response status-code must be 200
    And the response must be served by the pod "original"
    When The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 15
    And I send a "GET" request to "http://affinity-mode-persistent.com/" with the cookie "hello-cookie" of the last response
    Then the response status-code must be 200
    And the response must be served by the pod "original"
    When The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 0
    And I send a "GET" request to "http://affinity-mode-persistent.com/" with the cookie "hello-cookie" of the last response
    Then the response status-code must be 503
    When The backend deployment "affinitypersistentecho" for the ingress resource is scaled to 2
    And I send a "GET" request to "http://affinity-mode-persistent.com/" with the cookie "hello-cookie" of the last response
    Then the response status-code must be 200
    And the response must not be served by the pod "original"
