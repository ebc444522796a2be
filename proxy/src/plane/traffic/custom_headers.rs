//! `custom-headers` in the request path: a route whose ConfigMap was
//! refused answers 503 (ingress-nginx's denied location); any other
//! forwards, and its response gets the ConfigMap's fields, replacing the
//! backend's of the same names (nginx's `more_set_headers`), on both
//! engines. The fields were made once by the compile
//! (crate::compile::custom_headers): a response pays a header set each.

use http::HeaderMap;
use teapot_h1::HeaderEdits;

use super::TrafficAnswer;
use crate::compile::custom_headers::CustomHeaders;

pub const REFUSED_BODY: &str = "503 this route's custom response headers cannot be served\n";

/// The answer of a route whose ConfigMap was refused (why is on the
/// Ingress's status).
pub fn refused(headers: &CustomHeaders) -> Option<TrafficAnswer> {
    headers.refused.as_ref().map(|_| TrafficAnswer {
        status: 503,
        reason: "custom_headers_refused",
        body: REFUSED_BODY,
        headers: Vec::new(),
    })
}

/// The fields on an HTTP/1 response's edits.
pub fn onto_h1(response: &mut HeaderEdits, headers: &CustomHeaders) {
    for (name, value) in &headers.fields {
        response.push_set(name.as_str().as_bytes(), value.as_bytes());
    }
}

/// The fields on an HTTP/2 response's header map.
pub fn onto_h2(map: &mut HeaderMap, headers: &CustomHeaders) {
    for (name, value) in &headers.fields {
        map.insert(name.clone(), value.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    fn headers() -> CustomHeaders {
        CustomHeaders {
            fields: vec![
                (
                    HeaderName::from_static("content-type"),
                    HeaderValue::from_static("application/json"),
                ),
                (
                    HeaderName::from_static("x-frame-options"),
                    HeaderValue::from_static("DENY"),
                ),
            ],
            refused: None,
        }
    }

    /// The backend's field of the same name is replaced, others kept, on
    /// both engines.
    #[test]
    fn the_fields_replace_the_backends_of_their_names() {
        let mut map = HeaderMap::new();
        map.insert("content-type", HeaderValue::from_static("text/html"));
        map.append("content-type", HeaderValue::from_static("text/plain"));
        map.insert("x-own", HeaderValue::from_static("1"));
        onto_h2(&mut map, &headers());
        let types: Vec<_> = map.get_all("content-type").iter().collect();
        assert_eq!(types, ["application/json"]);
        assert_eq!(map["x-frame-options"], "DENY");
        assert_eq!(map["x-own"], "1");
        let mut edits = HeaderEdits::default();
        onto_h1(&mut edits, &headers());
        assert_eq!(
            edits,
            HeaderEdits::default()
                .set("content-type", "application/json")
                .set("x-frame-options", "DENY")
        );
        assert_eq!(refused(&headers()), None);
    }

    #[test]
    fn a_refused_config_map_answers_503() {
        let refused_headers = CustomHeaders {
            refused: Some("ConfigMap shop/h not found".into()),
            ..CustomHeaders::default()
        };
        let answer = refused(&refused_headers).unwrap();
        assert_eq!((answer.status, answer.body), (503, REFUSED_BODY));
    }
}
