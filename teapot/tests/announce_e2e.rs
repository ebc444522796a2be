//! `teapot proxy --bgp-peer`: the real binary announces the fleet's
//! address to a router played by this test on loopback, and on SIGTERM
//! marks it GRACEFUL_SHUTDOWN, withdraws it and ends the session with a
//! CEASE before it exits (docs/announce.md). In kube mode the replica's
//! sessions reach the `Announced` condition through its announcer Lease.
//! The FRR tests of the speaker itself are in announce/tests/frr_netns.rs.
//!
//! Run with `cargo test -p teapot --test announce_e2e`.

mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::*;
use teapot_announce::wire::{self, Family, Message, Open};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// 203.0.113.10/32 as NLRI bytes.
const PREFIX: [u8; 5] = [32, 203, 0, 113, 10];
const GSHUT_ATTR: [u8; 7] = [0xc0, 8, 4, 0xff, 0xff, 0, 0];

struct Router {
    stream: TcpStream,
    buf: Vec<u8>,
    /// The proxy's OPEN as sent.
    opened: Vec<u8>,
}

impl Router {
    /// Accepts the proxy's connection and completes the OPEN exchange,
    /// without a hold timer: this router answers no keepalives, and a
    /// loaded machine must not see the session expire mid-test.
    async fn establish(listener: &TcpListener) -> Router {
        let (stream, _) = tokio::time::timeout(RELOAD_TIMEOUT, listener.accept())
            .await
            .expect("the proxy connects")
            .unwrap();
        let mut r = Router {
            stream,
            buf: Vec::new(),
            opened: Vec::new(),
        };
        let raw = r.next().await.expect("an OPEN");
        let Message::Open(open) = wire::decode(&raw).unwrap().unwrap().0 else {
            panic!("expected OPEN");
        };
        r.opened = raw;
        assert_eq!(open.asn, 64501);
        r.stream
            .write_all(&wire::encode_open(&Open {
                asn: 64500,
                hold_time_secs: 0,
                router_id: Ipv4Addr::new(192, 0, 2, 1),
                families: vec![Family::Ipv4],
                four_octet_as: true,
            }))
            .await
            .unwrap();
        r.stream.write_all(&wire::encode_keepalive()).await.unwrap();
        r
    }

    /// The next message other than a KEEPALIVE, raw.
    async fn next(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some((message, len)) = wire::decode(&self.buf).unwrap() {
                let raw: Vec<u8> = self.buf.drain(..len).collect();
                if message != Message::Keepalive {
                    return Some(raw);
                }
                continue;
            }
            let n = tokio::time::timeout(RELOAD_TIMEOUT, self.stream.read_buf(&mut self.buf))
                .await
                .expect("the proxy speaks in time")
                .unwrap();
            if n == 0 {
                return None;
            }
        }
    }
}

/// `teapot proxy` announcing 203.0.113.10 to `router` (AS 64500, no hold
/// timer, then `peer_options`), the session established.
async fn announcing_proxy(router: &TcpListener, peer_options: &str) -> (Harness, Router) {
    announcing_proxy_with(router, peer_options, &[]).await
}

/// [`announcing_proxy`] with more flags.
async fn announcing_proxy_with(
    router: &TcpListener,
    peer_options: &str,
    flags: &[&str],
) -> (Harness, Router) {
    let port = router.local_addr().unwrap().port();
    let peer = format!("127.0.0.1,64500,port={port},hold=0{peer_options}");
    let mut args = vec![
        "--bgp-peer",
        &peer,
        "--bgp-asn",
        "64501",
        "--announce",
        "203.0.113.10",
        "--bgp-graceful-wait",
        "1",
    ];
    args.extend_from_slice(flags);
    let harness = Harness::start_with_args(&[], &args).await;
    let r = Router::establish(router).await;
    (harness, r)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn the_proxy_announces_its_address_and_withdraws_it_gracefully_on_sigterm() {
    let router = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = router.local_addr().unwrap().port();
    let (mut harness, mut r) = announcing_proxy(&router, "").await;

    let announced = r.next().await.expect("an UPDATE");
    assert_eq!(announced[18], 2, "UPDATE");
    assert!(contains(&announced, &PREFIX), "{announced:?}");
    assert!(!contains(&announced, &GSHUT_ATTR));

    let status = harness
        .wait_status("the BGP session established with one route", |s| {
            s["bgp"][0]["state"] == "Established" && s["bgp"][0]["announced"] == 1
        })
        .await;
    assert_eq!(status["bgp"][0]["peer"], format!("127.0.0.1:{port}"));
    // Failures by reason and BFD are reported even when there are none.
    assert!(status["bgp"][0]["failures"].is_object(), "{status}");
    assert!(status["bgp"][0]["bfd"].is_null(), "{status}");
    assert_eq!(status["bgp"][0]["md5"], false, "{status}");
    let metrics = harness.metrics().await;
    let established = format!("teapot_bgp_session_established{{peer=\"127.0.0.1:{port}\"}} 1");
    assert!(metrics.contains(&established), "{metrics}");

    harness.proxy.terminate().unwrap();
    let marked = r.next().await.expect("the GRACEFUL_SHUTDOWN UPDATE");
    assert!(
        contains(&marked, &PREFIX) && contains(&marked, &GSHUT_ATTR),
        "{marked:?}"
    );
    let withdrawn = r.next().await.expect("the withdrawal");
    // Withdrawn-routes length 5, then the prefix.
    assert_eq!(
        &withdrawn[19..26],
        &[0, 5, 32, 203, 0, 113, 10],
        "{withdrawn:?}"
    );
    let cease = r.next().await.expect("CEASE");
    let Message::Notification(n) = wire::decode(&cease).unwrap().unwrap().0 else {
        panic!("expected NOTIFICATION, got {cease:?}");
    };
    assert_eq!(n.code, wire::code::CEASE);
    let status = harness
        .proxy
        .wait(Duration::from_secs(60))
        .await
        .expect("the proxy exits");
    assert!(status.success(), "{status}");
}

/// `--bgp-graceful-restart-time 120`: the proxy's OPEN offers graceful
/// restart (the Restart State bit set: its first session since it
/// started), its announcement ends with End-of-RIB, and `/status` says
/// so. Without the flag there is neither.
#[tokio::test]
async fn with_a_graceful_restart_time_the_proxy_offers_it_and_sends_end_of_rib() {
    let router = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (harness, mut r) =
        announcing_proxy_with(&router, "", &["--bgp-graceful-restart-time", "120"]).await;
    let gr = wire::graceful_restart_of(&r.opened).expect("the capability");
    assert!(gr.restarted && !gr.notification, "{gr:?}");
    assert_eq!(gr.restart_time_secs, 120);
    assert_eq!(gr.families, [(Family::Ipv4, true)]);
    let announced = r.next().await.expect("an UPDATE");
    assert!(contains(&announced, &PREFIX), "{announced:?}");
    let marker = r.next().await.expect("End-of-RIB");
    assert_eq!(marker, wire::encode_end_of_rib(Family::Ipv4));
    let status = harness
        .wait_status("End-of-RIB in /status", |s| {
            s["bgp"][0]["graceful_restart"]["end_of_rib_sent"] == true
        })
        .await;
    assert_eq!(status["bgp"][0]["families"], serde_json::json!(["ipv4"]));
    // This router offered no graceful restart of its own.
    assert!(
        status["bgp"][0]["graceful_restart"]["router_restart_time"].is_null(),
        "{status}"
    );

    let router = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (harness, r) = announcing_proxy(&router, "").await;
    assert_eq!(wire::graceful_restart_of(&r.opened), None);
    let status = harness
        .wait_status("the route announced", |s| s["bgp"][0]["announced"] == 1)
        .await;
    assert!(status["bgp"][0]["graceful_restart"].is_null(), "{status}");
}

/// `--bgp-peer ...,password-file=PATH`: the router's socket takes only
/// segments signed with its TCP-MD5 password, so the session comes up only
/// if the proxy signs with the file's password; `/status` says `md5` and
/// neither it nor `/metrics` shows the password.
#[tokio::test]
async fn with_a_password_file_the_session_is_signed_and_status_says_md5_only() {
    let password = "s3cret-of-the-router";
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    let key = teapot_announce::md5::Key::new(password.into()).unwrap();
    teapot_announce::md5::set_key(&socket, Ipv4Addr::LOCALHOST.into(), &key).unwrap();
    socket.bind((Ipv4Addr::LOCALHOST, 0).into()).unwrap();
    let router = socket.listen(8).unwrap();
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), format!("{password}\n")).unwrap();
    let options = format!(",password-file={}", secret.path().display());
    let (harness, mut r) = announcing_proxy(&router, &options).await;
    let announced = r.next().await.expect("an UPDATE");
    assert!(contains(&announced, &PREFIX), "{announced:?}");
    let status = harness
        .wait_status("the signed BGP session established", |s| {
            s["bgp"][0]["state"] == "Established"
        })
        .await;
    assert_eq!(status["bgp"][0]["md5"], true, "{status}");
    let shown = format!("{status}{}", harness.metrics().await);
    assert!(!shown.contains(password), "{shown}");
}

/// In kube mode a replica tells of its BGP sessions on its own Pod: a
/// Normal Event when a session is established, a Warning naming the peer
/// and why when it is lost, one per change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bgp_session_changes_are_events_on_the_replicas_pod() {
    use teapot_testkit::apiserver::ApiServer;
    use teapot_testkit::process::ProxyProcess;
    let api = ApiServer::start().await;
    let router = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = router.local_addr().unwrap().port();
    let peer = format!("127.0.0.1,64500,port={port},hold=0");
    let proxy = ProxyProcess::start_kube_with_env(
        &teapot_bin(),
        api.kubeconfig_path(),
        &[
            "--domain",
            "example.net",
            "--lease-namespace",
            "teapot-system",
            "--bgp-peer",
            &peer,
            "--bgp-asn",
            "64501",
            "--announce",
            "203.0.113.10",
        ],
        &[("POD_NAME", "teapot-lb-0")],
    )
    .await
    .expect("teapot proxy --kube starts");
    let events = || {
        api.requests()
            .into_iter()
            .filter(|r| r.path == "/apis/events.k8s.io/v1/namespaces/teapot-system/events")
            .filter_map(|r| r.body)
            .collect::<Vec<serde_json::Value>>()
    };
    let event = |reason: &'static str| {
        let events = &events;
        eventually(reason, RELOAD_TIMEOUT, move || async move {
            events()
                .into_iter()
                .find(|e| e["reason"] == reason)
                .ok_or("not yet")
        })
    };
    let router = Router::establish(&router).await;
    let e = event("BGPSessionEstablished").await;
    assert_eq!(e["type"], "Normal");
    assert_eq!(e["regarding"]["kind"], "Pod");
    assert_eq!(e["regarding"]["name"], "teapot-lb-0");
    // The router goes away: the session is lost.
    drop(router);
    let e = event("BGPSessionDown").await;
    assert_eq!(e["type"], "Warning");
    let note = e["note"].as_str().unwrap();
    assert!(note.contains(&format!("127.0.0.1:{port}")), "{note}");
    // Reconnection attempts that fail alike add no Event.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        events()
            .iter()
            .filter(|e| e["reason"] == "BGPSessionDown")
            .count(),
        1
    );
    drop(proxy);
}

/// Kube mode: a Service's address in a BGP pool is `Announced` True while
/// the replica's session is established (its announcer Lease says so),
/// and False with `NoBGPSession` once the router is gone, without an API
/// write per session change: the sessions ride on the Lease's renewals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_mode_announced_follows_the_replicas_bgp_sessions() {
    use serde_json::json;
    use teapot_testkit::apiserver::ApiServer;
    use teapot_testkit::process::ProxyProcess;

    const NS: &str = "bgp-announced";
    let api = ApiServer::start().await;
    let router = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peer = format!(
        "127.0.0.1,64500,port={},hold=0",
        router.local_addr().unwrap().port()
    );
    let proxy = ProxyProcess::start_kube_with_env(
        &teapot_bin(),
        api.kubeconfig_path(),
        &[
            "--domain",
            "example.net",
            "--lease-namespace",
            "teapot-system",
            "--l4-pool",
            "default=203.0.113.7",
            "--bgp-asn",
            "64501",
            "--bgp-peer",
            &peer,
            "--announce-pool",
            "wan=203.0.113.0/24,mode=bgp",
        ],
        &[("POD_NAME", "teapot-lb-0")],
    )
    .await
    .expect("teapot proxy --kube starts");
    let r = Router::establish(&router).await;
    api.apply(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": "db", "namespace": NS },
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": "teapot.dev/lb",
            "ports": [{ "name": "tcp", "port": 5432, "protocol": "TCP" }],
        },
    }));
    let up = announced_condition(&api, NS, "True", "Announced").await;
    let message = up["message"].as_str().unwrap();
    assert!(
        message.contains("203.0.113.7: pool wan, mode bgp")
            && message.contains("1 established BGP session(s) carrying IPv4"),
        "{up}"
    );
    let lease = api
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            "teapot-system",
            "teapot-announcer-teapot-lb-0",
        )
        .or_else(|| {
            // Outside a Pod the replica is named after the host.
            api.requests()
                .into_iter()
                .find(|r| r.path.contains("/leases/teapot-announcer-"))
                .and_then(|r| {
                    let name = r.path.rsplit('/').next()?.to_string();
                    api.get("coordination.k8s.io/v1", "Lease", "teapot-system", &name)
                })
        })
        .expect("the replica's announcer Lease");
    assert_eq!(
        lease["metadata"]["annotations"]["teapot.dev/announce-bgp"], "peers=1,ipv4=1,ipv6=0",
        "{lease}"
    );

    // The router goes away; the proxy's next attempts are accepted by the
    // listener's backlog and answered by nobody.
    drop(r);
    let down = announced_condition(&api, NS, "False", "NoBGPSession").await;
    assert!(
        down["message"]
            .as_str()
            .unwrap()
            .contains("has an established BGP session"),
        "{down}"
    );
    // The session's changes cost no write of their own: the Lease is
    // written once per renewal (5 s for a replica with BGP pools only).
    let writes = api
        .requests()
        .iter()
        .filter(|r| r.method != "GET" && r.path.contains("/leases/teapot-announcer-"))
        .count();
    assert!(writes < 20, "{writes} announcer Lease writes");
    drop(router);
    drop(proxy);
}

/// Waits for Service `NS/db`'s `Announced` condition with `status` and
/// `reason`.
async fn announced_condition(
    api: &teapot_testkit::apiserver::ApiServer,
    ns: &str,
    status: &str,
    reason: &str,
) -> serde_json::Value {
    eventually(
        &format!("db's Announced {status} {reason}"),
        RELOAD_TIMEOUT,
        || async {
            let got = api
                .get("v1", "Service", ns, "db")
                .map(|o| o["status"].clone())
                .unwrap_or_default();
            let c = got["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Announced").cloned());
            match c {
                Some(c) if c["status"] == status && c["reason"] == reason => Ok(c),
                _ => Err(got),
            }
        },
    )
    .await
}
