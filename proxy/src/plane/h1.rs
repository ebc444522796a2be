//! HTTP/1 through teapot's own engine (`teapot_h1`), over the same
//! [`Router`] and request pipeline ([`crate::plane::pipeline`]: Host
//! rules, 421, ACME, the routing decision, the Gateway filters' shared
//! parts) as HTTP/2 (crate::plane::h2); what is here is the engine's side
//! of it.
//!
//! Why a second engine: Pingora's per-request machinery (a header map, a
//! boxed future per filter, a task per body) cost about three times the
//! CPU per HTTP/1 request that nginx and HAProxy spend (benches/http.md).
//! The engine parses in place and writes heads as bytes; what teapot adds
//! per request is one snapshot lookup, the tenant gate, and the four
//! forwarding headers.
//!
//! - [`Router`] implements `teapot_h1::Router`: the request pipeline (its
//!   ACME lookup the only await on the way, besides a tenant refusal's
//!   delay), then the forward's edits as the engine's [`HeaderEdits`].
//! - [`Target`] is one request's upstream: round-robin over live
//!   endpoints, ejection on connect failure, the tenant's slot and the
//!   in-flight count held until the request (or its upgraded tunnel) ends.
//! - [`MetricsObserver`] turns each finished request into the same
//!   metrics the HTTP/2 server counts.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use pingora_core::protocols::Stream;
use teapot_h1::{
    ConnInfo, Decision as H1Decision, Engine, EngineConfig, Forward as H1Forward, HeaderEdits,
    Observer, Outcome, RequestHead, RequestLog, RequestTarget, Respond, Upstreams,
};

use crate::compile::gateway::table::HeaderEdits as GatewayHeaderEdits;
use crate::compile::routes::Route;
use crate::compile::upstream::{Tried, Upstream};
use crate::live::fairness::{TenantGate, TenantPermit};
use crate::plane::access_log::{AccessLog, Entry};
use crate::plane::decide::{
    self, Answer, GatewayForward, Head, RequestHeaders, UNFORWARDABLE_PATH,
};
use crate::plane::edge::EdgeConfig;
use crate::plane::filters::{self, HeaderOp};
use crate::plane::forwarding;
use crate::plane::logflood::EndpointLog;
use crate::plane::metrics::{InFlight, Metrics, Series, SeriesBook};
use crate::plane::pipeline::{self, Routed};
use crate::plane::proxy::{
    BAD_GATEWAY_BODY, GATEWAY_TIMEOUT_BODY, Router, SERVER_NAME, UpstreamOptions,
};
use crate::plane::trace::{self, RequestId, TraceParent};
use crate::plane::traffic;

/// The HTTP/1 engine of a listener.
pub type H1Engine = Engine<Router, MetricsObserver>;

/// The engine with docs/edge.md's limits and the upstream options of
/// `teapot proxy`.
pub fn engine(router: Router, pool_size: usize) -> H1Engine {
    let config = engine_config(&router.edge, &router.options, pool_size);
    let observer = MetricsObserver {
        metrics: router.metrics.clone(),
        access_log: router.observe.access_log.clone(),
    };
    Engine::new(router, observer, config)
}

fn engine_config(edge: &EdgeConfig, upstream: &UpstreamOptions, pool_size: usize) -> EngineConfig {
    EngineConfig {
        limits: edge.head_limits(),
        header_read_timeout: edge.header_read_timeout,
        keepalive_timeout: edge.keepalive_timeout,
        max_body_size: edge.max_body_size,
        connect_timeout: upstream.connect_timeout,
        upstream_read_timeout: upstream.read_timeout,
        client_write_timeout: upstream.write_timeout,
        pool_max_idle_per_upstream: pool_size,
        pool_idle_timeout: upstream.pool_idle_timeout,
        server: Some(Bytes::from_static(SERVER_NAME.as_bytes())),
        bad_gateway_body: Bytes::from_static(BAD_GATEWAY_BODY.as_bytes()),
        gateway_timeout_body: Bytes::from_static(GATEWAY_TIMEOUT_BODY.as_bytes()),
        ..EngineConfig::default()
    }
}

/// What the engine needs to know of a Pingora connection.
pub fn conn_info(stream: &Stream) -> ConnInfo {
    let socket = stream.get_socket_digest();
    let inet = crate::plane::socket_group::inet;
    let ssl = stream.get_ssl_digest();
    ConnInfo {
        client: socket.as_ref().and_then(|d| inet(d.peer_addr())),
        local: socket.as_ref().and_then(|d| inet(d.local_addr())),
        tls: ssl.is_some(),
        tls_version: ssl
            .as_deref()
            .map(|d| crate::plane::proxy::tls_version(&d.version)),
        sni: ssl
            .as_deref()
            .and_then(crate::plane::tls::server_name)
            .map(Arc::from),
        alpn: None,
        tls_facts: ssl
            .as_deref()
            .and_then(crate::plane::client_cert::from_digest),
    }
}

const PLAIN_TEXT: (Bytes, Bytes) = (
    Bytes::from_static(b"content-type"),
    Bytes::from_static(b"text/plain; charset=utf-8"),
);

impl teapot_h1::Router for Router {
    type Upstreams = Target;

    async fn decide(&self, req: &RequestHead<'_>, conn: &ConnInfo) -> H1Decision<Target> {
        let target = req.path();
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let head = Head {
            host_headers: req
                .headers()
                .filter(|(name, _)| name.eq_ignore_ascii_case("host"))
                .count(),
            authority: req.host().unwrap_or(""),
            path,
            requires_host: req.version() == 1,
            declared_length: req.content_length(),
        };
        let headers = H1Headers(req);
        let request = pipeline::Request {
            head,
            method: req.method(),
            query,
            headers: &headers,
        };
        let mut forward = match pipeline::route(self, &request, conn).await {
            Routed::Forward(forward) => forward,
            Routed::Answer(answer, route) => {
                let ids = self.ids(req, route.as_ref());
                let mut respond = self.local_answer(answer, ids.tag).await;
                if let Some(route) = &route {
                    self.advertise(&mut respond, conn, route);
                }
                return H1Decision::Respond(respond);
            }
            Routed::Policy(answer, route) => {
                let tag = self.ids(req, Some(&route)).tag;
                let mut respond = traffic::engines::h1_respond(answer, tag);
                self.advertise(&mut respond, conn, &route);
                return H1Decision::Respond(respond);
            }
            // The tenant's slot covered the page's fetch; the engine writes
            // the page (at most `MAX_PAGE_BYTES`) in one flush bounded by
            // the client write timeout, one per connection.
            Routed::ErrorPage(page, route, _tenant) => {
                let tag = self.ids(req, Some(&route)).tag;
                let mut respond = page_respond(page, Some(tag));
                self.advertise(&mut respond, conn, &route);
                return H1Decision::Respond(respond);
            }
            Routed::AcmeChallenge(answer) => {
                let mut respond = Respond::new(200, "acme_challenge", answer);
                respond.headers.push(PLAIN_TEXT);
                respond.tag = Some(self.ids(req, None).tag);
                return H1Decision::Respond(respond);
            }
        };
        let ids = self.ids(req, Some(&forward.route));
        let error_pages = forward.policy.as_mut().and_then(|p| p.error_pages.take());
        let error_pages = error_pages.map(|mut pages| {
            // The ID the backend gets, as ingress-nginx's `$req_id`.
            pages.request_id = ids.request_id.as_str().into();
            pages
        });
        // `Alt-Svc` on the backend's answer and on teapot's own for it.
        let alt_svc = self.alt_svc(conn, &forward.route).map(|a| a.field());
        if forward.gateway.as_ref().is_some_and(|g| g.h2c) || forward.upstream.protocol.is_h2() {
            let mut respond = self.local_answer(H2C_OVER_H1, ids.tag).await;
            respond
                .headers
                .extend_from_slice(alt_svc.unwrap_or_default());
            return H1Decision::Respond(respond);
        }
        let mut cors: Vec<(Bytes, Bytes)> = traffic::cors::of_forward(forward.policy.as_deref())
            .map(|(n, v)| (Bytes::from_static(n.as_bytes()), Bytes::from(v.clone())))
            .collect();
        if !cors.is_empty() {
            cors.extend_from_slice(alt_svc.unwrap_or_default());
        }
        // Boxed here, where it is made: the engine moves only the box.
        let mut fwd = Box::new(H1Forward::via(Target {
            upstream: forward.upstream,
            tried: Tried::default(),
            preferred: forward.policy.as_ref().and_then(|p| p.endpoint),
            max_attempts: self.options.max_connect_attempts.max(1),
            connect_failures: self.metrics.upstream_connect_failures.clone(),
            series: ids.series,
            book: self.metrics.series.clone(),
            _tenant: forward.tenant,
            _in_flight: self.metrics.request_started(),
            _client_in_flight: forward.policy.as_mut().and_then(|p| p.in_flight.take()),
            error_pages,
            cors,
            alt_svc: alt_svc.unwrap_or_default(),
            pacer: forward.policy.as_mut().and_then(|p| p.pacer.take()),
            buffering: forward.policy.as_ref().and_then(|p| p.buffering),
            held: None,
            rewrite: forward.policy.as_mut().and_then(|p| p.rewrite.take()),
            ewma: forward
                .policy
                .as_ref()
                .filter(|p| p.ewma)
                .map(|_| traffic::ewma::Measure::default()),
        }));
        fwd.max_body_size = Some(forward.body_limit);
        fwd.retry = forward.policy.as_ref().and_then(|p| p.retry.clone());
        if let Some(http) = forward
            .policy
            .as_ref()
            .and_then(|p| p.upstream_http.as_deref())
        {
            fwd.http = http.clone();
        }
        fwd.request_edits =
            forwarding::edits(conn, head.authority, &ids.request_id, &ids.traceparent);
        forwarding::remove_lookalike_fields(&mut fwd.request_edits, req.headers().map(|(n, _)| n));
        fwd.tag = Some(ids.tag);
        let edits = (&mut fwd.request_edits, &mut fwd.response_edits);
        traffic::engines::h1_edits(edits.0, edits.1, forward.policy.as_deref());
        if let Some([(name, value)]) = alt_svc {
            fwd.response_edits.push_append(name, value);
        }
        if forward
            .policy
            .as_ref()
            .is_some_and(|p| p.timeouts.is_some())
        {
            // The engine's one upstream wait covers both directions: the
            // route's read timeout (docs/migrate-from-ingress-nginx.md).
            let o = &self.options;
            let operator = (o.connect_timeout, o.read_timeout, o.write_timeout);
            let (connect, read, _) =
                traffic::engines::upstream_timeouts(forward.policy.as_deref(), operator);
            fwd.timeouts.connect = Some(connect);
            fwd.timeouts.read = Some(read);
        }
        // The path the route matched goes upstream, the query as
        // sent; Gateway filters rewrite that path.
        let path = forward.path.as_deref().unwrap_or(path);
        let edited = normalised_target(
            &mut fwd,
            forward.path.as_deref(),
            &target[head.path.len()..],
        )
        .and_then(|()| match &forward.gateway {
            Some(gateway) => self.gateway_filters(&mut fwd, gateway, req, path, query),
            None => Ok(()),
        });
        if let Err(answer) = edited {
            // The tenant's slot and the in-flight count go with it.
            let tag = fwd.tag.take().unwrap_or_default();
            drop(fwd);
            let mut respond = self.local_answer(answer, tag).await;
            respond
                .headers
                .extend_from_slice(alt_svc.unwrap_or_default());
            return H1Decision::Respond(respond);
        }
        H1Decision::Forward(fwd)
    }
}

/// A GRPCRoute backend (or an h2c `appProtocol`, or `backend-protocol`
/// GRPC, H2C or GRPCS) reached over HTTP/1: the
/// engine speaks HTTP/1 upstream only, and a gRPC backend does not answer
/// HTTP/1, so the request is refused here rather than sent where it would
/// fail; gRPC clients speak HTTP/2, which crate::plane::h2 serves.
const H2C_OVER_H1: Answer = Answer {
    status: 502,
    body: "502 this route's backend speaks HTTP/2 only (gRPC, h2c); send the request over HTTP/2\n",
    location: None,
    refusal: None,
    reason: "h2c_backend_over_h1",
};

/// The normalised path ([`crate::plane::decide::Forward::path`]) and the
/// client's `query` (with its `?`) as the upstream target.
fn normalised_target(
    fwd: &mut H1Forward<Target>,
    normalised: Option<&str>,
    query: &str,
) -> Result<(), Answer> {
    if let Some(path) = normalised {
        let target = RequestTarget::new(format!("{path}{query}")).ok_or(UNFORWARDABLE_PATH)?;
        fwd.target = Some(target);
    }
    Ok(())
}

/// The request's header fields for Gateway API header matches and the
/// sub-requests that carry them.
struct H1Headers<'a, 'r>(&'a RequestHead<'r>);

impl RequestHeaders for H1Headers<'_, '_> {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.0.header(name)
    }

    fn each(&self, f: &mut dyn FnMut(&str, &[u8])) {
        for (name, value) in self.0.headers() {
            f(name, value);
        }
    }
}

/// A Gateway API filter's header changes ([`filters::header_ops`]: the
/// rule is there) as the engine's edits, which check each name and value
/// again when pushed (no CR/LF, no framing field).
fn push_gateway_edits(edits: &mut HeaderEdits, spec: &GatewayHeaderEdits, request: bool) {
    for op in filters::header_ops(spec, request) {
        match op {
            HeaderOp::Set(name, value) => edits.push_set(name.as_bytes(), value.as_bytes()),
            HeaderOp::Append(name, value) => edits.push_append(name.as_bytes(), value.as_bytes()),
            HeaderOp::Remove(name) => edits.push_remove(name.as_bytes()),
        }
    }
}

impl Router {
    /// What a Gateway API rule's filters do to a forwarded request (the
    /// parts both engines share are crate::plane::pipeline's): request
    /// header edits, Host and target rewrites, response header edits, the
    /// timeouts, and the mirrors (started here, on their own tasks).
    /// `Err`: a rewrite made no valid target.
    fn gateway_filters(
        &self,
        fwd: &mut H1Forward<Target>,
        gateway: &GatewayForward,
        req: &RequestHead<'_>,
        path: &str,
        query: &str,
    ) -> Result<(), Answer> {
        // Mirrors get the target the backend gets before any rewrite.
        let sent = fwd.target.clone();
        let sent = sent.as_ref().map_or(req.path(), |t| t.as_str());
        let authority = req.host().unwrap_or("");
        pipeline::start_mirrors(self, gateway, req.method(), sent, authority, || {
            req.headers()
        });
        for f in gateway.each() {
            if f.retry.is_some() {
                fwd.retry = f.retry.clone();
            }
            push_gateway_edits(&mut fwd.request_edits, &f.request_headers, true);
            push_gateway_edits(&mut fwd.response_edits, &f.response_headers, false);
            if let Some(host) = filters::rewritten_host(f) {
                fwd.request_edits.push_set(b"host", host.as_bytes());
            }
        }
        if let Some(target) = filters::chained_target(gateway.each(), path, Some(query)) {
            fwd.target = Some(RequestTarget::new(target).ok_or(decide::BAD_REWRITE)?);
        }
        // Only a bound shorter than the engine's own changes anything.
        let read_timeout = self.read_timeout(Some(gateway));
        if read_timeout < self.options.read_timeout {
            fwd.timeouts.read = Some(read_timeout);
        }
        Ok(())
    }
}

/// One request's series, IDs and the tag that carries them to the
/// observer.
struct Ids<'r> {
    series: Arc<Series>,
    request_id: RequestId<'r>,
    traceparent: TraceParent<'r>,
    tag: Arc<str>,
}

impl Router {
    /// The request's series (by its route's tenant), its `X-Request-Id` and
    /// `traceparent`, and the engine's tag: the series' own (no
    /// allocation) with the access log off, else one with the IDs added.
    fn ids<'r>(&self, req: &RequestHead<'r>, route: Option<&Route>) -> Ids<'r> {
        let (series, trusted) = self.cached_series_of(route);
        let request_id = trace::request_id(req.header(trace::REQUEST_ID), trusted);
        let traceparent = trace::traceparent(req.header(trace::TRACEPARENT), &request_id);
        let tag = if self.observe.access_log.is_on() {
            trace::tag(&series.tag, &request_id, &traceparent)
        } else {
            series.tag.clone()
        };
        Ids {
            series,
            request_id,
            traceparent,
            tag,
        }
    }

    /// [`Router::series_of`] through a small per-thread cache keyed by the
    /// route's Ingress and tenant (by pointer: every rule of an Ingress
    /// shares them), so a request pays pointer compares, not a hash of the
    /// names under the book's lock. An entry holds what it is keyed by
    /// (the Ingress name, the tenant's gate, the book and the trusted
    /// namespaces), so no key can be freed and reused while cached; a
    /// reload's new routes simply miss.
    pub(super) fn cached_series_of(&self, route: Option<&Route>) -> (Arc<Series>, bool) {
        const SLOTS: usize = 32;
        struct Cached {
            ingress: Arc<str>,
            tenant: Option<Arc<TenantGate>>,
            book: Arc<SeriesBook>,
            trust: Arc<[Box<str>]>,
            series: Arc<Series>,
            trusted: bool,
        }
        thread_local! {
            static RECENT: std::cell::RefCell<[Option<Cached>; SLOTS]> =
                const { std::cell::RefCell::new([const { None }; SLOTS]) };
        }
        let Some(route) = route else {
            return self.series_of(None);
        };
        let same = |c: &Cached| {
            Arc::ptr_eq(&c.ingress, &route.ingress)
                && match (&c.tenant, route.tenant()) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                }
                && Arc::ptr_eq(&c.book, &self.metrics.series)
                && Arc::ptr_eq(&c.trust, &self.observe.trust_request_id)
        };
        let slot = (Arc::as_ptr(&route.ingress).cast::<u8>().addr() >> 4) % SLOTS;
        RECENT.with_borrow_mut(|recent| {
            if let Some(c) = &recent[slot]
                && same(c)
            {
                return (c.series.clone(), c.trusted);
            }
            let (series, trusted) = self.series_of(Some(route));
            recent[slot] = Some(Cached {
                ingress: route.ingress.clone(),
                tenant: route.tenant().cloned(),
                book: self.metrics.series.clone(),
                trust: self.observe.trust_request_id.clone(),
                series: series.clone(),
                trusted,
            });
            (series, trusted)
        })
    }

    /// A local answer of the routing decision, as the HTTP/2 server writes
    /// it (crate::plane::h2): counted, delayed for a tenant refusal.
    async fn local_answer(&self, answer: Answer, tag: Arc<str>) -> Respond {
        if let Some(refusal) = answer.refusal {
            self.metrics.refused(refusal);
        }
        let mut respond = Respond::new(
            answer.status,
            answer.reason,
            Bytes::from_static(answer.body.as_bytes()),
        );
        respond.tag = Some(tag);
        match &answer.location {
            // A redirect: no body, its Location checked by the engine like
            // any header of a local answer.
            Some(location) => respond.headers.push((
                Bytes::from_static(b"location"),
                Bytes::copy_from_slice(location.as_bytes()),
            )),
            None => respond.headers.push(PLAIN_TEXT),
        }
        if answer.delayed() {
            tokio::time::sleep(self.edge.tenant_refusal_delay).await;
            respond
                .headers
                .push((Bytes::from_static(b"retry-after"), Bytes::from_static(b"1")));
        }
        respond.close = !answer.keeps_connection();
        respond
    }
}

impl Router {
    /// `Alt-Svc` on teapot's own answer about `route`
    /// (crate::plane::alt_svc).
    fn advertise(&self, respond: &mut Respond, conn: &ConnInfo, route: &Route) {
        if let Some(alt) = self.alt_svc(conn, route) {
            respond.headers.extend_from_slice(alt.field());
        }
    }
}

/// An error page as the engine's local answer; `tag` is the request's
/// (the engine keeps a forwarded request's own).
fn page_respond(page: traffic::errors::Page, tag: Option<Arc<str>>) -> Respond {
    let mut respond = Respond::new(page.status, page.reason, page.body);
    respond.headers = page
        .headers
        .into_iter()
        .map(|(name, value)| {
            let name = Bytes::copy_from_slice(name.as_str().as_bytes());
            (name, Bytes::copy_from_slice(value.as_bytes()))
        })
        .collect();
    respond.tag = tag;
    respond
}

/// One forwarded request's upstream and what it holds while it runs.
#[derive(Debug)]
pub struct Target {
    upstream: Arc<Upstream>,
    tried: Tried,
    /// The endpoint the client sticks to (cookie affinity), tried first.
    preferred: Option<usize>,
    max_attempts: u32,
    /// One counter, not all of [`Metrics`]: cloned per request.
    connect_failures: prometheus::IntCounter,
    /// The tenant's series (its connect failures).
    series: Arc<Series>,
    /// Where a failed TLS handshake with the backend is counted.
    book: Arc<SeriesBook>,
    /// The tenant's connection slot: held for the request, and for an
    /// upgraded connection's whole life.
    _tenant: Option<TenantPermit>,
    _in_flight: InFlight,
    /// `limit-connections`: the client's count, held likewise.
    _client_in_flight: Option<crate::live::rate_table::InFlightPass>,
    /// `custom-http-errors`: the statuses replaced by the error backend's
    /// page and what it is told; `None` for every other route.
    error_pages: Option<Box<traffic::errors::ErrorPages>>,
    /// The route's CORS fields (and `Alt-Svc`, when there are some), on
    /// the engine's own 502 and 504 too.
    cors: Vec<(Bytes, Bytes)>,
    /// `Alt-Svc` on the engine's own answers for the request (a static
    /// field: nothing allocated); empty when it carries none.
    alt_svc: &'static [(Bytes, Bytes)],
    /// `limit-rate`: the response body's pace; `None` for every other
    /// route.
    pacer: Option<traffic::bandwidth::Pacer>,
    /// `proxy-request-buffering`, `proxy-buffering`: the bytes the route
    /// asks per request, and what the budget granted of them
    /// (crate::live::buffers); `None` for every other route.
    buffering: Option<crate::compile::buffering::Buffering>,
    held: Option<crate::live::buffers::Held>,
    /// `proxy-redirect-*`, `proxy-cookie-*`: the backend's response fields
    /// rewritten; `None` for every other route.
    rewrite: Option<traffic::rewrite::Rewriting>,
    /// `load-balance: ewma`: the attempt's time to its answer, recorded
    /// on the endpoint; `None` for every other route.
    ewma: Option<traffic::ewma::Measure>,
}

impl Target {
    fn endpoint(&self, addr: SocketAddr) -> Option<Arc<crate::live::endpoints::Endpoint>> {
        self.upstream
            .endpoints
            .load()
            .iter()
            .find(|e| e.addr == addr)
            .cloned()
    }
}

impl Upstreams for Target {
    fn next(&mut self, attempt: u32) -> Option<SocketAddr> {
        if attempt >= self.max_attempts {
            return None;
        }
        let endpoint = self
            .upstream
            .pick_preferring(self.preferred, &mut self.tried)?;
        if let Some(measure) = &mut self.ewma {
            measure.start(&endpoint);
        }
        Some(endpoint.addr)
    }

    fn is_empty(&self) -> bool {
        self.upstream.is_empty()
    }

    fn connected(&mut self, addr: SocketAddr) {
        if let Some(e) = self.endpoint(addr) {
            e.mark_healthy();
        }
        EndpointLog::global().connected(addr);
    }

    fn new_try(&mut self, again: bool) -> bool {
        let endpoints = self.upstream.endpoints.load().len();
        crate::plane::h2_upstream::new_try(&mut self.tried, endpoints, again)
    }

    fn failed(&mut self, addr: SocketAddr) {
        self.connect_failures.inc();
        self.series.connect_failures.inc();
        if let Some(e) = self.endpoint(addr) {
            e.eject();
        }
        // The engine's debug line has the socket error.
        EndpointLog::global().connect_failed(
            addr,
            &self.upstream.name,
            &"connect failed or timed out",
        );
    }

    fn transport(&self) -> Option<Arc<dyn teapot_h1::Transport>> {
        match &self.upstream.protocol {
            crate::compile::upstream::Protocol::Tls(tls) => Some(tls.clone()),
            _ => None,
        }
    }

    fn local_fields(&self) -> &[(Bytes, Bytes)] {
        if self.cors.is_empty() {
            self.alt_svc
        } else {
            &self.cors
        }
    }

    fn response_rewrite(&self) -> Option<&dyn teapot_h1::RewriteField> {
        self.rewrite
            .as_ref()
            .map(|r| r as &dyn teapot_h1::RewriteField)
    }

    fn replaces(&self, status: u16) -> bool {
        // Asked as each answer's head arrives (or the attempt fails).
        if let Some(measure) = &self.ewma {
            measure.answered();
        }
        self.error_pages
            .as_ref()
            .is_some_and(|pages| pages.replaces(status))
    }

    /// The error backend's page: boxed, so a request's future holds a
    /// pointer, not the page request's state.
    fn pacer(&mut self) -> Option<Box<dyn teapot_h1::Pacer>> {
        let pacer = self.pacer.take()?;
        Some(Box::new(pacer))
    }

    fn buffering(&mut self, body: teapot_h1::BodyFraming) -> teapot_h1::Buffering {
        let Some(asked) = self.buffering else {
            return teapot_h1::Buffering::default();
        };
        let tenant = self._tenant.as_ref().map(|t| t.gate());
        let (granted, held) = crate::live::buffers::grant(
            crate::live::buffers::Budget::global(),
            (asked.request, asked.response),
            tenant,
            body,
        );
        self.held = held;
        granted
    }

    fn replacement(&mut self, status: u16) -> impl Future<Output = Respond> + Send {
        let pages = self.error_pages.take();
        let alt_svc = self.alt_svc;
        Box::pin(async move {
            let page = match &pages {
                Some(pages) => pages.page(status).await,
                None => traffic::errors::fallback(status),
            };
            let mut respond = page_respond(page, None);
            respond.headers.extend_from_slice(alt_svc);
            respond
        })
    }

    /// Not ejected: the endpoint answers, and its health is shared with
    /// routes that reach it otherwise; the route's settings (or the
    /// backend's certificate) are what fail.
    fn secure_failed(&mut self, addr: SocketAddr) {
        self.book.tls_handshake_failed(&self.series);
        EndpointLog::global().connect_failed(
            addr,
            &self.upstream.name,
            &"the TLS handshake failed (the backend's certificate refused, or no common protocol)",
        );
    }
}

/// Counts each finished request into [`Metrics`] and its tenant's
/// series, and hands it to the access log.
#[derive(Debug)]
pub struct MetricsObserver {
    metrics: Metrics,
    access_log: AccessLog,
}

impl Observer for MetricsObserver {
    fn on_request(&self, log: &RequestLog<'_>) {
        let m = &self.metrics;
        if log.status != 0 {
            m.count_response(log.status);
        }
        if let Some(ttfb) = log.upstream_ttfb {
            m.upstream_latency.observe(ttfb.as_secs_f64());
        }
        if let Outcome::Refused(refusal) = log.outcome {
            m.refused(refusal);
        }
        // A client that hangs up is normal traffic: counted, not logged
        // as an error (the access log still has its line).
        if log.client_abort || log.outcome == Outcome::ClientAbort {
            m.client_aborts.inc();
        }
        let count = |series: &Arc<Series>| {
            series.count(
                log.status,
                log.total_time.as_secs_f64(),
                log.bytes_in,
                log.bytes_out,
            );
        };
        match log.tag {
            Some(tag) => m.series.with_shared_tag(tag, count),
            None => count(&m.series.get(None, "")),
        }
        let reason = reason(log);
        if !self.access_log.wants(log.status, reason.is_some()) {
            return;
        }
        let mut entry = Entry::http(
            log.method,
            log.path,
            log.host,
            self.access_log.keeps_query(),
        );
        entry.tag = log.tag.cloned();
        entry.protocol = "h1";
        // The version the connection negotiated; `tls` only if a TLS
        // connection's digest was missing (not expected).
        entry.tls = log
            .conn
            .tls_version
            .or_else(|| log.conn.tls.then_some("tls"));
        entry.sni = log.conn.sni.clone();
        entry.status = log.status;
        entry.bytes_in = log.bytes_in;
        entry.bytes_out = log.bytes_out;
        entry.duration = log.total_time;
        entry.upstream_time = log.upstream_time;
        entry.upstream = log.upstream;
        entry.retries = u32::from(log.retried);
        entry.client = log.conn.client;
        entry.reason = reason;
        self.access_log.send(entry);
    }
}

/// Why a request was not a plain relayed exchange, for the access log.
fn reason(log: &RequestLog<'_>) -> Option<&'static str> {
    use teapot_h1::UpstreamError as U;
    match log.outcome {
        Outcome::Proxied | Outcome::Upgraded if log.client_abort => Some("client_abort"),
        Outcome::Proxied | Outcome::Upgraded => None,
        Outcome::Local(reason) => Some(reason),
        Outcome::Refused(refusal) => Some(refusal.label()),
        Outcome::ClientAbort => Some("client_abort"),
        Outcome::Upstream(e) => Some(match e {
            U::Connect => "upstream_connect",
            U::ConnectTimeout => "upstream_connect_timeout",
            U::ReadTimeout => "upstream_read_timeout",
            U::Closed => "upstream_closed",
            U::BadResponse => "upstream_bad_response",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filter's edits in the engine's terms: set, add, remove in that
    /// order; the forwarding fields stay teapot's; a framing field is never
    /// edited, and a value that could split the head never reaches it.
    #[test]
    fn gateway_header_edits_become_engine_edits() {
        let spec = GatewayHeaderEdits {
            set: vec![
                ("x-set".into(), "s".into()),
                ("X-Forwarded-For".into(), "6.6.6.6".into()),
                ("x-gone".into(), "g".into()),
                ("x-split".into(), "a\r\nx-injected: 1".into()),
                ("content-length".into(), "0".into()),
            ],
            add: vec![
                ("x-add".into(), "a".into()),
                ("transfer-encoding".into(), "chunked".into()),
            ],
            remove: vec!["X-Gone".into(), "x-real-ip".into()],
        };
        let mut request = HeaderEdits::default().set("x-forwarded-for", "10.0.0.1");
        push_gateway_edits(&mut request, &spec, true);
        let mut response = HeaderEdits::default();
        push_gateway_edits(&mut response, &spec, false);
        let shown = |e: &HeaderEdits| format!("{e:?}");
        assert_eq!(
            shown(&request),
            shown(
                &HeaderEdits::default()
                    .set("x-forwarded-for", "10.0.0.1")
                    .set("x-set", "s")
                    .remove("x-split")
                    .append("x-add", "a")
                    .remove("X-Gone")
            )
        );
        assert_eq!(
            shown(&response),
            shown(
                &HeaderEdits::default()
                    .set("x-set", "s")
                    .set("X-Forwarded-For", "6.6.6.6")
                    .remove("x-split")
                    .append("x-add", "a")
                    .remove("X-Gone")
                    .remove("x-real-ip")
            )
        );
    }
}
