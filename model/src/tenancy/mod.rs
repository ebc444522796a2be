//! Tenant namespaces in the compile: which namespace a Tenant owns, which
//! hosts it may route and which addresses its endpoints may use.
//!
//! The rules are the webhook's own ([`teapot_api::admission`]), applied again
//! here as defence in depth (docs/architecture.md, "Security rules": the proxy never
//! forwards a tenant's traffic to an address the webhook would refuse
//! there). Host conflicts between tenants are not judged here: the compile
//! gives a contested host to the oldest Ingress.

#[cfg(test)]
mod reference;
mod verdicts;

pub use verdicts::TenantVerdicts;

use std::collections::HashMap;

use crate::store::FastHashMap;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use teapot_api::admission::{
    self, AdmissionContext, Holdings, HostScope, TenantObjectRef, Violation,
};
use teapot_api::regex::RegexCost;
use teapot_api::{HostPattern, Tenant};

use crate::manifests::{Loaded, Problem};
use crate::store::{Kind, NsName, ObjectKey, SliceChange, Store};

/// One Tenant as the compile sees it.
#[derive(Debug)]
pub struct TenantView<'a> {
    pub tenant: &'a Tenant,
    pub cluster: &'a str,
    ctx: AdmissionContext<'a>,
}

impl TenantView<'_> {
    /// Where `host` stands for this tenant, or why it may not use it.
    pub fn scope(&self, host: &HostPattern) -> Result<HostScope, String> {
        admission::host_scope(&self.ctx, host)
    }

    /// Whether an endpoint address may carry this tenant's traffic.
    pub fn endpoint_allowed(&self, ip: IpAddr) -> Result<(), String> {
        admission::check_endpoint_address(&self.ctx, ip)
    }
}

/// Tenants by the namespace they own, plus what they hold.
#[derive(Debug)]
pub struct Tenancy<'a> {
    by_namespace: FastHashMap<String, TenantView<'a>>,
}

impl<'a> Tenancy<'a> {
    /// `holdings` must know every Tenant's node networks, so that one
    /// tenant's endpoints cannot point into another's nodes.
    pub fn new(
        tenants: &[&'a Tenant],
        domain: &'a str,
        lb_networks: &'a [IpNet],
        holdings: &'a Holdings,
    ) -> Tenancy<'a> {
        let mut by_namespace = FastHashMap::default();
        for tenant in tenants {
            by_namespace
                .entry(tenant.namespace_name())
                .or_insert_with(|| TenantView {
                    tenant,
                    cluster: &tenant.spec.cluster,
                    ctx: AdmissionContext::new(tenant, domain, lb_networks, holdings),
                });
        }
        Tenancy { by_namespace }
    }

    /// Holdings with every tenant's node networks (and granted domains).
    pub fn holdings(tenants: &[&'a Tenant]) -> Holdings {
        Holdings::from_objects(tenants.iter().copied(), std::iter::empty())
    }

    /// The Tenant owning `namespace`; `None` for the operator's namespaces.
    pub fn get(&self, namespace: &str) -> Option<&TenantView<'a>> {
        self.by_namespace.get(namespace)
    }

    pub fn is_empty(&self) -> bool {
        self.by_namespace.is_empty()
    }
}

/// Re-checks every object in a tenant namespace with the webhook's rules
/// (defence in depth: in manifests mode nothing else does). A refused
/// object leaves the store and becomes a [`Problem`]; its previous version
/// stays when that one still passes, as for any document that stops
/// validating. Ingresses and the Gateway API objects that claim hosts
/// (Gateways, HTTP, GRPC and TLS routes) are judged together, oldest
/// first, so a host goes to the first tenant that claimed it in either API
/// and later claims by others are refused.
pub fn admit(loaded: &mut Loaded, previous: &Store, domain: &str, lb_networks: &[IpNet]) {
    admit_cached(
        &mut loaded.store,
        &mut loaded.problems,
        previous,
        domain,
        lb_networks,
        &mut TenantVerdicts::default(),
        None,
    );
}

/// [`admit`] of a loaded `store` whose problems are `problems`, by
/// difference from the last admission `verdicts` remembers: an object the
/// same as then keeps its verdict, unless it claims hosts and a claim it
/// overlaps changed (module `verdicts` has the rule). Returns the objects
/// it refused: where `store` no longer holds what was loaded (the object
/// is gone, or its previous version is back).
///
/// `changed`, when known, names every key at which `store` may differ
/// from what the last admission with `verdicts` left (objects applied or
/// removed since, as [`crate::store::Store::retain_from`] copies them:
/// every other object the same `Arc`): only those, and the objects it
/// refused, are looked at. `None` walks every object.
///
/// `previous` needs to hold the previous versions of the objects the load
/// changed, no more ([`crate::manifests::load_named`] returns just those):
/// the previous version of any other object is the one loaded now, so
/// putting it back after a refusal would only have the second pass refuse
/// it again.
pub fn admit_cached(
    store: &mut Store,
    problems: &mut Vec<Problem>,
    previous: &Store,
    domain: &str,
    lb_networks: &[IpNet],
    verdicts: &mut TenantVerdicts,
    changed: Option<&[ObjectKey]>,
) -> Vec<ObjectKey> {
    let stands = verdicts.begin(store, domain, lb_networks);
    let changed = changed.filter(|_| stands);
    let mut refused = Vec::new();
    // A previous version put back must pass too (a Tenant's nodeCIDRs or
    // another tenant's claims may have changed since): a second pass
    // without retention settles it.
    let pass = |store: &mut Store,
                problems: &mut Vec<Problem>,
                previous,
                refused: &mut Vec<ObjectKey>,
                verdicts: &mut TenantVerdicts,
                changed| {
        verdicts::admit_pass(
            store,
            problems,
            previous,
            domain,
            lb_networks,
            verdicts,
            changed,
            refused,
        )
    };
    // The second pass's store is the first's but where it refused.
    if pass(
        store,
        problems,
        Some(previous),
        &mut refused,
        verdicts,
        changed,
    ) {
        pass(store, problems, None, &mut refused, verdicts, Some(&[]));
    }
    refused.sort_unstable();
    refused.dedup();
    refused
}

/// [`admit_cached`] for a change of EndpointSlices alone, when nothing
/// else in `store` (as the last admission left it) changed: each new slice
/// is judged as the whole pass would judge it, and its tenant's total
/// weighed against what the last admission counted. `Err` (why) when a
/// slice is refused or its tenant's total is, or may be, past
/// `maxTotalBytes`: the caller then admits the whole store, which says
/// which objects are refused and keeps their previous versions. On `Ok`
/// the verdicts and totals are those of the store with the changes.
pub fn admit_slice_changes(
    store: &Store,
    changes: &[SliceChange],
    domain: &str,
    lb_networks: &[IpNet],
    verdicts: &mut TenantVerdicts,
) -> Result<(), &'static str> {
    // Slices are judged with every tenant's node networks (an endpoint
    // may not point into another tenant's nodes); hosts play no part. The
    // last admission's Tenants, their namespaces and networks are what it
    // kept: a change of slices alone costs the slices, not the Tenants.
    let Some((by_namespace, holdings)) = verdicts.tenants_of(store) else {
        return Err("no admission of these Tenants to build on");
    };
    if !changes
        .iter()
        .any(|c| by_namespace.contains_key(&c.id.namespace))
    {
        return Ok(());
    }
    let mut weights: HashMap<&str, Weight> = HashMap::new();
    let mut judged: Vec<(&NsName, Option<&Arc<crate::endpoints::CompactSlice>>)> =
        Vec::with_capacity(changes.len());
    for change in changes {
        let Some(tenant) = by_namespace.get(&change.id.namespace) else {
            continue;
        };
        let weight = weights
            .entry(change.id.namespace.as_str())
            .or_insert_with(|| verdicts.weight(&change.id.namespace));
        if weight.over {
            return Err("the tenant's objects were past maxTotalBytes");
        }
        let before = store
            .endpoint_slices
            .get(&change.id)
            .map_or(0, |s| s.object.source_bytes() as u64);
        weight.bytes = weight.bytes.saturating_sub(before);
        let Some(stored) = &change.slice else {
            judged.push((&change.id, None));
            continue;
        };
        let size = stored.object.source_bytes();
        let ctx = AdmissionContext::new(tenant, domain, lb_networks, &holdings);
        let violations = judge_slice(&ctx, &change.id.namespace, &stored.object);
        if !violations.is_empty() {
            return Err("the tenant policy refuses a slice");
        }
        weight.bytes += size as u64;
        let max = teapot_api::tenant::TenantLimits::effective(tenant.spec.limits.as_ref())
            .max_total_bytes;
        if weight.bytes > max {
            return Err("the tenant's objects would be past maxTotalBytes");
        }
        judged.push((&change.id, Some(&stored.object)));
    }
    for (id, slice) in judged {
        verdicts.set_slice(id, slice);
    }
    for (namespace, weight) in weights {
        verdicts.set_weight(namespace, weight);
    }
    Ok(())
}

/// Takes each refused object out of `loaded`, puts its previous version
/// back where `previous` has one, and reports it (a version put back by
/// the first pass and refused again by the second marks the first pass's
/// report); returns whether any was put back.
fn refuse(
    loaded: &mut Store,
    problems: &mut Vec<Problem>,
    previous: Option<&Store>,
    refused: Vec<(ObjectKey, crate::store::Origin, Vec<Violation>)>,
    refused_keys: &mut Vec<ObjectKey>,
) -> bool {
    let mut kept_any = false;
    for (key, origin, violations) in refused {
        refused_keys.push(key.clone());
        loaded.remove(&key);
        let kept = previous.is_some_and(|p| loaded.retain_from(p, &key));
        kept_any |= kept;
        let object = key.to_string();
        if previous.is_none()
            && let Some(p) = problems
                .iter_mut()
                .find(|p| p.object.as_deref() == Some(&object))
        {
            // The version put back by the first pass failed as well.
            p.kept_previous = false;
            continue;
        }
        problems.push(Problem {
            file: origin.file.to_path_buf(),
            document: origin.document,
            object: Some(object),
            field: violations.first().map(|v| v.field.clone()),
            message: format!(
                "refused by the tenant policy: {}",
                admission::summarize(&violations, 10)
            ),
            kept_previous: kept,
        });
    }
    kept_any
}

/// What a tenant namespace's admitted objects weighed against
/// `maxTotalBytes` in the last admission ([`over_total`]): an
/// EndpointSlice change alone is judged against it
/// ([`admit_slice_changes`]) without the whole store.
#[derive(Clone, Copy, Debug, Default)]
struct Weight {
    bytes: u64,
    /// Some object was refused for taking the total past the limit: which
    /// ones are refused then depends on every object's age, so a change
    /// there is judged with the whole store.
    over: bool,
}

/// The hostnames a Gateway API object holds once admitted (a Gateway's
/// listener hostnames, a route's `hostnames`); none for other kinds. The
/// webhook's state holds them the same way (first claimant).
pub fn claimed_hosts(object: TenantObjectRef<'_>) -> Vec<HostPattern> {
    match object {
        TenantObjectRef::Gateway(g) => crate::gateway::gateway_hostnames(g).collect(),
        TenantObjectRef::ListenerSet(l) => l
            .spec
            .listeners
            .iter()
            .filter_map(|l| HostPattern::parse(l.hostname.as_deref()?).ok())
            .collect(),
        TenantObjectRef::HttpRoute(r) => {
            let hostnames = r.spec.hostnames.as_deref().unwrap_or_default();
            crate::gateway::route_hostnames(hostnames).collect()
        }
        TenantObjectRef::GrpcRoute(r) => {
            let hostnames = r.spec.hostnames.as_deref().unwrap_or_default();
            crate::gateway::route_hostnames(hostnames).collect()
        }
        TenantObjectRef::TlsRoute(r) => {
            crate::gateway::route_hostnames(&r.spec.hostnames).collect()
        }
        _ => Vec::new(),
    }
}

/// The tenant policy on an EndpointSlice: the rules run on what the proxy
/// kept, which is all it acts on (crate::endpoints), plus what was found
/// in the dropped fields; the size counted is the slice as written.
fn judge_slice(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    slice: &crate::endpoints::CompactSlice,
) -> Vec<Violation> {
    let typed = slice.to_typed();
    let object = TenantObjectRef::EndpointSlice(&typed);
    let mut v = admission::check_typed_sized(ctx, namespace, object, slice.source_bytes());
    v.extend_from_slice(slice.dropped_violations());
    v
}

/// An admitted object of a tenant namespace and its JSON size.
struct Weighed {
    created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    key: ObjectKey,
    size: usize,
    /// Its regular expressions (routes only).
    regex: RegexCost,
}

/// `limits.maxTotalBytes` of one tenant namespace: its objects are counted
/// oldest first (then by kind and name); those that take its total past
/// the limit are refused, so what a tenant already serves keeps serving
/// and one tenant cannot fill every replica's memory. Returns what the
/// admitted weigh and the refused.
fn over_total(
    mut objects: Vec<Weighed>,
    tenant: &Tenant,
) -> (Weight, Vec<(ObjectKey, Vec<Violation>)>) {
    objects.sort_by(|a, b| {
        (a.created.is_none(), &a.created, &a.key).cmp(&(b.created.is_none(), &b.created, &b.key))
    });
    let limits = teapot_api::tenant::TenantLimits::effective(tenant.spec.limits.as_ref());
    let max = limits.max_total_bytes;
    let max_regex = RegexCost {
        count: limits.max_regexes,
        bytes: limits.max_regex_bytes,
    };
    let mut out = Vec::new();
    let mut weight = Weight::default();
    let mut regex = RegexCost::default();
    for o in objects {
        let refusal = if o.regex != RegexCost::default() && regex.plus(o.regex).exceeds(max_regex) {
            Some(format!(
                "with this route the tenant's routes hold more regular expressions than its limits allow (maxRegexes = {}, maxRegexBytes = {} KiB); older routes keep theirs",
                max_regex.count,
                max_regex.bytes / 1024
            ))
        } else if weight.bytes + o.size as u64 > max {
            Some(format!(
                "the tenant's objects are more than its limit of {max} bytes as JSON (maxTotalBytes) with this one; older objects keep theirs"
            ))
        } else {
            None
        };
        match refusal {
            Some(message) => {
                weight.over = true;
                out.push((
                    o.key,
                    vec![Violation::new(admission::OBJECT_FIELD, message)],
                ));
            }
            None => {
                weight.bytes += o.size as u64;
                regex = regex.plus(o.regex);
            }
        }
    }
    (weight, out)
}

/// GatewayClasses refused for naming a tenant namespace: the kind is
/// cluster-scoped and the operator's, so such a one was written as a
/// tenant's.
fn gateway_classes_in_tenants(
    store: &Store,
    by_namespace: &TenantsByNamespace,
) -> Vec<(ObjectKey, Vec<Violation>)> {
    store
        .gateway_classes
        .iter()
        .filter(|(_, s)| {
            s.object
                .metadata
                .namespace
                .as_deref()
                .is_some_and(|ns| by_namespace.contains_key(ns))
        })
        .map(|(name, _)| {
            let key = ObjectKey {
                kind: Kind::GatewayClass,
                namespace: String::new(),
                name: name.clone(),
            };
            let why = Violation::new(
                "kind",
                admission::refused_kind_message("gateway.networking.k8s.io/v1", "GatewayClass"),
            );
            (key, vec![why])
        })
        .collect()
}

/// The store's Tenants, each by the namespace it holds, held apart from
/// the store (a pass refuses objects from the store while it reads them).
/// The verdicts keep one per set of Tenants ([`TenantVerdicts`]), so that
/// a pass or an EndpointSlice change in a fleet of many Tenants does not
/// name every Tenant's namespace again.
#[derive(Debug, Default)]
pub(super) struct TenantsByNamespace {
    tenants: Vec<Arc<Tenant>>,
    /// Namespace -> index into `tenants`. Of two Tenants naming one
    /// namespace the first by name holds it, as in the compile's
    /// [`Tenancy`] and in `Holdings`: the check judges a namespace's
    /// objects by the Tenant whose policy the compile serves them under.
    index: FastHashMap<String, usize>,
}

impl TenantsByNamespace {
    pub(super) fn of(store: &Store) -> TenantsByNamespace {
        let tenants: Vec<Arc<Tenant>> = store.tenants.values().map(|t| t.object.clone()).collect();
        let mut index = FastHashMap::default();
        index.reserve(tenants.len());
        for (at, tenant) in tenants.iter().enumerate() {
            index.entry(tenant.namespace_name()).or_insert(at);
        }
        TenantsByNamespace { tenants, index }
    }

    /// Whether these are `store`'s Tenants (the very same objects).
    pub(super) fn same_as(&self, store: &Store) -> bool {
        self.tenants.len() == store.tenants.len()
            && self
                .tenants
                .iter()
                .zip(store.tenants.values())
                .all(|(a, b)| Arc::ptr_eq(a, &b.object))
    }

    /// The Tenant holding `namespace`; `None` for the operator's.
    pub(super) fn get(&self, namespace: &str) -> Option<&Tenant> {
        self.index.get(namespace).map(|&at| &*self.tenants[at])
    }

    pub(super) fn contains_key(&self, namespace: &str) -> bool {
        self.index.contains_key(namespace)
    }

    pub(super) fn tenants(&self) -> impl Iterator<Item = &Tenant> {
        self.tenants.iter().map(|t| &**t)
    }
}

fn key(kind: Kind, id: &NsName) -> ObjectKey {
    ObjectKey {
        kind,
        namespace: id.namespace.clone(),
        name: id.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_api::TenantSpec;

    fn tenant(cluster: &str, cidr: &str) -> Tenant {
        Tenant::new(
            cluster,
            TenantSpec {
                cluster: cluster.into(),
                allowed_domains: vec![format!("{cluster}.example.com")],
                node_cidrs: vec![cidr.into()],
                ..TenantSpec::default()
            },
        )
    }

    #[test]
    fn slice_verdicts_are_reused_until_a_tenant_changes() {
        let docs = |cidr: &str, ip: &str| {
            format!(
                "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: a}}\nspec: {{cluster: a, nodeCIDRs: [{cidr}]}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: s-1, namespace: tenant-a, labels: {{kubernetes.io/service-name: s, endpointslice.kubernetes.io/managed-by: sync.teapot.dev}}}}\naddressType: IPv4\nports: [{{name: http, port: 30080}}]\nendpoints: [{{addresses: [{ip}]}}]\n"
            )
        };
        let load = read;
        let mut verdicts = TenantVerdicts::default();
        let mut first = load(&docs("10.1.0.0/24", "10.1.0.5"), &Store::default());
        admit_cached(
            &mut first.store,
            &mut first.problems,
            &Store::default(),
            "example.net",
            &[],
            &mut verdicts,
            None,
        );
        assert_eq!(
            (verdicts.reused(), first.store.endpoint_slices.len()),
            (0, 1)
        );

        // The same objects again (what an unchanged file or watch gives).
        let mut again = Loaded {
            store: first.store.clone(),
            problems: Vec::new(),
        };
        admit_cached(
            &mut again.store,
            &mut again.problems,
            &first.store,
            "example.net",
            &[],
            &mut verdicts,
            None,
        );
        assert_eq!(
            (verdicts.reused(), again.store.endpoint_slices.len()),
            (1, 1)
        );

        // The Tenant's nodeCIDRs no longer hold the endpoint: judged again,
        // and refused.
        let mut moved = load(&docs("10.2.0.0/24", "10.1.0.5"), &Store::default());
        let slice = first.store.endpoint_slices.values().next().unwrap().clone();
        moved
            .store
            .endpoint_slices
            .insert(NsName::new("tenant-a", "s-1"), slice);
        admit_cached(
            &mut moved.store,
            &mut moved.problems,
            &Store::default(),
            "example.net",
            &[],
            &mut verdicts,
            None,
        );
        assert_eq!(verdicts.reused(), 0);
        assert!(moved.store.endpoint_slices.is_empty());
        assert!(
            moved.problems[0].message.contains("nodeCIDRs"),
            "{:?}",
            moved.problems
        );
    }

    /// The first-claimant rule spans both APIs: an operator's HTTPRoute
    /// wildcard holds its whole subtree (a Gateway API wildcard), so a
    /// tenant Ingress two labels below it is refused even inside the
    /// tenant's granted domain; a tenant HTTPRoute on a custom host an
    /// operator's Ingress holds is refused too (the operator's hosts hold
    /// whatever their age).
    #[test]
    fn hosts_are_held_across_ingresses_and_gateway_routes() {
        let text = "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: acme}\nspec: {cluster: acme, allowedDomains: [acme.example.org]}\n---\napiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: globex}\nspec: {cluster: globex}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: shop, namespace: ops}\nspec:\n  hostnames: [\"*.shop.acme.example.org\"]\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: deep.default, namespace: tenant-acme}\nspec:\n  ingressClassName: teapot\n  rules: [{host: a.b.shop.acme.example.org}]\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: grafana, namespace: ops, creationTimestamp: \"2024-03-01T00:00:00Z\"}\nspec:\n  ingressClassName: teapot\n  rules: [{host: grafana.ops-corp.test}]\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: web.default, namespace: tenant-acme, creationTimestamp: \"2024-02-01T00:00:00Z\"}\nspec:\n  parentRefs: [{name: gw}]\n  hostnames: [grafana.ops-corp.test]\n";
        let loaded = loaded_and_admitted(text);
        let mut refused: Vec<&str> = loaded
            .problems
            .iter()
            .filter_map(|p| p.object.as_deref())
            .collect();
        refused.sort();
        assert_eq!(
            refused,
            [
                "HttpRoute tenant-acme/web.default",
                "Ingress tenant-acme/deep.default"
            ],
            "{:?}",
            loaded.problems
        );
        assert_eq!(loaded.store.http_routes.len(), 1, "the operator's stays");
    }

    /// A tenant's RouteTrafficPolicy refused when read stands refused on
    /// its own routes: the re-check does not drop it (which would leave
    /// them without it).
    #[test]
    fn a_refused_tenant_policy_stays_refused() {
        let text = "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: acme}\nspec: {cluster: acme}\n---\napiVersion: teapot.dev/v1alpha1\nkind: RouteTrafficPolicy\nmetadata: {name: p, namespace: tenant-acme}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]\n  inFlightPerClient: 0\n";
        let mut loaded = read(text, &Store::default());
        assert_eq!(loaded.problems.len(), 1, "{:?}", loaded.problems);
        admit(&mut loaded, &Store::default(), "example.net", &[]);
        assert_eq!(loaded.problems.len(), 1, "{:?}", loaded.problems);
        let id = NsName::new("tenant-acme", "p");
        assert!(loaded.store.route_traffic_policies.contains_key(&id));
        assert!(
            loaded
                .store
                .refused_route_traffic_policies
                .contains_key(&id)
        );
    }

    #[test]
    fn scopes_and_endpoints_follow_the_policy() {
        let acme = tenant("acme", "10.1.0.0/16");
        let other = tenant("other", "10.1.2.0/24");
        let tenants = [&acme, &other];
        let holdings = Tenancy::holdings(&tenants);
        let lb: Vec<IpNet> = vec!["10.1.9.0/24".parse().unwrap()];
        let tenancy = Tenancy::new(&tenants, "example.net", &lb, &holdings);
        let v = tenancy.get("tenant-acme").unwrap();
        let scope = |h: &str| v.scope(&HostPattern::parse(h).unwrap());
        assert_eq!(
            scope("web-shop.acme.lb.example.net"),
            Ok(HostScope::Assigned)
        );
        assert_eq!(scope("api.acme.example.com"), Ok(HostScope::Allowed));
        assert_eq!(scope("www.acme-corp.test"), Ok(HostScope::Custom));
        assert!(scope("web.other.lb.example.net").is_err());
        assert!(scope("*.acme-corp.test").is_err());
        let ok = |ip: &str| v.endpoint_allowed(ip.parse().unwrap());
        assert!(ok("10.1.0.5").is_ok());
        assert!(ok("10.1.9.5").is_err(), "LB cluster range");
        assert!(ok("10.1.2.5").is_err(), "another tenant's nodes");
        assert!(ok("10.2.0.5").is_err(), "outside nodeCIDRs");
        assert!(ok("127.0.0.1").is_err());
        assert!(ok("169.254.169.254").is_err());
        assert!(tenancy.get("default").is_none());
    }

    /// One tenant loading many large EndpointSlices (each admitted on its own) filled every replica's
    /// memory. Past `maxTotalBytes` its newest objects are refused; its
    /// older ones and the other tenant's stay.
    #[test]
    fn a_tenant_past_its_total_bytes_loses_its_newest_objects_only() {
        let tenant = |cluster: &str, net: u8, max: u64| {
            format!(
                "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: {cluster}}}\nspec: {{cluster: {cluster}, nodeCIDRs: [10.{net}.0.0/16], limits: {{maxTotalBytes: {max}}}}}\n"
            )
        };
        let slice = |ns: &str, net: u8, i: usize| {
            let endpoints: Vec<String> = (0..100)
                .map(|e| format!("{{addresses: [\"10.{net}.{}.{}\"]}}", e / 200, e % 200 + 1))
                .collect();
            format!(
                "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: big-{i:02}, namespace: {ns}, creationTimestamp: \"2024-01-{:02}T00:00:00Z\", labels: {{kubernetes.io/service-name: big, endpointslice.kubernetes.io/managed-by: sync.teapot.dev}}}}\naddressType: IPv4\nports: [{{name: http, port: 30080}}]\nendpoints: [{}]\n",
                i + 1,
                endpoints.join(", ")
            )
        };
        let mut docs = vec![tenant("noisy", 1, 40_000), tenant("quiet", 2, 40_000)];
        docs.extend((0..20).map(|i| slice("tenant-noisy", 1, i)));
        docs.extend((0..2).map(|i| slice("tenant-quiet", 2, i)));
        let mut loaded = loaded(&docs.join("---\n"));
        let one = first_slice_bytes(&loaded);
        admit(&mut loaded, &Store::default(), "example.net", &[]);

        let kept = |ns: &str| {
            let mut names: Vec<String> = loaded
                .store
                .endpoint_slices
                .keys()
                .filter(|k| k.namespace == ns)
                .map(|k| k.name.clone())
                .collect();
            names.sort();
            names
        };
        let fits = 40_000 / one;
        assert!((2..20).contains(&fits), "{one} bytes a slice");
        let noisy = kept("tenant-noisy");
        assert_eq!(noisy.len(), fits, "{noisy:?}");
        assert_eq!(
            noisy.first().map(String::as_str),
            Some("big-00"),
            "the oldest stay"
        );
        assert_eq!(kept("tenant-quiet"), ["big-00", "big-01"]);
        let refused = loaded
            .problems
            .iter()
            .filter(|p| p.message.contains("maxTotalBytes"))
            .count();
        assert_eq!(refused, 20 - fits);
    }

    /// A slice changed alone is judged against what its tenant's objects
    /// weighed at the last admission: one that takes the total past
    /// `maxTotalBytes`, or a tenant already past it, needs the whole
    /// store's admission (which says which objects go); one that fits is
    /// admitted by itself.
    #[test]
    fn a_slice_changed_alone_is_weighed_against_its_tenants_total() {
        let slice = |name: &str, n: usize| {
            let endpoints: Vec<String> = (0..n)
                .map(|e| format!("{{addresses: [\"10.1.0.{}\"]}}", e + 1))
                .collect();
            format!(
                "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}, namespace: tenant-a, labels: {{kubernetes.io/service-name: s, endpointslice.kubernetes.io/managed-by: sync.teapot.dev}}}}\naddressType: IPv4\nports: [{{name: http, port: 30080}}]\nendpoints: [{}]\n",
                endpoints.join(", ")
            )
        };
        let change = slice_change;
        let one = first_slice_bytes(&loaded(&slice("x", 10))) as u64;
        let tenant = format!(
            "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: a}}\nspec: {{cluster: a, nodeCIDRs: [10.1.0.0/16], limits: {{maxTotalBytes: {}}}}}\n",
            one * 5 / 2
        );
        // The tenant with `n` slices of ten endpoints, admitted whole.
        let admitted = |n: usize| {
            let slices: Vec<String> = (1..=n).map(|i| slice(&format!("s-{i}"), 10)).collect();
            let (loaded, verdicts, _) =
                admitted_keeping_verdicts(&format!("{tenant}---\n{}", slices.join("---\n")));
            (loaded, verdicts)
        };
        let (loaded, mut verdicts) = admitted(2);
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let store = loaded.store;
        let admit = |changes: &[SliceChange], verdicts: &mut TenantVerdicts| {
            admit_slice_changes(&store, changes, "example.net", &[], verdicts)
        };
        // The same size again: fits.
        assert_eq!(admit(&change(&slice("s-1", 10)), &mut verdicts), Ok(()));
        // Twice the size: past the total.
        assert!(admit(&change(&slice("s-1", 20)), &mut verdicts).is_err());
        // A third slice: past the total.
        assert!(admit(&change(&slice("s-3", 10)), &mut verdicts).is_err());
        // Refused by the policy: outside the tenant's nodes.
        let foreign = slice("s-1", 1).replace("10.1.0.1", "10.9.0.1");
        assert!(admit(&change(&foreign), &mut verdicts).is_err());
        // A removal frees room for a third slice.
        let gone = vec![SliceChange {
            id: NsName::new("tenant-a", "s-2"),
            slice: None,
        }];
        assert_eq!(admit(&gone, &mut verdicts), Ok(()));

        // A tenant already past its total is left to the whole admission.
        let (loaded, mut verdicts) = admitted(3);
        assert_eq!(loaded.problems.len(), 1, "{:?}", loaded.problems);
        let small = slice("s-1", 1);
        assert!(
            admit_slice_changes(
                &loaded.store,
                &change(&small),
                "example.net",
                &[],
                &mut verdicts
            )
            .is_err()
        );
    }

    /// A slice changed alone is judged with what the last admission read
    /// of the Tenants: every other tenant's nodes stay out of reach (tenant
    /// a's nodes include b's, whose node an endpoint of a's may not be),
    /// and a store whose Tenants are other objects than those it read is
    /// left to the whole admission.
    #[test]
    fn a_slice_changed_alone_is_judged_with_the_tenants_last_read() {
        let tenants = "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: a}\nspec: {cluster: a, nodeCIDRs: [10.0.0.0/8]}\n---\napiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: b}\nspec: {cluster: b, nodeCIDRs: [10.2.0.0/16]}\n";
        let slice = |address: &str| {
            format!(
                "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: s, namespace: tenant-a, labels: {{kubernetes.io/service-name: s, endpointslice.kubernetes.io/managed-by: sync.teapot.dev}}}}\naddressType: IPv4\nports: [{{name: http, port: 30080}}]\nendpoints: [{{addresses: [\"{address}\"]}}]\n"
            )
        };
        let change = |address: &str| slice_change(&slice(address));
        let (loaded, mut verdicts, refused) =
            admitted_keeping_verdicts(&format!("{tenants}---\n{}", slice("10.1.0.1")));
        assert!(refused.is_empty() && loaded.problems.is_empty());
        let admit = |store: &Store, changes: &[SliceChange], verdicts: &mut TenantVerdicts| {
            admit_slice_changes(store, changes, "example.net", &[], verdicts)
        };
        let store = &loaded.store;
        assert_eq!(admit(store, &change("10.3.0.1"), &mut verdicts), Ok(()));
        assert!(admit(store, &change("10.2.0.1"), &mut verdicts).is_err());
        // The same Tenants read again are other objects.
        let reread = self::loaded(&format!("{tenants}---\n{}", slice("10.1.0.1")));
        assert_eq!(
            admit(&reread.store, &change("10.3.0.1"), &mut verdicts),
            Err("no admission of these Tenants to build on")
        );
    }

    /// Two Tenants naming one namespace: the first by name holds it for
    /// the check, as for the compile (`Tenancy`).
    #[test]
    fn a_namespace_two_tenants_name_is_the_first_ones() {
        let tenant = |name: &str| {
            format!(
                "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: {name}}}\nspec: {{cluster: {name}, namespace: shared}}\n"
            )
        };
        let loaded = loaded(&format!("{}---\n{}", tenant("b"), tenant("a")));
        let index = TenantsByNamespace::of(&loaded.store);
        assert_eq!(
            index.get("shared").map(|t| t.spec.cluster.as_str()),
            Some("a")
        );
        let tenants: Vec<&Tenant> = index.tenants().collect();
        let holdings = Tenancy::holdings(&tenants);
        let tenancy = Tenancy::new(&tenants, "example.net", &[], &holdings);
        assert_eq!(tenancy.get("shared").map(|t| t.cluster), Some("a"));
        assert!(index.same_as(&loaded.store));
        assert!(!index.same_as(&self::loaded(&tenant("a")).store));
    }

    /// `text` read as one file and admitted whole, with the verdicts the
    /// admission kept and what it refused.
    fn admitted_keeping_verdicts(text: &str) -> (Loaded, TenantVerdicts, Vec<ObjectKey>) {
        let mut loaded = loaded(text);
        let mut verdicts = TenantVerdicts::default();
        let refused = admit_cached(
            &mut loaded.store,
            &mut loaded.problems,
            &Store::default(),
            "example.net",
            &[],
            &mut verdicts,
            None,
        );
        (loaded, verdicts, refused)
    }

    /// The first EndpointSlice of `text`, as a change of it alone.
    fn slice_change(text: &str) -> Vec<SliceChange> {
        let loaded = loaded(text);
        let (id, slice) = loaded.store.endpoint_slices.into_iter().next().unwrap();
        vec![SliceChange {
            id,
            slice: Some(slice),
        }]
    }

    /// `text` read as one file over `previous`, problems and all.
    fn read(text: &str, previous: &Store) -> Loaded {
        let mut loaded = Loaded::default();
        crate::manifests::load_text(std::path::Path::new("t.yaml"), text, previous, &mut loaded);
        loaded
    }

    /// The size as JSON of the first EndpointSlice `loaded` holds.
    fn first_slice_bytes(loaded: &Loaded) -> usize {
        let slice = loaded.store.endpoint_slices.values().next().unwrap();
        slice.object.source_bytes()
    }

    /// `text` read as one file with no problem.
    fn loaded(text: &str) -> Loaded {
        let loaded = read(text, &Store::default());
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        loaded
    }

    /// `text` read as one file with no problem, then admitted.
    pub(super) fn loaded_and_admitted(text: &str) -> Loaded {
        let mut loaded = loaded(text);
        admit(&mut loaded, &Store::default(), "example.net", &[]);
        loaded
    }

    /// The store keeps the last-applied annotation's key alone
    /// (`validate::parse_object`): a tenant's object carrying it is
    /// refused as before, by the key; one without is served.
    #[test]
    fn a_tenant_object_with_the_last_applied_annotation_stays_refused() {
        let ingress = |name: &str, annotation: &str| {
            format!(
                "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: tenant-acme\n{annotation}\
                 spec:\n  ingressClassName: teapot\n  rules: [{{host: {name}.acme.example.org}}]\n"
            )
        };
        let text = format!(
            "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: acme}}\nspec: {{cluster: acme, allowedDomains: [acme.example.org]}}\n{}{}",
            ingress(
                "applied",
                "  annotations: {kubectl.kubernetes.io/last-applied-configuration: '{}'}\n  managedFields: [{manager: kubectl}]\n"
            ),
            ingress("plain", "  managedFields: [{manager: kubectl}]\n"),
        );
        let loaded = loaded_and_admitted(&text);
        assert_eq!(loaded.problems.len(), 1, "{:?}", loaded.problems);
        let p = &loaded.problems[0];
        assert_eq!(p.object.as_deref(), Some("Ingress tenant-acme/applied"));
        assert!(
            p.message
                .contains("kubectl.kubernetes.io/last-applied-configuration"),
            "{p:?}"
        );
        assert!(
            loaded
                .store
                .ingresses
                .contains_key(&NsName::new("tenant-acme", "plain"))
        );
    }
}

#[cfg(test)]
mod service_tests {
    use super::*;

    const TENANT: &str = "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: acme}\nspec: {cluster: acme, allowedDomains: [acme.example.org], limits: {maxTotalBytes: MAX}}\n";

    fn service(name: &str, meta: &str, spec: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: tenant-acme{meta}}}\nspec: {spec}\n"
        )
    }

    fn admitted(max: usize, services: &[String]) -> Loaded {
        let text = format!(
            "{}---\n{}",
            TENANT.replace("MAX", &max.to_string()),
            services.join("---\n")
        );
        super::tests::loaded_and_admitted(&text)
    }

    /// The store keeps Services compact ([`crate::service`]); the tenant
    /// rules still judge every field as written. One hostile Service per
    /// rule family, most of them setting a field the compact form keeps
    /// outside its inline part: each is refused for that field, and a
    /// plain one is served.
    #[test]
    fn a_compact_tenant_service_is_judged_as_written() {
        let lb = "type: LoadBalancer, loadBalancerClass: teapot.dev/lb, allocateLoadBalancerNodePorts: false";
        let cases: &[(&str, &str, String, &str)] = &[
            // Metadata: annotations, labels, strings in the rest.
            (
                "annotated",
                ", annotations: {nginx.ingress.kubernetes.io/rewrite-target: /}",
                "{ports: [{port: 80}]}".into(),
                "metadata.annotations",
            ),
            (
                "labelled",
                ", labels: {kubernetes.io/owned: x}",
                "{ports: [{port: 80}]}".into(),
                "metadata.labels",
            ),
            (
                "generated",
                ", generateName: \"a\\u0007\"",
                "{ports: [{port: 80}]}".into(),
                "metadata.generateName",
            ),
            // The spec: kinds of Service, addresses, node ports, ranges.
            (
                "external",
                "",
                "{type: ExternalName, externalName: metadata.google.internal}".into(),
                "spec.type",
            ),
            (
                "named",
                "",
                "{externalName: metadata.google.internal, ports: [{port: 80}]}".into(),
                "spec.externalName",
            ),
            (
                "selecting",
                "",
                "{selector: {app: web}, ports: [{port: 80}]}".into(),
                "spec.selector",
            ),
            (
                "capturing",
                "",
                "{externalIPs: [192.0.2.1], ports: [{port: 80}]}".into(),
                "spec.externalIPs",
            ),
            (
                "pinned",
                "",
                format!("{{{lb}, loadBalancerIP: 192.0.2.1, ports: [{{port: 80}}]}}"),
                "spec.loadBalancerIP",
            ),
            (
                "ranged",
                "",
                format!(
                    "{{{lb}, loadBalancerSourceRanges: [10.0.0.1], ports: [{{port: 80}}]}}"
                ),
                "spec.loadBalancerSourceRanges[0]",
            ),
            (
                "checked",
                "",
                format!("{{{lb}, healthCheckNodePort: 30000, ports: [{{port: 80}}]}}"),
                "spec.healthCheckNodePort",
            ),
            (
                "local",
                "",
                format!("{{{lb}, externalTrafficPolicy: Local, ports: [{{port: 80}}]}}"),
                "spec.externalTrafficPolicy",
            ),
            (
                "classless",
                "",
                "{type: LoadBalancer, allocateLoadBalancerNodePorts: false, ports: [{port: 80}]}"
                    .into(),
                "spec.loadBalancerClass",
            ),
            (
                "noded",
                "",
                "{ports: [{port: 80, nodePort: 30080}]}".into(),
                "spec.ports[0].nodePort",
            ),
            (
                "affine",
                "",
                "{ports: [{port: 80}], sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}, trafficDistribution: \"x\\u0007\"}".into(),
                "spec.trafficDistribution",
            ),
        ];
        let mut docs: Vec<String> = cases
            .iter()
            .map(|(name, meta, spec, _)| service(name, meta, spec))
            .collect();
        docs.push(service("plain", "", "{ports: [{port: 80}]}"));
        let loaded = admitted(1 << 20, &docs);
        for (name, _, _, field) in cases {
            let object = format!("Service tenant-acme/{name}");
            let p = loaded
                .problems
                .iter()
                .find(|p| p.object.as_deref() == Some(&object))
                .unwrap_or_else(|| panic!("{object} was admitted"));
            let got = p.field.as_deref().unwrap_or_default();
            assert!(got.starts_with(field), "{object}: {got} ({p:?})");
            assert!(
                !loaded
                    .store
                    .services
                    .contains_key(&NsName::new("tenant-acme", *name))
            );
        }
        assert_eq!(loaded.problems.len(), cases.len(), "{:?}", loaded.problems);
        assert!(
            loaded
                .store
                .services
                .contains_key(&NsName::new("tenant-acme", "plain"))
        );
    }

    /// `maxTotalBytes` weighs a Service by its JSON as written, fields
    /// kept outside the compact form's inline part included: with room
    /// for two and a half, the newest of three is refused.
    #[test]
    fn a_compact_service_weighs_its_json_as_written() {
        let docs: Vec<String> = (1..=3)
            .map(|i| {
                service(
                    &format!("s{i}"),
                    &format!(", creationTimestamp: \"2024-01-0{i}T00:00:00Z\", finalizers: [teapot.dev/one-rather-long-finalizer-name-to-weigh]"),
                    "{ports: [{port: 80}], sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 600}}, publishNotReadyAddresses: true}",
                )
            })
            .collect();
        let typed: k8s_openapi::api::core::v1::Service = serde_yaml::from_str(&docs[0]).unwrap();
        let one = admission::json_size(&typed);
        let loaded = admitted(one * 5 / 2, &docs);
        let refused: Vec<_> = loaded
            .problems
            .iter()
            .filter_map(|p| p.object.as_deref())
            .collect();
        assert_eq!(refused, ["Service tenant-acme/s3"], "{:?}", loaded.problems);
        // The same three in the compact form alone (what the store
        // keeps inline) would all fit: the weight is the source's.
        let mut inline = typed.clone();
        inline.metadata.finalizers = None;
        inline.spec.as_mut().unwrap().session_affinity_config = None;
        inline.spec.as_mut().unwrap().publish_not_ready_addresses = None;
        assert!(3 * admission::json_size(&inline) <= one * 5 / 2);
    }
}
