//! The query path: one query's bytes in, one response's bytes out (or
//! nothing), from a [`Zone`]. No I/O and no state, so the fuzz target and
//! the unit tests drive exactly what the listeners run.
//!
//! What an open-internet authoritative server owes the rest of the
//! internet is decided here: no recursion (REFUSED outside the zone), a
//! minimal answer to ANY (RFC 8482), UDP answers cut to what the client
//! can take (glue first, never with TC; then a rotating subset of a large
//! address set, without TC; TC only when not one record of the answer
//! fits, so the client asks again over TCP), no answer at all to what is
//! not a query.

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, HINFO, NS, TXT};
use hickory_proto::rr::{DNSClass, LowerName, RData, Record, RecordType};

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::escape::LogText;
use crate::zone::{Found, Zone, labels_end_at, wire};

/// Longest query accepted, over either transport. A question is at most
/// 12 + 255 + 4 bytes; an OPT record with a cookie fits in the rest.
/// Longer is not a query a resolver sends, so it is not parsed at all.
pub const MAX_QUERY: usize = 512;

/// The UDP payload teapot offers and accepts at most (the DNS flag day
/// 2020 value): above it, fragments.
pub const UDP_PAYLOAD: u16 = 1232;

/// Without EDNS a UDP response is at most this (RFC 1035).
const CLASSIC_UDP: usize = 512;

/// How the query came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }
}

/// What kind of response this is, for metrics and for the rate limiter's
/// buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Records for the name and type asked.
    Answer,
    /// The name exists, the type does not.
    NoData,
    NxDomain,
    /// Outside the zone, a zone transfer, another class.
    Refused,
    /// Malformed, not a query, bad EDNS version.
    Error,
}

/// One response, encoded.
#[derive(Clone, Debug)]
pub struct Response {
    pub bytes: Vec<u8>,
    pub kind: Kind,
    /// The RCODE as the metrics label (`noerror`, `nxdomain`, ...).
    pub rcode: &'static str,
    /// Cut for UDP: the client asks again over TCP.
    pub truncated: bool,
    /// The rate limiter's name key: the name and type asked for answers,
    /// the name alone for NODATA (rotating types is one bucket), the zone
    /// for NXDOMAIN (a flood of random names is one bucket), one key for
    /// errors.
    pub rate_key: u64,
}

/// What [`respond_into`] wrote: a [`Response`] without its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answered {
    pub kind: Kind,
    pub rcode: &'static str,
    pub truncated: bool,
    pub rate_key: u64,
}

/// The response to `query`, or `None` when nothing should be sent (too
/// short or long to be a query, or itself a response).
pub fn respond(zone: &Zone, query: &[u8], transport: Transport) -> Option<Response> {
    let mut bytes = Vec::new();
    let a = respond_into(zone, query, transport, &mut bytes)?;
    Some(Response {
        bytes,
        kind: a.kind,
        rcode: a.rcode,
        truncated: a.truncated,
        rate_key: a.rate_key,
    })
}

/// [`respond`] by hickory-proto alone, without the answer from the wire:
/// what that fast path must agree with, query for query (its tests and the
/// `dns_query` fuzz target compare the two).
pub fn respond_full(zone: &Zone, query: &[u8], transport: Transport) -> Option<Response> {
    if query.len() < 12 || query.len() > MAX_QUERY || query[2] & 0x80 != 0 {
        return None;
    }
    full(zone, query, transport)
}

/// [`respond`] into `out` (cleared first), which the listeners keep from
/// one query to the next: the common query (one A or AAAA question, with
/// or without EDNS, answered whole, NODATA or NXDOMAIN) is written
/// straight from the zone without building a message or allocating; any
/// other goes through hickory-proto's message types. Both give the same
/// answer (the tests compare them on every kind of query and on mangled
/// ones).
pub fn respond_into(
    zone: &Zone,
    query: &[u8],
    transport: Transport,
    out: &mut Vec<u8>,
) -> Option<Answered> {
    if query.len() < 12 || query.len() > MAX_QUERY {
        return None;
    }
    // QR set: answering responses is how two servers loop on each other.
    if query[2] & 0x80 != 0 {
        return None;
    }
    if let Some(a) = fast(zone, query, transport, out) {
        return Some(a);
    }
    let r = full(zone, query, transport)?;
    out.clear();
    out.extend_from_slice(&r.bytes);
    Some(Answered {
        kind: r.kind,
        rcode: r.rcode,
        truncated: r.truncated,
        rate_key: r.rate_key,
    })
}

/// The query types the fast path answers.
const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_SOA: u16 = 6;
const TYPE_OPT: u16 = 41;
const CLASS_IN: u16 = 1;
/// EDNS options hickory-proto decodes (NSID, DAU, DHU, N3U, client
/// subnet) and may refuse as malformed: left to the full path, so both
/// paths answer such a query alike.
const DECODED_OPTIONS: [u16; 5] = [3, 5, 6, 7, 8];

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]))
}

/// The common query answered from the wire: header and question read in
/// place, the name looked up as it came (lowercased), the response
/// written into `out`. `None` for anything it does not cover, which the
/// full path then answers: another opcode or class or type, more than
/// one question or record, compression in the question, an EDNS version
/// above 0 or an option hickory decodes, a name outside the zone, a zone
/// not loaded yet, an answer that does not fit whole.
fn fast(zone: &Zone, query: &[u8], transport: Transport, out: &mut Vec<u8>) -> Option<Answered> {
    // Opcode QUERY; one question, no answer or authority, at most the OPT.
    if query[2] & 0x78 != 0 || query[4..11] != [0, 1, 0, 0, 0, 0, 0] || query[11] > 1 {
        return None;
    }
    let mut name = [0u8; 256];
    let (mut len, mut at) = (0, 12);
    loop {
        let l = usize::from(*query.get(at)?);
        if l == 0 {
            break;
        }
        // Compression pointers and the obsolete label types.
        if l > 63 || len + 1 + l >= 250 {
            return None;
        }
        let label = query.get(at + 1..at + 1 + l)?;
        name[len] = l as u8;
        for (d, s) in name[len + 1..len + 1 + l].iter_mut().zip(label) {
            *d = s.to_ascii_lowercase();
        }
        len += 1 + l;
        at += 1 + l;
    }
    name[len] = 0;
    let name = &name[..len + 1];
    at += 1;
    let qtype = be16(query, at)?;
    if be16(query, at + 2)? != CLASS_IN || !(qtype == TYPE_A || qtype == TYPE_AAAA) {
        return None;
    }
    at += 4;
    let question = &query[12..at];
    let mut edns = None;
    let mut payload = CLASSIC_UDP;
    if query[11] == 1 {
        // The OPT pseudo-record: the root's name, type, payload size,
        // extended RCODE, version, flags, options.
        if *query.get(at)? != 0 || be16(query, at + 1)? != TYPE_OPT || *query.get(at + 6)? != 0 {
            return None;
        }
        let offered = be16(query, at + 3)?;
        let flags = be16(query, at + 7)?;
        let rdlen = usize::from(be16(query, at + 9)?);
        at += 11;
        let mut options = query.get(at..at + rdlen)?;
        while !options.is_empty() {
            if DECODED_OPTIONS.contains(&be16(options, 0)?) {
                return None;
            }
            options = options.get(4 + usize::from(be16(options, 2)?)..)?;
        }
        at += rdlen;
        edns = Some(flags & 0x8000 != 0);
        payload = usize::from(offered.clamp(CLASSIC_UDP as u16, UDP_PAYLOAD));
    }
    if at != query.len() || !zone.loaded {
        return None;
    }
    // In the zone: the origin ends the name at a label boundary.
    let origin = &*zone.origin_wire;
    let suffix = name.len().checked_sub(origin.len())?;
    if &name[suffix..] != origin {
        return None;
    }
    if !labels_end_at(name, suffix) {
        return None;
    }
    let (node, wildcard, nxdomain) = match zone.find(name) {
        Found::Node(node) => (node, None, false),
        Found::Wildcard(encloser, node) => (Some(node), Some(encloser), false),
        Found::NxDomain => (None, None, true),
    };
    let (a, aaaa): (&[Ipv4Addr], &[Ipv6Addr]) = match (node, qtype) {
        (Some(n), TYPE_A) => (&n.a, &[]),
        (Some(n), _) => (&[], &n.aaaa),
        (None, _) => (&[], &[]),
    };
    let answers = a.len() + aaaa.len();
    let kind = match (nxdomain, answers) {
        (true, _) => Kind::NxDomain,
        (false, 0) => Kind::NoData,
        _ => Kind::Answer,
    };
    // An in-zone name of the SOA is the labels above the origin and a
    // pointer to the question's origin, or a pointer to the whole
    // question when it is the name asked.
    let asked = |labels: &[u8]| labels == &name[..suffix];
    let soa_rdata = zone
        .soa_names
        .iter()
        .map(|(labels, pointer)| match pointer {
            true if asked(labels) => 2,
            true => labels.len() + 2,
            false => labels.len(),
        })
        .sum::<usize>()
        + zone.soa_numbers.len();
    let size = 12
        + question.len()
        + a.len() * 16
        + aaaa.len() * 28
        + if answers == 0 { 12 + soa_rdata } else { 0 }
        + if edns.is_some() { 11 } else { 0 };
    let limit = match transport {
        Transport::Udp => payload,
        Transport::Tcp => usize::from(u16::MAX),
    };
    if size > limit {
        return None;
    }
    let rcode = if nxdomain {
        ResponseCode::NXDomain
    } else {
        ResponseCode::NoError
    };
    out.clear();
    out.extend_from_slice(&query[..2]);
    // QR, AA, the query's RD; its CD; no RA; the RCODE.
    out.push(0x84 | (query[2] & 0x01));
    out.push((query[3] & 0x10) | rcode.low());
    let counts = [
        1,
        answers as u16,
        u16::from(answers == 0),
        u16::from(edns.is_some()),
    ];
    for c in counts {
        out.extend_from_slice(&c.to_be_bytes());
    }
    out.extend_from_slice(question);
    // Each record's owner is the name asked: a pointer to the question.
    let ttl = zone.ttl.to_be_bytes();
    for addr in a {
        out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        out.extend_from_slice(&ttl);
        out.extend_from_slice(&[0, 4]);
        out.extend_from_slice(&addr.octets());
    }
    for addr in aaaa {
        out.extend_from_slice(&[0xc0, 12, 0, 28, 0, 1]);
        out.extend_from_slice(&ttl);
        out.extend_from_slice(&[0, 16]);
        out.extend_from_slice(&addr.octets());
    }
    if answers == 0 {
        // The SOA, owned by the origin: a pointer to the question's
        // suffix, as are the in-zone names in its RDATA.
        let origin = (0xc000 | (12 + suffix) as u16).to_be_bytes();
        out.extend_from_slice(&origin);
        out.extend_from_slice(&TYPE_SOA.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&zone.negative_ttl.min(zone.apex_ttl).to_be_bytes());
        out.extend_from_slice(&(soa_rdata as u16).to_be_bytes());
        for (labels, pointer) in &zone.soa_names {
            if *pointer && asked(labels) {
                out.extend_from_slice(&[0xc0, 12]);
                continue;
            }
            out.extend_from_slice(labels);
            if *pointer {
                out.extend_from_slice(&origin);
            }
        }
        out.extend_from_slice(&zone.soa_numbers);
    }
    if let Some(dnssec_ok) = edns {
        out.extend_from_slice(&[0, 0, 41]);
        out.extend_from_slice(&UDP_PAYLOAD.to_be_bytes());
        // Extended RCODE 0, version 0, the query's DO bit (RFC 3225 §3).
        out.extend_from_slice(&[0, 0, if dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
    }
    debug_assert_eq!(out.len(), size);
    Some(Answered {
        kind,
        rcode: rcode_label(rcode),
        truncated: false,
        rate_key: rate_key(kind, name, wildcard, qtype),
    })
}

/// The rate limiter's name key (see [`Response::rate_key`]) of a
/// response to `name` (lowercase wire format) and `qtype`, answered from
/// the wildcard at `wildcard` if it was.
fn rate_key(kind: Kind, name: &[u8], wildcard: Option<&[u8]>, qtype: u16) -> u64 {
    match kind {
        Kind::Answer | Kind::NoData => {
            let mut h = KeyHash::default();
            // A name answered from a wildcard counts as the wildcard: a
            // flood of random names below it is one bucket, as NXDOMAIN
            // is.
            match wildcard {
                Some(encloser) => {
                    h.write(b"\x01*");
                    h.write(encloser);
                }
                None => h.write(name),
            }
            // NODATA leaves the type out (as BIND's RRL does): every type
            // a name lacks is the same empty answer, and a type of its own
            // per bucket would let rotating the type escape the limit.
            if kind == Kind::Answer {
                h.write(&qtype.to_be_bytes());
            } else {
                h.write(b" nodata");
            }
            h.0
        }
        Kind::NxDomain => 1,
        Kind::Refused | Kind::Error => 0,
    }
}

/// Any query, through hickory-proto's message types.
fn full(zone: &Zone, query: &[u8], transport: Transport) -> Option<Response> {
    let Ok(request) = Message::from_vec(query) else {
        return Some(header_error(query));
    };
    let mut response = Message::response(request.id, request.op_code);
    response.metadata.recursion_desired = request.recursion_desired;
    response.metadata.checking_disabled = request.checking_disabled;
    let payload = match &request.edns {
        Some(edns) => {
            let mut ours = Edns::new();
            ours.set_max_payload(UDP_PAYLOAD);
            ours.set_version(0);
            // RFC 3225 §3: the DO bit of the query is copied into the
            // response (the zone is unsigned; the bit says the client
            // asked, not that the answer is signed).
            ours.set_dnssec_ok(edns.flags().dnssec_ok);
            response.set_edns(ours);
            usize::from(edns.max_payload().clamp(CLASSIC_UDP as u16, UDP_PAYLOAD))
        }
        None => CLASSIC_UDP,
    };
    let limit = match transport {
        Transport::Udp => payload,
        Transport::Tcp => usize::from(u16::MAX),
    };
    response.add_queries(request.queries.iter().take(1).cloned());
    let mut synthesized = None;
    let (kind, code) = if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
        (Kind::Error, ResponseCode::BADVERS)
    } else if request.op_code != OpCode::Query {
        (Kind::Error, ResponseCode::NotImp)
    } else if request.queries.len() != 1 {
        (Kind::Error, ResponseCode::FormErr)
    } else {
        lookup(zone, &request.queries[0], &mut response, &mut synthesized)
    };
    response.metadata.response_code = code;
    let rate_key = match kind {
        Kind::Answer | Kind::NoData => {
            let q = &request.queries[0];
            rate_key(
                kind,
                &wire(q.name()),
                synthesized.as_deref(),
                u16::from(q.query_type()),
            )
        }
        _ => rate_key(kind, &[], None, 0),
    };
    let mut bytes = encode(&response)?;
    let mut truncated = false;
    if bytes.len() > limit {
        match fit(&mut response, bytes.len(), limit) {
            Some(cut) => bytes = cut,
            None => {
                bytes = encode(&truncate(&response))?;
                truncated = true;
            }
        }
    }
    Some(Response {
        bytes,
        kind,
        rcode: rcode_label(code),
        truncated,
        rate_key,
    })
}

/// The response a rate-limited client gets now and then instead of
/// nothing ("slip"): the question alone with TC set, no larger than the
/// query, so a real resolver retries over TCP and a spoofed victim gets
/// no amplification.
pub fn slip(query: &[u8]) -> Option<Vec<u8>> {
    let request = Message::from_vec(query).ok()?;
    let mut response = Message::response(request.id, request.op_code);
    response.metadata.recursion_desired = request.recursion_desired;
    response.add_queries(request.queries.iter().take(1).cloned());
    response.metadata.truncation = true;
    encode(&response)
}

/// Cuts `response` (`len` bytes encoded) to at most `limit` bytes, or
/// `None` when only TC can say it:
///
/// - the additional section (glue) goes first, record by record from the
///   end: additional data never sets TC (RFC 2181 §9), a client that
///   lacks a name server's address asks for it;
/// - then, for an A or AAAA answer, addresses down to the subset that
///   fits, without TC. The RRset is the fleet's own choice of serving
///   addresses, not a cut of someone's signed data, and any of them
///   serves every name: a smaller set is a whole answer, and TC would
///   send every resolver to TCP for addresses it does not need. The
///   subset starts at an offset taken from the query's id (random per
///   query from a resolver), so each address is answered as often as the
///   others, unlike a fixed first N that would leave the rest unused.
fn fit(response: &mut Message, mut len: usize, limit: usize) -> Option<Vec<u8>> {
    let mut rotated = false;
    loop {
        let over = len - limit;
        let mut freed = 0;
        if !response.additionals.is_empty() {
            while freed < over
                && let Some(record) = response.additionals.pop()
            {
                freed += wire_size(&record);
            }
        } else if response.answers.len() > 1
            && response
                .answers
                .iter()
                .all(|r| matches!(r.record_type(), RecordType::A | RecordType::AAAA))
        {
            if !rotated {
                let n = response.answers.len();
                response
                    .answers
                    .rotate_left(usize::from(response.metadata.id) % n);
                rotated = true;
            }
            while freed < over
                && response.answers.len() > 1
                && let Some(record) = response.answers.pop()
            {
                freed += wire_size(&record);
            }
        } else {
            return None;
        }
        let bytes = encode(response)?;
        if bytes.len() <= limit {
            return Some(bytes);
        }
        len = bytes.len();
    }
}

/// The most bytes an address record can take (its owner written out, not
/// compressed), so a cut based on it never removes more records than it
/// must: a cut left short of the limit is cut again.
fn wire_size(record: &Record) -> usize {
    let rdata = match record.record_type() {
        RecordType::A => 4,
        RecordType::AAAA => 16,
        _ => 0,
    };
    record.name.len() + 2 + 10 + rdata
}

fn lookup(
    zone: &Zone,
    query: &Query,
    response: &mut Message,
    synthesized: &mut Option<Box<[u8]>>,
) -> (Kind, ResponseCode) {
    if query.query_class() != DNSClass::IN
        || matches!(query.query_type(), RecordType::AXFR | RecordType::IXFR)
        || !zone.origin.zone_of(&LowerName::new(query.name()))
    {
        return (Kind::Refused, ResponseCode::Refused);
    }
    if !zone.loaded {
        return (Kind::Error, ResponseCode::ServFail);
    }
    response.metadata.authoritative = true;
    let owner = query.name().clone();
    let qtype = query.query_type();
    let name = wire(query.name());
    let apex = name == zone.origin_wire;
    let node = match zone.find(&name) {
        Found::Node(node) => node,
        Found::Wildcard(encloser, node) => {
            *synthesized = Some(encloser.into());
            Some(node)
        }
        Found::NxDomain => {
            negative(zone, response);
            return (Kind::NxDomain, ResponseCode::NXDomain);
        }
    };
    let ttl = zone.ttl;
    let mut answers: Vec<Record> = Vec::new();
    match qtype {
        // RFC 8482 §4.2: one synthesized HINFO, whatever the name holds.
        RecordType::ANY => answers.push(Record::from_rdata(
            owner,
            zone.apex_ttl,
            RData::HINFO(HINFO::new("RFC8482".into(), String::new())),
        )),
        RecordType::SOA if apex => answers.push(soa(zone, owner)),
        RecordType::NS if apex => {
            for ns in &zone.nameservers {
                answers.push(Record::from_rdata(
                    owner.clone(),
                    zone.apex_ttl,
                    RData::NS(NS(ns.clone())),
                ));
            }
            glue(zone, response);
        }
        RecordType::CAA if apex => {
            for caa in &zone.caa {
                answers.push(Record::from_rdata(
                    owner.clone(),
                    zone.apex_ttl,
                    RData::CAA(caa.clone()),
                ));
            }
        }
        RecordType::A => answers.extend(
            node.into_iter()
                .flat_map(|n| &n.a)
                .map(|a| Record::from_rdata(owner.clone(), ttl, RData::A(A(*a)))),
        ),
        RecordType::AAAA => answers.extend(
            node.into_iter()
                .flat_map(|n| &n.aaaa)
                .map(|a| Record::from_rdata(owner.clone(), ttl, RData::AAAA(AAAA(*a)))),
        ),
        RecordType::TXT => answers.extend(node.into_iter().flat_map(|n| &n.txt).map(|t| {
            Record::from_rdata(owner.clone(), ttl, RData::TXT(TXT::new(vec![t.clone()])))
        })),
        _ => {}
    }
    if answers.is_empty() {
        negative(zone, response);
        return (Kind::NoData, ResponseCode::NoError);
    }
    response.insert_answers(answers);
    (Kind::Answer, ResponseCode::NoError)
}

fn soa(zone: &Zone, owner: hickory_proto::rr::Name) -> Record {
    Record::from_rdata(owner, zone.apex_ttl, RData::SOA(zone.soa.clone()))
}

/// The SOA in the authority section of NXDOMAIN and NODATA, with the
/// negative TTL as its own (RFC 2308 §3: the lesser of the SOA's TTL and
/// MINIMUM is what resolvers cache the absence for).
fn negative(zone: &Zone, response: &mut Message) {
    let mut record = soa(zone, zone.origin_name.clone());
    record.ttl = zone.negative_ttl.min(zone.apex_ttl);
    response.add_authority(record);
}

/// Addresses of the in-zone name servers, in the additional section.
fn glue(zone: &Zone, response: &mut Message) {
    for ns in &zone.nameservers {
        let Some(node) = zone.nodes.get(&wire(ns)) else {
            continue;
        };
        for a in &node.a {
            response.add_additional(Record::from_rdata(ns.clone(), zone.ttl, RData::A(A(*a))));
        }
        for a in &node.aaaa {
            response.add_additional(Record::from_rdata(
                ns.clone(),
                zone.ttl,
                RData::AAAA(AAAA(*a)),
            ));
        }
    }
}

/// The question (and OPT) alone, TC set.
fn truncate(response: &Message) -> Message {
    let mut cut = Message::response(response.id, response.op_code);
    cut.metadata = response.metadata;
    cut.metadata.truncation = true;
    cut.add_queries(response.queries.iter().cloned());
    if let Some(edns) = &response.edns {
        cut.set_edns(edns.clone());
    }
    cut
}

/// FORMERR for a message whose header is readable but whose rest is not:
/// the header alone, counts zero, so the client learns why.
fn header_error(query: &[u8]) -> Response {
    let mut bytes = query[..12].to_vec();
    // QR=1, keep opcode and RD; AA, TC cleared.
    bytes[2] = 0x80 | (query[2] & 0x79);
    bytes[3] = ResponseCode::FormErr.low();
    bytes[4..12].fill(0);
    Response {
        bytes,
        kind: Kind::Error,
        rcode: rcode_label(ResponseCode::FormErr),
        truncated: false,
        rate_key: 0,
    }
}

fn encode(message: &Message) -> Option<Vec<u8>> {
    debug_assert_eq!(message.message_type, MessageType::Response);
    match message.to_vec() {
        Ok(bytes) => Some(bytes),
        Err(e) => {
            // The codec's message may quote the query's name.
            let error = e.to_string();
            tracing::warn!(error = %LogText(&error), "DNS response not encodable; nothing sent");
            None
        }
    }
}

pub(crate) fn rcode_label(code: ResponseCode) -> &'static str {
    match code {
        ResponseCode::NoError => "noerror",
        ResponseCode::FormErr => "formerr",
        ResponseCode::ServFail => "servfail",
        ResponseCode::NXDomain => "nxdomain",
        ResponseCode::NotImp => "notimp",
        ResponseCode::Refused => "refused",
        ResponseCode::BADVERS => "badvers",
        _ => "other",
    }
}

/// The rcode labels [`respond`] can produce, so the metrics start at 0.
pub const RCODES: [&str; 7] = [
    "noerror", "formerr", "servfail", "nxdomain", "notimp", "refused", "badvers",
];

/// FNV-1a for rate-limit keys (stable, cheap, no allocation).
#[derive(Debug)]
struct KeyHash(u64);

impl Default for KeyHash {
    fn default() -> Self {
        KeyHash(0xcbf2_9ce4_8422_2325)
    }
}

impl KeyHash {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone::{ZoneBuilder, ZoneSettings};
    use hickory_proto::rr::Name;

    fn zone() -> Zone {
        let mut settings = ZoneSettings::new("lb.example.com");
        settings.caa_issuers = vec!["letsencrypt.org".into()];
        let mut b = ZoneBuilder::new(settings).unwrap();
        b.address("web.acme.lb.example.com", "192.0.2.1".parse().unwrap())
            .unwrap();
        b.address("web.acme.lb.example.com", "2001:db8::1".parse().unwrap())
            .unwrap();
        b.address("ns1.lb.example.com", "192.0.2.53".parse().unwrap())
            .unwrap();
        b.txt("_acme-challenge.acme.lb.example.com", "digest")
            .unwrap();
        b.address("*.shop.lb.example.com", "192.0.2.7".parse().unwrap())
            .unwrap();
        b.address("*.shop.lb.example.com", "2001:db8::7".parse().unwrap())
            .unwrap();
        b.address("web.shop.lb.example.com", "192.0.2.8".parse().unwrap())
            .unwrap();
        for i in 0..6 {
            b.txt("long.lb.example.com", &format!("{i}{}", "x".repeat(200)))
                .unwrap();
        }
        for i in 0..200 {
            b.address(
                "big.lb.example.com",
                format!("10.0.{}.{}", i / 250, i % 250).parse().unwrap(),
            )
            .unwrap();
        }
        b.build()
    }

    fn query(name: &str, qtype: RecordType, edns: Option<u16>) -> Vec<u8> {
        let mut m = Message::query();
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
        m.metadata.recursion_desired = true;
        if let Some(payload) = edns {
            let mut e = Edns::new();
            e.set_max_payload(payload);
            m.set_edns(e);
        }
        m.to_vec().unwrap()
    }

    fn ask(name: &str, qtype: RecordType) -> (Message, Response) {
        let r = respond(&zone(), &query(name, qtype, None), Transport::Udp).unwrap();
        (Message::from_vec(&r.bytes).unwrap(), r)
    }

    /// Queries of every kind the listeners see: names that exist, do not,
    /// are empty, wildcard-answered, outside; every type the fast path
    /// answers and some it leaves; with and without EDNS (sizes, DO,
    /// options, versions); RD and CD.
    fn queries() -> Vec<Vec<u8>> {
        let names = [
            "web.acme.lb.example.com.",
            "WEB.Acme.LB.example.com.",
            "nothing.acme.lb.example.com.",
            "acme.lb.example.com.",
            "lb.example.com.",
            "ns1.lb.example.com.",
            "x.shop.lb.example.com.",
            "A.b.shop.lb.example.com.",
            "*.shop.lb.example.com.",
            "web.shop.lb.example.com.",
            "x.web.shop.lb.example.com.",
            "big.lb.example.com.",
            "long.lb.example.com.",
            "example.com.",
            "www.example.org.",
        ];
        let types = [
            RecordType::A,
            RecordType::AAAA,
            RecordType::MX,
            RecordType::TXT,
            RecordType::ANY,
        ];
        let mut out = Vec::new();
        for name in names {
            for qtype in types {
                for edns in [None, Some(512), Some(1232), Some(4096), Some(100)] {
                    for (dnssec_ok, cookie, version) in
                        [(false, false, 0), (true, true, 0), (false, false, 1)]
                    {
                        if edns.is_none() && (dnssec_ok || version > 0) {
                            continue;
                        }
                        let mut m = Message::query();
                        m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
                        m.metadata.recursion_desired = !dnssec_ok;
                        m.metadata.checking_disabled = dnssec_ok;
                        if let Some(payload) = edns {
                            let mut e = Edns::new();
                            e.set_max_payload(payload);
                            e.set_dnssec_ok(dnssec_ok);
                            e.set_version(version);
                            if cookie {
                                e.options_mut().insert(
                                    hickory_proto::rr::rdata::opt::EdnsOption::Unknown(
                                        10,
                                        vec![7; 8],
                                    ),
                                );
                            }
                            m.set_edns(e);
                        }
                        out.push(m.to_vec().unwrap());
                    }
                }
            }
        }
        out
    }

    /// The two paths' answers to `q`: the fast one's, if it takes the
    /// query, and the full one's.
    fn both(z: &Zone, q: &[u8], t: Transport) -> Option<((Answered, Vec<u8>), Response)> {
        let mut out = Vec::new();
        let fast = fast(z, q, t, &mut out)?;
        Some(((fast, out), full(z, q, t).unwrap()))
    }

    #[test]
    fn the_fast_path_answers_as_the_full_path_does() {
        let z = zone();
        let mut taken = 0;
        let queries = queries();
        for q in &queries {
            for t in [Transport::Udp, Transport::Tcp] {
                let Some(((fast, bytes), full)) = both(&z, q, t) else {
                    continue;
                };
                taken += 1;
                let what = Message::from_vec(q).unwrap();
                assert_eq!(
                    (fast.kind, fast.rcode, fast.truncated, fast.rate_key),
                    (full.kind, full.rcode, full.truncated, full.rate_key),
                    "{what:?}"
                );
                assert_eq!(
                    Message::from_vec(&bytes).unwrap(),
                    Message::from_vec(&full.bytes).unwrap(),
                    "{what:?}"
                );
                assert!(
                    bytes.len() <= full.bytes.len(),
                    "compressed at least as well {what:?}"
                );
            }
        }
        // Most A and AAAA queries in the zone take the fast path; the
        // rest (other types, outside, too large, version 1) do not.
        assert!(
            taken > 150 && taken < queries.len(),
            "{taken} of {}",
            queries.len() * 2
        );
    }

    #[test]
    fn mangled_queries_get_the_same_answer_from_both_paths() {
        // Every byte of each fast-path query set to a few values: the
        // fast path either leaves the query to the full path or answers
        // exactly as it would (a label length past the end, a pointer, a
        // count, a class, an OPT option's length...).
        let z = zone();
        let mut checked = 0;
        for q in queries() {
            if both(&z, &q, Transport::Udp).is_none() {
                continue;
            }
            for i in 0..q.len() {
                for v in [0u8, 1, 0x29, 0x3f, 0x40, 0xc0, 0xff, q[i] ^ 0x20] {
                    let mut m = q.clone();
                    m[i] = v;
                    if m[2] & 0x80 != 0 {
                        continue;
                    }
                    for cut in [m.len(), m.len() - 1] {
                        let m = &m[..cut];
                        if m.len() < 12 {
                            continue;
                        }
                        let Some(((fast, bytes), full)) = both(&z, m, Transport::Udp) else {
                            continue;
                        };
                        checked += 1;
                        assert_eq!(
                            (fast.kind, fast.rcode, fast.rate_key),
                            (full.kind, full.rcode, full.rate_key),
                            "{m:?}"
                        );
                        assert_eq!(
                            Message::from_vec(&bytes).unwrap(),
                            Message::from_vec(&full.bytes).unwrap(),
                            "{m:?}"
                        );
                    }
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    #[test]
    fn addresses_of_a_routed_name_in_the_case_asked() {
        let (m, r) = ask("Web.ACME.lb.example.com.", RecordType::A);
        assert_eq!(r.kind, Kind::Answer);
        assert!(m.authoritative && !m.recursion_available && m.recursion_desired);
        assert_eq!(m.answers.len(), 1);
        assert_eq!(m.answers[0].name.to_string(), "Web.ACME.lb.example.com.");
        assert_eq!(m.answers[0].ttl, 5);
        let (m, _) = ask("web.acme.lb.example.com.", RecordType::AAAA);
        assert_eq!(m.answers.len(), 1);
    }

    #[test]
    fn names_that_route_nowhere_are_nxdomain_with_the_soa() {
        let (m, r) = ask("nothing.acme.lb.example.com.", RecordType::A);
        assert_eq!(
            (r.kind, m.response_code),
            (Kind::NxDomain, ResponseCode::NXDomain)
        );
        assert!(m.answers.is_empty());
        assert_eq!(m.authorities.len(), 1);
        assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
        assert_eq!(m.authorities[0].ttl, 5);
    }

    #[test]
    fn parents_and_missing_types_are_nodata() {
        let (m, r) = ask("acme.lb.example.com.", RecordType::A);
        assert_eq!(
            (r.kind, m.response_code),
            (Kind::NoData, ResponseCode::NoError)
        );
        assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
        let (_, r) = ask("web.acme.lb.example.com.", RecordType::MX);
        assert_eq!(r.kind, Kind::NoData);
    }

    #[test]
    fn the_apex_has_soa_ns_with_glue_and_caa() {
        let (m, _) = ask("lb.example.com.", RecordType::SOA);
        assert_eq!(m.answers[0].record_type(), RecordType::SOA);
        let (m, _) = ask("lb.example.com.", RecordType::NS);
        assert_eq!(m.answers.len(), 1);
        assert_eq!(m.additionals.len(), 1, "glue for ns1");
        let (m, _) = ask("lb.example.com.", RecordType::CAA);
        assert_eq!(m.answers.len(), 2, "issue and issuewild");
    }

    #[test]
    fn acme_challenges_are_txt() {
        let (m, _) = ask("_acme-challenge.acme.lb.example.com.", RecordType::TXT);
        assert_eq!(m.answers.len(), 1);
        assert_eq!(m.answers[0].data.to_string(), "digest");
    }

    #[test]
    fn other_zones_classes_and_transfers_are_refused() {
        for (name, qtype) in [
            ("example.com.", RecordType::A),
            ("www.example.org.", RecordType::A),
            ("lb.example.com.", RecordType::AXFR),
        ] {
            let (m, r) = ask(name, qtype);
            assert_eq!(m.response_code, ResponseCode::Refused, "{name} {qtype}");
            assert!(!m.authoritative && m.answers.is_empty());
            assert_eq!(r.rcode, "refused");
        }
    }

    #[test]
    fn any_gets_the_minimal_rfc8482_answer() {
        let (m, _) = ask("big.lb.example.com.", RecordType::ANY);
        assert_eq!(m.answers.len(), 1);
        assert_eq!(m.answers[0].record_type(), RecordType::HINFO);
    }

    #[test]
    fn large_address_sets_answer_a_rotating_subset_over_udp_and_whole_over_tcp() {
        let z = zone();
        let with_id = |id: u16, edns: Option<u16>| {
            let mut q = query("big.lb.example.com.", RecordType::A, edns);
            q[..2].copy_from_slice(&id.to_be_bytes());
            let r = respond(&z, &q, Transport::Udp).unwrap();
            assert!(!r.truncated && r.kind == Kind::Answer);
            assert!(
                r.bytes.len() <= edns.map_or(512, |_| 1232),
                "{}",
                r.bytes.len()
            );
            let m = Message::from_vec(&r.bytes).unwrap();
            assert!(!m.truncation && m.response_code == ResponseCode::NoError);
            let set: std::collections::BTreeSet<String> =
                m.answers.iter().map(|a| a.data.to_string()).collect();
            assert_eq!(set.len(), m.answers.len(), "no address twice");
            set
        };
        // As many as fit: 512 bytes take 29 addresses, 1232 take 74.
        let classic = with_id(1, None);
        assert_eq!(classic.len(), 29);
        assert_eq!(with_id(1, Some(4096)).len(), 74);
        // Another id, another subset; over the ids, every address.
        assert_ne!(classic, with_id(2, None));
        let mut seen = std::collections::BTreeSet::new();
        for id in 0..200 {
            seen.extend(with_id(id, None));
        }
        assert_eq!(seen.len(), 200);
        let q = query("big.lb.example.com.", RecordType::A, None);
        let tcp = respond(&z, &q, Transport::Tcp).unwrap();
        assert!(!tcp.truncated);
        assert_eq!(Message::from_vec(&tcp.bytes).unwrap().answers.len(), 200);
    }

    #[test]
    fn an_answer_of_which_no_record_fits_is_truncated() {
        // Six 201-byte TXT strings: two would fit 512 bytes, five 1232, but a
        // TXT set is not addresses, so it is not answered in part.
        let q = query("long.lb.example.com.", RecordType::TXT, None);
        let udp = respond(&zone(), &q, Transport::Udp).unwrap();
        assert!(udp.truncated && udp.bytes.len() <= 512);
        let m = Message::from_vec(&udp.bytes).unwrap();
        assert!(m.truncation && m.answers.is_empty());
        let q = query("long.lb.example.com.", RecordType::TXT, Some(4096));
        let udp = respond(&zone(), &q, Transport::Udp).unwrap();
        assert!(udp.truncated && udp.bytes.len() <= 1232);
        assert!(Message::from_vec(&udp.bytes).unwrap().edns.is_some());
        let tcp = respond(&zone(), &q, Transport::Tcp).unwrap();
        assert_eq!(Message::from_vec(&tcp.bytes).unwrap().answers.len(), 6);
    }

    #[test]
    fn the_do_bit_is_copied_into_the_answer() {
        for dnssec_ok in [true, false] {
            let mut m = Message::query();
            m.add_query(Query::query(
                Name::from_ascii("web.acme.lb.example.com.").unwrap(),
                RecordType::A,
            ));
            let mut e = Edns::new();
            e.set_dnssec_ok(dnssec_ok);
            m.set_edns(e);
            let r = respond(&zone(), &m.to_vec().unwrap(), Transport::Udp).unwrap();
            let m = Message::from_vec(&r.bytes).unwrap();
            assert_eq!(m.edns.unwrap().flags().dnssec_ok, dnssec_ok);
            assert_eq!(m.answers.len(), 1);
        }
    }

    #[test]
    fn glue_that_does_not_fit_is_left_out_without_tc() {
        let mut settings = ZoneSettings::new("lb.example.com");
        settings
            .nameservers
            .push("ns.other.example.org".to_string());
        let mut b = ZoneBuilder::new(settings).unwrap();
        for i in 0..40 {
            b.address(
                "ns1.lb.example.com",
                format!("192.0.2.{i}").parse().unwrap(),
            )
            .unwrap();
        }
        for i in 0..20 {
            b.address(
                "ns1.lb.example.com",
                format!("2001:db8::{i}").parse().unwrap(),
            )
            .unwrap();
        }
        let z = b.build();
        for (edns, limit) in [(None, 512), (Some(1232), 1232)] {
            let q = query("lb.example.com.", RecordType::NS, edns);
            let r = respond(&z, &q, Transport::Udp).unwrap();
            assert!(!r.truncated && r.bytes.len() <= limit);
            let m = Message::from_vec(&r.bytes).unwrap();
            assert!(!m.truncation);
            assert_eq!(m.answers.len(), 2, "the whole NS set");
            assert!(!m.additionals.is_empty(), "the glue that fits");
            assert!(m.additionals.len() < 60);
        }
        let q = query("lb.example.com.", RecordType::NS, None);
        let tcp = respond(&z, &q, Transport::Tcp).unwrap();
        assert_eq!(Message::from_vec(&tcp.bytes).unwrap().additionals.len(), 60);
    }

    #[test]
    fn names_below_a_wildcard_are_answered_from_it() {
        for name in [
            "x.shop.lb.example.com.",
            "A.B.shop.lb.example.com.",
            "*.shop.lb.example.com.",
        ] {
            let (m, r) = ask(name, RecordType::A);
            assert_eq!(r.kind, Kind::Answer, "{name}");
            assert_eq!(m.answers.len(), 1, "{name}");
            assert_eq!(
                m.answers[0].name.to_string(),
                name,
                "owner is the name asked"
            );
            assert_eq!(m.answers[0].data.to_string(), "192.0.2.7");
            let (m, _) = ask(name, RecordType::AAAA);
            assert_eq!(m.answers[0].data.to_string(), "2001:db8::7");
            let (_, r) = ask(name, RecordType::MX);
            assert_eq!(r.kind, Kind::NoData, "{name}");
        }
        // A name that exists keeps its own records, and the wildcard does
        // not reach below it (RFC 4592: its closest encloser is itself).
        let (m, _) = ask("web.shop.lb.example.com.", RecordType::A);
        assert_eq!(m.answers[0].data.to_string(), "192.0.2.8");
        let (_, r) = ask("x.web.shop.lb.example.com.", RecordType::A);
        assert_eq!(r.kind, Kind::NxDomain);
        // The wildcard's parent is an empty non-terminal; other clusters
        // have no wildcard.
        assert_eq!(
            ask("shop.lb.example.com.", RecordType::A).1.kind,
            Kind::NoData
        );
        assert_eq!(
            ask("x.acme.lb.example.com.", RecordType::A).1.kind,
            Kind::NxDomain
        );
        // Random names below the wildcard share one rate-limit bucket.
        let z = zone();
        let key = |name: &str| {
            let q = query(name, RecordType::A, None);
            respond(&z, &q, Transport::Udp).unwrap().rate_key
        };
        assert_eq!(
            key("a.shop.lb.example.com."),
            key("b.c.shop.lb.example.com.")
        );
        assert_ne!(
            key("a.shop.lb.example.com."),
            key("web.shop.lb.example.com.")
        );
    }

    #[test]
    fn not_queries_get_nothing_or_an_error() {
        let z = zone();
        assert!(respond(&z, &[0; 11], Transport::Udp).is_none());
        assert!(respond(&z, &vec![0; MAX_QUERY + 1], Transport::Udp).is_none());
        let mut q = query("web.acme.lb.example.com.", RecordType::A, None);
        q[2] |= 0x80;
        assert!(
            respond(&z, &q, Transport::Udp).is_none(),
            "a response is never answered"
        );
        let mut garbage = query("web.acme.lb.example.com.", RecordType::A, None);
        garbage.truncate(garbage.len() - 3);
        let r = respond(&z, &garbage, Transport::Udp).unwrap();
        assert_eq!(r.rcode, "formerr");
        assert_eq!(&r.bytes[..2], &garbage[..2], "same id");
        let mut update = Message::query();
        update.metadata.op_code = OpCode::Update;
        let r = respond(&z, &update.to_vec().unwrap(), Transport::Udp).unwrap();
        assert_eq!(r.rcode, "notimp");
    }

    #[test]
    fn a_zone_not_built_yet_is_servfail_not_nxdomain() {
        let z = ZoneBuilder::new(ZoneSettings::new("lb.example.com"))
            .unwrap()
            .placeholder();
        let q = query("web.acme.lb.example.com.", RecordType::A, None);
        let r = respond(&z, &q, Transport::Udp).unwrap();
        assert_eq!(r.rcode, "servfail");
        let q = query("example.org.", RecordType::A, None);
        assert_eq!(respond(&z, &q, Transport::Udp).unwrap().rcode, "refused");
    }

    #[test]
    fn a_slip_is_never_larger_than_the_query() {
        let q = query("big.lb.example.com.", RecordType::ANY, None);
        let s = slip(&q).unwrap();
        assert!(s.len() <= q.len());
        assert!(Message::from_vec(&s).unwrap().truncation);
    }

    #[test]
    fn nxdomain_shares_one_rate_key_answers_have_their_own() {
        let z = zone();
        let key = |name: &str| {
            let q = query(name, RecordType::A, None);
            respond(&z, &q, Transport::Udp).unwrap().rate_key
        };
        assert_eq!(key("a.lb.example.com."), key("b.lb.example.com."));
        let web = key("web.acme.lb.example.com.");
        assert_eq!(web, key("WEB.acme.lb.example.com."));
        assert_ne!(web, key("a.lb.example.com."));
    }

    #[test]
    fn nodata_shares_one_rate_key_per_name_whatever_the_type() {
        let z = zone();
        let key = |name: &str, qtype: RecordType| {
            let r = respond(&z, &query(name, qtype, None), Transport::Udp).unwrap();
            (r.kind, r.rate_key)
        };
        let web = "web.acme.lb.example.com.";
        let (kind, mx) = key(web, RecordType::MX);
        assert_eq!(kind, Kind::NoData);
        for qtype in [
            RecordType::SRV,
            RecordType::CNAME,
            RecordType::Unknown(4242),
        ] {
            assert_eq!(key(web, qtype), (Kind::NoData, mx), "{qtype}");
        }
        assert_ne!(key(web, RecordType::A).1, mx, "an answer is not a NODATA");
        assert_ne!(key(web, RecordType::A).1, key(web, RecordType::AAAA).1);
        assert_ne!(key("acme.lb.example.com.", RecordType::MX).1, mx);
    }
}
