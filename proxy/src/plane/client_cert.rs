//! Client certificates at the edge: the handshake and the request
//! (docs/gateway-api.md, "Client certificates (frontend validation)").
//!
//! The handshake asks for a client certificate only for a server name
//! whose host has a setting (crate::compile::client_auth): browsers prompt
//! for a certificate whenever one is asked. rustls decides client
//! authentication per `ServerConfig`, so [`ClientAuthChooser`] (the
//! listener's ClientHello hook, vendor/pingora-core/README.teapot.md)
//! answers such a ClientHello with that setting's configuration, built
//! once per compiled setting and cached; every other handshake keeps the
//! listener's shared configuration, and while no host has a setting the
//! hook is not even asked. The settings are the socket's: the shared
//! listeners use the shared table, a Gateway's own HTTPS socket its own
//! (`ClientAuthTable::at`; its hook and callback know their socket, and
//! [`check`] reads the connection's local address).
//!
//! Verification: the setting's verifier ([`EdgeVerifier`]) requests the
//! certificate with the bundle's subjects as hints and checks the client's
//! proof of its key. The chain (to the bundle, dates, depth) is checked
//! once the handshake completed ([`TlsFactsCallback`]) and the outcome kept
//! with the connection: ingress-nginx's modes complete the handshake and
//! answer the request (400, a redirect, or served), so the outcome has to
//! reach the request. The Gateway API's `AllowValidOnly` refuses in the
//! handshake instead: its verifier checks the chain there too.
//!
//! Per request ([`check`]): the Host's setting decides, never the SNI's
//! alone; a request whose Host's setting does not verify as its
//! connection's did is misdirected (421), so a certificate vouched for by
//! one tenant's CAs never carries a request to another's host.
//!
//! Bounds: a client may send at most [`MAX_CLIENT_CHAIN`] certificates of
//! at most [`MAX_CLIENT_CERT_BYTES`] each (else the handshake is refused
//! with an alert); the chain is built through at most `depth - 1` of the
//! intermediates it sent, under webpki's own budget of signature checks,
//! at most twice per handshake (in it for `AllowValidOnly`, after it).

use std::any::Any;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use prometheus::IntCounterVec;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, WebPkiClientVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, ServerConfig};
use teapot_h1::ConnInfo;

use crate::compile::client_auth::{ClientAuth, ClientAuthMode, MAX_DEPTH};
use crate::compile::snapshot::{Snapshot, SnapshotHandle};
use crate::plane::decide::{Answer, MISDIRECTED};

/// Certificates a client may send in its Certificate message: the deepest
/// chain a setting allows and one more (a client that sends its CA too).
pub const MAX_CLIENT_CHAIN: usize = MAX_DEPTH as usize + 1;

/// Bytes one certificate a client sends may have: a certificate with an
/// RSA-4096 key and a generous set of extensions is under 2 KiB.
pub const MAX_CLIENT_CERT_BYTES: usize = 16 * 1024;

/// The request fields the verified certificate goes to the backend in,
/// which every client's own copies are removed from
/// (crate::plane::forwarding).
pub use crate::plane::forwarding::CLIENT_CERT_FIELDS as FIELDS;

/// How a connection's client certificate fared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// Verified against the setting's bundle.
    Success,
    /// None was sent.
    None,
    /// Sent and refused: the reason (`ssl-client-verify: FAILED:reason`).
    Failed(&'static str),
}

impl Verify {
    fn header(self) -> String {
        match self {
            Verify::Success => "SUCCESS".into(),
            Verify::None => "NONE".into(),
            Verify::Failed(reason) => format!("FAILED:{reason}"),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Verify::Success => "verified",
            Verify::None => "none",
            Verify::Failed(reason) => reason,
        }
    }
}

/// What the handshake of a TLS connection established for its requests:
/// the server name and, when its host has a setting, the client
/// certificate's outcome. Kept in the connection's TLS digest and in
/// [`ConnInfo::tls_facts`].
#[derive(Debug)]
pub struct TlsFacts {
    pub server_name: Option<Box<str>>,
    pub client: Option<PeerCert>,
}

/// A connection's client certificate under the setting it was asked for.
#[derive(Debug)]
pub struct PeerCert {
    /// The setting the certificate was checked under.
    pub setting: Arc<ClientAuth>,
    pub verify: Verify,
    /// The client's certificate (DER), when it sent one.
    pub leaf: Option<CertificateDer<'static>>,
    /// The fields made from it, at the first request that needs them.
    derived: OnceLock<Derived>,
}

#[derive(Debug, Default)]
struct Derived {
    /// RFC 2253 (`CN=client,O=Example`), as nginx's `$ssl_client_s_dn`.
    subject: Arc<str>,
    issuer: Arc<str>,
    /// The PEM, URL-escaped, as nginx's `$ssl_client_escaped_cert`.
    escaped_pem: Arc<str>,
}

impl PeerCert {
    fn derived(&self) -> &Derived {
        self.derived.get_or_init(|| match &self.leaf {
            Some(leaf) => derive(leaf),
            None => Derived::default(),
        })
    }
}

/// The facts of a connection, from its [`ConnInfo`].
pub fn facts(conn: &ConnInfo) -> Option<&TlsFacts> {
    conn.tls_facts.as_ref()?.downcast_ref::<TlsFacts>()
}

/// What [`check`] lets through: the fields to set on the forwarded
/// request (none unless the Host's setting passes the certificate on).
pub type Pass = Vec<(&'static str, Arc<str>)>;

/// The client-certificate rule for a request for `authority` on `conn`:
/// the fields to pass on, or the answer (421 when the Host's setting is
/// not the one the connection was checked under; 400, a redirect or 403
/// when the setting refuses it).
pub fn check(snapshot: &Snapshot, conn: &ConnInfo, authority: &str) -> Result<Pass, Answer> {
    if !conn.tls {
        return Ok(Vec::new());
    }
    let verified = facts(conn).and_then(|f| f.client.as_ref());
    // The setting of the socket the connection came in on: a Gateway's
    // own address has its own (compile::client_auth).
    let wanted = snapshot
        .client_auth
        .at(conn.local)
        .and_then(|t| t.lookup(authority));
    let (setting, peer) = match (wanted, verified) {
        (None, None) => return Ok(Vec::new()),
        (Some(w), Some(p)) if w.verifies_as(&p.setting) => (w, p),
        _ => return Err(MISDIRECTED),
    };
    let refused = match (setting.mode, peer.verify) {
        (_, Verify::Success) => None,
        (ClientAuthMode::OptionalNoCa | ClientAuthMode::InsecureFallback, _) => None,
        (ClientAuthMode::Optional, Verify::None) => None,
        (ClientAuthMode::Require, Verify::None) => Some(NO_CERTIFICATE),
        (_, _) => Some(CERTIFICATE_ERROR),
    };
    if let Some(answer) = refused {
        return Err(match &setting.error_page {
            Some(page) => Answer {
                status: 302,
                body: "302 client certificate required\n",
                location: Some(Arc::from(page.as_str())),
                refusal: None,
                reason: answer.reason,
            },
            None => answer,
        });
    }
    if let Some(pattern) = &setting.match_cn
        && !(peer.leaf.is_some() && pattern.is_match(peer.derived().subject.as_bytes()))
    {
        return Err(SUBJECT_REFUSED);
    }
    if !setting.pass_to_upstream {
        return Ok(Vec::new());
    }
    let mut pass = Vec::with_capacity(4);
    pass.push((FIELDS[1], Arc::from(peer.verify.header())));
    if peer.leaf.is_some() {
        let d = peer.derived();
        pass.push((FIELDS[0], d.escaped_pem.clone()));
        pass.push((FIELDS[2], d.subject.clone()));
        pass.push((FIELDS[3], d.issuer.clone()));
    }
    Ok(pass)
}

/// ingress-nginx's answers (nginx's own pages for these cases).
const NO_CERTIFICATE: Answer = Answer {
    status: 400,
    body: "400 No required SSL certificate was sent\n",
    location: None,
    refusal: None,
    reason: "client_cert_missing",
};
const CERTIFICATE_ERROR: Answer = Answer {
    status: 400,
    body: "400 The SSL certificate error\n",
    location: None,
    refusal: None,
    reason: "client_cert_invalid",
};
const SUBJECT_REFUSED: Answer = Answer {
    status: 403,
    body: "403 the client certificate's subject is not allowed\n",
    location: None,
    refusal: None,
    reason: "client_cert_subject",
};

/// A setting's handshake parts, built once per compiled setting.
struct Prepared {
    /// Chain, dates and key usage against the bundle.
    webpki: Arc<dyn ClientCertVerifier>,
    config: OnceLock<Arc<ServerConfig>>,
}

/// A setting (kept weakly: the cache never keeps one alive) and its parts.
type Entry = (Weak<ClientAuth>, Arc<Prepared>);

/// The prepared parts of the settings in use, by the setting's address;
/// an entry whose setting is gone (a later snapshot's replaced it and no
/// connection holds it) is dropped when another is added.
#[derive(Default)]
pub struct Prepares {
    by_setting: Mutex<HashMap<usize, Entry>>,
}

impl std::fmt::Debug for Prepares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepares")
            .field("settings", &self.by_setting.lock().len())
            .finish()
    }
}

impl Prepares {
    fn get(&self, setting: &Arc<ClientAuth>) -> Result<Arc<Prepared>, rustls::Error> {
        let key = Arc::as_ptr(setting) as usize;
        let mut map = self.by_setting.lock();
        if let Some((weak, prepared)) = map.get(&key)
            && weak.strong_count() > 0
        {
            return Ok(prepared.clone());
        }
        map.retain(|_, (weak, _)| weak.strong_count() > 0);
        let webpki = WebPkiClientVerifier::builder(setting.roots.roots().clone())
            .allow_unauthenticated()
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        let prepared = Arc::new(Prepared {
            webpki,
            config: OnceLock::new(),
        });
        map.insert(key, (Arc::downgrade(setting), prepared.clone()));
        Ok(prepared)
    }
}

/// The chain check: to a CA of the bundle through at most `depth - 1` of
/// the intermediates the client sent, dates, key usage.
fn verify_chain(
    prepared: &Prepared,
    depth: u8,
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    now: UnixTime,
) -> Verify {
    let allowed = usize::from(depth.max(1)) - 1;
    let used = &intermediates[..intermediates.len().min(allowed)];
    match prepared.webpki.verify_client_cert(end_entity, used, now) {
        Ok(_) => Verify::Success,
        Err(rustls::Error::InvalidCertificate(e)) => Verify::Failed(match e {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => "expired",
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "not yet valid"
            }
            CertificateError::UnknownIssuer if intermediates.len() > allowed => "chain too deep",
            CertificateError::UnknownIssuer => "unknown issuer",
            CertificateError::Revoked => "revoked",
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                "invalid purpose"
            }
            _ => "bad certificate",
        }),
        Err(_) => Verify::Failed("bad certificate"),
    }
}

/// The verifier of one setting's `ServerConfig`.
#[derive(Debug)]
struct EdgeVerifier {
    hints: Vec<DistinguishedName>,
    webpki: Arc<dyn ClientCertVerifier>,
    /// `AllowValidOnly`: the chain is checked in the handshake.
    in_handshake: Option<u8>,
    handshakes: IntCounterVec,
}

impl ClientCertVerifier for EdgeVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.in_handshake.is_some()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if intermediates.len() >= MAX_CLIENT_CHAIN
            || std::iter::once(end_entity)
                .chain(intermediates)
                .any(|c| c.len() > MAX_CLIENT_CERT_BYTES)
        {
            self.handshakes
                .with_label_values(&["refused", "chain too large"])
                .inc();
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ));
        }
        if let Some(depth) = self.in_handshake {
            let prepared = Prepared {
                webpki: self.webpki.clone(),
                config: OnceLock::new(),
            };
            if let Verify::Failed(reason) =
                verify_chain(&prepared, depth, end_entity, intermediates, now)
            {
                self.handshakes
                    .with_label_values(&["refused", reason])
                    .inc();
                return Err(rustls::Error::InvalidCertificate(match reason {
                    "expired" => CertificateError::Expired,
                    "not yet valid" => CertificateError::NotValidYet,
                    "unknown issuer" | "chain too deep" => CertificateError::UnknownIssuer,
                    _ => CertificateError::BadEncoding,
                }));
            }
        }
        Ok(ClientCertVerified::assertion())
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

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// The listener's ClientHello hook: a host with a setting gets that
/// setting's configuration; every other handshake the listener's own.
pub struct ClientAuthChooser {
    snapshots: SnapshotHandle,
    prepares: Arc<Prepares>,
    handshakes: IntCounterVec,
    /// The listener's socket when it is one socket (a Gateway's own
    /// address), whose settings it answers with: rustls does not tell the
    /// hook where a connection came in. `None`: the shared listeners.
    local: Option<SocketAddr>,
}

impl ClientAuthChooser {
    pub fn new(
        snapshots: SnapshotHandle,
        prepares: Arc<Prepares>,
        handshakes: IntCounterVec,
    ) -> ClientAuthChooser {
        ClientAuthChooser {
            snapshots,
            prepares,
            handshakes,
            local: None,
        }
    }

    /// This hook for the listener of the socket `local` (`None`: the
    /// shared listeners).
    pub fn at(mut self, local: Option<SocketAddr>) -> ClientAuthChooser {
        self.local = local;
        self
    }

    /// The configuration of `setting`: the listener's (`base`) with the
    /// setting's verifier.
    fn config(
        &self,
        setting: &Arc<ClientAuth>,
        base: &Arc<ServerConfig>,
    ) -> Result<Arc<ServerConfig>, rustls::Error> {
        let prepared = self.prepares.get(setting)?;
        // Kept for the listener whose resolver it was made with: a
        // Gateway's own address resolves certificates its own way
        // (crate::plane::tls::SniResolver::at), and another socket's
        // configuration would present the other's certificate.
        let cached = prepared.config.get();
        if let Some(config) = cached
            && Arc::ptr_eq(&config.cert_resolver, &base.cert_resolver)
        {
            return Ok(config.clone());
        }
        let verifier = Arc::new(EdgeVerifier {
            hints: setting
                .roots
                .anchors()
                .map(|a| DistinguishedName::from(a.subject.to_vec()))
                .collect(),
            webpki: prepared.webpki.clone(),
            in_handshake: (setting.mode == ClientAuthMode::AllowValidOnly)
                .then_some(setting.max_depth),
            handshakes: self.handshakes.clone(),
        });
        let mut config = ServerConfig::builder_with_provider(base.crypto_provider().clone())
            .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(base.cert_resolver.clone());
        config.alpn_protocols = base.alpn_protocols.clone();
        config.ignore_client_order = base.ignore_client_order;
        config.max_fragment_size = base.max_fragment_size;
        // Its own session cache (the builder's): a session resumed here
        // was one this setting checked.
        let config = Arc::new(config);
        if cached.is_some() {
            return Ok(config);
        }
        Ok(prepared.config.get_or_init(|| config).clone())
    }
}

impl std::fmt::Debug for ClientAuthChooser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAuthChooser").finish_non_exhaustive()
    }
}

impl pingora_core::listeners::tls::ConfigChooser for ClientAuthChooser {
    fn active(&self) -> bool {
        self.snapshots
            .load()
            .client_auth
            .at(self.local)
            .is_some_and(|t| !t.is_empty())
    }

    fn choose(
        &self,
        hello: &ClientHello<'_>,
        base: &Arc<ServerConfig>,
    ) -> Option<Arc<ServerConfig>> {
        let snapshot = self.snapshots.load();
        let table = snapshot.client_auth.at(self.local)?;
        let setting = match hello.server_name() {
            Some(name) => table.lookup(name),
            None => table.without_name(),
        }?;
        match self.config(setting, base) {
            Ok(config) => Some(config),
            Err(e) => {
                // Fail closed: the handshake for a host whose setting
                // cannot be served is refused, never served without it.
                tracing::warn!(source = %setting.source, error = %e, "client-certificate setting not served");
                Some(refusing(base))
            }
        }
    }
}

/// A configuration no handshake completes with: one that asks a client
/// certificate no CA can have signed.
fn refusing(base: &Arc<ServerConfig>) -> Arc<ServerConfig> {
    static REFUSING: OnceLock<Arc<ServerConfig>> = OnceLock::new();
    REFUSING
        .get_or_init(|| {
            let mut config = ServerConfig::builder_with_provider(base.crypto_provider().clone())
                .with_safe_default_protocol_versions()
                .expect("the default versions")
                .with_no_client_auth()
                .with_cert_resolver(Arc::new(NoCertificate));
            config.alpn_protocols = base.alpn_protocols.clone();
            Arc::new(config)
        })
        .clone()
}

#[derive(Debug)]
struct NoCertificate;

impl rustls::server::ResolvesServerCert for NoCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<rustls::sign::CertifiedKey>> {
        None
    }
}

/// Keeps each TLS connection's [`TlsFacts`] in its digest: the SNI for the
/// 421 check (crate::plane::tls::SniResolver::misdirected) and the client
/// certificate's outcome under its host's setting.
pub struct TlsFactsCallback {
    snapshots: SnapshotHandle,
    prepares: Arc<Prepares>,
    handshakes: IntCounterVec,
    /// The listener's socket, as [`ClientAuthChooser`]'s.
    local: Option<SocketAddr>,
}

impl TlsFactsCallback {
    pub fn new(
        snapshots: SnapshotHandle,
        prepares: Arc<Prepares>,
        handshakes: IntCounterVec,
    ) -> TlsFactsCallback {
        TlsFactsCallback {
            snapshots,
            prepares,
            handshakes,
            local: None,
        }
    }

    /// This callback for the listener of the socket `local` (`None`: the
    /// shared listeners), whose settings the chooser asked with.
    pub fn at(mut self, local: Option<SocketAddr>) -> TlsFactsCallback {
        self.local = local;
        self
    }

    /// The facts of a handshake that named `server_name` and presented
    /// `chain` (the client's certificate first).
    pub fn facts(
        &self,
        server_name: Option<&str>,
        chain: Option<&[CertificateDer<'static>]>,
    ) -> TlsFacts {
        let snapshot = self.snapshots.load();
        let table = snapshot.client_auth.at(self.local);
        let setting = table.and_then(|t| match server_name {
            Some(name) => t.lookup(name),
            None => t.without_name(),
        });
        let client = setting.map(|setting| {
            let (verify, leaf) = match chain.and_then(|c| c.split_first()) {
                None => (Verify::None, None),
                Some((leaf, intermediates)) => {
                    let verify = match self.prepares.get(setting) {
                        Ok(prepared) => verify_chain(
                            &prepared,
                            setting.max_depth,
                            leaf,
                            intermediates,
                            UnixTime::now(),
                        ),
                        Err(_) => Verify::Failed("setting not served"),
                    };
                    (verify, Some(leaf.clone()))
                }
            };
            let outcome = if verify == Verify::Success {
                "verified"
            } else {
                "unverified"
            };
            self.handshakes
                .with_label_values(&[outcome, verify.label()])
                .inc();
            PeerCert {
                setting: setting.clone(),
                verify,
                leaf,
                derived: OnceLock::new(),
            }
        });
        TlsFacts {
            server_name: server_name.map(Box::from),
            client,
        }
    }
}

impl std::fmt::Debug for TlsFactsCallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFactsCallback").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl pingora_core::listeners::TlsAccept for TlsFactsCallback {
    async fn handshake_complete_callback(
        &self,
        tls: &pingora_core::protocols::tls::TlsRef,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let facts = self.facts(tls.server_name(), tls.peer_cert_chain_der());
        if facts.server_name.is_none() && facts.client.is_none() {
            return None;
        }
        // Twice wrapped: the digest hands out a reference to what it
        // holds, and the connection keeps its own pointer to the facts.
        Some(Arc::new(Arc::new(facts) as Arc<dyn Any + Send + Sync>))
    }
}

/// A connection's facts, from its TLS digest.
pub fn from_digest(
    digest: &pingora_core::protocols::tls::SslDigest,
) -> Option<Arc<dyn Any + Send + Sync>> {
    digest
        .extension
        .get::<Arc<dyn Any + Send + Sync>>()
        .cloned()
}

/// The subject and issuer (RFC 2253) and the escaped PEM of a certificate.
fn derive(leaf: &CertificateDer<'_>) -> Derived {
    let (subject, issuer) = match x509_parser::parse_x509_certificate(leaf) {
        Ok((_, cert)) => (rfc2253(cert.subject()), rfc2253(cert.issuer())),
        Err(_) => (String::new(), String::new()),
    };
    Derived {
        subject: subject.into(),
        issuer: issuer.into(),
        escaped_pem: escape(&pem(leaf)).into(),
    }
}

fn pem(der: &[u8]) -> String {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::with_capacity(der.len() * 4 / 3 + 4);
    for chunk in der.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 64);
    out.push_str("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// URL-escapes as nginx's `$ssl_client_escaped_cert`: everything but
/// letters, digits and `-._~`.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 5 / 4);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A name as RFC 2253 writes it: the last RDN first, `,` between them,
/// `+` within one, values escaped.
fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> String {
    let registry = x509_parser::objects::oid_registry();
    let mut out = String::new();
    let rdns: Vec<_> = name.iter_rdn().collect();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, attr) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = attr.attr_type();
            match x509_parser::objects::oid2abbrev(oid, registry) {
                Ok(short) => out.push_str(short),
                Err(_) => out.push_str(&oid.to_id_string()),
            }
            out.push('=');
            match attr.as_str() {
                Ok(value) => escape_dn_value(value, &mut out),
                Err(_) => {
                    out.push('#');
                    for b in attr.attr_value().data.iter() {
                        let _ = write!(out, "{b:02x}");
                    }
                }
            }
        }
    }
    out
}

fn escape_dn_value(value: &str, out: &mut String) {
    let last = value.len().saturating_sub(1);
    for (i, c) in value.char_indices() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && matches!(c, '#' | ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        if c.is_control() {
            for b in c.to_string().bytes() {
                let _ = write!(out, "\\{b:02X}");
            }
        } else {
            out.push(c);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::compile::client_auth::{CaBundle, ClientAuthTable};
    use arc_swap::ArcSwap;
    use teapot_api::HostPattern;

    pub(crate) struct Ca {
        pub cert: rcgen::Certificate,
        pub key: rcgen::KeyPair,
        pub issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    }

    pub(crate) fn ca(name: &str) -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let issuer = rcgen::Issuer::new(
            params,
            rcgen::KeyPair::from_pem(&key.serialize_pem()).unwrap(),
        );
        Ca { cert, key, issuer }
    }

    /// A client certificate `cn` signed by `ca`, valid now or expired
    /// long ago.
    pub(crate) fn client(cn: &str, ca: &Ca, valid: bool) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Example, Inc.");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        (params.not_before, params.not_after) = if valid {
            (
                rcgen::date_time_ymd(2020, 1, 1),
                rcgen::date_time_ymd(2090, 1, 1),
            )
        } else {
            (
                rcgen::date_time_ymd(2000, 1, 1),
                rcgen::date_time_ymd(2001, 1, 1),
            )
        };
        let key = rcgen::KeyPair::generate().unwrap();
        params.signed_by(&key, &ca.issuer).unwrap().der().clone()
    }

    fn setting(ca: &Ca, mode: ClientAuthMode) -> ClientAuth {
        let bundle = CaBundle::from_pem(ca.cert.pem().as_bytes(), "test").unwrap();
        let _ = &ca.key;
        ClientAuth::new(Arc::new(bundle), mode, "Gateway ns/gw port 443".into())
    }

    fn world(settings: Vec<(&str, ClientAuth)>) -> (SnapshotHandle, TlsFactsCallback) {
        let mut table = ClientAuthTable::default();
        for (host, s) in settings {
            table
                .insert(Some(&HostPattern::parse(host).unwrap()), Arc::new(s))
                .unwrap();
        }
        let snapshot = Snapshot {
            client_auth: table,
            ..Snapshot::default()
        };
        let handle: SnapshotHandle = Arc::new(ArcSwap::from_pointee(snapshot));
        let metrics = crate::plane::metrics::Metrics::new().unwrap();
        let callback = TlsFactsCallback::new(
            handle.clone(),
            Arc::default(),
            metrics.client_cert_handshakes.clone(),
        );
        (handle, callback)
    }

    fn conn(facts: TlsFacts) -> ConnInfo {
        ConnInfo {
            tls: true,
            tls_facts: Some(Arc::new(facts)),
            ..ConnInfo::default()
        }
    }

    #[test]
    fn the_modes_answer_as_ingress_nginx_and_the_gateway_api() {
        let ours = ca("ours");
        let theirs = ca("theirs");
        let good = client("alice", &ours, true);
        let foreign = client("mallory", &theirs, true);
        let expired = client("old", &ours, false);
        let cases = [
            (ClientAuthMode::Require, Some(&good), Ok(())),
            (ClientAuthMode::Require, None, Err(400)),
            (ClientAuthMode::Require, Some(&foreign), Err(400)),
            (ClientAuthMode::Require, Some(&expired), Err(400)),
            (ClientAuthMode::AllowValidOnly, None, Err(400)),
            (ClientAuthMode::Optional, None, Ok(())),
            (ClientAuthMode::Optional, Some(&foreign), Err(400)),
            (ClientAuthMode::OptionalNoCa, Some(&foreign), Ok(())),
            (ClientAuthMode::InsecureFallback, Some(&foreign), Ok(())),
            (ClientAuthMode::InsecureFallback, None, Ok(())),
        ];
        for (mode, cert, want) in cases {
            let (snapshots, callback) = world(vec![("a.example", setting(&ours, mode))]);
            let chain = cert.map(|c| vec![c.clone()]);
            let facts = callback.facts(Some("a.example"), chain.as_deref());
            let got = check(&snapshots.load(), &conn(facts), "a.example")
                .map(|_| ())
                .map_err(|a| a.status);
            assert_eq!(
                got,
                want,
                "{mode:?} with {:?}",
                cert.map(|_| "a certificate")
            );
        }
        let (_, callback) = world(vec![("a.example", setting(&ours, ClientAuthMode::Require))]);
        let verify = |c: &CertificateDer<'static>| {
            callback
                .facts(Some("a.example"), Some(std::slice::from_ref(c)))
                .client
                .unwrap()
                .verify
        };
        assert_eq!(verify(&expired), Verify::Failed("expired"));
        assert_eq!(verify(&foreign), Verify::Failed("unknown issuer"));
        assert_eq!(verify(&good), Verify::Success);
    }

    #[test]
    fn an_error_page_redirects_and_the_subject_must_match() {
        let ours = ca("ours");
        let mut s = setting(&ours, ClientAuthMode::Require);
        s.error_page = Some("https://login.example/cert".into());
        s.match_cn =
            Some(teapot_api::regex::TenantRegex::compile("(?s:.*)(?:CN=alice)(?s:.*)").unwrap());
        let (snapshots, callback) = world(vec![("a.example", s)]);
        let facts = callback.facts(Some("a.example"), None);
        let answer = check(&snapshots.load(), &conn(facts), "a.example").unwrap_err();
        assert_eq!(answer.status, 302);
        assert_eq!(
            answer.location.as_deref(),
            Some("https://login.example/cert")
        );
        let bob = client("bob", &ours, true);
        let facts = callback.facts(Some("a.example"), Some(&[bob]));
        assert_eq!(
            check(&snapshots.load(), &conn(facts), "a.example")
                .unwrap_err()
                .status,
            403
        );
        let alice = client("alice", &ours, true);
        let facts = callback.facts(Some("a.example"), Some(&[alice]));
        assert!(check(&snapshots.load(), &conn(facts), "a.example").is_ok());
    }

    #[test]
    fn a_request_for_a_host_with_another_setting_is_misdirected() {
        let (a, b) = (ca("a"), ca("b"));
        let (snapshots, callback) = world(vec![
            ("a.example", setting(&a, ClientAuthMode::Require)),
            ("b.example", setting(&b, ClientAuthMode::Require)),
            ("twin.example", setting(&a, ClientAuthMode::Require)),
        ]);
        let good = client("alice", &a, true);
        let s = snapshots.load();
        let facts = || callback.facts(Some("a.example"), Some(std::slice::from_ref(&good)));
        assert!(check(&s, &conn(facts()), "a.example:443").is_ok());
        assert_eq!(
            check(&s, &conn(facts()), "b.example").unwrap_err().status,
            421
        );
        assert_eq!(
            check(&s, &conn(facts()), "open.example")
                .unwrap_err()
                .status,
            421
        );
        assert!(
            check(&s, &conn(facts()), "twin.example").is_ok(),
            "the same CAs vouch"
        );
        // A connection to a host without a setting, a request for one with.
        let open = callback.facts(Some("open.example"), None);
        assert!(open.client.is_none());
        assert_eq!(check(&s, &conn(open), "a.example").unwrap_err().status, 421);
        assert!(
            check(
                &s,
                &ConnInfo {
                    tls: true,
                    ..ConnInfo::default()
                },
                "open.example"
            )
            .is_ok()
        );
    }

    #[test]
    fn the_depth_bounds_the_chain() {
        let root = ca("root");
        // root -> intermediate -> client: depth 2.
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "intermediate");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &root.issuer).unwrap();
        let mid = Ca {
            issuer: rcgen::Issuer::new(
                params,
                rcgen::KeyPair::from_pem(&key.serialize_pem()).unwrap(),
            ),
            cert,
            key,
        };
        let leaf = client("deep", &mid, true);
        let chain = [leaf, mid.cert.der().clone()];
        let (_, shallow) = world(vec![("a.example", setting(&root, ClientAuthMode::Require))]);
        let verify = shallow
            .facts(Some("a.example"), Some(&chain))
            .client
            .unwrap()
            .verify;
        assert_eq!(verify, Verify::Failed("chain too deep"));
        let deep = setting(&root, ClientAuthMode::Require)
            .with_depth(2, "d")
            .unwrap();
        let (_, deep) = world(vec![("a.example", deep)]);
        let verify = deep
            .facts(Some("a.example"), Some(&chain))
            .client
            .unwrap()
            .verify;
        assert_eq!(verify, Verify::Success);
    }

    #[test]
    fn a_hostile_chain_is_refused_in_the_handshake() {
        let ours = ca("ours");
        let s = Arc::new(setting(&ours, ClientAuthMode::Require));
        let prepares = Prepares::default();
        let handshakes = crate::plane::metrics::Metrics::new()
            .unwrap()
            .client_cert_handshakes
            .clone();
        let verifier = EdgeVerifier {
            hints: Vec::new(),
            webpki: prepares.get(&s).unwrap().webpki.clone(),
            in_handshake: None,
            handshakes: handshakes.clone(),
        };
        let leaf = client("alice", &ours, true);
        let now = UnixTime::now();
        assert!(verifier.verify_client_cert(&leaf, &[], now).is_ok());
        let long = vec![ours.cert.der().clone(); MAX_CLIENT_CHAIN];
        assert!(verifier.verify_client_cert(&leaf, &long, now).is_err());
        let huge = CertificateDer::from(vec![0u8; MAX_CLIENT_CERT_BYTES + 1]);
        assert!(verifier.verify_client_cert(&huge, &[], now).is_err());
        assert_eq!(
            handshakes
                .with_label_values(&["refused", "chain too large"])
                .get(),
            2
        );
        // AllowValidOnly checks the chain in the handshake too.
        let strict = EdgeVerifier {
            in_handshake: Some(1),
            ..verifier
        };
        assert!(strict.client_auth_mandatory());
        let foreign = client("mallory", &ca("theirs"), true);
        assert!(strict.verify_client_cert(&foreign, &[], now).is_err());
        assert!(strict.verify_client_cert(&leaf, &[], now).is_ok());
    }

    #[test]
    fn only_hosts_with_a_setting_get_another_configuration() {
        use pingora_core::listeners::tls::ConfigChooser;
        let ours = ca("ours");
        let (snapshots, _) = world(vec![]);
        let handshakes = crate::plane::metrics::Metrics::new()
            .unwrap()
            .client_cert_handshakes
            .clone();
        let chooser = ClientAuthChooser::new(snapshots.clone(), Arc::default(), handshakes);
        assert!(
            !chooser.active(),
            "no setting: the ClientHello is not read ahead"
        );
        let (with, _) = world(vec![("a.example", setting(&ours, ClientAuthMode::Require))]);
        snapshots.store(with.load_full());
        assert!(chooser.active());
        let base = Arc::new(
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_cert_resolver(Arc::new(NoCertificate)),
        );
        let setting = snapshots
            .load()
            .client_auth
            .lookup("a.example")
            .unwrap()
            .clone();
        let first = chooser.config(&setting, &base).unwrap();
        let again = chooser.config(&setting, &base).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "built once per setting");
        assert!(!Arc::ptr_eq(&first, &base));
        // Another listener's configuration (a Gateway's own address, with a
        // certificate resolver of its own) answers with that resolver,
        // never with the one the kept configuration was made with.
        let own = Arc::new(
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_cert_resolver(Arc::new(NoCertificate)),
        );
        let on_own = chooser.config(&setting, &own).unwrap();
        assert!(Arc::ptr_eq(&on_own.cert_resolver, &own.cert_resolver));
        assert!(!Arc::ptr_eq(&on_own.cert_resolver, &first.cert_resolver));
        assert!(Arc::ptr_eq(
            &chooser.config(&setting, &base).unwrap(),
            &first
        ));
    }

    /// A Gateway's own socket answers with its own settings: its
    /// listener's hook asks, its callback verifies and a request there is
    /// checked against them; the shared listeners and another own socket
    /// ask nothing for the same name.
    #[test]
    fn an_own_socket_asks_its_own_setting_alone() {
        use pingora_core::listeners::tls::ConfigChooser;
        let ours = ca("ours");
        let socket = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        let (own, other, shared) = (
            socket("127.0.78.2:8443"),
            socket("127.0.78.3:443"),
            socket("127.0.0.1:443"),
        );
        let mut on_own = ClientAuthTable::default();
        on_own
            .insert(
                Some(&HostPattern::parse("a.example").unwrap()),
                Arc::new(setting(&ours, ClientAuthMode::Require)),
            )
            .unwrap();
        let mut table = ClientAuthTable::default();
        table.set_own([(own, Some(on_own)), (other, None)]);
        let snapshots: SnapshotHandle = Arc::new(ArcSwap::from_pointee(Snapshot {
            client_auth: table,
            ..Snapshot::default()
        }));
        let handshakes = crate::plane::metrics::Metrics::new()
            .unwrap()
            .client_cert_handshakes
            .clone();
        let prepares = Arc::new(Prepares::default());
        let chooser = |local| {
            ClientAuthChooser::new(snapshots.clone(), prepares.clone(), handshakes.clone())
                .at(local)
        };
        assert!(chooser(Some(own)).active());
        assert!(
            !chooser(None).active(),
            "the shared listeners: no ClientHello read ahead"
        );
        assert!(!chooser(Some(other)).active());
        let callback = |local| {
            TlsFactsCallback::new(snapshots.clone(), prepares.clone(), handshakes.clone()).at(local)
        };
        let good = client("alice", &ours, true);
        let chain = [good];
        let verified = callback(Some(own)).facts(Some("a.example"), Some(&chain));
        assert_eq!(verified.client.as_ref().unwrap().verify, Verify::Success);
        assert!(
            callback(None)
                .facts(Some("a.example"), Some(&chain))
                .client
                .is_none()
        );
        let s = snapshots.load();
        let request = |local, facts| {
            check(
                &s,
                &ConnInfo {
                    local: Some(local),
                    ..conn(facts)
                },
                "a.example",
            )
            .map(|_| ())
            .map_err(|a| a.status)
        };
        assert_eq!(request(own, verified), Ok(()));
        let unasked = || callback(Some(own)).facts(Some("a.example"), None);
        assert_eq!(request(own, unasked()), Err(400), "required there");
        for elsewhere in [shared, other] {
            let facts = callback(None).facts(Some("a.example"), None);
            assert_eq!(request(elsewhere, facts), Ok(()), "{elsewhere}");
        }
        // A certificate checked on the own socket carries no request on
        // another, where the name has no setting.
        let carried = callback(Some(own)).facts(Some("a.example"), Some(&chain));
        assert_eq!(request(shared, carried), Err(421));
    }

    #[test]
    fn the_fields_are_nginxs() {
        let ours = ca("ours");
        let mut s = setting(&ours, ClientAuthMode::Require);
        s.pass_to_upstream = true;
        let (snapshots, callback) = world(vec![("a.example", s)]);
        let good = client("alice", &ours, true);
        let facts = callback.facts(Some("a.example"), Some(std::slice::from_ref(&good)));
        let pass = check(&snapshots.load(), &conn(facts), "a.example").unwrap();
        let get = |name: &str| {
            pass.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        };
        assert_eq!(get("ssl-client-verify").as_deref(), Some("SUCCESS"));
        assert_eq!(
            get("ssl-client-subject-dn").as_deref(),
            Some("O=Example\\, Inc.,CN=alice")
        );
        assert_eq!(get("ssl-client-issuer-dn").as_deref(), Some("CN=ours"));
        let escaped = get("ssl-client-cert").unwrap();
        assert!(
            escaped.starts_with("-----BEGIN%20CERTIFICATE-----%0A"),
            "{escaped}"
        );
        assert!(!escaped.contains(['/', '+', '=', '\n', ' ']), "{escaped}");
        // The PEM is the certificate's.
        let unescaped = escaped
            .split('%')
            .enumerate()
            .map(|(i, part)| {
                if i == 0 {
                    part.to_string()
                } else {
                    let byte = u8::from_str_radix(&part[..2], 16).unwrap();
                    format!("{}{}", byte as char, &part[2..])
                }
            })
            .collect::<String>();
        use rustls::pki_types::pem::PemObject;
        assert_eq!(
            CertificateDer::from_pem_slice(unescaped.as_bytes()).unwrap(),
            good
        );
    }
}
