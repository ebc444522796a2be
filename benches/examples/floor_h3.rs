//! The floor under any HTTP/3 server on quinn and h3: what the h3 crate's
//! own example server does (a quinn endpoint, h3 over it, a task per
//! connection and per request), on one current-thread runtime, with
//! quinn's and h3's defaults. No routing, no limits, no header edits, no
//! logs, no metrics: what is left of a request's cost is QUIC, TLS,
//! HTTP/3 framing, tokio and the kernel. `h3-report` runs it beside
//! teapot `--http3` and Caddy, so teapot's overhead over the stack it is
//! built on is read in the same run as Caddy's.
//!
//! `floor_h3 LISTEN CERT_PEM KEY_PEM --body FILE` answers every request
//! 200 with FILE's bytes (the example server's shape);
//! `floor_h3 LISTEN CERT_PEM KEY_PEM --upstream HOST:PORT` forwards each
//! GET over pooled HTTP/1.1 keep-alive connections to HOST:PORT and
//! answers with the upstream's status and body, the least a reverse
//! proxy does (Content-Length answers only; anything else is a 502).

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use memchr::memmem;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

enum Answer {
    Body(Bytes),
    Upstream(Arc<Pool>),
}

/// Idle upstream connections, reused most recent first.
struct Pool {
    addr: String,
    idle: Mutex<Vec<TcpStream>>,
}

fn usage() -> ! {
    eprintln!("usage: floor_h3 LISTEN CERT_PEM KEY_PEM (--body FILE | --upstream HOST:PORT)");
    std::process::exit(2);
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, cert, key, mode, what] = args.as_slice() else {
        usage();
    };
    let answer = match mode.as_str() {
        "--body" => Answer::Body(Bytes::from(std::fs::read(what)?)),
        "--upstream" => Answer::Upstream(Arc::new(Pool {
            addr: what.clone(),
            idle: Mutex::new(Vec::new()),
        })),
        _ => usage(),
    };
    let answer = Arc::new(answer);
    let listen: SocketAddr = listen.parse()?;
    let certs = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)?;
    let config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let endpoint = quinn::Endpoint::server(config, listen)?;
            while let Some(incoming) = endpoint.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    if let Ok(conn) = incoming.await {
                        let _ = connection(conn, answer).await;
                    }
                });
            }
            Ok(())
        })
}

async fn connection(conn: quinn::Connection, answer: Arc<Answer>) -> anyhow::Result<()> {
    let mut h3 = h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(conn)).await?;
    while let Some(resolver) = h3.accept().await? {
        let answer = answer.clone();
        tokio::spawn(async move {
            let Ok((request, mut stream)) = resolver.resolve_request().await else {
                return;
            };
            let (status, body) = match &*answer {
                Answer::Body(body) => (200, body.clone()),
                Answer::Upstream(pool) => {
                    let path = request
                        .uri()
                        .path_and_query()
                        .map_or("/", |p| p.as_str())
                        .to_string();
                    let host = request.uri().host().unwrap_or("localhost").to_string();
                    pool.get(&host, &path).await.unwrap_or((502, Bytes::new()))
                }
            };
            let response = http::Response::builder()
                .status(status)
                .header(http::header::CONTENT_LENGTH, body.len())
                .body(())
                .expect("a valid head");
            if stream.send_response(response).await.is_ok()
                && (body.is_empty() || stream.send_data(body).await.is_ok())
            {
                let _ = stream.finish().await;
            }
        });
    }
    Ok(())
}

impl Pool {
    /// One GET upstream; the connection goes back to the pool when its
    /// answer was read whole.
    async fn get(&self, host: &str, path: &str) -> io::Result<(u16, Bytes)> {
        let idle = self.idle.lock().expect("not poisoned").pop();
        let mut stream = match idle {
            Some(stream) => stream,
            None => {
                let stream = TcpStream::connect(&self.addr).await?;
                stream.set_nodelay(true)?;
                stream
            }
        };
        let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut buf = Vec::with_capacity(4096);
        loop {
            if let Some((status, end, length)) = head(&buf)?
                && buf.len() >= end + length
            {
                let body = Bytes::copy_from_slice(&buf[end..end + length]);
                self.idle.lock().expect("not poisoned").push(stream);
                return Ok((status, body));
            }
            buf.reserve(4096);
            if stream.read_buf(&mut buf).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
}

/// The status, end of the head and Content-Length of a response.
fn head(buf: &[u8]) -> io::Result<Option<(u16, usize, usize)>> {
    let Some(end) = memmem::find(buf, b"\r\n\r\n").map(|p| p + 4) else {
        return Ok(None);
    };
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut fields);
    response
        .parse(&buf[..end])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let status = response.code.unwrap_or(502);
    let length = response
        .headers
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case("content-length"))
        .and_then(|f| std::str::from_utf8(f.value).ok())
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no content-length"))?;
    Ok(Some((status, end, length)))
}
