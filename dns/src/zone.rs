//! The zone teapot is authoritative for, as one immutable value: built
//! whole by [`ZoneBuilder`], or made from the zone before by the names
//! that changed ([`Zone::edit`]), and swapped in atomically, so a query
//! never sees half of a change. A zone made by edits shares the shards of
//! its tables that the edits did not touch with the zone it came from
//! ([`crate::names`]), so a change costs what it changes.
//!
//! The SOA serial is a hash of the zone's content, not a counter: every
//! replica that holds the same routes and addresses answers the same
//! serial, whichever of them compiled first or restarted last, and
//! whatever order of changes led it there. It sums a hash per name, so an
//! edit updates it by the names it changes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::rdata::{CAA, SOA};
use hickory_proto::rr::{LowerName, Name};

use crate::Error;
use crate::names::Names;

/// What an operator sets once for the zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneSettings {
    /// The zone's apex, e.g. `lb.example.com`.
    pub origin: String,
    /// The names of the zone's name servers (NS records, SOA MNAME).
    /// Names inside the zone get the zone's serving addresses as glue.
    pub nameservers: Vec<String>,
    /// The SOA RNAME, as a name (`hostmaster.lb.example.com`).
    pub hostmaster: String,
    /// TTL of A, AAAA and TXT answers: how long a resolver may keep sending
    /// clients to a replica that has stopped being ready.
    pub ttl: u32,
    /// TTL of NXDOMAIN and NODATA answers (the SOA MINIMUM, RFC 2308).
    pub negative_ttl: u32,
    /// TTL of the SOA, NS and CAA records, which change only with the
    /// operator's settings.
    pub apex_ttl: u32,
    /// CAA `issue` and `issuewild` values for the apex (e.g.
    /// `letsencrypt.org`); empty: no CAA record.
    pub caa_issuers: Vec<String>,
}

impl ZoneSettings {
    /// Settings with the usual TTLs: 5 s for addresses, 5 s negative, one
    /// hour for the apex; the first name server `ns1.ORIGIN`.
    pub fn new(origin: &str) -> ZoneSettings {
        let origin = origin.trim_end_matches('.').to_ascii_lowercase();
        ZoneSettings {
            nameservers: vec![format!("ns1.{origin}")],
            hostmaster: format!("hostmaster.{origin}"),
            origin,
            ttl: 5,
            negative_ttl: 5,
            apex_ttl: 3600,
            caa_issuers: Vec::new(),
        }
    }
}

/// The records one name owns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Node {
    pub(crate) a: Vec<Ipv4Addr>,
    pub(crate) aaaa: Vec<Ipv6Addr>,
    pub(crate) txt: Vec<String>,
}

/// One zone, ready to answer from.
#[derive(Clone, Debug)]
pub struct Zone {
    /// The hash of the settings and the sum of the names' hashes
    /// ([`name_hash`]): the serial, kept as the parts an edit updates.
    pub(crate) settings_hash: u64,
    pub(crate) content_hash: u64,
    pub(crate) origin: LowerName,
    pub(crate) origin_name: Name,
    pub(crate) soa: SOA,
    pub(crate) nameservers: Vec<Name>,
    pub(crate) caa: Vec<CAA>,
    pub(crate) ttl: u32,
    pub(crate) negative_ttl: u32,
    pub(crate) apex_ttl: u32,
    /// The origin in wire format, lowercase (see [`wire`]).
    pub(crate) origin_wire: Box<[u8]>,
    /// The SOA's RDATA in wire format for the fast path's negative
    /// answers: MNAME and RNAME each as the labels above the origin and
    /// whether the origin follows (a pointer to it in the question), or
    /// whole; then the five numbers.
    pub(crate) soa_names: [(Box<[u8]>, bool); 2],
    pub(crate) soa_numbers: [u8; 20],
    /// The names with records, keyed by their lowercase wire format
    /// ([`wire`]): the query path looks a name up as the query carries
    /// it, with no conversion.
    pub(crate) nodes: Names<Node>,
    /// Every name between a name with records and the apex (both
    /// excluded), with how many names with records are below it: an edit
    /// removes the name with the last one. Those without records of their
    /// own (`CLUSTER.lb.DOMAIN` when only its Ingresses have addresses) are
    /// the empty non-terminals: NODATA, not NXDOMAIN (RFC 8020).
    pub(crate) parents: Names<u32>,
    /// The records of each wildcard `*.P`, keyed by `P`: a name below `P`
    /// whose closest existing ancestor is `P` is answered from them
    /// (RFC 4592 §3.3.1), as a tenant's wildcard Ingress host routes it.
    pub(crate) wildcards: Names<Node>,
    /// False for [`ZoneBuilder::placeholder`]: names are not known yet.
    pub(crate) loaded: bool,
}

/// What a name in the zone holds, for the query path.
#[derive(Debug)]
pub(crate) enum Found<'z> {
    /// The name exists: its records, or none (the apex without records
    /// of its own, an empty non-terminal: NODATA for every type).
    Node(Option<&'z Node>),
    /// The name does not exist; the wildcard at its closest encloser
    /// answers it. The first field is that encloser, in wire format.
    Wildcard(&'z [u8], &'z Node),
    NxDomain,
}

impl Zone {
    /// What `name` (lowercase wire format, in the zone) holds. A wildcard
    /// answers only at the closest encloser, the nearest ancestor that
    /// exists as a name with records or an empty non-terminal (RFC 4592
    /// §3.3.1): `*.acme` answers `x.y.acme` only while `y.acme` does not
    /// exist.
    pub(crate) fn find(&self, name: &[u8]) -> Found<'_> {
        if let Some(node) = self.nodes.get(name) {
            return Found::Node(Some(node));
        }
        if name == &*self.origin_wire || self.parents.contains_key(name) {
            return Found::Node(None);
        }
        if self.wildcards.is_empty() {
            return Found::NxDomain;
        }
        let mut parent = name;
        while parent.len() > 1 {
            let Some(up) = parent.get(1 + usize::from(parent[0])..) else {
                break;
            };
            parent = up;
            if parent == &*self.origin_wire
                || self.nodes.contains_key(parent)
                || self.parents.contains_key(parent)
            {
                return match self.wildcards.get_key_value(parent) {
                    Some((encloser, node)) => Found::Wildcard(encloser, node),
                    None => Found::NxDomain,
                };
            }
        }
        Found::NxDomain
    }

    /// The zone's SOA serial.
    pub fn serial(&self) -> u32 {
        self.soa.serial
    }

    /// The apex, lowercase, without the trailing dot.
    pub fn origin(&self) -> String {
        self.origin_name
            .to_string()
            .trim_end_matches('.')
            .to_string()
    }

    /// Names with records (the apex counts when it has any).
    pub fn names(&self) -> usize {
        self.nodes.len()
    }

    /// Whether `name` (any case, with or without the trailing dot) is the
    /// apex or below it.
    pub fn contains(&self, name: &str) -> bool {
        parse_name(name).is_ok_and(|n| self.origin.zone_of(&LowerName::new(&n)))
    }
}

/// Collects names and records, then [`ZoneBuilder::build`]s the zone.
#[derive(Debug)]
pub struct ZoneBuilder {
    settings: ZoneSettings,
    origin: Name,
    names: BTreeMap<Name, BTreeNode>,
}

/// Sorted, so that the serial hashes the same content the same way.
#[derive(Debug, Default)]
struct BTreeNode {
    addresses: BTreeSet<IpAddr>,
    txt: BTreeSet<String>,
}

impl ZoneBuilder {
    pub fn new(settings: ZoneSettings) -> Result<ZoneBuilder, Error> {
        let origin = parse_name(&settings.origin)?;
        if settings.nameservers.is_empty() {
            return Err(Error::Zone(format!(
                "zone {}: at least one name server is needed for its NS and SOA records",
                settings.origin
            )));
        }
        for ns in &settings.nameservers {
            parse_name(ns)?;
        }
        parse_name(&settings.hostmaster)?;
        for issuer in &settings.caa_issuers {
            parse_name(issuer)?;
        }
        Ok(ZoneBuilder {
            settings,
            origin,
            names: BTreeMap::new(),
        })
    }

    /// An A or AAAA record for `name` (`*.NAME`: for every name below
    /// `NAME` that the zone does not hold otherwise); a name outside the zone is an error
    /// naming both.
    pub fn address(&mut self, name: &str, addr: IpAddr) -> Result<(), Error> {
        let name = self.inside(name)?;
        self.names.entry(name).or_default().addresses.insert(addr);
        Ok(())
    }

    /// A TXT record for `name` (one character-string of at most 255
    /// bytes, as an ACME DNS-01 digest is).
    pub fn txt(&mut self, name: &str, value: &str) -> Result<(), Error> {
        check_txt(name, value)?;
        let name = self.inside(name)?;
        self.names
            .entry(name)
            .or_default()
            .txt
            .insert(value.to_string());
        Ok(())
    }

    /// Whether `name` is in the zone (so a caller can skip the others
    /// without an error).
    pub fn contains(&self, name: &str) -> bool {
        parse_name(name).is_ok_and(|n| self.origin.zone_of(&n))
    }

    fn inside(&self, name: &str) -> Result<Name, Error> {
        Ok(inside(&self.origin, name, || self.settings.origin.clone())?.to_lowercase())
    }

    /// The zone of a server whose owner has not built one yet (a replica
    /// still listing its routes): SERVFAIL for the names in it, so
    /// resolvers ask another name server instead of caching an NXDOMAIN
    /// this replica cannot vouch for.
    pub fn placeholder(self) -> Zone {
        let mut zone = ZoneBuilder {
            names: BTreeMap::new(),
            ..self
        }
        .build();
        zone.loaded = false;
        zone
    }

    pub fn build(self) -> Zone {
        let s = &self.settings;
        let mut hash = Fnv::default();
        hash.write(s.origin.as_bytes());
        for ns in &s.nameservers {
            hash.write(ns.as_bytes());
        }
        hash.write(s.hostmaster.as_bytes());
        for n in [s.ttl, s.negative_ttl, s.apex_ttl] {
            hash.write(&n.to_be_bytes());
        }
        for issuer in &s.caa_issuers {
            hash.write(issuer.as_bytes());
        }
        let settings_hash = hash.0;
        let origin_wire = wire(&self.origin);
        let mut content_hash = 0u64;
        let mut nodes = Names::default();
        let mut parents: Names<u32> = Names::default();
        let mut wildcards = Names::default();
        for (name, records) in &self.names {
            let key = wire(name);
            let mut node = Node::default();
            for addr in &records.addresses {
                match addr {
                    IpAddr::V4(a) => node.a.push(*a),
                    IpAddr::V6(a) => node.aaaa.push(*a),
                }
            }
            node.txt.extend(records.txt.iter().cloned());
            content_hash = content_hash.wrapping_add(name_hash(&key, &node));
            for parent in parents_of(&key, &origin_wire) {
                count_below(&mut parents, parent);
            }
            if name.is_wildcard() {
                wildcards.insert(&wire(&name.base_name()), node.clone());
            }
            nodes.insert(&key, node);
        }
        let name = |n: &str| parse_name(n).expect("checked in new").to_lowercase();
        let nameservers: Vec<Name> = s.nameservers.iter().map(|n| name(n)).collect();
        let soa = SOA::new(
            nameservers[0].clone(),
            name(&s.hostmaster),
            0,
            3600,
            600,
            86400,
            s.negative_ttl,
        );
        let caa = s
            .caa_issuers
            .iter()
            .flat_map(|i| {
                // The issuer is written as a domain, not a name: no
                // trailing dot ("letsencrypt.org", RFC 8659 §4.2).
                let mut issuer = name(i);
                issuer.set_fqdn(false);
                [
                    CAA::new_issue(false, Some(issuer.clone()), Vec::new()),
                    CAA::new_issuewild(false, Some(issuer), Vec::new()),
                ]
            })
            .collect();
        let soa_names = [&soa.mname, &soa.rname].map(|name| {
            let name = wire(name);
            match name.len().checked_sub(origin_wire.len()) {
                Some(above) if name[above..] == *origin_wire && labels_end_at(&name, above) => {
                    (name[..above].into(), true)
                }
                _ => (name, false),
            }
        });
        let mut zone = Zone {
            settings_hash,
            content_hash,
            origin_wire,
            soa_names,
            soa_numbers: [0; 20],
            origin: LowerName::new(&self.origin),
            origin_name: self.origin.to_lowercase(),
            soa,
            nameservers,
            caa,
            ttl: s.ttl,
            negative_ttl: s.negative_ttl,
            apex_ttl: s.apex_ttl,
            nodes,
            parents,
            wildcards,
            loaded: true,
        };
        zone.seal();
        zone
    }
}

impl Zone {
    /// Sets the serial from the content's hash, in the SOA and in its wire
    /// form.
    fn seal(&mut self) {
        let h = mix(self.settings_hash ^ mix(self.content_hash));
        // 0 is avoided: some tools read it as "no serial".
        self.soa.serial = ((h ^ (h >> 32)) as u32).max(1);
        let numbers = [
            self.soa.serial,
            self.soa.refresh as u32,
            self.soa.retry as u32,
            self.soa.expire as u32,
            self.soa.minimum,
        ];
        for (chunk, n) in self.soa_numbers.chunks_mut(4).zip(numbers) {
            chunk.copy_from_slice(&n.to_be_bytes());
        }
    }

    /// A copy of this zone to change by name: what the edits leave alone
    /// stays shared with this one, which keeps answering meanwhile.
    pub fn edit(&self) -> ZoneEdit {
        ZoneEdit { zone: self.clone() }
    }
}

/// Two zones answer alike: the same settings, names, records, empty
/// non-terminals, wildcards and serial, however each was made.
impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        self.origin_wire == other.origin_wire
            && self.soa == other.soa
            && self.soa_names == other.soa_names
            && self.soa_numbers == other.soa_numbers
            && self.nameservers == other.nameservers
            && self.caa == other.caa
            && (self.ttl, self.negative_ttl, self.apex_ttl)
                == (other.ttl, other.negative_ttl, other.apex_ttl)
            && self.nodes == other.nodes
            && self.parents == other.parents
            && self.wildcards == other.wildcards
            && self.loaded == other.loaded
            && (self.settings_hash, self.content_hash) == (other.settings_hash, other.content_hash)
    }
}

/// A zone being made from another by the names that changed
/// ([`Zone::edit`]); [`ZoneEdit::finish`] gives it its serial.
#[derive(Debug)]
pub struct ZoneEdit {
    zone: Zone,
}

impl ZoneEdit {
    /// Whether `name` is in the zone.
    pub fn contains(&self, name: &str) -> bool {
        self.zone.contains(name)
    }

    /// Replaces the records of `name` with these addresses (A, AAAA) and
    /// TXT values (each one character-string, at most 255 bytes); none of
    /// either removes the name. A name outside the zone, invalid, or with a
    /// value too long is an error naming it, and changes nothing.
    pub fn set<'t>(
        &mut self,
        name: &str,
        addresses: impl IntoIterator<Item = IpAddr>,
        txt: impl IntoIterator<Item = &'t str>,
    ) -> Result<(), Error> {
        let mut node = Node::default();
        for value in txt {
            check_txt(name, value)?;
            node.txt.push(value.to_string());
        }
        let parsed = inside(&self.zone.origin_name, name, || self.zone.origin())?;
        for addr in addresses {
            match addr {
                IpAddr::V4(a) => node.a.push(a),
                IpAddr::V6(a) => node.aaaa.push(a),
            }
        }
        // As the builder's sets order them, so the name hashes alike.
        node.a.sort_unstable();
        node.a.dedup();
        node.aaaa.sort_unstable();
        node.aaaa.dedup();
        node.txt.sort_unstable();
        node.txt.dedup();
        self.put(&wire(&parsed), node);
        Ok(())
    }

    /// Removes `name` and its records; a name the zone does not hold (or
    /// cannot) is no error.
    pub fn remove(&mut self, name: &str) {
        if let Ok(parsed) = parse_name(name) {
            self.put(&wire(&parsed), Node::default());
        }
    }

    fn put(&mut self, key: &[u8], node: Node) {
        let zone = &mut self.zone;
        let empty = node == Node::default();
        let old = match zone.nodes.get(key) {
            Some(old) if *old == node => return,
            Some(old) => Some(name_hash(key, old)),
            None if empty => return,
            None => None,
        };
        if let Some(old) = old {
            zone.content_hash = zone.content_hash.wrapping_sub(old);
        }
        let wildcard = key.strip_prefix(b"\x01*");
        if empty {
            zone.nodes.remove(key);
            if let Some(base) = wildcard {
                zone.wildcards.remove(base);
            }
            for parent in parents_of(key, &zone.origin_wire) {
                match zone.parents.get_mut(parent) {
                    Some(below) if *below > 1 => *below -= 1,
                    _ => {
                        zone.parents.remove(parent);
                    }
                }
            }
            return;
        }
        zone.content_hash = zone.content_hash.wrapping_add(name_hash(key, &node));
        if let Some(base) = wildcard {
            zone.wildcards.insert(base, node.clone());
        }
        if zone.nodes.insert(key, node).is_none() {
            for parent in parents_of(key, &zone.origin_wire) {
                count_below(&mut zone.parents, parent);
            }
        }
    }

    /// The zone, its serial set from its content.
    pub fn finish(self) -> Zone {
        let mut zone = self.zone;
        zone.seal();
        zone
    }
}

/// `name`, parsed, when it is in the zone of `origin` (written as
/// `origin_text` gives it in the error that names both otherwise).
fn inside(origin: &Name, name: &str, origin_text: impl FnOnce() -> String) -> Result<Name, Error> {
    let parsed = parse_name(name)?;
    if !origin.zone_of(&parsed) {
        return Err(Error::Zone(format!(
            "{name} is not in the zone {}",
            origin_text()
        )));
    }
    Ok(parsed)
}

/// A TXT value `name` can hold: one character-string, at most 255 bytes
/// (an ACME DNS-01 digest is 43). The error names the name and the size.
pub fn check_txt(name: &str, value: &str) -> Result<(), Error> {
    if value.len() > 255 {
        return Err(Error::Zone(format!(
            "TXT record of {name}: {} bytes, at most 255",
            value.len()
        )));
    }
    Ok(())
}

/// One more name with records below `parent`.
fn count_below(parents: &mut Names<u32>, parent: &[u8]) {
    match parents.get_mut(parent) {
        Some(below) => *below += 1,
        None => {
            parents.insert(parent, 1);
        }
    }
}

/// The names between `key` and `origin` (both excluded), in wire format;
/// `key` is in the zone.
fn parents_of<'k>(key: &'k [u8], origin: &[u8]) -> impl Iterator<Item = &'k [u8]> {
    let mut at = key;
    std::iter::from_fn(move || {
        let up = at.get(1 + usize::from(*at.first()?)..)?;
        at = up;
        (up.len() > origin.len()).then_some(up)
    })
}

/// The hash of one name and its records (sorted): the serial sums them,
/// so it follows the content, not how it came about.
fn name_hash(key: &[u8], node: &Node) -> u64 {
    let mut hash = Fnv::default();
    hash.write(key);
    for a in &node.a {
        hash.write(&a.octets());
    }
    for a in &node.aaaa {
        hash.write(&a.octets());
    }
    for txt in &node.txt {
        hash.write(b"txt");
        hash.write(txt.as_bytes());
    }
    mix(hash.0)
}

/// The finaliser of SplitMix64: every input bit moves every output bit, so
/// a sum of hashes does not cancel in patterns.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `name` in wire format (length-prefixed labels, the root's empty label
/// last), ASCII lowercased: the key of the zone's tables. Case-insensitive
/// comparison of DNS names (RFC 4343) is then byte equality.
pub(crate) fn wire(name: &Name) -> Box<[u8]> {
    let mut out = Vec::with_capacity(name.len() + 2);
    for label in name.iter() {
        out.push(label.len() as u8);
        out.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    out.push(0);
    out.into_boxed_slice()
}

/// Whether a label of the wire-format `name` starts at `at`.
pub(crate) fn labels_end_at(name: &[u8], at: usize) -> bool {
    let mut i = 0;
    while i < at {
        i += 1 + usize::from(name[i]);
    }
    i == at
}

/// A fully qualified name from text, with an error that names it.
pub(crate) fn parse_name(name: &str) -> Result<Name, Error> {
    let mut parsed = Name::from_ascii(name).map_err(|e| Error::Name {
        name: name.to_string(),
        reason: e.to_string(),
    })?;
    parsed.set_fqdn(true);
    Ok(parsed)
}

/// FNV-1a, 64 bits: a stable hash (the same on every replica and every
/// build, unlike std's `DefaultHasher`) for the serial.
#[derive(Debug)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> ZoneBuilder {
        ZoneBuilder::new(ZoneSettings::new("lb.example.com")).unwrap()
    }

    #[test]
    fn the_serial_follows_the_content_not_the_order_of_insertion() {
        let mut a = builder();
        a.address("web.acme.lb.example.com", "192.0.2.1".parse().unwrap())
            .unwrap();
        a.address("web.acme.lb.example.com", "192.0.2.2".parse().unwrap())
            .unwrap();
        let mut b = builder();
        b.address("WEB.acme.lb.example.com.", "192.0.2.2".parse().unwrap())
            .unwrap();
        b.address("web.acme.lb.example.com", "192.0.2.1".parse().unwrap())
            .unwrap();
        assert_eq!(a.build().serial(), b.build().serial());
        let mut c = builder();
        c.address("web.acme.lb.example.com", "192.0.2.1".parse().unwrap())
            .unwrap();
        let one = c.build().serial();
        let mut d = builder();
        d.address("web.acme.lb.example.com", "192.0.2.1".parse().unwrap())
            .unwrap();
        d.address("web.acme.lb.example.com", "192.0.2.2".parse().unwrap())
            .unwrap();
        assert_ne!(one, d.build().serial());
    }

    #[test]
    fn names_outside_the_zone_are_refused_by_name() {
        let mut b = builder();
        let err = b
            .address("web.example.org", "192.0.2.1".parse().unwrap())
            .unwrap_err();
        assert!(err.to_string().contains("web.example.org"), "{err}");
        assert!(err.to_string().contains("lb.example.com"), "{err}");
        let err = b.txt("_acme-challenge.lb.example.com", &"x".repeat(256));
        assert!(err.is_err());
    }

    #[test]
    fn parents_of_names_are_empty_non_terminals() {
        let mut b = builder();
        b.address("web.acme.lb.example.com", "192.0.2.1".parse().unwrap())
            .unwrap();
        let zone = b.build();
        let parent = wire(&parse_name("ACME.lb.example.com").unwrap());
        assert_eq!(&*parent, b"\x04acme\x02lb\x07example\x03com\x00");
        assert_eq!(zone.parents.get(&parent), Some(&1));
        assert!(!zone.nodes.contains_key(&parent));
        assert!(!zone.parents.contains_key(&zone.origin_wire));
        assert!(zone.contains("ACME.lb.example.com."));
        assert!(!zone.contains("example.com"));
    }

    /// Random edits, each zone checked against the builder's zone of the
    /// same content: records, empty non-terminals (their counts), the
    /// wildcards and the serial.
    #[test]
    fn edits_make_the_zone_a_whole_build_of_the_same_content_makes() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(51);
        let names: Vec<String> = [
            "web.acme.lb.example.com",
            "api.acme.lb.example.com",
            "acme.lb.example.com",
            "*.acme.lb.example.com",
            "x.y.acme.lb.example.com",
            "*.y.acme.lb.example.com",
            "beta.lb.example.com",
            "a.b.c.beta.lb.example.com",
            "_acme-challenge.web.acme.lb.example.com",
            "lb.example.com",
            "ns1.lb.example.com",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        let addresses: Vec<IpAddr> = ["192.0.2.1", "192.0.2.2", "2001:db8::1", "2001:db8::2"]
            .into_iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let values = ["d1", "d2", "d3"];
        let mut content: BTreeMap<String, (BTreeSet<IpAddr>, BTreeSet<&str>)> = BTreeMap::new();
        let mut zone = builder().build();
        for step in 0..2000 {
            let mut edit = zone.edit();
            for _ in 0..rng.random_range(1..4) {
                let name = &names[rng.random_range(0..names.len())];
                let addrs: BTreeSet<IpAddr> = addresses
                    .iter()
                    .filter(|_| rng.random_range(0..3) == 0)
                    .copied()
                    .collect();
                let txt: BTreeSet<&str> = values
                    .iter()
                    .filter(|_| rng.random_range(0..4) == 0)
                    .copied()
                    .collect();
                // Listed in any order, twice: the zone sorts and dedups.
                let mut listed: Vec<IpAddr> = addrs.iter().chain(addrs.iter()).copied().collect();
                listed.reverse();
                if rng.random_range(0..4) == 0 {
                    edit.remove(&name.to_ascii_uppercase());
                    content.remove(name);
                } else {
                    edit.set(name, listed, txt.iter().copied()).unwrap();
                    if addrs.is_empty() && txt.is_empty() {
                        content.remove(name);
                    } else {
                        content.insert(name.clone(), (addrs, txt));
                    }
                }
            }
            zone = edit.finish();
            let mut whole = builder();
            for (name, (addrs, txt)) in &content {
                for a in addrs {
                    whole.address(name, *a).unwrap();
                }
                for t in txt {
                    whole.txt(name, t).unwrap();
                }
            }
            let whole = whole.build();
            assert_eq!(zone, whole, "step {step}: {content:?}");
            assert_eq!(zone.serial(), whole.serial());
        }
    }

    #[test]
    fn an_edit_refuses_what_the_builder_refuses_and_changes_nothing() {
        let zone = builder().build();
        let mut edit = zone.edit();
        let err = edit
            .set("web.example.org", ["192.0.2.1".parse().unwrap()], [])
            .unwrap_err();
        assert!(err.to_string().contains("web.example.org"), "{err}");
        let long = "x".repeat(256);
        assert!(
            edit.set("_acme-challenge.lb.example.com", [], [long.as_str()])
                .is_err()
        );
        edit.remove("not a name..");
        assert_eq!(edit.finish(), zone);
    }

    #[test]
    fn a_zone_needs_a_name_server() {
        let mut settings = ZoneSettings::new("lb.example.com");
        settings.nameservers.clear();
        let err = ZoneBuilder::new(settings).unwrap_err();
        assert!(err.to_string().contains("name server"), "{err}");
    }
}
