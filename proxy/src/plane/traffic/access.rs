//! Client address allow and deny lists (`whitelist-source-range`,
//! `allowlist-source-range`, `denylist-source-range`).

use std::net::IpAddr;

use crate::compile::traffic::AccessList;

impl AccessList {
    /// Whether `client` may reach the route. The address is the one teapot
    /// forwards as `X-Forwarded-For` (the PROXY protocol's when the
    /// listener reads one); a request without one (a listener on a Unix
    /// socket) is refused by a list that allows only some networks.
    pub fn admits(&self, client: Option<IpAddr>) -> bool {
        // An IPv4 client on a dual-stack socket arrives as `::ffff:a.b.c.d`;
        // the lists name it in IPv4.
        let Some(ip) = client.map(|ip| ip.to_canonical()) else {
            return self.allow.is_empty();
        };
        if self.deny.iter().any(|net| net.contains(&ip)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|net| net.contains(&ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(allow: &[&str], deny: &[&str]) -> AccessList {
        AccessList {
            allow: allow.iter().map(|n| n.parse().unwrap()).collect(),
            deny: deny.iter().map(|n| n.parse().unwrap()).collect(),
        }
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn deny_wins_then_allow_decides() {
        let l = list(&["10.0.0.0/8", "2001:db8::/32"], &["10.6.0.0/16"]);
        assert!(l.admits(ip("10.1.2.3")));
        assert!(!l.admits(ip("10.6.0.1")));
        assert!(!l.admits(ip("192.0.2.1")));
        assert!(l.admits(ip("2001:db8::1")));
        assert!(l.admits(ip("::ffff:10.1.2.3")));
        assert!(!l.admits(None));
        let deny_only = list(&[], &["192.0.2.0/24"]);
        assert!(!deny_only.admits(ip("192.0.2.9")));
        assert!(!deny_only.admits(ip("::ffff:192.0.2.9")));
        assert!(deny_only.admits(ip("198.51.100.1")));
        assert!(deny_only.admits(None));
    }
}
