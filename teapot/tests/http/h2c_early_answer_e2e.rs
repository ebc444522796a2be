//! An h2c backend that answers before the request's body has reached it
//! (proxy/src/plane/h2c_upstream.rs): gRPC servers answer a unary call and
//! then reset the stream with NO_ERROR when the client's body is still on
//! its way (RFC 9113 §8.1: the client must not discard that answer). The
//! body teapot then cannot deliver does not fail the call: the backend's
//! whole answer, trailers with `grpc-status`, reaches the client.
//!
//! Under load the body's late arrival is a race (a busy proxy reads the
//! client's body after the backend answered), which made a weighted gRPC
//! burst see some 502s; here the client holds its body back until the
//! answer's head has reached it, so the race is lost every time.

use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioExecutor;

const HOST: &str = "h2c-early-answer.test";
const NS: &str = "h2c-early-answer";
/// Larger than the client's stream window below, so the answer's data
/// waits in teapot for the client to read it.
const ANSWER: usize = 4096;

/// An h2c backend answering every call at once, without reading the
/// request: a gRPC message of `ANSWER` bytes and `grpc-status: 0`.
async fn h2c_backend() -> SocketAddr {
    common::h2c_backend(
        hyper::server::conn::http2::Builder::new(TokioExecutor::new()),
        |_req: http::Request<hyper::body::Incoming>| async move {
            let mut message = vec![0u8];
            message.extend_from_slice(&((ANSWER - 5) as u32).to_be_bytes());
            message.resize(ANSWER, b'a');
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
                Ok(Frame::data(Bytes::from(message))),
                Ok(Frame::trailers(trailers)),
            ];
            Ok::<_, Infallible>(
                http::Response::builder()
                    .header("content-type", "application/grpc")
                    .body(StreamBody::new(futures::stream::iter(frames)))
                    .unwrap(),
            )
        },
    )
    .await
}

/// One call whose 5-byte body is sent only once the answer's head has
/// arrived: the status, the answer's length and its `grpc-status`.
async fn late_body_call(sender: &mut H2cSender) -> (u16, usize, Option<String>) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
    let body = StreamBody::new(tokio_stream_from(rx)).boxed();
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{HOST}/pkg.Svc/Call"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .unwrap();
    let exchange = async {
        sender.ready().await.expect("h2 sender ready");
        let resp = sender.send_request(req).await.expect("a response head");
        let status = resp.status().as_u16();
        let _ = tx.send(Ok(Frame::data(Bytes::from_static(&[0; 5])))).await;
        drop(tx);
        match resp.into_body().collect().await {
            Ok(whole) => {
                let grpc = whole
                    .trailers()
                    .and_then(|t| t.get("grpc-status"))
                    .map(|v| v.to_str().unwrap().to_string());
                (status, whole.to_bytes().len(), grpc)
            }
            Err(e) => (status, 0, Some(format!("the answer broke off: {e}"))),
        }
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .expect("h2 request timed out")
}

fn tokio_stream_from<T: 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// An h2c client whose stream window is smaller than the answer, so
/// teapot still holds part of the answer when the body comes.
async fn narrow_h2c(addr: SocketAddr) -> H2cSender {
    let mut builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .initial_stream_window_size(1024)
        .adaptive_window(false);
    h2c_with(addr, &builder).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_sent_before_the_request_body_arrived_is_relayed_whole() {
    let backend = h2c_backend().await;
    let manifests = h2c_route(NS, HOST, backend.port());
    let h = Harness::start_with_args(&[("m.yaml", docs(&manifests))], &["--h2c"]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = h2c(h.proxy.http).await;
        let req = http::Request::builder()
            .uri(format!("http://{HOST}/ready"))
            .body(Full::new(Bytes::new()).boxed())
            .unwrap();
        let ready = match c.send_request(req).await {
            Ok(resp) => resp.status() == 200,
            Err(_) => false,
        };
        if ready {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "route not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut c = narrow_h2c(h.proxy.http).await;
    for i in 0..20 {
        assert_eq!(
            late_body_call(&mut c).await,
            (200, ANSWER, Some("0".to_string())),
            "call {i}"
        );
    }
}
