//! A test HTTP client that does exactly what it is told.
//!
//! Unlike a general-purpose client it adds no `User-Agent`, no
//! `Accept-Encoding`, follows no redirects and keeps the request target
//! verbatim, so a test controls every byte that matters. Over TLS it picks the
//! SNI independently of the address and `Host`, and reports the certificate
//! chain and ALPN protocol the server presented.
//!
//! There are no built-in timeouts (a delayed echo may legitimately take
//! 30 s); wrap calls in `tokio::time::timeout` where a hang is possible.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::Error;

/// How to reach the server: plain TCP or TLS with a chosen SNI.
#[derive(Clone, Debug)]
pub enum Transport {
    Plain,
    Tls {
        /// Sent as SNI (an IP address sends none, as in every TLS client).
        sni: String,
        /// None: accept any certificate (like InsecureSkipVerify) but still record it
        roots: Option<Vec<Vec<u8>>>,
    },
}

impl Transport {
    /// TLS that accepts any certificate, like the conformance suite's Go client.
    pub fn tls_insecure(sni: &str) -> Transport {
        Transport::Tls {
            sni: sni.to_owned(),
            roots: None,
        }
    }

    /// TLS that verifies the server against `roots` (DER certificates).
    pub fn tls_verified(sni: &str, roots: &[&[u8]]) -> Transport {
        Transport::Tls {
            sni: sni.to_owned(),
            roots: Some(roots.iter().map(|r| r.to_vec()).collect()),
        }
    }
}

/// HTTP version to speak. Http2 over TLS uses ALPN "h2"; over Plain, prior knowledge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Http1,
    Http2,
}

/// One request, exactly as it should go on the wire.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// Path + query, sent verbatim.
    pub target: String,
    /// The Host header, or `:authority` in HTTP/2. Empty: no Host header (HTTP/1 only).
    pub host: String,
    /// Extra headers in order; repeated names are sent repeatedly.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Used by [`send`]; a [`Connection`] speaks the protocol it was opened with.
    pub proto: Proto,
}

impl Request {
    /// `GET target` with `Host: host` over HTTP/1.1, no other headers.
    pub fn get(host: &str, target: &str) -> Request {
        Request {
            method: "GET".to_owned(),
            target: target.to_owned(),
            host: host.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            proto: Proto::Http1,
        }
    }

    /// Builder-style: adds one header.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Builder-style: sets the protocol.
    pub fn proto(mut self, proto: Proto) -> Request {
        self.proto = proto;
        self
    }
}

/// A complete response plus what the TLS handshake revealed.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub version: http::Version,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// leaf first, empty for Plain
    pub peer_certificates: Vec<Vec<u8>>,
    /// The negotiated ALPN protocol, None for Plain or when none was agreed.
    pub alpn: Option<Vec<u8>>,
}

impl Response {
    /// The body as JSON (the echo server's answers).
    pub fn json(&self) -> Result<serde_json::Value, Error> {
        Ok(serde_json::from_slice(&self.body)?)
    }

    /// The body as text, invalid UTF-8 replaced.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One request on a fresh connection.
pub async fn send(
    addr: SocketAddr,
    transport: &Transport,
    req: &Request,
) -> Result<Response, Error> {
    let mut conn = Connection::open(addr, transport, req.proto).await?;
    conn.send(req).await
}

/// A kept-alive connection for many requests.
#[derive(Debug)]
pub struct Connection {
    sender: Sender,
    proto: Proto,
    /// "http" or "https", for the HTTP/2 `:scheme`.
    scheme: &'static str,
    peer_certificates: Vec<Vec<u8>>,
    alpn: Option<Vec<u8>>,
    /// Drives the hyper connection; aborted on drop so the socket closes
    /// right away instead of whenever hyper notices.
    driver: JoinHandle<()>,
}

#[derive(Debug)]
enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Connection {
    /// Connects, does the TLS handshake if asked, then the HTTP handshake.
    pub async fn open(
        addr: SocketAddr,
        transport: &Transport,
        proto: Proto,
    ) -> Result<Connection, Error> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        match transport {
            Transport::Plain => {
                let (sender, driver) = handshake(tcp, proto).await?;
                Ok(Connection {
                    sender,
                    proto,
                    scheme: "http",
                    peer_certificates: Vec::new(),
                    alpn: None,
                    driver,
                })
            }
            Transport::Tls { sni, roots } => {
                let config = tls_config(roots.as_deref(), proto)?;
                Connection::open_tls(tcp, sni, config, proto).await
            }
        }
    }

    /// Connects over TLS with the caller's client configuration (its own
    /// verifier, a client certificate); ALPN is set for `proto`.
    pub async fn open_with_tls_config(
        addr: SocketAddr,
        sni: &str,
        config: &ClientConfig,
        proto: Proto,
    ) -> Result<Connection, Error> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let mut config = config.clone();
        config.alpn_protocols = vec![match proto {
            Proto::Http1 => b"http/1.1".to_vec(),
            Proto::Http2 => b"h2".to_vec(),
        }];
        Connection::open_tls(tcp, sni, config, proto).await
    }

    async fn open_tls(
        tcp: TcpStream,
        sni: &str,
        config: ClientConfig,
        proto: Proto,
    ) -> Result<Connection, Error> {
        let server_name = ServerName::try_from(sni.to_owned())
            .map_err(|err| Error::InvalidRequest(format!("SNI {sni:?}: {err}")))?;
        let tls = TlsConnector::from(Arc::new(config))
            .connect(server_name, tcp)
            .await
            .map_err(tls_error)?;
        let (_, session) = tls.get_ref();
        let peer_certificates = session
            .peer_certificates()
            .map(|chain| chain.iter().map(|c| c.to_vec()).collect())
            .unwrap_or_default();
        let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
        let (sender, driver) = handshake(tls, proto).await?;
        Ok(Connection {
            sender,
            proto,
            scheme: "https",
            peer_certificates,
            alpn,
            driver,
        })
    }

    /// Sends one request and reads the whole response. Fails if the
    /// connection was closed. `req.proto` is ignored: the connection speaks
    /// the protocol it was opened with.
    pub async fn send(&mut self, req: &Request) -> Result<Response, Error> {
        let request = self.build(req)?;
        let response = match &mut self.sender {
            Sender::H1(sender) => {
                sender.ready().await?;
                sender.send_request(request).await?
            }
            Sender::H2(sender) => {
                sender.ready().await?;
                sender.send_request(request).await?
            }
        };
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes().to_vec();
        Ok(Response {
            status: parts.status.as_u16(),
            version: parts.version,
            headers: parts.headers,
            body,
            peer_certificates: self.peer_certificates.clone(),
            alpn: self.alpn.clone(),
        })
    }

    /// The server's certificate chain, leaf first; empty for Plain.
    pub fn peer_certificates(&self) -> &[Vec<u8>] {
        &self.peer_certificates
    }

    /// The negotiated ALPN protocol, if any.
    pub fn alpn(&self) -> Option<&[u8]> {
        self.alpn.as_deref()
    }

    fn build(&self, req: &Request) -> Result<http::Request<Full<Bytes>>, Error> {
        let invalid = |what: &str, err: &dyn std::fmt::Display| {
            Error::InvalidRequest(format!("{what}: {err}"))
        };
        let method = http::Method::from_bytes(req.method.as_bytes())
            .map_err(|err| invalid(&format!("method {:?}", req.method), &err))?;
        // HTTP/1 writes the URI as the request target, so the target goes in
        // alone; HTTP/2 needs scheme and authority to fill the pseudo-headers.
        let (uri, version) = match self.proto {
            Proto::Http1 => (req.target.clone(), http::Version::HTTP_11),
            Proto::Http2 => (
                format!("{}://{}{}", self.scheme, req.host, req.target),
                http::Version::HTTP_2,
            ),
        };
        let uri: http::Uri = uri
            .parse()
            .map_err(|err| invalid(&format!("target {:?}", req.target), &err))?;

        let mut request = http::Request::new(Full::new(Bytes::from(req.body.clone())));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.version_mut() = version;
        let headers = request.headers_mut();
        if self.proto == Proto::Http1 && !req.host.is_empty() {
            let host = HeaderValue::from_str(&req.host)
                .map_err(|err| invalid(&format!("host {:?}", req.host), &err))?;
            headers.insert(header::HOST, host);
        }
        for (name, value) in &req.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|err| invalid(&format!("header name {name:?}"), &err))?;
            let value = HeaderValue::from_bytes(value.as_bytes())
                .map_err(|err| invalid(&format!("header value {value:?}"), &err))?;
            headers.append(name, value);
        }
        Ok(request)
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

async fn handshake<T>(io: T, proto: Proto) -> Result<(Sender, JoinHandle<()>), Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    match proto {
        Proto::Http1 => {
            // Title case on the wire ("Host", "X-Foo") is what most clients,
            // Go's included, send; peers must not care, but logs read better.
            let (sender, conn) = hyper::client::conn::http1::Builder::new()
                .title_case_headers(true)
                .handshake(io)
                .await?;
            let driver = tokio::spawn(async move {
                if let Err(err) = conn.await {
                    tracing::debug!(%err, "http/1 client connection ended with an error");
                }
            });
            Ok((Sender::H1(sender), driver))
        }
        Proto::Http2 => {
            let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .handshake(io)
                .await?;
            let driver = tokio::spawn(async move {
                if let Err(err) = conn.await {
                    tracing::debug!(%err, "http/2 client connection ended with an error");
                }
            });
            Ok((Sender::H2(sender), driver))
        }
    }
}

fn tls_config(roots: Option<&[Vec<u8>]>, proto: Proto) -> Result<ClientConfig, Error> {
    // An explicit provider: the process-wide default may be unset (or another
    // backend) when several crates link rustls.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let builder =
        ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions()?;
    let mut config = match roots {
        Some(roots) => {
            let mut store = RootCertStore::empty();
            for der in roots {
                store.add(CertificateDer::from(der.clone()))?;
            }
            builder.with_root_certificates(store).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate { algorithms }))
            .with_no_client_auth(),
    };
    config.alpn_protocols = vec![match proto {
        Proto::Http1 => b"http/1.1".to_vec(),
        Proto::Http2 => b"h2".to_vec(),
    }];
    Ok(config)
}

/// tokio-rustls reports handshake failures as `io::Error` wrapping the
/// `rustls::Error`; unwrap it so tests can match on the TLS reason.
fn tls_error(err: std::io::Error) -> Error {
    match err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => Error::Tls(tls.clone()),
        None => Error::Io(err),
    }
}

/// `InsecureSkipVerify`: any certificate for any name is accepted. The
/// handshake signatures are still checked, so the peer must hold the key of
/// the certificate it presented (and that certificate is what we report).
#[derive(Debug)]
struct AcceptAnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Raw HTTP/1.1 exchange for framing tests: write `bytes`, read until the server closes or `timeout`, return everything read.
///
/// Reaching the timeout is not an error: a server that keeps the connection
/// open after answering is normal, and what it sent so far is the result.
pub async fn raw_exchange(
    addr: SocketAddr,
    bytes: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, Error> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut stream = tokio::time::timeout_at(deadline, TcpStream::connect(addr))
        .await
        .map_err(|_| Error::Timeout(format!("connecting to {addr}")))??;
    match tokio::time::timeout_at(deadline, stream.write_all(bytes)).await {
        // A server may reject a malformed request before reading all of it
        // and close; its answer is still worth reading.
        Ok(Err(err)) if is_disconnect(&err) => {}
        Ok(Err(err)) => return Err(err.into()),
        Ok(Ok(())) | Err(_) => {}
    }
    let mut received = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) | Ok(Ok(0)) => break,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            // Closing with unread input makes the kernel send RST; that is
            // how a server "closes" after refusing a request.
            Ok(Err(err)) if is_disconnect(&err) => break,
            Ok(Err(err)) => return Err(err.into()),
        }
    }
    Ok(received)
}

fn is_disconnect(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionAborted
    )
}

/// WebSocket client: connect (plain) to addr with Host header `host` and path, send each message as text, return the echoed texts.
///
/// Messages go one at a time (send, wait for the echo), then the client
/// closes cleanly. The connection ending before every echo arrived is an error.
pub async fn websocket_echo(
    addr: SocketAddr,
    host: &str,
    path: &str,
    messages: &[&str],
) -> Result<Vec<String>, Error> {
    // tungstenite derives the Host header from the URI's authority.
    let request = format!("ws://{host}{path}").into_client_request()?;
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (mut ws, _response) = tokio_tungstenite::client_async(request, tcp).await?;

    let mut echoed = Vec::with_capacity(messages.len());
    for message in messages {
        ws.send(Message::text(message.to_string())).await?;
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(text))) => {
                    echoed.push(text.as_str().to_owned());
                    break;
                }
                Some(Ok(Message::Binary(data))) => {
                    echoed.push(String::from_utf8_lossy(&data).into_owned());
                    break;
                }
                Some(Ok(Message::Close(_))) | None => {
                    return Err(Error::WebSocket(
                        tokio_tungstenite::tungstenite::Error::ConnectionClosed,
                    ));
                }
                // Ping/pong (answered by tungstenite) and raw frames.
                Some(Ok(_)) => {}
                Some(Err(err)) => return Err(err.into()),
            }
        }
    }
    ws.close(None).await?;
    // Wait for the server's close reply so the server side ends cleanly too.
    while let Some(Ok(_)) = ws.next().await {}
    Ok(echoed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::TestCa;
    use crate::echo::{EchoIdentity, Shared, serve_connection};
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    use std::sync::atomic::AtomicU64;
    use tokio::net::TcpListener;
    use tokio_rustls::TlsAcceptor;

    /// A tiny TLS server in front of the echo service, offering h2 and http/1.1.
    async fn tls_echo(ca: &TestCa, hosts: &[&str]) -> (SocketAddr, crate::echo::Control) {
        let leaf = ca.issue(hosts);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf.cert_der.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key_der.clone())),
            )
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (shared, control) = Shared::new(
            EchoIdentity::new("tls", "i", "s", "p"),
            Arc::new(AtomicU64::new(0)),
        );
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, shared) = (acceptor.clone(), shared.clone());
                tokio::spawn(async move {
                    // Failed handshakes are what the negative tests provoke.
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        serve_connection(tls, shared).await;
                    }
                });
            }
        });
        (addr, control)
    }

    #[tokio::test]
    async fn tls_with_trusted_ca_over_both_protocols() {
        let ca = TestCa::new("client test CA");
        let (addr, _control) = tls_echo(&ca, &["secure.example.com"]).await;
        let transport = Transport::tls_verified("secure.example.com", &[ca.cert_der()]);

        for (proto, alpn, version, proto_name) in [
            (
                Proto::Http1,
                &b"http/1.1"[..],
                http::Version::HTTP_11,
                "HTTP/1.1",
            ),
            (Proto::Http2, &b"h2"[..], http::Version::HTTP_2, "HTTP/2.0"),
        ] {
            let req = Request::get("secure.example.com", "/tls?x=1").proto(proto);
            let resp = send(addr, &transport, &req).await.unwrap();
            assert_eq!(resp.status, 200);
            assert_eq!(resp.version, version);
            assert_eq!(resp.alpn.as_deref(), Some(alpn));
            assert_eq!(resp.peer_certificates.len(), 1);
            assert!(crate::certs::cert_matches_hostname(
                &resp.peer_certificates[0],
                "secure.example.com"
            ));
            let json = resp.json().unwrap();
            assert_eq!(json["proto"], proto_name);
            assert_eq!(json["host"], "secure.example.com");
            assert_eq!(json["path"], "/tls?x=1");
        }
    }

    #[tokio::test]
    async fn tls_rejects_untrusted_or_mismatched_certificates() {
        let ca = TestCa::new("client test CA");
        let (addr, _control) = tls_echo(&ca, &["secure.example.com"]).await;
        let req = Request::get("secure.example.com", "/");

        let other_ca = TestCa::new("someone else");
        let untrusted = Transport::tls_verified("secure.example.com", &[other_ca.cert_der()]);
        let err = send(addr, &untrusted, &req).await.unwrap_err();
        assert!(matches!(err, Error::Tls(_)), "{err}");

        let wrong_name = Transport::tls_verified("other.example.com", &[ca.cert_der()]);
        let err = send(addr, &wrong_name, &req).await.unwrap_err();
        assert!(matches!(err, Error::Tls(_)), "{err}");
    }

    #[tokio::test]
    async fn tls_insecure_accepts_and_records_any_certificate() {
        let ca = TestCa::new("client test CA");
        let (addr, _control) = tls_echo(&ca, &["secure.example.com"]).await;
        // Wrong SNI and an unknown CA: still accepted, as with InsecureSkipVerify.
        let mut conn = Connection::open(
            addr,
            &Transport::tls_insecure("whatever.test"),
            Proto::Http2,
        )
        .await
        .unwrap();
        assert_eq!(conn.alpn(), Some(&b"h2"[..]));
        assert!(crate::certs::cert_matches_hostname(
            &conn.peer_certificates()[0],
            "secure.example.com"
        ));
        for _ in 0..2 {
            let resp = conn
                .send(&Request::get("secure.example.com", "/"))
                .await
                .unwrap();
            assert_eq!(resp.status, 200);
            assert_eq!(resp.peer_certificates, conn.peer_certificates());
        }
    }

    #[tokio::test]
    async fn bad_requests_are_refused_before_sending() {
        let echo = crate::echo::EchoServer::start(EchoIdentity::default())
            .await
            .unwrap();
        let bad_header = Request::get("h", "/").header("bad header", "x");
        let err = send(echo.addr(), &Transport::Plain, &bad_header)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidRequest(_)), "{err}");
        let bad_target = Request::get("h", "/has space");
        let err = send(echo.addr(), &Transport::Plain, &bad_target)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidRequest(_)), "{err}");
        assert_eq!(echo.requests(), 0);
    }

    #[tokio::test]
    async fn closed_connection_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            // Answer once with "Connection: close", then hang up.
            let (mut tcp, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = tcp.read(&mut buf).await.unwrap();
            tcp.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
        });
        let mut conn = Connection::open(addr, &Transport::Plain, Proto::Http1)
            .await
            .unwrap();
        let resp = conn.send(&Request::get("h", "/")).await.unwrap();
        assert_eq!(resp.status, 204);
        server.await.unwrap();
        assert!(conn.send(&Request::get("h", "/")).await.is_err());
    }

    #[tokio::test]
    async fn raw_exchange_reads_until_close_or_timeout() {
        let echo = crate::echo::EchoServer::start(EchoIdentity::default())
            .await
            .unwrap();

        // `Connection: close` makes the server hang up after answering.
        let request = b"GET /raw?q HTTP/1.1\r\nHost: raw.test\r\nConnection: close\r\n\r\n";
        let started = std::time::Instant::now();
        let answer = raw_exchange(echo.addr(), request, Duration::from_secs(10))
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "returned on close, not on timeout"
        );
        let answer = String::from_utf8(answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains("\"path\":\"/raw?q\""), "{answer}");
        assert!(answer.contains("\"host\":\"raw.test\""), "{answer}");

        // Kept alive: the timeout ends the exchange and what arrived is returned.
        let request = b"GET /health HTTP/1.1\r\nHost: raw.test\r\n\r\n";
        let answer = raw_exchange(echo.addr(), request, Duration::from_millis(300))
            .await
            .unwrap();
        let answer = String::from_utf8(answer).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("\r\n\r\nOK"),
            "{answer}"
        );

        // HTTP/1.0 is reported as such.
        let request = b"GET /old HTTP/1.0\r\nHost: raw.test\r\n\r\n";
        let answer = raw_exchange(echo.addr(), request, Duration::from_secs(10))
            .await
            .unwrap();
        let answer = String::from_utf8(answer).unwrap();
        assert!(answer.contains("\"proto\":\"HTTP/1.0\""), "{answer}");
        echo.stop().await;
    }
}
