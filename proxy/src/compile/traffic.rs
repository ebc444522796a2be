//! The traffic policy of a route: who may reach it, how fast, which
//! origins may call it, where it redirects. Read once per compile from an
//! Ingress's ingress-nginx annotations (their values already typed by
//! `teapot_api::annotations`), carried by every rule of the Ingress in its
//! [`crate::compile::routes::RoutePolicy`], and applied by the request
//! pipeline (crate::plane::traffic) for both HTTP versions. A route without
//! one pays a single `Option` test.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use teapot_api::HostPattern;
use teapot_api::annotations::{self, AnnotationValue, NGINX_PREFIX, ObjectKind};
use teapot_api::regex::{PathRegex, TenantRegex};

use crate::compile::upstream::Upstream;
pub use crate::live::rate_table::Rate;
use crate::live::rate_table::{AuthGate, RateTable};

/// Everything a route does to requests besides choosing the backend.
#[derive(Clone, Debug, Default)]
pub struct TrafficPolicy {
    /// A RouteTrafficPolicy that could not be read (why is on its
    /// status): every request of its routes is answered 503, never
    /// forwarded without the restrictions it asked for.
    pub refused: Option<Arc<str>>,
    pub access: Option<AccessList>,
    pub rate: Option<RateLimits>,
    /// `limit-connections`: requests in flight per client address.
    pub connections: Option<ConnectionLimit>,
    pub cors: Option<Cors>,
    /// `permanent-redirect` / `temporal-redirect`: every request answered
    /// with it, nothing forwarded.
    pub redirect: Option<Redirect>,
    /// `app-root`: where a request for `/` is sent (302).
    pub app_root: Option<Arc<str>>,
    /// `ssl-redirect` / `force-ssl-redirect` (and `teapot.dev/ssl-redirect`).
    pub ssl_redirect: Option<SslRedirect>,
    pub affinity: Option<Affinity>,
    /// `upstream-hash-by`: the endpoint tried first is chosen by a
    /// consistent hash of request variables (crate::plane::traffic::hash_by).
    pub hash_by: Option<Arc<crate::compile::hash_by::HashBy>>,
    /// `load-balance: ewma`: the endpoint tried first is the faster of
    /// two at random (crate::plane::traffic::ewma).
    pub ewma: bool,
    /// `satisfy: any`: the allow-list, basic authentication and `auth-url`
    /// each let a request in alone (crate::plane::traffic::satisfy).
    pub satisfy_any: bool,
    /// `auth-cache-key`, `auth-cache-duration`: `auth`'s answers kept per
    /// key (crate::plane::traffic::auth_cache).
    pub auth_cache: Option<Arc<crate::compile::auth_cache::AuthCache>>,
    /// `x-forwarded-prefix`: set on every forwarded request.
    pub forwarded_prefix: Option<Arc<str>>,
    /// `rewrite-target`: the path the backends get.
    pub rewrite: Option<Rewrite>,
    /// `proxy-connect-timeout`, `proxy-read-timeout`, `proxy-send-timeout`.
    pub timeouts: Option<UpstreamTimeouts>,
    /// A canary Ingress's backend added to this route (`canary: "true"`
    /// on an Ingress of the same tenant, host and path).
    pub canary: Option<Canary>,
    /// `from-to-www-redirect`, on the route of the twin host: every
    /// request is answered 308 to this host (crate::plane::decide).
    pub www_redirect: Option<Arc<str>>,
    /// `auth-url` and its companions: the authentication service asked
    /// before each request is forwarded (crate::plane::traffic::auth).
    pub auth: Option<Arc<ExternalAuth>>,
    /// `auth-type: basic` (or a RouteTrafficPolicy's `basicAuth`): the
    /// users a request must be one of (crate::plane::traffic::basic_auth),
    /// checked before `auth`.
    pub basic_auth: Option<Arc<crate::compile::basic_auth::BasicAuth>>,
    /// `custom-headers`: the fields set on every forwarded response
    /// (crate::plane::traffic::custom_headers), or why every request is
    /// answered 503.
    pub custom_headers: Option<Arc<crate::compile::custom_headers::CustomHeaders>>,
    /// The Gateway API ExternalAuth filter's terms for `auth`'s
    /// sub-request and answers, where they differ from ingress-nginx's
    /// (crate::compile::gateway::ext_auth); `None`: ingress-nginx's.
    pub auth_terms: Option<Arc<GatewayAuthTerms>>,
    /// `custom-http-errors` with `default-backend`: the responses replaced
    /// by the error backend's page (crate::plane::traffic::errors).
    pub custom_errors: Option<Arc<CustomErrors>>,
    /// `upstream-vhost`, `preserve-trailing-slash`, `relative-redirects`
    /// (crate::compile::proxying).
    pub proxying: Option<Arc<crate::compile::proxying::Proxying>>,
    /// `proxy-redirect-from/to`, `proxy-cookie-domain`, `proxy-cookie-path`:
    /// the backends' response fields rewritten
    /// (crate::compile::response_rewrite).
    pub response_rewrite: Option<Arc<crate::compile::response_rewrite::ResponseRewrite>>,
    /// `limit-rate`, `limit-rate-after`: each response's pace to the
    /// client (crate::plane::traffic::bandwidth).
    pub bandwidth: Option<crate::compile::bandwidth::Bandwidth>,
    /// `proxy-http-version`, `connection-proxy-header`: the version and
    /// `Connection` field of the head sent to HTTP/1 backends
    /// (crate::compile::upstream_http).
    pub upstream_http: Option<Arc<teapot_h1::UpstreamHttp>>,
    /// `proxy-request-buffering`, `proxy-buffering`: the bodies held per
    /// request (crate::compile::buffering).
    pub buffering: Option<crate::compile::buffering::Buffering>,
    /// `global-rate-limit`: requests per window and key, counted over the
    /// fleet (crate::plane::traffic::global_rate).
    pub global_rate: Option<Arc<crate::compile::global_rate::GlobalRate>>,
    /// `proxy-next-upstream*`: failed tries sent again
    /// (crate::compile::retry).
    pub retry: Option<Arc<teapot_h1::RetryPolicy>>,
    /// `teapot.dev/alt-svc: "false"`: no `Alt-Svc` on this route's
    /// answers (crate::plane::alt_svc).
    pub withhold_alt_svc: bool,
}

/// ingress-nginx's external authentication, resolved: where the
/// sub-request goes and what the answers do.
#[derive(Debug)]
pub struct ExternalAuth {
    /// The tenant's own Service (its endpoints, resolved as a backend's)
    /// or the one address inside its nodes; no endpoint: every request
    /// gets 500, as ingress-nginx answers when its auth service is down.
    pub upstream: Arc<Upstream>,
    /// The sub-request's `Host`: the URL's authority as written.
    pub authority: Arc<str>,
    /// The URL's path and query.
    pub path: Arc<str>,
    /// `auth-method` (default GET).
    pub method: &'static str,
    /// `auth-signin`: where a 401 sends the client (302).
    pub signin: Option<Arc<str>>,
    /// `auth-signin-redirect-param` (default `rd`).
    pub signin_param: Arc<str>,
    /// `auth-response-headers`, lowercase: copied from a 2xx answer onto
    /// the request to the backend.
    pub response_headers: Vec<Arc<str>>,
    /// `auth-request-redirect`: the sub-request's X-Auth-Request-Redirect
    /// (default the request's path and query).
    pub request_redirect: Option<Arc<str>>,
    /// The sub-requests its owner (the tenant, or the operator
    /// namespaces together) has in flight on this replica.
    pub gate: Arc<AuthGate>,
    /// The owner's tenant cluster; empty for the operator namespaces.
    pub owner: Arc<str>,
    /// Why the `auth-url` was refused (reported on the Ingress): every
    /// request gets 503, as ingress-nginx denies a location whose
    /// annotation it cannot use, and nothing is sent.
    pub refused: Option<String>,
}

impl ExternalAuth {
    /// The authentication of a route whose `auth-url` was refused for
    /// `why`: every request gets 503, nothing is sent.
    pub fn refused(why: String) -> ExternalAuth {
        let upstream = Upstream::new("auth-url".into(), Vec::new(), Some(why.clone()));
        ExternalAuth {
            upstream: Arc::new(upstream),
            authority: Arc::from(""),
            path: Arc::from("/"),
            method: "GET",
            signin: None,
            signin_param: Arc::from("rd"),
            response_headers: Vec::new(),
            request_redirect: None,
            gate: Arc::default(),
            owner: Arc::from(""),
            refused: Some(why),
        }
    }
}

/// How the Gateway API's ExternalAuth filter (protocol HTTP) asks and
/// judges, unlike `auth-url`: the client's method and its path under
/// `http.path`, only the fields the filter names, and only a 200 passes
/// (crate::plane::traffic::auth).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatewayAuthTerms {
    /// `http.path`: put before the client's path (no trailing `/`).
    pub path_prefix: Arc<str>,
    /// `http.allowedHeaders`: the client's fields sent besides `Host`
    /// and `Authorization`.
    pub request_headers: Vec<http::HeaderName>,
    /// `http.allowedResponseHeaders`: the answer's fields set on the
    /// request to the backend (a listed one the answer lacks is removed
    /// from it); empty: every field of the answer but `Host` and those
    /// that frame or describe its own body.
    pub response_headers: Vec<http::HeaderName>,
}

/// What `auth-url` and its companions say before the URL is resolved
/// (crate::compile::policies resolves it against the tenant).
#[derive(Debug)]
pub struct AuthAnnotations {
    pub target: teapot_api::annotations::AuthTarget,
    pub method: &'static str,
    pub signin: Option<Arc<str>>,
    pub signin_param: Arc<str>,
    pub response_headers: Vec<Arc<str>>,
    pub request_redirect: Option<Arc<str>>,
}

/// A canary's backend and the rules that send a request there.
#[derive(Clone, Debug)]
pub struct Canary {
    pub upstream: Arc<Upstream>,
    pub rules: Arc<CanaryRules>,
}

/// ingress-nginx's canary rules, tried in its order: the header, then the
/// cookie, then the weight (crate::plane::traffic::canary).
#[derive(Debug, Default)]
pub struct CanaryRules {
    /// `canary-by-header`, lowercase.
    pub header: Option<String>,
    /// `canary-by-header-value`: the header's value that chooses the canary.
    pub value: Option<String>,
    /// `canary-by-header-pattern` (unless a value is set), matched
    /// anywhere in the header's value.
    pub pattern: Option<Arc<TenantRegex>>,
    /// A `canary-by-header-pattern` that was refused (reported): a request
    /// with the header then stays on the route's backend, as ingress-nginx
    /// keeps it when its pattern fails.
    pub pattern_refused: bool,
    /// `canary-by-cookie`.
    pub cookie: Option<String>,
    /// `canary-weight` out of `total` (`canary-weight-total`, at least 100
    /// as ingress-nginx reads it).
    pub weight: u32,
    pub total: u32,
    /// The canary Ingress's `affinity-canary-behavior` is `sticky` (the
    /// default): the main route's affinity applies to the canary's backend
    /// too, so a request its cookie names a canary endpoint for stays on
    /// the canary and one sent there gets the cookie; `legacy`: neither.
    pub sticky: bool,
}

/// The route's own upstream timeouts; each applies under the operator's
/// (crate::plane::traffic::engines::upstream_timeouts), which applies where
/// one is not set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpstreamTimeouts {
    pub connect: Option<Duration>,
    pub read: Option<Duration>,
    pub send: Option<Duration>,
}

/// `rewrite-target`: the path the backends get, `$1`..`$9` taken from the
/// capture groups of the rule's path (a regular expression). One policy
/// per rule carries the rule's own pattern
/// (crate::compile::ingress::rule_rewrite).
#[derive(Clone, Debug)]
pub struct Rewrite {
    pub target: Arc<str>,
    /// The rule's path; `None` in the Ingress-wide policy (a
    /// `defaultBackend` is not rewritten).
    pub regex: Option<Arc<PathRegex>>,
}

/// Plain-HTTP requests are redirected to HTTPS (308) for these hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SslRedirect {
    /// `force-ssl-redirect`: every host.
    All,
    /// `ssl-redirect`: the hosts of the Ingress's `spec.tls`.
    Hosts(Vec<HostPattern>),
}

/// Cookie session affinity (`affinity: cookie`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Affinity {
    pub cookie: String,
    /// `session-cookie-path`, else the path of the rule the route came
    /// from ([`Affinity::for_rule`]).
    pub path: String,
    /// Whether `path` is `session-cookie-path`'s.
    pub path_set: bool,
    pub max_age: Option<u32>,
    /// `session-cookie-expires`: seconds from now, written as a date.
    pub expires: Option<u32>,
    pub samesite: Option<&'static str>,
    /// `session-cookie-secure`; unset: only with `SameSite=None`. Over
    /// HTTPS the cookie is always `Secure` (as ingress-nginx).
    pub secure: Option<bool>,
    /// `session-cookie-domain`, without a leading dot: one of the
    /// Ingress's own hosts (crate::compile::policies checks it).
    pub domain: Option<String>,
}

/// Client networks: a client in `deny` is refused; else, when `allow` is
/// not empty, a client outside it is refused (ingress-nginx writes its
/// deny rules before its allow rules, so the deny-list wins).
#[derive(Clone, Debug, Default)]
pub struct AccessList {
    pub allow: Vec<IpNet>,
    pub deny: Vec<IpNet>,
}

/// Request rates per client address on this route.
#[derive(Clone, Debug)]
pub struct RateLimits {
    /// `limit-rps` and `limit-rpm`; a request must pass each.
    pub limits: Vec<Rate>,
    /// `limit-allowlist` / `limit-whitelist`: clients no limit applies to.
    pub exempt: Vec<IpNet>,
    /// The counters: the owning tenant's fixed-size table (or the operator
    /// namespaces' one), shared by all of its routes.
    pub table: Arc<RateTable>,
    /// This route's part of each counter's key: the Ingress's name, so a
    /// reload keeps the counters.
    pub route_key: u64,
}

/// Requests in flight per client address on this route
/// (`limit-connections`): one more is refused with 503.
#[derive(Clone, Debug)]
pub struct ConnectionLimit {
    pub limit: u32,
    /// `limit-allowlist` / `limit-whitelist`: clients it does not apply to.
    pub exempt: Vec<IpNet>,
    /// The counts: the owning tenant's table, as the rate limits'.
    pub table: Arc<RateTable>,
    pub route_key: u64,
}

/// A route's CORS: ingress-nginx's (`enable-cors`, with its defaults) or
/// the Gateway API's CORS filter (crate::compile::gateway::cors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cors {
    /// `None`: any origin (`*`, ingress-nginx's default); the answer then
    /// says `*` whatever the request's Origin (the Gateway API's filter
    /// echoes the Origin when credentials are allowed).
    pub origins: Option<Vec<OriginPattern>>,
    /// As sent; empty: no `Access-Control-Allow-Methods` field (a filter
    /// that lists none). `*` with `gateway`: any method.
    pub methods: String,
    /// As `methods`, for `Access-Control-Allow-Headers`.
    pub headers: String,
    pub expose: Option<String>,
    pub credentials: bool,
    pub max_age: String,
    /// The Gateway API's semantics rather than ingress-nginx's: only a
    /// request with `Origin` is a CORS request, only an `OPTIONS` with
    /// `Access-Control-Request-Method` a preflight, a `*` list is answered
    /// with what the request asked when credentials are allowed (a browser
    /// refuses `*` then), and an actual response gets only the origin,
    /// credentials and exposed fields (the rest is the preflight's).
    pub gateway: bool,
}

/// An allowed origin: `scheme://host[:port]`, or with `*` before `text`
/// one label of any name (ingress-nginx's `[A-Za-z0-9-]+`) or, with
/// `any_labels`, any number of labels (the Gateway API's greedy `*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginPattern {
    /// Lowercase; for a wildcard, what follows `*`: `.b.example:8443`.
    pub text: String,
    pub scheme: String,
    pub wildcard: bool,
    pub any_labels: bool,
}

/// A redirect answering every request of the route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redirect {
    pub status: u16,
    pub location: Arc<str>,
}

pub const DEFAULT_CORS_METHODS: &str = "GET, PUT, POST, DELETE, PATCH, OPTIONS";
pub const DEFAULT_CORS_HEADERS: &str = "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization";
pub const DEFAULT_CORS_MAX_AGE: u32 = 1_728_000;
const DEFAULT_BURST_MULTIPLIER: u32 = 5;

/// The typed ingress-nginx annotations of one Ingress, by name after the
/// prefix; a value that does not parse is a problem for the Ingress's
/// status (the webhook refuses it in tenant namespaces; an operator's
/// manifest can still carry one) and is left out.
pub struct NginxAnnotations {
    values: BTreeMap<&'static str, AnnotationValue>,
    /// The admitted values as written (trimmed): CORS lists are sent as
    /// the Ingress spells them, as ingress-nginx does.
    written: BTreeMap<&'static str, String>,
}

impl crate::compile::proxying::Annotations for NginxAnnotations {
    fn text(&self, name: &str) -> Option<&str> {
        NginxAnnotations::text(self, name)
    }
    fn flag(&self, name: &str) -> Option<bool> {
        NginxAnnotations::flag(self, name)
    }
    fn count(&self, name: &str) -> Option<u32> {
        NginxAnnotations::count(self, name)
    }
}

impl NginxAnnotations {
    /// Reads the `nginx.ingress.kubernetes.io/` annotations of an Ingress;
    /// every one teapot does not serve, or whose value it cannot read, is
    /// pushed to `problems` (never silently ignored).
    pub fn read(
        annotations: Option<&BTreeMap<String, String>>,
        problems: &mut Vec<String>,
    ) -> NginxAnnotations {
        let mut values = BTreeMap::new();
        let mut written = BTreeMap::new();
        for (key, value) in annotations.into_iter().flatten() {
            // proxy-body-size is the route's body limit (crate::compile::policies).
            if !key.starts_with(NGINX_PREFIX) || key.ends_with("/proxy-body-size") {
                continue;
            }
            match annotations::parse(ObjectKind::Ingress, key, value) {
                Ok(v) => {
                    // The spec's key is 'static; the name follows the prefix.
                    if let Some(spec) = annotations::spec(key) {
                        let name = &spec.key[NGINX_PREFIX.len()..];
                        values.insert(name, v);
                        written.insert(name, value.trim().to_string());
                    }
                }
                Err(e) => problems.push(format!("{key}: {e}")),
            }
        }
        NginxAnnotations { values, written }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&AnnotationValue> {
        self.values.get(name)
    }

    pub(crate) fn flag(&self, name: &str) -> Option<bool> {
        match self.get(name) {
            Some(AnnotationValue::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    fn count(&self, name: &str) -> Option<u32> {
        match self.get(name) {
            Some(AnnotationValue::Count(n)) => Some(*n),
            _ => None,
        }
    }

    fn nets(&self, names: &[&str]) -> Vec<IpNet> {
        names
            .iter()
            .filter_map(|n| match self.get(n) {
                Some(AnnotationValue::Cidrs(nets)) => Some(nets.iter().copied()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    fn list(&self, name: &str) -> Option<&[String]> {
        match self.get(name) {
            Some(AnnotationValue::List(items)) => Some(items),
            _ => None,
        }
    }

    pub(crate) fn text(&self, name: &str) -> Option<&str> {
        match self.get(name) {
            Some(AnnotationValue::Text(t)) => Some(t),
            _ => None,
        }
    }

    /// The policy these annotations describe (`None`: nothing to do);
    /// `table` gives the counters' table when a rate limit is set, and
    /// `route` names the Ingress (`namespace/name`). What cannot be served
    /// as written is pushed to `problems`.
    pub fn policy(
        &self,
        route: &str,
        table: impl FnOnce() -> Arc<RateTable>,
        problems: &mut Vec<String>,
    ) -> Option<TrafficPolicy> {
        self.policy_with_tls(route, table, None, &[], problems)
    }

    /// [`Self::policy`] with the Ingress's TLS hosts and whether they
    /// redirect when `ssl-redirect` is not set (`teapot.dev/ssl-redirect`,
    /// else the fleet's `--ssl-redirect-default`), for `ssl-redirect`.
    pub fn policy_with_tls(
        &self,
        route: &str,
        table: impl FnOnce() -> Arc<RateTable>,
        tls: Option<(Vec<HostPattern>, bool)>,
        paths: &[String],
        problems: &mut Vec<String>,
    ) -> Option<TrafficPolicy> {
        let teapot_redirect = tls.as_ref().is_some_and(|(_, on)| *on);
        if self.is_empty() && !teapot_redirect {
            return None;
        }
        // One table for the rate counters and the in-flight counts, made
        // only when either is wanted.
        let table = std::cell::LazyCell::new(table);
        let table = || Arc::clone(&table);
        let policy = TrafficPolicy {
            refused: None,
            access: self.access(),
            rate: self.rate(route, table),
            connections: self.connections(route, table),
            cors: self.cors(),
            redirect: self.redirect(),
            app_root: self.app_root(problems),
            ssl_redirect: self.ssl_redirect(tls),
            affinity: self.affinity(paths),
            hash_by: self.hash_by(problems),
            ewma: matches!(
                self.get("load-balance"),
                Some(AnnotationValue::Word("ewma"))
            ),
            satisfy_any: matches!(self.get("satisfy"), Some(AnnotationValue::Word("any"))),
            auth_cache: self.auth_cache(route, problems),
            forwarded_prefix: self.path("x-forwarded-prefix", problems),
            rewrite: self.rewrite(problems),
            timeouts: self.timeouts(),
            canary: None,
            www_redirect: None,
            auth: None,
            basic_auth: None,
            custom_headers: None,
            auth_terms: None,
            custom_errors: None,
            proxying: crate::compile::proxying::read(self, problems).map(Arc::new),
            response_rewrite: crate::compile::response_rewrite::read(self, problems).map(Arc::new),
            bandwidth: crate::compile::bandwidth::read(self, problems),
            upstream_http: crate::compile::upstream_http::read(
                matches!(
                    self.get("proxy-http-version"),
                    Some(AnnotationValue::Word("1.0"))
                ),
                self.text("connection-proxy-header"),
                problems,
            ),
            buffering: crate::compile::buffering::read(|name| self.get(name), problems),
            global_rate: None,
            retry: crate::compile::retry::read(|name| self.get(name), problems),
            withhold_alt_svc: false,
        };
        let any = policy.access.is_some()
            || policy.rate.is_some()
            || policy.connections.is_some()
            || policy.cors.is_some()
            || policy.redirect.is_some()
            || policy.app_root.is_some()
            || policy.ssl_redirect.is_some()
            || policy.affinity.is_some()
            || policy.hash_by.is_some()
            || policy.ewma
            || policy.satisfy_any
            || policy.auth_cache.is_some()
            || policy.forwarded_prefix.is_some()
            || policy.rewrite.is_some()
            || policy.timeouts.is_some()
            || policy.proxying.is_some()
            || policy.response_rewrite.is_some()
            || policy.buffering.is_some()
            || policy.upstream_http.is_some()
            || policy.bandwidth.is_some()
            || policy.retry.is_some();
        any.then_some(policy)
    }

    fn ssl_redirect(&self, tls: Option<(Vec<HostPattern>, bool)>) -> Option<SslRedirect> {
        if self.flag("force-ssl-redirect") == Some(true) {
            return Some(SslRedirect::All);
        }
        let (hosts, teapot) = tls?;
        let on = match self.flag("ssl-redirect") {
            Some(nginx) => nginx,
            None => teapot,
        };
        (on && !hosts.is_empty()).then_some(SslRedirect::Hosts(hosts))
    }

    /// `auth-cache-key` with `auth-cache-duration`; a key or durations
    /// teapot cannot read are reported and every request asked about (a
    /// cache only loosens).
    fn auth_cache(
        &self,
        route: &str,
        problems: &mut Vec<String>,
    ) -> Option<Arc<crate::compile::auth_cache::AuthCache>> {
        let key = self.text("auth-cache-key")?;
        let durations = self.text("auth-cache-duration");
        match crate::compile::auth_cache::AuthCache::parse(key, durations) {
            Ok(cache) => {
                // The answers outlive recompiles while the Ingress asks
                // the same service the same way.
                let identity = format!("{route}\n{:?}\n{key}\n{durations:?}", self.get("auth-url"));
                Some(Arc::new(cache.shared(&identity)))
            }
            Err(why) => {
                problems.push(format!(
                    "nginx.ingress.kubernetes.io/auth-cache-key: {why}; every request is asked about"
                ));
                None
            }
        }
    }

    /// `upstream-hash-by` and its subset; a key teapot cannot read is
    /// reported and the route balanced as without it (it restricts
    /// nothing).
    fn hash_by(&self, problems: &mut Vec<String>) -> Option<Arc<crate::compile::hash_by::HashBy>> {
        use crate::compile::hash_by::{DEFAULT_SUBSET, HashBy};
        let value = self.text("upstream-hash-by")?;
        let subset = (self.flag("upstream-hash-by-subset") == Some(true)).then(|| {
            self.count("upstream-hash-by-subset-size")
                .unwrap_or(DEFAULT_SUBSET)
        });
        match HashBy::parse(value, subset) {
            Ok(hash) => Some(Arc::new(hash)),
            Err(why) => {
                problems.push(format!(
                    "nginx.ingress.kubernetes.io/upstream-hash-by: {why}; requests are balanced without it"
                ));
                None
            }
        }
    }

    fn affinity(&self, paths: &[String]) -> Option<Affinity> {
        if !matches!(self.get("affinity"), Some(AnnotationValue::Word("cookie"))) {
            return None;
        }
        let cookie = self
            .list("session-cookie-name")
            .and_then(|n| n.first().cloned())
            .unwrap_or_else(|| "INGRESSCOOKIE".to_string());
        // ingress-nginx scopes the cookie to the location's path: the
        // Ingress's one path here, each rule's own with several
        // (crate::compile::policies::Policies::for_rule).
        let set = self
            .text("session-cookie-path")
            .filter(|p| p.starts_with('/'));
        let path = match (set, paths) {
            (Some(p), _) => p.to_string(),
            (None, [only]) => only.clone(),
            (None, _) => "/".to_string(),
        };
        let samesite = match self.get("session-cookie-samesite") {
            Some(AnnotationValue::Word(w)) => Some(*w),
            _ => None,
        };
        Some(Affinity {
            cookie,
            path_set: set.is_some(),
            path,
            max_age: self.count("session-cookie-max-age"),
            expires: self.count("session-cookie-expires"),
            samesite,
            secure: self.flag("session-cookie-secure"),
            domain: self
                .text("session-cookie-domain")
                .map(|d| d.trim_start_matches('.').to_ascii_lowercase()),
        })
    }

    fn access(&self) -> Option<AccessList> {
        let list = AccessList {
            allow: self.nets(&["whitelist-source-range", "allowlist-source-range"]),
            deny: self.nets(&["denylist-source-range"]),
        };
        (!list.allow.is_empty() || !list.deny.is_empty()).then_some(list)
    }

    fn connections(
        &self,
        route: &str,
        table: impl FnOnce() -> Arc<RateTable>,
    ) -> Option<ConnectionLimit> {
        let limit = self.count("limit-connections")?;
        Some(ConnectionLimit {
            limit,
            exempt: self.nets(&["limit-whitelist", "limit-allowlist"]),
            table: table(),
            route_key: RateTable::route_key(route),
        })
    }

    fn rate(&self, route: &str, table: impl FnOnce() -> Arc<RateTable>) -> Option<RateLimits> {
        let multiplier = self
            .count("limit-burst-multiplier")
            .unwrap_or(DEFAULT_BURST_MULTIPLIER);
        let limits: Vec<Rate> = [("limit-rps", 1), ("limit-rpm", 60)]
            .into_iter()
            .filter_map(|(name, period)| self.count(name).map(|n| Rate::new(n, period, multiplier)))
            .collect();
        if limits.is_empty() {
            return None;
        }
        Some(RateLimits {
            limits,
            exempt: self.nets(&["limit-whitelist", "limit-allowlist"]),
            table: table(),
            route_key: RateTable::route_key(route),
        })
    }

    fn cors(&self) -> Option<Cors> {
        if self.flag("enable-cors") != Some(true) {
            return None;
        }
        let written = |name: &str, default: &str| {
            self.list(name)
                .and(self.written.get(name))
                .map_or_else(|| default.to_string(), |w| w.clone())
        };
        let origins = self
            .list("cors-allow-origin")
            .filter(|o| !o.iter().any(|o| o == "*"))
            .map(|o| o.iter().map(|o| OriginPattern::new(o)).collect());
        Some(Cors {
            origins,
            methods: written("cors-allow-methods", DEFAULT_CORS_METHODS),
            headers: written("cors-allow-headers", DEFAULT_CORS_HEADERS),
            expose: self
                .list("cors-expose-headers")
                .and(self.written.get("cors-expose-headers"))
                .cloned(),
            credentials: self.flag("cors-allow-credentials").unwrap_or(true),
            max_age: self
                .count("cors-max-age")
                .unwrap_or(DEFAULT_CORS_MAX_AGE)
                .to_string(),
            gateway: false,
        })
    }

    fn redirect(&self) -> Option<Redirect> {
        let to = |url: &str, code: Option<u32>, default: u16| Redirect {
            status: code.and_then(|c| u16::try_from(c).ok()).unwrap_or(default),
            location: Arc::from(url),
        };
        // ingress-nginx reads `temporal-redirect` first and returns it, so
        // a temporal redirect wins over a permanent one.
        if let Some(url) = self.text("temporal-redirect") {
            return Some(to(url, self.count("temporal-redirect-code"), 302));
        }
        self.text("permanent-redirect")
            .map(|url| to(url, self.count("permanent-redirect-code"), 301))
    }

    /// `auth-url` and its companions; `None` without `auth-url` (the
    /// others alone do nothing, as in ingress-nginx).
    pub fn auth(&self, problems: &mut Vec<String>) -> Option<AuthAnnotations> {
        let url = self.text("auth-url")?;
        // The allowlist admitted it, so it parses.
        let target = teapot_api::annotations::AuthTarget::parse(url).ok()?;
        let method = match self.get("auth-method") {
            Some(AnnotationValue::Word(m)) => m,
            _ => "GET",
        };
        let first = |name| self.list(name).and_then(|l| l.first().cloned());
        Some(AuthAnnotations {
            target,
            method,
            signin: self.text("auth-signin").map(Arc::from),
            signin_param: Arc::from(
                first("auth-signin-redirect-param")
                    .as_deref()
                    .unwrap_or("rd"),
            ),
            response_headers: self
                .list("auth-response-headers")
                .into_iter()
                .flatten()
                .filter(|h| match annotations::auth_response_header_refused(h) {
                    Some(why) => {
                        problems.push(format!(
                            "{NGINX_PREFIX}auth-response-headers: {h} is not copied: {why}"
                        ));
                        false
                    }
                    None => true,
                })
                .map(|h| Arc::from(h.to_ascii_lowercase()))
                .collect(),
            request_redirect: self.text("auth-request-redirect").map(Arc::from),
        })
    }

    /// Whether the Ingress is a canary (`canary: "true"`): its rules are
    /// added to the routes of another Ingress, not routed themselves.
    pub fn is_canary(&self) -> bool {
        self.flag("canary") == Some(true)
    }

    /// A canary Ingress's rules; a pattern that does not compile is a
    /// problem, and keeps requests with the header on the route's backend.
    pub fn canary_rules(&self, problems: &mut Vec<String>) -> CanaryRules {
        let first = |name| self.list(name).and_then(|l| l.first().cloned());
        let value = self.text("canary-by-header-value").map(str::to_string);
        let mut pattern_refused = false;
        let pattern = match (&value, self.text("canary-by-header-pattern")) {
            (None, Some(p)) => match teapot_api::regex::compile_contains(p) {
                Ok(r) => Some(r),
                Err(e) => {
                    problems.push(format!("{NGINX_PREFIX}canary-by-header-pattern: {e}"));
                    pattern_refused = true;
                    None
                }
            },
            _ => None,
        };
        CanaryRules {
            header: first("canary-by-header").map(|h| h.to_ascii_lowercase()),
            value,
            pattern,
            pattern_refused,
            cookie: first("canary-by-cookie"),
            weight: self.count("canary-weight").unwrap_or(0),
            total: self.count("canary-weight-total").unwrap_or(100).max(100),
            sticky: !matches!(
                self.get("affinity-canary-behavior"),
                Some(AnnotationValue::Word("legacy"))
            ),
        }
    }

    fn timeouts(&self) -> Option<UpstreamTimeouts> {
        let seconds = |name| self.count(name).map(|s| Duration::from_secs(u64::from(s)));
        let timeouts = UpstreamTimeouts {
            connect: seconds("proxy-connect-timeout"),
            read: seconds("proxy-read-timeout"),
            send: seconds("proxy-send-timeout"),
        };
        (timeouts != UpstreamTimeouts::default()).then_some(timeouts)
    }

    fn rewrite(&self, problems: &mut Vec<String>) -> Option<Rewrite> {
        let target = self.path("rewrite-target", problems)?;
        // The engines append the client's query to the path they forward:
        // a query of the target's own would be a second one.
        if target.contains('?') {
            problems.push(format!(
                "{NGINX_PREFIX}rewrite-target: {target:?} carries a query; teapot keeps the request's query and rewrites only the path"
            ));
            return None;
        }
        Some(Rewrite {
            target,
            regex: None,
        })
    }

    fn app_root(&self, problems: &mut Vec<String>) -> Option<Arc<str>> {
        self.path("app-root", problems)
    }

    /// A value that must be a path (not a URL); a URL is a problem.
    fn path(&self, name: &str, problems: &mut Vec<String>) -> Option<Arc<str>> {
        let path = self.text(name)?;
        if !path.starts_with('/') {
            problems.push(format!(
                "{NGINX_PREFIX}{name}: {path:?} is not a path starting with '/'"
            ));
            return None;
        }
        Some(Arc::from(path))
    }
}

impl NginxAnnotations {
    /// `custom-http-errors` and `default-backend` before the Service is
    /// resolved (crate::compile::policies); `None` without either.
    pub fn custom_errors(&self) -> Option<ErrorPageAnnotations> {
        let mut codes = match self.get("custom-http-errors") {
            Some(AnnotationValue::Codes(codes)) => codes.clone(),
            _ => Vec::new(),
        };
        // nginx's `proxy_intercept_errors off`: the backend's answers pass;
        // its `error_page` still covers nginx's own 502, 503 and 504.
        if self.flag("disable-proxy-intercept-errors") == Some(true) {
            codes.retain(|c| matches!(c, 502..=504));
        }
        let backend = self.text("default-backend").map(str::to_string);
        (!codes.is_empty() || backend.is_some()).then_some(ErrorPageAnnotations { codes, backend })
    }
}

/// What `custom-http-errors` and `default-backend` say.
#[derive(Debug)]
pub struct ErrorPageAnnotations {
    /// Ascending, each once.
    pub codes: Vec<u16>,
    /// A Service name of the Ingress's own namespace.
    pub backend: Option<String>,
}

/// ingress-nginx's custom error pages, resolved: which statuses the
/// default backend answers in the backend's place, and what the page
/// request tells it.
#[derive(Debug)]
pub struct CustomErrors {
    /// `custom-http-errors`, ascending.
    pub codes: Box<[u16]>,
    /// The `default-backend` Service of the Ingress's own namespace, its
    /// first port (as ingress-nginx takes it).
    pub upstream: Arc<Upstream>,
    /// `X-Namespace` and `X-Ingress-Name`: the tenant's own names for a
    /// tenant's Ingress.
    pub namespace: Arc<str>,
    pub ingress: Arc<str>,
    /// The namespace whose Services the agent mirrored into the LB
    /// namespace (a tenant's), for `X-Service-Name`; empty otherwise.
    pub mirrored_from: Arc<str>,
    /// The page requests its owner has in flight on this replica: the
    /// owner's `auth-url` bound.
    pub gate: Arc<AuthGate>,
    /// The owner's tenant cluster; empty for the operator namespaces.
    pub owner: Arc<str>,
}

impl CustomErrors {
    /// Whether a response of `status` is replaced by the page.
    pub fn replaces(&self, status: u16) -> bool {
        self.codes.binary_search(&status).is_ok()
    }
}

impl OriginPattern {
    /// From a value `cors-allow-origin` admitted (lowercase).
    fn new(origin: &str) -> OriginPattern {
        let (scheme, rest) = origin.split_once("://").unwrap_or(("", origin));
        match rest.strip_prefix('*') {
            Some(suffix) => OriginPattern {
                text: suffix.to_string(),
                scheme: scheme.to_string(),
                wildcard: true,
                any_labels: false,
            },
            None => OriginPattern {
                text: origin.to_string(),
                scheme: scheme.to_string(),
                wildcard: false,
                any_labels: false,
            },
        }
    }
}

/// `https://a.example:443` as `https://a.example` (and `:80` for http).
pub fn without_default_port(origin: &str) -> &str {
    let default = if origin.len() >= 8 && origin[..8].eq_ignore_ascii_case("https://") {
        ":443"
    } else if origin.len() >= 7 && origin[..7].eq_ignore_ascii_case("http://") {
        ":80"
    } else {
        return origin;
    };
    origin.strip_suffix(default).unwrap_or(origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> (Option<TrafficPolicy>, Vec<String>) {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (format!("{NGINX_PREFIX}{k}"), v.to_string()))
            .collect();
        let mut problems = Vec::new();
        let annotations = NginxAnnotations::read(Some(&map), &mut problems);
        let policy = annotations.policy("ns/web", || Arc::new(RateTable::new(64)), &mut problems);
        (policy, problems)
    }

    #[test]
    fn no_annotation_no_policy() {
        assert!(read(&[]).0.is_none());
        // Served but a no-op: CORS explicitly off.
        assert!(read(&[("enable-cors", "false")]).0.is_none());
    }

    #[test]
    fn ingress_nginx_defaults() {
        let (policy, problems) = read(&[("enable-cors", "true"), ("limit-rps", "2")]);
        assert!(problems.is_empty(), "{problems:?}");
        let policy = policy.unwrap();
        let cors = policy.cors.unwrap();
        assert_eq!(cors.origins, None);
        assert_eq!(cors.methods, DEFAULT_CORS_METHODS);
        assert_eq!(cors.headers, DEFAULT_CORS_HEADERS);
        assert!(cors.credentials);
        assert_eq!(cors.max_age, "1728000");
        assert_eq!(cors.expose, None);
        let rate = policy.rate.unwrap();
        assert_eq!(
            rate.limits,
            vec![Rate {
                interval_ns: 500_000_000,
                burst: 10
            }]
        );
        let (redirect, _) = read(&[
            ("temporal-redirect", "https://b.example/"),
            ("permanent-redirect", "https://a.example/"),
        ]);
        assert_eq!(
            redirect.unwrap().redirect,
            Some(Redirect {
                status: 302,
                location: Arc::from("https://b.example/")
            }),
            "temporal-redirect wins, as ingress-nginx reads it first"
        );
    }

    #[test]
    fn proxy_timeouts_in_seconds() {
        let (policy, problems) = read(&[
            ("proxy-connect-timeout", "2"),
            ("proxy-read-timeout", "120"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            policy.unwrap().timeouts,
            Some(UpstreamTimeouts {
                connect: Some(Duration::from_secs(2)),
                read: Some(Duration::from_secs(120)),
                send: None,
            })
        );
        // Out of range or not plain seconds: reported, not applied.
        for (name, bad) in [
            ("proxy-connect-timeout", "76"),
            ("proxy-read-timeout", "0"),
            ("proxy-send-timeout", "60s"),
            ("proxy-read-timeout", "86401"),
        ] {
            let (policy, problems) = read(&[(name, bad)]);
            assert!(policy.is_none(), "{name}: {bad}");
            assert!(
                problems.len() == 1 && problems[0].contains(name),
                "{name}: {problems:?}"
            );
        }
    }

    #[test]
    fn unserved_and_injecting_annotations_are_reported() {
        let (policy, problems) = read(&[
            ("configuration-snippet", "more_set_headers x;"),
            ("enable-modsecurity", "true"),
            ("limit-rps", "lots"),
            ("whitelist-source-range", "10.0.0.0/8"),
            // Served: the compile's client-certificate setting reads it.
            ("auth-tls-verify-client", "on"),
        ]);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems
                .iter()
                .any(|p| p.contains("configuration-snippet") && p.contains("injects"))
        );
        assert!(problems.iter().any(|p| {
            p.contains("not served by teapot: nginx.ingress.kubernetes.io/enable-modsecurity")
        }));
        assert!(problems.iter().any(|p| p.contains("limit-rps")));
        // What could be read is served.
        let access = policy.unwrap().access.unwrap();
        assert_eq!(access.allow, vec!["10.0.0.0/8".parse::<IpNet>().unwrap()]);
    }
}
