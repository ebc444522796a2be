//! An idle replica sleeps: the real `teapot proxy` in each mode (manifests,
//! kube against the API double, DNS, BGP with a session to a router this
//! test plays, L2 alone in manifests mode and three L2 replicas in kube
//! mode in network namespaces), left with no traffic and no changes, uses
//! almost no CPU.
//!
//! The check is for a spin (a loop woken at once, again and again, by a
//! watch it never marks seen), not a performance figure: the bound is a
//! generous share of one core, far above what a replica at rest uses and
//! far below a spinning task (which takes a whole core, or near it on a
//! busy machine). `benches/src/bin/rest-cpu.rs` measures the real figure
//! on the release build.
//!
//! The L2 tests also count the passes of the loops that follow the
//! announcement's inputs (`teapot_announce_wakeups_total`): at rest they
//! wake for the Lease renewals they see and nothing else, no poll.
//!
//! The L2 tests need root, iproute2 and curl (announce/tests/netns/mod.rs
//! says when they skip).
//!
//! Run with `cargo test -p teapot --test rest_cpu_e2e`.

#[path = "../../announce/tests/netns/mod.rs"]
mod netns;

mod common;

use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use teapot_announce::wire::{self, Family, Message, Open};
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::process::ProxyProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// How long a replica is left alone after it is up before its CPU time is
/// read: the first compile, the first announcements and Lease rounds are
/// over by then.
const SETTLE: Duration = Duration::from_secs(3);
/// The window the CPU time is read over.
const WINDOW: Duration = Duration::from_secs(3);
/// The share of one core above which a replica at rest is spinning. At
/// rest the debug build uses a few percent at most (BFD packets, Lease
/// renewals); a spin uses 40-120 %.
const SPIN: f64 = 0.15;

/// The most passes a second the announcement's loops (the follow loop,
/// BFD liveness) may make at rest, per replica on the segment: they wake
/// for each Lease renewal they see (one a second per replica) and for
/// nothing else; a poll (every 20 ms, every 100 ms) is far above.
const WAKES_PER_REPLICA: f64 = 2.0;

/// `teapot_announce_wakeups_total` by loop, from the admin listener on
/// 127.0.0.1:9901 in namespace `ns`.
fn wakes(ns: &str) -> std::collections::BTreeMap<String, u64> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-sf", "-m", "2"])
        .arg("http://127.0.0.1:9901/metrics")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("teapot_announce_wakeups_total{loop=\""))
        .filter_map(|l| {
            let (name, count) = l.split_once("\"} ")?;
            Some((name.to_string(), count.parse().ok()?))
        })
        .collect()
}

/// Each loop's passes a second over [`WINDOW`], for each namespace's
/// replica, checked against `replicas` on the segment.
async fn assert_wakes_at_rest(mode: &str, namespaces: &[String], replicas: usize) {
    let before: Vec<_> = namespaces.iter().map(|ns| wakes(ns)).collect();
    let start = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let after: Vec<_> = namespaces.iter().map(|ns| wakes(ns)).collect();
    let wall = start.elapsed().as_secs_f64();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let rates: Vec<(String, f64)> = a
            .iter()
            .map(|(name, n)| {
                (
                    name.clone(),
                    (n - b.get(name).copied().unwrap_or(0)) as f64 / wall,
                )
            })
            .collect();
        eprintln!("{mode}: replica {i} wakes a second: {rates:.1?}");
        assert!(
            a.contains_key("follow"),
            "{mode}: replica {i} counts no wake-ups"
        );
        for (name, rate) in rates {
            assert!(
                rate <= WAKES_PER_REPLICA * replicas as f64,
                "{mode}: replica {i}'s {name} loop woke {rate:.1} times a second at rest"
            );
        }
    }
}

fn curl_missing() -> Option<String> {
    Command::new("curl")
        .arg("--version")
        .output()
        .err()
        .map(|_| "curl missing".to_string())
}

/// Clock ticks per second of `/proc/PID/stat`'s times.
fn clock_ticks() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// utime + stime of the whole process (every thread, ended ones too), in
/// clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    // The command name may hold spaces; the fields after it do not.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    // Fields 14 and 15 of proc(5); the list starts at field 3.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Each process's CPU use over [`WINDOW`], in shares of one core, all
/// read over the same window.
async fn cpu_at_rest(pids: &[u32]) -> Vec<f64> {
    tokio::time::sleep(SETTLE).await;
    let before: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    let start = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let after: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    let wall = start.elapsed().as_secs_f64();
    let hz = clock_ticks();
    before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a - b) as f64 / hz / wall)
        .collect()
}

fn assert_at_rest(mode: &str, shares: &[f64]) {
    eprintln!("{mode}: {shares:.3?} of a core at rest");
    for (i, share) in shares.iter().enumerate() {
        assert!(
            *share < SPIN,
            "{mode}: replica {i} used {:.0} % of a core with no traffic and no changes (all: {shares:?})",
            share * 100.0
        );
    }
}

#[tokio::test]
async fn manifests_mode_at_rest() {
    let h = Harness::start(&[]).await;
    assert_at_rest("manifests", &cpu_at_rest(&[h.proxy.pid()]).await);
}

#[tokio::test]
async fn dns_mode_at_rest() {
    let h = Harness::start_with_args(
        &[],
        &[
            "--domain",
            "example.net",
            "--dns-listen",
            "127.0.0.1:0",
            "--dns-address",
            "192.0.2.1",
        ],
    )
    .await;
    assert_at_rest("dns", &cpu_at_rest(&[h.proxy.pid()]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_mode_at_rest() {
    let api = ApiServer::start().await;
    let proxy = ProxyProcess::start_kube(
        &teapot_bin(),
        api.kubeconfig_path(),
        &[
            "--lease-namespace",
            "teapot-system",
            "--domain",
            "example.net",
            "--dns-listen",
            "127.0.0.1:0",
            "--dns-address",
            "192.0.2.1",
        ],
    )
    .await
    .expect("the replica starts");
    assert_at_rest("kube", &cpu_at_rest(&[proxy.pid()]).await);
}

/// With a router that keeps the session up (it asks for no hold timer,
/// so neither side sends keepalives) and drains whatever the proxy sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bgp_mode_at_rest() {
    let router = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = router.local_addr().unwrap().port();
    let peer = format!("127.0.0.1,64500,port={port},hold=0");
    let h = Harness::start_with_args(
        &[],
        &[
            "--bgp-peer",
            &peer,
            "--bgp-asn",
            "64501",
            "--announce",
            "203.0.113.10",
        ],
    )
    .await;
    let (mut stream, _) = tokio::time::timeout(RELOAD_TIMEOUT, router.accept())
        .await
        .expect("the proxy connects")
        .unwrap();
    stream
        .write_all(&wire::encode_open(&Open {
            asn: 64500,
            hold_time_secs: 0,
            router_id: Ipv4Addr::new(192, 0, 2, 254),
            families: vec![Family::Ipv4],
            four_octet_as: true,
        }))
        .await
        .unwrap();
    stream.write_all(&wire::encode_keepalive()).await.unwrap();
    let drain = tokio::spawn(async move {
        let mut buf = Vec::new();
        loop {
            while let Some((message, len)) = wire::decode(&buf).unwrap() {
                buf.drain(..len);
                assert!(
                    !matches!(message, Message::Notification(_)),
                    "the proxy ended the session: {message:?}"
                );
            }
            if stream.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                return;
            }
        }
    });
    h.wait_status("the session established with its route", |s| {
        s["bgp"][0]["state"] == "Established" && s["bgp"][0]["announced"] == 1
    })
    .await;
    assert_at_rest("bgp", &cpu_at_rest(&[h.proxy.pid()]).await);
    drain.abort();
}

/// The L2 tests' segment: 198.18.46.0/24, replicas from .10, the L2
/// address .200; the API double (kube mode) on .254 of a veth from the
/// test's namespace.
const L2_VIP: &str = "198.18.46.200";
const L2_API: &str = "198.18.46.254";

/// `ip netns exec`s `teapot proxy` (exec all the way down: the child's
/// pid is the proxy's), output to `log`.
fn spawn_in(ns: &str, env: &[&str], args: &[String], log: &std::path::Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    Command::new("ip")
        .args(["netns", "exec", ns, "env"])
        .args(env)
        .arg(teapot_bin())
        .arg("proxy")
        .args(args)
        .args(["--https", "off", "--l4", "false"])
        .args(["--l2-interface", "lan", "--announce", L2_VIP])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn holds_vip(ns: &str) -> bool {
    netns::sh(ns, "ip -o addr show dev lan").contains(&format!(" {L2_VIP}/32 "))
}

/// Kills its processes, then removes its link in the test's namespace
/// (declared after the namespaces, it is dropped before them).
struct Processes {
    children: Vec<Child>,
    root_link: Option<String>,
    logs: Vec<std::path::PathBuf>,
}

impl Processes {
    fn dump(&self) -> String {
        self.logs
            .iter()
            .map(|l| {
                let log = std::fs::read_to_string(l).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                format!(
                    "--- {}\n{}\n",
                    l.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect()
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(link) = &self.root_link {
            let _ = Command::new("ip").args(["link", "del", link]).status();
        }
    }
}

/// A namespace with `lan`, one end of a veth whose other end is in
/// `peer`, holding `addr`/24.
fn lan(namespaces: &mut netns::Namespaces, ns: String, peer: &str, peer_port: &str, addr: &str) {
    namespaces.add(ns.clone());
    netns::run(&[
        "ip", "link", "add", peer_port, "netns", peer, "type", "veth", "peer", "name", "lan",
        "netns", &ns,
    ]);
    netns::sh(
        &ns,
        &format!("ip link set lo up && ip addr add {addr}/24 dev lan && ip link set lan up"),
    );
}

/// The issue's case: alone in manifests mode, the replica owns the
/// address; the task merging the L2 pools' owned addresses spun from its
/// first change on.
#[tokio::test]
async fn l2_alone_in_manifests_mode_at_rest() {
    if !netns::runnable("rest_cpu_e2e l2 manifests", curl_missing) {
        return;
    }
    let tag = format!("tprcm{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let mut namespaces = netns::Namespaces(Vec::new());
    let peer = namespaces.add(format!("{tag}p"));
    let ns = format!("{tag}r");
    lan(&mut namespaces, ns.clone(), &peer, "p0", "198.18.46.10");
    netns::sh(&peer, "ip link set p0 up");
    let log = dir.path().join("proxy.log");
    let args: Vec<String> = [
        "--manifests",
        manifests.to_str().unwrap(),
        "--http",
        "127.0.0.1:8080",
        "--admin",
        "127.0.0.1:9901",
    ]
    .map(String::from)
    .into();
    let child = spawn_in(&ns, &[], &args, &log);
    let pid = child.id();
    let processes = Processes {
        children: vec![child],
        root_link: None,
        logs: vec![log],
    };
    netns::wait(
        "the replica holds the L2 address",
        || processes.dump(),
        || holds_vip(&ns).then_some(()),
    );
    let shares = cpu_at_rest(&[pid]).await;
    assert!(holds_vip(&ns), "{}", processes.dump());
    assert_at_rest("l2, manifests", &shares);
    // Alone, no Lease: nothing to wake for but a snapshot swapped in.
    assert_wakes_at_rest("l2, manifests", &[ns], 0).await;
}

/// The issue's other case: three replicas in kube mode on one segment,
/// BFD between them (the default), each live for the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l2_three_replicas_in_kube_mode_at_rest() {
    if !netns::runnable("rest_cpu_e2e l2 kube", curl_missing) {
        return;
    }
    let pid = std::process::id();
    let tag = format!("tprck{pid}");
    let dir = tempfile::tempdir().unwrap();
    let mut namespaces = netns::Namespaces(Vec::new());
    let switch = namespaces.add(format!("{tag}sw"));
    netns::sh(&switch, "ip link add br0 type bridge && ip link set br0 up");
    let root_link = format!("tprck{pid}");
    netns::run(&[
        "ip", "link", "add", &root_link, "type", "veth", "peer", "name", "up0", "netns", &switch,
    ]);
    let mut processes = Processes {
        children: Vec::new(),
        root_link: Some(root_link.clone()),
        logs: Vec::new(),
    };
    netns::run(&[
        "ip",
        "addr",
        "add",
        &format!("{L2_API}/24"),
        "dev",
        &root_link,
    ]);
    netns::run(&["ip", "link", "set", &root_link, "up"]);
    let mut replicas = Vec::new();
    for i in 0..3 {
        let ns = format!("{tag}r{i}");
        let port = format!("p{i}");
        lan(
            &mut namespaces,
            ns.clone(),
            &switch,
            &port,
            &format!("198.18.46.1{i}"),
        );
        replicas.push(ns);
    }
    netns::sh(
        &switch,
        "for p in up0 p0 p1 p2; do ip link set $p master br0 && ip link set $p up; done",
    );
    let api = ApiServer::start_on(format!("{L2_API}:0").parse().unwrap()).await;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::copy(api.kubeconfig_path(), &kubeconfig).unwrap();
    let args: Vec<String> = [
        "--kube",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--http",
        "0.0.0.0:8080",
        "--admin",
        "127.0.0.1:9901",
        "--no-ingress-status",
        "--lease-namespace",
        "teapot-system",
    ]
    .map(String::from)
    .into();
    for (i, ns) in replicas.iter().enumerate() {
        let log = dir.path().join(format!("r{i}.log"));
        let hostname = format!("HOSTNAME=r{i}");
        processes
            .children
            .push(spawn_in(ns, &[&hostname], &args, &log));
        processes.logs.push(log);
    }
    let pids: Vec<u32> = processes.children.iter().map(Child::id).collect();
    let metrics = |ns: &str| {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "curl", "-sf", "-m", "2"])
            .arg("http://127.0.0.1:9901/metrics")
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    netns::wait(
        "every replica live for every other, one holding the address",
        || processes.dump(),
        || {
            let all_live = replicas
                .iter()
                .all(|ns| metrics(ns).is_some_and(|m| m.contains("teapot_l2_live_replicas 3\n")));
            let holders = replicas.iter().filter(|ns| holds_vip(ns)).count();
            (all_live && holders == 1).then_some(())
        },
    );
    let shares = cpu_at_rest(&pids).await;
    assert_at_rest("l2, kube, three replicas", &shares);
    assert_wakes_at_rest("l2, kube, three replicas", &replicas, replicas.len()).await;
}
