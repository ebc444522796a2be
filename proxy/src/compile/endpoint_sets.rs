//! EndpointSlice changes without a compile.
//!
//! The most frequent change in a shared fleet is an EndpointSlice changing
//! (every pod restart of every tenant). A compile records, per Service, the
//! endpoint cells of every upstream it resolved from it
//! (crate::compile::endpoint_cells);
//! when only EndpointSlices changed, [`refresh`] resolves just those
//! Services' upstreams again, with the resolver the compile uses, and stores
//! the new endpoints into the cells in place: the route table, DNS zone, L4
//! table and status report stay as they are.
//!
//! That is only right while nothing else the compile made depends on the
//! endpoints, so [`refresh`] declines (and the caller compiles) when
//!
//! - an upstream's status-visible facts would change: why it has no
//!   endpoint (`unavailable`, e.g. the last ready endpoint went away or
//!   came back) or which addresses the tenant policy refused (`refused`).
//!   Those reach Ingress, route and Service conditions, so they are
//!   compiled, and status always says what is served;
//! - a compile built something from the cell's contents
//!   (`EndpointCell::is_compiled_from`): the L4 plane's weighted
//!   rotations, TLS passthrough unions and its report's endpoint lists.
//!
//! Whatever declines costs what it did before: one compile.

use std::sync::Arc;

use hashbrown::HashSet;
use teapot_model::store::{Kind, NsName, ObjectKey, SliceChange, Store};
use teapot_model::tenancy::Tenancy;

use crate::compile::CompileOptions;
use crate::compile::backends::Resolver;
use crate::compile::endpoint_cells::Entry;
use crate::compile::parts::{CompiledParts, Reuse};
use crate::live::endpoints::EndpointRegistry;

/// What [`refresh`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Refreshed {
    /// Every affected cell holds the store's endpoints now; this many were
    /// replaced (the others already held them).
    Stored(usize),
    /// The change reaches what a compile made: compile.
    NeedsCompile(&'static str),
}

/// Brings the cells of `services` (namespace, Service name) to what a
/// compile of `store` would put in them, or says that a compile is needed.
/// Nothing is stored unless every affected cell can be.
pub fn refresh(
    store: &Store,
    services: &[(String, String)],
    options: &CompileOptions,
    registry: &EndpointRegistry,
    parts: &CompiledParts,
) -> Refreshed {
    let cells = parts.cells();
    let affected: Vec<(&(String, String), &Vec<Entry>)> = services
        .iter()
        .filter_map(|s| Some((s, cells.of_service(s)?)))
        .collect();
    if affected.is_empty() {
        return Refreshed::Stored(0);
    }
    if affected
        .iter()
        .any(|(_, entries)| entries.iter().any(|e| e.cell.is_compiled_from()))
    {
        return Refreshed::NeedsCompile("an L4 listener was compiled from these endpoints");
    }
    // The tenancy the compile builds, for the changed namespaces: which
    // addresses their tenants' endpoints may use, against every tenant's
    // node networks as the last compile read them. Reading every Tenant
    // again cost each slice change 29-31 ms at 1,000 Tenants.
    let tenant_arcs: Vec<&Arc<teapot_api::Tenant>> =
        store.tenants.values().map(|t| &t.object).collect();
    let Some(holdings) = parts.holdings_for(&tenant_arcs, &options.lb_networks) else {
        return Refreshed::NeedsCompile("the Tenants changed since the last compile");
    };
    let mut namespaces: Vec<&str> = affected.iter().map(|((ns, _), _)| ns.as_str()).collect();
    namespaces.dedup();
    // In the store's order, as the compile meets them: of two Tenants
    // naming one namespace the first holds it.
    let tenant_list: Vec<&teapot_api::Tenant> = tenant_arcs
        .iter()
        .map(|t| &***t)
        .filter(|t| namespaces.iter().any(|ns| t.owns_namespace(ns)))
        .collect();
    let tenancy = Tenancy::new(
        &tenant_list,
        &options.domain,
        &options.lb_networks,
        holdings,
    );
    let wanted: HashSet<(&str, &str), foldhash::fast::RandomState> = affected
        .iter()
        .map(|((ns, name), _)| (ns.as_str(), name.as_str()))
        .collect();
    let resolver = Resolver::for_services(store, registry, &tenancy, Reuse::none(), &wanted);
    let mut stores = Vec::new();
    for ((namespace, name), entries) in affected {
        for e in entries {
            let fresh = resolver.resolve_unrecorded(namespace, name, &(&e.port).into());
            if fresh.unavailable != e.unavailable || fresh.refused != e.refused {
                return Refreshed::NeedsCompile("an upstream's status changes");
            }
            let endpoints = fresh.endpoints.load();
            if !e.cell.holds(&endpoints) {
                stores.push((Arc::clone(&e.cell), endpoints.to_vec()));
            }
        }
    }
    let n = stores.len();
    for (cell, endpoints) in stores {
        cell.store(endpoints);
    }
    Refreshed::Stored(n)
}

/// The Services (namespace, name) of EndpointSlice `changes`, before (in
/// `before`) or after the change.
pub fn changed_services(changes: &[SliceChange], before: &Store) -> Vec<(String, String)> {
    let mut services = Vec::new();
    for change in changes {
        let old = before.endpoint_slices.get(&change.id);
        for slice in [old, change.slice.as_ref()].into_iter().flatten() {
            if let Some(service) = slice.object.service_name() {
                services.push((change.id.namespace.clone(), service.to_string()));
            }
        }
    }
    services.sort_unstable();
    services.dedup();
    services
}

/// The Services (namespace, name) whose EndpointSlices are among `changed`,
/// before or after the change; `None` when anything but EndpointSlices
/// changed.
pub fn slice_services(
    changed: &[ObjectKey],
    before: &Store,
    after: &Store,
) -> Option<Vec<(String, String)>> {
    let mut services = Vec::new();
    for key in changed {
        if key.kind != Kind::EndpointSlice {
            return None;
        }
        let id = NsName::new(key.namespace.clone(), key.name.clone());
        for store in [before, after] {
            if let Some(service) = store
                .endpoint_slices
                .get(&id)
                .and_then(|s| s.object.service_name())
            {
                services.push((key.namespace.clone(), service.to_string()));
            }
        }
    }
    services.sort_unstable();
    services.dedup();
    Some(services)
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use std::collections::HashSet as StdHashSet;
    use teapot_model::manifests::{FileCache, load_dir_cached};
    use teapot_model::store::Store;
    use teapot_model::tenancy::admit;

    use super::*;
    use crate::compile::snapshot::Snapshot;
    use crate::compile::tests::test_store;
    use crate::compile::{compile, compile_incremental};

    const TENANTS: usize = 3;

    fn options() -> CompileOptions {
        CompileOptions {
            domain: "example.net".into(),
            ..CompileOptions::default()
        }
    }

    /// One slice: its endpoints' generation (a restarted pod has a new
    /// address), how many are ready, and whether one address is outside
    /// the tenant's nodes (the tenant policy refuses the slice).
    #[derive(Clone, Copy)]
    struct Slice {
        generation: u8,
        ready: usize,
        foreign: bool,
    }

    /// Per tenant: a file with the Tenant, its Service and two Ingresses to
    /// it (one over HTTP/1, one over gRPC: a copy of the upstream speaking
    /// h2c), and a file per EndpointSlice, as the agent writes them. The
    /// HTTP/1 Ingress replaces 503s with the pages of a second Service
    /// (`custom-http-errors`), whose upstream the compile resolves outside
    /// its cache; that Service's one slice is the last of the tenant's.
    struct World {
        dir: tempfile::TempDir,
        port: [u16; TENANTS],
        slices: Vec<Vec<Slice>>,
        /// The error-page Service's one slice, per tenant.
        pages: Vec<Slice>,
    }

    impl World {
        fn new() -> World {
            let first = Slice {
                generation: 0,
                ready: 2,
                foreign: false,
            };
            let world = World {
                dir: tempfile::tempdir().unwrap(),
                port: [80; TENANTS],
                slices: vec![vec![first; 2]; TENANTS],
                pages: vec![first; TENANTS],
            };
            for t in 0..TENANTS {
                world.write_tenant(t);
                for s in 0..2 {
                    world.write_slice(t, s);
                }
                world.write_pages_slice(t);
            }
            world
        }

        fn write_pages_slice(&self, t: usize) {
            let text = slice_text(t, "pages-0", "pages", 30081, 200, self.pages[t]);
            std::fs::write(self.path(&format!("t{t}-pages")), text).unwrap();
        }

        fn write_tenant(&self, t: usize) {
            let port = self.port[t];
            let ingress = |name: &str, annotation: &str| {
                format!(
                    "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: tenant-t{t}{annotation}}}\nspec:\n  ingressClassName: teapot\n  rules:\n  - http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}]}}\n"
                )
            };
            let docs = [
                format!(
                    "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: t{t}}}\nspec: {{cluster: t{t}, nodeCIDRs: [10.{t}.0.0/16]}}\n"
                ),
                format!(
                    "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: tenant-t{t}}}\nspec: {{ports: [{{name: http, port: {port}}}]}}\n"
                ),
                format!(
                    "apiVersion: v1\nkind: Service\nmetadata: {{name: pages, namespace: tenant-t{t}}}\nspec: {{ports: [{{name: http, port: 80}}]}}\n"
                ),
                ingress(
                    "web",
                    ", annotations: {nginx.ingress.kubernetes.io/custom-http-errors: '503', nginx.ingress.kubernetes.io/default-backend: pages}",
                ),
                ingress(
                    "grpc",
                    ", annotations: {nginx.ingress.kubernetes.io/backend-protocol: GRPC}",
                ),
            ];
            std::fs::write(self.path(&format!("t{t}")), docs.join("---\n")).unwrap();
        }

        fn write_slice(&self, t: usize, s: usize) {
            let path = self.path(&format!("t{t}-slice{s}"));
            let Some(slice) = self.slices[t].get(s) else {
                let _ = std::fs::remove_file(path);
                return;
            };
            let text = slice_text(t, &format!("web-{s}"), "web", 30080, s, *slice);
            std::fs::write(path, text).unwrap();
        }

        fn path(&self, name: &str) -> std::path::PathBuf {
            self.dir.path().join(format!("{name}.yaml"))
        }

        /// One random change; mostly EndpointSlices, as in a fleet.
        fn change(&mut self, rng: &mut impl Rng) {
            let t = rng.random_range(0..TENANTS);
            let n = self.slices[t].len();
            let s = rng.random_range(0..n);
            match rng.random_range(0..24) {
                20..=23 => {
                    let pages = &mut self.pages[t];
                    pages.generation = (pages.generation + 1) % 100;
                    pages.ready = rng.random_range(0..3);
                    return self.write_pages_slice(t);
                }
                0 => {
                    self.port[t] = if self.port[t] == 80 { 8080 } else { 80 };
                    return self.write_tenant(t);
                }
                1 => self.slices[t][s].foreign ^= true,
                2..=4 if n < 3 => {
                    let slice = self.slices[t][0];
                    self.slices[t].push(slice);
                    return self.write_slice(t, n);
                }
                2..=4 if n > 1 => {
                    self.slices[t].pop();
                    return self.write_slice(t, n - 1);
                }
                5..=9 => self.slices[t][s].ready = rng.random_range(0..3),
                _ => self.slices[t][s].generation = (self.slices[t][s].generation + 1) % 100,
            }
            self.write_slice(t, s);
        }
    }

    /// An EndpointSlice `name` of Service `service` in tenant `t`'s
    /// namespace: two endpoints at `10.<t>.<third>.x` (the first at
    /// `10.99.<third>.x`, outside the tenant's nodes, when `foreign`).
    fn slice_text(
        t: usize,
        name: &str,
        service: &str,
        port: u16,
        third: usize,
        slice: Slice,
    ) -> String {
        let endpoints: Vec<String> = (0..2)
            .map(|e| {
                let net = if slice.foreign && e == 0 { 99 } else { t };
                format!(
                    "{{addresses: [10.{net}.{third}.{}], conditions: {{ready: {}}}}}",
                    slice.generation * 2 + e as u8,
                    e < slice.ready
                )
            })
            .collect();
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}, namespace: tenant-t{t}, labels: {{kubernetes.io/service-name: {service}, endpointslice.kubernetes.io/managed-by: sync.teapot.dev}}}}\naddressType: IPv4\nports: [{{name: http, port: {port}}}]\nendpoints: [{}]\n",
            endpoints.join(", ")
        )
    }

    /// What requests see: every host's upstream, its endpoints and how it
    /// is spoken to.
    fn served(snapshot: &Snapshot) -> Vec<String> {
        let mut hosts: Vec<&str> = snapshot.routes.exact_hosts().collect();
        hosts.sort_unstable();
        hosts
            .into_iter()
            .map(|host| {
                let route = snapshot.routes.lookup(host, "/").expect("routed");
                let u = &route.upstream;
                let endpoints = u.endpoints.addresses();
                let pages = route
                    .traffic()
                    .and_then(|t| t.custom_errors.as_ref())
                    .map(|c| c.upstream.endpoints.addresses());
                format!(
                    "{host} {} h2={} {endpoints:?} pages={pages:?}",
                    u.name,
                    u.protocol.is_h2()
                )
            })
            .collect()
    }

    /// The status report; its problems in a fixed order (the tenant
    /// re-check lists them in its maps' order, which a load may change).
    fn report(snapshot: &Snapshot) -> String {
        let mut r = serde_json::to_value(&snapshot.report).unwrap();
        if let Some(problems) = r["problems"].as_array_mut() {
            problems.sort_by_key(|p| p.to_string());
        }
        r.to_string()
    }

    /// An EndpointSlice change stored in place judges its addresses
    /// against every tenant's node networks as the last compile kept
    /// them: an address in another tenant's nodes (tenant a's include
    /// b's) stays refused, as a compile refuses it; a store whose Tenants
    /// changed is compiled.
    #[test]
    fn a_slice_change_in_place_keeps_another_tenants_nodes_out() {
        let world = |b_nodes: &str, addresses: &[&str]| {
            let endpoints: Vec<String> = addresses
                .iter()
                .map(|a| format!("{{addresses: [\"{a}\"]}}"))
                .collect();
            format!(
                "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: a}}\nspec: {{cluster: a, nodeCIDRs: [10.0.0.0/8]}}\n---\n\
                 apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: b}}\nspec: {{cluster: b, nodeCIDRs: [{b_nodes}]}}\n---\n\
                 apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: tenant-a}}\nspec: {{ports: [{{name: http, port: 80}}]}}\n---\n\
                 apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: shop, namespace: tenant-a}}\nspec:\n  ingressClassName: teapot\n  rules:\n  - http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}]}}\n---\n\
                 apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: web-1, namespace: tenant-a, labels: {{kubernetes.io/service-name: web, endpointslice.kubernetes.io/managed-by: sync.teapot.dev}}}}\naddressType: IPv4\nports: [{{name: http, port: 30080}}]\nendpoints: [{}]\n",
                endpoints.join(", ")
            )
        };
        let registry = EndpointRegistry::default();
        let mut parts = CompiledParts::default();
        let store = test_store(&world("10.2.0.0/16", &["10.1.0.1", "10.2.0.1"]));
        let snapshot =
            compile_incremental(&store, Vec::new(), 1, &options(), &registry, &mut parts);
        let services = vec![("tenant-a".to_string(), "web".to_string())];
        // A ready address replaced beside the refused one: in place.
        let changed = test_store(&world("10.2.0.0/16", &["10.1.0.2", "10.2.0.1"]));
        assert_eq!(
            refresh(&changed, &services, &options(), &registry, &parts),
            Refreshed::Stored(1)
        );
        let reference = full(&changed, Vec::new());
        assert_eq!(served(&snapshot), served(&reference));
        assert!(
            served(&snapshot)[0].contains(r#"["10.1.0.2:30080"]"#),
            "{:?}",
            served(&snapshot)
        );
        // Tenant b's nodes moved: what a's endpoints may use moved too.
        let moved = test_store(&world("10.3.0.0/16", &["10.1.0.2", "10.2.0.1"]));
        assert_eq!(
            refresh(&moved, &services, &options(), &registry, &parts),
            Refreshed::NeedsCompile("the Tenants changed since the last compile")
        );
    }

    /// A full compile of the store, from nothing.
    fn full(store: &Store, problems: Vec<teapot_model::manifests::Problem>) -> Snapshot {
        compile(store, problems, 1, &options(), &EndpointRegistry::default())
    }

    #[test]
    fn endpoint_changes_stored_in_place_equal_a_full_compile() {
        let mut world = World::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(51);
        let registry = EndpointRegistry::default();
        let (mut store, mut files, mut parts) = (
            Store::default(),
            FileCache::default(),
            CompiledParts::default(),
        );
        let mut snapshot: Option<Snapshot> = None;
        let mut problems: StdHashSet<String> = StdHashSet::new();
        let (mut in_place, mut compiled, mut declined) = (0, 0, 0);
        for round in 0..200 {
            // What the reload loop does.
            let mut loaded = load_dir_cached(world.dir.path(), &store, &mut files);
            let changed = files.changed().map(<[_]>::to_vec);
            admit(&mut loaded, &store, "example.net", &[]);
            files.settle(&loaded.problems);
            let now: StdHashSet<String> = loaded.problems.iter().map(|p| p.to_string()).collect();
            let reference = full(&loaded.store, loaded.problems.clone());
            let same_problems = std::mem::replace(&mut problems, now) == problems;
            let services = changed
                .as_deref()
                .and_then(|keys| slice_services(keys, &store, &loaded.store))
                .filter(|_| same_problems && snapshot.is_some());
            let refreshed = services
                .map(|services| refresh(&loaded.store, &services, &options(), &registry, &parts));
            match refreshed {
                Some(Refreshed::Stored(_)) => {
                    in_place += 1;
                    store = loaded.store;
                }
                other => {
                    declined += usize::from(other.is_some());
                    compiled += 1;
                    snapshot = Some(compile_incremental(
                        &loaded.store,
                        loaded.problems,
                        1,
                        &options(),
                        &registry,
                        &mut parts,
                    ));
                    store = loaded.store;
                }
            }
            let serving = snapshot.as_ref().unwrap();
            assert_eq!(served(serving), served(&reference), "round {round}");
            assert_eq!(report(serving), report(&reference), "round {round}");
            world.change(&mut rng);
        }
        // Each path taken often enough to mean something.
        eprintln!("{in_place} in place, {compiled} compiled, {declined} declined");
        assert!(in_place > 100, "{in_place} in place, {compiled} compiled");
        assert!(declined >= 2, "{declined} declined");
        assert!(compiled > 20, "{compiled} compiled");
    }
}
