//! One watch per kind for the whole agent: a reflector whose store every
//! controller of both halves reads and whose changes every controller
//! that cares is told of.
//!
//! Why not kube-runtime's `store_shared` / `for_shared_stream` (the
//! `unstable-runtime-subscribe` feature, which the workspace enables):
//! they forward only applied objects (a deleted Secret or Service would
//! trigger nothing, while the Ingresses naming it must report it gone), a
//! subscriber that falls behind holds the watch back for every other one,
//! and a subscriber told of an object deleted before it looked it up
//! returns `Pending` without a waker and is never polled again. Here each subscriber
//! has a bounded queue ([`CAPACITY`]); one that falls behind is caught up
//! with every object of the store instead of stalling the rest, which
//! costs it one pass of deduplicated reconciles and nothing else.

use std::fmt::Debug;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::serde::de::DeserializeOwned;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use tokio::sync::broadcast;

use crate::Listed;

/// Changes queued per subscriber before it counts as fallen behind.
pub const CAPACITY: usize = 16_384;

/// A change the watch saw.
#[derive(Debug)]
struct Touch<K> {
    object: Arc<K>,
    deleted: bool,
}

impl<K> Clone for Touch<K> {
    fn clone(&self) -> Self {
        Touch {
            object: self.object.clone(),
            deleted: self.deleted,
        }
    }
}

/// One kind's watch, shared: its store and its changes.
pub struct Shared<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    changes: broadcast::Sender<Touch<K>>,
    task: Arc<AbortOnDrop>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Shared<K> {
    fn clone(&self) -> Self {
        Shared {
            store: self.store.clone(),
            changes: self.changes.clone(),
            task: self.task.clone(),
        }
    }
}

/// Ends the watch when the last handle of its [`Shared`] goes (the
/// leader stepping down drops them all).
#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<K> Shared<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    /// Starts the one watch of `api` with `config`; `listed` learns when
    /// it has listed.
    pub fn watch(api: Api<K>, config: watcher::Config, listed: &mut Listed) -> Shared<K> {
        Shared::watch_queued(api, config, listed, CAPACITY)
    }

    /// [`Shared::watch`] with `capacity` changes queued per subscriber.
    fn watch_queued(
        api: Api<K>,
        config: watcher::Config,
        listed: &mut Listed,
        capacity: usize,
    ) -> Shared<K> {
        let (store, writer) = reflector::store();
        let (changes, _) = broadcast::channel(capacity);
        let events = listed.track(reflector::reflector(writer, watcher(api, config)));
        let (tx, reader) = (changes.clone(), store.clone());
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            // A listing's objects reach the store at its end: told of them
            // earlier, a controller would look them up, miss and drop them.
            let mut listing: Vec<reflector::ObjectRef<K>> = Vec::new();
            while let Some(event) = events.next().await {
                let (object, deleted) = match event {
                    Ok(watcher::Event::Apply(o)) => (o, false),
                    Ok(watcher::Event::Delete(o)) => (o, true),
                    Ok(watcher::Event::Init) => {
                        listing.clear();
                        continue;
                    }
                    Ok(watcher::Event::InitApply(o)) => {
                        listing.push(reflector::ObjectRef::from_obj(&o));
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => {
                        for key in listing.drain(..) {
                            if let Some(object) = reader.get(&key) {
                                let _ = tx.send(Touch {
                                    object,
                                    deleted: false,
                                });
                            }
                        }
                        listing.shrink_to_fit();
                        continue;
                    }
                    Err(e) => {
                        tracing::debug!(kind = %K::kind(&()), error = %e, "watch error; retrying");
                        continue;
                    }
                };
                // The store's copy when it has one: no second copy per change.
                let object = reader
                    .get(&reflector::ObjectRef::from_obj(&object))
                    .filter(|_| !deleted)
                    .unwrap_or_else(|| Arc::new(object));
                // No subscriber (yet) is not an error: the store has it.
                let _ = tx.send(Touch { object, deleted });
            }
        });
        Shared {
            store,
            changes,
            task: Arc::new(AbortOnDrop(task)),
        }
    }

    /// The store every reader shares.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Objects added or changed (a controller's primary stream), starting
    /// with every object the store holds already.
    pub fn applied(&self) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        self.subscribe(false)
    }

    /// Objects added, changed or deleted (what a secondary watch maps).
    pub fn touched(&self) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        self.subscribe(true)
    }

    fn subscribe(
        &self,
        deletes: bool,
    ) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        let rx = self.changes.subscribe();
        let store = self.store.clone();
        let keep = self.task.clone();
        // A primary stream that subscribes after the listing (a controller
        // started later) starts from what the store holds; a secondary one
        // only cares about changes from now on.
        let known: Vec<Arc<K>> = if deletes { Vec::new() } else { store.state() };
        let known = futures::stream::iter(known.into_iter().map(|o| Ok(K::clone(&o))));
        known.chain(futures::stream::unfold(
            (rx, store, keep),
            move |(mut rx, store, keep)| async move {
                let batch: Vec<Arc<K>> = match rx.recv().await {
                    Ok(t) if t.deleted && !deletes => Vec::new(),
                    Ok(t) => vec![t.object],
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(kind = %K::kind(&()), missed, "a subscriber fell behind; catching it up from the store");
                        store.state()
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                };
                Some((
                    futures::stream::iter(batch.into_iter().map(|o| Ok(K::clone(&o)))),
                    (rx, store, keep),
                ))
            },
        )
        .flatten())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use serde_json::json;
    use teapot_testkit::apiserver::ApiServer;

    use super::*;

    fn config_map(name: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "shop"}, "data": {"k": name}})
    }

    async fn next<S: Stream<Item = Result<ConfigMap, watcher::Error>> + Unpin>(
        s: &mut S,
    ) -> String {
        let o = tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .expect("an object in time")
            .expect("open")
            .expect("ok");
        o.name_any()
    }

    #[tokio::test]
    async fn subscribers_share_one_watch_and_see_deletes_and_late_ones_the_store() {
        let api = ApiServer::start().await;
        api.apply(config_map("a"));
        let mut listed = Listed::default();
        let shared: Shared<ConfigMap> = Shared::watch(
            Api::all(api.client()),
            watcher::Config::default(),
            &mut listed,
        );
        let mut early = Box::pin(shared.touched());
        assert!(listed.wait().await);
        // Told of the listing once its objects are in the store.
        assert_eq!(next(&mut early).await, "a");
        assert!(
            shared
                .store()
                .get(&reflector::ObjectRef::new("a").within("shop"))
                .is_some()
        );
        // Subscribed after the listing: starts from the store.
        let mut late = Box::pin(shared.applied());
        assert_eq!(next(&mut late).await, "a");
        api.apply(config_map("b"));
        assert_eq!(next(&mut early).await, "b");
        assert_eq!(next(&mut late).await, "b");
        assert!(api.delete("v1", "ConfigMap", "shop", "b"));
        assert_eq!(
            next(&mut early).await,
            "b",
            "a delete reaches a secondary stream"
        );
        api.apply(config_map("c"));
        assert_eq!(next(&mut late).await, "c", "but not a primary one");
        let watches = api
            .requests()
            .iter()
            .filter(|r| r.param("watch").as_deref() == Some("true"))
            .count();
        assert_eq!(watches, 1, "one watch for both subscribers");
    }

    /// A subscriber that does not read while more changes arrive than its
    /// queue holds loses none of what the store has: it is caught up from
    /// the store, and the queue stays at its bound meanwhile.
    #[tokio::test]
    async fn a_subscriber_past_its_queue_is_caught_up_from_the_store() {
        let api = ApiServer::start().await;
        let mut listed = Listed::default();
        let shared: Shared<ConfigMap> = Shared::watch_queued(
            Api::all(api.client()),
            watcher::Config::default(),
            &mut listed,
            2,
        );
        let mut slow = Box::pin(shared.touched());
        assert!(listed.wait().await);
        let names: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
        for name in &names {
            api.apply(config_map(name));
        }
        // Every change is in the store before the subscriber reads again.
        for _ in 0..100 {
            if shared.store().state().len() == names.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(shared.store().state().len(), names.len());
        assert!(shared.changes.len() <= 2, "the queue holds its bound");
        let mut seen = std::collections::BTreeSet::new();
        while seen.len() < names.len() {
            seen.insert(next(&mut slow).await);
        }
        assert_eq!(seen, names.iter().cloned().collect());
    }
}
