//! Listener and route hostnames (Gateway API): a wildcard matches any
//! number of labels below its suffix (`*.example.com` matches
//! `a.b.example.com`, not `example.com`), unlike an Ingress wildcard.

use teapot_api::HostPattern;

/// Whether `name` lies strictly below `suffix` (at any depth).
fn below(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

/// The hostname a request must carry to match both a listener's hostname
/// and a route's: the more specific of the two when one covers the other,
/// else none. `None` for either side means "any host".
pub fn intersect(
    listener: Option<&HostPattern>,
    route: Option<&HostPattern>,
) -> Option<Option<HostPattern>> {
    use HostPattern::{Exact, Wildcard};
    match (listener, route) {
        (None, r) => Some(r.cloned()),
        (l, None) => Some(l.cloned()),
        (Some(Exact(l)), Some(Exact(r))) => (l == r).then(|| Some(Exact(l.clone()))),
        (Some(Wildcard(s)), Some(Exact(r))) | (Some(Exact(r)), Some(Wildcard(s))) => {
            below(r, s).then(|| Some(Exact(r.clone())))
        }
        (Some(Wildcard(l)), Some(Wildcard(r))) => {
            if l == r || below(r, l) {
                Some(Some(Wildcard(r.clone())))
            } else if below(l, r) {
                Some(Some(Wildcard(l.clone())))
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> HostPattern {
        HostPattern::parse(s).unwrap()
    }

    fn i(l: Option<&str>, r: Option<&str>) -> Option<Option<String>> {
        intersect(l.map(h).as_ref(), r.map(h).as_ref()).map(|o| o.map(|p| p.to_string()))
    }

    #[test]
    fn intersections_follow_the_specification() {
        let some = |s: &str| Some(Some(s.to_string()));
        assert_eq!(i(None, None), Some(None));
        assert_eq!(i(None, Some("a.com")), some("a.com"));
        assert_eq!(i(Some("*.com"), None), some("*.com"));
        assert_eq!(i(Some("a.com"), Some("a.com")), some("a.com"));
        assert_eq!(i(Some("a.com"), Some("b.com")), None);
        assert_eq!(
            i(Some("*.example.com"), Some("a.b.example.com")),
            some("a.b.example.com")
        );
        assert_eq!(i(Some("*.example.com"), Some("example.com")), None);
        assert_eq!(
            i(Some("very.specific.com"), Some("*.specific.com")),
            some("very.specific.com")
        );
        assert_eq!(
            i(Some("*.com"), Some("*.example.com")),
            some("*.example.com")
        );
        assert_eq!(
            i(Some("*.example.com"), Some("*.com")),
            some("*.example.com")
        );
        assert_eq!(i(Some("*.example.com"), Some("*.example.org")), None);
    }
}
