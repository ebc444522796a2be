//! HTTP/2 requests to HTTP/1 backends, exchanged by teapot itself
//! (crate::plane::h2 serves the client's side): the request head written
//! as bytes to a connection from this thread's pool, the body streamed,
//! and the response head and body framing read and re-validated here.
//! docs/edge.md, "HTTP/2 to HTTP/1 backends".
//!
//! GRPCRoute's h2c backends are crate::plane::h2c_upstream's. An HTTPS
//! backend (`backend-protocol: HTTPS`) is the same exchange over TLS
//! (crate::live::upstream_tls), its connections pooled apart.

use std::cell::OnceCell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::request::Parts;
use http::{HeaderMap, Method, Response, Uri};
use teapot_h1::{
    BodyFraming, BodyLength, ConnInfo, ConnectError, Failed, Pool, RequestHeadWriter, RetryPolicy,
    Transport, Tries, UpstreamConn, Verdict,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::compile::upstream::{Tried, Upstream};
use crate::live::endpoints::Endpoint;
use crate::plane::backend_answer::{Chunked, parse_response};
use crate::plane::buffering_h2::{Rest, send};
use crate::plane::forwarding;
use crate::plane::h2_stream::{Failure, StreamCtx, authority};
use crate::plane::logflood::EndpointLog;
use crate::plane::proxy::{self, Router, has_hop_by_hop};
use crate::plane::trace;
use crate::plane::trace::Ids;

/// Idle connections kept per backend address and serving thread.
const MAX_IDLE_PER_UPSTREAM: usize = 256;
const READ_SIZE: usize = 16 * 1024;

thread_local! {
    /// Serving is thread per core (crate::plane::serving), and an HTTP/2
    /// stream runs on the thread that accepted its connection: one pool
    /// per thread needs no lock contention and no cross-thread wake-up.
    static POOL: OnceCell<Pool> = const { OnceCell::new() };
}

fn with_pool<T>(idle_timeout: Duration, f: impl FnOnce(&Pool) -> T) -> T {
    POOL.with(|p| f(p.get_or_init(|| Pool::new(MAX_IDLE_PER_UPSTREAM, idle_timeout))))
}

/// Whether a request with this method may be sent again after its
/// connection failed (RFC 9110 §9.2.2).
pub(super) fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// How an exchange failed: `stale` when nothing came back from the
/// backend and nothing of the request body was consumed, so an
/// idempotent request may be sent again on a fresh connection; `retry`
/// when the route's retry policy may send it again (nothing went to the
/// client yet), and as what.
struct Stale {
    failure: Failure,
    stale: bool,
    retry: Option<Failed>,
    /// A retried answer was read whole: its connection may be pooled.
    reusable: bool,
}

impl From<Failure> for Stale {
    fn from(failure: Failure) -> Self {
        Stale {
            failure,
            stale: false,
            retry: None,
            reusable: false,
        }
    }
}

impl Stale {
    /// A failure before anything went to the client: retryable as what
    /// it is.
    fn before_answer(failure: Failure, stale: bool) -> Self {
        let retry = Some(match failure {
            Failure::ReadTimeout => Failed::Timeout,
            _ => Failed::Closed,
        });
        Stale {
            failure,
            stale,
            retry,
            reusable: false,
        }
    }
}

/// The route's retry policy, if any: a Gateway API rule's `retry` (the
/// last one set, as the HTTP/1 engine takes it), else the route's
/// `proxy-next-upstream*`.
pub(super) fn retry_policy(st: &StreamCtx<'_>) -> Option<Arc<RetryPolicy>> {
    let gateway = st.gateway.as_ref();
    gateway
        .and_then(|g| g.each().filter_map(|f| f.retry.clone()).last())
        .or_else(|| st.policy.as_ref().and_then(|p| p.retry.clone()))
}

/// A retry is about to begin: with `again`, the endpoints already tried
/// may be picked again once every one was; `false` when none is left to
/// try (without `again`: every endpoint was tried). [`Tried`] marks the
/// first 64 endpoints only, so a larger upstream always has one left.
pub(super) fn new_try(tried: &mut Tried, endpoints: usize, again: bool) -> bool {
    if (tried.count() as usize) < endpoints.min(64) || endpoints > 64 {
        return true;
    }
    if again {
        *tried = Tried::default();
    }
    again && endpoints > 0
}

/// How a failed connect counts for the retry policy.
pub(super) fn connect_failed(failure: &Failure) -> Failed {
    match failure {
        Failure::ConnectTimeout => Failed::ConnectTimeout,
        _ => Failed::Connect,
    }
}

/// Forwards the stream's request (already routed into `st`) to an HTTP/1
/// backend and writes its response; an `Err` is answered by the caller
/// (502, 504, 413) when no response head went out yet, or else ends with
/// the stream reset.
pub(super) async fn forward(
    router: &Router,
    parts: &Parts,
    conn: &ConnInfo,
    st: &mut StreamCtx<'_>,
) -> Result<(), Failure> {
    let has_body = !st.client.body.is_empty();
    let chunked = has_body && !parts.headers.contains_key(CONTENT_LENGTH);
    // `proxy-http-version`, `connection-proxy-header` (crate::compile::upstream_http).
    let http = st.policy.as_ref().and_then(|p| p.upstream_http.clone());
    let http = http.as_deref().unwrap_or(&teapot_h1::UpstreamHttp::DEFAULT);
    let mut head = Vec::with_capacity(512 + parts.headers.len() * 32);
    let policy_edits = crate::plane::traffic::engines::h2_edits_request(st.policy.as_deref());
    if st.gateway.is_some() || has_hop_by_hop(&parts.headers) || policy_edits {
        // Gateway filters and hop-by-hop fields edit the head in ways
        // only a header map follows exactly: the rare case.
        let (headers, uri) = edited_request(parts, conn, st)?;
        request_head(&parts.method, &uri, &headers, (chunked, http), &mut head);
    } else {
        direct_head(
            parts,
            st.uri(parts),
            st.ids.as_ref(),
            conn,
            (chunked, http),
            &mut head,
        );
    }
    // `proxy-request-buffering`, `proxy-buffering` (crate::plane::buffering_h2).
    let mut held = crate::plane::buffering_h2::hold(router, parts, st).await?;
    let chunked = held.behind(&mut head, chunked);
    if chunked && !http.takes_unknown_length() {
        // An HTTP/1.0 backend is sent a body of unknown length only held
        // whole, with its length.
        st.reason = Some("length_required");
        return st.client.out.answer(parts, 411, LENGTH_REQUIRED, &[]);
    }
    // A body held whole is in `head`: each try sends it again, as the
    // HTTP/1 engine does, nothing left to read from the client.
    let has_body = has_body && !held.whole();
    let upstream = st
        .upstream
        .clone()
        .ok_or(Failure::Upstream("no upstream chosen"))?;
    let head_request = parts.method == Method::HEAD;
    let may_retry = idempotent(&parts.method) && !has_body;
    let o = &router.options;
    let (connect_timeout, read, write) = crate::plane::traffic::engines::upstream_timeouts(
        st.policy.as_deref(),
        (
            o.connect_timeout,
            router.read_timeout(st.gateway.as_ref()),
            o.write_timeout,
        ),
    );
    let timeouts = Timeouts { read, write };
    let idle = router.options.pool_idle_timeout;
    let class = upstream
        .protocol
        .tls()
        .map_or(teapot_h1::pool::PLAIN, |t| t.class());
    let mut retry_on: Option<Arc<Endpoint>> = None;
    // The route's retry policy, for a request without a body to read (a
    // streamed HTTP/2 body is never held to be sent twice; a buffered one
    // held whole goes with the head).
    let route_retry = retry_policy(st);
    let retry = route_retry
        .clone()
        .filter(|p| p.may_resend(idempotent(&parts.method), !has_body));
    // How a connection error is answered once no try is left.
    let spent = (route_retry.as_deref(), head_request);
    let mut tries = retry
        .as_ref()
        .map(|_| Tries::new(tokio::time::Instant::now()));
    // A policy retrying connection errors counts every try: then no try
    // goes uncounted as a stale pooled connection's.
    let may_retry = may_retry && !retry.as_ref().is_some_and(|p| p.on_error);
    let mut fresh = false;
    loop {
        let connected = match retry_on.take() {
            Some(endpoint) => match open(router, st, &upstream, &endpoint, connect_timeout).await {
                Ok(s) => Ok((s, false, endpoint)),
                Err(e) => {
                    failed(router, st, &upstream, &endpoint, &e);
                    Err(e.failure)
                }
            },
            None => connect(router, st, &upstream, idle, connect_timeout).await,
        };
        let (mut stream, reused, endpoint) = match connected {
            Ok(c) => c,
            Err(failure) => {
                let failed = connect_failed(&failure);
                match after_try(retry.as_deref(), &mut tries, failed, st, &upstream).await {
                    Some(Verdict::Retry(_)) => continue,
                    Some(Verdict::Expired) => return Err(Failure::ReadTimeout),
                    _ => return answer_error(st, spent, failed, failure),
                }
            }
        };
        let mut timeouts = timeouts;
        let mut hold = None;
        if let (Some(policy), Some(t)) = (retry.as_deref(), &tries) {
            let now = tokio::time::Instant::now();
            timeouts.read = policy.try_timeout(t, timeouts.read, now);
            let more = endpoint_left(st, &upstream, policy.same_endpoint_again);
            hold = Some((policy, *t, more));
        }
        let exchange = Exchange {
            head: &head,
            has_body,
            chunked,
            head_request,
            timeouts,
            hold,
            ahead: held.ahead,
        };
        // A body read ahead of the client (`proxy-buffering`).
        let mut rest = Rest::default();
        match exchange.run(router, st, &mut stream, &mut rest).await {
            Ok(_) if rest.relays_body() => {
                let release = |stream, reusable: bool| {
                    if reusable && http.reuses() {
                        let now = tokio::time::Instant::now();
                        with_pool(idle, |p| p.put_at(endpoint.addr, class, stream, now));
                    }
                };
                return rest.relay(&mut st.client.out, stream, release).await;
            }
            Ok(true) if http.reuses() => {
                with_pool(idle, |p| {
                    p.put_at(endpoint.addr, class, stream, tokio::time::Instant::now())
                });
                return Ok(());
            }
            Ok(_) => return Ok(()),
            Err(f) if f.stale && reused && may_retry && !fresh => {
                tracing::debug!(addr = %endpoint.addr, error = %f.failure, "pooled upstream connection was stale; retrying once");
                retry_on = Some(endpoint);
                fresh = true;
            }
            Err(Stale {
                failure,
                retry: Some(failed),
                reusable,
                ..
            }) if tries.is_some() => {
                if reusable && http.reuses() {
                    // As the HTTP/1 engine: the retry may take it again.
                    let now = tokio::time::Instant::now();
                    with_pool(idle, |p| p.put_at(endpoint.addr, class, stream, now));
                } else {
                    drop(stream);
                }
                match after_try(retry.as_deref(), &mut tries, failed, st, &upstream).await {
                    Some(Verdict::Retry(_)) => fresh = false,
                    Some(Verdict::Expired) => return Err(Failure::ReadTimeout),
                    _ => return answer_error(st, spent, failed, failure),
                }
            }
            Err(Stale {
                failure,
                retry: Some(failed),
                ..
            }) => return answer_error(st, spent, failed, failure),
            Err(f) => return Err(f.failure),
        }
    }
}

/// The body of a connection error's answer on a route whose retry
/// policy sets its status, as the HTTP/1 engine writes it.
const RETRIES_FAILED: &str = "the backend could not be reached or closed the connection\n";

/// `failure` answered with the route's retry policy's own status for a
/// connection error (the Gateway API's 503), else left to the caller
/// (502, 504).
pub(super) fn answer_error(
    st: &mut StreamCtx<'_>,
    (policy, head_request): (Option<&RetryPolicy>, bool),
    failed: Failed,
    failure: Failure,
) -> Result<(), Failure> {
    let Some(status) = policy.and_then(|p| p.error_status(failed)) else {
        return Err(failure);
    };
    st.reason.get_or_insert(failure.reason());
    let cors: Vec<(http::HeaderName, &[u8])> =
        crate::plane::traffic::cors::of_forward(st.policy.as_deref())
            .map(|(n, v)| (http::HeaderName::from_static(n), v.as_bytes()))
            .collect();
    let body = Bytes::from_static(RETRIES_FAILED.as_bytes());
    st.client.out.answer_with(status, body, &cors, head_request)
}

/// The retry policy's verdict on a try that ended as `failed`
/// (teapot_h1::retry, as the HTTP/1 engine asks it); `None` without a
/// policy. Before a retry the endpoints are made ready for a new try
/// (none left: the last answer stands) and the backoff is waited out.
pub(super) async fn after_try(
    policy: Option<&RetryPolicy>,
    tries: &mut Option<Tries>,
    failed: Failed,
    st: &mut StreamCtx<'_>,
    upstream: &Upstream,
) -> Option<Verdict> {
    let (Some(policy), Some(tries)) = (policy, tries.as_mut()) else {
        return None;
    };
    let verdict = policy.decide(tries, failed, tokio::time::Instant::now());
    if let Verdict::Retry(wait) = verdict {
        let endpoints = upstream.endpoints.load().len();
        if !new_try(&mut st.tried, endpoints, policy.same_endpoint_again) {
            return Some(Verdict::Last);
        }
        tracing::debug!(?failed, retry = tries.retried(), "retrying the request");
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
    Some(verdict)
}

/// Whether a retry would find an endpoint to send the request to: one
/// not tried yet, or any with `again` (see [`new_try`]).
pub(super) fn endpoint_left(st: &StreamCtx<'_>, upstream: &Upstream, again: bool) -> bool {
    again || (st.tried.count() as usize) < upstream.endpoints.load().len().min(64)
}

/// Whether a final answer with `status` is held back, not relayed: the
/// route's policy (with the request's tries so far, and `more`: an
/// endpoint left, [`endpoint_left`]) sends the request again, or answers
/// 504 as its budget is spent. Asked before anything of the answer goes
/// to the client; [`after_try`] then decides the same.
pub(super) fn holds_back(hold: Option<(&RetryPolicy, Tries, bool)>, status: u16) -> bool {
    let Some((policy, mut tries, more)) = hold else {
        return false;
    };
    let now = tokio::time::Instant::now();
    more && policy.decide(&mut tries, Failed::Status(status), now) != Verdict::Last
}

/// An endpoint of `upstream` and a connection to it: a pooled one, or a
/// new one, trying further endpoints (each failed one ejected, unless it
/// answered and only the TLS handshake failed).
async fn connect(
    router: &Router,
    st: &mut StreamCtx<'_>,
    upstream: &Arc<Upstream>,
    idle: Duration,
    connect_timeout: Duration,
) -> Result<(UpstreamConn, bool, Arc<Endpoint>), Failure> {
    let class = upstream
        .protocol
        .tls()
        .map_or(teapot_h1::pool::PLAIN, |t| t.class());
    loop {
        let endpoint = next_endpoint(st, upstream)?;
        let now = tokio::time::Instant::now();
        if let Some(stream) = with_pool(idle, |p| p.take_at(endpoint.addr, class, now)) {
            endpoint.mark_healthy();
            return Ok((stream, true, endpoint));
        }
        match open(router, st, upstream, &endpoint, connect_timeout).await {
            Ok(stream) => return Ok((stream, false, endpoint)),
            Err(e) if another_endpoint(router, st, upstream, &endpoint, &e) => continue,
            Err(e) => return Err(e.failure),
        }
    }
}

/// Why a new upstream connection failed: the TCP connect, or the TLS
/// handshake after it (the endpoint answered: not ejected).
pub(super) struct OpenFailed {
    pub failure: Failure,
    pub handshake: bool,
}

/// A new connection to `endpoint`, secured as `upstream` says (TLS to the
/// backend), within the connect timeout for each step (the one connector,
/// `teapot_h1::connect_upstream`).
pub(super) async fn open(
    router: &Router,
    st: &StreamCtx<'_>,
    upstream: &Upstream,
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<UpstreamConn, OpenFailed> {
    let addr: SocketAddr = endpoint.addr;
    let transport = upstream.protocol.tls().map(|t| &**t as &dyn Transport);
    let connected = || {
        endpoint.mark_healthy();
        EndpointLog::global().connected(addr);
    };
    let e = match teapot_h1::connect_upstream(addr, transport, timeout, connected).await {
        Ok(conn) => return Ok(conn),
        Err(e) => e,
    };
    tracing::debug!(%addr, error = %e, "connecting to the upstream");
    let failure = match e {
        ConnectError::Refused => Failure::Connect("connection refused"),
        ConnectError::Failed(_) => Failure::Connect("connecting to the upstream failed"),
        ConnectError::Handshake(_) => {
            Failure::Connect("the TLS handshake with the upstream failed")
        }
        ConnectError::TimedOut | ConnectError::HandshakeTimedOut => Failure::ConnectTimeout,
    };
    if e.handshake()
        && let Some(series) = &st.series
    {
        router.metrics.series.tls_handshake_failed(series);
    }
    Err(OpenFailed {
        failure,
        handshake: e.handshake(),
    })
}

/// The next endpoint of `upstream` to try (none left: every one was
/// tried), noted in `st` for the log and the latency.
pub(super) fn next_endpoint(
    st: &mut StreamCtx<'_>,
    upstream: &Upstream,
) -> Result<Arc<Endpoint>, Failure> {
    let preferred = st.policy.as_ref().and_then(|p| p.endpoint);
    let endpoint = upstream
        .pick_preferring(preferred, &mut st.tried)
        .ok_or(Failure::Connect("every endpoint was tried"))?
        .clone();
    st.endpoint = Some(endpoint.clone());
    st.upstream_started = Some(Instant::now());
    Ok(endpoint)
}

/// After `endpoint` failed to connect (counted, logged, ejected unless
/// only its TLS handshake failed): whether another endpoint may be tried
/// (`--max-connect-attempts`).
pub(super) fn another_endpoint(
    router: &Router,
    st: &StreamCtx<'_>,
    upstream: &Upstream,
    endpoint: &Endpoint,
    e: &OpenFailed,
) -> bool {
    failed(router, st, upstream, endpoint, e);
    st.tried.count()
        < (upstream.endpoints.load().len() as u32).min(router.options.max_connect_attempts)
}

/// Counts and logs a failed connect, and ejects the endpoint; a failed
/// handshake is logged only (counted in [`open`]): the endpoint answers,
/// and its health is shared with routes that reach it otherwise.
fn failed(
    router: &Router,
    st: &StreamCtx<'_>,
    upstream: &Upstream,
    endpoint: &Endpoint,
    e: &OpenFailed,
) {
    if !e.handshake {
        router.metrics.upstream_connect_failures.inc();
        if let Some(series) = &st.series {
            series.connect_failures.inc();
        }
        endpoint.eject();
    }
    EndpointLog::global().connect_failed(endpoint.addr, &upstream.name, &e.failure);
}

#[derive(Clone, Copy, Debug)]
struct Timeouts {
    read: Duration,
    write: Duration,
}

struct Exchange<'a> {
    head: &'a [u8],
    has_body: bool,
    chunked: bool,
    head_request: bool,
    timeouts: Timeouts,
    /// The retry policy, the request's tries so far and whether an
    /// endpoint is left: an answer it would retry is held back.
    hold: Option<(&'a RetryPolicy, Tries, bool)>,
    /// Response bytes read ahead of the client (`proxy-buffering`).
    ahead: usize,
}

impl Exchange<'_> {
    /// Whether the final answer with `status` is not relayed because the
    /// request will be sent again (or answered 504, its budget spent).
    fn holds_back(&self, status: u16) -> bool {
        holds_back(self.hold, status)
    }
}

impl Exchange<'_> {
    /// One request and its response; `Ok(true)`: the connection may be
    /// pooled again. With `ahead` (`proxy-buffering`), the answer's body
    /// is left in `rest` for the caller to relay, so that the connection
    /// is given back once the body is read, before the client has it.
    async fn run(
        &self,
        router: &Router,
        st: &mut StreamCtx<'_>,
        stream: &mut UpstreamConn,
        rest: &mut Rest,
    ) -> Result<bool, Stale> {
        let t = self.timeouts;
        write(stream, self.head, t.write)
            .await
            .map_err(|failure| Stale::before_answer(failure, true))?;
        let mut buf = BytesMut::with_capacity(READ_SIZE);
        let mut body_sent = !self.has_body;
        let mut received = false;
        let body_limit = st.body_limit;
        // The request body, until its end or until the backend answers
        // early (it may refuse the body: stop sending it then).
        while !body_sent {
            tokio::select! {
                biased;
                got = read_more(stream, &mut buf) => {
                    match got {
                        Ok(0) => return Err(Failure::Upstream("upstream closed before its response").into()),
                        Ok(_) => {
                            received = true;
                            // A `100 Continue` (the client's `Expect` is
                            // forwarded) asks for the body: go on sending
                            // it. A final head (or a broken one) ends it.
                            match parse_response(&buf, self.head_request) {
                                Ok(Some(head)) if head.informational() => buf.advance(head.len),
                                Ok(None) => {}
                                _ => break,
                            }
                        }
                        Err(_) => return Err(Failure::Upstream("reading the upstream response").into()),
                    }
                }
                chunk = st.client.body.read() => {
                    match chunk? {
                        Some(chunk) => {
                            if body_limit > 0 && st.client.body.bytes > body_limit {
                                return Err(Failure::BodyTooLarge.into());
                            }
                            if chunk.is_empty() {
                                continue;
                            }
                            if self.chunked {
                                let mut size = [0u8; 18];
                                let n = chunk_size_line(chunk.len(), &mut size);
                                write(stream, &size[..n], t.write).await?;
                                write(stream, &chunk, t.write).await?;
                                write(stream, b"\r\n", t.write).await?;
                            } else {
                                write(stream, &chunk, t.write).await?;
                            }
                        }
                        None => {
                            if self.chunked {
                                write(stream, b"0\r\n\r\n", t.write).await?;
                            }
                            body_sent = true;
                        }
                    }
                }
            }
        }
        let head = loop {
            match parse_response(&buf, self.head_request) {
                Ok(Some(head)) if head.informational() => buf.advance(head.len),
                Ok(Some(head)) => break head,
                Ok(None) => {
                    let stale = !received && !self.has_body;
                    let n = read(stream, &mut buf, t.read)
                        .await
                        .map_err(|failure| Stale::before_answer(failure, stale))?;
                    if n == 0 {
                        let failure = Failure::Upstream("upstream closed before its response");
                        return Err(Stale::before_answer(failure, stale));
                    }
                    received = true;
                }
                Err(why) => {
                    let mut e = Stale::from(Failure::Upstream(why));
                    e.retry = Some(Failed::BadResponse);
                    return Err(e);
                }
            }
        };
        if self.holds_back(head.status.as_u16()) {
            // Not relayed: the request goes again. The connection is
            // pooled when the request went whole and the answer is
            // already read whole (teapot_h1::retry::answer_read_whole),
            // else it goes with the answer's body unread.
            let mut e = Stale::from(Failure::Upstream("a retried answer"));
            e.retry = Some(Failed::Status(head.status.as_u16()));
            e.reusable = body_sent
                && head.keep_alive
                && teapot_h1::retry::answer_read_whole(head.len, head.framing, buf.len());
            return Err(e);
        }
        if let Some(started) = st.upstream_started.take() {
            router
                .metrics
                .upstream_latency
                .observe(started.elapsed().as_secs_f64());
            crate::plane::traffic::ewma::measure(
                st.policy.as_deref(),
                st.endpoint.as_ref(),
                Some(started),
            );
        }
        if st.replaces(head.status.as_u16()) {
            // Not relayed: the connection goes with its body unread.
            let page = st.error_page(head.status.as_u16(), self.head_request);
            Box::pin(page).await?;
            return Ok(false);
        }
        buf.advance(head.len);
        let framing = head.framing;
        let mut response = Response::new(());
        *response.status_mut() = head.status;
        *response.headers_mut() = head.headers;
        router.edit_response(
            response.status(),
            response.headers_mut(),
            st.gateway.as_ref(),
        );
        crate::plane::traffic::engines::h2_response_edits(
            response.headers_mut(),
            st.policy.as_deref(),
        );
        let done_now = matches!(framing, BodyFraming::None | BodyFraming::Length(0));
        st.client.out.send_head(response, done_now)?;
        if self.ahead > 0 && Rest::relays(framing) {
            let reusable = head.keep_alive && body_sent;
            *rest = Rest::new(framing, buf, reusable, (self.ahead, t.read));
            return Ok(false);
        }
        let complete = match framing {
            BodyFraming::None | BodyFraming::Length(0) => true,
            BodyFraming::Length(n) => {
                let mut remaining = n;
                loop {
                    if buf.is_empty() && read(stream, &mut buf, t.read).await? == 0 {
                        return Err(Failure::Upstream("upstream closed mid-body").into());
                    }
                    let take = (remaining.min(buf.len() as u64)) as usize;
                    remaining -= take as u64;
                    let data = buf.split_to(take).freeze();
                    let end = remaining == 0;
                    send(&mut st.client.out, data, end, stream, &mut buf, self.ahead).await?;
                    if remaining == 0 {
                        break;
                    }
                }
                true
            }
            BodyFraming::Chunked => {
                let mut decoder = Chunked::default();
                loop {
                    match decoder.decode(&mut buf) {
                        Err(why) => return Err(Failure::Upstream(why).into()),
                        Ok(Some(data)) => {
                            send(
                                &mut st.client.out,
                                data,
                                false,
                                stream,
                                &mut buf,
                                self.ahead,
                            )
                            .await?
                        }
                        Ok(None) if decoder.done() => break,
                        Ok(None) => {
                            if read(stream, &mut buf, t.read).await? == 0 {
                                return Err(Failure::Upstream("upstream closed mid-body").into());
                            }
                        }
                    }
                }
                st.client.out.send_data(Bytes::new(), true).await?;
                true
            }
            BodyFraming::Close => {
                loop {
                    if !buf.is_empty() {
                        let data = buf.split().freeze();
                        send(
                            &mut st.client.out,
                            data,
                            false,
                            stream,
                            &mut buf,
                            self.ahead,
                        )
                        .await?;
                    }
                    if read(stream, &mut buf, t.read).await? == 0 {
                        break;
                    }
                }
                st.client.out.send_data(Bytes::new(), true).await?;
                false
            }
        };
        Ok(complete && head.keep_alive && body_sent && buf.is_empty())
    }
}

/// `{len:x}\r\n` into `out`, without `fmt`; returns its length.
fn chunk_size_line(len: usize, out: &mut [u8; 18]) -> usize {
    let digits = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1) as usize;
    for (i, digit) in out.iter_mut().take(digits).enumerate() {
        let nibble = (len >> (4 * (digits - 1 - i))) & 0xf;
        *digit = b"0123456789abcdef"[nibble];
    }
    out[digits] = b'\r';
    out[digits + 1] = b'\n';
    digits + 2
}

async fn write(
    stream: &mut (impl AsyncWrite + Unpin),
    bytes: &[u8],
    timeout: Duration,
) -> Result<(), Failure> {
    match tokio::time::timeout(timeout, stream.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Failure::Upstream("writing to the upstream failed")),
        Err(_) => Err(Failure::ReadTimeout),
    }
}

/// Reads what is there into `buf`, with room made first.
async fn read_more(
    stream: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(READ_SIZE);
    }
    stream.read_buf(buf).await
}

async fn read(
    stream: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    timeout: Duration,
) -> Result<usize, Failure> {
    match tokio::time::timeout(timeout, read_more(stream, buf)).await {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(_)) => Err(Failure::Upstream("reading the upstream response failed")),
        Err(_) => Err(Failure::ReadTimeout),
    }
}

/// The HTTP/1 request head of an edited request: `Host` from the
/// authority (HTTP/2's `:authority`, or a rewritten host), the body as
/// `Content-Length` when the client declared one, else chunked; in the
/// route's version, with its `Connection` field.
pub(super) fn request_head(
    method: &Method,
    uri: &http::Uri,
    headers: &HeaderMap,
    (chunked, http): (bool, &teapot_h1::UpstreamHttp),
    out: &mut Vec<u8>,
) {
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut head =
        RequestHeadWriter::start_with(out, method.as_str().as_bytes(), target.as_bytes(), http);
    let authority = uri.authority().map(|a| a.as_str());
    if let Some(a) = authority {
        head.field(b"host", a.as_bytes());
    }
    for (name, value) in headers.iter() {
        if (authority.is_some() && name == HOST) || name == TRANSFER_ENCODING {
            continue;
        }
        head.field(name.as_str().as_bytes(), value.as_bytes());
    }
    head.finish(framing(chunked));
}

/// The 411's body: a request to an HTTP/1.0 backend must say its length.
const LENGTH_REQUIRED: &str =
    "411 this route's backend speaks HTTP/1.0: send the body with a Content-Length\n";

/// A body the client declared with `Content-Length` keeps that field
/// (among the copied ones); any other body is chunked.
fn framing(chunked: bool) -> BodyLength {
    if chunked {
        BodyLength::Chunked
    } else {
        BodyLength::Unframed
    }
}

/// The client's request as its backend gets it, whichever protocol that
/// speaks: a copy of its fields and target with [`proxy::edit_request`]'s
/// edits (IDs, hop-by-hop fields, Gateway filters, forwarding fields).
pub(super) fn edited_request(
    parts: &Parts,
    conn: &ConnInfo,
    st: &StreamCtx<'_>,
) -> Result<(HeaderMap, Uri), Failure> {
    let mut headers = parts.headers.clone();
    let mut uri = st.uri(parts).clone();
    proxy::edit_request(
        &mut headers,
        &mut uri,
        conn,
        authority(parts),
        st.ids.as_ref(),
        st.gateway.as_ref(),
    )
    .map_err(|_| Failure::BadRewrite)?;
    crate::plane::traffic::engines::h2_request_edits(&mut headers, st.policy.as_deref());
    crate::plane::traffic::engines::h2_upstream_host(&mut headers, &mut uri, st.policy.as_deref())
        .map_err(|_| Failure::BadRewrite)?;
    Ok((headers, uri))
}

/// [`request_head`] of the edits `proxy::edit_request` makes
/// when there is neither a Gateway filter nor a hop-by-hop field (almost
/// every request), written straight from the client's head: the new
/// request ID and traceparent and the forwarding fields replace the
/// client's, formatted in place (no header map copied or edited). `uri`
/// is the client's with the path the route matched.
fn direct_head(
    parts: &Parts,
    uri: &http::Uri,
    ids: Option<&Ids<'_>>,
    conn: &ConnInfo,
    (chunked, http): (bool, &teapot_h1::UpstreamHttp),
    out: &mut Vec<u8>,
) {
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let method = parts.method.as_str().as_bytes();
    let mut head = RequestHeadWriter::start_with(out, method, target.as_bytes(), http);
    let uri_authority = uri.authority().map(|a| a.as_str());
    if let Some(a) = uri_authority {
        head.field(b"host", a.as_bytes());
    }
    let new_id = ids.map(|i| i.request_id).filter(|i| i.is_new());
    let new_tp = ids.map(|i| i.traceparent).filter(|t| t.is_new());
    for (name, value) in parts.headers.iter() {
        let n = name.as_str();
        let replaced = (uri_authority.is_some() && name == HOST)
            || name == TRANSFER_ENCODING
            || forwarding::FORWARDING.contains(&n)
            || forwarding::is_lookalike(n)
            || (new_id.is_some() && n == trace::REQUEST_ID)
            || (new_tp.is_some() && n == trace::TRACEPARENT);
        if !replaced {
            head.field(n.as_bytes(), value.as_bytes());
        }
    }
    if let Some(id) = new_id {
        head.field(trace::REQUEST_ID.as_bytes(), id.as_bytes());
    }
    if let Some(tp) = new_tp {
        head.field(trace::TRACEPARENT.as_bytes(), tp.as_bytes());
    }
    // The forwarding fields as HTTP/1 writes them, from the same
    // per-thread cache (a connection's requests share them).
    forwarding::with_block(conn, authority(parts), |block| head.encoded(block.wire()));
    head.finish(framing(chunked));
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn chunk_size_lines() {
        for n in [1usize, 9, 10, 15, 16, 255, 4096, 16384, 0x1234_5678] {
            let mut out = [0u8; 18];
            let len = chunk_size_line(n, &mut out);
            assert_eq!(&out[..len], format!("{n:x}\r\n").as_bytes());
        }
    }

    #[test]
    fn request_head_from_an_h2_request() {
        let uri: http::Uri = "https://a.example/a?b=1".parse().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("other.example"));
        headers.insert("x-one", HeaderValue::from_static("1"));
        let mut out = Vec::new();
        let http = teapot_h1::UpstreamHttp::DEFAULT;
        request_head(&Method::POST, &uri, &headers, (true, &http), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /a?b=1 HTTP/1.1\r\nhost: a.example\r\nx-one: 1\r\ntransfer-encoding: chunked\r\n\r\n"
        );
    }
}
