//! teapot's API: the names, labels and value rules that every part agrees on.
//!
//! The proxy, the webhook and the agent all depend on this crate so that a
//! host or path admitted by one part is read the same way by the others.
//!
//! Layout:
//! - [`names`]: IngressClass, controller and label names from DESIGN.md.
//! - [`host`]: Ingress rule hosts (exact or single-label wildcard) and their
//!   validation.
//! - [`path`]: Ingress path types and path validation.

pub mod host;
pub mod names;
pub mod path;

pub use host::{HostError, HostPattern};
pub use path::{PathError, PathKind};
