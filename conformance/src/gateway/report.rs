//! The conformance report in the upstream format
//! (`conformance/apis/v1/conformancereport.go`, filled as
//! `conformance/utils/suite/reports.go` fills it): one `ProfileReport` per
//! Gateway profile with a test, core and extended statistics, the failed
//! and skipped tests by name, and the extended features claimed.
//!
//! Which profile a test belongs to, and whether it counts as core or
//! extended there, comes from the test's `Features` (ported into the data):
//! a test belongs to every profile whose core and extended features hold
//! all of them, and is extended in a profile when one of them is not core
//! there (upstream `getConformanceProfilesForTest`, `isTestExtended`). The
//! profiles' feature sets are upstream's (`profiles.go` and `pkg/features`
//! at the commit the data was ported from): feature names, never test names.
//!
//! A test's result: `Passed` when every case and status check ran and
//! passed, `Failed` when one failed (or its setup did), `Skipped` when it
//! did not run in full: on the out-of-scope list, some of its cases on it,
//! or neither a case nor a check ported.
//! The extended features claimed are those of the tests that ran (passed or
//! failed), as the implementation's supported features upstream; the
//! profile's other extended features are listed as unsupported.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Map, Value, json};

use super::{TestOutcome, TestResult};

/// One Gateway conformance profile: its core features and the sets whose
/// union is its extended features.
pub struct Profile {
    pub name: &'static str,
    pub core: &'static [&'static str],
    pub extended: &'static [&'static [&'static str]],
}

const GATEWAY_EXTENDED: &[&str] = &[
    "GatewayPort8080",
    "GatewayStaticAddresses",
    "GatewayHTTPListenerIsolation",
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    "GatewayInfrastructurePropagation",
    "GatewayAddressEmpty",
    "GatewayBackendClientCertificate",
    "GatewayFrontendClientCertificateValidation",
    "GatewayFrontendClientCertificateValidationInsecureFallback",
    "ListenerSet",
];

const HTTPROUTE_EXTENDED: &[&str] = &[
    "HTTPRouteDestinationPortMatching",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteMethodMatching",
    "HTTPRouteResponseHeaderModification",
    "HTTPRoutePortRedirect",
    "HTTPRouteSchemeRedirect",
    "HTTPRoutePathRedirect",
    "HTTPRouteHostRewrite",
    "HTTPRoutePathRewrite",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteBackendTimeout",
    "HTTPRouteParentRefPort",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteCORS",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteRetry",
    "HTTPRouteRetryBackendTimeout",
    "HTTPRouteRetryConnectionError",
    "HTTPRouteBackendURLRewrite",
    "HTTPRouteBackendRequestRedirect",
];

/// `BackendTLSPolicyCoreFeatures` and `BackendTLSPolicyExtendedFeatures`.
const BACKEND_TLS_POLICY: &[&str] = &["BackendTLSPolicy", "BackendTLSPolicySANValidation"];

/// `TLSRouteExtendedFeatures`.
const TLSROUTE_EXTENDED: &[&str] = &["TLSRouteModeTerminate", "TLSRouteModeMixed"];

/// Upstream's Gateway profiles (`GatewayHTTPConformanceProfile`, ...). The
/// extended sets are the unions `profiles.go` builds; a feature in several
/// sets is listed once per set here and counted once.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "GATEWAY-GRPC",
        core: &["Gateway", "ReferenceGrant", "GRPCRoute"],
        extended: &[GATEWAY_EXTENDED, BACKEND_TLS_POLICY],
    },
    Profile {
        name: "GATEWAY-HTTP",
        core: &["Gateway", "ReferenceGrant", "HTTPRoute"],
        extended: &[GATEWAY_EXTENDED, HTTPROUTE_EXTENDED, BACKEND_TLS_POLICY],
    },
    Profile {
        name: "GATEWAY-TCP",
        core: &["Gateway", "TCPRoute", "ReferenceGrant"],
        // `TCPRouteExtendedFeatures` holds TCPRoute itself.
        extended: &[GATEWAY_EXTENDED, &["TCPRoute"]],
    },
    Profile {
        name: "GATEWAY-TLS",
        core: &["Gateway", "ReferenceGrant", "TLSRoute"],
        extended: &[GATEWAY_EXTENDED, TLSROUTE_EXTENDED, BACKEND_TLS_POLICY],
    },
    Profile {
        name: "GATEWAY-UDP",
        core: &["Gateway", "UDPRoute", "ReferenceGrant"],
        // `UDPRouteFeatures`.
        extended: &[GATEWAY_EXTENDED, &["UDPRoute"]],
    },
];

/// `implementation` of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Implementation {
    pub organization: String,
    pub project: String,
    pub url: String,
    pub version: String,
    pub contact: Vec<String>,
}

/// What the report says besides the results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub implementation: Implementation,
    /// RFC 3339.
    pub date: String,
    pub gateway_api_version: String,
    pub gateway_api_channel: String,
    /// `mode` (upstream's default is "default").
    pub mode: String,
}

/// A test's result as the report counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed,
    Skipped,
}

/// How the report counts a test.
pub fn outcome(test: &TestOutcome) -> Outcome {
    match &test.result {
        TestResult::Ran(_) => match test.passed() {
            Some(true) if test.info.cases_left_out == 0 => Outcome::Passed,
            Some(true) => Outcome::Skipped,
            _ => Outcome::Failed,
        },
        TestResult::Broken { .. } => Outcome::Failed,
        TestResult::Skipped(_) | TestResult::Empty(_) => Outcome::Skipped,
    }
}

/// A data feature (`SupportHTTPRoute`, the Go constant) as upstream's
/// `FeatureName` value (`HTTPRoute`): every constant is `Support` + value.
pub fn feature_name(symbol: &str) -> &str {
    symbol.strip_prefix("Support").unwrap_or(symbol)
}

#[derive(Default)]
struct Counts {
    passed: u32,
    failed: u32,
    skipped: u32,
    failed_tests: Vec<String>,
    skipped_tests: Vec<String>,
}

impl Counts {
    fn add(&mut self, name: &str, outcome: Outcome) {
        match outcome {
            Outcome::Passed => self.passed += 1,
            Outcome::Failed => {
                self.failed += 1;
                self.failed_tests.push(name.to_string());
            }
            Outcome::Skipped => {
                self.skipped += 1;
                self.skipped_tests.push(name.to_string());
            }
        }
    }

    /// `compileResults`: failure over partial over success.
    fn result(&self) -> &'static str {
        if self.failed > 0 {
            "failure"
        } else if self.skipped > 0 {
            "partial"
        } else {
            "success"
        }
    }

    /// `buildReportSummary`.
    fn summary(&self) -> String {
        match self.result() {
            "failure" => format!("failed with {} test failures", self.failed),
            "partial" => format!("partially succeeded with {} test skips", self.skipped),
            _ => "succeeded".to_string(),
        }
    }

    /// `Status`: keys in the order sigs.k8s.io/yaml writes them (sorted).
    fn status(&self) -> Map<String, Value> {
        let mut status = Map::new();
        if !self.failed_tests.is_empty() {
            status.insert("failedTests".into(), json!(self.failed_tests));
        }
        status.insert("result".into(), self.result().into());
        if !self.skipped_tests.is_empty() {
            status.insert("skippedTests".into(), json!(self.skipped_tests));
        }
        status.insert(
            "statistics".into(),
            json!({"Failed": self.failed, "Passed": self.passed, "Skipped": self.skipped}),
        );
        status
    }
}

/// The report of `outcomes` (any order), as a JSON value whose maps are
/// sorted as upstream's YAML is.
pub fn report(outcomes: &[TestOutcome], meta: &Meta) -> Value {
    let mut tests: Vec<&TestOutcome> = outcomes.iter().collect();
    tests.sort_by(|a, b| a.name.cmp(&b.name));
    let supported: BTreeSet<&str> = tests
        .iter()
        .filter(|t| matches!(outcome(t), Outcome::Passed | Outcome::Failed))
        .flat_map(|t| t.info.features.iter().map(|f| feature_name(f)))
        .collect();
    let mut profiles = Vec::new();
    for Profile {
        name,
        core,
        extended: extended_sets,
    } in PROFILES
    {
        let extended: BTreeSet<&str> = extended_sets
            .iter()
            .flat_map(|s| s.iter().copied())
            .collect();
        let mut core_counts = Counts::default();
        let mut extended_counts: Option<Counts> = None;
        for test in &tests {
            let features: Vec<&str> = test.info.features.iter().map(|f| feature_name(f)).collect();
            let belongs = features
                .iter()
                .all(|f| core.contains(f) || extended.contains(f));
            if !belongs {
                continue;
            }
            let is_extended = features.iter().any(|f| !core.contains(f));
            let counts = if is_extended {
                extended_counts.get_or_insert_with(Counts::default)
            } else {
                &mut core_counts
            };
            counts.add(&test.name, outcome(test));
        }
        if core_counts.passed + core_counts.failed + core_counts.skipped == 0
            && extended_counts.is_none()
        {
            continue;
        }
        let mut summary = format!("Core tests {}", core_counts.summary());
        let mut profile = Map::new();
        profile.insert("core".into(), Value::Object(core_counts.status()));
        if let Some(counts) = &extended_counts {
            summary = format!("{summary}. Extended tests {}", counts.summary());
            let mut status = counts.status();
            let (claimed, unclaimed): (Vec<&str>, Vec<&str>) =
                extended.iter().partition(|f| supported.contains(*f));
            if !claimed.is_empty() {
                status.insert("supportedFeatures".into(), json!(claimed));
            }
            if !unclaimed.is_empty() {
                status.insert("unsupportedFeatures".into(), json!(unclaimed));
            }
            profile.insert("extended".into(), Value::Object(status));
        }
        profile.insert("name".into(), (*name).into());
        profile.insert("summary".into(), format!("{summary}.").into());
        profiles.push(Value::Object(profile));
    }
    let provisional: Vec<&str> = tests
        .iter()
        .filter(|t| t.info.provisional && outcome(t) == Outcome::Passed)
        .map(|t| t.name.as_str())
        .collect();
    let implementation = &meta.implementation;
    let mut report = Map::new();
    report.insert("apiVersion".into(), "gateway.networking.k8s.io/v1".into());
    report.insert("date".into(), meta.date.clone().into());
    report.insert(
        "gatewayAPIChannel".into(),
        meta.gateway_api_channel.clone().into(),
    );
    report.insert(
        "gatewayAPIVersion".into(),
        meta.gateway_api_version.clone().into(),
    );
    report.insert(
        "implementation".into(),
        json!({
            "contact": implementation.contact,
            "organization": implementation.organization,
            "project": implementation.project,
            "url": implementation.url,
            "version": implementation.version,
        }),
    );
    report.insert("kind".into(), "ConformanceReport".into());
    report.insert("mode".into(), meta.mode.clone().into());
    report.insert("profiles".into(), Value::Array(profiles));
    if !provisional.is_empty() {
        report.insert("succeededProvisionalTests".into(), json!(provisional));
    }
    Value::Object(report)
}

/// The report as YAML, keys sorted (as sigs.k8s.io/yaml writes it).
pub fn to_yaml(report: &Value) -> Result<String, String> {
    serde_yaml::to_string(report).map_err(|e| e.to_string())
}

/// `gatewayAPIVersion` and `gatewayAPIChannel` as upstream reads them from
/// the installed CRDs (`gateway.networking.k8s.io/bundle-version` and
/// `/channel` annotations): here the Gateway CRD of the given directory
/// (the vendored `config/crd/experimental`, the kinds teapot reads).
pub fn crd_version(dir: &Path) -> Result<(String, String), String> {
    let path = dir.join("gateway.networking.k8s.io_gateways.yaml");
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let crd: serde_yaml::Value =
        serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let annotation = |key: &str| {
        crd.get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(key))
            .and_then(serde_yaml::Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("{} has no annotation {key}", path.display()))
    };
    Ok((
        annotation("gateway.networking.k8s.io/bundle-version")?,
        annotation("gateway.networking.k8s.io/channel")?,
    ))
}

/// Now, RFC 3339 in UTC (`time.Now().Format(time.RFC3339)` on a UTC host).
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    rfc3339(secs)
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (the civil-from-days
/// conversion of the proleptic Gregorian calendar).
pub fn rfc3339(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::super::{CaseOutcome, TestInfo};
    use super::*;

    fn test(name: &str, features: &[&str], result: TestResult, left_out: usize) -> TestOutcome {
        TestOutcome {
            name: name.into(),
            result,
            checks: Vec::new(),
            info: TestInfo {
                features: features.iter().map(|f| format!("Support{f}")).collect(),
                provisional: name.starts_with("Prov"),
                cases_left_out: left_out,
            },
        }
    }

    fn ran(failure: Option<&str>) -> TestResult {
        TestResult::Ran(vec![CaseOutcome {
            name: "0".into(),
            failure: failure.map(str::to_string),
        }])
    }

    fn with_check(mut test: TestOutcome, failure: Option<&str>) -> TestOutcome {
        test.checks.push(CaseOutcome {
            name: "kubernetes.GatewayMustHaveLatestConditions".into(),
            failure: failure.map(str::to_string),
        });
        test
    }

    #[test]
    fn dates_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_921_871), "2026-11-29T03:11:11Z");
    }

    /// A known set of outcomes gives exactly the upstream document: the
    /// profiles a test's features select, core and extended by feature,
    /// the results' precedence, the summary sentences, the claimed and
    /// unclaimed extended features, provisional successes, sorted keys.
    #[test]
    fn report_of_known_outcomes() {
        let outcomes = vec![
            test("HTTPB", &["Gateway", "HTTPRoute"], ran(None), 0),
            test("HTTPA", &["Gateway", "HTTPRoute"], ran(Some("404")), 0),
            test(
                "HTTPMirror",
                &["Gateway", "HTTPRoute", "HTTPRouteRequestMirror"],
                ran(None),
                0,
            ),
            test(
                "HTTPPort",
                &["Gateway", "HTTPRoute", "HTTPRoutePortRedirect"],
                ran(None),
                2,
            ),
            test(
                "ProvTCP",
                &["Gateway", "TCPRoute", "ReferenceGrant"],
                ran(None),
                0,
            ),
            test(
                "TLSTerm",
                &["Gateway", "TLSRoute", "TLSRouteModeTerminate"],
                TestResult::Skipped("not served".into()),
                0,
            ),
            test(
                "GRPCNamed",
                &["Gateway", "GRPCRoute", "GRPCRouteNamedRouteRule"],
                ran(None),
                0,
            ),
            test("Mesh", &["Mesh", "HTTPRoute"], ran(None), 0),
            test(
                "UDPEmpty",
                &["Gateway", "UDPRoute"],
                TestResult::Empty("no case".into()),
                0,
            ),
            // Checks count as cases do: a test with only checks is
            // counted, and a failing check fails a test whose cases pass.
            with_check(
                test(
                    "TCPStatus",
                    &["Gateway", "TCPRoute"],
                    TestResult::Ran(Vec::new()),
                    0,
                ),
                None,
            ),
            with_check(
                test("UDPStatus", &["Gateway", "UDPRoute"], ran(None), 0),
                Some("Accepted=False"),
            ),
        ];
        let meta = Meta {
            implementation: Implementation {
                organization: "teapot-dev".into(),
                project: "teapot".into(),
                url: "https://github.com/teapot-dev/teapot".into(),
                version: "0.1.0".into(),
                contact: vec!["https://github.com/teapot-dev/teapot/issues".into()],
            },
            date: "2026-11-29T02:31:11Z".into(),
            gateway_api_version: "v0.0.0-dev".into(),
            gateway_api_channel: "experimental".into(),
            mode: "default".into(),
        };
        let yaml = to_yaml(&report(&outcomes, &meta)).unwrap();
        let http_unclaimed = GATEWAY_EXTENDED
            .iter()
            .chain(HTTPROUTE_EXTENDED)
            .chain(BACKEND_TLS_POLICY)
            .copied()
            .filter(|f| *f != "HTTPRouteRequestMirror")
            .collect::<BTreeSet<&str>>()
            .into_iter()
            .map(|f| format!("    - {f}\n"))
            .collect::<String>();
        let tls_unclaimed = GATEWAY_EXTENDED
            .iter()
            .chain(TLSROUTE_EXTENDED)
            .chain(BACKEND_TLS_POLICY)
            .copied()
            .collect::<BTreeSet<&str>>()
            .into_iter()
            .map(|f| format!("    - {f}\n"))
            .collect::<String>();
        let expected = format!(
            "apiVersion: gateway.networking.k8s.io/v1
date: 2026-11-29T02:31:11Z
gatewayAPIChannel: experimental
gatewayAPIVersion: v0.0.0-dev
implementation:
  contact:
  - https://github.com/teapot-dev/teapot/issues
  organization: teapot-dev
  project: teapot
  url: https://github.com/teapot-dev/teapot
  version: 0.1.0
kind: ConformanceReport
mode: default
profiles:
- core:
    failedTests:
    - HTTPA
    result: failure
    statistics:
      Failed: 1
      Passed: 1
      Skipped: 0
  extended:
    result: partial
    skippedTests:
    - HTTPPort
    statistics:
      Failed: 0
      Passed: 1
      Skipped: 1
    supportedFeatures:
    - HTTPRouteRequestMirror
    unsupportedFeatures:
{http_unclaimed}  name: GATEWAY-HTTP
  summary: Core tests failed with 1 test failures. Extended tests partially succeeded with 1 test skips.
- core:
    result: success
    statistics:
      Failed: 0
      Passed: 2
      Skipped: 0
  name: GATEWAY-TCP
  summary: Core tests succeeded.
- core:
    result: success
    statistics:
      Failed: 0
      Passed: 0
      Skipped: 0
  extended:
    result: partial
    skippedTests:
    - TLSTerm
    statistics:
      Failed: 0
      Passed: 0
      Skipped: 1
    unsupportedFeatures:
{tls_unclaimed}  name: GATEWAY-TLS
  summary: Core tests succeeded. Extended tests partially succeeded with 1 test skips.
- core:
    failedTests:
    - UDPStatus
    result: failure
    skippedTests:
    - UDPEmpty
    statistics:
      Failed: 1
      Passed: 0
      Skipped: 1
  name: GATEWAY-UDP
  summary: Core tests failed with 1 test failures.
succeededProvisionalTests:
- ProvTCP
"
        );
        assert_eq!(yaml, expected, "got:\n{yaml}");
    }
}
