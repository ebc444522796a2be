//! The backend resolver: a Service and port (by number or name) to its
//! upstream, the EndpointSlices' ready endpoints, once per compile and
//! (Service, port), reusing the last compile's upstreams for unchanged
//! namespaces. The Ingress, Gateway API and L4 compiles all resolve here.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;

use serde::Serialize;

use k8s_openapi::api::networking::v1::{IngressBackend, ServiceBackendPort};
use teapot_model::endpoints::CompactSlice;
use teapot_model::store::{FastHashMap, NsName, NsRef, Store, Stored};
use teapot_model::tenancy::Tenancy;

pub(crate) use crate::compile::endpoint_cells::PortRef;
use crate::compile::endpoint_cells::{EndpointCells, PortKey, ServicePortRef};
use crate::compile::parts::{Kept, Reuse};
use crate::compile::upstream::Upstream;
use crate::live::endpoints::EndpointRegistry;

type FastHashSet<T> = hashbrown::HashSet<T, foldhash::fast::RandomState>;

/// Resolves backend references to upstreams, once per (Service, port).
pub(crate) struct Resolver<'a> {
    store: &'a Store,
    registry: &'a EndpointRegistry,
    tenancy: &'a Tenancy<'a>,
    slices: RefCell<FastHashMap<(&'a str, &'a str), Slices<'a>>>,
    /// Namespaces whose EndpointSlices are not in `slices` yet: those whose
    /// upstreams the last compile gives, indexed if one is resolved
    /// afresh ([`Resolver::index_namespace`]).
    unindexed: RefCell<FastHashSet<&'a str>>,
    cache: FastHashMap<BackendKey<'a>, Arc<Upstream>>,
    /// Upstreams of unchanged namespaces, from the last compile.
    reuse: Reuse<'a>,
    /// The endpoint cells of the upstreams resolved outside the cache, by
    /// Service, for EndpointSlice changes that need no compile
    /// (crate::compile::endpoint_sets); the cache's are recorded when the
    /// compile hands its parts on ([`Resolver::into_kept`]).
    cells: RefCell<EndpointCells>,
    /// Namespaces the last compile's upstreams were taken from that also
    /// resolved one afresh: their parts are built again, not handed on.
    fresh: RefCell<FastHashSet<String>>,
}

/// The EndpointSlices of one Service. Most Services have one slice; a Vec
/// for each was a hundred thousand allocations per large compile.
pub(crate) enum Slices<'a> {
    One(&'a CompactSlice),
    Many(Vec<&'a CompactSlice>),
}

impl<'a> Slices<'a> {
    pub(crate) fn push(&mut self, slice: &'a CompactSlice) {
        match self {
            Slices::One(first) => *self = Slices::Many(vec![*first, slice]),
            Slices::Many(all) => all.push(slice),
        }
    }

    pub(crate) fn as_slice(&self) -> &[&'a CompactSlice] {
        match self {
            Slices::One(one) => std::slice::from_ref(one),
            Slices::Many(all) => all,
        }
    }
}

/// One upstream: a Service port in a namespace.
pub(crate) type BackendKey<'a> = (&'a str, &'a str, PortRef<'a>);

/// The key of a Service backend; `None` for a resource backend.
pub(crate) fn backend_key<'a>(
    namespace: &'a str,
    backend: &'a IngressBackend,
) -> Option<BackendKey<'a>> {
    let service = backend.service.as_ref()?;
    let port = match service.port.as_ref() {
        Some(ServiceBackendPort {
            number: Some(n), ..
        }) => PortRef::Number(*n),
        Some(ServiceBackendPort { name: Some(n), .. }) => PortRef::Name(n),
        _ => PortRef::Number(0),
    };
    Some((namespace, service.name.as_str(), port))
}

/// Adds the EndpointSlices of `from` to `slices` by their Service, those
/// `wanted` says.
fn index_slices<'a>(
    slices: &mut FastHashMap<(&'a str, &'a str), Slices<'a>>,
    from: impl Iterator<Item = (&'a NsName, &'a Stored<CompactSlice>)>,
    wanted: impl Fn(&(&str, &str)) -> bool,
) {
    for (id, slice) in from {
        if let Some(service) = slice.object.service_name() {
            let key = (id.namespace.as_str(), service);
            if !wanted(&key) {
                continue;
            }
            match slices.entry(key) {
                hashbrown::hash_map::Entry::Occupied(mut e) => e.get_mut().push(&slice.object),
                hashbrown::hash_map::Entry::Vacant(e) => {
                    e.insert(Slices::One(&slice.object));
                }
            }
        }
    }
}

impl<'a> Resolver<'a> {
    /// The store the compile reads (the Secrets of basic authentication).
    pub(crate) fn store(&self) -> &'a Store {
        self.store
    }

    pub(crate) fn new(
        store: &'a Store,
        registry: &'a EndpointRegistry,
        tenancy: &'a Tenancy<'a>,
        reuse: Reuse<'a>,
    ) -> Resolver<'a> {
        // Namespace by namespace (the slices are ordered by it), so that a
        // namespace whose upstreams come from the last compile costs one
        // probe, not a pass over its slices.
        let mut slices = FastHashMap::default();
        let mut unindexed = FastHashSet::default();
        let mut next = store.endpoint_slices.keys().next();
        while let Some(id) = next {
            let namespace = id.namespace.as_str();
            if reuse.reused(namespace) {
                unindexed.insert(namespace);
            } else {
                index_slices(&mut slices, store.namespace_slices(namespace), |_| true);
            }
            // The first key past every name of this namespace: no
            // namespace holds a NUL.
            let past = NsName::new(format!("{namespace}\0"), "");
            next = store.endpoint_slices.range(past..).next().map(|(id, _)| id);
        }
        Resolver::with_slices(store, registry, tenancy, reuse, slices, unindexed)
    }

    /// Puts a namespace's EndpointSlices in the index if they are not
    /// there yet: once per compile and namespace, whatever it resolves.
    fn index_namespace(&self, namespace: &str) {
        let Some(namespace) = self.unindexed.borrow_mut().take(namespace) else {
            return;
        };
        index_slices(
            &mut self.slices.borrow_mut(),
            self.store.namespace_slices(namespace),
            |_| true,
        );
    }

    /// A resolver for the Services in `services` only: it reads their
    /// EndpointSlices, from their namespaces' ranges of the store, and no
    /// others (crate::compile::endpoint_sets).
    pub(crate) fn for_services(
        store: &'a Store,
        registry: &'a EndpointRegistry,
        tenancy: &'a Tenancy<'a>,
        reuse: Reuse<'a>,
        services: &hashbrown::HashSet<(&str, &str), foldhash::fast::RandomState>,
    ) -> Resolver<'a> {
        let mut namespaces: Vec<&str> = services.iter().map(|(ns, _)| *ns).collect();
        namespaces.sort_unstable();
        namespaces.dedup();
        let mut slices = FastHashMap::default();
        for namespace in namespaces {
            index_slices(&mut slices, store.namespace_slices(namespace), |key| {
                services.contains(key)
            });
        }
        Resolver::with_slices(
            store,
            registry,
            tenancy,
            reuse,
            slices,
            FastHashSet::default(),
        )
    }

    fn with_slices(
        store: &'a Store,
        registry: &'a EndpointRegistry,
        tenancy: &'a Tenancy<'a>,
        reuse: Reuse<'a>,
        slices: FastHashMap<(&'a str, &'a str), Slices<'a>>,
        unindexed: FastHashSet<&'a str>,
    ) -> Resolver<'a> {
        Resolver {
            store,
            registry,
            tenancy,
            slices: RefCell::new(slices),
            unindexed: RefCell::new(unindexed),
            cache: FastHashMap::default(),
            reuse,
            cells: RefCell::default(),
            fresh: RefCell::default(),
        }
    }

    /// Where upstream TLS configurations are shared across compiles.
    pub(crate) fn registry(&self) -> &'a EndpointRegistry {
        self.registry
    }

    pub(crate) fn backend(
        &mut self,
        namespace: &'a str,
        backend: &'a IngressBackend,
    ) -> Arc<Upstream> {
        let Some(key) = backend_key(namespace, backend) else {
            return Arc::new(Upstream::new(
                format!("{namespace}/<resource>"),
                Vec::new(),
                Some("resource backends are not supported".into()),
            ));
        };
        self.cached(key)
    }

    /// The upstream of a Service port by number (Gateway API backendRefs).
    pub(crate) fn service(
        &mut self,
        namespace: &'a str,
        name: &'a str,
        port: i32,
    ) -> Arc<Upstream> {
        self.cached((namespace, name, PortRef::Number(port)))
    }

    /// The upstream of one Service port (L4 listeners): by name when it
    /// has one, since a TCP and a UDP port may share a number.
    pub(crate) fn service_port(
        &mut self,
        namespace: &'a str,
        name: &'a str,
        port: i32,
        port_name: &'a str,
    ) -> Arc<Upstream> {
        let port = if port_name.is_empty() {
            PortRef::Number(port)
        } else {
            PortRef::Name(port_name)
        };
        self.cached((namespace, name, port))
    }

    pub(crate) fn cached(&mut self, key: BackendKey<'a>) -> Arc<Upstream> {
        if let Some(u) = self.cache.get(&key) {
            return u.clone();
        }
        let (namespace, name, port) = key;
        let reused = self.reuse.get(
            namespace,
            ServicePortRef {
                service: name,
                port,
            },
        );
        let upstream = match reused.map(|u| u.cloned()) {
            Some(Some(u)) => u,
            Some(None) => {
                self.mark_fresh(namespace);
                Arc::new(self.resolve_unrecorded(namespace, name, &port))
            }
            None => Arc::new(self.resolve_unrecorded(namespace, name, &port)),
        };
        self.cache.insert(key, upstream.clone());
        upstream
    }

    fn mark_fresh(&self, namespace: &str) {
        let mut fresh = self.fresh.borrow_mut();
        if !fresh.contains(namespace) {
            fresh.insert(namespace.to_string());
        }
    }

    /// What this compile hands on ([`crate::compile::parts::keep`]): a
    /// namespace whose every upstream came from the last compile, and
    /// which has as many as it had then, has the very same ones, and its
    /// part is handed on whole; every other namespace's upstreams are
    /// named and their endpoint cells recorded.
    pub(crate) fn into_kept(self) -> Kept {
        let fresh = self.fresh.into_inner();
        let mut counts: FastHashMap<&str, usize> = FastHashMap::default();
        for (ns, _, _) in self.cache.keys() {
            *counts.entry(ns).or_default() += 1;
        }
        let reused = counts.keys().filter(|ns| self.reuse.reused(ns)).count();
        let carried: FastHashSet<&str> = counts
            .iter()
            .filter(|(ns, n)| !fresh.contains(**ns) && self.reuse.kept(ns) == Some(**n))
            .map(|(ns, _)| *ns)
            .collect();
        let mut cells = self.cells.into_inner();
        let mut upstreams = Vec::new();
        for ((ns, name, port), u) in &self.cache {
            if carried.contains(ns) {
                continue;
            }
            cells.record(ns, name, PortKey::from(port), u);
            let key = ServicePortRef {
                service: name,
                port: *port,
            };
            upstreams.push((ns.to_string(), key.into(), u.clone()));
        }
        Kept {
            carried: carried.into_iter().map(str::to_string).collect(),
            upstreams,
            cells,
            reused,
        }
    }

    /// The first port of the Service `namespace/name` (ingress-nginx's
    /// port of a `default-backend`).
    pub(crate) fn first_port(&self, namespace: &str, name: &str) -> Option<i32> {
        let service = self.store.services.get(&NsRef { namespace, name })?;
        let ports = service.object.spec.as_ref()?.ports.as_ref()?;
        ports.first().map(|p| p.port)
    }

    /// The upstream of a Service port, from the store; its endpoint cell is
    /// recorded for changes of the Service's EndpointSlices.
    pub(crate) fn resolve(&self, namespace: &str, name: &str, port: &PortRef) -> Upstream {
        // Outside the cache, made anew by every compile: its namespace's
        // cells are recorded again, never handed on.
        if self.reuse.reused(namespace) {
            self.mark_fresh(namespace);
        }
        let upstream = self.resolve_unrecorded(namespace, name, port);
        self.cells
            .borrow_mut()
            .record(namespace, name, PortKey::from(port), &upstream);
        upstream
    }

    pub(crate) fn resolve_unrecorded(
        &self,
        namespace: &str,
        name: &str,
        port: &PortRef,
    ) -> Upstream {
        let label = upstream_label(namespace, name, port);
        let unavailable = |why: String| Upstream::new(label.clone(), Vec::new(), Some(why));
        let Some(service) = self
            .store
            .services
            .get(&NsRef { namespace, name })
            .map(|s| &s.object)
        else {
            return unavailable(format!("Service {namespace}/{name} not found"));
        };
        let spec = service.spec.as_ref();
        if spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName") {
            return unavailable(format!(
                "Service {namespace}/{name} is ExternalName, which teapot does not route to"
            ));
        }
        let Some(service_port) = find_port(service, port) else {
            return unavailable(format!("Service {namespace}/{name} has no port {port}"));
        };
        let port_name = service_port.name.as_deref().unwrap_or("");
        let tenant = self.tenancy.get(namespace);
        let mut refused = Vec::new();
        let mut addrs: Vec<SocketAddr> = Vec::new();
        self.index_namespace(namespace);
        let slices = self.slices.borrow();
        for slice in slices
            .get(&(namespace, name))
            .map_or(&[][..], Slices::as_slice)
        {
            if slice.address_type == "FQDN" {
                continue;
            }
            let Some(number) = slice
                .ports
                .iter()
                .find(|p| p.name.as_deref().unwrap_or("") == port_name)
                .and_then(|p| p.port)
            else {
                continue;
            };
            let Ok(number) = u16::try_from(number) else {
                continue;
            };
            for (info, addresses) in slice.endpoints() {
                // `ready` unset means ready (discovery.k8s.io/v1).
                if !info.ready().unwrap_or(true) {
                    continue;
                }
                for &ip in addresses {
                    if let Some(t) = tenant
                        && let Err(why) = t.endpoint_allowed(ip)
                    {
                        refused.push(format!(
                            "endpoint of Service {namespace}/{name} refused: {why}"
                        ));
                        continue;
                    }
                    addrs.push(SocketAddr::new(ip, number));
                }
            }
        }
        drop(slices);
        addrs.sort();
        addrs.dedup();
        refused.sort();
        refused.dedup();
        let mut upstream = if addrs.is_empty() {
            unavailable(format!(
                "no ready endpoints for Service {namespace}/{name} port {port}"
            ))
        } else {
            Upstream::new(label, self.registry.endpoints(&addrs), None)
        };
        upstream.refused = refused;
        upstream
    }

    pub(crate) fn report(&self) -> Backends {
        Backends(self.cache.values().cloned().collect())
    }
}

/// `namespace/service:port`. Built by hand: one per upstream, and the
/// formatting machinery was a tenth of a compile.
pub(crate) fn upstream_label(namespace: &str, name: &str, port: &PortRef) -> String {
    let mut label = String::with_capacity(namespace.len() + name.len() + 8);
    label.push_str(namespace);
    label.push('/');
    label.push_str(name);
    label.push(':');
    match port {
        PortRef::Number(n) => label.push_str(itoa::Buffer::new().format(*n)),
        PortRef::Name(n) => label.push_str(n),
    }
    label
}

pub(crate) fn find_port<'s>(
    service: &'s teapot_model::service::CompactService,
    port: &PortRef,
) -> Option<&'s k8s_openapi::api::core::v1::ServicePort> {
    let ports = service.spec.as_ref()?.ports.as_ref()?;
    ports.iter().find(|p| match port {
        PortRef::Number(n) => p.port == *n,
        PortRef::Name(n) => p.name.as_deref() == Some(*n),
    })
}

/// Every backend of a snapshot. Rendered only when `/status` asks:
/// formatting every endpoint of a large table would be a real share of
/// each compile.
#[derive(Debug, Default)]
pub struct Backends(pub Vec<Arc<Upstream>>);

impl Serialize for Backends {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut sorted: Vec<&Upstream> = self.0.iter().map(|u| &**u).collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        serializer.collect_seq(sorted.into_iter().map(BackendView))
    }
}

/// One backend as `/status` shows it: `namespace`, `service`, `port`,
/// `endpoints`, and why some or all are missing.
struct BackendView<'a>(&'a Upstream);

impl Serialize for BackendView<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let u = self.0;
        // The name is `namespace/service:port`; none of the parts can hold
        // '/' or ':'.
        let (namespace, rest) = u.name.split_once('/').unwrap_or(("", &u.name));
        let (service, port) = rest.rsplit_once(':').unwrap_or((rest, ""));
        let endpoints = u.endpoints.addresses();
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("namespace", namespace)?;
        map.serialize_entry("service", service)?;
        map.serialize_entry("port", port)?;
        map.serialize_entry("endpoints", &endpoints)?;
        if let Some(why) = &u.unavailable {
            map.serialize_entry("unavailable", why)?;
        }
        if !u.refused.is_empty() {
            map.serialize_entry("refused", &u.refused)?;
        }
        map.end()
    }
}
