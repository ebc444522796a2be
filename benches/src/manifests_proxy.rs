//! `teapot proxy --manifests` as a child process, for the benchmarks that
//! measure the real proxy: started on a directory of manifests the caller
//! writes (through a staging directory, so the watcher never sees half a
//! file), with its snapshot generation, metrics, RSS and log lines at hand.
//! Every listener binds 127.0.0.1 port 0; the child is killed when its
//! handle drops.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use teapot_testkit::client::{Request, Transport, send};
use tokio::io::{AsyncBufReadExt, BufReader};

/// What the proxy wrote to stderr since it started.
#[derive(Debug, Default)]
pub struct LogLines {
    pub lines: AtomicU64,
    /// Lines at level WARN or ERROR.
    pub warnings: AtomicU64,
    pub bytes: AtomicU64,
}

impl LogLines {
    /// (lines, warnings, bytes) so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.lines.load(Ordering::Relaxed),
            self.warnings.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// A running `teapot proxy --manifests DIR`.
pub struct ManifestsProxy {
    child: tokio::process::Child,
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub admin: SocketAddr,
    pub log: Arc<LogLines>,
}

impl ManifestsProxy {
    /// Starts the proxy on `manifests` with `--domain domain`, plain HTTP,
    /// HTTPS and admin listeners on 127.0.0.1 port 0 (unless `args` names
    /// `--http`), and waits for its listening line. `echo_log` copies its
    /// log to this process's stderr; it is counted either way.
    pub async fn start(
        teapot: &Path,
        manifests: &Path,
        domain: &str,
        args: &[String],
        env: &[(&str, &str)],
        echo_log: bool,
    ) -> Result<ManifestsProxy> {
        let mut cmd = tokio::process::Command::new(teapot);
        cmd.args(["proxy", "--manifests"])
            .arg(manifests)
            .args([
                "--https",
                "127.0.0.1:0",
                "--admin",
                "127.0.0.1:0",
                "--domain",
                domain,
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if !args.iter().any(|a| a == "--http") {
            cmd.args(["--http", "127.0.0.1:0"]);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().context("starting teapot")?;
        let log = Arc::new(LogLines::default());
        let mut stderr = BufReader::new(child.stderr.take().context("stderr")?).lines();
        let counts = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                counts.lines.fetch_add(1, Ordering::Relaxed);
                counts
                    .bytes
                    .fetch_add(line.len() as u64 + 1, Ordering::Relaxed);
                if line.contains("WARN") || line.contains("ERROR") {
                    counts.warnings.fetch_add(1, Ordering::Relaxed);
                }
                if echo_log {
                    eprintln!("{line}");
                }
            }
        });
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let addrs = tokio::time::timeout(Duration::from_secs(120), async {
            loop {
                match lines.next_line().await? {
                    Some(line) => {
                        if let Some(a) = teapot_testkit::process::parse_listening_line(&line) {
                            return Ok::<_, anyhow::Error>(a);
                        }
                    }
                    None => bail!("teapot exited before listening"),
                }
            }
        })
        .await
        .context("no listening line in 120 s")??;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(ManifestsProxy {
            child,
            http: addrs.http,
            https: addrs.https,
            admin: addrs.admin,
            log,
        })
    }

    /// One GET on the admin listener, the body as text.
    pub async fn admin(&self, path: &str) -> Result<String> {
        let resp = send(self.admin, &Transport::Plain, &Request::get("admin", path))
            .await
            .map_err(|e| anyhow!("{path}: {e}"))?;
        Ok(resp.text())
    }

    /// A metric of `/metrics` (0 when absent or the admin does not answer).
    pub async fn metric(&self, name: &str) -> f64 {
        match self.admin("/metrics").await {
            Ok(text) => metric(&text, name),
            Err(_) => 0.0,
        }
    }

    /// The generation of the snapshot being served (0: none yet).
    pub async fn generation(&self) -> u64 {
        self.metric("teapot_snapshot_generation").await as u64
    }

    /// Waits (at most `bound`) for a generation above `above`: the new
    /// one and how long it took.
    pub async fn wait_generation_within(
        &self,
        above: u64,
        bound: Duration,
    ) -> Result<(u64, Duration)> {
        let started = Instant::now();
        loop {
            let g = self.generation().await;
            if g > above {
                return Ok((g, started.elapsed()));
            }
            if started.elapsed() > bound {
                bail!("no generation above {above} in {bound:?}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// [`ManifestsProxy::wait_generation_within`] 600 s.
    pub async fn wait_generation(&self, above: u64) -> Result<(u64, Duration)> {
        self.wait_generation_within(above, Duration::from_secs(600))
            .await
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// `VmRSS` in bytes (0 once it has exited).
    pub fn rss(&self) -> u64 {
        crate::peers::rss_kib(self.pid()).unwrap_or(0) * 1024
    }

    /// `VmHWM` (peak RSS) in bytes.
    pub fn peak_rss(&self) -> u64 {
        crate::peers::peak_rss_kib(self.pid()).unwrap_or(0) * 1024
    }

    /// Kills the proxy and waits for it, so its ports are free again.
    pub async fn stop(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// The value of an unlabelled metric in Prometheus text (0 when absent).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A manifests directory in a temporary root, written through a staging
/// directory beside it.
pub struct Manifests {
    _root: tempfile::TempDir,
    pub dir: PathBuf,
    pub stage: PathBuf,
}

impl Manifests {
    /// A fresh directory under the system's temporary directory, its name
    /// starting with `prefix`.
    pub fn new(prefix: &str) -> Result<Manifests> {
        let root = tempfile::Builder::new().prefix(prefix).tempdir()?;
        let dir = root.path().join("manifests");
        let stage = root.path().join("stage");
        std::fs::create_dir_all(&dir)?;
        std::fs::create_dir_all(&stage)?;
        Ok(Manifests {
            _root: root,
            dir,
            stage,
        })
    }

    /// Writes `docs` (JSON, which is YAML) as one multi-document file and
    /// returns its size in bytes.
    pub fn write(&self, name: &str, docs: &[Value]) -> Result<u64> {
        let text: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
        let text = text.join("\n---\n");
        std::fs::write(self.stage.join(name), &text)?;
        std::fs::rename(self.stage.join(name), self.dir.join(name))?;
        Ok(text.len() as u64)
    }

    /// Removes a file the proxy reads.
    pub fn remove(&self, name: &str) -> Result<()> {
        std::fs::remove_file(self.dir.join(name))?;
        Ok(())
    }
}

/// A Tenant of `cluster` whose nodes are `cidr`.
pub fn tenant(cluster: &str, cidr: &str) -> Value {
    json!({
        "apiVersion": "teapot.dev/v1alpha1", "kind": "Tenant",
        "metadata": {"name": cluster},
        "spec": {"cluster": cluster, "nodeCIDRs": [cidr]},
    })
}

/// A Service with one port, `http` 80, of `app_protocol` if given.
pub fn service(namespace: &str, name: &str, app_protocol: Option<&str>) -> Value {
    let mut port = json!({"name": "http", "port": 80});
    if let Some(p) = app_protocol {
        port["appProtocol"] = json!(p);
    }
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"ports": [port]},
    })
}

/// An IPv4 EndpointSlice of `service` on `port`, one endpoint per address.
pub fn endpoint_slice(
    namespace: &str,
    service: &str,
    name: &str,
    port: u16,
    addresses: &[String],
    ready: bool,
) -> Value {
    let endpoints: Vec<Value> = addresses
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": ready}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        // Tenant slices are the agent's to write; operator ones may say so too.
        "metadata": {"name": name, "namespace": namespace, "labels": {
            "kubernetes.io/service-name": service,
            "endpointslice.kubernetes.io/managed-by": "sync.teapot.dev"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port}],
        "endpoints": endpoints,
    })
}
