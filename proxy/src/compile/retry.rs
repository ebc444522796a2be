//! ingress-nginx's `proxy-next-upstream`, `proxy-next-upstream-tries` and
//! `proxy-next-upstream-timeout` as the engines' retry policy
//! (`teapot_h1::retry`), the one an HTTPRoute rule's `retry` also becomes
//! (crate::compile::gateway::retry): read once per compile, carried by a
//! route's [`crate::compile::traffic::TrafficPolicy`] only when one of
//! them is set, so a route without them pays nothing.
//!
//! As nginx: the conditions are `error` (connect refused or reset, the
//! backend closing before its answer), `timeout`, `invalid_header` (teapot
//! counts a broken answer head as an `error`: either word retries both),
//! `http_500`, `http_502`, `http_503`, `http_504`, `http_403`, `http_404`,
//! `http_429`, `non_idempotent` (POST, PATCH, LOCK... retried too), or
//! `off`; unset, "error timeout". `-tries` counts every try, the first
//! included (default 3; 0, nginx's "no limit", is teapot's most:
//! `MAX_RETRIES + 1`); `-timeout` bounds all of them together in seconds
//! (0: no bound). A retry goes to an endpoint the request has not tried
//! ("next upstream"): with every endpoint tried, the last answer stands.
//! A request is sent again only when teapot holds all of it: no body, or
//! a body read whole with its head (`proxy-request-buffering: on` holds
//! it); a body still streaming is never sent twice.
//!
//! Difference kept: without these annotations teapot does not retry an
//! answer's failures as nginx's default "error timeout" does; a connect
//! failure moves on to the next endpoint as ever (`--max-connect-attempts`).

use std::sync::Arc;
use std::time::Duration;

use teapot_api::annotations::AnnotationValue;
use teapot_h1::RetryPolicy;
use teapot_h1::retry::MAX_RETRIES;

/// nginx's `proxy-next-upstream-tries` default.
pub const DEFAULT_TRIES: u32 = 3;

/// The policy of an Ingress's `proxy-next-upstream*` annotations, each
/// admitted value by its name after the prefix from `get`; `None` when
/// none is set, with `off`, or with a single try.
pub fn read<'a>(
    get: impl Fn(&str) -> Option<&'a AnnotationValue>,
    problems: &mut Vec<String>,
) -> Option<Arc<RetryPolicy>> {
    let words = match get("proxy-next-upstream") {
        Some(AnnotationValue::List(words)) => Some(words.as_slice()),
        _ => None,
    };
    let count = |name: &str| match get(name) {
        Some(AnnotationValue::Count(n)) => Some(*n),
        _ => None,
    };
    let tries = count("proxy-next-upstream-tries");
    let timeout = count("proxy-next-upstream-timeout");
    if words.is_none() && tries.is_none() && timeout.is_none() {
        return None;
    }
    let words: Vec<&str> = match words {
        Some(w) => w.iter().map(String::as_str).collect(),
        None => vec!["error", "timeout"],
    };
    if words.contains(&"off") {
        if words.len() > 1 {
            problems.push(
                "nginx.ingress.kubernetes.io/proxy-next-upstream: off with other conditions; nothing is retried, as nginx reads it"
                    .into(),
            );
        }
        return None;
    }
    let tries = match tries.unwrap_or(DEFAULT_TRIES) {
        0 => MAX_RETRIES + 1,
        n => n.min(MAX_RETRIES + 1),
    };
    if tries < 2 {
        return None;
    }
    let mut policy = RetryPolicy::new(tries - 1);
    for word in &words {
        match *word {
            "error" | "invalid_header" => policy.on_error = true,
            "timeout" => policy.on_timeout = true,
            "non_idempotent" => policy.any_method = true,
            code => {
                if let Some(status) = code.strip_prefix("http_").and_then(|c| c.parse().ok()) {
                    policy.retry_status(status);
                }
            }
        }
    }
    let budget = timeout.map(|s| Duration::from_secs(u64::from(s)));
    Some(Arc::new(policy.with_budget(budget)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::traffic::NginxAnnotations;

    fn read_pairs(pairs: &[(&str, &str)]) -> (Option<Arc<RetryPolicy>>, Vec<String>) {
        let map = pairs
            .iter()
            .map(|(k, v)| (format!("nginx.ingress.kubernetes.io/{k}"), v.to_string()))
            .collect();
        let mut problems = Vec::new();
        let nginx = NginxAnnotations::read(Some(&map), &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        (read(|name| nginx.get(name), &mut problems), problems)
    }

    #[test]
    fn nginx_words_become_the_policy() {
        let (p, _) = read_pairs(&[(
            "proxy-next-upstream",
            "error timeout http_503 http_429 non_idempotent",
        )]);
        let p = p.unwrap();
        assert!(p.on_error && p.on_timeout && p.any_method);
        assert!(!p.same_endpoint_again);
        assert_eq!(p.statuses().collect::<Vec<_>>(), [429, 503]);
        // nginx's default: 3 tries, so 2 retries; no budget.
        assert_eq!((p.retries(), p.budget()), (2, None));
        let (p, _) = read_pairs(&[
            ("proxy-next-upstream", "http_502"),
            ("proxy-next-upstream-tries", "5"),
            ("proxy-next-upstream-timeout", "7"),
        ]);
        let p = p.unwrap();
        assert!(!p.on_error && !p.on_timeout && !p.any_method);
        assert_eq!(p.retries(), 4);
        assert_eq!(p.budget(), Some(Duration::from_secs(7)));
        // Only the count: nginx's default conditions.
        let (p, _) = read_pairs(&[("proxy-next-upstream-tries", "2")]);
        let p = p.unwrap();
        assert!(p.on_error && p.on_timeout && p.statuses().count() == 0);
        assert_eq!(p.retries(), 1);
    }

    #[test]
    fn off_one_try_or_nothing_is_no_policy() {
        assert!(read_pairs(&[]).0.is_none());
        assert!(read_pairs(&[("proxy-next-upstream", "off")]).0.is_none());
        let (p, problems) = read_pairs(&[("proxy-next-upstream", "off error")]);
        assert!(p.is_none());
        assert_eq!(problems.len(), 1);
        assert!(
            read_pairs(&[("proxy-next-upstream-tries", "1")])
                .0
                .is_none()
        );
    }

    /// nginx's "no limit" is teapot's most; admission refuses more than
    /// that, or a word it does not know, said twice, or too long a bound.
    #[test]
    fn unlimited_tries_are_teapots_most_and_more_is_refused() {
        use teapot_api::annotations::{ObjectKind, parse};
        let (p, _) = read_pairs(&[("proxy-next-upstream-tries", "0")]);
        assert_eq!(p.unwrap().retries(), MAX_RETRIES);
        let key = |k: &str| format!("nginx.ingress.kubernetes.io/{k}");
        let refused = |k: &str, v: &str| parse(ObjectKind::Ingress, &key(k), v).is_err();
        assert!(refused("proxy-next-upstream-tries", "7"));
        assert!(refused("proxy-next-upstream-tries", "1000000"));
        assert!(refused("proxy-next-upstream-timeout", "601"));
        assert!(refused("proxy-next-upstream", "error error"));
        assert!(refused("proxy-next-upstream", "http_200"));
        assert!(refused("proxy-next-upstream", ""));
        let hostile = "error ".repeat(10_000);
        assert!(refused("proxy-next-upstream", &hostile));
        assert!(!refused("proxy-next-upstream-tries", "6"));
        assert!(!refused("proxy-next-upstream", "error  timeout http_429"));
        // Every allowed value read back is at most teapot's bounds.
        let (p, _) = read_pairs(&[
            ("proxy-next-upstream-tries", "6"),
            ("proxy-next-upstream-timeout", "600"),
        ]);
        let p = p.unwrap();
        assert_eq!(p.retries(), MAX_RETRIES);
        assert_eq!(p.budget(), Some(Duration::from_secs(600)));
    }
}
