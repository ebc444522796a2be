//! The speaker against a real router: FRR (bgpd + zebra) in its own
//! network namespace, two speaker replicas in two more, joined by veth
//! links on TEST-NET addresses. Both replicas announce the same /32 and
//! /128; the router's kernel table must hold both as ECMP next hops, lose
//! one after a graceful stop (GRACEFUL_SHUTDOWN seen first) and lose one
//! after a SIGKILL (hold timer). With BFD (bfdd beside bgpd, 100 ms x 3
//! both ways), a frozen replica's sessions are cut by BFD, and a graceful
//! stop says AdminDown. A neighbour the router refuses does not disturb
//! the replica's other session. With `neighbor X password` on the router,
//! a replica with the same TCP-MD5 password is a next hop and one with
//! another is not. With graceful restart (RFC 4724) on both sides, a
//! replica SIGKILLed and started again keeps its route in the router's
//! kernel throughout (stale, then fresh after End-of-RIB); without the
//! capability the route goes; one that does not come back loses it after
//! the restart time; a SIGTERM still withdraws it.
//!
//! Needs root, iproute2 and Debian's `frr`; without them each test prints
//! why and passes, unless `TEAPOT_REQUIRE_NETNS=1` (CI) makes that a
//! failure (tests/netns/mod.rs).
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod netns;

use netns::{LINKS, ROUTER_ASN, Replicas, SPEAKER_ASN, VIP4, VIP6, run};

const FRR_DIR: &str = "/usr/lib/frr";
/// Not the speakers' ASN: a router expecting it refuses the session.
const WRONG_ASN: u32 = 64999;

fn frr_missing() -> Option<String> {
    for tool in ["zebra", "bgpd", "bfdd"] {
        if !Path::new(FRR_DIR).join(tool).exists() {
            return Some(format!("{FRR_DIR}/{tool} missing (apt-get install frr)"));
        }
    }
    if Command::new("vtysh").arg("--version").output().is_err() {
        return Some("vtysh missing (apt-get install frr)".into());
    }
    None
}

fn runnable(test: &str) -> bool {
    netns::runnable(test, frr_missing)
}

/// How the router is set up.
#[derive(Clone, Copy, Default)]
struct Setup {
    /// bfdd runs, every neighbour has `bfd profile fast` (100 ms x 3) and
    /// the replicas' peers `bfd=100x3`.
    bfd: bool,
    /// The router expects this wrong ASN from this speaker address, so it
    /// refuses the session with "Bad Peer AS".
    wrong_remote_as: Option<&'static str>,
    /// Every neighbour has `neighbor X password` with this TCP-MD5
    /// password.
    password: Option<&'static str>,
    /// `bgp graceful-restart` on the router.
    graceful_restart: bool,
}

/// FRR in the router namespace of [`Replicas`]; the daemons are killed on
/// drop, failure included, before the namespaces go.
struct Lab {
    setup: Setup,
    replicas: Replicas,
}

netns::labs_are_replicas!(Lab);

const BFD: Setup = Setup {
    bfd: true,
    wrong_remote_as: None,
    password: None,
    graceful_restart: false,
};

const GRACEFUL_RESTART: Setup = Setup {
    bfd: false,
    wrong_remote_as: None,
    password: None,
    graceful_restart: true,
};

/// The router's TCP-MD5 password in the password tests.
const PASSWORD: &str = "s3cret-shared-with-the-router";
const WRONG_PASSWORD: &str = "not-the-routers-password";

static LABS: AtomicUsize = AtomicUsize::new(0);

impl Lab {
    fn frr_run_dir(&self) -> PathBuf {
        Path::new("/var/run/frr").join(&self.router)
    }

    fn new(setup: Setup) -> Lab {
        Lab::named("tpbd", setup)
    }

    /// A router with [`PASSWORD`] on every neighbour.
    fn with_password() -> Lab {
        Lab::named(
            "md5",
            Setup {
                password: Some(PASSWORD),
                ..Setup::default()
            },
        )
    }

    /// A lab whose namespaces and run directories start with `prefix`.
    fn named(prefix: &str, setup: Setup) -> Lab {
        let n = LABS.fetch_add(1, Ordering::Relaxed);
        let lab = Lab {
            setup,
            replicas: Replicas::new(&format!("{prefix}{}x{n}", std::process::id())),
        };
        lab.start_frr();
        lab
    }

    /// Both replicas announcing, the router using both (replica 0 with
    /// `graceful_wait_ms`).
    fn with_both_replicas(setup: Setup, graceful_wait_ms: u64) -> Lab {
        let mut lab = Lab::new(setup);
        lab.start_speaker(0, graceful_wait_ms);
        lab.start_speaker(1, 3000);
        lab.wait_for_ecmp();
        lab
    }

    fn start_frr(&self) {
        let run_dir = self.frr_run_dir();
        std::fs::create_dir_all(&run_dir).unwrap();
        run(&["chown", "frr:frr", run_dir.to_str().unwrap()]);
        let mut neighbors = String::new();
        let mut activate6 = String::new();
        for link in &LINKS {
            for addr in [link.speaker4, link.speaker6] {
                let asn = match self.setup.wrong_remote_as {
                    Some(wrong) if wrong == addr => WRONG_ASN,
                    _ => SPEAKER_ASN,
                };
                neighbors.push_str(&format!(
                    " neighbor {addr} remote-as {asn}\n neighbor {addr} timers 1 3\n neighbor {addr} timers connect 1\n"
                ));
                if self.setup.bfd {
                    neighbors.push_str(&format!(
                        " neighbor {addr} bfd\n neighbor {addr} bfd profile fast\n"
                    ));
                }
                // A BFD session that fails with the speaker's process (its
                // C bit clear) is no reason to end graceful restart.
                if self.setup.bfd && self.setup.graceful_restart {
                    neighbors.push_str(&format!(
                        " neighbor {addr} bfd check-control-plane-failure\n"
                    ));
                }
                if let Some(password) = self.setup.password {
                    neighbors.push_str(&format!(" neighbor {addr} password {password}\n"));
                }
            }
            activate6.push_str(&format!("  neighbor {} activate\n", link.speaker6));
        }
        let log = run_dir.join("bgpd.log");
        let graceful_restart = if self.setup.graceful_restart {
            " bgp graceful-restart\n"
        } else {
            ""
        };
        let bgpd = format!(
            "hostname {router}\nlog file {log}\n!\nrouter bgp {ROUTER_ASN}\n bgp router-id {rid}\n no bgp ebgp-requires-policy\n no bgp network import-check\n bgp bestpath as-path multipath-relax\n{graceful_restart}{neighbors} address-family ipv4 unicast\n  maximum-paths 4\n exit-address-family\n address-family ipv6 unicast\n{activate6}  maximum-paths 4\n exit-address-family\n!\n",
            router = self.router,
            log = log.display(),
            rid = LINKS[0].router4,
        );
        let conf_dir = self.dir.path();
        run(&["chmod", "755", conf_dir.to_str().unwrap()]);
        let mut daemons = vec![("zebra", String::new())];
        if self.setup.bfd {
            daemons.push((
                "bfdd",
                format!(
                    "log file {}\n!\nbfd\n profile fast\n  transmit-interval 100\n  receive-interval 100\n  detect-multiplier 3\n !\n!\n",
                    run_dir.join("bfdd.log").display()
                ),
            ));
        }
        daemons.push(("bgpd", bgpd));
        for (daemon, conf) in daemons {
            let path = conf_dir.join(format!("{daemon}.conf"));
            std::fs::write(&path, conf).unwrap();
            run(&["chmod", "644", path.to_str().unwrap()]);
            let pid = run_dir.join(format!("{daemon}.pid"));
            run(&[
                "ip",
                "netns",
                "exec",
                &self.router,
                &format!("{FRR_DIR}/{daemon}"),
                "-N",
                &self.router,
                "-d",
                "-f",
                path.to_str().unwrap(),
                "-i",
                pid.to_str().unwrap(),
            ]);
            if daemon == "zebra" {
                self.wait("zebra's socket", || {
                    run_dir.join("zserv.api").exists().then_some(())
                });
            }
        }
        // The replicas connect once bgpd has read its neighbours.
        let last = LINKS[LINKS.len() - 1].speaker6;
        self.wait("bgpd's neighbours", || {
            self.vtysh("show bgp summary json")
                .contains(last)
                .then_some(())
        });
    }

    fn vtysh(&self, command: &str) -> String {
        let out = Command::new("vtysh")
            .args(["-N", &self.router, "-c", command])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts replica `i`'s speaker, with BFD when the router has it.
    fn start_speaker(&mut self, i: usize, graceful_wait_ms: u64) {
        let bfd = if self.setup.bfd { ",bfd=100x3" } else { "" };
        self.replicas.start_speaker(i, bfd, graceful_wait_ms);
    }

    /// Starts replica `i`'s speaker with `password` as its TCP-MD5
    /// password, in a file as a mounted Secret has it (newline included).
    fn start_speaker_with_password(&mut self, i: usize, password: &str) {
        let file = self.dir.path().join(format!("speaker{i}.password"));
        std::fs::write(&file, format!("{password}\n")).unwrap();
        let options = format!(",password-file={}", file.display());
        self.replicas.start_speaker(i, &options, 3000);
    }

    /// `TcpExt` counter `name` of the router's network namespace.
    fn router_tcp_ext(&self, name: &str) -> u64 {
        let text = self.router_sh("cat /proc/net/netstat");
        let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
        let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
        let at = names.split_whitespace().position(|n| n == name).unwrap();
        values.split_whitespace().nth(at).unwrap().parse().unwrap()
    }

    /// Polls `check` until it yields, or fails with the router's view.
    fn wait<T>(&self, what: &str, check: impl FnMut() -> Option<T>) -> T {
        netns::wait(what, || self.dump(), check)
    }

    fn dump(&self) -> String {
        let mut out = self.vtysh("show bgp summary");
        if self.setup.bfd {
            out.push_str(&self.vtysh("show bfd peers"));
        }
        out.push_str(&self.replicas.dump());
        for daemon in ["bgpd", "bfdd"] {
            out.push_str(
                &std::fs::read_to_string(self.frr_run_dir().join(format!("{daemon}.log")))
                    .unwrap_or_default(),
            );
        }
        out
    }

    /// The router's BFD peer with address `peer`, as `show bfd peers json`
    /// has it.
    fn bfd_peer(&self, peer: &str) -> Option<serde_json::Value> {
        let peers: serde_json::Value =
            serde_json::from_str(&self.vtysh("show bfd peers json")).ok()?;
        peers
            .as_array()?
            .iter()
            .find(|p| p.get("peer").and_then(|a| a.as_str()) == Some(peer))
            .cloned()
    }

    /// Every BFD session of replica `i` Up at the router.
    fn wait_bfd_up(&self, i: usize) {
        for addr in [LINKS[i].speaker4, LINKS[i].speaker6] {
            self.wait(&format!("the router's BFD session with {addr} up"), || {
                let peer = self.bfd_peer(addr)?;
                (peer.get("status")?.as_str()? == "up").then_some(())
            });
        }
    }

    /// `show bgp neighbors ADDR json` for the neighbour `addr`.
    fn neighbor(&self, addr: &str) -> serde_json::Value {
        let out = self.vtysh(&format!("show bgp neighbors {addr} json"));
        let all: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        all.get(addr).cloned().unwrap_or_default()
    }

    /// Only replica `i`'s next hop left for `vip`.
    fn wait_only(&self, i: usize, vip: &str) {
        self.wait(
            &format!("replica {i} as the only next hop of {vip}"),
            || self.only(i, vip).then_some(()),
        );
    }

    /// Both replicas announced: two kernel next hops for each address.
    fn wait_for_ecmp(&self) {
        for vip in [VIP4, VIP6] {
            self.wait(&format!("ECMP for {vip}"), || self.ecmp(vip).then_some(()));
        }
    }

    fn wait_exit(&mut self, i: usize) -> std::process::ExitStatus {
        let child = self.take_speaker(i);
        netns::wait_exit(child, &format!("speaker {i}"), || self.dump())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.dump());
        }
        for daemon in ["bgpd", "bfdd", "zebra"] {
            let pid = self.frr_run_dir().join(format!("{daemon}.pid"));
            if let Ok(pid) = std::fs::read_to_string(pid) {
                let _ = Command::new("kill").args(["-9", pid.trim()]).status();
            }
        }
        let _ = std::fs::remove_dir_all(self.frr_run_dir());
    }
}

#[test]
fn graceful_stop_marks_the_route_then_leaves_one_next_hop() {
    if !runnable("graceful_stop_marks_the_route_then_leaves_one_next_hop") {
        return;
    }
    // A wait long enough that the next hop moves before the withdrawal
    // on a loaded machine too.
    let mut lab = Lab::with_both_replicas(Setup::default(), 10_000);

    lab.signal(0, "-TERM");
    let leaving = LINKS[0].speaker4;
    lab.wait(
        "the GRACEFUL_SHUTDOWN community on replica 0's path",
        || {
            let out = lab.vtysh(&format!("show bgp ipv4 unicast {VIP4}/32 json"));
            let route: serde_json::Value = serde_json::from_str(&out).ok()?;
            let paths = route.get("paths")?.as_array()?;
            paths
                .iter()
                .any(|p| {
                    p.pointer("/peer/peerId").and_then(|v| v.as_str()) == Some(leaving)
                        && p.get("community").is_some_and(|c| {
                            c.to_string().to_lowercase().contains("gracefulshutdown")
                                || c.to_string().contains("graceful-shutdown")
                        })
                })
                .then_some(())
        },
    );
    // The router lowers the marked path's preference (FRR: LOCAL_PREF 0),
    // so traffic leaves the replica while its route is still announced.
    lab.wait_only(1, VIP4);
    let out = lab.vtysh(&format!("show bgp ipv4 unicast {VIP4}/32 json"));
    assert!(
        out.contains(leaving),
        "the leaving replica's path is withdrawn only after the wait: {out}"
    );
    lab.wait_only(1, VIP6);
    let status = lab.wait_exit(0);
    assert!(status.success(), "graceful stop exits cleanly: {status}");
    // Withdrawn, not just deprioritised: the router drops every path from
    // the stopped replica (it processes the withdrawal asynchronously).
    lab.wait("no path from the stopped replica", || {
        let out = lab.vtysh(&format!("show bgp ipv4 unicast {VIP4}/32 json"));
        (!out.contains(leaving)).then_some(())
    });
}

#[test]
fn a_killed_replica_leaves_the_route_within_the_hold_time() {
    if !runnable("a_killed_replica_leaves_the_route_within_the_hold_time") {
        return;
    }
    let mut lab = Lab::with_both_replicas(Setup::default(), 3000);

    let killed = Instant::now();
    lab.signal(0, "-KILL");
    lab.wait_only(1, VIP4);
    eprintln!(
        "SIGKILL to one next hop: {:?} (hold time 3 s)",
        killed.elapsed()
    );
    lab.wait_only(1, VIP6);
    lab.wait_exit(0);

    // The last replica gone too: the route leaves the table.
    lab.signal(1, "-KILL");
    lab.wait("no route", || lab.gateways(VIP4).is_empty().then_some(()));
}

#[test]
fn a_frozen_replica_leaves_the_route_when_the_hold_timer_expires() {
    if !runnable("a_frozen_replica_leaves_the_route_when_the_hold_timer_expires") {
        return;
    }
    let mut lab = Lab::with_both_replicas(Setup::default(), 3000);

    // SIGSTOP keeps the TCP connection open but silent: only the router's
    // hold timer can tell (SIGKILL closes the socket, which the router
    // sees at once).
    lab.signal(0, "-STOP");
    lab.wait_only(1, VIP4);
    lab.signal(0, "-KILL");
    lab.wait_exit(0);
}

#[test]
fn with_bfd_a_frozen_replica_is_cut_by_bfd_before_the_hold_timer() {
    if !runnable("with_bfd_a_frozen_replica_is_cut_by_bfd_before_the_hold_timer") {
        return;
    }
    let mut lab = Lab::with_both_replicas(BFD, 3000);
    lab.wait_bfd_up(0);
    lab.wait_bfd_up(1);

    lab.signal(0, "-STOP");
    lab.wait_only(1, VIP4);
    lab.wait_only(1, VIP6);
    // Why the router dropped the frozen replica's sessions: BFD, not the
    // hold timer.
    for addr in [LINKS[0].speaker4, LINKS[0].speaker6] {
        let n = lab.wait(&format!("{addr}'s last reset"), || {
            let n = lab.neighbor(addr);
            (n.get("bgpState")?.as_str()? != "Established").then_some(n)
        });
        // FRR 8.4 resets the session for "BFD down received", with CEASE /
        // BFD Down (RFC 9384) when it can still send it; the hold timer
        // would have said "Hold Timer Expired".
        assert!(
            n["lastResetDueTo"] == "BFD down received"
                || n["lastNotificationReason"] == "Cease/BFD Down",
            "{addr}: {n}"
        );
    }
    // The other replica's BFD sessions stay Up.
    lab.wait_bfd_up(1);
    lab.signal(0, "-KILL");
    lab.wait_exit(0);
}

#[test]
fn with_bfd_a_graceful_stop_takes_bfd_administratively_down() {
    if !runnable("with_bfd_a_graceful_stop_takes_bfd_administratively_down") {
        return;
    }
    let mut lab = Lab::with_both_replicas(BFD, 1000);
    lab.wait_bfd_up(0);

    lab.signal(0, "-TERM");
    let status = lab.wait_exit(0);
    assert!(status.success(), "graceful stop exits cleanly: {status}");
    lab.wait_only(1, VIP4);
    for addr in [LINKS[0].speaker4, LINKS[0].speaker6] {
        let peer = lab.wait(
            &format!("the router's BFD session with {addr} down"),
            || {
                let peer = lab.bfd_peer(addr)?;
                (peer.get("status")?.as_str()? == "down").then_some(peer)
            },
        );
        // AdminDown, not silence: the router knows it was asked.
        assert_eq!(peer["remote-diagnostic"], "administratively down", "{peer}");
    }
}

#[test]
fn a_refused_neighbor_leaves_the_other_session_and_its_route_alone() {
    if !runnable("a_refused_neighbor_leaves_the_other_session_and_its_route_alone") {
        return;
    }
    // The router expects the wrong ASN from replica 0's IPv6 address: it
    // refuses that session with NOTIFICATION "Bad Peer AS".
    let refused = LINKS[0].speaker6;
    let mut lab = Lab::new(Setup {
        wrong_remote_as: Some(refused),
        ..Setup::default()
    });
    lab.start_speaker(0, 3000);
    let good = LINKS[0].speaker4;
    lab.wait_only(0, VIP4);
    // Refused twice (the backoff retried), each time logged with the peer
    // and the router's reason.
    let log_path = lab.dir.path().join("speaker0.log");
    let refusals = |log: &str| {
        log.lines()
            .filter(|l| {
                l.contains("BGP session down")
                    && l.contains("Bad Peer AS")
                    && l.contains(&format!("[{}]:179", LINKS[0].router6))
                    && l.contains("\"refused_open\"")
            })
            .count()
    };
    lab.wait("two refusals in the speaker's log", || {
        let log = std::fs::read_to_string(&log_path).ok()?;
        (refusals(&log) >= 2).then_some(())
    });
    let n = lab.neighbor(good);
    assert_eq!(n["bgpState"], "Established", "{n}");
    assert_eq!(n["connectionsDropped"], 0, "{n}");
    assert_eq!(lab.gateways(VIP4), [good]);
    assert!(lab.gateways(VIP6).is_empty());
}

#[test]
fn a_passive_replica_is_connected_to_by_the_router_and_its_route_installed() {
    if !runnable("a_passive_replica_is_connected_to_by_the_router_and_its_route_installed") {
        return;
    }
    let mut lab = Lab::new(Setup::default());
    // The replica dials nothing; FRR connects to its port 179.
    lab.replicas.start_speaker(0, ",passive=true", 1000);
    lab.wait_only(0, VIP4);
    lab.wait_only(0, VIP6);
    for addr in [LINKS[0].speaker4, LINKS[0].speaker6] {
        let n = lab.neighbor(addr);
        assert_eq!(n["bgpState"], "Established", "{addr}: {n}");
        // The router's side of the connection is the active one: its
        // port is ephemeral, the replica's is 179.
        assert_eq!(n["portForeign"], 179, "{addr}: {n}");
    }
    lab.signal(0, "-TERM");
    assert!(lab.wait_exit(0).success());
    lab.wait("no route after the planned stop", || {
        (lab.gateways(VIP4).is_empty() && lab.gateways(VIP6).is_empty()).then_some(())
    });
}

#[test]
fn with_the_routers_password_the_sessions_establish_and_the_route_is_installed() {
    if !runnable("with_the_routers_password_the_sessions_establish_and_the_route_is_installed") {
        return;
    }
    let mut lab = Lab::with_password();
    lab.start_speaker_with_password(0, PASSWORD);
    lab.wait_only(0, VIP4);
    lab.wait_only(0, VIP6);
    for addr in [LINKS[0].speaker4, LINKS[0].speaker6] {
        let n = lab.neighbor(addr);
        assert_eq!(n["bgpState"], "Established", "{addr}: {n}");
    }
    // Signed alike at both ends: no segment failed the router's check.
    assert_eq!(lab.router_tcp_ext("TCPMD5Failure"), 0, "{}", lab.dump());
}

#[test]
fn with_another_password_no_session_establishes_and_no_route_is_installed() {
    if !runnable("with_another_password_no_session_establishes_and_no_route_is_installed") {
        return;
    }
    let mut lab = Lab::with_password();
    // Replica 1 has the router's password and shows the router takes
    // sessions; replica 0 has another one.
    lab.start_speaker_with_password(1, PASSWORD);
    lab.start_speaker_with_password(0, WRONG_PASSWORD);
    lab.wait_only(1, VIP4);
    lab.wait_only(1, VIP6);
    // Each of replica 0's sessions failed once, as a timeout that names
    // TCP-MD5: the router's kernel dropped the SYNs unanswered.
    let log_path = lab.dir.path().join("speaker0.log");
    let timeouts = |log: &str, router: &str| {
        log.lines()
            .filter(|l| {
                l.contains("BGP session down")
                    && l.contains(router)
                    && l.contains("with TCP-MD5 configured")
                    && l.contains("\"timeout\"")
            })
            .count()
    };
    lab.wait("a timeout naming TCP-MD5 on both sessions", || {
        let log = std::fs::read_to_string(&log_path).ok()?;
        let v4 = format!("{}:179", LINKS[0].router4);
        let v6 = format!("[{}]:179", LINKS[0].router6);
        (timeouts(&log, &v4) >= 1 && timeouts(&log, &v6) >= 1).then_some(())
    });
    assert!(lab.router_tcp_ext("TCPMD5Failure") > 0, "{}", lab.dump());
    for addr in [LINKS[0].speaker4, LINKS[0].speaker6] {
        let n = lab.neighbor(addr);
        assert_ne!(n["bgpState"], "Established", "{addr}: {n}");
        assert_eq!(n["connectionsEstablished"], 0, "{addr}: {n}");
    }
    // Only the replica with the router's password is a next hop.
    assert_eq!(lab.gateways(VIP4), [LINKS[1].speaker4]);
    assert_eq!(lab.gateways(VIP6), [LINKS[1].speaker6]);
    // The password is in no log line.
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains(WRONG_PASSWORD), "{log}");
}

impl Lab {
    /// A router with `bgp graceful-restart` and replica 0's speaker
    /// offering graceful restart with `restart_time` seconds (none:
    /// `None`), its routes installed.
    fn graceful_restart(restart_time: Option<u64>) -> Lab {
        Lab::graceful_restart_with(GRACEFUL_RESTART, restart_time)
    }

    fn graceful_restart_with(setup: Setup, restart_time: Option<u64>) -> Lab {
        let mut lab = Lab::named("tpgr", setup);
        if let Some(time) = restart_time {
            lab.replicas.speaker_args = vec!["--graceful-restart-time".into(), time.to_string()];
        }
        lab.start_speaker(0, 1000);
        lab.wait_only(0, VIP4);
        lab.wait_only(0, VIP6);
        lab
    }

    /// Whether the router's path for `vip` from replica 0 is marked stale
    /// (`None`: no path from it).
    fn stale(&self, vip: &str) -> Option<bool> {
        let (family, len, hop) = if vip.contains(':') {
            ("ipv6", 128, LINKS[0].speaker6)
        } else {
            ("ipv4", 32, LINKS[0].speaker4)
        };
        let out = self.vtysh(&format!("show bgp {family} unicast {vip}/{len} json"));
        let route: serde_json::Value = serde_json::from_str(&out).ok()?;
        let path = route
            .get("paths")?
            .as_array()?
            .iter()
            .find(|p| p.pointer("/peer/peerId").and_then(|v| v.as_str()) == Some(hop))?;
        Some(path.get("stale").and_then(|s| s.as_bool()).unwrap_or(false))
    }

    /// Polls every 50 ms until `done`, failing as soon as the router's
    /// kernel lacks replica 0's route for either address.
    fn route_kept_until<T>(&self, what: &str, mut done: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + netns::PATIENCE;
        loop {
            for vip in [VIP4, VIP6] {
                assert!(
                    self.only(0, vip),
                    "{vip} left the router's kernel while waiting for {what}\n{}",
                    self.dump()
                );
            }
            if let Some(v) = done() {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\n{}",
                self.dump()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn with_graceful_restart_a_killed_and_restarted_replica_keeps_its_route_throughout() {
    if !runnable("with_graceful_restart_a_killed_and_restarted_replica_keeps_its_route_throughout")
    {
        return;
    }
    let mut lab = Lab::graceful_restart(Some(120));
    for addr in [LINKS[0].speaker4, LINKS[0].speaker6] {
        let n = lab.neighbor(addr);
        assert!(
            n.to_string().contains("gracefulRestart"),
            "{addr}: the router sees the capability: {n}"
        );
    }
    lab.signal(0, "-KILL");
    lab.wait_exit(0);
    // The session is gone (no NOTIFICATION, the socket closed) and the
    // router keeps the routes, marked stale.
    lab.route_kept_until("the router to mark the paths stale", || {
        (lab.stale(VIP4) == Some(true) && lab.stale(VIP6) == Some(true)).then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    lab.start_speaker(0, 1000);
    // Announced again and End-of-RIB: fresh, never gone meanwhile.
    lab.route_kept_until("fresh paths after End-of-RIB", || {
        (lab.stale(VIP4) == Some(false) && lab.stale(VIP6) == Some(false)).then_some(())
    });
    let log = std::fs::read_to_string(lab.dir.path().join("speaker0.log")).unwrap();
    assert!(log.contains("End-of-RIB sent"), "{log}");
}

#[test]
fn with_graceful_restart_and_bfd_a_killed_and_restarted_replica_keeps_its_route() {
    if !runnable("with_graceful_restart_and_bfd_a_killed_and_restarted_replica_keeps_its_route") {
        return;
    }
    let mut lab = Lab::graceful_restart_with(
        Setup {
            bfd: true,
            ..GRACEFUL_RESTART
        },
        Some(120),
    );
    lab.wait_bfd_up(0);
    lab.signal(0, "-KILL");
    lab.wait_exit(0);
    // BFD goes down 300 ms later too; the router was told (the C bit)
    // that BFD fails with the BGP speaker, so it keeps restarting.
    lab.route_kept_until("the router to mark the paths stale", || {
        (lab.stale(VIP4) == Some(true) && lab.stale(VIP6) == Some(true)).then_some(())
    });
    std::thread::sleep(Duration::from_millis(1000));
    lab.start_speaker(0, 1000);
    lab.route_kept_until("fresh paths after End-of-RIB", || {
        (lab.stale(VIP4) == Some(false) && lab.stale(VIP6) == Some(false)).then_some(())
    });
    lab.wait_bfd_up(0);
}

#[test]
fn without_graceful_restart_a_killed_replica_loses_its_route_at_once() {
    if !runnable("without_graceful_restart_a_killed_replica_loses_its_route_at_once") {
        return;
    }
    // The same router, a speaker without the capability.
    let mut lab = Lab::graceful_restart(None);
    lab.signal(0, "-KILL");
    lab.wait_exit(0);
    lab.wait("no route", || {
        (lab.gateways(VIP4).is_empty() && lab.gateways(VIP6).is_empty()).then_some(())
    });
}

#[test]
fn with_graceful_restart_a_replica_that_stays_away_loses_its_route_after_the_restart_time() {
    if !runnable(
        "with_graceful_restart_a_replica_that_stays_away_loses_its_route_after_the_restart_time",
    ) {
        return;
    }
    let mut lab = Lab::graceful_restart(Some(3));
    lab.signal(0, "-KILL");
    let killed = Instant::now();
    lab.wait_exit(0);
    lab.route_kept_until("stale paths", || {
        (lab.stale(VIP4) == Some(true)).then_some(())
    });
    lab.wait("no route once the restart time passed", || {
        (lab.gateways(VIP4).is_empty() && lab.gateways(VIP6).is_empty()).then_some(())
    });
    assert!(
        killed.elapsed() >= Duration::from_secs(2),
        "kept for the restart time, not dropped at once: {:?}",
        killed.elapsed()
    );
}

#[test]
fn with_graceful_restart_a_frozen_replica_still_loses_its_route_at_the_hold_timer() {
    if !runnable("with_graceful_restart_a_frozen_replica_still_loses_its_route_at_the_hold_timer") {
        return;
    }
    let mut lab = Lab::graceful_restart(Some(120));
    // Silent, its socket open: the router's hold timer expires and it
    // sends a NOTIFICATION, after which (no N bit) nothing is kept.
    lab.signal(0, "-STOP");
    lab.wait("no route after the hold timer", || {
        (lab.gateways(VIP4).is_empty() && lab.gateways(VIP6).is_empty()).then_some(())
    });
    lab.signal(0, "-KILL");
    lab.wait_exit(0);
}

#[test]
fn with_graceful_restart_a_planned_stop_still_withdraws() {
    if !runnable("with_graceful_restart_a_planned_stop_still_withdraws") {
        return;
    }
    let mut lab = Lab::graceful_restart(Some(120));
    lab.signal(0, "-TERM");
    let status = lab.wait_exit(0);
    assert!(status.success(), "graceful stop exits cleanly: {status}");
    // Withdrawn and the session ended by CEASE (no N bit: no graceful
    // restart after a NOTIFICATION): nothing kept stale.
    lab.wait("no route after the planned stop", || {
        (lab.gateways(VIP4).is_empty()
            && lab.gateways(VIP6).is_empty()
            && lab.stale(VIP4).is_none()
            && lab.stale(VIP6).is_none())
        .then_some(())
    });
}

/// `runs` rounds of `signal` to replica 0 (restarted each round, replica
/// 1 running throughout): the time until the router's kernel has one next
/// hop left for the IPv4 address.
fn time_failovers(lab: &mut Lab, signal: &str, runs: usize) -> Vec<Duration> {
    let mut times = Vec::new();
    for _ in 0..runs {
        lab.start_speaker(0, 3000);
        lab.wait_for_ecmp();
        if lab.setup.bfd {
            lab.wait_bfd_up(0);
        }
        // Let the new session settle past its first keepalives.
        std::thread::sleep(Duration::from_secs(2));
        // Still both next hops and, with BFD, still Up: the clock starts
        // from a steady state.
        lab.wait_for_ecmp();
        if lab.setup.bfd {
            lab.wait_bfd_up(0);
        }
        let failed = Instant::now();
        lab.signal(0, signal);
        lab.wait_only(1, VIP4);
        times.push(failed.elapsed());
        lab.signal(0, "-KILL");
        lab.wait_exit(0);
    }
    times.sort();
    times
}

/// Not a check: the figures docs/announce.md quotes.
/// `TEAPOT_FAILOVER_RUNS` rounds each of SIGKILL and of SIGSTOP (a silent
/// replica) to one replica, timed until the router's kernel has one next
/// hop left; SIGSTOP once more with BFD at 100 ms x 3.
#[test]
#[ignore]
fn measure_failover() {
    if !runnable("measure_failover") {
        return;
    }
    let runs: usize = std::env::var("TEAPOT_FAILOVER_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let rows = [
        (Setup::default(), "-KILL", "keepalive 1 s / hold 3 s"),
        (Setup::default(), "-STOP", "keepalive 1 s / hold 3 s"),
        (BFD, "-STOP", "keepalive 1 s / hold 3 s, BFD 100 ms x 3"),
    ];
    let mut lab: Option<Lab> = None;
    for (setup, signal, timers) in rows {
        if lab.as_ref().is_none_or(|l| l.setup.bfd != setup.bfd) {
            drop(lab.take());
            let mut fresh = Lab::new(setup);
            fresh.start_speaker(1, 3000);
            lab = Some(fresh);
        }
        let times = time_failovers(lab.as_mut().unwrap(), signal, runs);
        eprintln!(
            "SIG{} -> one next hop, {runs} runs, {timers}: median {:?}, worst {:?}, all {:?}",
            &signal[1..],
            times[times.len() / 2],
            times[times.len() - 1],
            times,
        );
    }
}
