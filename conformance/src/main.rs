//! `teapot-conformance [--teapot PATH] [--keep] [--filter TEXT] PATH...`
//!
//! Runs ingress-controller-conformance `.feature` files against `teapot proxy`
//! in manifests mode. Prints one PASS/FAIL line per scenario and a closing
//! `N passed, N failed` line; exits non-zero on any failure or when no
//! scenario was found.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "teapot-conformance", version, about)]
struct Cli {
    /// The teapot binary (default: `teapot` next to this executable, or $TEAPOT_BIN).
    #[arg(long, value_name = "PATH")]
    teapot: Option<PathBuf>,
    /// Keep each scenario's namespace directory for debugging.
    #[arg(long)]
    keep: bool,
    /// Only run scenarios whose name contains this text.
    #[arg(long, value_name = "SUBSTRING")]
    filter: Option<String>,
    /// Feature files, or directories searched recursively for `*.feature`.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let options = teapot_conformance::Options {
        teapot: cli
            .teapot
            .unwrap_or_else(teapot_testkit::process::teapot_bin),
        keep: cli.keep,
        filter: cli.filter,
        paths: cli.paths,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("teapot-conformance: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(teapot_conformance::run(&options, |outcome| {
        println!("{}", outcome.line());
    }));
    match result {
        Ok(summary) => {
            println!("{}", summary.closing_line());
            if summary.outcomes.is_empty() {
                eprintln!("teapot-conformance: no scenario found");
            }
            if summary.success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(err) => {
            eprintln!("teapot-conformance: {err}");
            println!("0 passed, 0 failed");
            ExitCode::FAILURE
        }
    }
}
