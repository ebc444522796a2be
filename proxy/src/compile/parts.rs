//! What one compile keeps for the next, per tenant namespace, so that a
//! change in one namespace does not redo the others' work: one tenant's
//! churn must not cost every other tenant.
//!
//! The part of a compile that grows with a tenant's endpoints is resolving
//! its backends: Service ports to the ready, allowed endpoint addresses
//! ([`Upstream`]s). Those depend on
//!
//! - the namespace's own Services and EndpointSlices;
//! - the namespace's Tenant, and every other Tenant's `nodeCIDRs` (an
//!   endpoint may not point into another tenant's nodes), and the LB
//!   cluster's networks.
//!
//! So a namespace's upstreams are reused as they are (the same `Arc`s,
//! round-robin position included) when its Services and EndpointSlices are
//! the objects of the last compile (the same `Arc`s, which the kube watch
//! and the manifests loader keep for unchanged objects and files, or
//! equal ones) and no Tenant's name or spec and no LB network changed. Any Tenant
//! change redoes every namespace: it can move what every other tenant's
//! endpoints may use.
//!
//! What is handed on is handed on whole where it can be: a namespace
//! whose every upstream this compile came from the last one, and which
//! has as many as it had, has the very same upstreams (the mapping is one
//! to one), so its part (inputs, upstreams) and its endpoint cells move to
//! the next compile as they are, with no pass over them ([`keep`]). A
//! namespace that resolved an upstream afresh (a new Service port named,
//! or one resolved outside the resolver's cache: an error-page or
//! authentication Service) or uses fewer than before is built again from
//! this compile's upstreams. The property tests compare both what is
//! served and what is handed on with a full compile's.
//!
//! Every Tenant's grants and node networks, as the compile read them, are
//! kept too: the next compile of the same Tenants, and an EndpointSlice
//! change stored without a compile (crate::compile::endpoint_sets), judge
//! addresses and hosts against them rather than reading every Tenant
//! again.
//!
//! What depends on several tenants at once and is cheap per object (host
//! claims and their first claimant, certificates, custom-domain owners, L4
//! addresses and ports) is recomputed in every compile, from the whole
//! store: a released host or port is then seen by the next claimant in the
//! same compile, with no rule for what to invalidate.

use std::sync::Arc;

use ipnet::IpNet;
use teapot_api::Tenant;
use teapot_api::admission::Holdings;
use teapot_model::endpoints::CompactSlice;
use teapot_model::service::CompactService;
use teapot_model::store::{FastHashMap, Store};

use crate::compile::endpoint_cells::{EndpointCells, PortRef, ServicePort, ServicePortRef};
use crate::compile::upstream::Upstream;

/// The parts of the last compile, for the next. Start with
/// [`CompiledParts::default`] (nothing to reuse: a full compile).
#[derive(Debug, Default)]
pub struct CompiledParts {
    tenants: Vec<Arc<Tenant>>,
    lb_networks: Vec<IpNet>,
    /// Every Tenant's grants and node networks as the compile read them
    /// (shared, not copied: `Holdings` keeps them behind `Arc`s), for the
    /// next compile of the same Tenants and for an EndpointSlice change
    /// judged without a compile (crate::compile::endpoint_sets).
    holdings: Holdings,
    namespaces: FastHashMap<String, NamespacePart>,
    reused: usize,
    carried: usize,
    /// Every upstream's endpoint cell, by Service: where an EndpointSlice
    /// change is stored without a compile (crate::compile::endpoint_sets).
    cells: EndpointCells,
}

impl CompiledParts {
    /// Every Tenant's grants and node networks as the last compile read
    /// them, if `tenants` and `lb_networks` are what it read.
    pub(crate) fn holdings_for(
        &self,
        tenants: &[&Arc<Tenant>],
        lb_networks: &[IpNet],
    ) -> Option<&Holdings> {
        same_tenants(self, tenants, lb_networks).then_some(&self.holdings)
    }

    /// Namespaces whose backends the last compile took over unchanged.
    pub fn reused_namespaces(&self) -> usize {
        self.reused
    }

    /// Namespaces whose parts the last compile handed on whole (their
    /// upstreams exactly the compile before's).
    pub fn carried_namespaces(&self) -> usize {
        self.carried
    }

    /// Namespaces the last compile keeps parts for.
    pub fn namespaces(&self) -> usize {
        self.namespaces.len()
    }

    /// The endpoint cells of the last compile's upstreams.
    pub fn cells(&self) -> &EndpointCells {
        &self.cells
    }

    /// The upstream the last compile kept for a Service port, if any;
    /// `port` is a number when it parses as one.
    pub fn upstream(&self, namespace: &str, service: &str, port: &str) -> Option<&Arc<Upstream>> {
        let part = self.namespaces.get(namespace)?;
        let port = port.parse().map_or(PortRef::Name(port), PortRef::Number);
        part.backends.get(&ServicePortRef { service, port })
    }
}

/// One namespace's inputs and what was built from them.
#[derive(Debug, Default)]
struct NamespacePart {
    inputs: NamespaceInputs,
    backends: FastHashMap<ServicePort, Arc<Upstream>>,
}

/// The objects a namespace's backends were resolved from, by name. Holding
/// them keeps their addresses from being reused, so pointer equality means
/// "the same object".
#[derive(Debug, Default)]
struct NamespaceInputs {
    services: Vec<(String, Arc<CompactService>)>,
    slices: Vec<(String, Arc<CompactSlice>)>,
}

/// The current inputs of every namespace, borrowed from the store.
pub(crate) struct CurrentInputs<'s> {
    by_namespace: FastHashMap<&'s str, BorrowedInputs<'s>>,
}

#[derive(Default)]
struct BorrowedInputs<'s> {
    services: Vec<(&'s str, &'s Arc<CompactService>)>,
    slices: Vec<(&'s str, &'s Arc<CompactSlice>)>,
}

impl<'s> CurrentInputs<'s> {
    pub(crate) fn new(store: &'s Store) -> CurrentInputs<'s> {
        let mut by_namespace: FastHashMap<&str, BorrowedInputs> = FastHashMap::default();
        for (id, s) in &store.services {
            let e = by_namespace.entry(id.namespace.as_str()).or_default();
            e.services.push((id.name.as_str(), &s.object));
        }
        for (id, s) in &store.endpoint_slices {
            let e = by_namespace.entry(id.namespace.as_str()).or_default();
            e.slices.push((id.name.as_str(), &s.object));
        }
        for inputs in by_namespace.values_mut() {
            inputs.services.sort_unstable_by_key(|(name, _)| *name);
            inputs.slices.sort_unstable_by_key(|(name, _)| *name);
        }
        CurrentInputs { by_namespace }
    }
}

/// The same objects by name: the very `Arc`s (the usual case, and a
/// pointer compare), or equal ones (a file written again unchanged).
fn same<T: PartialEq>(now: &[(&str, &Arc<T>)], then: &[(String, Arc<T>)]) -> bool {
    now.len() == then.len()
        && now
            .iter()
            .zip(then)
            .all(|((n, a), (m, b))| *n == m && (Arc::ptr_eq(a, b) || ***a == **b))
}

/// A Tenant as the policy reads it: its name and spec.
fn same_tenant(a: &Tenant, b: &Tenant) -> bool {
    std::ptr::eq(a, b) || (a.metadata.name == b.metadata.name && a.spec == b.spec)
}

/// Whether `tenants` and `lb_networks` are what the compile of `previous`
/// read (the same Tenants, or equal ones).
fn same_tenants(previous: &CompiledParts, tenants: &[&Arc<Tenant>], lb_networks: &[IpNet]) -> bool {
    previous.tenants.len() == tenants.len()
        && previous
            .tenants
            .iter()
            .zip(tenants)
            .all(|(a, b)| same_tenant(a, b))
        && previous.lb_networks == lb_networks
}

/// Which namespaces' upstreams a compile may take from the last one.
pub(crate) struct Reuse<'p> {
    namespaces: FastHashMap<&'p str, &'p FastHashMap<ServicePort, Arc<Upstream>>>,
}

impl<'p> Reuse<'p> {
    /// Nothing to reuse.
    pub(crate) fn none() -> Reuse<'p> {
        Reuse {
            namespaces: FastHashMap::default(),
        }
    }

    /// The namespaces of `previous` whose inputs are unchanged in `now`.
    pub(crate) fn new(
        previous: &'p CompiledParts,
        now: &CurrentInputs<'_>,
        tenants: &[&Arc<Tenant>],
        lb_networks: &[IpNet],
    ) -> Reuse<'p> {
        let mut namespaces = FastHashMap::default();
        if same_tenants(previous, tenants, lb_networks) {
            for (ns, part) in &previous.namespaces {
                let unchanged = now.by_namespace.get(ns.as_str()).is_some_and(|n| {
                    same(&n.services, &part.inputs.services) && same(&n.slices, &part.inputs.slices)
                });
                if unchanged {
                    namespaces.insert(ns.as_str(), &part.backends);
                }
            }
        }
        Reuse { namespaces }
    }

    /// `None` when the namespace's upstreams are not taken from the last
    /// compile; then whether it had this one.
    pub(crate) fn get(
        &self,
        namespace: &str,
        key: ServicePortRef<'_>,
    ) -> Option<Option<&Arc<Upstream>>> {
        Some(self.namespaces.get(namespace)?.get(&key))
    }

    pub(crate) fn reused(&self, namespace: &str) -> bool {
        self.namespaces.contains_key(namespace)
    }

    /// How many upstreams the last compile kept for a namespace it may
    /// take from.
    pub(crate) fn kept(&self, namespace: &str) -> Option<usize> {
        self.namespaces.get(namespace).map(|b| b.len())
    }
}

/// What a compile's resolver hands on, owned, so that the last compile's
/// parts can be taken apart after it: the namespaces whose upstreams are
/// the last compile's, exactly (the same ones, no other), and the others'
/// upstreams and endpoint cells.
pub(crate) struct Kept {
    /// Handed on whole: part, inputs and endpoint cells.
    pub(crate) carried: Vec<String>,
    /// The other namespaces' upstreams.
    pub(crate) upstreams: Vec<(String, ServicePort, Arc<Upstream>)>,
    /// The other namespaces' endpoint cells.
    pub(crate) cells: EndpointCells,
    /// Namespaces whose upstreams came from the last compile.
    pub(crate) reused: usize,
}

/// Builds the parts the next compile gets from this one: a carried
/// namespace's part and cells moved out of `previous` (its inputs are
/// unchanged, or it would not have been taken from), the others built from
/// `kept`. A route change in one namespace then costs no pass over the
/// others' upstreams, inputs and cells.
pub(crate) fn keep(
    now: &CurrentInputs<'_>,
    tenants: &[&Arc<Tenant>],
    lb_networks: &[IpNet],
    holdings: &Holdings,
    kept: Kept,
    mut previous: CompiledParts,
) -> CompiledParts {
    let mut namespaces: FastHashMap<String, NamespacePart> = FastHashMap::default();
    let mut cells = kept.cells;
    let carried = kept.carried.len();
    for namespace in kept.carried {
        if let Some(namespace_cells) = previous.cells.take_namespace(&namespace) {
            cells.put_namespace(namespace.clone(), namespace_cells);
        }
        if let Some(part) = previous.namespaces.remove(&namespace) {
            namespaces.insert(namespace, part);
        }
    }
    let mut built: Vec<String> = Vec::new();
    for (namespace, name, upstream) in kept.upstreams {
        let part = match namespaces.get_mut(&namespace) {
            Some(part) => part,
            None => {
                built.push(namespace.clone());
                namespaces.entry(namespace).or_default()
            }
        };
        part.backends.insert(name, upstream);
    }
    for ns in built {
        let (Some(part), Some(n)) = (namespaces.get_mut(&ns), now.by_namespace.get(ns.as_str()))
        else {
            continue;
        };
        part.inputs = NamespaceInputs {
            services: n
                .services
                .iter()
                .map(|(name, s)| (name.to_string(), Arc::clone(s)))
                .collect(),
            slices: n
                .slices
                .iter()
                .map(|(name, s)| (name.to_string(), Arc::clone(s)))
                .collect(),
        };
    }
    CompiledParts {
        tenants: tenants.iter().map(|t| Arc::clone(t)).collect(),
        lb_networks: lb_networks.to_vec(),
        holdings: holdings.clone(),
        namespaces,
        reused: kept.reused,
        carried,
        cells,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use rand::{Rng, SeedableRng};
    use teapot_model::manifests::FileCache;
    use teapot_model::store::Store;

    use super::*;
    use crate::compile::{CompileOptions, compile_incremental};
    use crate::live::endpoints::EndpointRegistry;

    const TENANTS: usize = 4;

    /// One tenant's objects: a Tenant, a Service, `slices` EndpointSlices
    /// with `ready` endpoints each, an Ingress whose rules `routes` picks:
    /// 0 one path, 1 another path to the same backend, 2 a second path to
    /// the Service's port by number (one more upstream).
    fn tenant_docs(t: usize, slices: usize, ready: usize, cidr: u8, routes: u8) -> Vec<String> {
        let mut docs = vec![format!(
            "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: t{t}}}\nspec: {{cluster: t{t}, nodeCIDRs: [10.{t}.0.0/{cidr}]}}\n"
        )];
        docs.push(format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: tenant-t{t}}}\nspec: {{ports: [{{name: http, port: 80}}]}}\n"
        ));
        for s in 0..slices {
            let endpoints: Vec<String> = (0..4)
                .map(|e| {
                    format!(
                        "{{addresses: [10.{t}.{s}.{e}], conditions: {{ready: {}}}}}",
                        e < ready
                    )
                })
                .collect();
            docs.push(format!(
                "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: web-{s}, namespace: tenant-t{t}, labels: {{kubernetes.io/service-name: web, endpointslice.kubernetes.io/managed-by: sync.teapot.dev}}}}\naddressType: IPv4\nports: [{{name: http, port: 30080}}]\nendpoints: [{}]\n",
                endpoints.join(", ")
            ));
        }
        let by_name = "backend: {service: {name: web, port: {name: http}}}";
        let paths = match routes {
            0 => format!("[{{path: /, pathType: Prefix, {by_name}}}]"),
            1 => format!("[{{path: /v2, pathType: Prefix, {by_name}}}]"),
            _ => format!(
                "[{{path: /, pathType: Prefix, {by_name}}}, {{path: /n, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]"
            ),
        };
        docs.push(format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: web, namespace: tenant-t{t}}}\nspec:\n  ingressClassName: teapot\n  rules:\n  - http: {{paths: {paths}}}\n"
        ));
        docs
    }

    /// A directory with one file per tenant, as the manifests source sees it.
    struct World {
        dir: tempfile::TempDir,
        /// Per tenant: (slices, ready endpoints per slice, nodeCIDR prefix,
        /// the Ingress's rules).
        tenants: Vec<(usize, usize, u8, u8)>,
    }

    impl World {
        fn new() -> World {
            let world = World {
                dir: tempfile::tempdir().unwrap(),
                tenants: vec![(2, 2, 16, 0); TENANTS],
            };
            for t in 0..TENANTS {
                world.write(t);
            }
            world
        }

        fn write(&self, t: usize) {
            let (slices, ready, cidr, routes) = self.tenants[t];
            let text = tenant_docs(t, slices, ready, cidr, routes).join("---\n");
            std::fs::write(self.dir.path().join(format!("t{t}.yaml")), text).unwrap();
        }

        fn change(&mut self, t: usize, what: u32) {
            let entry = &mut self.tenants[t];
            match what {
                0 => entry.0 = (entry.0 % 3) + 1,
                1 => entry.1 = (entry.1 + 1) % 5,
                // A route change: the same upstreams, or one more or less.
                3 => entry.3 = (entry.3 + 1) % 3,
                // A Tenant change: its nodeCIDRs shrink so that some of its
                // endpoints are refused.
                _ => entry.2 = if entry.2 == 16 { 24 } else { 16 },
            }
            self.write(t);
        }
    }

    fn options() -> CompileOptions {
        CompileOptions {
            domain: "example.net".into(),
            ..CompileOptions::default()
        }
    }

    /// What the reload loop does: load (taking unchanged files over),
    /// admit, compile incrementally.
    fn reload(
        dir: &Path,
        store: &mut Store,
        files: &mut FileCache,
        parts: &mut CompiledParts,
        registry: &EndpointRegistry,
    ) -> String {
        reload_with(dir, store, files, parts, registry, true)
    }

    /// `admit`: whether the tenant re-check runs first. Without it, refused
    /// endpoints reach the compile, whose own check then has to follow
    /// Tenant changes.
    fn reload_with(
        dir: &Path,
        store: &mut Store,
        files: &mut FileCache,
        parts: &mut CompiledParts,
        registry: &EndpointRegistry,
        admit: bool,
    ) -> String {
        let mut loaded = teapot_model::manifests::load_dir_cached(dir, store, files);
        if admit {
            teapot_model::tenancy::admit(&mut loaded, store, "example.net", &[]);
        }
        files.settle(&loaded.problems);
        let snapshot =
            compile_incremental(&loaded.store, Vec::new(), 1, &options(), registry, parts);
        *store = loaded.store;
        format!("{}\n{}", report(&snapshot), kept(parts))
    }

    fn full(dir: &Path, admit: bool) -> String {
        let mut loaded = teapot_model::manifests::load_dir(dir, &Store::default());
        if admit {
            teapot_model::tenancy::admit(&mut loaded, &Store::default(), "example.net", &[]);
        }
        let mut parts = CompiledParts::default();
        let snapshot = compile_incremental(
            &loaded.store,
            Vec::new(),
            1,
            &options(),
            &EndpointRegistry::default(),
            &mut parts,
        );
        format!("{}\n{}", report(&snapshot), kept(&parts))
    }

    /// What a compile hands on, as text: every namespace's upstreams with
    /// their endpoints, each with whether its endpoint cell is recorded
    /// for in-place changes (the very cell), and how many cells there are.
    fn kept(parts: &CompiledParts) -> String {
        let mut lines = Vec::new();
        for (ns, part) in &parts.namespaces {
            for (name, upstream) in &part.backends {
                let recorded = parts
                    .cells
                    .of_service(&(ns.clone(), name.service.clone()))
                    .is_some_and(|e| e.iter().any(|e| Arc::ptr_eq(&e.cell, &upstream.endpoints)));
                let inputs = (part.inputs.services.len(), part.inputs.slices.len());
                let endpoints: Vec<String> = upstream
                    .endpoints
                    .load()
                    .iter()
                    .map(|e| e.addr.to_string())
                    .collect();
                lines.push(format!(
                    "{ns} {name:?} {endpoints:?} recorded={recorded} inputs={inputs:?}"
                ));
            }
        }
        lines.sort();
        lines.push(format!("cells={}", parts.cells.len()));
        lines.join("\n")
    }

    fn report(snapshot: &crate::compile::snapshot::Snapshot) -> String {
        let mut r = serde_json::to_value(&snapshot.report).unwrap();
        r.as_object_mut().unwrap().remove("compile_ms");
        r.to_string()
    }

    #[test]
    fn an_unchanged_tenant_keeps_its_upstreams_and_a_changed_one_does_not() {
        let mut world = World::new();
        let (mut store, mut files, mut parts) = (
            Store::default(),
            FileCache::default(),
            CompiledParts::default(),
        );
        let registry = EndpointRegistry::default();
        reload(
            world.dir.path(),
            &mut store,
            &mut files,
            &mut parts,
            &registry,
        );
        assert_eq!(parts.reused_namespaces(), 0);
        assert_eq!(parts.namespaces(), TENANTS);
        let before: Vec<Arc<Upstream>> = (0..TENANTS)
            .map(|t| {
                parts
                    .upstream(&format!("tenant-t{t}"), "web", "http")
                    .unwrap()
                    .clone()
            })
            .collect();
        assert_eq!(before[0].endpoints.load().len(), 4);

        world.change(1, 1);
        reload(
            world.dir.path(),
            &mut store,
            &mut files,
            &mut parts,
            &registry,
        );
        assert_eq!(files.taken_over(), TENANTS - 1);
        assert_eq!(parts.reused_namespaces(), TENANTS - 1);
        for (t, old) in before.iter().enumerate() {
            let now = parts
                .upstream(&format!("tenant-t{t}"), "web", "http")
                .unwrap();
            assert_eq!(Arc::ptr_eq(old, now), t != 1, "tenant {t}");
        }
        assert_eq!(
            parts
                .upstream("tenant-t1", "web", "http")
                .unwrap()
                .endpoints
                .load()
                .len(),
            6
        );

        // A Tenant change can move what every tenant's endpoints may use.
        world.change(2, 2);
        reload(
            world.dir.path(),
            &mut store,
            &mut files,
            &mut parts,
            &registry,
        );
        assert_eq!(parts.reused_namespaces(), 0);
    }

    #[test]
    fn iterated_random_changes_compile_as_a_full_compile_does() {
        for admit in [true, false] {
            random_changes(admit);
        }
    }

    fn random_changes(admit: bool) {
        let mut world = World::new();
        let (mut store, mut files, mut parts) = (
            Store::default(),
            FileCache::default(),
            CompiledParts::default(),
        );
        let registry = EndpointRegistry::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(20);
        let (mut reused, mut carried) = (0, 0);
        for round in 0..40 {
            let incremental = reload_with(
                world.dir.path(),
                &mut store,
                &mut files,
                &mut parts,
                &registry,
                admit,
            );
            assert_eq!(incremental, full(world.dir.path(), admit), "round {round}");
            reused += parts.reused_namespaces();
            carried += parts.carried_namespaces();
            for _ in 0..rng.random_range(0..3) {
                let t = rng.random_range(0..TENANTS);
                // Tenant changes are rarer, as in life.
                let what = if rng.random_range(0..10) == 0 {
                    2
                } else {
                    [0, 1, 3][rng.random_range(0..3)]
                };
                world.change(t, what);
            }
        }
        assert!(reused > 40, "only {reused} namespaces reused in 40 rounds");
        assert!(
            carried > 20,
            "only {carried} namespaces handed on in 40 rounds"
        );
        assert!(
            carried < reused,
            "{carried} handed on whole of {reused} reused"
        );
    }
}
