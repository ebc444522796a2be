//! End-to-end tests of `teapot proxy --kube`: the real binary watches the
//! in-process API double ([`teapot_testkit::apiserver`]) through the
//! kubeconfig file the double writes, and serves real echo backends.
//!
//! Run: `cargo test -p teapot --test agent_kube kube_e2e::`. The `#[ignore = "needs
//! cluster"]` test runs the same flow against the cluster `KUBECONFIG`
//! names (docs/kube.md has the kind/k3d recipe).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::client::{Request, Transport};
use teapot_testkit::process::ProxyProcess;

const NS: &str = "kube-e2e";
const HOST: &str = "kube.test";

async fn get(proxy: &ProxyProcess, host: &str, path: &str) -> teapot_testkit::client::Response {
    send(proxy.http, &Transport::Plain, &Request::get(host, path)).await
}

/// Polls until GET `host``path` answers `status` (and, for 200, the echo
/// `pod`); returns the last body as JSON (or Null).
async fn wait_answer(proxy: &ProxyProcess, path: &str, status: u16, pod: Option<&str>) -> Value {
    eventually(
        &format!("GET {HOST}{path} -> {status} {pod:?}"),
        RELOAD_TIMEOUT,
        || async {
            let r = get(proxy, HOST, path).await;
            let json: Value = r.json().unwrap_or(Value::Null);
            let pod_ok = pod.is_none_or(|p| json["pod"] == p);
            if r.status == status && pod_ok {
                Ok(json)
            } else {
                Err(format!("{} {}", r.status, r.text()))
            }
        },
    )
    .await
}

fn backends(api: &ApiServer, echoes: &[(&str, &teapot_testkit::echo::EchoServer)]) {
    for (service, echo) in echoes {
        for object in echo_service(NS, service, &[echo]) {
            api.apply(object);
        }
    }
}

fn route(path_prefix: &str, service: &str) -> Value {
    ingress(
        NS,
        "web",
        json!({ "rules": [rule(Some(HOST), vec![path("Prefix", path_prefix, backend(service, Port::Name("http")))])] }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_updates_and_deletes_ingresses_from_the_api() {
    let api = ApiServer::start().await;
    let one = echo(NS, "svc-one", "one-0").await;
    let two = echo(NS, "svc-two", "two-0").await;
    backends(&api, &[("svc-one", &one), ("svc-two", &two)]);
    api.apply(route("/", "svc-one"));
    // A tenant's Ingress, host-less: bound to its assigned hostname.
    api.apply(json!({
        "apiVersion": "teapot.dev/v1alpha1", "kind": "Tenant",
        "metadata": {"name": "acme"},
        "spec": {"cluster": "acme", "nodeCIDRs": ["10.1.0.0/24"]},
    }));
    api.apply(ingress(
        "tenant-acme",
        "web.default",
        json!({ "rules": [rule(None, vec![path("Prefix", "/", backend("web", Port::Number(80)))])] }),
    ));

    let proxy = ProxyProcess::start_kube(&teapot_bin(), api.kubeconfig_path(), &[])
        .await
        .expect("teapot proxy --kube starts and becomes ready");
    // Ready means synced: the Ingress is served at once.
    let r = get(&proxy, HOST, "/a").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json().unwrap()["pod"], "one-0");

    // An update takes effect without a restart.
    api.apply(route("/", "svc-two"));
    wait_answer(&proxy, "/a", 200, Some("two-0")).await;

    // An invalid update keeps the last good version serving.
    let mut bad = route("/", "svc-one");
    bad["spec"]["rules"][0]["http"]["paths"][0]["pathType"] = json!("Regex");
    api.apply(bad);
    eventually("the invalid Ingress reported", RELOAD_TIMEOUT, || async {
        let (_, body) = proxy
            .admin_get("/status")
            .await
            .map_err(|e| e.to_string())?;
        if body.contains("pathType")
            && body.contains("kube:/apis/networking.k8s.io/v1/namespaces/kube-e2e/ingresses/web")
        {
            Ok(())
        } else {
            Err(body)
        }
    })
    .await;
    wait_answer(&proxy, "/a", 200, Some("two-0")).await;

    // Deleting it takes the route away.
    assert!(api.delete("networking.k8s.io/v1", "Ingress", NS, "web"));
    let r = wait_answer(&proxy, "/a", 404, None).await;
    assert_eq!(r, Value::Null);

    // The one replica wrote the statuses, by server-side apply, once.
    let hostname = eventually("the tenant Ingress status", RELOAD_TIMEOUT, || async {
        let o = api
            .get(
                "networking.k8s.io/v1",
                "Ingress",
                "tenant-acme",
                "web.default",
            )
            .unwrap();
        match o["status"]["loadBalancer"]["ingress"][0]["hostname"].as_str() {
            Some(h) => Ok(h.to_string()),
            None => Err(o["status"].clone()),
        }
    })
    .await;
    assert_eq!(hostname, "web-default.acme.lb.localhost");
    let requests = api.requests();
    let status_writes: Vec<_> = requests
        .iter()
        .filter(|r| r.method == http::Method::PATCH && r.path.ends_with("/status"))
        .collect();
    assert!(
        status_writes
            .iter()
            .all(|r| r.param("fieldManager").as_deref() == Some("teapot-proxy"))
    );
    let tenant_writes = status_writes
        .iter()
        .filter(|r| r.path.contains("/namespaces/tenant-acme/"))
        .count();
    assert_eq!(tenant_writes, 1, "written once, not on every compile");
    let lease = status_lease(&api);
    assert!(lease["spec"]["holderIdentity"].is_string());

    // Otherwise the proxy only reads; Secrets by type (certificates, and
    // the Opaque ones of which it keeps CA Secrets' ca.crt).
    assert!(requests.iter().all(|r| r.method == http::Method::GET
        || r.path.ends_with("/status")
        || r.path.contains("/leases")));
    assert!(
        requests
            .iter()
            .filter(|r| r.path.ends_with("/secrets"))
            .all(|r| matches!(
                r.param("fieldSelector").as_deref(),
                Some("type=kubernetes.io/tls" | "type=Opaque")
            ))
    );

    // SIGTERM gives the status lease up, so a standby need not wait out
    // its 15 s.
    let mut proxy = proxy;
    proxy.terminate().expect("SIGTERM");
    assert!(proxy.wait(Duration::from_secs(20)).await.unwrap().success());
    let lease = status_lease(&api);
    assert!(
        lease["spec"]["holderIdentity"].is_null(),
        "released at shutdown: {lease}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_until_every_watch_has_listed() {
    // An API server that is not there: the watches never list, so the
    // proxy serves nothing and says so on /readyz.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url: http::Uri = format!("http://{}", dead.local_addr().unwrap())
        .parse()
        .unwrap();
    drop(dead);
    let client = kube::Client::try_from(kube::Config::new(url)).unwrap();
    let listeners =
        teapot_proxy::Listeners::bind(Some("127.0.0.1:0"), None, "127.0.0.1:0").unwrap();
    let admin = listeners.addrs().unwrap().admin;
    let mut config = teapot_proxy::ProxyConfig::new(Default::default());
    config.kube = Some(teapot_source::kube::KubeConfig::new(client));
    config.grace_period = Duration::from_secs(1);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(teapot_proxy::run(config, listeners, async move {
        let _ = stopped.await;
    }));
    let readyz = eventually("the admin listener answers", RELOAD_TIMEOUT, || async {
        let req = Request::get(&admin.to_string(), "/readyz");
        teapot_testkit::client::send(admin, &Transport::Plain, &req)
            .await
            .map(|r| r.status)
            .map_err(|e| e.to_string())
    })
    .await;
    assert_eq!(readyz, 503);
    let _ = stop.send(());
    tokio::time::timeout(RELOAD_TIMEOUT, task)
        .await
        .expect("the proxy stops")
        .unwrap()
        .unwrap();
}

/// Runs `teapot` with `args` and no `TEAPOT_MANIFESTS`; it must fail.
/// Returns what it said on stderr.
fn refused(args: &[&str]) -> String {
    let out = std::process::Command::new(teapot_bin())
        .args(args)
        .env_remove("TEAPOT_MANIFESTS")
        .output()
        .unwrap();
    assert!(!out.status.success(), "teapot {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifests_and_kube_flags_exclude_each_other() {
    let stderr = refused(&["proxy", "--kube", "--manifests", "/tmp"]);
    assert!(stderr.contains("not both"), "{stderr}");
    refused(&["proxy"]);
    let stderr = refused(&[
        "webhook",
        "--kube",
        "--manifests",
        "/tmp",
        "--domain",
        "example.net",
        "--cert",
        "/nonexistent",
        "--key",
        "/nonexistent",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(stderr.contains("not both"), "{stderr}");
    // `teapot validate` reads files only: --manifests is required.
    let stderr = refused(&["validate", "-f", "-", "--domain", "example.net"]);
    assert!(stderr.contains("--manifests"), "{stderr}");
}

/// `teapot proxy --kube` against the cluster `KUBECONFIG` names: applies
/// a Service, an EndpointSlice pointing at a local echo and an Ingress in
/// namespace `kube-e2e` (which must exist), then checks serve, update and
/// delete as above. The proxy runs on this machine, so the echo on
/// 127.0.0.1 is reachable (an operator namespace: no Tenant owns it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn real_cluster_serves_updates_and_deletes() {
    use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
    let client = kube::Client::try_default().await.expect("KUBECONFIG");
    let one = echo(NS, "svc-one", "one-0").await;
    let mut objects = echo_service(NS, "svc-one", &[&one]);
    objects.push(route("/", "svc-one"));
    let apply = |client: kube::Client, object: Value| async move {
        let (group, version) = object["apiVersion"]
            .as_str()
            .unwrap()
            .split_once('/')
            .unwrap_or(("", object["apiVersion"].as_str().unwrap()));
        let kind = object["kind"].as_str().unwrap();
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let resource = kube::api::ApiResource::from_gvk(&gvk);
        let api: Api<DynamicObject> = Api::namespaced_with(client, NS, &resource);
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        api.patch(
            &name,
            &PatchParams::apply("teapot-e2e").force(),
            &Patch::Apply(object),
        )
        .await
        .expect("server-side apply");
    };
    for o in objects {
        apply(client.clone(), o).await;
    }
    let kubeconfig = std::env::var("KUBECONFIG")
        .unwrap_or_else(|_| format!("{}/.kube/config", std::env::var("HOME").unwrap_or_default()));
    let args = ["--kube-namespace", NS];
    let proxy = ProxyProcess::start_kube(&teapot_bin(), Path::new(&kubeconfig), &args)
        .await
        .expect("teapot proxy --kube starts");
    wait_answer(&proxy, "/a", 200, Some("one-0")).await;
    let ingresses: Api<k8s_openapi::api::networking::v1::Ingress> =
        Api::namespaced(client.clone(), NS);
    ingresses
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    wait_answer(&proxy, "/a", 404, None).await;
}

/// The proxy's status-writer Lease.
fn status_lease(api: &ApiServer) -> Value {
    api.get(
        "coordination.k8s.io/v1",
        "Lease",
        "teapot-system",
        "teapot-proxy-status",
    )
    .expect("the status lease")
}

/// Gateway API in kube mode (docs/gateway-api-l4.md): a Gateway with a TCP
/// listener and a TCPRoute applied to the API double reach the proxy
/// (routed, in `/status`), and their status comes back on the objects by
/// server-side apply on `/status`, written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_api_objects_are_watched_routed_and_given_status() {
    use std::net::SocketAddr;
    use teapot_testkit::l4::{TcpEcho, TcpMode, free_port};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const GW: &str = "gateway.networking.k8s.io/v1";
    const GNS: &str = "kube-gw";
    let echo = TcpEcho::start(TcpMode::Echo).await.unwrap();
    let port = free_port("127.0.0.1".parse().unwrap()).unwrap();
    let api = ApiServer::start().await;
    api.apply(gateway_class());
    api.apply(
        json!({"apiVersion": GW, "kind": "Gateway", "metadata": {"name": "edge", "namespace": GNS},
                     "spec": {"gatewayClassName": "teapot",
                              "listeners": [{"name": "db", "port": port, "protocol": "TCP"}]}}),
    );
    api.apply(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db", "namespace": GNS},
                     "spec": {"ports": [{"name": "pg", "port": 5432}]}}),
    );
    api.apply(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                     "metadata": {"name": "db-1", "namespace": GNS,
                                  "labels": {"kubernetes.io/service-name": "db"}},
                     "addressType": "IPv4", "ports": [{"name": "pg", "port": echo.port()}],
                     "endpoints": [{"addresses": ["127.0.0.1"]}]}),
    );
    let proxy = ProxyProcess::start_kube(
        &teapot_bin(),
        api.kubeconfig_path(),
        &["--l4-pool", "default=127.0.0.1"],
    )
    .await
    .expect("teapot proxy --kube starts");
    // The route comes after the start: a watch event, not the first list.
    api.apply(
        json!({"apiVersion": GW, "kind": "TCPRoute", "metadata": {"name": "db", "namespace": GNS},
                     "spec": {"parentRefs": [{"name": "edge", "sectionName": "db"}],
                              "rules": [{"backendRefs": [{"name": "db", "port": 5432}]}]}}),
    );

    let status_json = || async {
        let (code, body) = proxy.admin_get("/status").await.expect("/status");
        assert_eq!(code, 200);
        serde_json::from_str::<Value>(&body).unwrap()
    };
    eventually(
        "the Gateway's listener in /status",
        RELOAD_TIMEOUT,
        || async {
            let status = status_json().await;
            let gateway = &status["l4"]["gateways"][0];
            let listener = &gateway["listeners"][0];
            if listener["state"] == "listening" && listener["attached_routes"] == 1 {
                Ok(())
            } else {
                Err(status["l4"].clone())
            }
        },
    )
    .await;
    let addr = SocketAddr::new("127.0.0.1".parse().unwrap(), port);
    let mut stream = tokio::time::timeout(RELOAD_TIMEOUT, tokio::net::TcpStream::connect(addr))
        .await
        .unwrap()
        .unwrap();
    stream.write_all(b"through the gateway").await.unwrap();
    stream.shutdown().await.unwrap();
    let mut back = Vec::new();
    tokio::time::timeout(RELOAD_TIMEOUT, stream.read_to_end(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, b"through the gateway");

    // Status on the objects, from the status writer.
    let gateway = eventually("Gateway status written", RELOAD_TIMEOUT, || async {
        let g = api.get(GW, "Gateway", GNS, "edge").unwrap();
        if g["status"]["listeners"][0]["attachedRoutes"] == 1 {
            Ok(g)
        } else {
            Err(g)
        }
    })
    .await;
    assert_eq!(gateway["status"]["addresses"][0]["value"], "127.0.0.1");
    let route = eventually("TCPRoute status written", RELOAD_TIMEOUT, || async {
        let r = api.get(GW, "TCPRoute", GNS, "db").unwrap();
        if r["status"]["parents"]
            .as_array()
            .is_some_and(|p| p.len() == 1)
        {
            Ok(r)
        } else {
            Err(r)
        }
    })
    .await;
    let parent = &route["status"]["parents"][0];
    assert_eq!(parent["controllerName"], "teapot.dev/gateway-controller");
    assert_eq!(parent["conditions"][0]["type"], "Accepted");
    assert_eq!(parent["conditions"][0]["status"], "True");
    assert_eq!(
        parent["conditions"][0]["observedGeneration"],
        route["metadata"]["generation"]
    );
    // Written once each: later compiles find the objects up to date.
    let status_patches = |kind: &str| {
        api.requests()
            .iter()
            .filter(|r| {
                r.method == http::Method::PATCH
                    && r.path.contains(kind)
                    && r.path.ends_with("/status")
            })
            .count()
    };
    let before = (status_patches("/gateways/"), status_patches("/tcproutes/"));
    // Another compile (a new object elsewhere) must not write them again.
    api.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "other", "namespace": GNS},
                     "spec": {"ports": [{"port": 80}]}}));
    let generation = status_json().await["generation"].as_u64().unwrap();
    eventually("a compile after the change", RELOAD_TIMEOUT, || async {
        let g = status_json().await["generation"].as_u64().unwrap();
        if g > generation { Ok(()) } else { Err(g) }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The Gateway's first status may precede the route (attachedRoutes 0).
    assert!(before.0 <= 2 && before.1 == 1, "{before:?}");
    assert_eq!(
        (status_patches("/gateways/"), status_patches("/tcproutes/")),
        before
    );
    // No write to the main resources.
    let writes = api
        .requests()
        .iter()
        .filter(|r| r.method != http::Method::GET && r.path.contains("gateway.networking.k8s.io"))
        .filter(|r| !r.path.ends_with("/status"))
        .count();
    assert_eq!(writes, 0);
}

/// A pod restarted elsewhere: its EndpointSlice changes in the API, and
/// the proxy moves traffic without a compile (the kube source hands the
/// slice over alone, `KubeSource::take_slice_changes`), while a change of
/// anything else still compiles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_slice_change_from_the_api_is_served_without_a_compile() {
    let api = ApiServer::start().await;
    let a = echo(NS, "web", "web-a").await;
    let b = echo(NS, "web", "web-b").await;
    backends(&api, &[("web", &a)]);
    api.apply(route("/", "web"));
    let proxy = ProxyProcess::start_kube(&teapot_bin(), api.kubeconfig_path(), &[])
        .await
        .expect("teapot proxy --kube starts and becomes ready");
    wait_answer(&proxy, "/", 200, Some("web-a")).await;
    let counter = |name: &'static str| {
        let proxy = &proxy;
        async move {
            let (_, text) = proxy.admin_get("/metrics").await.expect("metrics");
            metric(&text, name).unwrap_or(0.0)
        }
    };
    // The proxy's own status write comes back as an Ingress event, which
    // changes nothing a compile reads.
    eventually("the Ingress status written", RELOAD_TIMEOUT, || async {
        let o = api
            .get("networking.k8s.io/v1", "Ingress", NS, "web")
            .unwrap();
        match o["status"]["loadBalancer"]["ingress"].as_array() {
            Some(a) if !a.is_empty() => Ok(()),
            _ => Err(o["status"].to_string()),
        }
    })
    .await;
    let mut reloads = counter("teapot_reloads_total").await;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = counter("teapot_reloads_total").await;
        if now == reloads {
            break;
        }
        reloads = now;
    }
    assert_eq!(
        reloads, 1.0,
        "the first compile only: a status write compiles nothing"
    );
    let updates = counter("teapot_endpoint_updates_total").await;

    let moved = echo_service(NS, "web", &[&b]).pop().expect("the slice");
    api.apply(moved);
    wait_answer(&proxy, "/", 200, Some("web-b")).await;
    assert_eq!(counter("teapot_reloads_total").await, reloads, "no compile");
    assert_eq!(
        counter("teapot_endpoint_updates_total").await,
        updates + 1.0
    );

    // The route itself changed: compiled.
    api.apply(route("/b", "web"));
    wait_answer(&proxy, "/", 404, None).await;
    assert!(counter("teapot_reloads_total").await > reloads);
}
