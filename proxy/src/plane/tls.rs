//! TLS: certificates from `kubernetes.io/tls` Secrets, chosen by SNI.
//!
//! The [`SniResolver`] is what Pingora's rustls listener asks on every
//! ClientHello. It reads the current [`Snapshot`](crate::compile::snapshot::Snapshot)
//! through the same `ArcSwap` as the router, so a certificate that changes
//! in a Secret is used by the next handshake without a restart.
//!
//! A request on a TLS connection whose Host is not its SNI is answered 421
//! (RFC 9110 §15.5.20) by [`misdirected`]: where Gateway listeners select
//! the names, when the Host selects another HTTPS listener than the SNI
//! did (the Gateway API's rule); elsewhere (Ingress hosts) when the
//! connection's certificate is not the Host's, so tenant A's SNI and
//! certificate cannot front a request for another tenant's host
//! (docs/gateway-api.md, "Misdirected requests"). The SNI reaches the
//! request path in the
//! connection's TLS digest (crate::plane::client_cert::TlsFactsCallback),
//! with the client certificate's outcome where its host asks for one.

use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::compile::gateway::table::HttpsListeners;
use crate::compile::routes::HostRank;
use crate::compile::snapshot::{Snapshot, SnapshotHandle};

/// Picks the certificate for each handshake: a Secret's (exact, then
/// wildcard), else the ACME certificate of exactly that host, else the
/// self-signed default. Never another host's ACME certificate.
#[derive(Debug)]
pub struct SniResolver {
    snapshots: SnapshotHandle,
    default: Arc<CertifiedKey>,
    acme: Option<Arc<dyn crate::plane::AcmeResponder>>,
    /// The socket whose handshakes this resolver answers, when that is
    /// one socket (a Gateway's own address): rustls does not tell a
    /// resolver where a connection came in.
    local: Option<std::net::SocketAddr>,
}

impl SniResolver {
    pub fn new(snapshots: SnapshotHandle, default: Arc<CertifiedKey>) -> SniResolver {
        SniResolver {
            snapshots,
            default,
            acme: None,
            local: None,
        }
    }

    /// This resolver for the handshakes of the socket `local` only: on a
    /// Gateway's own address its own HTTPS listeners choose the
    /// certificate, never another Gateway's or an Ingress's.
    pub fn at(&self, local: std::net::SocketAddr) -> SniResolver {
        SniResolver {
            snapshots: self.snapshots.clone(),
            default: self.default.clone(),
            acme: self.acme.clone(),
            local: Some(local),
        }
    }

    pub fn with_acme(mut self, acme: Option<Arc<dyn crate::plane::AcmeResponder>>) -> SniResolver {
        self.acme = acme;
        self
    }
}

impl SniResolver {
    /// The certificate a handshake on `local` naming `name` gets.
    fn choose(
        &self,
        snapshot: &Snapshot,
        local: Option<std::net::SocketAddr>,
        name: Option<&str>,
    ) -> Arc<CertifiedKey> {
        if let Some(own) = local.and_then(|l| snapshot.gateway.own().at(l)) {
            return self.choose_own(snapshot, own, name);
        }
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
        // A name no certificate names that a Gateway's HTTPS listener
        // selects (its catch-all, a wildcard deeper than one label) gets
        // that listener's certificate, as the specification serves it;
        // a name an Ingress serves keeps the default.
        let mut buf = [0u8; 256];
        if !snapshot.gateway.https_listeners().is_empty()
            && let Some(name) = teapot_api::host::normalize_request_host(name, &mut buf)
            && let Some(l) = gateway_listener(snapshot, Some(name))
            && let Some(key) = snapshot.gateway.https_listeners().certificate(l)
        {
            return key.clone();
        }
        self.default.clone()
    }

    /// On a Gateway's own address (`table`: its routes and HTTPS
    /// listeners at that port) the listener the name selects serves it,
    /// as the specification does: of its certificates the one named for
    /// that name, else its first. A name no listener there selects (no
    /// route there serves it) gets the default.
    fn choose_own(
        &self,
        snapshot: &Snapshot,
        table: Option<&crate::compile::gateway::GatewayTable>,
        name: Option<&str>,
    ) -> Arc<CertifiedKey> {
        let mut buf = [0u8; 256];
        let normalized = name.and_then(|n| teapot_api::host::normalize_request_host(n, &mut buf));
        if name.is_some() && normalized.is_none() {
            return self.default.clone();
        }
        let Some((listeners, l)) = table
            .map(|t| t.https_listeners())
            .and_then(|ls| Some((ls, ls.select(normalized)?)))
        else {
            return self.default.clone();
        };
        if let Some(key) = normalized.and_then(|n| snapshot.certs.lookup(n))
            && listeners.serves(l, key)
        {
            return key.clone();
        }
        listeners
            .certificate(l)
            .cloned()
            .unwrap_or_else(|| self.default.clone())
    }

    /// Whether a request for `host` on a connection to `local` whose
    /// handshake named `sni` is misdirected. Ports and case do not count,
    /// and a Host equal to the SNI is never misdirected (one compare,
    /// nothing looked up). Otherwise:
    ///
    /// - Where both names select an HTTPS listener of a Gateway on the
    ///   shared socket (the specification's listener hostname rules,
    ///   `HttpsListeners`): 421 when they select different listeners.
    ///   On one listener, its hosts share connections when each name's
    ///   certificate is that listener's or the default one, or both are
    ///   the same; a certificate from elsewhere (an Ingress's, ACME's)
    ///   fronts no other host.
    /// - On a Gateway's own address the same, with that Gateway's HTTPS
    ///   listeners at that port (`local`'s) in place of the shared ones.
    /// - Where neither does (Ingress hosts, no Gateway listener at all):
    ///   the certificate the connection got must be the one a handshake
    ///   for `host` would get.
    /// - Where one does and the other not: 421.
    ///
    /// A name an Ingress serves (the decision goes to the Ingress table,
    /// crate::plane::decide) selects no Gateway listener.
    pub fn misdirected(
        &self,
        sni: Option<&str>,
        host: &str,
        local: Option<std::net::SocketAddr>,
    ) -> bool {
        let (mut a, mut b) = ([0u8; 256], [0u8; 256]);
        let requested = teapot_api::host::normalize_request_host(host, &mut a);
        let named = sni.and_then(|s| teapot_api::host::normalize_request_host(s, &mut b));
        if requested.is_some() && requested == named {
            return false;
        }
        let snapshot = self.snapshots.load();
        let by_sni = self.choose(&snapshot, local, sni);
        let by_host = self.choose(&snapshot, local, Some(host));
        let same_certificate = Arc::ptr_eq(&by_sni, &by_host);
        // A Gateway's own address: its listeners at that port, where no
        // Ingress serves a name.
        let own = local.and_then(|l| snapshot.gateway.own().at(l));
        let empty = HttpsListeners::default();
        let listeners = match own {
            Some(table) => table.map_or(&empty, |t| t.https_listeners()),
            None => snapshot.gateway.https_listeners(),
        };
        let Some(requested) = requested else {
            return !same_certificate;
        };
        if listeners.is_empty() || (sni.is_some() && named.is_none()) {
            return !same_certificate;
        }
        let select = |name| match own {
            Some(_) => listeners.select(name),
            None => gateway_listener(&snapshot, name),
        };
        match (select(named), select(Some(requested))) {
            (None, None) => !same_certificate,
            (Some(x), Some(y)) if x == y => {
                let theirs =
                    |c: &Arc<CertifiedKey>| Arc::ptr_eq(c, &self.default) || listeners.serves(x, c);
                !(same_certificate || (theirs(&by_sni) && theirs(&by_host)))
            }
            _ => true,
        }
    }
}

/// The HTTPS listener of a Gateway on the shared socket a normalised name
/// selects (`None` as the name: no SNI), unless an Ingress serves that
/// name (the decision goes to the Ingress table, crate::plane::decide).
fn gateway_listener(snapshot: &Snapshot, name: Option<&str>) -> Option<u32> {
    let gateway = name.map_or(HostRank::Any, |n| snapshot.gateway.host(n).rank);
    let ingress = name.map_or(HostRank::None, |n| snapshot.routes.host_rank(n));
    if ingress != HostRank::None && gateway < ingress {
        return None;
    }
    snapshot.gateway.https_listeners().select(name)
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let snapshot = self.snapshots.load();
        Some(self.choose(&snapshot, self.local, client_hello.server_name()))
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
        let m = |sni: Option<&str>, host: &str| resolver.misdirected(sni, host, None);
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

    /// Upstream's HTTPRouteHTTPSListenerDetectMisdirectedRequests: one
    /// certificate on four listeners (catch-all, `second-example.org`,
    /// `*.wildcard.org`, `fourth-example.wildcard.org`); 421 exactly when
    /// the Host selects another listener than the SNI did. Beside them,
    /// an Ingress host with its own certificate and one sharing the
    /// listeners' keep the certificate rule, and a certificate that is
    /// not the listener's (the Ingress's) fronts no other host of it.
    #[test]
    fn a_host_another_listener_selects_is_misdirected() {
        let key = TlsCertificate::self_signed_default().unwrap().key;
        let ingress_key = TlsCertificate::self_signed_default().unwrap().key;
        let default = TlsCertificate::self_signed_default().unwrap().key;
        let p = |h: &str| HostPattern::parse(h).unwrap();
        let mut snapshot = Snapshot::default();
        let mut b = crate::compile::gateway::table::TableBuilder::default();
        let https = b.https_listeners();
        for host in [None, Some("second-example.org")] {
            let l = https.listener(vec![key.clone()]);
            https.add(host.map(p).as_ref(), l);
        }
        for host in ["*.wildcard.org", "fourth-example.wildcard.org"] {
            let l = https.listener(vec![key.clone()]);
            https.add(Some(&p(host)), l);
        }
        snapshot.gateway = b.build();
        // The catch-all listener's routed host and the others: the
        // listener's certificate on each (compile::gateway).
        for host in [
            "example.org",
            "second-example.org",
            "*.wildcard.org",
            "fourth-example.wildcard.org",
        ] {
            snapshot.certs.insert(&p(host), key.clone());
        }
        snapshot
            .certs
            .insert(&p("ingress.example"), ingress_key.clone());
        let resolver = SniResolver::new(Arc::new(ArcSwap::from_pointee(snapshot)), default);
        let m = |sni: Option<&str>, host: &str| resolver.misdirected(sni, host, None);
        let cases = [
            ("example.org", "example.org", false),
            ("example.org", "second-example.org", true),
            ("example.org", "unknown-example.org", false),
            ("second-example.org", "example.org", true),
            ("second-example.org", "unknown-example.org", true),
            (
                "third-example.wildcard.org",
                "fith-example.wildcard.org",
                false,
            ),
            (
                "third-example.wildcard.org",
                "fourth-example.wildcard.org",
                true,
            ),
            ("third-example.wildcard.org", "second-example.org", true),
            ("third-example.wildcard.org", "unknown-example.org", true),
            (
                "fourth-example.wildcard.org",
                "fith-example.wildcard.org",
                true,
            ),
            ("unknown-example.org", "example.org", false),
            ("unknown-example.org", "unknown-example.org", false),
        ];
        for (sni, host, want) in cases {
            assert_eq!(m(Some(sni), host), want, "SNI {sni}, Host {host}");
        }
        // A handshake for a name no certificate names gets the listener's.
        let chosen = |name| resolver.choose(&resolver.snapshots.load(), None, Some(name));
        assert!(Arc::ptr_eq(&chosen("unknown-example.org"), &key));
        assert!(Arc::ptr_eq(&chosen("a.b.wildcard.org"), &key));
        assert!(!m(None, "example.org"), "no SNI: the catch-all listener");
        assert!(m(None, "second-example.org"));
        // On the catch-all listener too, but with the Ingress's
        // certificate: it fronts none of the listener's hosts.
        assert!(m(Some("ingress.example"), "example.org"));
        assert!(m(Some("example.org"), "ingress.example"));
        assert!(m(Some("ingress.example"), "unknown-example.org"));
    }

    /// A Gateway with its own address (every operator Gateway's, as
    /// `--gateway-own-addresses` gives) and two HTTPS listeners on 443,
    /// upstream's `same-namespace-with-https-listener`: on that socket its
    /// listeners choose the certificate (the hostname-less one's for any
    /// name no other listener selects, even a name the shared table holds
    /// another certificate for) and the 421 as the shared listeners' do
    /// on the shared socket.
    #[test]
    fn a_gateways_own_address_answers_with_its_own_listeners() {
        use crate::compile::l4::{L4Config, L4Inputs};
        use teapot_testkit::certs::{self_signed, tls_secret_yaml};

        let any = self_signed(&["*.org", "example.org"]);
        let second = self_signed(&["second-example.org"]);
        let ingress = self_signed(&["example.org"]);
        let docs = [
            tls_secret_yaml("infra", "any-cert", &any),
            tls_secret_yaml("infra", "second-cert", &second),
            tls_secret_yaml("web", "ingress-cert", &ingress),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: own, namespace: infra}\nspec:\n  gatewayClassName: teapot\n  listeners:\n  - {name: https, protocol: HTTPS, port: 443, tls: {certificateRefs: [{name: any-cert}]}}\n  - {name: second, protocol: HTTPS, port: 443, hostname: second-example.org, tls: {certificateRefs: [{name: second-cert}]}}\n".to_string(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: infra}\nspec:\n  parentRefs: [{name: own, sectionName: https}]\n  hostnames: [example.org]\n  rules: [{}]\n".to_string(),
            // An Ingress on the shared listeners with its own certificate
            // for example.org: the shared table's.
            "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: teapot}\nspec: {controller: teapot.dev/ingress-controller}\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web, namespace: web}\nspec:\n  ingressClassName: teapot\n  tls: [{hosts: [example.org], secretName: ingress-cert}]\n  rules:\n  - host: example.org\n    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}\n".to_string(),
        ];
        let options = crate::compile::CompileOptions {
            l4: Some(L4Inputs {
                config: Arc::new(L4Config {
                    pools: vec!["default=127.0.77.1".parse().unwrap()],
                    gateway_own_addresses: true,
                    ..L4Config::default()
                }),
                previous: Default::default(),
                runtime: Default::default(),
            }),
            ..crate::compile::CompileOptions::default()
        };
        let snapshot = crate::compile::tests::compile_test_docs(&docs, &options);
        let socket: std::net::SocketAddr = "127.0.77.1:443".parse().unwrap();
        assert!(
            snapshot.gateway.own().serves(socket.ip()),
            "its own address"
        );
        let default = TlsCertificate::self_signed_default().unwrap().key;
        let shared = SniResolver::new(Arc::new(ArcSwap::from_pointee(snapshot)), default);
        let own = shared.at(socket);
        let der = |r: &SniResolver, name: Option<&str>| {
            let key = r.choose(&r.snapshots.load(), r.local, name);
            key.cert[0].as_ref().to_vec()
        };
        for name in [
            Some("example.org"),
            Some("unknown-example.org"),
            Some("a.b.wildcard.org"),
            None,
        ] {
            assert_eq!(der(&own, name), any.cert_der, "{name:?} on its own address");
        }
        assert_eq!(der(&own, Some("second-example.org")), second.cert_der);
        // The shared socket: the Ingress's certificate; its listeners are
        // not the shared socket's catch-all.
        assert_eq!(der(&shared, Some("example.org")), ingress.cert_der);
        assert_ne!(der(&shared, Some("unknown-example.org")), any.cert_der);

        let m = |sni: &str, host: &str| shared.misdirected(Some(sni), host, Some(socket));
        assert!(!m("example.org", "unknown-example.org"), "one listener");
        assert!(!m("unknown-example.org", "example.org"));
        assert!(m("example.org", "second-example.org"));
        assert!(m("second-example.org", "example.org"));
        assert!(m("second-example.org", "unknown-example.org"));
    }

    /// Where Ingresses serve both names the certificate rule holds; a
    /// Gateway listener's host is never served on an Ingress host's
    /// connection, even with the same certificate.
    #[test]
    fn ingress_hosts_keep_the_certificate_rule() {
        let key = TlsCertificate::self_signed_default().unwrap().key;
        let other = TlsCertificate::self_signed_default().unwrap().key;
        let p = |h: &str| HostPattern::parse(h).unwrap();
        let rule = |h: &str| {
            format!(
                "  - host: {h}\n    http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}\n"
            )
        };
        let docs = format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: web, namespace: ops}}\nspec:\n  ingressClassName: teapot\n  rules:\n{}{}{}---\napiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {{name: teapot}}\nspec: {{controller: teapot.dev/ingress-controller}}\n",
            rule("a.example"),
            rule("b.example"),
            rule("c.example"),
        );
        let mut snapshot = crate::compile::tests::compile_test_docs(
            &[docs],
            &crate::compile::CompileOptions::default(),
        );
        assert_ne!(
            snapshot.routes.host_rank("a.example"),
            HostRank::None,
            "the Ingress is routed"
        );
        let mut b = crate::compile::gateway::table::TableBuilder::default();
        let l = b.https_listeners().listener(vec![key.clone()]);
        b.https_listeners().add(Some(&p("gw.example")), l);
        snapshot.gateway = b.build();
        for (host, k) in [
            ("gw.example", &key),
            ("a.example", &key),
            ("b.example", &key),
            ("c.example", &other),
        ] {
            snapshot.certs.insert(&p(host), k.clone());
        }
        let resolver = SniResolver::new(Arc::new(ArcSwap::from_pointee(snapshot)), other.clone());
        let m = |sni: Option<&str>, host: &str| resolver.misdirected(sni, host, None);
        assert!(!m(Some("a.example"), "b.example"), "one certificate");
        assert!(m(Some("a.example"), "c.example"), "another certificate");
        assert!(
            m(Some("a.example"), "gw.example"),
            "a Gateway listener's host"
        );
        assert!(m(Some("gw.example"), "a.example"));
    }
}
