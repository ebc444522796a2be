//! ingress-nginx's body buffering of a route: `proxy-request-buffering`
//! (the request body read whole before the backend is contacted, up to
//! `client-body-buffer-size`) and `proxy-buffering` (the backend's answer
//! read ahead of the client, up to `proxy-buffers-number` times
//! `proxy-buffer-size`), or a RouteTrafficPolicy's `buffering`, which
//! stands for the same annotations. Read once per compile into a
//! [`Buffering`] that a route's
//! [`crate::compile::traffic::TrafficPolicy`] carries only when one of
//! them is on, so a route without them pays nothing; the bytes are granted
//! per request from the replica's budget (crate::live::buffers) and held
//! by the engines (`teapot_h1::Buffering`, crate::plane::h2_upstream).
//!
//! Defaults are teapot's, not ingress-nginx's: both are off (streamed)
//! unless the annotation says `on`. nginx spills a larger body to a temp
//! file; teapot has no disk, so the bounds below are all it holds, and the
//! rest of a longer body is streamed (docs/migrate-from-ingress-nginx.md).

use teapot_api::annotations::{AnnotationValue, NGINX_PREFIX};

/// The most one request's body, or one response's read-ahead, may hold
/// (the admitted maximum of `client-body-buffer-size` and of
/// `proxy-buffer-size`; `proxy-buffers-number` times `proxy-buffer-size`
/// is cut to it).
pub const MAX_BYTES: u32 = 1 << 20;

/// ingress-nginx's defaults: `client-body-buffer-size` 8k, 4 buffers of
/// `proxy-buffer-size` 4k.
pub const DEFAULT_REQUEST_BYTES: u32 = 8 * 1024;
pub const DEFAULT_BUFFER_SIZE: u32 = 4 * 1024;
pub const DEFAULT_BUFFERS: u32 = 4;

/// What a route holds per request, in bytes; 0: streamed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Buffering {
    /// Request body bytes read before the backend is contacted.
    pub request: u32,
    /// Response body bytes read from the backend ahead of the client.
    pub response: u32,
}

impl Buffering {
    /// From the annotations' values: `None` when neither is on.
    pub fn new(
        request_on: bool,
        body_bytes: Option<u64>,
        response_on: bool,
        buffer_size: Option<u64>,
        buffers: Option<u32>,
    ) -> Option<Buffering> {
        let cap = |n: u64| n.min(u64::from(MAX_BYTES)) as u32;
        // A size of 0 is nginx's "no buffer": the default stands.
        let nonzero = |n: Option<u64>| n.filter(|n| *n > 0);
        let request = match request_on {
            true => cap(nonzero(body_bytes).unwrap_or(u64::from(DEFAULT_REQUEST_BYTES))),
            false => 0,
        };
        let response = match response_on {
            true => cap(
                nonzero(buffer_size).unwrap_or(u64::from(DEFAULT_BUFFER_SIZE))
                    * u64::from(buffers.unwrap_or(DEFAULT_BUFFERS).max(1)),
            ),
            false => 0,
        };
        (request > 0 || response > 0).then_some(Buffering { request, response })
    }
}

/// The [`Buffering`] of an Ingress's annotations, each admitted value
/// by its name after the prefix from `get` (`None`: both off). The sizes
/// without their switch are reported: they hold nothing, as in
/// ingress-nginx with buffering off.
pub fn read<'a>(
    get: impl Fn(&str) -> Option<&'a AnnotationValue>,
    problems: &mut Vec<String>,
) -> Option<Buffering> {
    let on = |name: &str| matches!(get(name), Some(AnnotationValue::Word("on")));
    let size = |name: &str| match get(name) {
        Some(AnnotationValue::Size(n)) => Some(*n),
        _ => None,
    };
    let buffers = match get("proxy-buffers-number") {
        Some(AnnotationValue::Count(n)) => Some(*n),
        _ => None,
    };
    let (request_on, response_on) = (on("proxy-request-buffering"), on("proxy-buffering"));
    if !request_on && size("client-body-buffer-size").is_some() {
        problems.push(format!(
            "{NGINX_PREFIX}client-body-buffer-size: without proxy-request-buffering: \"on\" teapot streams the request body and holds none of it"
        ));
    }
    if !response_on && (size("proxy-buffer-size").is_some() || buffers.is_some()) {
        problems.push(format!(
            "{NGINX_PREFIX}proxy-buffer-size, proxy-buffers-number: without proxy-buffering: \"on\" teapot streams the response and reads none of it ahead"
        ));
    }
    Buffering::new(
        request_on,
        size("client-body-buffer-size"),
        response_on,
        size("proxy-buffer-size"),
        buffers,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::traffic::NginxAnnotations;
    use std::collections::BTreeMap;

    fn read_of(pairs: &[(&str, &str)]) -> (Option<Buffering>, Vec<String>) {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (format!("{NGINX_PREFIX}{k}"), v.to_string()))
            .collect();
        let mut problems = Vec::new();
        let nginx = NginxAnnotations::read(Some(&map), &mut problems);
        let got = read(|name| nginx.get(name), &mut problems);
        (got, problems)
    }

    #[test]
    fn off_unless_on_and_ingress_nginx_sizes_by_default() {
        assert_eq!(read_of(&[]), (None, vec![]));
        assert_eq!(
            read_of(&[
                ("proxy-request-buffering", "off"),
                ("proxy-buffering", "off")
            ]),
            (None, vec![])
        );
        assert_eq!(
            read_of(&[("proxy-request-buffering", "on"), ("proxy-buffering", "on")]).0,
            Some(Buffering {
                request: 8 * 1024,
                response: 16 * 1024
            })
        );
        assert_eq!(
            read_of(&[
                ("proxy-request-buffering", "on"),
                ("client-body-buffer-size", "64k"),
                ("proxy-buffering", "on"),
                ("proxy-buffer-size", "8k"),
                ("proxy-buffers-number", "8"),
            ]),
            (
                Some(Buffering {
                    request: 64 * 1024,
                    response: 64 * 1024
                }),
                vec![]
            )
        );
    }

    /// The per-request bound: a size past 1 MiB is refused by the
    /// annotations' parser (the Ingress is not served, naming it); the
    /// product of two admitted values is cut to 1 MiB.
    #[test]
    fn hostile_sizes_are_refused_or_cut_to_one_mebibyte() {
        use teapot_api::annotations::{ObjectKind, parse};
        for name in ["client-body-buffer-size", "proxy-buffer-size"] {
            let key = format!("{NGINX_PREFIX}{name}");
            for bad in ["1025k", "2m", "1g", "99999999999999999999", "-1", "1x"] {
                let e = parse(ObjectKind::Ingress, &key, bad).unwrap_err();
                assert!(e.to_string().contains(bad.trim()), "{name}={bad}: {e}");
            }
            for good in ["0", "8k", "1m", "1024k"] {
                assert!(
                    parse(ObjectKind::Ingress, &key, good).is_ok(),
                    "{name}={good}"
                );
            }
        }
        let key = format!("{NGINX_PREFIX}proxy-buffers-number");
        for bad in ["0", "257", "4294967296"] {
            assert!(parse(ObjectKind::Ingress, &key, bad).is_err(), "{bad}");
        }
        let (got, problems) = read_of(&[
            ("proxy-buffering", "on"),
            ("proxy-buffer-size", "1m"),
            ("proxy-buffers-number", "256"),
        ]);
        assert_eq!(got.unwrap().response, MAX_BYTES);
        assert!(problems.is_empty(), "{problems:?}");
        let (_, problems) = read_of(&[("client-body-buffer-size", "2m")]);
        assert!(
            problems[0].contains("client-body-buffer-size"),
            "{problems:?}"
        );
    }

    #[test]
    fn sizes_without_their_switch_are_reported() {
        let (got, problems) = read_of(&[
            ("client-body-buffer-size", "16k"),
            ("proxy-buffer-size", "8k"),
        ]);
        assert_eq!(got, None);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("streams the request body"));
        assert!(problems[1].contains("streams the response"));
    }
}
