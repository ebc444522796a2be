//! The connection to an upstream: plain TCP, or what a [`Transport`] made
//! of a TCP connection (TLS to the backend, with the product's own
//! certificates and verification). The plain case stays a `TcpStream`
//! with its own borrowed split: a secured stream costs the plain path one
//! enum test per read or write, nothing more.

use std::fmt::Debug;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A stream a [`Transport`] made of an upstream TCP connection.
pub trait SecuredStream: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static {
    /// The TCP connection under it: the pool's liveness probe peeks it.
    fn tcp(&self) -> &TcpStream;
}

/// A fresh TCP connection being secured.
pub type Securing = Pin<Box<dyn Future<Output = io::Result<Box<dyn SecuredStream>>> + Send>>;

/// How a route's upstream connections are secured after TCP connects
/// (TLS to the backend). Connections are pooled per [`Transport::class`]:
/// one made for a class is never reused for another (another CA, name or
/// client certificate).
pub trait Transport: Send + Sync + Debug {
    /// The pool class of this transport's connections; never 0 (plain
    /// TCP's).
    fn class(&self) -> u64;

    /// Secures a fresh connection; an `Err` (a failed handshake, a
    /// certificate refused) ends the attempt on that address.
    fn secure(&self, tcp: TcpStream) -> Securing;
}

/// An upstream connection.
pub enum UpstreamConn {
    Tcp(TcpStream),
    Secured(Box<dyn SecuredStream>),
}

impl Debug for UpstreamConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamConn::Tcp(s) => f.debug_tuple("Tcp").field(s).finish(),
            UpstreamConn::Secured(s) => f.debug_tuple("Secured").field(s.tcp()).finish(),
        }
    }
}

impl From<TcpStream> for UpstreamConn {
    fn from(tcp: TcpStream) -> Self {
        UpstreamConn::Tcp(tcp)
    }
}

impl UpstreamConn {
    /// The TCP connection under it.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            UpstreamConn::Tcp(s) => s,
            UpstreamConn::Secured(s) => s.tcp(),
        }
    }

    /// Its read and write halves, borrowed, to wait on both at once.
    pub fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        match self {
            UpstreamConn::Tcp(s) => {
                let (r, w) = s.split();
                (ReadHalf::Tcp(r), WriteHalf::Tcp(w))
            }
            UpstreamConn::Secured(s) => {
                let (r, w) = tokio::io::split(s);
                (ReadHalf::Secured(r), WriteHalf::Secured(w))
            }
        }
    }

    /// An idle connection must have nothing to read: end of stream means
    /// the peer closed it, and bytes mean it sent something unsolicited
    /// (then it is no longer in a known state). A plain socket is read
    /// (`WouldBlock` is the only healthy answer); a secured one is peeked,
    /// as its bytes belong to the secured stream, and any byte (a TLS
    /// alert, a late ticket) retires it.
    pub fn is_open(&self) -> bool {
        match self {
            UpstreamConn::Tcp(s) => {
                let mut probe = [0u8; 1];
                matches!(s.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
            UpstreamConn::Secured(s) => {
                let mut probe = [0u8; 1];
                let mut buf = ReadBuf::new(&mut probe);
                let mut cx = Context::from_waker(Waker::noop());
                s.tcp().poll_peek(&mut cx, &mut buf).is_pending()
            }
        }
    }
}

impl AsyncRead for UpstreamConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamConn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            UpstreamConn::Secured(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamConn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            UpstreamConn::Secured(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamConn::Tcp(s) => Pin::new(s).poll_flush(cx),
            UpstreamConn::Secured(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamConn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            UpstreamConn::Secured(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The read half of a split [`UpstreamConn`].
pub enum ReadHalf<'a> {
    Tcp(tokio::net::tcp::ReadHalf<'a>),
    Secured(tokio::io::ReadHalf<&'a mut Box<dyn SecuredStream>>),
}

/// The write half of a split [`UpstreamConn`].
pub enum WriteHalf<'a> {
    Tcp(tokio::net::tcp::WriteHalf<'a>),
    Secured(tokio::io::WriteHalf<&'a mut Box<dyn SecuredStream>>),
}

impl AsyncRead for ReadHalf<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            ReadHalf::Secured(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            WriteHalf::Secured(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(s) => Pin::new(s).poll_flush(cx),
            WriteHalf::Secured(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            WriteHalf::Secured(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
