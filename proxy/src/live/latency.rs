//! An endpoint's response latency as ingress-nginx's `ewma` balancer
//! keeps it (`balancer/ewma.lua`, after Finagle's peak EWMA): an average
//! that forgets with time, `ewma·w + rtt·(1 − w)` with
//! `w = exp(−Δt / 10 s)`, Δt the time since the endpoint was last
//! measured. Read for a choice, it decays toward 0 with the time since
//! (the Lua scores with `rtt = 0`), so an endpoint that was slow once is
//! tried again after a while instead of starving forever.
//!
//! One `AtomicU64` per endpoint (the average, in microseconds, as `f32`
//! bits beside the millisecond it was taken): a measurement is one
//! compare-and-swap, a read one load, no lock. Two measurements racing
//! may both land (the later wins) where the Lua takes a lock; each is
//! one sample of a moving average, so losing one changes nothing a
//! choice can see. Written only for routes that balance by it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// ingress-nginx's `DECAY_TIME` (10 s), in milliseconds.
const DECAY_MS: f32 = 10_000.0;

/// Milliseconds since the process's first use of this clock, wrapping
/// at 2³² (49 days): a difference of two is right modulo that, and any
/// gap past a minute weighs nothing anyway.
fn now_ms() -> u32 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u32
}

/// One endpoint's decayed latency average.
#[derive(Debug, Default)]
pub struct Latency(AtomicU64);

fn unpack(raw: u64) -> (f32, u32) {
    (f32::from_bits((raw >> 32) as u32), raw as u32)
}

fn pack(ewma_us: f32, at_ms: u32) -> u64 {
    (u64::from(ewma_us.to_bits()) << 32) | u64::from(at_ms)
}

fn decay(ewma_us: f32, at_ms: u32, now_ms: u32, rtt_us: f32) -> f32 {
    let elapsed = now_ms.wrapping_sub(at_ms) as f32;
    let weight = (-elapsed / DECAY_MS).exp();
    ewma_us * weight + rtt_us * (1.0 - weight)
}

impl Latency {
    /// One request's time to its response (connect included, as the
    /// Lua's `upstream_connect_time + upstream_response_time`).
    pub fn record(&self, rtt: Duration) {
        self.record_at(rtt, now_ms());
    }

    fn record_at(&self, rtt: Duration, now: u32) {
        let rtt_us = rtt.as_micros().min(u128::from(u32::MAX)) as f32;
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |raw| {
                // Never measured: the sample is the average (the Lua's
                // "last touched" is the epoch, weighing nothing).
                if raw == 0 {
                    return Some(pack(rtt_us, now));
                }
                let (ewma, at) = unpack(raw);
                Some(pack(decay(ewma, at, now, rtt_us), now))
            });
    }

    /// The score a choice compares (lower is better): the average decayed
    /// to now. An endpoint never measured scores 0, as in the Lua.
    pub fn score(&self) -> f32 {
        self.score_at(now_ms())
    }

    fn score_at(&self, now: u32) -> f32 {
        let raw = self.0.load(Ordering::Relaxed);
        if raw == 0 {
            return 0.0;
        }
        let (ewma, at) = unpack(raw);
        decay(ewma, at, now, 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_moves_toward_each_sample_by_the_time_since_the_last() {
        let l = Latency::default();
        assert_eq!(l.score_at(5), 0.0);
        // The first sample is the average.
        l.record_at(Duration::from_millis(200), 60_000);
        let first = l.score_at(60_000);
        assert!((first - 200_000.0).abs() < 1.0, "{first}");
        // A fast sample 1 s later weighs 1 − e^(−0.1) ≈ 9.5 %.
        l.record_at(Duration::from_millis(1), 61_000);
        let second = l.score_at(61_000);
        assert!(second > 180_000.0 && second < 182_000.0, "{second}");
        // Unmeasured, it decays toward 0: e^(−1) after 10 s.
        let later = l.score_at(71_000);
        assert!((later - second * (-1.0f32).exp()).abs() < 10.0, "{later}");
    }

    #[test]
    fn the_clock_wrapping_is_a_short_gap_not_a_long_one() {
        let l = Latency::default();
        l.record_at(Duration::from_millis(100), u32::MAX - 10);
        let score = l.score_at(5);
        assert!(score > 99_000.0, "{score}");
    }
}
