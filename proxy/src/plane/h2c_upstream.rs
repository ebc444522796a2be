//! HTTP/2 requests to h2c backends (GRPCRoute, a Service port with
//! `appProtocol: kubernetes.io/h2c`, an Ingress's `backend-protocol: GRPC`
//! or `H2C`) and to HTTP/2 backends over TLS (`backend-protocol: GRPCS`,
//! ALPN `h2`, crate::live::upstream_tls): HTTP/2 end to end, so a gRPC
//! call's streams flow both ways at once and its trailers (`grpc-status`)
//! reach the client.
//!
//! One HTTP/2 connection per backend address (and TLS configuration) and
//! serving thread carries
//! every stream to it (h2 multiplexes; a backend that limits concurrent
//! streams makes a stream wait for a slot). A connection the backend
//! closed leaves the thread's map when its driver ends (or is noticed when
//! a stream asks it for a slot), and one unused for the upstream pool's
//! idle timeout is dropped, which closes it: endpoints that come and go
//! leave no connections behind.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use http::header::{HOST, TE};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Request, Response, Uri};
use teapot_h1::{ConnInfo, Failed, RetryPolicy, Tries, Verdict};

use crate::compile::upstream::Upstream;
use crate::live::endpoints::Endpoint;
use crate::plane::h2_stream::{
    Failure, MAX_FRAME_SIZE, RequestBody, STREAM_WINDOW, StreamCtx, Unsent, authority_of,
    send_flow_controlled,
};
use crate::plane::h2_upstream::{
    OpenFailed, after_try, another_endpoint, answer_error, connect_failed, edited_request,
    endpoint_left, holds_back, idempotent, next_endpoint, open, retry_policy,
};
use crate::plane::proxy::Router;

thread_local! {
    /// The serving thread's connections, by backend address and pool
    /// class (plain, or a TLS configuration's).
    static CONNECTIONS: RefCell<foldhash::HashMap<(SocketAddr, u64), Connection>> =
        RefCell::default();
    /// Tells a connection from the one that replaced it at its address.
    static NEXT_ID: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// When the map was last swept for idle connections.
    static SWEPT: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// How often at most a stream's connect sweeps the thread's map: a sweep
/// walks every backend address of the thread, too much for every stream.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What an h2c backend may make teapot hold (docs/edge.md, "h2c
/// backends"). The h2 crate's client defaults let a response head be 16
/// MiB; a backend's head is held to what an HTTP/1 backend's is: the
/// engine's head size as the decoded header list size, and its field count
/// (checked here, as h2 has no count).
const MAX_RESPONSE_HEADER_LIST: u32 = teapot_h1::MAX_RESPONSE_HEADER_BYTES as u32;
const MAX_RESPONSE_FIELDS: usize = teapot_h1::MAX_HEADERS_CAP;
/// Streams teapot opens on a new connection before the backend's SETTINGS
/// say how many it takes (then the backend's limit holds); h2's own is no
/// limit. The default of `--h2-max-concurrent-streams`, what one client
/// connection may have open.
const INITIAL_SEND_STREAMS: usize = 100;
/// Response bytes all streams of one backend connection may have in
/// flight: 16 streams' windows, so a few streams whose clients read slowly
/// (their data waits in h2 for the client's window) do not stall the rest
/// of the connection, which carries every client's streams to that backend
/// on this thread. There is one such connection per backend address and
/// thread, not one per client, so this is not multiplied by the clients.
const CONNECTION_WINDOW: u32 = 16 * STREAM_WINDOW;

/// The h2 client options of every h2c backend connection.
fn client_options() -> h2::client::Builder {
    let mut o = h2::client::Builder::new();
    o.max_header_list_size(MAX_RESPONSE_HEADER_LIST)
        // A backend opens no streams towards teapot (no server push).
        .enable_push(false)
        .max_concurrent_streams(0)
        .initial_max_send_streams(INITIAL_SEND_STREAMS)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME_SIZE);
    o
}

struct Connection {
    id: u64,
    sender: SendRequest<Bytes>,
    used: Instant,
}

/// Request body bytes a retry may send again: kept as they go to the
/// backend on a route with a retry policy, one stream's receive window
/// (what the client may already make teapot hold for the stream). A
/// longer body is streamed and never sent twice.
const REPLAY_MAX: usize = STREAM_WINDOW as usize;

/// The request body as far as the tries so far sent it, so that a retry
/// sends the very same bytes again before the rest of the client's body.
#[derive(Default)]
struct Replay {
    body: BytesMut,
    /// More than [`REPLAY_MAX`] went: no try is sent again.
    overflowed: bool,
    /// The client's body ended; its trailers, if it had some.
    ended: bool,
    trailers: Option<HeaderMap>,
}

impl Replay {
    /// Whether the body so far may be sent again: all of it is held.
    fn held(replay: Option<&Mutex<Replay>>) -> bool {
        replay.is_some_and(|r| !Replay::lock(r).overflowed)
    }

    /// The stream's tasks run on one thread: never contended, and no
    /// guard is held across an await.
    fn lock(replay: &Mutex<Replay>) -> std::sync::MutexGuard<'_, Replay> {
        replay
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn keep(&mut self, chunk: &[u8]) {
        if self.overflowed {
            return;
        }
        if self.body.len() + chunk.len() > REPLAY_MAX {
            self.overflowed = true;
            self.body = BytesMut::new();
            return;
        }
        self.body.extend_from_slice(chunk);
    }
}

/// How one try failed: `retry` says as what when nothing of its answer
/// went to the client, so the route's retry policy may send it again.
struct TryFailed {
    failure: Failure,
    retry: Option<Failed>,
}

impl From<Failure> for TryFailed {
    fn from(failure: Failure) -> Self {
        TryFailed {
            failure,
            retry: None,
        }
    }
}

impl TryFailed {
    fn before_answer(failure: Failure, failed: Failed) -> Self {
        TryFailed {
            failure,
            retry: Some(failed),
        }
    }
}

/// Forwards the stream's request (already routed into `st`) to an h2c
/// backend; an `Err` is answered by the caller. With the route's retry
/// policy (an HTTPRoute rule's `retry`, `proxy-next-upstream*`;
/// teapot_h1::retry, asked as the HTTP/2-to-HTTP/1 path asks it) a try
/// that fails before anything of its answer reached the client is sent
/// again: a retryable HTTP status (a gRPC error is a 200 with a
/// `grpc-status` and is relayed), a reset stream or closed connection, a
/// try past its timeout.
pub(super) async fn forward(
    router: &Router,
    parts: &Parts,
    conn: &ConnInfo,
    st: &mut StreamCtx<'_>,
) -> Result<(), Failure> {
    let (mut headers, uri) = edited_request(parts, conn, st)?;
    // gRPC asks for trailers with `te: trailers`, the one TE value HTTP/2
    // allows (RFC 9113 §8.2.2); the hop-by-hop edit removed every TE.
    if parts
        .headers
        .get(TE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"))
    {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
    let tls = st
        .upstream
        .as_ref()
        .is_some_and(|u| u.protocol.tls().is_some());
    let uri = backend_uri(&uri, &headers, tls)?;
    // `:authority` carries it.
    headers.remove(HOST);

    let upstream = st
        .upstream
        .clone()
        .ok_or(Failure::Upstream("no upstream chosen"))?;
    // The route's `proxy-*-timeout` under the operator's, as on every
    // other backend path (a gRPC route's `proxy-read-timeout: 1` fails
    // its call after a second, as with ingress-nginx).
    let o = &router.options;
    let (connect_timeout, read_timeout, write_timeout) =
        crate::plane::traffic::engines::upstream_timeouts(
            st.policy.as_deref(),
            (
                o.connect_timeout,
                router.read_timeout(st.gateway.as_ref()),
                o.write_timeout,
            ),
        );
    // Read once: a body read to its end leaves the stream ended too.
    let no_body = st.client.body.is_empty();
    let head_only = parts.method == http::Method::HEAD;
    let route_retry = retry_policy(st);
    // Whether the body can be sent again is known as it goes: a replay
    // keeps it (up to REPLAY_MAX) only on a route that may retry.
    let retry = route_retry
        .clone()
        .filter(|p| p.may_resend(idempotent(&parts.method), true));
    let spent = (route_retry.as_deref(), head_only);
    let mut tries = retry
        .as_ref()
        .map(|_| Tries::new(tokio::time::Instant::now()));
    let replay = retry.as_ref().map(|_| Mutex::new(Replay::default()));
    loop {
        let mut req = Request::new(());
        *req.method_mut() = parts.method.clone();
        *req.uri_mut() = uri.clone();
        *req.version_mut() = http::Version::HTTP_2;
        // A route that may retry keeps the head for the next try.
        *req.headers_mut() = match retry {
            Some(_) => headers.clone(),
            None => std::mem::take(&mut headers),
        };
        let tried = match connect(router, st, &upstream, connect_timeout).await {
            Ok(sender) => {
                let mut read_timeout = read_timeout;
                let mut hold = None;
                if let (Some(policy), Some(t)) = (retry.as_deref(), &tries) {
                    read_timeout = policy.try_timeout(t, read_timeout, tokio::time::Instant::now());
                    let more = endpoint_left(st, &upstream, policy.same_endpoint_again);
                    hold = Some((policy, *t, more));
                }
                let timeouts = (read_timeout, write_timeout);
                let one = Try {
                    no_body,
                    head_only,
                    timeouts,
                    hold,
                    replay: replay.as_ref(),
                };
                one.run(router, st, sender, req).await
            }
            Err(failure) => {
                let failed = connect_failed(&failure);
                Err(TryFailed::before_answer(failure, failed))
            }
        };
        let (failure, failed) = match tried {
            Ok(()) => return Ok(()),
            Err(TryFailed {
                failure,
                retry: Some(failed),
            }) => (failure, failed),
            Err(TryFailed { failure, .. }) => return Err(failure),
        };
        if !Replay::held(replay.as_ref()) {
            return answer_error(st, spent, failed, failure);
        }
        match after_try(retry.as_deref(), &mut tries, failed, st, &upstream).await {
            Some(Verdict::Retry(_)) => {}
            Some(Verdict::Expired) => return Err(Failure::ReadTimeout),
            _ => return answer_error(st, spent, failed, failure),
        }
    }
}

/// One try of a request on an h2c connection.
struct Try<'a> {
    no_body: bool,
    head_only: bool,
    /// The try's read (cut to the request's retry budget) and write
    /// timeouts.
    timeouts: (Duration, Duration),
    /// The retry policy, the tries so far and whether an endpoint is
    /// left: an answer it would retry is held back.
    hold: Option<(&'a RetryPolicy, Tries, bool)>,
    /// What a retry would send again: the route may retry.
    replay: Option<&'a Mutex<Replay>>,
}

impl Try<'_> {
    async fn run(
        &self,
        router: &Router,
        st: &mut StreamCtx<'_>,
        mut sender: SendRequest<Bytes>,
        req: Request<()>,
    ) -> Result<(), TryFailed> {
        let (read_timeout, write_timeout) = self.timeouts;
        let no_body = self.no_body;
        let (response, request_body) = sender.send_request(req, no_body).map_err(|e| {
            tracing::debug!(error = %e, "sending a request to an h2c upstream");
            let failure = Failure::Upstream("the upstream refused the stream");
            TryFailed::before_answer(failure, Failed::Closed)
        })?;
        let started = st.upstream_started.take();
        let body_limit = st.body_limit;
        let gateway = st.gateway.as_ref();
        let applied = st.policy.as_deref();
        let endpoint = st.endpoint.as_ref();
        let out = &mut st.client.out;
        // `custom-http-errors`: the statuses the error backend's page replaces.
        let pages = st.policy.as_ref().and_then(|p| p.error_pages.as_deref());
        let reason = &mut st.reason;
        let head_only = self.head_only;
        let (hold, replay) = (self.hold, self.replay);
        let mut sending = pin!(upload(
            &mut st.client.body,
            replay,
            request_body,
            no_body,
            body_limit,
            write_timeout,
        ));
        let mut receiving = pin!(async {
            let response = match tokio::time::timeout(read_timeout, response).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "an h2c upstream's response");
                    let failure = Failure::Upstream("the upstream reset the stream");
                    return Err(TryFailed::before_answer(failure, Failed::Closed));
                }
                Err(_) => {
                    return Err(TryFailed::before_answer(
                        Failure::ReadTimeout,
                        Failed::Timeout,
                    ));
                }
            };
            if response.headers().len() > MAX_RESPONSE_FIELDS {
                // Dropping the response resets the stream (CANCEL).
                let failure = Failure::Upstream("the upstream's response head has too many fields");
                return Err(TryFailed::before_answer(failure, Failed::BadResponse));
            }
            let status = response.status().as_u16();
            if Replay::held(replay) && holds_back(hold, status) {
                // Not relayed: dropping the answer resets its stream, and
                // the request goes again.
                let failure = Failure::Upstream("a retried answer");
                return Err(TryFailed::before_answer(failure, Failed::Status(status)));
            }
            if let Some(started) = started {
                router
                    .metrics
                    .upstream_latency
                    .observe(started.elapsed().as_secs_f64());
                crate::plane::traffic::ewma::measure(applied, endpoint, Some(started));
            }
            let (mut head, mut body) = response.into_parts();
            if let Some(pages) = pages.filter(|p| p.replaces(status)) {
                // Not relayed: dropping the body resets the backend's stream.
                drop(body);
                let page = Box::pin(pages.page(status)).await;
                *reason = Some(page.reason);
                return Ok(out.page(page, head_only).await?);
            }
            router.edit_response(head.status, &mut head.headers, gateway);
            // The route's response fields (CORS, the affinity cookie).
            crate::plane::traffic::engines::h2_response_edits(&mut head.headers, applied);
            let end = body.is_end_stream();
            out.send_head(Response::from_parts(head, ()), end)?;
            if end {
                return Ok(());
            }
            loop {
                match tokio::time::timeout(read_timeout, body.data()).await {
                    Err(_) => return Err(Failure::ReadTimeout.into()),
                    Ok(None) => break,
                    Ok(Some(Err(_))) => {
                        return Err(Failure::Upstream("the upstream reset the stream").into());
                    }
                    Ok(Some(Ok(data))) => {
                        let _ = body.flow_control().release_capacity(data.len());
                        out.send_data(data, false).await?;
                    }
                }
            }
            let end = match tokio::time::timeout(read_timeout, body.trailers()).await {
                Err(_) => Err(Failure::ReadTimeout),
                Ok(Err(_)) => Err(Failure::Upstream("the upstream reset the stream")),
                // Trailers are a header block too: the same count.
                Ok(Ok(Some(trailers))) if trailers.len() > MAX_RESPONSE_FIELDS => Err(
                    Failure::Upstream("the upstream's trailers have too many fields"),
                ),
                Ok(Ok(Some(trailers))) => out.send_trailers(trailers),
                Ok(Ok(None)) => out.send_data(Bytes::new(), true).await,
            };
            Ok(end?)
        });
        // Both ways at once: a streaming call's answer may begin before its
        // request ends. The answer's end ends the exchange.
        let mut uploaded = no_body;
        loop {
            tokio::select! {
                done = &mut sending, if !uploaded => {
                    match done {
                        Ok(()) | Err(Upload::Refused) => uploaded = true,
                        Err(Upload::Failed(failure)) => return Err(failure.into()),
                    }
                }
                done = &mut receiving => return done,
            }
        }
    }
}

/// Why a request body's upload ended early.
enum Upload {
    /// The exchange fails: the client's body, its size or the backend's
    /// window.
    Failed(Failure),
    /// The backend takes no more of the body: it reset the stream or
    /// closed the connection. A server may answer before the request ends
    /// and then reset the stream with NO_ERROR (RFC 9113 §8.1: the client
    /// must not discard that answer); gRPC servers do so for unary calls.
    /// The answer decides: relayed when the backend sent it whole, a
    /// failure of its own when the stream was reset before.
    Refused,
}

impl From<Failure> for Upload {
    fn from(failure: Failure) -> Upload {
        Upload::Failed(failure)
    }
}

/// Streams the client's request body and trailers to the backend; a
/// backend whose window does not take a piece within `write_timeout` (the
/// upstream write timeout) fails the exchange. With a `replay`, what
/// earlier tries sent goes first, and what goes is kept for a next try.
async fn upload(
    body: &mut RequestBody,
    replay: Option<&Mutex<Replay>>,
    mut to: h2::SendStream<Bytes>,
    no_body: bool,
    limit: u64,
    write_timeout: std::time::Duration,
) -> Result<(), Upload> {
    if no_body {
        return Ok(());
    }
    let gone = |e: h2::Error| {
        tracing::debug!(error = %e, "an h2c upstream stopped taking the request body");
        Upload::Refused
    };
    let unsent = |unsent| match unsent {
        Unsent::Stalled => Failure::Upstream("the upstream did not open its window in time").into(),
        Unsent::Gone(e) => gone(e),
    };
    let mut ended = None;
    if let Some(replay) = replay {
        let (again, end) = {
            let r = Replay::lock(replay);
            let again = Bytes::copy_from_slice(&r.body);
            (again, r.ended.then(|| r.trailers.clone()))
        };
        if !again.is_empty() {
            send_flow_controlled(&mut to, again, false, write_timeout)
                .await
                .map_err(unsent)?;
        }
        ended = end;
    }
    let trailers = match ended {
        Some(trailers) => trailers,
        None => {
            while let Some(chunk) = body.read().await? {
                if limit > 0 && body.bytes > limit {
                    to.send_reset(h2::Reason::CANCEL);
                    return Err(Failure::BodyTooLarge.into());
                }
                if chunk.is_empty() {
                    // An empty DATA frame carries nothing but its END_STREAM flag,
                    // which the end below sends.
                    continue;
                }
                if let Some(replay) = replay {
                    Replay::lock(replay).keep(&chunk);
                }
                send_flow_controlled(&mut to, chunk, false, write_timeout)
                    .await
                    .map_err(unsent)?;
            }
            let trailers = body.trailers().await?;
            if let Some(replay) = replay {
                let mut r = Replay::lock(replay);
                r.ended = true;
                r.trailers = trailers.clone();
            }
            trailers
        }
    };
    match trailers {
        Some(trailers) => to.send_trailers(trailers).map_err(gone),
        None => to.send_data(Bytes::new(), true).map_err(gone),
    }
}

/// The request's URI as an HTTP/2 backend gets it: `http` (`https` over
/// TLS), the (possibly rewritten) authority, the target.
fn backend_uri(uri: &Uri, headers: &HeaderMap, tls: bool) -> Result<Uri, Failure> {
    let authority = authority_of(uri, headers);
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    Uri::builder()
        .scheme(if tls { "https" } else { "http" })
        .authority(authority)
        .path_and_query(target)
        .build()
        .map_err(|_| Failure::Upstream("the request has no authority to send"))
}

/// A connection with a free stream slot to an endpoint of `upstream`: the
/// thread's own to that address, or a new one (each endpoint that fails
/// to connect ejected and the next tried).
async fn connect(
    router: &Router,
    st: &mut StreamCtx<'_>,
    upstream: &Arc<Upstream>,
    connect_timeout: Duration,
) -> Result<SendRequest<Bytes>, Failure> {
    let class = upstream.protocol.tls().map_or(teapot_h1::pool::PLAIN, |t| {
        teapot_h1::Transport::class(&**t)
    });
    loop {
        let endpoint = next_endpoint(st, upstream)?;
        let addr = (endpoint.addr, class);
        let now = Instant::now();
        let idle = router.options.pool_idle_timeout;
        let sweep = SWEPT
            .get()
            .is_none_or(|t| now.duration_since(t) >= SWEEP_EVERY.min(idle));
        let existing = CONNECTIONS.with_borrow_mut(|c| {
            let fresh = |conn: &Connection| now.duration_since(conn.used) < idle;
            if sweep {
                c.retain(|_, conn| fresh(conn));
                SWEPT.set(Some(now));
            } else if c.get(&addr).is_some_and(|conn| !fresh(conn)) {
                // Between sweeps, the one connection about to be used is
                // held to the idle timeout all the same.
                c.remove(&addr);
            }
            c.get_mut(&addr).map(|conn| {
                conn.used = now;
                conn.sender.clone()
            })
        });
        if let Some(existing) = existing {
            match existing.ready().await {
                Ok(ready) => return Ok(ready),
                Err(e) => {
                    tracing::debug!(addr = %addr.0, error = %e, "h2c upstream connection ended; reconnecting");
                    CONNECTIONS.with_borrow_mut(|c| c.remove(&addr));
                }
            }
        }
        match handshake(router, st, upstream, &endpoint, class, connect_timeout).await {
            Ok(sender) => {
                return sender.ready().await.map_err(|e| {
                    tracing::debug!(addr = %addr.0, error = %e, "h2c upstream connection");
                    Failure::Upstream("the upstream closed its HTTP/2 connection")
                });
            }
            Err(e) if another_endpoint(router, st, upstream, &endpoint, &e) => continue,
            Err(e) => return Err(e.failure),
        }
    }
}

/// A new HTTP/2 connection (prior knowledge, or ALPN `h2` over TLS) to
/// `endpoint`, its frames driven by a task of this thread until either
/// side closes it.
async fn handshake(
    router: &Router,
    st: &StreamCtx<'_>,
    upstream: &Upstream,
    endpoint: &Endpoint,
    class: u64,
    timeout: Duration,
) -> Result<SendRequest<Bytes>, OpenFailed> {
    // Registered in the thread's map here, so the driver below can take
    // its own entry (and only its own) out when the connection ends.
    let io = open(router, st, upstream, endpoint, timeout).await?;
    let failed = |failure| OpenFailed {
        failure,
        handshake: false,
    };
    let (sender, connection) =
        match tokio::time::timeout(timeout, client_options().handshake::<_, Bytes>(io)).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => {
                tracing::debug!(addr = %endpoint.addr, error = %e, "h2c handshake");
                return Err(failed(Failure::Connect(
                    "the upstream did not speak HTTP/2",
                )));
            }
            Err(_) => return Err(failed(Failure::ConnectTimeout)),
        };
    let addr = (endpoint.addr, class);
    let id = NEXT_ID.with(|n| {
        n.set(n.get() + 1);
        n.get()
    });
    CONNECTIONS.with_borrow_mut(|c| {
        c.insert(
            addr,
            Connection {
                id,
                sender: sender.clone(),
                used: Instant::now(),
            },
        )
    });
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(addr = %addr.0, error = %e, "h2c upstream connection ended");
        }
        // Serving threads are single-threaded runtimes: this task runs on
        // the thread whose map holds the connection.
        CONNECTIONS.with_borrow_mut(|c| {
            if c.get(&addr).is_some_and(|conn| conn.id == id) {
                c.remove(&addr);
            }
        });
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_holds_the_body_up_to_its_bound_or_nothing() {
        let replay = Mutex::new(Replay::default());
        assert!(Replay::held(Some(&replay)));
        assert!(!Replay::held(None));
        Replay::lock(&replay).keep(&[1; REPLAY_MAX - 1]);
        Replay::lock(&replay).keep(&[2]);
        assert!(Replay::held(Some(&replay)));
        assert_eq!(Replay::lock(&replay).body.len(), REPLAY_MAX);
        // One byte more: nothing is sent again, and nothing is kept.
        Replay::lock(&replay).keep(&[3]);
        assert!(!Replay::held(Some(&replay)));
        assert!(Replay::lock(&replay).body.is_empty());
        Replay::lock(&replay).keep(&[4]);
        assert!(Replay::lock(&replay).body.is_empty());
    }

    #[test]
    fn the_backend_uri_is_cleartext_with_the_request_authority() {
        let uri: Uri = "https://a.example/pkg.Svc/Call".parse().unwrap();
        let got = backend_uri(&uri, &HeaderMap::new(), false).unwrap();
        assert_eq!(got.to_string(), "http://a.example/pkg.Svc/Call");
        let got = backend_uri(&uri, &HeaderMap::new(), true).unwrap();
        assert_eq!(got.to_string(), "https://a.example/pkg.Svc/Call");
        let uri: Uri = "/pkg.Svc/Call".parse().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("rewritten.example"));
        let got = backend_uri(&uri, &headers, false).unwrap();
        assert_eq!(got.to_string(), "http://rewritten.example/pkg.Svc/Call");
        assert!(backend_uri(&uri, &HeaderMap::new(), false).is_err());
    }
}
