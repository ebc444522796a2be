//! `auth-cache-key` and `auth-cache-duration`: the `auth-url` service's
//! answers kept for a while per key, so a request whose key was answered
//! recently is judged on that answer without a sub-request (ingress-nginx
//! caches the sub-request with `proxy_cache`, keyed by the host, the
//! service's path and the expanded key).
//!
//! The key is nginx variables (`$remote_user`, `$http_NAME`,
//! `$cookie_NAME`, `$arg_NAME`, `$host`, `$request_uri`, `$remote_addr`)
//! and literal text, at most [`MAX_VARIABLES`] of them; a request whose
//! key expands to nothing is never answered from the cache. The durations are
//! nginx's `proxy_cache_valid` lines: status codes (or `any`) and a time,
//! several separated by `,` (default `200 202 401 5m`, ingress-nginx's);
//! at most [`MAX_DURATIONS`], each at most [`MAX_TTL`].
//!
//! Entries are per route, at most [`MAX_ENTRIES`], each an answer head of
//! at most [`MAX_HEAD_BYTES`]; the key is a keyed hash (SipHash with a key
//! drawn per route), never the credentials themselves, so neither memory
//! nor a crafted collision is the client's to choose. A route's answers
//! outlive recompiles while its Ingress asks the same of the same service
//! (ingress-nginx's cache outlives reloads, and the service's endpoints
//! changing, which recompiles, must not forget them): [`AuthCache::shared`].

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The most variables one key may name.
pub const MAX_VARIABLES: usize = 8;
/// The most `codes time` items of `auth-cache-duration`.
pub const MAX_DURATIONS: usize = 8;
/// The longest an answer is kept: a revoked credential is honoured at
/// most this long.
pub const MAX_TTL: Duration = Duration::from_secs(3600);
/// Answers kept per route.
pub const MAX_ENTRIES: usize = 1024;
/// An answer head past this many bytes (names and values) is not kept.
pub const MAX_HEAD_BYTES: usize = 4096;

/// ingress-nginx's `auth-cache-duration` default.
pub const DEFAULT_DURATION: &str = "200 202 401 5m";

/// A route's cache of the authentication service's answers.
#[derive(Debug)]
pub struct AuthCache {
    pub(crate) key: Vec<KeyPart>,
    /// `(status, kept for)`; `None`: any status.
    pub(crate) durations: Vec<(Option<u16>, Duration)>,
    pub(crate) answers: Arc<Answers>,
}

/// The kept answers and the key of their hash.
#[derive(Debug, Default)]
pub(crate) struct Answers {
    pub(crate) hasher: std::hash::RandomState,
    pub(crate) entries: Mutex<HashMap<u64, Entry>>,
}

#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) until: Instant,
    pub(crate) status: http::StatusCode,
    pub(crate) headers: http::HeaderMap,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyPart {
    Literal(String),
    RemoteUser,
    RequestUri,
    RemoteAddr,
    Host,
    /// Lowercase, `_` read as `-`.
    Header(String),
    Cookie(String),
    Arg(String),
}

impl AuthCache {
    /// Reads `auth-cache-key` and `auth-cache-duration` (`None`: the
    /// default); `Err` says why they cannot be served.
    pub fn parse(key: &str, durations: Option<&str>) -> Result<AuthCache, String> {
        Ok(AuthCache {
            key: parse_key(key)?,
            durations: parse_durations(durations.unwrap_or(DEFAULT_DURATION))?,
            answers: Arc::default(),
        })
    }

    /// This cache with the answers a previous compile kept for the same
    /// `identity` (the Ingress, its `auth-url` and these annotations),
    /// while any snapshot still holds them.
    pub fn shared(mut self, identity: &str) -> AuthCache {
        static LIVE: OnceLock<Mutex<HashMap<String, Weak<Answers>>>> = OnceLock::new();
        let mut live = LIVE.get_or_init(Default::default).lock();
        live.retain(|_, w| w.strong_count() > 0);
        match live.get(identity).and_then(Weak::upgrade) {
            Some(answers) => self.answers = answers,
            None => {
                live.insert(identity.to_string(), Arc::downgrade(&self.answers));
            }
        }
        self
    }

    /// How long an answer with `status` is kept (`None`: not kept).
    pub fn ttl(&self, status: u16) -> Option<Duration> {
        self.durations
            .iter()
            .find(|(s, _)| s.is_none_or(|s| s == status))
            .map(|(_, d)| *d)
    }
}

use crate::compile::nginx_variables::{Piece, pieces};

fn parse_key(value: &str) -> Result<Vec<KeyPart>, String> {
    let mut parts = Vec::new();
    for piece in pieces(value, MAX_VARIABLES)? {
        let name = match piece {
            Piece::Text(text) => {
                parts.push(KeyPart::Literal(text.to_string()));
                continue;
            }
            Piece::Variable(name) => name,
        };
        let named = |prefix: &str| {
            name.strip_prefix(prefix)
                .filter(|n| !n.is_empty())
                .map(str::to_ascii_lowercase)
        };
        let part = match name {
            "remote_user" => KeyPart::RemoteUser,
            "request_uri" => KeyPart::RequestUri,
            "remote_addr" => KeyPart::RemoteAddr,
            "host" => KeyPart::Host,
            _ => {
                if let Some(h) = named("http_") {
                    KeyPart::Header(h.replace('_', "-"))
                } else if let Some(c) = name.strip_prefix("cookie_").filter(|n| !n.is_empty()) {
                    KeyPart::Cookie(c.to_string())
                } else if let Some(a) = named("arg_") {
                    KeyPart::Arg(a)
                } else {
                    return Err(format!(
                        "{value:?}: ${name} is not one of $remote_user, $http_NAME, $cookie_NAME, $arg_NAME, $host, $request_uri, $remote_addr"
                    ));
                }
            }
        };
        parts.push(part);
    }
    // A key of literal text alone (ingress-nginx's e2e `fixed`) is
    // served as written: every request of the route shares one answer.
    Ok(parts)
}

fn parse_durations(value: &str) -> Result<Vec<(Option<u16>, Duration)>, String> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let words: Vec<&str> = item.split_ascii_whitespace().collect();
        let Some((time, codes)) = words.split_last() else {
            continue;
        };
        let ttl = nginx_time(time)
            .ok_or_else(|| format!("{item:?}: {time:?} is not a time such as 30s, 5m, 1h"))?;
        if ttl > MAX_TTL {
            return Err(format!("{item:?}: {time} is longer than 1h"));
        }
        // nginx: a time alone keeps 200, 301 and 302.
        let codes: Vec<Option<u16>> = if codes.is_empty() {
            vec![Some(200), Some(301), Some(302)]
        } else {
            codes
                .iter()
                .map(|c| match *c {
                    "any" => Ok(None),
                    c => c
                        .parse::<u16>()
                        .ok()
                        .filter(|s| (100..=599).contains(s))
                        .map(Some)
                        .ok_or_else(|| format!("{item:?}: {c:?} is not a status code or any")),
                })
                .collect::<Result<_, _>>()?
        };
        out.extend(codes.into_iter().map(|c| (c, ttl)));
        if out.len() > MAX_DURATIONS * 4 {
            return Err(format!("{value:?} lists too many statuses"));
        }
    }
    if out.is_empty() || value.split(',').count() > MAX_DURATIONS {
        return Err(format!(
            "{value:?}: one to {MAX_DURATIONS} items of status codes and a time"
        ));
    }
    Ok(out)
}

/// nginx's time: a number with `s`, `m`, `h` (or none: seconds), possibly
/// several (`1m30s`).
fn nginx_time(text: &str) -> Option<Duration> {
    let mut total = 0u64;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            if number.len() > 6 {
                return None;
            }
            continue;
        }
        let n: u64 = number.parse().ok()?;
        number.clear();
        total += n * match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return None,
        };
    }
    if !number.is_empty() {
        total += number.parse::<u64>().ok()?;
    }
    (total > 0).then(|| Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_outlive_a_recompile_of_the_same_identity_only() {
        let first = AuthCache::parse("$host", None).unwrap().shared("ns/a\nx");
        let again = AuthCache::parse("$host", None).unwrap().shared("ns/a\nx");
        let other = AuthCache::parse("$host", None).unwrap().shared("ns/b\nx");
        assert!(Arc::ptr_eq(&first.answers, &again.answers));
        assert!(!Arc::ptr_eq(&first.answers, &other.answers));
        drop((first, again));
        let later = AuthCache::parse("$host", None).unwrap().shared("ns/a\nx");
        assert_eq!(Arc::strong_count(&later.answers), 1);
    }

    #[test]
    fn reads_keys_and_durations_within_bounds() {
        let c = AuthCache::parse("$remote_user$http_authorization", None).unwrap();
        assert_eq!(
            c.key,
            [KeyPart::RemoteUser, KeyPart::Header("authorization".into())]
        );
        assert_eq!(c.ttl(200), Some(Duration::from_secs(300)));
        assert_eq!(c.ttl(401), Some(Duration::from_secs(300)));
        assert_eq!(c.ttl(403), None);
        let c = AuthCache::parse("$cookie_s", Some("200 202 10m, 401 30s, any 1m")).unwrap();
        assert_eq!(c.ttl(202), Some(Duration::from_secs(600)));
        assert_eq!(c.ttl(401), Some(Duration::from_secs(30)));
        assert_eq!(c.ttl(500), Some(Duration::from_secs(60)));
        let c = AuthCache::parse("$host", Some("1m30s")).unwrap();
        assert_eq!(c.ttl(200), Some(Duration::from_secs(90)));
        assert_eq!(c.ttl(401), None);
        for (key, durations) in [
            ("$upstream_addr", None),
            ("${host", None),
            (&"$host".repeat(MAX_VARIABLES + 1)[..], None),
            ("$host", Some("200 2h")),
            ("$host", Some("200 5y")),
            ("$host", Some("999 5m")),
            ("$host", Some("")),
            (
                "$host",
                Some("200 1s,200 1s,200 1s,200 1s,200 1s,200 1s,200 1s,200 1s,200 1s"),
            ),
        ] {
            assert!(
                AuthCache::parse(key, durations).is_err(),
                "{key} {durations:?}"
            );
        }
    }
}
