# Ported from kubernetes/ingress-nginx test/e2e/annotations/serviceupstream.go as data:
# each ginkgo case is a scenario with the same Ingress, requests and
# expectations. ingress-nginx's echo answers in text (`host=foo`,
# `x-code=503`); the runner's echo in JSON, so a body check of what
# the backend saw is a request host or request header check here.
# Whether the ClusterIP or the endpoints are used is read inside the
# controller pod (`dbg backends`), and the second case sets the
# controller ConfigMap; the requests are ported.
@ingress-nginx
Feature: ingress-nginx service-upstream annotation

  Scenario: when using the default value (false) and enabling in the annotations should use the Service Cluster IP and Port
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: serviceupstream
      annotations:
        nginx.ingress.kubernetes.io/service-upstream: "true"
    spec:
      rules:
        - host: serviceupstream
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
    When I send a "GET" request to "http://serviceupstream/"
    Then the response status-code must be 200

  Scenario: when enabling in the configmap and disabling in the annotations should not use the Service Cluster IP and Port
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: serviceupstream
      annotations:
        nginx.ingress.kubernetes.io/service-upstream: "false"
    spec:
      rules:
        - host: serviceupstream
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
    When I send a "GET" request to "http://serviceupstream/"
    Then the response status-code must be 200
