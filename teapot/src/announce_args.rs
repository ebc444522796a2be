//! `teapot proxy` flags of announcement, BGP and L2, and of the pools
//! that say which address goes which way (docs/announce.md).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use teapot_announce::{PeerConfig, SpeakerConfig};
use teapot_proxy::loops::announce::config::{AnnounceConfig, L2Options};
use teapot_proxy::loops::announce::pools::{AnnouncePool, Mode, check_overlap};

/// Host routes one `--announce` CIDR may expand to: a typo such as /8
/// must not announce sixteen million routes.
const MAX_ANNOUNCED_PER_CIDR: usize = 4096;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct AnnounceArgs {
    /// BGP peer that receives this replica's addresses as host routes, ADDR,ASN[,port=N][,hold=S][,keepalive=S][,multihop=TTL][,source=ADDR][,next-hop=ADDR][,local-pref=N][,bfd=MSxMULT][,password-file=PATH][,passive=true] (repeatable; password-file holds the TCP-MD5 password; passive: the router connects, to --bgp-listen-port).
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
    /// Offer BGP graceful restart (RFC 4724) with this restart time in seconds (1-4095; 120 is usual): a router that loses the session without a NOTIFICATION (the replica's process killed or crashed, its host up) keeps this replica's routes that long, until it is back and has announced them again. Off by default: until then the router keeps sending new connections to a replica that may not come back.
    #[arg(long)]
    bgp_graceful_restart_time: Option<u64>,
    /// The port BGP peers with passive=true connect to.
    #[arg(long, default_value_t = teapot_announce::peer::BGP_PORT)]
    bgp_listen_port: u16,
    /// The fleet's own address, ADDR or CIDR (each host address), announced while ready (repeatable).
    #[arg(long = "announce", value_parser = addr_or_cidr)]
    announce: Vec<ipnet::IpNet>,
    /// Also announce every address an L4 Service holds.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    announce_l4: bool,
    /// Addresses announced one way, NAME=ADDR|CIDR[,ADDR|CIDR...],mode=l2|bgp[,interface=IF][,subnet=CIDR][,node-label=K=V...] (repeatable); an address in no pool is not announced.
    #[arg(long = "announce-pool", value_parser = pool)]
    announce_pools: Vec<AnnouncePool>,
    /// L2 mode: the interface facing the clients' segment (the default of an l2 pool's interface=; without --announce-pool, every address goes by L2 on it).
    #[arg(long)]
    l2_interface: Option<String>,
    /// L2 mode: seconds between renewals of this replica's announcer Lease, fractions allowed (default 1; 0.5 with --l2-bfd off).
    #[arg(long)]
    l2_renew: Option<f64>,
    /// L2 mode: seconds without a renewal after which the others count this replica gone, fractions allowed (default 2; 1.5 with --l2-bfd off, so a dead replica's addresses move within 2 s).
    #[arg(long)]
    l2_lease: Option<f64>,
    /// L2 mode: BFD with the other replicas, INTERVALxMULT in milliseconds, so one that fails is counted gone within INTERVAL*MULT instead of --l2-lease; `off`: by the Lease alone.
    #[arg(long, default_value = "100x3")]
    l2_bfd: String,
    /// L2 mode: the UDP port the replicas' BFD uses (not 3784, a node's own BFD daemon's).
    #[arg(long, default_value_t = teapot_proxy::loops::announce::peer_liveness::DEFAULT_PORT)]
    l2_bfd_port: u16,
    /// The Node this replica runs on, for node-label= of --announce-pool (kube mode).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
}

/// `--announce-pool NAME=ADDR|CIDR[,...],mode=l2|bgp[,key=value...]`: the
/// `--l4-pool` list with `--bgp-peer`'s keys after it.
fn pool(text: &str) -> Result<AnnouncePool, String> {
    let (name, rest) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}`: expected NAME=ADDR|CIDR[,...],mode=l2|bgp"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("`{text}`: the pool needs a name"));
    }
    let bad = |reason: String| format!("pool {name}: {reason}");
    let mut pool = AnnouncePool {
        name: name.to_string(),
        origin: format!("--announce-pool {name}"),
        ranges: Vec::new(),
        mode: Mode::Bgp,
        interface: None,
        subnet: None,
        node_labels: Vec::new(),
    };
    let mut mode = None;
    for part in rest.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = part.split_once('=') else {
            pool.ranges.push(addr_or_cidr(part).map_err(bad)?);
            continue;
        };
        match key {
            "mode" => {
                mode = Some(match value {
                    "l2" => Mode::L2,
                    "bgp" => Mode::Bgp,
                    _ => return Err(bad(format!("mode `{value}`: l2 or bgp"))),
                })
            }
            "interface" => pool.interface = Some(value.to_string()),
            "subnet" => {
                pool.subnet = Some(addr_or_cidr(value).map_err(|e| bad(format!("subnet: {e}")))?)
            }
            "node-label" => {
                let (k, v) = value
                    .split_once('=')
                    .ok_or_else(|| bad(format!("node-label `{value}`: expected KEY=VALUE")))?;
                pool.node_labels.push((k.to_string(), v.to_string()));
            }
            _ => {
                return Err(bad(format!(
                    "unknown key `{key}` (mode, interface, subnet, node-label)"
                )));
            }
        }
    }
    pool.mode = mode.ok_or_else(|| bad("needs mode=l2 or mode=bgp".into()))?;
    if pool.ranges.is_empty() {
        return Err(bad("needs at least one address or CIDR".into()));
    }
    if pool.mode == Mode::Bgp && pool.interface.is_some() {
        return Err(bad("interface= is for mode=l2".into()));
    }
    Ok(pool)
}

/// A pool of every address, for the flags without `--announce-pool`.
fn everything(origin: &str, mode: Mode, interface: Option<String>) -> AnnouncePool {
    AnnouncePool {
        name: "default".into(),
        origin: origin.into(),
        ranges: vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()],
        mode,
        interface,
        subnet: None,
        node_labels: Vec::new(),
    }
}

/// `203.0.113.10` is `203.0.113.10/32`.
fn addr_or_cidr(text: &str) -> Result<ipnet::IpNet, String> {
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("`{text}` is neither an IP address nor a CIDR"))
}

impl AnnounceArgs {
    /// `None` without anything to announce with; a message naming the
    /// flag when the settings cannot work.
    pub(crate) fn config(&self) -> Result<Option<AnnounceConfig>, String> {
        let pools = self.pools()?;
        if pools.is_empty() {
            if !self.announce.is_empty() {
                return Err(
                    "--announce needs --bgp-peer, --l2-interface or --announce-pool".into(),
                );
            }
            return Ok(None);
        }
        let speaker = if self.bgp_peers.is_empty() {
            None
        } else {
            let asn = self
                .bgp_asn
                .ok_or("--bgp-peer needs --bgp-asn (this replica's AS number)")?;
            let mut speaker = SpeakerConfig::new(asn, self.bgp_peers.clone());
            speaker.router_id = self.bgp_router_id;
            speaker.graceful_shutdown_wait = Duration::from_secs(self.bgp_graceful_wait);
            speaker.graceful_restart = self.bgp_graceful_restart_time.map(Duration::from_secs);
            speaker.listen_port = self.bgp_listen_port;
            if let Some(time) = self.bgp_graceful_restart_time {
                let max = teapot_announce::wire::MAX_RESTART_TIME_SECS;
                if time == 0 || time > u64::from(max) {
                    return Err(format!(
                        "--bgp-graceful-restart-time: {time} s is not between 1 and {max} (12 bits in the capability); leave it out to offer no graceful restart"
                    ));
                }
            }
            speaker.validate().map_err(|e| format!("--bgp-peer: {e}"))?;
            Some(speaker)
        };
        let l2_bfd = match self.l2_bfd.as_str() {
            "off" => None,
            value => Some(
                teapot_announce::bfd::Timing::parse(value).map_err(|e| format!("--l2-bfd: {e}"))?,
            ),
        };
        let (renew, lease) = teapot_proxy::loops::announce::membership::lease_timing(
            l2_bfd.is_some(),
            self.l2_renew,
            self.l2_lease,
        )?;
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
            pools,
            l2: L2Options {
                renew_every: renew,
                lease_duration: lease,
                bfd: l2_bfd,
                bfd_port: self.l2_bfd_port,
                ..L2Options::default()
            },
            node_name: self.node_name.clone().filter(|n| !n.is_empty()),
        }))
    }

    /// The pools, or without `--announce-pool` one pool of everything in
    /// the one mode configured; checked: modes have what they need, no
    /// two pools share an address.
    fn pools(&self) -> Result<Vec<AnnouncePool>, String> {
        let bgp = !self.bgp_peers.is_empty();
        if self.announce_pools.is_empty() {
            return match (bgp, &self.l2_interface) {
                (true, Some(_)) => Err(
                    "--bgp-peer and --l2-interface together need --announce-pool to say which addresses go which way".into(),
                ),
                (true, None) => Ok(vec![everything("--bgp-peer", Mode::Bgp, None)]),
                (false, Some(interface)) => Ok(vec![everything(
                    "--l2-interface",
                    Mode::L2,
                    Some(interface.clone()),
                )]),
                (false, None) => Ok(Vec::new()),
            };
        }
        let mut pools = self.announce_pools.clone();
        for pool in &mut pools {
            match pool.mode {
                Mode::Bgp if !bgp => {
                    return Err(format!("{}: mode=bgp needs --bgp-peer", pool.origin));
                }
                Mode::L2 if pool.interface.is_none() => {
                    pool.interface = Some(self.l2_interface.clone().ok_or_else(|| {
                        format!(
                            "{}: mode=l2 needs interface= or --l2-interface",
                            pool.origin
                        )
                    })?);
                }
                _ => {}
            }
        }
        check_overlap(&pools)?;
        Ok(pools)
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

    /// A BGP peer and an L2 interface: pools must say which goes where.
    const BGP_AND_L2: &[&str] = &[
        "--bgp-peer",
        "192.0.2.1,64500",
        "--bgp-asn",
        "64501",
        "--l2-interface",
        "lan",
    ];

    /// Each `args` refused with a message containing its needle.
    fn assert_refused(cases: &[(&[&str], &str)]) {
        for (args, needle) in cases {
            let err = config(args).unwrap_err();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
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
        assert_eq!(c.speaker.as_ref().unwrap().local_asn, 64501);
        assert_eq!(
            c.speaker.as_ref().unwrap().peers[0].hold_time,
            Duration::from_secs(3)
        );
        let addrs: Vec<String> = c.addresses.iter().map(|a| a.to_string()).collect();
        assert_eq!(addrs, ["203.0.113.9", "203.0.113.10", "2001:db8::10"]);
        assert!(c.l4);
        assert_eq!(c.pools.len(), 1, "without pools everything goes by BGP");
        assert_eq!(c.pools[0].mode, Mode::Bgp);
        assert_eq!(c.speaker.as_ref().unwrap().graceful_restart, None);
        assert!(config(&[]).unwrap().is_none());
    }

    #[test]
    fn graceful_restart_time_is_offered_when_given_and_bounded() {
        let bgp = ["--bgp-peer", "192.0.2.1,64500", "--bgp-asn", "64501"];
        let c = config(&[&bgp[..], &["--bgp-graceful-restart-time", "120"]].concat())
            .unwrap()
            .unwrap();
        assert_eq!(
            c.speaker.unwrap().graceful_restart,
            Some(Duration::from_secs(120))
        );
        for bad in ["0", "4096"] {
            let err =
                config(&[&bgp[..], &["--bgp-graceful-restart-time", bad]].concat()).unwrap_err();
            assert!(err.starts_with("--bgp-graceful-restart-time:"), "{err}");
        }
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
        assert_refused(&cases);
    }

    #[test]
    fn pools_with_modes_and_announcers() {
        let c = config(&[
            BGP_AND_L2,
            &[
            "--announce-pool",
            "office=192.0.2.96/28,192.0.2.200,mode=l2,subnet=192.0.2.0/24,node-label=zone=a",
            "--announce-pool",
            "wan=203.0.113.0/24,2001:db8::/64,mode=bgp",
            "--announce-pool",
            "dmz=198.51.100.10,mode=l2,interface=dmz0",
            ],
        ]
        .concat())
        .unwrap()
        .unwrap();
        let office = &c.pools[0];
        assert_eq!(office.mode, Mode::L2);
        assert_eq!(office.interface.as_deref(), Some("lan"));
        assert_eq!(office.ranges.len(), 2);
        assert_eq!(office.subnet, Some("192.0.2.0/24".parse().unwrap()));
        assert_eq!(office.node_labels, [("zone".to_string(), "a".to_string())]);
        assert_eq!(c.pools[1].mode, Mode::Bgp);
        assert_eq!(c.pools[2].interface.as_deref(), Some("dmz0"));
        assert_eq!(c.l2.renew_every, Duration::from_secs(1));
        assert_eq!(c.l2.lease_duration, Duration::from_secs(2));
        // L2 alone: everything on the interface.
        let c = config(&["--l2-interface", "lan", "--announce", "192.0.2.100"])
            .unwrap()
            .unwrap();
        assert!(c.speaker.is_none());
        assert_eq!(c.pools[0].interface.as_deref(), Some("lan"));
    }

    #[test]
    fn bad_pools_name_the_flag() {
        let cases: [(&[&str], &str); 8] = [
            (
                &[
                    "--l2-interface",
                    "lan",
                    "--announce-pool",
                    "a=192.0.2.0/24,mode=l2",
                    "--announce-pool",
                    "b=192.0.2.128/25,mode=l2",
                ],
                "--announce-pool a and --announce-pool b overlap",
            ),
            (
                &["--announce-pool", "a=192.0.2.0/24,mode=l2"],
                "--announce-pool a: mode=l2 needs interface= or --l2-interface",
            ),
            (
                &["--announce-pool", "a=192.0.2.0/24,mode=bgp"],
                "--announce-pool a: mode=bgp needs --bgp-peer",
            ),
            (
                &["--announce-pool", "a=192.0.2.0/24"],
                "pool a: needs mode=",
            ),
            (
                &["--announce-pool", "a=192.0.2.0/24,mode=arp"],
                "mode `arp`",
            ),
            (&["--announce-pool", "a=lan,mode=l2"], "`lan` is neither"),
            (BGP_AND_L2, "need --announce-pool"),
            (
                &[
                    "--l2-interface",
                    "lan",
                    "--l2-renew",
                    "2",
                    "--l2-lease",
                    "2",
                ],
                "--l2-renew",
            ),
        ];
        assert_refused(&cases);
    }
}
