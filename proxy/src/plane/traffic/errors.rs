//! Custom error pages (`custom-http-errors` with `default-backend`,
//! ingress-nginx's `error_page` to its `@custom_` locations): when the
//! backend answers a listed status (or teapot itself would answer a
//! listed 502 or 504, or 503 for a route without endpoints), the client
//! gets what the route's `default-backend` Service answers instead, as
//! ingress-nginx passes it on unchanged: its status, its fields, its body.
//!
//! The page request is `GET /` (`HEAD` for a HEAD request: ingress-nginx
//! rewrites the target to `/`) with ingress-nginx's fields: `X-Code`,
//! `X-Format` (the client's `Accept`), `X-Original-URI`, `X-Namespace`,
//! `X-Ingress-Name`, `X-Service-Name`, `X-Service-Port`, `X-Request-ID`,
//! `X-Forwarded-For`, the client's `Host`, and the client's other fields
//! as the authentication sub-request carries them (ingress-nginx's
//! `@custom_` location passes the request's fields on: every one but
//! those it sets). It never carries the client's body, which went to the
//! route's backend.
//!
//! It goes through the same bounded client as `auth-url` (crate::plane::
//! traffic::auth): the owner's bound on sub-requests in flight, the
//! operator's timeout for the whole exchange (connect to the last body
//! byte), a body of at most [`MAX_PAGE_BYTES`]. When the page cannot be
//! had (no endpoint, refused, timed out, the bound full, too long), the
//! client gets the status it would have got, with teapot's short body:
//! never a hang, never another Service than the Ingress's own namespace's.
//!
//! A page is asked for only once the request passed its tenant's gate
//! (crate::live::fairness): a forwarded request holds its slot already,
//! and a route without endpoints enters the gate before its page is
//! fetched (crate::plane::pipeline), so a tenant over its rate or its
//! in-flight bound gets its 429 or 503 and the error backend is not asked.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request};
use http_body_util::Empty;

use super::auth::{self, AuthLimits, Outcome};
use crate::compile::traffic::CustomErrors;
use crate::compile::upstream::Upstream;

/// The fields the page request sets itself (besides `Host`,
/// `X-Forwarded-For` and `X-Request-ID`, which no sub-request takes from
/// the client): a client's own never reach the error backend.
const PAGE_OWN_FIELDS: &[&str] = &[
    "x-code",
    "x-format",
    "x-original-uri",
    "x-namespace",
    "x-ingress-name",
    "x-service-name",
    "x-service-port",
];

/// Longest error page relayed; a longer one is refused and the client
/// gets teapot's short body. The whole page is held from its fetch until
/// the client has read it (a stalled HTTP/2 stream holds it up to the
/// send timeout, crate::plane::h2_stream), once per request in flight: at
/// 1 MiB, 300 stalled streams held 312 MiB. A tenant whose error backend
/// is hostile picks the page's size, so the bound is what a stalled
/// stream costs at worst: 16 KiB keeps 300 such streams near 10 MiB
/// (benches/src/bin/error-page-stall.rs), and is still ten times what
/// error pages are (nginx's own are under 1 KiB, ingress-nginx's
/// custom-error-pages example serves a few hundred bytes).
pub const MAX_PAGE_BYTES: usize = 16 * 1024;

/// What a request whose route has custom error pages tells the error
/// backend, owned: the HTTP/1 engine asks after the request's head is
/// gone. Made only for such routes.
#[derive(Debug)]
pub struct ErrorPages {
    pub errors: Arc<CustomErrors>,
    /// The backend the request went to (the canary's, when chosen):
    /// `X-Service-Name` and `X-Service-Port`.
    pub backend: Arc<Upstream>,
    /// The request is a HEAD: so is the page request.
    pub head: bool,
    /// `X-Original-URI`: the target as the client sent it.
    pub original_uri: Box<str>,
    /// The client's `Host` (or `:authority`).
    pub host: Box<str>,
    /// The `X-Request-ID` the backend got (set by the engine).
    pub request_id: Box<str>,
    /// The address teapot forwards as `X-Forwarded-For`.
    pub client: Option<IpAddr>,
    /// The client's fields the page request carries
    /// (`auth::client_fields`; its `Accept` among them).
    pub fields: Vec<(HeaderName, HeaderValue)>,
    /// The operator's bounds on sub-requests (`auth-url`'s).
    pub limits: AuthLimits,
}

/// The answer that replaces a response: the error backend's, or teapot's
/// short one when the page could not be had.
#[derive(Debug)]
pub struct Page {
    pub status: u16,
    /// For the access log: [`PAGE`] or [`FALLBACK`].
    pub reason: &'static str,
    /// The error backend's end-to-end fields (no framing or connection
    /// field: the engines frame the body themselves).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
}

/// The access log's reason for an answer from the error backend.
pub const PAGE: &str = "custom_error_page";
/// ... and for teapot's own when the page could not be had.
pub const FALLBACK: &str = "custom_error_unavailable";

impl ErrorPages {
    /// What `request` tells the error backend of `errors`, asked within
    /// `limits`.
    pub fn new(
        errors: Arc<CustomErrors>,
        backend: Arc<Upstream>,
        request: &super::auth::Original<'_>,
        limits: AuthLimits,
    ) -> ErrorPages {
        let fields = auth::client_fields(request.headers, PAGE_OWN_FIELDS);
        ErrorPages {
            errors,
            backend,
            head: request.method == "HEAD",
            original_uri: request.target.into(),
            host: request.authority.into(),
            request_id: request.request_id.into(),
            client: request.client,
            fields,
            limits,
        }
    }

    /// Whether a response of `status` is replaced.
    pub fn replaces(&self, status: u16) -> bool {
        self.errors.replaces(status)
    }

    /// The answer in place of a response of `code`.
    pub async fn page(&self, code: u16) -> Page {
        let limits = self.limits;
        let fetched = match self.errors.gate.enter(limits.concurrency) {
            None => Err(Outcome::Busy),
            Some(_pass) => tokio::time::timeout(limits.timeout, self.fetch(code))
                .await
                .unwrap_or(Err(Outcome::Timeout)),
        };
        match fetched {
            Ok(page) => page,
            Err(outcome) => {
                tracing::debug!(
                    backend = %self.errors.upstream.name,
                    outcome = outcome.label(),
                    code,
                    "custom error page not fetched"
                );
                fallback(code)
            }
        }
    }

    async fn fetch(&self, code: u16) -> Result<Page, Outcome> {
        let request = self.request(code).map_err(|_| Outcome::Failed)?;
        let (head, body) = auth::send(
            &self.errors.upstream,
            request,
            MAX_PAGE_BYTES,
            self.limits.timeout,
        )
        .await?;
        let headers = head
            .headers
            .iter()
            .filter(|(name, _)| !is_framing(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        Ok(Page {
            status: head.status.as_u16(),
            reason: PAGE,
            headers,
            // Its own allocation of its own length: a page read in one
            // piece shares the connection's read buffer, which is larger
            // and would be held with it for as long as the client reads.
            body: Bytes::copy_from_slice(&body),
        })
    }

    /// The page request for `code`, as ingress-nginx's `@custom_`
    /// location sends it.
    fn request(&self, code: u16) -> Result<Request<Empty<Bytes>>, http::Error> {
        let (service, port) = self.service();
        let method = if self.head { "HEAD" } else { "GET" };
        let mut request = Request::builder()
            .method(method)
            .uri("/")
            .header(http::header::HOST, &*self.host);
        for (name, value) in &self.fields {
            request = request.header(name, value);
        }
        let accept = self
            .fields
            .iter()
            .find(|(name, _)| name == http::header::ACCEPT)
            .map_or(HeaderValue::from_static(""), |(_, v)| v.clone());
        request = request
            .header("x-code", code)
            .header("x-format", accept)
            .header("x-original-uri", &*self.original_uri)
            .header("x-namespace", &*self.errors.namespace)
            .header("x-ingress-name", &*self.errors.ingress)
            .header("x-service-name", service)
            .header("x-service-port", port)
            .header("x-request-id", &*self.request_id);
        if let Some(client) = self.client {
            request = request.header("x-forwarded-for", client.to_canonical().to_string());
        }
        request.body(Empty::new())
    }

    /// `X-Service-Name` and `X-Service-Port` from the backend's
    /// `namespace/service:port`; for a tenant, the Service's name in its
    /// own cluster when the mirror's name is that of one of its Services.
    fn service(&self) -> (String, String) {
        let name = &self.backend.name;
        let name = name.split_once('/').map_or(name.as_str(), |(_, n)| n);
        let (service, port) = name.rsplit_once(':').unwrap_or((name, ""));
        let theirs = &*self.errors.mirrored_from;
        let own = (!theirs.is_empty())
            .then(|| service.strip_prefix(theirs)?.strip_prefix('-'))
            .flatten()
            .and_then(|rest| rest.get(..rest.len().checked_sub(6)?))
            .filter(|s| teapot_api::hostname::mirrored_service_name(theirs, s) == service);
        (own.unwrap_or(service).to_string(), port.to_string())
    }
}

/// teapot's own answer when the page could not be had: the status the
/// client would have got, a short body.
pub fn fallback(code: u16) -> Page {
    let phrase = http::StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("error");
    Page {
        status: code,
        reason: FALLBACK,
        headers: vec![(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        body: Bytes::from(format!("{code} {phrase}\n")),
    }
}

/// Fields the engines write themselves for the body they send.
fn is_framing(name: &HeaderName) -> bool {
    use http::header;
    [
        header::CONNECTION,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        header::SERVER,
        header::DATE,
    ]
    .contains(name)
        || name == "keep-alive"
        || name == "proxy-connection"
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;
    use crate::live::endpoints::EndpointRegistry;
    use crate::live::rate_table::AuthGate;

    fn errors(upstream: Upstream, mirrored_from: &str) -> Arc<CustomErrors> {
        Arc::new(CustomErrors {
            codes: vec![404, 503].into_boxed_slice(),
            upstream: Arc::new(upstream),
            namespace: Arc::from("shop"),
            ingress: Arc::from("web"),
            mirrored_from: Arc::from(mirrored_from),
            gate: Arc::new(AuthGate::default()),
            owner: Arc::from("acme"),
        })
    }

    fn pages(errors: Arc<CustomErrors>, backend: &str) -> ErrorPages {
        let fields: &[(&str, &str)] = &[
            ("accept", "application/json"),
            ("cookie", "a=1"),
            ("x-tenant-key", "k-1"),
            ("x-code", "200"),
            ("x-forwarded-for", "6.6.6.6"),
            ("connection", "x-hop"),
            ("x-hop", "1"),
        ];
        let original = auth::Original {
            method: "GET",
            authority: "app.example",
            target: "/missing?x=1",
            tls: false,
            client: Some("::ffff:192.0.2.7".parse().unwrap()),
            request_id: "req-1",
            headers: &fields,
        };
        let backend = Arc::new(Upstream::new(backend.into(), Vec::new(), None));
        ErrorPages::new(errors, backend, &original, AuthLimits::default())
    }

    #[test]
    fn the_page_request_carries_ingress_nginx_fields() {
        let none = Upstream::new("errors".into(), Vec::new(), None);
        let mut p = pages(errors(none, ""), "ops/web:8080");
        assert!(p.replaces(404) && p.replaces(503) && !p.replaces(500));
        p.head = true;
        assert_eq!(p.request(404).unwrap().method(), "HEAD");
        p.head = false;
        let r = p.request(404).unwrap();
        assert_eq!(
            (r.method().as_str(), r.uri().to_string()),
            ("GET", "/".into())
        );
        let get = |n: &str| r.headers().get(n).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(get("x-code").as_deref(), Some("404"));
        assert_eq!(get("x-format").as_deref(), Some("application/json"));
        assert_eq!(get("x-original-uri").as_deref(), Some("/missing?x=1"));
        assert_eq!(get("x-namespace").as_deref(), Some("shop"));
        assert_eq!(get("x-ingress-name").as_deref(), Some("web"));
        assert_eq!(get("x-service-name").as_deref(), Some("web"));
        assert_eq!(get("x-service-port").as_deref(), Some("8080"));
        assert_eq!(get("x-request-id").as_deref(), Some("req-1"));
        assert_eq!(get("x-forwarded-for").as_deref(), Some("192.0.2.7"));
        assert_eq!(get("host").as_deref(), Some("app.example"));
        assert_eq!(get("cookie").as_deref(), Some("a=1"));
        // Every client field, as ingress-nginx's `@custom_` location, but
        // never in place of or beside the page request's own.
        assert_eq!(get("x-tenant-key").as_deref(), Some("k-1"));
        for own in ["x-code", "x-forwarded-for"] {
            assert_eq!(r.headers().get_all(own).iter().count(), 1, "{own}");
        }
        assert_eq!(get("x-hop"), None);
    }

    /// A tenant's backend is the agent's mirror: the error backend is told
    /// the Service's name in the tenant's cluster.
    #[test]
    fn a_tenants_service_is_named_as_in_its_cluster() {
        let none = Upstream::new("errors".into(), Vec::new(), None);
        let mirror = teapot_api::hostname::mirrored_service_name("shop", "web");
        let p = pages(errors(none, "shop"), &format!("tenant-acme/{mirror}:80"));
        assert_eq!(p.service(), ("web".to_string(), "80".to_string()));
        let none = Upstream::new("errors".into(), Vec::new(), None);
        let p = pages(errors(none, "shop"), "tenant-acme/shop-other:80");
        assert_eq!(p.service().0, "shop-other");
    }

    /// No endpoint, a refused connection, a full bound: the status the
    /// client would have got, teapot's short body.
    #[tokio::test]
    async fn a_page_that_cannot_be_had_keeps_the_status() {
        let none = Upstream::new("errors".into(), Vec::new(), Some("none".into()));
        let page = pages(errors(none, ""), "ops/web:80").page(503).await;
        assert_eq!((page.status, page.reason), (503, FALLBACK));
        assert_eq!(page.body, "503 Service Unavailable\n");
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = closed.local_addr().unwrap();
        drop(closed);
        let registry = EndpointRegistry::default();
        let dead = Upstream::new("errors".into(), vec![registry.endpoint(addr)], None);
        let mut p = pages(errors(dead, ""), "ops/web:80");
        let page = p.page(404).await;
        assert_eq!((page.status, page.reason), (404, FALLBACK));
        let _held = p.errors.gate.enter(1).unwrap();
        p.limits.concurrency = 1;
        assert_eq!(p.page(404).await.reason, FALLBACK);
    }

    /// An error backend on a thread that answers one request with
    /// `answer`, then closes the connection (`close`) or keeps it open
    /// until the client closes it (a body it announced but never sends
    /// stalls the reader). The thread returns the request head it read.
    fn backend_answering_once(
        answer: Vec<u8>,
        close: bool,
    ) -> (std::net::SocketAddr, std::thread::JoinHandle<String>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            let _ = s.write_all(&answer);
            // Until teapot hangs up.
            while !close && matches!(s.read(&mut buf), Ok(n) if n > 0) {}
            String::from_utf8(got).unwrap()
        });
        (addr, server)
    }

    /// [`backend_answering_once`], kept open.
    fn answering_once(answer: Vec<u8>) -> std::net::SocketAddr {
        backend_answering_once(answer, false).0
    }

    /// A page longer than [`MAX_PAGE_BYTES`] is never held: the client
    /// gets teapot's short body, whether the page says its length (then
    /// nothing of it is read) or not, and one at the bound is relayed.
    #[tokio::test]
    async fn a_page_over_the_bound_is_refused() {
        let registry = EndpointRegistry::default();
        let page_of = async |answer: Vec<u8>| {
            let addr = answering_once(answer);
            let up = Upstream::new("errors".into(), vec![registry.endpoint(addr)], None);
            pages(errors(up, ""), "ops/web:80").page(503).await
        };
        let long = MAX_PAGE_BYTES + 1;
        let mut with_length =
            format!("HTTP/1.1 200 OK\r\ncontent-length: {long}\r\n\r\n").into_bytes();
        with_length.resize(with_length.len() + long, b'x');
        let page = page_of(with_length).await;
        assert_eq!((page.status, page.reason), (503, FALLBACK));
        let mut chunked =
            format!("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{long:x}\r\n")
                .into_bytes();
        chunked.resize(chunked.len() + long, b'x');
        chunked.extend_from_slice(b"\r\n0\r\n\r\n");
        let page = page_of(chunked).await;
        assert_eq!((page.status, page.reason), (503, FALLBACK));
        // Announced and never sent: refused at the head, not after the
        // operator's timeout.
        let started = std::time::Instant::now();
        let page = page_of(b"HTTP/1.1 200 OK\r\ncontent-length: 10485760\r\n\r\n".to_vec()).await;
        assert_eq!((page.status, page.reason), (503, FALLBACK));
        assert!(
            started.elapsed() < AuthLimits::default().timeout / 2,
            "{:?}",
            started.elapsed()
        );
        let mut at_bound =
            format!("HTTP/1.1 200 OK\r\ncontent-length: {MAX_PAGE_BYTES}\r\n\r\n").into_bytes();
        at_bound.resize(at_bound.len() + MAX_PAGE_BYTES, b'x');
        let page = page_of(at_bound).await;
        assert_eq!((page.reason, page.body.len()), (PAGE, MAX_PAGE_BYTES));
    }

    /// An answer's head gets the bounds a backend's gets from the HTTP/1
    /// engine (64 KiB): reading stops there and the page falls back.
    #[tokio::test]
    async fn a_head_over_the_engines_bound_is_refused() {
        let registry = EndpointRegistry::default();
        let field = "v".repeat(teapot_h1::scan::MAX_RESPONSE_HEADER_BYTES);
        let answer =
            format!("HTTP/1.1 404 Not Found\r\nx-big: {field}\r\ncontent-length: 1\r\n\r\nx");
        let addr = answering_once(answer.into_bytes());
        let up = Upstream::new("errors".into(), vec![registry.endpoint(addr)], None);
        let page = pages(errors(up, ""), "ops/web:80").page(503).await;
        assert_eq!((page.status, page.reason), (503, FALLBACK));
    }

    /// An error backend that closes its connection after the page (as
    /// with `Connection: close`) is relayed like any other.
    #[tokio::test]
    async fn a_page_from_a_closing_backend_is_relayed() {
        let registry = EndpointRegistry::default();
        let (addr, _) = backend_answering_once(
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 5\r\nconnection: close\r\n\r\n<h1>x"
                .to_vec(),
            true,
        );
        let up = Upstream::new("errors".into(), vec![registry.endpoint(addr)], None);
        let page = pages(errors(up, ""), "ops/web:80").page(503).await;
        assert_eq!((page.status, page.reason), (404, PAGE));
        assert_eq!(page.body, "<h1>x");
    }

    /// The error backend's answer goes to the client as it is: status,
    /// fields, body; its framing fields are the engine's to write.
    #[tokio::test]
    async fn the_error_backends_answer_is_relayed() {
        let (addr, server) = backend_answering_once(
            b"HTTP/1.1 404 Not Found\r\ncontent-type: text/html\r\ntransfer-encoding: chunked\r\nx-page: yes\r\n\r\n5\r\n<h1>x\r\n0\r\n\r\n".to_vec(),
            true,
        );
        let registry = EndpointRegistry::default();
        let up = Upstream::new("errors".into(), vec![registry.endpoint(addr)], None);
        let page = pages(errors(up, ""), "ops/web:80").page(503).await;
        let seen = server.join().unwrap().to_ascii_lowercase();
        assert!(seen.starts_with("get / http/1.1\r\n"), "{seen}");
        assert!(seen.contains("x-code: 503\r\n"), "{seen}");
        assert_eq!((page.status, page.reason), (404, PAGE));
        assert_eq!(page.body, "<h1>x");
        let names: Vec<&str> = page.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["content-type", "x-page"]);
    }
}
