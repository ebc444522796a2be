//! Custom response headers (ingress-nginx's `custom-headers`): the
//! fields of the ConfigMap an Ingress names, read once per compile into
//! header names and values the engines set on every response its routes
//! forward (crate::plane::traffic::custom_headers), replacing the
//! backend's field of the same name as nginx's `more_set_headers` does.
//!
//! What cannot be served as asked (the ConfigMap missing, of another
//! namespace for a tenant, an entry past teapot_api::response_headers'
//! bounds) is compiled as refused: the routes answer 503 and the Ingress
//! says why, as ingress-nginx denies a location whose ConfigMap it cannot
//! read. The fields are often security headers (Content-Security-Policy,
//! Strict-Transport-Security, X-Frame-Options): serving the routes without
//! them would hide the loss from the operator who asked for them.

use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use k8s_openapi::api::networking::v1::Ingress;
use teapot_api::response_headers::{self, ANNOTATION, REFUSED_ANNOTATION};
use teapot_model::store::{NsRef, Store};

/// A route's custom response fields.
#[derive(Debug, Default)]
pub struct CustomHeaders {
    /// Set on every forwarded response, in name order.
    pub fields: Vec<(HeaderName, HeaderValue)>,
    /// Why the ConfigMap cannot be served: every request gets 503.
    pub refused: Option<String>,
}

impl CustomHeaders {
    fn refused(why: String) -> CustomHeaders {
        CustomHeaders {
            fields: Vec::new(),
            refused: Some(why),
        }
    }
}

/// The fields of ConfigMap `(namespace, name)` as the store keeps it, or
/// why there are none to serve.
pub fn fields(
    store: &Store,
    (namespace, name): (&str, &str),
) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let key = NsRef { namespace, name };
    let Some(stored) = store.config_maps.get(&key).map(|s| &s.object) else {
        return Err(format!("ConfigMap {namespace}/{name} not found"));
    };
    if let Some(why) = stored
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REFUSED_ANNOTATION))
    {
        return Err(format!("ConfigMap {namespace}/{name} {why}"));
    }
    let data = stored.data.iter().flatten();
    let entries = response_headers::parse(data.map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| format!("ConfigMap {namespace}/{name} {e}"))?;
    entries
        .into_iter()
        .map(|(n, v)| {
            // The bounds admit only what both parse; checked all the same.
            let field = HeaderName::from_bytes(n.as_bytes());
            let value = HeaderValue::from_str(&v);
            match (field, value) {
                (Ok(field), Ok(value)) => Ok((field, value)),
                _ => Err(format!(
                    "ConfigMap {namespace}/{name} {}: not a field",
                    response_headers::data_field(&n)
                )),
            }
        })
        .collect()
}

/// An Ingress's custom response fields: `None` when it names no
/// ConfigMap; refused (why in [`CustomHeaders::refused`], reported in
/// `problems`) when it names one that cannot be served. A `tenant`'s
/// Ingress reads its own namespace's ConfigMaps only.
pub fn of_ingress(
    store: &Store,
    ingress: &Ingress,
    tenant: Option<&str>,
    problems: &mut Vec<String>,
) -> Option<Arc<CustomHeaders>> {
    let namespace = ingress.metadata.namespace.as_deref().unwrap_or("");
    let asked = response_headers::config_map_ref(namespace, ingress.metadata.annotations.as_ref())?;
    let field = format!("metadata.annotations[{ANNOTATION:?}]");
    let served = match asked {
        // The annotation's own reading names a value that does not parse.
        Err(why) => Err(format!("{field}: {why}")),
        Ok((ns, _)) if tenant.is_some() && ns != namespace => Err(format!(
            "{field}: ConfigMap {ns}/... is not in the Ingress's namespace {namespace}"
        )),
        Ok((ns, name)) => fields(store, (&ns, &name)).map_err(|why| format!("{field}: {why}")),
    };
    Some(Arc::new(match served {
        Ok(fields) => CustomHeaders {
            fields,
            refused: None,
        },
        Err(why) => {
            problems.push(format!("{why}; its routes answer 503"));
            CustomHeaders::refused(why)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::tests::test_store;

    fn ingress(value: &str) -> Ingress {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop",
                         "annotations": {ANNOTATION: value}},
        }))
        .unwrap()
    }

    const CONFIG_MAPS: &str = "apiVersion: v1
kind: ConfigMap
metadata: {name: headers, namespace: shop}
data:
  X-Frame-Options: DENY
  Content-Security-Policy: default-src 'self'
---
apiVersion: v1
kind: ConfigMap
metadata: {name: bad, namespace: shop}
data: {Set-Cookie: s=1, X-A: '1'}
";

    #[test]
    fn the_config_maps_fields_are_served_in_name_order() {
        let store = test_store(CONFIG_MAPS);
        let mut problems = Vec::new();
        let got = of_ingress(&store, &ingress("headers"), Some("acme"), &mut problems).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(got.refused, None);
        let names: Vec<&str> = got.fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["content-security-policy", "x-frame-options"]);
        assert_eq!(got.fields[1].1, "DENY");
        let own = of_ingress(
            &store,
            &ingress("shop/headers"),
            Some("acme"),
            &mut problems,
        );
        assert_eq!(own.unwrap().fields.len(), 2);
        // Without the annotation: nothing.
        let plain: Ingress = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop"},
        }))
        .unwrap();
        assert!(of_ingress(&store, &plain, None, &mut problems).is_none());
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn what_cannot_be_served_is_refused_and_named() {
        let store = test_store(CONFIG_MAPS);
        let refused = |value: &str, tenant: Option<&str>| {
            let mut problems = Vec::new();
            let got = of_ingress(&store, &ingress(value), tenant, &mut problems).unwrap();
            assert!(got.fields.is_empty());
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].ends_with("; its routes answer 503"));
            got.refused.clone().unwrap()
        };
        let why = refused("bad", Some("acme"));
        assert!(
            why.contains("ConfigMap shop/bad data[\"Set-Cookie\"]: Set-Cookie may not be set"),
            "{why}"
        );
        let why = refused("missing", Some("acme"));
        assert!(why.contains("ConfigMap shop/missing not found"), "{why}");
        let why = refused("ops/headers", Some("acme"));
        assert!(why.contains("not in the Ingress's namespace shop"), "{why}");
        // An operator's Ingress may name another namespace (here missing).
        let why = refused("ops/headers", None);
        assert!(why.contains("ConfigMap ops/headers not found"), "{why}");
    }
}
