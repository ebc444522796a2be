//! How every controller of the agent and the Cluster API controller stops.
//!
//! kube-runtime 5's runner holds every reconcile until the controller's
//! store has listed, and a graceful shutdown stops polling the trigger
//! stream. For a controller whose own watch is part of that stream (its
//! primary kind), nothing lists the store after the stop: a stop that came
//! before the first listing completed (an API server slow to answer at
//! start, a kind the cluster does not serve, an unreachable cluster) left
//! the runner waiting for a store that could no longer become ready, and
//! the process never ended on SIGTERM. A controller whose store has not
//! listed has run no reconcile, so ending it at once loses nothing; one
//! that has listed drains its reconciles in flight as before.

use std::future::Future;
use std::hash::Hash;

use futures::FutureExt;
use kube::Resource;
use kube::runtime::reflector::Store;

/// Runs `controller`, a kube-runtime controller told to shut down
/// gracefully on the same signal as `stop`, until it ends; or, if `stop`
/// comes while `store` (the controller's own) has not listed yet, until
/// `stop`.
pub async fn until_stopped<K>(
    controller: impl Future<Output = ()>,
    store: Store<K>,
    stop: impl Future<Output = ()>,
) where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    let unlisted_at_stop = async {
        stop.await;
        // Polled once, without a waker that matters: the controller is
        // dropped right after if the store is not ready.
        if store.wait_until_ready().now_or_never().is_none() {
            return;
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        () = controller => {}
        () = unlisted_at_stop => {
            tracing::debug!("a controller stopped before its store listed; no reconcile had run");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::controller::{Action, Controller};
    use kube::runtime::reflector::{self, ObjectRef};
    use kube::runtime::watcher;
    use tokio::sync::{Notify, watch};

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    fn object() -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("c".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    async fn stopped(mut rx: watch::Receiver<bool>) {
        let _ = rx.wait_for(|s| *s).await;
    }

    /// A controller over `store`, which never lists (its writer is kept
    /// and never written), as a watch of a kind the cluster does not
    /// serve; shut down gracefully when `rx` turns true.
    fn unlisted(
        store: Store<ConfigMap>,
        rx: watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send {
        Controller::for_stream(
            futures::stream::pending::<Result<ConfigMap, watcher::Error>>(),
            store,
        )
        .graceful_shutdown_on(stopped(rx))
        .run(
            |_, _: Arc<()>| async { Ok::<_, Never>(Action::await_change()) },
            |_, _, _| Action::await_change(),
            Arc::new(()),
        )
        .for_each(|_| async {})
    }

    #[tokio::test]
    async fn a_stop_before_the_store_listed_ends_the_controller() {
        let (store, _writer) = reflector::store::<ConfigMap>();
        let (stop, rx) = watch::channel(false);
        let controller = unlisted(store.clone(), rx.clone());
        let task = tokio::spawn(until_stopped(controller, store, stopped(rx)));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!task.is_finished(), "it runs until told to stop");
        stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the controller ends at the stop")
            .unwrap();
    }

    /// Without it, the same controller is still running long after the
    /// stop: what the function is for.
    #[tokio::test]
    async fn kube_runtimes_own_graceful_stop_waits_for_a_listing_that_never_comes() {
        let (store, _writer) = reflector::store::<ConfigMap>();
        let (stop, rx) = watch::channel(false);
        let controller = unlisted(store, rx);
        stop.send_replace(true);
        let ended = tokio::time::timeout(Duration::from_millis(500), controller).await;
        assert!(ended.is_err(), "kube-runtime ended it by itself");
    }

    /// A listed store: the reconcile in flight at the stop finishes first.
    #[tokio::test]
    async fn a_listed_controller_finishes_its_reconcile_in_flight() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(object()));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        assert!(store.get(&ObjectRef::from_obj(&object())).is_some());
        let (stop, rx) = watch::channel(false);
        let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ctx = Arc::new((started.clone(), release.clone(), finished.clone()));
        let controller = Controller::for_stream(
            futures::stream::iter([Ok::<_, watcher::Error>(object())])
                .chain(futures::stream::pending()),
            store.clone(),
        )
        .graceful_shutdown_on(stopped(rx.clone()))
        .run(
            |_, ctx: Arc<(Arc<Notify>, Arc<Notify>, Arc<std::sync::atomic::AtomicBool>)>| async move {
                ctx.0.notify_one();
                ctx.1.notified().await;
                ctx.2.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok::<_, Never>(Action::await_change())
            },
            |_, _, _| Action::await_change(),
            ctx,
        )
        .for_each(|_| async {});
        let task = tokio::spawn(until_stopped(controller, store, stopped(rx)));
        tokio::time::timeout(Duration::from_secs(5), started.notified())
            .await
            .expect("the reconcile starts");
        stop.send_replace(true);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!task.is_finished(), "it waits for the reconcile in flight");
        release.notify_one();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the controller ends once its reconcile has")
            .unwrap();
        assert!(finished.load(std::sync::atomic::Ordering::SeqCst));
    }
}
