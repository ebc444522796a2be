//! Rules on `Tenant` objects, as an admin writes them.

use ipnet::IpNet;

use super::addresses::{forbidden_networks, overlaps};
use super::hosts::within;
use super::names::dns_label;
use super::{Holdings, Violation, quote};
use crate::host::HostPattern;
use crate::tenant::Tenant;

/// Checks a Tenant against the operator's `domain` and LB ranges and the
/// `others` Tenants: CLUSTER and namespace are DNS labels and unique;
/// `allowedDomains` are exact, fully qualified, outside `lb.DOMAIN` and
/// `DOMAIN` itself, and overlap no other tenant's domains or hosts held by
/// others; `nodeCIDRs` parse and overlap neither the LB cluster, the
/// never-endpoint ranges nor another tenant's networks.
pub fn check_tenant(
    tenant: &Tenant,
    domain: &str,
    lb_networks: &[IpNet],
    others: &[&Tenant],
    holdings: &Holdings,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let spec = &tenant.spec;
    let name = tenant.metadata.name.as_deref().unwrap_or("");
    let others: Vec<&Tenant> = others
        .iter()
        .copied()
        .filter(|o| o.metadata.name.as_deref().unwrap_or("") != name)
        .collect();
    if let Err(e) = dns_label(&spec.cluster) {
        out.push(Violation::new("spec.cluster", e));
    } else if let Some(o) = others.iter().find(|o| o.spec.cluster == spec.cluster) {
        out.push(Violation::new(
            "spec.cluster",
            format!(
                "already used by Tenant {}",
                o.metadata.name.as_deref().unwrap_or("")
            ),
        ));
    }
    let namespace = tenant.namespace_name();
    let ns_field = if spec.namespace.is_some() {
        "spec.namespace"
    } else {
        "spec.cluster"
    };
    if let Err(e) = dns_label(&namespace) {
        out.push(Violation::new(ns_field, format!("namespace {e}")));
    } else if let Some(o) = others.iter().find(|o| o.namespace_name() == namespace) {
        out.push(Violation::new(
            ns_field,
            format!(
                "namespace {namespace} already belongs to Tenant {}",
                o.metadata.name.as_deref().unwrap_or("")
            ),
        ));
    }
    let lb = format!("lb.{domain}");
    for (i, raw) in spec.allowed_domains.iter().enumerate() {
        let field = format!("spec.allowedDomains[{i}]");
        let d = match HostPattern::parse(raw) {
            Ok(HostPattern::Exact(d)) => d,
            Ok(HostPattern::Wildcard(_)) => {
                out.push(Violation::new(
                    field,
                    "a domain covers its subdomains already; write it without '*.'",
                ));
                continue;
            }
            Err(e) => {
                out.push(Violation::new(field, format!("{}: {e}", quote(raw))));
                continue;
            }
        };
        if !d.contains('.') {
            out.push(Violation::new(
                field,
                format!("{d} is a top-level domain; grant a registered domain"),
            ));
        } else if within(&d, &lb) || within(&lb, &d) {
            out.push(Violation::new(
                field,
                format!("{d} overlaps {lb}, where hostnames are assigned"),
            ));
        } else if d == domain {
            out.push(Violation::new(
                field,
                format!("{d} is the operator's whole domain; grant a subdomain"),
            ));
        } else if let Some(o) = others.iter().find(|o| {
            o.spec.allowed_domains.iter().any(|od| {
                let od = od.strip_suffix('.').unwrap_or(od).to_ascii_lowercase();
                within(&d, &od) || within(&od, &d)
            })
        }) {
            out.push(Violation::new(
                field,
                format!(
                    "{d} overlaps a domain granted to Tenant {}",
                    o.metadata.name.as_deref().unwrap_or("")
                ),
            ));
        } else {
            let held = holdings.held_within(&d, &spec.cluster);
            if let Some((host, holder)) = held.first() {
                out.push(Violation::new(
                    field,
                    format!(
                        "{d} covers {host}, already used by {holder}{}",
                        if held.len() > 1 {
                            format!(" (and {} more)", held.len() - 1)
                        } else {
                            String::new()
                        }
                    ),
                ));
            }
        }
    }
    let forbidden = forbidden_networks();
    for (i, raw) in spec.node_cidrs.iter().enumerate() {
        let field = format!("spec.nodeCIDRs[{i}]");
        let Ok(net) = raw.parse::<IpNet>() else {
            out.push(Violation::new(
                field,
                format!("{} is not a CIDR such as 10.0.0.0/24", quote(raw)),
            ));
            continue;
        };
        if let Some((n, why)) = forbidden.iter().find(|(n, _)| overlaps(n, &net)) {
            out.push(Violation::new(
                field,
                format!("{net} overlaps {n} ({why}), which is never an endpoint"),
            ));
        } else if let Some(n) = lb_networks.iter().find(|n| overlaps(n, &net)) {
            out.push(Violation::new(
                field,
                format!("{net} overlaps {n}, a range of the LB cluster itself"),
            ));
        } else if let Some(o) = others
            .iter()
            .find(|o| o.node_networks().iter().any(|n| overlaps(n, &net)))
        {
            out.push(Violation::new(
                field,
                format!(
                    "{net} overlaps the nodeCIDRs of Tenant {}",
                    o.metadata.name.as_deref().unwrap_or("")
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn tenant(spec: &str) -> Tenant {
        yaml(&format!(
            "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: new}}\nspec:\n{spec}"
        ))
    }

    fn check(spec: &str) -> Vec<String> {
        let f = Fixture::new();
        let others = [&f.tenant, &f.globex];
        let lb: Vec<IpNet> = vec!["10.96.0.0/12".parse().unwrap()];
        fields(&check_tenant(
            &tenant(spec),
            DOMAIN,
            &lb,
            &others,
            &f.holdings,
        ))
    }

    #[test]
    fn good_tenant() {
        assert_eq!(
            check(
                "  cluster: initech\n  allowedDomains: [initech.com, tps.example.net]\n  nodeCIDRs: [10.3.0.0/24, \"2001:db8:3::/64\"]\n"
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn bad_tenants() {
        assert_eq!(check("  cluster: acme\n"), ["spec.cluster", "spec.cluster"]);
        assert_eq!(
            check("  cluster: Bad_Name\n"),
            ["spec.cluster", "spec.cluster"]
        );
        assert_eq!(
            check("  cluster: x\n  namespace: tenant-acme\n"),
            ["spec.namespace"]
        );
        assert_eq!(
            check(
                "  cluster: x\n  allowedDomains: [\"*.x.com\", com, lb.example.net, x.lb.example.net, example.net, shop.example.com, example.com, www.globex.com, ops.example.org]\n"
            ),
            (0..9)
                .map(|i| format!("spec.allowedDomains[{i}]"))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            check(
                "  cluster: x\n  nodeCIDRs: [10.0.0.0/33, 0.0.0.0/0, 169.254.0.0/16, 10.100.0.0/16, 10.2.0.0/16, \"::/0\"]\n"
            ),
            (0..6)
                .map(|i| format!("spec.nodeCIDRs[{i}]"))
                .collect::<Vec<_>>()
        );
    }
}
