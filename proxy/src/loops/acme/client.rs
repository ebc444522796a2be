//! The HTTP client instant-acme talks through: hyper-rustls on ring, with
//! either the platform's trust store or an operator-given root (private CAs,
//! pebble in tests).
//!
//! It exists because instant-acme turns a refused request into a `Problem`
//! without the response's `Retry-After`; this wrapper keeps the last
//! `Retry-After` of a 429/503 answer so the issuer can honour it.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Request, StatusCode, header::RETRY_AFTER};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};
use parking_lot::Mutex;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::AcmeError;

/// The last `Retry-After` the CA sent with a refusal, taken by the issuer.
pub type RetryAfterSlot = Arc<Mutex<Option<SystemTime>>>;

pub struct AcmeHttp {
    inner: Client<hyper_rustls::HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>,
    retry_after: RetryAfterSlot,
}

impl AcmeHttp {
    /// `root`: a PEM file of CA certificates to trust instead of the
    /// platform's (for a private ACME CA).
    pub fn new(root: Option<&Path>, retry_after: RetryAfterSlot) -> Result<AcmeHttp, AcmeError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let builder = match root {
            Some(path) => {
                let mut roots = rustls::RootCertStore::empty();
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| {
                        AcmeError::Config(format!("--acme-root {}: {e}", path.display()))
                    })?;
                if certs.is_empty() {
                    return Err(AcmeError::Config(format!(
                        "--acme-root {}: no PEM certificate in the file",
                        path.display()
                    )));
                }
                for cert in certs {
                    roots.add(cert).map_err(|e| {
                        AcmeError::Config(format!("--acme-root {}: {e}", path.display()))
                    })?;
                }
                let config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| AcmeError::Config(e.to_string()))?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                builder.with_tls_config(config)
            }
            None => builder
                .with_provider_and_platform_verifier(provider)
                .map_err(|e| AcmeError::Config(format!("platform trust store: {e}")))?,
        };
        let connector = builder.https_only().enable_http1().enable_http2().build();
        let inner = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(AcmeHttp { inner, retry_after })
    }
}

impl HttpClient for AcmeHttp {
    fn request(
        &self,
        req: Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let fut = self.inner.request(req);
        let slot = self.retry_after.clone();
        Box::pin(async move {
            let rsp = fut
                .await
                .map_err(|e| instant_acme::Error::Other(Box::new(e)))?;
            if matches!(
                rsp.status(),
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
            ) && let Some(at) = rsp
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after)
            {
                *slot.lock() = Some(at);
            }
            Ok(BytesResponse::from(rsp))
        })
    }
}

/// `Retry-After`: delay-seconds or an HTTP date (RFC 9110 §10.2.3).
pub fn parse_retry_after(value: &str) -> Option<SystemTime> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(SystemTime::now() + Duration::from_secs(secs));
    }
    httpdate::parse_http_date(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        let soon = parse_retry_after("120").unwrap();
        let d = soon.duration_since(SystemTime::now()).unwrap();
        assert!(d > Duration::from_secs(100) && d <= Duration::from_secs(120));
        let date = parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(
            date.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            1445412480
        );
        assert!(parse_retry_after("soon").is_none());
    }
}
