//! The Cluster API objects as this controller reads them: a handful of
//! fields of `Cluster` and `Machine` (`cluster.x-k8s.io`), read from
//! [`DynamicObject`]s so that one binary serves `v1beta2` and `v1beta1`
//! management clusters alike (the fields used here are the same in both).

use std::net::IpAddr;
use std::str::FromStr;

use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

pub const GROUP: &str = "cluster.x-k8s.io";
/// On every Machine: the name of its Cluster (same namespace).
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// On control-plane Machines (value empty).
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";

/// The served Cluster API version this controller talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapiVersion {
    /// Cluster API 1.11 and later.
    V1Beta2,
    /// Cluster API 1.10 and earlier (still served by 1.11).
    V1Beta1,
}

impl CapiVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            CapiVersion::V1Beta2 => "v1beta2",
            CapiVersion::V1Beta1 => "v1beta1",
        }
    }

    pub fn api_version(self) -> String {
        format!("{GROUP}/{}", self.as_str())
    }

    pub fn cluster(self) -> ApiResource {
        self.resource("Cluster", "clusters")
    }

    pub fn machine(self) -> ApiResource {
        self.resource("Machine", "machines")
    }

    fn resource(self, kind: &str, plural: &str) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, self.as_str(), kind),
            plural,
        )
    }

    /// Where a foreign controller's condition may go on a Cluster: a list
    /// merged by `type` under server-side apply, so Cluster API's own
    /// conditions are not touched. v1beta1's `status.conditions` is an
    /// atomic list of another shape; its v1beta2-style list lives under
    /// `status.v1beta2`.
    pub fn conditions_path(self) -> &'static [&'static str] {
        match self {
            CapiVersion::V1Beta2 => &["conditions"],
            CapiVersion::V1Beta1 => &["v1beta2", "conditions"],
        }
    }
}

impl FromStr for CapiVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<CapiVersion, String> {
        match s {
            "v1beta2" => Ok(CapiVersion::V1Beta2),
            "v1beta1" => Ok(CapiVersion::V1Beta1),
            other => Err(format!(
                "unknown Cluster API version {other:?} (v1beta2 or v1beta1)"
            )),
        }
    }
}

impl std::fmt::Display for CapiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.controlPlaneEndpoint` of a Cluster, when its host is set.
pub fn control_plane_endpoint(cluster: &DynamicObject) -> Option<(String, i64)> {
    let endpoint = cluster.data.pointer("/spec/controlPlaneEndpoint")?;
    let host = endpoint.get("host")?.as_str().filter(|h| !h.is_empty())?;
    let port = endpoint.get("port").and_then(Value::as_i64).unwrap_or(0);
    Some((host.to_string(), port))
}

/// One control-plane Machine, as far as the load balancer cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlaneMachine {
    pub name: String,
    /// Its first IPv4 `InternalIP` (`status.addresses`), once the
    /// infrastructure provider reported one.
    pub address: Option<IpAddr>,
    /// `status.nodeRef` is set: its Node registered with the cluster.
    pub has_node: bool,
    /// `metadata.deletionTimestamp` is set: it is being drained and removed.
    pub deleting: bool,
}

impl ControlPlaneMachine {
    pub fn of(machine: &DynamicObject) -> ControlPlaneMachine {
        let address = machine
            .data
            .pointer("/status/addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|a| a.get("type").and_then(Value::as_str) == Some("InternalIP"))
            .filter_map(|a| a.get("address")?.as_str()?.parse::<IpAddr>().ok())
            .find(IpAddr::is_ipv4);
        ControlPlaneMachine {
            name: machine.name_any(),
            address,
            has_node: machine
                .data
                .pointer("/status/nodeRef/name")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty()),
            deleting: machine.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// The label selector of a Cluster's control-plane Machines.
pub fn control_plane_selector(cluster_name: &str) -> String {
    format!("{CLUSTER_NAME_LABEL}={cluster_name},{CONTROL_PLANE_LABEL}")
}
