//! Hand-built HTTP/2 (RFC 9113) for the tests that send what no
//! well-behaved client library would, or read what one would hide: a
//! request's HEADERS frame of HPACK literals (RFC 7541 §6.2.2, never
//! indexed, no Huffman) and the frames read back.

use teapot_testkit::h2frames::{END_HEADERS, END_STREAM, GOAWAY, HEADERS, RST_STREAM, SETTINGS};
use teapot_testkit::h2frames::{frame, hpack_length};

/// A HEADERS frame for `method` of `/` on `authority` with extra fields,
/// ending the stream or not.
pub fn request(
    stream: u32,
    method: &str,
    authority: &str,
    extra: &[(&[u8], &[u8])],
    end_stream: bool,
) -> Vec<u8> {
    let mut block = Vec::new();
    let pseudo: [(&[u8], &[u8]); 4] = [
        (b":method", method.as_bytes()),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b":authority", authority.as_bytes()),
    ];
    for (name, value) in pseudo.iter().chain(extra) {
        block.push(0x10); // literal, never indexed, new name
        hpack_length(&mut block, name.len());
        block.extend_from_slice(name);
        hpack_length(&mut block, value.len());
        block.extend_from_slice(value);
    }
    let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
    frame(HEADERS, flags, stream, &block)
}

/// One received frame.
#[derive(Debug)]
pub struct Frame {
    pub kind: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The first whole frame at the start of `buf`, taken out of it.
    pub fn take(buf: &mut Vec<u8>) -> Option<Frame> {
        if buf.len() < 9 {
            return None;
        }
        let len = (buf[0] as usize) << 16 | (buf[1] as usize) << 8 | buf[2] as usize;
        if buf.len() < 9 + len {
            return None;
        }
        let f = Frame {
            kind: buf[3],
            stream: u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff,
            payload: buf[9..9 + len].to_vec(),
        };
        buf.drain(..9 + len);
        Some(f)
    }

    /// Error code of RST_STREAM and GOAWAY.
    pub fn error_code(&self) -> Option<u32> {
        let at = match self.kind {
            RST_STREAM => 0,
            GOAWAY => 4,
            _ => return None,
        };
        let b = self.payload.get(at..at + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A SETTINGS parameter.
    pub fn setting(&self, id: u16) -> Option<u32> {
        if self.kind != SETTINGS {
            return None;
        }
        self.payload.chunks_exact(6).find_map(|c| {
            (u16::from_be_bytes([c[0], c[1]]) == id)
                .then(|| u32::from_be_bytes([c[2], c[3], c[4], c[5]]))
        })
    }
}
