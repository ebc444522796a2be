//! The routing decision, engine-agnostic: from a request head's facts and
//! the current snapshot to "forward to this upstream, within these limits"
//! or "answer here". Both engines call it (HTTP/1: crate::plane::h1,
//! HTTP/2: crate::plane::h2), so their behaviour cannot drift. Pure but for the tenant gate it enters (a rate and connection
//! count the route carries); tested without sockets.

use std::borrow::Cow;
use std::sync::Arc;

use crate::compile::gateway::GatewayTable;
use crate::compile::gateway::table::BudgetExhausted;
use crate::compile::gateway::table::{Action, Filters, PathMatch, Redirect};
use crate::compile::routes::HostRank;
use crate::compile::routes::{Route, RouteTable};
use crate::compile::snapshot::Snapshot;
use crate::compile::upstream::Upstream;
use crate::live::fairness::TenantPermit;
use crate::plane::edge::{self, EdgeConfig, Refusal};
use crate::plane::traffic::affinity;

pub use crate::compile::gateway::{RequestFacts, RequestHeaders};

/// What the decision needs to know of a request, whatever its protocol.
/// What only Gateway API matches read (method, query, headers, listener)
/// is in [`RequestFacts`], given to [`decide_request`]: the HTTP/1 engine
/// builds this struct by its fields, so it keeps them.
#[derive(Clone, Copy, Debug)]
pub struct Head<'a> {
    /// `Host` headers in the request (HTTP/2: 0 or 1, `:authority` counts
    /// as the authority below).
    pub host_headers: usize,
    /// The authority that decides routing (HTTP/2 `:authority` wins over
    /// `Host`), empty when there is none.
    pub authority: &'a str,
    /// The path as the client sent it (no query); [`decide_request`]
    /// normalises it before anything matches it.
    pub path: &'a str,
    /// HTTP/1.1 requires a Host (RFC 9112 §3.2); HTTP/1.0 and HTTP/2 do not.
    pub requires_host: bool,
    /// The body length the request declared, if any.
    pub declared_length: Option<u64>,
}

/// Forward to `upstream`.
#[derive(Debug)]
pub struct Forward {
    pub upstream: Arc<Upstream>,
    /// Request body bytes allowed (0: no limit), for bodies that announce
    /// no length up front.
    pub body_limit: u64,
    /// The tenant's connection slot, held until the request (or upgraded
    /// connection) ends.
    pub tenant: Option<TenantPermit>,
    /// The matched route, for metrics and the access log.
    pub route: Route,
    /// What a Gateway API rule does besides choosing the backend; `None`
    /// for Ingress routes.
    pub gateway: Option<GatewayForward>,
    /// The normalised path the route matched, when it differs from the
    /// client's ([`teapot_api::path::normalize`]): the path the backend
    /// gets, before any Gateway URL rewrite, with the query as sent.
    pub path: Option<String>,
    /// What the route's traffic policy adds (crate::plane::traffic).
    pub policy: Option<Box<crate::plane::traffic::Applied>>,
}

/// The Gateway API part of a [`Forward`]: the filters to apply (the
/// rule's, then the chosen backendRef's own) with
/// [`crate::plane::filters`], and the backend's protocol.
#[derive(Debug, Default)]
pub struct GatewayForward {
    pub filters: Option<Arc<Filters>>,
    pub backend_filters: Option<Arc<Filters>>,
    /// HTTP/2 without TLS to the backend (GRPCRoute, `appProtocol:
    /// kubernetes.io/h2c`).
    pub h2c: bool,
}

impl GatewayForward {
    /// The filters in the order they apply.
    pub fn each(&self) -> impl Iterator<Item = &Filters> {
        self.filters
            .iter()
            .chain(&self.backend_filters)
            .map(|f| &**f)
    }
}

/// Answer here, without a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: &'static str,
    /// The `Location` of a redirect (a Gateway API RequestRedirect).
    pub location: Option<Arc<str>>,
    /// The front-door refusal it is, for metrics and `Retry-After`.
    pub refusal: Option<Refusal>,
    /// Why teapot answered itself, for the access log (`no_route`,
    /// `no_endpoint`, a refusal's label...).
    pub reason: &'static str,
}

impl Answer {
    const fn local(status: u16, reason: &'static str, body: &'static str) -> Answer {
        Answer {
            status,
            body,
            location: None,
            refusal: None,
            reason,
        }
    }

    pub fn refused(refusal: Refusal) -> Answer {
        Answer {
            status: refusal.status(),
            body: refusal.body(),
            location: None,
            refusal: Some(refusal),
            reason: refusal.label(),
        }
    }

    /// A Gateway API RequestRedirect.
    pub fn redirect(status: u16, location: String) -> Answer {
        Answer {
            status,
            body: "",
            location: Some(Arc::from(location)),
            refusal: None,
            reason: "redirect",
        }
    }

    /// A tenant over its limits is answered after a delay and may go on
    /// using its connection; any other refusal leaves an unread body
    /// behind, so the connection cannot carry another request.
    pub fn keeps_connection(&self) -> bool {
        matches!(
            self.refusal,
            None | Some(Refusal::TenantRate | Refusal::TenantConnections)
        )
    }

    /// Whether the answer waits `EdgeConfig::tenant_refusal_delay` first:
    /// a client looping on its tenant's refusals then costs one cheap answer
    /// per delay, not the replica's CPU.
    pub fn delayed(&self) -> bool {
        matches!(
            self.refusal,
            Some(Refusal::TenantRate | Refusal::TenantConnections)
        )
    }
}

pub const MANY_HOSTS: Answer = Answer::local(400, "many_hosts", "400 more than one Host header\n");
pub const NO_HOST: Answer = Answer::local(400, "no_host", "400 missing Host header\n");
pub const NO_ROUTE: Answer =
    Answer::local(404, "no_route", "404 no route for this host and path\n");
pub const NO_ENDPOINT: Answer =
    Answer::local(503, "no_endpoint", "503 no ready endpoint for this route\n");
/// A Gateway API rule whose backend does not resolve (missing, not
/// permitted, not a Service) or that has none: the specification's 500.
pub const UNRESOLVED_BACKEND: Answer = Answer::local(
    500,
    "backend_unresolved",
    "500 the route's backend is not available (see the route's status)\n",
);
/// A request whose route lookup would run more than
/// [`crate::compile::gateway::table::REGEX_BYTES_PER_REQUEST`] through
/// the host's regular expressions (a long path against many patterns):
/// refused rather than routed by a partial look.
pub const ROUTE_TOO_COSTLY: Answer = Answer::local(
    400,
    "route_too_costly",
    "400 the request is too costly to match against this host's routes\n",
);
/// A Gateway API URL rewrite whose result is no valid request target (a
/// replacement the route's configuration made unusable for this request):
/// the route is at fault, not the backend, on either HTTP version.
pub const BAD_REWRITE: Answer = Answer::local(
    500,
    "rewrite_invalid",
    "500 the route's URL rewrite made no valid request target\n",
);
/// A normalised path the engine cannot write as a request target (it
/// keeps bytes that are not printable ASCII, which only escapes may carry).
pub const UNFORWARDABLE_PATH: Answer = Answer::local(
    400,
    "bad_path",
    "400 the request path must be printable ASCII (percent-encode other bytes)\n",
);
/// A host the TLS connection's certificate does not serve: the client
/// should open a connection for it (RFC 9110 §15.5.20).
pub const MISDIRECTED: Answer = Answer::local(
    421,
    "misdirected",
    "421 this connection's certificate does not serve this host\n",
);

#[derive(Debug)]
pub enum Decision {
    Forward(Forward),
    /// A local answer, with the route it is about when one matched (a
    /// tenant refusal, a route without endpoints).
    Answer(Answer, Option<Route>),
}

/// The Host rules every request must pass before anything answers it,
/// ACME challenges included.
pub fn check_host(head: &Head<'_>) -> Result<(), Answer> {
    if head.host_headers > 1 {
        return Err(MANY_HOSTS);
    }
    if head.host_headers == 0 && head.authority.is_empty() && head.requires_host {
        return Err(NO_HOST);
    }
    Ok(())
}

/// Decides where a request goes. The front-door checks of its framing
/// ([`edge`]) come first, in the engine that read it; then [`check_host`]
/// and the ACME challenge answer. Nothing is known of the request beyond
/// `head`: Gateway API rules that match on method, headers or query
/// parameters do not match (see [`decide_request`]).
pub fn decide(snapshot: &Snapshot, edge: &EdgeConfig, head: &Head<'_>) -> Decision {
    decide_request(snapshot, edge, head, &RequestFacts::UNKNOWN)
}

/// [`decide`] with what Gateway API matches read of the request.
pub fn decide_request(
    snapshot: &Snapshot,
    edge: &EdgeConfig,
    head: &Head<'_>,
    facts: &RequestFacts<'_>,
) -> Decision {
    if let Err(answer) = check_host(head) {
        return Decision::Answer(answer, None);
    }
    // What is matched is what the backend gets: `/public/../admin` is
    // `/admin` to every rule, and to the backend (docs/decisions.md).
    let path = teapot_api::path::normalize(head.path);
    let mut decision = route(
        snapshot,
        edge,
        &Head {
            path: &path,
            ..*head
        },
        facts,
    );
    if let (Decision::Forward(forward), Cow::Owned(path)) = (&mut decision, path) {
        forward.path = Some(path);
    }
    decision
}

/// [`decide_request`] on the normalised path.
fn route(
    snapshot: &Snapshot,
    edge: &EdgeConfig,
    head: &Head<'_>,
    facts: &RequestFacts<'_>,
) -> Decision {
    // A request on a Gateway's own address sees that Gateway's routes at
    // that port and nothing else; one elsewhere never sees them. A
    // snapshot without such Gateways pays this test only.
    let own = snapshot.gateway.own();
    if !own.is_empty()
        && let Some(local) = facts.local
        && let Some(table) = own.at(local)
    {
        return table
            .and_then(|t| gateway(t, None, edge, head, facts))
            .unwrap_or(Decision::Answer(NO_ROUTE, None));
    }
    // A snapshot without Gateway routes pays this test and nothing more.
    if !snapshot.gateway.is_empty()
        && let Some(decision) =
            gateway(&snapshot.gateway, Some(&snapshot.routes), edge, head, facts)
    {
        return decision;
    }
    match snapshot.routes.lookup(head.authority, head.path) {
        None => Decision::Answer(NO_ROUTE, None),
        Some(route) => forward(edge, route, head, facts, None),
    }
}

fn forward(
    edge: &EdgeConfig,
    route: &Route,
    head: &Head<'_>,
    facts: &RequestFacts<'_>,
    gateway: Option<GatewayForward>,
) -> Decision {
    if route.is_empty() {
        // A `from-to-www-redirect` twin has no endpoints: it is looked for
        // only here, off the path of a route that forwards.
        if let Some(to) = route.traffic().and_then(|t| t.www_redirect.as_deref()) {
            let location = www_location(to, head, facts);
            return Decision::Answer(Answer::redirect(308, location), Some(route.clone()));
        }
        return Decision::Answer(NO_ENDPOINT, Some(route.clone()));
    }
    match limits(edge, route, head.declared_length) {
        Ok((body_limit, tenant)) => Decision::Forward(Forward {
            upstream: route.upstream.clone(),
            body_limit,
            tenant,
            route: route.clone(),
            gateway,
            path: None,
            policy: None,
        }),
        Err(refusal) => Decision::Answer(Answer::refused(refusal), Some(route.clone())),
    }
}

/// The Gateway API decision of `table`, when the request's host is more
/// specific there than in the Ingress table `ingresses` (docs/gateway-api.md,
/// "Decisions"; `None`: a Gateway's own table, which no Ingress shares).
fn gateway(
    table: &GatewayTable,
    ingresses: Option<&RouteTable>,
    edge: &EdgeConfig,
    head: &Head<'_>,
    facts: &RequestFacts<'_>,
) -> Option<Decision> {
    let mut buf = [0u8; 256];
    let host = teapot_api::host::normalize_request_host(head.authority, &mut buf).unwrap_or("");
    let view = table.host(host);
    if view.rank == HostRank::None || ingresses.is_some_and(|r| view.rank < r.host_rank(host)) {
        return None;
    }
    // The port of a Gateway's own listener, for redirects.
    let listener_port = match ingresses {
        None => facts.local.map(|l| l.port()),
        Some(_) => None,
    };
    let candidate = match view.matching(head.path, facts) {
        Ok(Some(candidate)) => candidate,
        Ok(None) => return Some(Decision::Answer(NO_ROUTE, None)),
        Err(BudgetExhausted) => return Some(Decision::Answer(ROUTE_TOO_COSTLY, None)),
    };
    let prefix = match &candidate.matcher.path {
        PathMatch::Prefix(p) => Some(&**p),
        _ => None,
    };
    Some(match &*candidate.action {
        Action::Redirect(r) => {
            let prefix = candidate
                .filters
                .as_deref()
                .and_then(|f| f.matched_prefix.as_deref())
                .or(prefix);
            redirect(r, head, facts, prefix, listener_port)
        }
        Action::Unroutable => Decision::Answer(UNRESOLVED_BACKEND, None),
        Action::Backends { persistence, .. } => match affinity::pick_backend(
            &candidate.action,
            // Read only for a rule with sessionPersistence.
            persistence
                .as_ref()
                .and(facts.headers)
                .and_then(affinity::cookies)
                .as_deref(),
        ) {
            Some(backend) => {
                let backend_filters = backend.filters.get(candidate.match_index());
                // A backendRef's redirect answers before its backend is
                // looked at: the request never goes there, so neither its
                // endpoints nor its resolution matter.
                if let Some(r) = backend_filters.and_then(|f| f.redirect.as_ref()) {
                    return Some(redirect(r, head, facts, prefix, listener_port));
                }
                match &backend.route {
                    Ok(route) => forward(
                        edge,
                        route,
                        head,
                        facts,
                        Some(GatewayForward {
                            filters: candidate.filters.clone(),
                            backend_filters: backend_filters.cloned(),
                            h2c: backend.h2c,
                        }),
                    ),
                    Err(()) => Decision::Answer(UNRESOLVED_BACKEND, None),
                }
            }
            None => Decision::Answer(UNRESOLVED_BACKEND, None),
        },
    })
}

/// Where `from-to-www-redirect` sends a request for the twin host: the
/// same scheme, port (when the client named one) and target on `to`, one
/// trailing `/` dropped as ingress-nginx's redirect does (`/` goes to
/// `http://to`).
fn www_location(to: &str, head: &Head<'_>, facts: &RequestFacts<'_>) -> String {
    let scheme = if facts.tls == Some(true) {
        "https"
    } else {
        "http"
    };
    let port = head
        .authority
        .rsplit_once(':')
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let mut location = format!("{scheme}://{to}");
    if let Some(port) = port {
        location.push(':');
        location.push_str(port);
    }
    location.push_str(head.path);
    if let Some(query) = facts.query.filter(|q| !q.is_empty()) {
        location.push('?');
        location.push_str(query);
    }
    if location.ends_with('/') {
        location.pop();
    }
    location
}

/// A RequestRedirect's answer; `prefix` is the PathPrefix the rule
/// matched, for ReplacePrefixMatch; `listener_port` the port of a
/// Gateway's own listener the request came in on.
fn redirect(
    r: &Redirect,
    head: &Head<'_>,
    facts: &RequestFacts<'_>,
    prefix: Option<&str>,
    listener_port: Option<u16>,
) -> Decision {
    let scheme = if facts.tls == Some(true) {
        "https"
    } else {
        "http"
    };
    // Without a port or scheme of its own, a redirect keeps the
    // listener's port: a Gateway's own listener says it (the shared ones
    // are the scheme's well-known ports, which the location leaves out).
    let with_port;
    let r = match listener_port {
        Some(port) if r.port.is_none() && r.scheme.is_none() => {
            with_port = Redirect {
                port: Some(port),
                ..r.clone()
            };
            &with_port
        }
        _ => r,
    };
    let location = crate::plane::filters::redirect_location(
        r,
        scheme,
        head.authority,
        head.path,
        facts.query,
        prefix,
    );
    Decision::Answer(Answer::redirect(r.status, location), None)
}

/// The limits of the matched route: its body limit, and its tenant's rate
/// and connection gate.
fn limits(
    edge: &EdgeConfig,
    route: &Route,
    declared: Option<u64>,
) -> Result<(u64, Option<TenantPermit>), Refusal> {
    let limit = edge::body_limit(edge.max_body_size, route.max_body_size());
    if limit > 0 && declared.is_some_and(|n| n > limit) {
        return Err(Refusal::BodyTooLarge);
    }
    let tenant = route.tenant().map(|gate| gate.enter()).transpose()?;
    Ok((limit, tenant))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::compile::CompileOptions;
    use crate::compile::tests::compile_test_docs;

    /// An Ingress for `a.example` (`/` to `web`, `/empty` to a Service
    /// without endpoints), also the request pipeline's tests' store.
    pub(crate) const DOCS: &str = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: ops}
spec:
  ingressClassName: teapot
  rules:
  - host: a.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /empty, pathType: Prefix, backend: {service: {name: empty, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: teapot}
spec: {controller: teapot.dev/ingress-controller}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ops}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: ops}
spec: {ports: [{port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: ops, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints: [{addresses: [127.0.0.1]}]
ports: [{name: \"\", port: 8080}]
";

    /// An Ingress in `ops` for `host` (all paths) to `service:80`, with
    /// `annotations` (flow-style YAML entries).
    pub(crate) fn ops_ingress(name: &str, host: &str, annotations: &str, service: &str) -> String {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: ops
  annotations: {{{annotations}}}
spec:
  ingressClassName: teapot
  rules:
  - host: {host}
    http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: {service}, port: {{number: 80}}}}}}}}]}}
"
        )
    }

    fn head<'a>(authority: &'a str, path: &'a str) -> Head<'a> {
        Head {
            host_headers: 1,
            authority,
            path,
            requires_host: true,
            declared_length: None,
        }
    }

    fn answer(d: Decision) -> Answer {
        match d {
            Decision::Answer(a, _) => a,
            Decision::Forward(f) => panic!("forwarded to {:?}", f.upstream),
        }
    }

    #[test]
    fn routes_answers_and_limits_without_sockets() {
        let s = compile_test_docs(&[DOCS.to_string()], &CompileOptions::default());
        let edge = EdgeConfig::default();
        match decide(&s, &edge, &head("A.example:80", "/x")) {
            Decision::Forward(f) => {
                assert_eq!(f.upstream.endpoints.load().len(), 1);
                assert!(f.tenant.is_none(), "operator namespace: no tenant gate");
            }
            Decision::Answer(a, _) => panic!("{a:?}"),
        }
        assert_eq!(answer(decide(&s, &edge, &head("b.example", "/"))), NO_ROUTE);
        assert_eq!(
            answer(decide(&s, &edge, &head("a.example", "/empty"))),
            NO_ENDPOINT
        );

        let mut two = head("a.example", "/");
        two.host_headers = 2;
        assert_eq!(answer(decide(&s, &edge, &two)), MANY_HOSTS);
        let mut none = head("", "/");
        none.host_headers = 0;
        assert_eq!(answer(decide(&s, &edge, &none)), NO_HOST);
        none.requires_host = false;
        assert_eq!(answer(decide(&s, &edge, &none)), NO_ROUTE);

        let mut big = head("a.example", "/");
        big.declared_length = Some(edge.max_body_size + 1);
        let a = answer(decide(&s, &edge, &big));
        assert_eq!(a.refusal, Some(Refusal::BodyTooLarge));
        assert_eq!(a.status, 413);
        assert!(!a.keeps_connection() && !a.delayed());
    }

    #[test]
    fn the_normalised_path_is_matched_and_forwarded() {
        let s = compile_test_docs(&[DOCS.to_string()], &CompileOptions::default());
        let edge = EdgeConfig::default();
        // `/empty` has no endpoint: its 503 shows which rule matched.
        for path in [
            "/x/../empty",
            "/x/%2e%2e/empty",
            "/x/.%2E/empty/.",
            "/../empty",
        ] {
            assert_eq!(
                answer(decide(&s, &edge, &head("a.example", path))),
                NO_ENDPOINT,
                "{path}"
            );
        }
        let forwarded = |path| match decide(&s, &edge, &head("a.example", path)) {
            Decision::Forward(f) => f.path,
            Decision::Answer(a, _) => panic!("{path}: {a:?}"),
        };
        assert_eq!(forwarded("/x/./y").as_deref(), Some("/x/y"));
        assert_eq!(forwarded("/x/%2e%2e/y").as_deref(), Some("/y"));
        // Nothing to normalise: the client's path goes as sent.
        assert_eq!(forwarded("/x/y.html"), None);
        assert_eq!(forwarded("/x%2F..%2Fempty"), None);
    }
}

/// The Gateway API compile seen through the routing decision: status
/// reasons, matches, precedence, weights, host sharing with Ingresses and
/// tenant binding (compile::gateway builds what these read).
#[cfg(test)]
mod gateway_tests {
    use serde_json::Value;

    use crate::compile::CompileOptions;
    use crate::compile::snapshot::Snapshot;
    use crate::compile::tests::compile_test_docs;
    use crate::plane::decide::{Decision, Head, RequestFacts, decide_request};
    use crate::plane::edge::EdgeConfig;

    /// Services `web`, `v2` (with endpoints) and `empty` (none) in `infra`
    /// and `other`, a Gateway `gw` in `infra` (HTTP on 80 for routes from
    /// the same namespace, `*.example.com`; HTTP on 80 for all namespaces,
    /// `all.example.com`; TCP on 5432, which the L4 plane serves).
    fn base() -> Vec<String> {
        let svc = |ns: &str, name: &str, ip: &str| {
            format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{ports: [{{port: 8080}}]}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}-1, namespace: {ns}, labels: {{kubernetes.io/service-name: {name}}}}}\naddressType: IPv4\nendpoints: [{{addresses: [\"{ip}\"]}}]\nports: [{{name: \"\", port: 8080}}]\n"
            )
        };
        vec![
            svc("infra", "web", "10.0.0.1"),
            svc("infra", "v2", "10.0.0.2"),
            svc("other", "web", "10.0.0.3"),
            "apiVersion: v1\nkind: Service\nmetadata: {name: empty, namespace: infra}\nspec: {ports: [{port: 8080}]}\n".into(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: infra}\nspec:\n  gatewayClassName: teapot\n  listeners:\n  - {name: http, protocol: HTTP, port: 80, hostname: \"*.example.com\"}\n  - {name: all, protocol: HTTP, port: 80, hostname: all.example.com, allowedRoutes: {namespaces: {from: All}}}\n  - {name: tcp, protocol: TCP, port: 5432}\n".into(),
        ]
    }

    fn route(ns: &str, name: &str, spec: &str) -> String {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{spec}"
        )
    }

    fn compile(extra: &[String]) -> Snapshot {
        let mut docs = base();
        docs.extend_from_slice(extra);
        compile_test_docs(&docs, &CompileOptions::default())
    }

    fn status(s: &Snapshot) -> Value {
        serde_json::to_value(&s.report.gateway).unwrap()
    }

    fn route_conditions(s: &Snapshot, name: &str) -> Vec<(String, String, String)> {
        let status = status(s);
        let routes = status["httpRoutes"].as_array().unwrap();
        let r = routes
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {status}"));
        r["status"]["parents"][0]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let f = |k: &str| c[k].as_str().unwrap().to_string();
                (f("type"), f("status"), f("reason"))
            })
            .collect()
    }

    fn has(conds: &[(String, String, String)], t: &str, st: &str, reason: &str) -> bool {
        conds
            .iter()
            .any(|(a, b, c)| a == t && b == st && c == reason)
    }

    /// Where a request goes: the upstream's name, or the answer's status.
    fn go(s: &Snapshot, host: &str, path: &str, facts: &RequestFacts<'_>) -> String {
        let head = Head {
            host_headers: 1,
            authority: host,
            path,
            requires_host: true,
            declared_length: None,
        };
        match decide_request(s, &EdgeConfig::default(), &head, facts) {
            Decision::Forward(f) => f.upstream.name.clone(),
            Decision::Answer(a, _) => match a.location {
                Some(l) => format!("{} {l}", a.status),
                None => a.status.to_string(),
            },
        }
    }

    const PLAIN: RequestFacts<'static> = RequestFacts::UNKNOWN;

    /// A request that came in on `local`.
    fn on(local: &str) -> RequestFacts<'static> {
        RequestFacts {
            local: Some(local.parse().unwrap()),
            ..RequestFacts::UNKNOWN
        }
    }

    /// A Gateway with its own address (HTTP on 80 and 8080: the pool's
    /// 127.0.0.1) beside the base Gateway on the shared listeners: each
    /// socket of its address sees its routes at that port, whatever port
    /// the Host names; the shared listeners never see them, nor its
    /// address the shared routes.
    #[test]
    fn a_gateway_with_its_own_address_is_reached_there_only_by_port() {
        use crate::compile::l4::{L4Config, L4Inputs};
        let mut docs = base();
        docs.extend([
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: own, namespace: infra}\nspec:\n  gatewayClassName: teapot\n  listeners:\n  - {name: web, protocol: HTTP, port: 80}\n  - {name: alt, protocol: HTTP, port: 8080}\n".to_string(),
            route(
                "infra",
                "on-80",
                "  parentRefs: [{name: own, sectionName: web}]\n  hostnames: [a.example.com]\n  rules: [{backendRefs: [{name: v2, port: 8080}]}]\n",
            ),
            route(
                "infra",
                "on-8080",
                "  parentRefs: [{name: own, port: 8080}]\n  hostnames: [b.example.com]\n  rules: [{filters: [{type: RequestRedirect, requestRedirect: {hostname: c.example.com}}]}]\n",
            ),
            route(
                "infra",
                "shared",
                "  parentRefs: [{name: gw, sectionName: http}]\n  hostnames: [a.example.com]\n  rules: [{backendRefs: [{name: web, port: 8080}]}]\n",
            ),
        ]);
        let options = CompileOptions {
            l4: Some(L4Inputs {
                config: std::sync::Arc::new(L4Config {
                    // The base Gateway's TCP listener holds the first address:
                    // a Gateway's address is its own.
                    pools: vec!["default=127.0.0.0/31".parse().unwrap()],
                    ..L4Config::default()
                }),
                previous: Default::default(),
                runtime: Default::default(),
            }),
            ..CompileOptions::default()
        };
        let s = compile_test_docs(&docs, &options);
        // Its sockets: that port's routes; the Host's port is not read.
        assert_eq!(
            go(&s, "a.example.com", "/", &on("127.0.0.1:80")),
            "infra/v2:8080"
        );
        assert_eq!(
            go(&s, "b.example.com:8080", "/", &on("127.0.0.1:80")),
            "404"
        );
        assert_eq!(
            go(&s, "a.example.com:80", "/", &on("127.0.0.1:8080")),
            "404"
        );
        // A redirect without port or scheme keeps the listener's port.
        assert_eq!(
            go(&s, "b.example.com", "/x", &on("127.0.0.1:8080")),
            "302 http://c.example.com:8080/x"
        );
        // Its address at a port without its HTTP listener: nothing, not
        // the shared routes.
        assert_eq!(go(&s, "a.example.com", "/", &on("127.0.0.1:9999")), "404");
        // The shared listeners: the shared Gateway's route, never its.
        assert_eq!(
            go(&s, "a.example.com", "/", &on("127.0.0.2:80")),
            "infra/web:8080"
        );
        assert_eq!(go(&s, "a.example.com", "/", &PLAIN), "infra/web:8080");
        assert_eq!(go(&s, "b.example.com", "/", &on("127.0.0.2:8080")), "404");
        // A redirect on the shared listeners keeps the scheme's port.
        assert!(!s.gateway.own().is_empty());
    }

    #[test]
    fn status_reasons_follow_the_specification() {
        let s = compile(&[
            route(
                "infra",
                "ok",
                "  parentRefs: [{name: gw, sectionName: http}]\n  hostnames: [a.example.com]\n  rules: [{backendRefs: [{name: web, port: 8080}]}]\n",
            ),
            route(
                "infra",
                "no-section",
                "  parentRefs: [{name: gw, sectionName: nope}]\n",
            ),
            route("infra", "no-port", "  parentRefs: [{name: gw, port: 81}]\n"),
            route(
                "other",
                "not-allowed",
                "  parentRefs: [{name: gw, namespace: infra, sectionName: http}]\n",
            ),
            route(
                "infra",
                "no-hostname",
                "  parentRefs: [{name: gw, sectionName: http}]\n  hostnames: [a.example.org]\n",
            ),
            route(
                "infra",
                "missing",
                "  parentRefs: [{name: gw, sectionName: http}]\n  hostnames: [m.example.com]\n  rules: [{backendRefs: [{name: nothing, port: 8080}]}]\n",
            ),
            route(
                "infra",
                "kind",
                "  parentRefs: [{name: gw, sectionName: http}]\n  hostnames: [k.example.com]\n  rules: [{backendRefs: [{group: example.com, kind: Bucket, name: b}]}]\n",
            ),
            route(
                "infra",
                "cross",
                "  parentRefs: [{name: gw, sectionName: http}]\n  hostnames: [c.example.com]\n  rules: [{backendRefs: [{name: web, namespace: other, port: 8080}]}]\n",
            ),
            route(
                "infra",
                "regex",
                "  parentRefs: [{name: gw, sectionName: http}]\n  hostnames: [r.example.com]\n  rules: [{matches: [{path: {type: RegularExpression, value: \"(\"}}]}]\n",
            ),
        ]);
        assert!(has(
            &route_conditions(&s, "ok"),
            "Accepted",
            "True",
            "Accepted"
        ));
        assert!(has(
            &route_conditions(&s, "ok"),
            "ResolvedRefs",
            "True",
            "ResolvedRefs"
        ));
        assert!(has(
            &route_conditions(&s, "no-section"),
            "Accepted",
            "False",
            "NoMatchingParent"
        ));
        assert!(has(
            &route_conditions(&s, "no-port"),
            "Accepted",
            "False",
            "NoMatchingParent"
        ));
        assert!(has(
            &route_conditions(&s, "not-allowed"),
            "Accepted",
            "False",
            "NotAllowedByListeners"
        ));
        assert!(has(
            &route_conditions(&s, "no-hostname"),
            "Accepted",
            "False",
            "NoMatchingListenerHostname"
        ));
        assert!(has(
            &route_conditions(&s, "missing"),
            "ResolvedRefs",
            "False",
            "BackendNotFound"
        ));
        assert!(has(
            &route_conditions(&s, "kind"),
            "ResolvedRefs",
            "False",
            "InvalidKind"
        ));
        assert!(has(
            &route_conditions(&s, "cross"),
            "ResolvedRefs",
            "False",
            "RefNotPermitted"
        ));
        assert!(has(
            &route_conditions(&s, "regex"),
            "Accepted",
            "False",
            "UnsupportedValue"
        ));
        // Unresolved backends answer 500; the rest routes.
        assert_eq!(go(&s, "a.example.com", "/", &PLAIN), "infra/web:8080");
        assert_eq!(go(&s, "m.example.com", "/", &PLAIN), "500");
        assert_eq!(go(&s, "c.example.com", "/", &PLAIN), "500");
        assert_eq!(go(&s, "z.example.com", "/", &PLAIN), "404");

        let status = status(&s);
        let gw = &status["gateways"][0]["status"];
        let listener = |name: &str| {
            gw["listeners"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["name"] == name)
                .unwrap()
                .clone()
        };
        assert_eq!(listener("http")["attachedRoutes"], 4, "{gw}");
        assert_eq!(listener("tcp")["supportedKinds"][0]["kind"], "TCPRoute");
        assert_eq!(
            listener("tcp")["conditions"][0]["reason"],
            "UnsupportedProtocol"
        );
        assert_eq!(gw["conditions"][0]["type"], "Accepted");
        assert_eq!(gw["conditions"][0]["status"], "True");
    }

    #[test]
    fn grpc_routes_match_service_and_method_to_h2c_backends() {
        let grpc = "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: g, namespace: infra}\nspec:\n  parentRefs: [{name: gw}]\n  hostnames: [grpc.example.com]\n  rules:\n  - matches: [{method: {service: echo.Echo, method: Ping}}]\n    backendRefs: [{name: v2, port: 8080}]\n  - matches: [{method: {service: echo.Echo}}, {headers: [{name: x-canary, value: \"1\"}]}]\n    backendRefs: [{name: web, port: 8080}]\n".to_string();
        let s = compile(&[grpc]);
        let status = status(&s);
        assert_eq!(
            status["grpcRoutes"][0]["status"]["parents"][0]["conditions"][0]["reason"], "Accepted",
            "{status}"
        );
        assert_eq!(
            go(&s, "grpc.example.com", "/echo.Echo/Ping", &PLAIN),
            "infra/v2:8080"
        );
        assert_eq!(
            go(&s, "grpc.example.com", "/echo.Echo/Other", &PLAIN),
            "infra/web:8080"
        );
        assert_eq!(go(&s, "grpc.example.com", "/other.Svc/Ping", &PLAIN), "404");
        let canary: &[(&str, &str)] = &[("x-canary", "1")];
        let facts = RequestFacts {
            method: "POST",
            query: Some(""),
            headers: Some(&canary),
            tls: Some(false),
            local: None,
        };
        assert_eq!(
            go(&s, "grpc.example.com", "/other.Svc/Ping", &facts),
            "infra/web:8080"
        );
        let head = Head {
            host_headers: 1,
            authority: "grpc.example.com",
            path: "/echo.Echo/Ping",
            requires_host: true,
            declared_length: None,
        };
        match decide_request(&s, &EdgeConfig::default(), &head, &PLAIN) {
            Decision::Forward(f) => {
                assert!(f.gateway.is_some_and(|g| g.h2c), "gRPC backends are h2c")
            }
            Decision::Answer(a, _) => panic!("{a:?}"),
        }
    }

    #[test]
    fn https_listeners_serve_their_certificate_by_sni_and_only_on_tls() {
        let pem = teapot_testkit::certs::self_signed(&["secure.example.com"]);
        let secret = teapot_testkit::certs::tls_secret_yaml("certs", "tls", &pem);
        let gw = |grant: bool| {
            let mut docs = vec![
                secret.clone(),
                "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: tls, namespace: infra}\nspec:\n  gatewayClassName: teapot\n  listeners:\n  - name: https\n    protocol: HTTPS\n    port: 443\n    hostname: secure.example.com\n    tls: {certificateRefs: [{name: tls, namespace: certs}]}\n".to_string(),
                route("infra", "secure", "  parentRefs: [{name: tls}]\n  rules: [{backendRefs: [{name: web, port: 8080}]}]\n"),
            ];
            if grant {
                docs.push("apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {name: g, namespace: certs}\nspec:\n  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: infra}]\n  to: [{group: \"\", kind: Secret}]\n".into());
            }
            compile(&docs)
        };
        let denied = gw(false);
        assert!(denied.certs.lookup("secure.example.com").is_none());
        let listener = &status(&denied)["gateways"][1]["status"]["listeners"][0];
        let resolved = listener["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "ResolvedRefs")
            .unwrap();
        assert_eq!(resolved["reason"], "RefNotPermitted", "{listener}");

        let s = gw(true);
        assert!(s.certs.lookup("secure.example.com").is_some());
        let on = |tls: bool| RequestFacts {
            method: "GET",
            query: Some(""),
            headers: None,
            tls: Some(tls),
            local: None,
        };
        assert_eq!(
            go(&s, "secure.example.com", "/", &on(true)),
            "infra/web:8080"
        );
        assert_eq!(
            go(&s, "secure.example.com", "/", &on(false)),
            "404",
            "HTTPS listener only"
        );
    }

    #[test]
    fn listeners_select_route_namespaces_by_label() {
        let gw = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: sel, namespace: infra}\nspec:\n  gatewayClassName: teapot\n  listeners:\n  - {name: http, protocol: HTTP, port: 80, hostname: sel.example.com, allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {team: web}, matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [blocked]}]}}}}\n".to_string();
        let ns = |name: &str, team: &str| {
            format!(
                "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {{team: {team}}}}}\n"
            )
        };
        let r = |ns: &str| route(ns, "r", "  parentRefs: [{name: sel, namespace: infra}]\n");
        let s = compile(&[
            gw,
            ns("other", "web"),
            ns("blocked", "web"),
            ns("infra", "ops"),
            r("other"),
            r("blocked"),
            r("infra"),
        ]);
        let status = status(&s);
        let reason = |ns: &str| {
            status["httpRoutes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["namespace"] == ns)
                .unwrap()["status"]["parents"][0]["conditions"][0]["reason"]
                .clone()
        };
        assert_eq!(reason("other"), "Accepted");
        assert_eq!(reason("blocked"), "NotAllowedByListeners");
        assert_eq!(reason("infra"), "NotAllowedByListeners");
    }

    #[test]
    fn a_reference_grant_permits_a_cross_namespace_backend() {
        let grant = "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {name: g, namespace: other}\nspec:\n  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: infra}]\n  to: [{group: \"\", kind: Service}]\n".to_string();
        let s = compile(&[
            grant,
            route(
                "infra",
                "cross",
                "  parentRefs: [{name: gw}]\n  hostnames: [c.example.com]\n  rules: [{backendRefs: [{name: web, namespace: other, port: 8080}]}]\n",
            ),
            route(
                "other",
                "from-other",
                "  parentRefs: [{name: gw, namespace: infra}]\n  hostnames: [all.example.com]\n  rules: [{backendRefs: [{name: web, port: 8080}]}]\n",
            ),
        ]);
        assert!(has(
            &route_conditions(&s, "cross"),
            "ResolvedRefs",
            "True",
            "ResolvedRefs"
        ));
        assert_eq!(go(&s, "c.example.com", "/", &PLAIN), "other/web:8080");
        // Attached to the listener admitting All, not to `http` (Same).
        assert!(has(
            &route_conditions(&s, "from-other"),
            "Accepted",
            "True",
            "Accepted"
        ));
        assert_eq!(go(&s, "all.example.com", "/", &PLAIN), "other/web:8080");
    }

    #[test]
    fn matches_precedence_and_filters_route_as_specified() {
        let s = compile(&[
            route(
                "infra",
                "m",
                "  parentRefs: [{name: gw}]\n  hostnames: [m.example.com]\n  rules:\n  - backendRefs: [{name: web, port: 8080}]\n  - matches: [{headers: [{name: version, value: two}]}]\n    backendRefs: [{name: v2, port: 8080}]\n  - matches: [{path: {type: Exact, value: /exact}, method: POST}]\n    backendRefs: [{name: v2, port: 8080}]\n  - matches: [{path: {type: PathPrefix, value: /old}}]\n    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}, statusCode: 301}}]\n  - matches: [{path: {type: PathPrefix, value: /empty}}]\n    backendRefs: [{name: empty, port: 8080}]\n  - matches: [{queryParams: [{name: animal, value: whale}]}]\n    backendRefs: [{name: v2, port: 8080}]\n",
            ),
            // A younger route on the same host with a longer prefix wins
            // its paths; precedence spans routes.
            route(
                "infra",
                "n",
                "  parentRefs: [{name: gw}]\n  hostnames: [m.example.com]\n  rules: [{matches: [{path: {type: PathPrefix, value: /v2}}], backendRefs: [{name: v2, port: 8080}]}]\n",
            ),
        ]);
        let headers: &[(&str, &str)] = &[("Version", "two")];
        let with = |method: &'static str, query: &'static str| RequestFacts {
            method,
            query: Some(query),
            headers: Some(&headers),
            tls: Some(false),
            local: None,
        };
        assert_eq!(go(&s, "m.example.com", "/", &PLAIN), "infra/web:8080");
        assert_eq!(
            go(&s, "m.example.com", "/", &with("GET", "")),
            "infra/v2:8080"
        );
        assert_eq!(
            go(&s, "m.example.com", "/exact", &with("POST", "")),
            "infra/v2:8080"
        );
        let none: &[(&str, &str)] = &[];
        let bare = |method: &'static str, query: &'static str| RequestFacts {
            method,
            query: Some(query),
            headers: Some(&none),
            tls: Some(false),
            local: None,
        };
        assert_eq!(
            go(&s, "m.example.com", "/exact", &bare("GET", "")),
            "infra/web:8080"
        );
        assert_eq!(
            go(&s, "m.example.com", "/x", &bare("GET", "animal=whale")),
            "infra/v2:8080"
        );
        assert_eq!(go(&s, "m.example.com", "/v2/x", &PLAIN), "infra/v2:8080");
        assert_eq!(go(&s, "m.example.com", "/empty", &PLAIN), "503");
        assert_eq!(
            go(&s, "m.example.com:80", "/old/page", &bare("GET", "")),
            "301 http://m.example.com/new/page"
        );
    }

    #[test]
    fn gateway_rules_match_the_normalised_path() {
        let s = compile(&[route(
            "infra",
            "p",
            "  parentRefs: [{name: gw}]\n  hostnames: [p.example.com]\n  rules:\n  - matches: [{path: {type: PathPrefix, value: /public}}]\n    backendRefs: [{name: web, port: 8080}]\n  - matches: [{path: {type: PathPrefix, value: /old}}]\n    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}, statusCode: 301}}]\n",
        )]);
        let host = "p.example.com";
        assert_eq!(go(&s, host, "/public/x", &PLAIN), "infra/web:8080");
        for path in [
            "/public/../admin",
            "/public/%2e%2e/admin",
            "/public/.%2e/admin",
        ] {
            assert_eq!(go(&s, host, path, &PLAIN), "404", "{path}");
        }
        assert_eq!(go(&s, host, "/admin/../public/x", &PLAIN), "infra/web:8080");
        // A redirect rewrites the path it matched.
        assert_eq!(
            go(&s, host, "/public/../old/./page", &PLAIN),
            "301 http://p.example.com/new/page"
        );
    }

    #[test]
    fn a_backend_redirect_answers_instead_of_forwarding() {
        let s = compile(&[route(
            "infra",
            "br",
            "  parentRefs: [{name: gw}]\n  hostnames: [br.example.com]\n  rules:\n  - matches: [{path: {type: PathPrefix, value: /full}}]\n    backendRefs: [{name: web, port: 8080, filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /redirected-full}}}]}]\n  - matches: [{path: {type: PathPrefix, value: /prefix}}, {path: {type: PathPrefix, value: /other}}]\n    backendRefs: [{name: web, port: 8080, filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /redirected-prefix}, port: 8443, scheme: https}}]}]\n  - matches: [{path: {type: PathPrefix, value: /nowhere}}]\n    backendRefs: [{name: empty, port: 8080, filters: [{type: RequestRedirect, requestRedirect: {hostname: elsewhere.example, statusCode: 301}}]}]\n",
        )]);
        assert_eq!(
            go(&s, "br.example.com", "/full/original", &PLAIN),
            "302 http://br.example.com/redirected-full"
        );
        assert_eq!(
            go(&s, "br.example.com", "/prefix/original", &PLAIN),
            "302 https://br.example.com:8443/redirected-prefix/original"
        );
        // The prefix is that of the match that chose the rule.
        assert_eq!(
            go(&s, "br.example.com", "/other/x", &PLAIN),
            "302 https://br.example.com:8443/redirected-prefix/x"
        );
        // The backend is never reached, so its missing endpoints do not
        // matter.
        assert_eq!(
            go(&s, "br.example.com:80", "/nowhere/a", &PLAIN),
            "301 http://elsewhere.example/nowhere/a"
        );
    }

    #[test]
    fn a_backend_prefix_rewrite_replaces_the_prefix_its_match_took() {
        let s = compile(&[route(
            "infra",
            "bw",
            "  parentRefs: [{name: gw}]\n  hostnames: [bw.example.com]\n  rules:\n  - matches: [{path: {type: PathPrefix, value: /prefix}}, {path: {type: PathPrefix, value: /p2/deeper}}]\n    filters: [{type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: x-rule, value: \"1\"}]}}]\n    backendRefs: [{name: web, port: 8080, filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /rewritten-prefix}}}]}]\n",
        )]);
        let target = |path: &str| {
            let head = Head {
                host_headers: 1,
                authority: "bw.example.com",
                path,
                requires_host: true,
                declared_length: None,
            };
            let Decision::Forward(f) = decide_request(&s, &EdgeConfig::default(), &head, &PLAIN)
            else {
                panic!("{path}: not forwarded");
            };
            let g = f.gateway.expect("a Gateway API forward");
            assert_eq!(
                g.each().count(),
                2,
                "the rule's filters, then the backend's"
            );
            let backend = g.backend_filters.expect("the backendRef's filters");
            crate::plane::filters::rewritten_target(&backend, path, Some("q=1")).unwrap()
        };
        assert_eq!(target("/prefix/original"), "/rewritten-prefix/original?q=1");
        assert_eq!(target("/p2/deeper/x"), "/rewritten-prefix/x?q=1");
    }

    #[test]
    fn weights_split_traffic_and_zero_weights_get_none() {
        let s = compile(&[route(
            "infra",
            "w",
            "  parentRefs: [{name: gw}]\n  hostnames: [w.example.com]\n  rules: [{backendRefs: [{name: web, port: 8080, weight: 3}, {name: v2, port: 8080, weight: 1}, {name: empty, port: 8080, weight: 0}]}]\n",
        )]);
        let hits: Vec<String> = (0..400)
            .map(|_| go(&s, "w.example.com", "/", &PLAIN))
            .collect();
        let web = hits.iter().filter(|h| *h == "infra/web:8080").count();
        let v2 = hits.iter().filter(|h| *h == "infra/v2:8080").count();
        assert_eq!((web, v2), (300, 100));
    }

    #[test]
    fn ingress_and_route_on_one_host_the_older_holds_it() {
        let ingress = |name: &str, created: &str, host: &str| {
            format!(
                "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: infra, creationTimestamp: \"{created}\"}}\nspec:\n  ingressClassName: teapot\n  rules:\n  - host: {host}\n    http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: empty, port: {{number: 8080}}}}}}}}]}}\n"
            )
        };
        let route = |name: &str, created: &str, host: &str| {
            format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: infra, creationTimestamp: \"{created}\"}}\nspec:\n  parentRefs: [{{name: gw}}]\n  hostnames: [{host}]\n  rules: [{{backendRefs: [{{name: web, port: 8080}}]}}]\n"
            )
        };
        let s = compile(&[
            ingress("old-ingress", "2024-01-01T00:00:00Z", "one.example.com"),
            route("young-route", "2024-02-01T00:00:00Z", "one.example.com"),
            route("old-route", "2024-01-01T00:00:00Z", "two.example.com"),
            ingress("young-ingress", "2024-02-01T00:00:00Z", "two.example.com"),
            // Different patterns: the more specific one serves.
            route(
                "wild-route",
                "2024-01-01T00:00:00Z",
                "\"*.three.example.com\"",
            ),
            ingress(
                "exact-ingress",
                "2024-02-01T00:00:00Z",
                "a.three.example.com",
            ),
        ]);
        assert_eq!(
            go(&s, "one.example.com", "/", &PLAIN),
            "503",
            "the older Ingress"
        );
        assert!(has(
            &route_conditions(&s, "young-route"),
            "Conflicted",
            "True",
            "OlderIngressWins"
        ));
        assert_eq!(
            go(&s, "two.example.com", "/", &PLAIN),
            "infra/web:8080",
            "the older route"
        );
        let young = s
            .report
            .ingresses
            .iter()
            .find(|r| r.name == "young-ingress")
            .unwrap();
        let conflicted = young
            .conditions
            .iter()
            .find(|c| c.type_ == "Conflicted")
            .unwrap();
        assert_eq!(conflicted.status, "True", "{conflicted:?}");
        assert!(conflicted.message.contains("infra/old-route"));
        assert_eq!(
            go(&s, "a.three.example.com", "/", &PLAIN),
            "503",
            "exact Ingress host"
        );
        assert_eq!(
            go(&s, "b.c.three.example.com", "/", &PLAIN),
            "infra/web:8080",
            "any depth"
        );
    }

    #[test]
    fn tenant_listeners_without_hostname_bind_to_the_assigned_hostname() {
        let docs = vec![
            "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: acme}\nspec: {cluster: acme, nodeCIDRs: [10.1.0.0/24]}\n".to_string(),
            "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: tenant-acme}\nspec: {ports: [{port: 80}]}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: tenant-acme, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints: [{addresses: [10.1.0.5]}]\nports: [{name: \"\", port: 30080}]\n".into(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: shop.default, namespace: tenant-acme}\nspec:\n  gatewayClassName: teapot\n  listeners: [{name: http, protocol: HTTP, port: 80}]\n".into(),
            route("tenant-acme", "web.default", "  parentRefs: [{name: shop.default}]\n  rules: [{backendRefs: [{name: web, port: 80}]}]\n"),
        ];
        let options = CompileOptions {
            domain: "example.net".into(),
            ..CompileOptions::default()
        };
        let s = compile_test_docs(&docs, &options);
        assert_eq!(
            go(&s, "shop-default.acme.lb.example.net", "/", &PLAIN),
            "tenant-acme/web:80"
        );
        assert_eq!(go(&s, "other.example", "/", &PLAIN), "404");
        let status = status(&s);
        assert_eq!(
            status["gateways"][0]["status"]["addresses"][0]["value"],
            "shop-default.acme.lb.example.net"
        );
        let f = match decide_request(
            &s,
            &EdgeConfig::default(),
            &Head {
                host_headers: 1,
                authority: "shop-default.acme.lb.example.net",
                path: "/",
                requires_host: true,
                declared_length: None,
            },
            &PLAIN,
        ) {
            Decision::Forward(f) => f,
            Decision::Answer(a, _) => panic!("{a:?}"),
        };
        assert!(
            f.tenant.is_some(),
            "the tenant gate applies to its Gateway routes"
        );
    }

    /// `from-to-www-redirect`: the twin answers 308 to the rule's host on
    /// the client's scheme and port, target kept (one trailing `/`
    /// dropped); a twin some rule serves keeps its rules.
    #[test]
    fn from_to_www_redirect_answers_the_twin_host() {
        let www = |name: &str, host: &str| {
            super::tests::ops_ingress(
                name,
                host,
                "nginx.ingress.kubernetes.io/from-to-www-redirect: 'true'",
                "web",
            )
        };
        let held = www("held-www", "www.held.example").replace("'true'", "'false'");
        let s = compile_test_docs(
            &[
                super::tests::DOCS.to_string(),
                www("shop", "shop.example"),
                www("blog", "www.blog.example"),
                www("held", "held.example"),
                held,
            ],
            &CompileOptions::default(),
        );
        let query = RequestFacts {
            query: Some("x=1"),
            ..PLAIN
        };
        let tls = RequestFacts {
            tls: Some(true),
            ..PLAIN
        };
        assert_eq!(
            go(&s, "www.shop.example", "/foo", &query),
            "308 http://shop.example/foo?x=1"
        );
        assert_eq!(
            go(&s, "WWW.Shop.Example:8080", "/", &tls),
            "308 https://shop.example:8080"
        );
        assert_eq!(
            go(&s, "blog.example", "/a/", &PLAIN),
            "308 http://www.blog.example/a"
        );
        assert_eq!(go(&s, "shop.example", "/foo", &PLAIN), "ops/web:80");
        assert_eq!(go(&s, "www.held.example", "/", &PLAIN), "ops/web:80");
        assert_eq!(go(&s, "www.www.blog.example", "/", &PLAIN), "404");
    }

    /// A tenant's twin is answered only when the tenant may serve that name
    /// itself: its subtree's names, its allowed domains; not a custom name
    /// its Ingress does not name.
    #[test]
    fn a_tenants_www_twin_stays_within_its_hosts() {
        let docs = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec: {cluster: acme, nodeCIDRs: [10.1.0.0/24], allowedDomains: [www.shop.com]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: tenant-acme}
spec: {ports: [{port: 80}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: tenant-acme
  annotations: {nginx.ingress.kubernetes.io/from-to-www-redirect: 'true'}
spec:
  ingressClassName: teapot
  rules:
  - host: shop.acme.lb.example.net
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
  - host: www.shop.com
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
";
        let options = CompileOptions {
            domain: "example.net".into(),
            ..CompileOptions::default()
        };
        let s = compile_test_docs(
            &[super::tests::DOCS.to_string(), docs.to_string()],
            &options,
        );
        assert_eq!(
            go(&s, "www.shop.acme.lb.example.net", "/", &PLAIN),
            "308 http://shop.acme.lb.example.net"
        );
        assert_eq!(go(&s, "www.shop.com", "/", &PLAIN), "503");
        assert!(!s.routes.has_exact_host("shop.com"));
    }
}
