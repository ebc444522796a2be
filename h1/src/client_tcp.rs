//! A client's TCP connection that joins the event loop only when it has to
//! wait.
//!
//! A socket wrapped in tokio's `TcpStream` is added to epoll when it is
//! wrapped and removed before it is closed: two system calls, the
//! reactor's bookkeeping, and a turn of the event loop before the first
//! read (a freshly registered socket is not known to be readable until
//! epoll says so, even when the request is already there). Most short
//! connections never need any of it: the request is in the socket when
//! the connection is accepted (clients send it right after the handshake)
//! and the answer fits the send buffer. [`ClientTcp`] reads and writes
//! the socket directly and registers it only when an operation would
//! block, so a `Connection: close` request, or any connection that ends
//! without waiting on its client, is served and closed without ever being
//! added to epoll. HAProxy does the same (it reads speculatively after
//! `accept`).

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::engine::ClientStream;

/// Operations done directly before the socket is registered anyway: a
/// direct operation never returns `Pending`, so it is outside tokio's
/// cooperative budget; a client that keeps the socket readable (a fast
/// upload) must not keep its thread's other connections waiting.
const DIRECT_OPS: u8 = 64;

/// The most bytes one direct read takes: a direct read fills memory it
/// must zero first (tokio reads into uninitialised memory; safe code
/// cannot), so it stays near the size of a request head. A larger head or
/// a body takes more reads, and past [`DIRECT_OPS`] goes through tokio.
const DIRECT_READ: usize = 4 * 1024;

/// A client TCP connection, direct until it must wait (module docs).
#[derive(Debug)]
pub struct ClientTcp {
    state: State,
}

#[derive(Debug)]
enum State {
    /// Not in epoll; `ops` direct operations done so far.
    Direct {
        socket: std::net::TcpStream,
        ops: u8,
    },
    Registered(TcpStream),
    /// Registering failed; the socket is closed.
    Gone,
}

impl ClientTcp {
    /// A connection from `accept`: `socket` must be non-blocking.
    pub fn new(socket: std::net::TcpStream) -> Self {
        ClientTcp {
            state: State::Direct { socket, ops: 0 },
        }
    }

    /// Whether the connection has been added to the event loop (it had to
    /// wait at least once).
    pub fn is_registered(&self) -> bool {
        matches!(self.state, State::Registered(_))
    }

    /// The socket for an operation done directly, or `None` once it is
    /// registered (then through tokio). Past [`DIRECT_OPS`] it registers.
    fn direct(&mut self) -> io::Result<Option<&mut std::net::TcpStream>> {
        if let State::Direct { ops, .. } = &mut self.state {
            if *ops >= DIRECT_OPS {
                self.register()?;
            } else {
                *ops += 1;
            }
        }
        match &mut self.state {
            State::Direct { socket, .. } => Ok(Some(socket)),
            State::Registered(_) => Ok(None),
            State::Gone => Err(gone()),
        }
    }

    /// Adds the socket to the event loop (the caller then waits through
    /// tokio). A socket that became ready between the direct attempt and
    /// here is reported by epoll at once: nothing is missed.
    fn register(&mut self) -> io::Result<&mut TcpStream> {
        if matches!(self.state, State::Direct { .. })
            && let State::Direct { socket, .. } = std::mem::replace(&mut self.state, State::Gone)
        {
            self.state = State::Registered(TcpStream::from_std(socket)?);
        }
        match &mut self.state {
            State::Registered(tcp) => Ok(tcp),
            _ => Err(gone()),
        }
    }

    /// A write done on the socket directly while it takes it, else
    /// through tokio, registered.
    fn poll_write_with(
        &mut self,
        cx: &mut Context<'_>,
        mut direct: impl FnMut(&mut std::net::TcpStream) -> io::Result<usize>,
        registered: impl FnOnce(Pin<&mut TcpStream>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if let Some(socket) = self.direct()?
            && let Some(done) = attempt(|| direct(socket))
        {
            return Poll::Ready(done);
        }
        registered(Pin::new(self.register()?), cx)
    }
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the connection could not be registered",
    )
}

/// Runs `op` directly on the socket, retrying an interrupted call; `None`
/// when it would block (the caller registers and waits).
fn attempt<T>(mut op: impl FnMut() -> io::Result<T>) -> Option<io::Result<T>> {
    loop {
        match op() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
            other => return Some(other),
        }
    }
}

impl AsyncRead for ClientTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(socket) = this.direct()? {
            let dst = buf.initialize_unfilled_to(buf.remaining().min(DIRECT_READ));
            match attempt(|| socket.read(dst)) {
                Some(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Some(Err(e)) => return Poll::Ready(Err(e)),
                None => {}
            }
        }
        Pin::new(this.register()?).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll_write_with(cx, |s| s.write(data), |t, cx| t.poll_write(cx, data))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_with(
            cx,
            |s| s.write_vectored(bufs),
            |t, cx| t.poll_write_vectored(cx, bufs),
        )
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Nothing is buffered above the socket.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().state {
            State::Direct { socket, .. } => Poll::Ready(socket.shutdown(std::net::Shutdown::Write)),
            State::Registered(tcp) => Pin::new(tcp).poll_shutdown(cx),
            State::Gone => Poll::Ready(Err(gone())),
        }
    }
}

impl ClientStream for ClientTcp {
    fn tells_readable(&self) -> bool {
        true
    }

    /// As for tokio's stream: closing sends the FIN.
    fn ends_with_shutdown(&self) -> bool {
        false
    }

    fn in_event_loop(&self) -> bool {
        self.is_registered()
    }

    /// Unregistered, readiness is unknown: "ready" sends the engine to a
    /// read attempt, which registers the socket if nothing is there.
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.state {
            State::Direct { .. } => Poll::Ready(Ok(())),
            State::Registered(tcp) => tcp.poll_read_ready(cx),
            State::Gone => Poll::Ready(Err(gone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn pair() -> (ClientTcp, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (socket, _) = l.accept().unwrap();
        socket.set_nonblocking(true).unwrap();
        (ClientTcp::new(socket), peer)
    }

    #[tokio::test]
    async fn bytes_already_there_are_read_and_answered_without_registering() {
        let (mut client, mut peer) = pair().await;
        peer.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        // Loopback delivers at once, but give the bytes a moment anyway.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let mut buf = Vec::with_capacity(64);
        let n = client.read_buf(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\n\r\n");
        client.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        client.shutdown().await.unwrap();
        assert!(!client.is_registered());
        let mut answer = Vec::new();
        peer.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"HTTP/1.1 200 OK\r\n\r\n");
    }

    #[tokio::test]
    async fn a_read_that_would_block_registers_and_wakes_on_data() {
        let (mut client, mut peer) = pair().await;
        let read = tokio::spawn(async move {
            let mut buf = Vec::with_capacity(64);
            let n = client.read_buf(&mut buf).await.unwrap();
            (client, buf[..n].to_vec())
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        peer.write_all(b"late").await.unwrap();
        let (client, got) = read.await.unwrap();
        assert_eq!(got, b"late");
        assert!(client.is_registered());
    }

    #[tokio::test]
    async fn readiness_is_assumed_until_registered_then_real() {
        let (mut client, mut peer) = pair().await;
        let ready = std::future::poll_fn(|cx| client.poll_readable(cx)).await;
        assert!(ready.is_ok(), "unregistered: a read is worth trying");
        let mut buf = Vec::with_capacity(8);
        let pending = tokio::time::timeout(
            std::time::Duration::from_millis(30),
            client.read_buf(&mut buf),
        )
        .await;
        assert!(pending.is_err(), "nothing was sent");
        assert!(client.is_registered());
        peer.write_all(b"x").await.unwrap();
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            std::future::poll_fn(|cx| client.poll_readable(cx)),
        )
        .await
        .expect("registered: readable once the byte is there")
        .unwrap();
    }

    #[tokio::test]
    async fn a_write_the_socket_cannot_take_waits_registered_until_it_can() {
        let (mut client, mut peer) = pair().await;
        // Far more than the socket buffers hold: the writer must wait for
        // the reader.
        let body = vec![7u8; 16 * 1024 * 1024];
        let expected = body.len();
        let write = tokio::spawn(async move {
            client.write_all(&body).await.unwrap();
            client.shutdown().await.unwrap();
            client
        });
        let mut got = 0;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = peer.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got += n;
        }
        assert_eq!(got, expected);
        assert!(write.await.unwrap().is_registered());
    }

    #[tokio::test]
    async fn a_socket_that_stays_ready_is_registered_after_a_bounded_run() {
        let (mut client, _peer) = pair().await;
        for _ in 0..DIRECT_OPS {
            client.write_all(b"x").await.unwrap();
        }
        assert!(!client.is_registered());
        client.write_all(b"x").await.unwrap();
        assert!(client.is_registered());
    }
}
