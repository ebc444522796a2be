//! ingress-nginx `ssl-passthrough` on the shared HTTPS listener
//! (proxy/src/plane/passthrough.rs), through `teapot proxy`:
//!
//! - a passed-through host's client completes its handshake with the
//!   backend (it verifies the backend's certificate, from a CA teapot
//!   never sees) and speaks HTTP/1.1 or HTTP/2 to it, as the backend's
//!   ALPN chooses;
//! - a terminated host on the same listener gets teapot's certificate
//!   and teapot's routing, over HTTP/1.1 and HTTP/2;
//! - an unknown server name gets the certificate it got before any host
//!   was passed through;
//! - a ClientHello sent a byte at a time is cut at the header-read
//!   deadline, and the connection slot it held is free again;
//! - ingress-nginx's e2e case (test/e2e/settings/ssl_passthrough.go,
//!   "should pass unknown traffic to default backend and handle known
//!   traffic"): the annotated host reaches its backend, a TLS host without
//!   the annotation is answered by the proxy.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::tls_backend::{server_config, service_at, tls_ingress};
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use teapot_testkit::certs::{self, CertifiedPem, TestCa};
use teapot_testkit::echo::EchoServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const NS: &str = "pt";
const PASS: &str = "pass.pt.test";
const TERM: &str = "term.pt.test";

/// A TLS backend offering h2 and http/1.1: each request is answered
/// `backend sni=<name> proto=<HTTP version> path=<path>`.
async fn tls_backend(cert: &CertifiedPem) -> SocketAddr {
    let acceptor =
        tokio_rustls::TlsAcceptor::from(server_config(cert, None, &[b"h2", b"http/1.1"]));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let (_, connection) = tls.get_ref();
                let sni = connection.server_name().unwrap_or("-").to_string();
                let h2 = connection.alpn_protocol() == Some(b"h2");
                let service = hyper::service::service_fn(move |req: http::Request<_>| {
                    let body = format!(
                        "backend sni={sni} proto={:?} path={}",
                        req.version(),
                        req.uri().path()
                    );
                    async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from(body),
                        )))
                    }
                });
                let io = TokioIo::new(tls);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, service)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
            });
        }
    });
    addr
}

/// The passed-through Ingress.
fn pass_ingress() -> Value {
    tls_ingress(NS, "pass", PASS, "tlsapp", &[("ssl-passthrough", "true")])
}

/// GET `path` over HTTP/1.1 on an established TLS stream; the whole
/// answer as text.
async fn h1_over<S>(stream: &mut S, host: &str, path: &str) -> String
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(REQUEST_TIMEOUT, stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).to_string()
}

/// GET `path` over HTTP/2 with TLS to `host`, verified against `root`:
/// status and body.
async fn h2_over(addr: SocketAddr, host: &str, root: &[u8], path: &str) -> (u16, String) {
    let c = H2Connection::open(addr, host, &[root]).await;
    let mut sender = c.sender.clone();
    let req = http::Request::builder()
        .uri(format!("https://{host}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let exchange = async {
        sender.ready().await.unwrap();
        let (parts, body) = sender.send_request(req).await.unwrap().into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (
            parts.status.as_u16(),
            String::from_utf8_lossy(&body).to_string(),
        )
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .expect("h2 request timed out")
}

/// Accepts any certificate and keeps the first it is shown.
#[derive(Debug)]
struct Keep(
    std::sync::Mutex<Option<Vec<u8>>>,
    rustls::crypto::CryptoProvider,
);

impl rustls::client::danger::ServerCertVerifier for Keep {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        *self.0.lock().unwrap() = Some(end_entity.to_vec());
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.1.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.1.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.1.signature_verification_algorithms.supported_schemes()
    }
}

/// The certificate a handshake naming `sni` is shown (not verified).
async fn certificate_for(addr: SocketAddr, sni: &str) -> Vec<u8> {
    let provider = rustls::crypto::ring::default_provider();
    let keep = Arc::new(Keep(std::sync::Mutex::new(None), provider.clone()));
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(keep.clone())
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    tokio::time::timeout(
        REQUEST_TIMEOUT,
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .expect("handshake timed out")
    .expect("handshake");
    keep.0.lock().unwrap().take().expect("a certificate")
}

/// A ClientHello naming `sni`, as rustls sends it.
fn client_hello(sni: &str) -> Vec<u8> {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let mut conn = rustls::ClientConnection::new(
        Arc::new(config),
        ServerName::try_from(sni.to_owned()).unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

struct Setup {
    h: Harness,
    backend_ca: TestCa,
    front_ca: TestCa,
}

/// A proxy with the terminated host (an echo backend) and, when `pass`,
/// the passed-through one (a TLS backend with its own CA).
async fn setup(pass: bool, args: &[&str]) -> (Setup, EchoServer) {
    let backend_ca = TestCa::new("backend CA");
    let front_ca = TestCa::new("front CA");
    let backend_addr = tls_backend(&backend_ca.issue(&[PASS])).await;
    let web = echo(NS, "web", "web-0").await;
    let mut objects = service_at(NS, "tlsapp", backend_addr);
    objects.extend(echo_service(NS, "web", &[&web]));
    let mut term = tls_ingress(NS, "term", TERM, "web", &[]);
    term["spec"]["rules"][0]["http"]["paths"][0]["backend"] = backend("web", Port::Number(80));
    objects.push(term);
    if pass {
        objects.push(pass_ingress());
    }
    let files = vec![
        ("m.yaml", docs(&objects)),
        (
            "front.yaml",
            certs::tls_secret_yaml(NS, "front", &front_ca.issue(&[TERM, PASS])),
        ),
    ];
    let h = Harness::start_with_args(&files, args).await;
    (
        Setup {
            h,
            backend_ca,
            front_ca,
        },
        web,
    )
}

/// Waits until `host` is passed through (its handshake verifies against
/// the backend's CA).
async fn passed(s: &Setup, host: &str) {
    let root = s.backend_ca.cert_der().to_vec();
    eventually(host, Duration::from_secs(10), || {
        let root = root.clone();
        async move {
            tls_handshake(
                s.h.proxy.https,
                host,
                &[&root],
                rustls::ALL_VERSIONS,
                &[b"http/1.1"],
            )
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_through_host_reaches_its_backend_beside_terminated_hosts() {
    let (s, _web) = setup(true, &[]).await;
    passed(&s, PASS).await;
    let https = s.h.proxy.https;

    // HTTP/1.1 to the backend, whose certificate the client verified.
    let mut hs = tls_handshake(
        https,
        PASS,
        &[s.backend_ca.cert_der()],
        rustls::ALL_VERSIONS,
        &[b"http/1.1"],
    )
    .await
    .unwrap();
    assert_eq!(hs.alpn.as_deref(), Some(&b"http/1.1"[..]));
    let answer = h1_over(&mut hs.stream, PASS, "/one").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("backend sni=pass.pt.test proto=HTTP/1.1 path=/one"),
        "{answer}"
    );

    // HTTP/2: the backend's ALPN, the backend's answer.
    let (status, body) = h2_over(https, PASS, s.backend_ca.cert_der(), "/two").await;
    assert_eq!(status, 200);
    assert_eq!(body, "backend sni=pass.pt.test proto=HTTP/2.0 path=/two");

    // The terminated host on the same listener: teapot's certificate
    // (the front Secret's) and teapot's routing, over both protocols.
    let mut hs = tls_handshake(
        https,
        TERM,
        &[s.front_ca.cert_der()],
        rustls::ALL_VERSIONS,
        &[b"http/1.1"],
    )
    .await
    .unwrap();
    let answer = h1_over(&mut hs.stream, TERM, "/three").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(!answer.contains("backend sni="), "{answer}");
    let (status, body) = h2_over(https, TERM, s.front_ca.cert_der(), "/four").await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("backend sni="), "{body}");
    // The terminated host's certificate does not verify against the
    // backend's CA: it is teapot's.
    assert!(
        tls_handshake(
            https,
            TERM,
            &[s.backend_ca.cert_der()],
            rustls::ALL_VERSIONS,
            &[b"http/1.1"]
        )
        .await
        .is_err()
    );

    // Plain HTTP to the terminated host is served as before.
    let status = s.h.get(TERM, "/five").await.status;
    assert_eq!(status, 200);

    // The ingress-nginx status of the Ingress says it is passed through.
    let status = s.h.status().await;
    let report = ingress_report(&status, NS, "pass").expect("pass reported");
    let c = condition(report, "SSLPassthrough").expect("condition");
    assert_eq!(c["status"], "True", "{c}");
}

/// A server name nobody passes through gets what it got before the first
/// host was passed through (the default certificate here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_server_name_is_answered_as_before() {
    let (s, _web) = setup(false, &[]).await;
    let https = s.h.proxy.https;
    let before = certificate_for(https, "unknown.pt.test").await;
    let term_before = certificate_for(https, TERM).await;
    let generation = s.h.generation().await;
    s.h.write("pass.yaml", &docs(&[pass_ingress()]));
    s.h.wait_generation_after(generation).await;
    passed(&s, PASS).await;
    assert_eq!(certificate_for(https, "unknown.pt.test").await, before);
    assert_eq!(certificate_for(https, TERM).await, term_before);
    assert_ne!(certificate_for(https, PASS).await, before);
}

/// A ClientHello trickled a byte every 100 ms is cut at the header-read
/// deadline (1 s here), long before it is whole; the per-client slot it
/// held is free again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_hello_is_cut_at_the_deadline() {
    let (s, _web) = setup(
        true,
        &[
            "--header-read-timeout",
            "1",
            "--max-connections-per-client",
            "1",
        ],
    )
    .await;
    passed(&s, PASS).await;
    // The probe's relay ends once both its sides have closed; its slot
    // with it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let https = s.h.proxy.https;
    let hello = client_hello(PASS);
    let mut slow = TcpStream::connect(https).await.unwrap();
    let started = Instant::now();
    let mut sent = 0;
    let mut buf = [0u8; 64];
    let cut = loop {
        if sent == hello.len() {
            break false;
        }
        slow.write_all(&hello[sent..sent + 1]).await.unwrap_or(());
        sent += 1;
        match tokio::time::timeout(Duration::from_millis(100), slow.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => panic!("{n} bytes answered to a partial ClientHello"),
            Err(_) => {}
        }
    };
    assert!(
        cut,
        "the whole ClientHello ({} bytes) went through",
        hello.len()
    );
    assert!(
        sent < hello.len(),
        "cut after {sent} of {} bytes",
        hello.len()
    );
    // Cut by the deadline, not at once (a correctness bound, generous).
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    // While it was held, the client's one slot was taken; now it is free.
    passed(&s, PASS).await;
    let metrics = s.h.metrics().await;
    let timeouts = metric(
        &metrics,
        "teapot_edge_refusals_total{reason=\"header_timeout\"}",
    );
    assert!(timeouts.unwrap_or(0.0) >= 1.0, "{metrics}");
}

/// While a ClientHello is read, its connection holds one of the client's
/// connection slots: with a cap of one, a second connection from the same
/// address is closed without an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hello_being_read_holds_a_connection_slot() {
    let (s, _web) = setup(
        true,
        &[
            "--header-read-timeout",
            "5",
            "--max-connections-per-client",
            "1",
        ],
    )
    .await;
    passed(&s, PASS).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let https = s.h.proxy.https;
    let hello = client_hello(PASS);
    let mut held = TcpStream::connect(https).await.unwrap();
    held.write_all(&hello[..10]).await.unwrap();
    // Let the listener take it (the deferred accept waits for a byte).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = tls_handshake(
        https,
        PASS,
        &[s.backend_ca.cert_der()],
        rustls::ALL_VERSIONS,
        &[b"http/1.1"],
    )
    .await;
    assert!(refused.is_err(), "a second connection got through");
    // The held one completes and is passed through.
    held.write_all(&hello[10..]).await.unwrap();
    let mut first = [0u8; 5];
    tokio::time::timeout(REQUEST_TIMEOUT, held.read_exact(&mut first))
        .await
        .expect("an answer")
        .expect("the backend's ServerHello");
    assert_eq!(first[0], 0x16, "a TLS handshake record");
}
