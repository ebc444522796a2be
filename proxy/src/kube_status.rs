//! Ingress status in kube mode: the proxy writes what the compile decided
//! (`status.loadBalancer.ingress`: a tenant Ingress's assigned hostname
//! `INGRESS.CLUSTER.lb.DOMAIN`, an operator Ingress's `--status-address`es)
//! back to the API, so `kubectl get ingress` shows it and the agent can
//! copy it to the tenant cluster.
//!
//! - Server-side apply of `/status` under field manager `teapot-proxy`,
//!   so other writers' fields are left alone.
//! - Only when it changed: the desired status is compared with the status
//!   of the object as the watch last delivered it, and a write is not
//!   repeated for the same object version.
//! - Only from one replica: the holder of the `teapot-proxy-status` Lease
//!   ([`teapot_api::lease`]). The others stand by and take over when the
//!   lease runs out.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::networking::v1::{Ingress, IngressStatus};
use kube::api::{Api, Patch, PatchParams};
use teapot_api::lease::{LeaderLease, LeaseOptions};
use tokio::sync::watch;

use crate::kube_source::{KubeConfig, KubeSource};
use crate::reload::Source;
use crate::snapshot::{Condition, IngressReport, SnapshotHandle};
use crate::store::NsName;

/// Field manager of every status write.
pub const FIELD_MANAGER: &str = "teapot-proxy";

/// Where the status lease lives and how it is timed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusOptions {
    pub lease: LeaseOptions,
}

impl StatusOptions {
    pub fn new(lease_namespace: impl Into<String>) -> StatusOptions {
        StatusOptions {
            lease: LeaseOptions::new(lease_namespace, "teapot-proxy-status"),
        }
    }
}

/// Starts [`run`] when the proxy runs in kube mode with status writes on.
pub fn spawn(
    config: Option<&KubeConfig>,
    source: &Source,
    snapshots: &SnapshotHandle,
    generations: watch::Receiver<u64>,
    shutdown: watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let (Some(config), Source::Kube(source)) = (config, source) else {
        return None;
    };
    let options = config.status.clone()?;
    Some(tokio::spawn(run(
        config.client.clone(),
        options,
        source.clone(),
        snapshots.clone(),
        generations,
        shutdown,
    )))
}

/// Holds (or waits for) the lease and writes statuses while it holds it,
/// until `shutdown` turns true.
pub async fn run(
    client: kube::Client,
    options: StatusOptions,
    source: KubeSource,
    snapshots: SnapshotHandle,
    mut generations: watch::Receiver<u64>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut lease = LeaderLease::new(client.clone(), options.lease.clone());
    let mut writer = StatusWriter::new(client);
    let mut tick = tokio::time::interval(options.lease.renew_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leading = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let now = lease.try_lead().await;
                if now != leading {
                    tracing::info!(identity = %options.lease.identity, leading = now, "Ingress status lease");
                    writer.forget();
                }
                leading = now;
            }
            changed = generations.changed() => if changed.is_err() { return },
            _ = stopped(&mut shutdown) => return,
        }
        let compiled = *generations.borrow() > 0;
        if leading && compiled {
            writer.sync(&source, &snapshots).await;
        }
    }
}

/// Resolves when `shutdown` turns true (the guard `wait_for` returns is
/// not `Send`, so it must not be held in a spawned task's `select!`).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// The status to write: the compiled one, plus the certificate's state
/// where ACME has not delivered yet (Ingress status has no conditions).
fn desired_status(report: &IngressReport) -> Arc<IngressStatus> {
    match certificate_error(&report.conditions) {
        None => report.status.clone(),
        Some(error) => Arc::new(with_port_error(&report.status, 443, error)),
    }
}

/// `teapot.dev/CertificatePending` or `teapot.dev/CertificateFailed` while
/// the Ingress's `CertificateReady` condition is False; nothing when it is
/// True (issued, or expiring but serving) or the Ingress has no ACME host.
fn certificate_error(conditions: &[Condition]) -> Option<String> {
    let ready = conditions.iter().find(|c| c.type_ == "CertificateReady")?;
    if ready.status == "True" {
        return None;
    }
    Some(teapot_api::status::port_error(match ready.reason {
        "Failed" => "CertificateFailed",
        _ => "CertificatePending",
    }))
}

/// `status` with `ports: [{port, protocol: TCP, error}]` on each
/// `loadBalancer.ingress[]` entry (next to its hostname or IP).
fn with_port_error(status: &IngressStatus, port: i32, error: String) -> IngressStatus {
    use k8s_openapi::api::networking::v1::IngressPortStatus;
    let mut status = status.clone();
    let entries = status
        .load_balancer
        .iter_mut()
        .flat_map(|lb| lb.ingress.iter_mut().flatten());
    for entry in entries {
        entry.ports = Some(vec![IngressPortStatus {
            port,
            protocol: "TCP".into(),
            error: Some(error.clone()),
        }]);
    }
    status
}

/// Writes the statuses that differ from what the API has.
struct StatusWriter {
    client: kube::Client,
    /// What was written last, for which object version: no repeats while
    /// the watch has not delivered the write yet.
    written: HashMap<NsName, (String, Arc<IngressStatus>)>,
}

impl StatusWriter {
    fn new(client: kube::Client) -> StatusWriter {
        StatusWriter {
            client,
            written: HashMap::new(),
        }
    }

    fn forget(&mut self) {
        self.written.clear();
    }

    async fn sync(&mut self, source: &KubeSource, snapshots: &SnapshotHandle) {
        let snapshot = snapshots.load_full();
        let store = source.snapshot().store;
        for report in snapshot.report.ingresses.iter().filter(|r| r.served) {
            let id = NsName::new(report.namespace.clone(), report.name.clone());
            let Some(stored) = store.ingresses.get(&id) else {
                continue;
            };
            let current = stored.object.status.as_ref();
            let desired = &desired_status(report);
            if current.and_then(|s| s.load_balancer.as_ref()) == desired.load_balancer.as_ref() {
                continue;
            }
            let version = stored
                .object
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default();
            if self
                .written
                .get(&id)
                .is_some_and(|(v, s)| *v == version && s == desired)
            {
                continue;
            }
            match self.write(&id, desired).await {
                Ok(()) => {
                    tracing::info!(ingress = %id, status = ?desired.load_balancer, "Ingress status written");
                    self.written.insert(id, (version, desired.clone()));
                }
                Err(e) => {
                    tracing::warn!(ingress = %id, error = %e, "cannot write Ingress status; retrying later")
                }
            }
        }
        self.written
            .retain(|id, _| store.ingresses.contains_key(id));
    }

    async fn write(&self, id: &NsName, status: &IngressStatus) -> Result<(), kube::Error> {
        let api: Api<Ingress> = Api::namespaced(self.client.clone(), &id.namespace);
        let body = serde_json::json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": id.name, "namespace": id.namespace},
            "status": status,
        });
        api.patch_status(
            &id.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::networking::v1::{IngressLoadBalancerIngress, IngressLoadBalancerStatus};

    fn report(condition: Option<Condition>) -> IngressReport {
        IngressReport {
            namespace: "tenant-acme".into(),
            name: "web.shop".into(),
            served: true,
            status: Arc::new(IngressStatus {
                load_balancer: Some(IngressLoadBalancerStatus {
                    ingress: Some(vec![IngressLoadBalancerIngress {
                        hostname: Some("web-shop.acme.lb.example.net".into()),
                        ..Default::default()
                    }]),
                }),
            }),
            conditions: condition.into_iter().collect(),
        }
    }

    fn ports(status: &IngressStatus) -> serde_json::Value {
        serde_json::to_value(status).unwrap()["loadBalancer"]["ingress"][0]["ports"].clone()
    }

    #[test]
    fn certificate_state_goes_into_the_port_error_next_to_the_hostname() {
        let pending = report(Some(Condition::new(
            "CertificateReady",
            false,
            "Pending",
            "x",
        )));
        let status = desired_status(&pending);
        assert_eq!(
            ports(&status),
            serde_json::json!([{"port": 443, "protocol": "TCP", "error": "teapot.dev/CertificatePending"}])
        );
        assert_eq!(
            status
                .load_balancer
                .as_ref()
                .unwrap()
                .ingress
                .as_ref()
                .unwrap()[0]
                .hostname
                .as_deref(),
            Some("web-shop.acme.lb.example.net")
        );
        let failed = report(Some(Condition::new(
            "CertificateReady",
            false,
            "Failed",
            "x",
        )));
        assert_eq!(
            ports(&desired_status(&failed))[0]["error"],
            "teapot.dev/CertificateFailed"
        );
        // Ready (or expiring but serving), or no ACME at all: no error.
        for ok in [
            Some(Condition::new("CertificateReady", true, "Issued", "")),
            Some(Condition::new("CertificateReady", true, "Expiring", "")),
            None,
        ] {
            let r = report(ok);
            assert!(Arc::ptr_eq(&desired_status(&r), &r.status));
        }
    }
}
