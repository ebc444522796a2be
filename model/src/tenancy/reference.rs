//! The tenant check as one pass over every object, every claim in age
//! order against every older one: the reference the check by difference
//! (module `verdicts`) is held equal to.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use teapot_api::admission::{self, AdmissionContext, Holder, Holdings, TenantObjectRef, Violation};
use teapot_api::regex::RegexCost;

use super::{Weight, claimed_hosts, judge_slice, key};
use crate::manifests::Problem;
use crate::store::{Kind, NsName, ObjectKey, Origin, Store};

/// [`super::admit_cached`] by the reference passes.
pub(super) fn reference_admit(
    store: &mut Store,
    problems: &mut Vec<Problem>,
    previous: &Store,
    domain: &str,
    lb_networks: &[ipnet::IpNet],
) -> Vec<ObjectKey> {
    let mut refused = Vec::new();
    if reference_pass(
        store,
        problems,
        Some(previous),
        domain,
        lb_networks,
        &mut refused,
    ) {
        reference_pass(store, problems, None, domain, lb_networks, &mut refused);
    }
    refused.sort_unstable();
    refused.dedup();
    refused
}

fn reference_pass(
    loaded: &mut Store,
    problems: &mut Vec<Problem>,
    previous: Option<&Store>,
    domain: &str,
    lb_networks: &[ipnet::IpNet],
    refused_keys: &mut Vec<ObjectKey>,
) -> bool {
    if loaded.tenants.is_empty() {
        return false;
    }
    let store = &*loaded;
    let by_namespace = super::TenantsByNamespace::of(store);
    let operator_ingresses: Vec<(String, Arc<Ingress>)> = store
        .ingresses
        .iter()
        .filter(|(id, _)| !by_namespace.contains_key(&id.namespace))
        .map(|(id, i)| (id.namespace.clone(), i.object.clone()))
        .collect();
    let mut holdings = Holdings::from_objects(
        by_namespace.tenants(),
        operator_ingresses.iter().map(|(ns, i)| (ns.as_str(), &**i)),
    );
    let mut refused: Vec<(ObjectKey, Origin, Vec<Violation>)> = Vec::new();
    let mut loaded_bytes: Vec<Weighed> = Vec::new();

    // Objects that claim hosts, Ingresses and Gateway API ones together,
    // oldest first: the first claimant holds a host across both APIs.
    let mut claimants: Vec<Claimant<'_>> = Vec::new();
    for (id, s) in &store.ingresses {
        claimants.push(Claimant::new(
            Kind::Ingress,
            id,
            &s.origin,
            TenantObjectRef::Ingress(&s.object),
        ));
    }
    for (id, s) in &store.gateways {
        claimants.push(Claimant::new(
            Kind::Gateway,
            id,
            &s.origin,
            TenantObjectRef::Gateway(&s.object),
        ));
    }
    for (id, s) in &store.listener_sets {
        claimants.push(Claimant::new(
            Kind::ListenerSet,
            id,
            &s.origin,
            TenantObjectRef::ListenerSet(&s.object.set),
        ));
    }
    for (id, s) in &store.http_routes {
        claimants.push(Claimant::new(
            Kind::HttpRoute,
            id,
            &s.origin,
            TenantObjectRef::HttpRoute(&s.object),
        ));
    }
    for (id, s) in &store.grpc_routes {
        claimants.push(Claimant::new(
            Kind::GrpcRoute,
            id,
            &s.origin,
            TenantObjectRef::GrpcRoute(&s.object),
        ));
    }
    for (id, s) in &store.tls_routes {
        claimants.push(Claimant::new(
            Kind::TlsRoute,
            id,
            &s.origin,
            TenantObjectRef::TlsRoute(&s.object),
        ));
    }
    // The operator's Gateway API hosts are held before any tenant's.
    for c in claimants
        .iter()
        .filter(|c| !by_namespace.contains_key(&c.id.namespace))
    {
        if c.kind != Kind::Ingress {
            let holder = Holder::Operator {
                namespace: c.id.namespace.clone(),
            };
            for host in claimed_hosts(c.object) {
                holdings.insert_gateway_host(holder.clone(), &host);
            }
        }
    }
    claimants.retain(|c| by_namespace.contains_key(&c.id.namespace));
    // Keyed once each: the key copies the time out of the object.
    claimants.sort_by_cached_key(|c| c.age());
    for c in claimants {
        let tenant = by_namespace
            .get(&c.id.namespace)
            .expect("claimants were kept for their tenant");
        let ctx = AdmissionContext::new(tenant, domain, lb_networks, &holdings);
        let size = admission::json_size(&c.object);
        let violations = admission::check_typed_sized(&ctx, &c.id.namespace, c.object, size);
        if !violations.is_empty() {
            refused.push((key(c.kind, c.id), c.origin.clone(), violations));
            continue;
        }
        let holder = Holder::Tenant(tenant.spec.cluster.clone());
        if let TenantObjectRef::Ingress(_) = c.object {
            for host in super::verdicts::held_hosts(c.object) {
                holdings.insert(holder.clone(), &host);
            }
        } else {
            for host in claimed_hosts(c.object) {
                holdings.insert_gateway_host(holder.clone(), &host);
            }
            loaded_bytes.push(Weighed {
                created: c.object.creation_timestamp().cloned(),
                key: key(c.kind, c.id),
                origin: c.origin.clone(),
                size,
                regex: admission::object_regex_cost(c.object),
            });
        }
    }
    for (key, violations) in super::gateway_classes_in_tenants(store, &by_namespace) {
        let origin = store.gateway_classes[&key.name].origin.clone();
        refused.push((key, origin, violations));
    }
    let mut judge = |kind: Kind, id: &NsName, origin: &Origin, object: TenantObjectRef<'_>| {
        let Some(tenant) = by_namespace.get(&id.namespace) else {
            return;
        };
        let ctx = AdmissionContext::new(tenant, domain, lb_networks, &holdings);
        let size = admission::json_size(&object);
        let violations = admission::check_typed_sized(&ctx, &id.namespace, object, size);
        if violations.is_empty() {
            loaded_bytes.push(Weighed {
                created: object.creation_timestamp().cloned(),
                key: key(kind, id),
                origin: origin.clone(),
                size,
                regex: RegexCost::default(),
            });
        } else {
            refused.push((key(kind, id), origin.clone(), violations));
        }
    };
    for (id, s) in &store.services {
        if !by_namespace.contains_key(&id.namespace) {
            continue;
        }
        // The compact form keeps every field (crate::service): the rules
        // judge, and the quota weighs, the Service as written.
        let typed = s.object.to_typed();
        judge(
            Kind::Service,
            id,
            &s.origin,
            TenantObjectRef::Service(&typed),
        );
    }
    for (id, s) in &store.secrets {
        judge(
            Kind::Secret,
            id,
            &s.origin,
            TenantObjectRef::Secret(&s.object.source),
        );
    }
    for (id, s) in &store.ca_secrets {
        judge(
            Kind::Secret,
            id,
            &s.origin,
            TenantObjectRef::Secret(&s.object),
        );
    }
    for (id, s) in &store.tcp_routes {
        judge(
            Kind::TcpRoute,
            id,
            &s.origin,
            TenantObjectRef::TcpRoute(&s.object),
        );
    }
    for (id, s) in &store.udp_routes {
        judge(
            Kind::UdpRoute,
            id,
            &s.origin,
            TenantObjectRef::UdpRoute(&s.object),
        );
    }
    for (id, s) in &store.reference_grants {
        judge(
            Kind::ReferenceGrant,
            id,
            &s.origin,
            TenantObjectRef::ReferenceGrant(&s.object),
        );
    }
    for (id, s) in &store.backend_tls_policies {
        judge(
            Kind::BackendTlsPolicy,
            id,
            &s.origin,
            TenantObjectRef::BackendTlsPolicy(&s.object),
        );
    }
    for (id, s) in &store.route_traffic_policies {
        // A refusal standing in a policy's place (its metadata and
        // targetRefs alone, crate::validate::Parsed::Refused) refuses its
        // own namespace's routes; judged, it would be dropped for setting
        // nothing and leave them without what the tenant asked for.
        if store.refused_route_traffic_policies.contains_key(id) {
            continue;
        }
        judge(
            Kind::RouteTrafficPolicy,
            id,
            &s.origin,
            TenantObjectRef::RouteTrafficPolicy(&s.object),
        );
    }
    for (id, s) in &store.config_maps {
        judge(
            Kind::ConfigMap,
            id,
            &s.origin,
            TenantObjectRef::ConfigMap(&s.object),
        );
    }

    for (id, s) in &store.endpoint_slices {
        let Some(tenant) = by_namespace.get(&id.namespace) else {
            continue;
        };
        // The rules run on what the proxy kept, which is all it acts on
        // (crate::endpoints), plus what was found in the dropped fields;
        // the quota counts the slice as written.
        let size = s.object.source_bytes();
        let ctx = AdmissionContext::new(tenant, domain, lb_networks, &holdings);
        let violations = judge_slice(&ctx, &id.namespace, &s.object);
        if violations.is_empty() {
            loaded_bytes.push(Weighed {
                created: s.object.metadata.creation_timestamp.clone(),
                key: key(Kind::EndpointSlice, id),
                origin: s.origin.clone(),
                size,
                regex: RegexCost::default(),
            });
        } else {
            refused.push((key(Kind::EndpointSlice, id), s.origin.clone(), violations));
        }
    }
    refused.extend(over_total(loaded_bytes, &by_namespace, &mut HashMap::new()));

    super::refuse(loaded, problems, previous, refused, refused_keys)
}

/// An object that claims hosts, in the order of the first-claimant rule.
struct Claimant<'s> {
    kind: Kind,
    id: &'s NsName,
    origin: &'s Origin,
    object: TenantObjectRef<'s>,
}

impl<'s> Claimant<'s> {
    fn new(kind: Kind, id: &'s NsName, origin: &'s Origin, object: TenantObjectRef<'s>) -> Self {
        Claimant {
            kind,
            id,
            origin,
            object,
        }
    }

    /// Oldest first by `creationTimestamp`, objects without one after,
    /// then by namespace/name and kind (as [`crate::store::age_key`]).
    fn age(&self) -> (bool, Option<k8s_openapi::jiff::Timestamp>, &'s NsName, Kind) {
        let created = self.object.creation_timestamp().map(|t| t.0);
        (created.is_none(), created, self.id, self.kind)
    }
}

/// The hostnames a Gateway API object claims.
/// The hostnames a Gateway API object holds once admitted (a Gateway's
/// listener hostnames, a route's `hostnames`); none for other kinds. The
/// webhook's state holds them the same way (first claimant).
struct Weighed {
    created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    key: ObjectKey,
    origin: Origin,
    size: usize,
    /// Its regular expressions (routes only).
    regex: RegexCost,
}

/// `limits.maxTotalBytes`: each tenant's objects are counted oldest first
/// (then by kind and name); those that take its total past the limit are
/// refused, so what a tenant already serves keeps serving and one tenant
/// cannot fill every replica's memory.
fn over_total(
    mut objects: Vec<Weighed>,
    by_namespace: &super::TenantsByNamespace,
    weights: &mut HashMap<String, Weight>,
) -> Vec<(ObjectKey, Origin, Vec<Violation>)> {
    weights.clear();
    objects.sort_by(|a, b| {
        (&a.key.namespace, a.created.is_none(), &a.created, &a.key).cmp(&(
            &b.key.namespace,
            b.created.is_none(),
            &b.created,
            &b.key,
        ))
    });
    let mut out = Vec::new();
    let mut totals: HashMap<&str, (u64, RegexCost)> = HashMap::new();
    for o in &objects {
        let Some(tenant) = by_namespace.get(&o.key.namespace) else {
            continue;
        };
        let limits = teapot_api::tenant::TenantLimits::effective(tenant.spec.limits.as_ref());
        let max = limits.max_total_bytes;
        let (total, regex) = totals.entry(&o.key.namespace).or_default();
        let max_regex = RegexCost {
            count: limits.max_regexes,
            bytes: limits.max_regex_bytes,
        };
        let refusal = if o.regex != RegexCost::default() && regex.plus(o.regex).exceeds(max_regex) {
            Some(format!(
                "with this route the tenant's routes hold more regular expressions than its limits allow (maxRegexes = {}, maxRegexBytes = {} KiB); older routes keep theirs",
                max_regex.count,
                max_regex.bytes / 1024
            ))
        } else if *total + o.size as u64 > max {
            Some(format!(
                "the tenant's objects are more than its limit of {max} bytes as JSON (maxTotalBytes) with this one; older objects keep theirs"
            ))
        } else {
            None
        };
        if let Some(message) = refusal {
            weights.entry(o.key.namespace.clone()).or_default().over = true;
            out.push((
                o.key.clone(),
                o.origin.clone(),
                vec![Violation::new(admission::OBJECT_FIELD, message)],
            ));
        } else {
            *total += o.size as u64;
            *regex = regex.plus(o.regex);
            weights.entry(o.key.namespace.clone()).or_default().bytes += o.size as u64;
        }
    }
    out
}
