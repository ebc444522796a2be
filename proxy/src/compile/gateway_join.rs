//! The final Gateway status, built once in the compile: the HTTP compile
//! judges a Gateway on its HTTP and HTTPS listeners, the L4 compile on its
//! TCP, UDP and TLS passthrough ones (their address, `Programmed`, those
//! listeners). [`join`] puts the L4 part into the HTTP compile's typed
//! report, so `/status` (manifests mode too) and the status writer in
//! kube mode show the same status, and the writer only diffs and writes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition as MetaCondition, Time};
use k8s_openapi::jiff::Timestamp;
use teapot_gateway_api::generated::gateways::{
    GatewayStatus, GatewayStatusAddresses, GatewayStatusListeners,
    GatewayStatusListenersSupportedKinds,
};

use crate::compile::condition::Condition;
use crate::compile::gateway::{GatewayReport as HttpReport, Reported};
use crate::compile::l4::L4Report;
use crate::compile::l4::gateway::GatewayReport;

/// Joins every Gateway's L4 part into `http` (a Gateway only the L4
/// compile reported gets an entry of its own).
pub fn join(http: &mut HttpReport, l4: Option<&L4Report>) {
    let Some(l4) = l4 else { return };
    for g in &l4.gateways {
        let at = http
            .gateways
            .iter()
            .position(|e| e.namespace == g.namespace && e.name == g.name);
        let at = at.unwrap_or_else(|| {
            http.gateways.push(Reported {
                namespace: g.namespace.clone(),
                name: g.name.clone(),
                status: GatewayStatus {
                    addresses: None,
                    attached_listener_sets: None,
                    conditions: Some(vec![meta(&Condition::new(
                        "Accepted", true, "Accepted", "",
                    ))]),
                    listeners: None,
                },
            });
            http.gateways.len() - 1
        });
        let status = &mut http.gateways[at].status;
        merge_l4_gateway(status, g);
        settle_gateway(status);
    }
    http.gateways
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
}

/// A condition of the L4 compile as the API's. Its `lastTransitionTime`
/// is the placeholder the HTTP compile's conditions carry too, for the
/// status writer to set.
fn meta(c: &Condition) -> MetaCondition {
    MetaCondition {
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
        message: c.message.clone(),
        observed_generation: None,
        reason: c.reason.into(),
        status: c.status.into(),
        type_: c.type_.into(),
    }
}

/// After the L4 listeners joined a Gateway's status: the HTTP compile
/// judged the Gateway on its HTTP(S) listeners alone, so a Gateway whose
/// only served listeners are L4 ones was "no listener teapot serves"
/// there. It is accepted (and programmed, unless its address was refused)
/// when any listener now is.
fn settle_gateway(status: &mut GatewayStatus) {
    let accepted = |l: &GatewayStatusListeners| {
        l.conditions
            .iter()
            .any(|c| c.type_ == "Accepted" && c.status == "True")
    };
    if !status.listeners.iter().flatten().any(accepted) {
        return;
    }
    for c in status.conditions.iter_mut().flatten() {
        let (ok_reason, not_served) = match c.type_.as_str() {
            "Accepted" => ("Accepted", c.reason == "ListenersNotValid"),
            "Programmed" => ("Programmed", c.reason == "Invalid"),
            _ => continue,
        };
        if c.status == "False" && not_served {
            c.status = "True".into();
            c.reason = ok_reason.into();
            c.message = String::new();
        }
    }
}

/// Adds a Gateway's L4 part to its status: the allocated address in
/// `addresses` (type IPAddress), the L4 listeners in `listeners` (by name,
/// replacing an entry of that name), and `Programmed` False when the
/// address was refused (a Programmed condition already there stays when
/// the L4 part is programmed).
fn merge_l4_gateway(status: &mut GatewayStatus, l4: &GatewayReport) {
    if let Some(addr) = l4.address {
        let addresses = status.addresses.get_or_insert_with(Vec::new);
        let value = addr.to_string();
        let ip = |a: &GatewayStatusAddresses| {
            a.value == value && a.r#type.as_deref() == Some("IPAddress")
        };
        if !addresses.iter().any(ip) {
            addresses.push(GatewayStatusAddresses {
                r#type: Some("IPAddress".into()),
                value,
            });
        }
    }
    if let Some(p) = l4.conditions.iter().find(|c| c.type_ == "Programmed") {
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        match conditions.iter_mut().find(|c| c.type_ == "Programmed") {
            Some(c) if p.status == "False" => *c = meta(p),
            Some(_) => {}
            None => conditions.push(meta(p)),
        }
    }
    let listeners = status.listeners.get_or_insert_with(Vec::new);
    for l in &l4.listeners {
        let entry = GatewayStatusListeners {
            attached_routes: i32::try_from(l.attached_routes).unwrap_or(i32::MAX),
            conditions: l.conditions.iter().map(meta).collect(),
            name: l.name.clone(),
            supported_kinds: Some(
                l.supported_kinds
                    .iter()
                    .map(|kind| GatewayStatusListenersSupportedKinds {
                        group: Some(teapot_model::attachment::GROUP.into()),
                        kind: (*kind).into(),
                    })
                    .collect(),
            ),
        };
        match listeners.iter_mut().find(|e| e.name == l.name) {
            Some(e) => *e = entry,
            None => listeners.push(entry),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_l4_part_joins_a_gateway_status() {
        use crate::compile::l4::gateway::GatewayListenerReport;
        let l4 = GatewayReport {
            namespace: "ops".into(),
            name: "edge".into(),
            pool: Some("default".into()),
            address: Some("192.0.2.10".parse().unwrap()),
            conditions: vec![Condition::new("Programmed", true, "Programmed", "")],
            listeners: vec![GatewayListenerReport {
                name: "dns".into(),
                port: 53,
                protocol: "UDP",
                listener: None,
                state: None,
                supported_kinds: vec!["UDPRoute"],
                attached_routes: 2,
                conditions: vec![Condition::new("Accepted", true, "Accepted", "")],
            }],
        };
        let mut status: GatewayStatus = serde_json::from_value(serde_json::json!({
            "addresses": [{"type": "Hostname", "value": "edge-ops.acme.lb.example.net"}],
            "conditions": [{"type": "Programmed", "status": "False", "reason": "Invalid",
                            "message": "no listener teapot serves",
                            "lastTransitionTime": "1970-01-01T00:00:00Z"}],
            "listeners": [{"name": "http", "attachedRoutes": 3, "conditions": [],
                           "supportedKinds": [{"kind": "HTTPRoute"}]}],
        }))
        .unwrap();
        merge_l4_gateway(&mut status, &l4);
        settle_gateway(&mut status);
        let addresses = status.addresses.as_ref().unwrap();
        assert_eq!(addresses.len(), 2);
        assert_eq!(addresses[1].value, "192.0.2.10");
        let conditions = status.conditions.as_ref().unwrap();
        assert_eq!(conditions.len(), 1);
        // The UDP listener is served: the Gateway is programmed after all.
        assert_eq!(
            (conditions[0].status.as_str(), conditions[0].reason.as_str()),
            ("True", "Programmed")
        );
        let listeners = status.listeners.as_ref().unwrap();
        assert_eq!(listeners[1].name, "dns");
        assert_eq!(listeners[1].attached_routes, 2);
        assert_eq!(
            listeners[1].supported_kinds.as_ref().unwrap()[0].kind,
            "UDPRoute"
        );
        // Joining again changes nothing: the address is not added twice.
        merge_l4_gateway(&mut status, &l4);
        assert_eq!(status.addresses.as_ref().unwrap().len(), 2);
        assert_eq!(status.listeners.as_ref().unwrap().len(), 2);
    }
}
