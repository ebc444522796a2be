//! The Ingress reconciler: tenant Ingress of class `teapot` -> LB copies,
//! LB status -> tenant status, webhook refusals -> Event and condition.

use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::Action;
use teapot_api::hostname::mirrored_ingress_name;
use teapot_sync::backoff;

use crate::mirror::{self, is_ours};
pub use crate::report::{CONDITIONS_ANNOTATION, Condition, FINALIZER};
use crate::report::{apply_lb, copy_status, key, lb_status, report, set_finalizer};
use crate::{Context, Error, gc};

/// Reconciles one tenant Ingress.
pub async fn reconcile(ingress: Arc<Ingress>, ctx: Arc<Context>) -> Result<Action, Error> {
    let has_finalizer = ingress.finalizers().iter().any(|f| f == FINALIZER);
    let ours = is_ours(&ingress);
    if ingress.metadata.deletion_timestamp.is_some() || (!ours && has_finalizer) {
        // Deleted, or its class moved away from teapot: same cleanup.
        if has_finalizer {
            cleanup(&ingress, &ctx).await?;
            set_finalizer(ingress.as_ref(), &ctx, false).await?;
        }
        return Ok(Action::await_change());
    }
    if !ours {
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        // The next reconcile (triggered by this write) does the work, so a
        // copy never exists without the finalizer that removes it.
        set_finalizer(ingress.as_ref(), &ctx, true).await?;
        return Ok(Action::await_change());
    }
    apply(&ingress, &ctx).await?;
    ctx.failures.clear(&key(ingress.as_ref()));
    ctx.metrics
        .reconciles
        .with_label_values(&["ingress", "ok"])
        .inc();
    Ok(Action::requeue(ctx.config.resync))
}

async fn apply(ingress: &Ingress, ctx: &Context) -> Result<(), Error> {
    let lb_ns = &ctx.config.lb_namespace;
    let mut refusals = Vec::new();
    let mut problems = Vec::new();
    // Secrets and Services before the Ingress, so what it references exists.
    // From the agent's watches, which trigger this reconcile when one of
    // them changes: no request per reference and reconcile.
    for (ns, name) in mirror::referenced_secrets(ingress) {
        match ctx.watches.secret(&ns, &name) {
            None => problems.push(format!("Secret {ns}/{name} not found")),
            Some(secret) => match mirror::lb_ingress_secret(ingress, &secret, lb_ns) {
                Ok(copy) => refusals.extend(apply_lb(ctx, &copy).await?),
                Err(e) => problems.push(e.to_string()),
            },
        }
    }
    for (ns, name) in crate::headers_mirror::referenced_config_maps(ingress) {
        match ctx.watches.config_map(&ns, &name) {
            None => problems.push(format!("ConfigMap {ns}/{name} (custom-headers) not found")),
            Some(c) => match crate::headers_mirror::lb_config_map(&c, lb_ns) {
                Ok(copy) => refusals.extend(apply_lb(ctx, &copy).await?),
                Err(e) => problems.push(e.to_string()),
            },
        }
    }
    for (ns, name) in mirror::referenced_services(ingress) {
        match ctx.watches.service(&ns, &name) {
            None => problems.push(format!("Service {ns}/{name} not found")),
            Some(service) => {
                refusals.extend(apply_lb(ctx, &mirror::lb_service(&service, lb_ns)).await?)
            }
        }
    }
    let copy = mirror::lb_ingress(ingress, lb_ns)?;
    refusals.extend(apply_lb(ctx, &copy).await?);
    let status = lb_status::<Ingress>(ctx, &copy.name_any()).await?;
    copy_status(ctx, ingress, status.as_ref()).await?;
    let mut conditions = vec![Condition::accepted(&refusals)];
    if !problems.is_empty() {
        conditions.push(Condition::new(
            "BackendsResolved",
            false,
            "NotFound",
            problems.join("; "),
        ));
    }
    conditions.extend(Condition::programmed(status.as_ref()));
    report(ctx, ingress, conditions).await
}

/// Deletes the LB Ingress, then whatever only it referenced.
async fn cleanup(ingress: &Ingress, ctx: &Context) -> Result<(), Error> {
    let name = mirrored_ingress_name(
        &ingress.namespace().unwrap_or_default(),
        &ingress.name_any(),
    );
    let lb: Api<Ingress> = Api::namespaced(ctx.lb.clone(), &ctx.config.lb_namespace);
    match lb.delete(&name, &DeleteParams::default()).await {
        Ok(_) => ctx.metrics.lb_writes.with_label_values(&["Ingress"]).inc(),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    ctx.applied.lock().remove(&("Ingress".to_string(), name));
    gc::collect(ctx).await?;
    tracing::info!(ingress = %key(ingress), "LB copies removed");
    Ok(())
}

/// Logs, counts and requeues with exponential backoff (1 s to 5 min).
pub fn error_policy(ingress: Arc<Ingress>, error: &Error, ctx: Arc<Context>) -> Action {
    let failures = ctx.failures.record(key(ingress.as_ref()));
    ctx.metrics
        .reconciles
        .with_label_values(&["ingress", "error"])
        .inc();
    tracing::warn!(ingress = %key(ingress.as_ref()), %error, failures, "Ingress reconcile failed; retrying");
    Action::requeue(backoff(failures))
}

/// The tenant Ingresses an LB Ingress event concerns.
pub fn lb_ingress_source(lb: &Ingress) -> Option<kube::runtime::reflector::ObjectRef<Ingress>> {
    let (namespace, name) = mirror::source_of_lb_ingress(&lb.name_any())?;
    Some(kube::runtime::reflector::ObjectRef::new(&name).within(&namespace))
}
