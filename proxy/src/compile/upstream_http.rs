//! ingress-nginx's `proxy-http-version` and `connection-proxy-header`:
//! the HTTP/1 version and the `Connection` field of the requests a route
//! sends its backends, read once per compile into the
//! [`teapot_h1::UpstreamHttp`] that both engines' head writer takes
//! (`teapot_h1::RequestHeadWriter`; crate::plane::h1 and
//! crate::plane::h2_upstream hand it over). A route with neither (or
//! both at teapot's defaults) carries nothing and pays nothing.
//!
//! What the head writer does with them, and why:
//!
//! - `1.0`: the request line says `HTTP/1.0`; a body of unknown length
//!   (HTTP/1.1 chunked, or an HTTP/2 stream without `content-length`) is
//!   answered 411 before anything is sent (teapot holds no request body
//!   to learn its length); the connection is not pooled (an HTTP/1.0
//!   backend closes it, or may); the response is read as HTTP/1.0 (a
//!   body without a length ends with the connection). A WebSocket
//!   upgrade stays HTTP/1.1: HTTP/1.0 has none.
//! - `connection-proxy-header`: the backend's `Connection` field, as
//!   written (bounded and checked at admission, and again here); one
//!   naming `close` keeps the connection out of the pool. The client's
//!   `Connection` never passes (hop-by-hop), and an upgrade's is
//!   `upgrade` whatever the route says.

use std::sync::Arc;

use teapot_api::annotations::NGINX_PREFIX;
use teapot_h1::{ConnectionValue, HttpVersion, UpstreamHttp};

/// The route's [`UpstreamHttp`] from `proxy-http-version: 1.0` (`http10`)
/// and `connection-proxy-header` (`connection`, as admitted); `None`
/// when both are teapot's defaults. A value the head writer refuses
/// (admission refuses it first) is reported and no field is sent.
pub fn read(
    http10: bool,
    connection: Option<&str>,
    problems: &mut Vec<String>,
) -> Option<Arc<UpstreamHttp>> {
    let connection = connection.and_then(|value| {
        let checked = ConnectionValue::new(value);
        if checked.is_none() {
            problems.push(format!(
                "{NGINX_PREFIX}connection-proxy-header: {value:?} is not a list of HTTP tokens of at most {} bytes; no Connection field is sent",
                teapot_h1::MAX_CONNECTION_VALUE
            ));
        }
        checked
    });
    let version = if http10 {
        HttpVersion::Http10
    } else {
        HttpVersion::Http11
    };
    let http = UpstreamHttp {
        version,
        connection,
    };
    (http != UpstreamHttp::DEFAULT).then(|| Arc::new(http))
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_api::annotations::{AnnotationValue, ObjectKind, parse};

    fn key(name: &str) -> String {
        format!("{NGINX_PREFIX}{name}")
    }

    #[test]
    fn defaults_are_nothing_and_settings_are_read() {
        let mut problems = Vec::new();
        assert_eq!(read(false, None, &mut problems), None);
        let http = read(true, Some("keep-alive"), &mut problems).unwrap();
        assert_eq!(http.version, HttpVersion::Http10);
        assert_eq!(
            http.connection.as_ref().map(|c| c.as_str()),
            Some("keep-alive")
        );
        let close = read(false, Some("close"), &mut problems).unwrap();
        assert!(!close.reuses() && close.takes_unknown_length());
        assert!(problems.is_empty(), "{problems:?}");
    }

    /// A hostile `connection-proxy-header` is refused at admission, naming
    /// the annotation and the bound; what admission takes, the head
    /// writer takes as the same value.
    #[test]
    fn admission_and_the_head_writer_agree() {
        let name = key("connection-proxy-header");
        for bad in [
            "close\r\nx-evil: 1",
            "keep alive",
            "close,",
            "a;b",
            "\"close\"",
            "",
            &"k".repeat(65),
            &"keep-alive, ".repeat(8),
        ] {
            let e = parse(ObjectKind::Ingress, &name, bad).unwrap_err();
            assert!(ConnectionValue::new(bad).is_none(), "{bad:?}");
            let message = format!("{name}: {e}");
            assert!(message.contains("connection-proxy-header"), "{message}");
        }
        for good in [
            "keep-alive",
            "close",
            "Upgrade",
            "keep-alive ,x-a",
            &"k".repeat(64),
        ] {
            let Ok(AnnotationValue::Text(admitted)) = parse(ObjectKind::Ingress, &name, good)
            else {
                panic!("{good:?} refused");
            };
            let written = ConnectionValue::new(good).expect(good);
            assert_eq!(written.as_str(), admitted, "{good:?}");
        }
        let version = key("proxy-http-version");
        for good in ["1.0", "1.1"] {
            assert!(parse(ObjectKind::Ingress, &version, good).is_ok());
        }
        for bad in ["2", "1", "HTTP/1.0", "1.0 "] {
            assert!(parse(ObjectKind::Ingress, &version, bad).is_err(), "{bad}");
        }
    }
}
