//! TLS passthrough on the shared HTTPS listener (ingress-nginx
//! `ssl-passthrough`): a connection whose ClientHello names a
//! passed-through host (crate::compile::passthrough) is not terminated;
//! the ClientHello and everything after it are relayed as TCP to the
//! host's backend by the L4 plane's loops (crate::plane::l4::tcp). Every
//! other connection is terminated as before, the bytes read to decide put
//! back in front of its handshake.
//!
//! The listener calls [`Passthrough`] before each handshake
//! (`PreTlsProcess`, vendor/pingora-core). Every connection takes its slot
//! under the edge's connection caps (total, per client address, pace)
//! there, at accept, and keeps it in its stream for its whole life,
//! terminated or passed through; one refused is closed at once. From
//! accept to the end of its handshake (or of its ClientHello's read) it has
//! the header-read deadline, the bound an HTTP/1 head gets. While no host is
//! passed through nothing is read: the handshake starts at once. Otherwise
//! at most [`MAX_READ`] bytes are read; a passed-through connection also
//! keeps one of its tenant's connection slots (`spec.limits.maxConnections`,
//! as an upgraded WebSocket does) for its whole life.
//!
//! The HTTPS sockets of Gateways with their own address
//! (crate::plane::serving::OwnListeners) meet the same hook
//! ([`Passthrough::admission_only`]): the same slots under the same caps
//! at accept and the same deadline. They serve no Ingress host, so they
//! pass nothing through and read nothing before the handshake.

use std::net::IpAddr;
use std::os::fd::AsFd;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use pingora_core::listeners::PreTlsProcess;
use pingora_core::protocols::GetSocketDigest;
use pingora_core::protocols::l4::stream::Stream as L4Stream;
use tokio::io::AsyncReadExt;

use crate::compile::snapshot::SnapshotHandle;
use crate::plane::accept::Slots;
use crate::plane::edge::Refusal;
use crate::plane::l4::sni::{Hello, MAX_READ, server_name};
use crate::plane::l4::tcp::{Adopted, Adopter};

/// What the shared HTTPS listener asks before each handshake.
pub struct Passthrough {
    snapshots: SnapshotHandle,
    slots: Slots,
    /// The L4 plane's loops, set once they run (they start after the
    /// serving threads); until then every connection is terminated.
    adopter: Arc<OnceLock<Adopter>>,
    /// Whether this socket passes hosts through: the shared one only.
    relays: bool,
}

impl std::fmt::Debug for Passthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passthrough").finish_non_exhaustive()
    }
}

/// What a connection's first bytes decided.
#[derive(Debug, PartialEq, Eq)]
enum Read {
    /// A whole ClientHello, and the server name it carries.
    Hello(Option<String>),
    /// Not a ClientHello teapot can read within the bound: the handshake
    /// answers it, as without passthrough.
    NotHello,
}

impl Passthrough {
    pub fn new(snapshots: SnapshotHandle, slots: Slots, adopter: Arc<OnceLock<Adopter>>) -> Self {
        Passthrough {
            snapshots,
            slots,
            adopter,
            relays: true,
        }
    }

    /// The hook of a Gateway's own-address HTTPS sockets: admission at
    /// accept under the same caps (the same table) and the same handshake
    /// deadline; never a look at the ClientHello, since no Ingress host,
    /// and so no passed-through one, is served there.
    pub fn admission_only(&self) -> Passthrough {
        Passthrough {
            snapshots: self.snapshots.clone(),
            slots: self.slots.clone(),
            adopter: self.adopter.clone(),
            relays: false,
        }
    }

    /// Reads until the first bytes decide; they stay in `bytes`.
    async fn read_hello(stream: &mut L4Stream, bytes: &mut Vec<u8>) -> std::io::Result<Read> {
        let mut buf = [0u8; 2048];
        loop {
            match server_name(bytes) {
                Hello::Complete(name) => return Ok(Read::Hello(name)),
                Hello::Invalid(_) => return Ok(Read::NotHello),
                Hello::Incomplete if bytes.len() >= MAX_READ => return Ok(Read::NotHello),
                Hello::Incomplete => {}
            }
            let room = (MAX_READ - bytes.len()).min(buf.len());
            let n = stream.read(&mut buf[..room]).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            bytes.extend_from_slice(&buf[..n]);
        }
    }

    /// Relays the connection to `host`'s backend through `adopter`, or
    /// closes it at a cap.
    fn pass(
        &self,
        mut stream: L4Stream,
        host: &crate::compile::passthrough::PassHost,
        bytes: Vec<u8>,
        adopter: &Adopter,
    ) {
        let Some(peer) = stream
            .get_socket_digest()
            .and_then(|d| crate::plane::socket_group::inet(d.peer_addr()))
        else {
            return;
        };
        // The slot taken at accept goes on with the socket.
        let slot = stream.held.take();
        let permit = match host.tenant.as_ref().map(|gate| gate.enter()).transpose() {
            Ok(permit) => permit,
            Err(over) => {
                self.slots.metrics().refused(Refusal::from(over));
                tracing::debug!(ingress = %host.ingress, client = %peer,
                    "TLS passthrough: the tenant's connections are at their cap; closed");
                return;
            }
        };
        // The connection goes on in the socket itself; Pingora's stream
        // (its descriptor, nothing buffered: the listener reads unbuffered)
        // closes without touching it.
        let socket = match stream.as_fd().try_clone_to_owned() {
            Ok(fd) => std::net::TcpStream::from(fd),
            Err(e) => {
                tracing::warn!(error = %e, "TLS passthrough: the socket could not be taken; closed");
                return;
            }
        };
        drop(stream);
        adopter.adopt(Adopted {
            socket,
            peer,
            route: adopter.route(host.service.clone(), host.upstream.clone()),
            hello: bytes,
            held: Box::new((slot, permit)),
        });
    }
}

fn client_ip(stream: &L4Stream) -> Option<IpAddr> {
    stream
        .get_socket_digest()
        .and_then(|d| crate::plane::socket_group::inet(d.peer_addr()))
        .map(|a| a.ip())
}

#[async_trait]
impl PreTlsProcess for Passthrough {
    async fn process(&self, _stream: &mut L4Stream) -> pingora_core::Result<()> {
        Ok(())
    }

    /// Only while some host is passed through, and only on the shared
    /// socket: otherwise the handshake starts at once, nothing read.
    fn wants(&self) -> bool {
        self.relays && !self.snapshots.load().passthrough.is_empty()
    }

    /// Every connection, terminated or passed through, takes its slot
    /// here, before anything is read, and keeps it in its stream (the
    /// application finds it counted; crate::plane::accept). Refused at a
    /// cap: closed at once, as the edge closes any connection it has no
    /// slot for.
    fn admit(&self, stream: &mut L4Stream) -> bool {
        match self.slots.admit(client_ip(stream)) {
            Some(slot) => {
                stream.held = Some(Box::new(slot));
                true
            }
            None => false,
        }
    }

    /// The ClientHello's read, when there is one, and the handshake end
    /// by the header-read deadline from accept.
    fn handshake_timeout(&self) -> Option<std::time::Duration> {
        Some(self.slots.header_read_timeout())
    }

    fn timed_out(&self) {
        self.slots.metrics().refused(Refusal::HeaderTimeout);
    }

    async fn take(&self, mut stream: L4Stream) -> Option<L4Stream> {
        // Within the handshake's deadline (`handshake_timeout`), which
        // counts a slow ClientHello.
        let mut bytes = Vec::new();
        let name = match Self::read_hello(&mut stream, &mut bytes).await {
            Ok(Read::Hello(name)) => name,
            Ok(Read::NotHello) => None,
            Err(_) => return None,
        };
        let snapshot = self.snapshots.load();
        // Before the L4 loops run (the first moments of a start) every
        // connection is terminated.
        if let Some(adopter) = self.adopter.get()
            && let Some(host) = name.as_deref().and_then(|n| snapshot.passthrough.lookup(n))
        {
            let host = host.clone();
            drop(snapshot);
            self.pass(stream, &host, bytes, adopter);
            return None;
        }
        // Terminated as before: the handshake reads the bytes again.
        stream.rewind(&bytes);
        Some(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello naming `name` (rustls's own), as a client sends it.
    fn client_hello(name: &str) -> Vec<u8> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let mut conn = rustls::ClientConnection::new(
            Arc::new(config),
            rustls::pki_types::ServerName::try_from(name.to_string()).unwrap(),
        )
        .unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    async fn pair() -> (tokio::net::TcpStream, L4Stream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        // With its socket digest, as the listener's accept gives it: the
        // client's address is read from there.
        let mut server = L4Stream::from(server);
        let digest = pingora_core::protocols::SocketDigest::from_raw_fd(
            std::os::fd::AsRawFd::as_raw_fd(&server),
        );
        server.set_socket_digest(digest);
        (client, server)
    }

    /// The shared HTTPS listener's hook over an edge application with
    /// `config`, and the snapshots it reads.
    fn hook(config: crate::plane::edge::EdgeConfig) -> (SnapshotHandle, Passthrough) {
        use crate::compile::snapshot::Snapshot;
        use crate::plane::accept::EdgeApp;
        use crate::plane::metrics::Metrics;
        use crate::plane::proxy::Router;

        let snapshots = Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot::default()));
        let router = Router::new(
            snapshots.clone(),
            Metrics::new().unwrap(),
            Default::default(),
        );
        let app = EdgeApp::new(
            crate::plane::h2::H2Server::new(router.clone()),
            crate::plane::h1::engine(router, 8),
            config,
            Metrics::new().unwrap(),
            false,
        );
        let pass = Passthrough::new(snapshots.clone(), app.slots(), Arc::default());
        (snapshots, pass)
    }

    /// The listener reads nothing before a handshake while no host is
    /// passed through, and starts to as soon as one is (the next
    /// snapshot), and stops once none is again. A Gateway's own-address
    /// sockets never read before the handshake.
    #[test]
    fn connections_are_looked_at_only_while_a_host_is_passed_through() {
        use crate::compile::CompileOptions;
        use crate::compile::tests::compile_test_docs;

        let (snapshots, pass) = hook(Default::default());
        assert!(!pass.wants(), "the empty table");
        let ingress = |annotation: &str| {
            format!(
                "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: p\n  namespace: ops\n  annotations: {{{annotation}}}\nspec:\n  ingressClassName: teapot\n  rules:\n  - host: pass.example\n    http:\n      paths:\n      - {{path: /, pathType: Prefix, backend: {{service: {{name: app, port: {{number: 443}}}}}}}}\n"
            )
        };
        let passing = format!("{}: \"true\"", crate::compile::passthrough::ANNOTATION);
        snapshots.store(Arc::new(compile_test_docs(
            &[ingress(&passing)],
            &CompileOptions::default(),
        )));
        assert!(pass.wants());
        assert!(
            !pass.admission_only().wants(),
            "a Gateway's own address serves no Ingress host"
        );
        snapshots.store(Arc::new(compile_test_docs(
            &[ingress("")],
            &CompileOptions::default(),
        )));
        assert!(!pass.wants());
    }

    /// A Gateway's own-address sockets take their slots at accept in the
    /// shared socket's table, with its deadline: one client's connections
    /// count once across both, and a slot freed on one is free on the
    /// other.
    #[tokio::test]
    async fn own_address_sockets_admit_under_the_shared_caps() {
        let (_snapshots, shared) = hook(crate::plane::edge::EdgeConfig {
            max_connections_per_client: 2,
            header_read_timeout: std::time::Duration::from_secs(3),
            ..Default::default()
        });
        let own = shared.admission_only();
        let (_c1, mut first) = pair().await;
        let (_c2, mut second) = pair().await;
        let (_c3, mut third) = pair().await;
        assert!(shared.admit(&mut first));
        assert!(own.admit(&mut second));
        assert!(second.held.is_some(), "the slot rides in the stream");
        assert!(!own.admit(&mut third), "the client's third connection");
        drop(first);
        assert!(own.admit(&mut third), "the slot the shared socket freed");
        assert_eq!(
            own.handshake_timeout(),
            Some(std::time::Duration::from_secs(3))
        );
    }

    /// The read decides as soon as the ClientHello is whole, however it is
    /// split, and keeps every byte it read.
    #[tokio::test]
    async fn a_hello_in_pieces_is_read_whole() {
        use tokio::io::AsyncWriteExt;
        let hello = client_hello("pass.example");
        let (mut client, mut server) = pair().await;
        let sent = hello.clone();
        let writer = tokio::spawn(async move {
            for chunk in sent.chunks(7) {
                client.write_all(chunk).await.unwrap();
                tokio::task::yield_now().await;
            }
            client
        });
        let mut bytes = Vec::new();
        let read = Passthrough::read_hello(&mut server, &mut bytes)
            .await
            .unwrap();
        assert_eq!(read, Read::Hello(Some("pass.example".into())));
        assert_eq!(bytes, hello);
        drop(writer.await.unwrap());
    }

    /// Bytes that are not a ClientHello decide at once (the handshake
    /// answers them); an endless record stops at the read bound.
    #[tokio::test]
    async fn what_is_not_a_hello_is_handed_on_within_the_bound() {
        use tokio::io::AsyncWriteExt;
        let (mut client, mut server) = pair().await;
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut bytes = Vec::new();
        let read = Passthrough::read_hello(&mut server, &mut bytes)
            .await
            .unwrap();
        assert_eq!(read, Read::NotHello);

        let (mut client, mut server) = pair().await;
        // A handshake record announcing the largest length, then filler.
        let mut flood = vec![0x16, 0x03, 0x01, 0xff, 0xff, 0x01, 0x00, 0xff, 0xfb];
        flood.resize(MAX_READ * 2, 0);
        let writer = tokio::spawn(async move {
            let _ = client.write_all(&flood).await;
            client
        });
        let mut bytes = Vec::new();
        let read = Passthrough::read_hello(&mut server, &mut bytes)
            .await
            .unwrap();
        assert_eq!(read, Read::NotHello);
        assert!(bytes.len() <= MAX_READ, "{}", bytes.len());
        drop(server);
        drop(writer.await.unwrap());
    }
}
