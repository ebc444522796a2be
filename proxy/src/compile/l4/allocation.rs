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

use super::pool::{Family, ListenerKey, Pool, Protocol};
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

/// What a Service holds on one address: the address and the listeners it
/// was granted there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldAddress {
    pub addr: IpAddr,
    /// The `(port, protocol)` pairs granted on `addr`. `None` when only the
    /// address is known (a version-1 state file, a status written without
    /// ports): then every port the Service claims counts as held, after
    /// all holdings whose ports are known.
    pub ports: Option<BTreeSet<PortKey>>,
}

impl HeldAddress {
    fn holds(&self, port: PortKey) -> bool {
        self.ports.as_ref().is_none_or(|p| p.contains(&port))
    }
}

/// What a Service holds: one address, or one of each family for a
/// dual-stack Service, the primary first (`status.loadBalancer.ingress`
/// order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    pub addresses: Vec<HeldAddress>,
}

impl Holding {
    /// One address.
    pub fn single(addr: IpAddr, ports: Option<BTreeSet<PortKey>>) -> Holding {
        Holding {
            addresses: vec![HeldAddress { addr, ports }],
        }
    }

    /// Every address held, the primary first.
    pub fn addrs(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses.iter().map(|a| a.addr)
    }

    /// The address a slot of `family` (`None`: any, `prefer` first) keeps.
    fn for_slot(&self, family: Option<Family>, prefer: Option<Family>) -> Option<&HeldAddress> {
        let of = |f: Family| self.addresses.iter().find(|a| Family::of(a.addr) == f);
        match family {
            Some(f) => of(f),
            None => prefer.and_then(of).or(self.addresses.first()),
        }
    }
}

/// `spec.ipFamilyPolicy` (or `teapot.dev/ip-family-policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FamilyPolicy {
    /// One address.
    #[default]
    SingleStack,
    /// One address of each family the pool holds.
    PreferDualStack,
    /// One address of each family, or none at all.
    RequireDualStack,
}

impl FamilyPolicy {
    pub fn parse(s: &str) -> Option<FamilyPolicy> {
        match s {
            "SingleStack" => Some(FamilyPolicy::SingleStack),
            "PreferDualStack" => Some(FamilyPolicy::PreferDualStack),
            "RequireDualStack" => Some(FamilyPolicy::RequireDualStack),
            _ => None,
        }
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
    /// `spec.ipFamilies` (or `teapot.dev/ip-families`), in order: the first
    /// is the primary family. Empty: no preference.
    pub families: Vec<Family>,
    pub policy: FamilyPolicy,
}

/// One address a claim got, and the ports refused on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Granted {
    pub addr: IpAddr,
    /// Ports of the Service that another Service holds on this address
    /// (possible only when a Service added a port to its address).
    pub refused_ports: Vec<(PortKey, String)>,
}

/// What a claim got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Allocated {
        /// One address, or one of each family (dual-stack), the primary
        /// first.
        addrs: Vec<Granted>,
        /// Why a family a `PreferDualStack` Service asked for is not
        /// served (no address of it free in the pool).
        missing: Vec<String>,
    },
    Refused {
        /// A condition reason: `PoolNotFound`, `AddressNotInPool`,
        /// `AddressTaken`, `PoolExhausted` or `NoAddressOfFamily`.
        reason: &'static str,
        message: String,
    },
}

impl Outcome {
    /// The primary address, when allocated.
    pub fn addr(&self) -> Option<IpAddr> {
        match self {
            Outcome::Allocated { addrs, .. } => addrs.first().map(|g| g.addr),
            Outcome::Refused { .. } => None,
        }
    }
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

/// One address a claim asks for: a Service has one slot, a dual-stack one
/// a slot per family. Slots of different families never compete for a
/// listener (their addresses differ), so each is placed by the rules of a
/// single-address Service; a claim whose slots are all required is
/// refused whole when one of them cannot be placed.
struct Slot<'h> {
    claim: usize,
    /// `None`: an address of any family (a single-stack Service).
    family: Option<Family>,
    /// For `family: None`: the family a new address is taken from when
    /// the pool holds it (`spec.ipFamilies[0]`).
    prefer: Option<Family>,
    /// Not placed: the claim is refused (otherwise that family is left
    /// out, `PreferDualStack`).
    required: bool,
    requested: Option<IpAddr>,
    /// What the slot held, and whether from memory (else from status).
    held: Option<(&'h HeldAddress, bool)>,
}

impl Slot<'_> {
    fn admits(&self, addr: IpAddr) -> bool {
        match (self.family, self.prefer) {
            (Some(f), _) | (None, Some(f)) => Family::of(addr) == f,
            (None, None) => true,
        }
    }
}

impl Table<'_, '_, '_> {
    /// Who holds `key`, as told to slot `s`'s claim.
    fn holder(&self, s: usize, key: &ListenerKey) -> String {
        let claimant = self.claims[self.slots[s].claim].service;
        match self.taken.get(key) {
            Some(&RESERVED) => "the proxy itself (a reserved port)".to_string(),
            Some(&holder) => holder_for(claimant, self.claims[self.slots[holder].claim].service),
            None => "nobody".to_string(),
        }
    }
}

/// The allocation in progress: who holds which listener, and what each
/// slot has got so far.
struct Table<'c, 'a, 'h> {
    claims: &'c [Claim<'a>],
    slots: Vec<Slot<'h>>,
    /// Listener -> the slot holding it.
    taken: HashMap<ListenerKey, usize>,
    addr: Vec<Option<IpAddr>>,
    refused_ports: Vec<Vec<(PortKey, String)>>,
    /// Per slot: why it was left out (`PreferDualStack`).
    missing: Vec<Option<String>>,
    /// Per claim: its refusal.
    out: Vec<Option<Outcome>>,
}

impl Table<'_, '_, '_> {
    fn key(addr: IpAddr, (port, protocol): PortKey) -> ListenerKey {
        ListenerKey {
            addr,
            port,
            protocol,
        }
    }

    /// The first of `ports` that another slot holds on `addr`.
    fn busy(&self, addr: IpAddr, ports: impl IntoIterator<Item = PortKey>) -> Option<ListenerKey> {
        ports
            .into_iter()
            .map(|p| Self::key(addr, p))
            .find(|k| self.taken.contains_key(k))
    }

    /// Whether slot `s` taking a new `addr` would share it between a
    /// Gateway and another holder. A Gateway's address is its own: packed
    /// with another holder's disjoint ports, a listener the Gateway adds
    /// later would be refused for a port someone else holds there (upstream
    /// GatewayModifyListeners expects an added listener to be served).
    fn shares_with_gateway(&self, s: usize, addr: IpAddr) -> bool {
        self.shared_gateway_listener(s, addr).is_some()
    }

    /// A listener on `addr` that keeps slot `s` from taking it as its own
    /// ([`Self::shares_with_gateway`]).
    fn shared_gateway_listener(&self, s: usize, addr: IpAddr) -> Option<ListenerKey> {
        let claim = self.slots[s].claim;
        let is_gateway = |claim: usize| gateway_of(self.claims[claim].service).is_some();
        self.taken
            .iter()
            .filter(|&(k, &holder)| {
                k.addr == addr
                    && holder != RESERVED
                    && self.slots[holder].claim != claim
                    && (is_gateway(claim) || is_gateway(self.slots[holder].claim))
            })
            .map(|(k, _)| *k)
            .min()
    }

    fn take(&mut self, s: usize, addr: IpAddr, ports: impl IntoIterator<Item = PortKey>) {
        self.addr[s] = Some(addr);
        for p in ports {
            self.taken.insert(Self::key(addr, p), s);
        }
    }

    /// Grants each of `ports` on slot `s`'s address when free; refuses
    /// the others on slot `s` alone.
    fn grant_or_refuse(&mut self, s: usize, ports: Vec<PortKey>) {
        let Some(addr) = self.addr[s] else { return };
        for p in ports {
            if self.refused_ports[s].iter().any(|(q, _)| *q == p) {
                continue;
            }
            let key = Self::key(addr, p);
            match self.taken.get(&key) {
                Some(&holder) if holder == s => {}
                Some(_) => {
                    let who = self.holder(s, &key);
                    self.refused_ports[s].push((p, format!("{key} is held by {who}")));
                }
                None => {
                    self.taken.insert(key, s);
                }
            }
        }
    }

    /// Refuses claim `i` whole: whatever its slots took is free again for
    /// the claims placed after (fail closed: a Service that requires both
    /// families serves neither when one is missing).
    fn refuse(&mut self, i: usize, reason: &'static str, message: String) {
        self.out[i] = Some(Outcome::Refused { reason, message });
        let mine: Vec<usize> = (0..self.slots.len())
            .filter(|&s| self.slots[s].claim == i)
            .collect();
        if mine.iter().any(|&s| self.addr[s].is_some()) {
            self.taken
                .retain(|_, holder| *holder == RESERVED || !mine.contains(holder));
        }
        for s in mine {
            self.addr[s] = None;
            self.refused_ports[s].clear();
        }
    }

    fn open(&self, s: usize) -> bool {
        self.addr[s].is_none()
            && self.missing[s].is_none()
            && self.out[self.slots[s].claim].is_none()
    }
}

/// The slots of a claim on `pool`, primary first; `Err` refuses it.
fn slots_of<'h>(
    i: usize,
    c: &Claim<'_>,
    pool: &Pool,
) -> Result<Vec<Slot<'h>>, (&'static str, String)> {
    let in_pool = pool.families();
    // ipFamilies order first, then the pool's order for the families the
    // Service did not name.
    let mut order: Vec<Family> = Vec::with_capacity(2);
    for f in c.families.iter().chain(&in_pool) {
        if !order.contains(f) {
            order.push(*f);
        }
    }
    let slot = |family: Option<Family>, prefer: Option<Family>, required: bool| Slot {
        claim: i,
        family,
        prefer,
        required,
        requested: c
            .requested
            .filter(|r| family.is_none_or(|f| Family::of(*r) == f)),
        held: None,
    };
    let slots = match c.policy {
        FamilyPolicy::SingleStack => {
            let prefer = c.families.first().copied().filter(|f| in_pool.contains(f));
            vec![slot(None, prefer, true)]
        }
        FamilyPolicy::PreferDualStack => order
            .iter()
            .filter(|f| in_pool.contains(f))
            .map(|&f| slot(Some(f), None, false))
            .collect(),
        FamilyPolicy::RequireDualStack => {
            for f in [Family::V4, Family::V6] {
                if !in_pool.contains(&f) {
                    return Err((
                        "NoAddressOfFamily",
                        format!(
                            "ipFamilyPolicy RequireDualStack: address pool {:?} holds no {f} address",
                            pool.name
                        ),
                    ));
                }
            }
            order.iter().map(|&f| slot(Some(f), None, true)).collect()
        }
    };
    if let Some(r) = c.requested
        && !slots.iter().any(|s| s.requested == Some(r))
    {
        return Err((
            "AddressNotInPool",
            format!(
                "spec.loadBalancerIP {r} is not in address pool {:?}",
                pool.name
            ),
        ));
    }
    Ok(slots)
}

/// Allocates addresses to `claims` (oldest first). `previous` maps a
/// Service to what it held.
pub fn allocate(
    pools: &[Pool],
    reserved: &[Reserved],
    previous: &BTreeMap<NsName, Holding>,
    claims: &[Claim<'_>],
) -> Vec<Outcome> {
    let pool_of = |c: &Claim<'_>| pools.iter().find(|p| p.name == c.pool);
    let mut slots = Vec::with_capacity(claims.len());
    let mut out = vec![None; claims.len()];
    for (i, c) in claims.iter().enumerate() {
        let Some(pool) = pool_of(c) else {
            out[i] = Some(Outcome::Refused {
                reason: "PoolNotFound",
                message: format!("address pool {:?} is not configured on this proxy", c.pool),
            });
            continue;
        };
        match slots_of(i, c, pool) {
            Ok(mut of_claim) => {
                // What each slot held: its own previous answer, else its
                // status. A new loadBalancerIP moves the slot (requests,
                // below).
                for slot in &mut of_claim {
                    let usable = |a: &&HeldAddress| {
                        pool.contains(a.addr) && slot.requested.is_none_or(|r| r == a.addr)
                    };
                    slot.held = previous
                        .get(c.service)
                        .and_then(|h| h.for_slot(slot.family, slot.prefer))
                        .filter(usable)
                        .map(|a| (a, true))
                        .or_else(|| {
                            c.hint
                                .as_ref()
                                .and_then(|h| h.for_slot(slot.family, slot.prefer))
                                .filter(usable)
                                .map(|a| (a, false))
                        });
                }
                slots.extend(of_claim);
            }
            Err((reason, message)) => out[i] = Some(Outcome::Refused { reason, message }),
        }
    }
    let n = slots.len();
    let mut t = Table {
        claims,
        slots,
        taken: HashMap::new(),
        addr: vec![None; n],
        refused_ports: vec![Vec::new(); n],
        missing: vec![None; n],
        out,
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
    let held_ports = |i: usize, h: &HeldAddress| -> Vec<PortKey> {
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
    let keep_held = |t: &mut Table<'_, '_, '_>, remembered: bool, ports_known: bool| {
        for s in 0..t.slots.len() {
            let Some((h, from_memory)) = t.slots[s].held else {
                continue;
            };
            if from_memory != remembered || h.ports.is_some() != ports_known || !t.open(s) {
                continue;
            }
            let ports = held_ports(t.slots[s].claim, h);
            if from_memory {
                t.addr[s] = Some(h.addr);
                t.grant_or_refuse(s, ports);
            } else if t.busy(h.addr, ports.iter().copied()).is_none() {
                t.take(s, h.addr, ports);
            }
        }
    };
    keep_held(&mut t, true, true);
    keep_held(&mut t, false, true);
    keep_held(&mut t, true, false);

    // Ports added to a held address: free ones are granted, the others
    // refused on the Service that added them, whatever its age.
    for s in 0..t.slots.len() {
        if t.addr[s].is_some() {
            let ports = claims[t.slots[s].claim].ports.clone();
            t.grant_or_refuse(s, ports);
        }
    }

    for s in 0..t.slots.len() {
        let Some(addr) = t.slots[s].requested else {
            continue;
        };
        if !t.open(s) {
            continue;
        }
        let i = t.slots[s].claim;
        let c = &claims[i];
        let pool = pool_of(c).expect("claims without a pool are refused");
        if !pool.contains(addr) {
            t.refuse(
                i,
                "AddressNotInPool",
                format!("{} {addr} is not in address pool {:?}", field(c), pool.name),
            );
        } else if let Some(busy) = t.busy(addr, c.ports.iter().copied()) {
            let who = t.holder(s, &busy);
            t.refuse(
                i,
                "AddressTaken",
                format!("{} {addr}: {busy} is held by {who}", field(c)),
            );
        } else if let Some(busy) = t.shared_gateway_listener(s, addr) {
            // A Gateway's address is its own, whoever names it: a
            // requested address on which another holds other ports is
            // refused as a taken one.
            let who = t.holder(s, &busy);
            t.refuse(
                i,
                "AddressTaken",
                format!("{} {addr}: {busy} is held by {who}", field(c)),
            );
        } else {
            t.take(s, addr, c.ports.iter().copied());
        }
    }

    // A status that names an address but no ports (written before ports
    // were recorded) is only a hint: used when the address is free.
    keep_held(&mut t, false, false);

    // New addresses, claim by claim: a claim that requires every slot
    // takes nothing unless each finds an address.
    let mut s = 0;
    while s < t.slots.len() {
        let i = t.slots[s].claim;
        let end = (s..t.slots.len())
            .find(|&e| t.slots[e].claim != i)
            .unwrap_or(t.slots.len());
        let c = &claims[i];
        let pool = pool_of(c).expect("claims without a pool are refused");
        let mut found = Vec::new();
        let mut refusal = None;
        for k in s..end {
            if !t.open(k) {
                continue;
            }
            let slot = &t.slots[k];
            let addr = pool
                .addresses
                .iter()
                .copied()
                .filter(|&a| slot.admits(a))
                .find(|&a| {
                    t.busy(a, c.ports.iter().copied()).is_none() && !t.shares_with_gateway(k, a)
                });
            match addr {
                Some(a) => found.push((k, a)),
                None => {
                    let why = exhausted(pool, c, slot);
                    if slot.required {
                        refusal.get_or_insert(why);
                    } else {
                        t.missing[k] = Some(why);
                    }
                }
            }
        }
        match refusal {
            Some(why) => t.refuse(i, "PoolExhausted", why),
            None => {
                for (k, a) in found {
                    t.take(k, a, c.ports.iter().copied());
                }
            }
        }
        s = end;
    }

    let Table {
        slots,
        addr,
        mut refused_ports,
        missing,
        mut out,
        ..
    } = t;
    let mut granted: Vec<Vec<Granted>> = vec![Vec::new(); claims.len()];
    let mut left_out: Vec<Vec<String>> = vec![Vec::new(); claims.len()];
    for (s, slot) in slots.iter().enumerate() {
        if let Some(a) = addr[s] {
            granted[slot.claim].push(Granted {
                addr: a,
                refused_ports: std::mem::take(&mut refused_ports[s]),
            });
        } else if let Some(why) = &missing[s] {
            left_out[slot.claim].push(why.clone());
        }
    }
    out.iter_mut()
        .zip(granted)
        .zip(left_out)
        .map(|((o, addrs), missing)| match o.take() {
            Some(refused) => refused,
            None if addrs.is_empty() => Outcome::Refused {
                reason: "PoolExhausted",
                message: missing.join("; "),
            },
            None => Outcome::Allocated { addrs, missing },
        })
        .collect()
}

/// The field a claim's requested address comes from.
fn field(c: &Claim<'_>) -> &'static str {
    if gateway_of(c.service).is_some() {
        "spec.addresses"
    } else {
        "spec.loadBalancerIP"
    }
}

/// Why slot `slot` of claim `c` found no address in `pool`.
fn exhausted(pool: &Pool, c: &Claim<'_>, slot: &Slot<'_>) -> String {
    let ports: Vec<String> = c
        .ports
        .iter()
        .map(|(p, proto)| format!("{p}/{proto}"))
        .collect();
    let family = slot.family.or(slot.prefer);
    let (count, of) = match family {
        Some(f) => (
            pool.addresses
                .iter()
                .filter(|a| Family::of(**a) == f)
                .count(),
            format!("{f} "),
        ),
        None => (pool.addresses.len(), String::new()),
    };
    format!(
        "address pool {:?} is full: none of its {count} {of}addresses has {} free",
        pool.name,
        ports.join(", ")
    )
}

/// What each allocated Service holds after `allocate`: the next compile's
/// `previous`.
pub fn holdings(claims: &[Claim<'_>], outcomes: &[Outcome]) -> BTreeMap<NsName, Holding> {
    claims
        .iter()
        .zip(outcomes)
        .filter_map(|(c, o)| match o {
            Outcome::Allocated { addrs, .. } => Some((
                c.service.clone(),
                Holding {
                    addresses: addrs
                        .iter()
                        .map(|g| HeldAddress {
                            addr: g.addr,
                            ports: Some(
                                c.ports
                                    .iter()
                                    .copied()
                                    .filter(|p| !g.refused_ports.iter().any(|(q, _)| q == p))
                                    .collect(),
                            ),
                        })
                        .collect(),
                },
            )),
            Outcome::Refused { .. } => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Two addresses of each family, IPv4 listed first.
    fn mixed() -> Vec<Pool> {
        vec![
            "mixed=192.0.2.1,2001:db8::1,192.0.2.2,2001:db8::2"
                .parse()
                .unwrap(),
            "v4=198.51.100.1".parse().unwrap(),
        ]
    }

    fn dual<'a>(
        id: &'a NsName,
        pool: &'a str,
        policy: FamilyPolicy,
        families: &[Family],
    ) -> Claim<'a> {
        Claim {
            service: id,
            pool,
            ports: vec![(80, Protocol::Tcp), (53, Protocol::Udp)],
            requested: None,
            hint: None,
            families: families.to_vec(),
            policy,
        }
    }

    fn addrs(o: &Outcome) -> Vec<IpAddr> {
        match o {
            Outcome::Allocated { addrs, .. } => addrs.iter().map(|g| g.addr).collect(),
            Outcome::Refused { .. } => Vec::new(),
        }
    }

    /// Allocates with `previous`, then returns the outcomes and the next
    /// compile's holdings.
    fn round(
        pools: &[Pool],
        previous: &BTreeMap<NsName, Holding>,
        claims: &[Claim<'_>],
    ) -> (Vec<Outcome>, BTreeMap<NsName, Holding>) {
        let out = allocate(pools, &[], previous, claims);
        let held = holdings(claims, &out);
        (out, held)
    }

    use FamilyPolicy::{PreferDualStack, RequireDualStack, SingleStack};
    const V4: Family = Family::V4;
    const V6: Family = Family::V6;

    /// A requested address is a Gateway's own as an allocated one is:
    /// named by a Gateway while a Service holds other ports there, or by a
    /// Service while a Gateway holds it, it is refused as taken.
    #[test]
    fn a_requested_address_is_not_shared_with_a_gateway() {
        let pools: Vec<Pool> = vec!["p=192.0.2.1,192.0.2.2".parse().unwrap()];
        let service = NsName::new("ns", "svc");
        let web = holder_key(&NsName::new("ns", "web"));
        let claim = |id, port, requested: &str| Claim {
            service: id,
            pool: "p",
            ports: vec![(port, Protocol::Tcp)],
            requested: Some(ip(requested)),
            hint: None,
            families: Vec::new(),
            policy: SingleStack,
        };
        let claims = [
            claim(&service, 8443, "192.0.2.1"),
            claim(&web, 80, "192.0.2.1"),
        ];
        let (out, _) = round(&pools, &BTreeMap::new(), &claims);
        assert_eq!(addrs(&out[0]), [ip("192.0.2.1")]);
        assert!(
            matches!(&out[1], Outcome::Refused { reason: "AddressTaken", message }
                if message.starts_with("spec.addresses 192.0.2.1: 192.0.2.1:8443")),
            "{:?}",
            out[1]
        );
        let claims = [
            claim(&web, 80, "192.0.2.2"),
            claim(&service, 8443, "192.0.2.2"),
        ];
        let (out, _) = round(&pools, &BTreeMap::new(), &claims);
        assert_eq!(addrs(&out[0]), [ip("192.0.2.2")]);
        assert!(
            matches!(&out[1], Outcome::Refused { reason: "AddressTaken", message }
                if message.starts_with("spec.loadBalancerIP 192.0.2.2")),
            "{:?}",
            out[1]
        );
    }

    #[test]
    fn a_new_gateway_address_is_shared_with_no_one() {
        let pools: Vec<Pool> = vec!["p=192.0.2.1,192.0.2.2,192.0.2.3".parse().unwrap()];
        let service = NsName::new("ns", "svc");
        let (web, tls) = (
            holder_key(&NsName::new("ns", "web")),
            holder_key(&NsName::new("ns", "tls")),
        );
        let claim = |id, port| Claim {
            service: id,
            pool: "p",
            ports: vec![(port, Protocol::Tcp)],
            requested: None,
            hint: None,
            families: Vec::new(),
            policy: SingleStack,
        };
        // Disjoint ports: Services would share an address, Gateways do not.
        let claims = [claim(&web, 80), claim(&tls, 443), claim(&service, 8443)];
        let (out, held) = round(&pools, &BTreeMap::new(), &claims);
        assert_eq!(addrs(&out[0]), [ip("192.0.2.1")]);
        assert_eq!(addrs(&out[1]), [ip("192.0.2.2")]);
        assert_eq!(addrs(&out[2]), [ip("192.0.2.3")]);
        // So the Gateway on 443 can add 80 later, where it is.
        let grown = [
            claim(&web, 80),
            Claim {
                ports: vec![(443, Protocol::Tcp), (80, Protocol::Tcp)],
                ..claim(&tls, 443)
            },
            claim(&service, 8443),
        ];
        let (out, _) = round(&pools, &held, &grown);
        assert!(
            matches!(&out[1], Outcome::Allocated { addrs, .. } if addrs[0].addr == ip("192.0.2.2") && addrs[0].refused_ports.is_empty()),
            "{:?}",
            out[1]
        );
    }

    #[test]
    fn each_policy_gets_its_addresses_primary_family_first() {
        let ids: Vec<NsName> = (0..5).map(|i| NsName::new("ns", format!("s{i}"))).collect();
        let claims = [
            dual(&ids[0], "mixed", PreferDualStack, &[V6, V4]),
            dual(&ids[1], "mixed", RequireDualStack, &[V4, V6]),
            dual(&ids[2], "mixed", SingleStack, &[V6]),
            dual(&ids[3], "mixed", SingleStack, &[]),
            // No ipFamilies: the pool's order says which is primary.
            dual(&ids[4], "mixed", PreferDualStack, &[]),
        ];
        let (out, held) = round(&mixed(), &BTreeMap::new(), &claims);
        assert_eq!(addrs(&out[0]), [ip("2001:db8::1"), ip("192.0.2.1")]);
        assert_eq!(addrs(&out[1]), [ip("192.0.2.2"), ip("2001:db8::2")]);
        // Single stack, IPv6 asked: the first free IPv6 address, never an
        // IPv4 one (both IPv6 addresses hold these ports now).
        assert!(
            matches!(&out[2], Outcome::Refused { reason: "PoolExhausted", message } if message.contains("2 IPv6 addresses")),
            "{:?}",
            out[2]
        );
        // No family named: any address, as before dual-stack.
        assert_eq!(out[3], Outcome::Refused {
            reason: "PoolExhausted",
            message: "address pool \"mixed\" is full: none of its 4 addresses has 80/TCP, 53/UDP free".into(),
        });
        assert_eq!(addrs(&out[4]), Vec::<IpAddr>::new());
        assert_eq!(held[&ids[0]].addrs().collect::<Vec<_>>(), addrs(&out[0]));
        assert_eq!(held.len(), 2);
    }

    #[test]
    fn a_pool_of_one_family_serves_prefer_with_it_and_refuses_require() {
        let ids: Vec<NsName> = (0..3).map(|i| NsName::new("ns", format!("s{i}"))).collect();
        let claims = [
            dual(&ids[0], "v4", PreferDualStack, &[V6, V4]),
            dual(&ids[1], "v4", RequireDualStack, &[V4, V6]),
            // Single stack asking for a family the pool lacks: the pool's.
            dual(&ids[2], "v4", SingleStack, &[V6]),
        ];
        let pools = mixed();
        let (out, held) = round(&pools, &BTreeMap::new(), &claims);
        assert_eq!(addrs(&out[0]), [ip("198.51.100.1")]);
        assert_eq!(
            out[1],
            Outcome::Refused {
                reason: "NoAddressOfFamily",
                message:
                    "ipFamilyPolicy RequireDualStack: address pool \"v4\" holds no IPv6 address"
                        .into(),
            }
        );
        // s2's ports are the same as s0's: the one address is taken.
        assert!(matches!(
            &out[2],
            Outcome::Refused {
                reason: "PoolExhausted",
                ..
            }
        ));
        assert!(!held.contains_key(&ids[1]), "a refused claim holds nothing");
    }

    #[test]
    fn require_dual_stack_takes_nothing_unless_both_families_fit() {
        let ids: Vec<NsName> = (0..3).map(|i| NsName::new("ns", format!("s{i}"))).collect();
        let pools = vec!["p=192.0.2.1,192.0.2.2,2001:db8::1".parse().unwrap()];
        let claims = [
            dual(&ids[0], "p", PreferDualStack, &[V4, V6]),
            // Only IPv4 is left for these ports: the claim takes nothing,
            // so the single-stack one after it gets 192.0.2.2.
            dual(&ids[1], "p", RequireDualStack, &[V4, V6]),
            dual(&ids[2], "p", SingleStack, &[V4]),
        ];
        let (out, _) = round(&pools, &BTreeMap::new(), &claims);
        assert_eq!(addrs(&out[0]), [ip("192.0.2.1"), ip("2001:db8::1")]);
        assert!(
            matches!(&out[1], Outcome::Refused { reason: "PoolExhausted", message } if message.contains("1 IPv6 addresses")),
            "{:?}",
            out[1]
        );
        assert_eq!(addrs(&out[2]), [ip("192.0.2.2")]);
    }

    #[test]
    fn a_prefer_service_short_of_one_family_is_served_on_the_other_and_says_so() {
        let ids: Vec<NsName> = (0..2).map(|i| NsName::new("ns", format!("s{i}"))).collect();
        let pools = vec!["p=192.0.2.1,192.0.2.2,2001:db8::1".parse().unwrap()];
        let claims = [
            dual(&ids[0], "p", PreferDualStack, &[V6, V4]),
            dual(&ids[1], "p", PreferDualStack, &[V6, V4]),
        ];
        let (out, held) = round(&pools, &BTreeMap::new(), &claims);
        match &out[1] {
            Outcome::Allocated { addrs, missing } => {
                assert_eq!(addrs.len(), 1);
                assert_eq!(addrs[0].addr, ip("192.0.2.2"));
                assert!(missing[0].contains("IPv6"), "{missing:?}");
            }
            o => panic!("{o:?}"),
        }
        // The IPv6 address frees up: the second Service gains it, and
        // keeps its IPv4 address.
        let (out, _) = round(&pools, &held, &claims[1..]);
        assert_eq!(addrs(&out[0]), [ip("2001:db8::1"), ip("192.0.2.2")]);
    }

    #[test]
    fn going_dual_and_back_keeps_the_address_already_served() {
        let id = NsName::new("ns", "db");
        let pools = mixed();
        // Some other Service holds the first addresses of each family.
        let other = NsName::new("ns", "aaa");
        let before = BTreeMap::from([(
            other.clone(),
            Holding {
                addresses: vec![
                    HeldAddress {
                        addr: ip("192.0.2.1"),
                        ports: Some([(80, Protocol::Tcp), (53, Protocol::Udp)].into()),
                    },
                    HeldAddress {
                        addr: ip("2001:db8::1"),
                        ports: Some([(80, Protocol::Tcp), (53, Protocol::Udp)].into()),
                    },
                ],
            },
        )]);
        let others = dual(&other, "mixed", PreferDualStack, &[V4, V6]);
        let single = dual(&id, "mixed", SingleStack, &[V4]);
        let (out, held) = round(&pools, &before, &[others.clone(), single.clone()]);
        assert_eq!(addrs(&out[1]), [ip("192.0.2.2")]);
        // To dual-stack with IPv6 primary: the IPv4 address stays and the
        // IPv6 one is added (listed first).
        let going = dual(&id, "mixed", PreferDualStack, &[V6, V4]);
        let (out, held) = round(&pools, &held, &[others.clone(), going.clone()]);
        assert_eq!(addrs(&out[1]), [ip("2001:db8::2"), ip("192.0.2.2")]);
        // And stays so: the same answer from the same holdings.
        let (again, _) = round(&pools, &held, &[others.clone(), going]);
        assert_eq!(again, out);
        // Back to single stack, IPv6 primary: the IPv6 address stays, the
        // IPv4 one is released.
        let back = dual(&id, "mixed", SingleStack, &[V6]);
        let (out, held2) = round(&pools, &held, &[others.clone(), back]);
        assert_eq!(addrs(&out[1]), [ip("2001:db8::2")]);
        assert_eq!(held2[&id].addresses.len(), 1);
        // Back to single stack with IPv4 primary from the dual holding.
        let (out, _) = round(&pools, &held, &[others, single]);
        assert_eq!(addrs(&out[1]), [ip("192.0.2.2")]);
    }

    #[test]
    fn a_single_stack_service_keeps_an_address_of_the_other_family() {
        // Held before ipFamilies were read: it never moves for them.
        let id = NsName::new("ns", "db");
        let previous = BTreeMap::from([(id.clone(), Holding::single(ip("2001:db8::1"), None))]);
        let c = dual(&id, "mixed", SingleStack, &[V4]);
        let (out, _) = round(&mixed(), &previous, &[c]);
        assert_eq!(addrs(&out[0]), [ip("2001:db8::1")]);
    }

    #[test]
    fn require_dual_stack_refused_after_holding_releases_what_it_held() {
        // It held IPv4 (single stack) and now requires both, with no IPv6
        // address free: it serves nothing and its IPv4 listeners are free
        // for the younger Service.
        let ids: Vec<NsName> = (0..3).map(|i| NsName::new("ns", format!("s{i}"))).collect();
        let pools = vec!["p=192.0.2.1,2001:db8::1".parse().unwrap()];
        let tcp = Some([(80, Protocol::Tcp), (53, Protocol::Udp)].into());
        let previous = BTreeMap::from([
            (
                ids[0].clone(),
                Holding::single(ip("2001:db8::1"), tcp.clone()),
            ),
            (ids[1].clone(), Holding::single(ip("192.0.2.1"), tcp)),
        ]);
        let claims = [
            dual(&ids[0], "p", SingleStack, &[V6]),
            dual(&ids[1], "p", RequireDualStack, &[V4, V6]),
            dual(&ids[2], "p", SingleStack, &[V4]),
        ];
        let (out, held) = round(&pools, &previous, &claims);
        assert!(
            matches!(
                &out[1],
                Outcome::Refused {
                    reason: "PoolExhausted",
                    ..
                }
            ),
            "{:?}",
            out[1]
        );
        assert_eq!(addrs(&out[2]), [ip("192.0.2.1")]);
        assert!(!held.contains_key(&ids[1]));
    }

    #[test]
    fn a_request_goes_to_the_slot_of_its_family() {
        let id = NsName::new("ns", "db");
        let mut c = dual(&id, "mixed", RequireDualStack, &[V4, V6]);
        c.requested = Some(ip("2001:db8::2"));
        let (out, _) = round(&mixed(), &BTreeMap::new(), &[c.clone()]);
        assert_eq!(addrs(&out[0]), [ip("192.0.2.1"), ip("2001:db8::2")]);
        c.requested = Some(ip("198.51.100.1"));
        let (out, _) = round(&mixed(), &BTreeMap::new(), &[c]);
        assert!(matches!(
            &out[0],
            Outcome::Refused {
                reason: "AddressNotInPool",
                ..
            }
        ));
    }

    #[test]
    fn a_dual_stack_status_hint_is_kept_per_address() {
        // Kube mode after a restart: both addresses from the status.
        let id = NsName::new("ns", "db");
        let mut c = dual(&id, "mixed", PreferDualStack, &[V4, V6]);
        c.hint = Some(Holding {
            addresses: vec![
                HeldAddress {
                    addr: ip("192.0.2.2"),
                    ports: Some([(80, Protocol::Tcp), (53, Protocol::Udp)].into()),
                },
                HeldAddress {
                    addr: ip("2001:db8::2"),
                    ports: None,
                },
            ],
        });
        let (out, _) = round(&mixed(), &BTreeMap::new(), &[c]);
        assert_eq!(addrs(&out[0]), [ip("192.0.2.2"), ip("2001:db8::2")]);
    }

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
