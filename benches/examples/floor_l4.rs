//! The floors under an L4 TCP relay, run by `l4-report --floor` beside the
//! proxies: what accepting, connecting, relaying and closing a connection
//! costs with nothing else (no routing, retries, timeouts, limits, metrics
//! or logs), built two ways.
//!
//! - `tokio`: one current-thread runtime, a task per connection, the
//!   upstream reached with `TcpStream::connect`, each direction read into a
//!   buffer taken per burst and written with `write_all`. What is left of a
//!   connection's cost is tokio's reactor and scheduler, and the kernel's.
//! - `epoll`: one thread with its own `mio` loop. Sockets are registered
//!   once, each readiness event is handled where it arrives, bytes are read
//!   into one buffer shared by every connection, and a socket is closed
//!   without being removed from epoll first. What is left is the kernel's.
//!
//! Both pass a half-close on as a half-close and a reset as a reset (the
//! other side is closed with `SO_LINGER` 0), as teapot and HAProxy do.
//!
//! `floor_l4 tokio|epoll LISTEN=UPSTREAM [LISTEN=UPSTREAM...]`

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::Duration;

fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let pairs = args
        .map(|a| {
            let (listen, upstream) = a.split_once('=')?;
            Some((listen.parse().ok()?, upstream.parse().ok()?))
        })
        .collect::<Option<Vec<(SocketAddr, SocketAddr)>>>();
    match (mode.as_str(), pairs) {
        ("tokio", Some(pairs)) if !pairs.is_empty() => on_tokio::run(pairs),
        ("epoll", Some(pairs)) if !pairs.is_empty() => on_epoll::run(pairs),
        _ => {
            eprintln!("usage: floor_l4 tokio|epoll LISTEN=UPSTREAM [LISTEN=UPSTREAM...]");
            std::process::exit(2);
        }
    }
}

/// A socket for `upstream`, its connect started: non-blocking, with
/// `TCP_NODELAY` so relayed bytes go out at once.
fn connect_started(upstream: SocketAddr) -> io::Result<std::net::TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(upstream),
        socket2::Type::STREAM.nonblocking(),
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_tcp_nodelay(true)?;
    match socket.connect(&upstream.into()) {
        Err(e) if e.raw_os_error() != Some(EINPROGRESS) => return Err(e),
        _ => {}
    }
    Ok(socket.into())
}

/// Linux's `EINPROGRESS`: a non-blocking connect under way.
const EINPROGRESS: i32 = 115;

/// A listening socket with `TCP_NODELAY`, which accepted sockets inherit.
fn listen(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM.nonblocking(),
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Closes `socket` with a reset rather than a FIN.
fn reset(socket: impl std::os::fd::AsFd) {
    let _ = socket2::SockRef::from(&socket).set_linger(Some(Duration::ZERO));
}

mod on_tokio {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::tcp::{ReadHalf, WriteHalf};
    use tokio::net::{TcpListener, TcpStream};

    pub fn run(pairs: Vec<(SocketAddr, SocketAddr)>) -> io::Result<()> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(async move {
                let mut accepting = Vec::new();
                for (addr, upstream) in pairs {
                    let listener = TcpListener::from_std(listen(addr)?)?;
                    accepting.push(tokio::spawn(accept(listener, upstream)));
                }
                for a in accepting {
                    a.await??;
                }
                Ok(())
            })
    }

    async fn accept(listener: TcpListener, upstream: SocketAddr) -> io::Result<()> {
        loop {
            let (client, _) = listener.accept().await?;
            tokio::spawn(async move {
                if let Ok(upstream) = TcpStream::connect(upstream).await {
                    let _ = upstream.set_nodelay(true);
                    relay(client, upstream).await;
                }
            });
        }
    }

    async fn relay(mut client: TcpStream, mut upstream: TcpStream) {
        let failed = {
            let (mut cr, mut cw) = client.split();
            let (mut ur, mut uw) = upstream.split();
            tokio::try_join!(
                async { pump(&mut cr, &mut uw).await.map_err(|()| true) },
                async { pump(&mut ur, &mut cw).await.map_err(|()| false) },
            )
            .err()
        };
        match failed {
            Some(true) => reset(&upstream),
            Some(false) => reset(&client),
            None => {}
        }
    }

    /// One direction until EOF, passed on as a FIN.
    async fn pump(r: &mut ReadHalf<'_>, w: &mut WriteHalf<'_>) -> Result<(), ()> {
        let mut buf = Vec::with_capacity(16 * 1024);
        loop {
            buf.clear();
            match r.read_buf(&mut buf).await {
                Ok(0) => {
                    let _ = w.shutdown().await;
                    return Ok(());
                }
                Ok(_) => w.write_all(&buf).await.map_err(|_| ())?,
                Err(_) => return Err(()),
            }
        }
    }
}

mod on_epoll {
    use super::*;
    use mio::net::{TcpListener, TcpStream};
    use mio::{Events, Interest, Poll, Token};

    /// Listeners' tokens start here; a connection's two sockets are
    /// `2 * slot` (client) and `2 * slot + 1` (upstream).
    const LISTENERS: usize = 1 << 40;

    struct Side {
        socket: TcpStream,
        readable: bool,
        writable: bool,
        /// EOF read from this side.
        ended: bool,
        /// Bytes read from the other side that this one has not taken yet.
        owed: Vec<u8>,
        /// The other side's FIN, passed on once `owed` is sent.
        shut: bool,
    }

    struct Conn {
        sides: [Side; 2],
        connected: bool,
    }

    enum Outcome {
        Open,
        Done,
        /// A read or write on this side failed: the other one is reset.
        Failed(usize),
    }

    pub fn run(pairs: Vec<(SocketAddr, SocketAddr)>) -> io::Result<()> {
        let mut poll = Poll::new()?;
        let mut listeners = Vec::new();
        for (i, (addr, upstream)) in pairs.into_iter().enumerate() {
            let mut l = TcpListener::from_std(listen(addr)?);
            poll.registry()
                .register(&mut l, Token(LISTENERS + i), Interest::READABLE)?;
            listeners.push((l, upstream));
        }
        let mut conns: Vec<Option<Conn>> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        let mut events = Events::with_capacity(1024);
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            if let Err(e) = poll.poll(&mut events, None) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for event in events.iter() {
                let token = event.token().0;
                if token >= LISTENERS {
                    let (listener, upstream) = &listeners[token - LISTENERS];
                    accept(listener, *upstream, &poll, &mut conns, &mut free);
                    continue;
                }
                let (slot, side) = (token / 2, token % 2);
                let Some(conn) = conns[slot].as_mut() else {
                    continue;
                };
                let s = &mut conn.sides[side];
                s.readable |= event.is_readable() || event.is_read_closed() || event.is_error();
                s.writable |= event.is_writable() || event.is_write_closed() || event.is_error();
                if side == 1 && !conn.connected {
                    if event.is_error() || event.is_write_closed() {
                        conns[slot] = None;
                        free.push(slot);
                        continue;
                    }
                    conn.connected = conn.sides[1].writable;
                }
                match drive(conn, &mut buf) {
                    Outcome::Open => {}
                    Outcome::Done => {
                        conns[slot] = None;
                        free.push(slot);
                    }
                    Outcome::Failed(side) => {
                        reset(&conn.sides[1 - side].socket);
                        conns[slot] = None;
                        free.push(slot);
                    }
                }
            }
        }
    }

    fn accept(
        listener: &TcpListener,
        upstream: SocketAddr,
        poll: &Poll,
        conns: &mut Vec<Option<Conn>>,
        free: &mut Vec<usize>,
    ) {
        loop {
            let mut client = match listener.accept() {
                Ok((c, _)) => c,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return,
            };
            let Ok(upstream) = connect_started(upstream) else {
                continue;
            };
            let mut upstream = TcpStream::from_std(upstream);
            let slot = free.pop().unwrap_or_else(|| {
                conns.push(None);
                conns.len() - 1
            });
            let both = Interest::READABLE | Interest::WRITABLE;
            let registry = poll.registry();
            if registry
                .register(&mut client, Token(2 * slot), both)
                .is_err()
                || registry
                    .register(&mut upstream, Token(2 * slot + 1), both)
                    .is_err()
            {
                free.push(slot);
                continue;
            }
            let side = |socket| Side {
                socket,
                readable: false,
                writable: false,
                ended: false,
                owed: Vec::new(),
                shut: false,
            };
            conns[slot] = Some(Conn {
                sides: [side(client), side(upstream)],
                connected: false,
            });
        }
    }

    /// Moves what can move until nothing can.
    fn drive(conn: &mut Conn, buf: &mut [u8]) -> Outcome {
        if !conn.connected {
            return Outcome::Open;
        }
        loop {
            let mut moved = false;
            for from in 0..2 {
                let to = 1 - from;
                let [a, b] = &mut conn.sides;
                let (src, dst) = if from == 0 { (a, b) } else { (b, a) };
                // What the other side owes is sent first.
                if !dst.owed.is_empty() && dst.writable {
                    match dst.socket.write(&dst.owed) {
                        Ok(n) => {
                            dst.owed.drain(..n);
                            moved = true;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => dst.writable = false,
                        Err(_) => return Outcome::Failed(to),
                    }
                }
                // When both directions have ended, the close sends the FIN.
                let last = dst.ended && src.owed.is_empty();
                if dst.owed.is_empty() && src.ended && !dst.shut && !last {
                    let _ = dst.socket.shutdown(Shutdown::Write);
                    dst.shut = true;
                }
                if !dst.owed.is_empty() || src.ended || !src.readable {
                    continue;
                }
                match src.socket.read(buf) {
                    Ok(0) => {
                        src.ended = true;
                        moved = true;
                    }
                    Ok(n) => {
                        moved = true;
                        match dst.socket.write(&buf[..n]) {
                            Ok(m) => dst.owed.extend_from_slice(&buf[m..n]),
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                dst.writable = false;
                                dst.owed.extend_from_slice(&buf[..n]);
                            }
                            Err(_) => return Outcome::Failed(to),
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => src.readable = false,
                    Err(_) => return Outcome::Failed(from),
                }
            }
            let [a, b] = &conn.sides;
            if a.ended && b.ended && a.owed.is_empty() && b.owed.is_empty() {
                return Outcome::Done;
            }
            if !moved {
                return Outcome::Open;
            }
        }
    }
}
