//! IPv6 and dual-stack through the real `teapot proxy` binary, with a
//! client in a network namespace of its own that holds an IPv4 and an IPv6
//! address (documentation ranges), on a veth to the test's namespace where
//! the proxy and its IPv4 backends run:
//!
//! - HTTP and HTTPS on the proxy's IPv6 address, the client's IPv6 address
//!   in `X-Forwarded-For`, `X-Real-Ip` and `Forwarded` (quoted, RFC 7239
//!   §6);
//! - an L4 Service with `ipFamilyPolicy: RequireDualStack` and `ipFamilies:
//!   [IPv6, IPv4]` gets an address of each family from a mixed pool, the
//!   IPv6 one first in its status; TCP and UDP reach its IPv4 backends on
//!   both addresses; the state file holds both.
//!
//! The client speaks through `curl` (HTTP, HTTPS) and bash's `/dev/tcp`
//! and `/dev/udp` (L4) run inside its namespace. Needs root, iproute2,
//! bash and curl (announce/tests/netns/mod.rs says when it skips).
//!
//! Run: `cargo test -p teapot --test l4_dns dual_stack_netns_e2e::`.

use crate::netns;

use crate::common;

use std::net::SocketAddr;
use std::process::Command;

use common::*;
use netns::{Namespaces, run, sh};
use serde_json::{Value, json};
use teapot_testkit::l4::{TcpEcho, TcpMode, UdpEcho};
use teapot_testkit::process::{ProxyProcess, teapot_bin};

const OPS: &str = "ops";
/// The test's side of the veth: the proxy's own listeners.
const PROXY4: &str = "192.0.2.161";
const PROXY6: &str = "2001:db8:46::1";
/// The client's side.
const CLIENT4: &str = "192.0.2.162";
const CLIENT6: &str = "2001:db8:46::2";
/// The L4 pool: one address of each family, on the test's side of the
/// veth. The IPv4 one is listed first, so the IPv6 one being primary in
/// the status comes from `ipFamilies`.
const POOL4: &str = "192.0.2.163";
const POOL6: &str = "2001:db8:46::10";
const HOST: &str = "dual.test";

fn tools_missing() -> Option<String> {
    for tool in ["curl", "bash"] {
        if Command::new(tool).arg("--version").output().is_err() {
            return Some(format!("{tool} missing"));
        }
    }
    None
}

/// The client namespace on a veth whose other end (in the test's
/// namespace) holds the proxy's addresses and the pool's; deleted on drop.
struct Link {
    client: String,
    root: String,
    _namespaces: Namespaces,
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.root])
            .status();
    }
}

impl Link {
    fn new() -> Link {
        let pid = std::process::id();
        let mut namespaces = Namespaces(Vec::new());
        let client = namespaces.add(format!("tpds{pid}c"));
        let root = format!("tpds{pid}");
        run(&[
            "ip", "link", "add", &root, "type", "veth", "peer", "name", "lan", "netns", &client,
        ]);
        // nodad: the addresses are usable at once, not after duplicate
        // address detection.
        for addr in [format!("{PROXY4}/29"), format!("{POOL4}/32")] {
            run(&["ip", "addr", "add", &addr, "dev", &root]);
        }
        for addr in [format!("{PROXY6}/64"), format!("{POOL6}/128")] {
            run(&["ip", "-6", "addr", "add", &addr, "dev", &root, "nodad"]);
        }
        run(&["ip", "link", "set", &root, "up"]);
        sh(
            &client,
            &format!(
                "ip link set lo up && ip addr add {CLIENT4}/29 dev lan && ip -6 addr add {CLIENT6}/64 dev lan nodad && ip link set lan up"
            ),
        );
        Link {
            client,
            root,
            _namespaces: namespaces,
        }
    }

    /// Runs `script` in the client's namespace; its stdout, or the error.
    async fn client(&self, script: String) -> Result<String, String> {
        let out = tokio::process::Command::new("ip")
            .args(["netns", "exec", &self.client, "bash", "-c", &script])
            .output()
            .await
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "{script}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }
}

/// `teapot proxy` with its HTTP and HTTPS listeners on the IPv6 address of
/// the veth and `args`; killed on drop.
async fn proxy(manifests: &std::path::Path, args: &[&str]) -> ProxyProcess {
    let http = format!("[{PROXY6}]:0");
    ProxyProcess::start_on(
        &teapot_bin(),
        manifests,
        (&http, &http, "127.0.0.1:0"),
        args,
    )
    .await
    .expect("teapot proxy starts")
}

async fn status(admin: SocketAddr) -> Value {
    let r = send(
        admin,
        &teapot_testkit::client::Transport::Plain,
        &teapot_testkit::client::Request::get("admin", "/status"),
    )
    .await;
    serde_json::from_str(&r.text()).expect("/status is JSON")
}

/// The dual-stack L4 Service: TCP and UDP on `port`, to the IPv4 echoes.
fn l4_service(port: u16, tcp: &TcpEcho, udp: &UdpEcho) -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "db", "namespace": OPS},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "teapot.dev/lb",
                     "ipFamilyPolicy": "RequireDualStack",
                     "ipFamilies": ["IPv6", "IPv4"],
                     "ports": [{"name": "tcp", "port": port, "protocol": "TCP"},
                               {"name": "udp", "port": port, "protocol": "UDP"}]},
        }),
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "db-0", "namespace": OPS,
                         "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "tcp", "port": tcp.port(), "protocol": "TCP"},
                      {"name": "udp", "port": udp.port(), "protocol": "UDP"}],
        }),
    ]
}

/// bash's `/dev/tcp` or `/dev/udp` to `[addr]:port`: writes `data`, reads
/// as many bytes back (one datagram for UDP), within 3 s.
fn echo_script(proto: &str, addr: &str, port: u16, data: &str) -> String {
    format!(
        "exec 3<>/dev/{proto}/{addr}/{port} && printf '%s' '{data}' >&3 && timeout 3 head -c {} <&3",
        data.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_http_https_and_a_dual_stack_l4_service_from_a_client_namespace() {
    if !netns::runnable(
        "ipv6_http_https_and_a_dual_stack_l4_service_from_a_client_namespace",
        tools_missing,
    ) {
        return;
    }
    let link = Link::new();
    let web = echo(OPS, "web", "web-0").await;
    let tcp = TcpEcho::start(TcpMode::Echo).await.unwrap();
    let udp = UdpEcho::start().await.unwrap();
    let port = 7446;
    let mut manifests = echo_service(OPS, "web", &[&web]);
    manifests.push(simple_ingress(OPS, "web", HOST, "web"));
    manifests.extend(l4_service(port, &tcp, &udp));
    let dir = tempfile::tempdir().unwrap();
    let manifests_dir = dir.path().join("manifests");
    std::fs::create_dir(&manifests_dir).unwrap();
    std::fs::write(manifests_dir.join("all.yaml"), docs(&manifests)).unwrap();
    let state = dir.path().join("l4-state.json");
    let pool = format!("default={POOL4},{POOL6}");
    let addrs = proxy(
        &manifests_dir,
        &["--l4-pool", &pool, "--l4-state", state.to_str().unwrap()],
    )
    .await;
    assert_eq!(addrs.http.ip().to_string(), PROXY6, "{addrs:?}");

    // (a) HTTP and HTTPS on the proxy's IPv6 address: the backend is told
    // the client's IPv6 address.
    for (scheme, port) in [("http", addrs.http.port()), ("https", addrs.https.port())] {
        let script = format!(
            "curl -sk --fail --max-time 5 --resolve {HOST}:{port}:[{PROXY6}] {scheme}://{HOST}:{port}/headers -H 'X-Forwarded-For: 6.6.6.6'"
        );
        let body = eventually(
            &format!("{scheme} on [{PROXY6}] from the client namespace"),
            RELOAD_TIMEOUT,
            || link.client(script.clone()),
        )
        .await;
        let json: Value = serde_json::from_str(&body).expect("the echo's JSON");
        let headers = &json["headers"];
        assert_eq!(headers["X-Forwarded-For"], json!([CLIENT6]), "{json:#}");
        assert_eq!(headers["X-Real-Ip"], json!([CLIENT6]), "{json:#}");
        let forwarded = headers["Forwarded"][0].as_str().unwrap_or_default();
        assert!(
            forwarded.starts_with(&format!("for=\"[{CLIENT6}]\";proto={scheme};")),
            "{json:#}"
        );
    }

    // (b) The dual-stack Service: both addresses, the IPv6 one first.
    let report = eventually("db listening on both addresses", RELOAD_TIMEOUT, || async {
        let s = status(addrs.admin).await;
        let db = s["l4"]["services"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == "db"))
            .cloned()
            .ok_or_else(|| s["l4"].clone())?;
        let listeners = db["listeners"].as_array().cloned().unwrap_or_default();
        if listeners.len() == 4 && listeners.iter().all(|l| l["state"] == "listening") {
            Ok(db)
        } else {
            Err(db)
        }
    })
    .await;
    assert_eq!(report["addresses"], json!([POOL6, POOL4]), "{report:#}");
    let ips: Vec<&Value> = report["status"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["ip"])
        .collect();
    assert_eq!(ips, [POOL6, POOL4], "{report:#}");
    for addr in [POOL6, POOL4] {
        for proto in ["tcp", "udp"] {
            let data = format!("{proto}-to-{addr}");
            let back = eventually(
                &format!("{proto} to {addr}:{port} from the client namespace"),
                RELOAD_TIMEOUT,
                || link.client(echo_script(proto, addr, port, &data)),
            )
            .await;
            assert_eq!(back, data);
        }
    }
    assert!(tcp.served() >= 2 && udp.datagrams() >= 2);

    // Held as such: a restart keeps both.
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(
        text.contains("\"version\": 3") && text.contains(POOL6) && text.contains(POOL4),
        "{text}"
    );
}
