//! Defence in depth: the webhook's corpus of malicious objects, loaded by
//! the proxy's own manifests loader and tenant re-check. Every denied
//! object the proxy reads must stay out of the store (so it is never
//! routed), and every allowed one must stay in, with the exceptions below
//! that only admission can judge.

use std::path::{Path, PathBuf};

use ipnet::IpNet;
use teapot_model::manifests::load_dir;
use teapot_model::store::{Kind, NsName, ObjectKey, Store};
use teapot_model::tenancy::admit;

/// Attack classes that depend on the admission request itself, not on the
/// object: counts of objects the tenant already has (checked on create
/// only), the namespace of the request, fields the typed parse drops, and
/// admin-written Tenants.
const ADMISSION_ONLY: &[&str] = &[
    "more Ingresses than",
    "more Services than",
    "more L4 listeners than",
    "object claiming another tenant's namespace",
    "a field teapot does not know",
    // The proxy keeps a CA Secret's ca.crt alone: the other keys the
    // webhook refuses are never read, so what it serves is within the rules.
    "an Opaque CA Secret that also carries",
];

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../webhook/tests/corpus")
}

fn header(text: &str, name: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix(&format!("# {name}: ")))
        .map(str::to_string)
        .next()
}

/// Loads the corpus state plus one file and applies the tenant re-check.
fn load_with(file: &Path) -> (Store, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(corpus().join("state")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    // First in path order, so it replaces a state object of the same name
    // (an update), as the loader keeps the first definition.
    std::fs::copy(file, dir.path().join("00-under-test.yaml")).unwrap();
    let mut loaded = load_dir(dir.path(), &Store::default());
    let lb: Vec<IpNet> = vec![
        "10.96.0.0/12".parse().unwrap(),
        "192.168.100.0/24".parse().unwrap(),
    ];
    admit(&mut loaded, &Store::default(), "example.net", &lb);
    let problems = loaded.problems.iter().map(ToString::to_string).collect();
    (loaded.store, problems)
}

fn key_of(text: &str) -> Option<ObjectKey> {
    let value: serde_yaml::Value = serde_yaml::from_str(text).ok()?;
    let kind = Kind::from_type(
        value.get("apiVersion")?.as_str()?,
        value.get("kind")?.as_str()?,
    )?;
    let meta = value.get("metadata")?;
    Some(ObjectKey {
        kind,
        namespace: if kind.is_namespaced() {
            meta.get("namespace")
                .and_then(|n| n.as_str())
                .unwrap_or("default")
                .to_string()
        } else {
            String::new()
        },
        name: meta.get("name")?.as_str()?.to_string(),
    })
}

fn files(dir: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(corpus().join(dir))
        .unwrap_or_else(|e| panic!("corpus {dir}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    out.sort();
    out
}

#[test]
fn denied_objects_never_reach_the_route_table() {
    let (mut checked, mut skipped) = (0, 0);
    let mut leaked = Vec::new();
    for file in files("deny") {
        let text = std::fs::read_to_string(&file).unwrap();
        let attack = header(&text, "attack").unwrap_or_default();
        let update = header(&text, "operation").is_some_and(|o| o == "UPDATE");
        let Some(key) = key_of(&text) else {
            skipped += 1; // a kind the proxy does not read (Pod, ConfigMap): never loaded
            continue;
        };
        if key.kind == Kind::Tenant
            || update
            || ADMISSION_ONLY.iter().any(|a| attack.starts_with(a))
        {
            skipped += 1;
            continue;
        }
        let (store, problems) = load_with(&file);
        checked += 1;
        // A denied RouteTrafficPolicy stands in the store as its refusal
        // (metadata and targetRefs, nothing of the refused spec), so its
        // routes answer 503 instead of being served without it: fail
        // closed, not a leak.
        let stands_refused = key.kind == Kind::RouteTrafficPolicy
            && store
                .refused_route_traffic_policies
                .contains_key(&NsName::new(&key.namespace, &key.name));
        if store.contains(&key) && !stands_refused {
            leaked.push(format!(
                "{}: {attack} ({key}) problems: {problems:?}",
                file.display()
            ));
        }
    }
    println!("deny corpus: {checked} re-checked by the proxy, {skipped} admission-only or unread");
    assert!(checked >= 60, "only {checked} deny cases re-checked");
    assert!(
        leaked.is_empty(),
        "the proxy kept denied objects:\n{}",
        leaked.join("\n")
    );
}

#[test]
fn allowed_objects_are_kept() {
    let mut dropped = Vec::new();
    let mut checked = 0;
    for file in files("allow") {
        let text = std::fs::read_to_string(&file).unwrap();
        let Some(key) = key_of(&text) else { continue };
        if key.kind == Kind::Tenant {
            continue;
        }
        let (store, problems) = load_with(&file);
        checked += 1;
        if !store.contains(&key) {
            dropped.push(format!("{}: {key} problems: {problems:?}", file.display()));
        }
    }
    println!("allow corpus: {checked} kept by the proxy");
    assert!(checked >= 30, "only {checked} allow cases");
    assert!(
        dropped.is_empty(),
        "the proxy dropped admitted objects:\n{}",
        dropped.join("\n")
    );
}
