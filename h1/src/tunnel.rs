//! The relay after a 101 (WebSocket and other upgrades): bytes copied both
//! ways until either side closes or nothing moved for the idle timeout.
//!
//! Why an idle timeout: a tunnel holds its client connection, an upstream
//! connection and the request's in-flight and tenant slots; one a client
//! abandoned without closing (a laptop put to sleep) would hold them
//! forever. Activity is counted, not timed: the watchdog wakes once per
//! timeout and closes the tunnel if no byte moved since its last look, so
//! a busy tunnel costs no clock read per read.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a finished tunnel moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Relayed {
    /// Bytes read from the client (sent upstream).
    pub from_client: u64,
    /// Bytes read from the upstream (sent to the client).
    pub from_upstream: u64,
    /// Ended because nothing moved for the idle timeout.
    pub idle: bool,
}

/// Copies between `client` and `upstream` until one side closes (or
/// fails) or both are silent for `idle`.
pub(crate) async fn relay<C, U>(client: &mut C, upstream: &mut U, idle: Duration) -> Relayed
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let from_client = AtomicU64::new(0);
    let from_upstream = AtomicU64::new(0);
    let moved = || from_client.load(Ordering::Relaxed) + from_upstream.load(Ordering::Relaxed);
    let mut c = Counted {
        inner: client,
        read: &from_client,
    };
    let mut u = Counted {
        inner: upstream,
        read: &from_upstream,
    };
    let watchdog = async {
        let mut last = moved();
        loop {
            tokio::time::sleep(idle).await;
            let now = moved();
            if now == last {
                return;
            }
            last = now;
        }
    };
    let idle = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut c, &mut u) => false,
        () = watchdog => true,
    };
    Relayed {
        from_client: from_client.load(Ordering::Relaxed),
        from_upstream: from_upstream.load(Ordering::Relaxed),
        idle,
    }
}

/// A stream that counts the bytes read from it.
struct Counted<'a, T> {
    inner: &'a mut T,
    read: &'a AtomicU64,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<'_, T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut *self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            let n = (buf.filled().len() - before) as u64;
            self.read.fetch_add(n, Ordering::Relaxed);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<'_, T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    #[tokio::test(start_paused = true)]
    async fn a_silent_tunnel_ends_after_the_idle_timeout() {
        let (mut client, mut client_far) = duplex(64);
        let (mut upstream, mut upstream_far) = duplex(64);
        let relay = tokio::spawn(async move {
            relay(&mut client, &mut upstream, Duration::from_secs(10)).await
        });
        // Traffic inside the timeout keeps it open.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            client_far.write_all(b"ping").await.unwrap();
            let mut got = [0u8; 4];
            upstream_far.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"ping");
        }
        assert!(!relay.is_finished());
        tokio::time::sleep(Duration::from_secs(25)).await;
        let r = relay.await.unwrap();
        assert!(r.idle);
        assert_eq!((r.from_client, r.from_upstream), (12, 0));
    }

    #[tokio::test]
    async fn a_side_closing_ends_the_tunnel_with_its_counts() {
        let (mut client, mut client_far) = duplex(64);
        let (mut upstream, mut upstream_far) = duplex(64);
        let relay = tokio::spawn(async move {
            relay(&mut client, &mut upstream, Duration::from_secs(3600)).await
        });
        upstream_far.write_all(b"hello").await.unwrap();
        let mut got = [0u8; 5];
        client_far.read_exact(&mut got).await.unwrap();
        drop(upstream_far);
        drop(client_far);
        let r = relay.await.unwrap();
        assert_eq!((r.from_client, r.from_upstream, r.idle), (0, 5, false));
    }
}
