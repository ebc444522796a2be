//! The direction of every arrow in docs/architecture.md, checked from the
//! sources: a wrong-way import or dependency fails here, not in review.
//!
//! - Crates: the webhook reaches no Pingora crate and not the proxy; the
//!   shipped binary's normal dependencies reach no testkit; model and
//!   source reach neither the proxy nor Pingora; announce reaches no
//!   Pingora, no kube and no other teapot crate but api; the DNS server
//!   (dns) reaches no Pingora, no kube and no other teapot crate.
//! - Modules of the proxy crate: `compile` imports neither `plane` nor
//!   `loops`; `plane` does not import `loops`.
//!
//! Crate edges are read from each workspace member's `[dependencies]`
//! (normal dependencies only: dev-dependencies do not ship). Pingora enters
//! the tree only through crates whose own manifest names it, so following
//! workspace crates is enough to know whether a crate links it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Package name -> its normal dependencies, for every workspace member.
fn workspace_graph() -> BTreeMap<String, Vec<String>> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members: Vec<String> = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("workspace members")
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect();
    let mut graph = BTreeMap::new();
    for member in members {
        let text = std::fs::read_to_string(root().join(&member).join("Cargo.toml")).unwrap();
        let mut name = None;
        let mut deps = Vec::new();
        let mut section = String::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_string();
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let key = key.trim();
            if section == "[package]" && key == "name" {
                name = Some(value.trim().trim_matches('"').to_string());
            } else if section == "[dependencies]" {
                deps.push(key.trim_end_matches(".workspace").to_string());
            }
        }
        graph.insert(name.expect("package name"), deps);
    }
    graph
}

/// Every crate `package` reaches through normal dependencies.
fn reaches(graph: &BTreeMap<String, Vec<String>>, package: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![package.to_string()];
    while let Some(p) = todo.pop() {
        for d in graph.get(&p).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

fn assert_not_reached(package: &str, forbidden: &[&str]) {
    let graph = workspace_graph();
    assert!(
        graph.contains_key(package),
        "{package} is a workspace member"
    );
    let reached = reaches(&graph, package);
    for f in forbidden {
        let hits: Vec<&String> = reached.iter().filter(|r| r.starts_with(f)).collect();
        assert!(
            hits.is_empty(),
            "{package} depends on {hits:?} (normal dependencies); docs/architecture.md says it must not"
        );
    }
}

#[test]
fn the_webhook_links_no_pingora_and_not_the_proxy() {
    assert_not_reached("teapot-webhook", &["pingora", "teapot-proxy"]);
}

#[test]
fn model_and_source_link_no_pingora_and_not_the_proxy() {
    assert_not_reached(
        "teapot-model",
        &["pingora", "teapot-proxy", "teapot-source"],
    );
    assert_not_reached("teapot-source", &["pingora", "teapot-proxy"]);
}

/// What the crates below the proxy that talk to the network (announce,
/// dns) must not reach: Pingora, Kubernetes, the proxy and its inputs.
const NO_KUBE_NO_PROXY: [&str; 6] = [
    "pingora",
    "kube",
    "k8s-openapi",
    "teapot-proxy",
    "teapot-model",
    "teapot-source",
];

#[test]
fn announce_links_no_pingora_no_kube_and_no_proxy() {
    assert_not_reached("teapot-announce", &NO_KUBE_NO_PROXY);
}

/// The DNS server serves a zone value; what goes in it (routes, replicas,
/// ACME challenges) is the proxy's business.
#[test]
fn dns_links_no_pingora_no_kube_and_no_proxy() {
    assert_not_reached(
        "teapot-dns",
        &[&NO_KUBE_NO_PROXY[..], &["teapot-api"]].concat(),
    );
}

/// The agent shares the Gateway API attachment rules with the proxy's
/// compile (`teapot_model::attachment`), not the proxy itself.
#[test]
fn the_agent_links_no_pingora_and_not_the_proxy() {
    assert_not_reached(
        "teapot-controller",
        &["pingora", "teapot-proxy", "teapot-source"],
    );
}

#[test]
fn the_shipped_binary_has_no_testkit() {
    assert_not_reached("teapot", &["teapot-testkit"]);
}

/// `crate::PART` paths in every `.rs` file below `dir`.
fn imports_below(dir: &Path, parts: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, line) in text.lines().enumerate() {
                // Doc comments may name a later part to say where a thing
                // goes; only code counts.
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                for part in parts {
                    if code.contains(&format!("crate::{part}")) {
                        found.push(format!("{}:{}: {}", path.display(), n + 1, code));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn compile_imports_neither_plane_nor_loops() {
    let src = root().join("proxy/src/compile");
    let wrong = imports_below(&src, &["plane", "loops", "server"]);
    assert!(wrong.is_empty(), "wrong-way imports:\n{}", wrong.join("\n"));
}

/// The L4 compile (TCP, UDP and TLS routes) and the HTTP Gateway compile
/// (HTTP and gRPC routes) are two route families side by side: what they
/// share (attachment rules, backends, conditions) lives below both, and
/// neither imports the other; only `compile::gateway_join` sees both.
#[test]
fn the_l4_and_http_gateway_compiles_do_not_import_each_other() {
    let l4 = imports_below(&root().join("proxy/src/compile/l4"), &["compile::gateway"]);
    assert!(
        l4.is_empty(),
        "L4 compile importing the HTTP one:\n{}",
        l4.join("\n")
    );
    let http = imports_below(&root().join("proxy/src/compile/gateway"), &["compile::l4"]);
    assert!(
        http.is_empty(),
        "HTTP compile importing the L4 one:\n{}",
        http.join("\n")
    );
}

#[test]
fn plane_does_not_import_loops() {
    let src = root().join("proxy/src/plane");
    let wrong = imports_below(&src, &["loops", "server"]);
    assert!(wrong.is_empty(), "wrong-way imports:\n{}", wrong.join("\n"));
}

#[test]
fn the_checks_see_a_wrong_way_import() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.rs"),
        "//! see crate::loops for who calls this\nuse crate::loops::reload::Recompile;\n",
    )
    .unwrap();
    let found = imports_below(dir.path(), &["loops"]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].ends_with("use crate::loops::reload::Recompile;"));

    let mut graph = BTreeMap::new();
    graph.insert("a".to_string(), vec!["b".to_string()]);
    graph.insert("b".to_string(), vec!["pingora-core".to_string()]);
    assert!(reaches(&graph, "a").contains("pingora-core"));
}
