//! TCP-MD5 signatures (RFC 2385) on a BGP session's socket: the password
//! a router's `neighbor X password` expects, set with `TCP_MD5SIG` before
//! the connection is made, so the SYN is signed too.
//!
//! Neither socket2 nor nix sets this option, so [`set_key`] makes the one
//! `setsockopt` call itself: the only unsafe code of the crate
//! (docs/decisions.md, "TCP-MD5 on BGP sessions"). Everything around it
//! (the key's length, the address bytes) is checked and built in safe
//! code here.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};

/// The longest key Linux accepts (`TCP_MD5SIG_MAXKEYLEN`).
pub const MAX_KEY_LEN: usize = 80;

/// A TCP-MD5 password. It is a secret: `Debug` shows only that one is set,
/// so a logged or printed peer configuration never carries it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key(Vec<u8>);

impl Key {
    /// `None` when the password is empty or longer than [`MAX_KEY_LEN`]
    /// bytes, which the kernel would refuse only when the session starts.
    pub fn new(password: Vec<u8>) -> Option<Key> {
        (!password.is_empty() && password.len() <= MAX_KEY_LEN).then_some(Key(password))
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(redacted)")
    }
}

/// `struct __kernel_sockaddr_storage`: 128 bytes, aligned like a pointer.
#[repr(C, align(8))]
struct AddrStorage([u8; 128]);

/// `struct tcp_md5sig` of `<linux/tcp.h>` (with `tcpm_flags` 0, the
/// layout older kernels know as two padding fields).
#[repr(C)]
struct TcpMd5Sig {
    addr: AddrStorage,
    flags: u8,
    prefix_len: u8,
    key_len: u16,
    ifindex: i32,
    key: [u8; MAX_KEY_LEN],
}

/// `peer` as the `sockaddr_in` / `sockaddr_in6` the kernel matches
/// segments against (port 0: the key holds for any port of the peer).
fn sockaddr(peer: IpAddr) -> AddrStorage {
    let mut bytes = [0u8; 128];
    match peer {
        IpAddr::V4(a) => {
            bytes[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            // sin_port stays 0; sin_addr follows it.
            bytes[4..8].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            bytes[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            // sin6_port and sin6_flowinfo stay 0; sin6_addr follows them,
            // sin6_scope_id (0) after it.
            bytes[8..24].copy_from_slice(&a.octets());
        }
    }
    AddrStorage(bytes)
}

/// Signs every segment `socket` exchanges with `peer` with `key`, and
/// makes the kernel drop the peer's segments that are not signed with it.
/// Call before `connect` (or `listen`): the SYN is signed too. `peer` must
/// be of the socket's address family.
#[allow(unsafe_code)]
pub fn set_key(socket: &impl AsFd, peer: IpAddr, key: &Key) -> io::Result<()> {
    let mut sig = TcpMd5Sig {
        addr: sockaddr(peer),
        flags: 0,
        prefix_len: 0,
        key_len: key.0.len() as u16,
        ifindex: 0,
        key: [0; MAX_KEY_LEN],
    };
    // Key::new bounds the length by MAX_KEY_LEN.
    sig.key[..key.0.len()].copy_from_slice(&key.0);
    let fd = socket.as_fd().as_raw_fd();
    // SAFETY: `fd` is an open socket borrowed for the duration of the call.
    // The option value points to a live, initialised `TcpMd5Sig` whose
    // `#[repr(C)]` layout is the kernel's `struct tcp_md5sig`, and the
    // length passed is exactly its size; the kernel only reads it, and
    // keeps nothing that points into it after returning.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_MD5SIG,
            (&raw const sig).cast::<libc::c_void>(),
            std::mem::size_of::<TcpMd5Sig>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

    #[test]
    fn the_option_has_the_kernels_layout() {
        // sizeof(struct tcp_md5sig) on Linux: 128 + 1 + 1 + 2 + 4 + 80.
        assert_eq!(std::mem::size_of::<TcpMd5Sig>(), 216);
        assert_eq!(std::mem::align_of::<AddrStorage>(), 8);
        assert_eq!(
            std::mem::size_of::<AddrStorage>(),
            std::mem::size_of::<libc::sockaddr_storage>()
        );
    }

    #[test]
    fn addresses_are_laid_out_as_sockaddr_in_and_in6() {
        let v4 = sockaddr(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
        assert_eq!(
            &v4.0[..8],
            &[
                (libc::AF_INET as u16).to_ne_bytes()[0],
                (libc::AF_INET as u16).to_ne_bytes()[1],
                0,
                0,
                192,
                0,
                2,
                1
            ]
        );
        assert!(v4.0[8..].iter().all(|b| *b == 0));
        let v6 = sockaddr(IpAddr::V6("2001:db8::1".parse::<Ipv6Addr>().unwrap()));
        assert_eq!(v6.0[..2], (libc::AF_INET6 as u16).to_ne_bytes());
        assert_eq!(v6.0[2..8], [0; 6]);
        assert_eq!(
            v6.0[8..24],
            "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets()
        );
        assert!(v6.0[24..].iter().all(|b| *b == 0));
    }

    #[test]
    fn keys_are_one_to_80_bytes_and_never_shown() {
        assert!(Key::new(Vec::new()).is_none());
        assert!(Key::new(vec![b'x'; MAX_KEY_LEN + 1]).is_none());
        let key = Key::new(b"s3cret".to_vec()).unwrap();
        assert!(!format!("{key:?}").contains("s3cret"));
        assert!(Key::new(vec![b'x'; MAX_KEY_LEN]).is_some());
    }

    /// Both ends keyed alike over loopback: the kernel takes the option
    /// for either family and the signed connection carries data.
    #[test]
    fn a_keyed_connection_carries_data_when_both_ends_share_the_key() {
        let key = Key::new(b"shared by both ends".to_vec()).unwrap();
        for local in [
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        ] {
            let domain = socket2::Domain::for_address(SocketAddr::new(local, 0));
            let listener = socket2::Socket::new(domain, socket2::Type::STREAM, None).unwrap();
            set_key(&listener, local, &key).unwrap();
            listener.bind(&SocketAddr::new(local, 0).into()).unwrap();
            listener.listen(1).unwrap();
            let target = listener.local_addr().unwrap();

            let client = socket2::Socket::new(domain, socket2::Type::STREAM, None).unwrap();
            set_key(&client, local, &key).unwrap();
            client.connect(&target).unwrap();
            let mut client = std::net::TcpStream::from(client);
            client.write_all(b"OPEN").unwrap();
            let (accepted, _) = listener.accept().unwrap();
            let mut accepted = std::net::TcpStream::from(accepted);
            let mut got = [0u8; 4];
            accepted.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"OPEN");
        }
    }

    /// `TcpExt` counter `name` of this network namespace.
    fn tcp_ext(name: &str) -> u64 {
        let text = std::fs::read_to_string("/proc/net/netstat").unwrap();
        let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
        let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
        let at = names.split_whitespace().position(|n| n == name).unwrap();
        values.split_whitespace().nth(at).unwrap().parse().unwrap()
    }

    /// The other end's kernel checks the signature: a SYN signed with
    /// another key is counted as an MD5 failure and dropped unanswered, so
    /// nothing is ever accepted (the connecting side sees a timeout).
    #[test]
    fn a_syn_signed_with_another_key_is_dropped() {
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let listener =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        set_key(
            &listener,
            local,
            &Key::new(b"the router's".to_vec()).unwrap(),
        )
        .unwrap();
        listener.bind(&SocketAddr::new(local, 0).into()).unwrap();
        listener.listen(1).unwrap();
        listener.set_nonblocking(true).unwrap();
        let failures = tcp_ext("TCPMD5Failure");

        let client =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        set_key(&client, local, &Key::new(b"another".to_vec()).unwrap()).unwrap();
        client.set_nonblocking(true).unwrap();
        let target = listener.local_addr().unwrap();
        let err = client.connect(&target).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINPROGRESS), "{err}");
        // A bound, not a measurement: the first SYN is dropped at once.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
        while tcp_ext("TCPMD5Failure") == failures {
            assert!(
                std::time::Instant::now() < deadline,
                "no MD5 failure counted"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let err = listener.accept().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock, "{err}");
    }

    #[test]
    fn a_key_for_the_other_family_is_refused_by_the_kernel() {
        let socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let key = Key::new(b"k".to_vec()).unwrap();
        let err = set_key(&socket, IpAddr::V6(Ipv6Addr::LOCALHOST), &key).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
    }
}
