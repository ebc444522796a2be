//! A standalone layer-2 announcer: owns its share of the given addresses
//! among the live replicas, puts them on an interface and announces them
//! with gratuitous ARP / unsolicited neighbour advertisements. The live
//! replica set starts as `--replicas` and is replaced by each line read on
//! stdin (comma-separated names), which is how the network-namespace tests
//! play the part of replica liveness. SIGTERM/SIGINT or the end of stdin
//! removes the addresses and exits.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use clap::Parser;
use teapot_announce::l2::{DEFAULT_REPEAT_FOR, L2Announcer, L2Config};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Parser)]
#[command(
    name = "teapot-l2-announcer",
    about = "Own and announce addresses on an L2 segment"
)]
struct Args {
    /// Interface the owned addresses go on.
    #[arg(long)]
    interface: String,
    /// This replica's name.
    #[arg(long)]
    replica: String,
    /// The live replicas, comma-separated (this one included).
    #[arg(long, value_delimiter = ',')]
    replicas: Vec<String>,
    /// An address to own when the hash says so. Repeatable.
    #[arg(long = "announce")]
    addrs: Vec<IpAddr>,
    /// Seconds to repeat the announcement after taking an address.
    #[arg(long, default_value_t = DEFAULT_REPEAT_FOR.as_secs())]
    repeat_for: u64,
}

fn names(list: &str) -> BTreeSet<String> {
    list.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let (_addrs, addrs_rx) = tokio::sync::watch::channel(args.addrs.into_iter().collect());
    let (live, live_rx) = tokio::sync::watch::channel(names(&args.replicas.join(",")));
    let config = L2Config {
        interface: args.interface,
        replica: args.replica,
        repeat_for: Duration::from_secs(args.repeat_for),
    };
    let announcer = L2Announcer::start(config, addrs_rx, live_rx)?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            line = lines.next_line() => match line? {
                Some(line) => {
                    let _ = live.send(names(&line));
                }
                None => break,
            },
        }
    }
    announcer.stop().await;
    Ok(())
}
