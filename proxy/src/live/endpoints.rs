//! Endpoint health and the upstream TLS configurations, which outlive
//! snapshots: the [`EndpointRegistry`] hands the same `Arc<Endpoint>` to
//! every compile while anything still holds it, so a reload does not
//! forget that a node is down, and the same `UpstreamTls` to every compile
//! that asks for the same settings, so its sessions resume and its pooled
//! connections are reused. Ejection is passive: a refused connection keeps
//! new requests away from the endpoint for a growing while.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::live::upstream_tls::{BackendTls, TlsSettingsError, UpstreamTls};

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
    /// `load-balance: ewma`: its response latency, written and read only
    /// by routes balanced by it.
    pub latency: crate::live::latency::Latency,
}

impl Endpoint {
    fn new(addr: SocketAddr) -> Endpoint {
        Endpoint {
            addr,
            ejected_until_ms: AtomicU64::new(0),
            failures: AtomicU32::new(0),
            latency: Default::default(),
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
    /// Endpoints known after the last prune.
    pruned_to: AtomicUsize,
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

    /// [`Self::prune`] once the endpoints known have doubled since the
    /// last one: endpoint changes stored without a compile add addresses
    /// (every restarted pod's), and a prune walks all of them, so its cost
    /// is spread over as many changes as it walks.
    pub fn prune_when_grown(&self) {
        let known = self.known.lock().len();
        if known > 2 * self.pruned_to.load(Ordering::Relaxed) + 1024 {
            self.prune();
        }
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
        self.pruned_to.store(known.len(), Ordering::Relaxed);
        drop(known);
        self.tls.lock().retain(|_, w| w.strong_count() > 0);
    }
}
