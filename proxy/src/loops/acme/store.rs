//! Where ACME state lives, behind [`AcmeStore`] so that manifests mode (a
//! state directory, [`DirStore`]) and kube mode (Secrets and a Lease,
//! [`super::kube_store::KubeStore`]) share the issuer, the challenge
//! responder and the SNI table.
//!
//! What a store must give every replica: the account, the challenge tokens
//! of orders in flight, and per host the certificate (key + chain) and a
//! record of the last attempt (so a new issuer after a failover keeps the
//! backoff). What it must give one replica at a time: the issuer role.

use std::fmt;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{AcmeError, AcmeHost};

/// The outcome of the last attempt for one host, shared by the fleet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRecord {
    /// Failed attempts since the last success.
    pub failures: u32,
    pub last_error: Option<String>,
    /// No attempt before this (Unix milliseconds): backoff, `Retry-After`.
    pub next_attempt_ms: Option<u64>,
    /// When this record was written (Unix milliseconds).
    pub updated_ms: u64,
}

/// One host as stored: its certificate PEM (private key and chain) and its
/// record; either may be missing.
#[derive(Clone, Debug, Default)]
pub struct StoredHost {
    pub host: String,
    pub pem: Option<String>,
    pub record: Option<HostRecord>,
    /// The namespace the certificate is kept in (kube mode): it serves only
    /// while the host's Ingress is in that namespace.
    pub namespace: Option<String>,
}

/// Held while this process is the fleet's issuer; dropping it gives the
/// role up.
#[async_trait]
pub trait Leadership: Send + Sync + fmt::Debug {
    /// False once the role is lost (a Lease that could not be renewed);
    /// the issuer stops at its next step.
    fn held(&self) -> bool;

    /// Gives the role up at shutdown so another replica takes it at its
    /// next try, not after the Lease expires. Dropping without this is
    /// still safe: the role then lapses on its own.
    async fn release(self: Box<Self>) {}
}

/// Storage for ACME state. Host names and tokens are checked by the caller
/// ([`valid_host`], [`valid_token`]) before they get here.
#[async_trait]
pub trait AcmeStore: Send + Sync + fmt::Debug + 'static {
    /// Tries to become the one issuer; `Ok(None)` while another holds it.
    async fn try_lead(&self) -> Result<Option<Box<dyn Leadership>>, AcmeError>;
    async fn load_account(&self) -> Result<Option<Vec<u8>>, AcmeError>;
    async fn save_account(&self, data: &[u8]) -> Result<(), AcmeError>;
    async fn put_challenge(&self, token: &str, key_authorization: &str) -> Result<(), AcmeError>;
    async fn remove_challenge(&self, token: &str) -> Result<(), AcmeError>;
    /// Drops every token (a new issuer starts clean).
    async fn clear_challenges(&self) -> Result<(), AcmeError>;
    /// The key authorization for `token`, read fresh: a replica must answer
    /// for a token another replica's issuer wrote a moment ago.
    async fn challenge(&self, token: &str) -> Result<Option<String>, AcmeError>;
    /// Every challenge in flight, (token, value), read fresh: the DNS-01
    /// ones are what the fleet's DNS server answers (super::dns01).
    async fn challenges(&self) -> Result<Vec<(String, String)>, AcmeError>;
    /// Stores `host`'s key and chain; `owner` is the Ingress that asked
    /// (kube mode keeps the certificate in its namespace).
    async fn put_certificate(
        &self,
        host: &str,
        owner: &AcmeHost,
        pem: &str,
    ) -> Result<(), AcmeError>;
    async fn put_record(
        &self,
        host: &str,
        owner: &AcmeHost,
        record: &HostRecord,
    ) -> Result<(), AcmeError>;
    /// Forgets a host's certificate and record.
    async fn remove_host(&self, host: &str) -> Result<(), AcmeError>;
    async fn load_hosts(&self) -> Result<Vec<StoredHost>, AcmeError>;
    /// A directory whose changes mean "reload" (inotify).
    fn watch_path(&self) -> Option<PathBuf> {
        None
    }
    /// A counter that moves when the store changed (kube mode's watch), in
    /// place of [`AcmeStore::watch_path`].
    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// HTTP-01 tokens are base64url (RFC 8555 §8.3); anything else is not ours
/// and must never become a file name.
pub fn valid_token(token: &str) -> bool {
    (1..=256).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Compiled hosts are validated lowercase DNS names already; this keeps a
/// file name from ever escaping its directory regardless.
pub fn valid_host(host: &str) -> bool {
    (1..=253).contains(&host.len())
        && !host.starts_with('.')
        && !host.contains("..")
        && host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// The state directory of manifests mode:
///
/// ```text
/// STATE/issuer.lock            flock(2)ed by the one issuer
/// STATE/account.json           ACME account: directory URL and key (0600)
/// STATE/challenges/<token>     key authorizations of orders in flight
/// STATE/hosts/<host>.pem       private key + chain (0600)
/// STATE/hosts/<host>.json      last attempt (failures, backoff)
/// STATE/tmp/                   staging for atomic writes (same filesystem)
/// ```
///
/// Every write goes to `tmp/` and is renamed into place, so a replica never
/// reads half a file.
#[derive(Debug)]
pub struct DirStore {
    root: PathBuf,
}

/// The flock(2) on `issuer.lock`; the kernel drops it when the process
/// dies, so a crashed issuer never blocks the fleet.
#[derive(Debug)]
struct DirLock {
    _file: std::fs::File,
}

#[async_trait]
impl Leadership for DirLock {
    fn held(&self) -> bool {
        true
    }
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> AcmeError {
    AcmeError::Store(format!("{what} {}: {e}", path.display()))
}

impl DirStore {
    /// Opens (creating if needed, mode 0700) the state directory.
    pub fn open(root: &Path) -> Result<DirStore, AcmeError> {
        for dir in [
            root.to_path_buf(),
            root.join("challenges"),
            root.join("hosts"),
            root.join("tmp"),
        ] {
            std::fs::create_dir_all(&dir).map_err(|e| io_err("creating", &dir, e))?;
        }
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io_err("setting permissions of", root, e))?;
        Ok(DirStore {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn host_file(&self, host: &str, ext: &str) -> Result<PathBuf, AcmeError> {
        if !valid_host(host) {
            return Err(AcmeError::Store(format!("invalid host name {host:?}")));
        }
        Ok(self.root.join("hosts").join(format!("{host}.{ext}")))
    }

    fn challenge_file(&self, token: &str) -> Result<PathBuf, AcmeError> {
        if !valid_token(token) {
            return Err(AcmeError::Store(format!("invalid token {token:?}")));
        }
        Ok(self.root.join("challenges").join(token))
    }

    /// Writes `data` to `path` atomically (temp file in `tmp/`, fsync,
    /// rename), readable by the owner only.
    async fn write_atomic(&self, path: PathBuf, data: Vec<u8>) -> Result<(), AcmeError> {
        let tmp_dir = self.root.join("tmp");
        blocking(move || {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let tmp = tmp_dir.join(format!(
                "{}.{}.{}",
                name.unwrap_or_default(),
                std::process::id(),
                rand::random::<u32>()
            ));
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(|e| io_err("creating", &tmp, e))?;
            file.write_all(&data)
                .and_then(|()| file.sync_all())
                .map_err(|e| io_err("writing", &tmp, e))?;
            std::fs::rename(&tmp, &path).map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                io_err("renaming into", &path, e)
            })
        })
        .await
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, AcmeError> + Send + 'static,
) -> Result<T, AcmeError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| AcmeError::Store(format!("blocking task failed: {e}")))?
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, AcmeError> {
    match std::fs::read(path) {
        Ok(data) => Ok(Some(data)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("reading", path, e)),
    }
}

fn remove_optional(path: &Path) -> Result<(), AcmeError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err("removing", path, e)),
        _ => Ok(()),
    }
}

#[async_trait]
impl AcmeStore for DirStore {
    async fn try_lead(&self) -> Result<Option<Box<dyn Leadership>>, AcmeError> {
        let path = self.root.join("issuer.lock");
        blocking(move || {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| io_err("opening", &path, e))?;
            match file.try_lock() {
                Ok(()) => Ok(Some(
                    Box::new(DirLock { _file: file }) as Box<dyn Leadership>
                )),
                Err(std::fs::TryLockError::WouldBlock) => Ok(None),
                Err(std::fs::TryLockError::Error(e)) => Err(io_err("locking", &path, e)),
            }
        })
        .await
    }

    async fn load_account(&self) -> Result<Option<Vec<u8>>, AcmeError> {
        let path = self.root.join("account.json");
        blocking(move || read_optional(&path)).await
    }

    async fn save_account(&self, data: &[u8]) -> Result<(), AcmeError> {
        self.write_atomic(self.root.join("account.json"), data.to_vec())
            .await
    }

    async fn put_challenge(&self, token: &str, key_authorization: &str) -> Result<(), AcmeError> {
        let path = self.challenge_file(token)?;
        self.write_atomic(path, key_authorization.as_bytes().to_vec())
            .await
    }

    async fn remove_challenge(&self, token: &str) -> Result<(), AcmeError> {
        let path = self.challenge_file(token)?;
        blocking(move || remove_optional(&path)).await
    }

    async fn clear_challenges(&self) -> Result<(), AcmeError> {
        let dir = self.root.join("challenges");
        blocking(move || {
            let entries = std::fs::read_dir(&dir).map_err(|e| io_err("listing", &dir, e))?;
            for entry in entries.flatten() {
                remove_optional(&entry.path())?;
            }
            Ok(())
        })
        .await
    }

    async fn challenge(&self, token: &str) -> Result<Option<String>, AcmeError> {
        let path = self.challenge_file(token)?;
        let data = tokio::fs::read(&path).await;
        match data {
            Ok(d) => Ok(Some(String::from_utf8_lossy(&d).into_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("reading", &path, e)),
        }
    }

    async fn challenges(&self) -> Result<Vec<(String, String)>, AcmeError> {
        let dir = self.root.join("challenges");
        blocking(move || {
            let entries = std::fs::read_dir(&dir).map_err(|e| io_err("listing", &dir, e))?;
            let mut out = Vec::new();
            for entry in entries.flatten() {
                let Some(token) = entry.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                // Gone between the listing and the read: finished meanwhile.
                if let Ok(value) = std::fs::read_to_string(entry.path()) {
                    out.push((token, value));
                }
            }
            Ok(out)
        })
        .await
    }

    async fn put_certificate(
        &self,
        host: &str,
        _owner: &AcmeHost,
        pem: &str,
    ) -> Result<(), AcmeError> {
        let path = self.host_file(host, "pem")?;
        self.write_atomic(path, pem.as_bytes().to_vec()).await
    }

    async fn put_record(
        &self,
        host: &str,
        _owner: &AcmeHost,
        record: &HostRecord,
    ) -> Result<(), AcmeError> {
        let path = self.host_file(host, "json")?;
        let data = serde_json::to_vec_pretty(record)
            .map_err(|e| AcmeError::Store(format!("encoding the record of {host}: {e}")))?;
        self.write_atomic(path, data).await
    }

    async fn remove_host(&self, host: &str) -> Result<(), AcmeError> {
        let pem = self.host_file(host, "pem")?;
        let json = self.host_file(host, "json")?;
        blocking(move || {
            remove_optional(&pem)?;
            remove_optional(&json)
        })
        .await
    }

    async fn load_hosts(&self) -> Result<Vec<StoredHost>, AcmeError> {
        let dir = self.root.join("hosts");
        blocking(move || {
            let mut hosts: std::collections::BTreeMap<String, StoredHost> = Default::default();
            let entries = std::fs::read_dir(&dir).map_err(|e| io_err("listing", &dir, e))?;
            for entry in entries.flatten() {
                let path = entry.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                    continue;
                };
                let Some((host, ext)) = name.rsplit_once('.') else {
                    continue;
                };
                if !valid_host(host) || !(ext == "pem" || ext == "json") {
                    continue;
                }
                // A file removed between listing and reading is simply gone.
                let Some(data) = read_optional(&path)? else {
                    continue;
                };
                let slot = hosts.entry(host.to_string()).or_insert_with(|| StoredHost {
                    host: host.to_string(),
                    ..StoredHost::default()
                });
                if ext == "pem" {
                    slot.pem = Some(String::from_utf8_lossy(&data).into_owned());
                } else {
                    match serde_json::from_slice(&data) {
                        Ok(record) => slot.record = Some(record),
                        Err(e) => tracing::warn!(file = %path.display(), error = %e, "ignoring unreadable ACME host record"),
                    }
                }
            }
            Ok(hosts.into_values().collect())
        })
        .await
    }

    fn watch_path(&self) -> Option<PathBuf> {
        Some(self.root.join("hosts"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_hosts_never_escape() {
        assert!(valid_token("abc-DEF_123"));
        for bad in ["", "../x", "a/b", "a.b", "a b", &"x".repeat(257)] {
            assert!(!valid_token(bad), "{bad}");
        }
        assert!(valid_host("www.example.com"));
        for bad in ["", ".x", "a..b", "A.com", "a/b", "*.example.com"] {
            assert!(!valid_host(bad), "{bad}");
        }
    }

    #[tokio::test]
    async fn one_issuer_per_directory_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let a = DirStore::open(dir.path()).unwrap();
        let b = DirStore::open(dir.path()).unwrap();
        let lead = a.try_lead().await.unwrap();
        assert!(lead.is_some());
        assert!(
            b.try_lead().await.unwrap().is_none(),
            "second issuer refused"
        );
        drop(lead);
        assert!(b.try_lead().await.unwrap().is_some(), "released on drop");

        a.put_challenge("tok", "tok.thumb").await.unwrap();
        assert_eq!(
            b.challenge("tok").await.unwrap().as_deref(),
            Some("tok.thumb")
        );
        assert!(b.challenge("../etc").await.is_err());
        a.clear_challenges().await.unwrap();
        assert_eq!(b.challenge("tok").await.unwrap(), None);

        a.put_certificate("a.example", &AcmeHost::default(), "PEM")
            .await
            .unwrap();
        let record = HostRecord {
            failures: 2,
            ..HostRecord::default()
        };
        a.put_record("a.example", &AcmeHost::default(), &record)
            .await
            .unwrap();
        let hosts = b.load_hosts().await.unwrap();
        assert_eq!(hosts.len(), 1);
        assert_eq!(hosts[0].pem.as_deref(), Some("PEM"));
        assert_eq!(hosts[0].record.as_ref(), Some(&record));
        let mode = std::fs::metadata(dir.path().join("hosts/a.example.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(
            std::fs::read_dir(dir.path().join("tmp"))
                .unwrap()
                .next()
                .is_none()
        );
        a.remove_host("a.example").await.unwrap();
        assert!(b.load_hosts().await.unwrap().is_empty());
    }
}
