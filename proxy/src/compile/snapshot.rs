//! A snapshot: everything a request or handshake needs, immutable, swapped
//! in whole with `arc-swap` so readers never lock and never see half a
//! reload.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use k8s_openapi::api::networking::v1::IngressStatus;
use serde::Serialize;

pub use crate::compile::backends::Backends;
use crate::compile::certs::CertTable;
pub use crate::compile::condition::Condition;
use crate::compile::routes::RouteTable;
use teapot_model::manifests::Problem;

/// The compiled state the data plane serves from.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Counts up with every compile; 0 is the empty table before the first.
    pub generation: u64,
    pub routes: RouteTable,
    /// Gateway API routes (docs/gateway-api.md); empty without Gateways.
    pub gateway: crate::compile::gateway::GatewayTable,
    pub certs: CertTable,
    /// Client-certificate settings by host (Gateway frontend validation,
    /// ingress-nginx `auth-tls-*`), read on every handshake and request.
    pub client_auth: crate::compile::client_auth::ClientAuthTable,
    pub report: StatusReport,
    /// Custom domains tenants route once DNS proves them.
    pub claims: Vec<crate::compile::domains::Claim>,
    /// Hosts that get their certificate from ACME.
    pub acme: crate::compile::acme::AcmeHosts,
    /// The L4 listener table and what each Service holds, for the loops to
    /// publish and remember; `None` when L4 is off.
    pub l4: Option<crate::compile::l4::L4Compiled>,
    /// Hosts whose TLS the shared HTTPS listener passes through
    /// (`ssl-passthrough`, crate::compile::passthrough).
    pub passthrough: crate::compile::passthrough::PassthroughTable,
    pub compile_time: Duration,
}

/// Shared, swappable pointer to the current snapshot.
pub type SnapshotHandle = Arc<ArcSwap<Snapshot>>;

/// What the admin API shows at `/status`, and what becomes Ingress (and,
/// later, Gateway API) status in kube mode.
#[derive(Debug, Default, Serialize)]
pub struct StatusReport {
    pub generation: u64,
    pub ingresses: Vec<IngressReport>,
    pub backends: Backends,
    pub problems: Vec<Problem>,
    /// Custom domains claimed by tenants and where their proof stands.
    pub domains: Vec<DomainReport>,
    /// LoadBalancer Services: allocations, listeners, conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub l4: Option<crate::compile::l4::L4Report>,
    /// GatewayClass, Gateway and route status, in the shapes of their
    /// status subresources.
    #[serde(
        rename = "gatewayAPI",
        skip_serializing_if = "crate::compile::api_status::GatewayReport::is_empty"
    )]
    pub gateway: crate::compile::api_status::GatewayReport,
    /// BackendTLSPolicy status, in the shape of its status subresource
    /// (`crate::compile::gateway::backend_tls`).
    #[serde(rename = "backendTLSPolicies", skip_serializing_if = "Vec::is_empty")]
    pub backend_tls_policies: Vec<
        crate::compile::api_status::Reported<
            teapot_gateway_api::generated::backend_tls_policies::BackendTlsPolicyStatus,
        >,
    >,
    /// RouteTrafficPolicy status (`crate::compile::gateway::route_policy`).
    #[serde(rename = "routeTrafficPolicies", skip_serializing_if = "Vec::is_empty")]
    pub route_traffic_policies: Vec<
        crate::compile::api_status::Reported<teapot_api::route_policy::RouteTrafficPolicyStatus>,
    >,
    /// How large the compiled tables are: what tenants' objects cost every
    /// replica's memory, visible to the operator.
    pub tables: TableSizes,
}

/// Sizes of a snapshot's route tables.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableSizes {
    /// Host/path routes of Ingresses.
    pub ingress_routes: usize,
    /// Gateway API host patterns with routes.
    pub gateway_hosts: usize,
    /// Gateway API (host pattern, rule match) entries, as bound: they grow
    /// with what routes wrote, never with hosts times covering wildcards.
    pub gateway_entries: usize,
    /// Pointers from host patterns to the lists they see.
    pub gateway_links: usize,
}

#[derive(Debug, Serialize)]
pub struct DomainReport {
    pub cluster: String,
    pub host: String,
    pub routed: bool,
    pub detail: String,
}

#[derive(Debug, Serialize)]
pub struct IngressReport {
    pub namespace: String,
    pub name: String,
    /// Whether teapot implements this Ingress's class.
    pub served: bool,
    pub status: Arc<IngressStatus>,
    pub conditions: Vec<Condition>,
}
