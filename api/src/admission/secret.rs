//! Secret rules: what a tenant's `kubernetes.io/tls` Secret must hold
//! ([`tls_secret_data`]), what its `ca.crt` may be ([`check_ca_bundle`]),
//! and the one other shape a tenant may write: an `Opaque` Secret holding
//! only `ca.crt` ([`is_ca_secret`]), what ingress-nginx's
//! `proxy-ssl-secret` commonly names to verify a backend without a client
//! certificate. Whether the certificate parses and the key
//! matches it needs a crypto provider; the caller checks that on the pair
//! [`tls_secret_data`] returns.

use k8s_openapi::api::core::v1::Secret;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::meta::check_metadata;
use super::strings::key_field;
use super::{AdmissionContext, Violation, quote};
use crate::annotations::ObjectKind;
use crate::names::{CA_SECRET_TYPE, TLS_SECRET_TYPE};

/// The keys a tenant TLS Secret may hold.
pub const TLS_SECRET_KEYS: &[&str] = &["tls.crt", "tls.key", "ca.crt"];

/// The one key a CA Secret ([`is_ca_secret`]) holds.
pub const CA_SECRET_KEY: &str = "ca.crt";

/// Checks a Secret a tenant writes into `namespace`: `kubernetes.io/tls`
/// with `tls.crt` and `tls.key` (and optionally `ca.crt`), nothing else,
/// or an `Opaque` CA Secret with `ca.crt` alone; Secrets within the
/// tenant's limit (one per Ingress it may hold).
pub fn check_secret(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    secret: &Secret,
) -> Vec<Violation> {
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
    if is_ca_secret(secret) {
        out.extend(check_ca_secret(secret));
        return out;
    }
    // The users of basic authentication (`auth-secret`): htpasswd lines,
    // bounded in entries, size and bcrypt cost (crate::htpasswd).
    if is_htpasswd_secret(secret) {
        out.extend(check_htpasswd_secret(secret));
        return out;
    }
    if let Some(wrong_type) = type_violation(secret) {
        out.push(wrong_type);
        return out;
    }
    for (map, key) in secret_keys(secret) {
        if !TLS_SECRET_KEYS.contains(&key) {
            out.push(Violation::new(
                key_field(map, key),
                format!("a TLS Secret holds only {}", TLS_SECRET_KEYS.join(", ")),
            ));
        }
    }
    match tls_secret_data(secret) {
        Err(missing) => out.extend(missing),
        Ok(TlsSecretData { ca: Some(ca), .. }) => out.extend(check_ca_bundle(ca).err()),
        Ok(_) => {}
    }
    out
}

fn type_violation(secret: &Secret) -> Option<Violation> {
    let ty = secret.type_.as_deref().unwrap_or(CA_SECRET_TYPE);
    (ty != TLS_SECRET_TYPE).then(|| {
        Violation::new(
            "type",
            format!(
                "only {TLS_SECRET_TYPE} Secrets, or {CA_SECRET_TYPE} ones holding {CA_SECRET_KEY} alone, are accepted in a tenant namespace, not {}",
                quote(ty)
            ),
        )
    })
}

/// Whether `secret` is meant as a CA Secret: `Opaque` (the default type)
/// with a `ca.crt`. Which keys it may hold besides is [`check_ca_secret`]'s
/// business, so a stray key is named rather than the type refused.
pub fn is_ca_secret(secret: &Secret) -> bool {
    secret.type_.as_deref().unwrap_or(CA_SECRET_TYPE) == CA_SECRET_TYPE
        && secret_value(secret, CA_SECRET_KEY).is_some()
}

/// A CA Secret holds `ca.crt` alone, a PEM certificate bundle: the LB
/// keeps nothing else of such a Secret, and a key (a client key, say) that
/// would be ignored is refused instead.
fn check_ca_secret(secret: &Secret) -> Vec<Violation> {
    let mut out: Vec<Violation> = secret_keys(secret)
        .filter(|(_, key)| *key != CA_SECRET_KEY)
        .map(|(map, key)| {
            Violation::new(
                key_field(map, key),
                format!(
                    "an {CA_SECRET_TYPE} Secret holds only {CA_SECRET_KEY} (a client certificate needs a {TLS_SECRET_TYPE} Secret)"
                ),
            )
        })
        .collect();
    if let Some(ca) = secret_value(secret, CA_SECRET_KEY) {
        out.extend(check_ca_bundle(ca).err());
    }
    out
}

/// Every key of `data` and `stringData`, with the map it is in.
fn secret_keys(secret: &Secret) -> impl Iterator<Item = (&'static str, &str)> {
    let data_keys = secret
        .data
        .iter()
        .flatten()
        .map(|(k, _)| ("data", k.as_str()));
    let string_keys = secret
        .string_data
        .iter()
        .flatten()
        .map(|(k, _)| ("stringData", k.as_str()));
    data_keys.chain(string_keys)
}

/// The value of `key`, read as the API server merges the maps
/// (`stringData` wins over `data`).
pub fn secret_value<'s>(secret: &'s Secret, key: &str) -> Option<&'s [u8]> {
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

/// The certificate material of a tenant TLS Secret, each key read as the
/// API server merges them (`stringData` wins over `data`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsSecretData<'s> {
    /// `tls.crt`: the PEM chain, leaf first (not parsed here).
    pub cert_chain: &'s [u8],
    /// `tls.key`: the PEM private key (not parsed here).
    pub key: &'s [u8],
    /// `ca.crt`, when present: see [`check_ca_bundle`].
    pub ca: Option<&'s [u8]>,
}

/// What a tenant TLS Secret must hold: type `kubernetes.io/tls`, and a
/// non-empty `tls.crt` and `tls.key`. Returns them (and `ca.crt`) for the
/// caller's certificate check, or every violation: the type alone when it
/// is wrong, else each missing key as `data["tls.crt"]`/`data["tls.key"]`.
pub fn tls_secret_data(secret: &Secret) -> Result<TlsSecretData<'_>, Vec<Violation>> {
    if let Some(wrong_type) = type_violation(secret) {
        return Err(vec![wrong_type]);
    }
    let required = |key: &str| {
        secret_value(secret, key)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Violation::new(key_field("data", key), "is required"))
    };
    match (required("tls.crt"), required("tls.key")) {
        (Ok(cert_chain), Ok(key)) => Ok(TlsSecretData {
            cert_chain,
            key,
            ca: secret_value(secret, "ca.crt"),
        }),
        (cert_chain, key) => Err(cert_chain.err().into_iter().chain(key.err()).collect()),
    }
}

/// The largest `ca.crt` admitted, and the most certificates in it: a CA
/// bundle of client certificates is parsed on every compile and kept on
/// every replica, its anchors consulted on every handshake of its hosts
/// (the proxy's `compile::client_auth::MAX_BUNDLE_BYTES` and
/// `MAX_CA_CERTS` are these constants).
pub const MAX_CA_BUNDLE_BYTES: usize = 256 * 1024;
pub const MAX_CA_CERTS: usize = 100;

/// What `ca.crt` may be: a PEM bundle of one to [`MAX_CA_CERTS`]
/// certificates (nothing else in it parses as PEM) of at most
/// [`MAX_CA_BUNDLE_BYTES`]. The certificates themselves are not verified:
/// a tenant's CA is its own business, only the framing must hold.
pub fn check_ca_bundle(ca: &[u8]) -> Result<(), Violation> {
    let field = || key_field("data", "ca.crt");
    if ca.len() > MAX_CA_BUNDLE_BYTES {
        return Err(Violation::new(
            field(),
            format!(
                "is {} bytes, more than a CA bundle may be ({MAX_CA_BUNDLE_BYTES})",
                ca.len()
            ),
        ));
    }
    match CertificateDer::pem_slice_iter(ca).collect::<Result<Vec<_>, _>>() {
        Ok(certs) if certs.len() > MAX_CA_CERTS => Err(Violation::new(
            field(),
            format!(
                "holds {} certificates, more than a CA bundle may ({MAX_CA_CERTS})",
                certs.len()
            ),
        )),
        Ok(certs) if !certs.is_empty() => Ok(()),
        _ => Err(Violation::new(field(), "is not a PEM certificate bundle")),
    }
}

/// Whether `secret` is meant as the users of basic authentication: an
/// `Opaque` Secret (the default type) with key `auth` and no `ca.crt`.
/// Which keys it may hold besides is [`check_htpasswd_secret`]'s business, so a
/// stray key is named rather than the type refused.
pub fn is_htpasswd_secret(secret: &k8s_openapi::api::core::v1::Secret) -> bool {
    use crate::admission::{CA_SECRET_KEY, secret_value};
    use crate::htpasswd::AUTH_KEY;
    secret
        .type_
        .as_deref()
        .unwrap_or(crate::names::CA_SECRET_TYPE)
        == crate::names::CA_SECRET_TYPE
        && secret_value(secret, AUTH_KEY).is_some()
        && secret_value(secret, CA_SECRET_KEY).is_none()
}

/// A users' Secret holds `auth` alone (the LB keeps nothing else of it),
/// whose lines [`crate::htpasswd::parse_file`] reads: each refusal names the line.
pub fn check_htpasswd_secret(
    secret: &k8s_openapi::api::core::v1::Secret,
) -> Vec<crate::admission::Violation> {
    use crate::admission::strings::key_field;
    use crate::admission::{Violation, secret_value};
    use crate::htpasswd::{AUTH_KEY, parse_file};
    let mut out = Vec::new();
    let keys = secret
        .data
        .iter()
        .flatten()
        .map(|(k, _)| ("data", k.as_str()))
        .chain(
            secret
                .string_data
                .iter()
                .flatten()
                .map(|(k, _)| ("stringData", k.as_str())),
        );
    for (map, key) in keys {
        if key != AUTH_KEY {
            out.push(Violation::new(
                key_field(map, key),
                format!("a basic authentication Secret holds only {AUTH_KEY} (htpasswd lines)"),
            ));
        }
    }
    if let Some(text) = secret_value(secret, AUTH_KEY)
        && let Err(why) = parse_file(text)
    {
        out.push(Violation::new(key_field("data", AUTH_KEY), why));
    }
    out
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
        assert_eq!(check("type: Opaque\nstringData: {tls.crt: a}\n"), ["type"]);
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

    /// A tenant's users Secret (basic authentication): `auth` alone, its
    /// lines within the bounds; bcrypt past cost 12 is refused at
    /// admission, naming the line.
    #[test]
    fn users_secrets_hold_bounded_htpasswd_lines() {
        let good = "$2y$05$WvD7gZ4VeRFMxZcjx6m1a.0NZ7HTAGtCA0zH8Ss6eHptLVqcx1cxS";
        assert!(
            check(&format!(
                "type: Opaque\nstringData: {{auth: 'alice:{good}'}}\n"
            ))
            .is_empty()
        );
        let costly = good.replace("$05$", "$31$");
        let f = Fixture::new();
        let s = secret(&format!(
            "stringData: {{auth: \"bob:{{PLAIN}}x\\nalice:{costly}\"}}\n"
        ));
        let refused = check_secret(&f.ctx(), NS, &s);
        assert_eq!(fields(&refused), ["data.auth"]);
        assert!(
            refused[0].message.contains("line 2: bcrypt cost 31"),
            "{}",
            refused[0].message
        );
        assert_eq!(
            check("stringData: {auth: 'alice:{PLAIN}x', password: y}\n"),
            ["stringData.password"]
        );
    }

    fn secret(body: &str) -> Secret {
        yaml(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: tls, namespace: {NS}}}\n{body}"
        ))
    }

    #[test]
    fn tls_secret_data_prefers_string_data_and_names_what_is_missing() {
        let s = secret(
            "type: kubernetes.io/tls\ndata: {tls.crt: YQ==, tls.key: Yg==, ca.crt: Yw==}\nstringData: {tls.crt: x}\n",
        );
        assert_eq!(
            tls_secret_data(&s).unwrap(),
            TlsSecretData {
                cert_chain: b"x",
                key: b"b",
                ca: Some(b"c"),
            }
        );
        let s = secret("type: kubernetes.io/tls\nstringData: {tls.crt: a, tls.key: b}\n");
        assert_eq!(tls_secret_data(&s).unwrap().ca, None);
        let s = secret("type: kubernetes.io/tls\nstringData: {tls.key: \"\"}\n");
        assert_eq!(
            fields(&tls_secret_data(&s).unwrap_err()),
            [r#"data["tls.crt"]"#, r#"data["tls.key"]"#]
        );
        let s = secret("type: Opaque\nstringData: {tls.crt: a, tls.key: b}\n");
        assert_eq!(fields(&tls_secret_data(&s).unwrap_err()), ["type"]);
        assert_eq!(
            fields(&tls_secret_data(&secret("stringData: {}\n")).unwrap_err()),
            ["type"]
        );
    }

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIUYK73o5X0ArBY4b2QUYqL1kmeLDQwCgYIKoZIzj0EAwIw\nEDEOMAwGA1UEAwwFb3RoZXIwIBcNMjYxMTIyMDAyNzI0WhgPMjEyNjEwMjkwMDI3\nMjRaMBAxDjAMBgNVBAMMBW90aGVyMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n+STRwibuK4YifkjHWWaE7/gBZnxQSUmpxU2u23nPUT4/TxeUXlKXdyinfXnsWY/l\nKjwwLCbf98IGgtkOQFDctqNTMFEwHQYDVR0OBBYEFH9BAl3Z9JqYEMHinr1odFzL\nyxq7MB8GA1UdIwQYMBaAFH9BAl3Z9JqYEMHinr1odFzLyxq7MA8GA1UdEwEB/wQF\nMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIhAOQi+iHCAyQ35TKtLhnotXmdJAnla3s0\nT9mBRWiIii1XAiAnGFVSWn6+laDF/sfriQ0zuadu+YX+fy+C1KKl+M34QA==\n-----END CERTIFICATE-----\n";

    #[test]
    fn ca_bundle_is_one_or_more_pem_certificates() {
        assert_eq!(check_ca_bundle(CA.as_bytes()), Ok(()));
        assert_eq!(check_ca_bundle(format!("{CA}{CA}").as_bytes()), Ok(()));
        for bad in [
            "",
            "not pem",
            "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
        ] {
            let v = check_ca_bundle(bad.as_bytes()).unwrap_err();
            assert_eq!(v.field, r#"data["ca.crt"]"#, "{bad:?}");
            assert_eq!(v.message, "is not a PEM certificate bundle");
        }
        // Bounded: the proxy would refuse a larger bundle on every compile.
        assert_eq!(check_ca_bundle(CA.repeat(MAX_CA_CERTS).as_bytes()), Ok(()));
        let many = check_ca_bundle(CA.repeat(MAX_CA_CERTS + 1).as_bytes()).unwrap_err();
        assert!(
            many.message.contains("101 certificates"),
            "{}",
            many.message
        );
        let big = vec![b'a'; MAX_CA_BUNDLE_BYTES + 1];
        let big = check_ca_bundle(&big).unwrap_err();
        assert!(
            big.message.contains("more than a CA bundle may be"),
            "{}",
            big.message
        );
    }

    /// ingress-nginx's `proxy-ssl-secret` is commonly an Opaque Secret with
    /// `ca.crt` alone: accepted, the bundle checked, any other key named.
    #[test]
    fn an_opaque_secret_with_ca_crt_alone_is_a_ca_secret() {
        let ca = CA.replace('\n', "\\n");
        assert!(check(&format!("type: Opaque\nstringData: {{ca.crt: \"{ca}\"}}\n")).is_empty());
        assert!(check(&format!("stringData: {{ca.crt: \"{ca}\"}}\n")).is_empty());
        assert_eq!(
            check("type: Opaque\nstringData: {ca.crt: nope}\n"),
            [r#"data["ca.crt"]"#]
        );
        assert_eq!(
            check(&format!(
                "type: Opaque\nstringData: {{ca.crt: \"{ca}\", tls.key: k}}\ndata: {{password: YQ==}}\n"
            )),
            ["data.password", r#"stringData["tls.key"]"#]
        );
        // Another type with a ca.crt is no CA Secret.
        assert_eq!(
            check(&format!(
                "type: kubernetes.io/basic-auth\nstringData: {{ca.crt: \"{ca}\"}}\n"
            )),
            ["type"]
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
