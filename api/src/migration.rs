//! What becomes of an Ingress written for ingress-nginx when it moves to
//! teapot, annotation by annotation (`teapot validate --from
//! ingress-nginx`). The words come from docs/migrate-from-ingress-nginx.md
//! itself, read at build time: its one table ("Every annotation") says
//! what teapot does differently with each served annotation and why the
//! others are refused and what to use instead. The page is the one place
//! an operator reads and the one place this command quotes, so the two
//! never drift; the tests below fail when a served annotation, or one of
//! ingress-nginx's reference, has no row there.

use std::sync::LazyLock;

use k8s_openapi::api::networking::v1::Ingress;
use serde::Serialize;

use crate::annotations::{self, AnnotationError, NGINX_PREFIX, ObjectKind, PREFIX};
use crate::names::INGRESS_CLASS;

const PAGE: &str = include_str!("../../docs/migrate-from-ingress-nginx.md");

/// What a refused restricting annotation does to an Ingress that is not
/// a tenant's (a tenant's is refused at admission).
const UNROUTED: &str = "it restricts access, so an Ingress carrying it is not routed at all (Accepted=False, reason UnservedRestriction), never served without the restriction";

/// What teapot does with one ingress-nginx annotation of an Ingress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Served as ingress-nginx serves it.
    Served,
    /// Served, with this difference (the migration page's words).
    Changed(&'static str),
    /// The Ingress is refused while it carries the annotation.
    Refused {
        reason: String,
        instead: Option<&'static str>,
    },
}

/// One ingress-nginx annotation and what becomes of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The name after `nginx.ingress.kubernetes.io/`.
    pub name: String,
    pub outcome: Outcome,
}

/// What becomes of the annotation `key` with `value` on an Ingress; `None`
/// for a key that is not ingress-nginx's.
pub fn judge(key: &str, value: &str) -> Option<Verdict> {
    let name = key.strip_prefix(NGINX_PREFIX)?;
    let (key_text, value_text) = (key.to_string(), value.to_string());
    let readable_but_unserved =
        annotations::unserved_restrictions(ObjectKind::Ingress, [(&key_text, &value_text)]);
    let outcome = match annotations::parse(ObjectKind::Ingress, key, value) {
        // Readable, but asking for what teapot does not apply
        // (`auth-response-headers: X-Forwarded-User`).
        Ok(_) if !readable_but_unserved.is_empty() => Outcome::Refused {
            reason: readable_but_unserved[0].1.to_string(),
            instead: None,
        },
        Ok(_) => match served_row(name) {
            Some(text) => match text.strip_prefix("changed:") {
                Some(change) => Outcome::Changed(change.trim()),
                None => Outcome::Served,
            },
            // The page is checked to have a row for every served key; a
            // key without one is still served.
            None => Outcome::Served,
        },
        Err(e @ AnnotationError::NotServed { .. }) => {
            let row = refused_row(name);
            Outcome::Refused {
                reason: match row {
                    Some((why, _)) => format!("not served by teapot: {why}"),
                    None => e.to_string(),
                },
                instead: row.and_then(|(_, instead)| instead),
            }
        }
        Err(e) => Outcome::Refused {
            reason: e.to_string(),
            instead: None,
        },
    };
    // A restriction teapot would not apply keeps even an operator's
    // Ingress from being routed: said here, before anything moves.
    let outcome = match outcome {
        Outcome::Refused { reason, instead } if annotations::restricts_access(name) => {
            Outcome::Refused {
                reason: format!("{reason}; {UNROUTED}"),
                instead,
            }
        }
        other => other,
    };
    Some(Verdict {
        name: name.to_string(),
        outcome,
    })
}

/// A table row of the migration page: the annotation names of its first
/// cell and its other cells.
struct Row {
    names: Vec<String>,
    cells: Vec<&'static str>,
}

/// The rows of the first table under the heading that starts with
/// `heading`.
fn table(heading: &str) -> Vec<Row> {
    let Some(start) = PAGE.find(&format!("\n## {heading}")) else {
        return Vec::new();
    };
    PAGE[start + 1..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
        .skip(1) // the header row
        .filter_map(|line| {
            let cells: Vec<&'static str> =
                line.trim_matches('|').split(" | ").map(str::trim).collect();
            let (first, rest) = cells.split_first()?;
            Some(Row {
                names: names_in(first),
                cells: rest.to_vec(),
            })
        })
        .collect()
}

/// The annotation names a first cell lists: each in backticks, a value
/// after `:` dropped (`affinity: cookie`), and `-path` after
/// `session-cookie-name` read as `session-cookie-path`.
fn names_in(cell: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, quoted) in cell.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let name = quoted.split(':').next().unwrap_or("").trim();
        match (name.strip_prefix('-'), out.first()) {
            (Some(tail), Some(first)) => {
                let stem = first.rsplit_once('-').map_or("", |(s, _)| s);
                out.push(format!("{stem}-{tail}"));
            }
            _ => out.push(name.to_string()),
        }
    }
    out
}

/// The page's table of every annotation, each row's second cell starting
/// with `served`, `changed:` or `refused:`.
static EVERY: LazyLock<Vec<Row>> = LazyLock::new(|| table("Every annotation"));
static SERVED: LazyLock<Vec<&'static Row>> = LazyLock::new(|| {
    EVERY
        .iter()
        .filter(|r| !r.cells.first().is_some_and(|c| c.starts_with(REFUSED)))
        .collect()
});
static NOT_SERVED: LazyLock<Vec<&'static Row>> = LazyLock::new(|| {
    EVERY
        .iter()
        .filter(|r| r.cells.first().is_some_and(|c| c.starts_with(REFUSED)))
        .collect()
});
const REFUSED: &str = "refused:";

fn served_row(name: &str) -> Option<&'static str> {
    SERVED
        .iter()
        .find(|r| r.names.iter().any(|n| n == name))
        .and_then(|r| r.cells.first().copied())
}

/// Why `name` is not served and what to use instead, from the page. An
/// exact name wins over a pattern (`auth-*`), a longer pattern over a
/// shorter one.
fn refused_row(name: &str) -> Option<(&'static str, Option<&'static str>)> {
    let rank = |pattern: &str| -> Option<usize> {
        if pattern == name {
            Some(usize::MAX)
        } else {
            let stem = pattern.strip_suffix('*')?;
            name.starts_with(stem).then_some(stem.len())
        }
    };
    NOT_SERVED
        .iter()
        .filter_map(|r| Some((r.names.iter().filter_map(|n| rank(n)).max()?, r)))
        .max_by_key(|(rank, _)| *rank)
        .map(|(_, r)| {
            let why = r.cells.first().copied().unwrap_or("");
            let why = why.strip_prefix(REFUSED).unwrap_or(why).trim();
            let instead = r.cells.get(1).copied().filter(|s| !s.is_empty());
            (why, instead)
        })
}

/// What becomes of one Ingress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IngressMove {
    /// `namespace/name`.
    pub ingress: String,
    /// The ingress-nginx annotations served as before.
    pub served: Vec<String>,
    /// What teapot does differently, each with what it concerns.
    pub changed: Vec<Note>,
    /// What keeps the Ingress from being admitted until it is changed.
    pub refused: Vec<Note>,
}

/// One difference or refusal: what it concerns (an annotation's name, a
/// field) and what to know or do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Note {
    pub what: String,
    pub says: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instead: Option<String>,
}

impl Note {
    fn new(what: impl Into<String>, says: impl Into<String>) -> Note {
        Note {
            what: what.into(),
            says: says.into(),
            instead: None,
        }
    }
}

/// The verdict on a whole Ingress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Move {
    /// Served as ingress-nginx served it, once its class is teapot.
    AsIs,
    /// Served, with the differences listed.
    WithChanges,
    /// Refused until the refused parts are changed.
    Refused,
}

impl IngressMove {
    pub fn verdict(&self) -> Move {
        if !self.refused.is_empty() {
            Move::Refused
        } else if self.changed.is_empty() {
            Move::AsIs
        } else {
            Move::WithChanges
        }
    }
}

/// The settings of the fleet an Ingress moves to that decide where it
/// behaves differently from ingress-nginx (the proxy's flags of the same
/// names); the default is the proxy's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetSettings {
    /// `--ssl-redirect-default`: whether an Ingress's TLS hosts redirect
    /// plain HTTP to HTTPS when it does not say (ingress-nginx: they do).
    pub ssl_redirect_default: bool,
}

impl Default for FleetSettings {
    fn default() -> Self {
        FleetSettings {
            ssl_redirect_default: true,
        }
    }
}

/// [`assess_on`] a fleet with the proxy's default settings.
pub fn assess(ingress: &Ingress) -> IngressMove {
    assess_on(ingress, &FleetSettings::default())
}

/// What becomes of `ingress` when it moves from ingress-nginx to a fleet
/// run with `fleet`: its class, each annotation, the path and host rules
/// nginx read differently, and what the fleet's settings change.
pub fn assess_on(ingress: &Ingress, fleet: &FleetSettings) -> IngressMove {
    let meta = &ingress.metadata;
    let mut out = IngressMove {
        ingress: format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name.as_deref().unwrap_or("")
        ),
        ..IngressMove::default()
    };
    let spec = ingress.spec.as_ref();
    match spec.and_then(|s| s.ingress_class_name.as_deref()) {
        Some(INGRESS_CLASS) => {}
        Some(class) => out.changed.push(Note::new(
            "spec.ingressClassName",
            format!("is {class:?}: set it to {INGRESS_CLASS:?}; teapot takes only Ingresses of its class"),
        )),
        None => out.changed.push(Note::new(
            "spec.ingressClassName",
            format!("is not set: set it to {INGRESS_CLASS:?}; teapot takes only Ingresses of its class, never the cluster's default"),
        )),
    }
    for (key, value) in meta.annotations.iter().flatten() {
        if key == "kubernetes.io/ingress.class" {
            out.changed.push(Note::new(
                key.as_str(),
                "the deprecated class annotation is not read: spec.ingressClassName decides",
            ));
        } else if let Some(verdict) = judge(key, value) {
            match verdict.outcome {
                Outcome::Served => out.served.push(verdict.name),
                Outcome::Changed(text) => out.changed.push(Note::new(verdict.name, text)),
                Outcome::Refused { reason, instead } => out.refused.push(Note {
                    what: verdict.name,
                    says: reason,
                    instead: instead.map(str::to_string),
                }),
            }
        } else if key.starts_with(PREFIX)
            && let Err(e) = annotations::parse(ObjectKind::Ingress, key, value)
        {
            out.refused.push(Note::new(key.as_str(), e.to_string()));
        }
    }
    // Client certificates asked for without their CA Secret, which
    // ingress-nginx would serve to every client; a bad value is named
    // above already.
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    if let Err(errors) = annotations::AuthTls::read(namespace, meta.annotations.iter().flatten()) {
        for (key, why) in errors {
            let name = key.strip_prefix(NGINX_PREFIX).unwrap_or(key);
            if !out.refused.iter().any(|n| n.what == name) {
                out.refused
                    .push(Note::new(name, format!("{why}; {UNROUTED}")));
            }
        }
    }
    let regex = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(&format!("{NGINX_PREFIX}use-regex")));
    let rules = spec.and_then(|s| s.rules.as_ref()).into_iter().flatten();
    let mut hostless = spec.is_some_and(|s| s.default_backend.is_some());
    for rule in rules {
        hostless |= rule.host.is_none();
        for path in rule.http.iter().flat_map(|h| &h.paths) {
            let p = path.path.as_deref().unwrap_or("/");
            if path.path_type == "ImplementationSpecific" && !regex && !p.ends_with('/') {
                out.changed.push(Note::new(
                    format!("path {p} (ImplementationSpecific)"),
                    format!("teapot matches it by path element, like Prefix: {p}/x matches, {p}x does not (ingress-nginx's location matched every path starting with {p})"),
                ));
            }
        }
    }
    if hostless {
        out.changed.push(Note::new(
            "rules without a host, defaultBackend",
            "on a tenant's Ingress they answer on the Ingress's own name INGRESS.CLUSTER.lb.DOMAIN, never for every host as ingress-nginx's default server did",
        ));
    }
    if let Some(note) = ssl_redirect_off(ingress, fleet) {
        out.changed.push(note);
    }
    out
}

/// ingress-nginx redirects plain HTTP for an Ingress's TLS hosts unless it
/// sets `ssl-redirect: "false"`; a fleet run with
/// `--ssl-redirect-default=false` serves them over plain HTTP unless it
/// asks.
fn ssl_redirect_off(ingress: &Ingress, fleet: &FleetSettings) -> Option<Note> {
    if fleet.ssl_redirect_default {
        return None;
    }
    let tls_hosts = ingress
        .spec
        .iter()
        .flat_map(|s| s.tls.iter().flatten())
        .any(|t| t.hosts.as_ref().is_some_and(|h| !h.is_empty()));
    let annotations = ingress.metadata.annotations.as_ref();
    let set = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    let asks = |key: &str| set(key) == Some("true");
    let said = set(&format!("{NGINX_PREFIX}ssl-redirect")).is_some()
        || set(&format!("{PREFIX}ssl-redirect")).is_some()
        || asks(&format!("{NGINX_PREFIX}force-ssl-redirect"));
    (tls_hosts && !said).then(|| {
        Note::new(
            "spec.tls",
            format!(
                "plain HTTP for its TLS hosts is served, not redirected to HTTPS as ingress-nginx does: the fleet runs with --ssl-redirect-default=false; set {NGINX_PREFIX}ssl-redirect: \"true\" to keep the redirect"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotations::ALLOWLIST;

    fn nginx(name: &str, value: &str) -> Outcome {
        judge(&format!("{NGINX_PREFIX}{name}"), value)
            .expect("an ingress-nginx key")
            .outcome
    }

    #[test]
    fn every_served_annotation_has_its_row_on_the_migration_page() {
        let missing: Vec<&str> = ALLOWLIST
            .iter()
            .filter_map(|s| s.key.strip_prefix(NGINX_PREFIX))
            .filter(|n| served_row(n).is_none())
            .collect();
        assert!(
            missing.is_empty(),
            "docs/migrate-from-ingress-nginx.md's table has no served row for {missing:?}"
        );
        for row in SERVED.iter() {
            for name in &row.names {
                assert!(
                    ALLOWLIST
                        .iter()
                        .any(|s| s.key.strip_prefix(NGINX_PREFIX) == Some(name)),
                    "the table says {name} is served, which teapot does not serve"
                );
            }
            let text = row.cells.first().copied().unwrap_or("");
            assert!(
                text.starts_with("served") || text.starts_with("changed:"),
                "{:?}: {text}",
                row.names
            );
        }
    }

    /// The annotations of ingress-nginx's reference
    /// (`docs/user-guide/nginx-configuration/annotations.md` at v1.15).
    const REFERENCE: &[&str] = &[
        "affinity",
        "affinity-canary-behavior",
        "affinity-mode",
        "app-root",
        "auth-always-set-cookie",
        "auth-cache-duration",
        "auth-cache-key",
        "auth-keepalive",
        "auth-keepalive-requests",
        "auth-keepalive-share-vars",
        "auth-keepalive-timeout",
        "auth-method",
        "auth-proxy-set-headers",
        "auth-realm",
        "auth-request-redirect",
        "auth-response-headers",
        "auth-secret",
        "auth-secret-type",
        "auth-signin",
        "auth-signin-redirect-param",
        "auth-snippet",
        "auth-tls-error-page",
        "auth-tls-match-cn",
        "auth-tls-pass-certificate-to-upstream",
        "auth-tls-secret",
        "auth-tls-verify-client",
        "auth-tls-verify-depth",
        "auth-type",
        "auth-url",
        "backend-protocol",
        "canary",
        "canary-by-cookie",
        "canary-by-header",
        "canary-by-header-pattern",
        "canary-by-header-value",
        "canary-weight",
        "canary-weight-total",
        "client-body-buffer-size",
        "configuration-snippet",
        "connection-proxy-header",
        "cors-allow-credentials",
        "cors-allow-headers",
        "cors-allow-methods",
        "cors-allow-origin",
        "cors-expose-headers",
        "cors-max-age",
        "custom-headers",
        "custom-http-errors",
        "default-backend",
        "denylist-source-range",
        "enable-access-log",
        "enable-cors",
        "enable-global-auth",
        "enable-modsecurity",
        "enable-opentelemetry",
        "enable-owasp-core-rules",
        "enable-rewrite-log",
        "force-ssl-redirect",
        "from-to-www-redirect",
        "http2-push-preload",
        "limit-burst-multiplier",
        "limit-connections",
        "limit-rate",
        "limit-rate-after",
        "limit-rpm",
        "limit-rps",
        "limit-whitelist",
        "load-balance",
        "mirror-host",
        "mirror-request-body",
        "mirror-target",
        "modsecurity-snippet",
        "modsecurity-transaction-id",
        "opentelemetry-trust-incoming-span",
        "permanent-redirect",
        "permanent-redirect-code",
        "preserve-trailing-slash",
        "proxy-body-size",
        "proxy-buffer-size",
        "proxy-buffering",
        "proxy-buffers-number",
        "proxy-busy-buffers-size",
        "proxy-connect-timeout",
        "proxy-cookie-domain",
        "proxy-cookie-path",
        "proxy-http-version",
        "proxy-max-temp-file-size",
        "proxy-next-upstream",
        "proxy-next-upstream-timeout",
        "proxy-next-upstream-tries",
        "proxy-read-timeout",
        "proxy-redirect-from",
        "proxy-redirect-to",
        "proxy-request-buffering",
        "proxy-send-timeout",
        "proxy-ssl-ciphers",
        "proxy-ssl-name",
        "proxy-ssl-protocols",
        "proxy-ssl-secret",
        "proxy-ssl-server-name",
        "proxy-ssl-verify",
        "proxy-ssl-verify-depth",
        "rewrite-target",
        "satisfy",
        "server-alias",
        "server-snippet",
        "service-upstream",
        "session-cookie-change-on-failure",
        "session-cookie-conditional-samesite-none",
        "session-cookie-domain",
        "session-cookie-expires",
        "session-cookie-max-age",
        "session-cookie-name",
        "session-cookie-path",
        "session-cookie-samesite",
        "session-cookie-secure",
        "ssl-ciphers",
        "ssl-passthrough",
        "ssl-prefer-server-ciphers",
        "ssl-redirect",
        "stream-snippet",
        "temporal-redirect",
        "temporal-redirect-code",
        "upstream-hash-by",
        "upstream-hash-by-subset",
        "upstream-hash-by-subset-size",
        "upstream-vhost",
        "use-regex",
        "whitelist-source-range",
        "x-forwarded-prefix",
    ];

    /// One table answers for every annotation of ingress-nginx's
    /// reference, each row served, changed or refused.
    #[test]
    fn every_annotation_of_the_reference_has_one_row() {
        let rows_of = |name: &str| {
            EVERY
                .iter()
                .filter(|r| r.names.iter().any(|n| n == name))
                .count()
        };
        let missing: Vec<&&str> = REFERENCE.iter().filter(|n| rows_of(n) == 0).collect();
        assert!(missing.is_empty(), "no row for {missing:?}");
        let twice: Vec<&&str> = REFERENCE.iter().filter(|n| rows_of(n) > 1).collect();
        assert!(twice.is_empty(), "more than one row for {twice:?}");
        for row in EVERY.iter() {
            let text = row.cells.first().copied().unwrap_or("");
            assert!(
                ["served", "changed:", REFUSED]
                    .iter()
                    .any(|p| text.starts_with(p)),
                "{:?}: {text}",
                row.names
            );
        }
    }

    #[test]
    fn served_changed_and_refused_annotations_are_told_apart() {
        assert_eq!(
            nginx("whitelist-source-range", "10.0.0.0/8"),
            Outcome::Served
        );
        assert_eq!(
            nginx("session-cookie-samesite", "Lax"),
            Outcome::Served,
            "a -samesite abbreviation in the page's first cell"
        );
        assert_eq!(nginx("affinity", "cookie"), Outcome::Served);
        assert_eq!(nginx("ssl-redirect", "true"), Outcome::Served);
        let Outcome::Changed(text) = nginx("limit-rps", "5") else {
            panic!("limit-rps is changed");
        };
        assert!(text.contains("429"), "{text}");
        let Outcome::Refused { reason, instead } = nginx("server-snippet", "x") else {
            panic!("snippets are refused");
        };
        assert!(reason.contains("injects configuration"), "{reason}");
        assert_eq!(instead, None);
        let Outcome::Refused { reason, instead } = nginx("mirror-target", "http://x") else {
            panic!("mirror-* is refused");
        };
        assert!(reason.starts_with("not served by teapot: "), "{reason}");
        assert_eq!(instead, Some("HTTPRoute `RequestMirror`"));
        let Outcome::Refused { reason, .. } = nginx("limit-rps", "many") else {
            panic!("a bad value is refused");
        };
        assert!(reason.contains("many"), "{reason}");
        assert!(reason.ends_with(UNROUTED), "a restriction: {reason}");
        for (name, value) in [
            ("auth-type", "digest"),
            ("auth-tls-verify-client", "maybe"),
            ("server-snippet", "x"),
        ] {
            let Outcome::Refused { reason, .. } = nginx(name, value) else {
                panic!("{name} is refused");
            };
            assert!(reason.ends_with(UNROUTED), "{name}: {reason}");
        }
        let Outcome::Refused { reason, .. } =
            nginx("auth-response-headers", "X-User, X-Forwarded-User")
        else {
            panic!("a field the client would supply is refused");
        };
        assert!(reason.contains("X-Forwarded-User"), "{reason}");
        assert!(reason.ends_with(UNROUTED), "{reason}");
        assert_eq!(nginx("auth-response-headers", "X-User"), Outcome::Served);
        let Outcome::Refused { reason, .. } = nginx("proxy-max-temp-file-size", "0") else {
            panic!("proxy-max-temp-file-size is refused");
        };
        assert!(!reason.contains(UNROUTED), "no restriction: {reason}");
        let Outcome::Refused { reason, .. } = nginx("no-such-thing", "1") else {
            panic!("an unknown key is refused");
        };
        assert!(reason.starts_with("not served by teapot"), "{reason}");
        assert_eq!(judge("teapot.dev/ssl-redirect", "true"), None);
    }

    #[test]
    fn an_ingress_is_judged_whole() {
        let ingress: Ingress = serde_yaml::from_str(
            r#"
metadata:
  name: web
  namespace: shop
  annotations:
    kubernetes.io/ingress.class: nginx
    nginx.ingress.kubernetes.io/whitelist-source-range: 10.0.0.0/8
    nginx.ingress.kubernetes.io/ssl-redirect: "true"
    nginx.ingress.kubernetes.io/configuration-snippet: "more_set_headers x;"
    kubectl.kubernetes.io/last-applied-configuration: "{}"
spec:
  ingressClassName: nginx
  rules:
  - host: shop.example.com
    http:
      paths:
      - {path: /api, pathType: ImplementationSpecific, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /static/, pathType: ImplementationSpecific, backend: {service: {name: web, port: {number: 80}}}}
"#,
        )
        .unwrap();
        let m = assess(&ingress);
        assert_eq!(m.ingress, "shop/web");
        assert_eq!(m.served, ["ssl-redirect", "whitelist-source-range"]);
        let what: Vec<&str> = m.changed.iter().map(|n| n.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "spec.ingressClassName",
                "kubernetes.io/ingress.class",
                "path /api (ImplementationSpecific)"
            ]
        );
        assert_eq!(m.refused.len(), 1);
        assert_eq!(m.refused[0].what, "configuration-snippet");
        assert_eq!(m.verdict(), Move::Refused);

        let mut clean = ingress.clone();
        clean.metadata.annotations = None;
        clean.spec.as_mut().unwrap().ingress_class_name = Some("teapot".into());
        clean.spec.as_mut().unwrap().rules.as_mut().unwrap()[0]
            .http
            .as_mut()
            .unwrap()
            .paths
            .truncate(0);
        assert_eq!(assess(&clean).verdict(), Move::AsIs);
        clean.spec.as_mut().unwrap().rules.as_mut().unwrap()[0].host = None;
        assert_eq!(assess(&clean).verdict(), Move::WithChanges);
    }

    /// A fleet run with `--ssl-redirect-default=false` serves an Ingress's
    /// TLS hosts over plain HTTP where ingress-nginx redirects them: said
    /// per Ingress, unless the Ingress says what it wants.
    #[test]
    fn the_fleets_ssl_redirect_default_is_judged_per_ingress() {
        let with = |tls: bool, annotations: &[(&str, &str)]| {
            let mut ingress: Ingress = serde_yaml::from_str(
                "metadata: {name: web, namespace: shop}\nspec: {ingressClassName: teapot}",
            )
            .unwrap();
            if tls {
                ingress.spec.as_mut().unwrap().tls = Some(vec![
                    serde_yaml::from_str("{hosts: [shop.example.com]}").unwrap(),
                ]);
            }
            ingress.metadata.annotations = Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
            ingress
        };
        let off = FleetSettings {
            ssl_redirect_default: false,
        };
        let said = |i: &Ingress, fleet: &FleetSettings| {
            assess_on(i, fleet)
                .changed
                .iter()
                .any(|n| n.what == "spec.tls" && n.says.contains("--ssl-redirect-default=false"))
        };
        let plain = with(true, &[]);
        assert!(said(&plain, &off));
        assert_eq!(assess_on(&plain, &off).verdict(), Move::WithChanges);
        assert!(!said(&plain, &FleetSettings::default()));
        assert_eq!(assess(&plain).verdict(), Move::AsIs);
        assert!(!said(&with(false, &[]), &off), "no TLS host");
        for set in [
            ("nginx.ingress.kubernetes.io/ssl-redirect", "true"),
            ("nginx.ingress.kubernetes.io/ssl-redirect", "false"),
            ("teapot.dev/ssl-redirect", "true"),
            ("nginx.ingress.kubernetes.io/force-ssl-redirect", "true"),
        ] {
            assert!(!said(&with(true, &[set]), &off), "{set:?}");
        }
    }

    /// Client certificates move when the CA Secret moves with them;
    /// asked for without it, the Ingress is refused (ingress-nginx would
    /// have served it to every client).
    #[test]
    fn client_certificates_are_judged_together() {
        let with = |pairs: &[(&str, &str)]| {
            let annotations: std::collections::BTreeMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (format!("{NGINX_PREFIX}{k}"), v.to_string()))
                .collect();
            let mut ingress = Ingress::default();
            ingress.metadata.namespace = Some("shop".into());
            ingress.metadata.annotations = Some(annotations);
            ingress.spec = Some(Default::default());
            ingress.spec.as_mut().unwrap().ingress_class_name = Some("teapot".into());
            assess(&ingress)
        };
        let m = with(&[
            ("auth-tls-secret", "shop/ca"),
            ("auth-tls-verify-client", "on"),
            ("auth-tls-match-cn", "CN=(a|b)"),
        ]);
        assert!(m.refused.is_empty(), "{:?}", m.refused);
        assert_ne!(m.verdict(), Move::Refused);
        let m = with(&[("auth-tls-verify-client", "on")]);
        assert_eq!(m.refused.len(), 1, "{:?}", m.refused);
        assert_eq!(m.refused[0].what, "auth-tls-verify-client");
        assert!(m.refused[0].says.contains("needs"), "{}", m.refused[0].says);
        assert!(m.refused[0].says.ends_with(UNROUTED));
    }

    #[test]
    fn names_of_a_cell() {
        assert_eq!(
            names_in("`session-cookie-name`, `-path`, `-max-age`"),
            [
                "session-cookie-name",
                "session-cookie-path",
                "session-cookie-max-age"
            ]
        );
        assert_eq!(names_in("`affinity: cookie`"), ["affinity"]);
        assert_eq!(
            names_in("`auth-type`/`auth-secret` (basic auth)"),
            ["auth-type", "auth-secret"]
        );
    }
}
