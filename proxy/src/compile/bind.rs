//! What a tenant's Gateway API route may bind to, the same for every
//! route kind: the HTTP compile (`compile::gateway`: HTTPRoute, GRPCRoute)
//! and the L4 one (`compile::l4::gateway`: TCPRoute, UDPRoute, TLSRoute)
//! both ask here, so the two planes cannot drift apart.
//!
//! Both rules are defence in depth as much as routing: the admission
//! policy already keeps a tenant's parentRefs in its namespace and its
//! hostnames in its domains; the compile holds to the same rules for
//! whatever reaches it anyway (docs/architecture.md, "Security rules").

use teapot_api::HostPattern;
use teapot_model::store::FastHashMap;
use teapot_model::tenancy::{Tenancy, TenantView};

use crate::compile::CompileOptions;
use crate::compile::domains::Claim;

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

/// What deciding a tenant's hostnames reads and records, for a compile
/// that is not the Ingress or HTTP one (those pass the parts along
/// themselves): the L4 plane's TLSRoutes.
pub(crate) struct TenantHosts<'c, 't> {
    pub tenancy: &'c Tenancy<'t>,
    pub options: &'c CompileOptions,
    /// Every tenant's assigned hostnames: the CNAME targets that prove a
    /// custom domain.
    pub assigned: &'c FastHashMap<&'t str, Vec<String>>,
    /// Custom hosts found, for the prover.
    pub claims: &'c mut Vec<Claim>,
    /// The tenant a proven custom host belongs to, by host.
    pub custom_owners: &'c mut FastHashMap<String, &'t str>,
}

impl<'t> TenantHosts<'_, 't> {
    /// Whether `tenant` may route `host` now, by the rule Ingress hosts
    /// and HTTPRoute hostnames follow (`compile::admit_tenant_host`: its
    /// own subtree and `allowedDomains` at once, a custom domain once DNS
    /// proves it and no older claimant has). `Err`: why not, for the
    /// route's status.
    pub fn admit(&mut self, tenant: &TenantView<'t>, host: &HostPattern) -> Result<(), String> {
        crate::compile::admit_tenant_host(
            tenant,
            host,
            self.options,
            self.assigned,
            self.claims,
            self.custom_owners,
        )
    }
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
