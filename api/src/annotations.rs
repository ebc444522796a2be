//! The annotation allowlist (docs/architecture.md: "Every tenant-facing
//! annotation is `teapot.dev/<name>`, drawn from one allowlist that lives in
//! the api crate and is documented for users. Unknown annotations are
//! rejected, never ignored."), and the ingress-nginx annotations teapot
//! serves under their own names (`nginx.ingress.kubernetes.io/<name>`,
//! docs/migrate-from-ingress-nginx.md): an Ingress moving off ingress-nginx
//! keeps its allow-lists, rate limits and CORS without a rewrite. Every
//! other ingress-nginx annotation is refused with its reason
//! ([`AnnotationError::InjectsConfiguration`], [`AnnotationError::NotServed`]).
//!
//! Each entry names its key, the kinds it applies to, the type of its value
//! and a one-line description. Values are parsed into typed
//! [`AnnotationValue`]s here, once; nothing downstream ever sees the string.
//! The tenant-facing table in `webhook/README.md` mirrors [`ALLOWLIST`] (a
//! test in the webhook crate keeps them in step).

use std::fmt;
use std::time::Duration;

/// Every teapot annotation key starts with this.
pub const PREFIX: &str = "teapot.dev/";

/// On the LB copy of a tenant's L4 Service, written by the agent: its
/// `spec.ipFamilies` (comma-separated, the primary first) and
/// `spec.ipFamilyPolicy`, which the copy cannot carry in its spec (the LB
/// cluster's API server checks them against its own families and would
/// refuse a dual-stack copy in a single-stack LB cluster).
pub const IP_FAMILIES: &str = "teapot.dev/ip-families";
pub const IP_FAMILY_POLICY: &str = "teapot.dev/ip-family-policy";

/// ingress-nginx's annotation prefix; the keys under it that teapot serves
/// are in [`ALLOWLIST`] too.
pub const NGINX_PREFIX: &str = "nginx.ingress.kubernetes.io/";

/// Longest list value (CIDRs, origins): an allow-list of a few hundred
/// networks, as ingress-nginx users write them.
pub const MAX_LIST_LEN: usize = 8192;

/// Longest annotation value teapot reads (every typed value is far shorter).
pub const MAX_VALUE_LEN: usize = 256;

pub use crate::kind::ObjectKind;

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The type of an annotation's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    /// `true` or `false`, nothing else.
    Bool,
    /// A byte size: digits with an optional `k`, `m` or `g` suffix
    /// (powers of 1024), at most `max` bytes. `0` means no limit.
    Size { max: u64 },
    /// A duration: digits followed by `ms`, `s`, `m` or `h`, within bounds.
    Duration { min: Duration, max: Duration },
    /// One of a fixed set of words.
    OneOf(&'static [&'static str]),
    /// A whole number from `min` to `max`, plain digits.
    Count { min: u32, max: u32 },
    /// A Kubernetes UID: lowercase hex digits and dashes, 1 to 64 characters.
    Uid,
    /// Comma-separated IPv4/IPv6 networks (`10.0.0.0/8`) or addresses.
    Cidrs,
    /// `*`, or comma-separated origins `scheme://host[:port]` whose host may
    /// start with `*.` (ingress-nginx's `cors-allow-origin`).
    Origins,
    /// Comma-separated HTTP tokens (methods, header names); `*` allowed
    /// when `star`.
    Tokens { star: bool },
    /// An absolute `http(s)://` URL or an absolute path, printable ASCII
    /// without spaces or quotes.
    Url,
    /// Printable ASCII text, spaces allowed (a header value, a pattern).
    Text,
    /// An external authentication service's `http://` URL whose host is a
    /// Service (`SERVICE.NAMESPACE.svc[.cluster.local]`) or an IP address
    /// ([`AuthTarget`]); whose Service or address is checked against the
    /// tenant where the tenant is known.
    AuthUrl,
    /// Comma-separated three-digit HTTP status codes from `min` to `max`
    /// (`custom-http-errors`); a repeated code counts once.
    StatusCodes { min: u16, max: u16 },
    /// The name of a Service of the object's own namespace, a DNS label:
    /// no `NAMESPACE/` part, so no other namespace's Service can be named
    /// (`default-backend`).
    ServiceName,
    /// A Secret: `NAMESPACE/NAME`, or a bare `NAME` of the object's own
    /// namespace (`auth-tls-secret`); the namespace a DNS label, the name
    /// a DNS subdomain. Whose namespace it may be is admission's to judge.
    SecretRef,
    /// A ConfigMap, read as [`ValueType::SecretRef`] is (`custom-headers`).
    ConfigMapRef,
    /// A pattern the client certificate's subject (`CN=name,O=org`, most
    /// specific first, as nginx's `$ssl_client_s_dn`) must contain
    /// (`auth-tls-match-cn`): printable ASCII naming `CN=`; compiled by
    /// the bounded engine where it is used ([`crate::regex`]).
    SubjectPattern,
    /// A `Connection` field's value: comma-separated HTTP tokens, at most
    /// 64 bytes (`connection-proxy-header`).
    ConnectionTokens,
    /// Space-separated words of a fixed set, each at most once, as nginx
    /// writes a directive's flags (`proxy-next-upstream`).
    Words(&'static [&'static str]),
}

impl ValueType {
    /// What a value of this type looks like, for messages and docs.
    pub fn describe(&self) -> String {
        match self {
            ValueType::Bool => "\"true\" or \"false\"".into(),
            ValueType::Size { max } => format!(
                "a size such as \"10m\" (digits with an optional k, m or g suffix; 0 = no limit; at most {})",
                human_size(*max)
            ),
            ValueType::Duration { min, max } => format!(
                "a duration such as \"30s\" (digits followed by ms, s, m or h; from {} to {})",
                human_duration(*min),
                human_duration(*max)
            ),
            ValueType::OneOf(words) => {
                let quoted: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
                format!("one of {}", quoted.join(", "))
            }
            ValueType::Uid => "a Kubernetes UID (lowercase hex digits and '-')".into(),
            ValueType::Count { min, max } => format!("a whole number from {min} to {max}"),
            ValueType::Cidrs => {
                "comma-separated networks such as \"10.0.0.0/8, 2001:db8::/32\" (addresses allowed)"
                    .into()
            }
            ValueType::Origins => {
                "\"*\" or comma-separated origins such as \"https://a.example, https://*.b.example:8443\""
                    .into()
            }
            ValueType::Tokens { star: false } => {
                "comma-separated names such as \"GET, POST\" (letters, digits, '-', '_')".into()
            }
            ValueType::Tokens { star: true } => {
                "comma-separated names such as \"X-Total, X-Page\" (letters, digits, '-', '_', or \"*\")"
                    .into()
            }
            ValueType::Url => {
                "an http:// or https:// URL, or a path starting with '/' (printable ASCII, no spaces or quotes)"
                    .into()
            }
            ValueType::Text => "printable ASCII text".into(),
            ValueType::AuthUrl => {
                "an http:// URL of one of your Services, http://SERVICE.NAMESPACE.svc[.cluster.local][:PORT][/PATH], or of an IP address inside your nodeCIDRs (https:// is not served: teapot speaks plain HTTP to the authentication service)"
                    .into()
            }
            ValueType::StatusCodes { min, max } => format!(
                "comma-separated HTTP status codes from {min} to {max}, such as \"404,503\" (three digits each)"
            ),
            ValueType::ServiceName => {
                "the name of a Service in the Ingress's own namespace, such as \"error-pages\" (lowercase letters, digits and '-'; a Service of another namespace cannot be named)"
                    .into()
            }
            ValueType::SecretRef => {
                "a Secret as NAMESPACE/NAME, such as \"shop/client-ca\", or NAME in the Ingress's own namespace"
                    .into()
            }
            ValueType::ConfigMapRef => {
                "a ConfigMap as NAMESPACE/NAME of the Ingress's own namespace, such as \"shop/headers\", or NAME".into()
            }
            ValueType::ConnectionTokens => {
                "comma-separated HTTP tokens such as \"keep-alive\" or \"close\" (letters, digits and !#$%&'*+-.^_`|~; at most 64 characters)"
                    .into()
            }
            ValueType::SubjectPattern => format!(
                "a regular expression the client certificate's subject must contain, naming CN=, such as \"CN=(alice|bob)\" (printable ASCII, at most {MAX_VALUE_LEN} characters)"
            ),
            ValueType::Words(words) => format!(
                "space-separated words, each at most once, of: {}",
                words.join(", ")
            ),
        }
    }

    /// Longest value of this type.
    pub fn max_len(&self) -> usize {
        match self {
            ValueType::Cidrs
            | ValueType::Origins
            | ValueType::Tokens { .. }
            | ValueType::StatusCodes { .. } => MAX_LIST_LEN,
            ValueType::Url | ValueType::AuthUrl => 2048,
            ValueType::ConnectionTokens => 64,
            _ => MAX_VALUE_LEN,
        }
    }
}

/// One allowed annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnotationSpec {
    /// The full key, `teapot.dev/<name>`.
    pub key: &'static str,
    /// The kinds it may be set on.
    pub applies_to: &'static [ObjectKind],
    pub value: ValueType,
    /// One line for tenants.
    pub doc: &'static str,
}

/// Every annotation a tenant object may carry.
pub static ALLOWLIST: &[AnnotationSpec] = &[
    AnnotationSpec {
        key: "teapot.dev/acme",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Obtain certificates for this Ingress's TLS hosts from ACME instead of reading them from a Secret.",
    },
    AnnotationSpec {
        key: "teapot.dev/ssl-redirect",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Redirect plain-HTTP requests for this Ingress's TLS hosts to HTTPS (308); on unless false, or unless the fleet runs with --ssl-redirect-default=false.",
    },
    AnnotationSpec {
        key: "teapot.dev/alt-svc",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Advertise HTTP/3 (Alt-Svc) on this Ingress's HTTPS answers where the fleet serves it; on unless false.",
    },
    AnnotationSpec {
        key: "teapot.dev/max-body-size",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Size {
            max: 64 * 1024 * 1024 * 1024,
        },
        doc: "Largest request body accepted; larger requests get 413.",
    },
    AnnotationSpec {
        key: "teapot.dev/proxy-protocol",
        applies_to: &[ObjectKind::Ingress, ObjectKind::Service],
        value: ValueType::OneOf(&["v2"]),
        doc: "Send a PROXY protocol header (version 2) to the backends, carrying the client's address.",
    },
    AnnotationSpec {
        key: "teapot.dev/udp-idle-timeout",
        applies_to: &[ObjectKind::Service],
        value: ValueType::Duration {
            min: Duration::from_secs(1),
            max: Duration::from_secs(3600),
        },
        doc: "How long a UDP flow without packets is kept before it is forgotten.",
    },
    AnnotationSpec {
        key: "teapot.dev/health-check-interval",
        applies_to: &[ObjectKind::Ingress, ObjectKind::Service],
        value: ValueType::Duration {
            min: Duration::from_secs(1),
            max: Duration::from_secs(300),
        },
        doc: "How often teapot probes each backend endpoint.",
    },
    AnnotationSpec {
        key: "teapot.dev/health-check-unhealthy-threshold",
        applies_to: &[ObjectKind::Service],
        value: ValueType::Count { min: 1, max: 10 },
        doc: "Consecutive failed TCP probes after which an endpoint of an L4 Service stops receiving new connections.",
    },
    AnnotationSpec {
        key: "teapot.dev/health-check-healthy-threshold",
        applies_to: &[ObjectKind::Service],
        value: ValueType::Count { min: 1, max: 10 },
        doc: "Consecutive successful TCP probes after which an ejected endpoint of an L4 Service receives connections again.",
    },
    AnnotationSpec {
        key: "teapot.dev/tcp-idle-timeout",
        applies_to: &[ObjectKind::Service],
        value: ValueType::Duration {
            min: Duration::from_secs(1),
            max: Duration::from_secs(24 * 3600),
        },
        doc: "How long an L4 TCP connection may pass no byte in either direction before teapot closes it.",
    },
    AnnotationSpec {
        key: "teapot.dev/endpoints",
        applies_to: &[ObjectKind::Service],
        value: ValueType::OneOf(&["nodeport", "pod"]),
        doc: "Set on a Service in your own cluster: where the teapot agent takes its endpoints from, node InternalIPs and NodePorts (nodeport) or pod IPs (pod); overrides the agent's --mode. The agent reads it and does not copy it.",
    },
    AnnotationSpec {
        key: "teapot.dev/ip-families",
        applies_to: &[ObjectKind::Service],
        value: ValueType::OneOf(&["IPv4", "IPv6", "IPv4,IPv6", "IPv6,IPv4"]),
        doc: "Written by the teapot agent from the Service's spec.ipFamilies: the address families of its L4 addresses, the first one primary (first in status.loadBalancer.ingress).",
    },
    AnnotationSpec {
        key: "teapot.dev/ip-family-policy",
        applies_to: &[ObjectKind::Service],
        value: ValueType::OneOf(&["SingleStack", "PreferDualStack", "RequireDualStack"]),
        doc: "Written by the teapot agent from the Service's spec.ipFamilyPolicy: one L4 address (SingleStack), one of each family the pool holds (PreferDualStack), or one of each family or none (RequireDualStack).",
    },
    AnnotationSpec {
        key: "teapot.dev/source-uid",
        // Every kind the agent mirrors, the Gateway API ones included.
        applies_to: &ObjectKind::ALL,
        value: ValueType::Uid,
        doc: "Set by the teapot agent: the UID of the tenant-cluster object this one mirrors.",
    },
    // ingress-nginx's annotations, under their own names and with its
    // semantics and defaults (docs/migrate-from-ingress-nginx.md).
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/whitelist-source-range",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Cidrs,
        doc: "Only clients whose address is in these networks reach the Ingress; others get 403 (the older name of allowlist-source-range).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/allowlist-source-range",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Cidrs,
        doc: "Only clients whose address is in these networks reach the Ingress; others get 403.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/denylist-source-range",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Cidrs,
        doc: "Clients whose address is in these networks get 403; the deny-list is checked before the allow-list.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/limit-rps",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 1,
            max: 100_000,
        },
        doc: "Requests per second each client address may send to the Ingress, with a burst of limit-burst-multiplier times as many; over it, 429 with Retry-After.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/limit-rpm",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 1,
            max: 6_000_000,
        },
        doc: "Requests per minute each client address may send to the Ingress, with a burst of limit-burst-multiplier times as many; over it, 429 with Retry-After.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/limit-connections",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 1,
            max: 100_000,
        },
        doc: "Requests each client address may have in flight on the Ingress at once; one more gets 503.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/limit-rate",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 0,
            max: 1_048_576,
        },
        doc: "KiB per second each response body goes to the client at, after limit-rate-after KiB (per request; per stream on HTTP/2); 0: no limit. The backend is read no faster.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/limit-rate-after",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 0,
            max: 1_048_576,
        },
        doc: "KiB of each response body sent at full speed before limit-rate applies.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-request-buffering",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["on", "off"]),
        doc: "on: the request body is read (up to client-body-buffer-size) before the backend is contacted and sent with a Content-Length; a longer body goes on streamed. Default off: streamed.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/client-body-buffer-size",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Size { max: 1 << 20 },
        doc: "Request body bytes held with proxy-request-buffering on (default 8k, at most 1m).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-buffering",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["on", "off"]),
        doc: "on: the backend's response body is read ahead of the client, up to proxy-buffers-number times proxy-buffer-size (at most 1m), also under limit-rate. Default off.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-buffer-size",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Size { max: 1 << 20 },
        doc: "Size of one response buffer with proxy-buffering on (default 4k).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-buffers-number",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count { min: 1, max: 256 },
        doc: "Response buffers with proxy-buffering on (default 4).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/limit-burst-multiplier",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count { min: 1, max: 100 },
        doc: "How many times limit-rps (limit-rpm) requests a client may send at once (default 5).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/limit-whitelist",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Cidrs,
        doc: "Client networks the rate limits and limit-connections do not apply to (the older name of limit-allowlist).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/limit-allowlist",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Cidrs,
        doc: "Client networks the rate limits and limit-connections do not apply to.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/global-rate-limit",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 0,
            max: 1_000_000,
        },
        doc: "Requests per global-rate-limit-window for each global-rate-limit-key, counted over the whole fleet (the replicas exchange their counts); over it, 429 with Retry-After. 0: no limit.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/global-rate-limit-window",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Duration {
            min: Duration::from_secs(1),
            max: Duration::from_secs(3600),
        },
        doc: "The window global-rate-limit counts over (1s to 1h, such as 1m); without it global-rate-limit limits nothing.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/global-rate-limit-key",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "What global-rate-limit counts per (default $remote_addr): $remote_addr, $host, $request_uri, $http_NAME, $cookie_NAME, $arg_NAME (at most 8) with literal text between them; a key that expands to nothing counts the client address. Each route counts at most 4096 keys (a tenant 16384); requests of keys past that share one overflow key.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/global-rate-limit-ignored-cidrs",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Cidrs,
        doc: "Client networks global-rate-limit neither counts nor refuses (the first 64).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/enable-cors",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Answer CORS preflight requests (OPTIONS, 204) and add the CORS headers to responses for allowed origins.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/cors-allow-origin",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Origins,
        doc: "Origins allowed to call the Ingress (default *); the request's Origin is echoed when it matches.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/cors-allow-methods",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Tokens { star: false },
        doc: "Access-Control-Allow-Methods (default GET, PUT, POST, DELETE, PATCH, OPTIONS).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/cors-allow-headers",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Tokens { star: false },
        doc: "Access-Control-Allow-Headers (default DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/cors-expose-headers",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Tokens { star: true },
        doc: "Access-Control-Expose-Headers (default none).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/cors-allow-credentials",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Whether Access-Control-Allow-Credentials: true is sent (default true).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/cors-max-age",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 0,
            max: 100_000_000,
        },
        doc: "Access-Control-Max-Age in seconds (default 1728000).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/permanent-redirect",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Url,
        doc: "Answer every request of the Ingress with a redirect to this URL (301, or permanent-redirect-code).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/permanent-redirect-code",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count { min: 300, max: 308 },
        doc: "The status of permanent-redirect (default 301).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/temporal-redirect",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Url,
        doc: "Answer every request of the Ingress with a redirect to this URL (302, or temporal-redirect-code); it wins over permanent-redirect when both are set, as in ingress-nginx.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/temporal-redirect-code",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count { min: 300, max: 308 },
        doc: "The status of temporal-redirect (default 302).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/app-root",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Url,
        doc: "Redirect requests for / to this path (302); a path starting with '/'.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/ssl-redirect",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Redirect plain-HTTP requests for this Ingress's TLS hosts to HTTPS (308); on unless false, as in ingress-nginx (the fleet's --ssl-redirect-default=false turns it off unless true); it wins over teapot.dev/ssl-redirect.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/force-ssl-redirect",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Redirect plain-HTTP requests for every host of this Ingress to HTTPS (308), TLS section or not.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/affinity",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["cookie"]),
        doc: "Send a client's requests to the backend endpoint that served its first one, named in a cookie; a new endpoint is chosen when that one is gone or down.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/affinity-mode",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["balanced", "persistent"]),
        doc: "Accepted for compatibility; teapot keeps a client on its endpoint while that endpoint serves (persistent) in both modes.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/session-cookie-name",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Tokens { star: false },
        doc: "Name of the affinity cookie (default INGRESSCOOKIE).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/session-cookie-path",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Url,
        doc: "Path attribute of the affinity cookie (default /); a path starting with '/'.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/session-cookie-domain",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "Domain attribute of the affinity cookie (default none sent): one of the Ingress's hosts, or the parent of one of its wildcard hosts.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/affinity-canary-behavior",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["sticky", "legacy"]),
        doc: "On a canary Ingress: sticky (default): the main Ingress's affinity applies to the canary's backend too (a request sent there gets the cookie, and one whose cookie names a canary endpoint stays on the canary); legacy: it does not.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/session-cookie-max-age",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 1,
            max: 315_360_000,
        },
        doc: "Max-Age of the affinity cookie in seconds (default: none, the browser keeps the cookie until it closes).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/session-cookie-expires",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 1,
            max: 315_360_000,
        },
        doc: "Expires of the affinity cookie, in seconds from when it is set (default: none, the browser keeps the cookie until it closes).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/session-cookie-samesite",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["None", "Lax", "Strict"]),
        doc: "SameSite attribute of the affinity cookie (default none sent).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/session-cookie-secure",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Whether the affinity cookie carries Secure (default: only with SameSite=None, as ingress-nginx).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/upstream-hash-by",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "Send requests with the same key to the same endpoint (consistent hashing: removing one of N endpoints moves about 1/N of the keys). The key: $request_uri, $remote_addr, $host, $http_NAME, $cookie_NAME, $arg_NAME (at most 8) with literal text between them; an affinity cookie wins over it.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/upstream-hash-by-subset",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "With upstream-hash-by: the key picks a subset of endpoints (upstream-hash-by-subset-size), and each request one of them at random.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/upstream-hash-by-subset-size",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count { min: 1, max: 64 },
        doc: "Endpoints in each key's subset (default 3).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/load-balance",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["round_robin", "ewma"]),
        doc: "How the endpoint tried first is chosen: round_robin (the default), or ewma (the faster of two endpoints at random, by each one's response latency averaged over about 10 s). upstream-hash-by and an affinity cookie win over it.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/x-forwarded-prefix",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Url,
        doc: "Set X-Forwarded-Prefix to this path on requests to the backends (replacing the client's); a path starting with '/'.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/upstream-vhost",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "The Host the backends get instead of the client's: a host name or address, with an optional :port.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/server-alias",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "Comma-separated host names (at most 16, no wildcard) that answer as the Ingress's first rule host does, every path of that host included; each must be a host your tenant may serve, and one with rules of its own keeps them.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/preserve-trailing-slash",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Keep the trailing '/' of the target in the ssl-redirect's Location (default false: one is dropped, as ingress-nginx).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/relative-redirects",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Send a redirect to a path (permanent-redirect: /new) as written; default false: made absolute with the request's scheme and host, as ingress-nginx.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-redirect-from",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "With proxy-redirect-to: a backend's Location (and Refresh URL) starting with this text gets proxy-redirect-to in its place (nginx's proxy_redirect FROM TO); \"off\" or \"default\" (the default): none. One word of URL characters.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-redirect-to",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "What replaces proxy-redirect-from in a backend's Location; a result starting with '/' is made absolute with the request's scheme and host unless relative-redirects. One word of URL characters.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-cookie-domain",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "\"FROM TO\": a backend's Set-Cookie with Domain=FROM (any case, a leading dot kept) gets Domain=TO (nginx's proxy_cookie_domain); \"off\": none.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-cookie-path",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "\"FROM TO\": a backend's Set-Cookie whose Path starts with FROM gets TO in its place (nginx's proxy_cookie_path); \"off\": none.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/disable-proxy-intercept-errors",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "true: the backend's responses pass unchanged whatever custom-http-errors lists (teapot's own 502, 503 and 504 are still replaced).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/ssl-passthrough",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "true: TLS connections to 443 whose SNI is one of this Ingress's hosts are not terminated: the ClientHello and everything after it go as TCP to the backend of its path \"/\" (else its first path), which presents its own certificate. Other hosts on 443 are terminated as usual; plain HTTP to the host is served by its rules as before.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/use-regex",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "The Ingress's paths are regular expressions, matched case-insensitively from the start of the request path (nginx's location ~* \"^<path>\"); a longer regex path wins over a shorter Prefix path of the host.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/rewrite-target",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Url,
        doc: "The path the backends get instead of the request's: $1..$9 are the capture groups of the Ingress path (a regular expression, as with use-regex); the query is kept. A path starting with '/'.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/from-to-www-redirect",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Answer requests for www.<host> with a 308 to <host> (or the reverse for a www. rule host), when no rule serves the other name and your tenant may serve it.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-connect-timeout",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count { min: 1, max: 75 },
        doc: "Seconds to connect to a backend endpoint before the next is tried; at most the operator's connect timeout, which applies without it.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-read-timeout",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 1,
            max: 86_400,
        },
        doc: "Seconds the backend may leave the response without a byte before the client gets 504 (or the response ends); at most the operator's upstream timeout, which applies without it.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-send-timeout",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 1,
            max: 86_400,
        },
        doc: "Seconds the backend may take to accept request bytes; at most the operator's upstream timeout. On HTTP/1 the backend's wait in both directions is proxy-read-timeout.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-http-version",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["1.0", "1.1"]),
        doc: "The HTTP/1 version requests go to the backends in (default 1.1). 1.0: a body of unknown length (chunked, or HTTP/2 without content-length) gets 411, connections are not reused, WebSocket upgrades stay HTTP/1.1.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-next-upstream",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Words(&[
            "error",
            "timeout",
            "invalid_header",
            "http_500",
            "http_502",
            "http_503",
            "http_504",
            "http_403",
            "http_404",
            "http_429",
            "non_idempotent",
            "off",
        ]),
        doc: "When a request goes again to another endpoint, as nginx: error (connect refused or reset, the backend closing before its answer; invalid_header counts as error), timeout, http_500/502/503/504/403/404/429, non_idempotent (POST, PATCH... too), off. Default with proxy-next-upstream-tries or -timeout set: error timeout. Only a request teapot holds whole (no body, one read with its head or held by proxy-request-buffering; on gRPC/h2c backends a body of at most 64 KiB) is sent again.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-next-upstream-tries",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count { min: 0, max: 6 },
        doc: "Tries per request with proxy-next-upstream, the first included (default 3; 0, nginx's no limit, is teapot's most: 6).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-next-upstream-timeout",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count { min: 0, max: 600 },
        doc: "Seconds all tries of a request may take together with proxy-next-upstream (default 0: no bound but each try's own timeouts); spent, the client gets 504.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/connection-proxy-header",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::ConnectionTokens,
        doc: "The Connection field the backends get (e.g. keep-alive or close; the client's never passes), at most 64 characters; with close the connection is not reused. Default: none, the connection reused. A WebSocket upgrade gets Connection: upgrade whatever it says.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/backend-protocol",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["HTTP", "HTTPS", "GRPC", "GRPCS", "H2C"]),
        doc: "How teapot speaks to the backend: HTTP/1.1 (HTTP, the default), HTTP over TLS (HTTPS), gRPC over cleartext HTTP/2 (GRPC, H2C) or over TLS (GRPCS).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-ssl-secret",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "NAMESPACE/NAME of a Secret in your tenant's namespace: its ca.crt verifies the backend's certificate (with proxy-ssl-verify: on), its tls.crt and tls.key are the client certificate teapot presents.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-ssl-verify",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["on", "off"]),
        doc: "Verify the backend's certificate against proxy-ssl-secret's ca.crt (on) or not (off, the default, as ingress-nginx).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-ssl-name",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "The name the backend's certificate is verified against (and sent as SNI with proxy-ssl-server-name: on); default: the Service's name.namespace.svc.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-ssl-server-name",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["on", "off"]),
        doc: "Send proxy-ssl-name as SNI to an HTTPS or GRPCS backend (on) or no SNI (off, the default).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-ssl-verify-depth",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count { min: 1, max: 16 },
        doc: "Longest certificate chain accepted from the backend (default 1, as ingress-nginx).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-ssl-ciphers",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "The TLS 1.2 cipher suites offered to an HTTPS or GRPCS backend, an OpenSSL cipher list (HIGH:!AES) over the suites rustls has (ECDHE with AES-GCM or ChaCha20-Poly1305); a suite it lacks (DHE-*, CBC, 3DES) is refused by name, !NAME of one is accepted. TLS 1.3 suites stay rustls's, as OpenSSL's list does not choose them.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-ssl-protocols",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "The TLS versions offered to an HTTPS or GRPCS backend: TLSv1.2 and/or TLSv1.3, space-separated (default both); SSLv3, TLSv1 and TLSv1.1 are refused (rustls has none of them).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/canary",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "This Ingress is a canary: its backend is added to the route of the Ingress of your tenant with the same host and path, and gets the requests the canary-by-header, canary-by-cookie and canary-weight rules choose, in that order.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/canary-by-header",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Tokens { star: false },
        doc: "A request whose header of this name is always goes to the canary, never does not; with canary-by-header-value (or -pattern), a matching value goes to the canary; any other value leaves the choice to the next rule.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/canary-by-header-value",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "The value of canary-by-header that sends a request to the canary.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/canary-by-header-pattern",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "A regular expression a value of canary-by-header must contain to send the request to the canary (unless canary-by-header-value is set); compiled by teapot's bounded engine.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/canary-by-cookie",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Tokens { star: false },
        doc: "A request whose cookie of this name is always goes to the canary, never does not; any other value leaves the choice to canary-weight.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/canary-weight",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 0,
            max: 1_000_000,
        },
        doc: "The share of the other requests that goes to the canary, out of canary-weight-total.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/canary-weight-total",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 1,
            max: 1_000_000,
        },
        doc: "The total canary-weight is out of (default 100).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-url",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::AuthUrl,
        doc: "Ask this authentication service before forwarding each request: 2xx forwards it, 401 answers 401 (or redirects to auth-signin), 403 answers 403, anything else 500. An http:// URL of a Service of your own (SERVICE.NAMESPACE.svc[.cluster.local][:PORT]) or of an address inside your nodeCIDRs.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-method",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(AUTH_METHODS),
        doc: "The method of the request to auth-url (default GET); it carries no body.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-signin",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Url,
        doc: "Where a request auth-url answers 401 is redirected (302), with the original URL in the auth-signin-redirect-param query parameter unless the URL already has it.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-signin-redirect-param",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Tokens { star: false },
        doc: "Name of the auth-signin query parameter carrying the original URL (default rd).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-response-headers",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Tokens { star: false },
        doc: "Header fields copied from auth-url's 2xx answer onto the request to the backend, replacing the client's fields of those names.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-request-redirect",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Url,
        doc: "The X-Auth-Request-Redirect field of the request to auth-url (default: the request's path and query).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-always-set-cookie",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Accepted for ingress-nginx's Ingresses: the Set-Cookie fields of auth-url's allowing answer (at most 8) are added to the backend's response whatever its status, with or without it.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-type",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["basic"]),
        doc: "basic: requests need a user and password of auth-secret (401 with WWW-Authenticate otherwise); digest is not served.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-cache-key",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "With auth-url: keep the authentication service's answers per key (e.g. $remote_user$http_authorization; variables $remote_user, $http_NAME, $cookie_NAME, $arg_NAME, $host, $request_uri, $remote_addr, at most 8), for auth-cache-duration (literal text alone: one answer for every request); a request whose key expands to nothing is always asked about. At most 1024 answers per Ingress.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-cache-duration",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "How long auth-cache-key keeps an answer, by its status: items of status codes (or any) and a time, separated by commas, e.g. 200 202 10m, 401 30s (default 200 202 401 5m); at most 8 items, each time at most 1h.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/satisfy",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["all", "any"]),
        doc: "all (the default): a request must pass the allow-list and every authentication (basic, auth-url). any: passing one of them is enough (an allow-listed address needs no credentials); a request failing all gets the last one's answer (401). The deny-list always applies.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-secret",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::SecretRef,
        doc: "The Secret of your Ingress's namespace holding the users of auth-type: basic (NAME, or NAMESPACE/NAME of the same namespace): htpasswd lines in key auth (bcrypt up to cost 12, apr1, {SHA}), or one key per user with auth-secret-type: auth-map.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-secret-type",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["auth-file", "auth-map"]),
        doc: "auth-file (the default): auth-secret's key auth holds htpasswd lines; auth-map: each key is a user and its value the password hash.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-realm",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Text,
        doc: "The realm of the 401's WWW-Authenticate: Basic realm=\"...\" (default empty, as ingress-nginx).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/custom-headers",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::ConfigMapRef,
        doc: "A ConfigMap of your Ingress's namespace whose entries are set on every response of its routes, replacing the backend's field of that name (at most 32; no framing, hop-by-hop or Set-Cookie field); a missing or refused ConfigMap makes the routes answer 503, as ingress-nginx denies the location.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/custom-http-errors",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::StatusCodes { min: 400, max: 599 },
        doc: "A backend response with one of these statuses (and teapot's own 502 or 504 when listed) is replaced by the answer of default-backend, asked for the page with X-Code, X-Format, X-Original-URI and ingress-nginx's other fields.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/default-backend",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::ServiceName,
        doc: "A Service of the Ingress's own namespace (its first port) that serves the custom-http-errors pages, and the 503 page while the route's Service has no endpoint.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-tls-secret",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::SecretRef,
        doc: "NAMESPACE/NAME of a Secret in your tenant's namespace whose ca.crt (PEM, one or more CA certificates) verifies the client certificates of the Ingress's hosts; the TLS handshake asks clients for one.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-tls-verify-client",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::OneOf(&["on", "off", "optional", "optional_no_ca"]),
        doc: "on (the default): a client without a certificate that verifies gets 400; optional: one without a certificate is served, one with a bad one gets 400; optional_no_ca: a certificate is asked for and passed on unverified; off: none is asked for.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-tls-verify-depth",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Count {
            min: 0,
            max: MAX_AUTH_TLS_DEPTH,
        },
        doc: "Longest client certificate chain accepted: the leaf and depth - 1 certificates above it up to a CA of auth-tls-secret (default 1; 0 means 1, as ingress-nginx).",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-tls-error-page",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Url,
        doc: "Where a client whose certificate is missing or does not verify is redirected (302) instead of getting 400.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-tls-pass-certificate-to-upstream",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Bool,
        doc: "Send the client's certificate and its verification to the backends: ssl-client-cert (URL-escaped PEM), ssl-client-verify, ssl-client-subject-dn and ssl-client-issuer-dn.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/auth-tls-match-cn",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::SubjectPattern,
        doc: "A regular expression the verified client certificate's subject (CN=name,O=org, as nginx's $ssl_client_s_dn) must contain, such as CN=alice; otherwise 403. Compiled by teapot's bounded engine.",
    },
    AnnotationSpec {
        key: "nginx.ingress.kubernetes.io/proxy-body-size",
        applies_to: &[ObjectKind::Ingress],
        value: ValueType::Size {
            max: 64 * 1024 * 1024 * 1024,
        },
        doc: "Largest request body accepted; larger requests get 413 (teapot.dev/max-body-size wins when both are set).",
    },
];

/// The methods `auth-method` accepts: those of ingress-nginx's list that
/// make sense without a body of the client's (no CONNECT, no TRACE).
pub const AUTH_METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// Where `auth-url` points: a Service of the Ingress's own tenant or an
/// address, never a name teapot would look up (that would let a tenant
/// make the shared fleet call anything it can reach).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthTarget {
    pub host: AuthHost,
    /// The URL's port, 80 when it names none.
    pub port: u16,
    /// The URL's path and query (`/` when it has no path).
    pub path: String,
    /// The URL's authority as written: the sub-request's `Host`.
    pub authority: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthHost {
    /// `SERVICE.NAMESPACE.svc[.cluster.local]`.
    Service {
        name: String,
        namespace: String,
    },
    Address(std::net::IpAddr),
}

impl AuthTarget {
    /// Reads an `auth-url` value; the error says what is wrong with it.
    pub fn parse(url: &str) -> Result<AuthTarget, String> {
        if url.len() >= 8 && url[..8].eq_ignore_ascii_case("https://") {
            return Err(format!(
                "{url:?}: https:// authentication URLs are not served (teapot speaks plain HTTP to the authentication service inside your cluster)"
            ));
        }
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url:?} is not an http:// URL"))?;
        let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let path = match path.chars().next() {
            None => "/".to_string(),
            Some('?') => format!("/{path}"),
            Some(_) => path.to_string(),
        };
        if !path.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!("{url:?}: the path must be printable ASCII"));
        }
        if authority.contains('@') {
            return Err(format!("{url:?}: user information is not allowed"));
        }
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (ip, after) = v6
                    .split_once(']')
                    .ok_or_else(|| format!("{url:?}: unclosed '['"))?;
                (ip, after.strip_prefix(':'))
            }
            None => match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            },
        };
        let port = match port {
            None => 80,
            Some(p) => Some(p)
                .filter(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse::<u16>().ok())
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("{url:?}: the port must be a number from 1 to 65535"))?,
        };
        let host = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => AuthHost::Address(ip),
            Err(_) => service_host(host).ok_or_else(|| {
                format!(
                    "{url:?}: the host must be one of your Services, SERVICE.NAMESPACE.svc or SERVICE.NAMESPACE.svc.cluster.local, or an IP address inside your nodeCIDRs; teapot does not look names up for the authentication service"
                )
            })?,
        };
        Ok(AuthTarget {
            host,
            port,
            path,
            authority: authority.to_ascii_lowercase(),
        })
    }
}

/// Why an `auth-response-headers` name may not be copied onto the request
/// to the backend: framing and connection fields (the authentication
/// service could reframe the request) and the forwarding fields teapot
/// writes from the real peer (it could forge the client's address).
pub fn auth_response_header_refused(name: &str) -> Option<&'static str> {
    const FRAMING: &[&str] = &[
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        "host",
    ];
    const FORWARDING: &[&str] = &["forwarded", "x-real-ip"];
    // `X_Real_IP` is `X-Real-IP` to a backend that folds `_` into `-`
    // (CGI, PHP, many WSGI servers): judged as the name it becomes.
    let folded = name.replace('_', "-");
    let name = folded.as_str();
    let is = |list: &[&str]| list.iter().any(|n| n.eq_ignore_ascii_case(name));
    if is(FRAMING) {
        Some("a framing or connection field, which only teapot sets")
    } else if is(FORWARDING) || name.len() > 12 && name[..12].eq_ignore_ascii_case("x-forwarded-") {
        Some("a forwarding field, which teapot writes from the real client")
    } else {
        None
    }
}

/// `SERVICE.NAMESPACE.svc[.cluster.local]`, each name a DNS label.
fn service_host(host: &str) -> Option<AuthHost> {
    let host = host.to_ascii_lowercase();
    let host = host.strip_suffix(".cluster.local").unwrap_or(&host);
    let mut labels = host.strip_suffix(".svc")?.split('.');
    let (name, namespace) = (labels.next()?, labels.next()?);
    let label = |l: &str| crate::admission::names::dns_label(l).is_ok();
    (labels.next().is_none() && label(name) && label(namespace)).then(|| AuthHost::Service {
        name: name.to_string(),
        namespace: namespace.to_string(),
    })
}

/// A parsed annotation value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnnotationValue {
    Bool(bool),
    /// Bytes; 0 means no limit.
    Size(u64),
    Duration(Duration),
    /// The word as written in the allowlist.
    Word(&'static str),
    Uid(String),
    Count(u32),
    Cidrs(Vec<ipnet::IpNet>),
    /// Origins or tokens, trimmed, in the order written.
    List(Vec<String>),
    /// A URL or path.
    Text(String),
    /// HTTP status codes, ascending, each once.
    Codes(Vec<u16>),
}

/// Why an annotation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    #[error(
        "unknown annotation: teapot accepts only the teapot.dev/ annotations listed in its documentation ({known})",
        known = known_keys()
    )]
    Unknown,
    #[error(
        "{key} injects configuration into the proxy, which teapot never runs on a shared fleet; express the behaviour with the annotations docs/migrate-from-ingress-nginx.md lists"
    )]
    InjectsConfiguration { key: String },
    #[error(
        "not served by teapot: {key} (the ingress-nginx annotations teapot serves: {served}; docs/migrate-from-ingress-nginx.md)",
        served = served_nginx_names()
    )]
    NotServed { key: String },
    #[error("{key} applies to {applies}, not to {kind}")]
    WrongKind {
        key: &'static str,
        applies: String,
        kind: ObjectKind,
    },
    #[error("value contains a control or invisible formatting character")]
    ControlCharacter,
    #[error("value is {0} characters long, more than its type allows")]
    TooLong(usize),
    #[error("value {value} is not {expected}")]
    BadValue { value: String, expected: String },
}

fn known_keys() -> String {
    ALLOWLIST
        .iter()
        .filter(|s| s.key.starts_with(PREFIX))
        .map(|s| s.key)
        .collect::<Vec<_>>()
        .join(", ")
}

fn served_nginx_names() -> String {
    ALLOWLIST
        .iter()
        .filter_map(|s| s.key.strip_prefix(NGINX_PREFIX))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the ingress-nginx annotation `name` (after its prefix) injects
/// configuration text into the proxy: snippets, `configuration-*`, Lua.
/// Such a key is refused whatever its value, in every namespace.
pub fn injects_configuration(name: &str) -> bool {
    name.ends_with("snippet")
        || name.ends_with("snippets")
        || name.starts_with("configuration-")
        || name.starts_with("lua-")
        || name.contains("-lua-")
        || name == "modsecurity-transaction-id"
}

/// ingress-nginx annotations (after the prefix; `*` ends a pattern) that
/// restrict who reaches an Ingress or how much: address lists, rate and
/// bandwidth limits, authentication of every kind, a web application
/// firewall.
const RESTRICTING: &[&str] = &[
    "whitelist-source-range",
    "allowlist-source-range",
    "denylist-source-range",
    "limit-rps",
    "limit-rpm",
    "limit-connections",
    "limit-burst-multiplier",
    "limit-rate",
    "limit-rate-after",
    "global-rate-limit*",
    "auth-*",
    "enable-modsecurity",
    "enable-owasp-core-rules",
    "modsecurity-*",
];

/// ingress-nginx annotations teapot does not serve and whose absence
/// restricts nothing: tuning, logging, load-balancing choices, features
/// whose absence makes a request fail rather than pass, and loosenings
/// (`enable-global-auth: false`) whose absence is the
/// stricter reading. Every other unserved name, an unknown one included,
/// counts as restricting: teapot cannot tell what it would have refused.
const NOT_RESTRICTING: &[&str] = &[
    "auth-cache-*",
    "auth-keepalive*",
    "auth-always-set-cookie",
    "enable-global-auth",
    "grpc-backend",
    "mirror-*",
    "upstream-vhost",
    "proxy-set-headers",
    "session-cookie-*",
    "service-upstream",
    "ssl-ciphers",
    "ssl-prefer-server-ciphers",
    "server-alias",
    "http2-push-preload",
    "proxy-buffer*",
    "proxy-buffering",
    "proxy-request-buffering",
    "proxy-max-temp-file-size",
    "client-body-buffer-size",
    "preserve-trailing-slash",
    "relative-redirects",
    "enable-access-log",
    "enable-rewrite-log",
    "enable-opentelemetry",
    "opentelemetry-*",
    "enable-opentracing",
    "opentracing-*",
    "fastcgi-*",
    "disable-proxy-intercept-errors",
];

fn listed(patterns: &[&str], name: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(stem) => name.starts_with(stem),
        None => *p == name,
    })
}

/// Whether the ingress-nginx annotation `name` (after its prefix)
/// restricts access ([`RESTRICTING`], configuration text teapot cannot
/// read, any unserved name not known to restrict nothing). Such an
/// annotation that teapot does not serve as written keeps the Ingress
/// from being routed ([`unserved_restrictions`]).
pub fn restricts_access(name: &str) -> bool {
    if listed(NOT_RESTRICTING, name) {
        return false;
    }
    if listed(RESTRICTING, name) || injects_configuration(name) {
        return true;
    }
    // A served annotation outside RESTRICTING shapes traffic, not access.
    spec(&format!("{NGINX_PREFIX}{name}")).is_none()
}

/// The annotations of an object of `kind` that ask for an access
/// restriction teapot does not apply: an ingress-nginx annotation that
/// [`restricts_access`] and that teapot does not serve, or whose value it
/// cannot read. Each is paired with its violation's field
/// (`metadata.annotations["KEY"]`) and why. An object with any of them is
/// not routed: served without the restriction, it would publish what the
/// restriction protects (an operator's admin page moved from
/// ingress-nginx with `auth-type: basic`).
pub fn unserved_restrictions<'a>(
    kind: ObjectKind,
    annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Vec<(String, AnnotationError)> {
    annotations
        .into_iter()
        .filter(|(key, _)| key.strip_prefix(NGINX_PREFIX).is_some_and(restricts_access))
        .filter_map(|(key, value)| {
            let e = match parse(kind, key, value) {
                Err(e) => e,
                // A field the authentication service vouches for that
                // teapot will not copy, and does not write itself, would
                // leave the backend reading the client's own field of that
                // name (`X-Forwarded-User` from oauth2-proxy).
                Ok(_) if key.as_str() == AUTH_RESPONSE_HEADERS_KEY => {
                    let (name, why) = items(value).find_map(|name| {
                        let why = auth_response_header_refused(name)?;
                        clients_field_passes(name).then_some((name, why))
                    })?;
                    AnnotationError::BadValue {
                        value: crate::admission::strings::quote(name),
                        expected: format!("a field teapot copies from the authentication service ({name} is {why})"),
                    }
                }
                Ok(_) => return None,
            };
            // An unreadable `auth-url` is served closed already: its
            // routes answer 503, as ingress-nginx denies the location.
            if key.as_str() == AUTH_URL_KEY && matches!(e, AnnotationError::BadValue { .. }) {
                return None;
            }
            Some((format!("metadata.annotations[{key:?}]"), e))
        })
        .collect()
}

/// Whether a client's field called `name` (or spelt so with `-` for `_`)
/// reaches the backend when `auth-response-headers` may not copy it: an
/// `X-Forwarded-` field but the four teapot writes on every request. The
/// other refused names are framing fields the engines write, or
/// forwarding fields teapot replaces.
fn clients_field_passes(name: &str) -> bool {
    const WRITTEN: [&str; 4] = [
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
        "x-forwarded-port",
    ];
    let folded = name.replace('_', "-").to_ascii_lowercase();
    folded.starts_with("x-forwarded-") && !WRITTEN.contains(&folded.as_str())
}

const AUTH_URL_KEY: &str = "nginx.ingress.kubernetes.io/auth-url";
const AUTH_RESPONSE_HEADERS_KEY: &str = "nginx.ingress.kubernetes.io/auth-response-headers";

/// Why `key` is not in the allowlist: an ingress-nginx annotation teapot
/// does not serve (and which kind of refusal), or an unknown one.
fn not_listed(key: &str) -> AnnotationError {
    match key.strip_prefix(NGINX_PREFIX) {
        Some(name) if injects_configuration(name) => AnnotationError::InjectsConfiguration {
            key: key.to_string(),
        },
        Some(_) => AnnotationError::NotServed {
            key: key.to_string(),
        },
        None => AnnotationError::Unknown,
    }
}

/// The allowlist entry for `key`.
pub fn spec(key: &str) -> Option<&'static AnnotationSpec> {
    ALLOWLIST.iter().find(|s| s.key == key)
}

/// Parses one annotation of an object of `kind`.
pub fn parse(kind: ObjectKind, key: &str, value: &str) -> Result<AnnotationValue, AnnotationError> {
    let spec = spec(key).ok_or_else(|| not_listed(key))?;
    if !spec.applies_to.contains(&kind) {
        return Err(AnnotationError::WrongKind {
            key: spec.key,
            applies: spec
                .applies_to
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            kind,
        });
    }
    if value
        .chars()
        .any(crate::admission::strings::is_forbidden_char)
    {
        return Err(AnnotationError::ControlCharacter);
    }
    if value.len() > spec.value.max_len() {
        return Err(AnnotationError::TooLong(value.len()));
    }
    parse_value(&spec.value, value).ok_or_else(|| AnnotationError::BadValue {
        value: crate::admission::strings::quote(value),
        expected: spec.value.describe(),
    })
}

fn parse_value(ty: &ValueType, value: &str) -> Option<AnnotationValue> {
    match ty {
        ValueType::Bool => match value {
            "true" => Some(AnnotationValue::Bool(true)),
            "false" => Some(AnnotationValue::Bool(false)),
            _ => None,
        },
        ValueType::Size { max } => {
            let (digits, unit) = split_number(value)?;
            let factor: u64 = match unit {
                "" => 1,
                "k" | "K" => 1024,
                "m" | "M" => 1024 * 1024,
                "g" | "G" => 1024 * 1024 * 1024,
                _ => return None,
            };
            let bytes = digits.checked_mul(factor)?;
            (bytes <= *max).then_some(AnnotationValue::Size(bytes))
        }
        ValueType::Duration { min, max } => {
            let (digits, unit) = split_number(value)?;
            let d = match unit {
                "ms" => Duration::from_millis(digits),
                "s" => Duration::from_secs(digits),
                "m" => Duration::from_secs(digits.checked_mul(60)?),
                "h" => Duration::from_secs(digits.checked_mul(3600)?),
                _ => return None,
            };
            (d >= *min && d <= *max).then_some(AnnotationValue::Duration(d))
        }
        ValueType::OneOf(words) => words
            .iter()
            .find(|w| **w == value)
            .map(|w| AnnotationValue::Word(w)),
        ValueType::Uid => {
            let ok = !value.is_empty()
                && value.len() <= 64
                && value
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-');
            ok.then(|| AnnotationValue::Uid(value.to_string()))
        }
        ValueType::Count { min, max } => {
            let (digits, unit) = split_number(value)?;
            let n = u32::try_from(digits).ok()?;
            (unit.is_empty() && n >= *min && n <= *max).then_some(AnnotationValue::Count(n))
        }
        ValueType::Cidrs => {
            let nets = items(value)
                .map(|item| {
                    item.parse::<ipnet::IpNet>()
                        .or_else(|_| item.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                        .ok()
                })
                .collect::<Option<Vec<_>>>()?;
            (!nets.is_empty()).then_some(AnnotationValue::Cidrs(nets))
        }
        ValueType::Origins => {
            // As ingress-nginx: a blank value is its default, `*`
            // anywhere in the list allows every origin, and an entry that
            // is no origin is dropped, the others served (the compile
            // reports each dropped one). A list without one origin is
            // refused (a tenant's Ingress at admission); an operator's
            // carrying one is served allowing no origin, where
            // ingress-nginx would allow every origin.
            if items(value).next().is_none() || items(value).any(|o| o == "*") {
                return Some(AnnotationValue::List(vec!["*".into()]));
            }
            let origins: Vec<String> = items(value)
                .filter(|o| origin_ok(o))
                .map(str::to_ascii_lowercase)
                .collect();
            (!origins.is_empty()).then_some(AnnotationValue::List(origins))
        }
        ValueType::Tokens { star } => {
            let tokens = items(value)
                .map(|t| {
                    let ok = (*star && t == "*")
                        || (!t.is_empty()
                            && t.len() <= 128
                            && t.bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
                    ok.then(|| t.to_string())
                })
                .collect::<Option<Vec<_>>>()?;
            (!tokens.is_empty()).then_some(AnnotationValue::List(tokens))
        }
        ValueType::Text => (!value.is_empty()
            && value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()))
        .then(|| AnnotationValue::Text(value.to_string())),
        ValueType::AuthUrl => AuthTarget::parse(value)
            .is_ok()
            .then(|| AnnotationValue::Text(value.to_string())),
        ValueType::StatusCodes { min, max } => {
            let mut codes = items(value)
                .map(|c| {
                    let code = (c.len() == 3 && c.bytes().all(|b| b.is_ascii_digit()))
                        .then(|| c.parse::<u16>().ok())
                        .flatten()?;
                    (*min..=*max).contains(&code).then_some(code)
                })
                .collect::<Option<Vec<_>>>()?;
            codes.sort_unstable();
            codes.dedup();
            (!codes.is_empty()).then_some(AnnotationValue::Codes(codes))
        }
        ValueType::ServiceName => crate::admission::names::dns_label(value)
            .is_ok()
            .then(|| AnnotationValue::Text(value.to_string())),
        ValueType::SecretRef | ValueType::ConfigMapRef => {
            let (namespace, name) = crate::names::namespaced_reference(value, "");
            let namespace_ok = !value.contains('/') || dns_label_ok(namespace);
            (namespace_ok && crate::admission::names::dns_subdomain(name).is_ok())
                .then(|| AnnotationValue::Text(value.to_string()))
        }
        ValueType::SubjectPattern => (value.contains("CN=")
            && value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()))
        .then(|| AnnotationValue::Text(value.to_string())),
        ValueType::Words(allowed) => {
            let mut words: Vec<String> = Vec::new();
            for w in value.split_ascii_whitespace() {
                if !allowed.contains(&w) || words.iter().any(|seen| seen == w) {
                    return None;
                }
                words.push(w.to_string());
            }
            (!words.is_empty()).then_some(AnnotationValue::List(words))
        }
        // RFC 9110 §5.6.2 tokens, as the proxy's head writer checks them
        // again (teapot_h1::ConnectionValue): written `a, b`.
        ValueType::ConnectionTokens => {
            let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            let tokens: Vec<&str> = value.split(',').map(|t| t.trim_matches(' ')).collect();
            tokens
                .iter()
                .all(|t| !t.is_empty() && t.bytes().all(tchar))
                .then(|| AnnotationValue::Text(tokens.join(", ")))
        }
        ValueType::Url => {
            let printable = value
                .bytes()
                .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b'\'' | b'<' | b'>'));
            let absolute = value.starts_with('/') && !value.starts_with("//");
            let url = ["http://", "https://"].iter().any(|s| {
                value
                    .strip_prefix(s)
                    .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'))
            });
            (printable && (absolute || url)).then(|| AnnotationValue::Text(value.to_string()))
        }
    }
}

fn dns_label_ok(label: &str) -> bool {
    crate::admission::names::dns_label(label).is_ok()
}

/// ingress-nginx's basic authentication annotations.
pub const AUTH_TYPE: &str = "nginx.ingress.kubernetes.io/auth-type";
pub const AUTH_SECRET: &str = "nginx.ingress.kubernetes.io/auth-secret";
pub const AUTH_SECRET_TYPE: &str = "nginx.ingress.kubernetes.io/auth-secret-type";
pub const AUTH_REALM: &str = "nginx.ingress.kubernetes.io/auth-realm";

/// The four basic authentication annotations.
pub const BASIC_AUTH_KEYS: [&str; 4] = [AUTH_TYPE, AUTH_SECRET, AUTH_SECRET_TYPE, AUTH_REALM];

/// An Ingress's basic authentication (`auth-type: basic`), read together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BasicAuthAnnotations {
    /// `auth-secret`: `(namespace, name)`, a bare name read in the
    /// Ingress's own namespace.
    pub secret: (String, String),
    /// `auth-secret-type: auth-map`: the Secret's keys are the users.
    pub map: bool,
    /// `auth-realm` (default empty, as ingress-nginx).
    pub realm: String,
}

impl BasicAuthAnnotations {
    /// Reads the basic authentication annotations of an Ingress of
    /// `namespace`: `Ok(None)` when it carries none of them; each error is
    /// `(annotation key, why)`. A companion without `auth-type`, or
    /// `auth-type` without its Secret, is an error rather than an open
    /// route: ingress-nginx serves those without authentication.
    pub fn read<'a>(
        namespace: &str,
        annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<Option<BasicAuthAnnotations>, Vec<(&'static str, String)>> {
        let mut values: [Option<AnnotationValue>; 4] = Default::default();
        let mut errors = Vec::new();
        let mut seen: Vec<&'static str> = Vec::new();
        for (key, value) in annotations {
            let Some(i) = BASIC_AUTH_KEYS.iter().position(|k| k == key) else {
                continue;
            };
            seen.push(BASIC_AUTH_KEYS[i]);
            match parse(ObjectKind::Ingress, key, value) {
                Ok(v) => values[i] = Some(v),
                Err(e) => errors.push((BASIC_AUTH_KEYS[i], e.to_string())),
            }
        }
        if seen.is_empty() {
            return Ok(None);
        }
        let [kind, secret, secret_type, realm] = values;
        let text = |v: Option<AnnotationValue>| match v {
            Some(AnnotationValue::Text(t)) => Some(t),
            _ => None,
        };
        if !seen.contains(&AUTH_TYPE) {
            for key in seen.iter().copied() {
                if !errors.iter().any(|(k, _)| *k == key) {
                    errors.push((
                        key,
                        format!("needs {AUTH_TYPE}: basic; without it ingress-nginx serves the Ingress to everyone"),
                    ));
                }
            }
        } else if !seen.contains(&AUTH_SECRET) {
            errors.push((
                AUTH_SECRET,
                format!("{AUTH_TYPE} needs {AUTH_SECRET}, the Secret holding the users"),
            ));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let (Some(AnnotationValue::Word("basic")), Some(secret)) = (kind, text(secret)) else {
            return Ok(None);
        };
        let (ns, name) = crate::names::namespaced_reference(secret.trim(), namespace);
        Ok(Some(BasicAuthAnnotations {
            secret: (ns.to_string(), name.to_string()),
            map: matches!(secret_type, Some(AnnotationValue::Word("auth-map"))),
            realm: text(realm).unwrap_or_default(),
        }))
    }
}

/// ingress-nginx's client-certificate annotations (`auth-tls-*`), after
/// the prefix.
pub const AUTH_TLS_SECRET: &str = "nginx.ingress.kubernetes.io/auth-tls-secret";
pub const AUTH_TLS_VERIFY_CLIENT: &str = "nginx.ingress.kubernetes.io/auth-tls-verify-client";
pub const AUTH_TLS_VERIFY_DEPTH: &str = "nginx.ingress.kubernetes.io/auth-tls-verify-depth";
pub const AUTH_TLS_ERROR_PAGE: &str = "nginx.ingress.kubernetes.io/auth-tls-error-page";
pub const AUTH_TLS_PASS_CERTIFICATE: &str =
    "nginx.ingress.kubernetes.io/auth-tls-pass-certificate-to-upstream";
pub const AUTH_TLS_MATCH_CN: &str = "nginx.ingress.kubernetes.io/auth-tls-match-cn";

/// The six `auth-tls-*` annotations teapot serves.
pub const AUTH_TLS_KEYS: [&str; 6] = [
    AUTH_TLS_SECRET,
    AUTH_TLS_VERIFY_CLIENT,
    AUTH_TLS_VERIFY_DEPTH,
    AUTH_TLS_ERROR_PAGE,
    AUTH_TLS_PASS_CERTIFICATE,
    AUTH_TLS_MATCH_CN,
];

/// `auth-tls-verify-client`: what a client without a good certificate
/// gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyClient {
    /// `on` (the default): a certificate verified against the CA bundle
    /// is required.
    On,
    /// `optional`: a certificate is asked for; one that is sent must
    /// verify, none at all is served.
    Optional,
    /// `optional_no_ca`: a certificate is asked for and passed on, never
    /// verified against the bundle (the backend judges it).
    OptionalNoCa,
}

/// An Ingress's client-certificate settings, read together: each value
/// parsed as the allowlist reads it, and the combinations ingress-nginx
/// would silently serve open (a verification without its CA Secret) are
/// errors instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthTls {
    /// `auth-tls-secret`: `(namespace, name)`, a bare name read in the
    /// Ingress's own namespace.
    pub secret: (String, String),
    pub verify: VerifyClient,
    /// `auth-tls-verify-depth` (default 1, and 0 means 1, as
    /// ingress-nginx): the client's leaf and `depth - 1` certificates
    /// above it up to a CA of the bundle.
    pub depth: u32,
    /// `auth-tls-error-page`: where a client that failed verification is
    /// redirected instead of getting 400.
    pub error_page: Option<String>,
    /// `auth-tls-pass-certificate-to-upstream`.
    pub pass_certificate: bool,
    /// `auth-tls-match-cn`: a pattern the subject must contain.
    pub match_cn: Option<String>,
}

/// The deepest `auth-tls-verify-depth` accepted: the client's leaf and
/// six intermediates, as far as webpki follows a chain (the proxy's
/// `compile::client_auth::MAX_DEPTH` is this constant).
pub const MAX_AUTH_TLS_DEPTH: u32 = 7;

impl AuthTls {
    /// Reads the `auth-tls-*` annotations of an Ingress of `namespace`:
    /// `Ok(None)` when it asks for no client certificate (none of them, or
    /// `auth-tls-verify-client: off` alone with its secret); each error is
    /// `(annotation key, why)`.
    pub fn read<'a>(
        namespace: &str,
        annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<Option<AuthTls>, Vec<(&'static str, String)>> {
        let mut values: [Option<AnnotationValue>; 6] = Default::default();
        let mut errors = Vec::new();
        let mut seen: Vec<&'static str> = Vec::new();
        for (key, value) in annotations {
            let Some(i) = AUTH_TLS_KEYS.iter().position(|k| k == key) else {
                continue;
            };
            seen.push(AUTH_TLS_KEYS[i]);
            match parse(ObjectKind::Ingress, key, value) {
                Ok(v) => values[i] = Some(v),
                Err(e) => errors.push((AUTH_TLS_KEYS[i], e.to_string())),
            }
        }
        if seen.is_empty() {
            return Ok(None);
        }
        let [secret, verify, depth, error_page, pass, match_cn] = values;
        let text = |v: Option<AnnotationValue>| match v {
            Some(AnnotationValue::Text(t)) => Some(t),
            _ => None,
        };
        let verify = match verify {
            Some(AnnotationValue::Word("off")) => None,
            Some(AnnotationValue::Word("optional")) => Some(VerifyClient::Optional),
            Some(AnnotationValue::Word("optional_no_ca")) => Some(VerifyClient::OptionalNoCa),
            _ => Some(VerifyClient::On),
        };
        let match_cn = text(match_cn);
        let secret = text(secret);
        // ingress-nginx turns client certificates off without a readable
        // secret, whatever verify-client says: an Ingress that asked for
        // them would be served to everyone.
        if !seen.contains(&AUTH_TLS_SECRET) && verify.is_some() {
            for key in seen.iter().copied() {
                if !errors.iter().any(|(k, _)| *k == key) {
                    errors.push((
                        key,
                        format!(
                            "needs {AUTH_TLS_SECRET}, the Secret whose ca.crt verifies client certificates; without it teapot would serve the Ingress to every client"
                        ),
                    ));
                }
            }
        }
        if verify.is_none() && match_cn.is_some() {
            errors.push((
                AUTH_TLS_MATCH_CN,
                format!(
                    "needs client certificates, but {AUTH_TLS_VERIFY_CLIENT} is \"off\" (ingress-nginx would refuse every request)"
                ),
            ));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let (Some(secret), Some(verify)) = (secret, verify) else {
            return Ok(None);
        };
        let (ns, name) = crate::names::namespaced_reference(secret.trim(), namespace);
        Ok(Some(AuthTls {
            secret: (ns.to_string(), name.to_string()),
            verify,
            depth: match depth {
                Some(AnnotationValue::Count(n)) if n > 0 => n,
                _ => 1,
            },
            error_page: text(error_page),
            pass_certificate: matches!(pass, Some(AnnotationValue::Bool(true))),
            match_cn,
        }))
    }
}

/// The trimmed, non-empty items of a comma-separated list.
fn items(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|i| !i.is_empty())
}

/// `scheme://host[:port]`, the host's first label possibly `*`
/// (ingress-nginx's origin rule), or `null`.
pub fn origin_ok(origin: &str) -> bool {
    if origin == "null" {
        return true;
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (rest, None),
    };
    let host = host.strip_prefix("*.").unwrap_or(host);
    !scheme.is_empty()
        && scheme.bytes().all(|b| b.is_ascii_lowercase())
        && !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && port
            .is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// An entry of the Gateway API CORS filter's `allowOrigins`: `*`, or
/// `scheme://host[:port]` whose host may be `*` or start with `*.` (a
/// greedy wildcard: any number of labels).
pub fn gateway_origin_ok(origin: &str) -> bool {
    if origin == "*" {
        return true;
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    match rest.strip_prefix('*') {
        Some("") => !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_lowercase()),
        Some(suffix) => suffix.starts_with('.') && origin_ok(&format!("{scheme}://x{suffix}")),
        None => origin != "null" && origin_ok(origin),
    }
}

/// `"10m"` -> `(10, "m")`: at most 12 leading ASCII digits, then the rest.
fn split_number(value: &str) -> Option<(u64, &str)> {
    let end = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    if end == 0 || end > 12 {
        return None;
    }
    let digits = value[..end].parse().ok()?;
    Some((digits, &value[end..]))
}

fn human_size(bytes: u64) -> String {
    const G: u64 = 1024 * 1024 * 1024;
    const M: u64 = 1024 * 1024;
    if bytes.is_multiple_of(G) {
        format!("{}g", bytes / G)
    } else if bytes.is_multiple_of(M) {
        format!("{}m", bytes / M)
    } else {
        format!("{bytes} bytes")
    }
}

fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    if d.subsec_millis() != 0 || s == 0 {
        format!("{}ms", d.as_millis())
    } else if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_prefixed_and_documented() {
        for spec in ALLOWLIST {
            assert!(
                spec.key.starts_with(PREFIX) || spec.key.starts_with(NGINX_PREFIX),
                "{}",
                spec.key
            );
            assert!(!spec.doc.is_empty() && !spec.applies_to.is_empty());
        }
        let mut keys: Vec<_> = ALLOWLIST.iter().map(|s| s.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), ALLOWLIST.len(), "duplicate keys");
    }

    #[test]
    fn typed_values() {
        use AnnotationValue::{Bool, Size, Word};
        let i = ObjectKind::Ingress;
        assert_eq!(parse(i, "teapot.dev/acme", "true"), Ok(Bool(true)));
        assert!(parse(i, "teapot.dev/acme", "True").is_err());
        assert!(parse(i, "teapot.dev/acme", "yes").is_err());
        assert_eq!(
            parse(i, "teapot.dev/max-body-size", "10m"),
            Ok(Size(10 * 1024 * 1024))
        );
        assert_eq!(parse(i, "teapot.dev/max-body-size", "0"), Ok(Size(0)));
        assert!(parse(i, "teapot.dev/max-body-size", "65g").is_err());
        assert!(parse(i, "teapot.dev/max-body-size", "10mb").is_err());
        assert!(parse(i, "teapot.dev/max-body-size", "-1").is_err());
        assert!(parse(i, "teapot.dev/max-body-size", "99999999999999999999").is_err());
        assert_eq!(parse(i, "teapot.dev/proxy-protocol", "v2"), Ok(Word("v2")));
        assert!(parse(i, "teapot.dev/proxy-protocol", "v1").is_err());
        let s = ObjectKind::Service;
        assert_eq!(
            parse(s, "teapot.dev/udp-idle-timeout", "90s"),
            Ok(AnnotationValue::Duration(Duration::from_secs(90)))
        );
        assert_eq!(
            parse(s, "teapot.dev/health-check-interval", "1500ms"),
            Ok(AnnotationValue::Duration(Duration::from_millis(1500)))
        );
        assert!(parse(s, "teapot.dev/udp-idle-timeout", "2h").is_err());
        assert!(parse(s, "teapot.dev/udp-idle-timeout", "500ms").is_err());
        assert!(parse(s, "teapot.dev/udp-idle-timeout", "1d").is_err());
        assert!(
            parse(
                s,
                "teapot.dev/source-uid",
                "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4"
            )
            .is_ok()
        );
        assert!(parse(s, "teapot.dev/source-uid", "0C9A").is_err());
        let t = "teapot.dev/health-check-unhealthy-threshold";
        assert_eq!(parse(s, t, "3"), Ok(AnnotationValue::Count(3)));
        for bad in ["0", "11", "3s", "-1", "", "99999999999999"] {
            assert!(parse(s, t, bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse(s, "teapot.dev/tcp-idle-timeout", "10m"),
            Ok(AnnotationValue::Duration(Duration::from_secs(600)))
        );
        assert!(matches!(
            parse(i, "teapot.dev/tcp-idle-timeout", "10m"),
            Err(AnnotationError::WrongKind { .. })
        ));
    }

    /// Exactly the values of `spec.ipFamilies` and `spec.ipFamilyPolicy`
    /// the Kubernetes API admits, as the agent writes them.
    #[test]
    fn ip_family_annotations_admit_exactly_the_kubernetes_values() {
        let s = ObjectKind::Service;
        for ok in ["IPv4", "IPv6", "IPv4,IPv6", "IPv6,IPv4"] {
            assert!(parse(s, "teapot.dev/ip-families", ok).is_ok(), "{ok}");
        }
        for bad in [
            "ipv4",
            "IPv4, IPv6",
            "IPv4,IPv4",
            "IPv4,IPv6,IPv4",
            "",
            "IPv5",
        ] {
            let e = parse(s, "teapot.dev/ip-families", bad).unwrap_err();
            assert!(e.to_string().contains("\"IPv4,IPv6\""), "{bad}: {e}");
        }
        for ok in ["SingleStack", "PreferDualStack", "RequireDualStack"] {
            assert!(parse(s, "teapot.dev/ip-family-policy", ok).is_ok(), "{ok}");
        }
        for bad in ["singlestack", "DualStack", ""] {
            assert!(
                parse(s, "teapot.dev/ip-family-policy", bad).is_err(),
                "{bad}"
            );
        }
        assert!(matches!(
            parse(ObjectKind::Ingress, "teapot.dev/ip-families", "IPv4"),
            Err(AnnotationError::WrongKind { .. })
        ));
    }

    #[test]
    fn refusals_say_why() {
        let i = ObjectKind::Ingress;
        let snippet = parse(i, "nginx.ingress.kubernetes.io/server-snippet", "x").unwrap_err();
        assert!(matches!(
            snippet,
            AnnotationError::InjectsConfiguration { .. }
        ));
        let said = snippet.to_string();
        assert!(
            said.contains("nginx.ingress.kubernetes.io/server-snippet") && said.contains("injects"),
            "{said}"
        );
        for key in [
            "configuration-snippet",
            "auth-snippet",
            "stream-snippet",
            "modsecurity-snippet",
            "configuration-x",
            "lua-resty-waf",
        ] {
            let e = parse(i, &format!("{NGINX_PREFIX}{key}"), "x").unwrap_err();
            assert!(
                matches!(e, AnnotationError::InjectsConfiguration { .. }),
                "{key}"
            );
        }
        let unserved =
            parse(i, "nginx.ingress.kubernetes.io/enable-modsecurity", "true").unwrap_err();
        let said = unserved.to_string();
        assert!(
            said.starts_with(
                "not served by teapot: nginx.ingress.kubernetes.io/enable-modsecurity"
            ) && said.contains("limit-rps"),
            "{said}"
        );
        assert_eq!(
            parse(i, "teapot.dev/nope", "x"),
            Err(AnnotationError::Unknown)
        );
        assert!(matches!(
            parse(i, "teapot.dev/udp-idle-timeout", "30s"),
            Err(AnnotationError::WrongKind { .. })
        ));
        assert_eq!(
            parse(i, "teapot.dev/acme", "true\n"),
            Err(AnnotationError::ControlCharacter)
        );
        assert_eq!(
            parse(i, "teapot.dev/acme", "true\u{202e}"),
            Err(AnnotationError::ControlCharacter)
        );
        assert_eq!(
            parse(i, "teapot.dev/acme", &"t".repeat(300)),
            Err(AnnotationError::TooLong(300))
        );
        let long = format!("10.0.0.0/8,{}", "10.1.0.0/16,".repeat(700));
        assert!(matches!(
            parse(
                i,
                "nginx.ingress.kubernetes.io/whitelist-source-range",
                &long
            ),
            Err(AnnotationError::TooLong(_))
        ));
        let e = parse(i, "teapot.dev/max-body-size", "1\"; ssl_engine x").unwrap_err();
        assert!(e.to_string().contains("is not a size"), "{e}");
    }

    #[test]
    fn ingress_nginx_values() {
        let i = ObjectKind::Ingress;
        let key = |n: &str| format!("{NGINX_PREFIX}{n}");
        let nets = |v: &str| parse(i, &key("whitelist-source-range"), v);
        assert_eq!(
            nets("10.0.0.0/8, 192.0.2.7 ,2001:db8::/32"),
            Ok(AnnotationValue::Cidrs(vec![
                "10.0.0.0/8".parse().unwrap(),
                "192.0.2.7/32".parse().unwrap(),
                "2001:db8::/32".parse().unwrap(),
            ]))
        );
        for bad in [
            "",
            "10.0.0.0/33",
            "example.com",
            "10.0.0.0/8; allow all",
            ",",
        ] {
            assert!(nets(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse(i, &key("limit-rps"), "5"),
            Ok(AnnotationValue::Count(5))
        );
        assert!(parse(i, &key("limit-rps"), "0").is_err());
        let origins = |v: &str| parse(i, &key("cors-allow-origin"), v);
        assert_eq!(origins("*"), Ok(AnnotationValue::List(vec!["*".into()])));
        assert_eq!(
            origins("https://A.example, https://*.b.example:8443"),
            Ok(AnnotationValue::List(vec![
                "https://a.example".into(),
                "https://*.b.example:8443".into()
            ]))
        );
        for bad in [
            "a.example",
            "https://a.example/path",
            "https://$host",
            "https://a:x",
            "a.example:8080, https://$host",
        ] {
            assert!(origins(bad).is_err(), "{bad:?}");
        }
        // As ingress-nginx, an entry that is no origin is dropped, the
        // others kept.
        assert_eq!(
            origins("origin.cors.com:8080, https://Origin2.cors.com, https://a/b"),
            Ok(AnnotationValue::List(vec![
                "https://origin2.cors.com".into()
            ]))
        );
        let methods = |v: &str| parse(i, &key("cors-allow-methods"), v);
        assert_eq!(
            methods("GET,POST"),
            Ok(AnnotationValue::List(vec!["GET".into(), "POST".into()]))
        );
        assert!(methods("GET; add_header x y").is_err());
        assert!(methods("*").is_err());
        assert!(parse(i, &key("cors-expose-headers"), "*").is_ok());
        let url = |v: &str| parse(i, &key("permanent-redirect"), v);
        assert!(url("https://www.example.com/x?y=1").is_ok());
        assert!(url("/app").is_ok());
        for bad in [
            "//evil",
            "javascript:x",
            "https://",
            "https://a b",
            "ftp://a",
        ] {
            assert!(url(bad).is_err(), "{bad:?}");
        }
        assert!(parse(i, &key("permanent-redirect-code"), "308").is_ok());
        // ingress-nginx's timeouts: plain seconds, within their ranges.
        assert_eq!(
            parse(i, &key("proxy-read-timeout"), "3600"),
            Ok(AnnotationValue::Count(3600))
        );
        for (name, bad) in [
            ("proxy-connect-timeout", "76"),
            ("proxy-read-timeout", "0"),
            ("proxy-send-timeout", "60s"),
        ] {
            let e = parse(i, &key(name), bad).unwrap_err();
            assert!(matches!(e, AnnotationError::BadValue { .. }), "{name}: {e}");
        }
        assert_eq!(
            parse(i, &key("from-to-www-redirect"), "true"),
            Ok(AnnotationValue::Bool(true))
        );
        assert!(parse(i, &key("use-regex"), "yes").is_err());
        assert!(parse(i, &key("permanent-redirect-code"), "200").is_err());
    }

    /// `custom-http-errors`: ingress-nginx's comma-separated codes, each
    /// once; `default-backend`: a Service name alone, never another
    /// namespace's.
    #[test]
    fn custom_error_codes_and_the_default_backend() {
        let i = ObjectKind::Ingress;
        let codes = |v: &str| parse(i, &format!("{NGINX_PREFIX}custom-http-errors"), v);
        assert_eq!(
            codes("503, 404,503"),
            Ok(AnnotationValue::Codes(vec![404, 503]))
        );
        assert_eq!(codes("599"), Ok(AnnotationValue::Codes(vec![599])));
        for bad in [
            "", "399", "600", "200", "40", "4040", "404;", "abc", "404,,x", "+404",
        ] {
            let e = codes(bad).unwrap_err();
            assert!(e.to_string().contains("from 400 to 599"), "{bad:?}: {e}");
        }
        let backend = |v: &str| parse(i, &format!("{NGINX_PREFIX}default-backend"), v);
        assert_eq!(
            backend("error-pages"),
            Ok(AnnotationValue::Text("error-pages".into()))
        );
        for bad in [
            "other/error-pages",
            "Error",
            "error-pages.other.svc",
            "",
            "-x",
        ] {
            let e = backend(bad).unwrap_err();
            assert!(e.to_string().contains("own namespace"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn auth_url_names_a_service_or_an_address() {
        let service = |name: &str, namespace: &str| AuthHost::Service {
            name: name.into(),
            namespace: namespace.into(),
        };
        let t = AuthTarget::parse("http://auth.shop.svc.cluster.local:9000/check?x=1").unwrap();
        assert_eq!(t.host, service("auth", "shop"));
        assert_eq!((t.port, &t.path[..]), (9000, "/check?x=1"));
        assert_eq!(t.authority, "auth.shop.svc.cluster.local:9000");
        let t = AuthTarget::parse("http://Auth.Shop.svc").unwrap();
        assert_eq!(
            (t.host, t.port, &t.path[..]),
            (service("auth", "shop"), 80, "/")
        );
        let t = AuthTarget::parse("http://[fd00:1::5]:8080?a").unwrap();
        assert_eq!(t.host, AuthHost::Address("fd00:1::5".parse().unwrap()));
        assert_eq!((t.port, &t.path[..]), (8080, "/?a"));
        for (bad, why) in [
            (
                "https://auth.shop.svc/",
                "https:// authentication URLs are not served",
            ),
            ("http://auth.example.com/", "teapot does not look names up"),
            ("http://auth.shop/", "teapot does not look names up"),
            ("http://a.b.c.svc/", "teapot does not look names up"),
            (
                "http://metadata.google.internal/",
                "teapot does not look names up",
            ),
            ("http://u:p@auth.shop.svc/", "user information"),
            ("http://auth.shop.svc:0/", "port"),
            ("http://auth.shop.svc:99999/", "port"),
            ("ftp://auth.shop.svc/", "not an http:// URL"),
        ] {
            let e = AuthTarget::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let i = ObjectKind::Ingress;
        let key = |n: &str| format!("{NGINX_PREFIX}{n}");
        assert!(parse(i, &key("auth-url"), "http://auth.shop.svc/x").is_ok());
        let refused = parse(i, &key("auth-url"), "https://auth.shop.svc/").unwrap_err();
        assert!(
            refused.to_string().contains("https:// is not served"),
            "{refused}"
        );
        assert_eq!(
            parse(i, &key("auth-method"), "POST"),
            Ok(AnnotationValue::Word("POST"))
        );
        assert!(parse(i, &key("auth-method"), "CONNECT").is_err());
        assert!(parse(i, &key("auth-response-headers"), "X-User, X-Email").is_ok());
        assert!(parse(i, &key("auth-response-headers"), "X-User: 1").is_err());
        for refused in [
            "Content-Length",
            "host",
            "X-Forwarded-For",
            "x-real-ip",
            "Connection",
        ] {
            assert!(auth_response_header_refused(refused).is_some(), "{refused}");
        }
        assert_eq!(auth_response_header_refused("X-Auth-Request-User"), None);
        // Underscore spellings a backend reads as the forwarding fields.
        for lookalike in [
            "X_Forwarded_For",
            "X_Real_IP",
            "x-forwarded_host",
            "Content_Length",
        ] {
            assert!(
                auth_response_header_refused(lookalike).is_some(),
                "{lookalike}"
            );
        }
        assert_eq!(auth_response_header_refused("X_Auth_Request_User"), None);
        // The rest of the auth-* family stays refused.
        for name in [
            "auth-proxy-set-headers",
            "auth-keepalive",
            "auth-tls-send-client-ca",
        ] {
            let e = parse(i, &key(name), "x").unwrap_err();
            assert!(
                matches!(e, AnnotationError::NotServed { .. }),
                "{name}: {e}"
            );
        }
        assert!(matches!(
            parse(i, &key("auth-snippet"), "x").unwrap_err(),
            AnnotationError::InjectsConfiguration { .. }
        ));
    }

    #[test]
    fn restrictions_teapot_does_not_serve_are_named() {
        for name in [
            "auth-type",
            "auth-secret",
            "auth-realm",
            "auth-tls-verify-client",
            "auth-tls-secret",
            "auth-tls-pass-certificate-to-upstream",
            "auth-proxy-set-headers",
            "auth-snippet",
            "configuration-snippet",
            "server-snippet",
            "limit-rate",
            "global-rate-limit",
            "enable-modsecurity",
            "whitelist-source-range",
            "denylist-source-range",
            "limit-rps",
            "auth-url",
            // Unknown: teapot cannot tell what it would have refused.
            "some-future-restriction",
        ] {
            assert!(restricts_access(name), "{name}");
        }
        for name in [
            "auth-cache-key",
            "auth-keepalive",
            "satisfy",
            "enable-global-auth",
            "limit-whitelist",
            "proxy-buffering",
            "mirror-target",
            "custom-headers",
            "server-alias",
            "enable-cors",
            "ssl-redirect",
        ] {
            assert!(!restricts_access(name), "{name}");
        }
        let map: std::collections::BTreeMap<String, String> = [
            // Served as basic only: digest is refused, never served open.
            ("auth-type", "digest"),
            // Served, but a value teapot cannot read.
            ("auth-tls-verify-client", "maybe"),
            ("configuration-snippet", "deny all;"),
            // Served, but a value teapot cannot read: not an open door.
            ("whitelist-source-range", "10.0.0.0/33"),
            ("limit-rps", "many"),
            // Unreadable, but its routes answer 503 already.
            ("auth-url", "https://auth.example/"),
            // Readable, but teapot would not copy X-Forwarded-User: the
            // client's would reach the backend in its place. (It writes
            // X-Forwarded-For itself.)
            (
                "auth-response-headers",
                "X-User, X-Forwarded-For, X_Forwarded_User",
            ),
            // Served and readable, or unserved and restricting nothing.
            ("denylist-source-range", "192.0.2.0/24"),
            ("proxy-buffering", "on"),
            ("enable-cors", "maybe"),
        ]
        .into_iter()
        .map(|(k, v)| (format!("{NGINX_PREFIX}{k}"), v.to_string()))
        .chain([("teapot.dev/acme".to_string(), "true".to_string())])
        .collect();
        let found = unserved_restrictions(ObjectKind::Ingress, &map);
        let fields: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                r#"metadata.annotations["nginx.ingress.kubernetes.io/auth-response-headers"]"#,
                r#"metadata.annotations["nginx.ingress.kubernetes.io/auth-tls-verify-client"]"#,
                r#"metadata.annotations["nginx.ingress.kubernetes.io/auth-type"]"#,
                r#"metadata.annotations["nginx.ingress.kubernetes.io/configuration-snippet"]"#,
                r#"metadata.annotations["nginx.ingress.kubernetes.io/limit-rps"]"#,
                r#"metadata.annotations["nginx.ingress.kubernetes.io/whitelist-source-range"]"#,
            ]
        );
        let why = found[0].1.to_string();
        assert!(
            why.contains("X_Forwarded_User") && !why.contains("X-Forwarded-For"),
            "{why}"
        );
        assert!(matches!(found[2].1, AnnotationError::BadValue { .. }));
        assert!(matches!(found[5].1, AnnotationError::BadValue { .. }));
    }

    #[test]
    fn basic_auth_is_read_together() {
        let read = |pairs: &[(&str, &str)]| BasicAuthAnnotations::read("shop", &nginx_map(pairs));
        assert_eq!(read(&[("enable-cors", "true")]), Ok(None));
        let auth = read(&[
            ("auth-type", "basic"),
            ("auth-secret", "users"),
            ("auth-realm", "Staff only"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(auth.secret, ("shop".to_string(), "users".to_string()));
        assert_eq!((auth.map, &auth.realm[..]), (false, "Staff only"));
        let map = read(&[
            ("auth-type", "basic"),
            ("auth-secret", "other/users"),
            ("auth-secret-type", "auth-map"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (map.secret.0.as_str(), map.map, map.realm.as_str()),
            ("other", true, "")
        );
        // What ingress-nginx would serve open is an error here.
        let keys = |r: Result<_, Vec<(&'static str, String)>>| -> Vec<&'static str> {
            r.unwrap_err().into_iter().map(|(k, _)| k).collect()
        };
        assert_eq!(keys(read(&[("auth-secret", "users")])), [AUTH_SECRET]);
        assert_eq!(keys(read(&[("auth-type", "basic")])), [AUTH_SECRET]);
        assert_eq!(
            keys(read(&[("auth-type", "digest"), ("auth-secret", "u")])),
            [AUTH_TYPE]
        );
    }

    fn nginx_map(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (format!("{NGINX_PREFIX}{k}"), v.to_string()))
            .collect()
    }

    /// Each `auth-tls-*` value as ingress-nginx writes it, and every bad
    /// one refused naming what it should be.
    #[test]
    fn auth_tls_values() {
        let i = ObjectKind::Ingress;
        let p = |name: &str, v: &str| parse(i, &format!("{NGINX_PREFIX}auth-tls-{name}"), v);
        for ok in ["shop/client-ca", "client-ca", "shop/ca.v2"] {
            assert_eq!(
                p("secret", ok),
                Ok(AnnotationValue::Text(ok.into())),
                "{ok}"
            );
        }
        for bad in [
            "", "/ca", "shop/", "Shop/ca", "a/b/c", "shop/ca;", "shop/c a",
        ] {
            let e = p("secret", bad).unwrap_err();
            assert!(e.to_string().contains("NAMESPACE/NAME"), "{bad:?}: {e}");
        }
        for ok in ["on", "off", "optional", "optional_no_ca"] {
            assert_eq!(
                p("verify-client", ok),
                Ok(AnnotationValue::Word(ok)),
                "{ok}"
            );
        }
        for bad in ["On", "true", "optional_no_ca ", "required"] {
            let e = p("verify-client", bad).unwrap_err();
            assert!(e.to_string().contains("\"optional_no_ca\""), "{bad:?}: {e}");
        }
        assert_eq!(p("verify-depth", "0"), Ok(AnnotationValue::Count(0)));
        assert_eq!(p("verify-depth", "7"), Ok(AnnotationValue::Count(7)));
        for bad in ["8", "-1", "1s", ""] {
            assert!(p("verify-depth", bad).is_err(), "{bad:?}");
        }
        assert!(p("error-page", "https://login.example/cert-error.html").is_ok());
        assert!(p("error-page", "/cert-error").is_ok());
        for bad in ["javascript:alert(1)", "//evil", "https://a b"] {
            assert!(p("error-page", bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            p("pass-certificate-to-upstream", "true"),
            Ok(AnnotationValue::Bool(true))
        );
        assert!(p("pass-certificate-to-upstream", "on").is_err());
        assert!(p("match-cn", "CN=(alice|bob)").is_ok());
        for bad in [
            "alice",
            "CN=a\nssl_engine x",
            &format!("CN={}", "a".repeat(300)),
        ] {
            assert!(p("match-cn", bad).is_err(), "{bad:?}");
        }
        // The injection of CVE-2025-1097 is refused on its characters.
        assert_eq!(
            p(
                "match-cn",
                "CN=abc #(\n){}\n }}ssl_engine ../../../../proc/1/fd/20;#"
            ),
            Err(AnnotationError::ControlCharacter)
        );
    }

    #[test]
    fn auth_tls_settings_are_read_together() {
        let read = |pairs: &[(&str, &str)]| AuthTls::read("shop", &nginx_map(pairs));
        assert_eq!(read(&[("enable-cors", "true")]), Ok(None));
        assert_eq!(
            read(&[("auth-tls-secret", "client-ca")]),
            Ok(Some(AuthTls {
                secret: ("shop".into(), "client-ca".into()),
                verify: VerifyClient::On,
                depth: 1,
                error_page: None,
                pass_certificate: false,
                match_cn: None,
            }))
        );
        let all = read(&[
            ("auth-tls-secret", "other/ca"),
            ("auth-tls-verify-client", "optional_no_ca"),
            ("auth-tls-verify-depth", "0"),
            ("auth-tls-error-page", "/denied"),
            ("auth-tls-pass-certificate-to-upstream", "true"),
            ("auth-tls-match-cn", "CN=(a|b)"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(all.secret, ("other".into(), "ca".into()));
        assert_eq!((all.verify, all.depth), (VerifyClient::OptionalNoCa, 1));
        assert_eq!(all.error_page.as_deref(), Some("/denied"));
        assert!(all.pass_certificate);
        assert_eq!(all.match_cn.as_deref(), Some("CN=(a|b)"));
        let depth = read(&[("auth-tls-secret", "ca"), ("auth-tls-verify-depth", "3")]);
        assert_eq!(depth.unwrap().unwrap().depth, 3);
        // Off: no certificate asked for, the secret unused.
        let off = [("auth-tls-secret", "ca"), ("auth-tls-verify-client", "off")];
        assert_eq!(read(&off), Ok(None));
        assert_eq!(read(&[("auth-tls-verify-client", "off")]), Ok(None));
        // Asked for without the CA: ingress-nginx would serve everyone.
        let errors = read(&[
            ("auth-tls-verify-client", "on"),
            ("auth-tls-match-cn", "CN=a"),
        ])
        .unwrap_err();
        let keys: Vec<&str> = errors.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, [AUTH_TLS_MATCH_CN, AUTH_TLS_VERIFY_CLIENT]);
        assert!(
            errors[0]
                .1
                .contains("needs nginx.ingress.kubernetes.io/auth-tls-secret")
        );
        let errors = read(&[("auth-tls-pass-certificate-to-upstream", "true")]).unwrap_err();
        assert_eq!(errors[0].0, AUTH_TLS_PASS_CERTIFICATE);
        // A bad value is named once, for what it is.
        let errors = read(&[
            ("auth-tls-secret", "a/b/c"),
            ("auth-tls-verify-client", "yes"),
        ])
        .unwrap_err();
        let keys: Vec<&str> = errors.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, [AUTH_TLS_SECRET, AUTH_TLS_VERIFY_CLIENT]);
        assert!(errors[1].1.contains("\"optional\""), "{}", errors[1].1);
        // A subject check that could never pass is no open door, but no
        // setting to serve either.
        let errors = read(&[
            ("auth-tls-secret", "ca"),
            ("auth-tls-verify-client", "off"),
            ("auth-tls-match-cn", "CN=a"),
        ])
        .unwrap_err();
        assert_eq!(errors[0].0, AUTH_TLS_MATCH_CN);
        assert!(errors[0].1.contains("\"off\""), "{}", errors[0].1);
    }
}
