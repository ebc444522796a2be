//! Response rate limiting (the scheme of BIND's and Knot's RRL): UDP
//! responses per client prefix, counted per second, twice over:
//!
//! - per response name: `responses_per_second` for one name's answers.
//!   The name of an answer is its name and type; NODATA is its name
//!   without the type and NXDOMAIN the zone (BIND's keys): rotating the
//!   query type or inventing names does not get a new bucket.
//! - per prefix: `bytes_per_second` of responses across all names and
//!   types, so rotating over the zone's many real names (every tenant
//!   hostname) does not multiply the name budget either.
//!
//! Over either limit a response is dropped, except every `slip`-th, which
//! goes out as a bare truncated answer (no larger than the query) so a
//! real resolver behind that prefix retries over TCP, where no limit
//! applies (TCP cannot be spoofed). A spoofed flood of queries thus gets
//! its victim at most the prefix's byte budget plus fewer bytes than it
//! sent.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;

/// `--dns-rate-limit` and its companions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Responses per second one prefix gets for one name (the name and
    /// type of an answer, the name of a NODATA, the zone of an NXDOMAIN);
    /// 0: no limit at all (the byte budget is off too).
    pub responses_per_second: u32,
    /// Every `slip`-th limited response is sent truncated; 0: none is.
    pub slip: u32,
    /// Response bytes per second one prefix gets across all names and
    /// types; 0: no byte budget (the per-name limit still applies).
    pub bytes_per_second: u32,
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
            // About 600 typical answers a second for a whole /24: more
            // than a site's resolvers ask one zone, and what one LB node
            // sends a spoofed victim's /24 before amplification ends.
            bytes_per_second: 64 * 1024,
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

/// Each table (names, prefixes) holds at most this many buckets: a flood
/// from many prefixes costs bounded memory.
const MAX_BUCKETS: usize = 100_000;

/// One (prefix, name) bucket.
#[derive(Clone, Copy, Debug)]
struct NameBucket {
    second: u64,
    count: u32,
}

/// One prefix's bucket.
#[derive(Clone, Copy, Debug)]
struct PrefixBucket {
    second: u64,
    bytes: u64,
    /// Limited responses so far, for the slip.
    limited: u32,
}

trait Second {
    fn second(&self) -> u64;
}

impl Second for NameBucket {
    fn second(&self) -> u64 {
        self.second
    }
}

impl Second for PrefixBucket {
    fn second(&self) -> u64 {
        self.second
    }
}

/// A table of buckets bounded by [`MAX_BUCKETS`].
#[derive(Debug)]
struct Table<K, V> {
    buckets: HashMap<K, V>,
    /// The second of the last sweep: a table still full after one is not
    /// swept again in that second, so a flood of new keys costs one sweep
    /// a second, not one per query.
    swept: Option<u64>,
    sweeps: u64,
}

impl<K: Hash + Eq, V: Second> Table<K, V> {
    fn new() -> Self {
        Table {
            buckets: HashMap::new(),
            swept: None,
            sweeps: 0,
        }
    }

    /// The bucket of `key`, made with `new` if there is room; `None` when
    /// the table is full of this second's buckets.
    fn get(&mut self, key: K, now: u64, new: impl FnOnce() -> V) -> Option<&mut V> {
        if self.buckets.len() >= MAX_BUCKETS
            && !self.buckets.contains_key(&key)
            && self.swept != Some(now)
        {
            self.swept = Some(now);
            self.sweeps += 1;
            self.buckets.retain(|_, b| b.second() == now);
        }
        if self.buckets.len() >= MAX_BUCKETS && !self.buckets.contains_key(&key) {
            return None;
        }
        Some(self.buckets.entry(key).or_insert_with(new))
    }
}

/// The buckets of one UDP socket's task (no lock: one owner).
#[derive(Debug)]
pub struct Limiter {
    config: RateLimit,
    names: Table<(u128, u64), NameBucket>,
    prefixes: Table<u128, PrefixBucket>,
    /// Limited responses of prefixes that found no room in a full table.
    overflow_limited: u32,
}

impl Limiter {
    pub fn new(config: RateLimit) -> Limiter {
        Limiter {
            config,
            names: Table::new(),
            prefixes: Table::new(),
            overflow_limited: 0,
        }
    }

    /// The verdict for a response of `bytes` bytes with `key` to `client`
    /// in second `now` (any monotonic count of seconds).
    pub fn check(&mut self, client: IpAddr, key: u64, bytes: usize, now: u64) -> Verdict {
        let rate = self.config.responses_per_second;
        if rate == 0 {
            return Verdict::Send;
        }
        let prefix = prefix(client, self.config.ipv4_prefix, self.config.ipv6_prefix);
        let budget = u64::from(self.config.bytes_per_second);
        let slip = self.config.slip;
        let new_name = || NameBucket {
            second: now,
            count: 0,
        };
        let name_room = match self.names.get((prefix, key), now, new_name) {
            Some(b) => {
                if b.second != now {
                    *b = new_name();
                }
                Some(b)
            }
            None => None,
        };
        let new_prefix = || PrefixBucket {
            second: now,
            bytes: 0,
            limited: 0,
        };
        let Some(p) = self.prefixes.get(prefix, now, new_prefix) else {
            // Both tables full of this second's buckets: a flood from
            // more prefixes than they hold. New prefixes are limited
            // until the next second's sweep rather than let in unmetered.
            self.overflow_limited = self.overflow_limited.wrapping_add(1);
            return slip_or_drop(self.overflow_limited, slip);
        };
        if p.second != now {
            p.second = now;
            p.bytes = 0;
        }
        let bytes = bytes as u64;
        match name_room {
            Some(n) if n.count < rate && (budget == 0 || p.bytes + bytes <= budget) => {
                n.count += 1;
                p.bytes += bytes;
                Verdict::Send
            }
            _ => {
                p.limited = p.limited.wrapping_add(1);
                slip_or_drop(p.limited, slip)
            }
        }
    }
}

fn slip_or_drop(limited: u32, slip: u32) -> Verdict {
    match slip {
        0 => Verdict::Drop,
        slip if limited.is_multiple_of(slip) => Verdict::Slip,
        _ => Verdict::Drop,
    }
}

/// The client's prefix (`v4` and `v6` bits kept), with the family in the
/// top bit so that an IPv4 prefix never equals an IPv6 one. The rate
/// limiter's buckets and the TCP listener's per-prefix share use it.
pub(crate) fn prefix(client: IpAddr, v4: u8, v6: u8) -> u128 {
    // An IPv4-mapped client is limited as the IPv4 one it is.
    match client.to_canonical() {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let keep = u32::from(v4.min(32));
            let masked = if keep == 0 {
                0
            } else {
                bits & (u32::MAX << (32 - keep))
            };
            (1u128 << 127) | u128::from(masked)
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let keep = u32::from(v6.min(127));
            let masked = if keep == 0 {
                0
            } else {
                bits & (u128::MAX << (128 - keep))
            };
            masked & !(1u128 << 127)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::{Transport, respond, slip};
    use crate::zone::{ZoneBuilder, ZoneSettings};
    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::{Name, RecordType};

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
        let verdicts: Vec<Verdict> = (0..7).map(|_| l.check(c, 9, 100, 100)).collect();
        use Verdict::*;
        assert_eq!(verdicts, [Send, Send, Send, Drop, Slip, Drop, Slip]);
        assert_eq!(l.check(c, 9, 100, 101), Send, "a new second, a new count");
    }

    #[test]
    fn one_prefix_shares_a_bucket_other_prefixes_and_names_do_not() {
        let mut l = limiter(1, 0);
        let a: IpAddr = "198.51.100.7".parse().unwrap();
        let b: IpAddr = "198.51.100.200".parse().unwrap();
        let other: IpAddr = "198.51.101.7".parse().unwrap();
        assert_eq!(l.check(a, 1, 100, 5), Verdict::Send);
        assert_eq!(l.check(b, 1, 100, 5), Verdict::Drop, "same /24");
        assert_eq!(l.check(other, 1, 100, 5), Verdict::Send);
        assert_eq!(l.check(a, 2, 100, 5), Verdict::Send, "another name");
        let v6a: IpAddr = "2001:db8:0:ff::1".parse().unwrap();
        let v6b: IpAddr = "2001:db8:0:1::9".parse().unwrap();
        assert_eq!(l.check(v6a, 1, 100, 5), Verdict::Send);
        assert_eq!(l.check(v6b, 1, 100, 5), Verdict::Drop, "same /56");
        let mapped: IpAddr = "::ffff:198.51.100.9".parse().unwrap();
        assert_eq!(
            l.check(mapped, 1, 100, 5),
            Verdict::Drop,
            "mapped is the IPv4 /24"
        );
    }

    #[test]
    fn zero_is_no_limit() {
        let mut l = limiter(0, 2);
        let c: IpAddr = "198.51.100.7".parse().unwrap();
        assert!((0..1000).all(|k| l.check(c, k, 1000, 1) == Verdict::Send));
    }

    #[test]
    fn the_byte_budget_spans_all_names_and_types_of_a_prefix() {
        let mut l = Limiter::new(RateLimit {
            responses_per_second: 1000,
            slip: 0,
            bytes_per_second: 1000,
            ..RateLimit::default()
        });
        let c: IpAddr = "198.51.100.7".parse().unwrap();
        let other: IpAddr = "198.51.101.7".parse().unwrap();
        let sent = (0..50).filter(|&k| l.check(c, k, 100, 7) == Verdict::Send);
        assert_eq!(
            sent.count(),
            10,
            "1000 bytes of 100-byte answers, any names"
        );
        assert_eq!(l.check(other, 1, 100, 7), Verdict::Send, "another prefix");
        assert_eq!(l.check(c, 99, 100, 8), Verdict::Send, "a new second");
    }

    /// A zone with the names an abuser rotates over: many tenant
    /// hostnames with an address, and one name with few types.
    fn zone() -> crate::Zone {
        let mut b = ZoneBuilder::new(ZoneSettings::new("lb.example.com")).unwrap();
        for i in 0..1000 {
            b.address(
                &format!("w{i}.acme.lb.example.com"),
                "192.0.2.1".parse().unwrap(),
            )
            .unwrap();
        }
        b.build()
    }

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut m = Message::query();
        let name = Name::from_ascii(name).unwrap();
        m.add_query(Query::query(name, RecordType::from(qtype)));
        m.to_vec().unwrap()
    }

    /// Query types a name with only an address answers NODATA to (no
    /// ANY, zone transfers or meta types).
    fn nodata_types() -> Vec<u16> {
        (2..=249).filter(|t| ![16, 28, 41].contains(t)).collect()
    }

    /// Bytes in and out of `queries` sent at `per_second` from one
    /// address, through the query path and the limiter.
    fn run(queries: &[Vec<u8>], per_second: usize) -> (usize, usize) {
        let zone = zone();
        let mut l = Limiter::new(RateLimit::default());
        let client: IpAddr = "203.0.113.9".parse().unwrap();
        let (mut bytes_in, mut bytes_out) = (0, 0);
        for (i, q) in queries.iter().enumerate() {
            bytes_in += q.len();
            let r = respond(&zone, q, Transport::Udp).unwrap();
            let now = (i / per_second) as u64;
            bytes_out += match l.check(client, r.rate_key, r.bytes.len(), now) {
                Verdict::Send => r.bytes.len(),
                Verdict::Slip => slip(q).unwrap().len(),
                Verdict::Drop => 0,
            };
        }
        (bytes_in, bytes_out)
    }

    #[test]
    fn rotating_types_or_names_from_one_prefix_gets_fewer_bytes_than_it_sends() {
        let n = 20_000;
        let types = nodata_types();
        let rotated_types: Vec<Vec<u8>> = (0..n)
            .map(|i| query("w1.acme.lb.example.com.", types[i % types.len()]))
            .collect();
        let nxdomains: Vec<Vec<u8>> = (0..n)
            .map(|i| query(&format!("x{i}.acme.lb.example.com."), 1))
            .collect();
        let answers: Vec<Vec<u8>> = (0..n)
            .map(|i| query(&format!("w{}.acme.lb.example.com.", i % 1000), 1))
            .collect();
        let mixed: Vec<Vec<u8>> = (0..n)
            .map(|i| match i % 3 {
                0 => rotated_types[i].clone(),
                1 => nxdomains[i].clone(),
                _ => answers[i].clone(),
            })
            .collect();
        for (what, queries) in [
            ("NODATA, rotated types", &rotated_types),
            ("NXDOMAIN, rotated names", &nxdomains),
            ("A answers, rotated names", &answers),
            ("all three", &mixed),
        ] {
            // 5,000 queries a second for 4 s: well over the byte budget.
            let (bytes_in, bytes_out) = run(queries, 5000);
            let ratio = bytes_out as f64 / bytes_in as f64;
            assert!(
                ratio < 1.0,
                "{what}: {bytes_out} bytes out / {bytes_in} in = {ratio:.2}"
            );
        }
    }

    #[test]
    fn a_full_table_is_swept_at_most_once_a_second() {
        let mut l = limiter(20, 2);
        let client = |i: u128| IpAddr::V6((0x2001_0db8_u128 << 96 | i << 72).into());
        for i in 0..MAX_BUCKETS as u128 {
            assert_eq!(l.check(client(i), 1, 100, 1), Verdict::Send);
        }
        // A thousand more new prefixes in the same second: the tables are
        // full of this second's buckets, so one sweep each finds nothing
        // to drop and the newcomers are limited, not each a full sweep.
        let late = (0..1000u128).map(|i| l.check(client(MAX_BUCKETS as u128 + i), 1, 100, 1));
        assert!(late.into_iter().all(|v| v != Verdict::Send));
        assert_eq!(l.names.sweeps + l.prefixes.sweeps, 2, "one per table");
        // The next second sweeps the stale buckets away.
        assert_eq!(
            l.check(client(u128::from(u32::MAX)), 1, 100, 2),
            Verdict::Send
        );
        assert!(l.names.buckets.len() < MAX_BUCKETS);
    }
}
