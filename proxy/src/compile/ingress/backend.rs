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
}

pub(super) const BACKEND_PROTOCOL: &str = "nginx.ingress.kubernetes.io/backend-protocol";
pub(super) const PROXY_SSL_SECRET: &str = "nginx.ingress.kubernetes.io/proxy-ssl-secret";
pub(super) const PROXY_SSL_VERIFY: &str = "nginx.ingress.kubernetes.io/proxy-ssl-verify";
pub(super) const PROXY_SSL_NAME: &str = "nginx.ingress.kubernetes.io/proxy-ssl-name";
pub(super) const PROXY_SSL_SERVER_NAME: &str = "nginx.ingress.kubernetes.io/proxy-ssl-server-name";
pub(super) const PROXY_SSL_VERIFY_DEPTH: &str =
    "nginx.ingress.kubernetes.io/proxy-ssl-verify-depth";

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
        Ok(TlsAsked {
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
