//! Which HTTPS listener of the shared socket a host name selects, by the
//! specification's listener hostname rules (exact, then the longest
//! wildcard suffix, then the catch-all), and the certificates each
//! listener serves: what the 421 check (crate::plane::tls::SniResolver::misdirected)
//! compares the SNI's and the Host's by.

use std::sync::Arc;

use rustls::sign::CertifiedKey;
use teapot_api::HostPattern;

use super::FastMap;

/// The HTTPS listeners of the shared socket by the host patterns they
/// select, each a number of this table.
#[derive(Debug, Default)]
pub struct HttpsListeners {
    exact: FastMap<u32>,
    /// `*.foo.com` stored as `foo.com`; any depth below it matches.
    wildcard: FastMap<u32>,
    max_wildcard: usize,
    any: Option<u32>,
    /// Each listener's certificates, by number.
    certs: Vec<Box<[Arc<CertifiedKey>]>>,
}

impl HttpsListeners {
    /// A new listener serving `certs`; its number.
    pub fn listener(&mut self, certs: Vec<Arc<CertifiedKey>>) -> u32 {
        self.certs.push(certs.into());
        u32::try_from(self.certs.len() - 1).unwrap_or(u32::MAX)
    }

    /// `host` (`None`: any host) selects `listener`, unless another
    /// listener took that pattern first (callers add the oldest first).
    pub fn add(&mut self, host: Option<&HostPattern>, listener: u32) {
        match host {
            None => {
                self.any.get_or_insert(listener);
            }
            Some(HostPattern::Exact(h)) => {
                self.exact.entry(h.as_str().into()).or_insert(listener);
            }
            Some(HostPattern::Wildcard(s)) => {
                self.max_wildcard = self.max_wildcard.max(s.len());
                self.wildcard.entry(s.as_str().into()).or_insert(listener);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }

    /// The listener a normalised name selects (`None` as the name: a
    /// handshake without SNI, which only the catch-all takes).
    pub fn select(&self, name: Option<&str>) -> Option<u32> {
        let Some(name) = name else {
            return self.any;
        };
        if let Some(l) = self.exact.get(name) {
            return Some(*l);
        }
        if !self.wildcard.is_empty() {
            let mut rest = name;
            while let Some((first, parent)) = rest.split_once('.') {
                if !first.is_empty()
                    && parent.len() <= self.max_wildcard
                    && let Some(l) = self.wildcard.get(parent)
                {
                    return Some(*l);
                }
                rest = parent;
            }
        }
        self.any
    }

    /// The certificate `listener` serves a name no other names (its first).
    pub fn certificate(&self, listener: u32) -> Option<&Arc<CertifiedKey>> {
        self.certs.get(listener as usize)?.first()
    }

    /// Whether `cert` is one of `listener`'s certificates.
    pub fn serves(&self, listener: u32, cert: &Arc<CertifiedKey>) -> bool {
        self.certs
            .get(listener as usize)
            .is_some_and(|c| c.iter().any(|k| Arc::ptr_eq(k, cert)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_model::certificate::TlsCertificate;

    /// The listeners of upstream's HTTPRouteHTTPSListenerDetectMisdirectedRequests:
    /// exact beats wildcard (at any depth) beats the catch-all.
    #[test]
    fn a_name_selects_the_most_specific_listener() {
        let key = TlsCertificate::self_signed_default().unwrap().key;
        let mut l = HttpsListeners::default();
        assert_eq!(l.select(Some("example.org")), None);
        let any = l.listener(vec![key.clone()]);
        let exact = l.listener(vec![key.clone()]);
        let wild = l.listener(Vec::new());
        let wild_exact = l.listener(Vec::new());
        l.add(None, any);
        l.add(
            Some(&HostPattern::parse("second-example.org").unwrap()),
            exact,
        );
        l.add(Some(&HostPattern::parse("*.wildcard.org").unwrap()), wild);
        let fourth = HostPattern::parse("fourth-example.wildcard.org").unwrap();
        l.add(Some(&fourth), wild_exact);
        // Taken first: another listener with the same pattern does not move it.
        l.add(Some(&fourth), any);
        assert_eq!(l.select(Some("example.org")), Some(any));
        assert_eq!(l.select(Some("unknown-example.org")), Some(any));
        assert_eq!(l.select(None), Some(any));
        assert_eq!(l.select(Some("second-example.org")), Some(exact));
        assert_eq!(l.select(Some("third-example.wildcard.org")), Some(wild));
        assert_eq!(l.select(Some("a.b.wildcard.org")), Some(wild));
        assert_eq!(l.select(Some("wildcard.org")), Some(any));
        assert_eq!(
            l.select(Some("fourth-example.wildcard.org")),
            Some(wild_exact)
        );
        assert!(l.serves(any, &key) && l.serves(exact, &key));
        assert!(Arc::ptr_eq(l.certificate(any).unwrap(), &key));
        assert!(l.certificate(wild).is_none());
        assert!(!l.serves(wild, &key) && !l.serves(99, &key));
    }
}
