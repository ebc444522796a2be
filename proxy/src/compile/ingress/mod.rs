//! The Ingress compiler: every Ingress of the store that teapot's classes
//! serve, oldest first (creationTimestamp, then namespace/name), into the
//! route table, the certificate table and its status report. "First insert
//! wins" in both tables is therefore "oldest wins", as docs/architecture.md
//! requires, and every loser gets a condition naming the Ingress that holds
//! its rule.
//!
//! A tenant's hosts are decided by the rule every route kind follows
//! (`compile::bind::TenantHosts`); a rule on a host a Gateway API route
//! holds asks the Gateway compile first (`GatewayCompile::claim`), and the
//! older of the two keeps it. Backends come from the shared resolver
//! (`compile::backends`), each Ingress's limits from its annotations
//! (`compile::policies`).

mod alias;
mod backend;
mod canary;
mod client_cert;
mod host_default;
mod regex_hosts;
mod www;

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::networking::v1::{
    Ingress, IngressLoadBalancerIngress, IngressLoadBalancerStatus, IngressStatus,
};
use teapot_api::names::{CONTROLLER_NAME, DEFAULT_CLASS_ANNOTATION, INGRESS_CLASS};
use teapot_api::{HostPattern, PathKind, hostname};
use teapot_model::store::{
    FastHashMap, NsName, NsRef, Store, Stored, age_key, ingresses_oldest_first,
};

use crate::compile::acme;
use crate::compile::backends::Resolver;
use crate::compile::bind::TenantHosts;
use crate::compile::certs::CertTable;
use crate::compile::client_auth::ClientAuthTable;
use crate::compile::gateway::GatewayCompile;
use crate::compile::policies::Policies;
use crate::compile::routes::{Route, RoutePolicy, RouteTable};
use crate::compile::snapshot::{Condition, IngressReport};
use crate::compile::traffic::{Canary, Rewrite};
use crate::compile::upstream::Upstream;
use backend::BackendSpeech;
use canary::{CanaryRule, add_canaries, canary_rules};
use teapot_api::regex::PathRegex;
use www::{FROM_TO_WWW, WwwTwin, add_www_redirects, twin_admitted, www_twin};

/// A host an Ingress asked ACME for.
pub(super) struct AcmeCandidate {
    pub host: String,
    /// The TLS entry's own `secretName`, when the host has it alone.
    pub secret: Option<String>,
    /// The asking Ingress, as an index into [`Compiled::reports`].
    pub report: usize,
}

/// What the Ingresses compile into.
pub(super) struct Compiled {
    pub routes: RouteTable,
    pub reports: Vec<IngressReport>,
    pub acme_candidates: Vec<AcmeCandidate>,
}

/// Compiles every Ingress of `store`; certificates go into `certs`, the
/// client-certificate settings of their hosts (`auth-tls-*`) into
/// `client_auth`.
#[allow(clippy::too_many_arguments)]
pub(super) fn compile<'s, 'p, 't>(
    store: &'s Store,
    classes: &ClassFilter,
    hosts: &mut TenantHosts<'_, 't>,
    resolver: &mut Resolver<'s>,
    policies: &mut Policies<'p>,
    gateway: &mut GatewayCompile<'s>,
    certs: &mut CertTable,
    client_auth: &mut ClientAuthTable,
) -> Compiled
where
    't: 'p,
{
    let options = hosts.options;
    let tenancy = hosts.tenancy;
    let (host_count, path_count) = rule_counts(store);
    let mut routes = RouteTable::with_capacity(host_count, path_count);
    // Every operator Ingress shows the same status: build it once.
    let fleet_status = Arc::new(IngressStatus {
        load_balancer: Some(load_balancer_status(&options.status_addresses)),
    });
    let no_status = Arc::new(IngressStatus::default());
    let gateway_routes = !gateway.is_empty();
    let mut acme_candidates = Vec::new();
    let ordered: Vec<(&NsName, &Stored<Ingress>)> = ingresses_oldest_first(&store.ingresses);

    let mut default_holder: Option<&NsName> = None;
    let mut www_twins: Vec<WwwTwin> = Vec::new();
    let mut aliases: Vec<alias::Alias> = Vec::new();
    let mut canaries: Vec<CanaryRule> = Vec::new();
    let mut ingress_reports = Vec::with_capacity(ordered.len());

    // A route remembers its owner as an index into `ordered`, which is
    // how a conflict names the older Ingress without a side table.
    let owners: Vec<&NsName> = ordered.iter().map(|(id, _)| *id).collect();
    let mut regex_hosts = regex_hosts::RegexHosts::new(&ordered, classes, tenancy);
    for (index, (id, stored)) in ordered.into_iter().enumerate() {
        let index = index as u32;
        let ingress = &stored.object;
        if !classes.serves(ingress) {
            ingress_reports.push(not_routed(
                id,
                false,
                &no_status,
                "OtherClass",
                "the Ingress class is not implemented by teapot",
            ));
            continue;
        }
        // A restriction teapot does not apply (basic auth, client
        // certificates, a snippet, an allow-list it cannot read) keeps
        // the whole Ingress unrouted, its canary rules and certificates
        // too: served without it, the Ingress would publish what the
        // restriction protects. A tenant's is refused at admission; this
        // holds for the operator's, and for a tenant's that got past it.
        let unserved = teapot_api::annotations::unserved_restrictions(
            teapot_api::annotations::ObjectKind::Ingress,
            ingress.metadata.annotations.iter().flatten(),
        );
        if !unserved.is_empty() {
            let named: Vec<String> = unserved
                .iter()
                .map(|(field, why)| format!("{field}: {why}"))
                .collect();
            ingress_reports.push(not_routed(
                id,
                true,
                &no_status,
                UNSERVED_RESTRICTION,
                format!(
                    "{}; the Ingress is not routed: it asks for an access restriction teapot does not apply",
                    named.join("; ")
                ),
            ));
            continue;
        }
        let tenant = tenancy.get(&id.namespace);
        // Client certificates it asks for and teapot cannot apply as asked
        // keep it unrouted the same way (module client_cert).
        let client_cert = match client_cert::read(store, id, ingress, tenant.is_some()) {
            Ok(setting) => setting,
            Err(reasons) => {
                ingress_reports.push(not_routed(
                    id,
                    true,
                    &no_status,
                    UNSERVED_RESTRICTION,
                    format!(
                        "{}; the Ingress is not routed: teapot cannot apply the client certificates it asks for",
                        reasons.join("; ")
                    ),
                ));
                continue;
            }
        };
        let mut conflicts = Vec::new();
        let mut unresolved = Vec::new();
        let mut refused_hosts = Vec::new();
        let spec = ingress.spec.as_ref();
        // In a tenant namespace, host-less rules and defaultBackend belong
        // to the Ingress's assigned hostname, never to the fleet.
        let own_host = tenant.map(|t| {
            HostPattern::Exact(hostname::assigned_hostname(
                &id.name,
                t.cluster,
                &options.domain,
            ))
        });
        let (policy, mut annotation_problems) = policies.of(ingress, tenant, resolver);
        // Basic authentication ingress-nginx would serve open (a companion
        // without auth-type, auth-type without its Secret, a tenant's
        // Secret of another namespace) keeps it unrouted the same way; a
        // missing or unreadable Secret answers 503 on its routes instead,
        // as ingress-nginx denies them (crate::compile::basic_auth).
        if let Some(why) = policy
            .as_ref()
            .and_then(|p| p.traffic.as_ref())
            .and_then(|t| t.basic_auth.as_ref())
            .filter(|b| b.unroute)
            .and_then(|b| b.refused.as_ref())
        {
            ingress_reports.push(not_routed(
                id,
                true,
                &no_status,
                UNSERVED_RESTRICTION,
                format!(
                    "{why}; the Ingress is not routed: teapot cannot apply the basic authentication it asks for"
                ),
            ));
            continue;
        }
        // Plain HTTP asks for no certificate: a request for a host whose
        // certificates this Ingress asks for goes to HTTPS (308), as
        // ingress-nginx's default ssl-redirect sends its TLS hosts, and is
        // never served without one.
        let policy = match &client_cert {
            Some(_) => Some(https_only(policy)),
            None => policy,
        };
        // ingress-nginx's regex paths (`use-regex`, `rewrite-target`);
        // one that does not compile is reported and its rule not served.
        let regex_paths = teapot_api::regex::ingress_uses_regex(ingress);
        let www_redirect = ingress
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(FROM_TO_WWW))
            .is_some_and(|v| v == "true");
        let mut regex_problems = Vec::new();
        let canary = canary_rules(ingress, &mut regex_problems);
        let ingress_name: Arc<str> = Arc::from(format!("{}/{}", id.namespace, id.name));
        let mut speech = BackendSpeech::read(store, id, ingress, tenant.is_some());
        let mut note = |upstream: &Upstream| {
            for why in upstream.unavailable.iter().chain(&upstream.refused) {
                if !unresolved.contains(why) {
                    unresolved.push(why.clone());
                }
            }
        };

        // The defaultBackend's route, for the Ingress's rule hosts too
        // (module host_default).
        let mut default_route = None;
        // A canary's defaultBackend is no route of its own either.
        if let Some(backend) = spec
            .and_then(|s| s.default_backend.as_ref())
            .filter(|_| canary.is_none())
        {
            let upstream = resolver.backend(&id.namespace, backend);
            let upstream = speech.speak(resolver, upstream, backend);
            note(&upstream);
            let upstream = Route::new(upstream, policy.clone(), ingress_name.clone());
            // Client certificates are asked per host (SNI); the fleet's
            // default backend answers for every host, which would then all
            // ask for them.
            let refused = match (&own_host, &client_cert) {
                (_, None) => None,
                (None, Some(_)) => Some(format!(
                    "defaultBackend is not served: client certificates ({AUTH_TLS}) are asked per host, and the fleet's default backend has none"
                )),
                (Some(host), Some(setting)) => client_auth
                    .insert(Some(host), setting.clone())
                    .err()
                    .map(|why| format!("{why}; defaultBackend is not served")),
            };
            if refused.is_none() {
                default_route = Some(upstream.clone());
            }
            match &own_host {
                _ if refused.is_some() => conflicts.extend(refused),
                Some(host) => {
                    if !routes.host_mut(Some(host)).set_fallback(upstream) {
                        conflicts.push(format!("defaultBackend for {host} is already set"));
                    }
                }
                None => {
                    if routes.set_default_backend(upstream) {
                        default_holder = Some(id);
                    } else if let Some(holder) = default_holder {
                        conflicts.push(format!("defaultBackend is held by older Ingress {holder}"));
                    }
                }
            }
        }
        let mut rule_hosts = Vec::new();
        for rule in spec.and_then(|s| s.rules.as_ref()).into_iter().flatten() {
            // Validated at load; a parse failure here cannot happen.
            let host = rule
                .host
                .as_deref()
                .and_then(|h| HostPattern::parse(h).ok());
            let host = match (tenant, host) {
                (None, host) => host,
                (Some(_), None) => own_host.clone(),
                (Some(t), Some(host)) => match hosts.admit(t, &host) {
                    Ok(()) => Some(host),
                    Err(why) => {
                        if !refused_hosts.contains(&why) {
                            refused_hosts.push(why);
                        }
                        continue;
                    }
                },
            };
            if let Some(rules) = &canary {
                for p in rule.http.iter().flat_map(|h| &h.paths) {
                    let Ok(kind) = PathKind::parse(&p.path_type) else {
                        continue;
                    };
                    let upstream = resolver.backend(&id.namespace, &p.backend);
                    let upstream = speech.speak(resolver, upstream, &p.backend);
                    note(&upstream);
                    canaries.push(CanaryRule {
                        host: host.clone(),
                        kind,
                        path: p.path.clone().unwrap_or_else(|| "/".into()),
                        canary: Canary {
                            upstream,
                            rules: rules.clone(),
                        },
                        tenant: tenant.map(|t| t.cluster.to_string()),
                        report: ingress_reports.len(),
                    });
                }
                continue;
            }
            if gateway_routes
                && let Err(why) = gateway.claim(host.as_ref(), &ingress_name, age_key(stored, id))
            {
                conflicts.push(why);
                continue;
            }
            // The host asks for this Ingress's client certificates, unless
            // an older object's different setting holds it: then its rules
            // there are not served, rather than served under CAs the
            // Ingress did not name.
            if let Some(setting) = &client_cert {
                let Some(h) = &host else {
                    conflicts.push(format!(
                        "a rule without a host is not served: client certificates ({AUTH_TLS}) are asked per host"
                    ));
                    continue;
                };
                if let Err(why) = client_auth.insert(Some(h), setting.clone()) {
                    conflicts.push(format!("{why}; the rule for {h} is not served"));
                    continue;
                }
            }
            if www_redirect
                && let Some(HostPattern::Exact(name)) = &host
                && let Some(twin) = www_twin(name)
                && (tenant.is_none_or(|t| twin_admitted(hosts, t, &twin, ingress)))
            {
                www_twins.push(WwwTwin {
                    from: twin,
                    to: Arc::from(name.as_str()),
                    ingress: ingress_name.clone(),
                    tenant: policy.as_ref().and_then(|p| p.tenant.clone()),
                });
            }
            // Kept for the certificates; the paths below borrow it there.
            let host = host.map(|h| {
                rule_hosts.push(h);
                &rule_hosts[rule_hosts.len() - 1]
            });
            // Another Ingress of the owner asked for regex paths on this
            // host: ingress-nginx makes every path of the host one.
            let owner = tenant.map(|t| t.cluster);
            let spread = !regex_paths && regex_hosts.covers(owner, host);
            let mut table = routes.host_mut(host);
            // ingress-nginx's default location (module host_default).
            if host.is_some() {
                table.decide_fallback(default_route.as_ref());
            }
            for p in rule.http.iter().flat_map(|h| &h.paths) {
                let Ok(kind) = PathKind::parse(&p.path_type) else {
                    continue;
                };
                let path = p.path.as_deref().unwrap_or("/");
                let regex = match regex_paths.then(|| PathRegex::compile(path)) {
                    None if spread => {
                        spread_regex(&mut regex_hosts, owner, path, &mut regex_problems)
                    }
                    None => None,
                    Some(Ok(regex)) => Some(regex),
                    Some(Err(e)) => {
                        regex_problems.push(format!("path {path:?}: {e}; the rule is not served"));
                        continue;
                    }
                };
                let upstream = resolver.backend(&id.namespace, &p.backend);
                let upstream = speech.speak(resolver, upstream, &p.backend);
                note(&upstream);
                let rule_policy = Policies::for_rule(&policy, path);
                let inserted = match regex {
                    Some(regex) => {
                        let rule_policy = rule_rewrite(rule_policy, &regex);
                        let route = Route::new(upstream, rule_policy, ingress_name.clone());
                        table.insert_regex(regex, route, index)
                    }
                    None => {
                        let route = Route::new(upstream, rule_policy, ingress_name.clone());
                        table.insert(kind, path, route, index)
                    }
                };
                if let Err(owner) = inserted {
                    let holder = owners[owner as usize];
                    let host = host.map_or("*".to_string(), |h| h.to_string());
                    conflicts.push(format!(
                        "rule {host} {path} ({kind:?}) is held by older Ingress {holder}"
                    ));
                }
            }
        }
        // `server-alias`: more names for the first rule host, each a host
        // claim as that host was.
        if let (Some(of), Some(value)) = (
            rule_hosts.first().filter(|_| canary.is_none()),
            ingress
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(alias::SERVER_ALIAS)),
        ) {
            match alias::names(value) {
                Ok(names) => {
                    for name in names {
                        if let Some(t) = tenant
                            && let Err(why) = hosts.admit(t, &name)
                        {
                            if !refused_hosts.contains(&why) {
                                refused_hosts.push(why);
                            }
                            continue;
                        }
                        aliases.push(alias::Alias {
                            name: name.to_string(),
                            of: of.clone(),
                            report: ingress_reports.len(),
                        });
                    }
                }
                Err(why) => annotation_problems.push(why),
            }
        }
        annotation_problems.append(&mut regex_problems);
        annotation_problems.append(&mut speech.problems);
        let acme = options.acme.as_ref().is_some_and(|a| {
            let annotations = ingress.metadata.annotations.as_ref();
            let value = annotations.and_then(|a| a.get(acme::ANNOTATION));
            a.opted_in(value.map(String::as_str), tenant.is_some())
        });
        if acme {
            let default_host = own_host
                .as_ref()
                .filter(|_| spec.is_some_and(|s| s.default_backend.is_some()));
            for (host, secret) in acme_hosts(ingress, &rule_hosts, default_host) {
                // A tenant's secretName names the agent's mirror of a
                // tenant Secret: ACME must not take that name (docs/acme.md).
                let secret = secret.filter(|_| tenant.is_none());
                acme_candidates.push(AcmeCandidate {
                    host,
                    secret,
                    report: ingress_reports.len(),
                });
            }
        }
        let tls_problems = add_certificates(
            store,
            id,
            ingress,
            &rule_hosts,
            tenant.is_some(),
            acme,
            certs,
        );

        let mut conditions = Vec::with_capacity(5);
        conditions.push(Condition::new("Accepted", true, "Accepted", ""));
        conditions.push(if conflicts.is_empty() {
            Condition::new("Conflicted", false, "NoConflict", "")
        } else {
            Condition::new("Conflicted", true, "OlderIngressWins", conflicts.join("; "))
        });
        conditions.push(Condition::unless_problems(
            "BackendsReady",
            &unresolved,
            "EndpointsReady",
            "NoReadyEndpoints",
        ));
        conditions.push(Condition::unless_problems(
            "TLSReady",
            &tls_problems,
            "CertificatesLoaded",
            "SecretUnusable",
        ));
        conditions.push(Condition::unless_problems(
            "HostsAccepted",
            &refused_hosts,
            "HostsAccepted",
            "HostsNotRouted",
        ));
        if !annotation_problems.is_empty() {
            conditions.push(Condition::unless_problems(
                "AnnotationsAccepted",
                &annotation_problems,
                "AnnotationsAccepted",
                "InvalidAnnotation",
            ));
        }
        let status = match &own_host {
            Some(host) => Arc::new(IngressStatus {
                load_balancer: Some(load_balancer_status(&[host.to_string()])),
            }),
            None => fleet_status.clone(),
        };
        ingress_reports.push(IngressReport {
            namespace: id.namespace.clone(),
            name: id.name.clone(),
            served: true,
            status,
            conditions,
        });
    }

    add_canaries(&mut routes, canaries, tenancy, &mut ingress_reports);
    add_www_redirects(&mut routes, www_twins);
    alias::add_aliases(&mut routes, aliases, |report, why| {
        ingress_reports[report]
            .conditions
            .push(Condition::unless_problems(
                "ServerAliasServed",
                &[why],
                "ServerAliasServed",
                "AliasTaken",
            ));
    });
    Compiled {
        routes,
        reports: ingress_reports,
        acme_candidates,
    }
}

/// The ACME hosts of this compile: each candidate no Secret covers (a
/// tenant's own certificate always wins), attributed to the oldest Ingress
/// asking, whose report gets the condition of its hosts.
pub(super) fn assign_acme(
    candidates: Vec<AcmeCandidate>,
    certs: &CertTable,
    reports: &mut [IngressReport],
    inputs: Option<&acme::AcmeInputs>,
) -> acme::AcmeHosts {
    let mut acme_hosts = acme::AcmeHosts::default();
    let mut by_report: FastHashMap<usize, Vec<String>> = FastHashMap::default();
    for AcmeCandidate {
        host,
        secret,
        report,
    } in candidates
    {
        if certs.lookup(&host).is_some() {
            continue;
        }
        let r = &reports[report];
        acme_hosts.insert_with_secret(&host, &r.namespace, &r.name, secret.as_deref());
        by_report.entry(report).or_default().push(host);
    }
    if let Some(inputs) = inputs {
        for (report, mut hosts) in by_report {
            hosts.sort();
            hosts.dedup();
            reports[report]
                .conditions
                .push(acme::condition(&inputs.states, &hosts));
        }
    }
    acme_hosts
}

/// The `Accepted=False` reason of an Ingress not routed because it asks
/// for an access restriction teapot does not apply.
pub(crate) const UNSERVED_RESTRICTION: &str = "UnservedRestriction";

/// The report of an Ingress no rule of which is routed: its one condition,
/// `Accepted=False` with `reason`, and no load-balancer status.
fn not_routed(
    id: &NsName,
    served: bool,
    no_status: &Arc<IngressStatus>,
    reason: &'static str,
    message: impl Into<String>,
) -> IngressReport {
    IngressReport {
        namespace: id.namespace.clone(),
        name: id.name.clone(),
        served,
        status: no_status.clone(),
        conditions: vec![Condition::new("Accepted", false, reason, message)],
    }
}

/// `policy` with every plain-HTTP request redirected to HTTPS.
fn https_only(policy: Option<Arc<RoutePolicy>>) -> Arc<RoutePolicy> {
    let p = policy.as_deref();
    let mut traffic = p
        .and_then(|p| p.traffic.as_deref())
        .cloned()
        .unwrap_or_default();
    traffic.ssl_redirect = Some(crate::compile::traffic::SslRedirect::All);
    Arc::new(RoutePolicy {
        max_body_size: p.and_then(|p| p.max_body_size),
        tenant: p.and_then(|p| p.tenant.clone()),
        traffic: Some(Arc::new(traffic)),
    })
}

/// The client-certificate annotations, as conditions name them.
const AUTH_TLS: &str = "nginx.ingress.kubernetes.io/auth-tls-*";

/// A path made a regex because another Ingress of its host asked
/// ([`regex_hosts`]), within its tenant's regex budget; one that does not
/// compile, or does not fit, keeps its own `pathType` (reported).
fn spread_regex(
    regex_hosts: &mut regex_hosts::RegexHosts<'_>,
    owner: Option<&str>,
    path: &str,
    problems: &mut Vec<String>,
) -> Option<Arc<PathRegex>> {
    const WHY: &str = "another Ingress of its host asks for regex paths (use-regex or rewrite-target), which ingress-nginx applies to every path of the host";
    if !regex_hosts.spend(owner, path) {
        problems.push(format!(
            "path {path:?}: not made a regular expression as {WHY}: the tenant's regular expressions would pass its limits (maxRegexes, maxRegexBytes); it matches by its pathType"
        ));
        return None;
    }
    match PathRegex::compile(path) {
        Ok(regex) => Some(regex),
        Err(e) => {
            problems.push(format!(
                "path {path:?}: not made a regular expression as {WHY}: {e}; it matches by its pathType"
            ));
            None
        }
    }
}

/// The policy of a regex rule: with `rewrite-target`, a copy carrying the
/// rule's own pattern, whose captures the target takes (a target equal to
/// the path rewrites nothing, as in ingress-nginx).
fn rule_rewrite(
    policy: Option<Arc<RoutePolicy>>,
    regex: &Arc<PathRegex>,
) -> Option<Arc<RoutePolicy>> {
    let Some((p, traffic, rewrite)) = policy.as_ref().and_then(|p| {
        let traffic = p.traffic.as_ref()?;
        let rewrite = traffic.rewrite.as_ref()?;
        Some((p, traffic, rewrite))
    }) else {
        return policy;
    };
    let mut traffic = (**traffic).clone();
    traffic.rewrite = (*rewrite.target != *regex.as_str()).then(|| Rewrite {
        target: rewrite.target.clone(),
        regex: Some(regex.clone()),
    });
    Some(Arc::new(RoutePolicy {
        max_body_size: p.max_body_size,
        tenant: p.tenant.clone(),
        traffic: Some(Arc::new(traffic)),
    }))
}

/// Upper bounds of the hosts and paths a compile will add, for sizing the
/// route table once instead of growing it.
fn rule_counts(store: &Store) -> (usize, usize) {
    let mut hosts = 0;
    let mut paths = 0;
    for stored in store.ingresses.values() {
        for rule in stored
            .object
            .spec
            .iter()
            .flat_map(|s| s.rules.iter().flatten())
        {
            hosts += 1;
            paths += rule.http.as_ref().map_or(0, |h| h.paths.len());
        }
    }
    (hosts, paths)
}

/// The exact TLS hosts of an Ingress that it routes (its rule hosts, plus
/// `default_host` where a tenant's defaultBackend serves): what ACME may
/// ask a certificate for. HTTP-01 cannot prove a wildcard. Each comes with
/// its entry's `secretName` when that entry has no other such host (one
/// certificate per host, so a shared name cannot hold them all).
fn acme_hosts(
    ingress: &Ingress,
    rule_hosts: &[HostPattern],
    default_host: Option<&HostPattern>,
) -> Vec<(String, Option<String>)> {
    let tls = ingress.spec.as_ref().and_then(|s| s.tls.as_ref());
    let mut out = Vec::new();
    for entry in tls.into_iter().flatten() {
        let first = out.len();
        for host in tls_entry_hosts(entry, rule_hosts) {
            let routed = rule_hosts.contains(&host) || default_host == Some(&host);
            if let (true, HostPattern::Exact(name)) = (routed, &host) {
                out.push((name.to_string(), None));
            }
        }
        if out.len() == first + 1 {
            out[first].1 = entry.secret_name.clone();
        }
    }
    out
}

/// The hosts a `spec.tls` entry names; without hosts, the certificate
/// covers the Ingress's own rule hosts.
fn tls_entry_hosts(
    entry: &k8s_openapi::api::networking::v1::IngressTLS,
    rule_hosts: &[HostPattern],
) -> Vec<HostPattern> {
    match &entry.hosts {
        Some(hosts) if !hosts.is_empty() => hosts
            .iter()
            .filter_map(|h| HostPattern::parse(h).ok())
            .collect(),
        _ => rule_hosts.to_vec(),
    }
}

/// Registers the certificates of an Ingress's `spec.tls`; returns messages
/// for entries that could not be used. With `acme`, a missing Secret is
/// expected (ACME supplies the certificate) and not a problem.
fn add_certificates(
    store: &Store,
    id: &NsName,
    ingress: &Ingress,
    rule_hosts: &[HostPattern],
    tenant: bool,
    acme: bool,
    certs: &mut CertTable,
) -> Vec<String> {
    let mut problems = Vec::new();
    let tls = ingress.spec.as_ref().and_then(|s| s.tls.as_ref());
    for (i, entry) in tls.into_iter().flatten().enumerate() {
        let Some(secret_name) = entry.secret_name.as_deref() else {
            if !acme {
                problems.push(format!("spec.tls[{i}].secretName is empty"));
            }
            continue;
        };
        let Some(secret) = store.secrets.get(&NsRef {
            namespace: &id.namespace,
            name: secret_name,
        }) else {
            if acme {
                continue;
            }
            problems.push(format!(
                "spec.tls[{i}]: Secret {}/{secret_name} not found or not a usable kubernetes.io/tls Secret",
                id.namespace
            ));
            continue;
        };
        for host in tls_entry_hosts(entry, rule_hosts) {
            // A tenant's certificate covers only hosts it routes: a Secret
            // must never put a certificate on another tenant's name.
            if tenant && !rule_hosts.contains(&host) {
                problems.push(format!(
                    "spec.tls[{i}]: host {host} is not routed by this Ingress; its certificate is not used"
                ));
                continue;
            }
            if certs.insert(&host, secret.object.certificate.key.clone()) {
                if let Some(not_after) = secret.object.certificate.not_after {
                    certs.note_secret(format!("{}/{secret_name}", id.namespace), not_after);
                }
            } else {
                problems.push(format!(
                    "spec.tls[{i}]: host {host} already has a certificate from an older Ingress"
                ));
            }
        }
    }
    problems
}

pub(super) fn load_balancer_status(addresses: &[String]) -> IngressLoadBalancerStatus {
    IngressLoadBalancerStatus {
        ingress: Some(
            addresses
                .iter()
                .map(|a| {
                    if a.parse::<IpAddr>().is_ok() {
                        IngressLoadBalancerIngress {
                            ip: Some(a.clone()),
                            ..Default::default()
                        }
                    } else {
                        IngressLoadBalancerIngress {
                            hostname: Some(a.clone()),
                            ..Default::default()
                        }
                    }
                })
                .collect(),
        ),
    }
}

/// Which Ingresses are ours.
pub(super) struct ClassFilter {
    /// Names of IngressClasses whose controller is teapot.
    ours: Vec<String>,
    /// Whether one of them is the cluster default.
    default: bool,
}

impl ClassFilter {
    pub(super) fn new(store: &Store) -> ClassFilter {
        let mut ours = vec![INGRESS_CLASS.to_string()];
        let mut default = false;
        for (name, class) in &store.ingress_classes {
            let controller = class
                .object
                .spec
                .as_ref()
                .and_then(|s| s.controller.as_deref());
            if controller != Some(CONTROLLER_NAME) {
                continue;
            }
            ours.push(name.clone());
            let annotations = class.object.metadata.annotations.as_ref();
            default |= annotations
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .is_some_and(|v| v == "true");
        }
        ClassFilter { ours, default }
    }

    pub(super) fn serves(&self, ingress: &Ingress) -> bool {
        let class = ingress
            .spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_deref())
            .or_else(|| {
                // The deprecated annotation still appears in older charts.
                ingress
                    .metadata
                    .annotations
                    .as_ref()?
                    .get("kubernetes.io/ingress.class")
                    .map(String::as_str)
            });
        match class {
            Some(c) => self.ours.iter().any(|o| o == c),
            None => self.default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::CompileOptions;
    use crate::compile::tests::compile_test_docs;
    use crate::compile::upstream::Protocol;

    /// Service `ops/web` with one endpoint, and teapot's IngressClass.
    const DOCS: &str = "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: teapot}
spec: {controller: teapot.dev/ingress-controller}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ops}
spec: {ports: [{port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: ops, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints: [{addresses: [127.0.0.1]}]
ports: [{name: \"\", port: 8080}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: ops}
spec:
  ingressClassName: teapot
  rules:
  - host: a.example
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
";

    /// An Ingress in `ops` for `host` to `service:80`, with `annotations`
    /// (flow-style YAML entries).
    fn ops_ingress(name: &str, host: &str, annotations: &str, service: &str) -> String {
        paths_ingress(name, host, annotations, &[("Prefix", "/", service)])
    }

    /// A TLS Secret `ns/name` whose `ca.crt` is `ca` (when given).
    fn secret(ns: &str, name: &str, ca: Option<&str>) -> String {
        use teapot_testkit::certs;
        let pem = certs::TestCa::new("client CA").issue_client("teapot-client");
        match ca {
            Some(ca) => certs::tls_secret_with_ca_yaml(ns, name, &pem, ca),
            None => certs::tls_secret_yaml(ns, name, &pem),
        }
    }

    fn upstream_of(snapshot: &crate::compile::snapshot::Snapshot, host: &str) -> Arc<Upstream> {
        let route = snapshot.routes.lookup(host, "/");
        route.unwrap_or_else(|| panic!("{host}")).upstream.clone()
    }

    fn message(snapshot: &crate::compile::snapshot::Snapshot, name: &str) -> String {
        let report = snapshot.report.ingresses.iter().find(|r| r.name == name);
        let conditions = report.map(|r| r.conditions.iter()).into_iter().flatten();
        conditions
            .filter(|c| c.status == "False" && c.type_ == "AnnotationsAccepted")
            .map(|c| c.message.clone())
            .collect()
    }

    /// Service `ops/other` with one endpoint.
    const OTHER: &str = "apiVersion: v1
kind: Service
metadata: {name: other, namespace: ops}
spec: {ports: [{port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: other-1, namespace: ops, labels: {kubernetes.io/service-name: other}}
addressType: IPv4
endpoints: [{addresses: [127.0.0.2]}]
ports: [{name: \"\", port: 8080}]
";

    /// An Ingress of `ops` on `host` with one path each of `paths`
    /// (type, path, service).
    fn paths_ingress(
        name: &str,
        host: &str,
        annotations: &str,
        paths: &[(&str, &str, &str)],
    ) -> String {
        let paths: Vec<String> = paths
            .iter()
            .map(|(kind, path, service)| {
                format!("{{path: \"{path}\", pathType: {kind}, backend: {{service: {{name: {service}, port: {{number: 80}}}}}}}}")
            })
            .collect();
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
    http: {{paths: [{}]}}
",
            paths.join(", ")
        )
    }

    fn served_by(s: &crate::compile::snapshot::Snapshot, host: &str, path: &str) -> Option<String> {
        s.routes.lookup(host, path).map(|r| r.upstream.name.clone())
    }

    fn condition<'a>(
        s: &'a crate::compile::snapshot::Snapshot,
        name: &str,
        type_: &str,
    ) -> Option<&'a crate::compile::condition::Condition> {
        let report = s.report.ingresses.iter().find(|r| r.name == name)?;
        report.conditions.iter().find(|c| c.type_ == type_)
    }

    /// ingress-nginx's path-priority example on two Ingresses of one host:
    /// `Prefix /foo/bar` and `Prefix /foo/bar/` are two rules, neither in
    /// conflict; `/foo/bar` goes to the first, `/foo/bar/` and below to the
    /// second.
    #[test]
    fn a_prefix_and_its_trailing_slash_twin_are_two_rules() {
        let docs = vec![
            DOCS.to_string(),
            OTHER.to_string(),
            paths_ingress(
                "test-ingress-1",
                "test.com",
                "",
                &[("Prefix", "/foo/bar", "web")],
            ),
            paths_ingress(
                "test-ingress-2",
                "test.com",
                "",
                &[("Prefix", "/foo/bar/", "other")],
            ),
        ];
        let s = compile_test_docs(&docs, &CompileOptions::default());
        for name in ["test-ingress-1", "test-ingress-2"] {
            let conflicted = condition(&s, name, "Conflicted").unwrap();
            assert_eq!(conflicted.status, "False", "{name}: {}", conflicted.message);
        }
        assert_eq!(
            served_by(&s, "test.com", "/foo/bar").as_deref(),
            Some("ops/web:80")
        );
        for below in ["/foo/bar/", "/foo/bar/1"] {
            assert_eq!(
                served_by(&s, "test.com", below).as_deref(),
                Some("ops/other:80"),
                "{below}"
            );
        }
    }

    /// `use-regex` on one Ingress of a host makes every path of the host a
    /// case-insensitive regex, as ingress-nginx writes every location of
    /// the server with `~*`; other hosts keep their matching.
    #[test]
    fn use_regex_on_one_ingress_makes_the_hosts_paths_regexes() {
        let docs = vec![
            DOCS.to_string(),
            OTHER.to_string(),
            paths_ingress(
                "regex",
                "test.com",
                "nginx.ingress.kubernetes.io/use-regex: \"true\"",
                &[("ImplementationSpecific", "/api/v[0-9]+", "other")],
            ),
            paths_ingress(
                "plain",
                "test.com",
                "",
                &[("Prefix", "/Static", "web"), ("Exact", "/file.txt", "web")],
            ),
            paths_ingress(
                "elsewhere",
                "other.com",
                "",
                &[("Prefix", "/Static", "web")],
            ),
        ];
        let s = compile_test_docs(&docs, &CompileOptions::default());
        assert_eq!(
            served_by(&s, "test.com", "/API/v2/x").as_deref(),
            Some("ops/other:80")
        );
        for path in [
            "/static/a",
            "/STATIC",
            "/Staticfile",
            "/file.txt",
            "/fileXtxt/more",
        ] {
            assert_eq!(
                served_by(&s, "test.com", path).as_deref(),
                Some("ops/web:80"),
                "{path}"
            );
        }
        assert_eq!(
            served_by(&s, "other.com", "/static/a"),
            None,
            "case-sensitive elsewhere"
        );
        assert_eq!(
            served_by(&s, "other.com", "/Static/a").as_deref(),
            Some("ops/web:80")
        );
        assert!(condition(&s, "plain", "AnnotationsAccepted").is_none());
    }

    /// An Ingress's TLS hosts redirect plain HTTP to HTTPS unless it says
    /// otherwise, as ingress-nginx's `ssl-redirect` defaults to true; the
    /// fleet's `--ssl-redirect-default=false` keeps them on plain HTTP
    /// unless an Ingress asks.
    #[test]
    fn tls_hosts_redirect_to_https_by_default() {
        use crate::compile::traffic::SslRedirect;
        let with_tls = |name: &str, host: &str, annotations: &str| {
            ops_ingress(name, host, annotations, "web").replace(
                "  rules:",
                &format!("  tls: [{{hosts: [{host}]}}]\n  rules:"),
            )
        };
        let docs = vec![
            DOCS.to_string(),
            with_tls("plain", "plain.example", ""),
            with_tls(
                "off",
                "off.example",
                "nginx.ingress.kubernetes.io/ssl-redirect: \"false\"",
            ),
            with_tls(
                "teapot-off",
                "teapot-off.example",
                "teapot.dev/ssl-redirect: \"false\"",
            ),
            with_tls(
                "asks",
                "asks.example",
                "nginx.ingress.kubernetes.io/ssl-redirect: \"true\"",
            ),
            ops_ingress("no-tls", "no-tls.example", "", "web"),
        ];
        let redirect = |s: &crate::compile::snapshot::Snapshot, host: &str| {
            let route = s
                .routes
                .lookup(host, "/")
                .unwrap_or_else(|| panic!("{host}"));
            let traffic = route.policy.as_ref().and_then(|p| p.traffic.as_ref());
            traffic.and_then(|t| t.ssl_redirect.clone())
        };
        let hosts = |h: &str| {
            Some(SslRedirect::Hosts(vec![
                teapot_api::HostPattern::parse(h).unwrap(),
            ]))
        };
        let s = compile_test_docs(&docs, &CompileOptions::default());
        assert_eq!(redirect(&s, "plain.example"), hosts("plain.example"));
        assert_eq!(redirect(&s, "off.example"), None);
        assert_eq!(redirect(&s, "teapot-off.example"), None);
        assert_eq!(redirect(&s, "asks.example"), hosts("asks.example"));
        assert_eq!(redirect(&s, "no-tls.example"), None);
        let options = CompileOptions {
            ssl_redirect_default: false,
            ..CompileOptions::default()
        };
        let s = compile_test_docs(&docs, &options);
        assert_eq!(redirect(&s, "plain.example"), None);
        assert_eq!(redirect(&s, "off.example"), None);
        assert_eq!(redirect(&s, "asks.example"), hosts("asks.example"));
    }

    #[test]
    fn backend_protocols_make_their_own_upstreams() {
        let ca = teapot_testkit::certs::TestCa::new("backend CA");
        let protocol = |p: &str| format!("nginx.ingress.kubernetes.io/backend-protocol: {p}");
        let verify = "nginx.ingress.kubernetes.io/proxy-ssl-verify: 'on'";
        let secret_of = |s: &str| format!("nginx.ingress.kubernetes.io/proxy-ssl-secret: {s}");
        let docs = [
            DOCS.to_string(),
            secret("ops", "with-ca", Some(ca.cert_pem())),
            secret("ops", "no-ca", None),
            teapot_testkit::certs::ca_secret_yaml("ops", "ca-only", ca.cert_pem()),
            ops_ingress(
                "ca-only",
                "ca-only.example",
                &format!("{}, {verify}, {}", protocol("HTTPS"), secret_of("ca-only")),
                "web",
            ),
            ops_ingress("grpc", "grpc.example", &protocol("GRPC"), "web"),
            ops_ingress("https", "https.example", &protocol("HTTPS"), "web"),
            ops_ingress(
                "grpcs",
                "grpcs.example",
                &format!(
                    "{}, {verify}, {}, nginx.ingress.kubernetes.io/proxy-ssl-name: b.internal, nginx.ingress.kubernetes.io/proxy-ssl-server-name: 'on'",
                    protocol("GRPCS"),
                    secret_of("ops/with-ca")
                ),
                "web",
            ),
            ops_ingress(
                "no-secret",
                "no-secret.example",
                &format!("{}, {verify}", protocol("HTTPS")),
                "web",
            ),
            ops_ingress(
                "no-ca",
                "no-ca.example",
                &format!(
                    "{}, {verify}, {}",
                    protocol("HTTPS"),
                    secret_of("ops/no-ca")
                ),
                "web",
            ),
            ops_ingress(
                "missing",
                "missing.example",
                &format!("{}, {}", protocol("HTTPS"), secret_of("ops/nowhere")),
                "web",
            ),
        ];
        let s = compile_test_docs(&docs, &CompileOptions::default());
        // HTTP stays the shared upstream, on today's path.
        assert!(matches!(
            upstream_of(&s, "a.example").protocol,
            Protocol::Http1
        ));
        let grpc = upstream_of(&s, "grpc.example");
        assert!(matches!(grpc.protocol, Protocol::H2c));
        assert_eq!(grpc.endpoints.load().len(), 1, "the same endpoints");
        let https = upstream_of(&s, "https.example");
        let tls = https.protocol.tls().expect("TLS");
        assert!(!tls.h2());
        assert_eq!(tls.settings.name, "web.ops.svc");
        assert!(!tls.settings.sni && tls.settings.verify.is_none());
        assert!(tls.settings.client_cert.is_none());
        let grpcs = upstream_of(&s, "grpcs.example");
        let tls = grpcs.protocol.tls().expect("TLS");
        assert!(tls.h2() && tls.settings.sni);
        assert_eq!(tls.settings.name, "b.internal");
        assert_eq!(tls.settings.depth, 1);
        assert!(tls.settings.verify.is_some() && tls.settings.client_cert.is_some());
        assert!(grpcs.protocol.is_h2());
        // An Opaque Secret with ca.crt alone: verified, no client certificate.
        let ca_only = upstream_of(&s, "ca-only.example");
        let ca_tls = ca_only.protocol.tls().expect("TLS");
        assert_eq!(
            ca_tls.settings.verify.as_deref(),
            Some(ca.cert_pem().as_bytes())
        );
        assert!(ca_tls.settings.client_cert.is_none());
        assert_eq!(message(&s, "ca-only"), "");
        // Unusable settings: no endpoint (503), and the Ingress says why,
        // naming itself and the annotation.
        for (name, host, says) in [
            (
                "no-secret",
                "no-secret.example",
                "proxy-ssl-verify: on needs",
            ),
            ("no-ca", "no-ca.example", "has no ca.crt"),
            ("missing", "missing.example", "Secret ops/nowhere not found"),
        ] {
            assert!(upstream_of(&s, host).is_empty(), "{name}");
            let message = message(&s, name);
            assert!(message.contains(says), "{name}: {message}");
            assert!(
                message.contains(&format!("ops/{name}")),
                "{name}: {message}"
            );
        }
        // The same settings on the next compile share one configuration
        // (its session cache and pool class).
        let registry = crate::live::endpoints::EndpointRegistry::default();
        let settings = tls.settings.clone();
        let a = registry.tls(settings.clone()).unwrap();
        let b = registry.tls(settings).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn a_tenant_reads_its_own_namespaces_secrets_only() {
        const TENANT: &str = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec:
  cluster: acme
  nodeCIDRs: [10.1.0.0/24]
";
        let ingress = |name: &str, secret: &str| {
            format!(
                "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: tenant-acme
  annotations:
    nginx.ingress.kubernetes.io/backend-protocol: HTTPS
    nginx.ingress.kubernetes.io/proxy-ssl-secret: {secret}
spec:
  ingressClassName: teapot
  defaultBackend: {{service: {{name: web, port: {{number: 80}}}}}}
"
            )
        };
        let docs = [
            DOCS.to_string(),
            TENANT.to_string(),
            secret("ops", "operators", None),
            secret("tenant-acme", "own", None),
            ingress("elsewhere", "ops/operators"),
            ingress("own", "tenant-acme/own"),
        ];
        let s = compile_test_docs(&docs, &CompileOptions::default());
        let refused = message(&s, "elsewhere");
        assert!(
            refused.contains("proxy-ssl-secret")
                && refused.contains("ops/operators")
                && refused.contains("tenant-acme/elsewhere"),
            "{refused}"
        );
        assert_eq!(message(&s, "own"), "");
    }

    /// An operator Ingress asking for a restriction teapot does not apply
    /// (or whose restricting value it cannot read) is not routed at all,
    /// and its status names the annotation; one teapot fully serves is.
    #[test]
    fn unserved_restrictions_keep_an_ingress_unrouted() {
        let cases = [
            (
                "basic",
                "nginx.ingress.kubernetes.io/auth-type: basic, nginx.ingress.kubernetes.io/auth-realm: ops",
                "auth-secret",
            ),
            (
                "mtls",
                "nginx.ingress.kubernetes.io/auth-tls-verify-client: 'on'",
                "auth-tls-verify-client",
            ),
            (
                "snippet",
                "nginx.ingress.kubernetes.io/configuration-snippet: 'deny all;'",
                "configuration-snippet",
            ),
            (
                "server",
                "nginx.ingress.kubernetes.io/server-snippet: 'allow 10.0.0.0/8;'",
                "server-snippet",
            ),
            (
                "allow",
                "nginx.ingress.kubernetes.io/whitelist-source-range: 10.0.0.0/33",
                "whitelist-source-range",
            ),
            (
                "deny",
                "nginx.ingress.kubernetes.io/denylist-source-range: everyone",
                "denylist-source-range",
            ),
            (
                "rate",
                "nginx.ingress.kubernetes.io/limit-rps: '0'",
                "limit-rps",
            ),
            (
                "bandwidth",
                "nginx.ingress.kubernetes.io/limit-rate: '1048577'",
                "limit-rate",
            ),
            (
                "waf",
                "nginx.ingress.kubernetes.io/enable-modsecurity: 'true'",
                "enable-modsecurity",
            ),
            // The client's X-Forwarded-User would stand for the service's.
            (
                "oauth",
                "nginx.ingress.kubernetes.io/auth-url: 'http://auth.ops.svc/', nginx.ingress.kubernetes.io/auth-response-headers: X-Forwarded-User",
                "auth-response-headers",
            ),
        ];
        let mut docs = vec![DOCS.to_string()];
        for (name, annotations, _) in cases {
            docs.push(ops_ingress(
                name,
                &format!("{name}.example"),
                annotations,
                "web",
            ));
        }
        // Unserved, but restricting nothing: served, and reported.
        docs.push(ops_ingress(
            "tuned",
            "tuned.example",
            "nginx.ingress.kubernetes.io/proxy-max-temp-file-size: '0'",
            "web",
        ));
        let s = compile_test_docs(&docs, &CompileOptions::default());
        for (name, _, key) in cases {
            let host = format!("{name}.example");
            assert!(s.routes.lookup(&host, "/").is_none(), "{name} is routed");
            let report = s.report.ingresses.iter().find(|r| r.name == name).unwrap();
            let accepted = report
                .conditions
                .iter()
                .find(|c| c.type_ == "Accepted")
                .unwrap();
            assert_eq!(
                (accepted.status, accepted.reason),
                ("False", UNSERVED_RESTRICTION),
                "{name}"
            );
            let field = format!("metadata.annotations[\"nginx.ingress.kubernetes.io/{key}\"]");
            assert!(
                accepted.message.contains(&field),
                "{name}: {}",
                accepted.message
            );
            assert!(
                report.status.load_balancer.is_none(),
                "{name}: no address is published"
            );
        }
        assert!(s.routes.lookup("tuned.example", "/").is_some());
        assert!(message(&s, "tuned").contains("proxy-max-temp-file-size"));
        assert!(s.routes.lookup("a.example", "/").is_some());
    }

    /// A tenant's Ingress that got past admission with such an annotation
    /// is not routed either (defence in depth).
    #[test]
    fn a_tenants_unserved_restriction_is_not_routed() {
        const TENANT: &str = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec:
  cluster: acme
  nodeCIDRs: [10.1.0.0/24]
";
        let ingress = |name: &str, annotation: &str| {
            format!(
                "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: tenant-acme
  annotations: {{{annotation}}}
spec:
  ingressClassName: teapot
  defaultBackend: {{service: {{name: web, port: {{number: 80}}}}}}
"
            )
        };
        let docs = [
            DOCS.to_string(),
            TENANT.to_string(),
            ingress("locked", "nginx.ingress.kubernetes.io/auth-type: basic"),
            ingress("open", "teapot.dev/acme: 'false'"),
        ];
        let s = compile_test_docs(&docs, &CompileOptions::default());
        let reason = |name: &str| {
            let report = s.report.ingresses.iter().find(|r| r.name == name).unwrap();
            report.conditions[0].reason
        };
        assert_eq!(reason("locked"), UNSERVED_RESTRICTION);
        assert_eq!(reason("open"), "Accepted");
    }

    /// `auth-tls-*` compile to the host's client-certificate setting; one
    /// that cannot be served as asked keeps the Ingress unrouted, naming
    /// the annotation; an older Ingress's different setting keeps the
    /// host, and the newer one's rules there are not served.
    #[test]
    fn client_certificates_compile_per_host_or_keep_the_ingress_unrouted() {
        use crate::compile::client_auth::ClientAuthMode;
        use teapot_testkit::certs::{TestCa, ca_secret_yaml};
        let p = |name: &str, value: &str| {
            format!("nginx.ingress.kubernetes.io/auth-tls-{name}: '{value}'")
        };
        let (clients, others) = (TestCa::new("client CA"), TestCa::new("other CA"));
        let docs = [
            DOCS.to_string(),
            ca_secret_yaml("ops", "client-ca", clients.cert_pem()),
            ca_secret_yaml("ops", "other-ca", others.cert_pem()),
            // A TLS Secret carrying ca.crt is read too.
            secret("ops", "tls-with-ca", Some(clients.cert_pem())),
            ops_ingress(
                "mtls",
                "mtls.example",
                &[
                    p("secret", "ops/client-ca"),
                    p("verify-depth", "2"),
                    p("error-page", "https://login.example/cert"),
                    p("pass-certificate-to-upstream", "true"),
                    p("match-cn", "CN=(alice|bob)"),
                ]
                .join(", "),
                "web",
            ),
            ops_ingress(
                "optional",
                "optional.example",
                &[
                    p("secret", "tls-with-ca"),
                    p("verify-client", "optional_no_ca"),
                ]
                .join(", "),
                "web",
            ),
            ops_ingress(
                "off",
                "off.example",
                &[p("secret", "client-ca"), p("verify-client", "off")].join(", "),
                "web",
            ),
            ops_ingress(
                "missing",
                "missing.example",
                &p("secret", "ops/nowhere"),
                "web",
            ),
            ops_ingress("alone", "alone.example", &p("verify-client", "on"), "web"),
            ops_ingress(
                "deep",
                "deep.example",
                &[p("secret", "client-ca"), p("verify-depth", "8")].join(", "),
                "web",
            ),
            ops_ingress(
                "a-first",
                "shared.example",
                &p("secret", "client-ca"),
                "web",
            ),
            ops_ingress(
                "b-second",
                "shared.example",
                &p("secret", "other-ca"),
                "web",
            )
            .replace("path: /,", "path: /b,"),
        ];
        let s = compile_test_docs(&docs, &CompileOptions::default());
        let setting = s.client_auth.lookup("mtls.example").expect("mtls.example");
        assert_eq!(setting.mode, ClientAuthMode::Require);
        assert_eq!(setting.max_depth, 2);
        assert_eq!(setting.source, "Ingress ops/mtls");
        assert_eq!(
            setting.error_page.as_deref(),
            Some("https://login.example/cert")
        );
        assert!(setting.pass_to_upstream);
        assert_eq!(setting.roots.certs()[0].as_ref(), clients.cert_der());
        let cn = setting.match_cn.as_ref().unwrap();
        assert!(cn.is_match(b"CN=bob,O=Example"));
        assert!(!cn.is_match(b"CN=mallory,O=Example"));
        let route = s.routes.lookup("mtls.example", "/").unwrap();
        let traffic = route.policy.as_ref().unwrap().traffic.as_ref().unwrap();
        assert!(
            matches!(
                traffic.ssl_redirect,
                Some(crate::compile::traffic::SslRedirect::All)
            ),
            "plain HTTP goes to HTTPS"
        );
        let off = s.routes.lookup("off.example", "/").unwrap();
        assert!(off.policy.is_none(), "no certificate asked, nothing added");
        let optional = s.client_auth.lookup("optional.example").unwrap();
        assert_eq!(optional.mode, ClientAuthMode::OptionalNoCa);
        assert_eq!(optional.max_depth, 1);
        assert!(s.client_auth.lookup("off.example").is_none());
        assert!(s.routes.lookup("off.example", "/").is_some());
        for (name, says) in [
            ("missing", "Secret ops/nowhere not found"),
            ("alone", "needs nginx.ingress.kubernetes.io/auth-tls-secret"),
            ("deep", "auth-tls-verify-depth"),
        ] {
            assert!(
                s.routes.lookup(&format!("{name}.example"), "/").is_none(),
                "{name}"
            );
            assert!(
                s.client_auth.lookup(&format!("{name}.example")).is_none(),
                "{name}"
            );
            let report = s.report.ingresses.iter().find(|r| r.name == name).unwrap();
            let accepted = &report.conditions[0];
            assert_eq!(
                (accepted.status, accepted.reason),
                ("False", UNSERVED_RESTRICTION),
                "{name}"
            );
            assert!(
                accepted.message.contains(says),
                "{name}: {}",
                accepted.message
            );
        }
        // The older setting keeps the host; the newer Ingress's rule there
        // is not served under CAs it did not name.
        assert_eq!(
            s.client_auth.lookup("shared.example").unwrap().source,
            "Ingress ops/a-first"
        );
        let b = s.routes.lookup("shared.example", "/b").unwrap();
        assert_eq!(&*b.ingress, "ops/a-first", "the older Ingress's / answers");
        let second = s
            .report
            .ingresses
            .iter()
            .find(|r| r.name == "b-second")
            .unwrap();
        let conflicted = second
            .conditions
            .iter()
            .find(|c| c.type_ == "Conflicted")
            .unwrap();
        assert!(
            conflicted.message.contains("Ingress ops/a-first"),
            "{}",
            conflicted.message
        );
    }

    /// A tenant's Ingress trusts its own namespace's CA Secrets only, and
    /// asks for client certificates on its own name.
    #[test]
    fn a_tenants_client_certificates_come_from_its_own_namespace() {
        const TENANT: &str = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec:
  cluster: acme
  nodeCIDRs: [10.1.0.0/24]
";
        let ca = teapot_testkit::certs::TestCa::new("client CA");
        let ingress = |name: &str, secret: &str| {
            format!(
                "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: tenant-acme
  annotations:
    nginx.ingress.kubernetes.io/auth-tls-secret: {secret}
spec:
  ingressClassName: teapot
  defaultBackend: {{service: {{name: web, port: {{number: 80}}}}}}
"
            )
        };
        let docs = [
            DOCS.to_string(),
            TENANT.to_string(),
            teapot_testkit::certs::ca_secret_yaml("ops", "ca", ca.cert_pem()),
            teapot_testkit::certs::ca_secret_yaml("tenant-acme", "ca", ca.cert_pem()),
            ingress("elsewhere", "ops/ca"),
            ingress("own", "tenant-acme/ca"),
        ];
        let options = CompileOptions::default();
        let s = compile_test_docs(&docs, &options);
        let report = |name: &str| s.report.ingresses.iter().find(|r| r.name == name).unwrap();
        let refused = &report("elsewhere").conditions[0];
        assert_eq!(refused.reason, UNSERVED_RESTRICTION);
        assert!(
            refused.message.contains("ops/ca") && refused.message.contains("tenant-acme"),
            "{}",
            refused.message
        );
        assert_eq!(report("own").conditions[0].reason, "Accepted");
        let own = hostname::assigned_hostname("own", "acme", &options.domain);
        assert_eq!(
            s.client_auth.lookup(&own).unwrap().source,
            "Ingress tenant-acme/own"
        );
        let elsewhere = hostname::assigned_hostname("elsewhere", "acme", &options.domain);
        assert!(s.client_auth.lookup(&elsewhere).is_none());
        assert_eq!(s.client_auth.len(), 1);
    }
}
