//! A route's rewriting of its backends' response fields
//! (crate::compile::response_rewrite: `proxy-redirect-from/to`,
//! `proxy-cookie-domain`, `proxy-cookie-path`), as nginx's
//! `ngx_http_proxy_module` does it:
//!
//! - `Location`: a value starting with FROM (case-sensitively) gets TO in
//!   its place; one that then starts with `/` is made absolute with the
//!   request's scheme and host (nginx's `absolute_redirect`, without the
//!   port as ingress-nginx's `port_in_redirect off`), unless the route
//!   has `relative-redirects`. A value that does not match is sent as the
//!   backend wrote it, relative or not.
//! - `Refresh`: the URL after its `url=` the same way, never made
//!   absolute.
//! - `Set-Cookie`: a `Domain` attribute equal to FROM (ignoring case and
//!   a leading `.`, which is kept) becomes TO; a `Path` attribute starting
//!   with FROM gets TO in its place. A cookie so rewritten has its
//!   attributes written back joined by `; ` (as nginx does); any other is
//!   sent byte for byte.
//!
//! Both engines ask [`Rewriting::field`] for each such field of the
//! backend's final response only: the HTTP/1 engine through
//! `teapot_h1::Upstreams::response_rewrite`, an HTTP/2 response's header
//! map through [`h2_rewrite`]; teapot's own answers and the fields teapot
//! adds (CORS, cookies of its own) are never rewritten.

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};

use super::Seen;
use crate::compile::response_rewrite::{Replace, ResponseRewrite};

/// One forwarded request's rewriting: the route's rules and, where a
/// `Location` may be rewritten to a path, the request's `scheme://host`.
#[derive(Debug)]
pub struct Rewriting {
    rules: Arc<ResponseRewrite>,
    origin: Option<Box<str>>,
}

impl Rewriting {
    pub fn new(rules: &Arc<ResponseRewrite>, seen: &Seen<'_>) -> Rewriting {
        let origin = rules.absolutes().then(|| {
            let mut buf = [0u8; 256];
            let host = teapot_api::host::normalize_request_host(seen.authority, &mut buf)?;
            let scheme = if seen.tls { "https" } else { "http" };
            Some(format!("{scheme}://{host}").into_boxed_str())
        });
        Rewriting {
            rules: rules.clone(),
            origin: origin.flatten(),
        }
    }

    /// Writes to `out` the value the backend's field `name` goes on with
    /// in place of `value`; `false` (nothing written): sent unchanged.
    pub fn field(&self, name: &[u8], value: &[u8], out: &mut Vec<u8>) -> bool {
        let rules = &*self.rules;
        if name.eq_ignore_ascii_case(b"location") {
            let Some(redirect) = &rules.redirect else {
                return false;
            };
            let Some(rest) = value.strip_prefix(redirect.from.as_bytes()) else {
                return false;
            };
            if redirect.to.starts_with('/')
                && let Some(origin) = &self.origin
            {
                out.extend_from_slice(origin.as_bytes());
            }
            out.extend_from_slice(redirect.to.as_bytes());
            out.extend_from_slice(rest);
            true
        } else if name.eq_ignore_ascii_case(b"refresh") {
            rules
                .redirect
                .as_ref()
                .is_some_and(|redirect| refresh(redirect, value, out))
        } else if name.eq_ignore_ascii_case(b"set-cookie") {
            (rules.cookie_domain.is_some() || rules.cookie_path.is_some())
                && cookie(rules, value, out)
        } else {
            false
        }
    }
}

impl teapot_h1::RewriteField for Rewriting {
    fn rewrite(&self, name: &[u8], value: &[u8], out: &mut Vec<u8>) -> bool {
        self.field(name, value, out)
    }
}

/// `Refresh: 5; url=FROM...`: the URL after the first `url=` (any case).
fn refresh(redirect: &Replace, value: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(at) = value
        .windows(4)
        .position(|w| w.eq_ignore_ascii_case(b"url="))
        .map(|i| i + 4)
    else {
        return false;
    };
    let Some(rest) = value[at..].strip_prefix(redirect.from.as_bytes()) else {
        return false;
    };
    out.extend_from_slice(&value[..at]);
    out.extend_from_slice(redirect.to.as_bytes());
    out.extend_from_slice(rest);
    true
}

/// A `Set-Cookie` value with its `Domain` and `Path` rewritten; `false`
/// (and `out` as it was) when neither matched.
fn cookie(rules: &ResponseRewrite, value: &[u8], out: &mut Vec<u8>) -> bool {
    let mut attributes = value.split(|&b| b == b';').map(trim);
    // nginx leaves a cookie without `name=value` alone.
    let Some(pair) = attributes.next().filter(|p| p.contains(&b'=')) else {
        return false;
    };
    let start = out.len();
    out.extend_from_slice(pair);
    let mut changed = false;
    for attribute in attributes.filter(|a| !a.is_empty()) {
        out.extend_from_slice(b"; ");
        let Some(eq) = attribute.iter().position(|&b| b == b'=') else {
            out.extend_from_slice(attribute);
            continue;
        };
        let (key, attr_value) = (trim(&attribute[..eq]), trim(&attribute[eq + 1..]));
        let rewritten = if key.eq_ignore_ascii_case(b"domain") {
            rules.cookie_domain.as_ref().and_then(|r| {
                let (dot, bare) = match attr_value.strip_prefix(b".") {
                    Some(bare) => (&b"."[..], bare),
                    None => (&b""[..], attr_value),
                };
                bare.eq_ignore_ascii_case(r.from.as_bytes())
                    .then(|| [dot, r.to.as_bytes()].concat())
            })
        } else if key.eq_ignore_ascii_case(b"path") {
            rules.cookie_path.as_ref().and_then(|r| {
                let rest = attr_value.strip_prefix(r.from.as_bytes())?;
                Some([r.to.as_bytes(), rest].concat())
            })
        } else {
            None
        };
        match rewritten {
            Some(new) => {
                changed = true;
                out.extend_from_slice(key);
                out.push(b'=');
                out.extend_from_slice(&new);
            }
            None => out.extend_from_slice(attribute),
        }
    }
    if !changed {
        out.truncate(start);
    }
    changed
}

fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

/// The same on an HTTP/2 response's header map (HTTP/2 to an HTTP/1 or
/// an h2c backend), before teapot's own fields are added: each rewritten
/// value replaces the backend's in place, the order of a name's values
/// kept; a value no header can hold leaves the backend's.
pub fn h2_rewrite(headers: &mut HeaderMap, rewriting: &Rewriting) {
    const NAMES: [&str; 3] = ["location", "refresh", "set-cookie"];
    let mut out = Vec::new();
    for name in NAMES {
        let name = HeaderName::from_static(name);
        if !headers.contains_key(&name) {
            continue;
        }
        let mut changed = false;
        let values: Vec<HeaderValue> = headers
            .get_all(&name)
            .iter()
            .map(|value| {
                out.clear();
                if rewriting.field(name.as_str().as_bytes(), value.as_bytes(), &mut out)
                    && let Ok(new) = HeaderValue::from_bytes(&out)
                {
                    changed = true;
                    return new;
                }
                value.clone()
            })
            .collect();
        if changed {
            headers.remove(&name);
            for value in values {
                headers.append(name.clone(), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made(redirect: Option<(&str, &str)>, domain: Option<(&str, &str)>) -> ResponseRewrite {
        let pair = |p: Option<(&str, &str)>| {
            p.map(|(from, to)| Replace {
                from: from.into(),
                to: to.into(),
            })
        };
        ResponseRewrite {
            redirect: pair(redirect),
            cookie_domain: pair(domain),
            cookie_path: pair(Some(("/one/", "/"))),
            relative: false,
        }
    }

    fn seen(tls: bool) -> Seen<'static> {
        Seen {
            method: "GET",
            authority: "App.Example:8443",
            path: "/",
            query: "",
            tls,
            client: None,
            origin: None,
            cookie: None,
            cors_method: None,
            cors_headers: None,
            canary_header: None,
        }
    }

    fn field(r: &Rewriting, name: &str, value: &str) -> Option<String> {
        let mut out = b"kept".to_vec();
        let wrote = r.field(name.as_bytes(), value.as_bytes(), &mut out);
        assert!(out.starts_with(b"kept"), "what was there is left alone");
        if !wrote {
            assert_eq!(out, b"kept", "{name}: {value}: nothing written");
            return None;
        }
        Some(String::from_utf8(out[4..].to_vec()).unwrap())
    }

    /// nginx's `proxy_redirect FROM TO`: a prefix of `Location`, replaced;
    /// a path made absolute with the request's scheme and host (no port).
    #[test]
    fn location_and_refresh() {
        let rules = Arc::new(made(Some(("http://internal:8080/", "/")), None));
        let r = Rewriting::new(&rules, &seen(true));
        assert_eq!(
            field(&r, "Location", "http://internal:8080/x?y=1").as_deref(),
            Some("https://app.example/x?y=1")
        );
        // Case-sensitive, a prefix only; other values as the backend wrote.
        assert_eq!(field(&r, "location", "HTTP://internal:8080/x"), None);
        assert_eq!(field(&r, "location", "/x"), None);
        assert_eq!(field(&r, "location", "http://other/internal:8080/"), None);
        assert_eq!(field(&r, "content-location", "http://internal:8080/"), None);
        // Refresh: after `url=`, never made absolute.
        assert_eq!(
            field(&r, "Refresh", "5; URL=http://internal:8080/next").as_deref(),
            Some("5; URL=/next")
        );
        assert_eq!(field(&r, "refresh", "5"), None);
        // To a host: no origin is needed or added.
        let host = Arc::new(made(Some(("hello.com", "goodbye.com")), None));
        let r = Rewriting::new(&host, &seen(false));
        assert!(r.origin.is_none());
        assert_eq!(
            field(&r, "location", "hello.com/a").as_deref(),
            Some("goodbye.com/a")
        );
        // relative-redirects: the path stays a path.
        let relative = Arc::new(ResponseRewrite {
            relative: true,
            ..made(Some(("http://internal:8080/", "/app/")), None)
        });
        let r = Rewriting::new(&relative, &seen(false));
        assert_eq!(
            field(&r, "location", "http://internal:8080/x").as_deref(),
            Some("/app/x")
        );
    }

    /// nginx's `proxy_cookie_domain` / `proxy_cookie_path`: the attribute
    /// rewritten, the cookie written back with `; ` between attributes;
    /// one without a match byte for byte.
    #[test]
    fn cookie_domain_and_path() {
        let rules = Arc::new(made(None, Some(("internal", "example.org"))));
        let r = Rewriting::new(&rules, &seen(false));
        assert_eq!(
            field(
                &r,
                "Set-Cookie",
                "id=1;Domain=INTERNAL;  path=/one/two ;HttpOnly"
            )
            .as_deref(),
            Some("id=1; Domain=example.org; path=/two; HttpOnly")
        );
        // A leading dot is kept; only an equal domain is rewritten.
        assert_eq!(
            field(&r, "set-cookie", "id=1; Domain=.internal").as_deref(),
            Some("id=1; Domain=.example.org")
        );
        assert_eq!(field(&r, "set-cookie", "id=1; Domain=a.internal"), None);
        assert_eq!(field(&r, "set-cookie", "id=1; Path=/two/one/"), None);
        assert_eq!(field(&r, "set-cookie", "id=1;  Secure ;"), None);
        // No `name=value`: left alone, as nginx does.
        assert_eq!(field(&r, "set-cookie", "Domain=internal"), None);
        // The value `id` itself is not an attribute.
        assert_eq!(field(&r, "set-cookie", "domain=internal"), None);
    }

    /// An HTTP/2 header map: each value rewritten in place, in order;
    /// other fields untouched.
    #[test]
    fn h2_values_in_place() {
        let rules = Arc::new(made(
            Some(("http://internal:8080/", "/")),
            Some(("internal", "example.org")),
        ));
        let r = Rewriting::new(&rules, &seen(false));
        let mut headers = HeaderMap::new();
        headers.insert(
            "location",
            HeaderValue::from_static("http://internal:8080/x"),
        );
        headers.append(
            "set-cookie",
            HeaderValue::from_static("a=1; Domain=internal"),
        );
        headers.append("set-cookie", HeaderValue::from_static("b=2"));
        headers.append("set-cookie", HeaderValue::from_static("c=3; Path=/one/x"));
        headers.insert("x-other", HeaderValue::from_static("http://internal:8080/"));
        h2_rewrite(&mut headers, &r);
        assert_eq!(headers["location"], "http://app.example/x");
        let cookies: Vec<_> = headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1; Domain=example.org", "b=2", "c=3; Path=/x"]);
        assert_eq!(headers["x-other"], "http://internal:8080/");
    }
}
