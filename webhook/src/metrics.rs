//! Prometheus metrics of the webhook (prefix `teapot_webhook_`).

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Every metric the webhook exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// Reviews by kind and result (`allowed`, `denied`).
    pub admissions: IntCounterVec,
    pub admission_seconds: Histogram,
    /// Reviews refused because no worker was free within the wait, by
    /// reason (`tenant_share`, `pool`).
    pub busy: IntCounterVec,
    pub tenants: IntGauge,
    pub manifest_problems: IntGauge,
    pub state_reloads: IntCounter,
    pub cert_reloads: IntCounter,
    pub cert_reload_failures: IntCounter,
}

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new_custom(Some("teapot_webhook".into()), None)?;
        let admissions = IntCounterVec::new(
            Opts::new(
                "admissions_total",
                "AdmissionReviews answered, by kind and result",
            ),
            &["kind", "result"],
        )?;
        let admission_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "admission_seconds",
                "Time from a complete request body to the answer",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5,
            ]),
        )?;
        let busy = IntCounterVec::new(
            Opts::new(
                "reviews_busy_total",
                "AdmissionReviews refused (429) because no review worker was free within the wait, by reason",
            ),
            &["reason"],
        )?;
        let m = Metrics {
            admissions,
            admission_seconds,
            busy,
            tenants: IntGauge::new("tenants", "Tenants known")?,
            manifest_problems: IntGauge::new(
                "manifest_problems",
                "Documents skipped in the last state load",
            )?,
            state_reloads: IntCounter::new("state_reloads_total", "Tenant state loads")?,
            cert_reloads: IntCounter::new(
                "certificate_reloads_total",
                "Serving certificates swapped in after their files changed",
            )?,
            cert_reload_failures: IntCounter::new(
                "certificate_reload_failures_total",
                "Changed certificate files that could not be used",
            )?,
            registry,
        };
        m.registry.register(Box::new(m.admissions.clone()))?;
        m.registry.register(Box::new(m.admission_seconds.clone()))?;
        m.registry.register(Box::new(m.busy.clone()))?;
        m.registry.register(Box::new(m.tenants.clone()))?;
        m.registry.register(Box::new(m.manifest_problems.clone()))?;
        m.registry.register(Box::new(m.state_reloads.clone()))?;
        m.registry.register(Box::new(m.cert_reloads.clone()))?;
        m.registry
            .register(Box::new(m.cert_reload_failures.clone()))?;
        Ok(m)
    }

    /// Counts one answer.
    pub fn admitted(&self, kind: &str, allowed: bool, seconds: f64) {
        let result = if allowed { "allowed" } else { "denied" };
        self.admissions.with_label_values(&[kind, result]).inc();
        self.admission_seconds.observe(seconds);
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}
