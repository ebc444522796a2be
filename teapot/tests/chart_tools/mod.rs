//! What the chart tests (`charts.rs`, `charts_gateway.rs`,
//! `charts_observability.rs`) share: the repository root and the pinned
//! helm, rendering, and the checks every chart test applies.

#![allow(dead_code)] // each chart test uses a different subset

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The pinned helm (`scripts/helm.sh`), or `None` with a loud line when
/// there is none; `TEAPOT_REQUIRE_HELM=1` (CI) makes that a failure.
pub fn helm() -> Option<PathBuf> {
    let out = Command::new(repo().join("scripts/helm.sh"))
        .output()
        .expect("run scripts/helm.sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => Some(PathBuf::from(
            String::from_utf8(out.stdout).expect("utf-8 path").trim(),
        )),
        Some(2) if std::env::var_os("TEAPOT_REQUIRE_HELM").is_none() => {
            eprintln!(
                "\n!!!!!!!! SKIPPED: no helm binary ({}) !!!!!!!!\n\
                 !!!!!!!! the charts were NOT rendered or validated; run scripts/helm.sh !!!!!!!!\n",
                stderr.trim()
            );
            None
        }
        _ => panic!("scripts/helm.sh failed: {stderr}"),
    }
}

pub const NS: &str = "teapot-system";
pub const KUBE_VERSION: &str = "1.31.0";

pub fn chart(name: &str) -> PathBuf {
    repo().join("charts").join(name)
}

/// The chart's `ci/*.yaml` values files, sorted.
pub fn ci_values(chart_name: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart(chart_name).join("ci"))
        .expect("ci values")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no ci/*.yaml values in {chart_name}");
    files
}

/// `helm template` of `charts/<chart_name>` (release `teapot` for the LB
/// chart, `teapot-agent` for the agent's); Err(stderr) when helm refuses.
pub fn try_render(
    helm: &Path,
    chart_name: &str,
    args: &[&str],
) -> Result<Vec<serde_json::Value>, String> {
    use serde::Deserialize as _;
    let release = if chart_name == "teapot-lb" {
        "teapot"
    } else {
        "teapot-agent"
    };
    let out = Command::new(helm)
        .arg("template")
        .arg(release)
        .arg(chart(chart_name))
        .args(["--namespace", NS, "--kube-version", KUBE_VERSION])
        .args(args)
        .output()
        .expect("run helm template");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8(out.stdout).expect("utf-8 output");
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value =
            serde_yaml::Value::deserialize(doc).expect("helm printed YAML that does not parse");
        if !value.is_null() {
            docs.push(serde_json::to_value(&value).expect("YAML as JSON"));
        }
    }
    Ok(docs)
}

pub fn of_kind<'a>(
    docs: &'a [serde_json::Value],
    kind: &str,
) -> impl Iterator<Item = &'a serde_json::Value> {
    docs.iter().filter(move |d| d["kind"] == kind)
}

/// A JSON array of strings (empty when it is not one).
pub fn strs(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Each `- apiGroups:` line must follow a `#` comment line.
pub fn assert_rules_commented(text: &str, file: &str) {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("- apiGroups:") {
            let above = lines[..i].iter().rev().find(|l| !l.trim().is_empty());
            assert!(
                above.is_some_and(|l| l.trim_start().starts_with('#')),
                "{file}:{}: RBAC rule without a comment saying why",
                i + 1
            );
        }
    }
}
