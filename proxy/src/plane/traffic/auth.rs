//! External authentication (`auth-url`, ingress-nginx's `auth_request`):
//! before a request is forwarded, teapot asks the route's authentication
//! service with a sub-request of its own and acts on the answer, as
//! ingress-nginx does:
//!
//! - 2xx: the request is forwarded, carrying the `auth-response-headers`
//!   of the answer (a listed field the answer lacks is removed from the
//!   request, so a client cannot supply it);
//! - 401: a 302 to `auth-signin` with the original URL in its
//!   `auth-signin-redirect-param` (`rd`), or without one the 401 with the
//!   answer's `WWW-Authenticate`;
//! - 403: 403;
//! - anything else, a timeout or a connection failure: 500.
//!
//! The sub-request carries the client's fields as ingress-nginx's
//! subrequest inherits them (`client_fields`), with teapot's own
//! `X-Original-URL`, `X-Original-Method`, `X-Forwarded-For`, `-Host`,
//! `-Proto`, `X-Real-IP`, `X-Auth-Request-Redirect` and `X-Request-ID` in
//! place of any the client sent.
//!
//! The sub-request is HTTP/1.1 without a body over a connection of its
//! own (closed after the answer's head), awaited by the request's own
//! task: a slow authentication service holds only the requests that wait
//! for it. Each owner (a tenant, or the operator namespaces together) has
//! at most `bound` sub-requests in flight per replica
//! ([`crate::live::rate_table::AuthGate`]); past that a request gets
//! 503 at once, never a queue. The whole exchange, connect to the
//! answer's head, is bounded by the operator's timeout.

use std::net::IpAddr;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::Empty;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::TrafficAnswer;
use crate::compile::gateway::RequestHeaders;
use crate::compile::traffic::{ExternalAuth, GatewayAuthTerms};
use crate::compile::upstream::{Tried, Upstream};
use crate::plane::backend_answer;
use crate::plane::forwarding::{self, FORWARDING};
use crate::plane::trace;

/// The operator's bounds on external authentication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthLimits {
    /// Connect to the answer's head, per sub-request.
    pub timeout: Duration,
    /// Sub-requests in flight per tenant (and for the operator namespaces
    /// together) per replica.
    pub concurrency: u32,
}

impl Default for AuthLimits {
    fn default() -> Self {
        AuthLimits {
            timeout: Duration::from_secs(5),
            concurrency: 64,
        }
    }
}

/// The fields the sub-request sets itself (besides `Host`, teapot's
/// forwarding fields and the request ID): the client's are never carried,
/// so a client cannot speak for teapot to the authentication service.
const AUTH_OWN_FIELDS: &[&str] = &[
    "x-original-url",
    "x-original-method",
    "x-auth-request-redirect",
];

/// The client's fields a sub-request (`auth-url`'s, a custom error page's)
/// carries, as ingress-nginx's subrequests inherit the request's fields:
/// every one except what a bodiless request on a connection of its own
/// cannot carry (connection-specific fields, those the client's
/// `Connection` lists, body framing, `Expect`, HTTP/2 pseudo-fields),
/// `Host`, and the fields teapot vouches for on a forwarded request (the
/// forwarding fields and the request ID, [`crate::plane::forwarding`]) or
/// the sub-request sets itself (`own`): of those the sub-request carries
/// teapot's value or none, never the client's. Cookie crumbs (HTTP/2
/// splits `Cookie`) are joined into one field, as RFC 9113, 8.2.3 asks of
/// an HTTP/1.1 hop.
///
/// Walked only for a route with `auth-url` or custom error pages; as
/// large as the client's head, which the edge bounds (431 beyond), and
/// made in one pass over it.
pub(super) fn client_fields(
    headers: &dyn RequestHeaders,
    own: &[&str],
) -> Vec<(HeaderName, HeaderValue)> {
    let mut fields: Vec<(HeaderName, HeaderValue)> = Vec::new();
    let mut listed: Vec<HeaderName> = Vec::new();
    headers.each(&mut |name, value| {
        if name.eq_ignore_ascii_case("connection") {
            let tokens = value.split(|&b| b == b',');
            listed.extend(tokens.filter_map(|t| HeaderName::from_bytes(t.trim_ascii()).ok()));
            return;
        }
        if !is_carried(name, own) {
            return;
        }
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) else {
            return;
        };
        if name == http::header::COOKIE {
            return;
        }
        fields.push((name, value));
    });
    if let Some(cookie) = joined_cookie(headers) {
        fields.push((http::header::COOKIE, cookie));
    }
    if !listed.is_empty() {
        fields.retain(|(name, _)| !listed.contains(name));
    }
    fields
}

/// The client's cookies as the one `Cookie` field an HTTP/1.1 hop carries
/// (HTTP/2 splits it, RFC 9113, 8.2.3), joined where affinity joins them.
fn joined_cookie(headers: &dyn RequestHeaders) -> Option<HeaderValue> {
    super::affinity::cookies(headers).and_then(|c| HeaderValue::from_bytes(&c).ok())
}

/// Whether a client's field called `name` goes into a sub-request that
/// sets `own` itself (see [`client_fields`]).
fn is_carried(name: &str, own: &[&str]) -> bool {
    let is = |other: &str| other.eq_ignore_ascii_case(name);
    !(name.starts_with(':')
        || teapot_h1::is_hop_by_hop(name.as_bytes())
        || is("host")
        || is("expect")
        || is(trace::REQUEST_ID)
        || FORWARDING.iter().any(|f| is(f))
        || own.iter().any(|f| is(f))
        // `X_Original_URL`: teapot's own field to a service that folds
        // `_` into `-` (crate::plane::forwarding::is_lookalike).
        || forwarding::is_lookalike(name))
}

/// What the sub-request tells the authentication service of the request.
pub struct Original<'r> {
    pub method: &'r str,
    /// The `Host` (or `:authority`) as the client sent it.
    pub authority: &'r str,
    /// The request target as the client sent it: path and query.
    pub target: &'r str,
    pub tls: bool,
    /// The address teapot forwards as `X-Forwarded-For`.
    pub client: Option<IpAddr>,
    pub request_id: &'r str,
    pub headers: &'r (dyn RequestHeaders + Sync),
}

impl Original<'_> {
    fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }

    /// `$scheme://$http_host$request_uri`.
    fn url(&self) -> String {
        format!("{}://{}{}", self.scheme(), self.authority, self.target)
    }
}

/// How a sub-request ended, for the `auth_requests_total` outcome label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx: forwarded.
    Allowed,
    /// 401.
    Unauthorized,
    /// 403.
    Forbidden,
    /// Another status.
    Failed,
    /// No answer's head within the operator's timeout.
    Timeout,
    /// No endpoint, or the connection failed.
    Unreachable,
    /// The owner's bound was full: 503, nothing sent.
    Busy,
    /// The route's `auth-url` was refused at compile: 503, nothing sent.
    Refused,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Unauthorized => "unauthorized",
            Outcome::Forbidden => "forbidden",
            Outcome::Failed => "failed",
            Outcome::Timeout => "timeout",
            Outcome::Unreachable => "unreachable",
            Outcome::Busy => "busy",
            Outcome::Refused => "refused",
        }
    }
}

/// Fields set on (`Some`) or removed from (`None`) the request to the
/// backend.
pub type ForwardedFields = Vec<(HeaderName, Option<HeaderValue>)>;

pub const BUSY_BODY: &str =
    "503 too many authentication requests in flight for this route's tenant\n";
pub const REFUSED_BODY: &str =
    "503 this route's auth-url is refused (see the Ingress's status); nothing was forwarded\n";
pub const AUTH_FAILED_BODY: &str = "500 the authentication service did not allow the request\n";
pub const UNAUTHORIZED_BODY: &str = "401 authentication required\n";
pub const AUTH_FORBIDDEN_BODY: &str = "403 the authentication service refused the request\n";
pub const AUTH_DENIED_BODY: &str = "the authentication service did not allow the request\n";

/// Asks `auth` about `original` (on the Gateway API's `terms` when the
/// route's ExternalAuth filter set them): `Ok` with the fields the
/// forwarded request gets, or `Err` with teapot's answer; and how the
/// sub-request ended.
pub async fn check(
    auth: &ExternalAuth,
    terms: Option<&GatewayAuthTerms>,
    limits: AuthLimits,
    original: &Original<'_>,
) -> (
    Result<ForwardedFields, TrafficAnswer>,
    Outcome,
    Vec<HeaderValue>,
) {
    check_cached(auth, None, terms, limits, original).await
}

/// [`check`], answering from `cache` (`auth-cache-key`) a request whose
/// key has a fresh answer, without a sub-request, and keeping the
/// service's answer for the next.
pub async fn check_cached(
    auth: &ExternalAuth,
    cache: Option<&crate::compile::auth_cache::AuthCache>,
    terms: Option<&GatewayAuthTerms>,
    limits: AuthLimits,
    original: &Original<'_>,
) -> (
    Result<ForwardedFields, TrafficAnswer>,
    Outcome,
    Vec<HeaderValue>,
) {
    let cached = cache.and_then(|c| Some((c, c.key(original)?)));
    if auth.refused.is_none()
        && let Some((cache, key)) = cached
        && let Some(answer) = cache.get(key)
    {
        return conclude(auth, terms, original, &answer);
    }
    if auth.refused.is_some() {
        let refused = TrafficAnswer {
            status: 503,
            reason: "auth_refused",
            body: REFUSED_BODY,
            headers: Vec::new(),
        };
        return (Err(refused), Outcome::Refused, Vec::new());
    }
    let Some(_pass) = auth.gate.enter(limits.concurrency) else {
        let busy = TrafficAnswer {
            status: 503,
            reason: "auth_busy",
            body: BUSY_BODY,
            headers: Vec::new(),
        };
        return (Err(busy), Outcome::Busy, Vec::new());
    };
    let answer = match tokio::time::timeout(
        limits.timeout,
        ask(auth, terms, original, limits.timeout),
    )
    .await
    {
        Ok(Ok(head)) => head,
        Ok(Err(outcome)) => return (Err(failed()), outcome, Vec::new()),
        Err(_) => return (Err(failed()), Outcome::Timeout, Vec::new()),
    };
    if let Some((cache, key)) = cached {
        cache.put(key, &answer);
    }
    conclude(auth, terms, original, &answer)
}

/// The verdict on the service's `answer` (fresh or kept).
fn conclude(
    auth: &ExternalAuth,
    terms: Option<&GatewayAuthTerms>,
    original: &Original<'_>,
    answer: &http::response::Parts,
) -> (
    Result<ForwardedFields, TrafficAnswer>,
    Outcome,
    Vec<HeaderValue>,
) {
    let (mut verdict, outcome) = match terms {
        Some(terms) => judge_gateway(terms, answer),
        None => judge(auth, original, answer),
    };
    if let Ok(fields) = &mut verdict {
        remove_shadows(fields, original.headers);
    }
    let cookies = match (&verdict, terms) {
        (Ok(_), None) => allowed_cookies(answer),
        _ => Vec::new(),
    };
    (verdict, outcome, cookies)
}

/// At most this many `Set-Cookie` fields of an allowing answer reach the
/// client (the answer's head is bounded already; this bounds the fields
/// each response carries).
const MAX_AUTH_COOKIES: usize = 8;

/// The `Set-Cookie` fields of an allowing answer (ingress-nginx's
/// `auth_request_set $auth_cookie $upstream_http_set_cookie` and
/// `add_header Set-Cookie $auth_cookie`): added to the backend's response,
/// beside the backend's own.
fn allowed_cookies(answer: &http::response::Parts) -> Vec<HeaderValue> {
    answer
        .headers
        .get_all(http::header::SET_COOKIE)
        .iter()
        .take(MAX_AUTH_COOKIES)
        .cloned()
        .collect()
}

/// The verdict on the answer under the Gateway API's terms: only a 200
/// passes (the filter's "any other code is considered an authorization
/// failure"), and a refusal reaches the client with the service's status
/// and the fields that tell it what to do next (`WWW-Authenticate`,
/// `Location`, `Set-Cookie`), as Envoy's HTTP ext_authz relays it.
fn judge_gateway(
    terms: &GatewayAuthTerms,
    answer: &http::response::Parts,
) -> (Result<ForwardedFields, TrafficAnswer>, Outcome) {
    let status = answer.status.as_u16();
    if status == 200 {
        let fields = if terms.response_headers.is_empty() {
            answer
                .headers
                .iter()
                .filter(|(name, _)| copied_from_answer(name.as_str()))
                .map(|(name, value)| (name.clone(), Some(value.clone())))
                .collect()
        } else {
            terms
                .response_headers
                .iter()
                .map(|name| (name.clone(), answer.headers.get(name).cloned()))
                .collect()
        };
        return (Ok(fields), Outcome::Allowed);
    }
    // A 1xx or another 2xx is a refusal too, but not one to relay as is.
    let status = if status < 300 { 403 } else { status };
    let (reason, body, outcome) = match status {
        401 => (
            "auth_unauthorized",
            UNAUTHORIZED_BODY,
            Outcome::Unauthorized,
        ),
        403 => ("auth_forbidden", AUTH_FORBIDDEN_BODY, Outcome::Forbidden),
        _ => ("auth_denied", AUTH_DENIED_BODY, Outcome::Failed),
    };
    let mut headers = Vec::new();
    for name in ["www-authenticate", "location", "set-cookie"] {
        for value in answer.headers.get_all(name) {
            if let Ok(value) = value.to_str() {
                headers.push((name, value.to_string()));
            }
        }
    }
    let answer = TrafficAnswer {
        status,
        reason,
        body,
        headers,
    };
    (Err(answer), outcome)
}

/// Whether a field of a 200 answer is copied onto the request to the
/// backend when the filter lists none: every one but `Host` (the
/// filter's exception), the connection's own fields and those that frame
/// or describe the answer's body (`Content-*`), which would misdescribe
/// the request's.
fn copied_from_answer(name: &str) -> bool {
    !(name == "host"
        || name.starts_with("content-")
        || teapot_h1::is_hop_by_hop(name.as_bytes())
        || FORWARDING.contains(&name)
        || name == trace::REQUEST_ID
        || forwarding::is_lookalike(name))
}

/// Adds to `fields` (what the authentication service vouches for) the
/// removal of each client field spelt like one of them with `_`: a
/// client's `X_Auth_User` is `X-Auth-User` to a backend that folds `_`
/// into `-`, and would stand beside (or before) the service's.
fn remove_shadows(fields: &mut ForwardedFields, client: &dyn RequestHeaders) {
    let mut shadows: Vec<HeaderName> = Vec::new();
    client.each(&mut |name, _| {
        if !name.contains('_') {
            return;
        }
        let vouched = fields
            .iter()
            .any(|(field, _)| forwarding::shadows(name, field.as_str()));
        if vouched
            && let Ok(name) = HeaderName::from_bytes(name.as_bytes())
            && !shadows.contains(&name)
        {
            shadows.push(name);
        }
    });
    fields.extend(shadows.into_iter().map(|name| (name, None)));
}

/// The verdict on the authentication service's answer.
fn judge(
    auth: &ExternalAuth,
    original: &Original<'_>,
    answer: &http::response::Parts,
) -> (Result<ForwardedFields, TrafficAnswer>, Outcome) {
    match answer.status {
        s if s.is_success() => {
            let fields = auth
                .response_headers
                .iter()
                .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
                .map(|name| {
                    let value = answer.headers.get(&name).cloned();
                    (name, value)
                })
                .collect();
            (Ok(fields), Outcome::Allowed)
        }
        StatusCode::UNAUTHORIZED => {
            let answer = match &auth.signin {
                Some(signin) => TrafficAnswer {
                    status: 302,
                    reason: "auth_signin",
                    body: "",
                    headers: vec![(
                        "location",
                        signin_location(signin, &auth.signin_param, original),
                    )],
                },
                None => TrafficAnswer {
                    status: 401,
                    reason: "auth_unauthorized",
                    body: UNAUTHORIZED_BODY,
                    headers: answer
                        .headers
                        .get(http::header::WWW_AUTHENTICATE)
                        .and_then(|v| v.to_str().ok())
                        .map(|v| ("www-authenticate", v.to_string()))
                        .into_iter()
                        .collect(),
                },
            };
            (Err(answer), Outcome::Unauthorized)
        }
        StatusCode::FORBIDDEN => {
            let answer = TrafficAnswer {
                status: 403,
                reason: "auth_forbidden",
                body: AUTH_FORBIDDEN_BODY,
                headers: Vec::new(),
            };
            (Err(answer), Outcome::Forbidden)
        }
        _ => (Err(failed()), Outcome::Failed),
    }
}

fn failed() -> TrafficAnswer {
    TrafficAnswer {
        status: 500,
        reason: "auth_failed",
        body: AUTH_FAILED_BODY,
        headers: Vec::new(),
    }
}

/// One sub-request to the authentication service: the answer's head.
async fn ask(
    auth: &ExternalAuth,
    terms: Option<&GatewayAuthTerms>,
    original: &Original<'_>,
    limit: Duration,
) -> Result<http::response::Parts, Outcome> {
    let request = match terms {
        Some(terms) => gateway_sub_request(terms, original),
        None => sub_request(auth, original),
    };
    let request = request.map_err(|_| Outcome::Failed)?;
    send(&auth.upstream, request, 0, limit)
        .await
        .map(|(head, _)| head)
}

/// One sub-request to one endpoint of `upstream` (the authentication
/// service, an error page's backend): the answer's head and, up to
/// `max_body` bytes, its body (a longer one fails). `limit` bounds the
/// connect (the caller bounds the whole exchange by the same). A connect
/// failure ejects the endpoint for a while, as a backend's would be.
///
/// The connection is plain TCP: teapot speaks plain HTTP to an
/// authentication service (an `https://` auth-url is refused) and to an
/// error page's backend, whose upstreams carry no backend TLS setting.
pub(super) async fn send(
    upstream: &Upstream,
    request: Request<Empty<Bytes>>,
    max_body: usize,
    limit: Duration,
) -> Result<(http::response::Parts, Bytes), Outcome> {
    let mut tried = Tried::default();
    let endpoint = upstream.pick(&mut tried).ok_or(Outcome::Unreachable)?;
    let stream = match teapot_h1::connect(endpoint.addr, limit).await {
        Ok(stream) => {
            endpoint.mark_healthy();
            stream
        }
        Err(teapot_h1::ConnectError::TimedOut) => return Err(Outcome::Timeout),
        Err(_) => {
            endpoint.eject();
            return Err(Outcome::Unreachable);
        }
    };
    exchange(stream, request, max_body).await
}

/// Sends `request` on `stream` and reads the answer's head (and up to
/// `max_body` bytes of its body); the connection is closed when this
/// returns or is dropped. The head leaves through the HTTP/1 engine's
/// encoder and the answer is read by its rules (`teapot_h1`: the response
/// head's bounds, RFC 9112's framing, its chunked decoder), as a backend's
/// answer to a forwarded request is.
async fn exchange(
    mut stream: TcpStream,
    request: Request<Empty<Bytes>>,
    max_body: usize,
) -> Result<(http::response::Parts, Bytes), Outcome> {
    let mut out = Vec::with_capacity(512);
    let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let mut head = teapot_h1::RequestHeadWriter::start(
        &mut out,
        request.method().as_str().as_bytes(),
        target.as_bytes(),
    );
    for (name, value) in request.headers() {
        head.field(name.as_str().as_bytes(), value.as_bytes());
    }
    // Sub-requests carry no body; a method that expects one says so.
    let body_expected = [Method::POST, Method::PUT, Method::PATCH].contains(request.method());
    head.finish(if body_expected {
        teapot_h1::BodyLength::Empty
    } else {
        teapot_h1::BodyLength::Unframed
    });
    stream
        .write_all(&out)
        .await
        .map_err(|_| Outcome::Unreachable)?;
    let mut buf = BytesMut::with_capacity(4096);
    let answer = loop {
        match backend_answer::parse_response(&buf, request.method() == Method::HEAD) {
            Ok(Some(answer)) if answer.status.is_informational() => buf.advance(answer.len),
            Ok(Some(answer)) => break answer,
            Ok(None) => {
                if buf.len() >= teapot_h1::scan::MAX_RESPONSE_HEADER_BYTES {
                    return Err(Outcome::Unreachable);
                }
                buf.reserve(4096);
                match stream.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return Err(Outcome::Unreachable),
                    Ok(_) => {}
                }
            }
            Err(_) => return Err(Outcome::Unreachable),
        }
    };
    buf.advance(answer.len);
    let mut parts = http::Response::new(()).into_parts().0;
    parts.status = answer.status;
    parts.headers = answer.headers;
    if max_body == 0 {
        return Ok((parts, Bytes::new()));
    }
    let body = read_body(&mut stream, buf, answer.framing, max_body).await?;
    Ok((parts, body))
}

/// A sub-request's answer body, at most `max_body` bytes: one that
/// announces more is refused before a byte of it is read, one that turns
/// out longer when it is read fails.
async fn read_body(
    stream: &mut TcpStream,
    mut buf: BytesMut,
    framing: teapot_h1::BodyFraming,
    max_body: usize,
) -> Result<Bytes, Outcome> {
    use teapot_h1::BodyFraming;
    let mut more = async |buf: &mut BytesMut| -> Result<bool, Outcome> {
        buf.reserve(4096);
        stream
            .read_buf(buf)
            .await
            .map(|n| n > 0)
            .map_err(|_| Outcome::Failed)
    };
    match framing {
        BodyFraming::None => Ok(Bytes::new()),
        BodyFraming::Length(n) => {
            let n = usize::try_from(n).map_err(|_| Outcome::Failed)?;
            if n > max_body {
                return Err(Outcome::Failed);
            }
            while buf.len() < n {
                if !more(&mut buf).await? {
                    return Err(Outcome::Failed);
                }
            }
            Ok(buf.split_to(n).freeze())
        }
        BodyFraming::Chunked => {
            let mut chunked = backend_answer::Chunked::default();
            let mut body = BytesMut::new();
            loop {
                while let Some(payload) = chunked.decode(&mut buf).map_err(|_| Outcome::Failed)? {
                    if body.len() + payload.len() > max_body {
                        return Err(Outcome::Failed);
                    }
                    body.extend_from_slice(&payload);
                }
                if chunked.done() {
                    return Ok(body.freeze());
                }
                if !more(&mut buf).await? {
                    return Err(Outcome::Failed);
                }
            }
        }
        BodyFraming::Close => loop {
            if buf.len() > max_body {
                return Err(Outcome::Failed);
            }
            if !more(&mut buf).await? {
                return Ok(buf.freeze());
            }
        },
    }
}

/// The sub-request: `auth-method` to the URL's path, its `Host` the URL's
/// authority, the client's fields ([`client_fields`]) and ingress-nginx's
/// fields about the original request.
fn sub_request(
    auth: &ExternalAuth,
    original: &Original<'_>,
) -> Result<Request<Empty<Bytes>>, http::Error> {
    let mut request = Request::builder()
        .method(auth.method)
        .uri(&*auth.path)
        .header(http::header::HOST, &*auth.authority);
    for (name, value) in client_fields(original.headers, AUTH_OWN_FIELDS) {
        request = request.header(name, value);
    }
    let client = original.client.map(|ip| ip.to_canonical().to_string());
    let redirect = auth.request_redirect.as_deref().unwrap_or(original.target);
    request = request
        .header("x-original-url", original.url())
        .header("x-original-method", original.method)
        .header("x-forwarded-host", original.authority)
        .header("x-forwarded-proto", original.scheme())
        .header("x-auth-request-redirect", redirect)
        .header("x-request-id", original.request_id);
    if let Some(client) = client {
        request = request
            .header("x-real-ip", &client)
            .header("x-forwarded-for", &client);
    }
    if matches!(auth.method, "POST" | "PUT" | "PATCH") {
        request = request.header(http::header::CONTENT_LENGTH, "0");
    }
    request.body(Empty::new())
}

/// The ExternalAuth filter's sub-request: the client's method, its path
/// and query under `http.path`, and of its fields only those the filter
/// always sends (`Host`, `Authorization`, a `Content-Length` of 0: no body
/// is forwarded) and those `http.allowedHeaders` names (among those a
/// sub-request may carry at all, [`is_carried`]).
fn gateway_sub_request(
    terms: &GatewayAuthTerms,
    original: &Original<'_>,
) -> Result<Request<Empty<Bytes>>, http::Error> {
    let mut request = Request::builder()
        .method(original.method)
        .uri(format!("{}{}", terms.path_prefix, original.target))
        .header(http::header::HOST, original.authority)
        .header(http::header::CONTENT_LENGTH, "0");
    original.headers.each(&mut |name, value| {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            return;
        };
        let wanted = name == http::header::AUTHORIZATION
            || (terms.request_headers.contains(&name) && is_carried(name.as_str(), &[]));
        if !wanted || name == http::header::COOKIE {
            return;
        }
        if let (Ok(value), Some(fields)) = (HeaderValue::from_bytes(value), request.headers_mut()) {
            fields.append(name, value);
        }
    });
    if terms.request_headers.contains(&http::header::COOKIE)
        && let Some(cookie) = joined_cookie(original.headers)
    {
        request = request.header(http::header::COOKIE, cookie);
    }
    request.body(Empty::new())
}

/// `auth-signin` with the original URL in `param`, as ingress-nginx builds
/// it: nginx's variables a sign-in URL commonly names are filled in, and
/// `param=$scheme://$http_host$escaped_request_uri` is added unless the
/// URL already carries `param`.
pub fn signin_location(signin: &str, param: &str, original: &Original<'_>) -> String {
    let escaped = escape(original.target);
    let mut url = expand(signin, original, &escaped);
    let query = url.split_once('?').map(|(_, q)| q);
    let has = query.is_some_and(|q| {
        q.split('&').any(|kv| {
            kv.split_once('=')
                .is_some_and(|(k, v)| k == param && !v.is_empty())
        })
    });
    if has {
        return url;
    }
    match query {
        None => url.push('?'),
        Some("") => {}
        Some(_) => url.push('&'),
    }
    url.push_str(param);
    url.push('=');
    url.push_str(original.scheme());
    url.push_str("://");
    url.push_str(original.authority);
    url.push_str(&escaped);
    url
}

/// nginx's variables in a sign-in URL, longest names first so `$host`
/// does not eat `$http_host`'s tail.
fn expand(url: &str, original: &Original<'_>, escaped: &str) -> String {
    if !url.contains('$') {
        return url.to_string();
    }
    let vars: [(&str, &str); 7] = [
        ("$escaped_request_uri", escaped),
        ("$pass_access_scheme", original.scheme()),
        ("$best_http_host", original.authority),
        ("$request_uri", original.target),
        ("$http_host", original.authority),
        ("$scheme", original.scheme()),
        ("$host", host_only(original.authority)),
    ];
    let mut out = String::with_capacity(url.len() + 64);
    let mut rest = url;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        match vars.iter().find(|(name, _)| tail.starts_with(name)) {
            Some((name, value)) => {
                out.push_str(value);
                rest = &tail[name.len()..];
            }
            None => {
                out.push('$');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// nginx's `$host`: the Host without its port.
fn host_only(authority: &str) -> &str {
    match authority.strip_prefix('[') {
        Some(v6) => v6
            .split_once(']')
            .map_or(authority, |(ip, _)| &authority[..ip.len() + 2]),
        None => authority
            .split_once(':')
            .map_or(authority, |(host, _)| host),
    }
}

/// Percent-encodes everything but unreserved characters (Go's
/// `url.QueryEscape`, which ingress-nginx's e2e tests expect of
/// `$escaped_request_uri`).
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3 / 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::compile::upstream::Upstream;
    use crate::live::endpoints::EndpointRegistry;
    use crate::live::rate_table::AuthGate;

    fn original<'a>(headers: &'a (dyn RequestHeaders + Sync)) -> Original<'a> {
        Original {
            method: "GET",
            authority: "app.example:8443",
            target: "/?a=b&c=d",
            tls: true,
            client: Some("::ffff:192.0.2.7".parse().unwrap()),
            request_id: "abc",
            headers,
        }
    }

    fn auth(upstream: Upstream) -> ExternalAuth {
        ExternalAuth {
            upstream: Arc::new(upstream),
            authority: Arc::from("auth.shop.svc:4180"),
            path: Arc::from("/check?x=1"),
            method: "POST",
            signin: None,
            signin_param: Arc::from("rd"),
            response_headers: vec![Arc::from("x-user"), Arc::from("x-groups")],
            request_redirect: None,
            gate: Arc::new(AuthGate::default()),
            owner: Arc::from("acme"),
            refused: None,
        }
    }

    #[test]
    fn signin_gets_the_original_url_unless_it_names_one() {
        let none: &[(&str, &str)] = &[];
        let o = original(&none);
        let escaped = "https://app.example:8443%2F%3Fa%3Db%26c%3Dd";
        assert_eq!(
            signin_location("http://auth.example/start", "rd", &o),
            format!("http://auth.example/start?rd={escaped}")
        );
        assert_eq!(
            signin_location("http://auth.example/start?x=1", "return_to", &o),
            format!("http://auth.example/start?x=1&return_to={escaped}")
        );
        assert_eq!(
            signin_location("http://auth.example/start?", "rd", &o),
            format!("http://auth.example/start?rd={escaped}")
        );
        // ingress-nginx's own documented form: its variables filled in.
        assert_eq!(
            signin_location(
                "https://$host/oauth2/start?rd=$escaped_request_uri",
                "rd",
                &o
            ),
            "https://app.example/oauth2/start?rd=%2F%3Fa%3Db%26c%3Dd"
        );
        assert_eq!(
            signin_location(
                "https://a.example/s?rd=$scheme://$http_host$request_uri",
                "rd",
                &o
            ),
            "https://a.example/s?rd=https://app.example:8443/?a=b&c=d"
        );
    }

    #[test]
    fn the_sub_request_carries_the_original_request() {
        let fields: &[(&str, &str)] = &[
            ("cookie", "session=1"),
            ("authorization", "Bearer t"),
            ("x-forwarded-for", "6.6.6.6"),
            ("X-Original-URL", "https://admin.example/"),
            ("x-real-ip", "6.6.6.6"),
            ("x-request-id", "forged"),
            ("content-length", "5"),
        ];
        let o = original(&fields);
        let a = auth(Upstream::new("auth".into(), Vec::new(), None));
        let r = sub_request(&a, &o).unwrap();
        assert_eq!(r.method(), "POST");
        assert_eq!(r.uri(), "/check?x=1");
        let h = r.headers();
        let get = |n: &str| h.get(n).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(get("host").as_deref(), Some("auth.shop.svc:4180"));
        assert_eq!(get("cookie").as_deref(), Some("session=1"));
        assert_eq!(get("authorization").as_deref(), Some("Bearer t"));
        assert_eq!(
            get("x-original-url").as_deref(),
            Some("https://app.example:8443/?a=b&c=d")
        );
        assert_eq!(get("x-original-method").as_deref(), Some("GET"));
        assert_eq!(get("x-forwarded-host").as_deref(), Some("app.example:8443"));
        assert_eq!(get("x-forwarded-proto").as_deref(), Some("https"));
        // The client as teapot sees it, never as the client says.
        assert_eq!(get("x-forwarded-for").as_deref(), Some("192.0.2.7"));
        assert_eq!(get("x-real-ip").as_deref(), Some("192.0.2.7"));
        assert_eq!(get("x-auth-request-redirect").as_deref(), Some("/?a=b&c=d"));
        assert_eq!(get("x-request-id").as_deref(), Some("abc"));
        assert_eq!(get("content-length").as_deref(), Some("0"));
        // teapot's values replace the client's, never beside them.
        for name in [
            "x-forwarded-for",
            "x-original-url",
            "x-real-ip",
            "x-request-id",
            "content-length",
        ] {
            assert_eq!(h.get_all(name).iter().count(), 1, "{name}");
        }
    }

    /// Every client field but the connection's, the body's, `Host`,
    /// `Expect` and what teapot vouches for or sets itself; repeated fields
    /// as sent, HTTP/2 cookie crumbs as one field.
    #[test]
    fn every_client_field_goes_but_those_a_sub_request_cannot_or_must_not_carry() {
        let mut map = http::HeaderMap::new();
        let fields: &[(&str, &str)] = &[
            ("host", "app.example"),
            ("x-tenant-key", "k-1"),
            ("x-tenant-key", "k-2"),
            ("cookie", "a=1"),
            ("cookie", "b=2"),
            ("accept", "text/html"),
            ("connection", "keep-alive, X-Hop"),
            ("x-hop", "by hop"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic eA=="),
            ("transfer-encoding", "chunked"),
            ("content-length", "5"),
            ("expect", "100-continue"),
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-port", "1"),
            ("forwarded", "for=6.6.6.6"),
            ("x-auth-request-redirect", "https://evil.example/"),
            ("x-original-method", "DELETE"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        ];
        for (name, value) in fields {
            map.append(*name, HeaderValue::from_static(value));
        }
        let carried = |headers: &dyn RequestHeaders| {
            client_fields(headers, AUTH_OWN_FIELDS)
                .into_iter()
                .map(|(n, v)| format!("{n}: {}", v.to_str().unwrap()))
                .collect::<Vec<_>>()
        };
        let expected = [
            "x-tenant-key: k-1",
            "x-tenant-key: k-2",
            "accept: text/html",
            "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "cookie: a=1; b=2",
        ];
        // The HTTP/1 engine's view (fields in order, names as sent) and
        // the HTTP/2 one (a header map) carry the same.
        assert_eq!(carried(&fields), expected);
        assert_eq!(carried(&map), expected);
        // The sub-request's own values, once each.
        let o = original(&map);
        let a = auth(Upstream::new("auth".into(), Vec::new(), None));
        let r = sub_request(&a, &o).unwrap();
        let all = |n: &str| {
            r.headers()
                .get_all(n)
                .iter()
                .map(|v| v.to_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(all("x-tenant-key"), ["k-1", "k-2"]);
        assert_eq!(all("host"), ["auth.shop.svc:4180"]);
        assert_eq!(all("x-forwarded-host"), ["app.example:8443"]);
        assert_eq!(all("x-auth-request-redirect"), ["/?a=b&c=d"]);
        assert_eq!(all("x-original-method"), ["GET"]);
        assert_eq!(all("content-length"), ["0"]);
        for gone in [
            "x-hop",
            "expect",
            "forwarded",
            "x-forwarded-port",
            "upgrade",
        ] {
            assert!(all(gone).is_empty(), "{gone}");
        }
    }

    /// A client's `_` spelling of a field teapot writes, or of one the
    /// authentication service vouches for, reaches neither the service
    /// nor the backend (crate::plane::forwarding::is_lookalike).
    #[test]
    fn underscore_lookalikes_are_neither_carried_nor_kept() {
        let fields: &[(&str, &str)] = &[
            ("x_forwarded_for", "6.6.6.6"),
            ("X_Real_IP", "6.6.6.6"),
            ("x_original_url", "http://admin.example/"),
            ("X_Auth_Request_Redirect", "https://evil.example/"),
            ("x_request_id", "forged"),
            ("X_User", "admin"),
            ("x_app", "1"),
        ];
        let carried: Vec<String> = client_fields(&fields, AUTH_OWN_FIELDS)
            .into_iter()
            .map(|(n, _)| n.to_string())
            .collect();
        assert_eq!(carried, ["x_user", "x_app"]);
        let mut vouched: ForwardedFields = vec![(
            HeaderName::from_static("x-user"),
            Some(HeaderValue::from_static("ann")),
        )];
        remove_shadows(&mut vouched, &fields);
        assert_eq!(
            vouched,
            [
                (
                    HeaderName::from_static("x-user"),
                    Some(HeaderValue::from_static("ann"))
                ),
                (HeaderName::from_static("x_user"), None),
            ]
        );
        // A Gateway ExternalAuth answer's look-alikes are not copied.
        assert!(!copied_from_answer("x_forwarded_for"));
        assert!(!copied_from_answer("x_real_ip"));
        assert!(copied_from_answer("x_user"));
    }

    #[test]
    fn an_allowing_answers_cookies_are_kept_and_bounded() {
        let mut answer = http::Response::builder().status(200);
        for i in 0..12 {
            answer = answer.header("set-cookie", format!("c{i}=v"));
        }
        let (parts, _) = answer.body(()).unwrap().into_parts();
        let cookies = allowed_cookies(&parts);
        assert_eq!(cookies.len(), MAX_AUTH_COOKIES);
        assert_eq!(cookies[0], "c0=v");
        let (none, _) = http::Response::builder()
            .status(200)
            .body(())
            .unwrap()
            .into_parts();
        assert!(allowed_cookies(&none).is_empty());
    }

    #[test]
    fn answers_map_as_ingress_nginx_maps_them() {
        let none: &[(&str, &str)] = &[];
        let o = original(&none);
        let mut a = auth(Upstream::new("auth".into(), Vec::new(), None));
        let head = |status: u16, fields: &[(&str, &str)]| {
            let mut r = http::Response::builder().status(status);
            for (n, v) in fields {
                r = r.header(*n, *v);
            }
            r.body(()).unwrap().into_parts().0
        };
        // 2xx: the listed fields, a missing one removed.
        let (ok, outcome) = judge(&a, &o, &head(202, &[("x-user", "ann"), ("x-other", "no")]));
        assert_eq!(outcome, Outcome::Allowed);
        let ok = ok.unwrap();
        assert_eq!(
            ok[0],
            (
                HeaderName::from_static("x-user"),
                Some(HeaderValue::from_static("ann"))
            )
        );
        assert_eq!(ok[1], (HeaderName::from_static("x-groups"), None));
        let basic = [("www-authenticate", "Basic realm=\"x\"")];
        let (e, outcome) = judge(&a, &o, &head(401, &basic));
        let e = e.unwrap_err();
        assert_eq!((e.status, outcome), (401, Outcome::Unauthorized));
        assert_eq!(
            e.headers,
            vec![("www-authenticate", "Basic realm=\"x\"".to_string())]
        );
        a.signin = Some(Arc::from("https://login.example/start"));
        let (e, _) = judge(&a, &o, &head(401, &basic));
        let e = e.unwrap_err();
        assert_eq!(e.status, 302);
        assert!(
            e.headers[0]
                .1
                .starts_with("https://login.example/start?rd=https://app.example")
        );
        let (e, outcome) = judge(&a, &o, &head(403, &[]));
        assert_eq!((e.unwrap_err().status, outcome), (403, Outcome::Forbidden));
        for status in [301, 404, 500, 503] {
            let (e, outcome) = judge(&a, &o, &head(status, &[]));
            assert_eq!((e.unwrap_err().status, outcome), (500, Outcome::Failed));
        }
    }

    /// No endpoint, a refused connection, a full bound, a refused
    /// auth-url: 500, 500, 503, 503.
    #[tokio::test]
    async fn failures_fail_closed_and_a_full_bound_answers_at_once() {
        let none: &[(&str, &str)] = &[];
        let o = original(&none);
        let limits = AuthLimits::default();
        let empty = auth(Upstream::new(
            "auth".into(),
            Vec::new(),
            Some("none".into()),
        ));
        let (r, outcome, _) = check(&empty, None, limits, &o).await;
        assert_eq!(
            (r.unwrap_err().status, outcome),
            (500, Outcome::Unreachable)
        );
        // A port nothing listens on.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = closed.local_addr().unwrap();
        drop(closed);
        let registry = EndpointRegistry::default();
        let refused = auth(Upstream::new(
            "auth".into(),
            vec![registry.endpoint(addr)],
            None,
        ));
        let (r, outcome, _) = check(&refused, None, limits, &o).await;
        assert_eq!(
            (r.unwrap_err().status, outcome),
            (500, Outcome::Unreachable)
        );
        let full = AuthLimits {
            concurrency: 1,
            ..limits
        };
        let _held = refused.gate.enter(1).unwrap();
        let (r, outcome, _) = check(&refused, None, full, &o).await;
        let r = r.unwrap_err();
        assert_eq!((r.status, r.body, outcome), (503, BUSY_BODY, Outcome::Busy));
        let refused = ExternalAuth::refused("outside the nodes".into());
        let (r, outcome, _) = check(&refused, None, limits, &o).await;
        let r = r.unwrap_err();
        assert_eq!(
            (r.status, r.body, outcome),
            (503, REFUSED_BODY, Outcome::Refused)
        );
    }

    #[test]
    fn the_gateway_sub_request_carries_only_what_the_filter_names() {
        let fields: &[(&str, &str)] = &[
            ("authorization", "Bearer t"),
            ("x-tenant", "k"),
            ("cookie", "a=1"),
            ("accept", "text/html"),
            ("x-forwarded-for", "6.6.6.6"),
            ("connection", "close"),
        ];
        let mut o = original(&fields);
        o.method = "DELETE";
        let terms = GatewayAuthTerms {
            path_prefix: Arc::from("/check"),
            request_headers: vec![
                HeaderName::from_static("x-tenant"),
                HeaderName::from_static("x-forwarded-for"),
                HeaderName::from_static("connection"),
            ],
            response_headers: Vec::new(),
        };
        let r = gateway_sub_request(&terms, &o).unwrap();
        assert_eq!(r.method(), "DELETE");
        assert_eq!(r.uri(), "/check/?a=b&c=d");
        let sent: Vec<String> = r
            .headers()
            .iter()
            .map(|(n, v)| format!("{n}: {}", v.to_str().unwrap()))
            .collect();
        // Forwarding and connection fields are never the client's to set.
        assert_eq!(
            sent,
            [
                "host: app.example:8443",
                "content-length: 0",
                "authorization: Bearer t",
                "x-tenant: k",
            ]
        );
        let none = GatewayAuthTerms::default();
        let r = gateway_sub_request(&none, &o).unwrap();
        assert_eq!(r.uri(), "/?a=b&c=d");
        assert!(r.headers().get("x-tenant").is_none());
    }

    #[test]
    fn the_gateway_verdict_passes_only_a_200_and_relays_refusals() {
        let head = |status: u16, fields: &[(&str, &str)]| {
            let mut r = http::Response::builder().status(status);
            for (n, v) in fields {
                r = r.header(*n, *v);
            }
            r.body(()).unwrap().into_parts().0
        };
        let listed = GatewayAuthTerms {
            response_headers: vec![
                HeaderName::from_static("x-user"),
                HeaderName::from_static("x-groups"),
            ],
            ..GatewayAuthTerms::default()
        };
        let answer = head(200, &[("x-user", "ann"), ("x-other", "no")]);
        let (ok, outcome) = judge_gateway(&listed, &answer);
        assert_eq!(outcome, Outcome::Allowed);
        let ok = ok.unwrap();
        assert_eq!(
            ok,
            vec![
                (
                    HeaderName::from_static("x-user"),
                    Some(HeaderValue::from_static("ann"))
                ),
                (HeaderName::from_static("x-groups"), None),
            ]
        );
        // None listed: every field but Host and those of the answer's own
        // body or connection.
        let all = GatewayAuthTerms::default();
        let answer = head(
            200,
            &[
                ("x-user", "ann"),
                ("host", "auth"),
                ("content-type", "text/plain"),
                ("connection", "close"),
            ],
        );
        let names: Vec<String> = judge_gateway(&all, &answer)
            .0
            .unwrap()
            .into_iter()
            .map(|(n, _)| n.to_string())
            .collect();
        assert_eq!(names, ["x-user"]);
        // Anything but 200 is refused, with the service's status.
        let basic = [("www-authenticate", "Basic realm=\"x\"")];
        let e = judge_gateway(&all, &head(401, &basic)).0.unwrap_err();
        assert_eq!(e.status, 401);
        assert_eq!(
            e.headers,
            vec![("www-authenticate", "Basic realm=\"x\"".to_string())]
        );
        let e = judge_gateway(&all, &head(302, &[("location", "https://login/")]))
            .0
            .unwrap_err();
        assert_eq!((e.status, e.headers[0].0), (302, "location"));
        for (status, relayed) in [(204, 403), (403, 403), (429, 429), (503, 503)] {
            let e = judge_gateway(&all, &head(status, &[])).0.unwrap_err();
            assert_eq!(e.status, relayed, "{status}");
        }
    }
}
