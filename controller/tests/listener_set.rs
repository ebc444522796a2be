//! The agent's ListenerSet mirror, in the style of `gateway.rs`: one
//! reconcile at a time against two API doubles (tenant cluster, LB
//! cluster), asserting what each wrote.
//!
//! Run: `cargo test -p teapot-controller --test listener_set`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use serde_json::{Value, json};
use teapot_api::gateway_api::{Gateway, HttpRoute, ListenerSet};
use teapot_controller::gateway::{reconcile_gateway, reconcile_listener_set, reconcile_route};
use teapot_controller::ingress::FINALIZER;
use teapot_controller::mirror::mirrored_secret_name;
use teapot_controller::{AgentConfig, Context, GatewayApi, Health, Metrics, Watches, gc};
use teapot_sync::Listed;
use teapot_testkit::apiserver::ApiServer;

const NS: &str = "shop";
const LB_NS: &str = "tenant-acme";
const GW: &str = "gateway.networking.k8s.io/v1";

struct Fixture {
    tenant: ApiServer,
    lb: ApiServer,
    ctx: Arc<Context>,
}

fn gateway(allowed_listeners: Option<&str>) -> Value {
    let mut g = json!({
        "apiVersion": GW, "kind": "Gateway",
        "metadata": {"name": "public", "namespace": NS},
        "spec": {"gatewayClassName": "teapot", "listeners": [
            {"name": "http", "protocol": "HTTP", "port": 80}]},
    });
    if let Some(from) = allowed_listeners {
        g["spec"]["allowedListeners"] = json!({"namespaces": {"from": from}});
    }
    g
}

/// ListenerSet `name` of NS on `parent` (`{name, namespace?}`): an HTTPS
/// listener with Secret `web-tls`.
fn listener_set(name: &str, parent: Value) -> Value {
    json!({
        "apiVersion": GW, "kind": "ListenerSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"parentRef": parent, "listeners": [
            {"name": "web", "protocol": "HTTPS", "port": 443, "hostname": "web.example.com",
             "tls": {"certificateRefs": [{"name": "web-tls"}]}}]},
    })
}

impl Fixture {
    async fn new() -> Fixture {
        let tenant = ApiServer::start().await;
        let lb = ApiServer::start().await;
        let mut config = AgentConfig::new(tenant.client(), lb.client(), LB_NS);
        config.gateway_api = GatewayApi::On;
        // The reconcilers read referenced objects from the agent's watches;
        // each reconcile below waits until they have caught up.
        let watches = Watches::start(&config, &mut Listed::default());
        let ctx = Arc::new(Context::new(config, Metrics::new().unwrap(), watches));
        tenant.apply(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "web-tls", "namespace": NS},
            "data": {"tls.crt": "Y3J0", "tls.key": "a2V5"},
        }));
        Fixture { tenant, lb, ctx }
    }

    fn tenant_object<K: serde::de::DeserializeOwned>(&self, kind: &str, name: &str) -> Arc<K> {
        let v = self
            .tenant
            .get(GW, kind, NS, name)
            .expect("the tenant object");
        Arc::new(serde_json::from_value(v).unwrap())
    }

    /// Reconciles twice: the finalizer, then the copy.
    async fn set(&self, name: &str) -> Action {
        let mut action = Action::await_change();
        assert!(
            self.ctx
                .watches
                .caught_up(&self.tenant.client())
                .await
                .unwrap()
        );
        for _ in 0..2 {
            let s: Arc<ListenerSet> = self.tenant_object("ListenerSet", name);
            action = reconcile_listener_set(s, self.ctx.clone())
                .await
                .expect("reconcile");
        }
        action
    }

    async fn gateway(&self) {
        assert!(
            self.ctx
                .watches
                .caught_up(&self.tenant.client())
                .await
                .unwrap()
        );
        for _ in 0..2 {
            let g: Arc<Gateway> = self.tenant_object("Gateway", "public");
            reconcile_gateway(g, self.ctx.clone())
                .await
                .expect("reconcile");
        }
    }

    async fn route(&self) {
        assert!(
            self.ctx
                .watches
                .caught_up(&self.tenant.client())
                .await
                .unwrap()
        );
        for _ in 0..2 {
            let r: Arc<HttpRoute> = self.tenant_object("HTTPRoute", "store");
            reconcile_route(r, self.ctx.clone())
                .await
                .expect("reconcile");
        }
    }

    fn lb_get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.lb.get(api_version, kind, LB_NS, name)
    }
}

/// A set on the tenant's own Gateway that allows it: copied onto the
/// Gateway's copy with its certificate mirrored; the Gateway's copy
/// allows its namespace's sets; a route naming the set is mirrored with
/// that parent; the GC keeps all of it while the set lives.
#[tokio::test]
async fn a_set_on_the_tenants_gateway_is_mirrored_onto_its_copy() {
    let f = Fixture::new().await;
    f.tenant.apply(gateway(Some("All")));
    f.tenant
        .apply(listener_set("extra", json!({"name": "public"})));
    f.gateway().await;
    let g = f.lb_get(GW, "Gateway", "public.shop").expect("LB Gateway");
    assert_eq!(
        g["spec"]["allowedListeners"],
        json!({"namespaces": {"from": "Same"}}),
        "every copy shares the LB namespace"
    );
    assert_eq!(f.set("extra").await, Action::requeue(f.ctx.config.resync));
    let set = f.tenant.get(GW, "ListenerSet", NS, "extra").unwrap();
    assert_eq!(set["metadata"]["finalizers"], json!([FINALIZER]));
    let secret = mirrored_secret_name(NS, "web-tls");
    let copy = f
        .lb_get(GW, "ListenerSet", "extra.shop")
        .expect("LB ListenerSet");
    assert_eq!(
        copy["spec"]["parentRef"],
        json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public.shop"})
    );
    assert_eq!(
        copy["spec"]["listeners"][0]["tls"]["certificateRefs"],
        json!([{"name": secret}])
    );
    assert!(f.lb_get("v1", "Secret", &secret).is_some());

    f.tenant.apply(json!({
        "apiVersion": GW, "kind": "HTTPRoute",
        "metadata": {"name": "store", "namespace": NS},
        "spec": {"parentRefs": [{"kind": "ListenerSet", "group": "gateway.networking.k8s.io",
                                 "name": "extra", "sectionName": "web"}],
                 "rules": [{}]},
    }));
    f.route().await;
    let route = f
        .lb_get(GW, "HTTPRoute", "store.shop")
        .expect("LB HTTPRoute");
    assert_eq!(
        route["spec"]["parentRefs"],
        json!([{"kind": "ListenerSet", "group": "gateway.networking.k8s.io",
                "name": "extra.shop", "sectionName": "web"}])
    );

    gc::collect(&f.ctx).await.unwrap();
    assert!(f.lb_get(GW, "ListenerSet", "extra.shop").is_some());
    assert!(f.lb_get("v1", "Secret", &secret).is_some());
    // Gone from the tenant cluster (finalizer and all): collected.
    assert!(f.tenant.delete(GW, "ListenerSet", NS, "extra"));
    gc::collect(&f.ctx).await.unwrap();
    assert!(f.lb_get(GW, "ListenerSet", "extra.shop").is_none());
}

/// Far longer than any step takes; only a hang waits this long (the
/// agent's resync, which would reconcile everything anyway, is 5 min).
const PATIENCE: Duration = Duration::from_secs(30);

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The running agent: a route naming a ListenerSet that does not exist
/// yet is not mirrored; the set created after it is taken on and the
/// route follows, without waiting for the resync; the set changed so its
/// listener no longer matches the route's sectionName takes the route's
/// copy away, and changed back brings it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_created_or_changed_after_its_route_re_mirrors_the_route() {
    let f = Fixture::new().await;
    f.tenant.apply(gateway(Some("All")));
    f.tenant.apply(json!({
        "apiVersion": GW, "kind": "HTTPRoute",
        "metadata": {"name": "store", "namespace": NS},
        "spec": {"parentRefs": [{"kind": "ListenerSet", "group": "gateway.networking.k8s.io",
                                 "name": "extra", "sectionName": "web"}],
                 "rules": [{}]},
    }));
    let mut config = AgentConfig::new(f.tenant.client(), f.lb.client(), LB_NS);
    config.gateway_api = GatewayApi::On;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(teapot_controller::run(
        config,
        Metrics::new().unwrap(),
        Arc::new(Health::default()),
        stopped,
    ));
    eventually("the Gateway was never mirrored", || {
        f.lb_get(GW, "Gateway", "public.shop").is_some()
    })
    .await;
    // The route's reconcile asks for the set it names (the set controller
    // only lists and watches).
    eventually("the route was never reconciled", || {
        f.tenant
            .requests()
            .iter()
            .any(|r| r.path.ends_with("/listenersets/extra"))
    })
    .await;
    assert!(
        f.lb_get(GW, "HTTPRoute", "store.shop").is_none(),
        "no set yet: nothing attaches the route"
    );

    f.tenant
        .apply(listener_set("extra", json!({"name": "public"})));
    eventually("the route never followed its new ListenerSet", || {
        f.lb_get(GW, "HTTPRoute", "store.shop")
            .is_some_and(|r| r["spec"]["parentRefs"][0]["name"] == "extra.shop")
    })
    .await;

    let mut renamed = listener_set("extra", json!({"name": "public"}));
    renamed["spec"]["listeners"][0]["name"] = json!("other");
    f.tenant.apply(renamed);
    eventually("the route's copy outlived the listener it named", || {
        f.lb_get(GW, "HTTPRoute", "store.shop").is_none()
    })
    .await;
    f.tenant
        .apply(listener_set("extra", json!({"name": "public"})));
    eventually("the route never came back with its listener", || {
        f.lb_get(GW, "HTTPRoute", "store.shop").is_some()
    })
    .await;

    stop.send(true).unwrap();
    agent.await.unwrap().unwrap();
}

/// The tenant's Gateway decides: one that allows no ListenerSets (the
/// default) gets no copy of the set.
#[tokio::test]
async fn a_set_the_gateway_does_not_allow_is_not_mirrored() {
    let f = Fixture::new().await;
    f.tenant.apply(gateway(None));
    f.tenant
        .apply(listener_set("extra", json!({"name": "public"})));
    assert_eq!(f.set("extra").await, Action::await_change());
    let set = f.tenant.get(GW, "ListenerSet", NS, "extra").unwrap();
    assert!(set["metadata"]["finalizers"].is_null(), "{set}");
    assert!(f.lb_get(GW, "ListenerSet", "extra.shop").is_none());
    assert!(
        f.lb_get("v1", "Secret", &mirrored_secret_name(NS, "web-tls"))
            .is_none()
    );
}

/// A set naming a Gateway the tenant cluster does not have is the
/// operator's shared Gateway on the LB cluster: copied with its parentRef
/// as written (the shared Gateway's allowedListeners decides there), and
/// the copy's status comes back onto the tenant's set.
#[tokio::test]
async fn a_set_on_the_shared_gateway_keeps_its_parent_and_gets_its_status() {
    let f = Fixture::new().await;
    let parent = json!({"name": "shared", "namespace": "edge"});
    f.tenant.apply(listener_set("mine", parent.clone()));
    f.set("mine").await;
    let mut copy = f
        .lb_get(GW, "ListenerSet", "mine.shop")
        .expect("LB ListenerSet");
    assert_eq!(copy["spec"]["parentRef"], parent);

    // The fleet's status on the copy.
    let generation = copy["metadata"]["generation"].clone();
    let condition = |t: &str| {
        json!({"type": t, "status": "False", "reason": "NotAllowed", "message": "not allowed",
               "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation})
    };
    copy["status"] = json!({
        "conditions": [condition("Accepted"), condition("Programmed")],
        "listeners": [],
    });
    f.lb.apply(copy);
    f.set("mine").await;
    let set = f.tenant.get(GW, "ListenerSet", NS, "mine").unwrap();
    assert_eq!(
        set["status"]["conditions"][0]["reason"], "NotAllowed",
        "{set}"
    );
    assert_eq!(
        set["status"]["conditions"][0]["observedGeneration"],
        set["metadata"]["generation"]
    );
}
