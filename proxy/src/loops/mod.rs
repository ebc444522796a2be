//! The long-running tasks that own state and hand it to the compile.
//!
//! Layout:
//! - [`reload`]: the reload loop. The only place a compile runs: it reads
//!   the source (a manifests directory or the Kubernetes watch), takes the
//!   other loops' state as data, compiles, swaps the snapshot, publishes
//!   the L4 table and prunes the registries. Other loops ask for a
//!   recompile through its [`reload::Recompile`] handle.
//! - [`kube_status`]: writes Ingress and Service status in kube mode, from
//!   one replica (a Lease).
//! - [`gateway_status`]: the Gateway API part of it (GatewayClass, Gateway
//!   and route status), written against a list of updates.
//! - [`acme`]: certificates from ACME (HTTP-01), one issuer per fleet.
//! - [`proof`]: DNS proofs of tenants' custom domains.
//! - [`allocations`]: what each L4 Service holds, remembered across
//!   compiles and restarts.
//! - [`announce`]: announces the fleet's and the L4 addresses while the
//!   replica is ready, each by its pool's mode (BGP speaker, L2 owner):
//!   the pools, the live replicas (a Lease per replica, BFD between
//!   them), the `Announced` condition and the BGP session Events.
//! - [`fleet_exchange`]: `global-rate-limit`'s counts sent to and merged
//!   from the fleet's other replicas (UDP, HMAC under the fleet's key).
//! - [`fleet_peers`]: those replicas found from the fleet's Service's
//!   EndpointSlices in kube mode (`--fleet-service`).
//! - [`dns_zone`]: the zone of the fleet's authoritative DNS server
//!   (teapot-dns), rebuilt from the routes, the ready replicas' or the
//!   announced addresses and the ACME DNS-01 challenges.

pub mod acme;
pub mod allocations;
pub mod announce;
pub mod dns_zone;
pub mod fleet_exchange;
pub mod fleet_peers;
pub mod gateway_status;
pub mod kube_status;
pub mod proof;
pub mod reload;
