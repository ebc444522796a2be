//! Where the memory of a large manifests directory goes: the proxy's
//! reload path run step by step (read and parse the files, the tenant
//! check, the first compile) over the world `benches/endpoint-churn.py`
//! writes (per namespace 100 Ingresses of one host and one path, 100
//! Services and a file of their 100 EndpointSlices), with the RSS growth
//! of each step.
//!
//! It uses the system allocator on purpose, so that `valgrind
//! --tool=massif` (or `--tool=dhat`) sees every allocation and can name
//! the code that holds the bytes: the RSS figures of the shipped binary
//! (mimalloc) are `route-table-report`'s and `endpoint-churn.py`'s.
//!
//! ```sh
//! store-memory-report --ingresses 10000
//! valgrind --tool=massif --massif-out-file=/tmp/massif.out store-memory-report --ingresses 10000
//! ms_print /tmp/massif.out | less
//! ```

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use teapot_model::manifests::{FileCache, load_dir_cached};
use teapot_model::tenancy::{TenantVerdicts, admit_cached};
use teapot_proxy::compile::compile_incremental;
use teapot_proxy::compile::parts::CompiledParts;
use teapot_proxy::live::endpoints::EndpointRegistry;

const PER_NAMESPACE: usize = 100;

#[derive(Parser, Debug)]
#[command(
    name = "store-memory-report",
    about = "RSS growth of each step of loading a large manifests directory"
)]
struct Args {
    /// Ingresses in the directory (a multiple of 100).
    #[arg(long, default_value_t = 10_000)]
    ingresses: usize,
    /// Read the manifests from this directory instead of writing them to
    /// a temporary one.
    #[arg(long, value_name = "DIR")]
    dir: Option<std::path::PathBuf>,
    /// Give every object what a real API server and `kubectl apply` add:
    /// `managedFields` (an apply by kubectl, a status write by the
    /// controller) and the last-applied-configuration annotation.
    #[arg(long)]
    bookkeeping: bool,
    /// Measure `route-table-report`'s synthetic store (built in memory,
    /// no files) and its first compile instead.
    #[arg(long, conflicts_with = "dir")]
    synthetic: bool,
    /// Every namespace a Tenant's (`tenant-ns<k>`, granted its hosts and
    /// its endpoints' addresses, its EndpointSlices the agent's), as
    /// `benches/tenant-route-change.py` writes it: the tenant check keeps
    /// its verdicts.
    #[arg(long, conflicts_with = "dir")]
    tenants: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.synthetic {
        return synthetic(args.ingresses);
    }
    let tmp = tempfile::tempdir().context("a temporary directory")?;
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => {
            let world = World {
                bookkeeping: args.bookkeeping,
                tenants: args.tenants,
            };
            write_world(tmp.path(), args.ingresses, world)?;
            tmp.path().to_path_buf()
        }
    };
    let mut steps = Steps::start();
    steps.step("start", Instant::now());

    let started = Instant::now();
    let mut files = FileCache::default();
    let mut loaded = load_dir_cached(&dir, &Default::default(), &mut files);
    steps.step("read and parsed (store, files)", started);
    if let Some(p) = loaded.problems.first() {
        eprintln!("first problem: {p}");
    }

    let started = Instant::now();
    let mut verdicts = TenantVerdicts::default();
    admit_cached(
        &mut loaded.store,
        &mut loaded.problems,
        &Default::default(),
        "localhost",
        &[],
        &mut verdicts,
        None,
    );
    files.settle(&loaded.problems);
    steps.step("tenant check", started);

    let problems = loaded.problems.len();
    let started = Instant::now();
    let registry = EndpointRegistry::default();
    let mut parts = CompiledParts::default();
    let snapshot = compile_incremental(
        &loaded.store,
        loaded.problems,
        1,
        &teapot_benches::compile_options(),
        &registry,
        &mut parts,
    );
    steps.step("first compile (snapshot, parts)", started);
    println!(
        "objects {}, problems {}, routes {}, hosts {}",
        loaded.store.len(),
        problems,
        snapshot.routes.len(),
        snapshot.routes.hosts()
    );
    drop(snapshot);
    drop(parts);
    drop(verdicts);
    drop(files);
    drop(loaded.store);
    Ok(())
}

fn synthetic(ingresses: usize) -> anyhow::Result<()> {
    let mut steps = Steps::start();
    let started = Instant::now();
    let store = teapot_benches::synthetic_store(ingresses);
    steps.step("synthetic store", started);
    let started = Instant::now();
    let registry = EndpointRegistry::default();
    let snapshot = teapot_benches::compile_store(&store, &registry, 1);
    steps.step("first compile (snapshot)", started);
    println!(
        "objects {}, routes {}, hosts {}",
        store.len(),
        snapshot.routes.len(),
        snapshot.routes.hosts()
    );
    Ok(())
}

/// What [`write_world`] adds to its namespaces.
#[derive(Clone, Copy)]
struct World {
    bookkeeping: bool,
    tenants: bool,
}

/// The world of `benches/endpoint-churn.py` (namespaces `ns<k>`), or with
/// `tenants` that of `benches/tenant-route-change.py` (`tenant-ns<k>`,
/// each with its Tenant; endpoints at `10.<k / 256>.<k % 256>.<i + 1>`).
fn write_world(dir: &Path, ingresses: usize, world: World) -> anyhow::Result<()> {
    let bookkeeping = world.bookkeeping;
    for k in 0..ingresses / PER_NAMESPACE {
        let (ns, host_ns) = match world.tenants {
            true => (format!("tenant-ns{k}"), format!("ns{k}")),
            false => (format!("ns{k}"), format!("ns{k}")),
        };
        let network = format!("10.{}.{}", k / 256, k % 256);
        let mut routes = Vec::new();
        let mut slices = Vec::new();
        if world.tenants {
            routes.push(format!(
                "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: {host_ns}}}\nspec: {{cluster: {host_ns}, allowedDomains: [{host_ns}.bench.test], nodeCIDRs: [\"{network}.0/24\"]}}\n"
            ));
        }
        for i in 0..PER_NAMESPACE {
            let service_spec = "{ports: [{name: http, port: 80}]}";
            let ingress_spec = format!(
                "{{ingressClassName: teapot, rules: [{{host: h{i}.{host_ns}.bench.test, http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: s{i}, port: {{number: 80}}}}}}}}]}}}}]}}"
            );
            let (address, managed) = match world.tenants {
                true => (
                    format!("{network}.{}", i + 1),
                    ", endpointslice.kubernetes.io/managed-by: sync.teapot.dev",
                ),
                false => ("127.0.0.1".to_string(), ""),
            };
            let slice_body = format!(
                "addressType: IPv4\nports: [{{name: http, port: 8080}}]\nendpoints: [{{addresses: [{address}], conditions: {{ready: true}}}}]\n"
            );
            let extra = |kind: &str, name: &str, spec: &str| {
                if bookkeeping {
                    added(kind, &ns, name, spec)
                } else {
                    String::new()
                }
            };
            routes.push(format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: s{i}\n  namespace: {ns}\n{}spec: {service_spec}\n",
                extra("Service", &format!("s{i}"), service_spec)
            ));
            routes.push(format!(
                "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: i{i}\n  namespace: {ns}\n{}spec: {ingress_spec}\n",
                extra("Ingress", &format!("i{i}"), &ingress_spec)
            ));
            slices.push(format!(
                "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: s{i}-1\n  namespace: {ns}\n  labels: {{kubernetes.io/service-name: s{i}{managed}}}\n{}{slice_body}",
                if bookkeeping { slice_managed_fields() } else { String::new() }
            ));
        }
        std::fs::write(dir.join(format!("{ns}-routes.yaml")), routes.join("---\n"))?;
        std::fs::write(dir.join(format!("{ns}-slices.yaml")), slices.join("---\n"))?;
    }
    Ok(())
}

/// What the API server and `kubectl apply` add to an object: the
/// last-applied annotation (the object as applied, again) and the
/// `managedFields` of kubectl's apply and of a controller's status write,
/// in the shape a real server writes them.
fn added(kind: &str, ns: &str, name: &str, spec: &str) -> String {
    let api = if kind == "Ingress" {
        "networking.k8s.io/v1"
    } else {
        "v1"
    };
    // JSON as kubectl writes it, in a YAML single-quoted scalar.
    let spec_json = spec
        .replace('{', "{\"")
        .replace(": ", "\":")
        .replace(", ", ",\"")
        .replace("[\"", "[");
    let applied = format!(
        r#"{{"apiVersion":"{api}","kind":"{kind}","metadata":{{"annotations":{{}},"name":"{name}","namespace":"{ns}"}},"spec":{spec_json}}}"#
    );
    let spec_fields = if kind == "Ingress" {
        "{'f:ingressClassName': {}, 'f:rules': {}}"
    } else {
        r#"{'f:ports': {'.': {}, 'k:{"port":80,"protocol":"TCP"}': {'.': {}, 'f:name': {}, 'f:port': {}, 'f:protocol': {}, 'f:targetPort': {}}}, 'f:sessionAffinity': {}, 'f:type': {}}"#
    };
    format!(
        "  annotations:\n    kubectl.kubernetes.io/last-applied-configuration: '{applied}\n\n    '\n\
         \x20 managedFields:\n\
         \x20 - apiVersion: {api}\n    fieldsType: FieldsV1\n    fieldsV1: {{'f:metadata': {{'f:annotations': {{'.': {{}}, 'f:kubectl.kubernetes.io/last-applied-configuration': {{}}}}}}, 'f:spec': {spec_fields}}}\n\
         \x20   manager: kubectl-client-side-apply\n    operation: Update\n    time: \"2026-11-29T00:00:00Z\"\n\
         \x20 - apiVersion: {api}\n    fieldsType: FieldsV1\n    fieldsV1: {{'f:status': {{'f:loadBalancer': {{'f:ingress': {{}}}}}}}}\n\
         \x20   manager: teapot\n    operation: Update\n    subresource: status\n    time: \"2026-11-29T00:00:01Z\"\n"
    )
}

/// The `managedFields` the EndpointSlice controller writes.
fn slice_managed_fields() -> String {
    "  managedFields:\n\
     \x20 - apiVersion: discovery.k8s.io/v1\n    fieldsType: FieldsV1\n\
     \x20   fieldsV1: {'f:addressType': {}, 'f:endpoints': {}, 'f:metadata': {'f:labels': {'.': {}, 'f:kubernetes.io/service-name': {}}}, 'f:ports': {}}\n\
     \x20   manager: endpointslice-controller.k8s.io\n    operation: Update\n    time: \"2026-11-29T00:00:00Z\"\n"
        .to_string()
}

/// One line per step: the RSS after it, its growth over the step before,
/// and the step's time.
struct Steps {
    last: f64,
}

impl Steps {
    fn start() -> Steps {
        Steps { last: rss_mib() }
    }

    fn step(&mut self, name: &str, started: Instant) {
        let now = rss_mib();
        println!(
            "{name:<32} {:>8.1} MiB ({:+.1}), {:.0} ms",
            now,
            now - self.last,
            started.elapsed().as_secs_f64() * 1e3
        );
        self.last = now;
    }
}

fn rss_mib() -> f64 {
    teapot_benches::peers::rss_kib(std::process::id()).map_or(0.0, |kib| kib as f64 / 1024.0)
}
