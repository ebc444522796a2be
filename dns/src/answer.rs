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
            let mut h = KeyHash::default();
            // A name answered from a wildcard counts as the wildcard: a
            // flood of random names below it is one bucket, as NXDOMAIN
            // is.
            match &synthesized {
                Some(parent) => {
                    h.write("*.");
                    h.write(&parent.to_string());
                }
                None => h.write(&LowerName::new(q.name()).to_string()),
            }
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
    synthesized: &mut Option<LowerName>,
) -> (Kind, ResponseCode) {
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
    let mut node = zone.nodes.get(&name);
    if node.is_none() && !apex && !zone.empty_non_terminals.contains(&name) {
        let Some((parent, records)) = wildcard(zone, &name) else {
            negative(zone, response);
            return (Kind::NxDomain, ResponseCode::NXDomain);
        };
        node = Some(records);
        *synthesized = Some(parent.clone());
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

/// The wildcard that answers `name`, a name the zone does not hold: the
/// one at its closest encloser (the nearest ancestor that exists, as a
/// name with records or an empty non-terminal), if there is one there
/// (RFC 4592 §3.3.1). A wildcard does not reach past a name that exists:
/// `*.acme` answers `x.y.acme` only while `y.acme` does not exist.
fn wildcard<'z>(
    zone: &'z Zone,
    name: &LowerName,
) -> Option<(&'z LowerName, &'z crate::zone::Node)> {
    if zone.wildcards.is_empty() {
        return None;
    }
    let mut parent = name.base_name();
    loop {
        if parent == zone.origin
            || zone.nodes.contains_key(&parent)
            || zone.empty_non_terminals.contains(&parent)
        {
            return zone.wildcards.get_key_value(&parent);
        }
        if parent.is_root() {
            return None;
        }
        parent = parent.base_name();
    }
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
