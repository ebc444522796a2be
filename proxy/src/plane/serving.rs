//! Thread-per-core serving: the HTTP and HTTPS listeners run on `N`
//! serving threads, each a single-threaded tokio runtime with its own
//! listening socket per address and its own edge application (HTTP/1
//! engine with its upstream pool, HTTP/2 application), and, with HTTP/3,
//! its own QUIC endpoint (crate::plane::h3).
//!
//! Why: a connection and every request on it stay on the thread that
//! accepted it. Nothing is stolen between workers, no wake-up crosses
//! threads, and the upstream pool is only ever touched by one thread.
//! With more than one thread the sockets share their address through
//! `SO_REUSEPORT`, so the kernel spreads new connections over the threads'
//! accept queues instead of waking every thread for each one.
//!
//! What stays shared: the snapshot, the metrics and the connection table
//! (the caps of docs/edge.md hold for the replica, not per thread). The
//! control loops (reload, ACME, proofs, L4, admin) run on the caller's
//! runtime, so a compile or a slow API call never holds up a request.
//!
//! Shutdown has two steps: [`ServingThreads::stop_accepting`] returns once
//! every thread has closed its listeners (connections in flight go on, and
//! finish at their next request boundary), [`ServingThreads::finish`] then
//! ends the runtimes, dropping whatever outlived the grace period.

use std::cell::Cell;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pingora_core::listeners::tls::TlsSettings;
use pingora_core::listeners::{L4BufferSettings, ListenerConfig};
use pingora_core::server::Fds;
use pingora_core::services::Service as _;
use pingora_core::services::listening::Service;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::{oneshot, watch};

use crate::plane::ServeError;

/// The sockets one serving thread accepts on.
#[derive(Debug, Default)]
pub struct ThreadSockets {
    pub http: Option<TcpListener>,
    pub https: Option<TcpListener>,
}

/// Binds the first socket of an address's group: listening from here on,
/// so a caller that prints the address may be connected to at once (the
/// serving threads start later). A plain bind comes first, and proves that
/// nothing else holds the address (a second proxy on the port must fail,
/// not join the group); it also resolves port 0. Then the group's first
/// socket, with `SO_REUSEPORT`, takes the very address the probe got.
pub fn bind_first(addr: &str) -> std::io::Result<TcpListener> {
    let probe = TcpListener::bind(addr)?;
    let addr = probe.local_addr()?;
    drop(probe);
    reuse_port_socket(addr)
}

/// Splits the listeners into one set per thread: the first thread takes
/// the sockets [`bind_first`] bound, each other thread binds its own
/// member of each group on the same address.
pub fn per_thread(
    http: Option<TcpListener>,
    https: Option<TcpListener>,
    threads: usize,
) -> Result<Vec<ThreadSockets>, ServeError> {
    let mut sets = vec![ThreadSockets { http, https }];
    for _ in 1..threads.max(1) {
        let member = |l: &Option<TcpListener>| -> Result<Option<TcpListener>, ServeError> {
            let Some(l) = l else { return Ok(None) };
            let addr = l.local_addr()?;
            reuse_port_socket(addr)
                .map(Some)
                .map_err(|source| ServeError::Bind {
                    what: "serving thread",
                    addr: addr.to_string(),
                    source,
                })
        };
        let set = ThreadSockets {
            http: member(&sets[0].http)?,
            https: member(&sets[0].https)?,
        };
        sets.push(set);
    }
    Ok(sets)
}

/// Enough for a burst of new connections while a thread is busy; the
/// kernel caps it at `net.core.somaxconn`.
const BACKLOG: i32 = 4096;

/// How long the kernel holds a connection that sent nothing before
/// handing it over anyway (`TCP_DEFER_ACCEPT`).
const DEFER_ACCEPT_SECS: u32 = 1;

fn reuse_port_socket(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket =
        crate::plane::socket_group::member(addr, socket2::Type::STREAM, socket2::Protocol::TCP)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    // Heads and small answers go out at once. Set here, every accepted
    // socket inherits it (Linux copies it from the listener), one system
    // call fewer per connection.
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    // HTTP and TLS clients speak first: a connection is accepted once its
    // request (or ClientHello) is there, so the first read finds it and
    // a connection that never has to wait is never added to the event
    // loop (teapot_h1::ClientTcp). One that sends nothing is accepted
    // after about a second anyway and meets the header-read timeout.
    // nginx's `listen ... deferred` and HAProxy's `defer-accept` are the
    // same option (docs/decisions.md, "Deferred accept on HTTP listeners").
    pingora_core::protocols::l4::ext::set_tcp_defer_accept(socket.as_raw_fd(), DEFER_ACCEPT_SECS)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(socket.into())
}

/// What one serving thread runs: teapot's own accept loop on the plain
/// HTTP socket, Pingora's TLS listener on the HTTPS socket, one
/// application for both.
pub struct ThreadServing {
    app: Arc<Edge>,
    http: Option<TcpListener>,
    https: Option<(Service<Edge>, Fds)>,
    /// This thread's HTTP/3 endpoint (crate::plane::h3), when served.
    quic: Option<crate::plane::h3::QuicThread>,
}

impl ThreadServing {
    /// This thread also serves HTTP/3 on `quic`'s socket.
    pub fn with_quic(mut self, quic: Option<crate::plane::h3::QuicThread>) -> ThreadServing {
        self.quic = quic;
        self
    }
}

/// The serving threads' application.
pub type Edge = crate::plane::accept::EdgeApp<crate::plane::h2::H2Server>;

/// One thread's listeners over its sockets. `tls` builds the HTTPS
/// listener's settings (each thread needs its own: they are consumed).
pub fn service(
    app: Edge,
    sockets: ThreadSockets,
    tls: &dyn Fn() -> Result<TlsSettings, ServeError>,
) -> Result<ThreadServing, ServeError> {
    let https = match sockets.https {
        Some(l) => {
            let mut service = Service::new("teapot".to_string(), app.clone());
            // Admission at accept and the handshake deadline, and on the
            // shared socket TLS passthrough by SNI, before the handshake
            // (crate::plane::passthrough).
            if let Some(pre_tls) = app.pre_tls() {
                service.endpoints().set_pre_tls_callback(pre_tls);
            }
            let mut fds = Fds::new();
            // Pingora adopts a socket by its address string; it must be
            // non-blocking for tokio.
            l.set_nonblocking(true)?;
            let addr = l.local_addr()?.to_string();
            fds.add(addr.clone(), l.into_raw_fd());
            // No Pingora stream buffer under rustls either: 64 KiB per
            // connection, idle or not, for fewer system calls on large
            // uploads (rustls reads 4 KiB of records at a time without
            // it). An edge holds far more idle connections than uploads.
            service.add_listener(
                ListenerConfig::tcp(&addr)
                    .tls(tls()?)
                    .l4_buffer(L4BufferSettings::unbuffered()),
            );
            Some((service, fds))
        }
        None => None,
    };
    Ok(ThreadServing {
        app: Arc::new(app),
        http: sockets.http,
        https,
        quic: None,
    })
}

/// Builds the TLS settings of an HTTPS listener: of the shared ones
/// (`None`) or of one socket of a Gateway with its own address, whose
/// client-certificate settings are its own.
pub type TlsBuilder = dyn Fn(Option<SocketAddr>) -> Result<TlsSettings, ServeError> + Send + Sync;

/// The HTTP and HTTPS sockets of Gateways with their own address, which
/// the L4 plane binds and closes (crate::plane::l4::manager): served by an
/// edge application that shares the shared listeners' connection table
/// (the same caps) and drain signal, HTTPS with the shared listener's TLS
/// settings but a certificate resolver of the socket's own
/// (`SniResolver::at`): there the Gateway's HTTPS listeners at that port
/// choose the certificate by SNI, a hostname-less one's for any name. The
/// application's pre-TLS hook admits each HTTPS connection at accept and
/// bounds its handshake as on the shared listener
/// (`Passthrough::admission_only`). They run on the caller's runtime, not
/// on the serving threads, whose sockets are fixed at start.
pub struct OwnListeners {
    pub app: Arc<Edge>,
    pub tls: Arc<TlsBuilder>,
    pub sni: Option<Arc<crate::plane::tls::SniResolver>>,
}

impl std::fmt::Debug for OwnListeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnListeners").finish_non_exhaustive()
    }
}

impl crate::plane::l4::manager::EdgeServe for OwnListeners {
    fn serve(
        &self,
        addr: SocketAddr,
        tls: bool,
        stop: watch::Receiver<bool>,
    ) -> std::io::Result<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>> {
        let listener = bind_first(&addr.to_string())?;
        if !tls {
            return Ok(Box::pin(accept_plain(listener, self.app.clone(), stop)));
        }
        let sockets = ThreadSockets {
            http: None,
            https: Some(listener),
        };
        let tls = || {
            let mut settings = (self.tls)(Some(addr))?;
            if let Some(sni) = &self.sni {
                settings.set_cert_resolver(Arc::new(sni.at(addr)));
            }
            Ok(settings)
        };
        let serving = service((*self.app).clone(), sockets, &tls)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Box::pin(async move {
            if let Some((mut service, fds)) = serving.https {
                let fds = Arc::new(parking_lot::Mutex::new(fds));
                service.start_service(Some(fds), stop, 1).await;
            }
        }))
    }
}

/// Accepts plain HTTP connections until `stop` turns `true`, each on a
/// task of this thread that holds the bare socket and the engine's small
/// per-connection state, nothing else (docs/capacity.md, "Idle
/// connections"). Pingora's listener put a stream wrapper, a socket
/// digest, a handshake timer and a task sized for a TLS handshake on
/// every connection; plain HTTP needs none of them.
pub async fn accept_plain(listener: TcpListener, app: Arc<Edge>, mut stop: watch::Receiver<bool>) {
    // A listener on one address is every connection's local address; on a
    // wildcard each connection has its own.
    let local = listener
        .local_addr()
        .ok()
        .filter(|a| !a.ip().is_unspecified());
    // The listener is in the event loop, its connections are not (yet):
    // each is accepted non-blocking and handed over as the bare socket
    // (teapot_h1::ClientTcp), which tokio's `accept` cannot do.
    // `with_interest` is deprecated because a `T` could close or swap its
    // descriptor while registered; an owned `Socket` never does, and is
    // closed only with the `AsyncFd` (the replacement is an `unsafe fn`
    // stating exactly that, and this crate forbids `unsafe`).
    #[allow(deprecated)]
    let registered = AsyncFd::with_interest(socket2::Socket::from(listener), Interest::READABLE);
    let listener = match registered {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "plain HTTP listener");
            return;
        }
    };
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => return,
            accepted = accept_nonblocking(&listener) => accepted,
        };
        match accepted {
            Ok((tcp, client)) => {
                if let Some(connection) = app.clone().serve_tcp(tcp, client, local, &stop) {
                    tokio::spawn(connection);
                }
            }
            // Out of file descriptors: accepting again would fail at
            // once and spin; connections closing free some.
            Err(e) if e.raw_os_error() == Some(24) || e.raw_os_error() == Some(23) => {
                tracing::warn!(error = %e, "accept: out of file descriptors, pausing 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => tracing::debug!(error = %e, "accept"),
        }
    }
}

/// The next connection on `listener`, non-blocking and close-on-exec
/// from the one system call, with its client's address.
async fn accept_nonblocking(
    listener: &AsyncFd<socket2::Socket>,
) -> std::io::Result<(std::net::TcpStream, SocketAddr)> {
    loop {
        let mut ready = listener.readable().await?;
        match ready.try_io(|l| {
            l.get_ref()
                .accept4(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
        }) {
            Ok(Ok((socket, addr))) => {
                let client = addr.as_socket().ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "not an IP connection")
                })?;
                return Ok((socket.into(), client));
            }
            Ok(Err(e)) => return Err(e),
            // Drained: the readiness is cleared, wait for the next.
            Err(_would_block) => continue,
        }
    }
}

/// What a quiet thread calls to give freed memory back: the binary's
/// allocator hook (the proxy does not choose the allocator), set once at
/// start.
static GIVE_BACK: OnceLock<fn()> = OnceLock::new();

/// How often a thread calls the hook at most.
const GIVE_BACK_EVERY: Duration = Duration::from_secs(1);

/// Sets the hook that gives a thread's freed memory back to the system
/// (`teapot`'s allocator module: mimalloc purges a thread's freed pages
/// only when that thread calls into it, which a thread with nothing to do
/// never does).
pub fn on_quiet(hook: fn()) {
    let _ = GIVE_BACK.set(hook);
}

/// For a multi-threaded runtime's `on_thread_park`: the hook, at most once
/// a second per thread, so a thread that parks between requests pays one
/// clock read.
pub fn parked() {
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let Some(hook) = GIVE_BACK.get() else {
        return;
    };
    let now = Instant::now();
    LAST.with(|last| {
        if last
            .get()
            .is_none_or(|t| now.duration_since(t) >= GIVE_BACK_EVERY)
        {
            last.set(Some(now));
            teapot_h1::spare::clear();
            hook();
        }
    });
}

/// A serving thread's own tick for the hook: a thread parked with idle
/// connections may sleep for minutes, and the memory a burst freed would
/// stay resident all that time.
async fn give_back_memory() {
    let Some(hook) = GIVE_BACK.get().copied() else {
        return;
    };
    let mut tick = tokio::time::interval(GIVE_BACK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        // The engine's spare buffers first, so the allocator can purge them.
        teapot_h1::spare::clear();
        hook();
    }
}

/// The running serving threads.
#[derive(Debug)]
pub struct ServingThreads {
    threads: Vec<JoinHandle<()>>,
    closed: Vec<oneshot::Receiver<()>>,
    release: watch::Sender<bool>,
}

impl ServingThreads {
    /// Starts one thread per service. Each accepts until `stop` turns
    /// `true`; its connections see the same signal.
    pub fn start(
        services: Vec<ThreadServing>,
        stop: watch::Receiver<bool>,
    ) -> Result<Self, ServeError> {
        let (release, released) = watch::channel(false);
        let mut threads = Vec::with_capacity(services.len());
        let mut closed = Vec::with_capacity(services.len());
        for (i, serving) in services.into_iter().enumerate() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let stop = stop.clone();
            let mut released = released.clone();
            let (closed_tx, closed_rx) = oneshot::channel();
            let thread = std::thread::Builder::new()
                .name(format!("teapot-serve-{i}"))
                .spawn(move || {
                    // A `LocalSet`: the HTTP/3 endpoint's connections are
                    // tasks of this thread (crate::plane::h3).
                    let local = tokio::task::LocalSet::new();
                    local.block_on(&runtime, async move {
                        let give_back = tokio::spawn(give_back_memory());
                        let ThreadServing {
                            app,
                            http,
                            https,
                            quic,
                        } = serving;
                        // Not joined: it drains on `stop` by itself, and
                        // `Http3::finish` waits for it before the release.
                        if let Some(quic) = quic {
                            drop(tokio::task::spawn_local(quic.serve(stop.clone())));
                        }
                        let plain = http.map(|l| tokio::spawn(accept_plain(l, app, stop.clone())));
                        if let Some((mut service, fds)) = https {
                            let fds = Arc::new(parking_lot::Mutex::new(fds));
                            service.start_service(Some(fds), stop, 1).await;
                        }
                        if let Some(plain) = plain {
                            let _ = plain.await;
                        }
                        let _ = closed_tx.send(());
                        // Connections in flight finish on this runtime.
                        let _ = released.wait_for(|r| *r).await;
                        give_back.abort();
                    });
                })?;
            threads.push(thread);
            closed.push(closed_rx);
        }
        Ok(ServingThreads {
            threads,
            closed,
            release,
        })
    }

    pub fn len(&self) -> usize {
        self.threads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Waits until every thread has closed its listeners (after the stop
    /// signal).
    pub async fn stop_accepting(&mut self) {
        for closed in self.closed.drain(..) {
            let _ = closed.await;
        }
    }

    /// Ends every thread's runtime (connections still open are dropped)
    /// and waits at most `within` for the threads to exit.
    pub async fn finish(self, within: Duration) {
        let _ = self.release.send(true);
        let threads = self.threads;
        let joined = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        });
        if tokio::time::timeout(within, joined).await.is_err() {
            tracing::warn!("serving threads did not end in time");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn the_first_socket_listens_at_once_and_threads_join_its_address() {
        let http = bind_first("127.0.0.1:0").unwrap();
        let https = bind_first("127.0.0.1:0").unwrap();
        let (a, b) = (http.local_addr().unwrap(), https.local_addr().unwrap());
        // Connected before any serving thread exists: queued, not refused.
        // Each client sends a byte: accepting waits for a client's first
        // bytes (`reuse_port_socket`).
        let mut early = std::net::TcpStream::connect(a).unwrap();
        early.write_all(b"G").unwrap();
        let sets = per_thread(Some(http), Some(https), 3).unwrap();
        assert_eq!(sets.len(), 3);
        for s in &sets {
            assert_eq!(s.http.as_ref().unwrap().local_addr().unwrap(), a);
            assert_eq!(s.https.as_ref().unwrap().local_addr().unwrap(), b);
        }
        assert!(sets[0].http.as_ref().unwrap().accept().is_ok());
        // Every socket of the group accepts: the kernel hands each new
        // connection to one of them.
        let mut accepted = 0;
        for _ in 0..64 {
            let mut c = std::net::TcpStream::connect(a).unwrap();
            c.write_all(b"G").unwrap();
            std::thread::sleep(Duration::from_millis(2));
            for s in &sets {
                if s.http.as_ref().unwrap().accept().is_ok() {
                    accepted += 1;
                }
            }
        }
        assert_eq!(accepted, 64);
    }

    #[test]
    fn a_connection_is_handed_over_once_its_first_bytes_are_there() {
        let l = bind_first("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let err = l.accept().expect_err("nothing sent yet: not handed over");
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
        c.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let accepted = std::iter::repeat_with(|| l.accept())
            .take(500)
            .find_map(|a| {
                a.ok().or_else(|| {
                    std::thread::sleep(Duration::from_millis(2));
                    None
                })
            })
            .expect("handed over with its request");
        let mut first = [0u8; 3];
        accepted.0.peek(&mut first).unwrap();
        assert_eq!(&first, b"GET", "the request is there at accept");
    }

    #[test]
    fn one_thread_keeps_the_bound_sockets() {
        let l = bind_first("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let sets = per_thread(Some(l), None, 1).unwrap();
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].http.as_ref().unwrap().local_addr().unwrap(), addr);
        assert!(sets[0].https.is_none());
    }

    #[test]
    fn another_process_on_the_port_is_refused_both_ways() {
        let l = bind_first("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let sets = per_thread(Some(l), None, 2).unwrap();
        // A plain bind (another program) and another proxy's group both
        // fail while this group holds the address.
        assert!(TcpListener::bind(addr).is_err());
        assert!(bind_first(&addr.to_string()).is_err());
        drop(sets);
    }

    /// The listener's TCP_NODELAY is every accepted connection's, so the
    /// accept path does not set it per connection.
    #[test]
    fn accepted_connections_have_no_delay_from_the_listener() {
        let l = bind_first("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        client.write_all(b"G").unwrap();
        let accepted = std::iter::repeat_with(|| l.accept())
            .take(1000)
            .find_map(Result::ok)
            .expect("the connection is accepted")
            .0;
        assert!(accepted.nodelay().unwrap());
    }
}

#[cfg(test)]
mod give_back_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    static CALLS: AtomicUsize = AtomicUsize::new(0);

    fn count() {
        CALLS.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn a_parking_thread_gives_memory_back_at_most_once_a_second() {
        super::on_quiet(count);
        std::thread::spawn(|| {
            for _ in 0..1000 {
                super::parked();
            }
        })
        .join()
        .unwrap();
        assert_eq!(CALLS.load(Ordering::Relaxed), 1);
        // Another thread has its own second.
        std::thread::spawn(super::parked).join().unwrap();
        assert_eq!(CALLS.load(Ordering::Relaxed), 2);
    }
}
