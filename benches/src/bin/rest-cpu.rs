//! CPU at rest: the release `teapot proxy` in each mode, with no traffic
//! and no changes, as a share of one core (benches/announce.md, "CPU at
//! rest"; the goal is under 1 %).
//!
//! Modes: `manifests` (no cluster), `dns` (`--dns-listen`), `kube` (the
//! API double of teapot-testkit, DNS Leases too), `bgp` (a session to a
//! router this binary plays on loopback, no hold timer), `l2` (alone in
//! manifests mode, `--l2-interface` on a veth in a network namespace) and
//! `l2-kube` (three replicas on one bridge, the API double for their
//! Leases, BFD between them: the figure is each replica's).
//!
//! Each replica is started, left [`SETTLE`] once it is up (ready; the L2
//! address held; the BGP session established), then its utime + stime
//! (every thread) is read over `--seconds`.
//!
//! Run as root after `cargo build --release -p teapot -p teapot-benches`:
//! `target/release/rest-cpu`. Writes benches/results/rest-cpu-DATE.json.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::json;
use teapot_benches::bgp_lab::{poll, run, sh};
use teapot_benches::peers::cpu_seconds;
use teapot_benches::results::{commit, utc_date};
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::process::ProxyProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// After the replica is up: the first compile, announcements and Lease
/// rounds are over.
const SETTLE: Duration = Duration::from_secs(5);
const L2_VIP: &str = "198.18.47.200";
const L2_API: &str = "198.18.47.254";

#[derive(Parser, Debug)]
#[command(about = "CPU of an idle teapot proxy, per mode")]
struct Args {
    /// Seconds each replica's CPU time is read over.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Modes, comma-separated: manifests, dns, kube, bgp, l2, l2-kube.
    #[arg(
        long,
        default_value = "manifests,dns,kube,bgp,l2,l2-kube",
        value_delimiter = ','
    )]
    only: Vec<String>,
    /// The teapot binary (default: beside this one).
    #[arg(long)]
    teapot: Option<PathBuf>,
}

/// Each pid's CPU over `window`, in percent of one core, read over the
/// same window.
fn percent_of_a_core(pids: &[u32], window: Duration) -> Result<Vec<f64>> {
    std::thread::sleep(SETTLE);
    let before: Vec<f64> = pids
        .iter()
        .map(|p| cpu_seconds(*p))
        .collect::<Result<_, _>>()?;
    let start = Instant::now();
    std::thread::sleep(window);
    let after: Vec<f64> = pids
        .iter()
        .map(|p| cpu_seconds(*p))
        .collect::<Result<_, _>>()?;
    let wall = start.elapsed().as_secs_f64();
    Ok(before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a - b) / wall * 100.0)
        .collect())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let teapot = teapot_benches::peers::teapot_bin(args.teapot.as_deref());
    let window = Duration::from_secs(args.seconds);
    let rt = tokio::runtime::Runtime::new()?;
    let mut results = serde_json::Map::new();
    println!("| mode | % of a core at rest |");
    println!("|---|---|");
    for mode in &args.only {
        let shares = match mode.as_str() {
            "manifests" => rt.block_on(manifests(&teapot, &[], window))?,
            "dns" => rt.block_on(manifests(
                &teapot,
                &[
                    "--domain",
                    "example.net",
                    "--dns-listen",
                    "127.0.0.1:0",
                    "--dns-address",
                    "192.0.2.1",
                ],
                window,
            ))?,
            "kube" => rt.block_on(kube(&teapot, window))?,
            "bgp" => rt.block_on(bgp(&teapot, window))?,
            "l2" => l2_alone(&teapot, window)?,
            "l2-kube" => rt.block_on(l2_kube(&teapot, window))?,
            other => bail!("unknown mode {other}"),
        };
        let shown: Vec<String> = shares.iter().map(|s| format!("{s:.2}")).collect();
        println!("| {mode} | {} |", shown.join(", "));
        results.insert(mode.clone(), json!(shares));
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the workspace")?;
    let out = repo.join(format!("benches/results/rest-cpu-{}.json", utc_date()));
    std::fs::create_dir_all(out.parent().unwrap())?;
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&json!({
            "commit": commit(repo),
            "seconds": args.seconds,
            "percent_of_a_core": results,
        }))?,
    )?;
    println!("written to {}", out.display());
    Ok(())
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

async fn manifests(teapot: &Path, extra: &[&str], window: Duration) -> Result<Vec<f64>> {
    let dir = tempfile::tempdir()?;
    let proxy = ProxyProcess::start(teapot, dir.path(), extra).await?;
    let pid = proxy.pid();
    blocking(move || percent_of_a_core(&[pid], window)).await
}

async fn kube(teapot: &Path, window: Duration) -> Result<Vec<f64>> {
    let api = ApiServer::start().await;
    let proxy = ProxyProcess::start_kube(
        teapot,
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
    .await?;
    let pid = proxy.pid();
    blocking(move || percent_of_a_core(&[pid], window)).await
}

/// BGP OPEN from AS 64500, no hold timer, IPv4 unicast and four-octet AS
/// numbers offered.
fn open() -> Vec<u8> {
    let caps: [u8; 16] = [
        2, 6, 1, 4, 0, 1, 0, 1, // multiprotocol: IPv4 unicast
        2, 6, 65, 4, 0, 0, 0xfb, 0xf4, // four-octet AS 64500
    ];
    let mut m = vec![0xff; 16];
    let len = 19 + 10 + caps.len();
    m.extend_from_slice(&(len as u16).to_be_bytes());
    m.push(1);
    m.push(4);
    m.extend_from_slice(&64500u16.to_be_bytes());
    m.extend_from_slice(&0u16.to_be_bytes());
    m.extend_from_slice(&[192, 0, 2, 254]);
    m.push(caps.len() as u8);
    m.extend_from_slice(&caps);
    m
}

async fn bgp(teapot: &Path, window: Duration) -> Result<Vec<f64>> {
    let router = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = router.local_addr()?.port();
    let peer = format!("127.0.0.1,64500,port={port},hold=0");
    let dir = tempfile::tempdir()?;
    let proxy = ProxyProcess::start(
        teapot,
        dir.path(),
        &[
            "--bgp-peer",
            &peer,
            "--bgp-asn",
            "64501",
            "--announce",
            "203.0.113.10",
        ],
    )
    .await?;
    let (mut stream, _) = tokio::time::timeout(Duration::from_secs(30), router.accept())
        .await
        .context("the proxy connects")??;
    stream.write_all(&open()).await?;
    let mut keepalive = vec![0xff; 16];
    keepalive.extend_from_slice(&[0, 19, 4]);
    stream.write_all(&keepalive).await?;
    // Whatever the proxy sends is read and dropped: the session stays up.
    let drain = tokio::spawn(async move {
        let mut buf = vec![0; 4096];
        while stream.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    });
    let admin = proxy.admin;
    poll_established(admin).await?;
    let pid = proxy.pid();
    let shares = blocking(move || percent_of_a_core(&[pid], window)).await;
    drain.abort();
    shares
}

async fn poll_established(admin: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = Command::new("curl")
            .args(["-sf", "-m", "2"])
            .arg(format!("http://{admin}/status"))
            .output()?;
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap_or_default();
        if status["bgp"][0]["state"] == "Established" {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the BGP session never came up: {status}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Namespaces, links and processes, removed on drop (processes first).
#[derive(Default)]
struct Segment {
    children: Vec<Child>,
    root_link: Option<String>,
    namespaces: Vec<String>,
}

impl Drop for Segment {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(link) = &self.root_link {
            let _ = Command::new("ip").args(["link", "del", link]).status();
        }
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

impl Segment {
    fn namespace(&mut self, name: String) -> Result<String> {
        run(&["ip", "netns", "add", &name])?;
        self.namespaces.push(name.clone());
        Ok(name)
    }

    /// Namespace `ns` with `lan` (holding `addr`/24), a veth to `port` in
    /// `peer`.
    fn lan(&mut self, ns: String, peer: &str, port: &str, addr: &str) -> Result<()> {
        self.namespace(ns.clone())?;
        run(&[
            "ip", "link", "add", port, "netns", peer, "type", "veth", "peer", "name", "lan",
            "netns", &ns,
        ])?;
        sh(
            &ns,
            &format!("ip link set lo up && ip addr add {addr}/24 dev lan && ip link set lan up"),
        )?;
        Ok(())
    }

    fn spawn(&mut self, teapot: &Path, ns: &str, env: &[&str], args: &[&str]) -> Result<u32> {
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "env"])
            .args(env)
            .arg(teapot)
            .arg("proxy")
            .args(args)
            .args([
                "--https",
                "off",
                "--l4",
                "false",
                "--admin",
                "127.0.0.1:9901",
            ])
            .args(["--l2-interface", "lan", "--announce", L2_VIP])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let pid = child.id();
        self.children.push(child);
        Ok(pid)
    }
}

fn holds_vip(ns: &str) -> bool {
    sh(ns, "ip -o addr show dev lan").is_ok_and(|a| a.contains(&format!(" {L2_VIP}/32 ")))
}

fn l2_alone(teapot: &Path, window: Duration) -> Result<Vec<f64>> {
    let tag = format!("rcb{}", std::process::id());
    let dir = tempfile::tempdir()?;
    let mut seg = Segment::default();
    let peer = seg.namespace(format!("{tag}p"))?;
    let ns = format!("{tag}r");
    seg.lan(ns.clone(), &peer, "p0", "198.18.47.10")?;
    sh(&peer, "ip link set p0 up")?;
    let manifests = dir.path().to_str().unwrap().to_string();
    let pid = seg.spawn(
        teapot,
        &ns,
        &[],
        &["--manifests", &manifests, "--http", "127.0.0.1:8080"],
    )?;
    poll(
        "the replica holds the L2 address",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || holds_vip(&ns).then_some(()),
    )?;
    percent_of_a_core(&[pid], window)
}

async fn l2_kube(teapot: &Path, window: Duration) -> Result<Vec<f64>> {
    let tag = format!("rck{}", std::process::id());
    let dir = tempfile::tempdir()?;
    let mut seg = Segment::default();
    let switch = seg.namespace(format!("{tag}sw"))?;
    sh(&switch, "ip link add br0 type bridge && ip link set br0 up")?;
    let root_link = format!("{tag}u");
    run(&[
        "ip", "link", "add", &root_link, "type", "veth", "peer", "name", "up0", "netns", &switch,
    ])?;
    seg.root_link = Some(root_link.clone());
    run(&[
        "ip",
        "addr",
        "add",
        &format!("{L2_API}/24"),
        "dev",
        &root_link,
    ])?;
    run(&["ip", "link", "set", &root_link, "up"])?;
    let mut replicas = Vec::new();
    for i in 0..3 {
        let ns = format!("{tag}r{i}");
        seg.lan(
            ns.clone(),
            &switch,
            &format!("p{i}"),
            &format!("198.18.47.1{i}"),
        )?;
        replicas.push(ns);
    }
    sh(
        &switch,
        "for p in up0 p0 p1 p2; do ip link set $p master br0 && ip link set $p up; done",
    )?;
    let api = ApiServer::start_on(format!("{L2_API}:0").parse()?).await;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::copy(api.kubeconfig_path(), &kubeconfig)?;
    let kubeconfig = kubeconfig.to_str().unwrap().to_string();
    let mut pids = Vec::new();
    for (i, ns) in replicas.iter().enumerate() {
        let hostname = format!("HOSTNAME=r{i}");
        pids.push(seg.spawn(
            teapot,
            ns,
            &[&hostname],
            &[
                "--kube",
                "--kubeconfig",
                &kubeconfig,
                "--http",
                "0.0.0.0:8080",
                "--no-ingress-status",
                "--lease-namespace",
                "teapot-system",
            ],
        )?);
    }
    blocking(move || {
        let metrics =
            |ns: &str| sh(ns, "curl -sf -m 2 http://127.0.0.1:9901/metrics").unwrap_or_default();
        poll(
            "every replica live for every other, one holding the address",
            Duration::from_secs(60),
            Duration::from_millis(100),
            || {
                let live = replicas
                    .iter()
                    .all(|ns| metrics(ns).contains("teapot_l2_live_replicas 3\n"));
                let holders = replicas.iter().filter(|ns| holds_vip(ns)).count();
                (live && holders == 1).then_some(())
            },
        )?;
        let shares = percent_of_a_core(&pids, window);
        drop(seg);
        shares
    })
    .await
}
