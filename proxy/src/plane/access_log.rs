//! The access log: one line per HTTP request, per L4 TCP connection and
//! per L4 UDP flow (docs/operations.md).
//!
//! The request path only copies a few fields into an [`Entry`] (one
//! allocation for the request's strings, `Arc` clones for the rest) and
//! offers it to a bounded channel; a thread of its own formats and
//! writes. A full queue drops the line and counts it
//! (`teapot_access_log_dropped_total`): a slow disk or a stalled stderr
//! reader must never hold a request. With `--access-log off` there is no
//! channel and no thread, and the request path checks one `Option`.
//!
//! At shutdown, `server::run` calls [`AccessLog::drain`]: a marker queued
//! behind the last lines comes back once they are written, so the lines
//! of the last requests (and of the L4 connections the shutdown closed)
//! reach the file before the process exits.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus::IntCounter;

/// Which requests are logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Off,
    /// Every request and connection (successes sampled by `sample`).
    All,
    /// Only answers of 400 and above, local answers, failed upstreams and
    /// failed L4 connections.
    Errors,
}

/// How a line is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line.
    Json,
    /// `key=value` pairs (logfmt), values quoted when they need it.
    Text,
}

/// Where lines go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    Stderr,
    /// Appended to; created if missing.
    File(PathBuf),
}

/// `teapot proxy --access-log*`.
#[derive(Clone, Debug)]
pub struct AccessLogConfig {
    pub mode: Mode,
    pub format: Format,
    pub destination: Destination,
    /// Log one in this many successful requests (1: all). Errors are
    /// always logged: they are the lines an operator looks for.
    pub sample: u32,
    /// Keep the query string of the path (it can carry tokens).
    pub query: bool,
    /// Lines waiting for the writer before new ones are dropped.
    pub queue: usize,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            mode: Mode::Off,
            format: Format::Json,
            destination: Destination::Stderr,
            sample: 1,
            query: false,
            queue: 16 * 1024,
        }
    }
}

/// A handle to the writer, cheap to clone; inert when the log is off.
#[derive(Clone, Debug, Default)]
pub struct AccessLog {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    tx: SyncSender<Msg>,
    mode: Mode,
    sample: u64,
    query: bool,
    seen: AtomicU64,
    dropped: IntCounter,
}

/// What the writer is sent: lines, and at shutdown a marker it answers
/// once everything queued before it is written and flushed.
///
/// Not boxed although the variants differ in size: nearly every message
/// is a line, and boxing it would add an allocation per request.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
enum Msg {
    Line(Entry),
    Drained(SyncSender<()>),
}

/// What kind of line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Http,
    Tcp,
    /// An L4 UDP flow: one client's datagrams to one endpoint until the
    /// flow ends (idle, evicted, its endpoint removed, shutdown).
    Udp,
}

/// One line's fields, owned, built on the request path.
#[derive(Debug)]
pub struct Entry {
    pub kind: Kind,
    pub time: SystemTime,
    /// `tenant \x1f route [\x1f request id \x1f traceparent]`
    /// (crate::plane::h1's tag); for L4, `tenant \x1f namespace/service`.
    pub tag: Option<Arc<str>>,
    /// Method, path and host, one after the other in one allocation.
    strings: String,
    method_end: u32,
    path_end: u32,
    pub has_host: bool,
    /// `h1`, `h2`, `tcp`, `udp`.
    pub protocol: &'static str,
    /// The TLS version (`TLSv1.3`), `tls` when a TLS connection's version
    /// is not known (its digest was missing), `None` for plain.
    pub tls: Option<&'static str>,
    pub sni: Option<Arc<str>>,
    pub status: u16,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub duration: Duration,
    pub upstream_time: Option<Duration>,
    pub upstream: Option<SocketAddr>,
    pub retries: u32,
    pub client: Option<SocketAddr>,
    /// Why teapot answered itself or how the exchange failed; `None` for
    /// a relayed response.
    pub reason: Option<&'static str>,
}

impl Entry {
    /// A line for an HTTP request; `path` loses its query string unless
    /// the log keeps it.
    pub fn http(method: &str, path: &str, host: Option<&str>, keep_query: bool) -> Entry {
        let path = if keep_query {
            path
        } else {
            path.split_once('?').map_or(path, |(p, _)| p)
        };
        let host_s = host.unwrap_or("");
        let mut strings = String::with_capacity(method.len() + path.len() + host_s.len());
        strings.push_str(method);
        strings.push_str(path);
        strings.push_str(host_s);
        Entry {
            kind: Kind::Http,
            time: SystemTime::now(),
            tag: None,
            method_end: method.len() as u32,
            path_end: (method.len() + path.len()) as u32,
            strings,
            has_host: host.is_some(),
            protocol: "h1",
            tls: None,
            sni: None,
            status: 0,
            bytes_in: 0,
            bytes_out: 0,
            duration: Duration::ZERO,
            upstream_time: None,
            upstream: None,
            retries: 0,
            client: None,
            reason: None,
        }
    }

    /// A line for an L4 connection.
    pub fn tcp() -> Entry {
        let mut e = Entry::http("", "", None, false);
        e.kind = Kind::Tcp;
        e.protocol = "tcp";
        e
    }

    /// A line for an L4 UDP flow.
    pub fn udp() -> Entry {
        let mut e = Entry::http("", "", None, false);
        e.kind = Kind::Udp;
        e.protocol = "udp";
        e
    }

    pub fn method(&self) -> &str {
        self.strings.get(..self.method_end as usize).unwrap_or("")
    }

    pub fn path(&self) -> &str {
        self.strings
            .get(self.method_end as usize..self.path_end as usize)
            .unwrap_or("")
    }

    pub fn host(&self) -> Option<&str> {
        self.has_host
            .then(|| self.strings.get(self.path_end as usize..).unwrap_or(""))
    }

    /// Whether the line belongs in `--access-log errors`. An L4
    /// connection closed for idleness or a drain ended normally.
    pub fn is_error(&self) -> bool {
        match self.kind {
            Kind::Http => self.reason.is_some() || self.status >= 400 || self.status == 0,
            Kind::Tcp | Kind::Udp => {
                matches!(self.reason, Some("no_endpoint" | "connection_error"))
            }
        }
    }
}

/// The fields of a tag, in order; missing ones are empty.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TagFields<'a> {
    pub tenant: &'a str,
    pub route: &'a str,
    pub request_id: &'a str,
    pub traceparent: &'a str,
}

impl<'a> TagFields<'a> {
    pub fn parse(tag: &'a str) -> TagFields<'a> {
        let mut it = tag.split('\x1f');
        TagFields {
            tenant: it.next().unwrap_or(""),
            route: it.next().unwrap_or(""),
            request_id: it.next().unwrap_or(""),
            traceparent: it.next().unwrap_or(""),
        }
    }
}

impl AccessLog {
    /// Starts the writer thread; `Ok(AccessLog::default())` (inert) when
    /// the mode is off. Fails when the file cannot be opened.
    pub fn start(config: &AccessLogConfig, dropped: IntCounter) -> std::io::Result<AccessLog> {
        if config.mode == Mode::Off {
            return Ok(AccessLog::default());
        }
        let out: Box<dyn std::io::Write + Send> = match &config.destination {
            Destination::Stderr => Box::new(std::io::stderr()),
            Destination::File(path) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?,
            ),
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(config.queue.max(1));
        let format = config.format;
        std::thread::Builder::new()
            .name("teapot-access-log".into())
            .spawn(move || write_lines(rx, out, format))?;
        Ok(AccessLog {
            inner: Some(Arc::new(Inner {
                tx,
                mode: config.mode,
                sample: u64::from(config.sample.max(1)),
                query: config.query,
                seen: AtomicU64::new(0),
                dropped,
            })),
        })
    }

    /// Whether any line may be written: the request path builds no
    /// [`Entry`] and no per-request tag otherwise.
    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// Whether paths keep their query string.
    pub fn keeps_query(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| i.query)
    }

    /// Whether a request that ended with `status` and `failed` (a local
    /// answer, an upstream or client failure) gets a line: the mode and
    /// the sampling decide, before any field is copied.
    pub fn wants(&self, status: u16, failed: bool) -> bool {
        let Some(inner) = &self.inner else {
            return false;
        };
        let error = failed || status >= 400 || status == 0;
        match inner.mode {
            Mode::Off => false,
            Mode::Errors => error,
            Mode::All if error || inner.sample == 1 => true,
            Mode::All => inner.seen.fetch_add(1, Ordering::Relaxed) % inner.sample == 0,
        }
    }

    /// Offers a line to the writer; drops and counts it when the queue is
    /// full. Never waits.
    pub fn send(&self, entry: Entry) {
        let Some(inner) = &self.inner else { return };
        if inner.mode == Mode::Errors && !entry.is_error() {
            return;
        }
        match inner.tx.try_send(Msg::Line(entry)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => inner.dropped.inc(),
        }
    }

    /// Waits, at most `wait`, until every line queued before this call is
    /// written and flushed; true when they are. For the end of the
    /// process: the writer is a detached thread that exiting would cut
    /// off mid-queue. Lines sent meanwhile by other threads may or may not
    /// be included.
    pub fn drain(&self, wait: Duration) -> bool {
        let Some(inner) = &self.inner else {
            return true;
        };
        let deadline = std::time::Instant::now() + wait;
        let (ack_tx, ack_rx) = std::sync::mpsc::sync_channel(1);
        let mut marker = Msg::Drained(ack_tx);
        // The queue may be full: retry (the writer is emptying it) rather
        // than block, so a stuck destination cannot hold the exit longer
        // than `wait`.
        loop {
            match inner.tx.try_send(marker) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(m)) => {
                    if std::time::Instant::now() >= deadline {
                        return false;
                    }
                    marker = m;
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        ack_rx.recv_timeout(left).is_ok()
    }
}

/// How long the writer sleeps when it finds the queue empty.
///
/// Why it polls instead of blocking in `recv`: a receiver blocked on the
/// channel turns every send into a futex wake-up, a syscall on the request
/// path and a context switch for each line (measured: the writer thread
/// was a quarter of the process's CPU, mostly `finish_task_switch` and the
/// channel's contended lock, and the request's CPU rose 64 %). A poller is
/// never waiting when a request sends, so a send is a slot in the queue;
/// a quiet proxy's lines show within this long, and a busy one's go out
/// in large writes. At 20 ms the queue holds about 300 ms of 50k lines/s.
const IDLE_POLL: Duration = Duration::from_millis(20);

/// Empty polls in a row after which the writer blocks in `recv` instead:
/// a proxy with no requests for a second wakes it no more (50 wake-ups a
/// second otherwise, for as long as it stays idle), and only the first
/// line after the quiet pays a wake-up.
const POLLS_BEFORE_BLOCKING: u32 = 50;

/// The writer: formats each line into one reused buffer, flushes when the
/// queue runs dry, then sleeps [`IDLE_POLL`]; quiet for
/// [`POLLS_BEFORE_BLOCKING`] polls, it blocks until the next line.
fn write_lines(rx: Receiver<Msg>, out: Box<dyn std::io::Write + Send>, format: Format) {
    use std::sync::mpsc::TryRecvError;
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
    let mut line = String::with_capacity(1024);
    let mut empty_polls = 0;
    loop {
        let msg = match rx.try_recv() {
            Ok(msg) => msg,
            Err(TryRecvError::Empty) => {
                let _ = out.flush();
                if empty_polls < POLLS_BEFORE_BLOCKING {
                    empty_polls += 1;
                    std::thread::sleep(IDLE_POLL);
                    continue;
                }
                match rx.recv() {
                    Ok(msg) => msg,
                    Err(_) => break,
                }
            }
            Err(TryRecvError::Disconnected) => break,
        };
        empty_polls = 0;
        let entry = match msg {
            Msg::Line(entry) => entry,
            Msg::Drained(ack) => {
                // Everything before the marker is in `out`.
                let _ = out.flush();
                let _ = ack.try_send(());
                continue;
            }
        };
        line.clear();
        match format {
            Format::Json => json_line(&mut line, &entry),
            Format::Text => text_line(&mut line, &entry),
        }
        line.push('\n');
        if out.write_all(line.as_bytes()).is_err() {
            // Nowhere to report it but stderr, which may be the broken
            // destination itself: drop the line.
        }
    }
    let _ = out.flush();
}

/// A field value of a line.
enum Value<'a> {
    Str(&'a str),
    Num(u64),
    Ms(Duration),
    Addr(SocketAddr),
    Null,
}

fn fields(e: &Entry, mut f: impl FnMut(&'static str, Value<'_>)) {
    let tag = e.tag.as_deref().map(TagFields::parse).unwrap_or_default();
    fn opt(s: &str) -> Value<'_> {
        if s.is_empty() {
            Value::Null
        } else {
            Value::Str(s)
        }
    }
    let mut time = String::with_capacity(24);
    rfc3339(&mut time, e.time);
    f("time", Value::Str(&time));
    f(
        "kind",
        Value::Str(match e.kind {
            Kind::Http => "http",
            Kind::Tcp => "tcp",
            Kind::Udp => "udp",
        }),
    );
    f("tenant", opt(tag.tenant));
    let namespace = tag.route.split_once('/').map_or("", |(ns, _)| ns);
    f("namespace", opt(namespace));
    f(
        match e.kind {
            Kind::Http => "route",
            Kind::Tcp | Kind::Udp => "service",
        },
        opt(tag.route),
    );
    if e.kind == Kind::Http {
        f("host", e.host().map_or(Value::Null, Value::Str));
        f("method", opt(e.method()));
        f("path", opt(e.path()));
    }
    f("protocol", Value::Str(e.protocol));
    f("tls", e.tls.map_or(Value::Null, Value::Str));
    f("sni", e.sni.as_deref().map_or(Value::Null, Value::Str));
    if e.kind == Kind::Http {
        f("status", Value::Num(u64::from(e.status)));
    }
    f("bytes_in", Value::Num(e.bytes_in));
    f("bytes_out", Value::Num(e.bytes_out));
    f("duration_ms", Value::Ms(e.duration));
    f(
        "upstream_ms",
        e.upstream_time.map_or(Value::Null, Value::Ms),
    );
    f("upstream_addr", e.upstream.map_or(Value::Null, Value::Addr));
    f("retries", Value::Num(u64::from(e.retries)));
    f("client", e.client.map_or(Value::Null, Value::Addr));
    if e.kind == Kind::Http {
        f("request_id", opt(tag.request_id));
        f("traceparent", opt(tag.traceparent));
    }
    f("reason", e.reason.map_or(Value::Null, Value::Str));
}

/// How one format writes a line's fields.
struct Style {
    open: &'static str,
    close: &'static str,
    separator: char,
    /// Written before and after a field's name.
    name: (&'static str, &'static str),
    string: fn(&mut String, &str),
    /// Addresses are strings in JSON, bare in logfmt.
    quote_addr: bool,
    null: &'static str,
}

const JSON: Style = Style {
    open: "{",
    close: "}",
    separator: ',',
    name: ("\"", "\":"),
    string: json_str,
    quote_addr: true,
    null: "null",
};

const TEXT: Style = Style {
    open: "",
    close: "",
    separator: ' ',
    name: ("", "="),
    string: text_str,
    quote_addr: false,
    null: "-",
};

fn json_line(out: &mut String, e: &Entry) {
    styled_line(out, e, &JSON);
}

fn text_line(out: &mut String, e: &Entry) {
    styled_line(out, e, &TEXT);
}

fn styled_line(out: &mut String, e: &Entry, style: &Style) {
    out.push_str(style.open);
    let mut first = true;
    fields(e, |name, value| {
        if !first {
            out.push(style.separator);
        }
        first = false;
        out.push_str(style.name.0);
        out.push_str(name);
        out.push_str(style.name.1);
        match value {
            Value::Str(s) => (style.string)(out, s),
            Value::Num(n) => out.push_str(itoa::Buffer::new().format(n)),
            Value::Ms(d) => milliseconds(out, d),
            Value::Addr(a) if style.quote_addr => {
                let _ = write!(out, "\"{a}\"");
            }
            Value::Addr(a) => {
                let _ = write!(out, "{a}");
            }
            Value::Null => out.push_str(style.null),
        }
    });
    out.push_str(style.close);
}

/// `d` in milliseconds with three decimals (`15.408`), by integer
/// arithmetic: float formatting was the writer's largest formatting cost.
fn milliseconds(out: &mut String, d: Duration) {
    let micros = d.as_micros();
    let mut buf = itoa::Buffer::new();
    out.push_str(buf.format(micros / 1000));
    out.push('.');
    let frac = buf.format(1000 + micros % 1000);
    out.push_str(&frac[1..]);
}

/// A JSON string: quotes, backslashes and every control byte escaped, so
/// a path cannot end a line or forge a field.
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A logfmt value: bare when it can be, else quoted with `"`, `\` and
/// control bytes escaped.
fn text_str(out: &mut String, s: &str) {
    let bare = !s.is_empty()
        && s.chars()
            .all(|c| !c.is_control() && c != ' ' && c != '"' && c != '=' && c != '\\');
    if bare {
        out.push_str(s);
        return;
    }
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `2026-11-24T07:05:09.123Z`, without a date crate: days since the
/// epoch to a civil date (Howard Hinnant's algorithm).
fn rfc3339(out: &mut String, t: SystemTime) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Entry {
        let mut e = Entry::http(
            "GET",
            "/a\"b\n\u{1b}?token=secret",
            Some("a.example"),
            false,
        );
        e.tag = Some(Arc::from("alpha\x1ftenant-alpha/web:80\x1fabc\x1f00-x"));
        e.status = 200;
        e.client = Some("127.0.0.1:5000".parse().unwrap());
        e.duration = Duration::from_micros(1500);
        e.time = UNIX_EPOCH + Duration::from_millis(1_795_000_000_123);
        e
    }

    #[test]
    fn milliseconds_have_three_decimals() {
        let ms = |micros| {
            let mut s = String::new();
            milliseconds(&mut s, Duration::from_micros(micros));
            s
        };
        assert_eq!(ms(15_408), "15.408");
        assert_eq!(ms(7), "0.007");
        assert_eq!(ms(2_000_000), "2000.000");
    }

    #[test]
    fn json_lines_parse_and_escape_control_bytes() {
        let mut line = String::new();
        json_line(&mut line, &sample());
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line}");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["path"], "/a\"b\n\u{1b}", "query string dropped");
        assert_eq!(v["tenant"], "alpha");
        assert_eq!(v["namespace"], "tenant-alpha");
        assert_eq!(v["route"], "tenant-alpha/web:80");
        assert_eq!(v["request_id"], "abc");
        assert_eq!(v["status"], 200);
        assert_eq!(v["duration_ms"], 1.5);
        assert_eq!(v["upstream_addr"], serde_json::Value::Null);
        assert_eq!(v["time"], "2026-11-18T11:06:40.123Z");
        let mut leap = String::new();
        rfc3339(&mut leap, UNIX_EPOCH + Duration::from_secs(1_709_164_800));
        assert_eq!(leap, "2024-02-29T00:00:00.000Z");
    }

    #[test]
    fn text_lines_quote_and_escape() {
        let mut line = String::new();
        text_line(&mut line, &sample());
        assert!(line.contains(r#"path="/a\"b\x0a\x1b""#), "{line}");
        assert!(line.contains(" host=a.example "), "{line}");
        assert!(line.contains(" upstream_addr=- "), "{line}");
    }

    #[test]
    fn query_string_kept_only_when_asked() {
        assert_eq!(Entry::http("GET", "/p?q=1", None, true).path(), "/p?q=1");
        assert_eq!(Entry::http("GET", "/p?q=1", None, false).path(), "/p");
        assert_eq!(Entry::http("GET", "/p", None, false).host(), None);
    }

    #[test]
    fn errors_mode_and_sampling() {
        let dropped = IntCounter::new("d", "d").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = AccessLogConfig {
            mode: Mode::All,
            sample: 3,
            destination: Destination::File(dir.path().join("a.log")),
            ..AccessLogConfig::default()
        };
        let log = AccessLog::start(&config, dropped.clone()).unwrap();
        let kept = (0..9).filter(|_| log.wants(200, false)).count();
        assert_eq!(kept, 3, "one in three successes");
        assert!(
            log.wants(502, false) && log.wants(200, true),
            "errors always"
        );
        let errors = AccessLog::start(
            &AccessLogConfig {
                mode: Mode::Errors,
                ..config.clone()
            },
            dropped,
        )
        .unwrap();
        assert!(!errors.wants(200, false) && errors.wants(404, false));
        assert!(!AccessLog::default().wants(500, true));
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let dropped = IntCounter::new("d", "d").unwrap();
        // A writer that never returns: the queue (1) fills.
        struct Stuck;
        impl std::io::Write for Stuck {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                std::thread::sleep(Duration::from_secs(3600));
                Ok(0)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::spawn(move || write_lines(rx, Box::new(Stuck), Format::Json));
        let log = AccessLog {
            inner: Some(Arc::new(Inner {
                tx,
                mode: Mode::All,
                sample: 1,
                query: false,
                seen: AtomicU64::new(0),
                dropped: dropped.clone(),
            })),
        };
        let start = std::time::Instant::now();
        for _ in 0..100 {
            log.send(sample());
        }
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(dropped.get() >= 97, "dropped {}", dropped.get());
    }

    fn log_on(tx: SyncSender<Msg>) -> AccessLog {
        AccessLog {
            inner: Some(Arc::new(Inner {
                tx,
                mode: Mode::All,
                sample: 1,
                query: false,
                seen: AtomicU64::new(0),
                dropped: IntCounter::new("d", "d").unwrap(),
            })),
        }
    }

    /// Each empty poll flushes the destination: a count of flushes that
    /// stops growing is a writer that stopped waking up.
    #[test]
    fn a_quiet_writer_stops_polling_and_the_next_line_still_goes_out() {
        #[derive(Clone, Default)]
        struct Counting(Arc<parking_lot::Mutex<(usize, Vec<u8>)>>);
        impl std::io::Write for Counting {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().1.extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                self.0.lock().0 += 1;
                Ok(())
            }
        }
        let out = Counting::default();
        let flushes = || out.0.lock().0;
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        let writer = out.clone();
        std::thread::spawn(move || write_lines(rx, Box::new(writer), Format::Json));
        // The polls before blocking, and the flush before the block.
        let quiet = POLLS_BEFORE_BLOCKING as usize + 1;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while flushes() < quiet && std::time::Instant::now() < deadline {
            std::thread::sleep(IDLE_POLL);
        }
        std::thread::sleep(IDLE_POLL * 10);
        assert_eq!(flushes(), quiet, "the writer went on polling");
        let log = log_on(tx);
        log.send(sample());
        assert!(log.drain(Duration::from_secs(5)));
        assert_eq!(out.0.lock().1.iter().filter(|&&b| b == b'\n').count(), 1);
    }

    #[test]
    fn drain_waits_until_the_queued_lines_are_written() {
        // A destination that takes 200 ms per write: without the drain,
        // the lines are still queued or buffered when the sends return.
        #[derive(Clone, Default)]
        struct Slow(Arc<parking_lot::Mutex<Vec<u8>>>);
        impl std::io::Write for Slow {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                std::thread::sleep(Duration::from_millis(200));
                self.0.lock().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let written = Slow::default();
        let lines = |w: &Slow| w.0.lock().iter().filter(|&&b| b == b'\n').count();
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        let out = written.clone();
        std::thread::spawn(move || write_lines(rx, Box::new(out), Format::Json));
        let log = log_on(tx);
        for _ in 0..5 {
            log.send(sample());
        }
        assert!(lines(&written) < 5, "the test needs a slow destination");
        assert!(log.drain(Duration::from_secs(5)));
        assert_eq!(lines(&written), 5);
        assert!(
            AccessLog::default().drain(Duration::ZERO),
            "off: nothing to wait for"
        );
    }

    #[test]
    fn drain_gives_up_after_its_bound_on_a_stuck_destination() {
        struct Stuck;
        impl std::io::Write for Stuck {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                std::thread::sleep(Duration::from_secs(3600));
                Ok(0)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                std::thread::sleep(Duration::from_secs(3600));
                Ok(())
            }
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::spawn(move || write_lines(rx, Box::new(Stuck), Format::Json));
        let log = log_on(tx);
        for _ in 0..3 {
            log.send(sample());
        }
        let start = std::time::Instant::now();
        assert!(!log.drain(Duration::from_millis(200)));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn udp_lines_name_the_service_and_have_no_status() {
        let mut e = Entry::udp();
        e.tag = Some(Arc::from("\x1fl4/dns"));
        e.bytes_in = 5;
        e.reason = Some("idle_timeout");
        let mut line = String::new();
        json_line(&mut line, &e);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["kind"], "udp");
        assert_eq!(v["protocol"], "udp");
        assert_eq!(v["service"], "l4/dns");
        assert_eq!(v["namespace"], "l4");
        assert!(v.get("status").is_none() && v.get("path").is_none(), "{v}");
        assert!(!e.is_error(), "an idle flow ended normally");
        e.reason = Some("connection_error");
        assert!(e.is_error());
    }
}
