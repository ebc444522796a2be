//! The `RouteTrafficPolicy` custom resource: client address lists, rate
//! limits, in-flight limits and custom error pages for HTTPRoute and
//! GRPCRoute rules, what the Gateway API has no filter for and Ingresses get from ingress-nginx's
//! annotations. Attached GEP-713 style (`targetRefs`, a rule by its `name`
//! as `sectionName`).
//!
//! Its meaning is the annotations' own: [`RouteTrafficPolicySpec::annotations`]
//! writes the spec as the ingress-nginx annotations it stands for, which
//! the proxy compiles with an Ingress's reader and the admission policy
//! checks with their parsers (`crate::admission::route_traffic_value_errors`),
//! so there is one reading of a CIDR or a limit, with errors named by the
//! policy's own fields.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group and version of [`RouteTrafficPolicy`].
pub const API_VERSION: &str = "teapot.dev/v1alpha1";
/// The kind's name.
pub const KIND: &str = "RouteTrafficPolicy";

/// Spec of a RouteTrafficPolicy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "teapot.dev",
    version = "v1alpha1",
    kind = "RouteTrafficPolicy",
    plural = "routetrafficpolicies",
    shortname = "rtp",
    namespaced,
    status = "RouteTrafficPolicyStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct RouteTrafficPolicySpec {
    /// The routes (HTTPRoute, GRPCRoute) of this namespace the policy
    /// applies to; `sectionName` names one rule by its `name`.
    pub target_refs: Vec<RouteTrafficPolicyTargetRef>,
    /// Which client addresses may use the routes (ingress-nginx's
    /// `whitelist-source-range` and `denylist-source-range`); others get 403.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_addresses: Option<ClientAddresses>,
    /// Requests per client address (ingress-nginx's `limit-rps`,
    /// `limit-rpm`, `limit-burst-multiplier`, `limit-whitelist`); over it, 429.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// Requests per window for each key, counted over the whole fleet
    /// (ingress-nginx's `global-rate-limit`, `global-rate-limit-window`,
    /// `global-rate-limit-key`, `global-rate-limit-ignored-cidrs`); over
    /// it, 429.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_rate_limit: Option<GlobalRateLimit>,
    /// Requests each client address may have in flight at once
    /// (ingress-nginx's `limit-connections`); one more gets 503.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_per_client: Option<u32>,
    /// Responses replaced by an error page (ingress-nginx's
    /// `custom-http-errors` with `default-backend`): a response of one of
    /// `codes` is replaced by what `backend` answers to a request telling
    /// it the code (`X-Code`, `X-Format`, `X-Original-URI`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_errors: Option<CustomErrors>,
    /// Users a request must be one of (ingress-nginx's `auth-type: basic`
    /// with `auth-secret` and `auth-realm`): the htpasswd lines of a Secret
    /// of the policy's own namespace (key `auth`); without a user and
    /// password of it, 401 with `WWW-Authenticate: Basic realm="..."`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    /// How fast each response body goes to the client (ingress-nginx's
    /// `limit-rate` and `limit-rate-after`): per request, per stream on
    /// HTTP/2; the backend is read no faster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    /// How the endpoint tried first is chosen (ingress-nginx's
    /// `load-balance`): `round_robin` (the default) or `ewma`, the faster
    /// of two endpoints at random by their decayed response latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balance: Option<String>,
    /// Whether passing one of `clientAddresses`' allow-list, `basicAuth`
    /// and the rule's ExternalAuth filter is enough (`any`) or each must
    /// pass (`all`, the default): ingress-nginx's `satisfy`. The deny-list
    /// always applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub satisfy: Option<String>,
    /// The ExternalAuth filter's answers kept per key (ingress-nginx's
    /// `auth-cache-key` and `auth-cache-duration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_cache: Option<AuthCache>,
    /// How requests are written to HTTP/1 backends (ingress-nginx's
    /// `proxy-http-version` and `connection-proxy-header`).
    #[serde(
        rename = "backendHTTP",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub backend_http: Option<BackendHttp>,
    /// Bodies held per request instead of streamed (ingress-nginx's
    /// `proxy-request-buffering`, `client-body-buffer-size`,
    /// `proxy-buffering`, `proxy-buffer-size`, `proxy-buffers-number`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffering: Option<Buffering>,
    /// `false`: the routes' HTTPS answers never advertise HTTP/3
    /// (`Alt-Svc`), as an Ingress's `teapot.dev/alt-svc: "false"`. By
    /// default they do wherever the fleet serves HTTP/3 and its path
    /// answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alt_svc: Option<bool>,
}

/// The request body read before the backend is contacted, the response
/// read ahead of the client; both off (streamed) unless `"on"`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Buffering {
    /// `"on"`: the request body is read (up to `requestBodySize`) before
    /// the backend is contacted and sent with a `Content-Length`; a longer
    /// one goes on streamed. `"off"`, the default: streamed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// Request body bytes held (default `8k`, at most `1m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_body_size: Option<String>,
    /// `"on"`: the backend's answer is read ahead of the client, up to
    /// `responseBuffers` times `responseBufferSize` (cut to 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// One response buffer's size (default `4k`, at most `1m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_buffer_size: Option<String>,
    /// Response buffers (default 4, 1 to 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_buffers: Option<u32>,
}

/// Answers of the authentication service kept, and for how long.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthCache {
    /// What an answer is kept under: nginx variables (`$remote_user`,
    /// `$http_NAME`, `$cookie_NAME`, `$arg_NAME`, `$host`,
    /// `$request_uri`, `$remote_addr`, at most 8) and literal text, e.g.
    /// `$http_authorization`. A request whose key expands to nothing is
    /// always asked about; at most 1024 answers per policy.
    pub key: String,
    /// How long, by the answer's status: items of status codes (or `any`)
    /// and a time, e.g. `200 202 10m, 401 30s` (default `200 202 401
    /// 5m`; at most 8 items, each at most 1h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
}

/// The HTTP/1 version and `Connection` field of the requests to the
/// backends.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendHttp {
    /// `"1.0"` or `"1.1"` (the default). With 1.0 a body of unknown length
    /// gets 411 and connections are not reused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The `Connection` field sent (comma-separated HTTP tokens, at most
    /// 64 characters, e.g. `keep-alive` or `close`; with `close` the
    /// connection is not reused). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
}

/// A response's pace to the client.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Bandwidth {
    /// KiB per second, 1 to 1048576 (0: no limit).
    #[serde(rename = "limitKiBPerSecond")]
    pub limit_kib_per_second: u32,
    /// KiB of each response body sent at full speed first, at most
    /// 1048576 (default 0).
    #[serde(
        rename = "unlimitedKiB",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub unlimited_kib: Option<u32>,
}

/// Basic authentication: whose users, and the realm the 401 names.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    /// A Secret of the policy's own namespace whose key `auth` holds
    /// htpasswd lines (bcrypt up to cost 12, apr1, `{SHA}`).
    pub secret_ref: LocalSecretRef,
    /// The realm of the 401's `WWW-Authenticate` (default empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realm: Option<String>,
}

/// A Secret of the referring object's own namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalSecretRef {
    pub name: String,
}

/// Which responses an error page replaces, and who serves the page.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomErrors {
    /// The response statuses replaced (400 to 599).
    pub codes: Vec<u16>,
    /// The Service of the policy's own namespace that answers the page.
    pub backend: ErrorPageBackend,
}

/// A Service port of the policy's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorPageBackend {
    pub name: String,
    pub port: i32,
}

/// A route the policy attaches to, in this namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteTrafficPolicyTargetRef {
    /// `gateway.networking.k8s.io`.
    pub group: String,
    /// `HTTPRoute` or `GRPCRoute`.
    pub kind: String,
    pub name: String,
    /// The policy's own namespace, if given: policy attachment never
    /// crosses namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The `name` of one of the route's rules; omitted, every rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// Client networks (CIDRs or addresses): a client in `deny` is refused;
/// else, when `allow` is not empty, a client outside it is refused.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientAddresses {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// Request rates per client address; a request must pass each one set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateLimit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// How many times the rate a client may send at once (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_multiplier: Option<u32>,
    /// Client networks neither the rate limits nor `inFlightPerClient`
    /// apply to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exempt: Vec<String>,
}

/// A rate shared by the fleet's replicas.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GlobalRateLimit {
    /// Requests per window for each key (0 to 1000000; 0: no limit).
    pub requests: u32,
    /// The window: digits and `s`, `m` or `h`, from 1s to 1h (`1m`).
    pub window: String,
    /// What is counted per (default `$remote_addr`): `$remote_addr`,
    /// `$host`, `$request_uri`, `$http_NAME`, `$cookie_NAME`, `$arg_NAME`
    /// (at most 8) and literal text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Client networks neither counted nor refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
}

/// What the proxy fleet reports: per target, whether the policy applies.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteTrafficPolicyStatus {
    #[serde(default)]
    pub targets: Vec<RouteTrafficPolicyTargetStatus>,
}

/// One target's conditions (`Accepted`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteTrafficPolicyTargetStatus {
    pub target_ref: RouteTrafficPolicyTargetRef,
    #[serde(default)]
    pub conditions: Vec<RouteTrafficPolicyCondition>,
}

/// A condition, in the shape of the Kubernetes one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteTrafficPolicyCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// One field of the spec as the ingress-nginx annotation it stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnotationField {
    /// The spec's field, as errors name it (`spec.rateLimit.requestsPerSecond`).
    pub field: &'static str,
    /// The annotation's name after `nginx.ingress.kubernetes.io/`.
    pub name: &'static str,
    /// The annotation's value (a list as ingress-nginx writes it, comma-separated).
    pub value: String,
    /// A list's items, each checked on its own so an error names its index.
    pub items: Vec<String>,
}

impl RouteTrafficPolicySpec {
    /// The spec as the ingress-nginx annotations it stands for, each with
    /// the field it came from. Empty lists are left out, as an Ingress
    /// without the annotation.
    pub fn annotations(&self) -> Vec<AnnotationField> {
        let mut out = Vec::new();
        let mut list = |field: &'static str, name: &'static str, items: &[String]| {
            if !items.is_empty() {
                out.push(AnnotationField {
                    field,
                    name,
                    value: items.join(","),
                    items: items.to_vec(),
                });
            }
        };
        if let Some(c) = &self.client_addresses {
            list(
                "spec.clientAddresses.allow",
                "whitelist-source-range",
                &c.allow,
            );
            list(
                "spec.clientAddresses.deny",
                "denylist-source-range",
                &c.deny,
            );
        }
        if let Some(r) = &self.rate_limit {
            list("spec.rateLimit.exempt", "limit-whitelist", &r.exempt);
        }
        if let Some(g) = &self.global_rate_limit {
            list(
                "spec.globalRateLimit.ignored",
                "global-rate-limit-ignored-cidrs",
                &g.ignored,
            );
        }
        if let Some(e) = &self.custom_errors {
            let codes: Vec<String> = e.codes.iter().map(u16::to_string).collect();
            list("spec.customErrors.codes", "custom-http-errors", &codes);
            out.push(AnnotationField {
                field: "spec.customErrors.backend.name",
                name: "default-backend",
                value: e.backend.name.clone(),
                items: Vec::new(),
            });
        }
        if let Some(b) = &self.basic_auth {
            out.push(AnnotationField {
                field: "spec.basicAuth.secretRef.name",
                name: "auth-secret",
                value: b.secret_ref.name.clone(),
                items: Vec::new(),
            });
            if let Some(realm) = &b.realm {
                out.push(AnnotationField {
                    field: "spec.basicAuth.realm",
                    name: "auth-realm",
                    value: realm.clone(),
                    items: Vec::new(),
                });
            }
        }
        let mut text = |field: &'static str, name: &'static str, value: Option<&String>| {
            if let Some(value) = value {
                out.push(AnnotationField {
                    field,
                    name,
                    value: value.clone(),
                    items: Vec::new(),
                });
            }
        };
        text(
            "spec.loadBalance",
            "load-balance",
            self.load_balance.as_ref(),
        );
        text("spec.satisfy", "satisfy", self.satisfy.as_ref());
        if let Some(c) = &self.auth_cache {
            text("spec.authCache.key", "auth-cache-key", Some(&c.key));
            text(
                "spec.authCache.duration",
                "auth-cache-duration",
                c.duration.as_ref(),
            );
        }
        if let Some(b) = &self.buffering {
            text(
                "spec.buffering.request",
                "proxy-request-buffering",
                b.request.as_ref(),
            );
            text(
                "spec.buffering.requestBodySize",
                "client-body-buffer-size",
                b.request_body_size.as_ref(),
            );
            text(
                "spec.buffering.response",
                "proxy-buffering",
                b.response.as_ref(),
            );
            text(
                "spec.buffering.responseBufferSize",
                "proxy-buffer-size",
                b.response_buffer_size.as_ref(),
            );
        }
        if let Some(g) = &self.global_rate_limit {
            text(
                "spec.globalRateLimit.window",
                "global-rate-limit-window",
                Some(&g.window),
            );
            text(
                "spec.globalRateLimit.key",
                "global-rate-limit-key",
                g.key.as_ref(),
            );
        }
        if let Some(b) = &self.backend_http {
            text(
                "spec.backendHTTP.version",
                "proxy-http-version",
                b.version.as_ref(),
            );
            text(
                "spec.backendHTTP.connection",
                "connection-proxy-header",
                b.connection.as_ref(),
            );
        }
        let mut count = |field: &'static str, name: &'static str, n: Option<u32>| {
            if let Some(n) = n {
                out.push(AnnotationField {
                    field,
                    name,
                    value: n.to_string(),
                    items: Vec::new(),
                });
            }
        };
        if let Some(r) = &self.rate_limit {
            count(
                "spec.rateLimit.requestsPerSecond",
                "limit-rps",
                r.requests_per_second,
            );
            count(
                "spec.rateLimit.requestsPerMinute",
                "limit-rpm",
                r.requests_per_minute,
            );
            count(
                "spec.rateLimit.burstMultiplier",
                "limit-burst-multiplier",
                r.burst_multiplier,
            );
        }
        if let Some(g) = &self.global_rate_limit {
            count(
                "spec.globalRateLimit.requests",
                "global-rate-limit",
                Some(g.requests),
            );
        }
        count(
            "spec.inFlightPerClient",
            "limit-connections",
            self.in_flight_per_client,
        );
        if let Some(b) = &self.bandwidth {
            count(
                "spec.bandwidth.limitKiBPerSecond",
                "limit-rate",
                Some(b.limit_kib_per_second),
            );
            count(
                "spec.bandwidth.unlimitedKiB",
                "limit-rate-after",
                b.unlimited_kib,
            );
        }
        if let Some(b) = &self.buffering {
            count(
                "spec.buffering.responseBuffers",
                "proxy-buffers-number",
                b.response_buffers,
            );
        }
        out
    }
}

/// The CRD as YAML, for the charts.
pub fn crd_yaml() -> String {
    crate::tenant::generated_crd_yaml::<RouteTrafficPolicy>("api/src/route_policy.rs")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> RouteTrafficPolicySpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn fields_become_the_annotations_they_stand_for() {
        let s = spec(
            "targetRefs: []\nclientAddresses: {allow: [10.0.0.0/8, 192.168.1.1]}\nrateLimit: {requestsPerSecond: 10, burstMultiplier: 2, exempt: [10.1.0.0/16]}\ninFlightPerClient: 20\n",
        );
        let got: Vec<(&str, String)> = s
            .annotations()
            .into_iter()
            .map(|a| (a.field, format!("{}={}", a.name, a.value)))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "spec.clientAddresses.allow",
                    "whitelist-source-range=10.0.0.0/8,192.168.1.1".into()
                ),
                (
                    "spec.rateLimit.exempt",
                    "limit-whitelist=10.1.0.0/16".into()
                ),
                ("spec.rateLimit.requestsPerSecond", "limit-rps=10".into()),
                (
                    "spec.rateLimit.burstMultiplier",
                    "limit-burst-multiplier=2".into()
                ),
                ("spec.inFlightPerClient", "limit-connections=20".into()),
            ]
        );
    }

    #[test]
    fn custom_errors_are_custom_http_errors_and_default_backend() {
        let s = spec(
            "targetRefs: []\ncustomErrors: {codes: [404, 503], backend: {name: errors, port: 8080}}\n",
        );
        let got: Vec<(&str, String, Vec<String>)> = s
            .annotations()
            .into_iter()
            .map(|a| (a.field, format!("{}={}", a.name, a.value), a.items))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "spec.customErrors.codes",
                    "custom-http-errors=404,503".into(),
                    vec!["404".to_string(), "503".to_string()]
                ),
                (
                    "spec.customErrors.backend.name",
                    "default-backend=errors".into(),
                    Vec::new()
                ),
            ]
        );
    }

    #[test]
    fn bandwidth_is_limit_rate_and_limit_rate_after() {
        let s = spec("targetRefs: []\nbandwidth: {limitKiBPerSecond: 64, unlimitedKiB: 512}\n");
        let got: Vec<(&str, String)> = s
            .annotations()
            .into_iter()
            .map(|a| (a.field, format!("{}={}", a.name, a.value)))
            .collect();
        assert_eq!(
            got,
            [
                ("spec.bandwidth.limitKiBPerSecond", "limit-rate=64".into()),
                ("spec.bandwidth.unlimitedKiB", "limit-rate-after=512".into()),
            ]
        );
    }

    #[test]
    fn balancing_satisfy_auth_cache_and_backend_http_are_their_annotations() {
        let s = spec(
            "targetRefs: []\nloadBalance: ewma\nsatisfy: any\nauthCache: {key: $http_authorization, duration: 200 10m}\nbackendHTTP: {version: '1.0', connection: keep-alive}\n",
        );
        let got: Vec<(&str, String)> = s
            .annotations()
            .into_iter()
            .map(|a| (a.field, format!("{}={}", a.name, a.value)))
            .collect();
        assert_eq!(
            got,
            [
                ("spec.loadBalance", "load-balance=ewma".into()),
                ("spec.satisfy", "satisfy=any".into()),
                (
                    "spec.authCache.key",
                    "auth-cache-key=$http_authorization".into()
                ),
                (
                    "spec.authCache.duration",
                    "auth-cache-duration=200 10m".into()
                ),
                ("spec.backendHTTP.version", "proxy-http-version=1.0".into()),
                (
                    "spec.backendHTTP.connection",
                    "connection-proxy-header=keep-alive".into()
                ),
            ]
        );
    }

    /// Hostile values are refused at admission by the annotations' own
    /// parsers, each named by the policy's field.
    #[test]
    fn values_past_the_bounds_are_refused_by_field() {
        let s = spec(
            "targetRefs: []\nloadBalance: least_conn\nsatisfy: some\nauthCache: {key: $http_a, duration: 200 2h}\nbackendHTTP: {version: '2', connection: \"close\\r\\nx-evil: 1\"}\n",
        );
        let errors = crate::admission::route_traffic_value_errors(&s);
        let fields: Vec<&str> = errors.iter().map(|(f, _)| f.as_str()).collect();
        for field in [
            "spec.loadBalance",
            "spec.satisfy",
            "spec.backendHTTP.version",
            "spec.backendHTTP.connection",
        ] {
            assert!(fields.contains(&field), "{field}: {errors:?}");
        }
        let long = format!(
            "targetRefs: []\nbackendHTTP: {{connection: {}}}\n",
            "k".repeat(65)
        );
        let errors = crate::admission::route_traffic_value_errors(&spec(&long));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].0, "spec.backendHTTP.connection");
        let fine = spec(
            "targetRefs: []\nloadBalance: ewma\nsatisfy: any\nauthCache: {key: $remote_user}\nbackendHTTP: {version: '1.0', connection: close}\n",
        );
        assert_eq!(crate::admission::route_traffic_value_errors(&fine), []);
    }

    #[test]
    fn buffering_is_its_annotations() {
        let s = spec(
            "targetRefs: []\nbuffering: {request: 'on', requestBodySize: 64k, response: 'on', responseBufferSize: 8k, responseBuffers: 8}\n",
        );
        let got: Vec<(&str, String)> = s
            .annotations()
            .into_iter()
            .map(|a| (a.field, format!("{}={}", a.name, a.value)))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "spec.buffering.request",
                    "proxy-request-buffering=on".into()
                ),
                (
                    "spec.buffering.requestBodySize",
                    "client-body-buffer-size=64k".into()
                ),
                ("spec.buffering.response", "proxy-buffering=on".into()),
                (
                    "spec.buffering.responseBufferSize",
                    "proxy-buffer-size=8k".into()
                ),
                (
                    "spec.buffering.responseBuffers",
                    "proxy-buffers-number=8".into()
                ),
            ]
        );
    }

    #[test]
    fn global_rate_limit_is_its_four_annotations() {
        let s = spec(
            "targetRefs: []\nglobalRateLimit: {requests: 100, window: 1m, key: $http_x_api_key, ignored: [10.0.0.0/8]}\n",
        );
        let got: Vec<(&str, String)> = s
            .annotations()
            .into_iter()
            .map(|a| (a.field, format!("{}={}", a.name, a.value)))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "spec.globalRateLimit.ignored",
                    "global-rate-limit-ignored-cidrs=10.0.0.0/8".into()
                ),
                (
                    "spec.globalRateLimit.window",
                    "global-rate-limit-window=1m".into()
                ),
                (
                    "spec.globalRateLimit.key",
                    "global-rate-limit-key=$http_x_api_key".into()
                ),
                (
                    "spec.globalRateLimit.requests",
                    "global-rate-limit=100".into()
                ),
            ]
        );
    }

    #[test]
    fn checked_in_crd_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/crd/routetrafficpolicy.yaml");
        let checked_in = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            checked_in == crd_yaml(),
            "api/crd/routetrafficpolicy.yaml is stale: run `cargo run -p teapot-api --bin crdgen`"
        );
    }

    #[test]
    fn the_crd_is_namespaced_with_its_schema() {
        let y = crd_yaml();
        assert!(y.contains("routetrafficpolicies"));
        assert!(y.contains("scope: Namespaced"));
        assert!(y.contains("requestsPerSecond"));
    }
}
