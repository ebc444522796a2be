//! The policy each route carries: the limits an Ingress's annotations
//! set and its tenant's gate, one shared [`RoutePolicy`] per distinct
//! combination. The Ingress and the Gateway API compiles both take
//! theirs here.

use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use teapot_model::store::FastHashMap;
use teapot_model::tenancy::TenantView;

use crate::compile::fairness::TenantGates;
use crate::compile::routes::RoutePolicy;

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
                    })
                })
            })
            .clone()
    }

    /// The policy of `ingress` and the annotations it could not read (the
    /// webhook refuses those in tenant namespaces; an operator's manifest
    /// can still carry one).
    pub(crate) fn of(
        &mut self,
        ingress: &Ingress,
        tenant: Option<&TenantView<'a>>,
    ) -> (Option<Arc<RoutePolicy>>, Vec<String>) {
        use teapot_api::annotations::{self, AnnotationValue, ObjectKind};
        const MAX_BODY: &str = "teapot.dev/max-body-size";
        let mut problems = Vec::new();
        let value = ingress
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MAX_BODY));
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
        let policy = self
            .cache
            .entry((cluster, max_body_size))
            .or_insert_with(|| {
                let gate = tenant.map(|t| {
                    let limits =
                        teapot_api::tenant::TenantLimits::effective(t.tenant.spec.limits.as_ref());
                    gates.gate(t.cluster, &limits)
                });
                (gate.is_some() || max_body_size.is_some()).then(|| {
                    Arc::new(RoutePolicy {
                        max_body_size,
                        tenant: gate,
                    })
                })
            })
            .clone();
        (policy, problems)
    }
}
