//! `teapot proxy` flags for advertising HTTP/3 (`Alt-Svc`) and the
//! self-probe it depends on (docs/reference.md, "HTTP/3").

use std::time::Duration;

use teapot_proxy::plane::alt_svc::{self, AltSvcConfig, ProbeTarget};

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct AltSvcArgs {
    /// With --http3: add `Alt-Svc: h3=":PORT"` to HTTPS answers (HTTP/1.1 and HTTP/2) while this replica's HTTP/3 path answers its self-probe; false: never, fleet-wide (one Ingress: teapot.dev/alt-svc: "false").
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    http3_advertise: bool,
    /// The UDP port clients reach HTTP/3 on, as Alt-Svc names it. Default: the HTTPS listener's port (set it when a Service or NAT maps another port to the listener, e.g. 443 to 8443).
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    http3_advertise_port: Option<u16>,
    /// Alt-Svc's ma: seconds a client may remember HTTP/3 after an answer said so.
    #[arg(long, default_value_t = alt_svc::DEFAULT_MAX_AGE.as_secs(), value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    http3_advertise_max_age: u64,
    /// Where the HTTP/3 self-probe's QUIC handshake goes, HOST:PORT. Default: the first --status-address (the address clients are told) at the advertised port, so a firewall or a TCP-only load balancer on that path withdraws Alt-Svc.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_target)]
    http3_probe_address: Option<ProbeTarget>,
    /// Seconds after which a request starts the next self-probe (at most one per interval, none without requests); Alt-Svc ends two intervals after the last successful probe, at once after a failed one.
    #[arg(long, default_value_t = alt_svc::DEFAULT_PROBE_INTERVAL.as_secs(), value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    http3_probe_interval: u64,
}

fn parse_target(value: &str) -> Result<ProbeTarget, String> {
    ProbeTarget::parse(value).ok_or_else(|| format!("{value}: not HOST:PORT"))
}

impl AltSvcArgs {
    pub(crate) fn config(&self) -> AltSvcConfig {
        AltSvcConfig {
            advertise: self.http3_advertise,
            port: self.http3_advertise_port,
            max_age: Duration::from_secs(self.http3_advertise_max_age),
            probe: self.http3_probe_address.clone(),
            interval: Duration::from_secs(self.http3_probe_interval),
        }
    }
}
