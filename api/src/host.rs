//! Ingress rule hosts.
//!
//! Kubernetes allows a fully qualified DNS name or a wildcard whose first
//! label is `*` (which matches exactly one label). IP addresses are not hosts.
//! Hosts are compared lowercase with no trailing dot, so that is how they are
//! stored.

use std::fmt;

/// A validated rule host.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostPattern {
    /// `foo.example.com`, lowercase, no trailing dot.
    Exact(String),
    /// `*.example.com`, stored as its suffix `example.com`.
    Wildcard(String),
}

impl HostPattern {
    /// Parses a rule host as the API server would accept it.
    pub fn parse(host: &str) -> Result<HostPattern, HostError> {
        let host = host.strip_suffix('.').unwrap_or(host);
        if host.is_empty() {
            return Err(HostError::Empty);
        }
        if host.len() > 253 {
            return Err(HostError::TooLong(host.len()));
        }
        let mut lower = host.to_ascii_lowercase();
        if let Some(suffix) = lower.strip_prefix("*.") {
            check_dns_name(suffix)?;
            lower.replace_range(..2, "");
            return Ok(HostPattern::Wildcard(lower));
        }
        check_dns_name(&lower)?;
        // Only an all-digits-and-dots name can be an IPv4 address; skip the
        // parser for the usual host.
        if lower.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && lower.parse::<std::net::Ipv4Addr>().is_ok()
        {
            return Err(HostError::IpAddress);
        }
        Ok(HostPattern::Exact(lower))
    }

    /// Whether `host` (already normalised by [`normalize_request_host`]) matches.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(h) => h == host,
            HostPattern::Wildcard(suffix) => host
                .split_once('.')
                .is_some_and(|(first, rest)| !first.is_empty() && rest == suffix),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(h) => f.write_str(h),
            HostPattern::Wildcard(s) => write!(f, "*.{s}"),
        }
    }
}

/// Bytes allowed in a DNS label, plus `.` which separates labels.
const NAME_BYTES: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || c == b'-' || c == b'.';
        b += 1;
    }
    t
};

fn check_dns_name(name: &str) -> Result<(), HostError> {
    // Every compile re-parses every rule host: check the characters with
    // one table lookup per byte, then the labels' shape.
    let bytes = name.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !NAME_BYTES[b as usize] {
            let c = name[i..].chars().next().unwrap_or('?');
            return Err(HostError::BadCharacter(c));
        }
        if b == b'.' {
            check_label(&name[start..i])?;
            start = i + 1;
        }
    }
    check_label(&name[start..])
}

fn check_label(label: &str) -> Result<(), HostError> {
    match label.as_bytes() {
        [] => Err(HostError::EmptyLabel),
        l if l.len() > 63 => Err(HostError::LabelTooLong(label.to_string())),
        [b'-', ..] | [.., b'-'] => Err(HostError::BadLabel(label.to_string())),
        _ => Ok(()),
    }
}

/// Normalises the authority of a request for lookup: drops a port and a
/// trailing dot and lowercases into `buf`, without allocating. Returns `None`
/// when the authority is empty or longer than `buf`.
pub fn normalize_request_host<'b>(authority: &'b str, buf: &'b mut [u8; 256]) -> Option<&'b str> {
    // Almost every request names its host in lower case without a port or
    // a trailing dot: nothing to change, so nothing to copy.
    if let [.., last] = authority.as_bytes()
        && *last != b'.'
        && authority.len() <= buf.len()
        && authority.bytes().all(|b| LOWER_NAME_BYTES[usize::from(b)])
    {
        return Some(authority);
    }
    normalize_by_copy(authority, buf)
}

/// Bytes a host already in its normal form may hold: [`NAME_BYTES`] but
/// upper case (no `:` of a port, no `[` of an IPv6 literal).
const LOWER_NAME_BYTES: [bool; 256] = {
    let mut t = NAME_BYTES;
    let mut b = b'A';
    while b <= b'Z' {
        t[b as usize] = false;
        b += 1;
    }
    t
};

/// [`normalize_request_host`] of any authority, copied into `buf`.
fn normalize_by_copy<'b>(authority: &str, buf: &'b mut [u8; 256]) -> Option<&'b str> {
    let host = strip_port(authority);
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() || host.len() > buf.len() {
        return None;
    }
    let out = &mut buf[..host.len()];
    out.copy_from_slice(host.as_bytes());
    out.make_ascii_lowercase();
    std::str::from_utf8(out).ok()
}

fn strip_port(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        // IPv6 literal: `[::1]:8080` routes as `[::1]`.
        return match rest.find(']') {
            Some(end) => &authority[..end + 2],
            None => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// Why a host was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("host is empty")]
    Empty,
    #[error("host is {0} characters long, more than 253")]
    TooLong(usize),
    #[error("host has an empty label")]
    EmptyLabel,
    #[error("label {0:?} is longer than 63 characters")]
    LabelTooLong(String),
    #[error("label {0:?} starts or ends with '-'")]
    BadLabel(String),
    #[error(
        "character {0:?} is not allowed in a host (only a-z, 0-9, '-', '.', and a leading '*.')"
    )]
    BadCharacter(char),
    #[error("an IP address is not a host")]
    IpAddress,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exact_and_wildcard() {
        assert_eq!(
            HostPattern::parse("Foo.Bar.com."),
            Ok(HostPattern::Exact("foo.bar.com".into()))
        );
        assert_eq!(
            HostPattern::parse("*.foo.com"),
            Ok(HostPattern::Wildcard("foo.com".into()))
        );
        assert_eq!(
            HostPattern::parse("single"),
            Ok(HostPattern::Exact("single".into()))
        );
    }

    #[test]
    fn refuses_bad_hosts() {
        assert!(HostPattern::parse("").is_err());
        assert!(HostPattern::parse("a.*.com").is_err());
        assert!(HostPattern::parse("**.com").is_err());
        assert!(HostPattern::parse("foo..com").is_err());
        assert!(HostPattern::parse("-foo.com").is_err());
        assert!(HostPattern::parse("foo_bar.com").is_err());
        assert!(HostPattern::parse("foo.com\r\n").is_err());
        assert!(HostPattern::parse("10.0.0.1").is_err());
        assert!(HostPattern::parse(&"a".repeat(64)).is_err());
    }

    #[test]
    fn wildcard_covers_exactly_one_label() {
        let w = HostPattern::parse("*.foo.com").unwrap();
        assert!(w.matches("bar.foo.com"));
        assert!(!w.matches("baz.bar.foo.com"));
        assert!(!w.matches("foo.com"));
        assert!(!w.matches(".foo.com"));
    }

    /// The borrowed answer for a host already normal is the copied one,
    /// whatever the authority: case, ports, IPv6 literals, dots, bytes
    /// outside a name, lengths around the buffer's.
    #[test]
    fn request_host_without_a_copy_is_the_copied_one() {
        let mut authorities: Vec<String> = [
            "",
            ".",
            "a",
            "A",
            "a.",
            "a..",
            "foo.com",
            "Foo.com",
            "foo.COM",
            "foo.com.",
            "foo.com:",
            "foo.com:80",
            "foo.com:8o",
            ":80",
            "foo.com.:443",
            "[::1]",
            "[::1]:80",
            "[::1",
            "[a]b",
            "a]b",
            "::1",
            "1.2.3.4",
            "1.2.3.4:5",
            "xn--bcher-kva.example",
            "b\u{fc}cher.example",
            "foo_bar.com",
            "foo%2ecom",
            "a b",
            "a\tb",
            "-a-",
            "a/b",
            "foo.com\r\n",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for n in [254, 255, 256, 257, 300] {
            authorities.push("a".repeat(n));
            authorities.push(format!("{}.", "a".repeat(n - 1)));
            authorities.push(format!("{}:1", "a".repeat(n - 2)));
        }
        // Every ASCII byte at the start, in the middle and at the end.
        for b in 0..=127u8 {
            let c = char::from(b);
            authorities.extend([format!("{c}ab"), format!("a{c}b"), format!("ab{c}")]);
        }
        for authority in &authorities {
            let (mut fast, mut slow) = ([0u8; 256], [0u8; 256]);
            assert_eq!(
                normalize_request_host(authority, &mut fast),
                normalize_by_copy(authority, &mut slow),
                "{authority:?}"
            );
        }
    }

    #[test]
    fn request_host_normalisation() {
        let mut buf = [0u8; 256];
        assert_eq!(
            normalize_request_host("Foo.COM:8080", &mut buf),
            Some("foo.com")
        );
        let mut buf = [0u8; 256];
        assert_eq!(
            normalize_request_host("foo.com.", &mut buf),
            Some("foo.com")
        );
        let mut buf = [0u8; 256];
        assert_eq!(
            normalize_request_host("foo.com.:443", &mut buf),
            Some("foo.com")
        );
        let mut buf = [0u8; 256];
        assert_eq!(normalize_request_host("[::1]:80", &mut buf), Some("[::1]"));
        let mut buf = [0u8; 256];
        assert_eq!(normalize_request_host("", &mut buf), None);
        let mut buf = [0u8; 256];
        assert_eq!(normalize_request_host(&"a".repeat(300), &mut buf), None);
    }
}
