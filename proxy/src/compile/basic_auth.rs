//! Basic authentication (ingress-nginx's `auth-type: basic`, a
//! RouteTrafficPolicy's `basicAuth`): the users of an htpasswd Secret read
//! once per compile into credentials the request path verifies
//! (crate::plane::traffic::basic_auth), with the realm's answer field made
//! once. A setting that cannot be served as asked (its Secret missing, of
//! another tenant's namespace, a line past the bounds of
//! teapot_api::htpasswd) is compiled as refused: an Ingress with it is not
//! routed (as with client certificates it cannot apply), a
//! RouteTrafficPolicy's routes answer 503 (as ingress-nginx denies a
//! location whose `auth-secret` it cannot read); never served
//! unauthenticated.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use base64::Engine;
use teapot_api::htpasswd::{self, AUTH_KEY, Entry, HashKind};
use teapot_model::store::{FastHashMap, NsRef, Store};

use crate::live::basic_auth::TenantAuth;

/// A route's basic authentication.
#[derive(Debug)]
pub struct BasicAuth {
    /// `WWW-Authenticate` of its 401: `Basic realm="..."`.
    pub challenge: Arc<str>,
    /// The users, by name.
    pub users: FastHashMap<Box<str>, Credential>,
    /// Identifies the users and hashes, so a changed Secret's cached
    /// verifications are not found (crate::live::basic_auth).
    pub id: u64,
    /// The owner's cache, failure counts and hashing slots (a tenant
    /// cluster, or "" for the operator namespaces).
    pub tenant: Arc<TenantAuth>,
    /// Why the setting cannot be served: every request gets 503.
    pub refused: Option<String>,
    /// The annotations ask for what ingress-nginx would serve open (a
    /// companion without `auth-type`, `auth-type` without its Secret, a
    /// tenant's Secret of another namespace): the Ingress is not routed.
    pub unroute: bool,
}

/// One user's stored password, decoded once.
pub enum Credential {
    /// The hash as written (`$2y$NN$...`), for the bcrypt crate.
    Bcrypt(String),
    /// `$apr1$` or `$1$`: the magic, the salt and the 22-character hash.
    Md5Crypt {
        magic: &'static str,
        salt: String,
        hash: String,
    },
    Sha1([u8; 20]),
    Ssha1 {
        digest: [u8; 20],
        salt: Vec<u8>,
    },
    Plain(Vec<u8>),
    /// An empty hash: no password matches.
    Locked,
}

impl std::fmt::Debug for Credential {
    // A stored password is a secret's value: never in a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credential::Bcrypt(_) => "Bcrypt",
            Credential::Md5Crypt { .. } => "Md5Crypt",
            Credential::Sha1(_) => "Sha1",
            Credential::Ssha1 { .. } => "Ssha1",
            Credential::Plain(_) => "Plain",
            Credential::Locked => "Locked",
        })
    }
}

impl Credential {
    fn new(entry: &Entry) -> Option<Credential> {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.decode(s).ok();
        Some(match entry.kind {
            HashKind::Bcrypt { .. } => Credential::Bcrypt(entry.hash.clone()),
            HashKind::Md5Crypt { apr1 } => {
                let magic = if apr1 { "$apr1$" } else { "$1$" };
                let (salt, hash) = entry.hash.strip_prefix(magic)?.split_once('$')?;
                Credential::Md5Crypt {
                    magic,
                    salt: salt.to_string(),
                    hash: hash.to_string(),
                }
            }
            HashKind::Sha1 => {
                Credential::Sha1(b64(entry.hash.strip_prefix("{SHA}")?)?.try_into().ok()?)
            }
            HashKind::Ssha1 => {
                let raw = b64(entry.hash.strip_prefix("{SSHA}")?)?;
                let (digest, salt) = raw.split_at_checked(20)?;
                Credential::Ssha1 {
                    digest: digest.try_into().ok()?,
                    salt: salt.to_vec(),
                }
            }
            HashKind::Plain => {
                Credential::Plain(entry.hash.strip_prefix("{PLAIN}")?.as_bytes().to_vec())
            }
            HashKind::Locked => Credential::Locked,
        })
    }

    /// Whether checking a password costs enough to go to the hashing
    /// pool (bcrypt, MD5-crypt's thousand rounds) rather than being done
    /// in place (one SHA-1, a comparison).
    pub fn costly(&self) -> bool {
        matches!(self, Credential::Bcrypt(_) | Credential::Md5Crypt { .. })
    }

    /// Whether `password` is this user's; every comparison of what the
    /// password gives with what is stored takes the same time whatever
    /// they share.
    pub fn verify(&self, password: &[u8]) -> bool {
        match self {
            Credential::Bcrypt(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            Credential::Md5Crypt { magic, salt, hash } => constant_time_eq(
                md5_crypt(password, salt.as_bytes(), magic).as_bytes(),
                hash.as_bytes(),
            ),
            Credential::Sha1(digest) => {
                let got = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, password);
                constant_time_eq(got.as_ref(), digest)
            }
            Credential::Ssha1 { digest, salt } => {
                let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
                ctx.update(password);
                ctx.update(salt);
                constant_time_eq(ctx.finish().as_ref(), digest)
            }
            Credential::Plain(plain) => constant_time_eq(password, plain),
            Credential::Locked => false,
        }
    }
}

/// Equal lengths compared in time that depends on the length only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Poul-Henning Kamp's MD5-crypt, as Apache's `$apr1$` and crypt(3)'s
/// `$1$` write it (they differ in `magic` only): the 22 characters after
/// the salt.
pub fn md5_crypt(password: &[u8], salt: &[u8], magic: &str) -> String {
    use md5::{Digest, Md5};
    let salt = &salt[..salt.len().min(8)];
    let mut alt = Md5::new();
    alt.update(password);
    alt.update(salt);
    alt.update(password);
    let alt = alt.finalize();
    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(magic.as_bytes());
    ctx.update(salt);
    let mut left = password.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    let mut i = password.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        i >>= 1;
    }
    let mut fin = ctx.finalize();
    for round in 0..1000 {
        let mut ctx = Md5::new();
        if round & 1 == 1 {
            ctx.update(password);
        } else {
            ctx.update(fin);
        }
        if round % 3 != 0 {
            ctx.update(salt);
        }
        if round % 7 != 0 {
            ctx.update(password);
        }
        if round & 1 == 1 {
            ctx.update(fin);
        } else {
            ctx.update(password);
        }
        fin = ctx.finalize();
    }
    const ITOA64: &[u8] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(22);
    let mut to64 = |mut v: u32, n: usize| {
        for _ in 0..n {
            out.push(ITOA64[(v & 0x3f) as usize] as char);
            v >>= 6;
        }
    };
    let f = |i: usize| u32::from(fin[i]);
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        to64((f(a) << 16) | (f(b) << 8) | f(c), 4);
    }
    to64(f(11), 2);
    out
}

/// `WWW-Authenticate` for `realm`: a quoted string, `"` and `\` escaped.
pub fn challenge(realm: &str) -> Arc<str> {
    let mut out = String::with_capacity(realm.len() + 16);
    out.push_str("Basic realm=\"");
    for c in realm.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Arc::from(out)
}

impl BasicAuth {
    /// The setting of users `entries` (already within the bounds).
    pub fn new(entries: &[Entry], realm: &str, owner: &str) -> BasicAuth {
        let mut users = FastHashMap::default();
        let mut id = std::hash::DefaultHasher::new();
        realm.hash(&mut id);
        for entry in entries {
            // The first line of a user decides, as nginx reads the file.
            if users.contains_key(entry.user.as_str()) {
                continue;
            }
            // htpasswd::classify accepted the form; a value that still
            // does not decode leaves the user unable to sign in.
            if let Some(credential) = Credential::new(entry) {
                (&entry.user, &entry.hash).hash(&mut id);
                users.insert(Box::from(entry.user.as_str()), credential);
            }
        }
        BasicAuth {
            challenge: challenge(realm),
            users,
            id: id.finish(),
            tenant: crate::live::basic_auth::tenant(owner),
            refused: None,
            unroute: false,
        }
    }

    /// A setting that cannot be served: every request gets 503.
    pub fn refused(why: String, realm: &str, owner: &str) -> BasicAuth {
        BasicAuth {
            refused: Some(why),
            ..BasicAuth::new(&[], realm, owner)
        }
    }
}

/// Reads the users of Secret `(namespace, name)` from the store: its
/// `auth` lines (an `auth-map` is stored as those lines: the agent writes
/// a tenant's so, the store keeps an operator's so). `what` names the
/// setting in the error.
pub fn users(
    store: &Store,
    (namespace, name): (&str, &str),
    what: &str,
) -> Result<Vec<Entry>, String> {
    let key = NsRef { namespace, name };
    let secret = store.ca_secrets.get(&key).map(|s| &s.object);
    let data = secret.and_then(|s| s.data.as_ref());
    match data.and_then(|d| d.get(AUTH_KEY)) {
        Some(auth) => htpasswd::parse_file(&auth.0)
            .map_err(|why| format!("{what}: Secret {namespace}/{name} key {AUTH_KEY}: {why}")),
        None => Err(format!(
            "{what}: Secret {namespace}/{name} not found or without a key {AUTH_KEY} (htpasswd lines)"
        )),
    }
}

/// An Ingress's basic authentication: `None` when it asks for none; a
/// refused setting (why in [`BasicAuth::refused`]) when it cannot be
/// served as asked. Annotations ingress-nginx would serve open keep the
/// Ingress unrouted ([`BasicAuth::unroute`], crate::compile::ingress), as
/// client certificates it cannot apply do; a users' Secret that is
/// missing or unreadable makes its routes answer 503, ingress-nginx's
/// denied location, and is reported in `problems`.
pub fn of_ingress(
    store: &Store,
    ingress: &k8s_openapi::api::networking::v1::Ingress,
    tenant: Option<&str>,
    problems: &mut Vec<String>,
) -> Option<Arc<BasicAuth>> {
    use teapot_api::annotations::{AUTH_SECRET, BasicAuthAnnotations};
    let field = |key: &str| format!("metadata.annotations[{key:?}]");
    let namespace = ingress.metadata.namespace.as_deref().unwrap_or("");
    let owner = tenant.unwrap_or("");
    let annotations = ingress.metadata.annotations.iter().flatten();
    let asked = match BasicAuthAnnotations::read(namespace, annotations) {
        Ok(None) => return None,
        Ok(Some(asked)) => asked,
        Err(errors) => {
            let why: Vec<String> = errors
                .into_iter()
                .map(|(key, why)| format!("{}: {why}", field(key)))
                .collect();
            return Some(Arc::new(BasicAuth {
                unroute: true,
                ..BasicAuth::refused(why.join("; "), "", owner)
            }));
        }
    };
    let (ns, name) = (asked.secret.0.as_str(), asked.secret.1.as_str());
    // A tenant's Ingress reads its own namespace's users only.
    if tenant.is_some() && ns != namespace {
        let why = format!(
            "{}: Secret {ns}/{name} is not in the Ingress's namespace {namespace}",
            field(AUTH_SECRET)
        );
        return Some(Arc::new(BasicAuth {
            unroute: true,
            ..BasicAuth::refused(why, &asked.realm, owner)
        }));
    }
    Some(Arc::new(
        match users(store, (ns, name), &field(AUTH_SECRET)) {
            Ok(entries) => BasicAuth::new(&entries, &asked.realm, owner),
            Err(why) => {
                problems.push(format!("{why}; its routes answer 503"));
                BasicAuth::refused(why, &asked.realm, owner)
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(user: &str, hash: &str) -> Entry {
        Entry {
            user: user.into(),
            hash: hash.into(),
            kind: htpasswd::classify(hash).unwrap(),
        }
    }

    /// Each served form against a hash made by its usual tool: bcrypt by
    /// the bcrypt crate (htpasswd -B's algorithm), `$apr1$` and `$1$` by
    /// `openssl passwd -apr1` / `-1` (recorded), `{SHA}` as htpasswd -s.
    #[test]
    fn each_form_verifies_its_password_and_no_other() {
        let bcrypt = bcrypt::hash("s3cret", 4).unwrap().replace("$2b$", "$2y$");
        let cases = [
            bcrypt.as_str(),
            // openssl passwd -apr1 -salt 8sFt66rZ s3cret
            "$apr1$8sFt66rZ$5f4dG6uJPUDcCdyvCGEji1",
            // openssl passwd -1 -salt 8sFt66rZ s3cret
            "$1$8sFt66rZ$Fvr4AshJaMzR/KJPDnZkE0",
            // printf s3cret | openssl dgst -sha1 -binary | base64
            "{SHA}/vNB+F2HQ559kaLUZbmHHvZrXpg=",
            "{PLAIN}s3cret",
        ];
        for hash in cases {
            let c = Credential::new(&entry("alice", hash)).unwrap();
            assert!(c.verify(b"s3cret"), "{hash}");
            assert!(!c.verify(b"s3cret "), "{hash}");
            assert!(!c.verify(b""), "{hash}");
        }
        // {SSHA}: SHA-1 of the password and the salt, then the salt.
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
        ctx.update(b"s3cret");
        ctx.update(b"pepper");
        let mut raw = ctx.finish().as_ref().to_vec();
        raw.extend_from_slice(b"pepper");
        let ssha = format!(
            "{{SSHA}}{}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        );
        let c = Credential::new(&entry("alice", &ssha)).unwrap();
        assert!(c.verify(b"s3cret") && !c.verify(b"pepper"));
        // `alice:` (an empty hash): no password, the empty one included.
        let locked = Credential::new(&entry("alice", "")).unwrap();
        assert!(!locked.verify(b"") && !locked.verify(b"s3cret") && !locked.costly());
    }

    #[test]
    fn the_realm_is_a_quoted_string() {
        assert_eq!(&*challenge(""), "Basic realm=\"\"");
        assert_eq!(
            &*challenge("Staff \"only\" \\o/"),
            "Basic realm=\"Staff \\\"only\\\" \\\\o/\""
        );
    }

    /// A changed password is another setting: its id differs, so a
    /// verification cached under the old one is not found.
    #[test]
    fn the_id_follows_the_users() {
        let a = BasicAuth::new(&[entry("alice", "{PLAIN}a")], "r", "");
        let b = BasicAuth::new(&[entry("alice", "{PLAIN}b")], "r", "");
        let a2 = BasicAuth::new(&[entry("alice", "{PLAIN}a")], "r", "");
        assert_ne!(a.id, b.id);
        assert_eq!(a.id, a2.id);
        assert!(!format!("{:?}", a.users).contains("{PLAIN}"));
    }
}
