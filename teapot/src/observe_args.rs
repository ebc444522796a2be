//! `teapot proxy` flags for the access log, request IDs and per-route
//! series (docs/operations.md).

use std::path::PathBuf;

use clap::ValueEnum;
use teapot_proxy::ObserveConfig;
use teapot_proxy::plane::access_log::{AccessLogConfig, Destination, Format, Mode};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum AccessLogMode {
    Off,
    All,
    Errors,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum AccessLogFormat {
    Json,
    Text,
}

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ObserveArgs {
    /// Access log: one line per request and L4 connection ("errors": status >= 400, local answers, failed upstreams). Off by default: see docs/operations.md.
    #[arg(long, value_enum, default_value_t = AccessLogMode::Off, env = "TEAPOT_ACCESS_LOG")]
    access_log: AccessLogMode,
    /// Access-log line format.
    #[arg(long, value_enum, default_value_t = AccessLogFormat::Json)]
    access_log_format: AccessLogFormat,
    /// Append the access log to this file instead of stderr.
    #[arg(long)]
    access_log_file: Option<PathBuf>,
    /// Log one in N successful requests (errors are always logged).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    access_log_sample: u32,
    /// Keep the query string in logged paths (off: it can carry tokens).
    #[arg(long)]
    access_log_query: bool,
    /// Lines queued for the writer before new ones are dropped (counted in teapot_access_log_dropped_total).
    #[arg(long, default_value_t = 16384, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    access_log_queue: u64,
    /// Operator namespace whose routes keep a client's X-Request-Id (repeatable); everywhere else teapot sets a new one.
    #[arg(long = "trust-request-id", value_name = "NAMESPACE")]
    trust_request_id: Vec<String>,
    /// Request series per route (backend namespace/service:port) as well as per tenant: about 20 series per route.
    #[arg(long)]
    metrics_per_route: bool,
}

impl ObserveArgs {
    pub(crate) fn config(&self) -> ObserveConfig {
        ObserveConfig {
            access_log: AccessLogConfig {
                mode: match self.access_log {
                    AccessLogMode::Off => Mode::Off,
                    AccessLogMode::All => Mode::All,
                    AccessLogMode::Errors => Mode::Errors,
                },
                format: match self.access_log_format {
                    AccessLogFormat::Json => Format::Json,
                    AccessLogFormat::Text => Format::Text,
                },
                destination: self
                    .access_log_file
                    .clone()
                    .map_or(Destination::Stderr, Destination::File),
                sample: self.access_log_sample,
                query: self.access_log_query,
                queue: usize::try_from(self.access_log_queue).unwrap_or(1 << 20),
            },
            trust_request_id: self.trust_request_id.clone(),
            metrics_per_route: self.metrics_per_route,
        }
    }
}
