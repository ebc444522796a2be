//! Secret rules (shape only: the webhook parses the certificate and key).

use k8s_openapi::api::core::v1::Secret;

use super::meta::check_metadata;
use super::strings::key_field;
use super::{PolicyContext, Violation, quote};
use crate::annotations::ObjectKind;
use crate::names::TLS_SECRET_TYPE;

/// The keys a tenant TLS Secret may hold.
pub const TLS_SECRET_KEYS: &[&str] = &["tls.crt", "tls.key", "ca.crt"];

/// Checks a Secret a tenant writes into `namespace`: `kubernetes.io/tls`
/// only, with `tls.crt` and `tls.key` (and optionally `ca.crt`), nothing
/// else; Secrets within the tenant's limit (one per Ingress it may hold).
pub fn check_secret(ctx: &PolicyContext<'_>, namespace: &str, secret: &Secret) -> Vec<Violation> {
    let mut out = Vec::new();
    check_metadata(
        ctx,
        namespace,
        &secret.metadata,
        ObjectKind::Secret,
        &mut out,
    );
    out.extend(ctx.over_limit(
        |e| e.secrets,
        ctx.limits.max_ingresses,
        "Secrets",
        "maxIngresses",
    ));
    let ty = secret.type_.as_deref().unwrap_or("Opaque");
    if ty != TLS_SECRET_TYPE {
        out.push(Violation::new(
            "type",
            format!(
                "only {TLS_SECRET_TYPE} Secrets are accepted in a tenant namespace, not {}",
                quote(ty)
            ),
        ));
        return out;
    }
    let data_keys = secret.data.iter().flatten().map(|(k, _)| ("data", k));
    let string_keys = secret
        .string_data
        .iter()
        .flatten()
        .map(|(k, _)| ("stringData", k));
    for (map, key) in data_keys.chain(string_keys) {
        if !TLS_SECRET_KEYS.contains(&key.as_str()) {
            out.push(Violation::new(
                key_field(map, key),
                format!("a TLS Secret holds only {}", TLS_SECRET_KEYS.join(", ")),
            ));
        }
    }
    for key in ["tls.crt", "tls.key"] {
        if get(secret, key).is_none_or(<[u8]>::is_empty) {
            out.push(Violation::new(key_field("data", key), "is required"));
        }
    }
    out
}

fn get<'s>(secret: &'s Secret, key: &str) -> Option<&'s [u8]> {
    secret
        .string_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| v.as_bytes())
        .or_else(|| {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|v| v.0.as_slice())
        })
}

/// The PEM certificate chain and key of a TLS Secret (`stringData` wins
/// over `data`, as the API server merges them), for the caller's crypto
/// check.
pub fn tls_pair(secret: &Secret) -> Option<(&[u8], &[u8])> {
    Some((get(secret, "tls.crt")?, get(secret, "tls.key")?))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn check(body: &str) -> Vec<String> {
        let f = Fixture::new();
        let s: Secret = yaml(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: tls, namespace: {NS}}}\n{body}"
        ));
        fields(&check_secret(&f.ctx(), NS, &s))
    }

    #[test]
    fn only_tls_secrets_with_their_keys() {
        assert!(
            check("type: kubernetes.io/tls\nstringData: {tls.crt: a, tls.key: b}\n").is_empty()
        );
        assert_eq!(check("type: Opaque\nstringData: {x: y}\n"), ["type"]);
        assert_eq!(check("stringData: {x: y}\n"), ["type"]);
        assert_eq!(
            check("type: kubernetes.io/service-account-token\n"),
            ["type"]
        );
        assert_eq!(
            check("type: kubernetes.io/tls\ndata: {tls.crt: YQ==, extra: YQ==}\n"),
            [r#"data.extra"#, r#"data["tls.key"]"#]
        );
    }

    /// The proxy marks its ACME certificate Secrets with these (proxy
    /// `acme::kube_store`); a tenant's Secret must not pass for one.
    #[test]
    fn acme_state_labels_and_annotations_are_refused() {
        let f = Fixture::new();
        let s: Secret = yaml(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: tls, namespace: {NS}, labels: {{teapot.dev/acme-certificate: \"true\"}}, annotations: {{teapot.dev/acme-host: a.example}}}}\ntype: kubernetes.io/tls\nstringData: {{tls.crt: a, tls.key: b}}\n"
        ));
        let got = fields(&check_secret(&f.ctx(), NS, &s));
        assert!(
            got.contains(&r#"metadata.labels["teapot.dev/acme-certificate"]"#.to_string())
                && got.contains(&r#"metadata.annotations["teapot.dev/acme-host"]"#.to_string()),
            "{got:?}"
        );
    }
}
