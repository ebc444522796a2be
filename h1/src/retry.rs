//! Retrying a forwarded request: a route's [`RetryPolicy`] (Gateway API
//! `spec.rules[].retry`, ingress-nginx `proxy-next-upstream*`) and the one
//! decision, [`RetryPolicy::decide`], that both HTTP versions ask after a
//! try failed: send the request again (after the backoff), answer with
//! what the last try gave, or answer 504 because the request's time is
//! spent.
//!
//! Bounds hold whatever the route says, as tenants write routes: at most
//! [`MAX_RETRIES`] retries (so `MAX_RETRIES + 1` tries, each of which
//! connects as a request without a policy does), a backoff of at most
//! [`MAX_BACKOFF`], and every try and wait inside the request's budget
//! when there is one. A policy is built once per compile and shared; a
//! request holds it by `Arc` and a small [`Tries`] count, so a route
//! without one pays nothing.

use std::time::Duration;

use tokio::time::Instant;

use crate::body::BodyFraming;

/// Retries per request at most, whatever a route asks (more are clamped
/// when a policy is built; admission reports the clamp).
pub const MAX_RETRIES: u32 = 5;

/// The longest wait between two tries.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The status codes a policy may name: 400 to 599, as the Gateway API's
/// `codes` (a 2xx or 3xx is an answer, never a failure to retry).
pub const RETRYABLE_CODES: std::ops::RangeInclusive<u16> = 400..=599;

/// When a forwarded request is sent again, and how often.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Statuses retried, one bit per code of [`RETRYABLE_CODES`].
    codes: [u64; 4],
    retries: u32,
    backoff: Duration,
    budget: Option<Duration>,
    /// A try that failed without an answer: the connect failed, the
    /// connection closed or reset before a whole response head, or the
    /// head was not HTTP.
    pub on_error: bool,
    /// A try that timed out (connect or waiting for the answer).
    pub on_timeout: bool,
    /// Non-idempotent methods (POST, PATCH...) are retried too.
    pub any_method: bool,
    /// Once every endpoint was tried, they are tried again; else a retry
    /// only goes to an endpoint the request has not tried (nginx's "next
    /// upstream").
    pub same_endpoint_again: bool,
    /// The status answered for a connection error (connect failed,
    /// closed before an answer, a broken answer head) on a route with
    /// this policy; `None`: the engine's own (502).
    pub connection_error_status: Option<u16>,
}

/// How one try ended without an answer to relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failed {
    /// No connection: every endpoint of the try refused or failed.
    Connect,
    /// Connecting timed out.
    ConnectTimeout,
    /// The backend closed or reset the connection before a whole answer.
    Closed,
    /// The answer's head was not a valid HTTP response.
    BadResponse,
    /// No answer within the try's time.
    Timeout,
    /// A final answer with this status.
    Status(u16),
}

/// What to do after a failed try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Try again after waiting this long (zero: at once).
    Retry(Duration),
    /// Answer with what this try gave: not retryable, or the retries are
    /// spent.
    Last,
    /// The request's budget is spent (or would be before the next try
    /// begins): answered 504.
    Expired,
}

/// One request's tries so far.
#[derive(Clone, Copy, Debug)]
pub struct Tries {
    started: Instant,
    retried: u32,
}

impl Tries {
    /// The first try begins at `started` (the budget counts from there).
    pub fn new(started: Instant) -> Self {
        Tries {
            started,
            retried: 0,
        }
    }

    /// Retries made so far.
    pub fn retried(&self) -> u32 {
        self.retried
    }
}

impl RetryPolicy {
    /// A policy of `retries` retries (at most [`MAX_RETRIES`]), no status
    /// retried, no backoff, no budget, nothing else retried.
    pub fn new(retries: u32) -> Self {
        RetryPolicy {
            retries: retries.min(MAX_RETRIES),
            ..RetryPolicy::default()
        }
    }

    /// Retries a final answer with `status`; `false` (nothing changed)
    /// for a status outside [`RETRYABLE_CODES`].
    pub fn retry_status(&mut self, status: u16) -> bool {
        if !RETRYABLE_CODES.contains(&status) {
            return false;
        }
        let bit = usize::from(status - RETRYABLE_CODES.start());
        self.codes[bit / 64] |= 1 << (bit % 64);
        true
    }

    /// Waits `backoff` (at most [`MAX_BACKOFF`]) between tries.
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff.min(MAX_BACKOFF);
        self
    }

    /// Every try and wait of a request within `budget` from its first try
    /// (Gateway API `timeouts.request`, `proxy-next-upstream-timeout`).
    pub fn with_budget(mut self, budget: Option<Duration>) -> Self {
        self.budget = budget.filter(|b| !b.is_zero());
        self
    }

    pub fn retries(&self) -> u32 {
        self.retries
    }

    pub fn backoff(&self) -> Duration {
        self.backoff
    }

    pub fn budget(&self) -> Option<Duration> {
        self.budget
    }

    /// Whether a final answer with `status` is retried.
    pub fn retries_status(&self, status: u16) -> bool {
        if !RETRYABLE_CODES.contains(&status) {
            return false;
        }
        let bit = usize::from(status - RETRYABLE_CODES.start());
        self.codes[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// The statuses retried, in order.
    pub fn statuses(&self) -> impl Iterator<Item = u16> + '_ {
        RETRYABLE_CODES.filter(|&s| self.retries_status(s))
    }

    /// Whether a try that ended so is retried at all (before counting).
    pub fn retryable(&self, failed: Failed) -> bool {
        match failed {
            Failed::Connect | Failed::Closed | Failed::BadResponse => self.on_error,
            Failed::ConnectTimeout | Failed::Timeout => self.on_timeout,
            Failed::Status(s) => self.retries_status(s),
        }
    }

    /// Whether a request may be sent more than once: its method (one of
    /// RFC 9110 §9.2.2's idempotent ones, or any with [`Self::any_method`]) and its
    /// body (none, or all of it held by the proxy, so the same bytes go
    /// again) allow it.
    pub fn may_resend(&self, idempotent: bool, body_held: bool) -> bool {
        body_held && (self.any_method || idempotent)
    }

    /// The status for a request that ended as `failed` without an answer,
    /// when this policy sets one ([`Self::connection_error_status`]).
    pub fn error_status(&self, failed: Failed) -> Option<u16> {
        match failed {
            Failed::Connect | Failed::Closed | Failed::BadResponse => self.connection_error_status,
            _ => None,
        }
    }

    /// When the request's budget ends, if it has one.
    pub fn deadline(&self, tries: &Tries) -> Option<Instant> {
        self.budget.map(|b| tries.started + b)
    }

    /// How long the next wait for the backend may be: `wait` (the route's
    /// timeout for one try), cut to what is left of the budget.
    pub fn try_timeout(&self, tries: &Tries, wait: Duration, now: Instant) -> Duration {
        match self.deadline(tries) {
            Some(end) => wait.min(end.saturating_duration_since(now)),
            None => wait,
        }
    }

    /// After a try ended as `failed` at `now`: retry (counted in `tries`)
    /// when the policy retries that outcome, a retry is left and the
    /// budget outlasts the backoff; 504 when it would retry but the
    /// budget is spent; else the try's own answer.
    pub fn decide(&self, tries: &mut Tries, failed: Failed, now: Instant) -> Verdict {
        if !self.retryable(failed) {
            return Verdict::Last;
        }
        if tries.retried >= self.retries {
            return Verdict::Last;
        }
        if let Some(end) = self.deadline(tries)
            && now + self.backoff >= end
        {
            return Verdict::Expired;
        }
        tries.retried += 1;
        Verdict::Retry(self.backoff)
    }
}

/// Response body bytes a retried answer may leave in the buffer for its
/// connection still to be reused; a longer body closes the connection.
pub const DRAIN_MAX: usize = 4096;

/// Whether a retried try's answer, a head of `head_len` bytes whose body
/// is framed as `body`, lies whole within the `read` bytes already read
/// (its body at most [`DRAIN_MAX`]): then its kept-alive connection holds
/// nothing more of it and goes back to the pool, else it is closed with
/// the rest unread. Nothing more is read for it: the retry waits for no
/// answer that is not relayed.
pub fn answer_read_whole(head_len: usize, body: BodyFraming, read: usize) -> bool {
    match body {
        BodyFraming::None => read == head_len,
        BodyFraming::Length(n) => n <= DRAIN_MAX as u64 && read as u64 == head_len as u64 + n,
        BodyFraming::Chunked | BodyFraming::Close => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway(retries: u32, codes: &[u16]) -> RetryPolicy {
        let mut p = RetryPolicy::new(retries);
        for &c in codes {
            assert!(p.retry_status(c));
        }
        p.on_error = true;
        p.on_timeout = true;
        p.any_method = true;
        p.same_endpoint_again = true;
        p
    }

    #[test]
    fn attempts_count_retries_not_tries() {
        let p = gateway(3, &[500]);
        let now = Instant::now();
        let mut t = Tries::new(now);
        for _ in 0..3 {
            assert_eq!(
                p.decide(&mut t, Failed::Status(500), now),
                Verdict::Retry(Duration::ZERO)
            );
        }
        // Three retries made: the fourth try's 500 is the answer.
        assert_eq!(p.decide(&mut t, Failed::Status(500), now), Verdict::Last);
        assert_eq!(t.retried(), 3);
    }

    #[test]
    fn only_the_named_codes_are_retried() {
        let p = gateway(2, &[500, 502]);
        let now = Instant::now();
        let mut t = Tries::new(now);
        assert_eq!(p.decide(&mut t, Failed::Status(503), now), Verdict::Last);
        assert_eq!(p.decide(&mut t, Failed::Status(404), now), Verdict::Last);
        assert!(matches!(
            p.decide(&mut t, Failed::Status(502), now),
            Verdict::Retry(_)
        ));
        assert_eq!(p.statuses().collect::<Vec<_>>(), [500, 502]);
        // A success or a code out of range is never a retryable code.
        let mut q = RetryPolicy::new(1);
        assert!(!q.retry_status(200) && !q.retry_status(399) && !q.retry_status(600));
        assert!(q.retry_status(400) && q.retry_status(599));
        assert!(!q.retries_status(200) && !q.retries_status(65535));
    }

    #[test]
    fn connection_errors_and_timeouts_follow_their_switches() {
        let mut p = RetryPolicy::new(2);
        let now = Instant::now();
        let mut t = Tries::new(now);
        for f in [
            Failed::Connect,
            Failed::Closed,
            Failed::Timeout,
            Failed::ConnectTimeout,
        ] {
            assert_eq!(p.decide(&mut t, f, now), Verdict::Last);
        }
        p.on_error = true;
        assert!(matches!(
            p.decide(&mut t, Failed::Closed, now),
            Verdict::Retry(_)
        ));
        assert_eq!(p.decide(&mut t, Failed::Timeout, now), Verdict::Last);
        p.on_timeout = true;
        assert!(matches!(
            p.decide(&mut t, Failed::Timeout, now),
            Verdict::Retry(_)
        ));
    }

    /// A hostile route asks for a million retries and an hour between
    /// them: it gets five and ten seconds.
    #[test]
    fn retries_and_backoff_are_capped() {
        let p = gateway(1_000_000, &[503]).with_backoff(Duration::from_secs(3600));
        assert_eq!(p.retries(), MAX_RETRIES);
        assert_eq!(p.backoff(), MAX_BACKOFF);
        let now = Instant::now();
        let mut t = Tries::new(now);
        let mut retried = 0;
        while let Verdict::Retry(wait) = p.decide(&mut t, Failed::Status(503), now) {
            assert!(wait <= MAX_BACKOFF);
            retried += 1;
        }
        assert_eq!(retried, MAX_RETRIES);
    }

    #[test]
    fn the_budget_bounds_every_try_and_wait() {
        let p = gateway(5, &[500])
            .with_budget(Some(Duration::from_millis(400)))
            .with_backoff(Duration::from_millis(50));
        let start = Instant::now();
        let mut t = Tries::new(start);
        // A try's wait is cut to what is left.
        let at = start + Duration::from_millis(300);
        assert_eq!(
            p.try_timeout(&t, Duration::from_millis(200), at),
            Duration::from_millis(100)
        );
        assert_eq!(
            p.try_timeout(&t, Duration::from_millis(200), start),
            Duration::from_millis(200)
        );
        assert!(matches!(
            p.decide(&mut t, Failed::Status(500), at),
            Verdict::Retry(_)
        ));
        // The backoff would end past the budget: 504 now, no try begun.
        let late = start + Duration::from_millis(360);
        assert_eq!(
            p.decide(&mut t, Failed::Status(500), late),
            Verdict::Expired
        );
        // A try that timed out at the budget's end is 504 too.
        assert_eq!(
            p.decide(&mut t, Failed::Timeout, start + Duration::from_millis(400)),
            Verdict::Expired
        );
        // Something not retried is answered as it is, budget or not.
        assert_eq!(p.decide(&mut t, Failed::Status(404), late), Verdict::Last);
        // No budget: a zero budget is none.
        let q = gateway(1, &[500]).with_budget(Some(Duration::ZERO));
        assert_eq!(q.budget(), None);
    }

    #[test]
    fn connection_errors_may_have_their_own_status() {
        let mut p = RetryPolicy::new(1);
        assert_eq!(p.error_status(Failed::Closed), None);
        p.connection_error_status = Some(503);
        for f in [Failed::Connect, Failed::Closed, Failed::BadResponse] {
            assert_eq!(p.error_status(f), Some(503));
        }
        // A timeout stays a 504, an answer its own status.
        assert_eq!(p.error_status(Failed::Timeout), None);
        assert_eq!(p.error_status(Failed::Status(500)), None);
    }

    #[test]
    fn a_retried_answer_is_whole_only_when_all_of_it_was_read() {
        // A 503 head of 40 bytes and its 10-byte body.
        assert!(answer_read_whole(40, BodyFraming::Length(10), 50));
        assert!(!answer_read_whole(40, BodyFraming::Length(10), 45));
        // Bytes past the answer: the backend sent more than it framed.
        assert!(!answer_read_whole(40, BodyFraming::Length(10), 51));
        assert!(answer_read_whole(40, BodyFraming::None, 40));
        assert!(answer_read_whole(40, BodyFraming::Length(0), 40));
        // Longer than DRAIN_MAX, chunked or delimited by the close: never.
        let long = DRAIN_MAX as u64 + 1;
        assert!(!answer_read_whole(
            40,
            BodyFraming::Length(long),
            40 + long as usize
        ));
        assert!(!answer_read_whole(40, BodyFraming::Chunked, 45));
        assert!(!answer_read_whole(40, BodyFraming::Close, 40));
    }

    #[test]
    fn methods_and_bodies_that_may_be_sent_again() {
        let mut p = RetryPolicy::new(1);
        // (idempotent, body held)
        assert!(p.may_resend(true, true));
        assert!(!p.may_resend(true, false));
        assert!(!p.may_resend(false, true));
        p.any_method = true;
        assert!(p.may_resend(false, true));
        assert!(!p.may_resend(false, false));
    }
}
