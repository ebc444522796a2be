//! The one way teapot opens a connection to a backend: forwarded requests
//! (this crate's engine, HTTP/2 and h2c upstreams) and the requests teapot
//! makes of its own (authentication and error-page sub-requests, mirrors)
//! all connect here, so every backend connection gets the same timeout
//! rule, `TCP_NODELAY` (a request head is written whole and waits for its
//! answer: Nagle's delay would only hold it back), and the same account
//! of why a connect failed.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::upstream::{Transport, UpstreamConn};

/// Why a connection to a backend could not be had. The TCP step's
/// failures mean nobody answered at the address (a caller ejects the
/// endpoint); the handshake's mean the backend answered and the
/// [`Transport`] refused or stalled (the endpoint itself is healthy).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Nothing listens at the address.
    #[error("connection refused")]
    Refused,
    /// No answer to the connect within the timeout.
    #[error("connect timed out")]
    TimedOut,
    /// Any other connect failure (unreachable, out of ports, ...).
    #[error("connect failed: {0}")]
    Failed(io::Error),
    /// TCP connected, then the transport's handshake failed.
    #[error("securing the connection failed: {0}")]
    Handshake(io::Error),
    /// TCP connected, then the transport's handshake did not finish
    /// within the timeout.
    #[error("securing the connection timed out")]
    HandshakeTimedOut,
}

impl ConnectError {
    /// Whether a timeout, of either step, ended the attempt (a 504 rather
    /// than a 502).
    pub fn timed_out(&self) -> bool {
        matches!(
            self,
            ConnectError::TimedOut | ConnectError::HandshakeTimedOut
        )
    }

    /// Whether TCP connected and only securing it failed.
    pub fn handshake(&self) -> bool {
        matches!(
            self,
            ConnectError::Handshake(_) | ConnectError::HandshakeTimedOut
        )
    }
}

impl From<ConnectError> for io::Error {
    fn from(e: ConnectError) -> io::Error {
        match e {
            ConnectError::Failed(e) | ConnectError::Handshake(e) => e,
            ConnectError::Refused => io::ErrorKind::ConnectionRefused.into(),
            ConnectError::TimedOut | ConnectError::HandshakeTimedOut => {
                io::ErrorKind::TimedOut.into()
            }
        }
    }
}

/// A TCP connection to `addr` within `limit`, `TCP_NODELAY` set.
pub async fn connect(addr: SocketAddr, limit: Duration) -> Result<TcpStream, ConnectError> {
    match timeout(limit, TcpStream::connect(addr)).await {
        Ok(Ok(tcp)) => {
            let _ = tcp.set_nodelay(true);
            Ok(tcp)
        }
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => Err(ConnectError::Refused),
        Ok(Err(e)) => Err(ConnectError::Failed(e)),
        Err(_) => Err(ConnectError::TimedOut),
    }
}

/// A connection to `addr` as a route's upstream speaks: [`connect`], then
/// secured by `transport` when there is one (TLS to the backend), each
/// step within `limit`. `connected` runs once TCP is up, before the
/// handshake: the address answered, whatever the handshake then does.
pub async fn connect_upstream(
    addr: SocketAddr,
    transport: Option<&dyn Transport>,
    limit: Duration,
    connected: impl FnOnce(),
) -> Result<UpstreamConn, ConnectError> {
    let tcp = connect(addr, limit).await?;
    connected();
    let Some(transport) = transport else {
        return Ok(UpstreamConn::Tcp(tcp));
    };
    match timeout(limit, transport.secure(tcp)).await {
        Ok(Ok(secured)) => Ok(UpstreamConn::Secured(secured)),
        Ok(Err(e)) => Err(ConnectError::Handshake(e)),
        Err(_) => Err(ConnectError::HandshakeTimedOut),
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
    use tokio::net::{TcpListener, TcpSocket};

    use super::*;
    use crate::upstream::{SecuredStream, Securing};

    const LIMIT: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn a_connection_has_nodelay_set() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = connect(listener.local_addr().unwrap(), LIMIT)
            .await
            .unwrap();
        assert!(tcp.nodelay().unwrap());
    }

    #[tokio::test]
    async fn a_closed_port_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let e = connect(addr, LIMIT).await.unwrap_err();
        assert!(matches!(e, ConnectError::Refused), "{e:?}");
        assert!(!e.timed_out() && !e.handshake());
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::ConnectionRefused);
    }

    /// A listener that never accepts, its accept queue full: Linux drops
    /// further SYNs, so a connect waits for an answer that never comes.
    #[tokio::test]
    async fn a_silent_address_times_out() {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut queued = Vec::new();
        let e = loop {
            match connect(addr, LIMIT).await {
                Ok(tcp) if queued.len() < 8 => queued.push(tcp),
                Ok(_) => panic!("the accept queue never filled"),
                Err(e) => break e,
            }
        };
        assert!(matches!(e, ConnectError::TimedOut), "{e:?}");
        assert!(e.timed_out() && !e.handshake());
    }

    #[derive(Debug)]
    enum Handshake {
        Succeeds,
        Fails,
        Stalls,
    }

    struct Secured(TcpStream);

    impl SecuredStream for Secured {
        fn tcp(&self) -> &TcpStream {
            &self.0
        }
    }

    impl AsyncRead for Secured {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Secured {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.0).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }

    impl Transport for Handshake {
        fn class(&self) -> u64 {
            1
        }

        fn secure(&self, tcp: TcpStream) -> Securing {
            match self {
                Handshake::Succeeds => {
                    Box::pin(async move { Ok(Box::new(Secured(tcp)) as Box<dyn SecuredStream>) })
                }
                Handshake::Fails => {
                    Box::pin(async { Err(io::Error::other("certificate refused")) })
                }
                Handshake::Stalls => Box::pin(async move {
                    let _held = tcp;
                    std::future::pending().await
                }),
            }
        }
    }

    #[tokio::test]
    async fn a_transport_secures_the_connection_after_tcp_is_up() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut up = 0;
        let plain = connect_upstream(addr, None, LIMIT, || up += 1)
            .await
            .unwrap();
        assert!(matches!(plain, UpstreamConn::Tcp(_)));
        let secured = connect_upstream(addr, Some(&Handshake::Succeeds), LIMIT, || up += 1)
            .await
            .unwrap();
        assert!(matches!(secured, UpstreamConn::Secured(_)));
        assert!(secured.tcp().nodelay().unwrap());
        let e = connect_upstream(addr, Some(&Handshake::Fails), LIMIT, || up += 1)
            .await
            .unwrap_err();
        assert!(matches!(e, ConnectError::Handshake(_)), "{e:?}");
        assert!(e.handshake() && !e.timed_out());
        let e = connect_upstream(addr, Some(&Handshake::Stalls), LIMIT, || up += 1)
            .await
            .unwrap_err();
        assert!(matches!(e, ConnectError::HandshakeTimedOut), "{e:?}");
        assert!(e.handshake() && e.timed_out());
        assert_eq!(up, 4, "each attempt connected before its handshake");
    }

    #[tokio::test]
    async fn a_refused_connect_never_reaches_the_handshake() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let mut up = false;
        let e = connect_upstream(addr, Some(&Handshake::Succeeds), LIMIT, || up = true)
            .await
            .unwrap_err();
        assert!(matches!(e, ConnectError::Refused), "{e:?}");
        assert!(!up);
    }
}
