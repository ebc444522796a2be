//! What the network-namespace tests share: running commands, the skip
//! rule, polling with a bound, and the BGP topology (a router namespace,
//! two replica namespaces, veth links) the router tests build on.

// Each test file uses its part.
#![allow(dead_code, unused_macros, unused_imports)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Every wait ends here with the state dumped: a bound, not a measurement.
pub const PATIENCE: Duration = Duration::from_secs(40);

fn missing_root_or_ip() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("network namespaces need root".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("ip (iproute2) missing".into());
    }
    None
}

/// `true` when the test may run: root, iproute2 and whatever `extra`
/// finds missing. Otherwise prints why and returns `false`, unless
/// `TEAPOT_REQUIRE_NETNS=1` (CI) makes that a failure.
pub fn runnable(test: &str, extra: impl FnOnce() -> Option<String>) -> bool {
    let Some(reason) = missing_root_or_ip().or_else(extra) else {
        return true;
    };
    if std::env::var("TEAPOT_REQUIRE_NETNS").as_deref() == Ok("1") {
        panic!("{test}: {reason}, and TEAPOT_REQUIRE_NETNS=1");
    }
    eprintln!("SKIP {test}: {reason}");
    false
}

/// Runs a command that must succeed; its stdout.
pub fn run(cmd: &[&str]) -> String {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a shell script inside namespace `ns`.
pub fn sh(ns: &str, script: &str) -> String {
    run(&["ip", "netns", "exec", ns, "sh", "-c", script])
}

/// Polls `check` every 20 ms until it yields; after [`PATIENCE`], fails
/// with `dump()`.
pub fn wait<T>(what: &str, dump: impl Fn() -> String, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}\n{}", dump());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` to exit; after [`PATIENCE`], kills it and fails with
/// `dump()`.
pub fn wait_exit(
    mut child: Child,
    what: &str,
    dump: impl Fn() -> String,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not exit\n{}", dump());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Network namespaces deleted on drop, failure included.
pub struct Namespaces(pub Vec<String>);

impl Namespaces {
    pub fn add(&mut self, name: String) -> String {
        run(&["ip", "netns", "add", &name]);
        self.0.push(name.clone());
        name
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

pub const ROUTER_ASN: u32 = 64500;
pub const SPEAKER_ASN: u32 = 64501;
/// What both replicas announce.
pub const VIP4: &str = "203.0.113.10";
pub const VIP6: &str = "2001:db8:ffff::10";

/// One replica's link to the router.
pub struct Link {
    pub router4: &'static str,
    pub speaker4: &'static str,
    pub router6: &'static str,
    pub speaker6: &'static str,
}

pub const LINKS: [Link; 2] = [
    Link {
        router4: "192.0.2.1",
        speaker4: "192.0.2.2",
        router6: "2001:db8:1::1",
        speaker6: "2001:db8:1::2",
    },
    Link {
        router4: "198.51.100.1",
        speaker4: "198.51.100.2",
        router6: "2001:db8:2::1",
        speaker6: "2001:db8:2::2",
    },
];

/// `Deref` and `DerefMut` from a router test's lab to its [`Replicas`]:
/// `lab.signal(..)`, `lab.gateways(..)` read as the lab's.
macro_rules! labs_are_replicas {
    ($lab:ty) => {
        impl std::ops::Deref for $lab {
            type Target = netns::Replicas;
            fn deref(&self) -> &netns::Replicas {
                &self.replicas
            }
        }

        impl std::ops::DerefMut for $lab {
            fn deref_mut(&mut self) -> &mut netns::Replicas {
                &mut self.replicas
            }
        }
    };
}
pub(crate) use labs_are_replicas;

/// A router namespace (forwarding on, no daemon yet) and one namespace per
/// replica with a veth link on [`LINKS`]' addresses, the replicas'
/// speakers (`teapot-announce bgp`) and their logs; all removed on drop.
pub struct Replicas {
    pub router: String,
    pub speakers: Vec<String>,
    pub dir: tempfile::TempDir,
    /// Added to every speaker's command line.
    pub speaker_args: Vec<String>,
    children: Vec<Option<Child>>,
    // Last: dropped after the speakers are killed.
    namespaces: Namespaces,
}

impl Replicas {
    /// `tag` is unique per test (the caller's prefix, pid and a counter).
    pub fn new(tag: &str) -> Replicas {
        let mut replicas = Replicas {
            router: format!("{tag}r"),
            speakers: (1..=LINKS.len()).map(|i| format!("{tag}s{i}")).collect(),
            dir: tempfile::tempdir().unwrap(),
            speaker_args: Vec::new(),
            children: Vec::new(),
            namespaces: Namespaces(Vec::new()),
        };
        // From here on, Drop cleans whatever was made.
        replicas.namespaces.add(replicas.router.clone());
        for ns in replicas.speakers.clone() {
            replicas.namespaces.add(ns);
        }
        // No duplicate detection on the links about to be made: a router
        // resets an IPv6 session (FRR: FSM error) while its interface's
        // link-local address is still tentative.
        for ns in std::iter::once(&replicas.router).chain(&replicas.speakers) {
            sh(
                ns,
                "sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0",
            );
        }
        replicas.router_sh("sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1");
        replicas.router_sh("ip link set lo up");
        for (i, link) in LINKS.iter().enumerate() {
            let ns = &replicas.speakers[i];
            let port = format!("s{}", i + 1);
            run(&[
                "ip",
                "link",
                "add",
                &port,
                "netns",
                &replicas.router,
                "type",
                "veth",
                "peer",
                "name",
                "uplink",
                "netns",
                ns,
            ]);
            replicas.router_sh(&format!(
                "ip addr add {}/24 dev {port} && ip addr add {}/64 dev {port} nodad && ip link set {port} up",
                link.router4, link.router6
            ));
            sh(
                ns,
                &format!(
                    "ip link set lo up && ip addr add {}/24 dev uplink && ip addr add {}/64 dev uplink nodad && ip link set uplink up",
                    link.speaker4, link.speaker6
                ),
            );
        }
        replicas
    }

    pub fn router_sh(&self, script: &str) -> String {
        sh(&self.router, script)
    }

    /// Starts replica `i`'s speaker, announcing both addresses over an
    /// IPv4 and an IPv6 session (keepalive 1 s, hold 3 s, then
    /// `peer_options`).
    pub fn start_speaker(&mut self, i: usize, peer_options: &str, graceful_wait_ms: u64) {
        let link = &LINKS[i];
        let log = std::fs::File::create(self.dir.path().join(format!("speaker{i}.log"))).unwrap();
        let peer = |router: &str| format!("{router},{ROUTER_ASN},hold=3,keepalive=1{peer_options}");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.speakers[i]])
            .args([
                // `option_env!`: teapot's own tests include this file for
                // its generic half and never start a speaker (outside
                // teapot-announce's tests, one on PATH would be used).
                option_env!("CARGO_BIN_EXE_teapot-announce").unwrap_or("teapot-announce"),
                "bgp",
            ])
            .args(["--asn", &SPEAKER_ASN.to_string()])
            .args(["--peer", &peer(link.router4), "--peer", &peer(link.router6)])
            .args(["--announce", VIP4, "--announce", VIP6])
            .args(["--graceful-wait-ms", &graceful_wait_ms.to_string()])
            .args(&self.speaker_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        if self.children.len() <= i {
            self.children.resize_with(i + 1, || None);
        }
        self.children[i] = Some(child);
    }

    pub fn signal(&self, i: usize, signal: &str) {
        let pid = self.children[i].as_ref().expect("speaker running").id();
        run(&["kill", signal, &pid.to_string()]);
    }

    /// Replica `i`'s speaker, no longer killed on drop.
    pub fn take_speaker(&mut self, i: usize) -> Child {
        self.children[i].take().expect("speaker running")
    }

    /// The next hops the router's kernel uses for `prefix`.
    pub fn gateways(&self, prefix: &str) -> Vec<String> {
        let family = if prefix.contains(':') { "-6" } else { "-4" };
        let out = self.router_sh(&format!("ip {family} -j route show {prefix}"));
        let routes: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
        let mut found = Vec::new();
        for route in routes.as_array().into_iter().flatten() {
            let hops = match route.get("nexthops").and_then(|h| h.as_array()) {
                Some(hops) => hops.clone(),
                None => vec![route.clone()],
            };
            for hop in hops {
                if let Some(gw) = hop.get("gateway").and_then(|g| g.as_str()) {
                    found.push(gw.to_string());
                }
            }
        }
        found.sort();
        found
    }

    /// Replica `i`'s next hop is the only one for `vip`.
    pub fn only(&self, i: usize, vip: &str) -> bool {
        let hop = if vip.contains(':') {
            LINKS[i].speaker6
        } else {
            LINKS[i].speaker4
        };
        self.gateways(vip) == [hop]
    }

    /// Both replicas are next hops for `vip`.
    pub fn ecmp(&self, vip: &str) -> bool {
        let expected: Vec<&str> = LINKS
            .iter()
            .map(|l| {
                if vip.contains(':') {
                    l.speaker6
                } else {
                    l.speaker4
                }
            })
            .collect();
        self.gateways(vip) == expected
    }

    /// The router's routes and every speaker's log, for a failure message.
    pub fn dump(&self) -> String {
        let mut out = self.router_sh("ip route; ip -6 route");
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "log") {
                out.push_str(&format!(
                    "--- {}\n{}",
                    entry.path().display(),
                    std::fs::read_to_string(entry.path()).unwrap_or_default()
                ));
            }
        }
        out
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
