//! Layer 4: TCP and UDP load balancing for Services of `type:
//! LoadBalancer` (issue #4; operator guide in `docs/l4.md`).
//!
//! The flow mirrors the HTTP path. The compile ([`crate::compile`]) calls
//! [`L4::compile`], which picks the Services teapot serves, gives each an
//! address from its pool ([`allocation`]: sticky, persisted, the same on
//! every replica), resolves every port's endpoints through the compile's
//! own resolver (so tenant address checks and endpoint health are the HTTP
//! path's) and publishes an immutable [`table::L4Table`]. The
//! [`manager`] task owns the sockets: it binds listeners that are new,
//! closes listeners whose Service is gone, and hands unchanged listeners
//! their new route through a `watch` channel, so new connections and flows
//! see endpoint changes at once and a re-compile never rebinds a socket.
//!
//! Layout:
//! - [`pool`]: address pools (`--l4-pool`), listener keys, protocols.
//! - [`allocation`]: address allocation and its state file.
//! - [`table`]: Store -> table of listeners, and the `/status` report.
//! - [`manager`]: listener reconciliation, bind retries, shutdown.
//! - [`tcp`]: accept, connect with retry, PROXY v2, half-close relay,
//!   idle and drain timeouts.
//! - [`udp`]: per-client flows with their own upstream socket, bounded
//!   flow table.
//! - [`health`]: active TCP checks feeding [`crate::upstream`] ejection.
//! - [`proxy_protocol`]: the PROXY v2 header.

pub mod allocation;
pub mod health;
pub mod manager;
pub mod pool;
pub mod proxy_protocol;
pub mod table;
pub mod tcp;
pub mod udp;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use tokio::sync::watch;

pub use allocation::Allocator;
pub use pool::{ListenerKey, Pool, Protocol};
pub use table::{HealthOptions, L4Report, L4Table};

use crate::store::Store;
use crate::tenancy::Tenancy;
use crate::upstream::Upstream;

/// The operator's L4 settings.
#[derive(Clone, Debug)]
pub struct L4Config {
    /// Off: no Service is served at L4 and no socket is opened.
    pub enabled: bool,
    pub pools: Vec<Pool>,
    /// The pool of Services in operator namespaces.
    pub default_pool: String,
    /// Where allocations survive restarts (manifests mode). `None` keeps
    /// them in memory only.
    pub state_file: Option<PathBuf>,
    /// Serve `LoadBalancer` Services without `loadBalancerClass` too.
    pub serve_classless: bool,
    pub connect_timeout: Duration,
    /// Endpoints tried per TCP connection before the client is closed.
    pub connect_attempts: u32,
    pub tcp_idle_timeout: Duration,
    pub udp_idle_timeout: Duration,
    /// How long connections to a removed endpoint (or of a removed
    /// listener) may continue.
    pub drain_timeout: Duration,
    /// Concurrent TCP connections per listener; more wait in the backlog.
    pub max_connections: usize,
    /// UDP flows per listener; a new flow beyond it evicts the oldest idle.
    pub udp_max_flows: usize,
    pub health: HealthOptions,
    /// How often listeners that failed to bind are retried.
    pub bind_retry: Duration,
}

impl Default for L4Config {
    fn default() -> Self {
        L4Config {
            enabled: true,
            pools: vec![Pool {
                name: "default".into(),
                addresses: vec![std::net::Ipv4Addr::LOCALHOST.into()],
            }],
            default_pool: "default".into(),
            state_file: None,
            serve_classless: true,
            connect_timeout: Duration::from_secs(3),
            connect_attempts: 3,
            tcp_idle_timeout: Duration::from_secs(3600),
            udp_idle_timeout: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            udp_max_flows: 10_000,
            health: HealthOptions::default(),
            bind_retry: Duration::from_secs(5),
        }
    }
}

/// L4 metrics, registered on the proxy's registry.
#[derive(Clone, Debug)]
pub struct L4Metrics {
    pub tcp_connections_total: IntCounter,
    pub tcp_connections_active: IntGauge,
    pub tcp_connect_failures_total: IntCounter,
    pub udp_flows_total: IntCounter,
    pub udp_flows_active: IntGauge,
    pub udp_flows_evicted_total: IntCounter,
    /// Client -> backend bytes.
    pub bytes_in: IntCounter,
    /// Backend -> client bytes.
    pub bytes_out: IntCounter,
    pub listeners: IntGauge,
    /// Sockets bound: stays put across re-compiles that keep a listener.
    pub binds_total: IntCounter,
    pub bind_failures: IntGauge,
    pub allocation_failures: IntGauge,
}

impl L4Metrics {
    pub fn register(registry: &Registry) -> Result<L4Metrics, prometheus::Error> {
        let bytes = IntCounterVec::new(
            Opts::new(
                "l4_bytes_total",
                "Bytes relayed at L4 (in: client to backend, out: backend to client)",
            ),
            &["direction"],
        )?;
        registry.register(Box::new(bytes.clone()))?;
        let m = L4Metrics {
            tcp_connections_total: IntCounter::new(
                "l4_tcp_connections_total",
                "TCP connections accepted on L4 listeners",
            )?,
            tcp_connections_active: IntGauge::new(
                "l4_tcp_connections_active",
                "TCP connections being relayed",
            )?,
            tcp_connect_failures_total: IntCounter::new(
                "l4_tcp_connect_failures_total",
                "Backend connects that failed (the endpoint is ejected for a while)",
            )?,
            udp_flows_total: IntCounter::new("l4_udp_flows_total", "UDP flows created")?,
            udp_flows_active: IntGauge::new("l4_udp_flows_active", "UDP flows in the flow tables")?,
            udp_flows_evicted_total: IntCounter::new(
                "l4_udp_flows_evicted_total",
                "UDP flows evicted because a flow table was full",
            )?,
            bytes_in: bytes.with_label_values(&["in"]),
            bytes_out: bytes.with_label_values(&["out"]),
            listeners: IntGauge::new("l4_listeners", "L4 listeners bound")?,
            binds_total: IntCounter::new(
                "l4_listener_binds_total",
                "L4 listener sockets bound (unchanged listeners are never rebound)",
            )?,
            bind_failures: IntGauge::new(
                "l4_bind_failures",
                "L4 listeners that could not be bound (retried)",
            )?,
            allocation_failures: IntGauge::new(
                "l4_allocation_failures",
                "LoadBalancer Services without an address (pool full, address taken, no pool)",
            )?,
        };
        for c in [
            &m.tcp_connections_total,
            &m.tcp_connect_failures_total,
            &m.udp_flows_total,
            &m.udp_flows_evicted_total,
            &m.binds_total,
        ] {
            registry.register(Box::new(c.clone()))?;
        }
        for g in [
            &m.tcp_connections_active,
            &m.udp_flows_active,
            &m.listeners,
            &m.bind_failures,
            &m.allocation_failures,
        ] {
            registry.register(Box::new(g.clone()))?;
        }
        Ok(m)
    }
}

/// Bind state of each listener, shared by the manager (writer) and the
/// `/status` report (reader).
#[derive(Debug, Default)]
pub struct Runtime {
    states: Mutex<HashMap<ListenerKey, Result<(), String>>>,
    applied: std::sync::atomic::AtomicU64,
}

impl Runtime {
    /// Generation of the last table the manager applied.
    pub fn applied(&self) -> u64 {
        self.applied.load(std::sync::atomic::Ordering::Acquire)
    }

    /// `listening`, `pending` (not bound yet) or `bind failed: …`.
    pub fn state(&self, key: &ListenerKey) -> String {
        match self.states.lock().get(key) {
            Some(Ok(())) => "listening".into(),
            Some(Err(e)) => format!("bind failed: {e}"),
            None => "pending".into(),
        }
    }

    fn set(&self, key: ListenerKey, state: Result<(), String>) {
        self.states.lock().insert(key, state);
    }

    fn remove(&self, key: &ListenerKey) {
        self.states.lock().remove(key);
    }
}

/// The L4 side of one proxy: allocation memory, the latest table, the bind
/// state. Shared by the compile (through [`crate::compile::CompileOptions`])
/// and the manager task.
#[derive(Debug)]
pub struct L4 {
    config: L4Config,
    allocator: Allocator,
    runtime: Arc<Runtime>,
    tables: watch::Sender<Arc<L4Table>>,
    metrics: L4Metrics,
    /// Refusals already logged, so each is logged once, not per compile.
    refusals: Mutex<HashMap<crate::store::NsName, String>>,
}

impl L4 {
    /// Reads the state file; fails when it exists but is unusable.
    pub fn new(config: L4Config, metrics: L4Metrics) -> Result<Arc<L4>, crate::Error> {
        let allocator = Allocator::new(config.pools.clone(), config.state_file.clone())?;
        let (tables, _) = watch::channel(Arc::new(L4Table::default()));
        Ok(Arc::new(L4 {
            config,
            allocator,
            runtime: Arc::new(Runtime::default()),
            tables,
            metrics,
            refusals: Mutex::new(HashMap::new()),
        }))
    }

    pub fn config(&self) -> &L4Config {
        &self.config
    }

    /// Builds and publishes the L4 table of `store`; returns the report.
    /// `resolve(namespace, service, port, port name)` is the compile's
    /// resolver.
    pub fn compile<'s>(
        &self,
        store: &'s Store,
        tenancy: &Tenancy<'_>,
        generation: u64,
        resolve: impl FnMut(&'s str, &'s str, i32, &'s str) -> Arc<Upstream>,
    ) -> Option<L4Report> {
        if !self.config.enabled {
            return None;
        }
        let (table, report) = table::build(
            &self.config,
            &self.allocator,
            &self.runtime,
            store,
            tenancy,
            generation,
            resolve,
        );
        self.log_refusals(&report);
        self.tables.send_replace(Arc::new(table));
        Some(report)
    }

    /// Logs (as the manifests-mode stand-in for an Event) each Service
    /// that newly lost or failed to get an address.
    fn log_refusals(&self, report: &L4Report) {
        let now: HashMap<crate::store::NsName, String> = report
            .services
            .iter()
            .filter(|s| s.address.is_none())
            .filter_map(|s| {
                let c = s.conditions.iter().find(|c| c.type_ == "Allocated")?;
                Some((
                    crate::store::NsName::new(s.namespace.clone(), s.name.clone()),
                    format!("{}: {}", c.reason, c.message),
                ))
            })
            .collect();
        self.metrics.allocation_failures.set(now.len() as i64);
        let mut seen = self.refusals.lock();
        for (service, why) in &now {
            if seen.get(service) != Some(why) {
                tracing::warn!(%service, "LoadBalancer Service gets no address: {why}");
            }
        }
        *seen = now;
    }

    /// Starts the manager: listeners follow every published table until
    /// [`manager::L4Service::shutdown`].
    pub fn spawn(self: &Arc<Self>) -> manager::L4Service {
        manager::L4Service::spawn(self.clone(), self.tables.subscribe())
    }
}
