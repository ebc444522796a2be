//! ACME state on the Kubernetes API (kube mode): what [`super::store::DirStore`]
//! keeps in a directory, kept where every replica of the fleet sees it.
//!
//! | state | where |
//! |---|---|
//! | issuer role | Lease `teapot-acme` in the proxy's namespace ([`LeaderLease`]) |
//! | account | Secret `teapot-acme-account` in the proxy's namespace |
//! | challenge tokens | Secret `teapot-acme-challenges` in the proxy's namespace, one data key per token, label `teapot.dev/acme-challenge` |
//! | certificates | `kubernetes.io/tls` Secret per host in the namespace of the Ingress that asked, label `teapot.dev/acme-certificate`, the attempt record as annotations |
//!
//! Every replica reads tokens and certificates from watch caches (kube's
//! reflector), never with an API call per request or handshake. A write
//! returns only once this replica's own cache shows it, so the issuer
//! never acts on a view older than its own writes (it would order a
//! certificate twice) and a token is in the watch stream before the CA is
//! told to look for it.
//!
//! One Secret for all tokens, not one per token: the issuer has one order
//! in flight, so it holds a handful of keys, and fixed names let RBAC
//! restrict the proxy's writes in its own namespace by `resourceNames`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use teapot_api::lease::{LeaderLease, LeaseOptions};
use teapot_api::names::TLS_SECRET_TYPE;
use tokio::sync::watch;

use super::store::{AcmeStore, HostRecord, Leadership, StoredHost, valid_host, valid_token};
use super::{AcmeError, AcmeHost};
use teapot_source::kube::Tasks;

pub use teapot_source::kube::CERTIFICATE_LABEL;
/// Label of the Secret holding the challenge tokens.
pub const CHALLENGE_LABEL: &str = "teapot.dev/acme-challenge";
/// The Lease that picks the issuer.
pub const LEASE_NAME: &str = "teapot-acme";
pub const ACCOUNT_SECRET: &str = "teapot-acme-account";
pub const CHALLENGE_SECRET: &str = "teapot-acme-challenges";
const ACCOUNT_KEY: &str = "account.json";

/// Annotations of a certificate Secret: the host it is for, the Ingress
/// that asked, and the last attempt.
pub const HOST_ANNOTATION: &str = "teapot.dev/acme-host";
pub const INGRESS_ANNOTATION: &str = "teapot.dev/acme-ingress";
const FAILURES_ANNOTATION: &str = "teapot.dev/acme-failures";
const LAST_ERROR_ANNOTATION: &str = "teapot.dev/acme-last-error";
const NEXT_ATTEMPT_ANNOTATION: &str = "teapot.dev/acme-next-attempt-ms";
const UPDATED_ANNOTATION: &str = "teapot.dev/acme-updated-ms";

/// How long a write may take to come back through this replica's watch.
const ECHO_TIMEOUT: Duration = Duration::from_secs(10);

/// The name of `host`'s certificate Secret: the Ingress's own
/// `secretName` where the compile found one for this host alone, else
/// `teapot-acme-<host>` (shortened with a hash past 253 characters).
pub fn secret_name(host: &str, owner: &AcmeHost) -> String {
    match &owner.secret {
        Some(name) => name.clone(),
        None => teapot_api::hostname::shorten(&format!("teapot-acme-{host}"), 253),
    }
}

/// Where the store lives and who is asking.
#[derive(Clone, Debug)]
pub struct KubeStoreOptions {
    /// The proxy's namespace: Lease, account, tokens.
    pub namespace: String,
    /// Namespaces whose certificate Secrets are watched; empty: all.
    pub watch_namespaces: Vec<String>,
    pub lease: LeaseOptions,
}

impl KubeStoreOptions {
    pub fn new(namespace: impl Into<String>, watch_namespaces: Vec<String>) -> KubeStoreOptions {
        let namespace = namespace.into();
        KubeStoreOptions {
            lease: LeaseOptions::new(namespace.clone(), LEASE_NAME),
            namespace,
            watch_namespaces,
        }
    }
}

pub struct KubeStore {
    client: kube::Client,
    options: KubeStoreOptions,
    challenges: Store<Secret>,
    certificates: Vec<Store<Secret>>,
    /// Watches that have listed once; the issuer waits for all of them.
    synced: Arc<AtomicUsize>,
    changes: watch::Sender<u64>,
    _tasks: Arc<Tasks>,
}

impl std::fmt::Debug for KubeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeStore")
            .field("namespace", &self.options.namespace)
            .field("watch_namespaces", &self.options.watch_namespaces)
            .finish_non_exhaustive()
    }
}

/// Holds the `teapot-acme` Lease: a task renews it and turns
/// [`Leadership::held`] false at the first renewal that fails.
struct LeaseHeld {
    held: Arc<AtomicBool>,
    lease: Arc<tokio::sync::Mutex<LeaderLease>>,
    renewal: tokio::task::AbortHandle,
}

impl std::fmt::Debug for LeaseHeld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseHeld")
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Leadership for LeaseHeld {
    fn held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    async fn release(self: Box<Self>) {
        // Stop renewing first: a renewal racing the release would take the
        // Lease straight back.
        self.renewal.abort();
        self.held.store(false, Ordering::Release);
        self.lease.lock().await.release().await;
    }
}

impl Drop for LeaseHeld {
    fn drop(&mut self) {
        self.renewal.abort();
    }
}

fn api_err(what: impl std::fmt::Display, e: kube::Error) -> AcmeError {
    AcmeError::Store(format!("{what}: {e}"))
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn text(secret: &Secret, key: &str) -> Option<String> {
    let data = secret.data.as_ref()?.get(key)?;
    Some(String::from_utf8_lossy(&data.0).into_owned())
}

fn annotation<'a>(secret: &'a Secret, key: &str) -> Option<&'a str> {
    secret
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn ours(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(CERTIFICATE_LABEL))
}

/// Splits the issuer's PEM (private key, then chain) into the two keys of
/// a `kubernetes.io/tls` Secret: `(tls.key, tls.crt)`.
fn split_pem(pem: &str) -> (String, String) {
    let (mut key, mut chain) = (String::new(), String::new());
    let mut rest = pem;
    while let Some(start) = rest.find("-----BEGIN ") {
        let Some(end) = rest[start..].find("-----END ").map(|i| start + i) else {
            break;
        };
        let line_end = rest[end..].find('\n').map_or(rest.len(), |i| end + i + 1);
        let block = rest[start..line_end].trim_end();
        let out = if rest[start..].starts_with("-----BEGIN PRIVATE KEY")
            || rest[start..].starts_with("-----BEGIN EC PRIVATE KEY")
        {
            &mut key
        } else {
            &mut chain
        };
        out.push_str(block);
        out.push('\n');
        rest = &rest[line_end..];
    }
    (key, chain)
}

fn record_of(secret: &Secret) -> Option<HostRecord> {
    let number = |key| annotation(secret, key).and_then(|v| v.parse::<u64>().ok());
    Some(HostRecord {
        updated_ms: number(UPDATED_ANNOTATION)?,
        failures: number(FAILURES_ANNOTATION).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        last_error: annotation(secret, LAST_ERROR_ANNOTATION).map(str::to_string),
        next_attempt_ms: number(NEXT_ATTEMPT_ANNOTATION),
    })
}

fn record_annotations(record: &HostRecord) -> serde_json::Value {
    json!({
        FAILURES_ANNOTATION: record.failures.to_string(),
        LAST_ERROR_ANNOTATION: record.last_error,
        NEXT_ATTEMPT_ANNOTATION: record.next_attempt_ms.map(|ms| ms.to_string()),
        UPDATED_ANNOTATION: record.updated_ms.to_string(),
    })
}

/// The host a certificate Secret is for, if it is a well-formed one of ours.
fn host_of(secret: &Secret) -> Option<&str> {
    let host = annotation(secret, HOST_ANNOTATION)?;
    (ours(secret) && valid_host(host)).then_some(host)
}

impl KubeStore {
    /// Starts the watches (needs a tokio runtime). Not synced yet: the
    /// issuer role is refused until every watch has listed, so nothing is
    /// ordered that is already stored.
    pub fn start(client: kube::Client, options: KubeStoreOptions) -> KubeStore {
        let (changes, _) = watch::channel(0u64);
        let synced = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        let mut spawn_watch = |api: Api<Secret>, config: watcher::Config| {
            let (reader, writer) = reflector::store();
            let events = changes.clone();
            let stream = watcher(api, config).default_backoff().reflect(writer);
            tasks.push(tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    if let Err(e) = event {
                        tracing::warn!(error = %e, "ACME Secret watch failed; retrying with backoff");
                        continue;
                    }
                    events.send_modify(|n| *n += 1);
                }
            }));
            let (ready, synced, changes) = (reader.clone(), synced.clone(), changes.clone());
            tasks.push(tokio::spawn(async move {
                if ready.wait_until_ready().await.is_ok() {
                    synced.fetch_add(1, Ordering::AcqRel);
                    changes.send_modify(|n| *n += 1);
                }
            }));
            reader
        };
        let challenges = spawn_watch(
            Api::namespaced(client.clone(), &options.namespace),
            watcher::Config::default().fields(&format!("metadata.name={CHALLENGE_SECRET}")),
        );
        let config = watcher::Config::default()
            .fields(&format!("type={TLS_SECRET_TYPE}"))
            .labels(CERTIFICATE_LABEL);
        let certificates = if options.watch_namespaces.is_empty() {
            vec![spawn_watch(Api::all(client.clone()), config)]
        } else {
            options
                .watch_namespaces
                .iter()
                .map(|ns| spawn_watch(Api::namespaced(client.clone(), ns), config.clone()))
                .collect()
        };
        KubeStore {
            client,
            options,
            challenges,
            certificates,
            synced,
            changes,
            _tasks: Arc::new(Tasks(tasks)),
        }
    }

    /// Whether every watch has listed once.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire) == 1 + self.certificates.len()
    }

    fn own_secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.options.namespace)
    }

    /// Waits until `store` shows `name` at `version` or later changes
    /// (this replica's watch has delivered the write).
    async fn echoed(&self, store: &Store<Secret>, namespace: &str, name: &str, version: &str) {
        let key = ObjectRef::new(name).within(namespace);
        let mut changes = self.changes.subscribe();
        let seen = tokio::time::timeout(ECHO_TIMEOUT, async {
            loop {
                let current = store.get(&key);
                if current
                    .as_ref()
                    .and_then(|s| s.metadata.resource_version.as_deref())
                    == Some(version)
                {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        if seen.is_err() {
            tracing::warn!(secret = %format!("{namespace}/{name}"), "ACME write not seen through the watch in time");
        }
    }

    fn watch_of(&self, namespace: &str) -> Option<&Store<Secret>> {
        if self.options.watch_namespaces.is_empty() {
            return self.certificates.first();
        }
        let i = self
            .options
            .watch_namespaces
            .iter()
            .position(|ns| ns == namespace)?;
        self.certificates.get(i)
    }

    /// Every certificate Secret of `host`, as `(namespace, name)`.
    fn secrets_of(&self, host: &str) -> Vec<(String, String)> {
        self.certificates
            .iter()
            .flat_map(|s| s.state())
            .filter(|s| host_of(s) == Some(host))
            .map(|s| {
                (
                    s.metadata.namespace.clone().unwrap_or_default(),
                    s.metadata.name.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// [`secret_name`], unless that `secretName` already holds another
    /// host's certificate (two Ingresses naming one Secret for different
    /// hosts): then `teapot-acme-<host>`, so the two never overwrite each
    /// other's certificate and re-order it forever.
    fn name_for(&self, host: &str, owner: &AcmeHost) -> String {
        let name = secret_name(host, owner);
        let key = ObjectRef::new(&name).within(&owner.namespace);
        let taken = self
            .watch_of(&owner.namespace)
            .and_then(|s| s.get(&key))
            .is_some_and(|s| host_of(&s).is_some_and(|h| h != host));
        if taken {
            let fallback = AcmeHost {
                secret: None,
                ..owner.clone()
            };
            return secret_name(host, &fallback);
        }
        name
    }

    /// Writes `host`'s certificate Secret: a merge patch of `patch` onto
    /// ours, or a new Secret; never onto a Secret that is not ours (a
    /// tenant's certificate under the same name).
    async fn write_host(
        &self,
        host: &str,
        owner: &AcmeHost,
        data: Option<(String, String)>,
        record: &HostRecord,
    ) -> Result<(), AcmeError> {
        if !valid_host(host) {
            return Err(AcmeError::Store(format!("invalid host name {host:?}")));
        }
        let namespace = &owner.namespace;
        let name = self.name_for(host, owner);
        let what = format!("Secret {namespace}/{name} (ACME certificate of {host})");
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let existing = api.get_opt(&name).await.map_err(|e| api_err(&what, e))?;
        if existing.as_ref().is_some_and(|s| !ours(s)) {
            return Err(AcmeError::Store(format!(
                "{what} exists and is not teapot's (no label {CERTIFICATE_LABEL}); not overwritten"
            )));
        }
        if let Some(other) = existing.as_ref().and_then(host_of).filter(|h| *h != host) {
            return Err(AcmeError::Store(format!(
                "{what} holds the certificate of {other}; not overwritten"
            )));
        }
        let mut annotations = record_annotations(record);
        annotations[HOST_ANNOTATION] = json!(host);
        annotations[INGRESS_ANNOTATION] = json!(owner.ingress);
        let b64 = |s: &str| ByteString(s.as_bytes().to_vec());
        let written = match existing {
            Some(_) => {
                let mut patch = json!({"metadata": {"annotations": annotations}});
                if let Some((key, chain)) = &data {
                    patch["data"] = json!({"tls.crt": b64(chain), "tls.key": b64(key)});
                }
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
            }
            None => {
                // A kubernetes.io/tls Secret must have both keys; a record
                // before the first certificate has them empty.
                let (key, chain) = data.unwrap_or_default();
                let annotations: BTreeMap<String, String> =
                    serde_json::from_value(strip_nulls(annotations)).unwrap_or_default();
                let secret = Secret {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(namespace.clone()),
                        labels: Some([(CERTIFICATE_LABEL.to_string(), "true".to_string())].into()),
                        annotations: Some(annotations),
                        ..Default::default()
                    },
                    type_: Some(TLS_SECRET_TYPE.into()),
                    data: Some(
                        [
                            ("tls.crt".to_string(), b64(&chain)),
                            ("tls.key".to_string(), b64(&key)),
                        ]
                        .into(),
                    ),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &secret).await
            }
        }
        .map_err(|e| api_err(format!("writing {what}"), e))?;
        if let (Some(store), Some(version)) = (
            self.watch_of(namespace),
            written.metadata.resource_version.as_deref(),
        ) {
            self.echoed(store, namespace, &name, version).await;
        }
        Ok(())
    }

    async fn delete_secret(&self, namespace: &str, name: &str) -> Result<(), AcmeError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(api_err(format!("deleting Secret {namespace}/{name}"), e)),
        }
    }

    /// Merge-patches the challenge Secret, creating it when missing, and
    /// waits for this replica's watch to show the result.
    async fn patch_challenges(&self, data: serde_json::Value) -> Result<(), AcmeError> {
        let api = self.own_secrets();
        let what = format!(
            "Secret {}/{CHALLENGE_SECRET} (ACME challenge tokens)",
            self.options.namespace
        );
        let patch = json!({
            "metadata": {"labels": {CHALLENGE_LABEL: "true"}},
            "data": data,
        });
        let written = match api
            .patch(
                CHALLENGE_SECRET,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Err(e) if is_status(&e, 404) => {
                let mut object = json!({
                    "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": CHALLENGE_SECRET, "namespace": self.options.namespace},
                });
                object["metadata"]["labels"] = patch["metadata"]["labels"].clone();
                object["data"] = strip_nulls(patch["data"].clone());
                let secret: Secret = serde_json::from_value(object)
                    .map_err(|e| AcmeError::Store(format!("{what}: {e}")))?;
                api.create(&PostParams::default(), &secret).await
            }
            r => r,
        }
        .map_err(|e| api_err(format!("writing {what}"), e))?;
        if let Some(version) = written.metadata.resource_version.as_deref() {
            self.echoed(
                &self.challenges,
                &self.options.namespace,
                CHALLENGE_SECRET,
                version,
            )
            .await;
        }
        Ok(())
    }
}

/// A merge patch deletes with `null`; a new object has no nulls.
fn strip_nulls(mut value: serde_json::Value) -> serde_json::Value {
    if let Some(map) = value.as_object_mut() {
        map.retain(|_, v| !v.is_null());
    }
    value
}

async fn renew(
    lease: Arc<tokio::sync::Mutex<LeaderLease>>,
    held: Arc<AtomicBool>,
    every: Duration,
) {
    loop {
        tokio::time::sleep(every).await;
        if !lease.lock().await.try_lead().await {
            held.store(false, Ordering::Release);
            return;
        }
    }
}

#[async_trait]
impl AcmeStore for KubeStore {
    async fn try_lead(&self) -> Result<Option<Box<dyn Leadership>>, AcmeError> {
        if !self.is_synced() {
            return Ok(None);
        }
        let mut lease = LeaderLease::new(self.client.clone(), self.options.lease.clone());
        if !lease.try_lead().await {
            return Ok(None);
        }
        let held = Arc::new(AtomicBool::new(true));
        let lease = Arc::new(tokio::sync::Mutex::new(lease));
        let renewal = tokio::spawn(renew(
            lease.clone(),
            held.clone(),
            self.options.lease.renew_every,
        ));
        Ok(Some(Box::new(LeaseHeld {
            held,
            lease,
            renewal: renewal.abort_handle(),
        })))
    }

    async fn load_account(&self) -> Result<Option<Vec<u8>>, AcmeError> {
        let secret = self
            .own_secrets()
            .get_opt(ACCOUNT_SECRET)
            .await
            .map_err(|e| api_err(format!("reading Secret {ACCOUNT_SECRET}"), e))?;
        Ok(secret
            .and_then(|s| s.data)
            .and_then(|mut d| d.remove(ACCOUNT_KEY))
            .map(|b| b.0))
    }

    async fn save_account(&self, data: &[u8]) -> Result<(), AcmeError> {
        let api = self.own_secrets();
        let what = format!("Secret {}/{ACCOUNT_SECRET}", self.options.namespace);
        let data = ByteString(data.to_vec());
        let patch = json!({"data": {ACCOUNT_KEY: data}});
        match api
            .patch(
                ACCOUNT_SECRET,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Err(e) if is_status(&e, 404) => {
                let secret = Secret {
                    metadata: kube::api::ObjectMeta {
                        name: Some(ACCOUNT_SECRET.into()),
                        namespace: Some(self.options.namespace.clone()),
                        ..Default::default()
                    },
                    type_: Some("Opaque".into()),
                    data: Some([(ACCOUNT_KEY.to_string(), data)].into()),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &secret).await.map(drop)
            }
            r => r.map(drop),
        }
        .map_err(|e| api_err(format!("writing {what}"), e))
    }

    async fn put_challenge(&self, token: &str, key_authorization: &str) -> Result<(), AcmeError> {
        if !valid_token(token) {
            return Err(AcmeError::Store(format!("invalid token {token:?}")));
        }
        self.patch_challenges(json!({ token: ByteString(key_authorization.as_bytes().to_vec()) }))
            .await
    }

    async fn remove_challenge(&self, token: &str) -> Result<(), AcmeError> {
        if !valid_token(token) {
            return Err(AcmeError::Store(format!("invalid token {token:?}")));
        }
        self.patch_challenges(json!({ token: null })).await
    }

    async fn clear_challenges(&self) -> Result<(), AcmeError> {
        self.delete_secret(&self.options.namespace, CHALLENGE_SECRET)
            .await
    }

    async fn challenge(&self, token: &str) -> Result<Option<String>, AcmeError> {
        if !valid_token(token) {
            return Err(AcmeError::Store(format!("invalid token {token:?}")));
        }
        let key = ObjectRef::new(CHALLENGE_SECRET).within(&self.options.namespace);
        Ok(self.challenges.get(&key).and_then(|s| text(&s, token)))
    }

    async fn challenges(&self) -> Result<Vec<(String, String)>, AcmeError> {
        let key = ObjectRef::new(CHALLENGE_SECRET).within(&self.options.namespace);
        let Some(secret) = self.challenges.get(&key) else {
            return Ok(Vec::new());
        };
        Ok(secret
            .data
            .iter()
            .flatten()
            .map(|(token, value)| {
                (
                    token.clone(),
                    String::from_utf8_lossy(&value.0).into_owned(),
                )
            })
            .collect())
    }

    async fn put_certificate(
        &self,
        host: &str,
        owner: &AcmeHost,
        pem: &str,
    ) -> Result<(), AcmeError> {
        // The record keeps its last value here; the issuer writes a fresh
        // one right after.
        let record = self
            .certificates
            .iter()
            .flat_map(|s| s.state())
            .filter(|s| host_of(s) == Some(host))
            .find_map(|s| record_of(&s))
            .unwrap_or_default();
        self.write_host(host, owner, Some(split_pem(pem)), &record)
            .await?;
        // One certificate Secret per host: one left behind in another
        // namespace or under another name (the Ingress moved, its
        // secretName changed) goes.
        let name = self.name_for(host, owner);
        for (ns, other) in self.secrets_of(host) {
            if ns != owner.namespace || other != name {
                self.delete_secret(&ns, &other).await?;
            }
        }
        Ok(())
    }

    async fn put_record(
        &self,
        host: &str,
        owner: &AcmeHost,
        record: &HostRecord,
    ) -> Result<(), AcmeError> {
        self.write_host(host, owner, None, record).await
    }

    async fn remove_host(&self, host: &str) -> Result<(), AcmeError> {
        for (ns, name) in self.secrets_of(host) {
            self.delete_secret(&ns, &name).await?;
        }
        Ok(())
    }

    async fn load_hosts(&self) -> Result<Vec<StoredHost>, AcmeError> {
        let mut hosts: BTreeMap<String, (u64, StoredHost)> = BTreeMap::new();
        for secret in self.certificates.iter().flat_map(|s| s.state()) {
            let Some(host) = host_of(&secret) else {
                continue;
            };
            let record = record_of(&secret);
            let pem = match (text(&secret, "tls.key"), text(&secret, "tls.crt")) {
                (Some(key), Some(chain)) if !key.is_empty() && !chain.is_empty() => {
                    Some(format!("{key}{chain}"))
                }
                _ => None,
            };
            let updated = record.as_ref().map_or(0, |r| r.updated_ms);
            // Two Secrets for one host only between a write and the
            // clean-up after it: the newer one is the truth.
            if hosts.get(host).is_some_and(|(t, _)| *t > updated) {
                continue;
            }
            hosts.insert(
                host.to_string(),
                (
                    updated,
                    StoredHost {
                        host: host.to_string(),
                        pem,
                        record,
                        namespace: secret.metadata.namespace.clone(),
                    },
                ),
            );
        }
        Ok(hosts.into_values().map(|(_, h)| h).collect())
    }

    fn changes(&self) -> Option<watch::Receiver<u64>> {
        Some(self.changes.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_testkit::apiserver::ApiServer;

    const NS: &str = "teapot-system";
    const TENANT_NS: &str = "tenant-acme";
    const HOST: &str = "web-shop.acme.lb.example.net";

    fn replica(api: &ApiServer, identity: &str) -> KubeStore {
        let mut options = KubeStoreOptions::new(NS, Vec::new());
        options.lease.identity = identity.into();
        options.lease.renew_every = Duration::from_millis(50);
        KubeStore::start(api.client(), options)
    }

    /// Polls until `probe` gives a value; the bound only stops a broken
    /// test, nothing is asserted about the time taken.
    async fn until<T, F: Future<Output = Option<T>>>(what: &str, probe: impl Fn() -> F) -> T {
        for _ in 0..1500 {
            if let Some(v) = probe().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("never: {what}");
    }

    async fn synced(stores: &[&KubeStore]) {
        until("the ACME watches listed", || async {
            stores.iter().all(|s| s.is_synced()).then_some(())
        })
        .await;
    }

    fn owner(namespace: &str, secret: Option<&str>) -> AcmeHost {
        AcmeHost {
            namespace: namespace.into(),
            ingress: "web.shop".into(),
            secret: secret.map(str::to_string),
        }
    }

    fn pem(host: &str) -> String {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec![host.into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        format!("{}{}", key.serialize_pem(), cert.pem())
    }

    fn data(secret: &serde_json::Value, key: &str) -> String {
        let secret: Secret = serde_json::from_value(secret.clone()).unwrap();
        text(&secret, key).unwrap_or_default()
    }

    #[test]
    fn the_issuers_pem_splits_into_key_and_chain() {
        let whole = pem(HOST);
        let (key, chain) = split_pem(&format!("{whole}{}", pem("ca.example")));
        assert!(
            key.starts_with("-----BEGIN PRIVATE KEY-----")
                && key.ends_with("-----END PRIVATE KEY-----\n")
        );
        assert_eq!(key.matches("BEGIN").count(), 2);
        assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(!chain.contains("PRIVATE"));
        assert_eq!(
            secret_name(HOST, &owner(TENANT_NS, None)),
            format!("teapot-acme-{HOST}")
        );
        assert_eq!(
            secret_name(HOST, &owner("default", Some("shop-tls"))),
            "shop-tls"
        );
        let long = format!("{}.example", "a".repeat(240));
        assert!(secret_name(&long, &owner(TENANT_NS, None)).len() <= 253);
    }

    #[tokio::test]
    async fn certificates_and_records_are_tls_secrets_every_replica_sees() {
        let api = ApiServer::start().await;
        let (a, b) = (replica(&api, "a"), replica(&api, "b"));
        synced(&[&a, &b]).await;
        let name = format!("teapot-acme-{HOST}");

        // A failure before any certificate: a TLS Secret with empty keys
        // and the record as annotations.
        let failed = HostRecord {
            failures: 2,
            last_error: Some("connection refused".into()),
            next_attempt_ms: Some(4_000),
            updated_ms: 1_000,
        };
        a.put_record(HOST, &owner(TENANT_NS, None), &failed)
            .await
            .unwrap();
        let secret = api.get("v1", "Secret", TENANT_NS, &name).unwrap();
        assert_eq!(secret["type"], "kubernetes.io/tls");
        assert_eq!(secret["metadata"]["labels"][CERTIFICATE_LABEL], "true");
        assert_eq!(secret["metadata"]["annotations"][HOST_ANNOTATION], HOST);
        assert_eq!(
            secret["metadata"]["annotations"][INGRESS_ANNOTATION],
            "web.shop"
        );
        assert_eq!(secret["metadata"]["annotations"][FAILURES_ANNOTATION], "2");
        assert_eq!(data(&secret, "tls.crt"), "");
        let seen = until("B sees the record", || async {
            let hosts = b.load_hosts().await.unwrap();
            hosts.into_iter().find(|h| h.record.is_some())
        })
        .await;
        assert_eq!(seen.record.as_ref(), Some(&failed));
        assert_eq!(seen.pem, None);
        assert_eq!(seen.namespace.as_deref(), Some(TENANT_NS));

        // The certificate: tls.key and tls.crt, the record kept until the
        // issuer writes the next one; B reads it as one PEM again.
        let issued = pem(HOST);
        a.put_certificate(HOST, &owner(TENANT_NS, None), &issued)
            .await
            .unwrap();
        let secret = api.get("v1", "Secret", TENANT_NS, &name).unwrap();
        assert!(data(&secret, "tls.key").contains("PRIVATE KEY"));
        assert!(data(&secret, "tls.crt").contains("BEGIN CERTIFICATE"));
        assert!(!data(&secret, "tls.crt").contains("PRIVATE KEY"));
        let stored = until("B sees the certificate", || async {
            let hosts = b.load_hosts().await.unwrap();
            hosts.into_iter().find(|h| h.pem.is_some())
        })
        .await;
        let parsed =
            crate::loops::acme::cert::IssuedCert::parse(stored.pem.as_deref().unwrap()).unwrap();
        let original = crate::loops::acme::cert::IssuedCert::parse(&issued).unwrap();
        assert_eq!(parsed.not_after, original.not_after);
        let cleared = HostRecord {
            updated_ms: 2_000,
            ..HostRecord::default()
        };
        a.put_record(HOST, &owner(TENANT_NS, None), &cleared)
            .await
            .unwrap();
        let secret = api.get("v1", "Secret", TENANT_NS, &name).unwrap();
        assert!(
            secret["metadata"]["annotations"]
                .get(LAST_ERROR_ANNOTATION)
                .is_none()
        );
        assert!(
            data(&secret, "tls.crt").contains("BEGIN CERTIFICATE"),
            "a record never drops the certificate"
        );

        // The host moves to another namespace: its new certificate is
        // written there and the old Secret goes.
        a.put_certificate(HOST, &owner("tenant-other", None), &pem(HOST))
            .await
            .unwrap();
        assert!(api.get("v1", "Secret", TENANT_NS, &name).is_none());
        assert!(api.get("v1", "Secret", "tenant-other", &name).is_some());

        a.remove_host(HOST).await.unwrap();
        assert!(api.get("v1", "Secret", "tenant-other", &name).is_none());
        until("B forgets the host", || async {
            b.load_hosts().await.unwrap().is_empty().then_some(())
        })
        .await;
    }

    #[tokio::test]
    async fn a_secret_that_is_not_ours_is_never_overwritten_nor_read() {
        let api = ApiServer::start().await;
        let tenant_pem = pem("shop.example");
        let (key, chain) = split_pem(&tenant_pem);
        let b64 = |s: &str| ByteString(s.as_bytes().to_vec());
        let foreign = json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "shop-tls", "namespace": "default",
                         "annotations": {HOST_ANNOTATION: "shop.example"}},
            "data": {"tls.crt": b64(&chain), "tls.key": b64(&key)},
        });
        api.apply(foreign.clone());
        let a = replica(&api, "a");
        synced(&[&a]).await;
        let err = a
            .put_certificate(
                "shop.example",
                &owner("default", Some("shop-tls")),
                &pem("shop.example"),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("default/shop-tls"), "{err}");
        assert_eq!(
            data(
                &api.get("v1", "Secret", "default", "shop-tls").unwrap(),
                "tls.crt"
            ),
            chain
        );
        // Without our label it is a tenant's certificate, never ACME state.
        assert!(a.load_hosts().await.unwrap().is_empty());

        // Two hosts whose Ingresses name one secretName: the second goes
        // to teapot-acme-<host> instead of overwriting the first.
        let shared = owner("default", Some("shared-tls"));
        a.put_certificate("a.example", &shared, &pem("a.example"))
            .await
            .unwrap();
        a.put_certificate("b.example", &shared, &pem("b.example"))
            .await
            .unwrap();
        let first = api.get("v1", "Secret", "default", "shared-tls").unwrap();
        assert_eq!(
            first["metadata"]["annotations"][HOST_ANNOTATION],
            "a.example"
        );
        let second = api
            .get("v1", "Secret", "default", "teapot-acme-b.example")
            .unwrap();
        assert_eq!(
            second["metadata"]["annotations"][HOST_ANNOTATION],
            "b.example"
        );
        assert_eq!(a.load_hosts().await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn tokens_and_the_account_live_in_the_proxy_namespace() {
        let api = ApiServer::start().await;
        let (a, b) = (replica(&api, "a"), replica(&api, "b"));
        synced(&[&a, &b]).await;
        a.put_challenge("tok-1_A", "tok-1_A.thumb").await.unwrap();
        a.put_challenge("tok-2", "tok-2.thumb").await.unwrap();
        // The writer's own cache has it when put_challenge returns.
        assert_eq!(
            a.challenge("tok-1_A").await.unwrap().as_deref(),
            Some("tok-1_A.thumb")
        );
        let got = until("B answers the token", || async {
            b.challenge("tok-2").await.unwrap()
        })
        .await;
        assert_eq!(got, "tok-2.thumb");
        let secret = api.get("v1", "Secret", NS, CHALLENGE_SECRET).unwrap();
        assert_eq!(secret["metadata"]["labels"][CHALLENGE_LABEL], "true");
        assert_eq!(b.challenge("unknown").await.unwrap(), None);
        assert!(b.challenge("../x").await.is_err());
        a.remove_challenge("tok-2").await.unwrap();
        assert_eq!(a.challenge("tok-2").await.unwrap(), None);
        assert!(a.challenge("tok-1_A").await.unwrap().is_some());
        a.clear_challenges().await.unwrap();
        assert!(api.get("v1", "Secret", NS, CHALLENGE_SECRET).is_none());
        until("B drops the tokens", || async {
            b.challenge("tok-1_A")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        })
        .await;

        assert_eq!(a.load_account().await.unwrap(), None);
        a.save_account(b"{\"k\":1}").await.unwrap();
        a.save_account(b"{\"k\":2}").await.unwrap();
        assert_eq!(b.load_account().await.unwrap().unwrap(), b"{\"k\":2}");
    }

    #[tokio::test]
    async fn one_issuer_holds_the_lease_until_it_expires() {
        let (api, _a, b, lead) = a_leads().await;
        assert!(lead.held());

        // A lease renewed long ago has expired (the holder is gone or
        // cut off): b takes over, and a's next renewal sees it lost.
        lead_expired(&api);
        let b_lead = b.try_lead().await.unwrap().expect("b takes over");
        until("a notices it lost the lease", || async {
            (!lead.held()).then_some(())
        })
        .await;
        assert!(b_lead.held());
    }

    /// A replica that shuts down hands the role over at once: the Lease
    /// has no holder and the next replica leads at its first try.
    #[tokio::test]
    async fn a_released_lease_is_taken_at_the_next_try() {
        let (api, _a, b, lead) = a_leads().await;
        lead.release().await;
        assert!(holder(&api).is_null(), "released");
        let b_lead = b.try_lead().await.unwrap().expect("b leads at once");
        // a's renewal stopped with the release: it never takes it back.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(b_lead.held());
        assert_eq!(holder(&api), "b");
    }

    /// Two synced replicas; a holds the Lease, b is refused it.
    async fn a_leads() -> (ApiServer, KubeStore, KubeStore, Box<dyn Leadership>) {
        let api = ApiServer::start().await;
        let (a, b) = (replica(&api, "a"), replica(&api, "b"));
        synced(&[&a, &b]).await;
        let lead = a.try_lead().await.unwrap().expect("a leads");
        assert!(b.try_lead().await.unwrap().is_none());
        assert_eq!(holder(&api), "a");
        (api, a, b, lead)
    }

    fn the_lease(api: &ApiServer) -> serde_json::Value {
        api.get("coordination.k8s.io/v1", "Lease", NS, LEASE_NAME)
            .unwrap()
    }

    fn holder(api: &ApiServer) -> serde_json::Value {
        the_lease(api)["spec"]["holderIdentity"].clone()
    }

    fn lead_expired(api: &ApiServer) {
        let mut stale = the_lease(api);
        stale["spec"]["renewTime"] = json!("2000-01-01T00:00:00.000000Z");
        api.apply(stale);
    }

    #[tokio::test]
    async fn no_issuer_before_the_watches_listed() {
        // Nobody answers: the watches never list, so nothing may be
        // ordered (it could already be stored).
        let client = {
            let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
            kube::Client::try_from(config).unwrap()
        };
        let store = KubeStore::start(client, KubeStoreOptions::new(NS, Vec::new()));
        assert!(!store.is_synced());
        assert!(store.try_lead().await.unwrap().is_none());
    }
}
