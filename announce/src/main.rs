//! `teapot-announce`: the crate's announcers as a standalone process.
//!
//! - `bgp`: announces the given addresses to the given peers until SIGTERM
//!   or SIGINT, then stops gracefully (GRACEFUL_SHUTDOWN, wait, withdraw,
//!   CEASE). Operators can check a router's configuration with it before
//!   pointing teapot at the router.
//! - `l2`: owns its share of the given addresses among the live replicas,
//!   puts them on an interface and announces them with gratuitous ARP /
//!   unsolicited neighbour advertisements. The live replica set starts as
//!   `--replicas` and is replaced by each line read on stdin
//!   (comma-separated names), which is how the network-namespace tests play
//!   the part of replica liveness. The end of stdin stops it too.
//!
//! Both remove what they announced before exiting.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use clap::Parser;
use teapot_announce::l2::{self, DEFAULT_REPEAT_FOR, L2Announcer, L2Config};
use teapot_announce::{Announcer, PeerConfig, Speaker, SpeakerConfig};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Parser)]
#[command(
    name = "teapot-announce",
    about = "Make addresses reachable: BGP or L2"
)]
enum Command {
    /// Announce host routes to BGP peers.
    Bgp(BgpArgs),
    /// Own and announce addresses on an L2 segment.
    L2(L2Args),
}

#[derive(Debug, clap::Args)]
struct BgpArgs {
    /// This speaker's AS number.
    #[arg(long)]
    asn: u32,
    /// A peer: ADDR,ASN[,port=N][,hold=S][,keepalive=S][,multihop=TTL]
    /// [,source=ADDR][,next-hop=ADDR][,local-pref=N][,bfd=MSxMULT]
    /// [,password-file=PATH] (the TCP-MD5 password, read from the file)
    /// [,passive=true] (wait for the router to connect). Repeatable.
    #[arg(long = "peer", required = true)]
    peers: Vec<PeerConfig>,
    /// An address to announce as a host route. Repeatable.
    #[arg(long = "announce")]
    addrs: Vec<IpAddr>,
    #[arg(long)]
    router_id: Option<Ipv4Addr>,
    /// Milliseconds between the GRACEFUL_SHUTDOWN announcement and the
    /// withdrawal.
    #[arg(long, default_value_t = 5000)]
    graceful_wait_ms: u64,
    /// Offer graceful restart (RFC 4724) with this restart time in
    /// seconds: a router that loses the session without a NOTIFICATION (a
    /// crash, SIGKILL) keeps the routes that long. Off by default.
    #[arg(long)]
    graceful_restart_time: Option<u64>,
    /// The port peers with `passive=true` connect to.
    #[arg(long, default_value_t = teapot_announce::peer::BGP_PORT)]
    listen_port: u16,
}

#[derive(Debug, clap::Args)]
struct L2Args {
    /// Interface the owned addresses go on.
    #[arg(long)]
    interface: String,
    /// This replica's name.
    #[arg(long)]
    replica: String,
    /// The live replicas, comma-separated (this one included).
    #[arg(long)]
    replicas: String,
    /// An address to own when the hash says so. Repeatable.
    #[arg(long = "announce")]
    addrs: Vec<IpAddr>,
    /// Seconds to repeat the announcement after taking an address.
    #[arg(long, default_value_t = DEFAULT_REPEAT_FOR.as_secs())]
    repeat_for: u64,
}

/// The live replicas a comma-separated list names; no Leases list what
/// they hold, so an address moves without waiting for its next owner.
fn replicas(list: &str) -> l2::Replicas {
    l2::Replicas {
        live: list
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect(),
        listed: Default::default(),
    }
}

/// Resolves on SIGTERM, SIGINT or, when `live` is given, the end of stdin;
/// each stdin line before that replaces its live replica set.
async fn until_stopped(live: Option<&dyn Announcer>) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            line = lines.next_line(), if live.is_some() => match (line?, &live) {
                (Some(line), Some(live)) => {
                    live.set_replicas(replicas(&line));
                }
                _ => return Ok(()),
            },
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The error as its message says it (the setting and why), not
            // as a debug dump of the enum.
            eprintln!("teapot-announce: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match Command::parse() {
        Command::Bgp(args) => {
            let mut config = SpeakerConfig::new(args.asn, args.peers);
            config.router_id = args.router_id;
            config.graceful_shutdown_wait = Duration::from_millis(args.graceful_wait_ms);
            config.graceful_restart = args.graceful_restart_time.map(Duration::from_secs);
            config.listen_port = args.listen_port;
            let speaker = Speaker::start(config, args.addrs.into_iter().collect())?;
            until_stopped(None).await?;
            tracing::info!("stopping");
            speaker.stop().await;
        }
        Command::L2(args) => {
            let config = L2Config {
                interface: args.interface,
                replica: args.replica,
                repeat_for: Duration::from_secs(args.repeat_for),
            };
            let announcer = L2Announcer::start(
                config,
                args.addrs.into_iter().collect(),
                replicas(&args.replicas),
            )?;
            until_stopped(Some(&announcer)).await?;
            Box::new(announcer).stop().await;
        }
    }
    Ok(())
}
