//! Loading `.feature` files and flattening them into runnable scenarios.
//!
//! A feature file becomes a list of [`Pickle`]s (the Cucumber name for one
//! executable scenario): Background steps are prepended (the feature's, then
//! a Rule's), and every row of every `Examples` table of a Scenario Outline
//! becomes its own pickle with `<placeholder>`s substituted in the step text,
//! docstrings, data tables and the scenario name.
//!
//! One deliberate deviation from Cucumber: a Scenario Outline **without any
//! Examples block** runs once, as a plain scenario (Cucumber would silently
//! produce zero pickles). The upstream `load_balancing.feature` is written that
//! way and is clearly meant to run. An Examples block whose table has a header
//! but no rows still produces nothing, as in Cucumber.

use std::path::{Path, PathBuf};

/// One step of a pickle, keyword stripped, placeholders substituted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PickleStep {
    /// The Gherkin keyword as written (`Given`, `When`, `Then`, `And`, `But`, `*`).
    pub keyword: String,
    /// The step text without its keyword.
    pub text: String,
    /// The step's docstring (`"""` block), dedented.
    pub docstring: Option<String>,
    /// The step's data table, one `Vec` per row (the header row included).
    pub table: Option<Vec<Vec<String>>>,
}

/// One executable scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pickle {
    /// The file the scenario comes from.
    pub file: PathBuf,
    /// The file name (no directories), used in report lines.
    pub file_name: String,
    /// The feature's name.
    pub feature: String,
    /// The scenario's name; for outline rows, placeholders substituted and the
    /// example values appended in brackets when the name has no placeholder.
    pub name: String,
    /// Background steps followed by the scenario's steps.
    pub steps: Vec<PickleStep>,
}

/// Loading failed.
#[derive(Debug, thiserror::Error)]
pub enum FeatureError {
    /// A path given on the command line does not exist or cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The offending path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file is not valid Gherkin.
    #[error("{path}: parse error: {message}")]
    Parse {
        /// The offending file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
}

/// Expands the command-line paths into a sorted, de-duplicated list of
/// `.feature` files. Directories are searched recursively; files are taken as
/// given, whatever their extension.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, FeatureError> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| FeatureError::Io {
            path: path.clone(),
            source,
        })?;
        if meta.is_dir() {
            let mut found = Vec::new();
            walk(path, &mut found)?;
            found.sort();
            out.extend(found);
        } else {
            out.push(path.clone());
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), FeatureError> {
    let entries = std::fs::read_dir(dir).map_err(|source| FeatureError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| FeatureError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = entry.path();
        let ty = entry.file_type().map_err(|source| FeatureError::Io {
            path: path.clone(),
            source,
        })?;
        if ty.is_dir() {
            walk(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "feature") {
            out.push(path);
        }
    }
    Ok(())
}

/// Parses one feature file into pickles.
pub fn load(path: &Path) -> Result<Vec<Pickle>, FeatureError> {
    let src = std::fs::read_to_string(path).map_err(|source| FeatureError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_str(&src, path)
}

/// Parses feature text into pickles; `path` is only used for naming.
pub fn parse_str(src: &str, path: &Path) -> Result<Vec<Pickle>, FeatureError> {
    let feature = gherkin::Feature::parse(src, gherkin::GherkinEnv::default()).map_err(|e| {
        FeatureError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    })?;
    Ok(pickles(&feature, path))
}

/// Flattens a parsed feature.
pub fn pickles(feature: &gherkin::Feature, path: &Path) -> Vec<Pickle> {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let background: Vec<PickleStep> = feature
        .background
        .iter()
        .flat_map(|b| b.steps.iter().map(plain_step))
        .collect();
    let mut out = Vec::new();
    let mut push = |scenario: &gherkin::Scenario, background: &[PickleStep]| {
        for (name, steps) in expand(scenario) {
            let mut all = background.to_vec();
            all.extend(steps);
            out.push(Pickle {
                file: path.to_path_buf(),
                file_name: file_name.clone(),
                feature: feature.name.clone(),
                name,
                steps: all,
            });
        }
    };
    for scenario in &feature.scenarios {
        push(scenario, &background);
    }
    for rule in &feature.rules {
        let mut bg = background.clone();
        bg.extend(
            rule.background
                .iter()
                .flat_map(|b| b.steps.iter().map(plain_step)),
        );
        for scenario in &rule.scenarios {
            push(scenario, &bg);
        }
    }
    out
}

fn plain_step(step: &gherkin::Step) -> PickleStep {
    PickleStep {
        keyword: step.keyword.trim().to_string(),
        text: step.value.clone(),
        docstring: step.docstring.clone(),
        table: step.table.as_ref().map(|t| t.rows.clone()),
    }
}

/// Expands one scenario into `(name, steps)` pairs: one for a plain scenario
/// (or an outline without Examples), one per example row otherwise.
pub fn expand(scenario: &gherkin::Scenario) -> Vec<(String, Vec<PickleStep>)> {
    let steps: Vec<PickleStep> = scenario.steps.iter().map(plain_step).collect();
    if scenario.examples.is_empty() {
        return vec![(scenario.name.trim().to_string(), steps)];
    }
    let mut out = Vec::new();
    for (block_index, examples) in scenario.examples.iter().enumerate() {
        let Some(table) = &examples.table else {
            continue;
        };
        let Some((header, rows)) = table.rows.split_first() else {
            continue;
        };
        for (row_index, row) in rows.iter().enumerate() {
            let vars: Vec<(&str, &str)> = header
                .iter()
                .map(String::as_str)
                .zip(row.iter().map(String::as_str))
                .collect();
            let base = scenario.name.trim();
            let substituted = substitute(base, &vars);
            let name = if substituted != base {
                substituted
            } else {
                let values: Vec<String> = vars.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let block = if scenario.examples.len() > 1 {
                    format!("examples {} ", block_index + 1)
                } else {
                    String::new()
                };
                format!(
                    "{base} [{block}row {}: {}]",
                    row_index + 1,
                    values.join(", ")
                )
            };
            let steps = steps
                .iter()
                .map(|s| PickleStep {
                    keyword: s.keyword.clone(),
                    text: substitute(&s.text, &vars),
                    docstring: s.docstring.as_deref().map(|d| substitute(d, &vars)),
                    table: s.table.as_ref().map(|t| {
                        t.iter()
                            .map(|r| r.iter().map(|c| substitute(c, &vars)).collect())
                            .collect()
                    }),
                })
                .collect();
            out.push((name, steps));
        }
    }
    out
}

/// Replaces every `<name>` whose name is an Examples column; anything else in
/// angle brackets is left alone (e.g. `<key>` in a step that takes a table).
pub fn substitute(text: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let replaced = after.find('>').and_then(|end| {
            let name = &after[..end];
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v, end))
        });
        match replaced {
            Some((value, end)) => {
                out.push_str(value);
                rest = &after[end + 1..];
            }
            None => {
                out.push('<');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTLINE: &str = r#"Feature: Made-up outline
  Some description.

  Background:
    Given a new random namespace
    Given an Ingress resource named "web" with this spec:
    """
    defaultBackend:
      service:
        name: <not-a-column>
    """

  Scenario Outline: Sends <verb> to the default backend
    When I send a "<verb>" request to http://"<server>"/"<where>"
    Then the request headers must contain <key> with matching <value>
      | key    | value   |
      | X-Name | <verb>  |

    Examples:
      | verb    | server        | where   |
      | OPTIONS | shop.example  | cart    |
      | HEAD    |               |         |

  Scenario Outline: no placeholder in the name
    When I send a "<m>" request to "http://a.example/"

    Examples:
      | m   |
      | GET |

    Examples: second block
      | m    |
      | POST |

  Scenario Outline: outline without examples runs once
    When I send 3 requests to "http://lb.example"

  Scenario Outline: outline with empty examples runs never
    When I send 3 requests to "http://lb.example"

    Examples:
      | a |

  Scenario: plain one
    (a description line)

    When I send a "GET" request to "https://x.example"

  Rule: a rule
    Background:
      Given a self-signed TLS secret named "s" for the "x.example" hostname

    Scenario: inside the rule
      Then the response status-code must be 418
"#;

    #[test]
    fn outline_expansion_background_and_rules() {
        let pickles = parse_str(OUTLINE, Path::new("/tmp/made/up.feature")).unwrap();
        let names: Vec<&str> = pickles.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "Sends OPTIONS to the default backend",
                "Sends HEAD to the default backend",
                "no placeholder in the name [examples 1 row 1: m=GET]",
                "no placeholder in the name [examples 2 row 1: m=POST]",
                "outline without examples runs once",
                "plain one",
                "inside the rule",
            ]
        );
        for p in &pickles {
            assert_eq!(p.file_name, "up.feature");
            assert_eq!(p.feature, "Made-up outline");
            assert_eq!(p.steps[0].text, "a new random namespace");
            assert_eq!(p.steps[0].keyword, "Given");
        }
        let first = &pickles[0];
        assert_eq!(first.steps.len(), 4);
        assert_eq!(
            first.steps[2].text,
            r#"I send a "OPTIONS" request to http://"shop.example"/"cart""#
        );
        assert_eq!(first.steps[2].keyword, "When");
        // `<key>`/`<value>` are not columns: left alone.
        assert_eq!(
            first.steps[3].text,
            "the request headers must contain <key> with matching <value>"
        );
        assert_eq!(
            first.steps[3].table.as_ref().unwrap(),
            &vec![
                vec!["key".to_string(), "value".to_string()],
                vec!["X-Name".to_string(), "OPTIONS".to_string()],
            ]
        );
        // Docstring: dedented, unknown placeholder untouched.
        let doc = first.steps[1].docstring.as_deref().unwrap();
        assert!(doc.contains("defaultBackend:\n  service:\n    name: <not-a-column>"));
        let second = &pickles[1];
        assert_eq!(
            second.steps[2].text,
            r#"I send a "HEAD" request to http://""/"""#
        );
        let rule = pickles.last().unwrap();
        assert_eq!(rule.steps.len(), 4);
        assert_eq!(
            rule.steps[2].text,
            r#"a self-signed TLS secret named "s" for the "x.example" hostname"#
        );
        assert_eq!(rule.steps[3].text, "the response status-code must be 418");
    }

    #[test]
    fn substitute_only_known_columns() {
        let vars = [("a", "1"), ("b", "")];
        assert_eq!(substitute("<a><b><c> <a", &vars), "1<c> <a");
        assert_eq!(substitute("x < y > z", &vars), "x < y > z");
        assert_eq!(substitute("<<a>>", &vars), "<1>");
    }

    #[test]
    fn discover_recurses_and_sorts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("b/c")).unwrap();
        std::fs::write(dir.path().join("b/c/z.feature"), "Feature: z\n").unwrap();
        std::fs::write(dir.path().join("a.feature"), "Feature: a\n").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        let found = discover(&[dir.path().to_path_buf()]).unwrap();
        assert_eq!(
            found,
            vec![
                dir.path().join("a.feature"),
                dir.path().join("b/c/z.feature")
            ]
        );
        assert!(discover(&[dir.path().join("missing")]).is_err());
    }
}
