//! The L4 part of the compile: which LoadBalancer Services are served, on
//! which address ([`allocation`], a pure function of the previous holdings),
//! the table of listeners with their endpoints ([`table`]), the clients
//! each admits ([`ranges`]) and the `/status` part ([`report`]). Gateways'
//! TCP, UDP and TLS listeners and their routes are [`gateway`]; what such
//! a listener forwards to (by weight, by SNI) is [`forward`].
//!
//! Nothing here binds a socket or writes a file: the previous holdings come
//! in as data and the new ones go out in the [`L4Compiled`] result; the
//! reload loop remembers them (`crate::loops::allocations`) and hands the
//! table to the listeners (`crate::plane::l4`).

pub mod allocation;
pub mod forward;
pub mod gateway;
pub mod pool;
pub mod ranges;
pub mod report;
pub mod runtime;
pub mod table;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use teapot_model::store::{NsName, Store};

pub use allocation::Holding;
pub use pool::{ListenerKey, Pool, Protocol};
pub use ranges::SourceRanges;
pub use report::L4Report;
pub use runtime::Runtime;
pub use table::{EdgeListener, HealthOptions, L4Table};

use crate::compile::bind::TenantHosts;
use crate::compile::upstream::Upstream;

/// The operator's L4 settings.
#[derive(Clone, Debug)]
pub struct L4Config {
    /// Off: no Service is served at L4 and no socket is opened.
    pub enabled: bool,
    pub pools: Vec<Pool>,
    /// The pool of Services in operator namespaces.
    pub default_pool: String,
    /// Listeners no Service may have: the proxy's own ports (added by
    /// `server::run` from the bound listeners) and `--l4-reserved-port`.
    pub reserved: Vec<allocation::Reserved>,
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
    /// Every Gateway of an operator namespace gets its own address, where
    /// all its listeners are served (`--gateway-own-addresses`;
    /// `compile::listeners::own_address`).
    pub gateway_own_addresses: bool,
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
            reserved: Vec::new(),
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
            gateway_own_addresses: false,
        }
    }
}

/// What the L4 compile needs besides the store: the operator's settings,
/// what each Service held after the last compile, and the listeners' bind
/// states (read when the report is rendered, never written here).
#[derive(Clone, Debug)]
pub struct L4Inputs {
    pub config: Arc<L4Config>,
    pub previous: Arc<BTreeMap<NsName, Holding>>,
    pub runtime: Arc<Runtime>,
}

/// The L4 result of one compile.
#[derive(Debug, Default)]
pub struct L4Compiled {
    pub table: Arc<L4Table>,
    /// What every allocated Service holds now: the next compile's
    /// `previous`.
    pub holdings: BTreeMap<NsName, Holding>,
}

/// Builds the L4 table and report of `store`. `resolve(namespace, service,
/// port, port name, secured)` is the compile's resolver; `secured`: as the
/// BackendTLSPolicy on that port asks (a Terminate TLS listener's
/// backends).
///
/// `hosts` decides which TLSRoute hostnames a tenant may route, by the
/// rule of its Ingress hosts (custom domains once DNS proves them), and
/// records the custom ones for the prover.
pub(crate) fn compile<'s>(
    inputs: &L4Inputs,
    store: &'s Store,
    hosts: &mut TenantHosts<'_, '_>,
    generation: u64,
    resolve: impl FnMut(&'s str, &'s str, i32, &'s str, bool) -> Arc<Upstream>,
) -> Option<(L4Compiled, L4Report)> {
    if !inputs.config.enabled {
        return None;
    }
    let (table, report, holdings) = table::build(
        &inputs.config,
        &inputs.previous,
        &inputs.runtime,
        store,
        hosts,
        generation,
        resolve,
    );
    Some((
        L4Compiled {
            table: Arc::new(table),
            holdings,
        },
        report,
    ))
}
