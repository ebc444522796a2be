//! ingress-nginx's host-wide regex paths: once one Ingress of a host asks
//! for regex paths (`use-regex`, or a `rewrite-target` that rewrites), it
//! writes every location of that host with the case-insensitive regex
//! modifier, whatever Ingress it came from
//! (its user guide, "Ingress Path Matching"). teapot does the same among
//! the Ingresses of one owner (a tenant, or the operator's namespaces
//! together): another tenant's Ingress never changes how a tenant's paths
//! match, and a tenant's host is its own anyway.
//!
//! Bounds: a path made a regex this way is compiled by the same bounded
//! engine as every regex path (`teapot_api::regex`), and counts against
//! its tenant's `maxRegexes` and `maxRegexBytes` after the patterns its
//! Ingresses wrote themselves (which admission counted); past them the
//! path keeps its own `pathType` and the Ingress's status says so.

use teapot_api::HostPattern;
use teapot_api::regex::{self, RegexCost, RoutePattern};
use teapot_model::store::{FastHashMap, NsName, Stored};
use teapot_model::tenancy::Tenancy;

use k8s_openapi::api::networking::v1::Ingress;

use super::ClassFilter;

/// `canary: "true"`: a canary's annotations are not applied, as in
/// ingress-nginx, so its `use-regex` makes no host a regex host.
const CANARY: &str = "nginx.ingress.kubernetes.io/canary";

/// The hosts whose every path is a regex, by owner, and what each tenant
/// may still spend on paths made regexes for it.
#[derive(Default)]
pub(super) struct RegexHosts<'t> {
    /// (tenant cluster, or `None` for the operator's namespaces; the rule
    /// host as written, `None` for a rule without one).
    hosts: FastHashMap<(Option<&'t str>, Option<HostPattern>), ()>,
    /// A tenant's budget left after its own patterns.
    left: FastHashMap<&'t str, RegexCost>,
}

impl<'t> RegexHosts<'t> {
    /// Reads the Ingresses that ask for regex paths (a few, in a large
    /// table: the others cost one annotation lookup).
    pub(super) fn new(
        ordered: &[(&NsName, &Stored<Ingress>)],
        classes: &ClassFilter,
        tenancy: &Tenancy<'t>,
    ) -> RegexHosts<'t> {
        let mut out = RegexHosts::default();
        for (id, stored) in ordered {
            let ingress = &stored.object;
            let annotations = ingress.metadata.annotations.as_ref();
            if !regex::ingress_uses_regex(ingress)
                || annotations
                    .and_then(|a| a.get(CANARY))
                    .is_some_and(|v| v == "true")
                || !classes.serves(ingress)
            {
                continue;
            }
            let tenant = tenancy.get(&id.namespace);
            let owner = tenant.map(|t| t.cluster);
            if let Some(t) = &tenant {
                let limits =
                    teapot_api::tenant::TenantLimits::effective(t.tenant.spec.limits.as_ref());
                let left = out.left.entry(t.cluster).or_insert(RegexCost {
                    count: limits.max_regexes,
                    bytes: limits.max_regex_bytes,
                });
                *left = minus(*left, regex::cost(&regex::ingress_regexes(ingress)));
            }
            let rules = ingress.spec.iter().flat_map(|s| s.rules.iter().flatten());
            for rule in rules {
                // A tenant's host-less rules are its Ingress's own name,
                // which no other Ingress shares: nothing to spread.
                let host = rule
                    .host
                    .as_deref()
                    .and_then(|h| HostPattern::parse(h).ok());
                if host.is_none() && tenant.is_some() {
                    continue;
                }
                out.hosts.insert((owner, host), ());
            }
        }
        out
    }

    /// Whether `owner`'s rules on `host` are regex paths because an
    /// Ingress of the same owner asked for it there.
    pub(super) fn covers(&self, owner: Option<&'t str>, host: Option<&HostPattern>) -> bool {
        !self.hosts.is_empty() && self.hosts.contains_key(&(owner, host.cloned()))
    }

    /// Takes the cost of `path` as a regex from `owner`'s budget; false
    /// (nothing taken) when it does not fit. The operator's are not
    /// counted.
    pub(super) fn spend(&mut self, owner: Option<&str>, path: &str) -> bool {
        let Some(owner) = owner else {
            return true;
        };
        let cost = regex::cost(&[RoutePattern {
            field: String::new(),
            pattern: regex::path_gate_pattern(path),
        }]);
        let Some(left) = self.left.get_mut(owner) else {
            return false;
        };
        if cost.exceeds(*left) {
            return false;
        }
        *left = minus(*left, cost);
        true
    }
}

fn minus(a: RegexCost, b: RegexCost) -> RegexCost {
    RegexCost {
        count: a.count.saturating_sub(b.count),
        bytes: a.bytes.saturating_sub(b.bytes),
    }
}
