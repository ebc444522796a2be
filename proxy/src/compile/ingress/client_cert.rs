//! ingress-nginx's client certificates (`auth-tls-*`): an Ingress's
//! annotations read into the per-host setting the TLS plane serves for
//! both APIs (`compile::client_auth`). A setting that cannot be served as
//! asked (its CA Secret missing, of another tenant's namespace, a bundle
//! past the bounds, a subject pattern that does not compile) keeps the
//! whole Ingress unrouted, as an unserved restriction does: served
//! without it, the Ingress would publish what the certificates protect.

use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use teapot_api::admission::{CA_SECRET_KEY, tls_secret_data};
use teapot_api::annotations::{
    AUTH_TLS_MATCH_CN, AUTH_TLS_SECRET, AUTH_TLS_VERIFY_DEPTH, AuthTls, VerifyClient,
};
use teapot_model::store::{NsName, NsRef, Store};

use crate::compile::client_auth::{CaBundle, ClientAuth, ClientAuthMode};

/// The client-certificate setting an Ingress asks for: `Ok(None)` when it
/// asks for none; `Err` with each reason it cannot be served
/// (`metadata.annotations["KEY"]: why`).
pub(super) fn read(
    store: &Store,
    id: &NsName,
    ingress: &Ingress,
    tenant: bool,
) -> Result<Option<Arc<ClientAuth>>, Vec<String>> {
    let field = |key: &str| format!("metadata.annotations[{key:?}]");
    let annotations = ingress.metadata.annotations.iter().flatten();
    let asked = match AuthTls::read(&id.namespace, annotations) {
        Ok(None) => return Ok(None),
        Ok(Some(asked)) => asked,
        Err(errors) => {
            return Err(errors
                .into_iter()
                .map(|(key, why)| format!("{}: {why}", field(key)))
                .collect());
        }
    };
    let (namespace, name) = (asked.secret.0.as_str(), asked.secret.1.as_str());
    let secret_field = field(AUTH_TLS_SECRET);
    // A tenant's Ingress trusts its own namespace's CAs only.
    if tenant && namespace != id.namespace {
        return Err(vec![format!(
            "{secret_field}: Secret {namespace}/{name} is not in the Ingress's namespace {}",
            id.namespace
        )]);
    }
    let key = NsRef { namespace, name };
    // ingress-nginx reads `ca.crt` of either shape: a CA Secret (`Opaque`,
    // `ca.crt` alone) or a TLS Secret that carries one.
    let ca = match (store.secrets.get(&key), store.ca_secrets.get(&key)) {
        (Some(tls), _) => tls_secret_data(&tls.object.source).ok().and_then(|d| d.ca),
        (None, Some(ca)) => ca
            .object
            .data
            .as_ref()
            .and_then(|d| d.get(CA_SECRET_KEY))
            .map(|v| v.0.as_slice()),
        (None, None) => None,
    };
    let Some(ca) = ca else {
        return Err(vec![format!(
            "{secret_field}: Secret {namespace}/{name} not found or without a {CA_SECRET_KEY}"
        )]);
    };
    let what = format!("{secret_field}: Secret {namespace}/{name} key {CA_SECRET_KEY}");
    let roots = CaBundle::from_pem(ca, &what).map_err(|e| vec![e.to_string()])?;
    let mode = match asked.verify {
        VerifyClient::On => ClientAuthMode::Require,
        VerifyClient::Optional => ClientAuthMode::Optional,
        VerifyClient::OptionalNoCa => ClientAuthMode::OptionalNoCa,
    };
    let source = format!("Ingress {}/{}", id.namespace, id.name);
    let mut setting = ClientAuth::new(Arc::new(roots), mode, source)
        .with_depth(i64::from(asked.depth), &field(AUTH_TLS_VERIFY_DEPTH))
        .map_err(|e| vec![e.to_string()])?;
    setting.error_page = asked.error_page;
    setting.pass_to_upstream = asked.pass_certificate;
    if let Some(pattern) = &asked.match_cn {
        // nginx's `$ssl_client_s_dn !~ PATTERN`: the subject contains a
        // match.
        let compiled = teapot_api::regex::compile_contains(pattern)
            .map_err(|e| vec![format!("{}: {e}", field(AUTH_TLS_MATCH_CN))])?;
        setting.match_cn = Some(compiled);
    }
    Ok(Some(Arc::new(setting)))
}
