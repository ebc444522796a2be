//! A route's traffic policy ([`TrafficPolicy`], read from an Ingress's
//! ingress-nginx annotations by crate::compile::traffic) in the request
//! pipeline (crate::plane::pipeline), once for both HTTP versions. After
//! the routing decision, in this order:
//!
//! 1. [`access`]: a client outside the allow-list or inside the deny-list
//!    gets 403;
//! 2. [`rate`]: a client with `limit-connections` requests in flight gets
//!    503 (its count held by the forward's [`Applied`] until the request
//!    ends), then one over a rate limit 429 with `Retry-After`;
//! 3. `permanent-redirect` / `temporal-redirect`, then `ssl-redirect`
//!    for plain HTTP, then `app-root` for `/`;
//! 4. [`cors`]: a preflight from an allowed origin is answered 204; any
//!    other request from one is forwarded and its response gets the CORS
//!    fields;
//! 5. [`canary`]: the canary's backend instead of the route's, by the
//!    header, cookie and weight rules, unless the affinity cookie ties the
//!    request to one of the two backends (ingress-nginx's
//!    `is_affinitized`; the canary's only with `affinity-canary-behavior:
//!    sticky`); then [`affinity`] on the backend chosen (the canary's only
//!    when sticky): the endpoint the client's cookie names is tried first
//!    (and the cookie set when it names none that serves);
//! 6. `x-forwarded-prefix` on the request to the backend;
//! 7. `rewrite-target`: the path the backend gets, from the captures of
//!    the rule's regex path;
//! 8. [`auth`]: `auth-url`'s sub-request (asynchronous, so the pipeline
//!    runs it after [`apply`]): the answers above come first, as
//!    ingress-nginx answers redirects and CORS preflights in nginx's
//!    rewrite phase, before its `auth_request` in the access phase;
//! 9. [`errors`]: on the way back, a listed status of the backend (or
//!    teapot's 502, 504, or 503 for no endpoint) is replaced by the
//!    `default-backend`'s page; the answers above are teapot's own and
//!    never replaced.
//!
//! ingress-nginx answers redirects and preflights in nginx's rewrite phase,
//! before its allow-lists and limits; teapot checks who the client is and
//! how fast it goes first, so a refused client gets nothing but its
//! refusal (docs/decisions.md).
//!
//! What each engine keeps is writing a [`TrafficAnswer`] and applying an
//! [`Applied`] to its own heads (HTTP/1 edits, an HTTP/2 header map).

pub mod access;
pub mod affinity;
pub mod auth;
pub mod auth_cache;
pub mod bandwidth;
pub mod basic_auth;
pub mod canary;
pub mod cors;
pub mod custom_headers;
pub mod engines;
pub mod errors;
pub mod ewma;
pub mod global_rate;
pub mod hash_by;
pub mod rate;
pub mod rewrite;
pub mod satisfy;

use std::net::IpAddr;

use crate::compile::acme::CHALLENGE_PREFIX;
use crate::compile::traffic::{SslRedirect, TrafficPolicy};
use crate::compile::upstream::Upstream;

/// teapot's own answer to a request its route's policy stops.
#[derive(Debug, PartialEq, Eq)]
pub struct TrafficAnswer {
    pub status: u16,
    /// For the access log and the engines' `Outcome::Local`.
    pub reason: &'static str,
    pub body: &'static str,
    /// Fields besides the engine's own (`Retry-After`, `Location`, CORS).
    pub headers: Vec<(&'static str, String)>,
}

/// What a forwarded request carries from its route's policy.
#[derive(Debug, Default)]
pub struct Applied {
    /// Set on the backend's response (replacing the backend's own).
    pub response_headers: Vec<(&'static str, String)>,
    /// The endpoint (an index into the upstream's) to try first.
    pub endpoint: Option<usize>,
    /// Set on the request to the backend (replacing the client's).
    pub request_headers: Vec<(&'static str, std::sync::Arc<str>)>,
    /// `rewrite-target`: the path the backend gets (the query as sent).
    pub path: Option<String>,
    /// The canary's backend, when the canary rules chose it.
    pub upstream: Option<std::sync::Arc<Upstream>>,
    /// `proxy-*-timeout` ([`engines::upstream_timeouts`]).
    pub timeouts: Option<crate::compile::traffic::UpstreamTimeouts>,
    /// `auth-response-headers` from the authentication service's answer:
    /// set on the request to the backend, or removed (`None`) when the
    /// answer had none, replacing the client's either way.
    pub auth_fields: auth::ForwardedFields,
    /// The authentication service's `Set-Cookie` fields, added to the
    /// backend's response beside its own.
    pub auth_cookies: Vec<http::HeaderValue>,
    /// `limit-connections`: the request's place in its client's count,
    /// given back when the forward (and this) is dropped, however the
    /// request ended.
    pub in_flight: Option<crate::live::rate_table::InFlightPass>,
    /// `custom-http-errors`: what the error backend is told when a
    /// response is replaced by its page.
    pub error_pages: Option<Box<errors::ErrorPages>>,
    /// `upstream-vhost`: the backend's `Host` (HTTP/2: `:authority`).
    pub upstream_host: Option<std::sync::Arc<str>>,
    /// `custom-headers`: set on the backend's response, after the fields
    /// above ([`custom_headers`]).
    pub custom_headers: Option<std::sync::Arc<crate::compile::custom_headers::CustomHeaders>>,
    /// `proxy-redirect-*`, `proxy-cookie-*`: the backend's response
    /// fields rewritten ([`rewrite`]).
    pub rewrite: Option<rewrite::Rewriting>,
    /// `limit-rate`: the response body's pace, taken by the engine.
    pub pacer: Option<bandwidth::Pacer>,
    /// `proxy-request-buffering`, `proxy-buffering`: the bytes asked per
    /// request, granted from the budget by the engines
    /// (crate::live::buffers).
    pub buffering: Option<crate::compile::buffering::Buffering>,
    /// `load-balance: ewma`: the engine measures the time to the answer's
    /// head on the endpoint ([`ewma`]).
    pub ewma: bool,
    /// `satisfy: any`: the allow-list let the request in, so no
    /// authentication is asked ([`satisfy`]).
    pub satisfied: bool,
    /// `proxy-http-version`, `connection-proxy-header`: the head the
    /// backend gets (crate::compile::upstream_http).
    pub upstream_http: Option<std::sync::Arc<teapot_h1::UpstreamHttp>>,
    /// `proxy-next-upstream*`: the engines' retry policy.
    pub retry: Option<std::sync::Arc<teapot_h1::RetryPolicy>>,
}

impl Applied {
    /// Whether the forward is as without a policy (then nothing is boxed).
    fn is_empty(&self) -> bool {
        self.response_headers.is_empty()
            && self.endpoint.is_none()
            && self.request_headers.is_empty()
            && self.path.is_none()
            && self.upstream.is_none()
            && self.timeouts.is_none()
            && self.auth_fields.is_empty()
            && self.auth_cookies.is_empty()
            && self.in_flight.is_none()
            && self.error_pages.is_none()
            && self.upstream_host.is_none()
            && self.custom_headers.is_none()
            && self.rewrite.is_none()
            && self.pacer.is_none()
            && self.upstream_http.is_none()
            && self.retry.is_none()
            && self.buffering.is_none()
            && !self.ewma
            && !self.satisfied
    }
}

/// What the policy reads of a request.
pub struct Seen<'r> {
    pub method: &'r str,
    pub authority: &'r str,
    /// The path the route matched.
    pub path: &'r str,
    /// After `?`, without it.
    pub query: &'r str,
    pub tls: bool,
    /// The address teapot forwards as `X-Forwarded-For`.
    pub client: Option<IpAddr>,
    /// The request's first `Origin` and `Cookie` fields.
    pub origin: Option<&'r [u8]>,
    pub cookie: Option<&'r [u8]>,
    /// `Access-Control-Request-Method` and `-Headers`, read only for a
    /// route with CORS.
    pub cors_method: Option<&'r [u8]>,
    pub cors_headers: Option<&'r [u8]>,
    /// The request's first field named by the route's `canary-by-header`.
    pub canary_header: Option<&'r [u8]>,
}

pub const POLICY_REFUSED_BODY: &str = "503 this route's traffic policy cannot be served\n";
pub const FORBIDDEN_BODY: &str = "403 this client's address may not reach this route\n";
pub const TOO_MANY_BODY: &str = "429 too many requests from this client for this route\n";
pub const TOO_MANY_IN_FLIGHT_BODY: &str =
    "503 too many requests in flight from this client for this route\n";

/// The answer of a route part of whose policy cannot be served: it guards
/// the route by refusing every request (fail closed), before anything
/// else. A policy that could not be read (`policy_refused`), or the
/// custom headers' ConfigMap (`custom_headers_refused`, as ingress-nginx
/// denies the whole location whose ConfigMap it cannot read).
fn refusal(policy: &TrafficPolicy) -> Option<TrafficAnswer> {
    if policy.refused.is_some() {
        return Some(TrafficAnswer {
            status: 503,
            reason: "policy_refused",
            body: POLICY_REFUSED_BODY,
            headers: Vec::new(),
        });
    }
    policy
        .custom_headers
        .as_deref()
        .and_then(custom_headers::refused)
}

/// The policy's verdict for a request routed to a route with `policy`:
/// `Err` answers it; `Ok` forwards it with what the policy adds (`None`:
/// nothing, no allocation).
pub fn apply(
    policy: &TrafficPolicy,
    upstream: &Upstream,
    seen: &Seen<'_>,
) -> Result<Option<Box<Applied>>, TrafficAnswer> {
    // teapot's answers carry the route's CORS fields (cors::Cors::on_answer).
    let answer = |mut answer: TrafficAnswer| {
        if let Some(cors) = &policy.cors {
            answer.headers.extend(cors.on_answer(seen));
        }
        answer
    };
    if let Some(refused) = refusal(policy) {
        return Err(answer(refused));
    }
    let satisfied = match &policy.access {
        Some(access) => match satisfy::access(policy, access, seen.client) {
            satisfy::Access::Admitted { satisfied } => satisfied,
            satisfy::Access::Authenticate => false,
            satisfy::Access::Refused => {
                return Err(answer(TrafficAnswer {
                    status: 403,
                    reason: "policy_denied",
                    body: FORBIDDEN_BODY,
                    headers: Vec::new(),
                }));
            }
        },
        None => false,
    };
    // ingress-nginx applies `limit-connections` before the rates, and its
    // `limit_conn` answers 503 (its `limit-conn-status-code`). A request a
    // rate then refuses gives its place back as it returns.
    let in_flight = match &policy.connections {
        Some(limit) => limit.enter(seen.client).map_err(|_| {
            answer(TrafficAnswer {
                status: 503,
                reason: "policy_in_flight_limited",
                body: TOO_MANY_IN_FLIGHT_BODY,
                headers: Vec::new(),
            })
        })?,
        None => None,
    };
    if let Some(rate) = &policy.rate
        && let Err(seconds) = rate.admit(seen.client)
    {
        return Err(answer(TrafficAnswer {
            status: 429,
            reason: "policy_rate_limited",
            body: TOO_MANY_BODY,
            headers: vec![("retry-after", seconds.to_string())],
        }));
    }
    let proxying = policy.proxying.as_deref();
    if let Some(redirect) = &policy.redirect {
        let relative = proxying.is_some_and(|p| p.relative_redirects);
        return Err(answer(redirect_answer(
            redirect.status,
            redirect_location(&redirect.location, relative, seen),
        )));
    }
    if !seen.tls
        && let Some(ssl) = &policy.ssl_redirect
        && let Some(location) = https_location(
            ssl,
            seen,
            proxying.is_some_and(|p| p.preserve_trailing_slash),
        )
    {
        return Err(answer(redirect_answer(308, location)));
    }
    if let Some(root) = &policy.app_root
        && seen.path == "/"
    {
        // ingress-nginx: `return 302 $scheme://$http_host<app-root>`.
        let scheme = if seen.tls { "https" } else { "http" };
        return Err(answer(redirect_answer(
            302,
            format!("{scheme}://{}{root}", seen.authority),
        )));
    }
    let mut applied = Applied {
        in_flight,
        satisfied,
        ..Applied::default()
    };
    if let Some(cors) = &policy.cors {
        match cors.verdict(seen) {
            Some(cors::CorsVerdict::Preflight(fields)) => {
                return Err(TrafficAnswer {
                    status: 204,
                    reason: "cors_preflight",
                    body: "",
                    headers: fields,
                });
            }
            Some(cors::CorsVerdict::Refused) => {
                return Err(TrafficAnswer {
                    status: 204,
                    reason: "cors_preflight_refused",
                    body: "",
                    headers: Vec::new(),
                });
            }
            Some(cors::CorsVerdict::Actual(fields)) => applied.response_headers = fields,
            None => {}
        }
    }
    // ingress-nginx's balancer: a request its affinity cookie ties to the
    // route's backend stays there, one tied to the canary's (`sticky`)
    // goes there; only an untied request meets the canary rules.
    let affinity = policy.affinity.as_ref();
    let mut target = Some(upstream);
    if let Some(canary) = &policy.canary
        && !affinity.is_some_and(|a| a.pins(upstream, seen.cookie))
        && ((canary.rules.sticky
            && affinity.is_some_and(|a| a.pins(&canary.upstream, seen.cookie)))
            || canary::chooses(&canary.rules, seen.canary_header, seen.cookie))
    {
        applied.upstream = Some(canary.upstream.clone());
        // `legacy`: the canary's backend has no affinity.
        target = canary.rules.sticky.then_some(&*canary.upstream);
    }
    // The cookie names an endpoint of the backend the request goes to.
    if let Some(affinity) = affinity
        && let Some(target) = target
        && let Some(sticky) = affinity.choose(target, seen.cookie, seen.tls)
    {
        applied.endpoint = Some(sticky.endpoint);
        if let Some(cookie) = sticky.set_cookie {
            applied.response_headers.push(("set-cookie", cookie));
        }
    }
    if let Some(prefix) = &policy.forwarded_prefix {
        applied
            .request_headers
            .push(("x-forwarded-prefix", prefix.clone()));
    }
    if let Some(host) = proxying.and_then(|p| p.upstream_vhost.as_ref()) {
        applied.upstream_host = Some(host.clone());
    }
    applied.timeouts = policy.timeouts;
    applied.custom_headers = policy.custom_headers.clone();
    if let Some(rules) = &policy.response_rewrite {
        applied.rewrite = Some(rewrite::Rewriting::new(rules, seen));
    }
    applied.pacer = policy.bandwidth.map(bandwidth::Pacer::new);
    applied.upstream_http = policy.upstream_http.clone();
    applied.retry = policy.retry.clone();
    applied.buffering = policy.buffering;
    if let Some(rewrite) = &policy.rewrite
        && let Some(regex) = &rewrite.regex
    {
        applied.path = regex.rewrite(seen.path, &rewrite.target);
    }
    Ok((!applied.is_empty()).then(|| Box::new(applied)))
}

/// A redirect's `Location`: a path made absolute with the request's
/// scheme and host (without its port), as nginx's `absolute_redirect on`
/// and ingress-nginx's `port_in_redirect off` write it, unless the route
/// asks for `relative-redirects`.
fn redirect_location(location: &str, relative: bool, seen: &Seen<'_>) -> String {
    let mut buf = [0u8; 256];
    let host = teapot_api::host::normalize_request_host(seen.authority, &mut buf);
    match host {
        Some(host) if !relative && location.starts_with('/') && !location.starts_with("//") => {
            let scheme = if seen.tls { "https" } else { "http" };
            format!("{scheme}://{host}{location}")
        }
        _ => location.to_string(),
    }
}

/// Where a plain-HTTP request goes on HTTPS, when `ssl` covers its host;
/// `preserve_slash`: the target's trailing `/` is kept.
fn https_location(ssl: &SslRedirect, seen: &Seen<'_>, preserve_slash: bool) -> Option<String> {
    let mut buf = [0u8; 256];
    let host = teapot_api::host::normalize_request_host(seen.authority, &mut buf)?;
    let covered = match ssl {
        SslRedirect::All => true,
        // ingress-nginx's `no-tls-redirect-locations` default: an HTTP-01
        // challenge an Ingress serves itself (cert-manager's solver path
        // added in place) is answered over plain HTTP, as the ACME server
        // asks it. `force-ssl-redirect` and client certificates (`All`)
        // keep redirecting: those hosts are never served over plain HTTP.
        SslRedirect::Hosts(_) if seen.path.starts_with(CHALLENGE_PREFIX) => false,
        SslRedirect::Hosts(hosts) => hosts.iter().any(|h| h.matches(host)),
    };
    if !covered {
        return None;
    }
    let mut location = format!("https://{host}{}", seen.path);
    if !seen.query.is_empty() {
        location.push('?');
        location.push_str(seen.query);
    }
    // ingress-nginx drops one trailing slash of the target (its
    // `preserve-trailing-slash` off): `/` goes to `https://host`.
    if !preserve_slash && location.ends_with('/') {
        location.pop();
    }
    Some(location)
}

fn redirect_answer(status: u16, location: String) -> TrafficAnswer {
    TrafficAnswer {
        status,
        reason: "redirect",
        body: "",
        headers: vec![("location", location)],
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::compile::traffic::NginxAnnotations;
    use crate::live::rate_table::RateTable;

    fn policy(pairs: &[(&str, &str)]) -> TrafficPolicy {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (format!("nginx.ingress.kubernetes.io/{k}"), v.to_string()))
            .collect();
        let mut problems = Vec::new();
        NginxAnnotations::read(Some(&map), &mut problems)
            .policy("ns/a", || Arc::new(RateTable::new(64)), &mut problems)
            .unwrap()
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    fn apply(
        p: &TrafficPolicy,
        method: &str,
        path: &str,
        origin: Option<&str>,
        client: Option<IpAddr>,
    ) -> Result<Option<Box<Applied>>, TrafficAnswer> {
        let seen = Seen {
            method,
            authority: "a.example",
            path,
            query: "",
            tls: false,
            client,
            origin: origin.map(str::as_bytes),
            cookie: None,
            cors_method: None,
            cors_headers: None,
            canary_header: None,
        };
        super::apply(
            p,
            &Upstream::new("ns/web:80".into(), Vec::new(), None),
            &seen,
        )
    }

    #[test]
    fn order_access_rate_redirect_cors() {
        let p = policy(&[
            ("whitelist-source-range", "192.0.2.0/24"),
            ("limit-rpm", "1"),
            ("limit-burst-multiplier", "1"),
            ("app-root", "/app"),
            ("enable-cors", "true"),
        ]);
        let none = None;
        let origin = Some("https://c.example");
        // Outside the allow-list: 403, and nothing counted.
        let denied = apply(&p, "GET", "/", none, ip("198.51.100.1")).unwrap_err();
        assert_eq!(denied.status, 403);
        // Inside: app-root for `/` (302), counted...
        let root = apply(&p, "GET", "/", none, ip("192.0.2.1")).unwrap_err();
        assert_eq!(
            (root.status, &root.headers[0].1[..]),
            (302, "http://a.example/app")
        );
        // ...then the preflight from the same client, within the burst
        // (one plus one)...
        let pre = apply(&p, "OPTIONS", "/x", origin, ip("192.0.2.1")).unwrap_err();
        assert_eq!(pre.status, 204);
        assert!(
            pre.headers
                .contains(&("access-control-allow-origin", "*".into()))
        );
        // ...then over the limit.
        let limited = apply(&p, "GET", "/x", origin, ip("192.0.2.1")).unwrap_err();
        assert_eq!(limited.status, 429);
        assert_eq!(limited.headers[0].0, "retry-after");
        // Another client's request is forwarded with the CORS fields.
        let applied = apply(&p, "GET", "/x", origin, ip("192.0.2.2"))
            .unwrap()
            .unwrap();
        assert_eq!(applied.response_headers[0].1, "*");
    }

    /// A policy that could not be read answers 503 before anything else,
    /// even to a client its allow-list would have let in.
    #[test]
    fn a_refused_policy_answers_every_request_503() {
        let mut p = policy(&[("whitelist-source-range", "192.0.2.0/24")]);
        let headers = crate::compile::custom_headers::CustomHeaders {
            fields: Vec::new(),
            refused: Some("data: refused".into()),
        };
        p.custom_headers = Some(std::sync::Arc::new(headers));
        let mut headers_only = policy(&[("whitelist-source-range", "192.0.2.0/24")]);
        headers_only.custom_headers = p.custom_headers.clone();
        p.refused = Some("clientAddresses.allow: not-an-address".into());
        for client in [ip("192.0.2.1"), ip("198.51.100.1"), None] {
            let refused = apply(&p, "GET", "/", None, client).unwrap_err();
            assert_eq!(
                (refused.status, refused.reason, refused.body),
                (503, "policy_refused", POLICY_REFUSED_BODY)
            );
            // The custom headers' refusal, on the same path, keeps its
            // reason and body.
            let refused = apply(&headers_only, "GET", "/", None, client).unwrap_err();
            assert_eq!(
                (refused.status, refused.reason, refused.body),
                (503, "custom_headers_refused", custom_headers::REFUSED_BODY)
            );
        }
    }

    /// `limit-connections`: the forward's [`Applied`] holds the client's
    /// count; one more gets 503 until it is dropped.
    #[test]
    fn in_flight_limit_is_held_by_the_forward() {
        let p = policy(&[("limit-connections", "1")]);
        let client = ip("192.0.2.1");
        let held = apply(&p, "GET", "/", None, client).unwrap().unwrap();
        assert!(held.in_flight.is_some());
        let refused = apply(&p, "GET", "/", None, client).unwrap_err();
        assert_eq!(
            (refused.status, refused.reason, refused.body),
            (503, "policy_in_flight_limited", TOO_MANY_IN_FLIGHT_BODY)
        );
        // Another client is not held up.
        assert!(apply(&p, "GET", "/", None, ip("192.0.2.2")).is_ok());
        drop(held);
        assert!(apply(&p, "GET", "/", None, client).is_ok());
    }

    /// `ssl-redirect` (on by default for TLS hosts) leaves an HTTP-01
    /// challenge path on plain HTTP, as ingress-nginx's
    /// `no-tls-redirect-locations`; `force-ssl-redirect` and client
    /// certificates (`All`) do not.
    #[test]
    fn ssl_redirect_spares_the_acme_challenge_path() {
        let hosts = vec![teapot_api::HostPattern::parse("a.example").unwrap()];
        let p = TrafficPolicy {
            ssl_redirect: Some(SslRedirect::Hosts(hosts)),
            ..TrafficPolicy::default()
        };
        let r = apply(&p, "GET", "/login/", None, ip("192.0.2.1")).unwrap_err();
        assert_eq!(
            (r.status, &r.headers[0].1[..]),
            (308, "https://a.example/login")
        );
        let token = "/.well-known/acme-challenge/abc";
        assert!(apply(&p, "GET", token, None, ip("192.0.2.1")).is_ok());
        let all = TrafficPolicy {
            ssl_redirect: Some(SslRedirect::All),
            ..TrafficPolicy::default()
        };
        let r = apply(&all, "GET", token, None, ip("192.0.2.1")).unwrap_err();
        assert_eq!(r.status, 308);
    }

    /// Every answer teapot makes on a CORS route carries the fields a
    /// backend's answer would (ingress-nginx's `more_set_headers` apply
    /// to every status), so a browser sees the refusal itself.
    #[test]
    fn refusals_on_a_cors_route_carry_its_fields() {
        let p = policy(&[
            ("whitelist-source-range", "192.0.2.0/24"),
            ("limit-rpm", "1"),
            ("limit-burst-multiplier", "1"),
            ("enable-cors", "true"),
            ("cors-allow-origin", "https://app.example"),
        ]);
        let origin = Some("https://app.example");
        let allow_origin = |a: &TrafficAnswer| {
            a.headers
                .iter()
                .find(|(n, _)| *n == "access-control-allow-origin")
                .map(|(_, v)| v.clone())
        };
        let denied = apply(&p, "GET", "/", origin, ip("198.51.100.1")).unwrap_err();
        assert_eq!(denied.status, 403);
        assert_eq!(
            allow_origin(&denied).as_deref(),
            Some("https://app.example")
        );
        for _ in 0..2 {
            let _ = apply(&p, "GET", "/", origin, ip("192.0.2.1"));
        }
        let limited = apply(&p, "GET", "/", origin, ip("192.0.2.1")).unwrap_err();
        assert_eq!(limited.status, 429);
        assert_eq!(limited.headers[0].0, "retry-after");
        assert_eq!(
            allow_origin(&limited).as_deref(),
            Some("https://app.example")
        );
        // An origin the route does not allow gets none, as on a forward.
        let other = apply(
            &p,
            "GET",
            "/",
            Some("https://evil.example"),
            ip("192.0.2.1"),
        );
        assert_eq!(allow_origin(&other.unwrap_err()), None);
    }

    /// A redirect to a path is made absolute (ingress-nginx's default,
    /// without the port), or sent as written with `relative-redirects`;
    /// `preserve-trailing-slash` keeps the ssl-redirect's last `/`; and
    /// `upstream-vhost` is the forward's Host.
    #[test]
    fn proxying_annotations_shape_redirects_and_the_host() {
        let p = policy(&[("permanent-redirect", "/new")]);
        let ported = Seen {
            authority: "a.example:8080",
            ..seen("/x")
        };
        let r = super::apply(&p, &upstream(), &ported).unwrap_err();
        assert_eq!(r.headers, vec![("location", "http://a.example/new".into())]);
        let p = policy(&[
            ("permanent-redirect", "/new"),
            ("relative-redirects", "true"),
        ]);
        let r = super::apply(&p, &upstream(), &ported).unwrap_err();
        assert_eq!(r.headers, vec![("location", "/new".into())]);
        // An absolute target is left alone either way.
        let p = policy(&[("permanent-redirect", "https://b.example/")]);
        let r = super::apply(&p, &upstream(), &ported).unwrap_err();
        assert_eq!(r.headers, vec![("location", "https://b.example/".into())]);

        let hosts = vec![teapot_api::HostPattern::parse("a.example").unwrap()];
        let mut p = policy(&[("preserve-trailing-slash", "true")]);
        p.ssl_redirect = Some(SslRedirect::Hosts(hosts));
        let r = super::apply(&p, &upstream(), &seen("/login/")).unwrap_err();
        assert_eq!(r.headers[0].1, "https://a.example/login/");

        let p = policy(&[("upstream-vhost", "b.internal")]);
        let applied = super::apply(&p, &upstream(), &seen("/")).unwrap().unwrap();
        assert_eq!(applied.upstream_host.as_deref(), Some("b.internal"));
    }

    fn upstream() -> Upstream {
        Upstream::new("ns/web:80".into(), Vec::new(), None)
    }

    fn seen(path: &str) -> Seen<'_> {
        Seen {
            method: "GET",
            authority: "a.example",
            path,
            query: "",
            tls: false,
            client: ip("192.0.2.1"),
            origin: None,
            cookie: None,
            cors_method: None,
            cors_headers: None,
            canary_header: None,
        }
    }

    #[test]
    fn redirect_answers_everything() {
        let p = policy(&[
            ("temporal-redirect", "https://www.example.com/"),
            ("temporal-redirect-code", "307"),
        ]);
        let none = None;
        let r = apply(&p, "POST", "/any", none, ip("192.0.2.1")).unwrap_err();
        assert_eq!(r.status, 307);
        assert_eq!(
            r.headers,
            vec![("location", "https://www.example.com/".into())]
        );
    }
}
