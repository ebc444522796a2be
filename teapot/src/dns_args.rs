//! `teapot proxy --dns-*`: the fleet's authoritative DNS server for
//! lb.DOMAIN (docs/dns.md).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, bail};
use teapot_dns::{RateLimit, ZoneSettings};
use teapot_proxy::loops::dns_zone::DnsConfig;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct DnsArgs {
    /// Answer for the zone (default lb.DOMAIN) on ADDR:PORT, UDP and TCP; off unless set. The parent zone delegates to the fleet with NS records (docs/dns.md).
    #[arg(long, env = "TEAPOT_DNS_LISTEN", value_parser = crate::listen_addr::socket_addr)]
    dns_listen: Option<SocketAddr>,
    /// The zone served (default: lb.DOMAIN of --domain).
    #[arg(long, env = "TEAPOT_DNS_ZONE")]
    dns_zone: Option<String>,
    /// Name of a name server of the zone, for its NS records and the SOA (repeatable; default ns1.ZONE). Names inside the zone get the answered addresses as glue.
    #[arg(long = "dns-nameserver")]
    dns_nameservers: Vec<String>,
    /// The SOA's responsible mailbox as a name (default hostmaster.ZONE).
    #[arg(long)]
    dns_hostmaster: Option<String>,
    /// TTL of A, AAAA and TXT answers, seconds: how long resolvers may keep a replica that stopped being ready.
    #[arg(long, default_value_t = 5)]
    dns_ttl: u32,
    /// TTL of NXDOMAIN and NODATA answers (the SOA MINIMUM), seconds.
    #[arg(long, default_value_t = 5)]
    dns_negative_ttl: u32,
    /// CA allowed to issue for the zone, as in a CAA record (e.g. letsencrypt.org; repeatable; default: no CAA record).
    #[arg(long = "dns-caa")]
    dns_caa: Vec<String>,
    /// Address answered for the served names (repeatable): this replica's public address (its node's, in daemonset mode). Default: the --status-address IPs. With --announce-pool or --bgp-peer the fleet's announced addresses are answered instead.
    #[arg(long = "dns-address")]
    dns_addresses: Vec<IpAddr>,
    /// UDP responses per second one client prefix (/24, /56) gets for one name; 0: no limit.
    #[arg(long, default_value_t = 20)]
    dns_rate_limit: u32,
    /// Of the responses over the limit, every Nth goes out truncated (so real resolvers retry over TCP); 0: all dropped.
    #[arg(long, default_value_t = 2)]
    dns_slip: u32,
    /// UDP response bytes per second one client prefix (/24, /56) gets across all names and types, so rotating names or types cannot multiply --dns-rate-limit; 0: no byte budget.
    #[arg(long, default_value_t = 65536)]
    dns_rate_limit_bytes: u32,
    /// TCP connections one client prefix (/24, /56) holds at once, of the listener's 256; 0: no share.
    #[arg(long, default_value_t = 16)]
    dns_tcp_per_prefix: usize,
    /// Seconds after which a DNS TCP connection is closed, however busy.
    #[arg(long, default_value_t = 30.0)]
    dns_tcp_lifetime: f64,
    /// Seconds a client has to take each TCP answer before its connection is closed.
    #[arg(long, default_value_t = 2.0)]
    dns_tcp_write_timeout: f64,
    /// Serve every assigned hostname INGRESS.CLUSTER.ZONE with one certificate per tenant cluster (*.CLUSTER.ZONE and CLUSTER.ZONE), ordered by DNS-01 against this DNS server (needs --dns-listen, --acme-directory and the zone delegated to the fleet); other hosts keep HTTP-01.
    #[arg(long)]
    dns_acme_wildcards: bool,
    /// Kube mode: seconds between renewals of this replica's DNS Lease (it is renewed while the replica is ready).
    #[arg(long, default_value_t = 1.0)]
    dns_renew: f64,
    /// Kube mode: seconds without a renewal after which the other replicas stop answering this one's address.
    #[arg(long, default_value_t = 4.0)]
    dns_lease: f64,
}

impl DnsArgs {
    pub(crate) fn listen(&self) -> Option<SocketAddr> {
        self.dns_listen
    }

    /// The zone ACME's wildcard certificates are for
    /// (`--dns-acme-wildcards`), checked against the other flags.
    pub(crate) fn acme_wildcard_zone(
        &self,
        dns: Option<&DnsConfig>,
        acme: bool,
    ) -> anyhow::Result<Option<String>> {
        if !self.dns_acme_wildcards {
            return Ok(None);
        }
        let Some(dns) = dns else {
            bail!(
                "--dns-acme-wildcards needs --dns-listen: the CA checks DNS-01 on the fleet's own DNS server"
            );
        };
        if !acme {
            bail!("--dns-acme-wildcards needs --acme-directory");
        }
        Ok(Some(dns.zone.origin.clone()))
    }

    /// `None` without `--dns-listen`. `domain`: `--domain`; `status`:
    /// the `--status-address` values (the default answered addresses).
    pub(crate) fn config(
        &self,
        domain: &str,
        status: &[String],
    ) -> anyhow::Result<Option<DnsConfig>> {
        if self.dns_listen.is_none() {
            return Ok(None);
        }
        let origin = self
            .dns_zone
            .clone()
            .unwrap_or_else(|| format!("lb.{domain}"));
        let mut zone = ZoneSettings::new(&origin);
        if !self.dns_nameservers.is_empty() {
            zone.nameservers = self
                .dns_nameservers
                .iter()
                .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
                .collect();
        }
        if let Some(h) = &self.dns_hostmaster {
            zone.hostmaster = h.trim_end_matches('.').to_ascii_lowercase();
        }
        zone.ttl = self.dns_ttl;
        zone.negative_ttl = self.dns_negative_ttl;
        zone.caa_issuers = self.dns_caa.clone();
        // Checked here so a bad name fails at start, naming the flag.
        teapot_dns::ZoneBuilder::new(zone.clone()).context(
            "--dns-zone, --dns-nameserver, --dns-hostmaster or --dns-caa is not a valid name",
        )?;
        let mut config = DnsConfig::new(zone);
        config.addresses = if self.dns_addresses.is_empty() {
            status.iter().filter_map(|s| s.parse().ok()).collect()
        } else {
            self.dns_addresses.clone()
        };
        config.server.rate_limit = RateLimit {
            responses_per_second: self.dns_rate_limit,
            slip: self.dns_slip,
            bytes_per_second: self.dns_rate_limit_bytes,
            ..RateLimit::default()
        };
        let seconds = |flag: &str, v: f64| {
            Duration::try_from_secs_f64(v)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    anyhow::anyhow!("--{flag} {v}: a positive number of seconds is needed")
                })
        };
        config.server.tcp_per_prefix = self.dns_tcp_per_prefix;
        config.server.tcp_lifetime = seconds("dns-tcp-lifetime", self.dns_tcp_lifetime)?;
        config.server.tcp_write_timeout =
            seconds("dns-tcp-write-timeout", self.dns_tcp_write_timeout)?;
        config.renew_every = seconds("dns-renew", self.dns_renew)?;
        config.lease_duration = seconds("dns-lease", self.dns_lease)?;
        if config.renew_every >= config.lease_duration {
            bail!(
                "--dns-renew {} must be below --dns-lease {}: a Lease renewed no faster than it runs out flaps",
                self.dns_renew,
                self.dns_lease
            );
        }
        Ok(Some(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        dns: DnsArgs,
    }

    fn config(args: &[&str]) -> anyhow::Result<DnsConfig> {
        let mut argv = vec!["teapot", "--dns-listen", "127.0.0.1:53"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv)?;
        Ok(cli.dns.config("example.com", &[])?.unwrap())
    }

    #[test]
    fn flag_defaults_are_the_servers_defaults() {
        let server = config(&[]).unwrap().server;
        let ours = teapot_dns::ServerConfig::default();
        assert_eq!(server.rate_limit, ours.rate_limit);
        assert_eq!(server.tcp_per_prefix, ours.tcp_per_prefix);
        assert_eq!(server.tcp_lifetime, ours.tcp_lifetime);
        assert_eq!(server.tcp_write_timeout, ours.tcp_write_timeout);
    }

    #[test]
    fn abuse_bounds_are_set_by_their_flags_and_checked() {
        let server = config(&[
            "--dns-rate-limit-bytes",
            "4096",
            "--dns-tcp-per-prefix",
            "4",
            "--dns-tcp-lifetime",
            "5",
            "--dns-tcp-write-timeout",
            "0.5",
        ])
        .unwrap()
        .server;
        assert_eq!(server.rate_limit.bytes_per_second, 4096);
        assert_eq!(server.tcp_per_prefix, 4);
        assert_eq!(server.tcp_lifetime, Duration::from_secs(5));
        assert_eq!(server.tcp_write_timeout, Duration::from_millis(500));
        let err = config(&["--dns-tcp-write-timeout", "0"]).unwrap_err();
        assert!(
            err.to_string().contains("--dns-tcp-write-timeout 0"),
            "{err}"
        );
    }
}
