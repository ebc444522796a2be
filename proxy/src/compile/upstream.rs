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

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// The endpoints behind one `(Service, port)` backend reference.
#[derive(Debug)]
pub struct Upstream {
    /// `namespace/service:port`, for logs and status.
    pub name: String,
    pub endpoints: Box<[Arc<Endpoint>]>,
    next: AtomicUsize,
    /// Why there is no endpoint, when there is none.
    pub unavailable: Option<String>,
    /// Addresses refused by tenant policy, as messages.
    pub refused: Vec<String>,
    pub protocol: Protocol,
}

/// Endpoints already tried by one request (first 64 by index).
#[derive(Clone, Copy, Debug, Default)]
pub struct Tried(u64);

impl Tried {
    fn has(self, i: usize) -> bool {
        i < 64 && self.0 & (1 << i) != 0
    }
    fn add(&mut self, i: usize) {
        if i < 64 {
            self.0 |= 1 << i;
        }
    }
    pub fn count(self) -> u32 {
        self.0.count_ones()
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
            endpoints: endpoints.into_boxed_slice(),
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
            endpoints: self.endpoints.clone(),
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
        self.endpoints.is_empty()
    }

    /// Next endpoint round-robin, skipping ones this request tried and ones
    /// that are ejected. When every untried endpoint is ejected, the first
    /// of them is tried anyway: a request that might succeed beats a 503.
    pub fn pick(&self, tried: &mut Tried) -> Option<&Arc<Endpoint>> {
        let n = self.endpoints.len();
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
            if !self.endpoints[i].is_ejected() {
                tried.add(i);
                return Some(&self.endpoints[i]);
            }
            fallback.get_or_insert(i);
        }
        let i = fallback?;
        tried.add(i);
        Some(&self.endpoints[i])
    }

    /// [`Self::pick`], trying `preferred` (an index: the endpoint a client sticks to)
    /// first while it is untried and not ejected.
    pub fn pick_preferring(
        &self,
        preferred: Option<usize>,
        tried: &mut Tried,
    ) -> Option<&Arc<Endpoint>> {
        if let Some(i) = preferred
            && let Some(e) = self.endpoints.get(i)
            && !tried.has(i)
            && !e.is_ejected()
        {
            tried.add(i);
            return Some(e);
        }
        self.pick(tried)
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
        u.endpoints[1].eject();
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
        u.endpoints[0].eject();
        u.endpoints[1].eject();
        assert!(u.pick(&mut Tried::default()).is_some());
        u.endpoints[0].mark_healthy();
        assert!(!u.endpoints[0].is_ejected());
    }

    #[test]
    fn health_survives_recompiles() {
        let r = EndpointRegistry::default();
        let first = upstream(1, &r);
        first.endpoints[0].eject();
        let second = upstream(1, &r);
        assert!(second.endpoints[0].is_ejected());
        drop((first, second));
        r.prune();
        assert!(!upstream(1, &r).endpoints[0].is_ejected());
    }
}
