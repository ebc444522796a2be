//! The store drops the API server's and kubectl's bookkeeping when an
//! object enters it (`teapot_model::validate::parse_object`): a compile
//! of that store must equal one of the objects kept whole.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use teapot_model::endpoints::CompactSlice;
use teapot_model::manifests::{Loaded, load_text};
use teapot_model::store::{Kind, Object, ObjectKey, Origin, Store};

use crate::compile::snapshot::Snapshot;
use crate::compile::{CompileOptions, compile};
use crate::live::endpoints::EndpointRegistry;

const BOOKKEEPING: &str = concat!(
    "  managedFields:\n",
    "  - {manager: kubectl, operation: Update, apiVersion: v1, fieldsType: FieldsV1, fieldsV1: {'f:spec': {}}}\n",
    "  - {manager: teapot, operation: Update, subresource: status, fieldsV1: {'f:status': {}}}\n",
);

/// Operator objects (no Tenant): an Ingress per backend protocol the
/// nginx annotations choose, so a store that lost annotations compiles
/// differently.
fn world() -> String {
    let mut docs = vec![
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: teapot}\nspec: {controller: teapot.dev/ingress-controller}\n".to_string(),
    ];
    for (i, protocol) in ["HTTP", "GRPC", "HTTPS"].iter().enumerate() {
        let meta = |name: String, extra: &str| {
            format!(
                "metadata:\n  name: {name}\n  namespace: ops\n{BOOKKEEPING}  annotations:\n    kubectl.kubernetes.io/last-applied-configuration: '{{\"kind\": \"copy\"}}'\n{extra}"
            )
        };
        docs.push(format!(
            "apiVersion: v1\nkind: Service\n{}spec: {{ports: [{{name: http, port: 80}}]}}\n",
            meta(format!("s{i}"), "")
        ));
        docs.push(format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n{}addressType: IPv4\nports: [{{name: http, port: 8080}}]\nendpoints: [{{addresses: [10.0.0.{i}], conditions: {{ready: true}}}}]\n",
            meta(
                format!("s{i}-1"),
                &format!("  labels: {{kubernetes.io/service-name: s{i}}}\n")
            )
        ));
        docs.push(format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\n{}spec:\n  ingressClassName: teapot\n  rules:\n  - host: h{i}.example.com\n    http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: s{i}, port: {{name: http}}}}}}}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: 192.0.2.1}}]}}}}\n",
            meta(
                format!("i{i}"),
                &format!(
                    "    nginx.ingress.kubernetes.io/backend-protocol: {protocol}\n    nginx.ingress.kubernetes.io/ssl-redirect: 'false'\n"
                )
            )
        ));
    }
    docs.join("---\n")
}

/// The objects typed as written, bookkeeping and all, past the loader.
fn whole(text: &str, file: &Path) -> Store {
    let mut store = Store::default();
    for (document, doc) in text.split("---\n").enumerate() {
        let value: serde_json::Value = serde_yaml::from_str(doc).unwrap();
        let kind = value["kind"].as_str().unwrap().to_string();
        let namespace = value["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = value["metadata"]["name"].as_str().unwrap().to_string();
        let (kind, object) = match kind.as_str() {
            "IngressClass" => (
                Kind::IngressClass,
                Object::IngressClass(serde_json::from_value::<IngressClass>(value).unwrap()),
            ),
            "Service" => (
                Kind::Service,
                Object::Service(serde_json::from_value::<Service>(value).unwrap()),
            ),
            "EndpointSlice" => (
                Kind::EndpointSlice,
                Object::EndpointSlice(CompactSlice::new(
                    serde_json::from_value::<EndpointSlice>(value).unwrap(),
                    &namespace,
                )),
            ),
            "Ingress" => {
                let ingress: Ingress = serde_json::from_value(value).unwrap();
                assert!(ingress.metadata.managed_fields.is_some());
                (Kind::Ingress, Object::Ingress(ingress))
            }
            other => panic!("{other}"),
        };
        store.insert(
            ObjectKey {
                kind,
                namespace,
                name,
            },
            object,
            Origin {
                file: std::sync::Arc::from(file),
                document,
            },
        );
    }
    store
}

/// What requests see on every host, and the status report.
fn described(snapshot: &Snapshot) -> (Vec<String>, String) {
    let mut hosts: Vec<&str> = snapshot.routes.exact_hosts().collect();
    hosts.sort_unstable();
    let served = hosts
        .into_iter()
        .map(|host| {
            let route = snapshot.routes.lookup(host, "/").expect("routed");
            let u = &route.upstream;
            let endpoints = u.endpoints.addresses();
            // The variant alone: a TLS upstream's class is numbered per
            // compile.
            let protocol = format!("{:?}", u.protocol);
            let protocol = protocol.split('(').next().unwrap_or_default();
            format!(
                "{host} {} {protocol} policy={:?} {endpoints:?}",
                u.name,
                route.policy.is_some()
            )
        })
        .collect();
    let report = serde_json::to_string(&snapshot.report).unwrap();
    (served, report)
}

#[test]
fn a_store_without_bookkeeping_compiles_as_the_objects_kept_whole() {
    let text = world();
    let file = PathBuf::from("ops.yaml");
    let mut loaded = Loaded::default();
    load_text(&file, &text, &Store::default(), &mut loaded);
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let stripped = &loaded.store;
    assert!(
        stripped
            .ingresses
            .values()
            .all(|i| i.object.metadata.managed_fields.is_none())
    );
    let whole = whole(&text, &file);
    assert_eq!(stripped.len(), whole.len());
    let options = CompileOptions {
        status_addresses: vec!["127.0.0.1".into()],
        ..CompileOptions::default()
    };
    let compiled = |store: &Store| {
        described(&compile(
            store,
            Vec::new(),
            1,
            &options,
            &EndpointRegistry::default(),
        ))
    };
    let (served, report) = compiled(stripped);
    assert_eq!(served.len(), 3, "{served:?}");
    assert_eq!((served, report), compiled(&whole));
}

/// Services enter the store in teapot's compact form
/// (`teapot_model::service`), which keeps what every reader reads. An L4
/// Service whose source ranges and held address are kept outside the
/// compact form's inline part (`spec.loadBalancerSourceRanges`, `status`),
/// with finalizers and an owner (kept aside, read by nobody), and an
/// Ingress backend by port name: the compile serves what the Services
/// say, and the same as for the Services read back whole
/// (`CompactService::to_typed`).
#[test]
fn a_compact_service_compiles_as_the_service_written() {
    use std::sync::Arc;

    use crate::compile::l4::{L4Config, L4Inputs};

    let lb = concat!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: db\n  namespace: ops\n",
        "  finalizers: [service.kubernetes.io/load-balancer-cleanup]\n",
        "  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: owner, uid: '1'}]\n",
        "  annotations: {teapot.dev/proxy-protocol: v2}\n",
        "spec:\n  type: LoadBalancer\n  externalTrafficPolicy: Cluster\n",
        "  loadBalancerSourceRanges: [198.51.100.7/24]\n",
        "  ports: [{name: pg, port: 5432}]\n",
        "status: {loadBalancer: {ingress: [{ip: 192.0.2.11}]}}\n",
        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n",
        "metadata: {name: db-1, namespace: ops, labels: {kubernetes.io/service-name: db}}\n",
        "addressType: IPv4\nports: [{name: pg, port: 5432}]\nendpoints: [{addresses: [10.0.0.9]}]\n",
        "---\napiVersion: v1\nkind: Service\nmetadata: {name: grpc, namespace: ops}\n",
        "spec: {sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}, ports: [{name: h2, port: 80, appProtocol: kubernetes.io/h2c}]}\n",
        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n",
        "metadata: {name: grpc-1, namespace: ops, labels: {kubernetes.io/service-name: grpc}}\n",
        "addressType: IPv4\nports: [{name: h2, port: 8080}]\nendpoints: [{addresses: [10.0.0.8]}]\n",
        "---\napiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: teapot}\nspec: {controller: teapot.dev/ingress-controller}\n",
        "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: grpc, namespace: ops}\n",
        "spec: {ingressClassName: teapot, rules: [{host: grpc.example.com, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: grpc, port: {name: h2}}}}]}}]}\n",
    );
    let file = PathBuf::from("ops.yaml");
    let mut loaded = Loaded::default();
    load_text(&file, lb, &Store::default(), &mut loaded);
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let options = CompileOptions {
        status_addresses: vec!["127.0.0.1".into()],
        l4: Some(L4Inputs {
            config: Arc::new(L4Config {
                pools: vec!["default=192.0.2.10,192.0.2.11".parse().unwrap()],
                ..L4Config::default()
            }),
            previous: Arc::default(),
            runtime: Arc::default(),
        }),
        ..CompileOptions::default()
    };
    let compiled = |store: &Store| {
        let s = compile(store, Vec::new(), 1, &options, &EndpointRegistry::default());
        let l4 = s.l4.as_ref().expect("L4 compiled").table.clone();
        let listeners: Vec<String> = l4
            .listeners
            .iter()
            .map(|(key, route)| {
                let ranges = route.options.source_ranges.as_ref().expect("ranges");
                format!(
                    "{key:?} {} {:?} 198.51.100.200:{} 127.0.0.1:{} {:?}",
                    route.service,
                    route.upstream.endpoints.addresses(),
                    ranges.admits("198.51.100.200".parse().unwrap()),
                    ranges.admits("127.0.0.1".parse().unwrap()),
                    route.options.proxy_protocol,
                )
            })
            .collect();
        (described(&s), listeners)
    };
    let ((served, report), listeners) = compiled(&loaded.store);
    assert_eq!(
        served,
        ["grpc.example.com ops/grpc:h2 Http1 policy=false [\"10.0.0.8:8080\"]"]
    );
    assert_eq!(listeners.len(), 1, "{listeners:?}");
    assert!(
        listeners[0].contains("192.0.2.11")
            && listeners[0].contains("198.51.100.200:true 127.0.0.1:false"),
        "{listeners:?}"
    );
    assert!(report.contains("\"address\":\"192.0.2.11\""), "{report}");

    // The same Services read back whole and stored again compile the same.
    let mut again = loaded.store.clone();
    for (id, s) in &loaded.store.services {
        let typed = s.object.to_typed();
        assert!(typed.metadata.finalizers.is_some() || id.name != "db");
        again.insert(
            ObjectKey {
                kind: Kind::Service,
                namespace: id.namespace.clone(),
                name: id.name.clone(),
            },
            Object::Service(typed),
            s.origin.clone(),
        );
    }
    assert_eq!(compiled(&again), ((served, report), listeners));
}
