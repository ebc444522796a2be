//! Makes this replica's addresses reachable (docs/announce.md): the
//! fleet's own addresses and every allocated L4 address, each by the pool
//! containing it, in that pool's mode:
//!
//! - BGP: a `teapot_announce::Speaker` announces them while the replica is
//!   ready and withdraws them when it is not. On shutdown the speaker's
//!   graceful stop (GRACEFUL_SHUTDOWN, a wait, the withdrawal) runs before
//!   the drain, so routers move new connections away while requests still
//!   finish.
//! - L2: one `teapot_announce::l2::L2Announcer` per pool puts the
//!   addresses this replica owns on the pool's interface. Ownership is the
//!   rendezvous hash over the live replicas ([`crate::loops::announce::membership`]:
//!   a Lease per replica in kube mode; in manifests mode this replica
//!   alone). On shutdown the replica deletes its Lease, waits until the
//!   next owners list its addresses, and only then removes them: the new
//!   owner answers ARP before the old one stops.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use teapot_announce::l2::{L2Announcer, L2Config, L2Status};
use teapot_announce::{Speaker, Statuses};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::config::{AnnounceConfig, BGP_LEASE, BGP_RENEW, HAND_OVER_BOUND, KubeMembership};
use super::follow::{Follow, L2Inputs, follow};
use super::membership::{Membership, MembershipConfig};
use super::pools::Mode;
use super::view::{AnnounceView, Report};
use crate::compile::snapshot::Snapshot;

struct L2Pool {
    pool: String,
    interface: String,
    announcer: L2Announcer,
    addrs: watch::Sender<BTreeSet<IpAddr>>,
    replicas: watch::Sender<teapot_announce::l2::Replicas>,
}

impl std::fmt::Debug for L2Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("L2Pool").field("pool", &self.pool).finish()
    }
}

#[derive(Debug)]
pub struct Announcer {
    speaker: Option<Speaker>,
    l2: Vec<L2Pool>,
    membership: Option<Membership>,
    follow: JoinHandle<()>,
    merge: Option<JoinHandle<()>>,
    view: AnnounceView,
}

/// A bad setting, named.
fn refused(setting: String, reason: impl std::fmt::Display) -> teapot_announce::Error {
    teapot_announce::Error::Config {
        setting,
        reason: reason.to_string(),
    }
}

/// The labels of the Node this replica runs on.
async fn node_labels(
    kube: &KubeMembership,
    node: &str,
) -> Result<BTreeMap<String, String>, teapot_announce::Error> {
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(kube.client.clone());
    let node = api
        .get(node)
        .await
        .map_err(|e| refused(format!("Node `{node}` (NODE_NAME)"), e))?;
    Ok(node.metadata.labels.unwrap_or_default())
}

impl Announcer {
    /// Opens what each pool needs (an L2 interface that does not exist is
    /// refused here, named) and starts following readiness and the
    /// snapshot. `kube`: Leases decide the live replicas; without, this
    /// replica owns every L2 address.
    /// `generations`: the reload loop's swaps (`Reloader::generations`),
    /// what makes the follow loop look at the snapshot again.
    pub async fn start(
        config: AnnounceConfig,
        snapshots: Arc<ArcSwap<Snapshot>>,
        generations: watch::Receiver<u64>,
        ready: Arc<AtomicBool>,
        kube: Option<KubeMembership>,
    ) -> Result<Announcer, teapot_announce::Error> {
        let local = teapot_announce::l2::local_addresses()?;
        let needs_labels = config.pools.iter().any(|p| !p.node_labels.is_empty());
        let labels = match (&kube, &config.node_name, needs_labels) {
            (Some(kube), Some(node), true) => Some(node_labels(kube, node).await?),
            (_, None, true) if kube.is_some() => {
                return Err(refused(
                    "--announce-pool node-label".into(),
                    "needs NODE_NAME (the Node this replica runs on)",
                ));
            }
            _ => None,
        };
        let allowed: Vec<bool> = config
            .pools
            .iter()
            .map(|p| p.allows(&local, labels.as_ref()))
            .collect();
        for (pool, ok) in config.pools.iter().zip(&allowed) {
            tracing::info!(pool = %pool.name, mode = pool.mode.as_str(), announcer = ok, "announce pool");
        }

        let (bgp_tx, bgp_rx) = watch::channel(BTreeSet::new());
        let speaker = match &config.speaker {
            Some(s) => Some(Speaker::start(s.clone(), bgp_rx)?),
            None => None,
        };
        let mut l2 = Vec::new();
        for (pool, ok) in config.pools.iter().zip(&allowed) {
            if pool.mode != Mode::L2 || !ok {
                continue;
            }
            let interface = pool.interface.clone().ok_or_else(|| {
                refused(
                    pool.origin.clone(),
                    "an l2 pool needs interface= (or --l2-interface)",
                )
            })?;
            // Among several replicas, what a killed run of this one left
            // on the interface goes before anything else: the next owner
            // may hold those addresses already, and the Leases that
            // would name them take a second to list. Alone (manifests
            // mode) this replica is the owner again and keeps them.
            if kube.is_some() {
                let removed =
                    teapot_announce::l2::remove_leftovers(&interface, |a| pool.contains(a))
                        .await
                        .map_err(|e| refused(pool.origin.clone(), e))?;
                for addr in removed {
                    tracing::info!(%addr, %interface, "L2 address left over from an earlier run removed");
                }
            }
            let (addrs, addrs_rx) = watch::channel(BTreeSet::new());
            let live = if kube.is_some() {
                teapot_announce::l2::Replicas::default()
            } else {
                teapot_announce::l2::Replicas::alone(&config.l2.replica)
            };
            let (replicas, replicas_rx) = watch::channel(live);
            let announcer = L2Announcer::start(
                L2Config {
                    interface: interface.clone(),
                    replica: config.l2.replica.clone(),
                    repeat_for: config.l2.repeat_for,
                },
                addrs_rx,
                replicas_rx,
            )
            .map_err(|e| refused(pool.origin.clone(), e))?;
            l2.push(L2Pool {
                pool: pool.name.clone(),
                interface,
                announcer,
                addrs,
                replicas,
            });
        }

        // Every L2 pool's owned addresses, for the Lease.
        let (owned_tx, owned_rx) = watch::channel(BTreeSet::new());
        let statuses: Vec<watch::Receiver<L2Status>> =
            l2.iter().map(|p| p.announcer.status()).collect();
        let merge = (!statuses.is_empty()).then(|| tokio::spawn(merge_owned(statuses, owned_tx)));
        let bfd = match (&config.l2.bfd, l2.first(), &kube) {
            (Some(timing), Some(first), Some(_)) => {
                match teapot_announce::l2::interface_address(&first.interface)? {
                    Some(local) => Some(crate::loops::announce::peer_liveness::LivenessConfig {
                        local,
                        port: config.l2.bfd_port,
                        timing: *timing,
                    }),
                    None => {
                        tracing::warn!(interface = %first.interface, "no address with a subnet on the L2 interface: no BFD with the other announcers, liveness by the Lease alone");
                        None
                    }
                }
            }
            _ => None,
        };
        let with_bfd = bfd.is_some();
        // A replica that may announce some L2 pool holds a Lease, to be
        // an owner; one with a BGP speaker too, to tell the status writer
        // of its sessions (its BGP pools on it, the sessions in an
        // annotation). A replica no pool allows is neither.
        let (bgp_sessions, bgp_sessions_rx) = watch::channel(BTreeMap::new());
        if let Some(speaker) = &speaker {
            tokio::spawn(crate::loops::announce::bgp_events::publish_bgp_sessions(
                speaker.statuses(),
                bgp_sessions,
            ));
        }
        let lease_pools: BTreeSet<String> = config
            .pools
            .iter()
            .zip(&allowed)
            .filter(|(p, ok)| **ok && (p.mode == Mode::L2 || speaker.is_some()))
            .map(|(p, _)| p.name.clone())
            .collect();
        // BGP alone needs no owner: its Lease only carries the sessions
        // for the status, renewed at a slower pace.
        let (renew_every, lease_duration) = if l2.is_empty() {
            (BGP_RENEW, BGP_LEASE)
        } else {
            (config.l2.renew_every, config.l2.lease_duration)
        };
        let membership = kube.as_ref().filter(|_| !lease_pools.is_empty()).map(|k| {
            Membership::start_with(
                k.client.clone(),
                MembershipConfig {
                    namespace: k.namespace.clone(),
                    replica: config.l2.replica.clone(),
                    pools: lease_pools,
                    renew_every,
                    duration: lease_duration,
                    forget_after: MembershipConfig::forget_after(lease_duration),
                    bfd,
                },
                ready.clone(),
                owned_rx,
                bgp_sessions_rx,
            )
        });
        let report = Arc::new(Mutex::new(Report::default()));
        let unpooled_seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let follow_wakes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let view = AnnounceView {
            replica: config.l2.replica.clone(),
            pools: config
                .pools
                .iter()
                .zip(&allowed)
                .map(|(p, ok)| (p.name.clone(), p.mode, *ok))
                .collect(),
            l2: l2
                .iter()
                .map(|p| (p.pool.clone(), p.interface.clone(), p.announcer.status()))
                .collect(),
            report: report.clone(),
            lease_errors: membership.as_ref().map(|m| m.errors.clone()),
            membership: membership.as_ref().map(|m| m.view()),
            unpooled_seen: unpooled_seen.clone(),
            wakes: [("follow", follow_wakes.clone())]
                .into_iter()
                .chain(
                    membership
                        .as_ref()
                        .filter(|_| with_bfd)
                        .map(|m| ("bfd-liveness", m.liveness_wakes.clone())),
                )
                .collect(),
        };
        let follow = tokio::spawn(follow(
            Follow {
                alone: kube.is_none(),
                config,
                allowed,
                bgp: bgp_tx,
                l2: l2
                    .iter()
                    .map(|p| L2Inputs {
                        pool: p.pool.clone(),
                        addrs: p.addrs.clone(),
                        replicas: p.replicas.clone(),
                        again: p.announcer.announce_again(),
                    })
                    .collect(),
                membership: membership.as_ref().map(|m| (m.view(), m.healthy())),
                report,
                unpooled_seen,
                wakes: follow_wakes,
                generations,
            },
            snapshots,
            ready,
        ));
        Ok(Announcer {
            speaker,
            l2,
            membership,
            follow,
            merge,
            view,
        })
    }

    pub fn statuses(&self) -> Option<Statuses> {
        self.speaker.as_ref().map(|s| s.statuses())
    }

    pub fn view(&self) -> AnnounceView {
        self.view.clone()
    }

    /// Stops following readiness (the shutdown's own `ready = false` must
    /// not withdraw or release ahead of the planned sequence), then runs
    /// both: BGP's graceful stop, and L2's hand-over (the Lease goes, the
    /// next owners take the addresses, then this replica removes them).
    pub async fn stop(self) {
        self.follow.abort();
        let replica = self.view.replica.clone();
        let l2 = async {
            if let Some(membership) = &self.membership {
                let mine: BTreeMap<IpAddr, String> = self
                    .l2
                    .iter()
                    .flat_map(|p| {
                        let owned = p.announcer.status().borrow().owned.clone();
                        owned.into_iter().map(|a| (a, p.pool.clone()))
                    })
                    .collect();
                membership.leave().await;
                let left = crate::loops::announce::membership::wait_handed_over(
                    membership.view(),
                    &replica,
                    &mine,
                    HAND_OVER_BOUND,
                )
                .await;
                if left.is_empty() {
                    tracing::info!(addresses = mine.len(), "L2 addresses handed over");
                } else {
                    tracing::warn!(
                        ?left,
                        "L2 addresses not taken by the next owner in time; removing them anyway"
                    );
                }
            }
            for pool in self.l2 {
                pool.announcer.stop().await;
            }
        };
        let bgp = async {
            if let Some(speaker) = self.speaker {
                speaker.stop().await;
            }
        };
        tokio::join!(l2, bgp);
        if let Some(m) = self.merge {
            m.abort();
        }
    }
}

/// Publishes the union of every L2 pool's owned addresses (what the
/// Lease carries) whenever an announcer's status changes. The same
/// receivers serve every round and each is marked seen as it is read:
/// a fresh clone per round would inherit a version never marked, and
/// `changed()` would return at once forever after the first change.
async fn merge_owned(
    mut statuses: Vec<watch::Receiver<L2Status>>,
    owned: watch::Sender<BTreeSet<IpAddr>>,
) {
    loop {
        let now: BTreeSet<IpAddr> = statuses
            .iter_mut()
            .flat_map(|s| s.borrow_and_update().owned.clone())
            .collect();
        owned.send_if_modified(|o| {
            if *o == now {
                return false;
            }
            *o = now;
            true
        });
        let changes = statuses.iter_mut().map(|s| Box::pin(s.changed()));
        if futures::future::select_all(changes).await.0.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use teapot_announce::SpeakerConfig;

    use super::*;
    use crate::loops::announce::config::{FOLLOW_EVERY, L2Options};
    use crate::loops::announce::pools::AnnouncePool;

    fn config(l4: bool) -> AnnounceConfig {
        AnnounceConfig {
            speaker: Some(SpeakerConfig::new(64501, Vec::new())),
            addresses: ["203.0.113.10".parse().unwrap()].into(),
            l4,
            pools: Vec::new(),
            l2: L2Options::default(),
            node_name: None,
        }
    }

    /// No BGP speaker; one pool.
    fn with_pool(name: &str, range: &str, mode: Mode, interface: Option<&str>) -> AnnounceConfig {
        let mut config = config(true);
        config.speaker = None;
        config.pools = vec![AnnouncePool {
            name: name.into(),
            origin: format!("--announce-pool {name}"),
            ranges: vec![range.parse().unwrap()],
            mode,
            interface: interface.map(String::from),
            subnet: None,
            node_labels: Vec::new(),
        }];
        config
    }

    /// Started ready, on an empty snapshot.
    async fn start(
        config: AnnounceConfig,
        kube: Option<KubeMembership>,
    ) -> Result<Announcer, teapot_announce::Error> {
        let snapshots = Arc::new(ArcSwap::from_pointee(Snapshot::default()));
        // No reload loop: the sender goes at once, and the follow loop
        // follows the rest.
        let generations = watch::channel(1).1;
        Announcer::start(
            config,
            snapshots,
            generations,
            Arc::new(AtomicBool::new(true)),
            kube,
        )
        .await
    }

    #[tokio::test]
    async fn an_address_in_no_pool_is_listed_counted_once_and_not_announced() {
        use crate::plane::admin::StatusSection;
        let mut config = with_pool("wan", "203.0.113.0/24", Mode::Bgp, None);
        config.addresses = ["203.0.113.10", "198.51.100.1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let announcer = start(config, None).await.unwrap();
        let view = announcer.view();
        let status = loop {
            let status = view.json();
            if !status["addresses"].as_array().unwrap().is_empty() {
                break status;
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
        };
        assert_eq!(
            status["not_in_any_pool"],
            serde_json::json!(["198.51.100.1"])
        );
        assert_eq!(status["addresses"][0]["address"], "203.0.113.10");
        assert_eq!(status["addresses"][0]["pool"], "wan");
        assert_eq!(status["addresses"][0]["mode"], "bgp");
        // Seen on every pass, counted once.
        tokio::time::sleep(FOLLOW_EVERY * 3).await;
        let metrics = view.render_prometheus();
        assert!(
            metrics.contains("teapot_announce_unpooled_addresses 1\n"),
            "{metrics}"
        );
        assert!(
            metrics.contains("teapot_announce_unpooled_total 1\n"),
            "{metrics}"
        );
        announcer.stop().await;
    }

    #[tokio::test]
    async fn a_missing_interface_is_refused_naming_the_pool_and_the_interface() {
        let config = with_pool("lan", "192.0.2.0/24", Mode::L2, Some("teapot-nope0"));
        let err = start(config, None).await.unwrap_err().to_string();
        assert!(err.contains("--announce-pool lan"), "{err}");
        assert!(err.contains("teapot-nope0"), "{err}");
    }

    #[tokio::test]
    async fn bgp_alone_in_kube_mode_holds_a_slow_lease_that_carries_its_sessions() {
        let api = teapot_testkit::apiserver::ApiServer::start().await;
        let kube = || KubeMembership {
            client: api.client(),
            namespace: "teapot-system".into(),
        };
        // A BGP pool without a speaker: nothing announced, no Lease.
        let config = with_pool("wan", "203.0.113.0/24", Mode::Bgp, None);
        let announcer = start(config.clone(), Some(kube())).await.unwrap();
        tokio::time::sleep(FOLLOW_EVERY * 5).await;
        announcer.stop().await;
        assert!(
            !api.requests().iter().any(|r| r.path.contains("leases")),
            "{:?}",
            api.requests()
        );

        // A speaker whose router accepts the connection and never answers:
        // one peer, no session established.
        let router = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = router.local_addr().unwrap().port();
        let mut config = config;
        let peer = format!("127.0.0.1,64500,port={port}").parse().unwrap();
        config.speaker = Some(SpeakerConfig::new(64501, vec![peer]));
        config.l2.replica = "lb-bgp-1".into();
        let announcer = start(config, Some(kube())).await.unwrap();
        let lease = || {
            api.get(
                "coordination.k8s.io/v1",
                "Lease",
                "teapot-system",
                "teapot-announcer-lb-bgp-1",
            )
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let written = loop {
            if let Some(l) = lease()
                && l["metadata"]["annotations"][crate::loops::announce::bgp_events::BGP_ANNOTATION]
                    .is_string()
            {
                break l;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no Lease: {:?}",
                lease()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let annotations = &written["metadata"]["annotations"];
        assert_eq!(
            annotations[crate::loops::announce::bgp_events::BGP_ANNOTATION],
            "peers=1,ipv4=0,ipv6=0"
        );
        assert_eq!(
            annotations[crate::loops::announce::membership::POOLS_ANNOTATION],
            "wan"
        );
        assert_eq!(
            annotations[crate::loops::announce::membership::LEASE_MS_ANNOTATION],
            BGP_LEASE.as_millis().to_string()
        );
        announcer.stop().await;
        assert!(lease().is_none(), "deleted on stop: {:?}", lease());
    }

    #[tokio::test]
    async fn node_labels_decide_which_pools_this_replica_announces() {
        let api = teapot_testkit::apiserver::ApiServer::start().await;
        api.apply(serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "lb-node-1", "labels": {"zone": "a"}},
        }));
        let mut config = with_pool("zone-a", "203.0.113.0/25", Mode::Bgp, None);
        let mut zone_b = config.pools[0].clone();
        zone_b.name = "zone-b".into();
        zone_b.ranges = vec!["203.0.113.128/25".parse().unwrap()];
        zone_b.node_labels = vec![("zone".into(), "b".into())];
        config.pools[0].node_labels = vec![("zone".into(), "a".into())];
        config.pools.push(zone_b);
        let kube = || KubeMembership {
            client: api.client(),
            namespace: "teapot-system".into(),
        };
        // Without NODE_NAME a labelled pool cannot be matched: refused.
        let err = start(config.clone(), Some(kube())).await.unwrap_err();
        assert!(err.to_string().contains("NODE_NAME"), "{err}");
        config.node_name = Some("lb-node-1".into());
        let announcer = start(config, Some(kube())).await.unwrap();
        use crate::plane::admin::StatusSection;
        let pools = announcer.view().json()["pools"].clone();
        assert_eq!(
            pools,
            serde_json::json!([
                {"name": "zone-a", "mode": "bgp", "announcer": true},
                {"name": "zone-b", "mode": "bgp", "announcer": false},
            ])
        );
        announcer.stop().await;
    }
}
