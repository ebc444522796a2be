//! The L4 side of the harness: echo-basic's TCP and UDP modes
//! (`TCP_ECHO_SERVER`, `UDP_ECHO_SERVER`), its HTTPS port for the HTTP echo
//! (`TLS_SERVER_CERT`), and the clients of upstream `conformance/utils/tcp`
//! and `utils/udp` that judge them.
//!
//! The TCP echo speaks echo-basic's `tcpserver` protocol: on connect it
//! writes `Gateway API Test TCP Server\n`, then answers `PING` with `PONG`,
//! `IS_TLS` with `true`/`false`, and `TEST` with one JSON line (the pod's
//! context and, over TLS, the handshake's server name and protocol). The
//! UDP echo answers every datagram with `{"request", "namespace",
//! "ingress", "service", "pod"}`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// echo-basic `tcpserver.WelcomeMessage`.
pub const WELCOME: &str = "Gateway API Test TCP Server\n";
/// What `udp.ExpectEchoResponseFromBackend` sends.
pub const UDP_PROBE: &str = "gateway-api-conformance-udp-echo";
/// The longest line a TCP echo reads or the client accepts.
const MAX_LINE: usize = 64 * 1024;

/// Who an echo process plays (echo-basic's environment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodContext {
    pub namespace: String,
    pub service: String,
    pub pod: String,
}

/// Tasks aborted when dropped, so a test's echoes end with it.
struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// echo-basic in TCP mode: a plain listener (`TCP_PORT`) and, with a
/// certificate, a TLS listener (`TLS_PORT`).
pub struct TcpEcho {
    pub plain: SocketAddr,
    pub tls: Option<SocketAddr>,
    _tasks: Tasks,
}

impl TcpEcho {
    /// Listens on `ip` (the pod's address) at ports of the kernel's choice.
    pub async fn start(
        ip: std::net::IpAddr,
        context: PodContext,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> std::io::Result<TcpEcho> {
        let plain = TcpListener::bind((ip, 0)).await?;
        let plain_addr = plain.local_addr()?;
        let tls_listener = match &tls {
            Some(_) => Some(TcpListener::bind((ip, 0)).await?),
            None => None,
        };
        let tls_addr = tls_listener
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()?;
        let mut base = json!({
            "namespace": context.namespace,
            "ingress": "",
            "service": context.service,
            "pod": context.pod,
            "tcpport": plain_addr.port().to_string(),
        });
        if let Some(addr) = tls_addr {
            base["tlsport"] = addr.port().to_string().into();
        }
        let mut tasks = vec![tokio::spawn(accept_loop(plain, None, base.clone()))];
        if let (Some(listener), Some(config)) = (tls_listener, tls) {
            let acceptor = TlsAcceptor::from(config);
            tasks.push(tokio::spawn(accept_loop(listener, Some(acceptor), base)));
        }
        Ok(TcpEcho {
            plain: plain_addr,
            tls: tls_addr,
            _tasks: Tasks(tasks),
        })
    }
}

async fn accept_loop(listener: TcpListener, tls: Option<TlsAcceptor>, base: Value) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let tls = tls.clone();
        let base = base.clone();
        tokio::spawn(async move {
            match tls {
                None => {
                    let mut payload = base;
                    payload["isTLS"] = false.into();
                    let _ = serve_tcp(stream, false, payload).await;
                }
                Some(acceptor) => {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let (_, connection) = stream.get_ref();
                    let mut assertion = json!({
                        "version": version_name(connection.protocol_version()),
                        "serverName": connection.server_name().unwrap_or_default(),
                        "cipherSuite": connection
                            .negotiated_cipher_suite()
                            .and_then(|s| s.suite().as_str())
                            .unwrap_or_default(),
                    });
                    if let Some(alpn) = connection.alpn_protocol() {
                        assertion["negotiatedProtocol"] =
                            String::from_utf8_lossy(alpn).into_owned().into();
                    }
                    let mut payload = base;
                    payload["isTLS"] = true.into();
                    payload["tls"] = assertion;
                    let _ = serve_tcp(stream, true, payload).await;
                }
            }
        });
    }
}

/// Go's `tls.VersionName`.
fn version_name(version: Option<rustls::ProtocolVersion>) -> &'static str {
    match version {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLS 1.3",
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLS 1.2",
        _ => "",
    }
}

async fn serve_tcp<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    is_tls: bool,
    payload: Value,
) -> std::io::Result<()> {
    let (read, mut write) = tokio::io::split(stream);
    write.write_all(WELCOME.as_bytes()).await?;
    let mut lines = BufReader::new(read).take(MAX_LINE as u64 * 64).lines();
    while let Some(line) = lines.next_line().await? {
        let answer = match line.as_str() {
            "TEST" => format!("{payload}\n"),
            "IS_TLS" => format!("{is_tls}\n"),
            "PING" => "PONG\n".to_string(),
            _ => continue,
        };
        write.write_all(answer.as_bytes()).await?;
    }
    Ok(())
}

/// echo-basic in UDP mode.
pub struct UdpEcho {
    pub addr: SocketAddr,
    _tasks: Tasks,
}

impl UdpEcho {
    pub async fn start(ip: std::net::IpAddr, context: PodContext) -> std::io::Result<UdpEcho> {
        let socket = UdpSocket::bind((ip, 0)).await?;
        let addr = socket.local_addr()?;
        let task = tokio::spawn(async move {
            let mut buffer = vec![0u8; 1024];
            loop {
                let Ok((n, peer)) = socket.recv_from(&mut buffer).await else {
                    continue;
                };
                let answer = json!({
                    "request": String::from_utf8_lossy(&buffer[..n]),
                    "namespace": context.namespace,
                    "ingress": "",
                    "service": context.service,
                    "pod": context.pod,
                });
                let _ = socket.send_to(answer.to_string().as_bytes(), peer).await;
            }
        });
        Ok(UdpEcho {
            addr,
            _tasks: Tasks(vec![task]),
        })
    }
}

/// echo-basic's HTTPS port (`TLS_SERVER_CERT` without a gRPC or TCP mode):
/// TLS terminated with the pod's certificate, each connection handed to
/// the pod's HTTP echo with what its handshake settled, which the echo
/// reports as echo-basic's `tls` (the SNI the Gateway sent, the client
/// certificate it presented).
pub struct TlsFront {
    pub addr: SocketAddr,
    _tasks: Tasks,
}

impl TlsFront {
    /// Listens at `addr` (the pod's address and echo-basic's TLS port).
    pub async fn start(
        addr: SocketAddr,
        echo: teapot_testkit::echo::Intake,
        config: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<TlsFront> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        // Go's `ListenAndServeTLS` offers both, so the echo reports the
        // protocol the client's ALPN settled on.
        let mut config = (*config).clone();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, echo) = (acceptor.clone(), echo.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let facts = tls_facts(tls.get_ref().1);
                    echo.serve(tls, Some(facts)).await;
                });
            }
        });
        Ok(TlsFront {
            addr,
            _tasks: Tasks(vec![task]),
        })
    }
}

/// echo-basic's `tlsStateToAssertions` of a finished handshake.
fn tls_facts(connection: &rustls::ServerConnection) -> teapot_testkit::echo::TlsFacts {
    let version = match connection.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
        _ => "",
    };
    teapot_testkit::echo::TlsFacts {
        version: version.to_string(),
        peer_certificates: connection
            .peer_certificates()
            .unwrap_or_default()
            .iter()
            .map(|cert| teapot_testkit::echo::certificate_pem(cert))
            .collect(),
        server_name: connection.server_name().unwrap_or_default().to_string(),
        negotiated_protocol: connection
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default(),
        cipher_suite: connection
            .negotiated_cipher_suite()
            .map(|s| cipher_suite_name(s.suite()))
            .unwrap_or_default(),
    }
}

/// Go's `tls.CipherSuiteName`: the IANA name, which rustls spells with a
/// `TLS13_` prefix for the TLS 1.3 suites.
fn cipher_suite_name(suite: rustls::CipherSuite) -> String {
    let name = suite.as_str().unwrap_or_default();
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name.to_string(),
    }
}

/// A server configuration for an echo's certificate (PEM chain and key).
pub fn server_config(cert_pem: &str, key_pem: &str) -> Result<Arc<rustls::ServerConfig>, String> {
    server_config_for_clients(cert_pem, key_pem, None)
}

/// [`server_config`] that, with `client_cas` (PEM), asks for a client
/// certificate and verifies one if given, as echo-basic does with
/// `TLS_CLIENT_CACERTS` (Go's `VerifyClientCertIfGiven`): a client without
/// one is served, one with a certificate the CAs did not sign is refused.
pub fn server_config_for_clients(
    cert_pem: &str,
    key_pem: &str,
    client_cas: Option<&str>,
) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("the private key: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("the TLS configuration: {e}"))?;
    let builder = match client_cas {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(|e| format!("the client CA bundle: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("the client CA bundle: {e}"))?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| format!("the client CA bundle: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder
        .with_single_cert(chain, key)
        .map(Arc::new)
        .map_err(|e| format!("the TLS configuration: {e}"))
}

/// What `tcp.ExpectedResponse` asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpExpected {
    pub backend_is_tls: bool,
    pub backend: String,
    pub namespace: String,
    pub tls_protocol: String,
    pub hostname: String,
}

/// One `WaitForValidTCPResponse` attempt's answers: the `IS_TLS` line and
/// the `TEST` payload.
#[derive(Debug, Clone)]
pub struct TcpAnswers {
    pub is_tls: String,
    pub payload: Value,
}

/// One attempt of `tcp.WaitForValidTCPResponse`: dial (TLS when
/// `server_name` is given, any certificate accepted), welcome, `PING`,
/// `IS_TLS`, `TEST`.
pub async fn tcp_exchange(
    addr: SocketAddr,
    server_name: Option<&str>,
    timeout: Duration,
) -> Result<TcpAnswers, String> {
    let attempt = async {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("client could not connect to {addr}: {e}"))?;
        match server_name {
            None => talk(stream).await,
            Some(name) => {
                let connector = TlsConnector::from(insecure_client_config());
                let server = rustls::pki_types::ServerName::try_from(name.to_string())
                    .map_err(|e| format!("server name {name:?}: {e}"))?;
                let stream = connector
                    .connect(server, stream)
                    .await
                    .map_err(|e| format!("TLS handshake with {addr} (SNI {name:?}): {e}"))?;
                talk(stream).await
            }
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no answer from {addr} within {timeout:?}")))
}

async fn talk<S: AsyncRead + AsyncWrite + Unpin>(stream: S) -> Result<TcpAnswers, String> {
    let (read, mut write) = tokio::io::split(stream);
    let mut reader = BufReader::new(read);
    let welcome = read_line(&mut reader).await?;
    if welcome != WELCOME {
        return Err(format!(
            "TCPServer welcome message does not match: {welcome:?}"
        ));
    }
    let pong = ask(&mut write, &mut reader, "PING").await?;
    if pong != "PONG\n" {
        return Err(format!("expected PONG, got {pong:?}"));
    }
    let is_tls = ask(&mut write, &mut reader, "IS_TLS").await?;
    let test = ask(&mut write, &mut reader, "TEST").await?;
    let payload = serde_json::from_str(&test).map_err(|e| format!("the TEST payload: {e}"))?;
    Ok(TcpAnswers {
        is_tls: is_tls.trim_end_matches('\n').to_string(),
        payload,
    })
}

async fn ask<W: AsyncWrite + Unpin, R: AsyncRead + Unpin>(
    write: &mut W,
    reader: &mut BufReader<R>,
    what: &str,
) -> Result<String, String> {
    write
        .write_all(format!("{what}\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    read_line(reader).await
}

async fn read_line<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> Result<String, String> {
    let mut buf = Vec::new();
    let n = reader
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut buf)
        .await
        .map_err(|e| e.to_string())?;
    if n == 0 || !buf.ends_with(b"\n") {
        return Err("the connection closed before a full line".into());
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// `WaitForValidTCPResponse`'s assertions and `assertTestMessage`.
pub fn compare_tcp(expected: &TcpExpected, got: &TcpAnswers) -> Result<(), String> {
    if got.is_tls != expected.backend_is_tls.to_string() {
        return Err(format!(
            "IS_TLS: expected {}, got {:?}",
            expected.backend_is_tls, got.is_tls
        ));
    }
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let namespace = text(&got.payload, "namespace");
    if namespace != expected.namespace {
        return Err(format!(
            "namespace does not match: expected {:?}, got {namespace:?}",
            expected.namespace
        ));
    }
    let pod = text(&got.payload, "pod");
    if !pod.starts_with(&format!("{}-", expected.backend)) {
        return Err(format!(
            "backend name does not match with pod prefix. pod={pod} and backend={}",
            expected.backend
        ));
    }
    let tls = got.payload.get("tls").cloned().unwrap_or(Value::Null);
    if !expected.hostname.is_empty() && text(&tls, "serverName") != expected.hostname {
        return Err(format!(
            "the backend saw SNI {:?}, expected {:?}",
            text(&tls, "serverName"),
            expected.hostname
        ));
    }
    if !expected.tls_protocol.is_empty()
        && text(&tls, "negotiatedProtocol") != expected.tls_protocol
    {
        return Err(format!(
            "the backend negotiated {:?}, expected {:?}",
            text(&tls, "negotiatedProtocol"),
            expected.tls_protocol
        ));
    }
    Ok(())
}

/// One datagram to the UDP echo at `addr` and its answer, as the
/// upstream helpers dial it (a connected socket of the address's family).
pub(crate) async fn udp_round_trip(addr: SocketAddr, probe: &[u8]) -> Result<Vec<u8>, String> {
    let socket = UdpSocket::bind(if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .await
    .map_err(|e| e.to_string())?;
    socket
        .connect(addr)
        .await
        .map_err(|e| format!("dialing UDP {addr}: {e}"))?;
    socket
        .send(probe)
        .await
        .map_err(|e| format!("writing the UDP probe: {e}"))?;
    let mut buffer = vec![0u8; 4096];
    let n = socket
        .recv(&mut buffer)
        .await
        .map_err(|e| format!("reading the UDP echo response: {e}"))?;
    buffer.truncate(n);
    Ok(buffer)
}

/// One attempt of `udp.ExpectEchoResponseFromBackend`: the probe, one
/// answer, its service and namespace when expected.
pub async fn udp_exchange(
    addr: SocketAddr,
    service: &str,
    namespace: &str,
    timeout: Duration,
) -> Result<(), String> {
    let attempt = async {
        let answer = udp_round_trip(addr, UDP_PROBE.as_bytes()).await?;
        if service.is_empty() && namespace.is_empty() {
            return Ok(());
        }
        let answer: Value = serde_json::from_slice(&answer)
            .map_err(|e| format!("decoding the UDP echo response: {e}"))?;
        let got = |key: &str| {
            answer
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        if !service.is_empty() && got("service") != service {
            return Err(format!(
                "UDP echo response service={:?} did not match expected {service:?} (pod={})",
                got("service"),
                got("pod")
            ));
        }
        if !namespace.is_empty() && got("namespace") != namespace {
            return Err(format!(
                "UDP echo response namespace={:?} did not match expected {namespace:?}",
                got("namespace")
            ));
        }
        Ok(())
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no UDP answer from {addr} within {timeout:?}")))
}

/// A TLS client that accepts any certificate (the TLS helpers here do not
/// verify: the CA the upstream test passes is read at run time), TLS 1.2
/// at least, as the upstream dialer's `MinVersion`.
pub fn insecure_client_config() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAny { algorithms }))
                .with_no_client_auth()
        });
    match config {
        Ok(config) => Arc::new(config),
        // The ring provider always supports the default versions.
        Err(_) => unreachable!("ring supports TLS 1.2 and 1.3"),
    }
}

/// The verifier of [`insecure_client_config`]: any certificate, the
/// handshake signatures still checked.
pub fn accept_any() -> Arc<dyn rustls::client::danger::ServerCertVerifier> {
    let provider = rustls::crypto::ring::default_provider();
    Arc::new(AcceptAny {
        algorithms: provider.signature_verification_algorithms,
    })
}

#[derive(Debug)]
struct AcceptAny {
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::client::danger::ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCALHOST: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn context(pod: &str) -> PodContext {
        PodContext {
            namespace: "ns".into(),
            service: "svc".into(),
            pod: pod.into(),
        }
    }

    #[tokio::test]
    async fn tcp_echo_plain_and_tls() {
        let pem = teapot_testkit::certs::self_signed(&["abc.example.com"]);
        let config = server_config(&pem.cert_pem, &pem.key_pem).unwrap();
        let echo = TcpEcho::start(LOCALHOST, context("svc-1-abc"), Some(config))
            .await
            .unwrap();
        let timeout = Duration::from_secs(5);
        let plain = tcp_exchange(echo.plain, None, timeout).await.unwrap();
        assert_eq!(plain.is_tls, "false");
        assert_eq!(plain.payload["pod"], "svc-1-abc");
        let mut expected = TcpExpected {
            backend: "svc-1".into(),
            namespace: "ns".into(),
            ..TcpExpected::default()
        };
        compare_tcp(&expected, &plain).unwrap();
        expected.backend = "svc-2".into();
        assert!(
            compare_tcp(&expected, &plain)
                .unwrap_err()
                .contains("pod prefix")
        );

        let tls = tcp_exchange(echo.tls.unwrap(), Some("abc.example.com"), timeout)
            .await
            .unwrap();
        assert_eq!(tls.is_tls, "true");
        let expected = TcpExpected {
            backend_is_tls: true,
            backend: "svc-1".into(),
            namespace: "ns".into(),
            hostname: "abc.example.com".into(),
            ..TcpExpected::default()
        };
        compare_tcp(&expected, &tls).unwrap();
        let other = TcpExpected {
            hostname: "other.example.com".into(),
            ..expected.clone()
        };
        assert!(compare_tcp(&other, &tls).unwrap_err().contains("SNI"));
        // A plain answer where TLS is expected fails on IS_TLS.
        assert!(
            compare_tcp(&expected, &plain)
                .unwrap_err()
                .contains("IS_TLS")
        );
    }

    #[tokio::test]
    async fn udp_echo_names_its_backend() {
        let echo = UdpEcho::start(LOCALHOST, context("svc-1-abc"))
            .await
            .unwrap();
        let timeout = Duration::from_secs(5);
        udp_exchange(echo.addr, "svc", "ns", timeout).await.unwrap();
        udp_exchange(echo.addr, "", "", timeout).await.unwrap();
        let err = udp_exchange(echo.addr, "other", "", timeout)
            .await
            .unwrap_err();
        assert!(err.contains("did not match"), "{err}");
    }

    /// One GET over TLS to `front` with SNI `abc.example.com`, presenting
    /// `client` when given; the echo's JSON.
    async fn echo_over_tls(
        front: SocketAddr,
        client: Option<(&str, &str)>,
    ) -> Result<Value, teapot_testkit::Error> {
        use teapot_testkit::client::{Connection, Proto, Request};
        let config = super::super::tls_client::client_config(None, client).unwrap();
        let mut connection =
            Connection::open_with_tls_config(front, "abc.example.com", &config, Proto::Http1)
                .await?;
        let response = connection
            .send(&Request::get("abc.example.com", "/front"))
            .await?;
        Ok(response.json().unwrap())
    }

    #[tokio::test]
    async fn tls_front_tells_the_http_echo_the_handshake() {
        use teapot_testkit::certs::TestCa;
        use teapot_testkit::echo::{EchoIdentity, EchoServer, certificate_pem};
        let backend_ca = TestCa::new("backend CA");
        let serving = backend_ca.issue(&["abc.example.com"]);
        let client = backend_ca.issue_client("gateway");
        let stranger = TestCa::new("another CA").issue_client("gateway");
        let echo = EchoServer::start_echo_basic(EchoIdentity::new("ns", "", "svc", "svc-1-a"))
            .await
            .unwrap();
        let config = server_config_for_clients(
            &serving.cert_pem,
            &serving.key_pem,
            Some(backend_ca.cert_pem()),
        )
        .unwrap();
        let front = TlsFront::start((LOCALHOST, 0).into(), echo.intake(), config)
            .await
            .unwrap();

        let json = echo_over_tls(front.addr, Some((&client.cert_pem, &client.key_pem)))
            .await
            .unwrap();
        assert_eq!(json["pod"], "svc-1-a");
        assert_eq!(json["path"], "/front");
        let tls = &json["tls"];
        assert_eq!(tls["serverName"], "abc.example.com");
        assert_eq!(tls["negotiatedProtocol"], "http/1.1");
        assert_eq!(tls["version"], "TLSv1.3");
        assert_eq!(tls["cipherSuite"].as_str().map(|s| &s[..4]), Some("TLS_"));
        assert_eq!(
            tls["peerCertificates"],
            serde_json::json!([certificate_pem(&client.cert_der)])
        );

        // Without a certificate the request is served and reports none
        // (`VerifyClientCertIfGiven`); another CA's certificate is refused.
        let json = echo_over_tls(front.addr, None).await.unwrap();
        assert_eq!(json["tls"]["serverName"], "abc.example.com");
        assert!(json["tls"].get("peerCertificates").is_none(), "{json}");
        assert!(
            echo_over_tls(front.addr, Some((&stranger.cert_pem, &stranger.key_pem)))
                .await
                .is_err()
        );
        assert_eq!(echo.targets(), vec!["/front", "/front"]);
    }
}
