//! CORS as ingress-nginx serves it (`enable-cors` and `cors-*`) and as
//! the Gateway API's CORS filter specifies it ([`Cors::gateway`]): for a
//! request whose Origin is allowed, a preflight is answered 204 by teapot
//! and any other request gets the CORS fields on its response.
//!
//! ingress-nginx answers every `OPTIONS` from an allowed origin (any
//! request, Origin or not, when every origin is), with the same fields on
//! preflights and actual responses; the Gateway API's filter answers only
//! a real preflight (`Access-Control-Request-Method`), and never `*`
//! where a browser would refuse it (credentials allowed).

use teapot_h1::scan::is_tchar;

use crate::compile::traffic::{Cors, OriginPattern, without_default_port};
use crate::plane::traffic::{Applied, Seen, TrafficAnswer};

/// The CORS response fields for one request, in ingress-nginx's order.
pub type CorsFields = Vec<(&'static str, String)>;

/// What CORS makes of one request.
#[derive(Debug, PartialEq, Eq)]
pub enum CorsVerdict {
    /// A preflight teapot answers (204) with these fields.
    Preflight(CorsFields),
    /// Forwarded; its response gets these fields.
    Actual(CorsFields),
    /// A preflight from an origin the Gateway API's filter does not allow:
    /// answered by teapot with no CORS field, so the browser never sends
    /// the request (the specification's 204 without fields; the backend,
    /// which may not know CORS at all, never sees it).
    Refused,
}

impl Cors {
    /// The verdict for `seen`, or `None` when it is not a CORS request
    /// this route allows (the response then carries no CORS field, as
    /// with ingress-nginx and the Gateway API, and the browser refuses
    /// it). ingress-nginx's refused preflight goes to the backend like
    /// any request; the Gateway API's is [`CorsVerdict::Refused`].
    pub fn verdict(&self, seen: &Seen<'_>) -> Option<CorsVerdict> {
        if !self.gateway {
            let fields = self.fields(seen.origin)?;
            return Some(if seen.method == "OPTIONS" {
                CorsVerdict::Preflight(fields)
            } else {
                CorsVerdict::Actual(fields)
            });
        }
        let origin = seen.origin?;
        let preflight = seen.method == "OPTIONS" && seen.cors_method.is_some();
        let refused = || preflight.then_some(CorsVerdict::Refused);
        let Ok(origin) = std::str::from_utf8(origin) else {
            return refused();
        };
        let allow_origin = match &self.origins {
            // `*` is sent only where a browser accepts it.
            None if !self.credentials => "*".to_string(),
            None => origin.to_string(),
            Some(patterns) => {
                if !patterns.iter().any(|p| p.matches(origin)) {
                    return refused();
                }
                origin.to_string()
            }
        };
        let mut fields = Vec::with_capacity(6);
        fields.push(("access-control-allow-origin", allow_origin));
        if self.credentials {
            fields.push(("access-control-allow-credentials", "true".into()));
        }
        if preflight {
            // A `*` list answers what the request asked for (with
            // credentials a browser reads `*` as a name, not a wildcard);
            // a field the request did not ask about is left out.
            let asked = |list: &str, asked: Option<&[u8]>, valid: fn(u8) -> bool| {
                let asked = asked.and_then(|a| std::str::from_utf8(a).ok())?.trim();
                if asked.is_empty() || !asked.bytes().all(valid) {
                    return None;
                }
                match list {
                    "" => None,
                    "*" if self.credentials => Some(asked.to_string()),
                    list => Some(list.to_string()),
                }
            };
            if let Some(methods) = asked(&self.methods, seen.cors_method, is_tchar) {
                fields.push(("access-control-allow-methods", methods));
            }
            if let Some(headers) = asked(&self.headers, seen.cors_headers, |b| {
                is_tchar(b) || b == b',' || b == b' '
            }) {
                fields.push(("access-control-allow-headers", headers));
            }
        }
        if let Some(expose) = &self.expose {
            fields.push(("access-control-expose-headers", expose.clone()));
        }
        if !preflight {
            return Some(CorsVerdict::Actual(fields));
        }
        fields.push(("access-control-max-age", self.max_age.clone()));
        Some(CorsVerdict::Preflight(fields))
    }

    /// The fields of an answer teapot makes itself (a refusal, a
    /// redirect) to `seen` on this route: those its backend's answer would
    /// get. ingress-nginx sets its CORS fields for every status of the
    /// location (`more_set_headers`), so a browser reads the 401 or 429
    /// instead of reporting a CORS error.
    pub fn on_answer(&self, seen: &Seen<'_>) -> CorsFields {
        match self.verdict(seen) {
            Some(CorsVerdict::Actual(fields) | CorsVerdict::Preflight(fields)) => fields,
            Some(CorsVerdict::Refused) | None => Vec::new(),
        }
    }

    /// ingress-nginx's fields for a request with `origin`, or `None` when
    /// the origin is not allowed.
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

/// The CORS fields a forward carries (`applied`, set by
/// [`Cors::on_answer`]'s verdict) onto the answer that replaces it (the
/// external authentication's refusal), without the forward's other
/// response fields (an affinity cookie is for a forwarded request only).
pub fn onto_answer(answer: &mut TrafficAnswer, applied: Option<&Applied>) {
    answer.headers.extend(of_forward(applied).cloned());
}

/// The CORS fields among a forward's response fields: those teapot's own
/// 502 and 504 for it carry too.
pub fn of_forward(applied: Option<&Applied>) -> impl Iterator<Item = &(&'static str, String)> {
    let fields = applied.into_iter().flat_map(|a| &a.response_headers);
    fields.filter(|(name, _)| name.starts_with("access-control-"))
}

impl OriginPattern {
    /// Whether the request's `origin` is this one (case-insensitive, the
    /// whole value: ingress-nginx's pattern is anchored at the end only,
    /// which let `https://x.evil/https://a.example`-like values through).
    /// A Gateway API pattern (`any_labels`) takes a scheme's default port
    /// as written or not, as its specification says.
    pub fn matches(&self, origin: &str) -> bool {
        let origin = if self.any_labels {
            without_default_port(origin)
        } else {
            origin
        };
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
            && label.bytes().all(|b| {
                b.is_ascii_alphanumeric()
                    || b == b'-'
                    || (self.any_labels && (b == b'.' || (self.text.is_empty() && b == b':')))
            })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::compile::traffic::NginxAnnotations;
    use crate::live::rate_table::RateTable;

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

    /// The external authentication's refusal replaces a forward: the
    /// forward's CORS fields go onto it, its affinity cookie does not.
    #[test]
    fn a_refusal_takes_the_forwards_cors_fields_only() {
        let applied = Applied {
            response_headers: vec![
                ("access-control-allow-origin", "*".into()),
                ("set-cookie", "route=abc".into()),
                ("access-control-max-age", "60".into()),
            ],
            ..Applied::default()
        };
        let mut answer = TrafficAnswer {
            status: 401,
            reason: "auth_unauthorized",
            body: "",
            headers: vec![("www-authenticate", "Basic".into())],
        };
        onto_answer(&mut answer, Some(&applied));
        let names: Vec<&str> = answer.headers.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "www-authenticate",
                "access-control-allow-origin",
                "access-control-max-age"
            ]
        );
        onto_answer(&mut answer, None);
        assert_eq!(answer.headers.len(), 3);
    }

    fn gateway(origins: Option<&[&str]>, methods: &str, headers: &str, credentials: bool) -> Cors {
        Cors {
            origins: origins.map(|o| {
                o.iter()
                    .map(|o| match o.split_once("://*") {
                        Some((scheme, text)) => OriginPattern {
                            text: text.into(),
                            scheme: scheme.into(),
                            wildcard: true,
                            any_labels: true,
                        },
                        None => OriginPattern {
                            text: o.to_string(),
                            scheme: o.split_once("://").unwrap().0.into(),
                            wildcard: false,
                            any_labels: true,
                        },
                    })
                    .collect()
            }),
            methods: methods.into(),
            headers: headers.into(),
            expose: Some("x-3".into()),
            credentials,
            max_age: "5".into(),
            gateway: true,
        }
    }

    fn seen<'a>(
        method: &'a str,
        origin: Option<&'a str>,
        asked: Option<(&'a str, &'a str)>,
    ) -> crate::plane::traffic::Seen<'a> {
        crate::plane::traffic::Seen {
            method,
            authority: "a.example",
            path: "/",
            query: "",
            tls: true,
            client: None,
            origin: origin.map(str::as_bytes),
            cookie: None,
            cors_method: asked.map(|a| a.0.as_bytes()),
            cors_headers: asked.map(|a| a.1.as_bytes()).filter(|h| !h.is_empty()),
            canary_header: None,
        }
    }

    fn field<'f>(fields: &'f CorsFields, name: &str) -> Option<&'f str> {
        fields
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn gateway_wildcards_take_any_number_of_labels_and_default_ports() {
        let c = gateway(
            Some(&["https://www.foo.com", "https://*.bar.com"]),
            "GET, OPTIONS",
            "",
            true,
        );
        for allowed in [
            "https://www.foo.com",
            "https://www.foo.com:443",
            "https://www.bar.com",
            "https://xpto.www.bar.com",
        ] {
            assert!(
                c.verdict(&seen("GET", Some(allowed), None)).is_some(),
                "{allowed}"
            );
        }
        for refused in [
            "https://foobar.com",
            "https://bar.com",
            "http://www.bar.com",
            "https://www.foo.com:8443",
        ] {
            assert_eq!(
                c.verdict(&seen("GET", Some(refused), None)),
                None,
                "{refused}"
            );
            assert_eq!(
                c.verdict(&seen("OPTIONS", Some(refused), Some(("GET", "")))),
                Some(CorsVerdict::Refused),
                "{refused}"
            );
        }
        assert_eq!(
            c.verdict(&seen("GET", None, None)),
            None,
            "no Origin, no CORS"
        );
    }

    #[test]
    fn gateway_preflight_needs_the_requested_method_and_answers_what_was_asked() {
        let c = gateway(None, "*", "*", true);
        let Some(CorsVerdict::Preflight(f)) = c.verdict(&seen(
            "OPTIONS",
            Some("https://o.example"),
            Some(("PUT", "x-1, x-2")),
        )) else {
            panic!("a preflight");
        };
        assert_eq!(
            field(&f, "access-control-allow-origin"),
            Some("https://o.example")
        );
        assert_eq!(field(&f, "access-control-allow-methods"), Some("PUT"));
        assert_eq!(field(&f, "access-control-allow-headers"), Some("x-1, x-2"));
        assert_eq!(field(&f, "access-control-allow-credentials"), Some("true"));
        assert_eq!(field(&f, "access-control-max-age"), Some("5"));
        // Without credentials a `*` is the answer a browser accepts.
        let c = gateway(None, "*", "*", false);
        let Some(CorsVerdict::Preflight(f)) = c.verdict(&seen(
            "OPTIONS",
            Some("https://o.example"),
            Some(("PUT", "")),
        )) else {
            panic!("a preflight");
        };
        assert_eq!(field(&f, "access-control-allow-origin"), Some("*"));
        assert_eq!(field(&f, "access-control-allow-methods"), Some("*"));
        assert_eq!(
            field(&f, "access-control-allow-headers"),
            None,
            "none asked"
        );
        assert_eq!(field(&f, "access-control-allow-credentials"), None);
        // An OPTIONS that asks nothing is an actual request.
        let Some(CorsVerdict::Actual(f)) =
            c.verdict(&seen("OPTIONS", Some("https://o.example"), None))
        else {
            panic!("forwarded");
        };
        assert_eq!(field(&f, "access-control-allow-methods"), None);
        assert_eq!(field(&f, "access-control-max-age"), None);
        assert_eq!(field(&f, "access-control-expose-headers"), Some("x-3"));
        // A request line's worth of garbage is never echoed.
        let c = gateway(None, "*", "*", true);
        let Some(CorsVerdict::Preflight(f)) = c.verdict(&seen(
            "OPTIONS",
            Some("https://o.example"),
            Some(("P\"UT", "x-1;evil")),
        )) else {
            panic!("a preflight");
        };
        assert_eq!(field(&f, "access-control-allow-methods"), None);
        assert_eq!(field(&f, "access-control-allow-headers"), None);
    }
}
