//! The manifests-directory watcher shared by every directory source (the
//! proxy's reload, the ACME directory store, the webhook).
//!
//! inotify events (through `notify`) trigger a reload after a short quiet
//! period, so a `kubectl`-style burst of writes or an editor's
//! write-rename becomes one reload. A cheap poll of file sizes and
//! modification times backs the watcher up on filesystems where events go
//! missing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use notify::Watcher;
use tokio::sync::{mpsc, watch};

/// How long the directory must be quiet before a reload.
pub const QUIET_PERIOD: Duration = Duration::from_millis(100);
/// Safety-net poll interval.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

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
                let deadline = tokio::time::Instant::now() + crate::kube::MAX_COALESCE;
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

/// Sizes and modification times of every file under a directory.
pub type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

pub async fn fingerprint_blocking(dir: &Path) -> Fingerprint {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || fingerprint(&dir))
        .await
        .unwrap_or_default()
}

pub fn fingerprint(dir: &Path) -> Fingerprint {
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
