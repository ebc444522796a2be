//! What a tenant's Gateway API route may bind to, the same for every
//! route kind: the HTTP compile (`compile::gateway`: HTTPRoute, GRPCRoute)
//! and the L4 one (`compile::l4::gateway`: TCPRoute, UDPRoute, TLSRoute)
//! both ask here, so the two planes cannot drift apart.
//!
//! Defence in depth: the admission policy already keeps a tenant's
//! parentRefs in its namespace; the compile holds to the same rule for
//! whatever reaches it anyway (docs/architecture.md, "Security rules").

/// Whether a route of `route_namespace` may bind to a Gateway of
/// `gateway_namespace`: a tenant's routes (`tenant_route`) only ever bind
/// to its own Gateways, whatever a listener's `allowedRoutes` says (an
/// operator's listener admitting `All` still takes no tenant route).
/// `Err`: the status message.
pub(crate) fn tenant_route_may_bind(
    tenant_route: bool,
    route_namespace: &str,
    gateway_namespace: &str,
) -> Result<(), &'static str> {
    if tenant_route && route_namespace != gateway_namespace {
        return Err("a tenant route binds to its own namespace's Gateways only");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_route_binds_in_its_own_namespace_only() {
        assert!(tenant_route_may_bind(true, "tenant-a", "tenant-a").is_ok());
        assert!(tenant_route_may_bind(true, "tenant-a", "ops").is_err());
        // An operator's route follows allowedRoutes alone.
        assert!(tenant_route_may_bind(false, "ops", "edge").is_ok());
    }
}
