//! Runs ingress-nginx's own e2e annotation cases (`conformance/ingress-nginx/`,
//! every case of its `test/e2e/annotations/` that needs no nginx internals,
//! ported as data, whether teapot serves the annotation or not) against the
//! `teapot` binary, and reports the score. The cases not ported are listed
//! with their reasons in `conformance/ingress-nginx/NOT-PORTED.md`; the
//! score must stay at or above 90 %.

#[allow(dead_code)]
mod common;

use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_expectations_score() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("ingress-nginx");
    let options = teapot_conformance::Options {
        teapot: common::teapot(),
        keep: false,
        filter: None,
        paths: vec![dir.clone()],
    };
    let summary = teapot_conformance::run(&options, |outcome| println!("{}", outcome.line()))
        .await
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    println!("{}", summary.closing_line());
    let total = summary.outcomes.len();
    assert!(total > 0, "no scenario under {}", dir.display());
    let passed = summary.passed();
    println!("score: {passed}/{total}");
    assert!(
        passed * 10 >= total * 9,
        "{passed} of {total} ingress-nginx cases pass, under 90 %"
    );
}
