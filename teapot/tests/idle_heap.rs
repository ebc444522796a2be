//! What an idle keep-alive connection keeps on the heap, counted by
//! allocation rather than read off the RSS: the proxy runs in this
//! process under dhat's counting allocator, a client opens connections
//! one after another, each with one request answered, and leaves them
//! open. The heap that grows with them, divided by their number, is what
//! one idle connection costs the proxy besides the kernel's socket (the
//! RSS figure of benches/README.md adds the allocator's page rounding).
//!
//! `TEAPOT_IDLE_HEAP_PROFILE=FILE` writes dhat's profile with the
//! connections still open: its "at end" figures are what each allocation
//! site holds for idle connections (view with dhat's `dh_view.html`).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::*;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Connections opened before counting: pools, maps and the timer wheel
/// reach their working size.
const WARM: usize = 50;
/// Connections counted.
const IDLE: usize = 400;
/// Heap bytes an idle HTTP/1.1 connection may keep (its task, the
/// socket's registration with the runtime, its timers). nginx keeps
/// about 0.6 KiB per idle connection and HAProxy 1.3 (benches/README.md).
const BUDGET: usize = 1536;

#[test]
fn an_idle_http1_connection_keeps_little_heap() {
    let profile = std::env::var_os("TEAPOT_IDLE_HEAP_PROFILE");
    let _profiler = match &profile {
        Some(file) => dhat::Profiler::builder().file_name(file).build(),
        None => dhat::Profiler::new_heap(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (addr, proxy, _dir, _backend) = runtime.block_on(async {
        let backend = echo("shop", "svc-web", "web-0").await;
        let mut manifests = echo_service("shop", "svc-web", &[&backend]);
        manifests.push(simple_ingress("shop", "web", "web.test", "svc-web"));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("manifests.yaml"), docs(&manifests)).unwrap();
        let mut config = teapot_proxy::server::ProxyConfig::new(dir.path().to_path_buf());
        config.serving_threads = 1;
        config.edge.max_connections_per_client = 0;
        let listeners =
            teapot_proxy::server::Listeners::bind(Some("127.0.0.1:0"), None, "127.0.0.1:0")
                .unwrap();
        let addr = listeners.addrs().unwrap().http.unwrap();
        let proxy = tokio::spawn(teapot_proxy::server::run(config, listeners, async {
            let _ = stopped.await;
        }));
        (addr, proxy, dir, backend)
    });
    // The route is served once the first snapshot is in.
    let first = std::iter::repeat_with(|| {
        std::thread::sleep(Duration::from_millis(50));
        open_idle(addr)
    })
    .take(200)
    .find_map(Result::ok)
    .expect("the proxy serves web.test");
    let mut held = vec![first];
    for _ in 1..WARM {
        held.push(open_idle(addr).unwrap());
    }
    let before = settled_heap();
    for _ in 0..IDLE {
        held.push(open_idle(addr).unwrap());
    }
    let after = settled_heap();
    let per_connection = after.saturating_sub(before) / IDLE;
    eprintln!(
        "heap: {before} B with {WARM} idle connections, {after} B with {}: {per_connection} B per idle HTTP/1.1 connection",
        WARM + IDLE
    );
    // The profile's "at end" is this moment: the connections still open.
    drop(_profiler);
    assert!(
        per_connection <= BUDGET,
        "an idle HTTP/1.1 connection keeps {per_connection} B of heap (budget {BUDGET})"
    );
    drop(held);
    let _ = stop.send(());
    runtime.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(30), proxy).await;
    });
}

/// One connection with one keep-alive request answered, left open.
fn open_idle(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let mut tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: web.test\r\n\r\n")?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tcp.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::other("closed before the answer"));
        }
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = answer_end(&got) {
            if !got.starts_with(b"HTTP/1.1 200") {
                return Err(std::io::Error::other(
                    String::from_utf8_lossy(&got[..end]).into_owned(),
                ));
            }
            return Ok(tcp);
        }
    }
}

/// The end of a response with `Content-Length`, once all of it is there.
fn answer_end(got: &[u8]) -> Option<usize> {
    let head = got.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = std::str::from_utf8(&got[..head]).ok()?;
    let length: usize = text.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })?;
    (got.len() >= head + length).then_some(head + length)
}

/// The heap once the proxy has gone quiet: each connection's engine gives
/// its request buffers back when its next read would block, a moment
/// after the answer went out.
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
