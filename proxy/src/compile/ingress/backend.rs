//! How an Ingress's backends are spoken to: ingress-nginx's
//! `backend-protocol` and `proxy-ssl-*` annotations, read once per
//! Ingress into a copy of the shared upstream.

use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use teapot_model::store::{NsName, NsRef, Store};

use crate::compile::backends::Resolver;
use crate::compile::upstream::{Protocol, Upstream};
use crate::live::upstream_tls::BackendTls;

/// How an Ingress's backends are spoken to: ingress-nginx's
/// `backend-protocol` and `proxy-ssl-*`, read once per Ingress
/// (docs/migrate-from-ingress-nginx.md). HTTP, the default, leaves the
/// shared upstream as it is; every other protocol gets the Ingress its
/// own copy of it ([`Upstream::speaking`]). Settings that cannot be used
/// (a Secret missing or of another namespace, a bad CA, verification
/// without one) are reported naming the Ingress and the annotation, and
/// its routes answer 503: nothing is sent unverified.
pub(super) struct BackendSpeech {
    pub(super) ingress: String,
    pub(super) namespace: String,
    pub(super) protocol: &'static str,
    /// `Err`: why TLS to the backends cannot be set up.
    pub(super) tls: Result<TlsAsked, String>,
    /// Upstreams already made, by the shared upstream they copy.
    pub(super) made: Vec<(Arc<Upstream>, Arc<Upstream>)>,
    pub(super) problems: Vec<String>,
}

/// The TLS settings an Ingress asks for, less the verified name (the
/// Service's by default).
pub(super) struct TlsAsked {
    pub(super) name: Option<String>,
    pub(super) sni: bool,
    pub(super) verify: Option<Vec<u8>>,
    pub(super) depth: u32,
    pub(super) client_cert: Option<Arc<rustls::sign::CertifiedKey>>,
    pub(super) tls12_suites: Option<Vec<u16>>,
    pub(super) versions: Option<Vec<u16>>,
}

pub(super) const BACKEND_PROTOCOL: &str = "nginx.ingress.kubernetes.io/backend-protocol";
pub(super) const PROXY_SSL_SECRET: &str = "nginx.ingress.kubernetes.io/proxy-ssl-secret";
pub(super) const PROXY_SSL_VERIFY: &str = "nginx.ingress.kubernetes.io/proxy-ssl-verify";
pub(super) const PROXY_SSL_NAME: &str = "nginx.ingress.kubernetes.io/proxy-ssl-name";
pub(super) const PROXY_SSL_SERVER_NAME: &str = "nginx.ingress.kubernetes.io/proxy-ssl-server-name";
pub(super) const PROXY_SSL_VERIFY_DEPTH: &str =
    "nginx.ingress.kubernetes.io/proxy-ssl-verify-depth";
pub(super) const PROXY_SSL_CIPHERS: &str = "nginx.ingress.kubernetes.io/proxy-ssl-ciphers";
pub(super) const PROXY_SSL_PROTOCOLS: &str = "nginx.ingress.kubernetes.io/proxy-ssl-protocols";

impl BackendSpeech {
    pub(super) fn read(
        store: &Store,
        id: &NsName,
        ingress: &Ingress,
        tenant: bool,
    ) -> BackendSpeech {
        use teapot_api::annotations::{self, AnnotationValue, ObjectKind};
        let annotations = ingress.metadata.annotations.as_ref();
        // A value that does not parse is reported with the Ingress's other
        // annotations (crate::compile::traffic); the default applies here.
        let value = |key: &str| {
            annotations
                .and_then(|a| a.get(key))
                .and_then(|v| annotations::parse(ObjectKind::Ingress, key, v).ok())
        };
        let word = |key: &str| match value(key) {
            Some(AnnotationValue::Word(w)) => Some(w),
            _ => None,
        };
        let text = |key: &str| match value(key) {
            Some(AnnotationValue::Text(t)) => Some(t.trim().to_string()),
            _ => None,
        };
        let ingress_name = format!("{}/{}", id.namespace, id.name);
        let protocol = word(BACKEND_PROTOCOL).unwrap_or("HTTP");
        let tls = if matches!(protocol, "HTTPS" | "GRPCS") {
            TlsAsked::read(store, id, &ingress_name, tenant, text, word, value)
        } else {
            Err(String::new())
        };
        let mut problems = Vec::new();
        if let Err(why) = &tls
            && !why.is_empty()
        {
            problems.push(format!("{why}; the Ingress's routes answer 503"));
        }
        BackendSpeech {
            ingress: ingress_name,
            namespace: id.namespace.clone(),
            protocol,
            tls,
            made: Vec::new(),
            problems,
        }
    }

    /// `upstream` (the shared one of `backend`) as this Ingress speaks to
    /// it.
    pub(super) fn speak(
        &mut self,
        resolver: &Resolver<'_>,
        upstream: Arc<Upstream>,
        backend: &k8s_openapi::api::networking::v1::IngressBackend,
    ) -> Arc<Upstream> {
        if self.protocol == "HTTP" {
            return upstream;
        }
        if let Some((_, made)) = self.made.iter().find(|(u, _)| Arc::ptr_eq(u, &upstream)) {
            return made.clone();
        }
        let made = match (self.protocol, &self.tls) {
            ("GRPC" | "H2C", _) => upstream.speaking(Protocol::H2c),
            (_, Err(why)) => upstream.unusable(format!("{}: {why}", self.ingress)),
            (protocol, Ok(asked)) => {
                let service = backend.service.as_ref().map_or("", |s| s.name.as_str());
                let settings = BackendTls {
                    h2: protocol == "GRPCS",
                    name: asked
                        .name
                        .clone()
                        .unwrap_or_else(|| format!("{service}.{}.svc", self.namespace)),
                    sni: asked.sni,
                    verify: asked.verify.clone(),
                    depth: asked.depth,
                    client_cert: asked.client_cert.clone(),
                    system_roots: false,
                    subject_alt_names: Vec::new(),
                    tls12_suites: asked.tls12_suites.clone(),
                    versions: asked.versions.clone(),
                };
                match resolver.registry().tls(settings) {
                    Ok(tls) => upstream.speaking(Protocol::Tls(tls)),
                    Err(e) => {
                        let why = format!("{PROXY_SSL_NAME} or {PROXY_SSL_SECRET}: {e}");
                        let problem = format!("{why}; the Ingress's routes answer 503");
                        if !self.problems.contains(&problem) {
                            self.problems.push(problem);
                        }
                        upstream.unusable(format!("{}: {why}", self.ingress))
                    }
                }
            }
        };
        let made = Arc::new(made);
        self.made.push((upstream, made.clone()));
        made
    }
}

impl TlsAsked {
    pub(super) fn read(
        store: &Store,
        id: &NsName,
        ingress: &str,
        tenant: bool,
        text: impl Fn(&str) -> Option<String>,
        word: impl Fn(&str) -> Option<&'static str>,
        value: impl Fn(&str) -> Option<teapot_api::annotations::AnnotationValue>,
    ) -> Result<TlsAsked, String> {
        let verify = word(PROXY_SSL_VERIFY) == Some("on");
        let secret = match text(PROXY_SSL_SECRET) {
            None if verify => {
                return Err(format!(
                    "{PROXY_SSL_VERIFY}: on needs {PROXY_SSL_SECRET} with a ca.crt (Ingress {ingress})"
                ));
            }
            None => None,
            Some(reference) => {
                let (namespace, name) =
                    teapot_api::names::namespaced_reference(&reference, &id.namespace);
                // A tenant's Ingress reads its own namespace's Secrets only.
                if tenant && namespace != id.namespace {
                    return Err(format!(
                        "{PROXY_SSL_SECRET}: Secret {namespace}/{name} is not in the Ingress's namespace {} (Ingress {ingress})",
                        id.namespace
                    ));
                }
                let id = NsRef { namespace, name };
                // A kubernetes.io/tls Secret: a client certificate, and
                // maybe a ca.crt; a CA Secret: ca.crt alone, verification
                // without a client certificate.
                match (store.secrets.get(&id), store.ca_secrets.get(&id)) {
                    (Some(tls), _) => Some(ProxySslSecret::Tls(&tls.object)),
                    (None, Some(ca)) => Some(ProxySslSecret::Ca(&ca.object)),
                    (None, None) => {
                        return Err(format!(
                            "{PROXY_SSL_SECRET}: Secret {namespace}/{name} not found or neither a usable kubernetes.io/tls Secret nor one with a ca.crt (Ingress {ingress})"
                        ));
                    }
                }
            }
        };
        let ca = secret.and_then(|s| match s {
            ProxySslSecret::Tls(tls) => teapot_api::admission::tls_secret_data(&tls.source)
                .ok()
                .and_then(|d| d.ca)
                .map(<[u8]>::to_vec),
            ProxySslSecret::Ca(ca) => ca
                .data
                .as_ref()
                .and_then(|d| d.get(teapot_api::admission::CA_SECRET_KEY))
                .map(|v| v.0.clone()),
        });
        let verify = match (verify, ca) {
            (false, _) => None,
            (true, Some(ca)) => Some(ca),
            (true, None) => {
                return Err(format!(
                    "{PROXY_SSL_VERIFY}: on, but {PROXY_SSL_SECRET}'s Secret has no ca.crt (Ingress {ingress})"
                ));
            }
        };
        let depth = match value(PROXY_SSL_VERIFY_DEPTH) {
            Some(teapot_api::annotations::AnnotationValue::Count(n)) => n,
            _ => 1,
        };
        let tls12_suites = text(PROXY_SSL_CIPHERS)
            .map(|list| tls12_suites(&list))
            .transpose()
            .map_err(|why| format!("{PROXY_SSL_CIPHERS}: {why} (Ingress {ingress})"))?;
        let versions = text(PROXY_SSL_PROTOCOLS)
            .map(|list| tls_versions(&list))
            .transpose()
            .map_err(|why| format!("{PROXY_SSL_PROTOCOLS}: {why} (Ingress {ingress})"))?;
        if versions.as_deref() == Some(&[TLS12][..])
            && tls12_suites.as_ref().is_some_and(Vec::is_empty)
        {
            return Err(format!(
                "{PROXY_SSL_CIPHERS} leaves no TLS 1.2 cipher suite and {PROXY_SSL_PROTOCOLS} allows only TLSv1.2 (Ingress {ingress})"
            ));
        }
        Ok(TlsAsked {
            tls12_suites,
            versions,
            name: text(PROXY_SSL_NAME).filter(|n| !n.is_empty()),
            sni: word(PROXY_SSL_SERVER_NAME) == Some("on"),
            verify,
            depth,
            client_cert: secret.and_then(|s| match s {
                ProxySslSecret::Tls(tls) => Some(tls.certificate.key.clone()),
                ProxySslSecret::Ca(_) => None,
            }),
        })
    }
}

/// The Secret `proxy-ssl-secret` names, of either shape the store keeps.
#[derive(Clone, Copy)]
pub(super) enum ProxySslSecret<'s> {
    Tls(&'s teapot_model::store::TlsSecret),
    Ca(&'s k8s_openapi::api::core::v1::Secret),
}

const TLS12: u16 = 0x0303;
const TLS13: u16 = 0x0304;

/// The TLS 1.2 suites rustls has: OpenSSL's name, the IANA number, and
/// the OpenSSL aliases that select it (`HIGH`, `AESGCM`, `aECDSA`...).
const RUSTLS_TLS12: &[(&str, u16, &[&str])] = &[
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        0xc02c,
        &["AES", "AESGCM", "AES256", "aECDSA", "ECDSA", "SHA384"],
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        0xc02b,
        &["AES", "AESGCM", "AES128", "aECDSA", "ECDSA", "SHA256"],
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        0xcca9,
        &["CHACHA20", "aECDSA", "ECDSA", "SHA256"],
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        0xc030,
        &["AES", "AESGCM", "AES256", "aRSA", "SHA384"],
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        0xc02f,
        &["AES", "AESGCM", "AES128", "aRSA", "SHA256"],
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        0xcca8,
        &["CHACHA20", "aRSA", "SHA256"],
    ),
];

/// Aliases every suite rustls has belongs to.
const ALL_OF_THEM: &[&str] = &[
    "ALL", "DEFAULT", "HIGH", "ECDHE", "EECDH", "kECDHE", "kEECDH", "AEAD", "TLSv1.2", "SSLv3",
];

/// `proxy-ssl-ciphers` (an OpenSSL cipher list, as nginx's
/// `proxy_ssl_ciphers`) as the TLS 1.2 suites rustls offers, in the
/// list's order: `NAME` or an alias adds, `!NAME` and `-NAME` take out
/// (`!` for good), `+NAME` moves to the end, `@STRENGTH`-style commands
/// are ignored. A name added that selects no suite rustls has (`DHE-RSA-
/// AES256-GCM-SHA384`, `MEDIUM`, `3DES`) is refused by name: teapot would
/// otherwise offer something else than the list says. Taking out a name
/// rustls lacks (`!aNULL`, `!MD5`) changes nothing and is accepted. At
/// most 64 entries of at most 64 bytes.
pub(super) fn tls12_suites(list: &str) -> Result<Vec<u16>, String> {
    let matches = |word: &str| -> Vec<u16> {
        RUSTLS_TLS12
            .iter()
            .filter(|(name, _, aliases)| {
                *name == word || aliases.contains(&word) || ALL_OF_THEM.contains(&word)
            })
            .map(|(_, id, _)| *id)
            .collect()
    };
    let mut chosen: Vec<u16> = Vec::new();
    let mut banned: Vec<u16> = Vec::new();
    let entries: Vec<&str> = list
        .split([':', ',', ' '])
        .filter(|e| !e.is_empty())
        .collect();
    if entries.len() > 64 {
        return Err(format!("{} entries; at most 64", entries.len()));
    }
    for entry in entries {
        if entry.len() > 64 {
            return Err(format!("an entry of {} bytes; at most 64", entry.len()));
        }
        if entry.starts_with('@') {
            continue;
        }
        // `A+B`: the suites both select.
        let select = |words: &str| -> Vec<u16> {
            let mut parts = words.split('+').filter(|w| !w.is_empty());
            let first = parts.next().map(matches).unwrap_or_default();
            parts.fold(first, |acc, w| {
                let m = matches(w);
                acc.into_iter().filter(|id| m.contains(id)).collect()
            })
        };
        match entry.as_bytes()[0] {
            b'!' => banned.extend(select(&entry[1..])),
            b'-' => {
                let out = select(&entry[1..]);
                chosen.retain(|id| !out.contains(id));
            }
            b'+' => {
                let moved = select(&entry[1..]);
                let (back, mut front): (Vec<u16>, Vec<u16>) =
                    chosen.iter().partition(|id| moved.contains(id));
                front.extend(back);
                chosen = front;
            }
            _ => {
                let added = select(entry);
                if added.is_empty() {
                    let known: Vec<&str> = RUSTLS_TLS12.iter().map(|(n, _, _)| *n).collect();
                    return Err(format!(
                        "{entry:?} names no TLS 1.2 cipher suite teapot's TLS library (rustls) has; it has {}",
                        known.join(", ")
                    ));
                }
                for id in added {
                    if !chosen.contains(&id) {
                        chosen.push(id);
                    }
                }
            }
        }
    }
    chosen.retain(|id| !banned.contains(id));
    Ok(chosen)
}

/// `proxy-ssl-protocols` (nginx's `proxy_ssl_protocols`: `TLSv1.2
/// TLSv1.3`) as the versions rustls offers. rustls has no SSLv2, SSLv3,
/// TLSv1 or TLSv1.1: naming one is refused, as is a list naming none.
pub(super) fn tls_versions(list: &str) -> Result<Vec<u16>, String> {
    let mut versions = Vec::new();
    for word in list.split_whitespace() {
        let version = match word {
            "TLSv1.2" => TLS12,
            "TLSv1.3" => TLS13,
            "SSLv2" | "SSLv3" | "TLSv1" | "TLSv1.1" => {
                return Err(format!(
                    "{word} is not offered by teapot's TLS library (rustls), which has TLSv1.2 and TLSv1.3 only"
                ));
            }
            _ => {
                let shown: String = word.chars().take(32).collect();
                return Err(format!(
                    "{shown:?} is not a protocol; TLSv1.2 and TLSv1.3 are"
                ));
            }
        };
        if !versions.contains(&version) {
            versions.push(version);
        }
    }
    if versions.is_empty() {
        return Err("names no protocol; TLSv1.2 and TLSv1.3 are".to_string());
    }
    Ok(versions)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OpenSSL's list syntax over the suites rustls has: upstream's case
    /// `HIGH:!AES` leaves the two ChaCha20 suites; a suite rustls lacks is
    /// refused by name, taking one out is not.
    #[test]
    fn cipher_lists_select_what_openssl_would_among_rustls_suites() {
        assert_eq!(tls12_suites("HIGH:!AES").unwrap(), vec![0xcca9, 0xcca8]);
        assert_eq!(
            tls12_suites("ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384").unwrap(),
            vec![0xc02f, 0xc02c]
        );
        assert_eq!(
            tls12_suites("HIGH:!aNULL:!MD5:-aRSA").unwrap(),
            vec![0xc02c, 0xc02b, 0xcca9]
        );
        assert_eq!(
            tls12_suites("ECDHE+AESGCM+aRSA").unwrap(),
            vec![0xc030, 0xc02f]
        );
        assert_eq!(
            tls12_suites("CHACHA20:AES:+CHACHA20").unwrap()[..2],
            [0xc02c, 0xc02b]
        );
        let lacking =
            tls12_suites("ECDHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384").unwrap_err();
        assert!(lacking.contains("DHE-RSA-AES256-GCM-SHA384"), "{lacking}");
        assert!(tls12_suites("3DES").is_err());
        assert!(tls12_suites(&"HIGH:".repeat(65)).is_err());
        assert!(tls12_suites(&"A".repeat(65)).is_err());
    }

    #[test]
    fn protocols_are_the_two_rustls_has() {
        assert_eq!(tls_versions("TLSv1.2 TLSv1.3").unwrap(), vec![TLS12, TLS13]);
        assert_eq!(tls_versions("TLSv1.3").unwrap(), vec![TLS13]);
        assert!(
            tls_versions("TLSv1 TLSv1.2")
                .unwrap_err()
                .contains("TLSv1 is not offered")
        );
        assert!(tls_versions("TLSv9").is_err());
        assert!(tls_versions("").is_err());
    }
}
