//! The charts' Gateway API parts (issue #18), rendered by the pinned helm
//! (`scripts/helm.sh`, as in `charts.rs`):
//!
//! - `charts/teapot-lb/gateway-api-crds/` holds exactly the upstream CRDs
//!   of the kinds the generated types know, and renders them (kept on
//!   uninstall, valid `CustomResourceDefinition`s) unless
//!   `gatewayAPI.installCRDs=false`;
//! - `gatewayAPI.gatewayClass` renders GatewayClass `teapot` of
//!   controller `teapot.dev/gateway-controller`;
//! - the webhook judges every Gateway API kind the policy admits;
//! - the tenant agents, proxy and webhook get the Gateway API rights they
//!   need, each rule commented, and the proxy no Gateway API write.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Deserialize;
use serde_json::Value;
use teapot_api::annotations::ObjectKind;
use teapot_api::gateway_api::GatewayClass;
use teapot_api::names::{GATEWAY_CLASS, GATEWAY_CONTROLLER_NAME};

mod chart_tools;
use chart_tools::{helm, repo};

const NS: &str = "teapot-system";
const KUBE_VERSION: &str = "1.31.0";
const GROUP: &str = "gateway.networking.k8s.io";
/// The resources of the kinds a tenant may write.
const TENANT_RESOURCES: &[&str] = &[
    "gateways",
    "httproutes",
    "grpcroutes",
    "tlsroutes",
    "tcproutes",
    "udproutes",
    "referencegrants",
];

fn crd_dir() -> PathBuf {
    repo().join("charts/teapot-lb/gateway-api-crds")
}

fn render(helm: &Path, chart: &str, args: &[&str]) -> Vec<Value> {
    let release = if chart == "teapot-lb" {
        "teapot"
    } else {
        "teapot-agent"
    };
    let chart_dir = repo().join("charts").join(chart);
    let out = Command::new(helm)
        .arg("template")
        .arg(release)
        .arg(&chart_dir)
        .args(["--namespace", NS, "--kube-version", KUBE_VERSION])
        .arg("-f")
        .arg(chart_dir.join(if chart == "teapot-lb" {
            "ci/deployment-values.yaml"
        } else {
            "ci/nodeport-values.yaml"
        }))
        .args(args)
        .output()
        .expect("run helm template");
    assert!(
        out.status.success(),
        "helm template {chart} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8 output");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_json::to_value(serde_yaml::Value::deserialize(d).expect("YAML")).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> impl Iterator<Item = &'a Value> {
    docs.iter().filter(move |d| d["kind"] == kind)
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether some rule of `rules` grants `verb` on `group`/`resource`.
fn grants(rules: &[Value], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        strs(&r["apiGroups"]).contains(&group.to_string())
            && strs(&r["resources"]).contains(&resource.to_string())
            && strs(&r["verbs"]).contains(&verb.to_string())
    })
}

fn rules_of(doc: &Value) -> Vec<Value> {
    doc["rules"].as_array().cloned().unwrap_or_default()
}

fn gateway_crd_names(docs: &[Value]) -> BTreeSet<String> {
    of_kind(docs, "CustomResourceDefinition")
        .filter(|c| c["spec"]["group"] == GROUP)
        .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_shipped_crds_are_the_upstream_ones_of_the_generated_kinds() {
    let mut shipped: Vec<PathBuf> = std::fs::read_dir(crd_dir())
        .expect("gateway-api-crds/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    shipped.sort();
    let mut kinds = BTreeSet::new();
    for file in &shipped {
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(&std::fs::read_to_string(file).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!(crd.spec.group, GROUP);
        kinds.insert(crd.spec.names.kind.clone());
    }
    // The kinds of `gateway/src/third_party`: the tenant kinds and the
    // operator's GatewayClass.
    let mut expected: BTreeSet<String> = ObjectKind::ALL
        .into_iter()
        .filter(|k| k.is_gateway_api())
        .map(|k| k.as_str().to_string())
        .collect();
    expected.insert("GatewayClass".into());
    assert_eq!(kinds, expected);
    // Unmodified: each file equals the upstream one of the channel the
    // types were generated from (gateway/generate.sh).
    let upstream = repo().join("../shared/conformance-upstream/gateway-api/config/crd");
    if !upstream.is_dir() {
        eprintln!(
            "!!!!!!!! {} not present: the CRD copies were not compared !!!!!!!!",
            upstream.display()
        );
        return;
    }
    let generate = std::fs::read_to_string(repo().join("gateway/generate.sh")).unwrap();
    for file in &shipped {
        let name = file.file_name().unwrap().to_str().unwrap();
        let plural = name
            .strip_prefix("gateway.networking.k8s.io_")
            .and_then(|n| n.strip_suffix(".yaml"))
            .unwrap();
        let channel = generate
            .lines()
            .find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some("gen") && w.clone().nth(1) == Some(plural))
                    .then(|| w.next().unwrap().to_string())
            })
            .unwrap_or_else(|| panic!("{plural} is not generated by gateway/generate.sh"));
        let theirs = std::fs::read(upstream.join(&channel).join(name)).unwrap();
        assert!(
            std::fs::read(file).unwrap() == theirs,
            "{name} differs from upstream {channel}/{name}"
        );
    }
}

#[test]
fn crds_render_unless_skipped() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, "teapot-lb", &["--include-crds"]);
    // The Tenant CRD (crds/) comes first, as charts.rs expects.
    let first = of_kind(&docs, "CustomResourceDefinition").next().unwrap();
    assert_eq!(first["metadata"]["name"], "tenants.teapot.dev");
    let names = gateway_crd_names(&docs);
    assert_eq!(names.len(), 8, "{names:?}");
    for crd in of_kind(&docs, "CustomResourceDefinition").filter(|c| c["spec"]["group"] == GROUP) {
        let name = &crd["metadata"]["name"];
        assert_eq!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "{name}: deleting it on uninstall would delete every object of its kind"
        );
        // As rendered (through fromYaml/toYaml), still a valid CRD with
        // every version and its schema.
        let typed: CustomResourceDefinition =
            serde_json::from_value(crd.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            typed
                .spec
                .versions
                .iter()
                .any(|v| v.name == "v1" && v.served && v.schema.is_some()),
            "{name}: no served v1 with a schema"
        );
    }
    let skipped = render(
        &helm,
        "teapot-lb",
        &["--include-crds", "--set", "gatewayAPI.installCRDs=false"],
    );
    assert!(gateway_crd_names(&skipped).is_empty());
    assert_eq!(of_kind(&skipped, "CustomResourceDefinition").count(), 1);
}

#[test]
fn the_gateway_class_renders_on_request() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, "teapot-lb", &[]);
    assert_eq!(of_kind(&docs, "GatewayClass").count(), 0, "off by default");
    let docs = render(
        &helm,
        "teapot-lb",
        &["--set", "gatewayAPI.gatewayClass=true"],
    );
    let class = of_kind(&docs, "GatewayClass").next().expect("GatewayClass");
    let typed: GatewayClass = serde_json::from_value(class.clone()).expect("typed GatewayClass");
    assert_eq!(typed.metadata.name.as_deref(), Some(GATEWAY_CLASS));
    assert_eq!(typed.spec.controller_name, GATEWAY_CONTROLLER_NAME);
    assert!(typed.spec.parameters_ref.is_none());
}

#[test]
fn the_webhook_judges_every_gateway_api_kind() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, "teapot-lb", &[]);
    let config = of_kind(&docs, "ValidatingWebhookConfiguration")
        .next()
        .unwrap();
    let tenant_hook = config["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "tenant-objects.webhook.teapot.dev")
        .unwrap();
    let rule = tenant_hook["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| strs(&r["apiGroups"]) == [GROUP])
        .expect("a rule for the Gateway API group");
    assert_eq!(strs(&rule["apiVersions"]), ["v1"]);
    assert_eq!(strs(&rule["operations"]), ["CREATE", "UPDATE"]);
    // matchPolicy Equivalent: writes of older versions are converted to v1
    // and judged too.
    assert_eq!(tenant_hook["matchPolicy"], "Equivalent");
    let listed: BTreeSet<String> = strs(&rule["resources"]).into_iter().collect();
    let admitted: BTreeSet<String> = TENANT_RESOURCES.iter().map(|r| r.to_string()).collect();
    assert_eq!(listed, admitted);
    // Every kind the policy admits is one of them.
    for kind in ObjectKind::ALL.into_iter().filter(|k| k.is_gateway_api()) {
        let resource = format!("{}s", kind.as_str().to_ascii_lowercase());
        assert!(listed.contains(&resource), "{kind} not judged");
        assert_eq!(
            teapot_api::policy::object_kind(&format!("{GROUP}/v1"), kind.as_str()),
            Some(kind)
        );
    }
}

#[test]
fn lb_rbac_for_gateway_api() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, "teapot-lb", &[]);
    // The tenant agents: one more Role in each tenant namespace, bound to
    // the agent's ServiceAccount.
    let roles: Vec<&Value> = of_kind(&docs, "Role")
        .filter(|r| r["metadata"]["name"] == "teapot-agent-gateway-api")
        .collect();
    let tenant_namespaces: BTreeSet<String> = of_kind(&docs, "Tenant")
        .map(|t| {
            t["spec"]["namespace"]
                .as_str()
                .map(str::to_string)
                .unwrap_or(format!("tenant-{}", t["spec"]["cluster"].as_str().unwrap()))
        })
        .collect();
    assert!(!tenant_namespaces.is_empty());
    let role_namespaces: BTreeSet<String> = roles
        .iter()
        .map(|r| r["metadata"]["namespace"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(role_namespaces, tenant_namespaces);
    for role in &roles {
        let rules = rules_of(role);
        for resource in TENANT_RESOURCES {
            for verb in ["get", "list", "watch", "create", "patch", "delete"] {
                assert!(
                    grants(&rules, GROUP, resource, verb),
                    "agent: {verb} {resource}"
                );
            }
        }
        assert!(!grants(&rules, GROUP, "gatewayclasses", "create"));
        let ns = &role["metadata"]["namespace"];
        let bound = of_kind(&docs, "RoleBinding").any(|b| {
            b["metadata"]["namespace"] == *ns
                && b["roleRef"]["name"] == "teapot-agent-gateway-api"
                && b["subjects"][0]["name"] == "teapot-agent"
                && b["subjects"][0]["namespace"] == *ns
        });
        assert!(bound, "{ns}: the Role is not bound to the agent");
    }
    // Proxy and webhook read the tenant kinds, and write none of them.
    for component in ["proxy", "webhook"] {
        let read = of_kind(&docs, "ClusterRole")
            .find(|r| r["metadata"]["name"] == format!("teapot-{component}-read"))
            .unwrap();
        for resource in TENANT_RESOURCES {
            assert!(grants(&rules_of(read), GROUP, resource, "watch"));
        }
    }
    for role in of_kind(&docs, "ClusterRole").chain(of_kind(&docs, "Role")) {
        let name = role["metadata"]["name"].as_str().unwrap();
        if !name.starts_with("teapot-proxy") {
            continue;
        }
        for r in rules_of(role) {
            if strs(&r["apiGroups"]).contains(&GROUP.to_string()) {
                assert_eq!(strs(&r["verbs"]), ["list", "watch"], "{name}: {r}");
            }
        }
    }
    // Every rule of the file says why.
    let text =
        std::fs::read_to_string(repo().join("charts/teapot-lb/templates/rbac.yaml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("- apiGroups:") {
            let above = lines[..i].iter().rev().find(|l| !l.trim().is_empty());
            assert!(
                above.is_some_and(|l| l.trim_start().starts_with('#')),
                "rbac.yaml:{}: rule without a comment",
                i + 1
            );
        }
    }
}

#[test]
fn agent_rbac_for_gateway_api() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, "teapot-agent", &[]);
    let rules: Vec<Value> = of_kind(&docs, "ClusterRole").flat_map(rules_of).collect();
    for resource in &TENANT_RESOURCES[..6] {
        for verb in ["get", "list", "watch", "patch"] {
            assert!(grants(&rules, GROUP, resource, verb), "{verb} {resource}");
        }
        assert!(grants(
            &rules,
            GROUP,
            &format!("{resource}/status"),
            "patch"
        ));
        assert!(!grants(&rules, GROUP, resource, "delete"), "{resource}");
    }
    assert!(grants(&rules, GROUP, "referencegrants", "watch"));
    assert!(!grants(&rules, GROUP, "referencegrants", "patch"));
    assert!(grants(&rules, GROUP, "gatewayclasses", "create"));
    assert!(grants(&rules, GROUP, "gatewayclasses", "get"));
}
