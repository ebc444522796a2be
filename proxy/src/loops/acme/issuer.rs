//! The issuer: runs in every replica, works only while it holds the
//! store's issuer role. Each second it walks the snapshot's ACME hosts and
//! orders a certificate for each host that has none or is past two thirds
//! of its lifetime, unless that host's backoff says to wait. One order at a
//! time, one host per order: a failing host never holds another's
//! certificate back, and the CA sees a gentle, steady client.
//!
//! One fleet serves many tenants through one account, so one tenant must
//! not hold back another's certificates (docs/acme.md, "Tenants share one
//! account"):
//! - due hosts are served renewals first, then new names, and within each
//!   class round-robin across tenants (a tenant is the namespace of the
//!   Ingress that asked), starting each pass one tenant further on;
//! - a rate limit or a `Retry-After` pauses the tenant whose order got it,
//!   never the fleet; only a CA that does not answer at all (which every
//!   order would meet) pauses every order;
//! - each tenant gets a budget of new names per week
//!   (`--acme-new-names-per-week`), so no tenant spends the registered
//!   domain's shared CA limit on its own.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::{
    Account, AccountBuilder, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier,
    NewAccount, NewOrder, Order, OrderStatus, RetryPolicy,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::cert::{IssuedCert, from_unix_ms, unix_ms};
use super::client::{AcmeHttp, RetryAfterSlot};
use super::store::{HostRecord, valid_token};
use super::{AcmeConfig, AcmeError, AcmeShared};
use crate::compile::snapshot::SnapshotHandle;
use crate::plane::metrics::Metrics;

/// How often the issuer looks for due hosts.
const SCAN: Duration = Duration::from_secs(1);

/// `account.json`: the credentials and the directory they belong to, so a
/// changed `--acme-directory` makes a new account instead of failing.
#[derive(Serialize, Deserialize)]
struct AccountFile {
    directory: String,
    credentials: AccountCredentials,
}

/// Why an attempt failed, and what that means for the next one.
#[derive(Debug)]
pub(super) struct Failure {
    message: String,
    rate_limited: bool,
    account_gone: bool,
    /// The CA did not answer at all (connection, TLS, timeout): every host
    /// would fail the same way.
    unreachable: bool,
    /// The CA's `Retry-After` (429, 503).
    retry_after: Option<SystemTime>,
}

impl Failure {
    fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            rate_limited: false,
            account_gone: false,
            unreachable: false,
            retry_after: None,
        }
    }
}

/// What ordering one certificate takes: the ACME protocol against the CA
/// in production ([`AcmeCa`]); a stand-in in tests.
#[async_trait::async_trait]
pub(super) trait CertificateAuthority: Send + Sync {
    /// Orders, validates and downloads a certificate for `host`; returns
    /// the key and chain as PEM.
    async fn order(
        &mut self,
        host: &str,
        shared: &AcmeShared,
    ) -> Result<(String, IssuedCert), Failure>;
}

/// What the issuer remembers of one tenant between passes.
#[derive(Debug, Default)]
struct TenantState {
    /// No order for this tenant before then (a rate limit, a Retry-After).
    paused_until: Option<SystemTime>,
    /// When its new names (not renewals) were issued, within the last week.
    new_names: std::collections::VecDeque<SystemTime>,
}

/// The budget's window.
const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

/// One host due for an order in this pass.
struct Due<'s> {
    host: &'s str,
    owner: &'s super::AcmeHost,
    record: HostRecord,
    renewal: bool,
}

impl From<instant_acme::Error> for Failure {
    fn from(e: instant_acme::Error) -> Failure {
        let kind = match &e {
            instant_acme::Error::Api(p) => p.r#type.as_deref().unwrap_or(""),
            _ => "",
        };
        Failure {
            unreachable: matches!(
                e,
                instant_acme::Error::Other(_)
                    | instant_acme::Error::Http(_)
                    | instant_acme::Error::Hyper(_)
            ),
            rate_limited: kind.ends_with(":rateLimited"),
            account_gone: kind.ends_with(":accountDoesNotExist"),
            message: e.to_string(),
            retry_after: None,
        }
    }
}

impl From<AcmeError> for Failure {
    fn from(e: AcmeError) -> Failure {
        Failure::new(e.to_string())
    }
}

impl From<rcgen::Error> for Failure {
    fn from(e: rcgen::Error) -> Failure {
        Failure::new(format!("key or CSR generation: {e}"))
    }
}

pub struct Issuer {
    config: AcmeConfig,
    shared: Arc<AcmeShared>,
    ca: Box<dyn CertificateAuthority>,
    /// While the CA is unreachable, no host is tried: every order would
    /// meet the same silence, and a thousand due hosts must not become a
    /// thousand connection attempts.
    paused_until: Option<SystemTime>,
    /// Consecutive attempts that paused everything (drives that backoff).
    pauses: u32,
    /// By namespace.
    tenants: std::collections::HashMap<String, TenantState>,
    /// Which tenant goes first in the next pass.
    rotation: usize,
}

/// The ACME protocol against the configured CA.
pub(super) struct AcmeCa {
    config: AcmeConfig,
    retry_after: RetryAfterSlot,
    account: Option<Account>,
}

/// Resolves once `shutdown` is true (or its sender is gone).
pub(super) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

/// Exponential backoff with jitter: the n-th consecutive failure waits a
/// random time between half and all of `min * 2^(n-1)`, capped at `max`,
/// so replicas of many fleets do not retry in lockstep.
pub fn backoff(failures: u32, min: Duration, max: Duration) -> Duration {
    let exp = min.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    let full = exp.min(max);
    full.mul_f64(0.5 + rand::random::<f64>() * 0.5)
}

impl Issuer {
    /// Checks what can be checked before serving (the root file, the
    /// directory URL) so a bad flag stops the start with a clear message.
    pub fn new(config: AcmeConfig, shared: Arc<AcmeShared>) -> Result<Issuer, AcmeError> {
        if !config.directory.starts_with("https://") {
            return Err(AcmeError::Config(format!(
                "--acme-directory {:?} must be an https:// URL (RFC 8555 §6.1)",
                config.directory
            )));
        }
        let retry_after = RetryAfterSlot::default();
        AcmeHttp::new(config.root.as_deref(), retry_after.clone())?;
        let ca = AcmeCa {
            config: config.clone(),
            retry_after,
            account: None,
        };
        Ok(Issuer::with_ca(config, shared, Box::new(ca)))
    }

    pub(super) fn with_ca(
        config: AcmeConfig,
        shared: Arc<AcmeShared>,
        ca: Box<dyn CertificateAuthority>,
    ) -> Issuer {
        Issuer {
            config,
            shared,
            ca,
            paused_until: None,
            pauses: 0,
            tenants: std::collections::HashMap::new(),
            rotation: 0,
        }
    }

    /// Takes the issuer role whenever it is free, works while holding it.
    pub async fn run(
        mut self,
        snapshots: SnapshotHandle,
        metrics: Metrics,
        mut shutdown: watch::Receiver<bool>,
    ) {
        loop {
            let lead = loop {
                match self.shared.store.try_lead().await {
                    Ok(Some(lead)) => break lead,
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "cannot take the ACME issuer role"),
                }
                tokio::select! {
                    _ = stopped(&mut shutdown) => return,
                    _ = tokio::time::sleep(self.config.lock_retry) => {}
                }
            };
            metrics.acme_issuer.set(1);
            tracing::info!("this replica is the ACME issuer");
            if let Err(e) = self.shared.store.clear_challenges().await {
                tracing::warn!(error = %e, "cannot clear stale ACME challenges");
            }
            let stopping = loop {
                if !lead.held() {
                    break false;
                }
                let stop = tokio::select! {
                    _ = stopped(&mut shutdown) => true,
                    _ = self.step(&snapshots, &metrics) => false,
                } || tokio::select! {
                    _ = stopped(&mut shutdown) => true,
                    _ = tokio::time::sleep(SCAN) => false,
                };
                if stop {
                    break true;
                }
            };
            metrics.acme_issuer.set(0);
            if stopping {
                lead.release().await;
                return;
            }
            tracing::warn!("lost the ACME issuer role");
        }
    }

    /// One pass over the hosts; attempts every host that is due, in the
    /// order [`Self::queue`] gives.
    async fn step(&mut self, snapshots: &SnapshotHandle, metrics: &Metrics) {
        if self
            .paused_until
            .is_some_and(|until| SystemTime::now() < until)
        {
            return;
        }
        let snapshot = snapshots.load_full();
        // With wildcards, one key per tenant cluster in place of its
        // assigned hostnames: one order covers them all, and the budget
        // of new names counts that order, not each hostname.
        let keys = crate::compile::acme::certificate_keys(
            &snapshot.acme,
            self.config.wildcard_zone.as_deref(),
        );
        let queue = self.queue(&keys, SystemTime::now());
        self.rotation = self.rotation.wrapping_add(1);
        for due in queue {
            let tenant = self.tenants.entry(due.owner.namespace.clone()).or_default();
            let now = SystemTime::now();
            let paused = tenant.paused_until.is_some_and(|until| now < until);
            metrics
                .acme_tenant_held
                .with_label_values(&[&due.owner.namespace, "paused"])
                .set(i64::from(paused));
            if paused {
                continue;
            }
            let namespace = due.owner.namespace.as_str();
            let within = due.renewal || self.within_budget(&due, now).await;
            metrics
                .acme_tenant_held
                .with_label_values(&[namespace, "budget"])
                .set(i64::from(!within));
            if !within {
                continue;
            }
            let result = self.attempt(due.host, due.owner, due.record, metrics).await;
            let label = match result {
                Attempt::Issued => "issued",
                Attempt::PauseTenant(_) => "rate_limited",
                Attempt::Failed | Attempt::PauseAll(_) => "failed",
            };
            metrics
                .acme_tenant_orders
                .with_label_values(&[namespace, label])
                .inc();
            if let Err(e) = self.shared.refresh().await {
                tracing::warn!(error = %e, "cannot reload ACME state");
            }
            let tenant = self.tenants.entry(due.owner.namespace.clone()).or_default();
            match result {
                Attempt::Issued => {
                    if !due.renewal {
                        tenant.new_names.push_back(SystemTime::now());
                    }
                    self.pauses = 0;
                }
                Attempt::Failed => self.pauses = 0,
                Attempt::PauseTenant(delay) => {
                    tenant.paused_until = Some(SystemTime::now() + delay);
                    metrics
                        .acme_tenant_held
                        .with_label_values(&[namespace, "paused"])
                        .set(1);
                    tracing::warn!(
                        namespace = %due.owner.namespace,
                        pause_s = delay.as_secs_f64(),
                        "the CA rate-limits this tenant's orders: pausing them, the other tenants' go on"
                    );
                }
                Attempt::PauseAll(delay) => {
                    self.pauses = self.pauses.saturating_add(1);
                    self.paused_until = Some(SystemTime::now() + delay);
                    tracing::warn!(
                        pause_s = delay.as_secs_f64(),
                        "the CA does not answer: pausing every order"
                    );
                    return;
                }
            }
        }
        self.paused_until = None;
        self.forget_stale(&keys).await;
    }

    /// The hosts due now: renewals first, then new names; within each,
    /// round-robin across tenants, the first tenant moving on by one each
    /// pass, so a tenant with many hosts (or many failing ones) waits its
    /// turn like the others.
    fn queue<'s>(&self, hosts: &'s super::AcmeHosts, now: SystemTime) -> Vec<Due<'s>> {
        let view = self.shared.view.load();
        let mut by_tenant: std::collections::BTreeMap<
            (bool, &str),
            std::collections::VecDeque<Due<'s>>,
        > = std::collections::BTreeMap::new();
        for (host, owner) in hosts.iter() {
            let cert = view.cert(host, Some(owner));
            if cert.is_some_and(|c| now < c.renew_at()) {
                continue;
            }
            let record = view.records.get(host).cloned().unwrap_or_default();
            if record
                .next_attempt_ms
                .is_some_and(|at| now < from_unix_ms(at))
            {
                continue;
            }
            let renewal = cert.is_some();
            by_tenant
                .entry((!renewal, owner.namespace.as_str()))
                .or_default()
                .push_back(Due {
                    host,
                    owner,
                    record,
                    renewal,
                });
        }
        let mut out = Vec::new();
        for renewals in [true, false] {
            let mut lanes: Vec<std::collections::VecDeque<Due<'s>>> = Vec::new();
            let keys: Vec<(bool, &str)> = by_tenant
                .keys()
                .filter(|(new, _)| *new != renewals)
                .copied()
                .collect();
            for key in keys {
                lanes.extend(by_tenant.remove(&key));
            }
            if lanes.is_empty() {
                continue;
            }
            let start = self.rotation % lanes.len();
            lanes.rotate_left(start);
            while lanes.iter().any(|l| !l.is_empty()) {
                for lane in &mut lanes {
                    out.extend(lane.pop_front());
                }
            }
        }
        out
    }

    /// Whether the host's tenant may have one more new name this week; if
    /// not, the host's record says so and when the budget frees up.
    async fn within_budget(&mut self, due: &Due<'_>, now: SystemTime) -> bool {
        let budget = self.config.new_names_per_week;
        let tenant = self.tenants.entry(due.owner.namespace.clone()).or_default();
        while tenant
            .new_names
            .front()
            .is_some_and(|t| now.duration_since(*t).unwrap_or_default() >= WEEK)
        {
            tenant.new_names.pop_front();
        }
        if budget == 0 || (tenant.new_names.len() as u32) < budget {
            return true;
        }
        let frees = tenant.new_names.front().map_or(now, |t| *t + WEEK);
        let record = HostRecord {
            last_error: Some(format!(
                "namespace {} has had its {budget} new certificates this week (--acme-new-names-per-week); this one waits until the budget frees up",
                due.owner.namespace
            )),
            next_attempt_ms: Some(unix_ms(frees)),
            updated_ms: unix_ms(now),
            ..due.record.clone()
        };
        if let Err(e) = self
            .shared
            .store
            .put_record(due.host, due.owner, &record)
            .await
        {
            tracing::error!(host = due.host, error = %e, "cannot store the ACME attempt record");
        }
        false
    }

    /// Drops stored hosts no Ingress asks for any more once nothing useful
    /// is left (no certificate, or an expired one). A valid certificate
    /// stays until it expires, so an Ingress that comes back within that
    /// time costs the CA nothing.
    async fn forget_stale(&self, wanted: &super::AcmeHosts) {
        let now = SystemTime::now();
        let view = self.shared.view.load_full();
        let mut stale: Vec<&String> = view
            .certs
            .keys()
            .chain(view.records.keys())
            .filter(|h| wanted.get(h).is_none())
            .filter(|h| view.certs.get(*h).is_none_or(|c| c.expired(now)))
            .collect();
        if stale.is_empty() {
            return;
        }
        stale.sort();
        stale.dedup();
        for host in stale {
            match self.shared.store.remove_host(host).await {
                Ok(()) => {
                    tracing::info!(host = %host, "forgot the ACME state of a host no Ingress asks for")
                }
                Err(e) => {
                    tracing::warn!(host = %host, error = %e, "cannot remove stale ACME state")
                }
            }
        }
        if let Err(e) = self.shared.refresh().await {
            tracing::warn!(error = %e, "cannot reload ACME state");
        }
    }

    /// One order for `host`, and what its result means for the next ones.
    async fn attempt(
        &mut self,
        host: &str,
        owner: &super::AcmeHost,
        record: HostRecord,
        metrics: &Metrics,
    ) -> Attempt {
        metrics.acme_orders.inc();
        let renewal = self.shared.view.load().cert(host, Some(owner)).is_some();
        tracing::info!(host, renewal, namespace = %owner.namespace, "ordering a certificate");
        let limit = self.config.order_timeout.saturating_mul(3);
        let result = match tokio::time::timeout(limit, self.ca.order(host, &self.shared)).await {
            Ok(r) => r,
            Err(_) => Err(Failure {
                unreachable: true,
                ..Failure::new(format!("no result within {limit:?}"))
            }),
        };
        let now = SystemTime::now();
        let store = &self.shared.store;
        match result {
            Ok((pem, cert)) => {
                let stored = async {
                    store.put_certificate(host, owner, &pem).await?;
                    let record = HostRecord {
                        updated_ms: unix_ms(now),
                        ..HostRecord::default()
                    };
                    store.put_record(host, owner, &record).await
                };
                match stored.await {
                    Ok(()) => {
                        metrics.acme_issued.inc();
                        tracing::info!(
                            host,
                            renewal,
                            not_after_unix = super::cert::unix_s(cert.not_after),
                            "certificate issued"
                        );
                    }
                    Err(e) => {
                        metrics.acme_failures.inc();
                        tracing::error!(host, error = %e, "certificate issued but not stored");
                    }
                }
                Attempt::Issued
            }
            Err(failure) => {
                metrics.acme_failures.inc();
                let failures = record.failures.saturating_add(1);
                let mut delay = backoff(failures, self.config.retry_min, self.config.retry_max);
                if failure.rate_limited {
                    delay = delay.max(self.config.retry_max);
                }
                // A Retry-After (429, 503) is the CA asking us to wait: it
                // is never cut short, for this host and its tenant.
                if let Some(at) = failure.retry_after {
                    delay = delay.max(at.duration_since(now).unwrap_or_default());
                }
                let pause = if failure.unreachable {
                    // The fleet-wide pause grows with its own count.
                    let global = backoff(
                        self.pauses.saturating_add(1),
                        self.config.retry_min,
                        self.config.retry_max,
                    );
                    Attempt::PauseAll(global.min(delay))
                } else if failure.rate_limited || failure.retry_after.is_some() {
                    Attempt::PauseTenant(delay)
                } else {
                    Attempt::Failed
                };
                let next = now + delay;
                tracing::warn!(
                    host,
                    failures,
                    retry_in_s = delay.as_secs_f64(),
                    rate_limited = failure.rate_limited,
                    error = %failure.message,
                    "certificate order failed; the current certificate (if any) keeps serving"
                );
                let record = HostRecord {
                    failures,
                    last_error: Some(failure.message),
                    next_attempt_ms: Some(unix_ms(next)),
                    updated_ms: unix_ms(now),
                };
                if let Err(e) = store.put_record(host, owner, &record).await {
                    tracing::error!(host, error = %e, "cannot store the ACME attempt record");
                }
                pause
            }
        }
    }
}

/// What one attempt means for the next ones.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Issued,
    /// This host backs off; nothing else does.
    Failed,
    /// The tenant's orders wait this long.
    PauseTenant(Duration),
    /// Every order waits this long.
    PauseAll(Duration),
}

#[async_trait::async_trait]
impl CertificateAuthority for AcmeCa {
    async fn order(
        &mut self,
        host: &str,
        shared: &AcmeShared,
    ) -> Result<(String, IssuedCert), Failure> {
        *self.retry_after.lock() = None;
        let mut result = self.issue(host, shared).await;
        if let Err(failure) = &mut result {
            failure.retry_after = self.retry_after.lock().take();
        }
        result
    }
}

impl AcmeCa {
    fn builder(&self) -> Result<AccountBuilder, Failure> {
        let http = AcmeHttp::new(self.config.root.as_deref(), self.retry_after.clone())?;
        Ok(Account::builder_with_http(Box::new(http)))
    }

    async fn issue(
        &mut self,
        host: &str,
        shared: &AcmeShared,
    ) -> Result<(String, IssuedCert), Failure> {
        match self.issue_once(host, shared).await {
            Err(f) if f.account_gone => {
                // A CA that lost its database (or a directory URL that now
                // points elsewhere): the stored account is useless.
                tracing::warn!(error = %f.message, "the CA does not know our account; registering again");
                self.account = None;
                self.register(shared).await?;
                self.issue_once(host, shared).await
            }
            r => r,
        }
    }

    async fn account(&mut self, shared: &AcmeShared) -> Result<Account, Failure> {
        if let Some(a) = &self.account {
            return Ok(a.clone());
        }
        let saved = shared.store.load_account().await?.and_then(|data| {
            serde_json::from_slice::<AccountFile>(&data)
                .inspect_err(|e| tracing::warn!(error = %e, "account.json unreadable; registering a new account"))
                .ok()
        });
        let account = match saved {
            Some(file) if file.directory == self.config.directory => {
                self.builder()?.from_credentials(file.credentials).await?
            }
            _ => return self.register(shared).await,
        };
        self.account = Some(account.clone());
        Ok(account)
    }

    /// Registers a new account and persists it (key included).
    async fn register(&mut self, shared: &AcmeShared) -> Result<Account, Failure> {
        let contact = self.config.email.as_ref().map(|e| format!("mailto:{e}"));
        let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
        let (account, credentials) = self
            .builder()?
            .create(
                &NewAccount {
                    contact: &contact,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                self.config.directory.clone(),
                None,
            )
            .await?;
        let file = AccountFile {
            directory: self.config.directory.clone(),
            credentials,
        };
        let data = serde_json::to_vec_pretty(&file)
            .map_err(|e| Failure::new(format!("encoding the account: {e}")))?;
        shared.store.save_account(&data).await?;
        tracing::info!(id = account.id(), "ACME account registered");
        self.account = Some(account.clone());
        Ok(account)
    }

    async fn issue_once(
        &mut self,
        host: &str,
        shared: &AcmeShared,
    ) -> Result<(String, IssuedCert), Failure> {
        let account = self.account(shared).await?;
        // A tenant cluster's key: `*.CLUSTER.ZONE` and `CLUSTER.ZONE`,
        // proven by DNS-01 (the only challenge a wildcard can use) on the
        // fleet's own DNS server.
        let wildcard = self
            .config
            .wildcard_zone
            .as_deref()
            .is_some_and(|zone| crate::compile::acme::is_wildcard_key(host, zone));
        let names = if wildcard {
            vec![format!("*.{host}"), host.to_string()]
        } else {
            vec![host.to_string()]
        };
        let identifiers: Vec<Identifier> = names.iter().cloned().map(Identifier::Dns).collect();
        let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
        let mut tokens = Vec::new();
        let challenge = if wildcard {
            ChallengeType::Dns01
        } else {
            ChallengeType::Http01
        };
        let authorized =
            Self::authorize(&mut order, challenge, &mut tokens, shared, &self.policy()).await;
        for token in &tokens {
            if let Err(e) = shared.store.remove_challenge(token).await {
                tracing::warn!(error = %e, "cannot remove an ACME challenge token");
            }
        }
        authorized?;

        // ECDSA P-256: small, fast handshakes, accepted by every client
        // that matters; a fresh key per certificate.
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = rcgen::CertificateParams::new(names)?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr = params.serialize_request(&key)?;
        order.finalize_csr(csr.der()).await?;
        let chain = order.poll_certificate(&self.policy()).await?;
        let pem = format!("{}{}", key.serialize_pem(), chain);
        let cert = IssuedCert::parse(&pem)?;
        Ok((pem, cert))
    }

    fn policy(&self) -> RetryPolicy {
        RetryPolicy::new()
            .initial_delay(Duration::from_millis(250))
            .backoff(1.5)
            .timeout(self.config.order_timeout)
    }

    /// Publishes each key authorization (HTTP-01: as the token's body;
    /// DNS-01: its digest as the TXT record every replica's DNS server
    /// answers), tells the CA, and waits for the order to become ready.
    async fn authorize(
        order: &mut Order,
        kind: ChallengeType,
        tokens: &mut Vec<String>,
        shared: &AcmeShared,
        policy: &RetryPolicy,
    ) -> Result<(), Failure> {
        let dns = kind == ChallengeType::Dns01;
        let mut authorizations = order.authorizations();
        while let Some(result) = authorizations.next().await {
            let mut authz = result?;
            match authz.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => return Err(Failure::new(format!("authorization is {other:?}"))),
            }
            let mut challenge = authz
                .challenge(kind.clone())
                .ok_or_else(|| Failure::new(format!("the CA offers no {kind:?} challenge")))?;
            if !valid_token(&challenge.token) {
                return Err(Failure::new("the CA sent a token that is not base64url"));
            }
            let key_authorization = challenge.key_authorization();
            let (token, value) = if dns {
                let identifier = challenge.identifier().to_string();
                (
                    super::dns01::token(&challenge.token),
                    super::dns01::value(&identifier, &key_authorization.dns_value()),
                )
            } else {
                (
                    challenge.token.clone(),
                    key_authorization.as_str().to_string(),
                )
            };
            shared.store.put_challenge(&token, &value).await?;
            tokens.push(token);
            if dns {
                // Every replica answers the CA's queries: the record must
                // have reached them all before it asks.
                tokio::time::sleep(super::dns01::PROPAGATION).await;
            }
            challenge.set_ready().await?;
        }
        let status = order.poll_ready(policy).await?;
        if status == OrderStatus::Ready {
            return Ok(());
        }
        // Say why: the challenge errors carry the CA's explanation
        // (connection refused, wrong content, DNS).
        let mut reasons = Vec::new();
        let mut authorizations = order.authorizations();
        while let Some(Ok(mut authz)) = authorizations.next().await {
            if let Ok(state) = authz.refresh().await {
                reasons.extend(
                    state
                        .challenges
                        .iter()
                        .filter_map(|c| c.error.as_ref())
                        .map(|p| p.to_string()),
                );
            }
        }
        Err(Failure::new(format!(
            "order is {status:?}: {}",
            if reasons.is_empty() {
                "the CA gave no reason".to_string()
            } else {
                reasons.join("; ")
            }
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_caps() {
        let (min, max) = (Duration::from_secs(10), Duration::from_secs(300));
        for _ in 0..100 {
            let first = backoff(1, min, max);
            assert!(first >= Duration::from_secs(5) && first <= min, "{first:?}");
            let third = backoff(3, min, max);
            assert!(third >= Duration::from_secs(20) && third <= Duration::from_secs(40));
            let many = backoff(50, min, max);
            assert!(many >= max / 2 && many <= max, "{many:?}");
        }
    }

    fn pem(host: &str, not_before: (i32, u8, u8), not_after: (i32, u8, u8)) -> String {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(vec![host.into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let cert = params.self_signed(&key).unwrap();
        format!("{}{}", key.serialize_pem(), cert.pem())
    }

    #[tokio::test]
    async fn forgets_unwanted_hosts_once_nothing_useful_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(super::super::store::DirStore::open(dir.path()).unwrap());
        use super::super::store::AcmeStore as _;
        store
            .put_certificate(
                "old.example",
                &Default::default(),
                &pem("old.example", (2000, 1, 1), (2000, 4, 1)),
            )
            .await
            .unwrap();
        store
            .put_certificate(
                "keep.example",
                &Default::default(),
                &pem("keep.example", (2000, 1, 1), (4000, 1, 1)),
            )
            .await
            .unwrap();
        store
            .put_record(
                "failed.example",
                &Default::default(),
                &HostRecord::default(),
            )
            .await
            .unwrap();
        store
            .put_record(
                "wanted.example",
                &Default::default(),
                &HostRecord::default(),
            )
            .await
            .unwrap();
        let shared = Arc::new(AcmeShared::new(store.clone(), false));
        shared.refresh().await.unwrap();
        let config = AcmeConfig::new("https://ca.invalid/dir", dir.path().to_path_buf());
        let issuer = Issuer::new(config, shared.clone()).unwrap();
        let mut wanted = super::super::AcmeHosts::default();
        wanted.insert("wanted.example", "ns", "ing");
        issuer.forget_stale(&wanted).await;
        let left: Vec<String> = store
            .load_hosts()
            .await
            .unwrap()
            .into_iter()
            .map(|h| h.host)
            .collect();
        assert_eq!(left, ["keep.example", "wanted.example"]);
    }

    /// A CA that rate-limits every order for hosts ending in `limited`
    /// and issues the others a certificate valid for centuries, recording
    /// the hosts in the order they were asked for.
    struct FakeCa {
        limited: &'static str,
        calls: Arc<parking_lot::Mutex<Vec<String>>>,
    }

    #[async_trait::async_trait]
    impl CertificateAuthority for FakeCa {
        async fn order(
            &mut self,
            host: &str,
            _shared: &AcmeShared,
        ) -> Result<(String, IssuedCert), Failure> {
            self.calls.lock().push(host.to_string());
            if host.ends_with(self.limited) {
                return Err(Failure {
                    rate_limited: true,
                    ..Failure::new(
                        "rateLimited: too many certificates already issued for this domain",
                    )
                });
            }
            let pem = pem(host, (2000, 1, 1), (4000, 1, 1));
            let cert = IssuedCert::parse(&pem)?;
            Ok((pem, cert))
        }
    }

    struct Fleet {
        issuer: Issuer,
        shared: Arc<AcmeShared>,
        snapshots: SnapshotHandle,
        metrics: Metrics,
        calls: Arc<parking_lot::Mutex<Vec<String>>>,
        _dir: tempfile::TempDir,
    }

    async fn fleet(limited: &'static str, budget: u32, hosts: &[(&str, &str)]) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(super::super::store::DirStore::open(dir.path()).unwrap());
        let shared = Arc::new(AcmeShared::new(store, false));
        let mut config = AcmeConfig::new("https://ca.invalid/dir", dir.path().to_path_buf());
        config.new_names_per_week = budget;
        let calls = Arc::default();
        let ca = FakeCa {
            limited,
            calls: Arc::clone(&calls),
        };
        let issuer = Issuer::with_ca(config, shared.clone(), Box::new(ca));
        let mut acme = super::super::AcmeHosts::default();
        for (host, namespace) in hosts {
            acme.insert(host, namespace, "web");
        }
        let snapshot = crate::compile::snapshot::Snapshot {
            acme,
            ..Default::default()
        };
        Fleet {
            issuer,
            shared,
            snapshots: Arc::new(arc_swap::ArcSwap::from_pointee(snapshot)),
            metrics: Metrics::new().unwrap(),
            calls,
            _dir: dir,
        }
    }

    /// One tenant's hosts sort first and the
    /// CA rate-limits them. Before, the rate limit paused every order for
    /// `--acme-retry-max` and no other tenant's host was ever tried.
    #[tokio::test]
    async fn a_rate_limited_tenant_waits_alone() {
        let mut f = fleet(
            ".alpha.test",
            0,
            &[
                ("a1.alpha.test", "tenant-alpha"),
                ("a2.alpha.test", "tenant-alpha"),
                ("a3.alpha.test", "tenant-alpha"),
                ("www.beta.test", "tenant-beta"),
            ],
        )
        .await;
        f.issuer.step(&f.snapshots, &f.metrics).await;
        let calls = f.calls.lock().clone();
        assert_eq!(calls.len(), 2, "one order per tenant: {calls:?}");
        assert_eq!(
            calls.iter().filter(|h| h.ends_with(".alpha.test")).count(),
            1
        );
        assert!(calls.contains(&"www.beta.test".to_string()), "{calls:?}");
        assert!(f.shared.view.load().certs.contains_key("www.beta.test"));
        assert!(f.issuer.paused_until.is_none(), "the fleet is not paused");
        assert!(f.issuer.tenants["tenant-alpha"].paused_until.is_some());

        // The next pass asks nothing of the paused tenant.
        f.issuer.step(&f.snapshots, &f.metrics).await;
        assert_eq!(f.calls.lock().len(), 2);
    }

    #[tokio::test]
    async fn renewals_go_first_and_new_names_keep_to_the_weekly_budget() {
        let f = fleet(
            ".none",
            1,
            &[
                ("n1.beta.test", "tenant-beta"),
                ("n2.beta.test", "tenant-beta"),
                ("r.beta.test", "tenant-beta"),
            ],
        )
        .await;
        // r.beta.test has a certificate past two thirds of its life.
        let owner = super::super::AcmeHost {
            namespace: "tenant-beta".into(),
            ingress: "web".into(),
            secret: None,
        };
        f.shared
            .store
            .put_certificate(
                "r.beta.test",
                &owner,
                &pem("r.beta.test", (2000, 1, 1), (2001, 1, 1)),
            )
            .await
            .unwrap();
        f.shared.refresh().await.unwrap();
        let mut f = f;
        f.issuer.step(&f.snapshots, &f.metrics).await;
        assert_eq!(*f.calls.lock(), ["r.beta.test", "n1.beta.test"]);
        f.shared.refresh().await.unwrap();
        let view = f.shared.view.load();
        let waiting = &view.records["n2.beta.test"];
        assert!(
            waiting
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("1 new certificates this week")),
            "{waiting:?}"
        );
        assert!(waiting.next_attempt_ms.is_some());
    }

    #[test]
    fn the_queue_serves_tenants_in_turn() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(super::super::store::DirStore::open(dir.path()).unwrap());
        let shared = Arc::new(AcmeShared::new(store, false));
        let config = AcmeConfig::new("https://ca.invalid/dir", dir.path().to_path_buf());
        let ca = FakeCa {
            limited: ".none",
            calls: Arc::default(),
        };
        let mut issuer = Issuer::with_ca(config, shared, Box::new(ca));
        let mut hosts = super::super::AcmeHosts::default();
        for (host, ns) in [
            ("a1", "a"),
            ("a2", "a"),
            ("a3", "a"),
            ("b1", "b"),
            ("c1", "c"),
            ("c2", "c"),
        ] {
            hosts.insert(host, ns, "web");
        }
        let order = |issuer: &Issuer| -> Vec<String> {
            issuer
                .queue(&hosts, SystemTime::now())
                .iter()
                .map(|d| d.host.to_string())
                .collect()
        };
        assert_eq!(order(&issuer), ["a1", "b1", "c1", "a2", "c2", "a3"]);
        issuer.rotation = 1;
        assert_eq!(order(&issuer), ["b1", "c1", "a1", "c2", "a2", "a3"]);
    }

    #[test]
    fn failures_classify_ca_problems() {
        let problem = |t: &str| {
            instant_acme::Error::Api(
                serde_json::from_value(serde_json::json!({"type": t, "detail": "x"})).unwrap(),
            )
        };
        let f = Failure::from(problem("urn:ietf:params:acme:error:rateLimited"));
        assert!(f.rate_limited && !f.account_gone);
        let f = Failure::from(problem("urn:ietf:params:acme:error:accountDoesNotExist"));
        assert!(f.account_gone && !f.rate_limited);
    }
}
