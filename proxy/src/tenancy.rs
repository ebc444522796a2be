//! Tenant namespaces in the compile: which namespace a Tenant owns, the
//! hostnames it is assigned, which hosts it may route and which addresses
//! its endpoints may use (defence in depth behind the webhook, DESIGN.md
//! "Security rules": the proxy never forwards a tenant's traffic to an
//! address the webhook would refuse there).

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;
use teapot_api::{HostPattern, Tenant, hostname};

/// How a tenant holds a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Inside `*.CLUSTER.lb.DOMAIN`.
    Own,
    /// Inside one of `spec.allowedDomains`.
    Granted,
    /// Elsewhere: routed only once DNS proves it.
    Custom,
}

/// One Tenant as the compile sees it.
#[derive(Debug)]
pub struct TenantView<'a> {
    pub tenant: &'a Tenant,
    pub cluster: &'a str,
    /// `CLUSTER.lb.DOMAIN`.
    pub zone: String,
    networks: Vec<IpNet>,
}

impl TenantView<'_> {
    /// Where `host` stands for this tenant, or why it may not use it.
    pub fn scope(&self, host: &HostPattern, domain: &str) -> Result<Scope, String> {
        let (name, wildcard) = match host {
            HostPattern::Exact(h) => (h.as_str(), false),
            HostPattern::Wildcard(s) => (s.as_str(), true),
        };
        let under = |zone: &str| name == zone || name.ends_with(&format!(".{zone}"));
        if under(&self.zone) {
            return Ok(Scope::Own);
        }
        let fleet = format!("lb.{domain}");
        if under(&fleet) {
            return Err(format!("{host} is in another tenant's part of {fleet}"));
        }
        for granted in &self.tenant.spec.allowed_domains {
            let granted = granted.trim_end_matches('.').to_ascii_lowercase();
            if under(&granted) {
                return Ok(Scope::Granted);
            }
        }
        if wildcard {
            return Err(format!(
                "wildcard {host} is outside {} and the tenant's allowed domains",
                self.zone
            ));
        }
        Ok(Scope::Custom)
    }

    /// Whether an endpoint address may carry this tenant's traffic.
    pub fn endpoint_allowed(&self, ip: IpAddr, lb_networks: &[IpNet]) -> Result<(), String> {
        if let Some(why) = forbidden_address(ip) {
            return Err(format!("{ip} is {why}"));
        }
        if let Some(net) = lb_networks.iter().find(|n| n.contains(&ip)) {
            return Err(format!("{ip} is in the LB cluster's own range {net}"));
        }
        if !self.networks.iter().any(|n| n.contains(&ip)) {
            return Err(format!("{ip} is outside the tenant's nodeCIDRs"));
        }
        Ok(())
    }
}

/// Addresses no tenant endpoint may use, whatever its nodeCIDRs say.
pub fn forbidden_address(ip: IpAddr) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    if ip.is_loopback() {
        return Some("loopback");
    }
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_multicast() {
        return Some("multicast");
    }
    match ip {
        IpAddr::V4(v4) => {
            if v4.octets() == [169, 254, 169, 254] {
                return Some("the cloud metadata address");
            }
            if v4.is_link_local() {
                return Some("link-local");
            }
            if v4.is_broadcast() {
                return Some("broadcast");
            }
        }
        IpAddr::V6(v6) => {
            if v6.segments()[0] & 0xffc0 == 0xfe80 {
                return Some("link-local");
            }
            if v6.segments() == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254] {
                return Some("the cloud metadata address");
            }
        }
    }
    None
}

/// Tenants by the namespace they own.
#[derive(Debug, Default)]
pub struct Tenancy<'a> {
    by_namespace: HashMap<String, TenantView<'a>>,
}

impl<'a> Tenancy<'a> {
    pub fn new<I>(tenants: I, domain: &str) -> Tenancy<'a>
    where
        I: IntoIterator<Item = &'a Tenant>,
    {
        let mut by_namespace = HashMap::new();
        for tenant in tenants {
            by_namespace
                .entry(tenant.namespace_name())
                .or_insert_with(|| TenantView {
                    tenant,
                    cluster: &tenant.spec.cluster,
                    zone: hostname::tenant_zone(&tenant.spec.cluster, domain),
                    networks: tenant.node_networks(),
                });
        }
        Tenancy { by_namespace }
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

    fn acme() -> Tenant {
        Tenant::new(
            "acme",
            TenantSpec {
                cluster: "acme".into(),
                allowed_domains: vec!["shop.example.com".into()],
                node_cidrs: vec!["10.1.0.0/24".into()],
                ..TenantSpec::default()
            },
        )
    }

    #[test]
    fn scopes() {
        let t = acme();
        let tenancy = Tenancy::new([&t], "example.net");
        let v = tenancy.get("tenant-acme").unwrap();
        let scope = |h: &str| v.scope(&HostPattern::parse(h).unwrap(), "example.net");
        assert_eq!(scope("web-shop.acme.lb.example.net"), Ok(Scope::Own));
        assert_eq!(scope("*.acme.lb.example.net"), Ok(Scope::Own));
        assert_eq!(scope("shop.example.com"), Ok(Scope::Granted));
        assert_eq!(scope("api.shop.example.com"), Ok(Scope::Granted));
        assert_eq!(scope("*.shop.example.com"), Ok(Scope::Granted));
        assert_eq!(scope("www.acme.com"), Ok(Scope::Custom));
        assert!(scope("web.other.lb.example.net").is_err());
        assert!(scope("acme.lb.example.net.evil.com").is_ok_and(|s| s == Scope::Custom));
        assert!(scope("*.example.com").is_err());
        assert!(scope("xshop.example.com").is_ok_and(|s| s == Scope::Custom));
    }

    #[test]
    fn endpoints() {
        let t = acme();
        let tenancy = Tenancy::new([&t], "example.net");
        let v = tenancy.get("tenant-acme").unwrap();
        let lb: Vec<IpNet> = vec!["10.1.0.128/25".parse().unwrap()];
        let ok = |ip: &str| v.endpoint_allowed(ip.parse().unwrap(), &lb);
        assert!(ok("10.1.0.5").is_ok());
        assert!(ok("10.1.0.200").unwrap_err().contains("LB cluster"));
        assert!(ok("10.2.0.5").unwrap_err().contains("nodeCIDRs"));
        assert!(ok("127.0.0.1").unwrap_err().contains("loopback"));
        assert!(ok("169.254.169.254").unwrap_err().contains("metadata"));
        assert!(ok("::ffff:127.0.0.1").unwrap_err().contains("loopback"));
        assert!(ok("fe80::1").unwrap_err().contains("link-local"));
        assert!(tenancy.get("default").is_none());
    }
}
