//! Tenant regular expressions with a hard cost bound.
//!
//! Every replica evaluates every tenant's regular expressions on its
//! serving threads, so a pattern's cost is paid by all tenants. A
//! backtracking or lazy-DFA engine lets a short pattern such as
//! `/(?:[\s\S]*a[\s\S]{60})` cost seconds per request, and `\w{4}` (Unicode)
//! compile to hundreds of KiB. Here a pattern is compiled, once, to a fully
//! built dense DFA within [`MAX_AUTOMATON_BYTES`]: matching is one table
//! step per byte, whatever the pattern, and a pattern whose automaton does
//! not fit is refused, at admission with the field named, and again by the
//! proxy's re-check.
//!
//! - [`TenantRegex::compile`]: the one way a tenant pattern becomes a
//!   matcher; compiled patterns are shared by pattern text across objects
//!   and reloads ([`cache`](self)), so an unrelated tenant's change
//!   compiles none.
//! - [`route_regexes`]: every pattern a route carries, with its field, the
//!   same list the proxy compiles and the budget counts ([`RegexCost`],
//!   `limits.maxRegexes` and `limits.maxRegexBytes`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};

use parking_lot::Mutex;

use k8s_openapi::api::networking::v1::Ingress;
use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::nfa::thompson::{self, pikevm::PikeVM};
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input, MatchKind};
use teapot_gateway_api::generated::grpc_routes::{GrpcRoute, GrpcRouteRulesMatchesMethodType};
use teapot_gateway_api::generated::http_routes::{
    HttpRoute, HttpRouteRulesMatchesHeadersType, HttpRouteRulesMatchesPathType,
    HttpRouteRulesMatchesQueryParamsType,
};

/// Longest pattern a tenant may write.
pub const MAX_PATTERN_LEN: usize = 1024;
/// The most memory one pattern's automaton may take. A pattern the DFA
/// cannot represent within it (exponential state blow-up, large Unicode
/// classes repeated) is refused rather than matched slowly.
pub const MAX_AUTOMATON_BYTES: usize = 256 * 1024;
/// Memory the determinization may use on the way (it is refused past it,
/// which bounds the compile's time too).
const DETERMINIZE_BYTES: usize = 4 * MAX_AUTOMATON_BYTES;
/// The NFA the DFA is built from.
const NFA_BYTES: usize = MAX_AUTOMATON_BYTES;
/// Refused patterns remembered, so one written again is not compiled again.
const REFUSED_REMEMBERED: usize = 4096;
/// Sizes of compiled patterns remembered ([`cost`] without compiling).
const SIZES_REMEMBERED: usize = 65_536;

/// Why a pattern is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegexError {
    #[error("regular expression of {len} bytes, more than {MAX_PATTERN_LEN}")]
    TooLong { len: usize },
    #[error("regular expression {pattern:?} is not valid: {reason}")]
    Invalid { pattern: String, reason: String },
    #[error(
        "regular expression {pattern:?} needs a matching automaton larger than {} KiB; write a more specific pattern (an ASCII class such as [A-Za-z0-9_] instead of \\w, fewer or shorter repetitions of wide classes)",
        MAX_AUTOMATON_BYTES / 1024
    )]
    TooLarge { pattern: String },
}

/// A compiled tenant pattern, matched against a whole value: the pattern
/// `p` matches `v` when `^(?:p)$` would.
#[derive(Debug)]
pub struct TenantRegex {
    pattern: Box<str>,
    dfa: dense::DFA<Vec<u32>>,
}

impl TenantRegex {
    /// Compiles `pattern`, or shares the automaton of the same pattern
    /// compiled before and still in use.
    pub fn compile(pattern: &str) -> Result<Arc<TenantRegex>, RegexError> {
        cache::get_or_compile(pattern)
    }

    fn build(pattern: &str) -> Result<TenantRegex, RegexError> {
        if pattern.len() > MAX_PATTERN_LEN {
            return Err(RegexError::TooLong { len: pattern.len() });
        }
        let dfa = dense::Builder::new()
            .configure(
                dense::Config::new()
                    // Every thread is kept, so a match that ends at the end
                    // of the value is seen whichever alternative wins.
                    .match_kind(MatchKind::All)
                    .start_kind(StartKind::Anchored)
                    .dfa_size_limit(Some(MAX_AUTOMATON_BYTES))
                    .determinize_size_limit(Some(DETERMINIZE_BYTES))
                    // `\b` builds; on a non-ASCII byte the DFA gives up and
                    // the value does not match (docs/gateway-api.md).
                    .unicode_word_boundary(true),
            )
            .syntax(syntax::Config::new())
            .thompson(thompson::Config::new().nfa_size_limit(Some(NFA_BYTES)))
            .build(pattern)
            .map_err(|e| {
                // The NFA's own limit is reported as a plain build error.
                if e.is_size_limit_exceeded() || error_reason(&e).contains("exceeded limit") {
                    RegexError::TooLarge {
                        pattern: pattern.to_string(),
                    }
                } else {
                    RegexError::Invalid {
                        pattern: pattern.to_string(),
                        reason: error_reason(&e),
                    }
                }
            })?;
        Ok(TenantRegex {
            pattern: pattern.into(),
            dfa,
        })
    }

    /// Whether the whole of `value` matches: one automaton step per byte.
    pub fn is_match(&self, value: &[u8]) -> bool {
        let dfa = &self.dfa;
        let Ok(mut state) = dfa.start_state_forward(&Input::new(value).anchored(Anchored::Yes))
        else {
            return false;
        };
        for &b in value {
            state = dfa.next_state(state, b);
            if dfa.is_special_state(state) && (dfa.is_dead_state(state) || dfa.is_quit_state(state))
            {
                return false;
            }
        }
        // A DFA reports a match one step late: after the end of input.
        dfa.is_match_state(dfa.next_eoi_state(state))
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Bytes the automaton holds.
    pub fn memory(&self) -> usize {
        self.dfa.memory_usage() + self.pattern.len()
    }
}

/// The first line of a build error's chain: the parser's message without
/// its multi-line rendering of the pattern.
fn error_reason(e: &dense::BuildError) -> String {
    let mut reason = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        reason = s.to_string();
        source = s.source();
    }
    reason
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .trim_start_matches("error: ")
        .to_string()
}

/// The most memory the capture automaton of an ingress-nginx regex path
/// may take. Captures need an NFA simulation, whose work is the path's
/// length times the automaton's states (no blow-up, but no one-step-per-
/// byte either), so its bound is far below [`MAX_AUTOMATON_BYTES`]: about a
/// thousand states, where `/api(/|$)(.*)` needs thirty.
pub const MAX_CAPTURE_NFA_BYTES: usize = 32 * 1024;

/// An ingress-nginx regular-expression path (`use-regex`,
/// `rewrite-target`): matched case-insensitively from the start of the
/// request path, as nginx's `location ~* "^<path>"`, the rest of the path
/// free. The match is decided by a bounded DFA ([`TenantRegex`]); the
/// capture groups `rewrite-target` reads (`$1`..`$9`) are taken by a
/// PikeVM whose automaton is bounded by [`MAX_CAPTURE_NFA_BYTES`], run only
/// for a request the DFA matched.
#[derive(Debug)]
pub struct PathRegex {
    gate: Arc<TenantRegex>,
    captures: PikeVM,
    groups: usize,
}

impl PathRegex {
    /// Compiles an Ingress path written as a regular expression, or shares
    /// the one compiled before for the same text and still in use (a
    /// compile of every Ingress builds none again); the pattern must stand
    /// alone (parse by itself) before it is wrapped.
    pub fn compile(pattern: &str) -> Result<Arc<PathRegex>, RegexError> {
        static LIVE: LazyLock<Mutex<HashMap<Box<str>, Weak<PathRegex>>>> =
            LazyLock::new(Mutex::default);
        if let Some(r) = LIVE.lock().get(pattern).and_then(Weak::upgrade) {
            return Ok(r);
        }
        let built = Arc::new(PathRegex::build(pattern)?);
        let mut live = LIVE.lock();
        if live.len() >= SIZES_REMEMBERED {
            live.retain(|_, w| w.strong_count() > 0);
        }
        live.insert(pattern.into(), Arc::downgrade(&built));
        Ok(built)
    }

    fn build(pattern: &str) -> Result<PathRegex, RegexError> {
        let hir = standalone_with(pattern, true)?;
        let groups = hir.properties().explicit_captures_len();
        let gate = TenantRegex::compile(&path_gate_pattern(pattern))?;
        let captures = PikeVM::builder()
            .syntax(syntax::Config::new().case_insensitive(true))
            .thompson(thompson::Config::new().nfa_size_limit(Some(MAX_CAPTURE_NFA_BYTES)))
            .build(pattern)
            .map_err(|_| RegexError::TooLarge {
                pattern: pattern.to_string(),
            })?;
        Ok(PathRegex {
            gate,
            captures,
            groups,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.gate.pattern[GATE_PREFIX.len()..self.gate.pattern.len() - GATE_SUFFIX.len()]
    }

    /// Bytes the matching automaton holds (the capture automaton is
    /// bounded apart, [`MAX_CAPTURE_NFA_BYTES`]).
    pub fn memory(&self) -> usize {
        self.gate.memory()
    }

    /// How many capture groups the pattern has (`$1`..`$groups`).
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// Whether the path starts with a match: one DFA step per byte.
    pub fn is_match(&self, path: &[u8]) -> bool {
        self.gate.is_match(path)
    }

    /// `target` with each `$N` replaced by the text of group N of the match
    /// at the start of `path` (an unmatched group is empty), as nginx's
    /// `rewrite` writes its replacement; `None` when `path` does not match.
    pub fn rewrite(&self, path: &str, target: &str) -> Option<String> {
        if !self.is_match(path.as_bytes()) {
            return None;
        }
        let mut cache = self.captures.create_cache();
        let mut caps = self.captures.create_captures();
        let input = Input::new(path).anchored(Anchored::Yes);
        self.captures.captures(&mut cache, input, &mut caps);
        if !caps.is_match() {
            return None;
        }
        let mut out = String::with_capacity(target.len() + path.len());
        let mut rest = target;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            match after.as_bytes().first() {
                Some(d @ b'1'..=b'9') => {
                    let group = usize::from(d - b'0');
                    if let Some(span) = caps.get_group(group) {
                        out.push_str(&path[span.range()]);
                    }
                    rest = &after[1..];
                }
                _ => {
                    out.push('$');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        Some(out)
    }
}

/// The `$N` group numbers `target` refers to, in order.
pub fn target_groups(target: &str) -> impl Iterator<Item = usize> + '_ {
    target
        .as_bytes()
        .windows(2)
        .filter(|w| w[0] == b'$' && w[1].is_ascii_digit() && w[1] != b'0')
        .map(|w| usize::from(w[1] - b'0'))
}

const GATE_PREFIX: &str = "(?i:";
const GATE_SUFFIX: &str = ")[\\s\\S]*";

/// The whole-value pattern of an Ingress regex path: the path
/// case-insensitively, then anything.
pub fn path_gate_pattern(pattern: &str) -> String {
    format!("{GATE_PREFIX}{pattern}{GATE_SUFFIX}")
}

/// Compiled patterns shared by text. Entries hold the automaton weakly:
/// it lives as long as a snapshot (or an admission in progress) uses it,
/// so the cache never keeps what no route needs any more.
pub(crate) mod cache {
    use super::*;

    #[derive(Default)]
    struct Cache {
        live: HashMap<Box<str>, Weak<TenantRegex>>,
        /// Entries when `live` was last swept of dead ones.
        swept: usize,
        refused: HashMap<Box<str>, RegexError>,
        /// Memory of each pattern compiled, kept after its automaton is
        /// gone: the webhook weighs every tenant's patterns on each state
        /// rebuild without compiling them again.
        sizes: HashMap<Box<str>, usize>,
    }

    static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(Mutex::default);

    pub(super) fn get_or_compile(pattern: &str) -> Result<Arc<TenantRegex>, RegexError> {
        {
            let cache = CACHE.lock();
            if let Some(r) = cache.live.get(pattern).and_then(Weak::upgrade) {
                return Ok(r);
            }
            if let Some(e) = cache.refused.get(pattern) {
                return Err(e.clone());
            }
        }
        // Compiled without the lock: admissions and compiles on other
        // threads do not wait for this one.
        let built = TenantRegex::build(pattern).map(Arc::new);
        let mut cache = CACHE.lock();
        match &built {
            Ok(r) => {
                if let Some(other) = cache.live.get(pattern).and_then(Weak::upgrade) {
                    return Ok(other);
                }
                cache.live.insert(pattern.into(), Arc::downgrade(r));
                if cache.sizes.len() >= SIZES_REMEMBERED {
                    cache.sizes.clear();
                }
                cache.sizes.insert(pattern.into(), r.memory());
                if cache.live.len() > 2 * cache.swept + 64 {
                    cache.live.retain(|_, w| w.strong_count() > 0);
                    cache.swept = cache.live.len();
                }
            }
            Err(e) => {
                if cache.refused.len() >= REFUSED_REMEMBERED {
                    cache.refused.clear();
                }
                cache.refused.insert(pattern.into(), e.clone());
            }
        }
        built
    }

    /// The memory `pattern`'s automaton takes, compiling it only when it
    /// was never compiled (or forgotten).
    pub(super) fn memory_of(pattern: &str) -> Result<usize, RegexError> {
        {
            let cache = CACHE.lock();
            if let Some(size) = cache.sizes.get(pattern) {
                return Ok(*size);
            }
            if let Some(e) = cache.refused.get(pattern) {
                return Err(e.clone());
            }
        }
        get_or_compile(pattern).map(|r| r.memory())
    }

    /// Patterns ever compiled, refused or not, and still remembered
    /// (tests: what a check compiled).
    #[cfg(test)]
    pub(crate) fn compiled(pattern: &str) -> bool {
        let cache = CACHE.lock();
        cache.sizes.contains_key(pattern) || cache.refused.contains_key(pattern)
    }

    /// Patterns whose automaton is alive (tests).
    #[cfg(test)]
    pub(super) fn alive(pattern: &str) -> bool {
        let cache = CACHE.lock();
        cache
            .live
            .get(pattern)
            .is_some_and(|w| w.strong_count() > 0)
    }
}

/// What a tenant's patterns cost a replica: how many, and the memory of
/// their automata.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegexCost {
    pub count: u32,
    pub bytes: u64,
}

impl RegexCost {
    pub fn plus(self, other: RegexCost) -> RegexCost {
        RegexCost {
            count: self.count.saturating_add(other.count),
            bytes: self.bytes.saturating_add(other.bytes),
        }
    }

    pub fn exceeds(self, max: RegexCost) -> bool {
        self.count > max.count || self.bytes > max.bytes
    }
}

/// One pattern of a route and where it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutePattern {
    /// The field, as violations name it (`spec.rules[0].matches[1].path.value`).
    pub field: String,
    pub pattern: String,
}

/// The path pattern of a GRPCRoute method match, when it needs one: an
/// exact service and method are a path compare, an exact service alone a
/// prefix; every other form is a pattern over `/SERVICE/METHOD`.
pub fn grpc_method_pattern(
    service: Option<&str>,
    method: Option<&str>,
    is_regex: bool,
) -> Option<String> {
    match (service, method, is_regex) {
        (Some(_), _, false) => None,
        (None, Some(m), false) => Some(format!("/[^/]+/{}", regex_syntax::escape(m))),
        (s, m, _) => Some(format!(
            "/{}/{}",
            s.unwrap_or("[^/]+"),
            m.unwrap_or("[^/]+")
        )),
    }
}

/// Every pattern an HTTPRoute carries: RegularExpression path, header and
/// query parameter matches.
pub fn http_route_regexes(route: &HttpRoute) -> Vec<RoutePattern> {
    let mut out = Vec::new();
    for (i, rule) in route.spec.rules.iter().flatten().enumerate() {
        for (j, m) in rule.matches.iter().flatten().enumerate() {
            let at = format!("spec.rules[{i}].matches[{j}]");
            if let Some(p) = &m.path
                && matches!(
                    p.r#type,
                    Some(HttpRouteRulesMatchesPathType::RegularExpression)
                )
            {
                out.push(RoutePattern {
                    field: format!("{at}.path.value"),
                    pattern: p.value.clone().unwrap_or_else(|| "/".into()),
                });
            }
            for (k, h) in m.headers.iter().flatten().enumerate() {
                if matches!(
                    h.r#type,
                    Some(HttpRouteRulesMatchesHeadersType::RegularExpression)
                ) {
                    out.push(RoutePattern {
                        field: format!("{at}.headers[{k}].value"),
                        pattern: h.value.clone(),
                    });
                }
            }
            for (k, q) in m.query_params.iter().flatten().enumerate() {
                if matches!(
                    q.r#type,
                    Some(HttpRouteRulesMatchesQueryParamsType::RegularExpression)
                ) {
                    out.push(RoutePattern {
                        field: format!("{at}.queryParams[{k}].value"),
                        pattern: q.value.clone(),
                    });
                }
            }
        }
    }
    out
}

/// Every pattern a GRPCRoute carries: method matches that need one
/// ([`grpc_method_pattern`]) and RegularExpression header matches.
pub fn grpc_route_regexes(route: &GrpcRoute) -> Vec<RoutePattern> {
    use teapot_gateway_api::generated::grpc_routes::GrpcRouteRulesMatchesHeadersType;
    let mut out = Vec::new();
    for (i, rule) in route.spec.rules.iter().flatten().enumerate() {
        for (j, m) in rule.matches.iter().flatten().enumerate() {
            let at = format!("spec.rules[{i}].matches[{j}]");
            if let Some(method) = &m.method {
                let is_regex = matches!(
                    method.r#type,
                    Some(GrpcRouteRulesMatchesMethodType::RegularExpression)
                );
                if let Some(pattern) = grpc_method_pattern(
                    method.service.as_deref(),
                    method.method.as_deref(),
                    is_regex,
                ) {
                    out.push(RoutePattern {
                        field: format!("{at}.method"),
                        pattern,
                    });
                }
            }
            for (k, h) in m.headers.iter().flatten().enumerate() {
                if matches!(
                    h.r#type,
                    Some(GrpcRouteRulesMatchesHeadersType::RegularExpression)
                ) {
                    out.push(RoutePattern {
                        field: format!("{at}.headers[{k}].value"),
                        pattern: h.value.clone(),
                    });
                }
            }
        }
    }
    out
}

/// ingress-nginx's `use-regex`.
pub const USE_REGEX: &str = "nginx.ingress.kubernetes.io/use-regex";
/// ingress-nginx's `rewrite-target`.
pub const REWRITE_TARGET: &str = "nginx.ingress.kubernetes.io/rewrite-target";

/// Whether an Ingress's paths are regular expressions: `use-regex: "true"`,
/// or a `rewrite-target` that differs from a path (ingress-nginx makes a
/// location a regex for either; a target equal to the path rewrites
/// nothing).
pub fn ingress_uses_regex(ingress: &Ingress) -> bool {
    let annotations = ingress.metadata.annotations.as_ref();
    let get = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    if get(USE_REGEX) == Some("true") {
        return true;
    }
    get(REWRITE_TARGET).is_some_and(|target| ingress_paths(ingress).any(|(_, path)| path != target))
}

/// ingress-nginx's `canary-by-header-pattern`.
pub const CANARY_PATTERN: &str = "nginx.ingress.kubernetes.io/canary-by-header-pattern";

/// The whole-value pattern of `canary-by-header-pattern`: the value
/// contains a match, as nginx's `ngx.re.match` searches it.
pub fn contains_pattern(pattern: &str) -> String {
    format!("[\\s\\S]*(?:{pattern})[\\s\\S]*")
}

/// Compiles `canary-by-header-pattern` ([`contains_pattern`]); the
/// pattern must parse by itself first, so that it cannot close the
/// wrapper's group or class and match something else.
pub fn compile_contains(pattern: &str) -> Result<Arc<TenantRegex>, RegexError> {
    standalone(pattern)?;
    TenantRegex::compile(&contains_pattern(pattern))
}

/// `pattern` parses by itself (case-insensitively when `ignore_case`).
fn standalone_with(pattern: &str, ignore_case: bool) -> Result<regex_syntax::hir::Hir, RegexError> {
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(RegexError::TooLong { len: pattern.len() });
    }
    regex_syntax::ParserBuilder::new()
        .case_insensitive(ignore_case)
        .build()
        .parse(pattern)
        .map_err(|e| RegexError::Invalid {
            pattern: pattern.to_string(),
            reason: e
                .to_string()
                .lines()
                .rfind(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .trim_start_matches("error: ")
                .to_string(),
        })
}

fn standalone(pattern: &str) -> Result<(), RegexError> {
    standalone_with(pattern, false).map(|_| ())
}

/// Every path of an Ingress with its field (`spec.rules[0].http.paths[1].path`);
/// a path left out is `/`.
pub fn ingress_paths(ingress: &Ingress) -> impl Iterator<Item = (String, &str)> {
    ingress
        .spec
        .iter()
        .flat_map(|s| s.rules.iter().flatten())
        .enumerate()
        .flat_map(|(i, rule)| {
            rule.http
                .iter()
                .flat_map(|h| &h.paths)
                .enumerate()
                .map(move |(j, p)| {
                    (
                        format!("spec.rules[{i}].http.paths[{j}].path"),
                        p.path.as_deref().unwrap_or("/"),
                    )
                })
        })
}

/// The patterns a regex-path Ingress ([`ingress_uses_regex`]) carries, as
/// compiled for matching ([`path_gate_pattern`]): what they cost the
/// tenant's budget.
pub fn ingress_regexes(ingress: &Ingress) -> Vec<RoutePattern> {
    let mut out = Vec::new();
    if ingress_uses_regex(ingress) {
        out.extend(ingress_paths(ingress).map(|(field, path)| RoutePattern {
            field,
            pattern: path_gate_pattern(path),
        }));
    }
    let annotations = ingress.metadata.annotations.as_ref();
    for key in [CANARY_PATTERN, crate::annotations::AUTH_TLS_MATCH_CN] {
        if let Some(pattern) = annotations.and_then(|a| a.get(key)) {
            out.push(RoutePattern {
                field: format!("metadata.annotations[{key:?}]"),
                pattern: contains_pattern(pattern),
            });
        }
    }
    out
}

/// The cost of `patterns`: every one that compiles counts (a refused one
/// is reported on its own field and never served).
pub fn cost(patterns: &[RoutePattern]) -> RegexCost {
    patterns
        .iter()
        .filter_map(|p| cache::memory_of(&p.pattern).ok())
        .fold(RegexCost::default(), |c, bytes| {
            c.plus(RegexCost {
                count: 1,
                bytes: bytes as u64,
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn re(p: &str) -> Arc<TenantRegex> {
        TenantRegex::compile(p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    #[test]
    fn matches_the_whole_value_like_an_anchored_regex() {
        let cases: &[(&str, &str)] = &[
            ("/api/v[0-9]+/.*", "/api/v12/users"),
            ("/api/v[0-9]+/.*", "/api/v/users"),
            ("/api/v[0-9]+/.*", "x/api/v1/"),
            ("a|ab", "ab"),
            ("a|ab", "a"),
            ("a|ab", "abc"),
            ("(?i)/Foo", "/fOO"),
            ("/caf\u{e9}", "/caf\u{e9}"),
            ("\\w+", "\u{e9}t\u{e9}"),
            ("/.*", "/any\nthing"),
            ("", ""),
            ("", "x"),
            ("/[^/]+/Ping", "/echo.Echo/Ping"),
            ("/[^/]+/Ping", "/a/b/Ping"),
            ("\\d{3}", "123"),
            ("\\bfoo\\b", "foo"),
        ];
        for (pattern, value) in cases {
            let want = regex::Regex::new(&format!("^(?:{pattern})$"))
                .unwrap()
                .is_match(value);
            assert_eq!(
                re(pattern).is_match(value.as_bytes()),
                want,
                "{pattern:?} on {value:?}"
            );
        }
    }

    /// The review's stall: a lazy DFA re-determinizes on every byte of a
    /// long path; the full DFA is refused at compile instead.
    #[test]
    fn patterns_whose_automaton_blows_up_are_refused() {
        for p in [
            "/(?:[\\s\\S]*a[\\s\\S]{60})",
            "(?:.*a.{40})",
            "\\w{4}\\w{4}\\w{4}\\w{4}N",
        ] {
            match TenantRegex::compile(p) {
                Err(RegexError::TooLarge { .. }) => {}
                other => panic!("{p}: {other:?}"),
            }
        }
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let e = TenantRegex::compile("/(unclosed").unwrap_err();
        assert!(
            matches!(&e, RegexError::Invalid { reason, .. } if reason.contains("unclosed")),
            "{e}"
        );
        let long = "a".repeat(MAX_PATTERN_LEN + 1);
        assert_eq!(
            TenantRegex::compile(&long).unwrap_err(),
            RegexError::TooLong {
                len: MAX_PATTERN_LEN + 1
            }
        );
        assert!(
            TenantRegex::compile("(?:.*a.{40})")
                .unwrap_err()
                .to_string()
                .contains("KiB")
        );
    }

    #[test]
    fn every_automaton_fits_its_bound() {
        for p in [
            "/\\w{4}N",
            "\\w+",
            "/api/(v1|v2|v3)/[a-z]+/[0-9]{1,8}",
            ".*",
        ] {
            if let Ok(r) = TenantRegex::compile(p) {
                assert!(r.memory() <= MAX_AUTOMATON_BYTES + p.len(), "{p}");
            }
        }
    }

    #[test]
    fn the_same_pattern_is_compiled_once_while_used() {
        let p = "/shared/[a-z]+/cache-test";
        let a = re(p);
        let b = re(p);
        assert!(Arc::ptr_eq(&a, &b));
        drop((a, b));
        assert!(!cache::alive(p), "nothing keeps an unused automaton");
    }

    #[test]
    fn regex_paths_match_from_the_start_case_insensitively_and_rewrite_with_captures() {
        let r = PathRegex::compile("/something(/|$)(.*)").unwrap();
        assert_eq!(r.groups(), 2);
        assert_eq!(r.as_str(), "/something(/|$)(.*)");
        // Compiled once while in use.
        assert!(Arc::ptr_eq(
            &r,
            &PathRegex::compile("/something(/|$)(.*)").unwrap()
        ));
        for (path, want) in [
            ("/something", Some("/")),
            ("/something/", Some("/")),
            ("/something/new", Some("/new")),
            ("/SomeThing/New/x", Some("/New/x")),
            ("/somethingelse", None),
            ("/x/something/new", None),
        ] {
            assert_eq!(r.rewrite(path, "/$2").as_deref(), want, "{path}");
        }
        // A prefix match: the rest of the path is free, `$` and unknown
        // forms are written as they are, `$0` is not a group.
        let r = PathRegex::compile("/foo/bar/(.+)").unwrap();
        assert!(r.is_match(b"/foo/bar/bar/baz"));
        assert_eq!(
            r.rewrite("/foo/bar/bar", "/new/backend/$1/$x$0$")
                .as_deref(),
            Some("/new/backend/bar/$x$0$")
        );
        // No group: the whole path is replaced, as nginx's `rewrite`.
        let r = PathRegex::compile("/").unwrap();
        assert_eq!(
            r.rewrite("/a/b", "/new/backend").as_deref(),
            Some("/new/backend")
        );
        assert_eq!(target_groups("/$1/$2/$0/$").collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn regex_paths_stay_within_the_bounds() {
        assert!(matches!(
            PathRegex::compile("/(unclosed"),
            Err(RegexError::Invalid { .. })
        ));
        // A pattern that only parses inside the wrapper is refused.
        assert!(matches!(
            PathRegex::compile("/a)|(.*"),
            Err(RegexError::Invalid { .. })
        ));
        // The DFA's bound, and the far smaller one of the captures.
        assert!(matches!(
            PathRegex::compile("/(?:[\\s\\S]*a[\\s\\S]{60})"),
            Err(RegexError::TooLarge { .. })
        ));
        assert!(matches!(
            PathRegex::compile("/([a-z]{1,300}){4}"),
            Err(RegexError::TooLarge { .. })
        ));
        assert!(matches!(
            PathRegex::compile(&"a".repeat(MAX_PATTERN_LEN + 1)),
            Err(RegexError::TooLong { .. })
        ));
    }

    #[test]
    fn ingress_regex_paths_and_their_cost() {
        let ingress = |annotations: &str, paths: &str| -> Ingress {
            serde_yaml::from_str(&format!(
                "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: i, namespace: n, annotations: {{{annotations}}}}}\nspec:\n  rules:\n  - http:\n      paths: [{paths}]\n"
            ))
            .unwrap()
        };
        let paths =
            "{path: /a(.*), pathType: Prefix, backend: {service: {name: w, port: {number: 80}}}}";
        assert!(!ingress_uses_regex(&ingress("", paths)));
        assert!(ingress_regexes(&ingress("", paths)).is_empty());
        let with = ingress("nginx.ingress.kubernetes.io/use-regex: \"true\"", paths);
        assert!(ingress_uses_regex(&with));
        let got = ingress_regexes(&with);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].field, "spec.rules[0].http.paths[0].path");
        assert_eq!(got[0].pattern, path_gate_pattern("/a(.*)"));
        assert!(ingress_uses_regex(&ingress(
            "nginx.ingress.kubernetes.io/rewrite-target: /$1",
            paths
        )));
        // A target equal to the path rewrites nothing: not a regex.
        assert!(!ingress_uses_regex(&ingress(
            "nginx.ingress.kubernetes.io/rewrite-target: /a(.*)",
            paths
        )));
    }

    #[test]
    fn grpc_method_forms() {
        assert_eq!(grpc_method_pattern(Some("a.S"), Some("M"), false), None);
        assert_eq!(grpc_method_pattern(Some("a.S"), None, false), None);
        assert_eq!(
            grpc_method_pattern(None, Some("M.x"), false).as_deref(),
            Some("/[^/]+/M\\.x")
        );
        assert_eq!(
            grpc_method_pattern(Some("a\\..*"), None, true).as_deref(),
            Some("/a\\..*/[^/]+")
        );
    }

    #[test]
    fn route_patterns_name_their_fields() {
        let route: HttpRoute = serde_yaml::from_str(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: n}\nspec:\n  rules:\n  - matches:\n    - path: {type: PathPrefix, value: /a}\n    - path: {type: RegularExpression, value: \"/b.*\"}\n      headers: [{name: x, type: RegularExpression, value: \"v[0-9]\"}, {name: y, value: exact}]\n      queryParams: [{name: q, type: RegularExpression, value: \"[a-z]+\"}]\n",
        )
        .unwrap();
        let got = http_route_regexes(&route);
        let fields: Vec<&str> = got.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.rules[0].matches[1].path.value",
                "spec.rules[0].matches[1].headers[0].value",
                "spec.rules[0].matches[1].queryParams[0].value",
            ]
        );
        let c = cost(&got);
        assert_eq!(c.count, 3);
        assert!(c.bytes > 0);
    }
}
