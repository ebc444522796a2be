//! Runs teapot's own scenario files (`conformance/features/`, same format as
//! the upstream suite) against the `teapot` binary.

mod common;

use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teapot_scenarios_pass() {
    common::run_all(&Path::new(env!("CARGO_MANIFEST_DIR")).join("features")).await;
}
