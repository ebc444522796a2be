//! Gateway API RequestMirror copies, for both engines (HTTP/1:
//! `crate::plane::h1`, HTTP/2: `crate::plane::h2`): the request's head goes
//! to the mirror backend on a task nobody waits for, within a bounded
//! number of slots.
//!
//! Every replica carries every tenant, so the slots are shared: a tenant
//! whose mirror backend accepts and never answers would hold each slot it
//! gets for the whole [`MIRROR_TIMEOUT`]. The process holds at most
//! [`MAX_MIRRORS_IN_FLIGHT`], and one namespace at most
//! [`MAX_MIRRORS_PER_NAMESPACE`] of them, so such a tenant starves its own
//! mirrors only (docs/gateway-api.md, docs/decisions.md). Over either
//! bound a mirror is dropped rather than queued, and counted by namespace.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::compile::gateway::table::Mirror;
use crate::compile::upstream::Tried;
use crate::plane::filters;

/// Mirrored requests in flight, across the process.
pub const MAX_MIRRORS_IN_FLIGHT: usize = 256;
/// Mirrored requests in flight for one namespace (the mirror backend's):
/// a quarter of the process's, so one tenant's slow mirror backend leaves
/// the other tenants three quarters.
pub const MAX_MIRRORS_PER_NAMESPACE: usize = MAX_MIRRORS_IN_FLIGHT / 4;

/// How long a mirror may hold its slot: connect, send a head, read an
/// answer to drop.
const MIRROR_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Counts mirrored-or-not decisions, for RequestMirror shares.
static MIRROR_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// The process's mirror slots.
static SLOTS: MirrorSlots = MirrorSlots::new(MAX_MIRRORS_IN_FLIGHT, MAX_MIRRORS_PER_NAMESPACE);

/// Why a mirror found no slot: the `reason` label of
/// `teapot_mirror_dropped_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// The namespace holds its share.
    Namespace,
    /// The process holds its cap.
    Process,
}

impl Full {
    pub fn label(self) -> &'static str {
        match self {
            Full::Namespace => "namespace_share",
            Full::Process => "process_cap",
        }
    }
}

/// Mirror slots in flight, in total and by namespace.
#[derive(Debug)]
pub struct MirrorSlots {
    total_cap: usize,
    namespace_cap: usize,
    held: Mutex<Held>,
    /// Mirrors dropped, for logging at each power of two.
    dropped: AtomicU64,
}

#[derive(Debug)]
struct Held {
    total: usize,
    /// Only namespaces holding a slot now: an entry leaves at zero. Keys
    /// are namespace names from the snapshot, never request input: a
    /// fixed seed is safe.
    by_namespace: hashbrown::HashMap<Box<str>, usize, foldhash::fast::FixedState>,
}

/// A slot taken from [`MirrorSlots`], given back when dropped.
#[derive(Debug)]
pub struct MirrorSlot<'s> {
    slots: &'s MirrorSlots,
    namespace: Box<str>,
}

impl MirrorSlots {
    pub const fn new(total_cap: usize, namespace_cap: usize) -> MirrorSlots {
        MirrorSlots {
            total_cap,
            namespace_cap,
            held: Mutex::new(Held {
                total: 0,
                by_namespace: hashbrown::HashMap::with_hasher(
                    foldhash::fast::FixedState::with_seed(0x6d69),
                ),
            }),
            dropped: AtomicU64::new(0),
        }
    }

    /// A slot for a mirror to a backend of `namespace`, unless the
    /// namespace or the process holds its bound.
    pub fn take(&self, namespace: &str) -> Result<MirrorSlot<'_>, Full> {
        let mut held = self.held.lock();
        if held.total >= self.total_cap {
            return Err(Full::Process);
        }
        let mine = held.by_namespace.get(namespace).copied().unwrap_or(0);
        if mine >= self.namespace_cap {
            return Err(Full::Namespace);
        }
        held.by_namespace.insert(namespace.into(), mine + 1);
        held.total += 1;
        Ok(MirrorSlot {
            slots: self,
            namespace: namespace.into(),
        })
    }

    /// Slots held now by `namespace`.
    pub fn held_by(&self, namespace: &str) -> usize {
        self.held
            .lock()
            .by_namespace
            .get(namespace)
            .copied()
            .unwrap_or(0)
    }

    fn give_back(&self, namespace: &str) {
        let mut held = self.held.lock();
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_namespace.get_mut(namespace) {
            *n -= 1;
            if *n == 0 {
                held.by_namespace.remove(namespace);
            }
        }
    }
}

impl Drop for MirrorSlot<'_> {
    fn drop(&mut self) {
        self.slots.give_back(&self.namespace);
    }
}

/// The namespace a mirror's slots count against: its backend's, the first
/// part of the upstream's `namespace/service:port` label. A tenant's
/// mirror backends are Services of its own namespace (the admission
/// policy refuses others), so this is the tenant that asked.
fn namespace_of(m: &Mirror) -> &str {
    m.upstream.name.split_once('/').map_or("", |(ns, _)| ns)
}

/// Sends the request's head (no body, docs/gateway-api.md) to a
/// RequestMirror backend on a task nobody waits for: a mirror never slows
/// or fails the request; its answer is read and dropped. `dropped` is
/// `teapot_mirror_dropped_total{namespace,reason}`.
pub fn mirror<'h>(
    m: &Mirror,
    method: &str,
    target: &str,
    authority: &str,
    headers: impl Iterator<Item = (&'h str, &'h [u8])>,
    dropped: &prometheus::IntCounterVec,
) {
    let sequence = MIRROR_SEQUENCE.fetch_add(1, Ordering::Relaxed);
    if !filters::mirrored(m.per_million, sequence) {
        return;
    }
    let Some(endpoint) = m.upstream.pick(&mut Tried::default()) else {
        return;
    };
    let namespace = namespace_of(m);
    let slot = match SLOTS.take(namespace) {
        Ok(slot) => slot,
        Err(full) => {
            dropped.with_label_values(&[namespace, full.label()]).inc();
            let n = SLOTS.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // Once per power of two: a flood is visible, never a log flood.
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped = n,
                    namespace,
                    reason = full.label(),
                    process_cap = MAX_MIRRORS_IN_FLIGHT,
                    namespace_cap = MAX_MIRRORS_PER_NAMESPACE,
                    "request mirrors dropped: too many in flight"
                );
            }
            return;
        }
    };
    let bytes = filters::mirror_request(method, target, authority, headers);
    let addr = endpoint.addr;
    tokio::spawn(async move {
        let _slot = slot;
        let send = async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut stream = teapot_h1::connect(addr, MIRROR_TIMEOUT).await?;
            stream.write_all(&bytes).await?;
            let mut sink = [0u8; 1024];
            while stream.read(&mut sink).await? > 0 {}
            std::io::Result::Ok(())
        };
        if let Ok(Err(e)) = tokio::time::timeout(MIRROR_TIMEOUT, send).await {
            tracing::debug!(%addr, error = %e, "request mirror failed");
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::compile::upstream::Upstream;
    use crate::live::endpoints::EndpointRegistry;

    #[test]
    fn a_namespace_holds_its_share_and_the_process_its_cap() {
        let slots = MirrorSlots::new(5, 2);
        let a: Vec<_> = (0..2).map(|_| slots.take("a").unwrap()).collect();
        assert_eq!(slots.take("a").unwrap_err(), Full::Namespace);
        let b: Vec<_> = (0..2).map(|_| slots.take("b").unwrap()).collect();
        let c = slots.take("c").unwrap();
        assert_eq!(slots.take("d").unwrap_err(), Full::Process);
        drop(c);
        assert_eq!(slots.held_by("c"), 0);
        let d = slots.take("d").unwrap();
        drop(a);
        assert_eq!(slots.held_by("a"), 0, "given back when the mirrors end");
        assert!(slots.take("a").is_ok());
        drop((b, d));
        assert_eq!(slots.held.lock().total, 0);
        assert!(slots.held.lock().by_namespace.is_empty());
    }

    fn mirror_to(namespace: &str, addr: std::net::SocketAddr) -> Mirror {
        let registry = EndpointRegistry::default();
        Mirror {
            upstream: Arc::new(Upstream::new(
                format!("{namespace}/shadow:80"),
                vec![registry.endpoint(addr)],
                None,
            )),
            per_million: 1_000_000,
        }
    }

    fn dropped_count(dropped: &prometheus::IntCounterVec, ns: &str, reason: Full) -> u64 {
        dropped.with_label_values(&[ns, reason.label()]).get()
    }

    /// Tenant A's mirror backend accepts and never answers: A's mirrors
    /// hold every slot they get, for the whole timeout. Tenant B's mirror
    /// still goes out. (With one process-wide cap, A's first 256 mirrors
    /// took every slot and B's was dropped.)
    #[tokio::test]
    async fn a_silent_mirror_backend_starves_its_own_tenant_only() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent_addr = silent.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = silent.accept().await {
                held.push(conn);
            }
        });
        let answering = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dropped = prometheus::IntCounterVec::new(
            prometheus::Opts::new("mirror_dropped_total", "test"),
            &["namespace", "reason"],
        )
        .unwrap();
        let a = mirror_to("mirror-test-a", silent_addr);
        for _ in 0..MAX_MIRRORS_IN_FLIGHT {
            mirror(&a, "GET", "/a", "a.example", std::iter::empty(), &dropped);
        }
        assert_eq!(SLOTS.held_by("mirror-test-a"), MAX_MIRRORS_PER_NAMESPACE);
        assert_eq!(
            dropped_count(&dropped, "mirror-test-a", Full::Namespace),
            (MAX_MIRRORS_IN_FLIGHT - MAX_MIRRORS_PER_NAMESPACE) as u64
        );
        let b = mirror_to("mirror-test-b", answering.local_addr().unwrap());
        mirror(&b, "GET", "/b", "b.example", std::iter::empty(), &dropped);
        for reason in [Full::Namespace, Full::Process] {
            assert_eq!(dropped_count(&dropped, "mirror-test-b", reason), 0);
        }
        let (mut conn, _) = answering.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut buf = [0u8; 512];
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "the mirror closed before its head");
            head.extend_from_slice(&buf[..n]);
        }
        assert!(head.starts_with(b"GET /b HTTP/1.1\r\n"), "{head:?}");
    }
}
