//! `teapot proxy` flags for the counts the fleet's replicas share
//! (`global-rate-limit`, crate docs/operations.md "Fleet counts").

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use teapot_proxy::loops::fleet_exchange::FleetConfig;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct FleetArgs {
    /// The other replicas' exchange addresses, IP:PORT (comma-separated or repeated): global-rate-limit's counts are sent to them and taken from them only. Without it each replica enforces every global-rate-limit alone.
    #[arg(
        long = "fleet-peers",
        value_delimiter = ',',
        requires = "fleet_key_file"
    )]
    fleet_peers: Vec<SocketAddr>,
    /// This replica's UDP address for the exchange with --fleet-peers.
    #[arg(long, default_value = "0.0.0.0:7946")]
    fleet_listen: SocketAddr,
    /// File holding the fleet's key (at least 16 bytes, the same on every replica): every datagram of the exchange is authenticated with HMAC-SHA256 under it; one that does not verify is dropped unread.
    #[arg(long)]
    fleet_key_file: Option<PathBuf>,
}

impl FleetArgs {
    /// The exchange's settings; `None` without peers.
    pub(crate) fn config(&self) -> anyhow::Result<Option<FleetConfig>> {
        let Some(path) = &self.fleet_key_file else {
            return Ok(None);
        };
        if self.fleet_peers.is_empty() {
            anyhow::bail!(
                "--fleet-key-file needs --fleet-peers: there is nobody to exchange counts with"
            );
        }
        let key =
            std::fs::read(path).with_context(|| format!("--fleet-key-file {}", path.display()))?;
        FleetConfig::new(self.fleet_listen, self.fleet_peers.clone(), &key)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("--fleet-peers/--fleet-key-file: {e}"))
    }
}
