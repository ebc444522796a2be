//! The admin listener: `/healthz` (the process runs), `/readyz` (a snapshot
//! is loaded and the proxy accepts traffic), `/metrics` (Prometheus text) and
//! `/status` (the status report: Ingress status, backends, manifest
//! problems; in manifests mode this is where Ingress status is observed;
//! with announcement, the pools, L2 owners and live replicas under
//! `announce`, and with `--bgp-peer` each BGP session under `bgp`).
//!
//! Keep it off the public interfaces: it is read-only but reveals topology.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::compile::snapshot::SnapshotHandle;
use crate::plane::metrics::Metrics;

/// What the admin handlers read.
#[derive(Debug, Clone)]
pub struct AdminState {
    pub snapshots: SnapshotHandle,
    pub metrics: Metrics,
    /// Set once listeners serve and the first snapshot is in; cleared when
    /// shutting down so load balancers drain us first.
    pub ready: Arc<AtomicBool>,
    /// The announcers: pools, L2 owners, live replicas and BGP sessions
    /// (docs/announce.md); `None`: off.
    pub announce: Option<Arc<dyn StatusSection>>,
}

/// A part of `/status` and `/metrics` that a loop keeps (the
/// announcement's pools, owners and sessions): the plane shows it without
/// knowing the loop.
pub trait StatusSection: Send + Sync + std::fmt::Debug {
    /// Its objects under `/status`, each with its key.
    fn json(&self) -> Vec<(&'static str, serde_json::Value)>;
    /// Its series, Prometheus text format.
    fn render_prometheus(&self) -> String;
}

/// Serves the admin API on `listener` until `shutdown` turns true.
pub async fn run(listener: TcpListener, state: AdminState, mut shutdown: watch::Receiver<bool>) {
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => if *shutdown.borrow() { return } else { continue },
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(&state, req)) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn handle(state: &AdminState, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
    }
    match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => {
            if state.ready.load(Ordering::Acquire) {
                text(StatusCode::OK, "ready\n")
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
            }
        }
        "/metrics" => {
            let mut body = state.metrics.render();
            if let Some(announce) = &state.announce {
                body.push_str(&announce.render_prometheus());
            }
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        "/status" => {
            let snapshot = state.snapshots.load();
            // Through a `Value` only with announcement on: that one sorts
            // the keys.
            let body = match &state.announce {
                None => serde_json::to_vec_pretty(&snapshot.report),
                Some(announce) => serde_json::to_value(&snapshot.report).and_then(|mut report| {
                    if let Some(object) = report.as_object_mut() {
                        for (key, value) in announce.json() {
                            object.insert(key.into(), value);
                        }
                    }
                    serde_json::to_vec_pretty(&report)
                }),
            };
            match body {
                Ok(body) => {
                    let mut r = Response::new(Full::new(Bytes::from(body)));
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        header::HeaderValue::from_static("application/json"),
                    );
                    r
                }
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
            }
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
