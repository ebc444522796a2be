//! The listeners: one UDP socket and one TCP listener on the same address,
//! answering from whatever zone the handle holds at the time of each
//! query.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{Semaphore, watch};

use crate::Error;
use crate::answer::{self, MAX_QUERY, Transport};
use crate::metrics::Metrics;
use crate::rrl::{Limiter, RateLimit, Verdict};
use crate::zone::Zone;

/// What the listeners hold: the zone, swapped whole by its owner.
pub type ZoneHandle = Arc<ArcSwap<Zone>>;

/// How the listeners behave.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub rate_limit: RateLimit,
    /// A TCP connection with no complete query for this long is closed.
    pub tcp_idle: Duration,
    /// TCP connections served at once; more wait in the accept queue.
    pub max_tcp_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            rate_limit: RateLimit::default(),
            tcp_idle: Duration::from_secs(10),
            max_tcp_connections: 256,
        }
    }
}

/// A UDP socket and a TCP listener bound to one address.
#[derive(Debug)]
pub struct Sockets {
    pub udp: std::net::UdpSocket,
    pub tcp: std::net::TcpListener,
}

impl Sockets {
    /// Binds UDP, then TCP on the port UDP got (so port 0 gives one port
    /// for both); a TCP port taken by something else is tried again with a
    /// new pair a few times.
    pub fn bind(addr: SocketAddr) -> Result<Sockets, Error> {
        let err = |source| Error::Bind { addr, source };
        let mut last = None;
        for _ in 0..8 {
            let udp = std::net::UdpSocket::bind(addr).map_err(err)?;
            let bound = udp.local_addr().map_err(err)?;
            match std::net::TcpListener::bind(bound) {
                Ok(tcp) => return Ok(Sockets { udp, tcp }),
                Err(e) if addr.port() == 0 => last = Some(e),
                Err(e) => return Err(err(e)),
            }
        }
        Err(err(last.unwrap_or_else(|| {
            std::io::Error::other("no port for UDP and TCP")
        })))
    }

    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.udp.local_addr().map_err(Error::Io)
    }
}

/// Serves until `shutdown` resolves: UDP and TCP stop at once (a DNS
/// query is one round trip; a client whose answer is cut off asks another
/// server of the NS set).
pub async fn run(
    sockets: Sockets,
    zone: ZoneHandle,
    config: ServerConfig,
    metrics: Metrics,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let addr = sockets.local_addr()?;
    sockets.udp.set_nonblocking(true)?;
    sockets.tcp.set_nonblocking(true)?;
    let udp = UdpSocket::from_std(sockets.udp)?;
    let tcp = TcpListener::from_std(sockets.tcp)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tracing::info!(%addr, origin = %zone.load().origin(), "DNS listener (UDP and TCP)");
    let udp_task = tokio::spawn(serve_udp(
        udp,
        zone.clone(),
        Limiter::new(config.rate_limit),
        metrics.clone(),
        stop_rx.clone(),
    ));
    let tcp_task = tokio::spawn(serve_tcp(tcp, zone, config, metrics, stop_rx));
    shutdown.await;
    let _ = stop_tx.send(true);
    let _ = udp_task.await;
    let _ = tcp_task.await;
    tracing::info!(%addr, "DNS listener stopped");
    Ok(())
}

async fn serve_udp(
    socket: UdpSocket,
    zone: ZoneHandle,
    mut limiter: Limiter,
    metrics: Metrics,
    mut stop: watch::Receiver<bool>,
) {
    // One byte more than a query may have: a longer datagram is seen as
    // longer and dropped, not cut to a valid-looking prefix.
    let mut buf = vec![0u8; MAX_QUERY + 1];
    let started = Instant::now();
    // Looked up once: a label lookup per query costs a hash and a lock.
    let (bytes_in, bytes_out) = (
        metrics.bytes_in.with_label_values(&["udp"]),
        metrics.bytes_out.with_label_values(&["udp"]),
    );
    let (slipped, dropped) = (
        metrics.rate_limited.with_label_values(&["slip"]),
        metrics.rate_limited.with_label_values(&["drop"]),
    );
    let mut responses = std::collections::HashMap::new();
    loop {
        let (len, peer) = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    // ICMP errors of earlier sends show up here on Linux;
                    // the socket is fine.
                    tracing::debug!(error = %e, "DNS UDP receive");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let query = &buf[..len];
        bytes_in.inc_by(len as u64);
        let Some(response) = answer::respond(&zone.load(), query, Transport::Udp) else {
            metrics.dropped.with_label_values(&["not_a_query"]).inc();
            continue;
        };
        let now = started.elapsed().as_secs();
        let bytes = match limiter.check(peer.ip(), response.rate_key, now) {
            Verdict::Send => response.bytes,
            Verdict::Slip => {
                slipped.inc();
                match answer::slip(query) {
                    Some(b) => b,
                    None => continue,
                }
            }
            Verdict::Drop => {
                dropped.inc();
                continue;
            }
        };
        responses
            .entry((response.rcode, response.truncated))
            .or_insert_with(|| metrics.counter(response.rcode, Transport::Udp, response.truncated))
            .inc();
        bytes_out.inc_by(bytes.len() as u64);
        tracing::trace!(%peer, rcode = response.rcode, bytes = bytes.len(), "DNS UDP answer");
        if let Err(e) = socket.send_to(&bytes, peer).await {
            tracing::debug!(%peer, error = %e, "DNS UDP send");
        }
    }
}

async fn serve_tcp(
    listener: TcpListener,
    zone: ZoneHandle,
    config: ServerConfig,
    metrics: Metrics,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(config.max_tcp_connections.max(1)));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = stop.changed() => break,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "DNS TCP accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let (zone, metrics, idle) = (zone.clone(), metrics.clone(), config.tcp_idle);
        connections.spawn(async move {
            if let Err(e) = serve_connection(stream, &zone, &metrics, idle).await {
                tracing::debug!(%peer, error = %e, "DNS TCP connection");
            }
            drop(permit);
        });
        // Finished connections leave the set as others arrive.
        while connections.try_join_next().is_some() {}
    }
    connections.abort_all();
}

/// Queries one after another (RFC 7766 allows pipelining; answering in
/// order is allowed too), each a 2-byte length and the message.
async fn serve_connection(
    mut stream: TcpStream,
    zone: &ZoneHandle,
    metrics: &Metrics,
    idle: Duration,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; MAX_QUERY];
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(idle, stream.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Ok(()),
        }
        let len = usize::from(u16::from_be_bytes(len));
        if len > MAX_QUERY {
            metrics.dropped.with_label_values(&["too_long"]).inc();
            return Ok(());
        }
        let query = &mut buf[..len];
        match tokio::time::timeout(idle, stream.read_exact(query)).await {
            Ok(r) => r?,
            Err(_) => return Ok(()),
        };
        metrics
            .bytes_in
            .with_label_values(&["tcp"])
            .inc_by(len as u64 + 2);
        let Some(response) = answer::respond(&zone.load(), query, Transport::Tcp) else {
            metrics.dropped.with_label_values(&["not_a_query"]).inc();
            return Ok(());
        };
        metrics.count(response.rcode, Transport::Tcp, false);
        let mut out = Vec::with_capacity(response.bytes.len() + 2);
        out.extend_from_slice(&(response.bytes.len() as u16).to_be_bytes());
        out.extend_from_slice(&response.bytes);
        metrics
            .bytes_out
            .with_label_values(&["tcp"])
            .inc_by(out.len() as u64);
        stream.write_all(&out).await?;
    }
}
