//! Benchmark fixtures for teapot's data plane.
//!
//! [`synthetic_store`] builds a realistic [`Store`] of N Ingresses (with
//! their Services, EndpointSlices and the `teapot` IngressClass) directly
//! from k8s-openapi structs, so that building a 100k-Ingress store takes
//! about a second rather than the minutes YAML parsing would. [`samples`]
//! lists request `(host, path)` pairs that hit or miss the compiled table.
//!
//! The shape is deterministic: Ingress `i` always has the same hosts, paths
//! and backends, so the route and host counts are known up front
//! ([`expected_routes`], [`expected_hosts`]) and each sample knows which
//! upstream it must reach.
//!
//! Shape of Ingress `i` (namespace `tenant-<i / 100>`, name `app-<i>`):
//! - 2 or 3 exact hosts `app-<i>-<j>.tenant-<ns>.lb.example.com`; one
//!   Ingress in ten also has a wildcard rule `*.w<i>.example.com`;
//! - 3 or 4 paths per rule, depths 1-4: `Prefix /static`,
//!   `Exact /api/v<n>`, `ImplementationSpecific /api/v<n>/users` and
//!   (4-path rules) `Prefix /api/v<n>/users/items`;
//! - backends to `app-<i>-web` by port name (`http`) and, for two Ingresses
//!   in three, `app-<i>-api` by port number (`9000`);
//! - each Service has one EndpointSlice with 3 ready IPv4 endpoints.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressClass, IngressClassSpec,
    IngressRule, IngressServiceBackend, IngressSpec, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use teapot_api::names::{CONTROLLER_NAME, INGRESS_CLASS, SERVICE_NAME_LABEL};
use teapot_model::store::{Kind, Object, ObjectKey, Origin, Store};
use teapot_proxy::compile::snapshot::Snapshot;
use teapot_proxy::compile::{CompileOptions, compile};
use teapot_proxy::live::endpoints::EndpointRegistry;

/// Ingresses per namespace (tenant).
pub const INGRESSES_PER_NAMESPACE: usize = 100;
/// Ready endpoints in each Service's EndpointSlice.
pub const ENDPOINTS_PER_SERVICE: usize = 3;

const WEB_PORT_NAME: &str = "http";
const API_PORT_NUMBER: i32 = 9000;
/// First creation timestamp (2023-11-14); Ingress `i` is `i` seconds younger.
const EPOCH_SECONDS: i64 = 1_700_000_000;

/// The deterministic shape of Ingress `i`.
#[derive(Clone, Copy, Debug)]
struct Shape {
    i: usize,
}

impl Shape {
    fn namespace(self) -> String {
        format!("tenant-{}", self.i / INGRESSES_PER_NAMESPACE)
    }

    fn exact_hosts(self) -> usize {
        2 + self.i % 2
    }

    fn has_wildcard(self) -> bool {
        self.i.is_multiple_of(10)
    }

    /// Exact rules first, then the wildcard rule, if any.
    fn rules(self) -> usize {
        self.exact_hosts() + usize::from(self.has_wildcard())
    }

    fn has_api(self) -> bool {
        !self.i.is_multiple_of(3)
    }

    fn host(self, rule: usize) -> String {
        if rule < self.exact_hosts() {
            format!(
                "app-{}-{rule}.tenant-{}.lb.example.com",
                self.i,
                self.i / INGRESSES_PER_NAMESPACE
            )
        } else {
            format!("*.w{}.example.com", self.i)
        }
    }

    /// A host the wildcard rule matches (`label` is any DNS label).
    fn wildcard_request_host(self, label: &str) -> String {
        format!("{label}.w{}.example.com", self.i)
    }

    fn paths(self, rule: usize) -> usize {
        3 + (self.i + rule) % 2
    }

    /// `v1`..`v3`, so path keys differ between Ingresses.
    fn version(self) -> usize {
        1 + self.i % 3
    }

    /// `(pathType, path)` of path `k` of a rule; depth is `k + 1`.
    fn path(self, k: usize) -> (&'static str, String) {
        let v = self.version();
        match k {
            0 => ("Prefix", "/static".to_string()),
            1 => ("Exact", format!("/api/v{v}")),
            2 => ("ImplementationSpecific", format!("/api/v{v}/users")),
            _ => ("Prefix", format!("/api/v{v}/users/items")),
        }
    }

    /// Whether path `k` goes to the `api` Service (else to `web`).
    fn uses_api(self, k: usize) -> bool {
        self.has_api() && k % 2 == 1
    }

    fn service_name(self, api: bool) -> String {
        format!("app-{}-{}", self.i, if api { "api" } else { "web" })
    }

    /// The upstream name compile gives path `k`'s backend.
    fn upstream_name(self, k: usize) -> String {
        let api = self.uses_api(k);
        let port = if api {
            API_PORT_NUMBER.to_string()
        } else {
            WEB_PORT_NAME.to_string()
        };
        format!("{}/{}:{port}", self.namespace(), self.service_name(api))
    }
}

/// Number of (host, path) routes the compiled store of `ingresses` has.
pub fn expected_routes(ingresses: usize) -> usize {
    (0..ingresses)
        .map(|i| {
            let s = Shape { i };
            (0..s.rules()).map(|r| s.paths(r)).sum::<usize>()
        })
        .sum()
}

/// Number of host groups (exact and wildcard) the compiled store has.
pub fn expected_hosts(ingresses: usize) -> usize {
    (0..ingresses).map(|i| Shape { i }.rules()).sum()
}

/// Number of Services (and of EndpointSlices) in the store.
pub fn expected_services(ingresses: usize) -> usize {
    (0..ingresses)
        .map(|i| 1 + usize::from(Shape { i }.has_api()))
        .sum()
}

/// A store of `ingresses` Ingresses of class `teapot`, their Services and
/// EndpointSlices, and the `teapot` IngressClass.
pub fn synthetic_store(ingresses: usize) -> Store {
    shaped_store(ingresses, false)
}

/// The store of [`synthetic_store`]; `mirrored`: its Services as the agent
/// mirrors a tenant's (no selector: their endpoints are the mirrored
/// EndpointSlices).
fn shaped_store(ingresses: usize, mirrored: bool) -> Store {
    let mut store = Store::default();
    store.insert(
        ObjectKey {
            kind: Kind::IngressClass,
            namespace: String::new(),
            name: INGRESS_CLASS.to_string(),
        },
        Object::IngressClass(ingress_class()),
        Origin {
            file: Arc::from(Path::new("synthetic/ingress-class.yaml")),
            document: 0,
        },
    );
    let mut document = 0;
    for i in 0..ingresses {
        let s = Shape { i };
        let namespace = s.namespace();
        if i % INGRESSES_PER_NAMESPACE == 0 {
            document = 0;
        }
        let file: Arc<Path> = Arc::from(Path::new(&format!("synthetic/{namespace}.yaml")));
        let mut put = |kind: Kind, name: String, object: Object| {
            store.insert(
                ObjectKey {
                    kind,
                    namespace: namespace.clone(),
                    name,
                },
                object,
                Origin {
                    file: file.clone(),
                    document,
                },
            );
            document += 1;
        };
        for api in [false, true] {
            if api && !s.has_api() {
                continue;
            }
            let name = s.service_name(api);
            put(
                Kind::Service,
                name.clone(),
                Object::Service(service(s, api, mirrored)),
            );
            let slice = endpoint_slice(s, api, mirrored);
            let slice_name = slice.metadata.name.clone().unwrap_or_default();
            put(
                Kind::EndpointSlice,
                slice_name,
                Object::EndpointSlice(teapot_model::endpoints::CompactSlice::new(
                    slice, &namespace,
                )),
            );
        }
        put(
            Kind::Ingress,
            format!("app-{i}"),
            Object::Ingress(ingress(s)),
        );
    }
    store
}

/// The DOMAIN of [`tenant_store`]: every Ingress's exact hosts are then
/// in its namespace's Tenant's own subtree (`*.tenant-<ns>.lb.example.com`).
pub const TENANT_DOMAIN: &str = "example.com";

/// [`synthetic_store`] as a shared fleet holds it: every namespace
/// `tenant-<k>` owned by a Tenant (cluster `tenant-<k>`) whose
/// `allowedDomains` grant its Ingresses' wildcard hosts and whose
/// `nodeCIDRs` hold exactly its endpoints' addresses, so that every object
/// passes the tenant check, which then judges them all on each load.
/// Compile with [`tenant_compile_options`].
pub fn tenant_store(ingresses: usize) -> Store {
    let mut store = shaped_store(ingresses, true);
    for k in 0..ingresses.div_ceil(INGRESSES_PER_NAMESPACE) {
        let first = k * INGRESSES_PER_NAMESPACE;
        let last = ingresses.min(first + INGRESSES_PER_NAMESPACE);
        let cluster = Shape { i: first }.namespace();
        let allowed_domains = (first..last)
            .map(|i| Shape { i })
            .filter(|s| s.has_wildcard())
            .map(|s| format!("w{}.example.com", s.i))
            .collect();
        // Endpoint addresses are numbered by Service index (module
        // `endpoint_slice`): one contiguous run per namespace.
        let numbers = service_index(Shape { i: first }, false) * ENDPOINTS_PER_SERVICE
            ..service_index(Shape { i: last - 1 }, true) * ENDPOINTS_PER_SERVICE
                + ENDPOINTS_PER_SERVICE;
        let tenant = teapot_api::Tenant {
            metadata: meta("", cluster.clone(), &[], 0),
            spec: teapot_api::tenant::TenantSpec {
                cluster: cluster.clone(),
                namespace: Some(cluster.clone()),
                allowed_domains,
                node_cidrs: cidrs_of(10, numbers),
                ..Default::default()
            },
            status: None,
        };
        store.insert(
            ObjectKey {
                kind: Kind::Tenant,
                namespace: String::new(),
                name: cluster,
            },
            Object::Tenant(tenant),
            Origin {
                file: Arc::from(Path::new("synthetic/tenants.yaml")),
                document: k,
            },
        );
    }
    store
}

/// [`compile_options`] with [`TENANT_DOMAIN`], for [`tenant_store`].
pub fn tenant_compile_options() -> CompileOptions {
    CompileOptions {
        domain: TENANT_DOMAIN.to_string(),
        ..compile_options()
    }
}

/// The fewest CIDRs covering exactly the addresses `ipv4(first, n)` for
/// `n` in `numbers`.
fn cidrs_of(first: u8, numbers: std::ops::Range<usize>) -> Vec<String> {
    let mut cidrs = Vec::new();
    let mut n = numbers.start;
    while n < numbers.end {
        // The largest aligned block starting at `n` that stays inside.
        let mut bits = 0;
        while bits < 24 && n.is_multiple_of(1 << (bits + 1)) && n + (1 << (bits + 1)) <= numbers.end
        {
            bits += 1;
        }
        cidrs.push(format!("{}/{}", ipv4(first, n), 32 - bits));
        n += 1 << bits;
    }
    cidrs
}

/// The store of [`synthetic_store`] with each Ingress replaced by the
/// HTTPRoute that routes the same (hostnames, `PathPrefix`/`Exact` paths,
/// backendRefs by port number), attached to one Gateway `gw` of class
/// `teapot` per namespace (an HTTP listener without hostname). The
/// route-table report's `--kind httproute` (10k HTTPRoutes, held to the
/// Ingress goals).
pub fn synthetic_gateway_store(routes: usize) -> Store {
    let mut store = synthetic_store(routes);
    let ingresses = std::mem::take(&mut store.ingresses);
    let mut namespaces = std::collections::BTreeSet::new();
    for (id, stored) in ingresses {
        let i: usize = id.name.trim_start_matches("app-").parse().expect("app-<i>");
        let s = Shape { i };
        namespaces.insert(id.namespace.clone());
        // One rule list serves every hostname of a route: each gets the
        // four paths an Ingress rule has at most (the others have three of
        // them), so every sample routes as with the Ingress.
        let rules: Vec<serde_json::Value> = (0..4)
            .map(|k| {
                let (path_type, path) = s.path(k);
                let kind = if path_type == "Exact" {
                    "Exact"
                } else {
                    "PathPrefix"
                };
                let api = s.uses_api(k);
                let port = if api { API_PORT_NUMBER } else { 80 };
                serde_json::json!({
                    "matches": [{ "path": { "type": kind, "value": path } }],
                    "backendRefs": [{ "name": s.service_name(api), "port": port }],
                })
            })
            .collect();
        let hostnames: Vec<String> = (0..s.rules()).map(|r| s.host(r)).collect();
        let route = serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": stored.object.metadata,
            "spec": {
                "parentRefs": [{ "name": "gw" }],
                "hostnames": hostnames,
                "rules": rules,
            },
        });
        store.insert(
            ObjectKey {
                kind: Kind::HttpRoute,
                namespace: id.namespace.clone(),
                name: id.name.clone(),
            },
            Object::HttpRoute(Box::new(
                serde_json::from_value(route).expect("a valid HTTPRoute"),
            )),
            stored.origin.clone(),
        );
    }
    for namespace in namespaces {
        let gateway = serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": { "name": "gw", "namespace": namespace },
            "spec": {
                "gatewayClassName": "teapot",
                "listeners": [{ "name": "http", "protocol": "HTTP", "port": 80 }],
            },
        });
        store.insert(
            ObjectKey {
                kind: Kind::Gateway,
                namespace: namespace.clone(),
                name: "gw".into(),
            },
            Object::Gateway(Box::new(
                serde_json::from_value(gateway).expect("a valid Gateway"),
            )),
            Origin {
                file: Arc::from(Path::new(&format!("synthetic/{namespace}-gateway.yaml"))),
                document: 0,
            },
        );
    }
    store
}

/// What a sample request of [`samples`] routes to in the store of
/// [`synthetic_gateway_store`]: the same backend, named by port number,
/// and hosts below a wildcard at any depth match (Gateway API wildcards).
pub fn gateway_expectation(sample: &SampleRequest) -> Option<String> {
    if let Some(e) = &sample.expected {
        return Some(e.replace(":http", ":80"));
    }
    // The wildcard misses of `miss` (`a.b<n>.w<i>.example.com/static`)
    // are hits here.
    let host = sample.host.split(':').next().unwrap_or("");
    let labels: Vec<&str> = host.split('.').collect();
    let w = labels.iter().rev().nth(2)?;
    let i: usize = w.strip_prefix('w')?.parse().ok()?;
    (labels.len() > 4 && host.ends_with(".example.com") && sample.path == "/static").then(|| {
        let s = Shape { i };
        format!("{}/{}:80", s.namespace(), s.service_name(false))
    })
}

/// The options every benchmark compiles with: the proxy's defaults, with
/// one status address.
pub fn compile_options() -> CompileOptions {
    CompileOptions {
        status_addresses: vec!["127.0.0.1".into()],
        ..CompileOptions::default()
    }
}

/// Compiles a store the way the proxy does, with [`compile_options`].
pub fn compile_store(store: &Store, registry: &EndpointRegistry, generation: u64) -> Snapshot {
    compile(store, Vec::new(), generation, &compile_options(), registry)
}

fn meta(namespace: &str, name: String, labels: &[(&str, &str)], created: i64) -> ObjectMeta {
    ObjectMeta {
        namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
        name: Some(name),
        labels: (!labels.is_empty()).then(|| {
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        }),
        creation_timestamp: Some(Time(
            Timestamp::from_second(EPOCH_SECONDS + created).expect("timestamp in range"),
        )),
        resource_version: Some((1000 + created).to_string()),
        generation: Some(1),
        ..Default::default()
    }
}

fn ingress_class() -> IngressClass {
    IngressClass {
        metadata: meta("", INGRESS_CLASS.to_string(), &[], 0),
        spec: Some(IngressClassSpec {
            controller: Some(CONTROLLER_NAME.to_string()),
            parameters: None,
        }),
    }
}

fn ingress(s: Shape) -> Ingress {
    let namespace = s.namespace();
    let app = format!("app-{}", s.i);
    let rules = (0..s.rules())
        .map(|rule| IngressRule {
            host: Some(s.host(rule)),
            http: Some(HTTPIngressRuleValue {
                paths: (0..s.paths(rule))
                    .map(|k| {
                        let (path_type, path) = s.path(k);
                        HTTPIngressPath {
                            path: Some(path),
                            path_type: path_type.to_string(),
                            backend: backend(s, s.uses_api(k)),
                        }
                    })
                    .collect(),
            }),
        })
        .collect();
    Ingress {
        metadata: meta(
            &namespace,
            app.clone(),
            &[("app.kubernetes.io/name", &app)],
            s.i as i64,
        ),
        spec: Some(IngressSpec {
            ingress_class_name: Some(INGRESS_CLASS.to_string()),
            rules: Some(rules),
            ..Default::default()
        }),
        status: None,
    }
}

fn backend(s: Shape, api: bool) -> IngressBackend {
    IngressBackend {
        service: Some(IngressServiceBackend {
            name: s.service_name(api),
            port: Some(if api {
                ServiceBackendPort {
                    number: Some(API_PORT_NUMBER),
                    name: None,
                }
            } else {
                ServiceBackendPort {
                    name: Some(WEB_PORT_NAME.to_string()),
                    number: None,
                }
            }),
        }),
        resource: None,
    }
}

/// `(name, service port, target port)` of a Service's ports.
fn ports(api: bool) -> &'static [(&'static str, i32, i32)] {
    if api {
        &[("grpc", API_PORT_NUMBER, 9000), ("metrics", 9090, 9090)]
    } else {
        &[(WEB_PORT_NAME, 80, 8080)]
    }
}

/// Index of a Service among all generated Services, for unique addresses.
fn service_index(s: Shape, api: bool) -> usize {
    2 * s.i + usize::from(api)
}

fn service(s: Shape, api: bool, mirrored: bool) -> Service {
    let namespace = s.namespace();
    let name = s.service_name(api);
    let ip = ipv4(172, service_index(s, api));
    Service {
        metadata: meta(
            &namespace,
            name.clone(),
            &[("app.kubernetes.io/name", &name)],
            s.i as i64,
        ),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some(ip.clone()),
            cluster_ips: Some(vec![ip]),
            selector: (!mirrored)
                .then(|| BTreeMap::from([("app.kubernetes.io/name".to_string(), name)])),
            ports: Some(
                ports(api)
                    .iter()
                    .map(|&(port_name, port, target)| ServicePort {
                        name: Some(port_name.to_string()),
                        port,
                        target_port: Some(IntOrString::Int(target)),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: None,
    }
}

fn endpoint_slice(s: Shape, api: bool, mirrored: bool) -> EndpointSlice {
    let namespace = s.namespace();
    let service = s.service_name(api);
    let index = service_index(s, api);
    let endpoints: Vec<Endpoint> = (0..ENDPOINTS_PER_SERVICE)
        .map(|m| Endpoint {
            addresses: vec![ipv4(10, index * ENDPOINTS_PER_SERVICE + m)],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            node_name: Some(format!("node-{}", (index + m) % 50)),
            zone: Some(format!("zone-{}", m % 3)),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some(namespace.clone()),
                name: Some(format!("{service}-{m}")),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    EndpointSlice {
        metadata: meta(
            &namespace,
            format!("{service}-{:05x}", index % 0x10_0000),
            &[
                (SERVICE_NAME_LABEL, &service),
                (
                    "endpointslice.kubernetes.io/managed-by",
                    match mirrored {
                        true => teapot_api::admission::MANAGED_BY_SYNC,
                        false => "endpointslice-controller.k8s.io",
                    },
                ),
            ],
            s.i as i64,
        ),
        address_type: "IPv4".into(),
        endpoints: Some(endpoints),
        ports: Some(
            ports(api)
                .iter()
                .map(|&(port_name, _, target)| EndpointPort {
                    name: Some(port_name.to_string()),
                    port: Some(target),
                    protocol: Some("TCP".into()),
                    app_protocol: None,
                })
                .collect(),
        ),
    }
}

/// `first.a.b.c` with `a.b.c` the 24 low bits of `n`.
fn ipv4(first: u8, n: usize) -> String {
    format!(
        "{first}.{}.{}.{}",
        (n >> 16) & 0xff,
        (n >> 8) & 0xff,
        n & 0xff
    )
}

/// What a sample request exercises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestClass {
    /// An exact host and a path of any of its rules.
    ExactHostHit,
    /// A host under a wildcard rule.
    WildcardHit,
    /// A long path (8 segments) that only a depth-4 `Prefix` rule matches,
    /// so the lookup walks back 4 segments.
    DeepPrefix,
    /// Unknown hosts, known hosts with unknown paths, hosts one label too
    /// deep for a wildcard. Nothing matches and there is no default backend.
    Miss,
}

impl RequestClass {
    pub const ALL: [RequestClass; 4] = [
        RequestClass::ExactHostHit,
        RequestClass::WildcardHit,
        RequestClass::DeepPrefix,
        RequestClass::Miss,
    ];

    /// Short name, as used in bench ids and the report.
    pub fn name(self) -> &'static str {
        match self {
            RequestClass::ExactHostHit => "exact-host-hit",
            RequestClass::WildcardHit => "wildcard-hit",
            RequestClass::DeepPrefix => "deep-prefix",
            RequestClass::Miss => "miss",
        }
    }
}

/// A request and what it must route to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleRequest {
    /// As received in `Host`/`:authority` (some carry a port).
    pub host: String,
    /// Path without query.
    pub path: String,
    /// The upstream name (`namespace/service:port`) it routes to; `None`
    /// for a miss.
    pub expected: Option<String>,
}

/// `count` requests of one class against the store of `ingresses`,
/// spread pseudo-randomly (and deterministically) over the whole table so
/// that lookups touch cold as well as warm parts of it.
pub fn samples(ingresses: usize, class: RequestClass, count: usize) -> Vec<SampleRequest> {
    assert!(ingresses > 0, "samples need at least one Ingress");
    let mut rng = SplitMix(0x7ea_907 ^ class as u64);
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let n = out.len();
        let i = rng.below(ingresses);
        let s = Shape { i };
        let sample = match class {
            RequestClass::ExactHostHit => {
                let rule = rng.below(s.exact_hosts());
                let k = rng.below(s.paths(rule));
                let host = with_port(s.host(rule), n);
                Some(hit(s, host, k, n))
            }
            RequestClass::WildcardHit => {
                // The wildcard Ingresses are 0, 10, 20, ...
                let s = Shape { i: i - i % 10 };
                let rule = s.exact_hosts();
                let k = rng.below(s.paths(rule));
                let host = with_port(s.wildcard_request_host(&format!("h{n}")), n);
                Some(hit(s, host, k, n))
            }
            RequestClass::DeepPrefix => {
                // A rule with 4 paths; rule 0 has 4 when `i` is odd.
                let rule = (0..s.exact_hosts()).find(|&r| s.paths(r) == 4);
                rule.map(|rule| SampleRequest {
                    host: s.host(rule),
                    path: format!(
                        "{}/{n}/details/history/2024",
                        s.path(3).1 // depth 4
                    ),
                    expected: Some(s.upstream_name(3)),
                })
            }
            RequestClass::Miss => Some(miss(s, n)),
        };
        out.extend(sample);
    }
    out
}

/// Request strings packed into one buffer, as a proxy has the request it
/// routes in a hot buffer. Looking up `SampleRequest`s one by one would
/// also time cache and TLB misses on the sample strings themselves, which
/// are scattered over a heap the store was built in.
#[derive(Debug)]
pub struct PackedRequests {
    buf: String,
    /// `(host end, path end)` offsets into `buf`; each pair starts where
    /// the previous one ended.
    ends: Vec<(usize, usize)>,
}

impl PackedRequests {
    pub fn new(requests: &[SampleRequest]) -> PackedRequests {
        let len = requests.iter().map(|r| r.host.len() + r.path.len()).sum();
        let mut buf = String::with_capacity(len);
        let mut ends = Vec::with_capacity(requests.len());
        for r in requests {
            buf.push_str(&r.host);
            let host_end = buf.len();
            buf.push_str(&r.path);
            ends.push((host_end, buf.len()));
        }
        PackedRequests { buf, ends }
    }

    /// `(host, path)` pairs borrowing the buffer.
    pub fn pairs(&self) -> Vec<(&str, &str)> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&(host_end, path_end)| {
                let pair = (&self.buf[start..host_end], &self.buf[host_end..path_end]);
                start = path_end;
                pair
            })
            .collect()
    }
}

/// Every class, `per_class` of each.
pub fn all_samples(ingresses: usize, per_class: usize) -> Vec<(RequestClass, SampleRequest)> {
    RequestClass::ALL
        .iter()
        .flat_map(|&c| {
            samples(ingresses, c, per_class)
                .into_iter()
                .map(move |s| (c, s))
        })
        .collect()
}

/// A request for path `k` of `s` on `host`: the path itself for `Exact`,
/// a path below it for prefixes.
fn hit(s: Shape, host: String, k: usize, n: usize) -> SampleRequest {
    let (path_type, path) = s.path(k);
    let path = match (path_type, n % 3) {
        ("Exact", _) => path,
        (_, 0) => path,
        (_, 1) => format!("{path}/"),
        _ => format!("{path}/r{n}.json"),
    };
    SampleRequest {
        host,
        path,
        expected: Some(s.upstream_name(k)),
    }
}

fn miss(s: Shape, n: usize) -> SampleRequest {
    let v = s.version();
    let (host, path) = match n % 4 {
        // An unknown host.
        0 => (
            format!(
                "unknown-{}.tenant-{}.lb.example.com",
                s.i,
                s.i / INGRESSES_PER_NAMESPACE
            ),
            "/static/app.js".to_string(),
        ),
        // A known host, a path below the Exact rule only: walks 3 segments.
        1 => (s.host(0), format!("/api/v{v}/orders")),
        // A known host, a path sharing no prefix.
        2 => (s.host(1), "/nothing/here".to_string()),
        // One label too deep for a wildcard (or the bare wildcard domain).
        _ => {
            let w = Shape { i: s.i - s.i % 10 };
            (
                w.wildcard_request_host(&format!("a.b{n}")),
                "/static".into(),
            )
        }
    };
    SampleRequest {
        host,
        path,
        expected: None,
    }
}

/// One request in four carries a port, as a browser sends on non-default
/// ports; lookup strips it.
fn with_port(host: String, n: usize) -> String {
    if n % 4 == 3 {
        format!("{host}:8443")
    } else {
        host
    }
}

/// A tiny deterministic PRNG (SplitMix64); enough for spreading samples.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: usize = 200;

    #[test]
    fn store_has_the_expected_objects() {
        let store = synthetic_store(N);
        assert_eq!(store.ingresses.len(), N);
        assert_eq!(store.ingress_classes.len(), 1);
        assert_eq!(store.services.len(), expected_services(N));
        assert_eq!(store.endpoint_slices.len(), expected_services(N));
        // 2 namespaces of 100.
        let namespaces: std::collections::BTreeSet<_> =
            store.ingresses.keys().map(|k| &k.namespace).collect();
        assert_eq!(namespaces.len(), N / INGRESSES_PER_NAMESPACE);
    }

    #[test]
    fn store_compiles_to_the_expected_routes_without_problems() {
        let store = synthetic_store(N);
        let registry = EndpointRegistry::default();
        let snapshot = compile_store(&store, &registry, 1);
        assert_eq!(snapshot.routes.len(), expected_routes(N));
        assert_eq!(snapshot.routes.hosts(), expected_hosts(N));
        // 2-3 hosts + 1 wildcard in 10, 3-4 paths each.
        assert!(expected_hosts(N) > 2 * N && expected_hosts(N) < 4 * N);
        assert!(expected_routes(N) > 3 * expected_hosts(N));

        let report = &snapshot.report;
        assert_eq!(report.ingresses.len(), N);
        for ingress in &report.ingresses {
            assert!(ingress.served, "{}/{}", ingress.namespace, ingress.name);
            for c in &ingress.conditions {
                let ok = if c.type_ == "Conflicted" {
                    "False"
                } else {
                    "True"
                };
                assert_eq!(
                    c.status, ok,
                    "{}/{}: {c:?}",
                    ingress.namespace, ingress.name
                );
            }
        }
        // Every (Service, port) referenced resolved to 3 endpoints.
        assert_eq!(report.backends.0.len(), expected_services(N));
        for b in &report.backends.0 {
            assert_eq!(b.endpoints.load().len(), ENDPOINTS_PER_SERVICE, "{b:?}");
            assert!(b.unavailable.is_none(), "{b:?}");
        }
    }

    #[test]
    fn samples_route_as_expected() {
        let store = synthetic_store(N);
        let registry = EndpointRegistry::default();
        let snapshot = compile_store(&store, &registry, 1);
        let samples = all_samples(N, 100);
        assert_eq!(samples.len(), 400);
        for (class, s) in &samples {
            let got = snapshot.routes.lookup(&s.host, &s.path);
            match &s.expected {
                Some(name) => {
                    let u = got.unwrap_or_else(|| panic!("{class:?} {s:?} missed"));
                    assert_eq!(&u.name, name, "{class:?} {s:?}");
                    assert_eq!(u.endpoints.load().len(), ENDPOINTS_PER_SERVICE, "{s:?}");
                    assert!(u.unavailable.is_none());
                }
                None => assert!(got.is_none(), "{class:?} {s:?} hit {:?}", got.unwrap().name),
            }
        }
    }

    #[test]
    fn packed_requests_round_trip() {
        let requests = samples(N, RequestClass::Miss, 10);
        let packed = PackedRequests::new(&requests);
        let pairs = packed.pairs();
        assert_eq!(pairs.len(), requests.len());
        for (r, (host, path)) in requests.iter().zip(pairs) {
            assert_eq!((r.host.as_str(), r.path.as_str()), (host, path));
        }
    }

    #[test]
    fn samples_are_deterministic_and_cover_the_table() {
        let a = samples(N, RequestClass::ExactHostHit, 50);
        assert_eq!(a, samples(N, RequestClass::ExactHostHit, 50));
        let distinct: std::collections::BTreeSet<_> = a.iter().map(|s| &s.host).collect();
        assert!(distinct.len() > 30);
        assert!(
            samples(N, RequestClass::DeepPrefix, 20)
                .iter()
                .all(|s| s.path.split('/').count() == 9)
        );
    }
}
pub mod bgp_lab;
pub mod h3load;
pub mod idle;
pub mod manifests_proxy;
pub mod peers;
pub mod results;
pub mod stats;
