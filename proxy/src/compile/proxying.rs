//! ingress-nginx's annotations on how a route's request reaches its
//! backend and how teapot's own redirects read: `upstream-vhost` (the
//! Host the backend gets), `preserve-trailing-slash` (the ssl-redirect's
//! target as written) and `relative-redirects` (a redirect to a path left
//! relative; ingress-nginx's default is an absolute `Location`). Read once
//! per compile into a [`Proxying`] that a route's
//! [`crate::compile::traffic::TrafficPolicy`] carries only when one of
//! them is set, so a route without them pays nothing.

use std::sync::Arc;

use teapot_api::annotations::NGINX_PREFIX;

/// The admitted annotations of one Ingress as the compile reads them
/// (`crate::compile::traffic`'s reader implements it).
pub trait Annotations {
    /// A text annotation's value, without the prefix.
    fn text(&self, name: &str) -> Option<&str>;
    /// A boolean annotation's value, without the prefix.
    fn flag(&self, name: &str) -> Option<bool>;
    /// A whole-number annotation's value, without the prefix.
    fn count(&self, _name: &str) -> Option<u32> {
        None
    }
}

/// What the annotations ask of a route's forwarding and redirects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Proxying {
    /// `upstream-vhost`: the backend's `Host` (and HTTP/2 `:authority`).
    pub upstream_vhost: Option<Arc<str>>,
    /// `preserve-trailing-slash: "true"`: the ssl-redirect's `Location`
    /// keeps the target's trailing `/`.
    pub preserve_trailing_slash: bool,
    /// `relative-redirects: "true"`: a redirect to a path is sent as
    /// written, not made absolute.
    pub relative_redirects: bool,
}

/// The [`Proxying`] of `nginx` (`None`: none of its annotations set, or
/// all at their defaults). A value teapot cannot send is pushed to
/// `problems` and left out.
pub fn read(nginx: &impl Annotations, problems: &mut Vec<String>) -> Option<Proxying> {
    let upstream_vhost = nginx.text("upstream-vhost").and_then(|host| {
        if is_authority(host) {
            Some(Arc::from(host.to_ascii_lowercase()))
        } else {
            problems.push(format!(
                "{NGINX_PREFIX}upstream-vhost: {host:?} is not a host name or address with an optional :port; the client's Host is sent"
            ));
            None
        }
    });
    let proxying = Proxying {
        upstream_vhost,
        preserve_trailing_slash: nginx.flag("preserve-trailing-slash") == Some(true),
        relative_redirects: nginx.flag("relative-redirects") == Some(true),
    };
    (proxying != Proxying::default()).then_some(proxying)
}

/// A `Host` value teapot sends for a tenant: a DNS name (labels of
/// letters, digits, `-` and `_`), an IPv4 address or a bracketed IPv6
/// one, then an optional port. nginx would take any text (a variable
/// too); only a name the backend can be addressed by is kept, so no
/// field syntax or second value rides in it.
fn is_authority(value: &str) -> bool {
    let (host, port) = match value.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') || h.ends_with(']') => (h, Some(p)),
        _ => (value, None),
    };
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host.len() <= 253
                && host.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                })
        }
    };
    port_ok && host_ok
}

/// Annotations as admitted, for the readers' tests: `"true"`/`"false"`
/// are flags, the rest text.
#[cfg(test)]
pub(crate) struct Admitted(pub(crate) std::collections::BTreeMap<String, String>);

#[cfg(test)]
impl Annotations for Admitted {
    fn text(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
    fn flag(&self, name: &str) -> Option<bool> {
        self.0.get(name).and_then(|v| v.parse().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::compile::proxying::Admitted;

    fn proxying(pairs: &[(&str, &str)]) -> (Option<Proxying>, Vec<String>) {
        let nginx = Admitted(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        let mut problems = Vec::new();
        (read(&nginx, &mut problems), problems)
    }

    #[test]
    fn annotations_read_and_defaults_cost_nothing() {
        assert_eq!(proxying(&[]).0, None);
        // The defaults, written out, are as absent.
        let (p, problems) = proxying(&[
            ("preserve-trailing-slash", "false"),
            ("relative-redirects", "false"),
        ]);
        assert_eq!((p, problems.len()), (None, 0));
        let (p, _) = proxying(&[
            ("upstream-vhost", "Upstream.Bar.com:8080"),
            ("relative-redirects", "true"),
        ]);
        let p = p.unwrap();
        assert_eq!(p.upstream_vhost.as_deref(), Some("upstream.bar.com:8080"));
        assert!(p.relative_redirects && !p.preserve_trailing_slash);
    }

    /// Only a name the backend can be addressed by is sent as its Host:
    /// no nginx variable, no second value, no field syntax.
    #[test]
    fn upstream_vhost_is_a_host_name_or_address() {
        for good in [
            "a",
            "a.example",
            "10.0.0.1",
            "10.0.0.1:80",
            "[2001:db8::1]:8443",
        ] {
            assert!(is_authority(good), "{good}");
        }
        for bad in [
            "$host",
            "a example",
            "a,b",
            "a..b",
            "a:",
            "a:123456",
            "2001:db8::1",
            "[nope]",
            &"a".repeat(64),
        ] {
            assert!(!is_authority(bad), "{bad}");
        }
        let (p, problems) = proxying(&[("upstream-vhost", "$host")]);
        assert_eq!(p, None);
        assert!(problems[0].contains("upstream-vhost"), "{problems:?}");
    }
}
