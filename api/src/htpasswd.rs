//! htpasswd Secrets, the credentials of ingress-nginx's basic
//! authentication (`auth-type: basic`, `auth-secret`): read into
//! `(user, hash)` entries once, by admission (a tenant's Secret), the
//! store (what it keeps of an Opaque Secret) and the compile (what the
//! proxy verifies against). No password hash is computed here; what a
//! client can make the fleet spend on one is bounded here instead: the
//! entries of a Secret, its size, and bcrypt's cost, which doubles the
//! work of every verification with each step.
//!
//! Accepted, as nginx's `auth_basic_user_file` on ingress-nginx's image:
//! bcrypt (`$2y$`, `$2a$`, `$2b$`), Apache's MD5-crypt (`$apr1$`, and
//! `$1$`, the same algorithm under crypt(3)'s name), `{SHA}` (unsalted
//! SHA-1, what `htpasswd -s` writes), `{SSHA}` (salted SHA-1) and
//! `{PLAIN}`. Refused with the line they are on: DES crypt(3) (its eight
//! significant password characters and 12-bit salt are no protection) and
//! the SHA-crypt forms `$5$` / `$6$` (their rounds are a cost teapot does
//! not bound).

use std::fmt;

/// The key of an `auth-file` Secret holding htpasswd lines, and the only
/// key the LB keeps of such a Secret.
pub const AUTH_KEY: &str = "auth";

/// Largest htpasswd text accepted (an `auth-map` counts as the lines it
/// becomes): a thousand bcrypt users with long names fit.
pub const MAX_HTPASSWD_BYTES: usize = 128 * 1024;

/// Most users in one Secret.
pub const MAX_USERS: usize = 1000;

/// Highest bcrypt cost accepted: each step doubles a verification's CPU.
/// 12 is the highest default of the common tools (Python's bcrypt; Apache
/// `htpasswd -B` writes 5, Go's 10), about a quarter of a second of one
/// core per verification; verified credentials are cached, so only a
/// first request or a wrong password pays it.
pub const MAX_BCRYPT_COST: u32 = 12;

/// Lowest bcrypt cost bcrypt defines.
pub const MIN_BCRYPT_COST: u32 = 4;

/// Longest user name (nginx reads the name up to the first `:`).
pub const MAX_USER_LEN: usize = 256;

/// A password hash's form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashKind {
    /// `$2y$NN$` + 22 characters of salt + 31 of hash.
    Bcrypt { cost: u32 },
    /// `$apr1$SALT$HASH` (or `$1$`, `magic` says which).
    Md5Crypt { apr1: bool },
    /// `{SHA}` + base64 of 20 bytes.
    Sha1,
    /// `{SSHA}` + base64 of 20 bytes of digest and the salt.
    Ssha1,
    /// `{PLAIN}` + the password.
    Plain,
    /// An empty hash (`user:`): a user no password signs in as, as nginx
    /// answers 401 for it.
    Locked,
}

/// One user of a Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Entry {
    pub user: String,
    pub hash: String,
    pub kind: HashKind,
}

impl fmt::Debug for Entry {
    // The hash is a secret's value: never in a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("user", &self.user)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// The form of `hash`, or why teapot does not verify passwords against it.
pub fn classify(hash: &str) -> Result<HashKind, String> {
    const B64: fn(u8) -> bool = |b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/';
    if hash.is_empty() {
        return Ok(HashKind::Locked);
    }
    if let Some(rest) = ["$2y$", "$2a$", "$2b$"]
        .iter()
        .find_map(|p| hash.strip_prefix(p))
    {
        let (cost, rest) = rest
            .split_once('$')
            .ok_or("a bcrypt hash has the form $2y$COST$SALTHASH")?;
        let cost: u32 = (cost.len() == 2 && cost.bytes().all(|b| b.is_ascii_digit()))
            .then(|| cost.parse().ok())
            .flatten()
            .ok_or("a bcrypt cost is two digits")?;
        if !(MIN_BCRYPT_COST..=MAX_BCRYPT_COST).contains(&cost) {
            return Err(format!(
                "bcrypt cost {cost} is outside {MIN_BCRYPT_COST} to {MAX_BCRYPT_COST} (each step doubles the CPU of every check; htpasswd -B -C 10 writes cost 10)"
            ));
        }
        if rest.len() != 53 || !rest.bytes().all(B64) {
            return Err("a bcrypt hash has 53 characters after its cost".into());
        }
        return Ok(HashKind::Bcrypt { cost });
    }
    for (magic, apr1) in [("$apr1$", true), ("$1$", false)] {
        if let Some(rest) = hash.strip_prefix(magic) {
            let (salt, digest) = rest
                .split_once('$')
                .ok_or("an MD5-crypt hash has the form $apr1$SALT$HASH")?;
            if salt.is_empty() || salt.len() > 8 || !salt.bytes().all(B64) {
                return Err("an MD5-crypt salt has 1 to 8 characters of [./0-9A-Za-z]".into());
            }
            if digest.len() != 22 || !digest.bytes().all(B64) {
                return Err("an MD5-crypt hash has 22 characters after its salt".into());
            }
            return Ok(HashKind::Md5Crypt { apr1 });
        }
    }
    if let Some(rest) = hash.strip_prefix("{SHA}") {
        return match base64_len(rest) {
            Some(20) => Ok(HashKind::Sha1),
            _ => Err("a {SHA} hash is the base64 of a 20-byte SHA-1 digest".into()),
        };
    }
    if let Some(rest) = hash.strip_prefix("{SSHA}") {
        return match base64_len(rest) {
            Some(n) if n > 20 => Ok(HashKind::Ssha1),
            _ => Err("an {SSHA} hash is the base64 of a SHA-1 digest and its salt".into()),
        };
    }
    if hash.starts_with("{PLAIN}") {
        return Ok(HashKind::Plain);
    }
    if hash.starts_with("$5$") || hash.starts_with("$6$") {
        return Err(
            "SHA-crypt ($5$, $6$) is not served: write the entry with htpasswd -B (bcrypt)".into(),
        );
    }
    if hash.len() == 13 && hash.bytes().all(B64) {
        return Err(
            "DES crypt(3) is not served (it reads 8 characters of the password): write the entry with htpasswd -B (bcrypt)"
                .into(),
        );
    }
    Err(
        "not a password hash teapot verifies: bcrypt ($2y$), apr1 ($apr1$), {SHA}, {SSHA} or {PLAIN}"
            .into(),
    )
}

/// The length of what standard, padded base64 `text` decodes to, when it
/// is such base64.
fn base64_len(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    if b.is_empty() || !b.len().is_multiple_of(4) {
        return None;
    }
    let pad = b.iter().rev().take_while(|c| **c == b'=').count();
    let body = &b[..b.len() - pad];
    let ok = pad <= 2
        && body
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/');
    ok.then(|| b.len() / 4 * 3 - pad)
}

/// Reads an `auth-file` Secret's `auth` value: `user:hash` lines as nginx
/// reads them (a third `:`-field is a comment, `#` starts a comment line,
/// blank lines are skipped, CRLF allowed). The first line of a user
/// decides, as nginx takes the first match. The error names the line.
pub fn parse_file(text: &[u8]) -> Result<Vec<Entry>, String> {
    if text.len() > MAX_HTPASSWD_BYTES {
        return Err(format!(
            "{} bytes, more than the {MAX_HTPASSWD_BYTES} accepted",
            text.len()
        ));
    }
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8 text".to_string())?;
    let mut entries: Vec<Entry> = Vec::new();
    for (n, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |why: String| format!("line {}: {why}", n + 1);
        let (user, rest) = line
            .split_once(':')
            .ok_or_else(|| at("not USER:HASH".into()))?;
        let hash = rest.split_once(':').map_or(rest, |(h, _)| h);
        let entry = entry(user, hash).map_err(at)?;
        if entries.len() == MAX_USERS {
            return Err(at(format!("more than {MAX_USERS} users")));
        }
        if !entries.iter().any(|e| e.user == entry.user) {
            entries.push(entry);
        }
    }
    Ok(entries)
}

/// Reads an `auth-map` Secret's keys and values (users and hashes), in
/// the order given; the error names the user.
pub fn parse_map<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    let mut bytes = 0usize;
    for (user, hash) in pairs {
        bytes += user.len() + hash.len() + 2;
        if bytes > MAX_HTPASSWD_BYTES {
            return Err(format!("more than the {MAX_HTPASSWD_BYTES} bytes accepted"));
        }
        if entries.len() == MAX_USERS {
            return Err(format!("more than {MAX_USERS} users"));
        }
        let hash = std::str::from_utf8(hash).map_err(|_| format!("user {user:?}: not UTF-8"))?;
        let hash = hash.trim_end_matches(['\r', '\n']);
        entries.push(entry(user, hash).map_err(|why| format!("user {user:?}: {why}"))?);
    }
    Ok(entries)
}

/// The htpasswd lines of `entries` (what the agent writes for an
/// `auth-map`, so the LB reads one form).
pub fn to_file(entries: &[Entry]) -> String {
    entries
        .iter()
        .map(|e| format!("{}:{}\n", e.user, e.hash))
        .collect()
}

fn entry(user: &str, hash: &str) -> Result<Entry, String> {
    if user.is_empty() || user.len() > MAX_USER_LEN {
        return Err(format!("a user name has 1 to {MAX_USER_LEN} characters"));
    }
    if user.chars().any(|c| c.is_control() || c == ':') {
        return Err("a user name has no ':' or control characters".into());
    }
    let kind = classify(hash)?;
    Ok(Entry {
        user: user.to_string(),
        hash: hash.to_string(),
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BCRYPT: &str = "$2y$05$WvD7gZ4VeRFMxZcjx6m1a.0NZ7HTAGtCA0zH8Ss6eHptLVqcx1cxS";

    #[test]
    fn each_served_form_is_recognised() {
        assert_eq!(classify(BCRYPT), Ok(HashKind::Bcrypt { cost: 5 }));
        assert_eq!(
            classify("$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/"),
            Ok(HashKind::Md5Crypt { apr1: true })
        );
        assert_eq!(
            classify("$1$saltsalt$qjXMvbEw8oaL.CzflDugX/"),
            Ok(HashKind::Md5Crypt { apr1: false })
        );
        assert_eq!(
            classify("{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M="),
            Ok(HashKind::Sha1)
        );
        assert_eq!(
            classify("{SSHA}MTIzNDU2Nzg5MDEyMzQ1Njc4OTBzYWx0"),
            Ok(HashKind::Ssha1)
        );
        assert_eq!(classify("{PLAIN}secret"), Ok(HashKind::Plain));
    }

    /// A hostile Secret: bcrypt's cost past the bound (31 would be hours
    /// of a core per check), DES and SHA-crypt, garbage: each refused with
    /// its reason, before anything is hashed.
    #[test]
    fn costly_and_weak_forms_are_refused() {
        let cost31 = BCRYPT.replace("$05$", "$31$");
        assert!(classify(&cost31).unwrap_err().contains("cost 31"));
        let cost13 = BCRYPT.replace("$05$", "$13$");
        assert!(classify(&cost13).is_err());
        assert!(classify(&BCRYPT.replace("$05$", "$12$")).is_ok());
        assert!(classify("abJnggxhB/yWI").unwrap_err().contains("DES"));
        assert!(classify("$6$salt$abc").unwrap_err().contains("SHA-crypt"));
        assert!(classify("$2x$05$abc").is_err());
        assert!(classify("{SHA}short").is_err());
        assert!(classify("hunter2").is_err());
    }

    #[test]
    fn a_file_reads_as_nginx_reads_it() {
        let text = format!(
            "# admins\r\nalice:{BCRYPT}:comment\r\n\nbob:{{PLAIN}}pw\nalice:{{PLAIN}}second\n"
        );
        let entries = parse_file(text.as_bytes()).unwrap();
        let users: Vec<_> = entries.iter().map(|e| (&e.user[..], e.kind)).collect();
        assert_eq!(
            users,
            [
                ("alice", HashKind::Bcrypt { cost: 5 }),
                ("bob", HashKind::Plain)
            ]
        );
        assert_eq!(entries[0].hash, BCRYPT);
        let bad = parse_file(b"alice:{PLAIN}x\nbob:abJnggxhB/yWI\n").unwrap_err();
        assert!(bad.starts_with("line 2: DES"), "{bad}");
        assert!(parse_file(b"nocolon\n").unwrap_err().starts_with("line 1"));
        // `user:` with nothing after it is a user no password signs in as.
        let locked = parse_file(b"foo:\n").unwrap();
        assert_eq!(locked[0].kind, HashKind::Locked);
        // The hash never shows in a debug print.
        assert!(!format!("{:?}", entries[0]).contains("WvD7"));
    }

    /// Entries and bytes are bounded: a Secret past either is refused
    /// whole, before any line past the bound is read.
    #[test]
    fn entries_and_size_are_bounded() {
        let many: String = (0..=MAX_USERS)
            .map(|i| format!("u{i}:{{PLAIN}}x\n"))
            .collect();
        assert!(
            parse_file(many.as_bytes())
                .unwrap_err()
                .contains("more than 1000 users")
        );
        let big = vec![b'#'; MAX_HTPASSWD_BYTES + 1];
        assert!(parse_file(&big).unwrap_err().contains("bytes"));
        let names: Vec<String> = (0..=MAX_USERS).map(|i| format!("u{i}")).collect();
        let map = names.iter().map(|n| (n.as_str(), &b"{PLAIN}x"[..]));
        assert!(parse_map(map).unwrap_err().contains("users"));
    }

    #[test]
    fn a_map_becomes_lines() {
        let entries =
            parse_map([("alice", BCRYPT.as_bytes()), ("bob", &b"{PLAIN}pw\n"[..])]).unwrap();
        assert_eq!(
            to_file(&entries),
            format!("alice:{BCRYPT}\nbob:{{PLAIN}}pw\n")
        );
        assert!(
            parse_map([("eve", &b"plain"[..])])
                .unwrap_err()
                .starts_with("user \"eve\"")
        );
    }
}
