//! An HTTP/3 load generator on quinn and h3 (no HTTP/3 load tool is
//! packaged in Debian: h2load there is built without QUIC, wrk speaks
//! HTTP/1 only). Three shapes of load, each against one `host:port`:
//!
//! - [`keep_alive`]: `connections` QUIC connections, each with `streams`
//!   request loops (one request at a time per loop), for a fixed window;
//!   requests/s and latency percentiles, as wrk measures HTTP/1.1;
//! - [`handshakes`]: `clients` loops of a new connection per request (a
//!   full TLS 1.3 handshake, no resumption, no 0-RTT, then one GET);
//! - [`open_idle`]: one connection, one request, then held open with the
//!   client's keep-alive PINGs, for memory per idle connection.
//!
//! The server's certificate is verified: the client trusts exactly the
//! certificate the bench made (pinned as the only root) and checks it
//! against the host name, as the HTTP/1 and HTTP/2 runs of `http-report`
//! do. Nothing skips verification.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::{Buf, Bytes};
use tokio::time::Instant;

use crate::stats::percentile;

/// A request the load repeats: the server's address, the TLS name and
/// `:authority`, and the path.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
}

impl Target {
    fn uri(&self) -> anyhow::Result<http::Uri> {
        format!("https://{}{}", self.host, self.path)
            .parse()
            .context("the request URI")
    }
}

/// A client that trusts only `cert_der` (the bench's own certificate,
/// pinned as the root), TLS 1.3 with ALPN `h3`, no session resumption
/// (each handshake is a full one) and so no 0-RTT. `keep_alive` sends
/// QUIC PINGs at that interval, so a held connection outlives the
/// server's idle timeout.
pub fn client_config(
    cert_der: &[u8],
    keep_alive: Option<Duration>,
) -> anyhow::Result<quinn::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(cert_der.to_vec()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.resumption = rustls::client::Resumption::disabled();
    tls.enable_early_data = false;
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(keep_alive);
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// teapot's configuration for the HTTP/3 benches: `host` routed to the
/// backend on 127.0.0.1:`backend`, with `cert` as its tenant Secret.
pub fn teapot_manifests(
    backend: u16,
    host: &str,
    cert: &teapot_testkit::certs::CertifiedPem,
) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: teapot}}
spec: {{controller: teapot.dev/ingress-controller}}
---
apiVersion: v1
kind: Service
metadata: {{name: static, namespace: bench}}
spec:
  ports: [{{name: http, port: 80, targetPort: {backend}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: static-1, namespace: bench, labels: {{kubernetes.io/service-name: static}}}}
addressType: IPv4
ports: [{{name: http, port: {backend}, protocol: TCP}}]
endpoints: [{{addresses: [\"127.0.0.1\"], conditions: {{ready: true}}}}]
---
{secret}---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: bench, namespace: bench}}
spec:
  ingressClassName: teapot
  tls: [{{hosts: [{host}], secretName: bench-tls}}]
  rules:
    - host: {host}
      http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: static, port: {{name: http}}}}}}}}]}}
",
        secret = teapot_testkit::certs::tls_secret_yaml("bench", "bench-tls", cert)
    )
}

/// A client endpoint on an ephemeral UDP port of 127.0.0.1.
pub fn endpoint(config: quinn::ClientConfig) -> anyhow::Result<quinn::Endpoint> {
    let mut endpoint = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    endpoint.set_default_client_config(config);
    Ok(endpoint)
}

type Requests = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// An HTTP/3 connection: the QUIC connection, the handle that sends
/// requests, and the task that drives h3's control stream.
pub struct H3Conn {
    pub quic: quinn::Connection,
    pub requests: Requests,
    driver: tokio::task::JoinHandle<()>,
}

impl H3Conn {
    /// Handshake, then HTTP/3's SETTINGS. No grease: every request is the
    /// same few frames for every server.
    pub async fn connect(endpoint: &quinn::Endpoint, target: &Target) -> anyhow::Result<H3Conn> {
        let quic = endpoint
            .connect(target.addr, &target.host)?
            .await
            .context("QUIC handshake")?;
        let (mut driver, requests) = h3::client::builder()
            .send_grease(false)
            .build::<_, _, Bytes>(h3_quinn::Connection::new(quic.clone()))
            .await
            .context("HTTP/3 connection")?;
        let driver = tokio::spawn(async move {
            let _ = driver.wait_idle().await;
        });
        Ok(H3Conn {
            quic,
            requests,
            driver,
        })
    }

    /// Closes the connection now (CONNECTION_CLOSE with H3_NO_ERROR).
    pub fn close(&self) {
        self.quic.close(quinn::VarInt::from_u32(0x100), b"");
    }
}

impl Drop for H3Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// One GET on `requests`, its answer read to the end: the status and the
/// body's length.
pub async fn get(requests: &mut Requests, uri: &http::Uri) -> anyhow::Result<(u16, usize)> {
    let request = http::Request::get(uri.clone()).body(())?;
    let mut stream = requests.send_request(request).await?;
    stream.finish().await?;
    let response = stream.recv_response().await?;
    let mut length = 0;
    while let Some(chunk) = stream.recv_data().await? {
        length += chunk.remaining();
    }
    Ok((response.status().as_u16(), length))
}

/// What one load run counted between its warm-up and its end.
#[derive(Debug, Default)]
pub struct LoadResult {
    /// Latency of each 2xx answer counted, µs, sorted.
    pub latencies_us: Vec<u32>,
    pub ok: u64,
    pub non_2xx: u64,
    pub errors: u64,
    /// Connections that could not be opened or were lost (each reopened).
    pub reconnects: u64,
    pub seconds: f64,
    /// The first error, for the report.
    pub first_error: Option<String>,
}

impl LoadResult {
    pub fn per_second(&self) -> f64 {
        self.ok as f64 / self.seconds
    }

    pub fn percentile_ms(&self, q: f64) -> f64 {
        percentile(&self.latencies_us, q).map_or(f64::NAN, |us| f64::from(us) / 1e3)
    }

    fn merge(&mut self, other: LoadResult) {
        self.latencies_us.extend(other.latencies_us);
        self.ok += other.ok;
        self.non_2xx += other.non_2xx;
        self.errors += other.errors;
        self.reconnects += other.reconnects;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// The window a run counts in: answers that arrive in
/// `[from, until)`; loops start at once and stop at `until`.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub from: Instant,
    pub until: Instant,
}

impl Window {
    /// Starts now, counts after `warm_up`, for `measure`.
    pub fn after(warm_up: Duration, measure: Duration) -> Window {
        let from = Instant::now() + warm_up;
        Window {
            from,
            until: from + measure,
        }
    }

    fn seconds(&self) -> f64 {
        (self.until - self.from).as_secs_f64()
    }
}

/// `connections` connections with `streams` request loops each, until
/// the window ends. A lost connection is reopened (and counted).
pub async fn keep_alive(
    endpoint: &quinn::Endpoint,
    target: &Target,
    connections: usize,
    streams: usize,
    window: Window,
) -> anyhow::Result<LoadResult> {
    let uri = target.uri()?;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (endpoint, target, uri) = (endpoint.clone(), target.clone(), uri.clone());
        tasks.spawn(async move {
            let mut result = LoadResult::default();
            while Instant::now() < window.until {
                let conn = match H3Conn::connect(&endpoint, &target).await {
                    Ok(conn) => conn,
                    Err(e) => {
                        result.reconnects += 1;
                        result.first_error.get_or_insert(format!("{e:#}"));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let mut loops = tokio::task::JoinSet::new();
                for _ in 0..streams {
                    let (requests, uri) = (conn.requests.clone(), uri.clone());
                    loops.spawn(request_loop(requests, uri, window));
                }
                for one in loops.join_all().await {
                    result.merge(one);
                }
                if Instant::now() < window.until {
                    result.reconnects += 1;
                }
                conn.close();
            }
            result
        });
    }
    Ok(merged(tasks, &window).await)
}

/// Every task's result as one, over the window's length.
async fn merged(tasks: tokio::task::JoinSet<LoadResult>, window: &Window) -> LoadResult {
    let mut total = LoadResult {
        seconds: window.seconds(),
        ..LoadResult::default()
    };
    for one in tasks.join_all().await {
        total.merge(one);
    }
    total.latencies_us.sort_unstable();
    total
}

/// Requests one after the other on one connection until the window ends
/// or the connection fails.
async fn request_loop(mut requests: Requests, uri: http::Uri, window: Window) -> LoadResult {
    let mut result = LoadResult::default();
    loop {
        let start = Instant::now();
        if start >= window.until {
            break;
        }
        let answer = get(&mut requests, &uri).await;
        let end = Instant::now();
        let counted = end >= window.from && end < window.until;
        match answer {
            Ok((status, _)) if counted && (200..300).contains(&status) => {
                result.ok += 1;
                let us = (end - start).as_micros();
                result
                    .latencies_us
                    .push(u32::try_from(us).unwrap_or(u32::MAX));
            }
            Ok(_) if counted => result.non_2xx += 1,
            Ok(_) => {}
            Err(e) => {
                if counted {
                    result.errors += 1;
                }
                result.first_error.get_or_insert(format!("{e:#}"));
                break;
            }
        }
    }
    result
}

/// `clients` loops of: a new connection (full handshake), one GET read
/// to its end, the connection closed. Counts the connections whose GET
/// was answered 2xx within the window: handshakes/s with their request.
pub async fn handshakes(
    endpoint: &quinn::Endpoint,
    target: &Target,
    clients: usize,
    window: Window,
) -> anyhow::Result<LoadResult> {
    let uri = target.uri()?;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (endpoint, target, uri) = (endpoint.clone(), target.clone(), uri.clone());
        tasks.spawn(async move {
            let mut result = LoadResult::default();
            while Instant::now() < window.until {
                let start = Instant::now();
                let one = async {
                    let mut conn = H3Conn::connect(&endpoint, &target).await?;
                    let answer = get(&mut conn.requests, &uri).await;
                    conn.close();
                    answer
                };
                let answer = tokio::time::timeout(Duration::from_secs(5), one).await;
                let end = Instant::now();
                if end < window.from || end >= window.until {
                    continue;
                }
                match answer {
                    Ok(Ok((status, _))) if (200..300).contains(&status) => {
                        result.ok += 1;
                        let us = (end - start).as_micros();
                        result
                            .latencies_us
                            .push(u32::try_from(us).unwrap_or(u32::MAX));
                    }
                    Ok(Ok(_)) => result.non_2xx += 1,
                    Ok(Err(e)) => {
                        result.errors += 1;
                        result.first_error.get_or_insert(format!("{e:#}"));
                    }
                    Err(_) => {
                        result.errors += 1;
                        result
                            .first_error
                            .get_or_insert("timed out after 5 s".into());
                    }
                }
            }
            result
        });
    }
    Ok(merged(tasks, &window).await)
}

/// A connection held idle after its one request. When it is dropped it
/// counts itself in `lost` if the server (or its idle timeout) had
/// closed it meanwhile, then closes it.
pub struct IdleConn {
    conn: H3Conn,
    lost: Arc<AtomicU64>,
}

impl Drop for IdleConn {
    fn drop(&mut self) {
        if self.conn.quic.close_reason().is_some() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
        self.conn.close();
    }
}

/// Opens a connection, does one GET (it must be answered 2xx) and
/// returns the connection to hold. The endpoint's client config should
/// send keep-alive PINGs (see [`client_config`]).
pub async fn open_idle(
    endpoint: quinn::Endpoint,
    target: Target,
    lost: Arc<AtomicU64>,
) -> anyhow::Result<IdleConn> {
    let uri = target.uri()?;
    let mut conn = H3Conn::connect(&endpoint, &target).await?;
    let (status, _) = get(&mut conn.requests, &uri).await?;
    if !(200..300).contains(&status) {
        bail!("answered {status}");
    }
    Ok(IdleConn { conn, lost })
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_testkit::certs::{CertifiedPem, self_signed};

    /// A quinn + h3 server for `cert` answering every request 200 with
    /// `hello`; its address.
    fn server(cert: &CertifiedPem) -> SocketAddr {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
        let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).unwrap();
        let chain = vec![CertificateDer::from(cert.cert_der.clone())];
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls).unwrap();
        let config = quinn::ServerConfig::with_crypto(Arc::new(quic));
        let endpoint =
            quinn::Endpoint::server(config, SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = endpoint.local_addr().unwrap();
        tokio::spawn(async move {
            while let Some(incoming) = endpoint.accept().await {
                tokio::spawn(async move {
                    let Ok(conn) = incoming.await else { return };
                    let Ok(mut h3) =
                        h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(conn))
                            .await
                    else {
                        return;
                    };
                    while let Ok(Some(resolver)) = h3.accept().await {
                        tokio::spawn(async move {
                            let Ok((_, mut stream)) = resolver.resolve_request().await else {
                                return;
                            };
                            let head = http::Response::builder().status(200).body(()).unwrap();
                            stream.send_response(head).await.unwrap();
                            stream
                                .send_data(Bytes::from_static(b"hello"))
                                .await
                                .unwrap();
                            stream.finish().await.unwrap();
                        });
                    }
                });
            }
        });
        addr
    }

    fn target(addr: SocketAddr) -> Target {
        Target {
            addr,
            host: "h3.test".into(),
            path: "/".into(),
        }
    }

    #[tokio::test]
    async fn only_the_pinned_certificate_is_trusted() {
        let (served, other) = (self_signed(&["h3.test"]), self_signed(&["h3.test"]));
        let addr = server(&served);
        let wrong = endpoint(client_config(&other.cert_der, None).unwrap()).unwrap();
        assert!(H3Conn::connect(&wrong, &target(addr)).await.is_err());
        let right = endpoint(client_config(&served.cert_der, None).unwrap()).unwrap();
        let mut conn = H3Conn::connect(&right, &target(addr)).await.unwrap();
        let uri = target(addr).uri().unwrap();
        assert_eq!(get(&mut conn.requests, &uri).await.unwrap(), (200, 5));
        // The name is checked too, not only the key.
        let misnamed = Target {
            host: "other.test".into(),
            ..target(addr)
        };
        assert!(H3Conn::connect(&right, &misnamed).await.is_err());
    }

    #[tokio::test]
    async fn each_load_counts_the_answers_of_its_window() {
        let cert = self_signed(&["h3.test"]);
        let addr = server(&cert);
        let client = endpoint(client_config(&cert.cert_der, None).unwrap()).unwrap();
        let window = Window::after(Duration::from_millis(100), Duration::from_millis(400));
        let kept = keep_alive(&client, &target(addr), 2, 3, window)
            .await
            .unwrap();
        assert!(kept.ok > 0, "{kept:?}");
        assert_eq!((kept.errors, kept.non_2xx), (0, 0), "{kept:?}");
        assert_eq!(kept.latencies_us.len() as u64, kept.ok);
        assert!(kept.latencies_us.is_sorted());
        assert_eq!(kept.seconds, 0.4);
        let window = Window::after(Duration::from_millis(100), Duration::from_millis(400));
        let new = handshakes(&client, &target(addr), 2, window).await.unwrap();
        assert!(new.ok > 0, "{new:?}");
        assert_eq!(new.errors, 0, "{new:?}");
        let lost = Arc::new(AtomicU64::new(0));
        let idle = open_idle(client.clone(), target(addr), lost.clone())
            .await
            .unwrap();
        drop(idle);
        assert_eq!(lost.load(Ordering::Relaxed), 0, "it was open when dropped");
    }
}
