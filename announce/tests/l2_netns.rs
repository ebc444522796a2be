//! Layer-2 mode on a real segment: a bridge in one network namespace, a
//! client and two replicas (`teapot-announce l2`) in three more. The
//! client's neighbour entry for the address must point at the owner the
//! hash names, and move to the other replica, without any traffic from the
//! client, when the owner leaves the live set.
//!
//! Needs root and iproute2 (tests/netns/mod.rs says when it skips).

mod netns;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::IpAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use netns::{Namespaces, run, sh};
use teapot_announce::l2::owner;

const VIP4: &str = "192.0.2.100";
const VIP6: &str = "2001:db8:10::100";
const REPLICAS: [(&str, &str, &str); 2] = [
    ("a", "192.0.2.11", "2001:db8:10::11"),
    ("b", "192.0.2.12", "2001:db8:10::12"),
];

struct Segment {
    client: String,
    replicas: Vec<String>,
    dir: tempfile::TempDir,
    announcers: Vec<(Child, ChildStdin)>,
    namespaces: Namespaces,
}

static SEGMENTS: AtomicUsize = AtomicUsize::new(0);

impl Segment {
    fn new() -> Segment {
        let tag = format!(
            "tpl{}x{}",
            std::process::id(),
            SEGMENTS.fetch_add(1, Ordering::Relaxed)
        );
        let mut seg = Segment {
            client: format!("{tag}c"),
            replicas: REPLICAS
                .iter()
                .map(|(n, _, _)| format!("{tag}{n}"))
                .collect(),
            dir: tempfile::tempdir().unwrap(),
            announcers: Vec::new(),
            namespaces: Namespaces(Vec::new()),
        };
        let switch = seg.namespaces.add(format!("{tag}sw"));
        sh(&switch, "ip link add br0 type bridge && ip link set br0 up");
        let hosts = std::iter::once((seg.client.clone(), "192.0.2.1", "2001:db8:10::1")).chain(
            REPLICAS
                .iter()
                .zip(seg.replicas.clone())
                .map(|((_, v4, v6), ns)| (ns, *v4, *v6)),
        );
        for (i, (ns, v4, v6)) in hosts.enumerate() {
            seg.namespaces.add(ns.clone());
            let port = format!("p{i}");
            run(&[
                "ip", "link", "add", &port, "netns", &switch, "type", "veth", "peer", "name",
                "lan", "netns", &ns,
            ]);
            sh(
                &switch,
                &format!("ip link set {port} master br0 && ip link set {port} up"),
            );
            sh(
                &ns,
                &format!(
                    "ip link set lo up && ip addr add {v4}/24 dev lan && ip addr add {v6}/64 dev lan nodad && ip link set lan up"
                ),
            );
        }
        seg
    }

    fn mac(&self, replica: usize) -> String {
        let out = sh(&self.replicas[replica], "ip -j link show lan");
        let link: serde_json::Value = serde_json::from_str(&out).unwrap();
        link[0]["address"].as_str().unwrap().to_string()
    }

    fn start(&mut self, replica: usize) {
        let log = std::fs::File::create(self.dir.path().join(format!("l2-{replica}.log"))).unwrap();
        let names: Vec<&str> = REPLICAS.iter().map(|(n, _, _)| *n).collect();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.replicas[replica]])
            .args([env!("CARGO_BIN_EXE_teapot-announce"), "l2"])
            .args(["--interface", "lan", "--replica", REPLICAS[replica].0])
            .args(["--replicas", &names.join(",")])
            .args(["--announce", VIP4, "--announce", VIP6])
            .stdin(Stdio::piped())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        self.announcers.push((child, stdin));
    }

    /// Every announcer learns the new live set.
    fn live(&mut self, names: &[&str]) {
        for (_, stdin) in &mut self.announcers {
            writeln!(stdin, "{}", names.join(",")).unwrap();
        }
    }

    /// The client's neighbour entry for `addr`: its MAC, if any.
    fn neighbour(&self, addr: &str) -> Option<String> {
        let out = sh(&self.client, &format!("ip -j neigh show {addr}"));
        let entries: serde_json::Value = serde_json::from_str(out.trim()).ok()?;
        entries[0]["lladdr"].as_str().map(String::from)
    }

    fn dump(&self) -> String {
        let mut out = sh(&self.client, "ip neigh; ip -6 neigh");
        for ns in &self.replicas {
            out.push_str(&sh(ns, "ip addr show lan"));
        }
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            out.push_str(&format!(
                "--- {}\n{}",
                entry.path().display(),
                std::fs::read_to_string(entry.path()).unwrap_or_default()
            ));
        }
        out
    }

    fn wait<T>(&self, what: &str, check: impl FnMut() -> Option<T>) -> T {
        netns::wait(what, || self.dump(), check)
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.dump());
        }
        for (child, _) in &mut self.announcers {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn the_owner_answers_and_a_new_owner_takes_over_the_clients_neighbour_entry() {
    if !netns::runnable(
        "the_owner_answers_and_a_new_owner_takes_over_the_clients_neighbour_entry",
        || None,
    ) {
        return;
    }
    let mut seg = Segment::new();
    seg.start(0);
    seg.start(1);
    let all: BTreeSet<String> = REPLICAS.iter().map(|(n, _, _)| n.to_string()).collect();

    for vip in [VIP4, VIP6] {
        let first = owner(&vip.parse::<IpAddr>().unwrap(), &all).unwrap();
        let first_i = REPLICAS.iter().position(|(n, _, _)| *n == first).unwrap();
        let first_mac = seg.mac(first_i);
        // The client connects to the address (port 9: a refusal is as good
        // as an answer), so it resolves it: to the owner.
        seg.wait(&format!("{vip} resolved"), || {
            let _ = Command::new("ip")
                .args(["netns", "exec", &seg.client, "timeout", "2", "bash", "-c"])
                .arg(format!("exec 3<>/dev/tcp/{vip}/9"))
                .stderr(Stdio::null())
                .status();
            seg.neighbour(vip)
        });
        assert_eq!(
            seg.neighbour(vip).as_deref(),
            Some(first_mac.as_str()),
            "{vip}"
        );
    }

    // Each address's owner leaves the live set in turn; the other replica
    // takes the address and its announcement rewrites the client's entry
    // with no traffic from the client.
    for (leaving, staying) in [(0, 1), (1, 0)] {
        seg.live(&[REPLICAS[staying].0]);
        let staying_mac = seg.mac(staying);
        for vip in [VIP4, VIP6] {
            seg.wait(&format!("{vip} moving to replica {staying}"), || {
                (seg.neighbour(vip).as_deref() == Some(staying_mac.as_str())).then_some(())
            });
        }
        let left = sh(&seg.replicas[leaving], "ip -br addr show lan");
        assert!(
            !left.contains(VIP4) && !left.contains(VIP6),
            "replica {leaving} still holds the address: {left}"
        );
        seg.live(&[REPLICAS[0].0, REPLICAS[1].0]);
        // Back to the hash's owner before the next round.
        for vip in [VIP4, VIP6] {
            let owner_i = REPLICAS
                .iter()
                .position(|(n, _, _)| Some(*n) == owner(&vip.parse().unwrap(), &all))
                .unwrap();
            let owner_mac = seg.mac(owner_i);
            seg.wait(&format!("{vip} back at its owner"), || {
                (seg.neighbour(vip).as_deref() == Some(owner_mac.as_str())).then_some(())
            });
        }
    }
}
