//! What an L4 Gateway listener forwards to: for TCP and UDP the route's
//! backends in one rotation, split by weight per backend, with the share
//! of invalid or empty backends refused; for TLS passthrough one such
//! choice per SNI hostname ([`SniRoutes`]). The L4 Gateway compile
//! (`super::gateway`) builds them; the listeners (`crate::plane::l4`) read
//! them per connection.

use std::sync::Arc;

use teapot_api::HostPattern;
use teapot_model::attachment;

use crate::compile::upstream::Upstream;

/// What the TLS listeners of one socket forward, by SNI: the routes'
/// backends per hostname, exact names before wildcards, longer suffixes
/// first. An entry of a Terminate listener carries its [`Terminate`]: the
/// connection's TLS ends at the proxy and the cleartext goes on; an entry
/// without one is passed through untouched.
#[derive(Debug, Default)]
pub struct SniRoutes {
    /// `None`: any name (a route without hostnames under a listener
    /// without one). Kept in match order.
    pub entries: Vec<SniEntry>,
}

/// One SNI entry: the name it takes, its backends, and for a Terminate
/// listener the TLS the proxy answers with.
pub type SniEntry = (Option<HostPattern>, Arc<Chosen>, Option<Arc<Terminate>>);

/// A Terminate TLS listener's side of the handshake: its certificate (the
/// first usable of its `certificateRefs`) in a server configuration
/// built once per compile.
#[derive(Debug)]
pub struct Terminate {
    /// The listener, `namespace/gateway/listener`, for logs.
    pub listener: String,
    pub config: Arc<rustls::ServerConfig>,
}

/// What an SNI entry forwards to: the route's rotation and its refused
/// share.
pub type Chosen = (Arc<Upstream>, Option<Arc<Refusals>>);

impl SniRoutes {
    /// The backends for a ClientHello's server name (`None`: the client
    /// sent none). No match: the connection is refused.
    pub fn choose(&self, server_name: Option<&str>) -> Option<&Chosen> {
        self.choose_entry(server_name).map(|(c, _)| c)
    }

    /// [`Self::choose`], with the entry's [`Terminate`] when its listener
    /// terminates TLS.
    pub fn choose_entry(
        &self,
        server_name: Option<&str>,
    ) -> Option<(&Chosen, Option<&Arc<Terminate>>)> {
        let name = server_name.and_then(|n| HostPattern::parse(n).ok());
        self.entries
            .iter()
            .find(|(pattern, _, _)| match (pattern, &name) {
                (None, _) => true,
                (Some(p), Some(n @ HostPattern::Exact(_))) => {
                    attachment::intersect(Some(p), Some(n)).is_some()
                }
                _ => false,
            })
            .map(|(_, c, t)| (&**c, t.as_ref()))
    }

    /// Whether a listener of this socket terminates TLS: its connections
    /// are then served by `plane::l4::terminate`.
    pub fn terminates(&self) -> bool {
        self.entries.iter().any(|(_, _, t)| t.is_some())
    }

    pub(super) fn sort(&mut self) {
        fn rank(p: &Option<HostPattern>) -> (u8, std::cmp::Reverse<usize>) {
            match p {
                Some(HostPattern::Exact(n)) => (0, std::cmp::Reverse(n.len())),
                Some(HostPattern::Wildcard(s)) => (1, std::cmp::Reverse(s.len())),
                None => (2, std::cmp::Reverse(0)),
            }
        }
        // Stable: among equals, the older route (inserted first) wins.
        self.entries.sort_by_key(|(p, _, _)| rank(p));
        let mut seen = Vec::new();
        self.entries.retain(|(p, _, _)| {
            if seen.contains(p) {
                false
            } else {
                seen.push(p.clone());
                true
            }
        });
    }
}

/// What one Gateway socket forwards to.
#[derive(Debug)]
pub enum Target {
    /// A TCP or UDP listener: one route's weighted backends, and the share
    /// refused for its invalid ones.
    Backends(Arc<Upstream>, Option<Arc<Refusals>>),
    /// TLS passthrough listeners on this socket, by SNI.
    Sni(SniRoutes),
    /// HTTP (`tls` false) or HTTPS listeners of a Gateway with its own
    /// address: connections go to the HTTP edge, requests to the
    /// Gateway's routes at this port only.
    Edge { tls: bool },
}

/// The share of a route's connections (TCP) or datagrams (UDP) that must
/// be refused because it belongs to invalid backendRefs or to backends
/// without endpoints: the specification asks for the rejections to
/// respect the weights ("if an invalid backend is requested to have 80% of
/// connections, then 80% of connections must be rejected").
#[derive(Debug)]
pub struct Refusals {
    refused: u64,
    total: u64,
    next: std::sync::atomic::AtomicU64,
}

impl Refusals {
    fn new(refused: u64, total: u64) -> Option<Arc<Refusals>> {
        (refused > 0 && total > 0).then(|| {
            Arc::new(Refusals {
                refused,
                total,
                next: std::sync::atomic::AtomicU64::new(0),
            })
        })
    }

    /// Whether the next connection or datagram is refused: exactly
    /// `refused` of every `total`, spread evenly (Bresenham).
    pub fn refuse_next(&self) -> bool {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.total;
        (n + 1) * self.refused / self.total > n * self.refused / self.total
    }
}

/// Most entries a weighted upstream's rotation may have: weights are
/// scaled down to fit, each backend keeping at least one.
const MAX_ROTATION: u64 = 1024;

/// Spreads traffic over `backends` by weight: one upstream whose endpoint
/// rotation repeats each backend's endpoints in proportion to its weight
/// divided by its endpoint count, interleaved smoothly (nginx's smooth
/// weighted round robin), so consecutive connections alternate. Backends
/// without endpoints take no share of the rotation: their weight, with
/// `invalid` (the weight of invalid backendRefs), is the refused share.
pub fn weighted(
    label: String,
    backends: &[(u32, Arc<Upstream>)],
    invalid: u32,
) -> (Arc<Upstream>, Option<Arc<Refusals>>) {
    let empty: u64 = backends
        .iter()
        .filter(|(_, u)| u.endpoints.compile_from().is_empty())
        .map(|(w, _)| u64::from(*w))
        .sum();
    let total: u64 = backends.iter().map(|(w, _)| u64::from(*w)).sum::<u64>() + u64::from(invalid);
    let refusals = Refusals::new(empty + u64::from(invalid), total);
    (rotation(label, backends), refusals)
}

fn rotation(label: String, backends: &[(u32, Arc<Upstream>)]) -> Arc<Upstream> {
    let live: Vec<&(u32, Arc<Upstream>)> = backends
        .iter()
        .filter(|(w, u)| *w > 0 && !u.endpoints.compile_from().is_empty())
        .collect();
    if let [(_, only)] = live.as_slice() {
        return only.clone();
    }
    if live.is_empty() {
        let why = backends
            .iter()
            .filter_map(|(_, u)| u.unavailable.clone())
            .collect::<Vec<_>>()
            .join("; ");
        let why = if why.is_empty() {
            "no backend with a weight above 0".to_string()
        } else {
            why
        };
        return Arc::new(Upstream::new(label, Vec::new(), Some(why)));
    }
    // Each endpoint's share: weight / endpoints, made integral over the
    // product of the endpoint counts (bounded below).
    // The rotation is built from the endpoints now: their cells are
    // marked, so that a change of them is compiled, not stored in place.
    let sets: Vec<_> = live
        .iter()
        .map(|(_, u)| u.endpoints.compile_from())
        .collect();
    let counts: u64 = sets
        .iter()
        .map(|set| set.len() as u64)
        .fold(1, |a, n| a.saturating_mul(n).min(1 << 20));
    let mut shares: Vec<(u64, &Arc<crate::live::endpoints::Endpoint>)> = Vec::new();
    for ((w, _), set) in live.iter().zip(&sets) {
        let each = (*w as u64).saturating_mul(counts) / set.len() as u64;
        for e in set.iter() {
            shares.push((each.max(1), e));
        }
    }
    let g = shares.iter().fold(0, |g, (s, _)| gcd(g, *s)).max(1);
    for s in &mut shares {
        s.0 /= g;
    }
    let total: u64 = shares.iter().map(|s| s.0).sum();
    if total > MAX_ROTATION {
        for s in &mut shares {
            s.0 = (s.0 * MAX_ROTATION / total).max(1);
        }
    }
    let total: u64 = shares.iter().map(|s| s.0).sum();
    let mut current = vec![0i64; shares.len()];
    let mut rotation = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, (s, _)) in current.iter_mut().zip(&shares) {
            *c += *s as i64;
        }
        let (best, _) = current
            .iter()
            .enumerate()
            .max_by_key(|(i, c)| (**c, std::cmp::Reverse(*i)))
            .expect("at least two endpoints");
        current[best] -= total as i64;
        rotation.push(shares[best].1.clone());
    }
    let mut upstream = Upstream::new(label, rotation, None);
    upstream.refused = live.iter().flat_map(|(_, u)| u.refused.clone()).collect();
    // A Terminate listener's backends speak TLS when a BackendTLSPolicy
    // asks (`compile::gateway::backend_tls`): one rotation has one way of
    // speaking, so backends that disagree are not connected rather than
    // some of them reached in clear.
    let first = live[0].1.protocol.tls();
    let agree = live.iter().all(|(_, u)| match (u.protocol.tls(), first) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    });
    if !agree {
        return Arc::new(upstream.unusable(
            "the route's backends differ in their BackendTLSPolicy; one rotation speaks one TLS"
                .to_string(),
        ));
    }
    if let Some(tls) = first {
        upstream = upstream.speaking(crate::compile::upstream::Protocol::Tls(tls.clone()));
    }
    Arc::new(upstream)
}

/// Every endpoint of a TLS listener's SNI choices, once: what health
/// checks probe and draining compares with.
pub fn union(label: &str, sni: &SniRoutes) -> Arc<Upstream> {
    let mut seen = std::collections::HashSet::new();
    let sets: Vec<_> = sni
        .entries
        .iter()
        .map(|(_, c, _)| c.0.endpoints.compile_from())
        .collect();
    let endpoints = sets
        .iter()
        .flat_map(|set| set.iter())
        .filter(|e| seen.insert(e.addr))
        .cloned()
        .collect();
    Arc::new(Upstream::new(
        format!("TLS passthrough of {label}"),
        endpoints,
        None,
    ))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn host(h: &str) -> HostPattern {
        HostPattern::parse(h).unwrap()
    }

    #[test]
    fn sni_prefers_exact_then_longest_suffix_and_refuses_the_rest() {
        let up = |n: &str| Arc::new((Arc::new(Upstream::new(n.into(), Vec::new(), None)), None));
        let mut sni = SniRoutes {
            entries: vec![
                (Some(host("*.example.com")), up("wide"), None),
                (Some(host("*.db.example.com")), up("narrow"), None),
                (Some(host("a.db.example.com")), up("exact"), None),
                (
                    Some(host("*.example.com")),
                    up("younger, same pattern"),
                    None,
                ),
            ],
        };
        sni.sort();
        let pick = |n: Option<&str>| sni.choose(n).map(|c| c.0.name.clone());
        assert_eq!(pick(Some("a.db.example.com")).as_deref(), Some("exact"));
        assert_eq!(pick(Some("B.DB.example.com")).as_deref(), Some("narrow"));
        assert_eq!(pick(Some("x.example.com")).as_deref(), Some("wide"));
        assert_eq!(pick(Some("example.com")), None);
        assert_eq!(pick(None), None, "no SNI, no catch-all: refused");
        assert_eq!(pick(Some("not a name")), None);
        assert_eq!(sni.entries.len(), 3);
    }

    fn endpoints(base: u8, n: u8) -> Arc<Upstream> {
        let registry = crate::live::endpoints::EndpointRegistry::default();
        let eps = (0..n)
            .map(|i| registry.endpoint(std::net::SocketAddr::from(([10, 0, base, i], 80))))
            .collect();
        Arc::new(Upstream::new(format!("b{base}"), eps, None))
    }

    #[test]
    fn weights_split_the_rotation_per_backend_not_per_endpoint() {
        // 3:1 over a backend with 2 endpoints and one with 1; weight 5 on
        // one without endpoints and 2 on invalid refs.
        let (u, refusals) = weighted(
            "r".into(),
            &[
                (3, endpoints(1, 2)),
                (1, endpoints(2, 1)),
                (5, endpoints(3, 0)),
            ],
            2,
        );
        let of = |base: u8| {
            u.endpoints
                .load()
                .iter()
                .filter(|e| matches!(e.addr.ip(), IpAddr::V4(v) if v.octets()[2] == base))
                .count()
        };
        // Per backend 3:1, whatever the endpoint counts; none for the
        // backend without endpoints.
        assert_eq!((of(1), of(2), of(3)), (6, 2, 0), "{:?}", u.endpoints);
        // Smooth: the light backend comes early, not after all the others.
        let light = u
            .endpoints
            .load()
            .iter()
            .position(|e| e.addr.ip().to_string() == "10.0.2.0");
        assert!(matches!(light, Some(0..=3)), "{light:?}");
        // 7 of every 11 connections refused (the empty and invalid
        // backends' weight), spread out.
        let refusals = refusals.expect("a refused share");
        let picks: Vec<bool> = (0..22).map(|_| refusals.refuse_next()).collect();
        assert_eq!(picks.iter().filter(|r| **r).count(), 14);
        assert!(picks.windows(4).all(|w| w.iter().any(|r| *r)), "{picks:?}");
        assert!(picks.windows(2).any(|w| w == [true, false]));
        // One live backend: its own upstream, unchanged, nothing refused.
        let one = endpoints(4, 2);
        let (u, refusals) = weighted("r".into(), &[(1, one.clone()), (0, endpoints(5, 1))], 0);
        assert!(Arc::ptr_eq(&u, &one) && refusals.is_none());
        let (none, refusals) = weighted("r".into(), &[(1, endpoints(6, 0))], 0);
        assert!(none.endpoints.load().is_empty() && none.unavailable.is_some());
        assert!(refusals.is_some_and(|r| (0..5).all(|_| r.refuse_next())));
    }
}
