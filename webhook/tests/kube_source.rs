//! The webhook in kube mode against the in-process API double
//! ([`teapot_testkit::apiserver`]): it learns Tenants and the objects that
//! hold hosts from watches, refuses everything until every watch has
//! listed, and follows deletions.
//!
//! Run: `cargo test -p teapot-webhook --test kube_source`. The same flow
//! against a real cluster is `real_cluster_denies_a_held_host`, ignored
//! by default (see docs/kube.md).

mod common;

use std::time::{Duration, Instant};

use common::{SNI, Webhook, admission_review, cases, policy};
use serde_json::{Value, json};
use teapot_source::kube::KubeConfig;
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::certs::TestCa;
use teapot_webhook::{WebhookConfig, corpus_dir};
use tokio::net::TcpListener;

/// Generous: a loaded 2-core machine running debug builds.
const WAIT: Duration = Duration::from_secs(30);

impl Webhook {
    /// Starts the webhook on `kube`; does not wait for readiness.
    async fn start(kube: KubeConfig) -> Webhook {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("teapot webhook kube test CA");
        let pem = ca.issue(&[SNI]);
        std::fs::write(dir.path().join("tls.crt"), &pem.cert_pem).unwrap();
        std::fs::write(dir.path().join("tls.key"), &pem.key_pem).unwrap();
        let mut config = WebhookConfig::new(
            dir.path().join("tls.crt"),
            dir.path().join("tls.key"),
            Default::default(),
            policy(),
        );
        config.kube = Some(kube);
        config.grace_period = Duration::from_secs(2);
        Webhook::spawn(config, ca, dir, WAIT, WAIT).await
    }

    async fn readyz(&self) -> u16 {
        self.get("/readyz").await.status
    }
}

/// Polls `cond` until it holds; panics after [`WAIT`].
async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    while !cond().await {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every document of the corpus state files, as JSON.
fn corpus_state() -> Vec<Value> {
    let mut out = Vec::new();
    for file in ["tenants.yaml", "held.yaml"] {
        let text = std::fs::read_to_string(corpus_dir().join("state").join(file)).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: serde_yaml::Value = serde::Deserialize::deserialize(doc).unwrap();
            if !v.is_null() {
                out.push(serde_json::to_value(v).unwrap());
            }
        }
    }
    out
}

fn operator_host_claim() -> Vec<u8> {
    let case = cases("deny")
        .into_iter()
        .find(|c| c.name() == "host-operator-held.yaml")
        .expect("corpus case");
    case.review_body("kube-1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_host_is_refused_until_its_holder_is_deleted() {
    let api = ApiServer::start().await;
    for object in corpus_state() {
        api.apply(object);
    }
    let hook = Webhook::start(KubeConfig::new(api.client())).await;
    wait_until("webhook ready", || async { hook.readyz().await == 200 }).await;

    // acme claims a host the operator's Ingress serves. (A custom domain
    // another tenant names blocks nobody: DNS proof decides those.)
    let r = hook.review(operator_host_claim()).await;
    assert_eq!(r["allowed"], false, "{r}");
    let message = r["status"]["message"].as_str().unwrap_or("");
    assert!(message.contains("spec.rules[0].host"), "{message}");
    // The policy names the holder as a tenant sees it, never by namespace.
    assert!(message.contains("the operator"), "{message}");
    assert!(!message.contains("monitoring"), "{message}");

    assert!(api.delete("networking.k8s.io/v1", "Ingress", "monitoring", "ops"));
    wait_until("the claim is allowed once the holder is gone", || async {
        hook.review(operator_host_claim()).await["allowed"] == true
    })
    .await;

    // The webhook only reads: list and watch, Secrets by type only (the
    // certificates, and the Opaque ones of which CA Secrets are kept).
    let requests = api.requests();
    assert!(requests.iter().all(|r| r.method == http::Method::GET));
    assert!(
        requests
            .iter()
            .filter(|r| r.path.ends_with("/secrets"))
            .all(|r| matches!(
                r.param("fieldSelector").as_deref(),
                Some("type=kubernetes.io/tls" | "type=Opaque")
            ))
    );
    hook.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_object_from_the_api_is_skipped_alone() {
    let api = ApiServer::start().await;
    for object in corpus_state() {
        api.apply(object);
    }
    // A Tenant no validation would pass; the others stay in force.
    api.apply(json!({
        "apiVersion": "teapot.dev/v1alpha1", "kind": "Tenant",
        "metadata": {"name": "broken"},
        "spec": {"cluster": "Not A Label"},
    }));
    let hook = Webhook::start(KubeConfig::new(api.client())).await;
    wait_until("webhook ready", || async { hook.readyz().await == 200 }).await;
    let r = hook.review(operator_host_claim()).await;
    assert_eq!(r["allowed"], false, "{r}");
    hook.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_allowed_before_the_watches_have_listed() {
    // An API server that never answers: the watches never list.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url: http::Uri = format!("http://{}", dead.local_addr().unwrap())
        .parse()
        .unwrap();
    drop(dead);
    let client = kube::Client::try_from(kube::Config::new(url)).unwrap();
    let hook = Webhook::start(KubeConfig::new(client)).await;
    // /healthz answers once the server is up; /readyz stays 503.
    wait_until("webhook serving", || async {
        hook.get("/healthz").await.status == 200
    })
    .await;
    assert_eq!(hook.readyz().await, 503);
    // Allowed in an operator namespace once the state is known.
    let allowed_anywhere = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"ports": [{"port": 80}]},
    });
    let r = hook
        .review(admission_review(
            "kube-2",
            &allowed_anywhere,
            "CREATE",
            None,
        ))
        .await;
    assert_eq!(r["allowed"], false, "{r}");
    hook.stop().await;
}

/// The first test against a real cluster: `KUBECONFIG` must point at a
/// cluster with the Tenant CRD installed and the corpus state applied
/// (`kubectl apply -f api/crd/tenant.yaml -f webhook/tests/corpus/state/`,
/// see docs/kube.md for kind/k3d).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn real_cluster_denies_a_held_host() {
    let kube = KubeConfig::connect(None, Vec::new())
        .await
        .expect("KUBECONFIG points at a cluster");
    let hook = Webhook::start(kube).await;
    wait_until("webhook ready", || async { hook.readyz().await == 200 }).await;
    let r = hook.review(operator_host_claim()).await;
    assert_eq!(r["allowed"], false, "{r}");
    hook.stop().await;
}
