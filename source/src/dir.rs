//! The manifests-directory watcher shared by every directory source (the
//! proxy's reload, the ACME directory store, the webhook).
//!
//! inotify events (through `notify`) trigger a reload once the burst they
//! belong to is over, so a `kubectl`-style burst of writes or an editor's
//! write-rename becomes one reload: [`PROMPT_QUIET`] after the last event
//! when every file it named was written whole (closed after the write,
//! renamed into place, removed), [`QUIET_PERIOD`] while one is still being
//! written. A reload that compiles also waits for the [`Pace`] the last
//! one set (a multiple of its own cost), so a steady stream of changes
//! takes a bounded share of a core whatever the store's size; files the
//! caller applies in place (a tenant's EndpointSlices) do not, and the
//! caller is told which paths changed ([`watch_dir_named`]). A cheap poll
//! of file sizes and modification times backs the watcher up on
//! filesystems where events go missing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use notify::Watcher;
use tokio::sync::{mpsc, watch};

/// How long the directory must be quiet before a reload while a file is
/// still being written (created or written, not yet closed).
pub const QUIET_PERIOD: Duration = Duration::from_millis(100);
/// Safety-net poll interval: the first poll's, and each one's after a
/// poll found a change no event named.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// The longest a backing-off safety-net poll waits: each poll that finds
/// nothing the watcher missed doubles the wait up to this, so a directory
/// at rest costs one walk a minute (a walk of 2,000 files took about
/// 10 ms, which every 2 s was the proxy's whole CPU at rest at 100k
/// Ingresses).
pub const POLL_INTERVAL_MAX: Duration = Duration::from_secs(60);

use crate::kube::burst_ends;
pub use crate::kube::{PACE_FACTOR, PROMPT_MAX, PROMPT_QUIET, Pace};

/// How often a watched directory is walked for what no event named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Poll {
    first: Duration,
    longest: Duration,
}

impl Poll {
    /// Every `interval`, always: a directory other machines write to (the
    /// ACME state shared by replicas on several hosts), whose changes no
    /// local event may name.
    pub const fn every(interval: Duration) -> Self {
        Self {
            first: interval,
            longest: interval,
        }
    }

    /// Every `first` at the start, twice as long after each poll that
    /// finds nothing missed, up to [`POLL_INTERVAL_MAX`] (or `first`, if
    /// that is longer): a directory this machine writes to, whose changes
    /// the events name.
    pub fn backing_off(first: Duration) -> Self {
        Self {
            first,
            longest: POLL_INTERVAL_MAX.max(first),
        }
    }

    /// How long the poll waits after one that waited `wait`: the first
    /// interval again when it found a change no event named or its source
    /// is still without state (`urgent`: a filesystem that drops events
    /// is polled at the first pace); otherwise twice as long, up to the
    /// longest.
    fn next(self, wait: Duration, urgent: bool) -> Duration {
        if urgent {
            self.first
        } else {
            (wait * 2).min(self.longest)
        }
    }
}

/// Runs `reload` on the blocking pool whenever `dir` changes, until
/// `shutdown` turns true: after inotify events and a quiet period, or when
/// the periodic fingerprint of sizes and modification times differs (at
/// `poll`'s pace; [`Poll::every`] where no inotify watch can be set).
/// `retry` makes a poll reload even when nothing changed (a source that has
/// no state yet keeps trying). `initial`: the directory as the caller's
/// last load saw it, so a change between that load and the start of the
/// watch is picked up by the first poll (`None`: as it is now). Shared by
/// every manifests-directory source.
pub async fn watch_dir(
    dir: PathBuf,
    initial: Option<Fingerprint>,
    poll: Poll,
    shutdown: watch::Receiver<bool>,
    reload: impl Fn() + Send + Sync + 'static,
    retry: impl Fn() -> bool,
) {
    watch_dir_named(
        dir,
        initial,
        poll,
        shutdown,
        move |_| reload(),
        retry,
        |_: &[PathBuf]| false,
    )
    .await;
}

/// What one burst of events named: the paths, and whether each was
/// written whole (closed after writing, renamed into place or removed)
/// by the last event on it.
#[derive(Default)]
struct Burst {
    paths: std::collections::BTreeMap<PathBuf, bool>,
    /// An event without a path (a rescan, an overflow): a whole load.
    unnamed: bool,
}

impl Burst {
    fn add(&mut self, event: notify::Event) {
        use notify::EventKind;
        use notify::event::{AccessKind, AccessMode, ModifyKind};
        let whole = match event.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Modify(ModifyKind::Name(_))
            | EventKind::Remove(_) => true,
            // A file mid-write (created, written, not yet closed).
            _ => false,
        };
        if event.paths.is_empty() || event.need_rescan() {
            self.unnamed = true;
        }
        for path in event.paths {
            self.paths.insert(path, whole);
        }
    }

    fn whole(&self) -> bool {
        !self.unnamed && self.paths.values().all(|w| *w)
    }

    fn named(self) -> Option<Vec<PathBuf>> {
        (!self.unnamed).then(|| self.paths.into_keys().collect())
    }
}

/// [`watch_dir`], telling `reload` which paths the events named (`None`:
/// unknown, after a poll found the directory changed or an event without
/// a path; reload everything). `prompt`: whether the caller applies a
/// change of these files, each written whole, in place; they are then
/// reloaded at most [`PROMPT_MAX`] after the first event, whatever the
/// pace (nothing is compiled).
pub async fn watch_dir_named(
    dir: PathBuf,
    initial: Option<Fingerprint>,
    poll: Poll,
    mut shutdown: watch::Receiver<bool>,
    reload: impl Fn(Option<Vec<PathBuf>>) + Send + Sync + 'static,
    retry: impl Fn() -> bool,
    prompt: impl Fn(&[PathBuf]) -> bool,
) {
    let reload = Arc::new(reload);
    let (tx, mut rx) = mpsc::unbounded_channel::<notify::Event>();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        use notify::event::{AccessKind, AccessMode, EventKind};
        // Our own reads show up as access events; only changes count, and
        // the close of a file written, which says the write is whole.
        if let Ok(e) = event
            && (!e.kind.is_access()
                || e.kind == EventKind::Access(AccessKind::Close(AccessMode::Write)))
        {
            let _ = tx.send(e);
        }
    })
    .and_then(|mut w| {
        w.watch(&dir, notify::RecursiveMode::Recursive)?;
        Ok(w)
    });
    let (_watcher, poll) = match watcher {
        Ok(w) => (Some(w), poll),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "file watcher unavailable, polling only");
            // Every change is the poll's to find: it never backs off.
            (None, Poll::every(poll.first))
        }
    };
    let mut last = match initial {
        Some(seen) => seen,
        None => fingerprint_blocking(&dir).await,
    };
    let mut wait = poll.first;
    let mut next_poll = tokio::time::Instant::now() + wait;
    // The paths events named since the last poll.
    let mut handled: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    let mut pace = Pace::default();
    loop {
        let named = tokio::select! {
            // Events first: a change the watcher saw is read as named, and
            // the poll below only looks for what it did not see.
            biased;
            gone = shutdown.changed() => if gone.is_err() || *shutdown.borrow() { return } else { continue },
            Some(first) = rx.recv() => {
                // Let the burst finish, but not forever: a directory that
                // never goes quiet still reloads, MAX_COALESCE after its
                // first change at the latest.
                let started = tokio::time::Instant::now();
                let mut burst = Burst::default();
                burst.add(first);
                loop {
                    let whole = burst.whole();
                    let prompt = whole && prompt(&burst.paths.keys().cloned().collect::<Vec<_>>());
                    // A file still being written waits for the writer's
                    // pauses to pass; whole files only for the rest of
                    // their burst.
                    let quiet = if whole { PROMPT_QUIET } else { QUIET_PERIOD };
                    let now = tokio::time::Instant::now();
                    let until = burst_ends(started, now, prompt, quiet, Some(&pace));
                    match tokio::time::timeout_at(until, rx.recv()).await {
                        Ok(Some(event)) => burst.add(event),
                        _ => break,
                    }
                }
                handled.extend(burst.paths.keys().cloned());
                burst.named()
            }
            _ = tokio::time::sleep_until(next_poll) => {
                // What changed since the last poll that no event named (a
                // filesystem that drops events): those files, by name. The
                // poll costs one walk per interval, however many changes
                // the watcher handled in between.
                let now = fingerprint_blocking(&dir).await;
                let missed: Vec<PathBuf> = changed_paths(&last, &now)
                    .into_iter()
                    .filter(|p| !handled.contains(p))
                    .collect();
                last = now;
                handled.clear();
                let retrying = retry();
                wait = poll.next(wait, retrying || !missed.is_empty());
                next_poll = tokio::time::Instant::now() + wait;
                if retrying {
                    None
                } else if missed.is_empty() {
                    continue;
                } else {
                    Some(missed)
                }
            }
        };
        let reload = reload.clone();
        let started = tokio::time::Instant::now();
        if let Err(e) = tokio::task::spawn_blocking(move || reload(named)).await {
            tracing::error!(error = %e, "reload task failed; the previous state keeps serving");
        }
        pace.record(started, tokio::time::Instant::now());
    }
}

/// The files whose size or modification time differ between two
/// fingerprints, or that are in one only.
fn changed_paths(before: &Fingerprint, after: &Fingerprint) -> Vec<PathBuf> {
    let before: std::collections::HashMap<&PathBuf, _> =
        before.iter().map(|(p, len, t)| (p, (len, t))).collect();
    let mut out: Vec<PathBuf> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (path, len, time) in after {
        seen.insert(path);
        if before.get(path) != Some(&(len, time)) {
            out.push(path.clone());
        }
    }
    out.extend(
        before
            .keys()
            .filter(|p| !seen.contains(*p))
            .map(|p| (*p).clone()),
    );
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory at rest is walked once a minute after a few polls;
    /// a poll that finds what the watcher missed brings the first pace
    /// back.
    #[test]
    fn the_poll_backs_off_while_it_finds_nothing_missed() {
        let poll = Poll::backing_off(POLL_INTERVAL);
        let mut wait = POLL_INTERVAL;
        let mut waits = Vec::new();
        for _ in 0..8 {
            wait = poll.next(wait, false);
            waits.push(wait.as_secs());
        }
        assert_eq!(waits, [4, 8, 16, 32, 60, 60, 60, 60]);
        assert_eq!(poll.next(wait, true), POLL_INTERVAL);
        // A caller's longer interval is kept as it is.
        let hour = Duration::from_secs(3600);
        assert_eq!(Poll::backing_off(hour).next(hour, false), hour);
        // A directory other machines write to is walked at one pace.
        let every = Poll::every(POLL_INTERVAL);
        assert_eq!(every.next(POLL_INTERVAL, false), POLL_INTERVAL);
    }

    /// A change no event named (here: made before the watch started,
    /// after the fingerprint the caller's load saw) is found by the poll
    /// and named.
    #[tokio::test]
    async fn a_change_no_event_named_is_found_by_the_poll() {
        let dir = tempfile::tempdir().unwrap();
        let seen = fingerprint(dir.path());
        let file = dir.path().join("late.yaml");
        std::fs::write(&file, "a: 1\n").unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (stop, shutdown) = watch::channel(false);
        let watching = tokio::spawn(watch_dir_named(
            dir.path().to_path_buf(),
            Some(seen),
            Poll::backing_off(Duration::from_millis(50)),
            shutdown,
            move |named: Option<Vec<PathBuf>>| {
                let _ = tx.send(named);
            },
            || false,
            |_: &[PathBuf]| false,
        ));
        let named = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a reload")
            .expect("the watcher");
        assert_eq!(named, Some(vec![file]));
        stop.send(true).unwrap();
        watching.await.unwrap();
    }

    #[test]
    fn changed_paths_are_those_resized_retimed_added_or_gone() {
        let t = |s| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        let before: Fingerprint = vec![
            ("a".into(), 1, t(1)),
            ("b".into(), 1, t(1)),
            ("c".into(), 1, t(1)),
            ("d".into(), 1, t(1)),
        ];
        let after: Fingerprint = vec![
            ("a".into(), 1, t(1)),
            ("b".into(), 2, t(1)),
            ("c".into(), 1, t(2)),
            ("e".into(), 1, t(1)),
        ];
        let mut changed = changed_paths(&before, &after);
        changed.sort();
        let want: Vec<PathBuf> = ["b", "c", "d", "e"].iter().map(PathBuf::from).collect();
        assert_eq!(changed, want);
    }

    /// Watches a fresh directory; `reload` gets the named paths and the
    /// time it started, and takes `cost(paths)`. Returns the directory,
    /// the receiver, the shutdown sender and the watch task.
    async fn watched(
        prompt_name: &'static str,
        cost: fn(&[PathBuf]) -> Duration,
    ) -> (
        tempfile::TempDir,
        mpsc::UnboundedReceiver<(Option<Vec<PathBuf>>, tokio::time::Instant)>,
        watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop, shutdown) = watch::channel(false);
        let watching = tokio::spawn(watch_dir_named(
            dir.path().to_path_buf(),
            None,
            Poll::backing_off(Duration::from_secs(3600)),
            shutdown,
            move |named: Option<Vec<PathBuf>>| {
                let started = tokio::time::Instant::now();
                let took = named.as_deref().map_or(Duration::ZERO, cost);
                let _ = tx.send((named, started));
                std::thread::sleep(took);
            },
            || false,
            move |paths| paths.iter().all(|p| p.ends_with(prompt_name)),
        ));
        // The watcher must be in place before the writes.
        tokio::time::sleep(Duration::from_millis(200)).await;
        (dir, rx, stop, watching)
    }

    async fn next(
        rx: &mut mpsc::UnboundedReceiver<(Option<Vec<PathBuf>>, tokio::time::Instant)>,
    ) -> (Option<Vec<PathBuf>>, tokio::time::Instant) {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a reload")
            .unwrap()
    }

    /// A file written whole is reloaded by name within the settle window,
    /// whether the caller applies it in place or compiles; a file still
    /// open for writing waits for the quiet period.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn files_written_whole_go_at_once_and_a_file_mid_write_waits() {
        let (dir, mut rx, stop, watching) = watched("fast.yaml", |_| Duration::ZERO).await;
        let (fast, slow, open) = (
            dir.path().join("fast.yaml"),
            dir.path().join("slow.yaml"),
            dir.path().join("open.yaml"),
        );
        // Before the quiet period: at least once in three tries, so that a
        // loaded machine's scheduling cannot fail it.
        for path in [&fast, &slow] {
            let mut fastest = Duration::MAX;
            for text in ["1", "2", "3"] {
                let written = tokio::time::Instant::now();
                std::fs::write(path, text).unwrap();
                let (named, at) = next(&mut rx).await;
                assert_eq!(named, Some(vec![path.clone()]));
                fastest = fastest.min(at - written);
            }
            assert!(fastest < QUIET_PERIOD, "{}: {fastest:?}", path.display());
        }
        // Written and left open: no close says the write is whole.
        let written = tokio::time::Instant::now();
        let mut file = std::fs::File::create(&open).unwrap();
        std::io::Write::write_all(&mut file, b"x").unwrap();
        let (named, at) = next(&mut rx).await;
        assert_eq!(named, Some(vec![open.clone()]));
        assert!(
            at - written >= QUIET_PERIOD,
            "{:?}: the quiet period",
            at - written
        );
        drop(file);
        stop.send_replace(true);
        watching.await.unwrap();
    }

    /// After a reload that compiled, the next compile waits PACE_FACTOR
    /// times its cost; a change applied in place does not wait for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_compile_waits_for_the_pace_and_an_in_place_change_does_not() {
        const COST: Duration = Duration::from_millis(80);
        let (dir, mut rx, stop, watching) = watched("slices.yaml", |paths| {
            if paths.iter().all(|p| p.ends_with("slices.yaml")) {
                Duration::ZERO
            } else {
                COST
            }
        })
        .await;
        let (route, slices) = (
            dir.path().join("route.yaml"),
            dir.path().join("slices.yaml"),
        );
        std::fs::write(&route, "1").unwrap();
        let (named, compiled) = next(&mut rx).await;
        assert_eq!(named, Some(vec![route.clone()]));
        // Written while the compile runs: applied in place once it ends,
        // well before the pace.
        std::fs::write(&slices, "1").unwrap();
        let (named, in_place) = next(&mut rx).await;
        assert_eq!(named, Some(vec![slices.clone()]));
        let paced = COST + COST * PACE_FACTOR;
        assert!(in_place - compiled < paced, "{:?}", in_place - compiled);
        std::fs::write(&route, "2").unwrap();
        let (named, next_compile) = next(&mut rx).await;
        assert_eq!(named, Some(vec![route.clone()]));
        assert!(
            next_compile - compiled >= paced,
            "{:?}: the compile's own {COST:?} and {PACE_FACTOR} times that after it",
            next_compile - compiled
        );
        stop.send_replace(true);
        watching.await.unwrap();
    }
}
