//! The query path: one query's bytes in, one response's bytes out (or
//! nothing), from a [`Zone`]. No I/O and no state, so the fuzz target and
//! the unit tests drive exactly what the listeners run.
//!
//! What an open-internet authoritative server owes the rest of the
//! internet is decided here: no recursion (REFUSED outside the zone), a
//! minimal answer to ANY (RFC 8482), UDP answers cut to what the client
//! can take with the TC bit set (it asks again over TCP), no answer at all
//! to what is not a query.

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, HINFO, NS, TXT};
use hickory_proto::rr::{DNSClass, LowerName, RData, Record, RecordType};

use crate::escape::LogText;
use crate::zone::Zone;

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

/// The response to `query`, or `None` when nothing should be sent (too
/// short or long to be a query, or itself a response).
pub fn respond(zone: &Zone, query: &[u8], transport: Transport) -> Option<Response> {
    if query.len() < 12 || query.len() > MAX_QUERY {
        return None;
    }
    // QR set: answering responses is how two servers loop on each other.
    if query[2] & 0x80 != 0 {
        return None;
    }
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
    let (kind, code) = if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
        (Kind::Error, ResponseCode::BADVERS)
    } else if request.op_code != OpCode::Query {
        (Kind::Error, ResponseCode::NotImp)
    } else if request.queries.len() != 1 {
        (Kind::Error, ResponseCode::FormErr)
    } else {
        lookup(zone, &request.queries[0], &mut response)
    };
    response.metadata.response_code = code;
    let rate_key = match kind {
        Kind::Answer | Kind::NoData => {
            let q = &request.queries[0];
            let mut h = KeyHash::default();
            h.write(&LowerName::new(q.name()).to_string());
            // NODATA leaves the type out (as BIND's RRL does): every type
            // a name lacks is the same empty answer, and a type of its own
            // per bucket would let rotating the type escape the limit.
            if kind == Kind::Answer {
                h.write_u16(u16::from(q.query_type()));
            } else {
                h.write(" nodata");
            }
            h.0
        }
        Kind::NxDomain => 1,
        Kind::Refused | Kind::Error => 0,
    };
    let mut bytes = encode(&response)?;
    let mut truncated = false;
    if bytes.len() > limit {
        bytes = encode(&truncate(&response))?;
        truncated = true;
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

fn lookup(zone: &Zone, query: &Query, response: &mut Message) -> (Kind, ResponseCode) {
    let name = LowerName::new(query.name());
    if query.query_class() != DNSClass::IN
        || matches!(query.query_type(), RecordType::AXFR | RecordType::IXFR)
        || !zone.origin.zone_of(&name)
    {
        return (Kind::Refused, ResponseCode::Refused);
    }
    if !zone.loaded {
        return (Kind::Error, ResponseCode::ServFail);
    }
    response.metadata.authoritative = true;
    let owner = query.name().clone();
    let qtype = query.query_type();
    let apex = name == zone.origin;
    let node = zone.nodes.get(&name);
    if node.is_none() && !apex && !zone.empty_non_terminals.contains(&name) {
        negative(zone, response);
        return (Kind::NxDomain, ResponseCode::NXDomain);
    }
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
        let Some(node) = zone.nodes.get(&LowerName::new(ns)) else {
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
    fn write(&mut self, s: &str) {
        for b in s.bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn write_u16(&mut self, v: u16) {
        for b in v.to_be_bytes() {
            self.0 ^= u64::from(b);
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
    fn large_answers_are_truncated_over_udp_and_whole_over_tcp() {
        let q = query("big.lb.example.com.", RecordType::A, None);
        let udp = respond(&zone(), &q, Transport::Udp).unwrap();
        assert!(udp.truncated && udp.bytes.len() <= 512);
        let m = Message::from_vec(&udp.bytes).unwrap();
        assert!(m.truncation && m.answers.is_empty());
        let tcp = respond(&zone(), &q, Transport::Tcp).unwrap();
        assert!(!tcp.truncated);
        assert_eq!(Message::from_vec(&tcp.bytes).unwrap().answers.len(), 200);
        // EDNS raises the limit only up to 1232 bytes.
        let q = query("big.lb.example.com.", RecordType::A, Some(4096));
        let udp = respond(&zone(), &q, Transport::Udp).unwrap();
        assert!(udp.truncated && udp.bytes.len() <= 1232);
        assert!(Message::from_vec(&udp.bytes).unwrap().edns.is_some());
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
