//! `satisfy: any` (nginx's `satisfy any`): a request passes a route's
//! access checks when any one of them lets it in: the address allow-list
//! (`whitelist-source-range`/`allowlist-source-range`), basic
//! authentication, the `auth-url` service. Without it (`all`, the
//! default) every check must pass.
//!
//! Fail-closed where nginx is: only a refusal (403 from the allow-list,
//! 401 from an authentication) lets the next check decide; an answer of
//! any other kind (basic auth's 429 after too many failures, 503 when
//! its Secret is unusable) ends the request as it would without `any`.
//! A request every check refuses gets the last one's answer (the
//! authentication's 401, or the `auth-url` service's own, its sign-in
//! redirect included), as nginx prefers a 401 over a 403. The deny-list
//! (`denylist-source-range`) is not an access check one can pass
//! instead: a denied address is refused whatever it authenticates as.

use std::net::IpAddr;

use crate::compile::traffic::{AccessList, TrafficPolicy};

/// What the address lists say of a client on a route.
#[derive(Debug, PartialEq, Eq)]
pub enum Access {
    /// Let in (and, with `satisfy: any` and an allow-list, satisfied:
    /// no authentication is asked).
    Admitted {
        satisfied: bool,
    },
    /// Not on the allow-list, but an authentication may let it in.
    Authenticate,
    Refused,
}

/// The lists' verdict on `client` for `policy`'s route.
pub fn access(policy: &TrafficPolicy, list: &AccessList, client: Option<IpAddr>) -> Access {
    let any = any(policy);
    if list.admits(client) {
        return Access::Admitted {
            satisfied: any && !list.allow.is_empty(),
        };
    }
    let denied = client
        .map(|ip| ip.to_canonical())
        .is_some_and(|ip| list.deny.iter().any(|net| net.contains(&ip)));
    if any && !denied {
        Access::Authenticate
    } else {
        Access::Refused
    }
}

/// Whether `satisfy: any` combines checks on this route: it has one
/// authentication at least (with the allow-list alone it changes
/// nothing).
pub fn any(policy: &TrafficPolicy) -> bool {
    policy.satisfy_any && (policy.basic_auth.is_some() || policy.auth.is_some())
}

/// After a basic-authentication refusal with `status`: whether the
/// `auth-url` service decides instead (`satisfy: any` and a service to
/// ask; only a 401 is a refusal another check may overturn).
pub fn auth_url_decides(policy: &TrafficPolicy, status: u16) -> bool {
    policy.satisfy_any && policy.auth.is_some() && status == 401
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::compile::traffic::ExternalAuth;

    fn list(allow: &[&str], deny: &[&str]) -> AccessList {
        AccessList {
            allow: allow.iter().map(|n| n.parse().unwrap()).collect(),
            deny: deny.iter().map(|n| n.parse().unwrap()).collect(),
        }
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    fn with_auth(any: bool) -> TrafficPolicy {
        TrafficPolicy {
            satisfy_any: any,
            auth: Some(Arc::new(ExternalAuth::refused("a test".into()))),
            ..TrafficPolicy::default()
        }
    }

    #[test]
    fn any_lets_an_unlisted_address_authenticate_and_a_listed_one_skip_it() {
        let l = list(&["10.0.0.0/8"], &["10.6.0.0/16"]);
        let any = with_auth(true);
        assert_eq!(
            access(&any, &l, ip("10.1.1.1")),
            Access::Admitted { satisfied: true }
        );
        assert_eq!(access(&any, &l, ip("192.0.2.1")), Access::Authenticate);
        assert_eq!(access(&any, &l, None), Access::Authenticate);
        // The deny-list is not overturned by authenticating.
        assert_eq!(access(&any, &l, ip("10.6.0.1")), Access::Refused);
        // A deny-list alone satisfies nothing: authentication still runs.
        let deny_only = list(&[], &["10.6.0.0/16"]);
        assert_eq!(
            access(&any, &deny_only, ip("192.0.2.1")),
            Access::Admitted { satisfied: false }
        );
    }

    #[test]
    fn all_is_every_check_and_any_needs_an_authentication() {
        let l = list(&["10.0.0.0/8"], &[]);
        let all = with_auth(false);
        assert_eq!(
            access(&all, &l, ip("10.1.1.1")),
            Access::Admitted { satisfied: false }
        );
        assert_eq!(access(&all, &l, ip("192.0.2.1")), Access::Refused);
        let no_auth = TrafficPolicy {
            satisfy_any: true,
            ..TrafficPolicy::default()
        };
        assert_eq!(access(&no_auth, &l, ip("192.0.2.1")), Access::Refused);
        assert!(auth_url_decides(&with_auth(true), 401));
        assert!(!auth_url_decides(&with_auth(true), 429));
        assert!(!auth_url_decides(&with_auth(false), 401));
    }
}
