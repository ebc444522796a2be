/// What stops the webhook from starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("certificate: {0}")]
    Certificate(String),
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}
