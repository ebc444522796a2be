//! Address allocation: which pool address each LoadBalancer Service
//! listens on.
//!
//! A Service gets one address for all its ports (that is what
//! `status.loadBalancer.ingress[].ip` means); each port becomes the
//! listener `(address, port, protocol)`, unique across the fleet.
//! Allocation is a pure function of the pools, the previous allocations and
//! the Services in age order, in three passes:
//!
//! 1. sticky: a Service keeps the address it had (state file in manifests
//!    mode; its own `status` in kube mode), so nothing moves on a re-compile,
//!    a restart or when another Service appears or fails;
//! 2. requests: `spec.loadBalancerIP` (refused when not in the pool or
//!    taken) and the address in `status` (a hint, used when free);
//! 3. new: the first pool address where every port of the Service is free.
//!
//! Replicas given the same objects and state compute the same answer.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::pool::{ListenerKey, Pool, Protocol};
use crate::store::NsName;

/// One Service asking for listeners.
#[derive(Clone, Debug)]
pub struct Claim<'a> {
    pub service: &'a NsName,
    pub pool: &'a str,
    /// Distinct `(port, protocol)` pairs.
    pub ports: Vec<(u16, Protocol)>,
    /// `spec.loadBalancerIP`: the Service gets this address or none.
    pub requested: Option<IpAddr>,
    /// The address in `status.loadBalancer.ingress`: taken when free.
    pub hint: Option<IpAddr>,
}

/// What a claim got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Allocated {
        addr: IpAddr,
        /// Ports of the Service that another Service holds on this address
        /// (possible only when a sticky Service added a port).
        refused_ports: Vec<((u16, Protocol), String)>,
    },
    Refused {
        /// A condition reason: `PoolNotFound`, `AddressNotInPool`,
        /// `AddressTaken` or `PoolExhausted`.
        reason: &'static str,
        message: String,
    },
}

/// Allocates addresses to `claims` (oldest first). `previous` maps a
/// Service to the address it held.
pub fn allocate(
    pools: &[Pool],
    previous: &BTreeMap<NsName, IpAddr>,
    claims: &[Claim<'_>],
) -> Vec<Outcome> {
    let mut taken: HashMap<ListenerKey, &NsName> = HashMap::new();
    let mut out: Vec<Option<Outcome>> = vec![None; claims.len()];
    let pool_of = |c: &Claim<'_>| pools.iter().find(|p| p.name == c.pool);
    let keys = |c: &Claim<'_>, addr: IpAddr| -> Vec<ListenerKey> {
        c.ports
            .iter()
            .map(|&(port, protocol)| ListenerKey {
                addr,
                port,
                protocol,
            })
            .collect()
    };

    for (i, c) in claims.iter().enumerate() {
        let Some(pool) = pool_of(c) else {
            out[i] = Some(Outcome::Refused {
                reason: "PoolNotFound",
                message: format!("address pool {:?} is not configured on this proxy", c.pool),
            });
            continue;
        };
        // A new loadBalancerIP moves the Service (pass 2), anything else
        // keeps what it had.
        let Some(&addr) = previous.get(c.service) else {
            continue;
        };
        if c.requested.is_some_and(|r| r != addr) || !pool.contains(addr) {
            continue;
        }
        let mut refused_ports = Vec::new();
        for key in keys(c, addr) {
            match taken.get(&key) {
                Some(holder) => refused_ports.push((
                    (key.port, key.protocol),
                    format!("{key} is held by Service {holder}"),
                )),
                None => {
                    taken.insert(key, c.service);
                }
            }
        }
        out[i] = Some(Outcome::Allocated {
            addr,
            refused_ports,
        });
    }

    let free = |taken: &HashMap<ListenerKey, &NsName>, c: &Claim<'_>, addr: IpAddr| {
        keys(c, addr).into_iter().find(|k| taken.contains_key(k))
    };
    for (i, c) in claims.iter().enumerate() {
        if out[i].is_some() {
            continue;
        }
        let Some(pool) = pool_of(c) else { continue };
        if let Some(addr) = c.requested {
            if !pool.contains(addr) {
                out[i] = Some(Outcome::Refused {
                    reason: "AddressNotInPool",
                    message: format!(
                        "spec.loadBalancerIP {addr} is not in address pool {:?}",
                        pool.name
                    ),
                });
            } else if let Some(busy) = free(&taken, c, addr) {
                out[i] = Some(Outcome::Refused {
                    reason: "AddressTaken",
                    message: format!(
                        "spec.loadBalancerIP {addr}: {busy} is held by Service {}",
                        taken[&busy]
                    ),
                });
            } else {
                for k in keys(c, addr) {
                    taken.insert(k, c.service);
                }
                out[i] = Some(Outcome::Allocated {
                    addr,
                    refused_ports: Vec::new(),
                });
            }
        } else if let Some(addr) = c.hint
            && pool.contains(addr)
            && free(&taken, c, addr).is_none()
        {
            for k in keys(c, addr) {
                taken.insert(k, c.service);
            }
            out[i] = Some(Outcome::Allocated {
                addr,
                refused_ports: Vec::new(),
            });
        }
    }

    for (i, c) in claims.iter().enumerate() {
        if out[i].is_some() {
            continue;
        }
        let Some(pool) = pool_of(c) else { continue };
        let found = pool
            .addresses
            .iter()
            .copied()
            .find(|&a| free(&taken, c, a).is_none());
        out[i] = Some(match found {
            Some(addr) => {
                for k in keys(c, addr) {
                    taken.insert(k, c.service);
                }
                Outcome::Allocated {
                    addr,
                    refused_ports: Vec::new(),
                }
            }
            None => {
                let ports: Vec<String> = c
                    .ports
                    .iter()
                    .map(|(p, proto)| format!("{p}/{proto}"))
                    .collect();
                Outcome::Refused {
                    reason: "PoolExhausted",
                    message: format!(
                        "address pool {:?} is full: none of its {} addresses has {} free",
                        pool.name,
                        pool.addresses.len(),
                        ports.join(", ")
                    ),
                }
            }
        });
    }
    out.into_iter()
        .map(|o| o.expect("every claim has an outcome"))
        .collect()
}

/// The persisted form: one address per Service.
#[derive(Debug, Default, Serialize, Deserialize)]
struct StateFile {
    version: u32,
    /// `namespace/name` -> address.
    allocations: BTreeMap<String, IpAddr>,
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
    current: Mutex<BTreeMap<NsName, IpAddr>>,
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
    /// their address.
    pub fn allocate(&self, claims: &[Claim<'_>]) -> Vec<Outcome> {
        let mut current = self.current.lock();
        let outcomes = allocate(&self.pools, &current, claims);
        let next: BTreeMap<NsName, IpAddr> = claims
            .iter()
            .zip(&outcomes)
            .filter_map(|(c, o)| match o {
                Outcome::Allocated { addr, .. } => Some((c.service.clone(), *addr)),
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

fn read_state(path: &Path) -> Result<BTreeMap<NsName, IpAddr>, StateError> {
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
            Some((NsName::new(ns, name), v))
        })
        .collect())
}

/// Writes next to the target and renames, so a crash leaves the old or the
/// new file, never half of one.
fn write_state(path: &Path, current: &BTreeMap<NsName, IpAddr>) -> std::io::Result<()> {
    let file = StateFile {
        version: 1,
        allocations: current.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
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
        c3.hint = Some(ip("10.0.0.2"));
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
        assert!(text.contains("\"ns/s1\": \"10.0.0.2\""), "{text}");
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
