//! Launching a real `teapot proxy` for end-to-end tests.
//!
//! The proxy binds port 0 everywhere so tests can run in parallel, and
//! announces the ports it got on stdout as one JSON line:
//!
//! ```json
//! {"event":"listening","http":"127.0.0.1:P","https":"127.0.0.1:P","admin":"127.0.0.1:P"}
//! ```
//!
//! Its stderr (the logs) is inherited, so a failing test shows them; its other
//! stdout lines are copied to our stderr with a `[teapot PID]` prefix.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

use crate::Error;
use crate::client::{self, Transport};

/// How long the proxy may take to print its listening line, and then again to
/// report ready (a debug build compiling its first route table is slow).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Every listener of `teapot proxy` on 127.0.0.1, on a port the kernel
/// picks: what a test proxy starts with (its log names the ports).
pub const LOOPBACK_LISTENERS: [&str; 6] = [
    "--http",
    "127.0.0.1:0",
    "--https",
    "127.0.0.1:0",
    "--admin",
    "127.0.0.1:0",
];

/// A running `teapot proxy` child process whose addresses were read from its stdout.
///
/// Dropping it kills the process (SIGKILL); use [`ProxyProcess::terminate`]
/// and [`ProxyProcess::wait`] to test a graceful shutdown.
#[derive(Debug)]
pub struct ProxyProcess {
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub admin: SocketAddr,
    /// The DNS listener (UDP and TCP), when started with `--dns-listen`.
    pub dns: Option<SocketAddr>,
    pid: u32,
    child: Child,
}

/// The addresses of the proxy's `listening` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListeningAddrs {
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub admin: SocketAddr,
    pub dns: Option<SocketAddr>,
}

/// Parses the proxy's `{"event":"listening",...}` stdout line. Any other line
/// (other events, plain text) is `None`; unknown extra fields are ignored so
/// the proxy may add some.
pub fn parse_listening_line(line: &str) -> Option<ListeningAddrs> {
    #[derive(serde::Deserialize)]
    struct Line {
        event: String,
        http: SocketAddr,
        https: SocketAddr,
        admin: SocketAddr,
        #[serde(default)]
        dns: Option<SocketAddr>,
    }
    let line: Line = serde_json::from_str(line.trim()).ok()?;
    (line.event == "listening").then_some(ListeningAddrs {
        http: line.http,
        https: line.https,
        admin: line.admin,
        dns: line.dns,
    })
}

impl ProxyProcess {
    /// Spawns `bin proxy --manifests DIR --http 127.0.0.1:0 --https 127.0.0.1:0 --admin 127.0.0.1:0 <extra_args>`,
    /// waits (≤ 30 s) for the listening line, then polls `GET http://admin/readyz` until 200 (≤ 30 s).
    pub async fn start(
        bin: &Path,
        manifests: &Path,
        extra_args: &[&str],
    ) -> Result<ProxyProcess, Error> {
        let source = [OsStr::new("--manifests"), manifests.as_os_str()];
        ProxyProcess::spawn(bin, &source, &LOOPBACK_LISTENERS, extra_args, &[]).await
    }

    /// [`ProxyProcess::start`] with its HTTP, HTTPS and admin listeners on
    /// these addresses (`[::1]:0`, an address in a test's network
    /// namespace) instead of 127.0.0.1.
    pub async fn start_on(
        bin: &Path,
        manifests: &Path,
        (http, https, admin): (&str, &str, &str),
        extra_args: &[&str],
    ) -> Result<ProxyProcess, Error> {
        let source = [OsStr::new("--manifests"), manifests.as_os_str()];
        let listeners = ["--http", http, "--https", https, "--admin", admin];
        ProxyProcess::spawn(bin, &source, &listeners, extra_args, &[]).await
    }

    /// Like [`ProxyProcess::start`], in kube mode:
    /// `bin proxy --kube --kubeconfig FILE ...` (e.g. the kubeconfig of
    /// [`crate::apiserver::ApiServer`]). Ready means every watch has listed.
    pub async fn start_kube(
        bin: &Path,
        kubeconfig: &Path,
        extra_args: &[&str],
    ) -> Result<ProxyProcess, Error> {
        ProxyProcess::start_kube_with_env(bin, kubeconfig, extra_args, &[]).await
    }

    /// [`ProxyProcess::start_kube`] with these environment variables set
    /// (the Pod's name, as the chart gives it).
    pub async fn start_kube_with_env(
        bin: &Path,
        kubeconfig: &Path,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<ProxyProcess, Error> {
        let source = [
            OsStr::new("--kube"),
            OsStr::new("--kubeconfig"),
            kubeconfig.as_os_str(),
        ];
        ProxyProcess::spawn(bin, &source, &LOOPBACK_LISTENERS, extra_args, env).await
    }

    async fn spawn(
        bin: &Path,
        source: &[&OsStr],
        listeners: &[&str],
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<ProxyProcess, Error> {
        let mut child = Command::new(bin)
            .envs(env.iter().copied())
            .arg("proxy")
            .args(source)
            .args(listeners)
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // A failing test must not leave proxies behind.
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| Error::Process(format!("spawning {}: {err}", bin.display())))?;
        let pid = child
            .id()
            .ok_or_else(|| Error::Process("child exited before it had a pid".to_owned()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Process("child stdout was not piped".to_owned()))?;

        let addrs = wait_for_listening_line(&mut child, stdout, pid).await?;
        let mut proxy = ProxyProcess {
            http: addrs.http,
            https: addrs.https,
            admin: addrs.admin,
            dns: addrs.dns,
            pid,
            child,
        };
        proxy.wait_ready().await?;
        Ok(proxy)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends SIGTERM by running `kill -TERM PID` (the workspace forbids the
    /// unsafe code a direct `kill(2)` would need).
    pub fn terminate(&self) -> Result<(), Error> {
        // `id()` is None once the child was reaped; its pid may belong to
        // another process by now, so do not signal it.
        if self.child.id().is_none() {
            return Err(Error::Process(format!(
                "teapot {} already exited",
                self.pid
            )));
        }
        let status = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Process(format!(
                "kill -TERM {} failed: {status}",
                self.pid
            )))
        }
    }

    /// Waits for exit with a timeout, returns the exit status.
    pub async fn wait(&mut self, timeout: Duration) -> Result<ExitStatus, Error> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .map_err(|_| {
                Error::Timeout(format!(
                    "teapot {} still running after {timeout:?}",
                    self.pid
                ))
            })?
            .map_err(Error::from)
    }

    /// GET a path on the admin listener, return (status, body text).
    pub async fn admin_get(&self, path: &str) -> Result<(u16, String), Error> {
        let req = client::Request::get(&self.admin.to_string(), path);
        let resp = client::send(self.admin, &Transport::Plain, &req).await?;
        Ok((resp.status, resp.text()))
    }

    async fn wait_ready(&mut self) -> Result<(), Error> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let mut last = String::from("no answer yet");
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(Error::Process(format!(
                    "teapot {} exited before ready: {status}",
                    self.pid
                )));
            }
            // Bounded by the deadline: an admin port that accepts but never
            // answers must not hang the test.
            match tokio::time::timeout_at(deadline, self.admin_get("/readyz")).await {
                Ok(Ok((200, _))) => return Ok(()),
                Ok(Ok((status, body))) => last = format!("{status} {body}"),
                Ok(Err(err)) => last = err.to_string(),
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "teapot {} not ready within {STARTUP_TIMEOUT:?}; last /readyz: {last}",
                    self.pid
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn wait_for_listening_line(
    child: &mut Child,
    stdout: ChildStdout,
    pid: u32,
) -> Result<ListeningAddrs, Error> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let mut lines = BufReader::new(stdout).lines();
    let addrs = loop {
        match tokio::time::timeout_at(deadline, lines.next_line()).await {
            Err(_) => {
                return Err(Error::Timeout(format!(
                    "teapot {pid} printed no listening line within {STARTUP_TIMEOUT:?}"
                )));
            }
            Ok(Ok(Some(line))) => match parse_listening_line(&line) {
                Some(addrs) => break addrs,
                None => eprintln!("[teapot {pid}] {line}"),
            },
            Ok(Ok(None)) => {
                let status = child.wait().await?;
                return Err(Error::Process(format!(
                    "teapot {pid} exited before listening: {status}"
                )));
            }
            Ok(Err(err)) => return Err(err.into()),
        }
    };
    // Keep draining stdout for the life of the child: with nobody reading,
    // a full pipe would block the proxy on its next println.
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("[teapot {pid}] {line}");
        }
    });
    Ok(addrs)
}

/// Finds the `teapot` binary next to the running test executable: `target/<profile>/teapot` (the test binary lives in `target/<profile>/deps/`).
/// Honour env TEAPOT_BIN first.
pub fn teapot_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("TEAPOT_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    bin_next_to(&exe)
}

/// `target/<profile>/deps/x` or `target/<profile>/examples/x` -> `target/<profile>/teapot`.
fn bin_next_to(exe: &Path) -> PathBuf {
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    dir.join(format!("teapot{}", std::env::consts::EXE_SUFFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listening_line() {
        let line = r#"{"event":"listening","http":"127.0.0.1:8080","https":"127.0.0.1:8443","admin":"127.0.0.1:9000","pid":7}"#;
        let addrs = parse_listening_line(line).unwrap();
        assert_eq!(addrs.http, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(addrs.https, "127.0.0.1:8443".parse().unwrap());
        assert_eq!(addrs.admin, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(parse_listening_line(&format!("  {line}\r\n")), Some(addrs));
    }

    #[test]
    fn ignores_other_lines() {
        assert_eq!(parse_listening_line(""), None);
        assert_eq!(parse_listening_line("starting teapot"), None);
        assert_eq!(
            parse_listening_line(r#"{"event":"reloaded","routes":3}"#),
            None
        );
        assert_eq!(
            parse_listening_line(
                r#"{"event":"ready","http":"127.0.0.1:1","https":"127.0.0.1:2","admin":"127.0.0.1:3"}"#
            ),
            None
        );
        assert_eq!(
            parse_listening_line(
                r#"{"event":"listening","http":"nope","https":"127.0.0.1:2","admin":"127.0.0.1:3"}"#
            ),
            None
        );
    }

    #[test]
    fn binary_lives_next_to_deps() {
        let bin = bin_next_to(Path::new("/w/target/debug/deps/teapot_proxy-0123"));
        assert_eq!(
            bin,
            Path::new("/w/target/debug").join(format!("teapot{}", std::env::consts::EXE_SUFFIX))
        );
        let bin = bin_next_to(Path::new("/w/target/release/examples/demo"));
        assert_eq!(
            bin,
            Path::new("/w/target/release").join(format!("teapot{}", std::env::consts::EXE_SUFFIX))
        );
    }

    #[tokio::test]
    async fn missing_binary_is_a_process_error() {
        let err = ProxyProcess::start(Path::new("/nonexistent/teapot"), Path::new("/tmp"), &[])
            .await
            .err()
            .unwrap();
        assert!(matches!(err, Error::Process(_)), "{err}");
    }
}
