//! `teapot webhook`: the LB cluster's ValidatingWebhook (docs/architecture.md,
//! "Security rules that shape the code").
//!
//! It answers `AdmissionReview` v1 for Ingress, Service, EndpointSlice and
//! Secret in tenant namespaces (and for `Tenant` objects), by the
//! allowlist rules of [`teapot_api::admission`], listing every violation with
//! its field in one `status.message`. It never executes, renders or loads
//! anything derived from a request; a request it cannot read is refused
//! (fail closed), and so is every request before it knows its tenants.
//!
//! Layout:
//! - [`state`]: what the rules need to know about the LB cluster (Tenants,
//!   who holds which host and network, object counts), built from the
//!   proxy's [`Store`](teapot_model::store::Store).
//! - [`source`]: fills the state from a manifests directory (the proxy's
//!   loader), reloaded when it changes, or from the Kubernetes watch of
//!   the LB cluster (`teapot_source::kube`).
//! - [`review`]: the validator: AdmissionReview JSON in, AdmissionReview
//!   JSON out; kind and namespace dispatch, the Secret key check.
//! - [`pool`]: where reviews are judged: a bounded pool of blocking
//!   threads with a share per tenant, so one tenant's costly reviews never
//!   delay another's.
//! - [`offline`]: the same rules over files (`teapot validate`).
//! - [`certs`]: the serving certificate, reloaded when its files change.
//! - [`server`]: the HTTPS server (`/validate`, `/healthz`, `/readyz`,
//!   `/metrics`) and [`run`].
//! - [`metrics`]: the Prometheus registry.
//!
//! The test corpus (`tests/corpus/{deny,allow}/*.yaml` with the LB-cluster
//! state in `tests/corpus/state/`) is data, so the proxy's
//! defence-in-depth tests read the same files; see [`corpus_dir`].

pub mod certs;
pub mod metrics;
pub mod offline;
pub mod pool;
pub mod review;
pub mod server;
pub mod source;
pub mod state;

mod error;

use std::path::PathBuf;

pub use error::Error;
pub use pool::{PoolConfig, ReviewPool};
pub use review::{Validator, Verdict};
pub use server::{WebhookConfig, run};
pub use state::{PolicyConfig, PolicyState};

/// The corpus of malicious and valid objects: `deny/`, `allow/` and the
/// LB-cluster `state/` they are judged against (domain `example.net`,
/// LB ranges `10.96.0.0/12` and `192.168.100.0/24`). Other crates' tests
/// find it at `../webhook/tests/corpus` from their own manifest directory.
pub fn corpus_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus"))
}

#[cfg(test)]
mod tests {
    /// The tenant-facing README documents every allowed annotation.
    #[test]
    fn readme_lists_every_annotation() {
        let readme = include_str!("../README.md");
        for spec in teapot_api::annotations::ALLOWLIST {
            let row = format!("| `{}` |", spec.key);
            assert!(
                readme.contains(&row),
                "README.md lacks a row for {}",
                spec.key
            );
            assert!(
                readme.contains(spec.doc),
                "README.md lacks the doc of {}",
                spec.key
            );
        }
    }
}
