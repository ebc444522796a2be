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

/// The zone for a snapshot, addresses and challenges. Names the zone
/// cannot hold (outside it, invalid) are skipped with a log line: one bad
/// name never takes the others' answers away.
pub fn build(
    settings: &ZoneSettings,
    snapshot: &Snapshot,
    addresses: &BTreeSet<IpAddr>,
    challenges: &[(String, String)],
) -> Result<Zone, teapot_dns::Error> {
    let mut zone = ZoneBuilder::new(settings.clone())?;
    let suffix = format!(".{}", settings.origin);
    let mut names: BTreeSet<Cow<'_, str>> = BTreeSet::new();
    // A tenant Gateway's assigned hostname is the `Hostname` address of
    // its status, once it is programmed (it routes).
    let gateways = snapshot.report.gateway.gateways.iter().filter(|g| {
        g.status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Programmed" && c.status == "True")
    });
    // A Gateway with its own address is answered with that address alone:
    // the fleet's shared listeners do not serve it.
    let own = snapshot.gateway.own();
    let mut own_hosts: Vec<(&str, IpAddr)> = Vec::new();
    let mut gateway_hosts: Vec<&str> = Vec::new();
    for g in gateways {
        let addresses = g.status.addresses.as_deref().unwrap_or_default();
        let own_address = addresses
            .iter()
            .filter(|a| a.r#type.as_deref() == Some("IPAddress"))
            .filter_map(|a| a.value.parse::<IpAddr>().ok())
            .find(|ip| own.serves(*ip));
        for host in addresses
            .iter()
            .filter(|a| a.r#type.as_deref() == Some("Hostname"))
        {
            match own_address {
                Some(ip) => own_hosts.push((host.value.as_str(), ip)),
                None => gateway_hosts.push(host.value.as_str()),
            }
        }
    }
    // A wildcard right below the apex (`*.lb.DOMAIN`) would answer for
    // every tenant cluster's names: only `*.CLUSTER.lb.DOMAIN` and deeper
    // become wildcard records.
    let wildcards = snapshot
        .routes
        .wildcard_hosts()
        .filter(|s| s.strip_suffix(suffix.as_str()).is_some())
        .map(|s| Cow::Owned(format!("*.{s}")));
    let exact = snapshot
        .routes
        .exact_hosts()
        .chain(gateway_hosts)
        .map(Cow::Borrowed);
    // The cluster's own name keeps the fleet's addresses.
    for (host, _) in &own_hosts {
        if let Some(below) = host.strip_suffix(suffix.as_str())
            && let Some((_, cluster)) = below.rsplit_once('.')
        {
            let start = host.len() - suffix.len() - cluster.len();
            names.insert(Cow::Owned(host[start..].to_string()));
        }
    }
    for host in exact.chain(wildcards) {
        let Some(below) = host.strip_suffix(suffix.as_str()) else {
            continue;
        };
        // INGRESS.CLUSTER: the cluster's own name too (the wildcard
        // certificate's second name).
        if let Some((_, cluster)) = below.rsplit_once('.') {
            let start = host.len() - suffix.len() - cluster.len();
            names.insert(Cow::Owned(host[start..].to_string()));
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
    for (name, addr) in own_hosts {
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
            match build(&settings, &snapshot, &inputs.1, &inputs.2) {
                Ok(built) => {
                    tracing::info!(
                        generation = inputs.0,
                        names = built.names(),
                        addresses = inputs.1.len(),
                        challenges = inputs.2.len(),
                        serial = built.serial(),
                        "DNS zone updated"
                    );
                    zone.store(Arc::new(built));
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
        // A snapshot swapped in wakes it at once.
        let mut next = snapshot(&["web.acme.lb.example.com", "api.acme.lb.example.com"]);
        next.generation = 1;
        snapshots.store(Arc::new(next));
        generations.send_replace(1);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!((count(&counters.passes), count(&counters.builds)), (2, 2));
        assert_eq!(kind(&zone, "api.acme.lb.example.com"), Kind::Answer);
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
