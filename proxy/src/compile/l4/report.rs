//! The L4 part of `/status`: the pools, every LoadBalancer Service with
//! its addresses, listeners and conditions (kube mode writes `status` into
//! `status.loadBalancer`), and the L4 part of each Gateway and the
//! TCPRoutes, UDPRoutes and TLSRoutes under teapot's Gateways.
//! A Gateway's part is also what its status is rendered from, with the
//! HTTP plane's ([`crate::compile::api_status`]).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::LoadBalancerStatus;
use serde::Serialize;

use super::pool::ListenerKey;
use super::runtime::{AppliedGeneration, LiveState};
use crate::compile::api_status::{L4Part, ListenerOutcome, RouteReport};
use crate::compile::condition::Condition;

/// `/status` `l4` section; `status` of each Service is what kube mode
/// writes into `status.loadBalancer`.
#[derive(Debug, Serialize)]
pub struct L4Report {
    /// Generation of the table the listeners serve now (they follow the
    /// compile within moments).
    pub applied_generation: AppliedGeneration,
    pub pools: Vec<PoolReport>,
    pub services: Vec<ServiceReport>,
    /// Gateways with TCP, UDP or TLS listeners: their address and the
    /// L4 listeners' status (docs/gateway-api-l4.md).
    pub gateways: Vec<GatewayPart>,
    /// TCPRoutes, UDPRoutes and TLSRoutes under teapot's Gateways: their
    /// parent statuses.
    pub routes: Vec<RouteReport>,
}

#[derive(Debug, Serialize)]
pub struct PoolReport {
    pub name: String,
    pub addresses: usize,
    /// Addresses holding at least one listener.
    pub in_use: usize,
}

#[derive(Debug, Serialize)]
pub struct ServiceReport {
    pub namespace: String,
    pub name: String,
    pub pool: Option<String>,
    /// The primary address (`status.loadBalancer.ingress[0]`).
    pub address: Option<IpAddr>,
    /// Every address: one, or one of each family (dual-stack), the
    /// primary first.
    pub addresses: Vec<IpAddr>,
    pub status: LoadBalancerStatus,
    pub listeners: Vec<ListenerReport>,
    pub conditions: Vec<Condition>,
}

#[derive(Debug, Serialize)]
pub struct ListenerReport {
    pub listener: ListenerKey,
    pub port_name: String,
    pub endpoints: Vec<String>,
    /// `listening`, `pending` or the bind error.
    pub state: LiveState,
}

/// One L4 listener of a Gateway, as served.
#[derive(Debug, Serialize)]
pub struct ListenerPart {
    pub name: String,
    pub port: u16,
    pub protocol: &'static str,
    /// The socket, when the Gateway has an address and the listener is
    /// served.
    pub listener: Option<ListenerKey>,
    /// `listening`, `pending` or the bind error, read when rendered (the
    /// listeners bind after the compile).
    pub state: Option<LiveState>,
    /// Its supported kinds (the route kind of its protocol, when
    /// `allowedRoutes.kinds` allows it), routes and conditions, as the
    /// Gateway's status renders them.
    #[serde(flatten)]
    pub outcome: ListenerOutcome,
}

/// The L4 plane's part of a Gateway: its address and its L4 listeners
/// (docs/gateway-api-l4.md, "Status"); the Gateway's status is rendered
/// from it and the HTTP plane's part ([`crate::compile::api_status`]).
#[derive(Debug, Serialize)]
pub struct GatewayPart {
    pub namespace: String,
    pub name: String,
    pub pool: Option<String>,
    /// `status.addresses[]` gets `{type: IPAddress, value}` of it.
    pub address: Option<IpAddr>,
    /// `Programmed` (False with the allocation's reason, such as
    /// `AddressNotAssigned`, when the Gateway got no address).
    pub conditions: Vec<Condition>,
    pub listeners: Vec<ListenerPart>,
}

impl GatewayPart {
    /// What the Gateway's status is rendered from.
    pub fn part(&self) -> L4Part<'_> {
        L4Part {
            namespace: &self.namespace,
            name: &self.name,
            address: self.address,
            refused: self
                .conditions
                .iter()
                .find(|c| c.type_ == "Programmed" && c.status == "False"),
            listeners: self
                .listeners
                .iter()
                .map(|l| (l.name.as_str(), &l.outcome))
                .collect(),
        }
    }
}
