//! ingress-nginx's bandwidth limit of a route: `limit-rate` (KiB per
//! second of each response to the client) and `limit-rate-after` (KiB
//! sent at full speed first), or a RouteTrafficPolicy's `bandwidth`,
//! which stands for the same annotations. Read once per compile into a
//! [`Bandwidth`] that a route's
//! [`crate::compile::traffic::TrafficPolicy`] carries only when a rate is
//! set, so a route without one pays nothing; the pacing itself is
//! crate::plane::traffic::bandwidth.
//!
//! As in ingress-nginx, `limit-rate: "0"` (or no `limit-rate`) is no
//! limit, and `limit-rate-after` alone does nothing. The bounds are the
//! annotations' (`teapot_api::annotations`): a rate of 1 KiB/s to
//! [`MAX_KIB`] KiB/s, `limit-rate-after` at most [`MAX_KIB`] KiB.

use teapot_api::annotations::NGINX_PREFIX;

use crate::compile::proxying::Annotations;

/// The largest `limit-rate` (KiB/s) and `limit-rate-after` (KiB) admitted:
/// 1 GiB/s is more than one client's share of a proxy's link, and 1 GiB
/// at full speed is a whole large download.
pub const MAX_KIB: u32 = 1 << 20;

/// One response's limit, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bandwidth {
    /// Bytes per second once `after` bytes have gone (at least 1024).
    pub rate: u64,
    /// Bytes of the body sent at full speed first.
    pub after: u64,
}

impl Bandwidth {
    /// From the annotations' KiB values; `None` for no limit (a rate of 0).
    pub fn from_kib(rate: u32, after: u32) -> Option<Bandwidth> {
        (rate > 0).then(|| Bandwidth {
            rate: u64::from(rate.min(MAX_KIB)) * 1024,
            after: u64::from(after.min(MAX_KIB)) * 1024,
        })
    }
}

/// The [`Bandwidth`] of `nginx` (`None`: no `limit-rate`, or 0). A
/// `limit-rate-after` without a rate is reported: it limits nothing, in
/// ingress-nginx as here.
pub fn read(nginx: &impl Annotations, problems: &mut Vec<String>) -> Option<Bandwidth> {
    let rate = nginx.count("limit-rate").unwrap_or(0);
    let after = nginx.count("limit-rate-after").unwrap_or(0);
    if rate == 0 && after > 0 {
        problems.push(format!(
            "{NGINX_PREFIX}limit-rate-after: without a limit-rate it limits nothing; responses go at full speed"
        ));
    }
    Bandwidth::from_kib(rate, after)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Map(&'static [(&'static str, u32)]);

    impl Annotations for Map {
        fn text(&self, _: &str) -> Option<&str> {
            None
        }
        fn flag(&self, _: &str) -> Option<bool> {
            None
        }
        fn count(&self, name: &str) -> Option<u32> {
            self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
        }
    }

    fn read_map(pairs: &'static [(&'static str, u32)]) -> (Option<Bandwidth>, Vec<String>) {
        let mut problems = Vec::new();
        (read(&Map(pairs), &mut problems), problems)
    }

    #[test]
    fn rates_are_kib_per_second_and_zero_is_no_limit() {
        assert_eq!(
            read_map(&[("limit-rate", 64), ("limit-rate-after", 16)]),
            (
                Some(Bandwidth {
                    rate: 64 * 1024,
                    after: 16 * 1024
                }),
                vec![]
            )
        );
        assert_eq!(read_map(&[("limit-rate", 0)]), (None, vec![]));
        assert_eq!(read_map(&[]), (None, vec![]));
    }

    /// Hostile values never reach the reader: the annotations' parser
    /// refuses them, naming the bounds (the Ingress's status and the
    /// webhook name the annotation with it).
    #[test]
    fn values_past_the_bounds_are_refused() {
        use teapot_api::annotations::{ObjectKind, parse};
        for name in ["limit-rate", "limit-rate-after"] {
            let key = format!("{NGINX_PREFIX}{name}");
            for bad in ["1048577", "4294967296", "-1", "64k", "1.5", " "] {
                let e = parse(ObjectKind::Ingress, &key, bad).unwrap_err();
                assert!(e.to_string().contains("0 to 1048576"), "{name}={bad}: {e}");
            }
            for good in ["0", "1", "1048576"] {
                assert!(
                    parse(ObjectKind::Ingress, &key, good).is_ok(),
                    "{name}={good}"
                );
            }
        }
        assert_eq!(
            Bandwidth::from_kib(MAX_KIB, MAX_KIB),
            Some(Bandwidth {
                rate: 1 << 30,
                after: 1 << 30
            })
        );
    }

    #[test]
    fn limit_rate_after_alone_is_reported() {
        let (bandwidth, problems) = read_map(&[("limit-rate-after", 10)]);
        assert_eq!(bandwidth, None);
        assert!(
            problems[0].contains("limit-rate-after") && problems[0].contains("limits nothing"),
            "{problems:?}"
        );
    }
}
