//! teapot's HTTP/1.1 proxy engine.
//!
//! A keep-alive proxy loop for one client connection at a time, generic
//! over the client stream (`AsyncRead + AsyncWrite + Unpin`: plain TCP,
//! TLS, or Pingora's boxed `Stream`), with no Pingora dependency. Per
//! request it parses the head once, in place, in a buffer the connection
//! reuses; asks a [`Router`] (an unboxed future, ready at once unless the
//! router must wait); writes the upstream head as bytes
//! with the router's edits spliced in; and relays both bodies with their
//! framing re-validated. No task, channel, timer or header map is created
//! per request, and idle upstream connections sit in a [`Pool`] with no
//! watcher task.
//!
//! # Use
//!
//! ```no_run
//! use std::sync::Arc;
//! use teapot_h1::{ConnInfo, Decision, Engine, EngineConfig, Forward, RequestHead};
//!
//! # async fn demo(listener: tokio::net::TcpListener) {
//! let upstream: std::net::SocketAddr = "127.0.0.1:8080".parse().unwrap();
//! let router = move |_: &RequestHead<'_>, _: &ConnInfo| {
//!     Decision::forward(Forward::to(vec![upstream]))
//! };
//! let engine = Arc::new(Engine::new(router, (), EngineConfig::default()));
//! let (_tx, shutdown) = tokio::sync::watch::channel(false);
//! loop {
//!     let (stream, peer) = listener.accept().await.unwrap();
//!     let (engine, shutdown) = (engine.clone(), shutdown.clone());
//!     tokio::spawn(async move {
//!         let info = ConnInfo { client: Some(peer), ..ConnInfo::default() };
//!         engine.serve(stream, info, shutdown).await;
//!     });
//! }
//! # }
//! ```
//!
//! # Layout
//!
//! - [`scan`]: the request-smuggling defence ([`scan_h1`], [`Refusal`],
//!   [`H1Framing`], [`body_limit`]), teapot's one home for the HTTP/1
//!   framing rules (`proxy/src/plane/edge.rs` re-exports them); runs on
//!   the raw head before `httparse`.
//! - `response`: a backend's response head ([`parse_response`]) and its
//!   body's framing ([`response_framing`], RFC 9112 §6.3), for the engine
//!   and for teapot's HTTP/2-to-HTTP/1 exchange alike.
//! - `body`: Content-Length, chunked (re-validated, re-encoded
//!   canonically, trailers checked) and close-delimited body decoding that
//!   never consumes past the framed end.
//! - `hop`: the hop-by-hop list ([`is_hop_by_hop`], RFC 9110 §7.6.1), one
//!   for both HTTP versions.
//! - `edits`: [`HeaderEdits`], a router's header changes kept as they go on
//!   the wire.
//! - `head`: [`RequestHeadWriter`], the one HTTP/1.1 request-head encoder
//!   every request teapot sends to a backend leaves through (forwarded,
//!   from an HTTP/2 client, mirrored, sub-requests).
//! - `upstream_http`: [`UpstreamHttp`], the HTTP version and `Connection`
//!   field a route's requests go to their backends with, named by both
//!   [`Forward`] and the encoder.
//! - `wire`: head serialization: hop-by-hop and `Connection`-listed fields
//!   dropped, [`HeaderEdits`] applied, framing re-emitted, `Date` added
//!   where a response has none (RFC 9110 §6.6.1).
//! - [`router`]: the decision interface ([`Router`], [`RequestHead`],
//!   [`ConnInfo`], [`Decision`], [`Forward`], [`Respond`]).
//! - [`observer`]: per-request metrics and access-log hook ([`Observer`],
//!   [`RequestLog`], [`Outcome`]).
//! - [`pool`]: idle upstream connections ([`Pool`]), checked lazily on
//!   reuse; addresses no longer picked are swept when connections return.
//! - [`upstream`]: the upstream connection, plain TCP or secured by a
//!   router's [`Transport`] (TLS to the backend), pooled per class.
//! - `connect`: [`connect`] and [`connect_upstream`], the one connector
//!   every backend connection teapot opens goes through (forwarded,
//!   from an HTTP/2 client, mirrored, sub-requests): one timeout rule,
//!   `TCP_NODELAY`, one [`ConnectError`].
//! - `client_tcp`: a client's TCP connection, read and written directly
//!   until it has to wait, and only then added to the event loop.
//! - [`spare`]: read buffers a closed or idle connection left, kept
//!   per thread (bounded) for the next request.
//! - `tunnel`: the relay after a 101, closed after an idle timeout.
//! - `engine`: the loop ([`Engine::serve`]), timeouts, limits, graceful
//!   drain, 1xx/101 handling, retry of an idempotent request whose reused
//!   connection failed before any response byte.
//! - [`retry`]: a route's [`RetryPolicy`] and its one decision after a
//!   failed try, for this engine and teapot's HTTP/2-to-HTTP/1 exchange.

mod body;
mod client_tcp;
mod connect;
mod edits;
mod engine;
mod head;
mod hop;
pub mod observer;
pub mod pool;
mod response;
pub mod retry;
pub mod router;
pub mod scan;
pub mod spare;
mod tunnel;
pub mod upstream;
mod upstream_http;
mod wire;

pub use body::{BodyError, BodyFraming, ChunkedPayload};
pub use client_tcp::ClientTcp;
pub use connect::{ConnectError, connect, connect_upstream};
pub use engine::{ClientStream, ConnEnd, Engine, EngineConfig};
pub use head::{BodyLength, RequestHeadWriter};
pub use hop::{CONNECTION_SPECIFIC, is_connection_specific, is_hop_by_hop};
pub use observer::{Observer, Outcome, RequestLog, UpstreamError};
pub use pool::{Pool, PoolStats};
pub use response::{ResponseFraming, ResponseHead, parse_response, response_framing};
pub use retry::{Failed, RetryPolicy, Tries, Verdict};
pub use router::Buffering;
pub use router::{
    ConnInfo, Decision, Forward, HeaderEdits, Pacer, RequestHead, RequestTarget, Respond,
    RewriteField, Router, Timeouts, Upstreams,
};
pub use scan::{
    H1Framing, HeadLimits, MAX_HEADERS_CAP, MAX_RESPONSE_HEADER_BYTES, Refusal, body_limit, scan_h1,
};
pub use upstream::{SecuredStream, Securing, Transport, UpstreamConn};
pub use upstream_http::{ConnectionValue, HttpVersion, MAX_CONNECTION_VALUE, UpstreamHttp};
