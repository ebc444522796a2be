//! The Gateway API conformance runner: the upstream tests' expectations as
//! ported to data (`conformance/gateway/data/<Test>.json`) run against
//! `teapot proxy --manifests DIR`.
//!
//! The files are data: the runner knows their format and the upstream
//! harness's conventions (`conformance/utils`: the manifest substitutions,
//! the echo-basic contract, `CompareRoundTrip`, the helpers' retry rules),
//! never particular tests, hosts or services. Per test it writes a fresh
//! manifests directory ([`manifests`]), starts an echo process per pod of
//! every Deployment a Service selects, starts the proxy, waits for its
//! first snapshot and judges every case as its `helper` does ([`runner`],
//! [`judge`]).
//!
//! The test's status checks (calls of upstream's `kubernetes.*` status
//! helpers) are judged against the proxy's admin `/status` ([`status`]) and
//! count like cases: a test passes when every case and check passes.
//!
//! Output: `PASS|FAIL <Test>: <passed>/<total> cases[, <passed>/<total>
//! checks]` per test (a FAIL names the first failing check or case and
//! why), `SKIP <Test>: <reason>` for a test of the out-of-scope list,
//! `EMPTY <Test>: ...` for a test the port could give neither a case nor a
//! check, then `tests: N passed, N failed (...)`, `cases: N passed, N
//! failed` and `checks: N passed, N failed`.

pub mod data;
pub mod grpc;
pub mod judge;
pub mod l4;
pub mod manifests;
pub mod outcome;
pub mod report;
pub mod runner;
pub mod status;
pub mod tls_client;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use outcome::CaseOutcome;
pub use runner::{DEFAULT_L4_POOL, DEFAULT_PROXY_ARGS, RunConfig};

/// What to run and how.
#[derive(Debug, Clone)]
pub struct Options {
    pub config: RunConfig,
    /// Only tests whose name contains this text.
    pub filter: Option<String>,
    /// Tests not run, with the reason (the out-of-scope list).
    pub skip: BTreeMap<String, String>,
    /// Test files, or directories of them.
    pub paths: Vec<PathBuf>,
}

/// The default time one case may take to become consistent.
pub const DEFAULT_CASE_TIMEOUT: Duration = Duration::from_secs(5);

/// How one test went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestResult {
    /// Its cases ran (its checks are [`TestOutcome::checks`]).
    Ran(Vec<CaseOutcome>),
    /// Setup failed (manifests, echo, proxy): every case and check counts
    /// as failed.
    Broken {
        reason: String,
        cases: usize,
        checks: usize,
    },
    /// On the out-of-scope list.
    Skipped(String),
    /// The port gave it no case.
    Empty(String),
}

/// One test's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestOutcome {
    pub name: String,
    pub result: TestResult,
    /// Its status checks' outcomes, when it ran.
    pub checks: Vec<CaseOutcome>,
    /// What the conformance report needs of the test.
    pub info: TestInfo,
}

/// The test's upstream `Features` and `Provisional`, and how many of its
/// cases the out-of-scope list left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestInfo {
    pub features: Vec<String>,
    pub provisional: bool,
    pub cases_left_out: usize,
}

impl TestOutcome {
    /// (passed, total) cases.
    pub fn cases(&self) -> (usize, usize) {
        match &self.result {
            TestResult::Ran(cases) => (
                cases.iter().filter(|c| c.failure.is_none()).count(),
                cases.len(),
            ),
            TestResult::Broken { cases, .. } => (0, *cases),
            TestResult::Skipped(_) | TestResult::Empty(_) => (0, 0),
        }
    }

    /// (passed, total) checks.
    pub fn checks(&self) -> (usize, usize) {
        match &self.result {
            TestResult::Ran(_) => (
                self.checks.iter().filter(|c| c.failure.is_none()).count(),
                self.checks.len(),
            ),
            TestResult::Broken { checks, .. } => (0, *checks),
            TestResult::Skipped(_) | TestResult::Empty(_) => (0, 0),
        }
    }

    /// `Some(true)` passed, `Some(false)` failed, `None` not counted.
    pub fn passed(&self) -> Option<bool> {
        match &self.result {
            TestResult::Ran(_) | TestResult::Broken { .. } => {
                let (passed, total) = self.cases();
                let (checks_passed, checks) = self.checks();
                Some(
                    passed == total
                        && checks_passed == checks
                        && matches!(self.result, TestResult::Ran(_)),
                )
            }
            TestResult::Skipped(_) | TestResult::Empty(_) => None,
        }
    }

    /// `FAIL <check or case>: <reason>` for every failing check, then
    /// every failing case (for `--verbose`); a check's reason says what
    /// `/status` showed.
    pub fn case_lines(&self) -> Vec<String> {
        match &self.result {
            TestResult::Ran(cases) => self
                .checks
                .iter()
                .chain(cases)
                .filter_map(|c| {
                    let reason = c.failure.as_deref()?;
                    Some(format!("FAIL {}: {}", one_line(&c.name), one_line(reason)))
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// `<passed>/<total> cases`, with `, <passed>/<total> checks` when the
    /// test has checks.
    fn counts(&self) -> String {
        let (passed, total) = self.cases();
        match self.checks() {
            (_, 0) => format!("{passed}/{total} cases"),
            (checks_passed, checks) => {
                format!("{passed}/{total} cases, {checks_passed}/{checks} checks")
            }
        }
    }

    /// The report line. A FAIL names the first failing check (upstream
    /// tests assert status before they send requests), else case.
    pub fn line(&self) -> String {
        let counts = self.counts();
        match &self.result {
            TestResult::Ran(cases) => {
                match self
                    .checks
                    .iter()
                    .chain(cases)
                    .find(|c| c.failure.is_some())
                {
                    None => format!("PASS {}: {counts}", self.name),
                    Some(first) => format!(
                        "FAIL {}: {counts} — {}: {}",
                        self.name,
                        one_line(&first.name),
                        one_line(first.failure.as_deref().unwrap_or_default())
                    ),
                }
            }
            TestResult::Broken { reason, .. } => {
                format!("FAIL {}: {counts} — setup: {}", self.name, one_line(reason))
            }
            TestResult::Skipped(reason) => format!("SKIP {}: {}", self.name, one_line(reason)),
            TestResult::Empty(reason) => format!("EMPTY {}: {}", self.name, one_line(reason)),
        }
    }
}

/// Every outcome of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub outcomes: Vec<TestOutcome>,
    /// Cases of tests that ran, left out one by one as out of scope.
    pub skipped_cases: usize,
}

impl Summary {
    fn count(&self, want: Option<bool>) -> usize {
        self.outcomes.iter().filter(|o| o.passed() == want).count()
    }

    /// (passed, failed) cases over all tests.
    pub fn cases(&self) -> (usize, usize) {
        self.outcomes.iter().fold((0, 0), |(p, f), o| {
            let (passed, total) = o.cases();
            (p + passed, f + total - passed)
        })
    }

    /// (passed, failed) checks over all tests.
    pub fn checks(&self) -> (usize, usize) {
        self.outcomes.iter().fold((0, 0), |(p, f), o| {
            let (passed, total) = o.checks();
            (p + passed, f + total - passed)
        })
    }

    /// `tests: N passed, N failed (...)`, `cases: N passed, N failed` and
    /// `checks: N passed, N failed`.
    pub fn closing_lines(&self) -> [String; 3] {
        let skipped = self
            .outcomes
            .iter()
            .filter(|o| matches!(o.result, TestResult::Skipped(_)))
            .count();
        let empty = self
            .outcomes
            .iter()
            .filter(|o| matches!(o.result, TestResult::Empty(_)))
            .count();
        let (cases_passed, cases_failed) = self.cases();
        let (checks_passed, checks_failed) = self.checks();
        [
            format!(
                "tests: {} passed, {} failed ({skipped} skipped as out of scope, {empty} without ported cases)",
                self.count(Some(true)),
                self.count(Some(false))
            ),
            match self.skipped_cases {
                0 => format!("cases: {cases_passed} passed, {cases_failed} failed"),
                n => format!(
                    "cases: {cases_passed} passed, {cases_failed} failed ({n} skipped as out of scope)"
                ),
            },
            format!("checks: {checks_passed} passed, {checks_failed} failed"),
        ]
    }

    /// At least one test ran and none failed.
    pub fn success(&self) -> bool {
        self.count(Some(true)) > 0 && self.count(Some(false)) == 0
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Data(#[from] data::DataError),
    #[error("{path}:{line}: {message}")]
    SkipList {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// Reads an out-of-scope list: `<Test> <reason>` per line, `#` comments
/// and blank lines ignored; a test without a reason is an error.
pub fn read_skip_list(path: &Path) -> Result<BTreeMap<String, String>, RunError> {
    let text = std::fs::read_to_string(path).map_err(|source| {
        RunError::Data(data::DataError::Read {
            path: path.to_path_buf(),
            source,
        })
    })?;
    parse_skip_list(&text).map_err(|(line, message)| RunError::SkipList {
        path: path.to_path_buf(),
        line,
        message,
    })
}

fn parse_skip_list(text: &str) -> Result<BTreeMap<String, String>, (usize, String)> {
    let mut out = BTreeMap::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, reason) = line
            .split_once(char::is_whitespace)
            .map(|(n, r)| (n, r.trim()))
            .unwrap_or((line, ""));
        if reason.is_empty() {
            return Err((index + 1, format!("{name} has no reason")));
        }
        // `<Test>#<case>`: a case that is no number would be skipped by
        // nothing, and the whole test would run as if it were not listed.
        if let Some((_, case)) = name.split_once('#')
            && case.parse::<usize>().is_err()
        {
            return Err((
                index + 1,
                format!("{name}: the case after '#' is not a number"),
            ));
        }
        if out.insert(name.to_string(), reason.to_string()).is_some() {
            return Err((index + 1, format!("{name} is listed twice")));
        }
    }
    Ok(out)
}

/// Runs every test file, sequentially, calling `on_outcome` as each one
/// finishes. Only unusable paths are an error; an unreadable test file is
/// a failed test.
pub async fn run(
    options: &Options,
    mut on_outcome: impl FnMut(&TestOutcome),
) -> Result<Summary, RunError> {
    let files = data::discover(&options.paths)?;
    let loaded: Vec<_> = files
        .into_iter()
        .map(|file| {
            let test = data::TestFile::load(&file);
            (file, test)
        })
        .collect();
    let supported = supported_features(
        loaded.iter().filter_map(|(_, t)| t.as_ref().ok()),
        &options.skip,
    );
    let mut summary = Summary::default();
    for (file, loaded) in loaded {
        let outcome = match loaded {
            Err(err) => TestOutcome {
                name: file
                    .file_stem()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                result: TestResult::Broken {
                    reason: err.to_string(),
                    cases: 0,
                    checks: 0,
                },
                checks: Vec::new(),
                info: TestInfo::default(),
            },
            Ok(test) => {
                if let Some(filter) = &options.filter
                    && !test.name.contains(filter.as_str())
                {
                    continue;
                }
                let outcome = run_one(options, &test, &supported).await;
                if matches!(outcome.result, TestResult::Ran(_)) {
                    summary.skipped_cases += skipped_cases(&options.skip, &test.name).len();
                }
                outcome
            }
        };
        on_outcome(&outcome);
        summary.outcomes.push(outcome);
    }
    Ok(summary)
}

/// The features teapot claims, as upstream's `SupportedFeatures`: those of
/// every test it runs (all of `tests` the skip list does not name whole),
/// the same set the report claims; `--filter` does not change it.
pub fn supported_features<'a>(
    tests: impl IntoIterator<Item = &'a data::TestFile>,
    skip: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    tests
        .into_iter()
        .filter(|t| !skip.contains_key(&t.name))
        .flat_map(|t| t.features.iter().cloned())
        .collect()
}

async fn run_one(
    options: &Options,
    test: &data::TestFile,
    supported: &BTreeSet<String>,
) -> TestOutcome {
    let mut checks = Vec::new();
    let result = if let Some(reason) = options.skip.get(&test.name) {
        TestResult::Skipped(reason.clone())
    } else if test.returns_when.iter().any(|c| c.holds(supported)) {
        // Upstream's body returns before its first case or check: the test
        // passes with nothing run.
        TestResult::Ran(Vec::new())
    } else if test.cases.is_empty() && test.checks.is_empty() {
        let first = test
            .unported_cases
            .first()
            .and_then(|c| c.get("reason"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("none listed");
        TestResult::Empty(format!(
            "no ported case ({} unported; first: {first})",
            test.unported_cases.len()
        ))
    } else {
        let skip = skipped_cases(&options.skip, &test.name);
        match runner::run_test(&options.config, test, &skip).await {
            Ok((cases, ran_checks)) => {
                checks = ran_checks;
                TestResult::Ran(cases)
            }
            Err(reason) => TestResult::Broken {
                reason,
                cases: test.cases.len(),
                checks: test.checks.len(),
            },
        }
    };
    let cases_left_out = if matches!(result, TestResult::Ran(_)) {
        skipped_cases(&options.skip, &test.name).len()
    } else {
        0
    };
    TestOutcome {
        name: test.name.clone(),
        result,
        checks,
        info: TestInfo {
            features: test.features.clone(),
            provisional: test.provisional,
            cases_left_out,
        },
    }
}

/// The cases of `test` the skip list names one by one (`<Test>#<index>`,
/// the index as the report numbers cases).
pub fn skipped_cases(skip: &BTreeMap<String, String>, test: &str) -> Vec<usize> {
    skip.keys()
        .filter_map(|key| key.strip_prefix(test)?.strip_prefix('#')?.parse().ok())
        .collect()
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(name: &str, failures: &[Option<&str>]) -> TestOutcome {
        TestOutcome {
            name: name.into(),
            checks: Vec::new(),
            info: TestInfo::default(),
            result: TestResult::Ran(
                failures
                    .iter()
                    .enumerate()
                    .map(|(i, f)| CaseOutcome {
                        name: format!("{i} request"),
                        failure: f.map(str::to_string),
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn report_lines_and_totals() {
        let outcomes = vec![
            ran("A", &[None, None]),
            ran(
                "B",
                &[
                    None,
                    Some("expected status code to be one of [200], got 404"),
                    Some("x"),
                ],
            ),
            TestOutcome {
                name: "C".into(),
                checks: Vec::new(),
                info: TestInfo::default(),
                result: TestResult::Broken {
                    reason: "starting proxy:\n gone".into(),
                    cases: 4,
                    checks: 0,
                },
            },
            TestOutcome {
                name: "D".into(),
                checks: Vec::new(),
                info: TestInfo::default(),
                result: TestResult::Skipped("L4 plane".into()),
            },
            TestOutcome {
                name: "E".into(),
                checks: Vec::new(),
                info: TestInfo::default(),
                result: TestResult::Empty("no ported case".into()),
            },
        ];
        let lines: Vec<String> = outcomes.iter().map(TestOutcome::line).collect();
        assert_eq!(
            lines,
            [
                "PASS A: 2/2 cases",
                "FAIL B: 1/3 cases — 1 request: expected status code to be one of [200], got 404",
                "FAIL C: 0/4 cases — setup: starting proxy: gone",
                "SKIP D: L4 plane",
                "EMPTY E: no ported case",
            ]
        );
        assert_eq!(
            outcomes[1].case_lines(),
            [
                "FAIL 1 request: expected status code to be one of [200], got 404",
                "FAIL 2 request: x"
            ]
        );
        assert!(outcomes[2].case_lines().is_empty());
        let summary = Summary {
            outcomes,
            skipped_cases: 0,
        };
        assert_eq!(
            summary.closing_lines(),
            [
                "tests: 1 passed, 2 failed (1 skipped as out of scope, 1 without ported cases)",
                "cases: 3 passed, 6 failed",
                "checks: 0 passed, 0 failed",
            ]
        );
        assert!(!summary.success());
        assert!(!Summary::default().success());
    }

    #[test]
    fn cases_are_skipped_one_by_one() {
        let skip =
            parse_skip_list("A whole test\nB#6 one case\nB#10 another\nBC#1 not B's\n").unwrap();
        assert_eq!(skipped_cases(&skip, "B"), vec![10, 6]);
        assert!(skipped_cases(&skip, "A").is_empty());
        assert!(skip.contains_key("A"));
    }

    #[test]
    fn skipped_cases_are_numbers() {
        let err = parse_skip_list("A#first no index\n").unwrap_err();
        assert_eq!(
            err,
            (1, "A#first: the case after '#' is not a number".to_string())
        );
        assert!(parse_skip_list("A# no index\n").is_err());
        assert!(parse_skip_list("A#3 fine\n").is_ok());
    }

    #[test]
    fn skip_lists_need_reasons() {
        let list =
            parse_skip_list("# comment\n\nTCPRouteX  needs the L4 plane\nGRPCY\tno gRPC echo\n")
                .unwrap();
        assert_eq!(list["TCPRouteX"], "needs the L4 plane");
        assert_eq!(list["GRPCY"], "no gRPC echo");
        assert_eq!(
            parse_skip_list("A\n").unwrap_err(),
            (1, "A has no reason".to_string())
        );
        assert_eq!(
            parse_skip_list("A x\nA y\n").unwrap_err(),
            (2, "A is listed twice".to_string())
        );
    }

    /// Setup failures and unknown helpers fail before any proxy matters.
    /// A test whose body returns on a feature teapot claims (one of a test
    /// it runs) passes with nothing run, as upstream reports it; a feature
    /// only an out-of-scope test has, or a `lacks` of a claimed one, does not
    /// return, so the test runs (and fails here: there is no binary).
    #[tokio::test]
    async fn early_returns_are_judged_against_the_claimed_features() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let case = r#""manifests": [], "cases": [{"Request": {"Path": "/"}, "helper": "http.MakeRequest", "protocol": "http"}]"#;
        for (name, rest) in [
            ("Claims", r#""features": ["SupportMixed"]"#),
            ("OutOfScope", r#""features": ["SupportOther"]"#),
            ("ReturnsHas", r#""returns_when": [{"has": "SupportMixed"}]"#),
            (
                "ReturnsLacks",
                r#""returns_when": [{"lacks": "SupportMixed"}]"#,
            ),
            (
                "ReturnsOther",
                r#""returns_when": [{"has": "SupportOther"}]"#,
            ),
        ] {
            std::fs::write(
                data.join(format!("{name}.json")),
                format!(r#"{{"name": "{name}", {rest}, {case}}}"#),
            )
            .unwrap();
        }
        let options = Options {
            config: RunConfig {
                teapot: PathBuf::from("/nonexistent/teapot"),
                upstream: dir.path().join("upstream"),
                keep: false,
                case_timeout: Duration::from_millis(100),
                parallel: 1,
                proxy_args: Vec::new(),
                l4_pool: String::new(),
            },
            filter: Some("Returns".into()),
            skip: BTreeMap::from([("OutOfScope".to_string(), "not served".to_string())]),
            paths: vec![data],
        };
        let summary = run(&options, |_| {}).await.unwrap();
        let passed: Vec<(&str, Option<bool>)> = summary
            .outcomes
            .iter()
            .map(|o| (o.name.as_str(), o.passed()))
            .collect();
        assert_eq!(
            passed,
            vec![
                ("ReturnsHas", Some(true)),
                ("ReturnsLacks", Some(false)),
                ("ReturnsOther", Some(false)),
            ]
        );
        assert_eq!(summary.outcomes[0].line(), "PASS ReturnsHas: 0/0 cases");
    }

    #[tokio::test]
    async fn missing_binary_and_unknown_data_are_failures() {
        let dir = tempfile::tempdir().unwrap();
        let upstream = dir.path().join("upstream");
        std::fs::create_dir_all(upstream.join("base")).unwrap();
        std::fs::create_dir_all(upstream.join("tests")).unwrap();
        std::fs::write(
            upstream.join("base/manifests.yaml"),
            "kind: Namespace\nmetadata: {name: ns}\n",
        )
        .unwrap();
        std::fs::write(upstream.join("tests/t.yaml"), "").unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(
            data.join("One.json"),
            r#"{"name": "One", "manifests": ["tests/t.yaml"], "cases": [{"Request": {"Path": "/"}, "helper": "http.MakeRequest", "protocol": "http"}]}"#,
        )
        .unwrap();
        std::fs::write(
            data.join("Two.json"),
            r#"{"name": "Two", "manifests": ["tests/t.yaml"], "gateways": [{"Name": "nowhere", "Namespace": "ns"}], "cases": [{"helper": "x", "protocol": "http"}]}"#,
        )
        .unwrap();
        std::fs::write(data.join("Three.json"), "{").unwrap();
        std::fs::write(data.join("index.json"), "{}").unwrap();
        let options = Options {
            config: RunConfig {
                teapot: PathBuf::from("/nonexistent/teapot"),
                upstream,
                keep: false,
                case_timeout: Duration::from_millis(100),
                parallel: 2,
                proxy_args: Vec::new(),
                l4_pool: String::new(),
            },
            filter: None,
            skip: BTreeMap::new(),
            paths: vec![data],
        };
        let summary = run(&options, |_| {}).await.unwrap();
        let lines: Vec<String> = summary.outcomes.iter().map(TestOutcome::line).collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].starts_with("FAIL One: 0/1 cases — setup: starting /nonexistent/teapot proxy"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("FAIL Three: 0/0 cases — setup: "),
            "{lines:?}"
        );
        assert_eq!(
            lines[2],
            "FAIL Two: 0/1 cases — setup: the test addresses Gateway ns/nowhere, which neither the base nor the test manifests define"
        );
    }
}
