//! The floor under any tokio HTTP/1.1 proxy: one current-thread runtime,
//! one upstream connection per client connection, buffers reused, heads
//! found with memchr and parsed with httparse, forwarded unchanged. No
//! routing, no header edits, no timeouts, no limits, no metrics: what is
//! left of a request's cost is tokio's I/O and the kernel's. Such a loop
//! was measured once on its own; `benches/h1-side-by-side.sh` runs this one
//! beside the proxies (`FLOOR=1`), so teapot's overhead over the floor is
//! read in the same run as HAProxy's and nginx's.
//!
//! `floor_h1 LISTEN UPSTREAM` (GET/HEAD-style keep-alive traffic with
//! Content-Length bodies; anything else closes the connection).

use std::io;

use memchr::memmem;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        eprintln!("usage: floor_h1 LISTEN UPSTREAM");
        std::process::exit(2);
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = TcpListener::bind(&listen).await?;
            loop {
                let (client, _) = listener.accept().await?;
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let _ = serve(client, &upstream).await;
                });
            }
        })
}

/// The end of the head and its Content-Length (0 when absent).
fn head(buf: &[u8], response: bool) -> io::Result<Option<(usize, usize)>> {
    let Some(end) = memmem::find(buf, b"\r\n\r\n").map(|p| p + 4) else {
        return Ok(None);
    };
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let parsed = if response {
        httparse::Response::new(&mut fields)
            .parse(&buf[..end])
            .map(|_| ())
    } else {
        httparse::Request::new(&mut fields)
            .parse(&buf[..end])
            .map(|_| ())
    };
    parsed.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let mut length = 0;
    for f in fields.iter().take_while(|f| !f.name.is_empty()) {
        if f.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(f.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "content-length"))?;
        } else if f.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "chunked"));
        }
    }
    Ok(Some((end, length)))
}

/// Reads from `from` into `buf` until it holds one whole message; returns
/// its length.
async fn message(from: &mut TcpStream, buf: &mut Vec<u8>, response: bool) -> io::Result<usize> {
    loop {
        if let Some((end, length)) = head(buf, response)?
            && buf.len() >= end + length
        {
            return Ok(end + length);
        }
        buf.reserve(16 * 1024);
        if from.read_buf(buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

async fn serve(mut client: TcpStream, upstream: &str) -> io::Result<()> {
    client.set_nodelay(true)?;
    let mut backend = TcpStream::connect(upstream).await?;
    backend.set_nodelay(true)?;
    let (mut inbuf, mut upbuf) = (Vec::with_capacity(16 * 1024), Vec::with_capacity(16 * 1024));
    loop {
        let n = message(&mut client, &mut inbuf, false).await?;
        backend.write_all(&inbuf[..n]).await?;
        inbuf.drain(..n);
        let m = message(&mut backend, &mut upbuf, true).await?;
        client.write_all(&upbuf[..m]).await?;
        upbuf.drain(..m);
    }
}
