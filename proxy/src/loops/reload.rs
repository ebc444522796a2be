//! Hot reload: watch the manifests directory (or the Kubernetes watch
//! source), recompile, swap. This loop is the only place a compile runs.
//!
//! Other loops never compile: the ACME loop and the domain prover hold a
//! [`Recompile`] handle and ask for one when what they own changed
//! (docs/architecture.md, "Who triggers a recompile"). Before each compile
//! the loop takes their state as data (proof results, ACME host states,
//! the L4 holdings); after it, it publishes the L4 table, remembers the
//! holdings, prunes the registries and swaps the snapshot.
//!
//! inotify events (through `notify`) trigger a reload after a short quiet
//! period, so a `kubectl`-style burst of writes or an editor's
//! write-rename becomes one compile. A cheap poll of file sizes and
//! modification times backs the watcher up on filesystems where events go
//! missing. In kube mode the watch events are coalesced the same way
//! ([`teapot_source::kube::coalesced`]) and nothing is compiled before every
//! watch has listed. Compiles run on the blocking pool: a large table must not stall
//! request handling.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use teapot_source::dir::{Fingerprint, POLL_INTERVAL, QUIET_PERIOD, fingerprint, watch_dir};
use tokio::sync::watch;

use crate::compile::acme::AcmeInputs;
use crate::compile::endpoint_sets::{self, Refreshed};
use crate::compile::parts::CompiledParts;
use crate::compile::snapshot::SnapshotHandle;
use crate::compile::{CompileOptions, compile_incremental};
use crate::live::endpoints::EndpointRegistry;
use crate::loops::acme::AcmeShared;
use crate::loops::allocations::Allocator;
use crate::loops::proof::ProofBook;
use crate::plane::l4::L4;
use crate::plane::metrics::Metrics;
use teapot_model::manifests::{FileCache, Problem, load_dir_cached};
use teapot_model::store::{NsName, Store};
use teapot_source::kube::KubeSource;

/// Where a [`Reloader`] reads its objects.
#[derive(Clone, Debug)]
pub enum Source {
    /// A manifests directory (`--manifests`).
    Dir(PathBuf),
    /// The Kubernetes watch (`--kube`).
    Kube(KubeSource),
}

/// A request for a recompile, from a loop whose state the compile reads.
/// Requests made while one is pending are one.
#[derive(Clone, Debug, Default)]
pub struct Recompile(Arc<tokio::sync::Notify>);

impl Recompile {
    pub fn request(&self) {
        self.0.notify_one();
    }

    async fn requested(&self) {
        self.0.notified().await;
    }
}

/// The other loops' state, read as data before each compile.
#[derive(Debug, Default)]
pub struct LiveInputs {
    pub proofs: Option<Arc<ProofBook>>,
    pub acme: Option<Arc<AcmeShared>>,
    /// The listeners the L4 table goes to, and what each Service holds.
    pub l4: Option<(Arc<L4>, Allocator)>,
}

/// Loads, compiles and swaps; remembers what it needs for the next time.
#[derive(Debug)]
pub struct Reloader {
    source: Source,
    live: LiveInputs,
    recompile: Recompile,
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
    /// Per-namespace parts of the last compile: a change in one tenant
    /// namespace redoes that namespace's backends only.
    parts: CompiledParts,
    /// The manifests files of the last load that can be taken over
    /// unparsed while they stay unchanged.
    files: FileCache,
    /// The tenant policy's verdicts on unchanged EndpointSlices.
    verdicts: teapot_model::tenancy::SliceVerdicts,
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
            live: LiveInputs::default(),
            recompile: Recompile::default(),
            generations: watch::channel(0).0,
            options,
            snapshots,
            registry: EndpointRegistry::default(),
            metrics,
            state: Mutex::new(ReloadState::default()),
        }
    }

    /// The other loops' state the compiles read.
    pub fn with_live(mut self, live: LiveInputs) -> Reloader {
        self.live = live;
        self
    }

    /// The handle other loops ask for a recompile with.
    pub fn recompile(&self) -> Recompile {
        self.recompile.clone()
    }

    /// The compile's inputs: the settings, plus the other loops' state
    /// now.
    fn inputs(&self) -> CompileOptions {
        let mut options = self.options.clone();
        if let Some(book) = &self.live.proofs {
            options.proofs = Some(Arc::new(book.results()));
        }
        if let Some(acme) = &self.live.acme {
            options.acme = Some(AcmeInputs {
                default_tenants: acme.default_tenants,
                states: acme.states.load_full(),
            });
        }
        if let Some((l4, allocations)) = &self.live.l4 {
            options.l4 = Some(l4.inputs(Arc::new(allocations.holdings())));
        }
        options
    }

    /// One load, then either the endpoint sets updated in place (when only
    /// EndpointSlices changed, crate::compile::endpoint_sets) or a compile
    /// and swap. Returns the generation serving.
    pub fn reload(&self) -> u64 {
        self.load_and_apply(true)
    }

    /// One load -> compile -> swap, whatever changed: another loop's state
    /// the compile reads did.
    pub fn reload_compiling(&self) -> u64 {
        self.load_and_apply(false)
    }

    fn load_and_apply(&self, endpoints_in_place: bool) -> u64 {
        let started = std::time::Instant::now();
        let mut state = self.state.lock();
        let (mut loaded, changed) = match &self.source {
            Source::Dir(dir) => {
                // Only the watcher's start reads it; later loads follow
                // the watcher's own fingerprints.
                if state.loaded.is_none() {
                    state.loaded = Some(fingerprint(dir));
                }
                let state = &mut *state;
                let loaded = load_dir_cached(dir, &state.store, &mut state.files);
                (loaded, state.files.changed().map(<[_]>::to_vec))
            }
            // Before every watch has listed, the store is a partial
            // picture: serving it would drop routes that do exist.
            Source::Kube(kube) if !kube.is_synced() => return state.generation,
            Source::Kube(kube) => {
                let (loaded, changed) = kube.snapshot_changes();
                (loaded, Some(changed))
            }
        };
        let state = &mut *state;
        let load_ms = started.elapsed().as_secs_f64() * 1e3;
        teapot_model::tenancy::admit_cached(
            &mut loaded,
            &state.store,
            &self.options.domain,
            &self.options.lb_networks,
            &mut state.verdicts,
        );
        state.files.settle(&loaded.problems);
        let problems_changed = log_problems(&loaded.problems, &mut state.problems);
        self.metrics
            .manifest_problems
            .set(loaded.problems.len() as i64);
        if endpoints_in_place
            && state.generation > 0
            && !problems_changed
            && let Some(services) = changed
                .as_deref()
                .and_then(|keys| endpoint_sets::slice_services(keys, &state.store, &loaded.store))
        {
            let refresh_started = std::time::Instant::now();
            let refreshed = endpoint_sets::refresh(
                &loaded.store,
                &services,
                &self.options,
                &self.registry,
                &state.parts,
            );
            match refreshed {
                Refreshed::Stored(cells) => {
                    state.store = loaded.store;
                    self.registry.prune_when_grown();
                    self.metrics.endpoint_updates_total.inc();
                    tracing::info!(
                        generation = state.generation,
                        services = services.len(),
                        cells,
                        load_ms,
                        refresh_ms = refresh_started.elapsed().as_secs_f64() * 1e3,
                        update_ms = started.elapsed().as_secs_f64() * 1e3,
                        "endpoints updated in place"
                    );
                    return state.generation;
                }
                Refreshed::NeedsCompile(why) => {
                    tracing::debug!(why, "an EndpointSlice change needs a compile");
                }
            }
        }
        state.generation += 1;
        let snapshot = compile_incremental(
            &loaded.store,
            loaded.problems,
            state.generation,
            &self.inputs(),
            &self.registry,
            &mut state.parts,
        );
        state.store = loaded.store;
        if let (Some((l4, allocations)), Some(compiled)) = (&self.live.l4, &snapshot.l4) {
            allocations.remember(compiled.holdings.clone());
            l4.publish(compiled.table.clone(), snapshot.report.l4.as_ref());
        }
        // Endpoints and tenants that left the store stop being tracked.
        self.registry.prune();
        self.options.tenant_gates.prune();
        self.metrics
            .compile_seconds
            .observe(snapshot.compile_time.as_secs_f64());
        self.metrics
            .snapshot_generation
            .set(snapshot.generation as i64);
        self.metrics.routes.set(snapshot.routes.len() as i64);
        // Secrets no longer serving leave the series.
        self.metrics.certificate_not_after.reset();
        for (secret, not_after) in snapshot.certs.secret_expiry() {
            self.metrics
                .certificate_not_after
                .with_label_values(&[secret])
                .set(not_after);
        }
        // Routes that are gone leave the per-route series.
        let store = &state.store;
        self.metrics
            .series
            .retain_routes(|route| route_exists(store, route));
        self.metrics.reloads_total.inc();
        tracing::info!(
            generation = snapshot.generation,
            objects = state.store.len(),
            routes = snapshot.routes.len(),
            hosts = snapshot.routes.hosts(),
            certificates = snapshot.certs.len(),
            compile_ms = snapshot.compile_time.as_secs_f64() * 1e3,
            files_taken_over = state.files.taken_over(),
            slice_verdicts_reused = state.verdicts.reused(),
            namespaces_reused = state.parts.reused_namespaces(),
            "snapshot swapped in"
        );
        retire(self.snapshots.swap(Arc::new(snapshot)));
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

    /// Reloads whenever the source changes or another loop asks, until
    /// `shutdown` turns true.
    pub async fn watch(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let requests = {
            let (r, mut shutdown) = (self.clone(), shutdown.clone());
            async move {
                loop {
                    tokio::select! {
                        _ = r.recompile.requested() => {}
                        _ = shutdown.wait_for(|s| *s) => return,
                    }
                    let task = r.clone();
                    if let Err(e) =
                        tokio::task::spawn_blocking(move || task.reload_compiling()).await
                    {
                        r.metrics.reload_failures_total.inc();
                        tracing::error!(error = %e, "reload task failed; the previous state keeps serving");
                    }
                }
            }
        };
        tokio::join!(self.watch_source(shutdown), requests);
    }

    async fn watch_source(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let dir = match &self.source {
            Source::Dir(dir) => dir.clone(),
            Source::Kube(kube) => {
                let kube = kube.clone();
                return self.watch_kube(kube, shutdown).await;
            }
        };
        let initial = self.state.lock().loaded.clone();
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
                self.metrics.reload_failures_total.inc();
                tracing::error!(error = %e, "reload task failed; the previous state keeps serving");
            }
            tokio::select! {
                more = teapot_source::kube::coalesced(&mut changes, QUIET_PERIOD) => if !more { return },
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }
}

/// How long a retired snapshot's drop waits for the requests still using
/// it before it leaves the last release to them.
const RETIRE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Drops the snapshot just swapped out on a thread of its own, once the
/// requests that started on it are done. Dropping a large snapshot takes a
/// while (about 1.4 s at 100k Ingresses), which must not fall on whichever
/// request releases it last; keeping it until the next reload instead (as
/// teapot did) held two snapshots' memory for as long as nothing changed
/// (210 MB after three reloads against 121 MB loaded).
fn retire(old: Arc<crate::compile::snapshot::Snapshot>) {
    let spawned = std::thread::Builder::new()
        .name("snapshot-retire".into())
        .spawn(move || {
            let started = std::time::Instant::now();
            while Arc::strong_count(&old) > 1 && started.elapsed() < RETIRE_WAIT {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            drop(old);
        });
    if let Err(e) = spawned {
        // The snapshot was dropped here with the closure: only slower.
        tracing::warn!(error = %e, "cannot start a thread to retire a snapshot");
    }
}

/// Whether `route`, a series' route name (`namespace/name`,
/// `crate::compile::routes::Route::ingress`), is still an Ingress, HTTPRoute
/// or GRPCRoute of `store`: the objects routes are made from.
fn route_exists(store: &Store, route: &str) -> bool {
    let Some((namespace, name)) = route.split_once('/') else {
        return false;
    };
    let id = NsName::new(namespace, name);
    store.ingresses.contains_key(&id)
        || store.http_routes.contains_key(&id)
        || store.grpc_routes.contains_key(&id)
}

/// Logs the problems not logged before; returns whether the set changed.
fn log_problems(problems: &[Problem], seen: &mut HashSet<String>) -> bool {
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
    let changed = now != *seen;
    *seen = now;
    changed
}
