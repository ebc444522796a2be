//! The fleet's authoritative DNS server (`--dns-listen`, docs/dns.md) end
//! to end: a real `teapot proxy` on manifests, asked over real UDP and TCP
//! sockets (hickory-proto messages) and by `dig` from Debian's dnsutils.
//!
//! In kube mode (the API double of teapot-testkit) two replicas answer
//! each other's addresses while their DNS Leases are renewed, the same
//! zone (serial included) from both, and a replica that stops (or is
//! killed: once its Lease runs out) leaves the other's answers.
//!
//! Without `dig` the dig checks print a SKIP line, unless
//! `TEAPOT_REQUIRE_DIG=1` (CI) makes its absence a failure.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Harness, eventually, metric};
use hickory_proto::op::{Edns, Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ZONE: &str = "lb.example.net";
/// `web.shop` of the tenant `acme` (`--domain example.net`).
const WEB: &str = "web-shop.acme.lb.example.net";
const API: &str = "api-shop.acme.lb.example.net";
const CLUSTER: &str = "acme.lb.example.net";
/// Addresses answered: 40 IPv4 ones make an A answer longer than 512
/// bytes (truncated over UDP, whole over TCP).
const V4: usize = 40;
const V6: &str = "2001:db8::10";
const TIMEOUT: Duration = Duration::from_secs(30);

fn tenant_objects(ingresses: &[&str]) -> String {
    common::docs(&tenant_values(ingresses))
}

fn tenant_values(ingresses: &[&str]) -> Vec<Value> {
    let mut docs = vec![
        common::tenant("acme"),
        common::service("tenant-acme", "web", &[(None, 80)]),
    ];
    for name in ingresses {
        let backend = common::backend("web", common::Port::Number(80));
        docs.push(common::ingress(
            "tenant-acme",
            name,
            json!({ "defaultBackend": backend }),
        ));
    }
    docs
}

fn args() -> Vec<String> {
    let mut args: Vec<String> = [
        "--domain",
        "example.net",
        "--dns-listen",
        "127.0.0.1:0",
        "--dns-caa",
        "letsencrypt.org",
        "--dns-nameserver",
        "ns1.lb.example.net",
        "--dns-nameserver",
        "ns.other.example",
        "--dns-ttl",
        "7",
        "--dns-address",
        V6,
    ]
    .map(String::from)
    .into();
    for i in 0..V4 {
        args.push("--dns-address".into());
        args.push(format!("192.0.2.{}", i + 1));
    }
    args
}

async fn start() -> (Harness, SocketAddr) {
    let args = args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let h =
        Harness::start_with_args(&[("tenant.yaml", tenant_objects(&["web.shop"]))], &args).await;
    let dns = h
        .proxy
        .dns
        .expect("the listening line names the DNS listener");
    (h, dns)
}

fn query(name: &str, qtype: RecordType, edns: bool) -> Vec<u8> {
    let mut m = Message::query();
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    m.metadata.recursion_desired = true;
    if edns {
        m.set_edns(Edns::new());
    }
    m.to_vec().unwrap()
}

async fn udp(dns: SocketAddr, name: &str, qtype: RecordType) -> Message {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let q = query(name, qtype, false);
    // Loopback does not lose datagrams under this load; the bound only
    // turns a server that never answers into a failure instead of a hang.
    socket.send_to(&q, dns).await.unwrap();
    let mut buf = vec![0u8; 65535];
    let (n, _) = tokio::time::timeout(TIMEOUT, socket.recv_from(&mut buf))
        .await
        .expect("a UDP answer")
        .unwrap();
    Message::from_vec(&buf[..n]).unwrap()
}

async fn tcp(dns: SocketAddr, name: &str, qtype: RecordType) -> Message {
    let mut s = tokio::net::TcpStream::connect(dns).await.unwrap();
    let q = query(name, qtype, true);
    s.write_all(&(q.len() as u16).to_be_bytes()).await.unwrap();
    s.write_all(&q).await.unwrap();
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await.unwrap();
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut buf).await.unwrap();
    Message::from_vec(&buf).unwrap()
}

fn serial(m: &Message) -> u32 {
    soa_serial(m).expect("an SOA record")
}

/// The zone's serial, if the answer carries its SOA (a replica answers
/// SERVFAIL until its first zone is built).
fn soa_serial(m: &Message) -> Option<u32> {
    m.answers
        .iter()
        .chain(&m.authorities)
        .find_map(|r| match &r.data {
            RData::SOA(soa) => Some(soa.serial),
            _ => None,
        })
}

async fn wait_answers(dns: SocketAddr, name: &str) -> Message {
    eventually(&format!("{name} answered over TCP"), TIMEOUT, || async {
        let m = tcp(dns, name, RecordType::A).await;
        if m.answers.is_empty() { Err(m) } else { Ok(m) }
    })
    .await
}

#[tokio::test]
async fn the_fleet_answers_for_its_zone_and_refuses_the_rest() {
    let (h, dns) = start().await;

    // Routed names: the assigned hostname and its cluster's name.
    let m = wait_answers(dns, WEB).await;
    assert!(m.authoritative && !m.recursion_available);
    assert_eq!(m.answers.len(), V4);
    assert!(m.answers.iter().all(|r| r.ttl == 7));
    assert_eq!(tcp(dns, CLUSTER, RecordType::A).await.answers.len(), V4);
    let m = udp(dns, WEB, RecordType::AAAA).await;
    assert_eq!(m.answers.len(), 1);
    assert_eq!(m.answers[0].data.to_string(), V6);

    // 40 A records do not fit 512 bytes: over UDP the 29 that fit,
    // without TC (any of them serves the name), all 40 over TCP.
    let m = udp(dns, WEB, RecordType::A).await;
    assert!(!m.truncation && m.answers.len() == 29, "{m:?}");

    // The apex: SOA, NS (glue for the in-zone one), CAA.
    let m = udp(dns, ZONE, RecordType::SOA).await;
    assert_eq!(m.answers[0].record_type(), RecordType::SOA);
    let before = serial(&m);
    let m = tcp(dns, ZONE, RecordType::NS).await;
    assert_eq!(m.answers.len(), 2);
    assert!(
        m.additionals
            .iter()
            .all(|r| r.name.to_ascii() == "ns1.lb.example.net."),
        "glue only for the in-zone name server: {m:?}"
    );
    assert_eq!(udp(dns, ZONE, RecordType::CAA).await.answers.len(), 2);

    // Names that route nowhere: NXDOMAIN with the zone's SOA.
    let m = udp(dns, "gone.acme.lb.example.net", RecordType::A).await;
    assert_eq!(m.response_code, ResponseCode::NXDomain);
    assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
    // No recursion: another zone is refused.
    let m = udp(dns, "www.example.org", RecordType::A).await;
    assert_eq!(m.response_code, ResponseCode::Refused);
    assert!(m.answers.is_empty() && !m.authoritative);
    // ANY: the one-record answer of RFC 8482.
    let m = udp(dns, WEB, RecordType::ANY).await;
    assert_eq!(m.answers.len(), 1);
    assert_eq!(m.answers[0].record_type(), RecordType::HINFO);

    // A second Ingress: its name answers, the serial moves.
    h.apply("tenant.yaml", &tenant_objects(&["web.shop", "api.shop"]))
        .await;
    wait_answers(dns, API).await;
    let after = serial(&udp(dns, ZONE, RecordType::SOA).await);
    assert_ne!(before, after);

    let metrics = h.metrics().await;
    for rcode in ["noerror", "nxdomain", "refused"] {
        let udp_count = metric(
            &metrics,
            &format!(
                "teapot_dns_responses_total{{rcode=\"{rcode}\",transport=\"udp\",truncated=\"false\"}}"
            ),
        );
        assert!(udp_count.is_some_and(|n| n >= 1.0), "{rcode}: {metrics}");
    }

    dig_checks(dns).await;
}

/// The same questions from `dig`: its parser and its TCP retry.
async fn dig_checks(dns: SocketAddr) {
    if std::process::Command::new("dig")
        .arg("-v")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("TEAPOT_REQUIRE_DIG").is_none(),
            "TEAPOT_REQUIRE_DIG is set but dig is missing (scripts/setup.sh installs dnsutils)"
        );
        eprintln!("SKIP dig checks: dig not found (scripts/setup.sh installs dnsutils)");
        return;
    }
    let dig = |args: &[&str]| {
        let out = std::process::Command::new("dig")
            .args([
                &format!("@{}", dns.ip()),
                "-p",
                &dns.port().to_string(),
                "+tries=1",
                "+time=5",
            ])
            .args(args)
            .output()
            .expect("dig runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Without EDNS (512 bytes) the addresses that fit, no TC, so no
    // retry over TCP; over TCP all 40.
    let out = dig(&["+noedns", WEB, "A"]);
    assert!(!out.contains("Truncated"), "{out}");
    assert!(out.contains("ANSWER: 29"), "{out}");
    assert!(
        out.contains("flags: qr aa rd;"),
        "authoritative, no recursion: {out}"
    );
    let out = dig(&["+tcp", WEB, "A"]);
    assert!(out.contains("ANSWER: 40"), "{out}");
    // RFC 3225 §3: the DO bit comes back.
    let out = dig(&["+dnssec", WEB, "AAAA"]);
    assert!(out.contains("; EDNS: version: 0, flags: do;"), "{out}");
    // The apex NS set with 41 glue records over 512 bytes: the NS set
    // and the glue that fits, no TC (RFC 2181 §9).
    let out = dig(&["+noedns", ZONE, "NS"]);
    assert!(!out.contains("Truncated"), "{out}");
    assert!(out.contains("ANSWER: 2,"), "{out}");
    assert!(
        out.contains("ns1.lb.example.net.\t7\tIN\tA\t"),
        "glue: {out}"
    );
    let out = dig(&["+short", WEB, "AAAA"]);
    assert_eq!(out.trim(), V6);
    let out = dig(&["gone.acme.lb.example.net", "A"]);
    assert!(out.contains("status: NXDOMAIN"), "{out}");
    assert!(
        out.contains("IN\tSOA\tns1.lb.example.net. hostmaster.lb.example.net."),
        "{out}"
    );
    let out = dig(&["www.example.org", "A"]);
    assert!(out.contains("status: REFUSED"), "{out}");
    let out = dig(&["+short", ZONE, "CAA"]);
    assert!(out.contains("0 issue \"letsencrypt.org\""), "{out}");
    assert!(out.contains("0 issuewild \"letsencrypt.org\""), "{out}");
    let out = dig(&["+short", ZONE, "NS"]);
    assert!(out.contains("ns1.lb.example.net."), "{out}");
    let out = dig(&["+tcp", "+short", ZONE, "SOA"]);
    assert!(
        out.starts_with("ns1.lb.example.net. hostmaster.lb.example.net. "),
        "{out}"
    );
    let out = dig(&[WEB, "ANY"]);
    assert!(out.contains("HINFO\t\"RFC8482\""), "{out}");
}

/// The DNS listener is off unless asked for, and says nothing on the line
/// then.
/// The abuse bounds' flags reach the listener: with a share of two TCP
/// connections per prefix, a third from the same address is closed
/// unanswered and counted, while the two held ones still answer.
/// A tenant's wildcard hosts (`*.CLUSTER.lb.DOMAIN` and deeper) route
/// every name below them: those names resolve to the fleet's addresses,
/// from `dig` and over UDP, while names beside them stay NXDOMAIN.
#[tokio::test]
async fn names_below_a_tenant_wildcard_host_resolve() {
    let mut docs = tenant_values(&["web.shop"]);
    let backend = common::backend("web", common::Port::Number(80));
    let rule = |host: &str| {
        json!({ "host": host, "http": { "paths": [
            { "path": "/", "pathType": "Prefix", "backend": backend.clone() }
        ]}})
    };
    docs.push(common::ingress(
        "tenant-acme",
        "wild",
        json!({ "rules": [rule("*.acme.lb.example.net"), rule("*.deep.acme.lb.example.net")] }),
    ));
    let args = args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let h = Harness::start_with_args(&[("tenant.yaml", common::docs(&docs))], &args).await;
    let dns = h.proxy.dns.expect("a DNS listener");
    wait_answers(dns, WEB).await;
    for name in [
        "shop.acme.lb.example.net",
        "x.deep.acme.lb.example.net",
        "a.b.c.deep.acme.lb.example.net",
    ] {
        let m = eventually(&format!("{name} answered"), TIMEOUT, || async {
            let m = udp(dns, name, RecordType::AAAA).await;
            if m.answers.is_empty() { Err(m) } else { Ok(m) }
        })
        .await;
        assert_eq!(m.response_code, ResponseCode::NoError);
        assert_eq!(m.answers[0].name.to_ascii(), format!("{name}."));
        assert_eq!(m.answers[0].data.to_string(), V6);
        assert_eq!(tcp(dns, name, RecordType::A).await.answers.len(), V4);
    }
    // An exact host keeps its own answer; beside the cluster, nothing.
    assert_eq!(tcp(dns, WEB, RecordType::A).await.answers.len(), V4);
    let m = udp(dns, "x.other.lb.example.net", RecordType::A).await;
    assert_eq!(m.response_code, ResponseCode::NXDomain);
    if std::process::Command::new("dig").arg("-v").output().is_ok() {
        let out = std::process::Command::new("dig")
            .args([&format!("@{}", dns.ip()), "-p", &dns.port().to_string()])
            .args([
                "+tries=1",
                "+time=5",
                "+short",
                "shop.acme.lb.example.net",
                "AAAA",
            ])
            .output()
            .expect("dig runs");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), V6);
    }
}

/// DNS answers do not wait for a compile: with one runtime worker (a
/// one-CPU replica), a reload of a large manifests directory holds the
/// runtime for seconds in a debug build, and a query asked meanwhile is
/// answered at once from the DNS thread. A starvation check with a bound
/// far above an answer's time and far below the compile's, not a
/// performance figure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_do_not_wait_for_a_reload() {
    const INGRESSES: usize = 4000;
    const BOUND: Duration = Duration::from_millis(300);
    let mut names: Vec<String> = (0..INGRESSES / 2).map(|i| format!("app{i}.shop")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut args = args();
    // One prober asks one name every 5 ms: no rate limit to drop it.
    args.extend(["--threads", "1", "--dns-rate-limit", "0"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let h = Harness::start_with_args(&[("tenant.yaml", tenant_objects(&refs))], &args).await;
    let dns = h.proxy.dns.expect("a DNS listener");
    wait_answers(dns, "app0-shop.acme.lb.example.net").await;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let prober = tokio::spawn(async move {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let q = query(CLUSTER, RecordType::AAAA, false);
        let mut buf = vec![0u8; 65535];
        let (mut worst, mut asked, mut lost) = (Duration::ZERO, 0u32, 0u32);
        while !*stop_rx.borrow() {
            let asking = std::time::Instant::now();
            socket.send_to(&q, dns).await.unwrap();
            // A datagram lost on a loaded machine (the whole suite runs
            // beside this test) is counted apart: the finding was answers
            // that waited for the compile, 0.4-0.9 s, not answers lost.
            match tokio::time::timeout(Duration::from_secs(1), socket.recv_from(&mut buf)).await {
                Ok(received) => {
                    let (n, _) = received.unwrap();
                    let m = Message::from_vec(&buf[..n]).unwrap();
                    assert_eq!(m.answers.len(), 1, "{m:?}");
                    worst = worst.max(asking.elapsed());
                }
                Err(_) => lost += 1,
            }
            asked += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (worst, asked, lost)
    });
    // The reload must last long enough to show a wait, on whatever machine
    // runs this: a faster one gets twice the Ingresses, up to 32,000.
    let mut reloads = Vec::new();
    loop {
        let n = names.len();
        names.extend((n..n * 2).map(|i| format!("app{i}.shop")));
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let before = h.generation().await;
        let started = std::time::Instant::now();
        h.write("tenant.yaml", &tenant_objects(&refs));
        h.wait_generation_after(before).await;
        let reload = started.elapsed();
        reloads.push((names.len(), reload));
        if reload > BOUND * 3 || names.len() >= INGRESSES * 8 {
            break;
        }
    }
    let _ = stop_tx.send(true);
    let (worst, asked, lost) = prober.await.unwrap();
    eprintln!(
        "reloads (Ingresses, time) {reloads:?}, {asked} queries ({lost} unanswered), slowest answer {worst:?}"
    );
    assert!(
        lost * 100 <= asked,
        "{lost} of {asked} queries unanswered during the reloads"
    );
    assert!(
        reloads.iter().any(|(_, reload)| *reload > BOUND * 3),
        "the reloads {reloads:?} were too short to show a wait"
    );
    assert!(
        worst < BOUND,
        "a DNS answer waited {worst:?} during the reloads {reloads:?}"
    );
    let last = names.last().expect("names").replace('.', "-");
    wait_answers(dns, &format!("{last}.acme.lb.example.net")).await;
}

#[tokio::test]
async fn one_clients_tcp_connections_are_bounded_by_its_prefix_share() {
    let mut args = args();
    args.extend(["--dns-tcp-per-prefix", "2"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let h =
        Harness::start_with_args(&[("tenant.yaml", tenant_objects(&["web.shop"]))], &args).await;
    let dns = h
        .proxy
        .dns
        .expect("the listening line names the DNS listener");
    wait_answers(dns, WEB).await;
    let q = query(WEB, RecordType::AAAA, false);
    let framed = [&(q.len() as u16).to_be_bytes()[..], &q].concat();
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(dns).await.unwrap();
        s.write_all(&framed).await.unwrap();
        let mut len = [0u8; 2];
        s.read_exact(&mut len).await.unwrap();
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut answer).await.unwrap();
        held.push(s);
    }
    let mut third = tokio::net::TcpStream::connect(dns).await.unwrap();
    let _ = third.write_all(&framed).await;
    let mut buf = [0u8; 2];
    let read = tokio::time::timeout(TIMEOUT, third.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the third connection is closed unanswered: {read:?}"
    );
    let metrics = h.metrics().await;
    let refused = metric(
        &metrics,
        "teapot_dns_tcp_closed_total{reason=\"prefix_share\"}",
    );
    assert_eq!(refused, Some(1.0), "{metrics}");
    for s in &mut held {
        s.write_all(&framed).await.unwrap();
        let mut len = [0u8; 2];
        s.read_exact(&mut len).await.unwrap();
    }
}

/// An idle replica's zone loop does not wake: no pass in two seconds
/// with nothing changing (it compared the inputs every 250 ms before),
/// and a build when an Ingress is added.
#[tokio::test]
async fn an_idle_replica_does_not_recheck_its_zone() {
    let h = Harness::start_with_args(
        &[("tenant.yaml", tenant_objects(&["web.shop"]))],
        &args().iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    let dns = h
        .proxy
        .dns
        .expect("the listening line names the DNS listener");
    wait_answers(dns, WEB).await;
    let counts = |metrics: &str| {
        (
            metric(metrics, "teapot_dns_zone_passes_total"),
            metric(metrics, "teapot_dns_zone_builds_total"),
        )
    };
    let before = counts(&h.metrics().await);
    assert!(before.0.is_some_and(|n| n >= 1.0), "{before:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(counts(&h.metrics().await), before, "no pass at rest");
    h.apply("tenant.yaml", &tenant_objects(&["web.shop", "api.shop"]))
        .await;
    wait_answers(dns, API).await;
    let after = counts(&h.metrics().await);
    assert!(after.1 > before.1, "a build for the new Ingress: {after:?}");
}

#[tokio::test]
async fn without_the_flag_there_is_no_dns_listener() {
    let h = Harness::start_with_args(&[("tenant.yaml", tenant_objects(&["web.shop"]))], &[]).await;
    assert_eq!(h.proxy.dns, None);
    let _: Value = h.status().await;
}

async fn addresses(dns: SocketAddr) -> (Vec<String>, Option<u32>) {
    let m = tcp(dns, WEB, RecordType::A).await;
    let mut addrs: Vec<String> = m.answers.iter().map(|r| r.data.to_string()).collect();
    addrs.sort();
    let serial = soa_serial(&tcp(dns, ZONE, RecordType::SOA).await);
    (addrs, serial)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_replicas_answer_the_ready_replicas_and_one_that_stops_leaves() {
    let api = teapot_testkit::apiserver::ApiServer::start().await;
    for object in tenant_values(&["web.shop"]) {
        api.apply(object);
    }
    let bin = common::teapot_bin();
    let start = |address: &'static str| {
        let args = [
            "--domain",
            "example.net",
            "--lease-namespace",
            "teapot-system",
            "--status-address",
            "127.0.0.1",
            "--dns-listen",
            "127.0.0.1:0",
            "--dns-renew",
            "0.2",
            "--dns-lease",
            "1",
            "--dns-address",
            address,
        ];
        let bin = bin.clone();
        let kubeconfig = api.kubeconfig_path().to_path_buf();
        async move {
            teapot_testkit::process::ProxyProcess::start_kube(&bin, &kubeconfig, &args)
                .await
                .expect("replica starts")
        }
    };
    let a = start("192.0.2.1").await;
    let mut b = start("192.0.2.2").await;
    let (a_dns, b_dns) = (a.dns.unwrap(), b.dns.unwrap());
    let both = vec!["192.0.2.1".to_string(), "192.0.2.2".to_string()];
    for dns in [a_dns, b_dns] {
        eventually("both ready replicas answered", TIMEOUT, || async {
            let (addrs, serial) = addresses(dns).await;
            if addrs == both && serial.is_some() {
                Ok(())
            } else {
                Err((addrs, serial))
            }
        })
        .await;
    }
    let (_, serial_a) = addresses(a_dns).await;
    let (_, serial_b) = addresses(b_dns).await;
    assert!(serial_a.is_some(), "the zone has its SOA");
    assert_eq!(serial_a, serial_b, "one zone, whichever replica is asked");

    b.terminate().unwrap();
    b.wait(TIMEOUT).await.unwrap();
    let (addrs, _) = eventually("the stopped replica left the answers", TIMEOUT, || async {
        let now = addresses(a_dns).await;
        if now.0 == ["192.0.2.1"] {
            Ok(now)
        } else {
            Err(now)
        }
    })
    .await;
    assert_eq!(addrs, ["192.0.2.1"]);

    // Killed (no Lease deleted): gone once its Lease runs out.
    let c = start("192.0.2.3").await;
    eventually("the third replica answered", TIMEOUT, || async {
        let (addrs, _) = addresses(a_dns).await;
        if addrs.len() == 2 { Ok(()) } else { Err(addrs) }
    })
    .await;
    drop(c);
    eventually("the killed replica left the answers", TIMEOUT, || async {
        let (addrs, _) = addresses(a_dns).await;
        if addrs == ["192.0.2.1"] {
            Ok(())
        } else {
            Err(addrs)
        }
    })
    .await;
}
