//! The `--kube` flags `teapot proxy` and `teapot webhook` share: read the
//! LB cluster's objects from the Kubernetes API instead of `--manifests`.

use std::path::{Path, PathBuf};

use teapot_proxy::loops::kube_status::StatusOptions;
use teapot_source::kube::KubeConfig;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct KubeArgs {
    /// Watch the Kubernetes API (the LB cluster) instead of reading --manifests.
    #[arg(long)]
    kube: bool,
    /// Kubeconfig file for --kube (default: KUBECONFIG, ~/.kube/config, else the in-cluster service account).
    #[arg(long, value_name = "FILE", requires = "kube")]
    kubeconfig: Option<PathBuf>,
    /// With --kube: watch Ingresses, Services, EndpointSlices and Secrets only in this namespace (repeatable; default: all namespaces).
    #[arg(long = "kube-namespace", value_name = "NS", requires = "kube")]
    namespaces: Vec<String>,
}

impl KubeArgs {
    /// Exactly one of `--manifests` and `--kube`; with `--kube`, a client.
    pub(crate) async fn connect(
        &self,
        manifests: Option<&Path>,
    ) -> anyhow::Result<Option<KubeConfig>> {
        match (self.kube, manifests) {
            (true, Some(_)) => {
                anyhow::bail!("give either --manifests (or TEAPOT_MANIFESTS) or --kube, not both")
            }
            (false, None) => anyhow::bail!("give --manifests DIR or --kube"),
            (false, Some(_)) => Ok(None),
            (true, None) => Ok(Some(
                KubeConfig::connect(self.kubeconfig.as_deref(), self.namespaces.clone()).await?,
            )),
        }
    }
}

/// `teapot proxy` only: Ingress status writes in kube mode.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct StatusArgs {
    /// With --kube: do not write Ingress and Service status (then list/watch RBAC suffices; L4 allocations are then not persisted).
    #[arg(long, alias = "no-status", requires = "kube")]
    no_ingress_status: bool,
    /// With --kube: the proxy's namespace: the Leases that pick the replica writing Ingress and Service status and the ACME issuer, and the ACME account and challenge Secrets.
    #[arg(long, env = "POD_NAMESPACE", default_value = teapot_source::kube::DEFAULT_LEASE_NAMESPACE)]
    lease_namespace: String,
}

impl StatusArgs {
    pub(crate) fn options(&self) -> Option<StatusOptions> {
        (!self.no_ingress_status).then(|| StatusOptions::new(self.lease_namespace.clone()))
    }

    pub(crate) fn lease_namespace(&self) -> &str {
        &self.lease_namespace
    }
}
