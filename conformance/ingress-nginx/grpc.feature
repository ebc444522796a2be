# Ported from kubernetes/ingress-nginx test/e2e/annotations/grpc.go as data:
# each ginkgo case is a scenario with the same Ingress and call. The
# backend is the echo, which serves HTTP/2 without TLS (h2c) as grpcbin
# does and answers with what it received, where grpcbin answers the
# request's metadata in a protobuf message: the metadata checks are
# request header and host checks here. A call is an HTTP/2 POST with
# `content-type: application/grpc` and an empty message (the runner
# has no protobuf stubs); it succeeds on 200 without a non-zero
# grpc-status. The Services are plain Services of the echo where
# upstream names grpcbin through an ExternalName Service.
# "should return Error when request exceed timeout" has a 1 s timeout
# and a 3 s delay (the echo's X-Echo-Delay-Ms) where upstream has 10 s
# and 15 s: the runner gives a request 10 s. The two timeout cases call
# port 80 in cleartext HTTP/2, as upstream.
# Not ported (NOT-PORTED.md): "should return OK for service with backend
# protocol GRPCS" (its backend TLS settings are a configuration-snippet).
@ingress-nginx
Feature: ingress-nginx backend-protocol GRPC

  Scenario: should return OK for service with backend protocol GRPC
    Given a new random namespace
    Given a self-signed TLS secret named "echo" for the "echo" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: echo
      annotations:
        nginx.ingress.kubernetes.io/backend-protocol: "GRPC"
    spec:
      tls:
        - hosts:
            - echo
          secretName: echo
      rules:
        - host: echo
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: grpcbin-test
                    port:
                      number: 9000
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a gRPC request to "https://echo/grpcbin.GRPCBin/HeadersUnary"
    Then the gRPC call must succeed
    And the request header "Content-Type" must be "application/grpc"
    And the request host must be "echo"

  Scenario: authorization metadata should be overwritten by external auth response headers
    Given a new random namespace
    Given an httpbun authentication service
    Given a self-signed TLS secret named "echo" for the "echo" hostname
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: echo
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://${HTTPBUN}/response-headers?authorization=foo"
        nginx.ingress.kubernetes.io/auth-response-headers: "Authorization"
        nginx.ingress.kubernetes.io/backend-protocol: "GRPC"
    spec:
      tls:
        - hosts:
            - echo
          secretName: echo
      rules:
        - host: echo
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: grpcbin-test
                    port:
                      number: 9000
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a gRPC request to "https://echo/grpcbin.GRPCBin/HeadersUnary" with the header "authorization" set to "bar"
    Then the gRPC call must succeed
    And the request header "Authorization" must be "foo"

  Scenario: should return OK when request not exceed timeout
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: grpc
      annotations:
        nginx.ingress.kubernetes.io/backend-protocol: "GRPC"
        nginx.ingress.kubernetes.io/proxy-connect-timeout: "10"
        nginx.ingress.kubernetes.io/proxy-send-timeout: "10"
        nginx.ingress.kubernetes.io/proxy-read-timeout: "10"
    spec:
      rules:
        - host: grpc
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: grpcbin-delay
                    port:
                      number: 50051
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a gRPC request to "http://grpc/grpcbin.GrpcbinService/Unary"
    Then the gRPC call must succeed
    And the request header "Content-Type" must be "application/grpc"
    And the request host must be "grpc"

  Scenario: should return Error when request exceed timeout
    Given a new random namespace
    Given an Ingress resource
    """
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: grpc
      annotations:
        nginx.ingress.kubernetes.io/backend-protocol: "GRPC"
        nginx.ingress.kubernetes.io/proxy-connect-timeout: "1"
        nginx.ingress.kubernetes.io/proxy-send-timeout: "1"
        nginx.ingress.kubernetes.io/proxy-read-timeout: "1"
    spec:
      rules:
        - host: grpc
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: grpcbin-delay
                    port:
                      number: 50051
    """
    Then The Ingress status shows the IP address or FQDN where it is exposed
    When I send a gRPC request to "http://grpc/grpcbin.GrpcbinService/Unary" with the header "X-Echo-Delay-Ms" set to "3000"
    Then the gRPC call must fail
