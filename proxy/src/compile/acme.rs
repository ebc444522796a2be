//! What the compile knows of ACME, as data: which hosts opted in
//! ([`AcmeHosts`], an output of the compile) and where each host's
//! certificate stands ([`HostStatus`], an input the ACME loop hands over).
//! The issuer and its store live in `crate::loops::acme`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

use crate::compile::condition::Condition;

/// The path prefix HTTP-01 validation requests use (RFC 8555 §8.3).
pub const CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// The annotation that opts an Ingress in or out.
pub const ANNOTATION: &str = "teapot.dev/acme";

/// The hosts of a snapshot that get certificates from ACME, with the
/// Ingress that asked (the oldest, if several did).
#[derive(Debug, Default)]
pub struct AcmeHosts {
    hosts: BTreeMap<Box<str>, AcmeHost>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AcmeHost {
    pub namespace: String,
    pub ingress: String,
    /// The `spec.tls[].secretName` kube mode stores the certificate under,
    /// when the compile found one that is this host's alone (see
    /// `crate::loops::acme::kube_store`); `None`: `teapot-acme-<host>`.
    pub secret: Option<String>,
}

impl AcmeHosts {
    /// First insert wins (the compile inserts oldest first).
    pub fn insert(&mut self, host: &str, namespace: &str, ingress: &str) -> bool {
        self.insert_with_secret(host, namespace, ingress, None)
    }

    pub fn insert_with_secret(
        &mut self,
        host: &str,
        namespace: &str,
        ingress: &str,
        secret: Option<&str>,
    ) -> bool {
        if self.hosts.contains_key(host) {
            return false;
        }
        self.hosts.insert(
            host.into(),
            AcmeHost {
                namespace: namespace.to_string(),
                ingress: ingress.to_string(),
                secret: secret.map(str::to_string),
            },
        );
        true
    }

    /// Hosts and their owners, sorted by host.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &AcmeHost)> {
        self.hosts.iter().map(|(h, o)| (&**h, o))
    }

    /// Sorted, so the issuer works in a stable order.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.hosts.keys().map(|h| &**h)
    }

    pub fn get(&self, host: &str) -> Option<&AcmeHost> {
        self.hosts.get(host)
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
}

/// With DNS-01 wildcards (`--dns-acme-wildcards`), the certificate that
/// serves `host`: `CLUSTER.ZONE` (whose certificate names `*.CLUSTER.ZONE`
/// and `CLUSTER.ZONE`) when `host` is exactly one label below a name one
/// label below `zone`, as every assigned hostname `INGRESS.CLUSTER.lb.DOMAIN`
/// is; `None` for any other host (HTTP-01, a certificate of its own).
pub fn wildcard_parent<'h>(host: &'h str, zone: &str) -> Option<&'h str> {
    let (_, parent) = host.split_once('.')?;
    let cluster = parent.strip_suffix(zone)?.strip_suffix('.')?;
    (!cluster.is_empty() && !cluster.contains('.')).then_some(parent)
}

/// Whether `key` is a wildcard certificate's key (`CLUSTER.ZONE`).
pub fn is_wildcard_key(key: &str, zone: &str) -> bool {
    key.strip_suffix(zone)
        .and_then(|c| c.strip_suffix('.'))
        .is_some_and(|c| !c.is_empty() && !c.contains('.'))
}

/// What the issuer orders for `hosts`: with `zone`, one key per tenant
/// cluster (`CLUSTER.ZONE`, owned by its first host's Ingress and kept
/// under its own name, never an Ingress's `secretName`) in place of its
/// assigned hostnames; every other host as it is.
pub fn certificate_keys(hosts: &AcmeHosts, zone: Option<&str>) -> AcmeHosts {
    let mut keys = AcmeHosts::default();
    for (host, owner) in hosts.iter() {
        match zone.and_then(|z| wildcard_parent(host, z)) {
            Some(cluster) => {
                keys.insert(cluster, &owner.namespace, &owner.ingress);
            }
            None => {
                keys.insert_with_secret(
                    host,
                    &owner.namespace,
                    &owner.ingress,
                    owner.secret.as_deref(),
                );
            }
        }
    }
    keys
}

/// Where one host stands, as metrics and the `CertificateReady` condition
/// show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CertState {
    /// No certificate yet, no failure yet.
    Pending,
    /// A certificate that is not due for renewal.
    Issued,
    /// Past two thirds of its lifetime (renewal due or failing) but still
    /// serving.
    Expiring,
    /// No usable certificate and the last attempt failed.
    Failed,
}

impl CertState {
    pub const ALL: [CertState; 4] = [
        CertState::Pending,
        CertState::Issued,
        CertState::Expiring,
        CertState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CertState::Pending => "pending",
            CertState::Issued => "issued",
            CertState::Expiring => "expiring",
            CertState::Failed => "failed",
        }
    }
}

/// A host's state and a message that stays the same until something
/// changes (it becomes a condition, and a changed condition recompiles).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostStatus {
    pub state: CertState,
    pub message: String,
}

/// The `CertificateReady` condition of an Ingress with ACME hosts: True
/// when each has a certificate that serves (issued or expiring), the reason
/// is the worst state, the message lists each host.
pub fn condition(states: &HashMap<String, HostStatus>, hosts: &[String]) -> Condition {
    let pending = HostStatus {
        state: CertState::Pending,
        message: "waiting for the first certificate".into(),
    };
    let mut worst = CertState::Issued;
    let mut parts = Vec::with_capacity(hosts.len());
    for host in hosts {
        let s = states.get(host).unwrap_or(&pending);
        let rank = |s: CertState| match s {
            CertState::Issued => 0,
            CertState::Expiring => 1,
            CertState::Pending => 2,
            CertState::Failed => 3,
        };
        if rank(s.state) > rank(worst) {
            worst = s.state;
        }
        parts.push(format!("{host}: {} ({})", s.state.as_str(), s.message));
    }
    let (ok, reason) = match worst {
        CertState::Issued => (true, "Issued"),
        CertState::Expiring => (true, "Expiring"),
        CertState::Pending => (false, "Pending"),
        CertState::Failed => (false, "Failed"),
    };
    Condition::new("CertificateReady", ok, reason, parts.join("; "))
}

/// The ACME input of a compile: whether tenants opt in by default, and the
/// per-host states at the time of the compile.
#[derive(Clone, Debug, Default)]
pub struct AcmeInputs {
    pub default_tenants: bool,
    pub states: Arc<HashMap<String, HostStatus>>,
}

impl AcmeInputs {
    /// Whether an Ingress gets ACME certificates: its annotation decides,
    /// else the operator's default for tenant namespaces.
    pub fn opted_in(&self, annotation: Option<&str>, tenant_namespace: bool) -> bool {
        match annotation {
            Some(v) => v == "true",
            None => tenant_namespace && self.default_tenants,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condition_reports_the_worst_host() {
        let mut states = HashMap::new();
        states.insert(
            "a.example".to_string(),
            HostStatus {
                state: CertState::Issued,
                message: "ok".into(),
            },
        );
        let c = condition(&states, &["a.example".into()]);
        assert_eq!((c.status, c.reason), ("True", "Issued"));
        let c = condition(&states, &["a.example".into(), "b.example".into()]);
        assert_eq!((c.status, c.reason), ("False", "Pending"));
        assert!(c.message.contains("b.example: pending"), "{}", c.message);
    }

    #[test]
    fn assigned_hostnames_map_to_their_clusters_wildcard() {
        let zone = "lb.example.net";
        assert_eq!(
            wildcard_parent("web-shop.acme.lb.example.net", zone),
            Some("acme.lb.example.net")
        );
        assert_eq!(wildcard_parent("acme.lb.example.net", zone), None);
        assert_eq!(wildcard_parent("a.b.acme.lb.example.net", zone), None);
        assert_eq!(wildcard_parent("www.shop.example", zone), None);
        assert_eq!(wildcard_parent("web.acmelb.example.net", zone), None);
        assert!(is_wildcard_key("acme.lb.example.net", zone));
        assert!(!is_wildcard_key("web.acme.lb.example.net", zone));
        let mut hosts = AcmeHosts::default();
        hosts.insert_with_secret(
            "web-shop.acme.lb.example.net",
            "tenant-acme",
            "web.shop",
            Some("web-tls"),
        );
        hosts.insert("api-shop.acme.lb.example.net", "tenant-acme", "api.shop");
        hosts.insert("www.shop.example", "tenant-acme", "web.shop");
        let keys = certificate_keys(&hosts, Some(zone));
        let listed: Vec<&str> = keys.hosts().collect();
        assert_eq!(listed, ["acme.lb.example.net", "www.shop.example"]);
        let owner = keys.get("acme.lb.example.net").unwrap();
        assert_eq!(owner.ingress, "api.shop", "the first host, sorted");
        assert_eq!(owner.secret, None, "never an Ingress's secretName");
        assert_eq!(certificate_keys(&hosts, None).len(), 3);
    }

    #[test]
    fn opt_in_annotation_beats_the_default() {
        let inputs = AcmeInputs {
            default_tenants: true,
            ..AcmeInputs::default()
        };
        assert!(inputs.opted_in(None, true));
        assert!(!inputs.opted_in(None, false));
        assert!(!inputs.opted_in(Some("false"), true));
        assert!(inputs.opted_in(Some("true"), false));
    }
}
