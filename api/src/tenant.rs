//! The `Tenant` custom resource (`teapot.dev/v1alpha1`, cluster-scoped).
//!
//! A Tenant is one tenant cluster: the CLUSTER label of its hostnames, the
//! LB-cluster namespace its agent writes into, the extra domains an admin
//! granted, and the node addresses its endpoints may point at. The CRD YAML
//! in `api/crd/tenant.yaml` is generated from this type (`cargo run -p
//! teapot-api --bin crdgen`); a test fails when the checked-in copy is stale.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Spec of a Tenant.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "teapot.dev",
    version = "v1alpha1",
    kind = "Tenant",
    plural = "tenants",
    shortname = "tn",
    status = "TenantStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster"}"#,
    printcolumn = r#"{"name":"Namespace","type":"string","jsonPath":".status.namespace"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TenantSpec {
    /// The tenant cluster's name: one DNS label, the CLUSTER in
    /// `INGRESS.CLUSTER.lb.DOMAIN`.
    pub cluster: String,
    /// LB-cluster namespace the tenant's objects live in (default
    /// `tenant-<cluster>`). It must carry the label `teapot.dev/tenant=<cluster>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// DNS suffixes an admin grants this tenant besides its own subtree,
    /// e.g. `shop.example.com` (covers the name and everything below it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_domains: Vec<String>,
    /// CIDRs of the tenant's nodes: the only addresses its endpoints may use.
    #[serde(default, rename = "nodeCIDRs", skip_serializing_if = "Vec::is_empty")]
    pub node_cidrs: Vec<String>,
    /// Value of the `_teapot.<host>` TXT record that proves a custom domain
    /// (default `teapot-tenant=<cluster>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_token: Option<String>,
    /// Layer-4 (TCP/UDP) allowances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l4: Option<TenantL4>,
    /// Bounds on what the tenant may create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<TenantLimits>,
}

/// Layer-4 allowances.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantL4 {
    /// Name of the operator's address pool to allocate from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Most listeners (Service ports) the tenant may hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_listeners: Option<u32>,
}

/// Bounds on a tenant's objects and traffic. Unset fields take the
/// defaults of [`TenantLimits::effective`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ingresses: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hosts_per_ingress: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_paths_per_ingress: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_services: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_endpoints_per_slice: Option<u32>,
    /// Largest object, in bytes of its JSON form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_object_bytes: Option<u32>,
    /// All of the tenant's objects together (Ingresses, Services,
    /// EndpointSlices, Secrets), in bytes of their JSON form: what every
    /// proxy replica keeps in memory for the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_total_bytes: Option<u64>,
    /// Client connections busy with this tenant at once, per proxy replica
    /// (requests in flight; an upgraded WebSocket for its whole life).
    /// Over it: 503. 0: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Requests per second per proxy replica, with a burst of one second's
    /// worth. Over it: 429. 0: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<u32>,
    /// Regular expressions (Gateway API RegularExpression path, header
    /// and query matches, GRPCRoute method patterns) in all of the
    /// tenant's routes together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_regexes: Option<u32>,
    /// Memory of the matching automata of all those regular expressions,
    /// in bytes, as every replica holds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_regex_bytes: Option<u64>,
}

/// The default of `limits.maxTotalBytes`: 4 MiB of JSON per tenant. With
/// EndpointSlices kept compact and reloads that reuse unchanged objects, a
/// tenant at its full default allowance costs each replica at most about
/// 16 MB (docs/capacity.md), so the chart's 1 GiB limit holds 30 such
/// tenants, the compile's peak included; raise the memory limit with the
/// number of tenants.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 4 * 1024 * 1024;

/// The default of `limits.maxRegexes`: well above what routes written for
/// ingress-nginx's regex paths use, and at most 256 automata of
/// [`crate::regex::MAX_AUTOMATON_BYTES`] each.
pub const DEFAULT_MAX_REGEXES: u32 = 256;
/// The default of `limits.maxRegexBytes`: 8 MiB of automata per tenant on
/// every replica (docs/capacity.md).
pub const DEFAULT_MAX_REGEX_BYTES: u64 = 8 * 1024 * 1024;

/// Limits with every default filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EffectiveLimits {
    pub max_ingresses: u32,
    pub max_hosts_per_ingress: u32,
    pub max_paths_per_ingress: u32,
    pub max_services: u32,
    pub max_endpoints_per_slice: u32,
    pub max_object_bytes: u32,
    pub max_total_bytes: u64,
    pub max_connections: u32,
    pub requests_per_second: u32,
    pub max_regexes: u32,
    pub max_regex_bytes: u64,
}

impl TenantLimits {
    /// The limits in force: what is set, else the defaults.
    pub fn effective(limits: Option<&TenantLimits>) -> EffectiveLimits {
        let l = limits.cloned().unwrap_or_default();
        EffectiveLimits {
            max_ingresses: l.max_ingresses.unwrap_or(500),
            max_hosts_per_ingress: l.max_hosts_per_ingress.unwrap_or(100),
            max_paths_per_ingress: l.max_paths_per_ingress.unwrap_or(500),
            max_services: l.max_services.unwrap_or(1000),
            max_endpoints_per_slice: l.max_endpoints_per_slice.unwrap_or(1000),
            max_object_bytes: l.max_object_bytes.unwrap_or(256 * 1024),
            max_total_bytes: l.max_total_bytes.unwrap_or(DEFAULT_MAX_TOTAL_BYTES),
            max_connections: l.max_connections.unwrap_or(10_000),
            requests_per_second: l.requests_per_second.unwrap_or(10_000),
            max_regexes: l.max_regexes.unwrap_or(DEFAULT_MAX_REGEXES),
            max_regex_bytes: l.max_regex_bytes.unwrap_or(DEFAULT_MAX_REGEX_BYTES),
        }
    }
}

/// What the operator side reports about a Tenant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    /// The namespace in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<TenantCondition>,
}

/// A condition on a Tenant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

impl Tenant {
    /// Whether `namespace` is [`Tenant::namespace_name`], without
    /// building that name: looking over every Tenant of a fleet for the
    /// one namespace a change is in costs no allocation per Tenant.
    pub fn owns_namespace(&self, namespace: &str) -> bool {
        match self.spec.namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(own) => own == namespace,
            None => namespace.strip_prefix("tenant-") == Some(self.spec.cluster.as_str()),
        }
    }

    /// The tenant's namespace on the LB cluster.
    pub fn namespace_name(&self) -> String {
        self.spec
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("tenant-{}", self.spec.cluster))
    }

    /// The TXT value that proves a custom domain for this tenant.
    pub fn verification_token(&self) -> String {
        self.spec
            .verification_token
            .clone()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| format!("teapot-tenant={}", self.spec.cluster))
    }

    /// The node CIDRs that parse; the webhook refuses a Tenant whose CIDRs
    /// do not, so this only filters what an admin wrote by hand.
    pub fn node_networks(&self) -> Vec<ipnet::IpNet> {
        self.spec
            .node_cidrs
            .iter()
            .filter_map(|c| c.parse().ok())
            .collect()
    }
}

/// The CRD manifest, as checked in at `api/crd/tenant.yaml`.
pub fn crd_yaml() -> String {
    generated_crd_yaml::<Tenant>("api/src/tenant.rs")
}

/// The CRD of teapot's own kind `K` as YAML, headed by where it is
/// generated from (`source`).
pub(crate) fn generated_crd_yaml<K: kube::CustomResourceExt>(source: &str) -> String {
    let mut out = format!(
        "# Generated from {source} by `cargo run -p teapot-api --bin crdgen`; do not edit.\n"
    );
    out.push_str(&serde_yaml::to_string(&K::crd()).unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let t = Tenant::new(
            "acme",
            TenantSpec {
                cluster: "acme".into(),
                node_cidrs: vec!["10.1.0.0/24".into(), "bogus".into()],
                ..TenantSpec::default()
            },
        );
        assert_eq!(t.namespace_name(), "tenant-acme");
        assert_eq!(t.verification_token(), "teapot-tenant=acme");
        assert_eq!(t.node_networks().len(), 1);
        assert_eq!(TenantLimits::effective(None).max_hosts_per_ingress, 100);
    }

    #[test]
    fn owns_namespace_is_its_namespace_name() {
        let tenant = |cluster: &str, namespace: Option<&str>| {
            Tenant::new(
                cluster,
                TenantSpec {
                    cluster: cluster.into(),
                    namespace: namespace.map(String::from),
                    ..TenantSpec::default()
                },
            )
        };
        let tenants = [
            tenant("acme", None),
            tenant("acme", Some("")),
            tenant("acme", Some("shop")),
            tenant("a", None),
        ];
        for t in &tenants {
            for ns in [
                "tenant-acme",
                "shop",
                "tenant-a",
                "tenant-",
                "acme",
                "tenant-acmex",
                "",
            ] {
                assert_eq!(
                    t.owns_namespace(ns),
                    t.namespace_name() == ns,
                    "{:?} {ns}",
                    t.spec
                );
            }
        }
    }

    #[test]
    fn checked_in_crd_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/crd/tenant.yaml");
        let checked_in = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            checked_in == crd_yaml(),
            "api/crd/tenant.yaml is stale: run `cargo run -p teapot-api --bin crdgen`"
        );
    }

    #[test]
    fn reads_yaml_as_written_by_admins() {
        let t: Tenant = serde_yaml::from_str(
            "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: acme}\nspec:\n  cluster: acme\n  nodeCIDRs: [10.0.0.0/8]\n  allowedDomains: [shop.example.com]\n  limits: {maxIngresses: 3}\n",
        )
        .unwrap();
        assert_eq!(t.spec.node_cidrs, ["10.0.0.0/8"]);
        assert_eq!(t.spec.limits.unwrap().max_ingresses, Some(3));
    }
}
