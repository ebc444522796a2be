//! The request path: everything that runs per connection or request, and
//! reads only the current snapshot.
//!
//! Layout:
//! - [`proxy`]: the [`proxy::Router`] both engines route with.
//! - [`pipeline`]: the steps around the routing decision ([`decide`]),
//!   written once for both engines: Host rules, 421, ACME HTTP-01, the
//!   decision, the Gateway filters' mirrors and rewrites;
//!   [`forwarding`]: the forwarding fields every forwarded request gets;
//!   [`traffic`]: a route's traffic policy (allow-lists, rate limits,
//!   redirects, CORS) after the decision.
//! - [`h1`]: HTTP/1 through teapot's engine (`teapot_h1`), over the
//!   router and the pipeline.
//! - [`h2`]: HTTP/2 through teapot's server on the h2 crate, over the same
//!   router and pipeline; its backends are HTTP/1 ([`h2_upstream`], with
//!   the `h1` crate's framing rules) or h2c ([`h2c_upstream`]); what a
//!   stream is to all three (its halves, its state, how it fails) is
//!   [`h2_stream`], below them.
//! - [`h3`]: HTTP/3 on quinn and h3 (`--http3`), its streams handed to
//!   the same pipeline and backend paths as HTTP/2 streams, through
//!   [`h2_stream`]'s `Client`; an endpoint on every serving thread, the
//!   kernel steering each packet to its connection's thread
//!   ([`quic_threads`]); the fleet's keys ([`quic_keys`]).
//! - [`filters`]: the Gateway API filters as pure functions (rewrites,
//!   redirects, header edits, mirrors), for both engines; [`mirror`]
//!   sends RequestMirror copies within per-namespace slots.
//! - [`accept`]: where connections enter: connection caps, then HTTP/2 to
//!   [`h2`] and the rest to [`h1`].
//! - [`edge`]: front-door checks (HTTP/1 framing, Host) and limits (sizes,
//!   header-read deadline, connection caps): pure rules, below the engines
//!   and the decision; docs/edge.md.
//! - [`tls`]: the SNI certificate resolver.
//! - [`l4`]: TCP and UDP listeners for LoadBalancer Services.
//! - [`admin`]: `/healthz`, `/readyz`, `/metrics`, `/status`.
//! - [`metrics`]: the Prometheus registry, with per-tenant request series.
//! - [`backend_answer`]: a backend's HTTP/1.1 answer read into `http`
//!   types by the HTTP/1 engine's rules, for the HTTP/2 server's HTTP/1
//!   backends and the sub-requests alike.
//! - [`access_log`]: one line per request and L4 connection, written off
//!   the request path; [`trace`]: `X-Request-Id` and `traceparent`.
//! - [`logflood`]: holding back a client's flood of library log lines.
//! - [`serving`]: the serving threads, one per core, and their sockets
//!   (each a member of its address's `SO_REUSEPORT` group: `socket_group`);
//!   [`ServeError`], why they could not start (the server wraps it in
//!   the process's error).
//!
//! ACME is a loop (`crate::loops::acme`); the plane reaches it only through
//! [`AcmeResponder`], so nothing here depends on the issuer.

pub mod accept;
pub mod access_log;
pub mod admin;
pub mod alt_svc;
pub mod backend_answer;
mod buffering_h2;
pub mod client_cert;
pub mod decide;
pub mod edge;
pub mod filters;
pub mod forwarding;
pub mod h1;
pub mod h2;
pub mod h2_stream;
pub mod h2_upstream;
pub mod h2c_upstream;
pub mod h3;
mod h3_stream;
pub mod l4;
pub mod logflood;
pub mod metrics;
pub mod mirror;
pub mod passthrough;
pub mod pipeline;
pub mod proxy;
pub mod quic_keys;
pub mod quic_threads;
mod serve_error;
pub mod serving;
mod socket_group;
pub mod tls;
pub mod trace;
pub mod traffic;

use std::sync::Arc;

use rustls::sign::CertifiedKey;

use crate::compile::acme::AcmeHosts;
pub use serve_error::ServeError;

/// What the request path asks of ACME: HTTP-01 challenge answers and
/// issued certificates, both read live (a token must answer the moment the
/// CA asks, a new certificate serves at the next handshake).
#[async_trait::async_trait]
pub trait AcmeResponder: Send + Sync + std::fmt::Debug {
    /// The key authorization for `token`, when a challenge is pending.
    async fn challenge_response(&self, token: &str) -> Option<String>;

    /// The ACME certificate for exactly `server_name`, if `hosts` (the
    /// current snapshot's) still lists that host. Never another host's.
    fn certificate(&self, hosts: &AcmeHosts, server_name: &str) -> Option<Arc<CertifiedKey>>;
}
