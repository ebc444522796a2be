//! Response rate limiting (the scheme of BIND's and Knot's RRL): UDP
//! responses per client prefix and response name, counted per second.
//! Over the limit a response is dropped, except every `slip`-th, which
//! goes out as a bare truncated answer (no larger than the query) so a
//! real resolver behind that prefix retries over TCP, where no limit
//! applies (TCP cannot be spoofed). A spoofed flood of queries thus gets
//! its victim at most about as many bytes as it sent.

use std::collections::HashMap;
use std::net::IpAddr;

/// `--dns-rate-limit` and its companions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Responses per second one prefix gets for one name (and type); 0:
    /// no limit.
    pub responses_per_second: u32,
    /// Every `slip`-th limited response is sent truncated; 0: none is.
    pub slip: u32,
    /// Clients in one IPv4 prefix of this length share their buckets.
    pub ipv4_prefix: u8,
    /// The same for IPv6 (a /56 is what one site usually gets).
    pub ipv6_prefix: u8,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            responses_per_second: 20,
            slip: 2,
            ipv4_prefix: 24,
            ipv6_prefix: 56,
        }
    }
}

/// What to do with one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Send,
    /// Send the truncated form instead.
    Slip,
    Drop,
}

/// Buckets beyond this are swept of all but the current second's: a flood
/// from many prefixes costs bounded memory.
const MAX_BUCKETS: usize = 100_000;

#[derive(Clone, Copy, Debug)]
struct Bucket {
    second: u64,
    count: u32,
    limited: u32,
}

/// The buckets of one UDP socket's task (no lock: one owner).
#[derive(Debug)]
pub struct Limiter {
    config: RateLimit,
    buckets: HashMap<(u128, u64), Bucket>,
}

impl Limiter {
    pub fn new(config: RateLimit) -> Limiter {
        Limiter {
            config,
            buckets: HashMap::new(),
        }
    }

    /// The verdict for a response with `key` to `client` in second `now`
    /// (any monotonic count of seconds).
    pub fn check(&mut self, client: IpAddr, key: u64, now: u64) -> Verdict {
        let rate = self.config.responses_per_second;
        if rate == 0 {
            return Verdict::Send;
        }
        if self.buckets.len() >= MAX_BUCKETS {
            self.buckets.retain(|_, b| b.second == now);
        }
        let prefix = self.prefix(client);
        let bucket = self.buckets.entry((prefix, key)).or_insert(Bucket {
            second: now,
            count: 0,
            limited: 0,
        });
        if bucket.second != now {
            bucket.second = now;
            bucket.count = 0;
        }
        if bucket.count < rate {
            bucket.count += 1;
            return Verdict::Send;
        }
        bucket.limited = bucket.limited.wrapping_add(1);
        match self.config.slip {
            0 => Verdict::Drop,
            slip if bucket.limited.is_multiple_of(slip) => Verdict::Slip,
            _ => Verdict::Drop,
        }
    }

    /// The client's prefix, with the family in the top bit so that an
    /// IPv4 prefix never equals an IPv6 one.
    fn prefix(&self, client: IpAddr) -> u128 {
        // An IPv4-mapped client is limited as the IPv4 one it is.
        match client.to_canonical() {
            IpAddr::V4(a) => {
                let bits = u32::from(a);
                let keep = u32::from(self.config.ipv4_prefix.min(32));
                let masked = if keep == 0 {
                    0
                } else {
                    bits & (u32::MAX << (32 - keep))
                };
                (1u128 << 127) | u128::from(masked)
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a);
                let keep = u32::from(self.config.ipv6_prefix.min(127));
                let masked = if keep == 0 {
                    0
                } else {
                    bits & (u128::MAX << (128 - keep))
                };
                masked & !(1u128 << 127)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(rate: u32, slip: u32) -> Limiter {
        Limiter::new(RateLimit {
            responses_per_second: rate,
            slip,
            ..RateLimit::default()
        })
    }

    #[test]
    fn over_the_rate_every_slip_th_response_is_truncated_the_rest_dropped() {
        let mut l = limiter(3, 2);
        let c: IpAddr = "198.51.100.7".parse().unwrap();
        let verdicts: Vec<Verdict> = (0..7).map(|_| l.check(c, 9, 100)).collect();
        use Verdict::*;
        assert_eq!(verdicts, [Send, Send, Send, Drop, Slip, Drop, Slip]);
        assert_eq!(l.check(c, 9, 101), Send, "a new second, a new count");
    }

    #[test]
    fn one_prefix_shares_a_bucket_other_prefixes_and_names_do_not() {
        let mut l = limiter(1, 0);
        let a: IpAddr = "198.51.100.7".parse().unwrap();
        let b: IpAddr = "198.51.100.200".parse().unwrap();
        let other: IpAddr = "198.51.101.7".parse().unwrap();
        assert_eq!(l.check(a, 1, 5), Verdict::Send);
        assert_eq!(l.check(b, 1, 5), Verdict::Drop, "same /24");
        assert_eq!(l.check(other, 1, 5), Verdict::Send);
        assert_eq!(l.check(a, 2, 5), Verdict::Send, "another name");
        let v6a: IpAddr = "2001:db8:0:ff::1".parse().unwrap();
        let v6b: IpAddr = "2001:db8:0:1::9".parse().unwrap();
        assert_eq!(l.check(v6a, 1, 5), Verdict::Send);
        assert_eq!(l.check(v6b, 1, 5), Verdict::Drop, "same /56");
        let mapped: IpAddr = "::ffff:198.51.100.9".parse().unwrap();
        assert_eq!(
            l.check(mapped, 1, 5),
            Verdict::Drop,
            "mapped is the IPv4 /24"
        );
    }

    #[test]
    fn zero_is_no_limit() {
        let mut l = limiter(0, 2);
        let c: IpAddr = "198.51.100.7".parse().unwrap();
        assert!((0..1000).all(|_| l.check(c, 1, 1) == Verdict::Send));
    }
}
