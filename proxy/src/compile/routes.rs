//! The route table: an immutable index from (host, path) to an upstream,
//! built once per snapshot so that a lookup is a few hash probes and no
//! allocation.
//!
//! Semantics (docs/architecture.md, "Ingress semantics"): the most specific host group
//! is chosen first (an exact host, else a wildcard one label up, else the
//! rules without host); inside it `Exact` is tried on the whole path, then
//! `Prefix` keys from the longest element-wise prefix of the path to `/`.
//! A Prefix rule written with a trailing slash (`/foo/bar/`) and one
//! written without (`/foo/bar`) are two rules, as ingress-nginx makes
//! them two locations (`location /foo/bar/` and `location = /foo/bar`):
//! the path itself goes to the one without, the paths below it (`/foo/bar/`
//! included) to the one with; either alone matches both, as the Ingress
//! API reads a trailing slash.
//! A request that matches no path of its host group goes to the default
//! backend, if any; it does not fall through to a less specific host group
//! (as in ingress-nginx and the Gateway API, a host's rules are its own).
//!
//! Layout: hosts map to a group number; every path of every group lives in
//! one hash table whose keys point into one string arena. A compile of 100k
//! Ingresses inserts about a million paths, and a map (or a boxed key) per
//! host made allocation the larger part of compile time.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use teapot_api::regex::PathRegex;
use teapot_api::{HostPattern, PathKind};

use crate::compile::traffic::TrafficPolicy;
use crate::compile::upstream::Upstream;
use crate::live::fairness::TenantGate;

/// How specific the host pattern a request matched is, across the
/// Gateway API and Ingress tables: an exact host beats a wildcard, a
/// longer wildcard suffix a shorter one, any wildcard the catch-all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HostRank {
    None,
    Any,
    Wildcard(usize),
    Exact,
}

/// Where a matched rule goes, with the limits of the Ingress it came from.
#[derive(Clone, Debug)]
pub struct Route {
    pub upstream: Arc<Upstream>,
    /// `None` for an operator Ingress without limits (the common case in
    /// large tables: no allocation); shared by every rule of one Ingress.
    pub policy: Option<Arc<RoutePolicy>>,
    /// `namespace/name` of the Ingress the rule came from (empty for a
    /// route no Ingress made), shared by its rules: what the access log
    /// and the per-route series name (docs/operations.md).
    pub ingress: Arc<str>,
}

impl Route {
    pub fn new(
        upstream: Arc<Upstream>,
        policy: Option<Arc<RoutePolicy>>,
        ingress: Arc<str>,
    ) -> Route {
        Route {
            upstream,
            policy,
            ingress,
        }
    }

    /// `teapot.dev/max-body-size` of the Ingress (0: no limit of its own).
    pub fn max_body_size(&self) -> Option<u64> {
        self.policy.as_ref().and_then(|p| p.max_body_size)
    }

    /// The gate of the Tenant owning the Ingress; `None` in operator namespaces.
    pub fn tenant(&self) -> Option<&Arc<TenantGate>> {
        self.policy.as_ref().and_then(|p| p.tenant.as_ref())
    }

    /// The Ingress's traffic policy (allow-lists, rate limits, redirects,
    /// CORS); `None` for almost every route.
    pub fn traffic(&self) -> Option<&Arc<TrafficPolicy>> {
        self.policy.as_ref().and_then(|p| p.traffic.as_ref())
    }
}

impl From<Arc<Upstream>> for Route {
    fn from(upstream: Arc<Upstream>) -> Route {
        Route::new(upstream, None, Arc::from(""))
    }
}

impl std::ops::Deref for Route {
    type Target = Upstream;
    fn deref(&self) -> &Upstream {
        &self.upstream
    }
}

/// Per-Ingress limits carried by its routes.
#[derive(Debug, Default)]
pub struct RoutePolicy {
    /// `teapot.dev/max-body-size`; it only lowers the operator maximum.
    pub max_body_size: Option<u64>,
    pub tenant: Option<Arc<TenantGate>>,
    /// From the Ingress's ingress-nginx annotations (crate::compile::traffic).
    pub traffic: Option<Arc<TrafficPolicy>>,
}

/// Keys are operator and tenant configuration, never request input, so a
/// fast seeded hash is safe here; lookups by request hosts only probe.
type FastMap<V> = hashbrown::HashMap<Box<str>, V, foldhash::fast::RandomState>;

/// A host group: the paths of one host pattern (or of the rules without
/// host, which are group 0), by number.
type GroupId = u32;

/// What a lookup needs about a host group, stored in the host map's entry
/// so that finding the host costs no further cache miss.
#[derive(Clone, Debug, Default)]
struct Group {
    id: GroupId,
    /// Where requests for this host that match no path go: a tenant
    /// Ingress's `defaultBackend`, bound to its assigned hostname.
    fallback: Option<Route>,
    exact: u32,
    prefix: u32,
    /// Segments of the longest prefix key: a lookup starts its walk up the
    /// request path there, so a deep path costs no probes for depths no
    /// rule has (each probe is a likely cache miss in a large table).
    prefix_depth: u32,
    /// Regular-expression paths (ingress-nginx's `use-regex`,
    /// `rewrite-target`), longest pattern first, then oldest: empty, and
    /// never looked at, for almost every host.
    regexes: Vec<RegexPath>,
    /// Whether an Ingress rule has decided where this host's unmatched
    /// paths go ([`PathTable::decide_fallback`]).
    decided: bool,
}

/// A regular-expression path rule.
#[derive(Clone, Debug)]
struct RegexPath {
    regex: Arc<PathRegex>,
    route: Route,
    owner: u32,
}

impl RegexPath {
    /// What ingress-nginx orders a host's locations by: the path's length.
    fn weight(&self) -> usize {
        self.regex.as_str().len()
    }
}

/// Bytes of request path a lookup may run through a host's regex paths
/// (each pattern is one DFA step per byte): past it, the remaining
/// patterns are not tried and the Exact/Prefix rules decide, as for a host
/// without them.
pub const INGRESS_REGEX_BYTES_PER_REQUEST: usize = 256 * 1024;

/// One path rule: its key (in the arena), where it goes and which Ingress
/// (by compile order) owns it.
#[derive(Debug)]
struct PathEntry {
    group: GroupId,
    kind: EntryKind,
    /// A Prefix rule written with a trailing slash (`/foo/`, not `/`).
    slashed: bool,
    /// A [`EntryKind::Prefix`] entry whose key also has the other spelling,
    /// stored as [`EntryKind::Twin`]: only then does a lookup probe twice.
    twin: bool,
    start: u32,
    len: u32,
    route: Route,
    owner: u32,
}

/// Under which kind an entry is stored and probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum EntryKind {
    Exact,
    /// The first Prefix rule of a key, with or without its trailing slash.
    Prefix,
    /// The second Prefix rule of a key: the spelling its [`Self::Prefix`]
    /// entry does not have.
    Twin,
}

/// Every route of a snapshot.
#[derive(Debug, Default)]
pub struct RouteTable {
    exact_hosts: FastMap<Group>,
    /// `*.foo.com` stored as `foo.com`.
    wildcard_hosts: FastMap<Group>,
    any_host: Group,
    /// Groups handed out so far; 0 is the rules without host.
    groups: u32,
    paths: HashTable<PathEntry>,
    /// Path keys of `paths`, back to back. Prefix keys have no trailing
    /// slash; `/` is the empty key.
    arena: String,
    hasher: foldhash::fast::RandomState,
    default_backend: Option<Route>,
}

/// The paths of one host group, for adding rules.
#[derive(Debug)]
pub struct PathTable<'t> {
    group: &'t mut Group,
    paths: &'t mut HashTable<PathEntry>,
    arena: &'t mut String,
    hasher: &'t foldhash::fast::RandomState,
}

impl PathTable<'_> {
    /// Adds a rule for `owner` unless the same (kind, path) is already
    /// there; on such a conflict returns the owner that holds it (the
    /// caller adds oldest first, so that is the older one).
    pub fn insert(
        &mut self,
        kind: PathKind,
        path: &str,
        route: Route,
        owner: u32,
    ) -> Result<(), u32> {
        let (mut entry_kind, key) = match kind {
            PathKind::Exact => (EntryKind::Exact, path),
            PathKind::Prefix => (EntryKind::Prefix, teapot_api::path::prefix_key(path)),
        };
        let slashed = kind == PathKind::Prefix && teapot_api::path::prefix_slashed(path);
        let group = self.group.id;
        let hash = path_hash(self.hasher, group, entry_kind, key);
        let arena = &*self.arena;
        let found = self.paths.find_mut(hash, |e| {
            e.group == group && e.kind == entry_kind && entry_key(arena, e) == key
        });
        if let Some(existing) = found {
            if entry_kind == EntryKind::Exact || existing.slashed == slashed {
                return Err(existing.owner);
            }
            // `/foo` beside `/foo/`: the other spelling's rule, unless its
            // twin holds that spelling already.
            if existing.twin {
                let owner = existing.owner;
                let twin = path_hash(self.hasher, group, EntryKind::Twin, key);
                let held = self.paths.find(twin, |e| {
                    e.group == group && e.kind == EntryKind::Twin && entry_key(arena, e) == key
                });
                return Err(held.map_or(owner, |e| e.owner));
            }
            existing.twin = true;
            entry_kind = EntryKind::Twin;
        }
        let hash = path_hash(self.hasher, group, entry_kind, key);
        let start = u32::try_from(self.arena.len()).expect("route keys exceed 4 GiB");
        self.arena.push_str(key);
        let entry = PathEntry {
            group,
            kind: entry_kind,
            slashed,
            twin: false,
            start,
            len: key.len() as u32,
            route,
            owner,
        };
        let hasher = self.hasher;
        let arena = &*self.arena;
        self.paths.insert_unique(hash, entry, |e| {
            path_hash(hasher, e.group, e.kind, entry_key(arena, e))
        });
        let g = &mut *self.group;
        if entry_kind == EntryKind::Exact {
            g.exact += 1;
        } else {
            g.prefix += 1;
            g.prefix_depth = g.prefix_depth.max(segments(key));
        }
        Ok(())
    }

    /// Adds a regular-expression path rule for `owner` unless the same
    /// pattern is already there (then returns its owner, the older one).
    pub fn insert_regex(
        &mut self,
        regex: Arc<PathRegex>,
        route: Route,
        owner: u32,
    ) -> Result<(), u32> {
        let regexes = &mut self.group.regexes;
        if let Some(held) = regexes.iter().find(|r| r.regex.as_str() == regex.as_str()) {
            return Err(held.owner);
        }
        let entry = RegexPath {
            regex,
            route,
            owner,
        };
        // Longest first; among equals, the older (added first) first.
        let at = regexes.partition_point(|r| r.weight() >= entry.weight());
        regexes.insert(at, entry);
        Ok(())
    }

    /// The first call for a host decides where its unmatched paths go:
    /// `default`, unless a fallback is set already; later calls change
    /// nothing. The flag lives in the host's group, so deciding costs no
    /// set of hosts beside the table.
    pub fn decide_fallback(&mut self, default: Option<&Route>) {
        let g = &mut *self.group;
        if std::mem::replace(&mut g.decided, true) {
            return;
        }
        if let Some(route) = default
            && g.fallback.is_none()
        {
            g.fallback = Some(route.clone());
        }
    }

    /// Sets the fallback unless one is set; returns false if taken.
    pub fn set_fallback(&mut self, route: Route) -> bool {
        let g = &mut *self.group;
        if g.fallback.is_some() {
            return false;
        }
        g.fallback = Some(route);
        true
    }
}

fn path_hash(
    hasher: &foldhash::fast::RandomState,
    group: GroupId,
    kind: EntryKind,
    key: &str,
) -> u64 {
    hasher.hash_one((group, kind, key))
}

/// Segments of a prefix key (`""` for `/` has none, `/a/b` has two).
fn segments(key: &str) -> u32 {
    key.bytes().filter(|&b| b == b'/').count() as u32
}

/// The first `depth` segments of a path without trailing slash.
fn truncate_segments(path: &str, depth: u32) -> &str {
    let mut seen = 0;
    for (i, b) in path.bytes().enumerate() {
        if b == b'/' {
            if seen == depth {
                return &path[..i];
            }
            seen += 1;
        }
    }
    path
}

fn entry_key<'a>(arena: &'a str, e: &PathEntry) -> &'a str {
    &arena[e.start as usize..(e.start + e.len) as usize]
}

/// The group of `key`, created on first use: one probe, and a key
/// allocated only for a new host.
fn group_of<'m>(map: &'m mut FastMap<Group>, groups: &mut u32, key: &str) -> &'m mut Group {
    map.entry_ref(key).or_insert_with(|| {
        *groups += 1;
        Group {
            id: *groups,
            ..Group::default()
        }
    })
}

impl RouteTable {
    /// An empty table with room for about `paths` rules on `hosts` hosts,
    /// so that a compile does not rehash as it grows.
    pub fn with_capacity(hosts: usize, paths: usize) -> RouteTable {
        let mut t = RouteTable::default();
        t.exact_hosts.reserve(hosts);
        t.paths.reserve(paths, |_| 0);
        t.arena.reserve(paths * 8);
        t
    }

    /// The path table of a host pattern (`None`: rules without host).
    pub fn host_mut(&mut self, host: Option<&HostPattern>) -> PathTable<'_> {
        let group = match host {
            None => &mut self.any_host,
            Some(HostPattern::Exact(h)) => group_of(&mut self.exact_hosts, &mut self.groups, h),
            Some(HostPattern::Wildcard(s)) => {
                group_of(&mut self.wildcard_hosts, &mut self.groups, s)
            }
        };
        PathTable {
            group,
            paths: &mut self.paths,
            arena: &mut self.arena,
            hasher: &self.hasher,
        }
    }

    /// Makes the exact host `alias` serve what `of` serves (ingress-nginx's
    /// `server-alias`: one more name of the same server): the same group,
    /// so every path of `of`, whichever Ingress added it, answers for the
    /// alias too. Not when `alias` has rules of its own (as ingress-nginx
    /// skips an alias another server has) or `of` has none; false then.
    /// A copy of the group as it is: called once every rule is in.
    pub fn alias(&mut self, alias: &str, of: &HostPattern) -> bool {
        if self.exact_hosts.contains_key(alias) {
            return false;
        }
        let group = match of {
            HostPattern::Exact(h) => self.exact_hosts.get(h.as_str()),
            HostPattern::Wildcard(s) => self.wildcard_hosts.get(s.as_str()),
        };
        let Some(group) = group.cloned() else {
            return false;
        };
        self.exact_hosts.insert(alias.into(), group);
        true
    }

    /// Sets the default backend unless one is set; returns false if taken.
    pub fn set_default_backend(&mut self, route: Route) -> bool {
        if self.default_backend.is_some() {
            return false;
        }
        self.default_backend = Some(route);
        true
    }

    /// How specific this table's match for a normalised host is (to weigh
    /// it against the Gateway API table's, crate::plane::decide).
    pub fn host_rank(&self, host: &str) -> HostRank {
        if self.exact_hosts.contains_key(host) {
            return HostRank::Exact;
        }
        if let Some((_, parent)) = host.split_once('.')
            && self.wildcard_hosts.contains_key(parent)
        {
            return HostRank::Wildcard(parent.len());
        }
        let any = &self.any_host;
        if any.exact + any.prefix > 0 || !any.regexes.is_empty() || any.fallback.is_some() {
            HostRank::Any
        } else {
            HostRank::None
        }
    }

    /// Looks up a request. `authority` is the Host header or `:authority`
    /// as received; `path` is the path without query.
    pub fn lookup(&self, authority: &str, path: &str) -> Option<&Route> {
        let mut buf = [0u8; 256];
        let group = teapot_api::host::normalize_request_host(authority, &mut buf)
            .and_then(|host| {
                self.exact_hosts.get(host).or_else(|| {
                    let (_, parent) = host.split_once('.')?;
                    self.wildcard_hosts.get(parent)
                })
            })
            .unwrap_or(&self.any_host);
        self.lookup_path(group, path)
            .or(group.fallback.as_ref())
            .or(self.default_backend.as_ref())
    }

    fn lookup_path<'a>(&'a self, g: &'a Group, path: &str) -> Option<&'a Route> {
        let group = g.id;
        if g.exact > 0
            && let Some(e) = self.probe(group, EntryKind::Exact, path)
        {
            return Some(&e.route);
        }
        if g.regexes.is_empty() {
            return self.lookup_prefix(g, path).map(|(route, _)| route);
        }
        // ingress-nginx orders a host's locations by path length once any
        // is a regex: the longest matching pattern wins, and a Prefix rule
        // competes by the length of its path.
        let tries = INGRESS_REGEX_BYTES_PER_REQUEST / path.len().max(1);
        let regex = g
            .regexes
            .iter()
            .take(tries)
            .find(|r| r.regex.is_match(path.as_bytes()));
        let prefix = self.lookup_prefix(g, path);
        match (regex, prefix) {
            (Some(r), Some((_, len))) if r.weight() >= len => Some(&r.route),
            (Some(r), None) => Some(&r.route),
            (_, prefix) => prefix.map(|(route, _)| route),
        }
    }

    /// The longest Prefix rule of the path, with the length of its path
    /// as written (`/` counts one).
    fn lookup_prefix(&self, g: &Group, path: &str) -> Option<(&Route, usize)> {
        if g.prefix == 0 {
            return None;
        }
        let mut candidate = truncate_segments(path.trim_end_matches('/'), g.prefix_depth);
        loop {
            if let Some(e) = self.probe(g.id, EntryKind::Prefix, candidate) {
                // The path itself goes to the spelling without a trailing
                // slash, the paths below it to the one with.
                let below = path.len() > candidate.len();
                let e = match e.twin && e.slashed != below {
                    true => self.probe(g.id, EntryKind::Twin, candidate).unwrap_or(e),
                    false => e,
                };
                return Some((&e.route, candidate.len().max(1) + usize::from(e.slashed)));
            }
            candidate = &candidate[..candidate.rfind('/')?];
        }
    }

    fn probe(&self, group: GroupId, kind: EntryKind, key: &str) -> Option<&PathEntry> {
        let hash = path_hash(&self.hasher, group, kind, key);
        self.paths.find(hash, |e| {
            e.group == group && e.kind == kind && entry_key(&self.arena, e) == key
        })
    }

    /// Number of (host, path) routes, host fallbacks included.
    pub fn len(&self) -> usize {
        let fallbacks = self
            .exact_hosts
            .values()
            .chain(self.wildcard_hosts.values())
            .chain([&self.any_host])
            .filter(|g| g.fallback.is_some())
            .count();
        let regexes: usize = self
            .exact_hosts
            .values()
            .chain(self.wildcard_hosts.values())
            .chain([&self.any_host])
            .map(|g| g.regexes.len())
            .sum();
        self.paths.len() + fallbacks + regexes
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0 && self.default_backend.is_none()
    }

    pub fn hosts(&self) -> usize {
        self.exact_hosts.len() + self.wildcard_hosts.len()
    }

    /// The route of a rule already in the table: `kind` and `path` as
    /// inserted, or the pattern of a regex path (`regex`); for adding a
    /// canary's backend to it.
    pub fn rule_mut(
        &mut self,
        host: Option<&HostPattern>,
        kind: PathKind,
        path: &str,
        regex: bool,
    ) -> Option<&mut Route> {
        let group = match host {
            None => &mut self.any_host,
            Some(HostPattern::Exact(h)) => self.exact_hosts.get_mut(h.as_str())?,
            Some(HostPattern::Wildcard(s)) => self.wildcard_hosts.get_mut(s.as_str())?,
        };
        if regex {
            return group
                .regexes
                .iter_mut()
                .find(|r| r.regex.as_str() == path)
                .map(|r| &mut r.route);
        }
        let (entry_kind, key) = match kind {
            PathKind::Exact => (EntryKind::Exact, path),
            PathKind::Prefix => (EntryKind::Prefix, teapot_api::path::prefix_key(path)),
        };
        let slashed = kind == PathKind::Prefix && teapot_api::path::prefix_slashed(path);
        let id = group.id;
        let arena = &self.arena;
        let hasher = &self.hasher;
        // The first spelling's entry, else its twin.
        let first = path_hash(hasher, id, entry_kind, key);
        let holds = |e: &PathEntry| e.slashed == slashed || entry_kind == EntryKind::Exact;
        let first_holds = self
            .paths
            .find(first, |e| {
                e.group == id && e.kind == entry_kind && entry_key(arena, e) == key
            })
            .is_some_and(holds);
        let (hash, kind) = if first_holds || entry_kind == EntryKind::Exact {
            (first, entry_kind)
        } else {
            (path_hash(hasher, id, EntryKind::Twin, key), EntryKind::Twin)
        };
        self.paths
            .find_mut(hash, |e| {
                e.group == id && e.kind == kind && entry_key(arena, e) == key
            })
            .filter(|e| holds(e))
            .map(|e| &mut e.route)
    }

    /// Whether an exact host has a group (rules, or a fallback).
    pub fn has_exact_host(&self, host: &str) -> bool {
        self.exact_hosts.contains_key(host)
    }

    /// The exact hosts that have rules: the names the fleet's DNS server
    /// answers for (crate::loops::dns_zone).
    pub fn exact_hosts(&self) -> impl Iterator<Item = &str> {
        self.exact_hosts.keys().map(|h| &**h)
    }

    /// The suffixes of the wildcard hosts that have rules (`acme.lb.DOMAIN`
    /// for `*.acme.lb.DOMAIN`): the fleet's DNS answers the names below
    /// them too.
    pub fn wildcard_hosts(&self) -> impl Iterator<Item = &str> {
        self.wildcard_hosts.keys().map(|h| &**h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PathKind::{Exact, Prefix};

    fn up(name: &str) -> Route {
        Arc::new(Upstream::new(name.into(), Vec::new(), None)).into()
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

    fn regex(t: &mut RouteTable, host: Option<&str>, pattern: &str, name: &str, owner: u32) {
        let host = host.map(|h| HostPattern::parse(h).unwrap());
        let regex = PathRegex::compile(pattern).unwrap();
        t.host_mut(host.as_ref())
            .insert_regex(regex, up(name), owner)
            .unwrap();
    }

    /// ingress-nginx's rewrite.go cases: once a host has regex paths, the
    /// longest matching path wins, Prefix paths competing by their length;
    /// Exact still first.
    #[test]
    fn regex_paths_compete_with_prefix_paths_by_length() {
        let mut t = table(&[
            (
                Some("r.example"),
                Prefix,
                "/.well-known/acme/challenge",
                "acme",
            ),
            (Some("r.example"), Prefix, "/foo", "foo"),
            (Some("r.example"), Prefix, "/foo/bar/bar", "foobarbar"),
            (Some("r.example"), Exact, "/exact", "exact"),
        ]);
        regex(&mut t, Some("r.example"), "/", "root-regex", 10);
        regex(&mut t, Some("r.example"), "/foo.+", "foo-regex", 11);
        regex(&mut t, Some("r.example"), "/foo/bar/[a-z]{3}", "three", 12);
        let at = |p: &str| hit(&t, "r.example", p);
        assert_eq!(at("/.well-known/acme/challenge").as_deref(), Some("acme"));
        assert_eq!(at("/foo").as_deref(), Some("foo"));
        assert_eq!(at("/FOO/bar").as_deref(), Some("foo-regex"));
        assert_eq!(at("/foo/bar/bar").as_deref(), Some("three"));
        assert_eq!(at("/exact").as_deref(), Some("exact"));
        assert_eq!(at("/other").as_deref(), Some("root-regex"));
        // The same pattern twice: the older holds it.
        let again = PathRegex::compile("/foo.+").unwrap();
        let host = HostPattern::parse("r.example").unwrap();
        assert_eq!(
            t.host_mut(Some(&host)).insert_regex(again, up("x"), 13),
            Err(11)
        );
        // Other hosts are untouched; a host of regexes alone has a rank.
        assert_eq!(hit(&t, "s.example", "/foo/x"), None);
        regex(&mut t, None, "/only", "any", 14);
        assert_eq!(t.host_rank("s.example"), HostRank::Any);
        assert_eq!(hit(&t, "s.example", "/only/x").as_deref(), Some("any"));
    }

    /// `server-alias`: the alias answers with every path of the host it
    /// names; a host with rules of its own, or an alias of a host
    /// without any, is not taken.
    #[test]
    fn an_alias_serves_its_hosts_paths() {
        let mut t = table(&[
            (Some("foo.example"), Prefix, "/a", "a"),
            (Some("own.example"), Prefix, "/", "own"),
        ]);
        let foo = HostPattern::parse("foo.example").unwrap();
        regex(&mut t, Some("foo.example"), "/r.+", "r", 5);
        assert!(t.alias("bar.example", &foo));
        assert_eq!(hit(&t, "bar.example", "/a/x").as_deref(), Some("a"));
        assert_eq!(hit(&t, "bar.example", "/rr").as_deref(), Some("r"));
        assert_eq!(hit(&t, "bar.example", "/b"), None);
        assert!(!t.alias("own.example", &foo));
        assert_eq!(hit(&t, "own.example", "/a").as_deref(), Some("own"));
        let none = HostPattern::parse("none.example").unwrap();
        assert!(!t.alias("baz.example", &none));
        assert_eq!(hit(&t, "baz.example", "/a"), None);
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
    fn deep_paths_start_at_the_deepest_rule() {
        assert_eq!(truncate_segments("/a/b/c", 0), "");
        assert_eq!(truncate_segments("/a/b/c", 1), "/a");
        assert_eq!(truncate_segments("/a/b/c", 3), "/a/b/c");
        assert_eq!(truncate_segments("/a/b/c", 9), "/a/b/c");
        assert_eq!(truncate_segments("//x", 1), "/");
        let t = table(&[
            (None, Prefix, "/", "root"),
            (None, Prefix, "/a/b", "ab"),
            (Some("h.com"), Prefix, "/a", "h-a"),
        ]);
        assert_eq!(hit(&t, "x", "/a/b/c/d/e/f").as_deref(), Some("ab"));
        assert_eq!(hit(&t, "x", "/a/bc/d").as_deref(), Some("root"));
        assert_eq!(hit(&t, "h.com", "/a/b/c/d/e/f").as_deref(), Some("h-a"));
        assert_eq!(hit(&t, "h.com", "/ab/c"), None);
    }

    #[test]
    fn conflicts_keep_the_first_insert() {
        let mut t = RouteTable::default();
        let mut g = t.host_mut(None);
        assert_eq!(g.insert(Prefix, "/x/", up("old"), 0), Ok(()));
        assert_eq!(g.insert(Prefix, "/x//", up("again"), 1), Err(0));
        assert_eq!(g.insert(Prefix, "/x", up("new"), 2), Ok(()));
        assert_eq!(g.insert(Prefix, "/x", up("newer"), 3), Err(2));
        assert_eq!(g.insert(Prefix, "/x/", up("newer"), 3), Err(0));
        assert_eq!(g.insert(Exact, "/x", up("exact"), 4), Ok(()));
        assert_eq!(g.insert(Exact, "/x", up("exact"), 5), Err(4));
        assert_eq!(g.insert(Prefix, "/", up("root"), 6), Ok(()));
        assert_eq!(g.insert(Prefix, "//", up("root"), 7), Err(6));
        assert_eq!(hit(&t, "h", "/x/y").as_deref(), Some("old"));
    }

    /// ingress-nginx's path-priority example: `Prefix /foo/bar` and
    /// `Prefix /foo/bar/` are two rules (two locations there:
    /// `= /foo/bar` and `/foo/bar/`). The path itself goes to the first,
    /// `/foo/bar/` and below to the second, whichever was added first; an
    /// Exact rule still wins its path.
    #[test]
    fn a_trailing_slash_makes_a_second_prefix_rule() {
        for (first, second) in [("/foo/bar", "/foo/bar/"), ("/foo/bar/", "/foo/bar")] {
            let mut t = table(&[
                (Some("test.com"), Prefix, first, first),
                (Some("test.com"), Prefix, second, second),
                (Some("test.com"), Prefix, "/", "root"),
            ]);
            let at = |t: &RouteTable, p: &str| hit(t, "test.com", p);
            assert_eq!(at(&t, "/foo/bar").as_deref(), Some("/foo/bar"), "{first}");
            for below in ["/foo/bar/", "/foo/bar/1", "/foo/bar//", "/foo/bar/a/b"] {
                assert_eq!(at(&t, below).as_deref(), Some("/foo/bar/"), "{below}");
            }
            assert_eq!(at(&t, "/foo/barx").as_deref(), Some("root"));
            assert_eq!(at(&t, "/foo").as_deref(), Some("root"));
            // The canary's rule is found by its own spelling.
            let host = HostPattern::parse("test.com").ok();
            for spelling in [first, second] {
                let route = t.rule_mut(host.as_ref(), Prefix, spelling, false);
                assert_eq!(route.map(|r| r.name.clone()).as_deref(), Some(spelling));
            }
            let mut g = t.host_mut(host.as_ref());
            assert_eq!(g.insert(Exact, "/foo/bar/", up("exact"), 9), Ok(()));
            assert_eq!(at(&t, "/foo/bar/").as_deref(), Some("exact"));
            assert_eq!(at(&t, "/foo/bar/1").as_deref(), Some("/foo/bar/"));
        }
        // Either spelling alone matches the path and below.
        let t = table(&[(None, Prefix, "/foo/bar/", "slash")]);
        assert_eq!(hit(&t, "x", "/foo/bar").as_deref(), Some("slash"));
        let mut t = table(&[(None, Prefix, "/foo/bar", "plain")]);
        assert_eq!(hit(&t, "x", "/foo/bar/").as_deref(), Some("plain"));
        assert!(t.rule_mut(None, Prefix, "/foo/bar/", false).is_none());
    }
}
