//! TLS to the backend (ingress-nginx's `backend-protocol: HTTPS|GRPCS` and
//! `proxy-ssl-*`): one rustls client configuration per route's settings,
//! built at compile time, and the handshake each engine runs on a fresh
//! upstream connection ([`teapot_h1::Transport`]).
//!
//! - Verification on: the backend's chain must lead to the Secret's
//!   `ca.crt` (and no further than `proxy-ssl-verify-depth`), for the
//!   verified name (`proxy-ssl-name`, default `SERVICE.NAMESPACE.svc`).
//!   Off (ingress-nginx's default, kept for compatibility): any
//!   certificate is accepted, the handshake's signatures still checked.
//! - SNI is sent only with `proxy-ssl-server-name: on`, as ingress-nginx.
//! - A Gateway API BackendTLSPolicy (`compile::gateway::backend_tls`)
//!   asks the same of its Service: verification always on, against a
//!   ConfigMap's `ca.crt` or the host's trust store, for its `hostname`
//!   (always sent as SNI) or, when it lists `subjectAltNames`, for one of
//!   those.
//! - The Secret's `tls.crt`/`tls.key` are the client certificate teapot
//!   presents (the backend may require it: mTLS).
//! - Each configuration keeps its own TLS session cache, so connections
//!   to the same backend resume their sessions (no full handshake); it
//!   outlives reloads that do not change the settings
//!   ([`crate::live::endpoints::EndpointRegistry::tls`]), and so does
//!   the connection pool's class, so pooled TLS connections survive too.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use teapot_h1::{SecuredStream, Securing, Transport};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// ALPN of HTTP/1.1 and HTTP/2 backends.
const ALPN_HTTP1: &[u8] = b"http/1.1";
const ALPN_H2: &[u8] = b"h2";

/// What a route asks of its TLS backend, as compiled from its annotations.
#[derive(Clone, Debug)]
pub struct BackendTls {
    /// HTTP/2 (GRPCS, ALPN `h2`) or HTTP/1.1 (HTTPS, ALPN `http/1.1`).
    pub h2: bool,
    /// The name verified (and sent as SNI when `sni`).
    pub name: String,
    pub sni: bool,
    /// `ca.crt`'s PEM bundle, when verification is on.
    pub verify: Option<Vec<u8>>,
    /// Longest chain accepted: the leaf and `depth` certificates above it
    /// (ingress-nginx's `proxy_ssl_verify_depth`, default 1).
    pub depth: u32,
    /// The client certificate presented (the Secret's `tls.crt`/`tls.key`).
    pub client_cert: Option<Arc<CertifiedKey>>,
    /// Verification against the proxy host's trust store instead of
    /// `verify` (BackendTLSPolicy's `wellKnownCACertificates: System`).
    pub system_roots: bool,
    /// When not empty, the certificate must carry one of these rather
    /// than `name`, which stays the SNI (BackendTLSPolicy's
    /// `subjectAltNames`).
    pub subject_alt_names: Vec<SubjectAltName>,
    /// `proxy-ssl-ciphers`: the TLS 1.2 suites offered, in order (TLS 1.3
    /// suites are not chosen by it, as OpenSSL's cipher list does not
    /// choose them); `None`: rustls's defaults.
    pub tls12_suites: Option<Vec<u16>>,
    /// `proxy-ssl-protocols`: the versions offered (`0x0303` TLS 1.2,
    /// `0x0304` TLS 1.3); `None`: both.
    pub versions: Option<Vec<u16>>,
}

/// A name the backend's certificate may be verified for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SubjectAltName {
    /// A DNS name (`*.` wildcards in the certificate match as usual).
    Dns(String),
    /// A URI SAN, compared as written (a SPIFFE ID, say).
    Uri(String),
}

impl BackendTls {
    /// What tells two settings apart, for sharing one configuration (its
    /// session cache, its pool class) across compiles.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{BuildHasher as _, Hash as _, Hasher as _};
        let mut h = foldhash::fast::FixedState::with_seed(0x7153).build_hasher();
        self.h2.hash(&mut h);
        self.name.hash(&mut h);
        self.sni.hash(&mut h);
        self.verify.hash(&mut h);
        self.depth.hash(&mut h);
        self.system_roots.hash(&mut h);
        self.subject_alt_names.hash(&mut h);
        self.tls12_suites.hash(&mut h);
        self.versions.hash(&mut h);
        // The key itself: a renewed certificate is another configuration.
        self.client_cert
            .as_ref()
            .map(|c| {
                c.cert
                    .iter()
                    .map(|d| d.as_ref().to_vec())
                    .collect::<Vec<_>>()
            })
            .hash(&mut h);
        h.finish()
    }
}

/// A route's TLS to its backend, ready to handshake.
#[derive(Debug)]
pub struct UpstreamTls {
    /// The pool class of its connections (never 0, plain TCP's).
    class: u64,
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
    pub settings: BackendTls,
}

/// Why a route's TLS settings cannot be used (the route's status says it).
#[derive(Debug, thiserror::Error)]
pub enum TlsSettingsError {
    #[error("ca.crt holds no PEM certificate teapot can use as a trust anchor")]
    BadCa,
    #[error("{0:?} is neither a DNS name nor an IP address")]
    BadName(String),
    #[error("the TLS configuration could not be built: {0}")]
    Config(String),
    #[error("the proxy host's trust store holds no usable certificate: {0}")]
    NoSystemRoots(String),
}

/// The proxy host's trust store, read once: its files do not change while
/// the proxy runs (a new image brings new ones).
fn system_roots() -> Result<Arc<RootCertStore>, TlsSettingsError> {
    static ROOTS: std::sync::OnceLock<Result<Arc<RootCertStore>, String>> =
        std::sync::OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map_or_else(|| "no certificate found".to_string(), |e| e.to_string());
                return Err(why);
            }
            Ok(Arc::new(roots))
        })
        .clone()
        .map_err(TlsSettingsError::NoSystemRoots)
}

fn next_class() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `provider` offering its TLS 1.3 suites and, of its TLS 1.2 ones, those
/// in `chosen`, in `chosen`'s order.
fn with_tls12_suites(provider: &CryptoProvider, chosen: &[u16]) -> CryptoProvider {
    let mut suites: Vec<rustls::SupportedCipherSuite> = provider
        .cipher_suites
        .iter()
        .copied()
        .filter(|s| s.tls13().is_some())
        .collect();
    for id in chosen {
        if let Some(suite) = provider
            .cipher_suites
            .iter()
            .find(|s| s.tls13().is_none() && u16::from(s.suite()) == *id)
        {
            suites.push(*suite);
        }
    }
    CryptoProvider {
        cipher_suites: suites,
        ..provider.clone()
    }
}

impl UpstreamTls {
    pub fn new(settings: BackendTls) -> Result<UpstreamTls, TlsSettingsError> {
        let name = ServerName::try_from(settings.name.clone())
            .map_err(|_| TlsSettingsError::BadName(settings.name.clone()))?;
        let provider = match &settings.tls12_suites {
            None => provider(),
            Some(chosen) => Arc::new(with_tls12_suites(provider().as_ref(), chosen)),
        };
        let algorithms = provider.signature_verification_algorithms;
        let roots = match (&settings.verify, settings.system_roots) {
            (_, true) => Some(system_roots()?),
            (Some(pem), false) => {
                let mut roots = RootCertStore::empty();
                use rustls::pki_types::pem::PemObject as _;
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|_| TlsSettingsError::BadCa)?;
                    roots.add(cert).map_err(|_| TlsSettingsError::BadCa)?;
                }
                if roots.is_empty() {
                    return Err(TlsSettingsError::BadCa);
                }
                Some(Arc::new(roots))
            }
            (None, false) => None,
        };
        let verifier: Arc<dyn ServerCertVerifier> = match roots {
            Some(roots) => {
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
                        .build()
                        .map_err(|e| TlsSettingsError::Config(e.to_string()))?;
                Arc::new(Verified {
                    webpki,
                    depth: settings.depth,
                    subject_alt_names: settings.subject_alt_names.clone(),
                    roots,
                    algorithms,
                })
            }
            None => Arc::new(Unverified { algorithms }),
        };
        let versions: Vec<&'static rustls::SupportedProtocolVersion> = match &settings.versions {
            None => rustls::DEFAULT_VERSIONS.to_vec(),
            Some(chosen) => rustls::ALL_VERSIONS
                .iter()
                .copied()
                .filter(|v| chosen.contains(&u16::from(v.version)))
                .collect(),
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&versions)
            .map_err(|e| TlsSettingsError::Config(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match &settings.client_cert {
            Some(key) => builder.with_client_cert_resolver(Arc::new(ClientCert(key.clone()))),
            None => builder.with_no_client_auth(),
        };
        config.enable_sni = settings.sni;
        config.alpn_protocols = vec![if settings.h2 { ALPN_H2 } else { ALPN_HTTP1 }.to_vec()];
        Ok(UpstreamTls {
            class: next_class(),
            config: Arc::new(config),
            name,
            settings,
        })
    }

    /// Whether the backend speaks HTTP/2 over this TLS (GRPCS).
    pub fn h2(&self) -> bool {
        self.settings.h2
    }
}

impl Transport for UpstreamTls {
    fn class(&self) -> u64 {
        self.class
    }

    fn secure(&self, tcp: TcpStream) -> Securing {
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        let name = self.name.clone();
        Box::pin(async move {
            let tls = connector.connect(name, tcp).await?;
            Ok(Box::new(Secured(tls)) as Box<dyn SecuredStream>)
        })
    }
}

/// A TLS connection to a backend, as the engines hold it.
#[derive(Debug)]
pub struct Secured(pub TlsStream<TcpStream>);

impl SecuredStream for Secured {
    fn tcp(&self) -> &TcpStream {
        self.0.get_ref().0
    }
}

impl tokio::io::AsyncRead for Secured {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Secured {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// The Secret's certificate, offered whenever the backend asks for one.
#[derive(Debug)]
struct ClientCert(Arc<CertifiedKey>);

impl ResolvesClientCert for ClientCert {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Verification against the Secret's CA, with ingress-nginx's depth bound
/// on what the backend presents.
#[derive(Debug)]
struct Verified {
    webpki: Arc<WebPkiServerVerifier>,
    depth: u32,
    /// When not empty, the names verified instead of the SNI's.
    subject_alt_names: Vec<SubjectAltName>,
    roots: Arc<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl Verified {
    /// The chain to the roots, then one of the subjectAltNames: the SNI
    /// name is not what the backend's certificate must carry.
    fn verify_alt_names(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        let mut uris = None;
        for san in &self.subject_alt_names {
            let matched = match san {
                SubjectAltName::Dns(name) => ServerName::try_from(name.as_str())
                    .is_ok_and(|n| rustls::client::verify_server_name(&parsed, &n).is_ok()),
                SubjectAltName::Uri(uri) => uris
                    .get_or_insert_with(|| uri_alt_names(end_entity))
                    .iter()
                    .any(|u| u == uri),
            };
            if matched {
                return Ok(ServerCertVerified::assertion());
            }
        }
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName,
        ))
    }
}

/// The URI subjectAltNames of a certificate (webpki verifies DNS names and
/// addresses only).
fn uri_alt_names(cert: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert) else {
        return Vec::new();
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(uri) => Some(uri.to_string()),
            _ => None,
        })
        .collect()
}

impl ServerCertVerifier for Verified {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // Depth 1 is a leaf issued by the CA itself: every certificate
        // the backend sends above its leaf is one level more.
        if intermediates.len() as u32 >= self.depth.max(1) {
            return Err(rustls::Error::General(format!(
                "the backend's chain is deeper than proxy-ssl-verify-depth {}",
                self.depth
            )));
        }
        if !self.subject_alt_names.is_empty() {
            return self.verify_alt_names(end_entity, intermediates, now);
        }
        self.webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `proxy-ssl-verify: off`: any certificate, as ingress-nginx; the
/// handshake's signatures are still checked, so the connection is at least
/// with whoever holds the presented certificate's key. The Alt-Svc
/// self-probe (crate::plane::alt_svc) checks its handshake the same way.
#[derive(Debug)]
pub(crate) struct Unverified {
    algorithms: WebPkiSupportedAlgorithms,
}

impl Unverified {
    pub(crate) fn new(provider: &rustls::crypto::CryptoProvider) -> Unverified {
        Unverified {
            algorithms: provider.signature_verification_algorithms,
        }
    }
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
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

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_testkit::certs::TestCa;

    fn settings(verify: Option<Vec<u8>>) -> BackendTls {
        BackendTls {
            h2: false,
            name: "web.ops.svc".into(),
            sni: false,
            verify,
            depth: 1,
            client_cert: None,
            system_roots: false,
            subject_alt_names: Vec::new(),
            tls12_suites: None,
            versions: None,
        }
    }

    #[test]
    fn unusable_settings_are_errors() {
        let bad_ca = UpstreamTls::new(settings(Some(b"not a PEM".to_vec())));
        assert!(matches!(bad_ca, Err(TlsSettingsError::BadCa)), "{bad_ca:?}");
        let mut bad_name = settings(None);
        bad_name.name = "not a name!".into();
        assert!(matches!(
            UpstreamTls::new(bad_name),
            Err(TlsSettingsError::BadName(_))
        ));
        let ca = TestCa::new("backend CA");
        let good = UpstreamTls::new(settings(Some(ca.cert_pem().as_bytes().to_vec()))).unwrap();
        assert_ne!(Transport::class(&good), 0, "plain TCP's class is 0");
        assert_eq!(good.config.alpn_protocols, [b"http/1.1".to_vec()]);
        assert!(!good.config.enable_sni);
        // Another setting is another configuration.
        let mut h2 = settings(None);
        h2.h2 = true;
        assert_ne!(h2.fingerprint(), settings(None).fingerprint());
        assert_eq!(settings(None).fingerprint(), settings(None).fingerprint());
    }

    /// A second connection with the same configuration resumes the first's
    /// TLS session (no full handshake), and presents the client
    /// certificate when the backend asks for it.
    #[tokio::test]
    async fn sessions_resume_across_connections() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let ca = TestCa::new("backend CA");
        let leaf = ca.issue(&["web.ops.svc"]);
        let client = ca.issue_client("teapot-client");
        let provider = provider();
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from(ca.cert_der().to_vec()))
            .unwrap();
        let clients = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots.into(),
            provider.clone(),
        )
        .build()
        .unwrap();
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(clients)
            .with_single_cert(
                vec![CertificateDer::from(leaf.cert_der.clone())],
                rustls::pki_types::PrivateKeyDer::Pkcs8(leaf.key_der.clone().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    // One byte each way: the client reads the tickets
                    // the server sends after its handshake.
                    let mut byte = [0u8; 1];
                    if tls.read_exact(&mut byte).await.is_ok() {
                        let _ = tls.write_all(&byte).await;
                        let _ = tls.flush().await;
                    }
                });
            }
        });
        let mut asked = settings(Some(ca.cert_pem().as_bytes().to_vec()));
        asked.client_cert = Some(Arc::new(
            CertifiedKey::from_der(
                vec![CertificateDer::from(client.cert_der.clone())],
                rustls::pki_types::PrivateKeyDer::Pkcs8(client.key_der.clone().into()),
                &rustls::crypto::ring::default_provider(),
            )
            .unwrap(),
        ));
        let tls = UpstreamTls::new(asked).unwrap();
        let mut kinds = Vec::new();
        for _ in 0..2 {
            let tcp = TcpStream::connect(addr).await.unwrap();
            // The configuration `secure` hands each connection.
            let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
            let mut secured = connector.connect(tls.name.clone(), tcp).await.unwrap();
            secured.write_all(b"x").await.unwrap();
            let mut byte = [0u8; 1];
            secured.read_exact(&mut byte).await.unwrap();
            kinds.push(format!("{:?}", secured.get_ref().1.handshake_kind()));
        }
        assert_eq!(kinds, ["Some(Full)", "Some(Resumed)"]);
    }

    /// proxy-ssl-ciphers and proxy-ssl-protocols are what the handshake
    /// offers: against a backend with TLS 1.2 and one AES-GCM suite only,
    /// a list of ChaCha20 suites or TLS 1.3 alone fails, the suite itself
    /// is what is negotiated.
    #[tokio::test]
    async fn ciphers_and_versions_are_what_is_offered() {
        let ca = TestCa::new("backend CA");
        let leaf = ca.issue(&["web.ops.svc"]);
        let aes128 = u16::from(rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256);
        let only = with_tls12_suites(&provider(), &[aes128]);
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(CryptoProvider {
            cipher_suites: only
                .cipher_suites
                .iter()
                .copied()
                .filter(|s| s.tls13().is_none())
                .collect(),
            ..only
        }))
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf.cert_der.clone())],
            rustls::pki_types::PrivateKeyDer::Pkcs8(leaf.key_der.clone().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _ = acceptor.accept(tcp).await;
                });
            }
        });
        let handshake = |suites: Option<Vec<u16>>, versions: Option<Vec<u16>>| async move {
            let mut asked = settings(None);
            asked.tls12_suites = suites;
            asked.versions = versions;
            let tls = UpstreamTls::new(asked).unwrap();
            let tcp = TcpStream::connect(addr).await.unwrap();
            let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
            connector
                .connect(tls.name.clone(), tcp)
                .await
                .ok()
                .and_then(|s| s.get_ref().1.negotiated_cipher_suite())
                .map(|s| u16::from(s.suite()))
        };
        let chacha = vec![0xcca9, 0xcca8];
        assert_eq!(handshake(Some(chacha), None).await, None);
        assert_eq!(handshake(None, Some(vec![0x0304])).await, None);
        assert_eq!(
            handshake(Some(vec![0xcca9, aes128]), Some(vec![0x0303])).await,
            Some(aes128)
        );
        assert_eq!(handshake(None, None).await, Some(aes128));
        let mut a = settings(None);
        a.tls12_suites = Some(vec![aes128]);
        assert_ne!(a.fingerprint(), settings(None).fingerprint());
    }

    fn verified(
        webpki: Arc<WebPkiServerVerifier>,
        depth: u32,
        subject_alt_names: Vec<SubjectAltName>,
    ) -> Verified {
        Verified {
            webpki,
            depth,
            subject_alt_names,
            roots: Arc::new(RootCertStore::empty()),
            algorithms: provider().signature_verification_algorithms,
        }
    }

    /// subjectAltNames replace the SNI name as what is verified: a DNS
    /// name (wildcards as usual) or a URI the certificate carries; the
    /// chain must still lead to the roots.
    #[test]
    fn subject_alt_names_are_verified_instead_of_the_sni_name() {
        let ca = TestCa::new("backend CA");
        let spiffe = "spiffe://cluster.local/ns/ops/sa/web";
        let leaf = ca.issue_with_uris(&["web.ops.svc"], &[spiffe]);
        let leaf = CertificateDer::from(leaf.cert_der);
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from(ca.cert_der().to_vec()))
            .unwrap();
        let roots = Arc::new(roots);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .unwrap();
        let sni = ServerName::try_from("sni.only.example").unwrap();
        let check = |sans: Vec<SubjectAltName>, roots: Arc<RootCertStore>| {
            let mut v = verified(webpki.clone(), u32::MAX, sans);
            v.roots = roots;
            v.verify_server_cert(&leaf, &[], &sni, &[], UnixTime::now())
                .map(|_| ())
        };
        let dns = |n: &str| SubjectAltName::Dns(n.into());
        let uri = |u: &str| SubjectAltName::Uri(u.into());
        // Without subjectAltNames the SNI name is verified, and fails.
        assert!(check(Vec::new(), roots.clone()).is_err());
        assert!(check(vec![dns("web.ops.svc")], roots.clone()).is_ok());
        assert!(check(vec![dns("other.ops.svc"), uri(spiffe)], roots.clone()).is_ok());
        assert!(check(vec![dns("other.ops.svc")], roots.clone()).is_err());
        assert!(
            check(
                vec![uri("spiffe://cluster.local/ns/ops/sa/other")],
                roots.clone()
            )
            .is_err()
        );
        // The right name from an untrusted chain is still refused.
        let other = TestCa::new("other CA");
        let mut elsewhere = RootCertStore::empty();
        elsewhere
            .add(CertificateDer::from(other.cert_der().to_vec()))
            .unwrap();
        assert!(check(vec![dns("web.ops.svc")], Arc::new(elsewhere)).is_err());
    }

    /// proxy-ssl-verify-depth bounds what the backend presents above its
    /// leaf; within it, the CA decides.
    #[test]
    fn the_chain_is_held_to_the_verify_depth() {
        let ca = TestCa::new("backend CA");
        let leaf = ca.issue(&["web.ops.svc"]);
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from(ca.cert_der().to_vec()))
            .unwrap();
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap();
        let leaf = CertificateDer::from(leaf.cert_der);
        let extra = CertificateDer::from(ca.cert_der().to_vec());
        let name = ServerName::try_from("web.ops.svc").unwrap();
        let now = UnixTime::now();
        let verify = |depth: u32, intermediates: &[CertificateDer<'_>]| {
            verified(webpki.clone(), depth, Vec::new()).verify_server_cert(
                &leaf,
                intermediates,
                &name,
                &[],
                now,
            )
        };
        assert!(verify(1, &[]).is_ok());
        let deep = verify(1, std::slice::from_ref(&extra)).unwrap_err();
        assert!(
            deep.to_string().contains("proxy-ssl-verify-depth 1"),
            "{deep}"
        );
        assert!(verify(2, std::slice::from_ref(&extra)).is_ok());
        let other = ServerName::try_from("other.ops.svc").unwrap();
        let wrong =
            verified(webpki, 1, Vec::new()).verify_server_cert(&leaf, &[], &other, &[], now);
        assert!(wrong.is_err());
    }
}
