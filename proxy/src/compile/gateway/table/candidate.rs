//! A rule's match on a host ([`Candidate`]) and the specification's
//! precedence among candidates ([`Order`]), sorted once per route
//! ([`route_list`]).

use std::sync::Arc;

use teapot_api::HostPattern;

use super::target::Target;
use crate::compile::routes::HostRank;

/// One candidate of a host: a [`Target`] on the listener planes it was
/// bound through. Small (the lookup walks a host's candidates in order);
/// its precedence is computed at compile from the target (`Order`).
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
pub(super) struct Order {
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
    pub(super) fn order(&self, host: HostRank) -> Order {
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
    pub(super) fn on(&self, tls: Option<bool>) -> bool {
        match tls {
            Some(true) => self.https,
            None | Some(false) => self.http,
        }
    }
}

/// The candidates of one route on one set of listener planes, sorted in
/// precedence once per route: the list every hostname the route binds to
/// shares, unless other routes or covering wildcards share the host
/// ([`super::TableBuilder::build`]).
pub fn route_list(mut candidates: Vec<Candidate>) -> Arc<[Candidate]> {
    // Within one host pattern the host rank is the same for all: the
    // order at `Exact` is the order at any rank.
    candidates.sort_by_key(|c| c.order(HostRank::Exact));
    candidates.into()
}
