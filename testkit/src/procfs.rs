//! What `/proc` says of a process: its resident memory and the CPU time
//! it has used, for the tests and benchmarks that bound or report them
//! (CPU at rest, memory per connection, the cost of a hostile input).
//!
//! Linux only, like the rest of the harness.

use std::io;

/// Clock ticks per second of `/proc/PID/stat`'s times: `USER_HZ`, 100 on
/// every Linux ABI.
pub const USER_HZ: f64 = 100.0;

/// CPU seconds (user + system) of `pid`'s own threads, without children.
pub fn own_cpu_seconds(pid: u32) -> io::Result<f64> {
    let f = stat_fields(pid)?;
    // utime, stime: fields 14 and 15 (1-based).
    Ok(f.get(13..15).map_or(0, |t| t.iter().sum::<u64>()) as f64 / USER_HZ)
}

/// `VmRSS` of a process in KiB, from `/proc/PID/status`.
pub fn rss_kib(pid: u32) -> io::Result<u64> {
    status_field(pid, "VmRSS:")
}

/// `VmHWM` (peak RSS) of a process in KiB.
pub fn peak_rss_kib(pid: u32) -> io::Result<u64> {
    status_field(pid, "VmHWM:")
}

/// `VmRSS` of a process and its live children (nginx's and HAProxy's
/// workers), in KiB.
pub fn tree_rss_kib(pid: u32) -> io::Result<u64> {
    let mut kib = rss_kib(pid)?;
    for child in children(pid)? {
        // A worker may exit between the listing and the read.
        kib += rss_kib(child).unwrap_or(0);
    }
    Ok(kib)
}

/// The live processes whose parent is `pid`.
fn children(pid: u32) -> io::Result<Vec<u32>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(f) = stat_fields(child)
            && f.get(3) == Some(&u64::from(pid))
        {
            out.push(child);
        }
    }
    Ok(out)
}

/// CPU seconds (user + system) a process tree has used: `pid`'s own
/// threads, its reaped children (old nginx/HAProxy workers after a
/// reload) and its live children (the workers). From `/proc/*/stat`,
/// whose times are in `USER_HZ` (100 per second on every Linux ABI).
pub fn cpu_seconds(pid: u32) -> io::Result<f64> {
    let own = stat_fields(pid)?;
    // utime, stime, cutime, cstime: fields 14-17 (1-based).
    let mut ticks: u64 = own.get(13..17).map_or(0, |f| f.iter().sum());
    for child in children(pid)? {
        // A process may exit between the listing and the read.
        if let Ok(f) = stat_fields(child) {
            ticks += f.get(13..15).map_or(0, |f| f.iter().sum::<u64>());
        }
    }
    Ok(ticks as f64 / USER_HZ)
}

/// The numeric fields of `/proc/PID/stat`, 1-based field `n` at `n - 1`;
/// the command name (field 2, which may hold spaces) and the state are
/// kept as 0 so the indices stay the kernel's.
fn stat_fields(pid: u32) -> io::Result<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after_comm = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| io::Error::other(format!("/proc/{pid}/stat: no command name")))?;
    let mut fields = vec![pid.into(), 0];
    fields.extend(
        after_comm
            .split_whitespace()
            .map(|f| f.parse::<u64>().unwrap_or(0)),
    );
    Ok(fields)
}

fn status_field(pid: u32, field: &str) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no {field} in /proc/{pid}/status")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A busy child's CPU is counted in its parent's tree while it runs,
    /// and still after it has exited and been reaped (as an nginx worker
    /// retired by a reload is).
    #[test]
    fn cpu_seconds_counts_live_and_reaped_children() {
        let me = std::process::id();
        let own = |pid| -> f64 {
            let f = stat_fields(pid).unwrap();
            f[13..17].iter().sum::<u64>() as f64 / 100.0
        };
        let mut busy = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        // Until the child has had 0.2 s of CPU, however busy the machine
        // is with other work (bounded: it has all the time it needs).
        let started = std::time::Instant::now();
        let mut live = 0.0;
        while live < 0.2 && started.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(100));
            live = cpu_seconds(me).unwrap() - own(me);
        }
        busy.kill().unwrap();
        busy.wait().unwrap();
        let reaped = cpu_seconds(me).unwrap();
        assert!(
            live >= 0.2,
            "a busy child counted {live} s of CPU in a minute"
        );
        assert!(
            reaped - own(me) < 0.01,
            "nothing left outside the own fields"
        );
        assert!(own(me) >= live, "the reaped child's time moved to cutime");
    }
}
