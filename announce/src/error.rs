//! The crate's error type, below every module that returns it.

use crate::wire::notification::{Notification, code};

/// Everything that can go wrong configuring or running a BGP session.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{setting}: {reason}")]
    Config { setting: String, reason: String },
    #[error("malformed BGP message from the peer: {0}")]
    Malformed(String),
    #[error("BGP protocol error: {0}")]
    Protocol(String),
    #[error("peer sent NOTIFICATION {0}")]
    Notification(Notification),
    #[error("peer's OPEN says AS {got}, configured remote ASN is {configured}")]
    WrongPeerAsn { got: u32, configured: u32 },
    #[error("hold timer expired: nothing heard from the peer for {0:?}")]
    HoldTimerExpired(std::time::Duration),
    #[error("the peer closed the connection")]
    Closed,
    #[error("timed out {0}")]
    Timeout(&'static str),
    #[error("{0}: {1}")]
    Io(&'static str, #[source] std::io::Error),
    #[error("netlink: {0}")]
    Netlink(String),
    #[error("malformed BFD packet: {0}")]
    BfdPacket(String),
    #[error("BFD session down: {0}")]
    BfdDown(&'static str),
}

impl Error {
    /// The `reason` label of `teapot_bgp_session_failures_total`: few
    /// values, stable across releases, one per thing an operator fixes
    /// differently.
    pub fn failure_reason(&self) -> &'static str {
        match self {
            Error::Config { .. } => "config",
            Error::Malformed(_) | Error::Protocol(_) | Error::BfdPacket(_) => "protocol",
            Error::Notification(n) => match n.code {
                code::OPEN_MESSAGE => "refused_open",
                code::CEASE => "cease",
                code::HOLD_TIMER_EXPIRED => "peer_hold_timer",
                _ => "notification",
            },
            Error::WrongPeerAsn { .. } => "wrong_peer_asn",
            Error::HoldTimerExpired(_) => "hold_timer",
            Error::Closed => "closed",
            Error::Timeout(_) => "timeout",
            Error::Io("connecting", _) => "connect",
            Error::Io(..) | Error::Netlink(_) => "io",
            Error::BfdDown(_) => "bfd_down",
        }
    }
}
