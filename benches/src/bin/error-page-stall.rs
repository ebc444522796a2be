//! What HTTP/2 streams that never open their flow-control window cost a
//! replica when their answer is a custom error page, on the real `teapot
//! proxy` (manifests mode, every listener on 127.0.0.1).
//!
//! An Ingress in an operator namespace routes `stall.test` to a Service
//! without endpoints, with a `default-backend` whose page this process
//! serves at the size the request's `x-page-bytes` asks for (the page
//! request carries the client's fields). The client opens `--streams`
//! streams over cleartext HTTP/2 connections of 100 streams each, every
//! connection with SETTINGS_INITIAL_WINDOW_SIZE 0, so that no byte of any
//! answer's body can be sent, and waits for every answer's head: whatever
//! a stream holds, it holds then. Printed: the proxy's RSS before, with
//! the streams stalled, and after the streams were reset (or
//! `--wait-reset` seconds passed), and how many were reset.
//!
//! `cargo run --release -p teapot-benches --bin error-page-stall --
//! --teapot target/release/teapot`

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use clap::Parser;
use serde_json::json;
use teapot_benches::manifests_proxy::{
    Manifests, ManifestsProxy, endpoint_slice as slice, service,
};
use teapot_benches::peers::teapot_bin;
use teapot_testkit::h2frames::{
    ACK, END_HEADERS, END_STREAM, GOAWAY, HEADERS, RST_STREAM, SETTINGS, frame, hpack_length,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Parser)]
#[command(about = "proxy RSS with HTTP/2 streams stalled on custom error pages")]
struct Cli {
    /// The release `teapot` binary (default: beside this benchmark).
    #[arg(long)]
    teapot: Option<PathBuf>,
    /// Streams stalled at once (100 per connection).
    #[arg(long, default_value_t = 300)]
    streams: u32,
    /// Bytes of the error backend's page.
    #[arg(long, default_value_t = 1_000_000)]
    page_bytes: usize,
    /// The proxy's `--upstream-timeout` (seconds): its send timeout.
    #[arg(long, default_value_t = 10)]
    send_timeout: u64,
    /// Seconds to wait for the streams' resets after they stalled.
    #[arg(long, default_value_t = 30)]
    wait_reset: u64,
}

const PER_CONNECTION: u32 = 100;
const HOST: &str = "stall.test";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let teapot = teapot_bin(cli.teapot.as_deref());
    let teapot = std::fs::canonicalize(&teapot).with_context(|| {
        format!(
            "{} (build it: cargo build --release -p teapot)",
            teapot.display()
        )
    })?;
    let pages = PageServer::start().await?;
    let manifests = Manifests::new("teapot-error-page-stall-")?;
    let mut ingress = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "stall", "namespace": "ops", "annotations": {
            "nginx.ingress.kubernetes.io/default-backend": "errors"}},
        "spec": {"ingressClassName": "teapot", "rules": [{"host": HOST, "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "empty", "port": {"number": 80}}}}]}}]},
    });
    ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/custom-http-errors"] =
        json!("503");
    manifests.write(
        "stall.yaml",
        &[
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
                   "metadata": {"name": "teapot"},
                   "spec": {"controller": "teapot.dev/ingress-controller"}}),
            service("ops", "errors", None),
            slice(
                "ops",
                "errors",
                "errors-0",
                pages.port,
                &["127.0.0.1".to_string()],
                true,
            ),
            service("ops", "empty", None),
            ingress,
        ],
    )?;
    let args: Vec<String> = [
        "--h2c",
        "--upstream-timeout",
        &cli.send_timeout.to_string(),
        "--auth-concurrency",
        "100000",
        "--max-connections-per-client",
        "100000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let proxy =
        ManifestsProxy::start(&teapot, &manifests.dir, "lb.localhost", &args, &[], false).await?;
    proxy.wait_generation(0).await?;

    // Warm-up: a few pages' heads on connections with the default window,
    // closed after.
    for _ in 0..3 {
        let mut c = Conn::open(proxy.http, None).await?;
        c.s.write_all(&get(1, cli.page_bytes)).await?;
        c.wait_for(HEADERS, 1, Duration::from_secs(30))
            .await
            .map_err(|_| anyhow!("no answer head for the warm-up"))?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = proxy.rss();

    let started = Instant::now();
    let mut conns = Vec::new();
    let mut left = cli.streams;
    while left > 0 {
        let n = left.min(PER_CONNECTION);
        let mut c = Conn::open(proxy.http, Some(0)).await?;
        let mut burst = Vec::new();
        for i in 0..n {
            burst.extend(get(2 * i + 1, cli.page_bytes));
        }
        c.s.write_all(&burst).await?;
        c.wait_for(HEADERS, n, Duration::from_secs(60))
            .await
            .map_err(|got| anyhow!("{got} of {n} answer heads"))?;
        conns.push((c, n));
        left -= n;
    }
    let headed = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stalled = proxy.rss();

    let mut reset = 0;
    let deadline = started + Duration::from_secs(cli.send_timeout + cli.wait_reset);
    for (c, n) in &mut conns {
        let quiet = deadline.saturating_duration_since(Instant::now());
        reset += c
            .wait_for(RST_STREAM, *n, quiet)
            .await
            .unwrap_or_else(|n| n);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = proxy.rss();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "streams {} page_bytes {} pages_asked {} heads_in {:.2}s | RSS before {:.1} MiB, stalled {:.1} MiB (+{:.1} MiB, {:.1} KiB/stream), after {:.1} MiB | reset {} of {} within {:.0}s",
        cli.streams,
        cli.page_bytes,
        pages.asked.load(Ordering::Relaxed),
        headed.as_secs_f64(),
        mib(before),
        mib(stalled),
        mib(stalled.saturating_sub(before)),
        stalled.saturating_sub(before) as f64 / 1024.0 / f64::from(cli.streams.max(1)),
        mib(after),
        reset,
        cli.streams,
        started.elapsed().as_secs_f64(),
    );
    drop(conns);
    Ok(())
}

/// The error backend: a page of `x-page-bytes` bytes per request.
struct PageServer {
    port: u16,
    asked: Arc<AtomicUsize>,
}

impl PageServer {
    async fn start() -> Result<PageServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let asked = Arc::new(AtomicUsize::new(0));
        let count = asked.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    let _ = serve(s, &count).await;
                });
            }
        });
        Ok(PageServer { port, asked })
    }
}

async fn serve(mut s: TcpStream, count: &AtomicUsize) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    count.fetch_add(1, Ordering::Relaxed);
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let size: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("x-page-bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(64);
    let mut answer =
        format!("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {size}\r\n\r\n")
            .into_bytes();
    answer.resize(answer.len() + size, b'p');
    s.write_all(&answer).await?;
    while s.read(&mut buf).await? > 0 {}
    Ok(())
}

/// A GET of `/` on [`HOST`] asking for a page of `page_bytes`.
fn get(stream: u32, page_bytes: usize) -> Vec<u8> {
    let size = page_bytes.to_string();
    let fields: [(&[u8], &[u8]); 5] = [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b":authority", HOST.as_bytes()),
        (b"x-page-bytes", size.as_bytes()),
    ];
    let mut block = Vec::new();
    for (name, value) in fields {
        block.push(0x10); // literal, never indexed, new name
        hpack_length(&mut block, name.len());
        block.extend_from_slice(name);
        hpack_length(&mut block, value.len());
        block.extend_from_slice(value);
    }
    frame(HEADERS, END_HEADERS | END_STREAM, stream, &block)
}

/// A cleartext HTTP/2 connection (prior knowledge) read frame by frame.
struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// `window`: SETTINGS_INITIAL_WINDOW_SIZE, when given.
    async fn open(addr: std::net::SocketAddr, window: Option<u32>) -> Result<Conn> {
        let mut s = TcpStream::connect(addr).await?;
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        let mut settings = Vec::new();
        if let Some(w) = window {
            settings.extend_from_slice(&4u16.to_be_bytes());
            settings.extend_from_slice(&w.to_be_bytes());
        }
        hello.extend(frame(SETTINGS, 0, 0, &settings));
        s.write_all(&hello).await?;
        let mut c = Conn { s, buf: Vec::new() };
        c.wait_for(SETTINGS, 1, Duration::from_secs(10))
            .await
            .map_err(|_| anyhow::anyhow!("no SETTINGS from the proxy"))?;
        c.s.write_all(&frame(SETTINGS, ACK, 0, &[])).await?;
        Ok(c)
    }

    /// Reads until `n` frames of `kind` came; `Err` with how many did
    /// when the connection closed, a GOAWAY came or `quiet` passed.
    async fn wait_for(&mut self, kind: u8, n: u32, quiet: Duration) -> Result<u32, u32> {
        let mut seen = 0;
        let mut chunk = vec![0u8; 64 * 1024];
        let deadline = tokio::time::Instant::now() + quiet;
        while seen < n {
            while self.buf.len() >= 9 {
                let b = &self.buf;
                let len = (b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize;
                if b.len() < 9 + len {
                    break;
                }
                let got = b[3];
                self.buf.drain(..9 + len);
                if got == GOAWAY {
                    return Err(seen);
                }
                seen += u32::from(got == kind);
            }
            if seen >= n {
                break;
            }
            match tokio::time::timeout_at(deadline, self.s.read(&mut chunk)).await {
                Ok(Ok(r)) if r > 0 => self.buf.extend_from_slice(&chunk[..r]),
                _ => return Err(seen),
            }
        }
        Ok(seen)
    }
}
