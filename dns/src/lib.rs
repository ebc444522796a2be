//! teapot's authoritative DNS server for `lb.DOMAIN`: the fleet answers
//! for the names it serves (docs/dns.md).
//!
//! It knows nothing of Kubernetes or of the proxy: it serves a [`Zone`]
//! value that its owner builds whole or edits, and swaps (the proxy's
//! `loops::dns_zone` builds it from the compiled routes, the addresses
//! that serve them and the ACME DNS-01 challenges).
//!
//! Layout:
//! - [`zone`]: [`ZoneSettings`] (origin, name servers, TTLs, CAA), the
//!   [`ZoneBuilder`] and the immutable [`Zone`], whose SOA serial is a hash
//!   of its content (the same on every replica for the same state); a
//!   [`ZoneEdit`] makes the next zone from one by the names that changed.
//! - `names`: the zone's tables, sharded, each shard shared by the zones
//!   an edit made from one another until one of them changes it.
//! - [`answer`]: the query path, bytes to bytes: REFUSED outside the zone,
//!   NXDOMAIN with the negative-caching SOA, NODATA, RFC 8482 ANY,
//!   truncation for UDP. The fuzz target drives it.
//! - [`rrl`]: response rate limiting per client prefix and name, and a
//!   byte budget per prefix, with slip.
//! - [`server`]: the UDP and TCP listeners ([`run`]) and their limits.
//! - [`metrics`]: the Prometheus series.
//! - `error`: [`Error`], why the server could not start or a zone could
//!   not be built, below the modules that return it.
//! - [`escape`]: query names and peer text made safe to log.

pub mod answer;
mod error;
pub mod escape;
pub mod metrics;
mod names;
pub mod rrl;
pub mod server;
pub mod zone;

pub use answer::{Transport, respond};
pub use error::Error;
pub use metrics::Metrics;
pub use rrl::RateLimit;
pub use server::{ServerConfig, Sockets, ZoneHandle, run};
pub use zone::{Zone, ZoneBuilder, ZoneEdit, ZoneSettings};
