//! The fuzzed functions, shared by the libFuzzer targets (`cargo +nightly
//! fuzz run NAME`) and by `tests/seeds.rs`, which runs each over its seed
//! corpus plus deterministic mutations on stable Rust. Every function must
//! return without panicking for any input; that is the whole oracle (for
//! `h1_forward`, its assertions are a differential one).

use std::path::Path;
use std::sync::OnceLock;

use teapot_model::manifests::{Loaded, load_text};
use teapot_model::store::Store;
use teapot_proxy::compile::snapshot::Snapshot;
use teapot_proxy::compile::{CompileOptions, compile};
use teapot_proxy::live::endpoints::EndpointRegistry;
use teapot_proxy::plane::edge::{EdgeConfig, scan_h1};
use teapot_webhook::offline::validate_text;
use teapot_webhook::{PolicyConfig, PolicyState, Validator};

/// The zone `dns_query` answers from: addresses, an empty non-terminal,
/// a TXT challenge, CAA, and a name with more addresses than fit 512 bytes.
fn dns_zone() -> &'static teapot_dns::Zone {
    static ZONE: OnceLock<teapot_dns::Zone> = OnceLock::new();
    ZONE.get_or_init(|| {
        let mut settings = teapot_dns::ZoneSettings::new("lb.example.com");
        settings.caa_issuers = vec!["letsencrypt.org".into()];
        let mut b = teapot_dns::ZoneBuilder::new(settings).expect("zone settings");
        let mut add = |name: &str, addr: &str| {
            b.address(name, addr.parse().expect("address"))
                .expect("in zone")
        };
        add("web.acme.lb.example.com", "192.0.2.1");
        add("web.acme.lb.example.com", "2001:db8::1");
        add("ns1.lb.example.com", "192.0.2.53");
        for i in 0..64 {
            add("big.lb.example.com", &format!("10.0.0.{i}"));
        }
        b.txt("_acme-challenge.acme.lb.example.com", "digest")
            .expect("in zone");
        b.build()
    })
}

/// The DNS server's query path on arbitrary bytes, as UDP and as TCP: an
/// answer, when there is one, is a response (QR set) with the query's id,
/// within the UDP payload teapot offers over UDP; a slip is never longer
/// than that either. And a differential: the answer (from the wire fast
/// path when it takes the query) says what hickory-proto's full path says,
/// the same message, RCODE, truncation and rate-limit key, in no more
/// bytes.
pub fn dns_query(data: &[u8]) {
    use hickory_proto::op::Message;
    use teapot_dns::answer::{UDP_PAYLOAD, respond_full, slip};
    use teapot_dns::{Transport, respond};
    for transport in [Transport::Udp, Transport::Tcp] {
        let answer = respond(dns_zone(), data, transport);
        let full = respond_full(dns_zone(), data, transport);
        assert_eq!(
            answer.is_some(),
            full.is_some(),
            "answered by one path only"
        );
        let (Some(response), Some(full)) = (answer, full) else {
            continue;
        };
        assert_eq!(
            (
                response.kind,
                response.rcode,
                response.truncated,
                response.rate_key
            ),
            (full.kind, full.rcode, full.truncated, full.rate_key)
        );
        assert_eq!(
            Message::from_vec(&response.bytes).ok(),
            Message::from_vec(&full.bytes).ok(),
            "the same message"
        );
        assert!(response.bytes.len() <= full.bytes.len());
        let bytes = &response.bytes;
        assert_eq!(bytes[..2], data[..2], "the query's id");
        assert!(bytes[2] & 0x80 != 0, "QR set");
        if transport == Transport::Udp {
            assert!(
                bytes.len() <= usize::from(UDP_PAYLOAD),
                "{} bytes over UDP",
                bytes.len()
            );
        }
        if let Some(cut) = slip(data) {
            assert!(cut.len() <= usize::from(UDP_PAYLOAD));
        }
    }
}

/// The HTTP/1 framing scan on arbitrary bytes; a valid verdict must be
/// stable (scanning twice agrees).
pub fn h1_scan(data: &[u8]) {
    let limits = EdgeConfig::default().head_limits();
    let first = scan_h1(data, &limits);
    assert_eq!(first, scan_h1(data, &limits));
    if let Ok(f) = first {
        assert!(
            !(f.chunked && f.content_length.is_some()),
            "both framings accepted"
        );
    }
}

fn load(text: &str) -> Loaded {
    let mut loaded = Loaded::default();
    load_text(Path::new("fuzz.yaml"), text, &Store::default(), &mut loaded);
    loaded
}

/// Manifest loader + route compiler + matcher on arbitrary YAML.
pub fn manifests(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let loaded = load(&text);
    let snapshot = compile(
        &loaded.store,
        loaded.problems,
        1,
        &CompileOptions::default(),
        &EndpointRegistry::default(),
    );
    for (host, path) in [
        ("a.example", "/"),
        ("", ""),
        ("x.localhost:8080", "/a/b/../c"),
    ] {
        let _ = snapshot.routes.lookup(host, path);
    }
}

fn demo_snapshot() -> &'static Snapshot {
    static SNAPSHOT: OnceLock<Snapshot> = OnceLock::new();
    SNAPSHOT.get_or_init(|| {
        let mut loaded = Loaded::default();
        for (name, text) in [
            (
                "services.yaml",
                include_str!("../../examples/demo/10-services.yaml"),
            ),
            (
                "ingress.yaml",
                include_str!("../../examples/demo/20-ingress.yaml"),
            ),
            (
                "class.yaml",
                include_str!("../../examples/demo/00-ingressclass.yaml"),
            ),
        ] {
            load_text(Path::new(name), text, &Store::default(), &mut loaded);
        }
        compile(
            &loaded.store,
            loaded.problems,
            1,
            &CompileOptions::default(),
            &EndpointRegistry::default(),
        )
    })
}

/// The matcher on arbitrary authority and path (split at the first NUL).
pub fn route_match(data: &[u8]) {
    let (authority, path) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b"/"[..]),
    };
    let authority = String::from_utf8_lossy(authority);
    let path = String::from_utf8_lossy(path);
    let _ = demo_snapshot().routes.lookup(&authority, &path);
}

/// Tenant patterns and request paths: the first line is a pattern a tenant
/// could write, the rest a path (and, after a NUL, a header value). A
/// pattern that compiles must agree with the `regex` crate's anchored match
/// (a differential oracle; `\b` on non-ASCII text is documented to differ),
/// and a table of such patterns must answer any path within the request's
/// evaluation budget.
pub fn route_patterns(data: &[u8]) {
    use teapot_api::regex::TenantRegex;
    use teapot_proxy::compile::gateway::RequestFacts;
    use teapot_proxy::compile::gateway::table::{
        Action, Candidate, Matcher, PathMatch, RouteInfo, TableBuilder, Target, ValueMatch,
        route_list,
    };

    let text = String::from_utf8_lossy(data);
    let (pattern, rest) = text.split_once('\n').unwrap_or((&text, "/"));
    let (path, value) = rest.split_once('\0').unwrap_or((rest, ""));
    let Ok(re) = TenantRegex::compile(pattern) else {
        return;
    };
    let word_boundary = pattern.contains("\\b") || pattern.contains("\\B");
    if let Ok(reference) = regex::Regex::new(&format!("^(?:{pattern})$")) {
        for hay in [path, value] {
            if !(word_boundary && !hay.is_ascii()) {
                assert_eq!(
                    re.is_match(hay.as_bytes()),
                    reference.is_match(hay),
                    "{pattern:?} on {hay:?}"
                );
            }
        }
    }
    let host = teapot_api::HostPattern::parse("a.example").expect("host");
    let candidates = (0..64u32)
        .map(|i| {
            let matcher = Matcher {
                path: PathMatch::Regex(re.clone()),
                method: None,
                headers: Box::new([("x".into(), ValueMatch::Regex(re.clone()))]),
                query: Box::new([]),
            };
            let target = Target::new(
                matcher,
                std::sync::Arc::new(Action::Unroutable),
                std::sync::Arc::new(RouteInfo {
                    name: "fuzz/r".into(),
                    policy: None,
                }),
                None,
                (0, i, 0),
            );
            Candidate::new(std::sync::Arc::new(target), (true, true), 0)
        })
        .collect();
    let mut builder = TableBuilder::default();
    builder.bind(Some(&host), 0, &route_list(candidates));
    let table = builder.build();
    let headers: &[(&str, &str)] = &[("x", value)];
    let facts = RequestFacts {
        method: "GET",
        query: Some(""),
        headers: Some(&headers),
        tls: Some(false),
        local: None,
    };
    let _ = table.host("a.example").matching(path, &facts);
}

fn webhook() -> &'static (Validator, PolicyState) {
    static STATE: OnceLock<(Validator, PolicyState)> = OnceLock::new();
    STATE.get_or_init(|| {
        let loaded = load(concat!(
            include_str!("../../webhook/tests/corpus/state/tenants.yaml"),
            "\n---\n",
            include_str!("../../webhook/tests/corpus/state/held.yaml"),
        ));
        let state = PolicyState::from_store(&loaded.store, 0);
        let config = PolicyConfig::new("example.net", vec!["10.96.0.0/12".parse().expect("CIDR")])
            .expect("policy config");
        (Validator::new(config), state)
    })
}

/// The webhook's validators on arbitrary YAML, as the operator's and as a
/// tenant's objects.
pub fn webhook_validate(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (validator, state) = webhook();
    let _ = validate_text(validator, state, &text, None);
    let _ = validate_text(validator, state, &text, Some("acme"));
}

/// What a client sends, through teapot's HTTP/1 engine to a backend: the
/// backend's raw bytes, parsed by a reference parser written apart from
/// the engine, must hold whole requests only (a cut tail at most, where
/// the engine gave up on a request midway), and those requests must be
/// the client's, in order, with the same method, target and body, as the
/// reference reads the client's bytes (`h1/tests/differential.rs` with
/// arbitrary bytes instead of generated requests).
pub fn h1_forward(data: &[u8]) {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let rt = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    });
    let expected = reference::requests(data);
    let heads: Vec<bool> = expected.iter().map(|r| r.method == b"HEAD").collect();
    let upstream = rt.block_on(forward(data, &heads));
    let mut expected = expected.iter();
    for stream in &upstream {
        let mut rest = &stream[..];
        while !rest.is_empty() {
            let (got, used) = match reference::request(rest) {
                reference::Parsed::Request(r, n) => (r, n),
                reference::Parsed::Partial => break,
                reference::Parsed::Invalid(why) => {
                    panic!("the backend got an invalid request: {why}")
                }
            };
            rest = &rest[used..];
            let want = expected
                .next()
                .expect("more requests reached the backend than the client sent");
            assert_eq!(got.method, want.method);
            if want.target.starts_with(b"/") {
                assert_eq!(got.target, want.target);
            }
            assert!(got.body == want.body, "a body changed on the way");
        }
        assert!(
            rest.is_empty() || std::ptr::eq(stream, upstream.last().expect("a stream")),
            "a cut request and then another connection"
        );
    }
}

/// Serves `data` as one client connection through an engine forwarding
/// everything to a local backend that answers each request it parses;
/// returns each upstream connection's bytes in accept order. The client
/// hangs up once it has read an answer to each of the requests the
/// reference found (`heads`: whether each is a HEAD), or the engine
/// closed: hanging up sooner would cut pipelined requests short.
async fn forward(data: &[u8], heads: &[bool]) -> Vec<Vec<u8>> {
    use std::sync::Arc;
    use std::time::Duration;
    use teapot_h1::{ConnInfo, Decision, Engine, EngineConfig, Forward};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let backend = tokio::spawn(async move {
        let mut conns = Vec::new();
        tokio::select! {
            () = async {
                while let Ok((s, _)) = listener.accept().await {
                    conns.push(tokio::spawn(backend_conn(s)));
                }
            } => {}
            _ = stopped => {}
        }
        let mut raw = Vec::new();
        for c in conns {
            raw.push(c.await.expect("backend connection"));
        }
        raw
    });
    let router = move |_: &teapot_h1::RequestHead<'_>, _: &ConnInfo| {
        Decision::forward(Forward::to(vec![addr]))
    };
    // Short client timeouts end a run that stops midway; the upstream's
    // stays long, as a spurious one would send a request twice (retry).
    let config = EngineConfig {
        header_read_timeout: Duration::from_millis(200),
        keepalive_timeout: Duration::from_millis(200),
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::new(router, (), config));
    let (client, server) = tokio::io::duplex(64 * 1024);
    let (mut rd, mut wr) = tokio::io::split(client);
    let (_tx, shutdown) = tokio::sync::watch::channel(false);
    let serve = {
        let engine = engine.clone();
        async move { engine.serve(server, ConnInfo::default(), shutdown).await }
    };
    let (answered, mut all_answered) = tokio::sync::watch::channel(false);
    let write = async move {
        let _ = wr.write_all(data).await;
        // Err: the reader is gone, the engine closed.
        let _ = all_answered.wait_for(|done| *done).await;
        let _ = wr.shutdown().await;
        wr
    };
    let read = async move {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        let mut seen = 0;
        let mut pos = 0;
        loop {
            if seen >= heads.len() {
                let _ = answered.send(true);
            }
            match rd.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            while let Some((len, fin)) = response_len(&buf[pos..], heads.get(seen) == Some(&true)) {
                pos += len;
                seen += usize::from(fin);
            }
        }
    };
    let (_, _, wr) = tokio::join!(serve, read, write);
    drop(wr);
    // Idle upstream connections close with the engine's pool.
    drop(engine);
    let _ = stop.send(());
    backend.await.expect("backend")
}

/// The length of the whole response at the start of `buf` and whether it
/// is final (not 1xx); `None` until one is complete, and for a response
/// delimited by its connection's end (the client reads that to EOF).
fn response_len(buf: &[u8], head_request: bool) -> Option<(usize, bool)> {
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut slots);
    let httparse::Status::Complete(n) = resp.parse(buf).ok()? else {
        return None;
    };
    let status = resp.code?;
    let interim = (100..200).contains(&status);
    let length = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        });
    let body = if head_request || interim || status == 204 || status == 304 {
        0
    } else {
        length?
    };
    (buf.len() >= n + body).then_some((n + body, !interim))
}

/// Answers every whole request it reads, until EOF or an invalid one;
/// returns everything it read.
async fn backend_conn(mut s: tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut raw = Vec::new();
    let mut parsed = 0;
    let mut answering = true;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match s.read(&mut buf).await {
            Ok(0) | Err(_) => return raw,
            Ok(n) => n,
        };
        raw.extend_from_slice(&buf[..n]);
        while answering {
            match reference::request(&raw[parsed..]) {
                reference::Parsed::Request(r, used) => {
                    parsed += used;
                    let answer: &[u8] = if r.method == b"HEAD" {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
                    } else {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                    };
                    if s.write_all(answer).await.is_err() {
                        answering = false;
                    }
                }
                reference::Parsed::Partial => break,
                reference::Parsed::Invalid(_) => answering = false,
            }
        }
    }
}

/// The reference HTTP/1.1 request parser: httparse for the head and the
/// engine's framing rules at its default limits (`scan_h1`, so both sides
/// refuse the same heads), and its own body decoding, lenient where the
/// engine may be stricter (bare LF, long lines) so that only the engine
/// taking more than the reference is a finding. Chunk extensions are read
/// by RFC 9112's grammar, written apart from the engine's: one the
/// grammar refuses (a quoted-string left open at the line's end) is where
/// a backend reading on would see another request.
mod reference {
    use teapot_h1::{EngineConfig, MAX_HEADERS_CAP, scan_h1};

    pub struct Request {
        pub method: Vec<u8>,
        pub target: Vec<u8>,
        pub body: Vec<u8>,
    }

    pub enum Parsed {
        Request(Request, usize),
        Partial,
        Invalid(&'static str),
    }

    /// The client's requests as the reference reads them, up to the first
    /// it cannot.
    pub fn requests(mut data: &[u8]) -> Vec<Request> {
        let mut out = Vec::new();
        loop {
            while let Some(rest) = data.strip_prefix(b"\r\n") {
                data = rest;
            }
            match request(data) {
                Parsed::Request(r, n) => {
                    out.push(r);
                    data = &data[n..];
                }
                _ => return out,
            }
        }
    }

    pub fn request(data: &[u8]) -> Parsed {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS_CAP];
        let mut req = httparse::Request::new(&mut slots);
        let head = match req.parse(data) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Parsed::Partial,
            Err(_) => return Parsed::Invalid("head"),
        };
        let Ok(framing) = scan_h1(&data[..head], &EngineConfig::default().limits) else {
            return Parsed::Invalid("framing");
        };
        let method = req.method.unwrap_or("").as_bytes().to_vec();
        let target = req.path.unwrap_or("").as_bytes().to_vec();
        let rest = &data[head..];
        let (body, used) = if framing.chunked {
            match chunked(rest) {
                Ok(Some(b)) => b,
                Ok(None) => return Parsed::Partial,
                Err(why) => return Parsed::Invalid(why),
            }
        } else {
            let n = usize::try_from(framing.content_length.unwrap_or(0)).unwrap_or(usize::MAX);
            if rest.len() < n {
                return Parsed::Partial;
            }
            (rest[..n].to_vec(), n)
        };
        Parsed::Request(
            Request {
                method,
                target,
                body,
            },
            head + used,
        )
    }

    /// A line ending in LF (CR before it dropped); `None` if incomplete.
    fn line(data: &[u8]) -> Option<(&[u8], usize)> {
        let lf = data.iter().position(|&b| b == b'\n')?;
        let line = &data[..lf];
        Some((line.strip_suffix(b"\r").unwrap_or(line), lf + 1))
    }

    /// `*( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] )`
    /// (RFC 9112 §7.1.1), the whole rest of a chunk-size line.
    fn extensions(mut rest: &[u8]) -> bool {
        let tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
        let token = |v: &[u8]| v.iter().take_while(|b| tchar(b)).count();
        // What is left of `v` after its leading SP and HTAB.
        let bws = |v: &[u8]| v.len() - v.iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
        while !rest.is_empty() {
            rest = &rest[rest.len() - bws(rest)..];
            let Some(after) = rest.strip_prefix(b";") else {
                return false;
            };
            rest = &after[after.len() - bws(after)..];
            let name = token(rest);
            if name == 0 {
                return false;
            }
            rest = &rest[name..];
            let trimmed = &rest[rest.len() - bws(rest)..];
            let Some(after) = trimmed.strip_prefix(b"=") else {
                continue;
            };
            rest = &after[after.len() - bws(after)..];
            if let Some(quoted) = rest.strip_prefix(b"\"") {
                let mut i = 0;
                loop {
                    match quoted.get(i) {
                        None => return false,
                        Some(b'"') => break,
                        Some(b'\\') => match quoted.get(i + 1) {
                            Some(&b) if b == b'\t' || b >= 0x20 && b != 0x7f => i += 2,
                            _ => return false,
                        },
                        Some(&b) if b == b'\t' || b >= 0x20 && b != 0x7f => i += 1,
                        Some(_) => return false,
                    }
                }
                rest = &quoted[i + 1..];
            } else {
                let value = token(rest);
                if value == 0 {
                    return false;
                }
                rest = &rest[value..];
            }
        }
        true
    }

    /// A chunked body's data and its length on the wire, trailers
    /// included; `Ok(None)` if incomplete.
    fn chunked(data: &[u8]) -> Result<Option<(Vec<u8>, usize)>, &'static str> {
        let mut body = Vec::new();
        let mut pos = 0;
        loop {
            let Some((size_line, n)) = line(&data[pos..]) else {
                return Ok(None);
            };
            pos += n;
            let digits = size_line
                .iter()
                .take_while(|b| b.is_ascii_hexdigit())
                .count();
            if digits == 0 || digits > 16 || !extensions(&size_line[digits..]) {
                return Err("chunk size");
            }
            let size = std::str::from_utf8(&size_line[..digits])
                .ok()
                .and_then(|s| usize::from_str_radix(s, 16).ok())
                .ok_or("chunk size")?;
            if size == 0 {
                // Trailer fields, then the empty line.
                loop {
                    let Some((l, n)) = line(&data[pos..]) else {
                        return Ok(None);
                    };
                    pos += n;
                    if l.is_empty() {
                        return Ok(Some((body, pos)));
                    }
                }
            }
            if data.len() < pos + size {
                return Ok(None);
            }
            body.extend_from_slice(&data[pos..pos + size]);
            pos += size;
            let Some((l, n)) = line(&data[pos..]) else {
                return Ok(None);
            };
            if !l.is_empty() {
                return Err("no CRLF after chunk data");
            }
            pos += n;
        }
    }
}
