//! The proxy's admin `GET /status` document, read defensively: a missing or
//! oddly typed field is treated as empty, never as an error.
//!
//! ```json
//! { "generation": 3,
//!   "ingresses": [ { "namespace": "ns", "name": "n", "served": true,
//!                    "status": { "loadBalancer": { "ingress": [ { "ip": "127.0.0.1" } ] } },
//!                    "conditions": [ { "type": "...", "status": "True", "reason": "...", "message": "..." } ] } ],
//!   "backends":  [ { "namespace": "ns", "service": "svc", "port": "8080", "endpoints": ["127.0.0.1:41234"] } ],
//!   "problems":  [ { "file": "...", "document": 0, "object": "Ingress ns/n", "field": "...", "message": "..." } ] }
//! ```

use std::collections::BTreeSet;

use serde_json::Value;

/// One Ingress as the proxy reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IngressStatus {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `served`, when reported.
    pub served: Option<bool>,
    /// IPs and hostnames of `status.loadBalancer.ingress[]`.
    pub addresses: Vec<String>,
    /// Conditions, one readable line each (`type=status reason: message`).
    pub conditions: Vec<String>,
}

/// One backend (Service port) as the proxy reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendStatus {
    /// Namespace.
    pub namespace: String,
    /// Service name.
    pub service: String,
    /// Service port, number or name, as text.
    pub port: String,
    /// `ip:port` of every ready endpoint.
    pub endpoints: Vec<String>,
}

/// One Gateway of `gatewayAPI.gateways[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayStatus {
    pub namespace: String,
    pub name: String,
    /// `status.addresses[].value`, in order.
    pub addresses: Vec<String>,
}

/// The whole `/status` document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Route table generation, when reported.
    pub generation: Option<i64>,
    /// Every Ingress the proxy knows.
    pub ingresses: Vec<IngressStatus>,
    /// Every backend the proxy resolved.
    pub backends: Vec<BackendStatus>,
    /// Configuration problems, one readable line each.
    pub problems: Vec<String>,
    /// Every Gateway of `gatewayAPI.gateways`.
    pub gateways: Vec<GatewayStatus>,
}

impl Status {
    /// Parses the JSON body; only a body that is not a JSON object is an error.
    pub fn parse(body: &str) -> Result<Status, String> {
        let value: Value =
            serde_json::from_str(body).map_err(|e| format!("/status is not JSON ({e}): {body}"))?;
        if !value.is_object() {
            return Err(format!("/status is not a JSON object: {body}"));
        }
        Ok(Status {
            generation: value.get("generation").and_then(Value::as_i64),
            ingresses: list(&value, "ingresses").iter().map(ingress).collect(),
            backends: list(&value, "backends").iter().map(backend).collect(),
            problems: list(&value, "problems").iter().map(problem).collect(),
            gateways: value
                .get("gatewayAPI")
                .map(|api| list(api, "gateways").iter().map(gateway).collect())
                .unwrap_or_default(),
        })
    }

    /// The Ingress `namespace/name`, if reported.
    pub fn ingress(&self, namespace: &str, name: &str) -> Option<&IngressStatus> {
        self.ingresses
            .iter()
            .find(|i| i.namespace == namespace && i.name == name)
    }

    /// Distinct ready endpoints of a Service over all its reported ports.
    pub fn endpoints(&self, namespace: &str, service: &str) -> BTreeSet<String> {
        self.backends
            .iter()
            .filter(|b| b.namespace == namespace && b.service == service)
            .flat_map(|b| b.endpoints.iter().cloned())
            .collect()
    }

    /// Problems that mention the namespace (file paths or object names).
    pub fn problems_in(&self, namespace: &str) -> Vec<&str> {
        self.problems
            .iter()
            .filter(|p| p.contains(namespace))
            .map(String::as_str)
            .collect()
    }
}

impl IngressStatus {
    /// A one-line description for failure messages.
    pub fn describe(&self) -> String {
        let served = match self.served {
            Some(true) => "served",
            Some(false) => "not served",
            None => "served: unreported",
        };
        let mut out = format!(
            "Ingress {}/{} {served}, addresses [{}]",
            self.namespace,
            self.name,
            self.addresses.join(", ")
        );
        if !self.conditions.is_empty() {
            out.push_str(&format!(", conditions [{}]", self.conditions.join("; ")));
        }
        out
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
    match value.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

fn ingress(value: &Value) -> IngressStatus {
    let addresses = value
        .get("status")
        .and_then(|s| s.get("loadBalancer"))
        .and_then(|lb| lb.get("ingress"))
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .flat_map(|e| [text(e, "ip"), text(e, "hostname")])
                .filter(|a| !a.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let conditions = list(value, "conditions")
        .iter()
        .map(|c| {
            let mut line = format!("{}={}", text(c, "type"), text(c, "status"));
            let reason = text(c, "reason");
            if !reason.is_empty() {
                line.push(' ');
                line.push_str(&reason);
            }
            let message = text(c, "message");
            if !message.is_empty() {
                line.push_str(": ");
                line.push_str(&message);
            }
            line
        })
        .collect();
    IngressStatus {
        namespace: text(value, "namespace"),
        name: text(value, "name"),
        served: value.get("served").and_then(Value::as_bool),
        addresses,
        conditions,
    }
}

fn gateway(value: &Value) -> GatewayStatus {
    let addresses = value
        .get("status")
        .map(|s| list(s, "addresses"))
        .unwrap_or(&[])
        .iter()
        .map(|a| text(a, "value"))
        .filter(|a| !a.is_empty())
        .collect();
    GatewayStatus {
        namespace: text(value, "namespace"),
        name: text(value, "name"),
        addresses,
    }
}

fn backend(value: &Value) -> BackendStatus {
    BackendStatus {
        namespace: text(value, "namespace"),
        service: text(value, "service"),
        port: text(value, "port"),
        endpoints: list(value, "endpoints")
            .iter()
            .filter_map(|e| match e {
                Value::String(s) => Some(s.clone()),
                Value::Object(_) => {
                    let addr = text(e, "address");
                    (!addr.is_empty()).then_some(addr)
                }
                _ => None,
            })
            .collect(),
    }
}

fn problem(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        _ => {
            let mut parts = Vec::new();
            for key in ["file", "object", "field"] {
                let v = text(value, key);
                if !v.is_empty() {
                    parts.push(v);
                }
            }
            let message = text(value, "message");
            if parts.is_empty() {
                message
            } else {
                format!("{}: {message}", parts.join(" "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_document() {
        let body = r#"{
          "generation": 7,
          "ingresses": [
            {"namespace": "conf-a", "name": "web", "served": true,
             "status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}, {"hostname": "web.lb.example"}]}},
             "conditions": [{"type": "Accepted", "status": "True", "reason": "Ok", "message": "fine"}]},
            {"namespace": "conf-a", "name": "other", "served": false,
             "status": {"loadBalancer": {}}}
          ],
          "backends": [
            {"namespace": "conf-a", "service": "api", "port": "8080", "endpoints": ["127.0.0.1:1", "127.0.0.1:2"]},
            {"namespace": "conf-a", "service": "api", "port": 9090, "endpoints": ["127.0.0.1:2"]},
            {"namespace": "conf-b", "service": "api", "port": "http", "endpoints": ["127.0.0.1:3"]}
          ],
          "problems": [
            {"file": "/tmp/conf-a/x.yaml", "document": 0, "object": "Ingress conf-a/web", "field": "spec.rules[0].host", "message": "bad host"}
          ]
        }"#;
        let status = Status::parse(body).unwrap();
        assert_eq!(status.generation, Some(7));
        let web = status.ingress("conf-a", "web").unwrap();
        assert_eq!(web.served, Some(true));
        assert_eq!(web.addresses, vec!["127.0.0.1", "web.lb.example"]);
        assert_eq!(web.conditions, vec!["Accepted=True Ok: fine"]);
        let other = status.ingress("conf-a", "other").unwrap();
        assert_eq!(other.served, Some(false));
        assert!(other.addresses.is_empty());
        assert!(status.ingress("conf-b", "web").is_none());
        assert_eq!(
            status
                .endpoints("conf-a", "api")
                .into_iter()
                .collect::<Vec<_>>(),
            vec!["127.0.0.1:1", "127.0.0.1:2"]
        );
        assert_eq!(status.backends[1].port, "9090");
        assert!(status.endpoints("conf-a", "nope").is_empty());
        assert_eq!(
            status.problems_in("conf-a"),
            vec!["/tmp/conf-a/x.yaml Ingress conf-a/web spec.rules[0].host: bad host"]
        );
        assert!(
            web.describe()
                .contains("served, addresses [127.0.0.1, web.lb.example]")
        );
        assert!(status.gateways.is_empty());
    }

    /// `gatewayAPI.gateways[].status.addresses`, in order: what the
    /// Gateway conformance runner sends each case to.
    #[test]
    fn gateway_addresses() {
        let body = r#"{"gatewayAPI": {"gateways": [
            {"namespace": "infra", "name": "fleet",
             "status": {"addresses": [{"type": "IPAddress", "value": "127.0.0.1"}]}},
            {"namespace": "infra", "name": "own",
             "status": {"addresses": [{"type": "IPAddress", "value": "127.0.0.1"},
                                      {"type": "IPAddress", "value": "127.48.0.1"}]}},
            {"namespace": "infra", "name": "none", "status": {}}
        ]}}"#;
        let status = Status::parse(body).unwrap();
        let addresses: Vec<(&str, Vec<&str>)> = status
            .gateways
            .iter()
            .map(|g| {
                (
                    g.name.as_str(),
                    g.addresses.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            addresses,
            vec![
                ("fleet", vec!["127.0.0.1"]),
                ("own", vec!["127.0.0.1", "127.48.0.1"]),
                ("none", vec![]),
            ]
        );
    }

    #[test]
    fn sparse_documents() {
        let status = Status::parse("{}").unwrap();
        assert_eq!(status, Status::default());
        let status = Status::parse(r#"{"ingresses": [{"name": "x"}], "backends": null}"#).unwrap();
        assert_eq!(status.ingresses[0].name, "x");
        assert_eq!(status.ingresses[0].served, None);
        assert!(status.backends.is_empty());
        assert!(Status::parse("[]").is_err());
        assert!(Status::parse("not json").is_err());
    }
}
