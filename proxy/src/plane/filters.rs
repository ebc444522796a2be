//! Gateway API filters as pure functions (docs/gateway-api.md): the new
//! path of a URLRewrite, the `Location` of a RequestRedirect, the header
//! changes a filter makes ([`header_ops`]), whether a request is mirrored.
//! Each engine applies them to its own request and response types (the
//! HTTP/1 engine as its `HeaderEdits`, crate::plane::h1; HTTP/2 on its
//! header maps, crate::plane::proxy), so the behaviour is written once.

use std::fmt::Write as _;

use crate::compile::gateway::table::{Filters, HeaderEdits, PathChange, Redirect};
use crate::plane::forwarding;

/// One header change of a Gateway API filter, as both engines apply it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderOp<'a> {
    /// Replaces every field of the name.
    Set(&'a str, &'a str),
    /// One more field of the name: the same list as `a,b` (RFC 9110
    /// §5.3), and what the conformance suite reads.
    Append(&'a str, &'a str),
    /// Removes every field of the name.
    Remove(&'a str),
}

/// `spec`'s changes in the specification's order (set, add, remove): the
/// one rule both engines apply. A name both edited and removed is only
/// removed. No filter writes or removes a hop-by-hop or framing field
/// (teapot frames the body itself: a `Content-Length` a filter set would
/// misframe it), nor, on a request, a field teapot sets itself
/// ([`forwarding::is_teapots`]).
pub fn header_ops(spec: &HeaderEdits, request: bool) -> impl Iterator<Item = HeaderOp<'_>> {
    let editable = move |name: &str| {
        let teapots = request && forwarding::is_teapots(name);
        !(teapot_h1::is_hop_by_hop(name.as_bytes()) || teapots)
    };
    let kept = move |name: &str| {
        editable(name) && !spec.remove.iter().any(|r| r.eq_ignore_ascii_case(name))
    };
    let set = spec.set.iter().filter(move |(n, _)| kept(n));
    let add = spec.add.iter().filter(move |(n, _)| kept(n));
    let remove = spec.remove.iter().filter(move |n| editable(n));
    set.map(|(n, v)| HeaderOp::Set(n, v))
        .chain(add.map(|(n, v)| HeaderOp::Append(n, v)))
        .chain(remove.map(|n| HeaderOp::Remove(n)))
}

/// A path after a path change. `matched_prefix` is the PathPrefix the
/// rule matched (without trailing slash; empty for `/`).
pub fn changed_path(path: &str, change: &PathChange, matched_prefix: Option<&str>) -> String {
    match change {
        PathChange::Full(p) => p.to_string(),
        PathChange::Prefix(replacement) => {
            let prefix = matched_prefix.unwrap_or("");
            let rest = path.strip_prefix(prefix).unwrap_or(path);
            let head = replacement.trim_end_matches('/');
            let mut out = String::with_capacity(head.len() + rest.len() + 1);
            out.push_str(head);
            if !rest.is_empty() && !rest.starts_with('/') {
                out.push('/');
            }
            out.push_str(rest);
            if out.is_empty() {
                out.push('/');
            }
            out
        }
    }
}

/// The request target (path and query) after a URLRewrite, when it
/// changes the path.
pub fn rewritten_target(filters: &Filters, path: &str, query: Option<&str>) -> Option<String> {
    let change = filters.rewrite.as_ref()?.path.as_ref()?;
    let mut target = changed_path(path, change, filters.matched_prefix.as_deref());
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        target.push('?');
        target.push_str(q);
    }
    Some(target)
}

/// The host a URLRewrite sends upstream, when it changes it.
pub fn rewritten_host(filters: &Filters) -> Option<&str> {
    filters.rewrite.as_ref()?.hostname.as_deref()
}

/// A RequestRedirect's `Location`. `scheme` is the request's (`http` or
/// `https`), `host` its authority (a port in it is dropped).
pub fn redirect_location(
    redirect: &Redirect,
    scheme: &str,
    host: &str,
    path: &str,
    query: Option<&str>,
    matched_prefix: Option<&str>,
) -> String {
    let scheme = redirect.scheme.unwrap_or(scheme);
    let host = redirect
        .hostname
        .as_deref()
        .unwrap_or_else(|| strip_port(host));
    // Without a port the redirect goes to the well-known port of its
    // scheme: that is the listener's (80, 443) when the scheme stays.
    let well_known = if scheme == "https" { 443 } else { 80 };
    let port = redirect.port.filter(|p| *p != well_known);
    let mut out = String::with_capacity(scheme.len() + host.len() + path.len() + 16);
    out.push_str(scheme);
    out.push_str("://");
    out.push_str(host);
    if let Some(p) = port {
        let _ = write!(out, ":{p}");
    }
    match &redirect.path {
        Some(change) => out.push_str(&changed_path(path, change, matched_prefix)),
        None => out.push_str(path),
    }
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        out.push('?');
        out.push_str(q);
    }
    out
}

fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.find(']').map_or(authority, |i| &authority[..=i]);
    }
    authority
        .rsplit_once(':')
        .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        .map_or(authority, |(h, _)| h)
}

/// The request target (path and query) after the URL rewrites of a
/// rule's `filters` in order, each applied to the path the one before
/// left; `None` when none rewrites it. Both engines' rewrite.
pub fn chained_target<'f>(
    filters: impl IntoIterator<Item = &'f Filters>,
    path: &str,
    query: Option<&str>,
) -> Option<String> {
    let mut rewritten: Option<String> = None;
    for f in filters {
        let current = rewritten
            .as_deref()
            .map_or(path, |t| t.split_once('?').map_or(t, |(p, _)| p));
        if let Some(target) = rewritten_target(f, current, query) {
            rewritten = Some(target);
        }
    }
    rewritten
}

/// The Host the URL rewrites of `filters` set: the last one's that sets
/// one.
pub fn last_host<'f>(filters: impl IntoIterator<Item = &'f Filters>) -> Option<&'f str> {
    filters.into_iter().filter_map(rewritten_host).last()
}

/// The head of a mirrored request, as HTTP/1.1 bytes: the request's
/// method, target and headers, without a body (`Content-Length: 0`), its
/// framing and hop-by-hop headers dropped, `Connection: close`.
pub fn mirror_request<'h>(
    method: &str,
    target: &str,
    authority: &str,
    headers: impl Iterator<Item = (&'h str, &'h [u8])>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut head =
        teapot_h1::RequestHeadWriter::start(&mut out, method.as_bytes(), target.as_bytes());
    head.field(b"host", authority.as_bytes());
    for (name, value) in headers {
        // `host` is written above; the framing and hop-by-hop fields are
        // the HTTP/1 engine's list (`teapot_h1::is_hop_by_hop`). The
        // client's forwarding fields, IDs and their `_` spellings are
        // never passed on as if teapot vouched for them
        // ([`forwarding::is_teapots`]): the mirror gets none.
        if name.eq_ignore_ascii_case("host")
            || teapot_h1::is_hop_by_hop(name.as_bytes())
            || forwarding::is_teapots(name)
        {
            continue;
        }
        head.field(name.as_bytes(), value);
    }
    head.field(b"connection", b"close");
    head.finish(teapot_h1::BodyLength::Empty);
    out
}

/// Whether the request numbered `sequence` is mirrored at `per_million`:
/// a deterministic spread, so that a share is exact over each million.
pub fn mirrored(per_million: u32, sequence: u64) -> bool {
    if per_million >= 1_000_000 {
        return true;
    }
    // Multiplying by a large odd constant spreads consecutive requests
    // over the million evenly.
    (sequence.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % 1_000_000 < u64::from(per_million)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_ops_set_append_then_remove_and_never_touch_framing_or_teapots_fields() {
        let edits = HeaderEdits {
            set: vec![
                ("x-header-set".into(), "header-set".into()),
                ("X-Gone".into(), "edited".into()),
                ("content-length".into(), "0".into()),
                ("x-forwarded-for".into(), "10.9.9.9".into()),
                ("X_Real_IP".into(), "10.9.9.9".into()),
            ],
            add: vec![
                ("x-header-add".into(), "header-add".into()),
                ("connection".into(), "close".into()),
                ("x_forwarded_for".into(), "10.9.9.9".into()),
            ],
            remove: vec!["x-gone".into(), "transfer-encoding".into()],
        };
        let request: Vec<_> = header_ops(&edits, true).collect();
        assert_eq!(
            request,
            [
                HeaderOp::Set("x-header-set", "header-set"),
                HeaderOp::Append("x-header-add", "header-add"),
                HeaderOp::Remove("x-gone"),
            ]
        );
        // On a response, X-Forwarded-For is the backend's to send.
        let response: Vec<_> = header_ops(&edits, false).collect();
        assert!(response.contains(&HeaderOp::Set("x-forwarded-for", "10.9.9.9")));
        assert!(
            !response
                .iter()
                .any(|op| matches!(op, HeaderOp::Set("content-length", _)))
        );
    }

    #[test]
    fn prefix_rewrites_follow_the_conformance_cases() {
        let p = |r: &str| PathChange::Prefix(r.into());
        assert_eq!(
            changed_path("/prefix/one/two", &p("/one"), Some("/prefix/one")),
            "/one/two"
        );
        assert_eq!(
            changed_path("/strip-prefix/three", &p("/"), Some("/strip-prefix")),
            "/three"
        );
        assert_eq!(
            changed_path("/strip-prefix", &p("/"), Some("/strip-prefix")),
            "/"
        );
        assert_eq!(changed_path("/a/b", &p("/x/"), Some("/a")), "/x/b");
        assert_eq!(changed_path("/a", &p("/x"), Some("")), "/x/a");
        assert_eq!(
            changed_path(
                "/full/one/two",
                &PathChange::Full("/one".into()),
                Some("/full")
            ),
            "/one"
        );
    }

    #[test]
    fn redirect_locations_follow_the_conformance_cases() {
        let r = |scheme: Option<&'static str>,
                 host: Option<&str>,
                 port: Option<u16>,
                 path: Option<PathChange>| Redirect {
            scheme,
            hostname: host.map(Into::into),
            port,
            path,
            status: 302,
        };
        let loc = |r: &Redirect, path: &str| {
            redirect_location(
                r,
                "http",
                "a.example:8080",
                path,
                None,
                Some("/original-prefix"),
            )
        };
        assert_eq!(
            loc(&r(None, Some("example.org"), None, None), "/x"),
            "http://example.org/x"
        );
        assert_eq!(
            loc(&r(None, Some("example.org"), Some(80), None), "/x"),
            "http://example.org/x"
        );
        assert_eq!(
            loc(&r(None, Some("example.org"), Some(8080), None), "/x"),
            "http://example.org:8080/x"
        );
        assert_eq!(
            loc(
                &r(Some("https"), Some("example.org"), Some(443), None),
                "/x"
            ),
            "https://example.org/x"
        );
        assert_eq!(
            loc(&r(Some("https"), None, Some(8443), None), "/x"),
            "https://a.example:8443/x"
        );
        assert_eq!(
            loc(
                &r(
                    None,
                    None,
                    None,
                    Some(PathChange::Prefix("/replacement-prefix".into()))
                ),
                "/original-prefix/lemon"
            ),
            "http://a.example/replacement-prefix/lemon"
        );
        assert_eq!(
            redirect_location(
                &r(None, None, None, None),
                "https",
                "[::1]:443",
                "/p",
                Some("q=1"),
                None
            ),
            "https://[::1]/p?q=1"
        );
    }

    #[test]
    fn a_mirrored_request_has_no_body_and_no_framing_of_its_own() {
        let headers: Vec<(&str, &[u8])> = vec![
            ("x-a", b"1"),
            ("Content-Length", b"5"),
            ("Host", b"evil"),
            ("connection", b"keep-alive"),
            ("Proxy-Authorization", b"Basic eDp5"),
            // A client's forwarding fields, IDs and their look-alikes.
            ("X-Forwarded-For", b"6.6.6.6"),
            ("X_Forwarded_For", b"6.6.6.6"),
            ("x_real_ip", b"6.6.6.6"),
            ("Forwarded", b"for=6.6.6.6"),
            ("X_Request_Id", b"forged"),
        ];
        let bytes = mirror_request("POST", "/p?q", "a.example", headers.into_iter());
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "POST /p?q HTTP/1.1\r\nhost: a.example\r\nx-a: 1\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
        );
    }

    #[test]
    fn mirror_shares_are_exact_at_the_ends_and_close_between() {
        assert!((0..1000).all(|i| mirrored(1_000_000, i)));
        assert!((0..1000).all(|i| !mirrored(0, i)));
        let half = (0..100_000).filter(|&i| mirrored(500_000, i)).count();
        assert!((45_000..55_000).contains(&half), "{half}");
    }
}
