//! Launchers for Debian's `pebble` ACME test CA and its `pebble-challtestsrv`
//! DNS server, on 127.0.0.1 with free ports.
//!
//! Pebble's own HTTPS listener gets a certificate from a fresh [`TestCa`]
//! (rustls refuses a CA certificate used as a server certificate, so it is a
//! CA plus a leaf for 127.0.0.1/localhost); [`Pebble::api_root_pem`] is what
//! an ACME client trusts to talk to it. The chains pebble *issues* end in a
//! root pebble makes up at every start, fetched with [`Pebble::issued_root`].
//! Pebble keeps nothing across restarts: after [`Pebble::restart`] accounts
//! are unknown and the issuing root is new.
//!
//! Both binaries come from the Debian package `pebble` (`scripts/setup.sh`
//! installs it); [`locate`] finds them on `PATH` or in `/usr/bin`.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::Error;
use crate::certs::TestCa;
use crate::client::{Request, Transport, send};

/// How long pebble or challtestsrv may take to answer after a start.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The path of `name` on `PATH` or in `/usr/bin`, or an error that says how
/// to install it.
pub fn locate(name: &str) -> Result<PathBuf, Error> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::Process(format!(
                "{name} not found on PATH or in /usr/bin: install Debian's `pebble` package (scripts/setup.sh does)"
            ))
        })
}

/// A port free for both TCP and UDP on 127.0.0.1 (challtestsrv's DNS binds both).
pub fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = tcp.local_addr().expect("local addr").port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// `pebble-challtestsrv` as a DNS server only (its own HTTP-01/TLS-ALPN-01
/// responders off), answering `default_ipv4` for every A query unless a
/// record is set through its management API.
#[derive(Debug)]
pub struct ChallTestSrv {
    child: Child,
    pub dns: SocketAddr,
    pub management: SocketAddr,
}

impl Drop for ChallTestSrv {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

impl ChallTestSrv {
    /// Starts it and waits until its management API answers.
    pub async fn start(default_ipv4: &str) -> Result<ChallTestSrv, Error> {
        let bin = locate("pebble-challtestsrv")?;
        let dns = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let management = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = Command::new(&bin)
            .args(["-defaultIPv4", default_ipv4, "-defaultIPv6", ""])
            .args(["-dns01", &dns.to_string()])
            .args(["-management", &management.to_string()])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::Process(format!("spawning {}: {e}", bin.display())))?;
        let srv = ChallTestSrv {
            child,
            dns,
            management,
        };
        srv.call(
            "/set-default-ipv4",
            serde_json::json!({ "ip": default_ipv4 }),
        )
        .await?;
        Ok(srv)
    }

    /// POSTs JSON to the management API, retrying until it answers 200
    /// (≤ [`START_TIMEOUT`]).
    pub async fn call(&self, path: &str, body: serde_json::Value) -> Result<(), Error> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let mut req = Request::get("challtestsrv", path);
            req.method = "POST".into();
            req.body = body.to_string().into_bytes();
            req.headers
                .push(("Content-Type".into(), "application/json".into()));
            let last = match send(self.management, &Transport::Plain, &req).await {
                Ok(r) if r.status == 200 => return Ok(()),
                Ok(r) => format!("{} {}", r.status, r.text()),
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                return Err(Error::Timeout(format!("challtestsrv {path}: {last}")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sets the address every A query without its own record gets.
    pub async fn set_default_ipv4(&self, ip: &str) -> Result<(), Error> {
        self.call("/set-default-ipv4", serde_json::json!({ "ip": ip }))
            .await
    }

    /// Adds an A record (`host` without the trailing dot).
    pub async fn add_a(&self, host: &str, ip: &str) -> Result<(), Error> {
        self.call(
            "/add-a",
            serde_json::json!({ "host": format!("{host}."), "addresses": [ip] }),
        )
        .await
    }

    pub async fn set_txt(&self, host: &str, value: &str) -> Result<(), Error> {
        self.call(
            "/set-txt",
            serde_json::json!({ "host": format!("{host}."), "value": value }),
        )
        .await
    }

    pub async fn clear_txt(&self, host: &str) -> Result<(), Error> {
        self.call(
            "/clear-txt",
            serde_json::json!({ "host": format!("{host}.") }),
        )
        .await
    }

    pub async fn set_cname(&self, host: &str, target: &str) -> Result<(), Error> {
        self.call(
            "/set-cname",
            serde_json::json!({ "host": format!("{host}."), "target": format!("{target}.") }),
        )
        .await
    }
}

/// What pebble is started with.
#[derive(Clone, Debug)]
pub struct PebbleOptions {
    /// The port pebble dials on the validated host for HTTP-01.
    pub http_port: u16,
    /// The DNS server pebble resolves names with (challtestsrv).
    pub dns: SocketAddr,
    /// Lifetime of issued certificates (pebble's `certificateValidityPeriod`).
    pub validity: Duration,
}

/// A running pebble; [`Pebble::stop`] and [`Pebble::restart`] simulate an
/// outage on the same addresses.
#[derive(Debug)]
pub struct Pebble {
    child: Option<Child>,
    bin: PathBuf,
    config: PathBuf,
    options: PebbleOptions,
    api_ca: TestCa,
    api_root_file: PathBuf,
    pub listen: SocketAddr,
    pub management: SocketAddr,
    tls_port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(&mut c);
        }
    }
}

impl Pebble {
    /// Writes the listener certificate and the config, starts pebble and
    /// waits until its directory answers.
    pub async fn start(options: PebbleOptions) -> Result<Pebble, Error> {
        let mut pebble = Pebble::configure(options)?;
        pebble.restart().await?;
        Ok(pebble)
    }

    /// Picks addresses and writes the listener certificate without starting
    /// pebble, so the directory URL is known before the port pebble dials
    /// for HTTP-01 is ([`Pebble::set_http_port`], then [`Pebble::restart`]).
    pub fn configure(options: PebbleOptions) -> Result<Pebble, Error> {
        let bin = locate("pebble")?;
        let dir = tempfile::Builder::new()
            .prefix("teapot-pebble-")
            .tempdir()?;
        let api_ca = TestCa::new("teapot test: pebble API CA");
        let leaf = api_ca.issue(&["127.0.0.1", "localhost"]);
        std::fs::write(dir.path().join("cert.pem"), &leaf.cert_pem)?;
        std::fs::write(dir.path().join("key.pem"), &leaf.key_pem)?;
        let api_root_file = dir.path().join("api-root.pem");
        std::fs::write(&api_root_file, api_ca.cert_pem())?;
        Ok(Pebble {
            child: None,
            bin,
            config: dir.path().join("pebble-config.json"),
            options,
            api_ca,
            api_root_file,
            listen: SocketAddr::from(([127, 0, 0, 1], free_port())),
            management: SocketAddr::from(([127, 0, 0, 1], free_port())),
            tls_port: free_port(),
            _dir: dir,
        })
    }

    /// The DNS server pebble resolves with from the next (re)start on
    /// (e.g. the proxy's own, known once it listens).
    pub fn set_dns(&mut self, dns: SocketAddr) {
        self.options.dns = dns;
    }

    /// The port pebble dials for HTTP-01 from the next (re)start on.
    pub fn set_http_port(&mut self, port: u16) {
        self.options.http_port = port;
    }

    fn write_config(&self) -> Result<(), Error> {
        let dir = self._dir.path();
        let json = serde_json::json!({
            "pebble": {
                "listenAddress": self.listen.to_string(),
                "managementListenAddress": self.management.to_string(),
                "certificate": dir.join("cert.pem"),
                "privateKey": dir.join("key.pem"),
                "httpPort": self.options.http_port,
                "tlsPort": self.tls_port,
                "ocspResponderURL": "",
                "externalAccountBindingRequired": false,
                "certificateValidityPeriod": self.options.validity.as_secs().max(1),
            }
        });
        std::fs::write(
            &self.config,
            serde_json::to_vec_pretty(&json).expect("JSON"),
        )?;
        Ok(())
    }

    /// The ACME directory URL.
    pub fn directory(&self) -> String {
        format!("https://{}/dir", self.listen)
    }

    /// PEM file of the CA of pebble's own HTTPS listener (`--acme-root`).
    pub fn api_root_file(&self) -> &Path {
        &self.api_root_file
    }

    pub fn api_root_pem(&self) -> &str {
        self.api_ca.cert_pem()
    }

    /// Stops pebble (an outage); addresses stay reserved for [`Pebble::restart`].
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(&mut c);
        }
    }

    /// (Re)starts pebble with the same config and waits for its directory
    /// and its management listener (a second listener, which pebble opens
    /// on its own and can be a moment later than the directory).
    pub async fn restart(&mut self) -> Result<(), Error> {
        self.stop();
        self.write_config()?;
        let child = Command::new(&self.bin)
            .arg("-config")
            .arg(&self.config)
            .arg("-dnsserver")
            .arg(self.options.dns.to_string())
            .env("PEBBLE_VA_NOSLEEP", "1")
            // Every order validates again, so renewals exercise HTTP-01 too.
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::Process(format!("spawning {}: {e}", self.bin.display())))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let ready = match self.get(self.listen, "/dir").await {
                Ok(_) => self.get(self.management, "/roots/0").await,
                Err(e) => Err(e),
            };
            match ready {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(Error::Timeout(format!("pebble directory and roots: {e}")));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// The root (PEM) of the chains pebble issues now; new at every start.
    pub async fn issued_root(&self) -> Result<String, Error> {
        self.get(self.management, "/roots/0").await
    }

    async fn get(&self, addr: SocketAddr, path: &str) -> Result<String, Error> {
        let transport = Transport::tls_verified("127.0.0.1", &[self.api_ca.cert_der()]);
        let resp = send(addr, &transport, &Request::get(&addr.to_string(), path)).await?;
        if resp.status != 200 {
            return Err(Error::Process(format!(
                "pebble {path}: {} {}",
                resp.status,
                resp.text()
            )));
        }
        Ok(resp.text())
    }
}
