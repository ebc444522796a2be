//! Canary Ingresses (`nginx.ingress.kubernetes.io/canary`): their rules
//! read once, then added to the same rule of the main Ingress.

use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use teapot_api::{HostPattern, PathKind};
use teapot_model::store::FastHashMap;

use crate::compile::routes::{Route, RoutePolicy, RouteTable};
use crate::compile::snapshot::{Condition, IngressReport};
use crate::compile::traffic::{Canary, CanaryRules, NginxAnnotations};

/// The rules of a canary Ingress (`canary: "true"`), read once.
pub(super) fn canary_rules(
    ingress: &Ingress,
    problems: &mut Vec<String>,
) -> Option<Arc<CanaryRules>> {
    let annotations = ingress.metadata.annotations.as_ref();
    if annotations.and_then(|a| a.get(CANARY)).map(String::as_str) != Some("true") {
        return None;
    }
    // Its other annotations were read (and reported) with its policy.
    let nginx = NginxAnnotations::read(annotations, &mut Vec::new());
    Some(Arc::new(nginx.canary_rules(problems)))
}

pub(super) const CANARY: &str = "nginx.ingress.kubernetes.io/canary";

/// One rule of a canary Ingress, to add to the same rule of another.
pub(super) struct CanaryRule {
    pub(super) host: Option<HostPattern>,
    pub(super) kind: PathKind,
    pub(super) path: String,
    pub(super) canary: Canary,
    /// The tenant of the canary Ingress (`None`: an operator namespace).
    pub(super) tenant: Option<String>,
    /// The canary Ingress, as an index into the reports.
    pub(super) report: usize,
}

/// Each canary rule onto the route of the same host and path, when that
/// route's Ingress is of the same tenant (operator namespaces count as
/// one) and has no canary yet (ingress-nginx serves one per route); the
/// canary Ingress's status says which of its rules are served.
pub(super) fn add_canaries(
    routes: &mut RouteTable,
    canaries: Vec<CanaryRule>,
    tenancy: &teapot_model::tenancy::Tenancy<'_>,
    reports: &mut [IngressReport],
) {
    let mut problems: FastHashMap<usize, Vec<String>> = FastHashMap::default();
    for rule in canaries {
        let CanaryRule {
            host,
            kind,
            path,
            canary,
            tenant,
            report,
        } = rule;
        let label = format!(
            "{} {path}",
            host.as_ref().map_or("*".to_string(), |h| h.to_string())
        );
        let route = match routes.rule_mut(host.as_ref(), kind, &path, false) {
            Some(route) => Some(route),
            None => routes.rule_mut(host.as_ref(), kind, &path, true),
        };
        let same_tenant = |route: &Route| {
            let namespace = route.ingress.split_once('/').map_or("", |(ns, _)| ns);
            tenancy.get(namespace).map(|t| t.cluster) == tenant.as_deref()
        };
        let why = match route {
            None => Some(format!("no Ingress has the rule {label}")),
            Some(route) if !same_tenant(route) => Some(format!(
                "the rule {label} belongs to another tenant's Ingress {}",
                route.ingress
            )),
            Some(route) if route.traffic().is_some_and(|t| t.canary.is_some()) => Some(format!(
                "the rule {label} of {} has a canary already",
                route.ingress
            )),
            Some(route) => {
                let base = route.policy.as_deref();
                let mut traffic = base
                    .and_then(|p| p.traffic.as_deref())
                    .cloned()
                    .unwrap_or_default();
                traffic.canary = Some(canary);
                route.policy = Some(Arc::new(RoutePolicy {
                    max_body_size: base.and_then(|p| p.max_body_size),
                    tenant: base.and_then(|p| p.tenant.clone()),
                    traffic: Some(Arc::new(traffic)),
                }));
                None
            }
        };
        let entry = problems.entry(report).or_default();
        entry.extend(why);
    }
    for (report, problems) in problems {
        reports[report].conditions.push(Condition::unless_problems(
            "CanaryServed",
            &problems,
            "CanaryServed",
            "NoMainRoute",
        ));
    }
}
