//! CORS as ingress-nginx serves it (`enable-cors` and `cors-*`): for a
//! request whose Origin is allowed (any request when every origin is), a
//! preflight (`OPTIONS`) is answered 204 by teapot and any other request
//! gets the same headers on its response.

use crate::compile::traffic::{Cors, OriginPattern};

/// The CORS response fields for one request, in ingress-nginx's order.
pub type CorsFields = Vec<(&'static str, String)>;

impl Cors {
    /// The fields for a request with `origin`, or `None` when the origin
    /// is not allowed (the response then carries none, as with
    /// ingress-nginx, and the browser refuses it).
    pub fn fields(&self, origin: Option<&[u8]>) -> Option<CorsFields> {
        let allow_origin = match &self.origins {
            None => "*".to_string(),
            Some(patterns) => {
                let origin = std::str::from_utf8(origin?).ok()?;
                if !patterns.iter().any(|p| p.matches(origin)) {
                    return None;
                }
                origin.to_string()
            }
        };
        let mut fields = Vec::with_capacity(6);
        fields.push(("access-control-allow-origin", allow_origin));
        if self.credentials {
            fields.push(("access-control-allow-credentials", "true".into()));
        }
        fields.push(("access-control-allow-methods", self.methods.clone()));
        fields.push(("access-control-allow-headers", self.headers.clone()));
        if let Some(expose) = &self.expose {
            fields.push(("access-control-expose-headers", expose.clone()));
        }
        fields.push(("access-control-max-age", self.max_age.clone()));
        Some(fields)
    }
}

impl OriginPattern {
    /// Whether the request's `origin` is this one (case-insensitive, the
    /// whole value: ingress-nginx's pattern is anchored at the end only,
    /// which let `https://x.evil/https://a.example`-like values through).
    pub fn matches(&self, origin: &str) -> bool {
        if !self.wildcard {
            return origin.eq_ignore_ascii_case(&self.text);
        }
        let Some((scheme, rest)) = origin.split_once("://") else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case(&self.scheme) || rest.len() <= self.text.len() {
            return false;
        }
        let (label, suffix) = rest.split_at(rest.len() - self.text.len());
        suffix.eq_ignore_ascii_case(&self.text)
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::compile::rate_table::RateTable;
    use crate::compile::traffic::NginxAnnotations;

    fn cors(pairs: &[(&str, &str)]) -> Cors {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (format!("nginx.ingress.kubernetes.io/{k}"), v.to_string()))
            .collect();
        let mut problems = Vec::new();
        let policy = NginxAnnotations::read(Some(&map), &mut problems)
            .policy("ns/a", || Arc::new(RateTable::new(8)), &mut problems)
            .unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        policy.cors.unwrap()
    }

    #[test]
    fn any_origin_by_default() {
        let c = cors(&[("enable-cors", "true")]);
        let fields = c.fields(None).unwrap();
        assert_eq!(fields[0], ("access-control-allow-origin", "*".into()));
        assert_eq!(
            fields[1],
            ("access-control-allow-credentials", "true".into())
        );
        assert_eq!(fields.last().unwrap().1, "1728000");
    }

    #[test]
    fn listed_origins_are_echoed_others_get_nothing() {
        let c = cors(&[
            ("enable-cors", "true"),
            (
                "cors-allow-origin",
                "https://a.example, https://*.b.example:8443",
            ),
            ("cors-allow-credentials", "false"),
            ("cors-expose-headers", "X-Total, X-Page"),
            ("cors-max-age", "60"),
        ]);
        let f = c.fields(Some(b"https://A.example")).unwrap();
        assert_eq!(f[0].1, "https://A.example");
        assert!(
            !f.iter()
                .any(|(n, _)| *n == "access-control-allow-credentials")
        );
        assert!(f.contains(&("access-control-expose-headers", "X-Total, X-Page".into())));
        assert!(c.fields(Some(b"https://x-1.b.example:8443")).is_some());
        for refused in [
            &b"https://b.example:8443"[..],
            b"https://x.y.b.example:8443",
            b"http://x.b.example:8443",
            b"https://x.b.example",
            b"https://evil.example/https://a.example",
            b"https://a.example.evil",
        ] {
            assert!(c.fields(Some(refused)).is_none(), "{refused:?}");
        }
        assert!(c.fields(None).is_none());
    }
}
