//! Runs every scenario of the upstream ingress-controller-conformance files
//! kept in `<workspace>/../shared/conformance-upstream/` against the `teapot`
//! binary, and requires all of them to pass.
//!
//! The binary is `$TEAPOT_BIN` when set; otherwise this test first runs
//! `cargo build -p teapot` (same profile) so it never tests a stale binary,
//! and uses `target/<profile>/teapot`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn shared_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance-upstream")
}

/// `$TEAPOT_BIN`, or a freshly built `target/<profile>/teapot`.
fn teapot() -> PathBuf {
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
    let status = build.status();
    match status {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_scenarios_pass() {
    let shared = shared_dir();
    assert!(
        shared.is_dir(),
        "the shared upstream scenario directory is missing: {} (expected the \
         ingress-controller-conformance feature files there)",
        shared.display()
    );
    let options = teapot_conformance::Options {
        teapot: teapot(),
        keep: false,
        filter: None,
        paths: vec![shared.clone()],
    };
    let summary = teapot_conformance::run(&options, |outcome| println!("{}", outcome.line()))
        .await
        .unwrap_or_else(|e| panic!("reading {}: {e}", shared.display()));
    println!("{}", summary.closing_line());
    assert!(
        !summary.outcomes.is_empty(),
        "no scenario found under {}",
        shared.display()
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
