//! Stamps for result files: the UTC date their names carry and the commit
//! that was measured.

use std::path::Path;

/// Today's UTC date as YYYYMMDD, for a result file's name.
pub fn utc_date() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y%m%d"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "undated".to_string(), |d| d.trim().to_string())
}

/// The short hash of the commit checked out in `repo` ("unknown" outside
/// a git checkout).
pub fn commit(repo: &Path) -> String {
    std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "unknown".into(), |s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_date_is_eight_digits() {
        assert_eq!(utc_date().len(), 8);
    }
}
