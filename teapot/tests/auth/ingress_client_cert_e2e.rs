//! ingress-nginx's client certificates (`auth-tls-*`) through the real
//! binary, on HTTP/1.1 and HTTP/2 over TLS: the handshake asks for a
//! certificate and the request is answered as ingress-nginx answers it
//! (400 without a valid one, served without one when optional, a redirect
//! to the error page, 403 for a subject `auth-tls-match-cn` refuses, the
//! certificate passed to the backend when asked).

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use common::client_cert::{ClientIdentity, Version, get};
use common::*;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::{Value, json};
use teapot_testkit::certs::{CertifiedPem, TestCa, ca_secret_yaml, tls_secret_yaml};
use tokio::net::TcpStream;

const NS: &str = "ops";
const ERROR_PAGE: &str = "https://login.example/cert-error";

/// (host, annotations after the prefix) of the Ingresses under test.
const INGRESSES: &[(&str, &[(&str, &str)])] = &[
    (
        "on.test",
        &[
            ("auth-tls-secret", "ops/client-ca"),
            ("auth-tls-verify-client", "on"),
        ],
    ),
    (
        "optional.test",
        &[
            ("auth-tls-secret", "ops/client-ca"),
            ("auth-tls-verify-client", "optional"),
        ],
    ),
    (
        "error-page.test",
        &[
            ("auth-tls-secret", "ops/client-ca"),
            ("auth-tls-error-page", ERROR_PAGE),
        ],
    ),
    (
        "pass.test",
        &[
            ("auth-tls-secret", "ops/client-ca"),
            ("auth-tls-pass-certificate-to-upstream", "true"),
        ],
    ),
    (
        "cn.test",
        &[
            ("auth-tls-secret", "ops/client-ca"),
            ("auth-tls-match-cn", "CN=(alice|carol)"),
        ],
    ),
];

/// The echo's headers named `name`, whatever their case.
fn echoed<'a>(echo: &'a Value, name: &str) -> Vec<&'a str> {
    echo["headers"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .flat_map(|(_, v)| v.as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect()
}

/// The identity a client presents with `pem`, or none.
fn identity(pem: Option<&CertifiedPem>) -> Option<ClientIdentity> {
    pem.map(ClientIdentity::from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_asked_verified_and_passed_on() {
    let server_ca = TestCa::new("site CA");
    let clients = TestCa::new("client CA");
    let strangers = TestCa::new("another CA");
    let alice = clients.issue_client("alice");
    let bob = clients.issue_client("bob");
    let stranger = strangers.issue_client("alice");
    let hosts: Vec<&str> = INGRESSES.iter().map(|(h, _)| *h).collect();
    let site = server_ca.issue(&hosts);

    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    for (host, annotations) in INGRESSES {
        let mut ingress = annotated(NS, host, "web", annotations);
        ingress["spec"]["tls"] = json!([{"hosts": [host], "secretName": "site"}]);
        objects.push(ingress);
    }
    let manifests = format!(
        "{}\n---\n{}\n---\n{}",
        docs(&objects),
        tls_secret_yaml(NS, "site", &site),
        ca_secret_yaml(NS, "client-ca", clients.cert_pem()),
    );
    let h = Harness::start(&[("manifests.yaml", manifests)]).await;
    let status = h
        .wait_status("every Ingress reported", |s| {
            INGRESSES
                .iter()
                .all(|(host, _)| ingress_report(s, NS, host).is_some())
        })
        .await;
    for (host, _) in INGRESSES {
        let report = ingress_report(&status, NS, host).unwrap();
        let accepted = condition(report, "Accepted").expect("Accepted");
        assert_eq!(accepted["status"], "True", "{host}: {report:#}");
    }
    let addr = h.proxy.https;

    for version in [Version::Http1, Version::Http2] {
        macro_rules! at {
            ($host:expr, $client:expr) => {
                get(
                    addr,
                    &server_ca,
                    ($host, $host),
                    identity($client).as_ref(),
                    version,
                    &[],
                )
            };
        }
        // on: a certificate of the CA is served; none, or another CA's,
        // gets 400 from teapot (the backend never sees it).
        let ok = at!("on.test", Some(&alice)).await.unwrap();
        assert_eq!(ok.status, 200, "{version:?}");
        assert_eq!(ok.echo()["path"], "/who", "{version:?}");
        for (what, client) in [("no certificate", None), ("another CA", Some(&stranger))] {
            let refused = at!("on.test", client).await.unwrap_or_else(|e| {
                panic!("{version:?} {what}: answered 400, not refused in the handshake: {e}")
            });
            assert_eq!(refused.status, 400, "{version:?} {what}");
        }
        // optional: no certificate is served; a bad one is not.
        let served = at!("optional.test", None).await.unwrap();
        assert_eq!(served.status, 200, "{version:?}");
        assert_eq!(
            at!("optional.test", Some(&alice)).await.unwrap().status,
            200
        );
        let bad = at!("optional.test", Some(&stranger)).await.unwrap();
        assert_eq!(bad.status, 400, "{version:?}");
        // The error page instead of 400.
        let redirected = at!("error-page.test", None).await.unwrap();
        assert_eq!(redirected.status, 302, "{version:?}");
        assert_eq!(redirected.headers["location"], ERROR_PAGE, "{version:?}");
        assert_eq!(
            at!("error-page.test", Some(&alice)).await.unwrap().status,
            200
        );
        // The certificate reaches the backend, URL-escaped PEM.
        let passed = at!("pass.test", Some(&alice)).await.unwrap();
        assert_eq!(passed.status, 200, "{version:?}");
        let echo = passed.echo();
        let cert = echoed(&echo, "ssl-client-cert");
        assert_eq!(cert.len(), 1, "{version:?}: {echo:#}");
        assert!(
            cert[0].starts_with("-----BEGIN%20CERTIFICATE-----"),
            "{version:?}: {}",
            cert[0]
        );
        let escaped_body = alice.cert_pem.lines().nth(1).unwrap();
        assert!(
            cert[0].contains(&escaped_body.replace('/', "%2F").replace('+', "%2B"))
                || cert[0].contains(escaped_body),
            "{version:?}: the certificate's own bytes"
        );
        assert_eq!(
            echoed(&echo, "ssl-client-verify"),
            ["SUCCESS"],
            "{version:?}"
        );
        // Without the annotation nothing is passed.
        let plain = at!("on.test", Some(&alice)).await.unwrap().echo();
        assert!(echoed(&plain, "ssl-client-cert").is_empty(), "{version:?}");
        // The subject must match.
        assert_eq!(at!("cn.test", Some(&alice)).await.unwrap().status, 200);
        let wrong = at!("cn.test", Some(&bob)).await.unwrap();
        assert_eq!(wrong.status, 403, "{version:?}");
    }
    // Plain HTTP asks for no certificate: sent to HTTPS, never served.
    for host in ["on.test", "optional.test"] {
        let resp = h.get(host, "/who").await;
        assert_eq!(resp.status, 308, "{host}: {}", resp.text());
        assert_eq!(header(&resp, "location"), format!("https://{host}/who"));
    }
    // Refused requests never reached the backend: only the served ones
    // did (per version: on, optional twice, error-page, pass, on, cn).
    assert_eq!(
        backend.requests(),
        2 * 7,
        "refused requests stay at the edge"
    );
}

/// A client certificate cannot carry a request to a host whose setting
/// did not verify it: a connection verified for `on.test` asking for
/// `optional.test` is refused (421) rather than served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_is_not_carried_to_another_hosts_setting() {
    let server_ca = TestCa::new("site CA");
    let clients = TestCa::new("client CA");
    let others = TestCa::new("other client CA");
    let alice = clients.issue_client("alice");
    let site = server_ca.issue(&["a.test", "b.test"]);
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    for (host, ca) in [("a.test", "ops/client-ca"), ("b.test", "ops/other-ca")] {
        let mut ingress = annotated(NS, host, "web", &[("auth-tls-secret", ca)]);
        ingress["spec"]["tls"] = json!([{"hosts": [host], "secretName": "site"}]);
        objects.push(ingress);
    }
    let manifests = format!(
        "{}\n---\n{}\n---\n{}\n---\n{}",
        docs(&objects),
        tls_secret_yaml(NS, "site", &site),
        ca_secret_yaml(NS, "client-ca", clients.cert_pem()),
        ca_secret_yaml(NS, "other-ca", others.cert_pem()),
    );
    let h = Harness::start(&[("manifests.yaml", manifests)]).await;
    h.wait_status("both Ingresses reported", |s| {
        ingress_report(s, NS, "a.test").is_some() && ingress_report(s, NS, "b.test").is_some()
    })
    .await;
    // SNI a.test (alice verifies there), Host b.test (whose CA is another).
    let answer = get_mismatched(h.proxy.https, &server_ca, "a.test", "b.test", &alice).await;
    assert_eq!(answer, 421, "SNI a.test, Host b.test");
    assert_eq!(backend.requests(), 0);
}

/// One HTTP/1.1 GET with SNI `sni` and `Host: host`; the status.
async fn get_mismatched(
    addr: SocketAddr,
    server_ca: &TestCa,
    sni: &str,
    host: &str,
    client: &CertifiedPem,
) -> u16 {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(server_ca.cert_der().to_vec()))
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(
        vec![CertificateDer::from(client.cert_der.clone())],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(client.key_der.clone())),
    )
    .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let exchange = async {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from(sni.to_string()).unwrap(), tcp)
            .await
            .expect("handshake");
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = http::Request::builder()
            .uri("/")
            .header("host", host)
            .body(Empty::<Bytes>::new())
            .unwrap();
        sender.send_request(req).await.unwrap().status().as_u16()
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .expect("answered in time")
}
