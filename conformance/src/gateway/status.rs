//! Status checks: the upstream tests' `kubernetes.*` status helpers
//! (`conformance/utils/kubernetes/helpers.go`), ported as data
//! ([`super::data::Check`]: the helper's name and its arguments after `t`,
//! the client and the timeout configuration), judged against the proxy's
//! admin `/status`: `gatewayAPI` (GatewayClasses, Gateways, ListenerSets,
//! HTTPRoutes and GRPCRoutes in the shapes of their status subresources),
//! `l4.routes` (TCPRoutes, UDPRoutes and TLSRoutes with their parents) and
//! `backendTLSPolicies`.
//!
//! Each helper is judged as upstream's polls it: which conditions must be
//! present and how they compare (`findConditionInList`: type, then status
//! and reason unless empty), whether it first requires every condition to
//! carry the object's generation (`ConditionsHaveLatestObservedGeneration`;
//! the object's generation is its manifest's `metadata.generation`, 0 when
//! unset, as a condition without `observedGeneration` reads), listener
//! lists (`gatewayListenersMatch`), parents (`parentsForRouteMatch`). A
//! helper this module does not know fails the check, naming it.
//!
//! Two readings where `/status` and a cluster differ, both what a cluster
//! would show: a parentRef without `group` or `kind` reads as the CRD's
//! defaults (the API server fills them into the spec, which the status
//! echoes; manifests mode has no API server), and an L4 route's parents,
//! which the L4 report lists without `controllerName`, carry teapot's
//! (every route the L4 report lists is under teapot's Gateways, and its
//! written status says so).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use tokio::time::{Instant, sleep};

use super::data::Check;
use super::outcome::CaseOutcome;

/// `suite.ControllerName`: the controller name of teapot's GatewayClass.
pub const CONTROLLER_NAME: &str = "teapot.dev/gateway-controller";
/// The Gateway API group, the default of a parentRef's `group`.
const GROUP: &str = "gateway.networking.k8s.io";
/// Between polls (`DefaultPollInterval`).
const POLL: Duration = Duration::from_millis(100);

/// `metadata.generation` of the objects written, by (kind, namespace,
/// name); absent means 0.
pub type Generations = BTreeMap<(String, String, String), i64>;

/// Where a check's polls stand: the negative helpers (`*MustHaveNoAcceptedParents`)
/// accept an empty parent list only on its second sighting ("correctly did
/// not set" against "has not set yet").
#[derive(Debug, Default, Clone)]
pub struct CheckState {
    empty_seen: bool,
}

/// Judges every check against `/status` as `fetch` returns it, polling
/// every [`POLL`] until each holds or `timeout` passes (all checks share
/// the deadline: they start together). A check's failure is what its last
/// poll saw.
pub async fn run_checks<F, Fut>(
    checks: &[Check],
    generations: &Generations,
    timeout: Duration,
    mut fetch: F,
) -> Vec<CaseOutcome>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Value, String>>,
{
    let deadline = Instant::now() + timeout;
    let mut states = vec![CheckState::default(); checks.len()];
    let mut results: Vec<Option<Result<(), String>>> = vec![None; checks.len()];
    loop {
        let status = fetch().await;
        for (i, check) in checks.iter().enumerate() {
            if matches!(results[i], Some(Ok(()))) {
                continue;
            }
            let verdict = match &status {
                Ok(status) => judge(check, status, generations, &mut states[i]),
                Err(e) => Err(format!("reading /status: {e}")),
            };
            results[i] = Some(verdict);
        }
        let pending = results.iter().any(|r| !matches!(r, Some(Ok(()))));
        if !pending || Instant::now() >= deadline {
            break;
        }
        sleep(POLL).await;
    }
    checks
        .iter()
        .zip(results)
        .map(|(check, result)| CaseOutcome {
            name: check.name(),
            failure: match result {
                Some(Ok(())) => None,
                Some(Err(e)) => Some(format!("{e} (after {timeout:?})")),
                None => Some("not judged".into()),
            },
        })
        .collect()
}

/// One poll of one check: `Ok` when the helper's expectation holds on
/// `status`, else what `status` says instead.
pub fn judge(
    check: &Check,
    status: &Value,
    generations: &Generations,
    state: &mut CheckState,
) -> Result<(), String> {
    let view = View {
        status,
        generations,
    };
    let args = Args(&check.arguments);
    let helper = check
        .helper
        .strip_prefix("kubernetes.")
        .unwrap_or(&check.helper);
    let route = |kind: &'static str| -> Result<(), String> {
        let route = args.nn(0)?;
        let gateway = args.nn(1)?;
        view.route_must_have_condition(kind, &route, &gateway, &args.condition(2)?)
    };
    let cond = |type_: &str, status: &str, reason: &str| Cond {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
    };
    match helper {
        "GatewayMustHaveCondition" => {
            let gw = args.nn(0)?;
            let conditions = view.gateway_conditions(&gw)?;
            view.latest("Gateway", &gw, &conditions)?;
            find(&conditions, &args.condition(1)?).map_err(|e| format!("Gateway {gw}: {e}"))
        }
        "GatewayMustHaveLatestConditions" => {
            let gw = args.nn(0)?;
            view.latest("Gateway", &gw, &view.gateway_conditions(&gw)?)
        }
        "GatewayClassMustHaveLatestConditions" => {
            let class = args.nn(0)?;
            view.latest("GatewayClass", &class, &view.class_conditions(&class.name)?)
        }
        "GWCMustHaveAcceptedConditionAny" | "GWCMustHaveAcceptedConditionTrue" => {
            let name = args.text(0)?;
            let class = Nn {
                namespace: String::new(),
                name,
            };
            let conditions = view.class_conditions(&class.name)?;
            view.latest("GatewayClass", &class, &conditions)?;
            let status = if helper.ends_with("True") { "True" } else { "" };
            find(&conditions, &cond("Accepted", status, ""))
                .map_err(|e| format!("GatewayClass {}: {e}", class.name))
        }
        "GatewayMustHaveAttachedListeners" => {
            let gw = args.nn(0)?;
            let want = args.int(1)?;
            view.latest("Gateway", &gw, &view.gateway_conditions(&gw)?)?;
            let got = view
                .gateway_status(&gw)?
                .get("attachedListenerSets")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if got == want {
                Ok(())
            } else {
                Err(format!(
                    "Gateway {gw} has attachedListenerSets {got}, want {want}"
                ))
            }
        }
        "GatewayMustHaveZeroRoutes" => {
            let gw = args.nn(0)?;
            view.latest("Gateway", &gw, &view.gateway_conditions(&gw)?)?;
            let listeners = list(view.gateway_status(&gw)?, "listeners");
            let attached = |l: &Value| l.get("attachedRoutes").and_then(Value::as_i64);
            match listeners {
                [] => Ok(()),
                [one] if attached(one).unwrap_or(0) == 0 => Ok(()),
                _ => Err(format!(
                    "Gateway {gw} has {} listeners with attachedRoutes {:?}, want none or one with 0",
                    listeners.len(),
                    listeners.iter().map(attached).collect::<Vec<_>>()
                )),
            }
        }
        "GatewayListenersMustHaveConditions" => {
            let gw = args.nn(0)?;
            let conditions = args.conditions(1)?;
            let names = args.texts_from(2)?;
            let listeners = list(view.gateway_status(&gw)?, "listeners");
            listeners_have_conditions(&format!("Gateway {gw}"), listeners, &conditions, &names)
        }
        "GatewayListenerMustHaveConditions" => {
            let gw = args.nn(0)?;
            let name = args.text(1)?;
            let conditions = args.conditions(2)?;
            let listeners = list(view.gateway_status(&gw)?, "listeners");
            let listener = listeners
                .iter()
                .find(|l| text(l, "name") == name)
                .ok_or_else(|| format!("Gateway {gw} has no listener {name} in status"))?;
            let actual = read_conditions(listener);
            for want in &conditions {
                find(&actual, want).map_err(|e| format!("Gateway {gw} listener {name}: {e}"))?;
            }
            Ok(())
        }
        "GatewayStatusMustHaveListeners" => {
            let gw = args.nn(0)?;
            view.latest("Gateway", &gw, &view.gateway_conditions(&gw)?)?;
            let expected = args.listeners(1)?;
            listeners_match(
                &format!("Gateway {gw}"),
                &expected,
                list(view.gateway_status(&gw)?, "listeners"),
            )
        }
        "ListenerSetStatusMustHaveListeners" => {
            let set = args.nn(0)?;
            let status = view.listener_set_status(&set)?;
            view.latest("ListenerSet", &set, &read_conditions(status))?;
            listeners_match(
                &format!("ListenerSet {set}"),
                &args.listeners(1)?,
                list(status, "listeners"),
            )
        }
        "ListenerSetMustHaveCondition" => {
            let set = args.nn(0)?;
            let conditions = read_conditions(view.listener_set_status(&set)?);
            view.latest("ListenerSet", &set, &conditions)?;
            find(&conditions, &args.condition(1)?).map_err(|e| format!("ListenerSet {set}: {e}"))
        }
        "ListenerSetListenersMustHaveConditions" => {
            let set = args.nn(0)?;
            view.listener_set_listeners_have(&set, &args.conditions(1)?, &args.texts_from(2)?)
        }
        "ResourceListenersMustHaveConditions" => {
            let resource = args.resource_ref(0)?;
            view.resource_listeners_have(&resource, &args.conditions(1)?)
        }
        "HTTPRouteMustHaveCondition" => route("HTTPRoute"),
        "TCPRouteMustHaveCondition" => route("TCPRoute"),
        "UDPRouteMustHaveCondition" => route("UDPRoute"),
        "TLSRouteMustHaveCondition" => route("TLSRoute"),
        "HTTPRouteMustHaveResolvedRefsConditionsTrue"
        | "TLSRouteMustHaveResolvedRefsConditionsTrue"
        | "HTTPRouteMustHaveResolvedRefsMustHaveBackendsNotFound"
        | "HTTPRouteMustHaveRouteAcceptedConditionsTrue" => {
            let kind = if helper.starts_with("TLS") {
                "TLSRoute"
            } else {
                "HTTPRoute"
            };
            let want = match helper {
                "HTTPRouteMustHaveResolvedRefsMustHaveBackendsNotFound" => {
                    cond("ResolvedRefs", "False", "BackendNotFound")
                }
                "HTTPRouteMustHaveRouteAcceptedConditionsTrue" => {
                    cond("Accepted", "True", "Accepted")
                }
                _ => cond("ResolvedRefs", "True", "ResolvedRefs"),
            };
            view.route_must_have_condition(kind, &args.nn(0)?, &args.nn(1)?, &want)
        }
        "HTTPRouteMustBeAcceptedAndResolved" => {
            let (route, gw) = (args.nn(0)?, args.nn(1)?);
            view.route_must_have_condition(
                "HTTPRoute",
                &route,
                &gw,
                &cond("Accepted", "True", "Accepted"),
            )?;
            view.route_must_have_condition(
                "HTTPRoute",
                &route,
                &gw,
                &cond("ResolvedRefs", "True", "ResolvedRefs"),
            )
        }
        "HTTPRouteMustHaveNoAcceptedParents"
        | "TLSRouteMustHaveNoAcceptedParents"
        | "TCPRouteMustHaveNoAcceptedParents"
        | "UDPRouteMustHaveNoAcceptedParents" => {
            let kind = route_kind_prefix(helper)?;
            view.no_accepted_parents(kind, &args.nn(0)?, state)
        }
        "HTTPRouteMustHaveParents"
        | "TCPRouteMustHaveParents"
        | "UDPRouteMustHaveParents"
        | "TLSRouteMustHaveParents" => {
            let kind = route_kind_prefix(helper)?;
            let route = args.nn(0)?;
            let expected = args.parents(1)?;
            let namespace_required = args.boolean(2)?;
            // `TLSRouteMustHaveParents` alone does not wait for the latest
            // generation.
            view.route_must_have_parents(
                kind,
                &route,
                &expected,
                namespace_required,
                kind != "TLSRoute",
            )
        }
        "RouteMustHaveParents" => {
            let route = args.nn(0)?;
            let expected = args.parents(1)?;
            let namespace_required = args.boolean(2)?;
            let kind = route_type(args.get(3)?)?;
            view.route_must_have_parents(kind, &route, &expected, namespace_required, true)
        }
        "WaitForGatewayAddress" => view.gateway_address(&args.gateway_ref(0)?).map(|_| ()),
        "GatewayAndRoutesMustBeAccepted" => {
            let controller = args.text(0)?;
            let gw = args.gateway_ref(1)?;
            let kind = route_type(args.get(2)?)?;
            // `usePort` (3) only shapes the address returned.
            args.get(3)?;
            view.gateway_and_routes_accepted(&controller, &gw, kind, &args.nns_from(4)?)
        }
        "GatewayAndHTTPRoutesMustBeAccepted"
        | "GatewayAndTCPRoutesMustBeAccepted"
        | "GatewayAndUDPRoutesMustBeAccepted" => {
            let kind = match helper {
                "GatewayAndHTTPRoutesMustBeAccepted" => "HTTPRoute",
                "GatewayAndTCPRoutesMustBeAccepted" => "TCPRoute",
                _ => "UDPRoute",
            };
            let controller = args.text(0)?;
            let gw = args.gateway_ref(1)?;
            view.gateway_and_routes_accepted(&controller, &gw, kind, &args.nns_from(2)?)
        }
        "GatewayAndTLSRoutesMustBeAccepted" => {
            // Upstream checks the address and each route's parents (no
            // generation wait, no listener conditions).
            let controller = args.text(0)?;
            let gw = args.gateway_ref(1)?;
            view.gateway_address(&gw)?;
            for route in args.nns_from(2)? {
                let expected = gw.expected_parents(&controller);
                let required = route.namespace != gw.nn.namespace;
                view.route_must_have_parents("TLSRoute", &route, &expected, required, false)?;
            }
            Ok(())
        }
        "RoutesAndParentMustBeAccepted" => {
            let controller = args.text(0)?;
            let resource = args.resource_ref(1)?;
            let kind = route_type(args.get(2)?)?;
            view.routes_and_parent_accepted(&controller, &resource, kind, &args.nns_from(3)?)
        }
        "BackendTLSPolicyMustHaveCondition" => {
            view.policy_must_have_condition(&args.nn(0)?, &args.nn(1)?, &args.condition(2)?)
        }
        "BackendTLSPolicyMustHaveAcceptedConditionTrue" => view.policy_must_have_condition(
            &args.nn(0)?,
            &args.nn(1)?,
            &cond("Accepted", "True", "Accepted"),
        ),
        "BackendTLSPolicyMustHaveLatestConditions" => {
            // Upstream passes the policy object the test fetched; the data
            // names it.
            let policy = args.nn(0)?;
            for ancestor in list(view.policy_status(&policy)?, "ancestors") {
                view.latest("BackendTLSPolicy", &policy, &read_conditions(ancestor))?;
            }
            Ok(())
        }
        "HTTPRouteMustHaveLatestConditions" => {
            let route = args.nn(0)?;
            for parent in view.route_parents("HTTPRoute", &route)? {
                view.latest("HTTPRoute", &route, &parent.conditions)?;
            }
            Ok(())
        }
        _ => Err(format!(
            "helper {} is not judged by this runner",
            check.helper
        )),
    }
}

/// `HTTPRoute` of `HTTPRouteMustHave...`, and the other kinds likewise.
fn route_kind_prefix(helper: &str) -> Result<&'static str, String> {
    ["HTTPRoute", "GRPCRoute", "TCPRoute", "UDPRoute", "TLSRoute"]
        .into_iter()
        .find(|k| helper.starts_with(k))
        .ok_or_else(|| format!("{helper} names no route kind"))
}

/// The route kind of a `routeType` argument (`&gatewayv1.HTTPRoute{}`):
/// the port writes the Go expression's type, as text (`HTTPRoute`,
/// `&v1.GRPCRoute{}`) or as an object naming it (`Kind`, `Type`).
fn route_type(value: &Value) -> Result<&'static str, String> {
    let named = match value {
        Value::String(s) => Some(s.as_str()),
        Value::Object(map) => ["Kind", "Type", "kind", "type", "RouteType"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_str)),
        _ => None,
    };
    let kinds = ["HTTPRoute", "GRPCRoute", "TCPRoute", "UDPRoute", "TLSRoute"];
    named
        .and_then(|text| {
            let ident = text
                .trim_start_matches('&')
                .trim_end_matches("{}")
                .rsplit('.')
                .next()
                .unwrap_or_default();
            kinds.into_iter().find(|k| *k == ident)
        })
        .ok_or_else(|| format!("route type argument {value} names no route kind"))
}

/// A `types.NamespacedName`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Nn {
    namespace: String,
    name: String,
}

impl std::fmt::Display for Nn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// A `GatewayRef` or `ResourceRef`: the parent, its group and kind, and
/// the listeners named (one empty name when none: `NewGatewayRef` adds it,
/// so one parent is expected).
#[derive(Debug, Clone)]
struct ParentRef {
    nn: Nn,
    group: String,
    kind: String,
    listeners: Vec<String>,
}

impl ParentRef {
    /// The parents `RoutesAndParentMustBeAccepted` expects of a route: one
    /// per listener named, Accepted.
    fn expected_parents(&self, controller: &str) -> Vec<ExpectedParent> {
        self.listeners
            .iter()
            .map(|_| ExpectedParent {
                group: Some(self.group.clone()),
                kind: Some(self.kind.clone()),
                name: self.nn.name.clone(),
                namespace: Some(self.nn.namespace.clone()),
                controller: controller.to_string(),
                conditions: vec![Cond {
                    type_: "Accepted".into(),
                    status: "True".into(),
                    reason: "Accepted".into(),
                }],
            })
            .collect()
    }
}

/// An expected condition (`metav1.Condition`: only type, status and
/// reason count; an empty status or reason matches any).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cond {
    type_: String,
    status: String,
    reason: String,
}

/// A condition as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Actual {
    type_: String,
    status: String,
    reason: String,
    observed_generation: i64,
}

impl std::fmt::Display for Actual {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}/{}", self.type_, self.status, self.reason)
    }
}

fn show(conditions: &[Actual]) -> String {
    let items: Vec<String> = conditions.iter().map(Actual::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// `findConditionInList`.
fn find(conditions: &[Actual], want: &Cond) -> Result<(), String> {
    let found = conditions.iter().any(|c| {
        c.type_ == want.type_
            && (want.status.is_empty() || c.status == want.status)
            && (want.reason.is_empty() || c.reason == want.reason)
    });
    if found {
        Ok(())
    } else {
        Err(format!(
            "want {}={}/{}, conditions are {}",
            want.type_,
            or_any(&want.status),
            or_any(&want.reason),
            show(conditions)
        ))
    }
}

fn or_any(text: &str) -> &str {
    if text.is_empty() { "*" } else { text }
}

/// `conditionsMatch`: at least as many conditions, each expected one found.
fn conditions_match(expected: &[Cond], actual: &[Actual]) -> Result<(), String> {
    if actual.len() < expected.len() {
        return Err(format!(
            "{} conditions expected, {} present: {}",
            expected.len(),
            actual.len(),
            show(actual)
        ));
    }
    expected.iter().try_for_each(|want| find(actual, want))
}

/// An expected listener (`ListenerStatus`, `ListenerEntryStatus`).
#[derive(Debug, Clone)]
struct ExpectedListener {
    name: String,
    /// (group, kind); a nil group is the Gateway API group.
    kinds: Vec<(String, String)>,
    conditions: Vec<Cond>,
    attached: i64,
}

/// `gatewayListenersMatch` / `listenerSetListenersMatch`.
fn listeners_match(
    what: &str,
    expected: &[ExpectedListener],
    actual: &[Value],
) -> Result<(), String> {
    if expected.len() != actual.len() {
        let names: Vec<String> = actual.iter().map(|l| text(l, "name")).collect();
        return Err(format!(
            "{what} has {} listeners in status ({}), want {}",
            actual.len(),
            names.join(", "),
            expected.len()
        ));
    }
    for want in expected {
        let listener = actual
            .iter()
            .find(|l| text(l, "name") == want.name)
            .ok_or_else(|| format!("{what} has no listener {} in status", want.name))?;
        let kinds: Vec<(String, String)> = list(listener, "supportedKinds")
            .iter()
            .map(|k| {
                let group = k.get("group").and_then(Value::as_str).unwrap_or(GROUP);
                (group.to_string(), text(k, "kind"))
            })
            .collect();
        let show_kinds = || {
            kinds
                .iter()
                .map(|(g, k)| format!("{g}/{k}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if want.kinds.is_empty() && !kinds.is_empty() {
            return Err(format!(
                "{what} listener {}: supportedKinds [{}], want none",
                want.name,
                show_kinds()
            ));
        }
        for kind in &want.kinds {
            if !kinds.contains(kind) {
                return Err(format!(
                    "{what} listener {}: supportedKinds [{}] lack {}/{}",
                    want.name,
                    show_kinds(),
                    kind.0,
                    kind.1
                ));
            }
        }
        let attached = listener
            .get("attachedRoutes")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if attached != want.attached {
            return Err(format!(
                "{what} listener {}: attachedRoutes {attached}, want {}",
                want.name, want.attached
            ));
        }
        conditions_match(&want.conditions, &read_conditions(listener))
            .map_err(|e| format!("{what} listener {}: {e}", want.name))?;
    }
    Ok(())
}

/// The loop of `GatewayListenersMustHaveConditions` and
/// `ListenerSetListenersMustHaveConditions`: every listener in status (of
/// `names`, when given) has every condition, and every listener named is
/// there.
fn listeners_have_conditions(
    what: &str,
    listeners: &[Value],
    conditions: &[Cond],
    names: &[String],
) -> Result<(), String> {
    let mut missing: Vec<&String> = names.iter().collect();
    for want in conditions {
        for listener in listeners {
            let name = text(listener, "name");
            if !names.is_empty() && !names.contains(&name) {
                continue;
            }
            find(&read_conditions(listener), want)
                .map_err(|e| format!("{what} listener {name}: {e}"))?;
            missing.retain(|n| **n != name);
        }
    }
    if let Some(name) = missing.first() {
        return Err(format!("{what} has no listener {name} in status"));
    }
    Ok(())
}

/// A route's parent as `/status` shows it, parentRef defaults filled in.
#[derive(Debug, Clone)]
struct Parent {
    group: String,
    kind: String,
    name: String,
    namespace: Option<String>,
    controller: String,
    conditions: Vec<Actual>,
}

impl std::fmt::Display for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let namespace = self.namespace.as_deref().unwrap_or("-");
        write!(
            f,
            "{} {namespace}/{} ({}) {}",
            self.kind,
            self.name,
            self.controller,
            show(&self.conditions)
        )
    }
}

/// An expected parent (`RouteParentStatus`).
#[derive(Debug, Clone)]
struct ExpectedParent {
    group: Option<String>,
    kind: Option<String>,
    name: String,
    namespace: Option<String>,
    controller: String,
    conditions: Vec<Cond>,
}

/// `parentsForRouteMatch`: every expected parent matches one actual parent
/// (controller, group, kind, name, namespace unless unset where not
/// required, conditions); `sectionName` and `port` are not compared.
fn parents_match(
    route: &str,
    expected: &[ExpectedParent],
    actual: &[Parent],
    namespace_required: bool,
) -> Result<(), String> {
    for want in expected {
        let group = want.group.as_deref().unwrap_or(GROUP);
        let kind = want.kind.as_deref().unwrap_or("Gateway");
        let matched = actual.iter().any(|got| {
            got.controller == want.controller
                && got.group == group
                && got.kind == kind
                && got.name == want.name
                && (got.namespace == want.namespace
                    || (!namespace_required && got.namespace.is_none()))
                && conditions_match(&want.conditions, &got.conditions).is_ok()
        });
        if !matched {
            let conditions: Vec<String> = want
                .conditions
                .iter()
                .map(|c| format!("{}={}/{}", c.type_, or_any(&c.status), or_any(&c.reason)))
                .collect();
            let parents: Vec<String> = actual.iter().map(Parent::to_string).collect();
            return Err(format!(
                "{route}: no parent {kind} {}/{} ({}) with [{}]; parents are [{}]",
                want.namespace.as_deref().unwrap_or("-"),
                want.name,
                want.controller,
                conditions.join(", "),
                parents.join("; ")
            ));
        }
    }
    Ok(())
}

/// `/status` and the objects' generations.
struct View<'a> {
    status: &'a Value,
    generations: &'a Generations,
}

impl View<'_> {
    fn api(&self, key: &str) -> &[Value] {
        self.status
            .get("gatewayAPI")
            .map(|api| list(api, key))
            .unwrap_or(&[])
    }

    fn find<'v>(&self, items: &'v [Value], what: &str, nn: &Nn) -> Result<&'v Value, String> {
        items
            .iter()
            .find(|o| text(o, "name") == nn.name && text(o, "namespace") == nn.namespace)
            .and_then(|o| o.get("status"))
            .ok_or_else(|| format!("{what} {nn} is not in /status"))
    }

    fn gateway_status(&self, gw: &Nn) -> Result<&Value, String> {
        self.find(self.api("gateways"), "Gateway", gw)
    }

    fn gateway_conditions(&self, gw: &Nn) -> Result<Vec<Actual>, String> {
        self.gateway_status(gw).map(read_conditions)
    }

    fn listener_set_status(&self, set: &Nn) -> Result<&Value, String> {
        self.find(self.api("listenerSets"), "ListenerSet", set)
    }

    fn class_conditions(&self, name: &str) -> Result<Vec<Actual>, String> {
        let class = Nn {
            namespace: String::new(),
            name: name.to_string(),
        };
        self.find(self.api("gatewayClasses"), "GatewayClass", &class)
            .map(read_conditions)
    }

    /// `ConditionsHaveLatestObservedGeneration`.
    fn latest(&self, kind: &str, nn: &Nn, conditions: &[Actual]) -> Result<(), String> {
        let want = self
            .generations
            .get(&(kind.to_string(), nn.namespace.clone(), nn.name.clone()))
            .copied()
            .unwrap_or(0);
        let stale: Vec<String> = conditions
            .iter()
            .filter(|c| c.observed_generation != want)
            .map(|c| format!("{} (generation {})", c.type_, c.observed_generation))
            .collect();
        if stale.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{kind} {nn}: expected observedGeneration {want} on every condition; stale: {}",
                stale.join(", ")
            ))
        }
    }

    /// A route's parents: HTTPRoutes and GRPCRoutes from `gatewayAPI`,
    /// the L4 kinds from the L4 report. A route `/status` does not list has
    /// no parents (no status written).
    fn route_parents(&self, kind: &str, route: &Nn) -> Result<Vec<Parent>, String> {
        let key = match kind {
            "HTTPRoute" => "httpRoutes",
            "GRPCRoute" => "grpcRoutes",
            "TCPRoute" => "tcpRoutes",
            "UDPRoute" => "udpRoutes",
            "TLSRoute" => "tlsRoutes",
            other => return Err(format!("no route kind {other}")),
        };
        let same =
            |o: &&Value| text(o, "name") == route.name && text(o, "namespace") == route.namespace;
        let (entries, l4): (&[Value], bool) = match self.api(key).iter().find(same) {
            Some(o) => (
                list(o.get("status").unwrap_or(&Value::Null), "parents"),
                false,
            ),
            None => match self
                .status
                .get("l4")
                .map(|l4| list(l4, "routes"))
                .unwrap_or(&[])
                .iter()
                .filter(|o| text(o, "kind") == kind)
                .find(same)
            {
                Some(o) => (list(o, "parents"), true),
                None => (&[], false),
            },
        };
        Ok(entries
            .iter()
            .map(|p| {
                let reference = p
                    .get("parentRef")
                    .or_else(|| p.get("parent_ref"))
                    .unwrap_or(&Value::Null);
                let or = |key: &str, default: &str| {
                    reference
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or(default)
                        .to_string()
                };
                let controller = match p.get("controllerName").and_then(Value::as_str) {
                    Some(c) => c.to_string(),
                    None if l4 => CONTROLLER_NAME.to_string(),
                    None => String::new(),
                };
                Parent {
                    group: or("group", GROUP),
                    kind: or("kind", "Gateway"),
                    name: or("name", ""),
                    namespace: reference
                        .get("namespace")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    controller,
                    conditions: read_conditions(p),
                }
            })
            .collect())
    }

    /// `*RouteMustHaveCondition`: every parent's conditions are the
    /// latest, and a parent naming the Gateway has the condition.
    fn route_must_have_condition(
        &self,
        kind: &str,
        route: &Nn,
        gw: &Nn,
        want: &Cond,
    ) -> Result<(), String> {
        let parents = self.route_parents(kind, route)?;
        let mut seen = Vec::new();
        for parent in &parents {
            self.latest(kind, route, &parent.conditions)?;
            let names_gateway = parent.name == gw.name
                && parent.namespace.as_ref().is_none_or(|n| *n == gw.namespace);
            if names_gateway {
                match find(&parent.conditions, want) {
                    Ok(()) => return Ok(()),
                    Err(e) => seen.push(e),
                }
            }
        }
        if seen.is_empty() {
            let parents: Vec<String> = parents.iter().map(Parent::to_string).collect();
            Err(format!(
                "{kind} {route} has no parent naming Gateway {gw}; parents are [{}]",
                parents.join("; ")
            ))
        } else {
            Err(format!(
                "{kind} {route} under Gateway {gw}: {}",
                seen.join("; ")
            ))
        }
    }

    /// `*RouteMustHaveNoAcceptedParents`.
    fn no_accepted_parents(
        &self,
        kind: &str,
        route: &Nn,
        state: &mut CheckState,
    ) -> Result<(), String> {
        let parents = self.route_parents(kind, route)?;
        match parents.as_slice() {
            [] if state.empty_seen => Ok(()),
            [] => {
                state.empty_seen = true;
                Err(format!("{kind} {route} has no parents yet (seen once)"))
            }
            [one] => {
                self.latest(kind, route, &one.conditions)?;
                let want = Cond {
                    type_: "Accepted".into(),
                    status: "False".into(),
                    reason: String::new(),
                };
                conditions_match(std::slice::from_ref(&want), &one.conditions)
                    .map_err(|e| format!("{kind} {route} parent {one}: {e}"))
            }
            many => Err(format!(
                "{kind} {route} has {} parents, want none or one not accepted: [{}]",
                many.len(),
                many.iter()
                    .map(Parent::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
        }
    }

    /// `RouteMustHaveParents` (and `TLSRouteMustHaveParents`, which does
    /// not check generations).
    fn route_must_have_parents(
        &self,
        kind: &str,
        route: &Nn,
        expected: &[ExpectedParent],
        namespace_required: bool,
        latest: bool,
    ) -> Result<(), String> {
        let parents = self.route_parents(kind, route)?;
        if latest {
            for parent in &parents {
                self.latest(kind, route, &parent.conditions)?;
            }
        }
        parents_match(
            &format!("{kind} {route}"),
            expected,
            &parents,
            namespace_required,
        )
    }

    /// `WaitForGatewayAddress`: the latest conditions, and an address with
    /// a type.
    fn gateway_address(&self, gw: &ParentRef) -> Result<String, String> {
        let status = self.gateway_status(&gw.nn)?;
        self.latest("Gateway", &gw.nn, &read_conditions(status))?;
        list(status, "addresses")
            .iter()
            .find(|a| a.get("type").is_some_and(|t| !t.is_null()))
            .map(|a| text(a, "value"))
            .ok_or_else(|| format!("Gateway {} has no typed address in status", gw.nn))
    }

    /// `GatewayAndRoutesMustBeAccepted`: the address, then
    /// `RoutesAndParentMustBeAccepted` with the Gateway as the parent.
    fn gateway_and_routes_accepted(
        &self,
        controller: &str,
        gw: &ParentRef,
        kind: &str,
        routes: &[Nn],
    ) -> Result<(), String> {
        self.gateway_address(gw)?;
        self.routes_and_parent_accepted(controller, gw, kind, routes)
    }

    /// `RoutesAndParentMustBeAccepted`: each route Accepted under each
    /// listener named, then every listener of the parent ResolvedRefs,
    /// Accepted and Programmed.
    fn routes_and_parent_accepted(
        &self,
        controller: &str,
        parent: &ParentRef,
        kind: &str,
        routes: &[Nn],
    ) -> Result<(), String> {
        for route in routes {
            let expected = parent.expected_parents(controller);
            let required = route.namespace != parent.nn.namespace;
            self.route_must_have_parents(kind, route, &expected, required, true)?;
        }
        let conditions: Vec<Cond> = ["ResolvedRefs", "Accepted", "Programmed"]
            .into_iter()
            .map(|t| Cond {
                type_: t.into(),
                status: "True".into(),
                reason: String::new(),
            })
            .collect();
        self.resource_listeners_have(parent, &conditions)
    }

    /// `ResourceListenersMustHaveConditions`.
    fn resource_listeners_have(
        &self,
        parent: &ParentRef,
        conditions: &[Cond],
    ) -> Result<(), String> {
        match parent.kind.as_str() {
            "Gateway" => listeners_have_conditions(
                &format!("Gateway {}", parent.nn),
                list(self.gateway_status(&parent.nn)?, "listeners"),
                conditions,
                &[],
            ),
            "ListenerSet" => self.listener_set_listeners_have(&parent.nn, conditions, &[]),
            other => Err(format!(
                "unsupported resource kind {other}: Gateway and ListenerSet are"
            )),
        }
    }

    /// `ListenerSetListenersMustHaveConditions`.
    fn listener_set_listeners_have(
        &self,
        set: &Nn,
        conditions: &[Cond],
        names: &[String],
    ) -> Result<(), String> {
        let status = self.listener_set_status(set)?;
        self.latest("ListenerSet", set, &read_conditions(status))?;
        listeners_have_conditions(
            &format!("ListenerSet {set}"),
            list(status, "listeners"),
            conditions,
            names,
        )
    }

    /// `BackendTLSPolicyMustHaveCondition`: every ancestor's conditions
    /// are the latest, and an ancestor naming the Gateway has the
    /// condition.
    fn policy_status(&self, policy: &Nn) -> Result<&Value, String> {
        self.find(
            self.status
                .get("backendTLSPolicies")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]),
            "BackendTLSPolicy",
            policy,
        )
    }

    fn policy_must_have_condition(&self, policy: &Nn, gw: &Nn, want: &Cond) -> Result<(), String> {
        let status = self.policy_status(policy)?;
        let mut seen = Vec::new();
        for ancestor in list(status, "ancestors") {
            let conditions = read_conditions(ancestor);
            self.latest("BackendTLSPolicy", policy, &conditions)?;
            let reference = ancestor.get("ancestorRef").unwrap_or(&Value::Null);
            let namespace = reference.get("namespace").and_then(Value::as_str);
            if text(reference, "name") == gw.name && namespace.is_none_or(|n| n == gw.namespace) {
                match find(&conditions, want) {
                    Ok(()) => return Ok(()),
                    Err(e) => seen.push(e),
                }
            } else {
                seen.push(format!(
                    "ancestor {}/{} {}",
                    namespace.unwrap_or("-"),
                    text(reference, "name"),
                    show(&conditions)
                ));
            }
        }
        Err(format!(
            "BackendTLSPolicy {policy} under Gateway {gw}: {}",
            if seen.is_empty() {
                "no ancestors".to_string()
            } else {
                seen.join("; ")
            }
        ))
    }
}

fn list<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn text(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// `conditions` of a status object, as `/status` writes them.
fn read_conditions(value: &Value) -> Vec<Actual> {
    list(value, "conditions")
        .iter()
        .map(|c| Actual {
            type_: text(c, "type"),
            status: text(c, "status"),
            reason: text(c, "reason"),
            observed_generation: c
                .get("observedGeneration")
                .and_then(Value::as_i64)
                .unwrap_or(0),
        })
        .collect()
}

/// A check's arguments, as the port wrote the Go values.
struct Args<'a>(&'a [Value]);

impl Args<'_> {
    fn get(&self, i: usize) -> Result<&Value, String> {
        self.0
            .get(i)
            .ok_or_else(|| format!("argument {i} is missing ({} given)", self.0.len()))
    }

    fn nn(&self, i: usize) -> Result<Nn, String> {
        nn(self.get(i)?).map_err(|e| format!("argument {i}: {e}"))
    }

    /// Trailing variadic names (a slice spread with `...` may come as one
    /// list).
    fn nns_from(&self, i: usize) -> Result<Vec<Nn>, String> {
        let mut out = Vec::new();
        for value in self.0.iter().skip(i) {
            match value {
                Value::Array(items) => {
                    for item in items {
                        out.push(nn(item)?);
                    }
                }
                other => out.push(nn(other)?),
            }
        }
        Ok(out)
    }

    /// A string, or `{"Suite": "ControllerName"}` (teapot's controller).
    fn text(&self, i: usize) -> Result<String, String> {
        string(self.get(i)?).map_err(|e| format!("argument {i}: {e}"))
    }

    fn texts_from(&self, i: usize) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        for value in self.0.iter().skip(i) {
            match value {
                Value::Array(items) => {
                    for item in items {
                        out.push(string(item)?);
                    }
                }
                other => out.push(string(other)?),
            }
        }
        Ok(out)
    }

    fn int(&self, i: usize) -> Result<i64, String> {
        self.get(i)?
            .as_i64()
            .ok_or_else(|| format!("argument {i} is not a number"))
    }

    fn boolean(&self, i: usize) -> Result<bool, String> {
        self.get(i)?
            .as_bool()
            .ok_or_else(|| format!("argument {i} is not a bool"))
    }

    fn condition(&self, i: usize) -> Result<Cond, String> {
        condition(self.get(i)?).map_err(|e| format!("argument {i}: {e}"))
    }

    fn conditions(&self, i: usize) -> Result<Vec<Cond>, String> {
        conditions(self.get(i)?).map_err(|e| format!("argument {i}: {e}"))
    }

    fn gateway_ref(&self, i: usize) -> Result<ParentRef, String> {
        let value = self.get(i)?;
        let nn = nn(value).map_err(|e| format!("argument {i}: {e}"))?;
        Ok(ParentRef {
            nn,
            group: GROUP.into(),
            kind: "Gateway".into(),
            listeners: listener_names(value)?,
        })
    }

    /// A `ResourceRef` (`NewResourceRef(gk, nn, listeners...)`): its group
    /// and kind under `GroupKind` (or beside the name).
    fn resource_ref(&self, i: usize) -> Result<ParentRef, String> {
        let value = self.get(i)?;
        let nn = nn(value).map_err(|e| format!("argument {i}: {e}"))?;
        let gk = value.get("GroupKind").unwrap_or(value);
        let kind = gk
            .get("Kind")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("argument {i}: a resource reference without a Kind: {value}"))?;
        Ok(ParentRef {
            nn,
            group: gk
                .get("Group")
                .and_then(Value::as_str)
                .unwrap_or(GROUP)
                .to_string(),
            kind: kind.to_string(),
            listeners: listener_names(value)?,
        })
    }

    fn listeners(&self, i: usize) -> Result<Vec<ExpectedListener>, String> {
        let items = self
            .get(i)?
            .as_array()
            .ok_or_else(|| format!("argument {i} is not a list of listeners"))?;
        items
            .iter()
            .map(|l| {
                let kinds = match l.get("SupportedKinds") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(kinds)) => kinds
                        .iter()
                        .map(|k| {
                            let group = k.get("Group").and_then(Value::as_str).unwrap_or(GROUP);
                            let kind = k
                                .get("Kind")
                                .and_then(Value::as_str)
                                .ok_or_else(|| format!("a supported kind without Kind: {k}"))?;
                            Ok((group.to_string(), kind.to_string()))
                        })
                        .collect::<Result<_, String>>()?,
                    Some(other) => return Err(format!("SupportedKinds {other} is not a list")),
                };
                Ok(ExpectedListener {
                    name: l
                        .get("Name")
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("a listener without Name: {l}"))?
                        .to_string(),
                    kinds,
                    conditions: match l.get("Conditions") {
                        None | Some(Value::Null) => Vec::new(),
                        Some(c) => conditions(c)?,
                    },
                    attached: l.get("AttachedRoutes").and_then(Value::as_i64).unwrap_or(0),
                })
            })
            .collect()
    }

    fn parents(&self, i: usize) -> Result<Vec<ExpectedParent>, String> {
        let items = self
            .get(i)?
            .as_array()
            .ok_or_else(|| format!("argument {i} is not a list of parents"))?;
        items
            .iter()
            .map(|p| {
                let reference = p
                    .get("ParentRef")
                    .ok_or_else(|| format!("a parent without ParentRef: {p}"))?;
                let optional = |key: &str| {
                    reference
                        .get(key)
                        .and_then(Value::as_str)
                        .map(str::to_string)
                };
                Ok(ExpectedParent {
                    group: optional("Group"),
                    kind: optional("Kind"),
                    name: optional("Name").unwrap_or_default(),
                    namespace: optional("Namespace"),
                    controller: match p.get("ControllerName") {
                        None | Some(Value::Null) => String::new(),
                        Some(c) => string(c)?,
                    },
                    conditions: match p.get("Conditions") {
                        None | Some(Value::Null) => Vec::new(),
                        Some(c) => conditions(c)?,
                    },
                })
            })
            .collect()
    }
}

fn nn(value: &Value) -> Result<Nn, String> {
    let name = value
        .get("Name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{value} is not a NamespacedName"))?;
    Ok(Nn {
        namespace: value
            .get("Namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        name: name.to_string(),
    })
}

fn string(value: &Value) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Object(map) => match map.get("Suite").and_then(Value::as_str) {
            Some("ControllerName") => Ok(CONTROLLER_NAME.to_string()),
            Some(field) => Err(format!("suite.{field} is not known to this runner")),
            None => Err(format!("{value} is not text")),
        },
        other => Err(format!("{other} is not text")),
    }
}

/// The listener names of a `GatewayRef` or `ResourceRef`; none is one
/// empty name, as `NewGatewayRef` makes it.
fn listener_names(value: &Value) -> Result<Vec<String>, String> {
    let names = match value
        .get("Listeners")
        .or_else(|| value.get("ListenerNames"))
    {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|n| match n {
                Value::Null => Ok(String::new()),
                other => string(other),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => return Err(format!("listener names {other} are not a list")),
    };
    Ok(if names.is_empty() {
        vec![String::new()]
    } else {
        names
    })
}

fn condition(value: &Value) -> Result<Cond, String> {
    let field = |key: &str| match value.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("condition {key} {other} is not text")),
    };
    let type_ = field("Type")?;
    if type_.is_empty() {
        return Err(format!("{value} is not a condition (no Type)"));
    }
    Ok(Cond {
        type_,
        status: field("Status")?,
        reason: field("Reason")?,
    })
}

fn conditions(value: &Value) -> Result<Vec<Cond>, String> {
    match value {
        Value::Array(items) => items.iter().map(condition).collect(),
        Value::Null => Ok(Vec::new()),
        other => Err(format!("{other} is not a list of conditions")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(helper: &str, arguments: Value) -> Check {
        Check {
            helper: format!("kubernetes.{helper}"),
            subtest: String::new(),
            arguments: arguments.as_array().cloned().unwrap_or_default(),
        }
    }

    fn cond(type_: &str, status: &str, reason: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": "",
               "lastTransitionTime": "1970-01-01T00:00:00Z"})
    }

    fn ok_listener(name: &str, attached: i64, kinds: &[&str]) -> Value {
        json!({
            "name": name,
            "attachedRoutes": attached,
            "supportedKinds": kinds.iter().map(|k| json!({"group": GROUP, "kind": k})).collect::<Vec<_>>(),
            "conditions": [cond("Accepted", "True", "Accepted"), cond("ResolvedRefs", "True", "ResolvedRefs"),
                           cond("Programmed", "True", "Programmed"), cond("Conflicted", "False", "NoConflicts")]
        })
    }

    /// A `/status` with one Gateway (two listeners), one ListenerSet, an
    /// HTTPRoute accepted under the Gateway, one refused, a TCPRoute in
    /// the L4 report, a BackendTLSPolicy and the GatewayClass.
    fn status() -> Value {
        json!({
            "generation": 1,
            "gatewayAPI": {
                "gatewayClasses": [{"name": "teapot", "status": {"conditions": [cond("Accepted", "True", "Accepted")]}}],
                "gateways": [{
                    "namespace": "ns", "name": "gw",
                    "status": {
                        "addresses": [{"type": "IPAddress", "value": "127.0.0.1"}],
                        "attachedListenerSets": 1,
                        "conditions": [cond("Accepted", "True", "Accepted"), cond("Programmed", "True", "Programmed")],
                        "listeners": [ok_listener("http", 2, &["HTTPRoute", "GRPCRoute"]), ok_listener("tcp", 1, &["TCPRoute"])]
                    }
                }, {
                    "namespace": "ns", "name": "empty",
                    "status": {"conditions": [cond("Accepted", "False", "InvalidParameters")], "listeners": []}
                }],
                "listenerSets": [{
                    "namespace": "ns", "name": "set",
                    "status": {
                        "conditions": [cond("Accepted", "True", "Accepted"), cond("Programmed", "True", "Programmed")],
                        "listeners": [ok_listener("extra", 1, &["HTTPRoute"])]
                    }
                }],
                "httpRoutes": [{
                    "namespace": "ns", "name": "route",
                    "status": {"parents": [{
                        "parentRef": {"name": "gw"},
                        "controllerName": CONTROLLER_NAME,
                        "conditions": [cond("Accepted", "True", "Accepted"), cond("ResolvedRefs", "True", "ResolvedRefs")]
                    }, {
                        "parentRef": {"name": "set", "kind": "ListenerSet", "group": GROUP},
                        "controllerName": CONTROLLER_NAME,
                        "conditions": [cond("Accepted", "True", "Accepted"), cond("ResolvedRefs", "True", "ResolvedRefs")]
                    }]}
                }, {
                    "namespace": "other", "name": "refused",
                    "status": {"parents": [{
                        "parentRef": {"name": "gw", "namespace": "ns"},
                        "controllerName": CONTROLLER_NAME,
                        "conditions": [cond("Accepted", "False", "NotAllowedByListeners"),
                                       cond("ResolvedRefs", "False", "BackendNotFound")]
                    }]}
                }],
                "grpcRoutes": []
            },
            "l4": {"routes": [{
                "kind": "TCPRoute", "namespace": "ns", "name": "tcp",
                "parents": [{"parent_ref": {"group": GROUP, "kind": "Gateway", "namespace": "ns", "name": "gw", "sectionName": "tcp"},
                             "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""}]}]
            }]},
            "backendTLSPolicies": [{
                "namespace": "ns", "name": "policy",
                "status": {"ancestors": [{
                    "ancestorRef": {"name": "gw", "namespace": "ns"},
                    "controllerName": CONTROLLER_NAME,
                    "conditions": [cond("Accepted", "True", "Accepted"), cond("ResolvedRefs", "False", "InvalidCACertificateRef")]
                }]}
            }]
        })
    }

    fn run(check: &Check) -> Result<(), String> {
        judge(
            check,
            &status(),
            &Generations::new(),
            &mut CheckState::default(),
        )
    }

    fn nn(name: &str) -> Value {
        json!({"Name": name, "Namespace": "ns"})
    }

    fn condition(type_: &str, status: &str, reason: &str) -> Value {
        json!({"Type": type_, "Status": status, "Reason": reason})
    }

    #[test]
    fn gateway_conditions_compare_type_status_and_reason() {
        let holds = |c: Value| run(&check("GatewayMustHaveCondition", json!([nn("gw"), c])));
        assert_eq!(holds(condition("Programmed", "True", "Programmed")), Ok(()));
        // An empty reason or status matches any.
        assert_eq!(holds(condition("Accepted", "True", "")), Ok(()));
        assert_eq!(holds(condition("Accepted", "", "")), Ok(()));
        let err = holds(condition("Accepted", "True", "Pending")).unwrap_err();
        assert!(
            err.contains("want Accepted=True/Pending")
                && err.contains("[Accepted=True/Accepted, Programmed=True/Programmed]"),
            "{err}"
        );
        assert!(holds(condition("Accepted", "False", "")).is_err());
        let err = run(&check(
            "GatewayMustHaveCondition",
            json!([nn("nowhere"), condition("Accepted", "", "")]),
        ))
        .unwrap_err();
        assert_eq!(err, "Gateway ns/nowhere is not in /status");
    }

    /// "Latest" helpers compare every condition's `observedGeneration`
    /// (absent: 0) with the object's generation from its manifest.
    #[test]
    fn latest_conditions_carry_the_objects_generation() {
        let latest = check("GatewayMustHaveLatestConditions", json!([nn("gw")]));
        assert_eq!(run(&latest), Ok(()));
        let mut generations = Generations::new();
        generations.insert(("Gateway".into(), "ns".into(), "gw".into()), 2);
        let err = judge(&latest, &status(), &generations, &mut CheckState::default()).unwrap_err();
        assert!(
            err.contains("expected observedGeneration 2")
                && err.contains("Accepted (generation 0)"),
            "{err}"
        );
        let mut current = status();
        for c in current["gatewayAPI"]["gateways"][0]["status"]["conditions"]
            .as_array_mut()
            .unwrap()
        {
            c["observedGeneration"] = json!(2);
        }
        assert_eq!(
            judge(&latest, &current, &generations, &mut CheckState::default()),
            Ok(())
        );
        // The class's own helpers, by name or NamespacedName.
        assert_eq!(
            run(&check(
                "GatewayClassMustHaveLatestConditions",
                json!([{"Name": "teapot", "Namespace": ""}])
            )),
            Ok(())
        );
        assert_eq!(
            run(&check("GWCMustHaveAcceptedConditionAny", json!(["teapot"]))),
            Ok(())
        );
        assert!(run(&check("GWCMustHaveAcceptedConditionAny", json!(["other"]))).is_err());
    }

    #[test]
    fn listener_lists_match_as_upstream_compares_them() {
        let listeners = |l: Value| {
            run(&check(
                "GatewayStatusMustHaveListeners",
                json!([nn("gw"), l]),
            ))
        };
        let http = json!({"Name": "http", "AttachedRoutes": 2,
            "SupportedKinds": [{"Group": null, "Kind": "HTTPRoute"}],
            "Conditions": [condition("Accepted", "True", "")]});
        let tcp = json!({"Name": "tcp", "AttachedRoutes": 1, "SupportedKinds": [{"Group": GROUP, "Kind": "TCPRoute"}],
            "Conditions": [condition("ResolvedRefs", "True", "ResolvedRefs")]});
        // Expected kinds must be present (more are allowed), in any order.
        assert_eq!(listeners(json!([http, tcp])), Ok(()));
        // Every listener in status must be expected.
        let err = listeners(json!([http])).unwrap_err();
        assert!(
            err.contains("has 2 listeners in status (http, tcp), want 1"),
            "{err}"
        );
        let mut wrong = http.clone();
        wrong["AttachedRoutes"] = json!(1);
        assert!(
            listeners(json!([wrong, tcp]))
                .unwrap_err()
                .contains("attachedRoutes 2, want 1")
        );
        let mut no_kinds = http.clone();
        no_kinds["SupportedKinds"] = json!([]);
        assert!(
            listeners(json!([no_kinds, tcp]))
                .unwrap_err()
                .contains("want none")
        );
        let mut other_kind = http.clone();
        other_kind["SupportedKinds"] = json!([{"Kind": "TLSRoute"}]);
        assert!(
            listeners(json!([other_kind, tcp]))
                .unwrap_err()
                .contains("lack gateway.networking.k8s.io/TLSRoute")
        );
        // ListenerSets' listeners likewise.
        let set = json!([{"Name": "extra", "AttachedRoutes": 1, "SupportedKinds": [{"Kind": "HTTPRoute"}], "Conditions": []}]);
        assert_eq!(
            run(&check(
                "ListenerSetStatusMustHaveListeners",
                json!([nn("set"), set])
            )),
            Ok(())
        );
    }

    #[test]
    fn listener_conditions_of_all_or_named_listeners() {
        let all = check(
            "GatewayListenersMustHaveConditions",
            json!([nn("gw"), [condition("Programmed", "True", "")]]),
        );
        assert_eq!(run(&all), Ok(()));
        let named = check(
            "GatewayListenersMustHaveConditions",
            json!([
                nn("gw"),
                [condition("Accepted", "True", "Accepted")],
                "tcp",
                "missing"
            ]),
        );
        assert_eq!(
            run(&named).unwrap_err(),
            "Gateway ns/gw has no listener missing in status"
        );
        let one = check(
            "GatewayListenerMustHaveConditions",
            json!([nn("gw"), "tcp", [condition("Conflicted", "False", "")]]),
        );
        assert_eq!(run(&one), Ok(()));
        let absent = check(
            "GatewayListenerMustHaveConditions",
            json!([nn("gw"), "udp", []]),
        );
        assert!(run(&absent).is_err());
        let set = check(
            "ListenerSetListenersMustHaveConditions",
            json!([nn("set"), [condition("Accepted", "True", "")]]),
        );
        assert_eq!(run(&set), Ok(()));
        assert_eq!(
            run(&check(
                "ListenerSetMustHaveCondition",
                json!([nn("set"), condition("Programmed", "True", "Programmed")])
            )),
            Ok(())
        );
        assert_eq!(
            run(&check(
                "GatewayMustHaveAttachedListeners",
                json!([nn("gw"), 1])
            )),
            Ok(())
        );
        assert!(
            run(&check(
                "GatewayMustHaveAttachedListeners",
                json!([nn("gw"), 2])
            ))
            .unwrap_err()
            .contains("attachedListenerSets 1, want 2")
        );
        assert_eq!(
            run(&check(
                "GatewayMustHaveAttachedListeners",
                json!([nn("empty"), 0])
            )),
            Ok(())
        );
        // Zero routes: no listener, or one with none attached.
        assert_eq!(
            run(&check("GatewayMustHaveZeroRoutes", json!([nn("empty")]))),
            Ok(())
        );
        assert!(run(&check("GatewayMustHaveZeroRoutes", json!([nn("gw")]))).is_err());
    }

    #[test]
    fn route_conditions_under_the_named_gateway() {
        let route = |r: Value, c: Value| {
            run(&check(
                "HTTPRouteMustHaveCondition",
                json!([r, nn("gw"), c]),
            ))
        };
        assert_eq!(
            route(nn("route"), condition("Accepted", "True", "Accepted")),
            Ok(())
        );
        let refused = json!({"Name": "refused", "Namespace": "other"});
        assert_eq!(
            route(
                refused.clone(),
                condition("Accepted", "False", "NotAllowedByListeners")
            ),
            Ok(())
        );
        let err = route(refused.clone(), condition("Accepted", "True", "")).unwrap_err();
        assert!(
            err.contains("under Gateway ns/gw")
                && err.contains("Accepted=False/NotAllowedByListeners"),
            "{err}"
        );
        // A parent naming another Gateway does not count.
        let other_gateway = run(&check(
            "HTTPRouteMustHaveCondition",
            json!([refused.clone(), {"Name": "gw", "Namespace": "elsewhere"}, condition("Accepted", "", "")]),
        ));
        assert!(
            other_gateway
                .unwrap_err()
                .contains("has no parent naming Gateway elsewhere/gw")
        );
        let resolved = |helper: &str, r: Value| run(&check(helper, json!([r, nn("gw")])));
        assert_eq!(
            resolved("HTTPRouteMustHaveResolvedRefsConditionsTrue", nn("route")),
            Ok(())
        );
        assert_eq!(
            resolved(
                "HTTPRouteMustHaveResolvedRefsMustHaveBackendsNotFound",
                refused.clone()
            ),
            Ok(())
        );
        assert!(resolved("HTTPRouteMustHaveResolvedRefsConditionsTrue", refused).is_err());
        assert_eq!(
            resolved("HTTPRouteMustBeAcceptedAndResolved", nn("route")),
            Ok(())
        );
        // L4 routes come from the L4 report.
        assert_eq!(
            run(&check(
                "TCPRouteMustHaveCondition",
                json!([
                    nn("tcp"),
                    nn("gw"),
                    condition("Accepted", "True", "Accepted")
                ])
            )),
            Ok(())
        );
        assert!(
            run(&check(
                "UDPRouteMustHaveCondition",
                json!([nn("tcp"), nn("gw"), condition("Accepted", "", "")])
            ))
            .is_err()
        );
    }

    /// No accepted parents: none (seen twice), or one not accepted.
    #[test]
    fn no_accepted_parents() {
        let none = check(
            "HTTPRouteMustHaveNoAcceptedParents",
            json!([nn("unlisted")]),
        );
        let mut state = CheckState::default();
        let generations = Generations::new();
        assert!(judge(&none, &status(), &generations, &mut state).is_err());
        assert_eq!(judge(&none, &status(), &generations, &mut state), Ok(()));
        let refused = check(
            "HTTPRouteMustHaveNoAcceptedParents",
            json!([{"Name": "refused", "Namespace": "other"}]),
        );
        assert_eq!(run(&refused), Ok(()));
        let two = check("HTTPRouteMustHaveNoAcceptedParents", json!([nn("route")]));
        assert!(run(&two).unwrap_err().contains("has 2 parents"));
        let accepted = check("TCPRouteMustHaveNoAcceptedParents", json!([nn("tcp")]));
        assert!(
            run(&accepted)
                .unwrap_err()
                .contains("want Accepted=False/*")
        );
    }

    #[test]
    fn parents_match_as_upstream_compares_them() {
        let parent = |kind: &str, name: &str, namespace: Value| {
            json!({"ParentRef": {"Group": GROUP, "Kind": kind, "Name": name, "Namespace": namespace, "SectionName": null},
                   "ControllerName": {"Suite": "ControllerName"},
                   "Conditions": [condition("Accepted", "True", "Accepted")]})
        };
        let parents = |route: Value, expected: Value, required: bool| {
            run(&check(
                "HTTPRouteMustHaveParents",
                json!([route, expected, required]),
            ))
        };
        // A parentRef written without group, kind or namespace: the CRD's
        // defaults, and no namespace where none is required.
        assert_eq!(
            parents(
                nn("route"),
                json!([parent("Gateway", "gw", json!("ns"))]),
                false
            ),
            Ok(())
        );
        let err = parents(
            nn("route"),
            json!([parent("Gateway", "gw", json!("ns"))]),
            true,
        )
        .unwrap_err();
        assert!(err.contains("no parent Gateway ns/gw"), "{err}");
        assert_eq!(
            parents(
                nn("route"),
                json!([
                    parent("Gateway", "gw", json!("ns")),
                    parent("ListenerSet", "set", json!("ns"))
                ]),
                false
            ),
            Ok(())
        );
        assert!(
            parents(
                nn("route"),
                json!([parent("ListenerSet", "gw", json!("ns"))]),
                false
            )
            .is_err()
        );
        let mut other_controller = parent("Gateway", "gw", json!("ns"));
        other_controller["ControllerName"] = json!("example.com/other");
        assert!(parents(nn("route"), json!([other_controller]), false).is_err());
        // The L4 report fills the namespace in.
        assert_eq!(
            run(&check(
                "TCPRouteMustHaveParents",
                json!([nn("tcp"), [parent("Gateway", "gw", json!("ns"))], true])
            )),
            Ok(())
        );
    }

    #[test]
    fn gateways_and_routes_accepted() {
        let gw = json!({"Name": "gw", "Namespace": "ns", "Listeners": []});
        let accepted = |helper: &str, routes: Value| {
            let mut arguments = vec![json!({"Suite": "ControllerName"}), gw.clone()];
            arguments.extend(routes.as_array().unwrap().iter().cloned());
            run(&check(helper, Value::Array(arguments)))
        };
        assert_eq!(
            accepted("GatewayAndHTTPRoutesMustBeAccepted", json!([nn("route")])),
            Ok(())
        );
        assert_eq!(
            accepted("GatewayAndTCPRoutesMustBeAccepted", json!([nn("tcp")])),
            Ok(())
        );
        let err = accepted(
            "GatewayAndHTTPRoutesMustBeAccepted",
            json!([{"Name": "refused", "Namespace": "other"}]),
        )
        .unwrap_err();
        assert!(
            err.contains("HTTPRoute other/refused: no parent Gateway ns/gw"),
            "{err}"
        );
        // A Gateway without an address never passes.
        let empty = json!([{"Suite": "ControllerName"}, {"Name": "empty", "Namespace": "ns", "Listeners": []}]);
        assert!(
            run(&check("GatewayAndHTTPRoutesMustBeAccepted", empty))
                .unwrap_err()
                .contains("no typed address")
        );
        let generic = json!([{"Suite": "ControllerName"}, gw.clone(), {"Kind": "HTTPRoute"}, false, nn("route")]);
        assert_eq!(
            run(&check("GatewayAndRoutesMustBeAccepted", generic)),
            Ok(())
        );
        let listener_set = json!([{"Suite": "ControllerName"},
            {"GroupKind": {"Group": GROUP, "Kind": "ListenerSet"}, "ListenerNames": [], "Name": "set", "Namespace": "ns"},
            {"Kind": "HTTPRoute"}, nn("route")]);
        assert_eq!(
            run(&check("RoutesAndParentMustBeAccepted", listener_set)),
            Ok(())
        );
        assert_eq!(run(&check("WaitForGatewayAddress", json!([gw]))), Ok(()));
    }

    #[test]
    fn backend_tls_policies() {
        let policy = |c: Value| {
            run(&check(
                "BackendTLSPolicyMustHaveCondition",
                json!([nn("policy"), nn("gw"), c]),
            ))
        };
        assert_eq!(
            policy(condition(
                "ResolvedRefs",
                "False",
                "InvalidCACertificateRef"
            )),
            Ok(())
        );
        assert!(policy(condition("ResolvedRefs", "True", "")).is_err());
        assert_eq!(
            run(&check(
                "BackendTLSPolicyMustHaveAcceptedConditionTrue",
                json!([nn("policy"), nn("gw")])
            )),
            Ok(())
        );
        assert_eq!(
            run(&check(
                "BackendTLSPolicyMustHaveLatestConditions",
                json!([nn("policy")])
            )),
            Ok(())
        );
        // A policy the data does not name cannot be judged.
        let unnamed = run(&check(
            "BackendTLSPolicyMustHaveLatestConditions",
            json!([{"Kind": "BackendTLSPolicy"}]),
        ));
        assert!(unnamed.unwrap_err().contains("is not a NamespacedName"));
        let elsewhere = run(&check(
            "BackendTLSPolicyMustHaveAcceptedConditionTrue",
            json!([nn("policy"), nn("other")]),
        ));
        assert!(elsewhere.unwrap_err().contains("ancestor ns/gw"));
    }

    #[test]
    fn unknown_helpers_and_arguments_fail_naming_them() {
        assert_eq!(
            run(&check("GatewayMustBeFast", json!([]))).unwrap_err(),
            "helper kubernetes.GatewayMustBeFast is not judged by this runner"
        );
        assert!(
            run(&check("GatewayMustHaveCondition", json!([nn("gw")])))
                .unwrap_err()
                .contains("argument 1 is missing")
        );
        let suite = json!([{"Suite": "GatewayClassName"}, {"Name": "gw", "Namespace": "ns"}]);
        assert!(
            run(&check("GatewayAndHTTPRoutesMustBeAccepted", suite))
                .unwrap_err()
                .contains("suite.GatewayClassName")
        );
        assert!(route_type(&json!({"Kind": "Pod"})).is_err());
        assert_eq!(route_type(&json!("&v1.GRPCRoute{}")), Ok("GRPCRoute"));
    }

    /// Polling: a check that holds passes at once; one that does not fails
    /// after the timeout with what the last poll saw.
    #[tokio::test]
    async fn checks_poll_until_the_timeout() {
        let checks = vec![
            check(
                "GatewayMustHaveCondition",
                json!([nn("gw"), condition("Programmed", "True", "")]),
            ),
            check(
                "GatewayMustHaveCondition",
                json!([nn("gw"), condition("Programmed", "False", "")]),
            ),
        ];
        let polls = std::cell::Cell::new(0);
        let outcomes = run_checks(
            &checks,
            &Generations::new(),
            Duration::from_millis(300),
            || {
                polls.set(polls.get() + 1);
                async { Ok(status()) }
            },
        )
        .await;
        assert_eq!(outcomes[0].failure, None);
        assert_eq!(outcomes[0].name, "kubernetes.GatewayMustHaveCondition");
        let failure = outcomes[1].failure.as_deref().unwrap();
        assert!(
            failure.contains("want Programmed=False/*") && failure.ends_with("(after 300ms)"),
            "{failure}"
        );
        assert!(polls.get() >= 2, "{}", polls.get());
        let unreadable = run_checks(
            &checks[..1],
            &Generations::new(),
            Duration::ZERO,
            || async { Err("connection refused".to_string()) },
        )
        .await;
        assert!(
            unreadable[0]
                .failure
                .as_deref()
                .unwrap()
                .contains("reading /status: connection refused")
        );
    }
}
