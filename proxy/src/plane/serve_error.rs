//! Why the serving threads could not start: the request plane's own
//! error, below the server that turns it into the process's
//! (`crate::Error` wraps it), so the plane names nothing of the loops.

use std::io;

/// A serving thread's socket, TLS listener or runtime could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Another member of an address's `SO_REUSEPORT` group.
    #[error("cannot bind {what} listener {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: String,
        source: io::Error,
    },
    /// The HTTPS listener's TLS settings.
    #[error("TLS listener setup: {0}")]
    Tls(String),
    /// A socket option, a thread or its runtime.
    #[error("serving threads: {0}")]
    Io(#[from] io::Error),
}
