//! `teapot top`: per-tenant requests/s, errors and p99 of one proxy, from
//! two scrapes of its admin `/metrics` (docs/operations.md). For the
//! operator on the LB node: no Prometheus needed, nothing but the admin
//! port (which listens on 127.0.0.1 by default).

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(clap::Args, Debug)]
pub(crate) struct TopArgs {
    /// The proxy's admin listener, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:9080")]
    admin: String,
    /// Milliseconds between refreshes.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(100..))]
    interval_ms: u64,
    /// Stop after this many refreshes (0: run until interrupted).
    #[arg(long, default_value_t = 0)]
    iterations: u64,
    /// Rows shown, busiest tenants first.
    #[arg(long, default_value_t = 30)]
    rows: usize,
}

/// One tenant's cumulative counters at one scrape.
#[derive(Clone, Debug, Default, PartialEq)]
struct TenantTotals {
    /// By class: 1xx..5xx, then "none".
    requests: [f64; 6],
    bytes_out: f64,
    connect_failures: f64,
    /// `le` upper bound to cumulative count, in bucket order.
    buckets: Vec<(f64, f64)>,
}

/// One row of the view.
#[derive(Debug, PartialEq)]
struct Row {
    tenant: String,
    rps: f64,
    errors_4xx: f64,
    errors_5xx: f64,
    connect_failures: f64,
    out_bytes_per_s: f64,
    /// Seconds; `None` without requests in the interval.
    p99: Option<f64>,
}

pub(crate) async fn run(args: TopArgs) -> anyhow::Result<()> {
    let interval = Duration::from_millis(args.interval_ms);
    let mut before = scrape(&args.admin).await?;
    let mut at = Instant::now();
    let clear = std::io::stdout().is_terminal();
    let mut shown = 0u64;
    loop {
        tokio::time::sleep(interval).await;
        let now = scrape(&args.admin).await?;
        let elapsed = at.elapsed().as_secs_f64();
        at = Instant::now();
        let rows = rows(&before, &now, elapsed);
        let mut frame = String::new();
        if clear {
            frame.push_str("\x1b[2J\x1b[H");
        }
        render(&mut frame, &args.admin, elapsed, &rows, args.rows);
        print!("{frame}");
        before = now;
        shown += 1;
        if args.iterations > 0 && shown >= args.iterations {
            return Ok(());
        }
    }
}

/// `GET /metrics` over a plain HTTP/1.0 connection (the admin listener is
/// teapot's own; no client library needed).
async fn scrape(admin: &str) -> anyhow::Result<BTreeMap<String, TenantTotals>> {
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(admin).await?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: admin\r\n\r\n")
            .await?;
        let mut body = Vec::new();
        s.read_to_end(&mut body).await?;
        Ok::<_, std::io::Error>(body)
    };
    let raw = tokio::time::timeout(Duration::from_secs(5), fetch)
        .await
        .with_context(|| format!("--admin {admin}: no answer in 5 s"))?
        .with_context(|| format!("--admin {admin}: cannot read /metrics"))?;
    let text = String::from_utf8_lossy(&raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("--admin {admin}: not an HTTP answer");
    };
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!(
            "--admin {admin}: /metrics answered {}",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(parse(body))
}

/// The per-tenant series of a Prometheus text exposition.
fn parse(text: &str) -> BTreeMap<String, TenantTotals> {
    let mut out: BTreeMap<String, TenantTotals> = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
        let labels = labels.strip_suffix('}').unwrap_or(labels);
        let label = |key: &str| {
            labels.split(',').find_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (k == key).then(|| v.trim_matches('"'))
            })
        };
        let Some(tenant) = label("tenant") else {
            continue;
        };
        const TENANT_SERIES: [&str; 4] = [
            "teapot_tenant_requests_total",
            "teapot_tenant_bytes_total",
            "teapot_tenant_upstream_connect_failures_total",
            "teapot_tenant_request_seconds_bucket",
        ];
        if !TENANT_SERIES.contains(&name) {
            continue;
        }
        let totals = out.entry(tenant.to_string()).or_default();
        match name {
            "teapot_tenant_requests_total" => {
                let i = match label("class") {
                    Some("1xx") => 0,
                    Some("2xx") => 1,
                    Some("3xx") => 2,
                    Some("4xx") => 3,
                    Some("5xx") => 4,
                    _ => 5,
                };
                totals.requests[i] = value;
            }
            "teapot_tenant_bytes_total" if label("direction") == Some("out") => {
                totals.bytes_out = value;
            }
            "teapot_tenant_upstream_connect_failures_total" => totals.connect_failures = value,
            "teapot_tenant_request_seconds_bucket" => {
                let le = match label("le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(le) => le.parse().unwrap_or(f64::INFINITY),
                    None => continue,
                };
                totals.buckets.push((le, value));
            }
            _ => {}
        }
    }
    for t in out.values_mut() {
        t.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Rates between two scrapes `elapsed` seconds apart, busiest first.
fn rows(
    before: &BTreeMap<String, TenantTotals>,
    now: &BTreeMap<String, TenantTotals>,
    elapsed: f64,
) -> Vec<Row> {
    let elapsed = elapsed.max(1e-3);
    let empty = TenantTotals::default();
    let mut rows: Vec<Row> = now
        .iter()
        .map(|(tenant, n)| {
            let b = before.get(tenant).unwrap_or(&empty);
            // A counter that went down means the proxy restarted.
            let d = |now: f64, was: f64| if now >= was { now - was } else { now };
            let requests: f64 = (0..6).map(|i| d(n.requests[i], b.requests[i])).sum();
            let buckets: Vec<(f64, f64)> = n
                .buckets
                .iter()
                .map(|&(le, c)| {
                    let was = b.buckets.iter().find(|x| x.0 == le).map_or(0.0, |x| x.1);
                    (le, d(c, was))
                })
                .collect();
            Row {
                tenant: tenant.clone(),
                rps: requests / elapsed,
                errors_4xx: d(n.requests[3], b.requests[3]) / elapsed,
                errors_5xx: d(n.requests[4], b.requests[4]) / elapsed,
                connect_failures: d(n.connect_failures, b.connect_failures) / elapsed,
                out_bytes_per_s: d(n.bytes_out, b.bytes_out) / elapsed,
                p99: quantile(&buckets, 0.99),
            }
        })
        .collect();
    rows.sort_by(|a, b| b.rps.total_cmp(&a.rps).then(a.tenant.cmp(&b.tenant)));
    rows
}

/// Prometheus' `histogram_quantile`: linear inside the bucket the rank
/// falls in; the last finite bound when it falls in `+Inf`.
fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(prev.0);
            }
            let inside = count - prev.1;
            let frac = if inside > 0.0 {
                (rank - prev.1) / inside
            } else {
                1.0
            };
            return Some(prev.0 + (le - prev.0) * frac);
        }
        prev = (le, count);
    }
    Some(prev.0)
}

fn render(out: &mut String, admin: &str, elapsed: f64, rows: &[Row], max: usize) {
    use std::fmt::Write as _;
    let total: f64 = rows.iter().map(|r| r.rps).sum();
    let _ = writeln!(
        out,
        "teapot top: {admin}, last {elapsed:.1} s, {total:.1} req/s, {} tenants",
        rows.len()
    );
    let _ = writeln!(
        out,
        "{:<24} {:>10} {:>8} {:>8} {:>9} {:>11} {:>10}",
        "TENANT", "REQ/S", "4XX/S", "5XX/S", "CONNFAIL", "OUT KB/S", "P99 MS"
    );
    for r in rows.iter().take(max) {
        let p99 = r
            .p99
            .map_or_else(|| "-".to_string(), |s| format!("{:.1}", s * 1000.0));
        let _ = writeln!(
            out,
            "{:<24} {:>10.1} {:>8.1} {:>8.1} {:>9.1} {:>11.1} {:>10}",
            r.tenant,
            r.rps,
            r.errors_4xx,
            r.errors_5xx,
            r.connect_failures,
            r.out_bytes_per_s / 1024.0,
            p99
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# HELP x
teapot_tenant_requests_total{class="2xx",tenant="alpha"} 10
teapot_tenant_requests_total{class="5xx",tenant="alpha"} 0
teapot_tenant_request_seconds_bucket{tenant="alpha",le="0.01"} 10
teapot_tenant_request_seconds_bucket{tenant="alpha",le="0.1"} 10
teapot_tenant_request_seconds_bucket{tenant="alpha",le="+Inf"} 10
teapot_http_responses_total{class="2xx"} 99
"#;
    const NOW: &str = r#"teapot_tenant_requests_total{class="2xx",tenant="alpha"} 100
teapot_tenant_requests_total{class="5xx",tenant="alpha"} 10
teapot_tenant_request_seconds_bucket{tenant="alpha",le="0.01"} 10
teapot_tenant_request_seconds_bucket{tenant="alpha",le="0.1"} 110
teapot_tenant_request_seconds_bucket{tenant="alpha",le="+Inf"} 110
teapot_tenant_requests_total{class="4xx",tenant="beta"} 4
teapot_tenant_bytes_total{direction="out",tenant="beta"} 2048
"#;

    #[test]
    fn rates_errors_and_p99_per_tenant() {
        let rows = rows(&parse(BEFORE), &parse(NOW), 2.0);
        assert_eq!(rows.len(), 2, "{rows:?}");
        let alpha = &rows[0];
        assert_eq!(alpha.tenant, "alpha");
        assert_eq!(alpha.rps, 50.0);
        assert_eq!(alpha.errors_5xx, 5.0);
        // All 100 new requests fell in (0.01, 0.1]: rank 99 of 100.
        let p99 = alpha.p99.unwrap();
        assert!((p99 - 0.0991).abs() < 1e-9, "{p99}");
        let beta = &rows[1];
        assert_eq!((beta.rps, beta.errors_4xx, beta.p99), (2.0, 2.0, None));
        assert_eq!(beta.out_bytes_per_s, 1024.0);
        let mut out = String::new();
        render(&mut out, "127.0.0.1:9080", 2.0, &rows, 10);
        assert!(out.contains("alpha") && out.contains("99.1"), "{out}");
    }

    #[test]
    fn quantile_in_the_inf_bucket_is_the_last_bound() {
        assert_eq!(
            quantile(&[(0.5, 0.0), (f64::INFINITY, 3.0)], 0.99),
            Some(0.5)
        );
        assert_eq!(quantile(&[(0.5, 0.0), (f64::INFINITY, 0.0)], 0.99), None);
    }
}
