//! `teapot-gateway-conformance [--teapot PATH] [--upstream DIR] [--skip FILE]
//! [--filter TEXT] [--keep] [--report-only] [--verbose] [--case-timeout SECS]
//! [--parallel N] [--proxy-arg ARG]... [--l4-pool CIDR] [--report FILE]
//! [--organization ..] [--project ..] [--url ..] [--implementation-version ..]
//! [--contact ..]... [--mode ..] [--crds DIR] PATH...`
//!
//! Runs the Gateway API conformance tests ported to data
//! (`conformance/gateway/data/*.json`) against `teapot proxy` in manifests
//! mode. Prints one line per test and the totals over tests and cases
//! (and, with `--report FILE`, writes the upstream-format conformance
//! report there and prints `report: FILE`); exits non-zero on any failure
//! (or when no test ran) unless `--report-only`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use teapot_conformance::gateway;

#[derive(Debug, Parser)]
#[command(
    name = "teapot-gateway-conformance",
    version,
    about = "runs the Gateway API conformance tests ported to data against teapot proxy --manifests"
)]
struct Cli {
    /// The teapot binary (default: `teapot` next to this executable, or $TEAPOT_BIN).
    #[arg(long, value_name = "PATH")]
    teapot: Option<PathBuf>,
    /// The upstream `conformance/` directory the tests' manifests are relative to
    /// (holds `base/manifests.yaml`).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "../shared/conformance-upstream/gateway-api/conformance"
    )]
    upstream: PathBuf,
    /// Tests not to run: `<Test> <reason>` per line (the out-of-scope list).
    #[arg(long, value_name = "FILE")]
    skip: Option<PathBuf>,
    /// Only run tests whose name contains this text.
    #[arg(long, value_name = "SUBSTRING")]
    filter: Option<String>,
    /// Keep each test's manifests directory (the path is printed on stderr).
    #[arg(long)]
    keep: bool,
    /// Exit 0 even when tests fail (a score, not a gate).
    #[arg(long)]
    report_only: bool,
    /// After each test, one line per failing case.
    #[arg(long)]
    verbose: bool,
    /// How long one case may take to become consistent, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = gateway::DEFAULT_CASE_TIMEOUT.as_secs_f64())]
    case_timeout: f64,
    /// Cases of one test in flight at once.
    #[arg(long, value_name = "N", default_value_t = 8)]
    parallel: usize,
    /// An argument for `teapot proxy` (repeatable; replaces the default
    /// `--h2c --gateway-own-addresses`).
    #[arg(
        long = "proxy-arg",
        value_name = "ARG",
        allow_hyphen_values = true,
        num_args = 1,
        action = clap::ArgAction::Append
    )]
    proxy_args: Vec<String>,
    /// The loopback CIDR whose addresses the proxy gives Gateways with
    /// TCP, UDP or TLS listeners (`--l4-pool`, `--l4-default-pool`); "" for
    /// none.
    #[arg(long, value_name = "CIDR", default_value = gateway::DEFAULT_L4_POOL)]
    l4_pool: String,
    /// Write the conformance report (upstream's ConformanceReport, YAML) here.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// The report's implementation.organization.
    #[arg(long, default_value = "teapot-dev")]
    organization: String,
    /// The report's implementation.project.
    #[arg(long, default_value = "teapot")]
    project: String,
    /// The report's implementation.url.
    #[arg(long, default_value = "https://github.com/teapot-dev/teapot")]
    url: String,
    /// The report's implementation.version (default: this build's version).
    #[arg(long = "implementation-version")]
    implementation_version: Option<String>,
    /// The report's implementation.contact (repeatable).
    #[arg(long, default_value = "https://github.com/teapot-dev/teapot/issues")]
    contact: Vec<String>,
    /// The report's mode.
    #[arg(long, default_value = "default")]
    mode: String,
    /// The report's gatewayAPIVersion and gatewayAPIChannel are read from
    /// the Gateway CRD here (upstream reads the installed CRDs' annotations).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "../shared/conformance-upstream/gateway-api/config/crd/experimental"
    )]
    crds: PathBuf,
    /// Test files (`<Test>.json`), or directories of them.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
}

/// Writes the upstream-format report of the run.
fn write_report(cli: &Cli, summary: &gateway::Summary, path: &Path) -> Result<(), String> {
    use gateway::report;
    let (version, channel) = report::crd_version(&cli.crds)?;
    let meta = report::Meta {
        implementation: report::Implementation {
            organization: cli.organization.clone(),
            project: cli.project.clone(),
            url: cli.url.clone(),
            version: cli
                .implementation_version
                .clone()
                .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string()),
            contact: cli.contact.clone(),
        },
        date: report::now_rfc3339(),
        gateway_api_version: version,
        gateway_api_channel: channel,
        mode: cli.mode.clone(),
    };
    let yaml = report::to_yaml(&report::report(&summary.outcomes, &meta))?;
    std::fs::write(path, yaml).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let skip = match &cli.skip {
        None => Default::default(),
        Some(path) => match gateway::read_skip_list(path) {
            Ok(skip) => skip,
            Err(err) => {
                eprintln!("teapot-gateway-conformance: {err}");
                return ExitCode::FAILURE;
            }
        },
    };
    let case_timeout = match Duration::try_from_secs_f64(cli.case_timeout) {
        Ok(timeout) => timeout,
        Err(err) => {
            eprintln!(
                "teapot-gateway-conformance: --case-timeout {}: {err}",
                cli.case_timeout
            );
            return ExitCode::FAILURE;
        }
    };
    let options = gateway::Options {
        config: gateway::RunConfig {
            teapot: cli
                .teapot
                .clone()
                .unwrap_or_else(teapot_testkit::process::teapot_bin),
            upstream: cli.upstream.clone(),
            keep: cli.keep,
            case_timeout,
            parallel: cli.parallel,
            proxy_args: if cli.proxy_args.is_empty() {
                gateway::DEFAULT_PROXY_ARGS
                    .iter()
                    .map(|a| a.to_string())
                    .collect()
            } else {
                cli.proxy_args.clone()
            },
            l4_pool: cli.l4_pool.clone(),
        },
        filter: cli.filter.clone(),
        skip,
        paths: cli.paths.clone(),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("teapot-gateway-conformance: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(gateway::run(&options, |outcome| {
        println!("{}", outcome.line());
        if cli.verbose {
            for line in outcome.case_lines() {
                println!("  {line}");
            }
        }
    }));
    match result {
        Ok(summary) => {
            for line in summary.closing_lines() {
                println!("{line}");
            }
            if let Some(path) = &cli.report {
                match write_report(&cli, &summary, path) {
                    Ok(()) => println!("report: {}", path.display()),
                    Err(err) => {
                        eprintln!("teapot-gateway-conformance: the report: {err}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            if summary.outcomes.is_empty() {
                eprintln!("teapot-gateway-conformance: no test found");
            }
            if summary.success() || cli.report_only {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(err) => {
            eprintln!("teapot-gateway-conformance: {err}");
            ExitCode::FAILURE
        }
    }
}
