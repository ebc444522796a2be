//! One test binary for HTTP proxying end to end: routing, paths, hostile routes, headers,
//! error pages and their bounds, HTTP/2 to clients and upstreams, the
//! ingress-nginx annotations, observability, load balancing, memory per
//! endpoint.
//!
//! Each file under `teapot/tests/` is a binary of its own that compiles the
//! shared helpers and links the whole proxy again; these files share one.
//! Their tests run side by side in one process, so none may use a fixed
//! port, address, interface or namespace name, or process-wide state
//! (environment variables) that another file's test could also use.
//!
//! Run: `cargo test -p teapot --test http` (one file: `... --test http FILE::`).

#[path = "../common/mod.rs"]
mod common;

mod alt_svc_e2e;
mod buffering_e2e;
mod capacity_e2e;
mod chunk_line_e2e;
mod custom_errors_e2e;
mod custom_headers_e2e;
mod endpoint_updates_e2e;
mod error_page_bounds_e2e;
mod fail_closed_e2e;
mod global_rate_limit_e2e;
mod h2_upstream_e2e;
mod h2c_early_answer_e2e;
mod h2c_limits_e2e;
mod host_default_backend_e2e;
mod hostile_routes_e2e;
mod http3_default_e2e;
mod http3_e2e;
mod http3_fleet_e2e;
mod http3_paths_e2e;
mod ingress_nginx_request_path_e2e;
mod ingress_nginx_routing_e2e;
mod isolation_e2e;
mod load_balance_e2e;
mod no_endpoint_cors_e2e;
mod observe_e2e;
mod paths_e2e;
mod proxy_e2e;
mod proxy_http_version_e2e;
mod response_rewrite_e2e;
mod retry_e2e;
mod traffic_policy_e2e;
mod upstream_log_e2e;
