//! End-to-end test through the real `teapot proxy` binary in manifests
//! mode: rewriting one EndpointSlice file moves traffic to the new endpoint
//! without a compile (the snapshot generation and `reloads_total` stay, and
//! `endpoint_updates_total` counts it), and `/status` lists the new
//! endpoint. A change status must show (the last ready endpoint gone) is
//! compiled as before.
//!
//! Run with `cargo test -p teapot --test http endpoint_updates_e2e::`.

use crate::common;

use common::*;

const NS: &str = "churn";

fn web_slice(port: u16, ready: bool) -> String {
    docs(&[slice(
        NS,
        "web-0",
        "web",
        &[(Some("http"), port)],
        &[("127.0.0.1", ready)],
    )])
}

async fn counter(h: &Harness, name: &str) -> f64 {
    metric(&h.metrics().await, name).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_slice_rewrite_moves_traffic_without_a_compile() {
    let a = echo(NS, "web", "web-a").await;
    let b = echo(NS, "web", "web-b").await;
    let routes = docs(&[
        service(NS, "web", &[(Some("http"), 80)]),
        simple_ingress(NS, "web", "churn.test", "web"),
    ]);
    let h = Harness::start(&[
        ("routes.yaml", routes),
        ("web-slice.yaml", web_slice(a.addr().port(), true)),
    ])
    .await;
    assert_eq!(h.echo_json("churn.test", "/").await["pod"], "web-a");
    let generation = h.generation().await;
    let reloads = counter(&h, "teapot_reloads_total").await;
    let updates = counter(&h, "teapot_endpoint_updates_total").await;

    // A pod restarted elsewhere: its EndpointSlice names the new endpoint.
    h.write("web-slice.yaml", &web_slice(b.addr().port(), true));
    eventually("traffic on the new endpoint", RELOAD_TIMEOUT, || async {
        let pod = h.echo_json("churn.test", "/").await["pod"].clone();
        if pod == "web-b" { Ok(()) } else { Err(pod) }
    })
    .await;
    for _ in 0..4 {
        assert_eq!(h.echo_json("churn.test", "/").await["pod"], "web-b");
    }
    assert_eq!(h.generation().await, generation, "no new snapshot");
    assert_eq!(
        counter(&h, "teapot_reloads_total").await,
        reloads,
        "no compile"
    );
    assert_eq!(
        counter(&h, "teapot_endpoint_updates_total").await,
        updates + 1.0
    );
    let status = h.status().await;
    let web = status["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["namespace"] == NS && b["service"] == "web")
        .unwrap_or_else(|| panic!("web in /status: {status}"))
        .clone();
    assert_eq!(
        web["endpoints"],
        serde_json::json!([format!("127.0.0.1:{}", b.addr().port())]),
        "{web}"
    );

    // No ready endpoint left: the Ingress's status says so, which takes a
    // compile.
    h.write("web-slice.yaml", &web_slice(b.addr().port(), false));
    h.wait_generation_after(generation).await;
    assert_eq!(h.get("churn.test", "/").await.status, 503);
    assert_eq!(
        counter(&h, "teapot_reloads_total").await,
        reloads + 1.0,
        "one compile"
    );
}
