//! Gateway API types (`gateway.networking.k8s.io`), the kinds teapot
//! serves for tenants that route with Gateway and HTTPRoute,
//! ListenerSet for listeners added to a shared Gateway, and
//! BackendTLSPolicy for TLS from the proxy to their backends.
//!
//! Generated, never edited: `gateway/generate.sh` runs kopium 0.24.1 over
//! the upstream CRDs (the standard channel; HTTPRoute, TLSRoute, TCPRoute
//! and UDPRoute from the experimental one) at the commit named in
//! `../shared/conformance-upstream/gateway-api/SOURCE.txt`. The published
//! `gateway-api` crate pins kube 4 / k8s-openapi 0.28, not kube 5.
//!
//! Layout: one module per kind, as kopium writes it; the root types are
//! re-exported here.

#![allow(clippy::all, missing_docs, rustdoc::all)]

/// Generated from the upstream CRDs (Apache-2.0, kubernetes-sigs/
/// gateway-api): third-party in content, so repeats there are theirs.
#[path = "third_party"]
pub mod generated {
    pub mod backend_tls_policies;
    pub mod gateway_classes;
    pub mod gateways;
    pub mod grpc_routes;
    pub mod http_routes;
    pub mod listener_sets;
    pub mod reference_grants;
    pub mod tcp_routes;
    pub mod tls_routes;
    pub mod udp_routes;
}

pub use generated::backend_tls_policies::BackendTlsPolicy;
pub use generated::gateway_classes::GatewayClass;
pub use generated::gateways::Gateway;
pub use generated::grpc_routes::GrpcRoute;
pub use generated::http_routes::HttpRoute;
pub use generated::listener_sets::ListenerSet;
pub use generated::reference_grants::ReferenceGrant;
pub use generated::tcp_routes::TcpRoute;
pub use generated::tls_routes::TlsRoute;
pub use generated::udp_routes::UdpRoute;

/// The API group of every kind here.
pub const GROUP: &str = "gateway.networking.k8s.io";
