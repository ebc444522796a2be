//! teapot's API: the names, labels and value rules that every part agrees on.
//!
//! The proxy, the webhook and the agent all depend on this crate so that a
//! host or path admitted by one part is read the same way by the others.
//!
//! Layout:
//! - [`names`]: IngressClass, controller and label names from docs/architecture.md.
//! - [`host`]: Ingress rule hosts (exact or single-label wildcard) and their
//!   validation.
//! - [`path`]: Ingress path types and path validation.
//! - [`tenant`]: the `Tenant` custom resource and its CRD.
//! - [`route_policy`]: the `RouteTrafficPolicy` custom resource (client
//!   address lists and rate limits for Gateway API routes) and its CRD.
//! - [`hostname`]: assigned hostnames and mirrored object names.
//! - [`kind`]: the kinds a tenant writes, which the rules are written per.
//! - [`annotations`]: the `teapot.dev/` annotation allowlist and its typed
//!   values.
//! - [`admission`]: the admission rules (what a tenant may write), shared by
//!   the webhook and the proxy's defence-in-depth checks.
//! - [`regex`]: tenant regular expressions as bounded DFAs, shared by
//!   pattern, and what they cost a tenant's budget.
//! - [`lease`]: leader election on a Lease, for jobs one replica does.
//! - [`listener`]: a Gateway listener's protocol, classified once.
//! - [`status`]: the `teapot.dev/<Reason>` problem codes the LB side puts
//!   in `status.loadBalancer` for the agent.
//! - [`response_headers`]: the bounded response fields of a `custom-headers`
//!   ConfigMap, read alike by the webhook, the store and the proxy.
//! - [`htpasswd`]: basic-auth users Secrets, parsed within their bounds.
//! - [`quote`]: a tenant string quoted back in a message (a leaf, so every
//!   reader may name what it refuses).

pub mod admission;
pub mod annotations;
pub mod host;
pub mod hostname;
pub mod htpasswd;
pub mod kind;
pub mod lease;
pub mod listener;
pub mod migration;
pub mod names;
pub mod path;
pub mod quote;
pub mod regex;
pub mod response_headers;
pub mod route_policy;
pub mod status;
pub mod tenant;

pub use host::{HostError, HostPattern};
pub use path::{PathError, PathKind};
/// The Gateway API types the policy reads, for the crates
/// that check or mirror them with it.
pub use teapot_gateway_api as gateway_api;
pub use tenant::{Tenant, TenantSpec};
