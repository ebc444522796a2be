//! Dual-stack tenants end to end: `teapot agent` (in-process) between a
//! tenant API double and an LB API double whose admission is the real
//! webhook's rules.
//!
//! The agent mirrors a dual-stack Service's IPv4 and IPv6 EndpointSlices
//! as one LB slice per family, with the nodes' InternalIPs of that family
//! (nodeport mode), which the webhook admits because the Tenant's
//! `nodeCIDRs` hold an IPv6 range beside the IPv4 one; when the Service
//! goes back to IPv4 only, the IPv6 slice is deleted rather than left
//! routing to old endpoints. Its `ipFamilies` and `ipFamilyPolicy` travel
//! as `teapot.dev/ip-families` and `teapot.dev/ip-family-policy` on the
//! copy, which the webhook admits.
//!
//! The real `teapot proxy` binary then serves both families across: an
//! IPv4 client to a backend on `[::1]` and an IPv6 client (the proxy
//! listening on `[::1]`) to a backend on 127.0.0.1, with the forwarding
//! fields naming the client in its own family (`Forwarded: for="[::1]"`,
//! RFC 7239 §6's quoted form). Those backends are in an operator
//! namespace (no Tenant), where loopback endpoints are allowed. The same
//! across families for L4: a TCP/UDP Service on `[::1]` to IPv4 backends
//! and one on 127.0.0.1 to IPv6 backends.
//!
//! Run: `cargo test -p teapot --test agent_kube dual_stack_e2e::`.

use crate::common;

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use common::agent::{Agent, LB_NS, NS};
use common::*;
use serde_json::{Value, json};
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::client::{Request, Transport};
use teapot_testkit::echo::{EchoIdentity, EchoServer};
use teapot_testkit::process::{ProxyProcess, teapot_bin};

/// The tenant's nodes: documentation and unique-local ranges, which the
/// LB side never dials in this test (only the slices are checked).
const NODE_V4: &str = "192.0.2.10";
const NODE_V6: &str = "fd00:7e:1::10";

/// The LB cluster: Tenant `acme` whose nodes are in one IPv4 and one IPv6
/// range.
async fn lb_cluster() -> (ApiServer, tokio::sync::watch::Sender<bool>) {
    agent::lb_cluster(&["192.0.2.0/24", "fd00:7e:1::/64"], INGRESS_KINDS).await
}

fn tenant_slice(family: &str, name: &str, pod: &str) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": family,
        "endpoints": [{"addresses": [pod], "nodeName": "node-1",
                       "conditions": {"ready": true}}],
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
    })
}

fn tenant_service(families: &[&str]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "db", "namespace": NS},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "teapot.dev/lb",
                 "selector": {"app": "db"},
                 "ipFamilyPolicy": if families.len() > 1 { "PreferDualStack" } else { "SingleStack" },
                 "ipFamilies": families,
                 "ports": [{"name": "pg", "port": 5432, "targetPort": 5432,
                            "nodePort": 31432, "protocol": "TCP"}]},
    })
}

fn addresses(slice: &Value) -> Vec<String> {
    slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_mirrors_both_families_and_drops_one_the_service_loses() {
    let (lb, webhook_stop) = lb_cluster().await;
    let tenant = ApiServer::start().await;
    // A dual-stack node: the IPv6 InternalIP is listed first, as some
    // installers do; the agent still finds one of each family.
    tenant.apply(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"},
        "status": {"addresses": [
            {"type": "InternalIP", "address": NODE_V6},
            {"type": "Hostname", "address": "node-1"},
            {"type": "InternalIP", "address": NODE_V4},
        ]},
    }));
    tenant.apply(tenant_service(&["IPv4", "IPv6"]));
    tenant.apply(tenant_slice("IPv4", "db-v4", "10.244.0.9"));
    tenant.apply(tenant_slice("IPv6", "db-v6", "fd10::9"));

    let agent = Agent::start(&tenant, &lb);

    let mirrored = teapot_api::hostname::mirrored_service_name(NS, "db");
    let v6_name = format!("{mirrored}-ipv6");
    let slice_of = |name: String| {
        let lb = &lb;
        async move {
            lb.get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &name)
                .ok_or(format!("no LB EndpointSlice {name} yet"))
        }
    };
    let v4 = eventually("the IPv4 LB slice", RELOAD_TIMEOUT, || {
        slice_of(mirrored.clone())
    })
    .await;
    let v6 = eventually("the IPv6 LB slice (admitted)", RELOAD_TIMEOUT, || {
        slice_of(v6_name.clone())
    })
    .await;
    assert_eq!(v4["addressType"], "IPv4");
    assert_eq!(addresses(&v4), [NODE_V4]);
    assert_eq!(v6["addressType"], "IPv6");
    assert_eq!(addresses(&v6), [NODE_V6]);
    assert_eq!(v6["ports"][0]["port"], 31432);
    assert_eq!(
        v6["metadata"]["labels"]["kubernetes.io/service-name"],
        mirrored
    );
    // The families travel as annotations the webhook admits, not in the
    // copy's spec (the LB cluster's API server would check those against
    // its own families).
    let families_of = |copy: &Value| {
        (
            copy["metadata"]["annotations"]["teapot.dev/ip-families"].clone(),
            copy["metadata"]["annotations"]["teapot.dev/ip-family-policy"].clone(),
        )
    };
    let copy = lb
        .get("v1", "Service", LB_NS, &mirrored)
        .expect("the LB copy (admitted)");
    assert_eq!(
        families_of(&copy),
        (json!("IPv4,IPv6"), json!("PreferDualStack")),
        "{copy:#}"
    );
    assert!(copy["spec"].get("ipFamilies").is_none(), "{copy:#}");
    assert!(copy["spec"].get("ipFamilyPolicy").is_none(), "{copy:#}");

    // Back to IPv4 only: Kubernetes drops the IPv6 slice; so does the LB side.
    tenant.apply(tenant_service(&["IPv4"]));
    assert!(tenant.delete("discovery.k8s.io/v1", "EndpointSlice", NS, "db-v6"));
    eventually("the IPv6 LB slice deleted", RELOAD_TIMEOUT, || async {
        match lb.get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &v6_name) {
            None => Ok(()),
            Some(s) => Err(s),
        }
    })
    .await;
    let v4 = lb
        .get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &mirrored)
        .expect("the IPv4 slice stays");
    assert_eq!(addresses(&v4), [NODE_V4]);
    eventually("the copy single-stack again", RELOAD_TIMEOUT, || async {
        let copy = lb.get("v1", "Service", LB_NS, &mirrored).unwrap();
        match families_of(&copy) {
            (f, p) if f == "IPv4" && p == "SingleStack" => Ok(()),
            other => Err(other),
        }
    })
    .await;

    agent.stop().await;
    let _ = webhook_stop.send(true);
}

const OPS: &str = "ops";

/// `teapot proxy` on `manifests` with every listener on `[::1]`; killed
/// on drop.
async fn ipv6_proxy(manifests: &std::path::Path) -> ProxyProcess {
    ProxyProcess::start_on(
        &teapot_bin(),
        manifests,
        ("[::1]:0", "[::1]:0", "[::1]:0"),
        &[],
    )
    .await
    .expect("teapot proxy starts")
}

/// GETs `/headers` on `host` through `addr` until it answers 200; the echo's
/// JSON.
async fn headers_via(addr: std::net::SocketAddr, host: &str) -> Value {
    eventually(
        &format!("GET {host}/headers via {addr}"),
        RELOAD_TIMEOUT,
        || async {
            let r = send(
                addr,
                &Transport::Plain,
                &Request::get(host, "/headers").header("X-Forwarded-For", "6.6.6.6"),
            )
            .await;
            if r.status == 200 {
                Ok(r.json().unwrap())
            } else {
                Err(format!("{} {}", r.status, r.text()))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_each_family_reach_backends_of_the_other_with_their_own_address_forwarded() {
    let v4 = echo(OPS, "to-v4", "v4-0").await;
    let v6 = EchoServer::start_on(
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        EchoIdentity::new(OPS, "", "to-v6", "v6-0"),
    )
    .await
    .expect("an echo on [::1]");
    let mut v6_slice = slice(
        OPS,
        "to-v6-0",
        "to-v6",
        &[(Some("http"), v6.addr().port())],
        &[("::1", true)],
    );
    v6_slice["addressType"] = json!("IPv6");
    let mut manifests = echo_service(OPS, "to-v4", &[&v4]);
    manifests.push(service(OPS, "to-v6", &[(Some("http"), 80)]));
    manifests.push(v6_slice);
    manifests.push(simple_ingress(OPS, "to-v4", "to-v4.test", "to-v4"));
    manifests.push(simple_ingress(OPS, "to-v6", "to-v6.test", "to-v6"));
    let h = Harness::start(&[("manifests.yaml", docs(&manifests))]).await;
    let v6_addrs = ipv6_proxy(&h.manifests()).await;
    assert!(v6_addrs.http.is_ipv6(), "{:?}", v6_addrs.http);

    // IPv4 client -> IPv6 backend.
    let json = headers_via(h.proxy.http, "to-v6.test").await;
    assert_eq!(json["pod"], "v6-0", "{json:#}");
    let headers = &json["headers"];
    assert_eq!(headers["X-Forwarded-For"], json!(["127.0.0.1"]), "{json:#}");
    assert_eq!(headers["X-Real-Ip"], json!(["127.0.0.1"]), "{json:#}");
    assert_eq!(
        headers["Forwarded"],
        json!(["for=127.0.0.1;proto=http;host=\"to-v6.test\""]),
        "{json:#}"
    );

    // IPv6 client -> IPv4 backend, and -> IPv6 backend.
    for (host, pod) in [("to-v4.test", "v4-0"), ("to-v6.test", "v6-0")] {
        let json = headers_via(v6_addrs.http, host).await;
        assert_eq!(json["pod"], pod, "{json:#}");
        let headers = &json["headers"];
        assert_eq!(headers["X-Forwarded-For"], json!(["::1"]), "{json:#}");
        assert_eq!(headers["X-Real-Ip"], json!(["::1"]), "{json:#}");
        assert_eq!(
            headers["Forwarded"],
            json!([format!("for=\"[::1]\";proto=http;host=\"{host}\"")]),
            "{json:#}"
        );
    }
}

/// A TCP echo and a UDP echo on `[::1]`, serving until the test ends.
async fn ipv6_echoes() -> (u16, u16) {
    let tcp = tokio::net::TcpListener::bind("[::1]:0").await.unwrap();
    let tcp_port = tcp.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = tcp.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = conn.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let udp = tokio::net::UdpSocket::bind("[::1]:0").await.unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, from)) = udp.recv_from(&mut buf).await {
            let _ = udp.send_to(&buf[..n], from).await;
        }
    });
    (tcp_port, udp_port)
}

/// A `type: LoadBalancer` Service asking for `ip`, with one TCP and one
/// UDP port `port`, and its one endpoint `backend` with the echoes' ports.
fn l4_service(
    name: &str,
    ip: IpAddr,
    port: u16,
    backend: IpAddr,
    tcp: u16,
    udp: u16,
) -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": OPS},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "teapot.dev/lb",
                     "loadBalancerIP": ip.to_string(),
                     "ports": [{"name": "tcp", "port": port, "protocol": "TCP"},
                               {"name": "udp", "port": port, "protocol": "UDP"}]},
        }),
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-0"), "namespace": OPS,
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": if backend.is_ipv6() { "IPv6" } else { "IPv4" },
            "endpoints": [{"addresses": [backend.to_string()], "conditions": {"ready": true}}],
            "ports": [{"name": "tcp", "port": tcp, "protocol": "TCP"},
                      {"name": "udp", "port": udp, "protocol": "UDP"}],
        }),
    ]
}

async fn tcp_echoed(addr: std::net::SocketAddr, data: &[u8]) -> Result<Vec<u8>, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    conn.write_all(data).await.map_err(|e| e.to_string())?;
    conn.shutdown().await.map_err(|e| e.to_string())?;
    let mut back = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut back))
        .await
        .map_err(|_| "no TCP answer".to_string())?
        .map_err(|e| e.to_string())?;
    Ok(back)
}

async fn udp_echoed(addr: std::net::SocketAddr, data: &[u8]) -> Result<Vec<u8>, String> {
    let local: IpAddr = if addr.is_ipv6() {
        Ipv6Addr::LOCALHOST.into()
    } else {
        std::net::Ipv4Addr::LOCALHOST.into()
    };
    let socket = tokio::net::UdpSocket::bind((local, 0))
        .await
        .map_err(|e| e.to_string())?;
    socket.connect(addr).await.map_err(|e| e.to_string())?;
    socket.send(data).await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65_536];
    let n = tokio::time::timeout(Duration::from_secs(2), socket.recv(&mut buf))
        .await
        .map_err(|_| "no UDP answer".to_string())?
        .map_err(|e| e.to_string())?;
    Ok(buf[..n].to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l4_tcp_and_udp_cross_families_both_ways() {
    let v6_client: IpAddr = Ipv6Addr::LOCALHOST.into();
    let v4_client: IpAddr = std::net::Ipv4Addr::LOCALHOST.into();
    let tcp4 = teapot_testkit::l4::TcpEcho::start(teapot_testkit::l4::TcpMode::Echo)
        .await
        .unwrap();
    let udp4 = teapot_testkit::l4::UdpEcho::start().await.unwrap();
    let (tcp6, udp6) = ipv6_echoes().await;
    let port6 = teapot_testkit::l4::free_port(v6_client).unwrap();
    let port4 = teapot_testkit::l4::free_port(v4_client).unwrap();
    let mut manifests = l4_service(
        "to-v4",
        v6_client,
        port6,
        v4_client,
        tcp4.port(),
        udp4.port(),
    );
    manifests.extend(l4_service("to-v6", v4_client, port4, v6_client, tcp6, udp6));
    let state = tempfile::tempdir().unwrap();
    let state_file = state.path().join("l4-state.json");
    let h = Harness::start_with_args(
        &[("l4.yaml", docs(&manifests))],
        &[
            "--l4-pool",
            "default=127.0.0.1,::1",
            "--l4-state",
            state_file.to_str().unwrap(),
        ],
    )
    .await;
    for (what, addr) in [
        (
            "IPv6 client to IPv4 backends",
            std::net::SocketAddr::new(v6_client, port6),
        ),
        (
            "IPv4 client to IPv6 backends",
            std::net::SocketAddr::new(v4_client, port4),
        ),
    ] {
        let data = format!("{what} over TCP").into_bytes();
        let back = eventually(&format!("{what}: TCP"), RELOAD_TIMEOUT, || {
            tcp_echoed(addr, &data)
        })
        .await;
        assert_eq!(back, data, "{what}");
        let data = format!("{what} over UDP").into_bytes();
        let back = eventually(&format!("{what}: UDP"), RELOAD_TIMEOUT, || {
            udp_echoed(addr, &data)
        })
        .await;
        assert_eq!(back, data, "{what}");
    }
    let status = h.status().await;
    let services = status["l4"]["services"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (name, ip) in [("to-v4", "::1"), ("to-v6", "127.0.0.1")] {
        let s = services
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {status:#}"));
        assert_eq!(s["status"]["ingress"][0]["ip"], ip, "{s:#}");
    }
    assert!(tcp4.served() > 0 && udp4.datagrams() > 0);
}
