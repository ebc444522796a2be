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

use crate::compile::fairness::TenantGates;
use crate::compile::routes::RoutePolicy;
use crate::compile::traffic::NginxAnnotations;
use crate::plane::policy::rate::{self, RateTable};

/// The per-Ingress limits its routes carry, one shared [`RoutePolicy`]
/// per distinct (tenant, body limit).
pub(crate) struct Policies<'a> {
    gates: &'a TenantGates,
    cache: FastHashMap<PolicyKey<'a>, Option<Arc<RoutePolicy>>>,
}

/// (tenant cluster, `teapot.dev/max-body-size`).
pub(crate) type PolicyKey<'a> = (Option<&'a str>, Option<u64>);

impl<'a> Policies<'a> {
    pub(crate) fn new(gates: &'a TenantGates) -> Policies<'a> {
        Policies {
            gates,
            cache: FastHashMap::default(),
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

    /// The policy of `ingress` and the annotations it could not read or
    /// does not serve (the webhook refuses those in tenant namespaces; an
    /// operator's manifest can still carry one, and is told).
    pub(crate) fn of(
        &mut self,
        ingress: &Ingress,
        tenant: Option<&TenantView<'a>>,
    ) -> (Option<Arc<RoutePolicy>>, Vec<String>) {
        use teapot_api::annotations::{self, AnnotationValue, ObjectKind};
        const MAX_BODY: &str = "teapot.dev/max-body-size";
        let mut problems = Vec::new();
        let all = ingress.metadata.annotations.as_ref();
        let value = all.and_then(|a| a.get(MAX_BODY));
        let max_body_size =
            value.and_then(
                |v| match annotations::parse(ObjectKind::Ingress, MAX_BODY, v) {
                    Ok(AnnotationValue::Size(n)) => Some(n),
                    Ok(_) => None,
                    Err(e) => {
                        problems.push(format!("{MAX_BODY}: {e}; the operator maximum applies"));
                        None
                    }
                },
            );
        let cluster = tenant.map(|t| t.cluster);
        let gates = self.gates;
        let limits = tenant
            .map(|t| teapot_api::tenant::TenantLimits::effective(t.tenant.spec.limits.as_ref()));
        let nginx = NginxAnnotations::read(all, &mut problems);
        let table = || match (cluster, &limits) {
            (Some(cluster), Some(limits)) => gates
                .rate_tables
                .table(cluster, RateTable::slots_for(limits.max_connections)),
            _ => gates.rate_tables.table("", rate::OPERATOR_SLOTS),
        };
        // Most Ingresses carry no ingress-nginx annotation: no name made.
        let traffic = (!nginx.is_empty())
            .then(|| {
                let meta = &ingress.metadata;
                let name = format!(
                    "{}/{}",
                    meta.namespace.as_deref().unwrap_or(""),
                    meta.name.as_deref().unwrap_or("")
                );
                nginx.policy(&name, table, &mut problems)
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
