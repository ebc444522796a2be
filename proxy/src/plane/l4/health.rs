//! Active TCP health checks of the endpoints of TCP listeners.
//!
//! A probe is a TCP connect, closed at once. After `unhealthy_threshold`
//! consecutive failures the endpoint is ejected through
//! [`crate::live::endpoints::Endpoint::eject`] (and again after each further
//! failure, so it stays out while it keeps failing); after
//! `healthy_threshold` consecutive successes it is cleared. Passive
//! ejection (a refused client connect) acts at once in between, so a dead
//! node stops getting new connections at the first refused connect, and at
//! the latest after `interval × unhealthy_threshold` plus one probe timeout
//! (3 s by default) when it silently drops packets.
//!
//! UDP listeners have no check of their own: a UDP port says nothing when
//! it is up, and probing a TCP port the Service does not declare could hit
//! something else. Their endpoints are ejected by ICMP port-unreachable
//! (passively), and new flows avoid a **down node**: an address all of
//! whose probed TCP endpoints fail their checks. In nodeport mode every
//! Service shares the node addresses, so a node that died is seen by the
//! TCP checks of any Service on it.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use crate::compile::l4::pool::Protocol;
use crate::compile::l4::table::{HealthOptions, L4Table};
use crate::live::endpoints::Endpoint;

/// Which node addresses look dead to the TCP checks.
#[derive(Debug, Default)]
pub struct NodeHealth {
    /// Probed endpoint -> failing its checks.
    failing: Mutex<HashMap<SocketAddr, bool>>,
    /// Addresses all of whose probed endpoints fail; read per new flow.
    down: RwLock<HashSet<IpAddr>>,
}

impl NodeHealth {
    pub fn is_down(&self, ip: IpAddr) -> bool {
        self.down.read().contains(&ip)
    }

    fn set(&self, endpoint: SocketAddr, failing: bool) {
        let mut states = self.failing.lock();
        if states.insert(endpoint, failing) != Some(failing) {
            self.recompute(&states);
        }
    }

    fn forget(&self, endpoint: &SocketAddr) {
        let mut states = self.failing.lock();
        if states.remove(endpoint).is_some() {
            self.recompute(&states);
        }
    }

    fn recompute(&self, states: &HashMap<SocketAddr, bool>) {
        let mut up: HashSet<IpAddr> = HashSet::new();
        let mut seen: HashSet<IpAddr> = HashSet::new();
        for (addr, failing) in states {
            seen.insert(addr.ip());
            if !failing {
                up.insert(addr.ip());
            }
        }
        *self.down.write() = seen.difference(&up).copied().collect();
    }
}

/// The running checks, one per endpoint address.
#[derive(Debug, Default)]
pub struct HealthChecks {
    checks: HashMap<SocketAddr, (HealthOptions, JoinHandle<()>)>,
}

impl Drop for HealthChecks {
    fn drop(&mut self) {
        for (_, (_, task)) in self.checks.drain() {
            task.abort();
        }
    }
}

impl HealthChecks {
    /// Starts checks for new endpoints, stops those of removed ones, and
    /// restarts those whose settings changed. An endpoint used by several
    /// listeners is probed at the shortest interval among them.
    pub(super) fn reconcile(
        &mut self,
        table: &L4Table,
        nodes: &Arc<NodeHealth>,
        connect_timeout: Duration,
    ) {
        let mut want: HashMap<SocketAddr, (HealthOptions, Arc<Endpoint>)> = HashMap::new();
        for (key, route) in &table.listeners {
            if key.protocol != Protocol::Tcp {
                continue;
            }
            for e in route.upstream.endpoints.load().iter() {
                let opts = route.options.health;
                want.entry(e.addr)
                    .and_modify(|(o, _)| {
                        if opts.interval < o.interval {
                            *o = opts;
                        }
                    })
                    .or_insert((opts, e.clone()));
            }
        }
        self.checks.retain(|addr, (opts, task)| {
            let keep = want.get(addr).is_some_and(|(o, _)| o == opts);
            if !keep {
                task.abort();
                nodes.forget(addr);
            }
            keep
        });
        for (addr, (opts, endpoint)) in want {
            if self.checks.contains_key(&addr) {
                continue;
            }
            let timeout = opts.interval.min(connect_timeout);
            let task = tokio::spawn(probe_loop(endpoint, opts, timeout, nodes.clone()));
            self.checks.insert(addr, (opts, task));
        }
    }
}

async fn probe_loop(
    endpoint: Arc<Endpoint>,
    opts: HealthOptions,
    timeout: Duration,
    nodes: Arc<NodeHealth>,
) {
    let mut tick = tokio::time::interval(opts.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut failures, mut successes, mut down) = (0u32, 0u32, false);
    loop {
        tick.tick().await;
        let ok = matches!(
            tokio::time::timeout(timeout, TcpStream::connect(endpoint.addr)).await,
            Ok(Ok(_))
        );
        if ok {
            failures = 0;
            successes = successes.saturating_add(1);
            if down && successes >= opts.healthy_threshold {
                endpoint.mark_healthy();
                nodes.set(endpoint.addr, false);
                down = false;
                tracing::info!(endpoint = %endpoint.addr, "L4 endpoint passes its health checks again");
            }
        } else {
            successes = 0;
            failures = failures.saturating_add(1);
            if failures >= opts.unhealthy_threshold {
                endpoint.eject();
                if !down {
                    down = true;
                    nodes.set(endpoint.addr, true);
                    tracing::warn!(endpoint = %endpoint.addr, failures,
                        "L4 endpoint failed its health checks; ejected");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::endpoints::EndpointRegistry;

    /// Polls `check` every 20 ms for at most 30 s (never a timing assertion:
    /// the bound only stops a broken test).
    async fn eventually(what: &str, check: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !check() {
            assert!(tokio::time::Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn failing_probes_eject_and_passing_probes_restore() {
        // A port nobody listens on, then somebody does.
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let registry = EndpointRegistry::default();
        let endpoint = registry.endpoint(addr);
        let opts = HealthOptions {
            interval: Duration::from_millis(50),
            unhealthy_threshold: 2,
            healthy_threshold: 2,
        };
        let nodes = Arc::new(NodeHealth::default());
        let task = tokio::spawn(probe_loop(
            endpoint.clone(),
            opts,
            Duration::from_secs(1),
            nodes.clone(),
        ));
        eventually("ejected", || endpoint.is_ejected()).await;
        eventually("node down", || nodes.is_down(addr.ip())).await;
        let _listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        eventually("restored", || !endpoint.is_ejected()).await;
        assert!(!nodes.is_down(addr.ip()));
        task.abort();
    }

    #[test]
    fn a_node_is_down_only_when_all_its_probed_endpoints_fail() {
        let nodes = NodeHealth::default();
        let a: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let b: SocketAddr = "10.0.0.1:443".parse().unwrap();
        nodes.set(a, true);
        assert!(nodes.is_down(a.ip()));
        nodes.set(b, false);
        assert!(!nodes.is_down(a.ip()), "one endpoint still answers");
        nodes.set(b, true);
        assert!(nodes.is_down(a.ip()));
        nodes.forget(&a);
        nodes.forget(&b);
        assert!(!nodes.is_down(a.ip()), "nothing probed, nothing known");
    }
}
