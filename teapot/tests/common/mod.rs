//! Helpers for the end-to-end tests: a real `teapot proxy` child process
//! serving a temporary manifests directory, manifest builders, polling of
//! the admin API, and a small HTTP/2-over-TLS client that can run several
//! streams on one connection at once.
//!
//! Every wait is bounded; nothing sleeps for a fixed time where the admin
//! API can be polled instead.

#![allow(dead_code)] // each test binary uses a different subset

pub mod agent;
pub mod auth_service;
pub mod client_cert;
pub mod h2raw;
pub mod l4;
pub mod tls_backend;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use teapot_testkit::client::{self, Request, Response, Transport};
use teapot_testkit::echo::{EchoIdentity, EchoServer};
use teapot_testkit::process::ProxyProcess;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Upper bound for one request through the proxy (a loaded 2-core machine
/// running a debug build is slow, but never this slow).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Upper bound for the proxy to notice a manifest change and swap it in.
pub const RELOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Polling interval of the admin API.
pub const POLL: Duration = Duration::from_millis(25);

/// The path of the binary under test, built by cargo for this test target.
pub fn teapot_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_teapot"))
}

/// A running proxy and the manifests directory it watches.
///
/// Files are written into a sibling staging directory first and renamed into
/// the watched one, so the proxy never reads a half-written file and every
/// change is exactly one directory event.
pub struct Harness {
    pub proxy: ProxyProcess,
    root: tempfile::TempDir,
}

impl Harness {
    /// Writes `files` (name, text) and starts `teapot proxy` on them.
    pub async fn start(files: &[(&str, String)]) -> Harness {
        Harness::start_with_args(files, &[]).await
    }

    pub async fn start_with_args(files: &[(&str, String)], args: &[&str]) -> Harness {
        let root = tempfile::Builder::new()
            .prefix("teapot-e2e-")
            .tempdir()
            .expect("temp dir");
        std::fs::create_dir(root.path().join("manifests")).expect("manifests dir");
        std::fs::create_dir(root.path().join("stage")).expect("stage dir");
        for (name, text) in files {
            std::fs::write(root.path().join("manifests").join(name), text).expect("write manifest");
        }
        let proxy = ProxyProcess::start(&teapot_bin(), &root.path().join("manifests"), args)
            .await
            .expect("teapot proxy starts");
        Harness { proxy, root }
    }

    pub fn manifests(&self) -> PathBuf {
        self.root.path().join("manifests")
    }

    /// Atomically replaces (or creates) one manifest file.
    pub fn write(&self, name: &str, text: &str) {
        let staged = self.root.path().join("stage").join(name);
        std::fs::write(&staged, text).expect("write staged manifest");
        std::fs::rename(&staged, self.manifests().join(name)).expect("rename manifest");
    }

    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.manifests().join(name)).expect("remove manifest");
    }

    /// Writes a file and waits until a newer snapshot is served.
    pub async fn apply(&self, name: &str, text: &str) -> u64 {
        let before = self.generation().await;
        self.write(name, text);
        self.wait_generation_after(before).await
    }

    /// Removes a file and waits until a newer snapshot is served.
    pub async fn delete(&self, name: &str) -> u64 {
        let before = self.generation().await;
        self.remove(name);
        self.wait_generation_after(before).await
    }

    pub async fn wait_generation_after(&self, before: u64) -> u64 {
        eventually(
            &format!("generation > {before}"),
            RELOAD_TIMEOUT,
            || async {
                let g = self.generation().await;
                if g > before { Ok(g) } else { Err(g) }
            },
        )
        .await
    }

    /// `GET path` on the admin listener; it must answer 200.
    async fn admin(&self, path: &str) -> String {
        let (code, body) = tokio::time::timeout(REQUEST_TIMEOUT, self.proxy.admin_get(path))
            .await
            .unwrap_or_else(|_| panic!("{path} answers in time"))
            .unwrap_or_else(|e| panic!("{path} request: {e}"));
        assert_eq!(code, 200, "{path}: {body}");
        body
    }

    /// `GET /status` as JSON.
    pub async fn status(&self) -> Value {
        let body = self.admin("/status").await;
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("/status is not JSON: {e}: {body}"))
    }

    pub async fn generation(&self) -> u64 {
        self.status().await["generation"]
            .as_u64()
            .expect("status.generation is a number")
    }

    /// Polls `/status` until `check` accepts it.
    pub async fn wait_status(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        eventually(what, RELOAD_TIMEOUT, || async {
            let status = self.status().await;
            if check(&status) {
                Ok(status)
            } else {
                Err(status)
            }
        })
        .await
    }

    /// Polls `/status` until it reports `n` RouteTrafficPolicies.
    pub async fn wait_route_traffic_policies(&self, n: usize) -> Value {
        self.wait_status(&format!("{n} RouteTrafficPolicies reported"), |s| {
            s["routeTrafficPolicies"]
                .as_array()
                .is_some_and(|p| p.len() == n)
        })
        .await
    }

    /// `GET /metrics` text.
    pub async fn metrics(&self) -> String {
        self.admin("/metrics").await
    }

    /// One request on a fresh plain connection.
    pub async fn send(&self, req: &Request) -> Response {
        send(self.proxy.http, &Transport::Plain, req).await
    }

    pub async fn get(&self, host: &str, path: &str) -> Response {
        self.send(&Request::get(host, path)).await
    }

    /// GET that must be answered 200 by an echo; returns the echo's JSON.
    pub async fn echo_json(&self, host: &str, path: &str) -> Value {
        let resp = self.get(host, path).await;
        assert_eq!(resp.status, 200, "GET {host}{path}: {}", resp.text());
        resp.json()
            .unwrap_or_else(|e| panic!("GET {host}{path}: not echo JSON: {e}: {}", resp.text()))
    }
}

/// One request on a fresh connection, bounded by [`REQUEST_TIMEOUT`].
pub async fn send(addr: SocketAddr, transport: &Transport, req: &Request) -> Response {
    tokio::time::timeout(REQUEST_TIMEOUT, client::send(addr, transport, req))
        .await
        .unwrap_or_else(|_| panic!("{} {}{} timed out", req.method, req.host, req.target))
        .unwrap_or_else(|e| panic!("{} {}{} failed: {e}", req.method, req.host, req.target))
}

/// Polls `attempt` every [`POLL`] until it returns `Ok`, or panics after
/// `timeout` showing the last `Err` observation.
pub async fn eventually<T, E, F, Fut>(what: &str, timeout: Duration, mut attempt: F) -> T
where
    E: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match attempt().await {
            Ok(value) => return value,
            Err(last) => last,
        };
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}; last observation: {last:#?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Starts an echo backend claiming to be `service`/`pod` in `namespace`.
pub async fn echo(namespace: &str, service: &str, pod: &str) -> EchoServer {
    EchoServer::start(EchoIdentity::new(namespace, "", service, pod))
        .await
        .expect("echo server starts")
}

/// A header value as text; panics if missing.
pub fn header<'a>(resp: &'a Response, name: &str) -> &'a str {
    resp.headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header in {:?}", resp.headers))
        .to_str()
        .expect("header is text")
}

/// Checks an answer the proxy made itself (404, 503): status, `Server`,
/// a text body whose length is announced correctly.
pub fn assert_proxy_answer(resp: &Response, status: u16, what: &str) {
    assert_eq!(resp.status, status, "{what}: {}", resp.text());
    assert_eq!(header(resp, "server"), "teapot", "{what}");
    let length: usize = header(resp, "content-length")
        .parse()
        .expect("numeric Content-Length");
    assert_eq!(length, resp.body.len(), "{what}: Content-Length vs body");
    assert!(!resp.body.is_empty(), "{what}: empty body");
    assert!(
        resp.text().starts_with(&status.to_string()),
        "{what}: {}",
        resp.text()
    );
}

/// The value of one Prometheus sample (`name` includes labels, exactly as
/// rendered, e.g. `teapot_http_responses_total{class="2xx"}`).
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

// ---------------------------------------------------------------------------
// Manifests, built as JSON (which YAML reads as flow style) so nothing
// depends on indentation.

/// Documents as one multi-document YAML file.
pub fn docs(documents: &[Value]) -> String {
    documents
        .iter()
        .map(|d| serde_json::to_string_pretty(d).expect("JSON"))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// How an Ingress backend names its Service port.
#[derive(Clone, Copy, Debug)]
pub enum Port<'a> {
    Number(u16),
    Name(&'a str),
}

pub fn backend(service: &str, port: Port<'_>) -> Value {
    let port = match port {
        Port::Number(n) => json!({ "number": n }),
        Port::Name(n) => json!({ "name": n }),
    };
    json!({ "service": { "name": service, "port": port } })
}

/// One `spec.rules[].http.paths[]` entry.
pub fn path(kind: &str, path: &str, backend: Value) -> Value {
    json!({ "path": path, "pathType": kind, "backend": backend })
}

/// One `spec.rules[]` entry.
pub fn rule(host: Option<&str>, paths: Vec<Value>) -> Value {
    let mut rule = json!({ "http": { "paths": paths } });
    if let Some(host) = host {
        rule["host"] = json!(host);
    }
    rule
}

/// An Ingress of class `teapot` with the given spec.
pub fn ingress(namespace: &str, name: &str, spec: Value) -> Value {
    ingress_with_class(namespace, name, Some("teapot"), spec)
}

pub fn ingress_with_class(namespace: &str, name: &str, class: Option<&str>, spec: Value) -> Value {
    let mut spec = spec;
    if let Some(class) = class {
        spec["ingressClassName"] = json!(class);
    }
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": { "name": name, "namespace": namespace },
        "spec": spec,
    })
}

/// One echo backend (`<name>-0`) behind Service `svc-<name>`, routed from
/// `<name>.test` by Ingress `<name>`, served by a proxy started with `args`.
pub async fn one_route(namespace: &str, name: &str, args: &[&str]) -> (EchoServer, Harness) {
    let service = format!("svc-{name}");
    let backend = echo(namespace, &service, &format!("{name}-0")).await;
    let mut manifests = echo_service(namespace, &service, &[&backend]);
    manifests.push(simple_ingress(
        namespace,
        name,
        &format!("{name}.test"),
        &service,
    ));
    let h = Harness::start_with_args(&[("manifests.yaml", docs(&manifests))], args).await;
    (backend, h)
}

/// A proxy started with `args` serving `objects` beside one echo backend
/// (`web-0`) behind Service `web` of `namespace`.
pub async fn serve_web(
    namespace: &str,
    objects: Vec<Value>,
    args: &[&str],
) -> (EchoServer, Harness) {
    let backend = echo(namespace, "web", "web-0").await;
    let mut manifests = echo_service(namespace, "web", &[&backend]);
    manifests.extend(objects);
    let h = Harness::start_with_args(&[("manifests.yaml", docs(&manifests))], args).await;
    (backend, h)
}

/// An Ingress of class `teapot` routing `host` (all paths) to `service:80`.
pub fn simple_ingress(namespace: &str, name: &str, host: &str, service: &str) -> Value {
    ingress(
        namespace,
        name,
        json!({ "rules": [rule(Some(host), vec![path("Prefix", "/", backend(service, Port::Number(80)))])] }),
    )
}

pub fn ingress_class(name: &str, controller: &str, default: bool) -> Value {
    let mut class = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": { "name": name },
        "spec": { "controller": controller },
    });
    if default {
        class["metadata"]["annotations"] =
            json!({ "ingressclass.kubernetes.io/is-default-class": "true" });
    }
    class
}

/// `(port name, port)` entries as the `ports` of a Service or EndpointSlice.
fn port_list(ports: &[(Option<&str>, u16)]) -> Vec<Value> {
    ports
        .iter()
        .map(|(port_name, port)| {
            let mut p = json!({ "port": port, "protocol": "TCP" });
            if let Some(n) = port_name {
                p["name"] = json!(n);
            }
            p
        })
        .collect()
}

/// A Service with `(port name, port)` entries.
pub fn service(namespace: &str, name: &str, ports: &[(Option<&str>, u16)]) -> Value {
    let ports = port_list(ports);
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "ports": ports },
    })
}

/// An EndpointSlice of `service` with `(port name, port)` entries and
/// `(address, ready)` endpoints.
pub fn slice(
    namespace: &str,
    name: &str,
    service: &str,
    ports: &[(Option<&str>, u16)],
    endpoints: &[(&str, bool)],
) -> Value {
    let ports = port_list(ports);
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(address, ready)| json!({ "addresses": [address], "conditions": { "ready": ready } }))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { "kubernetes.io/service-name": service },
        },
        "addressType": "IPv4",
        "ports": ports,
        "endpoints": endpoints,
    })
}

/// A Service with one port `80` named `http`, plus one ready EndpointSlice
/// per echo (each echo listens on its own port, and a slice has one port
/// list for all its endpoints).
pub fn echo_service(namespace: &str, name: &str, echoes: &[&EchoServer]) -> Vec<Value> {
    let mut out = vec![service(namespace, name, &[(Some("http"), 80)])];
    for (i, echo) in echoes.iter().enumerate() {
        out.push(slice(
            namespace,
            &format!("{name}-{i}"),
            name,
            &[(Some("http"), echo.addr().port())],
            &[("127.0.0.1", true)],
        ));
    }
    out
}

/// The Service `name` (port 80) in `namespace` whose one endpoint is
/// `127.0.0.1:port`.
pub fn loopback_service(namespace: &str, name: &str, port: u16) -> Vec<Value> {
    vec![
        service(namespace, name, &[(Some("http"), 80)]),
        slice(
            namespace,
            &format!("{name}-0"),
            name,
            &[(Some("http"), port)],
            &[("127.0.0.1", true)],
        ),
    ]
}

/// ingress-nginx's annotation prefix.
pub const NGINX: &str = "nginx.ingress.kubernetes.io/";

/// An Ingress (named `host`) routing `host` (all paths) to `service:80`
/// with the given ingress-nginx annotations (names after the prefix).
pub fn annotated(
    namespace: &str,
    host: &str,
    service: &str,
    annotations: &[(&str, &str)],
) -> Value {
    let mut ingress = simple_ingress(namespace, host, host, service);
    let map: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (format!("{NGINX}{k}"), json!(v)))
        .collect();
    ingress["metadata"]["annotations"] = Value::Object(map);
    ingress
}

/// `req` over HTTP/1.1 on the plain port or HTTP/2 on the TLS port.
pub async fn over(h: &Harness, proto: client::Proto, req: Request) -> Response {
    let req = req.proto(proto);
    match proto {
        client::Proto::Http1 => send(h.proxy.http, &Transport::Plain, &req).await,
        client::Proto::Http2 => {
            let transport = Transport::tls_insecure(&req.host.clone());
            let resp = send(h.proxy.https, &transport, &req).await;
            assert_eq!(resp.version, http::Version::HTTP_2);
            resp
        }
    }
}

/// The scheme of a request [`over`] sends with `proto`: HTTP/1.1 goes
/// to the plain port, HTTP/2 to the TLS one.
pub fn scheme(proto: client::Proto) -> &'static str {
    match proto {
        client::Proto::Http1 => "http",
        client::Proto::Http2 => "https",
    }
}

/// [`over`] on its own task (the request stays in flight while the test
/// goes on; aborting the task drops the client's connection).
pub fn spawn_over(
    h: &Harness,
    proto: client::Proto,
    req: Request,
) -> tokio::task::JoinHandle<Response> {
    let (http, https) = (h.proxy.http, h.proxy.https);
    let req = req.proto(proto);
    tokio::spawn(async move {
        match proto {
            client::Proto::Http1 => send(http, &Transport::Plain, &req).await,
            client::Proto::Http2 => {
                send(https, &Transport::tls_insecure(&req.host.clone()), &req).await
            }
        }
    })
}

/// An HTTP/1 backend that holds each request until the test says how it
/// ends: a request in flight stays so as long as the test wants, with no
/// timing involved.
pub struct HeldBackend {
    pub addr: SocketAddr,
    arrivals: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<HeldRequest>>,
    task: tokio::task::JoinHandle<()>,
}

/// A request held by a [`HeldBackend`]: `answer(true)` answers 200
/// `held`, `answer(false)` closes its connection unanswered; dropped, it
/// is closed too.
pub struct HeldRequest(tokio::sync::oneshot::Sender<bool>);

impl HeldRequest {
    pub fn answer(self, ok: bool) {
        let _ = self.0.send(ok);
    }
}

impl HeldBackend {
    pub async fn start() -> HeldBackend {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let (answer, told) = tokio::sync::oneshot::channel();
                    if tx.send(HeldRequest(answer)).is_err() {
                        return;
                    }
                    if told.await == Ok(true) {
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\nheld")
                            .await;
                    }
                });
            }
        });
        HeldBackend {
            addr,
            arrivals: tokio::sync::Mutex::new(rx),
            task,
        }
    }

    /// The next request to arrive (cancel-safe).
    pub async fn next(&self) -> HeldRequest {
        let next = async {
            self.arrivals
                .lock()
                .await
                .recv()
                .await
                .expect("backend runs")
        };
        tokio::time::timeout(REQUEST_TIMEOUT, next)
            .await
            .expect("a request reaches the held backend")
    }

    /// Whether no request arrived that was not taken with [`Self::next`].
    pub fn idle(&self) -> bool {
        self.arrivals
            .try_lock()
            .is_ok_and(|mut rx| rx.try_recv().is_err())
    }

    /// The Service `name` in `namespace` whose one endpoint is this backend.
    pub fn service(&self, namespace: &str, name: &str) -> Vec<Value> {
        loopback_service(namespace, name, self.addr.port())
    }
}

impl Drop for HeldBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `/status` report of one Ingress.
pub fn ingress_report<'a>(status: &'a Value, namespace: &str, name: &str) -> Option<&'a Value> {
    status["ingresses"]
        .as_array()?
        .iter()
        .find(|i| i["namespace"] == namespace && i["name"] == name)
}

/// One condition of an Ingress report.
pub fn condition<'a>(report: &'a Value, type_: &str) -> Option<&'a Value> {
    report["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

// ---------------------------------------------------------------------------
// TLS and HTTP/2 beyond what `teapot_testkit::client` offers.

/// The result of a bare TLS handshake.
pub struct Handshake {
    pub stream: tokio_rustls::client::TlsStream<TcpStream>,
    pub version: rustls::ProtocolVersion,
    pub suite: rustls::CipherSuite,
    pub peer_certificates: Vec<Vec<u8>>,
    pub alpn: Option<Vec<u8>>,
}

/// A TLS handshake with `sni`, verifying against `roots`, restricted to
/// `versions`, offering `alpn`.
pub async fn tls_handshake(
    addr: SocketAddr,
    sni: &str,
    roots: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> Result<Handshake, std::io::Error> {
    let provider = rustls::crypto::ring::default_provider();
    tls_handshake_offering(addr, sni, roots, versions, alpn, provider).await
}

/// [`tls_handshake`] offering the cipher suites of `provider`, in its order.
pub async fn tls_handshake_offering(
    addr: SocketAddr,
    sni: &str,
    roots: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
    provider: rustls::crypto::CryptoProvider,
) -> Result<Handshake, std::io::Error> {
    let provider = Arc::new(provider);
    let mut store = rustls::RootCertStore::empty();
    for der in roots {
        store
            .add(CertificateDer::from(der.to_vec()))
            .expect("root certificate");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("protocol versions")
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = tokio::time::timeout(REQUEST_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::other("connect timed out"))??;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from(sni.to_owned()).expect("SNI");
    let stream = tokio::time::timeout(
        REQUEST_TIMEOUT,
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .map_err(|_| std::io::Error::other("handshake timed out"))??;
    let (_, session) = stream.get_ref();
    let version = session.protocol_version().expect("negotiated version");
    let suite = session
        .negotiated_cipher_suite()
        .expect("negotiated suite")
        .suite();
    let peer_certificates = session
        .peer_certificates()
        .map(|chain| chain.iter().map(|c| c.to_vec()).collect())
        .unwrap_or_default();
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    Ok(Handshake {
        stream,
        version,
        suite,
        peer_certificates,
        alpn,
    })
}

/// An HTTP/2 client connection whose sender can be cloned, so several
/// streams run at once on the one connection.
pub struct H2Connection {
    pub sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for H2Connection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl H2Connection {
    /// TLS (ALPN h2 only) + HTTP/2 handshake.
    pub async fn open(addr: SocketAddr, sni: &str, roots: &[&[u8]]) -> H2Connection {
        let tls = tls_handshake(addr, sni, roots, rustls::ALL_VERSIONS, &[b"h2"])
            .await
            .expect("TLS handshake");
        assert_eq!(tls.alpn.as_deref(), Some(&b"h2"[..]), "ALPN h2 agreed");
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(tls.stream))
            .await
            .expect("HTTP/2 handshake");
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        H2Connection { sender, driver }
    }
}

/// Sends one GET on a (cloned) HTTP/2 sender; returns status, version and body.
pub async fn h2_get(
    mut sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    authority: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> (u16, http::Version, Value) {
    let mut request = http::Request::builder()
        .method("GET")
        .uri(format!("https://{authority}{target}"))
        .version(http::Version::HTTP_2);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::new())).expect("request");
    let exchange = async {
        sender.ready().await.expect("h2 sender ready");
        let response = sender.send_request(request).await.expect("h2 response");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("h2 body").to_bytes();
        (parts.status.as_u16(), parts.version, body)
    };
    let (status, version, body) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .expect("h2 request timed out");
    let json = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!(
            "h2 {authority}{target}: {status} not JSON: {e}: {}",
            String::from_utf8_lossy(&body)
        )
    });
    (status, version, json)
}

/// Whether a path ends with `name`.
pub fn file_is(path: &Value, name: &str) -> bool {
    path.as_str()
        .is_some_and(|p| Path::new(p).file_name().is_some_and(|f| f == name))
}

/// The GatewayClass `teapot`, teapot's controller.
pub fn gateway_class() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": { "name": "teapot" },
        "spec": { "controllerName": "teapot.dev/gateway-controller" },
    })
}

/// A Gateway `gw` of class `teapot` in `namespace` with these listeners.
pub fn gateway_gw(namespace: &str, listeners: Value) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": { "name": "gw", "namespace": namespace },
        "spec": { "gatewayClassName": "teapot", "listeners": listeners },
    })
}

/// An HTTPRoute of `namespace` attached to `parent`.
pub fn http_route(
    namespace: &str,
    name: &str,
    parent: Value,
    hostnames: &[&str],
    rules: Value,
) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "parentRefs": [parent], "hostnames": hostnames, "rules": rules },
    })
}

/// The sending half of an h2c client connection.
pub type H2cSender = hyper::client::conn::http2::SendRequest<
    http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>,
>;

/// An h2c (prior knowledge) client connection to `addr`.
pub async fn h2c(addr: SocketAddr) -> H2cSender {
    h2c_with(
        addr,
        &hyper::client::conn::http2::Builder::new(TokioExecutor::new()),
    )
    .await
}

/// [`h2c`] with the settings of `builder`.
pub async fn h2c_with(
    addr: SocketAddr,
    builder: &hyper::client::conn::http2::Builder<TokioExecutor>,
) -> H2cSender {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = builder
        .handshake(TokioIo::new(tcp))
        .await
        .expect("HTTP/2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender
}

/// An h2c (prior knowledge) backend on 127.0.0.1 whose connections
/// `builder` serves, each call answered by `answer`.
pub async fn h2c_backend<F, Fut, B>(
    builder: hyper::server::conn::http2::Builder<TokioExecutor>,
    answer: F,
) -> SocketAddr
where
    F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<http::Response<B>, std::convert::Infallible>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (builder, answer) = (builder.clone(), answer.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(answer);
                let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
            });
        }
    });
    addr
}

/// A Gateway `gw` with one HTTP listener, an HTTPRoute `calls` for `host`
/// to Service `grpc` (port 80, `appProtocol: kubernetes.io/h2c`) and its
/// one endpoint, an h2c backend on 127.0.0.1:`port`.
pub fn h2c_route(namespace: &str, host: &str, port: u16) -> Vec<Value> {
    let mut svc = service(namespace, "grpc", &[(Some("grpc"), 80)]);
    svc["spec"]["ports"][0]["appProtocol"] = json!("kubernetes.io/h2c");
    vec![
        gateway_gw(
            namespace,
            json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        ),
        http_route(
            namespace,
            "calls",
            json!({ "name": "gw" }),
            &[host],
            json!([{ "backendRefs": [{ "name": "grpc", "port": 80 }] }]),
        ),
        svc,
        slice(
            namespace,
            "grpc-0",
            "grpc",
            &[(Some("grpc"), port)],
            &[("127.0.0.1", true)],
        ),
    ]
}

/// `a.example` routed to tenant-a's Service whose one endpoint is `backend`.
pub fn tenant_a_routes_to(backend: SocketAddr) -> Vec<Value> {
    vec![
        service("tenant-a", "raw", &[(Some("http"), 80)]),
        slice(
            "tenant-a",
            "raw-0",
            "raw",
            &[(Some("http"), backend.port())],
            &[("127.0.0.1", true)],
        ),
        simple_ingress("tenant-a", "raw", "a.example", "raw"),
    ]
}

/// The resources the real webhook is registered for: Ingress and what it
/// references ...
pub const INGRESS_KINDS: &[&str] = &["ingresses", "services", "endpointslices", "secrets"];

/// ... and with the Gateway API kinds too.
pub const GATEWAY_API_KINDS: &[&str] = &[
    "ingresses",
    "services",
    "endpointslices",
    "secrets",
    "gateways",
    "listenersets",
    "httproutes",
    "grpcroutes",
    "tlsroutes",
    "tcproutes",
    "udproutes",
    "referencegrants",
];

/// The LB cluster's admission: the webhook's rules on the state it builds
/// from the LB double (as `teapot webhook --kube` does), for the
/// `registered` resources. Fail closed until the state is loaded.
pub fn webhook_admission(
    state: teapot_webhook::source::StateHandle,
    validator: teapot_webhook::Validator,
    registered: &'static [&'static str],
) -> impl Fn(
    &teapot_testkit::apiserver::AdmissionRequest,
) -> Result<(), teapot_testkit::apiserver::Refusal>
+ Send
+ Sync
+ 'static {
    use teapot_testkit::apiserver::Refusal;
    use teapot_webhook::review::{Operation, Subject};
    move |r| {
        if r.subresource.is_some()
            || r.operation == "DELETE"
            || !registered.contains(&r.resource.plural.as_str())
        {
            return Ok(());
        }
        let Some(object) = &r.object else {
            return Ok(());
        };
        let Some(state) = state.load_full() else {
            return Err(Refusal::forbidden("the webhook has not loaded its state"));
        };
        let gv = r.resource.group_version.as_str();
        let (group, version) = gv.split_once('/').unwrap_or(("", gv));
        let subject = Subject {
            group,
            version,
            kind: object["kind"].as_str().unwrap_or(""),
            namespace: Some(&r.namespace),
            name: &r.name,
            operation: if r.operation == "CREATE" {
                Operation::Create
            } else {
                Operation::Update
            },
            object: Some(object),
        };
        let verdict = validator.validate(&state, &subject);
        if verdict.allowed {
            Ok(())
        } else {
            Err(Refusal::forbidden(verdict.to_string()))
        }
    }
}

/// This machine's own address of one family that is not loopback: a
/// Tenant's endpoints may never be loopback (docs/architecture.md), so tests
/// serve their tenants on the interface addresses. Connecting a UDP
/// socket sends nothing; it only picks the source address of the route.
pub fn node_address(v6: bool) -> std::net::IpAddr {
    let (bind, probe) = if v6 {
        ("[::]:0", "[2001:db8::1]:9")
    } else {
        ("0.0.0.0:0", "203.0.113.1:9")
    };
    let socket = std::net::UdpSocket::bind(bind).expect("udp socket");
    socket
        .connect(probe)
        .and_then(|()| socket.local_addr())
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
        .unwrap_or_else(|| {
            panic!(
                "these tests need a non-loopback IPv{} address with a route (tenant endpoints may not be loopback)",
                if v6 { 6 } else { 4 }
            )
        })
}

/// A Tenant whose cluster is `name`, nodes in 10.1.0.0/24 (its namespace
/// is `tenant-<name>`).
pub fn tenant(name: &str) -> Value {
    serde_json::json!({
        "apiVersion": "teapot.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": { "name": name },
        "spec": { "cluster": name, "nodeCIDRs": ["10.1.0.0/24"] },
    })
}

/// A Tenant whose cluster is `name` and whose one node is `ip` (its
/// namespace is `tenant-<name>`).
pub fn node_tenant(name: &str, ip: std::net::IpAddr) -> Value {
    let prefix = if ip.is_ipv4() { 32 } else { 128 };
    json!({
        "apiVersion": "teapot.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": { "name": name },
        "spec": { "cluster": name, "nodeCIDRs": [format!("{ip}/{prefix}")] },
    })
}

/// The EndpointSlice `<service>-0` of `service` whose one ready endpoint
/// is `addr` (port `http`), as the agent's sync writes it in a tenant
/// namespace: the address's family, the sync's managed-by label.
pub fn synced_slice(namespace: &str, service: &str, addr: SocketAddr) -> Value {
    let mut slice = slice(
        namespace,
        &format!("{service}-0"),
        service,
        &[(Some("http"), addr.port())],
        &[(&addr.ip().to_string(), true)],
    );
    if addr.is_ipv6() {
        slice["addressType"] = json!("IPv6");
    }
    slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] =
        json!("sync.teapot.dev");
    slice
}

/// Tenant `cluster` whose node is `ip`, an echo there (pod `0` of Service
/// `web` in `tenant-<cluster>`; a tenant's endpoints are never loopback),
/// and that Service (port 80) with its slice.
pub async fn tenant_backend(cluster: &str, ip: std::net::IpAddr) -> (EchoServer, Vec<Value>) {
    let namespace = format!("tenant-{cluster}");
    let echo = EchoServer::start_on(ip, EchoIdentity::new(&namespace, "", "web", "0"))
        .await
        .expect("echo on the node address");
    let documents = vec![
        node_tenant(cluster, ip),
        service(&namespace, "web", &[(Some("http"), 80)]),
        synced_slice(&namespace, "web", echo.addr()),
    ];
    (echo, documents)
}

/// [`tenant_backend`] with the Tenant's `limits` and an Ingress `web` for
/// `host`.
pub async fn limited_tenant_route(
    cluster: &str,
    ip: std::net::IpAddr,
    limits: Value,
    host: &str,
) -> (EchoServer, Vec<Value>) {
    let (echo, mut documents) = tenant_backend(cluster, ip).await;
    documents[0]["spec"]["limits"] = limits;
    documents.push(simple_ingress(
        &format!("tenant-{cluster}"),
        "web",
        host,
        "web",
    ));
    (echo, documents)
}

/// ACME retries and waits short enough for a test CA.
pub const QUICK_ACME: [&str; 8] = [
    "--acme-retry-min",
    "0.5",
    "--acme-retry-max",
    "2",
    "--acme-lock-retry",
    "0.5",
    "--acme-order-timeout",
    "30",
];

/// A recording backend's next request head off `conn`: read until its
/// empty line, taken out of `buf` (what follows stays there: the body or
/// the next request); `None` once the client closes first.
pub async fn read_head(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    use tokio::io::AsyncReadExt;
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i + 4]).into_owned();
            buf.drain(..i + 4);
            return Some(head);
        }
        let mut chunk = [0u8; 16 * 1024];
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
