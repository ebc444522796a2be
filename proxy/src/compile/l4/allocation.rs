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

use super::pool::{ListenerKey, Pool, Protocol};
use teapot_model::store::NsName;

/// What marks a holding as a Gateway's: Service names are DNS labels, so
/// none contains a colon.
const HOLDER_PREFIX: &str = "Gateway:";

/// The key of a Gateway's holding in the holdings map (and the state
/// file): `namespace/Gateway:name`.
pub fn holder_key(gateway: &NsName) -> NsName {
    NsName::new(
        gateway.namespace.clone(),
        format!("{HOLDER_PREFIX}{}", gateway.name),
    )
}

/// The Gateway a holding belongs to, if it is a Gateway's.
pub fn gateway_of(holder: &NsName) -> Option<NsName> {
    let name = holder.name.strip_prefix(HOLDER_PREFIX)?;
    Some(NsName::new(holder.namespace.clone(), name))
}

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

/// A listener no Service may have: the proxy's own HTTP, HTTPS and admin
/// ports, and the operator's `--l4-reserved-port`s. `addr: None` reserves
/// the port on every pool address (a proxy listener on `0.0.0.0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reserved {
    pub addr: Option<IpAddr>,
    pub port: u16,
    pub protocol: Protocol,
}

impl Reserved {
    fn covers(&self, key: &ListenerKey) -> bool {
        self.port == key.port
            && self.protocol == key.protocol
            && self
                .addr
                .is_none_or(|a| a == key.addr || a.is_unspecified())
    }
}

impl std::str::FromStr for Reserved {
    type Err = String;

    /// `PORT`, `PORT/PROTO` or `ADDR:PORT[/PROTO]` (`[v6]:PORT`); the
    /// protocol defaults to TCP.
    fn from_str(s: &str) -> Result<Reserved, String> {
        let (target, protocol) = match s.rsplit_once('/') {
            Some((t, p)) => (t, Protocol::from_service(Some(&p.to_ascii_uppercase()))?),
            None => (s, Protocol::Tcp),
        };
        let bad = || format!("{s:?} is not PORT[/TCP|UDP] or ADDR:PORT[/TCP|UDP]");
        if let Ok(port) = target.parse::<u16>() {
            return Ok(Reserved {
                addr: None,
                port,
                protocol,
            });
        }
        let socket: std::net::SocketAddr = target.parse().map_err(|_| bad())?;
        Ok(Reserved {
            addr: Some(socket.ip()),
            port: socket.port(),
            protocol,
        })
    }
}

impl Reserved {
    /// The TCP listener bound at `addr` (one of the proxy's own).
    pub fn listener(addr: std::net::SocketAddr) -> Reserved {
        Reserved {
            addr: (!addr.ip().is_unspecified()).then_some(addr.ip()),
            port: addr.port(),
            protocol: Protocol::Tcp,
        }
    }
}

/// The holder index of a reserved listener in [`Table::taken`].
const RESERVED: usize = usize::MAX;

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

/// Who holds a listener, as told to `claimant`: a Service or Gateway of
/// its own namespace by name, any other as "another Service" or "another
/// Gateway".
fn holder_for(claimant: &NsName, holder: &NsName) -> String {
    match (holder.namespace == claimant.namespace, gateway_of(holder)) {
        (true, None) => format!("Service {holder}"),
        (true, Some(gateway)) => format!("Gateway {gateway}"),
        (false, None) => "another Service".to_string(),
        (false, Some(_)) => "another Gateway".to_string(),
    }
}

impl Table<'_, '_> {
    /// Who holds `key`, as told to claim `i`.
    fn holder(&self, i: usize, key: &ListenerKey) -> String {
        match self.taken.get(key) {
            Some(&RESERVED) => "the proxy itself (a reserved port)".to_string(),
            Some(&holder) => holder_for(self.claims[i].service, self.claims[holder].service),
            None => "nobody".to_string(),
        }
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
                Some(_) => {
                    let who = self.holder(i, &key);
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
    reserved: &[Reserved],
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
    // Reserved listeners are taken before anyone asks: a Service never
    // gets the proxy's own port, so it is never "allocated" a listener
    // whose bind must fail.
    for pool in pools {
        for &addr in &pool.addresses {
            for r in reserved {
                let key = ListenerKey {
                    addr,
                    port: r.port,
                    protocol: r.protocol,
                };
                if r.covers(&key) {
                    t.taken.insert(key, RESERVED);
                }
            }
        }
    }
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
            let who = t.holder(i, &busy);
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

/// What each allocated Service holds after `allocate`: the next compile's
/// `previous`.
pub fn holdings(claims: &[Claim<'_>], outcomes: &[Outcome]) -> BTreeMap<NsName, Holding> {
    claims
        .iter()
        .zip(outcomes)
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
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_keys_never_collide_with_services() {
        let gw = NsName::new("ops", "edge");
        let key = holder_key(&gw);
        assert_ne!(key, gw);
        assert_eq!(gateway_of(&key), Some(gw.clone()));
        assert_eq!(gateway_of(&gw), None);
    }

    #[test]
    fn reserved_listeners_parse_and_cover() {
        let r: Reserved = "443".parse().unwrap();
        assert_eq!((r.addr, r.port, r.protocol), (None, 443, Protocol::Tcp));
        let r: Reserved = "53/udp".parse().unwrap();
        assert_eq!((r.port, r.protocol), (53, Protocol::Udp));
        let r: Reserved = "[::1]:9000/TCP".parse().unwrap();
        assert_eq!(r.addr, Some("::1".parse().unwrap()));
        assert!("http".parse::<Reserved>().is_err());
        assert!("80/sctp".parse::<Reserved>().is_err());

        let any = Reserved::listener("0.0.0.0:80".parse().unwrap());
        let key = |a: &str| ListenerKey {
            addr: a.parse().unwrap(),
            port: 80,
            protocol: Protocol::Tcp,
        };
        assert!(any.covers(&key("10.0.0.1")) && any.covers(&key("10.0.0.2")));
        let one = Reserved::listener("10.0.0.1:80".parse().unwrap());
        assert!(one.covers(&key("10.0.0.1")) && !one.covers(&key("10.0.0.2")));
    }
}
