//! What the zone was last made from, so the next zone is the last one
//! plus what changed ([`teapot_dns::Zone::edit`]): the hosts of the last
//! snapshot, which names they make and the addresses and TXT values those
//! names hold.
//!
//! A snapshot's hosts are compared with the last ones by one hash lookup
//! each (a few milliseconds at 100,000 hosts); only the names that changed
//! are parsed, encoded and hashed again, which is what a whole build spends
//! its time on. A change of the answered addresses changes every name and
//! is built whole.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use teapot_dns::escape::LogText;
use teapot_dns::{Zone, ZoneSettings};

use crate::compile::snapshot::Snapshot;

/// The hosts of a snapshot the zone holds names for.
#[derive(Debug, Default)]
pub struct Hosts<'s> {
    /// The routes' exact hosts, and the hostnames of programmed tenant
    /// Gateways the fleet's shared listeners serve.
    pub exact: Vec<&'s str>,
    /// The suffixes of the routes' wildcard hosts (`acme.lb.DOMAIN` for
    /// `*.acme.lb.DOMAIN`).
    pub wildcard: Vec<&'s str>,
    /// The hostnames of programmed tenant Gateways with an address of
    /// their own, with that address.
    pub own: Vec<(&'s str, IpAddr)>,
}

impl<'s> Hosts<'s> {
    pub fn of(snapshot: &'s Snapshot) -> Hosts<'s> {
        let mut hosts = Hosts {
            exact: snapshot.routes.exact_hosts().collect(),
            wildcard: snapshot.routes.wildcard_hosts().collect(),
            own: Vec::new(),
        };
        // A tenant Gateway's assigned hostname is the `Hostname` address of
        // its status, once it is programmed (it routes).
        let gateways = snapshot.report.gateway.gateways.iter().filter(|g| {
            g.status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Programmed" && c.status == "True")
        });
        // A Gateway with its own address is answered with that address
        // alone: the fleet's shared listeners do not serve it.
        let own = snapshot.gateway.own();
        for g in gateways {
            let addresses = g.status.addresses.as_deref().unwrap_or_default();
            let own_address = addresses
                .iter()
                .filter(|a| a.r#type.as_deref() == Some("IPAddress"))
                .filter_map(|a| a.value.parse::<IpAddr>().ok())
                .find(|ip| own.serves(*ip));
            for host in addresses
                .iter()
                .filter(|a| a.r#type.as_deref() == Some("Hostname"))
            {
                match own_address {
                    Some(ip) => hosts.own.push((host.value.as_str(), ip)),
                    None => hosts.exact.push(host.value.as_str()),
                }
            }
        }
        hosts
    }
}

type Map<V> = HashMap<Box<str>, V, foldhash::fast::RandomState>;

/// The inputs of the zone last made, by name.
#[derive(Debug)]
pub struct ZoneIndex {
    /// `.ORIGIN`: the hosts that end with it have names in the zone.
    suffix: String,
    addresses: BTreeSet<IpAddr>,
    /// Counts the updates; each host below holds the count of the last
    /// update that listed it.
    pass: u32,
    exact: Map<u32>,
    wildcard: Map<u32>,
    /// Lowercase, in the zone.
    own: BTreeSet<(Box<str>, IpAddr)>,
    challenges: Vec<(String, String)>,
    /// TXT values by lowercase name, from `challenges`.
    txt: BTreeMap<Box<str>, BTreeSet<String>>,
    /// The names answered with the fleet's addresses (lowercase), with
    /// how many hosts (or name servers) make each one.
    fleet: Map<u32>,
}

impl ZoneIndex {
    /// An index of nothing but the zone's in-zone name servers, which are
    /// answered with `addresses`.
    pub fn new(settings: &ZoneSettings, addresses: BTreeSet<IpAddr>) -> ZoneIndex {
        let mut index = ZoneIndex {
            suffix: format!(".{}", settings.origin),
            addresses,
            pass: 0,
            exact: Map::default(),
            wildcard: Map::default(),
            own: BTreeSet::new(),
            challenges: Vec::new(),
            txt: BTreeMap::new(),
            fleet: Map::default(),
        };
        if let Ok(zone) = teapot_dns::ZoneBuilder::new(settings.clone()) {
            for ns in &settings.nameservers {
                if zone.contains(ns) {
                    index.fleet_count(ns, true, &mut BTreeSet::new());
                }
            }
        }
        index
    }

    pub fn addresses(&self) -> &BTreeSet<IpAddr> {
        &self.addresses
    }

    /// Takes in the hosts and challenges of now; the names whose records
    /// may have changed since the last update (lowercase).
    pub fn update(
        &mut self,
        hosts: &Hosts<'_>,
        challenges: &[(String, String)],
    ) -> BTreeSet<Box<str>> {
        let mut touched = BTreeSet::new();
        self.pass = self.pass.wrapping_add(1);
        let pass = self.pass;
        let (added, removed) = listed(&mut self.exact, pass, hosts.exact.iter().copied());
        for host in &added {
            self.host(host, true, &mut touched);
        }
        for host in &removed {
            self.host(host, false, &mut touched);
        }
        let (added, removed) = listed(&mut self.wildcard, pass, hosts.wildcard.iter().copied());
        // A wildcard right below the apex (`*.lb.DOMAIN`) would answer for
        // every tenant cluster's names: only `*.CLUSTER.lb.DOMAIN` and
        // deeper become wildcard records.
        for (suffix, add) in added
            .iter()
            .map(|s| (*s, true))
            .chain(removed.iter().map(|s| (&**s, false)))
        {
            if suffix.ends_with(self.suffix.as_str()) {
                self.host(&format!("*.{suffix}"), add, &mut touched);
            }
        }
        let own: BTreeSet<(Box<str>, IpAddr)> = hosts
            .own
            .iter()
            .filter(|(host, _)| host.ends_with(self.suffix.as_str()))
            .map(|(host, ip)| (host.to_ascii_lowercase().into(), *ip))
            .collect();
        if own != self.own {
            let gone: Vec<Box<str>> = self.own.difference(&own).map(|(h, _)| h.clone()).collect();
            let new: Vec<Box<str>> = own.difference(&self.own).map(|(h, _)| h.clone()).collect();
            self.own = own;
            for (hosts, add) in [(gone, false), (new, true)] {
                for host in hosts {
                    if let Some(cluster) = cluster(&host, &self.suffix) {
                        self.fleet_count(cluster, add, &mut touched);
                    }
                    touched.insert(host);
                }
            }
        }
        if challenges != self.challenges {
            let mut txt: BTreeMap<Box<str>, BTreeSet<String>> = BTreeMap::new();
            for (name, value) in challenges {
                txt.entry(name.to_ascii_lowercase().into())
                    .or_default()
                    .insert(value.clone());
            }
            let old = std::mem::replace(&mut self.txt, txt);
            touched.extend(old.into_keys());
            touched.extend(self.txt.keys().cloned());
            self.challenges = challenges.to_vec();
        }
        touched
    }

    /// A host of the routes (or a Gateway's) listed or no longer: its
    /// name and its cluster's (`CLUSTER.lb.DOMAIN`, the wildcard
    /// certificate's second name) are answered with the fleet's addresses.
    fn host(&mut self, host: &str, add: bool, touched: &mut BTreeSet<Box<str>>) {
        if !host.ends_with(self.suffix.as_str()) {
            return;
        }
        for name in cluster(host, &self.suffix).into_iter().chain([host]) {
            self.fleet_count(name, add, touched);
        }
    }

    /// One host (or name server) more (`add`) or less making `name` a
    /// name answered with the fleet's addresses.
    fn fleet_count(&mut self, name: &str, add: bool, touched: &mut BTreeSet<Box<str>>) {
        let name: Box<str> = name.to_ascii_lowercase().into();
        if add {
            *self.fleet.entry(name.clone()).or_default() += 1;
        } else if let Some(n) = self.fleet.get_mut(&name) {
            *n -= 1;
            if *n == 0 {
                self.fleet.remove(&name);
            }
        }
        touched.insert(name);
    }

    /// `zone` with the records of the `touched` names set to what the
    /// index holds for them now. Names the zone cannot hold are left out
    /// with a log line, as a whole build leaves them out.
    pub fn apply(&self, zone: &Zone, touched: &BTreeSet<Box<str>>) -> Zone {
        let mut edit = zone.edit();
        for name in touched {
            let addresses: Vec<IpAddr> = if self.fleet.contains_key(name) {
                self.addresses.iter().copied().collect()
            } else {
                let start = (name.clone(), IpAddr::from([0u8; 4]));
                self.own
                    .range(start..)
                    .take_while(|(host, _)| host == name)
                    .map(|(_, ip)| *ip)
                    .collect()
            };
            // A value the zone refuses is left out alone, as a whole
            // build leaves it out: the name's other values stay.
            let txt = self.txt.get(name).into_iter().flatten().filter(|value| {
                let Err(e) = teapot_dns::zone::check_txt(name, value) else {
                    return true;
                };
                let error = e.to_string();
                tracing::warn!(name = %LogText(name), error = %LogText(&error), "ACME challenge left out of the DNS zone");
                false
            });
            let txt: Vec<&str> = txt.map(String::as_str).collect();
            if (addresses.is_empty() && txt.is_empty()) || !edit.contains(name) {
                edit.remove(name);
                continue;
            }
            if let Err(e) = edit.set(name, addresses, txt) {
                // Tenant hostnames and the error quoting them: any bytes
                // an Ingress host passed validation with.
                let error = e.to_string();
                tracing::warn!(name = %LogText(name), error = %LogText(&error), "name left out of the DNS zone");
                edit.remove(name);
            }
        }
        edit.finish()
    }
}

/// `CLUSTER.lb.DOMAIN` for `INGRESS.CLUSTER.lb.DOMAIN` (and deeper), where
/// `suffix` is `.lb.DOMAIN`.
pub(super) fn cluster<'h>(host: &'h str, suffix: &str) -> Option<&'h str> {
    let below = host.strip_suffix(suffix)?;
    let (_, cluster) = below.rsplit_once('.')?;
    Some(&host[host.len() - suffix.len() - cluster.len()..])
}

/// Marks the hosts `now` lists in `map` with `pass`: the ones it did not
/// hold (added, now in it) and the ones no longer listed (removed, out of
/// it). One lookup per host; the map is walked only when a host is gone.
fn listed<'h>(
    map: &mut Map<u32>,
    pass: u32,
    now: impl Iterator<Item = &'h str>,
) -> (Vec<&'h str>, Vec<Box<str>>) {
    let before = map.len();
    let mut kept = 0;
    let mut added = Vec::new();
    for host in now {
        match map.get_mut(host) {
            Some(seen) if *seen == pass => {}
            Some(seen) => {
                *seen = pass;
                kept += 1;
            }
            None => {
                map.insert(host.into(), pass);
                added.push(host);
            }
        }
    }
    let mut removed = Vec::new();
    if kept < before {
        map.retain(|host, seen| {
            if *seen != pass {
                removed.push(host.clone());
            }
            *seen == pass
        });
    }
    (added, removed)
}
