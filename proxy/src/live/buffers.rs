//! The replica's budget of bytes held in request and response bodies
//! (`proxy-request-buffering`, `proxy-buffering`, read by the compile).
//!
//! Each request on such a route asks for its bytes before its backend is
//! contacted: what the request body can hold (its `Content-Length`, or
//! the route's bound for a chunked one) and the response's read-ahead.
//! The grant is what is left of the asker's share and of the replica's
//! budget, whichever is less; whatever is not granted is streamed, as on
//! a route without buffering. The bytes go back when the request ends.
//!
//! `--request-buffer-budget` (default [`DEFAULT_BUDGET`]) is the
//! replica's; a tenant holds at most [`TENANT_SHARE`] of it (counted on
//! its gate, crate::live::fairness), the fleet's own routes together one
//! share as well, so one tenant's slow uploads can spend its share and
//! never the others'.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::live::fairness::TenantGate;

/// 64 MiB: 64 requests holding 1 MiB each, or 4096 holding
/// ingress-nginx's default 16 KiB of response buffers.
pub const DEFAULT_BUDGET: u64 = 64 << 20;

/// The part of the budget one owner may hold: a quarter.
pub const TENANT_SHARE: u64 = 4;

/// A budget and what is held of it.
#[derive(Debug)]
pub struct Budget {
    total: AtomicU64,
    used: AtomicU64,
    /// What the fleet's own routes (no tenant) hold.
    fleet: AtomicU64,
}

static GLOBAL: Budget = Budget::new(DEFAULT_BUDGET);

/// Takes up to `want` of what `counter` may still hold under `cap`;
/// returns what it took.
fn take(counter: &AtomicU64, cap: u64, want: u64) -> u64 {
    let mut got = 0;
    let _ = counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
        got = want.min(cap.saturating_sub(held));
        (got > 0).then_some(held + got)
    });
    got
}

impl Budget {
    pub const fn new(total: u64) -> Budget {
        Budget {
            total: AtomicU64::new(total),
            used: AtomicU64::new(0),
            fleet: AtomicU64::new(0),
        }
    }

    /// The replica's budget.
    pub fn global() -> &'static Budget {
        &GLOBAL
    }

    /// Sets the budget's total (`--request-buffer-budget`); what is held
    /// stays held.
    pub fn set_total(&self, bytes: u64) {
        self.total.store(bytes, Ordering::Relaxed);
    }

    /// Up to `want` bytes for a request of `tenant` (`None`: a route of
    /// the fleet's own); `None` when nothing is left to grant.
    pub fn grant(&'static self, tenant: Option<&Arc<TenantGate>>, want: u64) -> Option<Held> {
        if want == 0 {
            return None;
        }
        let total = self.total.load(Ordering::Relaxed);
        let share = total / TENANT_SHARE;
        let owner = match tenant {
            Some(gate) => Owner::Tenant(gate.clone()),
            None => Owner::Fleet,
        };
        let counter = owner.counter(self);
        let mine = take(counter, share, want);
        if mine == 0 {
            return None;
        }
        let got = take(&self.used, total, mine);
        if got < mine {
            counter.fetch_sub(mine - got, Ordering::AcqRel);
        }
        (got > 0).then_some(Held {
            budget: self,
            owner,
            bytes: got,
        })
    }

    /// Bytes held now, in all.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
}

#[derive(Debug)]
enum Owner {
    Tenant(Arc<TenantGate>),
    Fleet,
}

impl Owner {
    fn counter<'a>(&'a self, budget: &'a Budget) -> &'a AtomicU64 {
        match self {
            Owner::Tenant(gate) => &gate.buffered,
            Owner::Fleet => &budget.fleet,
        }
    }
}

/// Bytes granted to one request; given back when dropped.
#[derive(Debug)]
pub struct Held {
    budget: &'static Budget,
    owner: Owner,
    bytes: u64,
}

impl Held {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.owner
            .counter(self.budget)
            .fetch_sub(self.bytes, Ordering::AcqRel);
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// The grant of one request on a buffering route, from the route's
/// bounds (`asked`: request body bytes, response read-ahead bytes) and
/// the request body's framing; zeros for what was not granted.
pub fn grant(
    budget: &'static Budget,
    asked: (u32, u32),
    tenant: Option<&Arc<TenantGate>>,
    body: teapot_h1::BodyFraming,
) -> (teapot_h1::Buffering, Option<Held>) {
    use teapot_h1::BodyFraming;
    let request = match body {
        BodyFraming::Length(n) => n.min(u64::from(asked.0)),
        BodyFraming::Chunked => u64::from(asked.0),
        BodyFraming::None | BodyFraming::Close => 0,
    };
    let want = request + u64::from(asked.1);
    let Some(held) = budget.grant(tenant, want) else {
        return (teapot_h1::Buffering::default(), None);
    };
    // A part grant goes to the request body first: it is what keeps a
    // slow client off the backend.
    let request_got = held.bytes.min(request);
    let granted = teapot_h1::Buffering {
        request: request_got as usize,
        response: (held.bytes - request_got) as usize,
    };
    (granted, Some(held))
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_api::tenant::TenantLimits;

    fn gate(name: &str) -> Arc<TenantGate> {
        let gates = crate::live::fairness::TenantGates::default();
        gates.gate(name, &TenantLimits::effective(None))
    }

    fn budget(total: u64) -> &'static Budget {
        Box::leak(Box::new(Budget::new(total)))
    }

    /// One tenant that spends its share (slow uploads, each holding its
    /// bound) is granted nothing more, while another tenant and the
    /// fleet's routes are granted in full.
    #[test]
    fn one_tenants_spent_share_leaves_the_others_theirs() {
        let b = budget(4 << 20);
        let (flood, other) = (gate("flood"), gate("other"));
        let mut held = Vec::new();
        while let Some(h) = b.grant(Some(&flood), 300 << 10) {
            held.push(h);
        }
        assert_eq!(flood.buffered.load(Ordering::Acquire), 1 << 20, "a quarter");
        assert!(b.grant(Some(&flood), 1).is_none());
        let theirs = b
            .grant(Some(&other), 1 << 20)
            .expect("another tenant's share");
        assert_eq!(theirs.bytes(), 1 << 20);
        let fleet = b.grant(None, 512 << 10).expect("the fleet's routes' share");
        assert_eq!(fleet.bytes(), 512 << 10);
        drop((theirs, fleet));
        drop(held);
        assert_eq!(b.used(), 0);
        assert_eq!(flood.buffered.load(Ordering::Acquire), 0);
        assert_eq!(b.grant(Some(&flood), 1 << 20).unwrap().bytes(), 1 << 20);
    }

    /// Shares add up past the total (four tenants and the fleet): the
    /// replica's total still bounds them, a part grant given back whole.
    #[test]
    fn the_total_bounds_every_share_together() {
        let b = budget(1 << 20);
        let gates: Vec<_> = (0..5).map(|i| gate(&format!("t{i}"))).collect();
        let held: Vec<_> = gates
            .iter()
            .filter_map(|g| b.grant(Some(g), 256 << 10))
            .collect();
        assert_eq!(held.len(), 4);
        assert_eq!(b.used(), 1 << 20);
        assert!(b.grant(None, 1).is_none());
        assert_eq!(gates[4].buffered.load(Ordering::Acquire), 0);
    }

    /// A request body's bytes come first; a bodiless request asks for
    /// the response's only, a chunked one for the route's bound.
    #[test]
    fn a_requests_grant_follows_its_body() {
        use teapot_h1::BodyFraming;
        let b = budget(64 << 20);
        let asked = (64 << 10, 16 << 10);
        let (g, held) = grant(b, asked, None, BodyFraming::Length(100));
        assert_eq!((g.request, g.response), (100, 16 << 10));
        assert_eq!(held.unwrap().bytes(), 100 + (16 << 10));
        let (g, _held) = grant(b, asked, None, BodyFraming::Chunked);
        assert_eq!((g.request, g.response), (64 << 10, 16 << 10));
        let (g, _held) = grant(b, asked, None, BodyFraming::None);
        assert_eq!((g.request, g.response), (0, 16 << 10));
        // A hostile Content-Length asks for no more than the bound.
        let (g, _held) = grant(b, asked, None, BodyFraming::Length(u64::MAX));
        assert_eq!(g.request, 64 << 10);
        let small = budget(4 * (20 << 10));
        let (g, _held) = grant(small, asked, None, BodyFraming::Chunked);
        assert_eq!((g.request, g.response), (20 << 10, 0), "the body first");
    }
}
