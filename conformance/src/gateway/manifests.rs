//! A test's objects as the upstream harness applies them
//! (`conformance/utils/kubernetes/apply.go`, `suite.go`), turned into what
//! `teapot proxy --manifests` reads.
//!
//! - Every document of the base manifests and of the test's manifests, in
//!   that order, with the harness's substitutions: a Gateway's
//!   `spec.gatewayClassName` becomes the runner's class (`teapot`), a
//!   GatewayClass's `spec.controllerName` becomes teapot's controller, and
//!   a Gateway's `spec.addresses` is overlaid as the harness does with
//!   the runner's usable and unusable addresses ([`NetworkAddresses`]: the
//!   placeholders `PLACEHOLDER_USABLE_ADDRS` / `PLACEHOLDER_UNUSABLE_ADDRS`
//!   become them, `test/fake-invalid-type` addresses stay).
//! - Kinds that only make sense with a cluster ([`DROPPED_KINDS`]) are not
//!   written: Deployments become echo processes ([`Workload`]), the rest
//!   have no reader in teapot. Namespaces are written: their labels decide
//!   `allowedRoutes.namespaces.from: Selector`; ConfigMaps too (teapot
//!   reads a `ca.crt` a BackendTLSPolicy names).
//! - The runner adds GatewayClass `teapot`, the TLS Secrets the harness
//!   creates for Gateway listeners ([`HARNESS_SECRETS`]), the client
//!   certificate authorities and client certificates of frontend
//!   validation ([`CLIENT_CERTIFICATE_AUTHORITIES`]), the backend
//!   certificate authorities of the BackendTLSPolicy tests
//!   ([`BACKEND_TLS_HOSTS`]), and one EndpointSlice per echo process.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_yaml::{Mapping, Value};

/// The GatewayClass every Gateway is given.
pub const GATEWAY_CLASS: &str = "teapot";
/// teapot's Gateway controller name.
pub const CONTROLLER_NAME: &str = "teapot.dev/gateway-controller";

/// Kinds not written to the manifests directory: workloads (replaced by
/// echo processes and EndpointSlices) and cluster objects teapot does not
/// read.
pub const DROPPED_KINDS: &[&str] = &[
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "Pod",
    "Job",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
];

/// The serving certificates `suite.go` creates before any test (namespace,
/// name, DNS names), self-signed.
pub const HARNESS_SECRETS: &[(&str, &str, &[&str])] = &[
    ("gateway-conformance-web-backend", "certificate", &["*"]),
    (
        "gateway-conformance-infra",
        "tls-validity-checks-certificate",
        &["*", "*.org", "*.wildcard.org"],
    ),
];

/// The client certificate authorities `suite.go` creates for frontend
/// client-certificate validation (namespace, CA ConfigMap, the Secret of a
/// client certificate that CA signs): one CA for a Gateway's default
/// validation, one for its per-port validation, each signing its own
/// client certificate, so either certificate is refused where the other
/// CA is configured.
pub const CLIENT_CERTIFICATE_AUTHORITIES: &[(&str, &str, &str)] = &[
    (
        "gateway-conformance-infra",
        "tls-validity-checks-ca-certificate",
        "tls-validity-checks-client-certificate",
    ),
    (
        "gateway-conformance-infra",
        "tls-validity-checks-per-port-ca-certificate",
        "tls-validity-checks-per-port-client-certificate",
    ),
];

/// The serving certificates `suite.go` signs with the CA of ConfigMap
/// `tls-checks-ca-certificate` (namespace, name, DNS names and URIs): the
/// certificate the TLS echo pods serve, the TCP echo's passthrough
/// certificate, and the one a TLSRoute in Terminate mode is served with.
pub const CA_SIGNED_SECRETS: &[(&str, &str, &[&str])] = &[
    (
        "gateway-conformance-infra",
        "tls-checks-certificate",
        BACKEND_TLS_HOSTS,
    ),
    (
        "gateway-conformance-infra",
        "tls-passthrough-checks-certificate",
        &["abc.example.com"],
    ),
    (
        "gateway-conformance-app-backend",
        "tls-passthrough-checks-certificate",
        &["abc.example.com"],
    ),
    (
        "gateway-conformance-infra",
        "tls-terminate-checks-certificate",
        &["tls.example.com"],
    ),
];

/// The names of the backend certificate `suite.go` signs with the CA of
/// ConfigMap `tls-checks-ca-certificate` (Secret `tls-checks-certificate`,
/// which echo-basic serves on its TLS port); ConfigMap
/// `mismatch-ca-certificate` holds another CA.
pub const BACKEND_TLS_HOSTS: &[&str] = &[
    "abc.example.com",
    "spiffe://abc.example.com/test-identity",
    "other.example.com",
];
/// The namespace of the backend certificate and both CA ConfigMaps.
pub const BACKEND_TLS_NAMESPACE: &str = "gateway-conformance-infra";
/// The CA ConfigMap that verifies the backend certificate, and the one
/// that does not.
pub const BACKEND_TLS_CA: &str = "tls-checks-ca-certificate";
pub const BACKEND_TLS_MISMATCH_CA: &str = "mismatch-ca-certificate";
/// echo-basic's TLS port (`TLS_SERVER_CERT`): a Service whose
/// `targetPort` is this one reaches the echo's TLS listener.
pub const ECHO_TLS_PORT: i64 = 8443;

/// Why the manifests could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: document {index} is not YAML: {source}")]
    Yaml {
        path: String,
        index: usize,
        source: serde_yaml::Error,
    },
    #[error("{path}: document {index} ({what}): {message}")]
    Object {
        path: String,
        index: usize,
        what: String,
        message: String,
    },
}

/// One object to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub value: Value,
}

/// A Deployment's pods: the echo processes to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub namespace: String,
    /// The Deployment's name: the pods' name prefix, which `Backend`
    /// expectations compare with.
    pub name: String,
    pub replicas: usize,
    /// `spec.template.metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// The first container's env names that change echo-basic's mode
    /// (`GRPC_ECHO_SERVER`, `TCP_ECHO_SERVER`, `UDP_ECHO_SERVER`,
    /// `TLS_SERVER_CERT`, `TLS_CLIENT_CACERTS`).
    pub modes: Vec<String>,
    /// The Secret the pod mounts (`volumes[].secret.secretName`): with
    /// `TLS_SERVER_CERT`, the certificate echo-basic serves.
    pub tls_secret: Option<String>,
    /// The ConfigMap the pod mounts (`volumes[].configMap.name`): with
    /// `TLS_CLIENT_CACERTS`, the CAs its TLS port verifies clients with.
    pub config_map: Option<String>,
}

/// The env names that select echo-basic's mode.
pub const ECHO_MODES: &[&str] = &[
    "GRPC_ECHO_SERVER",
    "TCP_ECHO_SERVER",
    "UDP_ECHO_SERVER",
    "TLS_SERVER_CERT",
    "TLS_CLIENT_CACERTS",
];

/// A Service port, as its EndpointSlice must repeat it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default)]
    pub app_protocol: Option<String>,
    #[serde(default)]
    pub port: Option<i64>,
    /// A number (names are not resolved: echo pods have one port each).
    #[serde(default)]
    pub target_port: Option<serde_yaml::Value>,
}

impl ServicePort {
    /// Whether the port reaches echo-basic's TLS listener.
    pub fn is_echo_tls(&self) -> bool {
        self.target_port.as_ref().and_then(Value::as_i64) == Some(ECHO_TLS_PORT)
    }
}

/// A Service and the Deployment whose pods it selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub namespace: String,
    pub service: String,
    pub ports: Vec<ServicePort>,
    pub workload: Workload,
}

/// Everything a test run writes and starts.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    /// Objects to write, in manifest order.
    pub objects: Vec<Object>,
    /// Kinds not written, with how many of each.
    pub dropped: BTreeMap<String, usize>,
    /// The objects not written (of those kinds), as the manifests hold
    /// them: what a test may read from the cluster besides teapot's input.
    pub unwritten: Vec<Object>,
    /// Services backed by a Deployment.
    pub backends: Vec<Backend>,
}

/// The addresses upstream's suite is given for
/// `PLACEHOLDER_USABLE_ADDRS` and `PLACEHOLDER_UNUSABLE_ADDRS`
/// (`suite.UsableNetworkAddresses`, `suite.UnusableNetworkAddresses`), as
/// IP addresses (`type: IPAddress`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkAddresses {
    pub usable: Vec<String>,
    pub unusable: Vec<String>,
}

impl NetworkAddresses {
    /// For the proxy's L4 pool `cidr`: its last address usable (the
    /// allocator gives Gateways the first free ones, so a test's other
    /// Gateways leave it free), and a documentation address (RFC 5737)
    /// outside it unusable. An empty or unreadable pool: no usable address.
    pub fn for_pool(cidr: &str) -> NetworkAddresses {
        let outside = ["192.0.2.1", "198.51.100.1"];
        let Some((net, bits)) = parse_cidr(cidr) else {
            return NetworkAddresses {
                usable: Vec::new(),
                unusable: vec![outside[0].to_string()],
            };
        };
        let contains = |ip: std::net::IpAddr| prefix_of(ip, bits) == prefix_of(net, bits);
        let last = match net {
            std::net::IpAddr::V4(v4) => {
                let host = u32::MAX.checked_shr(bits).unwrap_or(0);
                let last = (u32::from(v4) | host).saturating_sub(u32::from(bits < 31 && host > 0));
                std::net::IpAddr::V4(last.into())
            }
            std::net::IpAddr::V6(v6) => {
                let host = u128::MAX.checked_shr(bits).unwrap_or(0);
                std::net::IpAddr::V6((u128::from(v6) | host).into())
            }
        };
        NetworkAddresses {
            usable: vec![last.to_string()],
            unusable: outside
                .iter()
                .filter(|a| !contains(a.parse().expect("a literal address")))
                .take(1)
                .map(|a| (*a).to_string())
                .collect(),
        }
    }
}

/// `a.b.c.d/n` or `x::/n`: the address and the prefix length.
fn parse_cidr(cidr: &str) -> Option<(std::net::IpAddr, u32)> {
    let (addr, bits) = cidr.split_once('/')?;
    let addr: std::net::IpAddr = addr.parse().ok()?;
    let bits: u32 = bits.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((addr, bits))
}

/// The first `bits` bits of `ip` (and its family).
fn prefix_of(ip: std::net::IpAddr, bits: u32) -> (bool, u128) {
    match ip {
        std::net::IpAddr::V4(v4) => (
            true,
            u128::from(u32::from(v4) & !u32::MAX.checked_shr(bits).unwrap_or(0)),
        ),
        std::net::IpAddr::V6(v6) => (
            false,
            u128::from(v6) & !u128::MAX.checked_shr(bits).unwrap_or(0),
        ),
    }
}

/// Reads the base manifests and the test's, applies the substitutions and
/// pairs Services with Deployments.
pub fn prepare(files: &[&Path], addresses: &NetworkAddresses) -> Result<Prepared, ManifestError> {
    let mut prepared = Prepared::default();
    let mut workloads = Vec::new();
    for file in files {
        let path = file.display().to_string();
        let text = std::fs::read_to_string(file).map_err(|source| ManifestError::Read {
            path: path.clone(),
            source,
        })?;
        for (index, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let value = Value::deserialize(document).map_err(|source| ManifestError::Yaml {
                path: path.clone(),
                index,
                source,
            })?;
            if value.is_null() {
                continue;
            }
            let object = substitute(value, addresses).map_err(|message| ManifestError::Object {
                path: path.clone(),
                index,
                what: "object".into(),
                message,
            })?;
            if object.kind == "Deployment" {
                let workload = workload(&object).map_err(|message| ManifestError::Object {
                    path: path.clone(),
                    index,
                    what: format!("Deployment {}/{}", object.namespace, object.name),
                    message,
                })?;
                workloads.push(workload);
            }
            if DROPPED_KINDS.contains(&object.kind.as_str()) {
                *prepared.dropped.entry(object.kind.clone()).or_default() += 1;
                prepared.unwritten.push(object);
                continue;
            }
            prepared.objects.push(object);
        }
    }
    for object in prepared.objects.iter().filter(|o| o.kind == "Service") {
        if let Some(backend) = backend(object, &workloads) {
            prepared.backends.push(backend);
        }
    }
    Ok(prepared)
}

/// The harness's substitutions on one object.
pub fn substitute(mut value: Value, addresses: &NetworkAddresses) -> Result<Object, String> {
    let kind = text(&value, &["kind"]);
    if kind.is_empty() {
        return Err("no kind".into());
    }
    let name = text(&value, &["metadata", "name"]);
    let namespace = text(&value, &["metadata", "namespace"]);
    match kind.as_str() {
        "GatewayClass" => {
            spec_mut(&mut value)?.insert("controllerName".into(), CONTROLLER_NAME.into());
        }
        "Gateway" => {
            let spec = spec_mut(&mut value)?;
            spec.insert("gatewayClassName".into(), GATEWAY_CLASS.into());
            overlay_addresses(spec, addresses);
        }
        _ => {}
    }
    Ok(Object {
        kind,
        namespace,
        name,
        value,
    })
}

/// `prepareGateway`: with addresses given, keep the special invalid-type
/// ones and replace the placeholders by the configured addresses, in the
/// order they are written.
fn overlay_addresses(spec: &mut Mapping, configured: &NetworkAddresses) {
    let Some(Value::Sequence(addresses)) = spec.get("addresses") else {
        return;
    };
    if addresses.is_empty() {
        return;
    }
    let ip = |value: &String| {
        let mut address = Mapping::new();
        address.insert("type".into(), "IPAddress".into());
        address.insert("value".into(), value.as_str().into());
        Value::Mapping(address)
    };
    let mut kept = Vec::new();
    for address in addresses {
        match text(address, &["value"]).as_str() {
            "PLACEHOLDER_USABLE_ADDRS" => kept.extend(configured.usable.iter().map(ip)),
            "PLACEHOLDER_UNUSABLE_ADDRS" => kept.extend(configured.unusable.iter().map(ip)),
            _ if text(address, &["type"]) == "test/fake-invalid-type" => {
                kept.push(address.clone());
            }
            _ => {}
        }
    }
    spec.insert("addresses".into(), Value::Sequence(kept));
}

fn spec_mut(value: &mut Value) -> Result<&mut Mapping, String> {
    let Value::Mapping(object) = value else {
        return Err("not a mapping".into());
    };
    let spec = object
        .entry("spec".into())
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    match spec {
        Value::Mapping(spec) => Ok(spec),
        _ => Err("spec is not a mapping".into()),
    }
}

fn workload(object: &Object) -> Result<Workload, String> {
    let replicas = match object.value.get("spec").and_then(|s| s.get("replicas")) {
        None | Some(Value::Null) => 1,
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or("spec.replicas is not a count")?,
    };
    let labels = string_map(
        object
            .value
            .get("spec")
            .and_then(|s| s.get("template"))
            .and_then(|t| t.get("metadata"))
            .and_then(|m| m.get("labels")),
    );
    let container = object
        .value
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("spec"))
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_sequence)
        .and_then(|c| c.first());
    let mut modes: Vec<String> = container
        .and_then(|c| c.get("env"))
        .and_then(Value::as_sequence)
        .map(|env| {
            env.iter()
                .map(|e| text(e, &["name"]))
                .filter(|n| ECHO_MODES.contains(&n.as_str()))
                .collect()
        })
        .unwrap_or_default();
    // CoreDNS (UDPRoute's backend) is no echo-basic: the runner's DNS server
    // plays it (`runner::code::dns`).
    if container.is_some_and(|c| text(c, &["image"]).contains("/coredns/coredns")) {
        modes.push("COREDNS".to_string());
    }
    let tls_secret = object
        .value
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("spec"))
        .and_then(|s| s.get("volumes"))
        .and_then(Value::as_sequence)
        .and_then(|volumes| {
            volumes
                .iter()
                .map(|v| text(v, &["secret", "secretName"]))
                .find(|n| !n.is_empty())
        });
    let config_map = object
        .value
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("spec"))
        .and_then(|s| s.get("volumes"))
        .and_then(Value::as_sequence)
        .and_then(|volumes| {
            volumes
                .iter()
                .map(|v| text(v, &["configMap", "name"]))
                .find(|n| !n.is_empty())
        });
    Ok(Workload {
        namespace: object.namespace.clone(),
        name: object.name.clone(),
        replicas,
        labels,
        modes,
        tls_secret,
        config_map,
    })
}

/// The Service's Deployment: same namespace, selector within its pod labels.
fn backend(service: &Object, workloads: &[Workload]) -> Option<Backend> {
    let selector = string_map(service.value.get("spec").and_then(|s| s.get("selector")));
    if selector.is_empty() {
        return None;
    }
    let workload = workloads.iter().find(|w| {
        w.namespace == service.namespace
            && selector
                .iter()
                .all(|(k, v)| w.labels.get(k).is_some_and(|l| l == v))
    })?;
    let ports = service
        .value
        .get("spec")
        .and_then(|s| s.get("ports"))
        .and_then(Value::as_sequence)
        .map(|ports| {
            ports
                .iter()
                .filter_map(|p| serde_yaml::from_value(p.clone()).ok())
                .collect()
        })
        .unwrap_or_default();
    Some(Backend {
        namespace: service.namespace.clone(),
        service: service.name.clone(),
        ports,
        workload: workload.clone(),
    })
}

/// GatewayClass `teapot`.
pub fn gateway_class() -> Value {
    serde_yaml::from_str(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata:\n  name: {GATEWAY_CLASS}\nspec:\n  controllerName: {CONTROLLER_NAME}\n"
    ))
    .unwrap_or(Value::Null)
}

/// The EndpointSlice of one echo process: its address `ip`, every port of
/// its Service, each at the echo's port `echo_port` gives for it (echo-basic answers
/// HTTP/1.1 and h2c on one socket, TLS on another), `appProtocol`
/// repeated from the Service port.
pub fn endpoint_slice(
    backend: &Backend,
    slice_name: &str,
    ip: std::net::IpAddr,
    echo_port: impl Fn(&ServicePort) -> u16,
) -> Value {
    let mut ports = Vec::new();
    for port in &backend.ports {
        let mut entry = Mapping::new();
        entry.insert("name".into(), port.name.clone().unwrap_or_default().into());
        entry.insert("port".into(), i64::from(echo_port(port)).into());
        entry.insert(
            "protocol".into(),
            port.protocol.clone().unwrap_or_else(|| "TCP".into()).into(),
        );
        if let Some(app) = &port.app_protocol {
            entry.insert("appProtocol".into(), app.clone().into());
        }
        ports.push(Value::Mapping(entry));
    }
    let mut value: Value = serde_yaml::from_str(&format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {slice_name}\n  namespace: {}\n  labels:\n    kubernetes.io/service-name: {}\naddressType: {}\nendpoints:\n- addresses: [\"{ip}\"]\n  conditions:\n    ready: true\n",
        backend.namespace,
        backend.service,
        if ip.is_ipv4() { "IPv4" } else { "IPv6" }
    ))
    .unwrap_or(Value::Null);
    if let Value::Mapping(map) = &mut value {
        map.insert("ports".into(), Value::Sequence(ports));
    }
    value
}

fn text(value: &Value, path: &[&str]) -> String {
    let mut current = value;
    for key in path {
        match current.get(*key) {
            Some(next) => current = next,
            None => return String::new(),
        }
    }
    match current {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_mapping)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), text(v, &[]))))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: infra
  labels: {gateway-conformance: infra}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: "{GATEWAY_CLASS_NAME}"
  addresses:
  - value: PLACEHOLDER_USABLE_ADDRS
  - type: test/fake-invalid-type
    value: "x"
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: v1
kind: Service
metadata: {name: backend-v1, namespace: infra}
spec:
  selector: {app: backend-v1}
  ports:
  - {name: first-port, protocol: TCP, port: 8080, targetPort: 3000}
  - {name: second-port, protocol: TCP, appProtocol: kubernetes.io/h2c, port: 8081, targetPort: 3001}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: backend-v1, namespace: infra, labels: {app: backend-v1}}
spec:
  replicas: 2
  selector: {matchLabels: {app: backend-v1}}
  template:
    metadata: {labels: {app: backend-v1, extra: "yes"}}
    spec:
      containers:
      - name: c
        env: [{name: POD_NAME}, {name: GRPC_ECHO_SERVER, value: "1"}]
---
apiVersion: v1
kind: Service
metadata: {name: nobody-behind, namespace: infra}
spec:
  selector: {app: missing}
  ports: [{port: 80}]
"#;

    const TEST: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: own-class}
spec: {controllerName: example.net/whatever}
---
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: backend-v1, port: 8080}]}]
"#;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn substitutions_drops_and_backends() {
        let dir = tempfile::tempdir().unwrap();
        let base = write(dir.path(), "base.yaml", BASE);
        let test = write(dir.path(), "test.yaml", TEST);
        let prepared = prepare(&[&base, &test], &NetworkAddresses::default()).unwrap();
        let kinds: Vec<&str> = prepared.objects.iter().map(|o| o.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "Gateway",
                "Service",
                "Service",
                "GatewayClass",
                "HTTPRoute"
            ]
        );
        assert_eq!(
            prepared.dropped,
            BTreeMap::from([("Deployment".to_string(), 1)])
        );
        assert_eq!(
            prepared.objects[0].value["metadata"]["labels"]["gateway-conformance"],
            "infra"
        );
        let gateway = &prepared.objects[1].value;
        assert_eq!(gateway["spec"]["gatewayClassName"], "teapot");
        assert_eq!(
            gateway["spec"]["addresses"],
            serde_yaml::from_str::<Value>("[{type: test/fake-invalid-type, value: x}]").unwrap()
        );
        assert_eq!(gateway["spec"]["listeners"][0]["port"], 80);
        let class = &prepared.objects[4].value;
        assert_eq!(class["spec"]["controllerName"], CONTROLLER_NAME);
        // The route is written untouched.
        assert_eq!(
            prepared.objects[5].value,
            serde_yaml::from_str::<Value>(TEST.split("---").nth(2).unwrap()).unwrap()
        );

        assert_eq!(prepared.backends.len(), 1, "{:?}", prepared.backends);
        let backend = &prepared.backends[0];
        assert_eq!(backend.service, "backend-v1");
        assert_eq!(backend.workload.replicas, 2);
        assert_eq!(backend.workload.modes, vec!["GRPC_ECHO_SERVER"]);
        assert_eq!(
            backend.ports[1].app_protocol.as_deref(),
            Some("kubernetes.io/h2c")
        );

        let slice = endpoint_slice(backend, "backend-v1-0", [127, 128, 0, 7].into(), |_| 4242);
        assert_eq!(
            slice["metadata"]["labels"]["kubernetes.io/service-name"],
            "backend-v1"
        );
        assert_eq!(slice["metadata"]["namespace"], "infra");
        assert_eq!(slice["endpoints"][0]["addresses"][0], "127.128.0.7");
        assert_eq!(slice["ports"][0]["name"], "first-port");
        assert_eq!(slice["ports"][0]["port"], 4242);
        assert!(slice["ports"][0].get("appProtocol").is_none());
        assert_eq!(slice["ports"][1]["appProtocol"], "kubernetes.io/h2c");
        assert_eq!(gateway_class()["spec"]["controllerName"], CONTROLLER_NAME);
    }

    #[test]
    fn a_gateway_without_addresses_gets_none() {
        let object = substitute(
            serde_yaml::from_str(
                "kind: Gateway\nmetadata: {name: g, namespace: n}\nspec: {gatewayClassName: x}",
            )
            .unwrap(),
            &NetworkAddresses::for_pool("127.48.0.0/24"),
        )
        .unwrap();
        assert_eq!(object.value["spec"]["gatewayClassName"], "teapot");
        assert!(object.value["spec"].get("addresses").is_none());
        assert!(
            substitute(
                serde_yaml::from_str("metadata: {name: x}").unwrap(),
                &NetworkAddresses::default()
            )
            .is_err()
        );
    }

    #[test]
    fn placeholders_become_the_configured_addresses_in_order() {
        let configured = NetworkAddresses::for_pool("127.48.0.0/24");
        assert_eq!(
            configured,
            NetworkAddresses {
                usable: vec!["127.48.0.254".into()],
                unusable: vec!["192.0.2.1".into()],
            }
        );
        assert_eq!(
            NetworkAddresses::for_pool("192.0.2.0/30").unusable,
            ["198.51.100.1"]
        );
        assert_eq!(
            NetworkAddresses::for_pool("fd00::/120").usable,
            ["fd00::ff"]
        );
        assert!(NetworkAddresses::for_pool("").usable.is_empty());
        let object = substitute(
            serde_yaml::from_str(
                "kind: Gateway\nmetadata: {name: g, namespace: n}\nspec:\n  addresses:\n  - {type: test/fake-invalid-type, value: x}\n  - value: PLACEHOLDER_UNUSABLE_ADDRS\n  - value: PLACEHOLDER_USABLE_ADDRS\n",
            )
            .unwrap(),
            &configured,
        )
        .unwrap();
        assert_eq!(
            object.value["spec"]["addresses"],
            serde_yaml::from_str::<Value>(
                "[{type: test/fake-invalid-type, value: x}, {type: IPAddress, value: 192.0.2.1}, {type: IPAddress, value: 127.48.0.254}]"
            )
            .unwrap()
        );
    }

    #[test]
    fn bad_documents_name_file_and_index() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "bad.yaml", "kind: Service\n---\nkind: [\n");
        let err = prepare(&[&file], &NetworkAddresses::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("bad.yaml: document 1 is not YAML"), "{err}");
        let file = write(
            dir.path(),
            "replicas.yaml",
            "kind: Deployment\nmetadata: {name: d, namespace: n}\nspec: {replicas: many}\n",
        );
        let err = prepare(&[&file], &NetworkAddresses::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("document 0 (Deployment n/d): spec.replicas is not a count"),
            "{err}"
        );
    }
}
