//! An authentication service for the external authentication tests (an
//! Ingress's `auth-url`, a route's ExternalAuth filter): a small HTTP/1.1
//! server answering each sub-request by its path, holding those of one
//! path until released, and keeping the head of every sub-request.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::watch;

use super::{service, synced_slice};

/// The answer to a sub-request for a path: its status and fields.
pub type Answer = (&'static str, u16, &'static [(&'static str, &'static str)]);

pub struct AuthService {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<http::request::Parts>>>,
    /// Sub-requests for the held path that have arrived.
    pub held: Arc<AtomicUsize>,
    /// `true` answers the held ones: 200 with `X-User: held`.
    pub release: watch::Sender<bool>,
    _task: tokio::task::JoinHandle<()>,
}

impl AuthService {
    /// Listens on `ip`; a path in `answers` gets its answer, `hold` waits
    /// for [`AuthService::release`], any other path 404.
    pub async fn start(ip: IpAddr, answers: &'static [Answer], hold: &'static str) -> AuthService {
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0))
            .await
            .expect("auth service binds");
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let held = Arc::new(AtomicUsize::new(0));
        let (release, released) = watch::channel(false);
        let (seen2, held2) = (seen.clone(), held.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (seen, held, released) = (seen2.clone(), held2.clone(), released.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (seen, held, mut released) =
                            (seen.clone(), held.clone(), released.clone());
                        async move {
                            let (parts, _) = req.into_parts();
                            let path = parts.uri.path().to_string();
                            seen.lock().unwrap().push(parts);
                            let mut answer = hyper::Response::builder();
                            if path == hold {
                                held.fetch_add(1, Ordering::SeqCst);
                                let _ = released.wait_for(|r| *r).await;
                                answer = answer.status(200).header("x-user", "held");
                            } else if let Some((_, status, fields)) =
                                answers.iter().find(|(p, ..)| *p == path)
                            {
                                answer = answer.status(*status);
                                for (name, value) in fields.iter() {
                                    answer = answer.header(*name, *value);
                                }
                            } else {
                                answer = answer.status(404);
                            }
                            Ok::<_, Infallible>(answer.body(Full::new(Bytes::new())).unwrap())
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        AuthService {
            addr,
            seen,
            held,
            release,
            _task: task,
        }
    }

    /// The head of the last sub-request.
    pub fn last(&self) -> http::request::Parts {
        self.seen
            .lock()
            .unwrap()
            .last()
            .expect("a sub-request")
            .clone()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// The Service `auth` (port 80) in `namespace` whose one endpoint is
    /// this server, its slice labelled as the agent's sync labels those it
    /// writes in a tenant namespace.
    pub fn service(&self, namespace: &str) -> Vec<Value> {
        let slice = synced_slice(namespace, "auth", self.addr);
        vec![service(namespace, "auth", &[(Some("http"), 80)]), slice]
    }
}
