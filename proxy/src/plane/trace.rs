//! `X-Request-Id` and W3C `traceparent` (docs/operations.md): every
//! request reaches its backend with both, and the access log carries them.
//!
//! - A client's `X-Request-Id` is kept only on routes of an operator
//!   namespace that trusts it (`teapot proxy --trust-request-id NS`); any
//!   other request gets a new one (128 random bits, 32 hex digits), so a
//!   client cannot make its requests look like another's in a tenant's
//!   logs.
//! - A well-formed `traceparent` is passed through as it came (the client
//!   or an earlier hop owns the trace). Otherwise one is started, trace-id
//!   = the request ID when teapot made it, sampled flag off: teapot records
//!   no spans, and a set flag would make every backend with parent-based
//!   sampling record every request.

/// The header names, lower case as sent upstream.
pub const REQUEST_ID: &str = "x-request-id";
pub const TRACEPARENT: &str = "traceparent";

/// A request's ID: the trusted client's, or a new one (on the stack).
#[derive(Clone, Copy, Debug)]
pub enum RequestId<'a> {
    Kept(&'a str),
    /// 32 hex digits of ID, then 16 of the span id [`traceparent`] starts
    /// its trace with: both drawn and written at once.
    New([u8; 48]),
}

impl RequestId<'_> {
    /// The ID's bytes, without [`Self::as_str`]'s UTF-8 check: what a head
    /// written as bytes needs.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            RequestId::Kept(s) => s.as_bytes(),
            RequestId::New(b) => &b[..32],
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            RequestId::Kept(s) => s,
            // Only hex digits were written.
            RequestId::New(b) => std::str::from_utf8(&b[..32]).unwrap_or_default(),
        }
    }

    /// Whether teapot made it (and so must send it upstream).
    pub fn is_new(&self) -> bool {
        matches!(self, RequestId::New(_))
    }
}

/// A request's `traceparent`: passed through, or started here.
#[derive(Clone, Copy, Debug)]
pub enum TraceParent<'a> {
    Kept(&'a str),
    New([u8; 55]),
}

impl TraceParent<'_> {
    /// [`RequestId::as_bytes`]'s counterpart.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            TraceParent::Kept(s) => s.as_bytes(),
            TraceParent::New(b) => b,
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            TraceParent::Kept(s) => s,
            TraceParent::New(b) => std::str::from_utf8(b).unwrap_or_default(),
        }
    }

    pub fn is_new(&self) -> bool {
        matches!(self, TraceParent::New(_))
    }
}

/// The access log's tag of a request, `series tag \x1f request id \x1f
/// traceparent` (`access_log::TagFields` reads it), put together in a
/// per-thread buffer before its one allocation: both engines' requests.
pub fn tag(series: &str, id: &RequestId<'_>, tp: &TraceParent<'_>) -> std::sync::Arc<str> {
    thread_local! {
        static TAG: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    TAG.with_borrow_mut(|buf| {
        buf.clear();
        buf.push_str(series);
        buf.push('\x1f');
        buf.push_str(id.as_str());
        buf.push('\x1f');
        buf.push_str(tp.as_str());
        std::sync::Arc::from(buf.as_str())
    })
}

/// The request's ID: `sent` when `trusted` and it is 1 to 200 visible
/// ASCII bytes, else a new one.
pub fn request_id(sent: Option<&[u8]>, trusted: bool) -> RequestId<'_> {
    if trusted
        && let Some(v) = sent
        && !v.is_empty()
        && v.len() <= 200
        && v.iter().all(|b| b.is_ascii_graphic())
        && let Ok(s) = std::str::from_utf8(v)
    {
        return RequestId::Kept(s);
    }
    // The span id a trace started here needs too, from the same draw:
    // one visit to the pool per request instead of two.
    let mut id = [0u8; 48];
    hex(&mut id, &random::<24>());
    RequestId::New(id)
}

/// The request's `traceparent`: `sent` when well formed, else a new one
/// whose trace-id is `id` when that is 32 hex digits.
pub fn traceparent<'a>(sent: Option<&'a [u8]>, id: &RequestId<'_>) -> TraceParent<'a> {
    if let Some(v) = sent
        && valid_traceparent(v)
        && let Ok(s) = std::str::from_utf8(v)
    {
        return TraceParent::Kept(s);
    }
    let mut tp = *b"00-00000000000000000000000000000000-0000000000000000-00";
    // A zero span id is invalid; the chance of drawing one is 2^-64.
    match id {
        RequestId::New(b) => {
            tp[3..35].copy_from_slice(&b[..32]);
            tp[36..52].copy_from_slice(&b[32..]);
        }
        RequestId::Kept(_) => {
            let mut ids = [0u8; 48];
            hex(&mut ids, &random::<24>());
            tp[3..35].copy_from_slice(&ids[..32]);
            tp[36..52].copy_from_slice(&ids[32..]);
        }
    }
    TraceParent::New(tp)
}

/// W3C Trace Context §3.2: `version-traceid-parentid-flags`, lower-case
/// hex, neither id all zeros, version `ff` invalid; a version other than
/// `00` may carry more fields after a `-`.
fn valid_traceparent(v: &[u8]) -> bool {
    let lower_hex = |s: &[u8]| s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let zeros = |s: &[u8]| s.iter().all(|&b| b == b'0');
    if v.len() < 55 || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return false;
    }
    let (version, trace, parent, flags) = (&v[..2], &v[3..35], &v[36..52], &v[53..55]);
    let tail_ok = match version {
        b"00" => v.len() == 55,
        _ => v.len() == 55 || v[55] == b'-',
    };
    version != b"ff"
        && [version, trace, parent, flags].iter().all(|s| lower_hex(s))
        && !zeros(trace)
        && !zeros(parent)
        && tail_ok
}

/// `N` bytes from the thread's CSPRNG (`rand`'s thread generator), drawn
/// 256 at a time: each request takes 24, and a call to the generator per
/// ID cost more than the bytes themselves.
fn random<const N: usize>() -> [u8; N] {
    use rand::RngCore as _;
    use std::cell::RefCell;
    struct Pool {
        bytes: [u8; 256],
        used: usize,
    }
    thread_local! {
        static POOL: RefCell<Pool> = const {
            RefCell::new(Pool { bytes: [0; 256], used: 256 })
        };
    }
    POOL.with_borrow_mut(|pool| {
        if pool.used + N > pool.bytes.len() {
            rand::rng().fill_bytes(&mut pool.bytes);
            pool.used = 0;
        }
        let mut out = [0u8; N];
        out.copy_from_slice(&pool.bytes[pool.used..pool.used + N]);
        // Handed out once: never the same bytes to two requests.
        pool.used += N;
        out
    })
}

/// Each byte's two lower-case hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = [DIGITS[b >> 4], DIGITS[b & 15]];
        b += 1;
    }
    t
};

/// `bytes` in lower-case hex: one table read per byte.
fn hex<const N: usize, const H: usize>(out: &mut [u8; H], bytes: &[u8; N]) {
    const { assert!(H == 2 * N) };
    for (pair, &b) in out.as_chunks_mut::<2>().0.iter_mut().zip(bytes) {
        *pair = HEX_PAIRS[usize::from(b)];
    }
}

/// The request's IDs, sent upstream when teapot made them.
pub struct Ids<'p> {
    pub request_id: RequestId<'p>,
    pub traceparent: TraceParent<'p>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn request_id_is_kept_only_when_trusted_and_sane() {
        assert_eq!(request_id(Some(b"abc-1"), true).as_str(), "abc-1");
        assert_eq!(request_id(Some(b"abc-1"), true).as_bytes(), b"abc-1");
        let fresh = request_id(Some(b"abc-1"), false);
        assert!(fresh.is_new());
        assert_eq!(fresh.as_str().len(), 32);
        assert!(fresh.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(request_id(Some(b"a b"), true).is_new(), "a space");
        assert!(request_id(Some(b""), true).is_new());
        assert_ne!(
            request_id(None, true).as_str(),
            request_id(None, true).as_str()
        );
    }

    #[test]
    fn hex_from_the_table_is_each_bytes_two_lower_case_digits() {
        let bytes: [u8; 256] = std::array::from_fn(|i| i as u8);
        let mut out = [0u8; 512];
        hex(&mut out, &bytes);
        let formatted: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(std::str::from_utf8(&out).unwrap(), formatted);
    }

    #[test]
    fn new_ids_do_not_repeat_across_refills() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let id = request_id(None, false);
            let tp = traceparent(None, &id);
            assert!(seen.insert(id.as_str().to_owned()));
            assert!(seen.insert(tp.as_str()[36..52].to_owned()));
        }
    }

    #[test]
    fn traceparent_passes_through_or_starts_with_the_request_id() {
        let id = request_id(None, false);
        assert_eq!(traceparent(Some(TP.as_bytes()), &id).as_str(), TP);
        let started = traceparent(None, &id);
        let s = started.as_str();
        assert!(started.is_new());
        assert_eq!(started.as_bytes(), s.as_bytes());
        assert!(valid_traceparent(s.as_bytes()), "{s}");
        assert_eq!(&s[3..35], id.as_str());
        assert!(s.ends_with("-00"));
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "garbage",
        ] {
            assert!(traceparent(Some(bad.as_bytes()), &id).is_new(), "{bad}");
        }
        let future = format!("01{}-more", &TP[2..]);
        assert_eq!(traceparent(Some(future.as_bytes()), &id).as_str(), future);
    }
}
