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
                file: file.to_path_buf(),
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
