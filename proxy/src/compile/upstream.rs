//! Upstreams: the ready endpoints of one Service port, picked round-robin,
//! skipping endpoints ejected for refusing connections.
//!
//! Health lives in [`Endpoint`]s that outlive snapshots
//! (crate::live::endpoints); an upstream only holds them.
//!
//! An upstream also says how teapot speaks to it ([`Protocol`]): HTTP/1.1
//! (today's path for every Ingress backend), cleartext HTTP/2, or either
//! over TLS (crate::live::upstream_tls). An Ingress's `backend-protocol`
//! makes its own copy of the shared (Service, port) upstream with the same
//! endpoints (the same health) and its protocol.
//!
//! The endpoints sit in an [`EndpointCell`] that every copy shares: an
//! EndpointSlice change stores the Service port's new endpoints there, in
//! place, without a compile (crate::compile::endpoint_sets). A request
//! loads the set once per pick.

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use arc_swap::{ArcSwap, Guard};

use crate::live::endpoints::Endpoint;
use crate::live::upstream_tls::UpstreamTls;

/// How teapot speaks to an upstream.
#[derive(Clone, Debug, Default)]
pub enum Protocol {
    /// HTTP/1.1 over TCP.
    #[default]
    Http1,
    /// HTTP/2 with prior knowledge over TCP (gRPC, h2c).
    H2c,
    /// HTTP/1.1 or HTTP/2 ([`UpstreamTls::h2`]) over TLS.
    Tls(Arc<UpstreamTls>),
}

impl Protocol {
    /// HTTP/2 to the backend: only an HTTP/2 client's request can go.
    pub fn is_h2(&self) -> bool {
        match self {
            Protocol::Http1 => false,
            Protocol::H2c => true,
            Protocol::Tls(tls) => tls.h2(),
        }
    }

    pub fn tls(&self) -> Option<&Arc<UpstreamTls>> {
        match self {
            Protocol::Tls(tls) => Some(tls),
            _ => None,
        }
    }
}

/// One version of an upstream's endpoints. `version` tells a request's
/// [`Tried`] that the indices it holds belong to another set.
#[derive(Debug)]
pub struct EndpointSet {
    endpoints: Box<[Arc<Endpoint>]>,
    version: u64,
}

impl Deref for EndpointSet {
    type Target = [Arc<Endpoint>];
    fn deref(&self) -> &[Arc<Endpoint>] {
        &self.endpoints
    }
}

impl EndpointSet {
    fn new(endpoints: Vec<Arc<Endpoint>>) -> EndpointSet {
        static VERSIONS: AtomicU64 = AtomicU64::new(1);
        EndpointSet {
            endpoints: endpoints.into_boxed_slice(),
            version: VERSIONS.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// The endpoints of one upstream and of every copy made from it
/// ([`Upstream::speaking`]), swappable in place.
#[derive(Debug)]
pub struct EndpointCell {
    set: ArcSwap<EndpointSet>,
    /// A compile built something from this set's contents (an L4 rotation,
    /// a report listing them): a change of them then needs a compile.
    compiled_from: AtomicBool,
}

impl EndpointCell {
    fn new(endpoints: Vec<Arc<Endpoint>>) -> EndpointCell {
        EndpointCell {
            set: ArcSwap::from_pointee(EndpointSet::new(endpoints)),
            compiled_from: AtomicBool::new(false),
        }
    }

    /// The endpoints now (request path: no reference count is taken).
    pub fn load(&self) -> Guard<Arc<EndpointSet>> {
        self.set.load()
    }

    /// The endpoints now, for a compile that builds from them: marks the
    /// cell so that a change of them is compiled rather than stored.
    pub fn compile_from(&self) -> Arc<EndpointSet> {
        self.compiled_from.store(true, Ordering::Relaxed);
        self.set.load_full()
    }

    pub fn is_compiled_from(&self) -> bool {
        self.compiled_from.load(Ordering::Relaxed)
    }

    /// Puts `endpoints` in place of the current set.
    pub fn store(&self, endpoints: Vec<Arc<Endpoint>>) {
        self.set.store(Arc::new(EndpointSet::new(endpoints)));
    }

    /// The current endpoints' addresses, as text: what the status report
    /// lists and tests compare.
    pub fn addresses(&self) -> Vec<String> {
        self.set.load().iter().map(|e| e.addr.to_string()).collect()
    }

    /// Whether the current set holds exactly these endpoints, in order.
    pub fn holds(&self, endpoints: &[Arc<Endpoint>]) -> bool {
        let set = self.set.load();
        set.len() == endpoints.len() && set.iter().zip(endpoints).all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// An endpoint [`Upstream::pick`] chose, borrowed from the set it was
/// chosen from (`.clone()` gives the `Arc<Endpoint>`).
pub struct Picked {
    set: Guard<Arc<EndpointSet>>,
    index: usize,
}

impl Picked {
    /// Its index in the set it was picked from.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Deref for Picked {
    type Target = Arc<Endpoint>;
    fn deref(&self) -> &Arc<Endpoint> {
        &self.set[self.index]
    }
}

impl std::fmt::Debug for Picked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

/// The endpoints behind one `(Service, port)` backend reference.
#[derive(Debug)]
pub struct Upstream {
    /// `namespace/service:port`, for logs and status.
    pub name: String,
    /// Shared with every copy of this upstream; an EndpointSlice change
    /// replaces its contents in place.
    pub endpoints: Arc<EndpointCell>,
    next: AtomicUsize,
    /// Why there is no endpoint, when there is none.
    pub unavailable: Option<String>,
    /// Addresses refused by tenant policy, as messages.
    pub refused: Vec<String>,
    pub protocol: Protocol,
}

/// Endpoints already tried by one request (first 64 by index), in the
/// endpoint set they index. When the set is replaced between two tries the
/// marks no longer name the same endpoints: they are dropped, and the tries
/// made still count (an endpoint that refused was ejected, so a pick passes
/// over it anyway).
#[derive(Clone, Copy, Debug, Default)]
pub struct Tried {
    marks: u64,
    version: u64,
    before: u32,
}

impl Tried {
    fn has(self, i: usize) -> bool {
        i < 64 && self.marks & (1 << i) != 0
    }
    fn add(&mut self, i: usize) {
        if i < 64 {
            self.marks |= 1 << i;
        }
    }
    /// Follows `set`: marks made in another set are dropped.
    fn follow(&mut self, set: &EndpointSet) {
        if self.version != set.version {
            self.before += self.marks.count_ones();
            self.marks = 0;
            self.version = set.version;
        }
    }
    pub fn count(self) -> u32 {
        self.before + self.marks.count_ones()
    }
}

impl Upstream {
    pub fn new(
        name: String,
        endpoints: Vec<Arc<Endpoint>>,
        unavailable: Option<String>,
    ) -> Upstream {
        Upstream {
            name,
            endpoints: Arc::new(EndpointCell::new(endpoints)),
            next: AtomicUsize::new(0),
            unavailable,
            refused: Vec::new(),
            protocol: Protocol::Http1,
        }
    }

    /// This upstream's endpoints (the same ones: their health is shared)
    /// spoken to with `protocol`.
    pub fn speaking(&self, protocol: Protocol) -> Upstream {
        Upstream {
            name: self.name.clone(),
            endpoints: Arc::clone(&self.endpoints),
            next: AtomicUsize::new(0),
            unavailable: self.unavailable.clone(),
            refused: self.refused.clone(),
            protocol,
        }
    }

    /// This upstream answering 503 with `why` (its settings are unusable):
    /// no endpoint, so nothing is ever sent unverified.
    pub fn unusable(&self, why: String) -> Upstream {
        let mut upstream = Upstream::new(self.name.clone(), Vec::new(), Some(why));
        upstream.refused = self.refused.clone();
        upstream
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.load().is_empty()
    }

    /// Next endpoint round-robin, skipping ones this request tried and ones
    /// that are ejected. When every untried endpoint is ejected, the first
    /// of them is tried anyway: a request that might succeed beats a 503.
    pub fn pick(&self, tried: &mut Tried) -> Option<Picked> {
        let set = self.endpoints.load();
        self.pick_in(set, None, tried)
    }

    fn pick_in(
        &self,
        set: Guard<Arc<EndpointSet>>,
        preferred: Option<usize>,
        tried: &mut Tried,
    ) -> Option<Picked> {
        tried.follow(&set);
        if let Some(i) = preferred
            && let Some(e) = set.get(i)
            && !tried.has(i)
            && !e.is_ejected()
        {
            tried.add(i);
            return Some(Picked { set, index: i });
        }
        let n = set.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut fallback = None;
        for step in 0..n {
            let i = (start + step) % n;
            if tried.has(i) {
                continue;
            }
            if !set[i].is_ejected() {
                tried.add(i);
                return Some(Picked { set, index: i });
            }
            fallback.get_or_insert(i);
        }
        let i = fallback?;
        tried.add(i);
        Some(Picked { set, index: i })
    }

    /// [`Self::pick`], trying `preferred` (an index: the endpoint a client sticks to)
    /// first while it is untried and not ejected.
    pub fn pick_preferring(&self, preferred: Option<usize>, tried: &mut Tried) -> Option<Picked> {
        let set = self.endpoints.load();
        self.pick_in(set, preferred, tried)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::live::endpoints::EndpointRegistry;

    fn upstream(n: u16, registry: &EndpointRegistry) -> Upstream {
        let eps = (0..n)
            .map(|i| registry.endpoint(SocketAddr::from(([127, 0, 0, 1], 1000 + i))))
            .collect();
        Upstream::new("ns/s:80".into(), eps, None)
    }

    #[test]
    fn round_robin_covers_all_endpoints() {
        let r = EndpointRegistry::default();
        let u = upstream(3, &r);
        let ports: Vec<u16> = (0..6)
            .map(|_| u.pick(&mut Tried::default()).unwrap().addr.port())
            .collect();
        assert_eq!(ports, [1000, 1001, 1002, 1000, 1001, 1002]);
    }

    #[test]
    fn ejected_endpoints_are_skipped_and_retries_move_on() {
        let r = EndpointRegistry::default();
        let u = upstream(3, &r);
        u.endpoints.load()[1].eject();
        for _ in 0..6 {
            assert_ne!(u.pick(&mut Tried::default()).unwrap().addr.port(), 1001);
        }
        let mut tried = Tried::default();
        let a = u.pick(&mut tried).unwrap().addr;
        let b = u.pick(&mut tried).unwrap().addr;
        let c = u.pick(&mut tried).unwrap().addr;
        assert!(
            a != b && b != c && a != c,
            "every endpoint once: {a} {b} {c}"
        );
        assert!(u.pick(&mut tried).is_none());
        assert_eq!(tried.count(), 3);
    }

    #[test]
    fn all_ejected_still_tries() {
        let r = EndpointRegistry::default();
        let u = upstream(2, &r);
        u.endpoints.load()[0].eject();
        u.endpoints.load()[1].eject();
        assert!(u.pick(&mut Tried::default()).is_some());
        u.endpoints.load()[0].mark_healthy();
        assert!(!u.endpoints.load()[0].is_ejected());
    }

    #[test]
    fn health_survives_recompiles() {
        let r = EndpointRegistry::default();
        let first = upstream(1, &r);
        first.endpoints.load()[0].eject();
        let second = upstream(1, &r);
        assert!(second.endpoints.load()[0].is_ejected());
        drop((first, second));
        r.prune();
        assert!(!upstream(1, &r).endpoints.load()[0].is_ejected());
    }

    #[test]
    fn copies_share_the_set_and_see_it_replaced() {
        let r = EndpointRegistry::default();
        let u = upstream(2, &r);
        let h2 = u.speaking(Protocol::H2c);
        u.endpoints
            .store(r.endpoints(&[SocketAddr::from(([127, 0, 0, 1], 2000))]));
        for _ in 0..3 {
            assert_eq!(h2.pick(&mut Tried::default()).unwrap().addr.port(), 2000);
        }
    }

    #[test]
    fn tries_in_a_replaced_set_still_count_and_marks_move_to_the_new_one() {
        let r = EndpointRegistry::default();
        let u = upstream(3, &r);
        let mut tried = Tried::default();
        let first = u.pick(&mut tried).unwrap().clone();
        // The set changes between two tries of one request: the index of
        // the first try means nothing in the new set.
        let addrs = [1000u16, 1001, 1002, 1003].map(|p| SocketAddr::from(([127, 0, 0, 1], p)));
        u.endpoints.store(r.endpoints(&addrs));
        assert_eq!(first.addr.port(), 1000);
        let mut seen = Vec::new();
        while let Some(e) = u.pick(&mut tried) {
            seen.push(e.addr);
        }
        assert_eq!(tried.count(), 5, "one try in the old set, four in the new");
        seen.sort();
        assert_eq!(seen, addrs);
    }
}
