//! Request rate limits per client address (`limit-rps`, `limit-rpm`,
//! `limit-burst-multiplier`, `limit-allowlist`) and its requests in flight
//! (`limit-connections`) on the request path; the counters are the owning
//! tenant's bounded table (crate::live::rate_table).

use std::net::IpAddr;

use crate::compile::traffic::{ConnectionLimit, RateLimits};
use crate::live::rate_table::{InFlightPass, now_ns};

impl ConnectionLimit {
    /// One more request of `client` in flight: `Ok` carries its place,
    /// held until the request ends (`None`: not counted, an exempt
    /// client or none); `Err`: the limit, that many in flight already.
    pub fn enter(&self, client: Option<IpAddr>) -> Result<Option<InFlightPass>, u32> {
        let Some(ip) = client.map(|ip| ip.to_canonical()) else {
            return Ok(None);
        };
        if self.exempt.iter().any(|net| net.contains(&ip)) {
            return Ok(None);
        }
        self.table
            .hold(self.route_key, ip, self.limit)
            .map(Some)
            .ok_or(self.limit)
    }
}

impl RateLimits {
    /// Admits one request of `client`, or says after how many seconds it
    /// may retry. A request without a client address (a Unix-socket
    /// listener) is not limited: there is nobody to count it against.
    pub fn admit(&self, client: Option<IpAddr>) -> Result<(), u64> {
        self.admit_at(client, now_ns())
    }

    fn admit_at(&self, client: Option<IpAddr>, now: u64) -> Result<(), u64> {
        let Some(ip) = client.map(|ip| ip.to_canonical()) else {
            return Ok(());
        };
        if self.exempt.iter().any(|net| net.contains(&ip)) {
            return Ok(());
        }
        for (which, rate) in self.limits.iter().enumerate() {
            self.table.take(self.route_key, which, ip, *rate, now)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::compile::traffic::Rate;
    use crate::live::rate_table::RateTable;

    const S: u64 = 1_000_000_000;

    fn limits(table: Arc<RateTable>, rate: Rate) -> RateLimits {
        RateLimits {
            limits: vec![rate],
            exempt: vec!["10.9.0.0/16".parse().unwrap()],
            table,
            route_key: RateTable::route_key("ns/web"),
        }
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    /// limit-rps 2 with multiplier 5: ten more at once after the first
    /// (nginx's `burst=10 nodelay`), then one per half second.
    #[test]
    fn burst_then_rate_then_retry_after() {
        let l = limits(Arc::new(RateTable::new(64)), Rate::new(2, 1, 5));
        let t0 = 10 * S;
        let c = ip("192.0.2.1");
        for n in 0..11 {
            assert_eq!(l.admit_at(c, t0), Ok(()), "request {n}");
        }
        assert_eq!(l.admit_at(c, t0), Err(1));
        // Another client and an exempt one are not held up by it.
        assert_eq!(l.admit_at(ip("192.0.2.2"), t0), Ok(()));
        for _ in 0..50 {
            assert_eq!(l.admit_at(ip("10.9.1.1"), t0), Ok(()));
        }
        // Half a second later one more passes.
        assert_eq!(l.admit_at(c, t0 + S / 2), Ok(()));
        assert_eq!(l.admit_at(c, t0 + S / 2), Err(1));
        // An IPv4 client seen through an IPv6 socket is the same client.
        assert!(l.admit_at(ip("::ffff:192.0.2.1"), t0 + S / 2).is_err());
    }

    #[test]
    fn retry_after_counts_whole_seconds() {
        // One a minute, no burst beyond the first: the next in 60 s.
        let l = limits(Arc::new(RateTable::new(64)), Rate::new(1, 60, 0));
        let c = ip("192.0.2.1");
        assert_eq!(l.admit_at(c, S), Ok(()));
        assert_eq!(l.admit_at(c, S), Err(60));
        assert_eq!(l.admit_at(c, 31 * S), Err(30));
        assert_eq!(l.admit_at(c, 61 * S), Ok(()));
    }

    #[test]
    fn in_flight_limit_exempts_and_gives_back() {
        let table = Arc::new(RateTable::new(64));
        let l = ConnectionLimit {
            limit: 1,
            exempt: vec!["10.9.0.0/16".parse().unwrap()],
            table: table.clone(),
            route_key: RateTable::route_key("ns/web"),
        };
        let held = l.enter(ip("192.0.2.1")).unwrap();
        assert!(held.is_some());
        assert!(l.enter(ip("192.0.2.1")).is_err());
        assert!(l.enter(ip("::ffff:192.0.2.1")).is_err());
        // Exempt clients and requests without an address are not counted.
        for _ in 0..3 {
            assert!(l.enter(ip("10.9.1.1")).unwrap().is_none());
            assert!(l.enter(None).unwrap().is_none());
        }
        drop(held);
        assert_eq!(table.in_flight_used(), 0);
        assert!(l.enter(ip("192.0.2.1")).unwrap().is_some());
    }

    /// However many addresses a client spreads over, the table keeps its
    /// fixed number of counters.
    #[test]
    fn state_is_bounded() {
        let table = Arc::new(RateTable::new(1024));
        let l = limits(table.clone(), Rate::new(1, 1, 1));
        for i in 0..100_000u32 {
            let a = std::net::Ipv6Addr::from(u128::from(i) | (0x2001_0db8u128 << 96));
            let _ = l.admit_at(Some(IpAddr::V6(a)), S);
        }
        assert_eq!(table.capacity(), 1024);
        assert_eq!(table.used(), 1024);
    }
}
