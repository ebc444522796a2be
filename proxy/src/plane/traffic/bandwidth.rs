//! A route's bandwidth limit (`limit-rate`, `limit-rate-after`, or a
//! RouteTrafficPolicy's `bandwidth`; read by crate::compile::bandwidth)
//! on one response: the [`Pacer`] says how many of the body bytes ready
//! may go to the client now, or until when to wait. The engines ask it
//! before each write of the body (HTTP/1: the engine's write of what it
//! decoded, through `teapot_h1::Pacer`; HTTP/2: the stream's
//! `Responder::send_data`), and read the backend again only once what
//! they hold has gone, so the backend is read no faster than the client
//! is written to and a limited response holds no more than an unlimited
//! one (one read of the backend: 16 KiB, plus what the HTTP/1 engine
//! decoded of it or, on HTTP/2, the stream's window). Waiting is a timer,
//! never a spin; each wait is at most one quantum's time (at most a
//! second), and every write still has the fleet's client write timeout,
//! so a client that stops reading is dropped as on any route.
//!
//! The arithmetic: the first `after` bytes go at once; then every byte
//! costs `1/rate` seconds. `due` is the instant by which everything
//! granted so far is paid for: a request may send when `due` has passed,
//! at most a quantum (1/8 s of the rate, at least 1 KiB) at a time, and
//! `due` moves on by what it sent. Time the body spent not ready (a slow
//! backend, a client's window shut) earns credit for at most one quantum,
//! so a late wake-up costs no rate and an idle spell buys no burst past
//! it. A body of `n` bytes past `after` therefore takes at least
//! `(n - 2 quantum) / rate`: a quantum goes at once, another of credit at
//! most, and each later one waits its cost.

use std::time::{Duration, Instant};

use crate::compile::bandwidth::Bandwidth;

/// The smallest piece worth a wait: a second's worth at 1 KiB/s.
const MIN_QUANTUM: u64 = 1024;

/// One response's pace.
#[derive(Debug)]
pub struct Pacer {
    /// Bytes per second (at least 1024).
    rate: u64,
    /// Bytes still to send at full speed (`limit-rate-after`).
    free: u64,
    /// The most bytes one grant sends, and the credit an idle spell
    /// earns: 1/8 s of the rate, at least [`MIN_QUANTUM`].
    quantum: u64,
    /// By when everything granted so far is paid for; `None` before the
    /// first paced byte.
    due: Option<Instant>,
}

impl Pacer {
    pub fn new(limit: Bandwidth) -> Pacer {
        let rate = limit.rate.max(1);
        Pacer {
            rate,
            free: limit.after,
            quantum: (rate / 8).max(MIN_QUANTUM),
            due: None,
        }
    }

    /// How long `bytes` take at the rate.
    fn cost(&self, bytes: u64) -> Duration {
        let nanos = u128::from(bytes) * 1_000_000_000 / u128::from(self.rate);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Of `ready` body bytes, how many may be written at `now` (at least
    /// one when `ready` is not 0), or the instant to ask again.
    pub fn permit(&mut self, ready: usize, now: Instant) -> Result<usize, Instant> {
        let ready = ready as u64;
        if ready == 0 {
            return Ok(0);
        }
        if self.free > 0 {
            let n = ready.min(self.free);
            self.free -= n;
            return Ok(n as usize);
        }
        let credit = self.cost(self.quantum);
        let floor = now.checked_sub(credit).unwrap_or(now);
        let due = self.due.unwrap_or(now).max(floor);
        if due > now {
            self.due = Some(due);
            return Err(due);
        }
        let n = ready.min(self.quantum);
        self.due = Some(due + self.cost(n));
        Ok(n as usize)
    }
}

impl teapot_h1::Pacer for Pacer {
    fn permit(&mut self, ready: usize, now: Instant) -> Result<usize, Instant> {
        Pacer::permit(self, ready, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pacer(rate_kib: u32, after_kib: u32) -> Pacer {
        Pacer::new(Bandwidth::from_kib(rate_kib, after_kib).unwrap())
    }

    /// Sends `total` bytes, `ready` at a time, waking exactly when told:
    /// the time it took and how many waits.
    fn drain(p: &mut Pacer, total: usize, ready: usize, start: Instant) -> (Duration, u32) {
        let (mut now, mut left, mut waits) = (start, total, 0);
        while left > 0 {
            match p.permit(ready.min(left), now) {
                Ok(n) => {
                    assert!(n >= 1 && n <= ready.min(left), "{n}");
                    left -= n;
                }
                Err(until) => {
                    assert!(until > now, "a wait must be in the future");
                    assert!(until - now <= Duration::from_secs(1), "{:?}", until - now);
                    now = until;
                    waits += 1;
                }
            }
        }
        (now - start, waits)
    }

    #[test]
    fn a_body_takes_its_size_over_the_rate() {
        // 256 KiB at 64 KiB/s: 8 KiB quanta, the first at once.
        let (took, waits) = drain(&mut pacer(64, 0), 256 * 1024, 16 * 1024, Instant::now());
        assert_eq!(took, Duration::from_millis(31 * 125));
        assert_eq!(waits, 31);
    }

    #[test]
    fn the_first_bytes_after_go_at_once() {
        let mut p = pacer(64, 100);
        let start = Instant::now();
        // 100 KiB free, split at its end.
        assert_eq!(p.permit(64 * 1024, start), Ok(64 * 1024));
        assert_eq!(p.permit(64 * 1024, start), Ok(36 * 1024));
        // Then the pace: one quantum at once, the next after its cost.
        assert_eq!(p.permit(64 * 1024, start), Ok(8 * 1024));
        let next = p.permit(64 * 1024, start).unwrap_err();
        assert_eq!(next - start, Duration::from_millis(125));
        let (took, _) = drain(&mut pacer(64, 100), 356 * 1024, 16 * 1024, start);
        assert_eq!(took, Duration::from_millis(31 * 125));
    }

    #[test]
    fn low_rates_wait_at_most_a_second_per_kib() {
        let (took, waits) = drain(&mut pacer(1, 0), 4096 + 100, 16 * 1024, Instant::now());
        // 1 KiB quanta: 4 KiB and 100 bytes are five grants, four waits.
        assert_eq!((took, waits), (Duration::from_secs(4), 4));
    }

    #[test]
    fn an_idle_spell_earns_one_quantum_of_credit() {
        let mut p = pacer(64, 0);
        let start = Instant::now();
        assert_eq!(p.permit(8 * 1024, start), Ok(8 * 1024));
        // The backend was silent ten seconds: one quantum of credit, then
        // a quantum more at once, then the pace again.
        let later = start + Duration::from_secs(10);
        assert_eq!(p.permit(64 * 1024, later), Ok(8 * 1024));
        assert_eq!(p.permit(64 * 1024, later), Ok(8 * 1024));
        let next = p.permit(64 * 1024, later).unwrap_err();
        assert_eq!(next - later, Duration::from_millis(125));
    }

    #[test]
    fn a_late_wake_up_costs_no_rate() {
        // Woken 5 ms late every time: the credit absorbs it, so 64 KiB/s
        // still sends 8 KiB per 125 ms on average.
        let mut p = pacer(64, 0);
        let start = Instant::now();
        let (mut now, mut sent) = (start, 0u64);
        while sent < 1024 * 1024 {
            match p.permit(16 * 1024, now) {
                Ok(n) => sent += n as u64,
                Err(until) => now = until + Duration::from_millis(5),
            }
        }
        let secs = (now - start).as_secs_f64();
        let rate = (sent - 8 * 1024) as f64 / secs / 1024.0;
        assert!((63.0..=64.5).contains(&rate), "{rate} KiB/s");
    }

    #[test]
    fn high_rates_grant_what_is_ready() {
        let mut p = pacer(1 << 20, 0);
        let start = Instant::now();
        // 1 GiB/s: a quantum of 128 MiB, so a read of the backend goes
        // whole and the wait after it is microseconds.
        assert_eq!(p.permit(16 * 1024, start), Ok(16 * 1024));
        let next = p.permit(16 * 1024, start).unwrap_err();
        assert!(next - start < Duration::from_micros(20));
    }
}
