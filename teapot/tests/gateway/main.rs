//! One test binary for Gateway API end to end: Gateways, their listeners and addresses, HTTPRoutes and
//! their policies, L4 and TLS-terminating routes, ListenerSets.
//!
//! Each file under `teapot/tests/` is a binary of its own that compiles the
//! shared helpers and links the whole proxy again; these files share one.
//! Their tests run side by side in one process, so none may use a fixed
//! port, address, interface or namespace name, or process-wide state
//! (environment variables) that another file's test could also use.
//!
//! Run: `cargo test -p teapot --test gateway` (one file: `... --test gateway FILE::`).

#[path = "../common/mod.rs"]
mod common;

mod gateway_e2e;
mod gateway_h1_e2e;
mod gateway_l4_e2e;
mod gateway_own_address_e2e;
mod gateway_policy_e2e;
mod gateway_route_policy_e2e;
mod gateway_session_auth_e2e;
mod gateway_static_addresses_e2e;
mod gateway_tls_terminate_e2e;
mod listener_set_e2e;
