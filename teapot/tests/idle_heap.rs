//! What an idle connection keeps on the proxy's heap, counted by
//! allocation rather than read off the RSS: the proxy runs in this
//! process under dhat's counting allocator, and a client (this test
//! binary run again as a child process, so its own connection state is
//! not counted) opens connections one after another, each with one
//! request answered, and leaves them open. The heap that grows with them,
//! divided by their number, is what one idle connection costs the proxy
//! besides the kernel's socket; the RSS figures of benches/http.md add
//! the allocator's page rounding.
//!
//! `TEAPOT_IDLE_HEAP_PROFILE=FILE` writes dhat's profile with every
//! connection still open: its "at end" figures are what each allocation
//! site holds for idle connections (view it with dhat's `dh_view.html`).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::json;
use teapot_testkit::certs;
use teapot_testkit::client::{Connection, Proto, Request, Transport};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const HOST: &str = "web.test";
/// Connections opened before counting: pools, maps and the timer wheel
/// reach their working size.
const WARM: usize = 50;
/// Connections counted.
const IDLE: usize = 300;
/// Set in the child: `KIND ADDR`.
const CLIENT: &str = "TEAPOT_IDLE_HEAP_CLIENT";

/// The kinds of idle connection, and the heap bytes each may keep (the
/// figures of a debug build, whose futures are larger than the release
/// build's). For scale, RSS per idle connection of the peers
/// (benches/http.md): nginx 0.6 KiB plain, 16 KiB HTTPS, 22 KiB HTTP/2;
/// HAProxy 1.3, 15, 21.
const KINDS: [(&str, usize); 3] = [
    // The task with the engine's state (1.1 KiB), the socket's
    // registration with the runtime (256 B), one timer (112 B).
    ("http1", 1536),
    // Plus rustls' connection (its state, both directions' keys) and
    // Pingora's TLS stream and digests: 6.7 KiB measured.
    ("https", 7680),
    // Plus the h2 connection (HPACK tables, flow control, the connection's
    // future): 9.4 KiB measured.
    ("h2", 10 * 1024),
];

#[test]
fn idle_connections_keep_little_heap() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if let Ok(spec) = std::env::var(CLIENT) {
        return client(&spec);
    }
    let profile = std::env::var_os("TEAPOT_IDLE_HEAP_PROFILE");
    let profiler = match &profile {
        Some(file) => dhat::Profiler::builder().file_name(file).build(),
        None => dhat::Profiler::new_heap(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (addrs, proxy, _dir, _backend) = runtime.block_on(async {
        let backend = echo("shop", "svc-web", "web-0").await;
        let mut manifests = echo_service("shop", "svc-web", &[&backend]);
        let mut ingress = simple_ingress("shop", "web", HOST, "svc-web");
        ingress["spec"]["tls"] = json!([{ "hosts": [HOST], "secretName": "web-tls" }]);
        // Plain HTTP/1.1 is measured on a forwarded request, not on the
        // TLS host's default redirect to HTTPS.
        ingress["metadata"]["annotations"] =
            json!({ "nginx.ingress.kubernetes.io/ssl-redirect": "false" });
        manifests.push(ingress);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("manifests.yaml"), docs(&manifests)).unwrap();
        let cert = certs::self_signed(&[HOST]);
        std::fs::write(
            dir.path().join("secret.yaml"),
            certs::tls_secret_yaml("shop", "web-tls", &cert),
        )
        .unwrap();
        let mut config = teapot_proxy::server::ProxyConfig::new(dir.path().to_path_buf());
        config.serving_threads = 1;
        config.edge.max_connections_per_client = 0;
        let listeners = teapot_proxy::server::Listeners::bind(
            Some("127.0.0.1:0"),
            Some("127.0.0.1:0"),
            "127.0.0.1:0",
        )
        .unwrap();
        let addrs = listeners.addrs().unwrap();
        let proxy = tokio::spawn(teapot_proxy::server::run(config, listeners, async {
            let _ = stopped.await;
        }));
        (addrs, proxy, dir, backend)
    });
    let mut measured = Vec::new();
    let mut clients = Vec::new();
    for (kind, budget) in KINDS {
        let addr = match kind {
            "http1" => addrs.http.unwrap(),
            _ => addrs.https.unwrap(),
        };
        let (per_connection, child) = measure(kind, addr);
        eprintln!("{kind}: {per_connection} B of heap per idle connection (budget {budget})");
        measured.push((kind, per_connection, budget));
        clients.push(child);
    }
    // The profile's "at end" is this moment: every connection still open.
    drop(profiler);
    for mut child in clients {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = stop.send(());
    runtime.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(30), proxy).await;
    });
    for (kind, per_connection, budget) in measured {
        assert!(
            per_connection <= budget,
            "an idle {kind} connection keeps {per_connection} B of heap (budget {budget})"
        );
    }
}

/// Heap bytes per idle `kind` connection: the growth while the child
/// opens [`IDLE`] of them, after [`WARM`]. The child keeps them open.
fn measure(kind: &str, addr: SocketAddr) -> (usize, Child) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "idle_connections_keep_little_heap",
            "--nocapture",
        ])
        .env(CLIENT, format!("{kind} {addr}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut said = BufReader::new(child.stdout.take().unwrap());
    let mut to_child = child.stdin.take().unwrap();
    wait_for(&mut said, "warm");
    let before = settled_heap();
    writeln!(to_child, "open").unwrap();
    wait_for(&mut said, "open");
    let after = settled_heap();
    // The child's stdin stays open: it holds its connections until killed.
    std::mem::forget(to_child);
    (after.saturating_sub(before) / IDLE, child)
}

fn wait_for(said: &mut impl BufRead, what: &str) {
    let want = format!("idle-client: {what}");
    let mut line = String::new();
    loop {
        line.clear();
        let n = said.read_line(&mut line).unwrap();
        assert!(n > 0, "the client ended before saying {want:?}");
        if line.trim() == want {
            return;
        }
        if let Some(error) = line.trim().strip_prefix("idle-client: error ") {
            panic!("the client failed: {error}");
        }
    }
}

/// The heap once the proxy has gone quiet: each connection gives its
/// request buffers back when its next read would block, a moment after
/// the answer went out.
fn settled_heap() -> usize {
    let mut last = dhat::HeapStats::get().curr_bytes;
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = dhat::HeapStats::get().curr_bytes;
        if now.abs_diff(last) < 4096 {
            return now;
        }
        last = now;
    }
}

/// The child: opens [`WARM`] connections, says so, waits for the word,
/// opens [`IDLE`] more, says so, and holds them until it is killed.
fn client(spec: &str) {
    let (kind, addr) = spec.split_once(' ').unwrap();
    let addr: SocketAddr = addr.parse().unwrap();
    let (transport, proto) = match kind {
        "http1" => (Transport::Plain, Proto::Http1),
        "https" => (Transport::tls_insecure(HOST), Proto::Http1),
        _ => (Transport::tls_insecure(HOST), Proto::Http2),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let open = |n: usize, held: &mut Vec<Connection>| {
        runtime.block_on(async {
            for _ in 0..n {
                let opened = async {
                    let mut c = Connection::open(addr, &transport, proto).await?;
                    let answer = c.send(&Request::get(HOST, "/")).await?;
                    anyhow::ensure!(answer.status == 200, "status {}", answer.status);
                    anyhow::Ok(c)
                };
                match opened.await {
                    Ok(c) => held.push(c),
                    Err(e) => {
                        println!("idle-client: error {e:#}");
                        std::process::exit(1);
                    }
                }
            }
        })
    };
    let mut held = Vec::new();
    open(WARM, &mut held);
    println!("idle-client: warm");
    let mut word = String::new();
    std::io::stdin().read_line(&mut word).unwrap();
    open(IDLE, &mut held);
    println!("idle-client: open");
    // Holds the connections (their drivers keep running) until killed.
    runtime.block_on(std::future::pending::<()>());
}
