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
/// else none. `None` for either side means "any host". The intersection
/// is always one of the two, so it is returned by reference.
pub fn intersect<'h>(
    listener: Option<&'h HostPattern>,
    route: Option<&'h HostPattern>,
) -> Option<Option<&'h HostPattern>> {
    use HostPattern::{Exact, Wildcard};
    match (listener, route) {
        (None, r) => Some(r),
        (l, None) => Some(l),
        (Some(Exact(l)), Some(r @ Exact(e))) => (l == e).then_some(Some(r)),
        (Some(Wildcard(s)), Some(e @ Exact(r))) | (Some(e @ Exact(r)), Some(Wildcard(s))) => {
            below(r, s).then_some(Some(e))
        }
        (Some(lw @ Wildcard(l)), Some(rw @ Wildcard(r))) => {
            if l == r || below(r, l) {
                Some(Some(rw))
            } else if below(l, r) {
                Some(Some(lw))
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
        let (l, r) = (l.map(h), r.map(h));
        intersect(l.as_ref(), r.as_ref()).map(|o| o.map(|p| p.to_string()))
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
