//! `teapot proxy` flags of BGP announcement (docs/announce.md).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use teapot_announce::{PeerConfig, SpeakerConfig};
use teapot_proxy::loops::announce::AnnounceConfig;

/// Host routes one `--announce` CIDR may expand to: a typo such as /8
/// must not announce sixteen million routes.
const MAX_ANNOUNCED_PER_CIDR: usize = 4096;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct AnnounceArgs {
    /// BGP peer that receives this replica's addresses as host routes, ADDR,ASN[,port=N][,hold=S][,keepalive=S][,multihop=TTL][,source=ADDR][,next-hop=ADDR][,local-pref=N] (repeatable).
    #[arg(long = "bgp-peer")]
    bgp_peers: Vec<PeerConfig>,
    /// This replica's AS number (required with --bgp-peer).
    #[arg(long)]
    bgp_asn: Option<u32>,
    /// BGP identifier. Default: each session's local IPv4 address.
    #[arg(long)]
    bgp_router_id: Option<Ipv4Addr>,
    /// Seconds between the GRACEFUL_SHUTDOWN announcement and the withdrawal on SIGTERM.
    #[arg(long, default_value_t = 5)]
    bgp_graceful_wait: u64,
    /// The fleet's own address, ADDR or CIDR (each host address), announced while ready (repeatable).
    #[arg(long = "announce", value_parser = addr_or_cidr)]
    announce: Vec<ipnet::IpNet>,
    /// Also announce every address an L4 Service holds.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    announce_l4: bool,
}

/// `203.0.113.10` is `203.0.113.10/32`.
fn addr_or_cidr(text: &str) -> Result<ipnet::IpNet, String> {
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("`{text}` is neither an IP address nor a CIDR"))
}

impl AnnounceArgs {
    /// `None` without `--bgp-peer`; a message naming the flag when the
    /// settings cannot work.
    pub(crate) fn config(&self) -> Result<Option<AnnounceConfig>, String> {
        if self.bgp_peers.is_empty() {
            if !self.announce.is_empty() {
                return Err("--announce needs at least one --bgp-peer".into());
            }
            return Ok(None);
        }
        let asn = self
            .bgp_asn
            .ok_or("--bgp-peer needs --bgp-asn (this replica's AS number)")?;
        let mut speaker = SpeakerConfig::new(asn, self.bgp_peers.clone());
        speaker.router_id = self.bgp_router_id;
        speaker.graceful_shutdown_wait = Duration::from_secs(self.bgp_graceful_wait);
        speaker.validate().map_err(|e| format!("--bgp-peer: {e}"))?;
        let mut addresses = BTreeSet::new();
        for net in &self.announce {
            let before = addresses.len();
            let single = match net {
                ipnet::IpNet::V4(n) => n.prefix_len() == 32,
                ipnet::IpNet::V6(n) => n.prefix_len() == 128,
            };
            let hosts: Box<dyn Iterator<Item = IpAddr>> = if single {
                Box::new(std::iter::once(net.addr()))
            } else {
                Box::new(net.hosts())
            };
            for addr in hosts.take(MAX_ANNOUNCED_PER_CIDR + 1) {
                addresses.insert(addr);
            }
            if addresses.len() - before > MAX_ANNOUNCED_PER_CIDR {
                return Err(format!(
                    "--announce {net}: more than {MAX_ANNOUNCED_PER_CIDR} addresses; announce a smaller range"
                ));
            }
        }
        Ok(Some(AnnounceConfig {
            speaker,
            addresses,
            l4: self.announce_l4,
        }))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        announce: AnnounceArgs,
    }

    fn config(args: &[&str]) -> Result<Option<AnnounceConfig>, String> {
        let cli = Cli::try_parse_from(std::iter::once("teapot").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.announce.config()
    }

    #[test]
    fn peers_asn_and_addresses() {
        let c = config(&[
            "--bgp-peer",
            "192.0.2.1,64500,hold=3",
            "--bgp-asn",
            "64501",
            "--announce",
            "203.0.113.8/30",
            "--announce",
            "2001:db8::10",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.speaker.local_asn, 64501);
        assert_eq!(c.speaker.peers[0].hold_time, Duration::from_secs(3));
        let addrs: Vec<String> = c.addresses.iter().map(|a| a.to_string()).collect();
        assert_eq!(addrs, ["203.0.113.9", "203.0.113.10", "2001:db8::10"]);
        assert!(c.l4);
        assert!(config(&[]).unwrap().is_none());
    }

    #[test]
    fn bad_settings_name_the_flag() {
        let cases: [(&[&str], &str); 4] = [
            (&["--bgp-peer", "192.0.2.1,64500"], "--bgp-asn"),
            (&["--announce", "203.0.113.10"], "--bgp-peer"),
            (
                &["--bgp-peer", "192.0.2.1,64500,hold=1", "--bgp-asn", "64501"],
                "hold",
            ),
            (
                &[
                    "--bgp-peer",
                    "192.0.2.1,64500",
                    "--bgp-asn",
                    "64501",
                    "--announce",
                    "203.0.0.0/8",
                ],
                "--announce 203.0.0.0/8",
            ),
        ];
        for (args, needle) in cases {
            let err = config(args).unwrap_err();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }
}
