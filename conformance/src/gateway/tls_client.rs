//! The TLS client of the `tls` helpers, as upstream's roundtripper builds
//! it (`tlsClientConfig`): when the test passes a server certificate, that
//! PEM is the client's only root and the server must present a certificate
//! it verifies for the helper's `serverName`; when it passes a client
//! certificate and key, the client presents them when asked. Without a
//! server certificate any certificate is accepted, as before.
//!
//! Go's verifier accepts a leaf that is itself in the root pool (the
//! suite passes the serving certificate, CA-signed or self-signed, as the
//! root); webpki wants an issuer, so a presented leaf equal to a root is
//! accepted here when it names the server as Go's `VerifyHostname` matches
//! names (a wildcard stands for one whole left-most label, `*.org`
//! included, which webpki refuses), and anything else goes to the webpki
//! verifier over the same roots.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// PEM certificates (a chain or a bundle).
fn certificates(pem: &str, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{what}: no certificate in the PEM"));
    }
    Ok(certs)
}

/// The client configuration of one TLS case: `server` (PEM) as the only
/// root when given, else any certificate; `client` (certificate PEM, key
/// PEM) presented when given.
pub fn client_config(
    server: Option<&str>,
    client: Option<(&str, &str)>,
) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("the TLS client: {e}"))?;
    let builder = match server {
        Some(pem) => {
            let roots = certificates(pem, "the server certificate")?;
            let mut store = RootCertStore::empty();
            for root in &roots {
                store
                    .add(root.clone())
                    .map_err(|e| format!("the server certificate as a root: {e}"))?;
            }
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(store),
                provider.clone(),
            )
            .build()
            .map_err(|e| format!("the server certificate verifier: {e}"))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(RootsAsGoDoes { roots, webpki }))
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(super::l4::accept_any()),
    };
    match client {
        Some((cert, key)) => {
            let chain = certificates(cert, "the client certificate")?;
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
                .map_err(|e| format!("the client key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate: {e}"))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// Go's `x509.Verify` over a root pool that may hold the leaf itself.
#[derive(Debug)]
struct RootsAsGoDoes {
    roots: Vec<CertificateDer<'static>>,
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
}

impl ServerCertVerifier for RootsAsGoDoes {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.roots.iter().any(|r| r.as_ref() == end_entity.as_ref()) {
            let host = server_name.to_str();
            return if dns_names(end_entity)
                .iter()
                .any(|pattern| go_matches_hostname(pattern, &host))
            {
                Ok(ServerCertVerified::assertion())
            } else {
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName,
                ))
            };
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

/// The DNS subject alternative names of a DER certificate.
fn dns_names(der: &[u8]) -> Vec<String> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(n) => Some((*n).to_string()),
            _ => None,
        })
        .collect()
}

/// Go's `matchHostnames`: as many labels on both sides, compared without
/// case, a left-most `*` matching any one label.
fn go_matches_hostname(pattern: &str, host: &str) -> bool {
    let pattern = pattern.trim_end_matches('.');
    let host = host.trim_end_matches('.');
    if pattern.is_empty() || host.is_empty() {
        return false;
    }
    let pattern: Vec<&str> = pattern.split('.').collect();
    let host: Vec<&str> = host.split('.').collect();
    pattern.len() == host.len()
        && pattern
            .iter()
            .zip(&host)
            .enumerate()
            .all(|(i, (p, h))| (i == 0 && *p == "*") || p.eq_ignore_ascii_case(h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_testkit::certs::{TestCa, self_signed};

    #[test]
    fn hostnames_match_as_go_matches_them() {
        assert!(go_matches_hostname("*.org", "example.org"));
        assert!(go_matches_hostname("*.org", "Second-Example.ORG"));
        assert!(go_matches_hostname("example.org", "example.org."));
        assert!(!go_matches_hostname("*", "example.org"));
        assert!(!go_matches_hostname("*.org", "a.example.org"));
        assert!(!go_matches_hostname("a.*.org", "a.b.org"));
        assert!(!go_matches_hostname("*.com", "example.org"));
    }

    fn verifier(root_pem: &str) -> RootsAsGoDoes {
        let config = client_config(Some(root_pem), None).expect("config");
        let _ = config;
        let roots = certificates(root_pem, "root").expect("root");
        let mut store = RootCertStore::empty();
        for root in &roots {
            store.add(root.clone()).expect("add");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
                .build()
                .expect("webpki");
        RootsAsGoDoes { roots, webpki }
    }

    fn verify(v: &RootsAsGoDoes, leaf_pem: &str, host: &str) -> Result<(), rustls::Error> {
        let leaf = certificates(leaf_pem, "leaf").expect("leaf").remove(0);
        let name = ServerName::try_from(host.to_string()).expect("name");
        v.verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
            .map(|_| ())
    }

    #[test]
    fn the_server_certificate_is_the_only_root() {
        // The suite's serving certificate, self-signed with `*.org`.
        let served = self_signed(&["*", "*.org"]);
        let v = verifier(&served.cert_pem);
        assert!(verify(&v, &served.cert_pem, "example.org").is_ok());
        assert!(verify(&v, &served.cert_pem, "example.com").is_err());
        // Another certificate for the same names (teapot's default one,
        // say) is refused.
        let other = self_signed(&["*", "*.org"]);
        assert!(verify(&v, &other.cert_pem, "example.org").is_err());
        // A CA as the root verifies what it signed, through webpki.
        let ca = TestCa::new("root");
        let v = verifier(ca.cert_pem());
        let leaf = ca.issue(&["abc.example.com"]);
        assert!(verify(&v, &leaf.cert_pem, "abc.example.com").is_ok());
        assert!(verify(&v, &leaf.cert_pem, "other.example.com").is_err());
    }

    #[test]
    fn a_client_certificate_needs_its_key() {
        let ca = TestCa::new("client CA");
        let client = ca.issue_client("client");
        assert!(client_config(None, Some((&client.cert_pem, &client.key_pem))).is_ok());
        assert!(client_config(None, Some(("", &client.key_pem))).is_err());
        assert!(client_config(Some("not PEM"), None).is_err());
    }
}
