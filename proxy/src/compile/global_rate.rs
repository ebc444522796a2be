//! ingress-nginx's `global-rate-limit`: at most `global-rate-limit`
//! requests per `global-rate-limit-window` for each value of
//! `global-rate-limit-key` (default `$remote_addr`), counted over the
//! whole fleet rather than per replica; clients in
//! `global-rate-limit-ignored-cidrs` are not counted. Over the limit, 429
//! (ingress-nginx's `global-rate-limit-status-code` default).
//!
//! Read once per compile into a [`GlobalRate`] a route's
//! [`crate::compile::traffic::TrafficPolicy`] carries; the counts are the
//! route's in crate::live::global_counts (kept across compiles while the
//! route's name, limit and window stay), exchanged with the other
//! replicas by crate::loops::fleet_exchange; the request path is
//! crate::plane::traffic::global_rate.
//!
//! As in ingress-nginx, a limit of 0 or no window is no limit, and a key
//! that expands to nothing on a request counts it under its client
//! address. The key is read by the one reader of nginx variables
//! (crate::compile::nginx_variables) with `upstream-hash-by`'s names, and
//! hashed per request, never kept: its length costs no memory. Bounds:
//! the annotations' (a limit of at most [`MAX_LIMIT`], a window of 1 s to
//! 1 h, a key of at most 256 bytes and 8 variables) and
//! [`MAX_IGNORED_CIDRS`] ignored networks.

use std::sync::Arc;

use ipnet::IpNet;
use teapot_api::annotations::{AnnotationValue, NGINX_PREFIX};

use crate::compile::hash_by::{HashBy, Part};
use crate::live::global_counts::{GlobalCounts, RouteCounts};

/// The largest `global-rate-limit` admitted (the annotation's bound).
pub const MAX_LIMIT: u32 = 1_000_000;
/// Networks `global-rate-limit-ignored-cidrs` may list; those past it
/// are not ignored (the limit applies to them), and reported.
pub const MAX_IGNORED_CIDRS: usize = 64;

/// A route's global rate limit.
#[derive(Debug)]
pub struct GlobalRate {
    /// Its counts, with its limit and window.
    pub counts: Arc<RouteCounts>,
    /// `global-rate-limit-key`; `None`: `$remote_addr`.
    pub key: Option<HashBy>,
    /// A request whose key expands to nothing counts under its client
    /// address (the key names only variables).
    pub falls_back: bool,
    /// `global-rate-limit-ignored-cidrs`.
    pub ignored: Vec<IpNet>,
}

/// The global rate limit the annotations ask for (`get`: a typed value by
/// its name after the prefix, an Ingress's or those a RouteTrafficPolicy
/// stands for) on the route named `route` (an
/// Ingress's `namespace/name`) of `owner` (its tenant cluster, "" for the
/// operator namespaces); `None`: none, or none that can be served
/// (reported). Without a fleet (crate::live::global_counts) each replica
/// enforces the whole limit alone ([`alone_notice`]).
pub fn read<'v>(
    get: impl Fn(&str) -> Option<&'v AnnotationValue>,
    route: &str,
    owner: &str,
    counts: &GlobalCounts,
    problems: &mut Vec<String>,
) -> Option<Arc<GlobalRate>> {
    let limit = match get("global-rate-limit") {
        Some(AnnotationValue::Count(n)) => *n,
        _ => 0,
    };
    let window = match get("global-rate-limit-window") {
        Some(AnnotationValue::Duration(d)) => Some(*d),
        _ => None,
    };
    let (limit, window) = match (limit, window) {
        (0, _) => return None,
        (_, None) => {
            problems.push(format!(
                "{NGINX_PREFIX}global-rate-limit: without a global-rate-limit-window it limits nothing, as in ingress-nginx"
            ));
            return None;
        }
        (limit, Some(window)) => (limit.min(MAX_LIMIT), window),
    };
    let window_ms = (window.as_millis() as u64).clamp(1_000, 3_600_000);
    let key = match get("global-rate-limit-key") {
        Some(AnnotationValue::Text(t)) => Some(t.trim()),
        _ => None,
    };
    let (key, falls_back) = match key {
        None | Some("") | Some("$remote_addr") | Some("${remote_addr}") => (None, false),
        Some(value) => match parse_key(value) {
            Ok(key) => {
                let falls_back = !key.parts.iter().any(|p| matches!(p, Part::Literal(_)));
                (Some(key), falls_back)
            }
            Err(why) => {
                // ingress-nginx falls back to `$remote_addr` on a key it
                // cannot read; the limit stays, never open.
                problems.push(format!(
                    "{NGINX_PREFIX}global-rate-limit-key: {why}; counted per client address"
                ));
                (None, false)
            }
        },
    };
    let mut ignored: Vec<IpNet> = match get("global-rate-limit-ignored-cidrs") {
        Some(AnnotationValue::Cidrs(nets)) => nets.clone(),
        _ => Vec::new(),
    };
    if ignored.len() > MAX_IGNORED_CIDRS {
        problems.push(format!(
            "{NGINX_PREFIX}global-rate-limit-ignored-cidrs: {} networks, only the first {MAX_IGNORED_CIDRS} are ignored (the limit applies to the rest)",
            ignored.len()
        ));
        ignored.truncate(MAX_IGNORED_CIDRS);
    }
    Some(Arc::new(GlobalRate {
        counts: counts.route(route, owner, limit, window_ms),
        key,
        falls_back,
        ignored,
    }))
}

/// What an Ingress with a global rate limit is told when the fleet runs
/// without `--fleet-peers` or `--fleet-service`: each replica enforces the
/// whole limit alone.
pub fn alone_notice(counts: &GlobalCounts) -> Option<String> {
    (!counts.is_fleet()).then(|| {
        format!(
            "{NGINX_PREFIX}global-rate-limit: the fleet runs without --fleet-peers or --fleet-service, so each replica enforces the whole limit alone"
        )
    })
}

/// The key: nginx variables (`upstream-hash-by`'s names) and literal
/// text; text alone is one counter for every request of the route.
fn parse_key(value: &str) -> Result<HashBy, String> {
    if !value.contains('$') {
        return Ok(HashBy {
            parts: vec![Part::Literal(value.to_string())],
            subset: None,
        });
    }
    HashBy::parse(value, None)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn read_pairs(
        counts: &GlobalCounts,
        pairs: &[(&str, &str)],
    ) -> (Option<Arc<GlobalRate>>, Vec<String>) {
        use teapot_api::annotations::{ObjectKind, parse};
        let mut problems = Vec::new();
        let mut values = BTreeMap::new();
        for (name, value) in pairs {
            let key = format!("{NGINX_PREFIX}{name}");
            match parse(ObjectKind::Ingress, &key, value) {
                Ok(v) => drop(values.insert(*name, v)),
                Err(e) => problems.push(format!("{key}: {e}")),
            }
        }
        let rate = read(|n| values.get(n), "ns/web", "t", counts, &mut problems);
        problems.extend(rate.as_ref().and_then(|_| alone_notice(counts)));
        (rate, problems)
    }

    #[test]
    fn limit_window_key_and_ignored_networks() {
        let counts = GlobalCounts::default();
        counts.set_fleet(true);
        let (rate, problems) = read_pairs(
            &counts,
            &[
                ("global-rate-limit", "5"),
                ("global-rate-limit-window", "2m"),
                (
                    "global-rate-limit-key",
                    "${remote_addr}${http_x_api_client}",
                ),
                (
                    "global-rate-limit-ignored-cidrs",
                    "192.168.1.1, 234.234.234.0/24",
                ),
            ],
        );
        assert!(problems.is_empty(), "{problems:?}");
        let rate = rate.unwrap();
        assert_eq!(rate.counts.limit, 5);
        assert_eq!(rate.counts.window_ms, 120_000);
        assert!(rate.falls_back);
        assert_eq!(rate.key.as_ref().unwrap().parts.len(), 2);
        assert_eq!(rate.ignored.len(), 2);
        // The same annotations on a recompile: the same counts.
        let (again, _) = read_pairs(
            &counts,
            &[
                ("global-rate-limit", "5"),
                ("global-rate-limit-window", "2m"),
            ],
        );
        assert!(Arc::ptr_eq(&rate.counts, &again.unwrap().counts));
    }

    #[test]
    fn no_limit_without_window_or_with_zero() {
        let counts = GlobalCounts::default();
        counts.set_fleet(true);
        let (rate, problems) = read_pairs(&counts, &[("global-rate-limit", "5")]);
        assert!(rate.is_none());
        assert!(problems[0].contains("without a global-rate-limit-window"));
        let (rate, problems) = read_pairs(
            &counts,
            &[
                ("global-rate-limit", "0"),
                ("global-rate-limit-window", "1m"),
            ],
        );
        assert!(rate.is_none() && problems.is_empty(), "{problems:?}");
    }

    /// Hostile values: an unreadable key keeps the limit per client
    /// address; a window outside 1 s to 1 h, a limit past the bound and a
    /// ninth variable are refused by the annotations' parsers.
    #[test]
    fn hostile_values_never_open_the_route() {
        let counts = GlobalCounts::default();
        let (rate, problems) = read_pairs(
            &counts,
            &[
                ("global-rate-limit", "5"),
                ("global-rate-limit-window", "1m"),
                ("global-rate-limit-key", "$nope"),
            ],
        );
        let rate = rate.unwrap();
        assert!(rate.key.is_none());
        assert!(
            problems
                .iter()
                .any(|p| p.contains("counted per client address"))
        );
        // Alone (no fleet): served, and said.
        assert!(problems.iter().any(|p| p.contains("each replica enforces")));
        for (name, value) in [
            ("global-rate-limit-window", "500ms"),
            ("global-rate-limit-window", "2h"),
            ("global-rate-limit", "1000001"),
            ("global-rate-limit-key", &"$host".repeat(9)),
        ] {
            let (_, problems) = read_pairs(
                &counts,
                &[
                    ("global-rate-limit", "5"),
                    ("global-rate-limit-window", "1m"),
                    (name, value),
                ],
            );
            assert!(
                problems.iter().any(|p| p.contains(name)),
                "{name}={value}: {problems:?}"
            );
        }
        let many: Vec<String> = (0..100).map(|i| format!("10.0.{i}.0/24")).collect();
        let (rate, problems) = read_pairs(
            &counts,
            &[
                ("global-rate-limit", "5"),
                ("global-rate-limit-window", "1m"),
                ("global-rate-limit-ignored-cidrs", &many.join(",")),
            ],
        );
        assert_eq!(rate.unwrap().ignored.len(), MAX_IGNORED_CIDRS);
        assert!(problems.iter().any(|p| p.contains("only the first")));
    }

    #[test]
    fn literal_keys_count_the_route_as_one() {
        let counts = GlobalCounts::default();
        let (rate, _) = read_pairs(
            &counts,
            &[
                ("global-rate-limit", "5"),
                ("global-rate-limit-window", "1m"),
                ("global-rate-limit-key", "everyone"),
            ],
        );
        let rate = rate.unwrap();
        assert!(!rate.falls_back);
        assert_eq!(
            rate.key.as_ref().unwrap().parts,
            [Part::Literal("everyone".into())]
        );
    }
}
