//! Custom response headers: ingress-nginx's `custom-headers` annotation
//! names a ConfigMap whose entries are set on every response of the
//! Ingress's routes (nginx's `more_set_headers`), replacing the
//! backend's field of the same name. Read here once for every part: the
//! webhook (the agent's copy of a tenant's ConfigMap), the agent (it
//! names a tenant ConfigMap it will not copy), the store (what it keeps of
//! a ConfigMap) and the compile (what the proxy sets).
//!
//! A tenant controls every byte of the ConfigMap, so its shape is
//! bounded before anything is kept: [`MAX_ENTRIES`] fields, names of at
//! most [`MAX_NAME_BYTES`] in ingress-nginx's alphabet (letters, digits,
//! `-`, `_`), values of printable ASCII of at most [`MAX_VALUE_BYTES`],
//! and [`MAX_TOTAL_BYTES`] in all. Names the proxy or the backend own are
//! refused ([`refused_name`]): the message framing (`Content-Length`,
//! `Transfer-Encoding`, `Content-Encoding`), the hop-by-hop fields HTTP/2
//! forbids (`Connection`, `Keep-Alive`, `Upgrade`, ...), and `Set-Cookie`
//! (a fixed cookie on every response replaces the backend's sessions and
//! teapot's affinity cookie, and plants one cookie in every visitor's
//! browser: session fixation, not a header).

use std::collections::BTreeMap;

/// Most fields one ConfigMap sets.
pub const MAX_ENTRIES: usize = 32;

/// Longest field name (`Content-Security-Policy-Report-Only` is 35).
pub const MAX_NAME_BYTES: usize = 64;

/// Longest field value: a long Content-Security-Policy fits.
pub const MAX_VALUE_BYTES: usize = 4096;

/// Most bytes of names and values together, what every response of the
/// route carries besides the backend's own.
pub const MAX_TOTAL_BYTES: usize = 8192;

/// The key a ConfigMap keeps a BackendTLSPolicy's trust anchors under:
/// not a field name (it has a dot), and not read as one.
const CA_CERT_KEY: &str = "ca.crt";

/// Field names no ConfigMap may set (compared lowercase), and why.
const REFUSED: &[(&str, &str)] = &[
    (
        "content-length",
        "frames the message: the backend's body decides it",
    ),
    (
        "transfer-encoding",
        "frames the message: the proxy decides it per connection",
    ),
    (
        "content-encoding",
        "says how the body is coded: the backend's body decides it",
    ),
    ("connection", "a hop-by-hop field, forbidden on HTTP/2"),
    ("keep-alive", "a hop-by-hop field, forbidden on HTTP/2"),
    (
        "proxy-connection",
        "a hop-by-hop field, forbidden on HTTP/2",
    ),
    ("te", "a hop-by-hop field, forbidden on HTTP/2"),
    ("trailer", "a hop-by-hop field, forbidden on HTTP/2"),
    ("upgrade", "a hop-by-hop field, forbidden on HTTP/2"),
    ("proxy-authenticate", "a hop-by-hop field"),
    (
        "set-cookie",
        "a fixed cookie on every response would replace the backend's and teapot's affinity cookies and fix one session for every visitor",
    ),
];

/// Why `name` may not be set, when it is one of the refused names.
pub fn refused_name(name: &str) -> Option<&'static str> {
    REFUSED
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, why)| *why)
}

/// A field name as ingress-nginx accepts it (`^[a-zA-Z\d\-_]+$`), within
/// the bounds and not refused.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a field name may not be empty".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "a field name is at most {MAX_NAME_BYTES} bytes (this one {})",
            name.len()
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err("a field name holds letters, digits, - and _ only".into());
    }
    match refused_name(name) {
        Some(why) => Err(format!("{name} may not be set: {why}")),
        None => Ok(()),
    }
}

/// A field value: printable ASCII and spaces (what ingress-nginx accepts),
/// not empty, no space at either end (RFC 9110 5.5), within the bound. A
/// `$` is a character like any other: nothing is interpolated.
pub fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("a field value may not be empty".into());
    }
    if value.len() > MAX_VALUE_BYTES {
        return Err(format!(
            "a field value is at most {MAX_VALUE_BYTES} bytes (this one {})",
            value.len()
        ));
    }
    if !value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        return Err("a field value holds printable ASCII and spaces only".into());
    }
    if value.starts_with(' ') || value.ends_with(' ') {
        return Err("a field value may not start or end with a space".into());
    }
    Ok(())
}

/// A refused ConfigMap: the field it is refused at (`data` for the whole,
/// `data["NAME"]` for one entry) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The field path of entry `key` of a ConfigMap's `data`.
pub fn data_field(key: &str) -> String {
    format!("data[{}]", crate::quote::quote(key))
}

/// The response fields of a ConfigMap's `data` (its `ca.crt`, a
/// BackendTLSPolicy's, left aside), in name order, or the first entry
/// past the bounds. The count and size are checked before any entry is
/// read one by one.
pub fn parse<'a>(
    data: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<(String, String)>, Refusal> {
    let entries: Vec<(&str, &str)> = data
        .into_iter()
        .filter(|(k, _)| *k != CA_CERT_KEY)
        .collect();
    let whole = |message: String| Refusal {
        field: "data".into(),
        message,
    };
    if entries.len() > MAX_ENTRIES {
        return Err(whole(format!(
            "{} response fields: at most {MAX_ENTRIES}",
            entries.len()
        )));
    }
    let total: usize = entries.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_TOTAL_BYTES {
        return Err(whole(format!(
            "{total} bytes of response fields: at most {MAX_TOTAL_BYTES}"
        )));
    }
    let mut seen = BTreeMap::new();
    for (name, value) in entries {
        let at = |message: String| Refusal {
            field: data_field(name),
            message,
        };
        check_name(name).map_err(at)?;
        check_value(value).map_err(at)?;
        if let Some(other) = seen.insert(name.to_ascii_lowercase(), (name, value)) {
            return Err(at(format!(
                "names the same field as {}: field names are case-insensitive",
                data_field(other.0)
            )));
        }
    }
    Ok(seen
        .into_values()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect())
}

/// ingress-nginx's annotation naming the ConfigMap.
pub const ANNOTATION: &str = "nginx.ingress.kubernetes.io/custom-headers";

/// The ConfigMap `(namespace, name)` an object of `namespace` names with
/// [`ANNOTATION`] (`NAMESPACE/NAME`, or a bare `NAME` of its own
/// namespace): `None` without the annotation, `Err` with why when its
/// value does not read as a ConfigMap.
pub fn config_map_ref(
    namespace: &str,
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<Result<(String, String), String>> {
    use crate::annotations::{ObjectKind, parse};
    let value = annotations?.get(ANNOTATION)?;
    Some(match parse(ObjectKind::Ingress, ANNOTATION, value) {
        Ok(_) => {
            let (ns, name) = crate::names::namespaced_reference(value.trim(), namespace);
            Ok((ns.to_string(), name.to_string()))
        }
        Err(e) => Err(e.to_string()),
    })
}

/// How the name of the agent's copy of a `custom-headers` ConfigMap ends.
/// In a tenant namespace of the LB cluster a ConfigMap of response fields
/// must be such a copy: any other ConfigMap there holds a
/// BackendTLSPolicy's `ca.crt` and nothing else, so a tenant cannot park
/// arbitrary data (a snippet by reference) under another name.
pub const COPY_SUFFIX: &str = "-headers";

/// The annotation the store puts on a ConfigMap it keeps without its
/// response fields, saying why (a [`Refusal`]), so an Ingress naming it
/// is reported with the entry at fault.
pub const REFUSED_ANNOTATION: &str = "teapot.dev/response-headers-refused";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_pairs(pairs: &[(&str, &str)]) -> Result<Vec<(String, String)>, Refusal> {
        parse(pairs.iter().copied())
    }

    #[test]
    fn upstreams_example_and_e2e_values_are_accepted() {
        let got = parse_pairs(&[
            ("My-Custom-Header", "42"),
            ("My-Custom-Header-Dollar", "$remote_addr"),
            ("Content-Type", "application/json"),
            ("Access-Control-Max-Age", "600"),
            (
                "X_Underscore",
                "a \"quoted\" {value}; with=all|sorts~of`chars",
            ),
            ("ca.crt", "-----BEGIN CERTIFICATE-----\n"),
        ])
        .unwrap();
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "Access-Control-Max-Age",
                "Content-Type",
                "My-Custom-Header",
                "My-Custom-Header-Dollar",
                "X_Underscore"
            ]
        );
        assert_eq!(got[3].1, "$remote_addr");
    }

    #[test]
    fn each_bound_names_its_entry() {
        let field = |pairs: &[(&str, &str)]| parse_pairs(pairs).unwrap_err().field;
        assert_eq!(
            field(&[("X-A", "1"), ("Set-Cookie", "s=1")]),
            "data[\"Set-Cookie\"]"
        );
        for name in [
            "content-length",
            "Transfer-Encoding",
            "CONNECTION",
            "Upgrade",
            "TE",
        ] {
            let e = parse_pairs(&[(name, "1")]).unwrap_err();
            assert_eq!(e.field, data_field(name));
            assert!(e.message.contains("may not be set"), "{e}");
        }
        assert_eq!(field(&[("X Space", "1")]), "data[\"X Space\"]");
        assert_eq!(field(&[("X:Colon", "1")]), "data[\"X:Colon\"]");
        assert_eq!(
            field(&[("X-Crlf", "a\r\nSet-Cookie: s=1")]),
            "data[\"X-Crlf\"]"
        );
        assert_eq!(field(&[("X-Utf8", "caf\u{e9}")]), "data[\"X-Utf8\"]");
        assert_eq!(field(&[("X-Empty", "")]), "data[\"X-Empty\"]");
        assert_eq!(field(&[("X-Pad", " a")]), "data[\"X-Pad\"]");
        let long_name = "X".repeat(MAX_NAME_BYTES + 1);
        assert_eq!(field(&[(long_name.as_str(), "1")]), data_field(&long_name));
        let long_value = "v".repeat(MAX_VALUE_BYTES + 1);
        assert_eq!(
            field(&[("X-Long", long_value.as_str())]),
            "data[\"X-Long\"]"
        );
        assert_eq!(field(&[("x-a", "1"), ("X-A", "2")]), "data[\"X-A\"]");
        // At the bounds: accepted.
        let name = "X".repeat(MAX_NAME_BYTES);
        let value = "v".repeat(MAX_VALUE_BYTES);
        assert!(parse_pairs(&[(name.as_str(), value.as_str())]).is_ok());
    }

    #[test]
    fn the_annotation_names_a_config_map() {
        let a = |v: &str| BTreeMap::from([(ANNOTATION.to_string(), v.to_string())]);
        let own = ("shop".to_string(), "headers".to_string());
        assert_eq!(
            config_map_ref("shop", Some(&a("headers"))),
            Some(Ok(own.clone()))
        );
        assert_eq!(
            config_map_ref("shop", Some(&a("shop/headers"))),
            Some(Ok(own))
        );
        assert_eq!(config_map_ref("shop", Some(&BTreeMap::new())), None);
        assert!(matches!(
            config_map_ref("shop", Some(&a("a/b/c"))),
            Some(Err(_))
        ));
    }

    #[test]
    fn too_many_or_too_large_is_the_whole_data() {
        let names: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("X-{i}")).collect();
        let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
        let e = parse(many.iter().copied()).unwrap_err();
        assert_eq!(e.field, "data");
        assert!(e.message.contains("33 response fields: at most 32"), "{e}");
        assert!(parse(many[..MAX_ENTRIES].iter().copied()).is_ok());
        let value = "v".repeat(MAX_VALUE_BYTES);
        let big: Vec<(&str, &str)> = names[..3]
            .iter()
            .map(|n| (n.as_str(), value.as_str()))
            .collect();
        let e = parse(big.iter().copied()).unwrap_err();
        assert_eq!(e.field, "data");
        assert!(e.message.contains("at most 8192"), "{e}");
    }
}
