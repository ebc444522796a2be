//! Peer-supplied text made safe for logs. A query name is any 1 to 63
//! bytes per label: a newline forges a log line, an ANSI sequence
//! rewrites the operator's terminal, a dot inside a label makes one name
//! look like another. Everything logged from a query goes through here.

use std::fmt;

use hickory_proto::rr::Name;
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

/// A DNS name in presentation format (RFC 1035 §5.1) with every byte
/// outside letters, digits, `-` and `_` escaped: `\.` and `\\` for a dot
/// or backslash inside a label, `\c` for other printable ASCII, `\DDD`
/// (decimal) for spaces, control bytes and bytes above 0x7E. The output
/// is printable ASCII, and two names print alike only if they are alike.
#[derive(Clone, Copy, Debug)]
pub struct LogName<'a>(pub &'a Name);

impl fmt::Display for LogName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_root() {
            return f.write_str(".");
        }
        for (i, label) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            for &b in label {
                match b {
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => {
                        fmt::Write::write_char(f, char::from(b))?
                    }
                    0x21..=0x7e => write!(f, "\\{}", char::from(b))?,
                    _ => write!(f, "\\{b:03}")?,
                }
            }
        }
        if self.0.is_fqdn() {
            f.write_str(".")?;
        }
        Ok(())
    }
}

/// The question name of a query in wire format, as [`LogName`] prints
/// it, or `-` when there is none readable. Parsed only when printed, so a
/// disabled log line costs nothing.
#[derive(Clone, Copy, Debug)]
pub struct LogQuestion<'a>(pub &'a [u8]);

impl fmt::Display for LogQuestion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // From the message's start, so compression pointers resolve.
        let mut decoder = BinDecoder::new(self.0);
        let name = decoder
            .read_slice(12)
            .ok()
            .and_then(|_| Name::read(&mut decoder).ok());
        match name {
            Some(name) => LogName(&name).fmt(f),
            None => f.write_str("-"),
        }
    }
}

/// Free text that may quote a peer's bytes (a codec's error message):
/// printable ASCII as is, everything else (control bytes, any non-ASCII
/// character) as a Rust escape.
#[derive(Clone, Copy, Debug)]
pub struct LogText<'a>(pub &'a str);

impl fmt::Display for LogText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                ' '..='~' if c != '\\' => fmt::Write::write_char(f, c)?,
                _ => write!(f, "{}", c.escape_default())?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(labels: &[&[u8]]) -> Name {
        Name::from_labels(labels.iter().copied()).unwrap()
    }

    #[test]
    fn control_bytes_dots_and_escapes_in_a_query_name_are_escaped() {
        let forged = name(&[
            b"a\nINFO forged line\x1b[2J",
            b"b.c",
            b"back\\slash\"",
            b"\x00\xff",
            b"lb",
        ]);
        let logged = LogName(&forged).to_string();
        assert_eq!(
            logged,
            "a\\010INFO\\032forged\\032line\\027\\[2J.b\\.c.back\\\\slash\\\".\\000\\255.lb."
        );
        assert!(logged.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        // The dot inside a label stays distinguishable from a separator.
        assert_ne!(logged, LogName(&name(&[b"b", b"c"])).to_string());
    }

    #[test]
    fn a_query_is_logged_by_its_escaped_question_name() {
        let mut m = hickory_proto::op::Message::query();
        let forged = name(&[b"x\r\n\x1b]0;owned\x07", b"lb"]);
        m.add_query(hickory_proto::op::Query::query(
            forged,
            hickory_proto::rr::RecordType::A,
        ));
        let wire = m.to_vec().unwrap();
        assert_eq!(
            LogQuestion(&wire).to_string(),
            "x\\013\\010\\027\\]0\\;owned\\007.lb."
        );
        assert_eq!(LogQuestion(&wire[..5]).to_string(), "-");
    }

    #[test]
    fn plain_names_and_the_root_are_as_usual() {
        let web = Name::from_ascii("Web-1.acme_x.lb.example.com.").unwrap();
        assert_eq!(LogName(&web).to_string(), "Web-1.acme_x.lb.example.com.");
        assert_eq!(LogName(&Name::root()).to_string(), ".");
    }

    #[test]
    fn free_text_keeps_printable_ascii_only() {
        let text = "bad label \"a\nb\u{1b}[0m\u{202e}\\\"";
        assert_eq!(
            LogText(text).to_string(),
            "bad label \"a\\nb\\u{1b}[0m\\u{202e}\\\\\""
        );
    }
}
