//! One test binary for the Helm charts: rendered with the pinned helm, every document typed,
//! the Gateway API and observability values.
//!
//! Each file under `teapot/tests/` is a binary of its own that compiles the
//! shared helpers and links the whole proxy again; these files share one.
//! Their tests run side by side in one process, so none may use a fixed
//! port, address, interface or namespace name, or process-wide state
//! (environment variables) that another file's test could also use.
//!
//! Run: `cargo test -p teapot --test charts` (one file: `... --test charts FILE::`).

#[path = "../chart_tools/mod.rs"]
mod chart_tools;

mod charts;
mod charts_gateway;
mod charts_http3;
mod charts_observability;
