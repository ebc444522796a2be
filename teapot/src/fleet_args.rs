//! `teapot proxy` flags for the counts the fleet's replicas share
//! (`global-rate-limit`, crate docs/operations.md "Fleet counts").

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;
use teapot_proxy::loops::fleet_exchange::FleetConfig;
use teapot_proxy::loops::fleet_peers::Discovery;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct FleetArgs {
    /// The other replicas' exchange addresses, IP:PORT (comma-separated or repeated): global-rate-limit's counts are sent to them and taken from them only. Without it (or --fleet-service) each replica enforces every global-rate-limit alone.
    #[arg(
        long = "fleet-peers",
        value_delimiter = ',',
        requires = "fleet_key_file"
    )]
    fleet_peers: Vec<SocketAddr>,
    /// With --kube, instead of --fleet-peers: NAMESPACE/NAME of the Service selecting the fleet's replicas; the peers are the ready addresses of its EndpointSlices (port named "fleet", else --fleet-listen's), this replica's own left out, at most 64, followed as they change.
    #[arg(
        long = "fleet-service",
        value_name = "NAMESPACE/NAME",
        conflicts_with = "fleet_peers",
        requires = "fleet_key_file",
        requires = "kube",
        value_parser = parse_service
    )]
    fleet_service: Option<(String, String)>,
    /// This replica's UDP address for the exchange with its peers (an IPv6 address bracketed or not: `fd00::1:7946`).
    #[arg(long, default_value = "0.0.0.0:7946", value_parser = crate::listen_addr::socket_addr)]
    fleet_listen: SocketAddr,
    /// File holding the fleet's key (at least 16 bytes, the same on every replica): every datagram of the exchange is authenticated with HMAC-SHA256 under it; one that does not verify is dropped unread.
    #[arg(long)]
    fleet_key_file: Option<PathBuf>,
    /// The status of a request refused by global-rate-limit (ingress-nginx's global-rate-limit-status-code): a 4xx or 5xx.
    #[arg(long, default_value_t = 429, value_parser = clap::value_parser!(u16).range(400..=599))]
    global_rate_limit_status_code: u16,
}

fn parse_service(value: &str) -> Result<(String, String), String> {
    Discovery::parse_service(value)
}

impl FleetArgs {
    /// The exchange's settings; `None` without peers.
    pub(crate) fn config(&self) -> anyhow::Result<Option<FleetConfig>> {
        let Some(path) = &self.fleet_key_file else {
            return Ok(None);
        };
        if self.fleet_peers.is_empty() && self.fleet_service.is_none() {
            anyhow::bail!(
                "--fleet-key-file needs --fleet-peers or --fleet-service: there is nobody to exchange counts with"
            );
        }
        let key =
            std::fs::read(path).with_context(|| format!("--fleet-key-file {}", path.display()))?;
        let config = match &self.fleet_service {
            Some((namespace, service)) => {
                let discovery = Discovery {
                    namespace: namespace.clone(),
                    service: service.clone(),
                    default_port: self.fleet_listen.port(),
                    own_pod: own_pod(),
                    own_addrs: own_addrs(),
                };
                FleetConfig::discovered(self.fleet_listen, discovery, &key)
                    .map_err(|e| anyhow::anyhow!("--fleet-service/--fleet-key-file: {e}"))?
            }
            None => FleetConfig::new(self.fleet_listen, self.fleet_peers.clone(), &key)
                .map_err(|e| anyhow::anyhow!("--fleet-peers/--fleet-key-file: {e}"))?,
        };
        Ok(Some(config))
    }

    /// `--global-rate-limit-status-code`.
    pub(crate) fn status_code(&self) -> u16 {
        self.global_rate_limit_status_code
    }
}

/// This replica's addresses as its Service's slices list them: the Pod's
/// (the chart's `POD_IPS` and `POD_IP`, from the downward API). The
/// exchange also skips its own socket address whatever the slices say.
fn own_addrs() -> Vec<IpAddr> {
    let mut own: Vec<IpAddr> = ["POD_IPS", "POD_IP"]
        .into_iter()
        .filter_map(|v| std::env::var(v).ok())
        .flat_map(|v| {
            v.split(',')
                .filter_map(|a| a.trim().parse::<IpAddr>().ok())
                .collect::<Vec<_>>()
        })
        .collect();
    own.sort_unstable();
    own.dedup();
    own
}

/// This replica's Pod (`POD_NAME`, else `HOSTNAME`), whose endpoint in
/// the Service's slices is its own.
fn own_pod() -> Option<String> {
    ["POD_NAME", "HOSTNAME"]
        .into_iter()
        .find_map(|v| std::env::var(v).ok().filter(|n| !n.is_empty()))
}
