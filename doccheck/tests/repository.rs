//! The checks of `teapot_doccheck` run on this repository: `scripts/test.sh`
//! (`cargo test --workspace`) fails when a doc links to a missing file, names
//! a path that is gone, shows other commands than CI runs, labels
//! something by the round of work that produced it, or leaves a raw
//! benchmark result named by no page.

use std::path::{Path, PathBuf};

use teapot_doccheck::{
    Finding, check_commands, check_links, check_paths, check_results, check_words,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn assert_clean(what: &str, findings: Vec<Finding>) {
    if findings.is_empty() {
        return;
    }
    let lines: Vec<String> = findings.iter().map(Finding::to_string).collect();
    panic!("{what}: {} finding(s)\n{}", lines.len(), lines.join("\n"));
}

#[test]
fn relative_links_point_to_existing_files() {
    assert_clean("broken relative links", check_links(&root()).unwrap());
}

#[test]
fn repository_paths_in_backticks_exist() {
    assert_clean("missing repository paths", check_paths(&root()).unwrap());
}

#[test]
fn readme_commands_are_the_ones_ci_runs() {
    assert_clean("README commands", check_commands(&root()).unwrap());
}

#[test]
fn no_work_log_labels() {
    assert_clean("work-log labels", check_words(&root()).unwrap());
}

#[test]
fn every_raw_result_is_named_by_a_page() {
    assert_clean("unreferenced raw results", check_results(&root()).unwrap());
}
