//! One wildcard certificate per tenant cluster, by DNS-01 against the
//! fleet's own DNS server (`--dns-acme-wildcards`, docs/dns.md), with
//! Debian's `pebble` as the CA resolving through teapot's DNS listener
//! (`-dnsserver`): nothing else answers `_acme-challenge.acme.lb.example.net`,
//! so an issued certificate proves teapot published the TXT records and
//! answered them.
//!
//! Two replicas share the state directory: B starts first and holds the
//! issuer role, pebble asks A's DNS listener only, so the certificate also
//! proves that the replica that is not the issuer answers the challenges
//! the issuer wrote. Then a second Ingress of the same cluster is served
//! by SNI with that certificate at once, and no order follows.
//!
//! Every wait polls for a condition with a generous bound; nothing asserts
//! on elapsed time.

use crate::common;

use std::time::Duration;

use common::{Harness, eventually, metric};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::json;
use teapot_testkit::certs::cert_matches_hostname;
use teapot_testkit::client::{Request, Transport, send};
use teapot_testkit::pebble::{Pebble, PebbleOptions};
use teapot_testkit::process::ProxyProcess;

const ISSUE_TIMEOUT: Duration = Duration::from_secs(180);
const WEB: &str = "web-shop.acme.lb.example.net";
const API: &str = "api-shop.acme.lb.example.net";
const CLUSTER: &str = "acme.lb.example.net";

/// The tenant `acme` with an Ingress per name, each with its assigned
/// hostname as TLS host; `--acme-default-tenants` opts them in.
fn tenant_objects(ingresses: &[(&str, &str)]) -> String {
    let mut docs = vec![
        common::tenant("acme"),
        common::service("tenant-acme", "web", &[(None, 80)]),
    ];
    for (name, host) in ingresses {
        let backend = common::backend("web", common::Port::Number(80));
        let mut ingress = common::ingress(
            "tenant-acme",
            name,
            json!({
                "defaultBackend": backend,
                "tls": [{ "hosts": [host], "secretName": format!("{}-tls", name.replace('.', "-")) }],
            }),
        );
        ingress["metadata"]["annotations"] = json!({});
        docs.push(ingress);
    }
    common::docs(&docs)
}

/// The leaf `proxy` presents for `sni`, verified against `root` (DER).
async fn verified_leaf(proxy: &ProxyProcess, sni: &str, root: &[u8]) -> Result<Vec<u8>, String> {
    let transport = Transport::tls_verified(sni, &[root]);
    let resp = send(proxy.https, &transport, &Request::get(sni, "/"))
        .await
        .map_err(|e| e.to_string())?;
    Ok(resp.peer_certificates[0].clone())
}

async fn metric_of(h: &Harness, name: &str) -> f64 {
    metric(&h.metrics().await, name).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dns01_wildcard_serves_every_assigned_hostname_of_a_cluster() {
    // Pebble's addresses first (teapot's flags name its directory); its
    // DNS server is teapot's, known once teapot listens.
    let mut pebble = Pebble::configure(PebbleOptions {
        http_port: 1,
        dns: "127.0.0.1:1".parse().unwrap(),
        validity: Duration::from_secs(3600),
    })
    .expect("pebble is installed");
    let state = tempfile::tempdir().unwrap();
    let directory = pebble.directory();
    let mut args = vec![
        "--domain",
        "example.net",
        "--dns-listen",
        "127.0.0.1:0",
        "--dns-address",
        "127.0.0.1",
        "--dns-acme-wildcards",
        "--acme-directory",
        &directory,
        "--acme-root",
        pebble.api_root_file().to_str().unwrap(),
        "--acme-state-dir",
        state.path().to_str().unwrap(),
        "--acme-default-tenants",
    ];
    args.extend(common::QUICK_ACME);
    let files = [("tenant.yaml", tenant_objects(&[("web.shop", WEB)]))];
    let b = Harness::start_with_args(&files, &args).await;
    eventually("B is the issuer", ISSUE_TIMEOUT, || async {
        let v = metric_of(&b, "teapot_acme_issuer").await;
        if v == 1.0 { Ok(()) } else { Err(v) }
    })
    .await;
    let h = Harness::start_with_args(&files, &args).await;
    assert_eq!(
        metric_of(&h, "teapot_acme_issuer").await,
        0.0,
        "the role is B's"
    );
    pebble.set_dns(h.proxy.dns.expect("DNS listener"));
    pebble.restart().await.expect("pebble starts");
    let root_pem = pebble.issued_root().await.unwrap();
    let root = CertificateDer::from_pem_slice(root_pem.as_bytes())
        .expect("PEM root")
        .to_vec();

    let leaf = eventually(
        "a certificate for the assigned hostname",
        ISSUE_TIMEOUT,
        || async { verified_leaf(&h.proxy, WEB, &root).await },
    )
    .await;
    // The cluster's wildcard and its own name, not the host alone.
    assert!(cert_matches_hostname(
        &leaf,
        "any-other.acme.lb.example.net"
    ));
    assert!(cert_matches_hostname(&leaf, CLUSTER));
    assert!(!cert_matches_hostname(&leaf, "a.b.acme.lb.example.net"));
    assert!(state.path().join(format!("hosts/{CLUSTER}.pem")).is_file());
    assert_eq!(metric_of(&b, "teapot_acme_issued_total").await, 1.0);
    assert_eq!(metric_of(&h, "teapot_acme_orders_total").await, 0.0);
    let orders = metric_of(&b, "teapot_acme_orders_total").await;

    // A second Ingress of the cluster: the same certificate at once.
    let both = tenant_objects(&[("web.shop", WEB), ("api.shop", API)]);
    // A newer generation alone does not say the file was read: the ACME
    // loop also swaps snapshots in (the certificate B wrote), and one of
    // those can land between the write and the reload.
    for replica in [&b, &h] {
        replica.apply("tenant.yaml", &both).await;
        replica
            .wait_status("the second Ingress is compiled", |s| {
                common::ingress_report(s, "tenant-acme", "api.shop").is_some()
            })
            .await;
    }
    let second = verified_leaf(&h.proxy, API, &root)
        .await
        .expect("the new hostname is served with the cluster's certificate");
    assert_eq!(second, leaf);
    // Another pass of the issuer (it scans every second) orders nothing.
    let status = h
        .wait_status("CertificateReady on the second Ingress", |s| {
            common::ingress_report(s, "tenant-acme", "api.shop")
                .and_then(|r| common::condition(r, "CertificateReady"))
                .is_some_and(|c| c["status"] == "True")
        })
        .await;
    let report = common::ingress_report(&status, "tenant-acme", "api.shop").unwrap();
    let condition = common::condition(report, "CertificateReady").unwrap();
    assert_eq!(condition["reason"], "Issued", "{condition}");
    assert_eq!(
        verified_leaf(&b.proxy, API, &root).await.unwrap(),
        leaf,
        "both replicas serve the one certificate"
    );
    assert_eq!(metric_of(&b, "teapot_acme_orders_total").await, orders);
    assert_eq!(metric_of(&b, "teapot_acme_issued_total").await, 1.0);
}
