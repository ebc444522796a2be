//! Rules on raw strings: control and invisible characters anywhere, unknown
//! fields, the strict path character class, and quoting tenant strings for
//! messages.

use std::fmt::Write as _;

use serde_json::Value;

use super::{MAX_PATH_LEN, OBJECT_FIELD, Violation};

/// Longest piece of a tenant string quoted back in a message.
const QUOTE_CHARS: usize = 64;

/// Characters refused in every string of a tenant object: C0/C1 controls
/// (newline, carriage return, NUL, escape...) and invisible formatting
/// characters that make text read differently than it parses
/// (zero-width, bidi overrides, line/paragraph separators, BOM, soft hyphen).
pub fn is_forbidden_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
        )
}

/// A tenant string made safe to show: Rust `Debug` quoting (so `\n`, `"`
/// and invisible characters are escaped) and at most 64 characters.
pub fn quote(s: &str) -> String {
    match s.char_indices().nth(QUOTE_CHARS) {
        None => format!("{s:?}"),
        Some((end, _)) => format!("{:?}...", &s[..end]),
    }
}

/// Appends a map key to a field path: `a.b` for plain keys, `a["x/y"]`
/// for anything else (annotation and label keys).
pub(crate) fn push_key(path: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    } else {
        let _ = write!(path, "[{}]", quote(key));
    }
}

/// A field path for a map entry: `metadata.annotations["teapot.dev/acme"]`.
pub(crate) fn key_field(parent: &str, key: &str) -> String {
    let mut path = parent.to_string();
    push_key(&mut path, key);
    path
}

/// Every string (keys and values) in `value` that holds a forbidden
/// character, as a violation at its path. In a Secret, `stringData` values
/// may hold line breaks (PEM text).
pub fn check_strings(value: &Value, secret: bool) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut path = String::new();
    walk(value, &mut path, secret, false, &mut out);
    out
}

fn walk(value: &Value, path: &mut String, top: bool, pem: bool, out: &mut Vec<Violation>) {
    match value {
        Value::String(s) => {
            let bad = s
                .chars()
                .find(|&c| is_forbidden_char(c) && !(pem && (c == '\n' || c == '\r')));
            if let Some(c) = bad {
                out.push(Violation::new(
                    field_or_object(path),
                    format!("contains the control or invisible character {c:?}; teapot refuses them everywhere"),
                ));
            }
        }
        Value::Object(map) => {
            for (key, v) in map {
                let len = path.len();
                push_key(path, key);
                if key.chars().any(is_forbidden_char) {
                    out.push(Violation::new(
                        field_or_object(path),
                        "the key contains a control or invisible character; teapot refuses them everywhere",
                    ));
                }
                // `top` is true only at the root of a Secret.
                let pem_here = pem || (top && key == "stringData");
                walk(v, path, false, pem_here, out);
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                walk(v, path, false, pem, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

fn field_or_object(path: &str) -> String {
    if path.is_empty() {
        OBJECT_FIELD.to_string()
    } else {
        path.to_string()
    }
}

/// Fields of `original` that its typed parse (`known`, the parsed object
/// serialized again) does not have: fields teapot does not know, which it
/// refuses rather than ignores. `null` values and empty maps or lists
/// count as absent; `status` is not compared (teapot writes it, tenants'
/// status is never read).
pub fn unknown_fields(original: &Value, known: &Value) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut path = String::new();
    diff(original, known, &mut path, &mut out);
    out
}

fn diff(original: &Value, known: &Value, path: &mut String, out: &mut Vec<Violation>) {
    match (original, known) {
        (Value::Object(o), Value::Object(k)) => {
            for (key, v) in o {
                if is_absent(v) || (path.is_empty() && key == "status") {
                    continue;
                }
                let len = path.len();
                push_key(path, key);
                match k.get(key) {
                    Some(kv) => diff(v, kv, path, out),
                    None => out.push(Violation::new(
                        path.clone(),
                        "unknown field: teapot refuses fields it does not know instead of ignoring them",
                    )),
                }
                path.truncate(len);
            }
        }
        (Value::Array(o), Value::Array(k)) => {
            for (i, (v, kv)) in o.iter().zip(k).enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                diff(v, kv, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

fn is_absent(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Checks an Ingress rule path against the strict character class:
/// absolute; letters, digits, `- . _ ~ / @ : + , = !` and `%XX` escapes
/// only; no `.`/`..` segments, and no escapes of `.`, `/`, `\`, `%` or
/// control characters (a backend that decodes them would see another
/// path than the one teapot matched).
pub fn check_path(path: &str) -> Result<(), String> {
    if path.len() > MAX_PATH_LEN {
        return Err(format!(
            "the path is {} characters long, more than {MAX_PATH_LEN}",
            path.len()
        ));
    }
    if !path.starts_with('/') {
        return Err(crate::path::PathError::NotAbsolute.to_string());
    }
    if path.contains(['?', '#']) {
        return Err(crate::path::PathError::QueryOrFragment.to_string());
    }
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
            let (Some(hi), Some(lo)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) else {
                return Err("'%' must start a %XX escape with two hex digits".into());
            };
            let decoded = (hi * 16 + lo) as u8;
            if matches!(decoded, b'.' | b'/' | b'\\' | b'%') || decoded < 0x20 || decoded == 0x7f {
                return Err(format!(
                    "the escape {} decodes to {:?}, which a backend may read as a path separator, dot segment or control character; write paths unescaped",
                    &path[i..i + 3],
                    decoded as char
                ));
            }
            i += 3;
            continue;
        }
        let ok = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.' | b'_' | b'~' | b'/' | b'@' | b':' | b'+' | b',' | b'=' | b'!'
            );
        if !ok {
            let c = path[i..].chars().next().unwrap_or('?');
            return Err(format!(
                "character {c:?} is not allowed in a path (allowed: letters, digits, - . _ ~ / @ : + , = ! and %XX escapes; teapot matches prefixes, not regular expressions)"
            ));
        }
        i += 1;
    }
    // Dot segments (and anything else the shared rule refuses).
    crate::path::validate(path).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quoting_escapes_and_truncates() {
        assert_eq!(quote("a\"b\n"), r#""a\"b\n""#);
        assert_eq!(quote("\u{202e}"), r#""\u{202e}""#);
        let long = quote(&"x".repeat(100));
        assert!(long.ends_with("...") && long.len() < 80);
    }

    #[test]
    fn control_characters_anywhere() {
        let v = json!({
            "metadata": {"annotations": {"a\nb": "c", "ok": "x\u{200b}y"}},
            "spec": {"rules": [{"host": "a\u{0}b"}]},
            "stringData": {"tls.crt": "-----BEGIN\n"}
        });
        let got: Vec<String> = check_strings(&v, false)
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert_eq!(
            got,
            [
                r#"metadata.annotations["a\nb"]"#,
                r#"metadata.annotations.ok"#,
                "spec.rules[0].host",
                r#"stringData["tls.crt"]"#,
            ]
        );
        // PEM line breaks are fine in a Secret's stringData, nothing else is.
        let got = check_strings(&v, true);
        assert_eq!(got.len(), 3);
        let v = json!({"stringData": {"tls.key": "a\u{1b}b"}});
        assert_eq!(check_strings(&v, true).len(), 1);
    }

    #[test]
    fn unknown_fields_are_found_at_depth() {
        let original = json!({"a": {"b": 1, "c": null, "d": {}, "x": [1]}, "l": [{"k": 1, "y": 2}], "status": {"z": 1}});
        let known = json!({"a": {"b": 1}, "l": [{"k": 1}]});
        let got: Vec<String> = unknown_fields(&original, &known)
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert_eq!(got, ["a.x", "l[0].y"]);
    }

    #[test]
    fn strict_paths() {
        for ok in [
            "/",
            "/api/v1",
            "/a-b_c.d~e",
            "/%C3%A9t%C3%A9",
            "/users/@me",
            "/a:b+c,d=e!",
        ] {
            assert_eq!(check_path(ok), Ok(()), "{ok}");
        }
        for bad in [
            "api",
            "/a/../b",
            "/a/./b",
            "/a\nb",
            "/a\"b",
            "/a'b",
            "/a;b",
            "/a b",
            "/a{b}",
            "/a$b",
            "/a\\b",
            "/api/.*",
            "/a/%2e%2e/b",
            "/a%2Fb",
            "/a%5cb",
            "/a%00",
            "/a%25",
            "/a%zz",
            "/a%2",
            "/caf\u{e9}",
            "/a?b",
            "/a#b",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(check_path(&format!("/{}", "a".repeat(MAX_PATH_LEN))).is_err());
    }
}
