//! Backends that speak TLS, gRPC or both, as ingress-nginx's
//! `backend-protocol` and `proxy-ssl-*` annotations ask
//! (proxy/src/plane/upstream_tls.rs): real backends on 127.0.0.1 with
//! CA-signed certificates, reached through `teapot proxy` from HTTP/1.1
//! and from HTTP/2 over TLS.
//!
//! - HTTPS with verification on passes for the Service's default name and
//!   for `proxy-ssl-name` (sent as SNI with `proxy-ssl-server-name: on`);
//!   a wrong CA or a wrong name answers 502 while the good routes are
//!   still served; verification off (the default) connects; a missing
//!   Secret is reported on the Ingress and answers 503.
//! - A backend that requires a client certificate sees the Secret's.
//! - An Opaque Secret with `ca.crt` alone verifies the backend without a
//!   client certificate; one with the wrong CA answers 502.
//! - GRPC (h2c) and GRPCS (HTTP/2 over TLS) carry a gRPC-shaped POST and
//!   its trailers; over HTTP/1 they answer 502.
//! - Gateway API: BackendTLSPolicy verification, SNI and subjectAltNames,
//!   and the Gateway's `spec.tls.backend.clientCertificateRef` presented to
//!   a backend that requires a client certificate.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::tls_backend::{server_config, service_at, tls_ingress};
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use teapot_testkit::certs::{self, CertifiedPem, TestCa};
use tokio::net::TcpListener;

const NS: &str = "bt";
/// The name a backend's certificate must carry by default: the Service's
/// `SERVICE.NAMESPACE.svc`.
const DEFAULT_NAME: &str = "web.bt.svc";

/// A TLS backend: accepted TLS connections, and the server it runs.
struct TlsBackend {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

/// An HTTPS (HTTP/1.1) backend answering every request with what it saw:
/// `sni=<name|-> client=<yes|no> path=<path> xfp=<x-forwarded-proto>`.
async fn https_backend(cert: &CertifiedPem, client_ca: Option<&TestCa>) -> TlsBackend {
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config(cert, client_ca, &[b"http/1.1"]));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                counter.fetch_add(1, Ordering::SeqCst);
                let (_, connection) = tls.get_ref();
                let sni = connection.server_name().unwrap_or("-").to_string();
                let client = if connection.peer_certificates().is_some() {
                    "yes"
                } else {
                    "no"
                };
                let service = hyper::service::service_fn(move |req: http::Request<_>| {
                    let xfp = req
                        .headers()
                        .get("x-forwarded-proto")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-")
                        .to_string();
                    let body = format!(
                        "sni={sni} client={client} path={} xfp={xfp}",
                        req.uri().path()
                    );
                    async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from(body),
                        )))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    TlsBackend { addr, accepted }
}

/// An HTTP/2 backend, over TLS (ALPN h2) with `cert` or else cleartext
/// (h2c): each gRPC-shaped call is answered with its request body back,
/// `x-seen-content-type` and the trailers `grpc-status: 0` and
/// `x-scheme` (the `:scheme` it was sent).
async fn grpc_backend(cert: Option<&CertifiedPem>) -> SocketAddr {
    let acceptor = cert.map(|c| tokio_rustls::TlsAcceptor::from(server_config(c, None, &[b"h2"])));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    |req: http::Request<hyper::body::Incoming>| async move {
                        let content_type = req
                            .headers()
                            .get("content-type")
                            .cloned()
                            .unwrap_or(http::HeaderValue::from_static("-"));
                        let scheme = req.uri().scheme_str().unwrap_or("-").to_string();
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let mut trailers = http::HeaderMap::new();
                        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                        trailers.insert("x-scheme", scheme.parse().unwrap());
                        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> =
                            vec![Ok(Frame::data(body)), Ok(Frame::trailers(trailers))];
                        let body = http_body_util::StreamBody::new(futures::stream::iter(frames));
                        let resp = http::Response::builder()
                            .header("content-type", "application/grpc")
                            .header("x-seen-content-type", content_type)
                            .body(body)
                            .unwrap();
                        Ok::<_, std::convert::Infallible>(resp)
                    },
                );
                let builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                match acceptor {
                    Some(acceptor) => {
                        if let Ok(tls) = acceptor.accept(tcp).await {
                            let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                        }
                    }
                    None => {
                        let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
                    }
                }
            });
        }
    });
    addr
}

/// GET `host/path` over HTTP/1.1 (plain listener); status and body.
/// The proxy's files: `objects`, the front certificate, and the Secret
/// `backend-ca` holding `client` (the certificate teapot presents) and
/// `ca`'s certificate as `ca.crt`.
fn files(
    objects: &[Value],
    front_cert: &CertifiedPem,
    client: &CertifiedPem,
    ca: &TestCa,
) -> Vec<(&'static str, String)> {
    vec![
        ("m.yaml", docs(objects)),
        (
            "front.yaml",
            certs::tls_secret_yaml(NS, "front", front_cert),
        ),
        (
            "ca.yaml",
            certs::tls_secret_with_ca_yaml(NS, "backend-ca", client, ca.cert_pem()),
        ),
    ]
}

async fn h1(h: &Harness, host: &str, path: &str) -> (u16, String) {
    let resp = h.get(host, path).await;
    (resp.status, resp.text())
}

/// `req` over HTTP/2 with TLS (the HTTPS listener) to `host`: the
/// response head and its whole body (with trailers).
async fn h2_exchange(
    h: &Harness,
    front: &TestCa,
    host: &str,
    req: http::Request<Full<Bytes>>,
) -> (http::response::Parts, http_body_util::Collected<Bytes>) {
    let c = H2Connection::open(h.proxy.https, host, &[front.cert_der()]).await;
    let mut sender = c.sender.clone();
    let exchange = async {
        sender.ready().await.unwrap();
        let (parts, body) = sender.send_request(req).await.unwrap().into_parts();
        (parts, body.collect().await.unwrap())
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .expect("h2 request timed out")
}

/// GET `host/path` over HTTP/2 with TLS; status and body.
async fn h2(h: &Harness, front: &TestCa, host: &str, path: &str) -> (u16, String) {
    let req = http::Request::builder()
        .uri(format!("https://{host}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, body) = h2_exchange(h, front, host, req).await;
    let body = body.to_bytes();
    (
        parts.status.as_u16(),
        String::from_utf8_lossy(&body).to_string(),
    )
}

/// Waits until `host` answers 200 over HTTP/1.1.
async fn served(h: &Harness, host: &str) {
    eventually(host, Duration::from_secs(10), || async {
        match h1(h, host, "/ready").await {
            (200, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_backends_are_verified_and_refused_by_their_settings() {
    let ca = TestCa::new("backend CA");
    let other_ca = TestCa::new("another CA");
    let front = TestCa::new("front CA");
    let backend_cert = ca.issue(&[DEFAULT_NAME, "backend.internal"]);
    let web = https_backend(&backend_cert, None).await;
    let client = ca.issue_client("teapot-client");
    let mut objects = service_at(NS, "web", web.addr);
    let verify = [
        ("backend-protocol", "HTTPS"),
        ("proxy-ssl-secret", "bt/backend-ca"),
        ("proxy-ssl-verify", "on"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut all = verify.to_vec();
        all.extend_from_slice(extra);
        all
    };
    objects.extend([
        tls_ingress(NS, "verified", "verified.bt.test", "web", &verify),
        tls_ingress(
            NS,
            "named",
            "named.bt.test",
            "web",
            &with(&[
                ("proxy-ssl-name", "backend.internal"),
                ("proxy-ssl-server-name", "on"),
            ]),
        ),
        tls_ingress(
            NS,
            "wrong-name",
            "wrong-name.bt.test",
            "web",
            &with(&[("proxy-ssl-name", "elsewhere.internal")]),
        ),
        tls_ingress(
            NS,
            "wrong-ca",
            "wrong-ca.bt.test",
            "web",
            &[
                ("backend-protocol", "HTTPS"),
                ("proxy-ssl-secret", "bt/other-ca"),
                ("proxy-ssl-verify", "on"),
            ],
        ),
        tls_ingress(
            NS,
            "unverified",
            "unverified.bt.test",
            "web",
            &[("backend-protocol", "HTTPS")],
        ),
        tls_ingress(
            NS,
            "missing",
            "missing.bt.test",
            "web",
            &[
                ("backend-protocol", "HTTPS"),
                ("proxy-ssl-secret", "bt/nowhere"),
                ("proxy-ssl-verify", "on"),
            ],
        ),
    ]);
    let front_cert = front.issue(&["*.bt.test"]);
    let mut files = files(&objects, &front_cert, &client, &ca);
    files.push((
        "other.yaml",
        certs::tls_secret_with_ca_yaml(NS, "other-ca", &client, other_ca.cert_pem()),
    ));
    let h = Harness::start_with_args(&files, &["--threads", "1"]).await;
    served(&h, "verified.bt.test").await;

    // Verified for the Service's name; no SNI unless asked for; no client
    // certificate where the backend asks for none.
    let got = h1(&h, "verified.bt.test", "/a").await;
    assert_eq!(got, (200, "sni=- client=no path=/a xfp=http".into()));
    let got = h2(&h, &front, "verified.bt.test", "/b").await;
    assert_eq!(got, (200, "sni=- client=no path=/b xfp=https".into()));
    // proxy-ssl-name is verified and sent as SNI.
    let got = h1(&h, "named.bt.test", "/c").await;
    assert_eq!(
        got,
        (
            200,
            "sni=backend.internal client=no path=/c xfp=http".into()
        )
    );
    let got = h2(&h, &front, "named.bt.test", "/d").await;
    assert_eq!(got.0, 200, "{got:?}");
    // Verification off, ingress-nginx's default: connected all the same.
    let got = h1(&h, "unverified.bt.test", "/e").await;
    assert_eq!(got, (200, "sni=- client=no path=/e xfp=http".into()));

    // A wrong name or a wrong CA: 502 on both versions, never unverified.
    for host in ["wrong-name.bt.test", "wrong-ca.bt.test"] {
        let (status, body) = h1(&h, host, "/x").await;
        assert_eq!(status, 502, "{host}: {body}");
        let (status, body) = h2(&h, &front, host, "/x").await;
        assert_eq!(status, 502, "{host}: {body}");
    }
    // The good routes are still served, and the failures were counted for
    // their routes; the endpoint was not ejected for them.
    assert_eq!(h1(&h, "verified.bt.test", "/f").await.0, 200);
    assert_eq!(h2(&h, &front, "verified.bt.test", "/g").await.0, 200);
    let metrics = h.metrics().await;
    let failures = metrics
        .lines()
        .filter(|l| l.starts_with("teapot_tenant_upstream_tls_handshake_failures_total{"))
        .collect::<Vec<_>>();
    assert!(
        failures.iter().any(|l| l.contains("route=\"bt/wrong-ca\"")),
        "{failures:?}"
    );
    assert!(
        failures
            .iter()
            .any(|l| l.contains("route=\"bt/wrong-name\"")),
        "{failures:?}"
    );

    // A Secret that is not there: 503, and the Ingress says why.
    let (status, body) = h1(&h, "missing.bt.test", "/x").await;
    assert_eq!(status, 503, "{body}");
    let status = h.status().await;
    let report = ingress_report(&status, NS, "missing").expect("missing's report");
    let condition = condition(report, "AnnotationsAccepted").expect("AnnotationsAccepted");
    let message = condition["message"].as_str().unwrap_or("");
    assert!(
        message.contains("proxy-ssl-secret") && message.contains("bt/nowhere"),
        "{condition}"
    );

    // Sequential requests reuse the pooled TLS connections: far fewer
    // handshakes than requests.
    let before = web.accepted.load(Ordering::SeqCst);
    for i in 0..10 {
        assert_eq!(h1(&h, "verified.bt.test", &format!("/{i}")).await.0, 200);
    }
    let handshakes = web.accepted.load(Ordering::SeqCst) - before;
    assert!(handshakes <= 1, "{handshakes} handshakes for 10 requests");
}

/// ingress-nginx's other `proxy-ssl-secret` shape: an Opaque Secret with
/// `ca.crt` alone. Its CA verifies the backend and no client certificate
/// is presented; a CA-only Secret with the wrong CA is refused (502).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opaque_ca_only_secret_verifies_the_backend() {
    let ca = TestCa::new("backend CA");
    let other_ca = TestCa::new("another CA");
    let front = TestCa::new("front CA");
    let web = https_backend(&ca.issue(&[DEFAULT_NAME]), None).await;
    let mut objects = service_at(NS, "web", web.addr);
    let verify_with = |secret: &'static str| {
        [
            ("backend-protocol", "HTTPS"),
            ("proxy-ssl-secret", secret),
            ("proxy-ssl-verify", "on"),
        ]
    };
    objects.extend([
        tls_ingress(
            NS,
            "ca-only",
            "ca-only.bt.test",
            "web",
            &verify_with("ca-only"),
        ),
        tls_ingress(
            NS,
            "wrong-ca-only",
            "wrong-ca-only.bt.test",
            "web",
            &verify_with("bt/other-ca-only"),
        ),
    ]);
    let front_cert = front.issue(&["*.bt.test"]);
    let files = vec![
        ("m.yaml", docs(&objects)),
        (
            "front.yaml",
            certs::tls_secret_yaml(NS, "front", &front_cert),
        ),
        (
            "ca.yaml",
            certs::ca_secret_yaml(NS, "ca-only", ca.cert_pem()),
        ),
        (
            "other.yaml",
            certs::ca_secret_yaml(NS, "other-ca-only", other_ca.cert_pem()),
        ),
    ];
    let h = Harness::start_with_args(&files, &["--threads", "1"]).await;
    served(&h, "ca-only.bt.test").await;

    let got = h1(&h, "ca-only.bt.test", "/a").await;
    assert_eq!(got, (200, "sni=- client=no path=/a xfp=http".into()));
    let got = h2(&h, &front, "ca-only.bt.test", "/b").await;
    assert_eq!(got, (200, "sni=- client=no path=/b xfp=https".into()));
    let (status, body) = h1(&h, "wrong-ca-only.bt.test", "/x").await;
    assert_eq!(status, 502, "{body}");
    let (status, body) = h2(&h, &front, "wrong-ca-only.bt.test", "/x").await;
    assert_eq!(status, 502, "{body}");
    // Both Ingresses were read whole: the wrong CA is a handshake failure,
    // not a refused annotation.
    let status = h.status().await;
    for name in ["ca-only", "wrong-ca-only"] {
        let report = ingress_report(&status, NS, name).expect("a report");
        let accepted = condition(report, "AnnotationsAccepted");
        assert!(
            accepted.is_none_or(|c| c["status"] == "True"),
            "{name}: {accepted:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_requiring_a_client_certificate_sees_the_secrets() {
    let ca = TestCa::new("backend CA");
    let front = TestCa::new("front CA");
    let backend_cert = ca.issue(&[DEFAULT_NAME]);
    let web = https_backend(&backend_cert, Some(&ca)).await;
    let client = ca.issue_client("teapot-client");
    let mut objects = service_at(NS, "web", web.addr);
    objects.extend([
        tls_ingress(
            NS,
            "mtls",
            "mtls.bt.test",
            "web",
            &[
                ("backend-protocol", "HTTPS"),
                ("proxy-ssl-secret", "bt/backend-ca"),
                ("proxy-ssl-verify", "on"),
            ],
        ),
        tls_ingress(
            NS,
            "no-cert",
            "no-cert.bt.test",
            "web",
            &[("backend-protocol", "HTTPS")],
        ),
    ]);
    let front_cert = front.issue(&["*.bt.test"]);
    let h = Harness::start(&files(&objects, &front_cert, &client, &ca)).await;
    served(&h, "mtls.bt.test").await;
    let got = h1(&h, "mtls.bt.test", "/a").await;
    assert_eq!(got, (200, "sni=- client=yes path=/a xfp=http".into()));
    let got = h2(&h, &front, "mtls.bt.test", "/b").await;
    assert_eq!(got, (200, "sni=- client=yes path=/b xfp=https".into()));
    // Without a certificate to present, the backend refuses: 502.
    assert_eq!(h1(&h, "no-cert.bt.test", "/c").await.0, 502);
    assert_eq!(h2(&h, &front, "no-cert.bt.test", "/d").await.0, 502);
}

/// A gRPC-shaped call over HTTP/2 with TLS: status, the response's
/// `x-seen-content-type`, body and trailers.
async fn grpc_call(h: &Harness, front: &TestCa, host: &str) -> (u16, String, Bytes, String) {
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("https://{host}/pkg.Echo/Say"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\x05hello")))
        .unwrap();
    let (parts, collected) = h2_exchange(h, front, host, req).await;
    let seen = parts
        .headers
        .get("x-seen-content-type")
        .map_or("", |v| v.to_str().unwrap())
        .to_string();
    let trailers = collected
        .trailers()
        .map(|t| {
            let mut pairs: Vec<String> = t
                .iter()
                .map(|(k, v)| format!("{k}={}", v.to_str().unwrap()))
                .collect();
            pairs.sort();
            pairs.join(" ")
        })
        .unwrap_or_default();
    (parts.status.as_u16(), seen, collected.to_bytes(), trailers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_grpcs_backends_carry_calls_and_trailers() {
    let ca = TestCa::new("backend CA");
    let front = TestCa::new("front CA");
    let h2c = grpc_backend(None).await;
    let grpcs_cert = ca.issue(&["grpcs.bt.svc"]);
    let grpcs = grpc_backend(Some(&grpcs_cert)).await;
    let client = ca.issue_client("teapot-client");
    let mut objects = service_at(NS, "grpc", h2c);
    objects.extend(service_at(NS, "grpcs", grpcs));
    objects.extend([
        tls_ingress(
            NS,
            "grpc",
            "grpc.bt.test",
            "grpc",
            &[("backend-protocol", "GRPC")],
        ),
        tls_ingress(
            NS,
            "grpcs",
            "grpcs.bt.test",
            "grpcs",
            &[
                ("backend-protocol", "GRPCS"),
                ("proxy-ssl-secret", "bt/backend-ca"),
                ("proxy-ssl-verify", "on"),
            ],
        ),
    ]);
    let front_cert = front.issue(&["*.bt.test"]);
    let h = Harness::start(&files(&objects, &front_cert, &client, &ca)).await;
    // gRPC needs HTTP/2 from the client: over HTTP/1 the route says so.
    eventually("the gRPC route", Duration::from_secs(10), || async {
        match h1(&h, "grpc.bt.test", "/x").await {
            (502, body) if body.contains("HTTP/2") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (status, body) = h1(&h, "grpcs.bt.test", "/x").await;
    assert_eq!(status, 502, "{body}");
    for (host, scheme) in [("grpc.bt.test", "http"), ("grpcs.bt.test", "https")] {
        let (status, seen, body, trailers) = grpc_call(&h, &front, host).await;
        assert_eq!(status, 200, "{host}");
        assert_eq!(seen, "application/grpc", "{host}");
        assert_eq!(&body[..], b"\0\0\0\0\x05hello", "{host}");
        assert_eq!(
            trailers,
            format!("grpc-status=0 x-scheme={scheme}"),
            "{host}"
        );
    }
}

/// A Gateway API BackendTLSPolicy `name` on Service `service` (port
/// `https`), verifying `hostname` against ConfigMap `ca`'s `ca.crt`, or
/// `subject_alt_names` when not empty.
fn backend_tls_policy(
    name: &str,
    service: &str,
    hostname: &str,
    ca: &str,
    subject_alt_names: Value,
) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "BackendTLSPolicy",
        "metadata": { "name": name, "namespace": NS },
        "spec": {
            "targetRefs": [{ "group": "", "kind": "Service", "name": service, "sectionName": "https" }],
            "validation": {
                "hostname": hostname,
                "caCertificateRefs": [{ "group": "", "kind": "ConfigMap", "name": ca }],
                "subjectAltNames": subject_alt_names,
            },
        },
    })
}

/// A ConfigMap `name` whose `ca.crt` is `pem`.
fn ca_config_map(name: &str, pem: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": NS },
        "data": { "ca.crt": pem },
    })
}

/// A route of `kind` `name` for `NAME.gw.bt.test` to Service `service`
/// port 443, on Gateway `gw`.
fn gateway_route(kind: &str, name: &str, service: &str) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": kind,
        "metadata": { "name": name, "namespace": NS },
        "spec": {
            "parentRefs": [{ "name": "gw" }],
            "hostnames": [format!("{name}.gw.bt.test")],
            "rules": [{ "backendRefs": [{ "name": service, "port": 443 }] }],
        },
    })
}

/// BackendTLSPolicy through the real proxy: HTTPRoutes to Services under
/// a policy are served over TLS verified against the ConfigMap's CA for
/// the policy's hostname (sent as SNI), or for its subjectAltNames; a
/// wrong CA, a wrong name or a wrong subjectAltName answers 502, a missing
/// ConfigMap 503, never unverified; a GRPCRoute's backend speaks HTTP/2
/// over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policies_secure_gateway_api_backends() {
    let ca = TestCa::new("backend CA");
    let other_ca = TestCa::new("another CA");
    let front = TestCa::new("front CA");
    let spiffe = "spiffe://cluster.local/ns/bt/sa/web";
    let backend_cert = ca.issue_with_uris(&["web.bt.example"], &[spiffe]);
    let web = https_backend(&backend_cert, None).await;
    let grpcs_cert = ca.issue(&["grpc.bt.example"]);
    let grpcs = grpc_backend(Some(&grpcs_cert)).await;
    let no_sans = json!([]);
    let mut objects = vec![
        gateway_class(),
        gateway_gw(
            NS,
            json!([
                { "name": "http", "protocol": "HTTP", "port": 80 },
                { "name": "https", "protocol": "HTTPS", "port": 443,
                  "tls": { "mode": "Terminate", "certificateRefs": [{ "name": "front" }] } },
            ]),
        ),
        ca_config_map("backend-ca", ca.cert_pem()),
        ca_config_map("other-ca", other_ca.cert_pem()),
    ];
    let cases = [
        ("web", "web.bt.example", "backend-ca", no_sans.clone()),
        ("wrong-ca", "web.bt.example", "other-ca", no_sans.clone()),
        (
            "wrong-name",
            "elsewhere.bt.example",
            "backend-ca",
            no_sans.clone(),
        ),
        (
            "san",
            "sni.bt.example",
            "backend-ca",
            json!([{ "type": "URI", "uri": spiffe }]),
        ),
        (
            "wrong-san",
            "web.bt.example",
            "backend-ca",
            json!([{ "type": "Hostname", "hostname": "other.bt.example" }]),
        ),
        ("missing", "web.bt.example", "nowhere", no_sans.clone()),
    ];
    for (name, hostname, ca_name, sans) in cases {
        objects.extend(service_at(NS, name, web.addr));
        objects.push(backend_tls_policy(name, name, hostname, ca_name, sans));
        objects.push(gateway_route("HTTPRoute", name, name));
    }
    objects.extend(service_at(NS, "grpc", grpcs));
    objects.push(backend_tls_policy(
        "grpc",
        "grpc",
        "grpc.bt.example",
        "backend-ca",
        no_sans,
    ));
    objects.push(gateway_route("GRPCRoute", "grpc", "grpc"));
    let front_cert = front.issue(&["*.gw.bt.test"]);
    let h = Harness::start(&[
        ("m.yaml", docs(&objects)),
        (
            "front.yaml",
            certs::tls_secret_yaml(NS, "front", &front_cert),
        ),
    ])
    .await;
    served(&h, "web.gw.bt.test").await;

    // Verified against the ConfigMap's CA for the hostname, sent as SNI;
    // over HTTP/1.1 and from an HTTP/2 client alike.
    let got = h1(&h, "web.gw.bt.test", "/a").await;
    assert_eq!(
        got,
        (200, "sni=web.bt.example client=no path=/a xfp=http".into())
    );
    let got = h2(&h, &front, "web.gw.bt.test", "/b").await;
    assert_eq!(
        got,
        (200, "sni=web.bt.example client=no path=/b xfp=https".into())
    );
    // subjectAltNames: the URI in the certificate is verified, the
    // hostname is the SNI only.
    let got = h1(&h, "san.gw.bt.test", "/c").await;
    assert_eq!(
        got,
        (200, "sni=sni.bt.example client=no path=/c xfp=http".into())
    );

    // A wrong CA, hostname or subjectAltName: 502, never unverified.
    let before = web.accepted.load(Ordering::SeqCst);
    for host in ["wrong-ca", "wrong-name", "wrong-san"] {
        let host = format!("{host}.gw.bt.test");
        let (status, body) = h1(&h, &host, "/x").await;
        assert_eq!(status, 502, "{host}: {body}");
        let (status, body) = h2(&h, &front, &host, "/x").await;
        assert_eq!(status, 502, "{host}: {body}");
    }
    assert_eq!(
        web.accepted.load(Ordering::SeqCst),
        before,
        "no refused handshake reached a request"
    );
    // A policy whose ConfigMap is not there: 503, nothing connected.
    let (status, body) = h1(&h, "missing.gw.bt.test", "/x").await;
    assert_eq!(status, 503, "{body}");

    // A GRPCRoute's backend under a policy: HTTP/2 over TLS.
    let (status, seen, body, trailers) = grpc_call(&h, &front, "grpc.gw.bt.test").await;
    assert_eq!(status, 200);
    assert_eq!(seen, "application/grpc");
    assert_eq!(&body[..], b"\0\0\0\0\x05hello");
    assert_eq!(trailers, "grpc-status=0 x-scheme=https");
}

/// The Gateway's backend client certificate
/// (`spec.tls.backend.clientCertificateRef`) through the real proxy: a
/// backend under a BackendTLSPolicy that requires a client certificate is
/// served through a Gateway naming one, over HTTP/1.1 and HTTP/2; through
/// a Gateway naming none the backend refuses the handshake (502); a
/// Gateway naming a missing Secret answers 503, never connecting without
/// the certificate it asks for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_s_client_certificate_is_presented_to_its_tls_backends() {
    let ca = TestCa::new("backend CA");
    let front = TestCa::new("front CA");
    let backend_cert = ca.issue(&["web.bt.example"]);
    let web = https_backend(&backend_cert, Some(&ca)).await;
    let client = ca.issue_client("teapot-client");
    let gateway = |name: &str, client_secret: Option<&str>| {
        let mut gateway = gateway_gw(
            NS,
            json!([
                { "name": "http", "protocol": "HTTP", "port": 80 },
                { "name": "https", "protocol": "HTTPS", "port": 443,
                  "tls": { "mode": "Terminate", "certificateRefs": [{ "name": "front" }] } },
            ]),
        );
        gateway["metadata"]["name"] = json!(name);
        if let Some(secret) = client_secret {
            gateway["spec"]["tls"] =
                json!({ "backend": { "clientCertificateRef": { "name": secret } } });
        }
        gateway
    };
    let mut objects = vec![
        gateway_class(),
        gateway("gw", Some("client")),
        gateway("plain", None),
        gateway("broken", Some("nowhere")),
        ca_config_map("backend-ca", ca.cert_pem()),
    ];
    objects.extend(service_at(NS, "web", web.addr));
    objects.push(backend_tls_policy(
        "web",
        "web",
        "web.bt.example",
        "backend-ca",
        json!([]),
    ));
    for parent in ["gw", "plain", "broken"] {
        let mut route = gateway_route("HTTPRoute", parent, "web");
        route["spec"]["parentRefs"] = json!([{ "name": parent }]);
        objects.push(route);
    }
    let front_cert = front.issue(&["*.gw.bt.test"]);
    let h = Harness::start(&[
        ("m.yaml", docs(&objects)),
        (
            "front.yaml",
            certs::tls_secret_yaml(NS, "front", &front_cert),
        ),
        ("client.yaml", certs::tls_secret_yaml(NS, "client", &client)),
    ])
    .await;
    served(&h, "gw.gw.bt.test").await;
    let got = h1(&h, "gw.gw.bt.test", "/a").await;
    assert_eq!(
        got,
        (200, "sni=web.bt.example client=yes path=/a xfp=http".into())
    );
    let got = h2(&h, &front, "gw.gw.bt.test", "/b").await;
    assert_eq!(
        got,
        (
            200,
            "sni=web.bt.example client=yes path=/b xfp=https".into()
        )
    );
    // No client certificate on the Gateway: the backend refuses the
    // handshake.
    assert_eq!(h1(&h, "plain.gw.bt.test", "/c").await.0, 502);
    assert_eq!(h2(&h, &front, "plain.gw.bt.test", "/d").await.0, 502);
    // The Gateway's Secret is missing: 503, nothing connected.
    let before = web.accepted.load(Ordering::SeqCst);
    let (status, body) = h1(&h, "broken.gw.bt.test", "/e").await;
    assert_eq!(status, 503, "{body}");
    let (status, body) = h2(&h, &front, "broken.gw.bt.test", "/f").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(web.accepted.load(Ordering::SeqCst), before);
}
