//! The server's Prometheus series, registered into the caller's registry
//! (the proxy's `/metrics`).

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::answer::{RCODES, Transport};

#[derive(Clone, Debug)]
pub struct Metrics {
    /// Responses sent, by RCODE, transport and whether truncated.
    pub responses: IntCounterVec,
    /// UDP responses the rate limiter dropped or sent truncated.
    pub rate_limited: IntCounterVec,
    /// Datagrams and messages not answered at all, by why.
    pub dropped: IntCounterVec,
    /// Query and response bytes, by transport: their ratio is the
    /// amplification the server allows.
    pub bytes_in: IntCounterVec,
    pub bytes_out: IntCounterVec,
    /// TCP connections refused at accept or closed by the server, by why
    /// ([`TCP_CLOSE_REASONS`]).
    pub tcp_closed: IntCounterVec,
    /// TCP connections being served.
    pub tcp_connections: IntGauge,
    /// Passes of the loop that keeps the zone current (its owner's, the
    /// proxy's `loops::dns_zone`), and the zones it built.
    pub zone_passes: IntCounter,
    pub zone_builds: IntCounter,
}

/// Why the server refused or closed a TCP connection: `prefix_share` (the
/// client's prefix holds its share of the slots), `full` (every slot busy
/// answering, none idle to take), `evicted` (the oldest idle connection,
/// closed to admit a new one), `write_timeout` (the client did not read
/// its answer), `lifetime`, `idle` (no complete query in time).
pub const TCP_CLOSE_REASONS: [&str; 6] = [
    "prefix_share",
    "full",
    "evicted",
    "write_timeout",
    "lifetime",
    "idle",
];

impl Metrics {
    /// Series not registered anywhere yet (see [`Metrics::register`]).
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let m = Metrics {
            responses: IntCounterVec::new(
                Opts::new("dns_responses_total", "DNS responses sent, by RCODE"),
                &["rcode", "transport", "truncated"],
            )?,
            rate_limited: IntCounterVec::new(
                Opts::new(
                    "dns_rate_limited_total",
                    "DNS UDP responses over the rate limit, by action (drop, slip)",
                ),
                &["action"],
            )?,
            dropped: IntCounterVec::new(
                Opts::new("dns_dropped_total", "DNS messages not answered, by reason"),
                &["reason"],
            )?,
            bytes_in: IntCounterVec::new(
                Opts::new("dns_query_bytes_total", "DNS query bytes received"),
                &["transport"],
            )?,
            bytes_out: IntCounterVec::new(
                Opts::new("dns_response_bytes_total", "DNS response bytes sent"),
                &["transport"],
            )?,
            tcp_closed: IntCounterVec::new(
                Opts::new(
                    "dns_tcp_closed_total",
                    "DNS TCP connections refused or closed by the server, by reason",
                ),
                &["reason"],
            )?,
            tcp_connections: IntGauge::new(
                "dns_tcp_connections",
                "DNS TCP connections being served",
            )?,
            zone_passes: IntCounter::new(
                "dns_zone_passes_total",
                "Passes of the DNS zone loop (at rest: one per DNS Lease renewal seen, none without Leases)",
            )?,
            zone_builds: IntCounter::new("dns_zone_builds_total", "DNS zones built")?,
        };
        for rcode in RCODES {
            for t in [Transport::Udp, Transport::Tcp] {
                m.responses
                    .with_label_values(&[rcode, t.as_str(), "false"])
                    .reset();
            }
        }
        for action in ["drop", "slip"] {
            m.rate_limited.with_label_values(&[action]).reset();
        }
        for reason in TCP_CLOSE_REASONS {
            m.tcp_closed.with_label_values(&[reason]).reset();
        }
        Ok(m)
    }

    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.responses.clone()))?;
        registry.register(Box::new(self.rate_limited.clone()))?;
        registry.register(Box::new(self.dropped.clone()))?;
        registry.register(Box::new(self.bytes_in.clone()))?;
        registry.register(Box::new(self.bytes_out.clone()))?;
        registry.register(Box::new(self.tcp_closed.clone()))?;
        registry.register(Box::new(self.tcp_connections.clone()))?;
        registry.register(Box::new(self.zone_passes.clone()))?;
        registry.register(Box::new(self.zone_builds.clone()))?;
        Ok(())
    }

    pub(crate) fn count(&self, rcode: &str, transport: Transport, truncated: bool) {
        self.counter(rcode, transport, truncated).inc();
    }

    /// The responses counter of one (rcode, transport, truncated).
    pub(crate) fn counter(
        &self,
        rcode: &str,
        transport: Transport,
        truncated: bool,
    ) -> prometheus::IntCounter {
        let truncated = if truncated { "true" } else { "false" };
        self.responses
            .with_label_values(&[rcode, transport.as_str(), truncated])
    }
}
