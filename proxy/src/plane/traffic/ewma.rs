//! `load-balance: ewma`: the endpoint tried first is the better of two
//! chosen at random, by their decayed response latency
//! (crate::live::latency), as ingress-nginx's Lua balancer does
//! (`PICK_SET_SIZE = 2`). Two random candidates rather than the best of
//! all: every replica would otherwise send the same burst to the one
//! endpoint that looked fastest a moment ago, and the choice costs two
//! loads whatever the endpoint count.
//!
//! The engines measure the time to each response's head on routes
//! balanced this way ([`measure`]); other routes neither read nor write
//! the averages.

use std::sync::Arc;
use std::time::Instant;

use crate::compile::upstream::Upstream;
use crate::live::endpoints::Endpoint;

/// The endpoint (an index) of `upstream` to try first; `None` leaves the
/// choice to round-robin (one endpoint, or every one ejected).
pub fn choose(upstream: &Upstream) -> Option<usize> {
    choose_with(upstream, |n| rand::random_range(0..n))
}

fn choose_with(upstream: &Upstream, mut random: impl FnMut(usize) -> usize) -> Option<usize> {
    let endpoints = upstream.endpoints.load();
    let n = endpoints.len();
    if n < 2 {
        return None;
    }
    let a = random(n);
    let mut b = random(n - 1);
    if b >= a {
        b += 1;
    }
    let live = |i: usize| !endpoints[i].is_ejected();
    match (live(a), live(b)) {
        (true, true) => {
            let (sa, sb) = (endpoints[a].latency.score(), endpoints[b].latency.score());
            Some(if sb < sa { b } else { a })
        }
        (true, false) => Some(a),
        (false, true) => Some(b),
        // Both out: round-robin's walk skips the ejected ones.
        (false, false) => None,
    }
}

/// One attempt's start on an endpoint of a route balanced by latency; the
/// answer's head arriving ends it ([`Self::answered`]).
#[derive(Debug, Default)]
pub struct Measure {
    started: Option<(Arc<Endpoint>, Instant)>,
}

impl Measure {
    /// An attempt on `endpoint` starts now (connect included).
    pub fn start(&mut self, endpoint: &Arc<Endpoint>) {
        self.started = Some((endpoint.clone(), Instant::now()));
    }

    /// The attempt's answer (or its failure) arrived: one sample.
    pub fn answered(&self) {
        if let Some((endpoint, at)) = &self.started {
            endpoint.latency.record(at.elapsed());
        }
    }
}

/// Records `started`'s time to now on `endpoint` when the route's policy
/// balances by latency (the HTTP/2 engines' hook).
pub fn measure(
    applied: Option<&super::Applied>,
    endpoint: Option<&Arc<Endpoint>>,
    started: Option<Instant>,
) {
    if let (Some(true), Some(endpoint), Some(at)) = (applied.map(|a| a.ewma), endpoint, started) {
        endpoint.latency.record(at.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::*;
    use crate::live::endpoints::EndpointRegistry;

    fn upstream(registry: &EndpointRegistry, n: u8) -> Upstream {
        let endpoints = (1..=n)
            .map(|i| registry.endpoint(SocketAddr::from(([10, 0, 0, i], 8080))))
            .collect();
        Upstream::new("ns/web:80".into(), endpoints, None)
    }

    /// A slow endpoint gets fewer requests: one answering in 200 ms among
    /// three answering in 1 ms wins only when both candidates are it,
    /// which they never are.
    #[test]
    fn a_slow_endpoint_gets_fewer_requests() {
        let registry = EndpointRegistry::default();
        let up = upstream(&registry, 4);
        for (i, e) in up.endpoints.load().iter().enumerate() {
            let ms = if i == 2 { 200 } else { 1 };
            e.latency.record(Duration::from_millis(ms));
        }
        let mut counts = [0u32; 4];
        for _ in 0..4000 {
            counts[choose(&up).unwrap()] += 1;
        }
        assert_eq!(counts[2], 0, "{counts:?}");
        // The other three share the rest, each chosen often.
        assert!(
            counts.iter().enumerate().all(|(i, &c)| i == 2 || c > 800),
            "{counts:?}"
        );
    }

    /// With two endpoints both are the candidates every time: the faster
    /// wins, and an ejected one loses to any live one.
    #[test]
    fn the_lower_score_of_the_two_wins_and_ejected_ones_lose() {
        let registry = EndpointRegistry::default();
        let up = upstream(&registry, 2);
        up.endpoints.load()[0]
            .latency
            .record(Duration::from_millis(50));
        up.endpoints.load()[1]
            .latency
            .record(Duration::from_millis(5));
        for _ in 0..100 {
            assert_eq!(choose(&up), Some(1));
        }
        up.endpoints.load()[1].eject();
        assert_eq!(choose(&up), Some(0));
        up.endpoints.load()[0].eject();
        assert_eq!(choose(&up), None);
        let one = upstream(&EndpointRegistry::default(), 1);
        assert_eq!(choose(&one), None);
    }

    #[test]
    fn the_two_candidates_are_distinct() {
        let registry = EndpointRegistry::default();
        let up = upstream(&registry, 3);
        up.endpoints.load()[0]
            .latency
            .record(Duration::from_millis(9));
        // random() answering 0 both times still compares 0 with 1.
        up.endpoints.load()[1]
            .latency
            .record(Duration::from_millis(1));
        assert_eq!(choose_with(&up, |_| 0), Some(1));
    }

    #[test]
    fn a_measure_records_only_once_started() {
        let registry = EndpointRegistry::default();
        let up = upstream(&registry, 1);
        let mut m = Measure::default();
        m.answered();
        assert_eq!(up.endpoints.load()[0].latency.score(), 0.0);
        m.start(&up.endpoints.load()[0]);
        std::thread::sleep(Duration::from_millis(2));
        m.answered();
        assert!(up.endpoints.load()[0].latency.score() > 0.0);
    }
}
