//! What one opted-in Cluster becomes in the LB cluster: a selector-less L4
//! Service of teapot's class (the address the fleet allocates is the
//! cluster's `controlPlaneEndpoint`) and one EndpointSlice that follows the
//! control-plane Machines. Pure: objects in, objects out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use teapot_api::admission::{MANAGED_BY_LABEL, MANAGED_BY_SYNC};
use teapot_api::hostname::mirrored_service_name;
use teapot_api::names::{LOAD_BALANCER_CLASS, SERVICE_NAME_LABEL};
use teapot_sync::{APP_MANAGED_BY_LABEL, label_value};

use crate::objects::ControlPlaneMachine;

/// `app.kubernetes.io/managed-by` of the LB objects, and the field manager
/// of every write.
pub use teapot_sync::CAPI as MANAGER;
/// On the LB objects: their Cluster's namespace and name, how an LB Service
/// event finds its Cluster. The agent's source labels (the only
/// `teapot.dev/` labels a tenant namespace admits), not annotations (a
/// tenant namespace admits only teapot's allowlist there).
pub use teapot_sync::{
    SOURCE_NAME_LABEL as CLUSTER_NAME_LABEL, SOURCE_NAMESPACE_LABEL as CLUSTER_NAMESPACE_LABEL,
};
/// The one port of the Service and the slice: kube-apiserver's HTTPS.
pub const PORT_NAME: &str = "kube-apiserver";
/// Active checks tighter than the fleet's defaults would not find a dead
/// API server sooner (a refused connect ejects at once); these are written
/// out so the Service says how its backends are judged.
pub const HEALTH_CHECKS: [(&str, &str); 3] = [
    ("teapot.dev/health-check-interval", "1s"),
    ("teapot.dev/health-check-unhealthy-threshold", "2"),
    ("teapot.dev/health-check-healthy-threshold", "2"),
];

/// Which Cluster (namespace and name) an LB object serves.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterKey {
    pub namespace: String,
    pub name: String,
}

impl ClusterKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> ClusterKey {
        ClusterKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The name of the Service and of its slice: `<namespace>-<name>-<hash5>`,
    /// at most 63 characters, as the agent names its mirrored Services.
    pub fn lb_name(&self) -> String {
        mirrored_service_name(&self.namespace, &self.name)
    }

    /// The Cluster an LB object names in its labels. A name too long for a
    /// label was shortened there and is not found this way; the periodic
    /// resync still reconciles its Cluster.
    pub fn of_lb_object(meta: &ObjectMeta) -> Option<ClusterKey> {
        let labels = meta.labels.as_ref()?;
        let key = ClusterKey::new(
            labels.get(CLUSTER_NAMESPACE_LABEL)?.clone(),
            labels.get(CLUSTER_NAME_LABEL)?.clone(),
        );
        (key.lb_name() == *meta.name.as_ref()?).then_some(key)
    }

    fn meta(&self, lb_namespace: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        let mut all: BTreeMap<String, String> = [
            (APP_MANAGED_BY_LABEL, MANAGER.to_string()),
            (CLUSTER_NAMESPACE_LABEL, label_value(&self.namespace)),
            (CLUSTER_NAME_LABEL, label_value(&self.name)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        all.extend(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        ObjectMeta {
            name: Some(self.lb_name()),
            namespace: Some(lb_namespace.to_string()),
            labels: Some(all),
            ..ObjectMeta::default()
        }
    }
}

impl std::fmt::Display for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The Service whose allocated address becomes the Cluster's
/// `controlPlaneEndpoint`: `type: LoadBalancer`, class `teapot.dev/lb`, one
/// TCP port `port`, no selector (the slice is written here).
pub fn service(cluster: &ClusterKey, lb_namespace: &str, port: u16) -> Service {
    let mut metadata = cluster.meta(lb_namespace, &[]);
    metadata.annotations = Some(
        HEALTH_CHECKS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            load_balancer_class: Some(LOAD_BALANCER_CLASS.into()),
            // teapot listens itself; node ports would open the LB
            // cluster's nodes (and a tenant namespace refuses them).
            allocate_load_balancer_node_ports: Some(false),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.into()),
                port: port.into(),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The Service's one EndpointSlice: an endpoint per control-plane Machine
/// with an InternalIP that is not being deleted, on the API servers' port.
pub fn slice(
    cluster: &ClusterKey,
    lb_namespace: &str,
    apiserver_port: u16,
    machines: &[ControlPlaneMachine],
) -> EndpointSlice {
    let service_name = cluster.lb_name();
    let metadata = cluster.meta(
        lb_namespace,
        &[
            (SERVICE_NAME_LABEL, &service_name),
            // The value the webhook asks of a tenant namespace's slices; the
            // EndpointSlice controller leaves such slices alone, and the
            // agent's GC takes only the slices it mirrored itself.
            (MANAGED_BY_LABEL, MANAGED_BY_SYNC),
        ],
    );
    EndpointSlice {
        metadata,
        address_type: "IPv4".into(),
        endpoints: Some(endpoints(machines)),
        ports: Some(vec![EndpointPort {
            name: Some(PORT_NAME.into()),
            port: Some(apiserver_port.into()),
            protocol: Some("TCP".into()),
            ..EndpointPort::default()
        }]),
    }
}

/// The endpoints of `machines`, sorted by address.
///
/// A deleting Machine is left out altogether: Cluster API drains it next,
/// and a connection sent there would be cut mid-watch. A Machine counts as
/// ready once its Node registered (`nodeRef`), except while no Machine has
/// one: the first control plane registers its Node and Cluster API learns
/// its `nodeRef` through this very endpoint (kubeadm's kubeconfigs and the
/// cluster's kubeconfig Secret point at `controlPlaneEndpoint`), so the
/// endpoint must route there before any Node exists. The fleet's active
/// TCP checks keep an API server that is not listening yet out of rotation
/// either way.
pub fn endpoints(machines: &[ControlPlaneMachine]) -> Vec<Endpoint> {
    let live = || machines.iter().filter(|m| !m.deleting);
    let bootstrapping = !live().any(|m| m.has_node);
    let mut out: Vec<Endpoint> = live()
        .filter_map(|m| {
            let ready = m.has_node || bootstrapping;
            Some(Endpoint {
                addresses: vec![m.address?.to_string()],
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    serving: Some(ready),
                    terminating: Some(false),
                }),
                ..Endpoint::default()
            })
        })
        .collect();
    out.sort_by(|a, b| a.addresses.cmp(&b.addresses));
    out.dedup_by(|a, b| a.addresses == b.addresses);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, ip: &str, has_node: bool, deleting: bool) -> ControlPlaneMachine {
        ControlPlaneMachine {
            name: name.into(),
            address: ip.parse().ok(),
            has_node,
            deleting,
        }
    }

    fn ready_addresses(endpoints: &[Endpoint]) -> Vec<(String, bool)> {
        endpoints
            .iter()
            .map(|e| {
                let ready = e.conditions.as_ref().and_then(|c| c.ready);
                (e.addresses[0].clone(), ready == Some(true))
            })
            .collect()
    }

    #[test]
    fn the_first_machine_is_ready_before_any_node_registered() {
        let machines = [machine("a", "10.0.0.1", false, false)];
        assert_eq!(
            ready_addresses(&endpoints(&machines)),
            [("10.0.0.1".into(), true)]
        );
    }

    #[test]
    fn once_a_node_registered_new_machines_wait_for_theirs_and_deleting_ones_leave() {
        let machines = [
            machine("old", "10.0.0.3", true, true),
            machine("new", "10.0.0.2", false, false),
            machine("kept", "10.0.0.1", true, false),
            machine("no-address", "", true, false),
        ];
        assert_eq!(
            ready_addresses(&endpoints(&machines)),
            [("10.0.0.1".into(), true), ("10.0.0.2".into(), false)]
        );
    }

    #[test]
    fn the_last_machine_deleting_leaves_an_empty_slice() {
        let machines = [machine("a", "10.0.0.1", true, true)];
        assert!(endpoints(&machines).is_empty());
    }

    #[test]
    fn lb_objects_name_their_cluster() {
        let key = ClusterKey::new("capi-system", "prod");
        let svc = service(&key, "lb", 6443);
        assert_eq!(ClusterKey::of_lb_object(&svc.metadata), Some(key.clone()));
        let spec = svc.spec.unwrap();
        assert_eq!(spec.load_balancer_class.as_deref(), Some("teapot.dev/lb"));
        assert!(spec.selector.is_none());
        let s = slice(&key, "lb", 6443, &[]);
        assert_eq!(
            s.metadata.labels.unwrap()[SERVICE_NAME_LABEL],
            key.lb_name()
        );
        assert!(key.lb_name().len() <= 63);
    }

    /// A tenant namespace is a place for the endpoint too: the Service and
    /// slice pass the webhook's rules there (the same `teapot_api::admission`
    /// the proxy applies again), for a Tenant whose nodeCIDRs hold the
    /// control-plane Machines.
    #[test]
    fn the_lb_objects_pass_the_tenant_policy() {
        use teapot_api::admission::{self, AdmissionContext, Holdings};
        use teapot_api::{Tenant, TenantSpec};
        let tenant = Tenant::new(
            "prod",
            TenantSpec {
                cluster: "prod".into(),
                node_cidrs: vec!["10.0.0.0/24".into()],
                ..TenantSpec::default()
            },
        );
        let holdings = Holdings::from_objects([&tenant], []);
        let ctx = AdmissionContext::new(&tenant, "example.net", &[], &holdings);
        let ns = tenant.namespace_name();
        let key = ClusterKey::new("capi-system", "prod");
        let machines = [
            machine("a", "10.0.0.1", true, false),
            machine("b", "10.0.0.2", true, false),
        ];
        for object in [
            serde_json::to_value(service(&key, &ns, 6443)).unwrap(),
            serde_json::to_value(slice(&key, &ns, 6443, &machines)).unwrap(),
        ] {
            let mut object = object;
            object["apiVersion"] = serde_json::json!(if object.get("addressType").is_some() {
                "discovery.k8s.io/v1"
            } else {
                "v1"
            });
            object["kind"] = serde_json::json!(if object.get("addressType").is_some() {
                "EndpointSlice"
            } else {
                "Service"
            });
            let checked = admission::check_object(&ctx, &ns, &object);
            assert!(
                checked.violations.is_empty(),
                "{object}: {:?}",
                checked.violations
            );
        }
    }
}
