//! Prometheus metrics. Counters used on the request path are resolved to
//! concrete children once, so the hot path does no label lookup.

use std::cell::RefCell;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hashbrown::HashTable;
use parking_lot::RwLock;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Buckets of the request and upstream latency histograms (seconds).
const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

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
    /// notAfter (Unix seconds) of each Secret certificate the snapshot
    /// serves, by `secret` = `namespace/name`.
    pub certificate_not_after: IntGaugeVec,
    pub manifest_problems: IntGauge,
    pub reloads_total: IntCounter,
    /// EndpointSlice changes stored into the live endpoint sets without a
    /// compile (crate::compile::endpoint_sets).
    pub endpoint_updates_total: IntCounter,
    /// Reloads that failed (the compile panicked); the previous snapshot
    /// kept serving.
    pub reload_failures_total: IntCounter,
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
    /// Access-log lines dropped because the writer's queue was full.
    pub access_log_dropped: IntCounter,
    /// Gateway API RequestMirror copies not sent, by the mirror backend's
    /// namespace and why (crate::plane::mirror::Full).
    pub mirrors_dropped: IntCounterVec,
    /// External authentication sub-requests (`auth-url`) by tenant and
    /// outcome (crate::plane::traffic::auth::Outcome); `busy` counts the
    /// requests refused with 503 because the tenant's bound was full.
    pub auth_requests: IntCounterVec,
    /// Requests a route's traffic policy answered itself.
    pub policy_answers: IntCounterVec,
    /// TLS handshakes of hosts with a client-certificate setting, by
    /// outcome and reason (crate::plane::client_cert).
    pub client_cert_handshakes: IntCounterVec,
    pub l4: crate::plane::l4::L4Metrics,
    /// Request series by tenant (and by route, when switched on).
    pub series: Arc<SeriesBook>,
}

impl Metrics {
    /// The registry `/metrics` serves, for series other crates own (the
    /// DNS server's).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

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
            .buckets(LATENCY_BUCKETS.to_vec()),
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
            endpoint_updates_total: IntCounter::new(
                "endpoint_updates_total",
                "EndpointSlice changes applied to the live endpoint sets without a compile",
            )?,
            reload_failures_total: IntCounter::new(
                "reload_failures_total",
                "Reloads that failed; the previous snapshot kept serving",
            )?,
            in_flight: IntGauge::new("requests_in_flight", "Requests being served")?,
            certificate_not_after: IntGaugeVec::new(
                Opts::new(
                    "certificate_not_after_seconds",
                    "Expiry (notAfter, Unix seconds) of each kubernetes.io/tls Secret serving a host",
                ),
                &["secret"],
            )?,
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
            access_log_dropped: IntCounter::new(
                "access_log_dropped_total",
                "Access-log lines dropped because the writer fell behind (the request was not held)",
            )?,
            mirrors_dropped: IntCounterVec::new(
                Opts::new(
                    "mirror_dropped_total",
                    "Gateway API RequestMirror copies not sent because too many mirrors were in flight (the request was not held), by the mirror backend's namespace and reason (namespace_share, process_cap)",
                ),
                &["namespace", "reason"],
            )?,
            auth_requests: IntCounterVec::new(
                Opts::new(
                    "auth_requests_total",
                    "External authentication sub-requests (auth-url) by tenant and outcome (allowed, unauthorized, forbidden, failed, timeout, unreachable; busy: answered 503, the tenant's bound full, nothing sent; refused: answered 503, the route's auth-url refused)",
                ),
                &["tenant", "outcome"],
            )?,
            policy_answers: IntCounterVec::new(
                Opts::new(
                    "policy_answers_total",
                    "Requests a route's traffic policy answered instead of forwarding, by tenant and reason (policy_denied 403, policy_rate_limited 429, policy_global_rate_limited 429, policy_in_flight_limited 503, policy_refused 503, redirect, cors_preflight, cors_preflight_refused, and the external authentication's answers)",
                ),
                &["tenant", "reason"],
            )?,
            client_cert_handshakes: IntCounterVec::new(
                Opts::new(
                    "client_cert_handshakes_total",
                    "TLS handshakes of hosts that ask for a client certificate, by outcome (verified; unverified: served or refused per request by the host's mode; refused: closed in the handshake) and reason (verified, none, expired, not yet valid, unknown issuer, chain too deep, chain too large, invalid purpose, bad certificate)",
                ),
                &["outcome", "reason"],
            )?,
            l4: crate::plane::l4::L4Metrics::register(&registry)?,
            series: Arc::new(SeriesBook::register(&registry)?),
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
        m.registry
            .register(Box::new(m.endpoint_updates_total.clone()))?;
        m.registry
            .register(Box::new(m.reload_failures_total.clone()))?;
        m.registry.register(Box::new(m.in_flight.clone()))?;
        m.registry.register(Box::new(m.client_aborts.clone()))?;
        m.registry.register(Box::new(m.acme_certificates.clone()))?;
        m.registry
            .register(Box::new(m.certificate_not_after.clone()))?;
        m.registry.register(Box::new(m.acme_orders.clone()))?;
        m.registry.register(Box::new(m.acme_issued.clone()))?;
        m.registry.register(Box::new(m.acme_failures.clone()))?;
        m.registry.register(Box::new(m.acme_issuer.clone()))?;
        m.registry
            .register(Box::new(m.acme_tenant_orders.clone()))?;
        m.registry.register(Box::new(m.acme_tenant_held.clone()))?;
        m.registry
            .register(Box::new(m.log_lines_suppressed.clone()))?;
        m.registry
            .register(Box::new(m.access_log_dropped.clone()))?;
        m.registry.register(Box::new(m.mirrors_dropped.clone()))?;
        m.registry.register(Box::new(m.auth_requests.clone()))?;
        m.registry.register(Box::new(m.policy_answers.clone()))?;
        m.registry
            .register(Box::new(m.client_cert_handshakes.clone()))?;
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

    /// Request series by route: per tenant always, per route too after
    /// this (`teapot proxy --metrics-per-route`). Set before serving:
    /// pairs already seen keep what they had.
    pub fn with_route_series(self, on: bool) -> Metrics {
        self.series.per_route.store(on, Ordering::Relaxed);
        self
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// Tenant label of requests on an operator namespace's routes (cluster
/// names are DNS labels, so no tenant can be called this).
pub const OPERATOR: &str = "_operator";
/// Tenant label of requests no route matched.
pub const UNROUTED: &str = "_unrouted";

/// Past this many (tenant, route) pairs the book starts over: a bound for
/// the time between reloads, which remove the pairs and series of routes
/// that are gone ([`SeriesBook::retain_routes`]). Series already exported
/// stay; only the lookup handles are rebuilt.
const MAX_BOOK_ENTRIES: usize = 200_000;

/// The per-tenant (and optionally per-route) request series, with their
/// label children resolved once per (tenant, route): a request does one
/// hash probe under a read lock, never a label lookup or an allocation.
#[derive(Debug)]
pub struct SeriesBook {
    requests: IntCounterVec,
    latency: HistogramVec,
    bytes: IntCounterVec,
    connect_failures: IntCounterVec,
    /// By tenant and route, made on a route's first failure: few routes
    /// speak TLS to their backends, fewer fail.
    tls_handshake_failures: IntCounterVec,
    route_requests: IntCounterVec,
    route_latency: HistogramVec,
    per_route: AtomicBool,
    hasher: foldhash::fast::FixedState,
    entries: RwLock<HashTable<Arc<Series>>>,
}

/// The series of one (tenant, route).
#[derive(Debug)]
pub struct Series {
    /// The tenant's cluster name, [`OPERATOR`] or [`UNROUTED`].
    pub tenant: Box<str>,
    /// The Ingress the route came from, `namespace/name`; empty
    /// when unrouted.
    pub route: Box<str>,
    /// `tenant` `\x1f` `route`: the engine's per-request tag when no
    /// request-specific field is added (crate::plane::h1).
    pub tag: Arc<str>,
    /// Requests by status class, index 0 = `1xx` .. 4 = `5xx`; 5: no
    /// status sent (the client went away first).
    requests: [IntCounter; 6],
    latency: Histogram,
    bytes_in: IntCounter,
    bytes_out: IntCounter,
    pub connect_failures: IntCounter,
    per_route: Option<RouteSeries>,
}

#[derive(Debug)]
struct RouteSeries {
    requests: [IntCounter; 6],
    latency: Histogram,
}

const CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "none"];

fn class_index(status: u16) -> usize {
    match status {
        100..=599 => usize::from(status / 100 - 1),
        _ => 5,
    }
}

impl SeriesBook {
    fn register(registry: &Registry) -> Result<SeriesBook, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new(
                "tenant_requests_total",
                "HTTP requests by tenant and status class (class=none: the client left before a status was sent)",
            ),
            &["tenant", "class"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "tenant_request_seconds",
                "Whole request time by tenant, first request byte to last response byte",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["tenant"],
        )?;
        let bytes = IntCounterVec::new(
            Opts::new(
                "tenant_bytes_total",
                "HTTP bytes by tenant and direction (in: from clients, out: to clients)",
            ),
            &["tenant", "direction"],
        )?;
        let connect_failures = IntCounterVec::new(
            Opts::new(
                "tenant_upstream_connect_failures_total",
                "Upstream connections that failed, by tenant",
            ),
            &["tenant"],
        )?;
        let tls_handshake_failures = IntCounterVec::new(
            Opts::new(
                "tenant_upstream_tls_handshake_failures_total",
                "TLS handshakes with backends that failed (backend-protocol HTTPS or GRPCS: a certificate refused, no common protocol), by tenant and route",
            ),
            &["tenant", "route"],
        )?;
        let route_requests = IntCounterVec::new(
            Opts::new(
                "route_requests_total",
                "HTTP requests by route (the Ingress, namespace/name) and status class; only with --metrics-per-route",
            ),
            &["tenant", "route", "class"],
        )?;
        let route_latency = HistogramVec::new(
            HistogramOpts::new(
                "route_request_seconds",
                "Whole request time by route; only with --metrics-per-route",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["tenant", "route"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(bytes.clone()))?;
        registry.register(Box::new(connect_failures.clone()))?;
        registry.register(Box::new(tls_handshake_failures.clone()))?;
        registry.register(Box::new(route_requests.clone()))?;
        registry.register(Box::new(route_latency.clone()))?;
        Ok(SeriesBook {
            requests,
            latency,
            bytes,
            connect_failures,
            tls_handshake_failures,
            route_requests,
            route_latency,
            per_route: AtomicBool::new(false),
            // Keys are tenant and route names from the snapshot, never
            // request input: a fixed seed is safe.
            hasher: foldhash::fast::FixedState::with_seed(0x7ea9),
            entries: RwLock::new(HashTable::new()),
        })
    }

    /// The series of `tenant` (a cluster name, `None` for an operator
    /// route) and `route`; `route` empty for a request no route matched.
    pub fn get(&self, tenant: Option<&str>, route: &str) -> Arc<Series> {
        let tenant = match (tenant, route.is_empty()) {
            (Some(t), _) => t,
            (None, false) => OPERATOR,
            (None, true) => UNROUTED,
        };
        self.lookup(tenant, route)
    }

    /// The series a tag of [`Series::tag`]'s form names.
    pub fn by_tag(&self, tag: &str) -> Arc<Series> {
        let mut fields = tag.split('\x1f');
        let tenant = fields.next().unwrap_or(UNROUTED);
        let route = fields.next().unwrap_or("");
        self.lookup(tenant, route)
    }

    /// [`Self::by_tag`] for a tag that is usually a series' own (the
    /// engine's tag whenever the access log is off): found by pointer in a
    /// small per-thread cache, without hashing the names or taking the
    /// lock. Only a series' own tag is cached, and a cached series holds
    /// its tag, so a pointer match is that very series.
    pub fn by_shared_tag(&self, tag: &Arc<str>) -> Arc<Series> {
        self.with_shared_tag(tag, Arc::clone)
    }

    /// [`Self::by_shared_tag`] lent to `f` rather than returned: a
    /// request's counts need no reference of their own (two atomic
    /// operations on a shared count per request). `f` must not look a
    /// series up by tag again.
    pub fn with_shared_tag<R>(&self, tag: &Arc<str>, f: impl FnOnce(&Arc<Series>) -> R) -> R {
        const SLOTS: usize = 16;
        thread_local! {
            static RECENT: RefCell<[Option<Arc<Series>>; SLOTS]> =
                const { RefCell::new([const { None }; SLOTS]) };
        }
        let slot = (Arc::as_ptr(tag).cast::<u8>().addr() >> 4) % SLOTS;
        RECENT.with_borrow_mut(|recent| {
            if let Some(s) = &recent[slot]
                && Arc::ptr_eq(&s.tag, tag)
            {
                return f(s);
            }
            let s = self.by_tag(tag);
            if Arc::ptr_eq(&s.tag, tag) {
                recent[slot] = Some(s.clone());
            }
            f(&s)
        })
    }

    /// Forgets every route `exists` says is gone, after a reload: its
    /// per-route series leave the registry and its (tenant, route) pairs
    /// leave the book. Without this a tenant that creates and deletes
    /// routes would grow every replica's registry without bound. The
    /// registry's own children are walked, so series whose pair the book
    /// no longer held (it starts over past [`MAX_BOOK_ENTRIES`]) go too.
    /// A request still finishing on a removed route after this counts
    /// into a fresh pair, which the next reload removes. Returns the
    /// number of routes removed from the registry.
    pub fn retain_routes(&self, exists: impl Fn(&str) -> bool) -> usize {
        use prometheus::core::Collector as _;
        self.entries
            .write()
            .retain(|s| s.route.is_empty() || exists(&s.route));
        let mut gone: Vec<(String, String)> = Vec::new();
        for family in self.route_latency.collect() {
            for m in family.get_metric() {
                let label = |name: &str| {
                    m.get_label()
                        .iter()
                        .find(|l| l.name() == name)
                        .map_or("", |l| l.value())
                };
                let route = label("route");
                if !exists(route) {
                    gone.push((label("tenant").to_string(), route.to_string()));
                }
            }
        }
        for m in self
            .tls_handshake_failures
            .collect()
            .iter()
            .flat_map(|f| f.get_metric())
        {
            let label = |name: &str| {
                m.get_label()
                    .iter()
                    .find(|l| l.name() == name)
                    .map_or(String::new(), |l| l.value().to_string())
            };
            let route = label("route");
            if !exists(&route) {
                let _ = self
                    .tls_handshake_failures
                    .remove_label_values(&[&label("tenant"), &route]);
            }
        }
        for (tenant, route) in &gone {
            // A child that is not there (never made) is no error here.
            for class in CLASSES {
                let _ = self
                    .route_requests
                    .remove_label_values(&[tenant, route, class]);
            }
            let _ = self.route_latency.remove_label_values(&[tenant, route]);
        }
        gone.len()
    }

    /// A TLS handshake with a backend of `series`' route failed.
    pub fn tls_handshake_failed(&self, series: &Series) {
        self.tls_handshake_failures
            .with_label_values(&[&*series.tenant, &*series.route])
            .inc();
    }

    fn lookup(&self, tenant: &str, route: &str) -> Arc<Series> {
        let hash = self.hasher.hash_one((tenant, route));
        let eq = |s: &Arc<Series>| &*s.tenant == tenant && &*s.route == route;
        if let Some(s) = self.entries.read().find(hash, eq) {
            return s.clone();
        }
        let series = Arc::new(self.series(tenant, route));
        let mut entries = self.entries.write();
        if let Some(s) = entries.find(hash, eq) {
            return s.clone();
        }
        if entries.len() >= MAX_BOOK_ENTRIES {
            entries.clear();
        }
        let hasher = |s: &Arc<Series>| self.hasher.hash_one((&*s.tenant, &*s.route));
        entries.insert_unique(hash, series.clone(), hasher);
        series
    }

    fn series(&self, tenant: &str, route: &str) -> Series {
        let per_route = self.per_route.load(Ordering::Relaxed);
        let route_series = (per_route && !route.is_empty()).then(|| RouteSeries {
            requests: CLASSES.map(|c| self.route_requests.with_label_values(&[tenant, route, c])),
            latency: self.route_latency.with_label_values(&[tenant, route]),
        });
        Series {
            tenant: tenant.into(),
            route: route.into(),
            tag: format!("{tenant}\x1f{route}").into(),
            requests: CLASSES.map(|c| self.requests.with_label_values(&[tenant, c])),
            latency: self.latency.with_label_values(&[tenant]),
            bytes_in: self.bytes.with_label_values(&[tenant, "in"]),
            bytes_out: self.bytes.with_label_values(&[tenant, "out"]),
            connect_failures: self.connect_failures.with_label_values(&[tenant]),
            per_route: route_series,
        }
    }
}

impl Series {
    /// Counts one finished request.
    pub fn count(&self, status: u16, seconds: f64, bytes_in: u64, bytes_out: u64) {
        let class = class_index(status);
        self.requests[class].inc();
        self.latency.observe(seconds);
        self.bytes_in.inc_by(bytes_in);
        self.bytes_out.inc_by(bytes_out);
        if let Some(r) = &self.per_route {
            r.requests[class].inc();
            r.latency.observe(seconds);
        }
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

    #[test]
    fn tenant_series_are_kept_apart_and_resolved_once() {
        let m = Metrics::new().unwrap().with_route_series(true);
        let a = m.series.get(Some("alpha"), "tenant-alpha/web:80");
        let b = m.series.get(Some("beta"), "tenant-beta/web:80");
        assert!(
            Arc::ptr_eq(&a, &m.series.by_tag(&a.tag)),
            "one entry per pair"
        );
        for _ in 0..2 {
            assert!(Arc::ptr_eq(&a, &m.series.by_shared_tag(&a.tag)));
            assert!(Arc::ptr_eq(&b, &m.series.by_shared_tag(&b.tag)));
        }
        // A tag that is no series' own (the access log's, with the IDs)
        // names the same series, and is not kept.
        let with_ids: Arc<str> = format!("{}\x1fid\x1ftp", a.tag).into();
        assert!(Arc::ptr_eq(&a, &m.series.by_shared_tag(&with_ids)));
        a.count(200, 0.01, 10, 20);
        a.count(502, 0.02, 10, 20);
        b.count(404, 0.001, 5, 5);
        m.series.get(None, "").count(0, 0.0, 0, 0);
        m.series.get(None, "ops/web:80").count(200, 0.0, 0, 0);
        let text = m.render();
        for line in [
            "teapot_tenant_requests_total{class=\"2xx\",tenant=\"alpha\"} 1",
            "teapot_tenant_requests_total{class=\"5xx\",tenant=\"alpha\"} 1",
            "teapot_tenant_requests_total{class=\"4xx\",tenant=\"beta\"} 1",
            "teapot_tenant_requests_total{class=\"none\",tenant=\"_unrouted\"} 1",
            "teapot_tenant_requests_total{class=\"2xx\",tenant=\"_operator\"} 1",
            "teapot_tenant_bytes_total{direction=\"out\",tenant=\"alpha\"} 40",
            "teapot_tenant_request_seconds_count{tenant=\"beta\"} 1",
            "teapot_route_requests_total{class=\"4xx\",route=\"tenant-beta/web:80\",tenant=\"beta\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(
            text.contains("teapot_tenant_requests_total{class=\"4xx\",tenant=\"alpha\"} 0"),
            "beta's 404 is not alpha's"
        );
    }

    /// A route deleted (and a reload) takes its per-route series out of
    /// the registry; the tenant's own series and the routes that still
    /// exist stay, and a route that comes back counts from a new series.
    #[test]
    fn series_of_routes_that_are_gone_leave_the_registry() {
        let m = Metrics::new().unwrap().with_route_series(true);
        for i in 0..100 {
            let route = format!("tenant-alpha/churn-{i}");
            m.series.get(Some("alpha"), &route).count(200, 0.01, 1, 1);
        }
        let kept = m.series.get(Some("alpha"), "tenant-alpha/web");
        kept.count(200, 0.01, 1, 1);
        let before = m.render();
        assert!(before.contains("route=\"tenant-alpha/churn-99\""));
        let removed = m.series.retain_routes(|r| r == "tenant-alpha/web");
        assert_eq!(removed, 100);
        let after = m.render();
        assert!(!after.contains("churn-"), "{after}");
        assert!(after.contains(
            "teapot_route_requests_total{class=\"2xx\",route=\"tenant-alpha/web\",tenant=\"alpha\"} 1"
        ));
        assert!(
            after.contains("teapot_tenant_requests_total{class=\"2xx\",tenant=\"alpha\"} 101"),
            "the tenant's series keep its whole count"
        );
        assert!(Arc::ptr_eq(
            &kept,
            &m.series.get(Some("alpha"), "tenant-alpha/web")
        ));
        assert_eq!(m.series.entries.read().len(), 1, "the book forgot them too");
        // Back again: a new series, exported, counting from zero.
        m.series
            .get(Some("alpha"), "tenant-alpha/churn-1")
            .count(404, 0.01, 1, 1);
        let back = m.render();
        assert!(back.contains(
            "teapot_route_requests_total{class=\"4xx\",route=\"tenant-alpha/churn-1\",tenant=\"alpha\"} 1"
        ));
        assert!(back.contains(
            "teapot_route_requests_total{class=\"2xx\",route=\"tenant-alpha/churn-1\",tenant=\"alpha\"} 0"
        ));
    }
}
