//! teapot's data plane.
//!
//! Objects flow one way: a source (the manifests directory, or the
//! Kubernetes watch) fills a [`store::Store`], [`compile::compile`]
//! turns it into an immutable [`snapshot::Snapshot`], and the snapshot is
//! swapped in with `arc-swap`. The Pingora proxy and the TLS resolver only
//! ever read the current snapshot.
//!
//! Layout:
//! - [`kube_source`]: the Kubernetes watch source (production), feeding
//!   the same store through the same validation.
//! - [`kube_status`]: writes Ingress status in kube mode, from one replica
//!   (a Lease).
//! - [`manifests`]: reads a directory of YAML into a store, keeping the last
//!   good version of objects that stop parsing.
//! - [`validate`]: typed parsing and API-server-like validation, per field.
//! - [`store`]: the objects, keyed as the API server keys them.
//! - [`compile`]: store -> route table, certificate table, status report.
//! - [`routes`]: host and path matching (DESIGN.md "Ingress semantics").
//! - [`upstream`]: endpoints, round-robin, passive ejection.
//! - [`tls`]: certificates from Secrets and the SNI resolver.
//! - [`l4`]: TCP and UDP load balancing for `LoadBalancer` Services.
//! - [`snapshot`]: what is swapped, and the status report.
//! - [`reload`]: the directory watcher that recompiles on change.
//! - [`proxy`]: the Pingora `ProxyHttp` implementation.
//! - [`edge`]: front-door checks (HTTP/1 framing, Host) and limits
//!   (sizes, header-read deadline, connection caps); docs/edge.md.
//! - [`acme`]: certificates from ACME (HTTP-01), one issuer per fleet.
//! - [`admin`]: `/healthz`, `/readyz`, `/metrics`, `/status`.
//! - [`metrics`]: the Prometheus registry.
//! - [`server`]: [`server::run`], wiring it all to listeners and shutdown.

pub mod acme;
pub mod admin;
pub mod compile;
pub mod edge;
pub mod fairness;
pub mod kube_source;
pub mod kube_status;
pub mod l4;
pub mod logflood;
pub mod manifests;
pub mod metrics;
pub mod proof;
pub mod proxy;
pub mod reload;
pub mod routes;
pub mod server;
pub mod snapshot;
pub mod store;
pub mod tenancy;
pub mod tls;
pub mod upstream;
pub mod validate;

mod error;

pub use error::Error;
pub use server::{Listeners, ProxyConfig, run};
