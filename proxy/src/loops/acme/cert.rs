//! An issued certificate as the SNI table keeps it: the rustls key and the
//! leaf's validity, which decides renewal.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::sign::CertifiedKey;

use super::AcmeError;
use teapot_model::certificate::TlsCertificate;

/// Renewal starts once this share of the lifetime has passed (the issue's
/// "two thirds"; Let's Encrypt recommends the same for 90-day certificates).
pub const RENEW_AT: f64 = 2.0 / 3.0;

#[derive(Debug)]
pub struct IssuedCert {
    pub key: Arc<CertifiedKey>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// The stored text, to skip re-parsing an unchanged file.
    pub pem: String,
}

impl IssuedCert {
    /// Parses private key + chain (leaf first) in one PEM text and checks
    /// that they belong together.
    pub fn parse(pem: &str) -> Result<IssuedCert, AcmeError> {
        let cert = TlsCertificate::from_pem(pem.as_bytes(), pem.as_bytes())
            .map_err(|e| AcmeError::Certificate(e.to_string()))?;
        let leaf = cert
            .key
            .cert
            .first()
            .ok_or_else(|| AcmeError::Certificate("empty chain".into()))?;
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| AcmeError::Certificate(format!("leaf does not parse: {e}")))?;
        let validity = parsed.validity();
        let time = |t: i64| UNIX_EPOCH + Duration::from_secs(t.max(0) as u64);
        let not_before = time(validity.not_before.timestamp());
        let not_after = time(validity.not_after.timestamp());
        Ok(IssuedCert {
            key: cert.key.clone(),
            not_before,
            not_after,
            pem: pem.to_string(),
        })
    }

    /// When renewal is due.
    pub fn renew_at(&self) -> SystemTime {
        let lifetime = self
            .not_after
            .duration_since(self.not_before)
            .unwrap_or_default();
        self.not_before + lifetime.mul_f64(RENEW_AT)
    }

    pub fn expired(&self, now: SystemTime) -> bool {
        now >= self.not_after
    }
}

/// Unix milliseconds, the unit of stored records.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

pub fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Seconds since the epoch, for messages that must stay the same from one
/// status computation to the next.
pub fn unix_s(t: SystemTime) -> u64 {
    unix_ms(t) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renews_at_two_thirds() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["a.example".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2030, 1, 1);
        params.not_after = rcgen::date_time_ymd(2030, 4, 1); // 90 days
        let cert = params.self_signed(&key).unwrap();
        let pem = format!("{}{}", key.serialize_pem(), cert.pem());
        let issued = IssuedCert::parse(&pem).unwrap();
        let lifetime = issued.not_after.duration_since(issued.not_before).unwrap();
        assert_eq!(lifetime, Duration::from_secs(90 * 86400));
        assert_eq!(
            issued.renew_at().duration_since(issued.not_before).unwrap(),
            Duration::from_secs(60 * 86400)
        );
        let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        assert!(IssuedCert::parse(&format!("{}{}", other.serialize_pem(), cert.pem())).is_err());
    }
}
