//! teapot's data plane, in three parts that depend one way
//! (docs/architecture.md):
//!
//! - [`compile`]: pure. A `teapot_model` Store plus plain inputs (ACME
//!   states, domain proofs, the previous L4 holdings, all as data) become
//!   an immutable [`compile::snapshot::Snapshot`] and its status report. No
//!   I/O, no clock-driven state, no pruning.
//! - [`live`]: state that outlives snapshots and changes while serving
//!   (endpoint health, tenant gates, rate tables, upstream TLS sessions):
//!   the compile interns it, the request path updates it.
//! - [`plane`]: the request path. Pingora's listeners and TLS, the HTTP/1
//!   and HTTP/2 engines over one request pipeline, the front-door edge, the SNI resolver, the L4 listeners, metrics and the
//!   admin endpoint. It only ever reads the current snapshot.
//! - [`loops`]: the long-running tasks that own state: the reload loop
//!   (the one place a compile is triggered), the Kubernetes status writer,
//!   the ACME issuer, the DNS domain prover and the L4 allocations' memory.
//!
//! Arrows run model <- live <- compile <- plane <- loops: `compile` imports neither
//! `plane` nor `loops`, `plane` does not import `loops`
//! (`teapot/tests/architecture.rs` fails on a wrong-way import). [`server`] is the
//! composition root that wires them to listeners and shutdown.

pub mod compile;
pub mod live;
pub mod loops;
pub mod plane;
pub mod server;

mod error;

pub use error::Error;
pub use server::{Listeners, ObserveConfig, ProxyConfig, run};
