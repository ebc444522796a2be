//! Gateway API status in kube mode (docs/gateway-api-l4.md, "Status in
//! kube mode"): GatewayClass, Gateway and route status written by
//! server-side apply on `/status` under field manager `teapot-proxy`, as
//! Ingress and Service status are ([`super::kube_status`] runs it, from the
//! replica holding the status Lease).
//!
//! The writer takes a list of [`StatusUpdate`]s (kind, namespace, name and
//! the status teapot wants, as JSON) and:
//!
//! - fills in every condition's `observedGeneration` (the object's
//!   `metadata.generation`) and `lastTransitionTime` (kept from the object
//!   while the condition's status is unchanged, else now), wherever
//!   conditions appear: `status.conditions`, `status.listeners[].conditions`
//!   (matched by listener name), `status.parents[].conditions` (matched by
//!   parentRef), `status.ancestors[].conditions` (a BackendTLSPolicy's,
//!   matched by ancestorRef);
//! - keeps other controllers' entries of a route's `status.parents` and a
//!   policy's `status.ancestors` (the CRDs make those lists atomic, so an
//!   apply replaces them whole): only the entries with teapot's
//!   `controllerName` are teapot's;
//! - writes only when the object's status differs, compared in the typed
//!   form (the desired status read into the generated type and written out
//!   again, so defaults and field order do not count as a change), and not
//!   twice for one object version.
//!
//! [`updates`] is the adapter from a compiled snapshot to that list.

use std::collections::HashMap;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use teapot_api::names::GATEWAY_CONTROLLER_NAME;
use teapot_model::store::{Kind, NsName, Store};

use crate::compile::api_status::{RouteKind, RouteReport};
use crate::compile::snapshot::Snapshot;

/// Field manager of every status write (Ingress, Service and Gateway API
/// status alike).
pub const FIELD_MANAGER: &str = "teapot-proxy";

/// One Gateway API object's status as teapot wants it. Conditions need no
/// `lastTransitionTime` or `observedGeneration` (the writer sets them); a
/// route's `parents` hold teapot's entries only.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusUpdate {
    pub kind: Kind,
    /// Empty for GatewayClass.
    pub namespace: String,
    pub name: String,
    pub status: Value,
}

/// The adapter from a compile to the writer: every Gateway API status the
/// snapshot's report decides.
///
/// The compile's report (`report.gateway`) gives GatewayClass, Gateway
/// (decided from both listener planes, [`crate::compile::api_status`]),
/// ListenerSet, HTTPRoute and GRPCRoute status; the L4 report adds TCPRoute, UDPRoute
/// and TLSRoute parent statuses, rendered by the same route report.
pub fn updates(snapshot: &Snapshot) -> Vec<StatusUpdate> {
    let http = &snapshot.report.gateway;
    let mut out = Vec::new();
    for c in &http.classes {
        out.push(StatusUpdate {
            kind: Kind::GatewayClass,
            namespace: String::new(),
            name: c.name.clone(),
            status: to_value(&c.status),
        });
    }
    // Rendered once from the HTTP and L4 planes' parts.
    for g in &http.gateways {
        out.push(StatusUpdate {
            kind: Kind::Gateway,
            namespace: g.namespace.clone(),
            name: g.name.clone(),
            status: to_value(&g.status),
        });
    }
    for l in &http.listener_sets {
        out.push(StatusUpdate {
            kind: Kind::ListenerSet,
            namespace: l.namespace.clone(),
            name: l.name.clone(),
            status: to_value(&l.status),
        });
    }
    let route = |r: &RouteReport| StatusUpdate {
        kind: match r.kind() {
            RouteKind::Http => Kind::HttpRoute,
            RouteKind::Grpc => Kind::GrpcRoute,
            RouteKind::Tcp => Kind::TcpRoute,
            RouteKind::Udp => Kind::UdpRoute,
            RouteKind::Tls => Kind::TlsRoute,
        },
        namespace: r.namespace().to_string(),
        name: r.name().to_string(),
        status: r.status(),
    };
    out.extend(http.http_routes.iter().chain(&http.grpc_routes).map(route));
    out.extend(
        snapshot
            .report
            .backend_tls_policies
            .iter()
            .map(|p| StatusUpdate {
                kind: Kind::BackendTlsPolicy,
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                status: to_value(&p.status),
            }),
    );
    out.extend(
        snapshot
            .report
            .route_traffic_policies
            .iter()
            .map(|p| StatusUpdate {
                kind: Kind::RouteTrafficPolicy,
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                status: to_value(&p.status),
            }),
    );
    out.extend(
        snapshot
            .report
            .l4
            .iter()
            .flat_map(|l4| &l4.routes)
            .map(route),
    );
    out
}

/// A typed status of the HTTP compile's report, as JSON.
fn to_value<T: Serialize>(status: &T) -> Value {
    serde_json::to_value(status).unwrap_or_default()
}

/// Writes Gateway API statuses that differ from the objects'.
#[derive(Debug, Default)]
pub struct GatewayStatusWriter {
    /// What was written last, for which object version.
    written: HashMap<(Kind, NsName), (String, Value)>,
}

impl GatewayStatusWriter {
    /// Forgets what was written (a new lease term: the objects decide).
    pub fn forget(&mut self) {
        self.written.clear();
    }

    /// Applies every update whose object is in `store` and whose status
    /// differs; returns how many were written.
    pub async fn sync(
        &mut self,
        client: &kube::Client,
        updates: &[StatusUpdate],
        store: &Store,
    ) -> usize {
        let mut count = 0;
        for u in updates {
            let id = NsName::new(u.namespace.clone(), u.name.clone());
            let Some(current) = current(store, u.kind, &id) else {
                continue;
            };
            let desired = match desired(u, &current) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(kind = %u.kind, object = %id, error = %e,
                        "Gateway API status does not fit its schema; not written");
                    continue;
                }
            };
            if desired == current.status {
                continue;
            }
            let key = (u.kind, id.clone());
            if self
                .written
                .get(&key)
                .is_some_and(|(v, s)| *v == current.version && *s == desired)
            {
                continue;
            }
            match apply(client, u, &desired).await {
                Ok(()) => {
                    tracing::info!(kind = %u.kind, object = %id, "Gateway API status written");
                    self.written.insert(key, (current.version, desired));
                    count += 1;
                }
                Err(e) => {
                    tracing::warn!(kind = %u.kind, object = %id, error = %e,
                        "cannot write Gateway API status; retrying later")
                }
            }
        }
        self.written
            .retain(|(kind, id), _| current(store, *kind, id).is_some());
        count
    }
}

/// What the API has of an object: its status (typed and written out again,
/// so it compares with [`desired`]), generation and version.
struct Current {
    status: Value,
    generation: Option<i64>,
    version: String,
}

fn current(store: &Store, kind: Kind, id: &NsName) -> Option<Current> {
    fn of<T: Serialize>(
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        status: &Option<T>,
    ) -> Current {
        Current {
            status: status
                .as_ref()
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or(Value::Null),
            generation: meta.generation,
            version: meta.resource_version.clone().unwrap_or_default(),
        }
    }
    Some(match kind {
        Kind::GatewayClass => {
            let o = &store.gateway_classes.get(&id.name)?.object;
            of(&o.metadata, &o.status)
        }
        Kind::Gateway => {
            let o = &store.gateways.get(id)?.object;
            of(&o.metadata, &o.status)
        }
        Kind::ListenerSet => {
            let o = &store.listener_sets.get(id)?.object.set;
            of(&o.metadata, &o.status)
        }
        Kind::HttpRoute => {
            let o = &store.http_routes.get(id)?.object;
            of(&o.metadata, &o.status)
        }
        Kind::GrpcRoute => {
            let o = &store.grpc_routes.get(id)?.object;
            of(&o.metadata, &o.status)
        }
        Kind::TlsRoute => {
            let o = &store.tls_routes.get(id)?.object;
            of(&o.metadata, &o.status)
        }
        Kind::TcpRoute => {
            let o = &store.tcp_routes.get(id)?.object;
            of(&o.metadata, &o.status)
        }
        Kind::UdpRoute => {
            let o = &store.udp_routes.get(id)?.object;
            of(&o.metadata, &o.status)
        }
        Kind::BackendTlsPolicy => {
            let o = &store.backend_tls_policies.get(id)?.object;
            of(&o.metadata, &o.status)
        }
        Kind::RouteTrafficPolicy => {
            let o = &store.route_traffic_policies.get(id)?.object;
            of(&o.metadata, &o.status)
        }
        _ => return None,
    })
}

/// The status to apply: `update` with other controllers' route parents
/// kept, conditions completed, in the typed form.
fn desired(update: &StatusUpdate, current: &Current) -> Result<Value, serde_json::Error> {
    let mut status = update.status.clone();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    complete(&mut status, &current.status, current.generation, &now);
    for list in ["parents", "ancestors"] {
        if let (Some(mine), Some(theirs)) = (
            status.get_mut(list).and_then(Value::as_array_mut),
            current.status.get(list).and_then(Value::as_array),
        ) {
            let others: Vec<Value> = theirs
                .iter()
                .filter(|p| p["controllerName"] != GATEWAY_CONTROLLER_NAME)
                .cloned()
                .collect();
            mine.splice(0..0, others);
        }
    }
    typed(update.kind, status)
}

/// Sets `observedGeneration` and `lastTransitionTime` on every condition
/// under `value`, taking the time from the same condition in `current`
/// when its status is unchanged.
fn complete(value: &mut Value, current: &Value, generation: Option<i64>, now: &str) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                let cur = current.get(key).unwrap_or(&Value::Null);
                if key == "conditions"
                    && let Some(conditions) = v.as_array_mut()
                {
                    for c in conditions {
                        let before = cur
                            .as_array()
                            .and_then(|cs| cs.iter().find(|o| o["type"] == c["type"]));
                        let since = before
                            .filter(|o| o["status"] == c["status"])
                            .and_then(|o| o.get("lastTransitionTime").cloned())
                            .unwrap_or_else(|| Value::String(now.to_string()));
                        c["lastTransitionTime"] = since;
                        if let Some(g) = generation {
                            c["observedGeneration"] = g.into();
                        }
                    }
                } else {
                    complete(v, cur, generation, now);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                // The same entry on the object: a listener by name, a
                // route parent by parentRef and controller.
                let cur = current.as_array().and_then(|cs| {
                    cs.iter().find(|o| {
                        if item.get("name").is_some() {
                            o["name"] == item["name"]
                        } else if item.get("parentRef").is_some() {
                            o["parentRef"] == item["parentRef"]
                                && o["controllerName"] == item["controllerName"]
                        } else if item.get("ancestorRef").is_some() {
                            o["ancestorRef"] == item["ancestorRef"]
                                && o["controllerName"] == item["controllerName"]
                        } else if item.get("targetRef").is_some() {
                            o["targetRef"] == item["targetRef"]
                        } else {
                            false
                        }
                    })
                });
                complete(item, cur.unwrap_or(&Value::Null), generation, now);
            }
        }
        _ => {}
    }
}

/// Reads `status` into the kind's generated status type and writes it out
/// again: what fits the schema, in the form the store's objects have.
fn typed(kind: Kind, status: Value) -> Result<Value, serde_json::Error> {
    use teapot_gateway_api::generated as g;
    fn round<T: DeserializeOwned + Serialize>(v: Value) -> Result<Value, serde_json::Error> {
        serde_json::to_value(serde_json::from_value::<T>(v)?)
    }
    match kind {
        Kind::GatewayClass => round::<g::gateway_classes::GatewayClassStatus>(status),
        Kind::Gateway => round::<g::gateways::GatewayStatus>(status),
        Kind::ListenerSet => round::<g::listener_sets::ListenerSetStatus>(status),
        Kind::HttpRoute => round::<g::http_routes::HttpRouteStatus>(status),
        Kind::GrpcRoute => round::<g::grpc_routes::GrpcRouteStatus>(status),
        Kind::TlsRoute => round::<g::tls_routes::TlsRouteStatus>(status),
        Kind::TcpRoute => round::<g::tcp_routes::TcpRouteStatus>(status),
        Kind::UdpRoute => round::<g::udp_routes::UdpRouteStatus>(status),
        Kind::BackendTlsPolicy => round::<g::backend_tls_policies::BackendTlsPolicyStatus>(status),
        Kind::RouteTrafficPolicy => {
            round::<teapot_api::route_policy::RouteTrafficPolicyStatus>(status)
        }
        _ => Ok(status),
    }
}

async fn apply(client: &kube::Client, u: &StatusUpdate, status: &Value) -> Result<(), kube::Error> {
    let resource: ApiResource = teapot_source::kube::api_resource(u.kind);
    let api: Api<DynamicObject> = if u.kind.is_namespaced() {
        Api::namespaced_with(client.clone(), &u.namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    let mut metadata = json!({"name": u.name});
    if u.kind.is_namespaced() {
        metadata["namespace"] = u.namespace.clone().into();
    }
    let body = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": metadata,
        "status": status,
    });
    api.patch_status(
        &u.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use teapot_source::kube::{KubeSource, WatchSpec};
    use teapot_testkit::apiserver::ApiServer;

    const GW: &str = "gateway.networking.k8s.io/v1";

    fn route_update(conditions_ok: bool) -> StatusUpdate {
        let (status, reason) = if conditions_ok {
            ("True", "Accepted")
        } else {
            ("False", "NotAllowedByListeners")
        };
        StatusUpdate {
            kind: Kind::TcpRoute,
            namespace: "ops".into(),
            name: "db".into(),
            status: json!({"parents": [{
                "parentRef": {"group": GW.split('/').next().unwrap(), "kind": "Gateway",
                              "namespace": "ops", "name": "edge", "sectionName": "db"},
                "controllerName": GATEWAY_CONTROLLER_NAME,
                "conditions": [
                    {"type": "Accepted", "status": status, "reason": reason, "message": ""},
                    {"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs", "message": ""},
                ],
            }]}),
        }
    }

    fn gateway_update() -> StatusUpdate {
        StatusUpdate {
            kind: Kind::Gateway,
            namespace: "ops".into(),
            name: "edge".into(),
            status: json!({
                "addresses": [{"type": "IPAddress", "value": "192.0.2.10"}],
                "conditions": [
                    {"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""},
                    {"type": "Programmed", "status": "True", "reason": "Programmed", "message": ""},
                ],
                "listeners": [{
                    "name": "db", "attachedRoutes": 1,
                    "supportedKinds": [{"group": "gateway.networking.k8s.io", "kind": "TCPRoute"}],
                    "conditions": [{"type": "Programmed", "status": "True", "reason": "Programmed", "message": ""}],
                }],
            }),
        }
    }

    async fn store_of(source: &KubeSource, ready: impl Fn(&Store) -> bool) -> Store {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let store = source.snapshot().store;
            if ready(&store) {
                return store;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the watch did not deliver"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn status_patches(api: &ApiServer) -> usize {
        api.requests()
            .iter()
            .filter(|r| r.method == http::Method::PATCH && r.path.ends_with("/status"))
            .count()
    }

    /// A BackendTLSPolicy's ancestors are written like a route's parents:
    /// another controller's entry stays, teapot's conditions get their
    /// generation and time.
    #[tokio::test]
    async fn backend_tls_policy_ancestors_are_written_and_others_stay() {
        let api = ApiServer::start().await;
        let gateway = |name: &str, controller: &str| {
            json!({
                "ancestorRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "ops", "name": name},
                "controllerName": controller,
                "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                                "lastTransitionTime": "2025-01-01T00:00:00Z"}],
            })
        };
        let other = gateway("mesh", "example.com/mesh");
        api.apply(json!({"apiVersion": GW, "kind": "BackendTLSPolicy",
            "metadata": {"name": "web", "namespace": "ops"},
            "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
                     "validation": {"hostname": "web.internal", "wellKnownCACertificates": "System"}},
            "status": {"ancestors": [other.clone()]}}));
        let source = KubeSource::start_with(
            &api.client(),
            vec![WatchSpec::of(Kind::BackendTlsPolicy, None)],
        );
        source.wait_synced().await;
        let store = source.snapshot().store;
        let mut mine = gateway("edge", GATEWAY_CONTROLLER_NAME);
        mine["conditions"][0]
            .as_object_mut()
            .unwrap()
            .remove("lastTransitionTime");
        let update = StatusUpdate {
            kind: Kind::BackendTlsPolicy,
            namespace: "ops".into(),
            name: "web".into(),
            status: json!({"ancestors": [mine]}),
        };
        let mut writer = GatewayStatusWriter::default();
        assert_eq!(writer.sync(&api.client(), &[update], &store).await, 1);
        let policy = api.get(GW, "BackendTLSPolicy", "ops", "web").unwrap();
        let ancestors = policy["status"]["ancestors"].as_array().unwrap();
        assert_eq!(ancestors.len(), 2, "{ancestors:?}");
        assert_eq!(ancestors[0], other);
        let condition = &ancestors[1]["conditions"][0];
        assert_eq!(ancestors[1]["ancestorRef"]["name"], "edge");
        assert_eq!(
            condition["observedGeneration"],
            policy["metadata"]["generation"]
        );
        assert!(condition["lastTransitionTime"].is_string());
    }

    /// A RouteTrafficPolicy's status is written per target, with its
    /// generation and time, and an unchanged one is not written again.
    #[tokio::test]
    async fn route_traffic_policy_status_is_written_once() {
        const TEAPOT: &str = "teapot.dev/v1alpha1";
        let api = ApiServer::start().await;
        api.apply(json!({"apiVersion": TEAPOT, "kind": "RouteTrafficPolicy",
            "metadata": {"name": "admin-only", "namespace": "ops"},
            "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "web"}],
                     "inFlightPerClient": 5}}));
        let source = KubeSource::start_with(
            &api.client(),
            vec![WatchSpec::of(Kind::RouteTrafficPolicy, None)],
        );
        source.wait_synced().await;
        let store = source.snapshot().store;
        let report = crate::compile::gateway::route_policy::report(&store);
        let update = StatusUpdate {
            kind: Kind::RouteTrafficPolicy,
            namespace: "ops".into(),
            name: "admin-only".into(),
            status: to_value(&report[0].status),
        };
        let mut writer = GatewayStatusWriter::default();
        assert_eq!(
            writer
                .sync(&api.client(), std::slice::from_ref(&update), &store)
                .await,
            1
        );
        let policy = api
            .get(TEAPOT, "RouteTrafficPolicy", "ops", "admin-only")
            .unwrap();
        let target = &policy["status"]["targets"][0];
        assert_eq!(target["targetRef"]["name"], "web");
        let condition = &target["conditions"][0];
        assert_eq!(condition["type"], "Accepted");
        assert_eq!(condition["reason"], "TargetNotFound", "{condition}");
        assert!(condition["lastTransitionTime"].is_string());
        let patches = status_patches(&api);
        let store = store_of(&source, |s| {
            s.route_traffic_policies
                .values()
                .any(|p| p.object.status.is_some())
        })
        .await;
        writer.sync(&api.client(), &[update], &store).await;
        assert_eq!(status_patches(&api), patches, "unchanged: not written");
    }

    /// A ListenerSet watched in kube mode gets the status the compile
    /// decides, written like a Gateway's (its listeners' conditions with
    /// generation and time), once.
    #[tokio::test]
    async fn listener_set_status_is_written_once() {
        let api = ApiServer::start().await;
        api.apply(json!({"apiVersion": GW, "kind": "ListenerSet",
            "metadata": {"name": "extra", "namespace": "ops"},
            "spec": {"parentRef": {"name": "edge"},
                     "listeners": [{"name": "web", "protocol": "HTTP", "port": 80, "hostname": "web.example"}]}}));
        let source =
            KubeSource::start_with(&api.client(), vec![WatchSpec::of(Kind::ListenerSet, None)]);
        source.wait_synced().await;
        let store = source.snapshot().store;
        assert_eq!(store.listener_sets.len(), 1);
        // No Gateway allows it: the compile's verdict.
        let snapshot = crate::compile::compile(
            &store,
            Vec::new(),
            1,
            &crate::compile::CompileOptions::default(),
            &crate::live::endpoints::EndpointRegistry::default(),
        );
        let update = updates(&snapshot)
            .into_iter()
            .find(|u| u.kind == Kind::ListenerSet);
        // The Gateway it names is not there: not teapot's to report.
        assert!(update.is_none());
        let update = StatusUpdate {
            kind: Kind::ListenerSet,
            namespace: "ops".into(),
            name: "extra".into(),
            status: json!({
                "conditions": [
                    {"type": "Accepted", "status": "False", "reason": "NotAllowed", "message": "m"},
                    {"type": "Programmed", "status": "False", "reason": "NotAllowed", "message": "m"},
                ],
                "listeners": [{"name": "web", "attachedRoutes": 0, "conditions": [
                    {"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""}]}],
            }),
        };
        let mut writer = GatewayStatusWriter::default();
        assert_eq!(
            writer
                .sync(&api.client(), std::slice::from_ref(&update), &store)
                .await,
            1
        );
        let set = api.get(GW, "ListenerSet", "ops", "extra").unwrap();
        assert_eq!(set["status"]["conditions"][0]["reason"], "NotAllowed");
        let listener = &set["status"]["listeners"][0]["conditions"][0];
        assert_eq!(
            listener["observedGeneration"],
            set["metadata"]["generation"]
        );
        assert!(listener["lastTransitionTime"].is_string());
        let patches = status_patches(&api);
        let store = store_of(&source, |s| {
            s.listener_sets
                .values()
                .any(|l| l.object.set.status.is_some())
        })
        .await;
        writer.sync(&api.client(), &[update], &store).await;
        assert_eq!(status_patches(&api), patches, "unchanged: not written");
    }

    /// Against the API double: the status appears on the objects, another
    /// controller's route parent stays, and an unchanged status is not
    /// written again.
    #[tokio::test]
    async fn status_is_applied_once_and_other_controllers_parents_stay() {
        let api = ApiServer::start().await;
        api.apply(json!({"apiVersion": GW, "kind": "Gateway",
            "metadata": {"name": "edge", "namespace": "ops"},
            "spec": {"gatewayClassName": "teapot",
                     "listeners": [{"name": "db", "port": 5432, "protocol": "TCP"}]}}));
        let other = json!({
            "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "ops", "name": "mesh"},
            "controllerName": "example.com/mesh",
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                            "lastTransitionTime": "2025-01-01T00:00:00Z"}],
        });
        api.apply(json!({"apiVersion": GW, "kind": "TCPRoute",
            "metadata": {"name": "db", "namespace": "ops"},
            "spec": {"parentRefs": [{"name": "edge"}, {"name": "mesh"}],
                     "rules": [{"backendRefs": [{"name": "db", "port": 5432}]}]},
            "status": {"parents": [other.clone()]}}));
        let source = KubeSource::start_with(
            &api.client(),
            vec![
                WatchSpec::of(Kind::Gateway, None),
                WatchSpec::of(Kind::TcpRoute, None),
            ],
        );
        source.wait_synced().await;
        let store = source.snapshot().store;
        let client = api.client();
        let mut writer = GatewayStatusWriter::default();
        let updates = [route_update(true), gateway_update()];
        assert_eq!(writer.sync(&client, &updates, &store).await, 2);

        let gateway = api.get(GW, "Gateway", "ops", "edge").unwrap();
        assert_eq!(gateway["status"]["addresses"][0]["value"], "192.0.2.10");
        let listener = &gateway["status"]["listeners"][0];
        assert_eq!(listener["attachedRoutes"], 1);
        let generation = gateway["metadata"]["generation"].clone();
        assert_eq!(listener["conditions"][0]["observedGeneration"], generation);
        assert!(listener["conditions"][0]["lastTransitionTime"].is_string());
        let route = api.get(GW, "TCPRoute", "ops", "db").unwrap();
        let parents = route["status"]["parents"].as_array().unwrap();
        assert_eq!(parents.len(), 2, "{parents:?}");
        assert_eq!(
            parents[0], other,
            "another controller's entry is kept as it was"
        );
        assert_eq!(parents[1]["controllerName"], GATEWAY_CONTROLLER_NAME);
        let accepted_since = parents[1]["conditions"][0]["lastTransitionTime"].clone();

        // Once the watch has the written status, the same updates write
        // nothing; and nothing is written twice for one version either.
        let written = status_patches(&api);
        let store = store_of(&source, |s| {
            s.gateways.values().all(|g| g.object.status.is_some())
                && s.tcp_routes.values().all(|r| {
                    r.object
                        .status
                        .as_ref()
                        .is_some_and(|st| st.parents.len() == 2)
                })
        })
        .await;
        assert_eq!(writer.sync(&client, &updates, &store).await, 0);
        let mut fresh = GatewayStatusWriter::default();
        assert_eq!(
            fresh.sync(&client, &updates, &store).await,
            0,
            "the objects already say it"
        );
        assert_eq!(status_patches(&api), written);

        // A change of one condition is written; the others keep their time.
        let changed = [route_update(false)];
        assert_eq!(writer.sync(&client, &changed, &store).await, 1);
        let route = api.get(GW, "TCPRoute", "ops", "db").unwrap();
        let ours = &route["status"]["parents"][1]["conditions"];
        assert_eq!(ours[0]["reason"], "NotAllowedByListeners");
        assert_eq!(ours[1]["lastTransitionTime"], accepted_since);
        // Objects the store does not have are not written.
        let missing = StatusUpdate {
            name: "gone".into(),
            ..route_update(true)
        };
        assert_eq!(writer.sync(&client, &[missing], &store).await, 0);
    }

    /// One Gateway with an HTTP and a TCP listener, an HTTPRoute and a
    /// TCPRoute: the writer gets the class, the Gateway with both halves
    /// (the TCP listener's entry from the L4 plane, not the HTTP compile's
    /// "not served"), and both routes.
    #[test]
    fn updates_join_the_http_and_l4_compiles() {
        use crate::compile::CompileOptions;
        use crate::compile::l4::{L4Config, L4Inputs};
        use crate::compile::tests::compile_test_docs;
        use std::sync::Arc;
        let docs = "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: teapot}
spec: {controllerName: teapot.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: ops}
spec:
  gatewayClassName: teapot
  listeners:
  - {name: web, protocol: HTTP, port: 80}
  - {name: db, protocol: TCP, port: 5432}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: site, namespace: ops}
spec:
  parentRefs: [{name: edge, sectionName: web}]
  hostnames: [site.example]
  rules: [{backendRefs: [{name: web, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: pg, namespace: ops}
spec:
  parentRefs: [{name: edge, sectionName: db}]
  rules: [{backendRefs: [{name: pg, port: 5432}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ops}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: pg, namespace: ops}
spec: {ports: [{port: 5432}]}
";
        let options = CompileOptions {
            l4: Some(L4Inputs {
                config: Arc::new(L4Config {
                    pools: vec!["default=192.0.2.10".parse().unwrap()],
                    ..L4Config::default()
                }),
                previous: Arc::default(),
                runtime: Arc::default(),
            }),
            ..CompileOptions::default()
        };
        let snapshot = compile_test_docs(&[docs.to_string()], &options);
        let all = updates(&snapshot);
        let find = |kind: Kind, name: &str| {
            all.iter()
                .find(|u| u.kind == kind && u.name == name)
                .unwrap_or_else(|| panic!("no {kind} {name} in {all:#?}"))
        };
        let class = find(Kind::GatewayClass, "teapot");
        assert_eq!(class.status["conditions"][0]["status"], "True");
        let gateway = &find(Kind::Gateway, "edge").status;
        let listener = |name: &str| {
            gateway["listeners"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["name"] == name)
                .unwrap_or_else(|| panic!("no listener {name} in {gateway:#}"))
                .clone()
        };
        assert_eq!(listener("web")["attachedRoutes"], 1);
        let db = listener("db");
        assert_eq!(db["attachedRoutes"], 1, "{db:#}");
        assert_eq!(db["supportedKinds"][0]["kind"], "TCPRoute");
        assert!(
            !db.to_string().contains("UnsupportedProtocol"),
            "the L4 plane's entry replaced the HTTP compile's: {db:#}"
        );
        assert!(
            gateway["addresses"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["value"] == "192.0.2.10"),
            "{gateway:#}"
        );
        let accepted = gateway["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Accepted")
            .unwrap();
        assert_eq!(accepted["status"], "True", "{gateway:#}");
        let site = &find(Kind::HttpRoute, "site").status;
        assert_eq!(
            site["parents"][0]["controllerName"],
            GATEWAY_CONTROLLER_NAME
        );
        let pg = &find(Kind::TcpRoute, "pg").status;
        assert_eq!(
            pg["parents"][0]["conditions"][0]["status"], "True",
            "{pg:#}"
        );
        // Every update fits its kind's schema.
        for u in &all {
            let mut status = u.status.clone();
            complete(&mut status, &Value::Null, Some(1), "2026-01-01T00:00:00Z");
            typed(u.kind, status).unwrap_or_else(|e| panic!("{} {}: {e}", u.kind, u.name));
        }
    }
}
