//! Custom-domain ownership proofs (docs/architecture.md, "Hostnames and hosts").
//!
//! A tenant may route a host outside its own zone and its granted domains
//! only after DNS shows the domain's owner meant it: a CNAME from the host
//! to one of the tenant's assigned hostnames, or a TXT record
//! `_teapot.<host>` holding the tenant's verification token. The
//! [`DomainProver`] checks every claimed host with a real resolver,
//! re-checks periodically, and keeps a lost proof for a grace period (a DNS
//! outage must not take sites down). Compiles read the [`ProofBook`]; a
//! change in any proof triggers a recompile.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::RwLock;
use std::time::{Duration, Instant};

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use tokio::sync::watch;

pub use crate::compile::domains::Claim;
use crate::compile::domains::{Proof, ProofResults};

/// How often proofs are checked.
#[derive(Clone, Debug)]
pub struct ProofTiming {
    /// Re-check interval for a proven host.
    pub recheck_proven: Duration,
    /// Re-check interval for a host not (yet) proven.
    pub recheck_pending: Duration,
    /// How long a proven host keeps routing after its proof disappears.
    pub grace: Duration,
}

impl Default for ProofTiming {
    fn default() -> Self {
        ProofTiming {
            recheck_proven: Duration::from_secs(300),
            recheck_pending: Duration::from_secs(15),
            grace: Duration::from_secs(3600),
        }
    }
}

#[derive(Clone, Debug)]
struct ProofState {
    routed: bool,
    last_success: Option<Instant>,
    next_check: Instant,
    detail: String,
}

/// Proof results, read by every compile.
#[derive(Debug, Default)]
pub struct ProofBook {
    states: RwLock<HashMap<(String, String), ProofState>>,
}

impl ProofBook {
    /// Whether `cluster` may route `host` now.
    pub fn is_proven(&self, cluster: &str, host: &str) -> bool {
        self.read(cluster, host).is_some_and(|s| s.routed)
    }

    /// What the last check found, for status messages.
    pub fn detail(&self, cluster: &str, host: &str) -> Option<String> {
        self.read(cluster, host).map(|s| s.detail)
    }

    fn read(&self, cluster: &str, host: &str) -> Option<ProofState> {
        let states = self.states.read();
        states
            .get(&(cluster.to_string(), host.to_string()))
            .cloned()
    }

    /// The results as the next compile reads them.
    pub fn results(&self) -> ProofResults {
        let states = self.states.read();
        let mut out = ProofResults::default();
        for ((cluster, host), s) in states.iter() {
            out.insert(
                cluster,
                host,
                Proof {
                    routed: s.routed,
                    detail: s.detail.clone(),
                },
            );
        }
        out
    }

    /// Records a check; returns whether routing changed.
    fn record(&self, claim: &Claim, result: Result<String, String>, timing: &ProofTiming) -> bool {
        let now = Instant::now();
        let mut states = self.states.write();
        let key = (claim.cluster.clone(), claim.host.clone());
        let previous = states.get(&key).cloned();
        let was_routed = previous.as_ref().is_some_and(|s| s.routed);
        let state = match result {
            Ok(how) => ProofState {
                routed: true,
                last_success: Some(now),
                next_check: now + timing.recheck_proven,
                detail: how,
            },
            Err(why) => {
                let last_success = previous.and_then(|s| s.last_success);
                let in_grace = last_success.is_some_and(|t| now.duration_since(t) < timing.grace);
                ProofState {
                    routed: in_grace,
                    last_success,
                    next_check: now + timing.recheck_pending,
                    detail: if in_grace {
                        format!("{why} (still routed during the grace period)")
                    } else {
                        why
                    },
                }
            }
        };
        let changed = state.routed != was_routed;
        states.insert(key, state);
        changed
    }

    fn due(&self, claim: &Claim, now: Instant) -> bool {
        self.read(&claim.cluster, &claim.host)
            .is_none_or(|s| s.next_check <= now)
    }

    /// Forgets hosts nobody claims any more.
    fn retain(&self, claims: &[Claim]) {
        let mut states = self.states.write();
        states.retain(|(cluster, host), _| {
            claims
                .iter()
                .any(|c| &c.cluster == cluster && &c.host == host)
        });
    }
}

/// Checks claims against DNS.
#[derive(Clone)]
pub struct DomainProver {
    resolver: TokioResolver,
    book: Arc<ProofBook>,
    timing: ProofTiming,
}

impl std::fmt::Debug for DomainProver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DomainProver")
            .field("timing", &self.timing)
            .finish()
    }
}

/// Why a resolver could not be built.
#[derive(Debug, thiserror::Error)]
#[error("DNS resolver: {0}")]
pub struct ResolverError(String);

impl DomainProver {
    /// A prover using `servers` (UDP and TCP), or the system's resolvers
    /// when `servers` is empty.
    pub fn new(
        servers: &[SocketAddr],
        book: Arc<ProofBook>,
        timing: ProofTiming,
    ) -> Result<DomainProver, ResolverError> {
        let err = |e: &dyn std::fmt::Display| ResolverError(e.to_string());
        let mut builder = if servers.is_empty() {
            TokioResolver::builder_tokio().map_err(|e| err(&e))?
        } else {
            let mut config = ResolverConfig::from_parts(None, Vec::new(), Vec::new());
            for server in servers {
                let mut udp = ConnectionConfig::udp();
                udp.port = server.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = server.port();
                config.add_name_server(NameServerConfig::new(server.ip(), true, vec![udp, tcp]));
            }
            TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
        };
        // Proof state is cached by the book; the resolver must not add its
        // own stale answers on top.
        builder.options_mut().cache_size = 0;
        builder.options_mut().timeout = Duration::from_secs(3);
        let resolver = builder.build().map_err(|e| err(&e))?;
        Ok(DomainProver {
            resolver,
            book,
            timing,
        })
    }

    pub fn book(&self) -> &Arc<ProofBook> {
        &self.book
    }

    /// Looks for a CNAME (following up to 8 hops) to one of the targets, or
    /// the TXT token. `Ok` says how it was proven, `Err` what was found.
    pub async fn check(&self, claim: &Claim) -> Result<String, String> {
        let mut name = claim.host.clone();
        let mut seen = Vec::new();
        for _ in 0..8 {
            let Some(target) = self.cname(&name).await else {
                break;
            };
            if claim
                .targets
                .iter()
                .any(|t| t.eq_ignore_ascii_case(&target))
            {
                return Ok(format!("CNAME {} -> {target}", claim.host));
            }
            seen.push(target.clone());
            name = target;
        }
        let txt_name = format!("_teapot.{}", claim.host);
        let txts = self.txt(&txt_name).await;
        if txts.iter().any(|t| t == &claim.token) {
            return Ok(format!("TXT {txt_name}"));
        }
        let cname = if seen.is_empty() {
            "no CNAME".to_string()
        } else {
            format!("CNAME to {}", seen.join(" -> "))
        };
        Err(format!(
            "custom domain {} not proven: {cname} and no TXT {txt_name} = {:?}; point a CNAME at {} or add that TXT record",
            claim.host,
            claim.token,
            claim
                .targets
                .first()
                .map_or("an assigned hostname", String::as_str),
        ))
    }

    async fn cname(&self, name: &str) -> Option<String> {
        let lookup = self
            .resolver
            .lookup(fqdn(name), RecordType::CNAME)
            .await
            .ok()?;
        lookup.answers().iter().find_map(|r| match &r.data {
            RData::CNAME(c) => Some(c.0.to_utf8().trim_end_matches('.').to_ascii_lowercase()),
            _ => None,
        })
    }

    async fn txt(&self, name: &str) -> Vec<String> {
        let Ok(lookup) = self.resolver.lookup(fqdn(name), RecordType::TXT).await else {
            return Vec::new();
        };
        lookup
            .answers()
            .iter()
            .filter_map(|r| match &r.data {
                RData::TXT(t) => Some(
                    t.txt_data
                        .iter()
                        .map(|part| String::from_utf8_lossy(part).into_owned())
                        .collect::<String>(),
                ),
                _ => None,
            })
            .collect()
    }

    /// Checks every claim of the current snapshot when due; calls
    /// `on_change` when a host starts or stops being routable.
    pub async fn run(
        self,
        claims: impl Fn() -> Vec<Claim>,
        on_change: impl Fn() + Send,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => if *shutdown.borrow() { return },
            }
            let claims = claims();
            self.book.retain(&claims);
            let now = Instant::now();
            let mut changed = false;
            for claim in claims.iter().filter(|c| self.book.due(c, now)) {
                let result = self.check(claim).await;
                match &result {
                    Ok(how) => {
                        tracing::debug!(host = %claim.host, cluster = %claim.cluster, %how, "custom domain proven")
                    }
                    Err(why) => {
                        tracing::debug!(host = %claim.host, cluster = %claim.cluster, %why, "custom domain not proven")
                    }
                }
                changed |= self.book.record(claim, result, &self.timing);
            }
            if changed {
                on_change();
            }
        }
    }
}

fn fqdn(name: &str) -> String {
    if name.ends_with('.') {
        name.to_string()
    } else {
        format!("{name}.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> Claim {
        Claim {
            cluster: "acme".into(),
            host: "shop.example.com".into(),
            token: "t".into(),
            targets: vec!["web-shop.acme.lb.example.net".into()],
        }
    }

    #[test]
    fn a_lost_proof_keeps_routing_during_the_grace_period() {
        let book = ProofBook::default();
        let timing = ProofTiming {
            grace: Duration::from_millis(50),
            ..ProofTiming::default()
        };
        let c = claim();
        assert!(!book.is_proven("acme", "shop.example.com"));
        assert!(book.record(&c, Ok("CNAME".into()), &timing));
        assert!(book.is_proven("acme", "shop.example.com"));
        assert!(!book.record(&c, Err("gone".into()), &timing));
        assert!(book.is_proven("acme", "shop.example.com"));
        std::thread::sleep(Duration::from_millis(60));
        assert!(book.record(&c, Err("gone".into()), &timing));
        assert!(!book.is_proven("acme", "shop.example.com"));
        assert!(!book.is_proven("other", "shop.example.com"));
    }

    #[test]
    fn unclaimed_hosts_are_forgotten() {
        let book = ProofBook::default();
        book.record(&claim(), Ok("x".into()), &ProofTiming::default());
        book.retain(&[]);
        assert!(!book.is_proven("acme", "shop.example.com"));
    }
}
