//! The chart's Grafana dashboard and PrometheusRule, rendered
//! by the pinned helm (`scripts/helm.sh`, as in charts.rs):
//!
//! - off by default; on, each with every `ci/*.yaml` values file, `helm
//!   lint --strict` clean, the ConfigMap a valid `v1/ConfigMap` carrying
//!   the sidecar's label and dashboard JSON with the six sections;
//! - every alert and every dashboard query parses as PromQL: `promtool
//!   check rules` (Debian's `prometheus` package) over the rendered rule
//!   group, and over the dashboard's queries as recording rules;
//! - every `teapot_*` metric they read is one the proxy defines;
//! - each alert has its own switch; the schema refuses bad values.
//!
//! Without helm or promtool the tests print a loud SKIP, unless
//! `TEAPOT_REQUIRE_HELM=1` / `TEAPOT_REQUIRE_PROMTOOL=1` make it a failure.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::{Value, json};

use crate::chart_tools;
use chart_tools::{NS, helm, repo};

const ALERTS: [&str; 10] = [
    "tenant5xx",
    "upstreamConnectFailures",
    "certificates",
    "reloads",
    "webhook",
    "proxyReplicas",
    "bgpSessions",
    "unpooledAddresses",
    "announceErrors",
    "l2Replicas",
];

fn promtool() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("promtool"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("TEAPOT_REQUIRE_PROMTOOL").is_none(),
            "promtool not found (apt-get install prometheus)"
        );
        eprintln!(
            "\n!!!!!!!! SKIPPED: no promtool (apt-get install prometheus); PromQL NOT checked !!!!!!!!\n"
        );
    }
    found
}

fn render(helm: &Path, args: &[&str]) -> Vec<Value> {
    chart_tools::try_render(helm, "teapot-lb", args)
        .unwrap_or_else(|e| panic!("helm template {args:?}: {e}"))
}

const ON: [&str; 4] = [
    "--set",
    "observability.dashboards.enabled=true",
    "--set",
    "observability.prometheusRule.enabled=true",
];

fn with_values<'a>(values: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["-f", values.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    args
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<_> = docs
        .iter()
        .filter(|d| {
            d["kind"] == kind
                && d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("teapot-"))
        })
        .filter(|d| kind != "ConfigMap" || d["metadata"]["name"] == "teapot-dashboards")
        .collect();
    assert_eq!(found.len(), 1, "one {kind} expected");
    found[0]
}

/// The dashboard JSON of the rendered ConfigMap.
fn dashboard(docs: &[Value]) -> Value {
    let cm = one(docs, "ConfigMap");
    let typed: ConfigMap = serde_path_to_error::deserialize(cm.clone())
        .unwrap_or_else(|e| panic!("dashboard ConfigMap: {}: {}", e.path(), e.inner()));
    let labels = typed.metadata.labels.expect("labels");
    assert_eq!(
        labels.get("grafana_dashboard").map(String::as_str),
        Some("1")
    );
    let data = typed.data.expect("data");
    serde_json::from_str(&data["teapot-lb.json"]).expect("dashboard JSON parses")
}

/// Every PromQL query of the dashboard, Grafana's variables replaced by
/// what they stand for.
fn dashboard_queries(dash: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr").to_string();
            let expr = expr
                .replace("$__rate_interval", "5m")
                .replace("$namespace", ".*")
                .replace("$tenant", ".*");
            out.push((panel["title"].as_str().unwrap_or("?").to_string(), expr));
        }
    }
    out
}

fn rules_of(rule: &Value) -> Vec<&Value> {
    rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .collect()
}

/// `promtool check rules` over a rules file holding `groups`.
fn promtool_check(promtool: &Path, groups: &Value, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = write_yaml(dir.path(), "rules.yaml", groups);
    promtool_rules(promtool, "check", &file, what);
}

fn write_yaml(dir: &Path, name: &str, doc: &Value) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, serde_yaml::to_string(doc).unwrap()).unwrap();
    file
}

/// `promtool check rules FILE` or `promtool test rules FILE`, which must
/// pass.
fn promtool_rules(promtool: &Path, command: &str, file: &Path, what: &str) {
    let out = Command::new(promtool)
        .args([command, "rules"])
        .arg(file)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool {command} rules ({what}):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `teapot_*` metric names in a PromQL expression, without histogram
/// suffixes.
fn teapot_metrics(expr: &str, out: &mut BTreeSet<String>) {
    let mut rest = expr;
    while let Some(i) = rest.find("teapot_") {
        let name: String = rest[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[i + name.len()..];
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(&name);
        out.insert(base.to_string());
    }
}

#[test]
fn off_by_default() {
    let Some(helm) = helm() else { return };
    for values in chart_tools::ci_values("teapot-lb") {
        let docs = render(&helm, &with_values(&values, &[]));
        assert!(
            !docs
                .iter()
                .any(|d| d["kind"] == "PrometheusRule"
                    || d["metadata"]["name"] == "teapot-dashboards"),
            "{}: rendered while off",
            values.display()
        );
    }
}

#[test]
fn dashboard_and_rules_render_lint_and_parse_as_promql() {
    let Some(helm) = helm() else { return };
    let promtool = promtool();
    let mut used = BTreeSet::new();
    for values in chart_tools::ci_values("teapot-lb") {
        let docs = render(&helm, &with_values(&values, &ON));
        let label = values.display().to_string();

        // helm lint --strict with the same values (and the schema).
        let dir = tempfile::tempdir().unwrap();
        let on = dir.path().join("on.yaml");
        std::fs::write(
            &on,
            "observability:\n  dashboards: {enabled: true}\n  prometheusRule: {enabled: true, labels: {release: prometheus}}\n",
        )
        .unwrap();
        let lint = Command::new(&helm)
            .args(["lint", "--strict", "--namespace", NS, "-f"])
            .arg(&values)
            .arg("-f")
            .arg(&on)
            .arg(chart_tools::chart("teapot-lb"))
            .output()
            .expect("helm lint");
        assert!(
            lint.status.success(),
            "{label}: helm lint --strict:\n{}",
            String::from_utf8_lossy(&lint.stdout)
        );

        let dash = dashboard(&docs);
        let rows: Vec<&str> = dash["panels"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["type"] == "row")
            .filter_map(|p| p["title"].as_str())
            .collect();
        assert_eq!(
            rows,
            [
                "Fleet",
                "Per tenant",
                "ACME",
                "Reloads",
                "Webhook",
                "Announcement"
            ],
            "{label}"
        );
        let queries = dashboard_queries(&dash);
        assert!(queries.len() >= 20, "{label}: {} queries", queries.len());
        let vars: Vec<&str> = dash["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        assert_eq!(vars, ["datasource", "namespace", "tenant"]);

        let rule = one(&docs, "PrometheusRule");
        assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(rule["metadata"]["namespace"], NS);
        let rules = rules_of(rule);
        let names: BTreeSet<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
        for expected in [
            "TeapotTenant5xxRatioHigh",
            "TeapotUpstreamConnectFailures",
            "TeapotCertificateExpiringOrFailing",
            "TeapotAcmeFailing",
            "TeapotSecretCertificateExpiring",
            "TeapotManifestProblems",
            "TeapotNoSnapshot",
            "TeapotReloadFailing",
            "TeapotWebhookUnavailable",
            "TeapotWebhookRefusing",
            "TeapotProxyReplicasNotReady",
            "TeapotBgpSessionDown",
            "TeapotAnnounceAddressNotInPool",
            "TeapotAnnounceErrors",
            "TeapotL2ReplicaUnreachable",
            "TeapotL2LiveReplicasLow",
        ] {
            assert!(
                names.contains(expected),
                "{label}: no {expected} in {names:?}"
            );
        }
        let proxy_mode = if docs
            .iter()
            .any(|d| d["kind"] == "DaemonSet" && d["metadata"]["name"] == "teapot-proxy")
        {
            "daemonset"
        } else {
            "deployment"
        };
        let replicas = rules
            .iter()
            .find(|r| r["alert"] == "TeapotProxyReplicasNotReady")
            .unwrap();
        assert!(
            replicas["expr"]
                .as_str()
                .unwrap()
                .contains(&format!("{proxy_mode}=\"teapot-proxy\"")),
            "{label}: the replica alert watches the {proxy_mode}: {replicas}"
        );
        for r in &rules {
            let expr = r["expr"].as_str().expect("expr");
            assert!(
                expr.contains(&format!("namespace=\"{NS}\""))
                    || expr.contains("webhook.teapot.dev"),
                "{expr}"
            );
            teapot_metrics(expr, &mut used);
        }
        for (_, q) in &queries {
            teapot_metrics(q, &mut used);
        }

        if let Some(promtool) = &promtool {
            promtool_check(
                promtool,
                &json!({ "groups": rule["spec"]["groups"] }),
                &label,
            );
            let recording: Vec<Value> = queries
                .iter()
                .enumerate()
                .map(|(i, (title, q))| {
                    json!({ "record": format!("teapot:dashboard:{i}"), "expr": q, "labels": { "panel": title } })
                })
                .collect();
            promtool_check(
                promtool,
                &json!({ "groups": [{ "name": "dashboard", "rules": recording }] }),
                &format!("{label}: dashboard queries"),
            );
        }
    }

    // Every teapot metric read is one the proxy defines.
    let defined = ProxyMetrics::read();
    for misspelt in [
        "teapot_tenant_request_total",
        "teapot_l2_live_replica",
        "teapot_bgp_session_establish",
        "teapot_session_established",
        "teapot_bfd_session",
    ] {
        assert!(!defined.defines(misspelt), "{misspelt} passes as defined");
    }
    let unknown: Vec<_> = used.iter().filter(|m| !defined.defines(m)).collect();
    assert!(
        unknown.is_empty(),
        "metrics the proxy does not define: {unknown:?}"
    );
    for read in [
        "teapot_tenant_requests_total",
        "teapot_bgp_session_established",
        "teapot_l2_live_replicas",
        "teapot_bfd_session_up",
    ] {
        assert!(used.contains(read), "{read} not read: {used:?}");
    }
}

/// The sources that name the metrics of the proxy's /metrics.
struct ProxyMetrics {
    /// The registry (metrics.rs, the L4 metrics): names quoted without
    /// the `teapot_` prefix.
    registry: String,
    /// The announcement's text exposition (L2 and the BGP speaker, whose
    /// scrapes /metrics appends): full names, quoted or in a `# TYPE`
    /// line.
    exposition: String,
}

impl ProxyMetrics {
    fn read() -> Self {
        let read = |paths: &[&str]| {
            paths
                .iter()
                .map(|p| std::fs::read_to_string(repo().join(p)).unwrap())
                .collect::<String>()
        };
        ProxyMetrics {
            registry: read(&["proxy/src/plane/metrics.rs", "proxy/src/plane/l4/mod.rs"]),
            exposition: read(&[
                "proxy/src/loops/announce/view.rs",
                "announce/src/speaker.rs",
            ]),
        }
    }

    fn defines(&self, metric: &str) -> bool {
        let short = metric.trim_start_matches("teapot_");
        self.registry.contains(&format!("\"{short}\""))
            || self.exposition.contains(&format!("\"{metric}\""))
            || self.exposition.contains(&format!("# TYPE {metric} "))
    }
}

#[test]
fn each_alert_has_its_own_switch() {
    let Some(helm) = helm() else { return };
    let values = &chart_tools::ci_values("teapot-lb")[0];
    let count = |docs: &[Value]| rules_of(one(docs, "PrometheusRule")).len();
    let all = count(&render(&helm, &with_values(values, &ON)));
    for alert in ALERTS {
        let off = format!("observability.prometheusRule.alerts.{alert}.enabled=false");
        let mut args = ON.to_vec();
        args.extend(["--set", &off]);
        let n = count(&render(&helm, &with_values(values, &args)));
        assert!(n < all && n > 0, "{alert}: {n} of {all} rules left");
    }
}

/// The announcement alerts fire on the series a troubled fleet exports,
/// for the replica and peer concerned only, and stay quiet on a healthy
/// one (`promtool test rules` over the rendered group, annotations left
/// out since only the expressions are judged).
#[test]
fn announcement_alerts_fire_on_their_series() {
    let Some(helm) = helm() else { return };
    let Some(promtool) = promtool() else { return };
    let values = &chart_tools::ci_values("teapot-lb")[0];
    let docs = render(&helm, &with_values(values, &ON));
    let mut groups = one(&docs, "PrometheusRule")["spec"]["groups"].clone();
    for group in groups.as_array_mut().unwrap() {
        for rule in group["rules"].as_array_mut().unwrap() {
            rule.as_object_mut().unwrap().remove("annotations");
        }
    }
    let series = |name: &str, labels: &str, values: &str| json!({ "series": format!("{name}{{namespace=\"{NS}\",{labels}}}"), "values": values });
    // One minute a sample; a-* troubled, b-* healthy.
    let input_series = json!([
        series(
            "teapot_bgp_session_established",
            r#"pod="a",peer="192.0.2.1:179""#,
            "1x10 0x10"
        ),
        series(
            "teapot_bgp_session_established",
            r#"pod="b",peer="192.0.2.1:179""#,
            "1x20"
        ),
        series(
            "teapot_announce_unpooled_addresses",
            r#"pod="a""#,
            "0x5 2x15"
        ),
        series("teapot_announce_unpooled_addresses", r#"pod="b""#, "0x20"),
        series(
            "teapot_announce_errors_total",
            r#"pod="a",setting="lease""#,
            "0+1x20"
        ),
        series(
            "teapot_announce_errors_total",
            r#"pod="b",setting="interface lan""#,
            "3x20"
        ),
        series(
            "teapot_l2_bfd_session_up",
            r#"pod="a",replica="b""#,
            "1x5 0x15"
        ),
        series("teapot_l2_bfd_session_up", r#"pod="b",replica="a""#, "1x20"),
        series("teapot_l2_live_replicas", r#"pod="a""#, "1x20"),
        series("teapot_l2_live_replicas", r#"pod="b""#, "2x20"),
    ]);
    let firing = |alert: &str, labels: Value| {
        let mut labels = labels;
        labels["severity"] = json!("warning");
        json!({ "eval_time": "20m", "alertname": alert, "exp_alerts": [{ "exp_labels": labels }] })
    };
    let quiet = |alert: &str| json!({ "eval_time": "1m", "alertname": alert, "exp_alerts": [] });
    let mut alert_rule_test = vec![
        firing(
            "TeapotBgpSessionDown",
            json!({ "pod": "a", "peer": "192.0.2.1:179" }),
        ),
        firing("TeapotAnnounceAddressNotInPool", json!({ "pod": "a" })),
        firing(
            "TeapotAnnounceErrors",
            json!({ "pod": "a", "setting": "lease" }),
        ),
        firing(
            "TeapotL2ReplicaUnreachable",
            json!({ "pod": "a", "replica": "b" }),
        ),
        firing("TeapotL2LiveReplicasLow", json!({ "pod": "a" })),
    ];
    for alert in [
        "TeapotBgpSessionDown",
        "TeapotAnnounceAddressNotInPool",
        "TeapotL2ReplicaUnreachable",
    ] {
        alert_rule_test.push(quiet(alert));
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = write_yaml(dir.path(), "rules.yaml", &json!({ "groups": groups }));
    let suite = json!({
        "rule_files": [rules],
        "evaluation_interval": "1m",
        "tests": [{ "interval": "1m", "input_series": input_series, "alert_rule_test": alert_rule_test }],
    });
    let tests = write_yaml(dir.path(), "tests.yaml", &suite);
    promtool_rules(&promtool, "test", &tests, "announcement alerts");
}

#[test]
fn the_schema_refuses_bad_values() {
    let Some(helm) = helm() else { return };
    let values = &chart_tools::ci_values("teapot-lb")[0];
    for bad in [
        "observability.prometheusRule.alerts.tenant5xx.ratio=2",
        "observability.prometheusRule.alerts.webhook.for=soon",
        "observability.prometheusRule.alerts.bgpSessions.for=soon",
        "observability.prometheusRule.alerts.l2Replicas.enabled=maybe",
        "observability.prometheusRule.unknown=1",
        "observability.dashboards.label=",
    ] {
        let mut args = ON.to_vec();
        args.extend(["--set", bad]);
        let err = chart_tools::try_render(&helm, "teapot-lb", &with_values(values, &args))
            .expect_err(&format!("{bad} was accepted"));
        assert!(err.contains("observability"), "{bad}: {err}");
    }
}
