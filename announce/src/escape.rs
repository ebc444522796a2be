//! Text a peer or a client chose, made fit for an operator's log line:
//! printable ASCII is kept, every other byte (CR, LF, ESC, any control or
//! non-ASCII byte) and `\` are written `\xNN`, and at most
//! [`MAX_LOGGED_BYTES`] bytes of it are shown, then `...`. A BGP peer's
//! shutdown communication or a client's header can then neither forge a
//! log line, nor drive the operator's terminal, nor flood the log.
//!
//! It lives here, in a crate with no teapot dependency, so that both this
//! crate and the proxy (which depends on it) use the same rule without a
//! new arrow between crates (docs/architecture.md).

use std::fmt;

/// The most bytes of peer text one log field shows.
pub const MAX_LOGGED_BYTES: usize = 256;

/// `bytes` as [`printable`] shows them in a log line.
#[derive(Clone, Copy)]
pub struct Printable<'a>(&'a [u8]);

/// Peer- or client-chosen `bytes`, escaped and bounded for a log line
/// (see the module's documentation); formatting it allocates nothing.
pub fn printable(bytes: &(impl AsRef<[u8]> + ?Sized)) -> Printable<'_> {
    Printable(bytes.as_ref())
}

impl fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = &self.0[..self.0.len().min(MAX_LOGGED_BYTES)];
        // Runs of kept bytes are written at once.
        let mut start = 0;
        for (i, &b) in shown.iter().enumerate() {
            if (b.is_ascii_graphic() && b != b'\\') || b == b' ' {
                continue;
            }
            // Only ASCII before `i`: the slice is valid UTF-8.
            f.write_str(std::str::from_utf8(&shown[start..i]).map_err(|_| fmt::Error)?)?;
            write!(f, "\\x{b:02x}")?;
            start = i + 1;
        }
        f.write_str(std::str::from_utf8(&shown[start..]).map_err(|_| fmt::Error)?)?;
        if self.0.len() > MAX_LOGGED_BYTES {
            f.write_str("...")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_ascii_is_kept_everything_else_escaped() {
        assert_eq!(
            printable("maintenance at 02:00").to_string(),
            "maintenance at 02:00"
        );
        assert_eq!(
            printable(b"bye\r\nlevel=error msg=\"forged\"\x1b[2J\\").to_string(),
            "bye\\x0d\\x0alevel=error msg=\"forged\"\\x1b[2J\\x5c"
        );
        assert_eq!(
            printable("héllo\u{7f}\t").to_string(),
            "h\\xc3\\xa9llo\\x7f\\x09"
        );
        assert_eq!(printable("").to_string(), "");
    }

    #[test]
    fn long_text_is_cut_at_the_bound() {
        let long = "a".repeat(10 * MAX_LOGGED_BYTES);
        let shown = printable(&long).to_string();
        assert_eq!(shown.len(), MAX_LOGGED_BYTES + 3);
        assert!(shown.ends_with("..."));
        // Escapes count the input bytes, not what they become.
        let controls = [0u8; MAX_LOGGED_BYTES + 1];
        let shown = printable(&controls[..]).to_string();
        assert_eq!(shown, format!("{}...", "\\x00".repeat(MAX_LOGGED_BYTES)));
        let exact = "b".repeat(MAX_LOGGED_BYTES);
        assert_eq!(printable(&exact).to_string(), exact);
    }
}
