//! A route to a backend that refuses every connect (a closed port) costs
//! the proxy's log a handful of lines, not one per request: the endpoint's
//! state changes are logged, every failure is counted in
//! `teapot_upstream_connect_failures_total` (and per tenant). The proxy
//! is started here with its stderr read by the test (the harness lets it
//! through to the terminal).

use crate::common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use common::*;
use teapot_testkit::client::{Connection, Proto, Request, Transport};
use teapot_testkit::process::parse_listening_line;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const HOST: &str = "closed.test";
const REQUESTS: usize = 500;

/// The sum of every series of `name` (any labels).
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_backend_port_writes_a_handful_of_lines_and_counts_every_failure() {
    // A port nothing listens on, held for the whole test.
    let closed = teapot_testkit::l4::ClosedPort::new();
    let documents = vec![
        service("closed", "web", &[(Some("http"), 80)]),
        slice(
            "closed",
            "web-0",
            "web",
            &[(Some("http"), closed.port())],
            &[("127.0.0.1", true)],
        ),
        simple_ingress("closed", "web", HOST, "web"),
    ];
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.yaml"), docs(&documents)).unwrap();

    let mut child = Command::new(teapot_bin())
        .args(["proxy", "--manifests"])
        .arg(dir.path())
        .args(teapot_testkit::process::LOOPBACK_LISTENERS)
        .args(["--h2c", "--log-format", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("teapot proxy starts");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let stderr = child.stderr.take().unwrap();
    let kept = lines.clone();
    tokio::spawn(async move {
        let mut stderr = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = stderr.next_line().await {
            eprintln!("[teapot] {line}");
            kept.lock().unwrap().push(line);
        }
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let addrs = tokio::time::timeout(REQUEST_TIMEOUT, async {
        loop {
            let line = stdout.next_line().await.unwrap().expect("a listening line");
            if let Some(addrs) = parse_listening_line(&line) {
                return addrs;
            }
        }
    })
    .await
    .expect("the listening line");
    tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
    let metrics = || async move {
        teapot_testkit::client::send(
            addrs.admin,
            &Transport::Plain,
            &Request::get("admin", "/metrics"),
        )
        .await
        .map(|r| r.text())
    };
    eventually("the route served", REQUEST_TIMEOUT, || async {
        let mut c = Connection::open(addrs.http, &Transport::Plain, Proto::Http1)
            .await
            .map_err(|e| e.to_string())?;
        let r = c
            .send(&Request::get(HOST, "/"))
            .await
            .map_err(|e| e.to_string())?;
        if r.status == 502 {
            Ok(())
        } else {
            Err(r.status.to_string())
        }
    })
    .await;
    let before = metric_sum(
        &metrics().await.unwrap(),
        "teapot_upstream_connect_failures_total",
    );

    // Half over HTTP/1 (the engine's path), half over HTTP/2 (teapot's
    // exchange with HTTP/1 backends), on kept-alive connections.
    let mut h1 = Connection::open(addrs.http, &Transport::Plain, Proto::Http1)
        .await
        .unwrap();
    let mut h2 = Connection::open(addrs.http, &Transport::Plain, Proto::Http2)
        .await
        .unwrap();
    for i in 0..REQUESTS {
        let conn = if i % 2 == 0 { &mut h1 } else { &mut h2 };
        let r = tokio::time::timeout(REQUEST_TIMEOUT, conn.send(&Request::get(HOST, "/")))
            .await
            .expect("an answer")
            .expect("a response");
        assert_eq!(r.status, 502, "request {i}: {}", r.text());
    }

    let text = metrics().await.unwrap();
    let failures = metric_sum(&text, "teapot_upstream_connect_failures_total") - before;
    assert_eq!(failures, REQUESTS as f64, "{text}");
    let by_tenant = metric_sum(&text, "teapot_tenant_upstream_connect_failures_total");
    assert_eq!(by_tenant, failures + before, "{text}");

    let port = format!("127.0.0.1:{}", closed.port());
    let about: Vec<String> = lines
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(&port))
        .cloned()
        .collect();
    assert!(!about.is_empty(), "the first failure is logged");
    assert!(
        about.len() <= 4,
        "{} lines about {port} for {} failures:\n{}",
        about.len(),
        failures + before,
        about.join("\n")
    );
    assert!(about[0].contains("endpoint ejected"), "{}", about[0]);
}
