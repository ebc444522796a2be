//! Client certificates at the edge (frontend client-certificate
//! validation): the compiled, per-host setting both APIs produce.
//!
//! One type, [`ClientAuth`], is what a Gateway's `spec.tls.frontend`
//! (`default.validation`, `perPort`) and an Ingress's ingress-nginx
//! `auth-tls-*` annotations compile to; the TLS plane
//! (crate::plane::client_cert) serves it the same way whichever API asked.
//! The snapshot holds them by host in a [`ClientAuthTable`], looked up as
//! certificates are (`compile::certs`): exact name, then a one-label
//! wildcard, then a catch-all (a hostname-less HTTPS listener whose routes
//! name no host).
//!
//! Per socket: the shared 443 has the table of the Ingresses and of the
//! Gateways without an address of their own; each HTTPS socket of a
//! Gateway with its own address has a table of that Gateway's listeners
//! at that port alone ([`ClientAuthTable::at`], by the connection's local
//! address). One hostname may so be asked a certificate of one CA on one
//! socket, of another or none on another, as each Gateway's
//! `frontendValidation` (and `perPort`) says.
//!
//! Bounds (a tenant's CA bundle is hostile input, parsed once per compile
//! and consulted on every handshake of its hosts): at most
//! [`MAX_BUNDLE_BYTES`] of PEM and [`MAX_CA_CERTS`] certificates per
//! setting, a verification depth of at most [`MAX_DEPTH`]; what a client
//! may send is bounded in the plane.
//!
//! One host, two settings: a setting never gives way to the absence of one
//! (a host some object asks client certificates for gets them asked,
//! whatever another object on that host says), and between two different
//! settings the first added keeps the host and the later is refused
//! ([`ClientAuthTable::insert`] names the holder, for the later object's
//! status). Callers add oldest first, as for certificates.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, TrustAnchor};
use teapot_api::HostPattern;
use teapot_api::regex::TenantRegex;

/// PEM bytes one CA bundle may have: a hundred certificates with room to
/// spare; a tenant's bundle is parsed on every compile and kept in memory
/// on every replica. The admission's bound, so the compile refuses
/// exactly what the webhook refuses.
pub const MAX_BUNDLE_BYTES: usize = teapot_api::admission::MAX_CA_BUNDLE_BYTES;

/// Certificates one CA bundle may hold: each is a trust anchor every
/// handshake of the host's may be checked against (the admission's bound).
pub const MAX_CA_CERTS: usize = teapot_api::admission::MAX_CA_CERTS;

/// The deepest verification depth a setting may ask (ingress-nginx
/// `auth-tls-verify-depth`, the annotation's bound): the client
/// certificate and at most `MAX_DEPTH - 1` intermediates below a CA of the
/// bundle. webpki itself stops at six intermediates.
pub const MAX_DEPTH: u8 = teapot_api::annotations::MAX_AUTH_TLS_DEPTH as u8;

/// How a setting treats the client's certificate (ingress-nginx
/// `auth-tls-verify-client`; the Gateway API's `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientAuthMode {
    /// A valid certificate is required: without one, or with one that does
    /// not verify, the request is refused (400, or a redirect to the
    /// error page). ingress-nginx `on`.
    Require,
    /// A valid certificate is required, checked in the handshake: a client
    /// without one gets a TLS alert, no request is read. Gateway API
    /// `AllowValidOnly`.
    AllowValidOnly,
    /// Asked for; verified when sent, a request without one is served.
    /// ingress-nginx `optional`.
    Optional,
    /// Asked for and passed along without verification. ingress-nginx
    /// `optional_no_ca`.
    OptionalNoCa,
    /// Asked for and verified, but the connection is served with a
    /// missing or invalid certificate (its outcome still goes to the
    /// backend when asked). Gateway API `AllowInsecureFallback`.
    InsecureFallback,
}

impl ClientAuthMode {
    /// The name in logs, metrics and `/status`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuthMode::Require => "require",
            ClientAuthMode::AllowValidOnly => "allow_valid_only",
            ClientAuthMode::Optional => "optional",
            ClientAuthMode::OptionalNoCa => "optional_no_ca",
            ClientAuthMode::InsecureFallback => "insecure_fallback",
        }
    }
}

/// Why a CA bundle or a setting cannot be served; the message names the
/// object and field it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct ClientAuthError {
    /// The object and field, e.g. `ConfigMap infra/ca key ca.crt`.
    pub what: String,
    pub reason: String,
}

/// A CA bundle, parsed once: the certificates (DER) and the trust anchors
/// verification uses, with the subject names sent as hints in the
/// handshake's CertificateRequest.
#[derive(Debug)]
pub struct CaBundle {
    certs: Vec<CertificateDer<'static>>,
    roots: Arc<rustls::RootCertStore>,
}

impl CaBundle {
    /// Parses a PEM bundle of CA certificates (the `ca.crt` of a
    /// ConfigMap or Secret). `what` names the object and field for the
    /// error. Refused: more than [`MAX_BUNDLE_BYTES`] or
    /// [`MAX_CA_CERTS`], no certificate, or one that is not a usable
    /// X.509 trust anchor.
    pub fn from_pem(pem: &[u8], what: &str) -> Result<CaBundle, ClientAuthError> {
        let err = |reason: String| ClientAuthError {
            what: what.to_string(),
            reason,
        };
        if pem.len() > MAX_BUNDLE_BYTES {
            return Err(err(format!(
                "the CA bundle is {} bytes, more than {MAX_BUNDLE_BYTES}",
                pem.len()
            )));
        }
        let mut certs = Vec::new();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| err(format!("the CA bundle is not PEM: {e}")))?;
            if certs.len() == MAX_CA_CERTS {
                return Err(err(format!(
                    "the CA bundle holds more than {MAX_CA_CERTS} certificates"
                )));
            }
            certs.push(cert);
        }
        CaBundle::from_der(certs).map_err(err)
    }

    /// The bundle of these DER certificates (each checked as a trust
    /// anchor).
    pub fn from_der(certs: Vec<CertificateDer<'static>>) -> Result<CaBundle, String> {
        if certs.is_empty() {
            return Err("the CA bundle holds no certificate".into());
        }
        if certs.len() > MAX_CA_CERTS {
            return Err(format!(
                "the CA bundle holds more than {MAX_CA_CERTS} certificates"
            ));
        }
        let mut roots = rustls::RootCertStore::empty();
        for (i, cert) in certs.iter().enumerate() {
            roots
                .add(cert.clone())
                .map_err(|e| format!("certificate {} of the CA bundle: {e}", i + 1))?;
        }
        Ok(CaBundle {
            certs,
            roots: Arc::new(roots),
        })
    }

    /// The certificates, in the bundle's order.
    pub fn certs(&self) -> &[CertificateDer<'static>] {
        &self.certs
    }

    /// The trust anchors.
    pub fn roots(&self) -> &Arc<rustls::RootCertStore> {
        &self.roots
    }

    /// The anchors' subjects.
    pub fn anchors(&self) -> impl Iterator<Item = &TrustAnchor<'static>> {
        self.roots.roots.iter()
    }

    /// Bytes held (for `/status` and the memory accounts).
    pub fn memory(&self) -> usize {
        self.certs.iter().map(|c| 2 * c.len()).sum()
    }
}

/// The compiled client-certificate setting of a host, the same for both
/// APIs (module doc).
#[derive(Debug)]
pub struct ClientAuth {
    /// The CA bundle, parsed once.
    pub roots: Arc<CaBundle>,
    pub mode: ClientAuthMode,
    /// Certificates in the chain the client's certificate may need up to
    /// a CA of the bundle, itself included: 1 (ingress-nginx's default) is
    /// a certificate a CA of the bundle signed. 1..=[`MAX_DEPTH`].
    pub max_depth: u8,
    /// Where a refused request is redirected (ingress-nginx
    /// `auth-tls-error-page`); `None`: 400.
    pub error_page: Option<String>,
    /// Send the client certificate and its verification to the backend
    /// (`ssl-client-cert`, `ssl-client-verify`, `ssl-client-subject-dn`,
    /// `ssl-client-issuer-dn`).
    pub pass_to_upstream: bool,
    /// The subject DN (RFC 2253, as nginx's `$ssl_client_s_dn`:
    /// `CN=client,O=Example`) must match, as a whole value, else 403.
    /// ingress-nginx `auth-tls-match-cn` is a search (`~`): the Ingress
    /// compile wraps its pattern in `(?s:.*)(?:…)(?s:.*)`.
    pub match_cn: Option<Arc<TenantRegex>>,
    /// Where the setting comes from, for logs, metrics and conflicts:
    /// `Gateway ns/name port 443`, `Ingress ns/name`.
    pub source: String,
}

impl ClientAuth {
    /// A setting of `mode` against `roots`, with ingress-nginx's defaults
    /// for the rest (depth 1, 400 on failure, nothing passed upstream, any
    /// subject); set the public fields to change them.
    pub fn new(roots: Arc<CaBundle>, mode: ClientAuthMode, source: String) -> ClientAuth {
        ClientAuth {
            roots,
            mode,
            max_depth: 1,
            error_page: None,
            pass_to_upstream: false,
            match_cn: None,
            source,
        }
    }

    /// The depth, refused outside 1..=[`MAX_DEPTH`] (`what` names the
    /// object and field).
    pub fn with_depth(mut self, depth: i64, what: &str) -> Result<ClientAuth, ClientAuthError> {
        if !(1..=i64::from(MAX_DEPTH)).contains(&depth) {
            return Err(ClientAuthError {
                what: what.to_string(),
                reason: format!("the verification depth must be 1 to {MAX_DEPTH}, not {depth}"),
            });
        }
        self.max_depth = depth as u8;
        Ok(self)
    }

    /// Whether a connection whose client certificate was checked under
    /// `self` was checked as `other` would check it: same bundle, mode
    /// and depth. A request whose host's setting does not verify as its
    /// connection's did is misdirected (421): a certificate never carries
    /// a request to a host whose CAs did not vouch for it.
    pub fn verifies_as(&self, other: &ClientAuth) -> bool {
        self.mode == other.mode
            && self.max_depth == other.max_depth
            && (Arc::ptr_eq(&self.roots, &other.roots) || self.roots.certs == other.roots.certs)
    }

    /// Whether two settings are the same in everything a request sees.
    fn same(&self, other: &ClientAuth) -> bool {
        self.verifies_as(other)
            && self.error_page == other.error_page
            && self.pass_to_upstream == other.pass_to_upstream
            && self.match_cn.as_ref().map(|r| r.as_str())
                == other.match_cn.as_ref().map(|r| r.as_str())
    }
}

/// The client-certificate settings of a snapshot, by host: the shared
/// 443's, and (on that table only) a table per HTTPS socket of the
/// Gateways with their own address ([`ClientAuthTable::at`]).
#[derive(Debug, Default)]
pub struct ClientAuthTable {
    exact: HashMap<Box<str>, Arc<ClientAuth>>,
    /// `*.foo.com` stored as `foo.com`.
    wildcard: HashMap<Box<str>, Arc<ClientAuth>>,
    /// A hostname-less HTTPS listener's routes without hostnames: every
    /// host no other entry names.
    any: Option<Arc<ClientAuth>>,
    /// The sockets of Gateways with their own address.
    own: OwnSockets,
}

/// The settings of each HTTPS socket of Gateways with their own address:
/// that Gateway's listeners at that port, which no other socket sees, as
/// their certificates and routes (`compile::gateway::table::OwnTables`).
#[derive(Debug, Default)]
struct OwnSockets {
    /// Only sockets with a setting: the others ask no handshake.
    by_socket: HashMap<SocketAddr, ClientAuthTable>,
    /// Every address with a Gateway's own socket, with a setting or not:
    /// a connection to one never falls back to the shared table.
    addresses: HashSet<IpAddr>,
}

impl ClientAuthTable {
    /// Adds the setting of a host pattern (`None`: every host, a catch-all
    /// listener's). The first setting added for a pattern keeps it; the
    /// same setting again is fine, a different one is refused with the
    /// holder's source (module doc).
    pub fn insert(
        &mut self,
        host: Option<&HostPattern>,
        auth: Arc<ClientAuth>,
    ) -> Result<(), String> {
        let held = match host {
            None => &mut self.any,
            Some(HostPattern::Exact(h)) => {
                return insert_into(&mut self.exact, h, auth, host);
            }
            Some(HostPattern::Wildcard(s)) => {
                return insert_into(&mut self.wildcard, s, auth, host);
            }
        };
        match held {
            Some(old) if Arc::ptr_eq(old, &auth) || old.same(&auth) => Ok(()),
            Some(old) => Err(conflict(host, old)),
            None => {
                *held = Some(auth);
                Ok(())
            }
        }
    }

    /// The setting of a request's host or a handshake's SNI: exact name,
    /// then a wildcard one label up, then the catch-all. Ports, case and a
    /// trailing dot do not count.
    pub fn lookup(&self, host: &str) -> Option<&Arc<ClientAuth>> {
        if self.is_empty() {
            return None;
        }
        let mut buf = [0u8; 256];
        let Some(name) = teapot_api::host::normalize_request_host(host, &mut buf) else {
            return self.any.as_ref();
        };
        if let Some(a) = self.exact.get(name) {
            return Some(a);
        }
        if let Some((_, parent)) = name.split_once('.')
            && let Some(a) = self.wildcard.get(parent)
        {
            return Some(a);
        }
        self.any.as_ref()
    }

    /// Sets the tables of the sockets of Gateways with their own address:
    /// each socket with its Gateway's settings at that port (`None` or an
    /// empty table: none there). The table of a socket never holds others.
    pub fn set_own(
        &mut self,
        sockets: impl IntoIterator<Item = (SocketAddr, Option<ClientAuthTable>)>,
    ) {
        let mut own = OwnSockets::default();
        for (socket, table) in sockets {
            own.addresses.insert(socket.ip());
            if let Some(table) = table.filter(|t| !t.is_empty()) {
                own.by_socket.insert(socket, table);
            }
        }
        self.own = own;
    }

    /// The table of connections to `local` (`None`: the shared
    /// listeners'): a Gateway's own socket has its own (`None`: no
    /// setting there), any other address the shared one.
    pub fn at(&self, local: Option<SocketAddr>) -> Option<&ClientAuthTable> {
        match local {
            Some(l) if self.own.addresses.contains(&l.ip()) => self.own.by_socket.get(&l),
            _ => Some(self),
        }
    }

    /// The setting of a handshake without SNI: the catch-all's.
    pub fn without_name(&self) -> Option<&Arc<ClientAuth>> {
        self.any.as_ref()
    }

    /// Host patterns with a setting (this table's; a Gateway's own
    /// socket's are in its own, [`ClientAuthTable::at`]).
    pub fn len(&self) -> usize {
        self.exact.len() + self.wildcard.len() + usize::from(self.any.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every (host pattern, setting), for `/status`: `*` is the catch-all.
    pub fn entries(&self) -> impl Iterator<Item = (String, &Arc<ClientAuth>)> {
        self.exact
            .iter()
            .map(|(h, a)| (h.to_string(), a))
            .chain(self.wildcard.iter().map(|(s, a)| (format!("*.{s}"), a)))
            .chain(self.any.iter().map(|a| ("*".to_string(), a)))
    }
}

fn insert_into(
    map: &mut HashMap<Box<str>, Arc<ClientAuth>>,
    key: &str,
    auth: Arc<ClientAuth>,
    host: Option<&HostPattern>,
) -> Result<(), String> {
    match map.get(key) {
        Some(old) if Arc::ptr_eq(old, &auth) || old.same(&auth) => Ok(()),
        Some(old) => Err(conflict(host, old)),
        None => {
            map.insert(key.into(), auth);
            Ok(())
        }
    }
}

fn conflict(host: Option<&HostPattern>, holder: &ClientAuth) -> String {
    let host = host.map_or("*".to_string(), |h| h.to_string());
    format!(
        "host {host} already has another client-certificate setting, from {}",
        holder.source
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A self-signed CA certificate's PEM.
    pub(crate) fn ca_pem(name: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    pub(crate) fn auth(pem: &str, source: &str) -> Arc<ClientAuth> {
        let bundle = CaBundle::from_pem(pem.as_bytes(), "test").unwrap();
        Arc::new(ClientAuth::new(
            Arc::new(bundle),
            ClientAuthMode::Require,
            source.into(),
        ))
    }

    #[test]
    fn a_bundle_parses_once_with_its_anchors() {
        let pem = format!("{}{}", ca_pem("a"), ca_pem("b"));
        let bundle = CaBundle::from_pem(pem.as_bytes(), "ConfigMap ns/ca key ca.crt").unwrap();
        assert_eq!(bundle.certs().len(), 2);
        assert_eq!(bundle.anchors().count(), 2);
    }

    #[test]
    fn hostile_bundles_are_refused_naming_the_field() {
        let what = "ConfigMap ns/ca key ca.crt";
        let big = vec![b'a'; MAX_BUNDLE_BYTES + 1];
        let e = CaBundle::from_pem(&big, what).unwrap_err();
        assert!(e.to_string().starts_with(what), "{e}");
        assert!(e.reason.contains("more than"), "{e}");

        // More certificates than the cap, under the byte cap: the same
        // small certificate repeated.
        let one = ca_pem("a");
        let many = one.repeat(MAX_CA_CERTS + 1);
        assert!(many.len() <= MAX_BUNDLE_BYTES);
        let e = CaBundle::from_pem(many.as_bytes(), what).unwrap_err();
        assert!(e.reason.contains("more than 100 certificates"), "{e}");
        assert!(CaBundle::from_pem(one.repeat(MAX_CA_CERTS).as_bytes(), what).is_ok());

        let e = CaBundle::from_pem(b"not a certificate", what).unwrap_err();
        assert!(e.reason.contains("no certificate"), "{e}");
        let junk = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let e = CaBundle::from_pem(junk.as_bytes(), what).unwrap_err();
        assert!(e.reason.contains("certificate 1"), "{e}");
    }

    #[test]
    fn depth_is_bounded() {
        let a = || {
            ClientAuth::new(
                auth(&ca_pem("a"), "x").roots.clone(),
                ClientAuthMode::Require,
                "x".into(),
            )
        };
        assert_eq!(a().with_depth(3, "d").unwrap().max_depth, 3);
        assert!(a().with_depth(0, "d").is_err());
        let e = a()
            .with_depth(
                i64::from(MAX_DEPTH) + 1,
                "Ingress ns/i annotation auth-tls-verify-depth",
            )
            .unwrap_err();
        assert!(e.to_string().contains("auth-tls-verify-depth"), "{e}");
    }

    #[test]
    fn lookup_is_exact_then_wildcard_then_catch_all() {
        let (a, b, c) = (ca_pem("a"), ca_pem("b"), ca_pem("c"));
        let mut table = ClientAuthTable::default();
        assert!(table.lookup("a.example").is_none());
        let exact = auth(&a, "Ingress ns/a");
        let wild = auth(&b, "Gateway ns/g port 443");
        table
            .insert(
                Some(&HostPattern::parse("a.example").unwrap()),
                exact.clone(),
            )
            .unwrap();
        table
            .insert(
                Some(&HostPattern::parse("*.example").unwrap()),
                wild.clone(),
            )
            .unwrap();
        assert!(Arc::ptr_eq(table.lookup("A.example:443").unwrap(), &exact));
        assert!(Arc::ptr_eq(table.lookup("b.example.").unwrap(), &wild));
        assert!(table.lookup("x.b.example").is_none());
        assert!(table.without_name().is_none());
        let any = auth(&c, "Gateway ns/h port 443");
        table.insert(None, any.clone()).unwrap();
        assert!(Arc::ptr_eq(table.lookup("x.b.example").unwrap(), &any));
        assert!(Arc::ptr_eq(table.without_name().unwrap(), &any));
        assert_eq!(table.len(), 3);
    }

    #[test]
    fn a_gateways_own_socket_has_its_own_table() {
        let (a, b) = (ca_pem("a"), ca_pem("b"));
        let host = HostPattern::parse("same.example").unwrap();
        let mut table = ClientAuthTable::default();
        let shared = auth(&a, "Gateway ns/shared port 443");
        table.insert(Some(&host), shared.clone()).unwrap();
        let mut own = ClientAuthTable::default();
        let theirs = auth(&b, "Gateway ns/own port 8443");
        // Another CA for the same host: no conflict, another socket.
        own.insert(Some(&host), theirs.clone()).unwrap();
        let socket = |s: &str| s.parse::<SocketAddr>().unwrap();
        table.set_own([
            (socket("127.0.78.2:8443"), Some(own)),
            (socket("127.0.78.2:443"), Some(ClientAuthTable::default())),
            (socket("127.0.78.3:443"), None),
        ]);
        let on = |local: Option<&str>| {
            table
                .at(local.map(socket))
                .and_then(|t| t.lookup("same.example"))
                .map(|a| a.source.clone())
        };
        assert_eq!(on(None).as_deref(), Some("Gateway ns/shared port 443"));
        assert_eq!(
            on(Some("127.0.0.1:443")).as_deref(),
            Some("Gateway ns/shared port 443"),
            "an address no Gateway owns: the shared table"
        );
        assert_eq!(
            on(Some("127.0.78.2:8443")).as_deref(),
            Some("Gateway ns/own port 8443")
        );
        // The Gateway's other socket, and another Gateway's without a
        // setting: none, never the shared table's.
        assert!(table.at(Some(socket("127.0.78.2:443"))).is_none());
        assert!(table.at(Some(socket("127.0.78.3:443"))).is_none());
        assert!(table.at(Some(socket("127.0.78.3:8443"))).is_none());
        assert_eq!(table.len(), 1, "the shared table's own entries");
    }

    #[test]
    fn the_first_setting_keeps_a_host_and_a_different_one_is_refused() {
        let (a, b) = (ca_pem("a"), ca_pem("b"));
        let mut table = ClientAuthTable::default();
        let host = HostPattern::parse("a.example").unwrap();
        table
            .insert(Some(&host), auth(&a, "Ingress ns/old"))
            .unwrap();
        // The same bundle, mode and depth from another object: one setting.
        table
            .insert(Some(&host), auth(&a, "Ingress ns/twin"))
            .unwrap();
        let e = table
            .insert(Some(&host), auth(&b, "Ingress ns/new"))
            .unwrap_err();
        assert!(e.contains("Ingress ns/old"), "{e}");
        assert_eq!(table.lookup("a.example").unwrap().source, "Ingress ns/old");
        let mut optional = ClientAuth::new(
            auth(&a, "x").roots.clone(),
            ClientAuthMode::Optional,
            "Ingress ns/opt".into(),
        );
        assert!(!optional.verifies_as(table.lookup("a.example").unwrap()));
        optional.mode = ClientAuthMode::Require;
        assert!(optional.verifies_as(table.lookup("a.example").unwrap()));
        optional.pass_to_upstream = true;
        assert!(table.insert(Some(&host), Arc::new(optional)).is_err());
    }
}
