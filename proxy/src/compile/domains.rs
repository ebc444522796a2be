//! Custom domains as the compile sees them: the claims it finds (its
//! output, for the prover) and the proof results it routes by (its input,
//! as data). The DNS checks are `crate::loops::proof`'s.

use std::collections::HashMap;

use serde::Serialize;

/// A tenant's claim on a custom host, as the compile found it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Claim {
    pub cluster: String,
    pub host: String,
    /// Expected TXT value at `_teapot.<host>`.
    pub token: String,
    /// The tenant's assigned hostnames: acceptable CNAME targets.
    pub targets: Vec<String>,
}

/// One proof result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proof {
    /// Whether the claimant may route the host now.
    pub routed: bool,
    /// What the last check found, for status messages.
    pub detail: String,
}

/// Proof results by (cluster, host), taken before a compile.
#[derive(Clone, Debug, Default)]
pub struct ProofResults {
    results: HashMap<(String, String), Proof>,
}

impl ProofResults {
    pub fn insert(&mut self, cluster: &str, host: &str, proof: Proof) {
        self.results
            .insert((cluster.to_string(), host.to_string()), proof);
    }

    fn get(&self, cluster: &str, host: &str) -> Option<&Proof> {
        // A borrowed (cluster, host) key would need a custom Borrow; the
        // compile asks once per claimed host.
        self.results.get(&(cluster.to_string(), host.to_string()))
    }

    /// Whether `cluster` may route `host` now.
    pub fn is_proven(&self, cluster: &str, host: &str) -> bool {
        self.get(cluster, host).is_some_and(|p| p.routed)
    }

    /// What the last check found, for status messages.
    pub fn detail(&self, cluster: &str, host: &str) -> Option<String> {
        self.get(cluster, host).map(|p| p.detail.clone())
    }
}
