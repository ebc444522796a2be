//! The LB-cluster copies of tenant Gateways and routes and
//! their status on the way back. Pure functions over the objects' JSON
//! form, as [`crate::mirror`] is for Ingresses: the five route kinds share
//! the shapes handled here (`parentRefs`, `rules[].backendRefs`, mirror
//! filters, `status.parents`) under different generated types.
//!
//! Names follow the Ingress scheme: a Gateway or route `NAME` of namespace
//! `NS` becomes `NAME.NS` in the tenant's LB namespace (so a Gateway's
//! assigned hostname is `NAME-NS.CLUSTER.lb.DOMAIN`, built like an
//! Ingress's), a Service or Secret `NS-NAME-<hash5>`. Every copy lives in
//! one LB namespace, so a reference across tenant namespaces becomes a
//! reference within it; the agent keeps only the ones the tenant cluster
//! allows (a ReferenceGrant there, a listener's `allowedRoutes`), so the
//! LB copies need neither `namespace` fields nor ReferenceGrants.
//!
//! A BackendTLSPolicy `NAME` of `NS` becomes `NAME.NS` too, its target
//! Services and its `caCertificateRefs` ConfigMaps renamed as mirrored
//! Services are (`NS-NAME-<hash5>`); each ConfigMap is copied with its
//! `ca.crt` only.
//!
//! A Gateway's backend client certificate (`spec.tls.backend.
//! clientCertificateRef`) is mirrored and renamed as its listeners'
//! certificates are.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use serde_json::{Map, Value, json};
use teapot_api::admission::CA_CERT_KEY;
use teapot_api::gateway_api::generated::reference_grants::ReferenceGrantSpec;
use teapot_api::gateway_api::{GROUP, Gateway};
use teapot_api::hostname::{mirrored_ingress_name, mirrored_service_name};
use teapot_api::names::{GATEWAY_CLASS, GATEWAY_CONTROLLER_NAME};
use teapot_model::attachment;

use crate::Error;
use crate::mirror::{lb_meta, mirrored_secret_name, source_of_lb_ingress, travelling_annotations};

/// A namespaced reference: `(namespace, name)`.
pub type Ref = (String, String);

/// Whether teapot serves this Gateway: `spec.gatewayClassName: teapot`.
pub fn is_ours(gateway: &Gateway) -> bool {
    gateway.spec.gateway_class_name == GATEWAY_CLASS
}

/// A cross-namespace reference the tenant cluster must allow with a
/// ReferenceGrant in the target namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CrossRef {
    /// Kind of the referring object (`Gateway`, `HTTPRoute`, ...).
    pub from_kind: String,
    pub from_namespace: String,
    /// `Service` or `Secret`.
    pub to_kind: &'static str,
    pub to: Ref,
}

/// Whether `grants` (ReferenceGrants of `cross.to.0`, as JSON) allow
/// `cross`, by the specification's rules: a `from` entry of the referring
/// kind and namespace, and a `to` entry of the target kind whose name is
/// unset or the target's.
pub fn granted(grants: &[Value], cross: &CrossRef) -> bool {
    grants.iter().any(|g| {
        // A grant the schema would refuse grants nothing.
        serde_json::from_value::<ReferenceGrantSpec>(g["spec"].clone()).is_ok_and(|spec| {
            attachment::grant_permits(
                &spec,
                &cross.from_kind,
                &cross.from_namespace,
                cross.to_kind,
                &cross.to.1,
            )
        })
    })
}

/// What a copy needs from the tenant cluster besides itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Services to mirror (backends, mirrors).
    pub services: BTreeSet<Ref>,
    /// TLS Secrets to mirror (listener certificates).
    pub secrets: BTreeSet<Ref>,
    /// Cross-namespace references, each to be checked against the
    /// ReferenceGrants of its target namespace.
    pub cross: Vec<CrossRef>,
}

fn own_namespace(object: &Value) -> Result<String, Error> {
    object["metadata"]["namespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .ok_or_else(|| Error::Invalid {
            object: format!(
                "{} {}",
                object["kind"].as_str().unwrap_or("object"),
                object["metadata"]["name"].as_str().unwrap_or("")
            ),
            field: "metadata.namespace".into(),
            message: "is missing".into(),
        })
}

/// The certificate Secrets a Gateway names (its listeners' and its
/// backend client certificate), with the cross-namespace ones to check.
pub fn gateway_needs(gateway: &Value) -> Result<Needs, Error> {
    let ns = own_namespace(gateway)?;
    let mut needs = Needs::default();
    let listener_refs = gateway["spec"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["tls"]["certificateRefs"].as_array().into_iter().flatten());
    let client_ref = gateway["spec"]
        .pointer(CLIENT_CERTIFICATE_REF)
        .filter(|r| r.is_object());
    for r in listener_refs.chain(client_ref) {
        if !is_core(r, "Secret") {
            continue;
        }
        let target = target_of(r, &ns);
        if target.0 != ns {
            needs.cross.push(CrossRef {
                from_kind: "Gateway".into(),
                from_namespace: ns.clone(),
                to_kind: "Secret",
                to: target.clone(),
            });
        }
        needs.secrets.insert(target);
    }
    Ok(needs)
}

/// The Services a route forwards or mirrors to, with the cross-namespace
/// ones to check.
pub fn route_needs(route: &Value) -> Result<Needs, Error> {
    let ns = own_namespace(route)?;
    let kind = route["kind"].as_str().unwrap_or("").to_string();
    let mut needs = Needs::default();
    for r in backend_refs(route) {
        if !is_core(r, "Service") {
            continue;
        }
        let target = target_of(r, &ns);
        if target.0 != ns {
            needs.cross.push(CrossRef {
                from_kind: kind.clone(),
                from_namespace: ns.clone(),
                to_kind: "Service",
                to: target.clone(),
            });
        }
        needs.services.insert(target);
    }
    Ok(needs)
}

/// Every backend reference of a route: `rules[].backendRefs[]`, and the
/// `backendRef` of RequestMirror filters on rules and on backends.
fn mirror_refs(filters: &Value) -> Vec<&Value> {
    filters
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.get("requestMirror")?.get("backendRef"))
        .collect()
}

fn backend_refs(route: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for rule in route["spec"]["rules"].as_array().into_iter().flatten() {
        let mirrors = mirror_refs;
        out.extend(mirrors(&rule["filters"]));
        for b in rule["backendRefs"].as_array().into_iter().flatten() {
            out.push(b);
            out.extend(mirrors(&b["filters"]));
        }
    }
    out
}

fn backend_refs_mut(route: &mut Value, mut f: impl FnMut(&mut Value)) {
    let rules = route
        .get_mut("spec")
        .and_then(|s| s.get_mut("rules"))
        .and_then(Value::as_array_mut);
    let Some(rules) = rules else {
        return;
    };
    let mirrors = |filters: &mut Value, f: &mut dyn FnMut(&mut Value)| {
        for filter in filters.as_array_mut().into_iter().flatten() {
            if let Some(b) = filter
                .get_mut("requestMirror")
                .and_then(|m| m.get_mut("backendRef"))
            {
                f(b);
            }
        }
    };
    // `get_mut`, not indexing: indexing a missing key inserts a null.
    for rule in rules {
        if let Some(filters) = rule.get_mut("filters") {
            mirrors(filters, &mut f);
        }
        let backends = rule.get_mut("backendRefs").and_then(Value::as_array_mut);
        for b in backends.into_iter().flatten() {
            f(b);
            if let Some(filters) = b.get_mut("filters") {
                mirrors(filters, &mut f);
            }
        }
    }
}

/// Where in a Gateway's spec its backend client certificate is named.
const CLIENT_CERTIFICATE_REF: &str = "/tls/backend/clientCertificateRef";

/// A reference of the core group and `kind` (the default kind of a
/// backend is Service, of a certificate Secret).
fn is_core(r: &Value, kind: &str) -> bool {
    r["group"].as_str().unwrap_or("").is_empty() && r["kind"].as_str().unwrap_or(kind) == kind
}

fn target_of(r: &Value, own: &str) -> Ref {
    (
        r["namespace"].as_str().unwrap_or(own).to_string(),
        r["name"].as_str().unwrap_or("").to_string(),
    )
}

/// The metadata of a copy, as [`crate::mirror`] writes it.
fn copy_metadata(object: &Value, ns: &str, lb_namespace: &str) -> Result<Value, Error> {
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    let annotations = object["metadata"]["annotations"]
        .as_object()
        .map(|a| {
            a.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let uid = object["metadata"]["uid"].as_str().map(str::to_string);
    let meta = lb_meta(
        mirrored_ingress_name(ns, name),
        lb_namespace,
        ns,
        name,
        uid.as_ref(),
        travelling_annotations(&annotations),
    );
    Ok(serde_json::to_value(meta)?)
}

/// The LB Gateway `<name>.<namespace>`: certificate references renamed to
/// their mirrors (those in `refused`, not granted in the tenant cluster,
/// are dropped, so the listener reports them invalid), and each listener's
/// `allowedRoutes.namespaces` set to `Same`: on the LB side every copy
/// shares one namespace, and the agent mirrors only the routes the tenant's
/// Gateway allows. Anything else is copied as written (addresses,
/// infrastructure): the webhook refuses what a tenant may not set, with
/// its reasons, rather than the agent dropping it silently.
pub fn lb_gateway(
    gateway: &Value,
    lb_namespace: &str,
    refused: &[CrossRef],
) -> Result<Value, Error> {
    let ns = own_namespace(gateway)?;
    let mut spec = gateway["spec"].clone();
    lb_listeners(&mut spec, &ns, refused);
    // ListenerSets attach on the LB side from the copy's namespace, where
    // every copy lives: the agent mirrors only those the tenant's Gateway
    // allows ([`allows_listener_set`]), so any `from` but None is Same.
    if let Some(rule) = spec
        .get_mut("allowedListeners")
        .and_then(|a| a.as_object_mut())
        .filter(|a| a.get("namespaces").is_some_and(|n| n["from"] != "None"))
    {
        rule.insert("namespaces".into(), json!({"from": "Same"}));
    }
    // Renamed even when refused: the mirror is then never made, so the LB
    // Gateway reports the reference invalid and its TLS backends answer
    // 503, where dropping it would connect without the certificate.
    if let Some(r) = spec
        .pointer_mut(CLIENT_CERTIFICATE_REF)
        .filter(|r| is_core(r, "Secret"))
    {
        rename_secret_ref(r, &ns);
    }
    Ok(json!({
        "apiVersion": gateway["apiVersion"],
        "kind": "Gateway",
        "metadata": copy_metadata(gateway, &ns, lb_namespace)?,
        "spec": spec,
    }))
}

/// A Gateway's or ListenerSet's `spec.listeners` as the LB copy has them:
/// `allowedRoutes.namespaces` set to `Same`, certificate references
/// renamed to their mirrors (those in `refused` dropped).
fn lb_listeners(spec: &mut Value, ns: &str, refused: &[CrossRef]) {
    let listeners = spec.get_mut("listeners").and_then(Value::as_array_mut);
    for l in listeners.into_iter().flatten() {
        if let Some(ns_rule) = l
            .get_mut("allowedRoutes")
            .and_then(|a| a.as_object_mut())
            .filter(|a| a.contains_key("namespaces"))
        {
            ns_rule.insert("namespaces".into(), json!({"from": "Same"}));
        }
        if let Some(refs) = l
            .get_mut("tls")
            .and_then(|t| t.get_mut("certificateRefs"))
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| {
                !is_core(r, "Secret")
                    || !refused
                        .iter()
                        .any(|c| c.to_kind == "Secret" && c.to == target_of(r, ns))
            });
            for r in refs.iter_mut().filter(|r| is_core(r, "Secret")) {
                rename_secret_ref(r, ns);
            }
        }
    }
}

/// The Gateway a tenant ListenerSet names, as `(namespace, name)`.
pub fn listener_set_parent(set: &Value) -> Result<Ref, Error> {
    let ns = own_namespace(set)?;
    Ok(target_of(&set["spec"]["parentRef"], &ns))
}

/// The certificate Secrets a ListenerSet's listeners name, with the
/// cross-namespace ones to check (granted to kind ListenerSet).
pub fn listener_set_needs(set: &Value) -> Result<Needs, Error> {
    let mut needs = gateway_needs(set)?;
    for c in &mut needs.cross {
        c.from_kind = "ListenerSet".into();
    }
    Ok(needs)
}

/// Whether the tenant's teapot Gateway takes ListenerSets of
/// `set_namespace`: `allowedListeners.namespaces.from` Same or All; None
/// (the default) takes none, and Selector needs namespace labels the agent
/// does not read, so it takes none either (as for routes, [`allows`]).
pub fn allows_listener_set(gateway: &Gateway, set_namespace: &str) -> bool {
    use teapot_api::gateway_api::generated::gateways::GatewayAllowedListenersNamespacesFrom as From;
    let from = gateway
        .spec
        .allowed_listeners
        .as_ref()
        .and_then(|a| a.namespaces.as_ref())
        .and_then(|n| n.from.as_ref());
    match from {
        Some(From::All) => true,
        Some(From::Same) => gateway.namespace().as_deref() == Some(set_namespace),
        Some(From::Selector | From::None) | None => false,
    }
}

/// The LB copy of a tenant ListenerSet: `<name>.<namespace>`, its
/// listeners as a Gateway copy's ([`lb_gateway`]). Its parent is the copy
/// of the tenant's Gateway when `tenant_gateway` (the cluster has that
/// Gateway), else the LB cluster's Gateway the parentRef names, as
/// written: the operator's shared Gateway, whose `allowedListeners`
/// decides on the LB side.
pub fn lb_listener_set(
    set: &Value,
    lb_namespace: &str,
    refused: &[CrossRef],
    tenant_gateway: bool,
) -> Result<Value, Error> {
    let ns = own_namespace(set)?;
    let mut spec = set["spec"].clone();
    lb_listeners(&mut spec, &ns, refused);
    if tenant_gateway {
        let (pns, name) = listener_set_parent(set)?;
        spec["parentRef"] = json!({
            "group": GROUP,
            "kind": "Gateway",
            "name": mirrored_ingress_name(&pns, &name),
        });
    }
    Ok(json!({
        "apiVersion": set["apiVersion"],
        "kind": "ListenerSet",
        "metadata": copy_metadata(set, &ns, lb_namespace)?,
        "spec": spec,
    }))
}

/// The ListenerSets a route names, as `(namespace, name)` with the
/// `parentRefs` index.
pub fn route_listener_sets(route: &Value) -> Result<Vec<(usize, Ref)>, Error> {
    let ns = own_namespace(route)?;
    Ok(route["spec"]["parentRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, p)| {
            p["group"].as_str().unwrap_or(GROUP) == GROUP && p["kind"] == "ListenerSet"
        })
        .map(|(i, p)| (i, target_of(p, &ns)))
        .collect())
}

/// Whether a ListenerSet lets a route of `kind` in `route_namespace`
/// attach through some listener (`sectionName` narrows them), by the rule
/// of a Gateway's listeners ([`allows`]), the set's namespace being theirs.
pub fn set_allows(
    set: &teapot_api::gateway_api::ListenerSet,
    section: Option<&str>,
    kind: &str,
    route_namespace: &str,
) -> bool {
    let set_ns = set.namespace().unwrap_or_default();
    teapot_api::admission::listener_set_listeners(set)
        .iter()
        .filter(|l| section.is_none_or(|s| s == l.name))
        .any(|l| attachment::admits(l, &set_ns, route_namespace, kind, |_| false))
}

/// A Secret reference of a tenant object of `ns`, renamed to its mirror
/// in the LB namespace.
fn rename_secret_ref(r: &mut Value, ns: &str) {
    let (tns, name) = target_of(r, ns);
    r["name"] = json!(mirrored_secret_name(&tns, &name));
    if let Some(o) = r.as_object_mut() {
        o.remove("namespace");
    }
}

/// The LB copy of a RouteTrafficPolicy: `NAME.NS`, its HTTPRoute and
/// GRPCRoute targets renamed to the routes' mirrors (`NAME.NS`; a rule
/// keeps its name in the mirror, so `sectionName` stays as written). A
/// target naming its own namespace loses the field (the copy lives in the
/// LB namespace); one naming another namespace, or another kind, is
/// copied as written, for the webhook to refuse with its reason.
/// `customErrors`' Service (of the policy's namespace) is renamed to its
/// mirror ([`policy_services`]), and so is `basicAuth`'s users Secret
/// ([`policy_secrets`]).
pub fn lb_route_traffic_policy(policy: &Value, lb_namespace: &str) -> Result<Value, Error> {
    let ns = own_namespace(policy)?;
    let mut spec = policy["spec"].clone();
    if let Some(name) = spec
        .pointer_mut("/customErrors/backend/name")
        .filter(|n| n.is_string())
    {
        *name = json!(mirrored_service_name(&ns, name.as_str().unwrap_or("")));
    }
    if let Some(secret) = spec.pointer_mut("/basicAuth/secretRef")
        && secret["name"].as_str().is_some_and(users_secret_name)
    {
        // The reference has no namespace field: the Secret is always the
        // policy's own, whatever else the tenant wrote there.
        let name = secret["name"].as_str().unwrap_or("").to_string();
        *secret = json!({"name": mirrored_secret_name(&ns, &name)});
    }
    let targets = spec.get_mut("targetRefs").and_then(Value::as_array_mut);
    for t in targets.into_iter().flatten() {
        let route =
            t["group"] == GROUP && matches!(t["kind"].as_str(), Some("HTTPRoute" | "GRPCRoute"));
        let own = t["namespace"].as_str().is_none_or(|n| n == ns);
        if route && own {
            let name = t["name"].as_str().unwrap_or("").to_string();
            t["name"] = json!(mirrored_ingress_name(&ns, &name));
            if let Some(t) = t.as_object_mut() {
                t.remove("namespace");
            }
        }
    }
    Ok(json!({
        "apiVersion": policy["apiVersion"],
        "kind": "RouteTrafficPolicy",
        "metadata": copy_metadata(policy, &ns, lb_namespace)?,
        "spec": spec,
    }))
}

/// The Services a RouteTrafficPolicy needs mirrored: `customErrors`'
/// error backend, a Service of the policy's own namespace.
pub fn policy_services(policy: &Value) -> Result<BTreeSet<Ref>, Error> {
    let ns = own_namespace(policy)?;
    Ok(policy["spec"]["customErrors"]["backend"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(|name| (ns, name.to_string()))
        .into_iter()
        .collect())
}

/// The Secret a RouteTrafficPolicy's `basicAuth` reads its users from, a
/// Secret of the policy's own namespace (the reference cannot name
/// another).
pub fn policy_secrets(policy: &Value) -> Result<BTreeSet<Ref>, Error> {
    let ns = own_namespace(policy)?;
    Ok(policy["spec"]["basicAuth"]["secretRef"]["name"]
        .as_str()
        .filter(|n| users_secret_name(n))
        .map(|name| (ns, name.to_string()))
        .into_iter()
        .collect())
}

/// Whether a `basicAuth.secretRef.name` names a Secret the agent follows:
/// an ingress-nginx habit of `NAMESPACE/NAME` (another namespace's Secret)
/// is neither read nor renamed, but copied as written for the webhook to
/// refuse with its reason.
fn users_secret_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/')
}

/// The ConfigMaps a BackendTLSPolicy reads its trust anchors from (its
/// own namespace's: the references have no namespace field).
pub fn policy_config_maps(policy: &Value) -> Result<BTreeSet<Ref>, Error> {
    let ns = own_namespace(policy)?;
    Ok(policy["spec"]["validation"]["caCertificateRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| is_core(r, "ConfigMap"))
        .map(|r| (ns.clone(), r["name"].as_str().unwrap_or("").to_string()))
        .collect())
}

/// The name of the LB ConfigMap copied from a tenant ConfigMap: the
/// mirrored Services' scheme, so ConfigMaps of different namespaces never
/// collide.
pub fn mirrored_config_map_name(namespace: &str, name: &str) -> String {
    mirrored_service_name(namespace, name)
}

/// The LB copy of a BackendTLSPolicy: `NAME.NS`, its Service targets and
/// ConfigMap references renamed to their mirrors (a Service port keeps its
/// name in the mirror, so `sectionName` stays as written). References of
/// other kinds are copied as written, for the webhook to refuse with its
/// reason.
pub fn lb_backend_tls_policy(policy: &Value, lb_namespace: &str) -> Result<Value, Error> {
    let ns = own_namespace(policy)?;
    let mut spec = policy["spec"].clone();
    let targets = spec.get_mut("targetRefs").and_then(Value::as_array_mut);
    for t in targets.into_iter().flatten() {
        if is_core(t, "Service") {
            let name = t["name"].as_str().unwrap_or("").to_string();
            t["name"] = json!(mirrored_service_name(&ns, &name));
        }
    }
    let refs = spec
        .get_mut("validation")
        .and_then(|v| v.get_mut("caCertificateRefs"))
        .and_then(Value::as_array_mut);
    for r in refs.into_iter().flatten() {
        if is_core(r, "ConfigMap") {
            let name = r["name"].as_str().unwrap_or("").to_string();
            r["name"] = json!(mirrored_config_map_name(&ns, &name));
        }
    }
    Ok(json!({
        "apiVersion": policy["apiVersion"],
        "kind": "BackendTLSPolicy",
        "metadata": copy_metadata(policy, &ns, lb_namespace)?,
        "spec": spec,
    }))
}

/// The LB copy of a ConfigMap a BackendTLSPolicy names: its `ca.crt`
/// only (anything else there is the tenant's own configuration).
pub fn lb_config_map(config_map: &ConfigMap, lb_namespace: &str) -> Result<ConfigMap, Error> {
    let namespace = config_map.namespace().unwrap_or_default();
    let name = config_map.name_any();
    let ca = config_map
        .data
        .as_ref()
        .and_then(|d| d.get(CA_CERT_KEY))
        .ok_or_else(|| Error::Invalid {
            object: format!("ConfigMap {namespace}/{name}"),
            field: format!("data[{CA_CERT_KEY}]"),
            message: "is required: a BackendTLSPolicy reads its trust anchors there".into(),
        })?;
    Ok(ConfigMap {
        metadata: lb_meta(
            mirrored_config_map_name(&namespace, &name),
            lb_namespace,
            &namespace,
            &name,
            config_map.metadata.uid.as_ref(),
            BTreeMap::new(),
        ),
        data: Some(BTreeMap::from([(CA_CERT_KEY.to_string(), ca.clone())])),
        ..ConfigMap::default()
    })
}

/// The parent Gateways a route names, as `(namespace, name)` with the
/// `parentRefs` index (Gateways only; other parent kinds are not teapot's).
pub fn route_parents(route: &Value) -> Result<Vec<(usize, Ref)>, Error> {
    let ns = own_namespace(route)?;
    Ok(route["spec"]["parentRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, p)| {
            p["group"].as_str().unwrap_or(GROUP) == GROUP
                && p["kind"].as_str().unwrap_or("Gateway") == "Gateway"
        })
        .map(|(i, p)| (i, target_of(p, &ns)))
        .collect())
}

/// Whether a teapot Gateway lets a route of `kind` in `route_namespace`
/// attach to it through some listener (`sectionName` narrows the
/// listeners, as in the specification): `allowedRoutes.namespaces.from`
/// Same (the default) or All; Selector needs namespace labels the agent
/// does not read, so it allows nothing (reported to the tenant).
pub fn allows(gateway: &Gateway, section: Option<&str>, kind: &str, route_namespace: &str) -> bool {
    let gateway_ns = gateway.namespace().unwrap_or_default();
    gateway
        .spec
        .listeners
        .iter()
        .filter(|l| section.is_none_or(|s| s == l.name))
        .any(|l| attachment::admits(l, &gateway_ns, route_namespace, kind, |_| false))
}

/// The LB copy of a route: only the parents in `parents` (indexes into
/// `parentRefs`: the teapot Gateways that allow it), renamed to their
/// copies; backends and mirrors renamed to the mirrored Services. A
/// backend in `refused` (not granted in the tenant cluster) keeps a name
/// no mirror has, so the LB side answers it as an invalid backend (500),
/// as the specification wants for a reference not permitted.
pub fn lb_route(
    route: &Value,
    lb_namespace: &str,
    parents: &[usize],
    refused: &[CrossRef],
) -> Result<Value, Error> {
    let ns = own_namespace(route)?;
    let mut spec = route["spec"].clone();
    if let Some(refs) = spec["parentRefs"].as_array() {
        let kept = refs
            .iter()
            .enumerate()
            .filter(|(i, _)| parents.contains(i))
            .map(|(_, p)| {
                let (pns, name) = target_of(p, &ns);
                let mut p = p.clone();
                p["name"] = json!(mirrored_ingress_name(&pns, &name));
                if let Some(o) = p.as_object_mut() {
                    o.remove("namespace");
                }
                p
            })
            .collect();
        spec["parentRefs"] = Value::Array(kept);
    }
    let mut copy = json!({"spec": spec});
    backend_refs_mut(&mut copy, |b| {
        if !is_core(b, "Service") {
            return;
        }
        let (tns, name) = target_of(b, &ns);
        let not_permitted = refused
            .iter()
            .any(|c| c.to_kind == "Service" && c.to == (tns.clone(), name.clone()));
        b["name"] = json!(if not_permitted {
            refused_backend_name(&tns, &name)
        } else {
            mirrored_service_name(&tns, &name)
        });
        if let Some(o) = b.as_object_mut() {
            o.remove("namespace");
        }
    });
    Ok(json!({
        "apiVersion": route["apiVersion"],
        "kind": route["kind"],
        "metadata": copy_metadata(route, &ns, lb_namespace)?,
        "spec": copy["spec"],
    }))
}

/// The name a backend not permitted gets on the LB side: a valid Service
/// name (the webhook admits the route) that no mirror ever has, since
/// every mirrored name ends in `-` and five hex digits
/// ([`mirrored_service_name`]) and this one in `-refused`.
pub fn refused_backend_name(namespace: &str, service: &str) -> String {
    let mirrored = mirrored_service_name(namespace, service);
    let head = mirrored[..mirrored.len().min(63 - "-refused".len())].trim_end_matches('-');
    format!("{head}-refused")
}

/// The `observedGeneration` of a condition on the LB copy, carried to the
/// tenant object: a condition about the copy's current generation is about
/// the tenant object's current one (the copy is written from it); an older
/// one keeps no generation (`None`: leave it out).
fn observed(lb_generation: Option<i64>, tenant_generation: Option<i64>, c: &Value) -> Option<i64> {
    let seen = c["observedGeneration"].as_i64()?;
    (Some(seen) == lb_generation).then_some(tenant_generation)?
}

fn translate_conditions(conditions: &Value, lb_gen: Option<i64>, tenant_gen: Option<i64>) -> Value {
    let Some(list) = conditions.as_array() else {
        return conditions.clone();
    };
    Value::Array(
        list.iter()
            .map(|c| {
                let mut c = c.clone();
                if let Some(o) = c.as_object_mut() {
                    match observed(lb_gen, tenant_gen, &Value::Object(o.clone())) {
                        Some(g) => {
                            o.insert("observedGeneration".into(), json!(g));
                        }
                        None => {
                            o.remove("observedGeneration");
                        }
                    }
                }
                c
            })
            .collect(),
    )
}

/// The tenant Gateway's status from its LB copy's: addresses (the
/// assigned hostname, L4 addresses), conditions and listener status as
/// the fleet reports them, generations carried over.
pub fn gateway_status_for_tenant(lb_copy: &Value, tenant: &Value) -> Option<Value> {
    let status = lb_copy.get("status").filter(|s| s.is_object())?;
    let lb_gen = lb_copy["metadata"]["generation"].as_i64();
    let tenant_gen = tenant["metadata"]["generation"].as_i64();
    let mut out = status.clone();
    if let Some(c) = status.get("conditions") {
        out["conditions"] = translate_conditions(c, lb_gen, tenant_gen);
    }
    let listeners = out.get_mut("listeners").and_then(Value::as_array_mut);
    for l in listeners.into_iter().flatten() {
        let c = l["conditions"].clone();
        l["conditions"] = translate_conditions(&c, lb_gen, tenant_gen);
    }
    Some(out)
}

/// The entries of the tenant object's status list `list` other
/// controllers keep, and teapot's entries of the LB copy's (`lb`), to be
/// named back and added after them.
fn status_entries<'l>(
    tenant: &Value,
    lb: &'l [Value],
    list: &str,
) -> (Vec<Value>, impl Iterator<Item = &'l Value>) {
    let others = tenant["status"][list]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["controllerName"] != GATEWAY_CONTROLLER_NAME)
        .cloned()
        .collect();
    let ours = lb
        .iter()
        .filter(|e| e["controllerName"] == GATEWAY_CONTROLLER_NAME);
    (others, ours)
}

/// The tenant route's `status.parents` from its LB copy's: teapot's
/// entries (controller `teapot.dev/gateway-controller`) with their
/// `parentRef` named back as the tenant wrote it, after the entries other
/// controllers keep on the tenant route.
pub fn route_status_for_tenant(lb_copy: &Value, tenant: &Value) -> Option<Value> {
    let lb_parents = lb_copy["status"]["parents"].as_array()?;
    let ns = tenant["metadata"]["namespace"].as_str().unwrap_or("");
    let lb_gen = lb_copy["metadata"]["generation"].as_i64();
    let tenant_gen = tenant["metadata"]["generation"].as_i64();
    let spec_refs: Vec<&Value> = tenant["spec"]["parentRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let (mut parents, ours) = status_entries(tenant, lb_parents, "parents");
    for p in ours {
        let Some((gns, gname)) = p["parentRef"]["name"]
            .as_str()
            .and_then(source_of_lb_ingress)
        else {
            continue;
        };
        let mut entry = p.clone();
        let mut parent_ref: Map<String, Value> =
            p["parentRef"].as_object().cloned().unwrap_or_default();
        parent_ref.insert("name".into(), json!(gname));
        parent_ref.remove("namespace");
        // As the tenant wrote it: with its namespace when the spec's
        // reference had one.
        let written = spec_refs
            .iter()
            .find(|r| r["name"] == gname.as_str() && r["namespace"].as_str().unwrap_or(ns) == gns);
        if written.is_some_and(|r| r.get("namespace").is_some()) || gns != ns {
            parent_ref.insert("namespace".into(), json!(gns));
        }
        entry["parentRef"] = Value::Object(parent_ref);
        let c = entry["conditions"].clone();
        entry["conditions"] = translate_conditions(&c, lb_gen, tenant_gen);
        parents.push(entry);
    }
    Some(json!({"parents": parents}))
}

/// The tenant BackendTLSPolicy's `status.ancestors` from its LB copy's:
/// teapot's entries (controller `teapot.dev/gateway-controller`), each
/// `ancestorRef` naming the tenant's Gateway (`NAME.NS` on the LB side is
/// Gateway `NAME` of `NS`, namespace always given: an ancestor is not
/// relative to the policy), after the entries other controllers keep on
/// the tenant policy. An ancestor that is no tenant Gateway's copy is
/// left out.
pub fn backend_tls_policy_status_for_tenant(lb_copy: &Value, tenant: &Value) -> Option<Value> {
    let lb_ancestors = lb_copy["status"]["ancestors"].as_array()?;
    let lb_gen = lb_copy["metadata"]["generation"].as_i64();
    let tenant_gen = tenant["metadata"]["generation"].as_i64();
    let (mut ancestors, ours) = status_entries(tenant, lb_ancestors, "ancestors");
    for a in ours {
        let gateway = a["ancestorRef"]["group"] == GROUP && a["ancestorRef"]["kind"] == "Gateway";
        let Some((gns, gname)) = a["ancestorRef"]["name"]
            .as_str()
            .filter(|_| gateway)
            .and_then(source_of_lb_ingress)
        else {
            continue;
        };
        let mut entry = a.clone();
        entry["ancestorRef"]["name"] = json!(gname);
        entry["ancestorRef"]["namespace"] = json!(gns);
        entry["conditions"] = translate_conditions(&a["conditions"], lb_gen, tenant_gen);
        ancestors.push(entry);
    }
    Some(json!({"ancestors": ancestors}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway() -> Value {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "shop", "namespace": "web", "uid": "u-1", "generation": 3,
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"gatewayClassName": "teapot", "listeners": [
                {"name": "http", "protocol": "HTTP", "port": 80,
                 "allowedRoutes": {"namespaces": {"from": "All"}}},
                {"name": "https", "protocol": "HTTPS", "port": 443, "tls": {"certificateRefs": [
                    {"name": "shop-tls"},
                    {"name": "wild", "namespace": "certs"},
                    {"name": "other", "namespace": "vault"}]}}]}
        })
    }

    fn route() -> Value {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "store", "namespace": "web", "generation": 7},
            "spec": {
                "parentRefs": [{"name": "shop", "sectionName": "http"},
                               {"name": "mesh", "namespace": "istio-system"},
                               {"group": "", "kind": "Service", "name": "x"}],
                "hostnames": ["shop.example.com"],
                "rules": [{
                    "filters": [{"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "shadow", "port": 80}}}],
                    "backendRefs": [{"name": "store", "port": 8080},
                                    {"name": "search", "namespace": "search", "port": 80},
                                    {"name": "db", "namespace": "data", "port": 5432}]}]
            }
        })
    }

    #[test]
    fn gateway_copies_rename_certificates_and_keep_routes_in_the_lb_namespace() {
        let g = gateway();
        let needs = gateway_needs(&g).unwrap();
        assert_eq!(needs.secrets.len(), 3);
        assert_eq!(needs.cross.len(), 2);
        let refused = vec![needs.cross[1].clone()];
        let copy = lb_gateway(&g, "tenant-acme", &refused).unwrap();
        assert_eq!(copy["metadata"]["name"], "shop.web");
        assert_eq!(copy["metadata"]["namespace"], "tenant-acme");
        assert_eq!(copy["metadata"]["labels"]["teapot.dev/source-name"], "shop");
        assert!(
            copy["metadata"]["annotations"]
                .get("kubectl.kubernetes.io/last-applied-configuration")
                .is_none()
        );
        let listeners = &copy["spec"]["listeners"];
        assert_eq!(
            listeners[0]["allowedRoutes"]["namespaces"],
            json!({"from": "Same"})
        );
        let refs = listeners[1]["tls"]["certificateRefs"].as_array().unwrap();
        assert_eq!(refs.len(), 2, "the refused one is dropped");
        assert_eq!(
            refs[0],
            json!({"name": mirrored_secret_name("web", "shop-tls")})
        );
        assert_eq!(
            refs[1],
            json!({"name": mirrored_secret_name("certs", "wild")})
        );
    }

    #[test]
    fn the_backend_client_certificate_is_mirrored_and_renamed() {
        let mut g = gateway();
        g["spec"]["tls"] = json!({"backend": {"clientCertificateRef": {"group": "", "kind": "Secret", "name": "mtls"}}});
        let needs = gateway_needs(&g).unwrap();
        assert!(
            needs
                .secrets
                .contains(&("web".to_string(), "mtls".to_string()))
        );
        let copy = lb_gateway(&g, "tenant-acme", &[]).unwrap();
        assert_eq!(
            copy["spec"]["tls"]["backend"]["clientCertificateRef"],
            json!({"group": "", "kind": "Secret", "name": mirrored_secret_name("web", "mtls")})
        );
        // Another namespace's: checked against its grants; refused, it
        // still names the (never made) mirror, never nothing.
        g["spec"]["tls"]["backend"]["clientCertificateRef"] =
            json!({"name": "mtls", "namespace": "vault"});
        let needs = gateway_needs(&g).unwrap();
        let cross = needs
            .cross
            .iter()
            .find(|c| c.to == ("vault".to_string(), "mtls".to_string()))
            .expect("checked")
            .clone();
        let copy = lb_gateway(&g, "tenant-acme", &[cross]).unwrap();
        assert_eq!(
            copy["spec"]["tls"]["backend"]["clientCertificateRef"],
            json!({"name": mirrored_secret_name("vault", "mtls")})
        );
    }

    #[test]
    fn route_copies_keep_teapot_parents_and_rename_backends() {
        let r = route();
        let parents = route_parents(&r).unwrap();
        assert_eq!(
            parents,
            [
                (0, ("web".into(), "shop".into())),
                (1, ("istio-system".into(), "mesh".into()))
            ]
        );
        let needs = route_needs(&r).unwrap();
        assert_eq!(needs.services.len(), 4);
        assert_eq!(needs.cross.len(), 2);
        assert_eq!(needs.cross[0].from_kind, "HTTPRoute");
        let refused = vec![needs.cross[1].clone()];
        let copy = lb_route(&r, "tenant-acme", &[0], &refused).unwrap();
        assert_eq!(copy["metadata"]["name"], "store.web");
        assert_eq!(
            copy["spec"]["parentRefs"],
            json!([{"name": "shop.web", "sectionName": "http"}])
        );
        let rule = &copy["spec"]["rules"][0];
        assert_eq!(
            rule["filters"][0]["requestMirror"]["backendRef"]["name"],
            mirrored_service_name("web", "shadow")
        );
        assert_eq!(
            rule["backendRefs"][0],
            json!({"name": mirrored_service_name("web", "store"), "port": 8080})
        );
        assert_eq!(
            rule["backendRefs"][1],
            json!({"name": mirrored_service_name("search", "search"), "port": 80})
        );
        let refused_name = rule["backendRefs"][2]["name"].as_str().unwrap();
        assert_eq!(refused_name, refused_backend_name("data", "db"));
        assert!(refused_name.ends_with("-refused"));
        let long = refused_backend_name(&"n".repeat(60), &"s".repeat(60));
        assert!(long.len() <= 63 && long.ends_with("-refused"), "{long}");
        assert!(teapot_api::admission::dns1035_label(&long).is_ok());
        assert_eq!(copy["spec"]["hostnames"], json!(["shop.example.com"]));
    }

    #[test]
    fn every_route_kind_copies_into_its_type() {
        use teapot_api::gateway_api::{GrpcRoute, HttpRoute, TcpRoute, TlsRoute, UdpRoute};
        for kind in ["HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute"] {
            let r = json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
                "metadata": {"name": "r", "namespace": "web"},
                "spec": {"parentRefs": [{"name": "shop", "sectionName": "l4"}],
                         "hostnames": ["db.example.com"],
                         "rules": [{"backendRefs": [{"name": "db", "port": 5432}]}]}
            });
            let copy = lb_route(&r, "tenant-acme", &[0], &[]).unwrap();
            let back = match kind {
                "HTTPRoute" => serde_json::from_value::<HttpRoute>(copy.clone()).map(|_| ()),
                "GRPCRoute" => serde_json::from_value::<GrpcRoute>(copy.clone()).map(|_| ()),
                "TLSRoute" => serde_json::from_value::<TlsRoute>(copy.clone()).map(|_| ()),
                "TCPRoute" => serde_json::from_value::<TcpRoute>(copy.clone()).map(|_| ()),
                _ => serde_json::from_value::<UdpRoute>(copy.clone()).map(|_| ()),
            };
            assert!(back.is_ok(), "{kind}: {back:?} {copy}");
            assert_eq!(copy["kind"], kind);
            assert_eq!(
                copy["spec"]["rules"][0]["backendRefs"][0]["name"],
                mirrored_service_name("web", "db")
            );
        }
    }

    #[test]
    fn grants_follow_the_specification() {
        let cross = CrossRef {
            from_kind: "HTTPRoute".into(),
            from_namespace: "web".into(),
            to_kind: "Service",
            to: ("search".into(), "search".into()),
        };
        let grant = |from_kind: &str, from_ns: &str, to: Value| json!({"spec": {"from": [{"group": GROUP, "kind": from_kind, "namespace": from_ns}], "to": [to]}});
        assert!(granted(
            &[grant(
                "HTTPRoute",
                "web",
                json!({"group": "", "kind": "Service"})
            )],
            &cross
        ));
        assert!(granted(
            &[grant(
                "HTTPRoute",
                "web",
                json!({"group": "", "kind": "Service", "name": "search"})
            )],
            &cross
        ));
        assert!(!granted(
            &[grant(
                "HTTPRoute",
                "web",
                json!({"group": "", "kind": "Service", "name": "other"})
            )],
            &cross
        ));
        assert!(!granted(
            &[grant(
                "GRPCRoute",
                "web",
                json!({"group": "", "kind": "Service"})
            )],
            &cross
        ));
        assert!(!granted(
            &[grant(
                "HTTPRoute",
                "shop",
                json!({"group": "", "kind": "Service"})
            )],
            &cross
        ));
        assert!(!granted(
            &[grant(
                "HTTPRoute",
                "web",
                json!({"group": "", "kind": "Secret"})
            )],
            &cross
        ));
        assert!(!granted(&[], &cross));
    }

    #[test]
    fn listeners_decide_which_routes_attach() {
        let g: Gateway = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "shop", "namespace": "web"},
            "spec": {"gatewayClassName": "teapot", "listeners": [
                {"name": "http", "protocol": "HTTP", "port": 80},
                {"name": "all", "protocol": "HTTP", "port": 80,
                 "allowedRoutes": {"namespaces": {"from": "All"}, "kinds": [{"kind": "GRPCRoute"}]}},
                {"name": "sel", "protocol": "HTTP", "port": 80,
                 "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {"matchLabels": {"a": "b"}}}}}]}
        }))
        .unwrap();
        assert!(allows(&g, None, "HTTPRoute", "web"));
        assert!(!allows(&g, None, "HTTPRoute", "other"));
        assert!(allows(&g, None, "GRPCRoute", "other"));
        assert!(!allows(&g, Some("all"), "HTTPRoute", "web"));
        assert!(
            !allows(&g, Some("sel"), "HTTPRoute", "web"),
            "selectors are not read"
        );
        assert!(!allows(&g, Some("nope"), "HTTPRoute", "web"));
    }

    /// `allowedRoutes.kinds` unset or `[]` is the listener protocol's
    /// kinds (the rule the proxy's HTTP and L4 compiles judge by too).
    #[test]
    fn empty_route_kinds_are_the_protocols() {
        let g: Gateway = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "shop", "namespace": "web"},
            "spec": {"gatewayClassName": "teapot", "listeners": [
                {"name": "http", "protocol": "HTTP", "port": 80, "allowedRoutes": {"kinds": []}},
                {"name": "db", "protocol": "TCP", "port": 5432, "allowedRoutes": {"kinds": []}},
                {"name": "dns", "protocol": "UDP", "port": 53}]}
        }))
        .unwrap();
        assert!(allows(&g, Some("http"), "HTTPRoute", "web"));
        assert!(allows(&g, Some("http"), "GRPCRoute", "web"));
        assert!(!allows(&g, Some("http"), "TCPRoute", "web"));
        assert!(allows(&g, Some("db"), "TCPRoute", "web"));
        assert!(!allows(&g, Some("db"), "HTTPRoute", "web"));
        assert!(allows(&g, Some("dns"), "UDPRoute", "web"));
        assert!(!allows(&g, Some("dns"), "TLSRoute", "web"));
    }

    #[test]
    fn status_comes_back_in_the_tenants_names_and_generations() {
        let lb_gateway = json!({
            "metadata": {"name": "shop.web", "generation": 2},
            "status": {
                "addresses": [{"type": "Hostname", "value": "shop-web.acme.lb.example.net"}],
                "conditions": [{"type": "Programmed", "status": "True", "observedGeneration": 2},
                               {"type": "Accepted", "status": "True", "observedGeneration": 1}],
                "listeners": [{"name": "http", "attachedRoutes": 1, "conditions": [
                    {"type": "Programmed", "status": "True", "observedGeneration": 2}]}]}
        });
        let s = gateway_status_for_tenant(&lb_gateway, &gateway()).unwrap();
        assert_eq!(s["addresses"][0]["value"], "shop-web.acme.lb.example.net");
        assert_eq!(s["conditions"][0]["observedGeneration"], 3);
        assert!(
            s["conditions"][1].get("observedGeneration").is_none(),
            "stale"
        );
        assert_eq!(s["listeners"][0]["conditions"][0]["observedGeneration"], 3);
        assert!(gateway_status_for_tenant(&json!({"metadata": {}}), &gateway()).is_none());
        let bare = json!({"metadata": {}, "status": {"addresses": []}});
        assert_eq!(
            gateway_status_for_tenant(&bare, &gateway()),
            Some(json!({"addresses": []})),
            "no field appears that the copy did not have"
        );

        let mut tenant = route();
        tenant["status"] = json!({"parents": [
            {"controllerName": "istio.io/gateway-controller", "parentRef": {"name": "mesh", "namespace": "istio-system"}, "conditions": []},
            {"controllerName": GATEWAY_CONTROLLER_NAME, "parentRef": {"name": "old"}, "conditions": []}]});
        let lb_route = json!({
            "metadata": {"name": "store.web", "generation": 5},
            "status": {"parents": [
                {"controllerName": GATEWAY_CONTROLLER_NAME,
                 "parentRef": {"group": GROUP, "kind": "Gateway", "name": "shop.web", "sectionName": "http"},
                 "conditions": [{"type": "Accepted", "status": "True", "observedGeneration": 5}]},
                {"controllerName": "someone.else/controller", "parentRef": {"name": "x.web"}, "conditions": []}]}
        });
        let s = route_status_for_tenant(&lb_route, &tenant).unwrap();
        let parents = s["parents"].as_array().unwrap();
        assert_eq!(parents.len(), 2, "{s}");
        assert_eq!(parents[0]["controllerName"], "istio.io/gateway-controller");
        assert_eq!(
            parents[1]["parentRef"],
            json!({"group": GROUP, "kind": "Gateway", "name": "shop", "sectionName": "http"})
        );
        assert_eq!(parents[1]["conditions"][0]["observedGeneration"], 7);
    }

    /// `basicAuth`'s users Secret is the policy's own, named by its
    /// mirror in the copy; a namespace written beside the name (the API
    /// has no such field) names no other namespace's Secret.
    #[test]
    fn a_policy_s_basic_auth_secret_is_renamed_to_its_mirror() {
        let policy = json!({
            "apiVersion": "teapot.dev/v1alpha1", "kind": "RouteTrafficPolicy",
            "metadata": {"name": "staff", "namespace": "web"},
            "spec": {"basicAuth": {"realm": "Staff",
                                   "secretRef": {"name": "users", "namespace": "vault"}}},
        });
        assert_eq!(
            policy_secrets(&policy).unwrap(),
            BTreeSet::from([("web".to_string(), "users".to_string())])
        );
        let copy = lb_route_traffic_policy(&policy, "tenant-acme").unwrap();
        assert_eq!(
            copy["spec"]["basicAuth"],
            json!({"realm": "Staff", "secretRef": {"name": mirrored_secret_name("web", "users")}})
        );
        let none = json!({"metadata": {"name": "p", "namespace": "web"}, "spec": {}});
        assert!(policy_secrets(&none).unwrap().is_empty());
        // Another namespace's Secret by ingress-nginx's `NS/NAME`: never
        // read, left for the webhook to refuse.
        let mut theirs = policy.clone();
        theirs["spec"]["basicAuth"]["secretRef"] = json!({"name": "vault/users"});
        assert!(policy_secrets(&theirs).unwrap().is_empty());
        assert_eq!(
            lb_route_traffic_policy(&theirs, "tenant-acme").unwrap()["spec"]["basicAuth"]["secretRef"],
            json!({"name": "vault/users"})
        );
    }
}
