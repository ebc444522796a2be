//! `teapot tenant add CLUSTER`: the LB-cluster objects of a new tenant, as
//! YAML for `kubectl apply -f -`, for installs that do not list tenants in
//! the teapot-lb chart's values (docs/install.md). The objects are the ones
//! the chart renders for a `tenants:` entry (a test compares them).
//!
//! Every value is validated (DNS labels, CIDRs, domain names) before it is
//! written, so the YAML cannot be bent by an argument.

use std::fmt::Write as _;

use anyhow::bail;
use ipnet::IpNet;
use teapot_api::names::TENANT_LABEL;

#[derive(clap::Args, Debug)]
pub(crate) struct TenantArgs {
    #[command(subcommand)]
    command: TenantCommand,
}

#[derive(clap::Subcommand, Debug)]
enum TenantCommand {
    /// Print the Namespace, Tenant, agent ServiceAccount, Roles and RoleBindings of a new tenant (YAML for `kubectl apply -f -`).
    Add(AddArgs),
}

#[derive(clap::Args, Debug)]
struct AddArgs {
    /// The tenant cluster's name: one DNS label, the CLUSTER in INGRESS.CLUSTER.lb.DOMAIN.
    cluster: String,
    /// CIDR of the tenant's nodes (repeatable, at least one): the only addresses its endpoints may use.
    #[arg(long = "node-cidr", value_name = "CIDR", required = true)]
    node_cidrs: Vec<IpNet>,
    /// Extra DNS suffix granted to the tenant (repeatable).
    #[arg(long = "allowed-domain", value_name = "DOMAIN")]
    allowed_domains: Vec<String>,
    /// LB-cluster namespace of the tenant (default tenant-CLUSTER).
    #[arg(long)]
    namespace: Option<String>,
    /// Release name of the teapot-lb chart: also print the RoleBindings that let its proxy and webhook read the namespace (omit with rbac.clusterWide).
    #[arg(long, value_name = "RELEASE")]
    release: Option<String>,
    /// Namespace of that release.
    #[arg(long, default_value = "teapot-system")]
    release_namespace: String,
}

pub(crate) fn run(args: TenantArgs) -> anyhow::Result<()> {
    match args.command {
        TenantCommand::Add(add) => {
            print!("{}", add_yaml(&add)?);
            let ns = add
                .namespace
                .clone()
                .unwrap_or_else(|| format!("tenant-{}", add.cluster));
            eprintln!(
                "next: apply this to the LB cluster (kubectl apply -f -), then\n  \
                 charts/agent-kubeconfig.sh {} {ns} > {}-lb.kubeconfig",
                add.cluster, add.cluster
            );
            if add.release.is_some() {
                eprintln!(
                    "and add --kube-namespace={ns} to proxy and webhook (the chart's operatorNamespaces), unless rbac.clusterWide"
                );
            }
            Ok(())
        }
    }
}

/// The api crate's DNS-label rule, with the argument it checked named.
fn dns_label(what: &str, s: &str) -> anyhow::Result<()> {
    teapot_api::admission::dns_label(s).map_err(|message| anyhow::anyhow!("{what}: {message}"))
}

fn domain(s: &str) -> anyhow::Result<()> {
    if s.len() > 253 {
        bail!("allowed domain {s:?} is longer than 253 characters");
    }
    for label in s.split('.') {
        dns_label("allowed domain label", label)?;
    }
    Ok(())
}

/// The YAML; every interpolated value was validated above it.
fn add_yaml(a: &AddArgs) -> anyhow::Result<String> {
    dns_label("cluster", &a.cluster)?;
    let ns = a
        .namespace
        .clone()
        .unwrap_or_else(|| format!("tenant-{}", a.cluster));
    dns_label("namespace", &ns)?;
    for d in &a.allowed_domains {
        domain(d)?;
    }
    if let Some(release) = &a.release {
        dns_label("release", release)?;
    }
    dns_label("release namespace", &a.release_namespace)?;
    let cluster = &a.cluster;

    let mut y = String::new();
    let _ = write!(
        y,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    \
         {TENANT_LABEL}: {cluster}\n    pod-security.kubernetes.io/enforce: restricted\n"
    );
    let _ = write!(
        y,
        "---\napiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata:\n  name: {cluster}\nspec:\n  cluster: {cluster}\n"
    );
    if a.namespace.is_some() {
        let _ = writeln!(y, "  namespace: {ns}");
    }
    if !a.allowed_domains.is_empty() {
        y.push_str("  allowedDomains:\n");
        for d in &a.allowed_domains {
            let _ = writeln!(y, "    - {d}");
        }
    }
    y.push_str("  nodeCIDRs:\n");
    for c in &a.node_cidrs {
        let _ = writeln!(y, "    - {c}");
    }
    let _ = write!(
        y,
        "---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: teapot-agent\n  namespace: {ns}\n  labels:\n    \
         app.kubernetes.io/component: agent\n    {TENANT_LABEL}: {cluster}\n"
    );
    let _ = write!(
        y,
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: teapot-agent\n  namespace: {ns}\nrules:\n"
    );
    // The agent's sanitized copies, in this namespace only (every write
    // still passes the webhook); the same rules as the chart's.
    for (why, group, resource) in [
        (
            "Ingress copies (server-side apply), status read back, stale copies deleted.",
            "networking.k8s.io",
            "ingresses",
        ),
        (
            "Selector-less Service copies and type LoadBalancer Services (L4).",
            "",
            "services",
        ),
        (
            "Mirrored EndpointSlices (node or pod addresses).",
            "discovery.k8s.io",
            "endpointslices",
        ),
        (
            "Copies of the tenant's kubernetes.io/tls Secrets named in spec.tls.",
            "",
            "secrets",
        ),
    ] {
        let _ = write!(
            y,
            "  # {why}\n  - apiGroups: [\"{group}\"]\n    resources: [{resource}]\n    \
             verbs: [get, list, watch, create, update, patch, delete]\n"
        );
    }
    binding(
        &mut y,
        "teapot-agent",
        &ns,
        "Role",
        "teapot-agent",
        ("teapot-agent", &ns),
    );
    // The Gateway API copies: a Role of their own, as the chart renders
    // it, so the two sets of rules are reviewed apart.
    let _ = write!(
        y,
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: teapot-agent-gateway-api\n  namespace: {ns}\nrules:\n  \
         # Gateway and route copies (server-side apply), their status read back for the tenant's objects, stale copies deleted; ReferenceGrant and BackendTLSPolicy copies the same way.\n  \
         - apiGroups: [\"gateway.networking.k8s.io\"]\n    \
         resources: [gateways, listenersets, httproutes, grpcroutes, tlsroutes, tcproutes, udproutes, referencegrants, backendtlspolicies]\n    \
         verbs: [get, list, watch, create, update, patch, delete]\n  \
         # The ConfigMaps (ca.crt) a BackendTLSPolicy names, copied with it.\n  \
         - apiGroups: [\"\"]\n    \
         resources: [configmaps]\n    \
         verbs: [get, list, watch, create, update, patch, delete]\n  \
         # RouteTrafficPolicy copies, with their routes' mirror names.\n  \
         - apiGroups: [\"teapot.dev\"]\n    \
         resources: [routetrafficpolicies]\n    \
         verbs: [get, list, watch, create, update, patch, delete]\n"
    );
    binding(
        &mut y,
        "teapot-agent-gateway-api",
        &ns,
        "Role",
        "teapot-agent-gateway-api",
        ("teapot-agent", &ns),
    );
    if let Some(release) = &a.release {
        for (component, role) in [("proxy", "read"), ("proxy", "status"), ("webhook", "read")] {
            let name = format!("{release}-{component}-{role}");
            let sa = format!("{release}-{component}");
            binding(
                &mut y,
                &name,
                &ns,
                "ClusterRole",
                &name,
                (&sa, &a.release_namespace),
            );
        }
    }
    Ok(y)
}

fn binding(y: &mut String, name: &str, ns: &str, role_kind: &str, role: &str, sa: (&str, &str)) {
    let (sa_name, sa_ns) = sa;
    let _ = write!(
        y,
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {name}\n  namespace: {ns}\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: {role_kind}\n  name: {role}\nsubjects:\n  \
         - kind: ServiceAccount\n    name: {sa_name}\n    namespace: {sa_ns}\n"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_label_errors_name_the_argument() {
        assert!(dns_label("cluster", "acme-1").is_ok());
        let err = dns_label("cluster", "Bad_Name").unwrap_err().to_string();
        assert!(err.starts_with("cluster: "), "{err}");
        assert!(err.contains("\"Bad_Name\""), "{err}");
        assert!(dns_label("release", "").is_err());
        assert!(dns_label("release", "-a").is_err());
        assert!(dns_label("release", &"a".repeat(64)).is_err());
        assert!(domain("a.com\n  evil: x").is_err());
    }
}
