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
//! inotify events (through `notify`) trigger a reload once their burst is
//! over, so a `kubectl`-style burst of writes or an editor's write-rename
//! becomes one compile, and a compile waits for the pace the last one set
//! (`teapot_source::kube::Pace`: three times its cost), so a stream of
//! changes takes at most a quarter of a core. A cheap poll of file sizes
//! and modification times backs the watcher up on filesystems where events
//! go missing. In kube mode the watch events are coalesced the same way
//! ([`teapot_source::kube::coalesced_unless_prompt`]) and nothing is
//! compiled before every watch has listed. Compiles run on the blocking pool: a large table must not stall
//! request handling.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use teapot_source::dir::{
    Fingerprint, POLL_INTERVAL, PROMPT_QUIET, Pace, Poll, fingerprint, watch_dir_named,
};
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
use teapot_model::store::{NsName, ObjectKey, Store};
use teapot_source::kube::KubeSource;

/// What [`Reloader::slices_in_place`] did.
enum InPlace {
    /// The change is served.
    Done,
    /// More than EndpointSlices may have changed: load.
    NotSlices,
    /// The slices are in the store, but what they change reaches what a
    /// compile makes.
    Compile(&'static str),
}

/// What an endpoint update in place logs besides the refresh.
struct InPlaceUpdate {
    generation: u64,
    /// EndpointSlices changed.
    slices: usize,
    /// Reading them (the load, or the named files).
    load_ms: f64,
    started: std::time::Instant,
}

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
    /// unparsed while they stay unchanged; in either mode, the objects
    /// the last load's problems name (settled after every load).
    files: FileCache,
    /// The tenant check's verdicts, kept so that a load judges what changed.
    verdicts: teapot_model::tenancy::TenantVerdicts,
    generation: u64,
    problems: HashSet<String>,
    /// `Some`: `store` is the kube source's store as the last load left it
    /// but for these objects, which the tenant check took out of it or put
    /// a previous version of back; the next load brings it up to date in
    /// place (`KubeSource::changes_into`) instead of copying the source's.
    /// `None`: it may differ anywhere (no kube load yet, or changes taken
    /// and not applied).
    diverged: Option<Vec<ObjectKey>>,
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
        self.reload_named(None)
    }

    /// [`Self::reload`] after the watcher named the files that changed
    /// (`None`: unknown): when they hold EndpointSlices alone, only they
    /// are read ([`InPlace`]).
    pub fn reload_named(&self, named: Option<&[PathBuf]>) -> u64 {
        let started = std::time::Instant::now();
        let mut state = self.state.lock();
        if state.generation > 0 {
            match self.slices_in_place(&mut state, named, started) {
                InPlace::Done => return state.generation,
                InPlace::NotSlices => {}
                InPlace::Compile(why) => {
                    tracing::debug!(why, "an EndpointSlice change needs a compile");
                    return self.load_and_apply(state, named, false, started);
                }
            }
        }
        self.load_and_apply(state, named, true, started)
    }

    /// One load -> compile -> swap, whatever changed: another loop's state
    /// the compile reads did.
    pub fn reload_compiling(&self) -> u64 {
        let started = std::time::Instant::now();
        self.load_and_apply(self.state.lock(), None, false, started)
    }

    /// Whether the files `paths` held EndpointSlices alone at the last
    /// load (what [`Self::reload_named`] reads by themselves): the watcher
    /// then reloads them without waiting for a burst to end.
    pub fn slices_alone(&self, paths: &[PathBuf]) -> bool {
        let state = self.state.lock();
        state.generation > 0 && state.files.holds_slices_alone(paths)
    }

    /// An EndpointSlice change applied to the store and the endpoint cells
    /// without reading anything else: the files the watcher named, or the
    /// kube source's slices changed alone. Neither the directory, nor the
    /// store's other maps, nor the tenant check of other objects, nor a
    /// compile: docs/capacity.md, "An endpoint change".
    fn slices_in_place(
        &self,
        state: &mut ReloadState,
        named: Option<&[PathBuf]>,
        started: std::time::Instant,
    ) -> InPlace {
        let (changes, files) = match &self.source {
            Source::Dir(dir) => {
                let Some(named) = named else {
                    return InPlace::NotSlices;
                };
                match teapot_model::manifests::read_slice_files(
                    dir,
                    named,
                    &state.store,
                    &state.files,
                ) {
                    Some(mut files) => (std::mem::take(&mut files.changes), Some(files)),
                    None => return InPlace::NotSlices,
                }
            }
            Source::Kube(kube) if !kube.is_synced() => return InPlace::NotSlices,
            // A refused EndpointSlice changed or removed is left to a load,
            // which says what became of it.
            Source::Kube(kube) => {
                match kube.take_slice_changes(|key| state.files.names_problem(key)) {
                    Some(changes) => (changes, None),
                    None => return InPlace::NotSlices,
                }
            }
        };
        if changes.is_empty() {
            // Files rewritten as they were, or a watch event that changed
            // nothing a compile reads (an Ingress's status).
            if let Some(mut files) = files {
                files.settle(&mut state.files);
            }
            return InPlace::Done;
        }
        let load_ms = started.elapsed().as_secs_f64() * 1e3;
        if let Err(why) = teapot_model::tenancy::admit_slice_changes(
            &state.store,
            &changes,
            &self.options.domain,
            &self.options.lb_networks,
            &mut state.verdicts,
        ) {
            // The kube source's changes are taken: only a compile of its
            // snapshot serves them now (the store lacks them, so it is
            // not the source's). A directory is read whole.
            return match files {
                Some(_) => InPlace::NotSlices,
                None => {
                    state.diverged = None;
                    InPlace::Compile(why)
                }
            };
        }
        let services = endpoint_sets::changed_services(&changes, &state.store);
        let slices = changes.len();
        state.store.apply_slices(changes);
        if let Some(mut files) = files {
            files.settle(&mut state.files);
        }
        let update = InPlaceUpdate {
            generation: state.generation,
            slices,
            load_ms,
            started,
        };
        match self.refresh_cells(&state.store, &state.parts, &services, update) {
            Refreshed::Stored(_) => InPlace::Done,
            Refreshed::NeedsCompile(why) => InPlace::Compile(why),
        }
    }

    /// Brings the cells of `services` to what `store` says
    /// ([`endpoint_sets::refresh`]); when stored, counts and logs the update.
    fn refresh_cells(
        &self,
        store: &Store,
        parts: &CompiledParts,
        services: &[(String, String)],
        update: InPlaceUpdate,
    ) -> Refreshed {
        let refresh_started = std::time::Instant::now();
        let refreshed =
            endpoint_sets::refresh(store, services, &self.options, &self.registry, parts);
        if let Refreshed::Stored(cells) = refreshed {
            self.registry.prune_when_grown();
            self.metrics.endpoint_updates_total.inc();
            tracing::info!(
                generation = update.generation,
                slices = update.slices,
                services = services.len(),
                cells,
                load_ms = update.load_ms,
                refresh_ms = refresh_started.elapsed().as_secs_f64() * 1e3,
                update_ms = update.started.elapsed().as_secs_f64() * 1e3,
                "endpoints updated in place"
            );
        }
        refreshed
    }

    /// One load (of the files `named` alone when they say all that
    /// changed: `manifests::load_named`), then the tenant check and either
    /// the endpoint cells updated in place or a compile and swap.
    fn load_and_apply(
        &self,
        mut state: parking_lot::MutexGuard<'_, ReloadState>,
        named: Option<&[PathBuf]>,
        endpoints_in_place: bool,
        started: std::time::Instant,
    ) -> u64 {
        let cpu_started = thread_cpu_ns();
        // The store is changed in place by a load by name, or replaced by a
        // whole load's; `previous` is what it held before, for the objects
        // the load changed at least (a load by name returns those alone,
        // a whole load leaves the whole old store), and `problems` the
        // load's. `state.store` always holds a store the file cache
        // describes, so a load or check that fails part way leaves the
        // next load nothing stale to build on.
        // `exact`: `changed` names every object that may differ from what
        // the last tenant check left (a load by name, or the kube source's
        // changes made in the store), so the check looks at those alone.
        let (mut problems, changed, previous, exact) = match &self.source {
            Source::Dir(dir) => {
                // Only the watcher's start reads it; later loads follow
                // the watcher's own fingerprints.
                if state.loaded.is_none() {
                    state.loaded = Some(fingerprint(dir));
                }
                let state = &mut *state;
                let by_name = named.map(|named| {
                    teapot_model::manifests::load_named(
                        dir,
                        named,
                        &mut state.store,
                        &mut state.files,
                    )
                });
                let (problems, previous, exact) = match by_name {
                    Some(Ok(before)) => (Vec::new(), before, true),
                    by_name => {
                        if let Some(Err(why)) = by_name {
                            tracing::debug!(why, "the files named need a whole load");
                        }
                        let loaded = load_dir_cached(dir, &state.store, &mut state.files);
                        // Laid out afresh: the load's maps and keys sit
                        // among what parsing allocated, and every later
                        // compile walks them (a compile of a route change
                        // at 100k Ingresses was 15 % slower on the store
                        // as loaded; benches/route-table.md, "A route
                        // change changes the store in place").
                        let previous = std::mem::replace(&mut state.store, loaded.store.clone());
                        (loaded.problems, previous, false)
                    }
                };
                let changed = state.files.changed().map(<[_]>::to_vec);
                (problems, changed, previous, exact)
            }
            // Before every watch has listed, the store is a partial
            // picture: serving it would drop routes that do exist.
            Source::Kube(kube) if !kube.is_synced() => return state.generation,
            Source::Kube(kube) if state.diverged.is_some() => {
                let diverged = state.diverged.take().unwrap_or_default();
                let (before, changed, problems) = kube.changes_into(&mut state.store, &diverged);
                (problems, Some(changed), before, true)
            }
            Source::Kube(kube) => {
                let (loaded, changed) = kube.snapshot_changes();
                // The whole source's store: changes taken in place but not
                // served may be in it unnamed.
                let previous = std::mem::replace(&mut state.store, loaded.store);
                (loaded.problems, Some(changed), previous, false)
            }
        };
        let state = &mut *state;
        let load_ms = started.elapsed().as_secs_f64() * 1e3;
        // Until the check has said where it leaves the store unlike the
        // source's, the store may differ anywhere.
        state.diverged = None;
        let refused = teapot_model::tenancy::admit_cached(
            &mut state.store,
            &mut problems,
            &previous,
            &self.options.domain,
            &self.options.lb_networks,
            &mut state.verdicts,
            changed.as_deref().filter(|_| exact),
        );
        let admit_ms = started.elapsed().as_secs_f64() * 1e3 - load_ms;
        if matches!(self.source, Source::Kube(_)) {
            state.diverged = Some(refused);
        }
        state.files.settle(&problems);
        let problems_changed = log_problems(&problems, &mut state.problems);
        self.metrics.manifest_problems.set(problems.len() as i64);
        if endpoints_in_place
            && state.generation > 0
            && !problems_changed
            && let Some(services) = changed
                .as_deref()
                .and_then(|keys| endpoint_sets::slice_services(keys, &previous, &state.store))
        {
            let update = InPlaceUpdate {
                generation: state.generation,
                slices: changed.as_deref().map_or(0, <[_]>::len),
                load_ms,
                started,
            };
            match self.refresh_cells(&state.store, &state.parts, &services, update) {
                Refreshed::Stored(_) => return state.generation,
                Refreshed::NeedsCompile(why) => {
                    tracing::debug!(why, "an EndpointSlice change needs a compile");
                }
            }
        }
        state.generation += 1;
        let snapshot = compile_incremental(
            &state.store,
            problems,
            state.generation,
            &self.inputs(),
            &self.registry,
            &mut state.parts,
        );
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
            load_ms,
            admit_ms,
            compile_ms = snapshot.compile_time.as_secs_f64() * 1e3,
            reload_ms = started.elapsed().as_secs_f64() * 1e3,
            reload_cpu_ms = thread_cpu_ns().saturating_sub(cpu_started) as f64 / 1e6,
            files_taken_over = state.files.taken_over(),
            loads_by_name = state.files.loads_by_name(),
            tenant_verdicts_reused = state.verdicts.reused(),
            tenant_objects_judged = state.verdicts.judged(),
            namespaces_reused = state.parts.reused_namespaces(),
            namespaces_handed_on = state.parts.carried_namespaces(),
            "snapshot swapped in"
        );
        // What the store held before is dropped after the swap, with the
        // old snapshot: after a whole load that is the whole old store,
        // whose drop at 100k Ingresses was a tenth of a route change's
        // time to being served.
        retire(self.snapshots.swap(Arc::new(snapshot)), previous);
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
        let (watcher, prompt) = (self.clone(), self);
        watch_dir_named(
            dir,
            initial,
            Poll::backing_off(POLL_INTERVAL),
            shutdown,
            move |named| {
                watcher.reload_named(named.as_deref());
            },
            || false,
            |paths| prompt.slices_alone(paths),
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
        let mut pace = Pace::default();
        loop {
            let r = self.clone();
            let started = tokio::time::Instant::now();
            if let Err(e) = tokio::task::spawn_blocking(move || r.reload()).await {
                self.metrics.reload_failures_total.inc();
                tracing::error!(error = %e, "reload task failed; the previous state keeps serving");
            }
            pace.record(started, tokio::time::Instant::now());
            // Watch events are whole objects: a burst needs only the
            // settle of whole files, then the pace.
            let coalesced = teapot_source::kube::coalesced_unless_prompt(
                &mut changes,
                PROMPT_QUIET,
                Some(&pace),
                || kube.slices_alone_pending(),
            );
            tokio::select! {
                more = coalesced => if !more { return },
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }
}

/// How long a retired snapshot's drop waits for the requests still using
/// it before it leaves the last release to them.
const RETIRE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// This thread's time on a CPU so far, in ns (0 where the kernel does not
/// say): beside a reload's wall time it tells the work from the wait for a
/// core, which on a loaded machine can be the larger part.
pub fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Drops the snapshot just swapped out on a thread of its own, once the
/// requests that started on it are done. Dropping a large snapshot takes a
/// while (about 1.4 s at 100k Ingresses), which must not fall on whichever
/// request releases it last; keeping it until the next reload instead (as
/// teapot did) held two snapshots' memory for as long as nothing changed
/// (210 MB after three reloads against 121 MB loaded). The store the
/// snapshot was compiled from goes with it, dropped at once: nothing
/// serves from it.
fn retire(old: Arc<crate::compile::snapshot::Snapshot>, store: Store) {
    let spawned = std::thread::Builder::new()
        .name("snapshot-retire".into())
        .spawn(move || {
            drop(store);
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

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use arc_swap::ArcSwap;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::compile::snapshot::Snapshot;

    const TENANTS: usize = 3;

    fn options() -> CompileOptions {
        CompileOptions {
            domain: "example.net".into(),
            ..CompileOptions::default()
        }
    }

    /// Per tenant a file with the Tenant, its Service and an Ingress, and
    /// a file per EndpointSlice, as the agent writes them.
    struct World {
        dir: tempfile::TempDir,
        port: [u16; TENANTS],
        /// Per tenant and slice: the endpoints' generation, or `None`
        /// when the slice's file is gone.
        slices: [[Option<u8>; 3]; TENANTS],
        /// Per tenant: the path of its second Ingress, in a file of its
        /// own (a route change).
        route: [u8; TENANTS],
    }

    impl World {
        fn new() -> World {
            let world = World {
                dir: tempfile::tempdir().unwrap(),
                port: [80; TENANTS],
                slices: [[Some(0), Some(0), None]; TENANTS],
                route: [0; TENANTS],
            };
            for t in 0..TENANTS {
                world.write_tenant(t);
                world.write_route(t);
                for s in 0..2 {
                    world.write(&world.slice_path(t, s), &world.slice(t, s, 0, t));
                }
            }
            world
        }

        fn write_tenant(&self, t: usize) {
            let port = self.port[t];
            let text = format!(
                "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: t{t}}}\nspec: {{cluster: t{t}, nodeCIDRs: [10.{t}.0.0/16]}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: tenant-t{t}}}\nspec: {{ports: [{{name: http, port: {port}}}]}}\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: web, namespace: tenant-t{t}}}\nspec:\n  ingressClassName: teapot\n  rules:\n  - http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}]}}\n"
            );
            self.write(&self.dir.path().join(format!("t{t}.yaml")), &text);
        }

        fn write_route(&self, t: usize) {
            let text = format!(
                "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: api, namespace: tenant-t{t}}}\nspec:\n  ingressClassName: teapot\n  rules:\n  - http: {{paths: [{{path: /v{}, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}]}}\n",
                self.route[t]
            );
            self.write(&self.route_path(t), &text);
        }

        fn route_path(&self, t: usize) -> PathBuf {
            self.dir.path().join(format!("t{t}-route.yaml"))
        }

        /// Slice `s` of tenant `t`, its endpoints in `net` (another
        /// tenant's network is refused by the tenant policy).
        fn slice(&self, t: usize, s: usize, generation: u8, net: usize) -> String {
            format!(
                "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: web-{s}, namespace: tenant-t{t}, labels: {{kubernetes.io/service-name: web, endpointslice.kubernetes.io/managed-by: sync.teapot.dev}}}}\naddressType: IPv4\nports: [{{name: http, port: 30080}}]\nendpoints: [{{addresses: [10.{net}.{s}.{generation}], conditions: {{ready: true}}}}]\n"
            )
        }

        fn slice_path(&self, t: usize, s: usize) -> PathBuf {
            self.dir.path().join(format!("t{t}-slice{s}.yaml"))
        }

        /// Written whole, as the agent and kubectl-like tools do: renamed
        /// into place.
        fn write(&self, path: &Path, text: &str) {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(tmp, path).unwrap();
        }

        /// One random change, mostly of EndpointSlices; returns the paths
        /// it wrote or removed. `troubled`: also refused, broken and
        /// doubly defined slices, whose problems make later reloads whole.
        fn change(&mut self, rng: &mut impl Rng, troubled: bool) -> Vec<PathBuf> {
            let t = rng.random_range(0..TENANTS);
            let s = rng.random_range(0..3);
            let path = self.slice_path(t, s);
            let arm = match rng.random_range(0..24) {
                1..=3 if !troubled => 6,
                // The route's file removed, or written again.
                23 if !troubled => {
                    let path = self.route_path(t);
                    if path.exists() {
                        std::fs::remove_file(&path).unwrap();
                    } else {
                        self.write_route(t);
                    }
                    return vec![path];
                }
                arm => arm,
            };
            match arm {
                // A route change: the files named hold it alone.
                20..=22 => {
                    self.route[t] = (self.route[t] + 1) % 5;
                    self.write_route(t);
                    return vec![self.route_path(t)];
                }
                // The same Ingress defined by a second file as well.
                23 => {
                    let path = self.dir.path().join(format!("t{t}-route-copy.yaml"));
                    if path.exists() {
                        std::fs::remove_file(&path).unwrap();
                    } else {
                        self.write(&path, &std::fs::read_to_string(self.route_path(t)).unwrap());
                    }
                    return vec![path];
                }
                0 => {
                    self.port[t] = if self.port[t] == 80 { 8080 } else { 80 };
                    self.write_tenant(t);
                    return vec![self.dir.path().join(format!("t{t}.yaml"))];
                }
                // Refused by the tenant policy: the whole load keeps the
                // previous version and says why.
                1 => self.write(&path, &self.slice(t, s, 9, (t + 1) % TENANTS)),
                // A document that does not parse.
                2 => self.write(&path, "kind: [\n"),
                // Another tenant's slice defined a second time.
                3 => {
                    let other = (t + 1) % TENANTS;
                    self.write(&path, &self.slice(other, 0, 7, other));
                }
                4..=5 => {
                    self.slices[t][s] = None;
                    let _ = std::fs::remove_file(&path);
                }
                _ => {
                    let generation = self.slices[t][s].map_or(0, |g| (g + 1) % 50);
                    self.slices[t][s] = Some(generation);
                    self.write(&path, &self.slice(t, s, generation, t));
                }
            }
            vec![path]
        }
    }

    fn served(snapshot: &Snapshot) -> Vec<String> {
        let mut hosts: Vec<&str> = snapshot.routes.exact_hosts().collect();
        hosts.sort_unstable();
        hosts
            .into_iter()
            .map(|host| {
                // A host of the versioned Ingress alone routes no `/`.
                let route = snapshot.routes.lookup(host, "/").or_else(|| {
                    (0..5).find_map(|v| snapshot.routes.lookup(host, &format!("/v{v}")))
                });
                let route = route.expect("routed");
                let mut endpoints: Vec<String> = (route.upstream.endpoints.load().iter())
                    .map(|e| e.addr.to_string())
                    .collect();
                endpoints.sort();
                // Which Ingress each versioned path reaches.
                let paths: Vec<String> = (0..5)
                    .map(|v| {
                        let r = snapshot.routes.lookup(host, &format!("/v{v}"));
                        r.map_or("-".into(), |r| r.ingress.to_string())
                    })
                    .collect();
                format!("{host} {} {endpoints:?} {paths:?}", route.upstream.name)
            })
            .collect()
    }

    fn report(snapshot: &Snapshot) -> String {
        let mut r = serde_json::to_value(&snapshot.report).unwrap();
        if let Some(problems) = r["problems"].as_array_mut() {
            problems.sort_by_key(|p| p.to_string());
        }
        r["generation"] = serde_json::Value::Null;
        r.to_string()
    }

    /// The files a watcher names are all a reload reads when they hold
    /// EndpointSlices alone, and all it parses when they hold anything
    /// else (a route, a Tenant); whatever it does, it serves what a load and
    /// compile of the whole directory, with the same history (a refused or
    /// broken document keeps the version before), would.
    #[test]
    fn named_slice_files_are_read_alone_and_serve_what_a_whole_load_would() {
        let (in_place, compiles, by_name) = named_files_serve_what_a_whole_load_would(true, 51);
        assert!(in_place > 100, "{in_place} in place");
        assert!(compiles > 20, "{compiles} compiles");
        assert!(by_name > 0, "{by_name} loads by name");
    }

    /// Without standing problems, a route or Tenant change is read from
    /// the files named alone (`manifests::load_named`), and serves what a
    /// whole load would.
    #[test]
    fn named_route_files_are_read_alone_and_serve_what_a_whole_load_would() {
        let (_, compiles, by_name) = named_files_serve_what_a_whole_load_would(false, 52);
        assert!(compiles > 20, "{compiles} compiles");
        assert!(by_name > 20, "{by_name} loads by name");
    }

    /// 300 random changes given to one reloader by name and to another
    /// whole; after each, both serve the same. Returns the endpoint
    /// updates made in place, the compiles and the loads by name.
    fn named_files_serve_what_a_whole_load_would(troubled: bool, seed: u64) -> (usize, u64, usize) {
        let mut world = World::new();
        let snapshots: SnapshotHandle = Arc::new(ArcSwap::from_pointee(Snapshot::default()));
        let metrics = Metrics::new().unwrap();
        let reloader = Reloader::new(
            world.dir.path().to_path_buf(),
            options(),
            snapshots.clone(),
            metrics.clone(),
        );
        assert_eq!(reloader.reload(), 1);
        let whole = Arc::new(ArcSwap::from_pointee(Snapshot::default()));
        let reference = Reloader::new(
            world.dir.path().to_path_buf(),
            options(),
            whole.clone(),
            Metrics::new().unwrap(),
        );
        reference.reload_compiling();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut in_place = 0;
        for round in 0..300 {
            let paths = world.change(&mut rng, troubled);
            let before = metrics.endpoint_updates_total.get();
            reloader.reload_named(Some(&paths));
            in_place += usize::from(metrics.endpoint_updates_total.get() > before);
            reference.reload_compiling();
            let (serving, whole) = (snapshots.load(), whole.load());
            assert_eq!(served(&serving), served(&whole), "round {round}");
            assert_eq!(report(&serving), report(&whole), "round {round}");
        }
        let compiles = metrics.reloads_total.get();
        let by_name = reloader.state.lock().files.loads_by_name();
        eprintln!("{in_place} in place, {compiles} compiles, {by_name} loads by name");
        (in_place, compiles, by_name)
    }

    /// The kube source's objects, as the API double takes them.
    mod kube_world {
        use serde_json::{Value, json};

        pub fn tenant(t: usize, narrow: bool) -> Value {
            let cidr = if narrow {
                format!("10.{t}.1.0/24")
            } else {
                format!("10.{t}.0.0/16")
            };
            json!({"apiVersion": "teapot.dev/v1alpha1", "kind": "Tenant",
                   "metadata": {"name": format!("t{t}")},
                   "spec": {"cluster": format!("t{t}"), "nodeCIDRs": [cidr]}})
        }

        pub fn service(t: usize, port: u16) -> Value {
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "web", "namespace": format!("tenant-t{t}")},
                   "spec": {"ports": [{"name": "http", "port": port}]}})
        }

        pub fn ingress(t: usize, name: &str, path: &str) -> Value {
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                   "metadata": {"name": name, "namespace": format!("tenant-t{t}")},
                   "spec": {"ingressClassName": "teapot", "rules": [{"http": {"paths": [
                       {"path": path, "pathType": "Prefix",
                        "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]}}]}})
        }

        /// Slice `s` of tenant `t`, its endpoint in tenant `net`'s network
        /// (another's is refused by the tenant policy).
        pub fn slice(t: usize, s: usize, generation: u8, net: usize) -> Value {
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": format!("web-{s}"), "namespace": format!("tenant-t{t}"),
                                "labels": {"kubernetes.io/service-name": "web",
                                           "endpointslice.kubernetes.io/managed-by": "sync.teapot.dev"}},
                   "addressType": "IPv4",
                   "ports": [{"name": "http", "port": 30080}],
                   "endpoints": [{"addresses": [format!("10.{net}.{s}.{generation}")],
                                  "conditions": {"ready": true}}]})
        }
    }

    /// Against the API double: random changes (routes, Services, Tenants
    /// that narrow their node networks, EndpointSlices, slices the tenant
    /// policy refuses, deletions) reach a kube-mode reloader, which brings
    /// its store up to date in place (`KubeSource::changes_into`), the
    /// objects the tenant check refused included; after each change it
    /// serves and reports what a load of the source's whole snapshot, with
    /// the same history, does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kube_changes_in_place_serve_what_a_snapshot_would() {
        use teapot_model::manifests::Loaded;
        use teapot_source::kube::{KubeSource, WatchSpec};
        use teapot_testkit::apiserver::ApiServer;

        let api = ApiServer::start().await;
        let mut narrow = [false; TENANTS];
        let mut port = [80; TENANTS];
        let mut slices = [[None::<u8>; 3]; TENANTS];
        for (t, tenant_slices) in slices.iter_mut().enumerate() {
            api.apply(kube_world::tenant(t, false));
            api.apply(kube_world::service(t, 80));
            api.apply(kube_world::ingress(t, "web", "/"));
            api.apply(kube_world::ingress(t, "api", "/v0"));
            for (s, slot) in tenant_slices.iter_mut().enumerate().take(2) {
                api.apply(kube_world::slice(t, s, 0, t));
                *slot = Some(0);
            }
        }
        let source = KubeSource::start_with(&api.client(), WatchSpec::all(&[]));
        tokio::time::timeout(std::time::Duration::from_secs(30), source.wait_synced())
            .await
            .expect("synced in time");
        let snapshots: SnapshotHandle = Arc::new(ArcSwap::from_pointee(Snapshot::default()));
        let reloader = Arc::new(Reloader::with_source(
            Source::Kube(source.clone()),
            options(),
            snapshots.clone(),
            Metrics::new().unwrap(),
        ));
        let reference = |previous: &Store| {
            let mut loaded: Loaded = source.snapshot();
            teapot_model::tenancy::admit(&mut loaded, previous, "example.net", &[]);
            let snapshot = crate::compile::compile(
                &loaded.store,
                loaded.problems.clone(),
                0,
                &options(),
                &EndpointRegistry::default(),
            );
            (loaded.store, snapshot)
        };
        let reload = |r: &Arc<Reloader>| {
            let r = r.clone();
            tokio::task::spawn_blocking(move || r.reload())
        };
        reload(&reloader).await.unwrap();
        let (mut previous, _) = reference(&Store::default());

        let mut rng = rand::rngs::StdRng::seed_from_u64(53);
        let (mut in_place, mut past_refusals, mut copied) = (0, 0, 0);
        let mut route = [0; TENANTS];
        for round in 0..160 {
            let t = rng.random_range(0..TENANTS);
            let s = rng.random_range(0..3);
            let change = rng.random_range(0..20);
            let ns = format!("tenant-t{t}");
            let slice_id = NsName::new(ns.clone(), format!("web-{s}"));
            let holds = move |store: &Store, address: &str| {
                let address: std::net::IpAddr = address.parse().unwrap();
                store
                    .endpoint_slices
                    .get(&slice_id)
                    .is_some_and(|x| x.object.endpoints().any(|(_, a)| a.contains(&address)))
            };
            // What the source holds once the change reached it.
            let visible: Box<dyn Fn(&Store) -> bool> = match change {
                0 => {
                    narrow[t] = !narrow[t];
                    let tenant = api.apply(kube_world::tenant(t, narrow[t]));
                    let cidr = tenant["spec"]["nodeCIDRs"][0].as_str().unwrap().to_string();
                    Box::new(move |store| {
                        store.tenants[&format!("t{t}")].object.spec.node_cidrs == [cidr.clone()]
                    })
                }
                1 => {
                    port[t] = if port[t] == 80 { 8080 } else { 80 };
                    api.apply(kube_world::service(t, port[t]));
                    let (id, port) = (NsName::new(ns.clone(), "web"), i32::from(port[t]));
                    Box::new(move |store| {
                        let typed = store.services[&id].object.to_typed();
                        typed
                            .spec
                            .and_then(|s| s.ports)
                            .is_some_and(|p| p[0].port == port)
                    })
                }
                2..=5 => {
                    route[t] = (route[t] + 1) % 5;
                    let path = format!("/v{}", route[t]);
                    api.apply(kube_world::ingress(t, "api", &path));
                    let id = NsName::new(ns.clone(), "api");
                    Box::new(move |store| {
                        let spec = store.ingresses[&id].object.spec.as_ref();
                        let rule = spec.and_then(|s| s.rules.as_ref()).map(|r| &r[0]);
                        let http = rule.and_then(|r| r.http.as_ref());
                        http.and_then(|h| h.paths[0].path.as_deref()) == Some(path.as_str())
                    })
                }
                // Refused by the tenant policy: the previous version stays.
                6..=7 => {
                    // Never the version the API holds: each write is a change.
                    let generation = 100 + (round % 150) as u8;
                    let net = (t + 1) % TENANTS;
                    api.apply(kube_world::slice(t, s, generation, net));
                    let address = format!("10.{net}.{s}.{generation}");
                    Box::new(move |store| holds(store, &address))
                }
                8..=9 if slices[t][s].is_some() => {
                    slices[t][s] = None;
                    assert!(api.delete(
                        "discovery.k8s.io/v1",
                        "EndpointSlice",
                        &ns,
                        &format!("web-{s}")
                    ));
                    let id = NsName::new(ns.clone(), format!("web-{s}"));
                    Box::new(move |store| !store.endpoint_slices.contains_key(&id))
                }
                _ => {
                    let generation = slices[t][s].map_or(0, |g| (g + 1) % 50);
                    slices[t][s] = Some(generation);
                    api.apply(kube_world::slice(t, s, generation, t));
                    let address = format!("10.{t}.{s}.{generation}");
                    Box::new(move |store| holds(store, &address))
                }
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !visible(&source.snapshot().store) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "round {round}: the change reaches the source"
                );
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            let diverged = reloader.state.lock().diverged.as_ref().map(Vec::len);
            reload(&reloader).await.unwrap();
            match diverged {
                Some(0) => in_place += 1,
                Some(_) => past_refusals += 1,
                None => copied += 1,
            }
            let (store, whole) = reference(&previous);
            previous = store;
            let serving = snapshots.load();
            assert_eq!(served(&serving), served(&whole), "round {round}");
            assert_eq!(report(&serving), report(&whole), "round {round}");
        }
        eprintln!(
            "{in_place} in place, {past_refusals} in place past refused objects, {copied} copied"
        );
        assert!(in_place >= 5, "{in_place} in place");
        assert!(past_refusals > 50, "{past_refusals} past refused objects");
    }
}
