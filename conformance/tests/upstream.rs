//! Runs every scenario of the upstream ingress-controller-conformance files
//! kept in `<workspace>/../shared/conformance-upstream/` against the `teapot`
//! binary, and requires all of them to pass.
//!
//! The binary is `$TEAPOT_BIN` when set; otherwise this test first runs
//! `cargo build -p teapot` (same profile) so it never tests a stale binary.

mod common;

use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_scenarios_pass() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance-upstream");
    assert!(
        shared.is_dir(),
        "the shared upstream scenario directory is missing: {} (it should hold the \
         kubernetes-sigs/ingress-controller-conformance feature files)",
        shared.display()
    );
    common::run_all(&shared).await;
}
