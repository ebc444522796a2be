//! `/status` and `/metrics` of the announcement: the pools, what each
//! announcer holds and sends, the BGP sessions, the live replicas.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use teapot_announce::{Held, PeerStatus, Statuses};
use tokio::sync::watch;

use super::membership::View;
use super::pools::Mode;

/// One address as `/status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AddressReport {
    pub address: IpAddr,
    pub pool: String,
    pub mode: &'static str,
    /// L2: the replica the hash names among the live ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// What the follow loop last computed, for `/status` and `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Report {
    pub(super) addresses: Vec<AddressReport>,
    pub(super) outside: BTreeSet<IpAddr>,
    pub(super) live: BTreeSet<String>,
}

/// `/status` and `/metrics` of the announcement, cheap to clone.
#[derive(Clone, Debug)]
pub struct AnnounceView {
    pub(super) replica: String,
    /// Each pool: name, mode, whether this replica may announce it.
    pub(super) pools: Vec<(String, Mode, bool)>,
    /// Each announcer with an interface (L2): its pool, the interface
    /// and what it holds.
    pub(super) l2: Vec<(String, String, watch::Receiver<Held>)>,
    /// The sessions of the announcers that have them (BGP).
    pub(super) sessions: Option<Statuses>,
    pub(super) report: Arc<Mutex<Report>>,
    pub(super) lease_errors: Option<Arc<std::sync::atomic::AtomicU64>>,
    pub(super) unpooled_seen: Arc<std::sync::atomic::AtomicU64>,
    /// The announcer Leases and BFD with the other replicas (kube mode).
    pub(super) membership: Option<watch::Receiver<View>>,
    /// Passes of the loops that follow the inputs, by loop: at rest they
    /// wake only for the Lease renewals (`teapot_announce_wakeups_total`).
    pub(super) wakes: Vec<(&'static str, Arc<std::sync::atomic::AtomicU64>)>,
}

impl crate::plane::admin::StatusSection for AnnounceView {
    /// `/status`'s `announce` object, and `bgp` with the sessions.
    fn json(&self) -> Vec<(&'static str, serde_json::Value)> {
        let mut sections = Vec::new();
        if let Some(sessions) = &self.sessions {
            let peers = sessions.snapshot().iter().map(bgp_json).collect();
            sections.push(("bgp", serde_json::Value::Array(peers)));
        }
        sections.push(("announce", self.announce_json()));
        sections
    }

    /// `teapot_bgp_*`, `teapot_l2_*` and `teapot_announce_*` in
    /// Prometheus' text format.
    fn render_prometheus(&self) -> String {
        let mut out = self
            .sessions
            .as_ref()
            .map(Statuses::render_prometheus)
            .unwrap_or_default();
        out.push_str(&self.render_announce());
        out
    }
}

impl AnnounceView {
    fn announce_json(&self) -> serde_json::Value {
        let report = self.report.lock().clone();
        let mut owned = BTreeSet::new();
        let mut sent = 0;
        let pools: Vec<serde_json::Value> = self
            .l2
            .iter()
            .map(|(pool, interface, status)| {
                let s = status.borrow().clone();
                owned.extend(s.owned.iter().copied());
                sent += s.announcements_sent;
                serde_json::json!({
                    "pool": pool,
                    "interface": interface,
                    "owned": s.owned,
                    "announcements_sent": s.announcements_sent,
                    "errors": s.errors,
                    "last_error": s.last_error,
                })
            })
            .collect();
        serde_json::json!({
            "replica": self.replica,
            "pools": self
                .pools
                .iter()
                .map(|(name, mode, announcer)| serde_json::json!({
                    "name": name,
                    "mode": mode.as_str(),
                    "announcer": announcer,
                }))
                .collect::<Vec<_>>(),
            "live_replicas": report.live,
            "owned": owned,
            "announcements_sent": sent,
            "addresses": report.addresses,
            "not_in_any_pool": report.outside,
            "l2": pools,
            "bfd": self.membership.as_ref().map(|m| {
                let view = m.borrow();
                serde_json::json!({
                    "sessions": view.bfd.iter().map(|(r, s)| (r.clone(), s.as_str())).collect::<BTreeMap<_, _>>(),
                    "silenced": view.silenced.keys().collect::<Vec<_>>(),
                    "cut_off": view.cut_off,
                })
            }),
        })
    }

    fn render_announce(&self) -> String {
        use std::fmt::Write;
        let report = self.report.lock().clone();
        let mut out = String::new();
        let mut owned = String::new();
        let mut sent = String::new();
        let mut errors = String::new();
        for (pool, interface, status) in &self.l2 {
            let s = status.borrow();
            let _ = writeln!(
                owned,
                "teapot_l2_addresses_owned{{pool=\"{pool}\"}} {}",
                s.owned.len()
            );
            let _ = writeln!(
                sent,
                "teapot_l2_announcements_sent_total{{pool=\"{pool}\"}} {}",
                s.announcements_sent
            );
            let _ = writeln!(
                errors,
                "teapot_announce_errors_total{{setting=\"interface {interface}\"}} {}",
                s.errors
            );
        }
        let mut bfd = String::new();
        if let Some(m) = &self.membership {
            for (replica, state) in &m.borrow().bfd {
                let up = u8::from(*state == teapot_announce::bfd::State::Up);
                let _ = writeln!(
                    bfd,
                    "teapot_l2_bfd_session_up{{replica=\"{replica}\"}} {up}"
                );
            }
        }
        let mut wakes = String::new();
        for (name, count) in &self.wakes {
            let _ = writeln!(
                wakes,
                "teapot_announce_wakeups_total{{loop=\"{name}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        if let Some(e) = &self.lease_errors {
            let _ = writeln!(
                errors,
                "teapot_announce_errors_total{{setting=\"lease\"}} {}",
                e.load(Ordering::Relaxed)
            );
        }
        let families = [
            (
                "teapot_l2_addresses_owned",
                "gauge",
                "Addresses this replica holds on the pool's interface",
                owned,
            ),
            (
                "teapot_l2_announcements_sent_total",
                "counter",
                "Gratuitous ARPs and unsolicited neighbour advertisements sent",
                sent,
            ),
            (
                "teapot_l2_live_replicas",
                "gauge",
                "Replicas whose announcer Lease this replica saw renewed within its duration",
                format!("teapot_l2_live_replicas {}\n", report.live.len()),
            ),
            (
                "teapot_l2_bfd_session_up",
                "gauge",
                "1 while the BFD session with that replica is up (--l2-bfd)",
                bfd,
            ),
            (
                "teapot_announce_unpooled_addresses",
                "gauge",
                "Addresses to announce that are in no --announce-pool (not announced)",
                format!(
                    "teapot_announce_unpooled_addresses {}\n",
                    report.outside.len()
                ),
            ),
            (
                "teapot_announce_unpooled_total",
                "counter",
                "Addresses found in no --announce-pool, each counted once",
                format!(
                    "teapot_announce_unpooled_total {}\n",
                    self.unpooled_seen.load(Ordering::Relaxed)
                ),
            ),
            (
                "teapot_announce_errors_total",
                "counter",
                "Failed announcement steps, by setting (an L2 interface, the Lease)",
                errors,
            ),
            (
                "teapot_announce_wakeups_total",
                "counter",
                "Passes of the loops following readiness, snapshots, Leases and BFD (at rest: one per Lease renewal seen)",
                wakes,
            ),
        ];
        for (name, kind, help, body) in families {
            if body.is_empty() {
                continue;
            }
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            out.push_str(&body);
        }
        out
    }
}

/// One BGP session as `/status` shows it.
fn bgp_json(peer: &PeerStatus) -> serde_json::Value {
    serde_json::json!({
        "peer": peer.peer.to_string(),
        "remote_asn": peer.remote_asn,
        "state": peer.state.as_str(),
        "announced": peer.announced,
        "announcements_sent": peer.announcements_sent,
        "withdrawals_sent": peer.withdrawals_sent,
        "sessions_established": peer.sessions_established,
        "last_error": peer.last_error,
        "failures": peer.failures,
        // Whether a TCP-MD5 password is set; the password is never shown.
        "md5": peer.md5,
        "families": peer.families.iter().map(|f| match f {
            teapot_announce::wire::Family::Ipv4 => "ipv4",
            teapot_announce::wire::Family::Ipv6 => "ipv6",
        }).collect::<Vec<_>>(),
        "graceful_restart": peer.graceful_restart.then(|| serde_json::json!({
            "router_restart_time": peer.router_graceful_restart,
            "end_of_rib_sent": peer.end_of_rib_sent,
        })),
        "bfd": peer.bfd.as_ref().map(|b| serde_json::json!({
            "state": b.state.as_str(),
            "diagnostic": b.diag,
            "failures": b.failures,
        })),
    })
}
