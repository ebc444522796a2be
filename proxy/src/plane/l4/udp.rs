//! UDP listeners: one flow per client address, each with its own upstream
//! socket connected to one endpoint, so replies are matched to clients by
//! socket, not by parsing. Replies leave through the listener's socket,
//! hence from the address the client sent to.
//!
//! The flow table is bounded; a new client beyond the bound evicts the
//! flow that has been quiet longest. When an endpoint leaves the route,
//! only its flows are dropped: their clients' next datagrams open a flow to
//! a remaining endpoint, and every other flow carries on untouched.
//!
//! With the access log on, each flow gets one line when it ends (idle,
//! evicted, its endpoint removed, an error, shutdown) with its bytes both
//! ways; with it off a flow carries no line and a datagram counts nothing
//! more than the metrics.

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
use super::context::{ActiveGuard, Context};
use crate::compile::l4::pool::ListenerKey;
use crate::compile::l4::table::Route;
use crate::compile::upstream::Tried;
use crate::live::endpoints::Endpoint;
use crate::plane::access_log::{AccessLog, Entry};

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
    /// The flow's access-log line, sent when the flow is dropped; `None`
    /// with the log off. Boxed: most tables never carry one.
    line: Option<Box<FlowLine>>,
}

impl Flow {
    /// Why the flow ends, for its access-log line.
    fn end(&mut self, reason: &'static str) {
        if let Some(line) = &mut self.line {
            line.entry.reason = Some(reason);
        }
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        if let Some(task) = &self.replies {
            task.abort();
        }
        if let Some(m) = &self.metrics {
            m.udp_flows_active.dec();
        }
        if let Some(line) = self.line.take() {
            line.send();
        }
    }
}

/// A flow's bytes, client to backend (`sent`, counted by the listener's
/// task) and back (`received`, by the flow's reply task).
#[derive(Debug, Default)]
struct FlowBytes {
    sent: AtomicU64,
    received: AtomicU64,
}

/// What a flow's access-log line needs beyond its [`Entry`].
#[derive(Debug)]
struct FlowLine {
    log: AccessLog,
    start: Instant,
    bytes: Arc<FlowBytes>,
    entry: Entry,
}

impl FlowLine {
    fn new(
        log: &AccessLog,
        service: &str,
        client: SocketAddr,
        endpoint: SocketAddr,
    ) -> Option<Box<Self>> {
        if !log.is_on() {
            return None;
        }
        let mut entry = Entry::udp();
        entry.tag = Some(Arc::from(format!("\x1f{service}")));
        entry.client = Some(client);
        entry.upstream = Some(endpoint);
        Some(Box::new(FlowLine {
            log: log.clone(),
            start: Instant::now(),
            bytes: Arc::default(),
            entry,
        }))
    }

    fn send(self: Box<Self>) {
        let FlowLine {
            log,
            start,
            bytes,
            mut entry,
        } = *self;
        let failed = entry.is_error();
        if log.wants(if failed { 0 } else { 200 }, failed) {
            entry.bytes_in = bytes.sent.load(Ordering::Relaxed);
            entry.bytes_out = bytes.received.load(Ordering::Relaxed);
            entry.duration = start.elapsed();
            log.send(entry);
        }
    }
}

/// What the listener's task needs of a flow per datagram.
type FlowHandle = (u64, Arc<UdpSocket>, Arc<AtomicU64>, Option<Arc<FlowBytes>>);

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
        let mut evicted: Option<Flow> = None;
        if self.flows.len() >= self.max && !self.flows.contains_key(&client) {
            // A linear scan, only when full: cheaper overall than keeping
            // an ordered index on every datagram.
            let oldest = self
                .flows
                .iter()
                .min_by_key(|(_, f)| f.last.load(Ordering::Relaxed))
                .map(|(c, _)| *c);
            evicted = oldest.and_then(|c| self.flows.remove(&c));
            if let Some(f) = &mut evicted {
                f.end("evicted");
            }
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
        self.flows.retain(|_, f| {
            let kept = keep(f.endpoint);
            if !kept {
                f.end("drained");
            }
            kept
        });
        before - self.flows.len()
    }

    /// Drops the flows of the clients `keep` rejects; returns how many.
    pub fn retain_clients(&mut self, keep: impl Fn(SocketAddr) -> bool) -> usize {
        let before = self.flows.len();
        self.flows.retain(|client, f| {
            let kept = keep(*client);
            if !kept {
                f.end("source_range");
            }
            kept
        });
        before - self.flows.len()
    }

    /// Drops every flow, each ending for `reason`.
    fn close_all(&mut self, reason: &'static str) {
        for (_, mut flow) in self.flows.drain() {
            flow.end(reason);
        }
    }

    fn get(&self, client: &SocketAddr) -> Option<FlowHandle> {
        self.flows.get(client).map(|f| {
            (
                f.id,
                f.upstream.clone(),
                f.last.clone(),
                f.line.as_ref().map(|l| l.bytes.clone()),
            )
        })
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
    let refused = |route: &Route| {
        ctx.metrics
            .source_range_refusals
            .with_label_values(&[&route.service.to_string(), "UDP"])
    };
    let mut refusals = refused(&route);
    let mut kill = ctx.kill.clone();
    let mut buf = vec![0u8; DATAGRAM];
    // Why the listener's remaining flows end: a closed listener lets them
    // go as a drain would, a kill is the shutdown.
    let mut closing = "drained";
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
                let before = std::mem::replace(&mut route, routes.borrow_and_update().clone());
                bytes_in = service_in(&route);
                refusals = refused(&route);
                // Every compile sends every listener its route; the flows
                // are looked over only when the list itself changed.
                let narrowed = match &route.options.source_ranges {
                    Some(r) if before.options.source_ranges.as_ref() != Some(r) => Some(r.clone()),
                    _ => None,
                };
                let outside = narrowed.map_or(0, |ranges| {
                    table.lock().retain_clients(|c| ranges.admits(c.ip()))
                });
                if outside > 0 {
                    // Their replies would otherwise keep flowing to clients
                    // the Service no longer admits.
                    refusals.inc_by(outside as u64);
                    tracing::info!(listener = %key, flows = outside,
                        "UDP flows of clients outside the Service's new source ranges dropped");
                }
                let dropped = table.lock().retain_endpoints(|e| {
                    route.upstream.endpoints.load().iter().any(|x| x.addr == e)
                });
                if dropped > 0 {
                    tracing::info!(listener = %key, flows = dropped,
                        "UDP flows of removed endpoints dropped; their clients move on their next datagram");
                }
                continue;
            }
            _ = kill.changed() => {
                closing = "shutdown";
                break;
            }
        };
        // Before any flow is looked up or made: a client outside the
        // source ranges costs one binary search and takes no flow slot, so
        // it can neither evict an admitted client's flow nor reach an
        // endpoint. Checked per datagram, not per flow, so no path (a
        // flow made under an older route included) skips it.
        if let Some(ranges) = &route.options.source_ranges
            && !ranges.admits(client.ip())
        {
            refusals.inc();
            continue;
        }
        // A Gateway route's share for invalid backendRefs is dropped, by
        // weight, per datagram (as the UDPRoute specification asks).
        if route.refusals.as_ref().is_some_and(|r| r.refuse_next()) {
            continue;
        }
        let existing = table.lock().get(&client);
        let (id, upstream, last, flow_bytes) = match existing {
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
                if let Some(b) = &flow_bytes {
                    b.sent.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            Err(e) => {
                // ECONNREFUSED reports an earlier ICMP port unreachable.
                let removed = (e.kind() == ErrorKind::ConnectionRefused)
                    .then(|| table.lock().remove_if(&client, id))
                    .flatten();
                if let Some(mut flow) = removed {
                    flow.end("connection_error");
                    eject(&route, flow.endpoint);
                }
            }
        }
    }
    // Taken out of the lock before they are dropped: dropping a flow
    // sends its line and aborts its task.
    let mut flows = std::mem::replace(&mut *table.lock(), FlowTable::new(1));
    flows.close_all(closing);
    tracing::debug!(listener = %key, "L4 UDP listener closed");
}

fn eject(route: &Route, addr: SocketAddr) {
    if let Some(e) = route
        .upstream
        .endpoints
        .load()
        .iter()
        .find(|e| e.addr == addr)
    {
        e.eject();
    }
}

async fn open_flow(
    route: &Route,
    listener: &Arc<UdpSocket>,
    table: &Arc<Mutex<FlowTable>>,
    client: SocketAddr,
    ctx: &Arc<Context>,
) -> Option<FlowHandle> {
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
    let service = route.service.to_string();
    let line = FlowLine::new(&ctx.metrics.access_log, &service, client, endpoint.addr);
    let flow_bytes = line.as_ref().map(|l| l.bytes.clone());
    let flow = Flow {
        id: 0,
        upstream: upstream.clone(),
        endpoint: endpoint.addr,
        last: last.clone(),
        replies: None,
        metrics: Some(ctx.metrics.clone()),
        line,
    };
    ctx.metrics.udp_flows_total.inc();
    ctx.metrics.udp_flows_active.inc();
    ctx.metrics
        .service_udp_flows
        .with_label_values(&[&service])
        .inc();
    let bytes_out = ctx
        .metrics
        .service_bytes
        .with_label_values(&[&service, "out"]);
    let (id, evicted) = {
        let mut t = table.lock();
        let evicted = t.insert(client, flow);
        (t.next_id, evicted)
    };
    if evicted.is_some() {
        ctx.metrics.udp_flows_evicted_total.inc();
    }
    drop(evicted);
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
        flow_bytes.clone(),
    ));
    if let Some(f) = table.lock().flows.get_mut(&client)
        && f.id == id
    {
        f.replies = Some(task.abort_handle());
    } else {
        task.abort();
    }
    Some((id, upstream, last, flow_bytes))
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
    flow_bytes: Option<Arc<FlowBytes>>,
) {
    let _active = ActiveGuard::new(&ctx);
    let idle_ms = idle.as_millis() as u64;
    let reason = loop {
        let quiet = now_ms().saturating_sub(last.load(Ordering::Relaxed));
        if quiet >= idle_ms {
            break "idle_timeout";
        }
        let wait = Duration::from_millis(idle_ms - quiet);
        match tokio::time::timeout(wait, upstream.readable()).await {
            Err(_) => continue,
            Ok(Err(_)) => break "connection_error",
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
                            if let Some(b) = &flow_bytes {
                                b.received.fetch_add(n as u64, Ordering::Relaxed);
                            }
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
            break "connection_error";
        }
    };
    // Removing our own flow drops it (outside the lock), which sends its
    // line and aborts this task at its next await; there is none left.
    let flow = table.lock().remove_if(&client, id);
    if let Some(mut flow) = flow {
        flow.end(reason);
    }
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
            line: None,
        }
    }

    fn client(port: u16) -> SocketAddr {
        ([192, 0, 2, 1], port).into()
    }

    #[tokio::test]
    async fn a_client_outside_the_source_ranges_gets_no_flow_and_its_datagrams_are_dropped() {
        use crate::compile::l4::table::{HealthOptions, RouteOptions};
        use crate::compile::upstream::Upstream;
        use crate::live::endpoints::EndpointRegistry;
        let backend = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let backend_addr = backend.local_addr().unwrap();
        let backend_got = Arc::new(AtomicU64::new(0));
        let got = backend_got.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = backend.recv_from(&mut buf).await {
                got.fetch_add(1, Ordering::SeqCst);
                let _ = backend.send_to(&buf[..n], from).await;
            }
        });
        let registry = EndpointRegistry::default();
        let upstream = Arc::new(Upstream::new(
            "t/dns".into(),
            vec![registry.endpoint(backend_addr)],
            None,
        ));
        let route = |nets: &[&str]| {
            Arc::new(Route {
                service: teapot_model::store::NsName::new("t", "dns"),
                port_name: String::new(),
                upstream: upstream.clone(),
                sni: None,
                refusals: None,
                options: RouteOptions {
                    source_ranges: Some(Arc::new(crate::compile::l4::SourceRanges::new(
                        nets.iter().map(|n| n.parse().unwrap()).collect(),
                    ))),
                    proxy_protocol: false,
                    tcp_idle_timeout: Duration::from_secs(60),
                    udp_idle_timeout: Duration::from_secs(60),
                    health: HealthOptions::default(),
                },
                edge: None,
            })
        };
        let (_kill, kill) = watch::channel(false);
        let ctx = Arc::new(Context {
            config: crate::compile::l4::L4Config::default(),
            metrics: L4Metrics::register(&prometheus::Registry::new()).unwrap(),
            active: Default::default(),
            kill,
            nodes: Arc::default(),
        });
        let listener = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let key = ListenerKey {
            addr: addr.ip(),
            port: addr.port(),
            protocol: crate::compile::l4::Protocol::Udp,
        };
        let (routes, routes_rx) = watch::channel(route(&["10.0.0.0/8", "::/0"]));
        tokio::spawn(serve(listener, key, routes_rx, ctx.clone()));
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client.connect(addr).await.unwrap();
        let refused = |ctx: &Context| {
            ctx.metrics
                .source_range_refusals
                .with_label_values(&["t/dns", "UDP"])
                .get()
        };
        for _ in 0..3 {
            assert_eq!(answer(&client, b"q").await, None, "127.0.0.1 is outside");
        }
        assert_eq!(refused(&ctx), 3);
        assert_eq!(ctx.metrics.udp_flows_total.get(), 0, "no flow slot taken");
        assert_eq!(backend_got.load(Ordering::SeqCst), 0);

        // Widened to it: served.
        routes.send_replace(route(&["127.0.0.0/8"]));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(answer(&client, b"ok").await, Some(2));
        assert_eq!(ctx.metrics.udp_flows_active.get(), 1);

        // Narrowed past it: its flow goes at once (no reply reaches it any
        // more) and its datagrams are dropped again.
        routes.send_replace(route(&["192.0.2.0/24"]));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(ctx.metrics.udp_flows_active.get(), 0);
        assert_eq!(refused(&ctx), 4);
        assert_eq!(answer(&client, b"late").await, None);
        assert_eq!(refused(&ctx), 5);
        assert_eq!(backend_got.load(Ordering::SeqCst), 1);
    }

    /// The length of the answer to `text`, if one comes within 300 ms.
    async fn answer(client: &UdpSocket, text: &[u8]) -> Option<usize> {
        client.send(text).await.unwrap();
        let mut buf = [0u8; 64];
        tokio::time::timeout(Duration::from_millis(300), client.recv(&mut buf))
            .await
            .ok()
            .and_then(Result::ok)
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
    async fn each_ended_flow_gets_one_line_with_its_reason_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let log = AccessLog::start(
            &crate::plane::access_log::AccessLogConfig {
                mode: crate::plane::access_log::Mode::All,
                destination: crate::plane::access_log::Destination::File(path.clone()),
                ..Default::default()
            },
            prometheus::IntCounter::new("d", "d").unwrap(),
        )
        .unwrap();
        let logged = |port: u16, endpoint: u16, last: u64| {
            let log = log.clone();
            async move {
                let mut f = flow(endpoint, last).await;
                f.line = FlowLine::new(&log, "l4/dns", client(port), f.endpoint);
                f
            }
        };
        let mut t = FlowTable::new(2);
        t.insert(client(1), logged(1, 9000, 10).await);
        t.insert(client(2), logged(2, 9001, 20).await);
        let (_, _, _, bytes) = t.get(&client(1)).unwrap();
        let bytes = bytes.expect("a logged flow counts its bytes");
        bytes.sent.fetch_add(5, Ordering::Relaxed);
        bytes.received.fetch_add(7, Ordering::Relaxed);
        // Client 1's flow is quiet longest: client 3 evicts it.
        drop(t.insert(client(3), logged(3, 9002, 30).await));
        assert_eq!(t.retain_endpoints(|e| e.port() != 9001), 1);
        t.close_all("shutdown");
        assert!(log.drain(Duration::from_secs(5)));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ended: Vec<(&str, &str)> = lines
            .iter()
            .map(|l| (l["client"].as_str().unwrap(), l["reason"].as_str().unwrap()))
            .collect();
        assert_eq!(
            ended,
            [
                ("192.0.2.1:1", "evicted"),
                ("192.0.2.1:2", "drained"),
                ("192.0.2.1:3", "shutdown")
            ],
            "{text}"
        );
        for l in &lines {
            assert_eq!(
                (l["kind"].as_str(), l["service"].as_str()),
                (Some("udp"), Some("l4/dns"))
            );
        }
        let one = &lines[0];
        assert_eq!(
            (one["bytes_in"].as_u64(), one["bytes_out"].as_u64()),
            (Some(5), Some(7)),
            "{text}"
        );
        assert_eq!(one["upstream_addr"], "127.0.0.1:9000");
        assert!(t.is_empty());
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
