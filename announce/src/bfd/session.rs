//! One BFD session's state machine (RFC 5880 6.2, 6.8): packets and the
//! time in, the state and the next packet out, without sockets or clocks,
//! so every transition is tested with made-up times.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::packet::{ControlPacket, diag};
use super::{State, Timing};

/// RFC 5880 6.8.3: while the session is not Up, transmit no faster than
/// once a second.
pub const SLOW_TX: Duration = Duration::from_secs(1);

/// What a received packet did to the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Taken; `Some` when the state changed.
    Taken(Option<State>),
    /// Not for this BFD session (its Your Discriminator is another's), or the
    /// session is administratively down.
    Discarded,
}

/// One session's state machine (RFC 5880 6.2, 6.8), without sockets or
/// clocks: the caller feeds it packets and the time.
#[derive(Debug, Clone)]
pub struct Machine {
    state: State,
    local_diag: u8,
    local_discriminator: u32,
    remote_discriminator: u32,
    remote_state: State,
    pub(super) timing: Timing,
    /// The remote's Required Min RX; 1 µs until heard (RFC 5880 6.8.1),
    /// so the first packets go out at our own pace.
    remote_min_rx: Duration,
    remote_desired_min_tx: Duration,
    remote_detect_mult: u8,
    /// A Poll Sequence runs: our timers changed and the remote has not
    /// answered with Final yet (RFC 5880 6.5).
    polling: bool,
    /// The remote polled: the next packet carries Final, at once.
    final_due: bool,
    last_heard: Option<Instant>,
}

impl Machine {
    pub fn new(local_discriminator: u32, timing: Timing) -> Machine {
        Machine {
            state: State::Down,
            local_diag: diag::NONE,
            local_discriminator,
            remote_discriminator: 0,
            remote_state: State::Down,
            timing,
            remote_min_rx: Duration::from_micros(1),
            remote_desired_min_tx: Duration::ZERO,
            remote_detect_mult: 0,
            polling: false,
            final_due: false,
            last_heard: None,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// Why the session last left Up (or went AdminDown).
    pub fn diag(&self) -> u8 {
        self.local_diag
    }

    pub fn remote_state(&self) -> State {
        self.remote_state
    }

    pub fn remote_discriminator(&self) -> u32 {
        self.remote_discriminator
    }

    /// A packet with Final is owed to the remote's Poll.
    pub fn final_due(&self) -> bool {
        self.final_due
    }

    /// Desired Min TX as advertised: the configured interval while Up,
    /// at least a second otherwise (RFC 5880 6.8.3).
    pub fn desired_min_tx(&self) -> Duration {
        if self.state == State::Up {
            self.timing.interval
        } else {
            self.timing.interval.max(SLOW_TX)
        }
    }

    /// Time between our packets before jitter: the slower of what we want
    /// to send and what the remote wants to receive (RFC 5880 6.8.7).
    /// `None` when the remote asked for no packets (Required Min RX 0).
    pub fn tx_interval(&self) -> Option<Duration> {
        (!self.remote_min_rx.is_zero()).then(|| self.desired_min_tx().max(self.remote_min_rx))
    }

    /// RFC 5880 6.8.4, asynchronous mode: the remote's multiplier times
    /// the slower of its sending and our receiving.
    pub fn detection_time(&self) -> Duration {
        self.timing.interval.max(self.remote_desired_min_tx) * self.remote_detect_mult as u32
    }

    /// When silence from the remote means something: it takes the session
    /// Down from Init or Up, and forgets the remote's discriminator in
    /// Down (RFC 5880 6.8.1).
    pub fn detect_deadline(&self) -> Option<Instant> {
        let heard = self.last_heard?;
        (self.state != State::AdminDown && self.remote_discriminator != 0)
            .then(|| heard + self.detection_time())
    }

    /// The next packet to send. A Final owed is paid with it, and it
    /// carries Poll while a Poll Sequence runs (never both, RFC 5880 4.1).
    pub fn packet(&mut self) -> ControlPacket {
        let final_ = std::mem::take(&mut self.final_due);
        ControlPacket {
            diag: self.local_diag,
            state: self.state,
            poll: self.polling && !final_,
            final_,
            control_plane_independent: false,
            demand: false,
            detect_mult: self.timing.multiplier,
            my_discriminator: self.local_discriminator,
            your_discriminator: self.remote_discriminator,
            desired_min_tx: self.desired_min_tx(),
            required_min_rx: self.timing.interval,
            required_min_echo_rx: Duration::ZERO,
        }
    }

    fn set_state(&mut self, state: State, diag: u8) -> Option<State> {
        if state == self.state {
            return None;
        }
        let slow_before = self.desired_min_tx();
        self.state = state;
        self.local_diag = diag;
        // Desired Min TX follows Up (6.8.3): a change starts a Poll
        // Sequence so the remote recomputes its detection time.
        if self.desired_min_tx() != slow_before {
            self.polling = true;
        }
        Some(state)
    }

    /// RFC 5880 6.8.6 for a packet [`ControlPacket::decode`] accepted.
    pub fn receive(&mut self, packet: &ControlPacket, now: Instant) -> Received {
        if packet.your_discriminator != 0 && packet.your_discriminator != self.local_discriminator {
            return Received::Discarded;
        }
        if self.state == State::AdminDown {
            return Received::Discarded;
        }
        self.remote_discriminator = packet.my_discriminator;
        self.remote_state = packet.state;
        self.remote_min_rx = packet.required_min_rx;
        self.remote_desired_min_tx = packet.desired_min_tx;
        self.remote_detect_mult = packet.detect_mult;
        self.last_heard = Some(now);
        if packet.final_ {
            self.polling = false;
        }
        if packet.poll {
            self.final_due = true;
        }
        let changed = if packet.state == State::AdminDown {
            if self.state != State::Down {
                self.set_state(State::Down, diag::NEIGHBOR_SIGNALED_DOWN)
            } else {
                None
            }
        } else {
            match (self.state, packet.state) {
                (State::Down, State::Down) => self.set_state(State::Init, diag::NONE),
                (State::Down, State::Init) | (State::Init, State::Init | State::Up) => {
                    self.set_state(State::Up, diag::NONE)
                }
                (State::Up, State::Down) => {
                    self.set_state(State::Down, diag::NEIGHBOR_SIGNALED_DOWN)
                }
                _ => None,
            }
        };
        Received::Taken(changed)
    }

    /// The detection time passed without a packet: `Some(Down)` when that
    /// took the session down.
    pub fn expire(&mut self) -> Option<State> {
        self.remote_discriminator = 0;
        self.last_heard = None;
        match self.state {
            State::Init | State::Up => self.set_state(State::Down, diag::DETECTION_TIME_EXPIRED),
            _ => None,
        }
    }

    /// The local system takes the session down on purpose (a graceful
    /// stop): the remote learns it is no failure (RFC 5880 6.8.16).
    pub fn admin_down(&mut self) {
        self.set_state(State::AdminDown, diag::ADMINISTRATIVELY_DOWN);
    }
}

/// RFC 5880 6.8.7: each interval reduced by a random 0-25 % so sessions
/// do not synchronise, to 75-90 % with a multiplier of 1 so one late
/// packet cannot miss the remote's detection time.
pub fn jittered(interval: Duration, detect_mult: u8, rng: &mut impl Rng) -> Duration {
    let percent = if detect_mult == 1 {
        rng.random_range(75..=90)
    } else {
        rng.random_range(75..=100)
    };
    interval * percent / 100
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMING: Timing = Timing {
        interval: Duration::from_millis(100),
        multiplier: 3,
    };

    fn from_remote(state: State, your: u32) -> ControlPacket {
        ControlPacket {
            diag: 0,
            state,
            poll: false,
            final_: false,
            control_plane_independent: false,
            demand: false,
            detect_mult: 3,
            my_discriminator: 42,
            your_discriminator: your,
            desired_min_tx: Duration::from_millis(300),
            required_min_rx: Duration::from_millis(200),
            required_min_echo_rx: Duration::ZERO,
        }
    }

    /// A session (discriminator 7) brought Up by a remote (42).
    fn up(now: Instant) -> Machine {
        let mut m = Machine::new(7, TIMING);
        m.receive(&from_remote(State::Down, 0), now);
        m.receive(&from_remote(State::Up, 7), now);
        m
    }

    #[test]
    fn three_way_handshake_and_the_slower_side_wins() {
        let now = Instant::now();
        let mut m = Machine::new(7, TIMING);
        // Not Up: no faster than a second, whatever is configured.
        let first = m.packet();
        assert_eq!((first.state, first.your_discriminator), (State::Down, 0));
        assert_eq!(first.desired_min_tx, SLOW_TX);
        assert_eq!(first.required_min_rx, Duration::from_millis(100));
        assert_eq!(m.tx_interval(), Some(SLOW_TX));

        assert_eq!(
            m.receive(&from_remote(State::Down, 0), now),
            Received::Taken(Some(State::Init))
        );
        assert_eq!(m.packet().your_discriminator, 42);
        assert_eq!(
            m.receive(&from_remote(State::Up, 7), now),
            Received::Taken(Some(State::Up))
        );
        // Up: our 100 ms against the remote's 200 ms Required Min RX.
        assert_eq!(m.tx_interval(), Some(Duration::from_millis(200)));
        // Detection: its multiplier 3 times the slower of its 300 ms TX
        // and our 100 ms RX.
        assert_eq!(m.detection_time(), Duration::from_millis(900));
        assert_eq!(m.detect_deadline(), Some(now + Duration::from_millis(900)));
        // Our Desired Min TX dropped to 100 ms: a Poll Sequence tells the
        // remote, until its Final.
        let polled = m.packet();
        assert!(polled.poll);
        assert_eq!(polled.desired_min_tx, Duration::from_millis(100));
        let mut fin = from_remote(State::Up, 7);
        fin.final_ = true;
        m.receive(&fin, now);
        assert!(!m.packet().poll);
    }

    #[test]
    fn a_poll_is_answered_with_final_and_without_poll() {
        let now = Instant::now();
        let mut m = up(now);
        assert!(m.packet().poll, "our own poll sequence runs");
        let mut poll = from_remote(State::Up, 7);
        poll.poll = true;
        m.receive(&poll, now);
        assert!(m.final_due());
        let answer = m.packet();
        assert!(answer.final_ && !answer.poll);
        assert!(!m.final_due());
    }

    #[test]
    fn from_init_the_remote_up_or_init_brings_the_session_up() {
        let now = Instant::now();
        let mut m = Machine::new(7, TIMING);
        m.receive(&from_remote(State::Down, 0), now);
        assert_eq!(
            m.receive(&from_remote(State::Init, 7), now),
            Received::Taken(Some(State::Up))
        );
        let mut n = Machine::new(8, TIMING);
        assert_eq!(
            n.receive(&from_remote(State::Init, 8), now),
            Received::Taken(Some(State::Up)),
            "Down and the remote in Init: Up"
        );
        assert_eq!(
            n.receive(&from_remote(State::Init, 8), now),
            Received::Taken(None)
        );
    }

    #[test]
    fn silence_for_the_detection_time_takes_the_session_down() {
        let now = Instant::now();
        let mut m = up(now);
        assert_eq!(m.expire(), Some(State::Down));
        assert_eq!(m.diag(), diag::DETECTION_TIME_EXPIRED);
        let p = m.packet();
        assert_eq!((p.state, p.your_discriminator), (State::Down, 0));
        assert_eq!(p.desired_min_tx, SLOW_TX, "back to the slow rate");
        assert_eq!(m.detect_deadline(), None, "nothing more to detect");
        assert_eq!(m.expire(), None);
    }

    #[test]
    fn the_remote_going_down_or_admin_down_takes_the_session_down() {
        let now = Instant::now();
        let mut m = up(now);
        assert_eq!(
            m.receive(&from_remote(State::Down, 7), now),
            Received::Taken(Some(State::Down))
        );
        assert_eq!(m.diag(), diag::NEIGHBOR_SIGNALED_DOWN);

        let mut m = up(now);
        assert_eq!(
            m.receive(&from_remote(State::AdminDown, 7), now),
            Received::Taken(Some(State::Down))
        );
        assert_eq!(m.remote_state(), State::AdminDown);
        // Down stays Down while the remote is AdminDown.
        assert_eq!(
            m.receive(&from_remote(State::AdminDown, 7), now),
            Received::Taken(None)
        );
    }

    #[test]
    fn other_sessions_packets_and_admin_down_are_not_taken() {
        let now = Instant::now();
        let mut m = Machine::new(7, TIMING);
        assert_eq!(
            m.receive(&from_remote(State::Up, 8), now),
            Received::Discarded
        );
        m.admin_down();
        let p = m.packet();
        assert_eq!(
            (p.state, p.diag),
            (State::AdminDown, diag::ADMINISTRATIVELY_DOWN)
        );
        assert_eq!(
            m.receive(&from_remote(State::Down, 0), now),
            Received::Discarded
        );
    }

    #[test]
    fn a_remote_asking_for_no_packets_gets_none() {
        let mut m = Machine::new(7, TIMING);
        let mut quiet = from_remote(State::Down, 0);
        quiet.required_min_rx = Duration::ZERO;
        m.receive(&quiet, Instant::now());
        assert_eq!(m.tx_interval(), None);
    }

    #[test]
    fn jitter_stays_within_rfc_5880_bounds() {
        let mut rng = rand::rng();
        let interval = Duration::from_millis(100);
        for _ in 0..1000 {
            let j = jittered(interval, 3, &mut rng);
            assert!(j >= Duration::from_millis(75) && j <= interval, "{j:?}");
            let j = jittered(interval, 1, &mut rng);
            assert!(
                j >= Duration::from_millis(75) && j <= Duration::from_millis(90),
                "{j:?}"
            );
        }
    }
}
