//! The Cluster reconciler, one step at a time, against the API double
//! (`teapot_testkit::apiserver`): management and LB cluster are one here.
//! Each test calls `reconcile` directly with the Cluster as it is stored
//! and looks at what the double holds afterwards.
//!
//! Run: `cargo test -p teapot-capi --test reconcile`.

use std::sync::Arc;

use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};
use teapot_capi::objects::CapiVersion;
use teapot_capi::reconcile::{CONDITION, reconcile};
use teapot_capi::{Config, Context, FINALIZER, Metrics};
use teapot_testkit::apiserver::ApiServer;

const NS: &str = "clusters";
const LB_NS: &str = "capi-lb";
const CAPI: &str = "cluster.x-k8s.io/v1beta2";

fn context(api: &ApiServer) -> Arc<Context> {
    let mut config = Config::new(api.client(), api.client(), LB_NS);
    config.lb_namespaces.push("capi-lb-2".into());
    Arc::new(Context::new(config, Metrics::new().unwrap()))
}

fn cluster(name: &str, annotations: Value) -> Value {
    json!({"apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}}}})
}

fn opted_in(name: &str) -> Value {
    cluster(
        name,
        json!({"capi.teapot.dev/control-plane-endpoint": "true"}),
    )
}

fn machine(cluster: &str, name: &str, ip: &str, control_plane: bool, node: bool) -> Value {
    let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = json!("");
    }
    let mut status = json!({"addresses": [
        {"type": "Hostname", "address": name},
        {"type": "ExternalIP", "address": "203.0.113.9"},
        {"type": "InternalIP", "address": ip}]});
    if node {
        status["nodeRef"] = json!({"name": name});
    }
    json!({"apiVersion": CAPI, "kind": "Machine",
        "metadata": {"name": name, "namespace": NS, "labels": labels,
            // What Cluster API's machine controller holds while it drains.
            "finalizers": ["machine.cluster.x-k8s.io"]},
        "spec": {"clusterName": cluster},
        "status": status})
}

async fn step(api: &ApiServer, ctx: &Arc<Context>, name: &str) {
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(api.client(), NS, &CapiVersion::V1Beta2.cluster());
    let stored = clusters.get(name).await.expect("the Cluster exists");
    reconcile(Arc::new(stored), ctx.clone())
        .await
        .expect("reconcile succeeds");
}

fn lb_name(name: &str) -> String {
    teapot_capi::endpoint::ClusterKey::new(NS, name).lb_name()
}

fn service(api: &ApiServer, name: &str) -> Option<Value> {
    api.get("v1", "Service", LB_NS, &lb_name(name))
}

fn slice_addresses(api: &ApiServer, name: &str) -> Vec<(String, bool)> {
    let slice = api
        .get(
            "discovery.k8s.io/v1",
            "EndpointSlice",
            LB_NS,
            &lb_name(name),
        )
        .expect("the slice exists");
    slice["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["addresses"][0].as_str().unwrap().to_string(),
                e["conditions"]["ready"] == true,
            )
        })
        .collect()
}

fn stored_cluster(api: &ApiServer, name: &str) -> Option<Value> {
    api.get(CAPI, "Cluster", NS, name)
}

fn condition(api: &ApiServer, name: &str) -> Value {
    let cluster = stored_cluster(api, name).unwrap();
    cluster["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == CONDITION).cloned())
        .unwrap_or(Value::Null)
}

/// What the fleet's status writer does once it allocated an address.
fn allocate(api: &ApiServer, name: &str, ip: &str) {
    let mut svc = service(api, name).expect("the Service exists");
    svc["status"] = json!({"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}});
    api.apply(svc);
}

fn event_reasons(api: &ApiServer) -> Vec<String> {
    api.requests()
        .iter()
        .filter(|r| r.path.ends_with("/events"))
        .filter_map(|r| Some(r.body.as_ref()?.get("reason")?.as_str()?.to_string()))
        .collect()
}

#[tokio::test]
async fn a_new_cluster_gets_a_service_and_then_its_address_as_control_plane_endpoint() {
    let api = ApiServer::start().await;
    let ctx = context(&api);
    api.apply(opted_in("prod"));

    step(&api, &ctx, "prod").await;
    let stored = stored_cluster(&api, "prod").unwrap();
    assert_eq!(stored["metadata"]["finalizers"], json!([FINALIZER]));
    assert_eq!(stored["spec"].get("controlPlaneEndpoint"), None);
    let svc = service(&api, "prod").expect("Service created");
    assert_eq!(svc["spec"]["type"], "LoadBalancer");
    assert_eq!(svc["spec"]["loadBalancerClass"], "teapot.dev/lb");
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "kube-apiserver", "port": 6443, "protocol": "TCP"}])
    );
    assert_eq!(svc["spec"].get("selector"), None);
    assert_eq!(
        svc["metadata"]["annotations"]["teapot.dev/health-check-interval"],
        "1s"
    );
    assert_eq!(slice_addresses(&api, "prod"), []);
    let waiting = condition(&api, "prod");
    assert_eq!(
        (&waiting["status"], &waiting["reason"]),
        (&json!("False"), &json!("WaitingForAddress"))
    );

    allocate(&api, "prod", "198.51.100.7");
    step(&api, &ctx, "prod").await;
    let stored = stored_cluster(&api, "prod").unwrap();
    assert_eq!(
        stored["spec"]["controlPlaneEndpoint"],
        json!({"host": "198.51.100.7", "port": 6443})
    );
    assert_eq!(
        stored["spec"]["clusterNetwork"]["pods"]["cidrBlocks"][0], "192.168.0.0/16",
        "the rest of the spec is untouched"
    );
    assert_eq!(condition(&api, "prod")["reason"], "WaitingForMachines");
    assert!(
        event_reasons(&api).contains(&"ControlPlaneEndpointSet".to_string()),
        "{:?}",
        event_reasons(&api)
    );

    // Nothing changed: nothing is written to the Cluster again.
    let version = stored["metadata"]["resourceVersion"].clone();
    step(&api, &ctx, "prod").await;
    assert_eq!(
        stored_cluster(&api, "prod").unwrap()["metadata"]["resourceVersion"],
        version
    );
}

#[tokio::test]
async fn control_plane_machines_become_slice_addresses_and_a_deleting_one_leaves_first() {
    let api = ApiServer::start().await;
    let ctx = context(&api);
    api.apply(opted_in("prod"));
    step(&api, &ctx, "prod").await;
    allocate(&api, "prod", "198.51.100.7");
    // The first control plane: no Node registered yet, ready anyway (its
    // Node registers through this endpoint).
    api.apply(machine("prod", "cp-a", "10.0.0.1", true, false));
    api.apply(machine("prod", "worker", "10.0.0.9", false, true));
    api.apply(machine("other", "other-cp", "10.0.0.8", true, true));
    step(&api, &ctx, "prod").await;
    assert_eq!(slice_addresses(&api, "prod"), [("10.0.0.1".into(), true)]);

    api.apply(machine("prod", "cp-a", "10.0.0.1", true, true));
    api.apply(machine("prod", "cp-b", "10.0.0.2", true, true));
    api.apply(machine("prod", "cp-c", "10.0.0.3", true, false));
    step(&api, &ctx, "prod").await;
    assert_eq!(
        slice_addresses(&api, "prod"),
        [
            ("10.0.0.1".into(), true),
            ("10.0.0.2".into(), true),
            ("10.0.0.3".into(), false),
        ],
        "a new Machine waits for its Node once one exists"
    );
    let serving = condition(&api, "prod");
    assert_eq!(
        (&serving["status"], &serving["reason"]),
        (&json!("True"), &json!("Serving"))
    );

    // Cluster API starts deleting cp-a (its finalizer keeps it while it
    // drains): it leaves the slice at once.
    assert!(api.delete(CAPI, "Machine", NS, "cp-a"));
    step(&api, &ctx, "prod").await;
    assert_eq!(
        slice_addresses(&api, "prod"),
        [("10.0.0.2".into(), true), ("10.0.0.3".into(), false)]
    );
}

#[tokio::test]
async fn deleting_the_cluster_keeps_the_endpoint_until_its_control_plane_is_gone() {
    let api = ApiServer::start().await;
    let ctx = context(&api);
    api.apply(opted_in("prod"));
    step(&api, &ctx, "prod").await;
    allocate(&api, "prod", "198.51.100.7");
    api.apply(machine("prod", "cp-a", "10.0.0.1", true, true));
    step(&api, &ctx, "prod").await;

    assert!(api.delete(CAPI, "Cluster", NS, "prod"));
    step(&api, &ctx, "prod").await;
    assert!(service(&api, "prod").is_some(), "drains still need it");
    assert_eq!(condition(&api, "prod")["reason"], "Deleting");

    assert!(api.delete(CAPI, "Machine", NS, "cp-a"));
    step(&api, &ctx, "prod").await;
    assert!(service(&api, "prod").is_some(), "cp-a is still draining");
    assert_eq!(slice_addresses(&api, "prod"), []);

    let mut drained = machine("prod", "cp-a", "10.0.0.1", true, true);
    drained["metadata"]["finalizers"] = json!([]);
    api.apply(drained);
    assert!(api.get(CAPI, "Machine", NS, "cp-a").is_none());
    step(&api, &ctx, "prod").await;
    assert!(service(&api, "prod").is_none(), "the address is free");
    assert!(
        api.get(
            "discovery.k8s.io/v1",
            "EndpointSlice",
            LB_NS,
            &lb_name("prod")
        )
        .is_none()
    );
    assert!(
        stored_cluster(&api, "prod").is_none(),
        "finalizer removed, so the Cluster is gone"
    );
    assert!(event_reasons(&api).contains(&"EndpointReleased".to_string()));
}

#[tokio::test]
async fn clusters_that_did_not_opt_in_are_left_alone_and_opting_out_releases() {
    let api = ApiServer::start().await;
    let ctx = context(&api);
    api.apply(cluster("plain", json!({})));
    step(&api, &ctx, "plain").await;
    assert!(service(&api, "plain").is_none());
    assert_eq!(
        stored_cluster(&api, "plain").unwrap()["metadata"].get("finalizers"),
        None
    );

    api.apply(opted_in("prod"));
    step(&api, &ctx, "prod").await;
    assert!(service(&api, "prod").is_some());
    let mut out = stored_cluster(&api, "prod").unwrap();
    out["metadata"]["annotations"] = json!({});
    api.apply(out);
    step(&api, &ctx, "prod").await;
    assert!(service(&api, "prod").is_none());
    assert_eq!(
        stored_cluster(&api, "prod").unwrap()["metadata"]["finalizers"],
        json!([])
    );
}

#[tokio::test]
async fn a_set_endpoint_is_never_changed_and_unknown_namespaces_are_refused() {
    let api = ApiServer::start().await;
    let ctx = context(&api);
    let mut set = opted_in("fixed");
    set["spec"]["controlPlaneEndpoint"] = json!({"host": "192.0.2.1", "port": 6443});
    api.apply(set);
    step(&api, &ctx, "fixed").await;
    allocate(&api, "fixed", "198.51.100.7");
    step(&api, &ctx, "fixed").await;
    assert_eq!(
        stored_cluster(&api, "fixed").unwrap()["spec"]["controlPlaneEndpoint"]["host"],
        "192.0.2.1"
    );
    assert_eq!(condition(&api, "fixed")["reason"], "EndpointConflict");

    let elsewhere = cluster(
        "elsewhere",
        json!({"capi.teapot.dev/control-plane-endpoint": "true",
               "capi.teapot.dev/lb-namespace": "tenant-acme"}),
    );
    api.apply(elsewhere);
    step(&api, &ctx, "elsewhere").await;
    assert!(
        api.get("v1", "Service", "tenant-acme", &lb_name("elsewhere"))
            .is_none()
    );
    assert!(service(&api, "elsewhere").is_none());
    assert_eq!(
        condition(&api, "elsewhere")["reason"],
        "NamespaceNotAllowed"
    );

    // An allowed second namespace; moving there removes the first copy.
    let mut moved = opted_in("moved");
    api.apply(moved.clone());
    step(&api, &ctx, "moved").await;
    assert!(service(&api, "moved").is_some());
    moved["metadata"]["annotations"]["capi.teapot.dev/lb-namespace"] = json!("capi-lb-2");
    moved["metadata"]["finalizers"] = json!([FINALIZER]);
    api.apply(moved);
    step(&api, &ctx, "moved").await;
    assert!(service(&api, "moved").is_none());
    assert!(
        api.get("v1", "Service", "capi-lb-2", &lb_name("moved"))
            .is_some()
    );
}

#[tokio::test]
async fn v1beta1_clusters_get_the_condition_under_status_v1beta2() {
    let api = ApiServer::start().await;
    let mut config = Config::new(api.client(), api.client(), LB_NS);
    config.version = CapiVersion::V1Beta1;
    let ctx = Arc::new(Context::new(config, Metrics::new().unwrap()));
    let mut old = opted_in("old");
    old["apiVersion"] = json!("cluster.x-k8s.io/v1beta1");
    api.apply(old);
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(api.client(), NS, &CapiVersion::V1Beta1.cluster());
    reconcile(Arc::new(clusters.get("old").await.unwrap()), ctx.clone())
        .await
        .unwrap();
    let stored = api
        .get("cluster.x-k8s.io/v1beta1", "Cluster", NS, "old")
        .unwrap();
    assert_eq!(
        stored["status"]["v1beta2"]["conditions"][0]["type"],
        CONDITION
    );
    assert_eq!(stored["status"].get("conditions"), None);
}
