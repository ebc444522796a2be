//! The rules over files, for admins and CI pipelines (`teapot validate`):
//! every document of a YAML or JSON file is judged as if it were being
//! created (or updated, when the state already has it).

use std::fmt;

use serde_json::Value;
use teapot_api::admission::{OBJECT_FIELD, Violation, object_kind};
use teapot_api::annotations::ObjectKind;

use crate::review::{Operation, Subject, Validator, Verdict};
use crate::state::PolicyState;

/// The verdict on one document.
#[derive(Clone, Debug)]
pub struct ObjectReport {
    /// Zero-based document index in the file.
    pub document: usize,
    /// `Kind namespace/name` (or `Kind name`).
    pub object: String,
    pub verdict: Verdict,
}

impl fmt::Display for ObjectReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.verdict)
    }
}

/// Judges every document of `text`. With `tenant` (a CLUSTER), every
/// namespaced object is judged as that tenant's: an object without a
/// namespace goes to the tenant's namespace. Without it, the namespace is
/// the object's own (`default` when unset), and objects in namespaces no
/// Tenant owns are allowed, as the webhook allows them.
pub fn validate_text(
    validator: &Validator,
    state: &PolicyState,
    text: &str,
    tenant: Option<&str>,
) -> Vec<ObjectReport> {
    let mut reports = Vec::new();
    let tenant_ns = match tenant {
        Some(cluster) => match state.tenant_by_cluster(cluster) {
            Some(t) => Some(t.namespace_name()),
            None => {
                reports.push(ObjectReport {
                    document: 0,
                    object: format!("Tenant {cluster}"),
                    verdict: refusal(
                        "spec.cluster",
                        format!("no Tenant with cluster {cluster:?} in the manifests"),
                    ),
                });
                return reports;
            }
        },
        None => None,
    };
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let yaml = match <serde_yaml::Value as serde::Deserialize>::deserialize(document) {
            Ok(v) => v,
            Err(e) => {
                reports.push(ObjectReport {
                    document: index,
                    object: "document".into(),
                    verdict: refusal(OBJECT_FIELD, format!("invalid YAML: {e}")),
                });
                return reports;
            }
        };
        if yaml.is_null() {
            continue;
        }
        match serde_json::to_value(&yaml) {
            Ok(v) => collect(
                validator,
                state,
                v,
                index,
                tenant_ns.as_deref(),
                &mut reports,
            ),
            Err(e) => reports.push(ObjectReport {
                document: index,
                object: "document".into(),
                verdict: refusal(OBJECT_FIELD, format!("not a Kubernetes object: {e}")),
            }),
        }
    }
    reports
}

fn collect(
    validator: &Validator,
    state: &PolicyState,
    value: Value,
    document: usize,
    tenant_ns: Option<&str>,
    out: &mut Vec<ObjectReport>,
) {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let api_version = text(&value, "apiVersion");
    let kind = text(&value, "kind");
    if api_version == "v1" && kind == "List" {
        if let Some(Value::Array(items)) = value.get("items") {
            for item in items.clone() {
                collect(validator, state, item, document, tenant_ns, out);
            }
        }
        return;
    }
    let meta = value.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let own_ns = meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    let cluster_scoped = api_version == "teapot.dev/v1alpha1" && kind == "Tenant";
    let namespace = if cluster_scoped {
        None
    } else {
        Some(tenant_ns.or(own_ns).unwrap_or("default").to_string())
    };
    let object = match &namespace {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    };
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.clone()),
    };
    let is_known = namespace.as_deref().is_some_and(|ns| {
        object_kind(&api_version, &kind).is_some_and(|k: ObjectKind| state.contains(ns, k, &name))
    });
    let verdict = validator.validate(
        state,
        &Subject {
            group: &group,
            version: &version,
            kind: &kind,
            namespace: namespace.as_deref(),
            name: &name,
            operation: if is_known {
                Operation::Update
            } else {
                Operation::Create
            },
            object: Some(&value),
        },
    );
    out.push(ObjectReport {
        document,
        object,
        verdict,
    });
}

fn refusal(field: &str, message: String) -> Verdict {
    Verdict {
        allowed: false,
        violations: vec![Violation::new(field, message)],
        ..Verdict::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::PolicyConfig;
    use std::path::Path;
    use teapot_model::manifests::{Loaded, load_text};
    use teapot_model::store::Store;

    #[test]
    fn every_document_is_judged() {
        let mut loaded = Loaded::default();
        load_text(
            Path::new("s.yaml"),
            "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: acme}\nspec: {cluster: acme, nodeCIDRs: [10.1.0.0/24]}\n",
            &Store::default(),
            &mut loaded,
        );
        let state = PolicyState::from_store(&loaded.store, 0);
        let v = Validator::new(PolicyConfig::new("example.net", Vec::new()).unwrap());
        let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {type: ExternalName, externalName: x.com}\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: b}\n  spec: {ports: [{port: 80}]}\n";
        let r = validate_text(&v, &state, text, None);
        assert_eq!(r.len(), 2);
        assert!(
            r.iter().all(|r| r.verdict.allowed),
            "default namespace is the operator's"
        );
        let r = validate_text(&v, &state, text, Some("acme"));
        assert_eq!(r[0].object, "Service tenant-acme/a");
        assert!(!r[0].verdict.allowed);
        assert!(r[1].verdict.allowed, "{}", r[1]);
        let r = validate_text(&v, &state, text, Some("nobody"));
        assert!(!r[0].verdict.allowed);
        let r = validate_text(&v, &state, "a: [\n", None);
        assert!(!r[0].verdict.allowed);
    }
}
