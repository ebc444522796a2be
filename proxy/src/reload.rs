//! Hot reload: watch the manifests directory (or the Kubernetes watch
//! source), recompile, swap.
//!
//! inotify events (through `notify`) trigger a reload after a short quiet
//! period, so a `kubectl`-style burst of writes or an editor's
//! write-rename becomes one compile. A cheap poll of file sizes and
//! modification times backs the watcher up on filesystems where events go
//! missing. In kube mode the watch events are coalesced the same way
//! ([`crate::kube_source::coalesced`]) and nothing is compiled before every
//! watch has listed. Compiles run on the blocking pool: a large table must not stall
//! request handling.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use notify::Watcher;
use tokio::sync::{mpsc, watch};

use crate::compile::{CompileOptions, compile};
use crate::kube_source::{self, KubeSource};
use crate::manifests::{Problem, load_dir};
use crate::metrics::Metrics;
use crate::snapshot::SnapshotHandle;
use crate::store::Store;
use crate::upstream::EndpointRegistry;

/// How long the directory must be quiet before a reload.
pub const QUIET_PERIOD: Duration = Duration::from_millis(100);
/// Safety-net poll interval.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Where a [`Reloader`] reads its objects.
#[derive(Clone, Debug)]
pub enum Source {
    /// A manifests directory (`--manifests`).
    Dir(PathBuf),
    /// The Kubernetes watch (`--kube`).
    Kube(KubeSource),
}

/// Loads, compiles and swaps; remembers what it needs for the next time.
#[derive(Debug)]
pub struct Reloader {
    source: Source,
    /// The generation swapped in last (0: none yet).
    generations: watch::Sender<u64>,
    options: CompileOptions,
    snapshots: SnapshotHandle,
    registry: EndpointRegistry,
    metrics: Metrics,
    state: Mutex<ReloadState>,
}

#[derive(Debug, Default)]
struct ReloadState {
    store: Store,
    /// The directory as it was just before the first load read it: a change
    /// made before the watcher started is then still a change.
    loaded: Option<Fingerprint>,
    retired: Option<Arc<crate::snapshot::Snapshot>>,
    generation: u64,
    problems: HashSet<String>,
}

impl Reloader {
    pub fn new(
        dir: PathBuf,
        options: CompileOptions,
        snapshots: SnapshotHandle,
        metrics: Metrics,
    ) -> Reloader {
        Reloader::with_source(Source::Dir(dir), options, snapshots, metrics)
    }

    pub fn with_source(
        source: Source,
        options: CompileOptions,
        snapshots: SnapshotHandle,
        metrics: Metrics,
    ) -> Reloader {
        Reloader {
            source,
            generations: watch::channel(0).0,
            options,
            snapshots,
            registry: EndpointRegistry::default(),
            metrics,
            state: Mutex::new(ReloadState::default()),
        }
    }

    /// One full load -> compile -> swap. Returns the new generation.
    pub fn reload(&self) -> u64 {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut loaded = match &self.source {
            Source::Dir(dir) => {
                // Only the watcher's start reads it; later loads follow
                // the watcher's own fingerprints.
                if state.loaded.is_none() {
                    state.loaded = Some(fingerprint(dir));
                }
                load_dir(dir, &state.store)
            }
            // Before every watch has listed, the store is a partial
            // picture: serving it would drop routes that do exist.
            Source::Kube(kube) if !kube.is_synced() => return state.generation,
            Source::Kube(kube) => kube.snapshot(),
        };
        crate::tenancy::admit(
            &mut loaded,
            &state.store,
            &self.options.domain,
            &self.options.lb_networks,
        );
        log_problems(&loaded.problems, &mut state.problems);
        self.metrics
            .manifest_problems
            .set(loaded.problems.len() as i64);
        state.generation += 1;
        let snapshot = compile(
            &loaded.store,
            loaded.problems,
            state.generation,
            &self.options,
            &self.registry,
        );
        state.store = loaded.store;
        self.metrics
            .compile_seconds
            .observe(snapshot.compile_time.as_secs_f64());
        self.metrics
            .snapshot_generation
            .set(snapshot.generation as i64);
        self.metrics.routes.set(snapshot.routes.len() as i64);
        self.metrics.reloads_total.inc();
        tracing::info!(
            generation = snapshot.generation,
            objects = state.store.len(),
            routes = snapshot.routes.len(),
            hosts = snapshot.routes.hosts(),
            certificates = snapshot.certs.len(),
            compile_ms = snapshot.compile_time.as_secs_f64() * 1e3,
            "snapshot swapped in"
        );
        // Dropping a large snapshot takes a while (about 1.4 s at 100k
        // Ingresses); keep the old one here until the next reload so the
        // drop happens on this blocking thread, not on whichever request
        // releases it last.
        state.retired = Some(self.snapshots.swap(Arc::new(snapshot)));
        self.generations.send_replace(state.generation);
        state.generation
    }

    /// Follows the generation swapped in last (0: none yet).
    pub fn generations(&self) -> watch::Receiver<u64> {
        self.generations.subscribe()
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Resolves once a snapshot has been swapped in (in kube mode: after
    /// every watch has listed).
    pub async fn wait_loaded(&self) {
        let _ = self.generations.subscribe().wait_for(|g| *g > 0).await;
    }

    /// Reloads whenever the directory changes, until `shutdown` turns true.
    pub async fn watch(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let dir = match &self.source {
            Source::Dir(dir) => dir.clone(),
            Source::Kube(kube) => {
                let kube = kube.clone();
                return self.watch_kube(kube, shutdown).await;
            }
        };
        let initial = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .loaded
            .clone();
        watch_dir(
            dir,
            initial,
            POLL_INTERVAL,
            shutdown,
            move || {
                self.reload();
            },
            || false,
        )
        .await;
    }
}

impl Reloader {
    /// Kube mode: the first compile once synced, then one per burst of
    /// events.
    async fn watch_kube(self: Arc<Self>, kube: KubeSource, mut shutdown: watch::Receiver<bool>) {
        let mut changes = kube.changes();
        tokio::select! {
            _ = kube.wait_synced() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        loop {
            let r = self.clone();
            if let Err(e) = tokio::task::spawn_blocking(move || r.reload()).await {
                tracing::error!(error = %e, "reload task failed; the previous state keeps serving");
            }
            tokio::select! {
                more = kube_source::coalesced(&mut changes, QUIET_PERIOD) => if !more { return },
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }
}

/// Runs `reload` on the blocking pool whenever `dir` changes, until
/// `shutdown` turns true: after inotify events and a quiet period, or when
/// the periodic fingerprint of sizes and modification times differs.
/// `retry` makes a poll reload even when nothing changed (a source that has
/// no state yet keeps trying). `initial`: the directory as the caller's
/// last load saw it, so a change between that load and the start of the
/// watch is picked up by the first poll (`None`: as it is now). Shared by
/// every manifests-directory source.
pub async fn watch_dir(
    dir: PathBuf,
    initial: Option<Fingerprint>,
    poll: Duration,
    mut shutdown: watch::Receiver<bool>,
    reload: impl Fn() + Send + Sync + 'static,
    retry: impl Fn() -> bool,
) {
    let reload = Arc::new(reload);
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Our own reads show up as access events; only changes count.
        if event.is_ok_and(|e| !e.kind.is_access()) {
            let _ = tx.send(());
        }
    })
    .and_then(|mut w| {
        w.watch(&dir, notify::RecursiveMode::Recursive)?;
        Ok(w)
    });
    let _watcher = match watcher {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "file watcher unavailable, polling only");
            None
        }
    };
    let mut last = match initial {
        Some(seen) => seen,
        None => fingerprint_blocking(&dir).await,
    };
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.changed() => if *shutdown.borrow() { return },
            Some(()) = rx.recv() => {
                // Let the burst finish, but not forever: a directory that
                // changes more often than QUIET_PERIOD still reloads.
                let deadline = tokio::time::Instant::now() + kube_source::MAX_COALESCE;
                while let Ok(Some(())) = tokio::time::timeout_at(
                    deadline.min(tokio::time::Instant::now() + QUIET_PERIOD),
                    rx.recv(),
                )
                .await
                {}
            }
            _ = tick.tick() => {
                let now = fingerprint_blocking(&dir).await;
                if now == last && !retry() { continue }
            }
        }
        let reload = reload.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || reload()).await {
            tracing::error!(error = %e, "reload task failed; the previous state keeps serving");
        }
        last = fingerprint_blocking(&dir).await;
    }
}

fn log_problems(problems: &[Problem], seen: &mut HashSet<String>) {
    let mut now = HashSet::with_capacity(problems.len());
    for p in problems {
        let line = p.to_string();
        if !seen.contains(&line) {
            tracing::warn!(
                file = %p.file.display(),
                document = p.document,
                object = p.object.as_deref().unwrap_or(""),
                field = p.field.as_deref().unwrap_or(""),
                kept_previous = p.kept_previous,
                "skipped manifest: {}",
                p.message
            );
        }
        now.insert(line);
    }
    *seen = now;
}

/// Sizes and modification times of every file under a directory.
pub type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

async fn fingerprint_blocking(dir: &Path) -> Fingerprint {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || fingerprint(&dir))
        .await
        .unwrap_or_default()
}

fn fingerprint(dir: &Path) -> Fingerprint {
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

fn walk(dir: &Path, out: &mut Fingerprint) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            walk(&path, out);
        } else {
            out.push((path, meta.len(), meta.modified().ok()));
        }
    }
}
