//! The peers teapot is measured against (nginx, HAProxy) and the tools
//! that load them (wrk, h2load): finding or installing them, starting them
//! on a config the caller writes, reloading them, reading their RSS.
//!
//! Every peer runs in the foreground as a child that is killed when its
//! handle drops, so a failed benchmark leaves nothing behind. Signals go
//! through `kill(1)`: the workspace forbids the unsafe code `kill(2)` needs.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// A program the benchmarks run and the Debian package that ships it.
#[derive(Clone, Copy, Debug)]
pub struct Tool {
    pub bin: &'static str,
    pub package: &'static str,
}

pub const NGINX: Tool = Tool {
    bin: "nginx",
    package: "nginx-light",
};
pub const HAPROXY: Tool = Tool {
    bin: "haproxy",
    package: "haproxy",
};
pub const WRK: Tool = Tool {
    bin: "wrk",
    package: "wrk",
};
pub const H2LOAD: Tool = Tool {
    bin: "h2load",
    package: "nghttp2-client",
};

/// `bin` on `PATH` (and the sbin directories, which a non-login root shell
/// may lack).
pub fn locate(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(bin))
        .find(|p| p.is_file())
}

/// Finds every tool, installing the missing ones with `apt-get` when
/// `install` is set. Returns the paths in the order given.
pub fn ensure(tools: &[Tool], install: bool) -> io::Result<Vec<PathBuf>> {
    let missing: Vec<&Tool> = tools.iter().filter(|t| locate(t.bin).is_none()).collect();
    if !missing.is_empty() {
        let packages: Vec<&str> = missing.iter().map(|t| t.package).collect();
        if !install {
            return Err(io::Error::other(format!(
                "missing {}; install with: apt-get install {}",
                missing.iter().map(|t| t.bin).collect::<Vec<_>>().join(", "),
                packages.join(" ")
            )));
        }
        eprintln!("installing {} with apt-get", packages.join(" "));
        let status = std::process::Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(&packages)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "apt-get install {} failed: {status}",
                packages.join(" ")
            )));
        }
    }
    tools
        .iter()
        .map(|t| {
            locate(t.bin).ok_or_else(|| {
                io::Error::other(format!(
                    "{} still missing after installing {}",
                    t.bin, t.package
                ))
            })
        })
        .collect()
}

/// First line of `bin args` (stdout, else stderr): the version banner.
pub fn version(bin: &Path, args: &[&str]) -> String {
    std::process::Command::new(bin)
        .args(args)
        .output()
        .map(|o| {
            let out = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&out)
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

/// A free TCP port on 127.0.0.1, for peers that cannot bind port 0 and
/// report it.
pub fn free_port() -> io::Result<u16> {
    teapot_testkit::l4::free_port(std::net::Ipv4Addr::LOCALHOST.into())
}

/// Waits until something accepts on 127.0.0.1:`port` (at most 60 s).
pub async fn wait_port(port: u16) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("nothing listens on 127.0.0.1:{port} after 60 s"),
    ))
}

/// Sends `signal` (a `kill -s` name) to `pid`.
pub fn signal(pid: u32, signal: &str) -> io::Result<()> {
    let status = std::process::Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "kill -s {signal} {pid}: {status}"
        )))
    }
}

pub use teapot_testkit::procfs::{cpu_seconds, peak_rss_kib, rss_kib, tree_rss_kib};

/// Which peer a [`Peer`] is; decides the command line and the reload signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerKind {
    /// `nginx -p DIR -c FILE -g 'daemon off;'`; SIGHUP reloads.
    Nginx,
    /// `haproxy -W -db -f FILE` (master-worker); SIGUSR2 reloads.
    Haproxy,
}

/// A running nginx or HAProxy master on a config file in its own
/// directory. Dropping it kills the master (and with it the workers).
#[derive(Debug)]
pub struct Peer {
    pub kind: PeerKind,
    pub config: PathBuf,
    child: Child,
}

impl Peer {
    /// Writes `config` to `dir/<name>` and starts the peer on it. It must
    /// log to files under `dir` (nginx: `error_log`, `pid`).
    pub fn start(kind: PeerKind, bin: &Path, dir: &Path, config: &str) -> io::Result<Peer> {
        let file = dir.join(match kind {
            PeerKind::Nginx => "nginx.conf",
            PeerKind::Haproxy => "haproxy.cfg",
        });
        std::fs::write(&file, config)?;
        let mut cmd = Command::new(bin);
        match kind {
            PeerKind::Nginx => {
                cmd.arg("-p")
                    .arg(dir)
                    .arg("-e")
                    .arg(dir.join("error.log"))
                    .arg("-c")
                    .arg(&file)
                    .args(["-g", "daemon off;"]);
            }
            PeerKind::Haproxy => {
                cmd.args(["-W", "-db", "-f"]).arg(&file);
            }
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("starting {}: {e}", bin.display())))?;
        Ok(Peer {
            kind,
            config: file,
            child,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Rewrites the config and tells the master to reload it, as an
    /// operator does for a configuration change.
    pub fn reload(&self, config: &str) -> io::Result<()> {
        write_atomically(&self.config, config.as_bytes())?;
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other(format!("{:?} exited", self.kind)))?;
        signal(
            pid,
            match self.kind {
                PeerKind::Nginx => "HUP",
                PeerKind::Haproxy => "USR2",
            },
        )
    }

    /// Stops the master and waits for it. SIGTERM first: a SIGKILLed
    /// nginx master leaves its workers running.
    pub async fn stop(mut self) {
        if let Some(pid) = self.pid()
            && signal(pid, "TERM").is_ok()
            && tokio::time::timeout(Duration::from_secs(10), self.child.wait())
                .await
                .is_ok()
        {
            return;
        }
        let _ = self.child.kill().await;
    }
}

/// Writes `path` through a temporary file and a rename, so a reader never
/// sees half a file.
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

/// The `teapot` binary to measure: `explicit`, else the one built beside
/// this benchmark (same profile, same target directory).
pub fn teapot_bin(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    let exe = std::env::current_exe().unwrap_or_default();
    exe.parent()
        .unwrap_or(Path::new("."))
        .join(format!("teapot{}", std::env::consts::EXE_SUFFIX))
}

/// The start of an nginx configuration the side-by-side reports give the
/// peer: `threads` workers, its pid, log and temporary files under `dir`,
/// access log off, up to the open `http {` block (the caller closes it).
pub fn nginx_preamble(dir: &Path, threads: usize, error_level: &str) -> String {
    format!(
        "user root;
worker_processes {threads};
pid {d}/nginx.pid;
error_log {d}/error.log {error_level};
events {{ worker_connections 20000; multi_accept on; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
",
        d = dir.display()
    )
}
