//! The zone the fleet's DNS server answers from (`teapot-dns`, docs/dns.md),
//! rebuilt from this replica's state whenever it changes:
//!
//! - names: every exact host of the compiled routes under the zone (each
//!   assigned hostname `INGRESS.CLUSTER.lb.DOMAIN`), every wildcard host
//!   `*.CLUSTER.lb.DOMAIN` or deeper (a wildcard record: the names it
//!   routes resolve), each tenant cluster's own name `CLUSTER.lb.DOMAIN`
//!   above them, and the zone's in-zone name servers (glue);
//! - addresses: the ones that serve those names now ([`Addresses`]): the
//!   fleet's announced addresses where the fleet announces them (BGP, L2:
//!   the announcement moves them, DNS need not), else the addresses of
//!   the replicas that are ready, from a Lease each replica renews while
//!   it is ready (the announcer Leases of
//!   [`crate::loops::announce::membership`], in a pool of their own);
//! - TXT `_acme-challenge.NAME`: the ACME DNS-01 challenges in flight
//!   ([`Challenges`], the shared ACME state every replica reads).
//!
//! Every replica with the same routes, live replicas and challenges builds
//! the same zone, serial included (it is a hash of the content), so
//! resolvers see one zone whichever replica they ask.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use teapot_dns::escape::LogText;
use teapot_dns::{Zone, ZoneBuilder, ZoneHandle, ZoneSettings};
use tokio::sync::watch;

use crate::compile::snapshot::{Snapshot, SnapshotHandle};
use crate::loops::announce::live_replicas::View;
use crate::loops::announce::membership::{Membership, MembershipConfig};

mod index;
pub use index::{Hosts, ZoneIndex};

/// The announcer-Lease pool the DNS replicas write: live members are the
/// ready replicas whose addresses the zone answers.
pub const DNS_POOL: &str = "teapot-dns";

/// How often readiness is looked at before the first build (once, while
/// the replica starts: it turns ready after its first full list).
/// Afterwards the zone loop wakes only for what changes: a snapshot
/// swapped in, the DNS Leases, the challenges, and the instant the next
/// Lease in the view runs out.
const READY_EVERY: Duration = Duration::from_millis(250);

/// Challenges with no change notification (manifests mode: files in the
/// state directory, written by whichever replica sharing it issues) are
/// read again this often. The issuer waits 2 s after writing one before
/// the CA may ask.
const CHALLENGES_EVERY: Duration = Duration::from_secs(1);

/// `teapot proxy --dns-*`.
#[derive(Clone, Debug)]
pub struct DnsConfig {
    pub zone: ZoneSettings,
    pub server: teapot_dns::ServerConfig,
    /// The addresses this replica serves on (daemonset mode: its node's),
    /// or, with announcement, ignored for the fleet's announced ones.
    pub addresses: Vec<IpAddr>,
    /// Kube mode: how often this replica renews its DNS Lease and how
    /// long the others count it ready after the last renewal.
    pub renew_every: Duration,
    pub lease_duration: Duration,
}

impl DnsConfig {
    pub fn new(zone: ZoneSettings) -> DnsConfig {
        DnsConfig {
            zone,
            server: teapot_dns::ServerConfig::default(),
            addresses: Vec::new(),
            renew_every: Duration::from_secs(1),
            lease_duration: Duration::from_secs(4),
        }
    }
}

/// Pending ACME DNS-01 challenges as TXT records: (name, value), read
/// fresh (another replica's issuer may have written them a moment ago).
#[async_trait::async_trait]
pub trait Challenges: Send + Sync + std::fmt::Debug {
    async fn dns_challenges(&self) -> Vec<(String, String)>;
    /// A counter that moves when the challenges may have changed (kube
    /// mode: the challenge Secret's watch); `None`: no notification, the
    /// zone loop reads them every [`CHALLENGES_EVERY`].
    fn dns_challenge_changes(&self) -> Option<watch::Receiver<u64>> {
        None
    }
}

/// Where the answered addresses come from.
pub enum Addresses {
    /// Always these: the fleet's announced addresses, or the one replica
    /// of manifests mode.
    Fixed(Vec<IpAddr>),
    /// The ready replicas, each by its Lease.
    Replicas(Membership),
    /// The ready replicas of a view kept elsewhere (no Lease of this
    /// replica's own).
    Viewed(watch::Receiver<View>),
}

impl std::fmt::Debug for Addresses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addresses::Fixed(a) => f.debug_tuple("Fixed").field(a).finish(),
            Addresses::Replicas(_) => f.write_str("Replicas"),
            Addresses::Viewed(_) => f.write_str("Viewed"),
        }
    }
}

impl Addresses {
    /// Kube mode without announcement: renews this replica's Lease with
    /// its addresses while `ready`, and watches the others'.
    pub fn replicas(
        client: kube::Client,
        namespace: String,
        config: &DnsConfig,
        ready: Arc<AtomicBool>,
    ) -> Addresses {
        let own: BTreeSet<IpAddr> = config.addresses.iter().copied().collect();
        // The receiver outlives the sender: the addresses never change.
        let (_fixed, owned) = watch::channel(own);
        let replica = crate::loops::announce::membership::replica_name(&format!(
            "dns-{}",
            teapot_api::lease::default_identity()
        ));
        Addresses::Replicas(Membership::start(
            client,
            MembershipConfig {
                namespace,
                replica,
                pools: [DNS_POOL.to_string()].into(),
                renew_every: config.renew_every,
                duration: config.lease_duration,
                forget_after: MembershipConfig::forget_after(config.lease_duration),
                bfd: None,
            },
            ready,
            owned,
        ))
    }

    /// The view of the replicas' Leases, if the addresses follow one.
    fn view(&self) -> Option<watch::Receiver<View>> {
        match self {
            Addresses::Fixed(_) => None,
            Addresses::Replicas(m) => Some(m.view()),
            Addresses::Viewed(v) => Some(v.clone()),
        }
    }

    /// The addresses answered at `now`, and the next instant they change
    /// by themselves (a Lease in the view running out).
    fn at(
        &self,
        view: Option<&mut watch::Receiver<View>>,
        now: Instant,
    ) -> (BTreeSet<IpAddr>, Option<Instant>) {
        match (self, view) {
            (Addresses::Fixed(a), _) => (a.iter().copied().collect(), None),
            (_, Some(view)) => {
                let view = view.borrow_and_update();
                (live_addresses(&view, now), view.next_expiry(now))
            }
            (_, None) => (BTreeSet::new(), None),
        }
    }

    /// Deletes this replica's Lease, so the others drop its addresses at
    /// once rather than after the Lease duration.
    pub async fn leave(&self) {
        if let Addresses::Replicas(m) = self {
            m.leave().await;
        }
    }
}

/// The addresses of the replicas of [`DNS_POOL`] live now.
pub fn live_addresses(view: &View, now: Instant) -> BTreeSet<IpAddr> {
    view.live(DNS_POOL, now)
        .iter()
        .filter_map(|r| view.leases.get(r))
        .flat_map(|o| o.owned.iter().copied())
        .collect()
}

/// The zone for a snapshot, addresses and challenges, built whole: the
/// reference [`ZoneState`] is held to. Names the zone cannot hold
/// (outside it, invalid) are skipped with a log line: one bad name never
/// takes the others' answers away.
pub fn build(
    settings: &ZoneSettings,
    snapshot: &Snapshot,
    addresses: &BTreeSet<IpAddr>,
    challenges: &[(String, String)],
) -> Result<Zone, teapot_dns::Error> {
    build_from(settings, &Hosts::of(snapshot), addresses, challenges)
}

/// [`build`] from the snapshot's hosts.
pub fn build_from(
    settings: &ZoneSettings,
    hosts: &Hosts<'_>,
    addresses: &BTreeSet<IpAddr>,
    challenges: &[(String, String)],
) -> Result<Zone, teapot_dns::Error> {
    let mut zone = ZoneBuilder::new(settings.clone())?;
    let suffix = format!(".{}", settings.origin);
    let mut names: BTreeSet<Cow<'_, str>> = BTreeSet::new();
    // A wildcard right below the apex (`*.lb.DOMAIN`) would answer for
    // every tenant cluster's names: only `*.CLUSTER.lb.DOMAIN` and deeper
    // become wildcard records.
    let wildcards = hosts
        .wildcard
        .iter()
        .filter(|s| s.strip_suffix(suffix.as_str()).is_some())
        .map(|s| Cow::Owned(format!("*.{s}")));
    let exact = hosts.exact.iter().map(|h| Cow::Borrowed(*h));
    // The cluster's own name keeps the fleet's addresses.
    for (host, _) in &hosts.own {
        if let Some(cluster) = index::cluster(host, &suffix) {
            names.insert(Cow::Borrowed(cluster));
        }
    }
    for host in exact.chain(wildcards) {
        if !host.ends_with(suffix.as_str()) {
            continue;
        }
        // INGRESS.CLUSTER: the cluster's own name too (the wildcard
        // certificate's second name).
        if let Some(cluster) = index::cluster(&host, &suffix) {
            names.insert(Cow::Owned(cluster.to_string()));
        }
        names.insert(host);
    }
    for ns in &settings.nameservers {
        if zone.contains(ns) {
            names.insert(Cow::Borrowed(ns.as_str()));
        }
    }
    for name in &names {
        let name: &str = name;
        for addr in addresses {
            if let Err(e) = zone.address(name, *addr) {
                // Tenant hostnames and the error quoting them: any bytes
                // an Ingress host passed validation with.
                let error = e.to_string();
                tracing::warn!(name = %LogText(name), error = %LogText(&error), "name left out of the DNS zone");
                break;
            }
        }
    }
    for &(name, addr) in &hosts.own {
        if names.contains(name) || !name.ends_with(suffix.as_str()) {
            continue;
        }
        if let Err(e) = zone.address(name, addr) {
            let error = e.to_string();
            tracing::warn!(name = %LogText(name), error = %LogText(&error), "name left out of the DNS zone");
        }
    }
    for (name, value) in challenges {
        if !zone.contains(name) {
            continue;
        }
        if let Err(e) = zone.txt(name, value) {
            let error = e.to_string();
            tracing::warn!(name = %LogText(name), error = %LogText(&error), "ACME challenge left out of the DNS zone");
        }
    }
    Ok(zone.build())
}

/// The zone last made and what it was made from, so that the next one is
/// made by difference: a change of routes, Gateways or challenges costs
/// the names it changes (docs/capacity.md). The first zone, and the next
/// after the answered addresses change (every name changes with them), is
/// built whole.
#[derive(Debug, Default)]
pub struct ZoneState {
    last: Option<(ZoneIndex, Arc<Zone>)>,
}

impl ZoneState {
    /// The zone for these inputs: the one a whole [`build_from`] of them
    /// makes, serial included.
    pub fn next(
        &mut self,
        settings: &ZoneSettings,
        hosts: &Hosts<'_>,
        addresses: &BTreeSet<IpAddr>,
        challenges: &[(String, String)],
    ) -> Result<Arc<Zone>, teapot_dns::Error> {
        if let Some((index, zone)) = &mut self.last
            && index.addresses() == addresses
        {
            let touched = index.update(hosts, challenges);
            if !touched.is_empty() {
                *zone = Arc::new(index.apply(zone, &touched));
            }
            return Ok(zone.clone());
        }
        self.last = None;
        let zone = Arc::new(build_from(settings, hosts, addresses, challenges)?);
        let mut index = ZoneIndex::new(settings, addresses.clone());
        index.update(hosts, challenges);
        self.last = Some((index, zone.clone()));
        Ok(zone)
    }
}

/// What a zone is built from: the snapshot generation, the answered
/// addresses, the challenges (sorted).
type ZoneInputs = (u64, BTreeSet<IpAddr>, Vec<(String, String)>);

/// What the zone loop counts (`/metrics`: `teapot_dns_zone_passes_total`,
/// `teapot_dns_zone_builds_total`).
#[derive(Clone, Debug, Default)]
pub struct ZoneCounters {
    /// Passes comparing the inputs with the last build's: at rest, one per
    /// DNS Lease renewal seen (kube mode) and none otherwise.
    pub passes: Option<prometheus::IntCounter>,
    /// Zones swapped in, whole or by difference; none for a snapshot that
    /// changed no name.
    pub builds: Option<prometheus::IntCounter>,
}

/// Keeps `zone` current until `stop`: rebuilt when the snapshot, the
/// answered addresses or the challenges change, from the moment the
/// replica is `ready` (its first snapshot holds every route). It wakes
/// when one of them may have changed: `generations` moves (a snapshot
/// swapped in), the Lease view changes, the challenges' notification
/// moves, or the next Lease in the view runs out (so a replica that dies
/// without deleting its Lease leaves the answers when the Lease runs out,
/// not later); never on a period of its own, but for challenges without
/// a notification ([`CHALLENGES_EVERY`]).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    settings: ZoneSettings,
    zone: ZoneHandle,
    snapshots: SnapshotHandle,
    mut generations: watch::Receiver<u64>,
    addresses: Addresses,
    challenges: Option<Arc<dyn Challenges>>,
    ready: Arc<AtomicBool>,
    counters: ZoneCounters,
    mut stop: watch::Receiver<bool>,
) {
    let mut stopped = false;
    while !stopped && !ready.load(std::sync::atomic::Ordering::Acquire) {
        tokio::select! {
            _ = tokio::time::sleep(READY_EVERY) => {}
            _ = stop.wait_for(|s| *s) => stopped = true,
        }
    }
    if stopped {
        addresses.leave().await;
        return;
    }
    let mut view = addresses.view();
    let mut challenge_changes = challenges.as_ref().and_then(|c| c.dns_challenge_changes());
    let poll_challenges = challenges.is_some() && challenge_changes.is_none();
    let mut last: Option<ZoneInputs> = None;
    let mut state = ZoneState::default();
    loop {
        if let Some(c) = &counters.passes {
            c.inc();
        }
        // Marked seen before the inputs are read: a change while the
        // zone builds wakes the next pass.
        generations.borrow_and_update();
        if let Some(c) = &mut challenge_changes {
            c.borrow_and_update();
        }
        let snapshot = snapshots.load();
        let mut pending = match &challenges {
            Some(c) => c.dns_challenges().await,
            None => Vec::new(),
        };
        pending.sort();
        // tokio's clock, so a test with a paused clock drives the Lease
        // expiry too.
        let now = tokio::time::Instant::now().into_std();
        let (live, expiry) = addresses.at(view.as_mut(), now);
        let inputs = (snapshot.generation, live, pending);
        if last.as_ref() != Some(&inputs) {
            match state.next(&settings, &Hosts::of(&snapshot), &inputs.1, &inputs.2) {
                // A snapshot whose hosts are the last one's (a compile
                // that changed no host) leaves the zone as it is.
                Ok(built) if Arc::ptr_eq(&built, &*zone.load()) => {}
                Ok(built) => {
                    tracing::info!(
                        generation = inputs.0,
                        names = built.names(),
                        addresses = inputs.1.len(),
                        challenges = inputs.2.len(),
                        serial = built.serial(),
                        "DNS zone updated"
                    );
                    zone.store(built);
                    if let Some(c) = &counters.builds {
                        c.inc();
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "DNS zone not built; the previous one keeps answering");
                }
            }
            last = Some(inputs);
        }
        // A millisecond past the expiry: the Lease is out by then.
        let expiry = expiry.map(|at| at + Duration::from_millis(1));
        let poll = poll_challenges.then(|| now + CHALLENGES_EVERY);
        let wake = expiry.into_iter().chain(poll).min();
        tokio::select! {
            _ = changed_or_never(&mut generations) => {}
            _ = changed_or_never_opt(&mut view) => {}
            _ = changed_or_never_opt(&mut challenge_changes) => {}
            _ = sleep_until_or_never(wake) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    addresses.leave().await;
}

/// Resolves when `rx` changes; never once its sender is gone (a loop
/// woken by a closed channel would spin).
async fn changed_or_never<T>(rx: &mut watch::Receiver<T>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn changed_or_never_opt<T>(rx: &mut Option<watch::Receiver<T>>) {
    match rx {
        Some(rx) => changed_or_never(rx).await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_or_never(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::routes::{Route, RouteTable};
    use crate::compile::upstream::Upstream;
    use teapot_api::host::HostPattern;

    fn snapshot(hosts: &[&str]) -> Snapshot {
        let mut routes = RouteTable::default();
        for h in hosts {
            let upstream = Upstream::new("default/web:80".into(), Vec::new(), None);
            let route = Route::from(Arc::new(upstream));
            routes
                .host_mut(Some(&HostPattern::Exact(h.to_string())))
                .set_fallback(route);
        }
        Snapshot {
            routes,
            ..Snapshot::default()
        }
    }

    fn settings() -> ZoneSettings {
        ZoneSettings::new("lb.example.com")
    }

    #[test]
    fn routed_hosts_their_clusters_and_in_zone_name_servers_get_the_addresses() {
        let s = snapshot(&[
            "web-shop.acme.lb.example.com",
            "api-shop.acme.lb.example.com",
            "custom.example.org",
        ]);
        let addrs: BTreeSet<IpAddr> = ["192.0.2.1".parse().unwrap()].into();
        let zone = build(&settings(), &s, &addrs, &[]).unwrap();
        // Two hosts, the cluster, ns1.
        assert_eq!(zone.names(), 4);
        assert!(!zone.contains("custom.example.org"));
    }

    /// An A query for `name` in wire format.
    fn a_query(name: &str) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        q
    }

    #[test]
    fn names_below_a_tenant_wildcard_host_are_answered() {
        let mut routes = RouteTable::default();
        for w in [
            "acme.lb.example.com",
            "web.beta.lb.example.com",
            "lb.example.com",
        ] {
            let upstream = Upstream::new("default/web:80".into(), Vec::new(), None);
            routes
                .host_mut(Some(&HostPattern::Wildcard(w.to_string())))
                .set_fallback(Route::from(Arc::new(upstream)));
        }
        let s = Snapshot {
            routes,
            ..Snapshot::default()
        };
        let addrs: BTreeSet<IpAddr> = ["192.0.2.1".parse().unwrap()].into();
        let zone = build(&settings(), &s, &addrs, &[]).unwrap();
        let kind = |name: &str| {
            teapot_dns::respond(&zone, &a_query(name), teapot_dns::Transport::Udp)
                .unwrap()
                .kind
        };
        use teapot_dns::answer::Kind;
        for name in [
            "shop.acme.lb.example.com",
            "a.b.acme.lb.example.com",
            "x.web.beta.lb.example.com",
            // The clusters' own names.
            "acme.lb.example.com",
            "beta.lb.example.com",
        ] {
            assert_eq!(kind(name), Kind::Answer, "{name}");
        }
        // `*.lb.example.com` would answer every cluster's names: not a
        // record.
        assert_eq!(kind("other.lb.example.com"), Kind::NxDomain);
        assert_eq!(kind("x.beta.lb.example.com"), Kind::NxDomain);
    }

    #[test]
    fn a_programmed_tenant_gateway_is_answered_an_unprogrammed_one_is_not() {
        let gateway = |name: &str, programmed: &str| crate::compile::gateway::Reported {
            namespace: "tenant-acme".into(),
            name: name.into(),
            status: serde_json::from_value(serde_json::json!({
                "addresses": [{"type": "Hostname", "value": format!("{name}.acme.lb.example.com")}],
                "conditions": [{"type": "Programmed", "status": programmed, "reason": "x",
                                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            }))
            .unwrap(),
        };
        let mut s = snapshot(&[]);
        s.report.gateway.gateways = vec![gateway("gw", "True"), gateway("broken", "False")];
        let addrs: BTreeSet<IpAddr> = ["192.0.2.1".parse().unwrap()].into();
        let zone = build(&settings(), &s, &addrs, &[]).unwrap();
        // gw, its cluster, ns1.
        assert_eq!(zone.names(), 3);
    }

    /// A tenant Gateway with its own address (HTTP on 8080 there) is
    /// answered with that address, not the fleet's; its cluster's name
    /// keeps the fleet's.
    #[test]
    fn a_gateway_with_its_own_address_is_answered_with_it() {
        let tenant = "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: acme}\nspec:\n  cluster: acme\n  nodeCIDRs: [10.1.0.0/24]\n  l4: {pool: default}\n";
        let class = "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: teapot}\nspec: {controllerName: teapot.dev/gateway-controller}\n";
        let gateway = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: tenant-acme}\nspec:\n  gatewayClassName: teapot\n  listeners: [{name: alt, protocol: HTTP, port: 8080}]\n";
        let options = crate::compile::CompileOptions {
            domain: "example.com".into(),
            l4: Some(crate::compile::l4::L4Inputs {
                config: Arc::new(crate::compile::l4::L4Config {
                    pools: vec!["default=198.51.100.7".parse().unwrap()],
                    ..Default::default()
                }),
                previous: Arc::default(),
                runtime: Arc::default(),
            }),
            ..Default::default()
        };
        let s = crate::compile::tests::compile_test_docs(
            &[class.to_string(), tenant.to_string(), gateway.to_string()],
            &options,
        );
        let addrs: BTreeSet<IpAddr> = ["192.0.2.1".parse().unwrap()].into();
        let zone = build(&settings(), &s, &addrs, &[]).unwrap();
        let answer = |name: &str| {
            teapot_dns::respond(&zone, &a_query(name), teapot_dns::Transport::Udp)
                .unwrap()
                .bytes
        };
        let own = answer("gw.acme.lb.example.com");
        assert!(own.ends_with(&[198, 51, 100, 7]), "{own:?}");
        assert!(!own.windows(4).any(|w| w == [192, 0, 2, 1]), "{own:?}");
        assert!(answer("acme.lb.example.com").ends_with(&[192, 0, 2, 1]));
    }

    /// The zone loop of a replica with `addresses`, counting its passes
    /// and builds: the zone handle, the snapshot handle, the generation
    /// sender, the counters and the stop sender.
    #[allow(clippy::type_complexity)]
    fn start(
        addresses: Addresses,
    ) -> (
        ZoneHandle,
        SnapshotHandle,
        watch::Sender<u64>,
        ZoneCounters,
        watch::Sender<bool>,
    ) {
        let zone: ZoneHandle = Arc::new(arc_swap::ArcSwap::from_pointee(
            ZoneBuilder::new(settings()).unwrap().placeholder(),
        ));
        let snapshots: SnapshotHandle = Arc::new(arc_swap::ArcSwap::from_pointee(snapshot(&[
            "web.acme.lb.example.com",
        ])));
        let (generations, generations_rx) = watch::channel(0);
        let counters = ZoneCounters {
            passes: Some(prometheus::IntCounter::new("p", "p").unwrap()),
            builds: Some(prometheus::IntCounter::new("b", "b").unwrap()),
        };
        let (stop, stop_rx) = watch::channel(false);
        tokio::spawn(run(
            settings(),
            zone.clone(),
            snapshots.clone(),
            generations_rx,
            addresses,
            None,
            Arc::new(AtomicBool::new(true)),
            counters.clone(),
            stop_rx,
        ));
        (zone, snapshots, generations, counters, stop)
    }

    fn count(c: &Option<prometheus::IntCounter>) -> u64 {
        c.as_ref().unwrap().get()
    }

    /// What the zone answers for an A query of `name`.
    fn kind(zone: &ZoneHandle, name: &str) -> teapot_dns::answer::Kind {
        teapot_dns::respond(&zone.load(), &a_query(name), teapot_dns::Transport::Udp)
            .unwrap()
            .kind
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_replica_checks_its_zone_only_when_something_changes() {
        let addrs = vec!["192.0.2.1".parse().unwrap()];
        let (zone, snapshots, generations, counters, stop) = start(Addresses::Fixed(addrs));
        tokio::time::sleep(Duration::from_secs(60)).await;
        // One pass and one build at start, none in a minute at rest
        // (every 250 ms before: 240 passes).
        assert_eq!((count(&counters.passes), count(&counters.builds)), (1, 1));
        use teapot_dns::answer::Kind;
        assert_eq!(kind(&zone, "web.acme.lb.example.com"), Kind::Answer);
        let swap_in = |hosts: &[&str], generation| {
            let mut next = snapshot(hosts);
            next.generation = generation;
            snapshots.store(Arc::new(next));
            generations.send_replace(generation);
        };
        // A snapshot swapped in wakes it at once.
        swap_in(&["web.acme.lb.example.com", "api.acme.lb.example.com"], 1);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!((count(&counters.passes), count(&counters.builds)), (2, 2));
        assert_eq!(kind(&zone, "api.acme.lb.example.com"), Kind::Answer);
        // A compile that changed no host: a pass, the same zone, no build.
        let before = zone.load_full();
        swap_in(&["api.acme.lb.example.com", "web.acme.lb.example.com"], 2);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!((count(&counters.passes), count(&counters.builds)), (3, 2));
        assert!(Arc::ptr_eq(&before, &zone.load_full()));
        let _ = stop.send(true);
    }

    #[tokio::test(start_paused = true)]
    async fn a_replica_whose_lease_runs_out_leaves_the_answers_when_it_does() {
        let now = tokio::time::Instant::now().into_std();
        let lease = |replica: &str, addr: &str, seen: Instant| {
            crate::loops::announce::live_replicas::Observed {
                replica: replica.into(),
                version: "1".into(),
                seen,
                duration: Duration::from_secs(4),
                pools: [DNS_POOL.to_string()].into(),
                owned: [addr.parse().unwrap()].into(),
                bfd: None,
                counts: None,
            }
        };
        let mut view = View::default();
        view.leases.insert("a".into(), lease("a", "192.0.2.1", now));
        view.leases.insert("b".into(), lease("b", "192.0.2.2", now));
        let (views, rx) = watch::channel(view.clone());
        let (zone, _snapshots, _generations, counters, stop) = start(Addresses::Viewed(rx));
        let addresses = |zone: &ZoneHandle| {
            let q = a_query("web.acme.lb.example.com");
            let r = teapot_dns::respond(&zone.load(), &q, teapot_dns::Transport::Tcp).unwrap();
            // ANCOUNT.
            u16::from_be_bytes([r.bytes[6], r.bytes[7]])
        };
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(addresses(&zone), 2);
        // a renews (a view change: one pass, the same addresses, no
        // build); b does not.
        view.leases.insert(
            "a".into(),
            lease("a", "192.0.2.1", now + Duration::from_secs(2)),
        );
        views.send_replace(view);
        tokio::time::sleep(Duration::from_millis(1990)).await;
        assert_eq!((count(&counters.passes), count(&counters.builds)), (2, 1));
        assert_eq!(addresses(&zone), 2, "b's Lease has 10 ms left");
        // b's Lease runs out at 4 s: the loop wakes then, not later.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(addresses(&zone), 1);
        assert_eq!((count(&counters.passes), count(&counters.builds)), (3, 2));
        // Then a's, at 6 s; then nothing more to wake for.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(addresses(&zone), 0);
        assert_eq!((count(&counters.passes), count(&counters.builds)), (4, 3));
        let _ = stop.send(true);
    }

    /// Random changes of every input, each zone made by difference
    /// checked against the whole build of the same state: every record,
    /// empty non-terminal, wildcard and the serial.
    #[test]
    fn a_zone_made_by_difference_is_the_whole_build_of_the_same_state() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(51);
        let mut exact_pool: Vec<String> = (0..24)
            .map(|i| format!("w{}.c{}.lb.example.com", i % 8, i / 8))
            .collect();
        exact_pool.extend(
            [
                // The cluster's own name, deeper names, the apex, a name
                // server, outside the zone, a name the zone cannot hold.
                "c1.lb.example.com",
                "a.w1.c0.lb.example.com",
                "lb.example.com",
                "ns1.lb.example.com",
                "web.example.org",
                "bad..c2.lb.example.com",
                "gw1.c0.lb.example.com",
            ]
            .map(String::from),
        );
        let wildcard_pool: Vec<String> = [
            "c0.lb.example.com",
            "c3.lb.example.com",
            "w1.c1.lb.example.com",
            "lb.example.com",
            "example.org",
        ]
        .map(String::from)
        .to_vec();
        let ips: Vec<IpAddr> = [
            "192.0.2.1",
            "192.0.2.2",
            "2001:db8::1",
            "198.51.100.7",
            "198.51.100.8",
        ]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
        // Gateways with their own address: in a cluster with routes or
        // not, a name a route holds too, outside the zone.
        let own_pool: Vec<(String, IpAddr)> = [
            ("gw1.c0.lb.example.com", 3),
            ("gw1.c0.lb.example.com", 4),
            ("gw2.c4.lb.example.com", 3),
            ("w2.c1.lb.example.com", 4),
            ("gw.example.org", 3),
        ]
        .iter()
        .map(|(h, i)| (h.to_string(), ips[*i]))
        .collect();
        let long = "x".repeat(256);
        let challenge_pool: Vec<(String, String)> = [
            ("_acme-challenge.w1.c0.lb.example.com", "d1"),
            ("_acme-challenge.w1.c0.lb.example.com", "d2"),
            ("_acme-challenge.c9.lb.example.com", "d3"),
            ("_acme-challenge.W1.c0.lb.example.com", "d4"),
            ("_acme-challenge.w2.c1.lb.example.com", long.as_str()),
            ("_acme-challenge.example.org", "d5"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        let mut exact = vec![false; exact_pool.len()];
        let mut gateway = vec![false; exact_pool.len()];
        let mut wildcard = vec![false; wildcard_pool.len()];
        let mut own = vec![false; own_pool.len()];
        let mut challenge = vec![false; challenge_pool.len()];
        let mut addresses: BTreeSet<IpAddr> = [ips[0]].into();
        let mut state = ZoneState::default();
        let mut by_difference = 0;
        for step in 0..3000 {
            for _ in 0..rng.random_range(1..4) {
                let flip = |v: &mut Vec<bool>, rng: &mut rand::rngs::StdRng| {
                    let i = rng.random_range(0..v.len());
                    v[i] = !v[i];
                };
                match rng.random_range(0..20) {
                    0..8 => flip(&mut exact, &mut rng),
                    8..10 => flip(&mut gateway, &mut rng),
                    10..13 => flip(&mut wildcard, &mut rng),
                    13..16 => flip(&mut own, &mut rng),
                    16..19 => flip(&mut challenge, &mut rng),
                    _ => {
                        addresses = ips[..3]
                            .iter()
                            .filter(|_| rng.random_range(0..2) == 0)
                            .copied()
                            .collect();
                    }
                }
            }
            let mut hosts = Hosts {
                exact: pick(&exact, &exact_pool),
                wildcard: pick(&wildcard, &wildcard_pool),
                own: own_pool
                    .iter()
                    .zip(&own)
                    .filter(|(_, on)| **on)
                    .map(|((h, ip), _)| (h.as_str(), *ip))
                    .collect(),
            };
            // Gateways' hostnames come after the routes' hosts, the same
            // name twice at times.
            hosts.exact.extend(pick(&gateway, &exact_pool));
            let mut challenges: Vec<(String, String)> = challenge_pool
                .iter()
                .zip(&challenge)
                .filter(|(_, on)| **on)
                .map(|(c, _)| c.clone())
                .collect();
            challenges.sort();
            let before = state.last.as_ref().map(|(_, z)| z.clone());
            let made = state
                .next(&settings(), &hosts, &addresses, &challenges)
                .unwrap();
            let whole = build_from(&settings(), &hosts, &addresses, &challenges).unwrap();
            assert_eq!(
                *made, whole,
                "step {step}: {hosts:?} {addresses:?} {challenges:?}"
            );
            assert_eq!(made.serial(), whole.serial());
            if before.is_some_and(|b| {
                state.last.as_ref().unwrap().0.addresses() == &addresses && !Arc::ptr_eq(&b, &made)
            }) {
                by_difference += 1;
            }
        }
        assert!(by_difference > 1000, "{by_difference}");
    }

    fn pick<'p>(on: &[bool], pool: &'p [String]) -> Vec<&'p str> {
        pool.iter()
            .zip(on)
            .filter(|(_, on)| **on)
            .map(|(h, _)| h.as_str())
            .collect()
    }

    /// A host added or removed at 2,000 names touches its name (and its
    /// cluster's, while it has no other host) alone.
    #[test]
    fn a_host_changed_touches_its_names_alone() {
        let hosts: Vec<String> = (0..2000)
            .map(|i| format!("web-{i}.c{}.lb.example.com", i / 100))
            .collect();
        let addrs: BTreeSet<IpAddr> = ["192.0.2.1".parse().unwrap()].into();
        let mut index = ZoneIndex::new(&settings(), addrs.clone());
        let all = Hosts {
            exact: hosts.iter().map(String::as_str).collect(),
            ..Hosts::default()
        };
        assert_eq!(index.update(&all, &[]).len(), 2000 + 20);
        let mut one_more = all.exact.clone();
        one_more.push("new.c0.lb.example.com");
        let touched = index.update(
            &Hosts {
                exact: one_more,
                ..Hosts::default()
            },
            &[],
        );
        let touched: Vec<&str> = touched.iter().map(|n| &**n).collect();
        assert_eq!(touched, ["c0.lb.example.com", "new.c0.lb.example.com"]);
        let touched = index.update(&all, &[]);
        assert_eq!(touched.len(), 2, "{touched:?}");
        assert!(index.update(&all, &[]).is_empty());
    }

    #[test]
    fn the_same_state_builds_the_same_serial_and_a_challenge_changes_it() {
        let s = snapshot(&["web.acme.lb.example.com"]);
        let addrs: BTreeSet<IpAddr> = ["192.0.2.1".parse().unwrap()].into();
        let a = build(&settings(), &s, &addrs, &[]).unwrap();
        let b = build(
            &settings(),
            &snapshot(&["web.acme.lb.example.com"]),
            &addrs,
            &[],
        )
        .unwrap();
        assert_eq!(a.serial(), b.serial());
        let challenge = [(
            "_acme-challenge.acme.lb.example.com".to_string(),
            "digest".to_string(),
        )];
        let c = build(&settings(), &s, &addrs, &challenge).unwrap();
        assert_ne!(a.serial(), c.serial());
    }
}
