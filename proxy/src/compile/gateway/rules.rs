//! A route's rules into the table's [`Target`]s: each rule's matches,
//! filters, traffic policy and weighted backends, with the reasons a rule
//! or a backendRef is not served.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use teapot_model::attachment;
use teapot_model::store::Store;

use super::backend_refs::{backend, service_key};
use super::filters::{
    NO_FILTERS, backend_filters, edited, filter_spec, merged_filters, with_cors, with_traffic,
};
use super::inputs::{BackendsIn, RouteIn, RuleIn};
use super::matchers::any_path;
use super::table::{Action, Backend, BackendFilters, Mirror, PathMatch, RouteInfo, Target};
use super::{ext_auth, route_policy, session};
use crate::compile::backends::Resolver;
use crate::compile::routes::Route;

/// The route's rules; whether every backendRef resolved (the reason when
/// not); the messages of rules that could not be served.
#[allow(clippy::type_complexity)]
pub(super) fn compile_rules<'s>(
    (store, auth_owner): (&'s Store, (&crate::live::fairness::TenantGates, &str)),
    resolver: &mut Resolver<'s>,
    route: &RouteIn<'s>,
    (rules, attached): (Vec<RuleIn<'s>>, &route_policy::Attached),
    info: &Arc<RouteInfo>,
    route_index: u32,
) -> (
    Vec<Arc<Target>>,
    Result<(), (&'static str, String)>,
    Vec<String>,
) {
    let mut resolved: Result<(), (&'static str, String)> = Ok(());
    let mut invalid = Vec::new();
    let mut out = Vec::with_capacity(rules.len());
    // The backendRefs this route resolved: its rules often name the same
    // Service port again, and a reference resolves the same way within
    // one compile.
    #[allow(clippy::type_complexity)]
    let mut resolved_backends: Vec<(
        (Option<&str>, Option<&str>, Option<&str>, &str, Option<i32>),
        Route,
        bool,
    )> = Vec::new();
    let rules = if rules.is_empty() {
        // No rules: one that matches everything, with no backend.
        vec![RuleIn {
            matches: Ok(vec![any_path()]),
            backends: BackendsIn::Http(&[]),
            filters: std::borrow::Cow::Borrowed(&[]),
            timeouts: (None, None),
            name: None,
            session: None,
            retry: None,
        }]
    } else {
        rules
    };
    for (index, mut rule) in rules.into_iter().enumerate() {
        let matches = std::mem::replace(&mut rule.matches, Ok(Vec::new()));
        let matchers = match matches {
            Ok(m) => m,
            Err(e) => {
                invalid.push(format!("rule {index}: {e}"));
                continue;
            }
        };
        // Most rules have neither filters, timeouts nor retry: nothing to
        // read.
        let plain =
            rule.filters.is_empty() && rule.timeouts == (None, None) && rule.retry.is_none();
        let read;
        let spec = if plain {
            &NO_FILTERS
        } else {
            let spec = filter_spec(&rule.filters, rule.timeouts, route.grpc).and_then(|mut s| {
                s.retry = super::retry::policy(rule.retry, s.request_timeout)?;
                Ok(s)
            });
            match spec {
                Ok(s) => {
                    read = s;
                    &read
                }
                Err(e) => {
                    invalid.push(format!("rule {index}: {e}"));
                    continue;
                }
            }
        };
        let mut mirrors = Vec::new();
        for (ns, name, port, per_million) in &spec.mirrors {
            let ns = ns.as_deref().unwrap_or(&route.id.namespace);
            let permitted = ns == route.id.namespace
                || attachment::granted(store, route.kind, &route.id.namespace, "Service", ns, name);
            if let (true, Some((ns, name))) = (permitted, service_key(store, ns, name)) {
                mirrors.push(Mirror {
                    upstream: resolver.service(ns, name, *port),
                    per_million: *per_million,
                });
            }
        }
        // The rule's traffic policy, once for all its backends.
        let mut rule_traffic =
            attached.rule_traffic(rule.name, info.policy.as_deref(), spec.cors.as_ref());
        let mut persistence = None;
        if let Some(session) = rule.session {
            match session::affinity(session, route.id, index) {
                Ok(affinity) => {
                    persistence = Some(affinity.cookie.as_str().into());
                    rule_traffic = Some(edited(rule_traffic.as_deref(), info, |t| {
                        t.affinity = Some(affinity)
                    }));
                }
                Err(e) => {
                    invalid.push(format!("rule {index}: {e}"));
                    continue;
                }
            }
        }
        if let Some((filter, terms)) = &spec.external_auth {
            let (auth, problem) =
                ext_auth::external_auth(store, resolver, route, filter, auth_owner);
            if let (Some(problem), Ok(())) = (problem, &resolved) {
                resolved = Err(problem);
            }
            rule_traffic = Some(edited(rule_traffic.as_deref(), info, |t| {
                t.auth = Some(Arc::new(auth));
                t.auth_terms = Some(terms.clone());
            }));
        }
        let action = if let Some(redirect) = spec.redirect.clone() {
            Action::Redirect(redirect)
        } else {
            let mut backends = Vec::with_capacity(rule.backends.len());
            let mut total = 0u64;
            for b in rule.backends.iter() {
                let b = &b;
                let weight = b.weight.unwrap_or(1).max(0) as u64;
                let mut h2c = route.grpc;
                let key = (b.group, b.kind, b.namespace, b.name, b.port);
                let found = match resolved_backends.iter().find(|(k, ..)| *k == key) {
                    Some((_, r, app_h2c)) => Ok((r.clone(), *app_h2c)),
                    None => backend(store, resolver, route, b, info).inspect(|(r, app_h2c)| {
                        resolved_backends.push((key, r.clone(), *app_h2c));
                    }),
                };
                let mut target = match found {
                    Ok((r, app_h2c)) => {
                        h2c |= app_h2c;
                        Ok(r)
                    }
                    Err(why) => {
                        if resolved.is_ok() {
                            resolved = Err(why);
                        }
                        Err(())
                    }
                };
                if let (Some(traffic), Ok(r)) = (&rule_traffic, &mut target) {
                    *r = with_traffic(r, traffic);
                }
                let own = if b.filters.is_empty() {
                    BackendFilters::None
                } else {
                    match filter_spec(&b.filters, (None, None), route.grpc) {
                        Ok(s) => {
                            if let (Some(cors), Ok(r)) = (&s.cors, &mut target) {
                                *r = with_traffic(r, &with_cors(r.policy.as_deref(), cors));
                            }
                            if let (Some((filter, terms)), Ok(r)) = (&s.external_auth, &mut target)
                            {
                                let (auth, problem) = ext_auth::external_auth(
                                    store, resolver, route, filter, auth_owner,
                                );
                                if let (Some(problem), Ok(())) = (problem, &resolved) {
                                    resolved = Err(problem);
                                }
                                let own = r.policy.as_deref().and_then(|p| p.traffic.as_deref());
                                let traffic = edited(own, info, |t| {
                                    t.auth = Some(Arc::new(auth));
                                    t.auth_terms = Some(terms.clone());
                                });
                                *r = with_traffic(r, &traffic);
                            }
                            backend_filters(&s, &matchers)
                        }
                        Err(e) => {
                            invalid.push(format!("rule {index} backendRef {}: {e}", b.name));
                            // A filter is never skipped (the specification's
                            // MUST): the backend's share is answered 500.
                            target = Err(());
                            BackendFilters::None
                        }
                    }
                };
                total += weight;
                backends.push(Backend {
                    weight,
                    route: target,
                    filters: own,
                    h2c,
                });
            }
            if total == 0 {
                Action::Unroutable
            } else {
                Action::Backends {
                    backends: backends.into_boxed_slice(),
                    total,
                    next: AtomicU64::new(0),
                    persistence,
                }
            }
        };
        let filters = if spec.uses_prefix() || (plain && mirrors.is_empty()) {
            None
        } else {
            let f = merged_filters(spec, None);
            let f = match (f, mirrors.is_empty()) {
                (None, true) => None,
                (f, _) => Some(f.unwrap_or_default()),
            };
            f.map(|mut f| {
                f.mirrors = mirrors.clone();
                Arc::new(f)
            })
        };
        let action = Arc::new(action);
        let targets = matchers.into_iter().enumerate().map(|(m, matcher)| {
            let filters = if spec.uses_prefix() {
                let prefix = match &matcher.path {
                    PathMatch::Prefix(p) => Some(&**p),
                    _ => None,
                };
                let mut f = merged_filters(spec, prefix).unwrap_or_default();
                f.mirrors = mirrors.clone();
                Some(Arc::new(f))
            } else {
                filters.clone()
            };
            Arc::new(Target::new(
                matcher,
                action.clone(),
                info.clone(),
                filters,
                (route_index, index as u32, m as u32),
            ))
        });
        out.extend(targets);
    }
    (out, resolved, invalid)
}
