//! The webhook's serving certificate, read from two PEM files and reloaded
//! when they change (cert-manager and Kubernetes Secret volumes replace
//! them in place, through a symlink swap).
//!
//! The files are re-read on a short interval and compared byte for byte;
//! a new pair is used from the next handshake once it parses and the key
//! matches. A half-written pair (certificate replaced, key not yet) fails
//! that check and the previous certificate keeps serving.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use teapot_model::certificate::TlsCertificate;
use tokio::sync::watch;

use crate::Error;
use crate::metrics::Metrics;

/// A [`ResolvesServerCert`] that serves the current pair of files.
#[derive(Debug)]
pub struct CertReloader {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: ArcSwap<CertifiedKey>,
    /// The bytes last tried, so an unchanged (or unchanged broken) pair is
    /// not parsed or logged again.
    last: Mutex<(Vec<u8>, Vec<u8>)>,
}

fn read_pair(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let read = |p: &Path| {
        std::fs::read(p)
            .map_err(|e| Error::Certificate(format!("cannot read {}: {e}", p.display())))
    };
    Ok((read(cert)?, read(key)?))
}

fn parse(cert: &[u8], key: &[u8]) -> Result<Arc<CertifiedKey>, Error> {
    TlsCertificate::from_pem(cert, key)
        .map(|c| c.key)
        .map_err(|e| Error::Certificate(e.to_string()))
}

impl CertReloader {
    /// Reads the pair; fails if it is unusable (the webhook cannot start
    /// without a certificate).
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Arc<CertReloader>, Error> {
        let (cert, key) = read_pair(cert_path, key_path)?;
        let current = parse(&cert, &key)?;
        Ok(Arc::new(CertReloader {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            current: ArcSwap::new(current),
            last: Mutex::new((cert, key)),
        }))
    }

    /// Re-reads the files; returns `Ok(true)` when a new pair was swapped
    /// in, `Ok(false)` when nothing changed, and the error when the files
    /// changed but are not usable (the previous pair keeps serving).
    pub fn reload_if_changed(&self) -> Result<bool, Error> {
        let (cert, key) = read_pair(&self.cert_path, &self.key_path)?;
        let mut last = self.last.lock();
        if last.0 == cert && last.1 == key {
            return Ok(false);
        }
        let parsed = parse(&cert, &key);
        *last = (cert, key);
        self.current.store(parsed?);
        Ok(true)
    }

    /// The certificate being served.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }

    /// Reloads every `interval` until `shutdown` turns true.
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        metrics: Metrics,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.changed() => if *shutdown.borrow() { return },
                _ = tick.tick() => {}
            }
            let me = self.clone();
            match tokio::task::spawn_blocking(move || me.reload_if_changed()).await {
                Ok(Ok(true)) => {
                    metrics.cert_reloads.inc();
                    tracing::info!(cert = %self.cert_path.display(), "serving certificate reloaded");
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    metrics.cert_reload_failures.inc();
                    tracing::warn!(error = %e, "new certificate files are not usable; the previous certificate keeps serving");
                }
                Err(e) => tracing::error!(error = %e, "certificate reload task failed"),
            }
        }
    }
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_testkit::certs::self_signed;

    #[test]
    fn reloads_only_good_changes() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let a = self_signed(&["webhook.a"]);
        std::fs::write(&c, &a.cert_pem).unwrap();
        std::fs::write(&k, &a.key_pem).unwrap();
        let r = CertReloader::load(&c, &k).unwrap();
        let first = r.current();
        assert!(!r.reload_if_changed().unwrap());
        let b = self_signed(&["webhook.b"]);
        // Half-way through a rotation: new certificate, old key.
        std::fs::write(&c, &b.cert_pem).unwrap();
        assert!(r.reload_if_changed().is_err());
        assert!(Arc::ptr_eq(&first, &r.current()));
        std::fs::write(&k, &b.key_pem).unwrap();
        assert!(r.reload_if_changed().unwrap());
        assert_eq!(r.current().cert[0].as_ref(), b.cert_der.as_slice());
        assert!(CertReloader::load(&c, &dir.path().join("missing")).is_err());
    }
}
