//! The fleet's peers found in the LB cluster (`--fleet-service
//! NAMESPACE/NAME`): replicas deployed by the chart get new Pod addresses
//! whenever they are replaced, so no list written at install stays right.
//! The exchange (crate::loops::fleet_exchange) is told the ready addresses
//! of that Service's EndpointSlices (label `kubernetes.io/service-name`),
//! both families, with the slice's port named [`PORT_NAME`] (else this
//! replica's own exchange port), this replica's own endpoint left out.
//!
//! One watch of the Service's slices, through the proxy's kube client
//! (kube's watcher with its default backoff, as the announcer Leases are
//! watched): a change of the slices wakes it, nothing else, so a fleet at
//! rest costs no CPU and no API request beyond the watch itself. The set
//! is at most [`MAX_PEERS`] addresses: past it the first [`MAX_PEERS`] in
//! address order are kept (the same ones on every replica, so the kept
//! replicas still exchange with each other), the rest left out, logged
//! and counted (`global_rate_peers_left_out`).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::live::global_counts::{GlobalMetrics, MAX_PEERS};

/// The EndpointSlice label naming the Service a slice belongs to.
pub const SERVICE_LABEL: &str = "kubernetes.io/service-name";
/// The Service port that is the exchange's.
pub const PORT_NAME: &str = "fleet";

/// Which Service lists the fleet, and how this replica knows itself in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovery {
    pub namespace: String,
    pub service: String,
    /// The port of a slice without one named [`PORT_NAME`]: this
    /// replica's own (`--fleet-listen`), the same on every replica.
    pub default_port: u16,
    /// This replica's Pod (`POD_NAME`): its endpoint is left out by its
    /// `targetRef`, whatever its addresses.
    pub own_pod: Option<String>,
    /// This replica's own addresses (`POD_IP`, `POD_IPS`): left out too
    /// (the exchange also skips its own socket address).
    pub own_addrs: Vec<IpAddr>,
}

impl Discovery {
    /// `NAMESPACE/NAME`, both DNS labels.
    pub fn parse_service(value: &str) -> Result<(String, String), String> {
        let label = |s: &str| {
            !s.is_empty()
                && s.len() <= 63
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !s.starts_with('-')
                && !s.ends_with('-')
        };
        match value.split_once('/') {
            Some((ns, name)) if label(ns) && label(name) => Ok((ns.into(), name.into())),
            _ => Err(format!(
                "--fleet-service {value:?}: NAMESPACE/NAME of a Service, both DNS labels"
            )),
        }
    }
}

/// The peers the slices name: the exchange's set, and how many more there
/// were.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chosen {
    pub peers: Vec<SocketAddr>,
    pub left_out: usize,
}

/// The ready endpoints of `slices` as exchange addresses, sorted, own
/// endpoint left out, at most [`MAX_PEERS`].
pub fn choose<'a>(slices: impl IntoIterator<Item = &'a EndpointSlice>, d: &Discovery) -> Chosen {
    let mut all = BTreeSet::new();
    for slice in slices {
        if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
            continue;
        }
        let named = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(PORT_NAME))
            .and_then(|p| p.port);
        let port = match named {
            Some(p) => match u16::try_from(p) {
                Ok(p) if p > 0 => p,
                _ => continue,
            },
            None => d.default_port,
        };
        for endpoint in slice.endpoints.iter().flatten() {
            // The API's rule: a condition left out means ready.
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if !ready {
                continue;
            }
            let own = d.own_pod.as_deref().is_some_and(|pod| {
                endpoint.target_ref.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("Pod")
                        && r.name.as_deref() == Some(pod)
                        && r.namespace.as_deref().is_none_or(|ns| ns == d.namespace)
                })
            });
            if own {
                continue;
            }
            for address in &endpoint.addresses {
                let Ok(ip) = address.parse::<IpAddr>() else {
                    continue;
                };
                let ip = ip.to_canonical();
                if d.own_addrs.iter().any(|own| own.to_canonical() == ip) {
                    continue;
                }
                all.insert(SocketAddr::new(ip, port));
            }
        }
    }
    let left_out = all.len().saturating_sub(MAX_PEERS);
    Chosen {
        peers: all.into_iter().take(MAX_PEERS).collect(),
        left_out,
    }
}

/// Watches the Service's slices and sends the peers on every change; the
/// first value is sent once the slices are listed. Ends when the receiver
/// is dropped.
pub fn spawn(
    client: kube::Client,
    discovery: Discovery,
    metrics: GlobalMetrics,
) -> (watch::Receiver<Option<Vec<SocketAddr>>>, JoinHandle<()>) {
    let (tx, rx) = watch::channel(None);
    let api: Api<EndpointSlice> = Api::namespaced(client, &discovery.namespace);
    let task = tokio::spawn(run(api, discovery, metrics, tx));
    (rx, task)
}

async fn run(
    api: Api<EndpointSlice>,
    d: Discovery,
    metrics: GlobalMetrics,
    tx: watch::Sender<Option<Vec<SocketAddr>>>,
) {
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().labels(&format!("{SERVICE_LABEL}={}", d.service));
    let stream = watcher(api, config).default_backoff().reflect(writer);
    let mut stream = std::pin::pin!(stream);
    let mut listed = false;
    let mut said_left_out = 0;
    while let Some(event) = stream.next().await {
        match event {
            Err(e) => {
                tracing::warn!(service = %format!("{}/{}", d.namespace, d.service), error = %e,
                    "fleet Service EndpointSlice watch failed; retrying with backoff");
                continue;
            }
            // A relist in progress: the store holds part of the slices.
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
            Ok(watcher::Event::InitDone) => listed = true,
            Ok(_) if !listed => continue,
            Ok(_) => {}
        }
        let slices = reader.state();
        let chosen = choose(slices.iter().map(|s| s.as_ref()), &d);
        metrics.peers_left_out.set(chosen.left_out as i64);
        if chosen.left_out > 0 && chosen.left_out != said_left_out {
            tracing::warn!(
                service = %format!("{}/{}", d.namespace, d.service),
                kept = MAX_PEERS,
                left_out = chosen.left_out,
                "the fleet's Service lists more replicas than the exchange takes; the first {MAX_PEERS} by address are kept, the others get and send no counts"
            );
        }
        said_left_out = chosen.left_out;
        let peers = chosen.peers;
        tx.send_if_modified(|current| {
            if current.as_ref() == Some(&peers) {
                return false;
            }
            tracing::info!(peers = ?peers, "fleet peers from the Service's EndpointSlices");
            *current = Some(peers);
            true
        });
        if tx.is_closed() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;
    use teapot_testkit::apiserver::ApiServer;

    const NS: &str = "teapot-system";

    fn discovery() -> Discovery {
        Discovery {
            namespace: NS.into(),
            service: "lb-fleet".into(),
            default_port: 7946,
            own_pod: Some("proxy-a".into()),
            own_addrs: vec!["10.0.0.1".parse().unwrap()],
        }
    }

    /// An EndpointSlice of `service`: (pod, address, ready) endpoints.
    fn slice(
        name: &str,
        service: &str,
        family: &str,
        port: Option<(&str, u16)>,
        endpoints: &[(&str, &str, bool)],
    ) -> serde_json::Value {
        let endpoints: Vec<_> = endpoints
            .iter()
            .map(|(pod, addr, ready)| {
                json!({
                    "addresses": [addr],
                    "conditions": {"ready": ready},
                    "targetRef": {"kind": "Pod", "name": pod, "namespace": NS},
                })
            })
            .collect();
        let ports = match port {
            Some((name, port)) => json!([{"name": name, "port": port, "protocol": "UDP"}]),
            None => json!([]),
        };
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": NS, "labels": {SERVICE_LABEL: service}},
            "addressType": family,
            "endpoints": endpoints,
            "ports": ports,
        })
    }

    fn typed(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    /// Ready endpoints of both families with the port named `fleet`, or
    /// the own port without one; not-ready ones and this replica's own
    /// (by Pod or by address) left out; past MAX_PEERS the first by
    /// address kept and the rest counted.
    #[test]
    fn ready_addresses_minus_own_at_most_max_peers() {
        let d = discovery();
        let v4 = typed(slice(
            "a",
            "lb-fleet",
            "IPv4",
            Some(("fleet", 7000)),
            &[
                ("proxy-a", "10.0.0.9", true),
                ("proxy-x", "10.0.0.1", true),
                ("proxy-b", "10.0.0.2", true),
                ("proxy-c", "10.0.0.3", false),
            ],
        ));
        let v6 = typed(slice(
            "b",
            "lb-fleet",
            "IPv6",
            None,
            &[("proxy-b", "fd00::2", true)],
        ));
        let fqdn = typed(slice(
            "c",
            "lb-fleet",
            "FQDN",
            None,
            &[("proxy-d", "example.com", true)],
        ));
        let chosen = choose([&v4, &v6, &fqdn], &d);
        assert_eq!(
            chosen,
            Chosen {
                peers: addrs(&["10.0.0.2:7000", "[fd00::2]:7946"]),
                left_out: 0,
            }
        );
        let many: Vec<(String, String)> = (0..MAX_PEERS + 3)
            .map(|i| (format!("p{i}"), format!("10.1.{}.{}", i / 200, i % 200 + 1)))
            .collect();
        let many: Vec<(&str, &str, bool)> = many
            .iter()
            .map(|(p, a)| (p.as_str(), a.as_str(), true))
            .collect();
        let big = typed(slice("d", "lb-fleet", "IPv4", None, &many));
        let chosen = choose([&big], &d);
        assert_eq!(chosen.peers.len(), MAX_PEERS);
        assert_eq!(chosen.left_out, 3);
        let mut sorted = chosen.peers.clone();
        sorted.sort();
        assert_eq!(chosen.peers, sorted);
        assert_eq!(chosen.peers[0], "10.1.0.1:7946".parse().unwrap());
    }

    #[test]
    fn service_names_are_checked() {
        assert_eq!(
            Discovery::parse_service("teapot-system/lb-fleet"),
            Ok(("teapot-system".into(), "lb-fleet".into()))
        );
        for bad in ["lb-fleet", "/x", "x/", "a/b/c", "A/b", "a/-b"] {
            assert!(Discovery::parse_service(bad).is_err(), "{bad}");
        }
    }

    /// Waits (at most 10 s) for the peers to become `want`.
    async fn peers_become(rx: &mut watch::Receiver<Option<Vec<SocketAddr>>>, want: &[&str]) {
        let want = addrs(want);
        let reached = tokio::time::timeout(
            Duration::from_secs(10),
            rx.wait_for(|p| p.as_ref() == Some(&want)),
        )
        .await
        .is_ok();
        assert!(reached, "peers {want:?}, have {:?}", *rx.borrow());
    }

    /// Through the API double: the peers follow the Service's slices as
    /// they are added, as a replica goes not ready and when a slice goes;
    /// another Service's slices are not read; past MAX_PEERS the gauge
    /// counts those left out.
    #[tokio::test]
    async fn peers_follow_the_services_slices() {
        let api = ApiServer::start().await;
        let metrics = crate::live::global_counts::GlobalCounts::default()
            .metrics
            .clone();
        api.apply(slice(
            "other",
            "another-service",
            "IPv4",
            None,
            &[("x", "10.9.9.9", true)],
        ));
        let (mut rx, task) = spawn(api.client(), discovery(), metrics.clone());
        // Listed: nothing of the fleet's yet, the other Service's ignored.
        peers_become(&mut rx, &[]).await;
        api.apply(slice(
            "fleet-v4",
            "lb-fleet",
            "IPv4",
            Some(("fleet", 7946)),
            &[
                ("proxy-a", "10.0.0.1", true),
                ("proxy-b", "10.0.0.2", true),
                ("proxy-c", "10.0.0.3", true),
            ],
        ));
        peers_become(&mut rx, &["10.0.0.2:7946", "10.0.0.3:7946"]).await;
        api.apply(slice(
            "fleet-v6",
            "lb-fleet",
            "IPv6",
            Some(("fleet", 7946)),
            &[("proxy-b", "fd00::2", true)],
        ));
        peers_become(
            &mut rx,
            &["10.0.0.2:7946", "10.0.0.3:7946", "[fd00::2]:7946"],
        )
        .await;
        // proxy-c goes not ready: out of the set.
        api.apply(slice(
            "fleet-v4",
            "lb-fleet",
            "IPv4",
            Some(("fleet", 7946)),
            &[
                ("proxy-a", "10.0.0.1", true),
                ("proxy-b", "10.0.0.2", true),
                ("proxy-c", "10.0.0.3", false),
            ],
        ));
        peers_become(&mut rx, &["10.0.0.2:7946", "[fd00::2]:7946"]).await;
        assert!(api.delete("discovery.k8s.io/v1", "EndpointSlice", NS, "fleet-v6"));
        peers_become(&mut rx, &["10.0.0.2:7946"]).await;
        assert_eq!(metrics.peers_left_out.get(), 0);
        // More replicas than the exchange takes.
        let many: Vec<(String, String)> = (0..MAX_PEERS + 2)
            .map(|i| (format!("p{i}"), format!("10.2.0.{}", i + 1)))
            .collect();
        let many: Vec<(&str, &str, bool)> = many
            .iter()
            .map(|(p, a)| (p.as_str(), a.as_str(), true))
            .collect();
        api.apply(slice("fleet-v4", "lb-fleet", "IPv4", None, &many));
        tokio::time::timeout(
            Duration::from_secs(10),
            rx.wait_for(|p| p.as_ref().is_some_and(|p| p.len() == MAX_PEERS)),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(metrics.peers_left_out.get(), 2);
        drop(rx);
        task.abort();
    }
}
