/// Errors that stop the proxy from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("manifests directory {path}: {source}")]
    Manifests {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot bind {what} listener {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: String,
        source: std::io::Error,
    },
    #[error("TLS setup: {0}")]
    Tls(#[from] teapot_model::certificate::TlsError),
    #[error(transparent)]
    Serve(#[from] crate::plane::ServeError),
    #[error("watching {path}: {source}")]
    Watch {
        path: std::path::PathBuf,
        source: notify::Error,
    },
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error(transparent)]
    Acme(#[from] crate::loops::acme::AcmeError),
    #[error("kubernetes: {0}")]
    Kube(String),
    #[error(transparent)]
    Dns(#[from] teapot_dns::Error),
    #[error(transparent)]
    L4State(#[from] crate::loops::allocations::StateError),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}
