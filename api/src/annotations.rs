//! The `teapot.dev/` annotation allowlist (docs/architecture.md: "Every tenant-facing
//! annotation is `teapot.dev/<name>`, drawn from one allowlist that lives in
//! the api crate and is documented for users. Unknown annotations are
//! rejected, never ignored.").
//!
//! Each entry names its key, the kinds it applies to, the type of its value
//! and a one-line description. Values are parsed into typed
//! [`AnnotationValue`]s here, once; nothing downstream ever sees the string.
//! The tenant-facing table in `webhook/README.md` mirrors [`ALLOWLIST`] (a
//! test in the webhook crate keeps them in step).

use std::fmt;
use std::time::Duration;

/// Every teapot annotation key starts with this.
pub const PREFIX: &str = "teapot.dev/";

/// Longest annotation value teapot reads (every typed value is far shorter).
pub const MAX_VALUE_LEN: usize = 256;

pub use crate::kind::ObjectKind;

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The type of an annotation's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    /// `true` or `false`, nothing else.
    Bool,
    /// A byte size: digits with an optional `k`, `m` or `g` suffix
    /// (powers of 1024), at most `max` bytes. `0` means no limit.
    Size { max: u64 },
    /// A duration: digits followed by `ms`, `s`, `m` or `h`, within bounds.
    Duration { min: Duration, max: Duration },
    /// One of a fixed set of words.
    OneOf(&'static [&'static str]),
    /// A whole number from `min` to `max`, plain digits.
    Count { min: u32, max: u32 },
    /// A Kubernetes UID: lowercase hex digits and dashes, 1 to 64 characters.
    Uid,
}

impl ValueType {
    /// What a value of this type looks like, for messages and docs.
    pub fn describe(&self) -> String {
        match self {
            ValueType::Bool => "\"true\" or \"false\"".into(),
            ValueType::Size { max } => format!(
                "a size such as \"10m\" (digits with an optional k, m or g suffix; 0 = no limit; at most {})",
                human_size(*max)
            ),
            ValueType::Duration { min, max } => format!(
                "a duration such as \"30s\" (digits followed by ms, s, m or h; from {} to {})",
                human_duration(*min),
                human_duration(*max)
            ),
            ValueType::OneOf(words) => {
                let quoted: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
                format!("one of {}", quoted.join(", "))
            }
            ValueType::Uid => "a Kubernetes UID (lowercase hex digits and '-')".into(),
            ValueType::Count { min, max } => format!("a whole number from {min} to {max}"),
        }
    }
}

/// One allowed annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnotationSpec {
    /// The full key, `teapot.dev/<name>`.
    pub key: &'static str,
    /// The kinds it may be set on.
    pub applies_to: &'static [ObjectKind],
    pub value: ValueType,
    /// One line for tenants.
    pub doc: &'static str,
}

/// Every annotation a tenant object may carry.
pub static ALLOWLIST: &[AnnotationSpec] = &[
    AnnotationSpec {
        key: "teapot.dev/acme",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Obtain certificates for this Ingress's TLS hosts from ACME instead of reading them from a Secret.",
    },
    AnnotationSpec {
        key: "teapot.dev/ssl-redirect",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Redirect plain-HTTP requests for this Ingress's TLS hosts to HTTPS (308).",
    },
    AnnotationSpec {
        key: "teapot.dev/max-body-size",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Size {
            max: 64 * 1024 * 1024 * 1024,
        },
        doc: "Largest request body accepted; larger requests get 413.",
    },
    AnnotationSpec {
        key: "teapot.dev/proxy-protocol",
        applies_to: &[ObjectKind::Ingress, ObjectKind::Service],
        value: ValueType::OneOf(&["v2"]),
        doc: "Send a PROXY protocol header (version 2) to the backends, carrying the client's address.",
    },
    AnnotationSpec {
        key: "teapot.dev/udp-idle-timeout",
        applies_to: &[ObjectKind::Service],
        value: ValueType::Duration {
            min: Duration::from_secs(1),
            max: Duration::from_secs(3600),
        },
        doc: "How long a UDP flow without packets is kept before it is forgotten.",
    },
    AnnotationSpec {
        key: "teapot.dev/health-check-interval",
        applies_to: &[ObjectKind::Ingress, ObjectKind::Service],
        value: ValueType::Duration {
            min: Duration::from_secs(1),
            max: Duration::from_secs(300),
        },
        doc: "How often teapot probes each backend endpoint.",
    },
    AnnotationSpec {
        key: "teapot.dev/health-check-unhealthy-threshold",
        applies_to: &[ObjectKind::Service],
        value: ValueType::Count { min: 1, max: 10 },
        doc: "Consecutive failed TCP probes after which an endpoint of an L4 Service stops receiving new connections.",
    },
    AnnotationSpec {
        key: "teapot.dev/health-check-healthy-threshold",
        applies_to: &[ObjectKind::Service],
        value: ValueType::Count { min: 1, max: 10 },
        doc: "Consecutive successful TCP probes after which an ejected endpoint of an L4 Service receives connections again.",
    },
    AnnotationSpec {
        key: "teapot.dev/tcp-idle-timeout",
        applies_to: &[ObjectKind::Service],
        value: ValueType::Duration {
            min: Duration::from_secs(1),
            max: Duration::from_secs(24 * 3600),
        },
        doc: "How long an L4 TCP connection may pass no byte in either direction before teapot closes it.",
    },
    AnnotationSpec {
        key: "teapot.dev/endpoints",
        applies_to: &[ObjectKind::Service],
        value: ValueType::OneOf(&["nodeport", "pod"]),
        doc: "Set on a Service in your own cluster: where the teapot agent takes its endpoints from, node InternalIPs and NodePorts (nodeport) or pod IPs (pod); overrides the agent's --mode. The agent reads it and does not copy it.",
    },
    AnnotationSpec {
        key: "teapot.dev/source-uid",
        // Every kind the agent mirrors, the Gateway API ones included.
        applies_to: &ObjectKind::ALL,
        value: ValueType::Uid,
        doc: "Set by the teapot agent: the UID of the tenant-cluster object this one mirrors.",
    },
];

/// A parsed annotation value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnnotationValue {
    Bool(bool),
    /// Bytes; 0 means no limit.
    Size(u64),
    Duration(Duration),
    /// The word as written in the allowlist.
    Word(&'static str),
    Uid(String),
    Count(u32),
}

/// Why an annotation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    #[error(
        "unknown annotation: teapot accepts only the teapot.dev/ annotations listed in its documentation ({known})",
        known = known_keys()
    )]
    Unknown,
    #[error("{key} applies to {applies}, not to {kind}")]
    WrongKind {
        key: &'static str,
        applies: String,
        kind: ObjectKind,
    },
    #[error("value contains a control or invisible formatting character")]
    ControlCharacter,
    #[error("value is {0} characters long, more than {MAX_VALUE_LEN}")]
    TooLong(usize),
    #[error("value {value} is not {expected}")]
    BadValue { value: String, expected: String },
}

fn known_keys() -> String {
    ALLOWLIST
        .iter()
        .map(|s| s.key)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The allowlist entry for `key`.
pub fn spec(key: &str) -> Option<&'static AnnotationSpec> {
    ALLOWLIST.iter().find(|s| s.key == key)
}

/// Parses one annotation of an object of `kind`.
pub fn parse(kind: ObjectKind, key: &str, value: &str) -> Result<AnnotationValue, AnnotationError> {
    let spec = spec(key).ok_or(AnnotationError::Unknown)?;
    if !spec.applies_to.contains(&kind) {
        return Err(AnnotationError::WrongKind {
            key: spec.key,
            applies: spec
                .applies_to
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            kind,
        });
    }
    if value.chars().any(crate::policy::is_forbidden_char) {
        return Err(AnnotationError::ControlCharacter);
    }
    if value.len() > MAX_VALUE_LEN {
        return Err(AnnotationError::TooLong(value.len()));
    }
    parse_value(&spec.value, value).ok_or_else(|| AnnotationError::BadValue {
        value: crate::policy::quote(value),
        expected: spec.value.describe(),
    })
}

fn parse_value(ty: &ValueType, value: &str) -> Option<AnnotationValue> {
    match ty {
        ValueType::Bool => match value {
            "true" => Some(AnnotationValue::Bool(true)),
            "false" => Some(AnnotationValue::Bool(false)),
            _ => None,
        },
        ValueType::Size { max } => {
            let (digits, unit) = split_number(value)?;
            let factor: u64 = match unit {
                "" => 1,
                "k" | "K" => 1024,
                "m" | "M" => 1024 * 1024,
                "g" | "G" => 1024 * 1024 * 1024,
                _ => return None,
            };
            let bytes = digits.checked_mul(factor)?;
            (bytes <= *max).then_some(AnnotationValue::Size(bytes))
        }
        ValueType::Duration { min, max } => {
            let (digits, unit) = split_number(value)?;
            let d = match unit {
                "ms" => Duration::from_millis(digits),
                "s" => Duration::from_secs(digits),
                "m" => Duration::from_secs(digits.checked_mul(60)?),
                "h" => Duration::from_secs(digits.checked_mul(3600)?),
                _ => return None,
            };
            (d >= *min && d <= *max).then_some(AnnotationValue::Duration(d))
        }
        ValueType::OneOf(words) => words
            .iter()
            .find(|w| **w == value)
            .map(|w| AnnotationValue::Word(w)),
        ValueType::Uid => {
            let ok = !value.is_empty()
                && value.len() <= 64
                && value
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-');
            ok.then(|| AnnotationValue::Uid(value.to_string()))
        }
        ValueType::Count { min, max } => {
            let (digits, unit) = split_number(value)?;
            let n = u32::try_from(digits).ok()?;
            (unit.is_empty() && n >= *min && n <= *max).then_some(AnnotationValue::Count(n))
        }
    }
}

/// `"10m"` -> `(10, "m")`: at most 12 leading ASCII digits, then the rest.
fn split_number(value: &str) -> Option<(u64, &str)> {
    let end = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    if end == 0 || end > 12 {
        return None;
    }
    let digits = value[..end].parse().ok()?;
    Some((digits, &value[end..]))
}

fn human_size(bytes: u64) -> String {
    const G: u64 = 1024 * 1024 * 1024;
    const M: u64 = 1024 * 1024;
    if bytes.is_multiple_of(G) {
        format!("{}g", bytes / G)
    } else if bytes.is_multiple_of(M) {
        format!("{}m", bytes / M)
    } else {
        format!("{bytes} bytes")
    }
}

fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    if d.subsec_millis() != 0 || s == 0 {
        format!("{}ms", d.as_millis())
    } else if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_prefixed_and_documented() {
        for spec in ALLOWLIST {
            assert!(spec.key.starts_with(PREFIX), "{}", spec.key);
            assert!(!spec.doc.is_empty() && !spec.applies_to.is_empty());
        }
        let mut keys: Vec<_> = ALLOWLIST.iter().map(|s| s.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), ALLOWLIST.len(), "duplicate keys");
    }

    #[test]
    fn typed_values() {
        use AnnotationValue::{Bool, Size, Word};
        let i = ObjectKind::Ingress;
        assert_eq!(parse(i, "teapot.dev/acme", "true"), Ok(Bool(true)));
        assert!(parse(i, "teapot.dev/acme", "True").is_err());
        assert!(parse(i, "teapot.dev/acme", "yes").is_err());
        assert_eq!(
            parse(i, "teapot.dev/max-body-size", "10m"),
            Ok(Size(10 * 1024 * 1024))
        );
        assert_eq!(parse(i, "teapot.dev/max-body-size", "0"), Ok(Size(0)));
        assert!(parse(i, "teapot.dev/max-body-size", "65g").is_err());
        assert!(parse(i, "teapot.dev/max-body-size", "10mb").is_err());
        assert!(parse(i, "teapot.dev/max-body-size", "-1").is_err());
        assert!(parse(i, "teapot.dev/max-body-size", "99999999999999999999").is_err());
        assert_eq!(parse(i, "teapot.dev/proxy-protocol", "v2"), Ok(Word("v2")));
        assert!(parse(i, "teapot.dev/proxy-protocol", "v1").is_err());
        let s = ObjectKind::Service;
        assert_eq!(
            parse(s, "teapot.dev/udp-idle-timeout", "90s"),
            Ok(AnnotationValue::Duration(Duration::from_secs(90)))
        );
        assert_eq!(
            parse(s, "teapot.dev/health-check-interval", "1500ms"),
            Ok(AnnotationValue::Duration(Duration::from_millis(1500)))
        );
        assert!(parse(s, "teapot.dev/udp-idle-timeout", "2h").is_err());
        assert!(parse(s, "teapot.dev/udp-idle-timeout", "500ms").is_err());
        assert!(parse(s, "teapot.dev/udp-idle-timeout", "1d").is_err());
        assert!(
            parse(
                s,
                "teapot.dev/source-uid",
                "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4"
            )
            .is_ok()
        );
        assert!(parse(s, "teapot.dev/source-uid", "0C9A").is_err());
        let t = "teapot.dev/health-check-unhealthy-threshold";
        assert_eq!(parse(s, t, "3"), Ok(AnnotationValue::Count(3)));
        for bad in ["0", "11", "3s", "-1", "", "99999999999999"] {
            assert!(parse(s, t, bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse(s, "teapot.dev/tcp-idle-timeout", "10m"),
            Ok(AnnotationValue::Duration(Duration::from_secs(600)))
        );
        assert!(matches!(
            parse(i, "teapot.dev/tcp-idle-timeout", "10m"),
            Err(AnnotationError::WrongKind { .. })
        ));
    }

    #[test]
    fn refusals_say_why() {
        let i = ObjectKind::Ingress;
        assert_eq!(
            parse(i, "nginx.ingress.kubernetes.io/server-snippet", "x"),
            Err(AnnotationError::Unknown)
        );
        assert_eq!(
            parse(i, "teapot.dev/nope", "x"),
            Err(AnnotationError::Unknown)
        );
        assert!(matches!(
            parse(i, "teapot.dev/udp-idle-timeout", "30s"),
            Err(AnnotationError::WrongKind { .. })
        ));
        assert_eq!(
            parse(i, "teapot.dev/acme", "true\n"),
            Err(AnnotationError::ControlCharacter)
        );
        assert_eq!(
            parse(i, "teapot.dev/acme", "true\u{202e}"),
            Err(AnnotationError::ControlCharacter)
        );
        assert_eq!(
            parse(i, "teapot.dev/acme", &"t".repeat(300)),
            Err(AnnotationError::TooLong(300))
        );
        let e = parse(i, "teapot.dev/max-body-size", "1\"; ssl_engine x").unwrap_err();
        assert!(e.to_string().contains("is not a size"), "{e}");
    }
}
