//! Canaries (`canary: "true"`): whether a request goes to the canary
//! Ingress's backend instead of the route's, by ingress-nginx's rules in
//! its order (its balancer's `route_to_alternative_balancer`):
//!
//! 1. `canary-by-header`: with `canary-by-header-value`, that exact value
//!    chooses the canary; else with `canary-by-header-pattern`, a value
//!    containing a match does; else `always` does and `never` keeps the
//!    route's backend. Any other value (or none) goes on to
//! 2. `canary-by-cookie`: `always` and `never` as above, else
//! 3. `canary-weight` requests out of `canary-weight-total` go to the
//!    canary, at random.

use crate::compile::traffic::CanaryRules;

/// Whether the request goes to the canary; `header` is the request's
/// `canary-by-header` field, `cookies` its `Cookie` field.
pub fn chooses(rules: &CanaryRules, header: Option<&[u8]>, cookies: Option<&[u8]>) -> bool {
    if let Some(value) = header {
        if let Some(wanted) = &rules.value {
            if value == wanted.as_bytes() {
                return true;
            }
        } else if let Some(pattern) = &rules.pattern {
            if pattern.is_match(value) {
                return true;
            }
        } else if rules.pattern_refused {
            return false;
        } else if value == b"always" {
            return true;
        } else if value == b"never" {
            return false;
        }
    }
    if let Some(name) = &rules.cookie
        && let Some(value) = super::affinity::cookie(cookies, name)
    {
        if value == b"always" {
            return true;
        }
        if value == b"never" {
            return false;
        }
    }
    rules.weight > 0 && rand::random_range(1..=rules.total) <= rules.weight
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_api::regex::compile_contains;

    fn rules(value: Option<&str>, pattern: Option<&str>, weight: u32) -> CanaryRules {
        CanaryRules {
            header: Some("x-canary".into()),
            value: value.map(str::to_string),
            pattern: pattern.map(|p| compile_contains(p).unwrap()),
            pattern_refused: false,
            cookie: Some("canary".into()),
            weight,
            total: 100,
            sticky: true,
        }
    }

    #[test]
    fn header_then_cookie_then_weight() {
        let plain = rules(None, None, 0);
        let always = Some(&b"always"[..]);
        let never = Some(&b"never"[..]);
        let cookie_always = Some(&b"a=1; canary=always"[..]);
        assert!(chooses(&plain, always, None));
        // The header's `never` wins over the cookie's `always`.
        assert!(!chooses(&plain, never, cookie_always));
        // Another header value leaves it to the cookie.
        assert!(chooses(&plain, Some(b"maybe"), cookie_always));
        assert!(!chooses(&plain, None, Some(b"canary=never")));
        assert!(!chooses(&plain, None, None));
        // With a value, only that value; `always` is just another value.
        let valued = rules(Some("DoCanary"), Some("ignored"), 0);
        assert!(chooses(&valued, Some(b"DoCanary"), None));
        assert!(!chooses(&valued, always, None));
        assert!(!chooses(&valued, Some(b"docanary"), None));
        // A pattern is searched in the value.
        let pattern = rules(None, Some("^(foo|bar)[0-9]"), 0);
        assert!(chooses(&pattern, Some(b"bar7-x"), None));
        assert!(!chooses(&pattern, Some(b"xbar7"), None));
        assert!(!chooses(&pattern, always, None));
        // A refused pattern keeps a request with the header on the route.
        let refused = CanaryRules {
            pattern_refused: true,
            ..rules(None, None, 100)
        };
        assert!(!chooses(&refused, Some(b"DoCanary"), cookie_always));
        assert!(chooses(&refused, None, None));
        // Weights: all, none.
        assert!(chooses(&rules(None, None, 100), None, None));
        assert!(!chooses(&rules(None, None, 0), Some(b"other"), None));
    }
}
