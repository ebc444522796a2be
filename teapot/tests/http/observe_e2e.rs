//! Operating a shared fleet, end to end against the real
//! `teapot proxy` binary: the access log of a routed request, a 404, a
//! 503, a tenant refusal, a WebSocket, an L4 TCP connection and an L4 UDP
//! flow, every line parsed as JSON; HTTP/2 and HTTP/1.1 over TLS with
//! their TLS version and SNI; the lines of the last requests written
//! before the process exits on SIGTERM; `X-Request-Id` and `traceparent`
//! as the backend sees them; two tenants' series kept apart in `/metrics`
//! under load; and `teapot top` reading that proxy's admin endpoint.
//!
//! Tenant endpoints may never be loopback, so tenant backends listen on
//! this machine's interface addresses (as in edge_e2e's fairness test).
//!
//! Run with `cargo test -p teapot --test http observe_e2e::`.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use common::*;
use serde_json::{Value, json};
use teapot_testkit::client::{self, Request, Transport};
use teapot_testkit::l4::{TcpEcho, TcpMode, UdpEcho, free_port};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Every field an HTTP line carries (null when it does not apply).
const HTTP_FIELDS: [&str; 22] = [
    "time",
    "kind",
    "tenant",
    "namespace",
    "route",
    "host",
    "method",
    "path",
    "protocol",
    "tls",
    "sni",
    "status",
    "bytes_in",
    "bytes_out",
    "duration_ms",
    "upstream_ms",
    "upstream_addr",
    "retries",
    "client",
    "request_id",
    "traceparent",
    "reason",
];

const TCP_FIELDS: [&str; 16] = [
    "time",
    "kind",
    "tenant",
    "namespace",
    "service",
    "protocol",
    "tls",
    "sni",
    "bytes_in",
    "bytes_out",
    "duration_ms",
    "upstream_ms",
    "upstream_addr",
    "retries",
    "client",
    "reason",
];

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Reads the access log until `done` holds for its parsed lines; every
/// line must be one JSON object.
async fn read_log(path: &std::path::Path, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    eventually("the access log's lines", REQUEST_TIMEOUT, || async {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
            .collect();
        if done(&lines) { Ok(lines) } else { Err(text) }
    })
    .await
}

fn first<'a>(lines: &'a [Value], what: &str, f: impl Fn(&Value) -> bool) -> &'a Value {
    lines
        .iter()
        .find(|l| f(l))
        .unwrap_or_else(|| panic!("no line for {what} in {lines:#?}"))
}

/// LoadBalancer Service `l4/db` on `port`, TCP and UDP, to the two echo
/// servers, and its EndpointSlice.
fn l4_echo_service(port: u16, tcp: &TcpEcho, udp: &UdpEcho, annotations: Value) -> [Value; 2] {
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": "db", "namespace": "l4", "annotations": annotations },
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": "teapot.dev/lb",
            "ports": [
                { "name": "tcp", "port": port, "protocol": "TCP" },
                { "name": "udp", "port": port, "protocol": "UDP" },
            ],
        },
    });
    let mut l4_slice = slice("l4", "db-0", "db", &[], &[("127.0.0.1", true)]);
    l4_slice["ports"] = json!([
        { "name": "tcp", "port": tcp.port(), "protocol": "TCP" },
        { "name": "udp", "port": udp.port(), "protocol": "UDP" },
    ]);
    [service, l4_slice]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_has_one_json_line_per_request_and_connection() {
    // Operator routes: an echo (also the WebSocket's), a Service without
    // endpoints; a tenant over its rate; an L4 Service.
    let ops = echo("ops", "web", "web-0").await;
    let mut documents = echo_service("ops", "web", &[&ops]);
    documents.push(simple_ingress("ops", "web", "ops.test", "web"));
    documents.push(service("ops", "empty", &[(None, 80)]));
    documents.push(simple_ingress("ops", "empty", "empty.test", "empty"));
    let (_gamma, gamma_docs) = limited_tenant_route(
        "gamma",
        common::node_address(false),
        json!({ "requestsPerSecond": 1 }),
        "app.gamma.lb.localhost",
    )
    .await;
    documents.extend(gamma_docs);
    let tcp = TcpEcho::start(TcpMode::Echo).await.unwrap();
    let udp = UdpEcho::start().await.unwrap();
    let port = free_port(LOCALHOST).unwrap();
    // A short UDP idle timeout: the flow ends, and gets its line, while
    // the test waits.
    documents.extend(l4_echo_service(
        port,
        &tcp,
        &udp,
        json!({ "teapot.dev/udp-idle-timeout": "1s" }),
    ));

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let state = dir.path().join("l4-state.json");
    let h = Harness::start_with_args(
        &[("all.yaml", docs(&documents))],
        &[
            "--access-log",
            "all",
            "--access-log-file",
            log.to_str().unwrap(),
            "--trust-request-id",
            "ops",
            "--tenant-refusal-delay-ms",
            "0",
            "--l4-pool",
            "default=127.0.0.1",
            "--l4-state",
            state.to_str().unwrap(),
        ],
    )
    .await;

    // A routed request: the trusted operator namespace keeps the client's
    // ID; the client's traceparent passes through; the query stays out of
    // the log.
    let routed = h
        .send(
            &Request::get("ops.test", "/routed?token=secret")
                .header("x-request-id", "client-chosen-1")
                .header("traceparent", TRACEPARENT),
        )
        .await;
    assert_eq!(routed.status, 200, "{}", routed.text());
    let seen = routed.json().unwrap();
    assert_eq!(seen["headers"]["X-Request-Id"][0], "client-chosen-1");
    assert_eq!(seen["headers"]["Traceparent"][0], TRACEPARENT);
    // Without either header, the backend gets new ones.
    let fresh = h.echo_json("ops.test", "/fresh").await;
    let fresh_id = fresh["headers"]["X-Request-Id"][0]
        .as_str()
        .unwrap()
        .to_string();
    let fresh_tp = fresh["headers"]["Traceparent"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(fresh_id.len(), 32, "{fresh_id}");
    assert_eq!(
        &fresh_tp[3..35],
        fresh_id,
        "the trace starts with the request's ID"
    );

    assert_eq!(h.get("nowhere.test", "/").await.status, 404);
    assert_eq!(h.get("empty.test", "/").await.status, 503);
    let mut refused = 0;
    for _ in 0..10 {
        if h.get("app.gamma.lb.localhost", "/").await.status == 429 {
            refused += 1;
        }
    }
    assert!(
        refused > 0,
        "a tenant at 1 request/s is refused in a burst of 10"
    );
    let echoed = tokio::time::timeout(
        REQUEST_TIMEOUT,
        client::websocket_echo(h.proxy.http, "ops.test", "/chat", &["hello"]),
    )
    .await
    .expect("WebSocket in time")
    .expect("WebSocket exchange");
    assert_eq!(echoed, ["hello"]);
    eventually("the L4 listener", RELOAD_TIMEOUT, || async {
        let mut s = tokio::net::TcpStream::connect(SocketAddr::new(LOCALHOST, port)).await?;
        s.write_all(b"ping").await?;
        s.shutdown().await?;
        let mut back = Vec::new();
        s.read_to_end(&mut back).await?;
        if back == b"ping" {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("echoed {back:?}")))
        }
    })
    .await;

    // One UDP flow (a datagram may be lost: resent until answered).
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client
        .connect(SocketAddr::new(LOCALHOST, port))
        .await
        .unwrap();
    eventually("a UDP answer", RELOAD_TIMEOUT, || async {
        client.send(b"hello").await?;
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(std::time::Duration::from_millis(500), client.recv(&mut buf))
            .await
            .map_err(|_| std::io::Error::other("no answer yet"))??;
        if &buf[..n] == b"hello" {
            Ok(())
        } else {
            Err(std::io::Error::other("a different answer"))
        }
    })
    .await;

    let lines = read_log(&log, |lines| {
        lines
            .iter()
            .any(|l| l["kind"] == "tcp" && l["bytes_in"] == 4)
            && lines.iter().any(|l| l["status"] == 101)
            && lines.iter().any(|l| l["kind"] == "udp")
    })
    .await;
    for line in &lines {
        let fields: &[&str] = if line["kind"] == "tcp" || line["kind"] == "udp" {
            &TCP_FIELDS
        } else {
            &HTTP_FIELDS
        };
        for f in fields {
            assert!(line.get(f).is_some(), "{f} missing from {line}");
        }
    }

    let routed = first(&lines, "the routed request", |l| l["path"] == "/routed");
    assert_eq!(routed["status"], 200);
    assert_eq!(routed["method"], "GET");
    assert_eq!(routed["host"], "ops.test");
    assert_eq!(routed["tenant"], "_operator");
    assert_eq!(routed["namespace"], "ops");
    assert_eq!(routed["route"], "ops/web");
    assert_eq!(routed["protocol"], "h1");
    assert_eq!(routed["request_id"], "client-chosen-1");
    assert_eq!(routed["traceparent"], TRACEPARENT);
    assert_eq!(routed["upstream_addr"], ops.addr().to_string());
    assert_eq!(routed["reason"], Value::Null);
    assert!(routed["bytes_in"].as_u64().unwrap() > 0);
    assert!(routed["bytes_out"].as_u64().unwrap() > 0);
    assert!(routed["upstream_ms"].as_f64().unwrap() <= routed["duration_ms"].as_f64().unwrap());
    assert!(routed["client"].as_str().unwrap().starts_with("127.0.0.1:"));
    let fresh = first(&lines, "the fresh request", |l| l["path"] == "/fresh");
    assert_eq!(fresh["request_id"], fresh_id.as_str());
    assert_eq!(fresh["traceparent"], fresh_tp.as_str());

    let not_found = first(&lines, "the 404", |l| l["status"] == 404);
    assert_eq!(not_found["reason"], "no_route");
    assert_eq!(not_found["tenant"], "_unrouted");
    assert_eq!(not_found["host"], "nowhere.test");
    assert_eq!(not_found["request_id"].as_str().unwrap().len(), 32);
    let unavailable = first(&lines, "the 503", |l| l["status"] == 503);
    assert_eq!(unavailable["reason"], "no_endpoint");
    assert_eq!(unavailable["route"], "ops/empty");
    let refusal = first(&lines, "the tenant refusal", |l| l["status"] == 429);
    assert_eq!(refusal["reason"], "tenant_rate");
    assert_eq!(refusal["tenant"], "gamma");
    assert_eq!(refusal["namespace"], "tenant-gamma");
    let ws = first(&lines, "the WebSocket", |l| l["status"] == 101);
    assert_eq!(ws["path"], "/chat");
    assert_eq!(ws["reason"], Value::Null);
    // A probe of the listener before it was ready may have a line of
    // its own.
    let tcp_line = first(&lines, "the L4 connection", |l| {
        l["kind"] == "tcp" && l["bytes_in"] == 4
    });
    assert_eq!(tcp_line["service"], "l4/db");
    assert_eq!(tcp_line["protocol"], "tcp");
    assert_eq!(
        (
            tcp_line["bytes_in"].as_u64(),
            tcp_line["bytes_out"].as_u64()
        ),
        (Some(4), Some(4))
    );
    assert_eq!(
        tcp_line["upstream_addr"],
        format!("127.0.0.1:{}", tcp.port())
    );
    // The UDP flow: its line when it went idle, with every datagram of
    // it (one "hello" and its echo, or a few if one was lost on the way).
    let udp_line = first(&lines, "the UDP flow", |l| l["kind"] == "udp");
    assert_eq!(udp_line["service"], "l4/db");
    assert_eq!(udp_line["namespace"], "l4");
    assert_eq!(udp_line["protocol"], "udp");
    assert_eq!(udp_line["reason"], "idle_timeout");
    assert_eq!(udp_line["client"], client.local_addr().unwrap().to_string());
    assert_eq!(
        udp_line["upstream_addr"],
        format!("127.0.0.1:{}", udp.port())
    );
    let (udp_in, udp_out) = (
        udp_line["bytes_in"].as_u64().unwrap(),
        udp_line["bytes_out"].as_u64().unwrap(),
    );
    assert!(
        udp_in >= 5 && udp_in % 5 == 0 && udp_out >= 5 && udp_out % 5 == 0 && udp_out <= udp_in,
        "{udp_line}"
    );
    assert!(
        udp_line["duration_ms"].as_f64().unwrap() >= 1000.0,
        "{udp_line}"
    );

    let metrics = h.metrics().await;
    assert_eq!(
        metric(&metrics, "teapot_access_log_dropped_total"),
        Some(0.0)
    );
    assert_eq!(
        metric(
            &metrics,
            "teapot_l4_service_connections_total{service=\"l4/db\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "teapot_l4_service_udp_flows_total{service=\"l4/db\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    let tcp_out = metric(
        &metrics,
        "teapot_l4_service_bytes_total{direction=\"out\",service=\"l4/db\"}",
    )
    .unwrap();
    assert!(
        tcp_out >= 4.0 + 5.0,
        "the TCP echo and at least one UDP answer: {tcp_out}"
    );
    assert!(!std::fs::read_to_string(&log).unwrap().contains("secret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_under_load_keep_their_own_series_and_top_shows_them() {
    let (alpha_echo, mut documents) = limited_tenant_route(
        "alpha",
        common::node_address(false),
        json!({}),
        "app.alpha.lb.localhost",
    )
    .await;
    let (_beta_echo, beta_docs) = limited_tenant_route(
        "beta",
        common::node_address(true),
        json!({}),
        "app.beta.lb.localhost",
    )
    .await;
    documents.extend(beta_docs);
    let h = Harness::start_with_args(
        &[("tenants.yaml", docs(&documents))],
        &["--trust-request-id", "tenant-alpha"],
    )
    .await;
    // A tenant namespace cannot be trusted with request IDs.
    let seen = h
        .send(&Request::get("app.alpha.lb.localhost", "/").header("x-request-id", "forged"))
        .await
        .json()
        .unwrap();
    assert_ne!(seen["headers"]["X-Request-Id"][0], "forged");

    const ALPHA_OK: usize = 300;
    const BETA_OK: usize = 60;
    const BETA_FAILED: usize = 40;
    let load = async {
        let alpha = async {
            let mut conn =
                client::Connection::open(h.proxy.http, &Transport::Plain, client::Proto::Http1)
                    .await
                    .expect("alpha connection");
            let req = Request::get("app.alpha.lb.localhost", "/");
            for i in 0..ALPHA_OK {
                let resp = conn.send(&req).await.expect("alpha request");
                assert_eq!(resp.status, 200, "alpha request {i}");
            }
        };
        let beta = async {
            let mut conn =
                client::Connection::open(h.proxy.http, &Transport::Plain, client::Proto::Http1)
                    .await
                    .expect("beta connection");
            let ok = Request::get("app.beta.lb.localhost", "/");
            let failing = Request::get("app.beta.lb.localhost", "/").header("x-echo-status", "503");
            for i in 0..BETA_OK + BETA_FAILED {
                let req = if i % 5 < 3 { &ok } else { &failing };
                conn.send(req).await.expect("beta request");
            }
        };
        tokio::join!(alpha, beta);
    };
    // `teapot top` watches the proxy while the load runs.
    let top = tokio::process::Command::new(teapot_bin())
        .args([
            "top",
            "--admin",
            &h.proxy.admin.to_string(),
            "--interval-ms",
            "1500",
            "--iterations",
            "1",
        ])
        .output();
    let (top, ()) = tokio::join!(top, load);
    let top = top.expect("teapot top runs");
    let screen = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "{screen}\n{}",
        String::from_utf8_lossy(&top.stderr)
    );
    assert!(
        screen.contains("TENANT") && screen.contains("P99 MS"),
        "{screen}"
    );
    let row = |tenant: &str| {
        screen
            .lines()
            .find(|l| l.split_whitespace().next() == Some(tenant))
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
    };
    // Only the proxy's own load is on it, so any nonzero rate is ours.
    let alpha_row = row("alpha").unwrap_or_else(|| panic!("no alpha row: {screen}"));
    assert!(alpha_row[1].parse::<f64>().unwrap() > 0.0, "{screen}");

    let m = h.metrics().await;
    let series = |name: &str, labels: &str| metric(&m, &format!("{name}{{{labels}}}"));
    assert_eq!(
        series(
            "teapot_tenant_requests_total",
            "class=\"2xx\",tenant=\"alpha\""
        ),
        Some((ALPHA_OK + 1) as f64),
        "{m}"
    );
    assert_eq!(
        series(
            "teapot_tenant_requests_total",
            "class=\"5xx\",tenant=\"alpha\""
        ),
        Some(0.0)
    );
    assert_eq!(
        series(
            "teapot_tenant_requests_total",
            "class=\"2xx\",tenant=\"beta\""
        ),
        Some(BETA_OK as f64)
    );
    assert_eq!(
        series(
            "teapot_tenant_requests_total",
            "class=\"5xx\",tenant=\"beta\""
        ),
        Some(BETA_FAILED as f64)
    );
    assert_eq!(
        series("teapot_tenant_request_seconds_count", "tenant=\"alpha\""),
        Some((ALPHA_OK + 1) as f64)
    );
    assert_eq!(
        series("teapot_tenant_request_seconds_count", "tenant=\"beta\""),
        Some((BETA_OK + BETA_FAILED) as f64)
    );
    let out = |t: &str| {
        series(
            "teapot_tenant_bytes_total",
            &format!("direction=\"out\",tenant=\"{t}\""),
        )
    };
    assert!(out("alpha").unwrap() > out("beta").unwrap(), "{m}");
    assert_eq!(alpha_echo.requests(), (ALPHA_OK + 1) as u64);
    // Nothing of theirs was counted as unrouted or operator traffic.
    let stray: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("teapot_tenant_requests_total") && !l.ends_with(" 0"))
        .filter(|l| !l.contains("tenant=\"alpha\"") && !l.contains("tenant=\"beta\""))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
    // Off by default: no per-route series.
    assert!(!m.contains("teapot_route_requests_total{"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_and_http1_over_tls_are_logged_with_their_tls_version_and_server_name() {
    let ca = teapot_testkit::certs::TestCa::new("teapot observe CA");
    let cert = ca.issue(&["h2.test"]);
    let backend = echo("h2", "web", "web-0").await;
    let mut documents = echo_service("h2", "web", &[&backend]);
    let mut ingress = simple_ingress("h2", "web", "h2.test", "web");
    ingress["spec"]["tls"] = json!([{ "hosts": ["h2.test"], "secretName": "cert" }]);
    documents.push(ingress);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let h = Harness::start_with_args(
        &[
            ("10-web.yaml", docs(&documents)),
            (
                "20-cert.yaml",
                teapot_testkit::certs::tls_secret_yaml("h2", "cert", &cert),
            ),
        ],
        &[
            "--access-log",
            "errors",
            "--access-log-file",
            log.to_str().unwrap(),
            "--metrics-per-route",
        ],
    )
    .await;
    let conn = H2Connection::open(h.proxy.https, "h2.test", &[ca.cert_der()]).await;
    let (status, version, seen) = h2_get(
        conn.sender.clone(),
        "h2.test",
        "/ok?q=1",
        &[("traceparent", TRACEPARENT)],
    )
    .await;
    assert_eq!((status, version), (200, http::Version::HTTP_2));
    let id = seen["headers"]["X-Request-Id"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(id.len(), 32, "{seen}");
    assert_eq!(seen["headers"]["Traceparent"][0], TRACEPARENT);
    // The errors mode logs the backend's 503, not the 200 before it.
    let (status, _, _) = h2_get(
        conn.sender.clone(),
        "h2.test",
        "/failing",
        &[("x-echo-status", "503")],
    )
    .await;
    assert_eq!(status, 503);
    // HTTP/1.1 over TLS (teapot's own engine): its line names the TLS
    // version and the SNI as well.
    let h1 = send(
        h.proxy.https,
        &Transport::tls_verified("h2.test", &[ca.cert_der()]),
        &Request::get("h2.test", "/h1-failing").header("x-echo-status", "502"),
    )
    .await;
    assert_eq!(h1.status, 502);

    let lines = read_log(&log, |lines| lines.len() >= 2).await;
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let h1_line = first(&lines, "the HTTP/1.1 request", |l| l["status"] == 502);
    assert_eq!(h1_line["path"], "/h1-failing");
    assert_eq!(h1_line["protocol"], "h1");
    assert_eq!(h1_line["tls"], "TLSv1.3");
    assert_eq!(h1_line["sni"], "h2.test");
    assert_eq!(h1_line["route"], "h2/web");
    let line = first(&lines, "the HTTP/2 request", |l| l["status"] == 503);
    for f in HTTP_FIELDS {
        assert!(line.get(f).is_some(), "{f} missing from {line}");
    }
    assert_eq!(line["status"], 503);
    assert_eq!(line["path"], "/failing");
    assert_eq!(line["protocol"], "h2");
    assert_eq!(line["tls"], "TLSv1.3");
    assert_eq!(line["sni"], "h2.test");
    assert_eq!(line["route"], "h2/web");
    assert_eq!(line["upstream_addr"], backend.addr().to_string());
    assert_eq!(line["request_id"].as_str().unwrap().len(), 32);
    assert_ne!(line["request_id"], id.as_str(), "one ID per request");

    // --metrics-per-route: the route's own series beside the tenant's.
    let m = h.metrics().await;
    for (class, n) in [("2xx", 1.0), ("5xx", 2.0)] {
        let name = format!(
            "teapot_route_requests_total{{class=\"{class}\",route=\"h2/web\",tenant=\"_operator\"}}"
        );
        assert_eq!(metric(&m, &name), Some(n), "{m}");
    }
    // The Secret serving h2.test, with its notAfter in the future.
    let not_after = metric(
        &m,
        "teapot_certificate_not_after_seconds{secret=\"h2/cert\"}",
    )
    .unwrap_or_else(|| panic!("no expiry series for h2/cert: {m}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(not_after > now, "{not_after} <= {now}");

    // The Ingress deleted: its route's series leave the registry with the
    // reload that drops the route (a tenant creating and deleting routes
    // must not grow every replica's registry).
    h.delete("10-web.yaml").await;
    let m = h.metrics().await;
    assert!(!m.contains("route=\"h2/web\""), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_queued_at_shutdown_are_written_before_the_process_exits() {
    let backend = echo("ops", "web", "web-0").await;
    let mut documents = echo_service("ops", "web", &[&backend]);
    documents.push(simple_ingress("ops", "web", "ops.test", "web"));
    let tcp = TcpEcho::start(TcpMode::Echo).await.unwrap();
    let udp = UdpEcho::start().await.unwrap();
    let port = free_port(LOCALHOST).unwrap();
    documents.extend(l4_echo_service(port, &tcp, &udp, json!({})));
    // The log goes to a FIFO the test does not read until the very end of
    // the shutdown, and then slowly: a destination that lags (a stderr
    // read by a slow collector), so the writer blocks with the pipe full
    // and the lines pile up in its queue. Only the drain at shutdown gets
    // them out before the process exits.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&log)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let (go, wait_for_sigterm) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn({
        let log = log.clone();
        move || {
            use std::io::Read as _;
            // Opening blocks until the proxy opens its end.
            let mut fifo = std::fs::File::open(&log).expect("open the FIFO");
            let _ = wait_for_sigterm.recv();
            // About 800 KB/s: a few hundred milliseconds for the backlog,
            // well within the drain's second.
            let mut text = Vec::new();
            let mut chunk = [0u8; 8192];
            loop {
                match fifo.read(&mut chunk).expect("read the FIFO") {
                    0 => break,
                    n => text.extend_from_slice(&chunk[..n]),
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            String::from_utf8(text).expect("UTF-8 lines")
        }
    });
    let state = dir.path().join("l4-state.json");
    let mut h = Harness::start_with_args(
        &[("all.yaml", docs(&documents))],
        &[
            "--access-log",
            "all",
            "--access-log-file",
            log.to_str().unwrap(),
            "--grace-period",
            "1",
            "--l4-pool",
            "default=127.0.0.1",
            "--l4-state",
            state.to_str().unwrap(),
        ],
    )
    .await;

    // A TCP connection and a UDP flow left open: the shutdown ends them,
    // so their lines are queued at the very end of the process.
    let held = eventually("the L4 listener", RELOAD_TIMEOUT, || async {
        let mut s = tokio::net::TcpStream::connect(SocketAddr::new(LOCALHOST, port)).await?;
        s.write_all(b"ping").await?;
        let mut back = [0u8; 4];
        tokio::time::timeout(std::time::Duration::from_secs(1), s.read_exact(&mut back))
            .await
            .map_err(|_| std::io::Error::other("no echo yet"))??;
        Ok::<_, std::io::Error>(s)
    })
    .await;
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client
        .connect(SocketAddr::new(LOCALHOST, port))
        .await
        .unwrap();
    eventually("a UDP answer", RELOAD_TIMEOUT, || async {
        client.send(b"hello").await?;
        let mut buf = [0u8; 16];
        tokio::time::timeout(std::time::Duration::from_millis(500), client.recv(&mut buf))
            .await
            .map_err(|_| std::io::Error::other("no answer yet"))?
    })
    .await;
    // Requests right before SIGTERM: more lines (about 400 bytes each)
    // than the pipe (64 KiB) and the writer's buffer (64 KiB) hold.
    let mut conn = client::Connection::open(h.proxy.http, &Transport::Plain, client::Proto::Http1)
        .await
        .expect("connection");
    const LAST: usize = 600;
    for i in 0..LAST {
        let resp = conn
            .send(&Request::get("ops.test", &format!("/last-{i}")))
            .await
            .expect("request");
        assert_eq!(resp.status, 200);
    }
    h.proxy.terminate().expect("SIGTERM");
    // The held connection is closed when the grace period is over, the
    // last step before the server drains the log and returns: only now
    // does the destination start taking lines.
    let mut held = held;
    let mut rest = [0u8; 16];
    let closed = tokio::time::timeout(std::time::Duration::from_secs(20), held.read(&mut rest))
        .await
        .expect("the proxy closes the held connection");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    go.send(()).unwrap();
    let status = h
        .proxy
        .wait(std::time::Duration::from_secs(20))
        .await
        .expect("the proxy exits after SIGTERM");
    assert!(status.success(), "{status}");

    // All read once the proxy has exited (its end of the FIFO closed).
    let text = reader.join().expect("the FIFO's reader");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect();
    let paths: std::collections::HashSet<&str> =
        lines.iter().filter_map(|l| l["path"].as_str()).collect();
    let missing: Vec<usize> = (0..LAST)
        .filter(|i| !paths.contains(format!("/last-{i}").as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "no line for {} requests: {missing:?}",
        missing.len()
    );
    let ended = ["drained", "shutdown"];
    // Earlier probes of the listener may have their own lines.
    let held_at = held.local_addr().unwrap().to_string();
    let tcp_line = first(&lines, "the held TCP connection", |l| {
        l["kind"] == "tcp" && l["client"] == held_at.as_str()
    });
    assert_eq!(tcp_line["bytes_in"], 4, "{tcp_line}");
    assert!(
        ended.contains(&tcp_line["reason"].as_str().unwrap_or("")),
        "{tcp_line}"
    );
    let udp_at = client.local_addr().unwrap().to_string();
    let udp_line = first(&lines, "the open UDP flow", |l| {
        l["kind"] == "udp" && l["client"] == udp_at.as_str()
    });
    assert!(
        ended.contains(&udp_line["reason"].as_str().unwrap_or("")),
        "{udp_line}"
    );
}

#[test]
fn bad_access_log_and_top_arguments_fail_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("access.log");
    let out = std::process::Command::new(teapot_bin())
        .args(["proxy", "--manifests"])
        .arg(dir.path())
        .args([
            "--http",
            "127.0.0.1:0",
            "--https",
            "off",
            "--admin",
            "127.0.0.1:0",
        ])
        .args(["--access-log", "all", "--access-log-file"])
        .arg(&missing)
        .output()
        .expect("run teapot proxy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started with an unopenable access log"
    );
    assert!(
        stderr.contains(&format!("--access-log-file {}", missing.display())),
        "{stderr}"
    );

    let out = std::process::Command::new(teapot_bin())
        .args(["proxy", "--manifests"])
        .arg(dir.path())
        .args(["--access-log", "sometimes"])
        .output()
        .expect("run teapot proxy");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--access-log"));

    // Nothing listens on port 1.
    let out = std::process::Command::new(teapot_bin())
        .args(["top", "--admin", "127.0.0.1:1", "--iterations", "1"])
        .output()
        .expect("run teapot top");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--admin 127.0.0.1:1"), "{stderr}");
}
