//! The server name of a TLS ClientHello, read without terminating TLS
//! (TLS passthrough listeners of Gateways, docs/gateway-api-l4.md).
//!
//! [`server_name`] is a pure function over the bytes read so far: it says
//! whether more are needed, what the name is, or why the bytes are not a
//! ClientHello. It reads TLS records (RFC 8446 5.1, which allows a
//! handshake message to span records) up to [`MAX_HELLO`] bytes of
//! handshake, then the ClientHello (4.1.2) and its `server_name` extension
//! (RFC 6066 3). Every length is checked against what is there before it is
//! used, so any input gives an answer and never a panic (see the mutation
//! test below). rustls's own parser is not public API, and a
//! `rustls::server::Acceptor` would buffer the same bytes through a
//! server state machine only to be discarded.

/// Most handshake bytes a ClientHello may take: ClientHellos with
/// post-quantum key shares are about 1.8 KiB; 16 KiB is one full record.
pub const MAX_HELLO: usize = 16 * 1024;

/// Most bytes read while looking for the name: the handshake plus the
/// headers of records as small as one byte of payload each would be
/// absurd, so a few headers' worth over [`MAX_HELLO`] is the bound.
pub const MAX_READ: usize = MAX_HELLO + 5 * 64;

/// What the bytes so far say.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// Not a complete ClientHello yet: read more.
    Incomplete,
    /// A ClientHello; its `host_name`, if it sent one (lowercased).
    Complete(Option<String>),
    /// Not a TLS ClientHello, or one teapot will not read.
    Invalid(&'static str),
}

/// Reads the server name from the start of a TLS connection.
pub fn server_name(bytes: &[u8]) -> Hello {
    // Gather the handshake bytes from as many records as are here.
    let mut handshake: Vec<u8> = Vec::new();
    let mut rest = bytes;
    loop {
        if handshake.len() >= 4 {
            let len = u24(&handshake[1..4]);
            if handshake[0] != 1 {
                return Hello::Invalid("the first handshake message is not a ClientHello");
            }
            if len > MAX_HELLO {
                return Hello::Invalid("the ClientHello is longer than 16 KiB");
            }
            if handshake.len() >= 4 + len {
                return client_hello(&handshake[4..4 + len]);
            }
        }
        if rest.len() < 5 {
            return Hello::Incomplete;
        }
        if rest[0] != 22 {
            return Hello::Invalid("not a TLS handshake record");
        }
        if rest[1] != 3 {
            return Hello::Invalid("not a TLS record version");
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if len == 0 || len > MAX_HELLO + 2048 {
            return Hello::Invalid("bad TLS record length");
        }
        if rest.len() < 5 + len {
            // A partial record: its first bytes may already show a
            // message that is no ClientHello, or too long, so that a
            // client is not waited for in vain.
            let mut head = handshake.clone();
            head.extend_from_slice(&rest[5..rest.len().min(5 + 4)]);
            if head.len() >= 4 {
                if head[0] != 1 {
                    return Hello::Invalid("the first handshake message is not a ClientHello");
                }
                if u24(&head[1..4]) > MAX_HELLO {
                    return Hello::Invalid("the ClientHello is longer than 16 KiB");
                }
            }
            return Hello::Incomplete;
        }
        handshake.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
        if handshake.len() > MAX_HELLO + 4 {
            return Hello::Invalid("the ClientHello is longer than 16 KiB");
        }
    }
}

fn u24(b: &[u8]) -> usize {
    (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2])
}

/// A cursor that refuses to read past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    /// A vector with a `width`-byte length prefix.
    fn vec(&mut self, width: usize) -> Option<&'a [u8]> {
        let n = match width {
            1 => self.u8()?,
            _ => self.u16()?,
        };
        self.take(n)
    }
}

fn client_hello(body: &[u8]) -> Hello {
    const BAD: Hello = Hello::Invalid("malformed ClientHello");
    let mut r = Reader(body);
    let Some(_version) = r.take(2) else {
        return BAD;
    };
    let Some(_random) = r.take(32) else {
        return BAD;
    };
    let Some(_session) = r.vec(1) else { return BAD };
    let Some(_suites) = r.vec(2) else { return BAD };
    let Some(_compression) = r.vec(1) else {
        return BAD;
    };
    if r.0.is_empty() {
        // No extensions at all (old clients): no name.
        return Hello::Complete(None);
    }
    let Some(extensions) = r.vec(2) else {
        return BAD;
    };
    let mut e = Reader(extensions);
    while !e.0.is_empty() {
        let (Some(kind), Some(data)) = (e.u16(), e.vec(2)) else {
            return BAD;
        };
        if kind != 0 {
            continue;
        }
        let mut list = Reader(data);
        let Some(names) = list.vec(2) else { return BAD };
        let mut n = Reader(names);
        while !n.0.is_empty() {
            let (Some(name_type), Some(name)) = (n.u8(), n.vec(2)) else {
                return BAD;
            };
            if name_type != 0 {
                continue;
            }
            let Ok(name) = std::str::from_utf8(name) else {
                return Hello::Invalid("the server name is not ASCII");
            };
            if name.is_empty() || !name.is_ascii() || name.bytes().any(|b| b.is_ascii_control()) {
                return Hello::Invalid("the server name is not a DNS name");
            }
            return Hello::Complete(Some(name.to_ascii_lowercase()));
        }
        return Hello::Complete(None);
    }
    Hello::Complete(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A real ClientHello from rustls, for `name` (None: no SNI).
    fn hello(name: Option<&str>) -> Vec<u8> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut roots = rustls::RootCertStore::empty();
        let _ = &mut roots;
        let mut config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.enable_sni = name.is_some();
        let server =
            rustls::pki_types::ServerName::try_from(name.unwrap_or("x.example").to_string())
                .unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn reads_the_name_of_a_real_client_hello_at_every_split() {
        let bytes = hello(Some("Db.Example.com"));
        assert_eq!(
            server_name(&bytes),
            Hello::Complete(Some("db.example.com".into()))
        );
        for cut in 0..bytes.len() {
            assert_eq!(
                server_name(&bytes[..cut]),
                Hello::Incomplete,
                "cut at {cut}"
            );
        }
        assert_eq!(server_name(&hello(None)), Hello::Complete(None));
    }

    #[test]
    fn a_hello_split_over_records_is_joined() {
        let bytes = hello(Some("a.example.com"));
        let body = &bytes[5..];
        let mut split = Vec::new();
        for chunk in body.chunks(7) {
            split.extend_from_slice(&[22, 3, 1, 0, chunk.len() as u8]);
            split.extend_from_slice(chunk);
        }
        assert_eq!(
            server_name(&split),
            Hello::Complete(Some("a.example.com".into()))
        );
    }

    #[test]
    fn other_protocols_are_refused_at_once() {
        assert!(matches!(
            server_name(b"GET / HTTP/1.1\r\n"),
            Hello::Invalid(_)
        ));
        assert!(matches!(server_name(b"SSH-2.0-OpenSSH"), Hello::Invalid(_)));
        // A ServerHello-typed handshake, not a ClientHello.
        assert!(matches!(
            server_name(&[22, 3, 3, 0, 4, 2, 0, 0, 0]),
            Hello::Invalid(_)
        ));
        // A declared ClientHello beyond the bound is refused before it is
        // all read.
        assert!(matches!(
            server_name(&[22, 3, 1, 0x40, 0, 1, 0x01, 0, 0]),
            Hello::Invalid(_)
        ));
    }

    /// Fuzz-style: every truncation, and many single-byte changes, of a real
    /// ClientHello give an answer without panicking, and an answer that
    /// names a server names the right one or is from a changed name byte.
    #[test]
    fn mutations_never_panic() {
        let bytes = hello(Some("m.example.com"));
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let mut b = bytes.clone();
            for _ in 0..(next() % 4 + 1) {
                let i = (next() as usize) % b.len();
                b[i] = next() as u8;
            }
            let cut = (next() as usize) % (b.len() + 1);
            let _ = server_name(&b[..cut]);
        }
    }
}
