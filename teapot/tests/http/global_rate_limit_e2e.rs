//! End-to-end tests of ingress-nginx's `global-rate-limit` through the
//! real `teapot proxy` binary, two replicas on 127.0.0.1 exchanging their
//! counts (`--fleet-peers`, `--fleet-key-file`), over HTTP/1.1 and HTTP/2:
//!
//! - requests spread over both replicas are answered 429 after the limit
//!   in total, not per replica (each request waits for the other replica
//!   to have merged the last count, so the total is exact); a burst sent
//!   without waiting is admitted at most once per replica's share (the
//!   slack: at most the limit on each replica);
//! - a datagram with a wrong MAC, from a peer's own address, changes
//!   nothing, while the same count signed with the fleet's key does;
//! - one replica alone (no fleet flags) enforces the whole limit by
//!   itself and says so on the Ingress;
//! - ingress-nginx's e2e case (`global-rate-limit: 5`, `-window: 2m`, then
//!   a key and ignored networks added) is served on both protocols.
//! - `--global-rate-limit-status-code` answers the operator's status past
//!   the limit.
//! - in kube mode (`--fleet-service`) two replicas find each other in the
//!   fleet Service's EndpointSlices on the API double and share one limit;
//!   one whose endpoint goes not ready is no longer heard.
//!
//! Run with `cargo test -p teapot --test http global_rate_limit_e2e::`.

use crate::common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::*;
use teapot_proxy::live::global_counts::{self, Record};
use teapot_testkit::client::{Proto, Request, Transport};
use teapot_testkit::echo::EchoServer;

const NS: &str = "ops";
const KEY: &[u8] = b"the fleet's key, thirty-two bytes";
const HOUR_MS: u64 = 3_600_000;

fn free_udp() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn objects(backend: &EchoServer, limits: &[(&str, &[(&str, &str)])]) -> String {
    let mut objects = echo_service(NS, "web", &[backend]);
    for (host, annotations) in limits {
        objects.push(annotated(NS, host, "web", annotations));
    }
    docs(&objects)
}

/// 200 or 429, nothing else.
async fn status_of(h: &Harness, proto: Proto, host: &str) -> u16 {
    let resp = over(h, proto, Request::get(host, "/")).await;
    assert!(
        resp.status == 200 || resp.status == 429,
        "{host}: {} {}",
        resp.status,
        resp.text()
    );
    if resp.status == 429 {
        assert!(!header(&resp, "retry-after").is_empty());
    }
    resp.status
}

async fn received(h: &Harness) -> f64 {
    metric(
        &h.metrics().await,
        "teapot_global_rate_records_received_total",
    )
    .unwrap_or(0.0)
}

async fn refused(h: &Harness) -> f64 {
    metric(
        &h.metrics().await,
        "teapot_global_rate_datagrams_refused_total",
    )
    .unwrap_or(0.0)
}

/// Waits until `h` has merged more than `before` records.
async fn merged_after(h: &Harness, before: f64) -> f64 {
    eventually("a peer's count merged", Duration::from_secs(10), || async {
        let now = received(h).await;
        if now > before { Ok(now) } else { Err(now) }
    })
    .await
}

/// Waits until the Ingress named `host` is compiled (no request: each
/// would count).
async fn serving(h: &Harness, host: &str) {
    h.wait_status(&format!("{host} reported"), |s| {
        ingress_report(s, NS, host).is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_limit() {
    let backend = echo(NS, "web", "web-0").await;
    let limit = |n: &'static str| -> Vec<(&'static str, &'static str)> {
        vec![("global-rate-limit", n), ("global-rate-limit-window", "1h")]
    };
    let (shared, burst, mac) = (limit("10"), limit("10"), limit("5"));
    let files = objects(
        &backend,
        &[
            ("shared.test", &shared),
            ("burst.test", &burst),
            ("mac.test", &mac),
        ],
    );
    let key_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(key_file.path(), KEY).unwrap();
    let key_path = key_file.path().to_str().unwrap();
    let (fa, fb) = (free_udp(), free_udp());
    // The test plays a third replica of a's, to send it datagrams from a
    // peer's address.
    let third = UdpSocket::bind("127.0.0.1:0").unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let ft = third.local_addr().unwrap();
    let (la, lb) = (fa.to_string(), fb.to_string());
    let a_peers = format!("{fb},{ft}");
    let b_peers = fa.to_string();
    let args = |listen: &str, peers: &str| {
        vec![
            "--fleet-listen".to_string(),
            listen.to_string(),
            "--fleet-peers".to_string(),
            peers.to_string(),
            "--fleet-key-file".to_string(),
            key_path.to_string(),
        ]
    };
    let (args_a, args_b) = (args(&la, &a_peers), args(&lb, &b_peers));
    let a = Harness::start_with_args(&[("m.yaml", files.clone())], &strs(&args_a)).await;
    let b = Harness::start_with_args(&[("m.yaml", files)], &strs(&args_b)).await;
    for h in [&a, &b] {
        serving(h, "shared.test").await;
        let status = h.status().await;
        let report = ingress_report(&status, NS, "shared.test")
            .unwrap()
            .to_string();
        assert!(!report.contains("each replica enforces"), "{report}");
    }

    // Ten in total over both, each request after the other replica
    // merged the count before it; HTTP/1.1 and HTTP/2 in turn.
    let mut passed = 0;
    let mut codes = Vec::new();
    for i in 0..20 {
        let (here, there) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let proto = if i % 4 < 2 {
            Proto::Http1
        } else {
            Proto::Http2
        };
        let before = received(there).await;
        let code = status_of(here, proto, "shared.test").await;
        codes.push(code);
        if code == 200 {
            passed += 1;
            merged_after(there, before).await;
        }
    }
    assert_eq!(passed, 10, "{codes:?}");
    assert!(codes[10..].iter().all(|c| *c == 429), "{codes:?}");
    let text = a.metrics().await;
    assert_eq!(metric(&text, "teapot_global_rate_fleet"), Some(1.0));
    assert!(metric(&text, "teapot_global_rate_records_sent_total").unwrap() >= 5.0);

    // A burst without waiting: each replica knows only what reached it,
    // so the fleet admits at most the limit per replica.
    let mut burst_passed = 0;
    for i in 0..40 {
        let h = if i % 2 == 0 { &a } else { &b };
        let proto = if i % 4 < 2 {
            Proto::Http1
        } else {
            Proto::Http2
        };
        if status_of(h, proto, "burst.test").await == 200 {
            burst_passed += 1;
        }
    }
    println!("burst of 40 over two replicas, limit 10: {burst_passed} admitted");
    assert!((10..=20).contains(&burst_passed), "{burst_passed}");

    // The third peer learns mac.test's record from a's own datagram.
    assert_eq!(status_of(&a, Proto::Http1, "mac.test").await, 200);
    let route = global_counts::route_id(&format!("{NS}/mac.test"), 5, HOUR_MS);
    let fleet_key = global_counts::mac_key(KEY);
    let mut buf = [0u8; 2048];
    let record = loop {
        let (n, from) = third
            .recv_from(&mut buf)
            .expect("a's datagram reaches its peer");
        assert_eq!(from, fa);
        let (_, records) = global_counts::open(&fleet_key, &buf[..n]).expect("signed");
        if let Some(r) = records.into_iter().find(|r| r.route == route) {
            break r;
        }
    };
    assert_eq!(record.count, 1);
    let claim = Record { count: 5, ..record };
    let wrong = global_counts::mac_key(b"not the fleet's key at all, no");
    let refused_before = refused(&a).await;
    third
        .send_to(&global_counts::seal(&wrong, u64::MAX - 1, &[claim]), fa)
        .unwrap();
    eventually(
        "the forged datagram refused",
        Duration::from_secs(10),
        || async {
            let n = refused(&a).await;
            if n > refused_before { Ok(()) } else { Err(n) }
        },
    )
    .await;
    // Changes nothing: the second of five passes, on HTTP/2.
    assert_eq!(status_of(&a, Proto::Http2, "mac.test").await, 200);
    // Signed with the fleet's key, the same claim fills the window.
    let merged_before = received(&a).await;
    third
        .send_to(&global_counts::seal(&fleet_key, u64::MAX, &[claim]), fa)
        .unwrap();
    merged_after(&a, merged_before).await;
    assert_eq!(status_of(&a, Proto::Http1, "mac.test").await, 429);
    assert_eq!(status_of(&a, Proto::Http2, "mac.test").await, 429);
    drop(backend);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_alone_enforces_the_whole_limit() {
    let backend = echo(NS, "web", "web-0").await;
    let limit: &[(&str, &str)] = &[
        ("global-rate-limit", "6"),
        ("global-rate-limit-window", "1h"),
    ];
    let h = Harness::start(&[("m.yaml", objects(&backend, &[("alone.test", limit)]))]).await;
    serving(&h, "alone.test").await;
    let mut codes = Vec::new();
    for i in 0..12 {
        let proto = if i % 2 == 0 {
            Proto::Http1
        } else {
            Proto::Http2
        };
        codes.push(status_of(&h, proto, "alone.test").await);
    }
    assert_eq!(codes, [[200; 6], [429; 6]].concat());
    let status = h.status().await;
    let report = ingress_report(&status, NS, "alone.test")
        .unwrap()
        .to_string();
    assert!(report.contains("each replica enforces"), "{report}");
    assert_eq!(
        metric(&h.metrics().await, "teapot_global_rate_fleet"),
        Some(0.0)
    );
}

/// ingress-nginx's `annotation-global-rate-limit` e2e case: limit 5 per
/// 2m answers 200, then with `${remote_addr}${http_x_api_client}` and
/// ignored networks it still does; here each key's sixth request is
/// refused, another `X-API-Client` value has its own count, and an
/// ignored client is never counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_case_key_and_ignored_cidrs() {
    let backend = echo(NS, "web", "web-0").await;
    let first: &[(&str, &str)] = &[
        ("global-rate-limit", "5"),
        ("global-rate-limit-window", "2m"),
    ];
    let h = Harness::start(&[("m.yaml", objects(&backend, &[("gl.test", first)]))]).await;
    serving(&h, "gl.test").await;
    assert_eq!(status_of(&h, Proto::Http1, "gl.test").await, 200);
    let keyed: &[(&str, &str)] = &[
        ("global-rate-limit", "5"),
        ("global-rate-limit-window", "2m"),
        (
            "global-rate-limit-key",
            "${remote_addr}${http_x_api_client}",
        ),
        (
            "global-rate-limit-ignored-cidrs",
            "192.168.1.1, 234.234.234.0/24",
        ),
    ];
    h.apply("m.yaml", &objects(&backend, &[("gl.test", keyed)]))
        .await;
    let client = |value: &str, proto| {
        Request::get("gl.test", "/")
            .header("x-api-client", value)
            .proto(proto)
    };
    let mut codes = Vec::new();
    for i in 0..6 {
        let proto = if i % 2 == 0 {
            Proto::Http1
        } else {
            Proto::Http2
        };
        codes.push(over(&h, proto, client("one", proto)).await.status);
    }
    assert_eq!(codes, [200, 200, 200, 200, 200, 429]);
    for proto in [Proto::Http1, Proto::Http2] {
        assert_eq!(over(&h, proto, client("two", proto)).await.status, 200);
    }
    drop(backend);
}

/// A client in `global-rate-limit-ignored-cidrs` is neither counted nor
/// refused; the limit still holds for the others of the same route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_clients_are_not_counted() {
    let backend = echo(NS, "web", "web-0").await;
    let ignored: &[(&str, &str)] = &[
        ("global-rate-limit", "1"),
        ("global-rate-limit-window", "1m"),
        ("global-rate-limit-ignored-cidrs", "127.0.0.0/8"),
    ];
    let counted: &[(&str, &str)] = &[
        ("global-rate-limit", "1"),
        ("global-rate-limit-window", "1m"),
        ("global-rate-limit-ignored-cidrs", "10.0.0.0/8"),
    ];
    let h = Harness::start(&[(
        "m.yaml",
        objects(
            &backend,
            &[("ignored.test", ignored), ("counted.test", counted)],
        ),
    )])
    .await;
    serving(&h, "counted.test").await;
    for proto in [Proto::Http1, Proto::Http2, Proto::Http1, Proto::Http2] {
        assert_eq!(status_of(&h, proto, "ignored.test").await, 200);
    }
    assert_eq!(status_of(&h, Proto::Http1, "counted.test").await, 200);
    assert_eq!(status_of(&h, Proto::Http2, "counted.test").await, 429);
    drop(backend);
}

/// A RouteTrafficPolicy's `globalRateLimit` on an HTTPRoute: its four
/// fields are the four annotations, so the route answers 429 past the
/// limit on HTTP/1.1 and cleartext HTTP/2 alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_traffic_policy_limits_a_route() {
    const GW: &str = "gw-global";
    const HOST: &str = "api.example.com";
    let backend = echo(GW, "web", "web-0").await;
    let mut objects = vec![
        gateway_gw(
            GW,
            serde_json::json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        ),
        http_route(
            GW,
            "api",
            serde_json::json!({ "name": "gw" }),
            &[HOST],
            serde_json::json!([{ "backendRefs": [{ "name": "web", "port": 80 }] }]),
        ),
        serde_json::json!({
            "apiVersion": "teapot.dev/v1alpha1",
            "kind": "RouteTrafficPolicy",
            "metadata": { "name": "global", "namespace": GW },
            "spec": {
                "targetRefs": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                 "name": "api" }],
                "globalRateLimit": { "requests": 3, "window": "1m", "key": "$http_x_api_key" },
            },
        }),
    ];
    objects.extend(echo_service(GW, "web", &[&backend]));
    let h = Harness::start_with_args(&[("gw.yaml", docs(&objects))], &["--h2c"]).await;
    let status = h
        .wait_status("the policy reported", |s| {
            s["routeTrafficPolicies"]
                .as_array()
                .is_some_and(|p| p.len() == 1)
        })
        .await;
    let conditions = status["routeTrafficPolicies"][0]["status"].to_string();
    assert!(conditions.contains("\"True\""), "{conditions}");
    let send_key = |key: &'static str, proto: Proto| {
        let req = Request::get(HOST, "/")
            .header("x-api-key", key)
            .proto(proto);
        let addr = h.proxy.http;
        async move { send(addr, &Transport::Plain, &req).await.status }
    };
    let mut codes = Vec::new();
    for i in 0..6 {
        let proto = if i % 2 == 0 {
            Proto::Http1
        } else {
            Proto::Http2
        };
        codes.push(send_key("k1", proto).await);
    }
    assert_eq!(codes, [200, 200, 200, 429, 429, 429]);
    assert_eq!(send_key("k2", Proto::Http2).await, 200);
    drop(backend);
}

/// `--global-rate-limit-status-code` (ingress-nginx's
/// `global-rate-limit-status-code`): past the limit the answer carries the
/// operator's status, with `Retry-After`, on HTTP/1.1 and HTTP/2; a status
/// outside 4xx and 5xx is refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refusal_status_is_the_operators() {
    let backend = echo(NS, "web", "web-0").await;
    let limit: &[(&str, &str)] = &[
        ("global-rate-limit", "2"),
        ("global-rate-limit-window", "1h"),
    ];
    let h = Harness::start_with_args(
        &[("m.yaml", objects(&backend, &[("code.test", limit)]))],
        &["--global-rate-limit-status-code", "503"],
    )
    .await;
    serving(&h, "code.test").await;
    let mut codes = Vec::new();
    for proto in [Proto::Http1, Proto::Http2, Proto::Http1, Proto::Http2] {
        let resp = over(&h, proto, Request::get("code.test", "/")).await;
        if resp.status != 200 {
            assert!(!header(&resp, "retry-after").is_empty(), "{proto:?}");
            assert!(resp.text().contains("too many requests"), "{}", resp.text());
        }
        codes.push(resp.status);
    }
    assert_eq!(codes, [200, 200, 503, 503]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_teapot"))
        .args(["proxy", "--manifests", "/nonexistent"])
        .args(["--global-rate-limit-status-code", "302"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("global-rate-limit-status-code"), "{stderr}");
    drop(backend);
}

/// A metric of a replica started as a process (0 when absent).
async fn scrape(p: &teapot_testkit::process::ProxyProcess, name: &str) -> f64 {
    let (_, text) = p.admin_get("/metrics").await.unwrap();
    metric(&text, name).unwrap_or(0.0)
}

/// Kube mode (`--fleet-service`): two replicas watching the API double
/// find each other in the fleet Service's EndpointSlices (each its own
/// slice, port `fleet`, its own address skipped) and share one limit over
/// HTTP/1.1 and HTTP/2; once b's endpoint is not ready, a drops b's
/// datagrams unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_replicas_find_each_other_by_the_fleet_service() {
    use teapot_testkit::apiserver::ApiServer;
    use teapot_testkit::process::ProxyProcess;
    const FLEET_NS: &str = "teapot-system";
    const FLEET: &str = "teapot-proxy-fleet";
    const HOST: &str = "fleet.test";

    let api = ApiServer::start().await;
    let backend = echo(NS, "web", "web-0").await;
    for object in echo_service(NS, "web", &[&backend]) {
        api.apply(object);
    }
    api.apply(annotated(
        NS,
        HOST,
        "web",
        &[
            ("global-rate-limit", "4"),
            ("global-rate-limit-window", "1h"),
        ],
    ));
    let (fa, fb) = (free_udp(), free_udp());
    let fleet_slice = |name: &str, port: u16, ready: bool| {
        slice(
            FLEET_NS,
            name,
            FLEET,
            &[(Some("fleet"), port)],
            &[("127.0.0.1", ready)],
        )
    };
    api.apply(fleet_slice("fleet-a", fa.port(), true));
    api.apply(fleet_slice("fleet-b", fb.port(), true));
    let key_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(key_file.path(), KEY).unwrap();
    let key_path = key_file.path().to_str().unwrap().to_string();
    let start = |listen: SocketAddr, pod: &'static str| {
        let key_path = key_path.clone();
        let kubeconfig = api.kubeconfig_path().to_path_buf();
        async move {
            let listen = listen.to_string();
            let service = format!("{FLEET_NS}/{FLEET}");
            let args = [
                "--fleet-service",
                &service,
                "--fleet-listen",
                &listen,
                "--fleet-key-file",
                &key_path,
            ];
            ProxyProcess::start_kube_with_env(
                &teapot_bin(),
                &kubeconfig,
                &args,
                &[("POD_NAME", pod)],
            )
            .await
            .expect("replica starts")
        }
    };
    let a = start(fa, "proxy-a").await;
    let b = start(fb, "proxy-b").await;
    const RECEIVED: &str = "teapot_global_rate_records_received_total";
    let ask = |p: &ProxyProcess, proto: Proto| {
        let addr = p.http;
        async move {
            let req = Request::get(HOST, "/").proto(proto);
            send(addr, &Transport::Plain, &req).await.status
        }
    };
    // Four in total over both, each request after the other replica
    // merged the one before it.
    let mut codes = Vec::new();
    for i in 0..8 {
        let (here, there) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let proto = if i % 4 < 2 {
            Proto::Http1
        } else {
            Proto::Http2
        };
        let before = scrape(there, RECEIVED).await;
        let code = ask(here, proto).await;
        codes.push(code);
        if code == 200 {
            eventually("the count merged", Duration::from_secs(10), || async {
                let now = scrape(there, RECEIVED).await;
                if now > before { Ok(()) } else { Err(now) }
            })
            .await;
        }
    }
    assert_eq!(codes, [[200; 4], [429; 4]].concat());
    assert_eq!(
        scrape(&a, "teapot_global_rate_peers_alive").await,
        1.0,
        "b heard"
    );
    // b goes not ready: a's peers no longer hold it.
    api.apply(fleet_slice("fleet-b", fb.port(), false));
    const REFUSED: &str = "teapot_global_rate_datagrams_refused_total";
    api.apply(annotated(
        NS,
        HOST,
        "web",
        &[
            ("global-rate-limit", "100"),
            ("global-rate-limit-window", "1h"),
        ],
    ));
    eventually(
        "b's datagrams refused by a",
        Duration::from_secs(20),
        || async {
            // Each admitted request on b sends its count to a.
            let code = ask(&b, Proto::Http1).await;
            let refused = scrape(&a, REFUSED).await;
            if refused > 0.0 {
                Ok(())
            } else {
                Err((code, refused))
            }
        },
    )
    .await;
    drop(backend);
}
