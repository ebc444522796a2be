//! A routed fleet in network namespaces, for the announcement benchmark
//! (`announce-failover`): an FRR router (zebra + bgpd), a client behind
//! it and three replicas, each on its own veth link to the router. Every
//! replica runs an echo backend that answers with the replica's name and
//! the release `teapot proxy --manifests` in front of it; the fleet's
//! address and the L4 Service's address sit on each replica's loopback,
//! so whichever replica the router picks accepts the connection.
//!
//! Who announces the addresses is the [`Announcer`]: teapot itself
//! (`--bgp-peer`), or FRR bgpd in the replica's namespace (`network
//! VIP/32`) with teapot serving unannounced, the baseline teapot is
//! measured against.
//!
//! With [`Bfd`] (`--bfd 100x3`) every BGP session between a replica and
//! the router has a BFD session beside it with the same timers on both
//! ends: bfdd runs on the router (`neighbor REPLICA bfd`), teapot's peers
//! get `bfd=100x3`, and an FRR announcer runs bfdd in the replica's
//! namespace (`neighbor ROUTER bfd`).
//!
//! Addresses come from 198.18.0.0/15 (RFC 2544, benchmarking) and
//! 203.0.113.0/24 (TEST-NET-3); every object is named `tpbf<pid>…` and
//! removed on drop, failure included.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

pub const ROUTER_ASN: u32 = 64500;
/// The fleet's own address (what `*.lb.DOMAIN` points at).
pub const VIP: &str = "203.0.113.10";
/// The L4 pool's one address, held by the L4 Service on every replica.
pub const L4_VIP: &str = "203.0.113.20";
pub const L4_PORT: u16 = 7000;
pub const HTTP_PORT: u16 = 80;
/// The Host the Ingress routes to the echo backend.
pub const HOST: &str = "app.example";
pub const REPLICAS: usize = 3;
/// What `--announce` adds in the scale run: 2046 host addresses.
pub const SCALE_CIDR: &str = "198.19.0.0/21";
const CLIENT_ADDR: &str = "198.18.100.2";
const ROUTER_CLIENT_ADDR: &str = "198.18.100.1";
const FRR_DIR: &str = "/usr/lib/frr";
/// Resilient group ids in the router's kernel: one per replica, then the group.
const NH_ID_BASE: u32 = 11;
const NH_GROUP_ID: u32 = 100;
pub const RESILIENT_BUCKETS: u32 = 64;

/// Replica `i`'s AS number: distinct, so the router's multipath needs
/// `bgp bestpath as-path multipath-relax`, as with replicas in several ASNs.
pub fn replica_asn(i: usize) -> u32 {
    64501 + i as u32
}

/// The router's address on replica `i`'s link.
pub fn router_addr(i: usize) -> String {
    format!("198.18.{}.1", i + 1)
}

/// Replica `i`'s address: its BGP session's source and the next hop.
pub fn replica_addr(i: usize) -> String {
    format!("198.18.{}.2", i + 1)
}

/// Replica `i`'s name, as its echo backend reports it (`pod`).
pub fn replica_name(i: usize) -> String {
    format!("s{}", i + 1)
}

/// BFD beside every BGP session: the interval (Desired Min TX and
/// Required Min RX alike) and the detection multiplier, the same on the
/// router and on every replica, written as teapot's `bfd=` has it
/// (`100x3`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bfd {
    pub interval_ms: u32,
    pub multiplier: u8,
}

impl std::str::FromStr for Bfd {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Bfd> {
        let (interval, multiplier) = s
            .split_once('x')
            .with_context(|| format!("bfd `{s}` is not INTERVALxMULTIPLIER (e.g. 100x3)"))?;
        let bfd = Bfd {
            interval_ms: interval
                .parse()
                .with_context(|| format!("bfd `{s}`: interval `{interval}` in ms"))?,
            multiplier: multiplier
                .parse()
                .with_context(|| format!("bfd `{s}`: multiplier `{multiplier}`"))?,
        };
        // What bfdd accepts: 10-60000 ms, a multiplier of 2-255.
        if !(10..=60_000).contains(&bfd.interval_ms) || bfd.multiplier < 2 {
            bail!("bfd `{s}`: FRR takes an interval of 10-60000 ms and a multiplier of 2-255");
        }
        Ok(bfd)
    }
}

impl std::fmt::Display for Bfd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.interval_ms, self.multiplier)
    }
}

impl Bfd {
    /// bfdd's configuration: the one profile every neighbour uses.
    fn bfdd_conf(&self, log: &Path) -> String {
        format!(
            "log file {log}\n!\nbfd\n profile {BFD_PROFILE}\n  transmit-interval {i}\n  receive-interval {i}\n  detect-multiplier {m}\n !\n!\n",
            log = log.display(),
            i = self.interval_ms,
            m = self.multiplier,
        )
    }
}

/// bgpd's lines giving neighbour `addr` a BFD session, when `bfd` is set.
fn neighbor_bfd(bfd: Option<Bfd>, addr: &str) -> String {
    match bfd {
        Some(_) => format!(" neighbor {addr} bfd\n neighbor {addr} bfd profile {BFD_PROFILE}\n"),
        None => String::new(),
    }
}

const BFD_PROFILE: &str = "fleet";

/// Who announces a replica's addresses to the router.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Announcer {
    /// teapot's own speaker (`--bgp-peer`, `--announce`).
    Teapot,
    /// FRR bgpd (+ zebra) in the replica's namespace, teapot unannounced.
    Frr,
}

/// One replica's processes.
#[derive(Default)]
struct Replica {
    teapot: Option<Child>,
    echo: Option<Child>,
    /// bgpd and zebra pids in [`Announcer::Frr`] mode.
    frr: bool,
    /// Who announces for the running replica.
    announcer: Option<Announcer>,
}

/// The whole topology; everything it made is removed on drop.
pub struct Lab {
    pub tag: String,
    pub router: String,
    pub client: String,
    pub replicas: Vec<String>,
    teapot: PathBuf,
    dir: tempfile::TempDir,
    manifests: PathBuf,
    procs: Vec<Replica>,
    /// Extra `teapot proxy` flags of the next starts (the scale run's CIDR).
    pub extra_announce: Vec<String>,
    /// BFD beside every BGP session, on the router and every replica.
    bfd: Option<Bfd>,
    namespaces: Vec<String>,
    frr_dirs: Vec<PathBuf>,
}

/// Runs a command that must succeed; its stdout.
pub fn run(cmd: &[&str]) -> Result<String> {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .with_context(|| format!("{cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a shell script in namespace `ns`.
pub fn sh(ns: &str, script: &str) -> Result<String> {
    run(&["ip", "netns", "exec", ns, "sh", "-c", script])
}

/// Polls `check` every `every` until it yields or `bound` passes.
pub fn poll<T>(
    what: &str,
    bound: Duration,
    every: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T> {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(v) = check() {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {bound:?} waiting for {what}");
        }
        std::thread::sleep(every);
    }
}

/// Missing tools, or `None` when the lab can be built (with bfdd when
/// `bfd`).
pub fn missing(bfd: bool) -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("network namespaces need root".into());
    }
    let bfdd = bfd.then_some("bfdd");
    for tool in ["zebra", "bgpd"].into_iter().chain(bfdd) {
        if !Path::new(FRR_DIR).join(tool).exists() {
            return Some(format!("{FRR_DIR}/{tool} missing (apt-get install frr)"));
        }
    }
    for (tool, arg) in [("vtysh", "--version"), ("nft", "--version"), ("ip", "-V")] {
        if Command::new(tool).arg(arg).output().is_err() {
            return Some(format!("{tool} missing"));
        }
    }
    None
}

/// The router's namespace: what its BGP and its kernel hold, and the
/// resilient group standing for a router with resilient hashing. Cheap to
/// clone, for a thread that follows BGP.
#[derive(Clone)]
pub struct Router {
    pub name: String,
    tag: String,
}

impl Router {
    /// The router's end of replica `i`'s link.
    pub fn port(&self, i: usize) -> String {
        format!("{}r{}", self.tag, i + 1)
    }

    /// A vtysh command on the router, its output.
    pub fn vtysh(&self, command: &str) -> String {
        Command::new("vtysh")
            .args(["-N", &self.name, "-c", command])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Next hops the router's kernel uses for `prefix` (BGP's route).
    pub fn kernel_next_hops(&self, prefix: &str) -> BTreeSet<String> {
        let out = run(&[
            "ip", "-n", &self.name, "-j", "route", "show", prefix, "proto", "bgp",
        ])
        .unwrap_or_default();
        let routes: Value = serde_json::from_str(out.trim()).unwrap_or_default();
        let mut found = BTreeSet::new();
        for route in routes.as_array().into_iter().flatten() {
            let hops = match route.get("nexthops").and_then(|h| h.as_array()) {
                Some(hops) => hops.clone(),
                None => vec![route.clone()],
            };
            for hop in hops {
                if let Some(gw) = hop.get("gateway").and_then(|g| g.as_str()) {
                    found.insert(gw.to_string());
                }
            }
        }
        found
    }

    /// Replicas BGP uses for the VIP now: the best path and its multipath
    /// peers (a GRACEFUL_SHUTDOWN path, at LOCAL_PREF 0, is neither).
    pub fn bgp_next_hops(&self) -> BTreeSet<usize> {
        let out = self.vtysh(&format!("show bgp ipv4 unicast {VIP}/32 json"));
        let route: Value = serde_json::from_str(&out).unwrap_or_default();
        let mut used = BTreeSet::new();
        for path in route
            .get("paths")
            .and_then(|p| p.as_array())
            .into_iter()
            .flatten()
        {
            let chosen = path.get("bestpath").is_some()
                || path.get("multipath").and_then(|m| m.as_bool()) == Some(true);
            let valid = path.get("valid").and_then(|v| v.as_bool()) != Some(false);
            let peer = path.pointer("/peer/peerId").and_then(|p| p.as_str());
            if let (true, true, Some(peer)) = (chosen, valid, peer)
                && let Some(i) = (0..REPLICAS).find(|&i| replica_addr(i) == peer)
            {
                used.insert(i);
            }
        }
        used
    }

    /// The state of the router's BFD session with `peer` (`up`, `down`,
    /// `init`), as `show bfd peers json` has it.
    pub fn bfd_status(&self, peer: &str) -> Option<String> {
        let peers: Value = serde_json::from_str(&self.vtysh("show bfd peers json")).ok()?;
        peers
            .as_array()?
            .iter()
            .find(|p| p.get("peer").and_then(|a| a.as_str()) == Some(peer))?
            .get("status")?
            .as_str()
            .map(str::to_string)
    }

    /// Routes the router has received from each replica (`pfxRcd`).
    pub fn prefixes_received(&self) -> Vec<u64> {
        let out = self.vtysh("show bgp ipv4 unicast summary json");
        let summary: Value = serde_json::from_str(&out).unwrap_or_default();
        (0..REPLICAS)
            .map(|i| {
                summary
                    .pointer(&format!("/peers/{}/pfxRcd", replica_addr(i)))
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0)
            })
            .collect()
    }

    /// BGP routes in the router's kernel table.
    pub fn kernel_bgp_routes(&self) -> usize {
        run(&["ip", "-n", &self.name, "route", "show", "proto", "bgp"])
            .map(|o| {
                o.lines()
                    .filter(|l| !l.starts_with(char::is_whitespace))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Routes the VIP through a resilient next-hop group over `replicas`
    /// (created, or its members replaced: a replaced group keeps the
    /// buckets of the members that stay). The route sits below BGP's
    /// metric, so it wins; it stands for a router with resilient hashing.
    pub fn resilient_group(&self, replicas: &BTreeSet<usize>) -> Result<()> {
        let r = &self.name;
        let exists = run(&[
            "ip",
            "-n",
            r,
            "nexthop",
            "show",
            "id",
            &NH_GROUP_ID.to_string(),
        ])
        .is_ok();
        if !exists {
            for i in 0..REPLICAS {
                run(&[
                    "ip",
                    "-n",
                    r,
                    "nexthop",
                    "replace",
                    "id",
                    &(NH_ID_BASE + i as u32).to_string(),
                    "via",
                    &replica_addr(i),
                    "dev",
                    &self.port(i),
                ])?;
            }
        }
        if replicas.is_empty() {
            return Ok(());
        }
        let group: Vec<String> = replicas
            .iter()
            .map(|&i| (NH_ID_BASE + i as u32).to_string())
            .collect();
        let verb = if exists { "replace" } else { "add" };
        run(&[
            "ip",
            "-n",
            r,
            "nexthop",
            verb,
            "id",
            &NH_GROUP_ID.to_string(),
            "group",
            &group.join("/"),
            "type",
            "resilient",
            "buckets",
            &RESILIENT_BUCKETS.to_string(),
            "idle_timer",
            "1",
        ])?;
        if !exists {
            run(&[
                "ip",
                "-n",
                r,
                "route",
                "replace",
                &format!("{VIP}/32"),
                "nhid",
                &NH_GROUP_ID.to_string(),
                "metric",
                "5",
            ])?;
            run(&[
                "ip",
                "-n",
                r,
                "route",
                "replace",
                &format!("{L4_VIP}/32"),
                "nhid",
                &NH_GROUP_ID.to_string(),
                "metric",
                "5",
            ])?;
        }
        Ok(())
    }

    /// Removes the resilient group and its routes (plain ECMP again).
    pub fn drop_resilient_group(&self) {
        let r = &self.name;
        for vip in [VIP, L4_VIP] {
            let _ = run(&[
                "ip",
                "-n",
                r,
                "route",
                "del",
                &format!("{vip}/32"),
                "metric",
                "5",
            ]);
        }
        let _ = run(&[
            "ip",
            "-n",
            r,
            "nexthop",
            "del",
            "id",
            &NH_GROUP_ID.to_string(),
        ]);
    }

    /// Members of the resilient group now.
    pub fn resilient_members(&self) -> BTreeSet<usize> {
        let out = run(&[
            "ip",
            "-n",
            &self.name,
            "-j",
            "nexthop",
            "show",
            "id",
            &NH_GROUP_ID.to_string(),
        ])
        .unwrap_or_default();
        let v: Value = serde_json::from_str(out.trim()).unwrap_or_default();
        v.pointer("/0/group")
            .and_then(|g| g.as_array())
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("id").and_then(|id| id.as_u64()))
            .map(|id| (id as u32 - NH_ID_BASE) as usize)
            .collect()
    }
}

impl Lab {
    /// Namespaces, links, addresses and the router's FRR (with bfdd when
    /// `bfd`); no replica process yet.
    pub fn new(teapot: &Path, bfd: Option<Bfd>) -> Result<Lab> {
        let tag = format!("tpbf{}", std::process::id());
        let dir = tempfile::Builder::new().prefix(&tag).tempdir()?;
        let manifests = dir.path().join("manifests");
        std::fs::create_dir(&manifests)?;
        std::fs::write(manifests.join("fleet.yaml"), fleet_manifests())?;
        let mut lab = Lab {
            router: format!("{tag}r"),
            client: format!("{tag}c"),
            replicas: (0..REPLICAS).map(|i| format!("{tag}s{}", i + 1)).collect(),
            tag,
            teapot: teapot.to_path_buf(),
            dir,
            manifests,
            procs: (0..REPLICAS).map(|_| Replica::default()).collect(),
            extra_announce: Vec::new(),
            bfd,
            namespaces: Vec::new(),
            frr_dirs: Vec::new(),
        };
        // From here on, Drop removes whatever was made.
        for ns in [lab.router.clone(), lab.client.clone()]
            .into_iter()
            .chain(lab.replicas.clone())
        {
            run(&["ip", "netns", "add", &ns])?;
            lab.namespaces.push(ns.clone());
            // Loose paths: the router's return route to the VIP has
            // several next hops.
            sh(
                &ns,
                "ip link set lo up && sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0",
            )?;
        }
        sh(
            &lab.router,
            "sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=1",
        )?;
        let (rc, c) = (format!("{}rc", lab.tag), format!("{}c", lab.tag));
        lab.veth(&rc, &lab.router, &c, &lab.client)?;
        sh(
            &lab.router,
            &format!("ip addr add {ROUTER_CLIENT_ADDR}/24 dev {rc} && ip link set {rc} up"),
        )?;
        sh(
            &lab.client,
            &format!(
                "ip addr add {CLIENT_ADDR}/24 dev {c} && ip link set {c} up && ip route add default via {ROUTER_CLIENT_ADDR}"
            ),
        )?;
        for i in 0..REPLICAS {
            let (port, uplink) = (lab.router_port(i), lab.uplink(i));
            lab.veth(&port, &lab.router, &uplink, &lab.replicas[i])?;
            sh(
                &lab.router,
                &format!(
                    "ip addr add {}/24 dev {port} && ip link set {port} up",
                    router_addr(i)
                ),
            )?;
            sh(
                &lab.replicas[i],
                &format!(
                    "ip addr add {}/24 dev {uplink} && ip link set {uplink} up && ip route add default via {} && ip addr add {VIP}/32 dev lo && ip addr add {L4_VIP}/32 dev lo",
                    replica_addr(i),
                    router_addr(i)
                ),
            )?;
        }
        lab.start_router()?;
        Ok(lab)
    }

    fn veth(&self, a: &str, ns_a: &str, b: &str, ns_b: &str) -> Result<()> {
        run(&[
            "ip", "link", "add", a, "netns", ns_a, "type", "veth", "peer", "name", b, "netns", ns_b,
        ])?;
        Ok(())
    }

    /// The router's end of replica `i`'s link.
    pub fn router_port(&self, i: usize) -> String {
        self.net().port(i)
    }

    /// The router, for queries and the resilient group.
    pub fn net(&self) -> Router {
        Router {
            name: self.router.clone(),
            tag: self.tag.clone(),
        }
    }

    /// Replica `i`'s end of its link (what the link-cut failure downs).
    pub fn uplink(&self, i: usize) -> String {
        format!("{}u{}", self.tag, i + 1)
    }

    fn frr_run_dir(&self, ns: &str) -> PathBuf {
        Path::new("/var/run/frr").join(ns)
    }

    /// Starts zebra, bfdd (with BFD) and bgpd in `ns` on `bgpd_conf`.
    fn start_frr(&mut self, ns: &str, bgpd_conf: &str) -> Result<()> {
        let run_dir = self.frr_run_dir(ns);
        let _ = std::fs::remove_dir_all(&run_dir);
        std::fs::create_dir_all(&run_dir)?;
        if !self.frr_dirs.contains(&run_dir) {
            self.frr_dirs.push(run_dir.clone());
        }
        run(&["chown", "frr:frr", &run_dir.to_string_lossy()])?;
        let conf_dir = self.dir.path().join(format!("frr-{ns}"));
        std::fs::create_dir_all(&conf_dir)?;
        run(&["chmod", "755", &self.dir.path().to_string_lossy()])?;
        run(&["chmod", "755", &conf_dir.to_string_lossy()])?;
        // Plain multipath routes, no kernel nexthop objects: the kernel
        // drops a nexthop object whose link loses carrier, and zebra 8.4
        // does not put it back when the link returns (the route keeps two
        // next hops while BGP and zebra's RIB show three).
        let mut daemons = vec![("zebra", "no zebra nexthop kernel enable\n".to_string())];
        // bfdd before bgpd: bgpd registers its BFD neighbours with it.
        if let Some(bfd) = self.bfd {
            daemons.push(("bfdd", bfd.bfdd_conf(&run_dir.join("bfdd.log"))));
        }
        daemons.push(("bgpd", bgpd_conf.to_string()));
        for (daemon, conf) in daemons {
            let path = conf_dir.join(format!("{daemon}.conf"));
            std::fs::write(&path, conf)?;
            run(&["chmod", "644", &path.to_string_lossy()])?;
            let pid = run_dir.join(format!("{daemon}.pid"));
            run(&[
                "ip",
                "netns",
                "exec",
                ns,
                &format!("{FRR_DIR}/{daemon}"),
                "-N",
                ns,
                "-d",
                "-f",
                &path.to_string_lossy(),
                "-i",
                &pid.to_string_lossy(),
            ])?;
            if daemon == "zebra" {
                poll(
                    "zebra's socket",
                    Duration::from_secs(30),
                    Duration::from_millis(20),
                    || run_dir.join("zserv.api").exists().then_some(()),
                )?;
            }
        }
        Ok(())
    }

    /// The pids of the FRR daemons running in `ns`.
    fn frr_pids(&self, ns: &str) -> Vec<String> {
        ["bgpd", "bfdd", "zebra"]
            .iter()
            .filter_map(|d| {
                std::fs::read_to_string(self.frr_run_dir(ns).join(format!("{d}.pid"))).ok()
            })
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect()
    }

    fn start_router(&mut self) -> Result<()> {
        let mut conf = format!(
            "hostname {r}\nlog file {log}\n!\nroute-map NONE deny 10\n!\nrouter bgp {ROUTER_ASN}\n bgp router-id {rid}\n no bgp ebgp-requires-policy\n bgp bestpath as-path multipath-relax\n",
            r = self.router,
            log = self.frr_run_dir(&self.router).join("bgpd.log").display(),
            rid = ROUTER_CLIENT_ADDR,
        );
        for i in 0..REPLICAS {
            let a = replica_addr(i);
            let _ = write!(
                conf,
                " neighbor {a} remote-as {}\n neighbor {a} timers 1 3\n neighbor {a} timers connect 1\n{}",
                replica_asn(i),
                neighbor_bfd(self.bfd, &a),
            );
        }
        conf.push_str(" address-family ipv4 unicast\n  maximum-paths 16\n");
        for i in 0..REPLICAS {
            // A leaf announces; it learns nothing back.
            let _ = writeln!(conf, "  neighbor {} route-map NONE out", replica_addr(i));
        }
        conf.push_str(" exit-address-family\n!\n");
        let router = self.router.clone();
        self.start_frr(&router, &conf)?;
        poll(
            "bgpd's neighbours",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || {
                self.net()
                    .vtysh("show bgp summary json")
                    .contains(&replica_addr(REPLICAS - 1))
                    .then_some(())
            },
        )
    }

    /// With BFD, waits until the router's BFD session with replica `i` is
    /// Up: a failure before that is seen by the hold timer alone.
    pub fn wait_bfd_up(&self, i: usize, bound: Duration) -> Result<()> {
        if self.bfd.is_none() {
            return Ok(());
        }
        let addr = replica_addr(i);
        poll(
            &format!("the router's BFD session with {addr} up"),
            bound,
            Duration::from_millis(20),
            || (self.net().bfd_status(&addr).as_deref() == Some("up")).then_some(()),
        )
        .with_context(|| self.dump())
    }

    /// Waits until the kernel routes the VIP over exactly `replicas`.
    pub fn wait_next_hops(&self, replicas: &[usize], bound: Duration) -> Result<Duration> {
        let want: BTreeSet<String> = replicas.iter().map(|&i| replica_addr(i)).collect();
        let started = Instant::now();
        poll(
            &format!("the router's next hops {want:?}"),
            bound,
            Duration::from_millis(10),
            || (self.net().kernel_next_hops(VIP) == want).then_some(()),
        )
        .with_context(|| self.dump())?;
        Ok(started.elapsed())
    }

    /// Starts replica `i`'s echo backend (once) and its announcer.
    pub fn start_replica(&mut self, i: usize, announcer: Announcer) -> Result<()> {
        let ns = self.replicas[i].clone();
        if self.procs[i].echo.is_none() {
            let log = self.log_file(&format!("echo-{}", replica_name(i)))?;
            let echo = Command::new("ip")
                .args(["netns", "exec", &ns])
                .arg(&self.teapot)
                .args(["echo", "--listen", "127.0.0.1:3000", "--namespace", "bench"])
                .args(["--service", "web", "--pod", &replica_name(i)])
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()?;
            self.procs[i].echo = Some(echo);
        }
        let log = self.log_file(&format!("teapot-{}", replica_name(i)))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns])
            .arg(&self.teapot)
            .args(["proxy", "--manifests"])
            .arg(&self.manifests)
            .args(["--http", &format!("0.0.0.0:{HTTP_PORT}"), "--https", "off"])
            .args(["--admin", "127.0.0.1:9080", "--domain", "lb.example"])
            .args([
                "--l4-pool",
                &format!("default={L4_VIP}"),
                "--l4-state",
                "off",
            ])
            // Every probe comes from the one client address.
            .args(["--max-connections-per-client", "0"])
            // L4 connections whose route moved away never close on
            // their own; a restart must not wait the default 25 s.
            .args(["--grace-period", "5"])
            .env(
                "RUST_LOG",
                "warn,teapot_announce=info,teapot_proxy::loops::announce=info",
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        match announcer {
            Announcer::Teapot => {
                let bfd = self.bfd.map(|b| format!(",bfd={b}")).unwrap_or_default();
                cmd.args(["--bgp-asn", &replica_asn(i).to_string()])
                    .args([
                        "--bgp-peer",
                        &format!("{},{ROUTER_ASN},hold=3,keepalive=1{bfd}", router_addr(i)),
                    ])
                    .args(["--announce", VIP])
                    .args(&self.extra_announce);
            }
            Announcer::Frr => {
                let a = router_addr(i);
                let conf = format!(
                    "hostname {ns}\n!\nrouter bgp {asn}\n bgp router-id {rid}\n no bgp ebgp-requires-policy\n no bgp network import-check\n neighbor {a} remote-as {ROUTER_ASN}\n neighbor {a} timers 1 3\n neighbor {a} timers connect 1\n{bfd} address-family ipv4 unicast\n  network {VIP}/32\n  network {L4_VIP}/32\n exit-address-family\n!\n",
                    asn = replica_asn(i),
                    rid = replica_addr(i),
                    bfd = neighbor_bfd(self.bfd, &a),
                );
                self.start_frr(&ns, &conf)?;
                self.procs[i].frr = true;
            }
        }
        self.procs[i].teapot = Some(cmd.spawn()?);
        self.procs[i].announcer = Some(announcer);
        Ok(())
    }

    fn log_file(&self, name: &str) -> Result<std::fs::File> {
        Ok(std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.log")))?)
    }

    /// Who announces replica `i` now (`None`: not running).
    pub fn announcer(&self, i: usize) -> Option<Announcer> {
        self.procs[i].announcer
    }

    /// The pid of replica `i`'s teapot (`ip netns exec` execs it).
    pub fn teapot_pid(&self, i: usize) -> Option<u32> {
        self.procs[i].teapot.as_ref().map(|c| c.id())
    }

    /// Every pid that is replica `i`'s node software: teapot and, with
    /// FRR announcing, bgpd and zebra.
    fn node_pids(&self, i: usize) -> Vec<String> {
        let mut pids: Vec<String> = self
            .teapot_pid(i)
            .map(|p| p.to_string())
            .into_iter()
            .collect();
        if self.procs[i].frr {
            pids.extend(self.frr_pids(&self.replicas[i]));
        }
        pids
    }

    /// SIGKILLs replica `i`'s node software in one `kill`: the moment of
    /// the failure.
    pub fn kill_replica(&mut self, i: usize) -> Result<()> {
        let pids = self.node_pids(i);
        if pids.is_empty() {
            return Ok(());
        }
        let mut cmd = vec!["kill", "-KILL"];
        cmd.extend(pids.iter().map(String::as_str));
        run(&cmd)?;
        self.reap(i, Duration::from_secs(10))
    }

    /// SIGTERM to replica `i`'s teapot: the planned stop.
    pub fn terminate_replica(&self, i: usize) -> Result<()> {
        let pid = self.teapot_pid(i).context("replica not running")?;
        run(&["kill", "-TERM", &pid.to_string()])?;
        Ok(())
    }

    /// Waits for replica `i`'s teapot to exit (FRR daemons are killed).
    pub fn reap(&mut self, i: usize, bound: Duration) -> Result<()> {
        self.procs[i].announcer = None;
        if let Some(mut child) = self.procs[i].teapot.take() {
            let done = poll(
                "the replica's exit",
                bound,
                Duration::from_millis(20),
                || child.try_wait().ok().flatten(),
            );
            if done.is_err() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if self.procs[i].frr {
            for pid in self.frr_pids(&self.replicas[i]) {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
            }
            self.procs[i].frr = false;
        }
        Ok(())
    }

    /// Cuts replica `i`'s link (`ip link set DEV down` on its end).
    pub fn link_down(&self, i: usize) -> Result<()> {
        run(&[
            "ip",
            "-n",
            &self.replicas[i],
            "link",
            "set",
            &self.uplink(i),
            "down",
        ])?;
        Ok(())
    }

    /// Brings the link back, with the default route the down removed.
    pub fn link_up(&self, i: usize) -> Result<()> {
        sh(
            &self.replicas[i],
            &format!(
                "ip link set {} up && ip route replace default via {}",
                self.uplink(i),
                router_addr(i)
            ),
        )?;
        Ok(())
    }

    /// Drops every packet in and out of replica `i`'s namespace; the
    /// link stays up, so only a hold timer can tell.
    pub fn silence(&self, i: usize) -> Result<()> {
        let table = self.nft_table();
        sh(
            &self.replicas[i],
            &format!(
                "nft add table inet {table} && \
                 nft add chain inet {table} in '{{ type filter hook input priority -300; policy drop; }}' && \
                 nft add chain inet {table} out '{{ type filter hook output priority -300; policy drop; }}'"
            ),
        )?;
        Ok(())
    }

    pub fn unsilence(&self, i: usize) -> Result<()> {
        sh(
            &self.replicas[i],
            &format!("nft delete table inet {}", self.nft_table()),
        )?;
        Ok(())
    }

    fn nft_table(&self) -> String {
        format!("{}silent", self.tag)
    }

    /// RSS of replica `i`'s teapot, bytes.
    pub fn rss(&self, i: usize) -> u64 {
        self.teapot_pid(i)
            .and_then(|p| crate::peers::rss_kib(p).ok())
            .unwrap_or(0)
            * 1024
    }

    /// The router's view and the replicas' logs, for an error.
    pub fn dump(&self) -> String {
        let mut out = self.net().vtysh("show bgp summary");
        if self.bfd.is_some() {
            out.push_str(&self.net().vtysh("show bfd peers"));
        }
        out.push_str(&self.net().vtysh(&format!("show bgp ipv4 unicast {VIP}/32")));
        out.push_str(&self.net().vtysh(&format!("show ip route {VIP}/32")));
        out.push_str(&run(&["ip", "-n", &self.router, "route"]).unwrap_or_default());
        for i in 0..REPLICAS {
            let path = self
                .dir
                .path()
                .join(format!("teapot-{}.log", replica_name(i)));
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            let _ = writeln!(out, "--- {} (last lines)", path.display());
            for line in tail.iter().rev() {
                let _ = writeln!(out, "{line}");
            }
        }
        out
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for p in &mut self.procs {
            for child in [p.teapot.as_mut(), p.echo.as_mut()].into_iter().flatten() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let namespaces: Vec<String> = self.namespaces.clone();
        for ns in &namespaces {
            for pid in self.frr_pids(ns) {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
            }
        }
        for dir in &self.frr_dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        for ns in &namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// One Ingress to the echo backend and one L4 Service to the same
/// backend (HTTP over a plain TCP stream), the same on every replica.
fn fleet_manifests() -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: web, namespace: bench}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
{web}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: web, namespace: bench}}
spec:
  ingressClassName: teapot
  rules:
    - host: {HOST}
      http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: stream, namespace: bench}}
spec:
  type: LoadBalancer
  loadBalancerClass: teapot.dev/lb
  ports: [{{name: tcp, port: {L4_PORT}, protocol: TCP}}]
---
{stream}
",
        web = echo_slice("web", "http"),
        stream = echo_slice("stream", "tcp"),
    )
}

/// The EndpointSlice of `service`: its port `port_name` is the echo
/// backend on the replica's loopback.
fn echo_slice(service: &str, port_name: &str) -> String {
    format!(
        "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {service}-1, namespace: bench, labels: {{kubernetes.io/service-name: {service}}}}}
addressType: IPv4
ports: [{{name: {port_name}, port: 3000, protocol: TCP}}]
endpoints: [{{addresses: [\"127.0.0.1\"], conditions: {{ready: true}}}}]"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bfd_reads_and_writes_teapots_spelling() {
        let bfd: Bfd = "100x3".parse().unwrap();
        assert_eq!(
            bfd,
            Bfd {
                interval_ms: 100,
                multiplier: 3
            }
        );
        assert_eq!(bfd.to_string(), "100x3");
        let conf = bfd.bfdd_conf(Path::new("/x/bfdd.log"));
        assert!(conf.contains("transmit-interval 100\n"), "{conf}");
        assert!(conf.contains("receive-interval 100\n"), "{conf}");
        assert!(conf.contains("detect-multiplier 3\n"), "{conf}");
    }

    #[test]
    fn bfd_refuses_what_bfdd_would() {
        for bad in [
            "100", "fastx3", "100x", "5x3", "100x1", "100x300", "70000x3",
        ] {
            assert!(bad.parse::<Bfd>().is_err(), "{bad}");
        }
    }

    #[test]
    fn neighbours_get_bfd_lines_only_with_bfd() {
        assert_eq!(neighbor_bfd(None, "198.18.1.2"), "");
        let lines = neighbor_bfd("100x3".parse().ok(), "198.18.1.2");
        assert!(lines.contains(" neighbor 198.18.1.2 bfd\n"), "{lines}");
        assert!(
            lines.contains(&format!(" neighbor 198.18.1.2 bfd profile {BFD_PROFILE}\n")),
            "{lines}"
        );
    }
}
