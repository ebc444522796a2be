//! `teapot proxy` flags of L4 load balancing (docs/l4.md).

use std::path::PathBuf;
use std::time::Duration;

use teapot_proxy::compile::l4::allocation::Reserved;
use teapot_proxy::compile::l4::{HealthOptions, L4Config, Pool};

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct L4Args {
    /// Serve TCP/UDP for LoadBalancer Services (false: open no L4 listener).
    #[arg(long = "l4", default_value_t = true, action = clap::ArgAction::Set)]
    enabled: bool,
    /// Address pool, NAME=ADDR[,ADDR…|CIDR] (repeatable). Default: default=127.0.0.1.
    #[arg(long = "l4-pool")]
    pools: Vec<Pool>,
    /// A listener no Service may have on a pool address, PORT[/TCP|UDP] or ADDR:PORT[/TCP|UDP] (repeatable); the proxy's own HTTP, HTTPS and admin listeners are always reserved.
    #[arg(long = "l4-reserved-port")]
    reserved: Vec<Reserved>,
    /// Pool of LoadBalancer Services in namespaces no Tenant owns.
    #[arg(long, default_value = "default")]
    l4_default_pool: String,
    /// File that keeps address allocations across restarts ("off": memory only). Default: teapot-l4-state.json with --manifests; off with --kube, where each Service's status is the state.
    #[arg(long)]
    l4_state: Option<String>,
    /// Also serve LoadBalancer Services without spec.loadBalancerClass. Default: true with --manifests, false with --kube.
    #[arg(long, action = clap::ArgAction::Set)]
    l4_serve_classless: Option<bool>,
    /// Backend connect timeout, milliseconds; the next endpoint is tried after it.
    #[arg(long, default_value_t = 3000)]
    l4_connect_timeout_ms: u64,
    /// Endpoints tried per TCP connection.
    #[arg(long, default_value_t = 3)]
    l4_connect_attempts: u32,
    /// Seconds a TCP connection may be idle (teapot.dev/tcp-idle-timeout overrides).
    #[arg(long, default_value_t = 3600)]
    l4_tcp_idle_timeout: u64,
    /// Seconds a UDP flow may be idle (teapot.dev/udp-idle-timeout overrides).
    #[arg(long, default_value_t = 60)]
    l4_udp_idle_timeout: u64,
    /// Seconds connections to a removed endpoint or listener may continue.
    #[arg(long, default_value_t = 30)]
    l4_drain_timeout: u64,
    /// Concurrent TCP connections per listener (over every event loop); more wait in the backlog.
    #[arg(long, default_value_t = 10_000)]
    l4_max_connections: usize,
    /// UDP flows per listener; beyond it the flow idle longest is evicted.
    #[arg(long, default_value_t = 10_000)]
    l4_udp_max_flows: usize,
    /// Default health-check interval, milliseconds (teapot.dev/health-check-interval overrides).
    #[arg(long, default_value_t = 1000)]
    l4_health_interval_ms: u64,
    /// Give every Gateway of an operator namespace its own address from --l4-default-pool, where all its listeners (HTTP and HTTPS on any port) are served, told apart by address rather than by hostname on the shared listeners.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    gateway_own_addresses: bool,
}

impl L4Args {
    /// `kube`: the proxy runs with `--kube`, where the LB cluster is shared
    /// with other load balancers (only `teapot.dev/lb` Services are ours)
    /// and the Service status keeps the allocation.
    pub(crate) fn config(&self, kube: bool) -> L4Config {
        let state =
            self.l4_state
                .as_deref()
                .unwrap_or(if kube { "off" } else { "teapot-l4-state.json" });
        let defaults = L4Config::default();
        L4Config {
            enabled: self.enabled,
            pools: if self.pools.is_empty() {
                defaults.pools
            } else {
                self.pools.clone()
            },
            default_pool: self.l4_default_pool.clone(),
            reserved: self.reserved.clone(),
            state_file: (state != "off").then(|| PathBuf::from(state)),
            serve_classless: self.l4_serve_classless.unwrap_or(!kube),
            connect_timeout: Duration::from_millis(self.l4_connect_timeout_ms),
            connect_attempts: self.l4_connect_attempts.max(1),
            tcp_idle_timeout: Duration::from_secs(self.l4_tcp_idle_timeout.max(1)),
            udp_idle_timeout: Duration::from_secs(self.l4_udp_idle_timeout.max(1)),
            drain_timeout: Duration::from_secs(self.l4_drain_timeout),
            max_connections: self.l4_max_connections.max(1),
            udp_max_flows: self.l4_udp_max_flows.max(1),
            health: HealthOptions {
                interval: Duration::from_millis(self.l4_health_interval_ms.max(100)),
                ..HealthOptions::default()
            },
            gateway_own_addresses: self.gateway_own_addresses,
            ..defaults
        }
    }
}
