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
//!
//! Layout: this file is the built table and its lookup; what a request is
//! matched on is `matching`, what a matched rule does `target`, a
//! candidate and its precedence `candidate`, and the table as routes bind
//! to it `builder`.

mod builder;
mod candidate;
mod listeners;
mod matching;
mod target;

use std::sync::Arc;

use crate::compile::routes::HostRank;
use builder::Lists;
pub use builder::TableBuilder;
use candidate::Order;
pub use candidate::{Candidate, listener_rank, route_list};
pub use listeners::HttpsListeners;
pub use matching::{
    BudgetExhausted, EvalBudget, Matcher, PathMatch, REGEX_BYTES_PER_REQUEST, RequestFacts,
    RequestHeaders, ValueMatch,
};
pub use target::{
    Action, Backend, BackendFilters, Filters, HeaderEdits, Mirror, PathChange, Redirect, Rewrite,
    RouteInfo, Target,
};

/// Keys are configuration, never request input (lookups only probe).
type FastMap<V> = std::collections::HashMap<Box<str>, V, foldhash::fast::RandomState>;

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

/// The Gateway API routes of a snapshot.
#[derive(Debug, Default)]
pub struct GatewayTable {
    exact: FastMap<Chain>,
    wildcard: FastMap<Chain>,
    any: Option<Chain>,
    /// Longest wildcard suffix: no probe for longer ones.
    max_wildcard: usize,
    /// The tables of Gateways with their own address (set on the shared
    /// table only).
    own: OwnTables,
    /// The HTTPS listeners host names select (the shared table only).
    https: HttpsListeners,
}

/// The route table of each HTTP and HTTPS socket of Gateways with their
/// own address: one Gateway's routes at one port. A request that came in
/// on a Gateway's own address sees that table only, and one that came in
/// elsewhere never sees it: the Gateway's routes are in no other table.
#[derive(Debug, Default)]
pub struct OwnTables {
    by_socket: std::collections::HashMap<std::net::SocketAddr, Arc<GatewayTable>>,
    /// Every address with such a socket.
    addresses: std::collections::HashSet<std::net::IpAddr>,
}

impl OwnTables {
    /// Each socket with its Gateway's table at that port (`None`: no route
    /// bound there).
    pub fn new(
        sockets: impl IntoIterator<Item = (std::net::SocketAddr, Option<GatewayTable>)>,
    ) -> OwnTables {
        let mut out = OwnTables::default();
        for (socket, table) in sockets {
            out.addresses.insert(socket.ip());
            out.by_socket
                .insert(socket, Arc::new(table.unwrap_or_default()));
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }

    /// Whether `ip` is a Gateway's own address with an HTTP socket.
    pub fn serves(&self, ip: std::net::IpAddr) -> bool {
        self.addresses.contains(&ip)
    }

    /// `None`: `local` is not a Gateway's own address, the shared tables
    /// serve it. `Some(None)`: it is, but no HTTP listener of a Gateway is
    /// at that port.
    pub fn at(&self, local: std::net::SocketAddr) -> Option<Option<&GatewayTable>> {
        if !self.addresses.contains(&local.ip()) {
            return None;
        }
        Some(self.by_socket.get(&local).map(|t| &**t))
    }
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
    /// The tables of Gateways with their own address.
    pub fn own(&self) -> &OwnTables {
        &self.own
    }

    pub fn set_own(&mut self, own: OwnTables) {
        self.own = own;
    }

    /// The HTTPS listeners of the shared socket, by the names they select.
    pub fn https_listeners(&self) -> &HttpsListeners {
        &self.https
    }

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
    use std::sync::atomic::AtomicU64;

    use teapot_api::HostPattern;
    use teapot_api::regex::TenantRegex;

    use super::*;
    use crate::compile::routes::Route;

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
            local: None,
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
