//! The Helm charts (`charts/teapot-lb`, `charts/teapot-agent`), rendered
//! by a real `helm` (v3.10.1, fetched by `scripts/helm.sh`; see
//! docs/install.md for where it comes from):
//!
//! - `helm lint --strict` and `helm template` with every `ci/*.yaml`
//!   values file, the charts' `values.schema.json` included;
//! - every rendered document deserializes into its k8s-openapi 0.29 type
//!   (or teapot's `Tenant`) and serializes back to the same JSON, so an
//!   unknown field, a wrong type or a misplaced key fails with its path;
//! - the proxy's RBAC: no write outside `ingresses/status`,
//!   `services/status`, `leases` and name-restricted Secrets, and no
//!   cluster-wide read of namespaced kinds unless `rbac.clusterWide`;
//! - every flag the charts pass to `teapot proxy` and `teapot webhook` is
//!   accepted by this build's `teapot` (the agent's flags are planned);
//! - the chart ships exactly `api/crd/tenant.yaml` and
//!   `api/crd/routetrafficpolicy.yaml`; the webhook fails
//!   closed and is scoped by `teapot.dev/tenant`; drains fit in the
//!   termination grace period; the schema refuses bad values; the
//!   Containerfile is multi-stage and non-root.
//!
//! Without npm or network the helm binary cannot be fetched: the
//! rendering tests then print a loud SKIP, unless `TEAPOT_REQUIRE_HELM=1`
//! makes that a failure.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{IngressClass, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chart_tools;
use chart_tools::{
    NS, assert_rules_commented, chart, ci_values, helm, of_kind, repo, strs, try_render,
};

fn render(helm: &Path, chart_name: &str, values: &Path, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["-f", values.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    try_render(helm, chart_name, &args)
        .unwrap_or_else(|e| panic!("helm template {chart_name} -f {}: {e}", values.display()))
}

fn lint(helm: &Path, chart_name: &str, values: &Path) {
    let out = Command::new(helm)
        .args(["lint", "--strict", "--namespace", NS, "-f"])
        .arg(values)
        .arg(chart(chart_name))
        .output()
        .expect("run helm lint");
    assert!(
        out.status.success(),
        "helm lint --strict {chart_name} -f {}:\n{}{}",
        values.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn kind(doc: &Value) -> (String, String) {
    let s = |k: &str| doc[k].as_str().unwrap_or_default().to_string();
    (s("apiVersion"), s("kind"))
}

fn name(doc: &Value) -> String {
    let meta = &doc["metadata"];
    format!(
        "{}/{}",
        meta["namespace"].as_str().unwrap_or("-"),
        meta["name"].as_str().unwrap_or("?")
    )
}

/// Paths where `back` (the typed round trip) differs from `orig`.
fn diff(orig: &Value, back: &Value, path: &str, out: &mut Vec<String>) {
    match (orig, back) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                match b.get(k) {
                    Some(w) => diff(v, w, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k}: unknown field (dropped by the schema)")),
                }
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(format!("{path}.{k}: added by the round trip"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                diff(v, w, &format!("{path}[{i}]"), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{path}: {a} became {b}")),
    }
}

fn typed<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<(), String> {
    let parsed: T = serde_path_to_error::deserialize(doc.clone())
        .map_err(|e| format!("{}: {}", e.path(), e.inner()))?;
    let back = serde_json::to_value(&parsed).map_err(|e| e.to_string())?;
    let mut problems = Vec::new();
    diff(doc, &back, "", &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Kinds without a schema on this machine: only their shape is checked.
const UNTYPED: &[(&str, &str)] = &[
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
];

/// Validates one document against the Kubernetes OpenAPI types.
fn validate(doc: &Value) -> Result<(), String> {
    let (api, k) = kind(doc);
    match (api.as_str(), k.as_str()) {
        ("v1", "Namespace") => typed::<Namespace>(doc),
        ("v1", "ServiceAccount") => typed::<ServiceAccount>(doc),
        ("v1", "Secret") => typed::<Secret>(doc),
        ("v1", "Service") => typed::<Service>(doc),
        ("v1", "ConfigMap") => typed::<ConfigMap>(doc),
        ("apps/v1", "Deployment") => typed::<Deployment>(doc),
        ("apps/v1", "DaemonSet") => typed::<DaemonSet>(doc),
        ("policy/v1", "PodDisruptionBudget") => typed::<PodDisruptionBudget>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => typed::<ClusterRole>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => typed::<ClusterRoleBinding>(doc),
        ("rbac.authorization.k8s.io/v1", "Role") => typed::<Role>(doc),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => typed::<RoleBinding>(doc),
        ("networking.k8s.io/v1", "NetworkPolicy") => typed::<NetworkPolicy>(doc),
        ("networking.k8s.io/v1", "IngressClass") => typed::<IngressClass>(doc),
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
            typed::<ValidatingWebhookConfiguration>(doc)
        }
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            typed::<CustomResourceDefinition>(doc)
        }
        ("teapot.dev/v1alpha1", "Tenant") => typed::<teapot_api::Tenant>(doc),
        (a, k) if UNTYPED.contains(&(a, k)) => {
            let obj = doc.as_object().ok_or("not an object")?;
            let extra: Vec<_> = obj
                .keys()
                .filter(|key| !["apiVersion", "kind", "metadata", "spec"].contains(&key.as_str()))
                .collect();
            if extra.is_empty() && doc["metadata"]["name"].is_string() && doc["spec"].is_object() {
                Ok(())
            } else {
                Err(format!("bad shape (top-level keys {extra:?})"))
            }
        }
        (a, k) => Err(format!("no schema known for {a} {k}: add it to the test")),
    }
}

fn validate_all(docs: &[Value], label: &str) {
    let mut failures = Vec::new();
    for doc in docs {
        if let Err(e) = validate(doc) {
            let (api, k) = kind(doc);
            failures.push(format!("{api} {k} {}: {e}", name(doc)));
        }
    }
    assert!(
        failures.is_empty(),
        "{label}: rendered objects that do not validate:\n{}",
        failures.join("\n")
    );
}

const WRITE_VERBS: &[&str] = &[
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "*",
];

/// Every rule that reaches `sa` (in `NS`), with the binding's namespace
/// (`None`: cluster-wide).
fn rules_of(docs: &[Value], sa: &str) -> Vec<(Option<String>, Value)> {
    let mut rules = Vec::new();
    for binding in docs
        .iter()
        .filter(|d| d["kind"] == "RoleBinding" || d["kind"] == "ClusterRoleBinding")
    {
        let subjects = binding["subjects"].as_array().cloned().unwrap_or_default();
        let bound = subjects
            .iter()
            .any(|s| s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == NS);
        if !bound {
            continue;
        }
        let scope = binding["metadata"]["namespace"]
            .as_str()
            .map(str::to_string);
        let role_ref = &binding["roleRef"];
        let role = docs
            .iter()
            .find(|d| {
                d["kind"] == role_ref["kind"]
                    && d["metadata"]["name"] == role_ref["name"]
                    && (role_ref["kind"] == "ClusterRole"
                        || d["metadata"]["namespace"].as_str() == scope.as_deref())
            })
            .unwrap_or_else(|| panic!("{} refers to a role not in the chart", name(binding)));
        for rule in role["rules"].as_array().cloned().unwrap_or_default() {
            rules.push((scope.clone(), rule));
        }
    }
    rules
}

/// Violations of the proxy's write policy: writes only to
/// `ingresses/status`, `services/status`, `coordination.k8s.io` `leases`,
/// and Secrets only when restricted by `resourceNames` (the ACME account
/// and tokens), except with ACME on: then create, patch and delete (never
/// update or deletecollection) of the certificate Secrets, whose names
/// follow the hosts.
fn proxy_write_violations(docs: &[Value]) -> Vec<String> {
    let acme = container_args(docs, "proxy")
        .iter()
        .any(|a| a.starts_with("--acme-directory"));
    let mut bad = Vec::new();
    for (scope, rule) in rules_of(docs, "teapot-proxy") {
        let verbs = strs(&rule["verbs"]);
        let writes: Vec<_> = verbs
            .iter()
            .filter(|v| WRITE_VERBS.contains(&v.as_str()))
            .collect();
        if writes.is_empty() {
            continue;
        }
        let named = !strs(&rule["resourceNames"]).is_empty()
            || (acme
                && writes
                    .iter()
                    .all(|v| ["create", "patch", "delete"].contains(&v.as_str())));
        for group in strs(&rule["apiGroups"]) {
            for resource in strs(&rule["resources"]) {
                let allowed = matches!(
                    (group.as_str(), resource.as_str()),
                    ("networking.k8s.io", "ingresses/status")
                        | ("", "services/status")
                        | ("coordination.k8s.io", "leases")
                        // Events about refused L4 allocations: records, not state.
                        | ("events.k8s.io", "events")
                        // Gateway API status (docs/gateway-api-l4.md).
                        | (
                            "gateway.networking.k8s.io",
                            "gateways/status"
                                | "listenersets/status"
                                | "httproutes/status"
                                | "grpcroutes/status"
                                | "tlsroutes/status"
                                | "tcproutes/status"
                                | "udproutes/status"
                                | "backendtlspolicies/status"
                        )
                        // teapot's own policy for routes, its status only.
                        | ("teapot.dev", "routetrafficpolicies/status")
                ) || (group.is_empty() && resource == "secrets" && named)
                    // The teapot GatewayClass's status, by name only.
                    || (group == "gateway.networking.k8s.io"
                        && resource == "gatewayclasses/status"
                        && strs(&rule["resourceNames"]) == ["teapot"]);
                if !allowed {
                    bad.push(format!(
                        "{writes:?} on {group:?}/{resource} (scope {})",
                        scope.as_deref().unwrap_or("cluster")
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn teapot_lb_renders_and_validates() {
    let Some(helm) = helm() else { return };
    for values in ci_values("teapot-lb") {
        lint(&helm, "teapot-lb", &values);
        let docs = render(&helm, "teapot-lb", &values, &["--include-crds"]);
        let label = format!("teapot-lb -f {}", values.display());
        validate_all(&docs, &label);

        let kinds: BTreeSet<_> = docs.iter().map(|d| kind(d).1).collect();
        for k in [
            "CustomResourceDefinition",
            "ValidatingWebhookConfiguration",
            "PodDisruptionBudget",
            "NetworkPolicy",
            "Deployment",
            "Tenant",
            "Namespace",
        ] {
            assert!(kinds.contains(k), "{label}: no {k} rendered");
        }
        assert!(
            kinds.contains("DaemonSet") || of_kind(&docs, "Deployment").count() == 2,
            "{label}: no proxy workload"
        );
        let crds: Vec<&str> = of_kind(&docs, "CustomResourceDefinition")
            .filter_map(|c| c["metadata"]["name"].as_str())
            .filter(|n| n.ends_with(".teapot.dev"))
            .collect();
        assert_eq!(
            crds,
            ["routetrafficpolicies.teapot.dev", "tenants.teapot.dev"],
            "{label}"
        );
    }
}

#[test]
fn chart_ships_the_generated_crds() {
    // The tenant clusters need RouteTrafficPolicy's too: the agent's chart
    // ships it.
    let shipped = [
        ("teapot-lb", "tenant.yaml"),
        ("teapot-lb", "routetrafficpolicy.yaml"),
        ("teapot-agent", "routetrafficpolicy.yaml"),
    ];
    for (name, file) in shipped {
        let generated = std::fs::read(repo().join("api/crd").join(file)).expect(file);
        let shipped = std::fs::read(chart(name).join("crds").join(file)).expect(file);
        assert!(
            generated == shipped,
            "charts/{name}/crds/{file} differs from api/crd/{file}: \
             cp api/crd/{file} charts/{name}/crds/{file}"
        );
    }
}

#[test]
fn proxy_rbac_is_least_privilege() {
    let Some(helm) = helm() else { return };
    for values in ci_values("teapot-lb") {
        let docs = render(&helm, "teapot-lb", &values, &[]);
        let label = format!("teapot-lb -f {}", values.display());
        let bad = proxy_write_violations(&docs);
        assert!(bad.is_empty(), "{label}: the proxy may write {bad:?}");

        let rules = rules_of(&docs, "teapot-proxy");
        assert!(!rules.is_empty(), "{label}: the proxy has no RBAC at all");
        let cluster_wide = of_kind(&docs, "ClusterRoleBinding")
            .any(|b| b["metadata"]["name"] == "teapot-proxy-read");
        for (scope, rule) in &rules {
            let resources = strs(&rule["resources"]);
            // Reads of namespaced kinds only through RoleBindings in the
            // watched namespaces, unless rbac.clusterWide.
            if scope.is_none() && !cluster_wide {
                for r in &resources {
                    assert!(
                        [
                            "tenants",
                            "ingressclasses",
                            "gatewayclasses",
                            "gatewayclasses/status",
                            "namespaces",
                            // Cluster-scoped too: the labels of the proxy's
                            // own Node, for announce pools' node-label=.
                            "nodes"
                        ]
                        .contains(&r.as_str()),
                        "{label}: cluster-wide access to {r} without rbac.clusterWide"
                    );
                }
            }
            assert!(
                !strs(&rule["apiGroups"]).contains(&"*".to_string())
                    && !resources.contains(&"*".to_string()),
                "{label}: wildcard rule {rule}"
            );
        }
        // The same namespaces are given to the proxy as --kube-namespace.
        if !cluster_wide {
            let bound: BTreeSet<String> = rules
                .iter()
                .filter(|(_, r)| strs(&r["resources"]).contains(&"secrets".to_string()))
                .filter_map(|(s, _)| s.clone())
                .collect();
            let args = container_args(&docs, "proxy");
            let watched: BTreeSet<String> = args
                .iter()
                .filter_map(|a| a.strip_prefix("--kube-namespace="))
                .map(str::to_string)
                .collect();
            assert_eq!(
                bound, watched,
                "{label}: RBAC namespaces vs --kube-namespace"
            );
            for tenant_ns in ["tenant-acme", "globex-lb"] {
                assert!(
                    watched.contains(tenant_ns),
                    "{label}: {tenant_ns} not watched"
                );
            }
        }
        // Every rule in the chart's templates carries a comment saying why.
        for file in ["rbac.yaml", "tenants.yaml"] {
            let text = std::fs::read_to_string(chart("teapot-lb").join("templates").join(file))
                .expect("template");
            assert_rules_commented(&text, file);
        }
    }
    let text = std::fs::read_to_string(chart("teapot-agent").join("templates/rbac.yaml"))
        .expect("agent rbac");
    assert_rules_commented(&text, "teapot-agent rbac.yaml");
}

#[test]
fn rbac_check_catches_a_forbidden_write() {
    let Some(helm) = helm() else { return };
    let values = chart("teapot-lb").join("ci/daemonset-values.yaml");
    let mut docs = render(&helm, "teapot-lb", &values, &[]);
    assert!(proxy_write_violations(&docs).is_empty());
    let role = docs
        .iter_mut()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "teapot-proxy-read")
        .expect("proxy read role");
    role["rules"].as_array_mut().expect("rules").push(
        serde_json::json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}),
    );
    let bad = proxy_write_violations(&docs);
    assert!(!bad.is_empty(), "a create on Secrets went unnoticed");
    assert!(bad.iter().all(|b| b.contains("secrets")), "{bad:?}");
}

#[test]
fn validation_catches_unknown_fields_and_wrong_types() {
    let Some(helm) = helm() else { return };
    let values = chart("teapot-lb").join("ci/deployment-values.yaml");
    let docs = render(&helm, "teapot-lb", &values, &[]);
    let deployment = of_kind(&docs, "Deployment").next().expect("Deployment");
    let mut typo = deployment.clone();
    typo["spec"]["template"]["spec"]["containers"][0]["argz"] = serde_json::json!(["x"]);
    let err = validate(&typo).expect_err("unknown field accepted");
    assert!(
        err.contains(".spec.template.spec.containers[0].argz"),
        "{err}"
    );
    let mut wrong = deployment.clone();
    wrong["spec"]["replicas"] = serde_json::json!("three");
    let err = validate(&wrong).expect_err("string replicas accepted");
    assert!(err.contains("spec.replicas"), "{err}");
    let mut misplaced = deployment.clone();
    misplaced["spec"]["template"]["spec"]["readOnlyRootFilesystem"] = serde_json::json!(true);
    assert!(
        validate(&misplaced).is_err(),
        "pod-level readOnlyRootFilesystem accepted"
    );
}

/// Arguments of the first container of the workload labelled `component`
/// (`""`: the first workload).
fn container_args(docs: &[Value], component: &str) -> Vec<String> {
    let workload = docs
        .iter()
        .find(|d| {
            (d["kind"] == "DaemonSet" || d["kind"] == "Deployment")
                && (component.is_empty()
                    || d["metadata"]["labels"]["app.kubernetes.io/component"] == component)
        })
        .unwrap_or_else(|| panic!("no {component} workload"));
    strs(&workload["spec"]["template"]["spec"]["containers"][0]["args"])
}

/// `teapot ARGS --help` succeeds only if every flag before `--help`
/// exists and its value parses (clap stops at --help before checking
/// requirements, so nothing starts), on an IPv4 pod and an IPv6 one
/// (Kubernetes substitutes `$(POD_IP)` unbracketed).
pub(crate) fn assert_flags_exist(args: &[String], label: &str) {
    for pod_ip in ["10.0.0.7", "fd00:10::7"] {
        let args: Vec<String> = args
            .iter()
            .map(|a| a.replace("$(POD_IP)", pod_ip))
            .collect();
        let out = Command::new(env!("CARGO_BIN_EXE_teapot"))
            .args(&args)
            .arg("--help")
            .output()
            .expect("run teapot");
        assert!(
            out.status.success(),
            "{label}: teapot refuses the chart's arguments {args:?}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn chart_flags_exist_in_the_binary() {
    let Some(helm) = helm() else { return };
    for values in ci_values("teapot-lb") {
        let docs = render(&helm, "teapot-lb", &values, &[]);
        for component in ["proxy", "webhook"] {
            let args = container_args(&docs, component);
            assert_flags_exist(&args, &format!("{component} -f {}", values.display()));
        }
    }
}

/// The proxy's pod spec (DaemonSet or Deployment).
fn proxy_pod(docs: &[Value]) -> &Value {
    let workload = docs
        .iter()
        .find(|d| {
            (d["kind"] == "DaemonSet" || d["kind"] == "Deployment")
                && d["metadata"]["labels"]["app.kubernetes.io/component"] == "proxy"
        })
        .expect("proxy workload");
    &workload["spec"]["template"]["spec"]
}

fn bgp_args(docs: &[Value]) -> Vec<String> {
    container_args(docs, "proxy")
        .into_iter()
        .filter(|a| a.starts_with("--bgp-"))
        .collect()
}

#[test]
fn bgp_values_render_to_the_speakers_flags() {
    let Some(helm) = helm() else { return };
    let values = chart("teapot-lb").join("ci/bgp-values.yaml");
    let docs = render(&helm, "teapot-lb", &values, &[]);
    assert_eq!(
        bgp_args(&docs),
        [
            // A 32-bit ASN in full, not in a float's exponent form.
            "--bgp-asn=4200000001",
            "--bgp-router-id=192.0.2.10",
            "--bgp-graceful-wait=5",
            "--bgp-graceful-restart-time=120",
            "--bgp-listen-port=179",
            "--bgp-peer=192.0.2.1,64500,hold=3,keepalive=1,bfd=100x3",
            "--bgp-peer=2001:db8:1::1,64500,port=1179,multihop=2,source=2001:db8:1::10,\
             next-hop=192.0.2.10,local-pref=0",
            "--bgp-peer=198.51.100.1,64501,passive=true",
        ]
    );
    // A BGP speaker holds an announcer Lease whose renewals carry its
    // sessions (the Announced condition): the proxy may write Leases.
    let lease_role = of_kind(&docs, "Role").find(|r| {
        r["rules"].as_array().into_iter().flatten().any(|rule| {
            strs(&rule["resources"]).contains(&"leases".to_string())
                && strs(&rule["verbs"]).contains(&"update".to_string())
        }) && r["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("-proxy-announce"))
    });
    assert!(lease_role.is_some(), "no Lease RBAC for the BGP speaker");
    let pod = proxy_pod(&docs);
    let volumes: Vec<&Value> = pod["volumes"].as_array().expect("volumes").iter().collect();
    assert_eq!(
        volumes.len(),
        1,
        "no password, no Secret volume: {volumes:?}"
    );
    // BFD listens on UDP 3784: UID 0 with NET_BIND_SERVICE, although the
    // HTTP ports are high.
    assert_eq!(pod["securityContext"]["runAsUser"], 0);
    assert_eq!(
        strs(&pod["containers"][0]["securityContext"]["capabilities"]["add"]),
        ["NET_BIND_SERVICE"]
    );
    // The graceful BGP stop runs before the drain: the pod waits for both.
    let wait = pod["terminationGracePeriodSeconds"]
        .as_i64()
        .expect("grace");
    let plain = render(
        &helm,
        "teapot-lb",
        &values,
        &["--set", "announce.bgp.peers=null"],
    );
    let plain_wait = proxy_pod(&plain)["terminationGracePeriodSeconds"]
        .as_i64()
        .expect("grace");
    assert_eq!(wait, plain_wait + 5);
    assert!(bgp_args(&plain).is_empty());
    // Without a passive peer no listening port; graceful restart only
    // when asked.
    let dir = tempfile::tempdir().expect("tempdir");
    let active = dir.path().join("active.yaml");
    std::fs::write(
        &active,
        "announce:\n  bgp:\n    gracefulRestartSeconds: 0\n    peers:\n\
         \x20     - {address: 192.0.2.1, asn: 64500}\n",
    )
    .expect("write values");
    let active = render(
        &helm,
        "teapot-lb",
        &values,
        &["-f", active.to_str().expect("utf-8")],
    );
    let args = bgp_args(&active);
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--bgp-listen-port")
                || a.starts_with("--bgp-graceful-restart-time")),
        "{args:?}"
    );

    let v = values.to_str().expect("utf-8");
    let err = try_render(
        &helm,
        "teapot-lb",
        &["-f", v, "--set", "announce.bgp.asn=0"],
    )
    .expect_err("peers without an ASN");
    assert!(err.contains("announce.bgp.asn"), "{err}");
}

#[test]
fn a_bgp_peer_password_comes_from_a_secret_mounted_read_only() {
    let Some(helm) = helm() else { return };
    let values = chart("teapot-lb").join("ci/bgp-values.yaml");
    let dir = tempfile::tempdir().expect("temp dir");
    let peers = dir.path().join("peers.yaml");
    std::fs::write(
        &peers,
        "announce:\n  bgp:\n    peers:\n\
         \x20     - {address: 192.0.2.1, asn: 64500}\n\
         \x20     - {address: 192.0.2.2, asn: 64500, hold: 0, passwordSecret: {name: bgp-routers, key: router-2}}\n",
    )
    .expect("write values");
    let docs = render(
        &helm,
        "teapot-lb",
        &values,
        &["-f", peers.to_str().expect("utf-8")],
    );
    validate_all(&docs, "teapot-lb with a BGP password");
    let args: Vec<String> = bgp_args(&docs)
        .into_iter()
        .filter(|a| a.starts_with("--bgp-peer="))
        .collect();
    assert_eq!(
        args,
        [
            "--bgp-peer=192.0.2.1,64500",
            "--bgp-peer=192.0.2.2,64500,hold=0,password-file=/etc/teapot/bgp-peers/1/password",
        ]
    );
    let pod = proxy_pod(&docs);
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "bgp-peer-1-password")
        .expect("the password's volume");
    assert_eq!(
        volume["secret"],
        serde_json::json!({
            "secretName": "bgp-routers",
            "items": [{"key": "router-2", "path": "password"}],
            "defaultMode": 0o440,
        })
    );
    let mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == "bgp-peer-1-password")
        .expect("the password's mount");
    assert_eq!(mount["mountPath"], "/etc/teapot/bgp-peers/1");
    assert_eq!(mount["readOnly"], true);
    // No BFD and high ports: neither root nor any capability.
    assert_ne!(pod["securityContext"]["runAsUser"], 0);
    assert!(pod["containers"][0]["securityContext"]["capabilities"]["add"].is_null());
}

/// proxy.fleet: the replicas find each other by a headless Service with
/// a UDP port `fleet` (--fleet-service), read its EndpointSlices in the
/// release namespace, and sign with the key Secret mounted read-only; no
/// key Secret named, no render.
#[test]
fn the_fleet_exchange_gets_its_service_key_and_rbac() {
    let Some(helm) = helm() else { return };
    let values = chart("teapot-lb").join("ci/daemonset-values.yaml");
    let docs = render(&helm, "teapot-lb", &values, &[]);
    let args = container_args(&docs, "proxy");
    for flag in [
        "--fleet-service=teapot-system/teapot-proxy-fleet",
        "--fleet-listen=$(POD_IP):7946",
        "--fleet-key-file=/etc/teapot/fleet/key",
        "--quic-key-file=/etc/teapot/fleet/key",
        "--global-rate-limit-status-code=503",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
    }
    let service = docs
        .iter()
        .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == "teapot-proxy-fleet")
        .expect("the fleet's Service");
    assert_eq!(service["metadata"]["namespace"], NS);
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert_eq!(
        service["spec"]["ports"],
        serde_json::json!([{"name": "fleet", "port": 7946, "targetPort": "fleet", "protocol": "UDP"}])
    );
    let pod = proxy_pod(&docs);
    let port = pod["containers"][0]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == "fleet")
        .expect("the container's fleet port");
    assert_eq!(port["protocol"], "UDP");
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "fleet-key")
        .expect("the key's volume");
    assert_eq!(volume["secret"]["secretName"], "teapot-fleet-key");
    let mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == "fleet-key")
        .expect("the key's mount");
    assert_eq!(mount["mountPath"], "/etc/teapot/fleet");
    assert_eq!(mount["readOnly"], true);
    let reads_slices = rules_of(&docs, "teapot-proxy").iter().any(|(scope, rule)| {
        scope.as_deref().is_none_or(|ns| ns == NS)
            && strs(&rule["apiGroups"]).contains(&"discovery.k8s.io".to_string())
            && strs(&rule["resources"]).contains(&"endpointslices".to_string())
            && ["list", "watch"]
                .iter()
                .all(|v| strs(&rule["verbs"]).contains(&v.to_string()))
    });
    assert!(
        reads_slices,
        "the proxy lists and watches EndpointSlices in {NS}"
    );
    let err = try_render(
        &helm,
        "teapot-lb",
        &[
            "-f",
            values.to_str().expect("utf-8"),
            "--set",
            "proxy.fleet.keySecret.name=",
        ],
    )
    .expect_err("no key Secret");
    assert!(err.contains("proxy.fleet.keySecret.name"), "{err}");
}

#[test]
fn webhook_fails_closed_and_is_scoped() {
    let Some(helm) = helm() else { return };
    for values in ci_values("teapot-lb") {
        let docs = render(&helm, "teapot-lb", &values, &[]);
        let vwc = of_kind(&docs, "ValidatingWebhookConfiguration")
            .next()
            .expect("VWC");
        let hooks = vwc["webhooks"].as_array().expect("webhooks");
        for hook in hooks {
            assert_eq!(hook["failurePolicy"], "Fail");
            assert_eq!(hook["sideEffects"], "None");
            let namespaced = hook["rules"][0]["scope"] == "Namespaced";
            if namespaced {
                assert_eq!(
                    hook["namespaceSelector"]["matchExpressions"][0]["key"],
                    teapot_api::names::TENANT_LABEL
                );
            }
        }
        // Helm creates objects in the printed order: Tenants before the
        // webhook configuration, so a first install does not wait on it.
        let position = |k: &str| docs.iter().rposition(|d| d["kind"] == k);
        if let Some(tenant) = position("Tenant") {
            assert!(tenant < position("ValidatingWebhookConfiguration").expect("VWC"));
        }
        let webhook = of_kind(&docs, "Deployment")
            .find(|d| d["metadata"]["name"] == "teapot-webhook")
            .expect("webhook Deployment");
        assert!(webhook["spec"]["replicas"].as_i64() >= Some(2));
        let pdbs: Vec<_> = of_kind(&docs, "PodDisruptionBudget").collect();
        assert_eq!(pdbs.len(), 2, "a PDB each for proxy and webhook");
        let policy = of_kind(&docs, "NetworkPolicy")
            .next()
            .expect("NetworkPolicy");
        let from = policy["spec"]["ingress"][0]["from"]
            .as_array()
            .expect("from");
        assert!(
            from.iter().all(|f| f.get("ipBlock").is_some()),
            "only API server addresses may reach the webhook"
        );
        // helm mode: the caBundle is the CA of the serving certificate.
        if let Some(secret) =
            of_kind(&docs, "Secret").find(|d| d["metadata"]["name"] == "teapot-webhook-tls")
        {
            assert_eq!(
                hooks[0]["clientConfig"]["caBundle"], secret["data"]["ca.crt"],
                "caBundle must be the CA in the Secret"
            );
            assert!(secret["metadata"]["annotations"]["teapot.dev/not-after"].is_string());
        } else {
            assert!(vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_string());
        }
    }
}

#[test]
fn proxy_drains_within_the_grace_period() {
    let Some(helm) = helm() else { return };
    for values in ci_values("teapot-lb") {
        let docs = render(&helm, "teapot-lb", &values, &[]);
        let workload = docs
            .iter()
            .find(|d| d["metadata"]["name"] == "teapot-proxy" && d["spec"]["template"].is_object())
            .expect("proxy workload");
        let pod = &workload["spec"]["template"]["spec"];
        let grace = pod["terminationGracePeriodSeconds"]
            .as_i64()
            .expect("grace");
        let drain: i64 = container_args(&docs, "proxy")
            .iter()
            .find_map(|a| a.strip_prefix("--grace-period="))
            .expect("--grace-period")
            .parse()
            .expect("number");
        let pre_stop = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
            .as_i64()
            .unwrap_or(0);
        assert!(grace > pre_stop + drain, "{grace} <= {pre_stop} + {drain}");
        let security = &pod["containers"][0]["securityContext"];
        assert_eq!(security["readOnlyRootFilesystem"], true);
        assert_eq!(security["allowPrivilegeEscalation"], false);
        assert_eq!(security["capabilities"]["drop"][0], "ALL");
    }
}

#[test]
fn values_schema_refuses_bad_values() {
    let Some(helm) = helm() else { return };
    let values = chart("teapot-lb").join("ci/daemonset-values.yaml");
    let v = values.to_str().expect("utf-8");
    for (set, expect) in [
        ("proxy.mode=bogus", "proxy.mode"),
        ("proxy.tyop=1", "tyop"),
        ("webhook.replicas=1", "webhook.replicas"),
        ("tenants[0].cluster=Not_A_Label", "cluster"),
        ("domain=", "domain is required"),
    ] {
        let err = try_render(&helm, "teapot-lb", &["-f", v, "--set", set])
            .expect_err(&format!("--set {set} must be refused"));
        assert!(err.contains(expect), "--set {set}: {err}");
    }
    let err = try_render(&helm, "teapot-lb", &["--set", "domain=example.net"])
        .expect_err("no API server CIDRs");
    assert!(err.contains("apiServerCIDRs"), "{err}");
    let err = try_render(
        &helm,
        "teapot-agent",
        &["--set", "syncMode=bgp", "--set", "tenantCluster=a"],
    )
    .expect_err("bad sync mode");
    assert!(err.contains("syncMode"), "{err}");
    let err = try_render(&helm, "teapot-agent", &[]).expect_err("no tenantCluster");
    assert!(err.contains("tenantCluster"), "{err}");
}

#[test]
fn teapot_agent_renders_and_validates() {
    let Some(helm) = helm() else { return };
    for values in ci_values("teapot-agent") {
        lint(&helm, "teapot-agent", &values);
        let docs = render(&helm, "teapot-agent", &values, &[]);
        let label = format!("teapot-agent -f {}", values.display());
        validate_all(&docs, &label);
        let class = of_kind(&docs, "IngressClass").next().expect("IngressClass");
        assert_eq!(class["metadata"]["name"], teapot_api::names::INGRESS_CLASS);
        assert_eq!(
            class["spec"]["controller"],
            teapot_api::names::CONTROLLER_NAME
        );
        let default =
            class["metadata"]["annotations"][teapot_api::names::DEFAULT_CLASS_ANNOTATION] == "true";
        assert_eq!(default, values.to_string_lossy().contains("pod-values"));
        // The binary must accept them, and the essential ones must be there.
        let args = container_args(&docs, "");
        assert_flags_exist(&args, &label);
        for flag in ["--lb-kubeconfig=", "--lb-namespace=", "--mode=", "--admin="] {
            assert!(
                args.iter().any(|a| a.starts_with(flag)),
                "{label}: no {flag}"
            );
        }
        let leases: Vec<_> = of_kind(&docs, "Role")
            .flat_map(|r| r["rules"].as_array().cloned().unwrap_or_default())
            .filter(|r| strs(&r["resources"]).contains(&"leases".to_string()))
            .collect();
        assert!(
            !leases.is_empty(),
            "{label}: no Lease RBAC for leader election"
        );
        // Two replicas: one leads, one stands by, on the Lease that RBAC
        // names.
        let deployment = of_kind(&docs, "Deployment").next().expect("Deployment");
        assert_eq!(deployment["spec"]["replicas"], 2, "{label}");
        assert!(
            args.contains(&"--lease-name=teapot-agent".to_string()),
            "{label}: {args:?}"
        );
        assert!(
            leases
                .iter()
                .any(|r| strs(&r["resourceNames"]).contains(&"teapot-agent".to_string())),
            "{label}: the Lease RBAC names another Lease"
        );
        // What the agent writes in the tenant cluster.
        let rules: Vec<_> = of_kind(&docs, "ClusterRole")
            .flat_map(|r| r["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        let grants = |group: &str, resource: &str, verb: &str| {
            rules.iter().any(|r| {
                strs(&r["apiGroups"]).contains(&group.to_string())
                    && strs(&r["resources"]).contains(&resource.to_string())
                    && strs(&r["verbs"]).contains(&verb.to_string())
            })
        };
        for (group, resource, verb) in [
            ("networking.k8s.io", "ingresses", "patch"),
            ("networking.k8s.io", "ingresses/status", "patch"),
            ("networking.k8s.io", "ingressclasses", "create"),
            ("", "services", "patch"),
            ("", "services/status", "patch"),
            ("events.k8s.io", "events", "create"),
        ] {
            assert!(
                grants(group, resource, verb),
                "{label}: no {verb} on {group}/{resource}"
            );
        }
    }
}

#[test]
fn containerfile_is_multi_stage_and_non_root() {
    let text = std::fs::read_to_string(repo().join("Containerfile")).expect("Containerfile");
    let froms = text
        .lines()
        .filter(|l| l.trim_start().to_ascii_uppercase().starts_with("FROM "))
        .count();
    assert!(
        froms >= 2,
        "Containerfile: {froms} stage(s), want a build and a runtime stage"
    );
    let user = text
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("USER "))
        .expect("a USER line");
    let uid = user.split(':').next().unwrap_or_default();
    assert!(
        uid.parse::<u32>().is_ok_and(|u| u != 0),
        "final USER must be a numeric non-root uid (runAsNonRoot checks it), got {user}"
    );
}

#[test]
fn agent_kubeconfig_script_builds_a_token_kubeconfig() {
    // A stand-in kubectl that answers what the script asks and records it.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls");
    let stub = dir.path().join("kubectl");
    std::fs::write(
        &stub,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$*\" in\n\
             *certificate-authority-data*) printf 'Q0EtREFUQQ==' ;;\n\
             *cluster.server*) printf 'https://lb.example.net:6443' ;;\n\
             *'create token teapot-agent --duration 24h'*) printf 'TOKEN-123' ;;\n\
             esac\n",
            log.display()
        ),
    )
    .expect("stub");
    Command::new("chmod")
        .arg("+x")
        .arg(&stub)
        .status()
        .expect("chmod");
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(repo().join("charts/agent-kubeconfig.sh"))
        .args(["acme", "tenant-acme", "24h"])
        .env("PATH", path)
        .output()
        .expect("run agent-kubeconfig.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config: Value = serde_yaml::from_slice(&out.stdout).expect("kubeconfig YAML");
    assert_eq!(config["kind"], "Config");
    assert_eq!(config["users"][0]["user"]["token"], "TOKEN-123");
    assert_eq!(
        config["clusters"][0]["cluster"]["server"],
        "https://lb.example.net:6443"
    );
    assert_eq!(
        config["clusters"][0]["cluster"]["certificate-authority-data"],
        "Q0EtREFUQQ=="
    );
    assert_eq!(config["contexts"][0]["context"]["namespace"], "tenant-acme");
    let calls = std::fs::read_to_string(&log).expect("calls");
    assert!(calls.contains("get tenant acme"), "{calls}");
    assert!(
        calls.contains("-n tenant-acme create token teapot-agent --duration 24h"),
        "{calls}"
    );
}

/// `metadata` without Helm's bookkeeping labels and annotations.
fn without_helm_metadata(mut doc: Value) -> Value {
    let meta = doc
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .expect("metadata");
    meta.remove("annotations");
    if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
        labels.retain(|k, _| !k.starts_with("app.kubernetes.io/") && !k.starts_with("helm.sh/"));
        if labels.is_empty() {
            meta.remove("labels");
        }
    }
    doc
}

#[test]
fn tenant_add_prints_what_the_chart_renders() {
    let Some(helm) = helm() else { return };
    let out = Command::new(env!("CARGO_BIN_EXE_teapot"))
        .args(["tenant", "add", "acme", "--node-cidr", "10.20.0.0/16"])
        .args([
            "--allowed-domain",
            "shop.example.com",
            "--release",
            "teapot",
        ])
        .args(["--release-namespace", NS])
        .output()
        .expect("run teapot tenant add");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert_rules_commented(&text, "teapot tenant add");
    let printed: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            let v = serde_yaml::Value::deserialize(d).expect("YAML");
            serde_json::to_value(v).expect("JSON")
        })
        .collect();
    assert_eq!(printed.len(), 10, "{text}");
    validate_all(&printed, "teapot tenant add");

    let rendered = try_render(
        &helm,
        "teapot-lb",
        &[
            "--set",
            "domain=example.net",
            "--set",
            "webhook.networkPolicy.apiServerCIDRs[0]=10.0.0.1/32",
            "--set",
            "tenants[0].cluster=acme",
            "--set",
            "tenants[0].nodeCIDRs[0]=10.20.0.0/16",
            "--set",
            "tenants[0].allowedDomains[0]=shop.example.com",
        ],
    )
    .expect("render");
    for doc in printed {
        let twin = rendered
            .iter()
            .find(|r| kind(r) == kind(&doc) && name(r) == name(&doc))
            .unwrap_or_else(|| panic!("the chart renders no {:?} {}", kind(&doc), name(&doc)));
        assert_eq!(
            without_helm_metadata(doc.clone()),
            without_helm_metadata(twin.clone()),
            "teapot tenant add and the chart disagree on {}",
            name(&doc)
        );
    }

    let refused = Command::new(env!("CARGO_BIN_EXE_teapot"))
        .args(["tenant", "add", "Bad_Name", "--node-cidr", "10.20.0.0/16"])
        .output()
        .expect("run");
    assert!(!refused.status.success());
    let refused = Command::new(env!("CARGO_BIN_EXE_teapot"))
        .args(["tenant", "add", "ok", "--node-cidr", "10.20.0.0/16"])
        .args(["--allowed-domain", "a.com\n  evil: x"])
        .output()
        .expect("run");
    assert!(
        !refused.status.success(),
        "a newline in a domain was printed"
    );
}
