//! Custom-domain ownership proofs (docs/architecture.md, "Hostnames and hosts").
//!
//! A tenant may route a host outside its own zone and its granted domains
//! only after DNS shows the domain's owner meant it: a CNAME from the host
//! to one of the tenant's assigned hostnames, or a TXT record
//! `_teapot.<host>` holding the tenant's verification token. The
//! [`DomainProver`] checks every claimed host with a real resolver,
//! re-checks periodically, and keeps a lost proof for a grace period (a DNS
//! outage must not take sites down). Compiles read the [`ProofBook`]'s
//! results; a change in any proof triggers a recompile.
//!
//! One tenant's slow DNS must not hold back another's proofs: checks run concurrently within [`ProofLimits`] (a
//! bounded pool, a share of it per tenant, a deadline per check), and
//! re-checks of proven domains are started before first checks of pending
//! ones, so a proof keeps its own schedule whatever is pending.

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

    /// Records a check; returns whether routing or what `/status` says of
    /// the host changed.
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
                let last_success = previous.as_ref().and_then(|s| s.last_success);
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
        let said = previous.as_ref().map(|p| p.detail.as_str());
        let changed = state.routed != was_routed || said != Some(state.detail.as_str());
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

/// How many checks run at once, and for how long.
#[derive(Clone, Copy, Debug)]
pub struct ProofLimits {
    /// Checks in flight across all tenants.
    pub concurrent: usize,
    /// Checks in flight for one tenant: the rest of the pool stays free
    /// for the others.
    pub per_tenant: usize,
    /// One check (every lookup it makes) ends by then, proven or not.
    pub check_timeout: Duration,
}

impl Default for ProofLimits {
    fn default() -> Self {
        ProofLimits {
            concurrent: 16,
            per_tenant: 4,
            check_timeout: Duration::from_secs(10),
        }
    }
}

/// The two lookups a proof needs; the resolver in production, a stand-in
/// in tests.
#[async_trait::async_trait]
pub trait DnsLookup: Send + Sync {
    /// The CNAME target of `name`, lower-case, without the final dot.
    async fn cname(&self, name: &str) -> Option<String>;
    /// The TXT strings at `name`.
    async fn txt(&self, name: &str) -> Vec<String>;
}

/// Checks claims against DNS.
#[derive(Clone)]
pub struct DomainProver {
    dns: Arc<dyn DnsLookup>,
    book: Arc<ProofBook>,
    timing: ProofTiming,
    limits: ProofLimits,
}

impl std::fmt::Debug for DomainProver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DomainProver")
            .field("timing", &self.timing)
            .field("limits", &self.limits)
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
        Ok(DomainProver::with_lookup(
            Arc::new(Resolver(resolver)),
            book,
            timing,
        ))
    }

    pub fn with_lookup(dns: Arc<dyn DnsLookup>, book: Arc<ProofBook>, timing: ProofTiming) -> Self {
        DomainProver {
            dns,
            book,
            timing,
            limits: ProofLimits::default(),
        }
    }

    pub fn with_limits(mut self, limits: ProofLimits) -> Self {
        self.limits = limits;
        self
    }

    pub fn book(&self) -> &Arc<ProofBook> {
        &self.book
    }

    /// Looks for a CNAME (following up to 8 hops) to one of the targets, or
    /// the TXT token. `Ok` says how it was proven, `Err` what was found.
    pub async fn check(&self, claim: &Claim) -> Result<String, String> {
        check(&*self.dns, claim).await
    }

    /// Checks every claim of the current snapshot when due, within
    /// [`ProofLimits`]; calls `on_change` when what a compile shows of a
    /// proof changed (a host starts or stops being routable, or a check
    /// found something new to say in `/status`).
    pub async fn run(
        self,
        claims: impl Fn() -> Vec<Claim>,
        on_change: impl Fn() + Send,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut checks: tokio::task::JoinSet<(Claim, Result<String, String>)> =
            tokio::task::JoinSet::new();
        let mut running: HashMap<String, usize> = HashMap::new();
        let mut started: std::collections::HashSet<(String, String)> =
            std::collections::HashSet::new();
        loop {
            let mut changed = false;
            tokio::select! {
                _ = tick.tick() => {}
                Some(done) = checks.join_next(), if !checks.is_empty() => {
                    if let Ok((claim, result)) = done {
                        changed |= self.finish(&claim, result, &mut running, &mut started);
                    }
                    // Record everything else that finished meanwhile in the
                    // same round: one recompile for a burst of results.
                    while let Some(done) = checks.try_join_next() {
                        if let Ok((claim, result)) = done {
                            changed |= self.finish(&claim, result, &mut running, &mut started);
                        }
                    }
                }
                _ = shutdown.changed() => if *shutdown.borrow() { return },
            }
            let claims = claims();
            self.book.retain(&claims);
            let now = Instant::now();
            // Re-checks of proven hosts first: a proof keeps its own
            // schedule, whatever other claims are pending.
            let mut due: Vec<&Claim> = claims
                .iter()
                .filter(|c| self.book.due(c, now))
                .filter(|c| !started.contains(&(c.cluster.clone(), c.host.clone())))
                .collect();
            due.sort_by_key(|c| !self.book.is_proven(&c.cluster, &c.host));
            for claim in due {
                if checks.len() >= self.limits.concurrent {
                    break;
                }
                let mine = running.entry(claim.cluster.clone()).or_default();
                if *mine >= self.limits.per_tenant {
                    continue;
                }
                *mine += 1;
                started.insert((claim.cluster.clone(), claim.host.clone()));
                let (dns, claim, limit) =
                    (self.dns.clone(), claim.clone(), self.limits.check_timeout);
                checks.spawn(async move {
                    let result = match tokio::time::timeout(limit, check(&*dns, &claim)).await {
                        Ok(result) => result,
                        Err(_) => Err(format!(
                            "custom domain {} not proven: DNS did not answer within {limit:?}",
                            claim.host
                        )),
                    };
                    (claim, result)
                });
            }
            if changed {
                on_change();
            }
        }
    }

    /// Records one finished check; returns whether a compile would show
    /// something new.
    fn finish(
        &self,
        claim: &Claim,
        result: Result<String, String>,
        running: &mut HashMap<String, usize>,
        started: &mut std::collections::HashSet<(String, String)>,
    ) -> bool {
        if let Some(n) = running.get_mut(&claim.cluster) {
            *n = n.saturating_sub(1);
        }
        started.remove(&(claim.cluster.clone(), claim.host.clone()));
        match &result {
            Ok(how) => {
                tracing::debug!(host = %claim.host, cluster = %claim.cluster, %how, "custom domain proven")
            }
            Err(why) => {
                tracing::debug!(host = %claim.host, cluster = %claim.cluster, %why, "custom domain not proven")
            }
        }
        self.book.record(claim, result, &self.timing)
    }
}

/// Looks for a CNAME (following up to 8 hops) to one of the targets, or
/// the TXT token. `Ok` says how it was proven, `Err` what was found.
async fn check(dns: &dyn DnsLookup, claim: &Claim) -> Result<String, String> {
    let mut name = claim.host.clone();
    let mut seen = Vec::new();
    for _ in 0..8 {
        let Some(target) = dns.cname(&name).await else {
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
    let txts = dns.txt(&txt_name).await;
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

/// The system's (or the configured) resolver.
struct Resolver(TokioResolver);

#[async_trait::async_trait]
impl DnsLookup for Resolver {
    async fn cname(&self, name: &str) -> Option<String> {
        let lookup = self.0.lookup(fqdn(name), RecordType::CNAME).await.ok()?;
        lookup.answers().iter().find_map(|r| match &r.data {
            RData::CNAME(c) => Some(c.0.to_utf8().trim_end_matches('.').to_ascii_lowercase()),
            _ => None,
        })
    }

    async fn txt(&self, name: &str) -> Vec<String> {
        let Ok(lookup) = self.0.lookup(fqdn(name), RecordType::TXT).await else {
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
        // Still routed, but `/status` has news: a recompile shows it.
        assert!(book.record(&c, Err("gone".into()), &timing));
        assert!(book.is_proven("acme", "shop.example.com"));
        // The same finding again changes nothing a compile shows.
        assert!(!book.record(&c, Err("gone".into()), &timing));
        std::thread::sleep(Duration::from_millis(60));
        assert!(book.record(&c, Err("gone".into()), &timing));
        assert!(!book.is_proven("acme", "shop.example.com"));
        assert!(!book.is_proven("other", "shop.example.com"));
    }

    /// DNS where every name under `slow.test` never answers, and
    /// `www.beta.test` is a CNAME to beta's assigned hostname; counts the
    /// lookups in flight per zone.
    #[derive(Default)]
    struct FakeDns {
        slow_in_flight: std::sync::atomic::AtomicUsize,
        slow_most: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl DnsLookup for FakeDns {
        async fn cname(&self, name: &str) -> Option<String> {
            use std::sync::atomic::Ordering::SeqCst;
            if name.ends_with("slow.test") {
                let now = self.slow_in_flight.fetch_add(1, SeqCst) + 1;
                self.slow_most.fetch_max(now, SeqCst);
                // Dropped by the check's deadline.
                struct Leave<'a>(&'a std::sync::atomic::AtomicUsize);
                impl Drop for Leave<'_> {
                    fn drop(&mut self) {
                        self.0.fetch_sub(1, SeqCst);
                    }
                }
                let _leave = Leave(&self.slow_in_flight);
                std::future::pending::<()>().await;
            }
            (name == "www.beta.test").then(|| "web-shop.beta.lb.example.net".to_string())
        }

        async fn txt(&self, _: &str) -> Vec<String> {
            Vec::new()
        }
    }

    /// 20 claimed hosts under a zone whose
    /// server never answers, and another tenant's properly CNAMEd domain.
    /// Before, checks ran one after another and the other tenant waited
    /// behind every slow one.
    #[tokio::test(start_paused = true)]
    async fn one_tenants_silent_dns_does_not_hold_back_anothers_proof() {
        let dns = Arc::new(FakeDns::default());
        let book = Arc::new(ProofBook::default());
        let prover = DomainProver::with_lookup(dns.clone(), book.clone(), ProofTiming::default());
        let mut claims: Vec<Claim> = (0..20)
            .map(|i| Claim {
                cluster: "alpha".into(),
                host: format!("h{i}.slow.test"),
                token: "a".into(),
                targets: vec!["web-shop.alpha.lb.example.net".into()],
            })
            .collect();
        claims.push(Claim {
            cluster: "beta".into(),
            host: "www.beta.test".into(),
            token: "b".into(),
            targets: vec!["web-shop.beta.lb.example.net".into()],
        });
        let changes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (stop, shutdown) = watch::channel(false);
        let task = {
            let changes = changes.clone();
            tokio::spawn(prover.run(
                move || claims.clone(),
                move || {
                    changes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                },
                shutdown,
            ))
        };
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            book.is_proven("beta", "www.beta.test"),
            "beta waits behind alpha's DNS"
        );
        assert!(changes.load(std::sync::atomic::Ordering::SeqCst) >= 1);
        let most = dns.slow_most.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            most,
            ProofLimits::default().per_tenant,
            "alpha keeps to its share"
        );

        // Past the deadline the silent checks end, with a reason.
        tokio::time::sleep(ProofLimits::default().check_timeout).await;
        let detail = book.detail("alpha", "h0.slow.test").unwrap_or_default();
        assert!(detail.contains("did not answer within"), "{detail}");
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[test]
    fn unclaimed_hosts_are_forgotten() {
        let book = ProofBook::default();
        book.record(&claim(), Ok("x".into()), &ProofTiming::default());
        book.retain(&[]);
        assert!(!book.is_proven("acme", "shop.example.com"));
    }
}
