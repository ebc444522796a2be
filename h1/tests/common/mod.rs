//! Test harness: a tiny recording backend, the engine on a real listener,
//! and a raw-bytes client. Nothing here asserts on wall-clock time; the
//! timeouts only keep a broken build from hanging.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use teapot_h1::{
    ConnInfo, Decision, Engine, EngineConfig, Forward, Observer, Outcome, RequestHead, RequestLog,
    Respond,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

pub const GUARD: Duration = Duration::from_secs(20);

/// Awaits `f`, failing the test (instead of hanging) if it never ends.
pub async fn guard<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(GUARD, f)
        .await
        .expect("test step hung")
}

/// One request as the backend received it.
#[derive(Clone, Debug)]
pub struct Got {
    pub conn: usize,
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// What the backend does after reading a request.
pub enum Reply {
    /// Write these bytes and keep reading requests.
    Bytes(Vec<u8>),
    /// Write these bytes and close.
    Close(Vec<u8>),
    /// Close without answering.
    Hangup,
}

pub type Handler = Arc<dyn Fn(&Got, usize) -> Reply + Send + Sync>;

#[derive(Clone, Default)]
pub struct Record {
    pub requests: Arc<Mutex<Vec<Got>>>,
    /// Every byte each backend connection received, in order.
    pub raw: Arc<Mutex<Vec<Vec<u8>>>>,
    pub conns: Arc<Mutex<usize>>,
}

impl Record {
    pub fn requests(&self) -> Vec<Got> {
        self.requests.lock().unwrap().clone()
    }
    pub fn conns(&self) -> usize {
        *self.conns.lock().unwrap()
    }
}

/// A keep-alive backend that parses requests strictly (Content-Length or
/// chunked) and answers with `handler(request, index on its connection)`.
pub async fn backend(handler: Handler) -> (SocketAddr, Record) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let rec = Record::default();
    let r2 = rec.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let conn = {
                let mut c = r2.conns.lock().unwrap();
                *c += 1;
                *c - 1
            };
            r2.raw.lock().unwrap().push(Vec::new());
            let (rec, handler) = (r2.clone(), handler.clone());
            tokio::spawn(async move { serve_backend(s, conn, rec, handler).await });
        }
    });
    (addr, rec)
}

async fn serve_backend(mut s: TcpStream, conn: usize, rec: Record, handler: Handler) {
    let mut buf = Vec::new();
    let mut index = 0;
    loop {
        let Some(got) = read_request(&mut s, &mut buf, conn, &rec).await else {
            return;
        };
        rec.requests.lock().unwrap().push(got.clone());
        match handler(&got, index) {
            Reply::Bytes(b) => {
                if s.write_all(&b).await.is_err() {
                    return;
                }
            }
            Reply::Close(b) => {
                let _ = s.write_all(&b).await;
                return;
            }
            Reply::Hangup => return,
        }
        index += 1;
    }
}

async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>, conn: usize, rec: &Record) -> bool {
    let mut tmp = [0u8; 65536];
    match s.read(&mut tmp).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&tmp[..n]);
            rec.raw.lock().unwrap()[conn].extend_from_slice(&tmp[..n]);
            true
        }
    }
}

async fn read_request(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    conn: usize,
    rec: &Record,
) -> Option<Got> {
    loop {
        if let Some((got, used)) = parse_request(buf, conn) {
            buf.drain(..used);
            return Some(got);
        }
        if !fill(s, buf, conn, rec).await {
            return None;
        }
    }
}

/// Parses one complete request (head and body) from the front of `buf`.
/// Strict: a framing the test does not expect panics.
pub fn parse_request(buf: &[u8], conn: usize) -> Option<(Got, usize)> {
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut slots);
    let httparse::Status::Complete(head) = req.parse(buf).expect("backend got a bad head") else {
        return None;
    };
    let headers: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let find = |n: &str| {
        headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
            .collect::<Vec<_>>()
    };
    let cl = find("content-length");
    let te = find("transfer-encoding");
    assert!(cl.len() <= 1 && te.len() <= 1 && (cl.is_empty() || te.is_empty()));
    let (body, used) = if let Some(te) = te.first() {
        assert_eq!(te, "chunked");
        decode_chunked(&buf[head..]).map(|(b, n)| (b, head + n))?
    } else if let Some(cl) = cl.first() {
        let n: usize = cl.parse().unwrap();
        if buf.len() < head + n {
            return None;
        }
        (buf[head..head + n].to_vec(), head + n)
    } else {
        (Vec::new(), head)
    };
    Some((
        Got {
            conn,
            method: req.method.unwrap().to_string(),
            path: req.path.unwrap().to_string(),
            headers,
            body,
        },
        used,
    ))
}

/// Strict chunked decoding: `(payload, bytes used)` once complete.
pub fn decode_chunked(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        let line_end = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
        let line = std::str::from_utf8(&buf[pos..line_end]).unwrap();
        let size = usize::from_str_radix(line.split(';').next().unwrap(), 16).unwrap();
        pos = line_end + 2;
        if size == 0 {
            // Trailers until the blank line.
            loop {
                let end = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
                let empty = end == pos;
                pos = end + 2;
                if empty {
                    return Some((out, pos));
                }
            }
        }
        if buf.len() < pos + size + 2 {
            return None;
        }
        out.extend_from_slice(&buf[pos..pos + size]);
        assert_eq!(&buf[pos + size..pos + size + 2], b"\r\n");
        pos += size + 2;
    }
}

/// What the observer saw, owned.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub status: u16,
    pub outcome: Outcome,
    pub client_abort: bool,
    pub reused: bool,
    pub retried: bool,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

pub struct Obs(pub mpsc::UnboundedSender<Seen>);

impl Observer for Obs {
    fn on_request(&self, log: &RequestLog<'_>) {
        let _ = self.0.send(Seen {
            method: log.method.to_string(),
            path: log.path.to_string(),
            status: log.status,
            outcome: log.outcome,
            client_abort: log.client_abort,
            reused: log.reused,
            retried: log.retried,
            bytes_in: log.bytes_in,
            bytes_out: log.bytes_out,
        });
    }
}

pub type TestRouter = Box<dyn Fn(&RequestHead<'_>, &ConnInfo) -> Decision + Send + Sync>;

pub struct Proxy {
    pub addr: SocketAddr,
    pub engine: Arc<Engine<TestRouter, Obs>>,
    pub shutdown: watch::Sender<bool>,
    pub seen: mpsc::UnboundedReceiver<Seen>,
}

impl Proxy {
    pub async fn next_seen(&mut self) -> Seen {
        guard(self.seen.recv()).await.unwrap()
    }
}

/// A router that forwards everything to `upstream`, adding
/// `x-forwarded-for`.
pub fn to(upstream: SocketAddr) -> TestRouter {
    Box::new(move |_, conn| {
        let mut f = Forward::to(vec![upstream]);
        let ip = conn.client.map(|c| c.ip().to_string()).unwrap_or_default();
        f.request_edits = f
            .request_edits
            .append(Bytes::from_static(b"x-forwarded-for"), ip);
        Decision::forward(f)
    })
}

pub fn local(status: u16, body: &'static str) -> Decision {
    Decision::Respond(Respond::new(status, "test", body))
}

pub async fn proxy(router: TestRouter, config: EngineConfig) -> Proxy {
    let (tx, rx) = mpsc::unbounded_channel();
    let engine = Arc::new(Engine::new(router, Obs(tx), config));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (shutdown, watch_rx) = watch::channel(false);
    let e2 = engine.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, peer)) = l.accept().await else {
                return;
            };
            let (e, w) = (e2.clone(), watch_rx.clone());
            tokio::spawn(async move {
                let info = ConnInfo {
                    client: Some(peer),
                    ..ConnInfo::default()
                };
                // As teapot's accept loop hands connections over: not in
                // the event loop until one has to wait.
                let s = teapot_h1::ClientTcp::new(s.into_std().unwrap());
                e.serve(s, info, w).await;
            });
        }
    });
    Proxy {
        addr,
        engine,
        shutdown,
        seen: rx,
    }
}

/// A response as the client read it.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn closes(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A raw client with its own read buffer.
pub struct Client {
    pub s: TcpStream,
    pub buf: Vec<u8>,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        Client {
            s: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.s.write_all(bytes.as_ref()).await.unwrap();
    }

    async fn more(&mut self) -> bool {
        let mut tmp = vec![0u8; 65536];
        match guard(self.s.read(&mut tmp)).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                true
            }
        }
    }

    /// Reads one response; `head_request` means no body whatever the head says.
    pub async fn response(&mut self, head_request: bool) -> Resp {
        loop {
            let mut slots = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Response::new(&mut slots);
            if let httparse::Status::Complete(n) = r.parse(&self.buf).expect("bad response head") {
                let status = r.code.unwrap();
                let headers: Vec<(String, String)> = r
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                self.buf.drain(..n);
                let resp = Resp {
                    status,
                    headers,
                    body: Vec::new(),
                };
                return self.body(resp, head_request).await;
            }
            assert!(self.more().await, "closed before a response head");
        }
    }

    async fn body(&mut self, mut resp: Resp, head_request: bool) -> Resp {
        if head_request || resp.status < 200 || resp.status == 204 || resp.status == 304 {
            return resp;
        }
        if resp.header("transfer-encoding").is_some() {
            loop {
                if let Some((b, n)) = decode_chunked(&self.buf) {
                    self.buf.drain(..n);
                    resp.body = b;
                    return resp;
                }
                assert!(self.more().await, "closed inside a chunked body");
            }
        }
        if let Some(cl) = resp.header("content-length") {
            let n: usize = cl.parse().unwrap();
            while self.buf.len() < n {
                assert!(self.more().await, "closed inside a body");
            }
            resp.body = self.buf.drain(..n).collect();
            return resp;
        }
        while self.more().await {}
        resp.body = std::mem::take(&mut self.buf);
        resp
    }

    /// True once the proxy closed the connection (after anything buffered).
    pub async fn closed(&mut self) -> bool {
        let mut tmp = [0u8; 1024];
        loop {
            match guard(self.s.read(&mut tmp)).await {
                Ok(0) | Err(_) => return true,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
            }
        }
    }
}

pub fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{}",
        body.len(),
        body
    )
    .into_bytes()
}

/// Deterministic bytes of every value, for byte-exact comparisons.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2654435761)
                .rotate_left(seed as u32 % 32) as u8
        })
        .collect()
}

pub async fn read_all<R: AsyncRead + Unpin>(r: &mut R) -> Vec<u8> {
    let mut v = Vec::new();
    let _ = guard(r.read_to_end(&mut v)).await;
    v
}
