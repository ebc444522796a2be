//! The Gateway API reconcilers: tenant Gateways of class
//! `teapot` and the HTTPRoute, GRPCRoute, TLSRoute, TCPRoute and UDPRoute
//! objects attached to them -> their LB copies ([`crate::gateway_mirror`]
//! builds them) with the Services and TLS Secrets they reference (the sync
//! half mirrors the Services' EndpointSlices, as for Ingress backends);
//! the copies' status -> the tenant objects' status (Gateway addresses,
//! conditions and listeners; route parent status); refusals -> the
//! conditions annotation and Events, as for Ingresses.
//!
//! BackendTLSPolicies are copied with the ConfigMaps (`ca.crt`) they name,
//! every one of the tenant's: a policy only acts where a mirrored route's
//! backend is its Service, and the webhook judges each copy.
//!
//! ListenerSets are copied onto the copy of the tenant's Gateway that
//! allows them, or, when the tenant cluster has no Gateway where one
//! points, onto the LB cluster's Gateway it names (the operator's shared
//! Gateway, whose `allowedListeners` decides there), with their listeners'
//! Secrets; routes attach to them by a parentRef of kind ListenerSet.
//!
//! ReferenceGrants are read, not copied: a reference across tenant
//! namespaces is mirrored only when a ReferenceGrant in the tenant cluster
//! allows it, and on the LB side every copy shares one namespace.
//!
//! The Gateway API half runs when the tenant cluster serves the Gateway API
//! ([`probe`], at start): without its CRDs the agent syncs Ingresses and
//! Services only, and says so once.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use teapot_api::gateway_api::{
    BackendTlsPolicy, Gateway, GatewayClass, GrpcRoute, HttpRoute, ListenerSet, ReferenceGrant,
    TcpRoute, TlsRoute, UdpRoute,
};
use teapot_api::hostname::mirrored_ingress_name;
use teapot_api::route_policy::RouteTrafficPolicy;
use teapot_sync::stopping::until_stopped;
use teapot_sync::{AGENT, APP_MANAGED_BY_LABEL, Listed, Shared, backoff};
use tokio::sync::watch;

use crate::gateway_mirror::{
    self as gm, CrossRef, Ref, gateway_needs, granted, is_ours, lb_gateway, lb_route, route_needs,
    route_parents,
};
use crate::report::{Condition, FINALIZER, Tenant, apply_lb, key, report, set_finalizer};
use crate::{Context, Error, gc, mirror};

/// Whether the tenant cluster serves the Gateway API (its GatewayClass
/// resource answers a list); a 404 means the CRDs are not installed.
pub async fn probe(client: &Client) -> Result<bool, Error> {
    let api: Api<GatewayClass> = Api::all(client.clone());
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether the tenant cluster serves ListenerSets (Gateway API v1.5 and
/// later): without the kind the agent mirrors none, and watches none.
pub async fn probe_listener_sets(client: &Client) -> Result<bool, Error> {
    let api: Api<ListenerSet> = Api::all(client.clone());
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A route kind the agent mirrors.
pub trait Route: Tenant + Send + Sync + 'static {}
impl Route for HttpRoute {}
impl Route for GrpcRoute {}
impl Route for TlsRoute {}
impl Route for TcpRoute {}
impl Route for UdpRoute {}

/// Checks each cross-namespace reference against the ReferenceGrants of
/// its target namespace in the tenant cluster: the refused ones, and a
/// problem for each.
async fn check_grants(
    ctx: &Context,
    cross: &[CrossRef],
) -> Result<(Vec<CrossRef>, Vec<String>), Error> {
    let mut refused = Vec::new();
    let mut problems = Vec::new();
    for c in cross {
        let grants: Api<ReferenceGrant> = Api::namespaced(ctx.tenant.clone(), &c.to.0);
        let list = grants.list(&ListParams::default()).await?;
        let values = list
            .items
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<_>, _>>()?;
        if !granted(&values, c) {
            problems.push(format!(
                "{} {}/{} is in another namespace and no ReferenceGrant there allows it (RefNotPermitted)",
                c.to_kind, c.to.0, c.to.1
            ));
            refused.push(c.clone());
        }
    }
    Ok((refused, problems))
}

fn is_refused(refused: &[CrossRef], kind: &str, target: &Ref) -> bool {
    refused.iter().any(|c| c.to_kind == kind && &c.to == target)
}

/// Writes `status` to the tenant object by a merge patch on its status
/// subresource, unless it already shows it.
async fn copy_gateway_api_status<K: Tenant>(
    ctx: &Context,
    object: &K,
    current: &Value,
    status: Option<Value>,
) -> Result<(), Error> {
    let Some(status) = status else {
        return Ok(());
    };
    if current.get("status") == Some(&status) {
        return Ok(());
    }
    let api: Api<K> = Api::namespaced(ctx.tenant.clone(), &object.namespace().unwrap_or_default());
    api.patch_status(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"status": status})),
    )
    .await?;
    ctx.metrics.tenant_writes.inc();
    Ok(())
}

/// The LB copy of kind `K` named `name`, as JSON.
async fn lb_copy<K: Tenant>(ctx: &Context, name: &str) -> Result<Option<Value>, Error> {
    let api: Api<K> = Api::namespaced(ctx.lb.clone(), &ctx.config.lb_namespace);
    match api.get_opt(name).await? {
        Some(o) => Ok(Some(serde_json::to_value(o)?)),
        None => Ok(None),
    }
}

/// Mirrors the Services of `needs` that are not refused; problems for the
/// missing ones, refusals for the ones the LB cluster refused.
async fn mirror_services(
    ctx: &Context,
    services: impl IntoIterator<Item = &Ref>,
    refused: &[CrossRef],
    problems: &mut Vec<String>,
    refusals: &mut Vec<String>,
) -> Result<(), Error> {
    for target in services {
        if is_refused(refused, "Service", target) {
            continue;
        }
        match ctx.watches.service(&target.0, &target.1) {
            None => problems.push(format!(
                "Service {}/{} (backend) not found",
                target.0, target.1
            )),
            Some(s) => refusals
                .extend(apply_lb(ctx, &mirror::lb_service(&s, &ctx.config.lb_namespace)).await?),
        }
    }
    Ok(())
}

/// Mirrors the certificate Secrets of `secrets` that are not refused;
/// problems for the missing ones, refusals for the ones the LB cluster
/// refused.
async fn mirror_secrets(
    ctx: &Context,
    secrets: impl IntoIterator<Item = &Ref>,
    refused: &[CrossRef],
    problems: &mut Vec<String>,
    refusals: &mut Vec<String>,
) -> Result<(), Error> {
    for target in secrets {
        if is_refused(refused, "Secret", target) {
            continue;
        }
        match ctx.watches.secret(&target.0, &target.1) {
            None => problems.push(format!(
                "Secret {}/{} (certificateRefs or tls.backend.clientCertificateRef) not found",
                target.0, target.1
            )),
            Some(s) => match mirror::lb_secret(&s, &ctx.config.lb_namespace) {
                Ok(copy) => refusals.extend(apply_lb(ctx, &copy).await?),
                Err(e) => problems.push(e.to_string()),
            },
        }
    }
    Ok(())
}

/// Mirrors the htpasswd Secrets of `secrets` (a RouteTrafficPolicy's
/// `basicAuth` users) with their `auth` key alone; problems for the
/// missing ones and the ones without `auth`, refusals for the ones the LB
/// cluster refused.
async fn mirror_users_secrets(
    ctx: &Context,
    secrets: &BTreeSet<Ref>,
    problems: &mut Vec<String>,
    refusals: &mut Vec<String>,
) -> Result<(), Error> {
    for (ns, name) in secrets {
        match ctx.watches.secret(ns, name) {
            None => problems.push(format!(
                "Secret {ns}/{name} (basicAuth.secretRef) not found"
            )),
            Some(s) => match mirror::lb_htpasswd_secret(&s, false, &ctx.config.lb_namespace) {
                Ok(copy) => refusals.extend(apply_lb(ctx, &copy).await?),
                Err(e) => problems.push(e.to_string()),
            },
        }
    }
    Ok(())
}

/// The conditions annotation: Accepted (the LB cluster took every copy),
/// ResolvedRefs when a reference could not be followed.
fn conditions(refusals: &[String], problems: &[String]) -> Vec<Condition> {
    let mut out = vec![Condition::accepted(refusals)];
    if !problems.is_empty() {
        out.push(Condition::new(
            "ResolvedRefs",
            false,
            "RefNotResolved",
            problems.join("; "),
        ));
    }
    out
}

/// Deletes the LB copy of kind `K` (a 404 is done), then whatever only it
/// referenced.
async fn cleanup<K: Tenant>(object: &K, ctx: &Context) -> Result<(), Error> {
    let name = mirrored_ingress_name(&object.namespace().unwrap_or_default(), &object.name_any());
    let kind = K::kind(&()).to_string();
    let api: Api<K> = Api::namespaced(ctx.lb.clone(), &ctx.config.lb_namespace);
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => ctx
            .metrics
            .lb_writes
            .with_label_values(&[kind.as_str()])
            .inc(),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    ctx.applied.lock().remove(&(kind.clone(), name));
    gc::collect(ctx).await?;
    tracing::info!(kind = %kind, object = %key(object), "LB copy removed");
    Ok(())
}

/// The finalizer dance shared with the Ingress reconciler: cleanup when
/// deleted or no longer teapot's, the finalizer before any copy. `None`:
/// go on and mirror.
async fn hold<K: Tenant>(object: &K, ours: bool, ctx: &Context) -> Result<Option<Action>, Error> {
    let has_finalizer = object.finalizers().iter().any(|f| f == FINALIZER);
    if object.meta().deletion_timestamp.is_some() || (!ours && has_finalizer) {
        if has_finalizer {
            cleanup(object, ctx).await?;
            set_finalizer(object, ctx, false).await?;
        }
        return Ok(Some(Action::await_change()));
    }
    if !ours {
        return Ok(Some(Action::await_change()));
    }
    if !has_finalizer {
        set_finalizer(object, ctx, true).await?;
        return Ok(Some(Action::await_change()));
    }
    Ok(None)
}

/// Reconciles one tenant Gateway.
pub async fn reconcile_gateway(gateway: Arc<Gateway>, ctx: Arc<Context>) -> Result<Action, Error> {
    if let Some(done) = hold(gateway.as_ref(), is_ours(&gateway), &ctx).await? {
        return Ok(done);
    }
    let value = serde_json::to_value(gateway.as_ref())?;
    let needs = gateway_needs(&value)?;
    let (refused, mut problems) = check_grants(&ctx, &needs.cross).await?;
    let mut refusals = Vec::new();
    // Secrets before the Gateway, so what it references exists.
    mirror_secrets(&ctx, &needs.secrets, &refused, &mut problems, &mut refusals).await?;
    let copy: Gateway =
        serde_json::from_value(lb_gateway(&value, &ctx.config.lb_namespace, &refused)?)?;
    refusals.extend(apply_lb(&ctx, &copy).await?);
    if let Some(lb) = lb_copy::<Gateway>(&ctx, &copy.name_any()).await? {
        let status = gm::gateway_status_for_tenant(&lb, &value);
        copy_gateway_api_status(&ctx, gateway.as_ref(), &value, status).await?;
    }
    report(&ctx, gateway.as_ref(), conditions(&refusals, &problems)).await?;
    ctx.failures
        .clear(&format!("Gateway {}", key(gateway.as_ref())));
    ctx.metrics
        .reconciles
        .with_label_values(&["gateway", "ok"])
        .inc();
    Ok(Action::requeue(ctx.config.resync))
}

/// Where a tenant ListenerSet goes: `Some(true)` on the copy of the
/// tenant's teapot Gateway that allows it, `Some(false)` on the LB
/// cluster's Gateway its parentRef names (the tenant cluster has no
/// Gateway there: the operator's shared Gateway, whose `allowedListeners`
/// decides on the LB side), `None` when it is not teapot's (another
/// class's Gateway) or its Gateway does not allow it (with the problem).
async fn listener_set_target(
    ctx: &Context,
    set: &Value,
) -> Result<(Option<bool>, Vec<String>), Error> {
    let namespace = set["metadata"]["namespace"].as_str().unwrap_or("");
    let (ns, name) = gm::listener_set_parent(set)?;
    let api: Api<Gateway> = Api::namespaced(ctx.tenant.clone(), &ns);
    Ok(match api.get_opt(&name).await? {
        None => (Some(false), Vec::new()),
        Some(g) if !is_ours(&g) => (None, Vec::new()),
        Some(g) if gm::allows_listener_set(&g, namespace) => (Some(true), Vec::new()),
        Some(_) => (
            None,
            vec![format!(
                "Gateway {ns}/{name} does not allow ListenerSets from namespace {namespace} (its allowedListeners; namespace selectors are not supported)"
            )],
        ),
    })
}

/// Reconciles one tenant ListenerSet: its certificate Secrets, then its
/// copy on the copy of its Gateway (or on the LB cluster's Gateway it
/// names); the copy's status back.
pub async fn reconcile_listener_set(
    set: Arc<ListenerSet>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let value = serde_json::to_value(set.as_ref())?;
    let (target, mut problems) = listener_set_target(&ctx, &value).await?;
    if let Some(done) = hold(set.as_ref(), target.is_some(), &ctx).await? {
        return Ok(done);
    }
    let needs = gm::listener_set_needs(&value)?;
    let (refused, grant_problems) = check_grants(&ctx, &needs.cross).await?;
    problems.extend(grant_problems);
    let mut refusals = Vec::new();
    mirror_secrets(&ctx, &needs.secrets, &refused, &mut problems, &mut refusals).await?;
    let copy: ListenerSet = serde_json::from_value(gm::lb_listener_set(
        &value,
        &ctx.config.lb_namespace,
        &refused,
        target == Some(true),
    )?)?;
    refusals.extend(apply_lb(&ctx, &copy).await?);
    if let Some(lb) = lb_copy::<ListenerSet>(&ctx, &copy.name_any()).await? {
        // The same shape as a Gateway's: conditions and listeners.
        let status = gm::gateway_status_for_tenant(&lb, &value);
        copy_gateway_api_status(&ctx, set.as_ref(), &value, status).await?;
    }
    report(&ctx, set.as_ref(), conditions(&refusals, &problems)).await?;
    ctx.failures
        .clear(&format!("ListenerSet {}", key(set.as_ref())));
    ctx.metrics
        .reconciles
        .with_label_values(&["listenerset", "ok"])
        .inc();
    Ok(Action::requeue(ctx.config.resync))
}

/// The `parentRefs` indexes of `route` whose Gateway is teapot's and lets
/// it attach, and a problem for each teapot Gateway that does not; and
/// those of its ListenerSets the agent mirrors (their finalizer) whose
/// listeners let it attach.
async fn attached(
    ctx: &Context,
    route: &Value,
    kind: &str,
) -> Result<(Vec<usize>, Vec<String>), Error> {
    let namespace = route["metadata"]["namespace"].as_str().unwrap_or("");
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (i, (ns, name)) in route_parents(route)? {
        let api: Api<Gateway> = Api::namespaced(ctx.tenant.clone(), &ns);
        let Some(g) = api.get_opt(&name).await? else {
            continue;
        };
        if !is_ours(&g) {
            continue;
        }
        let section = route["spec"]["parentRefs"][i]["sectionName"].as_str();
        if gm::allows(&g, section, kind, namespace) {
            out.push(i);
        } else {
            problems.push(format!(
                "Gateway {ns}/{name} does not allow this {kind} (its listeners' allowedRoutes; namespace selectors are not supported)"
            ));
        }
    }
    let sets = gm::route_listener_sets(route)?;
    // A cluster without the kind answers 404, as for a missing set.
    for (i, (ns, name)) in sets {
        let api: Api<ListenerSet> = Api::namespaced(ctx.tenant.clone(), &ns);
        let Some(set) = api.get_opt(&name).await? else {
            continue;
        };
        // Mirrored: the reconciler holds it once it is teapot's.
        if !set.finalizers().iter().any(|f| f == FINALIZER) {
            continue;
        }
        let section = route["spec"]["parentRefs"][i]["sectionName"].as_str();
        if gm::set_allows(&set, section, kind, namespace) {
            out.push(i);
        } else {
            problems.push(format!(
                "ListenerSet {ns}/{name} does not allow this {kind} (its listeners' allowedRoutes; namespace selectors are not supported)"
            ));
        }
    }
    out.sort_unstable();
    Ok((out, problems))
}

/// Reconciles one tenant route of kind `K`.
pub async fn reconcile_route<K: Route>(route: Arc<K>, ctx: Arc<Context>) -> Result<Action, Error> {
    let kind = K::kind(&()).to_string();
    let value = serde_json::to_value(route.as_ref())?;
    let (parents, mut problems) = attached(&ctx, &value, &kind).await?;
    if let Some(done) = hold(route.as_ref(), !parents.is_empty(), &ctx).await? {
        return Ok(done);
    }
    let needs = route_needs(&value)?;
    let (refused, grant_problems) = check_grants(&ctx, &needs.cross).await?;
    problems.extend(grant_problems);
    let mut refusals = Vec::new();
    mirror_services(
        &ctx,
        &needs.services,
        &refused,
        &mut problems,
        &mut refusals,
    )
    .await?;
    let copy: K = serde_json::from_value(lb_route(
        &value,
        &ctx.config.lb_namespace,
        &parents,
        &refused,
    )?)?;
    refusals.extend(apply_lb(&ctx, &copy).await?);
    if let Some(lb) = lb_copy::<K>(&ctx, &copy.name_any()).await? {
        let status = gm::route_status_for_tenant(&lb, &value);
        copy_gateway_api_status(&ctx, route.as_ref(), &value, status).await?;
    }
    report(&ctx, route.as_ref(), conditions(&refusals, &problems)).await?;
    ctx.failures
        .clear(&format!("{kind} {}", key(route.as_ref())));
    ctx.metrics
        .reconciles
        .with_label_values(&[kind.to_ascii_lowercase().as_str(), "ok"])
        .inc();
    Ok(Action::requeue(ctx.config.resync))
}

/// Reconciles one tenant BackendTLSPolicy: its ConfigMaps first, so the
/// copy's trust anchors exist when it arrives, then the copy.
pub async fn reconcile_backend_tls_policy(
    policy: Arc<BackendTlsPolicy>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if let Some(done) = hold(policy.as_ref(), true, &ctx).await? {
        return Ok(done);
    }
    let value = serde_json::to_value(policy.as_ref())?;
    let mut problems = Vec::new();
    let mut refusals = Vec::new();
    for (ns, name) in gm::policy_config_maps(&value)? {
        let api: Api<ConfigMap> = Api::namespaced(ctx.tenant.clone(), &ns);
        match api.get_opt(&name).await? {
            None => problems.push(format!(
                "ConfigMap {ns}/{name} (caCertificateRefs) not found"
            )),
            Some(c) => match gm::lb_config_map(&c, &ctx.config.lb_namespace) {
                Ok(copy) => refusals.extend(apply_lb(&ctx, &copy).await?),
                Err(e) => problems.push(e.to_string()),
            },
        }
    }
    let copy: BackendTlsPolicy =
        serde_json::from_value(gm::lb_backend_tls_policy(&value, &ctx.config.lb_namespace)?)?;
    refusals.extend(apply_lb(&ctx, &copy).await?);
    if let Some(lb) = lb_copy::<BackendTlsPolicy>(&ctx, &copy.name_any()).await? {
        let status = gm::backend_tls_policy_status_for_tenant(&lb, &value);
        copy_gateway_api_status(&ctx, policy.as_ref(), &value, status).await?;
    }
    report(&ctx, policy.as_ref(), conditions(&refusals, &problems)).await?;
    ctx.failures
        .clear(&format!("BackendTLSPolicy {}", key(policy.as_ref())));
    ctx.metrics
        .reconciles
        .with_label_values(&["backendtlspolicy", "ok"])
        .inc();
    Ok(Action::requeue(ctx.config.resync))
}

/// Reconciles one tenant RouteTrafficPolicy: its copy, targets renamed to
/// the routes' mirrors. A policy only acts where a mirrored route is its
/// target, and the webhook judges each copy.
pub async fn reconcile_route_traffic_policy(
    policy: Arc<RouteTrafficPolicy>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if let Some(done) = hold(policy.as_ref(), true, &ctx).await? {
        return Ok(done);
    }
    let value = serde_json::to_value(policy.as_ref())?;
    let (mut problems, mut refusals) = (Vec::new(), Vec::new());
    // customErrors' Service before the copy that names it.
    let services = gm::policy_services(&value)?;
    mirror_services(&ctx, &services, &[], &mut problems, &mut refusals).await?;
    // basicAuth's users Secret too: without it the routes answer 503.
    mirror_users_secrets(
        &ctx,
        &gm::policy_secrets(&value)?,
        &mut problems,
        &mut refusals,
    )
    .await?;
    let copy: RouteTrafficPolicy = serde_json::from_value(gm::lb_route_traffic_policy(
        &value,
        &ctx.config.lb_namespace,
    )?)?;
    refusals.extend(apply_lb(&ctx, &copy).await?);
    report(&ctx, policy.as_ref(), conditions(&refusals, &problems)).await?;
    ctx.failures
        .clear(&format!("RouteTrafficPolicy {}", key(policy.as_ref())));
    ctx.metrics
        .reconciles
        .with_label_values(&["routetrafficpolicy", "ok"])
        .inc();
    Ok(Action::requeue(ctx.config.resync))
}

/// Logs, counts and requeues with exponential backoff (1 s to 5 min).
pub fn error_policy<K: Tenant>(object: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    let kind = K::kind(&()).to_string();
    let failures = ctx
        .failures
        .record(format!("{kind} {}", key(object.as_ref())));
    ctx.metrics
        .reconciles
        .with_label_values(&[kind.to_ascii_lowercase().as_str(), "error"])
        .inc();
    tracing::warn!(kind = %kind, object = %key(object.as_ref()), %error, failures, "reconcile failed; retrying");
    Action::requeue(backoff(failures))
}

/// The tenant object an LB copy `<name>.<namespace>` mirrors.
fn source_ref<K: Tenant>(lb: &K) -> Option<ObjectRef<K>> {
    let (namespace, name) = mirror::source_of_lb_ingress(&lb.name_any())?;
    Some(ObjectRef::new(&name).within(&namespace))
}

/// Objects in `store` (as JSON) for which `matches` holds.
fn matching<K: Tenant>(store: &Store<K>, matches: impl Fn(&Value) -> bool) -> Vec<ObjectRef<K>> {
    store
        .state()
        .iter()
        .filter(|o| serde_json::to_value(o.as_ref()).is_ok_and(|v| matches(&v)))
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

async fn stop(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

fn resync_ticks(ctx: Arc<Context>) -> impl futures::Stream<Item = ()> + Send + 'static {
    let resync = ctx.config.resync;
    futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(resync).await;
        Some(((), ()))
    })
    .map(move |()| ctx.forget_applied())
}

fn primary<K>(
    api: Api<K>,
) -> (
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    Store<K>,
)
where
    K: Tenant + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).applied_objects();
    (stream, store)
}

fn lb_copies<K: Tenant + Send + Sync + 'static>(
    ctx: &Context,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static {
    watcher(
        Api::<K>::namespaced(ctx.lb.clone(), &ctx.config.lb_namespace),
        watcher::Config::default().labels(&format!("{APP_MANAGED_BY_LABEL}={AGENT}")),
    )
    .touched_objects()
}

/// The one watch of each Gateway API kind several controllers read.
#[derive(Clone)]
struct GatewayWatches {
    gateways: Shared<Gateway>,
    grants: Shared<ReferenceGrant>,
    /// `None` where the tenant cluster does not serve ListenerSets.
    sets: Option<Shared<ListenerSet>>,
}

fn gateway_controller(
    ctx: Arc<Context>,
    w: GatewayWatches,
    shutdown: watch::Receiver<bool>,
) -> BoxFuture<'static, ()> {
    let (gateways, store) = (w.gateways.applied(), w.gateways.store());
    let (secrets_store, grants_gateways) = (store.clone(), store.clone());
    let controller = Controller::for_stream(gateways, store.clone())
        .with_config(ControllerConfig::default().debounce(std::time::Duration::from_millis(20)))
        .watches_stream(lb_copies::<Gateway>(&ctx), |lb: Gateway| source_ref(&lb))
        .watches_stream(ctx.watches.tls_secrets.touched(), move |s: Secret| {
            let target = (s.namespace().unwrap_or_default(), s.name_any());
            matching(&secrets_store, |g| {
                gateway_needs(g).is_ok_and(|n| n.secrets.contains(&target))
            })
        })
        .watches_stream(w.grants.touched(), move |g: ReferenceGrant| {
            let namespace = g.namespace().unwrap_or_default();
            matching(&grants_gateways, |gw| {
                gateway_needs(gw).is_ok_and(|n| n.cross.iter().any(|c| c.to.0 == namespace))
            })
        })
        .reconcile_all_on(resync_ticks(ctx.clone()))
        .graceful_shutdown_on(stop(shutdown.clone()))
        .run(reconcile_gateway, error_policy::<Gateway>, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "Gateway controller event");
            }
        });
    until_stopped(controller, store, stop(shutdown)).boxed()
}

fn listener_set_controller(
    ctx: Arc<Context>,
    w: GatewayWatches,
    sets: Shared<ListenerSet>,
    shutdown: watch::Receiver<bool>,
) -> BoxFuture<'static, ()> {
    let (sets, store) = (sets.applied(), sets.store());
    let (secrets_store, gateways_store) = (store.clone(), store.clone());
    let controller = Controller::for_stream(sets, store.clone())
        .with_config(ControllerConfig::default().debounce(std::time::Duration::from_millis(20)))
        .watches_stream(lb_copies::<ListenerSet>(&ctx), |lb: ListenerSet| {
            source_ref(&lb)
        })
        .watches_stream(ctx.watches.tls_secrets.touched(), move |s: Secret| {
            let target = (s.namespace().unwrap_or_default(), s.name_any());
            matching(&secrets_store, |l| {
                gm::listener_set_needs(l).is_ok_and(|n| n.secrets.contains(&target))
            })
        })
        // A Gateway that appears, changes class or allowedListeners
        // decides which sets attach.
        .watches_stream(w.gateways.touched(), move |g: Gateway| {
            let target = (g.namespace().unwrap_or_default(), g.name_any());
            matching(&gateways_store, |l| {
                gm::listener_set_parent(l).is_ok_and(|p| p == target)
            })
        })
        .reconcile_all_on(resync_ticks(ctx.clone()))
        .graceful_shutdown_on(stop(shutdown.clone()))
        .run(reconcile_listener_set, error_policy::<ListenerSet>, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "ListenerSet controller event");
            }
        });
    until_stopped(controller, store, stop(shutdown)).boxed()
}

/// `sets`: the tenant cluster serves ListenerSets ([`probe_listener_sets`]),
/// whose changes then decide the routes naming them as a Gateway's do.
fn route_controller<K: Route>(
    ctx: Arc<Context>,
    w: GatewayWatches,
    shutdown: watch::Receiver<bool>,
) -> BoxFuture<'static, ()> {
    let (routes, store) = primary(Api::<K>::all(ctx.tenant.clone()));
    let (services_store, gateways_store, grants_store, sets_store) =
        (store.clone(), store.clone(), store.clone(), store.clone());
    // Without the kind a watch would only fail and retry.
    let set_changes: futures::stream::BoxStream<'static, Result<ListenerSet, watcher::Error>> =
        match &w.sets {
            Some(sets) => sets.touched().boxed(),
            None => futures::stream::pending().boxed(),
        };
    let controller = Controller::for_stream(routes, store.clone())
        .with_config(ControllerConfig::default().debounce(std::time::Duration::from_millis(20)))
        .watches_stream(lb_copies::<K>(&ctx), |lb: K| source_ref(&lb))
        .watches_stream(ctx.watches.services.touched(), move |s: Service| {
            let target = (s.namespace().unwrap_or_default(), s.name_any());
            matching(&services_store, |r| {
                route_needs(r).is_ok_and(|n| n.services.contains(&target))
            })
        })
        // A Gateway that appears, changes class or listeners decides which
        // routes attach.
        .watches_stream(w.gateways.touched(), move |g: Gateway| {
            let target = (g.namespace().unwrap_or_default(), g.name_any());
            matching(&gateways_store, |r| {
                route_parents(r).is_ok_and(|ps| ps.iter().any(|(_, p)| *p == target))
            })
        })
        // So does a ListenerSet that appears, is taken on (its finalizer,
        // once its Gateway allows it), changes its listeners or goes: a
        // route naming it attaches through it or no longer does.
        .watches_stream(set_changes, move |l: ListenerSet| {
            let target = (l.namespace().unwrap_or_default(), l.name_any());
            matching(&sets_store, |r| {
                gm::route_listener_sets(r).is_ok_and(|ps| ps.iter().any(|(_, p)| *p == target))
            })
        })
        // A ReferenceGrant decides the cross-namespace backends of the
        // routes pointing into its namespace.
        .watches_stream(w.grants.touched(), move |g: ReferenceGrant| {
            let namespace = g.namespace().unwrap_or_default();
            matching(&grants_store, |r| {
                route_needs(r).is_ok_and(|n| n.cross.iter().any(|c| c.to.0 == namespace))
            })
        })
        .reconcile_all_on(resync_ticks(ctx.clone()))
        .graceful_shutdown_on(stop(shutdown.clone()))
        .run(reconcile_route::<K>, error_policy::<K>, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "route controller event");
            }
        });
    until_stopped(controller, store, stop(shutdown)).boxed()
}

fn backend_tls_policy_controller(
    ctx: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) -> BoxFuture<'static, ()> {
    let (policies, store) = primary(Api::<BackendTlsPolicy>::all(ctx.tenant.clone()));
    let config_maps_store = store.clone();
    let controller = Controller::for_stream(policies, store.clone())
        .with_config(ControllerConfig::default().debounce(std::time::Duration::from_millis(20)))
        .watches_stream(
            lb_copies::<BackendTlsPolicy>(&ctx),
            |lb: BackendTlsPolicy| source_ref(&lb),
        )
        .watches_stream(ctx.watches.config_maps.touched(), move |c: ConfigMap| {
            let target = (c.namespace().unwrap_or_default(), c.name_any());
            matching(&config_maps_store, |p| {
                gm::policy_config_maps(p).is_ok_and(|refs| refs.contains(&target))
            })
        })
        .reconcile_all_on(resync_ticks(ctx.clone()))
        .graceful_shutdown_on(stop(shutdown.clone()))
        .run(
            reconcile_backend_tls_policy,
            error_policy::<BackendTlsPolicy>,
            ctx,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "BackendTLSPolicy controller event");
            }
        });
    until_stopped(controller, store, stop(shutdown)).boxed()
}

fn route_traffic_policy_controller(
    ctx: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) -> BoxFuture<'static, ()> {
    let (policies, store) = primary(Api::<RouteTrafficPolicy>::all(ctx.tenant.clone()));
    let users_store = store.clone();
    let controller = Controller::for_stream(policies, store.clone())
        .with_config(ControllerConfig::default().debounce(std::time::Duration::from_millis(20)))
        .watches_stream(
            lb_copies::<RouteTrafficPolicy>(&ctx),
            |lb: RouteTrafficPolicy| source_ref(&lb),
        )
        // basicAuth's users (Opaque, as ingress-nginx's auth-secret): a
        // change reconciles the policies naming the Secret.
        .watches_stream(ctx.watches.opaque_secrets.touched(), move |s: Secret| {
            let target = (s.namespace().unwrap_or_default(), s.name_any());
            matching(&users_store, |p| {
                gm::policy_secrets(p).is_ok_and(|n| n.contains(&target))
            })
        })
        .reconcile_all_on(resync_ticks(ctx.clone()))
        .graceful_shutdown_on(stop(shutdown.clone()))
        .run(
            reconcile_route_traffic_policy,
            error_policy::<RouteTrafficPolicy>,
            ctx,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "RouteTrafficPolicy controller event");
            }
        });
    until_stopped(controller, store, stop(shutdown)).boxed()
}

/// The Gateway and route controllers, until `shutdown` turns true.
pub async fn run_controllers(ctx: Arc<Context>, shutdown: watch::Receiver<bool>) {
    // A tenant API server that does not answer holds no stop.
    let served = tokio::select! {
        served = probe_listener_sets(&ctx.tenant) => served.unwrap_or(false),
        () = stop(shutdown.clone()) => return,
    };
    // The gateway controllers wait for nothing else to list: their
    // reconciles read the objects they are triggered by.
    let mut listed = Listed::default();
    let tenant = &ctx.tenant;
    let w = GatewayWatches {
        gateways: Shared::watch(Api::all(tenant.clone()), Default::default(), &mut listed),
        grants: Shared::watch(Api::all(tenant.clone()), Default::default(), &mut listed),
        sets: served
            .then(|| Shared::watch(Api::all(tenant.clone()), Default::default(), &mut listed)),
    };
    let sets = w
        .sets
        .clone()
        .map(|sets| listener_set_controller(ctx.clone(), w.clone(), sets, shutdown.clone()));
    futures::future::join_all(sets.into_iter().chain([
        gateway_controller(ctx.clone(), w.clone(), shutdown.clone()),
        route_controller::<HttpRoute>(ctx.clone(), w.clone(), shutdown.clone()),
        route_controller::<GrpcRoute>(ctx.clone(), w.clone(), shutdown.clone()),
        route_controller::<TlsRoute>(ctx.clone(), w.clone(), shutdown.clone()),
        route_controller::<TcpRoute>(ctx.clone(), w.clone(), shutdown.clone()),
        route_controller::<UdpRoute>(ctx.clone(), w, shutdown.clone()),
        backend_tls_policy_controller(ctx.clone(), shutdown.clone()),
        route_traffic_policy_controller(ctx, shutdown),
    ]))
    .await;
}
