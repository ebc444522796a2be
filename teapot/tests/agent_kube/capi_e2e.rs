//! End-to-end test of `teapot capi` (docs/capi.md): the API
//! double holds the Cluster API objects (as JSON: the double serves any
//! resource without a CRD) and is both management and LB cluster; the real
//! `teapot proxy --kube` binary serves L4 from pool `127.0.0.1`; the capi
//! controller runs in-process through `teapot_capi::run`, with a Lease.
//!
//! The control-plane Machines are stand-in kube-apiservers: TLS servers
//! (certificates from a test CA, valid for the endpoint address) on
//! 127.0.0.2, .3, .4 and .5, one port for all (a Service port maps to one
//! EndpointSlice port), answering with their Machine's name. The client
//! verifies the chain through the fleet, as kubectl would.
//!
//! Nothing here asserts on time; the durations from a Machine starting to
//! delete to its endpoint leaving the slice and the proxy's table are
//! printed (`--nocapture`) for docs/capi.md.
//!
//! Run: `cargo test -p teapot --test agent_kube capi_e2e:: -- --nocapture`.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use teapot_api::lease::LeaseOptions;
use teapot_capi::endpoint::ClusterKey;
use teapot_capi::objects::CapiVersion;
use teapot_capi::reconcile::CONDITION;
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::certs::TestCa;
use teapot_testkit::client::{Request, Transport};
use teapot_testkit::l4::free_port;
use teapot_testkit::process::ProxyProcess;
use tokio::net::TcpListener;

const NS: &str = "clusters";
const LB_NS: &str = "capi-lb";
const CAPI: &str = "cluster.x-k8s.io/v1beta2";
const ENDPOINT: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A stand-in kube-apiserver on one Machine's address.
struct ApiServerStandIn {
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiServerStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ApiServerStandIn {
    fn start(listener: TcpListener, machine: &str, ca: &TestCa) -> ApiServerStandIn {
        let leaf = ca.issue(&["127.0.0.1", machine]);
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.cert_der.clone().into()],
            rustls::pki_types::PrivatePkcs8KeyDer::from(leaf.key_der.clone()).into(),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let requests = Arc::new(AtomicU64::new(0));
        let identity = teapot_echo::EchoIdentity::new("kube-system", "", "kube-apiserver", machine);
        let (shared, control) = teapot_echo::Shared::new(identity, requests.clone());
        let task = tokio::spawn(async move {
            let _control = control;
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, shared) = (acceptor.clone(), shared.clone());
                // The fleet's health checks connect and close: no handshake.
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        teapot_echo::serve_connection(tls, shared).await;
                    }
                });
            }
        });
        ApiServerStandIn { requests, task }
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Waits until the client loop has made `n` more successful requests.
async fn requests_after(ok: &AtomicUsize, n: usize) {
    let target = ok.load(Ordering::SeqCst) + n;
    eventually("client requests", RELOAD_TIMEOUT, || async {
        let now = ok.load(Ordering::SeqCst);
        if now >= target { Ok(()) } else { Err(now) }
    })
    .await
}

/// One port free on every address: kube-apiserver's port on the Machines.
async fn bind_everywhere(ips: &[Ipv4Addr]) -> (u16, Vec<TcpListener>) {
    for _ in 0..100 {
        let port = free_port(IpAddr::V4(ips[0])).expect("a free port");
        let mut listeners = Vec::new();
        for ip in ips {
            match TcpListener::bind((*ip, port)).await {
                Ok(l) => listeners.push(l),
                Err(_) => break,
            }
        }
        if listeners.len() == ips.len() {
            return (port, listeners);
        }
    }
    panic!("no port free on all of {ips:?}");
}

fn cluster(name: &str) -> Value {
    json!({"apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS,
            "annotations": {"capi.teapot.dev/control-plane-endpoint": "true"}},
        "spec": {"controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
            "kind": "KubeadmControlPlane", "name": name}}})
}

/// A control-plane Machine of `prod`, as Cluster API shows it once the
/// infrastructure provider reported its address (`node`: its Node
/// registered). Cluster API's finalizer keeps it while it drains.
fn machine(name: &str, ip: Ipv4Addr, node: bool) -> Value {
    let mut status = json!({"addresses": [{"type": "InternalIP", "address": ip.to_string()}]});
    if node {
        status["nodeRef"] = json!({"name": name});
    }
    json!({"apiVersion": CAPI, "kind": "Machine",
        "metadata": {"name": name, "namespace": NS,
            "labels": {"cluster.x-k8s.io/cluster-name": "prod",
                       "cluster.x-k8s.io/control-plane": ""},
            "finalizers": ["machine.cluster.x-k8s.io"]},
        "spec": {"clusterName": "prod"},
        "status": status})
}

/// Cluster API finishes deleting a Machine (drained, infrastructure gone).
fn machine_gone(api: &ApiServer, name: &str) {
    api.delete(CAPI, "Machine", NS, name);
    if let Some(mut m) = api.get(CAPI, "Machine", NS, name) {
        m["metadata"]["finalizers"] = json!([]);
        api.apply(m);
    }
    assert!(api.get(CAPI, "Machine", NS, name).is_none());
}

async fn proxy_status(proxy: &ProxyProcess) -> Value {
    let (code, body) = proxy.admin_get("/status").await.expect("/status answers");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("/status is JSON")
}

/// The endpoints the fleet's listener for `prod` sends to.
async fn listener_endpoints(proxy: &ProxyProcess, lb_name: &str) -> Option<Vec<String>> {
    let status = proxy_status(proxy).await;
    let service = status["l4"]["services"]
        .as_array()?
        .iter()
        .find(|s| s["namespace"] == LB_NS && s["name"] == lb_name)?
        .clone();
    let listener = service["listeners"].as_array()?.first()?.clone();
    if listener["state"] != "listening" {
        return None;
    }
    let mut endpoints: Vec<String> = listener["endpoints"]
        .as_array()?
        .iter()
        .filter_map(|e| e.as_str().map(str::to_string))
        .collect();
    endpoints.sort();
    Some(endpoints)
}

fn slice_addresses(api: &ApiServer, lb_name: &str) -> Vec<String> {
    api.get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, lb_name)
        .and_then(|s| {
            s["endpoints"].as_array().map(|es| {
                es.iter()
                    .filter_map(|e| e["addresses"][0].as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default()
}

fn condition(api: &ApiServer, name: &str) -> Value {
    api.get(CAPI, "Cluster", NS, name)
        .and_then(|c| {
            c["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == CONDITION)
                .cloned()
        })
        .unwrap_or(Value::Null)
}

/// One kubectl-like request through the fleet: TLS verified against the
/// test CA for the endpoint address; returns the Machine that answered.
async fn who_answers(endpoint: SocketAddr, ca: &TestCa) -> Result<String, String> {
    let transport = Transport::tls_verified("127.0.0.1", &[ca.cert_der()]);
    let response =
        teapot_testkit::client::send(endpoint, &transport, &Request::get("127.0.0.1", "/version"))
            .await
            .map_err(|e| e.to_string())?;
    if response.status != 200 {
        return Err(format!("{} {}", response.status, response.text()));
    }
    let body = response.json().map_err(|e| e.to_string())?;
    Ok(body["pod"].as_str().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_get_an_endpoint_before_machines_and_keep_it_through_a_rolling_replacement() {
    let ips = [2, 3, 4, 5].map(|last| Ipv4Addr::new(127, 0, 0, last));
    let (apiserver_port, mut listeners) = bind_everywhere(&ips).await;
    let endpoint_port = free_port(ENDPOINT).unwrap();
    let endpoint = SocketAddr::new(ENDPOINT, endpoint_port);
    let ca = TestCa::new("capi-e2e workload cluster CA");
    let api = ApiServer::start().await;
    let proxy = ProxyProcess::start_kube(
        &teapot_bin(),
        api.kubeconfig_path(),
        &["--l4-pool", "default=127.0.0.1"],
    )
    .await
    .expect("teapot proxy --kube starts");

    let mut config = teapot_capi::Config::new(api.client(), api.client(), LB_NS);
    config.version = CapiVersion::V1Beta2;
    config.endpoint_port = endpoint_port;
    config.apiserver_port = apiserver_port;
    config.instance = Some("capi-e2e".into());
    config.lease = Some(LeaseOptions {
        identity: "capi-e2e".into(),
        duration: Duration::from_secs(2),
        renew_every: Duration::from_millis(200),
        ..LeaseOptions::new(LB_NS, "teapot-capi")
    });
    let health = Arc::new(teapot_controller::Health::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let capi = tokio::spawn(teapot_capi::run(
        config,
        teapot_capi::Metrics::new().unwrap(),
        health.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    let lb_name = ClusterKey::new(NS, "prod").lb_name();

    // A new Cluster: an address and its controlPlaneEndpoint, no Machine.
    api.apply(cluster("prod"));
    let written = eventually("prod's controlPlaneEndpoint", RELOAD_TIMEOUT, || async {
        let c = api.get(CAPI, "Cluster", NS, "prod").unwrap_or_default();
        let e = c["spec"]["controlPlaneEndpoint"].clone();
        if e.is_null() { Err(c) } else { Ok(e) }
    })
    .await;
    assert_eq!(written, json!({"host": "127.0.0.1", "port": endpoint_port}));
    assert!(health.ready(), "leading and listed");
    let machines: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(api.client(), NS, &CapiVersion::V1Beta2.machine());
    assert!(
        machines
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let waiting = eventually("WaitingForMachines", RELOAD_TIMEOUT, || async {
        let c = condition(&api, "prod");
        if c["reason"] == "WaitingForMachines" {
            Ok(c)
        } else {
            Err(c)
        }
    })
    .await;
    assert_eq!(waiting["status"], "False");

    // Three control-plane Machines, the first before any Node registered.
    let mut standins = std::collections::HashMap::new();
    for (i, name) in ["cp-a", "cp-b", "cp-c"].into_iter().enumerate() {
        standins.insert(
            name,
            ApiServerStandIn::start(listeners.remove(0), name, &ca),
        );
        api.apply(machine(name, ips[i], i > 0));
    }
    api.apply(machine("cp-a", ips[0], true));
    let expected: Vec<String> = ips[..3]
        .iter()
        .map(|ip| format!("{ip}:{apiserver_port}"))
        .collect();
    eventually("three endpoints in the fleet", RELOAD_TIMEOUT, || async {
        let e = listener_endpoints(&proxy, &lb_name).await;
        if e.as_ref() == Some(&expected) {
            Ok(())
        } else {
            Err(e)
        }
    })
    .await;
    // Round robin: a few dozen requests meet every Machine.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..60 {
        seen.insert(who_answers(endpoint, &ca).await.expect("through the fleet"));
    }
    assert_eq!(seen.len(), 3, "every Machine answers: {seen:?}");
    assert_eq!(condition(&api, "prod")["reason"], "Serving");

    // Rolling replacement of cp-a by cp-d, a client loop throughout.
    let running = Arc::new(AtomicBool::new(true));
    let ok = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let client = {
        let (running, ok, failures) = (running.clone(), ok.clone(), failures.clone());
        let ca_der = ca.cert_der().to_vec();
        tokio::spawn(async move {
            let transport = Transport::tls_verified("127.0.0.1", &[&ca_der]);
            while running.load(Ordering::SeqCst) {
                let r = teapot_testkit::client::send(
                    endpoint,
                    &transport,
                    &Request::get("127.0.0.1", "/version"),
                )
                .await;
                match r {
                    Ok(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::SeqCst);
                    }
                    other => failures.lock().unwrap().push(format!("{other:?}")),
                }
            }
        })
    };
    requests_after(&ok, 20).await;
    standins.insert(
        "cp-d",
        ApiServerStandIn::start(listeners.remove(0), "cp-d", &ca),
    );
    api.apply(machine("cp-d", ips[3], false));
    eventually("cp-d in the slice, not ready", RELOAD_TIMEOUT, || async {
        let s = slice_addresses(&api, &lb_name);
        if s.len() == 4 { Ok(()) } else { Err(s) }
    })
    .await;
    api.apply(machine("cp-d", ips[3], true));
    eventually("four endpoints in the fleet", RELOAD_TIMEOUT, || async {
        let e = listener_endpoints(&proxy, &lb_name)
            .await
            .unwrap_or_default();
        if e.len() == 4 { Ok(()) } else { Err(e) }
    })
    .await;
    requests_after(&ok, 20).await;

    // cp-a starts deleting: out of the slice, then out of the fleet.
    let old = format!("{}", ips[0]);
    let old_endpoint = format!("{}:{apiserver_port}", ips[0]);
    let started = Instant::now();
    assert!(api.delete(CAPI, "Machine", NS, "cp-a"));
    while slice_addresses(&api, &lb_name).contains(&old) {
        assert!(
            started.elapsed() < RELOAD_TIMEOUT,
            "cp-a never left the slice"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let to_slice = started.elapsed();
    while listener_endpoints(&proxy, &lb_name)
        .await
        .is_none_or(|e| e.contains(&old_endpoint))
    {
        assert!(
            started.elapsed() < RELOAD_TIMEOUT,
            "cp-a never left the fleet"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let to_fleet = started.elapsed();
    eprintln!(
        "MEASURED: Machine deletion -> endpoint out of the EndpointSlice: {to_slice:?}; out of the proxy's L4 table (/status): {to_fleet:?}"
    );
    // A request that was on its way when the table changed may still land.
    requests_after(&ok, 2).await;
    let at_removal = standins["cp-a"].requests();
    requests_after(&ok, 60).await;
    assert_eq!(
        standins["cp-a"].requests(),
        at_removal,
        "no new request reaches a deleting Machine"
    );
    machine_gone(&api, "cp-a");
    standins.remove("cp-a");
    requests_after(&ok, 20).await;
    running.store(false, Ordering::SeqCst);
    client.await.unwrap();
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "failed connections during the replacement: {failures:?}"
    );
    eprintln!(
        "rolling replacement: {} requests through the fleet, none failed",
        ok.load(Ordering::SeqCst)
    );
    for name in ["cp-b", "cp-c", "cp-d"] {
        assert!(standins[name].requests() > 0, "{name} served");
    }

    // A second Cluster wants the same port on the one pool address: refused
    // while prod holds it.
    api.apply(cluster("second"));
    let refused = eventually("second refused", RELOAD_TIMEOUT, || async {
        let c = condition(&api, "second");
        let message = c["message"].as_str().unwrap_or_default();
        if message.contains("PoolExhausted") {
            Ok(c)
        } else {
            Err(c)
        }
    })
    .await;
    assert_eq!(refused["reason"], "WaitingForAddress");

    // Deleting prod: the endpoint stays while its control plane goes, then
    // the Service goes and its address is free for second.
    assert!(api.delete(CAPI, "Cluster", NS, "prod"));
    for name in ["cp-b", "cp-c", "cp-d"] {
        machine_gone(&api, name);
    }
    eventually("prod gone, finalizer released", RELOAD_TIMEOUT, || async {
        match api.get(CAPI, "Cluster", NS, "prod") {
            None => Ok(()),
            Some(c) => Err(c["metadata"].clone()),
        }
    })
    .await;
    assert!(api.get("v1", "Service", LB_NS, &lb_name).is_none());
    assert!(
        api.get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &lb_name)
            .is_none()
    );
    let freed = eventually("second gets the freed address", RELOAD_TIMEOUT, || async {
        let c = api.get(CAPI, "Cluster", NS, "second").unwrap_or_default();
        let e = c["spec"]["controlPlaneEndpoint"].clone();
        if e.is_null() {
            Err(condition(&api, "second"))
        } else {
            Ok(e)
        }
    })
    .await;
    assert_eq!(freed, json!({"host": "127.0.0.1", "port": endpoint_port}));
    let status = proxy_status(&proxy).await;
    let names: Vec<&Value> = status["l4"]["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["name"])
        .collect();
    assert!(
        !names.contains(&&json!(lb_name)),
        "prod left the fleet: {names:?}"
    );

    let _ = stop.send(());
    capi.await.unwrap().expect("teapot capi stops cleanly");
    let lease = api
        .get("coordination.k8s.io/v1", "Lease", LB_NS, "teapot-capi")
        .expect("the lease exists");
    assert!(
        lease["spec"]
            .get("holderIdentity")
            .is_none_or(Value::is_null),
        "released at shutdown: {lease}"
    );
    drop(proxy);
}
