//! The L4 Service reconciler: a tenant Service of `type: LoadBalancer` and
//! `loadBalancerClass: teapot.dev/lb` -> its selector-less LB copy (the sync
//! half mirrors its EndpointSlices, as for Ingress backends); the LB
//! Service's `status.loadBalancer` (the address the fleet allocated, per-port
//! errors) -> the tenant Service's status, so `kubectl get svc` shows
//! EXTERNAL-IP; refusals and `teapot.dev/<Reason>` errors -> conditions and
//! Events.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use teapot_sync::{backoff, source_of};

use crate::mirror::{self, is_l4};
use crate::report::{
    Condition, FINALIZER, apply_lb, copy_status, key, lb_status, report, set_finalizer,
};
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
    let status = lb_status::<Service>(&ctx, &copy.name_any()).await?;
    copy_status(&ctx, service.as_ref(), status.as_ref()).await?;
    let mut conditions = vec![Condition::accepted(&refusals)];
    conditions.extend(Condition::programmed(status.as_ref()));
    report(&ctx, service.as_ref(), conditions).await?;
    ctx.failures
        .clear(&format!("Service {}", key(service.as_ref())));
    ctx.metrics
        .reconciles
        .with_label_values(&["service", "ok"])
        .inc();
    Ok(Action::requeue(ctx.config.resync))
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
