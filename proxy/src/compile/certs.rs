//! The certificate table of a snapshot: certificates by the host names
//! of `spec.tls`, looked up by SNI.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::sign::CertifiedKey;

/// Certificates by the host names of `spec.tls`.
#[derive(Debug, Default)]
pub struct CertTable {
    exact: HashMap<Box<str>, Arc<CertifiedKey>>,
    /// `*.foo.com` stored as `foo.com`.
    wildcard: HashMap<Box<str>, Arc<CertifiedKey>>,
    /// notAfter (Unix seconds) of each Secret serving a host, by
    /// `namespace/name`: the expiry metric's data.
    expiry: std::collections::BTreeMap<String, i64>,
}

impl CertTable {
    /// Adds a certificate for a host pattern; the first one added wins, so
    /// callers add in age order. Returns false if the host was taken.
    pub fn insert(&mut self, host: &teapot_api::HostPattern, key: Arc<CertifiedKey>) -> bool {
        let (map, name) = match host {
            teapot_api::HostPattern::Exact(h) => (&mut self.exact, h),
            teapot_api::HostPattern::Wildcard(s) => (&mut self.wildcard, s),
        };
        if map.contains_key(name.as_str()) {
            return false;
        }
        map.insert(name.as_str().into(), key);
        true
    }

    /// Adds the certificate of Secret `secret` an HTTPS listener of a
    /// Gateway serves for `host`, unless the host has one already, and
    /// notes its expiry when it serves. `None`: a listener of a Gateway
    /// with its own address, whose sockets choose among its own
    /// listeners' certificates (`crate::plane::tls::SniResolver::at`):
    /// its names stay out of this table, which the shared HTTPS socket
    /// answers by, so the fleet's shared 443 never presents it for a name
    /// that Gateway serves only on its own address; its expiry is noted,
    /// as it serves there.
    pub fn add_listener_secret(
        &mut self,
        host: Option<&teapot_api::HostPattern>,
        secret: &teapot_model::store::NsName,
        certificate: &teapot_model::certificate::TlsCertificate,
    ) {
        let serves = host.is_none_or(|h| self.insert(h, certificate.key.clone()));
        if serves && let Some(not_after) = certificate.not_after {
            self.note_secret(secret.to_string(), not_after);
        }
    }

    /// Records that the Secret `namespace/name`, valid until `not_after`,
    /// serves a host of this table.
    pub fn note_secret(&mut self, secret: String, not_after: i64) {
        self.expiry.insert(secret, not_after);
    }

    /// The Secrets serving hosts and their notAfter, by name.
    pub fn secret_expiry(&self) -> impl Iterator<Item = (&str, i64)> {
        self.expiry.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Exact name first, then a wildcard one label up.
    pub fn lookup(&self, server_name: &str) -> Option<&Arc<CertifiedKey>> {
        let mut buf = [0u8; 256];
        let name = teapot_api::host::normalize_request_host(server_name, &mut buf)?;
        if let Some(k) = self.exact.get(name) {
            return Some(k);
        }
        let (_, parent) = name.split_once('.')?;
        self.wildcard.get(parent)
    }

    pub fn len(&self) -> usize {
        self.exact.len() + self.wildcard.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_api::HostPattern;
    use teapot_model::certificate::TlsCertificate;

    #[test]
    fn lookup_prefers_exact_then_one_label_wildcard() {
        let exact = TlsCertificate::self_signed_default().unwrap().key;
        let wild = TlsCertificate::self_signed_default().unwrap().key;
        let mut table = CertTable::default();
        assert!(table.insert(&HostPattern::parse("a.foo.com").unwrap(), exact.clone()));
        assert!(table.insert(&HostPattern::parse("*.foo.com").unwrap(), wild.clone()));
        assert!(!table.insert(&HostPattern::parse("*.foo.com").unwrap(), exact.clone()));
        assert!(Arc::ptr_eq(table.lookup("A.foo.com").unwrap(), &exact));
        assert!(Arc::ptr_eq(table.lookup("b.foo.com").unwrap(), &wild));
        assert!(table.lookup("c.b.foo.com").is_none());
        assert!(table.lookup("foo.com").is_none());
    }

    /// A Gateway with its own address (HTTPS on 8443) serves its
    /// certificate on its own sockets only: neither its listener's
    /// hostname nor a host its route binds through a hostname-less
    /// listener is in the table the shared HTTPS socket answers by, while
    /// the Gateway on the shared 443 keeps its certificate there; the own
    /// Gateway's Secret still counts for the expiry metric.
    #[test]
    fn an_own_address_gateways_certificates_stay_out_of_the_shared_table() {
        use crate::compile::CompileOptions;
        use crate::compile::tests::compile_test_docs;
        use teapot_testkit::certs::{self_signed, tls_secret_yaml};

        let own = self_signed(&["secure.example.com", "routed.example.com"]);
        let shared = self_signed(&["shared.example.com"]);
        let docs = [
            tls_secret_yaml("infra", "own-tls", &own),
            tls_secret_yaml("infra", "shared-tls", &shared),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: edge, namespace: infra}\nspec:\n  gatewayClassName: teapot\n  listeners:\n  - {name: named, protocol: HTTPS, port: 8443, hostname: secure.example.com, tls: {certificateRefs: [{name: own-tls}]}}\n  - {name: any, protocol: HTTPS, port: 9443, tls: {certificateRefs: [{name: own-tls}]}}\n".to_string(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: shared, namespace: infra}\nspec:\n  gatewayClassName: teapot\n  listeners:\n  - {name: https, protocol: HTTPS, port: 443, hostname: shared.example.com, tls: {certificateRefs: [{name: shared-tls}]}}\n".to_string(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: infra}\nspec:\n  parentRefs: [{name: edge}, {name: shared}]\n  hostnames: [secure.example.com, routed.example.com, shared.example.com]\n  rules: [{}]\n".to_string(),
        ];
        let s = compile_test_docs(&docs, &CompileOptions::default());
        assert!(s.certs.lookup("shared.example.com").is_some());
        for own_only in ["secure.example.com", "routed.example.com"] {
            assert!(
                s.certs.lookup(own_only).is_none(),
                "the shared socket would answer {own_only} with the own address's certificate"
            );
        }
        assert_eq!(s.certs.len(), 1);
        let expiring: Vec<&str> = s.certs.secret_expiry().map(|(name, _)| name).collect();
        assert_eq!(expiring, ["infra/own-tls", "infra/shared-tls"]);
    }
}
