//! Cookie session affinity (`affinity: cookie`, `session-cookie-*`): a
//! client's requests go to the endpoint its cookie names while that
//! endpoint is in the route and not ejected; otherwise a new one is chosen
//! as any request's is, and the cookie is set to name it.
//!
//! The cookie's value is a hash of the endpoint's address that every
//! replica computes alike (FNV-1a, fixed), so a client keeps its endpoint
//! whichever replica serves it, and the address itself is not shown.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use crate::compile::gateway::table::{Action, Backend, RequestHeaders};
use crate::compile::traffic::Affinity;
use crate::compile::upstream::{Tried, Upstream};

/// What affinity decided for one request.
#[derive(Debug, PartialEq, Eq)]
pub struct Sticky {
    /// The endpoint to try first (an index into the upstream's endpoints).
    pub endpoint: usize,
    /// The `Set-Cookie` value, when the client's cookie named no usable
    /// endpoint.
    pub set_cookie: Option<String>,
}

/// The cookie value naming `addr`.
pub fn cookie_value(addr: SocketAddr) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in addr.to_string().bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The value of cookie `name` in the request's `Cookie` field.
pub fn cookie<'h>(field: Option<&'h [u8]>, name: &str) -> Option<&'h [u8]> {
    field?.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let eq = pair.iter().position(|&b| b == b'=')?;
        (pair[..eq].trim_ascii() == name.as_bytes()).then(|| pair[eq + 1..].trim_ascii())
    })
}

/// The request's `Cookie` as one field: HTTP/2 sends one field per cookie
/// (RFC 9113, 8.2.3, and browsers do), joined here with `; ` as an
/// HTTP/1.1 hop would, so a cookie is found whichever field holds it.
/// Borrowed when there is one field (HTTP/1.1's case).
pub fn cookies(headers: &dyn RequestHeaders) -> Option<Cow<'_, [u8]>> {
    let first = headers.first("cookie")?;
    let mut fields = 0;
    headers.each(&mut |name, _| fields += usize::from(name.eq_ignore_ascii_case("cookie")));
    if fields < 2 {
        return Some(Cow::Borrowed(first));
    }
    let mut joined = Vec::new();
    headers.each(&mut |name, value| {
        if name.eq_ignore_ascii_case("cookie") {
            if !joined.is_empty() {
                joined.extend_from_slice(b"; ");
            }
            joined.extend_from_slice(value);
        }
    });
    Some(Cow::Owned(joined))
}

/// The backend of a Gateway API rule a request goes to: with the rule's
/// sessionPersistence, the backend one of whose serving endpoints the
/// request's cookie names, so a client stays on one endpoint across the
/// rule's weighted backendRefs (a backend of weight 0 gets nothing, pinned
/// or not); otherwise, or when that endpoint is gone or ejected, one by
/// weight that has a serving endpoint (a session starts, or moves, to an
/// endpoint that answers), and [`Affinity::choose`] then names the new
/// endpoint in the cookie. Without sessionPersistence: by weight only.
pub fn pick_backend<'a>(action: &'a Action, cookies: Option<&[u8]>) -> Option<&'a Backend> {
    let Action::Backends {
        backends,
        persistence: Some(name),
        ..
    } = action
    else {
        return action.pick();
    };
    let serves = |b: &Backend, named: Option<&[u8]>| {
        b.weight > 0
            && b.route.as_ref().is_ok_and(|r| {
                r.upstream.endpoints.load().iter().any(|e| {
                    !e.is_ejected() && named.is_none_or(|v| cookie_value(e.addr).as_bytes() == v)
                })
            })
    };
    if let Some(value) = cookie(cookies, name)
        && let Some(pinned) = backends.iter().find(|b| serves(b, Some(value)))
    {
        return Some(pinned);
    }
    let picked = action.pick()?;
    if serves(picked, None) {
        return Some(picked);
    }
    Some(backends.iter().find(|b| serves(b, None)).unwrap_or(picked))
}

impl Affinity {
    /// Whether the request's cookie names one of `upstream`'s endpoints
    /// (ejected or not: ingress-nginx's `is_affinitized` keeps a request
    /// on its backend, and the backend then picks another endpoint), which
    /// keeps it on that backend whatever the canary rules say.
    pub fn pins(&self, upstream: &Upstream, cookies: Option<&[u8]>) -> bool {
        cookie(cookies, &self.cookie).is_some_and(|value| {
            upstream
                .endpoints
                .load()
                .iter()
                .any(|e| cookie_value(e.addr).as_bytes() == value)
        })
    }

    /// The endpoint of `upstream` this request sticks to; `None` when the
    /// upstream has no endpoint (the engines answer that).
    pub fn choose(&self, upstream: &Upstream, cookies: Option<&[u8]>, tls: bool) -> Option<Sticky> {
        if let Some(value) = cookie(cookies, &self.cookie)
            && let Some(i) = upstream
                .endpoints
                .load()
                .iter()
                .position(|e| !e.is_ejected() && cookie_value(e.addr).as_bytes() == value)
        {
            return Some(Sticky {
                endpoint: i,
                set_cookie: None,
            });
        }
        let chosen = upstream.pick(&mut Tried::default())?;
        let endpoint = chosen.index();
        let mut set = format!(
            "{}={}; Path={}",
            self.cookie,
            cookie_value(chosen.addr),
            self.path
        );
        if let Some(domain) = &self.domain {
            set.push_str("; Domain=");
            set.push_str(domain);
        }
        if let Some(seconds) = self.expires {
            let at = SystemTime::now() + Duration::from_secs(u64::from(seconds));
            set.push_str("; Expires=");
            set.push_str(&httpdate::fmt_http_date(at));
        }
        if let Some(age) = self.max_age {
            set.push_str(&format!("; Max-Age={age}"));
        }
        if let Some(samesite) = self.samesite {
            set.push_str("; SameSite=");
            set.push_str(samesite);
        }
        // A browser refuses SameSite=None without Secure: ingress-nginx
        // adds it then, and over HTTPS always.
        if tls || self.secure.unwrap_or(self.samesite == Some("None")) {
            set.push_str("; Secure");
        }
        set.push_str("; HttpOnly");
        Some(Sticky {
            endpoint,
            set_cookie: Some(set),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::live::endpoints::EndpointRegistry;

    fn affinity() -> Affinity {
        Affinity {
            cookie: "route".into(),
            path: "/".into(),
            path_set: false,
            max_age: None,
            expires: None,
            samesite: None,
            secure: None,
            domain: None,
        }
    }

    fn upstream(registry: &EndpointRegistry, ports: &[u16]) -> Upstream {
        let endpoints = ports
            .iter()
            .map(|p| registry.endpoint(SocketAddr::from(([10, 0, 0, 1], *p))))
            .collect();
        Upstream::new("ns/web:80".into(), endpoints, None)
    }

    #[test]
    fn sticks_while_the_endpoint_serves_then_moves() {
        let registry = EndpointRegistry::default();
        let up = upstream(&registry, &[1, 2, 3]);
        let a = affinity();
        let none = None;
        let first = a.choose(&up, none, false).unwrap();
        let set = first.set_cookie.clone().unwrap();
        let value = set.split(';').next().unwrap().to_string();
        assert!(set.ends_with("; Path=/; HttpOnly"), "{set}");
        let field = format!("other=1; {value}");
        let with = Some(field.as_bytes());
        for _ in 0..5 {
            let again = a.choose(&up, with, false).unwrap();
            assert_eq!(
                again,
                Sticky {
                    endpoint: first.endpoint,
                    set_cookie: None
                }
            );
        }
        // The endpoint leaves the Service: another is chosen and named.
        let ports: Vec<u16> = [1, 2, 3]
            .into_iter()
            .filter(|p| usize::from(*p - 1) != first.endpoint)
            .collect();
        let smaller = upstream(&registry, &ports);
        let moved = a.choose(&smaller, with, false).unwrap();
        assert!(moved.set_cookie.is_some());
        // An unknown or forged value is a new client.
        let forged = Some(&b"route=10.0.0.1:1"[..]);
        assert!(a.choose(&up, forged, false).unwrap().set_cookie.is_some());
    }

    #[test]
    fn domain_is_sent_and_the_cookie_pins_to_its_backend() {
        let registry = EndpointRegistry::default();
        let up = upstream(&registry, &[1, 2]);
        let mut a = affinity();
        a.domain = Some("shop.example".into());
        let set = a.choose(&up, None, false).unwrap().set_cookie.unwrap();
        assert!(set.contains("; Path=/; Domain=shop.example;"), "{set}");
        let value = set.split(';').next().unwrap().to_string();
        assert!(a.pins(&up, Some(value.as_bytes())));
        // Another backend's endpoint, or no cookie: not pinned.
        assert!(!a.pins(&upstream(&registry, &[3]), Some(value.as_bytes())));
        assert!(!a.pins(&up, None));
    }

    #[test]
    fn secure_as_ingress_nginx() {
        let registry = EndpointRegistry::default();
        let up = upstream(&registry, &[1]);
        let none = None;
        let set = |a: &Affinity, tls: bool| a.choose(&up, none, tls).unwrap().set_cookie.unwrap();
        let mut a = affinity();
        assert!(!set(&a, false).contains("; Secure"));
        assert!(set(&a, true).contains("; Secure"));
        a.secure = Some(false);
        assert!(set(&a, true).contains("; Secure"), "HTTPS is always Secure");
        a.samesite = Some("None");
        assert!(!set(&a, false).contains("; Secure"));
        a.secure = None;
        assert!(set(&a, false).contains("; SameSite=None; Secure"));
    }

    #[test]
    fn values_are_the_same_on_every_replica() {
        let addr = SocketAddr::from(([10, 0, 0, 1], 8080));
        assert_eq!(cookie_value(addr), cookie_value(addr));
        assert_eq!(cookie_value(addr).len(), 16);
        assert_ne!(
            cookie_value(addr),
            cookie_value(SocketAddr::from(([10, 0, 0, 2], 8080)))
        );
    }

    #[test]
    fn a_cookie_pins_across_a_rules_backends_while_its_endpoint_serves() {
        use std::sync::atomic::AtomicU64;

        use crate::compile::gateway::table::{Backend, BackendFilters};
        use crate::compile::routes::Route;
        let registry = EndpointRegistry::default();
        let backend = |weight: u64, ports: &[u16]| Backend {
            weight,
            route: Ok(Route::from(Arc::new(upstream(&registry, ports)))),
            filters: BackendFilters::None,
            h2c: false,
        };
        let action = |persistence: Option<&str>, b: &[u16]| Action::Backends {
            backends: vec![backend(1, &[1, 2]), backend(1, b)].into_boxed_slice(),
            total: 2,
            next: AtomicU64::new(0),
            persistence: persistence.map(Into::into),
        };
        let name = |b: &Backend| {
            let endpoints = b.route.as_ref().unwrap().upstream.endpoints.load();
            endpoints.first().map_or(0, |e| e.addr.port())
        };
        let on_second = format!("pin={}", cookie_value(SocketAddr::from(([10, 0, 0, 1], 4))));
        let pinned = action(Some("pin"), &[3, 4]);
        for _ in 0..4 {
            let b = pick_backend(&pinned, Some(on_second.as_bytes())).unwrap();
            assert_eq!(name(b), 3);
        }
        // Without the cookie, or without persistence: by weight.
        let picks: Vec<u16> = (0..4)
            .map(|_| name(pick_backend(&pinned, None).unwrap()))
            .collect();
        assert_eq!(picks, [1, 3, 1, 3]);
        let plain = action(None, &[3, 4]);
        let picks: Vec<u16> = (0..2)
            .map(|_| name(pick_backend(&plain, Some(on_second.as_bytes())).unwrap()))
            .collect();
        assert_eq!(picks, [1, 3]);
        // The endpoint left: by weight again.
        let gone = action(Some("pin"), &[3]);
        let picks: Vec<u16> = (0..2)
            .map(|_| name(pick_backend(&gone, Some(on_second.as_bytes())).unwrap()))
            .collect();
        assert_eq!(picks, [1, 3]);
        // Its backend has none left: the session moves to one that serves.
        let empty = action(Some("pin"), &[]);
        for _ in 0..4 {
            let b = pick_backend(&empty, Some(on_second.as_bytes())).unwrap();
            assert_eq!(name(b), 1);
        }
    }

    #[test]
    fn http2_cookie_fields_are_read_as_one() {
        let one: &[(&str, &str)] = &[("cookie", "a=1; pin=x")];
        assert!(matches!(cookies(&one), Some(Cow::Borrowed(b"a=1; pin=x"))));
        let crumbs: &[(&str, &str)] = &[("cookie", "a=1"), ("accept", "*/*"), ("cookie", "pin=x")];
        let joined = cookies(&crumbs).unwrap();
        assert_eq!(&*joined, b"a=1; pin=x");
        assert_eq!(cookie(Some(&joined), "pin"), Some(&b"x"[..]));
        let none: &[(&str, &str)] = &[("accept", "*/*")];
        assert!(cookies(&none).is_none());
    }
}
