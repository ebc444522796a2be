//! HTTP/3 through the real binary with the aioquic client
//! (`tests/fixtures/h3client.py`), the paths http3_e2e leaves: 8 MiB
//! bodies both ways checked by SHA-256, a gRPC call to an h2c backend
//! with its trailers, an error page and a tenant's limit on HTTP/3
//! streams, and a drain on SIGTERM in which the client sees GOAWAY, every
//! request in flight is answered and a new connection is refused.

use crate::common;
use crate::http3_e2e::{aioquic_python, body_echo, get, h3, run_client};

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

const NS: &str = "quic-paths";

/// Many times a stream's and a connection's window (64 KiB).
const LARGE: usize = 8 << 20;

/// Waits until every Ingress of `n` is served.
async fn served(h: &Harness, n: usize) {
    h.wait_status("the ingresses served", |s| {
        s["ingresses"]
            .as_array()
            .is_some_and(|i| i.len() == n && i.iter().all(|r| r["served"] == true))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_carries_8_mib_both_ways_unchanged() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let bodies = body_echo().await;
    let mut objects = loopback_service(NS, "bodies", bodies);
    objects.push(simple_ingress(NS, "bodies", "bodies.test", "bodies"));
    let h = Harness::start_with_args(&[("manifests.yaml", docs(&objects))], &["--http3"]).await;
    served(&h, 1).await;
    let addr = format!("127.0.0.1:{}", h.proxy.https.port());
    // Two at once on one connection: the windows are shared.
    let up = json!({ "method": "POST", "authority": "bodies.test", "path": "/up",
                     "body_size": LARGE });
    let answers = h3(
        &python,
        json!({ "addr": addr, "sni": "bodies.test", "requests": [up.clone(), up],
                "timeout": 120 }),
    )
    .await;
    for answer in &answers {
        assert_eq!(answer["status"], 200, "{answer:?}");
        assert_eq!(answer["body_len"], LARGE, "{answer:?}");
        assert_eq!(answer["sha256"], answer["sent_sha256"], "{answer:?}");
    }
}

/// An h2c backend answering each gRPC call with the message it got and
/// `grpc-status: 0` in trailers.
async fn grpc_echo() -> u16 {
    let addr = h2c_backend(
        hyper::server::conn::http2::Builder::new(TokioExecutor::new()),
        |req: http::Request<hyper::body::Incoming>| async move {
            let grpc = req
                .headers()
                .get("content-type")
                .is_some_and(|t| t.as_bytes().starts_with(b"application/grpc"));
            let te = req.headers().get("te").cloned();
            let body = req.into_body().collect().await.map(|b| b.to_bytes());
            let body = body.unwrap_or_default();
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            trailers.insert(
                "x-got",
                http::HeaderValue::from_str(&format!("{} {grpc} {te:?}", body.len())).unwrap(),
            );
            let frames: Vec<Result<Frame<Bytes>, Infallible>> =
                vec![Ok(Frame::data(body)), Ok(Frame::trailers(trailers))];
            Ok::<_, Infallible>(
                http::Response::builder()
                    .header("content-type", "application/grpc")
                    .body(StreamBody::new(futures::stream::iter(frames)))
                    .unwrap(),
            )
        },
    )
    .await;
    addr.port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_http3_reaches_an_h2c_backend_with_its_trailers() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let port = grpc_echo().await;
    let mut objects = loopback_service(NS, "calls", port);
    objects.push(annotated(
        NS,
        "grpc.test",
        "calls",
        &[("backend-protocol", "GRPC")],
    ));
    let h = Harness::start_with_args(&[("manifests.yaml", docs(&objects))], &["--http3"]).await;
    served(&h, 1).await;
    let addr = format!("127.0.0.1:{}", h.proxy.https.port());
    // A message of several windows, as gRPC frames it.
    const MESSAGE: usize = 1 << 20;
    let call = json!({ "method": "POST", "authority": "grpc.test", "path": "/pkg.Svc/Echo",
                       "headers": [["content-type", "application/grpc"], ["te", "trailers"]],
                       "grpc": MESSAGE });
    let answers = h3(
        &python,
        json!({ "addr": addr, "sni": "grpc.test", "requests": [call], "timeout": 60 }),
    )
    .await;
    let answer = &answers[0];
    assert_eq!(answer["status"], 200, "{answer:?}");
    assert_eq!(answer["headers"]["content-type"], "application/grpc");
    assert_eq!(answer["body_len"], MESSAGE + 5, "{answer:?}");
    assert_eq!(answer["sha256"], answer["sent_sha256"], "{answer:?}");
    assert_eq!(answer["trailers"]["grpc-status"], "0", "{answer:?}");
    assert_eq!(
        answer["trailers"]["x-got"],
        format!("{} true Some(\"trailers\")", MESSAGE + 5),
        "{answer:?}"
    );
}

/// A backend status listed in `custom-http-errors` gets the error
/// backend's page over HTTP/3 as over TCP; a tenant's `maxConnections`
/// counts HTTP/3 streams as HTTP/2's (busy with the tenant: one), the
/// others answered 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_gets_error_pages_and_tenant_limits_as_tcp() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let web = echo(NS, "web", "web-0").await;
    let errors = echo(NS, "errors", "errors-0").await;
    let mut objects = echo_service(NS, "web", &[&web]);
    objects.extend(echo_service(NS, "errors", &[&errors]));
    objects.push(annotated(
        NS,
        "pages.test",
        "web",
        &[("custom-http-errors", "404"), ("default-backend", "errors")],
    ));
    let (_tenant_echo, tenant_docs) = limited_tenant_route(
        "quiet",
        common::node_address(false),
        json!({ "maxConnections": 1 }),
        "app.quiet.lb.localhost",
    )
    .await;
    objects.extend(tenant_docs);
    let h = Harness::start_with_args(
        &[("manifests.yaml", docs(&objects))],
        &["--http3", "--tenant-refusal-delay-ms", "0"],
    )
    .await;
    served(&h, 2).await;
    let addr = format!("127.0.0.1:{}", h.proxy.https.port());

    let mut missing = get("pages.test", "/missing");
    missing["headers"] = json!([["x-echo-status", "404"], ["accept", "application/json"]]);
    let page = h3(
        &python,
        json!({ "addr": addr, "sni": "pages.test", "requests": [missing] }),
    )
    .await;
    assert_eq!(page[0]["status"], 404, "{page:?}");
    let seen: Value = serde_json::from_str(page[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(seen["service"], "errors", "{seen}");
    assert_eq!(seen["headers"]["X-Code"], json!(["404"]), "{seen}");
    assert_eq!(seen["headers"]["X-Original-Uri"], json!(["/missing"]));

    // Three streams at once, each held 3 s by the tenant's backend
    // (`x-echo-delay-ms`; this echo takes no `?delay=`): one is the
    // tenant's one busy connection, the others are over it. Unheld, a
    // slow client on a loaded machine found the first answered before
    // it opened the third.
    let mut slow = get("app.quiet.lb.localhost", "/");
    slow["headers"] = json!([["x-echo-delay-ms", "3000"]]);
    let limited = h3(
        &python,
        json!({ "addr": addr, "sni": "app.quiet.lb.localhost",
                "requests": [slow.clone(), slow.clone(), slow] }),
    )
    .await;
    let mut statuses: Vec<u64> = limited
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 503, 503], "{limited:?}");
}

/// SIGTERM with three requests in flight on one connection: the client
/// gets GOAWAY naming the stream after the last one accepted (so none of
/// the three is taken as unprocessed), a new connection is refused, and
/// the three are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_sends_goaway_refuses_new_connections_and_answers_every_request() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let held = HeldBackend::start().await;
    let mut objects = held.service(NS, "held");
    objects.push(simple_ingress(NS, "held.test", "held.test", "held"));
    let mut h = Harness::start_with_args(
        &[("manifests.yaml", docs(&objects))],
        &["--http3", "--grace-period", "20"],
    )
    .await;
    served(&h, 1).await;
    let addr = format!("127.0.0.1:{}", h.proxy.https.port());
    let client = tokio::spawn({
        let (python, addr) = (python.clone(), addr.clone());
        async move {
            h3(
                &python,
                json!({ "addr": addr, "sni": "held.test", "goaway": true,
                        "requests": [get("held.test", "/1"), get("held.test", "/2"),
                                     get("held.test", "/3")], "timeout": 60 }),
            )
            .await
        }
    });
    let requests = [held.next().await, held.next().await, held.next().await];
    h.proxy.terminate().expect("SIGTERM");
    eventually("the admin listener to stop", REQUEST_TIMEOUT, || async {
        match h.proxy.admin_get("/readyz").await {
            Err(_) => Ok(()),
            Ok(answer) => Err(format!("{answer:?}")),
        }
    })
    .await;
    // A new connection is refused while the three wait.
    let refused = run_client(
        &python,
        json!({ "addr": addr, "sni": "held.test", "requests": [get("held.test", "/new")],
                "timeout": 10 }),
    )
    .await;
    assert!(
        !refused.status.success(),
        "a connection was served after SIGTERM: {}",
        String::from_utf8_lossy(&refused.stdout)
    );
    for request in requests {
        request.answer(true);
    }
    let answered = client.await.unwrap();
    for answer in &answered[..3] {
        assert_eq!(answer["status"], 200, "{answered:?}");
        assert_eq!(answer["body"], "held", "{answered:?}");
    }
    // Streams 0, 4 and 8 were accepted: GOAWAY names 12.
    assert_eq!(answered[3]["goaway"], 12, "{answered:?}");
    let exit = h.proxy.wait(Duration::from_secs(30)).await.expect("exits");
    assert!(exit.success(), "{exit:?}");
}
