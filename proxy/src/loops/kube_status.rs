//! Ingress and Service status in kube mode: the proxy writes what the
//! compile decided back to the API, so `kubectl get ingress` / `kubectl get
//! svc` show it and the agent can copy it to the tenant cluster.
//!
//! - Ingresses: `status.loadBalancer.ingress` (a tenant Ingress's assigned
//!   hostname `INGRESS.CLUSTER.lb.DOMAIN`, an operator Ingress's
//!   `--status-address`es).
//! - L4 Services: the allocated address and ports in
//!   `status.loadBalancer` (which is also the allocation's persistent
//!   state: the next compile, on this replica or another, reads it back as
//!   the Service's address hint), and the L4 conditions (`Allocated`,
//!   `PortsAllocated`, `BackendsReady`, `Configured`) in `status.conditions`.
//!   A refused allocation also becomes a Warning Event on the Service, once
//!   per reason. While L4 addresses are announced, an `Announced` condition
//!   too ([`super::announced`]), and a Warning Event once per reason
//!   when the address cannot be announced.
//!
//! - Gateway API objects: GatewayClass, Gateway and route status
//!   ([`super::gateway_status`]).
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

use k8s_openapi::api::core::v1::{LoadBalancerStatus, ObjectReference, Service};
use k8s_openapi::api::networking::v1::{Ingress, IngressStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition as MetaCondition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use teapot_api::lease::{LeaderLease, LeaseOptions};
use tokio::sync::watch;

use crate::compile::l4::table::ServiceReport;
use crate::compile::snapshot::{Condition, IngressReport, SnapshotHandle};
use crate::loops::announce::announced::{ANNOUNCED, AnnounceStatusConfig, AnnouncerLeases};
use crate::loops::reload::Source;
use teapot_model::store::NsName;
use teapot_source::kube::{KubeConfig, KubeSource};

pub use super::gateway_status::FIELD_MANAGER;

/// Where the status lease lives and how it is timed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusOptions {
    pub lease: LeaseOptions,
    /// While L4 addresses are announced: the `Announced` condition.
    pub announce: Option<AnnounceStatusConfig>,
}

impl StatusOptions {
    pub fn new(lease_namespace: impl Into<String>) -> StatusOptions {
        StatusOptions {
            lease: LeaseOptions::new(lease_namespace, "teapot-proxy-status"),
            announce: None,
        }
    }
}

/// Starts [`run`] when the proxy runs in kube mode with status writes on.
pub fn spawn(
    config: Option<&KubeConfig>,
    options: Option<StatusOptions>,
    source: &Source,
    snapshots: &SnapshotHandle,
    generations: watch::Receiver<u64>,
    shutdown: watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let (Some(config), Source::Kube(source)) = (config, source) else {
        return None;
    };
    let options = options?;
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
    let announce = options
        .announce
        .clone()
        .map(|config| AnnouncerLeases::new(client.clone(), &options.lease.namespace, config));
    let mut writer = StatusWriter::new(client, &options.lease.identity, announce);
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
            changed = generations.changed() => if changed.is_err() { break },
            _ = stopped(&mut shutdown) => break,
        }
        let compiled = *generations.borrow() > 0;
        if leading && compiled {
            writer.sync(&source, &snapshots).await;
        }
    }
    if leading {
        lease.release().await;
    }
}

/// Resolves when `shutdown` turns true (the guard `wait_for` returns is
/// not `Send`, so it must not be held in a spawned task's `select!`).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// The Ingress's status as the compile made it, plus the problems the agent
/// must see on the tenant's side as `ports[].error` codes
/// ([`teapot_api::status`]): hosts the fleet does not route (outside the
/// tenant's domains, held by another tenant, a custom domain without its
/// DNS proof) on port 80, a certificate not ready on port 443: an Ingress
/// with both problems shows both.
fn desired_status(report: &IngressReport) -> Arc<IngressStatus> {
    let hosts = host_error(&report.conditions);
    let tls = certificate_error(&report.conditions);
    let errors: Vec<(i32, String)> = [(80, hosts), (443, tls)]
        .into_iter()
        .filter_map(|(port, error)| Some((port, error?)))
        .collect();
    if errors.is_empty() {
        return report.status.clone();
    }
    Arc::new(with_port_errors(&report.status, &errors))
}

/// `teapot.dev/HostsNotRouted` while some host of the Ingress is refused.
fn host_error(conditions: &[Condition]) -> Option<String> {
    conditions
        .iter()
        .any(|c| c.type_ == "HostsAccepted" && c.status == "False")
        .then(|| teapot_api::status::port_error("HostsNotRouted"))
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

/// `status` with `ports: [{port, protocol: TCP, error}, …]` on each
/// `loadBalancer.ingress[]` entry (next to its hostname or IP).
fn with_port_errors(status: &IngressStatus, errors: &[(i32, String)]) -> IngressStatus {
    use k8s_openapi::api::networking::v1::IngressPortStatus;
    let mut status = status.clone();
    let entries = status
        .load_balancer
        .iter_mut()
        .flat_map(|lb| lb.ingress.iter_mut().flatten());
    for entry in entries {
        entry.ports = Some(
            errors
                .iter()
                .map(|(port, error)| IngressPortStatus {
                    port: *port,
                    protocol: "TCP".into(),
                    error: Some(error.clone()),
                })
                .collect(),
        );
    }
    status
}

/// Writes the statuses that differ from what the API has.
struct StatusWriter {
    client: kube::Client,
    /// What was written last, for which object version: no repeats while
    /// the watch has not delivered the write yet.
    written: HashMap<NsName, (String, Arc<IngressStatus>)>,
    services_written: HashMap<NsName, (String, ServiceStatusPatch)>,
    /// The reason each Service or Gateway was last warned about, by
    /// condition type (a refused allocation, an address not announced), so
    /// an unchanged problem is one Event, not one per compile.
    warned: HashMap<(&'static str, NsName, &'static str), &'static str>,
    events: Recorder,
    gateway_api: super::gateway_status::GatewayStatusWriter,
    /// While L4 addresses are announced.
    announce: Option<AnnouncerLeases>,
}

impl StatusWriter {
    fn new(
        client: kube::Client,
        identity: &str,
        announce: Option<AnnouncerLeases>,
    ) -> StatusWriter {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(identity.into()),
        };
        StatusWriter {
            events: Recorder::new(client.clone(), reporter),
            client,
            written: HashMap::new(),
            services_written: HashMap::new(),
            warned: HashMap::new(),
            gateway_api: Default::default(),
            announce,
        }
    }

    fn forget(&mut self) {
        self.written.clear();
        self.services_written.clear();
        self.warned.clear();
        self.gateway_api.forget();
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
        if let Some(l4) = &snapshot.report.l4 {
            if let Some(announce) = self.announce.as_mut() {
                announce.refresh().await;
            }
            for service in &l4.services {
                self.sync_service(service, &store).await;
            }
        }
        self.services_written
            .retain(|id, _| store.services.contains_key(id));
        let mut updates = super::gateway_status::updates(&snapshot);
        if self.announce.is_some()
            && let Some(l4) = &snapshot.report.l4
        {
            for gateway in &l4.gateways {
                let (Some(addr), Some(announce)) = (gateway.address, &self.announce) else {
                    continue;
                };
                let id = NsName::new(gateway.namespace.clone(), gateway.name.clone());
                let condition = announce.condition(addr);
                add_gateway_condition(&mut updates, &id, &condition);
                let uid = store
                    .gateways
                    .get(&id)
                    .and_then(|g| g.object.metadata.uid.clone());
                let regarding = Regarding::gateway(&id, uid);
                self.warn_when_false(&regarding, &[condition], ANNOUNCED, "AnnounceAddress")
                    .await;
            }
        }
        self.warned.retain(|(kind, id, _), _| match *kind {
            "Gateway" => store.gateways.contains_key(id),
            _ => store.services.contains_key(id),
        });
        self.gateway_api.sync(&self.client, &updates, &store).await;
    }

    async fn sync_service(&mut self, report: &ServiceReport, store: &teapot_model::store::Store) {
        let id = NsName::new(report.namespace.clone(), report.name.clone());
        let Some(stored) = store.services.get(&id) else {
            return;
        };
        let service = &stored.object;
        let mut conditions = report.conditions.clone();
        if let Some(announce) = &self.announce {
            // A dual-stack Service is announced when both its addresses
            // are: the first address that is not says why.
            let each: Vec<Condition> = report
                .addresses
                .iter()
                .map(|a| announce.condition(*a))
                .collect();
            if let Some(c) = each.iter().find(|c| c.status != "True").or(each.first()) {
                conditions.push(c.clone());
            }
        }
        let regarding = Regarding::service(&id, service.metadata.uid.as_deref().map(String::from));
        self.warn_when_false(&regarding, &conditions, "Allocated", "AllocateAddress")
            .await;
        self.warn_when_false(&regarding, &conditions, ANNOUNCED, "AnnounceAddress")
            .await;
        let current = service.status.as_deref();
        let desired = ServiceStatusPatch::new(
            &report.status,
            &conditions,
            current.and_then(|s| s.conditions.as_deref()),
        );
        if desired.is_current(current) {
            return;
        }
        let version = service
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
            .to_string();
        if self
            .services_written
            .get(&id)
            .is_some_and(|(v, s)| *v == version && *s == desired)
        {
            return;
        }
        let api: Api<Service> = Api::namespaced(self.client.clone(), &id.namespace);
        let body = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": id.name, "namespace": id.namespace},
            "status": {"loadBalancer": desired.load_balancer, "conditions": desired.conditions},
        });
        let written = api
            .patch_status(
                &id.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await;
        match written {
            Ok(_) => {
                tracing::info!(service = %id, status = ?desired.load_balancer, "Service status written");
                self.services_written.insert(id, (version, desired));
            }
            Err(e) => {
                tracing::warn!(service = %id, error = %e, "cannot write Service status; retrying later")
            }
        }
    }

    /// A Warning Event when the object's condition `type_` is False: a
    /// refused allocation (pool full, address taken, no pool, listener
    /// limit), an address that cannot be announced. Once per reason.
    async fn warn_when_false(
        &mut self,
        regarding: &Regarding<'_>,
        conditions: &[Condition],
        type_: &'static str,
        action: &str,
    ) {
        let id = regarding.id;
        let key = (regarding.kind, id.clone(), type_);
        let refused = conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "False");
        let Some(refused) = refused else {
            self.warned.remove(&key);
            return;
        };
        if self.warned.get(&key) == Some(&refused.reason) {
            return;
        }
        let reference = ObjectReference {
            api_version: Some(regarding.api_version.into()),
            kind: Some(regarding.kind.into()),
            name: Some(id.name.clone()),
            namespace: Some(id.namespace.clone()),
            uid: regarding.uid.clone(),
            ..ObjectReference::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: refused.reason.into(),
            note: Some(refused.message.chars().take(1000).collect()),
            action: action.into(),
            secondary: None,
        };
        match self.events.publish(&event, &reference).await {
            Ok(()) => {
                self.warned.insert(key, refused.reason);
            }
            Err(e) => {
                tracing::warn!(service = %id, error = %e, "cannot publish Event; retrying later")
            }
        }
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

/// The object a Warning Event is about.
struct Regarding<'a> {
    api_version: &'static str,
    kind: &'static str,
    id: &'a NsName,
    uid: Option<String>,
}

impl<'a> Regarding<'a> {
    fn service(id: &'a NsName, uid: Option<String>) -> Regarding<'a> {
        Regarding {
            api_version: "v1",
            kind: "Service",
            id,
            uid,
        }
    }

    fn gateway(id: &'a NsName, uid: Option<String>) -> Regarding<'a> {
        Regarding {
            api_version: "gateway.networking.k8s.io/v1",
            kind: "Gateway",
            id,
            uid,
        }
    }
}

/// Puts `condition` into the Gateway's status among `updates` (replacing
/// one of its type): the Gateway's `Announced`, next to `Accepted` and
/// `Programmed`.
fn add_gateway_condition(
    updates: &mut [super::gateway_status::StatusUpdate],
    id: &NsName,
    condition: &Condition,
) {
    let update = updates.iter_mut().find(|u| {
        u.kind == teapot_model::store::Kind::Gateway
            && u.namespace == id.namespace
            && u.name == id.name
    });
    let Some(status) = update.and_then(|u| u.status.as_object_mut()) else {
        return;
    };
    let Some(conditions) = status
        .entry("conditions")
        .or_insert_with(|| serde_json::json!([]))
        .as_array_mut()
    else {
        return;
    };
    let value = serde_json::to_value(condition).unwrap_or_default();
    match conditions.iter_mut().find(|c| c["type"] == condition.type_) {
        Some(c) => *c = value,
        None => conditions.push(value),
    }
}

/// Condition types the L4 compile reports, and `Announced`; all of them
/// are teapot's, so a type that disappeared from the report (announcement
/// turned off) must disappear from the object.
const L4_CONDITION_TYPES: [&str; 6] = [
    "Allocated",
    "PortsAllocated",
    "BackendsReady",
    "Configured",
    crate::compile::l4::table::SOURCE_RANGES_ENFORCED,
    ANNOUNCED,
];

/// The part of a Service's status teapot owns.
#[derive(Clone, Debug, PartialEq)]
struct ServiceStatusPatch {
    load_balancer: LoadBalancerStatus,
    conditions: Vec<MetaCondition>,
}

impl ServiceStatusPatch {
    /// The conditions as API conditions; one whose status did not change
    /// keeps its `lastTransitionTime` (it says when it became so).
    fn new(
        load_balancer: &LoadBalancerStatus,
        conditions: &[Condition],
        current: Option<&[MetaCondition]>,
    ) -> ServiceStatusPatch {
        let now = Time(Timestamp::now());
        let conditions = conditions
            .iter()
            .map(|c| {
                let since = current
                    .and_then(|cs| {
                        cs.iter()
                            .find(|m| m.type_ == c.type_ && m.status == c.status)
                    })
                    .map_or_else(|| now.clone(), |m| m.last_transition_time.clone());
                MetaCondition {
                    type_: c.type_.into(),
                    status: c.status.into(),
                    reason: c.reason.into(),
                    message: c.message.clone(),
                    last_transition_time: since,
                    observed_generation: None,
                }
            })
            .collect();
        ServiceStatusPatch {
            load_balancer: load_balancer.clone(),
            conditions,
        }
    }

    /// Whether the object already says all of this.
    fn is_current(&self, current: Option<&k8s_openapi::api::core::v1::ServiceStatus>) -> bool {
        let lb = current.and_then(|s| s.load_balancer.as_ref());
        let lb_same = match lb {
            Some(lb) => *lb == self.load_balancer,
            None => self.load_balancer == LoadBalancerStatus::default(),
        };
        let on_object = current
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        lb_same
            && L4_CONDITION_TYPES.iter().all(|t| {
                let have = on_object.iter().find(|c| c.type_ == *t);
                let want = self.conditions.iter().find(|c| c.type_ == *t);
                match (have, want) {
                    (None, None) => true,
                    (Some(h), Some(w)) => {
                        (&h.status, &h.reason, &h.message) == (&w.status, &w.reason, &w.message)
                    }
                    _ => false,
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceStatus;

    fn patch(conditions: Vec<Condition>, current: Option<&[MetaCondition]>) -> ServiceStatusPatch {
        ServiceStatusPatch::new(&LoadBalancerStatus::default(), &conditions, current)
    }

    #[test]
    fn an_unchanged_condition_keeps_its_transition_time_and_a_dropped_one_is_a_change() {
        let refused = Condition::new("Allocated", false, "PoolExhausted", "full");
        let configured = Condition::new("Configured", false, "InvalidSettings", "bad");
        let first = patch(vec![refused.clone(), configured], None);
        let on_object = ServiceStatus {
            load_balancer: Some(LoadBalancerStatus::default()),
            conditions: Some(first.conditions.clone()),
        };
        assert!(first.is_current(Some(&on_object)));

        // Configured is gone from the report: the object must lose it.
        let second = patch(vec![refused], on_object.conditions.as_deref());
        assert!(!second.is_current(Some(&on_object)));
        assert_eq!(
            second.conditions[0].last_transition_time,
            first.conditions[0].last_transition_time
        );

        // A new status for the same type is a transition.
        let allocated = Condition::new("Allocated", true, "Allocated", "");
        let third = patch(vec![allocated], on_object.conditions.as_deref());
        assert!(!third.is_current(Some(&on_object)));
        assert!(
            third.conditions[0].last_transition_time >= first.conditions[0].last_transition_time
        );
        // Other writers' conditions are not teapot's business.
        let mut foreign = on_object.clone();
        foreign.conditions.as_mut().unwrap().push(MetaCondition {
            type_: "example.com/Other".into(),
            status: "True".into(),
            reason: "Other".into(),
            message: String::new(),
            last_transition_time: Time(Timestamp::now()),
            observed_generation: None,
        });
        assert!(first.is_current(Some(&foreign)));
    }

    use k8s_openapi::api::networking::v1::{IngressLoadBalancerIngress, IngressLoadBalancerStatus};

    fn ingress_report(condition: Option<Condition>) -> IngressReport {
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
    fn refused_hosts_and_a_pending_certificate_both_show() {
        let mut r = ingress_report(Some(Condition::new(
            "CertificateReady",
            false,
            "Pending",
            "x",
        )));
        r.conditions.push(Condition::new(
            "HostsAccepted",
            false,
            "HostsNotRouted",
            "custom domain shop.example is waiting for its DNS proof",
        ));
        assert_eq!(
            ports(&desired_status(&r)),
            serde_json::json!([
                {"port": 80, "protocol": "TCP", "error": "teapot.dev/HostsNotRouted"},
                {"port": 443, "protocol": "TCP", "error": "teapot.dev/CertificatePending"},
            ])
        );
        r.conditions.remove(0);
        assert_eq!(
            ports(&desired_status(&r)),
            serde_json::json!([
                {"port": 80, "protocol": "TCP", "error": "teapot.dev/HostsNotRouted"},
            ])
        );
        let accepted = ingress_report(Some(Condition::new(
            "HostsAccepted",
            true,
            "HostsAccepted",
            "",
        )));
        assert!(Arc::ptr_eq(&desired_status(&accepted), &accepted.status));
    }

    #[test]
    fn certificate_state_goes_into_the_port_error_next_to_the_hostname() {
        let pending = ingress_report(Some(Condition::new(
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
        let failed = ingress_report(Some(Condition::new(
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
            let r = ingress_report(ok);
            assert!(Arc::ptr_eq(&desired_status(&r), &r.status));
        }
    }
}
