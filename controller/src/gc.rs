//! Garbage collection of LB copies whose tenant source is gone (also the
//! ones left behind while the agent was down: finalizers cover deletions
//! seen live, this covers everything else).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Resource, ResourceExt};
use teapot_api::admission::{MANAGED_BY_LABEL, MANAGED_BY_SYNC};
use teapot_api::gateway_api::{
    BackendTlsPolicy, Gateway, GrpcRoute, HttpRoute, ListenerSet, TcpRoute, TlsRoute, UdpRoute,
};
use teapot_api::hostname::{mirrored_ingress_name, mirrored_service_name};
use teapot_api::names::SERVICE_NAME_LABEL;
use teapot_api::route_policy::RouteTrafficPolicy;
use teapot_sync::{AGENT, APP_MANAGED_BY_LABEL, CAPI};

use crate::gateway_mirror::{self, gateway_needs, route_needs};
use crate::mirror::{self, is_ours};
use crate::report::{FINALIZER, Tenant};
use crate::{Context, Error};

/// What the live tenant Ingresses and L4 Services need on the LB side.
#[derive(Debug, Default)]
pub struct Live {
    pub ingresses: BTreeSet<String>,
    pub services: BTreeSet<String>,
    pub secrets: BTreeSet<String>,
    /// ConfigMaps (`ca.crt`) of BackendTLSPolicies, and those of Ingresses'
    /// `custom-headers`.
    pub config_maps: BTreeSet<String>,
    /// Gateway API copies, as `(kind, name)`.
    pub gateway_api: BTreeSet<(&'static str, String)>,
}

impl Live {
    pub fn of<'a>(
        ingresses: impl IntoIterator<Item = &'a Ingress>,
        services: impl IntoIterator<Item = &'a Service>,
    ) -> Live {
        let mut live = Live::default();
        for svc in services {
            if mirror::is_l4(svc) && svc.metadata.deletion_timestamp.is_none() {
                let ns = svc.namespace().unwrap_or_default();
                live.services
                    .insert(mirrored_service_name(&ns, &svc.name_any()));
            }
        }
        for ing in ingresses {
            if !is_ours(ing) || ing.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let ns = ing.namespace().unwrap_or_default();
            live.ingresses
                .insert(mirrored_ingress_name(&ns, &ing.name_any()));
            for (ns, s) in mirror::referenced_services(ing) {
                live.services.insert(mirrored_service_name(&ns, &s));
            }
            for (ns, s) in mirror::referenced_secrets(ing) {
                live.secrets.insert(mirror::mirrored_secret_name(&ns, &s));
            }
            for (ns, c) in crate::headers_mirror::referenced_config_maps(ing) {
                live.config_maps
                    .insert(crate::headers_mirror::mirrored_name(&ns, &c));
            }
        }
        live
    }
}

/// Deletes every LB object the agent wrote that no live tenant Ingress or
/// L4 Service needs. Returns how many were deleted.
pub async fn collect(ctx: &Context) -> Result<usize, Error> {
    let ns = &ctx.config.lb_namespace;
    let ours = ListParams::default().labels(&format!("{APP_MANAGED_BY_LABEL}={AGENT}"));
    // Not the slices of `teapot capi`, which writes the same managed-by into
    // a tenant namespace it may share with this agent.
    let slices_sel = ListParams::default().labels(&format!(
        "{MANAGED_BY_LABEL}={MANAGED_BY_SYNC},{APP_MANAGED_BY_LABEL}!={CAPI}"
    ));
    // The LB side is listed before the tenant side: anything listed there
    // was written for a tenant object that the later tenant list still
    // shows, unless it was deleted meanwhile. The other order could delete
    // a copy written in between.
    let lb_ingresses = Api::<Ingress>::namespaced(ctx.lb.clone(), ns)
        .list(&ours)
        .await?;
    let lb_services = Api::<Service>::namespaced(ctx.lb.clone(), ns)
        .list(&ours)
        .await?;
    let lb_secrets = Api::<Secret>::namespaced(ctx.lb.clone(), ns)
        .list(&ours)
        .await?;
    let lb_slices = Api::<EndpointSlice>::namespaced(ctx.lb.clone(), ns)
        .list(&slices_sel)
        .await?;
    // ConfigMaps: BackendTLSPolicies' and custom-headers' copies.
    let lb_config_maps = Api::<ConfigMap>::namespaced(ctx.lb.clone(), ns)
        .list(&ours)
        .await?
        .items;
    let lb_gateway_api = if ctx.config.gateway_api_on() {
        lb_copy_names(ctx).await?
    } else {
        Vec::new()
    };
    let tenant = Api::<Ingress>::all(ctx.tenant.clone())
        .list(&ListParams::default())
        .await?;
    let tenant_services = Api::<Service>::all(ctx.tenant.clone())
        .list(&ListParams::default())
        .await?;
    let mut live = Live::of(tenant.items.iter(), tenant_services.items.iter());
    if ctx.config.gateway_api_on() {
        add_live(ctx, &mut live).await?;
    }
    let mut deleted = 0;
    for (kind, name) in lb_gateway_api {
        if !live.gateway_api.contains(&(kind, name.clone())) {
            deleted += delete_copy(ctx, kind, &name).await?;
        }
    }
    for o in lb_ingresses.items {
        if !live.ingresses.contains(&o.name_any()) {
            deleted += delete::<Ingress>(ctx, &o.name_any()).await?;
        }
    }
    for o in lb_services.items {
        if !live.services.contains(&o.name_any()) {
            deleted += delete::<Service>(ctx, &o.name_any()).await?;
        }
    }
    for o in lb_secrets.items {
        if !live.secrets.contains(&o.name_any()) {
            deleted += delete::<Secret>(ctx, &o.name_any()).await?;
        }
    }
    for o in lb_config_maps {
        if !live.config_maps.contains(&o.name_any()) {
            deleted += delete::<ConfigMap>(ctx, &o.name_any()).await?;
        }
    }
    for o in lb_slices.items {
        let service = o.labels().get(SERVICE_NAME_LABEL);
        if service.is_none_or(|s| !live.services.contains(s)) {
            deleted += delete::<EndpointSlice>(ctx, &o.name_any()).await?;
        }
    }
    if deleted > 0 {
        tracing::info!(deleted, "garbage-collected LB copies without a live source");
    }
    ctx.metrics.gc_deletions.inc_by(deleted as u64);
    Ok(deleted)
}

/// The kinds of Gateway API copies the agent writes.
const COPY_KINDS: [&str; 9] = [
    "Gateway",
    "ListenerSet",
    "HTTPRoute",
    "GRPCRoute",
    "TLSRoute",
    "TCPRoute",
    "UDPRoute",
    "BackendTLSPolicy",
    "RouteTrafficPolicy",
];

/// A list of teapot's own RouteTrafficPolicy kind or of ListenerSets,
/// empty where the CRD is not installed (404): a cluster without it has
/// none, and the collector must still run for everything else.
fn served<T>(list: Result<Vec<T>, Error>) -> Result<Vec<T>, Error> {
    match list {
        Err(Error::Kube(kube::Error::Api(e))) if e.code == 404 => Ok(Vec::new()),
        other => other,
    }
}

/// The Gateway API copies the agent wrote, as `(kind, name)`: listed by the GC
/// before the tenant side.
async fn lb_copy_names(ctx: &Context) -> Result<Vec<(&'static str, String)>, Error> {
    async fn names<K: Tenant>(ctx: &Context) -> Result<Vec<String>, Error> {
        let ours = ListParams::default().labels(&format!("{APP_MANAGED_BY_LABEL}={AGENT}"));
        let api: Api<K> = Api::namespaced(ctx.lb.clone(), &ctx.config.lb_namespace);
        Ok(api
            .list(&ours)
            .await?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect())
    }
    let mut out = Vec::new();
    let lists = [
        names::<Gateway>(ctx).await?,
        served(names::<ListenerSet>(ctx).await)?,
        names::<HttpRoute>(ctx).await?,
        names::<GrpcRoute>(ctx).await?,
        names::<TlsRoute>(ctx).await?,
        names::<TcpRoute>(ctx).await?,
        names::<UdpRoute>(ctx).await?,
        names::<BackendTlsPolicy>(ctx).await?,
        served(names::<RouteTrafficPolicy>(ctx).await)?,
    ];
    for (kind, list) in COPY_KINDS.into_iter().zip(lists) {
        out.extend(list.into_iter().map(|n| (kind, n)));
    }
    Ok(out)
}

/// Adds what the live tenant Gateways and routes need on the LB side to
/// `live`: their copies, and the Services and Secrets they reference. A
/// route counts while it carries the finalizer (the reconciler removes it
/// once no teapot Gateway takes the route).
async fn add_live(ctx: &Context, live: &mut Live) -> Result<(), Error> {
    for g in Api::<Gateway>::all(ctx.tenant.clone())
        .list(&ListParams::default())
        .await?
        .items
    {
        if !gateway_mirror::is_ours(&g) || g.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = g.namespace().unwrap_or_default();
        live.gateway_api
            .insert(("Gateway", mirrored_ingress_name(&ns, &g.name_any())));
        for (sns, s) in gateway_needs(&serde_json::to_value(&g)?)?.secrets {
            live.secrets.insert(mirror::mirrored_secret_name(&sns, &s));
        }
    }
    // A ListenerSet counts while it carries the finalizer, as a route
    // does; with it, its listeners' Secrets.
    let sets = Api::<ListenerSet>::all(ctx.tenant.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(Error::from);
    for l in served(sets)? {
        let held = l.finalizers().iter().any(|f| f == FINALIZER);
        if !held || l.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = l.namespace().unwrap_or_default();
        live.gateway_api
            .insert(("ListenerSet", mirrored_ingress_name(&ns, &l.name_any())));
        for (sns, s) in gateway_mirror::listener_set_needs(&serde_json::to_value(&l)?)?.secrets {
            live.secrets.insert(mirror::mirrored_secret_name(&sns, &s));
        }
    }
    add_live_routes::<HttpRoute>(ctx, live).await?;
    add_live_routes::<GrpcRoute>(ctx, live).await?;
    add_live_routes::<TlsRoute>(ctx, live).await?;
    add_live_routes::<TcpRoute>(ctx, live).await?;
    add_live_routes::<UdpRoute>(ctx, live).await?;
    let policies = Api::<RouteTrafficPolicy>::all(ctx.tenant.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(Error::from);
    for p in served(policies)? {
        if p.metadata.deletion_timestamp.is_none() {
            let ns = p.namespace().unwrap_or_default();
            live.gateway_api.insert((
                "RouteTrafficPolicy",
                mirrored_ingress_name(&ns, &p.name_any()),
            ));
            let value = serde_json::to_value(&p)?;
            for (sns, s) in gateway_mirror::policy_services(&value)? {
                live.services.insert(mirrored_service_name(&sns, &s));
            }
            for (sns, s) in gateway_mirror::policy_secrets(&value)? {
                live.secrets.insert(mirror::mirrored_secret_name(&sns, &s));
            }
        }
    }
    for p in Api::<BackendTlsPolicy>::all(ctx.tenant.clone())
        .list(&ListParams::default())
        .await?
        .items
    {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = p.namespace().unwrap_or_default();
        live.gateway_api.insert((
            "BackendTLSPolicy",
            mirrored_ingress_name(&ns, &p.name_any()),
        ));
        for (cns, c) in gateway_mirror::policy_config_maps(&serde_json::to_value(&p)?)? {
            live.config_maps
                .insert(gateway_mirror::mirrored_config_map_name(&cns, &c));
        }
    }
    Ok(())
}

async fn add_live_routes<K: Tenant>(ctx: &Context, live: &mut Live) -> Result<(), Error> {
    let kind = COPY_KINDS
        .into_iter()
        .find(|k| *k == K::kind(&()))
        .unwrap_or("HTTPRoute");
    for r in Api::<K>::all(ctx.tenant.clone())
        .list(&ListParams::default())
        .await?
        .items
    {
        let held = r.finalizers().iter().any(|f| f == FINALIZER);
        if !held || r.meta().deletion_timestamp.is_some() {
            continue;
        }
        let ns = r.namespace().unwrap_or_default();
        live.gateway_api
            .insert((kind, mirrored_ingress_name(&ns, &r.name_any())));
        for (sns, s) in route_needs(&serde_json::to_value(&r)?)?.services {
            live.services
                .insert(teapot_api::hostname::mirrored_service_name(&sns, &s));
        }
    }
    Ok(())
}

/// Deletes the LB copy `(kind, name)`; 1 when it was there.
async fn delete_copy(ctx: &Context, kind: &str, name: &str) -> Result<usize, Error> {
    match kind {
        "Gateway" => delete::<Gateway>(ctx, name).await,
        "ListenerSet" => delete::<ListenerSet>(ctx, name).await,
        "HTTPRoute" => delete::<HttpRoute>(ctx, name).await,
        "GRPCRoute" => delete::<GrpcRoute>(ctx, name).await,
        "TLSRoute" => delete::<TlsRoute>(ctx, name).await,
        "TCPRoute" => delete::<TcpRoute>(ctx, name).await,
        "UDPRoute" => delete::<UdpRoute>(ctx, name).await,
        "BackendTLSPolicy" => delete::<BackendTlsPolicy>(ctx, name).await,
        "RouteTrafficPolicy" => delete::<RouteTrafficPolicy>(ctx, name).await,
        _ => Ok(0),
    }
}

pub(crate) async fn delete<K>(ctx: &Context, name: &str) -> Result<usize, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    ctx.applied
        .lock()
        .remove(&(K::kind(&()).to_string(), name.to_string()));
    let api: Api<K> = Api::namespaced(ctx.lb.clone(), &ctx.config.lb_namespace);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(1),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(0),
        Err(e) => Err(e.into()),
    }
}
