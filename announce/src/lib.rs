//! Makes the fleet's addresses reachable: a BGP speaker that announces a
//! watched set of addresses as host routes (/32, /128) with this host as
//! the next hop, so routers send the traffic here and spread it across
//! replicas by ECMP; or, on a plain L2 segment, one owner per address
//! that puts it on an interface and announces it with gratuitous ARP /
//! unsolicited neighbour advertisements.
//!
//! Announce-only by design: received UPDATEs are framed and dropped
//! unread, and only addresses of the set are ever announced. Sessions
//! reconnect with backoff; a stop first re-announces everything with the
//! GRACEFUL_SHUTDOWN community (RFC 8326), so routers move new flows to
//! the other replicas before the withdrawal. No Pingora, no kube: the
//! crate builds in seconds and runs beside any serving code.
//!
//! # Use
//!
//! ```no_run
//! use teapot_announce::{Announcer, PeerConfig, Speaker, SpeakerConfig};
//!
//! # async fn demo() -> Result<(), teapot_announce::Error> {
//! let peer: PeerConfig = "192.0.2.1,64500,hold=3,keepalive=1".parse()?;
//! let speaker = Speaker::start(SpeakerConfig::new(64501, vec![peer]), Default::default())?;
//! speaker.set_addresses(["203.0.113.10".parse().unwrap()].into());
//! // ... serve; on SIGTERM:
//! speaker.stop().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! - [`announcer`]: the [`Announcer`] trait both modes implement (set
//!   the addresses, read what is held, stop), and [`Mode`].
//! - [`wire`]: the BGP messages (RFC 4271, 4760, 6793, 8326), encoded and
//!   decoded, with tests against hand-assembled byte vectors.
//! - [`peer`]: a neighbour's settings (parsed from `ADDR,ASN[,key=value]`)
//!   and its [`PeerStatus`].
//! - [`session`]: the per-peer task: connect, OPEN, keepalives and hold
//!   timer, announce/withdraw on change, backoff, the graceful stop.
//! - [`speaker`]: [`Speaker`] starts the tasks, exposes their status and
//!   stops them together.
//! - [`bfd`]: BFD (RFC 5880, 5881), asynchronous mode over one hop: the
//!   control packet, the state machine, and a session per peer with
//!   `bfd=INTERVALxMULT`, so a router notices a silent replica in
//!   milliseconds rather than at the hold timer.
//! - [`md5`]: TCP-MD5 signatures (RFC 2385) on a session's socket, for
//!   peers with `password-file=`; the crate's only unsafe code.
//! - [`l2`]: layer-2 mode: the owner of each address (a rendezvous hash
//!   over the live replicas) puts it on an interface and sends gratuitous
//!   ARP / unsolicited neighbour advertisements.
//! - `error`: [`Error`], every way configuring or running a session
//!   fails, below the modules that return it.
//! - [`escape`]: peer- and client-chosen text escaped and bounded for a
//!   log line (a NOTIFICATION's shutdown communication here; the proxy
//!   uses it too).

pub mod announcer;
pub mod bfd;
mod error;
pub mod escape;
pub mod l2;
pub mod md5;
pub mod peer;
pub mod session;
pub mod speaker;
pub mod wire;

pub use announcer::{Announcer, Held, Mode};
pub use error::Error;
pub use peer::{PeerConfig, PeerStatus, SessionState};
pub use speaker::{Speaker, SpeakerConfig, Statuses};
