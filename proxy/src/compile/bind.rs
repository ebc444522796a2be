//! Which hosts a tenant may route and which Gateways its routes may bind
//! to, the same for every object kind: the Ingress compile
//! (`compile::ingress`), the HTTP one (`compile::gateway`: HTTPRoute,
//! GRPCRoute) and the L4 one (`compile::l4::gateway`: TCPRoute, UDPRoute,
//! TLSRoute) all ask here, so they cannot drift apart.
//!
//! Both rules are defence in depth as much as routing: the admission
//! policy already keeps a tenant's parentRefs in its namespace and its
//! hostnames in its domains; the compile holds to the same rules for
//! whatever reaches it anyway (docs/architecture.md, "Security rules").

use k8s_openapi::api::networking::v1::Ingress;
use teapot_api::admission::HostScope;
use teapot_api::{HostPattern, hostname};
use teapot_model::store::{FastHashMap, Store};
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

/// What deciding a tenant's hostnames reads and records, shared by the
/// Ingress, HTTP Gateway and L4 compiles of one snapshot.
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
    /// Whether `tenant` may route `host` now, by the one rule Ingress
    /// hosts, HTTPRoute hostnames and TLSRoute hostnames follow: its own
    /// subtree and `allowedDomains` at once; a custom host becomes a claim
    /// for the prover and routes once DNS proves it, for one tenant only
    /// (the first, oldest, that proved it; `custom_owners` remembers who).
    /// `Err`: why not, for the route's status.
    pub fn admit(&mut self, tenant: &TenantView<'t>, host: &HostPattern) -> Result<(), String> {
        match tenant.scope(host)? {
            HostScope::Assigned | HostScope::Allowed => Ok(()),
            HostScope::Custom => {
                let name = host.to_string();
                self.claims.push(Claim {
                    cluster: tenant.cluster.to_string(),
                    host: name.clone(),
                    token: tenant.tenant.verification_token(),
                    targets: self
                        .assigned
                        .get(tenant.cluster)
                        .cloned()
                        .unwrap_or_default(),
                });
                let proofs = self.options.proofs.as_deref();
                if proofs.is_some_and(|p| p.is_proven(tenant.cluster, &name)) {
                    let owner = *self
                        .custom_owners
                        .entry(name.clone())
                        .or_insert(tenant.cluster);
                    if owner == tenant.cluster {
                        return Ok(());
                    }
                    return Err(format!(
                        "custom domain {name} is proven by another tenant too, whose Ingress is older: a host belongs to one tenant"
                    ));
                }
                Err(proofs
                    .and_then(|p| p.detail(tenant.cluster, &name))
                    .unwrap_or_else(|| {
                        format!("custom domain {name} is waiting for its DNS proof")
                    }))
            }
        }
    }
}

/// Every assigned hostname of each tenant (by cluster), of the Ingresses
/// `serves` takes and of every Gateway and ListenerSet: the CNAME targets that prove a
/// custom domain.
pub(crate) fn assigned_hostnames<'s>(
    store: &'s Store,
    tenancy: &Tenancy<'s>,
    serves: impl Fn(&Ingress) -> bool,
    domain: &str,
) -> FastHashMap<&'s str, Vec<String>> {
    let mut out: FastHashMap<&str, Vec<String>> = FastHashMap::default();
    if tenancy.is_empty() {
        return out;
    }
    for (id, ingress) in &store.ingresses {
        if let Some(t) = tenancy.get(&id.namespace)
            && serves(&ingress.object)
        {
            out.entry(t.cluster)
                .or_default()
                .push(hostname::assigned_hostname(&id.name, t.cluster, domain));
        }
    }
    // A tenant Gateway's assigned hostname is a CNAME target too, and so
    // is a tenant ListenerSet's, which its hostname-less listeners bind.
    for id in store.gateways.keys().chain(store.listener_sets.keys()) {
        if let Some(t) = tenancy.get(&id.namespace) {
            out.entry(t.cluster)
                .or_default()
                .push(hostname::assigned_hostname(&id.name, t.cluster, domain));
        }
    }
    out
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
