//! ingress-nginx `ssl-passthrough`: the hosts whose TLS connections to the
//! shared HTTPS listener are not terminated but relayed as TCP to a
//! backend, chosen by the ClientHello's server name
//! (crate::plane::passthrough serves them).
//!
//! Built after the Ingress compile, from its route table: a host is passed
//! through only where the Ingress asking for it owns the route of the path
//! it passes to, so the host checks of the route compile (tenant
//! subtrees, proven custom domains, the oldest Ingress of a conflict)
//! decide who may pass a host through, and nothing is checked twice.
//!
//! As ingress-nginx, passthrough is a property of the host: once one
//! Ingress of a host asks for it, every TLS connection naming the host
//! goes to the backend, whatever the host's other Ingresses say (their
//! rules are still served over plain HTTP). Those Ingresses say so on
//! their status ([`CONDITION`]).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use teapot_model::store::{NsName, Store, age_key};

use crate::compile::condition::Condition;
use crate::compile::routes::RouteTable;
use crate::compile::upstream::Upstream;
use crate::live::fairness::TenantGate;

/// The annotation, with its prefix.
pub const ANNOTATION: &str = "nginx.ingress.kubernetes.io/ssl-passthrough";

/// The status condition of an Ingress that asks for passthrough, or whose
/// host another Ingress passes through.
pub const CONDITION: &str = "SSLPassthrough";

/// One passed-through host: where its connections go.
#[derive(Debug)]
pub struct PassHost {
    /// The backend's endpoints (their health is the HTTP plane's).
    pub upstream: Arc<Upstream>,
    /// The backend Service, which the L4 plane's series and log lines name.
    pub service: NsName,
    /// `namespace/name` of the Ingress that asked.
    pub ingress: Arc<str>,
    /// The gate of the Ingress's tenant: a passed-through connection holds
    /// one of its connection slots for its whole life (as an upgraded
    /// WebSocket does).
    pub tenant: Option<Arc<TenantGate>>,
}

/// Passed-through hosts by name (lowercase, no trailing dot).
#[derive(Debug, Default)]
pub struct PassthroughTable {
    hosts: HashMap<Box<str>, Arc<PassHost>>,
}

impl PassthroughTable {
    /// Whether no host is passed through: the HTTPS listener then reads
    /// nothing before its handshake.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// The host a ClientHello's server name passes through to, if any.
    pub fn lookup(&self, server_name: &str) -> Option<&Arc<PassHost>> {
        let mut buf = [0u8; 256];
        let host = teapot_api::host::normalize_request_host(server_name, &mut buf)?;
        self.hosts.get(host)
    }
}

/// Whether the Ingress asks for passthrough.
fn asks(ingress: &Ingress) -> bool {
    ingress
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// The path a rule passes through to, as ingress-nginx: its `/` (the root
/// location), else its first path; with the backend Service's name.
fn pass_path(rule: &k8s_openapi::api::networking::v1::IngressRule) -> Option<(&str, &str)> {
    let paths = &rule.http.as_ref()?.paths;
    let root = paths
        .iter()
        .find(|p| p.path.as_deref().unwrap_or("/") == "/" && p.path_type != "Exact");
    let chosen = root.or(paths.first())?;
    let service = chosen.backend.service.as_ref()?.name.as_str();
    Some((chosen.path.as_deref().unwrap_or("/"), service))
}

/// The table, from the compiled `routes`, and a [`CONDITION`] for each
/// Ingress concerned among `reported` (each Ingress with a report, and
/// whether teapot serves its class), for the compile to put on its report.
pub fn compile(
    store: &Store,
    routes: &RouteTable,
    reported: impl Iterator<Item = (NsName, bool)>,
) -> (PassthroughTable, Vec<(NsName, Condition)>) {
    let mut asking: Vec<(&NsName, &teapot_model::store::Stored<Ingress>)> = store
        .ingresses
        .iter()
        .filter(|(_, s)| asks(&s.object))
        .collect();
    if asking.is_empty() {
        return (PassthroughTable::default(), Vec::new());
    }
    asking.sort_by(|a, b| age_key(a.1, a.0).cmp(&age_key(b.1, b.0)));
    let mut table = PassthroughTable::default();
    let mut verdicts: HashMap<NsName, (bool, &'static str, String)> = HashMap::new();
    for (id, stored) in asking {
        let name = id.to_string();
        let mut passed = Vec::new();
        let mut refused = Vec::new();
        for rule in stored
            .object
            .spec
            .iter()
            .flat_map(|s| s.rules.iter().flatten())
        {
            let Some(host) = rule.host.as_deref() else {
                refused.push("a rule without a host (the ClientHello names one)".to_string());
                continue;
            };
            if host.starts_with("*.") {
                refused.push(format!("{host}: a wildcard host is not passed through"));
                continue;
            }
            let Some((path, service)) = pass_path(rule) else {
                refused.push(format!("{host}: no path with a Service backend"));
                continue;
            };
            let mut buf = [0u8; 256];
            let Some(key) = teapot_api::host::normalize_request_host(host, &mut buf) else {
                refused.push(format!("{host}: not a host name"));
                continue;
            };
            if let Some(held) = table.hosts.get(key) {
                if *held.ingress != *name {
                    refused.push(format!(
                        "{host}: already passed through by the older Ingress {}",
                        held.ingress
                    ));
                }
                continue;
            }
            // Only where this Ingress owns the route: the route compile
            // decided who may serve the host.
            let Some(route) = routes.lookup(host, path).filter(|r| *r.ingress == *name) else {
                refused.push(format!(
                    "{host}: the Ingress does not serve {path} of the host (see its other conditions)"
                ));
                continue;
            };
            table.hosts.insert(
                Box::from(key),
                Arc::new(PassHost {
                    upstream: route.upstream.clone(),
                    service: NsName::new(id.namespace.clone(), service.to_string()),
                    ingress: route.ingress.clone(),
                    tenant: route.tenant().cloned(),
                }),
            );
            passed.push(format!("{host} -> {service}"));
        }
        let verdict = if refused.is_empty() {
            (
                true,
                "PassedThrough",
                format!("TLS to {} is passed through", passed.join(", ")),
            )
        } else {
            let mut message = refused.join("; ");
            if !passed.is_empty() {
                message = format!("TLS to {} is passed through; {message}", passed.join(", "));
            }
            (false, "NotPassedThrough", message)
        };
        verdicts.insert(id.clone(), verdict);
    }
    // The host's other Ingresses: their HTTPS is the backend's now.
    let mut conditions = Vec::new();
    for (id, served) in reported {
        if let Some((ok, reason, message)) = verdicts.remove(&id) {
            conditions.push((id, Condition::new(CONDITION, ok, reason, message)));
            continue;
        }
        if !served {
            continue;
        }
        let Some(stored) = store.ingresses.get(&id) else {
            continue;
        };
        let name = id.to_string();
        let shadowed: Vec<String> = stored
            .object
            .spec
            .iter()
            .flat_map(|s| s.rules.iter().flatten())
            .filter_map(|r| r.host.as_deref())
            .filter_map(|h| {
                let held = table.lookup(h)?;
                (*held.ingress != *name).then(|| format!("{h} (by {})", held.ingress))
            })
            .collect();
        if !shadowed.is_empty() {
            let condition = Condition::new(
                CONDITION,
                false,
                "HostPassedThrough",
                format!(
                    "TLS to {} is passed through to another Ingress's backend: this Ingress's rules for it are served over plain HTTP only",
                    shadowed.join(", ")
                ),
            );
            conditions.push((id, condition));
        }
    }
    (table, conditions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::CompileOptions;
    use crate::compile::snapshot::Snapshot;
    use crate::compile::tests::compile_test_docs;

    fn ingress(name: &str, pass: bool, rules: &str) -> String {
        let annotations = if pass {
            format!("\n  annotations: {{{ANNOTATION}: \"true\"}}")
        } else {
            String::new()
        };
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: ops\n  creationTimestamp: \"2024-01-0{}T00:00:00Z\"{annotations}\nspec:\n  ingressClassName: teapot\n  rules:\n{rules}",
            name.len() % 9 + 1
        )
    }

    fn rule(host: &str, paths: &[(&str, &str)]) -> String {
        let mut out = format!("  - host: \"{host}\"\n    http:\n      paths:\n");
        for (path, service) in paths {
            out.push_str(&format!(
                "      - {{path: \"{path}\", pathType: Prefix, backend: {{service: {{name: {service}, port: {{number: 443}}}}}}}}\n"
            ));
        }
        out
    }

    fn compile(docs: &[String]) -> Snapshot {
        compile_test_docs(docs, &CompileOptions::default())
    }

    fn condition(s: &Snapshot, name: &str) -> Option<(bool, String, String)> {
        let r = s.report.ingresses.iter().find(|r| r.name == name)?;
        let c = r.conditions.iter().find(|c| c.type_ == CONDITION)?;
        Some((c.status == "True", c.reason.to_string(), c.message.clone()))
    }

    /// A passthrough Ingress's hosts pass to its `/` backend (else its
    /// first path's); hosts of other Ingresses do not; no annotation, no
    /// table (the listener then reads nothing before its handshakes).
    #[test]
    fn hosts_pass_to_the_root_path_backend() {
        let s = compile(&[
            ingress(
                "p",
                true,
                &(rule("pass.example", &[("/api", "api"), ("/", "tls-app")])
                    + &rule("first.example", &[("/x", "x-app"), ("/y", "y-app")])),
            ),
            ingress("t", false, &rule("term.example", &[("/", "web")])),
        ]);
        let t = &s.passthrough;
        assert_eq!(t.len(), 2);
        assert_eq!(t.lookup("PASS.example.").unwrap().service.name, "tls-app");
        assert_eq!(t.lookup("first.example").unwrap().service.name, "x-app");
        assert!(t.lookup("term.example").is_none());
        assert!(t.lookup("other.example").is_none());
        let (ok, reason, _) = condition(&s, "p").unwrap();
        assert!(ok, "{reason}");
        assert!(condition(&s, "t").is_none());

        let s = compile(&[ingress("t", false, &rule("term.example", &[("/", "web")]))]);
        assert!(s.passthrough.is_empty());
    }

    /// A host passed through by one Ingress and terminated by another:
    /// passthrough wins for TLS (as ingress-nginx's server-level flag), and
    /// the other Ingress's status says its HTTPS for the host is gone.
    #[test]
    fn a_terminated_ingress_of_a_passed_through_host_is_told() {
        let s = compile(&[
            ingress("pass", true, &rule("shared.example", &[("/", "tls-app")])),
            ingress("web", false, &rule("shared.example", &[("/web", "web")])),
        ]);
        assert_eq!(
            s.passthrough.lookup("shared.example").unwrap().service.name,
            "tls-app"
        );
        let (ok, reason, message) = condition(&s, "web").unwrap();
        assert!(!ok);
        assert_eq!(reason, "HostPassedThrough");
        assert!(message.contains("ops/pass"), "{message}");
    }

    /// Passthrough goes no further than the route compile lets the
    /// Ingress serve: a path another (older) Ingress holds, a wildcard
    /// host and a hostless rule are refused on the status.
    #[test]
    fn only_what_the_ingress_serves_is_passed_through() {
        let s = compile(&[
            ingress("a", false, &rule("taken.example", &[("/", "owner")])),
            ingress(
                "bbbbbbb",
                true,
                &(rule("taken.example", &[("/", "thief")])
                    + &rule("*.wild.example", &[("/", "w")])),
            ),
        ]);
        assert!(s.passthrough.lookup("taken.example").is_none());
        assert!(s.passthrough.lookup("x.wild.example").is_none());
        let (ok, reason, message) = condition(&s, "bbbbbbb").unwrap();
        assert!(!ok);
        assert_eq!(reason, "NotPassedThrough");
        assert!(message.contains("wildcard"), "{message}");
        assert!(message.contains("does not serve /"), "{message}");
    }
}
