//! The ConfigMap an Ingress's `custom-headers` names, on its way to the
//! LB cluster: mirrored with the Ingress (and again when it changes), its
//! response fields alone, under a name of its own so a ConfigMap that a
//! BackendTLSPolicy also names (its `ca.crt`) keeps two copies that never
//! overwrite each other. A ConfigMap past the bounds of
//! teapot_api::response_headers is not copied: the agent names the entry
//! on the tenant's Ingress, and the webhook would refuse the copy the
//! same way.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;
use kube::ResourceExt;
use teapot_api::response_headers;

use crate::Error;
use crate::mirror::lb_meta;
// How the annotation names the ConfigMap and its copy is the
// annotations' own (crate::nginx_refs), which rewrites the reference.
pub use crate::nginx_refs::{
    CUSTOM_HEADERS as ANNOTATION_NAME, TenantRef, headers_config_map as referenced,
    mirrored_headers_config_map_name as mirrored_name,
};

/// The same for an Ingress, as the set the watch and the GC compare.
pub fn referenced_config_maps(ingress: &Ingress) -> BTreeSet<TenantRef> {
    let namespace = ingress.namespace().unwrap_or_default();
    referenced(&namespace, ingress.annotations())
        .into_iter()
        .collect()
}

/// The LB copy of a tenant ConfigMap `custom-headers` names: its response
/// fields, checked against the bounds first (a refusal names the
/// ConfigMap and the entry); a `ca.crt` and `binaryData` stay behind.
pub fn lb_config_map(config_map: &ConfigMap, lb_namespace: &str) -> Result<ConfigMap, Error> {
    let namespace = config_map.namespace().unwrap_or_default();
    let name = config_map.name_any();
    let data = config_map.data.iter().flatten();
    let fields = response_headers::parse(data.map(|(k, v)| (k.as_str(), v.as_str()))).map_err(
        |refusal| Error::Invalid {
            object: format!("ConfigMap {namespace}/{name}"),
            field: refusal.field,
            message: refusal.message,
        },
    )?;
    Ok(ConfigMap {
        metadata: lb_meta(
            mirrored_name(&namespace, &name),
            lb_namespace,
            &namespace,
            &name,
            config_map.metadata.uid.as_ref(),
            BTreeMap::new(),
        ),
        data: Some(fields.into_iter().collect()),
        ..ConfigMap::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_api::annotations::NGINX_PREFIX;

    fn annotations(value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(format!("{NGINX_PREFIX}{ANNOTATION_NAME}"), value.into())])
    }

    fn config_map(data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("headers".into()),
                namespace: Some("shop".into()),
                uid: Some("u-1".into()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn the_config_map_is_named_and_renamed_to_its_mirror() {
        let own = ("shop".to_string(), "headers".to_string());
        assert_eq!(
            referenced("shop", &annotations("headers")),
            Some(own.clone())
        );
        assert_eq!(referenced("shop", &annotations("shop/headers")), Some(own));
        assert_eq!(referenced("shop", &annotations("a/b/c")), None);
        assert_eq!(referenced("shop", &BTreeMap::new()), None);
        let travelled =
            crate::nginx_refs::travelling("shop", "tenant-acme", &annotations("headers"));
        assert_eq!(
            travelled[&format!("{NGINX_PREFIX}{ANNOTATION_NAME}")],
            format!("tenant-acme/{}", mirrored_name("shop", "headers"))
        );
        assert_ne!(
            mirrored_name("shop", "headers"),
            crate::gateway_mirror::mirrored_config_map_name("shop", "headers")
        );
    }

    #[test]
    fn the_copy_holds_the_fields_alone_and_a_hostile_one_is_named() {
        let copy = lb_config_map(
            &config_map(&[("X-Frame-Options", "DENY"), ("ca.crt", "pem")]),
            "tenant-acme",
        )
        .unwrap();
        assert_eq!(copy.name_any(), mirrored_name("shop", "headers"));
        assert_eq!(copy.namespace().as_deref(), Some("tenant-acme"));
        let data = copy.data.unwrap();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["X-Frame-Options"]);
        let refused = |data: &[(&str, &str)]| match lb_config_map(&config_map(data), "lb") {
            Err(Error::Invalid { object, field, .. }) => (object, field),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refused(&[("Set-Cookie", "s=1")]),
            (
                "ConfigMap shop/headers".to_string(),
                "data[\"Set-Cookie\"]".to_string()
            )
        );
        let names: Vec<String> = (0..33).map(|i| format!("X-{i}")).collect();
        let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
        assert_eq!(refused(&many).1, "data");
    }
}
