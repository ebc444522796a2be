//! HTTP/2, served by teapot over the h2 crate: the connection's frames,
//! flow control and limits are h2's; everything per stream is here, over
//! the same [`Router`] and routing decision ([`crate::plane::decide`]) as
//! the HTTP/1 engine (crate::plane::h1).
//!
//! Why not Pingora's `HttpProxy`: per stream it spawned a task, converted
//! the request into its own header type, built a `Session` with its
//! downstream modules, and went through its proxy machinery; that was about
//! two thirds of an HTTP/2 request's user-space instructions (benches/
//! README.md, "HTTP/2 on teapot's own server"). Here a stream is a future
//! polled by its connection's task (no spawn, no cross-thread wake-up:
//! serving is thread per core), the request's fields are read where h2
//! decoded them, and the backend exchange writes HTTP/1 heads as bytes
//! (crate::plane::h2_upstream) or speaks h2c (crate::plane::h2c_upstream).
//!
//! Pingora still owns the listeners, TLS and ALPN (crate::plane::edge
//! hands HTTP/2 connections here).

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::header::{CONTENT_LENGTH, HOST, LOCATION, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderValue, Method, Uri};
use pingora_core::apps::ServerApp;
use pingora_core::protocols::Stream;
use pingora_core::server::ShutdownWatch;
use teapot_h1::ConnInfo;

use crate::compile::routes::Route;
use crate::compile::upstream::Tried;
use crate::plane::access_log::Entry;
use crate::plane::decide::{self, Answer, Head, UNFORWARDABLE_PATH};
use crate::plane::edge::{self, Refusal};
use crate::plane::h2_stream::{
    Client, Failure, MAX_FRAME_SIZE, STREAM_WINDOW, StreamCtx, authority,
};
use crate::plane::pipeline::{self, Routed};
use crate::plane::proxy::{BAD_GATEWAY_BODY, GATEWAY_TIMEOUT_BODY, Router};
use crate::plane::trace::{self, Ids};

/// Malformed streams (reset before routing) a connection may open over its
/// life before it is closed with ENHANCE_YOUR_CALM: a client that keeps
/// sending them is probing, not browsing.
const MAX_MALFORMED_STREAMS: usize = 32;

/// A client connection's window: one stream's worth, so what one client
/// connection makes teapot hold is bounded by the same 64 KiB however many
/// streams it opens (there may be --max-connections of them).
const CLIENT_CONNECTION_WINDOW: u32 = STREAM_WINDOW;

/// The HTTP/2 side of a listener: one per serving thread.
pub struct H2Server {
    router: Router,
    options: h2::server::Builder,
    idle_timeout: Duration,
    handshake_timeout: Duration,
}

impl std::fmt::Debug for H2Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Server")
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl H2Server {
    /// The limits come from the router's edge configuration
    /// (`EdgeConfig::h2`, docs/edge.md).
    pub fn new(router: Router) -> H2Server {
        let mut options = router.edge.h2.options();
        options
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CLIENT_CONNECTION_WINDOW)
            .max_frame_size(MAX_FRAME_SIZE)
            // What h2 holds for a stream once its window took it, until
            // the socket does: one window's worth rather than h2's 400
            // KiB, for a client that opens its window and stops reading.
            .max_send_buffer_size(STREAM_WINDOW as usize);
        let idle_timeout = router.edge.h2.idle_timeout;
        let handshake_timeout = router.edge.header_read_timeout;
        H2Server {
            router,
            options,
            idle_timeout,
            handshake_timeout,
        }
    }

    /// Serves one HTTP/2 connection until the client closes it, it stays
    /// idle past the idle timeout, or `shutdown` asks it to drain (GOAWAY,
    /// streams in flight finish).
    pub async fn serve<T>(&self, io: T, conn: &ConnInfo, shutdown: ShutdownWatch)
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let deadline = tokio::time::Instant::now() + self.handshake_timeout;
        self.serve_by(io, conn, shutdown, deadline).await;
    }

    /// [`Self::serve`] of a connection whose handshake (the client's
    /// preface and SETTINGS) must be done by `deadline`: a cleartext one
    /// (crate::plane::accept) whose first bytes were already waited for,
    /// within the same header timeout.
    pub async fn serve_by<T>(
        &self,
        io: T,
        conn: &ConnInfo,
        mut shutdown: ShutdownWatch,
        deadline: tokio::time::Instant,
    ) where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        // Boxed: inline, the handshake's state (1.2 KiB, a second copy of
        // the connection's codec) stays in the connection's future for its
        // life, beside the connection it produced.
        let handshake = Box::pin(tokio::time::timeout_at(
            deadline,
            self.options.handshake::<_, Bytes>(io),
        ));
        let mut h2 = match handshake.await {
            Ok(Ok(h2)) => h2,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "HTTP/2 handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!("HTTP/2 handshake timed out");
                return;
            }
        };
        let mut streams = FuturesUnordered::new();
        let mut idle = pin!(tokio::time::sleep(self.idle_timeout));
        let mut draining = false;
        if *shutdown.borrow() {
            h2.graceful_shutdown();
            draining = true;
        }
        let mut malformed = 0usize;
        // Set once the idle timer asked the connection to close: what is
        // left then is h2's to write (a GOAWAY, the ends of answers), and
        // a client that stopped reading would keep the connection and its
        // buffers forever. It gets the send timeout, then the socket is
        // dropped, as the HTTP/1 engine drops a client it cannot write to.
        let mut closing = false;
        loop {
            tokio::select! {
                // Finished streams first: their slots and memory go back
                // before new streams are taken.
                biased;
                Some(end) = streams.next(), if !streams.is_empty() => {
                    if end == StreamEnd::Malformed {
                        malformed += 1;
                        if malformed >= MAX_MALFORMED_STREAMS {
                            tracing::debug!(malformed, "closing an HTTP/2 connection that keeps sending malformed requests");
                            h2.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                        }
                    }
                    if streams.is_empty() {
                        idle.as_mut().reset(tokio::time::Instant::now() + self.idle_timeout);
                    }
                }
                // Polling `accept` is what drives the connection's I/O for
                // every stream, so it runs on every turn of the loop.
                next = h2.accept() => match next {
                    // Boxed: the set frees a finished stream's future at
                    // once, but its task node only when the last waker of
                    // it is dropped, which may be long after (an idle
                    // connection would keep 3 KiB per finished stream).
                    Some(Ok((req, respond))) => {
                        streams.push(Box::pin(self.stream(req, respond, conn)))
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "HTTP/2 connection ended with an error");
                        break;
                    }
                    None => break,
                },
                _ = shutdown.changed(), if !draining => {
                    draining = true;
                    h2.graceful_shutdown();
                }
                () = &mut idle, if streams.is_empty() && (!draining || closing) => {
                    if closing {
                        tracing::debug!("dropping an idle HTTP/2 connection that does not read its GOAWAY");
                        break;
                    }
                    draining = true;
                    closing = true;
                    h2.graceful_shutdown();
                    let send_timeout = self.router.options.write_timeout;
                    idle.as_mut().reset(tokio::time::Instant::now() + send_timeout);
                }
            }
        }
        // The connection is closed: whatever a stream still waits for
        // fails at once, and the stream logs what it got.
        while streams.next().await.is_some() {}
    }

    /// One stream: front-door checks, the routing decision, then a local
    /// answer or the backend exchange; logged and counted at its end.
    async fn stream(
        &self,
        req: http::Request<RecvStream>,
        respond: SendResponse<Bytes>,
        conn: &ConnInfo,
    ) -> StreamEnd {
        let (parts, body) = req.into_parts();
        if malformed(&parts) {
            let mut respond = respond;
            respond.send_reset(Reason::PROTOCOL_ERROR);
            return StreamEnd::Malformed;
        }
        let client = Client::new(body, respond, self.router.options.write_timeout);
        self.exchange(&parts, client, conn).await;
        StreamEnd::Done
    }

    /// A well-formed request's exchange, whichever protocol its stream
    /// came on (HTTP/3's too: crate::plane::h3): front-door checks, the
    /// routing decision, then a local answer or the backend exchange;
    /// logged and counted at its end.
    pub(super) async fn exchange(&self, parts: &Parts, client: Client, conn: &ConnInfo) {
        let mut st = StreamCtx {
            started: Instant::now(),
            _in_flight: self.router.metrics.request_started(),
            client,
            upstream: None,
            endpoint: None,
            tried: Tried::default(),
            upstream_started: None,
            body_limit: 0,
            _tenant: None,
            gateway: None,
            series: None,
            ids: None,
            reason: None,
            uri: None,
            policy: None,
        };
        if let Err(failure) = self.route(parts, conn, &mut st).await {
            if st.client.out.status == 0 && st.replaces(failure.status()) {
                // The listed 502 or 504: the error backend's page.
                let head_only = parts.method == Method::HEAD;
                let page = Box::pin(st.error_page(failure.status(), head_only));
                if page.await.is_err() {
                    self.router.metrics.client_aborts.inc();
                }
            } else {
                self.fail(&mut st, &failure);
            }
        }
        if let Err(failure) = st.client.out.flush().await {
            st.reason.get_or_insert(failure.reason());
            self.router.metrics.client_aborts.inc();
        }
        self.log(parts, conn, &st);
    }

    /// Routes and answers one request; an `Err` is answered by
    /// [`Self::fail`].
    async fn route<'p>(
        &self,
        parts: &'p Parts,
        conn: &ConnInfo,
        st: &mut StreamCtx<'p>,
    ) -> Result<(), Failure> {
        let router = &self.router;
        let declared = match front_door(parts) {
            Ok(declared) => declared,
            Err(refusal) => {
                router.metrics.refused(refusal);
                st.reason = Some(refusal.label());
                self.ids(parts, st, None);
                return st
                    .client
                    .out
                    .answer(parts, refusal.status(), refusal.body(), &[]);
            }
        };
        let authority = authority(parts);
        let head = Head {
            host_headers: parts.headers.get_all(HOST).iter().count(),
            authority,
            path: parts.uri.path(),
            requires_host: false,
            declared_length: declared,
        };
        let request = pipeline::Request {
            head,
            method: parts.method.as_str(),
            query: parts.uri.query().unwrap_or(""),
            headers: &parts.headers,
        };
        let forward = match pipeline::route(router, &request, conn).await {
            Routed::Forward(forward) => {
                self.advertise(st, conn, &forward.route);
                forward
            }
            Routed::Answer(answer, route) => {
                if let Some(route) = &route {
                    self.advertise(st, conn, route);
                }
                return self.answer(parts, st, answer, route.as_ref()).await;
            }
            Routed::Policy(answer, route) => {
                self.advertise(st, conn, &route);
                st.reason = Some(answer.reason);
                self.ids(parts, st, Some(&route));
                let fields = crate::plane::traffic::engines::h2_fields(&answer);
                let out = &mut st.client.out;
                return out.answer(parts, answer.status, answer.body, &fields);
            }
            Routed::ErrorPage(page, route, tenant) => {
                self.advertise(st, conn, &route);
                st.reason = Some(page.reason);
                // Held while the page is sent, as a forward's is.
                st._tenant = tenant;
                self.ids(parts, st, Some(&route));
                return st.client.out.page(page, parts.method == Method::HEAD).await;
            }
            Routed::AcmeChallenge(answer) => {
                st.reason = Some("acme_challenge");
                self.ids(parts, st, None);
                let body = Bytes::from(answer);
                return st.client.out.answer_bytes(parts, 200, body, &[]);
            }
        };
        if let Some(path) = &forward.path {
            match with_path(&parts.uri, path) {
                Some(uri) => st.uri = Some(uri),
                None => {
                    return self
                        .answer(parts, st, UNFORWARDABLE_PATH, Some(&forward.route))
                        .await;
                }
            }
        }
        if let Some(gateway) = &forward.gateway {
            let target = st.uri(parts).path_and_query().map_or("/", |p| p.as_str());
            pipeline::start_mirrors(
                router,
                gateway,
                parts.method.as_str(),
                target,
                authority,
                || {
                    parts
                        .headers
                        .iter()
                        .map(|(n, v)| (n.as_str(), v.as_bytes()))
                },
            );
        }
        self.ids(parts, st, Some(&forward.route));
        st.upstream = Some(forward.upstream);
        st.body_limit = forward.body_limit;
        st._tenant = forward.tenant;
        st.gateway = forward.gateway;
        st.policy = forward.policy;
        st.client.out.pacer = st.policy.as_mut().and_then(|p| p.pacer.take());
        if let Some(pages) = st.policy.as_mut().and_then(|p| p.error_pages.as_mut())
            && let Some(ids) = &st.ids
        {
            // The ID the backend gets, as ingress-nginx's `$req_id`.
            pages.request_id = ids.request_id.as_str().into();
        }
        if parts.method == Method::CONNECT {
            // HTTP/2 CONNECT asks for a tunnel, which no route
            // offers (RFC 9113 §8.5).
            st.reason = Some("connect");
            return st
                .client
                .out
                .answer(parts, 405, "405 CONNECT is not served\n", &[]);
        }
        if st.gateway.as_ref().is_some_and(|g| g.h2c)
            || st.upstream.as_ref().is_some_and(|u| u.protocol.is_h2())
        {
            crate::plane::h2c_upstream::forward(router, parts, conn, st).await
        } else {
            crate::plane::h2_upstream::forward(router, parts, conn, st).await
        }
    }

    /// `Alt-Svc` on whatever answers a request about `route`
    /// (crate::plane::alt_svc).
    fn advertise(&self, st: &mut StreamCtx<'_>, conn: &ConnInfo, route: &Route) {
        if let Some(alt) = self.router.alt_svc(conn, route) {
            st.client.out.alt_svc = Some(alt.header_value());
        }
    }

    /// A local answer of the routing decision.
    async fn answer<'p>(
        &self,
        parts: &'p Parts,
        st: &mut StreamCtx<'p>,
        answer: Answer,
        route: Option<&crate::compile::routes::Route>,
    ) -> Result<(), Failure> {
        st.reason = Some(answer.reason);
        self.ids(parts, st, route);
        if let Some(refusal) = answer.refusal {
            self.router.metrics.refused(refusal);
        }
        if let Some(location) = &answer.location {
            return st.client.out.answer(
                parts,
                answer.status,
                "",
                &[(LOCATION, location.as_bytes())],
            );
        }
        if answer.delayed() {
            // A client looping on its tenant's refusals costs one cheap
            // answer per delay (docs/edge.md).
            tokio::time::sleep(self.router.edge.tenant_refusal_delay).await;
            return st
                .client
                .out
                .answer(parts, answer.status, answer.body, &[(RETRY_AFTER, b"1")]);
        }
        st.client.out.answer(parts, answer.status, answer.body, &[])
    }

    /// The request's series, `X-Request-Id` and `traceparent`.
    fn ids<'p>(
        &self,
        parts: &'p Parts,
        st: &mut StreamCtx<'p>,
        route: Option<&crate::compile::routes::Route>,
    ) {
        let (series, trusted) = self.router.cached_series_of(route);
        let sent = |name: &str| parts.headers.get(name).map(|v| v.as_bytes());
        let request_id = trace::request_id(sent(trace::REQUEST_ID), trusted);
        let traceparent = trace::traceparent(sent(trace::TRACEPARENT), &request_id);
        st.series = Some(series);
        st.ids = Some(Ids {
            request_id,
            traceparent,
        });
    }

    /// Answers a failed exchange: 502, 504, 413 or 400 while no response
    /// head went out; a reset once one did (only a reset tells the client
    /// that the body is incomplete).
    fn fail(&self, st: &mut StreamCtx<'_>, failure: &Failure) {
        st.reason.get_or_insert(failure.reason());
        match failure {
            Failure::ClientGone | Failure::ClientStalled => self.router.metrics.client_aborts.inc(),
            Failure::BodyTooLarge => self.router.metrics.refused(Refusal::BodyTooLarge),
            _ => {}
        }
        if st.client.out.status != 0
            || matches!(failure, Failure::ClientGone | Failure::ClientStalled)
        {
            st.client.out.reset(Reason::INTERNAL_ERROR);
            return;
        }
        let status = failure.status();
        let body = match status {
            502 => BAD_GATEWAY_BODY,
            504 => GATEWAY_TIMEOUT_BODY,
            413 => Refusal::BodyTooLarge.body(),
            500 => decide::BAD_REWRITE.body,
            _ => "400 bad request\n",
        };
        let body = Bytes::from_static(body.as_bytes());
        // The route's CORS fields, as on its backend's answers.
        let cors: Vec<(http::HeaderName, &[u8])> =
            crate::plane::traffic::cors::of_forward(st.policy.as_deref())
                .map(|(n, v)| (http::HeaderName::from_static(n), v.as_bytes()))
                .collect();
        let _ = st.client.out.answer_with(status, body, &cors, false);
    }

    /// Counts the request in the metrics and its tenant's series, and
    /// writes its access log line.
    fn log(&self, parts: &Parts, conn: &ConnInfo, st: &StreamCtx<'_>) {
        let router = &self.router;
        let status = st.client.out.status;
        if status != 0 {
            router.metrics.count_response(status);
        }
        let series = st
            .series
            .clone()
            .unwrap_or_else(|| router.metrics.series.get(None, ""));
        let duration = st.started.elapsed();
        let (bytes_in, bytes_out) = (st.client.body.bytes, st.client.out.bytes);
        series.count(status, duration.as_secs_f64(), bytes_in, bytes_out);
        let log = &router.observe.access_log;
        if !log.wants(status, st.reason.is_some()) {
            return;
        }
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let host = authority(parts);
        let mut entry = Entry::http(
            parts.method.as_str(),
            path,
            (!host.is_empty()).then_some(host),
            log.keeps_query(),
        );
        entry.tag = Some(match &st.ids {
            Some(ids) => trace::tag(&series.tag, &ids.request_id, &ids.traceparent),
            None => series.tag.clone(),
        });
        entry.protocol = match conn.alpn.as_deref() {
            Some("h3") => "h3",
            _ => "h2",
        };
        entry.tls = conn.tls_version;
        entry.sni = conn.sni.clone();
        entry.status = status;
        entry.bytes_in = bytes_in;
        entry.bytes_out = bytes_out;
        entry.duration = duration;
        entry.upstream = st.endpoint.as_ref().map(|e| e.addr);
        entry.retries = st.tried.count().saturating_sub(1);
        entry.client = conn.client;
        entry.reason = st.reason;
        log.send(entry);
    }
}

#[async_trait]
impl ServerApp for H2Server {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let conn = crate::plane::h1::conn_info(&stream);
        self.serve(stream, &conn, shutdown.clone()).await;
        None
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamEnd {
    Done,
    /// Reset before routing: counted against the connection.
    Malformed,
}

/// A request no HTTP/1.1 backend may see, reset as a stream error (RFC
/// 9113 §8.1.1): control bytes or a space in `:path` would split the
/// request line once downgraded, and a Content-Length that is not one
/// number cannot frame a body.
pub(super) fn malformed(parts: &Parts) -> bool {
    let target = parts.uri.path_and_query().map_or("", |p| p.as_str());
    if target
        .bytes()
        .any(|b| matches!(b, 0x00 | b'\n' | b'\r' | b' '))
    {
        return true;
    }
    let mut lengths = parts.headers.get_all(CONTENT_LENGTH).iter();
    match (lengths.next(), lengths.next()) {
        (None, _) => false,
        (Some(v), None) => content_length(v).is_none(),
        // Repeats must agree, as one number each.
        (Some(first), Some(_)) => {
            let first = content_length(first);
            first.is_none()
                || parts
                    .headers
                    .get_all(CONTENT_LENGTH)
                    .iter()
                    .any(|v| content_length(v) != first)
        }
    }
}

fn content_length(v: &HeaderValue) -> Option<u64> {
    teapot_h1::scan::parse_length(v.as_bytes()).ok()
}

/// The front-door checks of an HTTP/2 request (docs/edge.md): field bytes,
/// no Transfer-Encoding, one well-formed authority that a `host` field
/// does not contradict. Returns the declared body length.
fn front_door(parts: &Parts) -> Result<Option<u64>, Refusal> {
    edge::check_h2_fields(&parts.headers)?;
    edge::check_host(&parts.headers, &parts.uri)?;
    if let (Some(a), Some(host)) = (parts.uri.authority(), parts.headers.get(HOST))
        && !a.as_str().as_bytes().eq_ignore_ascii_case(host.as_bytes())
    {
        // RFC 9113 §8.3.1: a host field that differs from :authority makes
        // two claims about where the request goes.
        return Err(Refusal::BadHost);
    }
    if parts.uri.authority().is_none() && !parts.headers.contains_key(HOST) {
        return Err(Refusal::BadHost);
    }
    Ok(parts.headers.get(CONTENT_LENGTH).and_then(content_length))
}

/// `uri` with `path` for its path, its query as sent.
fn with_path(uri: &Uri, path: &str) -> Option<Uri> {
    let target = match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(target.parse().ok()?);
    Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(target: &str, headers: &[(&str, &str)]) -> Parts {
        let mut req = http::Request::builder()
            .method("GET")
            .uri(target)
            .version(http::Version::HTTP_2);
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn malformed_requests_are_reset() {
        assert!(!malformed(&parts("https://a.example/x?y=1", &[])));
        assert!(!malformed(&parts(
            "https://a.example/",
            &[("content-length", "5")]
        )));
        assert!(!malformed(&parts(
            "https://a.example/",
            &[("content-length", "5"), ("content-length", "5")]
        )));
        assert!(malformed(&parts(
            "https://a.example/",
            &[("content-length", "5"), ("content-length", "6")]
        )));
        assert!(malformed(&parts(
            "https://a.example/",
            &[("content-length", "5, 5")]
        )));
        assert!(malformed(&parts(
            "https://a.example/",
            &[("content-length", "-1")]
        )));
    }

    #[test]
    fn the_front_door_wants_one_authority() {
        assert_eq!(front_door(&parts("https://a.example/", &[])), Ok(None));
        assert_eq!(
            front_door(&parts("https://a.example/", &[("host", "A.example")])),
            Ok(None)
        );
        assert_eq!(
            front_door(&parts("https://a.example/", &[("host", "b.example")])),
            Err(Refusal::BadHost)
        );
        assert_eq!(front_door(&parts("/x", &[])), Err(Refusal::BadHost));
        assert_eq!(front_door(&parts("/x", &[("host", "a.example")])), Ok(None));
        assert_eq!(
            front_door(&parts(
                "https://a.example/",
                &[("transfer-encoding", "chunked")]
            )),
            Err(Refusal::TransferEncoding)
        );
        assert_eq!(
            front_door(&parts("https://a.example/", &[("content-length", "12")])),
            Ok(Some(12))
        );
        assert_eq!(
            authority(&parts("/x", &[("host", "h.example")])),
            "h.example"
        );
        assert_eq!(
            authority(&parts("https://a.example/x", &[("host", "h.example")])),
            "a.example"
        );
    }

    #[test]
    fn failures_map_to_statuses() {
        assert_eq!(Failure::Connect("x").status(), 502);
        assert_eq!(Failure::ConnectTimeout.status(), 504);
        assert_eq!(Failure::ReadTimeout.status(), 504);
        assert_eq!(Failure::Upstream("x").status(), 502);
        assert_eq!(Failure::BodyTooLarge.status(), 413);
        assert_eq!(Failure::ClientGone.status(), 0);
        assert_eq!(Failure::ReadTimeout.reason(), "upstream_read_timeout");
    }

    /// A client that stops reading keeps h2 from writing the GOAWAY that
    /// closes an idle connection: the connection is dropped a send
    /// timeout after it was asked to close, not kept with its buffers for
    /// as long as the client likes.
    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_that_does_not_read_is_dropped() {
        use tokio::io::AsyncWriteExt;

        use crate::compile::snapshot::Snapshot;
        use crate::plane::edge::EdgeConfig;
        use crate::plane::metrics::Metrics;
        use crate::plane::proxy::{Router, UpstreamOptions};

        let snapshots = Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot::default()));
        let options = UpstreamOptions {
            write_timeout: Duration::from_secs(7),
            ..UpstreamOptions::default()
        };
        let mut edge = EdgeConfig::default();
        edge.h2.idle_timeout = Duration::from_secs(5);
        let router = Router::new(snapshots, Metrics::new().unwrap(), options).with_edge(edge);
        let app = H2Server::new(router);
        // Room for the server's SETTINGS and the ACK of the client's, not
        // for the GOAWAY and PING of its close as well.
        let (io, mut peer) = tokio::io::duplex(60);
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        peer.write_all(&hello).await.unwrap();
        let (_stop, stop) = tokio::sync::watch::channel(false);
        let info = ConnInfo::default();
        let started = tokio::time::Instant::now();
        let served = tokio::time::timeout(Duration::from_secs(60), app.serve(io, &info, stop));
        served.await.expect("the connection is dropped");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(12) && took < Duration::from_secs(13),
            "{took:?}"
        );
        drop(peer);
    }

    /// An HTTP/2 connection's future lives as long as the connection,
    /// idle or not: the handshake's state is boxed and gone after it, so
    /// the future holds the connection once (docs/capacity.md, "What the
    /// proxy keeps").
    #[tokio::test]
    async fn an_http2_connection_future_holds_the_connection_once() {
        use crate::compile::snapshot::Snapshot;
        use crate::plane::metrics::Metrics;
        use crate::plane::proxy::Router;

        let snapshots = Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot::default()));
        let router = Router::new(snapshots, Metrics::new().unwrap(), Default::default());
        let app = H2Server::new(router);
        let (io, _peer) = tokio::io::duplex(64);
        let (_stop, stop) = tokio::sync::watch::channel(false);
        let info = ConnInfo::default();
        let connection = app.serve(io, &info, stop);
        let size = std::mem::size_of_val(&connection);
        assert!(
            size <= 1800,
            "an HTTP/2 connection's future is {size} bytes"
        );
    }
}
