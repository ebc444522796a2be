//! Dev-only helpers shared by the proxy's integration tests, the conformance
//! runner and `teapot demo`.
//!
//! Nothing here is hardened for production: the helpers favour loud failures
//! and predictable behaviour over robustness, and they bind loopback only.
//!
//! # Layout
//!
//! - [`admission`]: AdmissionReview v1 request bodies for webhook tests and
//!   benchmarks.
//! - [`echo`]: the conformance suite's echo backend (HTTP/1.1, HTTP/2 cleartext,
//!   WebSocket), plus test hooks for delays and status codes; the product
//!   crate `teapot-echo`, re-exported.
//! - [`apiserver`]: an in-process Kubernetes API double behind a real
//!   `kube::Client` (and a kubeconfig file for child processes).
//! - [`certs`]: self-signed certificates and `kubernetes.io/tls` Secret
//!   manifests (from `teapot-echo`, which the demo uses), a small test CA and
//!   a SAN check.
//! - [`client`]: an HTTP/1.1 + HTTP/2 client over plain TCP or TLS with a chosen
//!   SNI that reports what the server presented, raw byte exchanges for framing
//!   tests, and a WebSocket echo client.
//! - [`h2frames`]: hand-built HTTP/2 frames and HPACK lengths.
//! - [`pebble`]: Debian's `pebble` ACME test CA and `pebble-challtestsrv`
//!   DNS server, on free ports, stoppable for outage tests.
//! - [`l4`]: TCP and UDP echo backends (PROXY v2 aware) for L4 tests.
//! - [`procfs`]: a process's resident memory and CPU time, from `/proc`.
//! - [`process`]: launches a `teapot proxy` child process and talks to its admin
//!   listener.
//! - [`Error`]: the one error type of the crate.

pub mod admission;
pub mod apiserver;
pub mod certs;
pub mod client;
pub mod echo;
pub mod h2frames;
pub mod l4;
pub mod pebble;
pub mod process;
pub mod procfs;

/// Everything that can go wrong in the helpers.
///
/// Certificate generation and the echo server are not here: the first panics
/// (a test cannot continue without its certificate), the second reports plain
/// [`std::io::Error`]s like the socket APIs it wraps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Connecting, reading, writing or spawning failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The TLS handshake or TLS configuration failed (includes certificate rejection).
    #[error("tls: {0}")]
    Tls(#[from] rustls::Error),
    /// The HTTP exchange failed, e.g. the connection was closed.
    #[error("http: {0}")]
    Http(#[from] hyper::Error),
    /// The WebSocket handshake or a frame exchange failed.
    #[error("websocket: {0}")]
    WebSocket(#[from] tokio_tungstenite::tungstenite::Error),
    /// A body that should have been JSON was not.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// The request could not be built (bad method, target, header or SNI).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Something did not happen in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The proxy child process misbehaved (exited early, printed no listening line, ...).
    #[error("proxy process: {0}")]
    Process(String),
}
