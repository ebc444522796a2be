//! The Gateway API reconcilers, in the ApiServerVerifier style of
//! `reconcile.rs`: one reconcile at a time against two API doubles
//! (tenant cluster, LB cluster), asserting what each wrote.
//!
//! Run: `cargo test -p teapot-controller --test gateway`.

use std::sync::Arc;

use kube::runtime::controller::Action;
use serde_json::{Value, json};
use teapot_api::gateway_api::{Gateway, HttpRoute};
use teapot_api::hostname::mirrored_service_name;
use teapot_controller::gateway::{reconcile_gateway, reconcile_route};
use teapot_controller::gateway_mirror::refused_backend_name;
use teapot_controller::ingress::{CONDITIONS_ANNOTATION, FINALIZER};
use teapot_controller::mirror::mirrored_secret_name;
use teapot_controller::{AgentConfig, Context, GatewayApi, Metrics, Watches, gc};
use teapot_sync::Listed;
use teapot_testkit::apiserver::ApiServer;

const NS: &str = "shop";
const LB_NS: &str = "tenant-acme";
const GW: &str = "gateway.networking.k8s.io/v1";
const GW_GROUP: &str = "gateway.networking.k8s.io";

struct Fixture {
    tenant: ApiServer,
    lb: ApiServer,
    ctx: Arc<Context>,
}

fn tls_secret(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"tls.crt": "Y3J0", "tls.key": "a2V5"},
    })
}

fn service(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"type": "NodePort", "selector": {"app": name},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}]},
    })
}

fn gateway(allowed_from: &str) -> Value {
    json!({
        "apiVersion": GW, "kind": "Gateway",
        "metadata": {"name": "public", "namespace": NS},
        "spec": {"gatewayClassName": "teapot", "listeners": [
            {"name": "http", "protocol": "HTTP", "port": 80,
             "allowedRoutes": {"namespaces": {"from": allowed_from}}},
            {"name": "https", "protocol": "HTTPS", "port": 443, "hostname": "shop.example.com",
             "tls": {"certificateRefs": [{"name": "shop-tls"}]}}]},
    })
}

fn route(namespace: &str) -> Value {
    json!({
        "apiVersion": GW, "kind": "HTTPRoute",
        "metadata": {"name": "store", "namespace": namespace},
        "spec": {
            "parentRefs": [{"name": "public", "namespace": NS, "sectionName": "http"}],
            "hostnames": ["shop.example.com"],
            "rules": [{"backendRefs": [
                {"name": "web", "namespace": NS, "port": 80},
                {"name": "search", "namespace": "search", "port": 80}]}]},
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
        tenant.apply(service(NS, "web"));
        tenant.apply(service("search", "search"));
        tenant.apply(tls_secret(NS, "shop-tls"));
        tenant.apply(gateway("Same"));
        tenant.apply(route(NS));
        Fixture { tenant, lb, ctx }
    }

    fn tenant_object<K: serde::de::DeserializeOwned>(
        &self,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> Arc<K> {
        let v = self
            .tenant
            .get(GW, kind, ns, name)
            .expect("the tenant object");
        Arc::new(serde_json::from_value(v).unwrap())
    }

    /// Status writes to the tenant cluster after its first `before`
    /// requests.
    fn status_writes_since(&self, before: usize) -> usize {
        self.tenant.requests()[before..]
            .iter()
            .filter(|r| r.path.ends_with("/status"))
            .count()
    }

    /// Reconciles the Gateway until it holds the finalizer and is mirrored.
    async fn gateway(&self) -> Action {
        let mut action = Action::await_change();
        assert!(
            self.ctx
                .watches
                .caught_up(&self.tenant.client())
                .await
                .unwrap()
        );
        for _ in 0..2 {
            let g: Arc<Gateway> = self.tenant_object("Gateway", NS, "public");
            action = reconcile_gateway(g, self.ctx.clone())
                .await
                .expect("reconcile");
        }
        action
    }

    async fn route(&self, ns: &str) -> Action {
        let mut action = Action::await_change();
        assert!(
            self.ctx
                .watches
                .caught_up(&self.tenant.client())
                .await
                .unwrap()
        );
        for _ in 0..2 {
            let r: Arc<HttpRoute> = self.tenant_object("HTTPRoute", ns, "store");
            action = reconcile_route(r, self.ctx.clone())
                .await
                .expect("reconcile");
        }
        action
    }

    fn lb_get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.lb.get(api_version, kind, LB_NS, name)
    }
}

fn conditions(object: &Value) -> Value {
    serde_json::from_str(
        object["metadata"]["annotations"][CONDITIONS_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_gateway_and_its_route_are_mirrored_renamed() {
    let f = Fixture::new().await;
    assert_eq!(f.gateway().await, Action::requeue(f.ctx.config.resync));
    let g = f.tenant.get(GW, "Gateway", NS, "public").unwrap();
    assert_eq!(g["metadata"]["finalizers"], json!([FINALIZER]));
    assert_eq!(conditions(&g)[0]["status"], "True", "{}", conditions(&g));
    let secret = mirrored_secret_name(NS, "shop-tls");
    let copy = f.lb_get(GW, "Gateway", "public.shop").expect("LB Gateway");
    assert_eq!(copy["spec"]["gatewayClassName"], "teapot");
    assert_eq!(
        copy["metadata"]["labels"]["teapot.dev/source-namespace"],
        NS
    );
    assert_eq!(
        copy["spec"]["listeners"][1]["tls"]["certificateRefs"],
        json!([{"name": secret}])
    );
    let s = f.lb_get("v1", "Secret", &secret).expect("LB Secret");
    assert_eq!(s["data"]["tls.crt"], "Y3J0");

    f.route(NS).await;
    let copy = f
        .lb_get(GW, "HTTPRoute", "store.shop")
        .expect("LB HTTPRoute");
    assert_eq!(
        copy["spec"]["parentRefs"],
        json!([{"name": "public.shop", "sectionName": "http"}])
    );
    let backends = &copy["spec"]["rules"][0]["backendRefs"];
    let web = mirrored_service_name(NS, "web");
    assert_eq!(backends[0], json!({"name": web, "port": 80}));
    // search/search is in another namespace and no ReferenceGrant allows
    // it: not mirrored, named so the LB side answers it as invalid.
    assert_eq!(
        backends[1]["name"],
        refused_backend_name("search", "search")
    );
    assert!(f.lb_get("v1", "Service", &web).is_some());
    assert!(
        f.lb_get("v1", "Service", &mirrored_service_name("search", "search"))
            .is_none()
    );
    let r = f.tenant.get(GW, "HTTPRoute", NS, "store").unwrap();
    let c = conditions(&r);
    assert_eq!(c[1]["type"], "ResolvedRefs");
    assert!(
        c[1]["message"]
            .as_str()
            .unwrap()
            .contains("RefNotPermitted"),
        "{c}"
    );

    // A ReferenceGrant in the target namespace allows it.
    f.tenant.apply(json!({
        "apiVersion": GW, "kind": "ReferenceGrant",
        "metadata": {"name": "from-shop", "namespace": "search"},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": NS}],
                 "to": [{"group": "", "kind": "Service"}]},
    }));
    f.route(NS).await;
    let copy = f.lb_get(GW, "HTTPRoute", "store.shop").unwrap();
    let search = mirrored_service_name("search", "search");
    assert_eq!(
        copy["spec"]["rules"][0]["backendRefs"][1],
        json!({"name": search, "port": 80})
    );
    assert!(f.lb_get("v1", "Service", &search).is_some());
    let r = f.tenant.get(GW, "HTTPRoute", NS, "store").unwrap();
    assert_eq!(
        conditions(&r).as_array().unwrap().len(),
        1,
        "{}",
        conditions(&r)
    );

    // The GC keeps what the route needs while it lives.
    gc::collect(&f.ctx).await.unwrap();
    assert!(f.lb_get("v1", "Service", &web).is_some());
    assert!(f.lb_get(GW, "HTTPRoute", "store.shop").is_some());
    assert!(f.lb_get(GW, "Gateway", "public.shop").is_some());
    assert!(f.lb_get("v1", "Secret", &secret).is_some());
}

/// The Gateway's backend client certificate reaches the LB cluster like
/// a listener certificate: the Secret mirrored, the reference renamed.
#[tokio::test]
async fn a_gateway_s_backend_client_certificate_is_mirrored_renamed() {
    let f = Fixture::new().await;
    let mut g = gateway("Same");
    g["spec"]["tls"] = json!({"backend": {"clientCertificateRef": {"name": "upstream-client"}}});
    f.tenant.apply(g);
    f.tenant.apply(tls_secret(NS, "upstream-client"));
    assert_eq!(f.gateway().await, Action::requeue(f.ctx.config.resync));
    let secret = mirrored_secret_name(NS, "upstream-client");
    let copy = f.lb_get(GW, "Gateway", "public.shop").expect("LB Gateway");
    assert_eq!(
        copy["spec"]["tls"]["backend"]["clientCertificateRef"],
        json!({"name": secret})
    );
    let s = f.lb_get("v1", "Secret", &secret).expect("LB Secret");
    assert_eq!(s["data"]["tls.key"], "a2V5");
}

#[tokio::test]
async fn status_comes_back_onto_both_objects() {
    let f = Fixture::new().await;
    f.gateway().await;
    f.route(NS).await;
    // The fleet's status on the copies.
    let mut g = f.lb_get(GW, "Gateway", "public.shop").unwrap();
    let generation = g["metadata"]["generation"].clone();
    g["status"] = json!({
        "addresses": [{"type": "Hostname", "value": "public-shop.acme.lb.example.net"}],
        "conditions": [{"type": "Programmed", "status": "True", "reason": "Programmed", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation}],
    });
    f.lb.apply(g);
    let mut r = f.lb_get(GW, "HTTPRoute", "store.shop").unwrap();
    r["status"] = json!({"parents": [{
        "controllerName": "teapot.dev/gateway-controller",
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public.shop", "sectionName": "http"},
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": r["metadata"]["generation"]}]}]});
    f.lb.apply(r);

    f.gateway().await;
    f.route(NS).await;
    let g = f.tenant.get(GW, "Gateway", NS, "public").unwrap();
    assert_eq!(
        g["status"]["addresses"][0]["value"],
        "public-shop.acme.lb.example.net"
    );
    assert_eq!(
        g["status"]["conditions"][0]["observedGeneration"],
        g["metadata"]["generation"]
    );
    let r = f.tenant.get(GW, "HTTPRoute", NS, "store").unwrap();
    let parent = &r["status"]["parents"][0];
    assert_eq!(
        parent["parentRef"],
        json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public", "namespace": NS, "sectionName": "http"})
    );
    assert_eq!(parent["conditions"][0]["type"], "Accepted");

    // Written once: the next reconcile finds it in place.
    let before = f.tenant.requests().len();
    f.gateway().await;
    assert_eq!(f.status_writes_since(before), 0);
}

#[tokio::test]
async fn routes_the_gateway_does_not_allow_are_not_mirrored() {
    let f = Fixture::new().await;
    f.gateway().await;
    f.tenant.apply(route("other"));
    f.tenant.apply(service("other", "web"));
    f.route("other").await;
    assert!(f.lb_get(GW, "HTTPRoute", "store.other").is_none());
    let r = f.tenant.get(GW, "HTTPRoute", "other", "store").unwrap();
    assert!(r["metadata"].get("finalizers").is_none());
    // From All: it attaches.
    f.tenant.apply(gateway("All"));
    f.route("other").await;
    assert!(f.lb_get(GW, "HTTPRoute", "store.other").is_some());
}

#[tokio::test]
async fn deleting_a_route_removes_its_copy_then_the_finalizer() {
    let f = Fixture::new().await;
    f.gateway().await;
    f.route(NS).await;
    let web = mirrored_service_name(NS, "web");
    assert!(f.lb_get("v1", "Service", &web).is_some());
    f.tenant.delete(GW, "HTTPRoute", NS, "store");
    let r: Arc<HttpRoute> = f.tenant_object("HTTPRoute", NS, "store");
    assert!(r.metadata.deletion_timestamp.is_some());
    reconcile_route(r, f.ctx.clone()).await.unwrap();
    assert!(f.lb_get(GW, "HTTPRoute", "store.shop").is_none());
    assert!(
        f.lb_get("v1", "Service", &web).is_none(),
        "only the route needed it"
    );
    assert!(f.tenant.get(GW, "HTTPRoute", NS, "store").is_none());
    assert!(f.lb_get(GW, "Gateway", "public.shop").is_some());

    // The Gateway moving to another class: its copy goes.
    let mut g = f.tenant.get(GW, "Gateway", NS, "public").unwrap();
    g["spec"]["gatewayClassName"] = json!("istio");
    f.tenant.apply(g);
    let g: Arc<Gateway> = f.tenant_object("Gateway", NS, "public");
    reconcile_gateway(g, f.ctx.clone()).await.unwrap();
    assert!(f.lb_get(GW, "Gateway", "public.shop").is_none());
    assert!(
        f.lb_get("v1", "Secret", &mirrored_secret_name(NS, "shop-tls"))
            .is_none()
    );
    let g = f.tenant.get(GW, "Gateway", NS, "public").unwrap();
    assert!(
        g["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
}

/// A BackendTLSPolicy is mirrored `NAME.NS` with its Service target and
/// its ConfigMap renamed to their mirrors, the ConfigMap copied with its
/// `ca.crt` only; a missing ConfigMap is reported on the tenant's policy;
/// deleting the policy lets the collector remove both copies.
#[tokio::test]
async fn a_backend_tls_policy_and_its_config_map_are_mirrored_renamed() {
    use teapot_api::gateway_api::BackendTlsPolicy;
    use teapot_controller::gateway::reconcile_backend_tls_policy;
    use teapot_controller::gateway_mirror::mirrored_config_map_name;
    let f = Fixture::new().await;
    f.tenant.apply(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web-ca", "namespace": NS},
        "data": {"ca.crt": "PEM", "app.properties": "the tenant's own"},
    }));
    f.tenant.apply(json!({
        "apiVersion": GW, "kind": "BackendTLSPolicy",
        "metadata": {"name": "web-tls", "namespace": NS},
        "spec": {
            "targetRefs": [{"group": "", "kind": "Service", "name": "web", "sectionName": "http"}],
            "validation": {
                "hostname": "web.shop.internal",
                "caCertificateRefs": [
                    {"group": "", "kind": "ConfigMap", "name": "web-ca"},
                    {"group": "", "kind": "ConfigMap", "name": "absent"}],
            },
        },
    }));
    let reconcile = || async {
        assert!(f.ctx.watches.caught_up(&f.tenant.client()).await.unwrap());
        for _ in 0..2 {
            let p: Arc<BackendTlsPolicy> = f.tenant_object("BackendTLSPolicy", NS, "web-tls");
            reconcile_backend_tls_policy(p, f.ctx.clone())
                .await
                .expect("reconcile");
        }
    };
    reconcile().await;
    let copy = f
        .lb_get(GW, "BackendTLSPolicy", "web-tls.shop")
        .expect("LB BackendTLSPolicy");
    let ca = mirrored_config_map_name(NS, "web-ca");
    assert_eq!(
        copy["spec"]["targetRefs"],
        json!([{"group": "", "kind": "Service", "name": mirrored_service_name(NS, "web"), "sectionName": "http"}])
    );
    assert_eq!(
        copy["spec"]["validation"]["caCertificateRefs"][0]["name"],
        ca
    );
    assert_eq!(copy["spec"]["validation"]["hostname"], "web.shop.internal");
    let c = f.lb_get("v1", "ConfigMap", &ca).expect("LB ConfigMap");
    assert_eq!(c["data"], json!({"ca.crt": "PEM"}));
    let p = f.tenant.get(GW, "BackendTLSPolicy", NS, "web-tls").unwrap();
    let c = conditions(&p);
    assert_eq!(c[1]["type"], "ResolvedRefs", "{c}");
    assert!(
        c[1]["message"]
            .as_str()
            .unwrap()
            .contains("ConfigMap shop/absent (caCertificateRefs) not found"),
        "{c}"
    );

    // Gone from the tenant cluster: the collector removes both copies.
    f.tenant.delete(GW, "BackendTLSPolicy", NS, "web-tls");
    gc::collect(&f.ctx).await.expect("gc");
    assert!(f.lb_get(GW, "BackendTLSPolicy", "web-tls.shop").is_none());
    assert!(f.lb_get("v1", "ConfigMap", &ca).is_none());
}

/// The fleet's `status.ancestors` on the LB copy of a BackendTLSPolicy
/// comes back onto the tenant's policy: teapot's entries with the
/// Gateway named back (`public.shop` -> `public` of `shop`) and the
/// generation mapped, after another controller's entry, written once.
#[tokio::test]
async fn backend_tls_policy_status_comes_back_with_names_renamed() {
    use teapot_api::gateway_api::BackendTlsPolicy;
    use teapot_controller::gateway::reconcile_backend_tls_policy;
    let f = Fixture::new().await;
    let theirs = json!({
        "controllerName": "example.com/mesh",
        "ancestorRef": {"group": GW_GROUP, "kind": "Gateway", "name": "mesh", "namespace": "istio-system"},
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    let mut policy = json!({
        "apiVersion": GW, "kind": "BackendTLSPolicy",
        "metadata": {"name": "web-tls", "namespace": NS},
        "spec": {
            "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
            "validation": {"hostname": "web.shop.internal", "wellKnownCACertificates": "System"},
        },
    });
    f.tenant.apply(policy.clone());
    policy["status"] = json!({"ancestors": [theirs.clone()]});
    f.tenant.apply(policy);
    let reconcile = || async {
        let p: Arc<BackendTlsPolicy> = f.tenant_object("BackendTLSPolicy", NS, "web-tls");
        reconcile_backend_tls_policy(p, f.ctx.clone())
            .await
            .expect("reconcile");
    };
    reconcile().await;
    reconcile().await;
    let mut lb = f.lb_get(GW, "BackendTLSPolicy", "web-tls.shop").unwrap();
    let condition = |generation: &Value| {
        json!([{"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation}])
    };
    lb["status"] = json!({"ancestors": [
        {"controllerName": "teapot.dev/gateway-controller",
         "ancestorRef": {"group": GW_GROUP, "kind": "Gateway", "name": "public.shop", "namespace": LB_NS},
         "conditions": condition(&lb["metadata"]["generation"])},
        // Not a tenant Gateway's copy: left out.
        {"controllerName": "teapot.dev/gateway-controller",
         "ancestorRef": {"group": GW_GROUP, "kind": "Gateway", "name": "fleet", "namespace": "ops"},
         "conditions": condition(&lb["metadata"]["generation"])}]});
    f.lb.apply(lb);

    reconcile().await;
    let p = f.tenant.get(GW, "BackendTLSPolicy", NS, "web-tls").unwrap();
    let ancestors = p["status"]["ancestors"].as_array().unwrap();
    assert_eq!(ancestors.len(), 2, "{ancestors:?}");
    assert_eq!(ancestors[0], theirs);
    assert_eq!(
        ancestors[1]["ancestorRef"],
        json!({"group": GW_GROUP, "kind": "Gateway", "name": "public", "namespace": NS})
    );
    assert_eq!(
        ancestors[1]["controllerName"],
        "teapot.dev/gateway-controller"
    );
    assert_eq!(
        ancestors[1]["conditions"][0]["observedGeneration"],
        p["metadata"]["generation"]
    );

    // Written once: the next reconcile finds it in place.
    let before = f.tenant.requests().len();
    reconcile().await;
    assert_eq!(f.status_writes_since(before), 0);
}

#[tokio::test]
async fn a_route_traffic_policy_is_mirrored_with_its_targets_renamed() {
    use teapot_api::hostname::mirrored_ingress_name;
    use teapot_api::route_policy::RouteTrafficPolicy;
    use teapot_controller::gateway::reconcile_route_traffic_policy;
    const TEAPOT: &str = "teapot.dev/v1alpha1";
    let f = Fixture::new().await;
    f.tenant.apply(json!({
        "apiVersion": TEAPOT, "kind": "RouteTrafficPolicy",
        "metadata": {"name": "admin-only", "namespace": NS},
        "spec": {
            "targetRefs": [
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "web", "sectionName": "admin"},
                {"group": "gateway.networking.k8s.io", "kind": "GRPCRoute", "name": "calls", "namespace": NS},
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "theirs", "namespace": "other"},
            ],
            "clientAddresses": {"allow": ["10.0.0.0/8"]},
            "rateLimit": {"requestsPerSecond": 10, "exempt": ["10.1.0.0/16"]},
            "customErrors": {"codes": [404, 503], "backend": {"name": "errors", "port": 80}},
        },
    }));
    f.tenant.apply(service(NS, "errors"));
    assert!(f.ctx.watches.caught_up(&f.tenant.client()).await.unwrap());
    for _ in 0..2 {
        let v = f
            .tenant
            .get(TEAPOT, "RouteTrafficPolicy", NS, "admin-only")
            .expect("tenant policy");
        let p: Arc<RouteTrafficPolicy> = Arc::new(serde_json::from_value(v).unwrap());
        reconcile_route_traffic_policy(p, f.ctx.clone())
            .await
            .expect("reconcile");
    }
    let name = mirrored_ingress_name(NS, "admin-only");
    let copy = f
        .lb_get(TEAPOT, "RouteTrafficPolicy", &name)
        .expect("LB RouteTrafficPolicy");
    // The routes' mirror names; a rule keeps its name, so sectionName
    // stays; another namespace's target is copied as written, for the
    // webhook to refuse.
    assert_eq!(
        copy["spec"]["targetRefs"],
        json!([
            {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
             "name": mirrored_ingress_name(NS, "web"), "sectionName": "admin"},
            {"group": "gateway.networking.k8s.io", "kind": "GRPCRoute",
             "name": mirrored_ingress_name(NS, "calls")},
            {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
             "name": "theirs", "namespace": "other"},
        ])
    );
    assert_eq!(
        copy["spec"]["clientAddresses"]["allow"],
        json!(["10.0.0.0/8"])
    );
    assert_eq!(copy["spec"]["rateLimit"]["requestsPerSecond"], 10);
    // customErrors' Service is mirrored, and named by its mirror.
    let errors = mirrored_service_name(NS, "errors");
    assert_eq!(
        copy["spec"]["customErrors"],
        json!({"codes": [404, 503], "backend": {"name": errors, "port": 80}})
    );
    assert!(f.lb_get("v1", "Service", &errors).is_some());
    // Live while the policy is: the collector keeps the Service.
    gc::collect(&f.ctx).await.expect("gc");
    assert!(f.lb_get("v1", "Service", &errors).is_some());

    // Gone from the tenant cluster: the collector removes the copy.
    f.tenant
        .delete(TEAPOT, "RouteTrafficPolicy", NS, "admin-only");
    gc::collect(&f.ctx).await.expect("gc");
    assert!(f.lb_get(TEAPOT, "RouteTrafficPolicy", &name).is_none());
    assert!(f.lb_get("v1", "Service", &errors).is_none());
}

/// A tenant policy's basicAuth users Secret reaches the LB cluster with
/// its `auth` key alone, under the mirrored Secrets' name the copy's
/// reference uses; a change to it is mirrored again, and it lives as long
/// as the policy does.
#[tokio::test]
async fn a_route_traffic_policy_s_basic_auth_secret_is_mirrored_renamed() {
    use teapot_api::hostname::mirrored_ingress_name;
    use teapot_api::route_policy::RouteTrafficPolicy;
    use teapot_controller::gateway::reconcile_route_traffic_policy;
    const TEAPOT: &str = "teapot.dev/v1alpha1";
    let f = Fixture::new().await;
    let users = |auth: &str| {
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "staff", "namespace": NS},
            "data": {"auth": auth, "db-password": "aHVudGVyMg=="},
        })
    };
    // "alice:{SHA}..." and "bob:{SHA}...", base64.
    let (alice, bob) = (
        "YWxpY2U6e1NIQX1xVXFQNWN5eG02WWNUQWh6MDVIcGg1Z3Z1OU09",
        "Ym9iOntTSEF9cVVxUDVjeXhtNlljVEFoejA1SHBoNWd2dTlNPQ==",
    );
    f.tenant.apply(users(alice));
    f.tenant.apply(json!({
        "apiVersion": TEAPOT, "kind": "RouteTrafficPolicy",
        "metadata": {"name": "staff-only", "namespace": NS},
        "spec": {
            "targetRefs": [{"group": GW_GROUP, "kind": "HTTPRoute", "name": "store"}],
            "basicAuth": {"secretRef": {"name": "staff"}, "realm": "Staff"},
        },
    }));
    let reconcile = || async {
        assert!(f.ctx.watches.caught_up(&f.tenant.client()).await.unwrap());
        for _ in 0..2 {
            let v = f
                .tenant
                .get(TEAPOT, "RouteTrafficPolicy", NS, "staff-only")
                .expect("tenant policy");
            let p: Arc<RouteTrafficPolicy> = Arc::new(serde_json::from_value(v).unwrap());
            reconcile_route_traffic_policy(p, f.ctx.clone())
                .await
                .expect("reconcile");
        }
    };
    reconcile().await;
    let name = mirrored_ingress_name(NS, "staff-only");
    let copy = f
        .lb_get(TEAPOT, "RouteTrafficPolicy", &name)
        .expect("LB RouteTrafficPolicy");
    let secret = mirrored_secret_name(NS, "staff");
    assert_eq!(
        copy["spec"]["basicAuth"],
        json!({"secretRef": {"name": secret}, "realm": "Staff"})
    );
    let mirrored = f.lb_get("v1", "Secret", &secret).expect("LB users Secret");
    // The users alone: the application's password stays in the tenant
    // cluster.
    assert_eq!(mirrored["data"], json!({"auth": alice}));

    // The Secret changes: the next reconcile mirrors the new users.
    f.tenant.apply(users(bob));
    reconcile().await;
    let mirrored = f.lb_get("v1", "Secret", &secret).expect("LB users Secret");
    assert_eq!(mirrored["data"], json!({"auth": bob}));

    gc::collect(&f.ctx).await.expect("gc");
    assert!(f.lb_get("v1", "Secret", &secret).is_some());
    f.tenant
        .delete(TEAPOT, "RouteTrafficPolicy", NS, "staff-only");
    gc::collect(&f.ctx).await.expect("gc");
    assert!(f.lb_get(TEAPOT, "RouteTrafficPolicy", &name).is_none());
    assert!(f.lb_get("v1", "Secret", &secret).is_none());
}
