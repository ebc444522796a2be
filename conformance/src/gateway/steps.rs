//! A test's `steps`: its cases and status checks in the order upstream runs
//! them, with the object changes the test makes between them (a patch, a
//! deletion, an applied object or manifest), applied to the proxy's
//! manifests directory as the API server would apply them to a cluster.
//!
//! The cases and checks between two changes run together, as a test
//! without steps runs all of its own; a change waits for them, is written,
//! and waits for the proxy's next snapshot before what follows runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio::time::{Instant, sleep};

use super::super::data::{Change, Check, ObjectKey, Step, TestFile};
use super::super::manifests;
use super::super::outcome::CaseOutcome;
use super::super::report::rfc3339;
use super::super::status::Generations;
use super::{Fixture, POLL, RunConfig, generations};
use crate::admin::Status;

/// How long the proxy may take to swap in a snapshot after a change.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(20);

/// Whether the test's steps are well formed: every case and check index
/// exists, and every change says what it changes.
pub fn validate(test: &TestFile) -> Result<(), String> {
    for (n, step) in test.steps.iter().enumerate() {
        match step {
            Step::Case { case } if *case >= test.cases.len() => {
                return Err(format!("step {n}: no case {case}"));
            }
            Step::Check { check } if *check >= test.checks.len() => {
                return Err(format!("step {n}: no check {check}"));
            }
            Step::Change(Change::Apply {
                object_value,
                manifest,
                ..
            }) if object_value.is_none() == manifest.is_none() => {
                return Err(format!(
                    "step {n}: an apply names either an object or a manifest"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Cases and checks that run together (between two changes).
#[derive(Debug, Default)]
struct Group {
    cases: Vec<usize>,
    checks: Vec<usize>,
}

/// Runs the test's steps: (case outcomes in case order, without the
/// skipped ones; check outcomes in check order). A case or check the steps
/// do not name runs with the first group. A change that fails fails every
/// case and check after it, with the change's error.
pub(super) async fn run(
    fixture: &Fixture,
    config: &RunConfig,
    test: &TestFile,
    skip: &[usize],
) -> (Vec<CaseOutcome>, Vec<CaseOutcome>) {
    let mut groups = vec![Group::default()];
    let mut changes: Vec<&Change> = Vec::new();
    let (mut named_cases, mut named_checks) = (BTreeSet::new(), BTreeSet::new());
    for step in &test.steps {
        let group = groups.last_mut().expect("one group at least");
        match step {
            Step::Case { case } => {
                named_cases.insert(*case);
                group.cases.push(*case);
            }
            Step::Check { check } => {
                named_checks.insert(*check);
                group.checks.push(*check);
            }
            Step::Change(change) => {
                changes.push(change);
                groups.push(Group::default());
            }
        }
    }
    groups[0]
        .cases
        .extend((0..test.cases.len()).filter(|i| !named_cases.contains(i)));
    groups[0]
        .checks
        .extend((0..test.checks.len()).filter(|i| !named_checks.contains(i)));

    let mut state = Directory {
        dir: fixture.dir.path().to_path_buf(),
        cluster: fixture.cluster_only.clone(),
        before: None,
        generations: generations(&fixture.objects),
        written: 0,
        created: fixture.created,
        addresses: manifests::NetworkAddresses::for_pool(&config.l4_pool),
    };
    let mut cases: BTreeMap<usize, CaseOutcome> = BTreeMap::new();
    let mut checks: BTreeMap<usize, CaseOutcome> = BTreeMap::new();
    let mut failed: Option<String> = None;
    for (n, group) in groups.iter().enumerate() {
        let run_cases: Vec<usize> = group
            .cases
            .iter()
            .copied()
            .filter(|i| !skip.contains(i))
            .collect();
        if let Some(reason) = &failed {
            for &i in &run_cases {
                cases.insert(
                    i,
                    CaseOutcome {
                        name: super::case_name(&test.cases[i], i),
                        failure: Some(reason.clone()),
                    },
                );
            }
            for &i in &group.checks {
                checks.insert(
                    i,
                    CaseOutcome {
                        name: test.checks[i].name(),
                        failure: Some(reason.clone()),
                    },
                );
            }
        } else {
            let not_here: Vec<usize> = (0..test.cases.len())
                .filter(|i| !run_cases.contains(i))
                .collect();
            let group_checks: Vec<Check> = group
                .checks
                .iter()
                .map(|&i| test.checks[i].clone())
                .collect();
            let (case_outcomes, check_outcomes) = futures::join!(
                fixture.run_cases(config, test, &not_here),
                fixture.run_check_list(config, &group_checks, &state.generations)
            );
            cases.extend(run_cases.iter().copied().zip(case_outcomes));
            checks.extend(group.checks.iter().copied().zip(check_outcomes));
        }
        if failed.is_none()
            && let Some(change) = changes.get(n)
            && let Err(e) = state.apply(fixture, config, change).await
        {
            failed = Some(format!("after {}: {e}", change.describe()));
        }
    }
    (
        cases.into_values().collect(),
        checks.into_values().collect(),
    )
}

/// The manifests directory as the steps change it.
struct Directory {
    dir: PathBuf,
    /// Objects of the cluster the directory does not hold (workloads, the
    /// runner's pods), which a test reads too.
    cluster: Vec<Value>,
    /// Every object as the directory held it before the first change
    /// (`FromObject` values), read then.
    before: Option<BTreeMap<(String, String, String), Value>>,
    generations: Generations,
    written: usize,
    /// The manifests' `creationTimestamp` (seconds since the epoch).
    created: u64,
    /// What the harness's address placeholders become in applied objects.
    addresses: manifests::NetworkAddresses,
}

impl Directory {
    /// Writes one change and waits for the proxy's next snapshot.
    async fn apply(
        &mut self,
        fixture: &Fixture,
        config: &RunConfig,
        change: &Change,
    ) -> Result<(), String> {
        if self.before.is_none() {
            let objects = read_objects(&self.dir)?;
            let mut before: BTreeMap<Key, Value> = objects
                .into_iter()
                .map(|(key, (_, value))| (key, value))
                .collect();
            for value in &self.cluster {
                before.insert(object_key(value), value.clone());
            }
            self.before = Some(before);
        }
        let proxy = fixture
            .proxy
            .as_ref()
            .ok_or_else(|| "no proxy".to_string())?;
        let generation = snapshot_generation(proxy).await?;
        if !self.write(&config.upstream, change)? {
            // The test made no change: nothing to wait for.
            return Ok(());
        }
        let deadline = Instant::now() + RELOAD_TIMEOUT;
        loop {
            if snapshot_generation(proxy).await? > generation {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the proxy swapped in no snapshot within {RELOAD_TIMEOUT:?}"
                ));
            }
            sleep(POLL).await;
        }
    }

    /// Writes one change; false when a patch's `when` does not hold (the
    /// test skips it).
    fn write(&mut self, upstream: &Path, change: &Change) -> Result<bool, String> {
        let addresses = &self.addresses;
        match change {
            Change::Patch {
                object,
                json_patch,
                when,
            } => {
                let (path, mut value) = self.find(object)?;
                let before = value.clone();
                for op in json_patch {
                    for op in self.operations(op)? {
                        apply_operation(&mut value, &op)?;
                    }
                }
                if let Some(when) = when
                    && !holds(when, &value)?
                {
                    return Ok(false);
                }
                // The API server bumps the generation when the spec
                // changes; the proxy reports it as observedGeneration.
                if value.get("spec") != before.get("spec") {
                    let generation = bump_generation(&mut value);
                    self.generations.insert(key_of(object), generation);
                }
                write_atomically(&path, &value).map(|()| true)
            }
            Change::Delete { object } => {
                let (path, _) = self.find(object)?;
                self.generations.remove(&key_of(object));
                std::fs::remove_file(&path)
                    .map(|()| true)
                    .map_err(|e| format!("removing {}: {e}", path.display()))
            }
            Change::Apply {
                object_value: Some(value),
                ..
            } => {
                let value = self.resolve(value)?;
                let yaml: serde_yaml::Value = serde_json::from_value(value)
                    .map_err(|e| format!("the object is not YAML: {e}"))?;
                let object = manifests::substitute(yaml, addresses)?;
                self.put(object).map(|()| true)
            }
            Change::Apply {
                manifest: Some(manifest),
                ..
            } => {
                let path = upstream.join(manifest);
                let prepared =
                    manifests::prepare(&[path.as_path()], addresses).map_err(|e| e.to_string())?;
                if !prepared.backends.is_empty() {
                    return Err(format!(
                        "{manifest} adds workloads, which the runner starts only before the proxy"
                    ));
                }
                for object in prepared.objects {
                    self.put(object)?;
                }
                Ok(true)
            }
            Change::Apply { .. } => Err("an apply names neither an object nor a manifest".into()),
        }
    }

    /// Writes an object, over the file of the object of the same key when
    /// there is one.
    fn put(&mut self, object: manifests::Object) -> Result<(), String> {
        let key = ObjectKey {
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
        };
        let value =
            serde_json::to_value(&object.value).map_err(|e| format!("{}: {e}", key.describe()))?;
        let generation = value
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        self.generations.insert(key_of(&key), generation);
        let mut value = value;
        let path = match self.find(&key) {
            Ok((path, _)) => path,
            Err(_) => {
                // Created now, and after the manifests: their timestamps
                // have a second's precision, and the older object wins a
                // conflict (upstream sleeps a second before creating).
                let mut now = now_secs();
                while now <= self.created {
                    std::thread::sleep(Duration::from_millis(50));
                    now = now_secs();
                }
                if let Some(Value::Object(meta)) = value.get_mut("metadata") {
                    meta.entry("creationTimestamp")
                        .or_insert_with(|| rfc3339(now).into());
                }
                self.written += 1;
                self.dir.join(format!(
                    "step-{:03}-{}.yaml",
                    self.written,
                    object.kind.to_ascii_lowercase()
                ))
            }
        };
        write_atomically(&path, &value)
    }

    /// The file and value of an object in the directory.
    fn find(&self, key: &ObjectKey) -> Result<(PathBuf, Value), String> {
        read_objects(&self.dir)?
            .remove(&key_of(key))
            .ok_or_else(|| format!("{} is not in the manifests", key.describe()))
    }

    /// A value with its `{"FromObject": ...}` parts read.
    fn resolve(&self, value: &Value) -> Result<Value, String> {
        self.eval(value, &BTreeMap::new())
    }

    /// The operations one operation of the data stands for: itself with
    /// its values read, or, with `forEach` (`[{"Each": var, "In": list}]`,
    /// each list read with the elements bound before it), one `add` of its
    /// value for every combination of elements that passes each of its
    /// `where` predicates, in list order (as the test's nested loops
    /// append).
    fn operations(&self, op: &Value) -> Result<Vec<Value>, String> {
        let Some(for_each) = op.get("forEach") else {
            return Ok(vec![self.resolve(op)?]);
        };
        let Value::Array(for_each) = for_each else {
            return Err(format!("forEach is not a list: {for_each}"));
        };
        let mut combinations: Vec<Bindings> = vec![BTreeMap::new()];
        for each in for_each {
            let var = each
                .get("Each")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("a forEach entry without Each: {each}"))?;
            let source = each
                .get("In")
                .ok_or_else(|| format!("a forEach entry without In: {each}"))?;
            let mut next = Vec::new();
            for bound in &combinations {
                let Value::Array(items) = self.eval(source, bound)? else {
                    return Err(format!("forEach {var}: {source} is not a list"));
                };
                for item in items {
                    let mut bound = bound.clone();
                    bound.insert(var.to_string(), item);
                    next.push(bound);
                }
            }
            combinations = next;
        }
        let kind = op.get("op").cloned().unwrap_or(Value::Null);
        let path = op.get("path").cloned().unwrap_or(Value::Null);
        let template = op
            .get("value")
            .ok_or_else(|| format!("forEach {path} without a value"))?;
        let mut out = Vec::new();
        for bound in &combinations {
            let mut passes = true;
            for predicate in op
                .get("where")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !self.predicate(predicate, bound)? {
                    passes = false;
                    break;
                }
            }
            if passes {
                let value = self.eval(template, bound)?;
                out.push(serde_json::json!({"op": kind, "path": path, "value": value}));
            }
        }
        Ok(out)
    }

    /// A `where` predicate: `{"Func": name, "Args": [...]}` of the
    /// functions below, or `{"Not": predicate}`.
    fn predicate(&self, predicate: &Value, bound: &Bindings) -> Result<bool, String> {
        if let Some(inner) = predicate.get("Not") {
            return Ok(!self.predicate(inner, bound)?);
        }
        let func = predicate
            .get("Func")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("a predicate without Func: {predicate}"))?;
        let args = match predicate.get("Args") {
            Some(Value::Array(args)) => args
                .iter()
                .map(|a| self.eval(a, bound))
                .collect::<Result<Vec<_>, _>>()?,
            _ => Vec::new(),
        };
        let address = || -> Result<std::net::IpAddr, String> {
            match args.as_slice() {
                [Value::String(text)] => text
                    .parse()
                    .map_err(|_| format!("{func}: {text:?} is not an IP address")),
                _ => Err(format!("{func} takes one address, given {args:?}")),
            }
        };
        match func {
            // Go's netip: an IPv4-mapped IPv6 address is IPv6.
            "netip.Addr.Is4" => Ok(address()?.is_ipv4()),
            "netip.Addr.Is6" => Ok(address()?.is_ipv6()),
            other => Err(format!("the predicate {other} is not known to this runner")),
        }
    }

    /// A value of the data with its run-time parts read:
    /// `{"FromObject": ...}`, `{"Each": var, "Path": pointer}` (a field of
    /// an element a `forEach` bound) and `{"List": {Kind, Namespace,
    /// Selector}}` (the objects of the cluster of that kind and namespace
    /// whose labels the LabelSelector matches, by name, as the API server
    /// lists them).
    fn eval(&self, value: &Value, bound: &Bindings) -> Result<Value, String> {
        if let Value::Object(map) = value {
            if map.len() == 2
                && let (Some(Value::String(var)), Some(Value::String(path))) =
                    (map.get("Each"), map.get("Path"))
            {
                let element = bound
                    .get(var)
                    .ok_or_else(|| format!("{var} is bound by no forEach"))?;
                return element
                    .pointer(path)
                    .cloned()
                    .ok_or_else(|| format!("{var} has no {path}: {element}"));
            }
            if map.len() == 1
                && let Some(list) = map.get("List")
            {
                return self.list(list, bound);
            }
            if map.len() == 1 && map.contains_key("FromObject") {
                return self.read_from_object(&map["FromObject"]);
            }
        }
        match value {
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| Ok((k.clone(), self.eval(v, bound)?)))
                .collect::<Result<serde_json::Map<_, _>, String>>()
                .map(Value::Object),
            Value::Array(items) => items
                .iter()
                .map(|v| self.eval(v, bound))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            other => Ok(other.clone()),
        }
    }

    /// `{"List": {Kind, Namespace, Selector}}`: see [`Directory::eval`].
    fn list(&self, list: &Value, bound: &Bindings) -> Result<Value, String> {
        let text = |k: &str| {
            list.get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (kind, namespace) = (text("Kind"), text("Namespace"));
        let selector = match list.get("Selector") {
            Some(s) => self.eval(s, bound)?,
            None => Value::Null,
        };
        let mut objects: BTreeMap<Key, Value> = read_objects(&self.dir)?
            .into_iter()
            .map(|(key, (_, value))| (key, value))
            .collect();
        for value in &self.cluster {
            objects.insert(object_key(value), value.clone());
        }
        let mut found = Vec::new();
        for ((k, ns, _), value) in objects {
            if k == kind
                && (namespace.is_empty() || ns == namespace)
                && selects(&selector, value.pointer("/metadata/labels"))?
            {
                found.push(value);
            }
        }
        Ok(Value::Array(found))
    }

    /// `{"FromObject": {Kind, Namespace, Name, Path}}`: the object's value
    /// at `Path` as the cluster held it before the first change.
    fn read_from_object(&self, from: &Value) -> Result<Value, String> {
        let text = |k: &str| {
            from.get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let key = (text("Kind"), text("Namespace"), text("Name"));
        let object = self
            .before
            .as_ref()
            .and_then(|b| b.get(&key))
            .ok_or_else(|| {
                format!(
                    "FromObject: {} {}/{} is not in the manifests",
                    key.0, key.1, key.2
                )
            })?;
        object.pointer(&text("Path")).cloned().ok_or_else(|| {
            format!(
                "FromObject: {} {}/{} has no {}",
                key.0,
                key.1,
                key.2,
                text("Path")
            )
        })
    }
}

/// Seconds since the epoch.
pub(super) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// The object with `metadata.creationTimestamp` at `secs` unless it has
/// one, as the API server stamps every object it creates (conflicts
/// between Gateways and routes go to the oldest).
pub(super) fn created_at(value: &serde_yaml::Value, secs: u64) -> serde_yaml::Value {
    let mut value = value.clone();
    if let Some(serde_yaml::Value::Mapping(meta)) = value.get_mut("metadata") {
        let key = serde_yaml::Value::from("creationTimestamp");
        if !meta.contains_key(&key) {
            meta.insert(key, rfc3339(secs).into());
        }
    }
    value
}

/// The elements a `forEach` has bound, by name.
type Bindings = BTreeMap<String, Value>;

/// An object's key from its own kind and metadata.
fn object_key(value: &Value) -> Key {
    let text = |p: &str| {
        value
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name"),
    )
}

/// Whether a LabelSelector (`matchLabels`, `matchExpressions` with `In`,
/// `NotIn`, `Exists`, `DoesNotExist`) selects an object with `labels`; an
/// empty or absent selector selects every object, as
/// `metav1.LabelSelectorAsSelector` makes it.
fn selects(selector: &Value, labels: Option<&Value>) -> Result<bool, String> {
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    if let Some(Value::Object(want)) = selector.get("matchLabels") {
        for (k, v) in want {
            if label(k) != v.as_str() {
                return Ok(false);
            }
        }
    }
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expression.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> = expression
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let has = label(key);
        let ok = match expression.get("operator").and_then(Value::as_str) {
            Some("In") => has.is_some_and(|v| values.contains(&v)),
            Some("NotIn") => !has.is_some_and(|v| values.contains(&v)),
            Some("Exists") => has.is_some(),
            Some("DoesNotExist") => has.is_none(),
            other => return Err(format!("a label selector operator {other:?}")),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A patch's `when`: `{"NotEmpty": pointer}`, the patched object's list
/// (or map, or text) there is not empty; absent is empty, as Go's `len` of
/// a nil slice.
fn holds(when: &Value, value: &Value) -> Result<bool, String> {
    match when.get("NotEmpty").and_then(Value::as_str) {
        Some(path) => Ok(match value.pointer(path) {
            Some(Value::Array(items)) => !items.is_empty(),
            Some(Value::Object(map)) => !map.is_empty(),
            Some(Value::String(text)) => !text.is_empty(),
            Some(Value::Null) | None => false,
            Some(_) => true,
        }),
        None => Err(format!("a condition this runner does not know: {when}")),
    }
}

fn key_of(key: &ObjectKey) -> (String, String, String) {
    (key.kind.clone(), key.namespace.clone(), key.name.clone())
}

/// The snapshot generation `/status` reports.
async fn snapshot_generation(proxy: &teapot_testkit::process::ProxyProcess) -> Result<i64, String> {
    match proxy.admin_get("/status").await {
        Ok((200, body)) => Status::parse(&body)?
            .generation
            .ok_or_else(|| "no generation in /status".to_string()),
        Ok((code, body)) => Err(format!("GET /status answered {code}: {body}")),
        Err(e) => Err(format!("GET /status: {e}")),
    }
}

/// An object's (kind, namespace, name).
type Key = (String, String, String);

/// Every object of the manifests directory's files (one or more documents
/// each) by (kind, namespace, name), with its file.
fn read_objects(dir: &Path) -> Result<BTreeMap<Key, (PathBuf, Value)>, String> {
    let mut out = BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !name.ends_with(".yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_json::to_value(
                serde_yaml::Value::deserialize(document)
                    .map_err(|e| format!("{}: {e}", path.display()))?,
            )
            .map_err(|e| format!("{}: {e}", path.display()))?;
            let text = |p: &str| {
                value
                    .pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let key = (
                text("/kind"),
                text("/metadata/namespace"),
                text("/metadata/name"),
            );
            out.insert(key, (path.clone(), value));
        }
    }
    Ok(out)
}

/// `metadata.generation` + 1 (an object without one is at 1, as the API
/// server starts it); the new generation.
fn bump_generation(value: &mut Value) -> i64 {
    let generation = value
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        + 1;
    if let Some(Value::Object(meta)) = value.get_mut("metadata") {
        meta.insert("generation".into(), generation.into());
    }
    generation
}

/// Writes an object's file so the proxy never reads half of it: a hidden
/// file (which the proxy does not read) renamed over the file.
fn write_atomically(path: &Path, value: &Value) -> Result<(), String> {
    let text = serde_yaml::to_string(value).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let hidden = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&hidden, text).map_err(|e| format!("writing {}: {e}", hidden.display()))?;
    std::fs::rename(&hidden, path).map_err(|e| format!("renaming to {}: {e}", path.display()))
}

/// One JSON Patch operation (RFC 6902) of `add`, `replace` or `remove`,
/// or `keep` / `drop` (`{"op": "keep", "path", "where": {member: value}}`:
/// the list at `path` keeps, or loses, the elements with every member
/// given; what a Go loop filtering a list builds, which RFC 6902 has no
/// operation for). The list is the object's as it is now: a test filters
/// the list it has just read.
fn apply_operation(target: &mut Value, op: &Value) -> Result<(), String> {
    let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
    let path = op
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("a patch operation without a path: {op}"))?;
    if kind == "keep" || kind == "drop" {
        let Some(Value::Object(want)) = op.get("where") else {
            return Err(format!("{kind} {path} without a where"));
        };
        let Some(Value::Array(items)) = target.pointer_mut(path) else {
            return Err(format!("{kind} {path}: not a list"));
        };
        let keep = kind == "keep";
        items.retain(|item| want.iter().all(|(k, v)| item.get(k) == Some(v)) == keep);
        return Ok(());
    }
    let Some((parent_path, last)) = path.rsplit_once('/') else {
        return Err(format!("{path} is not a JSON pointer below the root"));
    };
    let last = last.replace("~1", "/").replace("~0", "~");
    let parent = target
        .pointer_mut(parent_path)
        .ok_or_else(|| format!("{parent_path} is not in the object"))?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| format!("{kind} {path} without a value"))
    };
    match (kind, parent) {
        ("add" | "replace", Value::Object(map)) => {
            if kind == "replace" && !map.contains_key(&last) {
                return Err(format!("replace {path}: no such member"));
            }
            map.insert(last, value()?);
            Ok(())
        }
        ("remove", Value::Object(map)) => map
            .remove(&last)
            .map(drop)
            .ok_or_else(|| format!("remove {path}: no such member")),
        (_, Value::Array(items)) => {
            let index = if last == "-" && kind == "add" {
                items.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i < items.len() + usize::from(kind == "add"))
                    .ok_or_else(|| format!("{path}: no index {last}"))?
            };
            match kind {
                "add" => items.insert(index, value()?),
                "replace" => items[index] = value()?,
                "remove" => {
                    items.remove(index);
                }
                _ => return Err(format!("unknown patch operation {kind:?}")),
            }
            Ok(())
        }
        (_, Value::Object(_)) => Err(format!("unknown patch operation {kind:?}")),
        _ => Err(format!("{parent_path} is neither an object nor a list")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn steps_read_as_cases_checks_and_changes() {
        let steps: Vec<Step> = serde_json::from_value(json!([
            {"check": 0},
            {"change": "patch", "kind": "Gateway", "namespace": "ns", "name": "gw",
             "jsonPatch": [{"op": "add", "path": "/spec/listeners/-", "value": {"name": "x"}}]},
            {"case": 1},
            {"change": "delete", "kind": "ReferenceGrant", "namespace": "ns", "name": "rg"},
            {"change": "apply", "kind": "ConfigMap", "namespace": "ns", "name": "cm",
             "object": {"kind": "ConfigMap"}},
            {"change": "apply", "manifest": "tests/x.yaml"},
        ]))
        .unwrap();
        assert_eq!(steps[0], Step::Check { check: 0 });
        assert_eq!(steps[2], Step::Case { case: 1 });
        assert!(
            matches!(&steps[1], Step::Change(Change::Patch { json_patch, .. }) if json_patch.len() == 1)
        );
        assert_eq!(
            steps[3],
            Step::Change(Change::Delete {
                object: ObjectKey {
                    kind: "ReferenceGrant".into(),
                    namespace: "ns".into(),
                    name: "rg".into()
                }
            })
        );
        assert!(matches!(
            &steps[4],
            Step::Change(Change::Apply {
                object_value: Some(_),
                ..
            })
        ));
        assert!(
            matches!(&steps[5], Step::Change(Change::Apply { manifest: Some(m), object_value: None, .. }) if m == "tests/x.yaml")
        );
    }

    #[test]
    fn json_patch_operations() {
        let mut object = json!({"spec": {"listeners": [{"name": "a"}], "rules": [{"backendRefs": [{"name": "v1"}]}]}});
        for op in [
            json!({"op": "add", "path": "/spec/listeners/-", "value": {"name": "b"}}),
            json!({"op": "add", "path": "/spec/rules/0/backendRefs/0/name", "value": "v2"}),
            json!({"op": "add", "path": "/spec/description", "value": "new"}),
            json!({"op": "replace", "path": "/spec/listeners/0", "value": {"name": "z"}}),
            json!({"op": "remove", "path": "/spec/listeners/1"}),
            json!({"op": "add", "path": "/spec/listeners/-", "value": {"name": "https"}}),
            json!({"op": "keep", "path": "/spec/listeners", "where": {"name": "z"}}),
            json!({"op": "add", "path": "/data/ca.crt", "value": ""}),
        ] {
            let result = apply_operation(&mut object, &op);
            if op["path"] == "/data/ca.crt" {
                assert!(result.unwrap_err().contains("/data is not in the object"));
            } else {
                result.unwrap();
            }
        }
        assert_eq!(
            object,
            json!({"spec": {"description": "new", "listeners": [{"name": "z"}], "rules": [{"backendRefs": [{"name": "v2"}]}]}})
        );
        let mut data = json!({"data": {"ca.crt": "PEM"}});
        apply_operation(
            &mut data,
            &json!({"op": "add", "path": "/data/ca.crt", "value": ""}),
        )
        .unwrap();
        assert_eq!(data, json!({"data": {"ca.crt": ""}}));
        assert!(
            apply_operation(
                &mut data,
                &json!({"op": "replace", "path": "/data/x", "value": 1})
            )
            .is_err()
        );
        assert!(
            apply_operation(&mut data, &json!({"op": "move", "path": "/data/ca.crt"})).is_err()
        );
        let mut gateway = json!({"spec": {"addresses": [
            {"type": "test/fake-invalid-type", "value": "x"},
            {"type": "IPAddress", "value": "192.0.2.1"},
            {"type": "IPAddress", "value": "127.48.0.254"},
        ]}});
        apply_operation(
            &mut gateway,
            &json!({"op": "drop", "path": "/spec/addresses", "where": {"value": "x"}}),
        )
        .unwrap();
        apply_operation(
            &mut gateway,
            &json!({"op": "drop", "path": "/spec/addresses", "where": {"value": "192.0.2.1"}}),
        )
        .unwrap();
        assert_eq!(
            gateway,
            json!({"spec": {"addresses": [{"type": "IPAddress", "value": "127.48.0.254"}]}})
        );
        assert!(
            apply_operation(
                &mut gateway,
                &json!({"op": "drop", "path": "/spec/addresses"})
            )
            .unwrap_err()
            .contains("without a where")
        );
    }

    #[test]
    fn manifests_are_stamped_as_created_unless_they_say_when() {
        let object: serde_yaml::Value =
            serde_yaml::from_str("kind: TCPRoute\nmetadata: {name: a}\n").unwrap();
        let stamped = created_at(&object, 0);
        assert_eq!(
            stamped["metadata"]["creationTimestamp"],
            "1970-01-01T00:00:00Z"
        );
        assert_eq!(
            created_at(&stamped, 86_400)["metadata"]["creationTimestamp"],
            "1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn generations_start_at_one_and_bump() {
        let mut object = json!({"metadata": {"name": "x"}});
        assert_eq!(bump_generation(&mut object), 2);
        assert_eq!(bump_generation(&mut object), 3);
        assert_eq!(object["metadata"]["generation"], 3);
    }

    #[test]
    fn changes_rewrite_remove_and_add_files_and_read_earlier_values() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("001-configmap-ns-ca.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ca, namespace: ns}\ndata: {ca.crt: PEM}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("002-httproute-ns-r.yaml"),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: ns}\nspec: {hostnames: [a]}\n",
        )
        .unwrap();
        let mut directory = Directory {
            dir: dir.path().to_path_buf(),
            cluster: Vec::new(),
            before: None,
            generations: Generations::new(),
            written: 0,
            created: now_secs(),
            addresses: manifests::NetworkAddresses::default(),
        };
        directory.before = Some(
            read_objects(dir.path())
                .unwrap()
                .into_iter()
                .map(|(k, (_, v))| (k, v))
                .collect(),
        );
        let config = Path::new("/nonexistent");
        let route = ObjectKey {
            kind: "HTTPRoute".into(),
            namespace: "ns".into(),
            name: "r".into(),
        };
        directory
            .write(
                config,
                &Change::Patch {
                    object: route.clone(),
                    json_patch: vec![
                        json!({"op": "add", "path": "/spec/hostnames/-", "value": "b"}),
                    ],
                    when: None,
                },
            )
            .unwrap();
        let (_, patched) = directory.find(&route).unwrap();
        assert_eq!(patched["spec"]["hostnames"], json!(["a", "b"]));
        assert_eq!(patched["metadata"]["generation"], 2);
        assert_eq!(directory.generations[&key_of(&route)], 2);
        // A copy of the CA made from the ConfigMap as it was.
        directory
            .write(
                config,
                &Change::Apply {
                    object: None,
                    object_value: Some(json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "copy", "namespace": "ns"},
                        "data": {"ca.crt": {"FromObject": {"Kind": "ConfigMap", "Namespace": "ns", "Name": "ca", "Path": "/data/ca.crt"}}},
                    })),
                    manifest: None,
                },
            )
            .unwrap();
        let copy = ObjectKey {
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: "copy".into(),
        };
        let (_, made) = directory.find(&copy).unwrap();
        assert_eq!(made["data"]["ca.crt"], "PEM");
        // Created after the manifests, to the second.
        let stamp = made["metadata"]["creationTimestamp"].as_str().unwrap();
        assert!(stamp > rfc3339(directory.created).as_str(), "{stamp}");
        // Emptying data is no spec change: no generation.
        directory
            .write(
                config,
                &Change::Patch {
                    object: copy.clone(),
                    json_patch: vec![json!({"op": "add", "path": "/data/ca.crt", "value": ""})],
                    when: None,
                },
            )
            .unwrap();
        let (_, emptied) = directory.find(&copy).unwrap();
        assert_eq!(emptied["data"]["ca.crt"], "");
        assert!(emptied["metadata"].get("generation").is_none());
        directory
            .write(
                config,
                &Change::Delete {
                    object: route.clone(),
                },
            )
            .unwrap();
        assert!(
            directory
                .find(&route)
                .unwrap_err()
                .contains("is not in the manifests")
        );
        assert!(!directory.generations.contains_key(&key_of(&route)));
        let files: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(files.len(), 2, "{files:?}");
        assert!(files.iter().all(|f| !f.starts_with('.')), "{files:?}");
    }

    /// HTTPRouteServiceTypes' EndpointSlices: the pods a Deployment's
    /// selector lists (from the cluster's objects, which the directory does
    /// not hold), each IPv4 address an endpoint, in list order; the IPv6
    /// slice gets none, so its patch is not made (`when`), and the file
    /// stays as it was.
    #[test]
    fn a_for_each_patch_adds_one_value_per_listed_element() {
        let dir = tempfile::tempdir().unwrap();
        let slice = |name: &str| {
            format!(
                "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}, namespace: ns}}\nports: [{{port: 3000}}]\n"
            )
        };
        std::fs::write(dir.path().join("001-s4.yaml"), slice("s4")).unwrap();
        std::fs::write(dir.path().join("002-s6.yaml"), slice("s6")).unwrap();
        let pod = |name: &str, app: &str, ips: &[&str]| {
            json!({"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": {"app": app}},
                   "status": {"podIPs": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>()}})
        };
        let mut directory = Directory {
            dir: dir.path().to_path_buf(),
            cluster: vec![
                json!({"kind": "Deployment", "metadata": {"name": "web", "namespace": "ns"},
                       "spec": {"selector": {"matchLabels": {"app": "web"}}}}),
                pod("web-b", "web", &["127.128.0.2", "fd00::2"]),
                pod("web-a", "web", &["127.128.0.1"]),
                pod("other", "other", &["127.128.0.3"]),
            ],
            before: None,
            generations: Generations::new(),
            written: 0,
            created: now_secs(),
            addresses: manifests::NetworkAddresses::default(),
        };
        let mut before: BTreeMap<Key, Value> = BTreeMap::new();
        for value in &directory.cluster {
            before.insert(object_key(value), value.clone());
        }
        directory.before = Some(before);
        let fill = |name: &str, family: &str| {
            let each = |var: &str, path: &str| json!({"Each": var, "Path": path});
            Change::Patch {
                object: ObjectKey {
                    kind: "EndpointSlice".into(),
                    namespace: "ns".into(),
                    name: name.into(),
                },
                json_patch: vec![
                    json!({"op": "add", "path": "/endpoints", "value": []}),
                    json!({"op": "add", "path": "/endpoints/-",
                        "forEach": [
                            {"Each": "pod", "In": {"List": {"Kind": "Pod", "Namespace": "ns", "Selector":
                                {"FromObject": {"Kind": "Deployment", "Namespace": "ns", "Name": "web", "Path": "/spec/selector"}}}}},
                            {"Each": "ip", "In": each("pod", "/status/podIPs")},
                        ],
                        "where": [{"Func": family, "Args": [each("ip", "/ip")]}],
                        "value": {"addresses": [each("ip", "/ip")], "targetRef": {"name": each("pod", "/metadata/name")}}}),
                ],
                when: Some(json!({"NotEmpty": "/endpoints"})),
            }
        };
        let config = Path::new("/nonexistent");
        assert!(
            directory
                .write(config, &fill("s4", "netip.Addr.Is4"))
                .unwrap()
        );
        let (_, s4) = directory
            .find(&ObjectKey {
                kind: "EndpointSlice".into(),
                namespace: "ns".into(),
                name: "s4".into(),
            })
            .unwrap();
        assert_eq!(
            s4["endpoints"],
            json!([
                {"addresses": ["127.128.0.1"], "targetRef": {"name": "web-a"}},
                {"addresses": ["127.128.0.2"], "targetRef": {"name": "web-b"}},
            ])
        );
        let six = std::fs::read_to_string(dir.path().join("002-s6.yaml")).unwrap();
        // One IPv6 address: made.
        assert!(
            directory
                .write(config, &fill("s6", "netip.Addr.Is6"))
                .unwrap()
        );
        std::fs::write(dir.path().join("002-s6.yaml"), &six).unwrap();
        directory
            .cluster
            .retain(|o| o["metadata"]["name"] != "web-b");
        // None: not made, the file as it was.
        assert!(
            !directory
                .write(config, &fill("s6", "netip.Addr.Is6"))
                .unwrap()
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("002-s6.yaml")).unwrap(),
            six
        );
        // A predicate the runner does not know fails the change, named.
        let error = directory
            .write(config, &fill("s4", "netip.Addr.IsLoopback"))
            .unwrap_err();
        assert!(error.contains("netip.Addr.IsLoopback"), "{error}");
    }

    #[test]
    fn label_selectors_match_as_kubernetes_does() {
        let labels = json!({"app": "web", "tier": "front"});
        let yes = |s: Value| selects(&s, Some(&labels)).unwrap();
        assert!(yes(json!({})));
        assert!(yes(json!({"matchLabels": {"app": "web"}})));
        assert!(!yes(json!({"matchLabels": {"app": "web", "tier": "back"}})));
        assert!(yes(
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "x"]}]})
        ));
        assert!(!yes(
            json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]})
        ));
        assert!(yes(
            json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]})
        ));
        assert!(!yes(
            json!({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]})
        ));
        assert!(
            selects(
                &json!({"matchExpressions": [{"key": "app", "operator": "Gt"}]}),
                Some(&labels)
            )
            .is_err()
        );
    }
}
