//! The fields teapot sets on every forwarded request, for both HTTP
//! versions: `X-Forwarded-For`, `-Proto`, `-Host`, `-Port`, `Forwarded`
//! (RFC 7239) and `X-Real-IP`, replacing whatever the client sent (the
//! edge is where the chain of trust starts: otherwise a client's own `Forwarded: for=…` reached tenant backends as if teapot
//! had said it), after the request's ID and trace context when teapot
//! made them.
//!
//! One builder ([`each_field`]) makes them; the HTTP/1 engine and the
//! HTTP/2-to-HTTP/1 head writer copy its bytes from a per-thread cache
//! ([`with_block`]), and an HTTP/2 request whose head is edited as a
//! header map gets the same fields through [`apply`].

use http::{HeaderMap, HeaderName, HeaderValue};
use teapot_h1::{ConnInfo, HeaderEdits};

use crate::plane::trace::{self, RequestId, TraceParent};

/// The names [`each_field`] sets or removes, in its order.
pub const FORWARDING: [&str; 6] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-port",
    "forwarded",
    "x-real-ip",
];

/// The request fields a verified client certificate goes to the backend
/// in (ingress-nginx `auth-tls-pass-certificate-to-upstream`,
/// crate::plane::client_cert): removed from every client's request on
/// every host, whatever the host asks.
pub const CLIENT_CERT_FIELDS: [&str; 4] = [
    "ssl-client-cert",
    "ssl-client-verify",
    "ssl-client-subject-dn",
    "ssl-client-issuer-dn",
];

/// Whether `name` is one teapot sets on every forwarded request: the
/// forwarding fields and the request's ID and trace context, or one
/// spelt like them with `_` ([`is_lookalike`]). A Gateway filter's
/// request-header edit of one of them is not applied, on either HTTP
/// version (it would overwrite what the edge vouches for).
pub(super) fn is_teapots(name: &str) -> bool {
    name.eq_ignore_ascii_case(trace::REQUEST_ID)
        || name.eq_ignore_ascii_case(trace::TRACEPARENT)
        || FORWARDING.iter().any(|f| f.eq_ignore_ascii_case(name))
        || is_lookalike(name)
}

/// The fields teapot writes itself on a request it forwards or makes
/// (the forwarding fields, the request's ID and trace context, those of
/// the `auth-url` and error-page sub-requests and `x-forwarded-prefix`),
/// whose `_` spellings a client may not send ([`is_lookalike`]).
const OWN_FIELDS: [&str; 22] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-port",
    "forwarded",
    "x-real-ip",
    trace::REQUEST_ID,
    trace::TRACEPARENT,
    "x-original-url",
    "x-original-method",
    "x-original-uri",
    "x-auth-request-redirect",
    "x-code",
    "x-format",
    "x-namespace",
    "x-ingress-name",
    "x-service-name",
    "x-service-port",
    "ssl-client-cert",
    "ssl-client-verify",
    "ssl-client-subject-dn",
    "ssl-client-issuer-dn",
];

/// Whether a request field called `name` is spelt with `_` where one of
/// teapot's own fields ([`OWN_FIELDS`], or any of the `X-Forwarded-`
/// family) has `-`, in any case: `X_Forwarded_For`, `x-real_ip`. HTTP
/// allows `_` in a name, but CGI, PHP and many WSGI servers fold it into
/// `-` (both become `HTTP_X_FORWARDED_FOR`), so a backend would read the
/// client's forgery as what teapot vouches for. Only look-alikes are
/// dropped, not every name with `_` (nginx's `underscores_in_headers
/// off`): other such names reach the backends, which may need them.
pub fn is_lookalike(name: &str) -> bool {
    const FAMILY: &str = "x-forwarded-";
    name.contains('_')
        && (OWN_FIELDS.iter().any(|own| shadows(name, own))
            || name
                .get(..FAMILY.len())
                .is_some_and(|head| name.len() > FAMILY.len() && folded(head).eq(FAMILY.bytes())))
}

/// Whether `name` spells `field` (lowercase, with `-`) with `_` for some
/// `-`, in any case: the same field to a backend that folds `_` into `-`.
pub fn shadows(name: &str, field: &str) -> bool {
    name.len() == field.len() && name.contains('_') && folded(name).eq(field.bytes())
}

fn folded(name: &str) -> impl Iterator<Item = u8> + '_ {
    name.bytes().map(|b| {
        if b == b'_' {
            b'-'
        } else {
            b.to_ascii_lowercase()
        }
    })
}

/// Removals of the client's [`is_lookalike`] fields, among `names`, added
/// to an HTTP/1 request's edits (an edit removes a name in any case).
pub(super) fn remove_lookalike_fields<'a>(
    edits: &mut HeaderEdits,
    names: impl Iterator<Item = &'a str>,
) {
    for name in names.filter(|n| is_lookalike(n)) {
        edits.push_remove(name.as_bytes());
    }
}

/// The forwarding fields of a request for `authority` (the client's, as
/// it asked: never a rewritten host) on `conn`, each to `emit` as
/// [`FORWARDING`] names them; `None` removes what the client sent (no
/// peer address, no local port). Values are written as bytes, the
/// client's address on the stack.
pub(super) fn each_field(
    conn: &ConnInfo,
    authority: &str,
    mut emit: impl FnMut(&'static str, Option<&[u8]>),
) {
    let mut ip = IpText {
        buf: [0; 48],
        len: 0,
    };
    let client_ip = conn.client.map(|a| ip.of(a.ip()));
    let proto: &[u8] = if conn.tls { b"https" } else { b"http" };
    emit(FORWARDING[0], client_ip);
    emit(FORWARDING[1], Some(proto));
    emit(FORWARDING[2], Some(authority.as_bytes()));
    let mut port = [0u8; 5];
    emit(
        FORWARDING[3],
        conn.local.map(|local| decimal(&mut port, local.port())),
    );
    let forwarded = client_ip.map(|ip| {
        let mut v = Vec::with_capacity(32 + ip.len() + authority.len());
        // RFC 7239 §4: an IPv6 node and the host go in a quoted-string.
        if ip.contains(&b':') {
            v.extend_from_slice(b"for=\"[");
            v.extend_from_slice(ip);
            v.extend_from_slice(b"]\"");
        } else {
            v.extend_from_slice(b"for=");
            v.extend_from_slice(ip);
        }
        v.extend_from_slice(b";proto=");
        v.extend_from_slice(proto);
        v.extend_from_slice(b";host=\"");
        for &b in authority.as_bytes() {
            if matches!(b, b'"' | b'\\') {
                v.push(b'\\');
            }
            v.push(b);
        }
        v.push(b'"');
        v
    });
    emit(FORWARDING[4], forwarded.as_deref());
    emit(FORWARDING[5], client_ip);
    // A client never sends these itself: teapot sets them where the host
    // passes the client certificate on (crate::plane::client_cert).
    for name in CLIENT_CERT_FIELDS {
        emit(name, None);
    }
}

/// The forwarding fields as replacements of whatever the client sent,
/// after the request's ID and trace context when teapot made them (the
/// HTTP/1 engine's edits). They depend only on the connection and the
/// authority, so they come from a per-thread cache ([`with_block`]): a
/// keep-alive connection's requests copy them, already checked, instead
/// of writing and checking six fields each.
pub(super) fn edits(
    conn: &ConnInfo,
    authority: &str,
    request_id: &RequestId<'_>,
    traceparent: &TraceParent<'_>,
) -> HeaderEdits {
    // Six names and values (an IPv6 address three times, the authority
    // twice) and 4 bytes of framing each; a new ID (12 + 32) and
    // traceparent (11 + 55).
    let mut edits = HeaderEdits::with_capacity(256 + 2 * authority.len() + 128);
    // Made here of hex digits and `-` (crate::plane::trace): nothing for
    // the edits' checks to find.
    if request_id.is_new() {
        edits.push_set_hex(trace::REQUEST_ID, request_id.as_bytes());
    }
    if traceparent.is_new() {
        edits.push_set_hex(trace::TRACEPARENT, traceparent.as_bytes());
    }
    with_block(conn, authority, |block| edits.push_all(block));
    edits
}

/// The forwarding fields set in (or removed from) an HTTP/2 request's
/// header map. A value a header cannot hold (an authority with bytes
/// `:authority` never lets through) is an `Err`.
pub(super) fn apply(
    conn: &ConnInfo,
    authority: &str,
    headers: &mut HeaderMap,
) -> Result<(), http::Error> {
    remove_lookalikes(headers);
    let mut result = Ok(());
    each_field(conn, authority, |name, value| {
        let name = HeaderName::from_static(name);
        match value {
            Some(v) => match HeaderValue::from_bytes(v) {
                Ok(v) => {
                    headers.insert(name, v);
                }
                Err(e) => result = Err(e.into()),
            },
            None => {
                headers.remove(name);
            }
        }
    });
    result
}

/// Removes the client's [`is_lookalike`] fields from a header map (the
/// HTTP/1 engine skips them with the fields its edits replace).
pub(super) fn remove_lookalikes(headers: &mut HeaderMap) {
    // Almost no request has one: look before collecting names.
    if !headers.keys().any(|n| is_lookalike(n.as_str())) {
        return;
    }
    let names: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_lookalike(n.as_str()))
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
}

/// Calls `f` with the forwarding fields of (`conn`, `authority`), from a
/// 64-slot per-thread cache keyed by everything they are made of: the
/// client's address, TLS, the local port and the authority. A miss (a new
/// client or host on the slot) makes them with [`block`].
pub(super) fn with_block<T>(
    conn: &ConnInfo,
    authority: &str,
    f: impl FnOnce(&HeaderEdits) -> T,
) -> T {
    use std::hash::{BuildHasher as _, Hash as _, Hasher as _};
    const SLOTS: usize = 64;
    struct Block {
        client: Option<std::net::IpAddr>,
        tls: bool,
        local_port: Option<u16>,
        authority: Box<str>,
        edits: HeaderEdits,
    }
    thread_local! {
        static BLOCKS: std::cell::RefCell<[Option<Block>; SLOTS]> =
            const { std::cell::RefCell::new([const { None }; SLOTS]) };
    }
    let client = conn.client.map(|a| a.ip());
    let local_port = conn.local.map(|a| a.port());
    // The key is the client's own input (its address, its Host): a
    // collision only costs a miss, never another client's fields.
    // Fed field by field rather than through `hash_one` on a tuple, which
    // the optimizer may keep out of line: this runs on every request.
    let mut hasher = foldhash::fast::FixedState::with_seed(0xf0d).build_hasher();
    client.hash(&mut hasher);
    conn.tls.hash(&mut hasher);
    local_port.hash(&mut hasher);
    authority.hash(&mut hasher);
    let hash = hasher.finish();
    let slot = (hash % SLOTS as u64) as usize;
    BLOCKS.with_borrow_mut(|blocks| {
        let hit = blocks[slot].as_ref().is_some_and(|b| {
            b.client == client
                && b.tls == conn.tls
                && b.local_port == local_port
                && *b.authority == *authority
        });
        if !hit {
            blocks[slot] = Some(Block {
                client,
                tls: conn.tls,
                local_port,
                authority: authority.into(),
                edits: block(conn, authority),
            });
        }
        match &blocks[slot] {
            Some(b) => f(&b.edits),
            None => f(&block(conn, authority)),
        }
    })
}

/// [`each_field`] as the HTTP/1 engine's edits: replacements and
/// removals.
fn block(conn: &ConnInfo, authority: &str) -> HeaderEdits {
    let mut edits = HeaderEdits::with_capacity(256 + 2 * authority.len());
    each_field(conn, authority, |name, value| match value {
        Some(v) => edits.push_set(name.as_bytes(), v),
        None => edits.push_remove(name.as_bytes()),
    });
    edits
}

/// `n` in decimal, written into `out`.
fn decimal(out: &mut [u8; 5], n: u16) -> &[u8] {
    let mut i = out.len();
    let mut n = n;
    loop {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &out[i..]
}

/// An IP address's text without a `String`: the longest, an IPv4-mapped
/// IPv6 address, is 45 bytes.
struct IpText {
    buf: [u8; 48],
    len: usize,
}

impl IpText {
    /// IPv4 by hand (every request of an IPv4 client formats it), IPv6
    /// through `Display` (its zero compression is not worth repeating).
    fn of(&mut self, ip: std::net::IpAddr) -> &[u8] {
        use std::fmt::Write as _;
        self.len = 0;
        match ip {
            std::net::IpAddr::V4(v4) => {
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        self.push(b'.');
                    }
                    if octet >= 100 {
                        self.push(b'0' + octet / 100);
                    }
                    if octet >= 10 {
                        self.push(b'0' + octet / 10 % 10);
                    }
                    self.push(b'0' + octet % 10);
                }
            }
            std::net::IpAddr::V6(_) => {
                let _ = write!(self, "{ip}");
            }
        }
        &self.buf[..self.len]
    }

    fn push(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }
}

impl std::fmt::Write for IpText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(client: Option<&str>, local: Option<&str>, tls: bool) -> ConnInfo {
        ConnInfo {
            client: client.map(|c| c.parse().unwrap()),
            local: local.map(|l| l.parse().unwrap()),
            tls,
            ..ConnInfo::default()
        }
    }

    fn fields(conn: &ConnInfo, authority: &str) -> Vec<(&'static str, Option<String>)> {
        let mut out = Vec::new();
        each_field(conn, authority, |name, value| {
            out.push((name, value.map(|v| String::from_utf8(v.to_vec()).unwrap())))
        });
        out
    }

    #[test]
    fn forwarding_fields_replace_what_the_client_sent() {
        let h = fields(&conn(Some("192.0.2.7:5555"), None, true), "a.example");
        let names: Vec<_> = h.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, [&FORWARDING[..], &CLIENT_CERT_FIELDS[..]].concat());
        assert!(h[6..].iter().all(|(_, v)| v.is_none()), "{h:?}");
        assert_eq!(h[0].1.as_deref(), Some("192.0.2.7"));
        assert_eq!(h[1].1.as_deref(), Some("https"));
        assert_eq!(h[2].1.as_deref(), Some("a.example"));
        assert_eq!(h[3].1, None);
        assert_eq!(
            h[4].1.as_deref(),
            Some("for=192.0.2.7;proto=https;host=\"a.example\"")
        );
        assert_eq!(h[5].1.as_deref(), Some("192.0.2.7"));
        let v6 = fields(
            &conn(Some("[2001:db8::1]:1"), Some("[::1]:80"), false),
            "a.example:8080",
        );
        assert_eq!(v6[0].1.as_deref(), Some("2001:db8::1"));
        assert_eq!(v6[3].1.as_deref(), Some("80"));
        assert_eq!(
            v6[4].1.as_deref(),
            Some("for=\"[2001:db8::1]\";proto=http;host=\"a.example:8080\"")
        );
        let quoted = fields(
            &conn(Some("0.0.0.0:1"), Some("127.0.0.1:0"), false),
            "we\"ird\\h",
        );
        assert_eq!(quoted[3].1.as_deref(), Some("0"));
        assert_eq!(
            quoted[4].1.as_deref(),
            Some("for=0.0.0.0;proto=http;host=\"we\\\"ird\\\\h\"")
        );
        let mapped = fields(&conn(Some("[::ffff:192.0.2.1]:80"), None, false), "a");
        assert_eq!(mapped[0].1.as_deref(), Some("::ffff:192.0.2.1"));
        // Without a peer address, nothing the client sent survives.
        let none = fields(&conn(None, None, false), "a.example");
        assert_eq!(none[0].1, None);
        assert_eq!(none[4].1, None);
        assert_eq!(none[5].1, None);
    }

    /// The HTTP/1 engine's edits (cached or not) and an HTTP/2 header
    /// map get the same fields, the IDs before them when teapot made
    /// them.
    #[test]
    fn each_engine_gets_the_same_fields() {
        let clients = [
            None,
            Some("10.1.2.3:5555"),
            Some("255.255.255.255:1"),
            Some("1.20.100.9:2"),
            Some("[::1]:443"),
            Some("[2001:db8::8a2e:370:7334]:80"),
        ];
        let locals = [None, Some("127.0.0.1:8"), Some("[::1]:65535")];
        let authorities = ["a.example", "a.example:8443", "[::1]:80", ""];
        for client in clients {
            for local in locals {
                for tls in [false, true] {
                    for authority in authorities {
                        let conn = conn(client, local, tls);
                        let made = block(&conn, authority);
                        // Twice: made, then from the cache.
                        for _ in 0..2 {
                            assert_eq!(with_block(&conn, authority, |b| b.clone()), made);
                        }
                        let mut map = HeaderMap::new();
                        map.insert("x-real-ip", HeaderValue::from_static("6.6.6.6"));
                        map.insert("forwarded", HeaderValue::from_static("for=6.6.6.6"));
                        apply(&conn, authority, &mut map).unwrap();
                        let mut expected = HeaderEdits::default();
                        for name in FORWARDING.iter().chain(&CLIENT_CERT_FIELDS) {
                            match map.get(*name) {
                                Some(v) => expected.push_set(name.as_bytes(), v.as_bytes()),
                                None => expected.push_remove(name.as_bytes()),
                            }
                        }
                        assert_eq!(expected, made, "{client:?} {local:?} {tls} {authority}");
                    }
                }
            }
        }
        let id = trace::request_id(None, true);
        let tp = trace::traceparent(None, &id);
        let conn = conn(Some("10.0.0.1:1"), None, false);
        let mut expected = HeaderEdits::default();
        expected.push_set(trace::REQUEST_ID.as_bytes(), id.as_bytes());
        expected.push_set(trace::TRACEPARENT.as_bytes(), tp.as_bytes());
        expected.push_all(&block(&conn, "a.example"));
        assert_eq!(edits(&conn, "a.example", &id, &tp), expected);
        let kept = trace::request_id(Some(b"kept"), true);
        let kept_tp = trace::traceparent(
            Some(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            &kept,
        );
        assert_eq!(
            edits(&conn, "a.example", &kept, &kept_tp),
            block(&conn, "a.example")
        );
    }

    #[test]
    fn teapots_fields_are_the_ids_and_the_forwarding_fields() {
        for name in FORWARDING
            .into_iter()
            .chain([trace::REQUEST_ID, trace::TRACEPARENT])
        {
            assert!(is_teapots(name), "{name}");
            assert!(is_teapots(&name.to_ascii_uppercase()), "{name}");
        }
        assert!(!is_teapots("x-forwarded"));
        assert!(!is_teapots("host"));
    }

    /// A client's `_` spellings of teapot's own fields are dropped on
    /// both engines; other names with `_` are the backends' business.
    #[test]
    fn underscore_lookalikes_of_teapots_fields_are_dropped() {
        for name in [
            "X_Forwarded_For",
            "x-forwarded_for",
            "X_REAL_IP",
            "x_real-ip",
            "X_Request_Id",
            "Forwarded",
            "X_Original_URL",
            "x_auth_request_redirect",
            "X_Forwarded_User",
            "x_forwarded_prefix",
        ] {
            assert_eq!(is_lookalike(name), name.contains('_'), "{name}");
        }
        for name in [
            "X-Forwarded-For",
            "x_custom_id",
            "x_forwarded",
            "x_real_ipv6",
            "my_header",
        ] {
            assert!(!is_lookalike(name), "{name}");
        }
        assert!(shadows("X_Auth_User", "x-auth-user"));
        assert!(!shadows("X-Auth-User", "x-auth-user"), "the field itself");
        assert!(!shadows("X_Auth_Users", "x-auth-user"));

        // HTTP/2 (and HTTP/2 to HTTP/1 through a map): removed with the
        // client's own forwarding fields.
        let conn = conn(Some("192.0.2.7:5555"), None, false);
        let mut map = HeaderMap::new();
        for name in [
            "x_forwarded_for",
            "x_real_ip",
            "x-forwarded_proto",
            "x_request_id",
            "x_app_token",
        ] {
            map.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_static("6.6.6.6"),
            );
        }
        apply(&conn, "a.example", &mut map).unwrap();
        let mut names: Vec<&str> = map.keys().map(|n| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "forwarded",
                "x-forwarded-for",
                "x-forwarded-host",
                "x-forwarded-proto",
                "x-real-ip",
                "x_app_token"
            ]
        );
        assert_eq!(map["x-forwarded-for"], "192.0.2.7");

        // HTTP/1: a removal per look-alike the client sent, in its spelling.
        let mut edits = HeaderEdits::default();
        let sent = [
            "Host",
            "X_Forwarded_For",
            "X_Real_IP",
            "x_app_token",
            "X-Real-IP",
        ];
        remove_lookalike_fields(&mut edits, sent.into_iter());
        assert_eq!(
            edits,
            HeaderEdits::default()
                .remove("X_Forwarded_For")
                .remove("X_Real_IP")
        );
    }
}
