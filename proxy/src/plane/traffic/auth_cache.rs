//! The `auth-url` answers a route keeps ([`AuthCache`], its bounds and
//! reading in crate::compile::auth_cache): a request's key, and the
//! answer kept for it.

use std::hash::{BuildHasher, Hasher};
use std::time::Instant;

use super::auth::Original;
pub use crate::compile::auth_cache::AuthCache;
use crate::compile::auth_cache::{Entry, KeyPart, MAX_ENTRIES, MAX_HEAD_BYTES};

impl AuthCache {
    /// The request's key: a keyed hash of each part's bytes, each ended
    /// by a byte no value holds. `None` when the key expands to nothing:
    /// an anonymous request is always asked about.
    pub fn key(&self, original: &Original<'_>) -> Option<u64> {
        let mut hash = self.answers.hasher.build_hasher();
        let mut some = false;
        let mut write = |hash: &mut std::hash::DefaultHasher, bytes: &[u8]| {
            some |= !bytes.is_empty();
            hash.write(bytes);
        };
        let headers = original.headers;
        let query = original.target.split_once('?').map_or("", |(_, q)| q);
        // One route's policy may serve several hosts: each has its own
        // answers, as nginx's cache key starts with the server's name.
        hash.write(original.authority.as_bytes());
        hash.write_u8(0xff);
        for part in &self.key {
            match part {
                KeyPart::Literal(text) => write(&mut hash, text.as_bytes()),
                KeyPart::RemoteUser => {
                    let user = headers
                        .first("authorization")
                        .and_then(super::basic_auth::credentials)
                        .map(|(user, _)| user);
                    write(&mut hash, user.as_deref().unwrap_or_default());
                }
                KeyPart::RequestUri => write(&mut hash, original.target.as_bytes()),
                KeyPart::RemoteAddr => {
                    if let Some(ip) = original.client {
                        write(&mut hash, ip.to_string().as_bytes());
                    }
                }
                KeyPart::Host => write(&mut hash, original.authority.as_bytes()),
                KeyPart::Header(name) => {
                    write(&mut hash, headers.first(name).unwrap_or_default());
                }
                KeyPart::Cookie(name) => {
                    let value = super::affinity::cookie(headers.first("cookie"), name);
                    write(&mut hash, value.unwrap_or_default());
                }
                KeyPart::Arg(name) => {
                    let value = query.split('&').find_map(|pair| {
                        let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
                        n.eq_ignore_ascii_case(name).then_some(v)
                    });
                    write(&mut hash, value.unwrap_or_default().as_bytes());
                }
            }
            hash.write_u8(0xff);
        }
        some.then(|| hash.finish())
    }

    /// The answer kept for `key`, while it is fresh.
    pub fn get(&self, key: u64) -> Option<http::response::Parts> {
        let entries = self.answers.entries.lock();
        let entry = entries.get(&key).filter(|e| e.until > Instant::now())?;
        let (mut parts, ()) = http::Response::new(()).into_parts();
        parts.status = entry.status;
        parts.headers = entry.headers.clone();
        Some(parts)
    }

    /// Keeps `answer` for `key` when its status is one the durations name
    /// and its head is small enough; a full cache first drops its stale
    /// entries, and keeps nothing more while every one is fresh.
    pub fn put(&self, key: u64, answer: &http::response::Parts) {
        let Some(ttl) = self.ttl(answer.status.as_u16()) else {
            return;
        };
        let bytes: usize = answer
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len())
            .sum();
        if bytes > MAX_HEAD_BYTES {
            return;
        }
        let now = Instant::now();
        let mut entries = self.answers.entries.lock();
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(&key) {
            entries.retain(|_, e| e.until > now);
            if entries.len() >= MAX_ENTRIES {
                return;
            }
        }
        entries.insert(
            key,
            Entry {
                until: now + ttl,
                status: answer.status,
                headers: answer.headers.clone(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn original<'r>(headers: &'r http::HeaderMap, target: &'r str) -> Original<'r> {
        Original {
            method: "GET",
            authority: "shop.test",
            target,
            tls: false,
            client: Some("192.0.2.7".parse().unwrap()),
            request_id: "r",
            headers,
        }
    }

    fn answer(status: u16) -> http::response::Parts {
        let (mut parts, ()) = http::Response::new(()).into_parts();
        parts.status = http::StatusCode::from_u16(status).unwrap();
        parts.headers.insert("x-user", "ann".parse().unwrap());
        parts
    }

    #[test]
    fn keys_follow_the_variables_and_an_empty_key_is_never_cached() {
        let c = AuthCache::parse("$remote_user$http_authorization", None).unwrap();
        let mut a = http::HeaderMap::new();
        a.insert("authorization", "Basic dW5hbWU6cHdk".parse().unwrap());
        let mut b = http::HeaderMap::new();
        b.insert("authorization", "Basic dW5hbWU6cHdl".parse().unwrap());
        let none = http::HeaderMap::new();
        let ka = c.key(&original(&a, "/")).unwrap();
        assert_eq!(Some(ka), c.key(&original(&a, "/other")));
        assert_ne!(Some(ka), c.key(&original(&b, "/")));
        assert_eq!(c.key(&original(&none, "/")), None);
        let args = AuthCache::parse("$arg_token", None).unwrap();
        assert_ne!(
            args.key(&original(&none, "/?token=1")),
            args.key(&original(&none, "/?TOKEN=2"))
        );
        assert_eq!(args.key(&original(&none, "/?x=1")), None);
    }

    #[test]
    fn answers_are_kept_for_their_status_duration_within_bounds() {
        let c = AuthCache::parse("$http_x_key", Some("200 1m")).unwrap();
        c.put(1, &answer(200));
        c.put(2, &answer(401));
        assert_eq!(c.get(1).unwrap().headers["x-user"], "ann");
        assert!(c.get(2).is_none(), "401 is not listed");
        let mut huge = answer(200);
        huge.headers
            .insert("x-big", "a".repeat(MAX_HEAD_BYTES).parse().unwrap());
        c.put(3, &huge);
        assert!(c.get(3).is_none());
        // Full: nothing more while every entry is fresh.
        for k in 10..(10 + MAX_ENTRIES as u64) {
            c.put(k, &answer(200));
        }
        assert_eq!(c.answers.entries.lock().len(), MAX_ENTRIES);
        assert!(c.get(10 + MAX_ENTRIES as u64 - 1).is_none());
        // Stale entries make room.
        for e in c.answers.entries.lock().values_mut() {
            e.until = Instant::now() - Duration::from_secs(1);
        }
        c.put(99_999, &answer(200));
        assert!(c.get(99_999).is_some());
        assert_eq!(c.answers.entries.lock().len(), 1);
    }
}
