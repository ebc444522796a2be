//! `teapot-gateway-conformance [--teapot PATH] [--upstream DIR] [--skip FILE]
//! [--filter TEXT] [--keep] [--report-only] [--verbose] [--case-timeout SECS]
//! [--parallel N] [--proxy-arg ARG]... PATH...`
//!
//! Runs the Gateway API conformance tests ported to data
//! (`conformance/gateway/data/*.json`) against `teapot proxy` in manifests
//! mode. Prints one line per test and the totals over tests and cases;
//! exits non-zero on any failure (or when no test ran) unless
//! `--report-only`.

use std::path::PathBuf;
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
    /// An argument for `teapot proxy` (repeatable; replaces the default `--h2c`).
    #[arg(
        long = "proxy-arg",
        value_name = "ARG",
        allow_hyphen_values = true,
        num_args = 1,
        action = clap::ArgAction::Append
    )]
    proxy_args: Vec<String>,
    /// Test files (`<Test>.json`), or directories of them.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
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
                .unwrap_or_else(teapot_testkit::process::teapot_bin),
            upstream: cli.upstream,
            keep: cli.keep,
            case_timeout,
            parallel: cli.parallel,
            proxy_args: if cli.proxy_args.is_empty() {
                gateway::DEFAULT_PROXY_ARGS
                    .iter()
                    .map(|a| a.to_string())
                    .collect()
            } else {
                cli.proxy_args
            },
        },
        filter: cli.filter,
        skip,
        paths: cli.paths,
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
