//! The crate's error type, below every module that returns it.

/// Why the DNS server could not start or a zone could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("DNS listener {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("DNS name {name:?}: {reason}")]
    Name { name: String, reason: String },
    #[error("DNS zone: {0}")]
    Zone(String),
    #[error("DNS listener: {0}")]
    Io(#[from] std::io::Error),
}
