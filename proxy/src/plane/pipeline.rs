//! The steps of a request around the routing decision, written once for
//! both HTTP versions (HTTP/1: crate::plane::h1, HTTP/2: crate::plane::h2),
//! as Pingora and hyper keep one proxy path apart from their codecs:
//!
//! 1. the Host rules ([`check_host`]: one authority, required on
//!    HTTP/1.1),
//! 2. 421 for a host the TLS connection's certificate does not serve,
//! 3. the ACME HTTP-01 answer (a token that is not ours goes on to the
//!    routes: a tenant may run its own ACME client behind teapot),
//! 4. the connection facts and the request's for Gateway API matches,
//! 5. [`decide_request`], then the route's traffic policy
//!    (crate::plane::traffic: allow-lists, rate limits, redirects, CORS),
//!    and last its external authentication ([`authenticate`]),
//! 6. after it, the Gateway filters' shared parts: mirrors
//!    ([`start_mirrors`]), the rewritten target and host
//!    (crate::plane::filters: `chained_target`, `last_host`), the read
//!    timeout (`Router::read_timeout`), and the edit rules
//!    (crate::plane::forwarding, `teapot_h1::is_hop_by_hop`).
//!
//! What each engine keeps is its codec's: building the [`Head`] from its
//! request (HTTP/2's front-door checks, HTTP/1's `Host` count), writing an
//! answer, and applying the edits to its own head (bytes for HTTP/1, a
//! header map for HTTP/2).

use teapot_h1::ConnInfo;

use crate::compile::acme::CHALLENGE_PREFIX;
use crate::compile::routes::Route;
use crate::compile::traffic::ExternalAuth;
use crate::live::fairness::TenantPermit;
use crate::plane::decide::{
    Answer, Decision, Forward, GatewayForward, Head, MISDIRECTED, NO_ENDPOINT, RequestFacts,
    RequestHeaders, check_host, decide_request,
};
use crate::plane::edge::Refusal;
use crate::plane::metrics;
use crate::plane::mirror::mirror;
use crate::plane::proxy::Router;
use crate::plane::trace;
use crate::plane::traffic::{self, TrafficAnswer};

/// What both engines know of a request when it is to be routed.
pub(super) struct Request<'r> {
    pub head: Head<'r>,
    pub method: &'r str,
    /// After `?`, without it; empty when there is none.
    pub query: &'r str,
    /// `Sync`: held across the ACME lookup's await in a `Send` future.
    pub headers: &'r (dyn RequestHeaders + Sync),
}

/// Where a request goes, or what answers it.
#[derive(Debug)]
pub(super) enum Routed {
    /// Teapot answers: a Host rule, 421, or the decision's own answer
    /// (with the route it is about, when one matched).
    Answer(Answer, Option<Route>),
    /// The key authorization of a pending HTTP-01 challenge: 200,
    /// `text/plain`.
    AcmeChallenge(String),
    Forward(Forward),
    /// The route's traffic policy answers (403, 429, a redirect, a CORS
    /// preflight, the external authentication's 401, 403, 500 or 503).
    Policy(TrafficAnswer, Route),
    /// The route has no endpoint and a `default-backend`: its page for
    /// 503 (crate::plane::traffic::errors), and the tenant's slot, held
    /// until the page is sent.
    ErrorPage(traffic::errors::Page, Route, Option<TenantPermit>),
}

impl From<Decision> for Routed {
    fn from(decision: Decision) -> Self {
        match decision {
            Decision::Forward(forward) => Routed::Forward(forward),
            Decision::Answer(answer, route) => Routed::Answer(answer, route),
        }
    }
}

/// Steps 1 to 5 for a request on `conn`. The awaits are the ACME lookup
/// (only for a path under the challenge prefix) and the external
/// authentication sub-request (only for a route with `auth-url`); the
/// snapshot's guard and the facts (not `Send`) live in no await.
pub(super) async fn route(router: &Router, req: &Request<'_>, conn: &ConnInfo) -> Routed {
    let head = &req.head;
    if let Err(answer) = check_host(head) {
        return Routed::Answer(answer, None);
    }
    if router.misdirected(conn.tls, conn.sni.as_deref(), head.authority, conn.local) {
        return Routed::Answer(MISDIRECTED, None);
    }
    // The Host's client-certificate setting (crate::plane::client_cert):
    // 421 when the connection was not checked as it asks, its refusal, or
    // the fields passed on.
    let client_cert = if conn.tls {
        match crate::plane::client_cert::check(&router.snapshots.load(), conn, head.authority) {
            Ok(pass) => pass,
            Err(answer) => return Routed::Answer(answer, None),
        }
    } else {
        Vec::new()
    };
    if let Some(acme) = &router.acme
        && let Some(token) = head.path.strip_prefix(CHALLENGE_PREFIX)
        && let Some(answer) = acme.challenge_response(token).await
    {
        return Routed::AcmeChallenge(answer);
    }
    let screened = match decide(router, req, conn) {
        Decision::Forward(forward) if forward.route.traffic().is_some() => {
            screen(forward, req, conn)
        }
        Decision::Answer(answer, Some(route))
            if route.traffic().is_some_and(|t| t.custom_errors.is_some())
                && answer.reason == NO_ENDPOINT.reason =>
        {
            return Box::pin(no_endpoint_page(router, answer, route, req, conn)).await;
        }
        Decision::Answer(answer, Some(route))
            if answer.reason == NO_ENDPOINT.reason
                && route.traffic().is_some_and(|t| t.cors.is_some()) =>
        {
            return no_endpoint_with_cors(answer, route, req, conn);
        }
        // The client-certificate fields still go on below.
        Decision::Forward(forward) if !client_cert.is_empty() => Routed::Forward(forward),
        decision => return decision.into(),
    };
    // Basic authentication (crate::plane::traffic::basic_auth), before
    // the `auth-url` sub-request as nginx's `auth_basic` comes first.
    let screened = match screened {
        Routed::Forward(mut forward) => {
            // `satisfy: any`: one check passed is enough
            // (crate::plane::traffic::satisfy).
            let satisfied = forward.policy.as_ref().is_some_and(|p| p.satisfied);
            match forward.route.traffic().and_then(|t| t.basic_auth.clone()) {
                Some(basic) if !satisfied => {
                    let authorization = req.headers.first("authorization");
                    let client = conn.client.map(|a| a.ip());
                    // Boxed: the check's state lives only while it runs.
                    let check = traffic::basic_auth::check(&basic, authorization, client);
                    let any = forward
                        .route
                        .traffic()
                        .is_some_and(|t| traffic::satisfy::any(t));
                    match Box::pin(check).await {
                        Ok(()) => {
                            if any {
                                forward.policy.get_or_insert_default().satisfied = true;
                            }
                            Routed::Forward(forward)
                        }
                        Err(answer)
                            if forward.route.traffic().is_some_and(|t| {
                                traffic::satisfy::auth_url_decides(t, answer.status)
                            }) =>
                        {
                            Routed::Forward(forward)
                        }
                        Err(mut answer) => {
                            traffic::cors::onto_answer(&mut answer, forward.policy.as_deref());
                            Routed::Policy(answer, forward.route)
                        }
                    }
                }
                _ => Routed::Forward(forward),
            }
        }
        other => other,
    };
    let authenticated = match screened {
        Routed::Forward(forward) => match forward.route.traffic().and_then(|t| t.auth.clone()) {
            // Boxed: the sub-request's state lives only while it runs,
            // not in every request's (and connection's) future.
            Some(auth) if !forward.policy.as_ref().is_some_and(|p| p.satisfied) => {
                Box::pin(authenticate(router, forward, &auth, req, conn)).await
            }
            _ => Routed::Forward(forward),
        },
        other => other,
    };
    let routed = match authenticated {
        Routed::Forward(mut forward) => {
            if let Some(errors) = forward
                .route
                .traffic()
                .and_then(|t| t.custom_errors.clone())
            {
                let pages = error_pages(router, errors, &forward, req, conn);
                forward.policy.get_or_insert_default().error_pages = Some(Box::new(pages));
            }
            if !client_cert.is_empty() {
                let policy = forward.policy.get_or_insert_default();
                policy.request_headers.extend(client_cert);
            }
            Routed::Forward(forward)
        }
        other => other,
    };
    if let Routed::Policy(answer, route) = &routed {
        let tenant = route.tenant().map_or(metrics::OPERATOR, |g| &*g.cluster);
        router
            .metrics
            .policy_answers
            .with_label_values(&[tenant, answer.reason])
            .inc();
    }
    routed
}

/// What the error backend of a route with `custom-http-errors` is told
/// of a forwarded request, should its response be replaced.
fn error_pages(
    router: &Router,
    errors: std::sync::Arc<crate::compile::traffic::CustomErrors>,
    forward: &Forward,
    req: &Request<'_>,
    conn: &ConnInfo,
) -> traffic::errors::ErrorPages {
    let trusted = router.cached_series_of(Some(&forward.route)).1;
    let request_id = trace::request_id(req.headers.first(trace::REQUEST_ID), trusted);
    let target = original_target(req);
    let original = original(req, conn, &target, request_id.as_str());
    let (backend, limits) = (forward.upstream.clone(), router.options.auth);
    traffic::errors::ErrorPages::new(errors, backend, &original, limits)
}

/// A route without endpoints whose Ingress names a `default-backend`: the
/// page for 503 (ingress-nginx sends such requests to the default
/// backend), unless the route's allow-lists refuse the client, who then
/// gets teapot's own answer as before. The page costs a sub-request and
/// a held body, so the request enters its tenant's gate first, as a
/// forwarded one does: over the tenant's rate or in-flight bound it gets
/// the tenant's 429 or 503 and the error backend is not asked.
async fn no_endpoint_page(
    router: &Router,
    answer: Answer,
    route: Route,
    req: &Request<'_>,
    conn: &ConnInfo,
) -> Routed {
    let Some(traffic) = route.traffic() else {
        return Routed::Answer(answer, Some(route));
    };
    let Some(errors) = traffic.custom_errors.clone() else {
        return Routed::Answer(answer, Some(route));
    };
    if traffic
        .access
        .as_ref()
        .is_some_and(|a| !a.admits(conn.client.map(|c| c.ip())))
    {
        return Routed::Answer(answer, Some(route));
    }
    let permit = match route.tenant().map(|gate| gate.enter()).transpose() {
        Ok(permit) => permit,
        Err(over) => return Routed::Answer(Answer::refused(Refusal::from(over)), Some(route)),
    };
    let trusted = router.cached_series_of(Some(&route)).1;
    let request_id = trace::request_id(req.headers.first(trace::REQUEST_ID), trusted);
    let target = original_target(req);
    let original = original(req, conn, &target, request_id.as_str());
    let (backend, limits) = (route.upstream.clone(), router.options.auth);
    let pages = traffic::errors::ErrorPages::new(errors, backend, &original, limits);
    let page = pages.page(answer.status).await;
    Routed::ErrorPage(page, route, permit)
}

/// A route without endpoints on a CORS route: teapot's 503 with the
/// route's CORS fields, as every other answer of such a route carries
/// them (ingress-nginx's `more_set_headers` apply to every status), so a
/// browser shows the 503 rather than a CORS error.
fn no_endpoint_with_cors(
    answer: Answer,
    route: Route,
    req: &Request<'_>,
    conn: &ConnInfo,
) -> Routed {
    let Some(cors) = route.traffic().and_then(|t| t.cors.as_ref()) else {
        return Routed::Answer(answer, Some(route));
    };
    let seen = traffic::Seen {
        method: req.method,
        authority: req.head.authority,
        path: req.head.path,
        query: req.query,
        tls: conn.tls,
        client: conn.client.map(|a| a.ip()),
        origin: req.headers.first("origin"),
        cookie: None,
        cors_method: req.headers.first("access-control-request-method"),
        cors_headers: req.headers.first("access-control-request-headers"),
        canary_header: None,
    };
    let headers = cors.on_answer(&seen);
    let answer = TrafficAnswer {
        status: answer.status,
        reason: answer.reason,
        body: answer.body,
        headers,
    };
    Routed::Policy(answer, route)
}

/// The request's target as the client sent it: path and query.
fn original_target<'r>(req: &Request<'r>) -> std::borrow::Cow<'r, str> {
    match req.query {
        "" => std::borrow::Cow::Borrowed(req.head.path),
        query => std::borrow::Cow::Owned(format!("{}?{query}", req.head.path)),
    }
}

/// What a sub-request (authentication, error page) tells of the request.
fn original<'r>(
    req: &'r Request<'_>,
    conn: &ConnInfo,
    target: &'r str,
    request_id: &'r str,
) -> traffic::auth::Original<'r> {
    traffic::auth::Original {
        method: req.method,
        authority: req.head.authority,
        target,
        tls: conn.tls,
        client: conn.client.map(|a| a.ip()),
        request_id,
        headers: req.headers,
    }
}

/// The pipeline's last step for a route with `auth-url`: the forward goes
/// on with the authentication service's fields, or its answer replaces
/// it (dropping the tenant's slot).
async fn authenticate(
    router: &Router,
    mut forward: Forward,
    auth: &ExternalAuth,
    req: &Request<'_>,
    conn: &ConnInfo,
) -> Routed {
    let trusted = router.cached_series_of(Some(&forward.route)).1;
    let request_id = trace::request_id(req.headers.first(trace::REQUEST_ID), trusted);
    let target = original_target(req);
    let original = original(req, conn, &target, request_id.as_str());
    let terms = forward.route.traffic().and_then(|t| t.auth_terms.clone());
    let (verdict, outcome, cookies) = traffic::auth::check_cached(
        auth,
        forward
            .route
            .traffic()
            .and_then(|t| t.auth_cache.as_deref()),
        terms.as_deref(),
        router.options.auth,
        &original,
    )
    .await;
    let tenant = if auth.owner.is_empty() {
        metrics::OPERATOR
    } else {
        &auth.owner
    };
    router
        .metrics
        .auth_requests
        .with_label_values(&[tenant, outcome.label()])
        .inc();
    match verdict {
        Ok(fields) if fields.is_empty() && cookies.is_empty() => Routed::Forward(forward),
        Ok(fields) => {
            let policy = forward.policy.get_or_insert_default();
            policy.auth_fields = fields;
            policy.auth_cookies = cookies;
            Routed::Forward(forward)
        }
        Err(mut answer) => {
            traffic::cors::onto_answer(&mut answer, forward.policy.as_deref());
            Routed::Policy(answer, forward.route)
        }
    }
}

fn decide(router: &Router, req: &Request<'_>, conn: &ConnInfo) -> Decision {
    let facts = RequestFacts {
        method: req.method,
        query: Some(req.query),
        headers: Some(req.headers),
        tls: Some(conn.tls),
        local: conn.local,
    };
    decide_request(&router.snapshots.load(), &router.edge, &req.head, &facts)
}

/// The pipeline's step after the decision, for a forward whose route has
/// a traffic policy: the client is the address teapot forwards as
/// `X-Forwarded-For`, the path the one the route matched. A refusal drops
/// the forward, and with it the tenant's slot.
fn screen(mut forward: Forward, req: &Request<'_>, conn: &ConnInfo) -> Routed {
    let Some(traffic) = forward.route.traffic() else {
        return Routed::Forward(forward);
    };
    // Every cookie field only where a cookie is looked for by name.
    let cookie = if traffic.affinity.is_some()
        || traffic.canary.is_some()
        || traffic.hash_by.as_ref().is_some_and(|h| h.reads_cookie())
        || traffic
            .global_rate
            .as_ref()
            .and_then(|g| g.key.as_ref())
            .is_some_and(|k| k.reads_cookie())
    {
        traffic::affinity::cookies(req.headers)
    } else {
        req.headers.first("cookie").map(std::borrow::Cow::Borrowed)
    };
    let seen = traffic::Seen {
        method: req.method,
        authority: req.head.authority,
        path: forward.path.as_deref().unwrap_or(req.head.path),
        query: req.query,
        tls: conn.tls,
        client: conn.client.map(|a| a.ip()),
        origin: req.headers.first("origin"),
        cookie: cookie.as_deref(),
        cors_method: traffic
            .cors
            .as_ref()
            .and_then(|_| req.headers.first("access-control-request-method")),
        cors_headers: traffic
            .cors
            .as_ref()
            .and_then(|_| req.headers.first("access-control-request-headers")),
        canary_header: traffic
            .canary
            .as_ref()
            .and_then(|c| c.rules.header.as_deref())
            .and_then(|name| req.headers.first(name)),
    };
    let client = seen.client;
    match traffic::apply(traffic, &forward.upstream, &seen) {
        Ok(mut applied) => {
            // `global-rate-limit`, after the route's own answers, as
            // ingress-nginx throttles after nginx's `return`.
            if let Some(global) = &traffic.global_rate {
                let counted = traffic::global_rate::Request {
                    path: req.head.path,
                    query: req.query,
                    authority: req.head.authority,
                    client,
                    headers: req.headers,
                    cookies: cookie.as_deref(),
                };
                if let Err(mut answer) = traffic::global_rate::admit(global, &counted) {
                    if let Some(cors) = &traffic.cors {
                        answer.headers.extend(cors.on_answer(&seen));
                    }
                    return Routed::Policy(answer, forward.route);
                }
            }
            if let Some(path) = applied.as_mut().and_then(|a| a.path.take()) {
                forward.path = Some(path);
            }
            if let Some(upstream) = applied.as_mut().and_then(|a| a.upstream.take()) {
                forward.upstream = upstream;
            }
            // `upstream-hash-by`, on the backend the request goes to; an
            // affinity cookie's endpoint wins, as ingress-nginx's balancer
            // takes `affinity` over the hash.
            if let Some(hash) = &traffic.hash_by
                && applied.as_ref().is_none_or(|a| a.endpoint.is_none())
            {
                let vars = traffic::hash_by::Vars {
                    path: req.head.path,
                    query: req.query,
                    authority: req.head.authority,
                    client,
                    headers: req.headers,
                };
                let key = hash.key(&vars, cookie.as_deref());
                if let Some(i) = hash.choose(&forward.upstream, key) {
                    applied.get_or_insert_default().endpoint = Some(i);
                }
            }
            // `load-balance: ewma`, where neither chose: ingress-nginx's
            // balancer takes affinity and `upstream-hash-by` over it.
            if traffic.ewma {
                let applied = applied.get_or_insert_default();
                applied.ewma = true;
                if applied.endpoint.is_none() {
                    applied.endpoint = traffic::ewma::choose(&forward.upstream);
                }
            }
            forward.policy = applied;
            Routed::Forward(forward)
        }
        Err(answer) => Routed::Policy(answer, forward.route),
    }
}

/// Starts the RequestMirror copies of a forwarded request (each on its
/// own task, within its namespace's slots): `target` is what the backend
/// gets before any rewrite (the normalised path, the query as sent);
/// `headers` lists the client's fields, once per mirror.
pub(super) fn start_mirrors<'h, I>(
    router: &Router,
    gateway: &GatewayForward,
    method: &str,
    target: &str,
    authority: &str,
    headers: impl Fn() -> I,
) where
    I: Iterator<Item = (&'h str, &'h [u8])>,
{
    for m in gateway.each().flat_map(|f| &f.mirrors) {
        mirror(
            m,
            method,
            target,
            authority,
            headers(),
            &router.metrics.mirrors_dropped,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arc_swap::ArcSwap;
    use http::HeaderMap;
    use rustls::sign::CertifiedKey;
    use teapot_api::HostPattern;
    use teapot_h1::HeaderEdits;
    use teapot_model::certificate::TlsCertificate;

    use super::*;
    use crate::compile::CompileOptions;
    use crate::compile::acme::AcmeHosts;
    use crate::compile::tests::compile_test_docs;
    use crate::plane::decide::tests::DOCS;
    use crate::plane::decide::{MANY_HOSTS, NO_HOST, NO_ROUTE};
    use crate::plane::metrics::Metrics;
    use crate::plane::proxy::UpstreamOptions;
    use crate::plane::tls::SniResolver;
    use crate::plane::{AcmeResponder, forwarding, trace};

    #[derive(Debug)]
    struct Acme;

    #[async_trait::async_trait]
    impl AcmeResponder for Acme {
        async fn challenge_response(&self, token: &str) -> Option<String> {
            (token == "ours").then(|| "ours.thumbprint".to_string())
        }
        fn certificate(&self, _: &AcmeHosts, _: &str) -> Option<Arc<CertifiedKey>> {
            None
        }
    }

    /// A router over `DOCS`, answering the ACME token `ours`, with a TLS
    /// listener whose certificate for `a.example` is its own.
    fn router() -> Router {
        let key = || TlsCertificate::self_signed_default().unwrap().key;
        let mut snapshot = compile_test_docs(&[DOCS.to_string()], &CompileOptions::default());
        snapshot
            .certs
            .insert(&HostPattern::parse("a.example").unwrap(), key());
        let snapshots = Arc::new(ArcSwap::from_pointee(snapshot));
        let tls = SniResolver::new(snapshots.clone(), key());
        Router::new(
            snapshots,
            Metrics::new().unwrap(),
            UpstreamOptions::default(),
        )
        .with_acme(Some(Arc::new(Acme)))
        .with_tls(Some(Arc::new(tls)))
    }

    /// A request as the HTTP/1 engine sees it (`Host` required, counted).
    fn h1<'a>(
        authority: &'a str,
        path: &'a str,
        headers: &'a (dyn RequestHeaders + Sync),
    ) -> Request<'a> {
        Request {
            head: Head {
                host_headers: usize::from(!authority.is_empty()),
                authority,
                path,
                requires_host: true,
                declared_length: None,
            },
            method: "GET",
            query: "",
            headers,
        }
    }

    fn conn(tls: bool, sni: Option<&str>) -> ConnInfo {
        ConnInfo {
            client: Some("192.0.2.7:40000".parse().unwrap()),
            local: Some("127.0.0.1:443".parse().unwrap()),
            tls,
            sni: sni.map(Arc::from),
            ..ConnInfo::default()
        }
    }

    fn answer(routed: Routed) -> Answer {
        match routed {
            Routed::Answer(answer, _) => answer,
            other => panic!("not an answer: {other:?}"),
        }
    }

    #[tokio::test]
    async fn each_early_answer() {
        let router = router();
        let none: &[(&str, &str)] = &[];
        let plain = conn(false, None);
        // The Host rules: HTTP/1.1 without a Host, two Hosts.
        let missing = route(&router, &h1("", "/", &none), &plain).await;
        assert_eq!(answer(missing), NO_HOST);
        let mut two = h1("a.example", "/", &none);
        two.head.host_headers = 2;
        assert_eq!(answer(route(&router, &two, &plain).await), MANY_HOSTS);
        // 421: the TLS connection named another host than it asks for.
        let other_sni = conn(true, Some("other.example"));
        let misdirected = route(&router, &h1("a.example", "/", &none), &other_sni).await;
        assert_eq!(answer(misdirected), MISDIRECTED);
        let same_sni = conn(true, Some("a.example"));
        let served = route(&router, &h1("a.example", "/", &none), &same_sni).await;
        assert!(matches!(served, Routed::Forward(_)), "{served:?}");
        // ACME HTTP-01: our token is answered before routing, on any host;
        // another token goes on to the routes.
        let ours = route(
            &router,
            &h1("unknown.example", "/.well-known/acme-challenge/ours", &none),
            &plain,
        )
        .await;
        assert!(matches!(&ours, Routed::AcmeChallenge(a) if a == "ours.thumbprint"));
        let theirs = route(
            &router,
            &h1("a.example", "/.well-known/acme-challenge/theirs", &none),
            &plain,
        )
        .await;
        assert!(matches!(theirs, Routed::Forward(_)), "{theirs:?}");
        // The decision's own answer: no route for the host.
        let unknown = answer(route(&router, &h1("unknown.example", "/", &none), &plain).await);
        assert_eq!(unknown, NO_ROUTE);
    }

    /// A CORS route without endpoints: its 503 carries the route's CORS
    /// fields for an allowed origin (none for another), as every other
    /// answer of the route does; a route without CORS keeps teapot's own.
    #[tokio::test]
    async fn the_no_endpoint_503_carries_the_routes_cors_fields() {
        let cors = crate::plane::decide::tests::ops_ingress(
            "cors",
            "cors.example",
            "nginx.ingress.kubernetes.io/enable-cors: 'true', nginx.ingress.kubernetes.io/cors-allow-origin: 'https://app.example'",
            "empty",
        );
        let snapshot = compile_test_docs(&[DOCS.to_string(), cors], &CompileOptions::default());
        let router = Router::new(
            Arc::new(ArcSwap::from_pointee(snapshot)),
            Metrics::new().unwrap(),
            UpstreamOptions::default(),
        );
        let plain = conn(false, None);
        let allowed: &[(&str, &str)] = &[("origin", "https://app.example")];
        match route(&router, &h1("cors.example", "/x", &allowed), &plain).await {
            Routed::Policy(answer, _) => {
                assert_eq!((answer.status, answer.reason), (503, NO_ENDPOINT.reason));
                assert_eq!(answer.body, NO_ENDPOINT.body);
                assert!(
                    answer
                        .headers
                        .contains(&("access-control-allow-origin", "https://app.example".into())),
                    "{:?}",
                    answer.headers
                );
            }
            other => panic!("{other:?}"),
        }
        let other: &[(&str, &str)] = &[("origin", "https://evil.example")];
        match route(&router, &h1("cors.example", "/x", &other), &plain).await {
            Routed::Policy(answer, _) => {
                assert_eq!(answer.status, 503);
                assert!(answer.headers.is_empty(), "{:?}", answer.headers);
            }
            other => panic!("{other:?}"),
        }
        let none: &[(&str, &str)] = &[];
        let plain_route = route(&router, &h1("a.example", "/empty", &none), &plain).await;
        assert_eq!(answer(plain_route), NO_ENDPOINT);
    }

    /// The condition `type_` of the Ingress `name`'s report.
    fn ingress_condition(
        snapshot: &crate::compile::snapshot::Snapshot,
        name: &str,
        type_: &str,
    ) -> crate::compile::snapshot::Condition {
        let report = snapshot.report.ingresses.iter().find(|r| r.name == name);
        let mut conditions = report.map(|r| r.conditions.iter()).into_iter().flatten();
        conditions
            .rfind(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("{name} has no {type_}"))
            .clone()
    }

    /// `rewrite-target` with capture groups: the path the backend gets,
    /// the query as sent; a rule without a match or another Ingress's
    /// rule is not rewritten.
    #[tokio::test]
    async fn rewrite_target_takes_the_capture_groups() {
        let ingress = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: rewrite
  namespace: ops
  annotations:
    nginx.ingress.kubernetes.io/rewrite-target: /$2
spec:
  ingressClassName: teapot
  rules:
  - host: r.example
    http:
      paths:
      - {path: /something(/|$)(.*), pathType: ImplementationSpecific, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /(unclosed, pathType: ImplementationSpecific, backend: {service: {name: web, port: {number: 80}}}}
";
        let snapshot = compile_test_docs(
            &[DOCS.to_string(), ingress.to_string()],
            &CompileOptions::default(),
        );
        let problems = ingress_condition(&snapshot, "rewrite", "AnnotationsAccepted");
        assert!(
            problems.message.contains("(unclosed"),
            "{}",
            problems.message
        );
        let router = Router::new(
            Arc::new(ArcSwap::from_pointee(snapshot)),
            Metrics::new().unwrap(),
            UpstreamOptions::default(),
        );
        let none: &[(&str, &str)] = &[];
        let conn = conn(false, None);
        let forwarded = async |host: &str, path: &str| {
            let mut req = h1(host, path, &none);
            req.query = "a=1";
            match route(&router, &req, &conn).await {
                Routed::Forward(f) => f.path,
                other => panic!("{path}: {other:?}"),
            }
        };
        for (path, want) in [
            ("/something", "/"),
            ("/something/", "/"),
            ("/Something/new/x", "/new/x"),
        ] {
            assert_eq!(forwarded("r.example", path).await.as_deref(), Some(want));
        }
        assert!(matches!(
            route(&router, &h1("r.example", "/elsewhere", &none), &conn).await,
            Routed::Answer(..)
        ));
        // The other Ingress's routes are not rewritten.
        assert_eq!(forwarded("a.example", "/something/new").await, None);
    }

    /// A canary Ingress's backend on the main Ingress's route: the header,
    /// then the cookie, then the weight; a canary for a rule no Ingress of
    /// its tenant has is reported, not served.
    #[tokio::test]
    async fn canary_rules_choose_the_canary_backend() {
        let canary = |name: &str, host: &str, annotations: &str| {
            let annotations = format!("nginx.ingress.kubernetes.io/canary: 'true', {annotations}");
            crate::plane::decide::tests::ops_ingress(name, host, &annotations, "empty")
        };
        let snapshot = compile_test_docs(
            &[
                DOCS.to_string(),
                canary(
                    "canary",
                    "a.example",
                    "nginx.ingress.kubernetes.io/canary-by-header: X-Canary, nginx.ingress.kubernetes.io/canary-by-cookie: canary",
                ),
                canary(
                    "lost",
                    "b.example",
                    "nginx.ingress.kubernetes.io/canary-weight: '100'",
                ),
            ],
            &CompileOptions::default(),
        );
        let served = ingress_condition(&snapshot, "lost", "CanaryServed");
        assert_eq!(served.status, "False");
        assert!(served.message.contains("b.example"), "{}", served.message);
        let router = Router::new(
            Arc::new(ArcSwap::from_pointee(snapshot)),
            Metrics::new().unwrap(),
            UpstreamOptions::default(),
        );
        let conn = conn(false, None);
        let upstream = async |fields: &[(&str, &str)]| match route(
            &router,
            &h1("a.example", "/x", &fields),
            &conn,
        )
        .await
        {
            Routed::Forward(f) => f.upstream.name.clone(),
            other => panic!("{fields:?}: {other:?}"),
        };
        assert_eq!(upstream(&[]).await, "ops/web:80");
        assert_eq!(upstream(&[("x-canary", "always")]).await, "ops/empty:80");
        assert_eq!(
            upstream(&[("x-canary", "never"), ("cookie", "canary=always")]).await,
            "ops/web:80"
        );
        assert_eq!(
            upstream(&[("x-canary", "other"), ("cookie", "canary=always")]).await,
            "ops/empty:80"
        );
    }

    /// The same request over HTTP/1 (a `Host` field, HTTP/1's header
    /// view) and HTTP/2 (`:authority`, a header map) is routed alike and
    /// gets the same forwarding fields.
    #[tokio::test]
    async fn both_versions_get_one_decision_and_one_set_of_forwarding_fields() {
        let router = router();
        let conn = conn(true, Some("a.example"));
        let h1_fields: &[(&str, &str)] = &[("host", "a.example"), ("x-forwarded-for", "6.6.6.6")];
        let request = h1("a.example", "/x/../y", &h1_fields);
        let over_h1 = route(&router, &request, &conn).await;
        let mut map = HeaderMap::new();
        map.insert("x-forwarded-for", http::HeaderValue::from_static("6.6.6.6"));
        let over_h2 = Request {
            head: Head {
                host_headers: 0,
                requires_host: false,
                ..request.head
            },
            headers: &map,
            ..request
        };
        let over_h2 = route(&router, &over_h2, &conn).await;
        let (Routed::Forward(a), Routed::Forward(b)) = (over_h1, over_h2) else {
            panic!("both forward");
        };
        assert_eq!(a.upstream.name, b.upstream.name);
        assert_eq!(a.route.ingress, b.route.ingress);
        assert_eq!(a.path.as_deref(), Some("/y"));
        assert_eq!(a.path, b.path);
        assert_eq!(a.body_limit, b.body_limit);
        // HTTP/1's edits and HTTP/2's header map carry the same fields.
        let id = trace::request_id(None, false);
        let tp = trace::traceparent(None, &id);
        let edits = forwarding::edits(&conn, "a.example", &id, &tp);
        forwarding::apply(&conn, "a.example", &mut map).unwrap();
        let mut expected = HeaderEdits::default();
        expected.push_set(trace::REQUEST_ID.as_bytes(), id.as_bytes());
        expected.push_set(trace::TRACEPARENT.as_bytes(), tp.as_bytes());
        for name in forwarding::FORWARDING {
            let value = map.get(name).unwrap();
            expected.push_set(name.as_bytes(), value.as_bytes());
        }
        // A client's own client-certificate fields, removed on every host.
        for name in forwarding::CLIENT_CERT_FIELDS {
            expected.push_remove(name.as_bytes());
        }
        assert_eq!(edits, expected);
        assert_eq!(map.get("x-forwarded-for").unwrap(), "192.0.2.7");
    }
}
