//! HTTP/1 through teapot's own engine (`teapot_h1`), over the same
//! [`Router`] and routing decision ([`crate::plane::decide`]) as the
//! Pingora path, which is left to HTTP/2.
//!
//! Why a second engine: Pingora's per-request machinery (a header map, a
//! boxed future per filter, a task per body) cost about three times the
//! CPU per HTTP/1 request that nginx and HAProxy spend (benches/README.md).
//! The engine parses in place and writes heads as bytes; what teapot adds
//! per request is one snapshot lookup, the tenant gate, and the four
//! forwarding headers.
//!
//! - [`Router`] implements `teapot_h1::Router`: Host rules, the ACME
//!   HTTP-01 answer (the only await on the way, besides a tenant refusal's
//!   delay), then [`decide`].
//! - [`Target`] is one request's upstream: round-robin over live
//!   endpoints, ejection on connect failure, the tenant's slot and the
//!   in-flight count held until the request (or its upgraded tunnel) ends.
//! - [`MetricsObserver`] turns each finished request into the same
//!   metrics the Pingora path counts.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use pingora_core::protocols::Stream;
use teapot_h1::{
    ConnInfo, Decision as H1Decision, Engine, EngineConfig, Forward as H1Forward, HeaderEdits,
    Observer, Outcome, RequestHead, RequestLog, Respond, Upstreams,
};

use crate::compile::acme::CHALLENGE_PREFIX;
use crate::compile::fairness::TenantPermit;
use crate::compile::upstream::{Tried, Upstream};
use crate::plane::decide::{
    Answer, Decision, Head, MISDIRECTED, check_host, decide, each_forwarding_header,
};
use crate::plane::edge::EdgeConfig;
use crate::plane::metrics::{InFlight, Metrics};
use crate::plane::proxy::{
    BAD_GATEWAY_BODY, GATEWAY_TIMEOUT_BODY, Router, SERVER_NAME, UpstreamOptions,
};

/// The HTTP/1 engine of a listener.
pub type H1Engine = Engine<Router, MetricsObserver>;

/// The engine with docs/edge.md's limits and the upstream options of
/// `teapot proxy`.
pub fn engine(router: Router, pool_size: usize) -> H1Engine {
    let config = engine_config(&router.edge, &router.options, pool_size);
    let observer = MetricsObserver(router.metrics.clone());
    Engine::new(router, observer, config)
}

fn engine_config(edge: &EdgeConfig, upstream: &UpstreamOptions, pool_size: usize) -> EngineConfig {
    EngineConfig {
        limits: edge.head_limits(),
        header_read_timeout: edge.header_read_timeout,
        keepalive_timeout: edge.keepalive_timeout,
        max_body_size: edge.max_body_size,
        connect_timeout: upstream.connect_timeout,
        upstream_read_timeout: upstream.read_timeout,
        client_write_timeout: upstream.write_timeout,
        pool_max_idle_per_upstream: pool_size,
        pool_idle_timeout: upstream.pool_idle_timeout,
        server: Some(Bytes::from_static(SERVER_NAME.as_bytes())),
        bad_gateway_body: Bytes::from_static(BAD_GATEWAY_BODY.as_bytes()),
        gateway_timeout_body: Bytes::from_static(GATEWAY_TIMEOUT_BODY.as_bytes()),
        ..EngineConfig::default()
    }
}

/// What the engine needs to know of a Pingora connection.
pub fn conn_info(stream: &Stream) -> ConnInfo {
    let socket = stream.get_socket_digest();
    let inet = |a: Option<&pingora_core::protocols::l4::socket::SocketAddr>| {
        a.and_then(|a| a.as_inet()).copied()
    };
    let ssl = stream.get_ssl_digest();
    ConnInfo {
        client: socket.as_ref().and_then(|d| inet(d.peer_addr())),
        local: socket.as_ref().and_then(|d| inet(d.local_addr())),
        tls: ssl.is_some(),
        sni: ssl
            .as_deref()
            .and_then(crate::plane::tls::server_name)
            .map(Arc::from),
        alpn: None,
    }
}

const PLAIN_TEXT: (Bytes, Bytes) = (
    Bytes::from_static(b"content-type"),
    Bytes::from_static(b"text/plain; charset=utf-8"),
);

impl teapot_h1::Router for Router {
    type Upstreams = Target;

    async fn decide(&self, req: &RequestHead<'_>, conn: &ConnInfo) -> H1Decision<Target> {
        let target = req.path();
        let head = Head {
            host_headers: req
                .headers()
                .filter(|(name, _)| name.eq_ignore_ascii_case("host"))
                .count(),
            authority: req.host().unwrap_or(""),
            path: target.split_once('?').map_or(target, |(path, _)| path),
            requires_host: req.version() == 1,
            declared_length: req.content_length(),
        };
        if let Err(answer) = check_host(&head) {
            return H1Decision::Respond(self.local_answer(answer).await);
        }
        if self.misdirected(conn.tls, conn.sni.as_deref(), head.authority) {
            return H1Decision::Respond(self.local_answer(MISDIRECTED).await);
        }
        // HTTP-01 validation, before routing; a token that is not ours goes
        // on to the routes (a tenant may run its own ACME client behind us).
        if let Some(acme) = &self.acme
            && let Some(token) = head.path.strip_prefix(CHALLENGE_PREFIX)
            && let Some(answer) = acme.challenge_response(token).await
        {
            let mut respond = Respond::new(200, "acme_challenge", answer);
            respond.headers.push(PLAIN_TEXT);
            return H1Decision::Respond(respond);
        }
        // The snapshot guard is dropped before any await.
        let decision = decide(&self.snapshots.load(), &self.edge, &head);
        match decision {
            Decision::Forward(forward) => {
                let mut fwd = H1Forward::via(Target {
                    upstream: forward.upstream,
                    tried: Tried::default(),
                    max_attempts: self.options.max_connect_attempts.max(1),
                    connect_failures: self.metrics.upstream_connect_failures.clone(),
                    _tenant: forward.tenant,
                    _in_flight: self.metrics.request_started(),
                });
                fwd.max_body_size = Some(forward.body_limit);
                fwd.request_edits = forwarding_edits(conn, head.authority);
                H1Decision::Forward(fwd)
            }
            Decision::Answer(answer) => H1Decision::Respond(self.local_answer(answer).await),
        }
    }
}

impl Router {
    /// A local answer of the routing decision, as the Pingora path writes
    /// it (crate::plane::proxy): counted, delayed for a tenant refusal.
    async fn local_answer(&self, answer: Answer) -> Respond {
        if let Some(refusal) = answer.refusal {
            self.metrics.refused(refusal);
        }
        let mut respond = Respond::new(
            answer.status,
            answer.refusal.map_or("answer", |r| r.label()),
            Bytes::from_static(answer.body.as_bytes()),
        );
        respond.headers.push(PLAIN_TEXT);
        if answer.delayed() {
            tokio::time::sleep(self.edge.tenant_refusal_delay).await;
            respond
                .headers
                .push((Bytes::from_static(b"retry-after"), Bytes::from_static(b"1")));
        }
        respond.close = !answer.keeps_connection();
        respond
    }
}

/// `X-Forwarded-*` from [`each_forwarding_header`], as replacements of
/// whatever the client sent: formatted straight into one buffer, the
/// client's address on the stack, so the edits cost one allocation.
fn forwarding_edits(conn: &ConnInfo, authority: &str) -> HeaderEdits {
    // Six names and values (an IPv6 address three times, the authority
    // twice) and 7 bytes of framing each.
    let mut edits = HeaderEdits::with_capacity(256 + 2 * authority.len());
    let mut ip = IpText {
        buf: [0; 48],
        len: 0,
    };
    let client_ip = conn.client.map(|a| ip.of(a.ip()));
    let local_port = conn.local.map(|a| a.port());
    each_forwarding_header(
        client_ip,
        conn.tls,
        authority,
        local_port,
        |name, value| match value {
            Some(v) => edits.set_fmt(name.as_bytes(), format_args!("{v}")),
            None => edits.push_remove(name.as_bytes()),
        },
    );
    edits
}

/// An IP address's text without a `String`: the longest, an IPv4-mapped
/// IPv6 address, is 45 bytes.
struct IpText {
    buf: [u8; 48],
    len: usize,
}

impl IpText {
    fn of(&mut self, ip: std::net::IpAddr) -> &str {
        use std::fmt::Write as _;
        self.len = 0;
        let _ = write!(self, "{ip}");
        // Only whole `&str`s were copied in.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Write for IpText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// One forwarded request's upstream and what it holds while it runs.
#[derive(Debug)]
pub struct Target {
    upstream: Arc<Upstream>,
    tried: Tried,
    max_attempts: u32,
    /// One counter, not all of [`Metrics`]: cloned per request.
    connect_failures: prometheus::IntCounter,
    /// The tenant's connection slot: held for the request, and for an
    /// upgraded connection's whole life.
    _tenant: Option<TenantPermit>,
    _in_flight: InFlight,
}

impl Target {
    fn endpoint(&self, addr: SocketAddr) -> Option<&crate::compile::upstream::Endpoint> {
        self.upstream
            .endpoints
            .iter()
            .find(|e| e.addr == addr)
            .map(|e| &**e)
    }
}

impl Upstreams for Target {
    fn next(&mut self, attempt: u32) -> Option<SocketAddr> {
        if attempt >= self.max_attempts {
            return None;
        }
        self.upstream.pick(&mut self.tried).map(|e| e.addr)
    }

    fn is_empty(&self) -> bool {
        self.upstream.is_empty()
    }

    fn connected(&mut self, addr: SocketAddr) {
        if let Some(e) = self.endpoint(addr) {
            e.mark_healthy();
        }
    }

    fn failed(&mut self, addr: SocketAddr) {
        self.connect_failures.inc();
        if let Some(e) = self.endpoint(addr) {
            e.eject();
        }
        tracing::warn!(
            peer = %addr,
            upstream = %self.upstream.name,
            attempts = self.tried.count(),
            "upstream connect failed; endpoint ejected"
        );
    }
}

/// Counts each finished request into [`Metrics`].
#[derive(Debug)]
pub struct MetricsObserver(Metrics);

impl Observer for MetricsObserver {
    fn on_request(&self, log: &RequestLog<'_>) {
        if log.status != 0 {
            self.0.count_response(log.status);
        }
        if let Some(ttfb) = log.upstream_ttfb {
            self.0.upstream_latency.observe(ttfb.as_secs_f64());
        }
        if let Outcome::Refused(refusal) = log.outcome {
            self.0.refused(refusal);
        }
        // A client that hangs up is normal traffic: counted, not logged.
        if log.client_abort || log.outcome == Outcome::ClientAbort {
            self.0.client_aborts.inc();
        }
    }
}
