//! The final Gateway status, built once in the compile: the HTTP compile
//! judges a Gateway on its HTTP and HTTPS listeners, the L4 compile on its
//! TCP, UDP and TLS passthrough ones (their address, `Programmed`, those
//! listeners). [`join`] puts the L4 part into the HTTP compile's report,
//! so `/status` (manifests mode too) and the status writer in kube mode
//! show the same status.

use serde_json::{Value, json};
use teapot_gateway_api::generated::gateways::GatewayStatus;

use crate::compile::gateway::{GatewayReport as HttpReport, Reported};
use crate::compile::l4::L4Report;
use crate::compile::l4::gateway::GatewayReport;

/// The time a condition carries until the status writer sets the real
/// one (the HTTP compile's conditions carry it too).
const UNSET_TIME: &str = "1970-01-01T00:00:00Z";

/// Joins every Gateway's L4 part into `http` (a Gateway only the L4
/// compile reported gets an entry of its own).
pub fn join(http: &mut HttpReport, l4: Option<&L4Report>) {
    let Some(l4) = l4 else { return };
    for g in &l4.gateways {
        let entry = http
            .gateways
            .iter_mut()
            .find(|e| e.namespace == g.namespace && e.name == g.name);
        let mut status = match &entry {
            Some(e) => serde_json::to_value(&e.status).unwrap_or_default(),
            None => json!({
                "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""}],
            }),
        };
        merge_l4_gateway(&mut status, g);
        settle_gateway(&mut status);
        fill_transition_times(&mut status);
        let joined: GatewayStatus = match serde_json::from_value(status) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(gateway = %format!("{}/{}", g.namespace, g.name), error = %e, "joining the L4 part of a Gateway status");
                continue;
            }
        };
        match entry {
            Some(e) => e.status = joined,
            None => http.gateways.push(Reported {
                namespace: g.namespace.clone(),
                name: g.name.clone(),
                status: joined,
            }),
        }
    }
    http.gateways
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
}

/// Conditions from the L4 compile carry no `lastTransitionTime`: the
/// placeholder the HTTP compile's carry, for the status writer to set.
fn fill_transition_times(status: &mut Value) {
    let fill = |conditions: &mut Value| {
        for c in conditions.as_array_mut().into_iter().flatten() {
            if c.get("lastTransitionTime").is_none() {
                c["lastTransitionTime"] = json!(UNSET_TIME);
            }
        }
    };
    fill(&mut status["conditions"]);
    for l in status["listeners"].as_array_mut().into_iter().flatten() {
        fill(&mut l["conditions"]);
    }
}

/// After the L4 listeners joined a Gateway's status: the HTTP compile
/// judged the Gateway on its HTTP(S) listeners alone, so a Gateway whose
/// only served listeners are L4 ones was "no listener teapot serves"
/// there. It is accepted (and programmed, unless its address was refused)
/// when any listener now is.
fn settle_gateway(status: &mut Value) {
    let accepted = |l: &Value| {
        l["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Accepted" && c["status"] == "True")
        })
    };
    let any = status["listeners"]
        .as_array()
        .is_some_and(|ls| ls.iter().any(accepted));
    if !any {
        return;
    }
    let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) else {
        return;
    };
    for c in conditions.iter_mut() {
        let (ok_reason, not_served) = match c["type"].as_str() {
            Some("Accepted") => ("Accepted", c["reason"] == "ListenersNotValid"),
            Some("Programmed") => ("Programmed", c["reason"] == "Invalid"),
            _ => continue,
        };
        if c["status"] == "False" && not_served {
            c["status"] = json!("True");
            c["reason"] = json!(ok_reason);
            c["message"] = json!("");
        }
    }
}

/// Adds a Gateway's L4 part to its status: the allocated address in
/// `addresses` (type IPAddress), the L4 listeners in `listeners` (by name,
/// replacing an entry of that name), and `Programmed` False when the
/// address was refused (a Programmed condition already there stays when
/// the L4 part is programmed).
fn merge_l4_gateway(status: &mut Value, l4: &GatewayReport) {
    let Some(map) = status.as_object_mut() else {
        return;
    };
    if let Some(addr) = l4.address {
        let addresses = map
            .entry("addresses")
            .or_insert_with(|| json!([]))
            .as_array_mut();
        if let Some(addresses) = addresses {
            let value = json!({"type": "IPAddress", "value": addr.to_string()});
            if !addresses.contains(&value) {
                addresses.push(value);
            }
        }
    }
    let programmed = l4.conditions.iter().find(|c| c.type_ == "Programmed");
    if let Some(p) = programmed {
        let conditions = map
            .entry("conditions")
            .or_insert_with(|| json!([]))
            .as_array_mut();
        if let Some(conditions) = conditions {
            let mine = serde_json::to_value(p).unwrap_or_default();
            match conditions.iter_mut().find(|c| c["type"] == "Programmed") {
                Some(c) if p.status == "False" => *c = mine,
                Some(_) => {}
                None => conditions.push(mine),
            }
        }
    }
    let listeners = map
        .entry("listeners")
        .or_insert_with(|| json!([]))
        .as_array_mut();
    if let Some(listeners) = listeners {
        for l in &l4.listeners {
            let kinds: Vec<Value> = l
                .supported_kinds
                .iter()
                .map(|kind| json!({"group": teapot_model::attachment::GROUP, "kind": kind}))
                .collect();
            let entry = json!({
                "name": l.name,
                "supportedKinds": kinds,
                "attachedRoutes": l.attached_routes,
                "conditions": l.conditions,
            });
            match listeners.iter_mut().find(|e| e["name"] == l.name.as_str()) {
                Some(e) => *e = entry,
                None => listeners.push(entry),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_l4_part_joins_a_gateway_status() {
        use crate::compile::condition::Condition;
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
        let mut status = json!({
            "addresses": [{"type": "Hostname", "value": "edge-ops.acme.lb.example.net"}],
            "conditions": [{"type": "Programmed", "status": "True", "reason": "Programmed", "message": ""}],
            "listeners": [{"name": "http", "attachedRoutes": 3, "conditions": [],
                           "supportedKinds": [{"kind": "HTTPRoute"}]}],
        });
        merge_l4_gateway(&mut status, &l4);
        assert_eq!(status["addresses"].as_array().unwrap().len(), 2);
        assert_eq!(status["addresses"][1]["value"], "192.0.2.10");
        assert_eq!(status["conditions"].as_array().unwrap().len(), 1);
        assert_eq!(status["listeners"][1]["name"], "dns");
        assert_eq!(
            status["listeners"][1]["supportedKinds"][0]["kind"],
            "UDPRoute"
        );
        assert_eq!(status["listeners"][1]["attachedRoutes"], 2);
        fill_transition_times(&mut status);
        let typed: GatewayStatus = serde_json::from_value(status).expect("fits the schema");
        assert_eq!(typed.listeners.unwrap()[1].attached_routes, 2);
    }
}
