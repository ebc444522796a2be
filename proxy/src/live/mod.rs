//! State that outlives snapshots and changes while teapot serves: what the
//! request path counts and learns, kept across reloads so that a reload
//! neither forgets nor doubles it. A compile interns these (the same
//! `Arc` for the same endpoint, tenant or settings) and the request path
//! updates them; the reload loop prunes what no snapshot holds any more.
//! This is the clock-driven state the compile itself does not have.
//!
//! Layout:
//! - [`endpoints`]: endpoint health (passive ejection) and the registry
//!   that shares it, and the upstream TLS configurations, across compiles.
//! - [`upstream_tls`]: how teapot speaks TLS to an upstream (settings,
//!   verification, session resumption).
//! - [`fairness`]: per-tenant gates (request rate, connections busy).
//! - [`rate_table`]: per-client rate limits and in-flight counts, and the
//!   external-authentication gates.
//! - [`latency`]: each endpoint's decayed response latency, for
//!   `load-balance: ewma`.
//! - [`basic_auth`]: basic authentication's verified credentials, failure
//!   counts and hashing pool, per owner.
//! - [`global_counts`]: `global-rate-limit`'s counts per route, key and
//!   window, with those the fleet's other replicas report.
//!
//! Imports none of `compile`, `plane` or `loops`
//! (`teapot/tests/architecture.rs`).

pub mod basic_auth;
pub mod buffers;
pub mod endpoints;
pub mod fairness;
pub mod global_counts;
pub mod latency;
pub mod rate_table;
pub mod upstream_tls;
