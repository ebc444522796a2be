//! `global-rate-limit` on the request path
//! ([`crate::compile::global_rate::GlobalRate`]): the request's key
//! hashed (FNV-1a, the same on every replica, so the fleet counts the same
//! key together), then counted in the route's counts
//! (crate::live::global_counts) or answered 429 with `Retry-After`.
//!
//! The pipeline asks after the route's own answers (redirects, CORS
//! preflights) and before authentication, as ingress-nginx throttles in
//! nginx's rewrite phase, after `return` and before `auth_request`.

use std::net::IpAddr;

use crate::compile::gateway::table::RequestHeaders;
use crate::compile::global_rate::GlobalRate;
use crate::live::global_counts::{OVERFLOW, unix_ms};
use crate::plane::traffic::TrafficAnswer;
use crate::plane::traffic::hash_by::Vars;

pub const TOO_MANY_GLOBAL_BODY: &str = "429 too many requests for this route\n";
/// The body when the operator chose another status than 429.
pub const OVER_GLOBAL_LIMIT_BODY: &str = "too many requests for this route\n";

/// What a key reads from one request.
pub struct Request<'r> {
    pub path: &'r str,
    pub query: &'r str,
    pub authority: &'r str,
    pub client: Option<IpAddr>,
    pub headers: &'r dyn RequestHeaders,
    /// Every cookie field, joined (only when the key reads a cookie).
    pub cookies: Option<&'r [u8]>,
}

/// Counts the request, or the answer when the fleet's count for its key
/// is at the limit. A client in `global-rate-limit-ignored-cidrs` is
/// neither counted nor refused.
pub fn admit(rate: &GlobalRate, req: &Request<'_>) -> Result<(), TrafficAnswer> {
    admit_at(rate, req, unix_ms())
}

fn admit_at(rate: &GlobalRate, req: &Request<'_>, now_ms: u64) -> Result<(), TrafficAnswer> {
    let client = req.client.map(|ip| ip.to_canonical());
    if let Some(ip) = client
        && rate.ignored.iter().any(|net| net.contains(&ip))
    {
        return Ok(());
    }
    rate.counts
        .admit(key(rate, req, client), now_ms)
        .map_err(|over| TrafficAnswer {
            // --global-rate-limit-status-code, 429 by default.
            status: over.status,
            reason: "policy_global_rate_limited",
            body: if over.status == 429 {
                TOO_MANY_GLOBAL_BODY
            } else {
                OVER_GLOBAL_LIMIT_BODY
            },
            headers: vec![(
                "retry-after",
                over.retry_after_ms.div_ceil(1000).max(1).to_string(),
            )],
        })
}

/// The request's key: the key's hash, or the client address's when the
/// key is `$remote_addr` or expands to nothing. Never [`OVERFLOW`].
fn key(rate: &GlobalRate, req: &Request<'_>, client: Option<IpAddr>) -> u64 {
    let hash = match &rate.key {
        None => remote(client),
        Some(key) => {
            let vars = Vars {
                path: req.path,
                query: req.query,
                authority: req.authority,
                client,
                headers: req.headers,
            };
            let hash = key.key(&vars, req.cookies);
            if rate.falls_back && hash == empty_key(key) {
                remote(client)
            } else {
                hash
            }
        }
    };
    if hash == OVERFLOW { 1 } else { hash }
}

/// FNV-1a of the client's address, as every replica computes it.
fn remote(client: Option<IpAddr>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let octets: &[u8] = match &client {
        Some(IpAddr::V4(v4)) => &v4.octets(),
        Some(IpAddr::V6(v6)) => &v6.octets(),
        None => &[],
    };
    for &b in octets.iter().chain(b"remote_addr") {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The hash of `key` on a request where every variable is absent.
fn empty_key(key: &crate::compile::hash_by::HashBy) -> u64 {
    let empty: &[(&str, &str)] = &[];
    key.key(
        &Vars {
            path: "",
            query: "",
            authority: "",
            client: None,
            headers: &empty,
        },
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::global_counts::GlobalCounts;

    const W: u64 = 60_000;

    fn rate(counts: &GlobalCounts, key: Option<&str>) -> GlobalRate {
        let key = key.map(|k| crate::compile::hash_by::HashBy::parse(k, None).unwrap());
        GlobalRate {
            counts: counts.route("ns/web", "t", 2, W),
            falls_back: key.is_some(),
            key,
            ignored: vec!["10.9.0.0/16".parse().unwrap()],
        }
    }

    const NONE: &[(&str, &str)] = &[];

    fn request<'r>(client: &str, headers: &'r &'r [(&'r str, &'r str)]) -> Request<'r> {
        Request {
            path: "/",
            query: "",
            authority: "web.example",
            client: Some(client.parse().unwrap()),
            headers,
            cookies: None,
        }
    }

    #[test]
    fn per_client_by_default_ignored_networks_not_counted() {
        let counts = GlobalCounts::default();
        let r = rate(&counts, None);
        let t = 1_000 * W;
        assert!(admit_at(&r, &request("192.0.2.1", &NONE), t).is_ok());
        assert!(admit_at(&r, &request("::ffff:192.0.2.1", &NONE), t).is_ok());
        let refused = admit_at(&r, &request("192.0.2.1", &NONE), t).unwrap_err();
        assert_eq!(refused.status, 429);
        assert_eq!(refused.headers, [("retry-after", "60".to_string())]);
        assert!(admit_at(&r, &request("192.0.2.2", &NONE), t).is_ok());
        for _ in 0..10 {
            assert!(admit_at(&r, &request("10.9.3.4", &NONE), t).is_ok());
        }
    }

    /// `$http_x_api_client`: one count per header value over every
    /// address; without the header, the client's address.
    #[test]
    fn header_key_counts_the_value_and_falls_back_to_the_address() {
        let counts = GlobalCounts::default();
        let r = rate(&counts, Some("$http_x_api_client"));
        let t = 1_000 * W;
        let a: &[(&str, &str)] = &[("x-api-client", "a")];
        let b: &[(&str, &str)] = &[("x-api-client", "b")];
        assert!(admit_at(&r, &request("192.0.2.1", &a), t).is_ok());
        assert!(admit_at(&r, &request("192.0.2.2", &a), t).is_ok());
        assert!(admit_at(&r, &request("192.0.2.3", &a), t).is_err());
        assert!(admit_at(&r, &request("192.0.2.3", &b), t).is_ok());
        for _ in 0..2 {
            assert!(admit_at(&r, &request("192.0.2.9", &NONE), t).is_ok());
        }
        assert!(admit_at(&r, &request("192.0.2.9", &NONE), t).is_err());
        assert!(admit_at(&r, &request("192.0.2.8", &NONE), t).is_ok());
    }
}
