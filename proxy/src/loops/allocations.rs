//! The L4 allocations' memory: what each Service held after the last
//! compile, handed to the next one as data ([`crate::compile::l4`] is
//! pure), and kept in a state file in manifests mode so that a restart
//! moves nothing (docs/l4.md, "State file").

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

#[cfg(test)]
use crate::compile::l4::allocation::{Claim, FamilyPolicy, Outcome, PortKey, allocate};
use crate::compile::l4::allocation::{HeldAddress, Holding};
use crate::compile::l4::pool::{Pool, Protocol};
use teapot_model::store::NsName;

/// The persisted form: what each Service holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct StateFile {
    version: u32,
    /// `namespace/name` -> what it holds.
    allocations: BTreeMap<String, StateEntry>,
}

/// Version 2 records the listeners; version 3 adds a list of them, one
/// per address, for a dual-stack Service (a file without one is written as
/// version 2, so an older proxy still reads it). Version 1 (an address
/// alone) is still read, its ports counted as held after every known
/// holding.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum StateEntry {
    Held(StateAddress),
    Addresses(Vec<StateAddress>),
    Address(IpAddr),
}

#[derive(Debug, Serialize, Deserialize)]
struct StateAddress {
    address: IpAddr,
    ports: Vec<StatePort>,
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

    /// What every Service holds now: the compile's `previous`.
    pub fn holdings(&self) -> BTreeMap<NsName, Holding> {
        self.current.lock().clone()
    }

    /// Remembers a compile's answer, persisting it when it changed.
    /// Services not in `next` have released their listeners.
    pub fn remember(&self, next: BTreeMap<NsName, Holding>) {
        let mut current = self.current.lock();
        if next != *current {
            if let Some(path) = &self.state_file
                && let Err(e) = write_state(path, &next)
            {
                tracing::warn!(path = %path.display(), error = %e,
                    "cannot write the L4 state file; allocations are kept in memory only");
            }
            *current = next;
        }
    }

    /// One compile's worth: allocate from memory, then remember.
    #[cfg(test)]
    fn allocate(&self, claims: &[Claim<'_>]) -> Vec<Outcome> {
        let outcomes = allocate(&self.pools, &[], &self.holdings(), claims);
        self.remember(crate::compile::l4::allocation::holdings(claims, &outcomes));
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
            let held = |a: StateAddress| HeldAddress {
                addr: a.address,
                ports: Some(a.ports.into_iter().map(|p| (p.port, p.protocol)).collect()),
            };
            let held = match v {
                StateEntry::Address(addr) => Holding::single(addr, None),
                StateEntry::Held(a) => Holding {
                    addresses: vec![held(a)],
                },
                StateEntry::Addresses(list) => Holding {
                    addresses: list.into_iter().map(held).collect(),
                },
            };
            if held.addresses.is_empty() {
                return None;
            }
            Some((NsName::new(ns, name), held))
        })
        .collect())
}

/// Writes next to the target and renames, so a crash leaves the old or the
/// new file, never half of one.
fn write_state(path: &Path, current: &BTreeMap<NsName, Holding>) -> std::io::Result<()> {
    let address = |a: &HeldAddress| StateAddress {
        address: a.addr,
        ports: a
            .ports
            .iter()
            .flatten()
            .map(|&(port, protocol)| StatePort { port, protocol })
            .collect(),
    };
    let entry = |h: &Holding| match h.addresses.as_slice() {
        [one] if one.ports.is_none() => StateEntry::Address(one.addr),
        [one] => StateEntry::Held(address(one)),
        more => StateEntry::Addresses(more.iter().map(address).collect()),
    };
    let dual = current.values().any(|h| h.addresses.len() > 1);
    let file = StateFile {
        version: if dual { 3 } else { 2 },
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
            families: Vec::new(),
            policy: FamilyPolicy::SingleStack,
        }
    }

    fn refused(o: &Outcome) -> (&'static str, &str) {
        match o {
            Outcome::Refused { reason, message } => (reason, message),
            o => panic!("allocated: {o:?}"),
        }
    }

    fn addr(o: &Outcome) -> Option<IpAddr> {
        o.addr()
    }

    /// The one address a single-stack claim got, and its refused ports.
    fn one(o: &Outcome) -> (IpAddr, &[(PortKey, String)]) {
        match o {
            Outcome::Allocated { addrs, missing } if addrs.len() == 1 && missing.is_empty() => {
                (addrs[0].addr, &addrs[0].refused_ports)
            }
            o => panic!("not one address: {o:?}"),
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
        let (reason, message) = refused(&out[0]);
        assert_eq!(reason, "PoolExhausted");
        assert!(message.contains("53/TCP, 53/UDP"), "{message}");
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
        c3.hint = Some(Holding::single(ip("10.0.0.2"), None));
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
        let (addr, refused_ports) = one(&out[1]);
        assert_eq!(addr, ip("10.0.0.1"));
        assert_eq!(refused_ports.len(), 1);
        assert!(refused_ports[0].1.contains("held by Service ns/s0"));
    }

    /// Two tenants share a pool
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
            families: Vec::new(),
            policy: FamilyPolicy::SingleStack,
        }
    }

    fn one_address() -> Vec<Pool> {
        vec!["one=10.0.0.1".parse().unwrap()]
    }

    fn assert_kept_by_the_holder(out: &[Outcome]) {
        let (addr, refused_ports) = one(&out[0]);
        assert_eq!(addr, ip("10.0.0.1"));
        assert_eq!(refused_ports.len(), 1, "{refused_ports:?}");
        assert_eq!(refused_ports[0].0, (5353, Protocol::Udp));
        let why = &refused_ports[0].1;
        assert!(why.contains("held by another Service"), "{why}");
        assert!(!why.contains("beta") && !why.contains("dns"), "{why}");
        assert_eq!(one(&out[1]), (ip("10.0.0.1"), &[][..]));
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
        let hint = |ports: &[u16]| {
            Holding::single(
                ip("10.0.0.1"),
                Some(ports.iter().map(|&p| (p, Protocol::Udp)).collect()),
            )
        };
        let mut g = udp(&game, &[7000, 5353]);
        g.hint = Some(hint(&[7000]));
        let mut d = udp(&dns, &[5353]);
        d.hint = Some(hint(&[5353]));
        let out = allocate(&one_address(), &[], &BTreeMap::new(), &[g, d]);
        assert_kept_by_the_holder(&out);
    }

    /// A tenant Service asking for the
    /// proxy's own port on a pool address got `Allocated=True`, and a
    /// listener that could never bind.
    #[test]
    fn reserved_ports_are_never_allocated() {
        use crate::compile::l4::allocation::Reserved;
        let ids = ids(2);
        let reserved = [
            // The HTTPS listener on 0.0.0.0: every pool address.
            Reserved {
                addr: None,
                port: 443,
                protocol: Protocol::Tcp,
            },
            // The admin listener on one address only.
            Reserved {
                addr: Some(ip("10.0.0.1")),
                port: 9000,
                protocol: Protocol::Tcp,
            },
        ];
        let https = Claim {
            ports: vec![(443, Protocol::Tcp)],
            ..claim(&ids[0], 443)
        };
        let admin = Claim {
            ports: vec![(9000, Protocol::Tcp)],
            ..claim(&ids[1], 9000)
        };
        let out = allocate(&pools(), &reserved, &BTreeMap::new(), &[https, admin]);
        let (reason, message) = refused(&out[0]);
        assert_eq!(reason, "PoolExhausted");
        assert!(message.contains("443/TCP"), "{message}");
        // 9000 is reserved on 10.0.0.1 only: the Service gets 10.0.0.2.
        assert_eq!(addr(&out[1]), Some(ip("10.0.0.2")));

        // A Service that holds 10.0.0.1 and adds the reserved port is
        // refused that port, in words that say why.
        let previous = BTreeMap::from([(
            ids[1].clone(),
            Holding::single(ip("10.0.0.1"), Some([(80, Protocol::Tcp)].into())),
        )]);
        let grown = Claim {
            ports: vec![(80, Protocol::Tcp), (9000, Protocol::Tcp)],
            ..claim(&ids[1], 80)
        };
        let out = allocate(&pools(), &reserved, &previous, &[grown]);
        let (addr, refused_ports) = one(&out[0]);
        assert_eq!(addr, ip("10.0.0.1"));
        assert_eq!(refused_ports.len(), 1);
        assert!(
            refused_ports[0].1.contains("reserved"),
            "{:?}",
            refused_ports[0]
        );
    }

    /// A Gateway's holding shares the file with the Services' under a key
    /// no Service can have, and comes back as it was.
    #[test]
    fn gateway_holdings_round_trip_beside_services() {
        use crate::compile::l4::allocation::{gateway_of, holder_key};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let service = NsName::new("ops", "edge");
        let gateway = holder_key(&service);
        let held = |port| Holding::single(ip("10.0.0.1"), Some([(port, Protocol::Tcp)].into()));
        let current = BTreeMap::from([(service.clone(), held(80)), (gateway.clone(), held(5432))]);
        write_state(&path, &current).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"ops/Gateway:edge\""), "{text}");
        let read = read_state(&path).unwrap();
        assert_eq!(read, current);
        assert_eq!(gateway_of(read.keys().next().unwrap()), Some(service));
    }

    /// A dual-stack Service's addresses come back in order; a file without
    /// one stays version 2, which an older proxy still reads.
    #[test]
    fn dual_stack_holdings_round_trip_and_single_ones_stay_version_2() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let tcp = |p| Some([(p, Protocol::Tcp)].into());
        let single = BTreeMap::from([(
            NsName::new("ops", "a"),
            Holding::single(ip("10.0.0.1"), tcp(80)),
        )]);
        write_state(&path, &single).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"version\": 2"), "{text}");
        assert_eq!(read_state(&path).unwrap(), single);

        let mut dual = single.clone();
        dual.insert(
            NsName::new("ops", "b"),
            Holding {
                addresses: vec![
                    HeldAddress {
                        addr: ip("2001:db8::1"),
                        ports: tcp(53),
                    },
                    HeldAddress {
                        addr: ip("10.0.0.2"),
                        ports: tcp(53),
                    },
                ],
            },
        );
        write_state(&path, &dual).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"version\": 3"), "{text}");
        assert_eq!(read_state(&path).unwrap(), dual);
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
        let out = allocate(&pools(), &[], &BTreeMap::new(), &[c]);
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
