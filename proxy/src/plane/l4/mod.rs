//! Layer 4: TCP and UDP load balancing for Services of `type:
//! LoadBalancer` (operator guide in `docs/l4.md`).
//!
//! The flow mirrors the HTTP path. The compile ([`crate::compile::l4`])
//! picks the Services teapot serves, gives each an address from its pool
//! (sticky, the same on every replica), resolves every port's endpoints
//! through the compile's own resolver (so tenant address checks and
//! endpoint health are the HTTP path's) and builds an immutable
//! [`L4Table`]. The reload loop hands it to [`L4::publish`]. The
//! [`manager`] task owns the sockets: it binds listeners that are new,
//! closes listeners whose Service is gone, and hands unchanged listeners
//! their new route through a `watch` channel, so new connections and flows
//! see endpoint changes at once and a re-compile never rebinds a socket.
//!
//! Layout:
//! - [`manager`]: listener reconciliation, bind retries, shutdown.
//! - [`tcp`]: the TCP data path on event loops of its own (one per serving
//!   thread): accept (and the source-range check), connect with retry,
//!   PROXY v2, half-close relay, idle and drain timeouts.
//! - [`udp`]: per-client flows with their own upstream socket, bounded
//!   flow table.
//! - [`health`]: active TCP checks feeding [`crate::compile::upstream`] ejection.
//! - [`proxy_protocol`]: the PROXY v2 header.
//! - [`sni`]: the server name of a ClientHello, for TLS passthrough
//!   listeners of Gateways (the route is chosen by it).
//! - [`terminate`]: sockets with a Terminate TLS listener (and any
//!   passthrough ones beside it, by SNI), on the runtime's tasks: TLS
//!   ends there, the cleartext goes to the backends.

pub mod context;
pub mod health;
pub mod manager;
pub mod proxy_protocol;
pub mod sni;
pub mod tcp;
pub mod terminate;
pub mod udp;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use tokio::sync::watch;

use crate::compile::l4::{L4Config, L4Inputs, L4Report, L4Table, Runtime};
use teapot_model::store::NsName;

/// L4 metrics, registered on the proxy's registry.
#[derive(Clone, Debug)]
pub struct L4Metrics {
    pub tcp_connections_total: IntCounter,
    pub tcp_connections_active: IntGauge,
    pub tcp_connect_failures_total: IntCounter,
    /// Connections to Terminate TLS listeners closed because their TLS
    /// handshake failed or did not end in time.
    pub tls_handshake_failures_total: IntCounter,
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
    /// TCP connections, connect failures and bytes per Service
    /// (`namespace/name`): resolved once per connection, not per read.
    pub service_connections: IntCounterVec,
    pub service_connect_failures: IntCounterVec,
    /// TCP and UDP bytes by Service and direction.
    pub service_bytes: IntCounterVec,
    pub service_udp_flows: IntCounterVec,
    /// Clients outside a Service's `spec.loadBalancerSourceRanges`, by
    /// Service and protocol: TCP connections reset at accept, UDP
    /// datagrams dropped.
    pub source_range_refusals: IntCounterVec,
    /// One line per TCP connection (crate::plane::access_log); inert when
    /// the log is off.
    pub access_log: crate::plane::access_log::AccessLog,
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
        let service_connections = IntCounterVec::new(
            Opts::new(
                "l4_service_connections_total",
                "TCP connections accepted, by Service (namespace/name)",
            ),
            &["service"],
        )?;
        let service_connect_failures = IntCounterVec::new(
            Opts::new(
                "l4_service_connect_failures_total",
                "TCP connections no backend endpoint accepted, by Service",
            ),
            &["service"],
        )?;
        let service_bytes = IntCounterVec::new(
            Opts::new(
                "l4_service_bytes_total",
                "TCP and UDP bytes relayed by Service and direction (in: client to backend)",
            ),
            &["service", "direction"],
        )?;
        let service_udp_flows = IntCounterVec::new(
            Opts::new(
                "l4_service_udp_flows_total",
                "UDP flows created, by Service",
            ),
            &["service"],
        )?;
        let source_range_refusals = IntCounterVec::new(
            Opts::new(
                "l4_source_range_refusals_total",
                "TCP connections reset at accept and UDP datagrams dropped because the client is outside the Service's loadBalancerSourceRanges",
            ),
            &["service", "protocol"],
        )?;
        for v in [
            &source_range_refusals,
            &service_connections,
            &service_connect_failures,
            &service_bytes,
            &service_udp_flows,
        ] {
            registry.register(Box::new(v.clone()))?;
        }
        let m = L4Metrics {
            service_connections,
            service_connect_failures,
            service_bytes,
            service_udp_flows,
            source_range_refusals,
            access_log: Default::default(),
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
            tls_handshake_failures_total: IntCounter::new(
                "l4_tls_handshake_failures_total",
                "Connections to Terminate TLS listeners closed because the TLS handshake failed or timed out",
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
                "LoadBalancer Services and Gateways with L4 listeners without an address (pool full, address taken, no pool)",
            )?,
        };
        for c in [
            &m.tcp_connections_total,
            &m.tcp_connect_failures_total,
            &m.tls_handshake_failures_total,
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

/// The L4 side of one proxy: the latest table, the bind state, the
/// listeners' metrics. The reload loop publishes each compiled table here;
/// the manager task follows it.
#[derive(Debug)]
pub struct L4 {
    config: Arc<L4Config>,
    runtime: Arc<Runtime>,
    tables: watch::Sender<Arc<L4Table>>,
    metrics: L4Metrics,
    /// Refusals already logged, so each is logged once, not per compile.
    refusals: Mutex<HashMap<NsName, String>>,
}

impl L4 {
    pub fn new(config: L4Config, metrics: L4Metrics) -> Arc<L4> {
        let (tables, _) = watch::channel(Arc::new(L4Table::default()));
        Arc::new(L4 {
            config: Arc::new(config),
            runtime: Arc::new(Runtime::default()),
            tables,
            metrics,
            refusals: Mutex::new(HashMap::new()),
        })
    }

    pub fn config(&self) -> &L4Config {
        &self.config
    }

    /// The compile's L4 input, with `previous` holdings from the loop that
    /// remembers them.
    pub fn inputs(
        &self,
        previous: Arc<std::collections::BTreeMap<NsName, crate::compile::l4::Holding>>,
    ) -> L4Inputs {
        L4Inputs {
            config: self.config.clone(),
            previous,
            runtime: self.runtime.clone(),
        }
    }

    /// Hands a compiled table to the listeners, and logs refusals.
    pub fn publish(&self, table: Arc<L4Table>, report: Option<&L4Report>) {
        if let Some(report) = report {
            self.log_refusals(report);
        }
        self.tables.send_replace(table);
    }

    /// Logs (as the manifests-mode stand-in for an Event) each Service or
    /// Gateway that newly lost or failed to get an address.
    fn log_refusals(&self, report: &L4Report) {
        let gateways = report
            .gateways
            .iter()
            .filter(|g| g.address.is_none())
            .filter_map(|g| {
                let c = g.conditions.iter().find(|c| c.type_ == "Programmed")?;
                let id = NsName::new(g.namespace.clone(), g.name.clone());
                Some((
                    crate::compile::l4::allocation::holder_key(&id),
                    c.message.clone(),
                ))
            });
        let now: HashMap<NsName, String> = report
            .services
            .iter()
            .filter(|s| s.address.is_none())
            .filter_map(|s| {
                let c = s.conditions.iter().find(|c| c.type_ == "Allocated")?;
                Some((
                    NsName::new(s.namespace.clone(), s.name.clone()),
                    format!("{}: {}", c.reason, c.message),
                ))
            })
            .chain(gateways)
            .collect();
        self.metrics.allocation_failures.set(now.len() as i64);
        let mut seen = self.refusals.lock();
        for (holder, why) in &now {
            if seen.get(holder) == Some(why) {
                continue;
            }
            match crate::compile::l4::allocation::gateway_of(holder) {
                Some(gateway) => tracing::warn!(%gateway,
                    "Gateway gets no address for its TCP, UDP and TLS listeners: {why}"),
                None => {
                    tracing::warn!(service = %holder, "LoadBalancer Service gets no address: {why}")
                }
            }
        }
        *seen = now;
    }

    /// Starts the manager: listeners follow every published table until
    /// [`manager::L4Service::shutdown`]. TCP connections are served by
    /// `threads` event loops of their own (`event_loop`), one per serving
    /// thread.
    /// `edge` serves the HTTP and HTTPS listeners of Gateways with their
    /// own address (`None`: they are not bound, and say why).
    pub fn spawn(
        self: &Arc<Self>,
        threads: usize,
        edge: Option<manager::EdgeServing>,
    ) -> std::io::Result<manager::L4Service> {
        manager::L4Service::spawn(self.clone(), self.tables.subscribe(), threads, edge)
    }
}
