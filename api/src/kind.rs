//! The kinds of object a tenant writes into its LB-cluster namespace:
//! what the annotation rules and the admission policy are written per.

/// The kinds a tenant writes into its LB-cluster namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    Ingress,
    Service,
    EndpointSlice,
    Secret,
    /// Gateway API kinds (`gateway.networking.k8s.io/v1`).
    Gateway,
    /// Listeners a tenant adds to a Gateway, its own or the operator's.
    ListenerSet,
    HttpRoute,
    GrpcRoute,
    TlsRoute,
    TcpRoute,
    UdpRoute,
    ReferenceGrant,
    BackendTlsPolicy,
    /// Trust anchors (`ca.crt`) a BackendTLSPolicy names.
    ConfigMap,
    /// teapot's own policy for routes (`teapot.dev/v1alpha1`).
    RouteTrafficPolicy,
}

impl ObjectKind {
    /// The Kubernetes `kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Ingress => "Ingress",
            ObjectKind::Service => "Service",
            ObjectKind::EndpointSlice => "EndpointSlice",
            ObjectKind::Secret => "Secret",
            ObjectKind::Gateway => "Gateway",
            ObjectKind::ListenerSet => "ListenerSet",
            ObjectKind::HttpRoute => "HTTPRoute",
            ObjectKind::GrpcRoute => "GRPCRoute",
            ObjectKind::TlsRoute => "TLSRoute",
            ObjectKind::TcpRoute => "TCPRoute",
            ObjectKind::UdpRoute => "UDPRoute",
            ObjectKind::ReferenceGrant => "ReferenceGrant",
            ObjectKind::BackendTlsPolicy => "BackendTLSPolicy",
            ObjectKind::ConfigMap => "ConfigMap",
            ObjectKind::RouteTrafficPolicy => "RouteTrafficPolicy",
        }
    }

    /// Every kind, for tables.
    pub const ALL: [ObjectKind; 15] = [
        ObjectKind::Ingress,
        ObjectKind::Service,
        ObjectKind::EndpointSlice,
        ObjectKind::Secret,
        ObjectKind::Gateway,
        ObjectKind::ListenerSet,
        ObjectKind::HttpRoute,
        ObjectKind::GrpcRoute,
        ObjectKind::TlsRoute,
        ObjectKind::TcpRoute,
        ObjectKind::UdpRoute,
        ObjectKind::ReferenceGrant,
        ObjectKind::BackendTlsPolicy,
        ObjectKind::ConfigMap,
        ObjectKind::RouteTrafficPolicy,
    ];

    /// Whether this is a Gateway API kind (`gateway.networking.k8s.io`).
    pub fn is_gateway_api(self) -> bool {
        !matches!(
            self,
            ObjectKind::Ingress
                | ObjectKind::Service
                | ObjectKind::EndpointSlice
                | ObjectKind::Secret
                | ObjectKind::ConfigMap
                | ObjectKind::RouteTrafficPolicy
        )
    }
}
