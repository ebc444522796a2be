//! The Pingora `ProxyHttp` implementation, HTTP/2's adapter (HTTP/1 is
//! the engine's, crate::plane::h1, over the same [`Router`]): one
//! [`Router`] holding `Arc` handles, per-request state in [`RequestCtx`].
//!
//! Each request reads the current snapshot once (an `arc-swap` load), so a
//! reload in the middle of a request never changes where that request goes,
//! and keep-alive connections pick up new routes on their next request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST, SERVER, UPGRADE};
use http::{HeaderName, Method};
use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, ErrorSource, ErrorType, Result};
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::{FailToProxy, ProxyHttp, Session};

use crate::compile::fairness::TenantPermit;
use crate::compile::routes::Route;
use crate::compile::snapshot::SnapshotHandle;
use crate::compile::upstream::{Endpoint, Tried, Upstream};
use crate::plane::access_log::{AccessLog, Entry};
use crate::plane::decide::{
    Answer, Decision, GatewayForward, Head, MISDIRECTED, RequestFacts, check_host, decide_request,
    forwarding_headers,
};
use crate::plane::edge::{self, EdgeConfig, Refusal};
use crate::plane::filters::{self, HeaderList};
use crate::plane::metrics::{InFlight, Metrics, Series};
use crate::plane::trace;

/// Value of the `Server` header on responses that have none.
pub const SERVER_NAME: &str = "teapot";

/// Upstream timeouts and retry bounds.
#[derive(Clone, Debug)]
pub struct UpstreamOptions {
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    /// How long a pooled upstream connection may sit idle.
    pub pool_idle_timeout: Duration,
    /// Endpoints tried per request when connects fail.
    pub max_connect_attempts: u32,
}

impl Default for UpstreamOptions {
    fn default() -> Self {
        UpstreamOptions {
            connect_timeout: Duration::from_secs(3),
            read_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            pool_idle_timeout: Duration::from_secs(60),
            max_connect_attempts: 3,
        }
    }
}

/// Bodies of the answers to a backend that failed or did not answer.
pub const BAD_GATEWAY_BODY: &str = "502 the backend could not be reached\n";
pub const GATEWAY_TIMEOUT_BODY: &str = "504 the backend did not answer in time\n";

/// Routes requests with the current snapshot, for both engines.
#[derive(Clone, Debug)]
pub struct Router {
    pub(super) snapshots: SnapshotHandle,
    pub(super) metrics: Metrics,
    pub(super) options: UpstreamOptions,
    pub(super) acme: Option<Arc<dyn crate::plane::AcmeResponder>>,
    pub(super) edge: EdgeConfig,
    /// The HTTPS listener's certificate choice, to refuse a request for a
    /// host its connection's certificate does not serve.
    pub(super) tls: Option<Arc<crate::plane::tls::SniResolver>>,
    pub(super) observe: Observe,
    /// Counts mirrored-or-not decisions, for RequestMirror shares.
    mirror_sequence: Arc<std::sync::atomic::AtomicU64>,
}

/// The access log and whose request IDs are kept.
#[derive(Clone, Debug, Default)]
pub struct Observe {
    pub access_log: AccessLog,
    /// Operator namespaces whose routes keep a client's `X-Request-Id`.
    pub trust_request_id: Arc<[Box<str>]>,
}

impl Router {
    pub fn new(snapshots: SnapshotHandle, metrics: Metrics, options: UpstreamOptions) -> Router {
        Router {
            snapshots,
            metrics,
            options,
            acme: None,
            edge: EdgeConfig::default(),
            tls: None,
            observe: Observe::default(),
            mirror_sequence: Arc::default(),
        }
    }

    /// The access log and request-ID trust (docs/operations.md).
    pub fn with_observe(mut self, observe: Observe) -> Router {
        self.observe = observe;
        self
    }

    /// The series of a request on `route` (`None`: unrouted), and whether
    /// its client's `X-Request-Id` is kept: only on an operator route
    /// whose namespace trusts it.
    pub(super) fn series_of(&self, route: Option<&Route>) -> (Arc<Series>, bool) {
        let tenant = route.and_then(|r| r.tenant()).map(|g| &*g.cluster);
        let name = route.map_or("", |r| &*r.ingress);
        let trusted = route.is_some_and(|r| r.tenant().is_none())
            && !self.observe.trust_request_id.is_empty()
            && name
                .split_once('/')
                .is_some_and(|(ns, _)| self.observe.trust_request_id.iter().any(|t| **t == *ns));
        (self.metrics.series.get(tenant, name), trusted)
    }

    /// HTTP/2's IDs and series for the request, into `ctx`.
    fn h2_ids(&self, session: &Session, ctx: &mut RequestCtx, route: Option<&Route>) {
        let (series, trusted) = self.series_of(route);
        let req = session.req_header();
        let sent_id = req.headers.get(trace::REQUEST_ID).map(|v| v.as_bytes());
        let id = trace::request_id(sent_id, trusted);
        let sent_tp = req.headers.get(trace::TRACEPARENT).map(|v| v.as_bytes());
        let tp = trace::traceparent(sent_tp, &id);
        ctx.new_request_id = id.is_new();
        ctx.new_traceparent = tp.is_new();
        ctx.tag = Some(Arc::from(format!(
            "{}\x1f{}\x1f{}",
            series.tag,
            id.as_str(),
            tp.as_str()
        )));
        ctx.series = Some(series);
    }

    /// Front-door limits (docs/edge.md).
    pub fn with_edge(mut self, edge: EdgeConfig) -> Router {
        self.edge = edge;
        self
    }

    /// The front-door checks of one HTTP/2 request (crate::plane::edge;
    /// HTTP/1 is the engine's, crate::plane::h1); returns the declared
    /// body length, if any.
    fn front_door(&self, session: &Session) -> std::result::Result<Option<u64>, Refusal> {
        let req = session.req_header();
        edge::check_h2_fields(req)?;
        edge::check_host(req)?;
        Ok(req
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok()))
    }

    /// Writes a local answer of the routing decision.
    async fn answer(&self, session: &mut Session, answer: Answer) -> Result<()> {
        if let Some(refusal) = answer.refusal {
            self.metrics.refused(refusal);
        }
        if let Some(location) = &answer.location {
            let mut resp = error_response(answer.status, 0)?;
            resp.insert_header(http::header::LOCATION, &**location)?;
            return send_answer(session, resp, Bytes::new()).await;
        }
        if answer.delayed() {
            tokio::time::sleep(self.edge.tenant_refusal_delay).await;
        }
        if !answer.keeps_connection() {
            session.set_keepalive(None);
        }
        if answer.delayed() {
            let body = Bytes::from_static(answer.body.as_bytes());
            let mut resp = error_response(answer.status, body.len())?;
            resp.insert_header(http::header::RETRY_AFTER, "1")?;
            return send_answer(session, resp, body).await;
        }
        respond(session, answer.status, answer.body).await
    }

    /// Sends the request's head to each RequestMirror backend of the
    /// rule, in a task nobody waits for: a mirror never slows or fails
    /// the request. The body is not mirrored (the head is what mirrors
    /// observe; a body would have to be buffered or teed).
    fn mirror(&self, req: &RequestHeader, gateway: &GatewayForward) {
        let mirrors = gateway.each().flat_map(|f| &f.mirrors);
        for m in mirrors {
            let sequence = self
                .mirror_sequence
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if !filters::mirrored(m.per_million, sequence) {
                continue;
            }
            let Some(endpoint) = m.upstream.pick(&mut Tried::default()) else {
                continue;
            };
            let target = req.uri.path_and_query().map_or("/", |p| p.as_str());
            let headers = req.headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes()));
            let bytes =
                filters::mirror_request(req.method.as_str(), target, authority(req), headers);
            let addr = endpoint.addr;
            let timeout = self.options.connect_timeout + self.options.read_timeout;
            tokio::spawn(async move {
                let send = async {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut stream = tokio::net::TcpStream::connect(addr).await?;
                    stream.write_all(&bytes).await?;
                    let mut sink = [0u8; 1024];
                    while stream.read(&mut sink).await? > 0 {}
                    std::io::Result::Ok(())
                };
                if let Ok(Err(e)) = tokio::time::timeout(timeout, send).await {
                    tracing::debug!(%addr, error = %e, "request mirror failed");
                }
            });
        }
    }

    /// Answers HTTP-01 validations from the ACME store.
    pub fn with_acme(mut self, acme: Option<Arc<dyn crate::plane::AcmeResponder>>) -> Router {
        self.acme = acme;
        self
    }

    /// Answers 421 to requests for a host the connection's certificate
    /// does not serve (crate::plane::tls::SniResolver::misdirected).
    pub fn with_tls(mut self, tls: Option<Arc<crate::plane::tls::SniResolver>>) -> Router {
        self.tls = tls;
        self
    }

    /// Whether a request for `authority` on a TLS connection that named
    /// `sni` must be answered 421 (RFC 9110 §15.5.20).
    pub(super) fn misdirected(&self, tls: bool, sni: Option<&str>, authority: &str) -> bool {
        tls && self
            .tls
            .as_ref()
            .is_some_and(|r| r.misdirected(sni, authority))
    }
}

/// Per-request state.
#[derive(Debug)]
pub struct RequestCtx {
    pub(super) upstream: Option<Arc<Upstream>>,
    pub(super) endpoint: Option<Arc<Endpoint>>,
    pub(super) tried: Tried,
    pub(super) upstream_started: Option<Instant>,
    /// Request body bytes allowed (0: no limit) and seen so far.
    pub(super) body_limit: u64,
    pub(super) body_seen: u64,
    /// The tenant's connection slot, held until the request (or the
    /// upgraded connection) ends.
    tenant: Option<TenantPermit>,
    _in_flight: InFlight,
    started: Instant,
    pub(super) series: Option<Arc<Series>>,
    /// `tenant \x1f route \x1f request id \x1f traceparent`, as the HTTP/1
    /// engine's tag (crate::plane::h1).
    tag: Option<Arc<str>>,
    pub(super) new_request_id: bool,
    pub(super) new_traceparent: bool,
    /// Why teapot answered itself, for the access log.
    reason: Option<&'static str>,
    /// The Gateway API filters of the matched rule.
    pub(super) gateway: Option<GatewayForward>,
}

impl RequestCtx {
    pub(super) fn field(&self, i: usize) -> Option<&str> {
        self.tag.as_deref().and_then(|t| t.split('\x1f').nth(i))
    }
}

/// Headers that belong to one connection, never forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 7] = [
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "proxy-authenticate",
    "proxy-authorization",
];

#[async_trait]
impl ProxyHttp for Router {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx {
            upstream: None,
            endpoint: None,
            tried: Tried::default(),
            upstream_started: None,
            body_limit: 0,
            body_seen: 0,
            tenant: None,
            _in_flight: self.metrics.request_started(),
            started: Instant::now(),
            series: None,
            tag: None,
            new_request_id: false,
            new_traceparent: false,
            reason: None,
            gateway: None,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let declared = match self.front_door(session) {
            Ok(declared) => declared,
            Err(refusal) => {
                self.metrics.refused(refusal);
                ctx.reason = Some(refusal.label());
                self.h2_ids(session, ctx, None);
                // Whatever follows a refused header cannot be trusted to be
                // a request boundary: never read another request from it.
                session.set_keepalive(None);
                respond(session, refusal.status(), refusal.body()).await?;
                return Ok(true);
            }
        };
        let req = session.req_header();
        let head = Head {
            host_headers: req.headers.get_all(HOST).iter().count(),
            authority: authority(req),
            path: req.uri.path(),
            requires_host: req.version == http::Version::HTTP_11,
            declared_length: declared,
        };
        if let Err(answer) = check_host(&head) {
            ctx.reason = Some(answer.reason);
            self.h2_ids(session, ctx, None);
            self.answer(session, answer).await?;
            return Ok(true);
        }
        let ssl = session.digest().and_then(|d| d.ssl_digest.as_deref());
        let sni = ssl.and_then(crate::plane::tls::server_name);
        if self.misdirected(ssl.is_some(), sni, head.authority) {
            ctx.reason = Some(MISDIRECTED.reason);
            self.h2_ids(session, ctx, None);
            self.answer(session, MISDIRECTED).await?;
            return Ok(true);
        }
        // HTTP-01 validation, before routing, on either listener (a CA
        // follows redirects to HTTPS). A token that is not ours goes on to
        // the routes: a tenant may run its own ACME client behind us.
        if let Some(acme) = &self.acme
            && let Some(token) = head
                .path
                .strip_prefix(crate::compile::acme::CHALLENGE_PREFIX)
            && let Some(answer) = acme.challenge_response(token).await
        {
            ctx.reason = Some("acme_challenge");
            self.h2_ids(session, ctx, None);
            respond_with(session, 200, Bytes::from(answer)).await?;
            return Ok(true);
        }
        let decision = {
            let req = session.req_header();
            let facts = RequestFacts {
                method: req.method.as_str(),
                query: Some(req.uri.query().unwrap_or("")),
                headers: Some(&req.headers),
                tls: Some(ssl.is_some()),
            };
            decide_request(&self.snapshots.load(), &self.edge, &head, &facts)
        };
        match decision {
            Decision::Forward(forward) => {
                if let Some(gateway) = &forward.gateway {
                    self.mirror(session.req_header(), gateway);
                }
                self.h2_ids(session, ctx, Some(&forward.route));
                ctx.upstream = Some(forward.upstream);
                ctx.body_limit = forward.body_limit;
                ctx.tenant = forward.tenant;
                ctx.gateway = forward.gateway;
                // HTTP/1 backends are teapot's own exchange
                // (crate::plane::h2_upstream); h2c backends stay on
                // Pingora's path.
                if session.req_header().version == http::Version::HTTP_2
                    && session.req_header().method != Method::CONNECT
                    && !ctx.gateway.as_ref().is_some_and(|g| g.h2c)
                {
                    crate::plane::h2_upstream::forward(self, session, ctx).await?;
                    return Ok(true);
                }
                Ok(false)
            }
            Decision::Answer(answer, route) => {
                ctx.reason = Some(answer.reason);
                self.h2_ids(session, ctx, route.as_ref());
                self.answer(session, answer).await?;
                Ok(true)
            }
        }
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        // Chunked and HTTP/2 bodies announce no length up front.
        if let Some(chunk) = body {
            ctx.body_seen += chunk.len() as u64;
            if ctx.body_limit > 0 && ctx.body_seen > ctx.body_limit {
                self.metrics.refused(Refusal::BodyTooLarge);
                return Error::e_explain(ErrorType::HTTPStatus(413), "request body too large");
            }
        }
        Ok(())
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        let upstream = ctx
            .upstream
            .as_ref()
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "no upstream chosen"))?;
        let endpoint = upstream
            .pick(&mut ctx.tried)
            .ok_or_else(|| Error::explain(ErrorType::ConnectNoRoute, "every endpoint was tried"))?;
        let mut peer = HttpPeer::new(endpoint.addr, false, String::new());
        peer.options.connection_timeout = Some(self.options.connect_timeout);
        peer.options.read_timeout = Some(self.read_timeout(ctx));
        if ctx.gateway.as_ref().is_some_and(|g| g.h2c) {
            // Prior knowledge: HTTP/2 without TLS, no HTTP/1 fallback.
            peer.options.set_http_version(2, 2);
        }
        peer.options.write_timeout = Some(self.options.write_timeout);
        peer.options.idle_timeout = Some(self.options.pool_idle_timeout);
        ctx.endpoint = Some(endpoint.clone());
        ctx.upstream_started = Some(Instant::now());
        Ok(Box::new(peer))
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        peer: &HttpPeer,
        ctx: &mut RequestCtx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        self.metrics.upstream_connect_failures.inc();
        if let Some(series) = &ctx.series {
            series.connect_failures.inc();
        }
        if let Some(endpoint) = &ctx.endpoint {
            endpoint.eject();
        }
        let total = ctx.upstream.as_ref().map_or(0, |u| u.endpoints.len()) as u32;
        let attempts = ctx.tried.count();
        tracing::warn!(peer = %peer, attempts, error = %e, "upstream connect failed; endpoint ejected");
        // Nothing was sent yet, so any method may go to another endpoint.
        if attempts < total.min(self.options.max_connect_attempts) {
            e.set_retry(true);
        }
        e
    }

    async fn connected_to_upstream(
        &self,
        _session: &mut Session,
        _reused: bool,
        _peer: &HttpPeer,
        #[cfg(unix)] _fd: std::os::unix::io::RawFd,
        #[cfg(windows)] _sock: std::os::windows::io::RawSocket,
        _digest: Option<&pingora_core::protocols::Digest>,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if let Some(endpoint) = &ctx.endpoint {
            endpoint.mark_healthy();
        }
        Ok(())
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        self.edit_upstream_request(session, upstream_request, ctx)
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        _upstream_response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if let Some(started) = ctx.upstream_started.take() {
            self.metrics
                .upstream_latency
                .observe(started.elapsed().as_secs_f64());
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        self.edit_response(response, ctx)
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        _ctx: &mut RequestCtx,
    ) -> FailToProxy {
        let code = match e.etype() {
            ErrorType::HTTPStatus(code) => *code,
            _ => match e.esource() {
                ErrorSource::Upstream => match e.etype() {
                    ErrorType::ConnectTimedout
                    | ErrorType::ReadTimedout
                    | ErrorType::WriteTimedout => 504,
                    _ => 502,
                },
                ErrorSource::Downstream if client_went_away(e) => 0,
                ErrorSource::Downstream => 400,
                ErrorSource::Internal | ErrorSource::Unset => 500,
            },
        };
        if code > 0 {
            let body = match code {
                502 => BAD_GATEWAY_BODY,
                504 => GATEWAY_TIMEOUT_BODY,
                400 => "400 bad request\n",
                413 => Refusal::BodyTooLarge.body(),
                _ => "error\n",
            };
            if let Ok(resp) = error_response(code, body.len()) {
                let _ = session
                    .as_downstream_mut()
                    .write_error_response(resp, Bytes::from_static(body.as_bytes()))
                    .await;
            }
        }
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    /// A client that closes its connection before its answer is normal
    /// traffic (a closed tab, a timed-out health probe): Pingora would log
    /// each one as ERROR "Fail to proxy", which at the edge buries the
    /// errors an operator must see. Counted instead.
    fn suppress_error_log(&self, _session: &Session, _ctx: &RequestCtx, e: &Error) -> bool {
        let gone = client_went_away(e);
        if gone {
            self.metrics.client_aborts.inc();
        }
        gone
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        if status != 0 {
            self.metrics.count_response(status);
        }
        let series = ctx
            .series
            .clone()
            .unwrap_or_else(|| self.metrics.series.get(None, ""));
        let duration = ctx.started.elapsed();
        let bytes_in = session.body_bytes_read() as u64;
        let bytes_out = session.body_bytes_sent() as u64;
        series.count(status, duration.as_secs_f64(), bytes_in, bytes_out);
        let reason = ctx.reason.or_else(|| e.map(error_reason));
        let log = &self.observe.access_log;
        if !log.wants(status, reason.is_some()) {
            return;
        }
        let req = session.req_header();
        let path = req.uri.path_and_query().map_or("/", |p| p.as_str());
        let host = authority(req);
        let mut entry = Entry::http(
            req.method.as_str(),
            path,
            (!host.is_empty()).then_some(host),
            log.keeps_query(),
        );
        entry.tag = ctx.tag.clone();
        entry.protocol = if req.version == http::Version::HTTP_2 {
            "h2"
        } else {
            "h1"
        };
        let ssl = session.digest().and_then(|d| d.ssl_digest.as_deref());
        entry.tls = ssl.map(|d| tls_version(&d.version));
        entry.sni = ssl.and_then(crate::plane::tls::server_name).map(Arc::from);
        entry.status = status;
        entry.bytes_in = bytes_in;
        entry.bytes_out = bytes_out;
        entry.duration = duration;
        entry.upstream = ctx.endpoint.as_ref().map(|e| e.addr);
        entry.retries = ctx.tried.count().saturating_sub(1);
        entry.client = session.client_addr().and_then(|a| a.as_inet()).copied();
        entry.reason = reason;
        log.send(entry);
    }
}

impl Router {
    /// The edits of an HTTP/2 request before it goes to its backend: new
    /// request IDs, hop-by-hop fields, Gateway filters, forwarding fields.
    pub(super) fn edit_upstream_request(
        &self,
        session: &Session,
        upstream_request: &mut RequestHeader,
        ctx: &RequestCtx,
    ) -> Result<()> {
        if ctx.new_request_id
            && let Some(id) = ctx.field(2)
        {
            upstream_request.insert_header(trace::REQUEST_ID, id.to_string())?;
        }
        if ctx.new_traceparent
            && let Some(tp) = ctx.field(3)
        {
            upstream_request.insert_header(trace::TRACEPARENT, tp.to_string())?;
        }
        let upgrade = session.is_upgrade_req();
        // Almost no request carries a hop-by-hop header: look before
        // building the list and removing (each removal scans the header
        // table, and this runs on every request).
        if has_hop_by_hop(&upstream_request.headers) {
            strip_hop_by_hop(upstream_request.headers.get_all(CONNECTION).iter(), upgrade)
                .into_iter()
                .for_each(|h| {
                    upstream_request.remove_header(&h);
                });
            if !upgrade {
                upstream_request.remove_header(&CONNECTION);
                upstream_request.remove_header(&UPGRADE);
            }
        }
        if upgrade {
            upstream_request.insert_header(CONNECTION, "upgrade")?;
        }
        if let Some(gateway) = &ctx.gateway {
            apply_request_filters(gateway, upstream_request)?;
        }
        let client_ip = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip().to_string());
        let local_port = session
            .server_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.port());
        let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some());
        let host = authority(session.req_header()).to_string();
        for (name, value) in forwarding_headers(client_ip, tls, &host, local_port) {
            match value {
                Some(v) => upstream_request.insert_header(name, v)?,
                None => {
                    upstream_request.remove_header(name);
                }
            }
        }
        Ok(())
    }

    /// The edits of a backend's response: Gateway filters, hop-by-hop
    /// fields, `Server`.
    pub(super) fn edit_response(
        &self,
        response: &mut ResponseHeader,
        ctx: &RequestCtx,
    ) -> Result<()> {
        if let Some(gateway) = &ctx.gateway {
            for f in gateway.each() {
                filters::apply_header_edits(&f.response_headers, &mut Response(response));
            }
        }
        let switching = response.status.as_u16() == 101;
        if has_hop_by_hop(&response.headers) {
            for h in strip_hop_by_hop(response.headers.get_all(CONNECTION).iter(), switching) {
                response.remove_header(&h);
            }
            if !switching {
                response.remove_header(&CONNECTION);
                response.remove_header(&UPGRADE);
            }
        }
        if !response.headers.contains_key(SERVER) {
            response.insert_header(SERVER, SERVER_NAME)?;
        }
        Ok(())
    }

    /// How long to wait for the backend's answer: Gateway API timeouts
    /// bound it (`request` also covers it: teapot adds no other wait
    /// between the request and the backend).
    pub(super) fn read_timeout(&self, ctx: &RequestCtx) -> Duration {
        let mut read = self.options.read_timeout;
        if let Some(gateway) = &ctx.gateway {
            for f in gateway.each() {
                for t in [f.backend_timeout, f.request_timeout].into_iter().flatten() {
                    read = read.min(t);
                }
            }
        }
        read
    }
}

/// The access log's reason for a request Pingora ended with an error.
fn error_reason(e: &Error) -> &'static str {
    match (e.esource(), e.etype()) {
        (_, ErrorType::HTTPStatus(413)) => "body_too_large",
        (ErrorSource::Upstream, ErrorType::ConnectTimedout) => "upstream_connect_timeout",
        (ErrorSource::Upstream, ErrorType::ReadTimedout | ErrorType::WriteTimedout) => {
            "upstream_read_timeout"
        }
        (ErrorSource::Upstream, _) => "upstream_error",
        (_, ErrorType::ConnectNoRoute | ErrorType::ConnectRefused | ErrorType::ConnectError) => {
            "upstream_connect"
        }
        _ if client_went_away(e) => "client_abort",
        (ErrorSource::Downstream, _) => "client_error",
        _ => "internal_error",
    }
}

/// A TLS version as the access log spells it (HTTP/2 here, HTTP/1 in
/// crate::plane::h1).
pub(crate) fn tls_version(version: &str) -> &'static str {
    if version.contains("1.3") || version.contains("1_3") {
        "TLSv1.3"
    } else if version.contains("1.2") || version.contains("1_2") {
        "TLSv1.2"
    } else {
        "tls"
    }
}

/// The client closed or broke its connection: there is nobody to answer.
fn client_went_away(e: &Error) -> bool {
    *e.esource() == ErrorSource::Downstream
        && matches!(
            e.etype(),
            ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed
        )
}

/// A Gateway API rule's request filters: header edits, then the URL
/// rewrite (host and path).
fn apply_request_filters(gateway: &GatewayForward, req: &mut RequestHeader) -> Result<()> {
    for f in gateway.each() {
        filters::apply_header_edits(&f.request_headers, &mut Request(req));
        if let Some(host) = filters::rewritten_host(f) {
            req.insert_header(HOST, host)?;
        }
        let target = filters::rewritten_target(f, req.uri.path(), req.uri.query());
        let host = filters::rewritten_host(f);
        if target.is_none() && host.is_none() {
            continue;
        }
        let target = target.unwrap_or_else(|| {
            req.uri
                .path_and_query()
                .map_or("/".to_string(), |p| p.as_str().to_string())
        });
        // An HTTP/2 request carries its authority in the URI: keep the
        // URI absolute then, with the rewritten host.
        let uri = match (req.uri.scheme_str(), req.uri.authority()) {
            (Some(scheme), Some(authority)) => {
                let authority = host.unwrap_or(authority.as_str());
                format!("{scheme}://{authority}{target}")
            }
            _ => target,
        };
        let uri = uri
            .parse::<http::Uri>()
            .map_err(|e| Error::because(ErrorType::InternalError, "URL rewrite", e))?;
        req.set_uri(uri);
    }
    Ok(())
}

/// Pingora's request header as a [`HeaderList`].
struct Request<'a>(&'a mut RequestHeader);

impl HeaderList for Request<'_> {
    fn get(&self, name: &str) -> Option<&[u8]> {
        self.0.headers.get(name).map(|v| v.as_bytes())
    }
    fn set(&mut self, name: &str, value: &[u8]) {
        // Names and values were validated at load; one that still does
        // not fit a header is skipped rather than failing the request.
        let _ = self.0.insert_header(name.to_string(), value);
    }
    fn remove(&mut self, name: &str) {
        self.0.remove_header(name);
    }
}

/// Pingora's response header as a [`HeaderList`].
struct Response<'a>(&'a mut ResponseHeader);

impl HeaderList for Response<'_> {
    fn get(&self, name: &str) -> Option<&[u8]> {
        self.0.headers.get(name).map(|v| v.as_bytes())
    }
    fn set(&mut self, name: &str, value: &[u8]) {
        let _ = self.0.insert_header(name.to_string(), value);
    }
    fn remove(&mut self, name: &str) {
        self.0.remove_header(name);
    }
}

/// The authority that decides routing: HTTP/2 `:authority` wins over a
/// `host` header (RFC 9113 §8.3.1). For an HTTP/1 absolute-form target
/// Pingora keeps the authority out of the URI and rewrites the upstream
/// target to match `Host`, so routing on `Host` is what the backend sees.
pub(super) fn authority(req: &RequestHeader) -> &str {
    if let Some(a) = req.uri.authority() {
        return a.as_str();
    }
    req.headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
}

/// Whether any header [`strip_hop_by_hop`] would drop may be present.
pub(super) fn has_hop_by_hop(headers: &http::HeaderMap) -> bool {
    headers.contains_key(CONNECTION) || HOP_BY_HOP.iter().any(|h| headers.contains_key(*h))
}

/// Names of headers to drop: the fixed hop-by-hop set plus whatever the
/// `Connection` header lists. `Upgrade` survives on upgrades.
fn strip_hop_by_hop<'a>(
    connection: impl Iterator<Item = &'a http::HeaderValue>,
    keep_upgrade: bool,
) -> Vec<HeaderName> {
    let mut out: Vec<HeaderName> = HOP_BY_HOP
        .iter()
        .filter(|h| !(keep_upgrade && **h == "upgrade"))
        .map(|h| HeaderName::from_static(h))
        .collect();
    for value in connection {
        for token in value.to_str().unwrap_or("").split(',') {
            let token = token.trim();
            if token.is_empty()
                || token.eq_ignore_ascii_case("close")
                || token.eq_ignore_ascii_case("keep-alive")
                || (keep_upgrade && token.eq_ignore_ascii_case("upgrade"))
            {
                continue;
            }
            if let Ok(name) = HeaderName::from_bytes(token.to_ascii_lowercase().as_bytes()) {
                // Never let a client name the framing or routing headers.
                if name != HOST && name != CONTENT_LENGTH && name != http::header::TRANSFER_ENCODING
                {
                    out.push(name);
                }
            }
        }
    }
    out
}

fn error_response(status: u16, len: usize) -> Result<ResponseHeader> {
    let mut resp = ResponseHeader::build(status, Some(4))?;
    resp.insert_header(SERVER, SERVER_NAME)?;
    resp.insert_header(CONTENT_TYPE, "text/plain; charset=utf-8")?;
    resp.insert_header(CONTENT_LENGTH, len.to_string())?;
    Ok(resp)
}

/// A small response the proxy makes itself, keeping the connection alive.
async fn respond(session: &mut Session, status: u16, body: &'static str) -> Result<()> {
    respond_with(session, status, Bytes::from_static(body.as_bytes())).await
}

async fn respond_with(session: &mut Session, status: u16, body: Bytes) -> Result<()> {
    send_answer(session, error_response(status, body.len())?, body).await
}

async fn send_answer(session: &mut Session, resp: ResponseHeader, body: Bytes) -> Result<()> {
    let head_only = session.req_header().method == Method::HEAD;
    session
        .write_response_header(Box::new(resp), head_only)
        .await?;
    if !head_only {
        session.write_response_body(Some(body), true).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_includes_connection_listed_headers() {
        let v = http::HeaderValue::from_static("close, X-Secret, upgrade, Host");
        let names = strip_hop_by_hop(std::iter::once(&v), false);
        assert!(names.iter().any(|n| n == "x-secret"));
        assert!(names.iter().any(|n| n == "upgrade"));
        assert!(!names.iter().any(|n| n == "host"));
        let names = strip_hop_by_hop(std::iter::once(&v), true);
        assert!(!names.iter().any(|n| n == "upgrade"));
    }

    #[test]
    fn hop_by_hop_is_detected_before_stripping() {
        let mut headers = http::HeaderMap::new();
        headers.insert(HOST, http::HeaderValue::from_static("a.example"));
        headers.insert("x-custom", http::HeaderValue::from_static("1"));
        assert!(!has_hop_by_hop(&headers));
        headers.insert("te", http::HeaderValue::from_static("trailers"));
        assert!(has_hop_by_hop(&headers));
        headers.remove("te");
        headers.insert(CONNECTION, http::HeaderValue::from_static("x-custom"));
        assert!(has_hop_by_hop(&headers));
    }

    #[test]
    fn authority_prefers_the_target() {
        // HTTP/2 puts `:authority` into the URI.
        let mut req = RequestHeader::build("GET", b"/x", None).unwrap();
        req.set_uri("https://a.example/x".parse().unwrap());
        req.insert_header(HOST, "b.example").unwrap();
        assert_eq!(authority(&req), "a.example");
        let mut req = RequestHeader::build("GET", b"/x", None).unwrap();
        req.insert_header(HOST, "b.example:8080").unwrap();
        assert_eq!(authority(&req), "b.example:8080");
    }
}
