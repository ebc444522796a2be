//! The step vocabulary: step text -> [`Step`].
//!
//! Every regular expression of the upstream suite
//! (`kubernetes-sigs/ingress-controller-conformance`, `test/conformance/*/feature.go`)
//! is here verbatim, plus a few header assertions in the same style that the
//! upstream suite does not have (marked "extension" in [`STEP_DEFS`]).
//! Text that matches none of them is an *undefined step*, which fails the
//! scenario: nothing is ever skipped silently.

use std::sync::LazyLock;

use regex::{Captures, Regex};

/// How a single-header assertion compares values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderCheck {
    /// One of the header's values equals the expected text (`*` = present).
    Equals,
    /// One of the header's values contains the expected text.
    Contains,
    /// The header is present, whatever its value.
    Present,
    /// The header is absent.
    Absent,
    /// The header is present and none of its values contains the text.
    NotContains,
}

/// A recognised step with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `a new random namespace`
    NewNamespace,
    /// `an Ingress resource named "N" with this spec:` + docstring (an Ingress spec).
    IngressNamedWithSpec {
        /// The Ingress's name.
        name: String,
    },
    /// `an Ingress resource` + docstring (a whole Ingress manifest).
    IngressResource,
    /// `an Ingress resource in a new random namespace` + docstring (a whole manifest).
    IngressInNewNamespace,
    /// `a self-signed TLS secret named "N" for the "H" hostname`
    TlsSecret {
        /// The Secret's name.
        name: String,
        /// The certificate's DNS name.
        host: String,
    },
    /// `The Ingress status shows the IP address or FQDN where it is exposed`
    StatusShowsAddress,
    /// `The Ingress status should not contain the IP address or FQDN`
    StatusHasNoAddress,
    /// `I send a "M" request to http://"H"/"P"`
    SendRequestParts {
        /// HTTP method.
        method: String,
        /// Host (may be empty: then the proxy's address is the Host).
        host: String,
        /// Path, with or without the leading slash.
        path: String,
    },
    /// `I send a "M" request to "URL"`
    SendRequest {
        /// HTTP method.
        method: String,
        /// Absolute URL.
        url: String,
    },
    /// (extension) `I send a "M" request to "URL" with the header "K" set to "V"`,
    /// `I send a "M" request to "URL" without following redirects`
    SendRequestWith {
        /// HTTP method.
        method: String,
        /// Absolute URL.
        url: String,
        /// More request headers, in order.
        headers: Vec<(String, String)>,
        /// Whether a redirect is followed.
        follow: bool,
        /// A request body of this many bytes (0: none).
        body: usize,
        /// Whether the scenario's client certificate is presented (https).
        client_certificate: bool,
    },
    /// (extension) `I send a "M" request to "URL" with the cookie "NAME" of
    /// the last response`: the cookie the last response set, sent back
    /// as a client keeps it (ingress-nginx's `WithCookie`).
    SendRequestWithCookie {
        /// HTTP method.
        method: String,
        /// Absolute URL.
        url: String,
        /// The cookie's name.
        cookie: String,
    },
    /// `I send N requests to "URL"`
    SendRequests {
        /// How many GET requests.
        count: usize,
        /// Absolute URL.
        url: String,
    },
    /// `all the responses status-code must be S and the response body should contain the IP address of P different Kubernetes pods`
    AllResponses {
        /// The status every response must have.
        status: u16,
        /// How many distinct pods must have answered.
        pods: usize,
    },
    /// `the secure connection must verify the "H" hostname`
    VerifyTlsHostname {
        /// The name the presented certificate must be valid for.
        host: String,
    },
    /// `the response status-code must be S`
    ResponseStatus(u16),
    /// `the response must be served by the "S" service`
    ServedBy(String),
    /// `the response proto must be "P"`
    ResponseProto(String),
    /// `the response headers must contain <key> with matching <value>` + table
    ResponseHeadersTable,
    /// (extension) `the response header "K" must be/contain "V"`, `... must (not) be present`
    ResponseHeader {
        /// Header name (case-insensitive).
        name: String,
        /// Expected value (empty for presence checks).
        value: String,
        /// How to compare.
        check: HeaderCheck,
    },
    /// `the request method must be "M"`
    RequestMethod(String),
    /// `the request path must be "P"`
    RequestPath(String),
    /// `the request proto must be "P"`
    RequestProto(String),
    /// `the request host must be "H"`
    RequestHost(String),
    /// `the request headers must contain <key> with matching <value>` + table
    RequestHeadersTable,
    /// (extension) `the request header "K" must be/contain "V"`, `... must (not) be present`
    RequestHeader {
        /// Header name (case-insensitive).
        name: String,
        /// Expected value (empty for presence checks).
        value: String,
        /// How to compare.
        check: HeaderCheck,
    },
    /// (extension) `an httpbun authentication service`: ingress-nginx's
    /// e2e httpbun, whose address Ingress docstrings name as `${HTTPBUN}`.
    AuthService,
    /// (extension) `a Secret resource` / `a ConfigMap resource` + docstring
    /// (a whole manifest, moved into the scenario's namespace).
    ObjectResource {
        /// `Secret` or `ConfigMap`.
        kind: String,
    },
    /// (extension) `the Ingress resource named "N" is updated:` + docstring
    /// (the whole new manifest, written over the Ingress's file, as a
    /// `kubectl apply` of the changed object).
    UpdateIngress {
        /// The Ingress's name.
        name: String,
    },
    /// (extension) `a mutual TLS secret named "N" for the "H" hostname`:
    /// ingress-nginx's `CreateIngressMASecret`, a Secret with a server
    /// certificate for H, its key and the CA (`ca.crt`) that signed it and
    /// the client certificate (CN `H-client`) the scenario presents.
    MutualTlsSecret {
        /// The Secret's name.
        name: String,
        /// The server certificate's DNS name.
        host: String,
    },
    /// (extension) `the response body must (not) contain "T"`
    ResponseBody {
        /// The text.
        text: String,
        /// Whether the body must contain it (else must not).
        contains: bool,
    },
    /// (extension) `the response must have taken at least N ms`: from
    /// sending the request to the end of the response body.
    TookAtLeast {
        /// Milliseconds.
        millis: u64,
    },
    /// (extension) `the httpbun authentication service is stopped`: its
    /// listener and every connection it holds close.
    StopAuthService,
    /// (extension) `the "S" service is the httpbun service`: the Service
    /// S that a later Ingress names gets the authentication service's
    /// address as its endpoint instead of an echo pod (ingress-nginx's
    /// e2e cases that use httpbun as a backend: `/status/CODE`).
    HttpbunBackend(String),
    /// (extension) `I send a gRPC request to "URL"` (optionally `with the
    /// header "K" set to "V"`): a unary call as a gRPC client makes it,
    /// HTTP/2 (h2c on http, ALPN h2 on https), `POST` with
    /// `content-type: application/grpc`, `te: trailers` and an empty
    /// message. The backend's echo answers what it received.
    SendGrpc {
        /// Absolute URL (its path is the gRPC method).
        url: String,
        /// More request headers (metadata), in order.
        headers: Vec<(String, String)>,
    },
    /// (extension) `the gRPC call must succeed` (200 and `grpc-status`
    /// absent or 0) / `must fail` (anything else, a refused or reset
    /// connection included).
    GrpcOutcome {
        /// Whether the call must succeed.
        succeed: bool,
    },
    /// (extension) `I send N concurrent requests to "URL" with the header
    /// "K" set to "V"`: N GET requests at once, each on its own connection.
    SendConcurrent {
        /// How many.
        count: usize,
        /// Absolute URL.
        url: String,
        /// More request headers.
        headers: Vec<(String, String)>,
    },
    /// (extension) `N of the responses status-code must be S`: in the last
    /// batch, exactly N responses have status S.
    ResponsesWithStatus {
        /// How many.
        count: usize,
        /// The status.
        status: u16,
    },
    /// (extension) `the responses must come from N different services, each
    /// at least M times`: of the last `I send N requests` batch.
    ServiceSpread {
        /// How many distinct services answered.
        services: usize,
        /// The fewest responses any of them gave.
        at_least: usize,
    },
    /// (extension) `the pod that served the response is remembered as "N"`
    RememberPod(String),
    /// (extension) `the response must (not) be served by the pod "N"`: the
    /// pod remembered under N.
    ServedByPod {
        /// The name it was remembered under.
        name: String,
        /// Whether it must be that pod (else another).
        same: bool,
    },
    /// `The backend deployment "S" for the ingress resource is scaled to N`
    ScaleBackend {
        /// The backend Service (= deployment) name.
        service: String,
        /// Number of replicas.
        replicas: usize,
    },
}

/// What a step needs besides its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Argument {
    /// Nothing.
    None,
    /// A docstring.
    DocString,
    /// A data table.
    Table,
}

impl Step {
    /// The multi-line argument the step requires.
    pub fn argument(&self) -> Argument {
        match self {
            Step::IngressNamedWithSpec { .. }
            | Step::IngressResource
            | Step::IngressInNewNamespace
            | Step::ObjectResource { .. }
            | Step::UpdateIngress { .. } => Argument::DocString,
            Step::ResponseHeadersTable | Step::RequestHeadersTable => Argument::Table,
            _ => Argument::None,
        }
    }
}

type Build = fn(&Captures<'_>) -> Result<Step, String>;

/// One step definition: the regex (as in the report), where it comes from
/// (`upstream` or `extension`), and how to build the [`Step`].
pub struct StepDef {
    /// The regular expression, anchored.
    pub pattern: &'static str,
    /// `upstream` (verbatim from the upstream suite) or `extension`.
    pub origin: &'static str,
    build: Build,
}

impl std::fmt::Debug for StepDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepDef")
            .field("pattern", &self.pattern)
            .field("origin", &self.origin)
            .finish()
    }
}

const fn def(pattern: &'static str, origin: &'static str, build: Build) -> StepDef {
    StepDef {
        pattern,
        origin,
        build,
    }
}

/// Every step definition, in matching order.
pub static STEP_DEFS: &[StepDef] = &[
    def(r#"^a new random namespace$"#, "upstream", |_| {
        Ok(Step::NewNamespace)
    }),
    def(
        r#"^an Ingress resource named "([^"]*)" with this spec:$"#,
        "upstream",
        |c| {
            Ok(Step::IngressNamedWithSpec {
                name: c[1].to_string(),
            })
        },
    ),
    def(r#"^an Ingress resource$"#, "upstream", |_| {
        Ok(Step::IngressResource)
    }),
    def(
        r#"^an Ingress resource in a new random namespace$"#,
        "upstream",
        |_| Ok(Step::IngressInNewNamespace),
    ),
    def(
        r#"^a self-signed TLS secret named "([^"]*)" for the "([^"]*)" hostname$"#,
        "upstream",
        |c| {
            Ok(Step::TlsSecret {
                name: c[1].to_string(),
                host: c[2].to_string(),
            })
        },
    ),
    def(
        r#"^The Ingress status shows the IP address or FQDN where it is exposed$"#,
        "upstream",
        |_| Ok(Step::StatusShowsAddress),
    ),
    def(
        r#"^The Ingress status should not contain the IP address or FQDN$"#,
        "upstream",
        |_| Ok(Step::StatusHasNoAddress),
    ),
    def(
        r#"^I send a "([^"]*)" request to http://"([^"]*)"/"([^"]*)"$"#,
        "upstream",
        |c| {
            Ok(Step::SendRequestParts {
                method: c[1].to_string(),
                host: c[2].to_string(),
                path: c[3].to_string(),
            })
        },
    ),
    def(
        r#"^I send a "([^"]*)" request to "([^"]*)"$"#,
        "upstream",
        |c| {
            Ok(Step::SendRequest {
                method: c[1].to_string(),
                url: c[2].to_string(),
            })
        },
    ),
    def(
        r#"^I send a "([^"]*)" request to "([^"]*)" with the header "([^"]*)" set to "([^"]*)"$"#,
        "extension",
        |c| {
            Ok(Step::SendRequestWith {
                method: c[1].to_string(),
                url: c[2].to_string(),
                headers: vec![(c[3].to_string(), c[4].to_string())],
                follow: true,
                body: 0,
                client_certificate: false,
            })
        },
    ),
    def(
        r#"^I send a "([^"]*)" request to "([^"]*)" with the header "([^"]*)" set to "([^"]*)" and the header "([^"]*)" set to "([^"]*)"$"#,
        "extension",
        |c| {
            Ok(Step::SendRequestWith {
                method: c[1].to_string(),
                url: c[2].to_string(),
                headers: vec![
                    (c[3].to_string(), c[4].to_string()),
                    (c[5].to_string(), c[6].to_string()),
                ],
                follow: true,
                body: 0,
                client_certificate: false,
            })
        },
    ),
    def(
        r#"^I send a "([^"]*)" request to "([^"]*)" with the cookie "([^"]*)" of the last response$"#,
        "extension",
        |c| {
            Ok(Step::SendRequestWithCookie {
                method: c[1].to_string(),
                url: c[2].to_string(),
                cookie: c[3].to_string(),
            })
        },
    ),
    def(
        r#"^I send a "([^"]*)" request to "([^"]*)" without following redirects$"#,
        "extension",
        |c| {
            Ok(Step::SendRequestWith {
                method: c[1].to_string(),
                url: c[2].to_string(),
                headers: Vec::new(),
                follow: false,
                body: 0,
                client_certificate: false,
            })
        },
    ),
    def(
        r#"^I send a "([^"]*)" request to "([^"]*)" with a body of (\d+) bytes$"#,
        "extension",
        |c| {
            Ok(Step::SendRequestWith {
                method: c[1].to_string(),
                url: c[2].to_string(),
                headers: Vec::new(),
                follow: true,
                body: bounded(&c[3], MAX_BODY, "a request body")?,
                client_certificate: false,
            })
        },
    ),
    def(
        r#"^I send a "([^"]*)" request to "([^"]*)" with the header "([^"]*)" of (\d+) bytes$"#,
        "extension",
        |c| {
            let size = bounded(&c[4], MAX_HEADER, "a request header")?;
            Ok(Step::SendRequestWith {
                method: c[1].to_string(),
                url: c[2].to_string(),
                headers: vec![(c[3].to_string(), "x".repeat(size))],
                follow: true,
                body: 0,
                client_certificate: false,
            })
        },
    ),
    def(
        r#"^I send a "([^"]*)" request to "([^"]*)" with the client certificate$"#,
        "extension",
        |c| {
            Ok(Step::SendRequestWith {
                method: c[1].to_string(),
                url: c[2].to_string(),
                headers: Vec::new(),
                follow: true,
                body: 0,
                client_certificate: true,
            })
        },
    ),
    def(
        r#"^I send a gRPC request to "([^"]*)"$"#,
        "extension",
        |c| {
            Ok(Step::SendGrpc {
                url: c[1].to_string(),
                headers: Vec::new(),
            })
        },
    ),
    def(
        r#"^I send a gRPC request to "([^"]*)" with the header "([^"]*)" set to "([^"]*)"$"#,
        "extension",
        |c| {
            Ok(Step::SendGrpc {
                url: c[1].to_string(),
                headers: vec![(c[2].to_string(), c[3].to_string())],
            })
        },
    ),
    def(
        r#"^the gRPC call (?:must|should) (succeed|fail)$"#,
        "extension",
        |c| {
            Ok(Step::GrpcOutcome {
                succeed: &c[1] == "succeed",
            })
        },
    ),
    def(
        r#"^I send (\d+) concurrent requests to "([^"]*)" with the header "([^"]*)" set to "([^"]*)"$"#,
        "extension",
        |c| {
            Ok(Step::SendConcurrent {
                count: bounded(&c[1], MAX_CONCURRENT, "a batch")?,
                url: c[2].to_string(),
                headers: vec![(c[3].to_string(), c[4].to_string())],
            })
        },
    ),
    def(
        r#"^(\d+) of the responses status-code must be (\d+)$"#,
        "extension",
        |c| {
            Ok(Step::ResponsesWithStatus {
                count: number(&c[1])?,
                status: status(&c[2])?,
            })
        },
    ),
    def(
        r#"^the responses must come from (\d+) different services, each at least (\d+) times$"#,
        "extension",
        |c| {
            Ok(Step::ServiceSpread {
                services: number(&c[1])?,
                at_least: number(&c[2])?,
            })
        },
    ),
    def(
        r#"^the pod that served the response is remembered as "([^"]*)"$"#,
        "extension",
        |c| Ok(Step::RememberPod(c[1].to_string())),
    ),
    def(
        r#"^the response (?:must|should) (be|not be) served by the pod "([^"]*)"$"#,
        "extension",
        |c| {
            Ok(Step::ServedByPod {
                name: c[2].to_string(),
                same: &c[1] == "be",
            })
        },
    ),
    def(r#"^I send (\d+) requests to "([^"]*)"$"#, "upstream", |c| {
        Ok(Step::SendRequests {
            count: number(&c[1])?,
            url: c[2].to_string(),
        })
    }),
    def(
        r#"^all the responses status-code must be (\d+) and the response body should contain the IP address of (\d+) different Kubernetes pods$"#,
        "upstream",
        |c| {
            Ok(Step::AllResponses {
                status: status(&c[1])?,
                pods: number(&c[2])?,
            })
        },
    ),
    def(
        r#"^the secure connection must verify the "([^"]*)" hostname$"#,
        "upstream",
        |c| {
            Ok(Step::VerifyTlsHostname {
                host: c[1].to_string(),
            })
        },
    ),
    def(
        r#"^the response status-code must be (\d+)$"#,
        "upstream",
        |c| Ok(Step::ResponseStatus(status(&c[1])?)),
    ),
    def(
        r#"^the response must be served by the "([^"]*)" service$"#,
        "upstream",
        |c| Ok(Step::ServedBy(c[1].to_string())),
    ),
    def(
        r#"^the response proto must be "([^"]*)"$"#,
        "upstream",
        |c| Ok(Step::ResponseProto(c[1].to_string())),
    ),
    def(
        r#"^the response headers must contain <key> with matching <value>$"#,
        "upstream",
        |_| Ok(Step::ResponseHeadersTable),
    ),
    def(
        r#"^the request method must be "([^"]*)"$"#,
        "upstream",
        |c| Ok(Step::RequestMethod(c[1].to_string())),
    ),
    def(r#"^the request path must be "([^"]*)"$"#, "upstream", |c| {
        Ok(Step::RequestPath(c[1].to_string()))
    }),
    def(
        r#"^the request proto must be "([^"]*)"$"#,
        "upstream",
        |c| Ok(Step::RequestProto(c[1].to_string())),
    ),
    def(r#"^the request host must be "([^"]*)"$"#, "upstream", |c| {
        Ok(Step::RequestHost(c[1].to_string()))
    }),
    def(
        r#"^the request headers must contain <key> with matching <value>$"#,
        "upstream",
        |_| Ok(Step::RequestHeadersTable),
    ),
    def(
        r#"^The backend deployment "([^"]*)" for the ingress resource is scaled to (\d+)$"#,
        "upstream",
        |c| {
            Ok(Step::ScaleBackend {
                service: c[1].to_string(),
                replicas: number(&c[2])?,
            })
        },
    ),
    def(r#"^an? (Secret|ConfigMap) resource$"#, "extension", |c| {
        Ok(Step::ObjectResource {
            kind: c[1].to_string(),
        })
    }),
    def(
        r#"^the Ingress resource named "([^"]*)" is updated:$"#,
        "extension",
        |c| {
            Ok(Step::UpdateIngress {
                name: c[1].to_string(),
            })
        },
    ),
    def(
        r#"^a mutual TLS secret named "([^"]*)" for the "([^"]*)" hostname$"#,
        "extension",
        |c| {
            Ok(Step::MutualTlsSecret {
                name: c[1].to_string(),
                host: c[2].to_string(),
            })
        },
    ),
    def(
        r#"^the response body (?:must|should) (contain|not contain) "([^"]*)"$"#,
        "extension",
        |c| {
            Ok(Step::ResponseBody {
                text: c[2].to_string(),
                contains: &c[1] == "contain",
            })
        },
    ),
    def(
        r#"^the response must have taken at least (\d+) ms$"#,
        "extension",
        |c| {
            Ok(Step::TookAtLeast {
                millis: bounded(&c[1], MAX_WAIT_MS, "a duration")? as u64,
            })
        },
    ),
    def(
        r#"^the httpbun authentication service is stopped$"#,
        "extension",
        |_| Ok(Step::StopAuthService),
    ),
    def(
        r#"^the "([^"]*)" service is the httpbun service$"#,
        "extension",
        |c| Ok(Step::HttpbunBackend(c[1].to_string())),
    ),
    def(
        r#"^an httpbun authentication service$"#,
        "extension",
        |_| Ok(Step::AuthService),
    ),
    def(
        r#"^the (response|request) header "([^"]*)" (?:must|should) (be|contain|match|not contain) "([^"]*)"$"#,
        "extension",
        |c| {
            let check = match &c[3] {
                "contain" => HeaderCheck::Contains,
                "not contain" => HeaderCheck::NotContains,
                _ => HeaderCheck::Equals,
            };
            Ok(header_step(&c[1], &c[2], &c[4], check))
        },
    ),
    def(
        r#"^the (response|request) header "([^"]*)" (?:must|should) (be present|not be present|be absent)$"#,
        "extension",
        |c| {
            let check = match &c[3] {
                "be present" => HeaderCheck::Present,
                _ => HeaderCheck::Absent,
            };
            Ok(header_step(&c[1], &c[2], "", check))
        },
    ),
    def(
        r#"^the (response|request) (?:must|should) (contain|not contain) the header "([^"]*)"$"#,
        "extension",
        |c| {
            let check = match &c[2] {
                "contain" => HeaderCheck::Present,
                _ => HeaderCheck::Absent,
            };
            Ok(header_step(&c[1], &c[3], "", check))
        },
    ),
];

fn header_step(side: &str, name: &str, value: &str, check: HeaderCheck) -> Step {
    let (name, value) = (name.to_string(), value.to_string());
    if side == "response" {
        Step::ResponseHeader { name, value, check }
    } else {
        Step::RequestHeader { name, value, check }
    }
}

/// The largest request body a step sends (proxy-body-size cases send a
/// few MiB).
pub const MAX_BODY: usize = 16 << 20;
/// The largest padding header a step sends.
pub const MAX_HEADER: usize = 64 << 10;
/// The most requests a step sends at once.
pub const MAX_CONCURRENT: usize = 100;
/// The longest duration a step may expect (a request times out at 10 s).
pub const MAX_WAIT_MS: usize = 10_000;

fn bounded(s: &str, max: usize, what: &str) -> Result<usize, String> {
    let n = number(s)?;
    if n > max {
        return Err(format!(
            "{what} of {n} is more than this runner sends ({max})"
        ));
    }
    Ok(n)
}

fn number(s: &str) -> Result<usize, String> {
    s.parse()
        .map_err(|_| format!("{s:?} is not a usable number"))
}

fn status(s: &str) -> Result<u16, String> {
    s.parse()
        .ok()
        .filter(|n| (100..1000).contains(n))
        .ok_or_else(|| format!("{s:?} is not an HTTP status code"))
}

static COMPILED: LazyLock<Vec<(Regex, Build)>> = LazyLock::new(|| {
    STEP_DEFS
        .iter()
        .map(|d| {
            let regex = Regex::new(d.pattern)
                .unwrap_or_else(|e| panic!("bad step regex {}: {e}", d.pattern));
            (regex, d.build)
        })
        .collect()
});

/// Recognises a step's text (keyword already stripped).
///
/// Errors: `undefined step: <text>` when nothing matches, or a description of
/// an unusable argument (e.g. a status code out of range).
pub fn parse(text: &str) -> Result<Step, String> {
    for (regex, build) in COMPILED.iter() {
        if let Some(caps) = regex.captures(text) {
            return build(&caps);
        }
    }
    Err(format!("undefined step: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles_and_has_a_builder() {
        assert_eq!(COMPILED.len(), STEP_DEFS.len());
    }

    /// Texts deliberately unlike the shared feature files: other hosts,
    /// paths, methods, services, headers and numbers.
    #[test]
    fn table_driven_matching() {
        use HeaderCheck::*;
        let cases: Vec<(&str, Step)> = vec![
            ("a new random namespace", Step::NewNamespace),
            (
                r#"an Ingress resource named "shop-front" with this spec:"#,
                Step::IngressNamedWithSpec {
                    name: "shop-front".into(),
                },
            ),
            ("an Ingress resource", Step::IngressResource),
            (
                "an Ingress resource in a new random namespace",
                Step::IngressInNewNamespace,
            ),
            (
                r#"a self-signed TLS secret named "wild-cert" for the "*.shop.example" hostname"#,
                Step::TlsSecret {
                    name: "wild-cert".into(),
                    host: "*.shop.example".into(),
                },
            ),
            (
                "The Ingress status shows the IP address or FQDN where it is exposed",
                Step::StatusShowsAddress,
            ),
            (
                "The Ingress status should not contain the IP address or FQDN",
                Step::StatusHasNoAddress,
            ),
            (
                r#"I send a "OPTIONS" request to http://"api.example.org"/"v2/items""#,
                Step::SendRequestParts {
                    method: "OPTIONS".into(),
                    host: "api.example.org".into(),
                    path: "v2/items".into(),
                },
            ),
            (
                r#"I send a "HEAD" request to http://""/"""#,
                Step::SendRequestParts {
                    method: "HEAD".into(),
                    host: "".into(),
                    path: "".into(),
                },
            ),
            (
                r#"I send a "PATCH" request to "https://api.example.org:8443/v1/x?y=1""#,
                Step::SendRequest {
                    method: "PATCH".into(),
                    url: "https://api.example.org:8443/v1/x?y=1".into(),
                },
            ),
            (
                r#"I send a "GET" request to "http://foo/info" with the cookie "aff" of the last response"#,
                Step::SendRequestWithCookie {
                    method: "GET".into(),
                    url: "http://foo/info".into(),
                    cookie: "aff".into(),
                },
            ),
            (
                r#"I send 7 requests to "http://pool.example/health""#,
                Step::SendRequests {
                    count: 7,
                    url: "http://pool.example/health".into(),
                },
            ),
            (
                "all the responses status-code must be 503 and the response body should contain the IP address of 0 different Kubernetes pods",
                Step::AllResponses {
                    status: 503,
                    pods: 0,
                },
            ),
            (
                r#"the secure connection must verify the "api.example.org" hostname"#,
                Step::VerifyTlsHostname {
                    host: "api.example.org".into(),
                },
            ),
            (
                "the response status-code must be 418",
                Step::ResponseStatus(418),
            ),
            (
                r#"the response must be served by the "cart-svc" service"#,
                Step::ServedBy("cart-svc".into()),
            ),
            (
                r#"the response proto must be "HTTP/2.0""#,
                Step::ResponseProto("HTTP/2.0".into()),
            ),
            (
                "the response headers must contain <key> with matching <value>",
                Step::ResponseHeadersTable,
            ),
            (
                r#"the request method must be "OPTIONS""#,
                Step::RequestMethod("OPTIONS".into()),
            ),
            (
                r#"the request path must be "/v2/items?x=1""#,
                Step::RequestPath("/v2/items?x=1".into()),
            ),
            (
                r#"the request path must be """#,
                Step::RequestPath("".into()),
            ),
            (
                r#"the request proto must be "HTTP/1.0""#,
                Step::RequestProto("HTTP/1.0".into()),
            ),
            (
                r#"the request host must be "api.example.org:8080""#,
                Step::RequestHost("api.example.org:8080".into()),
            ),
            (
                "the request headers must contain <key> with matching <value>",
                Step::RequestHeadersTable,
            ),
            (
                r#"The backend deployment "cart-svc" for the ingress resource is scaled to 3"#,
                Step::ScaleBackend {
                    service: "cart-svc".into(),
                    replicas: 3,
                },
            ),
            (
                r#"the response header "X-Frame-Options" must be "DENY""#,
                Step::ResponseHeader {
                    name: "X-Frame-Options".into(),
                    value: "DENY".into(),
                    check: Equals,
                },
            ),
            (
                r#"the response header "Cache-Control" should contain "no-store""#,
                Step::ResponseHeader {
                    name: "Cache-Control".into(),
                    value: "no-store".into(),
                    check: Contains,
                },
            ),
            (
                r#"the request header "X-Forwarded-Proto" must be "https""#,
                Step::RequestHeader {
                    name: "X-Forwarded-Proto".into(),
                    value: "https".into(),
                    check: Equals,
                },
            ),
            (
                r#"the request header "Connection" must not be present"#,
                Step::RequestHeader {
                    name: "Connection".into(),
                    value: "".into(),
                    check: Absent,
                },
            ),
            (
                r#"the response header "Strict-Transport-Security" must be present"#,
                Step::ResponseHeader {
                    name: "Strict-Transport-Security".into(),
                    value: "".into(),
                    check: Present,
                },
            ),
            (
                r#"the response must not contain the header "X-Powered-By""#,
                Step::ResponseHeader {
                    name: "X-Powered-By".into(),
                    value: "".into(),
                    check: Absent,
                },
            ),
            (
                r#"the request must contain the header "X-Request-Id""#,
                Step::RequestHeader {
                    name: "X-Request-Id".into(),
                    value: "".into(),
                    check: Present,
                },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), Ok(want), "step text: {text}");
        }
    }

    #[test]
    fn extension_steps() {
        let cases: Vec<(&str, Step)> = vec![
            (
                "a ConfigMap resource",
                Step::ObjectResource {
                    kind: "ConfigMap".into(),
                },
            ),
            (
                "a Secret resource",
                Step::ObjectResource {
                    kind: "Secret".into(),
                },
            ),
            (
                r#"the Ingress resource named "shop-front" is updated:"#,
                Step::UpdateIngress {
                    name: "shop-front".into(),
                },
            ),
            (
                r#"a mutual TLS secret named "mtls" for the "pay.example" hostname"#,
                Step::MutualTlsSecret {
                    name: "mtls".into(),
                    host: "pay.example".into(),
                },
            ),
            (
                r#"the response body must not contain "teapot""#,
                Step::ResponseBody {
                    text: "teapot".into(),
                    contains: false,
                },
            ),
            (
                r#"the response body should contain "{""#,
                Step::ResponseBody {
                    text: "{".into(),
                    contains: true,
                },
            ),
            (
                "the response must have taken at least 1500 ms",
                Step::TookAtLeast { millis: 1500 },
            ),
            (
                r#"I send a gRPC request to "https://grpc.example/pkg.Svc/Call""#,
                Step::SendGrpc {
                    url: "https://grpc.example/pkg.Svc/Call".into(),
                    headers: Vec::new(),
                },
            ),
            (
                r#"I send a gRPC request to "http://grpc.example/" with the header "authorization" set to "x""#,
                Step::SendGrpc {
                    url: "http://grpc.example/".into(),
                    headers: vec![("authorization".into(), "x".into())],
                },
            ),
            (
                "the gRPC call must fail",
                Step::GrpcOutcome { succeed: false },
            ),
            (
                "the gRPC call should succeed",
                Step::GrpcOutcome { succeed: true },
            ),
            (
                r#"I send 12 concurrent requests to "http://slow.example/" with the header "X-Echo-Delay-Ms" set to "900""#,
                Step::SendConcurrent {
                    count: 12,
                    url: "http://slow.example/".into(),
                    headers: vec![("X-Echo-Delay-Ms".into(), "900".into())],
                },
            ),
            (
                "the responses must come from 2 different services, each at least 80 times",
                Step::ServiceSpread {
                    services: 2,
                    at_least: 80,
                },
            ),
            (
                r#"the pod that served the response is remembered as "first""#,
                Step::RememberPod("first".into()),
            ),
            (
                r#"the response must not be served by the pod "first""#,
                Step::ServedByPod {
                    name: "first".into(),
                    same: false,
                },
            ),
            (
                r#"the response should be served by the pod "first""#,
                Step::ServedByPod {
                    name: "first".into(),
                    same: true,
                },
            ),
            (
                "4 of the responses status-code must be 503",
                Step::ResponsesWithStatus {
                    count: 4,
                    status: 503,
                },
            ),
            (
                "the httpbun authentication service is stopped",
                Step::StopAuthService,
            ),
            (
                r#"the "status-svc" service is the httpbun service"#,
                Step::HttpbunBackend("status-svc".into()),
            ),
            (
                r#"I send a "PUT" request to "http://up.example/x" with a body of 3 bytes"#,
                Step::SendRequestWith {
                    method: "PUT".into(),
                    url: "http://up.example/x".into(),
                    headers: Vec::new(),
                    follow: true,
                    body: 3,
                    client_certificate: false,
                },
            ),
            (
                r#"I send a "GET" request to "http://up.example/" with the header "X-Fill" of 4 bytes"#,
                Step::SendRequestWith {
                    method: "GET".into(),
                    url: "http://up.example/".into(),
                    headers: vec![("X-Fill".into(), "xxxx".into())],
                    follow: true,
                    body: 0,
                    client_certificate: false,
                },
            ),
            (
                r#"I send a "GET" request to "https://pay.example/" with the client certificate"#,
                Step::SendRequestWith {
                    method: "GET".into(),
                    url: "https://pay.example/".into(),
                    headers: Vec::new(),
                    follow: true,
                    body: 0,
                    client_certificate: true,
                },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), Ok(want), "step text: {text}");
        }
        assert_eq!(
            parse("a Secret resource").unwrap().argument(),
            Argument::DocString
        );
        assert_eq!(
            parse(r#"the Ingress resource named "a" is updated:"#)
                .unwrap()
                .argument(),
            Argument::DocString
        );
        // Bounded: what a step may make the runner send or wait.
        let big = format!(
            r#"I send a "POST" request to "http://up.example/" with a body of {} bytes"#,
            MAX_BODY + 1
        );
        assert!(
            parse(&big)
                .unwrap_err()
                .contains("more than this runner sends")
        );
        let big = format!(
            r#"I send a "GET" request to "http://up.example/" with the header "X" of {} bytes"#,
            MAX_HEADER + 1
        );
        assert!(
            parse(&big)
                .unwrap_err()
                .contains("more than this runner sends")
        );
        let big = format!(
            r#"I send {} concurrent requests to "http://a/" with the header "X" set to "1""#,
            MAX_CONCURRENT + 1
        );
        assert!(
            parse(&big)
                .unwrap_err()
                .contains("more than this runner sends")
        );
        assert!(
            parse("the response must have taken at least 10001 ms")
                .unwrap_err()
                .contains("more than")
        );
    }

    #[test]
    fn undefined_and_bad_arguments() {
        for text in [
            "I send a GET request to http://example.org",
            "the response status-code must be two hundred",
            "The Ingress status shows the IP address",
            "a new random namespace please",
            " a new random namespace",
            "the response must be served by the cart service",
        ] {
            let err = parse(text).unwrap_err();
            assert_eq!(err, format!("undefined step: {text}"));
        }
        assert!(
            parse("the response status-code must be 99999")
                .unwrap_err()
                .contains("not an HTTP status")
        );
    }

    #[test]
    fn arguments() {
        assert_eq!(
            parse("an Ingress resource").unwrap().argument(),
            Argument::DocString
        );
        assert_eq!(
            parse("the request headers must contain <key> with matching <value>")
                .unwrap()
                .argument(),
            Argument::Table
        );
        assert_eq!(
            parse("a new random namespace").unwrap().argument(),
            Argument::None
        );
    }
}
