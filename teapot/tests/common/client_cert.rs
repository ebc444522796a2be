//! A client that presents a client certificate: one GET on a fresh TLS
//! connection, over HTTP/1.1 or HTTP/2, for the client-certificate tests of
//! both APIs (Gateway frontend validation, ingress-nginx `auth-tls-*`).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::Value;
use teapot_testkit::certs::{CertifiedPem, TestCa};
use tokio::net::TcpStream;

use super::REQUEST_TIMEOUT;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http1,
    Http2,
}

/// The certificate chain a client presents (its own first, then the
/// intermediates it sends) and its PKCS#8 key.
pub struct ClientIdentity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: Vec<u8>,
}

impl From<&CertifiedPem> for ClientIdentity {
    fn from(pem: &CertifiedPem) -> ClientIdentity {
        ClientIdentity {
            chain: vec![CertificateDer::from(pem.cert_der.clone())],
            key: pem.key_der.clone(),
        }
    }
}

/// What came back: the status, its headers, the body.
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn echo(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{}: not echo JSON: {e}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// One GET of `/who` on a fresh TLS connection to `addr`, SNI `sni`,
/// authority `host`, presenting `client`, speaking `version`, with `extra`
/// request fields; the server's certificate must chain to `server_ca`.
/// `Err` when the handshake or the exchange fails (a refusal in the
/// handshake shows as either: with TLS 1.3 the client's side of the
/// handshake completes before the server reads its certificate).
pub async fn get(
    addr: SocketAddr,
    server_ca: &TestCa,
    (sni, host): (&str, &str),
    client: Option<&ClientIdentity>,
    version: Version,
    extra: &[(&str, &str)],
) -> Result<Answer, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(server_ca.cert_der().to_vec()))
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let mut config = match client {
        Some(c) => builder
            .with_client_auth_cert(
                c.chain.clone(),
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(c.key.clone())),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![match version {
        Version::Http1 => b"http/1.1".to_vec(),
        Version::Http2 => b"h2".to_vec(),
    }];
    let exchange = async {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let name = ServerName::try_from(sni.to_string()).unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let io = TokioIo::new(tls);
        let mut builder = http::Request::builder();
        for (name, value) in extra {
            builder = builder.header(*name, *value);
        }
        let response = match version {
            Version::Http1 => {
                let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(conn);
                let req = builder
                    .uri("/who")
                    .header("host", host)
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                sender.send_request(req).await.map_err(|e| e.to_string())?
            }
            Version::Http2 => {
                let (mut sender, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                        .await
                        .map_err(|e| e.to_string())?;
                tokio::spawn(conn);
                let req = builder
                    .uri(format!("https://{host}/who"))
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                sender.send_request(req).await.map_err(|e| e.to_string())?
            }
        };
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| "timed out".to_string())?
}
