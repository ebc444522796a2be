//! Where the state comes from: a directory of manifests, read with the
//! proxy's loader ([`teapot_model::manifests::load_dir`]) and reloaded when
//! it changes (inotify, with a poll as a safety net), or, in production,
//! the proxy's Kubernetes watch source ([`watch_kube`]) on the LB cluster.
//! Both feed the same [`Store`] -> [`PolicyState`] path.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use teapot_model::manifests::load_dir;
use teapot_model::store::Store;
use teapot_source::kube::KubeSource;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::state::PolicyState;

/// The state in force; `None` until the first load.
pub type StateHandle = Arc<ArcSwapOption<PolicyState>>;

/// A manifests directory feeding a [`StateHandle`].
#[derive(Debug)]
pub struct ManifestSource {
    dir: PathBuf,
    state: StateHandle,
    metrics: Metrics,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    store: Store,
    problems: HashSet<String>,
}

impl ManifestSource {
    pub fn new(dir: PathBuf, state: StateHandle, metrics: Metrics) -> ManifestSource {
        ManifestSource {
            dir,
            state,
            metrics,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Loads the directory and swaps the new state in. An unreadable
    /// directory changes nothing (before the first load, the webhook keeps
    /// refusing everything). Returns whether a state was swapped in.
    pub fn reload(&self) -> bool {
        if let Err(e) = std::fs::read_dir(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot read the manifests directory; keeping the current tenant state");
            return false;
        }
        let mut inner = self.inner.lock();
        let loaded = load_dir(&self.dir, &inner.store);
        let mut now = HashSet::with_capacity(loaded.problems.len());
        for p in &loaded.problems {
            let line = p.to_string();
            if !inner.problems.contains(&line) {
                tracing::warn!(
                    file = %p.file.display(),
                    document = p.document,
                    field = p.field.as_deref().unwrap_or(""),
                    kept_previous = p.kept_previous,
                    "skipped manifest: {}",
                    p.message
                );
            }
            now.insert(line);
        }
        inner.problems = now;
        let state = PolicyState::from_store(&loaded.store, loaded.problems.len());
        self.metrics.tenants.set(state.tenant_count() as i64);
        self.metrics
            .manifest_problems
            .set(loaded.problems.len() as i64);
        self.metrics.state_reloads.inc();
        tracing::info!(
            tenants = state.tenant_count(),
            objects = loaded.store.len(),
            problems = loaded.problems.len(),
            "tenant state loaded"
        );
        inner.store = loaded.store;
        self.state.store(Some(Arc::new(state)));
        true
    }

    /// Reloads whenever the directory changes (and retries while no state
    /// is loaded), until `shutdown` turns true.
    pub async fn watch(self: Arc<Self>, poll: Duration, shutdown: watch::Receiver<bool>) {
        let dir = self.dir.clone();
        let loaded = self.clone();
        teapot_source::dir::watch_dir(
            dir,
            None,
            teapot_source::dir::Poll::backing_off(poll),
            shutdown,
            move || {
                self.reload();
            },
            move || loaded.state.load().is_none(),
        )
        .await;
    }
}

/// Feeds `state` from the Kubernetes watch until `shutdown` turns true.
/// Nothing is swapped in before every watch has listed (so until then the
/// webhook refuses every review and `/readyz` says 503: a partial picture
/// could let a tenant take a host another one holds); afterwards a new
/// state follows each burst of events. Objects the API returns that do not
/// validate are logged by the source and keep their last good version.
pub async fn watch_kube(
    source: KubeSource,
    state: StateHandle,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut changes = source.changes();
    tokio::select! {
        _ = source.wait_synced() => {}
        _ = shutdown.wait_for(|s| *s) => return,
    }
    loop {
        let loaded = source.snapshot();
        let problems = loaded.problems.len();
        let built = tokio::task::spawn_blocking(move || {
            let state = PolicyState::from_store(&loaded.store, problems);
            (state, loaded.store.len())
        })
        .await;
        match built {
            Ok((new, objects)) => {
                metrics.tenants.set(new.tenant_count() as i64);
                metrics.manifest_problems.set(problems as i64);
                metrics.state_reloads.inc();
                tracing::info!(
                    tenants = new.tenant_count(),
                    objects,
                    problems,
                    "tenant state loaded from the Kubernetes API"
                );
                state.store(Some(Arc::new(new)));
            }
            Err(e) => {
                tracing::error!(error = %e, "building the tenant state failed; keeping the current one")
            }
        }
        tokio::select! {
            more = teapot_source::kube::coalesced(&mut changes, teapot_source::kube::DEBOUNCE) => if !more { return },
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}
