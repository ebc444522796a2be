//! The QUIC keys the fleet's replicas share (`--quic-key-file`): the
//! stateless reset key, the address-validation (Retry and NEW_TOKEN)
//! token key and the key of the check quinn hides in each connection ID,
//! all derived with HKDF-SHA256 from one secret.
//!
//! BGP ECMP hashes a packet's 5-tuple, so a client whose address or
//! path changes (NAT rebinding, Wi-Fi to mobile, a replica leaving the
//! ECMP set) lands on another replica, which has no state for its
//! connection IDs. That replica answers with a stateless reset (RFC 9000
//! §10.3), and the client believes it only when its token is the one the
//! connection's own replica gave for that connection ID: an HMAC of the
//! ID under the reset key. With one key across the fleet, any replica's
//! reset ends the connection at once and the client reconnects; with a
//! key per process, the client waits for its idle timeout (the other
//! replica does not even answer: the connection ID's check fails under
//! its own key, and it drops the packet). Likewise a Retry token one
//! replica gave is good at another.
//!
//! Without a key file each process draws its own keys once
//! ([`QuicKeys::random`]), which all its serving threads' endpoints share:
//! a packet one thread's endpoint does not know is checked and reset
//! under the same keys as at the thread that issued its ID.

use std::sync::Arc;

use ring::{hkdf, hmac};

use crate::plane::ServeError;

/// The shortest secret accepted, in bytes (as the fleet key's).
pub const MIN_SECRET: usize = 16;

/// HKDF's salt: keys of another use of the same secret differ.
const SALT: &[u8] = b"teapot quic keys v1";
const RESET_INFO: &[u8] = b"stateless reset";
const TOKEN_INFO: &[u8] = b"address validation token";
const CID_INFO: &[u8] = b"connection id check";

/// The least time between two stateless resets an endpoint sends
/// (quinn's default is 20 ms: 50 a second). A replica that leaves the
/// ECMP set moves all its connections to the others at once, and each
/// should be reset at its client's next packet, so 5,000 a second; a
/// reset is smaller than the packet that asked for it (no amplification)
/// and only a packet whose connection ID passes the fleet's check gets
/// one, so garbage does not spend them.
const MIN_RESET_INTERVAL: std::time::Duration = std::time::Duration::from_micros(200);

/// The 8 bytes of a connection ID check's key, for ring's HKDF.
struct CidKeyLen;

impl hkdf::KeyType for CidKeyLen {
    fn len(&self) -> usize {
        8
    }
}

/// The reset and token keys of one endpoint.
#[derive(Clone)]
pub struct QuicKeys {
    reset: Arc<hmac::Key>,
    token: Arc<hkdf::Prk>,
    cid: u64,
}

impl std::fmt::Debug for QuicKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuicKeys(<redacted>)")
    }
}

impl QuicKeys {
    /// The keys derived from the fleet's secret (a key file's content,
    /// surrounding whitespace ignored).
    pub fn from_secret(secret: &[u8]) -> Result<QuicKeys, ServeError> {
        let secret = secret.trim_ascii();
        if secret.len() < MIN_SECRET {
            return Err(ServeError::Tls(format!(
                "the QUIC key holds {} bytes; at least {MIN_SECRET} are needed",
                secret.len()
            )));
        }
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, SALT).extract(secret);
        let reset = prk
            .expand(&[RESET_INFO], hmac::HMAC_SHA256)
            .map(hmac::Key::from)
            .map_err(|_| ServeError::Tls("deriving the QUIC reset key".into()))?;
        let token = prk
            .expand(&[TOKEN_INFO], hkdf::HKDF_SHA256)
            .map(hkdf::Prk::from)
            .map_err(|_| ServeError::Tls("deriving the QUIC token key".into()))?;
        let mut cid = [0u8; 8];
        prk.expand(&[CID_INFO], CidKeyLen)
            .and_then(|okm| okm.fill(&mut cid))
            .map_err(|_| ServeError::Tls("deriving the QUIC connection ID key".into()))?;
        Ok(QuicKeys {
            reset: Arc::new(reset),
            token: Arc::new(token),
            cid: u64::from_le_bytes(cid),
        })
    }

    /// Keys of this process alone, drawn from the system's random source.
    pub fn random() -> Result<QuicKeys, ServeError> {
        use ring::rand::SecureRandom;
        let mut secret = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut secret)
            .map_err(|_| ServeError::Tls("drawing the QUIC keys".into()))?;
        // Hex, so that no byte is taken for surrounding whitespace.
        let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        QuicKeys::from_secret(hex.as_bytes())
    }

    /// The settings of serving thread `thread`'s endpoint: this reset key,
    /// and connection IDs that start with the thread's index (what the
    /// kernel steers by: crate::plane::quic_threads) and carry a check
    /// every replica verifies (quinn drops a packet whose ID fails it,
    /// without a reset).
    pub fn endpoint_config(&self, thread: u8) -> quinn::EndpointConfig {
        let mut config = quinn::EndpointConfig::new(self.reset.clone());
        let cid = self.cid;
        config.cid_generator(move || {
            Box::new(crate::plane::quic_threads::ThreadConnectionIds::new(
                thread,
                quinn_proto::HashedConnectionIdGenerator::from_key(cid),
            ))
        });
        config.min_reset_interval(MIN_RESET_INTERVAL);
        config
    }

    /// The key Retry and NEW_TOKEN tokens are sealed with.
    pub fn token_key(&self) -> Arc<dyn quinn::crypto::HandshakeTokenKey> {
        self.token.clone()
    }

    /// The reset token of connection ID `cid`: what a client compares a
    /// stateless reset's last 16 bytes with (quinn's derivation, here to
    /// test that two replicas agree).
    #[cfg(test)]
    fn reset_token(&self, cid: &[u8]) -> [u8; 16] {
        let mut token = [0; 16];
        token.copy_from_slice(&hmac::sign(&self.reset, cid).as_ref()[..16]);
        token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"a fleet secret of 32 bytes, more\n";

    #[test]
    fn replicas_with_one_secret_derive_one_reset_token_per_connection_id() {
        let a = QuicKeys::from_secret(SECRET).unwrap();
        let b = QuicKeys::from_secret(SECRET.trim_ascii()).unwrap();
        let other = QuicKeys::from_secret(b"another secret of 32 bytes, more").unwrap();
        let cid = [7u8; 8];
        assert_eq!(a.reset_token(&cid), b.reset_token(&cid));
        assert_ne!(a.reset_token(&cid), a.reset_token(&[8u8; 8]));
        assert_ne!(a.reset_token(&cid), other.reset_token(&cid));
    }

    #[test]
    fn replicas_with_one_secret_accept_each_others_connection_ids() {
        use quinn::ConnectionIdGenerator;
        let a = QuicKeys::from_secret(SECRET).unwrap();
        let b = QuicKeys::from_secret(SECRET).unwrap();
        let other = QuicKeys::from_secret(b"another secret of 32 bytes, more").unwrap();
        let mut made = quinn_proto::HashedConnectionIdGenerator::from_key(a.cid);
        let id = made.generate_cid();
        assert!(
            quinn_proto::HashedConnectionIdGenerator::from_key(b.cid)
                .validate(&id)
                .is_ok()
        );
        assert!(
            quinn_proto::HashedConnectionIdGenerator::from_key(other.cid)
                .validate(&id)
                .is_err()
        );
    }

    #[test]
    fn a_short_secret_is_refused() {
        let err = QuicKeys::from_secret(b"  short  \n").unwrap_err();
        assert!(err.to_string().contains("5 bytes"), "{err}");
    }

    #[test]
    fn the_token_key_is_the_same_for_one_secret() {
        // A token sealed by one replica opens at another.
        let a = QuicKeys::from_secret(SECRET).unwrap().token_key();
        let b = QuicKeys::from_secret(SECRET).unwrap().token_key();
        let mut sealed = b"retry token".to_vec();
        a.aead_from_hkdf(b"random").seal(&mut sealed, b"").unwrap();
        let opened = b
            .aead_from_hkdf(b"random")
            .open(&mut sealed, b"")
            .unwrap()
            .to_vec();
        assert_eq!(opened, b"retry token");
    }
}
