//! teapot's object model: what the LB cluster's objects are once admitted.
//!
//! This is the first part of the data side (docs/architecture.md): it
//! knows objects, not requests. Nothing here links Pingora or needs a
//! runtime, so the admission webhook, the proxy's compile and the tools
//! share it.
//!
//! Layout:
//! - [`store`]: the objects, keyed as the API server keys them.
//! - [`validate`]: typed parsing and API-server-like validation, per field;
//!   one document becomes an [`store::Object`] or a field error
//!   ([`field`]).
//! - [`manifests`]: a directory (or text) of YAML into a store, keeping the
//!   last good version of objects that stop parsing; `documents`: a
//!   file's documents found by their markers, so that a rewritten file of
//!   EndpointSlices is parsed only where it changed.
//! - [`endpoints`]: EndpointSlices in the compact form the store keeps.
//! - [`service`]: Services in the compact form the store keeps, and
//!   [`meta`] the metadata form both share.
//! - [`gateway`]: Gateway API schema rules and the hostnames an object
//!   claims.
//! - [`attachment`]: Gateway API attachment rules (route kinds of a
//!   listener, namespaces, ReferenceGrants, hostname intersection), the
//!   one copy the HTTP compile, the L4 compile and the agent judge by.
//! - [`certificate`]: `kubernetes.io/tls` Secrets' PEM into rustls keys.
//! - [`tenancy`]: Tenant namespaces as the compile sees them, and the
//!   proxy's second admission check (the webhook's rules, again).

pub mod attachment;
pub mod certificate;
mod documents;
pub mod endpoints;
pub mod field;
pub mod gateway;
pub mod manifests;
pub mod meta;
pub mod service;
pub mod store;
pub mod tenancy;
pub mod validate;
