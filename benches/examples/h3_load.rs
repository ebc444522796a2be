//! The HTTP/3 load of `h3-report` (`teapot_benches::h3load`) as a command,
//! for benches/h3-instructions.sh, which counts a server's instructions
//! per request under callgrind:
//!
//! - `h3_load setup DIR BACKEND_PORT`: a self-signed ECDSA P-256
//!   certificate for `bench.example` (DIR/cert.pem, DIR/key.pem,
//!   DIR/cert.der) and teapot's manifests routing it to the backend
//!   (DIR/manifests/bench.yaml, the certificate as a tenant Secret);
//! - `h3_load get ADDR DIR`: one GET over a new connection; exits 0 on a
//!   200 (the script's readiness check);
//! - `h3_load load ADDR DIR SECONDS CONNECTIONS STREAMS`: `CONNECTIONS`
//!   QUIC connections with `STREAMS` request loops each for `SECONDS`;
//!   prints the 2xx answers counted.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use teapot_benches::h3load::{self, H3Conn, Window};

const HOST: &str = "bench.example";
const PATH: &str = "/hello.txt";

fn usage() -> ! {
    eprintln!(
        "usage: h3_load setup DIR BACKEND_PORT | get ADDR DIR | load ADDR DIR SECONDS CONNECTIONS STREAMS"
    );
    std::process::exit(2);
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["setup", dir, backend] => setup(Path::new(dir), backend.parse()?),
        ["get", addr, dir] => runtime.block_on(get(addr.parse()?, Path::new(dir))),
        ["load", addr, dir, seconds, connections, streams] => runtime.block_on(load(
            addr.parse()?,
            Path::new(dir),
            seconds.parse()?,
            connections.parse()?,
            streams.parse()?,
        )),
        _ => usage(),
    }
}

fn setup(dir: &Path, backend: u16) -> anyhow::Result<()> {
    let cert = teapot_testkit::certs::self_signed(&[HOST]);
    std::fs::write(dir.join("cert.pem"), &cert.cert_pem)?;
    std::fs::write(dir.join("key.pem"), &cert.key_pem)?;
    std::fs::write(dir.join("cert.der"), &cert.cert_der)?;
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests)?;
    std::fs::write(
        manifests.join("bench.yaml"),
        h3load::teapot_manifests(backend, HOST, &cert),
    )?;
    Ok(())
}

fn target(addr: SocketAddr) -> h3load::Target {
    h3load::Target {
        addr,
        host: HOST.into(),
        path: PATH.into(),
    }
}

fn client(dir: &Path) -> anyhow::Result<quinn::Endpoint> {
    let der: PathBuf = dir.join("cert.der");
    let der = std::fs::read(&der).with_context(|| format!("reading {}", der.display()))?;
    h3load::endpoint(h3load::client_config(&der, None)?)
}

async fn get(addr: SocketAddr, dir: &Path) -> anyhow::Result<()> {
    let endpoint = client(dir)?;
    let uri: http::Uri = format!("https://{HOST}{PATH}").parse()?;
    let answer = tokio::time::timeout(Duration::from_secs(5), async {
        let mut conn = H3Conn::connect(&endpoint, &target(addr)).await?;
        let answer = h3load::get(&mut conn.requests, &uri).await;
        conn.close();
        answer
    })
    .await
    .context("timed out")??;
    endpoint.wait_idle().await;
    match answer {
        (200, _) => Ok(()),
        (status, _) => bail!("answered {status}"),
    }
}

async fn load(
    addr: SocketAddr,
    dir: &Path,
    seconds: f64,
    connections: usize,
    streams: usize,
) -> anyhow::Result<()> {
    let endpoint = client(dir)?;
    let window = Window::after(Duration::ZERO, Duration::from_secs_f64(seconds));
    let result = h3load::keep_alive(&endpoint, &target(addr), connections, streams, window).await?;
    endpoint.close(quinn::VarInt::from_u32(0x100), b"");
    endpoint.wait_idle().await;
    if result.errors + result.non_2xx + result.reconnects > 0 {
        eprintln!(
            "errors {} non-2xx {} reconnects {}{}",
            result.errors,
            result.non_2xx,
            result.reconnects,
            result
                .first_error
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
    }
    println!("{}", result.ok);
    Ok(())
}
