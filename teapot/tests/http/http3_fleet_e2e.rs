//! HTTP/3 where the fleet's addressing and a hostile network meet it,
//! with the aioquic client (`tests/fixtures/h3client.py`):
//!
//! - a flood of QUIC Initial packets from many (spoofable) source
//!   addresses gets Retry packets past `--http3-retry-above` handshakes in
//!   flight, holds no connection slot, and a real client still connects;
//! - a connection whose packets move to another replica (an ECMP hash
//!   moving, here a UDP relay in the client's process switching its
//!   target): with the fleet's `--quic-key-file` the other replica's
//!   stateless reset ends it at once and the client's next request is
//!   answered on a new connection; with keys of its own per process the
//!   client waits for its idle timeout. Each run prints its times;
//! - a client whose NAT rebinds its port mid-connection, at a replica
//!   with several serving threads, stays on the thread that holds its
//!   connection (the kernel steers by connection ID).

use crate::common;
use crate::http3_e2e::{aioquic_python, get, one_ingress_served, run_client, web_behind_a_test};

use std::path::PathBuf;

use common::*;
use serde_json::{Value, json};
use teapot_testkit::echo::EchoServer;

const NS: &str = "quic-fleet";

/// The client's JSON object on `spec` (the flood and migrate modes).
async fn h3_object(python: &PathBuf, spec: Value) -> Value {
    let out = run_client(python, spec).await;
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "client output ({e}): {text} / {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        out.status.success(),
        "{parsed} / {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parsed
}

/// 64 handshakes begun from 64 addresses and never finished, against a
/// replica that takes 8 connections and asks for a Retry past 4
/// handshakes in flight: at most 4 get a handshake (and hold a slot for
/// the header-read timeout), the others a Retry, which costs no slot; a
/// real client from yet another address is served. Without Retry the
/// first 8 would hold every slot for 10 s and the client be refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_flood_gets_retries_and_leaves_the_slots_to_real_clients() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let (_backend, objects) = web_behind_a_test(NS).await;
    let h = Harness::start_with_args(
        &[("manifests.yaml", docs(&objects))],
        &[
            "--http3",
            "--http3-retry-above",
            "4",
            "--max-connections",
            "8",
            "--header-read-timeout",
            "10",
        ],
    )
    .await;
    one_ingress_served(&h).await;
    let addr = format!("127.0.0.1:{}", h.proxy.https.port());
    let flood = h3_object(
        &python,
        json!({ "addr": addr, "sni": "a.test", "flood": 64, "flood_wait": 1 }),
    )
    .await;
    assert!(flood["handshake"].as_u64().unwrap() <= 4, "{flood}");
    assert!(flood["retry"].as_u64().unwrap() >= 60, "{flood}");
    // The defence shows on the replica's metrics, as the operator sees it.
    let metrics = h.metrics().await;
    let retries = common::metric(&metrics, "teapot_http3_handshakes_total{result=\"retry\"}");
    assert!(retries.is_some_and(|n| n >= 60.0), "{metrics}");
    // The real client follows its Retry and is served while the four
    // half-open handshakes still hold their slots.
    let out = run_client(
        &python,
        json!({ "addr": addr, "sni": "a.test", "requests": [get("a.test", "/")] }),
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("\"status\": 200"), "{text}");
}

/// Two replicas serving the same routes, with or without one QUIC key.
async fn two_replicas(key: Option<&std::path::Path>) -> (Harness, Harness, EchoServer) {
    let (backend, objects) = web_behind_a_test(NS).await;
    let mut args = vec!["--http3".to_string()];
    if let Some(key) = key {
        args.extend(["--quic-key-file".to_string(), key.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let files = [("manifests.yaml", docs(&objects))];
    let a = Harness::start_with_args(&files, &args).await;
    let b = Harness::start_with_args(&files, &args).await;
    one_ingress_served(&a).await;
    one_ingress_served(&b).await;
    (a, b, backend)
}

/// The client's request through the relay to A, then to B: how its
/// connection ended and when the request was answered.
async fn migrate(python: &PathBuf, a: &Harness, b: &Harness) -> Value {
    let spec = json!({
        "addr": format!("127.0.0.1:{}", a.proxy.https.port()),
        "migrate": { "then": format!("127.0.0.1:{}", b.proxy.https.port()) },
        "sni": "a.test",
        "requests": [get("a.test", "/before"), get("a.test", "/after")],
        // Far below the replicas' 60 s, so the stall ends within the test.
        "client_idle": 5,
        "timeout": 40,
    });
    h3_object(python, spec).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_fleet_key_another_replica_resets_a_moved_connection_at_once() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("quic-key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef\n").unwrap();
    let (a, b, _backend) = two_replicas(Some(&key)).await;
    let moved = migrate(&python, &a, &b).await;
    eprintln!("shared key: {moved}");
    assert_eq!(moved["first"], 200, "{moved}");
    assert_eq!(moved["ended_by"], "stateless_reset", "{moved}");
    assert_eq!(moved["second"], 200, "{moved}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_shared_key_a_moved_connection_waits_for_its_idle_timeout() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let (a, b, _backend) = two_replicas(None).await;
    let moved = migrate(&python, &a, &b).await;
    eprintln!("keys per process: {moved}");
    assert_eq!(moved["first"], 200, "{moved}");
    assert_eq!(moved["ended_by"], "idle_timeout", "{moved}");
    assert_eq!(moved["second"], 200, "{moved}");
}

/// Clients whose NAT rebinds their port mid-connection, at a replica
/// with four serving threads, each with its own HTTP/3 endpoint. Spread
/// by the kernel's 4-tuple hash, three rebinding connections in four
/// would reach another thread's endpoint, which resets them; steered by
/// the connection ID, every one stays on its thread and its second
/// request is answered on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_nat_rebinds_stays_on_its_serving_thread() {
    let Some(python) = aioquic_python() else {
        return;
    };
    const CONNECTIONS: u64 = 24;
    let (_backend, objects) = web_behind_a_test(NS).await;
    let h = Harness::start_with_args(
        &[("manifests.yaml", docs(&objects))],
        &["--http3", "--threads", "4"],
    )
    .await;
    one_ingress_served(&h).await;
    let spec = json!({
        "addr": format!("127.0.0.1:{}", h.proxy.https.port()),
        "rebind": CONNECTIONS,
        "sni": "a.test",
        "requests": [get("a.test", "/before"), get("a.test", "/after")],
        "client_idle": 5,
        "timeout": 60,
    });
    let rebound = h3_object(&python, spec).await;
    assert_eq!(rebound["kept"], CONNECTIONS, "{rebound}");
}
