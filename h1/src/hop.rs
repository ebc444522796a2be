//! The hop-by-hop rules: which fields belong to one connection and never
//! cross the proxy. Below everything that copies or edits a head
//! (crate::wire, crate::edits) and exported for the HTTP/2 engine.

/// RFC 9110 §7.6.1 connection-specific fields (plus the obsolete
/// `proxy-connection`, and the proxy credentials and challenges, which
/// belong to the hop they were sent over): teapot's one list, for both
/// HTTP versions (the HTTP/2 engine removes these from what it forwards
/// too). [`is_connection_specific`] tests a name against it.
pub const CONNECTION_SPECIFIC: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "proxy-authenticate",
    "proxy-authorization",
];

/// Whether `name` (any case) is in [`CONNECTION_SPECIFIC`].
pub fn is_connection_specific(name: &[u8]) -> bool {
    // By length first: every field of every head passes here, and most
    // match no candidate's length.
    let is = |h: &[u8]| crate::scan::eq_lower(name, h);
    match name.len() {
        2 => is(b"te"),
        7 => is(b"trailer") || is(b"upgrade"),
        10 => is(b"connection") || is(b"keep-alive"),
        16 => is(b"proxy-connection"),
        18 => is(b"proxy-authenticate"),
        19 => is(b"proxy-authorization"),
        _ => false,
    }
}

/// The fields an HTTP/1 head never copies from the other side: the
/// connection-specific ones and the framing fields the engine re-emits
/// itself.
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    match name.len() {
        14 => crate::scan::eq_lower(name, b"content-length"),
        17 => crate::scan::eq_lower(name, b"transfer-encoding"),
        _ => is_connection_specific(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_specific_list_and_its_test_agree() {
        for h in CONNECTION_SPECIFIC {
            assert!(is_connection_specific(h.as_bytes()), "{h}");
            assert!(is_hop_by_hop(h.as_bytes()), "{h}");
        }
        for framing in ["content-length", "transfer-encoding"] {
            assert!(!is_connection_specific(framing.as_bytes()));
            assert!(is_hop_by_hop(framing.as_bytes()));
        }
    }

    #[test]
    fn hop_by_hop_names_in_any_case_and_nothing_else() {
        const HOP: [&str; 10] = [
            "connection",
            "proxy-connection",
            "keep-alive",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "content-length",
            "proxy-authenticate",
            "proxy-authorization",
        ];
        for h in HOP {
            assert!(is_hop_by_hop(h.as_bytes()), "{h}");
            assert!(is_hop_by_hop(h.to_ascii_uppercase().as_bytes()), "{h}");
            assert!(!is_hop_by_hop(&h.as_bytes()[1..]), "{h}");
            assert!(!is_hop_by_hop(format!("{h}x").as_bytes()), "{h}");
        }
        for other in [
            "host",
            "tk",
            "trailex",
            "content-type",
            "x-forwarded-for",
            "",
        ] {
            assert!(!is_hop_by_hop(other.as_bytes()), "{other}");
        }
    }
}
