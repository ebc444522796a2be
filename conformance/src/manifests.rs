//! The Kubernetes objects a scenario's namespace directory holds, generated
//! the way the upstream harness creates them in a cluster
//! (`test/kubernetes/deployment.go`, `templates.go`):
//!
//! - the Ingress from the step's docstring, its namespace forced to the
//!   scenario's;
//! - for every backend Service the Ingress names (default backend and rules,
//!   first mention wins): a selector-less `Service` whose port is the Ingress's
//!   `port.number` (8080 when the Ingress names the port instead, the port then
//!   carrying that name) with `targetPort: 3000`;
//! - one `EndpointSlice` per running echo instance (each listens on its own
//!   loopback port, so each needs its own slice);
//! - the default `IngressClass` for teapot, and TLS Secrets on request.

use serde_json::json;
use serde_yaml::Value;

/// The Service port used when the Ingress gives none (or only a name).
pub const DEFAULT_SERVICE_PORT: i64 = 8080;
/// The echo container's port in the upstream harness (the Service's targetPort).
pub const TARGET_PORT: i64 = 3000;
/// Our IngressClass's name.
pub const INGRESS_CLASS: &str = "teapot";
/// Our controller name.
pub const CONTROLLER: &str = "teapot.dev/ingress-controller";

/// A backend Service an Ingress refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendService {
    /// Service name.
    pub name: String,
    /// `port.number` from the Ingress, if given and non-zero.
    pub port_number: Option<i64>,
    /// `port.name` from the Ingress, if given and non-empty.
    pub port_name: Option<String>,
}

impl BackendService {
    /// The Service's port number.
    pub fn service_port(&self) -> i64 {
        self.port_number.unwrap_or(DEFAULT_SERVICE_PORT)
    }

    /// The Service port's name (empty when unnamed): EndpointSlice ports carry it.
    pub fn service_port_name(&self) -> &str {
        self.port_name.as_deref().unwrap_or("")
    }
}

/// Builds an Ingress from a spec fragment ("an Ingress resource named N with this spec").
pub fn ingress_from_spec(name: &str, namespace: &str, spec_yaml: &str) -> Result<Value, String> {
    let spec: Value = serde_yaml::from_str(spec_yaml)
        .map_err(|e| format!("the Ingress spec is not valid YAML: {e}"))?;
    if !matches!(spec, Value::Mapping(_) | Value::Null) {
        return Err("the Ingress spec is not a YAML mapping".into());
    }
    let spec = if spec.is_null() {
        Value::Mapping(Default::default())
    } else {
        spec
    };
    let mut ingress = to_yaml(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": { "name": name, "namespace": namespace },
    }));
    set(&mut ingress, "spec", spec);
    Ok(ingress)
}

/// Parses a whole Ingress manifest and moves it into `namespace`.
/// Returns the Ingress and its name.
pub fn ingress_from_manifest(namespace: &str, manifest: &str) -> Result<(Value, String), String> {
    object_from_manifest("Ingress", namespace, manifest)
}

/// Parses a whole manifest of `kind` (an Ingress, a Secret, a ConfigMap)
/// and moves it into `namespace`. Returns the object and its name.
pub fn object_from_manifest(
    kind: &str,
    namespace: &str,
    manifest: &str,
) -> Result<(Value, String), String> {
    let mut object: Value = serde_yaml::from_str(manifest)
        .map_err(|e| format!("the {kind} manifest is not valid YAML: {e}"))?;
    if !object.is_mapping() {
        return Err(format!("the {kind} manifest is not a YAML mapping"));
    }
    let found = object.get("kind").and_then(Value::as_str).unwrap_or("");
    if found != kind {
        return Err(format!("the manifest's kind is {found:?}, not {kind:?}"));
    }
    let name = object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("the {kind} manifest has no metadata.name"))?
        .to_string();
    let metadata = object
        .get_mut("metadata")
        .ok_or_else(|| format!("the {kind} manifest has no metadata"))?;
    if !metadata.is_mapping() {
        return Err(format!("the {kind} manifest's metadata is not a mapping"));
    }
    set(metadata, "namespace", Value::String(namespace.to_string()));
    Ok((object, name))
}

/// Every backend Service the Ingress names, in order of first mention
/// (default backend first, then rules in order), without duplicates.
/// Resource backends (`backend.resource`) are ignored, as upstream.
pub fn backend_services(ingress: &Value) -> Vec<BackendService> {
    let mut out: Vec<BackendService> = Vec::new();
    let spec = ingress.get("spec");
    let mut add = |backend: Option<&Value>| {
        let Some(service) = backend.and_then(|b| b.get("service")) else {
            return;
        };
        let Some(name) = service.get("name").and_then(Value::as_str) else {
            return;
        };
        if name.is_empty() || out.iter().any(|b| b.name == name) {
            return;
        }
        let port = service.get("port");
        out.push(BackendService {
            name: name.to_string(),
            port_number: port
                .and_then(|p| p.get("number"))
                .and_then(Value::as_i64)
                .filter(|n| *n != 0),
            port_name: port
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map(str::to_string),
        });
    };
    add(spec.and_then(|s| s.get("defaultBackend")));
    let rules = spec
        .and_then(|s| s.get("rules"))
        .and_then(Value::as_sequence);
    for rule in rules.into_iter().flatten() {
        let paths = rule
            .get("http")
            .and_then(|h| h.get("paths"))
            .and_then(Value::as_sequence);
        for path in paths.into_iter().flatten() {
            add(path.get("backend"));
        }
    }
    out
}

/// The IngressClass that makes teapot the cluster's default.
pub fn ingress_class_yaml() -> String {
    yaml(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": {
            "name": INGRESS_CLASS,
            "annotations": { "ingressclass.kubernetes.io/is-default-class": "true" },
        },
        "spec": { "controller": CONTROLLER },
    }))
}

/// The selector-less Service for a backend.
pub fn service_yaml(namespace: &str, backend: &BackendService) -> String {
    let mut port = json!({
        "port": backend.service_port(),
        "targetPort": TARGET_PORT,
        "protocol": "TCP",
    });
    if let Some(name) = &backend.port_name {
        port["name"] = json!(name);
    }
    yaml(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": backend.name, "namespace": namespace },
        "spec": { "type": "ClusterIP", "ports": [port] },
    }))
}

/// One EndpointSlice holding one ready loopback endpoint (`echo_port`), or
/// none when `echo_port` is `None`.
pub fn endpoint_slice_yaml(
    namespace: &str,
    slice_name: &str,
    backend: &BackendService,
    echo_port: Option<u16>,
) -> String {
    let endpoints = match echo_port {
        Some(_) => json!([{ "addresses": ["127.0.0.1"], "conditions": { "ready": true } }]),
        None => json!([]),
    };
    let ports = match echo_port {
        Some(port) => json!([{
            "name": backend.service_port_name(),
            "port": port,
            "protocol": "TCP",
        }]),
        None => json!([]),
    };
    yaml(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": slice_name,
            "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": backend.name,
                "endpointslice.kubernetes.io/managed-by": "conformance.teapot.dev",
            },
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports,
    }))
}

/// Serialises any YAML value as one document.
pub fn to_string(value: &Value) -> String {
    serde_yaml::to_string(value).unwrap_or_else(|e| panic!("serialising YAML: {e}"))
}

fn yaml(value: serde_json::Value) -> String {
    to_string(&to_yaml(value))
}

fn to_yaml(value: serde_json::Value) -> Value {
    serde_yaml::to_value(value).unwrap_or_else(|e| panic!("converting to YAML: {e}"))
}

fn set(map: &mut Value, key: &str, value: Value) {
    if let Value::Mapping(m) = map {
        m.insert(Value::String(key.to_string()), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: somewhere-else
spec:
  ingressClassName: other
  defaultBackend:
    service:
      name: fallback
      port:
        number: 9090
  rules:
    - host: shop.example
      http:
        paths:
          - path: /cart
            pathType: Prefix
            backend:
              service:
                name: cart
                port:
                  name: web
          - path: /cart/x
            pathType: Exact
            backend:
              service:
                name: cart
                port:
                  number: 1234
    - host: "*.img.example"
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: images
                port:
                  number: 80
    - host: no-http.example
          "#;

    fn parse(s: &str) -> Value {
        serde_yaml::from_str(s).unwrap()
    }

    #[test]
    fn manifest_namespace_and_backends() {
        let (ingress, name) = ingress_from_manifest("conf-abc", MANIFEST).unwrap();
        assert_eq!(name, "shop");
        let back = parse(&to_string(&ingress));
        assert_eq!(back["metadata"]["namespace"].as_str(), Some("conf-abc"));
        assert_eq!(back["spec"]["ingressClassName"].as_str(), Some("other"));
        assert_eq!(
            backend_services(&back),
            vec![
                BackendService {
                    name: "fallback".into(),
                    port_number: Some(9090),
                    port_name: None
                },
                BackendService {
                    name: "cart".into(),
                    port_number: None,
                    port_name: Some("web".into())
                },
                BackendService {
                    name: "images".into(),
                    port_number: Some(80),
                    port_name: None
                },
            ]
        );
        assert!(ingress_from_manifest("ns", "kind: Service\nmetadata: {name: x}").is_err());
        assert!(ingress_from_manifest("ns", "kind: Ingress\nmetadata: {}").is_err());
        assert!(ingress_from_manifest("ns", "[1, 2").is_err());
    }

    #[test]
    fn other_objects_move_into_the_namespace() {
        let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: htpasswd\n  namespace: elsewhere\nstringData:\n  auth: \"a:b\"\n";
        let (object, name) = object_from_manifest("Secret", "conf-q", secret).unwrap();
        assert_eq!(name, "htpasswd");
        let back = parse(&to_string(&object));
        assert_eq!(back["metadata"]["namespace"].as_str(), Some("conf-q"));
        assert_eq!(back["stringData"]["auth"].as_str(), Some("a:b"));
        let err = object_from_manifest("ConfigMap", "conf-q", secret).unwrap_err();
        assert!(err.contains("not \"ConfigMap\""), "{err}");
        assert!(object_from_manifest("ConfigMap", "ns", "kind: ConfigMap\nmetadata: 3").is_err());
    }

    #[test]
    fn spec_is_wrapped() {
        let spec = "rules:\n- host: a.example\n  http:\n    paths:\n    - path: /\n      pathType: Prefix\n      backend:\n        service:\n          name: svc-a\n          port:\n            number: 7000\n";
        let ingress = ingress_from_spec("my-ing", "conf-x", spec).unwrap();
        let back = parse(&to_string(&ingress));
        assert_eq!(back["apiVersion"].as_str(), Some("networking.k8s.io/v1"));
        assert_eq!(back["kind"].as_str(), Some("Ingress"));
        assert_eq!(back["metadata"]["name"].as_str(), Some("my-ing"));
        assert_eq!(back["metadata"]["namespace"].as_str(), Some("conf-x"));
        assert_eq!(back["spec"]["rules"][0]["host"].as_str(), Some("a.example"));
        assert_eq!(
            backend_services(&back),
            vec![BackendService {
                name: "svc-a".into(),
                port_number: Some(7000),
                port_name: None
            }]
        );
        assert!(ingress_from_spec("x", "y", "- a\n- b").is_err());
    }

    #[test]
    fn service_and_slices() {
        let named = BackendService {
            name: "cart".into(),
            port_number: None,
            port_name: Some("web".into()),
        };
        let svc = parse(&service_yaml("conf-1", &named));
        assert_eq!(svc["kind"].as_str(), Some("Service"));
        assert_eq!(svc["metadata"]["name"].as_str(), Some("cart"));
        assert_eq!(svc["metadata"]["namespace"].as_str(), Some("conf-1"));
        assert!(svc["spec"].get("selector").is_none());
        let port = &svc["spec"]["ports"][0];
        assert_eq!(port["port"].as_i64(), Some(8080));
        assert_eq!(port["name"].as_str(), Some("web"));
        assert_eq!(port["targetPort"].as_i64(), Some(3000));

        let numbered = BackendService {
            name: "images".into(),
            port_number: Some(80),
            port_name: None,
        };
        let svc = parse(&service_yaml("conf-1", &numbered));
        let port = &svc["spec"]["ports"][0];
        assert_eq!(port["port"].as_i64(), Some(80));
        assert!(port.get("name").is_none());

        let slice = parse(&endpoint_slice_yaml(
            "conf-1",
            "cart-0",
            &named,
            Some(41234),
        ));
        assert_eq!(slice["apiVersion"].as_str(), Some("discovery.k8s.io/v1"));
        assert_eq!(slice["kind"].as_str(), Some("EndpointSlice"));
        assert_eq!(slice["metadata"]["name"].as_str(), Some("cart-0"));
        assert_eq!(
            slice["metadata"]["labels"]["kubernetes.io/service-name"].as_str(),
            Some("cart")
        );
        assert_eq!(slice["addressType"].as_str(), Some("IPv4"));
        assert_eq!(
            slice["endpoints"][0]["addresses"][0].as_str(),
            Some("127.0.0.1")
        );
        assert_eq!(
            slice["endpoints"][0]["conditions"]["ready"].as_bool(),
            Some(true)
        );
        assert_eq!(slice["ports"][0]["name"].as_str(), Some("web"));
        assert_eq!(slice["ports"][0]["port"].as_i64(), Some(41234));
        assert_eq!(slice["ports"][0]["protocol"].as_str(), Some("TCP"));

        let slice = parse(&endpoint_slice_yaml(
            "conf-1",
            "images-3",
            &numbered,
            Some(5),
        ));
        assert_eq!(slice["ports"][0]["name"].as_str(), Some(""));

        let empty = parse(&endpoint_slice_yaml("conf-1", "images-3", &numbered, None));
        assert_eq!(empty["endpoints"].as_sequence().map(Vec::len), Some(0));
    }

    #[test]
    fn ingress_class() {
        let class = parse(&ingress_class_yaml());
        assert_eq!(class["kind"].as_str(), Some("IngressClass"));
        assert_eq!(class["metadata"]["name"].as_str(), Some("teapot"));
        assert_eq!(
            class["metadata"]["annotations"]["ingressclass.kubernetes.io/is-default-class"]
                .as_str(),
            Some("true")
        );
        assert_eq!(
            class["spec"]["controller"].as_str(),
            Some("teapot.dev/ingress-controller")
        );
    }
}
