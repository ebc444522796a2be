//! Bodies held by the engine instead of streamed (a product's
//! `proxy-request-buffering` and `proxy-buffering`), within the bytes its
//! router granted for the request ([`Buffering`], from
//! [`crate::Upstreams::buffering`]).
//!
//! - The request body is read from the client before any backend is
//!   contacted, so a slow upload holds no backend connection; when all of
//!   it fits, it goes with a `Content-Length` (a chunked body is
//!   de-chunked, its trailers dropped, as nginx does). A body longer than
//!   the grant goes on streamed after the part held: there is no disk to
//!   spill it to, and refusing it would break uploads that streamed
//!   before.
//! - The response body is read from the backend ahead of the client, up
//!   to the grant, while the client is written to: a backend whose answer
//!   fits is done with it at its own speed, whatever the client's (and a
//!   `limit-rate` pace's).
//!
//! A route without them pays one call that returns zeros.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::time::Instant;

use super::{Buf, ClientStream, Conn, Stats};
use crate::body::{BodyDecoder, BodyError, BodyFraming, Emit};
use crate::observer::Observer;
use crate::router::{Pacer, Router};
use crate::scan::Refusal;

/// How reading the request body ahead ended.
pub(super) enum Held {
    /// The body is in `up_out` after the head, all of it or the first
    /// `grant` bytes; the rest (if any) is streamed.
    Ready,
    /// The client went or sent a bad body: the request ends here.
    Refused(Refusal),
    ClientGone,
}

/// The length of the request head at the start of `up_out` (the head the
/// engine wrote: fields never hold an empty line).
fn head_len(up_out: &[u8]) -> usize {
    up_out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(up_out.len(), |p| p + 4)
}

/// `up_out`'s head and complete, canonically re-chunked body, rewritten
/// as the head with `content-length` and the payload. `false` (nothing
/// changed) if the head does not end with the chunked framing the engine
/// writes.
pub(super) fn dechunk(up_out: &mut Vec<u8>) -> bool {
    const CHUNKED: &[u8] = b"transfer-encoding: chunked\r\n\r\n";
    let head = head_len(up_out);
    if !up_out[..head].ends_with(CHUNKED) {
        return false;
    }
    let mut payload = Vec::with_capacity(up_out.len() - head);
    let mut decoder = BodyDecoder::new(BodyFraming::Chunked, Emit::Raw, 0);
    if decoder.feed(&up_out[head..], &mut payload).is_err() || !decoder.is_done() {
        return false;
    }
    up_out.truncate(head - CHUNKED.len());
    up_out.extend_from_slice(b"content-length: ");
    crate::wire::write_u64(up_out, payload.len() as u64);
    up_out.extend_from_slice(b"\r\n\r\n");
    up_out.extend_from_slice(&payload);
    true
}

/// For a backend that must be told the body's length (HTTP/1.0):
/// whether the request in `up_out` can go, its chunked body complete
/// (`whole`: the body was held to its end) and then rewritten with a
/// `Content-Length`. A body not held whole cannot go.
pub(super) fn with_length(up_out: &mut Vec<u8>, whole: bool) -> bool {
    const CHUNKED: &[u8] = b"transfer-encoding: chunked\r\n\r\n";
    whole && (dechunk(up_out) || !up_out[..head_len(up_out)].ends_with(CHUNKED))
}

impl<S, R, O> Conn<S, R, O>
where
    S: ClientStream,
    R: Router,
    O: Observer,
{
    /// Reads the request body into `up_out` behind its head until it is
    /// complete or `grant` bytes are held, each wait for the client
    /// bounded by `wait` as when the body is streamed. A complete chunked
    /// body is then sent with a `Content-Length`.
    pub(super) async fn hold_request_body(
        &mut self,
        decoder: &mut BodyDecoder,
        grant: usize,
        wait: Duration,
        stats: &mut Stats,
    ) -> Held {
        let chunk = self.engine.config.read_chunk;
        let body_start = head_len(&self.up_out);
        while !decoder.is_done() && self.up_out.len() - body_start < grant {
            let Conn {
                client,
                inbuf,
                reads,
                ..
            } = self;
            match reads
                .run(Instant::now() + wait, inbuf.read_from(client, chunk))
                .await
            {
                Ok(Ok(n)) if n > 0 => {}
                _ => {
                    stats.client_abort = true;
                    return Held::ClientGone;
                }
            }
            match decoder.feed(self.inbuf.filled(), &mut self.up_out) {
                Ok(n) => {
                    stats.bytes_in += n as u64;
                    self.inbuf.consume(n);
                }
                Err(BodyError::TooLarge) => return Held::Refused(Refusal::BodyTooLarge),
                Err(BodyError::BadChunk(_)) => return Held::Refused(Refusal::BadChunkedBody),
            }
        }
        if decoder.is_done() {
            dechunk(&mut self.up_out);
        }
        Held::Ready
    }

    /// Writes `out` to the client (at `pacer`'s pace, the first `unpaced`
    /// bytes at once) while reading the backend's body ahead into it, as
    /// long as less than `grant` bytes wait for the client. Returns with
    /// `out` written and cleared, or `true` as soon as the backend's body
    /// is all read, `out` holding what the client has yet to take: the
    /// caller is done with the backend's connection before the client is
    /// (nginx's reason for `proxy-buffering`). A backend body found
    /// malformed or cut short stops the reading ahead; what was read is
    /// written, and the caller's next read or decode finds the failure
    /// again.
    pub(super) async fn flush_reading_ahead<U: AsyncRead + Unpin>(
        &mut self,
        up: &mut U,
        decoder: &mut BodyDecoder,
        grant: usize,
        pacer: &mut Option<Box<dyn Pacer>>,
        unpaced: &mut usize,
        stats: &mut Stats,
    ) -> io::Result<bool> {
        let to = self.engine.config.client_write_timeout;
        let chunk = self.engine.config.read_chunk;
        let mut at = 0;
        let mut sound = true;
        let mut up_open = true;
        enum Ev {
            Wrote(io::Result<usize>),
            Read(io::Result<usize>),
            Paced,
        }
        while at < self.out.len() {
            // What the client took leaves the buffer, so that it holds
            // the grant and no more however long the body.
            if at >= chunk {
                self.out.drain(..at);
                at = 0;
            }
            let ready = self.out.len() - at;
            let (n, wait) = if *unpaced > 0 {
                (ready.min(*unpaced), None)
            } else {
                match pacer.as_deref_mut() {
                    None => (ready, None),
                    Some(p) => match p.permit(ready, std::time::Instant::now()) {
                        Ok(n) => (n.clamp(1, ready), None),
                        Err(until) => (0, Some(Instant::from_std(until))),
                    },
                }
            };
            let read_ahead =
                sound && up_open && !decoder.is_done() && ready + self.upbuf.filled().len() < grant;
            let Conn {
                client,
                out,
                upbuf,
                client_writes,
                ..
            } = self;
            let piece = &out[at..at + n];
            let ev = client_writes
                .run(Instant::now() + to, async {
                    tokio::select! {
                        r = client.write(piece), if n > 0 => Ev::Wrote(r),
                        () = tokio::time::sleep_until(wait.unwrap_or_else(Instant::now)), if wait.is_some() => Ev::Paced,
                        r = read_into(upbuf, up, chunk), if read_ahead => Ev::Read(r),
                    }
                })
                .await;
            match ev {
                Err(_) | Ok(Ev::Wrote(Err(_))) | Ok(Ev::Wrote(Ok(0))) => {
                    self.out.clear();
                    stats.client_abort = true;
                    return Err(io::ErrorKind::TimedOut.into());
                }
                Ok(Ev::Wrote(Ok(w))) => {
                    *unpaced = unpaced.saturating_sub(w);
                    if pacer.is_some() && *unpaced == 0 && w < n {
                        // The pacer permitted `n`: the rest of it is
                        // owed, so it is not asked again for it.
                        *unpaced = n - w;
                    }
                    at += w;
                    stats.bytes_out += w as u64;
                }
                Ok(Ev::Paced) => {}
                Ok(Ev::Read(Ok(0))) => {
                    up_open = false;
                    sound = decoder.eof();
                }
                Ok(Ev::Read(Err(_))) => {
                    up_open = false;
                    sound = false;
                }
                Ok(Ev::Read(Ok(_))) => match decoder.feed(self.upbuf.filled(), &mut self.out) {
                    Ok(used) => self.upbuf.consume(used),
                    Err(_) => sound = false,
                },
            }
            if decoder.is_done() && at < self.out.len() {
                self.out.drain(..at);
                return Ok(true);
            }
        }
        self.out.clear();
        let flushed = self
            .client_writes
            .run(Instant::now() + to, self.client.flush())
            .await;
        if !matches!(flushed, Ok(Ok(()))) {
            stats.client_abort = true;
            return Err(io::ErrorKind::TimedOut.into());
        }
        Ok(false)
    }
}

/// One read from the backend into `upbuf` (split out so that the select
/// above borrows the two buffers apart).
async fn read_into<U: AsyncRead + Unpin>(
    upbuf: &mut Buf,
    up: &mut U,
    chunk: usize,
) -> io::Result<usize> {
    upbuf.read_from(up, chunk).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rechunked(head: &str, body: &[u8]) -> Vec<u8> {
        let mut out = head.as_bytes().to_vec();
        let mut d = BodyDecoder::new(BodyFraming::Chunked, Emit::Same, 0);
        d.feed(body, &mut out).unwrap();
        assert!(d.is_done());
        out
    }

    #[test]
    fn a_complete_chunked_body_goes_with_its_length() {
        let mut up = rechunked(
            "POST /u HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n",
            b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n",
        );
        assert!(dechunk(&mut up));
        assert_eq!(
            String::from_utf8(up).unwrap(),
            "POST /u HTTP/1.1\r\nhost: a\r\ncontent-length: 11\r\n\r\nhello world"
        );
    }

    #[test]
    fn an_empty_chunked_body_is_content_length_0() {
        let mut up = rechunked(
            "PUT / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
            b"0\r\n\r\n",
        );
        assert!(dechunk(&mut up));
        assert_eq!(
            String::from_utf8(up).unwrap(),
            "PUT / HTTP/1.1\r\ncontent-length: 0\r\n\r\n"
        );
    }

    /// An HTTP/1.0 backend's request goes only with a length: a chunked
    /// body held whole is rewritten, one not held whole cannot go, one
    /// with a length goes as it is.
    #[test]
    fn a_request_to_an_http10_backend_goes_only_with_a_length() {
        let head = "POST /u HTTP/1.0\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n";
        let mut up = rechunked(head, b"5\r\nhello\r\n0\r\n\r\n");
        assert!(with_length(&mut up, true));
        assert!(up.ends_with(b"content-length: 5\r\n\r\nhello"));
        // Asked again (the engine rewrites a body held whole at once).
        assert!(with_length(&mut up, true));
        let mut up = rechunked(head, b"5\r\nhello\r\n0\r\n\r\n");
        assert!(!with_length(&mut up, false));
        let mut up = b"POST / HTTP/1.0\r\ncontent-length: 3\r\n\r\nabc".to_vec();
        assert!(with_length(&mut up, true));
    }

    /// A body with a length keeps its head; a body cut short (the grant
    /// ran out) stays chunked, to be streamed on.
    #[test]
    fn other_bodies_are_left_as_they_are() {
        let mut up = b"POST / HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc".to_vec();
        let before = up.clone();
        assert!(!dechunk(&mut up));
        assert_eq!(up, before);
        let mut up = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel".to_vec();
        let before = up.clone();
        assert!(!dechunk(&mut up));
        assert_eq!(up, before);
    }
}
