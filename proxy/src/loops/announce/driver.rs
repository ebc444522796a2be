//! Makes this replica's addresses reachable (docs/announce.md): the
//! fleet's own addresses and every allocated L4 address, each by the pool
//! containing it, in that pool's mode, through the announcers
//! ([`teapot_announce::Announcer`]) started once here:
//!
//! - BGP: one `teapot_announce::Speaker` for every BGP pool this replica
//!   may announce. It announces while the replica is ready and withdraws
//!   when it is not. On shutdown its graceful stop (GRACEFUL_SHUTDOWN, a
//!   wait, the withdrawal) runs before the drain, so routers move new
//!   connections away while requests still finish.
//! - L2: one `teapot_announce::l2::L2Announcer` per pool puts the
//!   addresses this replica owns on the pool's interface. Ownership is the
//!   rendezvous hash over the live replicas ([`super::membership`]: a
//!   Lease per replica in kube mode; in manifests mode this replica
//!   alone). On shutdown the replica deletes its Lease, waits until the
//!   next owners list its addresses, and only then removes them: the new
//!   owner answers ARP before the old one stops.
//!
//! After the start nothing here asks which mode an announcer is: the
//! follow loop hands each its addresses, `/status` reads what each holds
//! and which have sessions, the stop stops them all, and what differs is
//! a property of the mode ([`teapot_announce::Mode::has_owner`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use teapot_announce::l2::{L2Announcer, L2Config, Replicas};
use teapot_announce::{Held, Speaker, Statuses};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::config::{AnnounceConfig, BGP_LEASE, BGP_RENEW, HAND_OVER_BOUND, KubeMembership};
use super::follow::{Follow, Running, follow};
use super::membership::{Membership, MembershipConfig};
use super::pools::{AnnouncePool, Mode};
use super::view::{AnnounceView, Report};
use crate::compile::snapshot::Snapshot;

/// The announcement: its announcers, the membership and the loops that
/// feed them.
#[derive(Debug)]
pub struct Announcement {
    /// Shared with the follow loop while it runs; whole again once it is
    /// stopped, for the announcers' own stop.
    announcers: Vec<Arc<Running>>,
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

/// Starts the announcers this replica runs: a BGP speaker for the BGP
/// pools it may announce (with `--bgp-peer`), and an L2 announcer on the
/// interface of each L2 pool it may announce. An L2 interface that does
/// not exist is refused here, named.
async fn start_announcers(
    config: &AnnounceConfig,
    allowed: &[bool],
    in_kube: bool,
) -> Result<Vec<Running>, teapot_announce::Error> {
    let mut running = Vec::new();
    if let Some(speaker) = &config.speaker {
        let pools = (0..config.pools.len())
            .filter(|i| config.pools[*i].mode == Mode::Bgp && allowed[*i])
            .collect();
        running.push(Running {
            pools,
            interface: None,
            announcer: Box::new(Speaker::start(speaker.clone(), BTreeSet::new())?),
        });
    }
    for (i, pool) in config.pools.iter().enumerate() {
        if pool.mode != Mode::L2 || !allowed[i] {
            continue;
        }
        let interface = pool.interface.clone().ok_or_else(|| {
            refused(
                pool.origin.clone(),
                "an l2 pool needs interface= (or --l2-interface)",
            )
        })?;
        // Among several replicas, what a killed run of this one left on
        // the interface goes before anything else: the next owner may hold
        // those addresses already, and the Leases that would name them
        // take a second to list. Alone (manifests mode) this replica is
        // the owner again and keeps them.
        if in_kube {
            remove_leftovers(pool, &interface).await?;
        }
        let live = if in_kube {
            Replicas::default()
        } else {
            Replicas::alone(&config.l2.replica)
        };
        let announcer = L2Announcer::start(
            L2Config {
                interface: interface.clone(),
                replica: config.l2.replica.clone(),
                repeat_for: config.l2.repeat_for,
            },
            BTreeSet::new(),
            live,
        )
        .map_err(|e| refused(pool.origin.clone(), e))?;
        running.push(Running {
            pools: vec![i],
            interface: Some(interface),
            announcer: Box::new(announcer),
        });
    }
    Ok(running)
}

async fn remove_leftovers(
    pool: &AnnouncePool,
    interface: &str,
) -> Result<(), teapot_announce::Error> {
    let removed = teapot_announce::l2::remove_leftovers(interface, |a| pool.contains(a))
        .await
        .map_err(|e| refused(pool.origin.clone(), e))?;
    for addr in removed {
        tracing::info!(%addr, %interface, "L2 address left over from an earlier run removed");
    }
    Ok(())
}

impl Announcement {
    /// Starts the announcers each pool needs and following readiness and
    /// the snapshot. `kube`: Leases decide the live replicas; without,
    /// this replica owns every L2 address.
    /// `generations`: the reload loop's swaps (`Reloader::generations`),
    /// what makes the follow loop look at the snapshot again.
    pub async fn start(
        config: AnnounceConfig,
        snapshots: Arc<ArcSwap<Snapshot>>,
        generations: watch::Receiver<u64>,
        ready: Arc<AtomicBool>,
        kube: Option<KubeMembership>,
    ) -> Result<Announcement, teapot_announce::Error> {
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

        let running = start_announcers(&config, &allowed, kube.is_some()).await?;
        let owners: Vec<&Running> = running
            .iter()
            .filter(|r| r.announcer.mode().has_owner())
            .collect();
        // What every owner holds, for the Lease.
        let (owned_tx, owned_rx) = watch::channel(BTreeSet::new());
        let held: Vec<watch::Receiver<Held>> = owners.iter().map(|r| r.announcer.held()).collect();
        let merge = (!held.is_empty()).then(|| tokio::spawn(merge_owned(held, owned_tx)));
        let bfd = match (
            &config.l2.bfd,
            owners.first().and_then(|r| r.interface.as_ref()),
            &kube,
        ) {
            (Some(timing), Some(interface), Some(_)) => {
                match teapot_announce::l2::interface_address(interface)? {
                    Some(local) => Some(super::peer_liveness::LivenessConfig {
                        local,
                        port: config.l2.bfd_port,
                        timing: *timing,
                    }),
                    None => {
                        tracing::warn!(%interface, "no address with a subnet on the L2 interface: no BFD with the other announcers, liveness by the Lease alone");
                        None
                    }
                }
            }
            _ => None,
        };
        let with_bfd = bfd.is_some();
        // The announcers' sessions (BGP), one list.
        let sessions: Option<Statuses> = {
            let all: Vec<_> = running
                .iter()
                .filter_map(|r| r.announcer.sessions())
                .collect();
            (!all.is_empty()).then(|| Statuses::from(all.concat()))
        };
        // A replica with an announcer for some pool holds a Lease naming
        // the pools: an owner among the others (L2), or to tell the status
        // writer of its sessions (BGP, in an annotation). A replica no
        // pool allows, or with nothing to announce them with, is neither.
        let (bgp_sessions, bgp_sessions_rx) = watch::channel(BTreeMap::new());
        if let Some(sessions) = &sessions {
            tokio::spawn(super::bgp_events::publish_bgp_sessions(
                sessions.clone(),
                bgp_sessions,
            ));
        }
        let lease_pools: BTreeSet<String> = running
            .iter()
            .flat_map(|r| r.pools.iter().map(|i| config.pools[*i].name.clone()))
            .collect();
        // Without an owner to move, the Lease only carries the sessions
        // for the status, renewed at a slower pace.
        let (renew_every, lease_duration) = if owners.is_empty() {
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
            l2: running
                .iter()
                .filter_map(|r| {
                    let interface = r.interface.clone()?;
                    let pool = config.pools[*r.pools.first()?].name.clone();
                    Some((pool, interface, r.announcer.held()))
                })
                .collect(),
            sessions,
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
        let announcers: Vec<Arc<Running>> = running.into_iter().map(Arc::new).collect();
        let follow = tokio::spawn(follow(
            Follow {
                alone: kube.is_none(),
                config,
                allowed,
                announcers: announcers.clone(),
                membership: membership.as_ref().map(|m| (m.view(), m.healthy())),
                report,
                unpooled_seen,
                wakes: follow_wakes,
                generations,
            },
            snapshots,
            ready,
        ));
        Ok(Announcement {
            announcers,
            membership,
            follow,
            merge,
            view,
        })
    }

    /// The sessions of the announcers that have them (BGP), for the
    /// Events on this replica's Pod.
    pub fn statuses(&self) -> Option<Statuses> {
        self.view.sessions.clone()
    }

    pub fn view(&self) -> AnnounceView {
        self.view.clone()
    }

    /// Stops following readiness (the shutdown's own `ready = false` must
    /// not withdraw or release ahead of the planned sequence), then stops
    /// every announcer at once, an owner only after its hand-over (the
    /// Lease goes, the next owners take the addresses, then this replica
    /// removes them): BGP's graceful stop runs beside it.
    pub async fn stop(self) {
        self.follow.abort();
        // The loop's own references go with it.
        let _ = self.follow.await;
        let replica = self.view.replica.clone();
        let (owners, others): (Vec<Running>, Vec<Running>) = self
            .announcers
            .into_iter()
            .filter_map(Arc::into_inner)
            .partition(|r| r.announcer.mode().has_owner());
        let membership = self.membership;
        let pools = self.view.l2.clone();
        let owners = async {
            if let Some(membership) = &membership {
                let mine: BTreeMap<IpAddr, String> = pools
                    .iter()
                    .flat_map(|(pool, _, held)| {
                        let owned = held.borrow().owned.clone();
                        owned.into_iter().map(|a| (a, pool.clone()))
                    })
                    .collect();
                membership.leave().await;
                let left = super::membership::wait_handed_over(
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
            for r in owners {
                r.announcer.stop().await;
            }
        };
        let others = futures::future::join_all(others.into_iter().map(|r| r.announcer.stop()));
        tokio::join!(owners, others);
        if let Some(m) = self.merge {
            m.abort();
        }
    }
}

/// Publishes the union of every owner's held addresses (what the Lease
/// carries) whenever one changes. The same receivers serve every round
/// and each is marked seen as it is read: a fresh clone per round would
/// inherit a version never marked, and `changed()` would return at once
/// forever after the first change.
async fn merge_owned(mut held: Vec<watch::Receiver<Held>>, owned: watch::Sender<BTreeSet<IpAddr>>) {
    loop {
        let now: BTreeSet<IpAddr> = held
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
        let changes = held.iter_mut().map(|s| Box::pin(s.changed()));
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
    use crate::loops::announce::config::FOLLOW_EVERY;
    use crate::loops::announce::config::tests::config;
    use crate::loops::announce::pools::AnnouncePool;

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

    /// `/status`'s `announce` object.
    fn announce_json(view: &AnnounceView) -> serde_json::Value {
        use crate::plane::admin::StatusSection;
        let sections = view.json();
        let (_, announce) = sections.iter().find(|(k, _)| *k == "announce").unwrap();
        announce.clone()
    }

    /// Started ready, on an empty snapshot.
    async fn start(
        config: AnnounceConfig,
        kube: Option<KubeMembership>,
    ) -> Result<Announcement, teapot_announce::Error> {
        let snapshots = Arc::new(ArcSwap::from_pointee(Snapshot::default()));
        // No reload loop: the sender goes at once, and the follow loop
        // follows the rest.
        let generations = watch::channel(1).1;
        Announcement::start(
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
            let status = announce_json(&view);
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
        let pools = announce_json(&announcer.view())["pools"].clone();
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
