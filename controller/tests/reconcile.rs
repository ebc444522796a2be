//! Reconciler tests in the ApiServerVerifier style: one reconcile at a
//! time against two API doubles (tenant cluster, LB cluster), asserting
//! the exact requests it made. The doubles ([`teapot_testkit::apiserver`])
//! record every request, which is what controller-rs's `tower_test` mock
//! gives, with real watch/SSA semantics behind it.
//!
//! Run: `cargo test -p teapot-controller --test reconcile`.

use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use teapot_api::hostname::mirrored_service_name;
use teapot_controller::ingress::{CONDITIONS_ANNOTATION, FINALIZER, reconcile};
use teapot_controller::{AgentConfig, Context, Metrics, gc};
use teapot_testkit::apiserver::{ApiServer, Refusal};

const NS: &str = "shop";
const LB_NS: &str = "tenant-acme";
const ING: &str = "/apis/networking.k8s.io/v1/namespaces/shop/ingresses/web";
const LB_ING: &str = "/apis/networking.k8s.io/v1/namespaces/tenant-acme/ingresses/web.shop";

struct Fixture {
    tenant: ApiServer,
    lb: ApiServer,
    ctx: Arc<Context>,
}

impl Fixture {
    async fn new() -> Fixture {
        let tenant = ApiServer::start().await;
        let lb = ApiServer::start().await;
        let config = AgentConfig::new(tenant.client(), lb.client(), LB_NS);
        let ctx = Arc::new(Context::new(config, Metrics::new().unwrap()));
        tenant.apply(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"type": "NodePort", "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080, "protocol": "TCP"}]},
        }));
        tenant.apply(ingress("/"));
        Fixture { tenant, lb, ctx }
    }

    fn ingress(&self) -> Arc<Ingress> {
        let v = self
            .tenant
            .get("networking.k8s.io/v1", "Ingress", NS, "web")
            .expect("the tenant Ingress");
        Arc::new(serde_json::from_value(v).unwrap())
    }

    /// Reconciles the current tenant Ingress; returns the requests each
    /// double saw meanwhile, as "METHOD path".
    async fn reconcile(&self) -> (Action, Vec<String>, Vec<String>) {
        let (t0, l0) = (self.tenant.requests().len(), self.lb.requests().len());
        let action = reconcile(self.ingress(), self.ctx.clone())
            .await
            .expect("reconcile");
        (action, requests(&self.tenant, t0), requests(&self.lb, l0))
    }
}

fn ingress(path: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "web", "namespace": NS,
                     "annotations": {"teapot.dev/ssl-redirect": "true",
                                     "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": {"ingressClassName": "teapot", "rules": [{"http": {"paths": [
            {"path": path, "pathType": "Prefix",
             "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]}}]},
    })
}

fn requests(api: &ApiServer, since: usize) -> Vec<String> {
    api.requests()[since..]
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

fn svc_path() -> String {
    format!(
        "/api/v1/namespaces/tenant-acme/services/{}",
        mirrored_service_name(NS, "web")
    )
}

fn conditions(f: &Fixture) -> Value {
    let ing = f.ingress();
    serde_json::from_str(&ing.metadata.annotations.as_ref().unwrap()[CONDITIONS_ANNOTATION])
        .unwrap()
}

const EVENTS: &str = "POST /apis/events.k8s.io/v1/namespaces/shop/events";

#[tokio::test]
async fn create_adds_the_finalizer_then_applies_service_and_ingress() {
    let f = Fixture::new().await;
    let (_, tenant, lb) = f.reconcile().await;
    assert_eq!(tenant, [format!("PATCH {ING}")]);
    assert!(lb.is_empty(), "{lb:?}");
    assert_eq!(
        f.ingress().metadata.finalizers.clone().unwrap(),
        [FINALIZER]
    );

    let (action, tenant, lb) = f.reconcile().await;
    assert_eq!(action, Action::requeue(f.ctx.config.resync));
    assert_eq!(
        lb,
        [
            format!("PATCH {}", svc_path()),
            format!("PATCH {LB_ING}"),
            format!("GET {LB_ING}"),
        ]
    );
    assert_eq!(
        tenant,
        [
            "GET /api/v1/namespaces/shop/services/web".to_string(),
            format!("PATCH {ING}"),
            EVENTS.into(),
        ]
    );
    // Server-side apply, one field manager, forced.
    for r in f.lb.requests().iter().filter(|r| r.method == "PATCH") {
        assert_eq!(r.param("fieldManager").as_deref(), Some("teapot-agent"));
        assert_eq!(r.param("force").as_deref(), Some("true"));
        assert_eq!(
            r.content_type.as_deref(),
            Some("application/apply-patch+yaml")
        );
    }
    let copy =
        f.lb.get("networking.k8s.io/v1", "Ingress", LB_NS, "web.shop")
            .unwrap();
    assert_eq!(
        copy["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"],
        mirrored_service_name(NS, "web")
    );
    assert_eq!(copy["spec"]["ingressClassName"], "teapot");
    // Only teapot.dev/ annotations travel, plus the source UID.
    assert_eq!(
        copy["metadata"]["annotations"],
        json!({"teapot.dev/ssl-redirect": "true",
               "teapot.dev/source-uid": f.ingress().metadata.uid.clone().unwrap()})
    );
    assert_eq!(
        copy["metadata"]["labels"]["teapot.dev/source-namespace"],
        NS
    );
    assert_eq!(copy["metadata"]["labels"]["teapot.dev/source-name"], "web");
    let svc =
        f.lb.get("v1", "Service", LB_NS, &mirrored_service_name(NS, "web"))
            .unwrap();
    assert!(svc["spec"].get("selector").is_none());
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "http", "port": 80, "protocol": "TCP"}])
    );
    let tenant_svc = f.tenant.get("v1", "Service", NS, "web").unwrap();
    assert_eq!(
        svc["metadata"]["annotations"]["teapot.dev/source-uid"],
        tenant_svc["metadata"]["uid"]
    );
    assert_eq!(conditions(&f)[0]["status"], "True");

    // Nothing changed: reads only.
    let (_, tenant, lb) = f.reconcile().await;
    assert_eq!(tenant, ["GET /api/v1/namespaces/shop/services/web"]);
    assert_eq!(lb, [format!("GET {LB_ING}")]);
}

#[tokio::test]
async fn update_rewrites_only_what_changed() {
    let f = Fixture::new().await;
    f.reconcile().await;
    f.reconcile().await;
    // As `kubectl apply` would: the agent's finalizer and annotation stay.
    let mut changed = f
        .tenant
        .get("networking.k8s.io/v1", "Ingress", NS, "web")
        .unwrap();
    changed["spec"]["rules"][0]["http"]["paths"][0]["path"] = json!("/v2");
    f.tenant.apply(changed);
    let (_, tenant, lb) = f.reconcile().await;
    assert_eq!(lb, [format!("PATCH {LB_ING}"), format!("GET {LB_ING}")]);
    assert_eq!(tenant, ["GET /api/v1/namespaces/shop/services/web"]);
    let copy =
        f.lb.get("networking.k8s.io/v1", "Ingress", LB_NS, "web.shop")
            .unwrap();
    assert_eq!(copy["spec"]["rules"][0]["http"]["paths"][0]["path"], "/v2");
}

#[tokio::test]
async fn status_is_copied_back_once() {
    let f = Fixture::new().await;
    f.reconcile().await;
    f.reconcile().await;
    let mut copy =
        f.lb.get("networking.k8s.io/v1", "Ingress", LB_NS, "web.shop")
            .unwrap();
    let lb_status =
        json!({"loadBalancer": {"ingress": [{"hostname": "web-shop.acme.lb.example.net"}]}});
    copy["status"] = lb_status.clone();
    f.lb.apply(copy);
    let (_, tenant, _) = f.reconcile().await;
    assert_eq!(
        tenant,
        [
            "GET /api/v1/namespaces/shop/services/web".to_string(),
            format!("PATCH {ING}/status"),
            EVENTS.into(),
        ]
    );
    let status_write = f
        .tenant
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/status"))
        .unwrap();
    assert_eq!(
        status_write.param("fieldManager").as_deref(),
        Some("teapot-agent")
    );
    let t = f
        .tenant
        .get("networking.k8s.io/v1", "Ingress", NS, "web")
        .unwrap();
    assert_eq!(t["status"], lb_status);
    // Already there: not written again.
    let (_, tenant, _) = f.reconcile().await;
    assert_eq!(tenant, ["GET /api/v1/namespaces/shop/services/web"]);
}

#[tokio::test]
async fn a_webhook_refusal_becomes_a_condition_and_an_event() {
    let f = Fixture::new().await;
    f.lb.set_admission(|r| {
        if r.resource.plural == "ingresses" {
            Err(Refusal::forbidden(
                "spec.rules[0].host: \"evil.example.com\" is not under your domains",
            ))
        } else {
            Ok(())
        }
    });
    f.reconcile().await;
    let (action, tenant, lb) = f.reconcile().await;
    // Requeued for the resync: a refusal may lift when the LB state changes.
    assert_eq!(action, Action::requeue(f.ctx.config.resync));
    assert_eq!(
        lb,
        [
            format!("PATCH {}", svc_path()),
            format!("PATCH {LB_ING}"),
            format!("GET {LB_ING}"),
        ]
    );
    assert_eq!(
        tenant,
        [
            "GET /api/v1/namespaces/shop/services/web".to_string(),
            format!("PATCH {ING}"),
            EVENTS.into(),
        ]
    );
    let c = conditions(&f);
    assert_eq!(c[0]["type"], "Accepted");
    assert_eq!(c[0]["status"], "False");
    assert_eq!(c[0]["reason"], "Refused");
    let message = c[0]["message"].as_str().unwrap();
    assert!(
        message.contains("evil.example.com\" is not under your domains"),
        "{message}"
    );
    let event = f
        .tenant
        .requests()
        .into_iter()
        .rfind(|r| r.path.ends_with("/events"))
        .unwrap()
        .body
        .unwrap();
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "Refused");
    assert!(event["note"].as_str().unwrap().contains("evil.example.com"));
    // Refused again, nothing new to say: no tenant write.
    let (_, tenant, _) = f.reconcile().await;
    assert_eq!(tenant, ["GET /api/v1/namespaces/shop/services/web"]);
}

#[tokio::test]
async fn delete_removes_the_copies_then_the_finalizer() {
    let f = Fixture::new().await;
    f.reconcile().await;
    f.reconcile().await;
    assert!(
        f.tenant
            .delete("networking.k8s.io/v1", "Ingress", NS, "web")
    );
    let (_, tenant, lb) = f.reconcile().await;
    assert_eq!(
        lb,
        [
            format!("DELETE {LB_ING}"),
            "GET /apis/networking.k8s.io/v1/namespaces/tenant-acme/ingresses".to_string(),
            "GET /api/v1/namespaces/tenant-acme/services".to_string(),
            "GET /api/v1/namespaces/tenant-acme/secrets".to_string(),
            "GET /apis/discovery.k8s.io/v1/namespaces/tenant-acme/endpointslices".to_string(),
            format!("DELETE {}", svc_path()),
        ]
    );
    assert_eq!(
        tenant,
        [
            "GET /apis/networking.k8s.io/v1/ingresses".to_string(),
            format!("PATCH {ING}"),
        ]
    );
    assert!(
        f.tenant
            .get("networking.k8s.io/v1", "Ingress", NS, "web")
            .is_none()
    );
    assert!(
        f.lb.get("networking.k8s.io/v1", "Ingress", LB_NS, "web.shop")
            .is_none()
    );
}

#[tokio::test]
async fn gc_deletes_copies_without_a_source_and_nothing_else() {
    let f = Fixture::new().await;
    f.reconcile().await;
    f.reconcile().await;
    let labels = json!({"app.kubernetes.io/managed-by": "teapot-agent",
                        "teapot.dev/source-namespace": "gone", "teapot.dev/source-name": "old"});
    // Left behind while the agent was down.
    f.lb.apply(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "old.gone", "namespace": LB_NS, "labels": labels}, "spec": {}}),
    );
    f.lb.apply(
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "gone-cert-12345", "namespace": LB_NS, "labels": labels}}),
    );
    f.lb.apply(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "addressType": "IPv4",
        "metadata": {"name": "gone-old-12345", "namespace": LB_NS,
                     "labels": {"endpointslice.kubernetes.io/managed-by": "sync.teapot.dev",
                                "kubernetes.io/service-name": "gone-old-12345"}}}),
    );
    // Not the agent's: never touched.
    f.lb.apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "operator", "namespace": LB_NS}, "spec": {}}));
    let l0 = f.lb.requests().len();
    let deleted = gc::collect(&f.ctx).await.unwrap();
    assert_eq!(deleted, 3);
    let deletes: Vec<String> = requests(&f.lb, l0)
        .into_iter()
        .filter(|r| r.starts_with("DELETE"))
        .collect();
    assert_eq!(
        deletes,
        [
            "DELETE /apis/networking.k8s.io/v1/namespaces/tenant-acme/ingresses/old.gone",
            "DELETE /api/v1/namespaces/tenant-acme/secrets/gone-cert-12345",
            "DELETE /apis/discovery.k8s.io/v1/namespaces/tenant-acme/endpointslices/gone-old-12345",
        ]
    );
    // The label selectors keep foreign objects out of the lists.
    let lists: Vec<_> = f.lb.requests()[l0..]
        .iter()
        .filter(|r| r.method == "GET")
        .map(|r| r.param("labelSelector").unwrap_or_default())
        .collect();
    assert!(lists.iter().all(|s| !s.is_empty()), "{lists:?}");
    assert!(f.lb.get("v1", "Service", LB_NS, "operator").is_some());
    assert!(
        f.lb.get("networking.k8s.io/v1", "Ingress", LB_NS, "web.shop")
            .is_some()
    );
}

#[tokio::test]
async fn an_ingress_of_another_class_is_left_alone() {
    let f = Fixture::new().await;
    let mut other = ingress("/");
    other["spec"]["ingressClassName"] = json!("nginx");
    f.tenant.apply(other);
    let (action, tenant, lb) = f.reconcile().await;
    assert_eq!(action, Action::await_change());
    assert!(tenant.is_empty() && lb.is_empty(), "{tenant:?} {lb:?}");
}
