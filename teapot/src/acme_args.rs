//! `teapot proxy --acme-*`: certificates from an ACME CA (docs/acme.md).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use teapot_proxy::loops::acme::AcmeConfig;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct AcmeArgs {
    /// ACME directory URL (https), e.g. https://acme-v02.api.letsencrypt.org/directory. Enables ACME.
    #[arg(long, env = "TEAPOT_ACME_DIRECTORY")]
    acme_directory: Option<String>,
    /// Contact email for the ACME account.
    #[arg(long, env = "TEAPOT_ACME_EMAIL")]
    acme_email: Option<String>,
    /// PEM file of the CA that signs the ACME server's HTTPS certificate (private CAs); default: the system's roots.
    #[arg(long)]
    acme_root: Option<PathBuf>,
    /// Manifests mode: state directory shared by every replica (account key, challenge tokens, certificates, issuer lock). Kube mode keeps all of it in Secrets and a Lease instead.
    #[arg(long, env = "TEAPOT_ACME_STATE_DIR")]
    acme_state_dir: Option<PathBuf>,
    /// Obtain certificates for Ingresses in tenant namespaces unless they set teapot.dev/acme: "false".
    #[arg(long)]
    acme_default_tenants: bool,
    /// New certificates (not renewals) each tenant namespace may get per week; 0: no budget. Every tenant shares one ACME account and, for assigned hostnames, the registered domain's CA limit (Let's Encrypt: 50 per week).
    #[arg(long, default_value_t = 10)]
    acme_new_names_per_week: u32,
    /// Seconds to wait after a first failure (doubles per failure, with jitter).
    #[arg(long, default_value_t = 60.0)]
    acme_retry_min: f64,
    /// Longest wait between attempts for one host, seconds (also the wait after a rate limit without Retry-After).
    #[arg(long, default_value_t = 21600.0)]
    acme_retry_max: f64,
    /// Seconds between attempts of a replica to become the issuer.
    #[arg(long, default_value_t = 10.0)]
    acme_lock_retry: f64,
    /// Seconds an order may take to validate or to issue.
    #[arg(long, default_value_t = 90.0)]
    acme_order_timeout: f64,
}

fn seconds(flag: &str, value: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow::anyhow!("--{flag} {value}: a positive number of seconds is needed"))
}

impl AcmeArgs {
    /// `None` when `--acme-directory` is not given. `kube`: state in the
    /// Kubernetes API, so no state directory.
    pub(crate) fn config(&self, kube: bool) -> anyhow::Result<Option<AcmeConfig>> {
        let Some(directory) = &self.acme_directory else {
            if self.acme_state_dir.is_some() || self.acme_default_tenants {
                bail!("--acme-state-dir and --acme-default-tenants need --acme-directory");
            }
            return Ok(None);
        };
        let state_dir = match (&self.acme_state_dir, kube) {
            (Some(_), true) => bail!(
                "--acme-state-dir is for --manifests mode; with --kube the ACME state is kept in Secrets and a Lease (docs/acme.md)"
            ),
            (Some(dir), false) => dir.clone(),
            (None, true) => PathBuf::new(),
            (None, false) => bail!(
                "--acme-directory needs --acme-state-dir (where the account and certificates are kept), or --kube"
            ),
        };
        let mut config = AcmeConfig::new(directory.clone(), state_dir);
        config.email = self.acme_email.clone();
        config.root = self.acme_root.clone();
        config.default_tenants = self.acme_default_tenants;
        config.new_names_per_week = self.acme_new_names_per_week;
        config.retry_min = seconds("acme-retry-min", self.acme_retry_min)?;
        config.retry_max = seconds("acme-retry-max", self.acme_retry_max)?;
        config.lock_retry = seconds("acme-lock-retry", self.acme_lock_retry)?;
        config.order_timeout = seconds("acme-order-timeout", self.acme_order_timeout)?;
        if config.retry_max < config.retry_min {
            bail!("--acme-retry-max must not be below --acme-retry-min");
        }
        Ok(Some(config))
    }
}
