//! The agent's admin listener: `/healthz` (the process runs), `/readyz`
//! (200 `standby`, or `leader` once the tenant Ingresses and Services are
//! listed; 503 `leader, listing` before), `/metrics` (Prometheus text). Keep
//! it off public interfaces.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus::{Encoder, TextEncoder};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::{Health, Metrics};

/// Serves until `shutdown` turns true.
pub async fn run(
    listener: TcpListener,
    metrics: Metrics,
    health: Arc<Health>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => return,
        };
        let (metrics, health) = (metrics.clone(), health.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let response = handle(&metrics, &health, &req);
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn handle(metrics: &Metrics, health: &Health, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
    }
    match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" if health.ready() => text(StatusCode::OK, format!("{}\n", health.role())),
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}\n", health.role()),
        ),
        "/metrics" => {
            let mut out = Vec::new();
            if TextEncoder::new()
                .encode(&metrics.registry.gather(), &mut out)
                .is_err()
            {
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "encoding failed\n".into(),
                );
            }
            let mut r = Response::new(Full::new(Bytes::from(out)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

/// Resolves once `shutdown` turns true (or its sender is gone). The guard
/// `wait_for` returns is dropped here, so callers' futures stay `Send`.
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}
