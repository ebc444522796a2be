//! What the network-namespace tests share: running commands, the skip
//! rule, and polling with a bound.

use std::process::Command;
use std::time::{Duration, Instant};

/// Every wait ends here with the state dumped: a bound, not a measurement.
pub const PATIENCE: Duration = Duration::from_secs(40);

fn missing_root_or_ip() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("network namespaces need root".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("ip (iproute2) missing".into());
    }
    None
}

/// `true` when the test may run: root, iproute2 and whatever `extra`
/// finds missing. Otherwise prints why and returns `false`, unless
/// `TEAPOT_REQUIRE_NETNS=1` (CI) makes that a failure.
pub fn runnable(test: &str, extra: impl FnOnce() -> Option<String>) -> bool {
    let Some(reason) = missing_root_or_ip().or_else(extra) else {
        return true;
    };
    if std::env::var("TEAPOT_REQUIRE_NETNS").as_deref() == Ok("1") {
        panic!("{test}: {reason}, and TEAPOT_REQUIRE_NETNS=1");
    }
    eprintln!("SKIP {test}: {reason}");
    false
}

/// Runs a command that must succeed; its stdout.
pub fn run(cmd: &[&str]) -> String {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a shell script inside namespace `ns`.
pub fn sh(ns: &str, script: &str) -> String {
    run(&["ip", "netns", "exec", ns, "sh", "-c", script])
}

/// Polls `check` every 20 ms until it yields; after [`PATIENCE`], fails
/// with `dump()`.
pub fn wait<T>(what: &str, dump: impl Fn() -> String, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}\n{}", dump());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Network namespaces deleted on drop, failure included.
pub struct Namespaces(pub Vec<String>);

impl Namespaces {
    pub fn add(&mut self, name: String) -> String {
        run(&["ip", "netns", "add", &name]);
        self.0.push(name.clone());
        name
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}
