//! Makes this replica's addresses reachable (docs/announce.md): the
//! fleet's own addresses and every allocated L4 address, each by the pool
//! containing it, in that pool's mode (a BGP speaker, an L2 owner per
//! address), and tells the status writer and the operator what is
//! announced where.
//!
//! Layout:
//! - [`config`]: what the announcement is told at start (the pools, the
//!   fleet's addresses, L2 timing) and which addresses this replica
//!   announces now ([`config::wanted`]).
//! - [`pools`]: the `--announce-pool`s: each address goes by the one
//!   pool containing it, in its mode, from the replicas the pool allows.
//! - [`driver`]: [`driver::Announcer`] starts what each pool needs, the
//!   membership and the follow loop, and stops them in order (BGP's
//!   graceful stop beside L2's hand-over).
//! - [`follow`]: the loop that follows readiness, the snapshot, the
//!   Leases and BFD, and hands each announcer its addresses.
//! - [`view`]: `/status` and `/metrics` of the announcement.
//! - [`membership`]: which replicas are live, a Lease per replica (kube
//!   mode), and the hand-over of L2 addresses on shutdown.
//! - [`live_replicas`]: the view of which of them are live, from their
//!   Leases and BFD.
//! - [`peer_liveness`]: BFD between those replicas, so one that fails is
//!   counted gone before its Lease runs out.
//! - [`announced`]: whether an L4 address is announced, for the status
//!   writer's `Announced` condition.
//! - [`bgp_events`]: Events on this replica's Pod when a BGP session is
//!   lost or established, and the sessions carried on its Lease.

pub mod announced;
pub mod bgp_events;
pub mod config;
pub mod driver;
pub mod follow;
pub mod live_replicas;
pub mod membership;
pub mod peer_liveness;
pub mod pools;
pub mod view;
