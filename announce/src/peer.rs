//! One configured BGP neighbour: its settings (parsed from the
//! `ADDR,ASN[,key=value...]` form the command line takes) and what it
//! looks like now ([`PeerStatus`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use std::collections::BTreeMap;

use crate::Error;
use crate::bfd::{self, BfdStatus, Timing};
use crate::md5;

/// The BGP port (RFC 4271).
pub const BGP_PORT: u16 = 179;
/// Hold time when none is configured (RFC 4271 suggests 90 s; failover in
/// seconds needs the router side tuned too, see docs/announce.md).
pub const DEFAULT_HOLD_TIME: Duration = Duration::from_secs(90);
/// RFC 4271: a non-zero hold time is at least 3 seconds.
pub const MIN_HOLD_TIME: Duration = Duration::from_secs(3);

/// One neighbour the speaker connects to and announces to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    pub address: IpAddr,
    pub port: u16,
    pub remote_asn: u32,
    /// Offered in OPEN; the session uses the smaller of both sides' (0
    /// turns keepalives and the hold timer off).
    pub hold_time: Duration,
    /// `None`: a third of the negotiated hold time.
    pub keepalive: Option<Duration>,
    /// eBGP to a router that is not directly connected: the IP TTL of the
    /// session's packets. Directly connected eBGP uses TTL 1, iBGP the
    /// system default.
    pub multihop_ttl: Option<u8>,
    /// Bind the session to this local address (multihop, several
    /// addresses on the uplink).
    pub source: Option<IpAddr>,
    /// Next hop for IPv4 routes when the session's own address is IPv6 (or
    /// to name another address of this host).
    pub next_hop_v4: Option<Ipv4Addr>,
    /// Next hop for IPv6 routes when the session runs over IPv4.
    pub next_hop_v6: Option<Ipv6Addr>,
    /// LOCAL_PREF sent on iBGP sessions.
    pub local_pref: u32,
    /// A BFD session beside the BGP session (`bfd=100x3`): the router
    /// notices a silent replica after `multiplier` missed intervals.
    pub bfd: Option<Timing>,
    /// The TCP-MD5 password (RFC 2385) the router expects, read from
    /// `password-file=` at start.
    pub md5: Option<md5::Key>,
    /// Wait for the router to connect (to the speaker's listening port)
    /// instead of connecting to it: for routers that only accept
    /// sessions they open, or that sit behind a firewall letting only
    /// their side connect.
    pub passive: bool,
}

impl PeerConfig {
    pub fn new(address: IpAddr, remote_asn: u32) -> PeerConfig {
        PeerConfig {
            address,
            port: BGP_PORT,
            remote_asn,
            hold_time: DEFAULT_HOLD_TIME,
            keepalive: None,
            multihop_ttl: None,
            source: None,
            next_hop_v4: None,
            next_hop_v6: None,
            local_pref: crate::wire::DEFAULT_LOCAL_PREF,
            bfd: None,
            md5: None,
            passive: false,
        }
    }

    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.address, self.port)
    }

    /// Settings that make no session are refused before anything starts.
    pub fn validate(&self, local_asn: u32) -> Result<(), Error> {
        let bad = |field: &str, reason: String| Error::Config {
            setting: format!("BGP peer {} {field}", self.address),
            reason,
        };
        if self.remote_asn == 0 || local_asn == 0 {
            return Err(bad("ASN", "AS 0 is reserved (RFC 7607)".into()));
        }
        if !self.hold_time.is_zero() && self.hold_time < MIN_HOLD_TIME {
            return Err(bad(
                "hold",
                format!(
                    "{:?} is below the 3 s minimum of RFC 4271 (0 turns it off)",
                    self.hold_time
                ),
            ));
        }
        if self.hold_time.as_secs() > u16::MAX as u64 {
            return Err(bad("hold", format!("{:?} exceeds 65535 s", self.hold_time)));
        }
        if let Some(keepalive) = self.keepalive
            && !self.hold_time.is_zero()
            && (keepalive.is_zero() || keepalive >= self.hold_time)
        {
            return Err(bad(
                "keepalive",
                format!(
                    "{keepalive:?} must be above 0 and below the hold time {:?}",
                    self.hold_time
                ),
            ));
        }
        if self.multihop_ttl == Some(0) {
            return Err(bad("multihop", "a TTL of 0 reaches nobody".into()));
        }
        if self.multihop_ttl.is_some() && self.remote_asn == local_asn {
            return Err(bad(
                "multihop",
                "applies to eBGP; an iBGP session already uses the system TTL".into(),
            ));
        }
        if let Some(timing) = self.bfd {
            timing.check().map_err(|reason| bad("bfd", reason))?;
            if self.multihop_ttl.is_some() {
                return Err(bad(
                    "bfd",
                    "single-hop BFD (RFC 5881) only: not with multihop".into(),
                ));
            }
        }
        Ok(())
    }
}

fn secs(field: &str, value: &str, spec: &str) -> Result<Duration, Error> {
    value
        .parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| Error::Config {
            setting: format!("BGP peer `{spec}` {field}"),
            reason: format!("`{value}` is not a whole number of seconds"),
        })
}

/// The TCP-MD5 password in the file at `path`: a mounted Secret, so the
/// password appears neither on the command line nor in the process list.
/// One trailing newline (what `echo` and most editors leave) is not part of
/// it.
fn password_file(path: &str, spec: &str) -> Result<md5::Key, Error> {
    let bad = |reason: String| Error::Config {
        setting: format!("BGP peer `{spec}` password-file"),
        reason,
    };
    let mut password =
        std::fs::read(path).map_err(|e| bad(format!("cannot read `{path}`: {e}")))?;
    if password.ends_with(b"\n") {
        password.pop();
        if password.ends_with(b"\r") {
            password.pop();
        }
    }
    let len = password.len();
    md5::Key::new(password).ok_or_else(|| {
        bad(if len == 0 {
            format!("`{path}` is empty: a TCP-MD5 password has at least one byte")
        } else {
            format!(
                "the password in `{path}` has {len} bytes, above the {} a TCP-MD5 key can have (TCP_MD5SIG_MAXKEYLEN)",
                md5::MAX_KEY_LEN
            )
        })
    })
}

fn parsed<T: FromStr>(field: &str, value: &str, spec: &str, what: &str) -> Result<T, Error> {
    value.parse().map_err(|_| Error::Config {
        setting: format!("BGP peer `{spec}` {field}"),
        reason: format!("`{value}` is not {what}"),
    })
}

/// `ADDR,ASN[,port=N][,hold=S][,keepalive=S][,multihop=TTL][,source=ADDR]
/// [,next-hop=ADDR][,local-pref=N][,bfd=MSxMULT][,password-file=PATH]`.
impl FromStr for PeerConfig {
    type Err = Error;

    fn from_str(spec: &str) -> Result<PeerConfig, Error> {
        // An inline password would show in the process list, the shell's
        // history, and every error below, which quotes the spec: refused
        // first, naming the peer by its address alone.
        if spec
            .split(',')
            .any(|part| part.trim().split('=').next() == Some("password"))
        {
            return Err(Error::Config {
                setting: format!("BGP peer {} password", spec.split(',').next().unwrap_or("").trim()),
                reason: "not accepted inline: put the TCP-MD5 password in a file and give password-file=PATH".into(),
            });
        }
        let mut parts = spec.split(',').map(str::trim);
        let address = parsed("address", parts.next().unwrap_or(""), spec, "an IP address")?;
        let asn = parts.next().ok_or_else(|| Error::Config {
            setting: format!("BGP peer `{spec}`"),
            reason: "expected ADDR,ASN[,key=value...]".into(),
        })?;
        let mut peer = PeerConfig::new(address, parsed("ASN", asn, spec, "an AS number")?);
        for part in parts {
            let (key, value) = part.split_once('=').ok_or_else(|| Error::Config {
                setting: format!("BGP peer `{spec}`"),
                reason: format!("`{part}` is not key=value"),
            })?;
            match key {
                "port" => peer.port = parsed(key, value, spec, "a port")?,
                "hold" => peer.hold_time = secs(key, value, spec)?,
                "keepalive" => peer.keepalive = Some(secs(key, value, spec)?),
                "multihop" => peer.multihop_ttl = Some(parsed(key, value, spec, "a TTL (1-255)")?),
                "source" => peer.source = Some(parsed(key, value, spec, "an IP address")?),
                "next-hop" => match parsed(key, value, spec, "an IP address")? {
                    IpAddr::V4(a) => peer.next_hop_v4 = Some(a),
                    IpAddr::V6(a) => peer.next_hop_v6 = Some(a),
                },
                "local-pref" => peer.local_pref = parsed(key, value, spec, "a number")?,
                "bfd" => {
                    peer.bfd = Some(bfd::Timing::parse(value).map_err(|reason| Error::Config {
                        setting: format!("BGP peer `{spec}` bfd"),
                        reason,
                    })?)
                }
                "password-file" => peer.md5 = Some(password_file(value, spec)?),
                "passive" => peer.passive = parsed(key, value, spec, "true or false")?,
                _ => {
                    return Err(Error::Config {
                        setting: format!("BGP peer `{spec}`"),
                        reason: format!(
                            "unknown key `{key}` (port, hold, keepalive, multihop, source, next-hop, local-pref, bfd, password-file, passive)"
                        ),
                    });
                }
            }
        }
        Ok(peer)
    }
}

/// Where a session stands (RFC 4271's states; OpenConfirm is folded into
/// OpenSent, and Active into Connect, since the speaker only connects).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SessionState {
    #[default]
    Idle,
    Connect,
    OpenSent,
    Established,
}

impl SessionState {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Idle => "Idle",
            SessionState::Connect => "Connect",
            SessionState::OpenSent => "OpenSent",
            SessionState::Established => "Established",
        }
    }
}

/// A peer's session as `/status` and metrics show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStatus {
    pub peer: SocketAddr,
    pub remote_asn: u32,
    pub state: SessionState,
    /// Host routes the router holds from this speaker now.
    pub announced: usize,
    /// Routes sent in UPDATEs since start (re-announcements included).
    pub announcements_sent: u64,
    pub withdrawals_sent: u64,
    pub sessions_established: u64,
    /// Why the last session ended or failed, until one is established;
    /// names the peer.
    pub last_error: Option<String>,
    /// Sessions that failed or ended, by [`Error::failure_reason`].
    pub failures: BTreeMap<&'static str, u64>,
    /// The BFD session, when the peer has `bfd=`.
    pub bfd: Option<BfdStatus>,
    /// The session is signed with TCP-MD5 (`password-file=`); the
    /// password itself is never shown.
    pub md5: bool,
    /// The families the established session carries (empty when it is
    /// not established): which of this replica's addresses the router has.
    pub families: Vec<crate::wire::Family>,
    /// This speaker offers graceful restart (RFC 4724) on the session.
    pub graceful_restart: bool,
    /// The router's restart time when it offered graceful restart on the
    /// session: without it, it keeps no route across a restart.
    pub router_graceful_restart: Option<u16>,
    /// End-of-RIB went out on the current BGP session.
    pub end_of_rib_sent: bool,
}

impl PeerStatus {
    pub fn new(peer: &PeerConfig) -> PeerStatus {
        PeerStatus {
            peer: peer.socket_addr(),
            remote_asn: peer.remote_asn,
            state: SessionState::Idle,
            announced: 0,
            announcements_sent: 0,
            withdrawals_sent: 0,
            sessions_established: 0,
            last_error: None,
            failures: BTreeMap::new(),
            bfd: peer.bfd.map(|_| BfdStatus::default()),
            md5: peer.md5.is_some(),
            families: Vec::new(),
            graceful_restart: false,
            router_graceful_restart: None,
            end_of_rib_sent: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_spec_with_every_key() {
        let peer: PeerConfig =
            "192.0.2.1,64500,port=1179,hold=3,keepalive=1,multihop=4,source=192.0.2.2,next-hop=2001:db8::2,local-pref=200"
                .parse()
                .unwrap();
        assert_eq!(peer.address, "192.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(peer.remote_asn, 64500);
        assert_eq!(peer.port, 1179);
        assert_eq!(peer.hold_time, Duration::from_secs(3));
        assert_eq!(peer.keepalive, Some(Duration::from_secs(1)));
        assert_eq!(peer.multihop_ttl, Some(4));
        assert_eq!(peer.source, Some("192.0.2.2".parse().unwrap()));
        assert_eq!(peer.next_hop_v6, Some("2001:db8::2".parse().unwrap()));
        assert_eq!(peer.local_pref, 200);
        assert_eq!(peer.bfd, None);
        peer.validate(64501).unwrap();

        assert!(!peer.passive);
        let passive: PeerConfig = "192.0.2.1,64500,passive=true".parse().unwrap();
        assert!(passive.passive);

        let peer: PeerConfig = "192.0.2.1,64500,bfd=100x3".parse().unwrap();
        assert_eq!(
            peer.bfd,
            Some(Timing {
                interval: Duration::from_millis(100),
                multiplier: 3
            })
        );
        peer.validate(64501).unwrap();
    }

    #[test]
    fn bad_peer_specs_name_the_field() {
        let cases = [
            ("192.0.2.1", "expected ADDR,ASN"),
            ("gateway,64500", "address"),
            ("192.0.2.1,AS64500", "ASN"),
            ("192.0.2.1,64500,hold=fast", "hold"),
            ("192.0.2.1,64500,ttl=3", "unknown key `ttl`"),
            ("192.0.2.1,64500,multihop", "not key=value"),
            (
                "192.0.2.1,64500,bfd=100",
                "bfd: `100` is not INTERVALxMULTIPLIER",
            ),
            ("192.0.2.1,64500,bfd=fastx3", "bfd"),
            ("192.0.2.1,64500,bfd=100x300", "bfd"),
        ];
        for (spec, needle) in cases {
            let err = spec.parse::<PeerConfig>().unwrap_err().to_string();
            assert!(err.contains(needle), "{spec}: {err}");
        }
    }

    /// A file holding `content`, for `password-file=`.
    fn password_in(content: &[u8]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, content).unwrap();
        file
    }

    #[test]
    fn a_password_file_is_read_at_parse_without_one_trailing_newline() {
        let spec = |file: &tempfile::NamedTempFile| {
            format!("192.0.2.1,64500,password-file={}", file.path().display())
        };
        let key = |password: &[u8]| Some(md5::Key::new(password.to_vec()).unwrap());
        let peer: PeerConfig = spec(&password_in(b"s3cret\n")).parse().unwrap();
        assert_eq!(peer.md5, key(b"s3cret"));
        assert!(PeerStatus::new(&peer).md5);
        // Only the one newline a file usually ends in; the rest is the
        // password, as the router has it.
        let peer: PeerConfig = spec(&password_in(b" s3cret\n\n")).parse().unwrap();
        assert_eq!(peer.md5, key(b" s3cret\n"));
        let peer: PeerConfig = spec(&password_in(b"s3cret\r\n")).parse().unwrap();
        assert_eq!(peer.md5, key(b"s3cret"));
        let peer: PeerConfig = spec(&password_in(&[b'x'; 80])).parse().unwrap();
        assert!(peer.md5.is_some());
        // Printed or logged, a peer never shows its password.
        assert!(!format!("{peer:?}").contains("xxx"), "{peer:?}");

        let peer: PeerConfig = "192.0.2.1,64500".parse().unwrap();
        assert_eq!(peer.md5, None);
        assert!(!PeerStatus::new(&peer).md5);
    }

    #[test]
    fn unusable_password_files_name_the_peer_and_the_key() {
        let empty = password_in(b"");
        let newline_only = password_in(b"\n");
        let long = password_in(&[b'x'; 81]);
        let missing = empty.path().with_extension("missing");
        let cases = [
            (empty.path().to_owned(), "is empty"),
            (newline_only.path().to_owned(), "is empty"),
            (long.path().to_owned(), "has 81 bytes, above the 80"),
            (missing.clone(), "cannot read"),
        ];
        for (path, needle) in cases {
            let spec = format!("192.0.2.1,64500,password-file={}", path.display());
            let err = spec.parse::<PeerConfig>().unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("BGP peer `{spec}` password-file: ")),
                "{err}"
            );
            assert!(
                err.contains(needle) && err.contains(&*path.to_string_lossy()),
                "{err}"
            );
        }
        // Not inline: refused before anything could quote the secret, also
        // when another key is bad too.
        for spec in [
            "192.0.2.1,64500,password=s3cret",
            "192.0.2.1,64500,ttl=3,password=s3cret",
            "192.0.2.1,AS64500,password=s3cret",
        ] {
            let err = spec.parse::<PeerConfig>().unwrap_err().to_string();
            assert!(err.starts_with("BGP peer 192.0.2.1 password: "), "{err}");
            assert!(
                err.contains("password-file=PATH") && !err.contains("s3cret"),
                "{err}"
            );
        }
    }

    #[test]
    fn unusable_timers_and_asns_are_refused() {
        let check = |spec: &str, local: u32, needle: &str| {
            let err = spec
                .parse::<PeerConfig>()
                .unwrap()
                .validate(local)
                .unwrap_err();
            assert!(err.to_string().contains(needle), "{spec}: {err}");
        };
        check("192.0.2.1,64500,hold=2", 64501, "hold");
        check("192.0.2.1,64500,hold=3,keepalive=3", 64501, "keepalive");
        check("192.0.2.1,0", 64501, "ASN");
        check("192.0.2.1,64500,multihop=0", 64501, "multihop");
        check("192.0.2.1,64500,multihop=2", 64500, "eBGP");
        // BFD timings out of range are refused as they are read.
        for (spec, needle) in [
            (
                "192.0.2.1,64500,bfd=5x3",
                "bfd: an interval of 5ms is below",
            ),
            (
                "192.0.2.1,64500,bfd=20000x3",
                "bfd: an interval of 20s is above",
            ),
            ("192.0.2.1,64500,bfd=100x0", "bfd: a multiplier of 0"),
        ] {
            let err = spec.parse::<PeerConfig>().unwrap_err();
            assert!(err.to_string().contains(needle), "{spec}: {err}");
        }
        check(
            "192.0.2.1,64500,bfd=100x3,multihop=2",
            64501,
            "bfd: single-hop",
        );
        "192.0.2.1,64500,hold=0"
            .parse::<PeerConfig>()
            .unwrap()
            .validate(64501)
            .unwrap();
    }
}
