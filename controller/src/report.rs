//! What goes back to the tenant object (Ingress or L4 Service): the LB
//! copy's `status.loadBalancer` as it is, Kubernetes-style conditions in an
//! annotation, and Events. Also the writes both reconcilers share: the
//! finalizer and server-side apply to the LB cluster.

use std::collections::BTreeMap;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use teapot_api::status::reason_of;
use teapot_sync::FIELD_MANAGER;

use crate::{Context, Error};

/// Finalizer on tenant objects the agent has mirrored: the LB copies go
/// before the tenant object does.
pub const FINALIZER: &str = "teapot.dev/agent";
/// Annotation on the tenant object holding Kubernetes-style conditions
/// (JSON list): networking/v1 IngressStatus has no conditions, and one
/// place for both kinds is simpler for users. Outside `teapot.dev/` on
/// purpose: it is never copied to the LB cluster.
pub const CONDITIONS_ANNOTATION: &str = "agent.teapot.dev/conditions";

/// A tenant object the agent reports on.
pub trait Tenant:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
{
}
impl<K> Tenant for K where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug
{
}

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
    pub fn new(type_: &str, ok: bool, reason: &str, message: String) -> Condition {
        Condition {
            type_: type_.into(),
            status: if ok { "True" } else { "False" }.into(),
            reason: reason.into(),
            message,
        }
    }

    /// `Accepted`: the LB cluster took every copy, or refused some (the
    /// webhook's messages).
    pub fn accepted(refusals: &[String]) -> Condition {
        if refusals.is_empty() {
            Condition::new("Accepted", true, "Mirrored", String::new())
        } else {
            Condition::new("Accepted", false, "Refused", refusals.join("; "))
        }
    }

    /// `Programmed`, from the LB copy's `status.loadBalancer`: the fleet
    /// reports problems as `ingress[].ports[].error = teapot.dev/<Reason>`
    /// ([`teapot_api::status`]). `None` until the fleet wrote a status.
    pub fn programmed(lb_status: Option<&Value>) -> Option<Condition> {
        let entries = lb_status?.get("ingress")?.as_array()?;
        if entries.is_empty() {
            return None;
        }
        let mut reasons: Vec<&str> = Vec::new();
        let mut problems = Vec::new();
        for port in entries
            .iter()
            .filter_map(|e| e.get("ports")?.as_array())
            .flatten()
        {
            let Some(error) = port.get("error").and_then(Value::as_str) else {
                continue;
            };
            let Some(reason) = reason_of(error) else {
                continue;
            };
            if !reasons.contains(&reason) {
                reasons.push(reason);
            }
            problems.push(format!(
                "port {}/{}: {error}",
                port.get("port").and_then(Value::as_i64).unwrap_or(0),
                port.get("protocol")
                    .and_then(Value::as_str)
                    .unwrap_or("TCP")
            ));
        }
        Some(match reasons.first() {
            None => Condition::new("Programmed", true, "Programmed", String::new()),
            Some(first) => Condition::new(
                "Programmed",
                false,
                first,
                format!("the LB cluster reports {}", problems.join(", ")),
            ),
        })
    }
}

/// `namespace/name`, for logs and errors.
pub fn key<K: Tenant>(object: &K) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

fn tenant_api<K: Tenant>(ctx: &Context, object: &K) -> Api<K> {
    Api::namespaced(ctx.tenant.clone(), &object.namespace().unwrap_or_default())
}

/// Adds or removes `finalizer` on `object` by a merge patch guarded by its
/// resourceVersion (a conflict just means another reconcile follows).
/// Returns whether anything was written: removing it from an object that
/// is already gone is done. The agent and `teapot capi` both hold their
/// objects this way.
pub async fn patch_finalizer<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
    present: bool,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut finalizers: Vec<String> = object
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    if present {
        finalizers.push(finalizer.into());
    }
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": object.resource_version(),
    }});
    match api
        .patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 && !present => Ok(false),
        Err(e) => Err(e),
    }
}

/// Adds or removes the agent's finalizer on a tenant object.
pub async fn set_finalizer<K: Tenant>(
    object: &K,
    ctx: &Context,
    present: bool,
) -> Result<(), Error> {
    patch_finalizer(&tenant_api(ctx, object), object, FINALIZER, present).await?;
    Ok(())
}

/// Server-side applies `object` to the LB cluster unless the same content
/// was applied last time. A webhook refusal comes back as `Ok(Some(msg))`.
pub async fn apply_lb<K: Tenant>(ctx: &Context, object: &K) -> Result<Option<String>, Error> {
    let name = object.meta().name.clone().unwrap_or_default();
    let kind = K::kind(&()).to_string();
    let cache_key = (kind.clone(), name.clone());
    let value = serde_json::to_value(object)?;
    if ctx.applied.lock().get(&cache_key) == Some(&value) {
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
            ctx.applied.lock().insert(cache_key, value);
            Ok(None)
        }
        // 403: a denying admission webhook; 422: invalid. Both are about
        // the tenant's object and are reported to the tenant.
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => {
            ctx.applied.lock().remove(&cache_key);
            ctx.metrics.refusals.inc();
            Ok(Some(format!("{kind} {name}: {}", e.message)))
        }
        Err(e) => {
            ctx.applied.lock().remove(&cache_key);
            Err(e.into())
        }
    }
}

/// The `status.loadBalancer` of the LB copy `name` of kind `K`, as JSON
/// (Ingress and Service statuses differ in type, not in shape). `None`
/// while the copy or its status does not exist.
pub async fn lb_status<K: Tenant>(ctx: &Context, name: &str) -> Result<Option<Value>, Error> {
    let api: Api<K> = Api::namespaced(ctx.lb.clone(), &ctx.config.lb_namespace);
    let Some(copy) = api.get_opt(name).await? else {
        return Ok(None);
    };
    Ok(status_of(&copy)?.filter(|s| !s.is_null()))
}

fn status_of<K: Tenant>(object: &K) -> Result<Option<Value>, Error> {
    Ok(serde_json::to_value(object)?
        .pointer("/status/loadBalancer")
        .cloned())
}

/// Copies the LB copy's `status.loadBalancer` (assigned hostname, L4
/// address, per-port errors) to the tenant object when it differs, with a
/// `Normal AddressAssigned` Event. Nothing yet on the LB side: the tenant
/// keeps what it shows.
pub async fn copy_status<K: Tenant>(
    ctx: &Context,
    object: &K,
    lb_status: Option<&Value>,
) -> Result<(), Error> {
    let Some(lb_status) = lb_status else {
        return Ok(());
    };
    if status_of(object)?.as_ref() == Some(lb_status) {
        return Ok(());
    }
    let name = object.name_any();
    let patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name, "namespace": object.namespace()},
        "status": {"loadBalancer": lb_status},
    });
    tenant_api(ctx, object)
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    ctx.metrics.tenant_writes.inc();
    let addresses: Vec<&str> = lb_status
        .get("ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| {
            i.get("hostname")
                .or_else(|| i.get("ip"))
                .and_then(Value::as_str)
        })
        .filter(|a| !a.is_empty())
        .collect();
    if !addresses.is_empty() {
        publish(
            ctx,
            object,
            EventType::Normal,
            "AddressAssigned",
            format!("served by the shared fleet at {}", addresses.join(", ")),
        )
        .await;
    }
    Ok(())
}

/// Writes the conditions annotation when it changed, with an Event for
/// each condition that changed: a Warning with its reason when it turned
/// false, `Mirrored` when `Accepted` turned true, `Programmed` when the
/// fleet's problems cleared.
pub async fn report<K: Tenant>(
    ctx: &Context,
    object: &K,
    conditions: Vec<Condition>,
) -> Result<(), Error> {
    let current: Vec<Condition> = object
        .annotations()
        .get(CONDITIONS_ANNOTATION)
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    if current == conditions {
        return Ok(());
    }
    let name = object.name_any();
    let text = serde_json::to_string(&conditions)?;
    let patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name, "namespace": object.namespace(),
                     "annotations": BTreeMap::from([(CONDITIONS_ANNOTATION, text)])},
    });
    tenant_api(ctx, object)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    ctx.metrics.tenant_writes.inc();
    for c in &conditions {
        let before = current.iter().find(|b| b.type_ == c.type_);
        if before == Some(c) {
            continue;
        }
        if c.status != "True" {
            if c.type_ == "Accepted" {
                tracing::warn!(object = %key(object), message = %c.message, "the LB cluster refused a copy");
            }
            publish(
                ctx,
                object,
                EventType::Warning,
                &c.reason,
                c.message.clone(),
            )
            .await;
        } else if c.type_ == "Accepted" {
            publish(
                ctx,
                object,
                EventType::Normal,
                "Mirrored",
                "copied to the LB cluster".into(),
            )
            .await;
        } else if before.is_some() {
            publish(
                ctx,
                object,
                EventType::Normal,
                &c.reason,
                "the LB cluster reports no problem any more".into(),
            )
            .await;
        }
    }
    Ok(())
}

/// Events are best effort: a failure is logged, never fails the reconcile.
pub async fn publish<K: Tenant>(
    ctx: &Context,
    object: &K,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        // Events cap their note at 1 kB.
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &object.object_ref(&())).await {
        tracing::debug!(object = %key(object), error = %e, "cannot publish an Event");
    }
}
