//! A snapshot: everything a request or handshake needs, immutable, swapped
//! in whole with `arc-swap` so readers never lock and never see half a
//! reload.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use k8s_openapi::api::networking::v1::IngressStatus;
use serde::Serialize;

use crate::manifests::Problem;
use crate::routes::RouteTable;
use crate::tls::CertTable;

/// The compiled state the data plane serves from.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Counts up with every compile; 0 is the empty table before the first.
    pub generation: u64,
    pub routes: RouteTable,
    pub certs: CertTable,
    pub report: StatusReport,
    /// Custom domains tenants route once DNS proves them.
    pub claims: Vec<crate::proof::Claim>,
    pub compile_time: Duration,
}

/// Shared, swappable pointer to the current snapshot.
pub type SnapshotHandle = Arc<ArcSwap<Snapshot>>;

/// What the admin API shows at `/status`, and what becomes Ingress status in
/// kube mode.
#[derive(Debug, Default, Serialize)]
pub struct StatusReport {
    pub generation: u64,
    pub ingresses: Vec<IngressReport>,
    pub backends: Vec<BackendReport>,
    pub problems: Vec<Problem>,
    /// Custom domains claimed by tenants and where their proof stands.
    pub domains: Vec<DomainReport>,
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
    pub status: IngressStatus,
    pub conditions: Vec<Condition>,
}

/// A Kubernetes-style condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl Condition {
    pub fn new(type_: &str, ok: bool, reason: &str, message: impl Into<String>) -> Condition {
        Condition {
            type_: type_.into(),
            status: if ok { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct BackendReport {
    pub namespace: String,
    pub service: String,
    pub port: String,
    pub endpoints: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// Endpoint addresses left out because a tenant may not use them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
}
