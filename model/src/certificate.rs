//! Certificates from `kubernetes.io/tls` Secrets: a PEM chain and key,
//! parsed and checked to belong together, ready for rustls.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// A certificate chain and its key, ready for rustls.
#[derive(Debug)]
pub struct TlsCertificate {
    pub key: Arc<CertifiedKey>,
    /// The leaf's notAfter, Unix seconds (`None` if it could not be read):
    /// read once here, for the expiry metric.
    pub not_after: Option<i64>,
}

/// Why a certificate could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("no PEM certificate found")]
    NoCertificate,
    #[error("certificate PEM is invalid: {0}")]
    BadCertificate(String),
    #[error("no PEM private key found (PKCS#8, PKCS#1 or SEC1)")]
    NoKey,
    #[error("private key is unusable: {0}")]
    BadKey(String),
    #[error("private key does not match the certificate")]
    KeyMismatch,
    #[error("cannot generate the default certificate: {0}")]
    Generate(String),
}

impl TlsError {
    /// The Secret field this error is about.
    pub fn field(&self) -> &'static str {
        match self {
            TlsError::NoCertificate | TlsError::BadCertificate(_) => "data[\"tls.crt\"]",
            _ => "data[\"tls.key\"]",
        }
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsCertificate {
    /// Reads a PEM chain (leaf first) and a PEM key, and checks that they
    /// belong together.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<TlsCertificate, TlsError> {
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::BadCertificate(e.to_string()))?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate);
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| TlsError::NoKey)?;
        Self::from_der(chain, key)
    }

    fn from_der(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<TlsCertificate, TlsError> {
        let not_after = x509_parser::parse_x509_certificate(&chain[0])
            .ok()
            .map(|(_, leaf)| leaf.validity().not_after.timestamp());
        match CertifiedKey::from_der(chain, key, &provider()) {
            Ok(k) => Ok(TlsCertificate {
                key: Arc::new(k),
                not_after,
            }),
            Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::KeyMismatch),
            Err(rustls::Error::InvalidCertificate(e)) => {
                Err(TlsError::BadCertificate(format!("{e:?}")))
            }
            Err(e) => Err(TlsError::BadKey(e.to_string())),
        }
    }

    /// The certificate served when no Secret covers the requested name:
    /// self-signed, made at start, never another tenant's.
    pub fn self_signed_default() -> Result<TlsCertificate, TlsError> {
        let gen_err = |e: rcgen::Error| TlsError::Generate(e.to_string());
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(gen_err)?;
        let mut params =
            rcgen::CertificateParams::new(vec!["teapot.invalid".to_string()]).map_err(gen_err)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "teapot default certificate");
        // rcgen's default runs to the year 4096, which scanners rightly
        // flag; 397 days is the longest a public CA may issue.
        let (start, end) = default_validity().map_err(|e| TlsError::Generate(e.to_string()))?;
        let ymd = |d: k8s_openapi::jiff::civil::Date| {
            rcgen::date_time_ymd(i32::from(d.year()), d.month() as u8, d.day() as u8)
        };
        params.not_before = ymd(start);
        params.not_after = ymd(end);
        let cert = params.self_signed(&key).map_err(gen_err)?;
        let key_der = PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| TlsError::Generate(e.to_string()))?;
        Self::from_der(vec![cert.der().clone()], key_der)
    }
}

/// From yesterday (clocks disagree) to 397 days from today, UTC.
fn default_validity() -> Result<
    (
        k8s_openapi::jiff::civil::Date,
        k8s_openapi::jiff::civil::Date,
    ),
    k8s_openapi::jiff::Error,
> {
    use k8s_openapi::jiff::{Timestamp, ToSpan, tz::TimeZone};
    let today = Timestamp::now().to_zoned(TimeZone::UTC).date();
    Ok((today.yesterday()?, today.checked_add(397.days())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem_pair(host: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec![host.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn parses_and_checks_key_match() {
        let (c1, k1) = pem_pair("a.example");
        let (_, k2) = pem_pair("b.example");
        assert!(TlsCertificate::from_pem(c1.as_bytes(), k1.as_bytes()).is_ok());
        assert!(matches!(
            TlsCertificate::from_pem(c1.as_bytes(), k2.as_bytes()),
            Err(TlsError::KeyMismatch)
        ));
        assert!(matches!(
            TlsCertificate::from_pem(b"junk", k1.as_bytes()),
            Err(TlsError::NoCertificate)
        ));
        assert!(matches!(
            TlsCertificate::from_pem(c1.as_bytes(), b"junk"),
            Err(TlsError::NoKey)
        ));
    }

    #[test]
    fn the_default_certificate_is_valid_now_and_for_at_most_398_days() {
        let cert = TlsCertificate::self_signed_default().unwrap();
        let der = &cert.key.cert[0];
        let (_, parsed) = x509_parser::parse_x509_certificate(der).unwrap();
        assert_eq!(
            cert.not_after,
            Some(parsed.validity().not_after.timestamp()),
            "notAfter read once at load"
        );
        let validity = parsed.validity();
        assert!(validity.is_valid());
        let days = (validity.not_after.timestamp() - validity.not_before.timestamp()) / 86_400;
        assert!((397..=398).contains(&days), "{days} days");
    }
}
