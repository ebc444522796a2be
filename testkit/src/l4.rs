//! L4 test backends: a TCP echo (optionally reading a PROXY v2 header
//! first, or answering only after the client's half-close) and a UDP echo,
//! each counting what it served so tests can tell which endpoint carried
//! which traffic. Plus a free-port finder for listeners whose port is the
//! Service's own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;

/// What a [`TcpEcho`] does with a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpMode {
    /// Echo bytes as they arrive; close after the client's EOF.
    Echo,
    /// Read until the client's EOF, then send everything back and close:
    /// an answer arrives only if the half-close went through.
    AfterEof,
    /// Expect a PROXY v2 header, answer `PROXY <source> <destination>\n`,
    /// then echo.
    ProxyV2,
}

/// A TCP echo backend on 127.0.0.1, port 0.
#[derive(Debug)]
pub struct TcpEcho {
    addr: SocketAddr,
    /// Connections that carried at least one byte (health probes do not).
    served: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for TcpEcho {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TcpEcho {
    pub async fn start(mode: TcpMode) -> std::io::Result<TcpEcho> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let served = Arc::new(AtomicUsize::new(0));
        let counter = served.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let _ = serve_tcp(stream, mode, &counter).await;
                });
            }
        });
        Ok(TcpEcho { addr, served, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Connections that carried data so far.
    pub fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

async fn serve_tcp(
    mut stream: TcpStream,
    mode: TcpMode,
    served: &AtomicUsize,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut counted = false;
    let mut count = |n: usize| {
        if n > 0 && !counted {
            counted = true;
            served.fetch_add(1, Ordering::SeqCst);
        }
    };
    match mode {
        TcpMode::Echo => {}
        TcpMode::AfterEof => {
            let mut all = Vec::new();
            stream.read_to_end(&mut all).await?;
            count(all.len());
            stream.write_all(&all).await?;
            return stream.shutdown().await;
        }
        TcpMode::ProxyV2 => {
            let mut head = [0u8; 16];
            stream.read_exact(&mut head).await?;
            count(16);
            let len = u16::from_be_bytes([head[14], head[15]]) as usize;
            let mut rest = vec![0u8; len];
            stream.read_exact(&mut rest).await?;
            let mut whole = head.to_vec();
            whole.extend_from_slice(&rest);
            let line = match parse_proxy_v2(&whole) {
                Some((src, dst, _)) => format!("PROXY {src} {dst}\n"),
                None => "PROXY invalid\n".to_string(),
            };
            stream.write_all(line.as_bytes()).await?;
        }
    }
    loop {
        let n = stream.read(&mut buf).await?;
        count(n);
        if n == 0 {
            return stream.shutdown().await;
        }
        stream.write_all(&buf[..n]).await?;
    }
}

/// Parses a PROXY v2 header (command PROXY, TCP or UDP over IPv4 or IPv6):
/// `(source, destination, header length)`.
pub fn parse_proxy_v2(bytes: &[u8]) -> Option<(SocketAddr, SocketAddr, usize)> {
    const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
    if bytes.len() < 16 || bytes[..12] != SIGNATURE || bytes[12] != 0x21 {
        return None;
    }
    let len = u16::from_be_bytes([bytes[14], bytes[15]]) as usize;
    let body = bytes.get(16..16 + len)?;
    let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    match bytes[13] >> 4 {
        1 if len >= 12 => {
            let ip = |b: &[u8]| std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]);
            Some((
                SocketAddr::new(ip(&body[0..4]).into(), port(&body[8..10])),
                SocketAddr::new(ip(&body[4..8]).into(), port(&body[10..12])),
                16 + len,
            ))
        }
        2 if len >= 36 => {
            let ip = |b: &[u8]| {
                let mut o = [0u8; 16];
                o.copy_from_slice(b);
                std::net::Ipv6Addr::from(o)
            };
            Some((
                SocketAddr::new(ip(&body[0..16]).into(), port(&body[32..34])),
                SocketAddr::new(ip(&body[16..32]).into(), port(&body[34..36])),
                16 + len,
            ))
        }
        _ => None,
    }
}

/// A UDP echo backend on 127.0.0.1, port 0: every datagram goes back to
/// its sender unchanged.
#[derive(Debug)]
pub struct UdpEcho {
    addr: SocketAddr,
    datagrams: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for UdpEcho {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl UdpEcho {
    pub async fn start() -> std::io::Result<UdpEcho> {
        let socket = UdpSocket::bind("127.0.0.1:0").await?;
        let addr = socket.local_addr()?;
        let datagrams = Arc::new(AtomicUsize::new(0));
        let counter = datagrams.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            loop {
                let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                    continue;
                };
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = socket.send_to(&buf[..n], from).await;
            }
        });
        Ok(UdpEcho {
            addr,
            datagrams,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Datagrams received so far.
    pub fn datagrams(&self) -> usize {
        self.datagrams.load(Ordering::SeqCst)
    }
}

/// A loopback TCP port that refuses every connect for as long as this
/// lives: bound, never listening, without `SO_REUSEADDR`, so no other
/// socket of the test run can take it (a port bound and let go can be
/// handed to the next test's listener, which then answers for it).
pub struct ClosedPort {
    socket: tokio::net::TcpSocket,
}

impl ClosedPort {
    pub fn new() -> ClosedPort {
        let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        socket
            .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
            .expect("bind a loopback port");
        ClosedPort { socket }
    }

    pub fn port(&self) -> u16 {
        self.socket.local_addr().expect("a bound socket").port()
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        ClosedPort::new()
    }
}

/// A port on `ip` that is free for both TCP and UDP right now.
///
/// It is taken below the kernel's ephemeral range, so the port-0 sockets
/// of concurrently running tests (backends, clients) never land on it, and
/// from a per-process random start, so two tests rarely try the same one.
/// Another process may still bind it before the proxy does; on loopback in
/// a test run that is rare.
pub fn free_port(ip: std::net::IpAddr) -> std::io::Result<u16> {
    use std::sync::atomic::AtomicU16;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let low = 10_000u16;
    let span = ephemeral_start.saturating_sub(low).max(1);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default()
        ^ std::process::id().wrapping_mul(2_654_435_761);
    for _ in 0..1000 {
        let step = NEXT.fetch_add(1, Ordering::Relaxed) as u32;
        let port = low + ((seed.wrapping_add(step.wrapping_mul(7919))) % span as u32) as u16;
        let Ok(tcp) = std::net::TcpListener::bind((ip, port)) else {
            continue;
        };
        if std::net::UdpSocket::bind((ip, port)).is_ok() {
            drop(tcp);
            return Ok(port);
        }
    }
    Err(std::io::Error::other("no port free for both TCP and UDP"))
}

/// A deterministic payload of `len` bytes, different per `seed`.
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_spec_shows() {
        let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        h.extend_from_slice(&[
            0x21, 0x11, 0, 12, 192, 0, 2, 10, 198, 51, 100, 1, 0xC7, 0x38, 1, 0xBB,
        ]);
        let (src, dst, len) = parse_proxy_v2(&h).unwrap();
        assert_eq!(src, "192.0.2.10:51000".parse().unwrap());
        assert_eq!(dst, "198.51.100.1:443".parse().unwrap());
        assert_eq!(len, 28);
        h[12] = 0x20;
        assert!(parse_proxy_v2(&h).is_none(), "LOCAL command");
    }

    #[tokio::test]
    async fn half_close_echo_answers_after_eof() {
        let echo = TcpEcho::start(TcpMode::AfterEof).await.unwrap();
        let mut s = TcpStream::connect(echo.addr()).await.unwrap();
        s.write_all(b"abc").await.unwrap();
        s.shutdown().await.unwrap();
        let mut back = Vec::new();
        s.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"abc");
        assert_eq!(echo.served(), 1);
    }
}
