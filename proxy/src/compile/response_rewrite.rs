//! ingress-nginx's rewriting of a backend's response fields:
//! `proxy-redirect-from` / `proxy-redirect-to` (nginx's `proxy_redirect
//! FROM TO`: a `Location` or `Refresh` URL starting with FROM gets TO in
//! its place), `proxy-cookie-domain` and `proxy-cookie-path` (nginx's
//! `proxy_cookie_domain FROM TO`, `proxy_cookie_path FROM TO`: the
//! `Domain` and `Path` attributes of each `Set-Cookie`). Read once per
//! compile into a [`ResponseRewrite`] that a route's
//! [`crate::compile::traffic::TrafficPolicy`] carries only when one of
//! them rewrites something, so a route without them pays nothing; the
//! rewriting itself is crate::plane::traffic::rewrite.
//!
//! As ingress-nginx's template writes them: `proxy-redirect-from: off`
//! or `default` (or no annotation) is no rewriting of `Location`
//! (`default` is nginx's replacement of the proxied URL,
//! `http://upstream_balancer`, which no backend writes), and FROM without
//! TO (or TO `off`) is none either; `off` for a cookie annotation is none.
//!
//! Bounds: each annotation is at most
//! [`teapot_api::annotations::MAX_VALUE_LEN`] bytes of printable ASCII
//! (admission); FROM and TO are single tokens of the characters
//! ingress-nginx's validators admit (URL characters, no space, quote or
//! `%`), one pair per annotation as the annotation has. A rewritten field
//! grows by at most TO's length (and, for a `Location` made absolute, the
//! request's scheme and host).

use teapot_api::annotations::NGINX_PREFIX;

use crate::compile::proxying::Annotations;

/// One `FROM TO` pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replace {
    pub from: Box<str>,
    pub to: Box<str>,
}

/// What a route rewrites in its backends' responses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResponseRewrite {
    /// `proxy-redirect-from` / `-to`: a `Location` (or `Refresh` URL)
    /// starting with `from`, case-sensitively.
    pub redirect: Option<Replace>,
    /// `proxy-cookie-domain`: a `Domain` equal to `from` (ignoring case
    /// and a leading `.` on either; `from` is kept without it).
    pub cookie_domain: Option<Replace>,
    /// `proxy-cookie-path`: a `Path` starting with `from`.
    pub cookie_path: Option<Replace>,
    /// `relative-redirects`: a `Location` rewritten to a path stays
    /// relative; otherwise it is made absolute with the request's scheme
    /// and host, as nginx's `absolute_redirect` does to a rewritten one.
    pub relative: bool,
}

impl ResponseRewrite {
    /// Whether the request's scheme and host are needed: a `Location` may
    /// be rewritten to a path that is then made absolute.
    pub fn absolutes(&self) -> bool {
        !self.relative
            && self
                .redirect
                .as_ref()
                .is_some_and(|r| r.to.starts_with('/'))
    }
}

/// The characters ingress-nginx's `URLIsValidRegex` admits in
/// `proxy-redirect-*` and `proxy-cookie-path` (`[-._~a-zA-Z0-9/:,?&=]`).
fn url_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~/:,?&=".contains(&b)
}

/// The characters of `proxy-cookie-domain`'s tokens
/// (`[-._~a-zA-Z0-9/:]`).
fn domain_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~/:".contains(&b)
}

/// The [`ResponseRewrite`] of `nginx` (`None`: nothing rewritten). A value
/// teapot cannot use is pushed to `problems` and left out.
pub fn read(nginx: &impl Annotations, problems: &mut Vec<String>) -> Option<ResponseRewrite> {
    let rewrite = ResponseRewrite {
        redirect: redirect(nginx, problems),
        cookie_domain: pair(nginx, "proxy-cookie-domain", domain_char, problems).map(|mut r| {
            if let Some(bare) = r.from.strip_prefix('.') {
                r.from = bare.into();
            }
            r
        }),
        cookie_path: pair(nginx, "proxy-cookie-path", url_char, problems),
        relative: nginx.flag("relative-redirects") == Some(true),
    };
    let any = rewrite.redirect.is_some()
        || rewrite.cookie_domain.is_some()
        || rewrite.cookie_path.is_some();
    any.then_some(rewrite)
}

/// `proxy-redirect-from` with `proxy-redirect-to`, as ingress-nginx's
/// template pairs them.
fn redirect(nginx: &impl Annotations, problems: &mut Vec<String>) -> Option<Replace> {
    let from = nginx.text("proxy-redirect-from")?.trim();
    if from == "off" || from == "default" {
        return None;
    }
    let to = nginx.text("proxy-redirect-to").map(str::trim);
    let Some(to) = to.filter(|to| *to != "off") else {
        problems.push(format!(
            "{NGINX_PREFIX}proxy-redirect-from without {NGINX_PREFIX}proxy-redirect-to rewrites nothing (ingress-nginx writes no proxy_redirect)"
        ));
        return None;
    };
    for (name, value) in [("from", from), ("to", to)] {
        if !token(value, url_char) {
            problems.push(format!(
                "{NGINX_PREFIX}proxy-redirect-{name}: {value:?} is not one word of URL characters (letters, digits, -._~/:,?&=; no leading ~); Location is not rewritten"
            ));
            return None;
        }
    }
    Some(Replace {
        from: from.into(),
        to: to.into(),
    })
}

/// A cookie annotation: `off`, or `FROM TO`.
fn pair(
    nginx: &impl Annotations,
    name: &str,
    allowed: fn(u8) -> bool,
    problems: &mut Vec<String>,
) -> Option<Replace> {
    let value = nginx.text(name)?.trim();
    if value == "off" {
        return None;
    }
    let mut words = value.split_ascii_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some(from), Some(to), None) if token(from, allowed) && token(to, allowed) => {
            Some(Replace {
                from: from.into(),
                to: to.into(),
            })
        }
        _ => {
            problems.push(format!(
                "{NGINX_PREFIX}{name}: {value:?} is neither \"off\" nor two words FROM TO (letters, digits, -._~/: and for a path ,?&=; no leading ~); Set-Cookie is not rewritten"
            ));
            None
        }
    }
}

/// A word of `allowed` characters. A leading `~` would make nginx read a
/// FROM as a regular expression, which teapot does not: refused in
/// either place rather than matched as text.
fn token(value: &str, allowed: fn(u8) -> bool) -> bool {
    !value.is_empty() && !value.starts_with('~') && value.bytes().all(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::compile::proxying::Admitted;

    fn rewrite(pairs: &[(&str, &str)]) -> (Option<ResponseRewrite>, Vec<String>) {
        let nginx = Admitted(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        let mut problems = Vec::new();
        (read(&nginx, &mut problems), problems)
    }

    fn replace(from: &str, to: &str) -> Option<Replace> {
        Some(Replace {
            from: from.into(),
            to: to.into(),
        })
    }

    /// ingress-nginx's template: `off` and `default` rewrite nothing, FROM
    /// needs TO (not `off`); a cookie annotation is `off` or one pair.
    #[test]
    fn annotations_pair_as_ingress_nginx_writes_them() {
        assert_eq!(rewrite(&[]), (None, Vec::new()));
        for from in ["off", "default"] {
            let (r, problems) = rewrite(&[
                ("proxy-redirect-from", from),
                ("proxy-redirect-to", "goodbye.com"),
            ]);
            assert_eq!((r, problems.len()), (None, 0), "{from}");
        }
        let (r, problems) = rewrite(&[
            ("proxy-redirect-from", "hello.com"),
            ("proxy-redirect-to", "off"),
        ]);
        assert_eq!((r, problems.len()), (None, 1));
        assert_eq!(rewrite(&[("proxy-redirect-to", "x")]).0, None);
        let (r, _) = rewrite(&[
            ("proxy-redirect-from", "http://internal:8080/"),
            ("proxy-redirect-to", "/"),
            ("proxy-cookie-domain", "localhost example.org"),
            ("proxy-cookie-path", "/one/ /"),
        ]);
        let r = r.unwrap();
        assert_eq!(r.redirect, replace("http://internal:8080/", "/"));
        assert_eq!(r.cookie_domain, replace("localhost", "example.org"));
        assert_eq!(r.cookie_path, replace("/one/", "/"));
        assert!(r.absolutes());
        // A leading dot of the domain to replace is not part of it (nginx).
        let (r, _) = rewrite(&[("proxy-cookie-domain", ".internal  .example.org")]);
        assert_eq!(
            r.unwrap().cookie_domain,
            replace("internal", ".example.org")
        );
        let (r, _) = rewrite(&[
            ("proxy-redirect-from", "http://a/"),
            ("proxy-redirect-to", "/b/"),
            ("relative-redirects", "true"),
        ]);
        assert!(!r.unwrap().absolutes());
        assert_eq!(rewrite(&[("proxy-cookie-path", "off")]).0, None);
    }

    /// What is not one word of the characters ingress-nginx admits is
    /// reported and rewrites nothing: no space, quote, `%`, `$` variable or
    /// third word rides into a response field.
    #[test]
    fn hostile_values_rewrite_nothing() {
        for (from, to) in [
            ("a b", "c"),
            ("a", "c d"),
            ("$host", "x"),
            ("a", "\"x\""),
            ("a", "x%0d%0aset-cookie:1"),
            ("~^/(.*)$", "/$1"),
        ] {
            let (r, problems) =
                rewrite(&[("proxy-redirect-from", from), ("proxy-redirect-to", to)]);
            assert_eq!((r, problems.len()), (None, 1), "{from} {to}");
        }
        for value in ["one", "a b c", "a\u{7f} b", "a $x", "a b;c", "~a b"] {
            for name in ["proxy-cookie-domain", "proxy-cookie-path"] {
                let (r, problems) = rewrite(&[(name, value)]);
                assert_eq!((r, problems.len()), (None, 1), "{name}: {value}");
            }
        }
        // A path's URL characters are no domain's.
        let (r, _) = rewrite(&[("proxy-cookie-domain", "a?b c")]);
        assert_eq!(r, None);
        let (r, _) = rewrite(&[("proxy-cookie-path", "/a?b /c")]);
        assert!(r.is_some());
    }
}
