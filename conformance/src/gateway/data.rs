//! The ported test files (`conformance/gateway/data/<Test>.json`, written by
//! `conformance/gateway/port.py`): the upstream `ExpectedResponse` literals
//! with their Go field names, plus the test's manifests, Gateways and the
//! helper that judges each case.
//!
//! Fields the runner does not judge yet (gRPC's `EchoRequest`,
//! `RequestMetadata`, ...) are kept in [`Case::other`], so a case is never
//! silently read as less than it says.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// One ported upstream test.
#[derive(Debug, Clone, Deserialize)]
pub struct TestFile {
    /// The upstream `ShortName`.
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Manifest paths relative to upstream `conformance/` (the base
    /// manifests are not listed: they apply to every test).
    #[serde(default)]
    pub manifests: Vec<String>,
    /// The Gateways the test's Go code names literally.
    #[serde(default)]
    pub gateways: Vec<ObjectRef>,
    /// The upstream `Features` (`SupportHTTPRoute`, ...): which profiles the
    /// test belongs to, core or extended (the report).
    #[serde(default)]
    pub features: Vec<String>,
    /// Upstream `Provisional: true`.
    #[serde(default)]
    pub provisional: bool,
    #[serde(default)]
    pub cases: Vec<Case>,
    /// Cases the port could not evaluate, with the reason.
    #[serde(default)]
    pub unported_cases: Vec<Value>,
    /// The test's calls of status helpers (`kubernetes.*`), judged against
    /// the proxy's `/status` (`super::status`).
    #[serde(default)]
    pub checks: Vec<Check>,
    /// Status helper calls the port could not evaluate, with the reason.
    #[serde(default)]
    pub unported_checks: Vec<Value>,
    /// The test body's early returns on the implementation's features
    /// (`if suite.SupportedFeatures.Has(X) { return }`): when one holds,
    /// upstream runs nothing of the test and reports it passed.
    #[serde(default)]
    pub returns_when: Vec<FeatureCondition>,
    /// The order of the cases and checks with the object changes between
    /// them (`super::runner::steps` runs them); empty: every case and check at once.
    #[serde(default)]
    pub steps: Vec<Step>,
}

/// A condition on the implementation's supported features.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeatureCondition {
    /// The feature (`SupportTLSRouteModeMixed`) is supported.
    Has(String),
    /// The feature is not supported.
    Lacks(String),
}

impl FeatureCondition {
    pub fn holds(&self, supported: &BTreeSet<String>) -> bool {
        match self {
            FeatureCondition::Has(f) => supported.contains(f),
            FeatureCondition::Lacks(f) => !supported.contains(f),
        }
    }
}

/// One call of an upstream status helper
/// (`conformance/utils/kubernetes/helpers.go`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Check {
    /// The function with its package (`kubernetes.HTTPRouteMustHaveCondition`).
    pub helper: String,
    /// The enclosing `t.Run`'s name, empty at the test's top level.
    #[serde(default)]
    pub subtest: String,
    /// The call's arguments after `t`, the client and the timeout
    /// configuration, as the port evaluated the Go values.
    #[serde(default)]
    pub arguments: Vec<Value>,
}

impl Check {
    /// `<helper> (<subtest>)`, or the helper alone at the top level.
    pub fn name(&self) -> String {
        if self.subtest.is_empty() {
            self.helper.clone()
        } else {
            format!("{} ({})", self.helper, self.subtest)
        }
    }
}

/// A `types.NamespacedName` literal.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct ObjectRef {
    #[serde(rename = "Name", default)]
    pub name: String,
    #[serde(rename = "Namespace", default)]
    pub namespace: String,
}

/// A Gateway address as `kubernetes.WaitForGatewayAddress` returns it: the
/// Gateway's first status address, with the port of the listener named
/// `Listener` (the first listener when empty) unless `UsePort` is false.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct GatewayAddress {
    #[serde(rename = "Name", default)]
    pub name: String,
    #[serde(rename = "Namespace", default)]
    pub namespace: String,
    #[serde(rename = "Listener", default)]
    pub listener: String,
    #[serde(rename = "UsePort", default = "yes")]
    pub use_port: bool,
    /// The port the test joined to the address (`net.JoinHostPort(gwAddr,
    /// "8443")`), which replaces the listener's.
    #[serde(rename = "Port", default)]
    pub port: Option<u16>,
}

fn yes() -> bool {
    true
}

/// One `ExpectedResponse` literal.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Case {
    #[serde(rename = "Request", default)]
    pub request: Request,
    #[serde(rename = "ExpectedRequest", default)]
    pub expected_request: Option<ExpectedRequest>,
    #[serde(rename = "RedirectRequest", default)]
    pub redirect_request: Option<RedirectRequest>,
    #[serde(rename = "BackendSetResponseHeaders", default)]
    pub backend_set_response_headers: Option<BTreeMap<String, String>>,
    #[serde(rename = "Response", default)]
    pub response: Response,
    #[serde(rename = "Backend", default)]
    pub backend: String,
    #[serde(rename = "Namespace", default)]
    pub namespace: String,
    #[serde(rename = "MirroredTo", default)]
    pub mirrored_to: Vec<MirroredBackend>,
    #[serde(rename = "TestCaseName", default)]
    pub test_case_name: String,
    #[serde(rename = "ServerName", default)]
    pub server_name: String,
    /// The upstream function that judges the case (`http.MakeRequest...`).
    #[serde(default)]
    pub helper: String,
    /// `http`, `grpc`, `tcp` or `udp`: which `ExpectedResponse` type.
    #[serde(default)]
    pub protocol: String,
    /// The Gateway whose address the helper is given (`gwAddr`), when the
    /// test names it.
    #[serde(default)]
    pub gateway: Option<GatewayAddress>,
    /// The helper's other plain arguments the port read (`serverName`,
    /// `useTLS`), as upstream names the parameters.
    #[serde(default)]
    pub arguments: BTreeMap<String, Value>,
    /// The enclosing `t.Run`'s name, for a case of a helper called with
    /// plain arguments (no literal to name it).
    #[serde(default)]
    pub subtest: String,
    /// Placeholders in the request's text for values the test makes anew
    /// at each attempt (`{uuid.New().String()}` → `uuid`), and once per
    /// case (`super::runner::fresh`).
    #[serde(default)]
    pub per_attempt: BTreeMap<String, String>,
    #[serde(default)]
    pub per_case: BTreeMap<String, String>,
    /// Every other field, as written.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// `http.Request`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct Request {
    #[serde(rename = "Host", default)]
    pub host: String,
    #[serde(rename = "Method", default)]
    pub method: String,
    #[serde(rename = "Path", default)]
    pub path: String,
    /// `None` when the literal has no headers (Go's nil map: not checked).
    #[serde(rename = "Headers", default)]
    pub headers: Option<BTreeMap<String, String>>,
    #[serde(rename = "UnfollowRedirect", default)]
    pub unfollow_redirect: bool,
    /// A `roundtripper` protocol: empty (HTTP/1.1), `H2C_PRIOR_KNOWLEDGE`,
    /// `HTTPS`, `H2`, or the Go constant's name.
    #[serde(rename = "Protocol", default)]
    pub protocol: String,
    #[serde(rename = "Body", default)]
    pub body: String,
    #[serde(rename = "SNI", default)]
    pub sni: String,
    /// The client certificate the backend must have seen (a PEM among
    /// echo-basic's `tls.peerCertificates`), as the port wrote it: the
    /// Secret part it is read from (`{"Secret": {Name, Namespace}, "Key"}`),
    /// which the runner replaces with the PEM before judging.
    #[serde(rename = "ClientCert", default)]
    pub client_cert: Option<Value>,
    /// Fields the runner does not know.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// `http.ExpectedRequest`: the request as the backend should see it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ExpectedRequest {
    #[serde(rename = "Request", default)]
    pub request: Request,
    #[serde(rename = "AbsentHeaders", default)]
    pub absent_headers: Vec<String>,
    #[serde(rename = "HTTPPort", default)]
    pub http_port: String,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// `roundtripper.RedirectRequest`: the expected `Location`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct RedirectRequest {
    #[serde(rename = "Scheme", default)]
    pub scheme: String,
    #[serde(rename = "Host", default)]
    pub host: String,
    #[serde(rename = "Port", default)]
    pub port: String,
    #[serde(rename = "Path", default)]
    pub path: String,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// `http.Response`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Response {
    #[serde(rename = "StatusCode", default)]
    pub status_code: u16,
    #[serde(rename = "StatusCodes", default)]
    pub status_codes: Vec<u16>,
    /// HTTP: one value per header. gRPC (`*metadata.MD`): a list per key,
    /// read joined with `,`; upstream's `compareResponse` does not judge
    /// them, and neither does the runner.
    #[serde(rename = "Headers", default, deserialize_with = "header_values")]
    pub headers: Option<BTreeMap<String, String>>,
    #[serde(rename = "ValidHeaderValues", default)]
    pub valid_header_values: Option<BTreeMap<String, Vec<String>>>,
    #[serde(rename = "AbsentHeaders", default)]
    pub absent_headers: Vec<String>,
    #[serde(rename = "Protocol", default)]
    pub protocol: String,
    #[serde(rename = "IgnoreWhitespace", default)]
    pub ignore_whitespace: bool,
    /// gRPC cases: the expected `codes.Code` (`codes.Unimplemented` or a
    /// number); absent means `OK`, Go's zero value.
    #[serde(rename = "Code", default)]
    pub code: Option<Value>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

fn header_values<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    use serde::de::Error;
    let map = match Value::deserialize(deserializer)? {
        Value::Null => return Ok(None),
        // The port writes an empty composite literal (`&metadata.MD{}`)
        // as an empty list.
        Value::Array(items) if items.is_empty() => return Ok(Some(BTreeMap::new())),
        Value::Object(map) => map,
        other => return Err(D::Error::custom(format!("headers: {other} is not a map"))),
    };
    map.into_iter()
        .map(|(name, values)| match values {
            Value::String(value) => Ok((name, value)),
            Value::Array(values) => values
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .map(|values| (name, values.join(",")))
                .ok_or_else(|| D::Error::custom("header values are not strings")),
            other => Err(D::Error::custom(format!(
                "header value {other} is not text"
            ))),
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// `http.MirroredBackend`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct MirroredBackend {
    #[serde(rename = "BackendRef", default)]
    pub backend_ref: ObjectRef,
    #[serde(rename = "Percent", default)]
    pub percent: Option<i32>,
}

/// Why a data file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a test file: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
}

impl TestFile {
    /// Reads one `<Test>.json`.
    pub fn load(path: &Path) -> Result<TestFile, DataError> {
        let text = std::fs::read_to_string(path).map_err(|source| DataError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| DataError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// The test files among `paths`: files as given, directories' `*.json`
/// (not recursive) except `index.json` (the port's summary), sorted.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, DataError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|source| DataError::Read {
                path: path.clone(),
                source,
            })?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().is_some_and(|e| e == "json")
                        && p.file_name().is_some_and(|n| n != "index.json")
                })
                .collect();
            found.sort();
            files.extend(found);
        } else if path.is_file() {
            files.push(path.clone());
        } else {
            return Err(DataError::Read {
                path: path.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
    }
    Ok(files)
}

/// The top-level fields of a gRPC case (`grpc.ExpectedResponse`) that
/// [`Case`] keeps in `other`.
pub const GRPC_FIELDS: &[&str] = &[
    "EchoRequest",
    "EchoTwoRequest",
    "EchoThreeRequest",
    "RequestMetadata",
];

/// The fields of `tcp.ExpectedResponse` and `udp.ExpectedResponse` that
/// [`Case`] keeps in `other` (besides `Backend` and `Namespace`).
pub const TCP_FIELDS: &[&str] = &["BackendIsTLS", "Hostname", "TLSProtocol"];
pub const UDP_FIELDS: &[&str] = &["Service"];
/// The helper arguments the runner uses.
pub const ARGUMENTS: &[&str] = &[
    "serverName",
    "useTLS",
    "serverCertificate",
    "clientCertificate",
    "clientCertificateKey",
    // `weight.TestWeightedDistribution`'s expected shares per backend, and
    // the upstream function one sample calls.
    "expectedWeights",
    "sender",
    // The checks written as code (`super::runner::websocket`, `dns`): the
    // messages a WebSocket dial sends, the DNS question, and the upstream
    // poll around them.
    "messages",
    "question",
    "poll",
    // A loop of captured round trips (`http.CaptureRoundTrip`): how many,
    // the scheme `http.MakeRequest` was given, the request header whose
    // value prefixes the pod's name, and whether it must be one value.
    "repeat",
    "scheme",
    "podPrefixHeader",
    "oneValue",
];

impl Case {
    /// Fields of the case the runner would not judge (unknown to it), as
    /// `Field` or `Parent.Field`. A case with any fails: reading it as less than it
    /// says would pass it wrongly.
    pub fn unjudged_fields(&self) -> Vec<String> {
        let mut out = Vec::new();
        let known = match self.protocol.as_str() {
            "grpc" => GRPC_FIELDS,
            "tcp" => TCP_FIELDS,
            "udp" => UDP_FIELDS,
            _ => &[],
        };
        for key in self.other.keys() {
            if !known.contains(&key.as_str()) {
                out.push(key.clone());
            }
        }
        for key in self.arguments.keys() {
            if !ARGUMENTS.contains(&key.as_str()) {
                out.push(format!("arguments.{key}"));
            }
        }
        let mut nested = |parent: &str, other: &BTreeMap<String, Value>| {
            out.extend(other.keys().map(|k| format!("{parent}.{k}")));
        };
        nested("Request", &self.request.other);
        nested("Response", &self.response.other);
        if let Some(expected) = &self.expected_request {
            nested("ExpectedRequest", &expected.other);
            nested("ExpectedRequest.Request", &expected.request.other);
        }
        if let Some(redirect) = &self.redirect_request {
            nested("RedirectRequest", &redirect.other);
        }
        out
    }

    /// The upstream sub-test name (`ExpectedResponse.GetTestCaseName`).
    pub fn name(&self, index: usize) -> String {
        if !self.test_case_name.is_empty() {
            return self.test_case_name.clone();
        }
        if !self.subtest.is_empty() {
            return format!("{} ({})", self.helper, self.subtest);
        }
        let with_headers = if self.request.headers.is_some() {
            " with headers"
        } else {
            ""
        };
        let request = format!(
            "{index} request to '{}{}'{with_headers}",
            self.request.host, self.request.path
        );
        if !self.backend.is_empty() {
            format!("{request} should go to {}", self.backend)
        } else {
            // The literal's `StatusCodes` as Go's `%v` prints them: the name
            // is taken before `MakeRequest` folds in `StatusCode`.
            let codes: Vec<String> = self
                .response
                .status_codes
                .iter()
                .map(u16::to_string)
                .collect();
            format!("{request} should receive one of [{}]", codes.join(" "))
        }
    }

    /// `StatusCode` folded into `StatusCodes`, 200 when neither is given
    /// (as `http.MakeRequest` does).
    pub fn status_codes(&self) -> Vec<u16> {
        let mut codes = self.response.status_codes.clone();
        if self.response.status_code != 0 && !codes.contains(&self.response.status_code) {
            codes.push(self.response.status_code);
        }
        if codes.is_empty() {
            codes.push(200);
        }
        codes
    }
}

// A test's steps: the data; `super::runner::steps` runs them.

/// One entry of a test's `steps`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Step {
    /// Run the case of this index in `cases`.
    Case { case: usize },
    /// Run the status check of this index in `checks`.
    Check { check: usize },
    /// Change an object.
    Change(Change),
}

/// An object change, named by the object's kind, namespace and name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "change", rename_all = "lowercase")]
pub enum Change {
    /// `client.Patch(ctx, mutated, client.MergeFrom(original))`: the
    /// field assignments as JSON Patch operations (RFC 6902: `add`,
    /// `replace`, `remove`; `-` appends to a list). A value
    /// `{"FromObject": {Kind, Namespace, Name, Path}}` is that object's
    /// value at the JSON pointer `Path`, as the manifests directory held it
    /// before the test's first step. An operation with `forEach` adds its
    /// value once per combination of run-time elements (see
    /// `runner::steps`); `when` (`{"NotEmpty": pointer}`) makes the patch
    /// only when the patched object's list there is not empty, as a test
    /// that skips its `Patch` for an empty list.
    Patch {
        #[serde(flatten)]
        object: ObjectKey,
        #[serde(rename = "jsonPatch")]
        json_patch: Vec<Value>,
        #[serde(default)]
        when: Option<Value>,
    },
    /// `client.Delete`: the object's file is removed.
    Delete {
        #[serde(flatten)]
        object: ObjectKey,
    },
    /// `Applier.MustApplyObjectsWithCleanup` and `client.Create/Update`
    /// (`object`, the whole object, written as the manifests are, replacing
    /// the object of the same key), or `Applier.MustApplyWithCleanup`
    /// (`manifest`, a file relative to upstream `conformance/`, every
    /// object of it).
    Apply {
        #[serde(flatten)]
        object: Option<ObjectKey>,
        #[serde(rename = "object", default)]
        object_value: Option<Value>,
        #[serde(default)]
        manifest: Option<String>,
    },
}

/// Which object a change is about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ObjectKey {
    pub kind: String,
    #[serde(default)]
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn describe(&self) -> String {
        if self.namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

impl Change {
    /// `patch Gateway ns/name`, for failures.
    pub fn describe(&self) -> String {
        match self {
            Change::Patch { object, .. } => format!("patch {}", object.describe()),
            Change::Delete { object } => format!("delete {}", object.describe()),
            Change::Apply {
                manifest: Some(m), ..
            } => format!("apply {m}"),
            Change::Apply {
                object: Some(o), ..
            } => format!("apply {}", o.describe()),
            Change::Apply { .. } => "apply".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_status_checks() {
        let json = r#"{
          "name": "T",
          "checks": [
            {"helper": "kubernetes.HTTPRouteMustHaveCondition", "subtest": "route is refused",
             "arguments": [{"Name": "r", "Namespace": "ns"}, {"Name": "gw", "Namespace": "ns"},
                           {"Type": "Accepted", "Status": "False", "Reason": "NotAllowedByListeners"}]},
            {"helper": "kubernetes.GatewayMustHaveLatestConditions", "arguments": [{"Name": "gw", "Namespace": "ns"}]}
          ],
          "unported_checks": [{"helper": "kubernetes.GatewayMustHaveCondition", "subtest": "", "reason": "after Update"}]
        }"#;
        let file: TestFile = serde_json::from_str(json).unwrap();
        assert!(file.cases.is_empty());
        assert_eq!(file.checks.len(), 2);
        assert_eq!(file.checks[0].arguments.len(), 3);
        assert_eq!(
            file.checks[0].name(),
            "kubernetes.HTTPRouteMustHaveCondition (route is refused)"
        );
        assert_eq!(
            file.checks[1].name(),
            "kubernetes.GatewayMustHaveLatestConditions"
        );
        assert_eq!(file.unported_checks.len(), 1);
    }

    #[test]
    fn reads_a_ported_case() {
        let json = r#"{
          "name": "T", "manifests": ["tests/t.yaml"],
          "gateways": [{"Name": "gw", "Namespace": "ns"}],
          "features": ["SupportGateway"],
          "cases": [
            {"Backend": "b-v1", "Namespace": "ns",
             "Request": {"Host": "h.example", "Path": "/p?x=1", "Headers": {"A": "1"}, "UnfollowRedirect": true},
             "ExpectedRequest": {"Request": {"Path": "/q", "Headers": null}, "AbsentHeaders": ["X"]},
             "RedirectRequest": {"Scheme": "https", "Port": "443"},
             "Response": {"StatusCode": 302, "StatusCodes": [301, 308]},
             "MirroredTo": [{"BackendRef": {"Name": "m", "Namespace": "ns"}}],
             "RequestMetadata": {"Authority": "x"},
             "helper": "http.MakeRequestAndExpectEventuallyConsistentResponse", "protocol": "http"},
            {"Request": {"Path": "/"}, "helper": "h", "protocol": "http"}
          ],
          "unported_cases": [{"index": 2}]
        }"#;
        let file: TestFile = serde_json::from_str(json).unwrap();
        assert_eq!(file.gateways[0].name, "gw");
        // Files from before status checks were ported have none.
        assert!(file.checks.is_empty() && file.unported_checks.is_empty());
        let case = &file.cases[0];
        assert_eq!(case.request.path, "/p?x=1");
        assert!(case.request.unfollow_redirect);
        let expected = case.expected_request.as_ref().unwrap();
        assert_eq!(expected.request.headers, None);
        assert_eq!(expected.absent_headers, vec!["X"]);
        assert_eq!(case.status_codes(), vec![301, 308, 302]);
        assert_eq!(case.mirrored_to[0].backend_ref.name, "m");
        assert!(case.other.contains_key("RequestMetadata"));
        assert_eq!(
            case.name(0),
            "0 request to 'h.example/p?x=1' with headers should go to b-v1"
        );
        assert_eq!(file.cases[1].status_codes(), vec![200]);
        assert_eq!(case.unjudged_fields(), vec!["RequestMetadata"]);
        let grpc: Case = serde_json::from_str(
            r#"{"Response": {"Headers": {"A": ["1", "2"], "B": "3"}}, "protocol": "grpc"}"#,
        )
        .unwrap();
        let headers = grpc.response.headers.unwrap();
        assert_eq!((headers["A"].as_str(), headers["B"].as_str()), ("1,2", "3"));
        let empty: Case = serde_json::from_str(r#"{"Response": {"Headers": []}}"#).unwrap();
        assert_eq!(empty.response.headers, Some(BTreeMap::new()));
        assert!(file.cases[1].unjudged_fields().is_empty());
        let odd: Case = serde_json::from_str(
            r#"{"Request": {"Path": "/", "ClientCert": "x"}, "ExpectedRequest": {"Request": {"Trailer": 1}},
                "EchoRequest": [], "protocol": "grpc"}"#,
        )
        .unwrap();
        assert_eq!(
            odd.unjudged_fields(),
            vec!["ExpectedRequest.Request.Trailer"]
        );
        assert_eq!(odd.request.client_cert, Some(Value::from("x")));
        assert_eq!(
            file.cases[1].name(1),
            "1 request to '/' should receive one of []"
        );
        let mut redirect = file.cases[0].clone();
        redirect.backend.clear();
        redirect.request.headers = None;
        assert_eq!(
            redirect.name(0),
            "0 request to 'h.example/p?x=1' should receive one of [301 308]"
        );
    }
}
