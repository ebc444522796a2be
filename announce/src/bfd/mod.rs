//! BFD, the part an announce-only speaker needs: asynchronous mode over a
//! single IP hop (RFC 5880, RFC 5881), one session per BGP peer configured
//! with `bfd=INTERVALxMULT`.
//!
//! The point is the router's side: its BFD daemon hears from the replica
//! every interval, and a replica that freezes or loses its link goes
//! silent, so the router tears the BGP session down after `MULT` missed
//! packets instead of waiting for the hold timer (3 s at the shortest).
//! Our side's detection resets the BGP session when the router is gone.
//!
//! No authentication, no demand mode, no echo function: a replica that
//! needs them runs a BFD daemon. Packets come in on one socket per address
//! family bound to port 3784 ([`Listener`]), shared by every session of a
//! speaker and sorted by source address; each session sends from its own
//! socket bound to a port in 49152-65535, with TTL 255, and only packets
//! that arrive with TTL 255 are taken (GTSM, RFC 5881 5): anything from
//! beyond the link is dropped.
//!
//! Layout:
//! - [`packet`]: the control packet (RFC 5880 4.1), encoded and decoded
//!   with the checks of 6.8.6.
//! - [`session`]: one session's state machine (RFC 5880 6.2, 6.8), fed
//!   packets and the time, with no sockets or clocks of its own.
//! - [`socket`]: the sockets and the thread: the shared [`Listener`] on
//!   port 3784, a session's sending socket, and [`start`], which runs a
//!   [`Machine`] against them.
//! - this file: the settings and what a session looks like from outside
//!   ([`State`], [`Timing`], [`BfdStatus`]).

use std::time::Duration;

pub mod packet;
pub mod session;
pub mod socket;

pub use packet::{ControlPacket, PACKET_LEN, diag};
pub use session::{Machine, Received, SLOW_TX, jittered};
pub use socket::{Handle, Listener, Registration, local_address_towards, start};

/// Where BFD control packets go (RFC 5881 4).
pub const CONTROL_PORT: u16 = 3784;
/// Source ports of control packets (RFC 5881 4).
pub const SOURCE_PORTS: std::ops::RangeInclusive<u16> = 49152..=65535;
/// Sent on every packet and required on every packet taken (RFC 5881 5).
pub const TTL: u8 = 255;
/// Shortest interval accepted in `bfd=`: FRR's floor too; below it a
/// loaded replica would miss its own packets.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// A session's state (RFC 5880 4.1, 6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum State {
    AdminDown,
    #[default]
    Down,
    Init,
    Up,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::AdminDown => "AdminDown",
            State::Down => "Down",
            State::Init => "Init",
            State::Up => "Up",
        }
    }

    fn bits(self) -> u8 {
        match self {
            State::AdminDown => 0,
            State::Down => 1,
            State::Init => 2,
            State::Up => 3,
        }
    }

    fn from_bits(bits: u8) -> State {
        match bits & 3 {
            0 => State::AdminDown,
            1 => State::Down,
            2 => State::Init,
            _ => State::Up,
        }
    }
}

/// A BFD session's timing as configured: `bfd=100x3` is a packet every
/// 100 ms wanted both ways, and the session down after 3 missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub interval: Duration,
    pub multiplier: u8,
}

impl Timing {
    /// The time without a packet after which the session is down, when
    /// both sides use this timing.
    pub fn detection_time(&self) -> Duration {
        self.interval * self.multiplier as u32
    }

    /// `INTERVALxMULT`, the interval in milliseconds (`100x3`); the error
    /// says what was expected, for the caller to name its setting.
    pub fn parse(value: &str) -> Result<Timing, String> {
        let err = || {
            format!(
                "`{value}` is not INTERVALxMULTIPLIER (milliseconds x missed packets, e.g. 100x3)"
            )
        };
        let (interval, multiplier) = value.split_once('x').ok_or_else(err)?;
        let timing = Timing {
            interval: Duration::from_millis(interval.parse().map_err(|_| err())?),
            multiplier: multiplier.parse().map_err(|_| err())?,
        };
        timing.check()?;
        Ok(timing)
    }

    /// Whether the timing is one a session can run with: the interval
    /// within [`MIN_INTERVAL`] and [`MAX_INTERVAL`], a multiplier above 0.
    pub fn check(&self) -> Result<(), String> {
        if self.interval < MIN_INTERVAL {
            return Err(format!(
                "an interval of {:?} is below the {MIN_INTERVAL:?} minimum",
                self.interval
            ));
        }
        if self.interval > MAX_INTERVAL {
            return Err(format!(
                "an interval of {:?} is above {MAX_INTERVAL:?}: the hold timer or the Lease detects that",
                self.interval
            ));
        }
        if self.multiplier == 0 {
            return Err("a multiplier of 0 detects nothing".into());
        }
        Ok(())
    }
}

/// Above this, BFD detects nothing a BGP hold timer or an announcer
/// Lease would not.
pub const MAX_INTERVAL: Duration = Duration::from_secs(10);

/// What a BFD session looks like from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BfdStatus {
    pub state: State,
    /// Why the session last went down (RFC 5880 diagnostic).
    pub diag: u8,
    /// Up to Down for a reason other than the remote's AdminDown: the
    /// router is gone, and the BGP session with it.
    pub failures: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMING: Timing = Timing {
        interval: Duration::from_millis(100),
        multiplier: 3,
    };

    #[test]
    fn timing_parses_and_refuses_with_the_reason() {
        assert_eq!(Timing::parse("100x3"), Ok(TIMING));
        for (bad, says) in [
            ("fastx3", "INTERVALxMULTIPLIER"),
            ("100", "INTERVALxMULTIPLIER"),
            ("100x300", "INTERVALxMULTIPLIER"),
            ("5x3", "minimum"),
            ("20000x3", "above"),
            ("100x0", "detects nothing"),
        ] {
            let e = Timing::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
