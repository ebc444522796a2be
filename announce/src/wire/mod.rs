//! The BGP-4 messages an announce-only speaker sends and reads (RFC 4271),
//! with multiprotocol reachability for IPv6 (RFC 4760), four-octet AS
//! numbers (RFC 6793), the GRACEFUL_SHUTDOWN community (RFC 8326) and
//! graceful restart's capability and End-of-RIB marker (RFC 4724).
//!
//! Encoding covers OPEN, KEEPALIVE, NOTIFICATION and the UPDATEs that
//! announce or withdraw host routes. Decoding covers what the speaker acts
//! on: the header, OPEN and NOTIFICATION. A received UPDATE is framed and
//! skipped unread, so nothing a router sends can steer what is announced.

use std::net::{IpAddr, Ipv4Addr};

use crate::Error;

pub mod notification;

pub use notification::{Notification, code};

/// Length of the fixed header: marker (16), length (2), type (1).
pub const HEADER_LEN: usize = 19;
/// Largest message RFC 4271 allows without the extended-message capability.
pub const MAX_MESSAGE_LEN: usize = 4096;
/// The AS number a two-octet field carries for a four-octet ASN (RFC 6793).
pub const AS_TRANS: u16 = 23456;
/// RFC 8326: the well-known community asking receivers to lower the
/// path's preference before it is withdrawn.
pub const GRACEFUL_SHUTDOWN: u32 = 0xFFFF_0000;
/// LOCAL_PREF sent to iBGP peers: the default routers assume.
pub const DEFAULT_LOCAL_PREF: u32 = 100;

const TYPE_OPEN: u8 = 1;
const TYPE_UPDATE: u8 = 2;
const TYPE_NOTIFICATION: u8 = 3;
const TYPE_KEEPALIVE: u8 = 4;
const TYPE_ROUTE_REFRESH: u8 = 5;

const AFI_IPV4: u16 = 1;
const AFI_IPV6: u16 = 2;
const SAFI_UNICAST: u8 = 1;

const CAP_MULTIPROTOCOL: u8 = 1;
const CAP_GRACEFUL_RESTART: u8 = 64;
const CAP_FOUR_OCTET_AS: u8 = 65;
const OPT_PARAM_CAPABILITIES: u8 = 2;

const ATTR_ORIGIN: u8 = 1;
const ATTR_AS_PATH: u8 = 2;
const ATTR_NEXT_HOP: u8 = 3;
const ATTR_LOCAL_PREF: u8 = 5;
const ATTR_COMMUNITIES: u8 = 8;
const ATTR_MP_REACH: u8 = 14;
const ATTR_MP_UNREACH: u8 = 15;

const FLAG_OPTIONAL: u8 = 0x80;
const FLAG_TRANSITIVE: u8 = 0x40;
const FLAG_EXTENDED_LENGTH: u8 = 0x10;

const ORIGIN_IGP: u8 = 0;
const AS_SEQUENCE: u8 = 2;

/// An address family a session carries (unicast only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    Ipv4,
    Ipv6,
}

impl Family {
    pub fn of(addr: &IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::Ipv4,
            IpAddr::V6(_) => Family::Ipv6,
        }
    }

    fn afi(self) -> u16 {
        match self {
            Family::Ipv4 => AFI_IPV4,
            Family::Ipv6 => AFI_IPV6,
        }
    }
}

/// An OPEN message, sent or received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// The real ASN: the four-octet capability's value when present.
    pub asn: u32,
    pub hold_time_secs: u16,
    pub router_id: Ipv4Addr,
    /// Multiprotocol unicast families offered. A peer that sends no
    /// multiprotocol capability at all speaks IPv4 unicast only.
    pub families: Vec<Family>,
    pub four_octet_as: bool,
}

/// The Graceful Restart capability (RFC 4724 section 3): how long the
/// router keeps this speaker's routes after the session is lost without a
/// NOTIFICATION, and whether the speaker has just restarted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GracefulRestart {
    /// The Restart State (R) bit.
    pub restarted: bool,
    /// Seconds, 12 bits on the wire ([`MAX_RESTART_TIME_SECS`]).
    pub restart_time_secs: u16,
    /// Each family with its Forwarding State (F) bit: set, the router keeps
    /// the family's stale routes across the new session until End-of-RIB.
    pub families: Vec<(Family, bool)>,
    /// The Notification (N) bit (RFC 8538): graceful restart also after a
    /// NOTIFICATION. Read from routers; never sent by this speaker.
    pub notification: bool,
}

/// The largest restart time the capability's 12 bits carry.
pub const MAX_RESTART_TIME_SECS: u16 = 0x0fff;

const GR_RESTART_STATE: u16 = 0x8000;
const GR_NOTIFICATION: u16 = 0x4000;
const GR_FORWARDING: u8 = 0x80;

impl GracefulRestart {
    fn encode(&self, caps: &mut Vec<u8>) {
        let mut flags_time = self.restart_time_secs.min(MAX_RESTART_TIME_SECS);
        if self.restarted {
            flags_time |= GR_RESTART_STATE;
        }
        if self.notification {
            flags_time |= GR_NOTIFICATION;
        }
        caps.extend_from_slice(&[CAP_GRACEFUL_RESTART, 2 + 4 * self.families.len() as u8]);
        caps.extend_from_slice(&flags_time.to_be_bytes());
        for (family, forwarding) in &self.families {
            caps.extend_from_slice(&family.afi().to_be_bytes());
            caps.push(SAFI_UNICAST);
            caps.push(if *forwarding { GR_FORWARDING } else { 0 });
        }
    }

    fn decode(value: &[u8]) -> Option<GracefulRestart> {
        let [a, b, rest @ ..] = value else {
            return None;
        };
        let flags_time = u16::from_be_bytes([*a, *b]);
        Some(GracefulRestart {
            restarted: flags_time & GR_RESTART_STATE != 0,
            notification: flags_time & GR_NOTIFICATION != 0,
            restart_time_secs: flags_time & MAX_RESTART_TIME_SECS,
            families: rest
                .chunks_exact(4)
                .filter(|c| c[2] == SAFI_UNICAST)
                .filter_map(|c| {
                    let family = match u16::from_be_bytes([c[0], c[1]]) {
                        AFI_IPV4 => Family::Ipv4,
                        AFI_IPV6 => Family::Ipv6,
                        _ => return None,
                    };
                    Some((family, c[3] & GR_FORWARDING != 0))
                })
                .collect(),
        })
    }
}

/// A received message, as far as the speaker reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Open(Open),
    /// Received and deliberately not parsed: the speaker announces only.
    Update,
    Notification(Notification),
    Keepalive,
    RouteRefresh,
}

/// Takes one whole message off the front of `buf`: `Ok(None)` when more
/// bytes are needed, the message and its length otherwise.
pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, Error> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    if buf[..16].iter().any(|&b| b != 0xff) {
        return Err(Error::Malformed("header marker is not all ones".into()));
    }
    let len = u16::from_be_bytes([buf[16], buf[17]]) as usize;
    if !(HEADER_LEN..=MAX_MESSAGE_LEN).contains(&len) {
        return Err(Error::Malformed(format!("message length {len}")));
    }
    if buf.len() < len {
        return Ok(None);
    }
    let body = &buf[HEADER_LEN..len];
    let message = match buf[18] {
        TYPE_OPEN => Message::Open(decode_open(body)?),
        TYPE_UPDATE => Message::Update,
        TYPE_NOTIFICATION => {
            if body.len() < 2 {
                return Err(Error::Malformed("NOTIFICATION shorter than 2 bytes".into()));
            }
            Message::Notification(Notification {
                code: body[0],
                subcode: body[1],
                data: body[2..].to_vec(),
            })
        }
        TYPE_KEEPALIVE if body.is_empty() => Message::Keepalive,
        TYPE_KEEPALIVE => return Err(Error::Malformed("KEEPALIVE with a body".into())),
        TYPE_ROUTE_REFRESH => Message::RouteRefresh,
        other => return Err(Error::Malformed(format!("message type {other}"))),
    };
    Ok(Some((message, len)))
}

fn decode_open(body: &[u8]) -> Result<Open, Error> {
    let short = || Error::Malformed("OPEN shorter than its fields".into());
    if body.len() < 10 {
        return Err(short());
    }
    if body[0] != 4 {
        return Err(Error::Malformed(format!("BGP version {}", body[0])));
    }
    let mut open = Open {
        asn: u16::from_be_bytes([body[1], body[2]]) as u32,
        hold_time_secs: u16::from_be_bytes([body[3], body[4]]),
        router_id: Ipv4Addr::new(body[5], body[6], body[7], body[8]),
        families: Vec::new(),
        four_octet_as: false,
    };
    let mut saw_multiprotocol = false;
    for (cap, cap_value) in capabilities(body)? {
        match (cap, cap_value) {
            (CAP_MULTIPROTOCOL, [a, b, _, safi]) => {
                saw_multiprotocol = true;
                let family = match u16::from_be_bytes([*a, *b]) {
                    AFI_IPV4 => Family::Ipv4,
                    AFI_IPV6 => Family::Ipv6,
                    _ => continue,
                };
                if *safi == SAFI_UNICAST && !open.families.contains(&family) {
                    open.families.push(family);
                }
            }
            (CAP_FOUR_OCTET_AS, [a, b, c, d]) => {
                open.four_octet_as = true;
                open.asn = u32::from_be_bytes([*a, *b, *c, *d]);
            }
            _ => {}
        }
    }
    if !saw_multiprotocol {
        open.families.push(Family::Ipv4);
    }
    Ok(open)
}

/// Every capability of an OPEN's body, as (code, value).
fn capabilities(body: &[u8]) -> Result<Vec<(u8, &[u8])>, Error> {
    let short = || Error::Malformed("OPEN shorter than its fields".into());
    let params_len = *body.get(9).ok_or_else(short)? as usize;
    let mut params = body.get(10..10 + params_len).ok_or_else(short)?;
    let mut out = Vec::new();
    while let [kind, len, rest @ ..] = params {
        let value = rest.get(..*len as usize).ok_or_else(short)?;
        params = &rest[*len as usize..];
        if *kind != OPT_PARAM_CAPABILITIES {
            continue;
        }
        let mut caps = value;
        while let [cap, cap_len, rest @ ..] = caps {
            let cap_value = rest.get(..*cap_len as usize).ok_or_else(short)?;
            caps = &rest[*cap_len as usize..];
            out.push((*cap, cap_value));
        }
    }
    Ok(out)
}

/// The Graceful Restart capability of a whole OPEN message, if it has
/// one: what a router offers (or, in tests, what the speaker sent).
pub fn graceful_restart_of(open_message: &[u8]) -> Option<GracefulRestart> {
    if open_message.get(18) != Some(&TYPE_OPEN) {
        return None;
    }
    let body = open_message.get(HEADER_LEN..)?;
    capabilities(body)
        .ok()?
        .into_iter()
        .find(|(cap, _)| *cap == CAP_GRACEFUL_RESTART)
        .and_then(|(_, value)| GracefulRestart::decode(value))
}

fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&[0xff; 16]);
    out.extend_from_slice(&((HEADER_LEN + body.len()) as u16).to_be_bytes());
    out.push(kind);
    out.extend_from_slice(body);
    out
}

/// An OPEN offering `open.families` and the four-octet AS capability.
pub fn encode_open(open: &Open) -> Vec<u8> {
    encode_open_with(open, None)
}

/// [`encode_open`] with the Graceful Restart capability when given.
pub fn encode_open_with(open: &Open, graceful_restart: Option<&GracefulRestart>) -> Vec<u8> {
    let mut caps = Vec::new();
    for family in &open.families {
        caps.extend_from_slice(&[CAP_MULTIPROTOCOL, 4]);
        caps.extend_from_slice(&family.afi().to_be_bytes());
        caps.extend_from_slice(&[0, SAFI_UNICAST]);
    }
    caps.extend_from_slice(&[CAP_FOUR_OCTET_AS, 4]);
    caps.extend_from_slice(&open.asn.to_be_bytes());
    if let Some(gr) = graceful_restart {
        gr.encode(&mut caps);
    }
    let two_octet = u16::try_from(open.asn).unwrap_or(AS_TRANS);
    let mut body = vec![4];
    body.extend_from_slice(&two_octet.to_be_bytes());
    body.extend_from_slice(&open.hold_time_secs.to_be_bytes());
    body.extend_from_slice(&open.router_id.octets());
    body.push(caps.len() as u8 + 2);
    body.extend_from_slice(&[OPT_PARAM_CAPABILITIES, caps.len() as u8]);
    body.extend_from_slice(&caps);
    frame(TYPE_OPEN, &body)
}

pub fn encode_keepalive() -> Vec<u8> {
    frame(TYPE_KEEPALIVE, &[])
}

pub fn encode_notification(notification: &Notification) -> Vec<u8> {
    let mut body = vec![notification.code, notification.subcode];
    body.extend_from_slice(&notification.data);
    frame(TYPE_NOTIFICATION, &body)
}

/// CEASE / Administrative Shutdown with a shutdown communication
/// (RFC 9003) the router logs.
pub fn cease(reason: &str) -> Notification {
    let text = &reason.as_bytes()[..reason.len().min(255)];
    let mut data = vec![text.len() as u8];
    data.extend_from_slice(text);
    Notification {
        code: code::CEASE,
        subcode: code::ADMINISTRATIVE_SHUTDOWN,
        data,
    }
}

/// The path attributes every announcement of one session carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathAttributes {
    /// `Some(own ASN)` for eBGP (the path is the speaker's AS), `None` for
    /// iBGP (an empty AS_PATH and a LOCAL_PREF).
    pub ebgp_asn: Option<u32>,
    /// The peer negotiated four-octet AS numbers; without it the AS_PATH
    /// carries two-octet numbers (AS_TRANS for a large ASN).
    pub four_octet_as: bool,
    pub local_pref: u32,
    pub graceful_shutdown: bool,
}

fn push_attr(out: &mut Vec<u8>, flags: u8, kind: u8, value: &[u8]) {
    if value.len() > 255 {
        out.extend_from_slice(&[flags | FLAG_EXTENDED_LENGTH, kind]);
        out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    } else {
        out.extend_from_slice(&[flags, kind, value.len() as u8]);
    }
    out.extend_from_slice(value);
}

impl PathAttributes {
    /// ORIGIN, AS_PATH, LOCAL_PREF (iBGP) and COMMUNITIES: the attributes
    /// shared by both families.
    fn encode_common(&self, out: &mut Vec<u8>) {
        push_attr(out, FLAG_TRANSITIVE, ATTR_ORIGIN, &[ORIGIN_IGP]);
        match self.ebgp_asn {
            Some(asn) if self.four_octet_as => {
                let mut path = vec![AS_SEQUENCE, 1];
                path.extend_from_slice(&asn.to_be_bytes());
                push_attr(out, FLAG_TRANSITIVE, ATTR_AS_PATH, &path);
            }
            Some(asn) => {
                let mut path = vec![AS_SEQUENCE, 1];
                path.extend_from_slice(&u16::try_from(asn).unwrap_or(AS_TRANS).to_be_bytes());
                push_attr(out, FLAG_TRANSITIVE, ATTR_AS_PATH, &path);
            }
            None => push_attr(out, FLAG_TRANSITIVE, ATTR_AS_PATH, &[]),
        }
        if self.ebgp_asn.is_none() {
            push_attr(
                out,
                FLAG_TRANSITIVE,
                ATTR_LOCAL_PREF,
                &self.local_pref.to_be_bytes(),
            );
        }
        if self.graceful_shutdown {
            push_attr(
                out,
                FLAG_OPTIONAL | FLAG_TRANSITIVE,
                ATTR_COMMUNITIES,
                &GRACEFUL_SHUTDOWN.to_be_bytes(),
            );
        }
    }
}

fn host_prefix(addr: &IpAddr, out: &mut Vec<u8>) {
    match addr {
        IpAddr::V4(a) => {
            out.push(32);
            out.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            out.push(128);
            out.extend_from_slice(&a.octets());
        }
    }
}

/// Bytes one host prefix takes in an NLRI field.
fn prefix_len(family: Family) -> usize {
    match family {
        Family::Ipv4 => 5,
        Family::Ipv6 => 17,
    }
}

/// Room for prefixes once the header, the two length fields and the
/// attributes are counted, leaving slack for the MP_* framing.
fn prefixes_per_message(family: Family, attrs_len: usize) -> usize {
    let room = MAX_MESSAGE_LEN - HEADER_LEN - 4 - attrs_len - 32;
    (room / prefix_len(family)).max(1)
}

/// UPDATEs announcing every address of `family` in `addrs` as a host
/// route via `next_hop`, split to fit the 4096-byte limit.
pub fn encode_announce(
    family: Family,
    addrs: &[IpAddr],
    next_hop: IpAddr,
    attrs: &PathAttributes,
) -> Vec<Vec<u8>> {
    let mut common = Vec::new();
    attrs.encode_common(&mut common);
    let per_message = prefixes_per_message(family, common.len() + 8);
    addrs
        .chunks(per_message)
        .map(|chunk| {
            let mut nlri = Vec::with_capacity(chunk.len() * prefix_len(family));
            for addr in chunk {
                host_prefix(addr, &mut nlri);
            }
            let mut path = common.clone();
            let mut body = vec![0, 0]; // no withdrawn routes
            match (family, next_hop) {
                (Family::Ipv4, IpAddr::V4(nh)) => {
                    push_attr(&mut path, FLAG_TRANSITIVE, ATTR_NEXT_HOP, &nh.octets());
                    body.extend_from_slice(&(path.len() as u16).to_be_bytes());
                    body.extend_from_slice(&path);
                    body.extend_from_slice(&nlri);
                }
                _ => {
                    let nh = match next_hop {
                        IpAddr::V6(nh) => nh,
                        IpAddr::V4(nh) => nh.to_ipv6_mapped(),
                    };
                    let mut reach = family.afi().to_be_bytes().to_vec();
                    reach.extend_from_slice(&[SAFI_UNICAST, 16]);
                    reach.extend_from_slice(&nh.octets());
                    reach.push(0); // reserved (SNPA count)
                    reach.extend_from_slice(&nlri);
                    push_attr(&mut path, FLAG_OPTIONAL, ATTR_MP_REACH, &reach);
                    body.extend_from_slice(&(path.len() as u16).to_be_bytes());
                    body.extend_from_slice(&path);
                }
            }
            frame(TYPE_UPDATE, &body)
        })
        .collect()
}

/// The End-of-RIB marker of `family` (RFC 4724 section 2): the initial
/// announcements are complete, so the router drops whatever stale routes
/// of the family it still keeps from before a restart. An UPDATE with
/// nothing in it for IPv4 unicast; an empty MP_UNREACH_NLRI otherwise.
pub fn encode_end_of_rib(family: Family) -> Vec<u8> {
    match family {
        Family::Ipv4 => frame(TYPE_UPDATE, &[0, 0, 0, 0]),
        Family::Ipv6 => {
            let mut unreach = family.afi().to_be_bytes().to_vec();
            unreach.push(SAFI_UNICAST);
            let mut path = Vec::new();
            push_attr(&mut path, FLAG_OPTIONAL, ATTR_MP_UNREACH, &unreach);
            let mut body = vec![0, 0];
            body.extend_from_slice(&(path.len() as u16).to_be_bytes());
            body.extend_from_slice(&path);
            frame(TYPE_UPDATE, &body)
        }
    }
}

/// UPDATEs withdrawing every address of `family` in `addrs`.
pub fn encode_withdraw(family: Family, addrs: &[IpAddr]) -> Vec<Vec<u8>> {
    addrs
        .chunks(prefixes_per_message(family, 8))
        .map(|chunk| {
            let mut prefixes = Vec::with_capacity(chunk.len() * prefix_len(family));
            for addr in chunk {
                host_prefix(addr, &mut prefixes);
            }
            let mut body = Vec::new();
            match family {
                Family::Ipv4 => {
                    body.extend_from_slice(&(prefixes.len() as u16).to_be_bytes());
                    body.extend_from_slice(&prefixes);
                    body.extend_from_slice(&[0, 0]);
                }
                Family::Ipv6 => {
                    let mut unreach = family.afi().to_be_bytes().to_vec();
                    unreach.push(SAFI_UNICAST);
                    unreach.extend_from_slice(&prefixes);
                    let mut path = Vec::new();
                    push_attr(&mut path, FLAG_OPTIONAL, ATTR_MP_UNREACH, &unreach);
                    body.extend_from_slice(&[0, 0]);
                    body.extend_from_slice(&(path.len() as u16).to_be_bytes());
                    body.extend_from_slice(&path);
                }
            }
            frame(TYPE_UPDATE, &body)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    const MARKER: &str = "ffffffffffffffffffffffffffffffff";

    #[test]
    fn keepalive_is_the_bare_19_byte_header() {
        assert_eq!(encode_keepalive(), hex(&format!("{MARKER} 0013 04")));
        assert_eq!(
            decode(&encode_keepalive()).unwrap(),
            Some((Message::Keepalive, 19))
        );
    }

    #[test]
    fn open_carries_multiprotocol_and_four_octet_as_capabilities() {
        let open = Open {
            asn: 65001,
            hold_time_secs: 3,
            router_id: Ipv4Addr::new(192, 0, 2, 2),
            families: vec![Family::Ipv4, Family::Ipv6],
            four_octet_as: true,
        };
        let expected = hex(&format!(
            "{MARKER} 0031 01
             04 fde9 0003 c0000202
             14 02 12
             01 04 0001 00 01
             01 04 0002 00 01
             41 04 0000fde9"
        ));
        assert_eq!(encode_open(&open), expected);
        assert_eq!(
            decode(&expected).unwrap(),
            Some((Message::Open(open), expected.len()))
        );
    }

    #[test]
    fn a_large_asn_rides_as_trans_in_the_two_octet_field() {
        let open = Open {
            asn: 4_200_000_000,
            hold_time_secs: 90,
            router_id: Ipv4Addr::new(192, 0, 2, 2),
            families: vec![Family::Ipv4],
            four_octet_as: true,
        };
        let bytes = encode_open(&open);
        assert_eq!(&bytes[20..22], &AS_TRANS.to_be_bytes());
        let Some((Message::Open(back), _)) = decode(&bytes).unwrap() else {
            panic!("not an OPEN");
        };
        assert_eq!(back.asn, 4_200_000_000);
    }

    #[test]
    fn an_open_without_multiprotocol_means_ipv4_unicast() {
        let bytes = hex(&format!("{MARKER} 001d 01 04 fde8 00b4 c0000201 00"));
        let Some((Message::Open(open), 29)) = decode(&bytes).unwrap() else {
            panic!("not an OPEN");
        };
        assert_eq!(open.asn, 65000);
        assert_eq!(open.hold_time_secs, 180);
        assert_eq!(open.families, vec![Family::Ipv4]);
        assert!(!open.four_octet_as);
    }

    #[test]
    fn ebgp_ipv4_announcement_matches_rfc_4271_layout() {
        let attrs = PathAttributes {
            ebgp_asn: Some(65001),
            four_octet_as: true,
            local_pref: DEFAULT_LOCAL_PREF,
            graceful_shutdown: false,
        };
        let msgs = encode_announce(
            Family::Ipv4,
            &["203.0.113.10".parse().unwrap()],
            "192.0.2.2".parse().unwrap(),
            &attrs,
        );
        let expected = hex(&format!(
            "{MARKER} 0030 02
             0000
             0014
             40 01 01 00
             40 02 06 02 01 0000fde9
             40 03 04 c0000202
             20 cb00710a"
        ));
        assert_eq!(msgs, vec![expected.clone()]);
        assert_eq!(decode(&expected).unwrap(), Some((Message::Update, 0x30)));
    }

    #[test]
    fn ibgp_graceful_shutdown_ipv6_announcement_uses_mp_reach() {
        let attrs = PathAttributes {
            ebgp_asn: None,
            four_octet_as: true,
            local_pref: 100,
            graceful_shutdown: true,
        };
        let msgs = encode_announce(
            Family::Ipv6,
            &["2001:db8:ffff::10".parse().unwrap()],
            "2001:db8:1::2".parse().unwrap(),
            &attrs,
        );
        let expected = hex(&format!(
            "{MARKER} 0055 02
             0000
             003e
             40 01 01 00
             40 02 00
             40 05 04 00000064
             c0 08 04 ffff0000
             80 0e 26 0002 01 10 20010db8000100000000000000000002 00
                80 20010db8ffff00000000000000000010"
        ));
        assert_eq!(msgs, vec![expected]);
    }

    #[test]
    fn two_octet_peers_get_a_two_octet_as_path() {
        let attrs = PathAttributes {
            ebgp_asn: Some(65001),
            four_octet_as: false,
            local_pref: 100,
            graceful_shutdown: false,
        };
        let msg = &encode_announce(
            Family::Ipv4,
            &["203.0.113.10".parse().unwrap()],
            "192.0.2.2".parse().unwrap(),
            &attrs,
        )[0];
        let body = &msg[HEADER_LEN..];
        assert_eq!(&body[8..15], &hex("40 02 04 02 01 fde9")[..]);
    }

    #[test]
    fn withdrawals_use_the_withdrawn_field_for_ipv4_and_mp_unreach_for_ipv6() {
        let v4 = encode_withdraw(Family::Ipv4, &["203.0.113.10".parse().unwrap()]);
        assert_eq!(
            v4,
            vec![hex(&format!("{MARKER} 001c 02 0005 20cb00710a 0000"))]
        );
        let v6 = encode_withdraw(Family::Ipv6, &["2001:db8:ffff::10".parse().unwrap()]);
        assert_eq!(
            v6,
            vec![hex(&format!(
                "{MARKER} 002e 02 0000 0017
                 80 0f 14 0002 01 80 20010db8ffff00000000000000000010"
            ))]
        );
    }

    #[test]
    fn many_addresses_split_into_messages_under_4096_bytes() {
        let addrs: Vec<IpAddr> = (0..2000u32)
            .map(|i| IpAddr::V6(Ipv6Addr::from(0x2001_0db8_u128 << 96 | i as u128)))
            .collect();
        let attrs = PathAttributes {
            ebgp_asn: Some(65001),
            four_octet_as: true,
            local_pref: 100,
            graceful_shutdown: true,
        };
        let nh = "2001:db8:1::2".parse().unwrap();
        let announce = encode_announce(Family::Ipv6, &addrs, nh, &attrs);
        let withdraw = encode_withdraw(Family::Ipv6, &addrs);
        for msg in announce.iter().chain(&withdraw) {
            assert!(msg.len() <= MAX_MESSAGE_LEN, "{} bytes", msg.len());
            assert!(matches!(decode(msg).unwrap(), Some((Message::Update, _))));
        }
        for (name, msgs) in [("announced", &announce), ("withdrawn", &withdraw)] {
            for addr in &addrs {
                let mut prefix = Vec::new();
                host_prefix(addr, &mut prefix);
                let carrying = msgs
                    .iter()
                    .filter(|m| m.windows(prefix.len()).any(|w| w == prefix))
                    .count();
                assert_eq!(carrying, 1, "{addr} {name} in {carrying} messages");
            }
        }
    }

    #[test]
    fn graceful_restart_capability_matches_rfc_4724_layout() {
        let open = Open {
            asn: 65001,
            hold_time_secs: 3,
            router_id: Ipv4Addr::new(192, 0, 2, 2),
            families: vec![Family::Ipv4, Family::Ipv6],
            four_octet_as: true,
        };
        let gr = GracefulRestart {
            restarted: true,
            restart_time_secs: 120,
            families: vec![(Family::Ipv4, true), (Family::Ipv6, true)],
            notification: false,
        };
        let bytes = encode_open_with(&open, Some(&gr));
        // R bit and 120 s (0x8078), then per family AFI, SAFI, F bit.
        let expected = hex(&format!(
            "{MARKER} 003d 01
             04 fde9 0003 c0000202
             20 02 1e
             01 04 0001 00 01
             01 04 0002 00 01
             41 04 0000fde9
             40 0a 8078 0001 01 80 0002 01 80"
        ));
        assert_eq!(bytes, expected);
        assert_eq!(graceful_restart_of(&bytes), Some(gr));
        // The other capabilities read as before.
        assert_eq!(
            decode(&bytes).unwrap(),
            Some((Message::Open(open.clone()), bytes.len()))
        );
        assert_eq!(graceful_restart_of(&encode_open(&open)), None);
        // A router's capability with the N bit and no family (FRR's
        // helper-only mode): read, the time masked to 12 bits.
        let mut router = encode_open(&open);
        let body_len = router.len() - HEADER_LEN;
        router.extend_from_slice(&hex("02 04 40 02 40 5a"));
        router[28] += 6;
        router[16..18].copy_from_slice(&((HEADER_LEN + body_len + 6) as u16).to_be_bytes());
        assert_eq!(
            graceful_restart_of(&router),
            Some(GracefulRestart {
                restarted: false,
                restart_time_secs: 90,
                families: vec![],
                notification: true,
            })
        );
    }

    #[test]
    fn end_of_rib_is_an_empty_update_or_an_empty_mp_unreach() {
        assert_eq!(
            encode_end_of_rib(Family::Ipv4),
            hex(&format!("{MARKER} 0017 02 0000 0000"))
        );
        assert_eq!(
            encode_end_of_rib(Family::Ipv6),
            hex(&format!("{MARKER} 001d 02 0000 0006 80 0f 03 0002 01"))
        );
        for family in [Family::Ipv4, Family::Ipv6] {
            assert!(matches!(
                decode(&encode_end_of_rib(family)).unwrap(),
                Some((Message::Update, _))
            ));
        }
    }

    #[test]
    fn partial_input_waits_and_garbage_is_refused() {
        let ka = encode_keepalive();
        assert_eq!(decode(&ka[..10]).unwrap(), None);
        let mut bad = ka.clone();
        bad[0] = 0;
        assert!(decode(&bad).is_err());
        let mut long = ka.clone();
        long[16..18].copy_from_slice(&5000u16.to_be_bytes());
        assert!(decode(&long).is_err());
        let mut truncated_open = encode_open(&Open {
            asn: 1,
            hold_time_secs: 3,
            router_id: Ipv4Addr::LOCALHOST,
            families: vec![Family::Ipv4],
            four_octet_as: true,
        });
        // claims more optional parameters than the message holds
        truncated_open[28] = 200;
        assert!(decode(&truncated_open).is_err());
    }

    #[test]
    fn cease_carries_the_shutdown_communication() {
        let n = cease("teapot stopping");
        let bytes = encode_notification(&n);
        assert_eq!(&bytes[HEADER_LEN..HEADER_LEN + 3], &[6, 2, 15]);
        let Some((Message::Notification(back), _)) = decode(&bytes).unwrap() else {
            panic!("not a NOTIFICATION");
        };
        assert_eq!(
            back.to_string(),
            "cease (6/2) Administrative Shutdown: teapot stopping".to_string()
        );
    }

    /// A peer's shutdown communication with CR, LF and ESC cannot forge a
    /// log line or drive a terminal: those bytes are shown `\xNN`.
    #[test]
    fn a_hostile_shutdown_communication_is_escaped() {
        let text = b"bye\r\n2026-01-01T00:00:00Z ERROR forged\x1b[2J";
        let mut data = vec![text.len() as u8];
        data.extend_from_slice(text);
        let n = Notification {
            code: code::CEASE,
            subcode: code::ADMINISTRATIVE_SHUTDOWN,
            data,
        };
        let shown = n.to_string();
        assert!(!shown.bytes().any(|b| b.is_ascii_control()), "{shown:?}");
        assert_eq!(
            shown,
            "cease (6/2) Administrative Shutdown: bye\\x0d\\x0a2026-01-01T00:00:00Z ERROR forged\\x1b[2J"
        );
        // Not UTF-8: shown escaped too, no longer left out.
        let n = Notification {
            code: code::CEASE,
            subcode: code::ADMINISTRATIVE_SHUTDOWN,
            data: vec![2, 0xff, b'\n'],
        };
        assert_eq!(
            n.to_string(),
            "cease (6/2) Administrative Shutdown: \\xff\\x0a"
        );
    }
}
