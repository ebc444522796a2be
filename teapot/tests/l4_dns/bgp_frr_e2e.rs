//! IPv6 BGP through the real `teapot proxy` binary: FRR (zebra + bgpd) in
//! a router namespace, the proxy in a replica namespace on a veth to it,
//! and a client in a third namespace behind the router. The proxy
//! announces its IPv6 address (on the replica's loopback, where its HTTP
//! listener is) over
//!
//! - an IPv6 session (2001:db8:1::2 to 2001:db8:1::1), and
//! - an IPv4 session carrying the IPv6 route (multiprotocol BGP, RFC 4760:
//!   `next-hop=2001:db8:1::2` on the peer, the router's `address-family
//!   ipv6 unicast` activated for the IPv4 neighbour);
//!
//! each time the router's kernel installs the /128 via the replica, and the
//! client reaches HTTP on the address through the router. The speaker's own
//! FRR tests are announce/tests/frr_netns.rs.
//!
//! Needs root, iproute2, Debian's `frr` and curl; without them each test
//! prints why and passes, unless `TEAPOT_REQUIRE_NETNS=1` (CI) makes that a
//! failure (announce/tests/netns/mod.rs).
//!
//! Run: `cargo test -p teapot --test l4_dns bgp_frr_e2e::`.

use crate::netns;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use netns::{Namespaces, run, sh};
use teapot_testkit::process::{parse_listening_line, teapot_bin};

const FRR_DIR: &str = "/usr/lib/frr";
const ROUTER_ASN: u32 = 64500;
const REPLICA_ASN: u32 = 64501;
/// The replica's link to the router.
const ROUTER4: &str = "192.0.2.1";
const REPLICA4: &str = "192.0.2.2";
const ROUTER6: &str = "2001:db8:1::1";
const REPLICA6: &str = "2001:db8:1::2";
/// The client's link to the router.
const CLIENT_ROUTER6: &str = "2001:db8:2::1";
const CLIENT6: &str = "2001:db8:2::2";
/// The fleet's IPv6 address, announced by the proxy.
const VIP6: &str = "2001:db8:ffff::10";

fn missing() -> Option<String> {
    for tool in ["zebra", "bgpd"] {
        if !Path::new(FRR_DIR).join(tool).exists() {
            return Some(format!("{FRR_DIR}/{tool} missing (apt-get install frr)"));
        }
    }
    for tool in ["vtysh", "curl"] {
        if Command::new(tool).arg("--help").output().is_err() {
            return Some(format!("{tool} missing"));
        }
    }
    None
}

/// The three namespaces, FRR in the router's and the proxy in the
/// replica's; the daemons and the proxy are killed on drop, before the
/// namespaces go.
struct Lab {
    router: String,
    replica: String,
    client: String,
    dir: tempfile::TempDir,
    proxy: Option<Child>,
    log: PathBuf,
    // Last: deleted after the processes are gone.
    _namespaces: Namespaces,
}

impl Lab {
    fn new(tag: &str) -> Lab {
        let pid = std::process::id();
        let mut namespaces = Namespaces(Vec::new());
        let router = namespaces.add(format!("tpb{tag}{pid}r"));
        let replica = namespaces.add(format!("tpb{tag}{pid}s"));
        let client = namespaces.add(format!("tpb{tag}{pid}c"));
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("proxy.log");
        let lab = Lab {
            router,
            replica,
            client,
            dir,
            proxy: None,
            log,
            _namespaces: namespaces,
        };
        for ns in [&lab.router, &lab.replica, &lab.client] {
            // No duplicate address detection: FRR refuses an IPv6 session
            // while its link-local address is tentative.
            sh(
                ns,
                "sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0 && ip link set lo up",
            );
        }
        sh(
            &lab.router,
            "sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1",
        );
        for (port, peer, name) in [("s1", &lab.replica, "uplink"), ("c1", &lab.client, "lan")] {
            run(&[
                "ip",
                "link",
                "add",
                port,
                "netns",
                &lab.router,
                "type",
                "veth",
                "peer",
                "name",
                name,
                "netns",
                peer,
            ]);
        }
        sh(
            &lab.router,
            &format!(
                "ip addr add {ROUTER4}/24 dev s1 && ip addr add {ROUTER6}/64 dev s1 nodad && ip link set s1 up \
                 && ip addr add 198.51.100.1/24 dev c1 && ip addr add {CLIENT_ROUTER6}/64 dev c1 nodad && ip link set c1 up"
            ),
        );
        // The address the proxy serves is the replica's own (on its
        // loopback); the router learns where it is only from BGP.
        sh(
            &lab.replica,
            &format!(
                "ip addr add {REPLICA4}/24 dev uplink && ip addr add {REPLICA6}/64 dev uplink nodad && ip link set uplink up \
                 && ip addr add {VIP6}/128 dev lo && ip -6 route add default via {ROUTER6}"
            ),
        );
        sh(
            &lab.client,
            &format!(
                "ip addr add 198.51.100.2/24 dev lan && ip addr add {CLIENT6}/64 dev lan nodad && ip link set lan up \
                 && ip -6 route add default via {CLIENT_ROUTER6}"
            ),
        );
        lab.start_frr();
        lab
    }

    fn frr_run_dir(&self) -> PathBuf {
        Path::new("/var/run/frr").join(&self.router)
    }

    /// zebra and bgpd, with both of the replica's addresses as neighbours
    /// and IPv6 unicast activated for both.
    fn start_frr(&self) {
        let run_dir = self.frr_run_dir();
        std::fs::create_dir_all(&run_dir).unwrap();
        run(&["chown", "frr:frr", run_dir.to_str().unwrap()]);
        let conf_dir = self.dir.path();
        run(&["chmod", "755", conf_dir.to_str().unwrap()]);
        let mut neighbors = String::new();
        for addr in [REPLICA4, REPLICA6] {
            neighbors.push_str(&format!(
                " neighbor {addr} remote-as {REPLICA_ASN}\n neighbor {addr} timers 1 3\n neighbor {addr} timers connect 1\n"
            ));
        }
        let bgpd = format!(
            "hostname {router}\nlog file {log}\n!\nrouter bgp {ROUTER_ASN}\n bgp router-id {ROUTER4}\n no bgp ebgp-requires-policy\n{neighbors} address-family ipv6 unicast\n  neighbor {REPLICA4} activate\n  neighbor {REPLICA6} activate\n exit-address-family\n!\n",
            router = self.router,
            log = run_dir.join("bgpd.log").display(),
        );
        for (daemon, conf) in [("zebra", String::new()), ("bgpd", bgpd)] {
            let path = conf_dir.join(format!("{daemon}.conf"));
            std::fs::write(&path, conf).unwrap();
            run(&["chmod", "644", path.to_str().unwrap()]);
            let pid = run_dir.join(format!("{daemon}.pid"));
            run(&[
                "ip",
                "netns",
                "exec",
                &self.router,
                &format!("{FRR_DIR}/{daemon}"),
                "-N",
                &self.router,
                "-d",
                "-f",
                path.to_str().unwrap(),
                "-i",
                pid.to_str().unwrap(),
            ]);
            if daemon == "zebra" {
                self.wait("zebra's socket", || {
                    run_dir.join("zserv.api").exists().then_some(())
                });
            }
        }
        self.wait("bgpd's neighbours", || {
            self.vtysh("show bgp summary json")
                .contains(REPLICA6)
                .then_some(())
        });
    }

    fn vtysh(&self, command: &str) -> String {
        let out = Command::new("vtysh")
            .args(["-N", &self.router, "-c", command])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `teapot proxy` in the replica's namespace, HTTP on the announced
    /// address, one BGP peer `peer`; returns its HTTP port and admin
    /// address.
    fn start_proxy(&mut self, peer: &str) -> (u16, std::net::SocketAddr) {
        let manifests = self.dir.path().join("manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        let listen = format!("[{VIP6}]:0");
        let log = std::fs::File::create(&self.log).unwrap();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.replica])
            .arg(teapot_bin())
            .arg("proxy")
            .arg("--manifests")
            .arg(&manifests)
            .args(["--http", &listen, "--https", &listen])
            .args(["--admin", "127.0.0.1:0"])
            .args(["--bgp-asn", &REPLICA_ASN.to_string(), "--bgp-peer", peer])
            .args(["--announce", VIP6])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("teapot proxy starts");
        let stdout = child.stdout.take().unwrap();
        self.proxy = Some(child);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(addrs) = parse_listening_line(&line) {
                    let _ = tx.send(addrs);
                }
            }
        });
        let addrs = rx
            .recv_timeout(netns::PATIENCE)
            .unwrap_or_else(|_| panic!("no listening line\n{}", self.dump()));
        (addrs.http.port(), addrs.admin)
    }

    /// The proxy's `/status`, read inside the replica's namespace.
    fn status(&self, admin: std::net::SocketAddr) -> serde_json::Value {
        let out = run(&[
            "ip",
            "netns",
            "exec",
            &self.replica,
            "curl",
            "-sS",
            "-m",
            "3",
            &format!("http://{admin}/status"),
        ]);
        serde_json::from_str(&out).unwrap_or_default()
    }

    /// The next hop the router's kernel installed for the announced
    /// address, and by which protocol.
    fn route(&self) -> Option<(String, String)> {
        let out = sh(&self.router, &format!("ip -6 -j route show {VIP6}"));
        let routes: serde_json::Value = serde_json::from_str(out.trim()).ok()?;
        let route = routes.as_array()?.first()?;
        Some((
            route.get("gateway")?.as_str()?.to_string(),
            route.get("protocol")?.as_str()?.to_string(),
        ))
    }

    /// The client's `curl` to the announced address: the HTTP status.
    fn http_from_client(&self, port: u16) -> Option<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.client, "curl", "-sS", "-m", "3"])
            .args(["-o", "/dev/null", "-w", "%{http_code}"])
            .args(["-H", "Host: bgp.test"])
            .arg(format!("http://[{VIP6}]:{port}/"))
            .output()
            .ok()?;
        let code = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && code.len() == 3 && code != "000").then_some(code)
    }

    fn wait<T>(&self, what: &str, check: impl FnMut() -> Option<T>) -> T {
        netns::wait(what, || self.dump(), check)
    }

    fn dump(&self) -> String {
        let mut out = self.vtysh("show bgp summary");
        out.push_str(&self.vtysh("show bgp ipv6 unicast"));
        out.push_str(&sh(&self.router, "ip -6 route"));
        out.push_str(
            &std::fs::read_to_string(self.frr_run_dir().join("bgpd.log")).unwrap_or_default(),
        );
        out.push_str("--- proxy\n");
        out.push_str(&std::fs::read_to_string(&self.log).unwrap_or_default());
        out
    }

    /// Announced over `peer` (the proxy's `--bgp-peer`), installed by the
    /// router via the replica's IPv6 address, and HTTP reaches the proxy
    /// from the client; the proxy's `/status` says the session carries
    /// `families`.
    fn announce_and_reach(&mut self, peer: &str, neighbor: &str, families: &[&str]) {
        let (port, admin) = self.start_proxy(peer);
        self.wait(&format!("the session with {neighbor} established"), || {
            let out = self.vtysh(&format!("show bgp neighbors {neighbor} json"));
            let n: serde_json::Value = serde_json::from_str(&out).ok()?;
            (n.get(neighbor)?.get("bgpState")?.as_str()? == "Established").then_some(())
        });
        let (gateway, protocol) = self.wait(&format!("{VIP6}/128 in the router's kernel"), || {
            self.route()
        });
        assert_eq!(gateway, REPLICA6, "{}", self.dump());
        assert_eq!(protocol, "bgp", "{}", self.dump());
        let code = self.wait("HTTP from the client to the announced address", || {
            self.http_from_client(port)
        });
        eprintln!("client -> [{VIP6}]:{port} through the router: HTTP {code}");
        let status = self.status(admin);
        let session = &status["bgp"][0];
        assert_eq!(session["state"], "Established", "{status}");
        assert_eq!(session["families"], serde_json::json!(families), "{status}");
        assert_eq!(session["announced"], 1, "{status}");
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.dump());
        }
        if let Some(mut proxy) = self.proxy.take() {
            let _ = proxy.kill();
            let _ = proxy.wait();
        }
        for daemon in ["bgpd", "zebra"] {
            let pid = self.frr_run_dir().join(format!("{daemon}.pid"));
            if let Ok(pid) = std::fs::read_to_string(pid) {
                let _ = Command::new("kill").args(["-9", pid.trim()]).status();
            }
        }
        let _ = std::fs::remove_dir_all(self.frr_run_dir());
    }
}

#[test]
fn the_proxy_announces_its_ipv6_address_over_an_ipv6_session_and_a_client_reaches_it() {
    if !netns::runnable(
        "the_proxy_announces_its_ipv6_address_over_an_ipv6_session_and_a_client_reaches_it",
        missing,
    ) {
        return;
    }
    let mut lab = Lab::new("6");
    lab.announce_and_reach(
        &format!("{ROUTER6},{ROUTER_ASN},hold=3,keepalive=1"),
        REPLICA6,
        &["ipv6"],
    );
}

#[test]
fn the_proxy_announces_its_ipv6_address_over_an_ipv4_session_and_a_client_reaches_it() {
    if !netns::runnable(
        "the_proxy_announces_its_ipv6_address_over_an_ipv4_session_and_a_client_reaches_it",
        missing,
    ) {
        return;
    }
    let mut lab = Lab::new("4");
    // Multiprotocol BGP: the IPv6 route in MP_REACH_NLRI on the IPv4
    // session, its next hop the replica's IPv6 address on the link.
    lab.announce_and_reach(
        &format!("{ROUTER4},{ROUTER_ASN},hold=3,keepalive=1,next-hop={REPLICA6}"),
        REPLICA4,
        &["ipv4", "ipv6"],
    );
    // Only the IPv4 session is configured: the IPv6 neighbour is not up.
    let n = lab.vtysh(&format!("show bgp neighbors {REPLICA6} json"));
    assert!(!n.contains("\"Established\""), "{n}");
}
