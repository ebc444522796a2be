//! The direction of every arrow in docs/architecture.md, checked from the
//! sources: a wrong-way import or dependency fails here, not in review.
//!
//! - Crates: the webhook reaches no Pingora crate and not the proxy; the
//!   shipped binary's normal dependencies reach no testkit; model and
//!   source reach neither the proxy nor Pingora; announce reaches no
//!   Pingora, no kube and no other teapot crate but api; the DNS server
//!   (dns) reaches no Pingora, no kube and no other teapot crate.
//! - Modules of the proxy crate: `live` (state that outlives snapshots)
//!   imports none of `compile`, `plane` and `loops`; `compile` imports
//!   neither `plane` nor `loops`; `plane` does not import `loops`.
//! - Files inside every crate: no import circle (a file reaching a file
//!   that reaches it back). A file reaches what its code names through
//!   `crate::`, `super::` and `self::` paths and child-module paths, both
//!   the file a path is written through (a re-export's) and the file that
//!   defines the item, so a circle written through a re-export is one. A
//!   type two files need moves below both instead.
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

/// The HTTP/1 engine is a codec and a loop over a socket (its client
/// socket type, `ClientTcp`, included): what a request means, and
/// Pingora's listeners and TLS, stay in the proxy.
#[test]
fn the_http1_engine_links_no_pingora_and_not_the_proxy() {
    assert_not_reached(
        "teapot-h1",
        &["pingora", "teapot-proxy", "teapot-model", "kube"],
    );
}

#[test]
fn the_shipped_binary_has_no_testkit() {
    assert_not_reached("teapot", &["teapot-testkit"]);
}

/// Every `.rs` file below `dir`, but those under `bin/` (a binary's own
/// sources are a crate of their own).
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "bin") {
                    todo.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// `crate::PART` paths in every `.rs` file below `dir`.
fn imports_below(dir: &Path, parts: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for path in rust_files(dir) {
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
    found
}

#[test]
fn compile_imports_neither_plane_nor_loops() {
    let src = root().join("proxy/src/compile");
    let wrong = imports_below(&src, &["plane", "loops", "server"]);
    assert!(wrong.is_empty(), "wrong-way imports:\n{}", wrong.join("\n"));
}

/// What outlives snapshots (endpoint health, tenant gates, rate tables)
/// sits below the compile that interns it and the request path that
/// updates it.
#[test]
fn live_state_imports_neither_compile_plane_nor_loops() {
    let src = root().join("proxy/src/live");
    let wrong = imports_below(&src, &["compile", "plane", "loops", "server"]);
    assert!(wrong.is_empty(), "wrong-way imports:\n{}", wrong.join("\n"));
}

/// The L4 compile (TCP, UDP and TLS routes) and the HTTP Gateway compile
/// (HTTP and gRPC routes) are two route families side by side: what they
/// share (attachment rules, backends, conditions) lives below both, and
/// neither imports the other; both fill `compile::api_status`, the one
/// Gateway API report below them, and only the compile driver hands the
/// L4 part of each Gateway to its render.
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

/// Every connection the request plane opens to a backend (forwarded,
/// HTTP/2 and h2c upstreams, mirrors, authentication and error-page
/// sub-requests) goes through the one connector, `teapot_h1::connect`:
/// one timeout rule, `TCP_NODELAY`, one account of a failure. Only the
/// connector itself and the L4 plane (raw TCP forwarding and its health
/// checks, on event loops of their own) open sockets; tests may.
#[test]
fn backend_connections_go_through_the_one_connector() {
    let mut files = rust_files(&root().join("proxy/src/plane"));
    files.extend(rust_files(&root().join("h1/src")));
    let l4 = root().join("proxy/src/plane/l4");
    let connector = root().join("h1/src/connect.rs");
    let mut wrong = Vec::new();
    for path in files {
        if path.starts_with(&l4) || path == connector {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for code in code_lines(&text) {
            if code.contains("TcpStream::connect") || code.contains("TcpSocket") {
                wrong.push(format!("{}: {}", path.display(), code));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "connecting around teapot_h1::connect:\n{}",
        wrong.join("\n")
    );
}

/// The L4 TCP data path runs on event loops of its own, off the async
/// runtime (docs/decisions.md, "The L4 TCP data path on event loops of its
/// own"): its code outside the tests names no tokio item, so nothing on a
/// connection's path goes back through tokio's reactor or scheduler.
#[test]
fn the_l4_tcp_data_path_does_not_use_the_async_runtime() {
    let path = root().join("proxy/src/plane/l4/tcp.rs");
    let text = std::fs::read_to_string(&path).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let wrong: Vec<String> = code
        .lines()
        .enumerate()
        .filter(|(_, line)| {
            let line = line.trim_start();
            !line.starts_with("//") && line.contains("tokio")
        })
        .map(|(n, line)| format!("{}:{}: {}", path.display(), n + 1, line.trim()))
        .collect();
    assert!(
        wrong.is_empty(),
        "tokio on the L4 TCP path:\n{}",
        wrong.join("\n")
    );
}

/// A source file's module path inside its crate: `plane/h2.rs` ->
/// `["plane", "h2"]`, `plane/mod.rs` -> `["plane"]`, `lib.rs` -> `[]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code lines of a file that count as its imports: comments skipped,
/// and nothing from its `mod tests` on.
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim_start)
        .take_while(|code| !code.starts_with("mod tests"))
        .filter(|code| !code.starts_with("//"))
}

/// Where the paths written in one file lead, as full paths inside the
/// crate: `crate::a::B` as it is, `super::` from the file's parent module,
/// `self::` and a bare child path (`auth::judge` in `policy/mod.rs`) from
/// the file's own module.
fn absolute_paths(
    code: &str,
    from: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < code.len() {
        let starts_word = bytes[at].is_ascii_alphabetic() || bytes[at] == b'_';
        let after_path = at > 0
            && (bytes[at - 1].is_ascii_alphanumeric()
                || bytes[at - 1] == b'_'
                || bytes[at - 1] == b':');
        if !starts_word || after_path {
            at += 1;
            continue;
        }
        let word: String = code[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let rest = &code[at + word.len()..];
        let Some(tail) = rest.strip_prefix("::") else {
            at += word.len();
            continue;
        };
        let base: Option<Vec<String>> = match word.as_str() {
            "crate" => Some(Vec::new()),
            "self" => Some(from.to_vec()),
            "super" => {
                // `super::super::x`: one level up per `super`.
                let mut base = from.to_vec();
                base.pop();
                let mut tail = tail;
                while let Some(more) = tail.strip_prefix("super::") {
                    base.pop();
                    tail = more;
                }
                found.extend(
                    paths_at(tail)
                        .into_iter()
                        .map(|p| [base.clone(), p].concat()),
                );
                at += word.len() + 2;
                continue;
            }
            child => {
                let mut m = from.to_vec();
                m.push(child.to_string());
                modules.contains(&m).then(|| from.to_vec())
            }
        };
        if let Some(base) = base {
            let tail = if word == "crate" || word == "self" {
                tail
            } else {
                &code[at..]
            };
            found.extend(
                paths_at(tail)
                    .into_iter()
                    .map(|p| [base.clone(), p].concat()),
            );
        }
        at += word.len() + 2;
    }
    found
}

/// Module -> the names it re-exports (`pub use a::B;`, `pub use a::{B, C}`)
/// and the full path each stands for, so an import through a re-export
/// counts for the file that defines the item.
fn re_exports(
    src: &Path,
    modules: &BTreeSet<Vec<String>>,
) -> BTreeMap<(Vec<String>, String), Vec<String>> {
    let mut found = BTreeMap::new();
    for file in rust_files(src) {
        let from = module_of(src, &file);
        let text = std::fs::read_to_string(&file).unwrap();
        for code in code_lines(&text) {
            let Some(used) = ["pub use ", "pub(crate) use ", "pub(super) use "]
                .iter()
                .find_map(|p| code.strip_prefix(p))
            else {
                continue;
            };
            for path in absolute_paths(used, &from, modules) {
                if let Some(name) = path
                    .last()
                    .filter(|n| n.as_str() != "self" && n.as_str() != "*")
                {
                    found.insert((from.clone(), name.clone()), path.clone());
                }
            }
        }
    }
    found
}

/// The files a full path leads to: the longest module on it that has a
/// file (the path as written: a circle written through a re-export is a
/// circle), and each file a re-export on the way stands for, to the one
/// that defines the item.
fn files_of(
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
    exports: &BTreeMap<(Vec<String>, String), Vec<String>>,
) -> Vec<Vec<String>> {
    let mut path = path.to_vec();
    let mut found = Vec::new();
    // A re-export of a re-export is followed too, a few steps at most.
    for _ in 0..8 {
        let module = (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|m| modules.contains(m))
            .unwrap_or_default();
        found.push(module.clone());
        let Some(name) = path.get(module.len()) else {
            break;
        };
        match exports.get(&(module.clone(), name.clone())) {
            Some(real) if real[..] != path[..=module.len()] => {
                path = [real.clone(), path[module.len() + 1..].to_vec()].concat();
            }
            _ => break,
        }
    }
    found
}

/// File -> the files of the same crate it reaches, in code (tests and
/// comments aside): through `crate::`, `super::` and `self::` paths and
/// child-module paths, followed through re-exports to the file that
/// defines the item. The file's own ancestors (`mod.rs`, `lib.rs`) do not
/// count for what they define themselves: a child reaching its parent's
/// items is how modules nest.
fn file_imports(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = rust_files(src);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    let exports = re_exports(src, &modules);
    let mut graph = BTreeMap::new();
    for file in &files {
        let from = module_of(src, file);
        let mut to = BTreeSet::new();
        let text = std::fs::read_to_string(file).unwrap();
        for code in code_lines(&text) {
            // A module's own declarations of its children are not uses.
            if code.starts_with("mod ")
                || code.starts_with("pub mod ")
                || code.starts_with("pub(crate) mod ")
            {
                continue;
            }
            for path in absolute_paths(code, &from, &modules) {
                for target in files_of(&path, &modules, &exports) {
                    if target != from && !from.starts_with(&target) {
                        to.insert(target);
                    }
                }
            }
        }
        graph.insert(from, to);
    }
    graph
}

/// The paths a `use` tree names from `text` on (what follows `crate::`):
/// `a::b::C` -> `[a, b, C]`; `a::{self, b::C, d}` -> `[a, self]`,
/// `[a, b, C]`, `[a, d]`.
fn paths_at(text: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = text;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => return true,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    false
                })
                .map_or(group.len(), |(i, _)| i);
            let mut items = Vec::new();
            let (mut depth, mut start) = (0, 0);
            for (i, c) in group[..end].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(&group[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            items.push(&group[start..end]);
            return items
                .into_iter()
                .flat_map(|item| paths_at(item.trim()))
                .map(|tail| [prefix.clone(), tail].concat())
                .collect();
        }
        let segment: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if segment.is_empty() {
            return vec![prefix];
        }
        rest = &rest[segment.len()..];
        prefix.push(segment);
        match rest.strip_prefix("::") {
            Some(more) => rest = more,
            None => return vec![prefix],
        }
    }
}

/// The import circles of `graph`, each as the files on it.
fn circles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    let reach = |start: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&Vec<String>> = graph[start].iter().collect();
        while let Some(m) = todo.pop() {
            if seen.insert(m.clone()) {
                todo.extend(graph.get(m).into_iter().flatten());
            }
        }
        seen
    };
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for start in graph.keys() {
        let from_start = reach(start);
        if !from_start.contains(start) {
            continue;
        }
        let on_circle: Vec<String> = graph
            .keys()
            .filter(|m| from_start.contains(*m) && reach(m).contains(start))
            .map(|m| m.join("::"))
            .collect();
        found.insert(on_circle);
    }
    found.into_iter().collect()
}

#[test]
fn no_crate_has_an_import_circle_between_its_files() {
    let root = root();
    let mut wrong = Vec::new();
    for package in workspace_graph().keys() {
        let dir = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|d| {
                std::fs::read_to_string(d.join("Cargo.toml"))
                    .is_ok_and(|t| t.contains(&format!("name = \"{package}\"")))
            });
        let Some(src) = dir.map(|d| d.join("src")).filter(|s| s.is_dir()) else {
            continue;
        };
        for circle in circles(&file_imports(&src)) {
            wrong.push(format!("{package}: {}", circle.join(" <-> ")));
        }
    }
    assert!(wrong.is_empty(), "import circles:\n{}", wrong.join("\n"));
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

    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("plane")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod plane;\n").unwrap();
    std::fs::write(src.join("plane/mod.rs"), "pub mod a;\npub mod b;\n").unwrap();
    std::fs::write(src.join("plane/a.rs"), "use crate::plane::b::B;\n").unwrap();
    std::fs::write(
        src.join("plane/b.rs"),
        "use crate::plane::{self, Thing};\nuse crate::{plane::{a::g, c}, Error};\n",
    )
    .unwrap();
    assert_eq!(
        circles(&file_imports(&src)),
        [vec!["plane::a".to_string(), "plane::b".to_string()]]
    );
    std::fs::write(src.join("plane/b.rs"), "use crate::plane::{self, Thing};\n").unwrap();
    assert!(circles(&file_imports(&src)).is_empty());

    // Through `super::`: b reaches a back.
    std::fs::write(src.join("plane/b.rs"), "use super::a::g;\n").unwrap();
    assert_eq!(
        circles(&file_imports(&src)),
        [vec!["plane::a".to_string(), "plane::b".to_string()]]
    );
    // Through a parent's re-export and its child path: `plane/mod.rs`
    // re-exports a's item and uses b; b names the item through the parent
    // (a circle written through the re-export), and a reaches b.
    std::fs::write(
        src.join("plane/mod.rs"),
        "pub mod a;\npub mod b;\npub use a::Thing;\nfn f() { b::g() }\n",
    )
    .unwrap();
    std::fs::write(src.join("plane/b.rs"), "use crate::plane::Thing;\n").unwrap();
    std::fs::write(src.join("plane/a.rs"), "use crate::plane::b::B;\n").unwrap();
    let graph = file_imports(&src);
    let plane = vec!["plane".to_string()];
    let (a, b) = (
        vec!["plane".to_string(), "a".to_string()],
        vec!["plane".to_string(), "b".to_string()],
    );
    assert!(graph[&plane].contains(&b), "a child path is an import");
    assert!(graph[&b].contains(&a), "a re-export is followed: {graph:?}");
    assert_eq!(
        circles(&graph),
        [vec!["plane::a".to_string(), "plane::b".to_string()]]
    );
}
