//! A map keyed by lowercase wire-format names ([`crate::zone::wire`]),
//! split in shards that zones share: a zone made from another by a few
//! changes copies the shards those changes touch and shares the rest, so
//! a change of one name at 100,000 costs a shard's few hundred entries,
//! not the whole map.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;

/// Enough that one shard stays a few hundred entries at 100,000 names;
/// a power of two.
const SHARDS: usize = 256;

type Shard<V> = HashTable<(Box<[u8]>, V)>;

#[derive(Clone)]
pub(crate) struct Names<V> {
    /// One hash picks the shard (bits 32 and up) and the slot in it (the
    /// low bits, and the top seven as hashbrown's tag), so the shard bits
    /// stay out of both. Seeded per process: tenants choose the keys.
    hasher: foldhash::fast::RandomState,
    shards: Box<[Arc<Shard<V>>]>,
    len: usize,
}

impl<V> Default for Names<V> {
    fn default() -> Self {
        // One empty shard shared by every slot until a write copies it.
        let empty = Arc::new(HashTable::new());
        Names {
            hasher: foldhash::fast::RandomState::default(),
            shards: (0..SHARDS).map(|_| empty.clone()).collect(),
            len: 0,
        }
    }
}

impl<V> Names<V> {
    fn locate(&self, key: &[u8]) -> (u64, usize) {
        let hash = self.hasher.hash_one(key);
        (hash, (hash >> 32) as usize % SHARDS)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn get_key_value(&self, key: &[u8]) -> Option<(&[u8], &V)> {
        let (hash, shard) = self.locate(key);
        self.shards[shard]
            .find(hash, |(k, _)| **k == *key)
            .map(|(k, v)| (&**k, v))
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<&V> {
        self.get_key_value(key).map(|(_, v)| v)
    }

    pub(crate) fn contains_key(&self, key: &[u8]) -> bool {
        self.get_key_value(key).is_some()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        self.shards
            .iter()
            .flat_map(|s| s.iter())
            .map(|(k, v)| (&**k, v))
    }
}

impl<V: Clone> Names<V> {
    /// The shard of `key`, copied first if another zone shares it.
    fn shard_mut(&mut self, key: &[u8]) -> (u64, &mut Shard<V>) {
        let (hash, shard) = self.locate(key);
        (hash, Arc::make_mut(&mut self.shards[shard]))
    }

    /// Sets `key` to `value`; the value it had.
    pub(crate) fn insert(&mut self, key: &[u8], value: V) -> Option<V> {
        let hasher = self.hasher.clone();
        let (hash, shard) = self.shard_mut(key);
        let old = match shard.entry(hash, |(k, _)| **k == *key, |(k, _)| hasher.hash_one(k)) {
            hashbrown::hash_table::Entry::Occupied(mut e) => {
                Some(std::mem::replace(&mut e.get_mut().1, value))
            }
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert((key.into(), value));
                None
            }
        };
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<V> {
        if !self.contains_key(key) {
            return None;
        }
        let (hash, shard) = self.shard_mut(key);
        let ((_, value), _) = shard.find_entry(hash, |(k, _)| **k == *key).ok()?.remove();
        self.len -= 1;
        Some(value)
    }

    /// The value of `key`, for changing in place; `None` (and no copy of
    /// its shard) when it has none.
    pub(crate) fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        if !self.contains_key(key) {
            return None;
        }
        let (hash, shard) = self.shard_mut(key);
        shard.find_mut(hash, |(k, _)| **k == *key).map(|(_, v)| v)
    }
}

/// The same keys with the same values, whatever the shards and seeds.
impl<V: PartialEq> PartialEq for Names<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

/// Sorted by key, so two maps of the same content print alike.
impl<V: std::fmt::Debug> std::fmt::Debug for Names<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut entries: Vec<_> = self.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        f.debug_map()
            .entries(
                entries
                    .into_iter()
                    .map(|(k, v)| (String::from_utf8_lossy(k), v)),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_shares_what_it_does_not_change() {
        let mut a: Names<u32> = Names::default();
        for i in 0..2000u32 {
            a.insert(format!("name-{i}").as_bytes(), i);
        }
        assert_eq!(a.len(), 2000);
        let mut b = a.clone();
        b.insert(b"name-7", 70);
        assert_eq!(b.remove(b"name-8"), Some(8));
        assert_eq!(b.remove(b"absent"), None);
        *b.get_mut(b"name-9").unwrap() += 1;
        assert_eq!((a.get(b"name-7"), b.get(b"name-7")), (Some(&7), Some(&70)));
        assert_eq!((a.get(b"name-8"), b.get(b"name-8")), (Some(&8), None));
        assert_eq!((a.get(b"name-9"), b.get(b"name-9")), (Some(&9), Some(&10)));
        assert_eq!((a.len(), b.len()), (2000, 1999));
        let shared = a
            .shards
            .iter()
            .zip(b.shards.iter())
            .filter(|(x, y)| Arc::ptr_eq(x, y))
            .count();
        // Three changes copy at most three shards.
        assert!(shared >= SHARDS - 3, "{shared}");
        assert_ne!(a, b);
        b.insert(b"name-7", 7);
        b.insert(b"name-8", 8);
        *b.get_mut(b"name-9").unwrap() -= 1;
        assert_eq!(a, b);
    }
}
