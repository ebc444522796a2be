//! The upstream judgement of one exchange, `http.CompareRoundTrip`
//! (`conformance/utils/http/http.go`), on what the runner captured.
//!
//! Deliberately as upstream, quirks included: the namespace is compared
//! even when the case names none (a 200 from a backend then fails), the
//! pod is compared by prefix with `Backend`, header values are joined with
//! `,` before comparing, response headers are checked only on 200/204, and
//! a redirect without `RedirectRequest` passes.

use std::collections::BTreeMap;

use super::data::{Case, ExpectedRequest, RedirectRequest};

/// What the echo backend reported (`roundtripper.CapturedRequest`); all
/// empty but `method` when the body was not the echo's JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturedRequest {
    pub path: String,
    pub host: String,
    pub method: String,
    pub protocol: String,
    /// Header values by lower-case name.
    pub headers: Option<BTreeMap<String, Vec<String>>>,
    pub http_port: String,
    pub namespace: String,
    pub pod: String,
    /// `tls.serverName` (a TLS backend's view of the SNI).
    pub tls_server_name: String,
    /// `tls.peerCertificates`: the client certificates a TLS backend saw,
    /// PEM each.
    pub tls_peer_certificates: Vec<String>,
}

/// What came back (`roundtripper.CapturedResponse`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturedResponse {
    pub status: u16,
    /// `HTTP/1.1`, `HTTP/2.0`.
    pub protocol: String,
    /// Header values by lower-case name.
    pub headers: BTreeMap<String, Vec<String>>,
    /// The parsed `Location` of a redirect status.
    pub redirect: Option<RedirectRequest>,
}

/// The request as sent, for the redirect defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SentRequest {
    /// `http` or `https`.
    pub scheme: String,
    /// The URL path, without the query.
    pub path: String,
}

/// `roundtripper.IsRedirect`.
pub fn is_redirect(status: u16) -> bool {
    matches!(status, 300 | 301 | 302 | 303 | 304 | 305 | 307 | 308)
}

/// `roundtripper.IsTimeoutError`.
pub fn is_timeout(status: u16) -> bool {
    matches!(status, 408 | 504)
}

/// Parses the echo's JSON body as `roundtripper` does (only when the
/// response's `Content-Type` is exactly `application/json`).
pub fn captured_request(
    content_type: Option<&str>,
    body: &[u8],
    method: &str,
) -> Result<CapturedRequest, String> {
    if content_type != Some("application/json") {
        // Upstream: "assume it made the right request if the service being
        // called isn't echoing".
        return Ok(CapturedRequest {
            method: method.to_string(),
            ..CapturedRequest::default()
        });
    }
    let json: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| format!("unexpected error reading response: {e}"))?;
    let text = |key: &str| {
        json.get(key)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let headers = json
        .get("headers")
        .and_then(serde_json::Value::as_object)
        .map(|map| {
            let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (name, values) in map {
                let values: Vec<String> = match values {
                    serde_json::Value::Array(values) => values
                        .iter()
                        .map(|v| v.as_str().unwrap_or_default().to_string())
                        .collect(),
                    serde_json::Value::String(v) => vec![v.clone()],
                    _ => Vec::new(),
                };
                out.entry(name.to_ascii_lowercase())
                    .or_default()
                    .extend(values);
            }
            out
        });
    let tls = json.get("tls");
    Ok(CapturedRequest {
        path: text("path"),
        host: text("host"),
        method: text("method"),
        protocol: text("proto"),
        headers,
        http_port: text("httpPort"),
        namespace: text("namespace"),
        pod: text("pod"),
        tls_server_name: tls
            .and_then(|t| t.get("serverName"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string(),
        tls_peer_certificates: tls
            .and_then(|t| t.get("peerCertificates"))
            .and_then(serde_json::Value::as_array)
            .map(|certs| {
                certs
                    .iter()
                    .map(|c| c.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// `http.CompareRoundTrip`: `Ok` when the exchange meets the case.
pub fn compare(
    case: &Case,
    sent: &SentRequest,
    request: &CapturedRequest,
    response: &CapturedResponse,
) -> Result<(), String> {
    let codes = case.status_codes();
    if is_timeout(response.status) && codes.iter().any(|c| is_timeout(*c)) {
        return Ok(());
    }
    if !codes.contains(&response.status) {
        return Err(format!(
            "expected status code to be one of {codes:?}, got {}",
            response.status
        ));
    }
    if !case.response.protocol.is_empty() && case.response.protocol != response.protocol {
        return Err(format!(
            "expected protocol to be {}, got {}",
            case.response.protocol, response.protocol
        ));
    }
    if response.status == 200 || response.status == 204 {
        compare_success(case, request, response)
    } else if is_redirect(response.status) {
        match &case.redirect_request {
            None => Ok(()),
            Some(expected) => compare_redirect(expected, sent, response),
        }
    } else {
        Ok(())
    }
}

fn compare_success(
    case: &Case,
    request: &CapturedRequest,
    response: &CapturedResponse,
) -> Result<(), String> {
    let expected = case.expected_request.clone().unwrap_or(ExpectedRequest {
        request: case.request.clone(),
        ..ExpectedRequest::default()
    });
    let method = if expected.request.method.is_empty() {
        "GET"
    } else {
        expected.request.method.as_str()
    };
    if !expected.request.host.is_empty() && expected.request.host != request.host {
        return Err(format!(
            "expected host to be {}, got {}",
            expected.request.host, request.host
        ));
    }
    if expected.request.path != request.path {
        return Err(format!(
            "expected path to be {}, got {}",
            expected.request.path, request.path
        ));
    }
    if method != request.method {
        return Err(format!(
            "expected method to be {method}, got {}",
            request.method
        ));
    }
    if case.namespace != request.namespace {
        return Err(format!(
            "expected namespace to be {}, got {}",
            case.namespace, request.namespace
        ));
    }
    if let Some(headers) = &expected.request.headers {
        let Some(seen) = &request.headers else {
            return Err(format!("no headers captured, expected {}", headers.len()));
        };
        for (name, want) in headers {
            match seen.get(&name.to_ascii_lowercase()) {
                None => {
                    return Err(format!(
                        "expected {name} header to be set, actual headers: {seen:?}"
                    ));
                }
                Some(values) if values.join(",") != *want => {
                    return Err(format!(
                        "expected {name} header to be set to {want}, got {}",
                        values.join(",")
                    ));
                }
                Some(_) => {}
            }
        }
    }
    if !expected.http_port.is_empty() && expected.http_port != request.http_port {
        return Err(format!(
            "expected httpPort {:?}, got {:?}",
            expected.http_port, request.http_port
        ));
    }
    let strip = |s: &str| {
        if case.response.ignore_whitespace {
            s.replace(' ', "")
        } else {
            s.to_string()
        }
    };
    for (name, valid) in case.response.valid_header_values.iter().flatten() {
        let Some(values) = response.headers.get(&name.to_ascii_lowercase()) else {
            return Err(format!(
                "expected {name} header to be set, actual headers: {:?}",
                response.headers
            ));
        };
        let got = strip(&values.join(","));
        if !valid.iter().any(|v| strip(v) == got) {
            return Err(format!(
                "expected {name} header to be set to one of {valid:?}, got {got}"
            ));
        }
    }
    for (name, want) in case.response.headers.iter().flatten() {
        let Some(values) = response.headers.get(&name.to_ascii_lowercase()) else {
            return Err(format!(
                "expected {name} header to be set, actual headers: {:?}",
                response.headers
            ));
        };
        let got = strip(&values.join(","));
        if got != strip(want) {
            return Err(format!(
                "expected {name} header to be set to {want}, got {got}"
            ));
        }
    }
    for name in &case.response.absent_headers {
        if let Some(values) = response.headers.get(&name.to_ascii_lowercase()) {
            return Err(format!(
                "expected {name} response header to not be set, got {values:?}"
            ));
        }
    }
    for name in &expected.absent_headers {
        if let Some(values) = request
            .headers
            .as_ref()
            .and_then(|h| h.get(&name.to_ascii_lowercase()))
        {
            return Err(format!(
                "expected {name} request header to not be set, got {values:?}"
            ));
        }
    }
    if !request.pod.starts_with(&case.backend) {
        return Err(format!(
            "expected pod name to start with {}, got {}",
            case.backend, request.pod
        ));
    }
    if !expected.request.sni.is_empty() && expected.request.sni != request.tls_server_name {
        return Err(format!(
            "expected SNI {:?} at the backend, got {:?}",
            expected.request.sni, request.tls_server_name
        ));
    }
    match &expected.request.client_cert {
        None => {}
        Some(serde_json::Value::String(cert)) if cert.is_empty() => {}
        // As upstream: the PEM as the Secret holds it, among those the
        // backend reports, compared as text.
        Some(serde_json::Value::String(cert)) if !request.tls_peer_certificates.contains(cert) => {
            return Err(format!(
                "expected client certificate was not captured (the backend saw {} peer certificates)",
                request.tls_peer_certificates.len()
            ));
        }
        Some(serde_json::Value::String(_)) => {}
        Some(other) => {
            return Err(format!(
                "ClientCert {other} was not read from the Secret it names"
            ));
        }
    }
    Ok(())
}

fn compare_redirect(
    expected: &RedirectRequest,
    sent: &SentRequest,
    response: &CapturedResponse,
) -> Result<(), String> {
    let Some(got) = &response.redirect else {
        return Err(format!(
            "a {} response without a usable Location header",
            response.status
        ));
    };
    // setRedirectRequestDefaults: an unset host is not checked, an unset
    // scheme or path is the request's.
    let host = if expected.host.is_empty() {
        &got.host
    } else {
        &expected.host
    };
    let scheme = if expected.scheme.is_empty() {
        &sent.scheme
    } else {
        &expected.scheme
    };
    let path = if expected.path.is_empty() {
        &sent.path
    } else {
        &expected.path
    };
    if *host != got.host {
        return Err(format!(
            "expected redirected hostname to be {host:?}, got {:?}",
            got.host
        ));
    }
    if expected.port.is_empty() {
        let scheme = got.scheme.to_ascii_lowercase();
        if scheme == "http" && !matches!(got.port.as_str(), "80" | "") {
            return Err(format!(
                "for http scheme, expected redirected port to be 80 or not set, got {:?}",
                got.port
            ));
        }
        if scheme == "https" && !matches!(got.port.as_str(), "443" | "") {
            return Err(format!(
                "for https scheme, expected redirected port to be 443 or not set, got {:?}",
                got.port
            ));
        }
    } else if expected.port != got.port {
        return Err(format!(
            "expected redirected port to be {:?}, got {:?}",
            expected.port, got.port
        ));
    }
    if *scheme != got.scheme {
        return Err(format!(
            "expected redirected scheme to be {scheme:?}, got {:?}",
            got.scheme
        ));
    }
    if *path != got.path {
        return Err(format!(
            "expected redirected path to be {path:?}, got {:?}",
            got.path
        ));
    }
    Ok(())
}

/// `resp.Location()` as Go's client parses it against the request URL
/// `scheme://authority/path`: scheme, hostname, port and path of the target.
pub fn parse_location(
    location: &str,
    scheme: &str,
    authority: &str,
    path: &str,
) -> Result<RedirectRequest, String> {
    let location = location.split('#').next().unwrap_or_default();
    if location.is_empty() {
        return Err("a redirect without a Location header".into());
    }
    let (target_scheme, rest) = match location.split_once("://") {
        Some((s, rest))
            if !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            (s.to_ascii_lowercase(), format!("//{rest}"))
        }
        _ => (scheme.to_string(), location.to_string()),
    };
    let (target_authority, target_path) = if let Some(rest) = rest.strip_prefix("//") {
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let path = rest[end..].split('?').next().unwrap_or_default();
        (rest[..end].to_string(), path.to_string())
    } else {
        let reference = rest.split('?').next().unwrap_or_default();
        let path = if reference.starts_with('/') {
            reference.to_string()
        } else if reference.is_empty() {
            path.to_string()
        } else {
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
            format!("{dir}/{reference}")
        };
        (authority.to_string(), path)
    };
    let authority = target_authority
        .rsplit_once('@')
        .map_or(target_authority.as_str(), |(_, h)| h);
    let (host, port) = split_host_port(authority);
    Ok(RedirectRequest {
        scheme: target_scheme,
        host: host.to_string(),
        port: port.to_string(),
        path: target_path,
        other: BTreeMap::new(),
    })
}

/// Go's `URL.Hostname()` and `URL.Port()`.
pub fn split_host_port(authority: &str) -> (&str, &str) {
    if let Some(rest) = authority.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':').unwrap_or("")),
            None => (rest, ""),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => (host, port),
        _ => (authority, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(json: &str) -> Case {
        serde_json::from_str(json).unwrap()
    }

    fn echo(path: &str, ns: &str, pod: &str) -> CapturedRequest {
        CapturedRequest {
            path: path.into(),
            host: "example.org".into(),
            method: "GET".into(),
            protocol: "HTTP/1.1".into(),
            headers: Some(BTreeMap::from([
                ("x-a".to_string(), vec!["1".to_string(), "2".to_string()]),
                ("user-agent".to_string(), vec!["Go-http-client/1.1".into()]),
            ])),
            http_port: String::new(),
            namespace: ns.into(),
            pod: pod.into(),
            tls_server_name: String::new(),
            tls_peer_certificates: Vec::new(),
        }
    }

    fn ok(status: u16) -> CapturedResponse {
        CapturedResponse {
            status,
            protocol: "HTTP/1.1".into(),
            headers: BTreeMap::from([("x-r".to_string(), vec!["v 1".to_string()])]),
            redirect: None,
        }
    }

    fn sent() -> SentRequest {
        SentRequest {
            scheme: "http".into(),
            path: "/in".into(),
        }
    }

    #[test]
    fn backend_namespace_and_path() {
        let c = case(
            r#"{"Request": {"Path": "/in"}, "Backend": "infra-backend-v1", "Namespace": "ns"}"#,
        );
        assert_eq!(
            compare(
                &c,
                &sent(),
                &echo("/in", "ns", "infra-backend-v1-abc-1"),
                &ok(200)
            ),
            Ok(())
        );
        let err = compare(
            &c,
            &sent(),
            &echo("/in", "ns", "infra-backend-v2-x"),
            &ok(200),
        );
        assert!(
            err.unwrap_err()
                .contains("expected pod name to start with infra-backend-v1")
        );
        let err = compare(
            &c,
            &sent(),
            &echo("/in", "other", "infra-backend-v1-x"),
            &ok(200),
        );
        assert!(
            err.unwrap_err()
                .contains("expected namespace to be ns, got other")
        );
        let err = compare(
            &c,
            &sent(),
            &echo("/out", "ns", "infra-backend-v1-x"),
            &ok(200),
        );
        assert!(
            err.unwrap_err()
                .contains("expected path to be /in, got /out")
        );
        let err = compare(
            &c,
            &sent(),
            &echo("/in", "ns", "infra-backend-v1-x"),
            &ok(404),
        );
        assert_eq!(
            err.unwrap_err(),
            "expected status code to be one of [200], got 404"
        );
    }

    #[test]
    fn a_case_without_namespace_fails_on_an_echo_answer() {
        // As upstream: the namespace is compared even when unset.
        let c = case(r#"{"Request": {"Path": "/in"}, "Response": {"StatusCodes": [200, 404]}}"#);
        assert!(compare(&c, &sent(), &echo("/in", "ns", "p"), &ok(200)).is_err());
        let not_echo = captured_request(Some("text/plain"), b"nope", "GET").unwrap();
        assert_eq!(compare(&c, &sent(), &not_echo, &ok(404)), Ok(()));
    }

    #[test]
    fn expected_request_headers_and_absent_headers() {
        let c = case(
            r#"{"Request": {"Path": "/in", "Host": "example.org"}, "Namespace": "ns",
                "ExpectedRequest": {"Request": {"Path": "/in", "Headers": {"X-A": "1,2"}},
                                    "AbsentHeaders": ["X-Gone"]}}"#,
        );
        assert_eq!(
            compare(&c, &sent(), &echo("/in", "ns", "p"), &ok(200)),
            Ok(())
        );
        let mut seen = echo("/in", "ns", "p");
        seen.headers
            .as_mut()
            .unwrap()
            .insert("x-gone".into(), vec!["v".into()]);
        assert!(
            compare(&c, &sent(), &seen, &ok(200))
                .unwrap_err()
                .contains("X-Gone request header to not be set")
        );
        let c = case(
            r#"{"Request": {"Path": "/in"}, "Namespace": "ns",
                "ExpectedRequest": {"Request": {"Path": "/in", "Headers": {"X-A": "1"}}}}"#,
        );
        assert!(
            compare(&c, &sent(), &echo("/in", "ns", "p"), &ok(200))
                .unwrap_err()
                .contains("expected X-A header to be set to 1, got 1,2")
        );
        let c = case(
            r#"{"Request": {"Path": "/in"}, "Namespace": "ns",
                "ExpectedRequest": {"Request": {"Path": "/in", "Host": "other.example"}}}"#,
        );
        assert!(
            compare(&c, &sent(), &echo("/in", "ns", "p"), &ok(200))
                .unwrap_err()
                .contains("expected host to be other.example")
        );
        let c = case(r#"{"Request": {"Path": "/in", "Method": "POST"}, "Namespace": "ns"}"#);
        assert!(
            compare(&c, &sent(), &echo("/in", "ns", "p"), &ok(200))
                .unwrap_err()
                .contains("expected method to be POST, got GET")
        );
    }

    #[test]
    fn response_headers() {
        let c = case(
            r#"{"Request": {"Path": "/in"}, "Namespace": "ns",
                "Response": {"Headers": {"X-R": "v1"}, "IgnoreWhitespace": true,
                             "AbsentHeaders": ["X-No"],
                             "ValidHeaderValues": {"x-r": ["a", "v1"]}}}"#,
        );
        assert_eq!(
            compare(&c, &sent(), &echo("/in", "ns", "p"), &ok(200)),
            Ok(())
        );
        let mut response = ok(200);
        response.headers.insert("x-no".into(), vec!["1".into()]);
        assert!(
            compare(&c, &sent(), &echo("/in", "ns", "p"), &response)
                .unwrap_err()
                .contains("X-No response header to not be set")
        );
        let c = case(
            r#"{"Request": {"Path": "/in"}, "Namespace": "ns",
                "Response": {"Headers": {"X-R": "v1"}}}"#,
        );
        assert!(
            compare(&c, &sent(), &echo("/in", "ns", "p"), &ok(200))
                .unwrap_err()
                .contains("expected X-R header to be set to v1, got v 1")
        );
        let c = case(
            r#"{"Request": {"Path": "/in"}, "Namespace": "ns",
                "Response": {"ValidHeaderValues": {"x-missing": ["a"]}}}"#,
        );
        assert!(
            compare(&c, &sent(), &echo("/in", "ns", "p"), &ok(200))
                .unwrap_err()
                .contains("expected x-missing header to be set")
        );
    }

    #[test]
    fn timeouts_match_either_timeout_status() {
        let c = case(r#"{"Request": {"Path": "/in"}, "Response": {"StatusCode": 504}}"#);
        assert_eq!(
            compare(&c, &sent(), &CapturedRequest::default(), &ok(408)),
            Ok(())
        );
        assert!(compare(&c, &sent(), &CapturedRequest::default(), &ok(500)).is_err());
    }

    #[test]
    fn redirects() {
        let c = case(
            r#"{"Request": {"Path": "/in", "UnfollowRedirect": true},
                "RedirectRequest": {"Host": "example.org", "Scheme": "https"},
                "Response": {"StatusCode": 302}}"#,
        );
        let mut response = ok(302);
        response.redirect =
            Some(parse_location("https://example.org/in", "http", "gw", "/in").unwrap());
        assert_eq!(
            compare(&c, &sent(), &CapturedRequest::default(), &response),
            Ok(())
        );
        response.redirect =
            Some(parse_location("https://example.org:8443/in", "http", "gw", "/in").unwrap());
        assert!(
            compare(&c, &sent(), &CapturedRequest::default(), &response)
                .unwrap_err()
                .contains("expected redirected port to be 443 or not set, got \"8443\"")
        );
        response.redirect =
            Some(parse_location("http://example.org/in", "http", "gw", "/in").unwrap());
        assert!(
            compare(&c, &sent(), &CapturedRequest::default(), &response)
                .unwrap_err()
                .contains("expected redirected scheme to be \"https\"")
        );
        // The path defaults to the request's.
        response.redirect =
            Some(parse_location("https://example.org/other", "http", "gw", "/in").unwrap());
        assert!(
            compare(&c, &sent(), &CapturedRequest::default(), &response)
                .unwrap_err()
                .contains("expected redirected path to be \"/in\", got \"/other\"")
        );
        let c = case(
            r#"{"Request": {"Path": "/in"}, "RedirectRequest": {"Port": "8080", "Path": "/x"},
                "Response": {"StatusCode": 301}}"#,
        );
        let mut response = ok(301);
        response.redirect = Some(parse_location("/x", "http", "gw:8080", "/in").unwrap());
        assert_eq!(
            compare(&c, &sent(), &CapturedRequest::default(), &response),
            Ok(())
        );
        // No RedirectRequest: any redirect passes.
        let c = case(r#"{"Request": {"Path": "/in"}, "Response": {"StatusCode": 301}}"#);
        assert_eq!(
            compare(&c, &sent(), &CapturedRequest::default(), &ok(301)),
            Ok(())
        );
    }

    #[test]
    fn locations_resolve_like_go() {
        let r = |scheme: &str, host: &str, port: &str, path: &str| RedirectRequest {
            scheme: scheme.into(),
            host: host.into(),
            port: port.into(),
            path: path.into(),
            other: BTreeMap::new(),
        };
        let cases = [
            (
                "https://a.example:8443/p?q#f",
                r("https", "a.example", "8443", "/p"),
            ),
            ("HTTP://a.example", r("http", "a.example", "", "")),
            ("//b.example/x", r("http", "b.example", "", "/x")),
            ("/abs?x=1", r("http", "gw.example", "81", "/abs")),
            ("rel", r("http", "gw.example", "81", "/dir/rel")),
            ("http://[::1]:80/v6", r("http", "::1", "80", "/v6")),
        ];
        for (location, want) in cases {
            assert_eq!(
                parse_location(location, "http", "gw.example:81", "/dir/file").unwrap(),
                want,
                "{location}"
            );
        }
        assert!(parse_location("", "http", "gw", "/").is_err());
    }

    #[test]
    fn echo_json_is_read_only_as_json() {
        let body = br#"{"path": "/p?q", "host": "h", "method": "PUT", "proto": "HTTP/2.0",
                        "headers": {"X-A": ["1"], "x-a": ["2"]}, "namespace": "ns", "pod": "p-1"}"#;
        let got = captured_request(Some("application/json"), body, "GET").unwrap();
        assert_eq!(got.path, "/p?q");
        assert_eq!(got.method, "PUT");
        assert_eq!(got.protocol, "HTTP/2.0");
        assert_eq!(got.headers.unwrap()["x-a"], vec!["1", "2"]);
        assert_eq!((got.namespace.as_str(), got.pod.as_str()), ("ns", "p-1"));
        let tls = captured_request(
            Some("application/json"),
            br#"{"path": "/", "tls": {"serverName": "abc.example.com"}}"#,
            "GET",
        )
        .unwrap();
        assert_eq!(tls.tls_server_name, "abc.example.com");
        let c = case(
            r#"{"Request": {"Path": "/"}, "ExpectedRequest": {"Request": {"Path": "/", "SNI": "abc.example.com"}}}"#,
        );
        let mut seen = tls.clone();
        seen.method = "GET".into();
        assert_eq!(compare(&c, &sent(), &seen, &ok(200)), Ok(()));
        seen.tls_server_name = "other".into();
        assert!(
            compare(&c, &sent(), &seen, &ok(200))
                .unwrap_err()
                .contains("expected SNI \"abc.example.com\" at the backend, got \"other\"")
        );
        assert!(captured_request(Some("application/json"), b"<html>", "GET").is_err());
        let plain =
            captured_request(Some("application/json; charset=utf-8"), body, "POST").unwrap();
        assert_eq!(plain.method, "POST");
        assert_eq!(plain.pod, "");
    }

    #[test]
    fn a_client_certificate_must_be_among_the_backend_s_peers() {
        let seen = captured_request(
            Some("application/json"),
            br#"{"path": "/", "method": "GET", "tls": {"serverName": "abc.example.com",
                 "peerCertificates": ["-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n"]}}"#,
            "GET",
        )
        .unwrap();
        assert_eq!(seen.tls_peer_certificates.len(), 1);
        let with = |cert: &str| {
            case(&format!(
                r#"{{"Request": {{"Path": "/", "SNI": "abc.example.com", "ClientCert": {cert}}}}}"#
            ))
        };
        let presented = with(r#""-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n""#);
        assert_eq!(compare(&presented, &sent(), &seen, &ok(200)), Ok(()));
        let other = with(r#""-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n""#);
        let err = compare(&other, &sent(), &seen, &ok(200)).unwrap_err();
        assert!(err.contains("was not captured"), "{err}");
        // A backend that saw no certificate fails the same way.
        let none = CapturedRequest {
            tls_peer_certificates: Vec::new(),
            ..seen.clone()
        };
        assert!(compare(&presented, &sent(), &none, &ok(200)).is_err());
        // A Secret reference the runner did not read is never a pass.
        let unread = with(r#"{"Secret": {"Name": "s", "Namespace": "n"}, "Key": "tls.crt"}"#);
        let err = compare(&unread, &sent(), &seen, &ok(200)).unwrap_err();
        assert!(err.contains("not read from the Secret"), "{err}");
    }
}
