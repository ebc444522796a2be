//! Rules on `metadata`: the namespace, labels and annotations.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{dns_label, dns_subdomain};
use super::strings::key_field;
use super::{AdmissionContext, MANAGED_BY_LABEL, Violation, quote};
use crate::annotations::{self, ObjectKind};
use crate::names::SERVICE_NAME_LABEL;

const ANNOTATIONS: &str = "metadata.annotations";
const LABELS: &str = "metadata.labels";

/// Label keys under reserved prefixes that a tenant object may carry.
const ALLOWED_SYSTEM_LABELS: &[&str] = &[
    SERVICE_NAME_LABEL,
    MANAGED_BY_LABEL,
    "teapot.dev/source-namespace",
    "teapot.dev/source-name",
];

/// Checks the namespace, name format, labels and annotations shared by
/// every kind. `namespace` is where the object is being written.
pub(crate) fn check_metadata(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    meta: &ObjectMeta,
    kind: ObjectKind,
    out: &mut Vec<Violation>,
) {
    let own = ctx.tenant.namespace_name();
    if namespace != own {
        out.push(Violation::new(
            "metadata.namespace",
            format!(
                "objects of tenant {} belong in namespace {own}, not {}",
                ctx.cluster(),
                quote(namespace)
            ),
        ));
    } else if let Some(ns) = &meta.namespace
        && ns != namespace
    {
        out.push(Violation::new(
            "metadata.namespace",
            format!(
                "{} is not the namespace the object is written to ({namespace})",
                quote(ns)
            ),
        ));
    }
    let name = meta.name.as_deref().unwrap_or("");
    if !name.is_empty() || meta.generate_name.is_none() {
        let checked = match kind {
            ObjectKind::Service => super::names::dns1035_label(name),
            _ => dns_subdomain(name),
        };
        if let Err(e) = checked {
            out.push(Violation::new("metadata.name", e));
        }
    }
    out.extend(check_labels(meta.labels.as_ref()));
    out.extend(check_annotations(kind, meta.annotations.as_ref()));
}

/// Every annotation must be a `teapot.dev/` annotation from the allowlist
/// ([`crate::annotations::ALLOWLIST`]) that applies to `kind`, with a
/// value of its type. Anything else (`nginx.ingress.kubernetes.io/...`,
/// `kubectl.kubernetes.io/last-applied-configuration`) is refused.
pub fn check_annotations(
    kind: ObjectKind,
    annotations: Option<&BTreeMap<String, String>>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for (key, value) in annotations.into_iter().flatten() {
        if let Err(e) = annotations::parse(kind, key, value) {
            out.push(Violation::new(key_field(ANNOTATIONS, key), e.to_string()));
        }
    }
    out
}

/// Label keys and values in Kubernetes syntax; keys under the reserved
/// prefixes (`kubernetes.io`, `k8s.io`, `teapot.dev` and their
/// subdomains, except `app.kubernetes.io`) only from a short list, since
/// system controllers act on them.
pub fn check_labels(labels: Option<&BTreeMap<String, String>>) -> Vec<Violation> {
    let mut out = Vec::new();
    for (key, value) in labels.into_iter().flatten() {
        let field = key_field(LABELS, key);
        let (prefix, name) = match key.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, key.as_str()),
        };
        if let Some(p) = prefix {
            if let Err(e) = dns_subdomain(p) {
                out.push(Violation::new(&field, format!("label prefix {e}")));
                continue;
            }
            if is_reserved(p) && !ALLOWED_SYSTEM_LABELS.contains(&key.as_str()) {
                out.push(Violation::new(
                    &field,
                    format!(
                        "label prefix {p} is reserved for system controllers; allowed there: {}",
                        ALLOWED_SYSTEM_LABELS.join(", ")
                    ),
                ));
                continue;
            }
        }
        if !label_value_ok(name) || name.is_empty() {
            out.push(Violation::new(
                &field,
                "a label name must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            ));
            continue;
        }
        if !label_value_ok(value) {
            out.push(Violation::new(
                &field,
                format!(
                    "label value {} must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                    quote(value)
                ),
            ));
        }
    }
    out
}

fn is_reserved(prefix: &str) -> bool {
    let under = |d: &str| prefix == d || prefix.ends_with(&format!(".{d}"));
    prefix != "app.kubernetes.io"
        && (under("kubernetes.io") || under("k8s.io") || under("teapot.dev"))
}

fn label_value_ok(v: &str) -> bool {
    v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && (v.is_empty()
            || (v.starts_with(|c: char| c.is_ascii_alphanumeric())
                && v.ends_with(|c: char| c.is_ascii_alphanumeric())))
}

/// The value of a label that must name something in this namespace.
pub(crate) fn check_label_names_local(
    labels: Option<&BTreeMap<String, String>>,
    key: &str,
    out: &mut Vec<Violation>,
) -> Option<String> {
    let field = key_field(LABELS, key);
    match labels.and_then(|l| l.get(key)) {
        None => {
            out.push(Violation::new(field, "this label is required"));
            None
        }
        Some(v) => match dns_label(v) {
            Ok(()) => Some(v.clone()),
            Err(e) => {
                out.push(Violation::new(
                    field,
                    format!("must name a Service in this namespace: {e}"),
                ));
                None
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn annotations_by_allowlist() {
        let m = map(&[
            ("teapot.dev/ssl-redirect", "true"),
            (
                "nginx.ingress.kubernetes.io/configuration-snippet",
                "more_set_headers x;",
            ),
            ("teapot.dev/max-body-size", "10m;"),
            ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
        ]);
        let v = check_annotations(ObjectKind::Ingress, Some(&m));
        let fields: Vec<_> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                r#"metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]"#,
                r#"metadata.annotations["nginx.ingress.kubernetes.io/configuration-snippet"]"#,
                r#"metadata.annotations["teapot.dev/max-body-size"]"#,
            ]
        );
    }

    #[test]
    fn labels_under_reserved_prefixes() {
        let m = map(&[
            ("app", "web"),
            ("app.kubernetes.io/name", "web"),
            ("kubernetes.io/service-name", "web"),
            ("service.kubernetes.io/service-proxy-name", "foo"),
            ("node-role.kubernetes.io/control-plane", ""),
            ("teapot.dev/tenant", "globex"),
            ("example.com/team", "a b"),
        ]);
        let v = check_labels(Some(&m));
        let fields: Vec<_> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                r#"metadata.labels["example.com/team"]"#,
                r#"metadata.labels["node-role.kubernetes.io/control-plane"]"#,
                r#"metadata.labels["service.kubernetes.io/service-proxy-name"]"#,
                r#"metadata.labels["teapot.dev/tenant"]"#,
            ]
        );
    }
}
