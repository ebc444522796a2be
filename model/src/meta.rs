//! Object metadata as the store keeps it: the fields teapot reads, each
//! in the smallest owned form, and everything else boxed behind one
//! pointer that is empty for almost every object.
//!
//! `ObjectMeta` is about 350 bytes before any string (sixteen `Option`
//! fields, most of them `None`), and each label or annotation map a
//! 540-byte `BTreeMap` node for even one entry. [`CompactMeta`] keeps
//! name, namespace, uid, resourceVersion, generation and
//! creationTimestamp inline, labels and annotations as [`CompactMap`]s,
//! and the rest (ownerReferences, finalizers, generateName, the deletion
//! fields, selfLink) as written in [`CompactMeta::rest`]. Nothing is
//! dropped: [`CompactMeta::to_typed`] gives back the `ObjectMeta` it was
//! made from, so a rule that judges metadata judges it as written.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// A label or annotation map as a sorted list: one small allocation per
/// key and value and one for the list, where a `BTreeMap` allocates a
/// node for 11 entries even for one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactMap(Box<[(Box<str>, Box<str>)]>);

impl CompactMap {
    pub fn new(map: BTreeMap<String, String>) -> CompactMap {
        CompactMap(
            map.into_iter()
                .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        let at = self.0.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&self.0[at].1)
    }

    /// The entries in key order, as the map would give them.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.into_iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

impl<'a> IntoIterator for &'a CompactMap {
    type Item = (&'a str, &'a str);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (Box<str>, Box<str>)>,
        fn(&'a (Box<str>, Box<str>)) -> (&'a str, &'a str),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
}

/// `ObjectMeta` as the store keeps it (see the module).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompactMeta {
    pub name: Option<Box<str>>,
    pub namespace: Option<Box<str>>,
    pub uid: Option<Box<str>>,
    pub resource_version: Option<Box<str>>,
    pub generation: Option<i64>,
    pub creation_timestamp: Option<Time>,
    pub labels: Option<CompactMap>,
    pub annotations: Option<CompactMap>,
    /// Every other field as written; `None` when all of them are unset.
    rest: Option<Box<ObjectMeta>>,
}

impl CompactMeta {
    pub fn new(mut meta: ObjectMeta) -> CompactMeta {
        let name = meta.name.take().map(String::into_boxed_str);
        let namespace = meta.namespace.take().map(String::into_boxed_str);
        let uid = meta.uid.take().map(String::into_boxed_str);
        let resource_version = meta.resource_version.take().map(String::into_boxed_str);
        let generation = meta.generation.take();
        let creation_timestamp = meta.creation_timestamp.take();
        let labels = meta.labels.take().map(CompactMap::new);
        let annotations = meta.annotations.take().map(CompactMap::new);
        CompactMeta {
            name,
            namespace,
            uid,
            resource_version,
            generation,
            creation_timestamp,
            labels,
            annotations,
            rest: (meta != ObjectMeta::default()).then(|| Box::new(meta)),
        }
    }

    /// The metadata as written.
    pub fn to_typed(&self) -> ObjectMeta {
        let mut meta = self.rest.as_deref().cloned().unwrap_or_default();
        meta.name = self.name.as_deref().map(String::from);
        meta.namespace = self.namespace.as_deref().map(String::from);
        meta.uid = self.uid.as_deref().map(String::from);
        meta.resource_version = self.resource_version.as_deref().map(String::from);
        meta.generation = self.generation;
        meta.creation_timestamp = self.creation_timestamp.clone();
        meta.labels = self.labels.as_ref().map(CompactMap::to_map);
        meta.annotations = self.annotations.as_ref().map(CompactMap::to_map);
        meta
    }

    /// The fields not kept inline, as written (`None`: all unset).
    pub fn rest(&self) -> Option<&ObjectMeta> {
        self.rest.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of `ObjectMeta` set: what is made of it gives it back.
    #[test]
    fn every_field_comes_back_as_written() {
        let meta: ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "web", "namespace": "t", "uid": "8d3c1a64", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2026-11-30T00:00:00Z",
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"teapot.dev/proxy-protocol": "v2", "a": ""},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "1"}],
            "finalizers": ["teapot.dev/x"], "generateName": "web-",
            "deletionTimestamp": "2026-11-30T00:00:01Z", "deletionGracePeriodSeconds": 30,
            "selfLink": "/api/v1/x",
            "managedFields": [{"manager": "kubectl", "operation": "Update"}],
        }))
        .unwrap();
        // The fixture sets every field (a new one would be missed here).
        let fields = serde_json::to_value(&meta).unwrap();
        assert_eq!(fields.as_object().unwrap().len(), 15, "{fields}");
        let compact = CompactMeta::new(meta.clone());
        assert_eq!(compact.to_typed(), meta);
        assert_eq!(compact.labels.as_ref().unwrap().get("tier"), Some("front"));
        let plain = CompactMeta::new(ObjectMeta {
            name: Some("web".into()),
            labels: Some(BTreeMap::new()),
            ..ObjectMeta::default()
        });
        assert!(plain.rest().is_none());
        assert_eq!(plain.to_typed().labels, Some(BTreeMap::new()));
        assert_eq!(CompactMeta::default().to_typed(), ObjectMeta::default());
    }

    /// The point of the type: a fraction of `ObjectMeta`.
    #[test]
    fn is_less_than_half_of_object_meta() {
        let compact = std::mem::size_of::<CompactMeta>();
        let typed = std::mem::size_of::<ObjectMeta>();
        assert!(2 * compact < typed, "{compact} bytes, ObjectMeta {typed}");
    }
}
