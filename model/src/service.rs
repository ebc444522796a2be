//! Services as the store keeps them: [`CompactService`], made once when
//! the Service enters the store ([`crate::store::Store::insert`]).
//!
//! A typed `Service` is 840 bytes in its `Arc` before any string: two
//! dozen `Option` fields of `ServiceSpec` and sixteen of `ObjectMeta`,
//! most of them `None`, and a 540-byte map node for each label or
//! selector map. The compact form keeps inline what teapot reads and the
//! API server sets on every Service (ports, type, clusterIP(s), IP
//! families and policy, traffic policies, session affinity, selector,
//! load balancer class), the metadata as [`CompactMeta`], and every other
//! spec field as written behind one pointer ([`CompactServiceSpec::rest`]),
//! `None` for almost every Service.
//!
//! Nothing is dropped: [`CompactService::to_typed`] is the Service that
//! was stored, so the proxy's second admission check
//! ([`crate::tenancy::admit`]) judges the same fields and weighs the same
//! JSON size for `maxTotalBytes` as before.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec, ServiceStatus};

use crate::meta::{CompactMap, CompactMeta};

/// A Service in the form the store keeps.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactService {
    pub metadata: CompactMeta,
    pub spec: Option<CompactServiceSpec>,
    /// Boxed: a ClusterIP Service's status is empty or absent.
    pub status: Option<Box<ServiceStatus>>,
}

/// `ServiceSpec` as the store keeps it (see the module).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompactServiceSpec {
    pub ports: Option<Box<[ServicePort]>>,
    pub type_: Option<Box<str>>,
    pub cluster_ip: Option<Box<str>>,
    pub cluster_ips: Option<Box<[String]>>,
    pub ip_families: Option<Box<[String]>>,
    pub ip_family_policy: Option<Box<str>>,
    pub internal_traffic_policy: Option<Box<str>>,
    pub external_traffic_policy: Option<Box<str>>,
    pub session_affinity: Option<Box<str>>,
    pub load_balancer_class: Option<Box<str>>,
    pub selector: Option<CompactMap>,
    pub allocate_load_balancer_node_ports: Option<bool>,
    /// Every other field as written; `None` when all of them are unset.
    rest: Option<Box<ServiceSpec>>,
}

fn boxed(s: Option<String>) -> Option<Box<str>> {
    s.map(String::into_boxed_str)
}

fn unboxed(s: &Option<Box<str>>) -> Option<String> {
    s.as_deref().map(String::from)
}

impl CompactServiceSpec {
    pub fn new(mut spec: ServiceSpec) -> CompactServiceSpec {
        let ports = spec.ports.take().map(Vec::into_boxed_slice);
        let type_ = boxed(spec.type_.take());
        let cluster_ip = boxed(spec.cluster_ip.take());
        let cluster_ips = spec.cluster_ips.take().map(Vec::into_boxed_slice);
        let ip_families = spec.ip_families.take().map(Vec::into_boxed_slice);
        let ip_family_policy = boxed(spec.ip_family_policy.take());
        let internal_traffic_policy = boxed(spec.internal_traffic_policy.take());
        let external_traffic_policy = boxed(spec.external_traffic_policy.take());
        let session_affinity = boxed(spec.session_affinity.take());
        let load_balancer_class = boxed(spec.load_balancer_class.take());
        let selector = spec.selector.take().map(CompactMap::new);
        let allocate_load_balancer_node_ports = spec.allocate_load_balancer_node_ports.take();
        CompactServiceSpec {
            ports,
            type_,
            cluster_ip,
            cluster_ips,
            ip_families,
            ip_family_policy,
            internal_traffic_policy,
            external_traffic_policy,
            session_affinity,
            load_balancer_class,
            selector,
            allocate_load_balancer_node_ports,
            rest: (spec != ServiceSpec::default()).then(|| Box::new(spec)),
        }
    }

    /// The spec as written.
    pub fn to_typed(&self) -> ServiceSpec {
        let mut spec = self.rest.as_deref().cloned().unwrap_or_default();
        spec.ports = self.ports.as_deref().map(<[ServicePort]>::to_vec);
        spec.type_ = unboxed(&self.type_);
        spec.cluster_ip = unboxed(&self.cluster_ip);
        spec.cluster_ips = self.cluster_ips.as_deref().map(<[String]>::to_vec);
        spec.ip_families = self.ip_families.as_deref().map(<[String]>::to_vec);
        spec.ip_family_policy = unboxed(&self.ip_family_policy);
        spec.internal_traffic_policy = unboxed(&self.internal_traffic_policy);
        spec.external_traffic_policy = unboxed(&self.external_traffic_policy);
        spec.session_affinity = unboxed(&self.session_affinity);
        spec.load_balancer_class = unboxed(&self.load_balancer_class);
        spec.selector = self.selector.as_ref().map(CompactMap::to_map);
        spec.allocate_load_balancer_node_ports = self.allocate_load_balancer_node_ports;
        spec
    }

    /// `spec.externalName` as written.
    pub fn external_name(&self) -> Option<&str> {
        self.rest.as_ref()?.external_name.as_deref()
    }

    /// `spec.loadBalancerIP` as written.
    pub fn load_balancer_ip(&self) -> Option<&str> {
        self.rest.as_ref()?.load_balancer_ip.as_deref()
    }

    /// `spec.loadBalancerSourceRanges` as written.
    pub fn load_balancer_source_ranges(&self) -> Option<&[String]> {
        self.rest.as_ref()?.load_balancer_source_ranges.as_deref()
    }

    /// The fields not kept inline, as written (`None`: all unset).
    pub fn rest(&self) -> Option<&ServiceSpec> {
        self.rest.as_deref()
    }
}

impl CompactService {
    pub fn new(service: Service) -> CompactService {
        CompactService {
            metadata: CompactMeta::new(service.metadata),
            spec: service.spec.map(CompactServiceSpec::new),
            status: service.status.map(Box::new),
        }
    }

    /// The Service as it was stored: for the tenant policy's re-check
    /// (the same fields judged, the same JSON size weighed) and for
    /// serializing.
    pub fn to_typed(&self) -> Service {
        Service {
            metadata: self.metadata.to_typed(),
            spec: self.spec.as_ref().map(CompactServiceSpec::to_typed),
            status: self.status.as_deref().cloned(),
        }
    }
}

impl From<Service> for CompactService {
    fn from(service: Service) -> CompactService {
        CompactService::new(service)
    }
}

/// Serialized as the typed Service (a report or a tool that writes the
/// store back out).
impl serde::Serialize for CompactService {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_typed().serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Service with every field of its spec set, and status.
    fn every_field() -> Service {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "t", "uid": "1", "resourceVersion": "7",
                         "labels": {"app": "web"}, "annotations": {"teapot.dev/ip-families": "IPv4,IPv6"},
                         "finalizers": ["service.kubernetes.io/load-balancer-cleanup"]},
            "spec": {
                "allocateLoadBalancerNodePorts": false,
                "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::10"],
                "externalIPs": ["192.0.2.9"], "externalName": "db.example",
                "externalTrafficPolicy": "Local", "healthCheckNodePort": 30999,
                "internalTrafficPolicy": "Cluster", "ipFamilies": ["IPv4", "IPv6"],
                "ipFamilyPolicy": "PreferDualStack", "loadBalancerClass": "teapot.dev/lb",
                "loadBalancerIP": "192.0.2.1", "loadBalancerSourceRanges": ["10.0.0.0/8"],
                "ports": [{"name": "http", "port": 80, "targetPort": "web", "nodePort": 30080,
                           "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"}],
                "publishNotReadyAddresses": true, "selector": {"app": "web"},
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
                "trafficDistribution": "PreferClose", "type": "LoadBalancer"
            },
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]},
                       "conditions": [{"type": "Allocated", "status": "True", "reason": "Allocated",
                                       "message": "", "lastTransitionTime": "2026-11-30T00:00:00Z"}]}
        }))
        .unwrap()
    }

    /// If the compact form dropped a field (or k8s-openapi added one the
    /// fixture lacks), the Service would not come back as written and the
    /// tenant check would judge, and weigh, something else.
    #[test]
    fn every_field_comes_back_as_written() {
        let typed = every_field();
        let spec = serde_json::to_value(typed.spec.as_ref().unwrap()).unwrap();
        assert_eq!(spec.as_object().unwrap().len(), 20, "{spec}");
        let compact = CompactService::new(typed.clone());
        assert_eq!(compact.to_typed(), typed);
        assert_eq!(
            teapot_api::admission::json_size(&compact.to_typed()),
            teapot_api::admission::json_size(&typed)
        );
        let spec = compact.spec.as_ref().unwrap();
        assert_eq!(spec.load_balancer_ip(), Some("192.0.2.1"));
        assert_eq!(spec.external_name(), Some("db.example"));
        assert_eq!(
            spec.load_balancer_source_ranges(),
            Some(&["10.0.0.0/8".to_string()][..])
        );
        assert_eq!(spec.selector.as_ref().unwrap().get("app"), Some("web"));
    }

    /// Unset and empty stay apart (`ports: []` is not an absent list).
    #[test]
    fn unset_and_empty_stay_apart() {
        for text in [
            "{metadata: {name: a}}",
            "{metadata: {name: a}, spec: {}}",
            "{metadata: {name: a}, spec: {ports: [], selector: {}}, status: {}}",
            "{metadata: {name: a}, spec: {ports: [{port: 80}]}}",
        ] {
            let typed: Service = serde_yaml::from_str(text).unwrap();
            let compact = CompactService::new(typed.clone());
            assert_eq!(compact.to_typed(), typed, "{text}");
        }
        let plain: Service =
            serde_yaml::from_str("{metadata: {name: a}, spec: {type: ClusterIP, clusterIP: 10.96.0.1, clusterIPs: [10.96.0.1], ipFamilies: [IPv4], ipFamilyPolicy: SingleStack, internalTrafficPolicy: Cluster, sessionAffinity: None, ports: [{port: 80}]}}")
                .unwrap();
        // What the API server sets on every Service is kept inline.
        let compact = CompactService::new(plain);
        assert!(compact.spec.as_ref().unwrap().rest().is_none());
        assert!(compact.metadata.rest().is_none());
    }

    /// The point of the type: under half the typed Service.
    #[test]
    fn is_less_than_half_of_a_typed_service() {
        let compact = std::mem::size_of::<CompactService>();
        let typed = std::mem::size_of::<Service>();
        assert!(2 * compact < typed, "{compact} bytes, Service {typed}");
    }
}
