//! The route table: an immutable index from (host, path) to an upstream,
//! built once per snapshot so that a lookup is a few hash probes and no
//! allocation.
//!
//! Semantics (DESIGN.md, "Ingress semantics"): the most specific host group
//! is chosen first (an exact host, else a wildcard one label up, else the
//! rules without host); inside it `Exact` is tried on the whole path, then
//! `Prefix` keys from the longest element-wise prefix of the path to `/`.
//! A request that matches no path of its host group goes to the default
//! backend, if any; it does not fall through to a less specific host group
//! (as in ingress-nginx and the Gateway API, a host's rules are its own).

use std::collections::HashMap;
use std::sync::Arc;

/// Keys are operator and tenant configuration, never request input, so a
/// fast seeded hash is safe here; lookups by request hosts only probe.
type FastMap<V> = HashMap<Box<str>, V, foldhash::fast::RandomState>;

/// One path rule: where it goes and which Ingress (by compile order) owns it.
#[derive(Debug)]
struct Route {
    upstream: Arc<Upstream>,
    owner: u32,
}

use teapot_api::{HostPattern, PathKind};

use crate::upstream::Upstream;

/// The paths of one host group.
#[derive(Debug, Default)]
pub struct PathTable {
    exact: FastMap<Route>,
    /// Keys without trailing slash; `/` is the empty key.
    prefix: FastMap<Route>,
    /// Where requests for this host that match no path go: a tenant
    /// Ingress's `defaultBackend`, bound to its assigned hostname.
    fallback: Option<Arc<Upstream>>,
}

impl PathTable {
    /// Adds a rule for `owner` unless the same (kind, path) is already
    /// there; on such a conflict returns the owner that holds it (the
    /// caller adds oldest first, so that is the older one).
    pub fn insert(
        &mut self,
        kind: PathKind,
        path: &str,
        upstream: Arc<Upstream>,
        owner: u32,
    ) -> Result<(), u32> {
        let (map, key) = match kind {
            PathKind::Exact => (&mut self.exact, path),
            PathKind::Prefix => (&mut self.prefix, teapot_api::path::prefix_key(path)),
        };
        if let Some(existing) = map.get(key) {
            return Err(existing.owner);
        }
        map.insert(key.into(), Route { upstream, owner });
        Ok(())
    }

    /// Sets the fallback unless one is set; returns false if taken.
    pub fn set_fallback(&mut self, upstream: Arc<Upstream>) -> bool {
        if self.fallback.is_some() {
            return false;
        }
        self.fallback = Some(upstream);
        true
    }

    /// The upstream for a request path (without query), falling back to
    /// this host's default backend.
    pub fn lookup(&self, path: &str) -> Option<&Arc<Upstream>> {
        self.lookup_path(path).or(self.fallback.as_ref())
    }

    fn lookup_path(&self, path: &str) -> Option<&Arc<Upstream>> {
        if let Some(r) = self.exact.get(path) {
            return Some(&r.upstream);
        }
        if self.prefix.is_empty() {
            return None;
        }
        let mut candidate = path.trim_end_matches('/');
        loop {
            if let Some(r) = self.prefix.get(candidate) {
                return Some(&r.upstream);
            }
            candidate = &candidate[..candidate.rfind('/')?];
        }
    }

    pub fn len(&self) -> usize {
        self.exact.len() + self.prefix.len() + usize::from(self.fallback.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The path table of `key`, created on first use; probes before it
/// allocates a key, since most calls find an existing host.
fn group<'m>(map: &'m mut FastMap<PathTable>, key: &str) -> &'m mut PathTable {
    if !map.contains_key(key) {
        map.insert(key.into(), PathTable::default());
    }
    map.get_mut(key).expect("inserted above")
}

/// Every route of a snapshot.
#[derive(Debug, Default)]
pub struct RouteTable {
    exact_hosts: FastMap<PathTable>,
    /// `*.foo.com` stored as `foo.com`.
    wildcard_hosts: FastMap<PathTable>,
    any_host: PathTable,
    default_backend: Option<Arc<Upstream>>,
}

impl RouteTable {
    /// The path table of a host pattern (`None`: rules without host).
    pub fn host_mut(&mut self, host: Option<&HostPattern>) -> &mut PathTable {
        match host {
            None => &mut self.any_host,
            Some(HostPattern::Exact(h)) => group(&mut self.exact_hosts, h),
            Some(HostPattern::Wildcard(s)) => group(&mut self.wildcard_hosts, s),
        }
    }

    /// Sets the default backend unless one is set; returns false if taken.
    pub fn set_default_backend(&mut self, upstream: Arc<Upstream>) -> bool {
        if self.default_backend.is_some() {
            return false;
        }
        self.default_backend = Some(upstream);
        true
    }

    /// Looks up a request. `authority` is the Host header or `:authority`
    /// as received; `path` is the path without query.
    pub fn lookup(&self, authority: &str, path: &str) -> Option<&Arc<Upstream>> {
        let mut buf = [0u8; 256];
        let group = teapot_api::host::normalize_request_host(authority, &mut buf)
            .and_then(|host| {
                self.exact_hosts.get(host).or_else(|| {
                    let (_, parent) = host.split_once('.')?;
                    self.wildcard_hosts.get(parent)
                })
            })
            .unwrap_or(&self.any_host);
        group.lookup(path).or(self.default_backend.as_ref())
    }

    /// Number of (host, path) routes.
    pub fn len(&self) -> usize {
        self.exact_hosts.values().map(PathTable::len).sum::<usize>()
            + self
                .wildcard_hosts
                .values()
                .map(PathTable::len)
                .sum::<usize>()
            + self.any_host.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0 && self.default_backend.is_none()
    }

    pub fn hosts(&self) -> usize {
        self.exact_hosts.len() + self.wildcard_hosts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PathKind::{Exact, Prefix};

    fn up(name: &str) -> Arc<Upstream> {
        Arc::new(Upstream::new(name.into(), Vec::new(), None))
    }

    fn table(rules: &[(Option<&str>, PathKind, &str, &str)]) -> RouteTable {
        let mut t = RouteTable::default();
        for (i, (host, kind, path, name)) in rules.iter().enumerate() {
            let host = host.map(|h| HostPattern::parse(h).unwrap());
            assert!(
                t.host_mut(host.as_ref())
                    .insert(*kind, path, up(name), i as u32)
                    .is_ok()
            );
        }
        t
    }

    fn hit(t: &RouteTable, host: &str, path: &str) -> Option<String> {
        t.lookup(host, path).map(|u| u.name.clone())
    }

    #[test]
    fn prefix_matches_element_wise() {
        let t = table(&[(None, Prefix, "/aaa", "aaa")]);
        assert_eq!(hit(&t, "x", "/aaa").as_deref(), Some("aaa"));
        assert_eq!(hit(&t, "x", "/aaa/").as_deref(), Some("aaa"));
        assert_eq!(hit(&t, "x", "/aaa/bbb").as_deref(), Some("aaa"));
        assert_eq!(hit(&t, "x", "/aaaccc"), None);
        assert_eq!(hit(&t, "x", "/aa"), None);
        assert_eq!(hit(&t, "x", "/"), None);
    }

    #[test]
    fn trailing_slash_in_rule_is_ignored() {
        let t = table(&[(None, Prefix, "/foo/", "foo")]);
        assert_eq!(hit(&t, "x", "/foo").as_deref(), Some("foo"));
        assert_eq!(hit(&t, "x", "/foo/").as_deref(), Some("foo"));
        assert_eq!(hit(&t, "x", "/foo/bar").as_deref(), Some("foo"));
        assert_eq!(hit(&t, "x", "/foobar"), None);
    }

    #[test]
    fn root_prefix_matches_everything() {
        let t = table(&[(None, Prefix, "/", "root")]);
        for p in ["/", "/a", "/a/b/c/", "//"] {
            assert_eq!(hit(&t, "x", p).as_deref(), Some("root"), "{p}");
        }
    }

    #[test]
    fn exact_is_whole_path_and_case_sensitive() {
        let t = table(&[(None, Exact, "/foo", "foo")]);
        assert_eq!(hit(&t, "x", "/foo").as_deref(), Some("foo"));
        assert_eq!(hit(&t, "x", "/foo/"), None);
        assert_eq!(hit(&t, "x", "/FOO"), None);
        assert_eq!(hit(&t, "x", "/foo/bar"), None);
    }

    #[test]
    fn prefix_is_case_sensitive() {
        let t = table(&[(None, Prefix, "/Foo", "foo")]);
        assert_eq!(hit(&t, "x", "/foo"), None);
        assert_eq!(hit(&t, "x", "/Foo/x").as_deref(), Some("foo"));
    }

    #[test]
    fn longest_match_wins_and_exact_beats_prefix_on_a_tie() {
        let t = table(&[
            (None, Prefix, "/", "root"),
            (None, Prefix, "/foo", "foo-prefix"),
            (None, Exact, "/foo", "foo-exact"),
            (None, Prefix, "/foo/bar", "foobar"),
            (None, Exact, "/foo/bar/baz/", "exact-slash"),
        ]);
        assert_eq!(hit(&t, "x", "/foo").as_deref(), Some("foo-exact"));
        assert_eq!(hit(&t, "x", "/foo/").as_deref(), Some("foo-prefix"));
        assert_eq!(hit(&t, "x", "/foo/x").as_deref(), Some("foo-prefix"));
        assert_eq!(hit(&t, "x", "/foo/bar/x").as_deref(), Some("foobar"));
        assert_eq!(
            hit(&t, "x", "/foo/bar/baz/").as_deref(),
            Some("exact-slash")
        );
        assert_eq!(hit(&t, "x", "/foo/bar/baz").as_deref(), Some("foobar"));
        assert_eq!(hit(&t, "x", "/other").as_deref(), Some("root"));
    }

    #[test]
    fn host_matching_case_port_trailing_dot() {
        let t = table(&[(Some("foo.bar.com"), Prefix, "/", "foo")]);
        for h in [
            "foo.bar.com",
            "FOO.Bar.COM",
            "foo.bar.com:8080",
            "foo.bar.com.",
            "foo.bar.com.:443",
        ] {
            assert_eq!(hit(&t, h, "/").as_deref(), Some("foo"), "{h}");
        }
        assert_eq!(hit(&t, "bar.com", "/"), None);
        assert_eq!(hit(&t, "xfoo.bar.com", "/"), None);
    }

    #[test]
    fn wildcard_depth_and_exact_precedence() {
        let t = table(&[
            (Some("*.foo.com"), Prefix, "/", "wild"),
            (Some("a.foo.com"), Prefix, "/api", "exact"),
        ]);
        assert_eq!(hit(&t, "b.foo.com", "/").as_deref(), Some("wild"));
        assert_eq!(hit(&t, "B.Foo.com:80", "/x").as_deref(), Some("wild"));
        assert_eq!(hit(&t, "a.foo.com", "/api/v1").as_deref(), Some("exact"));
        // The exact host owns its requests: no fall-through to the wildcard.
        assert_eq!(hit(&t, "a.foo.com", "/"), None);
        assert_eq!(hit(&t, "c.b.foo.com", "/"), None);
        assert_eq!(hit(&t, "foo.com", "/"), None);
    }

    #[test]
    fn hostless_rules_catch_other_hosts_and_default_backend_catches_the_rest() {
        let mut t = table(&[
            (Some("a.com"), Prefix, "/a", "a"),
            (None, Prefix, "/any", "any"),
        ]);
        assert_eq!(hit(&t, "b.com", "/any/x").as_deref(), Some("any"));
        assert_eq!(hit(&t, "", "/any").as_deref(), Some("any"));
        assert_eq!(hit(&t, "a.com", "/any"), None);
        assert!(t.set_default_backend(up("default")));
        assert!(!t.set_default_backend(up("second")));
        assert_eq!(hit(&t, "a.com", "/any").as_deref(), Some("default"));
        assert_eq!(hit(&t, "b.com", "/nothing").as_deref(), Some("default"));
    }

    #[test]
    fn a_host_fallback_catches_its_own_unmatched_paths_only() {
        let mut t = table(&[(Some("a.com"), Prefix, "/api", "api")]);
        let host = HostPattern::parse("a.com").unwrap();
        assert!(t.host_mut(Some(&host)).set_fallback(up("a-default")));
        assert!(!t.host_mut(Some(&host)).set_fallback(up("second")));
        assert!(t.set_default_backend(up("global")));
        assert_eq!(hit(&t, "a.com", "/api/x").as_deref(), Some("api"));
        assert_eq!(hit(&t, "a.com", "/other").as_deref(), Some("a-default"));
        assert_eq!(hit(&t, "b.com", "/other").as_deref(), Some("global"));
    }

    #[test]
    fn conflicts_keep_the_first_insert() {
        let mut t = RouteTable::default();
        let g = t.host_mut(None);
        assert_eq!(g.insert(Prefix, "/x/", up("old"), 0), Ok(()));
        assert_eq!(g.insert(Prefix, "/x", up("new"), 1), Err(0));
        assert_eq!(g.insert(Exact, "/x", up("exact"), 1), Ok(()));
        assert_eq!(hit(&t, "h", "/x/y").as_deref(), Some("old"));
    }
}
