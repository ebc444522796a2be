//! The table as routes bind to it ([`TableBuilder`]), then built into
//! one chain per host pattern: its own lists, the covering wildcards',
//! the catch-all's.

use std::collections::hash_map::Entry;
use std::sync::Arc;

use teapot_api::HostPattern;

use super::candidate::Candidate;
use super::{Chain, FastMap, GatewayTable, Group, HttpsListeners};
use crate::compile::routes::HostRank;

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
pub(super) enum Lists {
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

/// Candidate lists as bound, by host pattern, before [`TableBuilder::build`].
#[derive(Debug, Default)]
pub struct TableBuilder {
    exact: FastMap<Bound>,
    wildcard: FastMap<Bound>,
    any: Option<Bound>,
    https: HttpsListeners,
}

impl TableBuilder {
    /// The HTTPS listeners host names select, for the 421 check.
    pub fn https_listeners(&mut self) -> &mut HttpsListeners {
        &mut self.https
    }

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
            https,
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
            https,
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
