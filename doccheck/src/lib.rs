//! Checks that keep teapot's documentation true to the repository. The
//! integration test `tests/repository.rs` runs them on the repository, so
//! `scripts/test.sh` (through `cargo test --workspace`) fails on a finding.
//!
//! # Layout
//!
//! - [`markdown_files`] and [`text_files`]: what is read. Markdown is every
//!   `*.md` of the repository (the README, `docs/`, each crate's README,
//!   the benchmark pages under `benches/`, `charts/README.md`); text files
//!   are every UTF-8 file. Both skip `vendor/` (third-party code), any
//!   `target/` (build output), hidden directories such as `.git/`, and
//!   never leave the repository (so `../shared` is not read).
//! - [`check_links`] (rule a): a relative Markdown link `[text](path)` names
//!   a file or directory that exists, relative to the page. The `#anchor`
//!   part is not checked; web links (`scheme:`) and page-local anchors are
//!   skipped.
//! - [`check_paths`] (rule b): a repository path in backticks exists. A code
//!   span is taken for a path when it has no spaces or wildcards, contains
//!   `/`, its first part is a top-level directory of the repository, and its
//!   last part has a file extension or it ends in `/`. A trailing `:line` is
//!   dropped. The path resolves from the repository root or from the page's
//!   directory.
//! - [`check_commands`] (rule c): the README's first code block holds the
//!   demo command `scripts/demo.sh` and the test command, which is the
//!   `scripts/*.sh` command `.ci/run` runs first (today `scripts/test.sh`),
//!   each written as CI calls it, from the repository root.
//! - [`check_words`] (rule d): no label of the work that produced something,
//!   in any text file's content or any file or directory name: the word
//!   "session" or "sessions" followed by a digit (directly, or after one
//!   space or hyphen), the
//!   phrase "this" + "session", "helper" used for a person's work
//!   ("helper" or "helper's" followed by branch, worktree, agent or session),
//!   and a numbered work item or review ("issue" and a number, with or
//!   without `#`; "isolation" + "review"; "review" + ", finding").
//!   Case does not matter. The word stays free where it means the domain: a
//!   TLS, BGP or BFD session written as such ("this BFD session"), session
//!   affinity, and helper functions ("test helpers").
//! - [`check_results`] (rule e): every file under `benches/results/` is
//!   named (by its file name) in some Markdown page, so a raw result is
//!   never an orphan nobody can tell the meaning of; `benches/README.md`
//!   lists them all with the page that reads each.
//!
//! Code blocks (fenced with three backticks) are commands and output, not
//! claims about the repository: rules a and b skip them.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// One thing a doc gets wrong: where, what, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Path relative to the repository root.
    pub file: PathBuf,
    /// 1-based; 0 when the finding is about the file's name.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)
    }
}

/// Directories never read: third-party code, build output.
const SKIPPED_DIRS: &[&str] = &["vendor", "target", "node_modules"];

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if name.starts_with('.') && name != ".ci" || SKIPPED_DIRS.contains(&name.as_ref()) {
                continue;
            }
            out.push(path.strip_prefix(root).unwrap_or(&path).join(""));
            walk(root, &path, out)?;
        } else if kind.is_file() {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// Every file and directory (directories end in `/`) under `root`, relative
/// to it, in a stable order.
fn entries(root: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    walk(root, root, &mut out)?;
    Ok(out)
}

/// Every Markdown page of the repository, relative to `root`.
pub fn markdown_files(root: &Path) -> io::Result<Vec<PathBuf>> {
    Ok(entries(root)?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect())
}

/// Every UTF-8 file of the repository with its text, relative to `root`.
pub fn text_files(root: &Path) -> io::Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    for path in entries(root)? {
        if path.as_os_str().to_string_lossy().ends_with('/') {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(root.join(&path)) {
            out.push((path, text));
        }
    }
    Ok(out)
}

/// The lines of a Markdown page outside fenced code blocks, 1-based.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// A line split at single backticks: (is code, text) pieces.
fn spans(line: &str) -> impl Iterator<Item = (bool, &str)> {
    line.split('`').enumerate().map(|(i, s)| (i % 2 == 1, s))
}

/// Targets of `[text](target)` and `[label]: target` outside code spans.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(pos) = trimmed.find("]: ")
    {
        out.push(
            trimmed[pos + 3..]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_string(),
        );
    }
    for (code, piece) in spans(line) {
        if code {
            continue;
        }
        let mut rest = piece;
        while let Some(pos) = rest.find("](") {
            rest = &rest[pos + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            out.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
            rest = &rest[end..];
        }
    }
    out
}

fn is_external(target: &str) -> bool {
    target.is_empty()
        || target.starts_with('#')
        || target
            .split_once(':')
            .is_some_and(|(scheme, _)| scheme.chars().all(|c| c.is_ascii_alphabetic()))
}

/// Rule a: every relative Markdown link names an existing file.
pub fn check_links(root: &Path) -> io::Result<Vec<Finding>> {
    let mut findings = Vec::new();
    for page in markdown_files(root)? {
        let text = std::fs::read_to_string(root.join(&page))?;
        let dir = page.parent().unwrap_or(Path::new(""));
        for (line, content) in prose_lines(&text) {
            for target in link_targets(content) {
                if is_external(&target) {
                    continue;
                }
                let file = target.split('#').next().unwrap_or("");
                if !root.join(dir).join(file).exists() {
                    findings.push(Finding {
                        file: page.clone(),
                        line,
                        message: format!(
                            "link to `{target}`: no such file relative to {}; point it at the file's current path or drop the link",
                            page.display()
                        ),
                    });
                }
            }
        }
    }
    Ok(findings)
}

/// Top-level directories of the repository, the first part a named path
/// must have to be checked.
fn top_level_dirs(root: &Path) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() && !SKIPPED_DIRS.contains(&name.as_str()) && name != ".git" {
            out.push(name);
        }
    }
    Ok(out)
}

/// The repository path a code span names, if it looks like one.
fn as_repository_path<'a>(span: &'a str, tops: &[String]) -> Option<&'a str> {
    if span.is_empty()
        || span.contains(|c: char| c.is_whitespace() || "*?{}<>$|\"'=,()[]".contains(c))
    {
        return None;
    }
    let path = match span.rsplit_once(':') {
        Some((path, line)) if line.chars().all(|c| c.is_ascii_digit() || c == '-') => path,
        _ => span,
    };
    if path.contains(':') || path.contains("..") {
        return None;
    }
    let (first, _) = path.split_once('/')?;
    if !tops.iter().any(|t| t == first) {
        return None;
    }
    let last = path.rsplit('/').next().unwrap_or("");
    let has_extension = last.rsplit_once('.').is_some_and(|(stem, ext)| {
        !stem.is_empty() && !ext.is_empty() && ext.chars().all(|c| c.is_ascii_alphanumeric())
    });
    (path.ends_with('/') || has_extension).then_some(path)
}

/// Rule b: every repository path a page names in backticks exists.
pub fn check_paths(root: &Path) -> io::Result<Vec<Finding>> {
    let tops = top_level_dirs(root)?;
    let mut findings = Vec::new();
    for page in markdown_files(root)? {
        let text = std::fs::read_to_string(root.join(&page))?;
        let dir = page.parent().unwrap_or(Path::new(""));
        for (line, content) in prose_lines(&text) {
            for (code, span) in spans(content) {
                let Some(path) = code.then(|| as_repository_path(span, &tops)).flatten() else {
                    continue;
                };
                if !root.join(path).exists() && !root.join(dir).join(path).exists() {
                    findings.push(Finding {
                        file: page.clone(),
                        line,
                        message: format!(
                            "`{path}` does not exist; write the path it has now (git log --follow finds a move) or drop it"
                        ),
                    });
                }
            }
        }
    }
    Ok(findings)
}

/// Rule c: the README's first code block holds the demo command and the
/// test command CI runs, written as CI runs them.
pub fn check_commands(root: &Path) -> io::Result<Vec<Finding>> {
    let ci = std::fs::read_to_string(root.join(".ci/run"))?;
    let readme = std::fs::read_to_string(root.join("README.md"))?;
    let mut findings = Vec::new();
    let finding = |line: usize, message: String| Finding {
        file: PathBuf::from("README.md"),
        line,
        message,
    };
    let test = ci
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("scripts/") && l.ends_with(".sh"));
    let Some(test) = test else {
        findings.push(Finding {
            file: PathBuf::from(".ci/run"),
            line: 0,
            message: "runs no `scripts/*.sh` command; CI must run the README's test command".into(),
        });
        return Ok(findings);
    };
    let mut fenced = false;
    let mut first_block = Vec::new();
    let mut start = 0;
    for (i, line) in readme.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            if fenced {
                break;
            }
            fenced = true;
            start = i + 1;
            continue;
        }
        if fenced {
            first_block.push(line.split('#').next().unwrap_or("").trim().to_string());
        }
    }
    for (command, what) in [("scripts/demo.sh", "demo"), (test, "test")] {
        if !first_block.iter().any(|l| l == command) {
            findings.push(finding(
                start,
                format!(
                    "the first code block does not show the {what} command `{command}` on a line of its own (as `.ci/run` and scripts call it); put it there"
                ),
            ));
        }
        if !root.join(command).is_file() {
            findings.push(finding(start, format!("`{command}` does not exist")));
        }
    }
    Ok(findings)
}

/// The work-log label a line carries, if any (rule d).
pub fn work_label(line: &str) -> Option<&'static str> {
    let lower = line.to_ascii_lowercase();
    let word = "session";
    for (pos, _) in lower.match_indices(word) {
        let after = &lower[pos + word.len()..];
        let after = after.strip_prefix('s').unwrap_or(after);
        let after = after.strip_prefix([' ', '-']).unwrap_or(after);
        if after.starts_with(|c: char| c.is_ascii_digit()) {
            return Some("a numbered round of work");
        }
        if lower[..pos].ends_with("this ") {
            return Some("\"this\" + \"session\" (a round of work)");
        }
    }
    // A work item or review named where the product should be: "issue"
    // and a number, a review and its findings.
    for (pos, _) in lower.match_indices("issue") {
        let before_ok = !lower[..pos].ends_with(|c: char| c.is_ascii_alphanumeric());
        let after = &lower[pos + "issue".len()..];
        let after = after.strip_prefix('s').unwrap_or(after);
        let Some(after) = after.strip_prefix(' ') else {
            continue;
        };
        let after = after.trim_start_matches('#');
        if before_ok && after.starts_with(|c: char| c.is_ascii_digit()) {
            return Some("a numbered work item");
        }
    }
    let review = concat!("re", "view");
    if lower.contains(&format!("isolation {review}"))
        || lower.contains(&format!("{review}, finding"))
    {
        return Some("a review's finding");
    }
    for (pos, _) in lower.match_indices("helper") {
        let before_ok = !lower[..pos].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        let after = &lower[pos + "helper".len()..];
        let after = after.strip_prefix("'s").unwrap_or(after);
        let Some(after) = after.strip_prefix(' ') else {
            continue;
        };
        let labelled = ["branch", "worktree", "agent", "session"]
            .iter()
            .any(|w| after.starts_with(w));
        if before_ok && labelled {
            return Some("a label of who did the work (a person's branch or worktree)");
        }
    }
    None
}

const WORD_FIX: &str = "label it by what it measures or does, its date and commit (a TLS, BGP or BFD session stays, written as such)";

/// Rule d: no work-log label in any text file or file name.
pub fn check_words(root: &Path) -> io::Result<Vec<Finding>> {
    let mut findings = Vec::new();
    for path in entries(root)? {
        if let Some(label) = path
            .file_name()
            .and_then(|n| work_label(&n.to_string_lossy()))
        {
            findings.push(Finding {
                file: path.clone(),
                line: 0,
                message: format!("the name carries {label}; rename it (git mv) by what it holds and its date, and update every reference"),
            });
        }
    }
    for (path, text) in text_files(root)? {
        for (i, line) in text.lines().enumerate() {
            if let Some(label) = work_label(line) {
                findings.push(Finding {
                    file: path.clone(),
                    line: i + 1,
                    message: format!("{label}: {WORD_FIX}"),
                });
            }
        }
    }
    Ok(findings)
}

/// Where the benchmarks' raw results live, relative to the root.
const RESULTS_DIR: &str = "benches/results";

/// Rule e: every raw result file is named by some Markdown page.
pub fn check_results(root: &Path) -> io::Result<Vec<Finding>> {
    let dir = root.join(RESULTS_DIR);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut pages = String::new();
    for page in markdown_files(root)? {
        pages.push_str(&std::fs::read_to_string(root.join(&page))?);
        pages.push('\n');
    }
    let mut names: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names
        .into_iter()
        .filter(|name| !pages.contains(name.as_str()))
        .map(|name| Finding {
            file: Path::new(RESULTS_DIR).join(&name),
            line: 0,
            message: format!(
                "`{name}` is named by no Markdown page; add it to the raw-file index of benches/README.md with the page that reads it, or delete it"
            ),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A scratch repository removed on drop.
    struct Repo(PathBuf);

    impl Repo {
        fn new() -> Repo {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "teapot-doccheck-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Repo(dir)
        }

        fn write(&self, path: &str, text: &str) -> &Repo {
            let path = self.0.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
            self
        }
    }

    impl Drop for Repo {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_link_to_a_missing_file_is_found_with_its_line() {
        let repo = Repo::new();
        repo.write(
            "docs/a.md",
            "# A\n\nSee [b](b.md#part) and [web](https://x.org).\n",
        )
        .write("docs/b.md", "# B\n")
        .write(
            "README.md",
            "[a](docs/a.md)\n\n[gone](docs/gone.md)\n\n```\n[x](nowhere.md)\n```\n",
        )
        .write("vendor/x/README.md", "[gone](gone.md)\n");
        let findings = check_links(&repo.0).unwrap();
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].file, PathBuf::from("README.md"));
        assert_eq!(findings[0].line, 3);
        assert!(findings[0].message.contains("docs/gone.md"));
        std::fs::remove_file(repo.0.join("docs/b.md")).unwrap();
        assert_eq!(check_links(&repo.0).unwrap().len(), 2);
    }

    #[test]
    fn a_missing_repository_path_in_backticks_is_found() {
        let repo = Repo::new();
        repo.write("proxy/src/lib.rs", "")
            .write("docs/a.md", "`proxy/src/lib.rs:12` `proxy/src/` `proxy/src/gone.rs`\n`elsewhere/x.rs` `proxy/src/*.rs` `a b/c.rs` `proxy/x`\n");
        let findings = check_paths(&repo.0).unwrap();
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(
            (findings[0].file.as_path(), findings[0].line),
            (Path::new("docs/a.md"), 1)
        );
        assert!(findings[0].message.contains("`proxy/src/gone.rs`"));
    }

    #[test]
    fn readme_without_ci_test_command_is_found() {
        let repo = Repo::new();
        repo.write(
            ".ci/run",
            "set -e\nscripts/test.sh\nscripts/fuzz-smoke.sh\n",
        )
        .write("scripts/test.sh", "")
        .write("scripts/demo.sh", "")
        .write(
            "README.md",
            "# t\n\n```sh\nscripts/demo.sh   # demo\nscripts/test.sh   # tests\n```\n",
        );
        assert_eq!(check_commands(&repo.0).unwrap(), vec![]);
        repo.write(
            "README.md",
            "# t\n\n```sh\nscripts/demo.sh\ncd scripts && ./test.sh\n```\n",
        );
        let findings = check_commands(&repo.0).unwrap();
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert!(findings[0].message.contains("`scripts/test.sh`"));
        repo.write("README.md", "```\nscripts/test.sh\n```\n");
        assert!(check_commands(&repo.0).unwrap()[0].message.contains("demo"));
    }

    #[test]
    fn work_labels_are_found_and_domain_words_are_not() {
        let numbered = format!("measured in {} {}", "Session", 9);
        let joined = format!("http-{}{}-after.json", "session", 10);
        let hyphen = format!("the first {}-{} run", "session", 4);
        let plural = format!("({}s {} and 9)", "session", 8);
        let this = format!("what moved {} {}", "this", "session");
        let branch = format!("from a {}'s branch", "helper");
        let item = format!("the goal of {} #{}", "issue", 31);
        let bare = format!("({} {}, 2026-11-24)", "Issue", 17);
        let items = format!("Goals ({} #{} and #{})", "issues", 8, 17);
        let review = format!("(isolation {}, {} {})", "review", "finding", 4);
        for bad in [
            &numbered, &joined, &hyphen, &plural, &this, &branch, &item, &bare, &review, &items,
        ] {
            assert!(work_label(bad).is_some(), "{bad}");
        }
        for good in [
            "a BGP session resets",
            "not for this BFD session",
            "session affinity by cookie",
            "the test helpers start a process",
            "the helper that judges each case",
            "a tissue 3 mm thick",
            "the issuer waits 2 s",
            "an issue the router reports",
        ] {
            assert_eq!(work_label(good), None, "{good}");
        }
    }

    #[test]
    fn a_raw_result_no_page_names_is_found() {
        let repo = Repo::new();
        repo.write("benches/results/http-1.json", "{}")
            .write("benches/results/http-1.svg", "<svg/>")
            .write("benches/results/l4-2.json", "{}")
            .write(
                "benches/http.md",
                "raw `benches/results/http-1.json`, chart `http-1.svg`\n",
            )
            .write("vendor/x/README.md", "l4-2.json\n");
        let findings = check_results(&repo.0).unwrap();
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].file, PathBuf::from("benches/results/l4-2.json"));
        repo.write("benches/README.md", "| l4 | `l4-2.json` |\n");
        assert_eq!(check_results(&repo.0).unwrap(), vec![]);
    }

    #[test]
    fn no_results_directory_is_no_finding() {
        let repo = Repo::new();
        repo.write("README.md", "# t\n");
        assert_eq!(check_results(&repo.0).unwrap(), vec![]);
    }

    #[test]
    fn work_labels_in_content_and_file_names_are_found() {
        let repo = Repo::new();
        let label = format!("{} {}", "session", 4);
        repo.write("docs/a.md", &format!("ok\nrun of {label}\n"))
            .write(
                &format!("benches/results/http-{}{}-x.json", "session", 10),
                "{}",
            )
            .write("vendor/x.rs", &label);
        let findings = check_words(&repo.0).unwrap();
        let mut got: Vec<(String, usize)> = findings
            .iter()
            .map(|f| (f.file.display().to_string(), f.line))
            .collect();
        got.sort();
        let name = format!("benches/results/http-{}{}-x.json", "session", 10);
        assert_eq!(got, vec![(name, 0), ("docs/a.md".to_string(), 2)]);
    }
}
