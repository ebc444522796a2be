//! One interface for every way of making addresses reachable, so that
//! whoever runs them (the proxy's announcement loop, the `teapot-announce`
//! binary) starts, feeds, reads and stops "the announcers" without asking
//! which mode each is:
//!
//! - [`crate::Speaker`] (BGP): every replica allowed to announces every
//!   address, as host routes to its routers.
//! - [`crate::l2::L2Announcer`] (L2): one owner per address among the live
//!   replicas puts it on an interface.
//!
//! What differs between the modes and matters to the caller is said by
//! [`Mode`] as properties ([`Mode::has_owner`]), not by matching it.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;

use tokio::sync::watch;

use crate::peer::PeerStatus;

/// How a pool's addresses are made reachable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    L2,
    Bgp,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::L2 => "l2",
            Mode::Bgp => "bgp",
        }
    }

    /// Whether each address has one owner among the live replicas (L2):
    /// a replica that cannot prove it is live (its Lease) lets go of its
    /// addresses, and one that stops hands them over first. Without an
    /// owner (BGP) every replica allowed announces every address and the
    /// routers spread the traffic.
    pub fn has_owner(self) -> bool {
        self == Mode::L2
    }
}

/// Who may own the addresses, as the caller judges liveness, and what
/// each replica says it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replicas {
    /// The live replicas: the hash's candidates.
    pub live: BTreeSet<String>,
    /// The addresses each replica lists as held now (its Lease), live or
    /// not. An address moves to a next owner found here only once that
    /// owner lists it (make-before-break; one not found here, as without
    /// Leases, is not waited for), and an address a Lease lists that this
    /// replica does not hold is cleared from the interface at start.
    pub listed: BTreeMap<String, BTreeSet<IpAddr>>,
}

impl Replicas {
    /// This replica alone (manifests mode).
    pub fn alone(replica: &str) -> Replicas {
        Replicas {
            live: [replica.to_string()].into(),
            listed: BTreeMap::new(),
        }
    }
}

/// What an announcer holds now, the same shape for every mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// The addresses it holds as their one owner (empty in a mode without
    /// owners).
    pub owned: BTreeSet<IpAddr>,
    /// Announcements sent on the link (gratuitous ARPs, neighbour
    /// advertisements); a mode with sessions counts its own per session.
    pub announcements_sent: u64,
    /// Failed steps so far (`last_error` says the last).
    pub errors: u64,
    pub last_error: Option<String>,
}

/// A stop in progress: it resolves once the announcer has let go.
pub type Stopping = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A running announcer. Started by its own type's `start` (what each needs
/// to start differs: peers, an interface); everything after goes through
/// here.
pub trait Announcer: Send + Sync + std::fmt::Debug {
    fn mode(&self) -> Mode;

    /// The addresses to announce from now on: the new ones are announced,
    /// the ones left out withdrawn. Whether the set changed.
    fn set_addresses(&self, addrs: BTreeSet<IpAddr>) -> bool;

    /// The live replicas and what each lists as held: an owner mode moves
    /// addresses by them; a mode without owners has nothing to move.
    fn set_replicas(&self, _replicas: Replicas) {}

    /// Announce again what it holds: the others may have counted this
    /// replica gone meanwhile (its link was down) and a neighbour that
    /// followed them still sends elsewhere. A mode whose sessions
    /// re-announce on re-establishing has nothing to do.
    fn announce_again(&self) {}

    /// What it holds, following changes.
    fn held(&self) -> watch::Receiver<Held>;

    /// Its sessions with routers, one status per peer, for a mode that
    /// has them.
    fn sessions(&self) -> Option<Vec<watch::Receiver<PeerStatus>>> {
        None
    }

    /// Lets go: BGP's graceful stop (GRACEFUL_SHUTDOWN, a wait, the
    /// withdrawal), L2's removal of every owned address.
    fn stop(self: Box<Self>) -> Stopping;
}
