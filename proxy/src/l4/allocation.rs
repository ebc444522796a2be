//! Address allocation: which pool address each LoadBalancer Service
//! listens on.
//!
//! A Service gets one address for all its ports (that is what
//! `status.loadBalancer.ingress[].ip` means); each port becomes the
//! listener `(address, port, protocol)`, unique across the fleet.
//! Allocation is a pure function of the pools, the previous holdings and
//! the Services in age order:
//!
//! 1. held: a Service keeps the address it had **and every listener it was
//!    granted** (state file in manifests mode; its own `status` in kube
//!    mode), whatever its age, so nothing moves on a re-compile, a restart
//!    or when another Service appears, grows or fails;
//! 2. added: a port a Service adds to its held address is granted when
//!    free there, and refused on that Service alone when another holds it.
//!    Age never takes a held listener: an older Service that adds a port a
//!    younger one holds is refused that port (docs/l4.md, "Allocation");
//! 3. requests: `spec.loadBalancerIP` (refused when not in the pool or
//!    taken);
//! 4. new: the first pool address where every port of the Service is free.
//!
//! Refusals never name a Service of another namespace: in a shared pool that
//! would tell one tenant about another's objects.
//!
//! Replicas given the same objects and state compute the same answer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::pool::{ListenerKey, Pool, Protocol};
use crate::store::NsName;

/// One `(port, protocol)` pair of a Service.
pub type PortKey = (u16, Protocol);

/// What a Service holds: its address and the listeners it was granted
/// there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    pub addr: IpAddr,
    /// The `(port, protocol)` pairs granted on `addr`. `None` when only the
    /// address is known (a version-1 state file, a status written without
    /// ports): then every port the Service claims counts as held, after
    /// all holdings whose ports are known.
    pub ports: Option<BTreeSet<PortKey>>,
}

impl Holding {
    fn holds(&self, port: PortKey) -> bool {
        self.ports.as_ref().is_none_or(|p| p.contains(&port))
    }
}

/// One Service asking for listeners.
#[derive(Clone, Debug)]
pub struct Claim<'a> {
    pub service: &'a NsName,
    pub pool: &'a str,
    /// Distinct `(port, protocol)` pairs.
    pub ports: Vec<PortKey>,
    /// `spec.loadBalancerIP`: the Service gets this address or none.
    pub requested: Option<IpAddr>,
    /// What `status.loadBalancer` says the Service holds (kube mode, after a
    /// restart): kept when every listener in it is still free.
    pub hint: Option<Holding>,
}

/// What a claim got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Allocated {
        addr: IpAddr,
        /// Ports of the Service that another Service holds on this address
        /// (possible only when a Service added a port to its address).
        refused_ports: Vec<(PortKey, String)>,
    },
    Refused {
        /// A condition reason: `PoolNotFound`, `AddressNotInPool`,
        /// `AddressTaken` or `PoolExhausted`.
        reason: &'static str,
        message: String,
    },
}

/// Who holds a listener, as told to `claimant`: a Service of its own
/// namespace by name, any other as "another Service".
fn holder_for(claimant: &NsName, holder: &NsName) -> String {
    if holder.namespace == claimant.namespace {
        format!("Service {holder}")
    } else {
        "another Service".to_string()
    }
}

/// The allocation in progress: who holds which listener, and what each
/// claim has got so far.
struct Table<'c, 'a> {
    claims: &'c [Claim<'a>],
    taken: HashMap<ListenerKey, usize>,
    addr: Vec<Option<IpAddr>>,
    refused_ports: Vec<Vec<(PortKey, String)>>,
    out: Vec<Option<Outcome>>,
}

impl<'c, 'a> Table<'c, 'a> {
    fn key(addr: IpAddr, (port, protocol): PortKey) -> ListenerKey {
        ListenerKey {
            addr,
            port,
            protocol,
        }
    }

    /// The first of `ports` that another claim holds on `addr`.
    fn busy(&self, addr: IpAddr, ports: impl IntoIterator<Item = PortKey>) -> Option<ListenerKey> {
        ports
            .into_iter()
            .map(|p| Self::key(addr, p))
            .find(|k| self.taken.contains_key(k))
    }

    fn take(&mut self, i: usize, addr: IpAddr, ports: impl IntoIterator<Item = PortKey>) {
        self.addr[i] = Some(addr);
        for p in ports {
            self.taken.insert(Self::key(addr, p), i);
        }
    }

    /// Grants each of `ports` on claim `i`'s address when free; refuses
    /// the others on claim `i` alone.
    fn grant_or_refuse(&mut self, i: usize, ports: Vec<PortKey>) {
        let Some(addr) = self.addr[i] else { return };
        for p in ports {
            if self.refused_ports[i].iter().any(|(q, _)| *q == p) {
                continue;
            }
            let key = Self::key(addr, p);
            match self.taken.get(&key) {
                Some(&holder) if holder == i => {}
                Some(&holder) => {
                    let who = holder_for(self.claims[i].service, self.claims[holder].service);
                    self.refused_ports[i].push((p, format!("{key} is held by {who}")));
                }
                None => {
                    self.taken.insert(key, i);
                }
            }
        }
    }

    fn refuse(&mut self, i: usize, reason: &'static str, message: String) {
        self.out[i] = Some(Outcome::Refused { reason, message });
    }

    fn open(&self, i: usize) -> bool {
        self.addr[i].is_none() && self.out[i].is_none()
    }
}

/// Allocates addresses to `claims` (oldest first). `previous` maps a
/// Service to what it held.
pub fn allocate(
    pools: &[Pool],
    previous: &BTreeMap<NsName, Holding>,
    claims: &[Claim<'_>],
) -> Vec<Outcome> {
    let mut t = Table {
        claims,
        taken: HashMap::new(),
        addr: vec![None; claims.len()],
        refused_ports: vec![Vec::new(); claims.len()],
        out: vec![None; claims.len()],
    };
    let pool_of = |c: &Claim<'_>| pools.iter().find(|p| p.name == c.pool);
    for (i, c) in claims.iter().enumerate() {
        if pool_of(c).is_none() {
            t.refuse(
                i,
                "PoolNotFound",
                format!("address pool {:?} is not configured on this proxy", c.pool),
            );
        }
    }
    // What each claim held: its own previous answer, else its status. A new
    // loadBalancerIP moves the Service (requests, below).
    let held: Vec<Option<(&Holding, bool)>> = claims
        .iter()
        .map(|c| {
            let pool = pool_of(c)?;
            let usable =
                |h: &Holding| pool.contains(h.addr) && c.requested.is_none_or(|r| r == h.addr);
            match previous.get(c.service) {
                Some(h) if usable(h) => Some((h, true)),
                _ => c.hint.as_ref().filter(|h| usable(h)).map(|h| (h, false)),
            }
        })
        .collect();
    let held_ports = |i: usize, h: &Holding| -> Vec<PortKey> {
        claims[i]
            .ports
            .iter()
            .copied()
            .filter(|&p| h.holds(p))
            .collect()
    };

    // Held listeners, in tiers so that a listener whose holder is known
    // always beats a guess: remembered ports, status ports, then remembered
    // addresses whose ports are not known. A remembered holding keeps its
    // address even where (after a bad state file) some of its ports
    // collide; a status hint is kept only whole.
    let keep_held = |t: &mut Table<'_, '_>, remembered: bool, ports_known: bool| {
        for (i, h) in held.iter().enumerate() {
            let Some((h, from_memory)) = *h else { continue };
            if from_memory != remembered || h.ports.is_some() != ports_known || !t.open(i) {
                continue;
            }
            let ports = held_ports(i, h);
            if from_memory {
                t.addr[i] = Some(h.addr);
                t.grant_or_refuse(i, ports);
            } else if t.busy(h.addr, ports.iter().copied()).is_none() {
                t.take(i, h.addr, ports);
            }
        }
    };
    keep_held(&mut t, true, true);
    keep_held(&mut t, false, true);
    keep_held(&mut t, true, false);

    // Ports added to a held address: free ones are granted, the others
    // refused on the Service that added them, whatever its age.
    for (i, c) in claims.iter().enumerate() {
        if t.addr[i].is_some() {
            t.grant_or_refuse(i, c.ports.clone());
        }
    }

    for (i, c) in claims.iter().enumerate() {
        let Some(addr) = c.requested else { continue };
        if !t.open(i) {
            continue;
        }
        let pool = pool_of(c).expect("claims without a pool are refused");
        if !pool.contains(addr) {
            t.refuse(
                i,
                "AddressNotInPool",
                format!(
                    "spec.loadBalancerIP {addr} is not in address pool {:?}",
                    pool.name
                ),
            );
        } else if let Some(busy) = t.busy(addr, c.ports.iter().copied()) {
            let who = holder_for(c.service, claims[t.taken[&busy]].service);
            t.refuse(
                i,
                "AddressTaken",
                format!("spec.loadBalancerIP {addr}: {busy} is held by {who}"),
            );
        } else {
            t.take(i, addr, c.ports.iter().copied());
        }
    }

    // A status that names an address but no ports (written before ports
    // were recorded) is only a hint: used when the address is free.
    keep_held(&mut t, false, false);

    for (i, c) in claims.iter().enumerate() {
        if !t.open(i) {
            continue;
        }
        let pool = pool_of(c).expect("claims without a pool are refused");
        let found = pool
            .addresses
            .iter()
            .copied()
            .find(|&a| t.busy(a, c.ports.iter().copied()).is_none());
        match found {
            Some(addr) => t.take(i, addr, c.ports.iter().copied()),
            None => {
                let ports: Vec<String> = c
                    .ports
                    .iter()
                    .map(|(p, proto)| format!("{p}/{proto}"))
                    .collect();
                t.refuse(
                    i,
                    "PoolExhausted",
                    format!(
                        "address pool {:?} is full: none of its {} addresses has {} free",
                        pool.name,
                        pool.addresses.len(),
                        ports.join(", ")
                    ),
                );
            }
        }
    }

    let Table {
        addr,
        mut refused_ports,
        out,
        ..
    } = t;
    out.into_iter()
        .enumerate()
        .map(|(i, o)| {
            o.unwrap_or_else(|| Outcome::Allocated {
                addr: addr[i].expect("every open claim got an address or a refusal"),
                refused_ports: std::mem::take(&mut refused_ports[i]),
            })
        })
        .collect()
}

/// The persisted form: what each Service holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct StateFile {
    version: u32,
    /// `namespace/name` -> what it holds.
    allocations: BTreeMap<String, StateEntry>,
}

/// Version 2 records the listeners; version 1 (an address alone) is still
/// read, its ports counted as held after every known holding.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum StateEntry {
    Held {
        address: IpAddr,
        ports: Vec<StatePort>,
    },
    Address(IpAddr),
}

#[derive(Debug, Serialize, Deserialize)]
struct StatePort {
    port: u16,
    protocol: Protocol,
}

/// Why the state file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("L4 state file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "L4 state file {path} is not valid ({source}); fix or remove it (removing it may move Services to other addresses)"
    )]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// Allocation with memory: the previous answer, kept in a state file when
/// one is configured.
#[derive(Debug)]
pub struct Allocator {
    pools: Vec<Pool>,
    state_file: Option<PathBuf>,
    current: Mutex<BTreeMap<NsName, Holding>>,
}

impl Allocator {
    /// Reads the state file if it exists. A file that exists but does not
    /// parse stops the proxy: starting empty would move every Service.
    pub fn new(pools: Vec<Pool>, state_file: Option<PathBuf>) -> Result<Allocator, StateError> {
        let current = match &state_file {
            Some(path) => read_state(path)?,
            None => BTreeMap::new(),
        };
        if !current.is_empty() {
            tracing::info!(
                allocations = current.len(),
                path = %state_file.as_deref().unwrap_or(Path::new("")).display(),
                "L4 allocations restored"
            );
        }
        Ok(Allocator {
            pools,
            state_file,
            current: Mutex::new(current),
        })
    }

    pub fn pools(&self) -> &[Pool] {
        &self.pools
    }

    /// Allocates, remembers the answer (persisting it when it changed) and
    /// returns one outcome per claim. Services not among `claims` release
    /// their listeners.
    pub fn allocate(&self, claims: &[Claim<'_>]) -> Vec<Outcome> {
        let mut current = self.current.lock();
        let outcomes = allocate(&self.pools, &current, claims);
        let next: BTreeMap<NsName, Holding> = claims
            .iter()
            .zip(&outcomes)
            .filter_map(|(c, o)| match o {
                Outcome::Allocated {
                    addr,
                    refused_ports,
                } => Some((
                    c.service.clone(),
                    Holding {
                        addr: *addr,
                        ports: Some(
                            c.ports
                                .iter()
                                .copied()
                                .filter(|p| !refused_ports.iter().any(|(q, _)| q == p))
                                .collect(),
                        ),
                    },
                )),
                Outcome::Refused { .. } => None,
            })
            .collect();
        if next != *current {
            if let Some(path) = &self.state_file
                && let Err(e) = write_state(path, &next)
            {
                tracing::warn!(path = %path.display(), error = %e,
                    "cannot write the L4 state file; allocations are kept in memory only");
            }
            *current = next;
        }
        outcomes
    }
}

fn read_state(path: &Path) -> Result<BTreeMap<NsName, Holding>, StateError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => {
            return Err(StateError::Read {
                path: path.into(),
                source,
            });
        }
    };
    let file: StateFile = serde_json::from_str(&text).map_err(|source| StateError::Parse {
        path: path.into(),
        source,
    })?;
    Ok(file
        .allocations
        .into_iter()
        .filter_map(|(k, v)| {
            let (ns, name) = k.split_once('/')?;
            let held = match v {
                StateEntry::Address(addr) => Holding { addr, ports: None },
                StateEntry::Held { address, ports } => Holding {
                    addr: address,
                    ports: Some(ports.into_iter().map(|p| (p.port, p.protocol)).collect()),
                },
            };
            Some((NsName::new(ns, name), held))
        })
        .collect())
}

/// Writes next to the target and renames, so a crash leaves the old or the
/// new file, never half of one.
fn write_state(path: &Path, current: &BTreeMap<NsName, Holding>) -> std::io::Result<()> {
    let entry = |h: &Holding| match &h.ports {
        None => StateEntry::Address(h.addr),
        Some(ports) => StateEntry::Held {
            address: h.addr,
            ports: ports
                .iter()
                .map(|&(port, protocol)| StatePort { port, protocol })
                .collect(),
        },
    };
    let file = StateFile {
        version: 2,
        allocations: current
            .iter()
            .map(|(k, v)| (k.to_string(), entry(v)))
            .collect(),
    };
    let text = serde_json::to_string_pretty(&file).map_err(std::io::Error::other)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text + "\n")?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn pools() -> Vec<Pool> {
        vec!["default=10.0.0.1,10.0.0.2".parse().unwrap()]
    }

    fn ids(n: usize) -> Vec<NsName> {
        (0..n).map(|i| NsName::new("ns", format!("s{i}"))).collect()
    }

    fn claim(id: &NsName, port: u16) -> Claim<'_> {
        Claim {
            service: id,
            pool: "default",
            ports: vec![(port, Protocol::Tcp), (port, Protocol::Udp)],
            requested: None,
            hint: None,
        }
    }

    fn addr(o: &Outcome) -> Option<IpAddr> {
        match o {
            Outcome::Allocated { addr, .. } => Some(*addr),
            Outcome::Refused { .. } => None,
        }
    }

    #[test]
    fn first_free_address_then_sticky() {
        let ids = ids(3);
        let a = Allocator::new(pools(), None).unwrap();
        let claims = vec![claim(&ids[0], 53), claim(&ids[1], 53), claim(&ids[2], 80)];
        let got: Vec<_> = a.allocate(&claims).iter().map(addr).collect();
        assert_eq!(
            got,
            [
                Some(ip("10.0.0.1")),
                Some(ip("10.0.0.2")),
                Some(ip("10.0.0.1"))
            ]
        );
        // The first Service goes away: the others stay where they are even
        // though 10.0.0.1:53 is free now.
        let claims = vec![claim(&ids[1], 53), claim(&ids[2], 80)];
        let got: Vec<_> = a.allocate(&claims).iter().map(addr).collect();
        assert_eq!(got, [Some(ip("10.0.0.2")), Some(ip("10.0.0.1"))]);
    }

    #[test]
    fn full_pool_refuses_the_newcomer_and_moves_nothing() {
        let ids = ids(3);
        let a = Allocator::new(pools(), None).unwrap();
        a.allocate(&[claim(&ids[1], 53), claim(&ids[2], 53)]);
        // ids[0] is older than the others but arrives last: it must not
        // take an address away from them.
        let out = a.allocate(&[claim(&ids[0], 53), claim(&ids[1], 53), claim(&ids[2], 53)]);
        match &out[0] {
            Outcome::Refused { reason, message } => {
                assert_eq!(*reason, "PoolExhausted");
                assert!(message.contains("53/TCP, 53/UDP"), "{message}");
            }
            o => panic!("{o:?}"),
        }
        assert_eq!(addr(&out[1]), Some(ip("10.0.0.1")));
        assert_eq!(addr(&out[2]), Some(ip("10.0.0.2")));
    }

    #[test]
    fn requests_are_honoured_when_free_and_refused_when_taken() {
        let ids = ids(4);
        let a = Allocator::new(pools(), None).unwrap();
        let mut c0 = claim(&ids[0], 53);
        c0.requested = Some(ip("10.0.0.2"));
        let mut c1 = claim(&ids[1], 53);
        c1.requested = Some(ip("10.0.0.2"));
        let mut c2 = claim(&ids[2], 53);
        c2.requested = Some(ip("192.0.2.1"));
        let mut c3 = claim(&ids[3], 53);
        c3.hint = Some(Holding {
            addr: ip("10.0.0.2"),
            ports: None,
        });
        let out = a.allocate(&[c0, c1, c2, c3]);
        assert_eq!(addr(&out[0]), Some(ip("10.0.0.2")));
        assert!(
            matches!(&out[1], Outcome::Refused { reason: "AddressTaken", message } if message.contains("ns/s0")),
            "{:?}",
            out[1]
        );
        assert!(matches!(
            &out[2],
            Outcome::Refused {
                reason: "AddressNotInPool",
                ..
            }
        ));
        // The hint is taken, so the Service gets the first free address.
        assert_eq!(addr(&out[3]), Some(ip("10.0.0.1")));
    }

    #[test]
    fn an_added_port_that_collides_is_refused_alone() {
        let ids = ids(2);
        let a = Allocator::new(pools(), None).unwrap();
        a.allocate(&[claim(&ids[0], 53), claim(&ids[1], 80)]);
        let mut grown = claim(&ids[1], 80);
        grown.ports.push((53, Protocol::Udp));
        let out = a.allocate(&[claim(&ids[0], 53), grown]);
        match &out[1] {
            Outcome::Allocated {
                addr,
                refused_ports,
            } => {
                assert_eq!(*addr, ip("10.0.0.1"));
                assert_eq!(refused_ports.len(), 1);
                assert!(refused_ports[0].1.contains("held by Service ns/s0"));
            }
            o => panic!("{o:?}"),
        }
    }

    /// Finding 1 of the isolation review: two tenants share a pool
    /// address; the older Service adds the port the younger one holds.
    fn takeover_setup() -> (NsName, NsName) {
        (
            NsName::new("tenant-alpha", "game"),
            NsName::new("tenant-beta", "dns"),
        )
    }

    fn udp<'a>(id: &'a NsName, ports: &[u16]) -> Claim<'a> {
        Claim {
            service: id,
            pool: "one",
            ports: ports.iter().map(|&p| (p, Protocol::Udp)).collect(),
            requested: None,
            hint: None,
        }
    }

    fn one_address() -> Vec<Pool> {
        vec!["one=10.0.0.1".parse().unwrap()]
    }

    fn assert_kept_by_the_holder(out: &[Outcome]) {
        match &out[0] {
            Outcome::Allocated {
                addr,
                refused_ports,
            } => {
                assert_eq!(*addr, ip("10.0.0.1"));
                assert_eq!(refused_ports.len(), 1, "{refused_ports:?}");
                assert_eq!(refused_ports[0].0, (5353, Protocol::Udp));
                let why = &refused_ports[0].1;
                assert!(why.contains("held by another Service"), "{why}");
                assert!(!why.contains("beta") && !why.contains("dns"), "{why}");
            }
            o => panic!("{o:?}"),
        }
        assert_eq!(
            out[1],
            Outcome::Allocated {
                addr: ip("10.0.0.1"),
                refused_ports: Vec::new()
            }
        );
    }

    #[test]
    fn an_older_service_cannot_take_a_port_a_younger_one_holds() {
        let (game, dns) = takeover_setup();
        let a = Allocator::new(one_address(), None).unwrap();
        // Age order: game (2024-01-01) before dns (2024-01-02).
        a.allocate(&[udp(&game, &[7000]), udp(&dns, &[5353])]);
        let out = a.allocate(&[udp(&game, &[7000, 5353]), udp(&dns, &[5353])]);
        assert_kept_by_the_holder(&out);
        // And it stays so on every later compile.
        let out = a.allocate(&[udp(&game, &[7000, 5353]), udp(&dns, &[5353])]);
        assert_kept_by_the_holder(&out);
    }

    #[test]
    fn after_a_restart_the_status_keeps_each_port_with_its_holder() {
        // Kube mode: no memory, each Service's status says what it holds.
        let (game, dns) = takeover_setup();
        let hint = |ports: &[u16]| Holding {
            addr: ip("10.0.0.1"),
            ports: Some(ports.iter().map(|&p| (p, Protocol::Udp)).collect()),
        };
        let mut g = udp(&game, &[7000, 5353]);
        g.hint = Some(hint(&[7000]));
        let mut d = udp(&dns, &[5353]);
        d.hint = Some(hint(&[5353]));
        let out = allocate(&one_address(), &BTreeMap::new(), &[g, d]);
        assert_kept_by_the_holder(&out);
    }

    #[test]
    fn a_version_1_state_file_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l4-state.json");
        std::fs::write(
            &path,
            r#"{"version": 1, "allocations": {"ns/s0": "10.0.0.2"}}"#,
        )
        .unwrap();
        let ids = ids(1);
        let a = Allocator::new(pools(), Some(path.clone())).unwrap();
        let out = a.allocate(&[claim(&ids[0], 53)]);
        assert_eq!(addr(&out[0]), Some(ip("10.0.0.2")));
        // Rewritten as version 2, with the listeners it holds.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("\"version\": 2") && text.contains("\"protocol\": \"UDP\""),
            "{text}"
        );
    }

    #[test]
    fn unknown_pool_is_refused() {
        let ids = ids(1);
        let mut c = claim(&ids[0], 53);
        c.pool = "gold";
        let out = allocate(&pools(), &BTreeMap::new(), &[c]);
        assert!(matches!(
            &out[0],
            Outcome::Refused {
                reason: "PoolNotFound",
                ..
            }
        ));
    }

    #[test]
    fn state_file_survives_a_restart_and_bad_files_stop_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l4-state.json");
        let ids = ids(2);
        {
            let a = Allocator::new(pools(), Some(path.clone())).unwrap();
            a.allocate(&[claim(&ids[0], 53), claim(&ids[1], 53)]);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("\"ns/s1\": {\n      \"address\": \"10.0.0.2\""),
            "{text}"
        );
        // After a restart, only the second Service remains; it keeps its
        // address although the first one is free now.
        let a = Allocator::new(pools(), Some(path.clone())).unwrap();
        let out = a.allocate(&[claim(&ids[1], 53)]);
        assert_eq!(addr(&out[0]), Some(ip("10.0.0.2")));

        std::fs::write(&path, "{not json").unwrap();
        let e = Allocator::new(pools(), Some(path.clone())).unwrap_err();
        assert!(e.to_string().contains("l4-state.json"), "{e}");
    }
}
