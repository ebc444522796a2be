//! The policy each route carries: the limits an Ingress's annotations
//! set, its tenant's gate and its traffic policy (the ingress-nginx
//! annotations, crate::compile::traffic), one shared [`RoutePolicy`] per
//! distinct combination of the first two (an Ingress with a traffic policy
//! has its own). The Ingress and the Gateway API compiles both take theirs
//! here.

use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use teapot_model::store::FastHashMap;
use teapot_model::tenancy::TenantView;

use crate::compile::backends::{PortRef, Resolver};
use crate::compile::routes::RoutePolicy;
use crate::compile::traffic::{
    AuthAnnotations, CustomErrors, ErrorPageAnnotations, ExternalAuth, NginxAnnotations,
    TrafficPolicy,
};
use crate::compile::upstream::Upstream;
use crate::live::endpoints::EndpointRegistry;
use crate::live::fairness::TenantGates;
use crate::live::rate_table::{self, RateTable};

/// The per-Ingress limits its routes carry, one shared [`RoutePolicy`]
/// per distinct (tenant, body limit).
pub(crate) struct Policies<'a> {
    gates: &'a TenantGates,
    cache: FastHashMap<PolicyKey<'a>, Option<Arc<RoutePolicy>>>,
    /// `ssl-redirect` where an Ingress with TLS hosts says nothing
    /// (crate::compile::CompileOptions::ssl_redirect_default).
    pub(crate) ssl_redirect_default: bool,
}

/// (tenant cluster, `teapot.dev/max-body-size`).
pub(crate) type PolicyKey<'a> = (Option<&'a str>, Option<u64>);

impl<'a> Policies<'a> {
    pub(crate) fn new(gates: &'a TenantGates) -> Policies<'a> {
        Policies {
            gates,
            cache: FastHashMap::default(),
            ssl_redirect_default: true,
        }
    }

    /// The policy of a Gateway API route: its tenant's gate only (no
    /// annotations there).
    pub(crate) fn tenant(&mut self, tenant: Option<&TenantView<'a>>) -> Option<Arc<RoutePolicy>> {
        let cluster = tenant.map(|t| t.cluster);
        let gates = self.gates;
        self.cache
            .entry((cluster, None))
            .or_insert_with(|| {
                tenant.map(|t| {
                    let limits =
                        teapot_api::tenant::TenantLimits::effective(t.tenant.spec.limits.as_ref());
                    Arc::new(RoutePolicy {
                        max_body_size: None,
                        tenant: Some(gates.gate(t.cluster, &limits)),
                        traffic: None,
                    })
                })
            })
            .clone()
    }

    /// `global-rate-limit`'s counts (crate::live::global_counts).
    pub(crate) fn global_counts(&self) -> &'a crate::live::global_counts::GlobalCounts {
        &self.gates.global_counts
    }

    /// The rate counters and in-flight counts of `tenant`'s routes: its
    /// fixed-size table (sized by its `maxConnections`), or the operator
    /// namespaces' one. Every rate limit of a tenant, an Ingress's or a
    /// RouteTrafficPolicy's, counts in the same table.
    pub(crate) fn rate_table(&self, tenant: Option<&TenantView<'a>>) -> Arc<RateTable> {
        match tenant {
            Some(t) => {
                let limits =
                    teapot_api::tenant::TenantLimits::effective(t.tenant.spec.limits.as_ref());
                self.gates
                    .rate_tables
                    .table(t.cluster, RateTable::slots_for(limits.max_connections))
            }
            None => self.gates.rate_tables.table("", rate_table::OPERATOR_SLOTS),
        }
    }

    /// The policy of `ingress` and the annotations it could not read or
    /// does not serve (the webhook refuses those in tenant namespaces; an
    /// operator's manifest can still carry one, and is told).
    pub(crate) fn of(
        &mut self,
        ingress: &Ingress,
        tenant: Option<&TenantView<'a>>,
        resolver: &Resolver<'_>,
    ) -> (Option<Arc<RoutePolicy>>, Vec<String>) {
        use teapot_api::annotations::{self, AnnotationValue, ObjectKind};
        const MAX_BODY: &str = "teapot.dev/max-body-size";
        const SSL_REDIRECT: &str = "teapot.dev/ssl-redirect";
        const ALT_SVC: &str = "teapot.dev/alt-svc";
        const NGINX_BODY: &str = "nginx.ingress.kubernetes.io/proxy-body-size";
        const AUTH_URL: &str = "nginx.ingress.kubernetes.io/auth-url";
        const ERRORS: [&str; 2] = [
            "nginx.ingress.kubernetes.io/custom-http-errors",
            "nginx.ingress.kubernetes.io/default-backend",
        ];
        let mut problems = Vec::new();
        let all = ingress.metadata.annotations.as_ref();
        // ingress-nginx's name for the same limit; teapot's wins.
        let max_body_size = [MAX_BODY, NGINX_BODY].into_iter().find_map(|key| {
            let value = all.and_then(|a| a.get(key))?;
            match annotations::parse(ObjectKind::Ingress, key, value) {
                Ok(AnnotationValue::Size(n)) => Some(n),
                Ok(_) => None,
                Err(e) => {
                    problems.push(format!("{key}: {e}; the operator maximum applies"));
                    None
                }
            }
        });
        let cluster = tenant.map(|t| t.cluster);
        let gates = self.gates;
        let limits = tenant
            .map(|t| teapot_api::tenant::TenantLimits::effective(t.tenant.spec.limits.as_ref()));
        let nginx = NginxAnnotations::read(all, &mut problems);
        let table = || self.rate_table(tenant);
        // `teapot.dev/ssl-redirect`, else the fleet's default (on, as
        // ingress-nginx); `nginx.ingress.kubernetes.io/ssl-redirect` wins
        // over both (crate::compile::traffic).
        let teapot_redirect = match all
            .and_then(|a| a.get(SSL_REDIRECT))
            .map(|v| annotations::parse(ObjectKind::Ingress, SSL_REDIRECT, v))
        {
            Some(Ok(AnnotationValue::Bool(on))) => on,
            _ => self.ssl_redirect_default,
        };
        let redirects_tls = teapot_redirect && has_tls_hosts(ingress);
        // Most Ingresses carry no ingress-nginx annotation: no name made.
        let wants_auth = all.is_some_and(|a| a.contains_key(AUTH_URL));
        let wants_errors = all.is_some_and(|a| ERRORS.iter().any(|k| a.contains_key(*k)));
        // `auth-type: basic` (crate::compile::basic_auth): served, or
        // refused (503, or the Ingress unrouted), never left open.
        let basic = crate::compile::basic_auth::of_ingress(
            resolver.store(),
            ingress,
            cluster,
            &mut problems,
        );
        // `custom-headers` (crate::compile::custom_headers): its fields,
        // or 503 on its routes when its ConfigMap cannot be served.
        let custom_headers = crate::compile::custom_headers::of_ingress(
            resolver.store(),
            ingress,
            cluster,
            &mut problems,
        );
        // `teapot.dev/alt-svc: "false"`: its routes' answers never
        // advertise HTTP/3 (crate::plane::alt_svc); on unless false.
        let withhold_alt_svc = match all
            .and_then(|a| a.get(ALT_SVC))
            .map(|v| annotations::parse(ObjectKind::Ingress, ALT_SVC, v))
        {
            Some(Ok(AnnotationValue::Bool(on))) => !on,
            // Not advertising is the side that breaks nothing.
            Some(Err(e)) => {
                problems.push(format!("{ALT_SVC}: {e}; HTTP/3 is not advertised"));
                true
            }
            _ => false,
        };
        let wants_own = basic.is_some() || custom_headers.is_some() || withhold_alt_svc;
        let traffic =
            (!nginx.is_empty() || redirects_tls || wants_auth || wants_errors || wants_own)
                .then(|| {
                    let meta = &ingress.metadata;
                    let namespace = meta.namespace.as_deref().unwrap_or("");
                    let name = format!("{namespace}/{}", meta.name.as_deref().unwrap_or(""));
                    let tls = Some((tls_hosts(ingress), teapot_redirect));
                    let paths = rule_paths(ingress);
                    let mut policy = nginx
                        .policy_with_tls(&name, table, tls, &paths, &mut problems)
                        .map(|p| owned_cookie_domain(p, ingress, &mut problems));
                    if let Some(cors) = policy.as_mut().and_then(|p| p.cors.as_mut()) {
                        cors_origins(all, &nginx, cors, &mut problems);
                    }
                    if let Some(wanted) = nginx.custom_errors() {
                        let page = ErrorPageOwner {
                            meta,
                            key: DEFAULT_BACKEND,
                            port: None,
                        };
                        if let Some(errors) =
                            self.error_pages(wanted, &page, tenant, resolver, &mut problems)
                        {
                            policy.get_or_insert_default().custom_errors = Some(errors);
                        }
                    }
                    if let Some(basic) = basic {
                        policy.get_or_insert_default().basic_auth = Some(basic);
                    }
                    if let Some(headers) = custom_headers {
                        policy.get_or_insert_default().custom_headers = Some(headers);
                    }
                    if withhold_alt_svc {
                        policy.get_or_insert_default().withhold_alt_svc = true;
                    }
                    // `global-rate-limit` (crate::compile::global_rate).
                    if let Some(global) = crate::compile::global_rate::read(
                        |n| nginx.get(n),
                        &name,
                        cluster.unwrap_or(""),
                        &gates.global_counts,
                        &mut problems,
                    ) {
                        problems.extend(crate::compile::global_rate::alone_notice(
                            &gates.global_counts,
                        ));
                        policy.get_or_insert_default().global_rate = Some(global);
                    }
                    let auth = match nginx.auth(&mut problems) {
                        Some(wanted) => {
                            external_auth(wanted, namespace, tenant, resolver, &mut problems)
                        }
                        // An auth-url that could not be read (reported) keeps
                        // the route closed, never open: ingress-nginx denies
                        // the whole location when its auth-url is invalid.
                        None if wants_auth => {
                            ExternalAuth::refused(format!("{AUTH_URL} could not be read"))
                        }
                        None => return policy,
                    };
                    let owner = cluster.unwrap_or("");
                    let auth = ExternalAuth {
                        gate: gates.rate_tables.auth_gate(owner),
                        owner: Arc::from(owner),
                        ..auth
                    };
                    let mut policy = policy.unwrap_or_default();
                    policy.auth = Some(Arc::new(auth));
                    Some(policy)
                })
                .flatten();
        if let Some(traffic) = traffic {
            let policy = RoutePolicy {
                max_body_size,
                tenant: cluster.zip(limits.as_ref()).map(|(c, l)| gates.gate(c, l)),
                traffic: Some(Arc::new(traffic)),
            };
            return (Some(Arc::new(policy)), problems);
        }
        let policy = self
            .cache
            .entry((cluster, max_body_size))
            .or_insert_with(|| {
                let gate = cluster.zip(limits.as_ref()).map(|(c, l)| gates.gate(c, l));
                (gate.is_some() || max_body_size.is_some()).then(|| {
                    Arc::new(RoutePolicy {
                        max_body_size,
                        tenant: gate,
                        traffic: None,
                    })
                })
            })
            .clone();
        (policy, problems)
    }
}

impl Policies<'_> {
    /// The policy of one rule of an Ingress whose policy is `policy`: the
    /// same one, unless its affinity cookie takes the rule's path (no
    /// `session-cookie-path`, several paths), as ingress-nginx scopes it
    /// to each location. Such a rule's policy shares the Ingress's counters.
    pub(crate) fn for_rule(
        policy: &Option<Arc<RoutePolicy>>,
        path: &str,
    ) -> Option<Arc<RoutePolicy>> {
        let traffic = policy.as_ref().and_then(|p| p.traffic.as_ref());
        let affinity = traffic.and_then(|t| t.affinity.as_ref());
        match (policy, traffic, affinity) {
            (Some(p), Some(t), Some(a)) if !a.path_set && a.path != path => {
                let mut traffic = (**t).clone();
                if let Some(a) = &mut traffic.affinity {
                    a.path = path.to_string();
                }
                Some(Arc::new(RoutePolicy {
                    max_body_size: p.max_body_size,
                    tenant: p.tenant.clone(),
                    traffic: Some(Arc::new(traffic)),
                }))
            }
            _ => policy.clone(),
        }
    }
}

/// Resolves `auth-url` for an Ingress in `namespace`: a Service of the
/// Ingress's own tenant, resolved as its backends are (in a tenant
/// namespace, `SERVICE.NAMESPACE.svc` of the tenant's cluster is the
/// Service the agent mirrored into it; the namespace's own name works
/// too), or an address inside the tenant's nodes. What cannot be resolved
/// is reported and leaves the auth with no endpoint: its requests get 500,
/// never forwarded unauthenticated.
fn external_auth(
    wanted: AuthAnnotations,
    namespace: &str,
    tenant: Option<&TenantView<'_>>,
    resolver: &Resolver<'_>,
    problems: &mut Vec<String>,
) -> ExternalAuth {
    use teapot_api::annotations::AuthHost;
    const KEY: &str = "nginx.ingress.kubernetes.io/auth-url";
    let target = &wanted.target;
    let port = i32::from(target.port);
    let upstream = match &target.host {
        AuthHost::Service {
            name,
            namespace: theirs,
        } => {
            let own = tenant.is_none() || theirs == namespace;
            let (ns, service) = if own {
                (theirs.as_str(), name.clone())
            } else {
                let mirrored = teapot_api::hostname::mirrored_service_name(theirs, name);
                (namespace, mirrored)
            };
            let upstream = resolver.resolve(ns, &service, &PortRef::Number(port));
            for why in upstream.unavailable.iter().chain(&upstream.refused) {
                problems.push(format!(
                    "{KEY}: {why}; requests get 500 while the authentication service has no endpoint"
                ));
            }
            upstream
        }
        AuthHost::Address(ip) => {
            if let Some(why) = tenant.and_then(|t| t.endpoint_allowed(*ip).err()) {
                problems.push(format!(
                    "{KEY}: the authentication service must be one of your Services or inside your nodeCIDRs: {why}; requests get 503"
                ));
                return ExternalAuth::refused(why);
            }
            let addr = std::net::SocketAddr::new(*ip, target.port);
            let endpoint = EndpointRegistry::default().endpoint(addr);
            Upstream::new(
                format!("auth-url {}", target.authority),
                vec![endpoint],
                None,
            )
        }
    };
    ExternalAuth {
        upstream: Arc::new(upstream),
        authority: Arc::from(target.authority.as_str()),
        path: Arc::from(target.path.as_str()),
        method: wanted.method,
        signin: wanted.signin,
        signin_param: wanted.signin_param,
        response_headers: wanted.response_headers,
        request_redirect: wanted.request_redirect,
        gate: Default::default(),
        owner: Arc::from(""),
        refused: None,
    }
}

/// `default-backend`'s full key.
pub(crate) const DEFAULT_BACKEND: &str = "nginx.ingress.kubernetes.io/default-backend";

/// The object whose error pages are resolved: an Ingress, or a route a
/// RouteTrafficPolicy's `customErrors` applies to.
pub(crate) struct ErrorPageOwner<'m> {
    /// Its namespace (where the error backend Service is), its name (the
    /// page request's `X-Ingress-Name`) and the agent's source labels.
    pub(crate) meta: &'m k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    /// What named the Service, as its problems say.
    pub(crate) key: &'m str,
    /// The Service's port; `None`: its first, as `default-backend` reads.
    pub(crate) port: Option<i32>,
}

impl Policies<'_> {
    /// Resolves the error backend of `owner` ([`custom_errors`]) with the
    /// page requests counted against its tenant's `auth-url` bound.
    pub(crate) fn error_pages(
        &self,
        wanted: ErrorPageAnnotations,
        owner: &ErrorPageOwner<'_>,
        tenant: Option<&TenantView<'_>>,
        resolver: &Resolver<'_>,
        problems: &mut Vec<String>,
    ) -> Option<Arc<CustomErrors>> {
        let errors = custom_errors(wanted, owner, tenant, resolver, problems)?;
        let cluster = tenant.map_or("", |t| t.cluster);
        Some(Arc::new(CustomErrors {
            gate: self.gates.rate_tables.auth_gate(cluster),
            owner: Arc::from(cluster),
            ..errors
        }))
    }
}

/// Resolves `default-backend` for `owner`: a Service of its own namespace
/// only (the annotation is a bare name; a tenant's agent mirrored the
/// Service there), at the port asked for or its first. Without a Service,
/// `custom-http-errors` is reported and nothing is replaced: teapot has
/// no fleet-wide default backend to ask instead.
fn custom_errors(
    wanted: ErrorPageAnnotations,
    owner: &ErrorPageOwner<'_>,
    tenant: Option<&TenantView<'_>>,
    resolver: &Resolver<'_>,
    problems: &mut Vec<String>,
) -> Option<CustomErrors> {
    let key = owner.key;
    let meta = owner.meta;
    let namespace = meta.namespace.as_deref().unwrap_or("");
    let Some(service) = wanted.backend else {
        problems.push(format!(
            "nginx.ingress.kubernetes.io/custom-http-errors needs {key} (teapot has no fleet-wide default backend); the backend's responses pass unchanged"
        ));
        return None;
    };
    let port = owner
        .port
        .or_else(|| resolver.first_port(namespace, &service));
    let upstream = match port {
        Some(port) => resolver.resolve(namespace, &service, &PortRef::Number(port)),
        None => Upstream::new(
            format!("{namespace}/{service}"),
            Vec::new(),
            Some(format!(
                "Service {namespace}/{service} not found or without ports"
            )),
        ),
    };
    for why in upstream.unavailable.iter().chain(&upstream.refused) {
        problems.push(format!(
            "{key}: {why}; the replaced responses get teapot's short page while it has no endpoint"
        ));
    }
    // A tenant's Ingress is the agent's copy `<name>.<namespace>` in the
    // LB namespace: the error backend is told the tenant's own names.
    let source = tenant.and(
        meta.labels
            .as_ref()
            .and_then(|l| l.get("teapot.dev/source-namespace")),
    );
    let name = meta.name.as_deref().unwrap_or("");
    let (shown_namespace, shown_name) = match source {
        Some(theirs) => (
            theirs.as_str(),
            name.strip_suffix(&format!(".{theirs}")).unwrap_or(name),
        ),
        None => (namespace, name),
    };
    Some(CustomErrors {
        codes: wanted.codes.into_boxed_slice(),
        upstream: Arc::new(upstream),
        namespace: Arc::from(shown_namespace),
        ingress: Arc::from(shown_name),
        mirrored_from: Arc::from(source.map_or("", String::as_str)),
        gate: Default::default(),
        owner: Arc::from(""),
    })
}

/// The hosts of an Ingress's `spec.tls` (those `ssl-redirect` covers).
/// Whether `spec.tls` names a host: most Ingresses' answer is found
/// without parsing one.
fn has_tls_hosts(ingress: &Ingress) -> bool {
    let tls = ingress.spec.as_ref().and_then(|s| s.tls.as_ref());
    tls.into_iter()
        .flatten()
        .any(|t| t.hosts.as_ref().is_some_and(|h| !h.is_empty()))
}

fn tls_hosts(ingress: &Ingress) -> Vec<teapot_api::HostPattern> {
    let tls = ingress.spec.as_ref().and_then(|s| s.tls.as_ref());
    tls.into_iter()
        .flatten()
        .flat_map(|t| t.hosts.iter().flatten())
        .filter_map(|h| teapot_api::HostPattern::parse(h).ok())
        .collect()
}

/// `session-cookie-domain` names what the Ingress serves: one of its rule
/// hosts, or the parent of one of its wildcard hosts. A parent beyond
/// those may be shared with other tenants, whose names a tenant must not
/// set cookies for: it is reported and the cookie goes without a Domain
/// (the host's own, as without the annotation).
fn owned_cookie_domain(
    mut policy: TrafficPolicy,
    ingress: &Ingress,
    problems: &mut Vec<String>,
) -> TrafficPolicy {
    if let Some(affinity) = policy.affinity.as_mut()
        && let Some(domain) = affinity.domain.take()
    {
        let mut hosts = ingress
            .spec
            .iter()
            .flat_map(|s| s.rules.iter().flatten())
            .filter_map(|r| r.host.as_deref());
        let owned = hosts.any(|host| {
            let host = host.to_ascii_lowercase();
            host == domain || host.strip_prefix("*.") == Some(domain.as_str())
        });
        if owned {
            affinity.domain = Some(domain);
        } else {
            problems.push(format!(
                "nginx.ingress.kubernetes.io/session-cookie-domain: {domain:?} is neither a host of this Ingress nor the parent of one of its wildcard hosts; the affinity cookie is sent without a Domain"
            ));
        }
    }
    policy
}

/// The distinct paths of an Ingress's rules (a cookie's default scope).
/// Dropped entries of `cors-allow-origin` named one by one, at most.
const MAX_DROPPED_ORIGINS_NAMED: usize = 8;

/// `cors-allow-origin` with entries that are no origin: as ingress-nginx,
/// the others are served and each dropped one is reported; with none an
/// origin (a value the reader refused, reported), no origin is allowed,
/// never ingress-nginx's `*` (fail closed). The same when
/// `cors-allow-credentials`, `-methods` or `-headers` cannot be read.
/// Only an operator's Ingress gets here with a value it cannot read: a
/// tenant's is refused at admission.
fn cors_origins(
    all: Option<&std::collections::BTreeMap<String, String>>,
    nginx: &NginxAnnotations,
    cors: &mut crate::compile::traffic::Cors,
    problems: &mut Vec<String>,
) {
    use teapot_api::annotations::AnnotationValue;
    const KEY: &str = "nginx.ingress.kubernetes.io/cors-allow-origin";
    // What ingress-nginx falls back to for these is wider than what was
    // written (credentials allowed, every method): unreadable (reported
    // by the reader), the CORS setting grants nothing.
    for name in [
        "cors-allow-credentials",
        "cors-allow-methods",
        "cors-allow-headers",
    ] {
        let key = format!("{}{name}", teapot_api::annotations::NGINX_PREFIX);
        if all.is_some_and(|a| a.contains_key(&key)) && nginx.get(name).is_none() {
            cors.origins = Some(Vec::new());
            problems.push(format!(
                "{key} could not be read, so no origin is allowed (ingress-nginx would fall back to its default)"
            ));
            return;
        }
    }
    let Some(value) = all.and_then(|a| a.get(KEY)) else {
        return;
    };
    let kept = match nginx.get("cors-allow-origin") {
        Some(AnnotationValue::List(kept)) => kept,
        _ => {
            cors.origins = Some(Vec::new());
            problems.push(format!(
                "{KEY}: no entry is an origin, so no origin is allowed (ingress-nginx would allow every one)"
            ));
            return;
        }
    };
    if kept.iter().any(|o| o == "*") {
        return;
    }
    let dropped: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|o| !o.is_empty() && !kept.iter().any(|k| k.eq_ignore_ascii_case(o)))
        .collect();
    if dropped.is_empty() {
        return;
    }
    let named: Vec<String> = dropped
        .iter()
        .take(MAX_DROPPED_ORIGINS_NAMED)
        .map(|o| teapot_api::quote::quote(o))
        .collect();
    let more = match dropped.len().saturating_sub(MAX_DROPPED_ORIGINS_NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    problems.push(format!(
        "{KEY}: entries that are no origin (scheme://host[:port]) are dropped, the others served: {}{more}",
        named.join(", ")
    ));
}

fn rule_paths(ingress: &Ingress) -> Vec<String> {
    let mut paths: Vec<String> = ingress
        .spec
        .iter()
        .flat_map(|s| s.rules.iter().flatten())
        .flat_map(|r| r.http.iter().flat_map(|h| &h.paths))
        .map(|p| p.path.clone().unwrap_or_else(|| "/".into()))
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv6Addr};

    use crate::compile::CompileOptions;
    use crate::compile::tests::compile_test_docs;
    use crate::compile::traffic::TrafficPolicy;
    use crate::live::rate_table::RateTable;

    /// The class and a Service `web` in the operator namespace `ops`.
    const OPS: &str = "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: teapot}
spec: {controller: teapot.dev/ingress-controller}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ops}
spec: {ports: [{port: 80}]}
";

    /// The operator Ingress `ops/admin` for `admin.example` with these
    /// annotation lines.
    fn admin_ingress(annotations: &str) -> String {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: admin
  namespace: ops
  annotations:
{annotations}spec:
  ingressClassName: teapot
  rules:
  - host: admin.example
    http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}
"
        )
    }

    /// A Tenant, its backend and a rate-limited Ingress on its subtree.
    fn tenant_docs(cluster: &str, limits: &str) -> String {
        format!(
            "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {{name: {cluster}}}
spec: {{cluster: {cluster}, nodeCIDRs: [10.1.0.0/24]{limits}}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: tenant-{cluster}}}
spec: {{ports: [{{port: 80}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: web-1, namespace: tenant-{cluster}, labels: {{kubernetes.io/service-name: web}}}}
addressType: IPv4
endpoints: [{{addresses: [10.1.0.5]}}]
ports: [{{name: '', port: 8080}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web.shop
  namespace: tenant-{cluster}
  annotations:
    nginx.ingress.kubernetes.io/limit-rps: '1'
    nginx.ingress.kubernetes.io/limit-burst-multiplier: '1'
spec:
  ingressClassName: teapot
  rules:
  - host: a.{cluster}.lb.example.net
    http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}
"
        )
    }

    /// However many client addresses reach one tenant's rate-limited
    /// route, the replica keeps the counters its limits give it, in a
    /// table of its own: another tenant's clients keep their counts.
    #[test]
    fn a_tenants_rate_counters_are_bounded_by_its_limits() {
        let options = CompileOptions {
            domain: "example.net".into(),
            ..CompileOptions::default()
        };
        let docs = [
            tenant_docs("acme", ", limits: {maxConnections: 1000}"),
            tenant_docs("globex", ""),
        ];
        let snapshot = compile_test_docs(&docs, &options);
        let rate = |host: &str| {
            let route = snapshot.routes.lookup(host, "/").expect("routed");
            route
                .traffic()
                .expect("a policy")
                .rate
                .as_ref()
                .expect("a limit")
        };
        let acme = rate("a.acme.lb.example.net");
        let globex = rate("a.globex.lb.example.net");
        assert!(!std::sync::Arc::ptr_eq(&acme.table, &globex.table));
        assert_eq!(acme.table.capacity(), RateTable::slots_for(1000));
        assert_eq!(acme.table.capacity(), 1024);
        assert_eq!(globex.table.capacity(), RateTable::slots_for(10_000));
        let neighbour = Some(IpAddr::from([192, 0, 2, 1]));
        assert_eq!(globex.admit(neighbour), Ok(()));
        for i in 0..100_000u128 {
            let client = Ipv6Addr::from((0x2001_0db8u128 << 96) | i);
            let _ = acme.admit(Some(IpAddr::V6(client)));
        }
        assert_eq!(acme.table.used(), 1024);
        assert_eq!(globex.table.used(), 1);
        // The neighbour's counter survived: one a second, its burst spent.
        assert_eq!(globex.admit(neighbour), Ok(()));
        assert!(globex.admit(neighbour).is_err());
        // A recompile keeps both tables and their counts.
        let again = compile_test_docs(&docs, &options);
        let route = again.routes.lookup("a.globex.lb.example.net", "/").unwrap();
        let kept = route.traffic().unwrap().rate.as_ref().unwrap();
        assert!(std::sync::Arc::ptr_eq(&kept.table, &globex.table));
    }

    /// `limit-connections` counts in the same bounded table: a flood of
    /// addresses with requests in flight fills the tenant's table and no
    /// more, another tenant's client keeps its count and its limit, and
    /// every count is given back when its request ends.
    #[test]
    fn a_tenants_in_flight_counts_are_bounded_by_its_limits() {
        let options = CompileOptions {
            domain: "example.net".into(),
            ..CompileOptions::default()
        };
        let in_flight = |docs: String| docs.replace("limit-rps: '1'", "limit-connections: '1'");
        let docs = [
            in_flight(tenant_docs("acme", ", limits: {maxConnections: 1000}")),
            in_flight(tenant_docs("globex", "")),
        ];
        let snapshot = compile_test_docs(&docs, &options);
        let limit = |host: &str| {
            let route = snapshot.routes.lookup(host, "/").expect("routed");
            let traffic = route.traffic().expect("a policy");
            assert!(traffic.rate.is_none());
            traffic.connections.clone().expect("a limit")
        };
        let acme = limit("a.acme.lb.example.net");
        let globex = limit("a.globex.lb.example.net");
        assert!(!std::sync::Arc::ptr_eq(&acme.table, &globex.table));
        let neighbour = Some(IpAddr::from([192, 0, 2, 1]));
        let kept = globex.enter(neighbour).unwrap();
        let flood: Vec<_> = (0..100_000u128)
            .map(|i| {
                let client = Ipv6Addr::from((0x2001_0db8u128 << 96) | i);
                acme.enter(Some(IpAddr::V6(client))).unwrap()
            })
            .collect();
        assert_eq!(acme.table.in_flight_used(), 1024);
        assert_eq!(globex.table.in_flight_used(), 1);
        assert!(globex.enter(neighbour).is_err());
        drop(flood);
        assert_eq!(acme.table.in_flight_used(), 0);
        drop(kept);
        assert!(globex.enter(neighbour).unwrap().is_some());
    }

    /// `session-cookie-domain` is sent for a host of the Ingress (or the
    /// parent of its wildcard host); a parent it does not serve is
    /// reported on the annotation and not sent.
    #[test]
    fn cookie_domain_is_one_the_ingress_serves() {
        let affinity = |domain: &str| {
            let ingress = admin_ingress(&format!(
                "    nginx.ingress.kubernetes.io/affinity: cookie
    nginx.ingress.kubernetes.io/session-cookie-domain: {domain}
"
            ));
            let snapshot =
                compile_test_docs(&[OPS.to_string(), ingress], &CompileOptions::default());
            let route = snapshot
                .routes
                .lookup("admin.example", "/")
                .expect("routed");
            let sent = route.traffic().unwrap().affinity.clone().unwrap().domain;
            let report = snapshot.report.ingresses.iter().find(|r| r.name == "admin");
            let problems: Vec<String> = report
                .into_iter()
                .flat_map(|r| &r.conditions)
                .filter(|c| c.type_ == "AnnotationsAccepted" && c.status == "False")
                .map(|c| c.message.clone())
                .collect();
            (sent, problems)
        };
        let (sent, problems) = affinity(".Admin.example");
        assert_eq!(sent.as_deref(), Some("admin.example"));
        assert!(problems.is_empty(), "{problems:?}");
        for foreign in ["example", "other.example"] {
            let (sent, problems) = affinity(foreign);
            assert_eq!(sent, None, "{foreign}");
            assert!(
                problems
                    .iter()
                    .any(|p| p.contains("nginx.ingress.kubernetes.io/session-cookie-domain")),
                "{foreign}: {problems:?}"
            );
        }
    }

    /// In an operator namespace an ingress-nginx annotation teapot does
    /// not serve and that restricts nothing is reported on the Ingress,
    /// never silently ignored; what it serves applies. (One that restricts
    /// access keeps the Ingress unrouted: crate::compile::ingress.)
    #[test]
    fn unserved_annotations_are_reported_in_operator_namespaces() {
        let admin = admin_ingress(
            "    nginx.ingress.kubernetes.io/whitelist-source-range: 10.0.0.0/8
    nginx.ingress.kubernetes.io/proxy-max-temp-file-size: '0'
    nginx.ingress.kubernetes.io/service-upstream: 'true'
    kubectl.kubernetes.io/last-applied-configuration: '{}'
",
        );
        let snapshot = compile_test_docs(&[OPS.to_string(), admin], &CompileOptions::default());
        let report = snapshot
            .report
            .ingresses
            .iter()
            .find(|r| r.name == "admin")
            .expect("a report");
        let condition = report
            .conditions
            .iter()
            .find(|c| c.type_ == "AnnotationsAccepted")
            .expect("reported");
        assert_eq!(condition.status, "False");
        for key in ["proxy-max-temp-file-size", "service-upstream"] {
            assert!(
                condition.message.contains(&format!(
                    "not served by teapot: nginx.ingress.kubernetes.io/{key}"
                )),
                "{}",
                condition.message
            );
        }
        assert!(
            !condition.message.contains("kubectl"),
            "{}",
            condition.message
        );
        let route = snapshot.routes.lookup("admin.example", "/").unwrap();
        assert!(route.traffic().unwrap().access.is_some());
    }

    /// Without `session-cookie-path`, each rule's cookie takes its own
    /// path (ingress-nginx's per-location scope), sharing one rate table.
    #[test]
    fn affinity_cookies_take_each_rules_path() {
        let docs = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: ops
  annotations:
    nginx.ingress.kubernetes.io/affinity: cookie
    nginx.ingress.kubernetes.io/limit-rps: '5'
spec:
  ingressClassName: teapot
  rules:
  - host: shop.example
    http:
      paths:
      - {path: /cart, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
";
        let docs = [OPS.to_string(), docs.to_string()];
        let snapshot = compile_test_docs(&docs, &CompileOptions::default());
        let traffic = |path: &str| {
            let route = snapshot.routes.lookup("shop.example", path).unwrap();
            route.traffic().unwrap().clone()
        };
        let (cart, root) = (traffic("/cart/x"), traffic("/x"));
        assert_eq!(cart.affinity.as_ref().unwrap().path, "/cart");
        assert_eq!(root.affinity.as_ref().unwrap().path, "/");
        let table = |t: &TrafficPolicy| t.rate.as_ref().unwrap().table.clone();
        assert!(std::sync::Arc::ptr_eq(&table(&cart), &table(&root)));
    }

    /// The `AnnotationsAccepted` messages of tenant `cluster`'s Ingress
    /// `web.shop`.
    fn annotations_accepted(
        snapshot: &crate::compile::snapshot::Snapshot,
        cluster: &str,
    ) -> String {
        let report = snapshot.report.ingresses.iter();
        let report = report
            .filter(|r| r.namespace == format!("tenant-{cluster}"))
            .find(|r| r.name == "web.shop")
            .unwrap();
        let c = report.conditions.iter();
        c.filter(|c| c.type_ == "AnnotationsAccepted")
            .map(|c| c.message.clone())
            .collect::<String>()
    }

    /// `default-backend` is a Service of the Ingress's own namespace, at
    /// its first port: the same name in another tenant's namespace is not
    /// found, a `NAMESPACE/NAME` is refused, and `custom-http-errors`
    /// without a usable default backend replaces nothing (reported).
    #[test]
    fn default_backend_resolves_in_the_ingress_namespace_only() {
        let options = CompileOptions {
            domain: "example.net".into(),
            ..CompileOptions::default()
        };
        let errors = teapot_api::hostname::mirrored_service_name("shop", "errors");
        let docs = |cluster: &str, backend: &str, with_service: bool| {
            let service = if with_service {
                format!(
                    "---
apiVersion: v1
kind: Service
metadata: {{name: {errors}, namespace: tenant-{cluster}}}
spec: {{ports: [{{port: 8081}}, {{port: 80}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: errors-1, namespace: tenant-{cluster}, labels: {{kubernetes.io/service-name: {errors}}}}}
addressType: IPv4
endpoints: [{{addresses: [10.1.0.8]}}]
ports: [{{name: '', port: 9000}}]
"
                )
            } else {
                String::new()
            };
            let annotations = format!(
                "limit-burst-multiplier: '1'\n    nginx.ingress.kubernetes.io/custom-http-errors: '503,404'\n    nginx.ingress.kubernetes.io/default-backend: {backend}"
            );
            tenant_docs(cluster, "").replace("limit-burst-multiplier: '1'", &annotations) + &service
        };
        // Each tenant its own nodes: 10.1.0.0/24, 10.2.0.0/24, ...
        let docs = [
            // The agent's copy: the tenant's own namespace in a label.
            docs("acme", &errors, true).replace(
                "  name: web.shop\n",
                "  name: web.shop\n  labels: {teapot.dev/source-namespace: shop}\n",
            ),
            docs("globex", &errors, false).replace("10.1.0.", "10.2.0."),
            docs("initech", &format!("tenant-acme/{errors}"), false).replace("10.1.0.", "10.3.0."),
        ];
        let snapshot = compile_test_docs(&docs, &options);
        let custom = |cluster: &str| {
            let host = format!("a.{cluster}.lb.example.net");
            let route = snapshot.routes.lookup(&host, "/").expect("routed");
            route.traffic().unwrap().custom_errors.clone()
        };
        let condition = |cluster: &str| annotations_accepted(&snapshot, cluster);
        let acme = custom("acme").expect("acme pages");
        assert_eq!(&*acme.codes, &[404, 503]);
        let addrs: Vec<_> = acme
            .upstream
            .endpoints
            .load()
            .iter()
            .map(|e| e.addr)
            .collect();
        assert_eq!(addrs, vec!["10.1.0.8:9000".parse().unwrap()]);
        assert_eq!(acme.upstream.name, format!("tenant-acme/{errors}:8081"));
        // The error backend is told the tenant's own names.
        assert_eq!(
            (&*acme.owner, &*acme.namespace, &*acme.ingress),
            ("acme", "shop", "web")
        );
        assert_eq!(&*acme.mirrored_from, "shop");
        // The same name, looked up in globex's own namespace only.
        let globex = custom("globex").expect("globex's pages");
        assert!(globex.upstream.endpoints.load().is_empty());
        assert!(
            condition("globex").contains("not found"),
            "{}",
            condition("globex")
        );
        assert!(!std::sync::Arc::ptr_eq(&acme.gate, &globex.gate));
        // Another namespace's Service cannot be named at all.
        assert!(custom("initech").is_none());
        let initech = condition("initech");
        assert!(
            initech.contains("default-backend") && initech.contains("own namespace"),
            "{initech}"
        );
        assert!(initech.contains("custom-http-errors needs"), "{initech}");
    }

    /// `auth-url` reaches only the tenant's own Services (the one the
    /// agent mirrored, or one of its LB namespace) and addresses inside
    /// its nodes; anything else is reported and its requests fail closed
    /// (no endpoint), and each tenant has its own gate.
    #[test]
    fn auth_url_resolves_within_the_tenant() {
        let options = CompileOptions {
            domain: "example.net".into(),
            ..CompileOptions::default()
        };
        let mirrored = teapot_api::hostname::mirrored_service_name("shop", "auth");
        let auth_docs = |cluster: &str, url: &str| {
            format!(
                "{}---
apiVersion: v1
kind: Service
metadata: {{name: {mirrored}, namespace: tenant-{cluster}}}
spec: {{ports: [{{port: 4180}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: auth-1, namespace: tenant-{cluster}, labels: {{kubernetes.io/service-name: {mirrored}}}}}
addressType: IPv4
endpoints: [{{addresses: [10.1.0.9]}}]
ports: [{{name: '', port: 9090}}]
",
                tenant_docs(cluster, "").replace(
                    "limit-burst-multiplier: '1'",
                    &format!(
                        "limit-burst-multiplier: '1'\n    nginx.ingress.kubernetes.io/auth-url: {url}\n    nginx.ingress.kubernetes.io/auth-response-headers: X-User, X-Forwarded-For"
                    )
                )
            )
        };
        let cases = [
            ("acme", "http://auth.shop.svc.cluster.local:4180/check"),
            ("globex", "http://10.2.0.7:8080/check"),
            ("initech", "http://169.254.169.254/"),
            ("umbrella", "http://nothere.shop.svc:4180/"),
        ];
        // Each tenant its own nodes: 10.1.0.0/24, 10.2.0.0/24, ...
        let docs: Vec<String> = (1..)
            .zip(cases)
            .map(|(i, (c, u))| auth_docs(c, u).replace("10.1.0.", &format!("10.{i}.0.")))
            .collect();
        let snapshot = compile_test_docs(&docs, &options);
        let auth = |cluster: &str| {
            let host = format!("a.{cluster}.lb.example.net");
            let route = snapshot.routes.lookup(&host, "/").expect("routed");
            route.traffic().unwrap().auth.clone().expect("auth")
        };
        let condition = |cluster: &str| annotations_accepted(&snapshot, cluster);
        let acme = auth("acme");
        let addrs: Vec<_> = acme
            .upstream
            .endpoints
            .load()
            .iter()
            .map(|e| e.addr)
            .collect();
        assert_eq!(addrs, vec!["10.1.0.9:9090".parse().unwrap()]);
        assert_eq!(&*acme.path, "/check");
        assert_eq!(&*acme.authority, "auth.shop.svc.cluster.local:4180");
        assert_eq!(acme.response_headers, vec![std::sync::Arc::from("x-user")]);
        assert_eq!(
            (&*acme.owner, acme.method, &*acme.signin_param),
            ("acme", "GET", "rd")
        );
        // A forwarding field is never copied from the authentication
        // service (the proxy's re-check of an operator's Ingress; a
        // tenant's is refused at admission).
        assert!(
            condition("acme").contains("X-Forwarded-For is not copied"),
            "{}",
            condition("acme")
        );
        let globex = auth("globex");
        assert_eq!(
            globex.upstream.endpoints.load()[0].addr,
            "10.2.0.7:8080".parse().unwrap()
        );
        assert!(!std::sync::Arc::ptr_eq(&acme.gate, &globex.gate));
        // Outside the tenant's nodes (refused: 503), or no such Service
        // (no endpoint: 500): reported on the Ingress, never forwarded.
        let initech = auth("initech");
        assert!(initech.upstream.endpoints.load().is_empty());
        assert!(initech.refused.is_some());
        assert!(
            condition("initech").contains("auth-url"),
            "{}",
            condition("initech")
        );
        let umbrella = auth("umbrella");
        assert!(umbrella.upstream.endpoints.load().is_empty() && umbrella.refused.is_none());
        assert!(
            condition("umbrella").contains("not found"),
            "{}",
            condition("umbrella")
        );
        // The other routes of those tenants are served as before.
        assert!(
            snapshot
                .routes
                .lookup("a.initech.lb.example.net", "/")
                .is_some()
        );
    }

    /// An operator's `auth-url` that cannot be read keeps its routes
    /// closed (ingress-nginx denies the location), and is reported.
    #[test]
    fn an_unreadable_auth_url_closes_the_route() {
        let admin =
            admin_ingress("    nginx.ingress.kubernetes.io/auth-url: https://invalid..auth.url\n");
        let snapshot = compile_test_docs(&[OPS.to_string(), admin], &CompileOptions::default());
        let route = snapshot.routes.lookup("admin.example", "/").unwrap();
        let auth = route.traffic().unwrap().auth.clone().expect("closed");
        assert!(auth.refused.is_some());
        let report = snapshot.report.ingresses.iter().find(|r| r.name == "admin");
        let messages: String = report
            .unwrap()
            .conditions
            .iter()
            .map(|c| c.message.clone())
            .collect();
        assert!(messages.contains("auth-url"), "{messages}");
    }

    /// `cors-allow-origin` with entries that are no origin: the others are
    /// served (ingress-nginx's e2e case "single origin for multiple cors
    /// values") and each dropped one is reported; with none an origin, no
    /// origin is allowed, never every one.
    #[test]
    fn cors_origins_that_are_no_origin_are_dropped_never_widened() {
        let cors = |origins: &str| {
            let admin = admin_ingress(&format!(
                "    nginx.ingress.kubernetes.io/enable-cors: 'true'\n    nginx.ingress.kubernetes.io/cors-allow-origin: '{origins}'\n"
            ));
            let snapshot = compile_test_docs(&[OPS.to_string(), admin], &CompileOptions::default());
            let route = snapshot.routes.lookup("admin.example", "/").unwrap();
            let cors = route.traffic().unwrap().cors.clone().expect("CORS");
            let report = snapshot.report.ingresses.iter().find(|r| r.name == "admin");
            let condition = report
                .unwrap()
                .conditions
                .iter()
                .find(|c| c.type_ == "AnnotationsAccepted")
                .map(|c| (c.status.to_string(), c.message.clone()));
            (cors, condition)
        };
        let (some, condition) =
            cors("origin.cors.com:8080, https://origin2.cors.com, https://origin.com");
        let allowed = |cors: &crate::compile::traffic::Cors, origin: &str| {
            cors.fields(Some(origin.as_bytes())).is_some()
        };
        assert!(allowed(&some, "https://origin2.cors.com"));
        assert!(allowed(&some, "https://origin.com"));
        assert!(!allowed(&some, "origin.cors.com:8080"));
        assert!(!allowed(&some, "https://elsewhere.example"));
        let (status, message) = condition.expect("reported");
        assert_eq!(status, "False");
        assert!(
            message.contains("cors-allow-origin: entries that are no origin")
                && message.contains("\"origin.cors.com:8080\""),
            "{message}"
        );

        let (none, condition) = cors("origin.cors.com:8080, https://$host");
        assert_eq!(none.origins, Some(Vec::new()));
        assert!(!allowed(&none, "https://a.example"));
        assert!(!allowed(&none, "origin.cors.com:8080"));
        let (_, message) = condition.expect("reported");
        assert!(message.contains("no origin is allowed"), "{message}");

        let (all, condition) = cors("*");
        assert!(allowed(&all, "https://any.example"));
        assert_eq!(condition, None);
        // A credentials flag or a method list that cannot be read grants
        // nothing (their defaults are wider).
        for extra in [
            "    nginx.ingress.kubernetes.io/cors-allow-credentials: 'yes'\n",
            "    nginx.ingress.kubernetes.io/cors-allow-methods: 'GET; PUT'\n",
        ] {
            let admin = admin_ingress(&format!(
                "    nginx.ingress.kubernetes.io/enable-cors: 'true'\n{extra}"
            ));
            let snapshot = compile_test_docs(&[OPS.to_string(), admin], &CompileOptions::default());
            let route = snapshot.routes.lookup("admin.example", "/").unwrap();
            let cors = route.traffic().unwrap().cors.clone().expect("CORS");
            assert!(!allowed(&cors, "https://any.example"), "{extra}");
        }
        // Many dropped entries are named up to a bound.
        let many: Vec<String> = (0..40).map(|i| format!("bad{i}")).collect();
        let (_, condition) = cors(&format!("https://ok.example, {}", many.join(", ")));
        let (_, message) = condition.expect("reported");
        assert!(message.ends_with(" and 32 more"), "{message}");
    }
}
