//! The [`Router`] both engines route with (HTTP/1: crate::plane::h1,
//! HTTP/2: crate::plane::h2): `Arc` handles to the snapshot, metrics,
//! ACME, TLS and the access log, and the request and response edits of
//! HTTP/2's backend exchanges.
//!
//! Each request reads the current snapshot once (an `arc-swap` load), so a
//! reload in the middle of a request never changes where that request goes,
//! and keep-alive connections pick up new routes on their next request.

use std::sync::Arc;
use std::time::Duration;

use http::header::{CONNECTION, CONTENT_LENGTH, HOST, SERVER, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use teapot_h1::ConnInfo;

use crate::compile::gateway::table::HeaderEdits as GatewayHeaderEdits;
use crate::compile::routes::Route;
use crate::compile::snapshot::SnapshotHandle;
use crate::plane::access_log::AccessLog;
use crate::plane::decide::GatewayForward;
use crate::plane::edge::EdgeConfig;
use crate::plane::filters::{self, HeaderOp};
use crate::plane::forwarding;
use crate::plane::metrics::{Metrics, Series};
use crate::plane::trace;
use crate::plane::trace::Ids;

/// Value of the `Server` header on responses that have none.
pub const SERVER_NAME: &str = "teapot";

/// Upstream timeouts and retry bounds.
#[derive(Clone, Debug)]
pub struct UpstreamOptions {
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    /// How long a pooled upstream connection may sit idle.
    pub pool_idle_timeout: Duration,
    /// Endpoints tried per request when connects fail.
    pub max_connect_attempts: u32,
    /// External authentication's timeout and per-tenant bound
    /// (crate::plane::traffic::auth).
    pub auth: crate::plane::traffic::auth::AuthLimits,
}

impl Default for UpstreamOptions {
    fn default() -> Self {
        UpstreamOptions {
            connect_timeout: Duration::from_secs(3),
            read_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            pool_idle_timeout: Duration::from_secs(60),
            max_connect_attempts: 3,
            auth: crate::plane::traffic::auth::AuthLimits::default(),
        }
    }
}

/// Bodies of the answers to a backend that failed or did not answer.
pub const BAD_GATEWAY_BODY: &str = "502 the backend could not be reached\n";
pub const GATEWAY_TIMEOUT_BODY: &str = "504 the backend did not answer in time\n";

/// Routes requests with the current snapshot, for both engines.
#[derive(Clone, Debug)]
pub struct Router {
    pub(super) snapshots: SnapshotHandle,
    pub(super) metrics: Metrics,
    pub(super) options: UpstreamOptions,
    pub(super) acme: Option<Arc<dyn crate::plane::AcmeResponder>>,
    pub(super) edge: EdgeConfig,
    /// The HTTPS listener's certificate choice, to refuse a request for a
    /// host its connection's certificate does not serve.
    pub(super) tls: Option<Arc<crate::plane::tls::SniResolver>>,
    pub(super) observe: Observe,
    /// `Alt-Svc` on HTTPS answers while HTTP/3 answers its self-probe
    /// (crate::plane::alt_svc); `None`: never (no `--http3`, turned off,
    /// or a listener HTTP/3 does not serve).
    pub(super) alt_svc: Option<Arc<crate::plane::alt_svc::Advertiser>>,
}

/// The access log and whose request IDs are kept.
#[derive(Clone, Debug, Default)]
pub struct Observe {
    pub access_log: AccessLog,
    /// Operator namespaces whose routes keep a client's `X-Request-Id`.
    pub trust_request_id: Arc<[Box<str>]>,
}

impl Router {
    pub fn new(snapshots: SnapshotHandle, metrics: Metrics, options: UpstreamOptions) -> Router {
        Router {
            snapshots,
            metrics,
            options,
            acme: None,
            edge: EdgeConfig::default(),
            tls: None,
            observe: Observe::default(),
            alt_svc: None,
        }
    }

    /// Advertises HTTP/3 on HTTPS answers (crate::plane::alt_svc).
    pub fn with_alt_svc(
        mut self,
        alt_svc: Option<Arc<crate::plane::alt_svc::Advertiser>>,
    ) -> Router {
        self.alt_svc = alt_svc;
        self
    }

    /// Whether an answer about `route` on `conn` carries `Alt-Svc` now:
    /// nothing is read past the first `None` or `false`, the probe's
    /// state (one atomic) last.
    #[inline]
    pub(super) fn alt_svc(
        &self,
        conn: &ConnInfo,
        route: &Route,
    ) -> Option<&crate::plane::alt_svc::Advertiser> {
        use crate::plane::alt_svc::{conn_advertises, route_advertises};
        let alt = self.alt_svc.as_deref()?;
        (route_advertises(route) && conn_advertises(conn) && alt.advertise()).then_some(alt)
    }

    /// The access log and request-ID trust (docs/operations.md).
    pub fn with_observe(mut self, observe: Observe) -> Router {
        self.observe = observe;
        self
    }

    /// The series of a request on `route` (`None`: unrouted), and whether
    /// its client's `X-Request-Id` is kept: only on an operator route
    /// whose namespace trusts it.
    pub(super) fn series_of(&self, route: Option<&Route>) -> (Arc<Series>, bool) {
        let tenant = route.and_then(|r| r.tenant()).map(|g| &*g.cluster);
        let name = route.map_or("", |r| &*r.ingress);
        let trusted = route.is_some_and(|r| r.tenant().is_none())
            && !self.observe.trust_request_id.is_empty()
            && name
                .split_once('/')
                .is_some_and(|(ns, _)| self.observe.trust_request_id.iter().any(|t| **t == *ns));
        (self.metrics.series.get(tenant, name), trusted)
    }

    /// Front-door limits (docs/edge.md).
    pub fn with_edge(mut self, edge: EdgeConfig) -> Router {
        self.edge = edge;
        self
    }

    /// Answers HTTP-01 validations from the ACME store.
    pub fn with_acme(mut self, acme: Option<Arc<dyn crate::plane::AcmeResponder>>) -> Router {
        self.acme = acme;
        self
    }

    /// Answers 421 to requests for a host the connection's certificate
    /// does not serve (crate::plane::tls::SniResolver::misdirected).
    pub fn with_tls(mut self, tls: Option<Arc<crate::plane::tls::SniResolver>>) -> Router {
        self.tls = tls;
        self
    }

    /// Whether a request for `authority` on a TLS connection to `local`
    /// that named `sni` must be answered 421 (RFC 9110 §15.5.20).
    pub(super) fn misdirected(
        &self,
        tls: bool,
        sni: Option<&str>,
        authority: &str,
        local: Option<std::net::SocketAddr>,
    ) -> bool {
        tls && self
            .tls
            .as_ref()
            .is_some_and(|r| r.misdirected(sni, authority, local))
    }
}

impl Router {
    /// The edits of a backend's response for HTTP/2: Gateway filters,
    /// hop-by-hop fields, `Server`.
    pub(super) fn edit_response(
        &self,
        status: StatusCode,
        headers: &mut HeaderMap,
        gateway: Option<&GatewayForward>,
    ) {
        if let Some(gateway) = gateway {
            for f in gateway.each() {
                apply_header_edits(&f.response_headers, false, headers);
            }
        }
        let switching = status == StatusCode::SWITCHING_PROTOCOLS;
        if has_hop_by_hop(headers) {
            for h in strip_hop_by_hop(headers.get_all(CONNECTION).iter(), switching) {
                headers.remove(&h);
            }
            if !switching {
                headers.remove(CONNECTION);
                headers.remove(UPGRADE);
            }
        }
        if !headers.contains_key(SERVER) {
            headers.insert(SERVER, HeaderValue::from_static(SERVER_NAME));
        }
    }

    /// How long to wait for the backend's answer: Gateway API timeouts
    /// bound it (`request` also covers it: teapot adds no other wait
    /// between the request and the backend).
    pub(super) fn read_timeout(&self, gateway: Option<&GatewayForward>) -> Duration {
        let mut read = self.options.read_timeout;
        if let Some(gateway) = gateway {
            for f in gateway.each() {
                for t in [f.backend_timeout, f.request_timeout].into_iter().flatten() {
                    read = read.min(t);
                }
            }
        }
        read
    }
}

/// The edits of an HTTP/2 request before it goes to its backend: new
/// request IDs (sent when teapot made them), hop-by-hop fields, Gateway
/// filters, forwarding fields (of `authority`, the client's). `Err`: a
/// rewrite made no valid target.
pub(super) fn edit_request(
    headers: &mut HeaderMap,
    uri: &mut Uri,
    conn: &ConnInfo,
    authority: &str,
    ids: Option<&Ids<'_>>,
    gateway: Option<&GatewayForward>,
) -> Result<(), http::Error> {
    if let Some(ids) = ids {
        if ids.request_id.is_new() {
            headers.insert(
                trace::REQUEST_ID,
                HeaderValue::from_bytes(ids.request_id.as_bytes())?,
            );
        }
        if ids.traceparent.is_new() {
            headers.insert(
                trace::TRACEPARENT,
                HeaderValue::from_bytes(ids.traceparent.as_bytes())?,
            );
        }
    }
    // Almost no request carries a hop-by-hop header: look before
    // building the list and removing (each removal scans the table).
    if has_hop_by_hop(headers) {
        for h in strip_hop_by_hop(headers.get_all(CONNECTION).iter(), false) {
            headers.remove(&h);
        }
        headers.remove(CONNECTION);
        headers.remove(UPGRADE);
    }
    if let Some(gateway) = gateway {
        apply_request_filters(gateway, headers, uri)?;
    }
    // The authority the client asked for, as HTTP/1 sends it: a
    // rewritten host is the backend's business, not the chain's.
    forwarding::apply(conn, authority, headers)
}

/// A TLS version as the access log spells it (HTTP/2 here, HTTP/1 in
/// crate::plane::h1).
pub(crate) fn tls_version(version: &str) -> &'static str {
    if version.contains("1.3") || version.contains("1_3") {
        "TLSv1.3"
    } else if version.contains("1.2") || version.contains("1_2") {
        "TLSv1.2"
    } else {
        "tls"
    }
}

/// A Gateway API rule's request filters: header edits and the Host,
/// then the URL rewrite (host and path, as HTTP/1's).
fn apply_request_filters(
    gateway: &GatewayForward,
    headers: &mut HeaderMap,
    uri: &mut Uri,
) -> Result<(), http::Error> {
    for f in gateway.each() {
        apply_header_edits(&f.request_headers, true, headers);
        if let Some(host) = filters::rewritten_host(f) {
            headers.insert(HOST, HeaderValue::from_str(host)?);
        }
    }
    let host = filters::last_host(gateway.each());
    let target = filters::chained_target(gateway.each(), uri.path(), uri.query());
    if target.is_none() && host.is_none() {
        return Ok(());
    }
    let target = target.unwrap_or_else(|| {
        uri.path_and_query()
            .map_or("/".to_string(), |p| p.as_str().to_string())
    });
    // An HTTP/2 request carries its authority in the URI: keep the URI
    // absolute then, with the rewritten host.
    let new = match (uri.scheme_str(), uri.authority()) {
        (Some(scheme), Some(authority)) => {
            let authority = host.unwrap_or(authority.as_str());
            format!("{scheme}://{authority}{target}")
        }
        _ => target,
    };
    *uri = new.parse::<Uri>()?;
    Ok(())
}

/// A Gateway filter's header changes ([`filters::header_ops`]) on an
/// HTTP/2 header map. Names and values were validated at load; one that
/// still does not fit a header is skipped rather than failing the request.
fn apply_header_edits(spec: &GatewayHeaderEdits, request: bool, map: &mut HeaderMap) {
    for op in filters::header_ops(spec, request) {
        match op {
            HeaderOp::Set(name, value) | HeaderOp::Append(name, value) => {
                let (Ok(n), Ok(v)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) else {
                    continue;
                };
                if matches!(op, HeaderOp::Set(..)) {
                    map.insert(n, v);
                } else {
                    map.append(n, v);
                }
            }
            HeaderOp::Remove(name) => {
                map.remove(name);
            }
        }
    }
}

/// Whether any header [`strip_hop_by_hop`] would drop may be present:
/// one pass over the names with the HTTP/1 engine's test
/// (`teapot_h1::is_connection_specific`, the one list for both versions),
/// cheaper than a hashed lookup per name for the few fields a request has.
pub(super) fn has_hop_by_hop(headers: &http::HeaderMap) -> bool {
    headers
        .keys()
        .any(|name| teapot_h1::is_connection_specific(name.as_str().as_bytes()))
}

/// Names of headers to drop: the connection-specific set
/// (`teapot_h1::CONNECTION_SPECIFIC`, `Connection` itself left to the
/// caller) plus whatever the `Connection` header lists. `Upgrade` survives
/// on upgrades.
fn strip_hop_by_hop<'a>(
    connection: impl Iterator<Item = &'a http::HeaderValue>,
    keep_upgrade: bool,
) -> Vec<HeaderName> {
    let mut out: Vec<HeaderName> = teapot_h1::CONNECTION_SPECIFIC
        .iter()
        .filter(|h| **h != "connection" && !(keep_upgrade && **h == "upgrade"))
        .map(|h| HeaderName::from_static(h))
        .collect();
    for value in connection {
        for token in value.to_str().unwrap_or("").split(',') {
            let token = token.trim();
            if token.is_empty()
                || token.eq_ignore_ascii_case("close")
                || token.eq_ignore_ascii_case("keep-alive")
                || (keep_upgrade && token.eq_ignore_ascii_case("upgrade"))
            {
                continue;
            }
            if let Ok(name) = HeaderName::from_bytes(token.to_ascii_lowercase().as_bytes()) {
                // Never let a client name the framing or routing headers.
                if name != HOST && name != CONTENT_LENGTH && name != http::header::TRANSFER_ENCODING
                {
                    out.push(name);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_includes_connection_listed_headers() {
        let v = http::HeaderValue::from_static("close, X-Secret, upgrade, Host");
        let names = strip_hop_by_hop(std::iter::once(&v), false);
        assert!(names.iter().any(|n| n == "x-secret"));
        assert!(names.iter().any(|n| n == "upgrade"));
        assert!(!names.iter().any(|n| n == "host"));
        let names = strip_hop_by_hop(std::iter::once(&v), true);
        assert!(!names.iter().any(|n| n == "upgrade"));
    }

    #[test]
    fn hop_by_hop_is_detected_before_stripping() {
        let mut headers = http::HeaderMap::new();
        headers.insert(HOST, http::HeaderValue::from_static("a.example"));
        headers.insert("x-custom", http::HeaderValue::from_static("1"));
        assert!(!has_hop_by_hop(&headers));
        headers.insert("te", http::HeaderValue::from_static("trailers"));
        assert!(has_hop_by_hop(&headers));
        headers.remove("te");
        headers.insert(CONNECTION, http::HeaderValue::from_static("x-custom"));
        assert!(has_hop_by_hop(&headers));
    }

    /// A Gateway filter on HTTP/2 edits what the HTTP/1 engine lets it
    /// edit and no more: the forwarding fields name the host the client
    /// asked for (not a rewritten one), and a filter writes neither
    /// teapot's own fields nor the framing.
    #[test]
    fn gateway_filters_on_http2_keep_teapots_fields_and_the_framing() {
        use crate::compile::gateway::table::{Filters, HeaderEdits, Rewrite};
        let filters = Filters {
            request_headers: HeaderEdits {
                set: vec![
                    ("x-request-id".into(), "forged".into()),
                    ("content-length".into(), "0".into()),
                    ("x-kept".into(), "1".into()),
                ],
                add: vec![("te".into(), "trailers".into())],
                remove: vec!["traceparent".into()],
            },
            rewrite: Some(Rewrite {
                hostname: Some("backend.internal".into()),
                path: None,
            }),
            ..Filters::default()
        };
        let gateway = GatewayForward {
            filters: Some(Arc::new(filters)),
            ..GatewayForward::default()
        };
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("5"));
        headers.insert(
            "traceparent",
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        let mut uri: Uri = "https://shop.example/x".parse().unwrap();
        let conn = ConnInfo {
            client: Some("192.0.2.7:1000".parse().unwrap()),
            tls: true,
            ..ConnInfo::default()
        };
        let request_id = trace::request_id(None, false);
        let sent_tp = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let traceparent = trace::traceparent(Some(&sent_tp[..]), &request_id);
        let ids = Ids {
            request_id,
            traceparent,
        };
        edit_request(
            &mut headers,
            &mut uri,
            &conn,
            "shop.example",
            Some(&ids),
            Some(&gateway),
        )
        .unwrap();
        let get = |n: &str| headers.get(n).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(uri.authority().unwrap().as_str(), "backend.internal");
        assert_eq!(get("host").as_deref(), Some("backend.internal"));
        assert_eq!(get("x-forwarded-host").as_deref(), Some("shop.example"));
        assert_eq!(
            get("forwarded").as_deref(),
            Some("for=192.0.2.7;proto=https;host=\"shop.example\"")
        );
        assert_eq!(
            get("x-request-id").as_deref(),
            Some(ids.request_id.as_str())
        );
        assert!(get("traceparent").is_some());
        assert_eq!(get("content-length").as_deref(), Some("5"));
        assert_eq!(get("te"), None);
        assert_eq!(get("x-kept").as_deref(), Some("1"));
    }
}
