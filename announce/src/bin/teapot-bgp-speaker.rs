//! A standalone announce-only BGP speaker: announces the given addresses
//! to the given peers until SIGTERM or SIGINT, then stops gracefully
//! (GRACEFUL_SHUTDOWN, wait, withdraw, CEASE). The network-namespace
//! tests run it as a replica; operators can use it to check a router's
//! configuration before pointing teapot at it.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use clap::Parser;
use teapot_announce::{PeerConfig, Speaker, SpeakerConfig};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Parser)]
#[command(
    name = "teapot-bgp-speaker",
    about = "Announce host routes to BGP peers"
)]
struct Args {
    /// This speaker's AS number.
    #[arg(long)]
    asn: u32,
    /// A peer: ADDR,ASN[,port=N][,hold=S][,keepalive=S][,multihop=TTL]
    /// [,source=ADDR][,next-hop=ADDR][,local-pref=N]. Repeatable.
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
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let mut config = SpeakerConfig::new(args.asn, args.peers);
    config.router_id = args.router_id;
    config.graceful_shutdown_wait = Duration::from_millis(args.graceful_wait_ms);
    let (_addrs, addrs_rx) =
        tokio::sync::watch::channel(args.addrs.into_iter().collect::<BTreeSet<_>>());
    let speaker = Speaker::start(config, addrs_rx)?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tracing::info!("stopping");
    speaker.stop().await;
    Ok(())
}
