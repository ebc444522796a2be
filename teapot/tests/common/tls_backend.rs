//! Backends that speak TLS, for the tests of what teapot does with them
//! (re-encryption, SSL passthrough, Gateway TLS listeners): their server
//! configuration, one that names itself, a client trusting one CA, and the
//! Ingress and Service shapes that reach them on port 443.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use teapot_testkit::certs::{CertifiedPem, TestCa};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use super::{NGINX, Port, backend, ingress, path, rule, service, slice};

/// A server configuration with `cert`, offering `alpn` (in that order),
/// requiring a client certificate from `client_ca` when there is one.
pub fn server_config(
    cert: &CertifiedPem,
    client_ca: Option<&TestCa>,
    alpn: &[&[u8]],
) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from(ca.cert_der().to_vec()))
                .unwrap();
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_der.clone()));
    let mut config = builder
        .with_single_cert(vec![CertificateDer::from(cert.cert_der.clone())], key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS server on 127.0.0.1 for `host` (certificate from `ca`) that
/// writes `host` after the handshake and closes.
pub async fn named_backend(ca: &TestCa, host: &'static str) -> SocketAddr {
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config(&ca.issue(&[host]), None, &[]));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let _ = tls.write_all(host.as_bytes()).await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    addr
}

/// A TLS client trusting `ca` alone, with no client certificate.
pub fn connector(ca: &TestCa) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca.cert_der().to_vec()))
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Service `name` of `namespace` (port `https` 443) with one endpoint,
/// `addr`.
pub fn service_at(namespace: &str, name: &str, addr: SocketAddr) -> Vec<Value> {
    vec![
        service(namespace, name, &[(Some("https"), 443)]),
        slice(
            namespace,
            &format!("{name}-0"),
            name,
            &[(Some("https"), addr.port())],
            &[("127.0.0.1", true)],
        ),
    ]
}

/// An Ingress `name` for `host` (served over TLS with Secret `front` too)
/// to Service `service` port 443, with `annotations` (after ingress-nginx's
/// prefix) and `ssl-redirect: "false"`, so the host is served over plain
/// HTTP too (not redirected).
pub fn tls_ingress(
    namespace: &str,
    name: &str,
    host: &str,
    service: &str,
    annotations: &[(&str, &str)],
) -> Value {
    let mut ingress = ingress(
        namespace,
        name,
        json!({
            "tls": [{ "hosts": [host], "secretName": "front" }],
            "rules": [rule(Some(host), vec![path("Prefix", "/", backend(service, Port::Number(443)))])],
        }),
    );
    let annotations: serde_json::Map<String, Value> = [("ssl-redirect", "false")]
        .iter()
        .chain(annotations)
        .map(|(k, v)| (format!("{NGINX}{k}"), json!(v)))
        .collect();
    ingress["metadata"]["annotations"] = Value::Object(annotations);
    ingress
}
