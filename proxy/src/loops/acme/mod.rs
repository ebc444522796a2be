//! Certificates from ACME: HTTP-01, one issuer per fleet, state
//! every replica sees.
//!
//! Which hosts: the compile decides ([`AcmeHosts`] in the snapshot): exact
//! TLS hosts of routed Ingresses that opt in (annotation `teapot.dev/acme`,
//! or `--acme-default-tenants` for tenant namespaces) and have no
//! certificate from a Secret. Policy (which hosts a tenant may use, custom
//! domains only once proven) is the compile's; nothing here re-derives it.
//!
//! Layout:
//! - [`store`]: the [`store::AcmeStore`] trait (account, challenge tokens,
//!   per-host key+chain and attempt record, the issuer role) and
//!   [`store::DirStore`], the state directory of manifests mode.
//! - [`issuer`]: the background issuer: account, orders, HTTP-01, CSR,
//!   renewal at two thirds of the lifetime, backoff with jitter,
//!   `Retry-After`, rate limits.
//! - [`client`]: the HTTP client under instant-acme (ring, custom root,
//!   `Retry-After` capture).
//! - [`cert`]: an issued certificate and its validity.
//! - [`dns01`]: DNS-01 challenges of the tenant clusters' wildcard
//!   certificates, kept among the store's challenges for the fleet's DNS
//!   server.
//! - this file: configuration, [`AcmeShared`] (what the router, the SNI
//!   resolver and the compile read), and [`run`], which watches the store,
//!   keeps per-host state, metrics and Ingress conditions current, and runs
//!   the issuer.
//!
//! Every replica runs all of it; the store decides which one issues. The
//! others serve challenge tokens (read fresh from the store per request)
//! and pick up certificates when the store changes, without a restart.

pub mod cert;
pub mod client;
pub mod dns01;
pub mod issuer;
pub mod kube_store;
pub mod store;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use self::cert::{IssuedCert, from_unix_ms, unix_s};
use self::store::{AcmeStore, DirStore, HostRecord, valid_token};
use crate::compile::acme::{AcmeHost, AcmeHosts, CertState, HostStatus};
use crate::compile::snapshot::SnapshotHandle;
use crate::plane::metrics::Metrics;

/// How often per-host states, metrics and conditions are recomputed (a
/// certificate turns "expiring" by the clock alone).
const STATUS_INTERVAL: Duration = Duration::from_secs(1);

/// Why ACME could not start or an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    #[error("ACME configuration: {0}")]
    Config(String),
    #[error("ACME state store: {0}")]
    Store(String),
    #[error("ACME certificate: {0}")]
    Certificate(String),
}

/// `teapot proxy --acme-*`.
#[derive(Clone, Debug)]
pub struct AcmeConfig {
    /// The ACME directory URL (https).
    pub directory: String,
    /// Contact for the account (expiry notices, policy changes).
    pub email: Option<String>,
    /// PEM file with the CA certificate(s) that sign the ACME server's own
    /// HTTPS certificate, for private CAs; `None`: the platform's roots.
    pub root: Option<PathBuf>,
    /// Where account, tokens and certificates live (shared by replicas).
    pub state_dir: PathBuf,
    /// Tenant namespaces are opted in unless an Ingress says `"false"`.
    pub default_tenants: bool,
    /// Backoff after the first failure; doubles per failure up to `retry_max`.
    /// New names (not renewals) each tenant may have issued per week; 0:
    /// no budget. Every tenant shares the account and, for assigned
    /// hostnames, the registered domain's CA limit.
    pub new_names_per_week: u32,
    pub retry_min: Duration,
    pub retry_max: Duration,
    /// How often a replica that is not the issuer tries to become it.
    pub lock_retry: Duration,
    /// Longest wait for the CA to validate or to issue, per order.
    pub order_timeout: Duration,
    /// The zone the fleet's DNS server answers (`--dns-acme-wildcards`):
    /// assigned hostnames are served by one wildcard certificate per
    /// tenant cluster, validated by DNS-01; `None`: a certificate per
    /// host by HTTP-01.
    pub wildcard_zone: Option<String>,
}

impl AcmeConfig {
    pub fn new(directory: impl Into<String>, state_dir: PathBuf) -> AcmeConfig {
        AcmeConfig {
            directory: directory.into(),
            email: None,
            root: None,
            state_dir,
            default_tenants: false,
            new_names_per_week: 10,
            retry_min: Duration::from_secs(60),
            retry_max: Duration::from_secs(6 * 3600),
            lock_retry: Duration::from_secs(10),
            order_timeout: Duration::from_secs(90),
            wildcard_zone: None,
        }
    }
}

/// What the store holds, parsed.
#[derive(Debug, Default)]
pub struct View {
    pub certs: HashMap<String, Arc<IssuedCert>>,
    pub records: HashMap<String, HostRecord>,
    /// Where each certificate is kept (kube mode: a namespace).
    pub namespaces: HashMap<String, String>,
}

impl View {
    /// `host`'s certificate, unless it is kept in another namespace than
    /// the one of the Ingress that asks for it now (kube mode): a host
    /// that moved to another tenant's namespace never gets the old
    /// tenant's key, it gets a new certificate.
    pub fn cert(&self, host: &str, owner: Option<&AcmeHost>) -> Option<&Arc<IssuedCert>> {
        let cert = self.certs.get(host)?;
        match (self.namespaces.get(host), owner) {
            (Some(kept), Some(owner)) if *kept != owner.namespace => None,
            _ => Some(cert),
        }
    }
}

/// Shared by the router (tokens), the SNI resolver (certificates), the
/// compile (opt-in default, conditions) and the background tasks.
#[derive(Debug)]
pub struct AcmeShared {
    pub default_tenants: bool,
    pub store: Arc<dyn AcmeStore>,
    pub view: ArcSwap<View>,
    pub states: ArcSwap<HashMap<String, HostStatus>>,
    /// [`AcmeConfig::wildcard_zone`].
    pub wildcard_zone: Option<String>,
}

impl AcmeShared {
    pub fn new(store: Arc<dyn AcmeStore>, default_tenants: bool) -> AcmeShared {
        AcmeShared {
            default_tenants,
            store,
            view: ArcSwap::default(),
            states: ArcSwap::default(),
            wildcard_zone: None,
        }
    }

    /// The key whose certificate serves `host`: its cluster's wildcard
    /// (with [`AcmeShared::wildcard_zone`]) or its own.
    pub fn certificate_key<'h>(&self, host: &'h str) -> &'h str {
        self.wildcard_zone
            .as_deref()
            .and_then(|zone| crate::compile::acme::wildcard_parent(host, zone))
            .unwrap_or(host)
    }

    /// The ACME certificate for exactly `server_name`, if the current
    /// snapshot still lists that host for ACME. Never another host's.
    pub fn certificate(&self, hosts: &AcmeHosts, server_name: &str) -> Option<Arc<CertifiedKey>> {
        let mut buf = [0u8; 256];
        let name = teapot_api::host::normalize_request_host(server_name, &mut buf)?;
        let owner = hosts.get(name)?;
        // The cluster's wildcard is kept for the Ingress's namespace like
        // a host's own certificate: another tenant's never serves.
        self.view
            .load()
            .cert(self.certificate_key(name), Some(owner))
            .map(|c| c.key.clone())
    }

    /// The body for `GET /.well-known/acme-challenge/<token>`, if that
    /// token belongs to an order of ours.
    pub async fn challenge_response(&self, token: &str) -> Option<String> {
        if !valid_token(token) || token.starts_with(dns01::TOKEN_PREFIX) {
            return None;
        }
        match self.store.challenge(token).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read an ACME challenge token");
                None
            }
        }
    }

    /// Reloads certificates and records from the store; unchanged
    /// certificates keep their parsed form, unreadable ones are skipped
    /// (the previous good one keeps serving).
    pub async fn refresh(&self) -> Result<(), AcmeError> {
        let stored = self.store.load_hosts().await?;
        let old = self.view.load_full();
        let mut view = View::default();
        for host in stored {
            if let Some(ns) = host.namespace {
                view.namespaces.insert(host.host.clone(), ns);
            }
            if let Some(pem) = host.pem {
                let cert = match old.certs.get(&host.host) {
                    Some(c) if c.pem == pem => Some(c.clone()),
                    _ => match IssuedCert::parse(&pem) {
                        Ok(c) => Some(Arc::new(c)),
                        Err(e) => {
                            tracing::warn!(host = %host.host, error = %e, "stored ACME certificate unusable");
                            old.certs.get(&host.host).cloned()
                        }
                    },
                };
                if let Some(c) = cert {
                    view.certs.insert(host.host.clone(), c);
                }
            }
            if let Some(record) = host.record {
                view.records.insert(host.host, record);
            }
        }
        self.view.store(Arc::new(view));
        Ok(())
    }

    /// The state of every host of `hosts` now.
    pub fn compute_states(
        &self,
        hosts: &AcmeHosts,
        now: SystemTime,
    ) -> HashMap<String, HostStatus> {
        let view = self.view.load();
        hosts
            .iter()
            .map(|(h, owner)| {
                let key = self.certificate_key(h);
                let cert = view.cert(key, Some(owner)).map(|c| &**c);
                let status = host_status(cert, view.records.get(key), now);
                (h.to_string(), status)
            })
            .collect()
    }
}

fn host_status(
    cert: Option<&IssuedCert>,
    record: Option<&HostRecord>,
    now: SystemTime,
) -> HostStatus {
    let failing = record.filter(|r| r.failures > 0);
    let why = |r: &HostRecord| {
        format!(
            "{} failed attempt(s), last: {}; next attempt at {}",
            r.failures,
            r.last_error.as_deref().unwrap_or("unknown"),
            r.next_attempt_ms.map_or(0, |ms| unix_s(from_unix_ms(ms)))
        )
    };
    match cert {
        Some(c) if !c.expired(now) && now < c.renew_at() => HostStatus {
            state: CertState::Issued,
            message: format!("valid until {}", unix_s(c.not_after)),
        },
        Some(c) if !c.expired(now) => HostStatus {
            state: CertState::Expiring,
            message: match failing {
                Some(r) => format!(
                    "expires at {}, renewal failing: {}",
                    unix_s(c.not_after),
                    why(r)
                ),
                None => format!("expires at {}, renewal due", unix_s(c.not_after)),
            },
        },
        _ => match failing {
            Some(r) => HostStatus {
                state: CertState::Failed,
                message: why(r),
            },
            None => HostStatus {
                state: CertState::Pending,
                message: if cert.is_some() {
                    "expired, renewal pending".into()
                } else {
                    "waiting for the first certificate".into()
                },
            },
        },
    }
}

/// The DNS-01 challenges in flight, as the fleet's DNS server answers
/// them (crate::loops::dns_zone).
#[async_trait::async_trait]
impl crate::loops::dns_zone::Challenges for AcmeShared {
    async fn dns_challenges(&self) -> Vec<(String, String)> {
        match self.store.challenges().await {
            Ok(all) => all
                .iter()
                .filter_map(|(token, value)| dns01::record(token, value))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the ACME DNS-01 challenges");
                Vec::new()
            }
        }
    }

    fn dns_challenge_changes(&self) -> Option<watch::Receiver<u64>> {
        self.store.changes()
    }
}

#[async_trait::async_trait]
impl crate::plane::AcmeResponder for AcmeShared {
    async fn challenge_response(&self, token: &str) -> Option<String> {
        AcmeShared::challenge_response(self, token).await
    }

    fn certificate(&self, hosts: &AcmeHosts, server_name: &str) -> Option<Arc<CertifiedKey>> {
        AcmeShared::certificate(self, hosts, server_name)
    }
}

/// ACME as `server::run` starts it: checked configuration, shared state
/// loaded once (so stored certificates serve from the first handshake).
pub struct Acme {
    shared: Arc<AcmeShared>,
    issuer: issuer::Issuer,
}

impl std::fmt::Debug for Acme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acme")
            .field("shared", &self.shared)
            .finish()
    }
}

impl Acme {
    /// Manifests mode: the state directory of `config`.
    pub async fn start(config: AcmeConfig) -> Result<Acme, AcmeError> {
        let store = Arc::new(DirStore::open(&config.state_dir)?);
        Acme::with_store(config, store).await
    }

    /// Any store (kube mode: [`kube_store::KubeStore`]);
    /// `config.state_dir` is not used.
    pub async fn with_store(
        config: AcmeConfig,
        store: Arc<dyn AcmeStore>,
    ) -> Result<Acme, AcmeError> {
        let mut shared = AcmeShared::new(store, config.default_tenants);
        shared.wildcard_zone = config.wildcard_zone.clone();
        let shared = Arc::new(shared);
        shared.refresh().await?;
        tracing::info!(
            directory = %config.directory,
            store = ?shared.store,
            certificates = shared.view.load().certs.len(),
            "ACME enabled"
        );
        let issuer = issuer::Issuer::new(config, shared.clone())?;
        Ok(Acme { shared, issuer })
    }

    pub fn shared(&self) -> Arc<AcmeShared> {
        self.shared.clone()
    }

    /// Runs until `shutdown`: the store watcher, the status keeper and the
    /// issuer. `recompile` asks for a new snapshot (conditions changed).
    pub async fn run(
        self,
        snapshots: SnapshotHandle,
        metrics: Metrics,
        recompile: impl Fn() + Send + Sync + 'static,
        shutdown: watch::Receiver<bool>,
    ) {
        let shared = self.shared;
        let watcher = {
            let shared = shared.clone();
            let shutdown = shutdown.clone();
            async move {
                if let Some(changes) = shared.store.changes() {
                    return reload_on_changes(shared, changes, shutdown).await;
                }
                let Some(dir) = shared.store.watch_path() else {
                    return;
                };
                let handle = tokio::runtime::Handle::current();
                teapot_source::dir::watch_dir(
                    dir,
                    None,
                    // Replicas on several hosts share this directory
                    // (docs/acme.md): another host's certificate is
                    // named by no local event, so the poll never backs
                    // off.
                    teapot_source::dir::Poll::every(teapot_source::dir::POLL_INTERVAL),
                    shutdown,
                    move || {
                        if let Err(e) = handle.block_on(shared.refresh()) {
                            tracing::warn!(error = %e, "cannot reload ACME state");
                        }
                    },
                    || false,
                )
                .await;
            }
        };
        let status = status_loop(
            shared.clone(),
            snapshots.clone(),
            metrics.clone(),
            recompile,
            shutdown.clone(),
        );
        let issuer = self.issuer.run(snapshots, metrics, shutdown);
        tokio::join!(watcher, status, issuer);
    }
}

/// Reloads the view whenever the store says it changed (kube mode: a
/// watch event), a burst of changes coalesced into one reload.
async fn reload_on_changes(
    shared: Arc<AcmeShared>,
    mut changes: watch::Receiver<u64>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = issuer::stopped(&mut shutdown) => return,
            more = teapot_source::kube::coalesced(&mut changes, teapot_source::kube::DEBOUNCE) => {
                if !more {
                    return;
                }
            }
        }
        if let Err(e) = shared.refresh().await {
            tracing::warn!(error = %e, "cannot reload ACME state");
        }
    }
}

/// Keeps per-host states, the gauges and (through `recompile`) the
/// Ingress conditions current.
async fn status_loop(
    shared: Arc<AcmeShared>,
    snapshots: SnapshotHandle,
    metrics: Metrics,
    recompile: impl Fn(),
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let snapshot = snapshots.load();
        let states = shared.compute_states(&snapshot.acme, SystemTime::now());
        let mut counts: HashMap<CertState, i64> = HashMap::new();
        for s in states.values() {
            *counts.entry(s.state).or_default() += 1;
        }
        for state in CertState::ALL {
            metrics
                .acme_certificates
                .with_label_values(&[state.as_str()])
                .set(counts.get(&state).copied().unwrap_or(0));
        }
        if **shared.states.load() != states {
            shared.states.store(Arc::new(states));
            recompile();
        }
        tokio::select! {
            _ = issuer::stopped(&mut shutdown) => return,
            _ = tokio::time::sleep(STATUS_INTERVAL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued(not_before: SystemTime, lifetime: Duration) -> IssuedCert {
        let cert = teapot_model::certificate::TlsCertificate::self_signed_default().unwrap();
        IssuedCert {
            key: cert.key,
            not_before,
            not_after: not_before + lifetime,
            pem: String::new(),
        }
    }

    #[test]
    fn states_follow_the_clock_and_the_record() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let day = Duration::from_secs(86400);
        let cert = issued(t0, 90 * day);
        let failing = HostRecord {
            failures: 2,
            last_error: Some("connection refused".into()),
            next_attempt_ms: Some(1),
            updated_ms: 0,
        };
        assert_eq!(host_status(None, None, t0).state, CertState::Pending);
        assert_eq!(
            host_status(None, Some(&failing), t0).state,
            CertState::Failed
        );
        assert_eq!(
            host_status(Some(&cert), None, t0 + day).state,
            CertState::Issued
        );
        // A failed renewal of a serving certificate is "expiring", not
        // "failed": the host still has working HTTPS.
        let s = host_status(Some(&cert), Some(&failing), t0 + 61 * day);
        assert_eq!(s.state, CertState::Expiring);
        assert!(s.message.contains("connection refused"), "{}", s.message);
        assert_eq!(
            host_status(Some(&cert), Some(&failing), t0 + 91 * day).state,
            CertState::Failed
        );
    }

    #[tokio::test]
    async fn certificates_only_for_listed_hosts_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(DirStore::open(dir.path()).unwrap());
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.example".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let pem = format!("{}{}", key.serialize_pem(), cert.pem());
        store
            .put_certificate("a.example", &Default::default(), &pem)
            .await
            .unwrap();
        store
            .put_certificate("b.example", &Default::default(), &pem)
            .await
            .unwrap();
        let shared = AcmeShared::new(store, false);
        shared.refresh().await.unwrap();
        let mut hosts = AcmeHosts::default();
        hosts.insert("a.example", "ns", "ing");
        assert!(shared.certificate(&hosts, "A.Example.").is_some());
        // Stored, but no Ingress asks for it any more: never served.
        assert!(shared.certificate(&hosts, "b.example").is_none());
        assert!(shared.certificate(&hosts, "x.a.example").is_none());
        let states = shared.compute_states(&hosts, SystemTime::now());
        assert_eq!(states["a.example"].state, CertState::Issued);
        assert_eq!(states.len(), 1);
    }
}
