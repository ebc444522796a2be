//! What an h2c backend (proxy/src/plane/h2c_upstream.rs) may make teapot
//! hold: a response head is held to an HTTP/1 backend's limits (the
//! engine's head size as the decoded header list size, its field count).
//! Over either, the client gets 502, the backend's stream (or connection)
//! is reset, and the proxy goes on serving.

use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioExecutor;

const HOST: &str = "h2c-limits.test";
const NS: &str = "h2c-limits";

/// An h2c backend answering by path: `/huge-field` with one 1 MiB field,
/// `/huge-head` with 1,024 fields of 1 KiB, `/many-fields` with 300 small
/// fields, `/some-fields` with 100, `/many-trailers` with 300 trailer
/// fields, anything else with a plain 200 `ok`.
async fn h2c_backend() -> SocketAddr {
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder.max_send_buf_size(4 * 1024 * 1024);
    common::h2c_backend(
        builder,
        |req: http::Request<hyper::body::Incoming>| async move {
            let mut resp = http::Response::builder();
            match req.uri().path() {
                "/huge-field" => {
                    resp = resp.header("x-huge", "a".repeat(1024 * 1024));
                }
                "/huge-head" => {
                    let value = "b".repeat(1024);
                    for i in 0..1024 {
                        resp = resp.header(format!("x-big-{i}"), value.as_str());
                    }
                }
                "/some-fields" => {
                    for i in 0..100 {
                        resp = resp.header(format!("x-field-{i}"), "1");
                    }
                }
                "/many-fields" => {
                    for i in 0..300 {
                        resp = resp.header(format!("x-field-{i}"), "1");
                    }
                }
                "/many-trailers" => {
                    let mut trailers = http::HeaderMap::new();
                    for i in 0..300 {
                        trailers.insert(
                            http::HeaderName::try_from(format!("x-trailer-{i}")).unwrap(),
                            http::HeaderValue::from_static("1"),
                        );
                    }
                    let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
                        Ok(Frame::data(Bytes::from_static(b"ok"))),
                        Ok(Frame::trailers(trailers)),
                    ];
                    let body = StreamBody::new(futures::stream::iter(frames)).boxed();
                    return Ok::<_, Infallible>(resp.body(body).unwrap());
                }
                _ => {}
            }
            Ok::<_, Infallible>(
                resp.body(Full::new(Bytes::from_static(b"ok")).boxed())
                    .unwrap(),
            )
        },
    )
    .await
}

/// GETs `path`; the status and body.
async fn get(sender: &mut H2cSender, path: &str) -> (u16, String) {
    let req = http::Request::builder()
        .method("GET")
        .uri(format!("http://{HOST}{path}"))
        .body(Full::new(Bytes::new()).boxed())
        .unwrap();
    let exchange = async {
        sender.ready().await.expect("h2 sender ready");
        let resp = sender.send_request(req).await.expect("a response head");
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("a whole body");
        (
            status,
            String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        )
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .expect("h2 request timed out")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_response_heads_over_the_http1_limits_are_a_502() {
    let backend = h2c_backend().await;
    let manifests = h2c_route(NS, HOST, backend.port());
    let h = Harness::start_with_args(&[("m.yaml", docs(&manifests))], &["--h2c"]).await;
    let mut c = h2c(h.proxy.http).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if get(&mut c, "/ready").await.0 == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "route not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    for path in ["/huge-field", "/huge-head", "/many-fields"] {
        let (status, body) = get(&mut c, path).await;
        assert_eq!(status, 502, "{path}: {body}");
        // The proxy is healthy and the next normal request works, on the
        // same client connection.
        assert_eq!(
            get(&mut c, "/ok").await,
            (200, "ok".to_string()),
            "after {path}"
        );
    }
    // Trailers are held to the same count: the head may have gone out, so
    // the stream is reset and the client never takes the answer for whole
    // (a reset before the head was flushed is an error instead of a head).
    let req = http::Request::builder()
        .uri(format!("http://{HOST}/many-trailers"))
        .body(Full::new(Bytes::new()).boxed())
        .unwrap();
    let cut = async {
        c.ready().await.expect("h2 sender ready");
        let resp = c.send_request(req).await?;
        resp.into_body().collect().await.map(|b| b.to_bytes())
    };
    let cut = tokio::time::timeout(REQUEST_TIMEOUT, cut)
        .await
        .expect("h2 request timed out");
    assert!(cut.is_err(), "{cut:?}");
    assert_eq!(get(&mut c, "/ok").await, (200, "ok".to_string()));
    // Under the limits, a head with many fields still passes.
    assert_eq!(get(&mut c, "/some-fields").await, (200, "ok".to_string()));
    let metrics = h.metrics().await;
    assert!(
        metric(&metrics, "teapot_http_responses_total{class=\"5xx\"}").unwrap_or(0.0) >= 3.0,
        "{metrics}"
    );
}
