//! `dns.Exchange` cases (UDPRoute) and the DNS server the harness runs for
//! upstream's CoreDNS Deployment.
//!
//! The client is `github.com/miekg/dns`'s `Exchange` as the test calls it:
//! one query of the case's question over UDP (recursion desired, as
//! `SetQuestion` sets it), two seconds for the answer (the package's
//! default), which must be a response to it (same ID, the response bit)
//! that unpacks; like the test, nothing else of the answer is judged.
//!
//! The server plays the base manifests' `coredns` Deployment, whose
//! Corefile serves `foo.bar.com` with the `whoami` plugin and forwards the
//! rest to public resolvers. With no network to forward to, every question
//! is answered as `whoami` answers: authoritative, the client's address as
//! an A (or AAAA) record of the name asked, and its port as an SRV record
//! of `_udp.<name>` in the additional section.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

use super::CaseContext;
use crate::gateway::data::Case;

/// miekg/dns's default read timeout for `Exchange`.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(2);
/// The workload mode `manifests` gives a Deployment of CoreDNS's image.
pub const COREDNS_MODE: &str = "COREDNS";

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_SRV: u16 = 33;
const CLASS_IN: u16 = 1;

impl CaseContext<'_> {
    pub(super) async fn run_dns(&self, case: &Case, needed: Option<usize>) -> Result<(), String> {
        let question = case
            .arguments
            .get("question")
            .ok_or("the DNS case has no question")?;
        let text = |key: &str| {
            question
                .get(key)
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| format!("the question's {key} is not text: {question}"))
        };
        let name = text("Name")?;
        let qtype = type_code(text("Type")?)?;
        let addr = self.l4_address(case)?;
        self.polled(needed, move || exchange(addr, name, qtype))
            .await
    }
}

/// The number of a question type the tests name (`dns.TypeA` → `A`).
fn type_code(name: &str) -> Result<u16, String> {
    Ok(match name {
        "A" => TYPE_A,
        "NS" => 2,
        "CNAME" => 5,
        "SOA" => 6,
        "PTR" => 12,
        "MX" => 15,
        "TXT" => 16,
        "AAAA" => TYPE_AAAA,
        "SRV" => TYPE_SRV,
        "ANY" => 255,
        other => {
            return Err(format!(
                "DNS type {other:?} is not supported by this runner"
            ));
        }
    })
}

/// One query, its answer awaited and checked as `Exchange` checks it.
async fn exchange(addr: SocketAddr, name: &str, qtype: u16) -> Result<(), String> {
    let id = rand::random::<u16>();
    let query = query(id, name, qtype)?;
    let attempt = async {
        let local = if addr.is_ipv4() {
            "127.0.0.1:0"
        } else {
            "[::1]:0"
        };
        let socket = UdpSocket::bind(local)
            .await
            .map_err(|e| format!("failed to perform a UDP query: {e}"))?;
        socket
            .connect(addr)
            .await
            .map_err(|e| format!("failed to perform a UDP query: {e}"))?;
        socket
            .send(&query)
            .await
            .map_err(|e| format!("failed to perform a UDP query: {e}"))?;
        let mut buffer = vec![0u8; 65_535];
        loop {
            let n = socket
                .recv(&mut buffer)
                .await
                .map_err(|e| format!("failed to perform a UDP query: {e}"))?;
            let message = Message::parse(&buffer[..n])
                .map_err(|e| format!("failed to perform a UDP query: bad answer: {e}"))?;
            // miekg/dns skips answers of another ID and keeps waiting.
            if message.id == id && message.response {
                return Ok(());
            }
        }
    };
    tokio::time::timeout(EXCHANGE_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "failed to perform a UDP query: no answer from {addr} within {EXCHANGE_TIMEOUT:?}"
            ))
        })
}

/// A query as `SetQuestion` makes it: one question, class IN, recursion
/// desired.
fn query(id: u16, name: &str, qtype: u16) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(32 + name.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&0x0100u16.to_be_bytes());
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    encode_name(&mut out, name)?;
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(out)
}

fn encode_name(out: &mut Vec<u8>, name: &str) -> Result<(), String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if !name.is_empty() {
        for label in name.split('.') {
            let len = u8::try_from(label.len())
                .ok()
                .filter(|n| (1..=63).contains(n))
                .ok_or_else(|| format!("DNS name {name:?} has a label of {} bytes", label.len()))?;
            out.push(len);
            out.extend_from_slice(label.as_bytes());
        }
    }
    out.push(0);
    Ok(())
}

/// What the runner reads of a DNS message: its header, and its question
/// (name in wire form, type, class); every section must unpack.
#[derive(Debug)]
struct Message {
    id: u16,
    response: bool,
    recursion_desired: bool,
    question: Option<(Vec<u8>, u16, u16)>,
}

impl Message {
    fn parse(wire: &[u8]) -> Result<Message, String> {
        let word = |at: usize| -> Result<u16, String> {
            wire.get(at..at + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                .ok_or_else(|| "a message cut short".to_string())
        };
        let id = word(0)?;
        let flags = word(2)?;
        let counts = [word(4)?, word(6)?, word(8)?, word(10)?];
        let mut at = 12;
        let mut question = None;
        for _ in 0..counts[0] {
            let start = at;
            at = skip_name(wire, at)?;
            let (qtype, class) = (word(at)?, word(at + 2)?);
            question.get_or_insert((wire[start..at].to_vec(), qtype, class));
            at += 4;
        }
        for _ in 0..u32::from(counts[1]) + u32::from(counts[2]) + u32::from(counts[3]) {
            at = skip_name(wire, at)?;
            let len = usize::from(word(at + 8)?);
            at += 10 + len;
            if at > wire.len() {
                return Err("a record cut short".into());
            }
        }
        Ok(Message {
            id,
            response: flags & 0x8000 != 0,
            recursion_desired: flags & 0x0100 != 0,
            question,
        })
    }
}

/// The index after a (possibly compressed) name at `at`.
fn skip_name(wire: &[u8], mut at: usize) -> Result<usize, String> {
    loop {
        let len = *wire.get(at).ok_or("a name cut short")?;
        match len {
            0 => return Ok(at + 1),
            0xc0.. => {
                wire.get(at + 1).ok_or("a name pointer cut short")?;
                return Ok(at + 2);
            }
            64..=0xbf => return Err(format!("a label of kind {len:#x}")),
            n => at += 1 + usize::from(n),
        }
    }
}

/// CoreDNS in the harness: a UDP server answering as `whoami`.
pub struct DnsEcho {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for DnsEcho {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DnsEcho {
    /// Answers on `ip` (the pod's address) at a port of the kernel's choice.
    pub async fn start(ip: std::net::IpAddr) -> std::io::Result<DnsEcho> {
        let socket = UdpSocket::bind((ip, 0)).await?;
        let addr = socket.local_addr()?;
        let task = tokio::spawn(async move {
            let mut buffer = vec![0u8; 4096];
            loop {
                let Ok((n, peer)) = socket.recv_from(&mut buffer).await else {
                    continue;
                };
                // A datagram that is no query gets no answer, as CoreDNS
                // drops what it cannot unpack.
                if let Some(answer) = whoami(&buffer[..n], peer) {
                    let _ = socket.send_to(&answer, peer).await;
                }
            }
        });
        Ok(DnsEcho { addr, task })
    }
}

/// The `whoami` plugin's answer to a query from `peer`, or None for a
/// datagram that is no query with a question.
fn whoami(query: &[u8], peer: SocketAddr) -> Option<Vec<u8>> {
    let message = Message::parse(query).ok()?;
    let (name, qtype, class) = message.question.filter(|_| !message.response)?;
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(&message.id.to_be_bytes());
    // Response, authoritative, recursion desired as asked, NOERROR.
    let flags = 0x8400 | if message.recursion_desired { 0x0100 } else { 0 };
    out.extend_from_slice(&u16::to_be_bytes(flags));
    out.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 1]);
    out.extend_from_slice(&name);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&class.to_be_bytes());
    // The answer: the client's address, under the name asked (a pointer to
    // the question's name at offset 12).
    let (rtype, rdata) = match peer.ip() {
        IpAddr::V4(ip) => (TYPE_A, ip.octets().to_vec()),
        IpAddr::V6(ip) => (TYPE_AAAA, ip.octets().to_vec()),
    };
    record(&mut out, &[0xc0, 12], rtype, &rdata);
    // Additional: `_udp.<name>` SRV with the client's port and target `.`.
    let mut srv_name = vec![4];
    srv_name.extend_from_slice(b"_udp");
    srv_name.extend_from_slice(&[0xc0, 12]);
    let mut srv = vec![0, 0, 0, 0];
    srv.extend_from_slice(&peer.port().to_be_bytes());
    srv.push(0);
    record(&mut out, &srv_name, TYPE_SRV, &srv);
    Some(out)
}

fn record(out: &mut Vec<u8>, name: &[u8], rtype: u16, rdata: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(&rtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    // TTL 0, as whoami answers.
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&u16::try_from(rdata.len()).unwrap_or(0).to_be_bytes());
    out.extend_from_slice(rdata);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_what_set_question_makes() {
        let q = query(0x1234, "foo.bar.com.", TYPE_A).unwrap();
        assert_eq!(&q[..4], &[0x12, 0x34, 0x01, 0x00]);
        assert_eq!(&q[12..25], b"\x03foo\x03bar\x03com\x00");
        let parsed = Message::parse(&q).unwrap();
        assert!(!parsed.response && parsed.recursion_desired);
        assert_eq!(parsed.question.unwrap().1, TYPE_A);
        assert!(query(1, &format!("{}.com", "a".repeat(64)), TYPE_A).is_err());
        assert_eq!(type_code("AAAA"), Ok(TYPE_AAAA));
        assert!(type_code("NAPTR").is_err());
    }

    #[test]
    fn whoami_answers_with_the_client_address_and_port() {
        let q = query(7, "foo.bar.com.", TYPE_A).unwrap();
        let peer: SocketAddr = "127.0.0.9:4242".parse().unwrap();
        let answer = whoami(&q, peer).unwrap();
        let parsed = Message::parse(&answer).unwrap();
        assert!(parsed.response);
        assert_eq!(parsed.id, 7);
        // The A record's data, then the SRV's port, at the end.
        let srv = 7 + 10 + 7;
        let a = answer.len() - srv - 4;
        assert_eq!(&answer[a..a + 4], &[127, 0, 0, 9]);
        assert_eq!(
            &answer[answer.len() - 3..answer.len() - 1],
            &4242u16.to_be_bytes()
        );
        // An answer is not answered again; garbage is not answered.
        assert!(whoami(&answer, peer).is_none());
        assert!(whoami(b"\x00\x01", peer).is_none());
    }

    #[tokio::test]
    async fn an_exchange_with_the_server_passes_and_silence_fails() {
        let server = DnsEcho::start(std::net::Ipv4Addr::LOCALHOST.into())
            .await
            .unwrap();
        assert_eq!(exchange(server.addr, "foo.bar.com.", TYPE_A).await, Ok(()));
        let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let err = exchange(silent.local_addr().unwrap(), "foo.bar.com.", TYPE_A)
            .await
            .unwrap_err();
        assert!(err.contains("no answer"), "{err}");
    }
}
