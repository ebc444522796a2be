//! The tenant check by difference: its verdicts kept from one load to the
//! next, so that a load judges the objects that changed and the host
//! claims they touch, not every object of every tenant.
//!
//! A verdict is a function of the object, its Tenant, every Tenant's
//! networks and grants, DOMAIN and the LB networks (the
//! [`VerdictContext`]), and, for an object that claims hosts, of the claims
//! older than it on the hosts it names (the first claimant holds a host).
//! So a load:
//! - drops every verdict when the context changed;
//! - keeps the verdict of an object that is the same `Arc` as last time,
//!   unless it claims hosts and a claim overlapping its names changed;
//! - judges again the claims that changed (added, changed or gone) and
//!   every claimant whose names overlap theirs, transitively (the
//!   component, [`ClaimIndex::component`]), oldest first, against the
//!   holdings of that component alone: no check of a claimant reads a
//!   holding whose name does not overlap its own (same name, one an
//!   ancestor of the other), and the component holds every such claim;
//! - weighs `maxTotalBytes` again for a namespace where an object, or a
//!   verdict, changed.
//!
//! The full pass is the same walk with every verdict dropped; a property
//! test (`tests::by_difference_equals_a_full_pass`) holds the two equal.

use std::any::Any;
use std::collections::{BTreeSet, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use teapot_api::HostPattern;
use teapot_api::admission::{self, AdmissionContext, Holder, Holdings, TenantObjectRef, Violation};
use teapot_api::regex::RegexCost;

use super::{TenantsByNamespace, Weighed, Weight, claimed_hosts, judge_slice, key, over_total};
use crate::manifests::Problem;
use crate::store::{FastHashMap, Kind, NsName, ObjectKey, Store, Stored};

/// The tenant check's verdicts, kept from one load to the next
/// ([`super::admit_cached`]).
#[derive(Debug, Default)]
pub struct TenantVerdicts {
    context: Option<VerdictContext>,
    /// The Tenants the context was read from, by namespace: the same
    /// `Arc`s need no second reading, and every pass over them shares
    /// this one index.
    tenants: Arc<TenantsByNamespace>,
    /// Every Tenant's grants and node networks, what a check reads besides
    /// host claims: built once per context.
    networks: Holdings,
    /// Every judged object of a tenant namespace, and every object that
    /// claims hosts in any namespace (the operator's hold theirs), by
    /// namespace, kind and name.
    namespaces: FastHashMap<String, NamespaceVerdicts>,
    claims: ClaimIndex,
    /// Objects whose verdict refuses them.
    refused: BTreeSet<ObjectKey>,
    /// Which walk over the store this is: an entry not seen in the last
    /// walk is gone from the store.
    pass: u32,
    /// Entries kept, and those the current walk has seen.
    entries: usize,
    seen: usize,
    reused: usize,
    judged: usize,
}

/// What the verdicts depend on besides the objects and their host claims.
#[derive(Debug, PartialEq)]
pub(super) struct VerdictContext {
    tenants: Vec<(Option<String>, teapot_api::tenant::TenantSpec)>,
    domain: String,
    lb_networks: Vec<IpNet>,
}

#[derive(Debug, Default)]
struct NamespaceVerdicts {
    kinds: Vec<(Kind, FastHashMap<Box<str>, Judged>)>,
    /// What its admitted objects weigh against `maxTotalBytes`, and what
    /// that limit refuses (a tenant namespace's).
    weight: Weight,
    over: Vec<(ObjectKey, Vec<Violation>)>,
}

impl NamespaceVerdicts {
    fn kind(&mut self, kind: Kind) -> &mut FastHashMap<Box<str>, Judged> {
        let at = match self.kinds.iter().position(|(k, _)| *k == kind) {
            Some(at) => at,
            None => {
                self.kinds.push((kind, FastHashMap::default()));
                self.kinds.len() - 1
            }
        };
        &mut self.kinds[at].1
    }

    fn get(&self, kind: Kind, name: &str) -> Option<&Judged> {
        let (_, map) = self.kinds.iter().find(|(k, _)| *k == kind)?;
        map.get(name)
    }
}

/// One object's verdict, and what `maxTotalBytes` weighs of it.
///
/// One is kept per object of every tenant namespace (300k at 100k
/// Ingresses), so it is packed into 64 bytes: the creation time as its
/// two numbers (an `Option<Time>` takes 24), sizes as `u32`, no claim
/// as [`NO_CLAIM`]. Its name is the map's key, a `Box<str>`.
#[derive(Debug)]
struct Judged {
    /// The object judged: the verdict stands while the store holds this
    /// very `Arc` (kept, so its address is not reused by another).
    object: Arc<dyn Any + Send + Sync>,
    /// `None`: not judged yet in this walk (a claimant waiting for its
    /// turn), or an operator's claimant, which is not judged; empty:
    /// admitted.
    violations: Option<Box<[Violation]>>,
    created_second: i64,
    /// [`NO_TIME`] when the object has no creation time.
    created_nanos: i32,
    /// Its size as JSON, saturated at 4 GiB (the limits are far below).
    size: u32,
    regex_count: u32,
    regex_bytes: u32,
    /// Its slot in [`ClaimIndex`] for an object that claims hosts, else
    /// [`NO_CLAIM`].
    claim: u32,
    seen: u32,
}

/// [`Judged::created_nanos`] of an object without a creation time: out of
/// a timestamp's range of nanoseconds.
const NO_TIME: i32 = i32::MIN;
/// [`Judged::claim`] of an object that claims no host.
const NO_CLAIM: u32 = u32::MAX;

impl Judged {
    fn new(object: Arc<dyn Any + Send + Sync>, seen: u32) -> Judged {
        Judged {
            object,
            violations: None,
            created_second: 0,
            created_nanos: NO_TIME,
            size: 0,
            regex_count: 0,
            regex_bytes: 0,
            claim: NO_CLAIM,
            seen,
        }
    }

    fn admitted(&self) -> bool {
        self.violations.as_ref().is_some_and(|v| v.is_empty())
    }

    fn created(&self) -> Option<Time> {
        if self.created_nanos == NO_TIME {
            return None;
        }
        k8s_openapi::jiff::Timestamp::new(self.created_second, self.created_nanos)
            .ok()
            .map(Time)
    }

    fn set_created(&mut self, created: Option<&Time>) {
        (self.created_second, self.created_nanos) = match created {
            Some(t) => (t.0.as_second(), t.0.subsec_nanosecond()),
            None => (0, NO_TIME),
        };
    }

    fn size(&self) -> usize {
        self.size as usize
    }

    fn set_size(&mut self, size: usize) {
        self.size = u32::try_from(size).unwrap_or(u32::MAX);
    }

    fn regex(&self) -> RegexCost {
        RegexCost {
            count: self.regex_count,
            bytes: u64::from(self.regex_bytes),
        }
    }

    fn set_regex(&mut self, cost: RegexCost) {
        self.regex_count = cost.count;
        self.regex_bytes = u32::try_from(cost.bytes).unwrap_or(u32::MAX);
    }

    fn claim(&self) -> Option<u32> {
        (self.claim != NO_CLAIM).then_some(self.claim)
    }
}

fn same(a: &Arc<dyn Any + Send + Sync>, b: *const ()) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), b)
}

impl TenantVerdicts {
    /// Objects whose verdict the last admission took over.
    pub fn reused(&self) -> usize {
        self.reused
    }

    /// Objects the last admission judged.
    pub fn judged(&self) -> usize {
        self.judged
    }

    /// Drops every verdict when what they depend on besides the objects
    /// changed; returns whether the verdicts of the last admission stand.
    pub(super) fn begin(&mut self, store: &Store, domain: &str, lb_networks: &[IpNet]) -> bool {
        if self.tenants.same_as(store)
            && let Some(c) = &self.context
            && c.domain == domain
            && c.lb_networks == lb_networks
        {
            return true;
        }
        self.tenants = Arc::new(TenantsByNamespace::of(store));
        let context = VerdictContext {
            tenants: store
                .tenants
                .values()
                .map(|t| (t.object.metadata.name.clone(), t.object.spec.clone()))
                .collect(),
            domain: domain.to_string(),
            lb_networks: lb_networks.to_vec(),
        };
        if self.context.as_ref() == Some(&context) {
            return true;
        }
        let tenants = std::mem::take(&mut self.tenants);
        *self = TenantVerdicts {
            context: Some(context),
            networks: Holdings::from_objects(tenants.tenants(), std::iter::empty()),
            tenants,
            ..TenantVerdicts::default()
        };
        false
    }

    /// The Tenants by namespace and every Tenant's grants and node
    /// networks, as the last admission read them, if `store` has those
    /// very Tenants.
    pub(super) fn tenants_of(&self, store: &Store) -> Option<(Arc<TenantsByNamespace>, Holdings)> {
        (self.context.is_some() && self.tenants.same_as(store))
            .then(|| (self.tenants.clone(), self.networks.clone()))
    }

    /// The weight the last admission counted for `namespace`.
    pub(super) fn weight(&self, namespace: &str) -> Weight {
        self.namespaces
            .get(namespace)
            .map(|n| n.weight)
            .unwrap_or_default()
    }

    pub(super) fn set_weight(&mut self, namespace: &str, weight: Weight) {
        if let Some(n) = self.namespaces.get_mut(namespace) {
            n.weight = weight;
        }
    }

    /// Records an EndpointSlice judged alone ([`super::admit_slice_changes`]):
    /// `Some((slice, size))` admitted, `None` gone.
    pub(super) fn set_slice(
        &mut self,
        id: &NsName,
        slice: Option<&Arc<crate::endpoints::CompactSlice>>,
    ) {
        self.refused.remove(&key(Kind::EndpointSlice, id));
        let namespace = self.namespaces.entry(id.namespace.clone()).or_default();
        let map = namespace.kind(Kind::EndpointSlice);
        match slice {
            Some(slice) => {
                let mut judged = Judged::new(slice.clone(), self.pass);
                judged.violations = Some(Box::default());
                judged.set_size(slice.source_bytes());
                judged.set_created(slice.metadata.creation_timestamp.as_ref());
                if map.insert(Box::from(id.name.as_str()), judged).is_none() {
                    self.entries += 1;
                }
            }
            None => {
                if map.remove(id.name.as_str()).is_some() {
                    self.entries -= 1;
                }
            }
        }
    }

    /// Marks `object` seen at `kind`/`id`: `true` when it is the object
    /// last judged there. Otherwise its entry is the new object's, not
    /// judged yet, and `old_claim` has the slot its previous version had.
    fn see<T: Any + Send + Sync>(
        &mut self,
        kind: Kind,
        id: &NsName,
        object: &Arc<T>,
        old_claim: &mut Option<u32>,
    ) -> bool {
        let pass = self.pass;
        let namespace = self
            .namespaces
            .entry_ref(id.namespace.as_str())
            .or_default();
        let map = namespace.kind(kind);
        let address = Arc::as_ptr(object).cast::<()>();
        match map.get_mut(id.name.as_str()) {
            Some(j) if same(&j.object, address) => {
                j.seen = pass;
                self.seen += 1;
                true
            }
            Some(j) => {
                *old_claim = j.claim();
                let object: Arc<dyn Any + Send + Sync> = object.clone();
                *j = Judged::new(object, pass);
                self.seen += 1;
                self.refused.remove(&key(kind, id));
                false
            }
            None => {
                map.insert(
                    Box::from(id.name.as_str()),
                    Judged::new(object.clone(), pass),
                );
                self.entries += 1;
                self.seen += 1;
                false
            }
        }
    }

    fn entry(&mut self, kind: Kind, id: &NsName) -> Option<&mut Judged> {
        self.namespaces
            .get_mut(id.namespace.as_str())?
            .kinds
            .iter_mut()
            .find(|(k, _)| *k == kind)?
            .1
            .get_mut(id.name.as_str())
    }

    /// Sets a verdict; `true` when it differs from what it replaces.
    fn set_verdict(&mut self, kind: Kind, id: &NsName, violations: Vec<Violation>) -> bool {
        let refused = !violations.is_empty();
        let Some(j) = self.entry(kind, id) else {
            return false;
        };
        let changed = j.violations.as_deref() != Some(&violations[..]);
        j.violations = Some(violations.into_boxed_slice());
        if refused {
            self.refused.insert(key(kind, id));
        } else {
            self.refused.remove(&key(kind, id));
        }
        changed
    }

    /// Drops the entries the last walk did not see (their objects left
    /// the store): their claims go to `dirty`, their namespaces to
    /// `touched`.
    fn sweep(&mut self, dirty: &mut Vec<Name>, touched: &mut HashSet<String>) {
        let pass = self.pass;
        let mut gone = Vec::new();
        for (namespace, n) in &mut self.namespaces {
            for (kind, map) in &mut n.kinds {
                map.retain(|name, j| {
                    if j.seen == pass {
                        return true;
                    }
                    gone.push((
                        ObjectKey {
                            kind: *kind,
                            namespace: namespace.clone(),
                            name: name.to_string(),
                        },
                        j.claim(),
                    ));
                    false
                });
            }
        }
        for (key, claim) in gone {
            self.entries -= 1;
            if let Some(slot) = claim {
                dirty.extend(self.claims.remove(slot));
            }
            self.refused.remove(&key);
            touched.insert(key.namespace);
        }
        self.namespaces
            .retain(|_, n| n.kinds.iter().any(|(_, m)| !m.is_empty()));
    }
}

/// A host name a claim holds: an exact host, or a wildcard's suffix;
/// `subtree` for a Gateway API wildcard, which holds every name below its
/// suffix, any number of labels down.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Name {
    name: String,
    subtree: bool,
}

fn names_of(hosts: &[HostPattern], gateway: bool) -> impl Iterator<Item = Name> + '_ {
    hosts.iter().map(move |h| match h {
        HostPattern::Exact(n) => Name {
            name: n.clone(),
            subtree: false,
        },
        HostPattern::Wildcard(s) => Name {
            name: s.clone(),
            subtree: gateway,
        },
    })
}

/// One object claiming hosts.
#[derive(Debug)]
struct Claim {
    kind: Kind,
    id: NsName,
    names: Vec<Name>,
}

/// Every claim by the names it holds, so that the claims overlapping a
/// name are found without a walk over all of them.
#[derive(Debug, Default)]
struct ClaimIndex {
    slots: Vec<Option<Claim>>,
    free: Vec<u32>,
    /// Claims by each name they hold (by its hash: a collision only adds a
    /// claim to a component, which judges it as the full pass would).
    by_name: FastHashMap<u64, Slots>,
    /// Claims by the parent of each name they hold (`a.foo.com` under
    /// `foo.com`): what a wildcard on the parent overlaps.
    by_parent: FastHashMap<u64, Slots>,
    /// Claims holding a Gateway API wildcard, whose reach below is any
    /// depth.
    subtrees: usize,
    hasher: foldhash::fast::RandomState,
}

fn parent(name: &str) -> Option<&str> {
    name.split_once('.').map(|(_, rest)| rest)
}

fn within(name: &str, domain: &str) -> bool {
    name.len() > domain.len()
        && name.ends_with(domain)
        && name.as_bytes()[name.len() - domain.len() - 1] == b'.'
}

/// The claims listed under one name's hash: nearly always one, kept
/// without an allocation of its own (two such lists per claimed name).
#[derive(Debug)]
enum Slots {
    One(u32),
    Many(Vec<u32>),
}

impl Slots {
    fn list(map: &mut FastHashMap<u64, Slots>, hash: u64, slot: u32) {
        map.entry(hash)
            .and_modify(|slots| match slots {
                Slots::One(first) => {
                    let first = *first;
                    *slots = Slots::Many(vec![first, slot]);
                }
                Slots::Many(v) => v.push(slot),
            })
            .or_insert(Slots::One(slot));
    }

    fn unlist(map: &mut FastHashMap<u64, Slots>, hash: u64, slot: u32) {
        let Some(slots) = map.get_mut(&hash) else {
            return;
        };
        let empty = match slots {
            Slots::One(s) => *s == slot,
            Slots::Many(v) => {
                v.retain(|&s| s != slot);
                v.is_empty()
            }
        };
        if empty {
            map.remove(&hash);
        }
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        match self {
            Slots::One(s) => std::slice::from_ref(s),
            Slots::Many(v) => v.as_slice(),
        }
        .iter()
        .copied()
    }
}

impl ClaimIndex {
    fn hash(&self, name: &str) -> u64 {
        self.hasher.hash_one(name)
    }

    fn insert(&mut self, claim: Claim) -> u32 {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                u32::try_from(self.slots.len() - 1).expect("fewer than 4G claims")
            }
        };
        for n in &claim.names {
            let h = self.hash(&n.name);
            Slots::list(&mut self.by_name, h, slot);
            if let Some(p) = parent(&n.name) {
                let h = self.hash(p);
                Slots::list(&mut self.by_parent, h, slot);
            }
        }
        self.subtrees += usize::from(claim.names.iter().any(|n| n.subtree));
        self.slots[slot as usize] = Some(claim);
        slot
    }

    /// Frees a slot; returns the names its claim held.
    fn remove(&mut self, slot: u32) -> Vec<Name> {
        let Some(claim) = self.slots[slot as usize].take() else {
            return Vec::new();
        };
        for n in &claim.names {
            Slots::unlist(
                &mut self.by_name,
                self.hasher.hash_one(n.name.as_str()),
                slot,
            );
            if let Some(p) = parent(&n.name) {
                Slots::unlist(&mut self.by_parent, self.hasher.hash_one(p), slot);
            }
        }
        self.subtrees -= usize::from(claim.names.iter().any(|n| n.subtree));
        self.free.push(slot);
        claim.names
    }

    /// The claims overlapping `dirty` names or the claims `seeds`, and
    /// every claim overlapping one of those, transitively.
    fn component(&self, mut queue: Vec<Name>, seeds: &[u32]) -> Vec<u32> {
        let mut members: HashSet<u32> = HashSet::new();
        let mut order = Vec::new();
        let mut add = |slot: u32, queue: &mut Vec<Name>, order: &mut Vec<u32>| {
            if members.insert(slot)
                && let Some(claim) = &self.slots[slot as usize]
            {
                order.push(slot);
                queue.extend(claim.names.iter().cloned());
            }
        };
        for &slot in seeds {
            add(slot, &mut queue, &mut order);
        }
        let mut named: HashSet<Name> = HashSet::new();
        let mut subtrees: Vec<String> = Vec::new();
        loop {
            while let Some(n) = queue.pop() {
                if !named.insert(n.clone()) {
                    continue;
                }
                if n.subtree {
                    subtrees.push(n.name.clone());
                }
                // The same name, a name above it, a name one below it.
                let above = std::iter::successors(Some(n.name.as_str()), |n| parent(n));
                for at in above {
                    for slot in self
                        .by_name
                        .get(&self.hash(at))
                        .into_iter()
                        .flat_map(Slots::iter)
                    {
                        add(slot, &mut queue, &mut order);
                    }
                }
                for slot in self
                    .by_parent
                    .get(&self.hash(&n.name))
                    .into_iter()
                    .flat_map(Slots::iter)
                {
                    add(slot, &mut queue, &mut order);
                }
            }
            // A Gateway API wildcard reaches any depth below its suffix:
            // the claims there are found by a walk over all of them.
            if subtrees.is_empty() {
                break;
            }
            let below: Vec<u32> = self
                .slots
                .iter()
                .enumerate()
                .filter_map(|(slot, c)| {
                    let c = c.as_ref()?;
                    c.names
                        .iter()
                        .any(|n| subtrees.iter().any(|s| within(&n.name, s)))
                        .then_some(slot as u32)
                })
                .collect();
            subtrees.clear();
            for slot in below {
                add(slot, &mut queue, &mut order);
            }
            if queue.is_empty() {
                break;
            }
        }
        order
    }
}

/// The object at `kind`/`id` of `store`, for a kind that claims hosts.
fn claimant<'s>(store: &'s Store, kind: Kind, id: &NsName) -> Option<TenantObjectRef<'s>> {
    Some(match kind {
        Kind::Ingress => TenantObjectRef::Ingress(&store.ingresses.get(id)?.object),
        Kind::Gateway => TenantObjectRef::Gateway(&store.gateways.get(id)?.object),
        Kind::ListenerSet => TenantObjectRef::ListenerSet(&store.listener_sets.get(id)?.object.set),
        Kind::HttpRoute => TenantObjectRef::HttpRoute(&store.http_routes.get(id)?.object),
        Kind::GrpcRoute => TenantObjectRef::GrpcRoute(&store.grpc_routes.get(id)?.object),
        Kind::TlsRoute => TenantObjectRef::TlsRoute(&store.tls_routes.get(id)?.object),
        _ => return None,
    })
}

/// The hosts a claimant holds once admitted: an Ingress's rule and TLS
/// hosts, a Gateway API object's hostnames.
pub(super) fn held_hosts(object: TenantObjectRef<'_>) -> Vec<HostPattern> {
    match object {
        TenantObjectRef::Ingress(ingress) => {
            let spec = ingress.spec.as_ref();
            let rule_hosts = spec
                .into_iter()
                .flat_map(|s| s.rules.iter().flatten())
                .filter_map(|r| r.host.as_deref());
            let tls_hosts = spec
                .into_iter()
                .flat_map(|s| s.tls.iter().flatten())
                .flat_map(|t| t.hosts.iter().flatten())
                .map(String::as_str);
            rule_hosts
                .chain(tls_hosts)
                .filter_map(|h| HostPattern::parse(h).ok())
                .collect()
        }
        other => claimed_hosts(other),
    }
}

fn hold(holdings: &mut Holdings, holder: &Holder, kind: Kind, hosts: &[HostPattern]) {
    for host in hosts {
        match kind {
            Kind::Ingress => holdings.insert(holder.clone(), host),
            _ => holdings.insert_gateway_host(holder.clone(), host),
        }
    }
}

/// One walk over the objects of a load: which changed, judged where no
/// host claim decides their verdict; the claims that changed, with the
/// names they held and hold, for the component.
struct Walk<'w, 's> {
    verdicts: &'w mut TenantVerdicts,
    store: &'s Store,
    by_namespace: &'w TenantsByNamespace,
    base: &'w Holdings,
    domain: &'w str,
    lb_networks: &'w [IpNet],
    dirty: Vec<Name>,
    seeds: Vec<u32>,
    touched: HashSet<String>,
}

/// A judged object's violations, its size as JSON and its creation time.
fn judge(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    object: TenantObjectRef<'_>,
) -> (Vec<Violation>, usize, Option<Time>) {
    let size = admission::json_size(&object);
    let violations = admission::check_typed_sized(ctx, namespace, object, size);
    (violations, size, object.creation_timestamp().cloned())
}

impl<'s> Walk<'_, 's> {
    /// An object that claims hosts, seen: a changed one's old and new
    /// names are dirty, and it is judged in the component.
    fn claim<T: Any + Send + Sync>(
        &mut self,
        kind: Kind,
        id: &NsName,
        object: &Arc<T>,
        as_ref: TenantObjectRef<'_>,
    ) {
        let mut old = None;
        if self.verdicts.see(kind, id, object, &mut old) {
            return;
        }
        if let Some(slot) = old {
            self.dirty.extend(self.verdicts.claims.remove(slot));
        }
        let hosts = held_hosts(as_ref);
        let names: Vec<Name> = names_of(&hosts, kind != Kind::Ingress).collect();
        self.dirty.extend(names.iter().cloned());
        let slot = self.verdicts.claims.insert(Claim {
            kind,
            id: id.clone(),
            names,
        });
        if let Some(j) = self.verdicts.entry(kind, id) {
            j.claim = slot;
            j.set_created(as_ref.creation_timestamp());
        }
        self.seeds.push(slot);
        self.touched.insert(id.namespace.clone());
    }

    /// Any other object of a tenant namespace, seen: judged unless the
    /// same as last time (no check of these reads a host claim).
    fn other<T: Any + Send + Sync>(
        &mut self,
        kind: Kind,
        id: &NsName,
        object: &Arc<T>,
        judge: impl FnOnce(&AdmissionContext<'_>) -> (Vec<Violation>, usize, Option<Time>),
    ) {
        let Some(tenant) = self.by_namespace.get(&id.namespace) else {
            return;
        };
        let mut old = None;
        if self.verdicts.see(kind, id, object, &mut old) {
            return;
        }
        self.touched.insert(id.namespace.clone());
        let ctx = AdmissionContext::new(tenant, self.domain, self.lb_networks, self.base);
        let (violations, size, created) = judge(&ctx);
        self.verdicts.judged += 1;
        if let Some(j) = self.verdicts.entry(kind, id) {
            j.set_size(size);
            j.set_created(created.as_ref());
        }
        self.verdicts.set_verdict(kind, id, violations);
    }

    /// An object no longer in the store at `kind`/`id`.
    fn gone(&mut self, kind: Kind, id: &NsName) {
        let Some(n) = self.verdicts.namespaces.get_mut(id.namespace.as_str()) else {
            return;
        };
        let Some((_, map)) = n.kinds.iter_mut().find(|(k, _)| *k == kind) else {
            return;
        };
        let Some(j) = map.remove(id.name.as_str()) else {
            return;
        };
        self.verdicts.entries -= 1;
        if let Some(slot) = j.claim() {
            self.dirty.extend(self.verdicts.claims.remove(slot));
        }
        self.verdicts.refused.remove(&key(kind, id));
        self.touched.insert(id.namespace.clone());
    }

    /// Every object of the store.
    fn everything(&mut self) {
        for kind in JUDGED_KINDS {
            self.kind(kind, None);
        }
    }

    /// The object at `key`, as [`Self::everything`] sees it, or gone.
    fn key(&mut self, key: &ObjectKey) {
        let id = &NsName::new(key.namespace.clone(), key.name.clone());
        if !self.kind(key.kind, Some(id)) {
            self.gone(key.kind, id);
        }
    }

    /// The objects of `kind`, every one or the one at `only`, seen;
    /// whether there was any.
    fn kind(&mut self, kind: Kind, only: Option<&NsName>) -> bool {
        let store = self.store;
        match kind {
            Kind::Ingress => self.claims(kind, store.ingresses.pick(only), |o| {
                TenantObjectRef::Ingress(o)
            }),
            Kind::Gateway => self.claims(kind, store.gateways.pick(only), |o| {
                TenantObjectRef::Gateway(o)
            }),
            Kind::ListenerSet => self.claims(kind, store.listener_sets.pick(only), listener_set),
            Kind::HttpRoute => self.claims(kind, store.http_routes.pick(only), |o| {
                TenantObjectRef::HttpRoute(o)
            }),
            Kind::GrpcRoute => self.claims(kind, store.grpc_routes.pick(only), |o| {
                TenantObjectRef::GrpcRoute(o)
            }),
            Kind::TlsRoute => self.claims(kind, store.tls_routes.pick(only), |o| {
                TenantObjectRef::TlsRoute(o)
            }),
            // The compact form keeps every field (crate::service): the
            // rules judge, and the quota weighs, the Service as written.
            Kind::Service => self.judged(kind, store.services.pick(only), |ctx, id, s| {
                let typed = s.to_typed();
                judge(ctx, &id.namespace, TenantObjectRef::Service(&typed))
            }),
            // Two maps of one kind: a name is in one or the other.
            Kind::Secret => {
                self.others(kind, store.secrets.pick(only), tls_secret)
                    | self.others(kind, store.ca_secrets.pick(only), |o| {
                        TenantObjectRef::Secret(o)
                    })
            }
            Kind::TcpRoute => self.others(kind, store.tcp_routes.pick(only), |o| {
                TenantObjectRef::TcpRoute(o)
            }),
            Kind::UdpRoute => self.others(kind, store.udp_routes.pick(only), |o| {
                TenantObjectRef::UdpRoute(o)
            }),
            Kind::ReferenceGrant => self.others(kind, store.reference_grants.pick(only), |o| {
                TenantObjectRef::ReferenceGrant(o)
            }),
            Kind::BackendTlsPolicy => {
                self.others(kind, store.backend_tls_policies.pick(only), |o| {
                    TenantObjectRef::BackendTlsPolicy(o)
                })
            }
            Kind::RouteTrafficPolicy => {
                let policies = judged_policies(store, store.route_traffic_policies.pick(only));
                self.others(kind, policies, |o| TenantObjectRef::RouteTrafficPolicy(o))
            }
            Kind::ConfigMap => self.others(kind, store.config_maps.pick(only), |o| {
                TenantObjectRef::ConfigMap(o)
            }),
            // The rules run on what the proxy kept of a slice, which is
            // all it acts on (crate::endpoints), plus what was found in
            // the dropped fields; the quota counts the slice as written.
            Kind::EndpointSlice => {
                self.judged(kind, store.endpoint_slices.pick(only), |ctx, id, s| {
                    let created = s.metadata.creation_timestamp.clone();
                    (
                        judge_slice(ctx, &id.namespace, s),
                        s.source_bytes(),
                        created,
                    )
                })
            }
            // Cluster-scoped kinds: a Tenant's change drops every verdict
            // (TenantVerdicts::begin); the rest are not judged.
            _ => true,
        }
    }

    /// Objects that claim hosts; whether there were any.
    fn claims<'m, T: Any + Send + Sync>(
        &mut self,
        kind: Kind,
        objects: impl IntoIterator<Item = (&'m NsName, &'m Stored<T>)>,
        as_ref: fn(&T) -> TenantObjectRef<'_>,
    ) -> bool {
        let mut any = false;
        for (id, s) in objects {
            self.claim(kind, id, &s.object, as_ref(&s.object));
            any = true;
        }
        any
    }

    /// Objects of the other kinds, judged as written; whether there were
    /// any.
    fn others<'m, T: Any + Send + Sync>(
        &mut self,
        kind: Kind,
        objects: impl IntoIterator<Item = (&'m NsName, &'m Stored<T>)>,
        as_ref: fn(&T) -> TenantObjectRef<'_>,
    ) -> bool {
        self.judged(kind, objects, |ctx, id, o| {
            judge(ctx, &id.namespace, as_ref(o))
        })
    }

    /// Objects judged by `judge` unless the same as last time; whether
    /// there were any.
    fn judged<'m, T: Any + Send + Sync>(
        &mut self,
        kind: Kind,
        objects: impl IntoIterator<Item = (&'m NsName, &'m Stored<T>)>,
        judge: impl Fn(&AdmissionContext<'_>, &NsName, &T) -> (Vec<Violation>, usize, Option<Time>),
    ) -> bool {
        let mut any = false;
        for (id, s) in objects {
            self.other(kind, id, &s.object, |ctx| judge(ctx, id, &s.object));
            any = true;
        }
        any
    }
}

/// The kinds the check judges (or, claiming hosts, holds).
const JUDGED_KINDS: [Kind; 15] = [
    Kind::Ingress,
    Kind::Gateway,
    Kind::ListenerSet,
    Kind::HttpRoute,
    Kind::GrpcRoute,
    Kind::TlsRoute,
    Kind::Service,
    Kind::Secret,
    Kind::TcpRoute,
    Kind::UdpRoute,
    Kind::ReferenceGrant,
    Kind::BackendTlsPolicy,
    Kind::RouteTrafficPolicy,
    Kind::ConfigMap,
    Kind::EndpointSlice,
];

/// A store map's objects: every one, or the one at `only`.
trait Pick<T> {
    fn pick<'m>(&'m self, only: Option<&NsName>) -> Picked<'m, T>;
}

type Picked<'m, T> = Box<dyn Iterator<Item = (&'m NsName, &'m Stored<T>)> + 'm>;

impl<T> Pick<T> for std::collections::BTreeMap<NsName, Stored<T>> {
    fn pick<'m>(&'m self, only: Option<&NsName>) -> Picked<'m, T> {
        match only {
            None => Box::new(self.iter()),
            Some(id) => Box::new(self.get_key_value(id).into_iter()),
        }
    }
}

impl<T> Pick<T> for FastHashMap<NsName, Stored<T>> {
    fn pick<'m>(&'m self, only: Option<&NsName>) -> Picked<'m, T> {
        match only {
            None => Box::new(self.iter()),
            Some(id) => Box::new(self.get_key_value(id).into_iter()),
        }
    }
}

fn listener_set(stored: &crate::store::StoredListenerSet) -> TenantObjectRef<'_> {
    TenantObjectRef::ListenerSet(&stored.set)
}

fn tls_secret(secret: &crate::store::TlsSecret) -> TenantObjectRef<'_> {
    TenantObjectRef::Secret(&secret.source)
}

/// A refusal standing in a policy's place (its metadata and targetRefs
/// alone, crate::validate::Parsed::Refused) refuses its own namespace's
/// routes; judged, it would be dropped for setting nothing and leave them
/// without what the tenant asked for.
fn judged_policies<'m>(
    store: &'m Store,
    policies: impl IntoIterator<
        Item = (
            &'m NsName,
            &'m Stored<teapot_api::route_policy::RouteTrafficPolicy>,
        ),
    >,
) -> impl Iterator<
    Item = (
        &'m NsName,
        &'m Stored<teapot_api::route_policy::RouteTrafficPolicy>,
    ),
> {
    policies
        .into_iter()
        .filter(|(id, _)| !store.refused_route_traffic_policies.contains_key(*id))
}

/// One pass of the tenant check over `loaded`, by difference from the
/// last one `verdicts` remembers; returns whether it put back any
/// previous version.
#[allow(clippy::too_many_arguments)]
pub(super) fn admit_pass(
    loaded: &mut Store,
    problems: &mut Vec<Problem>,
    previous: Option<&Store>,
    domain: &str,
    lb_networks: &[IpNet],
    verdicts: &mut TenantVerdicts,
    changed: Option<&[ObjectKey]>,
    refused_keys: &mut Vec<ObjectKey>,
) -> bool {
    if loaded.tenants.is_empty() {
        return false;
    }
    let store = &*loaded;
    // The index `begin` built for these Tenants.
    let by_namespace = match verdicts.tenants.same_as(store) {
        true => verdicts.tenants.clone(),
        false => Arc::new(TenantsByNamespace::of(store)),
    };
    verdicts.pass = verdicts.pass.wrapping_add(1);
    verdicts.seen = 0;
    verdicts.judged = 0;
    let base = std::mem::take(&mut verdicts.networks);
    let mut walk = Walk {
        verdicts: &mut *verdicts,
        store,
        by_namespace: &by_namespace,
        base: &base,
        domain,
        lb_networks,
        dirty: Vec::new(),
        seeds: Vec::new(),
        touched: HashSet::new(),
    };
    match changed {
        None => {
            walk.everything();
            // What left the store since the last walk.
            if walk.verdicts.seen < walk.verdicts.entries {
                walk.verdicts.sweep(&mut walk.dirty, &mut walk.touched);
            }
        }
        Some(changed) => {
            // The store is the last admission's but for the keys changed
            // and those it refused (which it took out, or put a previous
            // version of back).
            let mut keys: BTreeSet<&ObjectKey> = changed.iter().collect();
            let refused: Vec<ObjectKey> = walk
                .verdicts
                .refused
                .iter()
                .chain(
                    walk.verdicts
                        .namespaces
                        .values()
                        .flat_map(|n| n.over.iter().map(|(k, _)| k)),
                )
                .cloned()
                .collect();
            keys.extend(refused.iter());
            for key in keys {
                walk.key(key);
            }
        }
    }
    let Walk {
        dirty,
        seeds,
        mut touched,
        ..
    } = walk;

    // The claims touched, judged again oldest first, the operator's held
    // before any tenant's.
    let component = verdicts.claims.component(dirty, &seeds);
    // Grants and networks, and the component's claims as their turns
    // come: what the claims' checks read.
    let mut holdings = match component.is_empty() {
        true => Holdings::default(),
        false => base.clone(),
    };
    let mut turns = Vec::new();
    for slot in component {
        let Some(claim) = &verdicts.claims.slots[slot as usize] else {
            continue;
        };
        let Some(object) = claimant(store, claim.kind, &claim.id) else {
            continue;
        };
        if by_namespace.contains_key(&claim.id.namespace) {
            turns.push((claim.kind, claim.id.clone(), object));
            continue;
        }
        let holder = Holder::Operator {
            namespace: claim.id.namespace.clone(),
        };
        hold(&mut holdings, &holder, claim.kind, &held_hosts(object));
    }
    turns.sort_by_cached_key(|(kind, id, object)| {
        let created = object.creation_timestamp().map(|t| t.0);
        (created.is_none(), created, id.clone(), *kind)
    });
    for (kind, id, object) in turns {
        let tenant = by_namespace
            .get(&id.namespace)
            .expect("turns are taken in tenant namespaces");
        let ctx = AdmissionContext::new(tenant, domain, lb_networks, &holdings);
        let size = admission::json_size(&object);
        let violations = admission::check_typed_sized(&ctx, &id.namespace, object, size);
        verdicts.judged += 1;
        let admitted = violations.is_empty();
        if let Some(j) = verdicts.entry(kind, &id) {
            j.set_size(size);
            j.set_created(object.creation_timestamp());
            // What its patterns cost, for its tenant's limits: only once
            // the rules admitted it, which bound how many it may have.
            j.set_regex(match kind {
                Kind::Ingress => RegexCost::default(),
                _ if !admitted => RegexCost::default(),
                _ => admission::object_regex_cost(object),
            });
        }
        if verdicts.set_verdict(kind, &id, violations) {
            touched.insert(id.namespace.clone());
        }
        if admitted {
            let holder = Holder::Tenant(tenant.spec.cluster.clone());
            hold(&mut holdings, &holder, kind, &held_hosts(object));
        }
    }
    // Every object of a tenant namespace whose verdict stood.
    let in_tenants: usize = verdicts
        .namespaces
        .iter()
        .filter(|(ns, _)| by_namespace.contains_key(ns.as_str()))
        .flat_map(|(_, n)| n.kinds.iter())
        .map(|(_, m)| m.len())
        .sum();
    verdicts.reused = in_tenants.saturating_sub(verdicts.judged);

    verdicts.networks = base;

    // `maxTotalBytes`, weighed again where anything changed.
    for namespace in &touched {
        let Some(tenant) = by_namespace.get(namespace) else {
            continue;
        };
        let Some(n) = verdicts.namespaces.get_mut(namespace.as_str()) else {
            continue;
        };
        let mut weighed = Vec::new();
        for (kind, map) in &n.kinds {
            // Ingresses are held to maxIngresses, not weighed.
            if *kind == Kind::Ingress {
                continue;
            }
            for (name, j) in map.iter().filter(|(_, j)| j.admitted()) {
                weighed.push(Weighed {
                    created: j.created(),
                    key: ObjectKey {
                        kind: *kind,
                        namespace: namespace.clone(),
                        name: name.to_string(),
                    },
                    size: j.size(),
                    regex: j.regex(),
                });
            }
        }
        (n.weight, n.over) = over_total(weighed, tenant);
    }

    let mut refused = super::gateway_classes_in_tenants(store, &by_namespace);
    for key in &verdicts.refused {
        let id = NsName::new(key.namespace.clone(), key.name.clone());
        if let Some(j) = verdicts
            .namespaces
            .get(key.namespace.as_str())
            .and_then(|n| n.get(key.kind, &id.name))
            && let Some(violations) = &j.violations
        {
            refused.push((key.clone(), violations.to_vec()));
        }
    }
    for (namespace, n) in &verdicts.namespaces {
        if by_namespace.contains_key(namespace.as_str()) {
            refused.extend(n.over.iter().cloned());
        }
    }

    let refused = refused
        .into_iter()
        .filter_map(|(key, violations)| {
            Some((key.clone(), loaded.origin(&key)?.clone(), violations))
        })
        .collect();
    super::refuse(loaded, problems, previous, refused, refused_keys)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;
    use crate::manifests::{Loaded, load_text};

    const DOMAIN: &str = "example.net";

    /// A small deterministic generator (xorshift), so a failing sequence
    /// is the same on every run.
    struct Dice(u64);

    impl Dice {
        fn roll(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
            of[self.roll(of.len())]
        }
    }

    /// Hosts that overlap in every way the check knows: the same name, a
    /// wildcard over it, a name below a Gateway API wildcard, a granted
    /// domain, a tenant's own subtree, custom domains.
    const HOSTS: &[&str] = &[
        "x.shop.example.org",
        "y.shop.example.org",
        "*.shop.example.org",
        "deep.x.shop.example.org",
        "app.a.lb.example.net",
        "app.b.lb.example.net",
        "www.custom.test",
        "api.custom.test",
        "*.custom.test",
        "b.example.org",
        "*.a.lb.example.net",
        "svc.a.lb.example.net",
        "*.svc.a.lb.example.net",
        "deep.svc.a.lb.example.net",
    ];
    const NAMESPACES: &[&str] = &["tenant-a", "tenant-b", "ops"];
    const NAMES: &[&str] = &["one", "two", "three"];

    fn created(dice: &mut Dice) -> String {
        format!("2024-01-0{}T00:00:00Z", 1 + dice.roll(4))
    }

    /// One random document for `key` (kind, namespace, name).
    fn document(dice: &mut Dice, kind: Kind, namespace: &str, name: &str) -> String {
        let meta = format!(
            "metadata: {{name: {name}, namespace: {namespace}, creationTimestamp: \"{}\"}}",
            created(dice)
        );
        match kind {
            Kind::Ingress => {
                let rules: Vec<String> = (0..1 + dice.roll(2))
                    .map(|_| format!("{{host: \"{}\"}}", dice.pick(HOSTS)))
                    .collect();
                // An authentication service by address: inside its own
                // nodes, another tenant's, or none.
                let auth = match dice.pick(&["", "10.1.0.7", "10.2.0.7"]) {
                    "" => String::new(),
                    ip => format!(
                        ", annotations: {{nginx.ingress.kubernetes.io/auth-url: \"http://{ip}/auth\"}}"
                    ),
                };
                let meta = format!("{}{auth}}}", meta.trim_end_matches('}'));
                format!(
                    "apiVersion: networking.k8s.io/v1\nkind: Ingress\n{meta}\nspec:\n  ingressClassName: teapot\n  rules: [{}]\n",
                    rules.join(", ")
                )
            }
            Kind::HttpRoute => format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n{meta}\nspec:\n  parentRefs: [{{name: gw}}]\n  hostnames: [\"{}\"]\n",
                dice.pick(HOSTS)
            ),
            Kind::Service => {
                let ty = dice.pick(&["ClusterIP", "ClusterIP", "ExternalName"]);
                format!(
                    "apiVersion: v1\nkind: Service\n{meta}\nspec: {{type: {ty}, ports: [{{name: http, port: {}}}]}}\n",
                    80 + dice.roll(3)
                )
            }
            _ => {
                let net = dice.pick(&["10.1", "10.2", "192.168"]);
                format!(
                    "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}, namespace: {namespace}, creationTimestamp: \"{}\", labels: {{kubernetes.io/service-name: s, endpointslice.kubernetes.io/managed-by: sync.teapot.dev}}}}\naddressType: IPv4\nports: [{{name: http, port: 30080}}]\nendpoints: [{{addresses: [\"{net}.0.{}\"]}}]\n",
                    created(dice),
                    1 + dice.roll(9)
                )
            }
        }
    }

    fn tenant(dice: &mut Dice, cluster: &str, net: &str) -> String {
        let grant = dice.pick(&["shop.example.org", "example.org", "other.example.org"]);
        let max = dice.pick(&["500", "1000", "100000"]);
        format!(
            "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: {cluster}}}\nspec: {{cluster: {cluster}, allowedDomains: [{grant}], nodeCIDRs: [{net}.0.0/16], limits: {{maxTotalBytes: {max}}}}}\n"
        )
    }

    /// Each document loaded once: the same version is the same `Arc` in
    /// every store built from it, as a reload leaves an unchanged object.
    fn load(version: usize, text: &str) -> Store {
        let mut loaded = Loaded::default();
        let file = format!("v{version}.yaml");
        load_text(Path::new(&file), text, &Store::default(), &mut loaded);
        loaded.store
    }

    fn listing(store: &Store) -> Vec<(ObjectKey, String)> {
        let mut out = Vec::new();
        store.for_each_key(|key, origin| out.push((key, origin.file.display().to_string())));
        out.sort();
        out
    }

    fn refusals(problems: &[Problem]) -> Vec<(Option<String>, String, bool)> {
        let mut out: Vec<_> = problems
            .iter()
            .map(|p| (p.object.clone(), p.message.clone(), p.kept_previous))
            .collect();
        out.sort();
        out
    }

    /// A name's list of claims: one kept inline, more in a vector, and
    /// the entry gone with its last claim.
    #[test]
    fn a_names_claims_are_listed_and_unlisted() {
        let mut map = FastHashMap::default();
        Slots::list(&mut map, 1, 7);
        assert!(matches!(map[&1], Slots::One(7)));
        Slots::list(&mut map, 1, 9);
        Slots::list(&mut map, 1, 7);
        assert_eq!(map[&1].iter().collect::<Vec<_>>(), [7, 9, 7]);
        Slots::unlist(&mut map, 1, 3);
        Slots::unlist(&mut map, 1, 7);
        assert_eq!(map[&1].iter().collect::<Vec<_>>(), [9]);
        Slots::unlist(&mut map, 1, 9);
        assert!(map.is_empty());
        Slots::list(&mut map, 2, 4);
        Slots::unlist(&mut map, 2, 5);
        Slots::unlist(&mut map, 2, 4);
        assert!(map.is_empty());
    }

    /// A verdict is kept per object of every tenant namespace: it stays
    /// packed, and what it packs comes back as it went in.
    #[test]
    fn a_verdict_packs_into_64_bytes_and_keeps_its_numbers() {
        assert!(std::mem::size_of::<Judged>() <= 64);
        let mut j = Judged::new(Arc::new(()), 1);
        assert_eq!((j.created(), j.claim(), j.size()), (None, None, 0));
        for (second, nanos) in [(0, 0), (1_700_000_000, 999_999_999), (-5, -250)] {
            let t = Time(k8s_openapi::jiff::Timestamp::new(second, nanos).unwrap());
            j.set_created(Some(&t));
            assert_eq!(j.created(), Some(t));
        }
        j.set_created(None);
        assert_eq!(j.created(), None);
        j.set_size(usize::MAX);
        assert_eq!(j.size(), u32::MAX as usize);
        let cost = RegexCost {
            count: 3,
            bytes: 4_000,
        };
        j.set_regex(cost);
        assert_eq!((j.regex().count, j.regex().bytes), (3, 4_000));
        j.claim = 7;
        assert_eq!(j.claim(), Some(7));
    }

    /// A wildcard added later is judged against the names one label
    /// below it that others hold, though none of them changed.
    #[test]
    fn a_wildcard_added_meets_the_hosts_below_it() {
        let tenant = "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: a}\nspec: {cluster: a}\n";
        let ingress = |namespace: &str, name: &str, host: &str| {
            format!(
                "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  ingressClassName: teapot\n  rules: [{{host: \"{host}\"}}]\n"
            )
        };
        let mut verdicts = TenantVerdicts::default();
        let mut store = load(
            1,
            &format!(
                "{tenant}---\n{}",
                ingress("ops", "svc", "svc.a.lb.example.net")
            ),
        );
        let mut problems = Vec::new();
        let refused = super::super::admit_cached(
            &mut store,
            &mut problems,
            &Store::default(),
            DOMAIN,
            &[],
            &mut verdicts,
            None,
        );
        assert!(refused.is_empty(), "{problems:?}");
        let wildcard = load(2, &ingress("tenant-a", "all", "*.a.lb.example.net"));
        let key = ObjectKey {
            kind: Kind::Ingress,
            namespace: "tenant-a".into(),
            name: "all".into(),
        };
        store.retain_from(&wildcard, &key);
        let refused = super::super::admit_cached(
            &mut store,
            &mut problems,
            &Store::default(),
            DOMAIN,
            &[],
            &mut verdicts,
            Some(std::slice::from_ref(&key)),
        );
        assert_eq!(refused, [key], "{problems:?}");
        assert_eq!(verdicts.judged(), 1, "the one object changed");
    }

    /// One tenant's route change judges its own claim, whatever the
    /// fleet holds; a claim on a name others claim too (a custom domain
    /// anyone may ask for) judges those claims with it, and no more.
    #[test]
    fn a_change_judges_the_claims_its_names_touch() {
        let mut docs = Vec::new();
        for t in 0..30 {
            docs.push(format!(
                "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: t{t}}}\nspec: {{cluster: t{t}}}\n"
            ));
            for i in 0..10 {
                // Five tenants also ask for one custom domain.
                let host = match (t < 5, i) {
                    (true, 0) => "shop.custom.test".to_string(),
                    _ => format!("app{i}.t{t}.lb.example.net"),
                };
                docs.push(format!(
                    "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: i{i}, namespace: tenant-t{t}, creationTimestamp: \"2024-01-01T00:00:{i:02}Z\"}}\nspec:\n  ingressClassName: teapot\n  rules: [{{host: \"{host}\"}}]\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: tenant-t{t}}}\nspec: {{ports: [{{name: http, port: 80}}]}}\n"
                ));
            }
        }
        let mut store = load(1, &docs.join("---\n"));
        let mut verdicts = TenantVerdicts::default();
        let mut problems = Vec::new();
        let mut admit = |store: &mut Store, changed: Option<&[ObjectKey]>| {
            super::super::admit_cached(
                store,
                &mut problems,
                &Store::default(),
                DOMAIN,
                &[],
                &mut verdicts,
                changed,
            );
            verdicts.judged()
        };
        assert_eq!(admit(&mut store, None), 600, "the first load judges all");
        let change = |store: &mut Store, namespace: &str, name: &str, host: &str, version| {
            let text = format!(
                "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: {namespace}, creationTimestamp: \"2024-01-01T00:00:30Z\"}}\nspec:\n  ingressClassName: teapot\n  rules: [{{host: \"{host}\"}}]\n"
            );
            let key = ObjectKey {
                kind: Kind::Ingress,
                namespace: namespace.into(),
                name: name.into(),
            };
            store.retain_from(&load(version, &text), &key);
            vec![key]
        };
        let own = change(&mut store, "tenant-t20", "i3", "new.t20.lb.example.net", 2);
        assert_eq!(admit(&mut store, Some(&own)), 1, "its own claim alone");
        let shared = change(&mut store, "tenant-t2", "i0", "www.custom.test", 3);
        // The claim changed, and the four others on the name it left.
        assert_eq!(admit(&mut store, Some(&shared)), 5);
    }

    /// Random changes to a store of tenants' and the operator's objects,
    /// each admitted by difference from the last admission and by the
    /// reference, one pass over every object (module `reference`): the
    /// stores, refusals and problems agree.
    #[test]
    fn by_difference_equals_a_full_pass() {
        let (mut reused, mut seen) = (0, BTreeMap::<&str, usize>::new());
        for seed in 1..=12u64 {
            let mut dice = Dice(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491));
            let mut version = 0;
            let mut docs: BTreeMap<ObjectKey, Store> = BTreeMap::new();
            let mut put = |docs: &mut BTreeMap<ObjectKey, Store>, key: ObjectKey, text: String| {
                version += 1;
                docs.insert(key, load(version, &text));
            };
            for (cluster, net) in [("a", "10.1"), ("b", "10.2")] {
                let key = ObjectKey {
                    kind: Kind::Tenant,
                    namespace: String::new(),
                    name: cluster.into(),
                };
                let text = tenant(&mut dice, cluster, net);
                put(&mut docs, key, text);
            }
            let mut verdicts = TenantVerdicts::default();
            let mut admitted = Store::default();
            // As the kube source names them: the keys applied or removed
            // since the last load, and those the last admission refused.
            let mut diverged: Vec<ObjectKey> = Vec::new();
            for step in 0..60 {
                let mut changed: BTreeSet<ObjectKey> = diverged.drain(..).collect();
                for _ in 0..1 + dice.roll(4) {
                    let kind = [
                        Kind::Ingress,
                        Kind::Ingress,
                        Kind::HttpRoute,
                        Kind::Service,
                        Kind::EndpointSlice,
                    ][dice.roll(5)];
                    let key = ObjectKey {
                        kind,
                        namespace: dice.pick(NAMESPACES).into(),
                        name: dice.pick(NAMES).into(),
                    };
                    changed.insert(key.clone());
                    match dice.roll(4) {
                        0 => drop(docs.remove(&key)),
                        _ => {
                            let text = document(&mut dice, kind, &key.namespace, &key.name);
                            put(&mut docs, key, text);
                        }
                    }
                }
                // Now and then a Tenant changes: every verdict goes.
                if dice.roll(15) == 0 {
                    let (cluster, net) = [("a", "10.1"), ("b", "10.2")][dice.roll(2)];
                    let key = ObjectKey {
                        kind: Kind::Tenant,
                        namespace: String::new(),
                        name: cluster.into(),
                    };
                    changed.insert(key.clone());
                    let text = tenant(&mut dice, cluster, net);
                    put(&mut docs, key, text);
                }
                let keys: Vec<ObjectKey> = changed.into_iter().collect();
                // A whole load now and then: every object walked.
                let changed = (dice.roll(4) != 0).then_some(keys.as_slice());
                // Half the seeds as the kube source gives a load (every
                // object, the refused ones as written again), half as a
                // directory read by name does (the admitted store with the
                // changed objects replaced).
                let mut store = Store::default();
                if seed % 2 == 0 {
                    for (key, doc) in &docs {
                        store.retain_from(doc, key);
                    }
                } else {
                    store = admitted.clone();
                    for key in &keys {
                        store.remove(key);
                        if let Some(doc) = docs.get(key) {
                            store.retain_from(doc, key);
                        }
                    }
                }
                let (mut by_difference, mut full) = (store.clone(), store);
                let (mut problems, mut full_problems) = (Vec::new(), Vec::new());
                let refused = super::super::admit_cached(
                    &mut by_difference,
                    &mut problems,
                    &admitted,
                    DOMAIN,
                    &[],
                    &mut verdicts,
                    changed,
                );
                let full_refused = super::super::reference::reference_admit(
                    &mut full,
                    &mut full_problems,
                    &admitted,
                    DOMAIN,
                    &[],
                );
                let at = format!("seed {seed}, step {step}");
                assert_eq!(refused, full_refused, "{at}");
                assert_eq!(refusals(&problems), refusals(&full_problems), "{at}");
                assert_eq!(listing(&by_difference), listing(&full), "{at}");
                reused += verdicts.reused();
                for p in &problems {
                    let why = [
                        "authentication service",
                        "overlaps a host",
                        "maxTotalBytes",
                        "outside",
                        "ExternalName",
                    ]
                    .into_iter()
                    .find(|w| p.message.contains(w))
                    .unwrap_or("other");
                    *seen.entry(why).or_default() += 1;
                }
                if seed % 2 == 0 {
                    diverged = refused;
                }
                admitted = by_difference;
            }
        }
        // The walk reused verdicts, and refused for every reason above.
        assert!(reused > 1000, "{reused}");
        let reasons = [
            "overlaps a host",
            "maxTotalBytes",
            "outside",
            "ExternalName",
            "authentication service",
        ];
        assert!(reasons.iter().all(|r| seen.get(r) > Some(&10)), "{seen:?}");
    }
}
