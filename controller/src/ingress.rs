//! The Ingress reconciler: tenant Ingress of class `teapot` -> LB copies,
//! LB status -> tenant status, webhook refusals -> Event and condition.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::json;
use teapot_api::hostname::mirrored_ingress_name;
use teapot_sync::{FIELD_MANAGER, backoff};

use crate::mirror::{self, is_ours};
use crate::{Context, Error, gc, lock};

/// Finalizer on tenant Ingresses the agent has mirrored: the LB copies go
/// before the tenant object does.
pub const FINALIZER: &str = "teapot.dev/agent";
/// Annotation on the tenant Ingress holding Kubernetes-style conditions
/// (JSON list), since networking/v1 IngressStatus has no conditions.
/// Outside `teapot.dev/` on purpose: it is never copied to the LB cluster.
pub const CONDITIONS_ANNOTATION: &str = "agent.teapot.dev/conditions";

/// One condition as the agent reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Condition {
    fn accepted() -> Condition {
        Condition {
            type_: "Accepted".into(),
            status: "True".into(),
            reason: "Mirrored".into(),
            message: String::new(),
        }
    }

    fn refused(message: String) -> Condition {
        Condition {
            type_: "Accepted".into(),
            status: "False".into(),
            reason: "Refused".into(),
            message,
        }
    }
}

/// The tenant Ingress's identity, for logs and errors.
fn key(ingress: &Ingress) -> String {
    format!(
        "{}/{}",
        ingress.namespace().unwrap_or_default(),
        ingress.name_any()
    )
}

/// Reconciles one tenant Ingress.
pub async fn reconcile(ingress: Arc<Ingress>, ctx: Arc<Context>) -> Result<Action, Error> {
    let has_finalizer = ingress.finalizers().iter().any(|f| f == FINALIZER);
    let ours = is_ours(&ingress);
    if ingress.metadata.deletion_timestamp.is_some() || (!ours && has_finalizer) {
        // Deleted, or its class moved away from teapot: same cleanup.
        if has_finalizer {
            cleanup(&ingress, &ctx).await?;
            set_finalizer(&ingress, &ctx, false).await?;
        }
        return Ok(Action::await_change());
    }
    if !ours {
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        // The next reconcile (triggered by this write) does the work, so a
        // copy never exists without the finalizer that removes it.
        set_finalizer(&ingress, &ctx, true).await?;
        return Ok(Action::await_change());
    }
    apply(&ingress, &ctx).await?;
    lock(&ctx.failures).remove(&key(&ingress));
    ctx.metrics
        .reconciles
        .with_label_values(&["ingress", "ok"])
        .inc();
    Ok(Action::requeue(ctx.config.resync))
}

/// Adds or removes the finalizer by merge patch guarded by the object's
/// resourceVersion (a conflict just means another reconcile follows).
async fn set_finalizer(ingress: &Ingress, ctx: &Context, present: bool) -> Result<(), Error> {
    let mut finalizers: Vec<String> = ingress
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if present {
        finalizers.push(FINALIZER.into());
    }
    let api: Api<Ingress> =
        Api::namespaced(ctx.tenant.clone(), &ingress.namespace().unwrap_or_default());
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": ingress.resource_version(),
    }});
    match api
        .patch(
            &ingress.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 && !present => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Server-side applies `object` to the LB cluster unless the same content
/// was applied last time. A webhook refusal comes back as `Ok(Some(msg))`.
async fn apply_lb<K>(ctx: &Context, object: &K) -> Result<Option<String>, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    let kind = K::kind(&()).to_string();
    let cache_key = (kind.clone(), name.clone());
    let value = serde_json::to_value(object)?;
    if lock(&ctx.applied).get(&cache_key) == Some(&value) {
        return Ok(None);
    }
    let api: Api<K> = Api::namespaced(ctx.lb.clone(), &ctx.config.lb_namespace);
    match api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
    {
        Ok(_) => {
            ctx.metrics
                .lb_writes
                .with_label_values(&[kind.as_str()])
                .inc();
            lock(&ctx.applied).insert(cache_key, value);
            Ok(None)
        }
        // 403: a denying admission webhook; 422: invalid. Both are about
        // the tenant's object and are reported to the tenant.
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => {
            lock(&ctx.applied).remove(&cache_key);
            ctx.metrics.refusals.inc();
            Ok(Some(format!("{kind} {name}: {}", e.message)))
        }
        Err(e) => {
            lock(&ctx.applied).remove(&cache_key);
            Err(e.into())
        }
    }
}

async fn apply(ingress: &Ingress, ctx: &Context) -> Result<(), Error> {
    let namespace = ingress.namespace().unwrap_or_default();
    let lb_ns = &ctx.config.lb_namespace;
    let mut refusals = Vec::new();
    let mut problems = Vec::new();
    // Secrets and Services before the Ingress, so what it references exists.
    let secrets: Api<Secret> = Api::namespaced(ctx.tenant.clone(), &namespace);
    for name in mirror::referenced_secrets(ingress) {
        match secrets.get_opt(&name).await? {
            None => problems.push(format!("Secret {namespace}/{name} (spec.tls) not found")),
            Some(secret) => match mirror::lb_secret(&secret, lb_ns) {
                Ok(copy) => refusals.extend(apply_lb(ctx, &copy).await?),
                Err(e) => problems.push(e.to_string()),
            },
        }
    }
    let services: Api<Service> = Api::namespaced(ctx.tenant.clone(), &namespace);
    for name in mirror::referenced_services(ingress) {
        match services.get_opt(&name).await? {
            None => problems.push(format!("Service {namespace}/{name} (backend) not found")),
            Some(service) => {
                refusals.extend(apply_lb(ctx, &mirror::lb_service(&service, lb_ns)).await?)
            }
        }
    }
    let copy = mirror::lb_ingress(ingress, lb_ns)?;
    refusals.extend(apply_lb(ctx, &copy).await?);
    copy_status(ingress, ctx).await?;
    let condition = if refusals.is_empty() {
        Condition::accepted()
    } else {
        Condition::refused(refusals.join("; "))
    };
    let mut conditions = vec![condition];
    if !problems.is_empty() {
        conditions.push(Condition {
            type_: "BackendsResolved".into(),
            status: "False".into(),
            reason: "NotFound".into(),
            message: problems.join("; "),
        });
    }
    report(ingress, ctx, conditions).await
}

/// Copies `status.loadBalancer` of the LB Ingress (the proxy writes the
/// assigned hostname there) to the tenant Ingress, when it differs.
async fn copy_status(ingress: &Ingress, ctx: &Context) -> Result<(), Error> {
    let namespace = ingress.namespace().unwrap_or_default();
    let name = ingress.name_any();
    let lb: Api<Ingress> = Api::namespaced(ctx.lb.clone(), &ctx.config.lb_namespace);
    let Some(copy) = lb
        .get_opt(&mirrored_ingress_name(&namespace, &name))
        .await?
    else {
        return Ok(());
    };
    let Some(lb_status) = copy.status.and_then(|s| s.load_balancer) else {
        return Ok(()); // not yet written by the proxy: keep what is shown
    };
    let current = ingress
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref());
    if current == Some(&lb_status) {
        return Ok(());
    }
    let api: Api<Ingress> = Api::namespaced(ctx.tenant.clone(), &namespace);
    let patch = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"loadBalancer": lb_status},
    });
    api.patch_status(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    ctx.metrics.tenant_writes.inc();
    let hosts: Vec<String> = lb_status
        .ingress
        .iter()
        .flatten()
        .filter_map(|i| i.hostname.clone().or_else(|| i.ip.clone()))
        .collect();
    publish(
        ctx,
        ingress,
        EventType::Normal,
        "AddressAssigned",
        format!("served by the shared fleet at {}", hosts.join(", ")),
    )
    .await;
    Ok(())
}

/// Writes the conditions annotation when it changed, with an Event for
/// each change of the `Accepted` condition.
async fn report(ingress: &Ingress, ctx: &Context, conditions: Vec<Condition>) -> Result<(), Error> {
    let current: Vec<Condition> = ingress
        .annotations()
        .get(CONDITIONS_ANNOTATION)
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    if current == conditions {
        return Ok(());
    }
    let namespace = ingress.namespace().unwrap_or_default();
    let name = ingress.name_any();
    let api: Api<Ingress> = Api::namespaced(ctx.tenant.clone(), &namespace);
    let text = serde_json::to_string(&conditions)?;
    let patch = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": BTreeMap::from([(CONDITIONS_ANNOTATION, text)])},
    });
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    ctx.metrics.tenant_writes.inc();
    let accepted = &conditions[0];
    if current.first() != Some(accepted) {
        if accepted.status == "True" {
            publish(
                ctx,
                ingress,
                EventType::Normal,
                "Mirrored",
                "copied to the LB cluster".into(),
            )
            .await;
        } else {
            tracing::warn!(ingress = %key(ingress), message = %accepted.message, "the LB cluster refused the Ingress");
            publish(
                ctx,
                ingress,
                EventType::Warning,
                "Refused",
                accepted.message.clone(),
            )
            .await;
        }
    }
    if let Some(c) = conditions.get(1) {
        publish(
            ctx,
            ingress,
            EventType::Warning,
            &c.reason,
            c.message.clone(),
        )
        .await;
    }
    Ok(())
}

/// Events are best effort: a failure is logged, never fails the reconcile.
async fn publish(ctx: &Context, ingress: &Ingress, type_: EventType, reason: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.into(),
        // Events cap their note at 1 kB.
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &ingress.object_ref(&())).await {
        tracing::debug!(ingress = %key(ingress), error = %e, "cannot publish an Event");
    }
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
    lock(&ctx.applied).remove(&("Ingress".to_string(), name));
    gc::collect(ctx).await?;
    tracing::info!(ingress = %key(ingress), "LB copies removed");
    Ok(())
}

/// Logs, counts and requeues with exponential backoff (1 s to 5 min).
pub fn error_policy(ingress: Arc<Ingress>, error: &Error, ctx: Arc<Context>) -> Action {
    let failures = {
        let mut f = lock(&ctx.failures);
        let n = f.entry(key(&ingress)).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    ctx.metrics
        .reconciles
        .with_label_values(&["ingress", "error"])
        .inc();
    tracing::warn!(ingress = %key(&ingress), %error, failures, "Ingress reconcile failed; retrying");
    Action::requeue(backoff(failures))
}

/// The tenant Ingresses an LB Ingress event concerns.
pub fn lb_ingress_source(lb: &Ingress) -> Option<kube::runtime::reflector::ObjectRef<Ingress>> {
    let (namespace, name) = mirror::source_of_lb_ingress(&lb.name_any())?;
    Some(kube::runtime::reflector::ObjectRef::new(&name).within(&namespace))
}
