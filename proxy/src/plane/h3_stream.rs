//! One HTTP/3 request stream's two halves, as the HTTP/2 stream's
//! [`Client`](crate::plane::h2_stream::Client) holds them: the request
//! body ([`H3Recv`]) and where the answer goes ([`H3Send`]). The
//! exchange code (crate::plane::h2_upstream, crate::plane::h2c_upstream,
//! the error pages) is written once against `Client`; these are what it
//! reaches on an HTTP/3 stream.
//!
//! h3 writes a head with an `await` (QPACK, then the QUIC stream), where
//! h2 only queues it; the exchange code sends heads and small answers
//! without awaiting, so an HTTP/3 head waits here and goes out with the
//! first body bytes, or when the stream is [`H3Send::flush`]ed at its end.

use std::time::Duration;

use bytes::{Buf, Bytes};
use h3::error::Code;
use h3::server::RequestStream;
use http::{HeaderMap, Response};
use tokio::time::error::Elapsed;

/// Why an HTTP/3 stream's half failed (the exchange's own failure is
/// made from it in crate::plane::h2_stream, above this file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lost {
    /// The client reset the stream or the connection ended.
    Gone,
    /// The client's window stayed shut past the send timeout: the stream
    /// was reset.
    Stalled,
}

pub(super) type SendHalf = RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
pub(super) type RecvHalf = RequestStream<h3_quinn::RecvStream, Bytes>;

/// The request body of an HTTP/3 stream.
pub(super) struct H3Recv {
    stream: RecvHalf,
    /// A piece read ahead to learn whether there is a body at all.
    first: Option<Bytes>,
    /// The client ended its side (or there never was a body).
    ended: bool,
}

impl H3Recv {
    /// `first`: what [`read_ahead`] got; `ended`: the stream's end was
    /// seen already.
    pub(super) fn new(stream: RecvHalf, first: Option<Bytes>, ended: bool) -> H3Recv {
        H3Recv {
            stream,
            first,
            ended,
        }
    }

    /// Whether the request has no body: its end came with (or right
    /// after) the head.
    pub(super) fn is_empty(&self) -> bool {
        self.ended && self.first.is_none()
    }

    pub(super) async fn read(&mut self) -> Result<Option<Bytes>, Lost> {
        if let Some(first) = self.first.take() {
            return Ok(Some(first));
        }
        if self.ended {
            return Ok(None);
        }
        match next(&mut self.stream).await {
            Ok(Some(data)) => Ok(Some(data)),
            Ok(None) => {
                self.ended = true;
                Ok(None)
            }
            Err(e) => {
                tracing::debug!(error = %e, "reading an HTTP/3 request body");
                Err(Lost::Gone)
            }
        }
    }

    pub(super) async fn trailers(&mut self) -> Result<Option<HeaderMap>, Lost> {
        self.stream.recv_trailers().await.map_err(|_| Lost::Gone)
    }
}

/// The next non-empty piece of a request body; `None` at its end.
async fn next(stream: &mut RecvHalf) -> Result<Option<Bytes>, h3::error::StreamError> {
    loop {
        match stream.recv_data().await? {
            Some(mut buf) => {
                if buf.has_remaining() {
                    return Ok(Some(buf.copy_to_bytes(buf.remaining())));
                }
            }
            None => return Ok(None),
        }
    }
}

/// `$fut` cut at `$limit` (`Result<_, Elapsed>`, as `tokio::time::timeout`),
/// with the timer set only when `$fut` has to wait: most request heads
/// and GETs' ends arrive in the packet that opens the stream, and most
/// answers fit the client's window, so the common case pays for no
/// deadline and no timer-wheel entry. The first poll takes no time, so a
/// future that waits is still cut `$limit` after it began. A macro, not
/// an `async fn`: the future is built in the caller's own state, where a
/// function taking it by value would copy it once more.
macro_rules! within {
    ($limit:expr, $fut:expr) => {{
        let mut fut = std::pin::pin!($fut);
        match futures::poll!(fut.as_mut()) {
            std::task::Poll::Ready(out) => Ok(out),
            std::task::Poll::Pending => tokio::time::timeout($limit, fut).await,
        }
    }};
}
pub(super) use within;

/// Reads ahead to learn whether a request without a Content-Length has
/// a body (the HTTP/1 backend path frames it by that): the first piece,
/// or the stream's end, or (`wait` passed: a client that sends its body
/// later) neither. Returns the piece and whether the end was seen.
pub(super) async fn read_ahead(
    stream: &mut RecvHalf,
    wait: Duration,
) -> Result<(Option<Bytes>, bool), Lost> {
    match within!(wait, next(stream)) {
        Ok(Ok(Some(first))) => Ok((Some(first), false)),
        Ok(Ok(None)) => Ok((None, true)),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "reading an HTTP/3 request body");
            Err(Lost::Gone)
        }
        Err(_) => Ok((None, false)),
    }
}

/// Where an HTTP/3 stream's answer goes.
pub(super) struct H3Send {
    stream: SendHalf,
    /// A head not written yet, and whether it ends the response.
    head: Option<(Response<()>, bool)>,
    /// A small answer's body, written after its head.
    body: Option<Bytes>,
    trailers: Option<HeaderMap>,
    /// The stream was finished or reset: nothing more goes out.
    done: bool,
}

impl H3Send {
    pub(super) fn new(stream: SendHalf) -> H3Send {
        H3Send {
            stream,
            head: None,
            body: None,
            trailers: None,
            done: false,
        }
    }

    /// Keeps the head until the first body bytes or the flush.
    pub(super) fn set_head(&mut self, resp: Response<()>, end: bool) -> Result<(), Lost> {
        if self.done || self.head.is_some() {
            return Err(Lost::Gone);
        }
        self.head = Some((resp, end));
        Ok(())
    }

    /// A small answer's whole body, after its head.
    pub(super) fn set_body(&mut self, body: Bytes) {
        self.body = Some(body);
    }

    pub(super) fn set_trailers(&mut self, trailers: HeaderMap) -> Result<(), Lost> {
        if self.done {
            return Err(Lost::Gone);
        }
        self.trailers = Some(trailers);
        Ok(())
    }

    /// Writes `data` (after a waiting head), ending the response when
    /// `end`. QUIC's flow control is the back pressure: a client whose
    /// window stays shut past `timeout` gets the stream reset.
    pub(super) async fn send(
        &mut self,
        data: Bytes,
        end: bool,
        timeout: Duration,
    ) -> Result<(), Lost> {
        if self.done {
            return Err(Lost::Gone);
        }
        let written = within!(timeout, self.write(data, end));
        self.settle(written)
    }

    /// Writes whatever waits (head, small body, trailers) and ends the
    /// stream: called once the exchange is over.
    pub(super) async fn flush(&mut self, timeout: Duration) -> Result<(), Lost> {
        if self.done {
            return Ok(());
        }
        let written = within!(timeout, self.write(Bytes::new(), true));
        self.settle(written)
    }

    fn settle(
        &mut self,
        written: Result<Result<(), h3::error::StreamError>, Elapsed>,
    ) -> Result<(), Lost> {
        match written {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "sending an HTTP/3 response");
                self.done = true;
                Err(Lost::Gone)
            }
            Err(_) => {
                self.reset(Code::H3_REQUEST_CANCELLED);
                Err(Lost::Stalled)
            }
        }
    }

    async fn write(&mut self, data: Bytes, end: bool) -> Result<(), h3::error::StreamError> {
        let mut ends = end;
        if let Some((head, end_with_head)) = self.head.take() {
            ends |= end_with_head;
            self.stream.send_response(head).await?;
        }
        if let Some(body) = self.body.take() {
            ends = true;
            self.stream.send_data(body).await?;
        }
        if !data.is_empty() {
            self.stream.send_data(data).await?;
        }
        if let Some(trailers) = self.trailers.take() {
            ends = true;
            self.stream.send_trailers(trailers).await?;
        }
        if ends {
            self.done = true;
            self.stream.finish().await?;
        }
        Ok(())
    }

    /// Resets the stream (what RST_STREAM is on HTTP/2): the client
    /// learns that the answer is incomplete.
    pub(super) fn reset(&mut self, code: Code) {
        if !self.done {
            self.done = true;
            self.head = None;
            self.body = None;
            self.trailers = None;
            self.stream.stop_stream(code);
        }
    }
}
