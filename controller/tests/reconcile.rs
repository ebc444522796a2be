//! Reconciler tests in the ApiServerVerifier style: one reconcile at a
//! time against two API doubles (tenant cluster, LB cluster), asserting
//! the exact requests it made. The doubles ([`teapot_testkit::apiserver`])
//! record every request, which is what controller-rs's `tower_test` mock
//! gives, with real watch/SSA semantics behind it.
//!
//! Run: `cargo test -p teapot-controller --test reconcile`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use teapot_api::hostname::mirrored_service_name;
use teapot_controller::ingress::{CONDITIONS_ANNOTATION, FINALIZER, reconcile};
use teapot_controller::{AgentConfig, Context, Metrics, Watches, gc, service};
use teapot_sync::Listed;
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
        // The reconcilers read referenced objects from the agent's watches;
        // each reconcile below waits until they have caught up.
        let watches = Watches::start(&config, &mut Listed::default());
        let ctx = Arc::new(Context::new(config, Metrics::new().unwrap(), watches));
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
        assert!(
            self.ctx
                .watches
                .caught_up(&self.tenant.client())
                .await
                .unwrap()
        );
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
        // The watches' own (re)connections are not the reconcile's.
        .filter(|r| r.param("watch").is_none())
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
    assert_eq!(tenant, [format!("PATCH {ING}"), EVENTS.into(),]);
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
    // Only teapot.dev/ (and ingress-nginx) annotations travel, plus the
    // source UID.
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
    assert!(tenant.is_empty(), "{tenant:?}");
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
    assert!(tenant.is_empty(), "{tenant:?}");
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
    let lb_status =
        json!({"loadBalancer": {"ingress": [{"hostname": "web-shop.acme.lb.example.net"}]}});
    f.set_lb_ingress_status(lb_status.clone());
    let (_, tenant, _) = f.reconcile().await;
    assert_eq!(
        tenant,
        [
            format!("PATCH {ING}/status"),
            EVENTS.into(),
            // Programmed=True joins the conditions (no Event: the
            // AddressAssigned one said it).
            format!("PATCH {ING}"),
        ]
    );
    assert_eq!(conditions(&f)[1]["type"], "Programmed");
    assert_eq!(conditions(&f)[1]["status"], "True");
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
    assert!(tenant.is_empty(), "{tenant:?}");
}

#[tokio::test]
async fn a_webhook_refusal_becomes_a_condition_and_an_event() {
    let f = Fixture::new().await;
    f.refuse_on_lb(
        "ingresses",
        "spec.rules[0].host: \"evil.example.com\" is not under your domains",
    );
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
    assert_eq!(tenant, [format!("PATCH {ING}"), EVENTS.into(),]);
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
    assert!(tenant.is_empty(), "{tenant:?}");
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
            // The copies of custom-headers ConfigMaps are Ingresses' too.
            "GET /api/v1/namespaces/tenant-acme/configmaps".to_string(),
            format!("DELETE {}", svc_path()),
        ]
    );
    assert_eq!(
        tenant,
        [
            "GET /apis/networking.k8s.io/v1/ingresses".to_string(),
            "GET /api/v1/services".to_string(),
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
    // `teapot capi`'s control-plane endpoint in the same tenant namespace:
    // the same slice managed-by, but not the agent's to collect.
    f.lb.apply(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "addressType": "IPv4",
        "metadata": {"name": "capi-system-prod-4cddd", "namespace": LB_NS,
                     "labels": {"endpointslice.kubernetes.io/managed-by": "sync.teapot.dev",
                                "app.kubernetes.io/managed-by": "teapot-capi",
                                "teapot.dev/source-namespace": "capi-system",
                                "teapot.dev/source-name": "prod",
                                "kubernetes.io/service-name": "capi-system-prod-4cddd"}}}),
    );
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

#[tokio::test]
async fn a_port_error_on_the_lb_status_becomes_a_condition_and_an_event() {
    let f = Fixture::new().await;
    f.reconcile().await;
    f.reconcile().await;
    let lb_status = json!({"loadBalancer": {"ingress": [{"hostname": "web-shop.acme.lb.example.net",
        "ports": [{"port": 443, "protocol": "TCP", "error": "teapot.dev/CertificatePending"}]}]}});
    f.set_lb_ingress_status(lb_status.clone());
    let (_, tenant, _) = f.reconcile().await;
    assert_eq!(
        tenant,
        [
            format!("PATCH {ING}/status"),
            EVENTS.into(),
            format!("PATCH {ING}"),
            EVENTS.into(),
        ]
    );
    // The status itself is copied as it is, the error included.
    let t = f
        .tenant
        .get("networking.k8s.io/v1", "Ingress", NS, "web")
        .unwrap();
    assert_eq!(t["status"], lb_status);
    let c = conditions(&f);
    assert_eq!(c[0]["status"], "True", "the copy itself was accepted");
    assert_eq!(
        c[1],
        json!({"type": "Programmed", "status": "False", "reason": "CertificatePending",
               "message": "the LB cluster reports port 443/TCP: teapot.dev/CertificatePending"})
    );
    let event = last_event(&f.tenant);
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "CertificatePending");
    // Unchanged: nothing more to say.
    let (_, tenant, _) = f.reconcile().await;
    assert!(tenant.is_empty(), "{tenant:?}");
    // Cleared: a Normal Event says so.
    f.set_lb_ingress_status(
        json!({"loadBalancer": {"ingress": [{"hostname": "web-shop.acme.lb.example.net"}]}}),
    );
    f.reconcile().await;
    assert_eq!(conditions(&f)[1]["status"], "True");
    let event = last_event(&f.tenant);
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["reason"], "Programmed");
}

fn last_event(api: &ApiServer) -> Value {
    api.requests()
        .into_iter()
        .rfind(|r| r.path.ends_with("/events"))
        .and_then(|r| r.body)
        .expect("an Event")
}

// ---------------------------------------------------------------------------
// L4 Services

const SVC: &str = "/api/v1/namespaces/shop/services/dns";

fn l4_path() -> String {
    format!(
        "/api/v1/namespaces/tenant-acme/services/{}",
        mirrored_service_name(NS, "dns")
    )
}

fn l4_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "dns", "namespace": NS,
                     "annotations": {"teapot.dev/proxy-protocol": "v2",
                                     "teapot.dev/endpoints": "pod",
                                     "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "teapot.dev/lb",
                 "selector": {"app": "dns"}, "externalTrafficPolicy": "Local",
                 "ports": [{"name": "dns-udp", "port": 53, "targetPort": 5353, "nodePort": 30053, "protocol": "UDP"},
                           {"name": "dns-tcp", "port": 53, "targetPort": 5353, "nodePort": 30054, "protocol": "TCP"}]},
    })
}

impl Fixture {
    fn service(&self, name: &str) -> Arc<Service> {
        let v = self
            .tenant
            .get("v1", "Service", NS, name)
            .expect("the tenant Service");
        Arc::new(serde_json::from_value(v).unwrap())
    }

    async fn reconcile_service(&self, name: &str) -> (Action, Vec<String>, Vec<String>) {
        assert!(
            self.ctx
                .watches
                .caught_up(&self.tenant.client())
                .await
                .unwrap()
        );
        let (t0, l0) = (self.tenant.requests().len(), self.lb.requests().len());
        let action = service::reconcile(self.service(name), self.ctx.clone())
            .await
            .expect("reconcile");
        (action, requests(&self.tenant, t0), requests(&self.lb, l0))
    }

    /// The LB cluster's webhook refuses every write of `plural` with
    /// `message`.
    fn refuse_on_lb(&self, plural: &'static str, message: &'static str) {
        self.lb.set_admission(move |r| {
            if r.resource.plural == plural {
                Err(Refusal::forbidden(message))
            } else {
                Ok(())
            }
        });
    }

    /// What the proxy fleet would write on the LB copy of `shop/web`.
    fn set_lb_ingress_status(&self, status: Value) {
        let mut copy = self
            .lb
            .get("networking.k8s.io/v1", "Ingress", LB_NS, "web.shop")
            .unwrap();
        copy["status"] = status;
        self.lb.apply(copy);
    }

    fn set_lb_service_status(&self, status: Value) {
        let mut copy = self
            .lb
            .get("v1", "Service", LB_NS, &mirrored_service_name(NS, "dns"))
            .unwrap();
        copy["status"] = status;
        self.lb.apply(copy);
    }
}

#[tokio::test]
async fn an_l4_service_is_mirrored_as_a_selectorless_load_balancer() {
    let f = Fixture::new().await;
    f.tenant.apply(l4_service());
    let (action, tenant, lb) = f.reconcile_service("dns").await;
    assert_eq!(action, Action::await_change());
    assert_eq!(tenant, [format!("PATCH {SVC}")]);
    assert!(lb.is_empty(), "{lb:?}");
    assert_eq!(
        f.service("dns").metadata.finalizers.clone().unwrap(),
        [FINALIZER]
    );

    let (action, tenant, lb) = f.reconcile_service("dns").await;
    assert_eq!(action, Action::requeue(f.ctx.config.resync));
    assert_eq!(
        lb,
        [format!("PATCH {}", l4_path()), format!("GET {}", l4_path())]
    );
    assert_eq!(tenant, [format!("PATCH {SVC}"), EVENTS.into()]);
    let apply =
        f.lb.requests()
            .into_iter()
            .find(|r| r.method == "PATCH")
            .unwrap();
    assert_eq!(apply.param("fieldManager").as_deref(), Some("teapot-agent"));
    assert_eq!(apply.param("force").as_deref(), Some("true"));
    let copy =
        f.lb.get("v1", "Service", LB_NS, &mirrored_service_name(NS, "dns"))
            .unwrap();
    let uid = f.service("dns").metadata.uid.clone().unwrap();
    // What the webhook accepts in a tenant namespace: no selector, the
    // class, no node ports, no Local traffic policy; the agent's own
    // annotation stays in the tenant cluster.
    assert_eq!(
        copy["spec"],
        json!({"type": "LoadBalancer", "loadBalancerClass": "teapot.dev/lb",
               "allocateLoadBalancerNodePorts": false,
               "ports": [{"name": "dns-udp", "port": 53, "protocol": "UDP"},
                         {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]})
    );
    assert_eq!(
        copy["metadata"]["annotations"],
        json!({"teapot.dev/proxy-protocol": "v2", "teapot.dev/source-uid": uid})
    );
    assert_eq!(copy["metadata"]["labels"]["teapot.dev/source-name"], "dns");
    assert_eq!(
        copy["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "teapot-agent"
    );
    assert_eq!(
        conditions_of(&f.tenant.get("v1", "Service", NS, "dns").unwrap())[0]["reason"],
        "Mirrored"
    );

    // Nothing changed: one read.
    let (_, tenant, lb) = f.reconcile_service("dns").await;
    assert!(tenant.is_empty(), "{tenant:?}");
    assert_eq!(lb, [format!("GET {}", l4_path())]);
}

fn conditions_of(object: &Value) -> Value {
    serde_json::from_str(
        object["metadata"]["annotations"][CONDITIONS_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn the_l4_address_and_its_errors_come_back_to_the_tenant_service() {
    let f = Fixture::new().await;
    f.tenant.apply(l4_service());
    f.reconcile_service("dns").await;
    f.reconcile_service("dns").await;

    // The pool is full: no address, an error on every port.
    let exhausted = json!({"loadBalancer": {"ingress": [{"ip": "", "ports": [
        {"port": 53, "protocol": "UDP", "error": "teapot.dev/PoolExhausted"},
        {"port": 53, "protocol": "TCP", "error": "teapot.dev/PoolExhausted"}]}]}});
    f.set_lb_service_status(exhausted.clone());
    let (_, tenant, _) = f.reconcile_service("dns").await;
    assert_eq!(
        tenant,
        [
            format!("PATCH {SVC}/status"),
            format!("PATCH {SVC}"),
            EVENTS.into()
        ],
        "status, then the condition and its Warning (no AddressAssigned without an address)"
    );
    let t = f.tenant.get("v1", "Service", NS, "dns").unwrap();
    assert_eq!(t["status"], exhausted);
    assert_eq!(
        conditions_of(&t)[1],
        json!({"type": "Programmed", "status": "False", "reason": "PoolExhausted",
               "message": "the LB cluster reports port 53/UDP: teapot.dev/PoolExhausted, port 53/TCP: teapot.dev/PoolExhausted"})
    );
    let event = last_event(&f.tenant);
    assert_eq!(
        (event["type"].as_str(), event["reason"].as_str()),
        (Some("Warning"), Some("PoolExhausted"))
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

    // An address is free again: EXTERNAL-IP shows it.
    let allocated = json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.10", "ipMode": "VIP", "ports": [
        {"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}]}});
    f.set_lb_service_status(allocated.clone());
    let (_, tenant, _) = f.reconcile_service("dns").await;
    assert_eq!(
        tenant,
        [
            format!("PATCH {SVC}/status"),
            EVENTS.into(),
            format!("PATCH {SVC}"),
            EVENTS.into()
        ]
    );
    let t = f.tenant.get("v1", "Service", NS, "dns").unwrap();
    assert_eq!(t["status"], allocated);
    assert_eq!(conditions_of(&t)[1]["status"], "True");
    let notes: Vec<String> = f
        .tenant
        .requests()
        .iter()
        .rev()
        .take(3)
        .filter_map(|r| r.body.as_ref()?.get("note")?.as_str().map(str::to_string))
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("203.0.113.10")),
        "{notes:?}"
    );
    // Copied once.
    let (_, tenant, _) = f.reconcile_service("dns").await;
    assert!(tenant.is_empty(), "{tenant:?}");
}

#[tokio::test]
async fn a_refused_l4_copy_is_reported_on_the_tenant_service() {
    let f = Fixture::new().await;
    f.refuse_on_lb(
        "services",
        "spec.ports: 60 listeners, more than your Tenant's maxListeners 50",
    );
    f.tenant.apply(l4_service());
    f.reconcile_service("dns").await;
    let (_, tenant, lb) = f.reconcile_service("dns").await;
    assert_eq!(
        lb,
        [format!("PATCH {}", l4_path()), format!("GET {}", l4_path())]
    );
    assert_eq!(tenant, [format!("PATCH {SVC}"), EVENTS.into()]);
    let c = conditions_of(&f.tenant.get("v1", "Service", NS, "dns").unwrap());
    assert_eq!(c[0]["reason"], "Refused");
    assert!(
        c[0]["message"].as_str().unwrap().contains("maxListeners"),
        "{c}"
    );
    assert_eq!(last_event(&f.tenant)["reason"], "Refused");
}

fn source_ranges_condition(f: &Fixture) -> Value {
    conditions_of(&f.tenant.get("v1", "Service", NS, "dns").unwrap())
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "SourceRangesEnforced")
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn source_ranges_travel_to_the_l4_copy_and_show_as_enforced_once_the_fleet_says_so() {
    let f = Fixture::new().await;
    let mut svc = l4_service();
    svc["spec"]["loadBalancerSourceRanges"] = json!([" 198.51.100.7/24", "2001:db8::/32"]);
    f.tenant.apply(svc);
    f.reconcile_service("dns").await;
    let (_, _, lb) = f.reconcile_service("dns").await;
    assert_eq!(
        lb,
        [format!("PATCH {}", l4_path()), format!("GET {}", l4_path())],
        "still one read of the copy"
    );
    let copy =
        f.lb.get("v1", "Service", LB_NS, &mirrored_service_name(NS, "dns"))
            .unwrap();
    assert_eq!(
        copy["spec"]["loadBalancerSourceRanges"],
        json!(["198.51.100.0/24", "2001:db8::/32"]),
        "kept, as the fleet reads them"
    );
    // Until the fleet reports them enforced, the owner is told they are not.
    let c = source_ranges_condition(&f);
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("False"), &json!("NotConfirmed"))
    );

    f.set_lb_service_status(json!({
        "loadBalancer": {"ingress": [{"ip": "203.0.113.10", "ports": [{"port": 53, "protocol": "TCP"}]}]},
        "conditions": [{"type": "SourceRangesEnforced", "status": "True", "reason": "Enforced",
                        "message": "only clients in 198.51.100.0/24, 2001:db8::/32 reach its listeners",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}));
    f.reconcile_service("dns").await;
    let c = source_ranges_condition(&f);
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("True"), &json!("Enforced"))
    );
    assert!(
        c["message"].as_str().unwrap().contains("198.51.100.0/24"),
        "{c}"
    );

    // Without ranges no condition is reported. (The copy's field goes by
    // server-side apply, which drops what the agent no longer applies; the
    // double merges, so that part is the API server's, not tested here.)
    f.tenant.apply(l4_service());
    // The first reconcile puts back the finalizer a whole-object apply
    // dropped; the second writes the copy.
    f.reconcile_service("dns").await;
    f.reconcile_service("dns").await;
    assert_eq!(source_ranges_condition(&f), Value::Null);
}

#[tokio::test]
async fn the_older_source_ranges_annotation_travels_as_the_field() {
    let f = Fixture::new().await;
    let mut svc = l4_service();
    svc["metadata"]["annotations"]["service.beta.kubernetes.io/load-balancer-source-ranges"] =
        json!("10.0.0.0/8, 192.0.2.0/24");
    f.tenant.apply(svc.clone());
    f.reconcile_service("dns").await;
    f.reconcile_service("dns").await;
    let copy = |f: &Fixture| {
        f.lb.get("v1", "Service", LB_NS, &mirrored_service_name(NS, "dns"))
            .unwrap()
    };
    assert_eq!(
        copy(&f)["spec"]["loadBalancerSourceRanges"],
        json!(["10.0.0.0/8", "192.0.2.0/24"])
    );
    assert!(
        copy(&f)["metadata"]["annotations"]
            .get("service.beta.kubernetes.io/load-balancer-source-ranges")
            .is_none(),
        "the webhook admits no such annotation: it travels as the field"
    );
    // The field, when set, wins (as Kubernetes reads them).
    svc["spec"]["loadBalancerSourceRanges"] = json!(["203.0.113.0/24"]);
    f.tenant.apply(svc);
    f.reconcile_service("dns").await;
    f.reconcile_service("dns").await;
    assert_eq!(
        copy(&f)["spec"]["loadBalancerSourceRanges"],
        json!(["203.0.113.0/24"])
    );
}

#[tokio::test]
async fn deleting_an_l4_service_removes_its_copy_then_the_finalizer() {
    let f = Fixture::new().await;
    f.reconcile().await;
    f.reconcile().await;
    f.tenant.apply(l4_service());
    f.reconcile_service("dns").await;
    f.reconcile_service("dns").await;
    // The sync half's slice for it.
    f.lb.apply(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": mirrored_service_name(NS, "dns"), "namespace": LB_NS,
                     "labels": {"endpointslice.kubernetes.io/managed-by": "sync.teapot.dev",
                                "kubernetes.io/service-name": mirrored_service_name(NS, "dns")}}}),
    );
    assert!(f.tenant.delete("v1", "Service", NS, "dns"));
    let (action, tenant, lb) = f.reconcile_service("dns").await;
    assert_eq!(action, Action::await_change());
    let deletes: Vec<&String> = lb.iter().filter(|r| r.starts_with("DELETE")).collect();
    assert_eq!(
        deletes,
        [
            &format!("DELETE {}", l4_path()),
            &format!(
                "DELETE /apis/discovery.k8s.io/v1/namespaces/tenant-acme/endpointslices/{}",
                mirrored_service_name(NS, "dns")
            ),
        ]
    );
    assert_eq!(
        tenant,
        [
            "GET /apis/networking.k8s.io/v1/ingresses".to_string(),
            "GET /api/v1/services".to_string(),
            format!("PATCH {SVC}"),
        ]
    );
    assert!(f.tenant.get("v1", "Service", NS, "dns").is_none());
    // The Ingress backend's copy is still needed and stays.
    assert!(
        f.lb.get("v1", "Service", LB_NS, &mirrored_service_name(NS, "web"))
            .is_some()
    );
}

#[tokio::test]
async fn gc_keeps_live_l4_copies_and_other_services_are_left_alone() {
    let f = Fixture::new().await;
    // A ClusterIP Service and a LoadBalancer of another class: not ours.
    let mut other = l4_service();
    other["metadata"]["name"] = json!("metallb");
    other["spec"]["loadBalancerClass"] = json!("metallb.io/lb");
    f.tenant.apply(other);
    for name in ["web", "metallb"] {
        let (action, tenant, lb) = f.reconcile_service(name).await;
        assert_eq!(action, Action::await_change());
        assert!(
            tenant.is_empty() && lb.is_empty(),
            "{name}: {tenant:?} {lb:?}"
        );
    }
    f.tenant.apply(l4_service());
    f.reconcile_service("dns").await;
    f.reconcile_service("dns").await;
    assert_eq!(gc::collect(&f.ctx).await.unwrap(), 0);
    assert!(
        f.lb.get("v1", "Service", LB_NS, &mirrored_service_name(NS, "dns"))
            .is_some()
    );
}

#[tokio::test]
async fn ingress_nginx_annotations_travel_with_the_objects_they_name() {
    let f = Fixture::new().await;
    f.tenant.apply(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "oauth2", "namespace": "auth"},
        "spec": {"type": "ClusterIP", "selector": {"app": "oauth2"},
                 "ports": [{"name": "http", "port": 4180, "protocol": "TCP"}]},
    }));
    f.tenant.apply(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "backend-ca", "namespace": NS},
        "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5", "ca.crt": "Y2E="},
    }));
    let mut ing = ingress("/");
    ing["metadata"]["annotations"] = json!({
        "nginx.ingress.kubernetes.io/whitelist-source-range": "10.0.0.0/8",
        "nginx.ingress.kubernetes.io/auth-url": "http://oauth2.auth.svc.cluster.local:4180/oauth2/auth",
        "nginx.ingress.kubernetes.io/proxy-ssl-secret": "shop/backend-ca",
        "nginx.ingress.kubernetes.io/proxy-buffer-size": "8k",
        "kubernetes.io/ingress.class": "nginx",
    });
    f.tenant.apply(ing);
    f.reconcile().await;
    let (_, tenant, _) = f.reconcile().await;
    // Both named objects come from the agent's watches, not a GET each.
    assert!(!tenant.iter().any(|r| r.starts_with("GET ")), "{tenant:?}");
    assert!(
        f.lb.get(
            "v1",
            "Service",
            LB_NS,
            &mirrored_service_name("auth", "oauth2")
        )
        .is_some()
    );
    let copy =
        f.lb.get("networking.k8s.io/v1", "Ingress", LB_NS, "web.shop")
            .unwrap();
    let annotations = &copy["metadata"]["annotations"];
    // Every ingress-nginx key travels, unserved ones too: the webhook
    // serves or refuses each, the agent never drops one unseen.
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/whitelist-source-range"],
        "10.0.0.0/8"
    );
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/proxy-buffer-size"],
        "8k"
    );
    assert!(annotations.get("kubernetes.io/ingress.class").is_none());
    let auth = mirrored_service_name("auth", "oauth2");
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/auth-url"],
        format!("http://{auth}.{LB_NS}.svc.cluster.local:4180/oauth2/auth")
    );
    let secret = teapot_controller::mirror::mirrored_secret_name(NS, "backend-ca");
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/proxy-ssl-secret"],
        format!("{LB_NS}/{secret}")
    );
    assert!(f.lb.get("v1", "Service", LB_NS, &auth).is_some());
    let copied = f.lb.get("v1", "Secret", LB_NS, &secret).unwrap();
    assert_eq!(copied["data"]["ca.crt"], "Y2E=");
}

/// ingress-nginx's `proxy-ssl-secret` is commonly an Opaque Secret with
/// `ca.crt` alone: mirrored as such, that key only, whatever else the
/// tenant keeps in it; the same Secret named by `spec.tls` is refused.
#[tokio::test]
async fn a_ca_only_proxy_ssl_secret_is_mirrored_as_its_ca_crt_alone() {
    let f = Fixture::new().await;
    f.tenant.apply(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "backend-ca", "namespace": NS},
        "data": {"ca.crt": "Y2E=", "password": "czNjcmV0"},
    }));
    let mut ing = ingress("/");
    ing["metadata"]["annotations"] = json!({
        "nginx.ingress.kubernetes.io/backend-protocol": "HTTPS",
        "nginx.ingress.kubernetes.io/proxy-ssl-secret": "backend-ca",
        "nginx.ingress.kubernetes.io/proxy-ssl-verify": "on",
    });
    f.tenant.apply(ing);
    f.reconcile().await;
    f.reconcile().await;
    let secret = teapot_controller::mirror::mirrored_secret_name(NS, "backend-ca");
    let copied = f.lb.get("v1", "Secret", LB_NS, &secret).unwrap();
    assert_eq!(copied["type"], "Opaque");
    assert_eq!(copied["data"], json!({"ca.crt": "Y2E="}));

    let owner = teapot_controller::mirror::lb_ingress_secret;
    let tenant_secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(f.tenant.get("v1", "Secret", NS, "backend-ca").unwrap()).unwrap();
    let mut named_by_tls: Ingress = serde_json::from_value(ingress("/")).unwrap();
    named_by_tls.spec.as_mut().unwrap().tls =
        Some(vec![k8s_openapi::api::networking::v1::IngressTLS {
            secret_name: Some("backend-ca".into()),
            ..Default::default()
        }]);
    let e = owner(&named_by_tls, &tenant_secret, LB_NS).unwrap_err();
    assert!(e.to_string().contains("type"), "{e}");
}
