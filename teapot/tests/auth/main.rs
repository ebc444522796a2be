//! One test binary for authentication and TLS end to end: basic, external and cached auth,
//! `satisfy`, client certificates, backend TLS, TLS handshake bounds.
//!
//! Each file under `teapot/tests/` is a binary of its own that compiles the
//! shared helpers and links the whole proxy again; these files share one.
//! Their tests run side by side in one process, so none may use a fixed
//! port, address, interface or namespace name, or process-wide state
//! (environment variables) that another file's test could also use.
//!
//! Run: `cargo test -p teapot --test auth` (one file: `... --test auth FILE::`).

#[path = "../common/mod.rs"]
mod common;

mod auth_cache_e2e;
mod backend_tls_e2e;
mod basic_auth_e2e;
mod client_cert_e2e;
mod client_cert_own_address_e2e;
mod external_auth_e2e;
mod ingress_client_cert_e2e;
mod satisfy_e2e;
mod tls_handshake_caps_e2e;
