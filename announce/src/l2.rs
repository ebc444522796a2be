//! Layer-2 announcement: exactly one live replica owns each address; the
//! owner puts it on the configured interface (netlink), tells the segment
//! at once with gratuitous ARP (IPv4) or an unsolicited neighbour
//! advertisement (IPv6), repeats that for a few seconds, and removes the
//! address when it loses ownership or stops.
//!
//! Ownership is a rendezvous hash of (replica, address) over the live
//! replica set the caller provides: every replica computes the same owner
//! without talking to the others, addresses spread evenly, and a replica
//! leaving moves only its own addresses. Who is live (a Lease per replica)
//! is the caller's business.
//!
//! An address moves make-before-break: a holder the hash no longer names
//! keeps the address until the next owner lists it as held
//! ([`Replicas::listed`]), so a next owner that is counted live but does
//! not take it (its own view of the Leases stale) leaves no gap; the two
//! hold it together for the time the next owner's listing takes to reach
//! the holder (docs/announce.md, "L2 mode").

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV6};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use netlink_packet_route::AddressFamily as RouteFamily;
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use nix::sys::socket::{
    AddressFamily, LinkAddr, MsgFlags, SockFlag, SockProtocol, SockType, sendto, socket,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::Error;
pub use crate::announcer::Replicas;
use crate::announcer::{Announcer, Held, Mode, Stopping};

/// Repeat the announcement this long after taking an address: a switch or
/// host that missed the first one still learns within a few seconds.
pub const DEFAULT_REPEAT_FOR: Duration = Duration::from_secs(5);
pub const REPEAT_EVERY: Duration = Duration::from_secs(1);
/// In the first second after taking an address, repeat faster: Linux
/// ignores an announcement for a neighbour entry that changed state
/// within the last second (`locktime`), which a client whose traffic to
/// the dead owner goes unanswered is doing, so one of the quick repeats
/// lands after that second.
pub const REPEAT_FAST: Duration = Duration::from_millis(250);
pub const FAST_FOR: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct L2Config {
    /// The interface the addresses go on (the one facing the clients'
    /// segment).
    pub interface: String,
    /// This replica's name, as it appears in the live replica set.
    pub replica: String,
    pub repeat_for: Duration,
}

/// FNV-1a, fixed forever: replicas of different builds must agree on
/// owners during a rolling upgrade, which `std`'s hasher does not promise.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // splitmix64's finaliser spreads FNV's weak high bits.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

fn octets(addr: &IpAddr) -> Vec<u8> {
    match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// The replica that owns `addr` among `replicas` (highest hash of
/// (replica, address); ties to the smaller name).
pub fn owner<'a>(addr: &IpAddr, replicas: &'a BTreeSet<String>) -> Option<&'a str> {
    let addr = octets(addr);
    replicas
        .iter()
        .map(|r| (fnv1a(&[r.as_bytes(), &addr]), r))
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)))
        .map(|(_, r)| r.as_str())
}

/// A gratuitous ARP request (RFC 5227 "ARP Announcement"): sender and
/// target protocol address both `addr`, broadcast, padded to the 60-byte
/// Ethernet minimum.
pub fn gratuitous_arp(mac: [u8; 6], addr: Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06]); // ARP
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]); // Ethernet, IPv4, request
    f.extend_from_slice(&mac);
    f.extend_from_slice(&addr.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&addr.octets());
    f.resize(60, 0);
    f
}

/// An unsolicited neighbour advertisement (RFC 4861 7.2.6): Override set,
/// Solicited clear, with the target link-layer address. The kernel fills
/// in the ICMPv6 checksum.
pub fn neighbour_advertisement(mac: [u8; 6], addr: Ipv6Addr) -> Vec<u8> {
    let mut m = vec![136, 0, 0, 0, 0x20, 0, 0, 0];
    m.extend_from_slice(&addr.octets());
    m.extend_from_slice(&[2, 1]);
    m.extend_from_slice(&mac);
    m
}

/// The interface's index, MAC and a link-layer address to send frames to.
fn interface(name: &str) -> Result<(u32, [u8; 6], LinkAddr), Error> {
    let bad = |reason: String| Error::Config {
        setting: format!("L2 interface `{name}`"),
        reason,
    };
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| bad(format!("listing interfaces: {e}")))?;
    for ifa in addrs {
        if ifa.interface_name != name {
            continue;
        }
        if let Some(link) = ifa.address.as_ref().and_then(|a| a.as_link_addr())
            && let Some(mac) = link.addr()
        {
            return Ok((link.ifindex() as u32, mac, *link));
        }
    }
    Err(bad("no such interface with a link-layer address".into()))
}

/// Every address on this host's interfaces: what `subnet=` of an
/// announce pool is matched against.
pub fn local_addresses() -> Result<Vec<IpAddr>, Error> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| Error::Config {
        setting: "local addresses".into(),
        reason: format!("listing interfaces: {e}"),
    })?;
    Ok(addrs
        .filter_map(|ifa| {
            let a = ifa.address?;
            if let Some(v4) = a.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
            }
        })
        .collect())
}

/// The address this host has on interface `name` for talking to its
/// neighbours there: a global address with a subnet (an announced
/// address is a host route, /32 or /128, and is skipped), IPv4 first.
/// `None`: the interface has none.
pub fn interface_address(name: &str) -> Result<Option<IpAddr>, Error> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| Error::Config {
        setting: "local addresses".into(),
        reason: format!("listing interfaces: {e}"),
    })?;
    let mut found: Vec<IpAddr> = addrs
        .filter(|ifa| ifa.interface_name == name)
        .filter_map(|ifa| {
            let (a, mask) = (ifa.address?, ifa.netmask?);
            if let (Some(v4), Some(m)) = (a.as_sockaddr_in(), mask.as_sockaddr_in()) {
                let host = m.ip() == Ipv4Addr::BROADCAST;
                (!host).then_some(IpAddr::V4(v4.ip()))
            } else {
                let (v6, m) = (a.as_sockaddr_in6()?, mask.as_sockaddr_in6()?);
                let host = m.ip() == Ipv6Addr::from(u128::MAX);
                let link_local = v6.ip().segments()[0] & 0xffc0 == 0xfe80;
                (!host && !link_local).then_some(IpAddr::V6(v6.ip()))
            }
        })
        .collect();
    found.sort_by_key(|a| a.is_ipv6());
    Ok(found.first().copied())
}

/// The sockets and netlink handle one announcer uses.
struct Link {
    index: u32,
    mac: [u8; 6],
    link_addr: LinkAddr,
    packet: OwnedFd,
    icmp6: socket2::Socket,
    netlink: rtnetlink::Handle,
}

impl Link {
    fn open(name: &str) -> Result<Link, Error> {
        let (index, mac, link_addr) = interface(name)?;
        let packet = socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            SockProtocol::EthAll,
        )
        .map_err(|e| Error::Io("opening the AF_PACKET socket", e.into()))?;
        let icmp6 = socket2::Socket::new(
            socket2::Domain::IPV6,
            socket2::Type::RAW,
            Some(socket2::Protocol::ICMPV6),
        )
        .map_err(|e| Error::Io("opening the ICMPv6 socket", e))?;
        icmp6
            .set_multicast_if_v6(index)
            .and_then(|()| icmp6.set_multicast_hops_v6(255))
            .and_then(|()| icmp6.set_nonblocking(true))
            .map_err(|e| Error::Io("setting up the ICMPv6 socket", e))?;
        let (conn, netlink, _) =
            rtnetlink::new_connection().map_err(|e| Error::Io("opening netlink", e))?;
        tokio::spawn(conn);
        Ok(Link {
            index,
            mac,
            link_addr,
            packet,
            icmp6,
            netlink,
        })
    }

    async fn add(&self, addr: IpAddr) -> Result<(), Error> {
        let mut req = self
            .netlink
            .address()
            .add(self.index, addr, host_prefix(&addr))
            .replace();
        // The address is ours by election; duplicate detection would only
        // delay it by a second or two.
        if addr.is_ipv6() {
            let msg = req.message_mut();
            msg.header.flags |= AddressHeaderFlags::Nodad;
            msg.attributes.push(AddressAttribute::Flags(
                netlink_packet_route::address::AddressFlags::Nodad,
            ));
        }
        req.execute()
            .await
            .map_err(|e| Error::Netlink(format!("adding {addr}: {e}")))
    }

    /// Removes `addr` as a host address (/32, /128) from the interface;
    /// the same address with a shorter prefix is the node's own and stays.
    /// Whether one was there.
    async fn remove(&self, addr: IpAddr) -> Result<bool, Error> {
        remove_host(&self.netlink, self.index, addr).await
    }

    /// One announcement; a full socket buffer drops it (the next repeat
    /// follows within a second).
    fn announce(&self, addr: IpAddr) -> Result<(), Error> {
        match addr {
            IpAddr::V4(a) => {
                let frame = gratuitous_arp(self.mac, a);
                match sendto(
                    self.packet.as_raw_fd(),
                    &frame,
                    &self.link_addr,
                    MsgFlags::empty(),
                ) {
                    Ok(_) | Err(nix::errno::Errno::EAGAIN) => Ok(()),
                    Err(e) => Err(Error::Io("sending gratuitous ARP", e.into())),
                }
            }
            IpAddr::V6(a) => {
                let na = neighbour_advertisement(self.mac, a);
                let all_nodes =
                    SocketAddrV6::new(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1), 0, 0, self.index);
                match self.icmp6.send_to(&na, &all_nodes.into()) {
                    Ok(_) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
                    Err(e) => Err(Error::Io("sending a neighbour advertisement", e)),
                }
            }
        }
    }
}

fn host_prefix(addr: &IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// Removes `addr` as a host address from the link `index`: a delete by
/// address and prefix, not a lookup first (looking up is a dump of every
/// address on the link, and releasing a thousand addresses one dump each
/// took most of a minute). Whether one was there.
async fn remove_host(netlink: &rtnetlink::Handle, index: u32, addr: IpAddr) -> Result<bool, Error> {
    let mut msg = AddressMessage::default();
    msg.header.family = match addr {
        IpAddr::V4(_) => RouteFamily::Inet,
        IpAddr::V6(_) => RouteFamily::Inet6,
    };
    msg.header.prefix_len = host_prefix(&addr);
    msg.header.index = index;
    msg.attributes.push(AddressAttribute::Address(addr));
    if addr.is_ipv4() {
        msg.attributes.push(AddressAttribute::Local(addr));
    }
    match netlink.address().del(msg).execute().await {
        Ok(()) => Ok(true),
        // Not there (EADDRNOTAVAIL for IPv4, ENODEV or ENOENT for
        // IPv6 depending on the kernel).
        Err(rtnetlink::Error::NetlinkError(e))
            if matches!(
                e.raw_code().unsigned_abs() as i32,
                libc::EADDRNOTAVAIL | libc::ENOENT | libc::ENODEV | libc::ESRCH
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(Error::Netlink(format!("removing {addr}: {e}"))),
    }
}

/// Removes every host address (/32, /128) on `interface` that `leftover`
/// accepts, and returns them: at start a replica holds nothing, so an
/// announced address found there was left by a run killed without its
/// stop, and the kernel would go on answering ARP and neighbour
/// solicitations for it beside the real owner's. Called before the
/// replica talks to anyone (the Leases that would name the address may
/// take a second to list); the node's own addresses have a subnet and
/// are never host addresses here.
pub async fn remove_leftovers(
    interface: &str,
    leftover: impl Fn(&IpAddr) -> bool,
) -> Result<Vec<IpAddr>, Error> {
    use futures::TryStreamExt;
    let (index, _, _) = self::interface(interface)?;
    let (conn, netlink, _) =
        rtnetlink::new_connection().map_err(|e| Error::Io("opening netlink", e))?;
    let conn = tokio::spawn(conn);
    let listed = async {
        let mut found = BTreeSet::new();
        let mut dump = std::pin::pin!(
            netlink
                .address()
                .get()
                .set_link_index_filter(index)
                .execute()
        );
        while let Some(msg) = dump
            .try_next()
            .await
            .map_err(|e| Error::Netlink(format!("listing the addresses of {interface}: {e}")))?
        {
            for attr in &msg.attributes {
                if let AddressAttribute::Address(a) = attr
                    && msg.header.prefix_len == host_prefix(a)
                    && leftover(a)
                {
                    found.insert(*a);
                }
            }
        }
        let mut removed = Vec::new();
        for addr in found {
            if remove_host(&netlink, index, addr).await? {
                removed.push(addr);
            }
        }
        Ok(removed)
    }
    .await;
    conn.abort();
    listed
}

/// Whether this replica, holding `addr`, keeps it although the hash
/// names another owner: that owner's listing does not have it yet. A replica
/// that does not count itself live keeps nothing (the others count it
/// gone too and take over).
fn keeps(replicas: &Replicas, me: &str, addr: &IpAddr) -> bool {
    if !replicas.live.contains(me) {
        return false;
    }
    owner(addr, &replicas.live).is_some_and(|next| {
        next != me && replicas.listed.get(next).is_some_and(|l| !l.contains(addr))
    })
}

/// The running L2 announcer.
#[derive(Debug)]
pub struct L2Announcer {
    addrs: watch::Sender<BTreeSet<IpAddr>>,
    replicas: watch::Sender<Replicas>,
    stop: watch::Sender<bool>,
    again: watch::Sender<u64>,
    task: JoinHandle<()>,
    status: watch::Receiver<Held>,
}

impl L2Announcer {
    /// Opens the interface (an error names it when it does not exist) and
    /// starts with `addrs` to announce among `replicas`; both change
    /// through [`Announcer`].
    pub fn start(
        config: L2Config,
        addrs: BTreeSet<IpAddr>,
        replicas: Replicas,
    ) -> Result<L2Announcer, Error> {
        let link = Link::open(&config.interface)?;
        let (addrs_tx, addrs) = watch::channel(addrs);
        let (replicas_tx, replicas) = watch::channel(replicas);
        let (stop, stop_rx) = watch::channel(false);
        let (again, again_rx) = watch::channel(0);
        let (status_tx, status) = watch::channel(Held::default());
        let inputs = Inputs {
            addrs,
            replicas,
            again: again_rx,
            stop: stop_rx,
        };
        let task = tokio::spawn(run(config, link, inputs, status_tx));
        Ok(L2Announcer {
            addrs: addrs_tx,
            replicas: replicas_tx,
            stop,
            again,
            task,
            status,
        })
    }
}

impl Announcer for L2Announcer {
    fn mode(&self) -> Mode {
        Mode::L2
    }

    fn set_addresses(&self, addrs: BTreeSet<IpAddr>) -> bool {
        self.addrs
            .send_if_modified(|a| std::mem::replace(a, addrs.clone()) != addrs)
    }

    fn set_replicas(&self, replicas: Replicas) {
        self.replicas
            .send_if_modified(|r| std::mem::replace(r, replicas.clone()) != replicas);
    }

    fn announce_again(&self) {
        self.again.send_modify(|n| *n += 1);
    }

    fn held(&self) -> watch::Receiver<Held> {
        self.status.clone()
    }

    /// Removes every owned address from the interface and returns.
    fn stop(self: Box<Self>) -> Stopping {
        Box::pin(async move {
            let _ = self.stop.send(true);
            let _ = self.task.await;
        })
    }
}

/// What the announcer follows.
struct Inputs {
    addrs: watch::Receiver<BTreeSet<IpAddr>>,
    replicas: watch::Receiver<Replicas>,
    again: watch::Receiver<u64>,
    stop: watch::Receiver<bool>,
}

async fn run(config: L2Config, link: Link, inputs: Inputs, status: watch::Sender<Held>) {
    let Inputs {
        mut addrs,
        mut replicas,
        mut again,
        mut stop,
    } = inputs;
    // Owned address -> until when its announcement repeats.
    let mut owned: BTreeMap<IpAddr, Instant> = BTreeMap::new();
    // Addresses looked at once: a process killed without its stop left
    // its addresses on the interface, and the kernel would go on
    // answering ARP for them beside the real owner's. At start this
    // replica holds nothing, so every address the Leases list (its own
    // killed run's Lease among them) or it is to announce, and that it
    // does not hold, is cleared the first time it is seen: before this
    // replica is ready, not once it has computed an owner.
    let mut checked: BTreeSet<IpAddr> = BTreeSet::new();
    // Addresses held past their move until the next owner lists them.
    let mut kept: BTreeSet<IpAddr> = BTreeSet::new();
    let mut next_repeat = Instant::now();
    let report = |result: Result<(), Error>| {
        if let Err(e) = result {
            tracing::warn!(interface = %config.interface, error = %e, "L2 announcement");
            status.send_modify(|s| {
                s.errors += 1;
                s.last_error = Some(e.to_string());
            });
        }
    };
    loop {
        let (wanted, others, keep): (BTreeSet<IpAddr>, Vec<IpAddr>, BTreeSet<IpAddr>) = {
            let replicas = replicas.borrow_and_update();
            let live = &replicas.live;
            let all = addrs.borrow_and_update();
            let wanted = all
                .iter()
                .filter(|a| owner(a, live) == Some(config.replica.as_str()))
                .copied()
                .collect();
            let others = all
                .iter()
                .chain(replicas.listed.values().flatten())
                .filter(|a| !checked.contains(a))
                .copied()
                .collect();
            let keep = owned
                .keys()
                .filter(|a| all.contains(a) && keeps(&replicas, &config.replica, a))
                .copied()
                .collect();
            (wanted, others, keep)
        };
        for addr in others {
            if !checked.insert(addr) || wanted.contains(&addr) || owned.contains_key(&addr) {
                continue;
            }
            match link.remove(addr).await {
                Ok(true) => {
                    tracing::info!(%addr, "L2 address left over from an earlier run removed")
                }
                Ok(false) => {}
                Err(e) => report(Err(e)),
            }
        }
        for addr in keep.difference(&kept) {
            tracing::info!(%addr, "L2 address kept until its next owner holds it");
        }
        kept = keep;
        let lost: Vec<IpAddr> = owned
            .keys()
            .filter(|a| !wanted.contains(a) && !kept.contains(a))
            .copied()
            .collect();
        for addr in lost {
            owned.remove(&addr);
            report(link.remove(addr).await.map(drop));
            tracing::info!(%addr, "L2 address released");
        }
        for addr in wanted {
            if owned.contains_key(&addr) {
                continue;
            }
            match link.add(addr).await {
                Ok(()) => {
                    report(link.announce(addr));
                    status.send_modify(|s| s.announcements_sent += 1);
                    owned.insert(addr, Instant::now() + config.repeat_for);
                    next_repeat = Instant::now() + REPEAT_FAST;
                    tracing::info!(%addr, interface = %config.interface, "L2 address taken");
                }
                Err(e) => report(Err(e)),
            }
        }
        // Only a real change wakes the status' followers (the Lease's
        // owned set, /status).
        status.send_if_modified(|s| {
            let now: BTreeSet<IpAddr> = owned.keys().copied().collect();
            std::mem::replace(&mut s.owned, now.clone()) != now
        });
        let repeating = owned.values().any(|until| *until > Instant::now());
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            r = addrs.changed() => if r.is_err() { break },
            r = replicas.changed() => if r.is_err() { break },
            Ok(()) = again.changed() => {
                let until = Instant::now() + config.repeat_for;
                for (addr, repeat) in owned.iter_mut() {
                    *repeat = until;
                    report(link.announce(*addr));
                    status.send_modify(|s| s.announcements_sent += 1);
                    tracing::info!(%addr, "L2 address announced again");
                }
                next_repeat = Instant::now() + REPEAT_FAST;
            }
            _ = sleep_until(next_repeat), if repeating => {
                let now = Instant::now();
                let mut sent = 0;
                for (addr, until) in &owned {
                    if *until > now {
                        report(link.announce(*addr));
                        sent += 1;
                    }
                }
                status.send_modify(|s| s.announcements_sent += sent);
                let fresh = owned
                    .values()
                    .any(|until| *until + FAST_FOR > now + config.repeat_for);
                next_repeat = now + if fresh { REPEAT_FAST } else { REPEAT_EVERY };
            }
        }
    }
    for addr in std::mem::take(&mut owned).into_keys() {
        report(link.remove(addr).await.map(drop));
        tracing::info!(%addr, "L2 address released: stopping");
    }
    status.send_modify(|s| s.owned.clear());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replicas(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn every_replica_computes_the_same_owner_and_addresses_spread() {
        let three = replicas(&["lb-0", "lb-1", "lb-2"]);
        let mut per_owner: BTreeMap<&str, usize> = BTreeMap::new();
        for i in 0..3000u32 {
            let addr = IpAddr::V4(Ipv4Addr::from(0xcb00_7100 + i));
            *per_owner.entry(owner(&addr, &three).unwrap()).or_default() += 1;
        }
        assert_eq!(per_owner.len(), 3);
        for (r, n) in &per_owner {
            assert!((800..1200).contains(n), "{r} owns {n} of 3000");
        }
        assert_eq!(owner(&"203.0.113.1".parse().unwrap(), &replicas(&[])), None);
    }

    #[test]
    fn a_leaving_replica_moves_only_its_own_addresses() {
        let three = replicas(&["lb-0", "lb-1", "lb-2"]);
        let two = replicas(&["lb-0", "lb-2"]);
        for i in 0..1000u32 {
            let addr = IpAddr::V6(Ipv6Addr::from(0x2001_0db8_u128 << 96 | i as u128));
            let before = owner(&addr, &three).unwrap();
            let after = owner(&addr, &two).unwrap();
            if before != "lb-1" {
                assert_eq!(before, after, "{addr} moved though its owner stayed");
            }
        }
    }

    #[test]
    fn an_address_is_kept_until_its_next_owner_lists_it() {
        let addr: IpAddr = "198.51.100.200".parse().unwrap();
        let all = replicas(&["lb-0", "lb-1", "lb-2"]);
        let next = owner(&addr, &all).unwrap().to_string();
        let holder = all.iter().find(|r| **r != next).unwrap().clone();
        let mut r = Replicas {
            live: all.clone(),
            listed: BTreeMap::new(),
        };
        assert!(
            !keeps(&r, &holder, &addr),
            "no listings (no Leases): no wait"
        );
        r.listed.insert(next.clone(), BTreeSet::new());
        assert!(
            keeps(&r, &holder, &addr),
            "the next owner holds nothing yet"
        );
        r.listed.insert(next.clone(), [addr].into());
        assert!(!keeps(&r, &holder, &addr), "it does now: let go");
        // The holder no longer counts itself live: it keeps nothing.
        r.listed.clear();
        r.live.remove(&holder);
        assert!(!keeps(&r, &holder, &addr));
        // The hash's owner never keeps for itself.
        r.live = all;
        assert!(!keeps(&r, &next, &addr));
    }

    #[test]
    fn the_owner_hash_is_fixed() {
        // Replicas of different builds must agree: these values never
        // change.
        assert_eq!(fnv1a(&[b"lb-0", &[203, 0, 113, 10]]), 0x2b81_33d2_3464_d57b);
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
    }

    #[test]
    fn gratuitous_arp_frame_layout() {
        let mac = [0x02, 0, 0, 0, 0, 0x0a];
        let f = gratuitous_arp(mac, Ipv4Addr::new(192, 0, 2, 100));
        assert_eq!(f.len(), 60);
        assert_eq!(&f[..6], &[0xff; 6]);
        assert_eq!(&f[6..12], &mac);
        assert_eq!(&f[12..14], &[0x08, 0x06]);
        assert_eq!(&f[14..22], &[0, 1, 8, 0, 6, 4, 0, 1]);
        assert_eq!(&f[22..28], &mac);
        assert_eq!(&f[28..32], &[192, 0, 2, 100]);
        assert_eq!(&f[38..42], &[192, 0, 2, 100]);
    }

    #[test]
    fn neighbour_advertisement_layout() {
        let mac = [0x02, 0, 0, 0, 0, 0x0a];
        let m = neighbour_advertisement(mac, "2001:db8::100".parse().unwrap());
        assert_eq!(m.len(), 32);
        assert_eq!(m[0], 136);
        assert_eq!(m[4], 0x20, "Override only");
        assert_eq!(
            &m[8..24],
            &"2001:db8::100".parse::<Ipv6Addr>().unwrap().octets()
        );
        assert_eq!(&m[24..32], &[2, 1, 0x02, 0, 0, 0, 0, 0x0a]);
    }

    #[tokio::test]
    async fn a_missing_interface_is_named() {
        let config = L2Config {
            interface: "teapot-nope0".into(),
            replica: "lb-0".into(),
            repeat_for: DEFAULT_REPEAT_FOR,
        };
        let err = L2Announcer::start(config, BTreeSet::new(), Replicas::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("L2 interface `teapot-nope0`"), "{err}");
    }
}
