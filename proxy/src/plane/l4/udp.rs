//! UDP listeners: one flow per client address, each with its own upstream
//! socket connected to one endpoint, so replies are matched to clients by
//! socket, not by parsing. Replies leave through the listener's socket,
//! hence from the address the client sent to.
//!
//! The flow table is bounded; a new client beyond the bound evicts the
//! flow that has been quiet longest. When an endpoint leaves the route,
//! only its flows are dropped: their clients' next datagrams open a flow to
//! a remaining endpoint, and every other flow carries on untouched.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::L4Metrics;
use super::manager::{ActiveGuard, Context};
use crate::compile::l4::pool::ListenerKey;
use crate::compile::l4::table::Route;
use crate::compile::upstream::{Endpoint, Tried};

/// Largest UDP payload.
const DATAGRAM: usize = 65_536;

thread_local! {
    /// Reply buffer of this worker thread: flows share it instead of
    /// holding 64 KiB each.
    static REPLY_BUFFER: RefCell<Vec<u8>> = RefCell::new(vec![0; DATAGRAM]);
}

/// Coarse monotonic milliseconds for the flows' idle clocks.
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// One client's flow.
#[derive(Debug)]
pub struct Flow {
    id: u64,
    upstream: Arc<UdpSocket>,
    pub endpoint: SocketAddr,
    last: Arc<AtomicU64>,
    replies: Option<AbortHandle>,
    metrics: Option<L4Metrics>,
}

impl Drop for Flow {
    fn drop(&mut self) {
        if let Some(task) = &self.replies {
            task.abort();
        }
        if let Some(m) = &self.metrics {
            m.udp_flows_active.dec();
        }
    }
}

/// Flows by client address, at most `max`.
#[derive(Debug)]
pub struct FlowTable {
    flows: HashMap<SocketAddr, Flow, foldhash::fast::RandomState>,
    max: usize,
    next_id: u64,
}

impl FlowTable {
    pub fn new(max: usize) -> FlowTable {
        FlowTable {
            flows: HashMap::default(),
            max: max.max(1),
            next_id: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Adds a flow; when full, first evicts the flow quiet for longest and
    /// returns it.
    pub fn insert(&mut self, client: SocketAddr, mut flow: Flow) -> Option<Flow> {
        let mut evicted = None;
        if self.flows.len() >= self.max && !self.flows.contains_key(&client) {
            // A linear scan, only when full: cheaper overall than keeping
            // an ordered index on every datagram.
            let oldest = self
                .flows
                .iter()
                .min_by_key(|(_, f)| f.last.load(Ordering::Relaxed))
                .map(|(c, _)| *c);
            evicted = oldest.and_then(|c| self.flows.remove(&c));
        }
        self.next_id += 1;
        flow.id = self.next_id;
        self.flows.insert(client, flow);
        evicted
    }

    /// Removes `client`'s flow if it is still the flow `id`.
    fn remove_if(&mut self, client: &SocketAddr, id: u64) -> Option<Flow> {
        if self.flows.get(client).is_some_and(|f| f.id == id) {
            self.flows.remove(client)
        } else {
            None
        }
    }

    /// Drops the flows whose endpoint `keep` rejects; returns how many.
    pub fn retain_endpoints(&mut self, keep: impl Fn(SocketAddr) -> bool) -> usize {
        let before = self.flows.len();
        self.flows.retain(|_, f| keep(f.endpoint));
        before - self.flows.len()
    }

    fn get(&self, client: &SocketAddr) -> Option<(u64, Arc<UdpSocket>, Arc<AtomicU64>)> {
        self.flows
            .get(client)
            .map(|f| (f.id, f.upstream.clone(), f.last.clone()))
    }
}

pub(super) async fn serve(
    socket: UdpSocket,
    key: ListenerKey,
    mut routes: watch::Receiver<Arc<Route>>,
    ctx: Arc<Context>,
) {
    let socket = Arc::new(socket);
    let table = Arc::new(Mutex::new(FlowTable::new(ctx.config.udp_max_flows)));
    let mut route = routes.borrow_and_update().clone();
    // The Service's counter, resolved per route, not per datagram.
    let service_in = |route: &Route| {
        ctx.metrics
            .service_bytes
            .with_label_values(&[&route.service.to_string(), "in"])
    };
    let mut bytes_in = service_in(&route);
    let mut kill = ctx.kill.clone();
    let mut buf = vec![0u8; DATAGRAM];
    loop {
        let (n, client) = tokio::select! {
            received = socket.recv_from(&mut buf) => match received {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(listener = %key, error = %e, "L4 UDP receive failed");
                    continue;
                }
            },
            changed = routes.changed() => {
                if changed.is_err() { break }
                route = routes.borrow_and_update().clone();
                bytes_in = service_in(&route);
                let dropped = table.lock().retain_endpoints(|e| {
                    route.upstream.endpoints.iter().any(|x| x.addr == e)
                });
                if dropped > 0 {
                    tracing::info!(listener = %key, flows = dropped,
                        "UDP flows of removed endpoints dropped; their clients move on their next datagram");
                }
                continue;
            }
            _ = kill.changed() => break,
        };
        let existing = table.lock().get(&client);
        let (id, upstream, last) = match existing {
            Some(f) => f,
            None => match open_flow(&route, &socket, &table, client, &ctx).await {
                Some(f) => f,
                // No endpoint: the datagram is dropped, as a router would.
                None => continue,
            },
        };
        last.store(now_ms(), Ordering::Relaxed);
        match upstream.send(&buf[..n]).await {
            Ok(_) => {
                ctx.metrics.bytes_in.inc_by(n as u64);
                bytes_in.inc_by(n as u64);
            }
            Err(e) => {
                // ECONNREFUSED reports an earlier ICMP port unreachable.
                if e.kind() == ErrorKind::ConnectionRefused
                    && let Some(flow) = table.lock().remove_if(&client, id)
                {
                    eject(&route, flow.endpoint);
                }
            }
        }
    }
    let flows = std::mem::replace(&mut *table.lock(), FlowTable::new(1));
    drop(flows);
    tracing::debug!(listener = %key, "L4 UDP listener closed");
}

fn eject(route: &Route, addr: SocketAddr) {
    if let Some(e) = route.upstream.endpoints.iter().find(|e| e.addr == addr) {
        e.eject();
    }
}

async fn open_flow(
    route: &Route,
    listener: &Arc<UdpSocket>,
    table: &Arc<Mutex<FlowTable>>,
    client: SocketAddr,
    ctx: &Arc<Context>,
) -> Option<(u64, Arc<UdpSocket>, Arc<AtomicU64>)> {
    let endpoint = pick_live(route, &ctx.nodes)?;
    let local: SocketAddr = if endpoint.addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let upstream = match UdpSocket::bind(local).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot open a UDP socket for a new flow");
            return None;
        }
    };
    if let Err(e) = upstream.connect(endpoint.addr).await {
        tracing::debug!(endpoint = %endpoint.addr, error = %e, "UDP connect failed; endpoint ejected");
        endpoint.eject();
        return None;
    }
    let upstream = Arc::new(upstream);
    let last = Arc::new(AtomicU64::new(now_ms()));
    let flow = Flow {
        id: 0,
        upstream: upstream.clone(),
        endpoint: endpoint.addr,
        last: last.clone(),
        replies: None,
        metrics: Some(ctx.metrics.clone()),
    };
    ctx.metrics.udp_flows_total.inc();
    ctx.metrics.udp_flows_active.inc();
    let service = route.service.to_string();
    ctx.metrics
        .service_udp_flows
        .with_label_values(&[&service])
        .inc();
    let bytes_out = ctx
        .metrics
        .service_bytes
        .with_label_values(&[&service, "out"]);
    let id = {
        let mut t = table.lock();
        if t.insert(client, flow).is_some() {
            ctx.metrics.udp_flows_evicted_total.inc();
        }
        t.next_id
    };
    let task = tokio::spawn(replies(
        upstream.clone(),
        listener.clone(),
        client,
        last.clone(),
        route.options.udp_idle_timeout,
        table.clone(),
        id,
        endpoint,
        ctx.clone(),
        bytes_out,
    ));
    if let Some(f) = table.lock().flows.get_mut(&client)
        && f.id == id
    {
        f.replies = Some(task.abort_handle());
    } else {
        task.abort();
    }
    Some((id, upstream, last))
}

/// The next endpoint round-robin, passing over those on a node the TCP
/// checks find dead, unless all are.
fn pick_live(route: &Route, nodes: &super::health::NodeHealth) -> Option<Arc<Endpoint>> {
    let mut tried = Tried::default();
    let first = route.upstream.pick(&mut tried)?.clone();
    if !nodes.is_down(first.addr.ip()) {
        return Some(first);
    }
    while let Some(e) = route.upstream.pick(&mut tried) {
        if !nodes.is_down(e.addr.ip()) {
            return Some(e.clone());
        }
    }
    Some(first)
}

/// Backend -> client for one flow, until the flow is idle for `idle`.
#[allow(clippy::too_many_arguments)]
async fn replies(
    upstream: Arc<UdpSocket>,
    listener: Arc<UdpSocket>,
    client: SocketAddr,
    last: Arc<AtomicU64>,
    idle: Duration,
    table: Arc<Mutex<FlowTable>>,
    id: u64,
    endpoint: Arc<Endpoint>,
    ctx: Arc<Context>,
    service_bytes_out: prometheus::IntCounter,
) {
    let _active = ActiveGuard::new(&ctx);
    let idle_ms = idle.as_millis() as u64;
    loop {
        let quiet = now_ms().saturating_sub(last.load(Ordering::Relaxed));
        if quiet >= idle_ms {
            break;
        }
        let wait = Duration::from_millis(idle_ms - quiet);
        match tokio::time::timeout(wait, upstream.readable()).await {
            Err(_) => continue,
            Ok(Err(_)) => break,
            Ok(Ok(())) => {}
        }
        // Drain what is queued without awaiting, through the thread's
        // shared buffer.
        let ended = REPLY_BUFFER.with_borrow_mut(|buf| {
            loop {
                match upstream.try_recv(buf) {
                    Ok(n) => {
                        last.store(now_ms(), Ordering::Relaxed);
                        // A full send buffer drops the datagram, as UDP may.
                        if listener.try_send_to(&buf[..n], client).is_ok() {
                            ctx.metrics.bytes_out.inc_by(n as u64);
                            service_bytes_out.inc_by(n as u64);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                    Err(e) => {
                        if e.kind() == ErrorKind::ConnectionRefused {
                            endpoint.eject();
                        }
                        return true;
                    }
                }
            }
        });
        if ended {
            break;
        }
    }
    // Removing our own flow drops it, which aborts this task at its next
    // await; there is none left.
    let flow = table.lock().remove_if(&client, id);
    drop(flow);
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn flow(endpoint: u16, last: u64) -> Flow {
        let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        Flow {
            id: 0,
            upstream: Arc::new(s),
            endpoint: ([127, 0, 0, 1], endpoint).into(),
            last: Arc::new(AtomicU64::new(last)),
            replies: None,
            metrics: None,
        }
    }

    fn client(port: u16) -> SocketAddr {
        ([192, 0, 2, 1], port).into()
    }

    #[tokio::test]
    async fn full_table_evicts_the_flow_quiet_longest() {
        let mut t = FlowTable::new(3);
        assert!(t.insert(client(1), flow(9000, 30).await).is_none());
        assert!(t.insert(client(2), flow(9000, 10).await).is_none());
        assert!(t.insert(client(3), flow(9001, 20).await).is_none());
        let evicted = t.insert(client(4), flow(9001, 40).await).unwrap();
        assert_eq!(evicted.last.load(Ordering::Relaxed), 10);
        assert_eq!(t.len(), 3);
        assert!(t.get(&client(2)).is_none());
        assert!(t.get(&client(4)).is_some());
        // Replacing an existing client's flow never evicts another.
        assert!(t.insert(client(4), flow(9000, 50).await).is_none());
        assert_eq!(t.len(), 3);
    }

    #[tokio::test]
    async fn removing_an_endpoint_keeps_the_other_flows() {
        let mut t = FlowTable::new(10);
        t.insert(client(1), flow(9000, 1).await);
        t.insert(client(2), flow(9001, 1).await);
        t.insert(client(3), flow(9000, 1).await);
        let dropped = t.retain_endpoints(|e| e.port() != 9000);
        assert_eq!(dropped, 2);
        assert!(t.get(&client(2)).is_some());
    }

    #[tokio::test]
    async fn a_stale_flow_id_does_not_remove_the_newer_flow() {
        let mut t = FlowTable::new(10);
        t.insert(client(1), flow(9000, 1).await);
        let old = t.get(&client(1)).unwrap().0;
        t.insert(client(1), flow(9001, 1).await);
        assert!(t.remove_if(&client(1), old).is_none());
        assert_eq!(t.len(), 1);
    }
}
