//! Test certificates: self-signed leaves, a small CA, `kubernetes.io/tls`
//! Secret manifests and a SAN check.
//!
//! Everything is ECDSA P-256 (fast to generate, accepted everywhere) and made
//! with rcgen on the ring backend, the same crypto the proxy uses. Generation
//! panics on bad input: a test cannot do anything useful without its
//! certificate, and a panic names the offending host.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, ServerName};

/// A certificate and its key, PEM and DER.
#[derive(Clone, Debug)]
pub struct CertifiedPem {
    /// The certificate, one PEM block.
    pub cert_pem: String,
    /// The private key, PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`).
    pub key_pem: String,
    /// The certificate, DER.
    pub cert_der: Vec<u8>,
    /// The private key, PKCS#8 DER (what `rustls::pki_types::PrivatePkcs8KeyDer` wants).
    pub key_der: Vec<u8>,
}

/// Self-signed ECDSA P-256 certificate whose SANs are `hosts` (DNS names, wildcard DNS names like "*.foo.com", or IP addresses).
///
/// # Panics
///
/// If a host is not a valid DNS name or IP address.
pub fn self_signed(hosts: &[&str]) -> CertifiedPem {
    let key = new_key();
    let params = leaf_params(hosts);
    let cert = params
        .self_signed(&key)
        .unwrap_or_else(|err| panic!("self-signing a certificate for {hosts:?}: {err}"));
    CertifiedPem {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().to_vec(),
        key_der: key.serialize_der(),
    }
}

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
        CertifiedPem {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        }
    }
}

/// A `kubernetes.io/tls` Secret manifest (YAML text, base64 `data` keys tls.crt and tls.key).
pub fn tls_secret_yaml(namespace: &str, name: &str, pem: &CertifiedPem) -> String {
    // Names go in as JSON strings, which YAML reads as double-quoted scalars:
    // whatever a test passes cannot change the document's structure.
    let quote = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        "apiVersion: v1\n\
         kind: Secret\n\
         metadata:\n  \
           name: {name}\n  \
           namespace: {namespace}\n\
         type: kubernetes.io/tls\n\
         data:\n  \
           tls.crt: {crt}\n  \
           tls.key: {key}\n",
        name = quote(name),
        namespace = quote(namespace),
        crt = BASE64.encode(pem.cert_pem.as_bytes()),
        key = BASE64.encode(pem.key_pem.as_bytes()),
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

fn new_key() -> KeyPair {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .unwrap_or_else(|err| panic!("generating a P-256 key: {err}"))
}

/// Parameters of a TLS server leaf for `hosts` (rcgen sorts IPs from DNS names).
fn leaf_params(hosts: &[&str]) -> CertificateParams {
    let sans: Vec<String> = hosts.iter().map(|h| (*h).to_owned()).collect();
    let mut params = CertificateParams::new(sans)
        .unwrap_or_else(|err| panic!("invalid certificate hosts {hosts:?}: {err}"));
    // A readable subject helps when a test prints a certificate; clients
    // only look at the SANs.
    params.distinguished_name.remove(DnType::CommonName);
    params.distinguished_name.push(
        DnType::CommonName,
        hosts.first().copied().unwrap_or("teapot test"),
    );
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_matches_its_hosts_only() {
        let pem = self_signed(&["foo.bar.com", "127.0.0.1"]);
        assert!(pem.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(pem.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
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

    #[test]
    fn secret_manifest() {
        let pem = self_signed(&["foo.bar.com"]);
        let yaml = tls_secret_yaml("default", "conformance-tls", &pem);
        assert!(yaml.contains("kind: Secret\n"));
        assert!(yaml.contains("type: kubernetes.io/tls\n"));
        assert!(yaml.contains("  name: \"conformance-tls\"\n"));
        assert!(yaml.contains("  namespace: \"default\"\n"));
        let crt_line = yaml
            .lines()
            .find_map(|l| l.strip_prefix("  tls.crt: "))
            .unwrap();
        assert_eq!(BASE64.decode(crt_line).unwrap(), pem.cert_pem.as_bytes());
        let key_line = yaml
            .lines()
            .find_map(|l| l.strip_prefix("  tls.key: "))
            .unwrap();
        assert_eq!(BASE64.decode(key_line).unwrap(), pem.key_pem.as_bytes());
    }
}
