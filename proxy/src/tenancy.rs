//! Tenant namespaces in the compile: which namespace a Tenant owns, which
//! hosts it may route and which addresses its endpoints may use.
//!
//! The rules are the webhook's own ([`teapot_api::policy`]), applied again
//! here as defence in depth (DESIGN.md, "Security rules": the proxy never
//! forwards a tenant's traffic to an address the webhook would refuse
//! there). Host conflicts between tenants are not judged here: the compile
//! gives a contested host to the oldest Ingress.

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;
use teapot_api::policy::{self, Holdings, HostScope, PolicyContext};
use teapot_api::{HostPattern, Tenant};

/// One Tenant as the compile sees it.
#[derive(Debug)]
pub struct TenantView<'a> {
    pub tenant: &'a Tenant,
    pub cluster: &'a str,
    ctx: PolicyContext<'a>,
}

impl TenantView<'_> {
    /// Where `host` stands for this tenant, or why it may not use it.
    pub fn scope(&self, host: &HostPattern) -> Result<HostScope, String> {
        policy::host_scope(&self.ctx, host)
    }

    /// Whether an endpoint address may carry this tenant's traffic.
    pub fn endpoint_allowed(&self, ip: IpAddr) -> Result<(), String> {
        policy::check_endpoint_address(&self.ctx, ip)
    }
}

/// Tenants by the namespace they own, plus what they hold.
#[derive(Debug)]
pub struct Tenancy<'a> {
    by_namespace: HashMap<String, TenantView<'a>>,
}

impl<'a> Tenancy<'a> {
    /// `holdings` must know every Tenant's node networks, so that one
    /// tenant's endpoints cannot point into another's nodes.
    pub fn new(
        tenants: &[&'a Tenant],
        domain: &'a str,
        lb_networks: &'a [IpNet],
        holdings: &'a Holdings,
    ) -> Tenancy<'a> {
        let mut by_namespace = HashMap::new();
        for tenant in tenants {
            by_namespace
                .entry(tenant.namespace_name())
                .or_insert_with(|| TenantView {
                    tenant,
                    cluster: &tenant.spec.cluster,
                    ctx: PolicyContext::new(tenant, domain, lb_networks, holdings),
                });
        }
        Tenancy { by_namespace }
    }

    /// Holdings with every tenant's node networks (and granted domains).
    pub fn holdings(tenants: &[&'a Tenant]) -> Holdings {
        Holdings::from_objects(tenants.iter().copied(), std::iter::empty())
    }

    /// The Tenant owning `namespace`; `None` for the operator's namespaces.
    pub fn get(&self, namespace: &str) -> Option<&TenantView<'a>> {
        self.by_namespace.get(namespace)
    }

    pub fn is_empty(&self) -> bool {
        self.by_namespace.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_api::TenantSpec;

    fn tenant(cluster: &str, cidr: &str) -> Tenant {
        Tenant::new(
            cluster,
            TenantSpec {
                cluster: cluster.into(),
                allowed_domains: vec![format!("{cluster}.example.com")],
                node_cidrs: vec![cidr.into()],
                ..TenantSpec::default()
            },
        )
    }

    #[test]
    fn scopes_and_endpoints_follow_the_policy() {
        let acme = tenant("acme", "10.1.0.0/16");
        let other = tenant("other", "10.1.2.0/24");
        let tenants = [&acme, &other];
        let holdings = Tenancy::holdings(&tenants);
        let lb: Vec<IpNet> = vec!["10.1.9.0/24".parse().unwrap()];
        let tenancy = Tenancy::new(&tenants, "example.net", &lb, &holdings);
        let v = tenancy.get("tenant-acme").unwrap();
        let scope = |h: &str| v.scope(&HostPattern::parse(h).unwrap());
        assert_eq!(scope("web-shop.acme.lb.example.net"), Ok(HostScope::Assigned));
        assert_eq!(scope("api.acme.example.com"), Ok(HostScope::Allowed));
        assert_eq!(scope("www.acme-corp.test"), Ok(HostScope::Custom));
        assert!(scope("web.other.lb.example.net").is_err());
        assert!(scope("*.acme-corp.test").is_err());
        let ok = |ip: &str| v.endpoint_allowed(ip.parse().unwrap());
        assert!(ok("10.1.0.5").is_ok());
        assert!(ok("10.1.9.5").is_err(), "LB cluster range");
        assert!(ok("10.1.2.5").is_err(), "another tenant's nodes");
        assert!(ok("10.2.0.5").is_err(), "outside nodeCIDRs");
        assert!(ok("127.0.0.1").is_err());
        assert!(ok("169.254.169.254").is_err());
        assert!(tenancy.get("default").is_none());
    }
}
