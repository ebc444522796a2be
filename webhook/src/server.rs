//! The HTTPS server: hyper (HTTP/1.1 and HTTP/2 by ALPN) over tokio-rustls.
//!
//! - `POST /validate`: an `AdmissionReview` in, one out (always 200 with a
//!   review when a body was read; the review says allowed or not).
//! - `GET /healthz`: the process serves. `GET /readyz`: 200 once the
//!   tenant state is loaded, 503 before and while shutting down.
//! - `GET /metrics`: Prometheus text.
//!
//! Bodies are bounded ([`MAX_BODY`]) and must arrive within
//! [`REQUEST_TIMEOUT`]; handshakes too. On shutdown the listener closes,
//! open connections finish their requests (up to the grace period), and
//! [`run`] returns.

use std::convert::Infallible;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::Error;
use crate::certs::CertReloader;
use crate::metrics::Metrics;
use crate::pool::{PoolConfig, ReviewPool};
use crate::review::Validator;
use crate::source::{ManifestSource, StateHandle};
use crate::state::PolicyConfig;
use teapot_source::kube::{KubeConfig, KubeSource};

/// Largest request body: an AdmissionReview carries the object and its
/// old version, each at most the API server's 1.5 MiB object bound.
pub const MAX_BODY: usize = 8 * 1024 * 1024;
/// Time for a TLS handshake, and for a request's headers and body.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything [`run`] needs.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// PEM certificate chain and key served to the API server.
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Manifests directory with the Tenants and the objects that hold
    /// hosts and addresses.
    pub manifests: PathBuf,
    pub policy: PolicyConfig,
    /// Watch the Kubernetes API instead of `manifests`.
    pub kube: Option<KubeConfig>,
    /// How often the certificate files are re-read.
    pub cert_reload_interval: Duration,
    /// Safety-net poll of the manifests directory.
    pub state_poll_interval: Duration,
    /// Time open connections get to finish after shutdown.
    pub grace_period: Duration,
    /// Concurrent connections; more wait in the accept queue.
    pub max_connections: usize,
    /// Where reviews are judged ([`crate::pool`]).
    pub pool: PoolConfig,
}

impl WebhookConfig {
    /// A configuration with the default intervals and bounds.
    pub fn new(
        cert_file: PathBuf,
        key_file: PathBuf,
        manifests: PathBuf,
        policy: PolicyConfig,
    ) -> WebhookConfig {
        WebhookConfig {
            cert_file,
            key_file,
            manifests,
            policy,
            kube: None,
            cert_reload_interval: Duration::from_secs(1),
            state_poll_interval: Duration::from_secs(2),
            grace_period: Duration::from_secs(10),
            max_connections: 1024,
            pool: PoolConfig::default(),
        }
    }
}

#[derive(Debug)]
struct App {
    validator: Arc<Validator>,
    pool: ReviewPool,
    state: StateHandle,
    metrics: Metrics,
    draining: AtomicBool,
}

/// Serves the webhook on `listener` until `shutdown` resolves. Fails at
/// start when the certificate files are unusable; a manifests directory
/// that cannot be read only keeps the webhook refusing (and `/readyz`
/// at 503) until it can.
pub async fn run(
    config: WebhookConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let metrics = Metrics::new()?;
    let certs = CertReloader::load(&config.cert_file, &config.key_file)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(certs.clone());
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(tls));

    let state: StateHandle = Arc::new(ArcSwapOption::empty());
    let (stop_tx, stop_rx) = watch::channel(false);
    match &config.kube {
        Some(kube) => {
            tokio::spawn(crate::source::watch_kube(
                KubeSource::start(kube),
                state.clone(),
                metrics.clone(),
                stop_rx.clone(),
            ));
        }
        None => {
            let source = Arc::new(ManifestSource::new(
                config.manifests.clone(),
                state.clone(),
                metrics.clone(),
            ));
            let first = source.clone();
            if tokio::task::spawn_blocking(move || first.reload())
                .await
                .is_err()
            {
                tracing::error!("first state load failed; retrying in the background");
            }
            tokio::spawn(source.watch(config.state_poll_interval, stop_rx.clone()));
        }
    }
    tokio::spawn(certs.clone().watch(
        config.cert_reload_interval,
        metrics.clone(),
        stop_rx.clone(),
    ));

    let app = Arc::new(App {
        validator: Arc::new(Validator::new(config.policy.clone())),
        pool: ReviewPool::new(config.pool),
        state,
        metrics,
        draining: AtomicBool::new(false),
    });
    let limit = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let mut conns = JoinSet::new();
    tracing::info!(addr = ?listener.local_addr().ok(), domain = %config.policy.domain, "webhook serving");
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            p = limit.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (tcp, _) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        while conns.try_join_next().is_some() {}
        let (acceptor, app, stop) = (acceptor.clone(), app.clone(), stop_rx.clone());
        conns.spawn(async move {
            serve(tcp, acceptor, app, stop).await;
            drop(permit);
        });
    }
    tracing::info!(connections = conns.len(), "shutting down");
    app.draining.store(true, Ordering::Release);
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(config.grace_period, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = conns.len(),
            "grace period over; closing the rest"
        );
        conns.abort_all();
    }
    Ok(())
}

async fn serve(
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    app: Arc<App>,
    mut stop: watch::Receiver<bool>,
) {
    let _ = tcp.set_nodelay(true);
    let peer = tcp.peer_addr().ok();
    let tls = match tokio::time::timeout(REQUEST_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(?peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(?peer, "TLS handshake timed out");
            return;
        }
    };
    let service = service_fn(move |req| {
        let app = app.clone();
        async move { Ok::<_, Infallible>(handle(&app, req).await) }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_TIMEOUT)
        .max_buf_size(64 * 1024);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(64)
        .max_header_list_size(64 * 1024);
    let conn = builder.serve_connection(TokioIo::new(tls), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(?peer, error = %e, "connection ended with an error");
            }
            return;
        }
        _ = stop.wait_for(|s| *s) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

async fn handle(app: &App, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let get = req.method() == Method::GET || req.method() == Method::HEAD;
    match req.uri().path() {
        "/validate" if req.method() == Method::POST => validate(app, req).await,
        "/validate" => text(StatusCode::METHOD_NOT_ALLOWED, "POST an AdmissionReview\n"),
        "/healthz" if get => text(StatusCode::OK, "ok\n"),
        "/readyz" if get => {
            let ready = app.state.load().is_some() && !app.draining.load(Ordering::Acquire);
            if ready {
                text(StatusCode::OK, "ready\n")
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
            }
        }
        "/metrics" if get => {
            let mut r = Response::new(Full::new(Bytes::from(app.metrics.render())));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        "/healthz" | "/readyz" | "/metrics" => text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n"),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

async fn validate(app: &App, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let body = Limited::new(req.into_body(), MAX_BODY);
    let bytes = match tokio::time::timeout(REQUEST_TIMEOUT, body.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            app.metrics.admitted("invalid", false, 0.0);
            return text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n");
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "cannot read request body");
            return text(StatusCode::BAD_REQUEST, "cannot read the request body\n");
        }
        Err(_) => return text(StatusCode::REQUEST_TIMEOUT, "request body too slow\n"),
    };
    let start = Instant::now();
    let state = app.state.load_full();
    let reviewed = match Validator::read(&bytes) {
        Err(refused) => refused,
        Ok(request) => {
            // The lane: the namespace's Tenant, or the operator's for
            // everything else (cluster-scoped objects, other namespaces).
            let lane = request
                .namespace()
                .and_then(|ns| state.as_deref()?.tenant_for_namespace(ns))
                .map_or_else(String::new, |t| t.spec.cluster.clone());
            let validator = app.validator.clone();
            let (ran, busy) = (state.clone(), request.busy_template());
            match app
                .pool
                .run(&lane, move || validator.judge(ran.as_deref(), request))
                .await
            {
                Ok(reviewed) => reviewed,
                Err(why) => {
                    app.metrics.busy.with_label_values(&[why.label()]).inc();
                    tracing::warn!(
                        tenant = %lane,
                        reason = why.label(),
                        "admission review refused: no worker within the wait"
                    );
                    busy.refuse(match why {
                        crate::pool::Busy::Tenant => format!(
                            "the webhook is judging as many of tenant {lane:?}'s reviews as it may at once ({}) and this one waited {:?}; retry",
                            app.pool.config().share,
                            app.pool.config().wait
                        ),
                        crate::pool::Busy::Pool => format!(
                            "every one of the webhook's {} review workers stayed busy for {:?}; retry",
                            app.pool.config().workers,
                            app.pool.config().wait
                        ),
                    })
                }
            }
        }
    };
    let elapsed = start.elapsed();
    app.metrics
        .admitted(reviewed.kind, reviewed.allowed, elapsed.as_secs_f64());
    tracing::info!(
        uid = ?reviewed.uid,
        kind = reviewed.kind,
        object = ?reviewed.object,
        allowed = reviewed.allowed,
        violations = reviewed.violations,
        micros = elapsed.as_micros() as u64,
        "admission review"
    );
    let mut r = Response::new(Full::new(Bytes::from(reviewed.body)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
