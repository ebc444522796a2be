//! [`HeaderEdits`]: the header changes a router asks for, kept as they go
//! on the wire, checked once when pushed. Below both the decision
//! interface (crate::router), which carries them, and the head writer
//! (crate::wire), which applies them.

/// The lengths of the names an edit may not write: the hop-by-hop and
/// framing ones (`crate::hop::is_hop_by_hop`) and `host`.
const ENGINE_OWNED_LENGTHS: u32 =
    1 << 2 | 1 << 4 | 1 << 7 | 1 << 10 | 1 << 14 | 1 << 16 | 1 << 17 | 1 << 18 | 1 << 19;

/// Header changes applied while a head is copied, without building a map:
/// fields named by a removal or a replacement are skipped, then the
/// replacements and the additions are written, each in the order given.
/// Names are matched case-insensitively; a name that is not a token, a
/// value with CR, LF or another control byte but HTAB, a framing or
/// hop-by-hop name (`content-length`, `transfer-encoding`, `connection`,
/// `upgrade`...: the engine writes those itself) and an addition of a
/// second `host` are dropped (never written; a dropped replacement still
/// removes the client's field).
///
/// The fields are kept as they go on the wire (`name: value\r\n`, checked
/// once, when pushed): writing a head copies all of them at once. A router
/// that edits every request, like the forwarding headers, pays two
/// allocations for all its edits, and writes values in place
/// ([`Self::push_set_with`], [`Self::set_fmt`]) instead of building a
/// `String` for each.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HeaderEdits {
    /// The replacements, then the additions, as written.
    wire: Vec<u8>,
    /// Where the additions start in `wire`.
    appends_at: usize,
    /// The names removals and replacements take out of the head, each
    /// after its length (u16, little-endian).
    skipped: Vec<u8>,
}

impl HeaderEdits {
    /// Room for `bytes` bytes of edits (names and values, plus 4 per edit).
    /// The buffers come from the thread's spares ([`crate::spare`]) and go
    /// back there when the edits are dropped: a router that edits every
    /// request (the forwarding fields) made two allocations per request.
    pub fn with_capacity(bytes: usize) -> Self {
        HeaderEdits {
            wire: crate::spare::take(bytes.max(crate::spare::SMALL)),
            appends_at: 0,
            skipped: crate::spare::take((bytes / 2).max(crate::spare::SMALL)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.wire.is_empty() && self.skipped.is_empty()
    }

    /// Replaces every field called `name` with one `name: value`.
    pub fn set(mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Self {
        self.push_set(name.as_ref(), value.as_ref());
        self
    }

    /// Adds one more `name: value` field, keeping those already there.
    pub fn append(mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Self {
        self.push_append(name.as_ref(), value.as_ref());
        self
    }

    /// Drops every field called `name`.
    pub fn remove(mut self, name: impl AsRef<[u8]>) -> Self {
        self.push_remove(name.as_ref());
        self
    }

    /// [`Self::set`] in place.
    pub fn push_set(&mut self, name: &[u8], value: &[u8]) {
        self.push_field(name, |v| v.extend_from_slice(value), true);
    }

    /// [`Self::push_set`] of a field the caller made from a fixed
    /// alphabet, which the checks could only pass: a name that is a
    /// constant token no edit is refused for, and a value of hex digits
    /// and `-` (a request ID or `traceparent` teapot made). Written without
    /// looking at its bytes again; debug builds check both as
    /// [`Self::push_set`] does.
    pub fn push_set_hex(&mut self, name: &'static str, value: &[u8]) {
        debug_assert!(
            !name.is_empty()
                && name.bytes().all(crate::scan::is_tchar)
                && !crate::hop::is_hop_by_hop(name.as_bytes())
                && value.iter().all(|b| b.is_ascii_hexdigit() || *b == b'-'),
            "{name}: {}",
            value.escape_ascii()
        );
        let start = self.wire.len();
        self.wire.reserve(name.len() + value.len() + 4);
        self.wire.extend_from_slice(name.as_bytes());
        self.wire.extend_from_slice(b": ");
        self.wire.extend_from_slice(value);
        self.wire.extend_from_slice(b"\r\n");
        self.skip(name.as_bytes());
        // Before the additions already there (if any), as push_set does.
        let len = self.wire.len() - start;
        if self.appends_at != start {
            self.wire[self.appends_at..].rotate_right(len);
        }
        self.appends_at += len;
    }

    /// [`Self::append`] in place.
    pub fn push_append(&mut self, name: &[u8], value: &[u8]) {
        self.push_field(name, |v| v.extend_from_slice(value), false);
    }

    /// [`Self::remove`] in place.
    pub fn push_remove(&mut self, name: &[u8]) {
        self.skip(name);
    }

    /// [`Self::set`] with the value formatted straight into the edits.
    pub fn set_fmt(&mut self, name: &[u8], value: std::fmt::Arguments<'_>) {
        // Writing into a Vec cannot fail; a Display impl that errs leaves
        // what it wrote, as `to_string` would panic instead.
        self.push_set_with(name, |buf| {
            let _ = std::fmt::Write::write_fmt(&mut ByteWriter(buf), value);
        });
    }

    /// [`Self::set`] with the value written straight into the edits by
    /// `write` (bytes appended to the vector it is given): for values put
    /// together per request without `fmt`'s machinery.
    pub fn push_set_with(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>)) {
        self.push_field(name, write, true);
    }

    /// `other`'s edits after these, as if pushed here one by one, without
    /// checking them again (they were when pushed to `other`): for a set
    /// of edits a router keeps and reuses.
    pub fn push_all(&mut self, other: &HeaderEdits) {
        let (sets, appends) = other.wire.split_at(other.appends_at);
        if self.appends_at == self.wire.len() {
            // No additions here yet: nothing to move.
            self.wire.extend_from_slice(sets);
        } else {
            self.wire
                .splice(self.appends_at..self.appends_at, sets.iter().copied());
        }
        self.appends_at += sets.len();
        self.wire.extend_from_slice(appends);
        self.skipped.extend_from_slice(&other.skipped);
    }

    /// Writes `name: value\r\n` at the end of `wire`, checks it, and for
    /// a replacement moves it before the additions and skips the name.
    /// A name or value too long for the old length fields (u16, u32) is
    /// dropped whole, as no head a limit lets through has one.
    fn push_field(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>), replace: bool) {
        let start = self.wire.len();
        self.wire.extend_from_slice(name);
        self.wire.extend_from_slice(b": ");
        let value_at = self.wire.len();
        write(&mut self.wire);
        let value = &self.wire[value_at..];
        if u16::try_from(name.len()).is_err() || u32::try_from(value.len()).is_err() {
            tracing::debug!("oversized header edit dropped");
            self.wire.truncate(start);
            return;
        }
        // The framing and hop-by-hop fields are the engine's own (it
        // writes them after the edits), and a second Host would let the
        // upstream route by another authority: an edit never writes them.
        // One test of the name's length clears most names (every request
        // pushes some edits).
        let engine_owned = ENGINE_OWNED_LENGTHS
            .checked_shr(name.len() as u32)
            .is_some_and(|bits| bits & 1 == 1)
            && (crate::hop::is_hop_by_hop(name)
                || (!replace && name.eq_ignore_ascii_case(b"host")));
        let valid = !name.is_empty()
            && !engine_owned
            && name.iter().all(|&b| crate::scan::is_tchar(b))
            && crate::scan::is_field_value(value);
        if valid {
            self.wire.extend_from_slice(b"\r\n");
        } else {
            // The name may hold any byte (that is why it is refused): escaped
            // and cut, so it forges no log line.
            tracing::debug!(name = %name[..name.len().min(256)].escape_ascii(), "invalid header edit dropped");
            self.wire.truncate(start);
        }
        if !replace {
            return;
        }
        self.skip(name);
        if valid {
            // Replacements go before the additions already there (if any).
            let len = self.wire.len() - start;
            if self.appends_at != start {
                self.wire[self.appends_at..].rotate_right(len);
            }
            self.appends_at += len;
        }
    }

    fn skip(&mut self, name: &[u8]) {
        let Ok(n) = u16::try_from(name.len()) else {
            tracing::debug!("oversized header edit dropped");
            return;
        };
        self.skipped.extend_from_slice(&n.to_le_bytes());
        self.skipped.extend_from_slice(name);
    }

    /// The fields to write, as bytes (`name: value\r\n` each):
    /// replacements, then additions. Public for another writer of heads
    /// (HTTP/2 to HTTP/1) that drops the replaced names itself.
    pub fn wire(&self) -> &[u8] {
        &self.wire
    }

    /// The fields to write, one by one (for tests and `Debug`).
    pub(crate) fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.wire
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| {
                // A checked name has no colon, a checked value no CR or LF.
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
                (&line[..colon], line.get(colon + 2..).unwrap_or_default())
            })
    }

    pub(crate) fn skips(&self, name: &[u8]) -> bool {
        let mut rest = self.skipped.as_slice();
        while let Some((len, tail)) = rest.split_first_chunk::<2>() {
            let (skipped, tail) = tail.split_at(usize::from(u16::from_le_bytes(*len)));
            if skipped.eq_ignore_ascii_case(name) {
                return true;
            }
            rest = tail;
        }
        false
    }
}

impl Drop for HeaderEdits {
    fn drop(&mut self) {
        crate::spare::give(std::mem::take(&mut self.wire));
        crate::spare::give(std::mem::take(&mut self.skipped));
    }
}

impl std::fmt::Debug for HeaderEdits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let mut skipped = Vec::new();
        let mut rest = self.skipped.as_slice();
        while let Some((len, tail)) = rest.split_first_chunk::<2>() {
            let (name, tail) = tail.split_at(usize::from(u16::from_le_bytes(*len)));
            skipped.push(text(name));
            rest = tail;
        }
        f.debug_struct("HeaderEdits")
            .field("skipped", &skipped)
            .field(
                "fields",
                &self
                    .fields()
                    .map(|(n, v)| (text(n), text(v)))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

struct ByteWriter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for ByteWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::HeaderEdits;

    #[test]
    fn edits_in_one_buffer_keep_their_order_and_kinds() {
        let mut edits = HeaderEdits::with_capacity(64).append("x-added", "1");
        edits.set_fmt(b"x-port", format_args!("{}", 8443u16));
        edits.push_remove(b"x-gone");
        edits.push_set(b"x-empty", b"");
        edits.push_set_with(b"x-bytes", |v| v.extend_from_slice(b"a;b"));
        let fields: Vec<_> = edits.fields().collect();
        assert_eq!(
            fields,
            [
                (&b"x-port"[..], &b"8443"[..]),
                (b"x-empty", b""),
                (b"x-bytes", b"a;b"),
                (b"x-added", b"1")
            ]
        );
        assert!(edits.skips(b"X-Gone") && edits.skips(b"x-port"));
        assert!(!edits.skips(b"x-added"), "an addition keeps the client's");
        // Too long for its length field: dropped, the rest intact.
        edits.set_fmt(&[b'a'; 70_000], format_args!("v"));
        edits.push_set_with(&[b'a'; 70_000], |v| v.push(b'v'));
        assert_eq!(edits.fields().count(), 4);
        assert!(!HeaderEdits::default().skips(b"x"));
        // push_all is pushing one by one.
        let kept = HeaderEdits::default()
            .append("x-a2", "2")
            .set("x-s2", "s")
            .remove("x-r2");
        let mut one_by_one = HeaderEdits::default().set("x-s1", "1").append("x-a1", "1");
        let mut at_once = one_by_one.clone();
        one_by_one = one_by_one
            .append("x-a2", "2")
            .set("x-s2", "s")
            .remove("x-r2");
        at_once.push_all(&kept);
        assert_eq!(at_once, one_by_one);
        assert!(at_once.skips(b"x-r2") && at_once.skips(b"X-S1"));
    }

    /// The unchecked push of teapot's own hex fields writes what the
    /// checked one does, before or after other edits.
    #[test]
    fn hex_fields_are_pushed_as_checked_ones() {
        let id = b"4bf92f3577b34da6a3ce929d0e0e4736";
        let tp = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let mut checked = HeaderEdits::with_capacity(16);
        let mut unchecked = HeaderEdits::with_capacity(16);
        checked.push_set(b"x-request-id", id);
        unchecked.push_set_hex("x-request-id", id);
        for edits in [&mut checked, &mut unchecked] {
            edits.push_append(b"x-added", b"1");
            edits.push_remove(b"x-gone");
        }
        checked.push_set(b"traceparent", tp);
        unchecked.push_set_hex("traceparent", tp);
        assert_eq!(checked, unchecked);
        assert_eq!(checked.wire(), unchecked.wire());
        assert!(unchecked.skips(b"X-Request-Id") && unchecked.skips(b"traceparent"));
    }

    /// A value or name that could split the head, or a field that would
    /// frame the message a second time, is never written: the smuggling
    /// a header filter could otherwise open.
    #[test]
    fn edits_never_carry_line_breaks_framing_or_a_second_host() {
        let edits = HeaderEdits::default()
            .set("x-a", "1\r\nx-injected: 1")
            .append("x-b", "2\nx-injected: 2")
            .append("x-c", "3\r")
            .set("x-d\r\nx-injected", "4")
            .append("x d", "5")
            .set("Content-Length", "0")
            .append("transfer-encoding", "chunked")
            .set("connection", "keep-alive")
            .append("upgrade", "h2c")
            .append("Host", "evil.example")
            .set("x-ok", "fine\tvalue");
        let fields: Vec<_> = edits.fields().collect();
        assert_eq!(fields, [(&b"x-ok"[..], &b"fine\tvalue"[..])]);
        for name in [
            "te",
            "trailer",
            "keep-alive",
            "proxy-connection",
            "proxy-authenticate",
            "proxy-authorization",
            "TE",
        ] {
            let e = HeaderEdits::default().set(name, "1").append(name, "2");
            assert_eq!(e.fields().count(), 0, "{name}");
        }
        // Dropped replacements still take the client's field out.
        for name in ["x-a", "content-length", "connection"] {
            assert!(edits.skips(name.as_bytes()), "{name}");
        }
        // Replacing Host is a rewrite: one Host, the new one.
        let host = HeaderEdits::default().set("host", "b.example");
        assert_eq!(
            host.fields().collect::<Vec<_>>(),
            [(&b"host"[..], &b"b.example"[..])]
        );
        assert!(host.skips(b"Host"));
    }
}
