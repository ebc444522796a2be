//! Test certificates: self-signed leaves, a small CA, `kubernetes.io/tls`
//! Secret manifests and a SAN check.
//!
//! Everything is ECDSA P-256 (fast to generate, accepted everywhere) and made
//! with rcgen on the ring backend, the same crypto the proxy uses. Generation
//! panics on bad input: a test cannot do anything useful without its
//! certificate, and a panic names the offending host.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, ServerName};
use teapot_echo::certs::{leaf_params, new_key};

// The demo needs the self-signed leaf and its Secret manifest too, so they
// are product code; tests reach them here as before.
pub use teapot_echo::certs::{CertifiedPem, self_signed, tls_secret_yaml};

/// A test CA that issues leaf certificates (ECDSA P-256).
#[derive(Debug)]
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: Vec<u8>,
}

impl TestCa {
    /// A fresh self-signed CA named `common_name`.
    ///
    /// # Panics
    ///
    /// If rcgen cannot sign (it does not for P-256 keys it generated itself).
    pub fn new(common_name: &str) -> TestCa {
        let key = new_key();
        let mut params = CertificateParams::default();
        params.distinguished_name.remove(DnType::CommonName);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params
            .self_signed(&key)
            .unwrap_or_else(|err| panic!("self-signing test CA {common_name:?}: {err}"));
        TestCa {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            // The issuer keeps the CA's name and key id so leaves name it as
            // their issuer and carry a matching authority key identifier.
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate, PEM (for trust stores and `ca.crt` keys).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER (for `client::Transport::Tls { roots }`).
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// A leaf certificate for `hosts`, signed by this CA.
    ///
    /// # Panics
    ///
    /// If a host is not a valid DNS name or IP address.
    pub fn issue(&self, hosts: &[&str]) -> CertifiedPem {
        let key = new_key();
        let mut params = leaf_params(hosts);
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.issuer)
            .unwrap_or_else(|err| panic!("issuing a certificate for {hosts:?}: {err}"));
        CertifiedPem::new(&cert, &key)
    }

    /// A server certificate for `hosts` that also carries `uris` as URI
    /// subjectAltNames (SPIFFE IDs, say), signed by this CA.
    ///
    /// # Panics
    ///
    /// If a host is not a valid DNS name or IP address.
    pub fn issue_with_uris(&self, hosts: &[&str], uris: &[&str]) -> CertifiedPem {
        let key = new_key();
        let mut params = leaf_params(hosts);
        for uri in uris {
            let uri = rcgen::string::Ia5String::try_from(*uri)
                .unwrap_or_else(|err| panic!("URI {uri:?}: {err}"));
            params.subject_alt_names.push(rcgen::SanType::URI(uri));
        }
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.issuer)
            .unwrap_or_else(|err| panic!("issuing a certificate for {hosts:?}: {err}"));
        CertifiedPem::new(&cert, &key)
    }

    /// A client certificate (extended key usage clientAuth) named
    /// `common_name`, signed by this CA: what a backend that requires
    /// mutual TLS accepts.
    ///
    /// # Panics
    ///
    /// If `common_name` is not a valid DNS name.
    pub fn issue_client(&self, common_name: &str) -> CertifiedPem {
        let key = new_key();
        let mut params = leaf_params(&[common_name]);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.issuer)
            .unwrap_or_else(|err| panic!("issuing a client certificate {common_name:?}: {err}"));
        CertifiedPem::new(&cert, &key)
    }
}

/// A `kubernetes.io/tls` Secret manifest with `tls.crt`, `tls.key` and a
/// `ca.crt` (ingress-nginx's `proxy-ssl-secret` shape: the client
/// certificate teapot presents and the CA that verifies the backend).
pub fn tls_secret_with_ca_yaml(
    namespace: &str,
    name: &str,
    pem: &CertifiedPem,
    ca_pem: &str,
) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes());
    format!("{}  ca.crt: {ca}\n", tls_secret_yaml(namespace, name, pem))
}

/// An `Opaque` Secret manifest with `ca.crt` alone (ingress-nginx's other
/// `proxy-ssl-secret` shape: verify the backend, present no client
/// certificate).
pub fn ca_secret_yaml(namespace: &str, name: &str, ca_pem: &str) -> String {
    use base64::Engine as _;
    let quote = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {}\n  namespace: {}\ntype: Opaque\ndata:\n  ca.crt: {}\n",
        quote(name),
        quote(namespace),
        base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes())
    )
}

/// Whether a DER certificate is valid for `host` by its SANs (rustls-webpki `EndEntityCert::verify_is_valid_for_subject_name`), ignoring the chain.
///
/// `host` is a DNS name or an IP address, without port. Unparsable input is
/// simply "no match". Wildcards follow webpki: `*.foo.com` covers exactly one
/// extra label.
pub fn cert_matches_hostname(cert_der: &[u8], host: &str) -> bool {
    let der = CertificateDer::from(cert_der);
    let Ok(cert) = webpki::EndEntityCert::try_from(&der) else {
        return false;
    };
    let Ok(name) = ServerName::try_from(host) else {
        return false;
    };
    cert.verify_is_valid_for_subject_name(&name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_matches_its_hosts_only() {
        // The PEM framing is tested beside self_signed (teapot-echo).
        let pem = self_signed(&["foo.bar.com", "127.0.0.1"]);
        assert!(cert_matches_hostname(&pem.cert_der, "foo.bar.com"));
        assert!(
            cert_matches_hostname(&pem.cert_der, "FOO.bar.com"),
            "DNS names are case-insensitive"
        );
        assert!(cert_matches_hostname(&pem.cert_der, "127.0.0.1"));
        assert!(!cert_matches_hostname(&pem.cert_der, "bar.com"));
        assert!(!cert_matches_hostname(&pem.cert_der, "x.foo.bar.com"));
        assert!(!cert_matches_hostname(&pem.cert_der, "127.0.0.2"));
        assert!(!cert_matches_hostname(&pem.cert_der, ""));
        assert!(!cert_matches_hostname(b"not a certificate", "foo.bar.com"));
    }

    #[test]
    fn wildcard_covers_exactly_one_label() {
        let pem = self_signed(&["*.foo.com"]);
        assert!(cert_matches_hostname(&pem.cert_der, "a.foo.com"));
        assert!(!cert_matches_hostname(&pem.cert_der, "foo.com"));
        assert!(!cert_matches_hostname(&pem.cert_der, "a.b.foo.com"));
    }

    #[test]
    fn ca_issues_distinct_leaves() {
        let ca = TestCa::new("teapot test CA");
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let a = ca.issue(&["a.example.com"]);
        let b = ca.issue(&["b.example.com"]);
        assert_ne!(a.cert_der, b.cert_der);
        assert_ne!(a.key_der, b.key_der);
        assert!(cert_matches_hostname(&a.cert_der, "a.example.com"));
        assert!(!cert_matches_hostname(&a.cert_der, "b.example.com"));
        assert!(!cert_matches_hostname(ca.cert_der(), "a.example.com"));
    }
}
