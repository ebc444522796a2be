//! The Cluster reconciler: opted-in Cluster -> LB Service and slice ->
//! `controlPlaneEndpoint`, condition and Events; deleted (or opted-out)
//! Cluster -> both removed, finalizer released.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use teapot_controller::report::patch_finalizer;
use teapot_sync::backoff;

use crate::endpoint::{self, ClusterKey, MANAGER};
use crate::objects::{ControlPlaneMachine, control_plane_endpoint, control_plane_selector};
use crate::{Context, Error, FINALIZER, LB_NAMESPACE_ANNOTATION, OPT_IN_ANNOTATION};

/// The condition this controller keeps on Clusters. Prefixed: Cluster API
/// and its providers own the unprefixed names.
pub const CONDITION: &str = "TeapotEndpointReady";

/// Where a Cluster's endpoint stands: its condition's status, reason and
/// message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Standing {
    fn waiting(reason: &'static str, message: String) -> Standing {
        Standing {
            ready: false,
            reason,
            message,
        }
    }
}

/// Whether a Cluster asked for an endpoint.
pub fn opted_in(cluster: &DynamicObject) -> bool {
    cluster
        .annotations()
        .get(OPT_IN_ANNOTATION)
        .map(String::as_str)
        == Some("true")
}

fn key_of(cluster: &DynamicObject) -> ClusterKey {
    ClusterKey::new(cluster.namespace().unwrap_or_default(), cluster.name_any())
}

/// Reconciles one Cluster (every Cluster is watched; only opted-in ones,
/// or ones still carrying the finalizer, are acted on).
pub async fn reconcile(cluster: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key_of(&cluster);
    let has_finalizer = cluster.finalizers().iter().any(|f| f == FINALIZER);
    let result = if cluster.metadata.deletion_timestamp.is_some() || !opted_in(&cluster) {
        if has_finalizer {
            release(&cluster, &key, &ctx).await
        } else {
            Ok(Action::await_change())
        }
    } else {
        serve(&cluster, &key, has_finalizer, &ctx).await
    };
    if result.is_ok() {
        ctx.failures.clear(&key.to_string());
        ctx.metrics.reconciles.with_label_values(&["ok"]).inc();
    }
    result
}

/// Logs, counts and requeues with exponential backoff (1 s to 5 min).
pub fn error_policy(cluster: Arc<DynamicObject>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&cluster);
    let failures = ctx.failures.record(key.to_string());
    ctx.metrics.reconciles.with_label_values(&["error"]).inc();
    tracing::warn!(cluster = %key, %error, failures, "Cluster reconcile failed; retrying");
    Action::requeue(backoff(failures))
}

async fn serve(
    cluster: &DynamicObject,
    key: &ClusterKey,
    has_finalizer: bool,
    ctx: &Context,
) -> Result<Action, Error> {
    let lb_namespace = match target_namespace(cluster, ctx) {
        Ok(ns) => ns,
        Err(standing) => {
            report(cluster, ctx, standing).await?;
            return Ok(Action::await_change());
        }
    };
    if !has_finalizer {
        // No LB object exists without the finalizer that removes it.
        set_finalizer(cluster, ctx, true).await?;
    }
    // A namespace the annotation no longer names keeps nothing.
    for other in ctx
        .config
        .lb_namespaces
        .iter()
        .filter(|ns| **ns != lb_namespace)
    {
        delete_lb_objects(ctx, key, other).await?;
    }
    let service = apply_lb(
        ctx,
        &lb_namespace,
        &endpoint::service(key, &lb_namespace, ctx.config.endpoint_port),
    )
    .await?;
    let machines = control_plane_machines(cluster, ctx).await?;
    let slice = endpoint::slice(key, &lb_namespace, ctx.config.apiserver_port, &machines);
    let serving = slice
        .endpoints
        .iter()
        .flatten()
        .filter(|e| is_ready(e))
        .count();
    apply_lb(ctx, &lb_namespace, &slice).await?;

    let port = i64::from(ctx.config.endpoint_port);
    let standing = match allocated_address(&service) {
        None => Standing::waiting(
            "WaitingForAddress",
            format!(
                "Service {lb_namespace}/{} has no address from the fleet yet{}",
                key.lb_name(),
                refusal(&service)
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
        ),
        Some(address) => match control_plane_endpoint(cluster) {
            Some((host, p)) if host != address || p != port => Standing::waiting(
                "EndpointConflict",
                format!(
                    "spec.controlPlaneEndpoint is {host}:{p} but the fleet allocated {address}:{port}; Cluster API does not allow changing it: remove the {OPT_IN_ANNOTATION} annotation or recreate the Cluster"
                ),
            ),
            found => {
                if found.is_none() {
                    set_endpoint(cluster, ctx, &address, port).await?;
                }
                if serving == 0 {
                    Standing::waiting(
                        "WaitingForMachines",
                        format!(
                            "controlPlaneEndpoint {address}:{port}; no control-plane Machine with an InternalIP is ready yet"
                        ),
                    )
                } else {
                    Standing {
                        ready: true,
                        reason: "Serving",
                        message: format!(
                            "controlPlaneEndpoint {address}:{port} -> {serving} of {} control-plane Machines",
                            machines.len()
                        ),
                    }
                }
            }
        },
    };
    report(cluster, ctx, standing).await?;
    Ok(Action::requeue(ctx.config.resync))
}

/// Deleting (or opted out): while Cluster API still tears the control
/// plane down the endpoint keeps serving what is left (its drains go
/// through it); then the Service (its address back to the pool) and the
/// slice go, then the finalizer.
async fn release(
    cluster: &DynamicObject,
    key: &ClusterKey,
    ctx: &Context,
) -> Result<Action, Error> {
    if cluster.metadata.deletion_timestamp.is_some() {
        let machines = control_plane_machines(cluster, ctx).await?;
        if !machines.is_empty() {
            if let Ok(lb_namespace) = target_namespace(cluster, ctx) {
                let slice =
                    endpoint::slice(key, &lb_namespace, ctx.config.apiserver_port, &machines);
                apply_lb(ctx, &lb_namespace, &slice).await?;
            }
            let standing = Standing::waiting(
                "Deleting",
                format!(
                    "the endpoint stays until the control plane is gone ({} Machines left)",
                    machines.len()
                ),
            );
            report(cluster, ctx, standing).await?;
            return Ok(Action::await_change());
        }
    }
    for ns in &ctx.config.lb_namespaces {
        delete_lb_objects(ctx, key, ns).await?;
    }
    set_finalizer(cluster, ctx, false).await?;
    publish(
        cluster,
        ctx,
        EventType::Normal,
        "EndpointReleased",
        format!("Service {} deleted; its address is free", key.lb_name()),
    )
    .await;
    tracing::info!(cluster = %key, "control-plane endpoint released");
    Ok(Action::await_change())
}

/// The LB namespace a Cluster's annotation names, when allowed.
fn target_namespace(cluster: &DynamicObject, ctx: &Context) -> Result<String, Standing> {
    let allowed = &ctx.config.lb_namespaces;
    match cluster.annotations().get(LB_NAMESPACE_ANNOTATION) {
        None => Ok(allowed.first().cloned().unwrap_or_default()),
        Some(ns) if allowed.contains(ns) => Ok(ns.clone()),
        Some(ns) => Err(Standing::waiting(
            "NamespaceNotAllowed",
            format!(
                "{LB_NAMESPACE_ANNOTATION} names {ns:?}; this controller writes only to {}",
                allowed.join(", ")
            ),
        )),
    }
}

async fn control_plane_machines(
    cluster: &DynamicObject,
    ctx: &Context,
) -> Result<Vec<ControlPlaneMachine>, Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.config.management.clone(),
        &cluster.namespace().unwrap_or_default(),
        &ctx.machines,
    );
    let list = api
        .list(&ListParams::default().labels(&control_plane_selector(&cluster.name_any())))
        .await?;
    Ok(list.items.iter().map(ControlPlaneMachine::of).collect())
}

fn is_ready(endpoint: &k8s_openapi::api::discovery::v1::Endpoint) -> bool {
    endpoint
        .conditions
        .as_ref()
        .and_then(|c| c.ready)
        .unwrap_or(true)
}

/// `status.loadBalancer.ingress[0].ip` of the LB Service.
fn allocated_address(service: &Service) -> Option<String> {
    service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

/// The fleet's reason for not allocating (its `Allocated=False`
/// condition on the Service), for the Cluster's condition.
fn refusal(service: &Service) -> Option<String> {
    let conditions = service.status.as_ref()?.conditions.as_ref()?;
    let allocated = conditions
        .iter()
        .find(|c| c.type_ == "Allocated" && c.status == "False")?;
    Some(format!("{}: {}", allocated.reason, allocated.message))
}

/// Server-side applies an LB object; returns it as stored.
async fn apply_lb<K>(ctx: &Context, namespace: &str, object: &K) -> Result<K, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(ctx.config.lb.clone(), namespace);
    let stored = api
        .patch(
            &object.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(object),
        )
        .await?;
    ctx.metrics
        .lb_writes
        .with_label_values(&[K::kind(&()).as_ref()])
        .inc();
    Ok(stored)
}

/// Deletes a Cluster's slice, then its Service, in one namespace (absent
/// is fine). The slice first: without it the listener has nothing to
/// send to before it closes.
async fn delete_lb_objects(ctx: &Context, key: &ClusterKey, namespace: &str) -> Result<(), Error> {
    let name = key.lb_name();
    let slices: Api<EndpointSlice> = Api::namespaced(ctx.config.lb.clone(), namespace);
    let services: Api<Service> = Api::namespaced(ctx.config.lb.clone(), namespace);
    for (kind, result) in [
        (
            "EndpointSlice",
            slices
                .delete(&name, &DeleteParams::default())
                .await
                .map(drop),
        ),
        (
            "Service",
            services
                .delete(&name, &DeleteParams::default())
                .await
                .map(drop),
        ),
    ] {
        match result {
            Ok(()) => ctx.metrics.lb_writes.with_label_values(&[kind]).inc(),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn cluster_api(cluster: &DynamicObject, ctx: &Context) -> Api<DynamicObject> {
    Api::namespaced_with(
        ctx.config.management.clone(),
        &cluster.namespace().unwrap_or_default(),
        &ctx.clusters,
    )
}

/// Adds or removes the finalizer on the Cluster.
async fn set_finalizer(cluster: &DynamicObject, ctx: &Context, present: bool) -> Result<(), Error> {
    let api = cluster_api(cluster, ctx);
    if patch_finalizer(&api, cluster, FINALIZER, present).await? {
        ctx.metrics.cluster_writes.inc();
    }
    Ok(())
}

/// Writes `spec.controlPlaneEndpoint`. Only ever into an empty one:
/// Cluster API refuses to change it once set.
async fn set_endpoint(
    cluster: &DynamicObject,
    ctx: &Context,
    address: &str,
    port: i64,
) -> Result<(), Error> {
    let patch = json!({"spec": {"controlPlaneEndpoint": {"host": address, "port": port}}});
    cluster_api(cluster, ctx)
        .patch(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    ctx.metrics.cluster_writes.inc();
    tracing::info!(cluster = %key_of(cluster), %address, port, "controlPlaneEndpoint set");
    publish(
        cluster,
        ctx,
        EventType::Normal,
        "ControlPlaneEndpointSet",
        format!("controlPlaneEndpoint {address}:{port} on the teapot fleet"),
    )
    .await;
    Ok(())
}

/// Our condition as it stands on the Cluster.
fn current_condition<'a>(cluster: &'a DynamicObject, ctx: &Context) -> Option<&'a Value> {
    let mut status = cluster.data.get("status")?;
    for field in ctx.config.version.conditions_path() {
        status = status.get(*field)?;
    }
    status
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(CONDITION))
}

/// Writes the condition when it changed (server-side apply on `/status`:
/// the conditions list merges by type, so Cluster API's are untouched) and
/// publishes an Event when its reason changed.
async fn report(cluster: &DynamicObject, ctx: &Context, standing: Standing) -> Result<(), Error> {
    let status = if standing.ready { "True" } else { "False" };
    let current = current_condition(cluster, ctx);
    let field = |name: &str| current.and_then(|c| c.get(name)).and_then(Value::as_str);
    if field("status") == Some(status)
        && field("reason") == Some(standing.reason)
        && field("message").unwrap_or("") == standing.message
    {
        return Ok(());
    }
    let transition = match field("lastTransitionTime") {
        Some(t) if field("status") == Some(status) => t.to_string(),
        _ => Timestamp::now().to_string(),
    };
    let condition = json!({
        "type": CONDITION,
        "status": status,
        "reason": standing.reason,
        "message": standing.message,
        "lastTransitionTime": transition,
        "observedGeneration": cluster.metadata.generation,
    });
    let mut body = json!([condition]);
    for field in ctx.config.version.conditions_path().iter().rev() {
        body = json!({ *field: body });
    }
    let patch = json!({
        "apiVersion": ctx.config.version.api_version(),
        "kind": "Cluster",
        "metadata": {"name": cluster.name_any(), "namespace": cluster.namespace()},
        "status": body,
    });
    cluster_api(cluster, ctx)
        .patch_status(
            &cluster.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    ctx.metrics.cluster_writes.inc();
    if field("reason") != Some(standing.reason) {
        let type_ = match standing.reason {
            "EndpointConflict" | "NamespaceNotAllowed" => EventType::Warning,
            _ => EventType::Normal,
        };
        publish(cluster, ctx, type_, standing.reason, standing.message).await;
    }
    Ok(())
}

/// Events are best effort: a lost one must not fail the reconcile.
async fn publish(
    cluster: &DynamicObject,
    ctx: &Context,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "ControlPlaneEndpoint".into(),
        secondary: None,
    };
    let reference = cluster.object_ref(&ctx.clusters);
    if let Err(e) = ctx.recorder.publish(&event, &reference).await {
        tracing::warn!(cluster = %key_of(cluster), error = %e, "Event not published");
    }
}
