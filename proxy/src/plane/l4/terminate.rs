//! Sockets with a Terminate TLS listener of a Gateway (and any passthrough
//! listeners beside it on the same port: the specification's
//! TLSRouteModeMixed), served on the runtime's tasks rather than the TCP
//! event loops, since the proxy runs a TLS handshake here.
//!
//! Per connection, under the bounds of the passthrough path: the
//! ClientHello is read as [`super::sni`] reads it (16 KiB at most, within
//! `--l4-connect-timeout-ms`), its server name chooses the entry. A
//! passthrough entry gets the bytes read and then a plain relay, as on the
//! event loops. A Terminate entry gets a TLS handshake with the listener's
//! certificate over those same bytes (within the same timeout; a failure
//! closes the connection and counts in `l4_tls_handshake_failures_total`),
//! then the cleartext is relayed to the route's backends, over TLS when a
//! BackendTLSPolicy names the backend's port (`crate::live::upstream_tls`).
//! Connections per socket are capped at `--l4-max-connections` (more wait
//! in the backlog); connects retry other endpoints and eject the failing
//! one; a relay ends at the idle timeout or the shutdown's kill.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use prometheus::IntGauge;
use teapot_h1::Transport as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use super::context::{ActiveGuard, Context};
use super::sni::{Hello, MAX_READ, server_name};
use crate::compile::l4::table::Route;
use crate::compile::upstream::{Tried, Upstream};

/// Binds a Terminate socket (non-blocking, address reuse as the event
/// loops' sockets).
pub(super) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let mut sockets = super::tcp::bind(addr, 1)?;
    let socket = sockets
        .pop()
        .ok_or_else(|| std::io::Error::other("no socket bound"))?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket)
}

/// Accepts until the listener's route sender is dropped (the listener is
/// gone); each connection runs with the route current at its accept.
pub(super) async fn serve(
    listener: TcpListener,
    mut route: watch::Receiver<Arc<Route>>,
    ctx: Arc<Context>,
) {
    let permits = Arc::new(Semaphore::new(ctx.config.max_connections.max(1)));
    loop {
        // At the cap, clients wait in the backlog rather than being
        // accepted and closed.
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            changed = route.changed() => {
                if changed.is_err() { return }
                continue;
            }
        };
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, say: back off instead of spinning.
                    tracing::debug!(error = %e, "L4 accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            changed = route.changed() => {
                if changed.is_err() { return }
                continue;
            }
        };
        let current = route.borrow().clone();
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            connection(socket, peer, current, ctx).await;
        });
    }
}

/// Decrements a gauge when dropped.
struct Live(IntGauge);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.dec();
    }
}

async fn connection(mut client: TcpStream, peer: SocketAddr, route: Arc<Route>, ctx: Arc<Context>) {
    let _active = ActiveGuard::new(&ctx);
    let metrics = &ctx.metrics;
    metrics.tcp_connections_total.inc();
    metrics.tcp_connections_active.inc();
    let _live = Live(metrics.tcp_connections_active.clone());
    let label = route.service.to_string();
    metrics
        .service_connections
        .with_label_values(&[&label])
        .inc();
    let _ = client.set_nodelay(true);
    let timeout = ctx.config.connect_timeout;
    let (hello, name) = match tokio::time::timeout(timeout, read_hello(&mut client)).await {
        Ok(Ok(read)) => read,
        Ok(Err(why)) => {
            tracing::debug!(service = %label, client = %peer, %why, "no ClientHello read; connection closed");
            return;
        }
        Err(_) => {
            tracing::debug!(service = %label, client = %peer, "no ClientHello in time; connection closed");
            return;
        }
    };
    let Some(sni) = route.sni.as_ref() else {
        return;
    };
    let Some(((upstream, refusals), terminate)) = sni.choose_entry(name.as_deref()) else {
        tracing::debug!(service = %label, client = %peer, server_name = ?name,
            "no TLSRoute for the server name; connection closed");
        return;
    };
    // A route's share for invalid backendRefs is refused, by weight.
    if refusals.as_ref().is_some_and(|r| r.refuse_next()) {
        return;
    }
    let idle = route.options.tcp_idle_timeout;
    let Some(terminate) = terminate else {
        // Passthrough beside a Terminate listener: the client's TLS is
        // the backend's, the ClientHello goes first.
        let Some(mut backend) = connect(&ctx, upstream, &label).await else {
            return;
        };
        if backend.write_all(&hello).await.is_err() {
            return;
        }
        count_in(&ctx, &label, hello.len());
        relay(client, backend, idle, &ctx, &label).await;
        return;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(terminate.config.clone());
    let handshake = acceptor.accept(Replay {
        read: hello,
        at: 0,
        inner: client,
    });
    let tls = match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(tls)) => tls,
        failed => {
            metrics.tls_handshake_failures_total.inc();
            let why = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => "timed out".to_string(),
            };
            tracing::debug!(listener = %terminate.listener, client = %peer, %why,
                "TLS handshake failed; connection closed");
            return;
        }
    };
    let Some(backend) = connect(&ctx, upstream, &label).await else {
        return;
    };
    match upstream.protocol.tls() {
        None => relay(tls, backend, idle, &ctx, &label).await,
        Some(origin) => match tokio::time::timeout(timeout, origin.secure(backend)).await {
            Ok(Ok(secured)) => relay(tls, secured, idle, &ctx, &label).await,
            failed => {
                metrics.tcp_connect_failures_total.inc();
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "timed out".to_string(),
                };
                tracing::debug!(service = %label, %why,
                    "TLS to the backend (BackendTLSPolicy) failed; connection closed");
            }
        },
    }
}

/// The ClientHello's bytes and its server name, or why there is none.
async fn read_hello(client: &mut TcpStream) -> Result<(Vec<u8>, Option<String>), String> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match server_name(&bytes) {
            Hello::Complete(name) => return Ok((bytes, name)),
            Hello::Invalid(why) => return Err(why.to_string()),
            Hello::Incomplete => {}
        }
        if bytes.len() >= MAX_READ {
            return Err("the ClientHello did not end within the read bound".into());
        }
        let room = (MAX_READ - bytes.len()).min(buf.len());
        match client.read(&mut buf[..room]).await {
            Ok(0) => return Err("the client closed before its ClientHello ended".into()),
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// A connected endpoint of `upstream`: up to `--l4-connect-attempts`
/// endpoints tried, each within the connect timeout, a failing one
/// ejected.
async fn connect(ctx: &Context, upstream: &Arc<Upstream>, label: &str) -> Option<TcpStream> {
    let mut tried = Tried::default();
    for _ in 0..ctx.config.connect_attempts.max(1) {
        let Some(endpoint) = upstream.pick(&mut tried).map(|e| Arc::clone(&e)) else {
            break;
        };
        match tokio::time::timeout(
            ctx.config.connect_timeout,
            TcpStream::connect(endpoint.addr),
        )
        .await
        {
            Ok(Ok(socket)) => {
                endpoint.mark_healthy();
                let _ = socket.set_nodelay(true);
                return Some(socket);
            }
            _ => {
                tracing::debug!(endpoint = %endpoint.addr, "L4 connect failed; endpoint ejected");
                endpoint.eject();
                ctx.metrics.tcp_connect_failures_total.inc();
            }
        }
    }
    ctx.metrics
        .service_connect_failures
        .with_label_values(&[label])
        .inc();
    None
}

fn count_in(ctx: &Context, label: &str, n: usize) {
    ctx.metrics.bytes_in.inc_by(n as u64);
    ctx.metrics
        .service_bytes
        .with_label_values(&[label, "in"])
        .inc_by(n as u64);
}

fn count_out(ctx: &Context, label: &str, n: usize) {
    ctx.metrics.bytes_out.inc_by(n as u64);
    ctx.metrics
        .service_bytes
        .with_label_values(&[label, "out"])
        .inc_by(n as u64);
}

/// Relays both directions until both have ended, nothing moved for
/// `idle`, or the shutdown's grace period is over. An end of one
/// direction is passed on (a FIN, or TLS's close_notify then a FIN).
async fn relay<C, B>(client: C, backend: B, idle: Duration, ctx: &Context, label: &str)
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_r, mut client_w) = tokio::io::split(client);
    let (mut backend_r, mut backend_w) = tokio::io::split(backend);
    let mut kill = ctx.kill.clone();
    if *kill.borrow() {
        return;
    }
    let mut up = vec![0u8; 16 * 1024];
    let mut down = vec![0u8; 16 * 1024];
    let (mut client_open, mut backend_open) = (true, true);
    while client_open || backend_open {
        tokio::select! {
            read = client_r.read(&mut up), if client_open => match read {
                Ok(n) if n > 0 => {
                    if backend_w.write_all(&up[..n]).await.is_err() {
                        return;
                    }
                    count_in(ctx, label, n);
                }
                _ => {
                    client_open = false;
                    let _ = backend_w.shutdown().await;
                }
            },
            read = backend_r.read(&mut down), if backend_open => match read {
                Ok(n) if n > 0 => {
                    if client_w.write_all(&down[..n]).await.is_err() {
                        return;
                    }
                    count_out(ctx, label, n);
                }
                _ => {
                    backend_open = false;
                    let _ = client_w.shutdown().await;
                }
            },
            _ = tokio::time::sleep(idle) => return,
            Ok(()) = kill.changed() => if *kill.borrow() { return },
        }
    }
}

/// The client's socket with the ClientHello already read put back in
/// front, so the TLS handshake reads it first.
struct Replay {
    read: Vec<u8>,
    at: usize,
    inner: TcpStream,
}

impl AsyncRead for Replay {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.read.len() {
            let n = (this.read.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.read[this.at..this.at + n]);
            this.at += n;
            if this.at == this.read.len() {
                this.read = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Replay {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
