//! What the chart tests (`charts.rs`, `charts_gateway.rs`,
//! `charts_observability.rs`) share: the repository root and the pinned
//! helm.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The pinned helm (`scripts/helm.sh`), or `None` with a loud line when
/// there is none; `TEAPOT_REQUIRE_HELM=1` (CI) makes that a failure.
pub fn helm() -> Option<PathBuf> {
    let out = Command::new(repo().join("scripts/helm.sh"))
        .output()
        .expect("run scripts/helm.sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => Some(PathBuf::from(
            String::from_utf8(out.stdout).expect("utf-8 path").trim(),
        )),
        Some(2) if std::env::var_os("TEAPOT_REQUIRE_HELM").is_none() => {
            eprintln!(
                "\n!!!!!!!! SKIPPED: no helm binary ({}) !!!!!!!!\n\
                 !!!!!!!! the charts were NOT rendered or validated; run scripts/helm.sh !!!!!!!!\n",
                stderr.trim()
            );
            None
        }
        _ => panic!("scripts/helm.sh failed: {stderr}"),
    }
}
