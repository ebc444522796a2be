//! What the rules need to know about the LB cluster: the Tenants, who holds
//! which host, domain and node network, and how many objects each tenant
//! namespace already has. Built in one go from a [`Store`] and swapped in
//! whole, so a review always sees one consistent picture.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use teapot_api::admission::{
    ExistingObjects, Holder, Holdings, TenantObjectRef, json_size, object_regex_cost,
};
use teapot_api::annotations::ObjectKind;
use teapot_api::regex::RegexCost;
use teapot_api::{HostPattern, Tenant};
use teapot_model::store::{NsName, Store};
use teapot_model::tenancy::claimed_hosts;

use crate::Error;

/// The operator's settings the rules depend on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyConfig {
    /// DOMAIN of `INGRESS.CLUSTER.lb.DOMAIN`, lowercase, no trailing dot.
    pub domain: String,
    /// The LB cluster's own node, pod and service ranges.
    pub lb_networks: Vec<IpNet>,
}

impl PolicyConfig {
    /// Validates and normalises the domain.
    pub fn new(domain: &str, lb_networks: Vec<IpNet>) -> Result<PolicyConfig, Error> {
        match HostPattern::parse(domain) {
            Ok(HostPattern::Exact(d)) if d.contains('.') => Ok(PolicyConfig {
                domain: d,
                lb_networks,
            }),
            _ => Err(Error::Config(format!(
                "--domain {domain:?} must be a DNS name such as example.net"
            ))),
        }
    }
}

/// Objects of one tenant namespace.
#[derive(Debug, Default)]
struct NamespaceObjects {
    names: HashMap<ObjectKind, HashSet<String>>,
    /// Ports of each `LoadBalancer` Service, by name.
    lb_listeners: HashMap<String, u32>,
    /// JSON size of each object.
    bytes: HashMap<(ObjectKind, String), u64>,
    /// What each route's regular expressions cost (routes with none are
    /// not listed).
    regex: HashMap<(ObjectKind, String), RegexCost>,
}

/// A consistent picture of the LB cluster for the rules.
#[derive(Debug, Default)]
pub struct PolicyState {
    /// Tenants by object name.
    tenants: BTreeMap<String, Arc<Tenant>>,
    /// The Tenant owning each namespace.
    by_namespace: HashMap<String, Arc<Tenant>>,
    holdings: Holdings,
    objects: HashMap<String, NamespaceObjects>,
    /// Manifest problems of the load this state came from.
    pub problems: usize,
}

impl PolicyState {
    /// Reads Tenants, Ingress hosts, Services, EndpointSlices and Secrets
    /// from `store`.
    pub fn from_store(store: &Store, problems: usize) -> PolicyState {
        let mut state = PolicyState {
            problems,
            ..PolicyState::default()
        };
        for (name, t) in &store.tenants {
            let ns = t.object.namespace_name();
            match state.by_namespace.get(&ns) {
                Some(first) => tracing::warn!(
                    tenant = %name,
                    namespace = %ns,
                    owner = ?first.metadata.name,
                    "two Tenants claim one namespace; the first (by name) owns it"
                ),
                None => {
                    state.by_namespace.insert(ns, t.object.clone());
                }
            }
            state.tenants.insert(name.clone(), t.object.clone());
        }
        state.holdings = Holdings::from_objects(
            state.tenants.values().map(|t| t.as_ref()),
            store
                .ingresses
                .iter()
                .map(|(k, v)| (k.namespace.as_str(), v.object.as_ref())),
        );
        // Names and JSON sizes of each tenant namespace's objects, for the
        // count limits and maxTotalBytes.
        for (k, v) in &store.ingresses {
            state.record(ObjectKind::Ingress, k, || json_size(&*v.object));
        }
        for (k, v) in &store.services {
            state.record(ObjectKind::Service, k, || json_size(&*v.object));
        }
        for (k, v) in &store.endpoint_slices {
            // The compact form lacks the fields the proxy drops; the quota
            // counts the JSON as written.
            state.record(ObjectKind::EndpointSlice, k, || v.object.source_bytes());
        }
        for (k, v) in &store.secrets {
            state.record(ObjectKind::Secret, k, || json_size(&v.object.source));
        }
        for (k, v) in &store.ca_secrets {
            state.record(ObjectKind::Secret, k, || json_size(&*v.object));
        }
        for (k, v) in &store.config_maps {
            state.record(ObjectKind::ConfigMap, k, || json_size(&*v.object));
        }
        state.record_gateway_api(store);
        for (k, svc) in &store.services {
            let Some(objects) = state.objects.get_mut(&k.namespace) else {
                continue;
            };
            let spec = svc.object.spec.as_ref();
            if spec.and_then(|s| s.type_.as_deref()) == Some("LoadBalancer") {
                let ports = spec.and_then(|s| s.ports.as_ref()).map_or(0, |p| p.len());
                objects
                    .lb_listeners
                    .insert(k.name.clone(), u32::try_from(ports).unwrap_or(u32::MAX));
            }
        }
        state
    }

    /// The Gateway API objects: counted and weighed like the others, their
    /// hostnames held (operators' first, then tenants' oldest first, as the
    /// proxy's re-check does in `teapot_model::tenancy`), and each
    /// Gateway's TLS, TCP and UDP listeners counted with the namespace's
    /// LoadBalancer Service ports against `l4.maxListeners`.
    fn record_gateway_api(&mut self, store: &Store) {
        let mut claimants: Vec<(&NsName, Option<&Time>, TenantObjectRef<'_>)> = Vec::new();
        for (k, v) in &store.gateways {
            self.record(ObjectKind::Gateway, k, || json_size(&*v.object));
            claimants.push((
                k,
                v.object.metadata.creation_timestamp.as_ref(),
                TenantObjectRef::Gateway(&v.object),
            ));
            let l4 = v
                .object
                .spec
                .listeners
                .iter()
                .filter(|l| matches!(l.protocol.as_str(), "TLS" | "TCP" | "UDP"))
                .count();
            if l4 > 0
                && let Some(objects) = self.objects.get_mut(&k.namespace)
            {
                objects.lb_listeners.insert(
                    gateway_listener_key(&k.name),
                    u32::try_from(l4).unwrap_or(u32::MAX),
                );
            }
        }
        for (k, v) in &store.listener_sets {
            self.record(ObjectKind::ListenerSet, k, || json_size(&v.object.set));
            claimants.push((
                k,
                v.object.set.metadata.creation_timestamp.as_ref(),
                TenantObjectRef::ListenerSet(&v.object.set),
            ));
        }
        for (k, v) in &store.http_routes {
            self.record(ObjectKind::HttpRoute, k, || json_size(&*v.object));
            self.record_regexes(
                ObjectKind::HttpRoute,
                k,
                TenantObjectRef::HttpRoute(&v.object),
            );
            claimants.push((
                k,
                v.object.metadata.creation_timestamp.as_ref(),
                TenantObjectRef::HttpRoute(&v.object),
            ));
        }
        for (k, v) in &store.grpc_routes {
            self.record(ObjectKind::GrpcRoute, k, || json_size(&*v.object));
            self.record_regexes(
                ObjectKind::GrpcRoute,
                k,
                TenantObjectRef::GrpcRoute(&v.object),
            );
            claimants.push((
                k,
                v.object.metadata.creation_timestamp.as_ref(),
                TenantObjectRef::GrpcRoute(&v.object),
            ));
        }
        for (k, v) in &store.tls_routes {
            self.record(ObjectKind::TlsRoute, k, || json_size(&*v.object));
            claimants.push((
                k,
                v.object.metadata.creation_timestamp.as_ref(),
                TenantObjectRef::TlsRoute(&v.object),
            ));
        }
        for (k, v) in &store.tcp_routes {
            self.record(ObjectKind::TcpRoute, k, || json_size(&*v.object));
        }
        for (k, v) in &store.udp_routes {
            self.record(ObjectKind::UdpRoute, k, || json_size(&*v.object));
        }
        for (k, v) in &store.reference_grants {
            self.record(ObjectKind::ReferenceGrant, k, || json_size(&*v.object));
        }
        for (k, v) in &store.backend_tls_policies {
            self.record(ObjectKind::BackendTlsPolicy, k, || json_size(&*v.object));
        }
        for (k, v) in &store.route_traffic_policies {
            self.record(ObjectKind::RouteTrafficPolicy, k, || json_size(&*v.object));
        }
        // Operators' hosts before any tenant's; tenants' oldest first.
        claimants.sort_by_key(|(k, created, _)| {
            (
                self.by_namespace.contains_key(&k.namespace),
                created.map(|t| t.0),
                *k,
            )
        });
        for (k, _, object) in claimants {
            let holder = match self.by_namespace.get(&k.namespace) {
                Some(t) => Holder::Tenant(t.spec.cluster.clone()),
                None => Holder::Operator {
                    namespace: k.namespace.clone(),
                },
            };
            for host in claimed_hosts(object) {
                self.holdings.insert_gateway_host(holder.clone(), &host);
            }
        }
    }

    /// Notes what a tenant route's regular expressions cost, for
    /// `maxRegexes` and `maxRegexBytes`.
    fn record_regexes(&mut self, kind: ObjectKind, id: &NsName, object: TenantObjectRef<'_>) {
        let Some(objects) = self.objects.get_mut(&id.namespace) else {
            return;
        };
        let cost = object_regex_cost(object);
        if cost != RegexCost::default() {
            objects.regex.insert((kind, id.name.clone()), cost);
        }
    }

    /// Notes an object of a tenant namespace (others are the operator's:
    /// no limits).
    fn record(&mut self, kind: ObjectKind, id: &NsName, size: impl FnOnce() -> usize) {
        if !self.by_namespace.contains_key(&id.namespace) {
            return;
        }
        let objects = self.objects.entry(id.namespace.clone()).or_default();
        objects
            .names
            .entry(kind)
            .or_default()
            .insert(id.name.clone());
        objects.bytes.insert((kind, id.name.clone()), size() as u64);
    }

    /// The Tenant owning `namespace`, if any.
    pub fn tenant_for_namespace(&self, namespace: &str) -> Option<&Arc<Tenant>> {
        self.by_namespace.get(namespace)
    }

    /// The Tenant whose CLUSTER is `cluster`.
    pub fn tenant_by_cluster(&self, cluster: &str) -> Option<&Arc<Tenant>> {
        self.tenants.values().find(|t| t.spec.cluster == cluster)
    }

    /// Every Tenant.
    pub fn tenants(&self) -> impl Iterator<Item = &Tenant> {
        self.tenants.values().map(|t| t.as_ref())
    }

    pub fn tenant_count(&self) -> usize {
        self.tenants.len()
    }

    pub fn holdings(&self) -> &Holdings {
        &self.holdings
    }

    /// Whether the object is known.
    pub fn contains(&self, namespace: &str, kind: ObjectKind, name: &str) -> bool {
        self.objects
            .get(namespace)
            .and_then(|o| o.names.get(&kind))
            .is_some_and(|n| n.contains(name))
    }

    /// The namespace's other objects, for the count limits.
    pub fn existing(
        &self,
        namespace: &str,
        kind: ObjectKind,
        name: &str,
        is_new: bool,
    ) -> ExistingObjects {
        let Some(objects) = self.objects.get(namespace) else {
            return ExistingObjects {
                is_new,
                ..ExistingObjects::default()
            };
        };
        let count = |k: ObjectKind| {
            let names = objects.names.get(&k);
            let n = names.map_or(0, HashSet::len);
            let own = k == kind && names.is_some_and(|s| s.contains(name));
            u32::try_from(n - usize::from(own)).unwrap_or(u32::MAX)
        };
        let lb_listeners = objects
            .lb_listeners
            .iter()
            .filter(|(n, _)| match kind {
                ObjectKind::Service => n.as_str() != name,
                ObjectKind::Gateway => **n != gateway_listener_key(name),
                _ => true,
            })
            .map(|(_, p)| *p)
            .sum();
        let own_bytes = objects
            .bytes
            .get(&(kind, name.to_string()))
            .copied()
            .unwrap_or(0);
        let own_regex = objects
            .regex
            .get(&(kind, name.to_string()))
            .copied()
            .unwrap_or_default();
        let all_regex = objects
            .regex
            .values()
            .fold(RegexCost::default(), |a, c| a.plus(*c));
        ExistingObjects {
            is_new,
            regex: RegexCost {
                count: all_regex.count - own_regex.count,
                bytes: all_regex.bytes - own_regex.bytes,
            },
            own_regex,
            bytes: objects.bytes.values().sum::<u64>() - own_bytes,
            own_bytes,
            ingresses: count(ObjectKind::Ingress),
            listener_sets: count(ObjectKind::ListenerSet),
            services: count(ObjectKind::Service),
            endpoint_slices: count(ObjectKind::EndpointSlice),
            // ConfigMaps (a BackendTLSPolicy's ca.crt) are counted with
            // the Secrets, the other certificate material.
            secrets: count(ObjectKind::Secret) + count(ObjectKind::ConfigMap),
            // RouteTrafficPolicies (teapot's own group) count with the
            // routes they are written for.
            gateway_api: ObjectKind::ALL
                .into_iter()
                .filter(|k| k.is_gateway_api() || *k == ObjectKind::RouteTrafficPolicy)
                .map(count)
                .sum(),
            lb_listeners,
        }
    }
}

/// A Gateway's entry among the LoadBalancer Services' listener counts: no
/// Service name can hold a ':'.
fn gateway_listener_key(name: &str) -> String {
    format!("Gateway:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use teapot_model::manifests::{Loaded, load_text};

    #[test]
    fn counts_exclude_the_object_under_review() {
        let text = "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: acme}\nspec: {cluster: acme}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: tenant-acme}\nspec: {type: LoadBalancer, ports: [{port: 80}, {port: 443}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: b, namespace: tenant-acme}\nspec: {ports: [{port: 80}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: c, namespace: other}\nspec: {ports: [{port: 80}]}\n";
        let mut loaded = Loaded::default();
        load_text(Path::new("x.yaml"), text, &Store::default(), &mut loaded);
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let state = PolicyState::from_store(&loaded.store, 0);
        assert_eq!(
            state
                .tenant_for_namespace("tenant-acme")
                .unwrap()
                .spec
                .cluster,
            "acme"
        );
        assert!(state.tenant_for_namespace("other").is_none());
        let e = state.existing("tenant-acme", ObjectKind::Service, "a", false);
        assert_eq!((e.services, e.lb_listeners), (1, 0));
        let e = state.existing("tenant-acme", ObjectKind::Service, "new", true);
        assert_eq!((e.services, e.lb_listeners, e.is_new), (2, 2, true));
        assert!(state.contains("tenant-acme", ObjectKind::Service, "b"));
        assert!(!state.contains("other", ObjectKind::Service, "c"));
    }

    /// Gateway API objects count against the tenant's limits, a Gateway's
    /// TLS/TCP/UDP listeners with its LoadBalancer Services' ports, and
    /// their hostnames are held against other tenants.
    #[test]
    fn gateway_api_objects_are_counted_and_hold_their_hosts() {
        let text = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec: {cluster: acme}
---
apiVersion: v1
kind: Service
metadata: {name: lb, namespace: tenant-acme}
spec: {type: LoadBalancer, ports: [{port: 53}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: tenant-acme}
spec:
  gatewayClassName: teapot
  listeners:
  - {name: web, protocol: HTTP, port: 80, hostname: '*.shop.acme.lb.example.net'}
  - {name: db, protocol: TCP, port: 5432}
  - {name: dns, protocol: UDP, port: 5353}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: store, namespace: tenant-acme}
spec:
  parentRefs: [{name: edge}]
  hostnames: [store.acme.lb.example.net]
";
        let mut loaded = Loaded::default();
        load_text(Path::new("x.yaml"), text, &Store::default(), &mut loaded);
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let state = PolicyState::from_store(&loaded.store, 0);
        let e = state.existing("tenant-acme", ObjectKind::HttpRoute, "new", true);
        assert_eq!((e.gateway_api, e.lb_listeners), (2, 3));
        // The Gateway under review does not count its own listeners twice.
        let e = state.existing("tenant-acme", ObjectKind::Gateway, "edge", false);
        assert_eq!((e.gateway_api, e.lb_listeners), (1, 1));
        assert!(state.contains("tenant-acme", ObjectKind::Gateway, "edge"));
        // Another tenant's names under the Gateway's wildcard, or the
        // route's host, are held by acme.
        for host in [
            "deep.a.shop.acme.lb.example.net",
            "store.acme.lb.example.net",
        ] {
            let host = HostPattern::parse(host).unwrap();
            assert!(
                matches!(
                    state.holdings().holder_conflicting(&host, "globex"),
                    Some(Holder::Tenant(c)) if c == "acme"
                ),
                "{host:?}"
            );
        }
    }

    #[test]
    fn domains_are_checked() {
        assert!(
            PolicyConfig::new("Example.NET.", Vec::new()).is_ok_and(|c| c.domain == "example.net")
        );
        assert!(PolicyConfig::new("localhost", Vec::new()).is_err());
        assert!(PolicyConfig::new("*.example.net", Vec::new()).is_err());
    }
}
