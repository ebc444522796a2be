//! `teapot proxy` flags for the front-door limits (docs/edge.md).

use std::time::Duration;

use teapot_proxy::plane::edge::{EdgeConfig, H2Limits};

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct EdgeArgs {
    /// Longest HTTP/1 request line (bytes, k/m suffix); longer: 414.
    #[arg(long, default_value = "8k", value_parser = parse_size)]
    max_request_line: u64,
    /// Largest request header block incl. the request line; larger: 431.
    #[arg(long, default_value = "32k", value_parser = parse_size)]
    max_header_size: u64,
    /// Most header fields in one request; more: 431.
    #[arg(long, default_value_t = 100)]
    max_headers: usize,
    /// Seconds from accept to a complete request header (slowloris), and to the end of a TLS handshake on the shared HTTPS listener; the connection is closed when it runs out.
    #[arg(long, default_value_t = 10)]
    header_read_timeout: u64,
    /// Seconds a keep-alive connection may wait for the next complete request header.
    #[arg(long, default_value_t = 60)]
    keepalive_timeout: u64,
    /// Operator maximum request body (k/m/g suffix, 0: no limit); `teapot.dev/max-body-size` can only lower it; larger: 413.
    #[arg(long, default_value = "100m", value_parser = parse_size)]
    max_body_size: u64,
    /// Open client connections in total (0: no limit).
    #[arg(long, default_value_t = 50_000)]
    max_connections: usize,
    /// Open client connections per client IP address (0: no limit).
    #[arg(long, default_value_t = 512)]
    max_connections_per_client: usize,
    /// Milliseconds a request over its Tenant's rate or connection limit waits for its 429/503 (a looping client then cannot take the CPU from other tenants).
    #[arg(long, default_value_t = 500)]
    tenant_refusal_delay_ms: u64,
    /// New connections per second from one client IP, burst of one second's worth (0, the default: no limit; clients behind one NAT share an address).
    #[arg(long, default_value_t = 0)]
    max_connection_rate_per_client: u32,
    /// Bytes this replica holds in request and response bodies of routes with `proxy-request-buffering` or `proxy-buffering` on (k/m/g suffix); one tenant holds at most a quarter; what is not granted is streamed.
    #[arg(long, default_value = "64m", value_parser = parse_size)]
    request_buffer_budget: u64,
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS per connection.
    #[arg(long, default_value_t = 100)]
    h2_max_concurrent_streams: u32,
    /// HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE (decoded bytes, k/m suffix); larger: 431.
    #[arg(long, default_value = "32k", value_parser = parse_size)]
    h2_max_header_list_size: u64,
    /// HTTP/2 streams a client may reset before they are accepted (rapid reset); more: GOAWAY.
    #[arg(long, default_value_t = 20)]
    h2_max_pending_accept_reset_streams: usize,
    /// HTTP/2 streams the proxy may have to reset for a client's errors per connection (MadeYouReset); more: GOAWAY.
    #[arg(long, default_value_t = 100)]
    h2_max_local_error_reset_streams: usize,
    /// Seconds an HTTP/2 connection without streams stays open.
    #[arg(long, default_value_t = 60)]
    h2_idle_timeout: u64,
}

impl EdgeArgs {
    pub(crate) fn config(&self) -> EdgeConfig {
        // Process-wide, as the bodies it bounds are held by every listener.
        teapot_proxy::live::buffers::Budget::global().set_total(self.request_buffer_budget);
        EdgeConfig {
            max_request_line: usize::try_from(self.max_request_line).unwrap_or(usize::MAX),
            max_header_bytes: usize::try_from(self.max_header_size).unwrap_or(usize::MAX),
            max_headers: self.max_headers,
            header_read_timeout: Duration::from_secs(self.header_read_timeout),
            keepalive_timeout: Duration::from_secs(self.keepalive_timeout),
            max_body_size: self.max_body_size,
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
            tenant_refusal_delay: Duration::from_millis(self.tenant_refusal_delay_ms),
            max_connection_rate_per_client: self.max_connection_rate_per_client,
            h2: H2Limits {
                max_concurrent_streams: self.h2_max_concurrent_streams,
                max_header_list_size: u32::try_from(self.h2_max_header_list_size)
                    .unwrap_or(u32::MAX),
                max_pending_accept_reset_streams: self.h2_max_pending_accept_reset_streams,
                max_local_error_reset_streams: self.h2_max_local_error_reset_streams,
                idle_timeout: Duration::from_secs(self.h2_idle_timeout),
            },
        }
    }
}

/// Digits with an optional `k`, `m` or `g` (1024-based), like the
/// `teapot.dev/max-body-size` annotation.
fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, shift) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: expected digits with an optional k, m or g"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8k"), Ok(8192));
        assert_eq!(parse_size("100m"), Ok(100 << 20));
        assert_eq!(parse_size("0"), Ok(0));
        assert!(parse_size("1x").is_err());
        assert!(parse_size("99999999999g").is_err());
    }
}
