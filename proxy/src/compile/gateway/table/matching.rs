//! What a request is matched on: its facts as the engine holds them
//! ([`RequestFacts`], [`RequestHeaders`]), one match of a rule
//! ([`Matcher`]) and the bound on the regular-expression work one lookup
//! may do ([`EvalBudget`]).

use std::sync::Arc;

use teapot_api::regex::TenantRegex;

/// A request's facts the matches read, whatever its engine. Each is
/// optional: an engine that does not provide one (the HTTP/1 engine before
/// it is wired to Gateway matches, docs/gateway-api.md) matches no rule
/// that needs it, so a request never reaches a rule whose conditions were
/// not checked.
#[derive(Clone, Copy)]
pub struct RequestFacts<'a> {
    /// The method token; empty when unknown.
    pub method: &'a str,
    /// The query string (after `?`, without it); `None` when unknown, or
    /// when the request had none and the engine knows it (`Some("")`).
    pub query: Option<&'a str>,
    pub headers: Option<&'a dyn RequestHeaders>,
    /// Whether the request came over TLS (the HTTPS listener). `None` is
    /// taken as plain HTTP: a rule of an HTTPS listener only is never
    /// served to a request whose transport is unknown.
    pub tls: Option<bool>,
    /// The address and port the connection came in on (never the `Host`
    /// header's: a client names any port there). It picks the table of a
    /// Gateway with its own address (`compile::l4::EdgeTables`) and the
    /// port a redirect without one keeps; `None` when unknown.
    pub local: Option<std::net::SocketAddr>,
}

impl std::fmt::Debug for RequestFacts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestFacts")
            .field("method", &self.method)
            .field("query", &self.query)
            .field("headers", &self.headers.is_some())
            .field("tls", &self.tls)
            .field("local", &self.local)
            .finish()
    }
}

impl RequestFacts<'_> {
    /// Nothing known beyond the head.
    pub const UNKNOWN: RequestFacts<'static> = RequestFacts {
        method: "",
        query: None,
        headers: None,
        tls: None,
        local: None,
    };
}

/// Request headers as an engine holds them, read without allocating.
pub trait RequestHeaders {
    /// The first value of header `name` (ASCII case-insensitive).
    fn first(&self, name: &str) -> Option<&[u8]>;

    /// Every field in the order the engine holds them, each value of a
    /// repeated field on its own. Only sub-requests that carry the
    /// client's fields (`auth-url`, custom error pages) walk them all.
    fn each(&self, f: &mut dyn FnMut(&str, &[u8]));
}

impl RequestHeaders for http::HeaderMap {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.get(name).map(|v| v.as_bytes())
    }

    fn each(&self, f: &mut dyn FnMut(&str, &[u8])) {
        for (name, value) in self {
            f(name.as_str(), value.as_bytes());
        }
    }
}

impl RequestHeaders for &[(&str, &str)] {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_bytes())
    }

    fn each(&self, f: &mut dyn FnMut(&str, &[u8])) {
        for (name, value) in self.iter() {
            f(name, value.as_bytes());
        }
    }
}

/// A path condition.
#[derive(Debug)]
pub enum PathMatch {
    Exact(Box<str>),
    /// Element-wise, stored without trailing slash (`/` is empty).
    Prefix(Box<str>),
    /// A tenant pattern: a bounded automaton, shared by pattern text
    /// across routes and reloads.
    Regex(Arc<TenantRegex>),
}

impl PathMatch {
    pub(super) fn matches(
        &self,
        path: &str,
        budget: &mut EvalBudget,
    ) -> Result<bool, BudgetExhausted> {
        Ok(match self {
            PathMatch::Exact(p) => path == &**p,
            PathMatch::Prefix(p) => {
                path.starts_with(&**p) && matches!(path.as_bytes().get(p.len()), None | Some(b'/'))
            }
            PathMatch::Regex(r) => {
                budget.take(path.len())?;
                r.is_match(path.as_bytes())
            }
        })
    }

    /// The precedence of a path condition: Exact first, then the longest
    /// prefix, then regular expressions by length (the specification
    /// leaves their order to the implementation).
    pub(super) fn rank(&self) -> (u8, std::cmp::Reverse<usize>) {
        match self {
            PathMatch::Exact(p) => (0, std::cmp::Reverse(p.len())),
            PathMatch::Prefix(p) => (1, std::cmp::Reverse(p.len() + 1)),
            PathMatch::Regex(r) => (2, std::cmp::Reverse(r.as_str().len())),
        }
    }
}

/// A header or query parameter value condition.
#[derive(Debug)]
pub enum ValueMatch {
    Exact(Box<str>),
    Regex(Arc<TenantRegex>),
}

impl ValueMatch {
    fn matches(&self, value: &[u8], budget: &mut EvalBudget) -> Result<bool, BudgetExhausted> {
        Ok(match self {
            ValueMatch::Exact(v) => value == v.as_bytes(),
            ValueMatch::Regex(r) => {
                budget.take(value.len())?;
                std::str::from_utf8(value).is_ok() && r.is_match(value)
            }
        })
    }
}

/// One match of one rule: every condition must hold.
#[derive(Debug)]
pub struct Matcher {
    pub path: PathMatch,
    pub method: Option<Box<str>>,
    /// Names lowercase.
    pub headers: Box<[(Box<str>, ValueMatch)]>,
    pub query: Box<[(Box<str>, ValueMatch)]>,
}

impl Matcher {
    /// Whether a request matches, with a fresh evaluation budget.
    pub fn matches(&self, path: &str, facts: &RequestFacts<'_>) -> bool {
        self.matches_within(path, facts, &mut EvalBudget::default())
            .unwrap_or(false)
    }

    /// Whether a request matches, its regular expressions paid from
    /// `budget`.
    pub fn matches_within(
        &self,
        path: &str,
        facts: &RequestFacts<'_>,
        budget: &mut EvalBudget,
    ) -> Result<bool, BudgetExhausted> {
        if let Some(m) = &self.method
            && facts.method != &**m
        {
            return Ok(false);
        }
        // Header and query conditions need facts the engine may not have:
        // checked before the path, whose pattern may be the costly part.
        if !self.headers.is_empty() && facts.headers.is_none() {
            return Ok(false);
        }
        if !self.query.is_empty() && facts.query.is_none() {
            return Ok(false);
        }
        if !self.path.matches(path, budget)? {
            return Ok(false);
        }
        if let Some(headers) = facts.headers {
            for (name, v) in self.headers.iter() {
                match headers.first(name) {
                    Some(value) if v.matches(value, budget)? => {}
                    _ => return Ok(false),
                }
            }
        }
        if let Some(query) = facts.query {
            for (name, v) in self.query.iter() {
                match query_param(query, name) {
                    Some(value) if v.matches(value, budget)? => {}
                    _ => return Ok(false),
                }
            }
        }
        Ok(true)
    }
}

/// The first value of parameter `name` in `query` (names compared exactly,
/// as the specification asks; values as sent).
fn query_param<'q>(query: &'q str, name: &str) -> Option<&'q [u8]> {
    query.split('&').find_map(|pair| {
        let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
        (n == name).then_some(v.as_bytes())
    })
}

/// How many bytes one request may run through regular expressions while
/// its route is looked up. Every automaton takes one step per byte
/// (`teapot_api::regex`), so this bounds the time a request can hold a
/// serving thread, whatever the routes: 256 KiB is well under a
/// millisecond, and 100 patterns over a 2 KiB path.
pub const REGEX_BYTES_PER_REQUEST: usize = 256 * 1024;

/// What is left of a request's [`REGEX_BYTES_PER_REQUEST`].
#[derive(Debug)]
pub struct EvalBudget {
    left: usize,
}

impl Default for EvalBudget {
    fn default() -> EvalBudget {
        EvalBudget {
            left: REGEX_BYTES_PER_REQUEST,
        }
    }
}

impl EvalBudget {
    /// Takes the cost of running a pattern over `len` bytes.
    fn take(&mut self, len: usize) -> Result<(), BudgetExhausted> {
        let cost = len + 1;
        if cost > self.left {
            self.left = 0;
            return Err(BudgetExhausted);
        }
        self.left -= cost;
        Ok(())
    }
}

/// A request whose lookup would run more than [`REGEX_BYTES_PER_REQUEST`]
/// through regular expressions: it is refused, not routed by a guess.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetExhausted;
