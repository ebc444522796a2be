//! Which hosts a tenant may use (docs/architecture.md, "Hostnames and hosts"), and
//! who already holds what.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::Ingress;

use super::{AdmissionContext, Violation, quote};
use crate::host::HostPattern;
use crate::tenant::Tenant;

/// Where a host a tenant may use comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostScope {
    /// Under the tenant's own `*.CLUSTER.lb.DOMAIN`.
    Assigned,
    /// Under one of the tenant's `allowedDomains` (granted by an admin).
    Allowed,
    /// Any other exact host: admitted, but routed only once DNS proves the
    /// tenant owns it (the proxy checks).
    Custom,
}

/// Who holds a host, a domain or a network.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Holder {
    /// A tenant, by CLUSTER.
    Tenant(String),
    /// An Ingress in a namespace no Tenant owns.
    Operator { namespace: String },
}

impl Holder {
    fn is_tenant(&self, cluster: &str) -> bool {
        matches!(self, Holder::Tenant(c) if c == cluster)
    }

    /// How a tenant is told who holds it: never another tenant's name.
    pub fn for_tenant(&self) -> &'static str {
        match self {
            Holder::Tenant(_) => "another tenant",
            Holder::Operator { .. } => "the operator",
        }
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Holder::Tenant(c) => write!(f, "tenant {c}"),
            Holder::Operator { namespace } => write!(f, "the operator (namespace {namespace})"),
        }
    }
}

/// Hosts, granted domains and node networks, each with who holds it:
/// built from every Tenant and every Ingress the LB cluster has, and asked
/// whether a host a tenant wants is someone else's.
///
/// The grants and networks come from the Tenants alone and are shared
/// between clones (copied only when a clone adds to them): the proxy's
/// tenant check starts each change's holdings from every Tenant's, and a
/// deep copy of those took 1.7 ms at 1,000 Tenants.
#[derive(Clone, Debug, Default)]
pub struct Holdings {
    /// Exact hosts.
    exact: HashMap<String, Vec<Holder>>,
    /// Wildcards, by suffix (`*.foo.com` -> `foo.com`).
    wildcard: HashMap<String, Vec<Holder>>,
    /// Exact hosts by their parent (`a.foo.com` -> `foo.com`): what a
    /// wildcard on the parent would cover.
    exact_by_parent: HashMap<String, Vec<Holder>>,
    /// Gateway API wildcards, by suffix: `*.foo.com` on a Gateway listener
    /// or a route covers every name below `foo.com`, any number of labels
    /// down (also recorded in `wildcard`, which covers one label).
    subtrees: HashMap<String, Vec<Holder>>,
    /// `allowedDomains`: the domain and everything below it.
    grants: Arc<HashMap<String, Vec<Holder>>>,
    /// Granted domains by parent: what a wildcard on the parent covers.
    grants_by_parent: Arc<HashMap<String, Vec<Holder>>>,
    /// Tenants' node networks, by prefix length: an address is looked up
    /// once per length in use (a handful), not against every network of
    /// every tenant (each endpoint of each slice asks).
    networks: Arc<Vec<NetworksOfLength>>,
}

/// The node networks of one address family and prefix length, by their
/// network address, with the tenants holding each.
#[derive(Clone, Debug)]
struct NetworksOfLength {
    v6: bool,
    len: u8,
    holders: HashMap<IpNet, Vec<String>>,
}

fn add(map: &mut HashMap<String, Vec<Holder>>, key: &str, holder: &Holder) {
    let v = map.entry(key.to_string()).or_default();
    if !v.contains(holder) {
        v.push(holder.clone());
    }
}

fn other<'a>(
    map: &'a HashMap<String, Vec<Holder>>,
    key: &str,
    cluster: &str,
) -> Option<&'a Holder> {
    map.get(key)?.iter().find(|h| !h.is_tenant(cluster))
}

/// `a.b.c` -> `b.c`.
fn parent(name: &str) -> Option<&str> {
    name.split_once('.').map(|(_, rest)| rest)
}

/// `a.b.c`, `b.c`, `c`.
fn self_and_ancestors(name: &str) -> impl Iterator<Item = &str> {
    std::iter::successors(Some(name), |n| parent(n))
}

/// Whether `name` is `domain` or below it.
pub(crate) fn within(name: &str, domain: &str) -> bool {
    name == domain
        || (name.len() > domain.len()
            && name.ends_with(domain)
            && name.as_bytes()[name.len() - domain.len() - 1] == b'.')
}

impl Holdings {
    /// Records that `holder` uses `host` in an Ingress.
    pub fn insert(&mut self, holder: Holder, host: &HostPattern) {
        match host {
            HostPattern::Exact(h) => {
                add(&mut self.exact, h, &holder);
                if let Some(p) = parent(h) {
                    add(&mut self.exact_by_parent, p, &holder);
                }
            }
            HostPattern::Wildcard(s) => add(&mut self.wildcard, s, &holder),
        }
    }

    /// Records that `holder` uses `host` as a Gateway API hostname (a
    /// listener's or a route's): a wildcard there holds the whole subtree
    /// below its suffix.
    pub fn insert_gateway_host(&mut self, holder: Holder, host: &HostPattern) {
        if let HostPattern::Wildcard(s) = host {
            add(&mut self.subtrees, s, &holder);
        }
        self.insert(holder, host);
    }

    /// A Gateway API wildcard of someone else whose subtree holds `name`
    /// (strictly below its suffix), or, with `or_at`, whose suffix is
    /// `name` itself.
    fn subtree_over(&self, name: &str, cluster: &str, or_at: bool) -> Option<&Holder> {
        let skip = usize::from(!or_at);
        self_and_ancestors(name)
            .skip(skip)
            .find_map(|n| other(&self.subtrees, n, cluster))
    }

    /// Records that an admin granted `domain` (and everything below it) to
    /// tenant `cluster`.
    pub fn grant(&mut self, cluster: &str, domain: &str) {
        let holder = Holder::Tenant(cluster.to_string());
        add(Arc::make_mut(&mut self.grants), domain, &holder);
        if let Some(p) = parent(domain) {
            add(Arc::make_mut(&mut self.grants_by_parent), p, &holder);
        }
    }

    /// Records a tenant's node network.
    pub fn insert_network(&mut self, cluster: &str, network: IpNet) {
        let (v6, len) = (matches!(network, IpNet::V6(_)), network.prefix_len());
        let networks = Arc::make_mut(&mut self.networks);
        let at = match networks.iter().position(|n| n.v6 == v6 && n.len == len) {
            Some(at) => at,
            None => {
                networks.push(NetworksOfLength {
                    v6,
                    len,
                    holders: HashMap::new(),
                });
                networks.len() - 1
            }
        };
        let holders = networks[at].holders.entry(network.trunc()).or_default();
        if !holders.iter().any(|c| c == cluster) {
            holders.push(cluster.to_string());
        }
    }

    /// Every Tenant's grants and networks, and the hosts of every Ingress
    /// (by the tenant owning its namespace, else the operator).
    pub fn from_objects<'a>(
        tenants: impl IntoIterator<Item = &'a Tenant>,
        ingresses: impl IntoIterator<Item = (&'a str, &'a Ingress)>,
    ) -> Holdings {
        let mut h = Holdings::default();
        let mut by_namespace = HashMap::new();
        for t in tenants {
            let cluster = t.spec.cluster.as_str();
            by_namespace.entry(t.namespace_name()).or_insert(cluster);
            for d in &t.spec.allowed_domains {
                if let Ok(HostPattern::Exact(d)) = HostPattern::parse(d) {
                    h.grant(cluster, &d);
                }
            }
            for n in t.node_networks() {
                h.insert_network(cluster, n);
            }
        }
        for (namespace, ingress) in ingresses {
            let holder = match by_namespace.get(namespace) {
                Some(c) => Holder::Tenant((*c).to_string()),
                None => Holder::Operator {
                    namespace: namespace.to_string(),
                },
            };
            let Some(spec) = &ingress.spec else { continue };
            let rule_hosts = spec
                .rules
                .iter()
                .flatten()
                .filter_map(|r| r.host.as_deref());
            let tls_hosts = spec
                .tls
                .iter()
                .flatten()
                .flat_map(|t| t.hosts.iter().flatten().map(String::as_str));
            for host in rule_hosts.chain(tls_hosts) {
                if let Ok(p) = HostPattern::parse(host) {
                    h.insert(holder.clone(), &p);
                }
            }
        }
        h
    }

    /// Someone other than tenant `cluster` who holds a host overlapping
    /// `host`: the same exact host, a wildcard covering it (or an exact
    /// host the wildcard would cover), or a granted domain it lies in
    /// (or that the wildcard would cover).
    pub fn holder_conflicting(&self, host: &HostPattern, cluster: &str) -> Option<&Holder> {
        match host {
            HostPattern::Exact(h) => other(&self.exact, h, cluster)
                .or_else(|| parent(h).and_then(|p| other(&self.wildcard, p, cluster)))
                .or_else(|| self.grant_over(h, cluster))
                .or_else(|| self.subtree_over(h, cluster, false)),
            HostPattern::Wildcard(s) => other(&self.wildcard, s, cluster)
                .or_else(|| other(&self.exact_by_parent, s, cluster))
                .or_else(|| self.grant_over(s, cluster))
                .or_else(|| other(&self.grants_by_parent, s, cluster))
                .or_else(|| self.subtree_over(s, cluster, true)),
        }
    }

    /// Like [`Self::holder_conflicting`] for a host that is a custom domain
    /// of tenant `cluster`: another tenant's claim on the same exact host
    /// does not count. Custom domains go to the tenant that proves them
    /// by DNS (the proxy's compile), not to whoever wrote the name first,
    /// so an unproven claim never blocks the domain's owner. The operator's hosts and other tenants'
    /// grants still do.
    pub fn holder_conflicting_custom(&self, host: &str, cluster: &str) -> Option<&Holder> {
        self.exact
            .get(host)
            .and_then(|holders| {
                holders
                    .iter()
                    .find(|h| matches!(h, Holder::Operator { .. }))
            })
            .or_else(|| parent(host).and_then(|p| other(&self.wildcard, p, cluster)))
            .or_else(|| self.grant_over(host, cluster))
            .or_else(|| self.subtree_over(host, cluster, false))
    }

    /// A grant to someone else that `name` lies in.
    fn grant_over(&self, name: &str, cluster: &str) -> Option<&Holder> {
        self_and_ancestors(name).find_map(|n| other(&self.grants, n, cluster))
    }

    /// Hosts and grants of others at or below `domain` (for an admin
    /// granting it), sorted.
    pub fn held_within(&self, domain: &str, cluster: &str) -> Vec<(String, &Holder)> {
        let mut out = Vec::new();
        for (map, wildcard) in [
            (&self.exact, false),
            (&self.wildcard, true),
            (&*self.grants, false),
        ] {
            for (name, holders) in map {
                let covered = within(name, domain) || (wildcard && parent(domain) == Some(name));
                if !covered {
                    continue;
                }
                for h in holders.iter().filter(|h| !h.is_tenant(cluster)) {
                    let shown = if wildcard {
                        format!("*.{name}")
                    } else {
                        name.clone()
                    };
                    out.push((shown, h));
                }
            }
        }
        // A granted domain above `domain` covers it too, and so does a
        // Gateway API wildcard above it.
        if let Some(h) = self.grant_over(domain, cluster) {
            out.push((domain.to_string(), h));
        }
        if let Some(h) = self.subtree_over(domain, cluster, false) {
            out.push((domain.to_string(), h));
        }
        out.sort();
        out.dedup();
        out
    }

    /// The tenant (other than `cluster`) whose node network holds `ip`.
    pub fn network_holder(&self, ip: IpAddr, cluster: &str) -> Option<&str> {
        self.networks
            .iter()
            .filter(|n| n.v6 == ip.is_ipv6())
            .find_map(|n| {
                let net = IpNet::new(ip, n.len).ok()?.trunc();
                n.holders.get(&net)?.iter().find(|c| *c != cluster)
            })
            .map(String::as_str)
    }
}

/// Where `host` comes from for the tenant of `ctx`, or why it may not use
/// it: hosts under `lb.DOMAIN` only in its own subtree, wildcards only
/// there or in its `allowedDomains`, nothing else under the operator's
/// DOMAIN, and custom hosts exact and fully qualified.
pub fn host_scope(ctx: &AdmissionContext<'_>, host: &HostPattern) -> Result<HostScope, String> {
    let (name, wildcard) = match host {
        HostPattern::Exact(h) => (h.as_str(), false),
        HostPattern::Wildcard(s) => (s.as_str(), true),
    };
    let lb = format!("lb.{}", ctx.domain);
    let zone = ctx.zone();
    if within(name, &lb) {
        return if within(name, &zone) {
            Ok(HostScope::Assigned)
        } else {
            Err(format!(
                "{host} is under {lb} but outside your own subtree *.{zone}"
            ))
        };
    }
    let allowed = ctx.tenant.spec.allowed_domains.iter().any(|d| {
        let d = d.strip_suffix('.').unwrap_or(d).to_ascii_lowercase();
        within(name, &d)
    });
    if allowed {
        return Ok(HostScope::Allowed);
    }
    if within(name, ctx.domain) {
        return Err(format!(
            "{host} is under {}, the operator's domain; hosts there need an allowedDomains grant on your Tenant",
            ctx.domain
        ));
    }
    if wildcard {
        return Err(format!(
            "wildcard {host} is outside your subtree *.{zone} and your allowedDomains; a custom domain must be an exact host"
        ));
    }
    if !name.contains('.') {
        return Err(format!("{host} is not a fully qualified domain name"));
    }
    Ok(HostScope::Custom)
}

/// Parses a host written at `field`, checks its scope and that nobody else
/// holds it. Pushes what is wrong; returns the host and scope when it may
/// be used.
pub fn check_host(
    ctx: &AdmissionContext<'_>,
    field: &str,
    raw: &str,
    out: &mut Vec<Violation>,
) -> Option<(HostPattern, HostScope)> {
    let host = match HostPattern::parse(raw) {
        Ok(h) => h,
        Err(e) => {
            out.push(Violation::new(
                field,
                format!("{} is not a valid host: {e}", quote(raw)),
            ));
            return None;
        }
    };
    let scope = match host_scope(ctx, &host) {
        Ok(s) => s,
        Err(e) => {
            out.push(Violation::new(field, e));
            return None;
        }
    };
    let holder = match (&host, scope) {
        (HostPattern::Exact(name), HostScope::Custom) => {
            ctx.holdings.holder_conflicting_custom(name, ctx.cluster())
        }
        _ => ctx.holdings.holder_conflicting(&host, ctx.cluster()),
    };
    if let Some(holder) = holder {
        out.push(Violation::new(
            field,
            format!(
                "{host} overlaps a host or domain held by {}; a host belongs to one tenant",
                holder.for_tenant()
            ),
        ));
        return None;
    }
    Some((host, scope))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn p(s: &str) -> HostPattern {
        HostPattern::parse(s).unwrap()
    }

    /// A clone shares the Tenants' grants and networks until it adds to
    /// them, and what it adds stays its own.
    #[test]
    fn a_clone_shares_grants_and_networks_until_it_adds_to_them() {
        let mut base = Holdings::default();
        base.grant("a", "a.example.com");
        base.insert_network("a", "10.0.0.0/24".parse().unwrap());
        let mut clone = base.clone();
        clone.insert(Holder::Tenant("b".into()), &p("x.b.example.com"));
        assert!(Arc::ptr_eq(&clone.grants, &base.grants));
        assert!(Arc::ptr_eq(&clone.networks, &base.networks));
        clone.grant("b", "b.example.com");
        clone.insert_network("b", "10.0.1.0/24".parse().unwrap());
        let ip: IpAddr = "10.0.1.5".parse().unwrap();
        assert_eq!(clone.network_holder(ip, "a"), Some("b"));
        assert_eq!(base.network_holder(ip, "a"), None);
        assert!(
            clone
                .holder_conflicting(&p("y.b.example.com"), "a")
                .is_some()
        );
        assert!(
            base.holder_conflicting(&p("y.b.example.com"), "a")
                .is_none()
        );
        assert!(
            base.holder_conflicting(&p("x.b.example.com"), "a")
                .is_none()
        );
    }

    /// Node networks of every length, nested and of both families, looked
    /// up by length: the same answer as a walk over every network.
    #[test]
    fn a_network_holder_is_found_by_prefix_length() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut roll = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut holdings = Holdings::default();
        let mut all: Vec<(IpNet, String)> = Vec::new();
        for _ in 0..300 {
            let cluster = ["a", "b", "c"][roll(3) as usize].to_string();
            let net: IpNet = match roll(3) {
                0 => format!("fd00::{:x}/{}", roll(64), 120 + roll(9)),
                _ => format!("10.{}.{}.0/{}", roll(4), roll(8), 16 + roll(17)),
            }
            .parse()
            .unwrap();
            holdings.insert_network(&cluster, net);
            all.push((net, cluster));
        }
        let (mut held, mut free) = (0, 0);
        for _ in 0..20_000 {
            let ip: IpAddr = match roll(3) {
                0 => format!("fd00::{:x}", roll(512)),
                _ => format!("10.{}.{}.{}", roll(4), roll(8), roll(256)),
            }
            .parse()
            .unwrap();
            let cluster = ["a", "b", "c"][roll(3) as usize];
            let walked = all.iter().any(|(n, c)| c != cluster && n.contains(&ip));
            let found = holdings.network_holder(ip, cluster);
            assert_eq!(found.is_some(), walked, "{ip} for {cluster}");
            assert!(found.is_none_or(|c| c != cluster));
            if walked {
                held += 1;
            } else {
                free += 1;
            }
        }
        assert!(held > 1000 && free > 1000, "{held} held, {free} free");
    }

    #[test]
    fn scopes() {
        let f = Fixture::new();
        let ctx = f.ctx();
        let scope = |h: &str| host_scope(&ctx, &p(h));
        assert_eq!(
            scope("web-shop.acme.lb.example.net"),
            Ok(HostScope::Assigned)
        );
        assert_eq!(scope("acme.lb.example.net"), Ok(HostScope::Assigned));
        assert_eq!(scope("*.acme.lb.example.net"), Ok(HostScope::Assigned));
        assert_eq!(scope("a.b.acme.lb.example.net"), Ok(HostScope::Assigned));
        assert_eq!(scope("shop.example.com"), Ok(HostScope::Allowed));
        assert_eq!(scope("*.shop.example.com"), Ok(HostScope::Allowed));
        assert_eq!(scope("eu.shop.example.com"), Ok(HostScope::Allowed));
        assert_eq!(scope("www.acme-shop.com"), Ok(HostScope::Custom));
        assert!(scope("web.globex.lb.example.net").is_err());
        assert!(scope("*.lb.example.net").is_err());
        assert!(scope("lb.example.net").is_err());
        assert!(scope("*.acmelb.example.net").is_err(), "operator domain");
        assert!(scope("www.example.net").is_err(), "operator domain");
        assert!(scope("example.net").is_err());
        assert!(scope("*.example.com").is_err(), "wildcard outside");
        assert!(scope("*.com").is_err());
        assert!(scope("localhost").is_err(), "single label");
        // `xacme.lb.example.net` is not inside `acme.lb.example.net`.
        assert!(scope("xacme.lb.example.net").is_err());
    }

    #[test]
    fn holdings_overlap_both_ways() {
        let mut h = Holdings::default();
        let g = Holder::Tenant("globex".into());
        h.insert(g.clone(), &p("www.globex.com"));
        h.insert(g.clone(), &p("*.apps.globex.io"));
        h.grant("globex", "globex.example.org");
        let hit = |host: &str| h.holder_conflicting(&p(host), "acme").cloned();
        assert_eq!(hit("www.globex.com"), Some(g.clone()));
        assert_eq!(hit("*.globex.com"), Some(g.clone()), "wildcard over exact");
        assert_eq!(
            hit("x.apps.globex.io"),
            Some(g.clone()),
            "exact under wildcard"
        );
        assert_eq!(hit("*.apps.globex.io"), Some(g.clone()));
        assert_eq!(hit("a.x.apps.globex.io"), None, "a wildcard is one label");
        assert_eq!(hit("apps.globex.io"), None);
        assert_eq!(
            hit("*.globex.io"),
            None,
            "*.globex.io covers apps.globex.io only"
        );
        assert_eq!(hit("globex.example.org"), Some(g.clone()), "granted domain");
        assert_eq!(hit("a.b.globex.example.org"), Some(g.clone()));
        assert_eq!(hit("*.globex.example.org"), Some(g.clone()));
        assert_eq!(
            hit("*.example.org"),
            Some(g.clone()),
            "covers the granted name"
        );
        assert_eq!(hit("example.org"), None);
        assert_eq!(h.holder_conflicting(&p("www.globex.com"), "globex"), None);
        let held = h.held_within("globex.com", "acme");
        assert_eq!(held, [("www.globex.com".to_string(), &g)]);
        let held = h.held_within("apps.globex.io", "acme");
        assert_eq!(held, [("*.apps.globex.io".to_string(), &g)]);
    }

    #[test]
    fn gateway_api_wildcards_hold_a_subtree() {
        let mut h = Holdings::default();
        let g = Holder::Tenant("globex".into());
        h.insert_gateway_host(g.clone(), &p("*.globex.io"));
        let hit = |host: &str| h.holder_conflicting(&p(host), "acme").cloned();
        assert_eq!(hit("a.globex.io"), Some(g.clone()), "one label down");
        assert_eq!(hit("a.b.globex.io"), Some(g.clone()), "two labels down");
        assert_eq!(hit("*.b.globex.io"), Some(g.clone()));
        assert_eq!(hit("*.globex.io"), Some(g.clone()));
        assert_eq!(hit("globex.io"), None, "the suffix itself is not covered");
        assert_eq!(hit("*.io"), None, "*.io covers globex.io, which is free");
        assert_eq!(
            h.holder_conflicting_custom("shop.a.globex.io", "acme"),
            Some(&g)
        );
        assert_eq!(h.holder_conflicting(&p("a.b.globex.io"), "globex"), None);
        // Granting b.globex.io: its own name (one label under the
        // wildcard) and its subtree are held.
        assert_eq!(
            h.held_within("b.globex.io", "acme"),
            [
                ("*.globex.io".to_string(), &g),
                ("b.globex.io".to_string(), &g)
            ]
        );
        // An Ingress wildcard stays one label.
        let mut i = Holdings::default();
        i.insert(g.clone(), &p("*.globex.io"));
        assert_eq!(i.holder_conflicting(&p("a.b.globex.io"), "acme"), None);
    }

    #[test]
    fn hosts_are_checked_in_order() {
        let f = Fixture::new();
        let ctx = f.ctx();
        let mut out = Vec::new();
        // In another tenant's granted domain: refused.
        assert!(check_host(&ctx, "h", "api.globex.example.org", &mut out).is_none());
        // A custom domain another tenant also claims: DNS proof decides
        // (the proxy), so the claim blocks nobody here.
        assert_eq!(
            check_host(&ctx, "h", "www.globex.com", &mut out).map(|(_, s)| s),
            Some(HostScope::Custom)
        );
        assert!(check_host(&ctx, "h", "grafana.ops.example.org", &mut out).is_none());
        assert!(check_host(&ctx, "h", "ex\u{0430}mple.com", &mut out).is_none());
        assert!(check_host(&ctx, "h", "a%2eb.com", &mut out).is_none());
        assert!(check_host(&ctx, "h", "www.acme-shop.com", &mut out).is_some());
        assert_eq!(out.len(), 4);
        assert!(out[0].message.contains("another tenant"));
        assert!(
            !out[0].message.contains("tenant globex"),
            "never names the tenant"
        );
        assert!(out[1].message.contains("the operator"));
        assert!(out[2].message.contains("not a valid host"));
    }
}
