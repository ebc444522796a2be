//! Upstreams: the ready endpoints of one Service port, picked round-robin,
//! with passive ejection of endpoints that refuse connections.
//!
//! Health lives in [`Endpoint`]s that outlive snapshots: the
//! [`EndpointRegistry`] hands the same `Arc<Endpoint>` to every compile
//! while anything still holds it, so a reload does not forget that a node
//! is down.
//!
//! An upstream also says how teapot speaks to it ([`Protocol`]): HTTP/1.1
//! (today's path for every Ingress backend), cleartext HTTP/2, or either
//! over TLS (crate::compile::upstream_tls). An Ingress's `backend-protocol`
//! makes its own copy of the shared (Service, port) upstream with the same
//! endpoints (the same health) and its protocol.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use crate::compile::upstream_tls::{BackendTls, TlsSettingsError, UpstreamTls};

/// First ejection after a refused connection; doubles per consecutive
/// failure up to [`MAX_EJECTION`].
pub const BASE_EJECTION: Duration = Duration::from_secs(2);
pub const MAX_EJECTION: Duration = Duration::from_secs(30);

fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// One backend address and what we learned about it.
#[derive(Debug)]
pub struct Endpoint {
    pub addr: SocketAddr,
    ejected_until_ms: AtomicU64,
    failures: AtomicU32,
}

impl Endpoint {
    fn new(addr: SocketAddr) -> Endpoint {
        Endpoint {
            addr,
            ejected_until_ms: AtomicU64::new(0),
            failures: AtomicU32::new(0),
        }
    }

    pub fn is_ejected(&self) -> bool {
        self.ejected_until_ms.load(Ordering::Relaxed) > now_ms()
    }

    /// A connect failed: keep new requests away for a growing while.
    pub fn eject(&self) {
        let failures = self.failures.fetch_add(1, Ordering::Relaxed).min(8);
        let backoff = (BASE_EJECTION * 2u32.pow(failures)).min(MAX_EJECTION);
        self.ejected_until_ms
            .store(now_ms() + backoff.as_millis() as u64, Ordering::Relaxed);
    }

    /// A connect succeeded: forget past failures.
    pub fn mark_healthy(&self) {
        // Read first so the common case does not write a shared cache line.
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
            self.ejected_until_ms.store(0, Ordering::Relaxed);
        }
    }
}

/// Shares endpoint health across compiles, and upstream TLS
/// configurations (their session caches and pool classes).
#[derive(Debug, Default)]
pub struct EndpointRegistry {
    known: Mutex<HashMap<SocketAddr, Weak<Endpoint>, foldhash::fast::RandomState>>,
    tls: Mutex<HashMap<u64, Weak<UpstreamTls>, foldhash::fast::RandomState>>,
}

impl EndpointRegistry {
    /// The live `Endpoint` for `addr`, or a new healthy one.
    pub fn endpoint(&self, addr: SocketAddr) -> Arc<Endpoint> {
        self.endpoints(&[addr]).remove(0)
    }

    /// [`Self::endpoint`] for each address, under one lock.
    pub fn endpoints(&self, addrs: &[SocketAddr]) -> Vec<Arc<Endpoint>> {
        let mut known = self.known.lock();
        addrs
            .iter()
            .map(|&addr| {
                if let Some(e) = known.get(&addr).and_then(Weak::upgrade) {
                    return e;
                }
                let e = Arc::new(Endpoint::new(addr));
                known.insert(addr, Arc::downgrade(&e));
                e
            })
            .collect()
    }

    /// The TLS configuration of `settings`: the live one a snapshot
    /// already uses (its sessions resume, its pooled connections are
    /// reused), or a new one.
    pub fn tls(&self, settings: BackendTls) -> Result<Arc<UpstreamTls>, TlsSettingsError> {
        let key = settings.fingerprint();
        let mut known = self.tls.lock();
        if let Some(tls) = known.get(&key).and_then(Weak::upgrade) {
            return Ok(tls);
        }
        let tls = Arc::new(UpstreamTls::new(settings)?);
        known.insert(key, Arc::downgrade(&tls));
        Ok(tls)
    }

    /// Drops entries no snapshot uses any more.
    pub fn prune(&self) {
        let mut known = self.known.lock();
        known.retain(|_, w| w.strong_count() > 0);
        drop(known);
        self.tls.lock().retain(|_, w| w.strong_count() > 0);
    }
}

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
    use super::*;

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
