//! The whole chain in one test: tenant API (double) -> `teapot agent`
//! (in-process) -> LB API (double, with the real webhook rules as its
//! admission hook) -> `teapot proxy --kube` (the real binary) -> an echo
//! backend -> status back on the tenant Ingress.
//!
//! Addresses: the proxy refuses loopback endpoints in tenant namespaces
//! (and the webhook refuses to store them), and that rule stays. So the
//! echo backend listens on this machine's first non-loopback IPv4 address
//! (the one the default route uses), which the Tenant's `nodeCIDRs` allow
//! as a /32; the tenant "node" has that address as its InternalIP, and the
//! Service's NodePort is the echo's port (nodeport mode).
//!
//! Run: `cargo test -p teapot --test agent_kube agent_e2e::`. The `#[ignore = "needs
//! cluster"]` test runs the agent against two real clusters (docs/agent.md).

use crate::common;

use std::net::IpAddr;
use std::sync::Arc;

use common::agent::{
    Agent, DOMAIN, LB_NS, NS, echo_on, tenant_cluster, tenant_ingress, web_service, web_slice,
};
use common::*;
use serde_json::{Value, json};
use teapot_controller::ingress::CONDITIONS_ANNOTATION;
use teapot_controller::{AgentConfig, Metrics};
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::client::{Request, Transport};
use teapot_testkit::process::ProxyProcess;

const HOST: &str = "shop.acme.lb.example.net";
const ASSIGNED: &str = "web-shop.acme.lb.example.net";

/// The LB cluster whose Tenant's nodes are this machine (`ip`).
async fn lb_cluster(ip: IpAddr) -> (ApiServer, tokio::sync::watch::Sender<bool>) {
    agent::lb_cluster(&[&format!("{ip}/32")], INGRESS_KINDS).await
}

async fn get(proxy: &ProxyProcess, host: &str) -> teapot_testkit::client::Response {
    send(proxy.http, &Transport::Plain, &Request::get(host, "/")).await
}

async fn wait_status(proxy: &ProxyProcess, host: &str, status: u16) -> Value {
    eventually(
        &format!("GET {host}/ -> {status}"),
        RELOAD_TIMEOUT,
        || async {
            let r = get(proxy, host).await;
            if r.status == status {
                Ok(r.json().unwrap_or(Value::Null))
            } else {
                Err(format!("{} {}", r.status, r.text()))
            }
        },
    )
    .await
}

fn conditions(tenant: &ApiServer, name: &str) -> Option<Value> {
    let o = tenant.get("networking.k8s.io/v1", "Ingress", NS, name)?;
    serde_json::from_str(o["metadata"]["annotations"][CONDITIONS_ANNOTATION].as_str()?).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_ingress_to_live_route_and_back() {
    let ip = node_address(false);
    let (echo, _echo_stop) = echo_on(ip, "web-0").await;

    let (lb, webhook_stop) = lb_cluster(ip).await;

    // The tenant cluster: a node, a NodePort Service with one ready pod.
    let tenant = tenant_cluster(&ip.to_string()).await;
    tenant.apply(web_service(echo.port()));
    tenant.apply(web_slice(true));

    let proxy =
        ProxyProcess::start_kube(&teapot_bin(), lb.kubeconfig_path(), &["--domain", DOMAIN])
            .await
            .expect("teapot proxy --kube starts");
    let agent = Agent::start(&tenant, &lb);

    // `kubectl apply` of a teapot Ingress: served, and its ADDRESS shows.
    tenant.apply(tenant_ingress("web", HOST));
    let body = wait_status(&proxy, HOST, 200).await;
    assert_eq!(body["pod"], "web-0");
    let hostname = eventually("the tenant Ingress status", RELOAD_TIMEOUT, || async {
        let o = tenant
            .get("networking.k8s.io/v1", "Ingress", NS, "web")
            .unwrap();
        o["status"]["loadBalancer"]["ingress"][0]["hostname"]
            .as_str()
            .map(str::to_string)
            .ok_or(o["status"].clone())
    })
    .await;
    assert_eq!(hostname, ASSIGNED);
    assert_eq!(conditions(&tenant, "web").unwrap()[0]["status"], "True");
    assert!(
        tenant
            .get("networking.k8s.io/v1", "IngressClass", "", "teapot")
            .is_some(),
        "the agent installs IngressClass teapot"
    );

    // Scaling the Deployment to zero (the slice has no ready endpoint):
    // the route stays, with no backend (503); back up: served again.
    tenant.apply(web_slice(false));
    wait_status(&proxy, HOST, 503).await;
    tenant.apply(web_slice(true));
    wait_status(&proxy, HOST, 200).await;

    // A host in the operator's domain: refused by the webhook, reported on
    // the tenant's Ingress (condition and Event), never routed.
    tenant.apply(tenant_ingress("evil", "admin.example.net"));
    let refused = eventually(
        "the refusal on the tenant Ingress",
        RELOAD_TIMEOUT,
        || async {
            match conditions(&tenant, "evil") {
                Some(c) if c[0]["status"] == "False" => Ok(c[0].clone()),
                other => Err(other),
            }
        },
    )
    .await;
    assert_eq!(refused["reason"], "Refused");
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains("admin.example.net"), "{message}");
    // The Event follows the condition's write.
    eventually(
        "a Refused Event on the tenant Ingress",
        RELOAD_TIMEOUT,
        || async {
            let events: Vec<RecordedEvent> = tenant
                .requests()
                .iter()
                .filter(|r| r.method == "POST" && r.path.ends_with("/events"))
                .filter_map(|r| r.body.clone())
                .map(|b| RecordedEvent {
                    reason: b["reason"].as_str().unwrap_or("").into(),
                    name: b["regarding"]["name"].as_str().unwrap_or("").into(),
                })
                .collect();
            events
                .iter()
                .any(|e| e.reason == "Refused" && e.name == "evil")
                .then_some(())
                .ok_or(format!("{events:?}"))
        },
    )
    .await;
    assert_eq!(get(&proxy, "admin.example.net").await.status, 404);

    // Deleting the tenant Ingress removes the route and the LB copies; the
    // finalizer goes last.
    assert!(tenant.delete("networking.k8s.io/v1", "Ingress", NS, "web"));
    wait_status(&proxy, HOST, 404).await;
    eventually("the tenant Ingress is gone", RELOAD_TIMEOUT, || async {
        match tenant.get("networking.k8s.io/v1", "Ingress", NS, "web") {
            None => Ok(()),
            Some(o) => Err(o["metadata"].clone()),
        }
    })
    .await;
    // The refused Ingress still references Service web; once it goes too,
    // nothing needs the mirrored Service and its slice.
    assert!(tenant.delete("networking.k8s.io/v1", "Ingress", NS, "evil"));
    let service = teapot_api::hostname::mirrored_service_name(NS, "web");
    eventually(
        "the mirrored Service and slice are gone",
        RELOAD_TIMEOUT,
        || async {
            let left = (
                lb.get("v1", "Service", LB_NS, &service).is_some(),
                lb.get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &service)
                    .is_some(),
            );
            if left == (false, false) {
                Ok(())
            } else {
                Err(left)
            }
        },
    )
    .await;

    agent.stop().await;
    let _ = webhook_stop.send(true);
}

#[derive(Debug)]
#[allow(dead_code)]
struct RecordedEvent {
    reason: String,
    name: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_explains_a_bad_lb_kubeconfig() {
    let out = std::process::Command::new(teapot_bin())
        .args([
            "agent",
            "--lb-kubeconfig",
            "/nonexistent/kubeconfig",
            "--lb-namespace",
            "tenant-acme",
            "--tenant-kubeconfig",
            "/nonexistent/tenant",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/tenant"), "{stderr}");
}

/// An L4 Service through the same chain as far as the LB cluster goes:
/// the copy and its EndpointSlice pass the real webhook rules (no
/// selector, node ports off, endpoints inside `nodeCIDRs`), the address
/// the fleet writes into the LB Service's status reaches the tenant
/// Service (EXTERNAL-IP), a `teapot.dev/<Reason>` error becomes a
/// condition, and deleting the Service removes the copies. (No proxy runs
/// here: the test writes the LB Service's status as the fleet's status
/// writer would, see docs/l4.md.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_l4_service_to_lb_copy_and_back() {
    let ip = node_address(false);
    let (lb, webhook_stop) = lb_cluster(ip).await;
    let tenant = tenant_cluster(&ip.to_string()).await;
    tenant.apply(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "db", "namespace": NS},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "teapot.dev/lb",
                 "selector": {"app": "db"}, "externalTrafficPolicy": "Local",
                 "ports": [{"name": "pg", "port": 5432, "targetPort": 5432,
                            "nodePort": 31432, "protocol": "TCP"}]},
    }));
    tenant.apply(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "db-abcde", "namespace": NS,
                     "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.9"], "nodeName": "node-1",
                       "conditions": {"ready": true}}],
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
    }));
    let agent = Agent::start(&tenant, &lb);
    let mirrored = teapot_api::hostname::mirrored_service_name(NS, "db");
    let slice = eventually(
        "the LB EndpointSlice of the L4 copy",
        RELOAD_TIMEOUT,
        || async {
            lb.get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &mirrored)
                .ok_or("not yet".to_string())
        },
    )
    .await;
    assert_eq!(slice["endpoints"][0]["addresses"][0], ip.to_string());
    assert_eq!(slice["ports"][0]["port"], 31432);
    let copy = lb.get("v1", "Service", LB_NS, &mirrored).unwrap();
    assert_eq!(copy["spec"]["type"], "LoadBalancer");
    assert!(copy["spec"].get("selector").is_none());

    // The fleet allocates an address and reports a port problem.
    let mut with_status = copy.clone();
    with_status["status"] = json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.7", "ports": [
        {"port": 5432, "protocol": "TCP", "error": "teapot.dev/AddressTaken"}]}]}});
    lb.apply(with_status);
    let status = eventually(
        "EXTERNAL-IP on the tenant Service",
        RELOAD_TIMEOUT,
        || async {
            let s = tenant.get("v1", "Service", NS, "db").unwrap();
            s["status"]["loadBalancer"]["ingress"][0]["ip"]
                .as_str()
                .map(str::to_string)
                .ok_or(s["status"].clone())
        },
    )
    .await;
    assert_eq!(status, "203.0.113.7");
    eventually("the Programmed condition", RELOAD_TIMEOUT, || async {
        let s = tenant.get("v1", "Service", NS, "db").unwrap();
        let c: Value = serde_json::from_str(
            s["metadata"]["annotations"][CONDITIONS_ANNOTATION]
                .as_str()
                .unwrap_or("[]"),
        )
        .unwrap();
        (c[1]["reason"] == "AddressTaken").then_some(()).ok_or(c)
    })
    .await;

    assert!(tenant.delete("v1", "Service", NS, "db"));
    eventually("the L4 copies removed", RELOAD_TIMEOUT, || async {
        let left = lb.get("v1", "Service", LB_NS, &mirrored).is_some()
            || lb
                .get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &mirrored)
                .is_some()
            || tenant.get("v1", "Service", NS, "db").is_some();
        (!left).then_some(()).ok_or("still there")
    })
    .await;
    agent.stop().await;
    let _ = webhook_stop.send(true);
}

/// The same chain on two real clusters: `TENANT_KUBECONFIG` (where the
/// agent watches) and `LB_KUBECONFIG` (with teapot's webhook and proxy
/// installed, Tenant `acme` and namespace `tenant-acme`). Applies a
/// Deployment-less Service/Ingress pair in the tenant namespace `shop`
/// and checks that the LB copy appears and its status comes back. See
/// docs/agent.md for the kind/k3d recipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn real_clusters_mirror_and_copy_status_back() {
    use k8s_openapi::api::networking::v1::Ingress;
    use kube::api::{Api, DeleteParams, Patch, PatchParams};
    let connect = |var: &'static str| async move {
        let path = std::env::var(var).unwrap_or_else(|_| panic!("{var} must be set"));
        let file = kube::config::Kubeconfig::read_from(&path).unwrap();
        let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    };
    let tenant = connect("TENANT_KUBECONFIG").await;
    let lb = connect("LB_KUBECONFIG").await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(teapot_controller::run(
        AgentConfig::new(tenant.clone(), lb.clone(), LB_NS),
        Metrics::new().unwrap(),
        Arc::new(teapot_controller::Health::default()),
        stopped,
    ));
    let pp = PatchParams::apply("teapot-e2e").force();
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(tenant.clone(), NS);
    services
        .patch(
            "web",
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": NS},
                "spec": {"type": "NodePort", "selector": {"app": "web"},
                         "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
            })),
        )
        .await
        .unwrap();
    let ingresses: Api<Ingress> = Api::namespaced(tenant.clone(), NS);
    ingresses
        .patch("web", &pp, &Patch::Apply(tenant_ingress("web", HOST)))
        .await
        .unwrap();
    let lb_ingresses: Api<Ingress> = Api::namespaced(lb.clone(), LB_NS);
    eventually("the LB copy", RELOAD_TIMEOUT, || async {
        lb_ingresses
            .get_opt("web.shop")
            .await
            .map_err(|e| e.to_string())?
            .ok_or("not yet".to_string())
    })
    .await;
    eventually(
        "the status on the tenant Ingress",
        RELOAD_TIMEOUT,
        || async {
            let i = ingresses.get("web").await.map_err(|e| e.to_string())?;
            i.status
                .and_then(|s| s.load_balancer)
                .and_then(|l| l.ingress)
                .filter(|l| !l.is_empty())
                .ok_or("no status yet".to_string())
        },
    )
    .await;
    ingresses
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the LB copy removed", RELOAD_TIMEOUT, || async {
        match lb_ingresses.get_opt("web.shop").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let _ = stop.send(true);
    let _ = agent.await;
}
