//! Prometheus metrics. Counters used on the request path are resolved to
//! concrete children once, so the hot path does no label lookup.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Every metric the proxy exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// Responses by status class, index 0 = `1xx` .. 4 = `5xx`.
    responses: [IntCounter; 5],
    pub upstream_latency: Histogram,
    pub upstream_connect_failures: IntCounter,
    pub snapshot_generation: IntGauge,
    pub compile_seconds: Histogram,
    pub routes: IntGauge,
    pub manifest_problems: IntGauge,
    pub reloads_total: IntCounter,
    pub in_flight: IntGauge,
    /// ACME hosts by state: pending, issued, expiring, failed.
    pub acme_certificates: IntGaugeVec,
    pub acme_orders: IntCounter,
    pub acme_issued: IntCounter,
    pub acme_failures: IntCounter,
    /// 1 while this replica holds the fleet's ACME issuer role.
    pub acme_issuer: IntGauge,
    /// ACME orders by the namespace that asked and their result (issued,
    /// failed, rate_limited): which tenant spends the shared account.
    pub acme_tenant_orders: IntCounterVec,
    /// 1 while a namespace's orders are paused (rate limit, Retry-After)
    /// or its weekly budget of new names is spent.
    pub acme_tenant_held: IntGaugeVec,
    /// Front-door refusals by reason (`crate::plane::edge::Refusal`), resolved
    /// once so a refusal does no label lookup.
    edge_refusals: Vec<IntCounter>,
    /// Requests whose client went away before the answer (not logged).
    pub client_aborts: IntCounter,
    /// Library log lines held back by crate::plane::logflood.
    pub log_lines_suppressed: IntCounter,
    pub l4: crate::plane::l4::L4Metrics,
}

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new_custom(Some("teapot".into()), None)?;
        let by_class = IntCounterVec::new(
            Opts::new(
                "http_responses_total",
                "HTTP responses sent, by status class",
            ),
            &["class"],
        )?;
        registry.register(Box::new(by_class.clone()))?;
        let responses =
            ["1xx", "2xx", "3xx", "4xx", "5xx"].map(|c| by_class.with_label_values(&[c]));
        let upstream_latency = Histogram::with_opts(
            HistogramOpts::new(
                "upstream_response_seconds",
                "Time from choosing an upstream to its response header",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ]),
        )?;
        let compile_seconds = Histogram::with_opts(
            HistogramOpts::new("snapshot_compile_seconds", "Time to compile a snapshot").buckets(
                vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0],
            ),
        )?;
        let refusals = IntCounterVec::new(
            Opts::new(
                "edge_refusals_total",
                "Requests and connections refused at the front door, by reason",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(refusals.clone()))?;
        let edge_refusals = crate::plane::edge::Refusal::ALL
            .iter()
            .map(|r| refusals.with_label_values(&[r.label()]))
            .collect();
        let m = Metrics {
            edge_refusals,
            responses,
            upstream_latency,
            upstream_connect_failures: IntCounter::new(
                "upstream_connect_failures_total",
                "Upstream connections that failed (the endpoint is ejected for a while)",
            )?,
            snapshot_generation: IntGauge::new(
                "snapshot_generation",
                "Generation of the snapshot being served",
            )?,
            compile_seconds,
            routes: IntGauge::new("routes", "Host/path routes in the served snapshot")?,
            manifest_problems: IntGauge::new(
                "manifest_problems",
                "Documents skipped in the last load because they did not parse or validate",
            )?,
            reloads_total: IntCounter::new("reloads_total", "Snapshots compiled and swapped in")?,
            in_flight: IntGauge::new("requests_in_flight", "Requests being served")?,
            acme_certificates: IntGaugeVec::new(
                Opts::new(
                    "acme_certificates",
                    "Hosts served with ACME certificates, by state (pending, issued, expiring, failed)",
                ),
                &["state"],
            )?,
            acme_orders: IntCounter::new(
                "acme_orders_total",
                "ACME orders started by this replica",
            )?,
            acme_issued: IntCounter::new(
                "acme_issued_total",
                "Certificates this replica obtained from ACME and stored",
            )?,
            acme_failures: IntCounter::new(
                "acme_failures_total",
                "ACME orders of this replica that failed (retried with backoff)",
            )?,
            acme_issuer: IntGauge::new(
                "acme_issuer",
                "1 while this replica is the fleet's ACME issuer",
            )?,
            acme_tenant_orders: IntCounterVec::new(
                Opts::new(
                    "acme_tenant_orders_total",
                    "ACME orders of the issuer by namespace and result (issued, failed, rate_limited)",
                ),
                &["namespace", "result"],
            )?,
            acme_tenant_held: IntGaugeVec::new(
                Opts::new(
                    "acme_tenant_held",
                    "1 while a namespace's ACME orders wait: paused by the CA (reason=paused) or over its weekly budget of new names (reason=budget)",
                ),
                &["namespace", "reason"],
            )?,
            client_aborts: IntCounter::new(
                "client_aborts_total",
                "Requests whose client closed the connection before the answer was written (not logged)",
            )?,
            log_lines_suppressed: IntCounter::new(
                "log_lines_suppressed_total",
                "Pingora/h2 log lines about client errors held back by the log-flood protection",
            )?,
            l4: crate::plane::l4::L4Metrics::register(&registry)?,
            registry,
        };
        m.registry.register(Box::new(m.upstream_latency.clone()))?;
        m.registry
            .register(Box::new(m.upstream_connect_failures.clone()))?;
        m.registry
            .register(Box::new(m.snapshot_generation.clone()))?;
        m.registry.register(Box::new(m.compile_seconds.clone()))?;
        m.registry.register(Box::new(m.routes.clone()))?;
        m.registry.register(Box::new(m.manifest_problems.clone()))?;
        m.registry.register(Box::new(m.reloads_total.clone()))?;
        m.registry.register(Box::new(m.in_flight.clone()))?;
        m.registry.register(Box::new(m.client_aborts.clone()))?;
        m.registry.register(Box::new(m.acme_certificates.clone()))?;
        m.registry.register(Box::new(m.acme_orders.clone()))?;
        m.registry.register(Box::new(m.acme_issued.clone()))?;
        m.registry.register(Box::new(m.acme_failures.clone()))?;
        m.registry.register(Box::new(m.acme_issuer.clone()))?;
        m.registry
            .register(Box::new(m.acme_tenant_orders.clone()))?;
        m.registry.register(Box::new(m.acme_tenant_held.clone()))?;
        m.registry
            .register(Box::new(m.log_lines_suppressed.clone()))?;
        Ok(m)
    }

    /// Counts one response by its status code.
    pub fn count_response(&self, status: u16) {
        if let Some(c) = (status / 100)
            .checked_sub(1)
            .and_then(|i| self.responses.get(i as usize))
        {
            c.inc();
        }
    }

    /// Counts one front-door refusal.
    pub fn refused(&self, reason: crate::plane::edge::Refusal) {
        if let Some(c) = self.edge_refusals.get(reason as usize) {
            c.inc();
        }
    }

    /// Counts a request as in flight until the guard drops: what graceful
    /// shutdown waits on.
    pub fn request_started(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// One request in flight; uncounted on drop.
#[derive(Debug)]
pub struct InFlight(IntGauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_response_classes() {
        let m = Metrics::new().unwrap();
        m.count_response(204);
        m.count_response(503);
        m.count_response(0);
        let text = m.render();
        assert!(
            text.contains("teapot_http_responses_total{class=\"2xx\"} 1"),
            "{text}"
        );
        assert!(text.contains("teapot_http_responses_total{class=\"5xx\"} 1"));
        assert!(text.contains("teapot_snapshot_generation 0"));
    }
}
