//! Tenant namespaces end to end: assigned hostnames, scoping, custom
//! domains proven through a real DNS server (Debian's
//! `pebble-challtestsrv`, records set through its management API), a lost
//! proof, and endpoints the proxy refuses for a tenant.
//!
//! Tenant endpoints may never be loopback, so the backends here are
//! refused by design: a routed host answers 503 ("no ready endpoint"), a
//! host that is not routed answers 404. No traffic leaves the machine.

use std::time::{Duration, Instant};

use teapot_testkit::client::{Request, Transport, send};
use teapot_testkit::pebble::ChallTestSrv;
use teapot_testkit::process::ProxyProcess;

const MANIFESTS: &str = r#"
apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec:
  cluster: acme
  allowedDomains: [granted.example.com]
  nodeCIDRs: [10.1.0.0/24]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: tenant-acme}
spec: {ports: [{port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: tenant-acme, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints: [{addresses: ["127.0.0.1"]}]
ports: [{name: "", port: 9}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web.shop, namespace: tenant-acme}
spec:
  ingressClassName: teapot
  defaultBackend: {service: {name: web, port: {number: 80}}}
  rules:
  - host: www.granted.example.com
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
  - host: cname.acme-corp.test
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
  - host: txt.acme-corp.test
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
  - host: unproven.acme-corp.test
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
---
# Squatting another tenant's zone: refused as a whole, like the webhook would.
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: squat.shop, namespace: tenant-acme}
spec:
  ingressClassName: teapot
  rules:
  - host: web.other.lb.example.net
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
"#;

async fn status_of(proxy: &ProxyProcess, host: &str) -> u16 {
    send(proxy.http, &Transport::Plain, &Request::get(host, "/"))
        .await
        .expect("request")
        .status
}

async fn wait_for(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_domains_route_only_once_dns_proves_them() {
    let dns = ChallTestSrv::start("127.0.0.1")
        .await
        .expect("pebble-challtestsrv starts");
    dns.set_cname("cname.acme-corp.test", "web-shop.acme.lb.example.net")
        .await
        .unwrap();
    dns.set_txt("_teapot.txt.acme-corp.test", "teapot-tenant=acme")
        .await
        .unwrap();
    // Another tenant's token proves nothing for acme.
    dns.set_txt("_teapot.unproven.acme-corp.test", "teapot-tenant=other")
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tenant.yaml"), MANIFESTS).unwrap();
    let dns_arg = dns.dns.to_string();
    let proxy = ProxyProcess::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_teapot")),
        dir.path(),
        &[
            "--domain",
            "example.net",
            "--dns-server",
            &dns_arg,
            "--proof-recheck-pending",
            "1",
            "--proof-recheck-proven",
            "1",
            "--proof-grace",
            "2",
        ],
    )
    .await
    .expect("proxy starts");

    // Own zone and granted domains route at once; routed hosts answer 503
    // because the tenant's only endpoint (loopback) is refused.
    assert_eq!(status_of(&proxy, "web-shop.acme.lb.example.net").await, 503);
    assert_eq!(status_of(&proxy, "www.granted.example.com").await, 503);
    // Another tenant's zone and unrelated hosts never route.
    assert_eq!(status_of(&proxy, "web.other.lb.example.net").await, 404);
    assert_eq!(status_of(&proxy, "elsewhere.test").await, 404);

    wait_for("CNAME and TXT proofs", async || {
        status_of(&proxy, "cname.acme-corp.test").await == 503
            && status_of(&proxy, "txt.acme-corp.test").await == 503
    })
    .await;
    assert_eq!(status_of(&proxy, "unproven.acme-corp.test").await, 404);

    let (_, body) = proxy.admin_get("/status").await.unwrap();
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let domains = status["domains"].as_array().unwrap();
    let domain = |h: &str| domains.iter().find(|d| d["host"] == h).unwrap().clone();
    assert_eq!(domain("cname.acme-corp.test")["routed"], true);
    assert!(
        domain("cname.acme-corp.test")["detail"]
            .as_str()
            .unwrap()
            .starts_with("CNAME")
    );
    assert_eq!(domain("txt.acme-corp.test")["routed"], true);
    assert_eq!(domain("unproven.acme-corp.test")["routed"], false);
    let problem = |object: &str| {
        status["problems"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["object"] == object)
            .unwrap_or_else(|| panic!("{object} is reported: {body}"))
            .clone()
    };
    // The loopback endpoint is refused with its slice, as the webhook would.
    let slice = problem("EndpointSlice tenant-acme/web-1");
    assert!(
        slice["message"].as_str().unwrap().contains("127.0.0.1"),
        "{slice}"
    );
    let squat = problem("Ingress tenant-acme/squat.shop");
    assert_eq!(squat["field"], "spec.rules[0].host");
    assert!(
        squat["message"]
            .as_str()
            .unwrap()
            .contains("outside your own subtree"),
        "{squat}"
    );
    let ingress = status["ingresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "web.shop")
        .unwrap();
    assert_eq!(
        ingress["status"]["loadBalancer"]["ingress"][0]["hostname"],
        "web-shop.acme.lb.example.net"
    );

    // The proof disappears: routing continues through the grace period,
    // then stops.
    dns.clear_txt("_teapot.txt.acme-corp.test").await.unwrap();
    let cleared = Instant::now();
    wait_for("the lost proof to stop routing", async || {
        status_of(&proxy, "txt.acme-corp.test").await == 404
    })
    .await;
    assert!(
        cleared.elapsed() >= Duration::from_secs(1),
        "routing stopped before the grace period: {:?}",
        cleared.elapsed()
    );
    assert_eq!(status_of(&proxy, "cname.acme-corp.test").await, 503);
}
