//! The L4 Service reconciler: a tenant Service of `type: LoadBalancer` and
//! `loadBalancerClass: teapot.dev/lb` -> its selector-less LB copy (the sync
//! half mirrors its EndpointSlices, as for Ingress backends); the LB
//! Service's `status.loadBalancer` (the address the fleet allocated, per-port
//! errors) -> the tenant Service's status, so `kubectl get svc` shows
//! EXTERNAL-IP; refusals and `teapot.dev/<Reason>` errors -> conditions and
//! Events. A Service with source ranges gets `SourceRangesEnforced`, True
//! only once the fleet reports them enforced on its copy.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use teapot_sync::{backoff, source_of};

use crate::mirror::{self, is_l4};
use crate::report::{Condition, FINALIZER, apply_lb, copy_status, key, report, set_finalizer};
use crate::{Context, Error, gc};

/// Reconciles one tenant Service (every Service is watched; only L4 ones
/// of teapot's class, or ones still carrying the finalizer, are acted on).
pub async fn reconcile(service: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    let has_finalizer = service.finalizers().iter().any(|f| f == FINALIZER);
    let ours = is_l4(&service);
    if service.metadata.deletion_timestamp.is_some() || (!ours && has_finalizer) {
        // Deleted, or no longer teapot's L4 Service: the GC removes the copy
        // unless an Ingress still routes to it (the Ingress reconciler then
        // rewrites it as ClusterIP), then the finalizer goes.
        if has_finalizer {
            gc::collect(&ctx).await?;
            set_finalizer(service.as_ref(), &ctx, false).await?;
            tracing::info!(service = %key(service.as_ref()), "L4 copy released");
        }
        return Ok(Action::await_change());
    }
    if !ours {
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        // As for Ingresses: no copy exists without the finalizer that
        // removes it; the write triggers the next reconcile.
        set_finalizer(service.as_ref(), &ctx, true).await?;
        return Ok(Action::await_change());
    }
    let copy = mirror::lb_service(&service, &ctx.config.lb_namespace);
    let refusals: Vec<String> = apply_lb(&ctx, &copy).await?.into_iter().collect();
    // One read of the copy: its `status.loadBalancer` and the fleet's
    // conditions on it.
    let api: Api<Service> = Api::namespaced(ctx.lb.clone(), &ctx.config.lb_namespace);
    let on_lb = api.get_opt(&copy.name_any()).await?;
    let on_lb = on_lb.map(serde_json::to_value).transpose()?;
    let status = on_lb
        .as_ref()
        .and_then(|c| c.pointer("/status/loadBalancer"))
        .filter(|s| !s.is_null());
    copy_status(&ctx, service.as_ref(), status).await?;
    let mut conditions = vec![Condition::accepted(&refusals)];
    conditions.extend(Condition::programmed(status));
    conditions.extend(source_ranges_enforced(&copy, on_lb.as_ref()));
    report(&ctx, service.as_ref(), conditions).await?;
    ctx.failures
        .clear(&format!("Service {}", key(service.as_ref())));
    ctx.metrics
        .reconciles
        .with_label_values(&["service", "ok"])
        .inc();
    Ok(Action::requeue(ctx.config.resync))
}

/// The condition type, as the fleet writes it on the LB copy.
pub const SOURCE_RANGES_ENFORCED: &str = "SourceRangesEnforced";

/// `SourceRangesEnforced` for a Service with source ranges: the fleet's
/// own condition on the copy when it reports one for the ranges the copy
/// carries now, else False. A restriction is shown as in force only once
/// the fleet says so, so a fleet that does not read the field (an older
/// version), or has not caught up with a changed list, is visible to the
/// Service's owner rather than silently open.
pub fn source_ranges_enforced(copy: &Service, on_lb: Option<&Value>) -> Option<Condition> {
    let wanted = copy.spec.as_ref()?.load_balancer_source_ranges.as_ref()?;
    if wanted.is_empty() {
        return None;
    }
    let same_spec = on_lb
        .and_then(|c| c.pointer("/spec/loadBalancerSourceRanges"))
        .and_then(Value::as_array)
        .is_some_and(|have| {
            have.iter()
                .map(Value::as_str)
                .eq(wanted.iter().map(|w| Some(w.as_str())))
        });
    let reported = on_lb
        .and_then(|c| c.pointer("/status/conditions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(SOURCE_RANGES_ENFORCED));
    let field = |c: &Value, k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Some(match reported {
        Some(c) if same_spec => Condition {
            type_: SOURCE_RANGES_ENFORCED.into(),
            status: field(c, "status"),
            reason: field(c, "reason"),
            message: field(c, "message"),
        },
        _ => Condition::new(
            SOURCE_RANGES_ENFORCED,
            false,
            "NotConfirmed",
            format!(
                "the LB cluster has not reported {} enforced yet",
                wanted.join(", ")
            ),
        ),
    })
}

/// Logs, counts and requeues with exponential backoff (1 s to 5 min).
pub fn error_policy(service: Arc<Service>, error: &Error, ctx: Arc<Context>) -> Action {
    let failures = ctx
        .failures
        .record(format!("Service {}", key(service.as_ref())));
    ctx.metrics
        .reconciles
        .with_label_values(&["service", "error"])
        .inc();
    tracing::warn!(service = %key(service.as_ref()), %error, failures, "Service reconcile failed; retrying");
    Action::requeue(backoff(failures))
}

/// The tenant Service an LB Service event concerns (its status changed).
pub fn lb_service_source(lb: &Service) -> Option<ObjectRef<Service>> {
    let (namespace, name) = source_of(&lb.metadata)?;
    Some(ObjectRef::new(&name).within(&namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror::lb_service;
    use teapot_api::annotations::{IP_FAMILIES, IP_FAMILY_POLICY};

    fn l4(
        families: Option<&[&str]>,
        policy: Option<&str>,
        annotations: &[(&str, &str)],
    ) -> Service {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "db", "namespace": "shop",
                         "annotations": annotations.iter().cloned().collect::<std::collections::BTreeMap<_, _>>()},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "teapot.dev/lb",
                     "ipFamilies": families, "ipFamilyPolicy": policy,
                     "ports": [{"port": 5432}]},
        }))
        .unwrap()
    }

    #[test]
    fn the_copy_carries_the_families_as_annotations_not_in_its_spec() {
        let copy = lb_service(
            &l4(Some(&["IPv6", "IPv4"]), Some("RequireDualStack"), &[]),
            "tenant-acme",
        );
        let a = copy.metadata.annotations.as_ref().unwrap();
        assert_eq!(a[IP_FAMILIES], "IPv6,IPv4");
        assert_eq!(a[IP_FAMILY_POLICY], "RequireDualStack");
        let spec = copy.spec.unwrap();
        assert_eq!(spec.ip_families, None);
        assert_eq!(spec.ip_family_policy, None);

        // The spec wins over the tenant's own annotation; without the
        // field, the annotation travels as written.
        let copy = lb_service(
            &l4(
                Some(&["IPv4"]),
                None,
                &[(IP_FAMILIES, "IPv6"), (IP_FAMILY_POLICY, "PreferDualStack")],
            ),
            "tenant-acme",
        );
        let a = copy.metadata.annotations.as_ref().unwrap();
        assert_eq!(a[IP_FAMILIES], "IPv4");
        assert_eq!(a[IP_FAMILY_POLICY], "PreferDualStack");

        // Not an L4 Service (an Ingress backend): its copy says nothing.
        let mut plain = l4(Some(&["IPv4", "IPv6"]), Some("PreferDualStack"), &[]);
        plain.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        let copy = lb_service(&plain, "tenant-acme");
        assert!(
            copy.metadata
                .annotations
                .as_ref()
                .is_none_or(|a| !a.contains_key(IP_FAMILIES)),
            "{:?}",
            copy.metadata.annotations
        );
    }
}
