//! A [`TrafficAnswer`] and an [`Applied`] in each engine's terms: the
//! HTTP/1 engine's answer and edits, an HTTP/2 header map.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use teapot_h1::{HeaderEdits, Respond};

use super::{Applied, TrafficAnswer};

/// The HTTP/1 engine's answer (its Location and CORS values checked by
/// the engine like any local answer's fields).
pub fn h1_respond(answer: TrafficAnswer, tag: Arc<str>) -> Respond {
    let mut respond = Respond::new(
        answer.status,
        answer.reason,
        Bytes::from_static(answer.body.as_bytes()),
    );
    respond.tag = Some(tag);
    if !answer.body.is_empty() {
        respond.headers.push((
            Bytes::from_static(b"content-type"),
            Bytes::from_static(b"text/plain; charset=utf-8"),
        ));
    }
    for (name, value) in answer.headers {
        respond
            .headers
            .push((Bytes::from_static(name.as_bytes()), Bytes::from(value)));
    }
    respond
}

/// The fields of an HTTP/2 answer; a value no header can hold (none the
/// compile admits) is left out.
pub fn h2_fields(answer: &TrafficAnswer) -> Vec<(HeaderName, &[u8])> {
    answer
        .headers
        .iter()
        .map(|(name, value)| (HeaderName::from_static(name), value.as_bytes()))
        .collect()
}

/// The upstream timeouts of a forwarded request: the route's
/// `proxy-connect-timeout`, `proxy-read-timeout` and `proxy-send-timeout`,
/// each bounded by the operator's (`operator`: connect, read, write), which
/// applies where the route sets none.
pub fn upstream_timeouts(
    applied: Option<&Applied>,
    operator: (Duration, Duration, Duration),
) -> (Duration, Duration, Duration) {
    let Some(route) = applied.and_then(|a| a.timeouts) else {
        return operator;
    };
    let (connect, read, write) = operator;
    let under = |own: Option<Duration>, max: Duration| own.map_or(max, |t| t.min(max));
    (
        under(route.connect, connect),
        under(route.read, read),
        under(route.send, write),
    )
}

/// The request and response edits of a forwarded HTTP/1 request.
pub fn h1_edits(request: &mut HeaderEdits, response: &mut HeaderEdits, applied: Option<&Applied>) {
    let Some(applied) = applied else {
        return;
    };
    for (name, value) in &applied.request_headers {
        request.push_set(name.as_bytes(), value.as_bytes());
    }
    if let Some(host) = &applied.upstream_host {
        request.push_set(b"host", host.as_bytes());
    }
    for (name, value) in &applied.response_headers {
        response.push_set(name.as_bytes(), value.as_bytes());
    }
    for cookie in &applied.auth_cookies {
        response.push_append(b"set-cookie", cookie.as_bytes());
    }
    if let Some(headers) = &applied.custom_headers {
        super::custom_headers::onto_h1(response, headers);
    }
    for (name, value) in &applied.auth_fields {
        match value {
            Some(value) => request.push_set(name.as_str().as_bytes(), value.as_bytes()),
            None => request.push_remove(name.as_str().as_bytes()),
        }
    }
}

/// Whether an HTTP/2 request's head must be written from an edited header
/// map (the policy sets request fields).
pub fn h2_edits_request(applied: Option<&Applied>) -> bool {
    applied.is_some_and(|a| {
        !a.request_headers.is_empty() || !a.auth_fields.is_empty() || a.upstream_host.is_some()
    })
}

/// `upstream-vhost` on an HTTP/2 request: the URI's authority (which an
/// HTTP/1 backend gets as `Host`, an HTTP/2 one as `:authority`) and any
/// `Host` field. A URI without an authority keeps its `Host` field only.
pub fn h2_upstream_host(
    headers: &mut HeaderMap,
    uri: &mut http::Uri,
    applied: Option<&Applied>,
) -> Result<(), http::Error> {
    let Some(host) = applied.and_then(|a| a.upstream_host.as_deref()) else {
        return Ok(());
    };
    headers.insert(http::header::HOST, HeaderValue::from_str(host)?);
    if let Some(scheme) = uri.scheme_str()
        && uri.authority().is_some()
    {
        let target = uri.path_and_query().map_or("/", |p| p.as_str());
        *uri = format!("{scheme}://{host}{target}").parse()?;
    }
    Ok(())
}

/// The request fields on an HTTP/2 request's header map.
pub fn h2_request_edits(headers: &mut HeaderMap, applied: Option<&Applied>) {
    for (name, value) in applied.into_iter().flat_map(|a| &a.request_headers) {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    for (name, value) in applied.into_iter().flat_map(|a| &a.auth_fields) {
        match value {
            Some(value) => headers.insert(name.clone(), value.clone()),
            None => headers.remove(name),
        };
    }
}

/// The same on an HTTP/2 response's header map, after the backend's
/// own fields are rewritten ([`super::rewrite`]).
pub fn h2_response_edits(headers: &mut HeaderMap, applied: Option<&Applied>) {
    if let Some(rewriting) = applied.and_then(|a| a.rewrite.as_ref()) {
        super::rewrite::h2_rewrite(headers, rewriting);
    }
    for (name, value) in applied.into_iter().flat_map(|a| &a.response_headers) {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    for cookie in applied.into_iter().flat_map(|a| &a.auth_cookies) {
        headers.append(http::header::SET_COOKIE, cookie.clone());
    }
    if let Some(custom) = applied.and_then(|a| a.custom_headers.as_deref()) {
        super::custom_headers::onto_h2(headers, custom);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::traffic::UpstreamTimeouts;

    /// The authentication service's cookies go beside the backend's own
    /// on both engines, never in place of them.
    #[test]
    fn auth_cookies_are_added_beside_the_backends() {
        let applied = Applied {
            auth_cookies: vec![HeaderValue::from_static("alma=armud")],
            ..Applied::default()
        };
        assert!(!applied.is_empty());
        let mut headers = HeaderMap::new();
        headers.insert("set-cookie", HeaderValue::from_static("own=1"));
        h2_response_edits(&mut headers, Some(&applied));
        let cookies: Vec<_> = headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["own=1", "alma=armud"]);
        let (mut request, mut response) = (HeaderEdits::default(), HeaderEdits::default());
        h1_edits(&mut request, &mut response, Some(&applied));
        assert!(request.is_empty());
        assert_eq!(
            response,
            HeaderEdits::default().append("set-cookie", "alma=armud")
        );
    }

    /// `upstream-vhost` replaces the Host on HTTP/1 and the authority
    /// (and any Host field) on HTTP/2.
    #[test]
    fn upstream_host_replaces_the_clients() {
        let applied = Applied {
            upstream_host: Some(Arc::from("b.internal:8080")),
            ..Applied::default()
        };
        assert!(h2_edits_request(Some(&applied)));
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("a.example"));
        let mut uri: http::Uri = "https://a.example/x?y=1".parse().unwrap();
        h2_upstream_host(&mut headers, &mut uri, Some(&applied)).unwrap();
        assert_eq!(uri, "https://b.internal:8080/x?y=1");
        assert_eq!(headers.get("host").unwrap(), "b.internal:8080");
        let (mut request, mut response) = (HeaderEdits::default(), HeaderEdits::default());
        h1_edits(&mut request, &mut response, Some(&applied));
        assert_eq!(request.wire(), b"host: b.internal:8080\r\n");
    }

    /// The authentication service's fields replace the client's on both
    /// engines' requests; one the answer lacked removes the client's.
    #[test]
    fn auth_fields_replace_or_remove_the_clients() {
        let applied = Applied {
            auth_fields: vec![
                (
                    HeaderName::from_static("x-user"),
                    Some(HeaderValue::from_static("ann")),
                ),
                (HeaderName::from_static("x-groups"), None),
            ],
            ..Applied::default()
        };
        assert!(h2_edits_request(Some(&applied)));
        let mut headers = HeaderMap::new();
        headers.insert("x-user", HeaderValue::from_static("mallory"));
        headers.insert("x-groups", HeaderValue::from_static("admin"));
        h2_request_edits(&mut headers, Some(&applied));
        assert_eq!(headers.get("x-user").unwrap(), "ann");
        assert!(headers.get("x-groups").is_none());
        let (mut request, mut response) = (HeaderEdits::default(), HeaderEdits::default());
        h1_edits(&mut request, &mut response, Some(&applied));
        let mut expected = HeaderEdits::default();
        expected.push_set(b"x-user", b"ann");
        expected.push_remove(b"x-groups");
        assert_eq!(request, expected);
    }

    #[test]
    fn route_timeouts_apply_under_the_operators() {
        let secs = Duration::from_secs;
        let operator = (secs(3), secs(60), secs(60));
        assert_eq!(upstream_timeouts(None, operator), operator);
        let applied = Applied {
            timeouts: Some(UpstreamTimeouts {
                connect: Some(secs(1)),
                read: Some(secs(3600)),
                send: None,
            }),
            ..Applied::default()
        };
        // Lower than the operator's: the route's; higher: the operator's;
        // unset: the operator's.
        assert_eq!(
            upstream_timeouts(Some(&applied), operator),
            (secs(1), secs(60), secs(60))
        );
        let applied = Applied {
            timeouts: Some(UpstreamTimeouts {
                connect: None,
                read: Some(secs(5)),
                send: Some(secs(7)),
            }),
            ..Applied::default()
        };
        assert_eq!(
            upstream_timeouts(Some(&applied), operator),
            (secs(3), secs(5), secs(7))
        );
    }
}
