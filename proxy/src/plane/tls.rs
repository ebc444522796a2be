//! TLS: certificates from `kubernetes.io/tls` Secrets, chosen by SNI.
//!
//! The [`SniResolver`] is what Pingora's rustls listener asks on every
//! ClientHello. It reads the current [`Snapshot`](crate::compile::snapshot::Snapshot)
//! through the same `ArcSwap` as the router, so a certificate that changes
//! in a Secret is used by the next handshake without a restart.
//!
//! A request on a TLS connection must name a host the connection's
//! certificate serves: [`misdirected`] answers 421 otherwise (RFC 9110
//! §15.5.20), so tenant A's SNI and certificate cannot front a request for
//! another Ingress's host. The SNI reaches the request path in the
//! connection's TLS digest (crate::plane::client_cert::TlsFactsCallback),
//! with the client certificate's outcome where its host asks for one.

use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::compile::snapshot::{Snapshot, SnapshotHandle};

/// Picks the certificate for each handshake: a Secret's (exact, then
/// wildcard), else the ACME certificate of exactly that host, else the
/// self-signed default. Never another host's ACME certificate.
#[derive(Debug)]
pub struct SniResolver {
    snapshots: SnapshotHandle,
    default: Arc<CertifiedKey>,
    acme: Option<Arc<dyn crate::plane::AcmeResponder>>,
}

impl SniResolver {
    pub fn new(snapshots: SnapshotHandle, default: Arc<CertifiedKey>) -> SniResolver {
        SniResolver {
            snapshots,
            default,
            acme: None,
        }
    }

    pub fn with_acme(mut self, acme: Option<Arc<dyn crate::plane::AcmeResponder>>) -> SniResolver {
        self.acme = acme;
        self
    }
}

impl SniResolver {
    /// The certificate a handshake naming `name` gets.
    fn choose(&self, snapshot: &Snapshot, name: Option<&str>) -> Arc<CertifiedKey> {
        let Some(name) = name else {
            return self.default.clone();
        };
        if let Some(key) = snapshot.certs.lookup(name) {
            return key.clone();
        }
        if let Some(acme) = &self.acme
            && let Some(key) = acme.certificate(&snapshot.acme, name)
        {
            return key;
        }
        self.default.clone()
    }

    /// Whether a request for `host` on a connection whose handshake named
    /// `sni` is misdirected: the certificate that connection was served
    /// is not the one a handshake for `host` would get. Ports and case
    /// do not count; a connection without SNI got the default
    /// certificate, so only hosts that would get it too are served on it.
    pub fn misdirected(&self, sni: Option<&str>, host: &str) -> bool {
        let (mut a, mut b) = ([0u8; 256], [0u8; 256]);
        let requested = teapot_api::host::normalize_request_host(host, &mut a);
        let named = sni.and_then(|s| teapot_api::host::normalize_request_host(s, &mut b));
        if requested.is_some() && requested == named {
            return false;
        }
        let snapshot = self.snapshots.load();
        !Arc::ptr_eq(
            &self.choose(&snapshot, sni),
            &self.choose(&snapshot, Some(host)),
        )
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let snapshot = self.snapshots.load();
        Some(self.choose(&snapshot, client_hello.server_name()))
    }
}

/// The SNI of a connection, from its TLS digest (kept there with the
/// client certificate's outcome, crate::plane::client_cert::TlsFacts).
pub fn server_name(digest: &pingora_core::protocols::tls::SslDigest) -> Option<&str> {
    digest
        .extension
        .get::<Arc<dyn std::any::Any + Send + Sync>>()?
        .downcast_ref::<crate::plane::client_cert::TlsFacts>()?
        .server_name
        .as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arc_swap::ArcSwap;
    use teapot_api::HostPattern;
    use teapot_model::certificate::TlsCertificate;

    #[test]
    fn a_host_another_certificate_serves_is_misdirected() {
        let key = || TlsCertificate::self_signed_default().unwrap().key;
        let mut snapshot = Snapshot::default();
        snapshot
            .certs
            .insert(&HostPattern::parse("a.example").unwrap(), key());
        snapshot
            .certs
            .insert(&HostPattern::parse("*.b.example").unwrap(), key());
        let resolver = SniResolver::new(Arc::new(ArcSwap::from_pointee(snapshot)), key());
        let m = |sni: Option<&str>, host: &str| resolver.misdirected(sni, host);
        assert!(!m(Some("a.example"), "A.example:443"));
        assert!(
            !m(Some("x.b.example"), "y.b.example"),
            "one wildcard certificate"
        );
        assert!(
            m(Some("a.example"), "x.b.example"),
            "tenant A's certificate, B's host"
        );
        assert!(m(Some("a.example"), "unknown.example"));
        assert!(m(None, "a.example"), "no SNI: the default certificate");
        assert!(!m(None, "unknown.example"));
        assert!(
            !m(Some("unknown.example"), "other.example"),
            "both get the default"
        );
    }
}
