//! Rules on raw strings: control and invisible characters anywhere, unknown
//! fields, the strict path character class; quoting tenant strings for
//! messages is crate::quote's (re-exported here).

use std::fmt::Write as _;

use serde_json::Value;

use super::{MAX_PATH_LEN, OBJECT_FIELD, Violation};

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

pub use crate::quote::quote;

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

/// Every string (keys and values) in `object` that holds a forbidden
/// character, as a violation at its path. The values of the top-level
/// `pem_field` may hold line breaks (PEM text): a Secret's `stringData`, a
/// ConfigMap's `data` ([`pem_field`]).
///
/// `object` is anything serde can serialize: the raw JSON the webhook is
/// given, or a typed object the proxy holds. The walk goes through serde's
/// data model directly, so a typed object is never turned into JSON first.
pub fn check_strings(
    object: &impl serde::Serialize,
    pem_field: Option<&'static str>,
) -> Vec<Violation> {
    let mut walk = StringWalk {
        path: String::new(),
        depth: 0,
        pem_field,
        pem: false,
        out: Vec::new(),
    };
    // The walk itself never fails; an error could only come from a type's
    // own Serialize, and then what was walked so far stands.
    let _ = object.serialize(&mut walk);
    walk.out
}

/// The top-level field of `kind` whose values may be PEM text.
pub fn pem_field(kind: crate::kind::ObjectKind) -> Option<&'static str> {
    match kind {
        crate::kind::ObjectKind::Secret => Some("stringData"),
        crate::kind::ObjectKind::ConfigMap => Some("data"),
        _ => None,
    }
}

/// The string walk as a serde `Serializer`: strings are checked where
/// they stand, map keys and struct fields extend the path, everything else
/// is passed over.
struct StringWalk {
    path: String,
    /// 0 at the root object, 1 inside its fields.
    depth: usize,
    pem_field: Option<&'static str>,
    /// Inside the `pem_field`: line breaks are PEM text.
    pem: bool,
    out: Vec<Violation>,
}

/// Why the walk stopped: never, in practice (see [`check_strings`]).
#[derive(Debug)]
struct WalkError(String);

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WalkError {}

impl serde::ser::Error for WalkError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        WalkError(msg.to_string())
    }
}

impl StringWalk {
    fn value(&mut self, s: &str) {
        let pem = self.pem;
        let bad = s
            .chars()
            .find(|&c| is_forbidden_char(c) && !(pem && (c == '\n' || c == '\r')));
        if let Some(c) = bad {
            self.out.push(Violation::new(
                field_or_object(&self.path),
                format!("contains the control or invisible character {c:?}; teapot refuses them everywhere"),
            ));
        }
    }

    /// Walks `value` under `key`.
    fn entry<T: serde::Serialize + ?Sized>(
        &mut self,
        key: &str,
        value: &T,
    ) -> Result<(), WalkError> {
        let len = self.path.len();
        push_key(&mut self.path, key);
        if key.chars().any(is_forbidden_char) {
            self.out.push(Violation::new(
                field_or_object(&self.path),
                "the key contains a control or invisible character; teapot refuses them everywhere",
            ));
        }
        let pem = self.pem;
        self.pem = pem || (self.depth == 0 && self.pem_field == Some(key));
        self.depth += 1;
        let result = value.serialize(&mut *self);
        self.depth -= 1;
        self.pem = pem;
        self.path.truncate(len);
        result
    }

    fn element<T: serde::Serialize + ?Sized>(
        &mut self,
        index: usize,
        value: &T,
    ) -> Result<(), WalkError> {
        let len = self.path.len();
        let _ = write!(self.path, "[{index}]");
        self.depth += 1;
        let result = value.serialize(&mut *self);
        self.depth -= 1;
        self.path.truncate(len);
        result
    }
}

impl<'w> serde::Serializer for &'w mut StringWalk {
    type Ok = ();
    type Error = WalkError;
    type SerializeSeq = Items<'w>;
    type SerializeTuple = Items<'w>;
    type SerializeTupleStruct = Items<'w>;
    type SerializeTupleVariant = Items<'w>;
    type SerializeMap = Entries<'w>;
    type SerializeStruct = &'w mut StringWalk;
    type SerializeStructVariant = &'w mut StringWalk;

    fn serialize_str(self, v: &str) -> Result<(), WalkError> {
        self.value(v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), WalkError> {
        self.value(v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_bool(self, _: bool) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_f32(self, _: f32) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_f64(self, _: f64) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_some<T: serde::Serialize + ?Sized>(self, v: &T) -> Result<(), WalkError> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        v: &'static str,
    ) -> Result<(), WalkError> {
        self.value(v);
        Ok(())
    }
    fn serialize_newtype_struct<T: serde::Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), WalkError> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: serde::Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<(), WalkError> {
        self.entry(variant, v)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Items<'w>, WalkError> {
        Ok(Items {
            walk: self,
            index: 0,
        })
    }
    fn serialize_tuple(self, _: usize) -> Result<Items<'w>, WalkError> {
        Ok(Items {
            walk: self,
            index: 0,
        })
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Items<'w>, WalkError> {
        Ok(Items {
            walk: self,
            index: 0,
        })
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Items<'w>, WalkError> {
        Ok(Items {
            walk: self,
            index: 0,
        })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Entries<'w>, WalkError> {
        Ok(Entries {
            walk: self,
            key: None,
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, WalkError> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, WalkError> {
        Ok(self)
    }
}

/// The elements of a list.
struct Items<'w> {
    walk: &'w mut StringWalk,
    index: usize,
}

impl Items<'_> {
    fn next<T: serde::Serialize + ?Sized>(&mut self, value: &T) -> Result<(), WalkError> {
        let index = self.index;
        self.index += 1;
        self.walk.element(index, value)
    }
}

/// The four list-like serde traits: each element is the next item.
macro_rules! items {
    ($($trait:ident :: $method:ident),*) => {$(
        impl serde::ser::$trait for Items<'_> {
            type Ok = ();
            type Error = WalkError;
            fn $method<T: serde::Serialize + ?Sized>(&mut self, v: &T) -> Result<(), WalkError> {
                self.next(v)
            }
            fn end(self) -> Result<(), WalkError> {
                Ok(())
            }
        }
    )*};
}

items!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// The entries of a map: each key read as text, then its value walked
/// under it.
struct Entries<'w> {
    walk: &'w mut StringWalk,
    key: Option<String>,
}

impl serde::ser::SerializeMap for Entries<'_> {
    type Ok = ();
    type Error = WalkError;
    fn serialize_key<T: serde::Serialize + ?Sized>(&mut self, key: &T) -> Result<(), WalkError> {
        // Kubernetes maps are keyed by strings; anything else is shown as
        // its JSON text.
        self.key = match serde_json::to_value(key) {
            Ok(serde_json::Value::String(s)) => Some(s),
            Ok(other) => Some(other.to_string()),
            Err(e) => return Err(serde::ser::Error::custom(e)),
        };
        Ok(())
    }
    fn serialize_value<T: serde::Serialize + ?Sized>(
        &mut self,
        value: &T,
    ) -> Result<(), WalkError> {
        let key = self.key.take().unwrap_or_default();
        self.walk.entry(&key, value)
    }
    fn end(self) -> Result<(), WalkError> {
        Ok(())
    }
}

/// Struct fields, of a struct or an enum's struct variant, walked under
/// their names.
macro_rules! fields {
    ($($trait:ident),*) => {$(
        impl serde::ser::$trait for &mut StringWalk {
            type Ok = ();
            type Error = WalkError;
            fn serialize_field<T: serde::Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                v: &T,
            ) -> Result<(), WalkError> {
                self.entry(key, v)
            }
            fn end(self) -> Result<(), WalkError> {
                Ok(())
            }
        }
    )*};
}

fields!(SerializeStruct, SerializeStructVariant);

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
        let got: Vec<String> = check_strings(&v, None)
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
        let got = check_strings(&v, Some("stringData"));
        assert_eq!(got.len(), 3);
        let v = json!({"stringData": {"tls.key": "a\u{1b}b"}});
        assert_eq!(check_strings(&v, Some("stringData")).len(), 1);
    }

    /// The proxy checks typed objects, the webhook raw JSON: one walk, so
    /// the same object gets the same violations either way.
    #[test]
    fn typed_objects_and_their_json_get_the_same_violations() {
        let text = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s\u{202e}", "labels": {"a\tb": "v", "ok": "x\u{0}"}},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": "-----BEGIN\n", "tls.key": "k\u{7f}"}
        });
        let typed: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(text.clone()).unwrap();
        let fields = |v: Vec<Violation>| {
            let mut f: Vec<String> = v.into_iter().map(|v| v.to_string()).collect();
            f.sort();
            f
        };
        let from_json = fields(check_strings(&text, Some("stringData")));
        assert_eq!(from_json.len(), 4, "{from_json:?}");
        assert_eq!(fields(check_strings(&typed, Some("stringData"))), from_json);
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
