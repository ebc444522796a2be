//! DNS-01 (RFC 8555 §8.4) for the wildcard certificate of each tenant
//! cluster (`*.CLUSTER.lb.DOMAIN` and `CLUSTER.lb.DOMAIN`, docs/dns.md):
//! the issuer keeps each challenge's TXT record among the store's
//! challenges, which every replica reads, and the fleet's DNS server
//! answers it from there (crate::loops::dns_zone). One store for both
//! kinds of challenge: the issuer role, the clean start of a new issuer
//! and the kube-mode Secret are the HTTP-01 ones already.

use std::time::Duration;

/// Store tokens of DNS-01 challenges start with this: never a token an
/// HTTP-01 validation asks for (those are the CA's base64url tokens).
pub const TOKEN_PREFIX: &str = "dns01_";

/// Between publishing the TXT records and telling the CA to look: every
/// replica's zone loop (four times a second) and, in kube mode, its watch
/// of the challenge Secret must have them by then.
pub const PROPAGATION: Duration = Duration::from_secs(2);

/// The store token of the CA's challenge `ca_token` (base64url, so the
/// result is a valid token too).
pub fn token(ca_token: &str) -> String {
    format!("{TOKEN_PREFIX}{ca_token}")
}

/// The stored value: the record's name and the TXT value, space apart.
pub fn value(identifier: &str, digest: &str) -> String {
    format!("{} {digest}", record_name(identifier))
}

/// `_acme-challenge.NAME`: where the CA looks for NAME and for `*.NAME`.
pub fn record_name(identifier: &str) -> String {
    format!("_acme-challenge.{}", identifier.trim_start_matches("*."))
}

/// The TXT record of a stored challenge, `None` for an HTTP-01 one.
pub fn record(token: &str, value: &str) -> Option<(String, String)> {
    token.strip_prefix(TOKEN_PREFIX)?;
    let (name, digest) = value.split_once(' ')?;
    Some((name.to_string(), digest.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_dns_challenge_reads_back_as_its_txt_record() {
        let t = token("abc-_1");
        let v = value("*.acme.lb.example.net", "digest");
        assert_eq!(
            record(&t, &v),
            Some((
                "_acme-challenge.acme.lb.example.net".into(),
                "digest".into()
            ))
        );
        assert!(super::super::store::valid_token(&t));
        assert_eq!(record("abc", "x y"), None, "an HTTP-01 token");
    }
}
