//! Quoting a tenant string back in a message. A leaf module: the
//! admission checks and the readers they call (response fields, ...) both
//! name what they refuse with it.

/// Longest piece of a tenant string quoted back in a message.
const QUOTE_CHARS: usize = 64;

/// A tenant string made safe to show: Rust `Debug` quoting (so `\n`, `"`
/// and invisible characters are escaped) and at most 64 characters.
pub fn quote(s: &str) -> String {
    match s.char_indices().nth(QUOTE_CHARS) {
        None => format!("{s:?}"),
        Some((end, _)) => format!("{:?}...", &s[..end]),
    }
}
