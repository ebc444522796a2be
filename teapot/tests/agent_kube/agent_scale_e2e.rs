//! The agent at scale, in-process between two API doubles: a Service with
//! more endpoints than one EndpointSlice holds is mirrored as several LB
//! slices (admitted by the webhook's rules) and shrinks back, also across
//! a restart; each tenant kind is watched once for the whole agent; a
//! Secret change reaches the LB cluster from the watch, without a GET.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use teapot_api::hostname::mirrored_service_name;
use teapot_controller::mirror::mirrored_secret_name;
use teapot_sync::MAX_ENDPOINTS_PER_SLICE;
use teapot_testkit::apiserver::ApiServer;

use crate::common::agent::{Agent, LB_NS, NS, lb_cluster, tenant_cluster, tenant_ingress};
use crate::common::{RELOAD_TIMEOUT, eventually};

const HOST: &str = "web.acme.lb.example.net";
const ADMITTED: &[&str] = &["ingresses", "services", "endpointslices", "secrets"];
const ES: &str = "discovery.k8s.io/v1";

/// `web` in `pod` mode: its pod IPs are the LB endpoints.
fn pod_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": NS,
                     "annotations": {"teapot.dev/endpoints": "pod"}},
        "spec": {"type": "ClusterIP", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
    })
}

/// Tenant slices of `web` holding `pods` ready pods (100 per slice, as the
/// EndpointSlice controller cuts them), and the names of the slices past
/// them up to `clear` (applied empty).
fn pod_slices(pods: usize, clear: usize) -> Vec<Value> {
    (0..pods.max(clear).div_ceil(100))
        .map(|s| {
            let endpoints: Vec<Value> = (s * 100..((s + 1) * 100).min(pods))
                .map(|p| {
                    json!({"addresses": [format!("10.244.{}.{}", p / 250, p % 250 + 1)],
                           "conditions": {"ready": true}})
                })
                .collect();
            json!({"apiVersion": ES, "kind": "EndpointSlice",
                   "metadata": {"name": format!("web-{s}"), "namespace": NS,
                                "labels": {"kubernetes.io/service-name": "web"}},
                   "addressType": "IPv4", "endpoints": endpoints,
                   "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
        })
        .collect()
}

/// The LB slices of `web` by name, with their endpoint counts.
fn lb_slices(lb: &ApiServer) -> BTreeMap<String, usize> {
    let first = mirrored_service_name(NS, "web");
    (1..=8)
        .map(|i| {
            if i == 1 {
                first.clone()
            } else {
                format!("{first}.{i}")
            }
        })
        .filter_map(|name| {
            let s = lb.get(ES, "EndpointSlice", LB_NS, &name)?;
            Some((name, s["endpoints"].as_array().map_or(0, Vec::len)))
        })
        .collect()
}

async fn slices_become(lb: &ApiServer, want: &[usize]) {
    let first = mirrored_service_name(NS, "web");
    let want: BTreeMap<String, usize> = want
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let name = if i == 0 {
                first.clone()
            } else {
                format!("{first}.{}", i + 1)
            };
            (name, *n)
        })
        .collect();
    eventually(&format!("LB slices {want:?}"), RELOAD_TIMEOUT, || async {
        let got = lb_slices(lb);
        if got == want { Ok(()) } else { Err(got) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_past_one_slice_is_split_and_shrinks_back_also_across_a_restart() {
    let (lb, webhook_stop) = lb_cluster(&["10.244.0.0/16"], ADMITTED).await;
    let tenant = tenant_cluster("10.244.200.1").await;
    tenant.apply(pod_service());
    tenant.apply(tenant_ingress("web", HOST));
    for s in pod_slices(2500, 0) {
        tenant.apply(s);
    }
    let agent = Agent::start(&tenant, &lb);
    assert_eq!(MAX_ENDPOINTS_PER_SLICE, 1000);
    // Admitted by the webhook's rules: each part holds at most 1,000.
    slices_become(&lb, &[1000, 1000, 500]).await;

    for s in pod_slices(1200, 2500) {
        tenant.apply(s);
    }
    slices_become(&lb, &[1000, 200]).await;

    // Shrunk while the agent was down: the part it no longer needs is
    // found on the LB side, not in what this process wrote.
    agent.stop().await;
    for s in pod_slices(10, 1200) {
        tenant.apply(s);
    }
    let agent = Agent::start(&tenant, &lb);
    slices_become(&lb, &[10]).await;
    agent.stop().await;
    let _ = webhook_stop.send(true);
}

/// Watch requests per path and selectors.
fn watches(api: &ApiServer) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in api.requests() {
        if r.param("watch").as_deref() != Some("true") {
            continue;
        }
        let key = format!(
            "{} labels={} fields={}",
            r.path,
            r.param("labelSelector").unwrap_or_default(),
            r.param("fieldSelector").unwrap_or_default()
        );
        *out.entry(key).or_insert(0) += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_is_watched_once_and_a_secret_change_travels_without_a_get() {
    let lb = ApiServer::start().await;
    let tenant = tenant_cluster("10.0.0.1").await;
    tenant.apply(pod_service());
    let tls = |crt: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
               "metadata": {"name": "web-tls", "namespace": NS},
               "data": {"tls.crt": crt, "tls.key": "a2V5"}})
    };
    tenant.apply(tls("Y3J0"));
    let mut ingress = tenant_ingress("web", HOST);
    ingress["spec"]["tls"] = json!([{"hosts": [HOST], "secretName": "web-tls"}]);
    tenant.apply(ingress);
    for s in pod_slices(3, 0) {
        tenant.apply(s);
    }
    let agent = Agent::start(&tenant, &lb);
    slices_become(&lb, &[3]).await;
    let copy = mirrored_secret_name(NS, "web-tls");
    eventually("the Secret's LB copy", RELOAD_TIMEOUT, || async {
        lb.get("v1", "Secret", LB_NS, &copy).ok_or("not yet")
    })
    .await;

    tenant.apply(tls("bmV3LWNydA=="));
    eventually(
        "the changed certificate on the LB side",
        RELOAD_TIMEOUT,
        || async {
            let s = lb.get("v1", "Secret", LB_NS, &copy).ok_or("gone")?;
            (s["data"]["tls.crt"] == "bmV3LWNydA==")
                .then_some(())
                .ok_or("old")
        },
    )
    .await;
    // A last change of an endpoint: everything the agent does after a
    // burst has happened once by the time it is mirrored.
    for s in pod_slices(4, 0) {
        tenant.apply(s);
    }
    slices_become(&lb, &[4]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let gets: Vec<String> = tenant
        .requests()
        .iter()
        .filter(|r| r.method == http::Method::GET && r.path.contains("/secrets/"))
        .map(|r| r.path.clone())
        .collect();
    assert!(gets.is_empty(), "Secrets come from the watch: {gets:?}");
    for (api, side) in [(&tenant, "tenant"), (&lb, "LB")] {
        let twice: Vec<(String, usize)> =
            watches(api).into_iter().filter(|(_, n)| *n > 1).collect();
        assert!(
            twice.is_empty(),
            "{side}: one watch per kind and selector for the whole agent: {twice:?}"
        );
    }
    let services = watches(&tenant)
        .get("/api/v1/services labels= fields=")
        .copied();
    assert_eq!(services, Some(1), "{:?}", watches(&tenant));
    agent.stop().await;
}
