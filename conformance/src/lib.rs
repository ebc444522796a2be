//! Runs Gherkin scenario files in the format of the Kubernetes
//! ingress-controller-conformance suite against `teapot proxy` in manifests
//! mode.
//!
//! Scenario files are data: the runner knows the *step vocabulary* of the
//! upstream suite ([`steps::STEP_DEFS`]), never particular files, scenarios,
//! hosts or services. For each scenario ([`feature::Pickle`]) it makes a fresh
//! namespace directory, writes the objects the upstream harness would create in
//! a cluster (Ingress, Services, EndpointSlices for real echo backends, TLS
//! Secrets, teapot's default IngressClass; see [`manifests`]), starts a
//! `teapot proxy --manifests DIR` child process on first need, and executes the
//! steps in order ([`scenario`]). The first failing step fails the scenario;
//! an unknown step is a failure (`undefined step: ...`), never a skip.
//!
//! Output: one `PASS file: scenario` / `FAIL file: scenario — step "...": why`
//! line per scenario, then `N passed, N failed`.

pub mod admin;
pub mod auth_service;
pub mod feature;
pub mod gateway;
pub mod manifests;
pub mod scenario;
pub mod steps;
pub mod target;

use std::path::PathBuf;

/// What to run and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `teapot` binary.
    pub teapot: PathBuf,
    /// Keep each scenario's namespace directory (path printed on stderr).
    pub keep: bool,
    /// Only scenarios whose name contains this text.
    pub filter: Option<String>,
    /// Feature files, or directories searched recursively for `*.feature`.
    pub paths: Vec<PathBuf>,
}

/// The result of one scenario (or of a feature file that could not be read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The feature file's name.
    pub file_name: String,
    /// The scenario's name.
    pub scenario: String,
    /// `None` on success.
    pub failure: Option<scenario::StepFailure>,
}

impl Outcome {
    /// Whether the scenario passed.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }

    /// The report line: `PASS f: s` or `FAIL f: s — step "...": reason`.
    pub fn line(&self) -> String {
        match &self.failure {
            None => format!("PASS {}: {}", self.file_name, one_line(&self.scenario)),
            Some(failure) => format!(
                "FAIL {}: {} — step \"{}\": {}",
                self.file_name,
                one_line(&self.scenario),
                one_line(&failure.step),
                one_line(&failure.reason)
            ),
        }
    }
}

/// Every outcome of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// In execution order.
    pub outcomes: Vec<Outcome>,
}

impl Summary {
    /// Passed scenarios.
    pub fn passed(&self) -> usize {
        self.outcomes.iter().filter(|o| o.passed()).count()
    }

    /// Failed scenarios (unreadable feature files count as one each).
    pub fn failed(&self) -> usize {
        self.outcomes.len() - self.passed()
    }

    /// The closing line: `N passed, N failed`.
    pub fn closing_line(&self) -> String {
        format!("{} passed, {} failed", self.passed(), self.failed())
    }

    /// True when at least one scenario ran and none failed.
    pub fn success(&self) -> bool {
        !self.outcomes.is_empty() && self.failed() == 0
    }
}

/// Discovers, parses and runs every scenario, sequentially, calling
/// `on_outcome` as each one finishes. Only an unusable command-line path is
/// an error; unparsable files are reported as failed outcomes.
pub async fn run(
    options: &Options,
    mut on_outcome: impl FnMut(&Outcome),
) -> Result<Summary, feature::FeatureError> {
    let files = feature::discover(&options.paths)?;
    let mut summary = Summary::default();
    for file in files {
        let pickles = match feature::load(&file) {
            Ok(pickles) => pickles,
            Err(err) => {
                let outcome = Outcome {
                    file_name: file
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_else(|| file.display().to_string()),
                    scenario: "(whole file)".into(),
                    failure: Some(scenario::StepFailure {
                        step: "parse".into(),
                        reason: err.to_string(),
                    }),
                };
                on_outcome(&outcome);
                summary.outcomes.push(outcome);
                continue;
            }
        };
        for pickle in pickles {
            if let Some(filter) = &options.filter
                && !pickle.name.contains(filter.as_str())
            {
                continue;
            }
            let outcome = run_pickle(options, &pickle).await;
            on_outcome(&outcome);
            summary.outcomes.push(outcome);
        }
    }
    Ok(summary)
}

/// Runs one scenario in its own namespace directory and proxy process.
pub async fn run_pickle(options: &Options, pickle: &feature::Pickle) -> Outcome {
    let failure = match scenario::ScenarioRun::new(&options.teapot) {
        Err(reason) => Some(scenario::StepFailure {
            step: "(setup)".into(),
            reason,
        }),
        Ok(mut run) => {
            let result = run.run_steps(&pickle.steps).await;
            let namespace = run.namespace().to_string();
            if let Some(dir) = run.finish(options.keep).await {
                eprintln!(
                    "kept namespace {namespace} of {:?} in {}",
                    pickle.name,
                    dir.display()
                );
            }
            result.err()
        }
    };
    Outcome {
        file_name: pickle.file_name.clone(),
        scenario: pickle.name.clone(),
        failure,
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines() {
        let pass = Outcome {
            file_name: "a.feature".into(),
            scenario: "works\n  nicely".into(),
            failure: None,
        };
        let fail = Outcome {
            file_name: "b.feature".into(),
            scenario: "breaks".into(),
            failure: Some(scenario::StepFailure {
                step: "the response status-code must be 200".into(),
                reason: "expected status code 200 but 404 was returned".into(),
            }),
        };
        assert_eq!(pass.line(), "PASS a.feature: works nicely");
        assert_eq!(
            fail.line(),
            "FAIL b.feature: breaks — step \"the response status-code must be 200\": expected status code 200 but 404 was returned"
        );
        let summary = Summary {
            outcomes: vec![pass, fail],
        };
        assert_eq!(summary.closing_line(), "1 passed, 1 failed");
        assert!(!summary.success());
        assert!(!Summary::default().success());
    }

    /// Steps that fail before any proxy is needed: no binary required.
    #[tokio::test]
    async fn undefined_steps_fail_the_scenario() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("x.feature"),
            "Feature: x\n\n  Scenario: unknown words\n    Given a new random namespace\n    When I dance on the proxy\n    Then the response status-code must be 200\n\n  Scenario: filtered away\n    Given a new random namespace\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("broken.feature"), "this is not gherkin\n").unwrap();
        let options = Options {
            teapot: PathBuf::from("/nonexistent/teapot"),
            keep: false,
            filter: Some("unknown".into()),
            paths: vec![dir.path().to_path_buf()],
        };
        let mut lines = Vec::new();
        let summary = run(&options, |o| lines.push(o.line())).await.unwrap();
        assert_eq!(summary.outcomes.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("FAIL broken.feature: (whole file) — step \"parse\""),
            "{lines:?}"
        );
        assert_eq!(
            lines[1],
            "FAIL x.feature: unknown words — step \"I dance on the proxy\": undefined step: I dance on the proxy"
        );
        assert_eq!(summary.closing_line(), "0 passed, 2 failed");
    }

    /// A scenario whose steps need no proxy passes without one; the missing
    /// binary only matters once a step needs the proxy.
    #[tokio::test]
    async fn proxy_start_failure_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("y.feature"),
            "Feature: y\n\n  Scenario: setup only\n    Given a new random namespace\n    And a self-signed TLS secret named \"s\" for the \"shop.example\" hostname\n\n  Scenario: needs the proxy\n    Given an Ingress resource named \"web\" with this spec:\n      \"\"\"\n      defaultBackend:\n        service:\n          name: web-svc\n          port:\n            number: 80\n      \"\"\"\n    Then The Ingress status shows the IP address or FQDN where it is exposed\n",
        )
        .unwrap();
        let options = Options {
            teapot: PathBuf::from("/nonexistent/teapot"),
            keep: false,
            filter: None,
            paths: vec![dir.path().join("y.feature")],
        };
        let summary = run(&options, |_| {}).await.unwrap();
        let lines: Vec<String> = summary.outcomes.iter().map(Outcome::line).collect();
        assert_eq!(lines[0], "PASS y.feature: setup only");
        assert!(
            lines[1].starts_with("FAIL y.feature: needs the proxy — step \"The Ingress status shows the IP address or FQDN where it is exposed\": starting /nonexistent/teapot proxy"),
            "{lines:?}"
        );
    }
}
