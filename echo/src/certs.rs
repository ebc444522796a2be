//! The demo's certificate: a self-signed ECDSA P-256 leaf and the
//! `kubernetes.io/tls` Secret manifest that carries it.
//!
//! P-256 is fast to generate and accepted everywhere; rcgen runs on the
//! ring backend, the same crypto the proxy uses. Generation panics on bad
//! input: the hosts are the caller's constants, and neither the demo nor a
//! test can do anything useful without its certificate.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose};

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

impl CertifiedPem {
    /// Bundles a certificate rcgen made with its key.
    pub fn new(cert: &rcgen::Certificate, key: &KeyPair) -> CertifiedPem {
        CertifiedPem {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        }
    }
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
    CertifiedPem::new(&cert, &key)
}

/// A `kubernetes.io/tls` Secret manifest (YAML text, base64 `data` keys tls.crt and tls.key).
pub fn tls_secret_yaml(namespace: &str, name: &str, pem: &CertifiedPem) -> String {
    // Names go in as JSON strings, which YAML reads as double-quoted scalars:
    // whatever a caller passes cannot change the document's structure.
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

/// A fresh ECDSA P-256 key.
///
/// # Panics
///
/// If ring cannot generate a key (it only fails without a random source).
pub fn new_key() -> KeyPair {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .unwrap_or_else(|err| panic!("generating a P-256 key: {err}"))
}

/// Parameters of a TLS server leaf for `hosts` (rcgen sorts IPs from DNS names).
///
/// # Panics
///
/// If a host is not a valid DNS name or IP address.
pub fn leaf_params(hosts: &[&str]) -> CertificateParams {
    let sans: Vec<String> = hosts.iter().map(|h| (*h).to_owned()).collect();
    let mut params = CertificateParams::new(sans)
        .unwrap_or_else(|err| panic!("invalid certificate hosts {hosts:?}: {err}"));
    // A readable subject helps when someone prints a certificate; clients
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
    fn self_signed_is_pem_and_der_of_one_pair() {
        let pem = self_signed(&["foo.bar.com", "127.0.0.1"]);
        assert!(pem.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(pem.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        let other = self_signed(&["foo.bar.com"]);
        assert_ne!(pem.cert_der, other.cert_der);
        assert_ne!(
            pem.key_der, other.key_der,
            "every certificate has its own key"
        );
    }

    #[test]
    #[should_panic(expected = "invalid certificate hosts")]
    fn non_ascii_host_panics_naming_it() {
        leaf_params(&["bücher.example"]);
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
