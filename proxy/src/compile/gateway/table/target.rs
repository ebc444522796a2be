//! What a matched rule does: its backends and how one is picked
//! ([`Action`]), the filters applied on the way ([`Filters`]), and the
//! [`Target`] that ties a match to them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::matching::Matcher;
use crate::compile::routes::{Route, RoutePolicy};

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
    /// `retry` (crate::compile::gateway::retry): failed tries sent again.
    pub retry: Option<Arc<teapot_h1::RetryPolicy>>,
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
            && self.retry.is_none()
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
    pub(super) position: (u32, u32, u32),
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
