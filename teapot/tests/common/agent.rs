//! The agent's chain for the end-to-end tests: an LB API double holding
//! Tenant `acme` with the real webhook's rules as its admission hook, a
//! tenant API double with one node, `teapot agent` in-process between the
//! two, and an echo backend on an address of this machine.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use teapot_controller::{AgentConfig, Metrics};
use teapot_source::kube::{KubeConfig, KubeSource};
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::echo::EchoIdentity;
use teapot_webhook::source::StateHandle;
use teapot_webhook::{PolicyConfig, Validator};

use super::RELOAD_TIMEOUT;

/// The tenant's namespace.
pub const NS: &str = "shop";
/// Tenant `acme`'s namespace in the LB cluster.
pub const LB_NS: &str = "tenant-acme";
/// The operator's domain: tenants get `<tenant>.lb.example.net`.
pub const DOMAIN: &str = "example.net";

/// The LB cluster: Tenant `acme` whose nodes are in `node_cidrs`, the
/// webhook's rules as admission for the `registered` resources. The
/// webhook's watch stops with the sender.
pub async fn lb_cluster(
    node_cidrs: &[&str],
    registered: &'static [&'static str],
) -> (ApiServer, tokio::sync::watch::Sender<bool>) {
    let lb = ApiServer::start().await;
    lb.apply(json!({
        "apiVersion": "teapot.dev/v1alpha1", "kind": "Tenant",
        "metadata": {"name": "acme"},
        "spec": {"cluster": "acme", "nodeCIDRs": node_cidrs},
    }));
    let state: StateHandle = Default::default();
    let (webhook_stop, webhook_stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(teapot_webhook::source::watch_kube(
        KubeSource::start(&KubeConfig::new(lb.client())),
        state.clone(),
        teapot_webhook::metrics::Metrics::new().unwrap(),
        webhook_stopped,
    ));
    let policy = PolicyConfig::new(DOMAIN, Vec::new()).unwrap();
    lb.set_admission(super::webhook_admission(
        state,
        Validator::new(policy),
        registered,
    ));
    (lb, webhook_stop)
}

/// A tenant cluster whose one node, `node-1`, has the InternalIP `ip`.
pub async fn tenant_cluster(ip: &str) -> ApiServer {
    let tenant = ApiServer::start().await;
    tenant.apply(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}]},
    }));
    tenant
}

/// The tenant's NodePort Service `web` (port `http` 80 to 8080) on
/// `node_port`.
pub fn web_service(node_port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"type": "NodePort", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080,
                            "nodePort": node_port, "protocol": "TCP"}]},
    })
}

/// The EndpointSlice of `web`: one pod on `node-1`, `ready` or not.
pub fn web_slice(ready: bool) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-x7k2p", "namespace": NS,
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.5"], "nodeName": "node-1",
                       "conditions": {"ready": ready}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    })
}

/// The tenant's Ingress `name` of class `teapot` routing `host` (all
/// paths) to `web`'s port `http`.
pub fn tenant_ingress(name: &str, host: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"ingressClassName": "teapot", "rules": [{"host": host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]}}]},
    })
}

/// An echo backend on `ip` claiming to be pod `pod` of the tenant's
/// Service `web`, stopped when the returned sender drops.
pub async fn echo_on(ip: IpAddr, pod: &str) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(teapot_testkit::echo::run(
        listener,
        EchoIdentity::new(NS, "web", "web", pod),
        async move {
            let _ = stopped.await;
        },
    ));
    (addr, stop)
}

/// `teapot agent` between the two clusters, in-process, without leader
/// election, writing slices at most every 50 ms.
pub struct Agent {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), teapot_controller::Error>>,
}

impl Agent {
    pub fn start(tenant: &ApiServer, lb: &ApiServer) -> Agent {
        let mut config = AgentConfig::new(tenant.client(), lb.client(), LB_NS);
        config.min_write_interval = Duration::from_millis(50);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(teapot_controller::run(
            config,
            Metrics::new().unwrap(),
            Arc::new(teapot_controller::Health::default()),
            stopped,
        ));
        Agent { stop, task }
    }

    /// Tells the agent to stop; it must still run, then end without an
    /// error, in time.
    pub async fn stop(self) {
        if self.stop.send(true).is_err() {
            panic!(
                "the agent ended before it was told to: {:?}",
                self.task.await
            );
        }
        tokio::time::timeout(RELOAD_TIMEOUT, self.task)
            .await
            .expect("the agent stops")
            .unwrap()
            .unwrap();
    }
}
