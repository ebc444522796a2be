//! The store's map of one namespaced kind: its objects by namespace, each
//! namespace's behind its own `Arc`.
//!
//! A copy of the store (a load by name builds the next store from the
//! last, `crate::manifests::load_named`; the kube source hands its reader
//! a copy under the lock its watches write with) copies one pointer per
//! namespace, and a change copies the namespaces it touches, not every
//! object's key: a tenant's change costs its namespace. Dropping the old
//! store frees only what the new one replaced.
//!
//! Ordered by namespace, then name, as the compile and the status report
//! read them; one namespace's objects are one shard
//! ([`ByNamespace::namespace`]).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::collections::btree_map;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::store::{NsName, NsRef};

/// A namespaced object's key, owned ([`NsName`]) or borrowed ([`NsRef`]):
/// a lookup by a borrowed name allocates nothing.
pub trait NsKey {
    fn namespace(&self) -> &str;
    fn name(&self) -> &str;
}

impl NsKey for NsName {
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn name(&self) -> &str {
        &self.name
    }
}

impl NsKey for NsRef<'_> {
    fn namespace(&self) -> &str {
        self.namespace
    }
    fn name(&self) -> &str {
        self.name
    }
}

impl<'a> Borrow<dyn NsKey + 'a> for NsName {
    fn borrow(&self) -> &(dyn NsKey + 'a) {
        self
    }
}

// Must compare, order and hash exactly as the derived impls of `NsName`.
impl PartialEq for dyn NsKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.namespace() == other.namespace() && self.name() == other.name()
    }
}

impl Eq for dyn NsKey + '_ {}

impl PartialOrd for dyn NsKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn NsKey + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.namespace(), self.name()).cmp(&(other.namespace(), other.name()))
    }
}

impl Hash for dyn NsKey + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.namespace().hash(state);
        self.name().hash(state);
    }
}

type Shard<V> = BTreeMap<NsName, V>;

/// Objects of one namespaced kind, by namespace and name.
pub struct ByNamespace<V> {
    shards: BTreeMap<String, Arc<Shard<V>>>,
    len: usize,
}

impl<V> Default for ByNamespace<V> {
    fn default() -> Self {
        ByNamespace {
            shards: BTreeMap::new(),
            len: 0,
        }
    }
}

impl<V> Clone for ByNamespace<V> {
    /// One pointer per namespace: the objects are shared until changed.
    fn clone(&self) -> Self {
        ByNamespace {
            shards: self.shards.clone(),
            len: self.len,
        }
    }
}

impl<V: fmt::Debug> fmt::Debug for ByNamespace<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V> ByNamespace<V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get<K: NsKey>(&self, key: &K) -> Option<&V> {
        let shard = self.shards.get(key.namespace())?;
        shard.get(key as &dyn NsKey)
    }

    /// The stored key beside the object, for a caller that keeps names
    /// borrowed from the store.
    pub fn get_key_value<K: NsKey>(&self, key: &K) -> Option<(&NsName, &V)> {
        let shard = self.shards.get(key.namespace())?;
        shard.get_key_value(key as &dyn NsKey)
    }

    pub fn contains_key<K: NsKey>(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// The objects of `namespace`, in name order.
    pub fn namespace<'s>(
        &'s self,
        namespace: &str,
    ) -> impl Iterator<Item = (&'s NsName, &'s V)> + use<'s, V> {
        self.shards
            .get(namespace)
            .into_iter()
            .flat_map(|s| s.iter())
    }

    /// The namespaces that hold objects, in order.
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.shards.keys().map(String::as_str)
    }

    pub fn clear(&mut self) {
        self.shards.clear();
        self.len = 0;
    }

    /// Whether `self` and `other` hold the very same objects of
    /// `namespace` (one shard, not copied since): a pointer comparison.
    pub fn same_namespace(&self, other: &Self, namespace: &str) -> bool {
        match (self.shards.get(namespace), other.shards.get(namespace)) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    pub fn iter(&self) -> Iter<'_, V> {
        Iter {
            shards: self.shards.values(),
            shard: None,
            left: self.len,
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &NsName> {
        self.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }
}

impl<V: Clone> ByNamespace<V> {
    /// Copies the namespace's shard first if another map shares it.
    pub fn get_mut<K: NsKey>(&mut self, key: &K) -> Option<&mut V> {
        let shard = self.shards.get_mut(key.namespace())?;
        Arc::make_mut(shard).get_mut(key as &dyn NsKey)
    }

    pub fn insert(&mut self, key: NsName, value: V) -> Option<V> {
        let shard = match self.shards.get_mut(key.namespace.as_str()) {
            Some(shard) => shard,
            None => self.shards.entry(key.namespace.clone()).or_default(),
        };
        let old = Arc::make_mut(shard).insert(key, value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub fn remove<K: NsKey>(&mut self, key: &K) -> Option<V> {
        let shard = self.shards.get_mut(key.namespace())?;
        // Not copied when the object is not there.
        shard.get(key as &dyn NsKey)?;
        let shard_mut = Arc::make_mut(shard);
        let old = shard_mut.remove(key as &dyn NsKey);
        if shard_mut.is_empty() {
            self.shards.remove(key.namespace());
        }
        if old.is_some() {
            self.len -= 1;
        }
        old
    }
}

impl<V: Clone> FromIterator<(NsName, V)> for ByNamespace<V> {
    fn from_iter<I: IntoIterator<Item = (NsName, V)>>(iter: I) -> Self {
        let mut map = ByNamespace::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

impl<V, K: NsKey> std::ops::Index<&K> for ByNamespace<V> {
    type Output = V;
    fn index(&self, key: &K) -> &V {
        self.get(key).expect("no object of that name")
    }
}

impl<V: Clone> IntoIterator for ByNamespace<V> {
    type Item = (NsName, V);
    type IntoIter = std::iter::FlatMap<
        btree_map::IntoValues<String, Arc<Shard<V>>>,
        btree_map::IntoIter<NsName, V>,
        fn(Arc<Shard<V>>) -> btree_map::IntoIter<NsName, V>,
    >;

    /// Takes each shard no other map shares, and copies the others.
    fn into_iter(self) -> Self::IntoIter {
        self.shards
            .into_values()
            .flat_map(|shard| Arc::unwrap_or_clone(shard).into_iter())
    }
}

/// The objects in namespace, then name, order.
pub struct Iter<'a, V> {
    shards: btree_map::Values<'a, String, Arc<Shard<V>>>,
    shard: Option<btree_map::Iter<'a, NsName, V>>,
    left: usize,
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (&'a NsName, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.shard.as_mut().and_then(Iterator::next) {
                self.left -= 1;
                return Some(item);
            }
            self.shard = Some(self.shards.next()?.iter());
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<V> ExactSizeIterator for Iter<'_, V> {}

impl<'a, V> IntoIterator for &'a ByNamespace<V> {
    type Item = (&'a NsName, &'a V);
    type IntoIter = Iter<'a, V>;

    fn into_iter(self) -> Iter<'a, V> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(namespace: &str, name: &str) -> NsName {
        NsName::new(namespace, name)
    }

    /// The map against a `BTreeMap` of the same changes: the same objects,
    /// in the same order, found by owned and borrowed names alike.
    #[test]
    fn it_holds_and_orders_what_a_btree_map_would() {
        let mut map = ByNamespace::new();
        let mut reference = BTreeMap::new();
        // A small deterministic walk of inserts, replacements and removals
        // over names whose namespace and name split differently.
        let mut x: u64 = 7;
        for step in 0..4000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let ns = ["a", "ab", "b", ""][(x >> 33) as usize % 4];
            let name = ["", "b", "x", "xy", "y"][(x >> 40) as usize % 5];
            let k = key(ns, name);
            if (x >> 50).is_multiple_of(3) {
                assert_eq!(map.remove(&k), reference.remove(&k));
            } else {
                assert_eq!(map.insert(k.clone(), step), reference.insert(k, step));
            }
            assert_eq!(map.len(), reference.len());
        }
        let ours: Vec<_> = map.iter().collect();
        let theirs: Vec<_> = reference.iter().collect();
        assert_eq!(ours, theirs);
        for (k, v) in &reference {
            let borrowed = NsRef {
                namespace: &k.namespace,
                name: &k.name,
            };
            assert_eq!(map.get(&borrowed), Some(v));
        }
        assert_eq!(
            map.get(&NsRef {
                namespace: "a",
                name: "bx"
            }),
            reference.get(&key("a", "bx"))
        );
    }

    /// A copy is a value: changing it leaves the original as it was (the
    /// reload serves from the old store while the next is built), and a
    /// namespace neither changed stays one shared shard.
    #[test]
    fn a_copy_changes_apart_from_the_original_and_shares_the_rest() {
        let mut map = ByNamespace::new();
        for ns in 0..10 {
            for name in 0..10 {
                map.insert(key(&format!("ns{ns}"), &format!("o{name}")), ns * 10 + name);
            }
        }
        let mut copy = map.clone();
        assert!(copy.same_namespace(&map, "ns3"));
        *copy.get_mut(&key("ns3", "o1")).unwrap() = 1000;
        copy.remove(&key("ns4", "o2"));
        copy.insert(key("new", "o"), 7);
        // Removing what is not there copies nothing.
        assert_eq!(copy.remove(&key("ns5", "absent")), None);
        assert!(copy.same_namespace(&map, "ns5"));
        assert_eq!(map[&key("ns3", "o1")], 31);
        assert_eq!(copy[&key("ns3", "o1")], 1000);
        assert!(map.contains_key(&key("ns4", "o2")));
        assert!(!copy.contains_key(&key("ns4", "o2")));
        assert!(!map.contains_key(&key("new", "o")));
        assert_eq!((map.len(), copy.len()), (100, 100));
        assert!(!copy.same_namespace(&map, "ns3"));
        assert!(!copy.same_namespace(&map, "ns4"));
        assert!(copy.same_namespace(&map, "ns0"));
        assert_eq!(copy.namespace("ns4").count(), 9);
        assert_eq!(copy.namespace("none").count(), 0);
    }

    /// A namespace emptied leaves no shard behind, so a tenant's churn of
    /// namespaces does not grow the map.
    #[test]
    fn an_emptied_namespace_leaves_no_shard() {
        let mut map = ByNamespace::new();
        for i in 0..100 {
            map.insert(key(&format!("ns{i}"), "o"), i);
            map.remove(&key(&format!("ns{i}"), "o"));
        }
        assert!(map.is_empty());
        assert_eq!(map.shards.len(), 0);
    }
}
