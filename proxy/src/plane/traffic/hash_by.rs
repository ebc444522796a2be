//! Consistent hashing on request variables, per request: the key of
//! [`crate::compile::hash_by::HashBy`] read from one request, and the
//! endpoint it chooses (rendezvous hashing, as that module says).

use std::net::{IpAddr, SocketAddr};

use crate::compile::gateway::table::RequestHeaders;
use crate::compile::hash_by::Part;
pub use crate::compile::hash_by::{DEFAULT_SUBSET, HashBy, MAX_SUBSET, MAX_VARIABLES};
use crate::compile::upstream::Upstream;

/// What a key reads from one request.
pub struct Vars<'r> {
    /// The request target's path as sent (nginx's `$request_uri` is the
    /// target before normalisation).
    pub path: &'r str,
    /// After `?`, without it.
    pub query: &'r str,
    pub authority: &'r str,
    pub client: Option<IpAddr>,
    pub headers: &'r dyn RequestHeaders,
}
impl HashBy {
    /// The request's key: FNV-1a over each part's bytes, a part ending in
    /// a separator byte no value holds, so `$arg_a$arg_b` keys `x`,`yz`
    /// and `xy`,`z` apart. An absent variable is empty, as nginx's.
    pub fn key(&self, vars: &Vars<'_>, cookies: Option<&[u8]>) -> u64 {
        let mut hash = Fnv::default();
        for part in &self.parts {
            match part {
                Part::Literal(text) => hash.write(text.as_bytes()),
                Part::RequestUri => {
                    hash.write(vars.path.as_bytes());
                    if !vars.query.is_empty() {
                        hash.write(b"?");
                        hash.write(vars.query.as_bytes());
                    }
                }
                Part::RemoteAddr => {
                    if let Some(ip) = vars.client {
                        match ip {
                            IpAddr::V4(v4) => hash.write(&v4.octets()),
                            IpAddr::V6(v6) => hash.write(&v6.octets()),
                        }
                    }
                }
                Part::Host => {
                    let mut buf = [0u8; 256];
                    if let Some(host) =
                        teapot_api::host::normalize_request_host(vars.authority, &mut buf)
                    {
                        hash.write(host.as_bytes());
                    }
                }
                Part::Header(name) => {
                    if let Some(v) = vars.headers.first(name) {
                        hash.write(v);
                    }
                }
                Part::Cookie(name) => {
                    if let Some(v) = super::affinity::cookie(cookies, name) {
                        hash.write(v);
                    }
                }
                Part::Arg(name) => {
                    if let Some(v) = arg(vars.query, name) {
                        hash.write(v.as_bytes());
                    }
                }
            }
            hash.write(&[0xff]);
        }
        hash.0
    }

    /// The endpoint of `upstream` (an index) the request with `key` is
    /// tried on first; `None` when the upstream has none.
    pub fn choose(&self, upstream: &Upstream, key: u64) -> Option<usize> {
        let endpoints = upstream.endpoints.load();
        // While every endpoint is ejected, they all score: the engines'
        // own pick falls back to an ejected one alike.
        let all_out = endpoints.iter().all(|e| e.is_ejected());
        let scored = endpoints
            .iter()
            .enumerate()
            .filter(|(_, e)| all_out || !e.is_ejected())
            .map(|(i, e)| (score(key, e.addr), i));
        match self.subset {
            None | Some(0 | 1) => scored.max().map(|(_, i)| i),
            Some(size) => {
                let mut scored: Vec<(u64, usize)> = scored.collect();
                if scored.is_empty() {
                    return None;
                }
                let size = (size as usize).min(scored.len());
                scored.select_nth_unstable_by(size - 1, |a, b| b.cmp(a));
                Some(scored[rand::random_range(0..size)].1)
            }
        }
    }
}
/// The first value of query argument `name` (nginx compares the name
/// ASCII case-insensitively).
fn arg<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|pair| {
        let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
        n.eq_ignore_ascii_case(name).then_some(v)
    })
}

/// The endpoint's weight for `key`: the key mixed with the address's own
/// bytes (no text formatting per request), then SplitMix64's finaliser so
/// nearby keys and addresses score independently.
fn score(key: u64, addr: SocketAddr) -> u64 {
    let mut hash = Fnv(key);
    match addr.ip() {
        IpAddr::V4(v4) => hash.write(&v4.octets()),
        IpAddr::V6(v6) => hash.write(&v6.octets()),
    }
    hash.write(&addr.port().to_be_bytes());
    let mut z = hash.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a, 64 bits: fixed, so every replica computes the same key.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;
    use crate::live::endpoints::EndpointRegistry;

    fn upstream(registry: &EndpointRegistry, n: u8) -> Upstream {
        let endpoints = (1..=n)
            .map(|i| registry.endpoint(SocketAddr::from(([10, 0, 0, i], 8080))))
            .collect();
        Upstream::new("ns/web:80".into(), endpoints, None)
    }

    fn vars<'r>(path: &'r str, query: &'r str, headers: &'r http::HeaderMap) -> Vars<'r> {
        Vars {
            path,
            query,
            authority: "Shop.Example:8080",
            client: Some(IpAddr::from([192, 0, 2, 7])),
            headers,
        }
    }

    #[test]
    fn reads_nginx_variables_within_bounds() {
        let h = HashBy::parse("$request_uri", None).unwrap();
        assert_eq!(h.parts, [Part::RequestUri]);
        let h = HashBy::parse("u:${http_x_user}-$cookie_Session$arg_id/$host", None).unwrap();
        assert_eq!(
            h.parts,
            [
                Part::Literal("u:".into()),
                Part::Header("x-user".into()),
                Part::Literal("-".into()),
                Part::Cookie("Session".into()),
                Part::Arg("id".into()),
                Part::Literal("/".into()),
                Part::Host,
            ]
        );
        assert!(h.reads_cookie());
        assert!(HashBy::parse("$remote_addr$remote_addr", None).is_ok());
        for bad in [
            "$upstream_addr",
            "$http_",
            "${host",
            "no variable",
            &"$host".repeat(MAX_VARIABLES + 1),
        ] {
            assert!(HashBy::parse(bad, None).is_err(), "{bad}");
        }
        assert!(HashBy::parse(&"$host".repeat(MAX_VARIABLES), None).is_ok());
    }

    #[test]
    fn keys_follow_the_named_variables_only() {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-user", "alice".parse().unwrap());
        let h = HashBy::parse("$http_x_user $arg_ID", None).unwrap();
        let a = h.key(&vars("/a", "id=7&x=1", &headers), None);
        assert_eq!(a, h.key(&vars("/b", "x=2&Id=7", &headers), None));
        assert_ne!(a, h.key(&vars("/a", "id=8", &headers), None));
        let uri = HashBy::parse("$request_uri", None).unwrap();
        assert_ne!(
            uri.key(&vars("/a", "", &headers), None),
            uri.key(&vars("/a", "q", &headers), None)
        );
        let host = HashBy::parse("$host", None).unwrap();
        let mut other = vars("/", "", &headers);
        other.authority = "shop.example";
        assert_eq!(
            host.key(&vars("/x", "", &headers), None),
            host.key(&other, None)
        );
        let cookie = HashBy::parse("$cookie_sid", None).unwrap();
        assert_ne!(
            cookie.key(&vars("/", "", &headers), Some(b"sid=1; a=2")),
            cookie.key(&vars("/", "", &headers), Some(b"a=2; sid=2"))
        );
    }

    /// Removing one of N endpoints moves only the keys it had (about 1/N);
    /// every other key keeps its endpoint.
    #[test]
    fn removing_an_endpoint_moves_only_its_keys() {
        let registry = EndpointRegistry::default();
        let ten = upstream(&registry, 10);
        let mut nine_endpoints = ten.endpoints.load().to_vec();
        nine_endpoints.remove(3);
        let nine = Upstream::new("ns/web:80".into(), nine_endpoints, None);
        let h = HashBy::parse("$request_uri", None).unwrap();
        let (mut moved, mut per_endpoint) = (0, HashMap::new());
        let keys = 10_000u64;
        for k in 0..keys {
            let key = Fnv(k).0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let before = ten.endpoints.load()[h.choose(&ten, key).unwrap()].addr;
            let after = nine.endpoints.load()[h.choose(&nine, key).unwrap()].addr;
            *per_endpoint.entry(before).or_insert(0u64) += 1;
            if before != after {
                assert_eq!(
                    before,
                    ten.endpoints.load()[3].addr,
                    "a key of a kept endpoint moved"
                );
                moved += 1;
            }
        }
        // About 1/10 each: within 1/20..3/20.
        assert!(moved > keys / 20 && moved < keys * 3 / 20, "{moved} moved");
        assert_eq!(per_endpoint.len(), 10);
        assert!(
            per_endpoint.values().all(|&n| n > keys / 20),
            "{per_endpoint:?}"
        );
    }

    #[test]
    fn ejected_endpoints_lose_their_keys_until_back() {
        let registry = EndpointRegistry::default();
        let up = upstream(&registry, 4);
        let h = HashBy::parse("$request_uri", None).unwrap();
        let key = 42;
        let first = h.choose(&up, key).unwrap();
        up.endpoints.load()[first].eject();
        let second = h.choose(&up, key).unwrap();
        assert_ne!(first, second);
    }

    #[test]
    fn a_subset_keeps_a_key_on_its_few_endpoints() {
        let registry = EndpointRegistry::default();
        let up = upstream(&registry, 6);
        let h = HashBy::parse("$request_uri", Some(3)).unwrap();
        let seen: BTreeSet<usize> = (0..200).map(|_| h.choose(&up, 7).unwrap()).collect();
        assert_eq!(seen.len(), 3);
        let whole = HashBy::parse("$request_uri", Some(10)).unwrap();
        let seen: BTreeSet<usize> = (0..400).map(|_| whole.choose(&up, 7).unwrap()).collect();
        assert_eq!(seen.len(), 6);
    }
}
