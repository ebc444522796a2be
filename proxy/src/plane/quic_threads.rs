//! HTTP/3 on every serving thread: one UDP socket per thread in a
//! `SO_REUSEPORT` group at the HTTPS address, and a classic BPF program
//! on the group that hands each packet to the thread holding its
//! connection.
//!
//! Why not the kernel's own spreading: it hashes the 4-tuple, and a QUIC
//! connection outlives its 4-tuple. A client behind a NAT that rebinds
//! its port, or one moving from Wi-Fi to mobile, sends from a new address;
//! hashed, its packets would reach another thread's endpoint, which has
//! no state for the connection and answers with a stateless reset. So
//! every connection ID a thread issues starts with the thread's index
//! ([`ThreadConnectionIds`]), and the program reads the destination
//! connection ID's first byte ([`steering_program`]): a short-header
//! packet (every packet after the handshake) reaches the thread whose ID
//! it carries, whatever its source address. A client's first Initial
//! carries an ID the client chose, at random; the same byte rule sends
//! all its Initials (same ID until the server answers) to one thread,
//! whose own IDs the client then uses.
//!
//! The group's sockets are indexed in the order they were bound
//! (thread 0 first); none leaves the group before the process ends, so
//! the indexes stay the threads'.

use std::net::{SocketAddr, UdpSocket};

use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};

use crate::plane::ServeError;

/// Serving threads that get an HTTP/3 endpoint: the thread's index is
/// one byte of its connection IDs. Threads past it serve TCP only.
pub const MAX_QUIC_THREADS: usize = 256;

/// The longest connection ID QUIC has (RFC 9000 §17.2).
const MAX_CID_LEN: usize = 20;

/// Connection IDs whose first byte is the issuing thread's index,
/// followed by an ID of `check` (a keyed check every replica with the
/// fleet's key verifies: crate::plane::quic_keys).
pub struct ThreadConnectionIds<G> {
    thread: u8,
    check: G,
}

impl<G: ConnectionIdGenerator> ThreadConnectionIds<G> {
    pub fn new(thread: u8, check: G) -> ThreadConnectionIds<G> {
        ThreadConnectionIds { thread, check }
    }
}

impl<G: ConnectionIdGenerator> ConnectionIdGenerator for ThreadConnectionIds<G> {
    fn generate_cid(&mut self) -> ConnectionId {
        let inner = self.check.generate_cid();
        let mut bytes = [0u8; MAX_CID_LEN];
        bytes[0] = self.thread;
        bytes[1..=inner.len()].copy_from_slice(&inner);
        ConnectionId::new(&bytes[..=inner.len()])
    }

    /// The check alone: an ID another thread (or replica) issued is as
    /// good, so that a packet that reached the wrong endpoint still gets
    /// its stateless reset.
    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        match cid.split_first() {
            Some((_, rest)) if rest.len() == self.check.cid_len() => {
                self.check.validate(&ConnectionId::new(rest))
            }
            _ => Err(InvalidCid),
        }
    }

    fn cid_len(&self) -> usize {
        1 + self.check.cid_len()
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        self.check.cid_lifetime()
    }
}

/// One classic BPF instruction.
fn op(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The group's program for `threads` sockets: the destination connection
/// ID's first byte, modulo `threads`, is the socket's index. The packet
/// starts at the UDP payload. A short header (first bit 0) has the ID at
/// byte 1; a long header (first bit 1: Initial, 0-RTT, Handshake) has
/// flags, a 4-byte version and the ID's length first, so the ID at byte
/// 6. A packet too short for the load ends the program with 0 (socket 0):
/// it is no QUIC packet teapot could serve.
pub fn steering_program(threads: u32) -> Vec<libc::sock_filter> {
    use libc::{BPF_A, BPF_ABS, BPF_ALU, BPF_B, BPF_JA, BPF_JMP, BPF_JSET, BPF_K, BPF_LD};
    use libc::{BPF_MOD, BPF_RET};
    const LONG_HEADER: u32 = 0x80;
    let load_byte = |at| op(BPF_LD | BPF_B | BPF_ABS, 0, 0, at);
    vec![
        // 0: the first byte.
        load_byte(0),
        // 1: a long header jumps to 4.
        op(BPF_JMP | BPF_JSET | BPF_K, 2, 0, LONG_HEADER),
        // 2, 3: short header: the ID's first byte, then to 5.
        load_byte(1),
        op(BPF_JMP | BPF_JA, 0, 0, 1),
        // 4: long header: the ID's first byte.
        load_byte(6),
        // 5, 6: modulo the group's size, the socket's index.
        op(BPF_ALU | BPF_MOD | BPF_K, 0, 0, threads.max(1)),
        op(BPF_RET | BPF_A, 0, 0, 0),
    ]
}

/// Binds the group's first UDP socket at `addr`: a plain bind first
/// proves that nothing else holds the port (another proxy must not join
/// the group), then the group's first member takes the very address.
pub fn bind_first(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let probe = UdpSocket::bind(addr)?;
    let addr = probe.local_addr()?;
    drop(probe);
    member(addr)
}

fn member(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let socket =
        crate::plane::socket_group::member(addr, socket2::Type::DGRAM, socket2::Protocol::UDP)?;
    // An IPv6 address takes IPv4 too where the system says so
    // (`net.ipv6.bindv6only`), as the TCP listeners at it do.
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// One socket per serving thread, `first` (from [`bind_first`]) the
/// first, the steering program on the group when there are several
/// (at most [`MAX_QUIC_THREADS`]).
pub fn per_thread(first: UdpSocket, threads: usize) -> Result<Vec<UdpSocket>, ServeError> {
    let threads = threads.clamp(1, MAX_QUIC_THREADS);
    let addr = first.local_addr()?;
    let bind_error = |source| ServeError::Bind {
        what: "serving thread (UDP)",
        addr: addr.to_string(),
        source,
    };
    let mut sockets = vec![first];
    for _ in 1..threads {
        sockets.push(member(addr).map_err(bind_error)?);
    }
    if threads > 1 {
        attach(&sockets[0], threads as u32).map_err(bind_error)?;
    }
    Ok(sockets)
}

/// The program on `socket`'s group (one member's option sets it for all).
fn attach(socket: &UdpSocket, threads: u32) -> std::io::Result<()> {
    let mut program = steering_program(threads);
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    nix::sys::socket::setsockopt(
        socket,
        nix::sys::socket::sockopt::AttachReusePortCbpf,
        &prog,
    )
    .map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_id_carries_its_thread_and_passes_the_check_on_any_thread() {
        let key = 0x5eed;
        let mut third =
            ThreadConnectionIds::new(3, quinn_proto::HashedConnectionIdGenerator::from_key(key));
        let first =
            ThreadConnectionIds::new(0, quinn_proto::HashedConnectionIdGenerator::from_key(key));
        let other_key = ThreadConnectionIds::new(
            3,
            quinn_proto::HashedConnectionIdGenerator::from_key(key + 1),
        );
        for _ in 0..64 {
            let id = third.generate_cid();
            assert_eq!(id.len(), third.cid_len());
            assert_eq!(id[0], 3);
            assert!(third.validate(&id).is_ok());
            assert!(first.validate(&id).is_ok(), "another thread's ID");
            assert!(other_key.validate(&id).is_err(), "another key's ID");
        }
        let mut forged = third.generate_cid().to_vec();
        forged[5] ^= 1;
        assert!(third.validate(&ConnectionId::new(&forged)).is_err());
        assert!(third.validate(&ConnectionId::new(&forged[..4])).is_err());
    }

    /// A short-header packet to connection ID `id`.
    fn short(id: u8) -> Vec<u8> {
        let mut p = vec![0x40, id];
        p.extend_from_slice(&[0xaa; 40]);
        p
    }

    /// A long-header (Initial) packet to connection ID `id`.
    fn long(id: u8) -> Vec<u8> {
        let mut p = vec![0xc0, 0, 0, 0, 1, 9, id];
        p.extend_from_slice(&[0xbb; 40]);
        p
    }

    /// Which of `group` got `packet`, sent from a socket of its own (a
    /// new source port each time: what a rebinding NAT does).
    fn receiver(group: &[UdpSocket], packet: &[u8]) -> usize {
        let to = group[0].local_addr().unwrap();
        let from = if to.is_ipv6() {
            "[::1]:0"
        } else {
            "127.0.0.1:0"
        };
        let client = UdpSocket::bind(from).unwrap();
        client.send_to(packet, to).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut buf = [0u8; 128];
        loop {
            for (i, s) in group.iter().enumerate() {
                if let Ok((n, _)) = s.recv_from(&mut buf) {
                    assert_eq!(&buf[..n], packet);
                    return i;
                }
            }
            assert!(std::time::Instant::now() < deadline, "no socket got it");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn the_kernel_hands_each_packet_to_the_thread_its_connection_id_names() {
        let first = bind_first("127.0.0.1:0".parse().unwrap()).unwrap();
        let group = per_thread(first, 4).unwrap();
        for s in &group {
            s.set_nonblocking(true).unwrap();
        }
        for round in 0..8u8 {
            for thread in 0..4u8 {
                assert_eq!(receiver(&group, &short(thread)), usize::from(thread));
                assert_eq!(receiver(&group, &long(thread)), usize::from(thread));
                // An ID another thread count would give: modulo the group.
                assert_eq!(
                    receiver(&group, &short(thread + 4 * (round + 1))),
                    usize::from(thread)
                );
            }
        }
    }

    #[test]
    fn the_steering_reads_the_same_bytes_over_ipv6() {
        // The program sees the UDP payload, whatever the IP version.
        let Ok(first) = bind_first("[::1]:0".parse().unwrap()) else {
            return; // no IPv6 loopback here
        };
        let group = per_thread(first, 3).unwrap();
        for s in &group {
            s.set_nonblocking(true).unwrap();
        }
        for thread in 0..3u8 {
            assert_eq!(receiver(&group, &short(thread)), usize::from(thread));
            assert_eq!(receiver(&group, &long(thread + 3)), usize::from(thread));
        }
    }

    #[test]
    fn another_process_on_the_udp_port_keeps_the_group_out() {
        let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
        let err = bind_first(taken.local_addr().unwrap()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    }
}
