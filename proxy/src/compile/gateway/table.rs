//! The Gateway API route table: HTTPRoute and GRPCRoute rules by the
//! hostname they bound to, each host's candidates sorted once, at compile,
//! in the specification's precedence, so a lookup walks one short list and
//! takes the first rule that matches.
//!
//! A route's rules are sorted once into one list per listener plane
//! ([`route_list`]) that every hostname it binds to shares; a host gets a
//! list of its own only when other routes, a covering wildcard or the
//! catch-all join it there ([`TableBuilder::build`]). At 10k HTTPRoutes
//! this made the compile a third cheaper than one list per host
//! (benches/route-table.md).
//!
//! Kept apart from the Ingress table ([`crate::compile::routes`]) so a
//! snapshot without Gateway routes pays one `is_empty` per request, and a
//! host without Gateway routes one hash probe per label (wildcards here
//! match any depth, docs/gateway-api.md).

use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use teapot_api::HostPattern;
use teapot_api::regex::TenantRegex;

use crate::compile::routes::{HostRank, Route, RoutePolicy};

/// Keys are configuration, never request input (lookups only probe).
type FastMap<V> = std::collections::HashMap<Box<str>, V, foldhash::fast::RandomState>;

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

    /// Every field in the order the engine holds them, each value of a
    /// repeated field on its own. Only sub-requests that carry the
    /// client's fields (`auth-url`, custom error pages) walk them all.
    fn each(&self, f: &mut dyn FnMut(&str, &[u8]));
}

impl RequestHeaders for http::HeaderMap {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.get(name).map(|v| v.as_bytes())
    }

    fn each(&self, f: &mut dyn FnMut(&str, &[u8])) {
        for (name, value) in self {
            f(name.as_str(), value.as_bytes());
        }
    }
}

impl RequestHeaders for &[(&str, &str)] {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_bytes())
    }

    fn each(&self, f: &mut dyn FnMut(&str, &[u8])) {
        for (name, value) in self.iter() {
            f(name, value.as_bytes());
        }
    }
}

/// A path condition.
#[derive(Debug)]
pub enum PathMatch {
    Exact(Box<str>),
    /// Element-wise, stored without trailing slash (`/` is empty).
    Prefix(Box<str>),
    /// A tenant pattern: a bounded automaton, shared by pattern text
    /// across routes and reloads.
    Regex(Arc<TenantRegex>),
}

impl PathMatch {
    fn matches(&self, path: &str, budget: &mut EvalBudget) -> Result<bool, BudgetExhausted> {
        Ok(match self {
            PathMatch::Exact(p) => path == &**p,
            PathMatch::Prefix(p) => {
                path.starts_with(&**p) && matches!(path.as_bytes().get(p.len()), None | Some(b'/'))
            }
            PathMatch::Regex(r) => {
                budget.take(path.len())?;
                r.is_match(path.as_bytes())
            }
        })
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
    Regex(Arc<TenantRegex>),
}

impl ValueMatch {
    fn matches(&self, value: &[u8], budget: &mut EvalBudget) -> Result<bool, BudgetExhausted> {
        Ok(match self {
            ValueMatch::Exact(v) => value == v.as_bytes(),
            ValueMatch::Regex(r) => {
                budget.take(value.len())?;
                std::str::from_utf8(value).is_ok() && r.is_match(value)
            }
        })
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
    /// Whether a request matches, with a fresh evaluation budget.
    pub fn matches(&self, path: &str, facts: &RequestFacts<'_>) -> bool {
        self.matches_within(path, facts, &mut EvalBudget::default())
            .unwrap_or(false)
    }

    /// Whether a request matches, its regular expressions paid from
    /// `budget`.
    pub fn matches_within(
        &self,
        path: &str,
        facts: &RequestFacts<'_>,
        budget: &mut EvalBudget,
    ) -> Result<bool, BudgetExhausted> {
        if let Some(m) = &self.method
            && facts.method != &**m
        {
            return Ok(false);
        }
        // Header and query conditions need facts the engine may not have:
        // checked before the path, whose pattern may be the costly part.
        if !self.headers.is_empty() && facts.headers.is_none() {
            return Ok(false);
        }
        if !self.query.is_empty() && facts.query.is_none() {
            return Ok(false);
        }
        if !self.path.matches(path, budget)? {
            return Ok(false);
        }
        if let Some(headers) = facts.headers {
            for (name, v) in self.headers.iter() {
                match headers.first(name) {
                    Some(value) if v.matches(value, budget)? => {}
                    _ => return Ok(false),
                }
            }
        }
        if let Some(query) = facts.query {
            for (name, v) in self.query.iter() {
                match query_param(query, name) {
                    Some(value) if v.matches(value, budget)? => {}
                    _ => return Ok(false),
                }
            }
        }
        Ok(true)
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
    /// A backendRef's RequestRedirect: the request is answered, not
    /// forwarded. A rule's redirect is its [`Action::Redirect`] instead.
    pub redirect: Option<Redirect>,
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
            && self.redirect.is_none()
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
    pub filters: BackendFilters,
    /// Whether the backend speaks HTTP/2 without TLS (h2c): GRPCRoute
    /// backends, and Service ports with `appProtocol: kubernetes.io/h2c`.
    pub h2c: bool,
}

/// A backendRef's own filters. The backendRefs of a rule are shared by
/// all its matches, but a ReplacePrefixMatch replaces the prefix of the
/// match that chose the rule: such filters are compiled once per match.
/// Only those are (rare), so a rule's backends stay one list.
#[derive(Debug, Default)]
pub enum BackendFilters {
    #[default]
    None,
    /// The same for every match of the rule.
    Shared(Arc<Filters>),
    /// One per match of the rule, by the match's index.
    PerMatch(Box<[Arc<Filters>]>),
}

impl BackendFilters {
    /// The filters for a request chosen by the rule's match `matched`
    /// ([`Target::match_index`]).
    pub fn get(&self, matched: usize) -> Option<&Arc<Filters>> {
        match self {
            BackendFilters::None => None,
            BackendFilters::Shared(f) => Some(f),
            BackendFilters::PerMatch(each) => each.get(matched),
        }
    }
}

/// What a rule does with a request that matched it.
#[derive(Debug)]
pub enum Action {
    Backends {
        backends: Box<[Backend]>,
        total: u64,
        /// Weighted round-robin position.
        next: AtomicU64,
        /// The rule's sessionPersistence cookie: a request whose cookie
        /// names a serving endpoint of one of the backends goes to that
        /// backend whatever the weights say
        /// (crate::plane::traffic::affinity::pick_backend).
        persistence: Option<Box<str>>,
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
            ..
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
    pub matcher: Matcher,
    pub action: Arc<Action>,
    pub info: Arc<RouteInfo>,
    /// Filters of the rule (for redirects and unresolved answers too).
    pub filters: Option<Arc<Filters>>,
    /// The route's position in age order (oldest first, then
    /// namespace/name), the rule's in the route and the match's in the
    /// rule: the last precedence ties.
    position: (u32, u32, u32),
}

impl Target {
    pub fn new(
        matcher: Matcher,
        action: Arc<Action>,
        info: Arc<RouteInfo>,
        filters: Option<Arc<Filters>>,
        (route, rule, matched): (u32, u32, u32),
    ) -> Target {
        Target {
            matcher,
            action,
            info,
            filters,
            position: (route, rule, matched),
        }
    }

    /// The index of this match among its rule's matches.
    pub fn match_index(&self) -> usize {
        self.position.2 as usize
    }
}

/// One candidate of a host: a [`Target`] on the listener planes it was
/// bound through. Small (the lookup walks a host's candidates in order);
/// its precedence is computed at compile from the target ([`Order`]).
#[derive(Clone, Debug)]
pub struct Candidate {
    pub target: Arc<Target>,
    /// Listener planes: HTTP (`--http`) and HTTPS (`--https`).
    pub http: bool,
    pub https: bool,
    /// How specific the hostname of the listener it came through is
    /// ([`listener_rank`]): a request sees only the routes of the most
    /// specific listener matching its host (listener isolation).
    pub listener: u32,
}

/// A listener hostname's specificity, as a number that fits beside the
/// planes in a [`Candidate`]: no hostname 0, a wildcard its suffix length
/// plus one, an exact name the most.
pub fn listener_rank(hostname: Option<&HostPattern>) -> u32 {
    match hostname {
        None => 0,
        Some(HostPattern::Wildcard(s)) => u32::try_from(s.len() + 1).unwrap_or(u32::MAX - 1),
        Some(HostPattern::Exact(_)) => u32::MAX,
    }
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
struct Order {
    host: std::cmp::Reverse<HostRank>,
    path: (u8, std::cmp::Reverse<usize>),
    method: bool,
    headers: std::cmp::Reverse<usize>,
    query: std::cmp::Reverse<usize>,
    /// [`Target::position`].
    position: (u32, u32, u32),
}

impl Candidate {
    pub fn new(target: Arc<Target>, (http, https): (bool, bool), listener: u32) -> Candidate {
        Candidate {
            target,
            http,
            https,
            listener,
        }
    }

    /// Its precedence on a host pattern of rank `host`.
    fn order(&self, host: HostRank) -> Order {
        let m = &self.target.matcher;
        Order {
            host: std::cmp::Reverse(host),
            path: m.path.rank(),
            method: m.method.is_none(),
            headers: std::cmp::Reverse(m.headers.len()),
            query: std::cmp::Reverse(m.query.len()),
            position: self.target.position,
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

/// The candidates of one route on one set of listener planes, sorted in
/// precedence once per route: the list every hostname the route binds to
/// shares, unless other routes or covering wildcards share the host
/// ([`TableBuilder::build`]).
pub fn route_list(mut candidates: Vec<Candidate>) -> Arc<[Candidate]> {
    // Within one host pattern the host rank is the same for all: the
    // order at `Exact` is the order at any rank.
    candidates.sort_by_key(|c| c.order(HostRank::Exact));
    candidates.into()
}

/// The lists bound to one host pattern, in the order routes bound them
/// (oldest route first), and the route that bound first: the holder.
#[derive(Debug)]
struct Bound {
    holder: u32,
    lists: Lists,
}

/// One list (the common case: one route per host, shared as is) or
/// several.
#[derive(Debug)]
enum Lists {
    One(Arc<[Candidate]>),
    Many(Vec<Arc<[Candidate]>>),
}

impl Lists {
    fn push(&mut self, list: Arc<[Candidate]>) {
        match self {
            Lists::Many(v) => v.push(list),
            Lists::One(first) => {
                let first = first.clone();
                *self = Lists::Many(vec![first, list]);
            }
        }
    }

    fn as_slice(&self) -> &[Arc<[Candidate]>] {
        match self {
            Lists::One(l) => std::slice::from_ref(l),
            Lists::Many(v) => v,
        }
    }
}

/// Candidate lists as bound, by host pattern, before [`GatewayTable::build`].
#[derive(Debug, Default)]
pub struct TableBuilder {
    exact: FastMap<Bound>,
    wildcard: FastMap<Bound>,
    any: Option<Bound>,
}

impl TableBuilder {
    /// Binds route `route`'s `list` to `host` (`None`: any host).
    pub fn bind(&mut self, host: Option<&HostPattern>, route: u32, list: &Arc<[Candidate]>) {
        fn bind(map: &mut FastMap<Bound>, key: &str, route: u32, list: &Arc<[Candidate]>) {
            // One probe, and a key allocated even for a host bound before:
            // most hosts are bound once.
            match map.entry(key.into()) {
                Entry::Occupied(mut b) => b.get_mut().lists.push(list.clone()),
                Entry::Vacant(v) => {
                    v.insert(Bound {
                        holder: route,
                        lists: Lists::One(list.clone()),
                    });
                }
            }
        }
        match host {
            None => match &mut self.any {
                Some(b) => b.lists.push(list.clone()),
                None => {
                    self.any = Some(Bound {
                        holder: route,
                        lists: Lists::One(list.clone()),
                    })
                }
            },
            Some(HostPattern::Exact(h)) => bind(&mut self.exact, h, route, list),
            Some(HostPattern::Wildcard(s)) => bind(&mut self.wildcard, s, route, list),
        }
    }

    /// Room for about `hosts` host patterns.
    pub fn reserve(&mut self, hosts: usize) {
        self.exact.reserve(hosts);
    }

    fn bound(&self, host: Option<&HostPattern>) -> Option<&Bound> {
        match host {
            None => self.any.as_ref(),
            Some(HostPattern::Exact(h)) => self.exact.get(h.as_str()),
            Some(HostPattern::Wildcard(s)) => self.wildcard.get(s.as_str()),
        }
    }

    /// The route that bound `host` first (`None`: nothing is bound to it;
    /// `host` `None`: the catch-all).
    pub fn holder(&self, host: Option<&HostPattern>) -> Option<u32> {
        self.bound(host).map(|b| b.holder)
    }

    /// Whether anything is bound to `host` (`None`: the catch-all).
    pub fn holds(&self, host: Option<&HostPattern>) -> bool {
        self.bound(host).is_some()
    }

    /// Removes what is bound to `host`, returning the route names that
    /// lose it.
    pub fn release(&mut self, host: Option<&HostPattern>) -> Vec<Arc<str>> {
        let bound = match host {
            None => self.any.take(),
            Some(HostPattern::Exact(h)) => self.exact.remove(h.as_str()),
            Some(HostPattern::Wildcard(s)) => self.wildcard.remove(s.as_str()),
        };
        let mut names: Vec<Arc<str>> = bound
            .iter()
            .flat_map(|b| b.lists.as_slice())
            .flat_map(|l| l.iter())
            .map(|c| c.info.name.clone())
            .collect();
        names.dedup();
        names
    }

    /// Each host pattern's chain: its own lists, then the lists of the
    /// wildcards covering it (deepest first) and the catch-all's. No
    /// candidate is copied: a pattern's lists are shared by every chain
    /// that holds them, so the table grows with the routes and hostnames
    /// tenants wrote (one pointer per covering wildcard per host), never
    /// with their product (docs/capacity.md, "Hostile routes").
    pub fn build(self) -> GatewayTable {
        let TableBuilder {
            exact,
            wildcard,
            any,
        } = self;
        let suffixes = Suffixes::new(&wildcard);
        let wildcard: FastMap<Group> = wildcard
            .into_iter()
            .map(|(suffix, b)| {
                let rank = HostRank::Wildcard(suffix.len());
                (suffix, Group::new(rank, b.lists))
            })
            .collect();
        let any = any.map(|b| Group::new(HostRank::Any, b.lists));
        let mut table = GatewayTable {
            max_wildcard: suffixes.longest,
            ..GatewayTable::default()
        };
        table.exact.reserve(exact.len());
        for (host, own) in exact {
            let own = Group::new(HostRank::Exact, own.lists);
            let chain = chain(own, &wildcard, &suffixes, any.as_ref(), &host, usize::MAX);
            table.exact.insert(host, chain);
        }
        table.wildcard.reserve(wildcard.len());
        for (suffix, own) in &wildcard {
            // A wildcard's own suffix is below it: `*.a.b` covers `x.a.b`,
            // and `*.b` covers it too.
            let chain = chain(
                own.clone(),
                &wildcard,
                &suffixes,
                any.as_ref(),
                suffix,
                suffix.len(),
            );
            table.wildcard.insert(suffix.clone(), chain);
        }
        if let Some(any) = any {
            table.any = Some(Chain::new(vec![any]));
        }
        table
    }
}

/// One host pattern's own candidate lists (one per route that bound it,
/// each sorted), shared by every chain that reaches the pattern.
#[derive(Clone, Debug)]
struct Group {
    rank: HostRank,
    lists: Arc<[Arc<[Candidate]>]>,
    /// The most specific listener among its candidates, per plane.
    listener: Planes,
}

/// A value per listener plane: HTTP, HTTPS.
type Planes = [Option<u32>; 2];

fn plane(tls: Option<bool>) -> usize {
    usize::from(tls == Some(true))
}

impl Group {
    fn new(rank: HostRank, lists: Lists) -> Group {
        let lists: Arc<[Arc<[Candidate]>]> = match lists {
            Lists::One(l) => Arc::new([l]),
            Lists::Many(v) => v.into(),
        };
        let mut listener: Planes = [None, None];
        for c in lists.iter().flat_map(|l| l.iter()) {
            for (p, on) in [(0, c.http), (1, c.https)] {
                if on {
                    listener[p] = listener[p].max(Some(c.listener));
                }
            }
        }
        Group {
            rank,
            lists,
            listener,
        }
    }

    /// Its first candidate a request matches on the listener `listener`:
    /// the first match of each list, the best of those in precedence (a
    /// target in two lists keeps the first list's place).
    fn first_match(
        &self,
        listener: u32,
        path: &str,
        facts: &RequestFacts<'_>,
        budget: &mut EvalBudget,
    ) -> Result<Option<&Candidate>, BudgetExhausted> {
        let mut best: Option<(Order, &Candidate)> = None;
        for list in self.lists.iter() {
            for c in list.iter() {
                if !(c.on(facts.tls) && c.listener == listener) {
                    continue;
                }
                if c.matcher.matches_within(path, facts, budget)? {
                    let order = c.order(self.rank);
                    if best.as_ref().is_none_or(|(o, _)| order < *o) {
                        best = Some((order, c));
                    }
                    break;
                }
            }
        }
        Ok(best.map(|(_, c)| c))
    }
}

/// What a request on a host pattern sees, most specific first.
#[derive(Debug)]
pub struct Chain {
    groups: Box<[Group]>,
    /// Listener isolation (GatewayHTTPListenerIsolation): per plane, only
    /// candidates of the most specific listener hostname matching the
    /// host serve. Every candidate here matches it (a bound pattern is the
    /// intersection of its listener's and its route's hostnames).
    listener: Planes,
}

impl Chain {
    fn new(groups: Vec<Group>) -> Chain {
        let mut listener: Planes = [None, None];
        for g in &groups {
            for (most, own) in listener.iter_mut().zip(g.listener) {
                *most = (*most).max(own);
            }
        }
        Chain {
            groups: groups.into(),
            listener,
        }
    }

    fn rank(&self) -> HostRank {
        self.groups.first().map_or(HostRank::None, |g| g.rank)
    }
}

/// A chain for `own` at `name`: then every wildcard suffix strictly above
/// `name` and shorter than `own_depth`, deepest first, then the catch-all.
fn chain(
    own: Group,
    wildcard: &FastMap<Group>,
    suffixes: &Suffixes,
    any: Option<&Group>,
    name: &str,
    own_depth: usize,
) -> Chain {
    let mut groups = vec![own];
    if !wildcard.is_empty() {
        // No probe for suffixes longer than any wildcard's: start where
        // the parents become short enough.
        let start = name.len().saturating_sub(suffixes.longest + 1);
        for (i, b) in name.bytes().enumerate().skip(start) {
            if b != b'.' {
                continue;
            }
            let parent = &name[i + 1..];
            if parent.len() < own_depth
                && suffixes.may_hold(parent)
                && let Some(g) = wildcard.get(parent)
            {
                groups.push(g.clone());
            }
        }
    }
    groups.extend(any.cloned());
    Chain::new(groups)
}

/// Which (length, first byte) the wildcard suffixes have: most parents of
/// a host are no wildcard's suffix, and this tells without hashing them.
struct Suffixes {
    longest: usize,
    /// Bit `len * 256 + first byte`.
    seen: Vec<u64>,
}

impl Suffixes {
    fn new(wildcard: &FastMap<Bound>) -> Suffixes {
        let longest = wildcard.keys().map(|k| k.len()).max().unwrap_or(0);
        let mut seen = vec![0u64; ((longest + 1) * 256).div_ceil(64)];
        for k in wildcard.keys() {
            let bit = Self::bit(k);
            seen[bit / 64] |= 1 << (bit % 64);
        }
        Suffixes { longest, seen }
    }

    fn bit(suffix: &str) -> usize {
        suffix.len() * 256 + usize::from(suffix.as_bytes().first().copied().unwrap_or(0))
    }

    /// Whether `suffix` may be a wildcard's (probe the map to know).
    fn may_hold(&self, suffix: &str) -> bool {
        suffix.len() <= self.longest && {
            let bit = Self::bit(suffix);
            self.seen[bit / 64] & (1 << (bit % 64)) != 0
        }
    }
}

/// How many bytes one request may run through regular expressions while
/// its route is looked up. Every automaton takes one step per byte
/// (`teapot_api::regex`), so this bounds the time a request can hold a
/// serving thread, whatever the routes: 256 KiB is well under a
/// millisecond, and 100 patterns over a 2 KiB path.
pub const REGEX_BYTES_PER_REQUEST: usize = 256 * 1024;

/// What is left of a request's [`REGEX_BYTES_PER_REQUEST`].
#[derive(Debug)]
pub struct EvalBudget {
    left: usize,
}

impl Default for EvalBudget {
    fn default() -> EvalBudget {
        EvalBudget {
            left: REGEX_BYTES_PER_REQUEST,
        }
    }
}

impl EvalBudget {
    /// Takes the cost of running a pattern over `len` bytes.
    fn take(&mut self, len: usize) -> Result<(), BudgetExhausted> {
        let cost = len + 1;
        if cost > self.left {
            self.left = 0;
            return Err(BudgetExhausted);
        }
        self.left -= cost;
        Ok(())
    }
}

/// A request whose lookup would run more than [`REGEX_BYTES_PER_REQUEST`]
/// through regular expressions: it is refused, not routed by a guess.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetExhausted;

/// The Gateway API routes of a snapshot.
#[derive(Debug, Default)]
pub struct GatewayTable {
    exact: FastMap<Chain>,
    wildcard: FastMap<Chain>,
    any: Option<Chain>,
    /// Longest wildcard suffix: no probe for longer ones.
    max_wildcard: usize,
}

/// The candidates a host sees ([`GatewayTable::host`]).
#[derive(Clone, Copy, Debug)]
pub struct HostView<'t> {
    pub rank: HostRank,
    chain: Option<&'t Chain>,
}

impl<'t> HostView<'t> {
    /// The first candidate a request matches: the most specific host
    /// pattern's groups first; within one, the specification's precedence.
    pub fn matching(
        &self,
        path: &str,
        facts: &RequestFacts<'_>,
    ) -> Result<Option<&'t Candidate>, BudgetExhausted> {
        let Some(chain) = self.chain else {
            return Ok(None);
        };
        let Some(listener) = chain.listener[plane(facts.tls)] else {
            return Ok(None);
        };
        let mut budget = EvalBudget::default();
        for g in chain.groups.iter() {
            if g.listener[plane(facts.tls)].is_none() {
                continue;
            }
            if let Some(c) = g.first_match(listener, path, facts, &mut budget)? {
                return Ok(Some(c));
            }
        }
        Ok(None)
    }

    /// Every candidate the host sees on either plane, in precedence (for
    /// status and tests; a request walks [`HostView::matching`]).
    pub fn candidates(&self) -> Vec<&'t Candidate> {
        let Some(chain) = self.chain else {
            return Vec::new();
        };
        let mut all: Vec<(Order, &Candidate)> = chain
            .groups
            .iter()
            .flat_map(|g| {
                g.lists
                    .iter()
                    .flat_map(|l| l.iter())
                    .map(move |c| (c.order(g.rank), c))
            })
            .filter(|(_, c)| {
                (c.http && Some(c.listener) == chain.listener[0])
                    || (c.https && Some(c.listener) == chain.listener[1])
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all.into_iter().map(|(_, c)| c).collect()
    }
}

impl GatewayTable {
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty() && self.any.is_none()
    }

    /// What a normalised host sees, and how specific its match is.
    pub fn host(&self, host: &str) -> HostView<'_> {
        let chain = self.exact.get(host).or_else(|| {
            if !self.wildcard.is_empty() {
                let mut rest = host;
                while let Some((first, parent)) = rest.split_once('.') {
                    if !first.is_empty()
                        && parent.len() <= self.max_wildcard
                        && let Some(chain) = self.wildcard.get(parent)
                    {
                        return Some(chain);
                    }
                    rest = parent;
                }
            }
            self.any.as_ref()
        });
        HostView {
            rank: chain.map_or(HostRank::None, Chain::rank),
            chain,
        }
    }

    /// Number of host patterns with candidates (the catch-all counts one).
    pub fn hosts(&self) -> usize {
        self.exact.len() + self.wildcard.len() + usize::from(self.any.is_some())
    }

    /// Number of (host pattern, candidate) entries the table holds: each
    /// pattern's own, as bound; covering wildcards are shared, not counted
    /// again.
    pub fn len(&self) -> usize {
        let own = |c: &Chain| {
            c.groups
                .first()
                .map_or(0, |g| g.lists.iter().map(|l| l.len()).sum::<usize>())
        };
        self.exact.values().map(own).sum::<usize>()
            + self.wildcard.values().map(own).sum::<usize>()
            + self.any.as_ref().map_or(0, own)
    }

    /// Pointers from host patterns to the groups they see (own and
    /// covering): what the table costs beyond the candidates themselves.
    pub fn links(&self) -> usize {
        self.exact
            .values()
            .chain(self.wildcard.values())
            .chain(self.any.as_ref())
            .map(|c| c.groups.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl PathMatch {
        fn is(&self, path: &str) -> bool {
            self.matches(path, &mut EvalBudget::default()).unwrap()
        }
    }

    fn matcher(path: PathMatch) -> Matcher {
        Matcher {
            path,
            method: None,
            headers: Box::new([]),
            query: Box::new([]),
        }
    }

    fn candidate(name: &str, m: Matcher, route: u32) -> Candidate {
        let target = Target::new(
            m,
            Arc::new(Action::Unroutable),
            Arc::new(RouteInfo {
                name: Arc::from(name),
                policy: None,
            }),
            None,
            (route, 0, 0),
        );
        Candidate::new(Arc::new(target), (true, true), 0)
    }

    impl TableBuilder {
        /// One candidate as its route's whole list.
        fn add(&mut self, host: Option<&HostPattern>, c: Candidate) {
            let route = c.position.0;
            self.bind(host, route, &route_list(vec![c]));
        }
    }

    /// A host sees only the routes of the most specific listener hostname
    /// that matches it: the catch-all listener's routes are not in the
    /// lists of hosts a wildcard or exact listener takes.
    #[test]
    fn a_host_sees_the_most_specific_listeners_routes_only() {
        let wildcard = HostPattern::parse("*.example.com").unwrap();
        let exact = HostPattern::parse("foo.example.com").unwrap();
        let mut b = TableBuilder::default();
        let mut any = candidate("any", matcher(PathMatch::Prefix("".into())), 0);
        any.listener = listener_rank(None);
        b.add(None, any);
        let mut wild = candidate("wild", matcher(PathMatch::Prefix("/w".into())), 1);
        wild.listener = listener_rank(Some(&wildcard));
        b.add(Some(&wildcard), wild);
        let mut own = candidate("own", matcher(PathMatch::Prefix("/o".into())), 2);
        own.listener = listener_rank(Some(&exact));
        b.add(Some(&exact), own);
        // A route with hostname foo.example.com on the wildcard listener.
        let mut through = candidate("through", matcher(PathMatch::Prefix("/t".into())), 3);
        through.listener = listener_rank(Some(&wildcard));
        b.add(Some(&exact), through);
        let t = b.build();
        let names = |host: &str| -> Vec<String> {
            t.host(host)
                .candidates()
                .into_iter()
                .map(|c| c.info.name.to_string())
                .collect()
        };
        assert_eq!(names("bar.example.com"), ["wild"]);
        assert_eq!(names("foo.example.com"), ["own"]);
        assert_eq!(names("other.org"), ["any"]);
    }

    #[test]
    fn prefixes_match_element_wise() {
        let p = PathMatch::Prefix("/foo".into());
        assert!(p.is("/foo") && p.is("/foo/") && p.is("/foo/bar"));
        assert!(!p.is("/foobar") && !p.is("/fo"));
        let root = PathMatch::Prefix("".into());
        assert!(root.is("/") && root.is("/x"));
    }

    #[test]
    fn headers_query_and_method_must_all_hold_and_unknown_facts_match_nothing() {
        let m = Matcher {
            path: PathMatch::Prefix("".into()),
            method: Some("POST".into()),
            headers: Box::new([("version".into(), ValueMatch::Exact("two".into()))]),
            query: Box::new([(
                "animal".into(),
                ValueMatch::Regex(TenantRegex::compile("wh.*").unwrap()),
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
                .candidates()
                .into_iter()
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
        assert_eq!(t.host("deep.b.example").rank, HostRank::Wildcard(7));
        assert_eq!(names("deep.b.example"), ["wild-exact", "any"]);
        assert_eq!(t.host("example").rank, HostRank::Any);
        let facts = RequestFacts::UNKNOWN;
        let hit = t
            .host("a.example")
            .matching("/x/y", &facts)
            .unwrap()
            .unwrap();
        assert_eq!(
            &*hit.info.name, "prefix-long-older",
            "the header rule needs headers"
        );
    }

    #[test]
    fn hosts_share_route_lists_and_see_covering_wildcards_in_precedence() {
        let mut b = TableBuilder::default();
        let h = |s: &str| HostPattern::parse(s).unwrap();
        let (a, c, d, w) = (
            h("a.example"),
            h("c.example"),
            h("d.x.example"),
            h("*.x.example"),
        );
        let route = |name: &str, index: u32| {
            route_list(
                [PathMatch::Prefix("".into()), PathMatch::Exact("/e".into())]
                    .into_iter()
                    .map(|p| candidate(name, matcher(p), index))
                    .collect(),
            )
        };
        let (old, young, wild) = (route("old", 0), route("young", 1), route("wild", 2));
        for host in [&a, &c, &d] {
            b.bind(Some(host), 0, &old);
        }
        b.bind(Some(&c), 1, &young);
        b.bind(Some(&w), 2, &wild);
        assert_eq!((b.holder(Some(&c)), b.holder(Some(&w))), (Some(0), Some(2)));
        assert_eq!(b.holder(None), None);
        let t = b.build();
        let names = |host: &str| -> Vec<String> {
            t.host(host)
                .candidates()
                .into_iter()
                .map(|c| format!("{} {:?}", c.info.name, c.matcher.path))
                .collect()
        };
        // Alone on its host: the route's own list, sorted once.
        assert_eq!(
            names("a.example"),
            [r#"old Exact("/e")"#, r#"old Prefix("")"#]
        );
        // Two routes on one host: merged in precedence, the older first
        // on a tie.
        assert_eq!(
            names("c.example"),
            [
                r#"old Exact("/e")"#,
                r#"young Exact("/e")"#,
                r#"old Prefix("")"#,
                r#"young Prefix("")"#
            ]
        );
        // A covering wildcard's rules come after the host's own.
        assert_eq!(
            names("d.x.example"),
            [
                r#"old Exact("/e")"#,
                r#"old Prefix("")"#,
                r#"wild Exact("/e")"#,
                r#"wild Prefix("")"#
            ]
        );
        assert_eq!(
            names("e.x.example"),
            [r#"wild Exact("/e")"#, r#"wild Prefix("")"#]
        );
        // Every list is held once, whatever shares it: a.example, c.example
        // and d.x.example hold old's (2 each), c.example young's, the
        // wildcard its own.
        assert_eq!((t.hosts(), t.len()), (4, 10));
        // a, c: their own group; d.x: its own and the wildcard's; the
        // wildcard: its own.
        assert_eq!(t.links(), 5);
    }

    /// The review's table blow-up: 10 wildcard routes of 500 matches and
    /// 1,000 exact hosts below them made 5 million (host, candidate)
    /// entries. Hosts now point at the wildcards' lists.
    #[test]
    fn exact_hosts_under_wildcards_do_not_copy_their_candidates() {
        let mut b = TableBuilder::default();
        let many = |name: &str, route: u32| {
            route_list(
                (0..500)
                    .map(|i| {
                        let m = matcher(PathMatch::Exact(format!("/p{i}").into()));
                        let mut c = candidate(name, m, route);
                        c.target = Arc::new(Target::new(
                            matcher(PathMatch::Exact(format!("/p{i}").into())),
                            c.action.clone(),
                            c.info.clone(),
                            None,
                            (route, 0, i),
                        ));
                        c
                    })
                    .collect(),
            )
        };
        let mut suffix = String::from("example");
        for w in 0..10u32 {
            suffix = format!("l{w}.{suffix}");
            let wild = HostPattern::parse(&format!("*.{suffix}")).unwrap();
            b.bind(Some(&wild), w, &many("wild", w));
        }
        let own = route_list(vec![candidate(
            "own",
            matcher(PathMatch::Exact("/own".into())),
            100,
        )]);
        for h in 0..1000 {
            let host = HostPattern::parse(&format!("h{h}.{suffix}")).unwrap();
            b.bind(Some(&host), 100, &own);
        }
        let t = b.build();
        assert_eq!(t.len(), 10 * 500 + 1000);
        // Each exact host: its own group and the ten wildcards above it.
        assert!(t.links() <= 1000 * 11 + 10 * 10, "{}", t.links());
        let facts = RequestFacts::UNKNOWN;
        let host = format!("h7.{suffix}");
        let hit = t.host(&host).matching("/p499", &facts).unwrap().unwrap();
        assert_eq!(&*hit.info.name, "wild");
        let hit = t.host(&host).matching("/own", &facts).unwrap().unwrap();
        assert_eq!(&*hit.info.name, "own");
    }

    /// The review's stall: a 7 KiB path against 480 regular expressions.
    /// Each automaton step is cheap, and the request's budget stops the
    /// walk long before it holds the thread.
    #[test]
    fn a_request_cannot_run_unbounded_bytes_through_patterns() {
        let mut b = TableBuilder::default();
        let host = HostPattern::parse("a.example").unwrap();
        let list = route_list(
            (0..480)
                .map(|i| {
                    let re = TenantRegex::compile(&format!("/x{i}[a-z]*b")).unwrap();
                    candidate("many", matcher(PathMatch::Regex(re)), i)
                })
                .collect(),
        );
        b.bind(Some(&host), 0, &list);
        let t = b.build();
        let facts = RequestFacts::UNKNOWN;
        let long = format!("/{}", "a".repeat(7 * 1024));
        assert!(matches!(
            t.host("a.example").matching(&long, &facts),
            Err(BudgetExhausted)
        ));
        // A short path walks every pattern within the budget.
        assert!(
            t.host("a.example")
                .matching("/nope", &facts)
                .unwrap()
                .is_none()
        );
        let hit = t.host("a.example").matching("/x479zzb", &facts).unwrap();
        assert!(hit.is_some());
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
                    filters: BackendFilters::None,
                    h2c: false,
                },
                Backend {
                    weight: 0,
                    route: route("never"),
                    filters: BackendFilters::None,
                    h2c: false,
                },
                Backend {
                    weight: 1,
                    route: Err(()),
                    filters: BackendFilters::None,
                    h2c: false,
                },
            ]
            .into_boxed_slice(),
            total: 4,
            next: AtomicU64::new(0),
            persistence: None,
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
