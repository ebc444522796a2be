//! The tenant agent's controller half (`teapot agent`): IngressClass,
//! Ingress and LoadBalancer Service reconcilers writing sanitized copies to
//! the LB cluster. Not built yet: issue #6. The crate exists for the layout
//! DESIGN.md fixes; it exports nothing.
