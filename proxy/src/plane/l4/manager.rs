//! The listener manager: makes the bound sockets follow the published
//! [`L4Table`].
//!
//! Each listener has a task holding a `watch` receiver of its [`Route`]: a
//! UDP listener's task owns its socket and serves it; a TCP listener's
//! passes the route on to the event loops (`tcp`), which own its
//! sockets, one per loop. A new table sends unchanged listeners their new
//! route (no rebind, endpoints take effect for the next connection or
//! flow); a listener missing from the table has its sender dropped, which
//! closes it and starts the drain of its connections. Binds that fail
//! (address not on this host yet, port in use) are retried every
//! `bind_retry`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::L4;
use super::health::HealthChecks;
use super::tcp::{ListenerId, Loops};
use crate::compile::l4::pool::{ListenerKey, Protocol};
use crate::compile::l4::table::{EdgeListener, L4Table, Route};

use super::context::Context;

struct Bound {
    route: watch::Sender<Arc<Route>>,
    task: JoinHandle<()>,
    /// Served by the HTTP edge: a listener whose kind changes is bound
    /// anew.
    edge: Option<EdgeListener>,
    /// Served by `terminate` (a Terminate TLS listener is on it): a
    /// socket that gains or loses one is bound anew.
    terminating: bool,
}

/// Whether `route`'s socket is served by [`super::terminate`].
fn terminating(route: &Route) -> bool {
    route.sni.as_ref().is_some_and(|s| s.terminates())
}

/// What serves the HTTP and HTTPS listeners of Gateways with their own
/// address: the HTTP edge (`crate::plane::serving::OwnListeners`), given
/// by the server so that the L4 plane binds and closes the sockets
/// without depending on the request path.
pub trait EdgeServe: Send + Sync + std::fmt::Debug {
    /// Binds `addr` and returns what accepts on it, TLS terminated when
    /// `tls`, until `stop` turns `true`.
    fn serve(
        &self,
        addr: std::net::SocketAddr,
        tls: bool,
        stop: watch::Receiver<bool>,
    ) -> std::io::Result<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>;
}

/// The HTTP edge the L4 plane hands its Gateways' HTTP sockets to.
pub type EdgeServing = Arc<dyn EdgeServe>;

/// The running L4 side of the proxy.
#[derive(Debug)]
pub struct L4Service {
    stop: watch::Sender<bool>,
    kill: watch::Sender<bool>,
    ctx: Arc<Context>,
    loops: Arc<Loops>,
    task: JoinHandle<()>,
}

impl L4Service {
    pub(super) fn spawn(
        l4: Arc<L4>,
        tables: watch::Receiver<Arc<L4Table>>,
        threads: usize,
        edge: Option<EdgeServing>,
    ) -> std::io::Result<L4Service> {
        let (stop, stop_rx) = watch::channel(false);
        let (kill, kill_rx) = watch::channel(false);
        let ctx = Arc::new(Context {
            config: (*l4.config).clone(),
            metrics: l4.metrics.clone(),
            active: AtomicUsize::new(0),
            kill: kill_rx,
            nodes: Arc::default(),
        });
        let loops = Arc::new(Loops::start(threads, &ctx)?);
        let manager = Manager {
            l4,
            ctx: ctx.clone(),
            loops: loops.clone(),
            bound: BTreeMap::new(),
            failed: BTreeSet::new(),
            health: HealthChecks::default(),
            edge,
        };
        let task = tokio::spawn(manager.run(tables, stop_rx));
        Ok(L4Service {
            stop,
            kill,
            ctx,
            loops,
            task,
        })
    }

    /// What hands connections accepted elsewhere to this plane's loops.
    pub fn adopter(&self) -> super::tcp::Adopter {
        super::tcp::Adopter::new(self.loops.clone(), self.ctx.clone())
    }

    /// Connections and flows alive.
    pub fn active(&self) -> usize {
        self.ctx.active.load(Ordering::Relaxed)
    }

    /// Closes every listener, lets connections finish until `deadline`,
    /// then ends the rest.
    pub async fn shutdown(mut self, deadline: Instant) {
        let _ = self.stop.send(true);
        let _ = (&mut self.task).await;
        while self.active() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = self.active();
        if left > 0 {
            tracing::warn!(
                connections = left,
                "grace period over; closing L4 connections"
            );
        }
        let _ = self.kill.send(true);
        // TCP connections end at once, their lines queued for the log.
        self.loops.kill();
        // The killed flows end at their next poll; waiting (briefly)
        // for them puts their access-log lines in the queue before the
        // server drains it, instead of losing them with the runtime.
        let killed = Instant::now() + Duration::from_millis(500);
        while self.active() > 0 && Instant::now() < killed {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

struct Manager {
    l4: Arc<L4>,
    ctx: Arc<Context>,
    loops: Arc<Loops>,
    bound: BTreeMap<ListenerKey, Bound>,
    /// In the table but not bound; retried.
    failed: BTreeSet<ListenerKey>,
    health: HealthChecks,
    edge: Option<EdgeServing>,
}

impl Manager {
    async fn run(
        mut self,
        mut tables: watch::Receiver<Arc<L4Table>>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut retry = tokio::time::interval(self.ctx.config.bind_retry);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut table = tables.borrow_and_update().clone();
        self.reconcile(&table);
        loop {
            tokio::select! {
                changed = tables.changed() => {
                    if changed.is_err() { break }
                    table = tables.borrow_and_update().clone();
                    self.reconcile(&table);
                }
                _ = retry.tick(), if !self.failed.is_empty() => self.reconcile(&table),
                _ = stop.changed() => break,
            }
        }
        // Dropping the senders closes every listener; connections drain.
        for (key, b) in std::mem::take(&mut self.bound) {
            drop(b.route);
            let _ = b.task.await;
            self.l4.runtime.remove(&key);
        }
        self.ctx.metrics.listeners.set(0);
        tracing::info!("L4 listeners closed");
    }

    fn reconcile(&mut self, table: &L4Table) {
        let gone: Vec<ListenerKey> = self
            .bound
            .keys()
            .filter(|k| !table.listeners.contains_key(k))
            .copied()
            .collect();
        for key in gone {
            if let Some(b) = self.bound.remove(&key) {
                // The task sees the closed channel and stops accepting;
                // its connections drain on their own.
                drop(b.route);
                drop(b.task);
                tracing::info!(listener = %key, "L4 listener closed");
            }
            self.l4.runtime.remove(&key);
        }
        self.failed.retain(|k| {
            let keep = table.listeners.contains_key(k);
            if !keep {
                self.l4.runtime.remove(k);
            }
            keep
        });
        for (key, route) in &table.listeners {
            if let Some(b) = self.bound.get(key) {
                if b.edge == route.edge && b.terminating == terminating(route) {
                    b.route.send_replace(route.clone());
                    continue;
                }
                // Another kind on the same socket (a TCP listener become
                // HTTP): closed, then bound for the new kind below.
                if let Some(b) = self.bound.remove(key) {
                    drop(b.route);
                    drop(b.task);
                }
            }
            match self.bind(*key, route.clone()) {
                Ok(b) => {
                    self.ctx.metrics.binds_total.inc();
                    tracing::info!(listener = %key, service = %route.service, "L4 listener bound");
                    self.bound.insert(*key, b);
                    self.failed.remove(key);
                    self.l4.runtime.set(*key, Ok(()));
                }
                Err(e) => {
                    if self.failed.insert(*key) {
                        tracing::warn!(listener = %key, service = %route.service, error = %e,
                            "cannot bind L4 listener; retrying");
                    }
                    self.l4.runtime.set(*key, Err(e.to_string()));
                }
            }
        }
        self.ctx.metrics.listeners.set(self.bound.len() as i64);
        self.ctx.metrics.bind_failures.set(self.failed.len() as i64);
        self.health
            .reconcile(table, &self.ctx.nodes, self.ctx.config.connect_timeout);
        self.l4
            .runtime
            .applied
            .store(table.generation, Ordering::Release);
    }

    fn bind(&self, key: ListenerKey, route: Arc<Route>) -> std::io::Result<Bound> {
        let addr = key.socket_addr();
        let edge = route.edge.clone();
        if let Some(listener) = &edge {
            let (tx, rx) = watch::channel(route);
            let task = self.bind_edge(addr, listener.tls, rx)?;
            return Ok(Bound {
                route: tx,
                task,
                edge,
                terminating: false,
            });
        }
        let terminates = terminating(&route);
        let (tx, rx) = watch::channel(route);
        let task = match key.protocol {
            Protocol::Tcp if terminates => {
                let socket = super::terminate::bind(addr)?;
                tokio::spawn(super::terminate::serve(socket, rx, self.ctx.clone()))
            }
            Protocol::Tcp => {
                let sockets = super::tcp::bind(addr, self.loops.len())?;
                let loops = self.loops.clone();
                let id = loops.listen(key, sockets, &rx.borrow());
                tokio::spawn(follow_route(id, rx, loops))
            }
            Protocol::Udp => {
                let socket = bind_udp(addr)?;
                tokio::spawn(super::udp::serve(socket, key, rx, self.ctx.clone()))
            }
        };
        Ok(Bound {
            route: tx,
            task,
            edge,
            terminating: terminates,
        })
    }

    /// An HTTP or HTTPS socket of a Gateway with its own address, served
    /// by the HTTP edge until its route sender is dropped. Its connections
    /// are not cut then: they finish on the edge's drain signal, as the
    /// shared listeners' do.
    fn bind_edge(
        &self,
        addr: std::net::SocketAddr,
        tls: bool,
        mut route: watch::Receiver<Arc<Route>>,
    ) -> std::io::Result<JoinHandle<()>> {
        let Some(edge) = &self.edge else {
            return Err(std::io::Error::other(
                "this proxy serves no HTTP edge for Gateway listeners",
            ));
        };
        let (stop_tx, stop) = watch::channel(false);
        let serve = edge.serve(addr, tls, stop)?;
        Ok(tokio::spawn(async move {
            let mut serve = serve;
            loop {
                tokio::select! {
                    _ = &mut serve => return,
                    changed = route.changed() => if changed.is_err() { break },
                }
            }
            let _ = stop_tx.send(true);
            serve.await;
        }))
    }
}

/// Passes a TCP listener's route changes on to the event loops; its end
/// (the sender dropped) closes the listener there.
async fn follow_route(id: ListenerId, mut rx: watch::Receiver<Arc<Route>>, loops: Arc<Loops>) {
    while rx.changed().await.is_ok() {
        let route = rx.borrow_and_update().clone();
        loops.route(id, &route);
    }
    loops.close(id);
}

fn bind_udp(addr: std::net::SocketAddr) -> std::io::Result<UdpSocket> {
    let socket = std::net::UdpSocket::bind(addr)?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket)
}
