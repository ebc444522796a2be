//! The manifests source: a directory of Kubernetes YAML read into a [`Store`].
//!
//! Every `*.yaml`, `*.yml` and `*.json` file below the directory is read
//! (dot-files and dot-directories are skipped: editors' temporaries and the
//! `..data` indirection of ConfigMap volumes), in path order, each file as a
//! stream of YAML documents. A `v1 List` is unpacked.
//!
//! A document that does not parse or validate becomes a [`Problem`] naming
//! file, document, object and field, and is skipped; if the previous load
//! had a good version of that object, the good version stays (so a typo
//! in a live file never takes a route down).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::documents;
use crate::store::{Kind, ObjectKey, Origin, Store};
use crate::validate;

/// Something wrong with one document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub file: PathBuf,
    pub document: usize,
    /// `Kind namespace/name`, when the document got that far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// Field path such as `spec.rules[0].host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub message: String,
    /// Whether the previous good version of the object is still served.
    pub kept_previous: bool,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} document {}", self.file.display(), self.document)?;
        if let Some(o) = &self.object {
            write!(f, " {o}")?;
        }
        if let Some(field) = &self.field {
            write!(f, " field {field}")?;
        }
        write!(f, ": {}", self.message)?;
        if self.kept_previous {
            f.write_str(" (keeping the last good version)")?;
        }
        Ok(())
    }
}

/// The result of reading a directory.
#[derive(Debug, Default)]
pub struct Loaded {
    pub store: Store,
    pub problems: Vec<Problem>,
}

/// Reads every manifest below `dir`. `previous` is the last store, whose
/// objects stand in for documents that fail now.
pub fn load_dir(dir: &Path, previous: &Store) -> Loaded {
    load_dir_cached(dir, previous, &mut FileCache::default())
}

/// The files of the last load whose objects the next load takes over
/// without parsing them again, while their text stays the same: a change
/// in one tenant's file does not re-read every tenant's, and unchanged objects stay the same `Arc`s, which is what
/// lets the compile reuse their namespace's parts.
///
/// Only a clean file is taken over: one that had no problem at all (after
/// the tenant re-check too, see [`FileCache::settle`]), so what it yields
/// never depended on the previous store. Any other file is parsed again.
/// The text is compared by length and a 64-bit SipHash; a file is
/// operator-written configuration, never a tenant's.
#[derive(Debug, Default)]
pub struct FileCache {
    files: HashMap<PathBuf, CachedFile>,
    taken_over: usize,
    /// What the last load may have changed: the keys of every file it
    /// parsed again (before and after) and of every file gone; `None` when
    /// unknown (the first load, an unreadable directory).
    changed: Option<Vec<ObjectKey>>,
    /// A file could not be read last time (its objects were kept, and
    /// which they are is not cached): the next load's changes are unknown.
    unread: bool,
    /// The objects named by the last load's problems (`Kind ns/name`): a
    /// duplicate or a refusal there makes which definition serves depend
    /// on other files, so [`read_slice_files`] leaves them to a whole load.
    problem_objects: std::collections::HashSet<String>,
    /// Loads [`load_named`] made instead of a whole one.
    by_name: usize,
}

/// Each document's hash of a file, in document order, where the file's
/// documents found by their markers are the parser's
/// ([`crate::documents`]).
type DocumentHashes = Option<Box<[u64]>>;

#[derive(Debug)]
struct CachedFile {
    len: usize,
    hash: u64,
    /// What the file's documents defined, in document order.
    keys: Vec<(ObjectKey, usize)>,
    /// Each document's hash, for a file of EndpointSlices alone: a
    /// rewrite of it parses only the documents that changed.
    documents: DocumentHashes,
    clean: bool,
}

impl FileCache {
    /// Marks which files of the load just made are clean, once `problems`
    /// is final (after [`crate::tenancy::admit`]).
    pub fn settle(&mut self, problems: &[Problem]) {
        for file in self.files.values_mut() {
            file.clean = true;
        }
        self.problem_objects = problems.iter().filter_map(|p| p.object.clone()).collect();
        for p in problems {
            if let Some(file) = self.files.get_mut(&p.file) {
                file.clean = false;
            }
        }
    }

    /// Whether every one of `paths` that the last load read held
    /// EndpointSlices alone (and at least one did): a change of them is
    /// likely one [`read_slice_files`] applies in place.
    pub fn holds_slices_alone(&self, paths: &[PathBuf]) -> bool {
        let mut any = false;
        for path in paths {
            if let Some(file) = self.files.get(path) {
                if !file.clean || file.keys.iter().any(|(k, _)| k.kind != Kind::EndpointSlice) {
                    return false;
                }
                any = true;
            }
        }
        any
    }

    /// Whether the problems [`FileCache::settle`] was last given name
    /// `key`: whatever the source, a reader that settles the cache after
    /// each load asks here which objects a load, not a change in place,
    /// must decide (a kube reader's refused EndpointSlices too).
    pub fn names_problem(&self, key: &ObjectKey) -> bool {
        !self.problem_objects.is_empty() && self.problem_objects.contains(&key.to_string())
    }

    /// Loads made from the named files alone ([`load_named`]).
    pub fn loads_by_name(&self) -> usize {
        self.by_name
    }

    /// Files the last load took over unparsed.
    pub fn taken_over(&self) -> usize {
        self.taken_over
    }

    /// The objects the last load may have changed (added, replaced or
    /// removed): every other object is the previous store's, the same
    /// `Arc`. `None` when that is not known.
    pub fn changed(&self) -> Option<&[ObjectKey]> {
        self.changed.as_deref()
    }

    /// The clean entry for `file` whose text is `text`, and whose every
    /// object `previous` still holds from that file.
    fn unchanged(&self, file: &Path, text: &str, previous: &Store) -> Option<&CachedFile> {
        let cached = self.files.get(file)?;
        let whole = cached.clean
            && cached.len == text.len()
            && cached.hash == text_hash(text)
            && cached
                .keys
                .iter()
                .all(|(key, _)| previous.origin(key).is_some_and(|o| *o.file == *file));
        whole.then_some(cached)
    }
}

fn text_hash(text: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// EndpointSlice changes read from the files a watcher named
/// ([`read_slice_files`]), and the cache entries they leave.
#[derive(Debug, Default)]
pub struct SliceFiles {
    pub changes: Vec<crate::store::SliceChange>,
    /// Per file read: its new entry, `None` when it is gone.
    entries: Vec<(PathBuf, Option<CachedFile>)>,
}

impl SliceFiles {
    /// Records the files read as the cache's, once their changes are
    /// applied to the store the cache describes.
    pub fn settle(&mut self, cache: &mut FileCache) {
        for (file, entry) in self.entries.drain(..) {
            match entry {
                Some(entry) => cache.files.insert(file, entry),
                None => cache.files.remove(&file),
            };
        }
        cache.changed = None;
        cache.taken_over = 0;
    }
}

/// Reads only `paths`, the files under `dir` a watcher says were written
/// whole or removed, when what they held at the last load and what they
/// hold now are EndpointSlices alone, every one of them clean: the most
/// frequent change of a fleet (a tenant's pods moving) then costs the
/// files changed, not the directory (docs/capacity.md). `None` when a
/// whole load is needed to say what changed: anything but an
/// EndpointSlice written, removed or named by a path; a directory, a
/// dot-path or an unreadable file named; a document that does not parse;
/// an object defined twice or named by a standing problem; no whole load
/// yet. A path that is not a manifest and not a directory is skipped, as
/// the whole load skips it.
pub fn read_slice_files(
    dir: &Path,
    paths: &[PathBuf],
    store: &Store,
    cache: &FileCache,
) -> Option<SliceFiles> {
    if cache.files.is_empty() || cache.unread {
        return None;
    }
    let mut out = SliceFiles::default();
    let mut added: std::collections::HashSet<ObjectKey> = std::collections::HashSet::new();
    for path in paths {
        if !named_manifest(dir, path).ok()? {
            continue;
        }
        let cached = cache.files.get(path);
        if cached.is_some_and(|c| !c.clean) {
            return None;
        }
        let old: &[(ObjectKey, usize)] = cached.map_or(&[], |c| &c.keys);
        if old
            .iter()
            .any(|(key, _)| key.kind != Kind::EndpointSlice || cache.names_problem(key))
        {
            return None;
        }
        let text = match std::fs::read_to_string(path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(_) => return None,
        };
        let Some(text) = text else {
            out.changes
                .extend(old.iter().map(|(key, _)| crate::store::SliceChange {
                    id: crate::store::NsName::new(key.namespace.clone(), key.name.clone()),
                    slice: None,
                }));
            out.entries.push((path.clone(), None));
            continue;
        };
        let hash = text_hash(&text);
        if cached.is_some_and(|c| c.len == text.len() && c.hash == hash) {
            continue;
        }
        let mut loaded = Loaded::default();
        let file: Arc<Path> = Arc::from(path.as_path());
        // The keys of the documents written as they were, which keep their
        // objects unparsed (crate::documents); the others are parsed.
        let mut keys = Vec::with_capacity(old.len());
        let split = documents::split(&text);
        let now: DocumentHashes = split
            .as_ref()
            .map(|d| d.iter().map(|d| text_hash(d)).collect());
        let before = cached.and_then(|c| c.documents.as_deref());
        let documents = match (split, now, before) {
            (Some(texts), Some(now), Some(before)) if now.len() == before.len() => {
                let mut old_keys = old.iter().peekable();
                for (index, text) in texts.iter().enumerate() {
                    let same = now[index] == before[index];
                    while let Some((key, document)) = old_keys.next_if(|(_, d)| *d <= index) {
                        if same && *document == index {
                            keys.push((key.clone(), index));
                        }
                    }
                    // One document each, as the whole file's parse read it.
                    if !same && load_documents(&file, text, index, store, &mut loaded) != 1 {
                        return None;
                    }
                }
                Some(now)
            }
            (_, now, _) => {
                let count = load_documents(&file, &text, 0, store, &mut loaded);
                now.filter(|now| now.len() == count)
            }
        };
        if !loaded.problems.is_empty() || loaded.store.len() != loaded.store.endpoint_slices.len() {
            return None;
        }
        loaded
            .store
            .for_each_key(|key, origin| keys.push((key, origin.document)));
        keys.sort_by_key(|(_, document)| *document);
        // By hash: a file of 100 slices compared pairwise cost more than
        // parsing the one that changed.
        let old_set: std::collections::HashSet<&ObjectKey> = old.iter().map(|(k, _)| k).collect();
        for (key, _) in &keys {
            let defined_here = old_set.contains(key);
            // Defined by another file, now or by another path of this
            // change: the whole load says which definition serves.
            if (!defined_here && store.contains(key))
                || cache.names_problem(key)
                || !added.insert(key.clone())
            {
                return None;
            }
        }
        let new_set: std::collections::HashSet<&ObjectKey> = keys.iter().map(|(k, _)| k).collect();
        for (key, _) in old {
            if !new_set.contains(key) {
                out.changes.push(crate::store::SliceChange {
                    id: crate::store::NsName::new(key.namespace.clone(), key.name.clone()),
                    slice: None,
                });
            }
        }
        out.changes
            .extend(loaded.store.endpoint_slices.into_iter().map(|(id, slice)| {
                crate::store::SliceChange {
                    id,
                    slice: Some(slice),
                }
            }));
        let entry = CachedFile {
            len: text.len(),
            hash,
            keys,
            documents,
            clean: true,
        };
        out.entries.push((path.clone(), Some(entry)));
    }
    Some(out)
}

/// Whether `path`, which a watcher named under `dir`, is a manifest to
/// read (`Ok(true)`) or a path the whole load skips (`Ok(false)`);
/// `Err` (why) when only a whole load can follow it: outside `dir`, a
/// dot-path, a directory, or gone and perhaps a directory of manifests.
fn named_manifest(dir: &Path, path: &Path) -> Result<bool, &'static str> {
    let relative = path
        .strip_prefix(dir)
        .map_err(|_| "a path outside the directory")?;
    if relative
        .components()
        .any(|c| c.as_os_str().to_string_lossy().starts_with('.'))
    {
        return Err("a dot-path");
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err("a directory"),
        Ok(_) => Ok(is_manifest(path)),
        Err(_) if !is_manifest(path) => Err("a path gone that may have been a directory"),
        Err(_) => Ok(true),
    }
}

/// [`load_dir_cached`] for a change a watcher named (`paths`, written
/// whole or removed): the objects of the named files replaced in `store`
/// by what they hold now, and nothing else read or copied. A whole load
/// reads and hashes every file and takes each object over by key, and a
/// copy of the store walks every map node and key, each of which at 100k
/// Ingresses cost more than the compile of the change
/// (benches/route-table.md, "Where a route change goes", "A route change
/// changes the store in place"). The store left is the one the whole load
/// would make; what is returned is what it held before for the objects
/// the named files held or hold (absent: new), which is all the tenant
/// check needs to put a refused object's previous version back, and all
/// a reader needs to compare the change with.
///
/// `Err` (why; nothing changed in `cache`) when only a whole load can say what
/// serves: no whole load yet or a file unread at the last one, any problem
/// standing from it, a named directory, dot-path or unreadable file, a
/// document that does not parse or validate, an object defined by another
/// file or by two of the named ones. A named path that is not a manifest
/// is skipped, as the whole load skips it.
pub fn load_named(
    dir: &Path,
    paths: &[PathBuf],
    store: &mut Store,
    cache: &mut FileCache,
) -> Result<Store, &'static str> {
    let previous = &*store;
    if cache.files.is_empty()
        || cache.unread
        || !cache.problem_objects.is_empty()
        || cache.files.values().any(|f| !f.clean)
    {
        return Err("no clean whole load to build on");
    }
    // Per named file that changed: its keys before, and what it holds now
    // (`None`: gone).
    let mut read: Vec<(&PathBuf, Option<(Loaded, CachedFile)>)> = Vec::new();
    let mut added: std::collections::HashSet<ObjectKey> = std::collections::HashSet::new();
    for path in paths {
        if !named_manifest(dir, path)? || read.iter().any(|(p, _)| *p == path) {
            continue;
        }
        let cached = cache.files.get(path);
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if cached.is_some() {
                    read.push((path, None));
                }
                continue;
            }
            Err(_) => return Err("a file unreadable"),
        };
        let hash = text_hash(&text);
        if cached.is_some_and(|c| c.len == text.len() && c.hash == hash) {
            continue;
        }
        let mut part = Loaded::default();
        let count = load_documents(&Arc::from(path.as_path()), &text, 0, previous, &mut part);
        if !part.problems.is_empty() {
            return Err("a document with a problem");
        }
        let mut keys = Vec::with_capacity(part.store.len());
        part.store
            .for_each_key(|key, origin| keys.push((key, origin.document)));
        keys.sort_by_key(|(_, document)| *document);
        for (key, _) in &keys {
            // Defined by another file (one of the named ones included, as
            // an object moved between two): the whole load says which
            // definition serves.
            let elsewhere = previous
                .origin(key)
                .is_some_and(|origin| *origin.file != **path);
            if elsewhere || !added.insert(key.clone()) {
                return Err("an object defined by another file too");
            }
        }
        let documents = slice_documents(&keys, || document_hashes(&text, count));
        let entry = CachedFile {
            len: text.len(),
            hash,
            keys,
            documents,
            clean: false,
        };
        read.push((path, Some((part, entry))));
    }
    // Every check is behind: from here on the store changes.
    let mut before = Store::default();
    let mut changed = Vec::new();
    let parsed = read.iter().filter(|(_, now)| now.is_some()).count();
    for (path, now) in read {
        if let Some(old) = cache.files.remove(path) {
            for (key, _) in old.keys {
                before.retain_from(store, &key);
                store.remove(&key);
                changed.push(key);
            }
        }
        // A key new to this file is new to the store: one another file
        // defined was refused above.
        if let Some((part, entry)) = now {
            for (key, _) in &entry.keys {
                store.retain_from(&part.store, key);
                changed.push(key.clone());
            }
            cache.files.insert(path.clone(), entry);
        }
    }
    // Every file is clean until the tenant check says otherwise
    // (`FileCache::settle`), as after a whole load.
    cache.taken_over = cache.files.len() - parsed;
    cache.changed = Some(changed);
    cache.by_name += 1;
    Ok(before)
}

/// [`load_dir`], taking unchanged clean files over from `cache` and leaving
/// this load's files there (call [`FileCache::settle`] when the problems
/// are final).
pub fn load_dir_cached(dir: &Path, previous: &Store, cache: &mut FileCache) -> Loaded {
    let mut loaded = Loaded::default();
    let mut files = Vec::new();
    // The first load changes everything.
    let mut changed = (!cache.files.is_empty() && !cache.unread).then(Vec::new);
    cache.changed = None;
    cache.unread = true;
    if let Err(e) = collect_files(dir, &mut files) {
        loaded.problems.push(Problem {
            file: dir.to_path_buf(),
            document: 0,
            object: None,
            field: None,
            message: format!("cannot read directory: {e}"),
            kept_previous: false,
        });
        // An unreadable directory (mid-rename, permissions) must not empty
        // the route table: keep everything.
        loaded.store = previous.clone();
        return loaded;
    }
    files.sort();
    // Per file read: its length, hash and documents' hashes.
    let mut texts: Vec<(PathBuf, usize, u64, DocumentHashes)> = Vec::with_capacity(files.len());
    let mut parsed: Vec<PathBuf> = Vec::new();
    let mut unread = false;
    cache.taken_over = 0;
    let old_keys = |cache: &FileCache, file: &Path, changed: &mut Option<Vec<ObjectKey>>| {
        if let (Some(changed), Some(cached)) = (changed.as_mut(), cache.files.get(file)) {
            changed.extend(cached.keys.iter().map(|(key, _)| key.clone()));
        }
    };
    for file in &files {
        let file = file.clone();
        match std::fs::read_to_string(&file) {
            Ok(text) => {
                let documents = match cache.unchanged(&file, &text, previous) {
                    Some(cached) => {
                        take_over(&file, cached, previous, &mut loaded);
                        let documents = cached.documents.clone();
                        cache.taken_over += 1;
                        documents
                    }
                    None => {
                        old_keys(cache, &file, &mut changed);
                        parsed.push(file.clone());
                        let shared = Arc::from(file.as_path());
                        let others = loaded.store.len() - loaded.store.endpoint_slices.len();
                        let count = load_documents(&shared, &text, 0, previous, &mut loaded);
                        // Hashed only where the file stored nothing but
                        // slices: the rest are never read by document.
                        let slices_alone =
                            loaded.store.len() - loaded.store.endpoint_slices.len() == others;
                        slices_alone
                            .then(|| document_hashes(&text, count))
                            .flatten()
                    }
                };
                texts.push((file, text.len(), text_hash(&text), documents));
            }
            Err(e) => {
                unread = true;
                changed = None;
                let origin = Origin {
                    file: Arc::from(file.as_path()),
                    document: 0,
                };
                let kept = retain_hidden(previous, &origin, &mut loaded.store);
                loaded.problems.push(Problem {
                    file,
                    document: 0,
                    object: None,
                    field: None,
                    message: format!("cannot read file: {e}"),
                    kept_previous: kept,
                });
            }
        }
    }
    let mut keys: HashMap<&Path, Vec<(ObjectKey, usize)>> = HashMap::new();
    loaded.store.for_each_key(|key, origin| {
        keys.entry(&*origin.file)
            .or_default()
            .push((key, origin.document));
    });
    if let Some(changed) = changed.as_mut() {
        let now: std::collections::HashSet<&Path> = files.iter().map(PathBuf::as_path).collect();
        for (file, cached) in &cache.files {
            if !now.contains(file.as_path()) {
                changed.extend(cached.keys.iter().map(|(key, _)| key.clone()));
            }
        }
        for file in &parsed {
            if let Some(new) = keys.get(file.as_path()) {
                changed.extend(new.iter().map(|(key, _)| key.clone()));
            }
        }
    }
    cache.changed = changed;
    cache.unread = unread;
    cache.files = texts
        .into_iter()
        .map(|(file, len, hash, documents)| {
            let mut keys = keys.remove(file.as_path()).unwrap_or_default();
            keys.sort_by_key(|(_, document)| *document);
            // Kept until the next load: a fifth of a large directory's
            // keys were spare capacity.
            keys.shrink_to_fit();
            let documents = slice_documents(&keys, || documents);
            let entry = CachedFile {
                len,
                hash,
                keys,
                documents,
                clean: false,
            };
            (file, entry)
        })
        .collect();
    loaded
}

/// Puts an unchanged file's objects into `loaded` as the previous load had
/// them, with the same check against definitions in earlier files that
/// parsing it would make.
fn take_over(file: &Path, cached: &CachedFile, previous: &Store, loaded: &mut Loaded) {
    for (key, document) in &cached.keys {
        if loaded.store.contains(key) {
            let origin = Origin {
                file: Arc::from(file),
                document: *document,
            };
            loaded.problems.push(duplicate(&origin, key));
            continue;
        }
        loaded.store.retain_from(previous, key);
    }
}

fn duplicate(origin: &Origin, key: &ObjectKey) -> Problem {
    problem(
        origin,
        Some(key.to_string()),
        Some("metadata.name".into()),
        "defined more than once; the first definition (in path order) is used".into(),
        false,
    )
}

/// Reads the documents of one file's text into `loaded`.
pub fn load_text(file: &Path, text: &str, previous: &Store, loaded: &mut Loaded) {
    load_documents(&Arc::from(file), text, 0, previous, loaded);
}

/// Reads the documents of `text` into `loaded`, numbering them from
/// `first` (`text` is part of `file`, starting at its document `first`);
/// returns how many documents the parser read.
fn load_documents(
    file: &Arc<Path>,
    text: &str,
    first: usize,
    previous: &Store,
    loaded: &mut Loaded,
) -> usize {
    let mut count = 0;
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        count += 1;
        let origin = Origin {
            file: file.clone(),
            document: first + index,
        };
        let value = match <serde_json::Value as serde::Deserialize>::deserialize(document) {
            Ok(v) => v,
            Err(e) => {
                // The document stream cannot be trusted past a syntax error:
                // keep what the previous load had from here to the end.
                let kept = retain_hidden(previous, &origin, &mut loaded.store);
                loaded.problems.push(problem(
                    &origin,
                    None,
                    None,
                    format!("invalid YAML: {e}"),
                    kept,
                ));
                return count;
            }
        };
        load_value(value, &origin, previous, loaded);
    }
    count
}

/// Each document's hash, when the file's documents found by their
/// markers are the `count` the parser read ([`crate::documents`]).
fn document_hashes(text: &str, count: usize) -> DocumentHashes {
    let documents = documents::split(text)?;
    (documents.len() == count).then(|| documents.iter().map(|d| text_hash(d)).collect())
}

/// What a file's cache entry keeps of its documents' hashes: only a file
/// of EndpointSlices alone is read again by document
/// ([`read_slice_files`]).
fn slice_documents(
    keys: &[(ObjectKey, usize)],
    documents: impl FnOnce() -> DocumentHashes,
) -> DocumentHashes {
    keys.iter()
        .all(|(key, _)| key.kind == Kind::EndpointSlice)
        .then(documents)
        .flatten()
}

fn load_value(value: serde_json::Value, origin: &Origin, previous: &Store, loaded: &mut Loaded) {
    if value.is_null() {
        return; // an empty document, e.g. a trailing `---`
    }
    let api_version = value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let kind_name = value.get("kind").and_then(|v| v.as_str()).unwrap_or("");
    if api_version.is_empty() || kind_name.is_empty() {
        let field = if api_version.is_empty() {
            "apiVersion"
        } else {
            "kind"
        };
        loaded.problems.push(problem(
            origin,
            None,
            Some(field.into()),
            format!("{field} is required"),
            false,
        ));
        return;
    }
    if api_version == "v1" && kind_name == "List" {
        let items = match value.get("items") {
            Some(serde_json::Value::Array(items)) => items.clone(),
            _ => Vec::new(),
        };
        for item in items {
            load_value(item, origin, previous, loaded);
        }
        return;
    }
    let Some(kind) = Kind::from_type(api_version, kind_name) else {
        loaded.problems.push(problem(
            origin,
            Some(format!("{api_version} {kind_name}")),
            Some("kind".into()),
            "unsupported kind (teapot reads Ingress, IngressClass, Service, EndpointSlice, Secret, ConfigMap, Tenant, RouteTrafficPolicy, Namespace and the Gateway API's GatewayClass, Gateway, ListenerSet, HTTPRoute, GRPCRoute, ReferenceGrant, BackendTLSPolicy, TLSRoute, TCPRoute and UDPRoute)"
                .into(),
            false,
        ));
        return;
    };
    let name = value
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or("")
        .to_string();
    if name.is_empty() {
        loaded.problems.push(problem(
            origin,
            Some(kind.to_string()),
            Some("metadata.name".into()),
            "metadata.name is required".into(),
            false,
        ));
        return;
    }
    let namespace = if kind.is_namespaced() {
        value
            .get("metadata")
            .and_then(|m| m.get("namespace"))
            .and_then(|n| n.as_str())
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
            .to_string()
    } else {
        String::new()
    };
    let key = ObjectKey {
        kind,
        namespace,
        name,
    };
    if loaded.store.contains(&key) {
        loaded.problems.push(duplicate(origin, &key));
        return;
    }
    match validate::parse_document(kind, value, &key.namespace) {
        Ok(validate::Parsed::Object(object)) => loaded.store.insert(key, object, origin.clone()),
        Ok(validate::Parsed::Refused { object, error }) => {
            // The store's rule: a bad version of an object served before
            // keeps the last good one (its routes keep every restriction
            // they had). A new one stands refused.
            let kept = previous.serves(&key) && loaded.store.retain_from(previous, &key);
            let mut message = error.message;
            if !kept {
                loaded.store.insert(key.clone(), object, origin.clone());
                message.push_str(REFUSED_STANDS);
            }
            loaded.problems.push(problem(
                origin,
                Some(key.to_string()),
                error.field,
                message,
                kept,
            ));
        }
        Err(e) => {
            let kept = loaded.store.retain_from(previous, &key);
            loaded.problems.push(problem(
                origin,
                Some(key.to_string()),
                e.field,
                e.message,
                kept,
            ));
        }
    }
}

/// Said of a refusal that stands in the store ([`validate::Parsed::Refused`]).
pub const REFUSED_STANDS: &str = "; the policy stands refused: its routes answer 503";

fn retain_hidden(previous: &Store, origin: &Origin, store: &mut Store) -> bool {
    let keys = previous.keys_from(origin);
    let mut kept = false;
    for key in keys {
        if !store.contains(&key) {
            kept |= store.retain_from(previous, &key);
        }
    }
    kept
}

fn problem(
    origin: &Origin,
    object: Option<String>,
    field: Option<String>,
    message: String,
    kept_previous: bool,
) -> Problem {
    Problem {
        file: origin.file.to_path_buf(),
        document: origin.document,
        object,
        field,
        message,
        kept_previous,
    }
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        // metadata() follows symlinks, as ConfigMap volumes need.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            collect_files(&path, out)?;
        } else if is_manifest(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn is_manifest(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn load(text: &str, previous: &Store) -> Loaded {
        let mut loaded = Loaded::default();
        load_text(Path::new("x.yaml"), text, previous, &mut loaded);
        loaded
    }

    const SVC: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: n}\nspec:\n  ports: [{port: 80}]\n";

    #[test]
    fn reads_multi_document_files() {
        let text = format!(
            "{SVC}---\n---\napiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {{name: teapot}}\nspec: {{controller: teapot.dev/ingress-controller}}\n"
        );
        let l = load(&text, &Store::default());
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        assert_eq!(l.store.services.len(), 1);
        assert_eq!(l.store.ingress_classes.len(), 1);
        // Every object of a file holds one shared path, not a copy each.
        let mut origins = Vec::new();
        l.store
            .for_each_key(|_, origin| origins.push(origin.file.clone()));
        assert_eq!(origins.len(), 2);
        assert!(Arc::ptr_eq(&origins[0], &origins[1]));
    }

    #[test]
    fn unknown_kind_and_missing_fields_are_problems() {
        let l = load(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\nkind: Service\n---\napiVersion: v1\nkind: Service\nmetadata: {}\n",
            &Store::default(),
        );
        let fields: Vec<_> = l
            .problems
            .iter()
            .map(|p| p.field.clone().unwrap())
            .collect();
        assert_eq!(fields, ["kind", "apiVersion", "metadata.name"]);
        assert_eq!(l.problems[2].document, 2);
    }

    #[test]
    fn type_errors_name_the_field_and_keep_the_last_good_version() {
        let good = load(SVC, &Store::default());
        let bad = load(
            "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: n}\nspec:\n  ports: [{port: eighty}]\n",
            &good.store,
        );
        assert_eq!(bad.problems.len(), 1);
        let p = &bad.problems[0];
        assert_eq!(p.object.as_deref(), Some("Service n/a"));
        assert_eq!(p.field.as_deref(), Some("spec.ports[0].port"));
        assert!(p.kept_previous);
        assert_eq!(bad.store.services.len(), 1);
    }

    #[test]
    fn syntax_errors_keep_what_the_file_had() {
        let good = load(SVC, &Store::default());
        let bad = load("apiVersion: v1\nkind: [Service\n", &good.store);
        assert_eq!(bad.problems.len(), 1);
        assert!(bad.problems[0].message.starts_with("invalid YAML"));
        assert!(bad.problems[0].kept_previous);
        assert_eq!(bad.store.services.len(), 1);
    }

    #[test]
    fn duplicates_keep_the_first() {
        let l = load(&format!("{SVC}---\n{SVC}"), &Store::default());
        assert_eq!(l.problems.len(), 1);
        assert_eq!(l.problems[0].document, 1);
    }

    /// A Service `a` in `ns` with one port.
    fn svc(ns: &str, port: u16) -> String {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: a, namespace: {ns}}}\nspec:\n  ports: [{{port: {port}}}]\n"
        )
    }

    #[test]
    fn unchanged_clean_files_are_taken_over_as_the_same_objects() {
        let dir = tempfile::tempdir().unwrap();
        let write = |file: &str, text: &str| std::fs::write(dir.path().join(file), text).unwrap();
        write("a.yaml", &svc("one", 80));
        write("b.yaml", &svc("two", 80));
        write(
            "c.yaml",
            "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: three}\nspec: {ports: [{port: eighty}]}\n",
        );
        let mut cache = FileCache::default();
        let first = load_dir_cached(dir.path(), &Store::default(), &mut cache);
        cache.settle(&first.problems);
        assert_eq!(cache.taken_over(), 0);
        let arc = |store: &Store, ns: &str| {
            store.services[&crate::store::NsName::new(ns, "a")]
                .object
                .clone()
        };

        write("b.yaml", &svc("two", 81));
        let second = load_dir_cached(dir.path(), &first.store, &mut cache);
        cache.settle(&second.problems);
        // a.yaml is unchanged and clean; b.yaml changed; c.yaml has a problem.
        assert_eq!(cache.taken_over(), 1);
        assert!(Arc::ptr_eq(
            &arc(&first.store, "one"),
            &arc(&second.store, "one")
        ));
        assert!(!Arc::ptr_eq(
            &arc(&first.store, "two"),
            &arc(&second.store, "two")
        ));
        assert_eq!(second.problems.len(), 1);
        let keys = |store: &Store| {
            let mut all = Vec::new();
            store.for_each_key(|k, o| all.push((k, o.clone())));
            all.sort();
            all
        };
        let parsed = load_dir(dir.path(), &first.store).store;
        assert_eq!(keys(&second.store), keys(&parsed));
        assert_eq!(
            second.store.services[&crate::store::NsName::new("two", "a")].object,
            parsed.services[&crate::store::NsName::new("two", "a")].object
        );

        // An earlier file now defines what the unchanged one does: the
        // unchanged file's object is a duplicate, as parsing would find.
        write("0.yaml", &svc("one", 90));
        let third = load_dir_cached(dir.path(), &second.store, &mut cache);
        assert_eq!(cache.taken_over(), 2);
        let dup: Vec<_> = third
            .problems
            .iter()
            .filter(|p| p.message.starts_with("defined more than once"))
            .collect();
        assert_eq!(dup.len(), 1);
        assert!(dup[0].file.ends_with("a.yaml"));
        assert!(
            third.store.services[&crate::store::NsName::new("one", "a")]
                .origin
                .file
                .ends_with("0.yaml")
        );
    }

    fn policy(name: &str, spec: &str) -> String {
        format!(
            "apiVersion: teapot.dev/v1alpha1\nkind: RouteTrafficPolicy\nmetadata: {{name: {name}, namespace: ops, annotations: {{a: b}}}}\nspec:\n{spec}"
        )
    }

    const TARGET: &str =
        "  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]\n";

    /// Fail closed: a new RouteTrafficPolicy whose spec is refused (a value
    /// out of bounds, a value of the wrong type) stands in the store as
    /// refused, with its targets and why, naming the field; one whose
    /// targets cannot be read is refused as before.
    #[test]
    fn a_new_refused_policy_stands_refused_on_its_targets() {
        let id = crate::store::NsName::new("ops", "p");
        let bounds = policy(
            "p",
            &format!(
                "{TARGET}  clientAddresses: {{allow: [10.0.0.0/8]}}\n  rateLimit: {{requestsPerSecond: 200000}}\n"
            ),
        );
        let l = load(&bounds, &Store::default());
        assert_eq!(l.problems.len(), 1, "{:?}", l.problems);
        let p = &l.problems[0];
        assert_eq!(p.object.as_deref(), Some("RouteTrafficPolicy ops/p"));
        assert_eq!(p.field.as_deref(), Some("spec.rateLimit.requestsPerSecond"));
        assert!(p.message.ends_with(REFUSED_STANDS), "{}", p.message);
        assert!(!p.kept_previous);
        let stored = &l.store.route_traffic_policies[&id].object;
        assert_eq!(stored.spec.target_refs.len(), 1);
        assert_eq!(stored.spec.target_refs[0].name, "r");
        // Nothing of the refused spec is kept, nor its annotations.
        assert_eq!(stored.spec.client_addresses, None);
        assert_eq!(stored.metadata.annotations, None);
        let why = &l.store.refused_route_traffic_policies[&id];
        assert!(
            why.starts_with("spec.rateLimit.requestsPerSecond: "),
            "{why}"
        );
        let key = ObjectKey {
            kind: Kind::RouteTrafficPolicy,
            namespace: "ops".into(),
            name: "p".into(),
        };
        assert!(l.store.contains(&key) && !l.store.serves(&key));

        // A value of the wrong type: the typed read fails, the targets read.
        let typed = policy("p", &format!("{TARGET}  inFlightPerClient: many\n"));
        let l = load(&typed, &Store::default());
        let why = &l.store.refused_route_traffic_policies[&id];
        assert!(why.starts_with("spec.inFlightPerClient: "), "{why}");

        // No target: nothing to attach the refusal to.
        for spec in [
            "  targetRefs: []\n  inFlightPerClient: 0\n".to_string(),
            "  targetRefs: [{kind: HTTPRoute}]\n  inFlightPerClient: 1\n".into(),
            "  inFlightPerClient: many\n".into(),
        ] {
            let l = load(&policy("p", &spec), &Store::default());
            assert!(l.store.route_traffic_policies.is_empty(), "{spec}");
            assert!(l.store.refused_route_traffic_policies.is_empty());
            let p = &l.problems[0];
            assert!(!p.message.ends_with(REFUSED_STANDS), "{}", p.message);
            assert!(
                p.field
                    .as_deref()
                    .is_some_and(|f| f.starts_with("spec.targetRefs"))
                    || p.message.contains("attached to no route"),
                "{p}"
            );
        }
    }

    /// A refused update of a policy served before keeps the last good
    /// version (the store's rule for every kind: its routes lose no
    /// restriction), reported; a refused version is replaced by the next
    /// good one, and a refused one is retained refused.
    #[test]
    fn a_refused_update_keeps_the_last_good_policy() {
        let id = crate::store::NsName::new("ops", "p");
        let good = policy("p", &format!("{TARGET}  inFlightPerClient: 5\n"));
        let bad = policy("p", &format!("{TARGET}  inFlightPerClient: 0\n"));
        let first = load(&good, &Store::default());
        assert!(first.problems.is_empty(), "{:?}", first.problems);
        let second = load(&bad, &first.store);
        assert_eq!(second.problems.len(), 1);
        assert!(second.problems[0].kept_previous);
        assert!(!second.problems[0].message.ends_with(REFUSED_STANDS));
        assert!(second.store.refused_route_traffic_policies.is_empty());
        assert!(Arc::ptr_eq(
            &first.store.route_traffic_policies[&id].object,
            &second.store.route_traffic_policies[&id].object
        ));

        let refused = load(&bad, &Store::default());
        // A syntax error later keeps what the file had: refused still.
        let hidden = load("apiVersion: v1\nkind: [Service\n", &refused.store);
        assert!(
            hidden
                .store
                .refused_route_traffic_policies
                .contains_key(&id)
        );
        // Refused again: the new refusal replaces the old one.
        let again = load(&bad, &refused.store);
        assert!(!again.problems[0].kept_previous);
        assert!(again.store.refused_route_traffic_policies.contains_key(&id));
        let fixed = load(&good, &again.store);
        assert!(fixed.problems.is_empty());
        assert!(fixed.store.refused_route_traffic_policies.is_empty());
        assert_eq!(
            fixed.store.route_traffic_policies[&id]
                .object
                .spec
                .in_flight_per_client,
            Some(5)
        );
        let mut store = again.store.clone();
        store.remove(&ObjectKey {
            kind: Kind::RouteTrafficPolicy,
            namespace: "ops".into(),
            name: "p".into(),
        });
        assert!(store.refused_route_traffic_policies.is_empty());
    }

    #[test]
    fn lists_are_unpacked() {
        let l = load(
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: a}\n  spec: {ports: [{port: 80}]}\n",
            &Store::default(),
        );
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        assert!(
            l.store
                .services
                .contains_key(&crate::store::NsName::new("default", "a"))
        );
    }

    /// The API server's and kubectl's bookkeeping on every kind the
    /// store keeps whole.
    const BOOKKEEPING: &str = concat!(
        "  managedFields:\n",
        "  - {manager: kubectl, operation: Update, apiVersion: v1, fieldsType: FieldsV1, fieldsV1: {'f:spec': {}}}\n",
        "  annotations:\n",
        "    kubectl.kubernetes.io/last-applied-configuration: '{\"a whole\": \"copy\"}'\n",
        "    nginx.ingress.kubernetes.io/ssl-redirect: 'false'\n",
    );

    #[test]
    fn objects_enter_the_store_without_bookkeeping() {
        let text = format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n  namespace: n\n{BOOKKEEPING}spec:\n  ports: [{{port: 80}}]\n\
             ---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: i\n  namespace: n\n{BOOKKEEPING}\
             spec:\n  rules: [{{host: a.example.com, http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: s, port: {{number: 80}}}}}}}}]}}}}]\n\
             status: {{loadBalancer: {{ingress: [{{ip: 192.0.2.1}}]}}}}\n\
             ---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: r\n  namespace: n\n{BOOKKEEPING}spec: {{}}\n"
        );
        let l = load(&text, &Store::default());
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        let metas = [
            &l.store
                .services
                .values()
                .next()
                .unwrap()
                .object
                .metadata
                .to_typed(),
            &l.store.ingresses.values().next().unwrap().object.metadata,
            &l.store.http_routes.values().next().unwrap().object.metadata,
        ];
        for meta in metas {
            assert_eq!(meta.managed_fields, None, "{meta:?}");
            let annotations = meta.annotations.as_ref().unwrap();
            // The key stays (the tenant check refuses by it), the copy goes;
            // the annotations teapot reads stay as written.
            assert_eq!(annotations[validate::LAST_APPLIED_ANNOTATION], "");
            assert_eq!(
                annotations["nginx.ingress.kubernetes.io/ssl-redirect"],
                "false"
            );
        }
        // The status writer compares the Ingress status it would write
        // with the one stored: kept.
        let ingress = &l.store.ingresses.values().next().unwrap().object;
        assert!(ingress.status.is_some());
    }

    /// A named change is read from its files alone and gives the store a
    /// whole load would; where only a whole load can say which definition
    /// serves, nothing is read by name and the cache is left as it was.
    #[test]
    fn named_files_load_alone_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = |file: &str| dir.path().join(file);
        let write = |file: &str, text: &str| std::fs::write(path(file), text).unwrap();
        write("a.yaml", &svc("one", 80));
        write("b.yaml", &svc("two", 80));
        let mut cache = FileCache::default();
        let first = load_dir_cached(dir.path(), &Store::default(), &mut cache);
        cache.settle(&first.problems);
        let keys = |store: &Store| {
            let mut all = Vec::new();
            store.for_each_key(|k, o| all.push((k, o.clone())));
            all.sort();
            all
        };
        let port = |store: &Store, ns: &str| {
            store.services[&crate::store::NsName::new(ns, "a")]
                .object
                .spec
                .as_ref()
                .and_then(|s| s.ports.as_deref())
                .map(|p| p[0].port)
        };

        // A changed file and a new one, by name.
        write("b.yaml", &svc("two", 81));
        write("c.yaml", &svc("three", 80));
        let named = [path("b.yaml"), path("c.yaml")];
        let mut second = first.store.clone();
        let before = load_named(dir.path(), &named, &mut second, &mut cache).expect("by name");
        cache.settle(&[]);
        assert_eq!(cache.loads_by_name(), 1);
        assert_eq!(cache.taken_over(), 1);
        assert_eq!(
            keys(&second),
            keys(&load_dir(dir.path(), &first.store).store)
        );
        assert_eq!(port(&second, "two"), Some(81));
        assert!(Arc::ptr_eq(
            &first.store.services[&crate::store::NsName::new("one", "a")].object,
            &second.services[&crate::store::NsName::new("one", "a")].object
        ));
        // What the change replaced, as it was; nothing for what it added.
        assert_eq!(before.len(), 1);
        assert_eq!(port(&before, "two"), Some(80));

        // A file gone, by name.
        std::fs::remove_file(path("c.yaml")).unwrap();
        let mut third = second.clone();
        let before =
            load_named(dir.path(), &[path("c.yaml")], &mut third, &mut cache).expect("by name");
        cache.settle(&[]);
        assert_eq!(keys(&third), keys(&load_dir(dir.path(), &second).store));
        assert_eq!(port(&before, "three"), Some(80));

        // Defined by another file as well, a document that does not parse,
        // a directory named: each is left to a whole load, and the store
        // is left as it was.
        let unchanged = keys(&third);
        write("d.yaml", &svc("one", 90));
        assert!(load_named(dir.path(), &[path("d.yaml")], &mut third, &mut cache).is_err());
        std::fs::remove_file(path("d.yaml")).unwrap();
        write("b.yaml", "kind: [\n");
        assert!(load_named(dir.path(), &[path("b.yaml")], &mut third, &mut cache).is_err());
        assert!(
            load_named(
                dir.path(),
                &[dir.path().to_path_buf()],
                &mut third,
                &mut cache
            )
            .is_err()
        );
        assert_eq!(cache.loads_by_name(), 2);
        assert_eq!(keys(&third), unchanged);
        assert_eq!(port(&third, "two"), Some(81));

        // After a whole load with a problem standing, nothing is read by
        // name until it is gone.
        let mut fourth = load_dir_cached(dir.path(), &third, &mut cache);
        cache.settle(&fourth.problems);
        assert_eq!(fourth.problems.len(), 1);
        write("a.yaml", &svc("one", 82));
        assert!(load_named(dir.path(), &[path("a.yaml")], &mut fourth.store, &mut cache).is_err());
    }

    /// A file of EndpointSlices rewritten, as a watcher names it: only the
    /// documents whose text changed are parsed, so one slice changed is
    /// one change; whatever the rewrite (documents changed, added,
    /// removed, moved, commented, broken, doubly defined, another kind),
    /// the store is what a whole load of the directory gives, or the
    /// change is left to a whole load.
    #[test]
    fn a_rewritten_slice_file_is_read_where_it_changed_as_a_whole_load_reads_it() {
        use rand::{Rng, SeedableRng};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slices.yaml");
        let slice = |name: usize, address: usize| {
            format!(
                "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: s{name}, namespace: ns, labels: {{kubernetes.io/service-name: s{name}}}}}\naddressType: IPv4\nports: [{{name: http, port: 80}}]\nendpoints: [{{addresses: [\"10.0.0.{address}\"]}}]\n"
            )
        };
        // Another file's slice, which this file must not define too.
        std::fs::write(dir.path().join("other.yaml"), slice(99, 1)).unwrap();
        // The file as documents: (name, address) or a raw text.
        let mut documents: Vec<String> = (0..6).map(|i| slice(i, i)).collect();
        let text = |documents: &[String]| {
            documents
                .iter()
                .map(|d| format!("---\n{d}"))
                .collect::<String>()
        };
        std::fs::write(&path, text(&documents)).unwrap();
        let mut cache = FileCache::default();
        let mut store = load_dir_cached(dir.path(), &Store::default(), &mut cache).store;
        cache.settle(&[]);
        let contents = |store: &Store| {
            let mut all = Vec::new();
            store.for_each_key(|k, o| all.push((k, o.clone())));
            all.sort();
            let slices: Vec<_> = store
                .endpoint_slices
                .iter()
                .map(|(id, s)| (id.clone(), (*s.object).clone()))
                .collect();
            (all, slices)
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (mut one_change, mut whole) = (0, 0);
        let mut next = 100;
        for round in 0..400 {
            let at = rng.random_range(0..documents.len().max(1));
            let changed_one = match rng.random_range(0..12) {
                0..=5 if !documents.is_empty() => {
                    next += 1;
                    let name = documents[at]
                        .split("name: s")
                        .nth(1)
                        .and_then(|r| r.split(',').next())
                        .and_then(|n| n.parse::<usize>().ok());
                    match name {
                        Some(name) => documents[at] = slice(name, next % 250),
                        None => documents[at] = slice(next, 1),
                    }
                    name.is_some()
                }
                6 => {
                    next += 1;
                    documents.insert(at, slice(next, 2));
                    false
                }
                7 if documents.len() > 1 => {
                    documents.remove(at);
                    false
                }
                8 if documents.len() > 1 => {
                    let last = documents.len() - 1;
                    documents.swap(at, last);
                    false
                }
                9 => {
                    documents.insert(at, "# a comment alone\n".into());
                    false
                }
                10 => {
                    // A slice of this file or of the other defined twice, a
                    // document that does not parse, another kind.
                    let trouble = [
                        slice(99, 3),
                        documents.first().cloned().unwrap_or_default(),
                        "kind: [\n".into(),
                        "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: ns}\nspec: {ports: [{port: 80}]}\n".into(),
                    ];
                    documents.insert(at, trouble[rng.random_range(0..trouble.len())].clone());
                    false
                }
                _ => {
                    // Troubles cleared: slices alone again.
                    documents
                        .retain(|d| d.contains("kind: EndpointSlice") && !d.contains("name: s99,"));
                    let mut seen = std::collections::HashSet::new();
                    documents.retain(|d| seen.insert(d.split(',').next().unwrap().to_string()));
                    false
                }
            };
            std::fs::write(&path, text(&documents)).unwrap();
            let reference = load_dir(dir.path(), &store);
            match read_slice_files(dir.path(), std::slice::from_ref(&path), &store, &cache) {
                Some(mut files) => {
                    assert!(
                        reference.problems.is_empty(),
                        "round {round}: {:?}",
                        reference.problems
                    );
                    if changed_one && files.changes.len() == 1 {
                        one_change += 1;
                    }
                    store.apply_slices(std::mem::take(&mut files.changes));
                    files.settle(&mut cache);
                    assert_eq!(
                        contents(&store),
                        contents(&reference.store),
                        "round {round}"
                    );
                }
                None => {
                    whole += 1;
                    let loaded = load_dir_cached(dir.path(), &store, &mut cache);
                    cache.settle(&loaded.problems);
                    store = loaded.store;
                }
            }
        }
        eprintln!("{one_change} single changes, {whole} whole loads");
        assert!(one_change > 50, "{one_change} single changes");
        assert!(whole > 10, "{whole} whole loads");
    }
}
