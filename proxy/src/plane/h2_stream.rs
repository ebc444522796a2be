//! One HTTP/2 stream as both halves of teapot see it: the client's side
//! ([`Client`]: its body and where the answer goes), the per-stream state
//! ([`StreamCtx`]) and how a forwarded exchange fails ([`Failure`]). The
//! HTTP/2 server (crate::plane::h2) makes them; its backend paths
//! (crate::plane::h2_upstream, crate::plane::h2c_upstream) and the
//! [`Router`](crate::plane::proxy::Router)'s edits take them, so they live
//! below all of those.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, SERVER};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri};

use crate::compile::upstream::{Tried, Upstream};
use crate::live::endpoints::Endpoint;
use crate::live::fairness::TenantPermit;
use crate::plane::decide::GatewayForward;
use crate::plane::h3_stream::{H3Recv, H3Send, Lost};
use crate::plane::metrics::Series;
use crate::plane::proxy::SERVER_NAME;
use crate::plane::trace::Ids;

/// The flow-control window teapot grants each stream of an HTTP/2 peer,
/// client or h2c backend: what the peer may send on one stream before
/// teapot reads it. And the largest frame teapot accepts, which it holds
/// whole before parsing. Both are the protocol's initial values (RFC 9113
/// §6.5.2), set explicitly so that no change of the h2 crate's defaults
/// moves them; docs/edge.md, "HTTP/2".
pub(super) const STREAM_WINDOW: u32 = 65_535;
pub(super) const MAX_FRAME_SIZE: u32 = 16_384;

/// The authority that decides routing: `:authority` wins over a `host`
/// field (RFC 9113 §8.3.1).
pub(super) fn authority(parts: &Parts) -> &str {
    authority_of(&parts.uri, &parts.headers)
}

/// [`authority`] of an edited request.
pub(super) fn authority_of<'a>(uri: &'a http::Uri, headers: &'a HeaderMap) -> &'a str {
    if let Some(a) = uri.authority() {
        return a.as_str();
    }
    headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
}

/// Per-stream state: what the exchange needs and what the log reports.
pub(super) struct StreamCtx<'p> {
    pub(super) started: Instant,
    pub(super) _in_flight: crate::plane::metrics::InFlight,
    pub client: Client,
    pub upstream: Option<Arc<Upstream>>,
    pub endpoint: Option<Arc<Endpoint>>,
    pub tried: Tried,
    pub upstream_started: Option<Instant>,
    /// Request body bytes allowed (0: no limit).
    pub body_limit: u64,
    /// The tenant's connection slot, held until the stream ends.
    pub(super) _tenant: Option<TenantPermit>,
    pub gateway: Option<GatewayForward>,
    pub series: Option<Arc<Series>>,
    pub ids: Option<Ids<'p>>,
    /// Why teapot answered itself, or how the exchange failed.
    pub reason: Option<&'static str>,
    /// The client's URI with the normalised path the route matched, when
    /// that differs from the client's ([`StreamCtx::uri`]).
    pub(super) uri: Option<Uri>,
    /// What the route's traffic policy adds (crate::plane::traffic).
    pub policy: Option<Box<crate::plane::traffic::Applied>>,
}

impl StreamCtx<'_> {
    /// The URI the backend gets (before Gateway filters): the client's,
    /// with the path the route matched.
    pub fn uri<'a>(&'a self, parts: &'a Parts) -> &'a Uri {
        self.uri.as_ref().unwrap_or(&parts.uri)
    }

    /// Whether a response of `status` is replaced by the route's error
    /// page (`custom-http-errors`); false for every other route.
    pub fn replaces(&self, status: u16) -> bool {
        let pages = self.policy.as_ref().and_then(|p| p.error_pages.as_ref());
        pages.is_some_and(|pages| pages.replaces(status))
    }

    /// The error backend's page in place of a response of `status`
    /// (crate::plane::traffic::errors): a listed status of the backend, or
    /// teapot's own 502 or 504.
    pub async fn error_page(&mut self, status: u16, head_only: bool) -> Result<(), Failure> {
        let Some(pages) = self.policy.as_mut().and_then(|p| p.error_pages.take()) else {
            return Ok(());
        };
        let page = pages.page(status).await;
        self.reason = Some(page.reason);
        self.client.out.page(page, head_only).await
    }
}

/// The client's side of one stream: its request body, and where the
/// answer goes (two parts, so an exchange can stream both ways at once).
pub(super) struct Client {
    pub body: RequestBody,
    pub out: Responder,
}

impl Client {
    /// `send_timeout`: how long one piece of the answer may wait for the
    /// client's flow-control window ([`Responder::send_data`]).
    pub(super) fn new(
        body: RecvStream,
        respond: SendResponse<Bytes>,
        send_timeout: Duration,
    ) -> Client {
        Client {
            body: RequestBody {
                stream: Body::H2(body),
                bytes: 0,
            },
            out: Responder {
                to: To::H2 {
                    respond,
                    send: None,
                },
                status: 0,
                bytes: 0,
                send_timeout,
                pacer: None,
                alt_svc: None,
            },
        }
    }

    /// The halves of an HTTP/3 stream (crate::plane::h3), which the
    /// exchange code takes as it takes an HTTP/2 stream's.
    pub(super) fn h3(body: H3Recv, send: H3Send, send_timeout: Duration) -> Client {
        Client {
            body: RequestBody {
                stream: Body::H3(Box::new(body)),
                bytes: 0,
            },
            out: Responder {
                to: To::H3(Box::new(send)),
                status: 0,
                bytes: 0,
                send_timeout,
                pacer: None,
                alt_svc: None,
            },
        }
    }
}

/// The request body's stream, by the client's protocol.
///
/// HTTP/3's halves are boxed: an HTTP/2 stream's state stays the size it
/// was.
enum Body {
    H2(RecvStream),
    H3(Box<H3Recv>),
}

/// The request body of a stream.
pub(super) struct RequestBody {
    stream: Body,
    /// Bytes read so far.
    pub bytes: u64,
}

impl RequestBody {
    /// Whether the request has no body (its HEADERS ended the stream).
    pub fn is_empty(&self) -> bool {
        match &self.stream {
            Body::H2(stream) => stream.is_end_stream(),
            Body::H3(stream) => stream.is_empty(),
        }
    }

    /// The next piece of the body, its flow-control window given back at
    /// once (the backend's socket or stream is the back pressure).
    pub async fn read(&mut self) -> Result<Option<Bytes>, Failure> {
        let stream = match &mut self.stream {
            Body::H2(stream) => stream,
            Body::H3(stream) => {
                let data = stream.read().await.map_err(Failure::from)?;
                if let Some(data) = &data {
                    self.bytes += data.len() as u64;
                }
                return Ok(data);
            }
        };
        match stream.data().await {
            None => Ok(None),
            Some(Ok(data)) => {
                let _ = stream.flow_control().release_capacity(data.len());
                self.bytes += data.len() as u64;
                Ok(Some(data))
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "reading an HTTP/2 request body");
                Err(Failure::ClientGone)
            }
        }
    }

    /// The request's trailers (gRPC sends some), after its body.
    pub async fn trailers(&mut self) -> Result<Option<HeaderMap>, Failure> {
        match &mut self.stream {
            Body::H2(stream) => stream.trailers().await.map_err(|_| Failure::ClientGone),
            Body::H3(stream) => stream.trailers().await.map_err(Failure::from),
        }
    }
}

/// Where a stream's answer goes.
pub(super) struct Responder {
    to: To,
    /// The response status once its head went out, else 0.
    pub status: u16,
    /// Body bytes sent.
    pub bytes: u64,
    /// How long one piece of the body may wait for the client's window,
    /// as the HTTP/1 engine bounds each write to a client.
    send_timeout: Duration,
    /// `limit-rate`: the body's pace (crate::plane::traffic::bandwidth);
    /// `None` for every other route.
    pub pacer: Option<crate::plane::traffic::bandwidth::Pacer>,
    /// `Alt-Svc`, added to the head whoever makes it (the backend's
    /// answer, teapot's own, an error page): set once the request's route
    /// is known (crate::plane::alt_svc).
    pub alt_svc: Option<HeaderValue>,
}

/// Where the answer goes, by the client's protocol.
enum To {
    H2 {
        respond: SendResponse<Bytes>,
        send: Option<SendStream<Bytes>>,
    },
    H3(Box<H3Send>),
}

impl Responder {
    /// Sends the response head; `end`: there is no body. (HTTP/3 writes
    /// it with the first body bytes or at the stream's end: [`H3Send`].)
    pub fn send_head(&mut self, mut resp: Response<()>, end: bool) -> Result<(), Failure> {
        if let Some(alt_svc) = self.alt_svc.take() {
            resp.headers_mut().append(http::header::ALT_SVC, alt_svc);
        }
        let status = resp.status().as_u16();
        match &mut self.to {
            To::H2 { respond, send } => {
                let sent = respond.send_response(resp, end).map_err(|e| {
                    tracing::debug!(error = %e, "sending an HTTP/2 response head");
                    Failure::ClientGone
                })?;
                *send = Some(sent);
            }
            To::H3(h3) => h3.set_head(resp, end).map_err(Failure::from)?,
        }
        self.status = status;
        Ok(())
    }

    /// Writes what an HTTP/3 answer still holds back and ends its stream
    /// (nothing to do on HTTP/2, whose heads and small bodies h2 queued).
    pub(super) async fn flush(&mut self) -> Result<(), Failure> {
        match &mut self.to {
            To::H2 { .. } => Ok(()),
            To::H3(h3) => h3.flush(self.send_timeout).await.map_err(Failure::from),
        }
    }

    /// Sends body bytes as the client's flow-control window allows, so no
    /// more is buffered than one read of the backend. A client whose
    /// stream or connection window stays shut cannot hold them (and the
    /// backend's connection, the tenant's slot) for longer than the send
    /// timeout: the stream is reset and its buffers released.
    pub async fn send_data(&mut self, mut data: Bytes, end: bool) -> Result<(), Failure> {
        // A paced body goes in the pieces its pacer permits, a timer
        // between them; the stream holds no window while it waits, so the
        // connection's other streams go on.
        while let Some(pacer) = self.pacer.as_mut() {
            match pacer.permit(data.len(), std::time::Instant::now()) {
                Ok(n) if n < data.len() => {
                    let piece = data.split_to(n.max(1));
                    self.send_unpaced(piece, false).await?;
                }
                Ok(_) => break,
                Err(until) => tokio::time::sleep_until(until.into()).await,
            }
        }
        self.send_unpaced(data, end).await
    }

    async fn send_unpaced(&mut self, data: Bytes, end: bool) -> Result<(), Failure> {
        let send = match &mut self.to {
            To::H2 { send, .. } => send.as_mut().ok_or(Failure::ClientGone)?,
            To::H3(h3) => {
                self.bytes += data.len() as u64;
                return h3
                    .send(data, end, self.send_timeout)
                    .await
                    .map_err(Failure::from);
            }
        };
        self.bytes += data.len() as u64;
        send_flow_controlled(send, data, end, self.send_timeout)
            .await
            .map_err(|unsent| match unsent {
                Unsent::Stalled => Failure::ClientStalled,
                Unsent::Gone(e) => {
                    tracing::debug!(error = %e, "sending an HTTP/2 response body");
                    Failure::ClientGone
                }
            })
    }

    /// An error page (crate::plane::traffic::errors) in place of the
    /// response: its status, fields and body, framed here.
    pub async fn page(
        &mut self,
        page: crate::plane::traffic::errors::Page,
        head_only: bool,
    ) -> Result<(), Failure> {
        let mut resp = Response::new(());
        *resp.status_mut() = StatusCode::from_u16(page.status).unwrap_or(StatusCode::BAD_GATEWAY);
        let headers = resp.headers_mut();
        for (name, value) in page.headers {
            headers.append(name, value);
        }
        headers.insert(SERVER, HeaderValue::from_static(SERVER_NAME));
        headers.insert(CONTENT_LENGTH, HeaderValue::from(page.body.len()));
        let end = head_only || page.body.is_empty();
        self.send_head(resp, end)?;
        if !end {
            self.send_data(page.body, true).await?;
        }
        Ok(())
    }

    /// Ends the response with trailers.
    pub fn send_trailers(&mut self, trailers: HeaderMap) -> Result<(), Failure> {
        let send = match &mut self.to {
            To::H2 { send, .. } => send.as_mut().ok_or(Failure::ClientGone)?,
            To::H3(h3) => return h3.set_trailers(trailers).map_err(Failure::from),
        };
        send.send_trailers(trailers)
            .map_err(|_| Failure::ClientGone)
    }

    pub(super) fn reset(&mut self, reason: Reason) {
        match &mut self.to {
            To::H2 {
                send: Some(send), ..
            } => send.send_reset(reason),
            To::H2 { respond, .. } => respond.send_reset(reason),
            // HTTP/3's codes for the two reasons teapot resets with.
            To::H3(h3) => h3.reset(if reason == Reason::CANCEL {
                h3::error::Code::H3_REQUEST_CANCELLED
            } else {
                h3::error::Code::H3_INTERNAL_ERROR
            }),
        }
    }

    /// A small answer teapot makes itself.
    pub(super) fn answer(
        &mut self,
        parts: &Parts,
        status: u16,
        body: &'static str,
        extra: &[(http::HeaderName, &[u8])],
    ) -> Result<(), Failure> {
        self.answer_bytes(parts, status, Bytes::from_static(body.as_bytes()), extra)
    }

    pub(super) fn answer_bytes(
        &mut self,
        parts: &Parts,
        status: u16,
        body: Bytes,
        extra: &[(http::HeaderName, &[u8])],
    ) -> Result<(), Failure> {
        self.answer_with(status, body, extra, parts.method == Method::HEAD)
    }

    pub(super) fn answer_with(
        &mut self,
        status: u16,
        body: Bytes,
        extra: &[(http::HeaderName, &[u8])],
        head_only: bool,
    ) -> Result<(), Failure> {
        let mut resp = Response::new(());
        *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        let headers = resp.headers_mut();
        headers.insert(SERVER, HeaderValue::from_static(SERVER_NAME));
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        for (name, value) in extra {
            if let Ok(v) = HeaderValue::from_bytes(value) {
                headers.insert(name.clone(), v);
            }
        }
        let end = head_only || body.is_empty();
        self.send_head(resp, end)?;
        if !end {
            let send = match &mut self.to {
                To::H2 { send, .. } => send.as_mut().ok_or(Failure::ClientGone)?,
                To::H3(h3) => {
                    self.bytes += body.len() as u64;
                    h3.set_body(body);
                    return Ok(());
                }
            };
            self.bytes += body.len() as u64;
            // A few hundred bytes: within what h2 buffers for a stream.
            send.send_data(body, true)
                .map_err(|_| Failure::ClientGone)?;
        }
        Ok(())
    }
}

/// Why [`send_flow_controlled`] did not hand its data over.
#[derive(Debug)]
pub(super) enum Unsent {
    /// The peer's window did not take it within the timeout; the stream
    /// was reset (CANCEL).
    Stalled,
    /// The stream or connection failed, or the peer reset the stream.
    Gone(h2::Error),
}

/// Sends `data` on `send` as its flow-control window allows: waits for
/// capacity rather than letting h2 buffer whatever a peer will not read.
/// The whole of `data` must be taken within `timeout` (the HTTP/1
/// engine's bound on one write to a client): a peer that never opens its
/// stream or connection window, or opens it a byte at a time, gets the
/// stream reset, which drops what h2 buffered for it.
pub(super) async fn send_flow_controlled(
    send: &mut SendStream<Bytes>,
    data: Bytes,
    end: bool,
    timeout: Duration,
) -> Result<(), Unsent> {
    if data.is_empty() {
        return send.send_data(data, end).map_err(Unsent::Gone);
    }
    match tokio::time::timeout(timeout, send_windowed(send, data, end)).await {
        Ok(sent) => sent.map_err(Unsent::Gone),
        Err(_) => {
            send.send_reset(Reason::CANCEL);
            Err(Unsent::Stalled)
        }
    }
}

async fn send_windowed(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> Result<(), h2::Error> {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(granted) => granted?,
            // The stream is gone: the peer reset it.
            None => return Err(h2::Error::from(Reason::CANCEL)),
        };
        if granted == 0 {
            continue;
        }
        let chunk = data.split_to(granted.min(data.len()));
        send.send_data(chunk, end && data.is_empty())?;
    }
    Ok(())
}

/// How a forwarded request ended without its backend's whole answer.
#[derive(Debug)]
pub(super) enum Failure {
    /// No endpoint could be connected to (502).
    Connect(&'static str),
    /// Connecting timed out (504).
    ConnectTimeout,
    /// The backend did not answer in time (504).
    ReadTimeout,
    /// The backend broke the exchange or sent what cannot be forwarded
    /// (502).
    Upstream(&'static str),
    /// The request body went over the route's limit (413).
    BodyTooLarge,
    /// The route's URL rewrite made no valid target (500, as on HTTP/1:
    /// crate::plane::decide::BAD_REWRITE).
    BadRewrite,
    /// The client reset its stream or went away.
    ClientGone,
    /// The client's window stayed shut past the send timeout: the stream
    /// was reset.
    ClientStalled,
}

impl From<Lost> for Failure {
    fn from(lost: Lost) -> Failure {
        match lost {
            Lost::Gone => Failure::ClientGone,
            Lost::Stalled => Failure::ClientStalled,
        }
    }
}

impl Failure {
    pub(super) fn status(&self) -> u16 {
        match self {
            Failure::Connect(_) | Failure::Upstream(_) => 502,
            Failure::ConnectTimeout | Failure::ReadTimeout => 504,
            Failure::BodyTooLarge => 413,
            Failure::BadRewrite => 500,
            Failure::ClientGone | Failure::ClientStalled => 0,
        }
    }

    /// The access log's reason.
    pub(super) fn reason(&self) -> &'static str {
        match self {
            Failure::Connect(_) => "upstream_connect",
            Failure::ConnectTimeout => "upstream_connect_timeout",
            Failure::ReadTimeout => "upstream_read_timeout",
            Failure::Upstream(_) => "upstream_error",
            Failure::BodyTooLarge => "body_too_large",
            Failure::BadRewrite => "rewrite_invalid",
            Failure::ClientGone => "client_abort",
            Failure::ClientStalled => "client_write_timeout",
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Connect(why) | Failure::Upstream(why) => f.write_str(why),
            other => f.write_str(other.reason()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::decide::BAD_REWRITE;

    /// A client that grants its streams no window never gets the body:
    /// after the send timeout the stream is reset (CANCEL) and the
    /// answer's bytes are dropped, instead of held for as long as the
    /// connection lives.
    #[tokio::test]
    async fn a_shut_window_resets_the_stream_after_the_send_timeout() {
        let send_timeout = Duration::from_millis(300);
        let (near, far) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move {
            let mut conn = h2::server::handshake(far).await.unwrap();
            let (req, respond) = conn.accept().await.unwrap().unwrap();
            // The connection's I/O goes on beside the stream.
            tokio::spawn(async move { while conn.accept().await.is_some() {} });
            let mut client = Client::new(req.into_body(), respond, send_timeout);
            client.out.send_head(Response::new(()), false).unwrap();
            let started = Instant::now();
            let sent = client.out.send_data(Bytes::from(vec![b'x'; 4096]), true);
            (sent.await, started.elapsed())
        });
        let (mut requests, conn) = h2::client::Builder::new()
            .initial_window_size(0)
            .handshake::<_, Bytes>(near)
            .await
            .unwrap();
        tokio::spawn(conn);
        let request = http::Request::get("http://a.example/").body(()).unwrap();
        let (response, _) = requests.send_request(request, true).unwrap();
        let mut body = response.await.unwrap().into_body();
        let (sent, waited) = tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the send ends within the timeout")
            .unwrap();
        assert!(matches!(sent, Err(Failure::ClientStalled)), "{sent:?}");
        assert!(waited >= send_timeout, "{waited:?}");
        let reset = body.data().await.expect("the stream's end").unwrap_err();
        assert_eq!(reset.reason(), Some(Reason::CANCEL), "{reset}");
    }

    /// A rewrite that makes no valid target is the route's fault on
    /// HTTP/2 as on HTTP/1: the same status and access-log reason.
    #[test]
    fn a_bad_rewrite_answers_as_on_http1() {
        let failure = Failure::BadRewrite;
        assert_eq!(failure.status(), BAD_REWRITE.status);
        assert_eq!(failure.reason(), BAD_REWRITE.reason);
    }
}
