//! A rule's `sessionPersistence` (HTTPRoute, experimental channel),
//! compiled to the cookie affinity ingress-nginx's `affinity: cookie` uses
//! (crate::plane::traffic::affinity): the cookie names the endpoint, and
//! the rule's backends are pinned by the same cookie (`Action::Backends`'
//! `persistence`), so a client stays on one endpoint across the rule's
//! weighted backendRefs and moves, with a new cookie, when it goes away.
//!
//! Served: type Cookie, `cookie.name` (default: one per route and rule),
//! `cookie.path` (default `/`), `cookie.lifetimeType` Session (no
//! `Max-Age`) or Permanent (`Max-Age` from `absoluteTimeout`). Not served,
//! refused here and by the webhook: type Header, and an `absoluteTimeout`
//! with a Session cookie (the gateway would have to track each session's
//! start; teapot keeps no session state).

use teapot_gateway_api::generated::http_routes::{
    HttpRouteRulesSessionPersistence, HttpRouteRulesSessionPersistenceCookieLifetimeType,
    HttpRouteRulesSessionPersistenceType,
};
use teapot_model::store::NsName;

use crate::compile::traffic::Affinity;

/// The cookie affinity of a rule's `sessionPersistence`; `route` and
/// `rule` (its index) name the cookie when the rule does not.
pub(super) fn affinity(
    persistence: &HttpRouteRulesSessionPersistence,
    route: &NsName,
    rule: usize,
) -> Result<Affinity, String> {
    if matches!(
        persistence.r#type,
        Some(HttpRouteRulesSessionPersistenceType::Header)
    ) {
        return Err(
            "sessionPersistence.type Header is not served: teapot keeps sessions with a cookie (type Cookie)"
                .into(),
        );
    }
    let cookie = persistence.cookie.as_ref();
    let permanent = matches!(
        cookie.and_then(|c| c.lifetime_type.as_ref()),
        Some(HttpRouteRulesSessionPersistenceCookieLifetimeType::Permanent)
    );
    let timeout = persistence
        .absolute_timeout
        .as_deref()
        .map(teapot_model::gateway::parse_duration)
        .transpose()
        .map_err(|e| format!("sessionPersistence.absoluteTimeout: {e}"))?;
    let max_age = match (permanent, timeout) {
        // A Max-Age of 0 would delete the cookie: at least a second.
        (true, Some(t)) => Some(u32::try_from(t.as_secs().max(1)).unwrap_or(u32::MAX)),
        (true, None) => {
            return Err(
                "sessionPersistence.absoluteTimeout is required with cookie.lifetimeType Permanent"
                    .into(),
            );
        }
        (false, Some(_)) => {
            return Err(
                "sessionPersistence.absoluteTimeout with cookie.lifetimeType Session is not served: teapot keeps no session state; use lifetimeType Permanent (the cookie's Max-Age)"
                    .into(),
            );
        }
        (false, None) => None,
    };
    let name = match cookie.and_then(|c| c.name.as_deref()) {
        Some(name) if is_token(name) => name.to_string(),
        Some(name) => {
            return Err(format!(
                "sessionPersistence.cookie.name {name:?} is not a cookie name (an HTTP token)"
            ));
        }
        None => default_cookie(route, rule),
    };
    let path = cookie.and_then(|c| c.path.as_deref()).unwrap_or("/");
    // The path goes into Set-Cookie as written: a `;` would add attributes.
    if !path.starts_with('/') || path.bytes().any(|b| b == b';' || b.is_ascii_control()) {
        return Err(format!(
            "sessionPersistence.cookie.path {path:?} is not a cookie path (absolute, without ';')"
        ));
    }
    Ok(Affinity {
        cookie: name,
        path: path.to_string(),
        path_set: true,
        max_age,
        expires: None,
        samesite: None,
        secure: None,
        domain: None,
    })
}

/// The cookie of a rule that names none: unique per route and rule (the
/// specification's SHOULD), the same on every replica (FNV-1a, fixed).
fn default_cookie(route: &NsName, rule: usize) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    let key = format!("{}/{}/{rule}", route.namespace, route.name);
    for b in key.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("teapot-session-{hash:08x}")
}

/// An RFC 9110 token: what a cookie name is.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<Affinity, String> {
        let persistence: HttpRouteRulesSessionPersistence = serde_yaml::from_str(yaml).unwrap();
        let route = NsName {
            namespace: "shop".into(),
            name: "web".into(),
        };
        affinity(&persistence, &route, 1)
    }

    #[test]
    fn a_permanent_cookie_gets_its_max_age_and_path() {
        let a = read(
            "{type: Cookie, absoluteTimeout: 1h30m, cookie: {name: pin, lifetimeType: Permanent, path: /cart}}",
        )
        .unwrap();
        assert_eq!(a.cookie, "pin");
        assert_eq!(a.path, "/cart");
        assert_eq!(a.max_age, Some(5400));
    }

    #[test]
    fn a_session_cookie_has_no_max_age_and_a_name_of_its_own() {
        let a = read("{cookie: {}}").unwrap();
        assert_eq!(a.path, "/");
        assert_eq!(a.max_age, None);
        assert!(a.cookie.starts_with("teapot-session-"), "{}", a.cookie);
        assert_eq!(a.cookie, read("{type: Cookie}").unwrap().cookie);
        let route = NsName {
            namespace: "shop".into(),
            name: "web".into(),
        };
        assert_ne!(default_cookie(&route, 1), default_cookie(&route, 2));
    }

    #[test]
    fn what_is_not_served_is_named() {
        let cases = [
            ("{type: Header, header: {name: x-session}}", "type Header"),
            (
                "{absoluteTimeout: 10m, cookie: {lifetimeType: Session}}",
                "absoluteTimeout with cookie.lifetimeType Session",
            ),
            (
                "{cookie: {lifetimeType: Permanent}}",
                "absoluteTimeout is required",
            ),
            ("{cookie: {name: \"a b\"}}", "cookie.name"),
            ("{cookie: {path: \"/a;Domain=evil\"}}", "cookie.path"),
            (
                "{absoluteTimeout: soon, cookie: {lifetimeType: Permanent}}",
                "absoluteTimeout",
            ),
        ];
        for (yaml, says) in cases {
            let e = read(yaml).unwrap_err();
            assert!(e.contains(says), "{yaml}: {e}");
        }
    }
}
