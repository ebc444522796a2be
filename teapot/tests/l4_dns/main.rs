//! One test binary for L4, DNS, ACME and announcing end to end: TCP/UDP Services and their
//! source ranges, the DNS server, ACME, SSL passthrough, BGP (to FRR in
//! network namespaces too) and dual-stack L4 in a network namespace.
//!
//! Each file under `teapot/tests/` is a binary of its own that compiles the
//! shared helpers and links the whole proxy again; these files share one.
//! Their tests run side by side in one process, so none may use a fixed
//! port, address, interface or namespace name, or process-wide state
//! (environment variables) that another file's test could also use.
//!
//! Run: `cargo test -p teapot --test l4_dns` (one file: `... --test l4_dns FILE::`).

#[path = "../common/mod.rs"]
mod common;
#[path = "../../../announce/tests/netns/mod.rs"]
mod netns;

mod acme_e2e;
mod bgp_frr_e2e;
mod dns_acme_e2e;
mod dns_e2e;
mod dual_stack_netns_e2e;
mod l4_e2e;
mod l4_source_ranges_e2e;
mod ssl_passthrough_e2e;
