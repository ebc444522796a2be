//! Shared by the integration tests: finding (and building) the teapot binary
//! and running a directory of feature files.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `$TEAPOT_BIN`, or `target/<profile>/teapot` after `cargo build -p teapot`
/// (same profile), so a test never runs against a stale binary. Built once
/// per test binary.
pub fn teapot() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(build_teapot).clone()
}

fn build_teapot() -> PathBuf {
    let bin = teapot_testkit::process::teapot_bin();
    if std::env::var_os("TEAPOT_BIN").is_some() {
        return bin;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let profile_dir = bin
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut build = Command::new(cargo);
    build
        .args(["build", "-p", "teapot", "--bin", "teapot"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match profile_dir.as_str() {
        "debug" => {}
        "release" => {
            build.arg("--release");
        }
        other => {
            build.args(["--profile", other]);
        }
    }
    eprintln!("building the teapot binary: {build:?}");
    match build.status() {
        Ok(s) if s.success() => {}
        Ok(s) => {
            panic!("`cargo build -p teapot` failed ({s}); set TEAPOT_BIN to test a prebuilt binary")
        }
        Err(e) => {
            panic!("cannot run cargo to build teapot ({e}); set TEAPOT_BIN to a teapot binary")
        }
    }
    assert!(
        bin.is_file(),
        "no teapot binary at {} after building it",
        bin.display()
    );
    bin
}

/// Runs every scenario under `dir`, prints each line, and requires at least
/// one scenario and no failure.
pub async fn run_all(dir: &Path) {
    assert!(
        dir.exists(),
        "the scenario directory is missing: {}",
        dir.display()
    );
    let options = teapot_conformance::Options {
        teapot: teapot(),
        keep: false,
        filter: None,
        paths: vec![dir.to_path_buf()],
    };
    let summary = teapot_conformance::run(&options, |outcome| println!("{}", outcome.line()))
        .await
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    println!("{}", summary.closing_line());
    assert!(
        !summary.outcomes.is_empty(),
        "no scenario found under {}",
        dir.display()
    );
    let failures: Vec<String> = summary
        .outcomes
        .iter()
        .filter(|o| !o.passed())
        .map(|o| o.line())
        .collect();
    assert!(
        failures.is_empty(),
        "{}\n{}",
        summary.closing_line(),
        failures.join("\n")
    );
}
