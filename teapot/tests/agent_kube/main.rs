//! One test binary for the Kubernetes side end to end: `teapot agent` (pods, Gateway API,
//! custom headers), `--kube` against the API double, Cluster API, `teapot
//! migrate`, tenancy and dual-stack agents.
//!
//! Each file under `teapot/tests/` is a binary of its own that compiles the
//! shared helpers and links the whole proxy again; these files share one.
//! Their tests run side by side in one process, so none may use a fixed
//! port, address, interface or namespace name, or process-wide state
//! (environment variables) that another file's test could also use.
//!
//! Run: `cargo test -p teapot --test agent_kube` (one file: `... --test agent_kube FILE::`).

#[path = "../common/mod.rs"]
mod common;

mod agent_custom_headers_e2e;
mod agent_e2e;
mod agent_gateway_e2e;
mod agent_scale_e2e;
mod capi_e2e;
mod dual_stack_e2e;
mod kube_e2e;
mod migrate_e2e;
mod tenancy_e2e;
