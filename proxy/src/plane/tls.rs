//! TLS: certificates from `kubernetes.io/tls` Secrets, chosen by SNI.
//!
//! The [`SniResolver`] is what Pingora's rustls listener asks on every
//! ClientHello. It reads the current [`Snapshot`](crate::compile::snapshot::Snapshot)
//! through the same `ArcSwap` as the router, so a certificate that changes
//! in a Secret is used by the next handshake without a restart.

use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::compile::snapshot::SnapshotHandle;

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

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let snapshot = self.snapshots.load();
        let Some(name) = client_hello.server_name() else {
            return Some(self.default.clone());
        };
        if let Some(key) = snapshot.certs.lookup(name) {
            return Some(key.clone());
        }
        if let Some(acme) = &self.acme
            && let Some(key) = acme.certificate(&snapshot.acme, name)
        {
            return Some(key);
        }
        Some(self.default.clone())
    }
}
