//! Hand-built HTTP/2 frames (RFC 9113 §4.1) and HPACK string lengths
//! (RFC 7541 §5.1, no Huffman), for tests and benchmarks that send what
//! no well-behaved client or server library would: oversized heads,
//! lying lengths, resets in bulk.

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
/// SETTINGS and PING acknowledgement.
pub const ACK: u8 = 0x1;

/// One frame: the 9-byte header, then `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK string length: 7-bit prefix integer, Huffman bit clear.
pub fn hpack_length(out: &mut Vec<u8>, mut n: usize) {
    if n < 127 {
        out.push(n as u8);
        return;
    }
    out.push(127);
    n -= 127;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpack_lengths_use_the_prefix_integer() {
        let mut v = Vec::new();
        hpack_length(&mut v, 10);
        hpack_length(&mut v, 4000);
        // 4000 - 127 = 3873 = 0x1e * 128 + 0x21.
        assert_eq!(v, [10, 127, 0x21 | 0x80, 0x1e]);
    }

    #[test]
    fn a_frame_header_is_length_kind_flags_stream() {
        let f = frame(HEADERS, END_HEADERS, 3, b"abc");
        assert_eq!(f, [0, 0, 3, 1, 4, 0, 0, 0, 3, b'a', b'b', b'c']);
    }
}
