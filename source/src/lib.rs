//! Where the LB cluster's objects come from: the Kubernetes watch
//! ([`kube`]) or a manifests directory ([`dir`] watches it; the loader is
//! `teapot_model::manifests`). Both end in a `teapot_model` Store.
//!
//! The proxy's reload loop and the admission webhook both read objects
//! this way; neither part here links Pingora (docs/architecture.md).
//!
//! Layout:
//! - [`kube`]: one watcher per kind, each object through the model's typed
//!   parse and validation, change notifications coalesced.
//! - [`dir`]: inotify plus a polling safety net over a directory.

pub mod dir;
pub mod kube;

/// Why a source could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes: {0}")]
    Kube(String),
}
