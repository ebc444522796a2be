//! The ingress-nginx annotations of a tenant Ingress on their way to the LB
//! copy (docs/migrate-from-ingress-nginx.md). Every
//! `nginx.ingress.kubernetes.io/` key travels, so the webhook serves it or
//! refuses it with its reason, never the agent dropping it unseen. The few
//! that name other tenant objects (the auth service, the default backend,
//! the backend's TLS Secret) are rewritten to the mirrors' names, and those
//! objects are mirrored with the Ingress, as its backends and TLS Secrets
//! are.

use std::collections::BTreeMap;

use teapot_api::annotations::{AuthHost, AuthTarget, NGINX_PREFIX};
use teapot_api::hostname::{mirrored_secret_name, mirrored_service_name};
use teapot_api::names::namespaced_reference;

/// A tenant object an annotation names: `(namespace, name)` in the tenant
/// cluster.
pub type TenantRef = (String, String);

const AUTH_URL: &str = "auth-url";
const DEFAULT_BACKEND: &str = "default-backend";
const PROXY_SSL_SECRET: &str = "proxy-ssl-secret";
const AUTH_TLS_SECRET: &str = "auth-tls-secret";
const AUTH_SECRET: &str = "auth-secret";
const AUTH_SECRET_TYPE: &str = "auth-secret-type";

/// The annotations that name a tenant Secret, mirrored with the Ingress:
/// the backend's TLS Secret, the CA of client certificates and the users
/// of basic authentication.
const SECRET_ANNOTATIONS: [&str; 3] = [PROXY_SSL_SECRET, AUTH_TLS_SECRET, AUTH_SECRET];

/// The Secret holding the users of the Ingress's basic authentication
/// (`auth-secret`), and whether it is an `auth-map` (one key per user):
/// its LB copy is the htpasswd lines it stands for either way
/// (crate::mirror::lb_htpasswd_secret), and the copy's annotation says
/// `auth-file`.
pub fn basic_auth_secret(
    namespace: &str,
    annotations: &BTreeMap<String, String>,
) -> Option<(TenantRef, bool)> {
    let secret = annotation_secret(namespace, annotations, AUTH_SECRET)?;
    let map = nginx(annotations, AUTH_SECRET_TYPE).is_some_and(|t| t.trim() == "auth-map");
    Some((secret, map))
}

/// The Service an `auth-url` names, read as the webhook and the compile
/// read it (`AuthTarget`: `SERVICE.NAMESPACE.svc[.cluster.local]`; any
/// other host is theirs to refuse), with the URL's port and path.
fn auth_service(url: &str) -> Option<(TenantRef, u16, String)> {
    let target = AuthTarget::parse(url).ok()?;
    match target.host {
        AuthHost::Service { name, namespace } => {
            Some(((namespace, name), target.port, target.path))
        }
        AuthHost::Address(_) => None,
    }
}

/// The tenant Services the Ingress's annotations name, besides its
/// backends: the `auth-url` Service and the `default-backend` (a Service
/// of the Ingress's namespace).
pub fn annotation_services(
    namespace: &str,
    annotations: &BTreeMap<String, String>,
) -> Vec<TenantRef> {
    let mut out = Vec::new();
    if let Some((svc, _, _)) = nginx(annotations, AUTH_URL).and_then(auth_service) {
        out.push(svc);
    }
    if let Some(name) = nginx(annotations, DEFAULT_BACKEND) {
        out.push((namespace.to_string(), name.trim().to_string()));
    }
    out
}

/// The tenant Secrets `proxy-ssl-secret`, `auth-tls-secret` and
/// `auth-secret` name:
/// `NAMESPACE/NAME`, or a bare `NAME` in the Ingress's `namespace`, as the
/// compile reads them.
pub fn annotation_secrets(
    namespace: &str,
    annotations: &BTreeMap<String, String>,
) -> Vec<TenantRef> {
    let mut out = Vec::new();
    for annotation in SECRET_ANNOTATIONS {
        if let Some(secret) = annotation_secret(namespace, annotations, annotation)
            && !out.contains(&secret)
        {
            out.push(secret);
        }
    }
    out
}

fn annotation_secret(
    namespace: &str,
    annotations: &BTreeMap<String, String>,
    annotation: &str,
) -> Option<TenantRef> {
    nginx(annotations, annotation)
        .map(|v| namespaced_reference(v.trim(), namespace))
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .map(|(ns, name)| (ns.to_string(), name.to_string()))
}

/// `custom-headers`: the ConfigMap of response fields (after the prefix).
pub const CUSTOM_HEADERS: &str = "custom-headers";

/// The LB name of the copy of tenant ConfigMap `name` of `namespace` that
/// `custom-headers` names: the mirrored Services' scheme with a suffix of
/// its own, so a ConfigMap a BackendTLSPolicy also names (its `ca.crt`)
/// keeps two copies that never overwrite each other.
pub fn mirrored_headers_config_map_name(namespace: &str, name: &str) -> String {
    format!(
        "{}{}",
        mirrored_service_name(namespace, name),
        teapot_api::response_headers::COPY_SUFFIX
    )
}

/// The tenant ConfigMap an Ingress's `custom-headers` names, read as the
/// webhook and the compile read it (a bare name in the Ingress's own
/// namespace); `None` without one or with a value that does not read.
pub fn headers_config_map(
    namespace: &str,
    annotations: &BTreeMap<String, String>,
) -> Option<TenantRef> {
    teapot_api::response_headers::config_map_ref(namespace, Some(annotations))?.ok()
}

/// The ingress-nginx annotations for the LB copy of an Ingress of
/// `namespace`, references renamed to their mirrors in `lb_namespace`.
pub fn travelling(
    namespace: &str,
    lb_namespace: &str,
    annotations: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    annotations
        .iter()
        .filter_map(|(key, value)| {
            let name = key.strip_prefix(NGINX_PREFIX)?;
            let value = match name {
                AUTH_URL => match auth_service(value) {
                    Some(((ns, svc), port, path)) => format!(
                        "http://{}.{lb_namespace}.svc.cluster.local:{port}{path}",
                        mirrored_service_name(&ns, &svc)
                    ),
                    None => value.clone(),
                },
                DEFAULT_BACKEND => mirrored_service_name(namespace, value.trim()),
                CUSTOM_HEADERS => match headers_config_map(namespace, annotations) {
                    Some((ns, name)) => {
                        format!(
                            "{lb_namespace}/{}",
                            mirrored_headers_config_map_name(&ns, &name)
                        )
                    }
                    None => value.clone(),
                },
                // The agent writes an auth-map's users as htpasswd lines.
                AUTH_SECRET_TYPE if basic_auth_secret(namespace, annotations).is_some() => {
                    "auth-file".to_string()
                }
                PROXY_SSL_SECRET | AUTH_TLS_SECRET | AUTH_SECRET => {
                    match annotation_secret(namespace, annotations, name) {
                        Some((ns, secret)) => {
                            format!("{lb_namespace}/{}", mirrored_secret_name(&ns, &secret))
                        }
                        None => value.clone(),
                    }
                }
                _ => value.clone(),
            };
            Some((key.clone(), value))
        })
        .collect()
}

fn nginx<'a>(annotations: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    annotations
        .get(&format!("{NGINX_PREFIX}{name}"))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (format!("{NGINX_PREFIX}{k}"), v.to_string()))
            .collect()
    }

    #[test]
    fn every_nginx_key_travels_and_references_are_renamed() {
        let a = map(&[
            (
                "auth-url",
                "http://oauth2.auth.svc.cluster.local:4180/oauth2/auth?x=1",
            ),
            ("auth-signin", "https://login.example/start"),
            ("default-backend", "errors"),
            ("proxy-ssl-secret", "shop/backend-ca"),
            ("proxy-buffer-size", "8k"),
            ("whitelist-source-range", "10.0.0.0/8"),
        ]);
        let mut with_other = a.clone();
        with_other.insert("kubernetes.io/ingress.class".into(), "nginx".into());
        let out = travelling("shop", "tenant-acme", &with_other);
        let get = |k: &str| out[&format!("{NGINX_PREFIX}{k}")].as_str();
        assert_eq!(
            get("auth-url"),
            format!(
                "http://{}.tenant-acme.svc.cluster.local:4180/oauth2/auth?x=1",
                mirrored_service_name("auth", "oauth2")
            )
        );
        assert_eq!(get("auth-signin"), "https://login.example/start");
        assert_eq!(
            get("default-backend"),
            mirrored_service_name("shop", "errors")
        );
        assert_eq!(
            get("proxy-ssl-secret"),
            format!("tenant-acme/{}", mirrored_secret_name("shop", "backend-ca"))
        );
        // Unserved keys travel too, so the webhook names them.
        assert_eq!(get("proxy-buffer-size"), "8k");
        assert_eq!(get("whitelist-source-range"), "10.0.0.0/8");
        assert_eq!(out.len(), 6, "only nginx keys: {out:?}");
        assert_eq!(
            annotation_services("shop", &a),
            vec![
                ("auth".to_string(), "oauth2".to_string()),
                ("shop".to_string(), "errors".to_string())
            ]
        );
        assert_eq!(
            annotation_secrets("shop", &a),
            vec![("shop".to_string(), "backend-ca".to_string())]
        );
        // A bare name is the Ingress's own namespace's, as the compile
        // reads it.
        let bare = map(&[("proxy-ssl-secret", "backend-ca")]);
        assert_eq!(
            annotation_secrets("shop", &bare),
            vec![("shop".to_string(), "backend-ca".to_string())]
        );
        assert_eq!(
            travelling("shop", "lb", &bare)[&format!("{NGINX_PREFIX}proxy-ssl-secret")],
            format!("lb/{}", mirrored_secret_name("shop", "backend-ca"))
        );
    }

    #[test]
    fn auth_urls_that_name_no_service_are_left_for_the_webhook() {
        for url in [
            "http://10.1.0.7:9000/auth",
            "https://auth.example.com/check",
            "http://auth/check",
            "http://auth.example/check",
            "not a url",
        ] {
            let a = map(&[("auth-url", url)]);
            assert!(annotation_services("shop", &a).is_empty(), "{url}");
            assert_eq!(
                travelling("shop", "lb", &a)[&format!("{NGINX_PREFIX}auth-url")],
                url
            );
        }
        assert_eq!(
            auth_service("http://a.b.svc/x"),
            Some((("b".into(), "a".into()), 80, "/x".into()))
        );
        assert!(annotation_secrets("shop", &map(&[("proxy-ssl-secret", "a/b/c")])).is_empty());
    }

    /// The users of basic authentication travel as the CA Secrets do;
    /// an auth-map arrives as the htpasswd lines it stands for, so the
    /// copy says auth-file.
    #[test]
    fn the_basic_auth_secret_is_mirrored_as_auth_lines() {
        let a = map(&[
            ("auth-type", "basic"),
            ("auth-secret", "users"),
            ("auth-secret-type", "auth-map"),
            ("auth-realm", "Staff"),
        ]);
        assert_eq!(
            basic_auth_secret("shop", &a),
            Some((("shop".to_string(), "users".to_string()), true))
        );
        assert_eq!(
            annotation_secrets("shop", &a),
            vec![("shop".to_string(), "users".to_string())]
        );
        let out = travelling("shop", "tenant-acme", &a);
        let get = |k: &str| out[&format!("{NGINX_PREFIX}{k}")].as_str();
        assert_eq!(
            get("auth-secret"),
            format!("tenant-acme/{}", mirrored_secret_name("shop", "users"))
        );
        assert_eq!(get("auth-secret-type"), "auth-file");
        assert_eq!((get("auth-type"), get("auth-realm")), ("basic", "Staff"));
        let file = map(&[("auth-secret", "other/htpasswd")]);
        assert_eq!(
            basic_auth_secret("shop", &file),
            Some((("other".to_string(), "htpasswd".to_string()), false))
        );
        // Without a Secret the type travels as written, for the webhook.
        let lone = map(&[("auth-secret-type", "auth-map")]);
        assert_eq!(
            travelling("shop", "lb", &lone)[&format!("{NGINX_PREFIX}auth-secret-type")],
            "auth-map"
        );
    }

    /// The CA of client certificates travels as the backend's TLS Secret
    /// does: mirrored, the annotation renamed to the mirror.
    #[test]
    fn the_client_certificate_ca_secret_is_mirrored() {
        let a = map(&[
            ("auth-tls-secret", "shop/client-ca"),
            ("proxy-ssl-secret", "backend-ca"),
            ("auth-tls-verify-client", "on"),
        ]);
        assert_eq!(
            annotation_secrets("shop", &a),
            vec![
                ("shop".to_string(), "backend-ca".to_string()),
                ("shop".to_string(), "client-ca".to_string()),
            ]
        );
        let out = travelling("shop", "tenant-acme", &a);
        let get = |k: &str| out[&format!("{NGINX_PREFIX}{k}")].as_str();
        assert_eq!(
            get("auth-tls-secret"),
            format!("tenant-acme/{}", mirrored_secret_name("shop", "client-ca"))
        );
        assert_eq!(
            get("proxy-ssl-secret"),
            format!("tenant-acme/{}", mirrored_secret_name("shop", "backend-ca"))
        );
        assert_eq!(get("auth-tls-verify-client"), "on");
        // One Secret named twice is mirrored once.
        let same = map(&[("auth-tls-secret", "ca"), ("proxy-ssl-secret", "shop/ca")]);
        assert_eq!(annotation_secrets("shop", &same).len(), 1);
        let bare = map(&[("auth-tls-secret", "client-ca")]);
        assert_eq!(
            travelling("shop", "lb", &bare)[&format!("{NGINX_PREFIX}auth-tls-secret")],
            format!("lb/{}", mirrored_secret_name("shop", "client-ca"))
        );
    }
}
