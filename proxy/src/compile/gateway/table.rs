//! The Gateway API route table: HTTPRoute and GRPCRoute rules by the
//! hostname they bound to, each host's candidates sorted once, at compile,
//! in the specification's precedence, so a lookup walks one short list and
//! takes the first rule that matches.
//!
//! Kept apart from the Ingress table ([`crate::compile::routes`]) so a
//! snapshot without Gateway routes pays one `is_empty` per request, and a
//! host without Gateway routes one hash probe per label (wildcards here
//! match any depth, docs/gateway-api.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use teapot_api::HostPattern;

use crate::compile::routes::{Route, RoutePolicy};

/// Keys are configuration, never request input (lookups only probe).
type FastMap<V> = std::collections::HashMap<Box<str>, V, foldhash::fast::RandomState>;

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

/// A request's facts the matches read, whatever its engine. Each is
/// optional: an engine that does not provide one (the HTTP/1 engine before
/// it is wired to Gateway matches, docs/gateway-api.md) matches no rule
/// that needs it, so a request never reaches a rule whose conditions were
/// not checked.
#[derive(Clone, Copy)]
pub struct RequestFacts<'a> {
    /// The method token; empty when unknown.
    pub method: &'a str,
    /// The query string (after `?`, without it); `None` when unknown, or
    /// when the request had none and the engine knows it (`Some("")`).
    pub query: Option<&'a str>,
    pub headers: Option<&'a dyn RequestHeaders>,
    /// Whether the request came over TLS (the HTTPS listener). `None` is
    /// taken as plain HTTP: a rule of an HTTPS listener only is never
    /// served to a request whose transport is unknown.
    pub tls: Option<bool>,
}

impl std::fmt::Debug for RequestFacts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestFacts")
            .field("method", &self.method)
            .field("query", &self.query)
            .field("headers", &self.headers.is_some())
            .field("tls", &self.tls)
            .finish()
    }
}

impl RequestFacts<'_> {
    /// Nothing known beyond the head.
    pub const UNKNOWN: RequestFacts<'static> = RequestFacts {
        method: "",
        query: None,
        headers: None,
        tls: None,
    };
}

/// Request headers as an engine holds them, read without allocating.
pub trait RequestHeaders {
    /// The first value of header `name` (ASCII case-insensitive).
    fn first(&self, name: &str) -> Option<&[u8]>;
}

impl RequestHeaders for http::HeaderMap {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.get(name).map(|v| v.as_bytes())
    }
}

impl RequestHeaders for &[(&str, &str)] {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_bytes())
    }
}

/// A path condition.
#[derive(Debug)]
pub enum PathMatch {
    Exact(Box<str>),
    /// Element-wise, stored without trailing slash (`/` is empty).
    Prefix(Box<str>),
    Regex(regex::Regex),
}

impl PathMatch {
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Exact(p) => path == &**p,
            PathMatch::Prefix(p) => {
                path.starts_with(&**p) && matches!(path.as_bytes().get(p.len()), None | Some(b'/'))
            }
            PathMatch::Regex(r) => r.is_match(path),
        }
    }

    /// The precedence of a path condition: Exact first, then the longest
    /// prefix, then regular expressions by length (the specification
    /// leaves their order to the implementation).
    fn rank(&self) -> (u8, std::cmp::Reverse<usize>) {
        match self {
            PathMatch::Exact(p) => (0, std::cmp::Reverse(p.len())),
            PathMatch::Prefix(p) => (1, std::cmp::Reverse(p.len() + 1)),
            PathMatch::Regex(r) => (2, std::cmp::Reverse(r.as_str().len())),
        }
    }
}

/// A header or query parameter value condition.
#[derive(Debug)]
pub enum ValueMatch {
    Exact(Box<str>),
    Regex(regex::Regex),
}

impl ValueMatch {
    fn matches(&self, value: &[u8]) -> bool {
        match self {
            ValueMatch::Exact(v) => value == v.as_bytes(),
            ValueMatch::Regex(r) => std::str::from_utf8(value).is_ok_and(|v| r.is_match(v)),
        }
    }
}

/// One match of one rule: every condition must hold.
#[derive(Debug)]
pub struct Matcher {
    pub path: PathMatch,
    pub method: Option<Box<str>>,
    /// Names lowercase.
    pub headers: Box<[(Box<str>, ValueMatch)]>,
    pub query: Box<[(Box<str>, ValueMatch)]>,
}

impl Matcher {
    pub fn matches(&self, path: &str, facts: &RequestFacts<'_>) -> bool {
        if !self.path.matches(path) {
            return false;
        }
        if let Some(m) = &self.method
            && facts.method != &**m
        {
            return false;
        }
        if !self.headers.is_empty() {
            let Some(headers) = facts.headers else {
                return false;
            };
            let ok = self
                .headers
                .iter()
                .all(|(name, v)| headers.first(name).is_some_and(|value| v.matches(value)));
            if !ok {
                return false;
            }
        }
        if !self.query.is_empty() {
            let Some(query) = facts.query else {
                return false;
            };
            let ok = self
                .query
                .iter()
                .all(|(name, v)| query_param(query, name).is_some_and(|value| v.matches(value)));
            if !ok {
                return false;
            }
        }
        true
    }
}

/// The first value of parameter `name` in `query` (names compared exactly,
/// as the specification asks; values as sent).
fn query_param<'q>(query: &'q str, name: &str) -> Option<&'q [u8]> {
    query.split('&').find_map(|pair| {
        let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
        (n == name).then_some(v.as_bytes())
    })
}

/// Edits of a header list: set (replace), add (append), remove.
#[derive(Debug, Default)]
pub struct HeaderEdits {
    pub set: Vec<(Box<str>, Box<str>)>,
    pub add: Vec<(Box<str>, Box<str>)>,
    pub remove: Vec<Box<str>>,
}

impl HeaderEdits {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

/// URLRewrite's and RequestRedirect's path change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathChange {
    Full(Box<str>),
    /// Replace the matched prefix with this.
    Prefix(Box<str>),
}

/// URLRewrite.
#[derive(Debug, Default)]
pub struct Rewrite {
    pub hostname: Option<Box<str>>,
    pub path: Option<PathChange>,
}

/// RequestRedirect.
#[derive(Clone, Debug)]
pub struct Redirect {
    /// `http` or `https`; `None` keeps the request's.
    pub scheme: Option<&'static str>,
    pub hostname: Option<Box<str>>,
    pub port: Option<u16>,
    pub path: Option<PathChange>,
    pub status: u16,
}

/// RequestMirror: a copy goes there, and nobody waits for it.
#[derive(Clone, Debug)]
pub struct Mirror {
    pub upstream: Arc<crate::compile::upstream::Upstream>,
    /// Share of requests mirrored, in millionths (1_000_000: all).
    pub per_million: u32,
}

/// What a matched rule does to the request and its response besides
/// choosing a backend: the filters (docs/gateway-api.md), applied by each
/// engine through [`crate::plane::filters`].
#[derive(Debug, Default)]
pub struct Filters {
    pub request_headers: HeaderEdits,
    pub response_headers: HeaderEdits,
    pub rewrite: Option<Rewrite>,
    pub mirrors: Vec<Mirror>,
    /// The prefix the rule matched (PathPrefix), for ReplacePrefixMatch.
    pub matched_prefix: Option<Box<str>>,
    /// `timeouts.request`: the whole request, client to response.
    pub request_timeout: Option<Duration>,
    /// `timeouts.backendRequest`: one request to a backend.
    pub backend_timeout: Option<Duration>,
}

impl Filters {
    pub fn is_empty(&self) -> bool {
        self.request_headers.is_empty()
            && self.response_headers.is_empty()
            && self.rewrite.is_none()
            && self.mirrors.is_empty()
            && self.request_timeout.is_none()
            && self.backend_timeout.is_none()
    }
}

/// One backendRef of a rule.
#[derive(Debug)]
pub struct Backend {
    pub weight: u64,
    /// `Err`: the reference does not resolve (missing, not permitted, not
    /// a Service): requests it would get are answered 500.
    pub route: Result<Route, ()>,
    /// This backendRef's own filters (the rule's apply first).
    pub filters: Option<Arc<Filters>>,
    /// Whether the backend speaks HTTP/2 without TLS (h2c): GRPCRoute
    /// backends, and Service ports with `appProtocol: kubernetes.io/h2c`.
    pub h2c: bool,
}

/// What a rule does with a request that matched it.
#[derive(Debug)]
pub enum Action {
    Backends {
        backends: Box<[Backend]>,
        total: u64,
        /// Weighted round-robin position.
        next: AtomicU64,
    },
    Redirect(Redirect),
    /// No backend to send to (no backendRefs, all weights zero):
    /// answered 500, as the specification asks.
    Unroutable,
}

impl Action {
    /// Picks a backend by weight: a shared counter walks the weight line,
    /// so each backend gets its share exactly over every `total` requests.
    pub fn pick(&self) -> Option<&Backend> {
        let Action::Backends {
            backends,
            total,
            next,
        } = self
        else {
            return None;
        };
        if *total == 0 {
            return None;
        }
        let mut at = next.fetch_add(1, Ordering::Relaxed) % total;
        for b in backends.iter() {
            if at < b.weight {
                return Some(b);
            }
            at -= b.weight;
        }
        None
    }
}

/// What the route a rule came from shares with all its rules.
#[derive(Debug)]
pub struct RouteInfo {
    /// `namespace/name`: what metrics and the access log name.
    pub name: Arc<str>,
    pub policy: Option<Arc<RoutePolicy>>,
}

/// What one (rule, match) of a route is: its conditions, what it does,
/// where it came from. Shared by the candidates of every hostname it binds
/// to.
#[derive(Debug)]
pub struct Target {
    pub matcher: Arc<Matcher>,
    pub action: Arc<Action>,
    pub info: Arc<RouteInfo>,
    /// Filters of the rule (for redirects and unresolved answers too).
    pub filters: Option<Arc<Filters>>,
}

/// One candidate of a host: a [`Target`] on the listener planes it was
/// bound through.
#[derive(Debug)]
pub struct Candidate {
    pub target: Arc<Target>,
    /// Listener planes: HTTP (`--http`) and HTTPS (`--https`).
    pub http: bool,
    pub https: bool,
    /// The sort key, compile-time only.
    order: Order,
}

impl std::ops::Deref for Candidate {
    type Target = Target;
    fn deref(&self) -> &Target {
        &self.target
    }
}

/// The precedence of a candidate (GEP-1294 and the HTTPRoute
/// specification): host specificity, path, method, header count, query
/// count, oldest route, namespace/name, rule and match position.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Order {
    host: std::cmp::Reverse<HostRank>,
    path: (u8, std::cmp::Reverse<usize>),
    method: bool,
    headers: std::cmp::Reverse<usize>,
    query: std::cmp::Reverse<usize>,
    /// The route's position in age order (oldest first, then
    /// namespace/name).
    route: u32,
    rule: u32,
    matched: u32,
}

impl Candidate {
    pub fn new(
        target: Arc<Target>,
        (http, https): (bool, bool),
        route: u32,
        rule: u32,
        matched: u32,
    ) -> Candidate {
        let m = &target.matcher;
        let order = Order {
            host: std::cmp::Reverse(HostRank::Exact),
            path: m.path.rank(),
            method: m.method.is_none(),
            headers: std::cmp::Reverse(m.headers.len()),
            query: std::cmp::Reverse(m.query.len()),
            route,
            rule,
            matched,
        };
        Candidate {
            target,
            http,
            https,
            order,
        }
    }

    fn at(&self, host: HostRank) -> Candidate {
        let mut order = self.order.clone();
        order.host = std::cmp::Reverse(host);
        Candidate {
            target: self.target.clone(),
            http: self.http,
            https: self.https,
            order,
        }
    }

    /// Whether it serves a request on this listener plane.
    fn on(&self, tls: Option<bool>) -> bool {
        match tls {
            Some(true) => self.https,
            None | Some(false) => self.http,
        }
    }
}

/// Candidates as added, by host pattern, before [`GatewayTable::build`].
#[derive(Debug, Default)]
pub struct TableBuilder {
    exact: FastMap<Vec<Candidate>>,
    wildcard: FastMap<Vec<Candidate>>,
    any: Vec<Candidate>,
}

impl TableBuilder {
    pub fn add(&mut self, host: Option<&HostPattern>, candidate: Candidate) {
        self.list_mut(host).push(candidate);
    }

    /// Room for about `hosts` host patterns.
    pub fn reserve(&mut self, hosts: usize) {
        self.exact.reserve(hosts);
    }

    /// The candidates bound to `host` so far, to add to (one probe for
    /// all a route's rules on that host).
    pub fn list_mut(&mut self, host: Option<&HostPattern>) -> &mut Vec<Candidate> {
        // Probe before allocating a key: most hosts are there already.
        fn list<'m>(map: &'m mut FastMap<Vec<Candidate>>, key: &str) -> &'m mut Vec<Candidate> {
            if !map.contains_key(key) {
                map.insert(key.into(), Vec::new());
            }
            map.get_mut(key).expect("inserted above")
        }
        match host {
            None => &mut self.any,
            Some(HostPattern::Exact(h)) => list(&mut self.exact, h),
            Some(HostPattern::Wildcard(s)) => list(&mut self.wildcard, s),
        }
    }

    /// Whether anything is bound to `host` (`None`: the catch-all).
    pub fn holds(&self, host: Option<&HostPattern>) -> bool {
        match host {
            None => !self.any.is_empty(),
            Some(HostPattern::Exact(h)) => self.exact.contains_key(h.as_str()),
            Some(HostPattern::Wildcard(s)) => self.wildcard.contains_key(s.as_str()),
        }
    }

    /// Removes what is bound to `host`, returning the route names that
    /// lose it.
    pub fn release(&mut self, host: Option<&HostPattern>) -> Vec<Arc<str>> {
        let list = match host {
            None => std::mem::take(&mut self.any),
            Some(HostPattern::Exact(h)) => self.exact.remove(h.as_str()).unwrap_or_default(),
            Some(HostPattern::Wildcard(s)) => self.wildcard.remove(s.as_str()).unwrap_or_default(),
        };
        let mut names: Vec<Arc<str>> = list.into_iter().map(|c| c.info.name.clone()).collect();
        names.dedup();
        names
    }

    /// Sorts each host's candidates, with those of the wildcards covering
    /// it (and the catch-all) after its own, as one list.
    pub fn build(self) -> GatewayTable {
        let TableBuilder {
            exact,
            wildcard,
            any,
        } = self;
        let longest = wildcard.keys().map(|k| k.len()).max().unwrap_or(0);
        let covering = |name: &str, own_depth: usize, out: &mut Vec<Candidate>| {
            // Every wildcard suffix strictly above `name`, deepest first
            // (no probe for suffixes longer than any wildcard's).
            let mut rest = name;
            while let Some((_, parent)) = rest.split_once('.') {
                if parent.len() < own_depth
                    && parent.len() <= longest
                    && let Some(list) = wildcard.get(parent)
                {
                    out.extend(list.iter().map(|c| c.at(HostRank::Wildcard(parent.len()))));
                }
                rest = parent;
            }
            out.extend(any.iter().map(|c| c.at(HostRank::Any)));
        };
        let finish = |mut list: Vec<Candidate>| -> Box<[Candidate]> {
            list.sort_by(|a, b| a.order.cmp(&b.order));
            list.into_boxed_slice()
        };
        let mut table = GatewayTable::default();
        table.exact.reserve(exact.len());
        for (host, mut list) in exact {
            // Candidates are made at HostRank::Exact: an exact host's own
            // need no copy.
            covering(&host, usize::MAX, &mut list);
            table.exact.insert(host, finish(list));
        }
        for (suffix, own) in &wildcard {
            let mut list: Vec<Candidate> = own
                .iter()
                .map(|c| c.at(HostRank::Wildcard(suffix.len())))
                .collect();
            // A wildcard's own suffix is below it: `*.a.b` covers `x.a.b`,
            // and `*.b` covers it too.
            covering(&format!("x.{suffix}"), suffix.len(), &mut list);
            table.wildcard.insert(suffix.clone(), finish(list));
        }
        table.max_wildcard = longest;
        if !any.is_empty() {
            table.any = Some(finish(any.iter().map(|c| c.at(HostRank::Any)).collect()));
        }
        table
    }
}

/// The Gateway API routes of a snapshot.
#[derive(Debug, Default)]
pub struct GatewayTable {
    exact: FastMap<Box<[Candidate]>>,
    wildcard: FastMap<Box<[Candidate]>>,
    any: Option<Box<[Candidate]>>,
    /// Longest wildcard suffix: no probe for longer ones.
    max_wildcard: usize,
}

impl GatewayTable {
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty() && self.any.is_none()
    }

    /// Candidates for a normalised host, and how specific the match is.
    pub fn host(&self, host: &str) -> (HostRank, &[Candidate]) {
        if let Some(list) = self.exact.get(host) {
            return (HostRank::Exact, list);
        }
        if !self.wildcard.is_empty() {
            let mut rest = host;
            while let Some((first, parent)) = rest.split_once('.') {
                if !first.is_empty()
                    && parent.len() <= self.max_wildcard
                    && let Some(list) = self.wildcard.get(parent)
                {
                    return (HostRank::Wildcard(parent.len()), list);
                }
                rest = parent;
            }
        }
        match &self.any {
            Some(list) => (HostRank::Any, list),
            None => (HostRank::None, &[]),
        }
    }

    /// The first candidate of `candidates` a request matches.
    pub fn matching<'t>(
        candidates: &'t [Candidate],
        path: &str,
        facts: &RequestFacts<'_>,
    ) -> Option<&'t Candidate> {
        candidates
            .iter()
            .find(|c| c.on(facts.tls) && c.matcher.matches(path, facts))
    }

    /// Number of host patterns with candidates (the catch-all counts one).
    pub fn hosts(&self) -> usize {
        self.exact.len() + self.wildcard.len() + usize::from(self.any.is_some())
    }

    /// Number of (host, candidate) entries.
    pub fn len(&self) -> usize {
        self.exact.values().map(|l| l.len()).sum::<usize>()
            + self.wildcard.values().map(|l| l.len()).sum::<usize>()
            + self.any.as_ref().map_or(0, |l| l.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(path: PathMatch) -> Matcher {
        Matcher {
            path,
            method: None,
            headers: Box::new([]),
            query: Box::new([]),
        }
    }

    fn candidate(name: &str, m: Matcher, route: u32) -> Candidate {
        let target = Target {
            matcher: Arc::new(m),
            action: Arc::new(Action::Unroutable),
            info: Arc::new(RouteInfo {
                name: Arc::from(name),
                policy: None,
            }),
            filters: None,
        };
        Candidate::new(Arc::new(target), (true, true), route, 0, 0)
    }

    #[test]
    fn prefixes_match_element_wise() {
        let p = PathMatch::Prefix("/foo".into());
        assert!(p.matches("/foo") && p.matches("/foo/") && p.matches("/foo/bar"));
        assert!(!p.matches("/foobar") && !p.matches("/fo"));
        let root = PathMatch::Prefix("".into());
        assert!(root.matches("/") && root.matches("/x"));
    }

    #[test]
    fn headers_query_and_method_must_all_hold_and_unknown_facts_match_nothing() {
        let m = Matcher {
            path: PathMatch::Prefix("".into()),
            method: Some("POST".into()),
            headers: Box::new([("version".into(), ValueMatch::Exact("two".into()))]),
            query: Box::new([(
                "animal".into(),
                ValueMatch::Regex(regex::Regex::new("^wh.*$").unwrap()),
            )]),
        };
        let headers: &[(&str, &str)] = &[("Version", "two")];
        let facts = RequestFacts {
            method: "POST",
            query: Some("x=1&animal=whale"),
            headers: Some(&headers),
            tls: None,
        };
        assert!(m.matches("/", &facts));
        assert!(!m.matches(
            "/",
            &RequestFacts {
                method: "GET",
                ..facts
            }
        ));
        assert!(!m.matches(
            "/",
            &RequestFacts {
                query: Some("animal=dolphin"),
                ..facts
            }
        ));
        let other: &[(&str, &str)] = &[("version", "one")];
        assert!(!m.matches(
            "/",
            &RequestFacts {
                headers: Some(&other),
                ..facts
            }
        ));
        assert!(!m.matches("/", &RequestFacts::UNKNOWN));
    }

    #[test]
    fn precedence_follows_the_specification() {
        let mut b = TableBuilder::default();
        let host = HostPattern::parse("a.example").unwrap();
        let wild = HostPattern::parse("*.example").unwrap();
        b.add(
            Some(&wild),
            candidate("wild-exact", matcher(PathMatch::Exact("/x".into())), 0),
        );
        b.add(
            Some(&host),
            candidate("prefix-short", matcher(PathMatch::Prefix("".into())), 0),
        );
        b.add(
            Some(&host),
            candidate("prefix-long", matcher(PathMatch::Prefix("/x".into())), 3),
        );
        let mut with_header = matcher(PathMatch::Prefix("/x".into()));
        with_header.headers = Box::new([("h".into(), ValueMatch::Exact("1".into()))]);
        b.add(Some(&host), candidate("prefix-long-header", with_header, 4));
        b.add(
            Some(&host),
            candidate(
                "prefix-long-older",
                matcher(PathMatch::Prefix("/x".into())),
                1,
            ),
        );
        b.add(
            None,
            candidate("any", matcher(PathMatch::Prefix("".into())), 0),
        );
        let t = b.build();
        let names = |host: &str| -> Vec<String> {
            t.host(host)
                .1
                .iter()
                .map(|c| c.info.name.to_string())
                .collect()
        };
        assert_eq!(
            names("a.example"),
            [
                "prefix-long-header",
                "prefix-long-older",
                "prefix-long",
                "prefix-short",
                "wild-exact",
                "any"
            ]
        );
        assert_eq!(t.host("deep.b.example").0, HostRank::Wildcard(7));
        assert_eq!(names("deep.b.example"), ["wild-exact", "any"]);
        assert_eq!(t.host("example").0, HostRank::Any);
        let facts = RequestFacts::UNKNOWN;
        let hit = GatewayTable::matching(t.host("a.example").1, "/x/y", &facts).unwrap();
        assert_eq!(
            &*hit.info.name, "prefix-long-older",
            "the header rule needs headers"
        );
    }

    #[test]
    fn weights_are_shared_exactly() {
        let route = |n: &str| -> Result<Route, ()> {
            Ok(Arc::new(crate::compile::upstream::Upstream::new(
                n.into(),
                Vec::new(),
                None,
            ))
            .into())
        };
        let action = Action::Backends {
            backends: vec![
                Backend {
                    weight: 3,
                    route: route("a"),
                    filters: None,
                    h2c: false,
                },
                Backend {
                    weight: 0,
                    route: route("never"),
                    filters: None,
                    h2c: false,
                },
                Backend {
                    weight: 1,
                    route: Err(()),
                    filters: None,
                    h2c: false,
                },
            ]
            .into_boxed_slice(),
            total: 4,
            next: AtomicU64::new(0),
        };
        let picks: Vec<Option<String>> = (0..8)
            .map(|_| {
                action
                    .pick()
                    .unwrap()
                    .route
                    .as_ref()
                    .ok()
                    .map(|r| r.name.clone())
            })
            .collect();
        let a = picks.iter().filter(|p| p.as_deref() == Some("a")).count();
        assert_eq!((a, picks.iter().filter(|p| p.is_none()).count()), (6, 2));
    }
}
