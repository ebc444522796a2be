//! Store -> L4 table: which Services teapot serves at L4, the address
//! each one gets, and per listener the upstream and its options.
//!
//! Runs inside [`crate::compile::compile`], so kube mode and manifests mode
//! share it; endpoints come through the compile's resolver (same
//! EndpointSlice reading, same tenant address checks, same endpoint health
//! as the HTTP path).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, PortStatus};
use teapot_api::admission::DEFAULT_MAX_LISTENERS;
use teapot_api::annotations::{self, AnnotationValue, ObjectKind};
use teapot_api::names::LOAD_BALANCER_CLASS;
use teapot_model::service::CompactService;

use super::L4Config;
use super::allocation::{Claim, FamilyPolicy, Outcome};
use super::pool::{Family, ListenerKey, Protocol};
use super::ranges::SourceRanges;
pub use super::report::{L4Report, ListenerReport, PoolReport, ServiceReport};
use super::runtime::{AppliedGeneration, LiveState, Runtime};
use crate::compile::bind::TenantHosts;
use crate::compile::condition::Condition;
use crate::compile::upstream::Upstream;
use teapot_model::store::{NsName, Store};
use teapot_model::tenancy::Tenancy;

/// Health-check settings of one listener's endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HealthOptions {
    pub interval: Duration,
    /// Consecutive failures that eject an endpoint.
    pub unhealthy_threshold: u32,
    /// Consecutive successes that bring it back.
    pub healthy_threshold: u32,
}

impl Default for HealthOptions {
    fn default() -> Self {
        // With a probe timeout of one interval at most, a dead endpoint is
        // ejected within 3 s (DESIGN goal: 5 s).
        HealthOptions {
            interval: Duration::from_secs(1),
            unhealthy_threshold: 2,
            healthy_threshold: 2,
        }
    }
}

/// Per-listener options, from annotations over the operator's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteOptions {
    /// The clients the listener admits (`spec.loadBalancerSourceRanges`);
    /// `None` admits everyone. Checked at accept (TCP, TLS passthrough
    /// included) and before a UDP flow exists, so a refused client never
    /// reaches an upstream connect or a flow slot.
    pub source_ranges: Option<Arc<SourceRanges>>,
    pub proxy_protocol: bool,
    pub tcp_idle_timeout: Duration,
    pub udp_idle_timeout: Duration,
    pub health: HealthOptions,
}

/// What one listener forwards to.
#[derive(Debug)]
pub struct Route {
    /// The Service, or the Gateway whose listener this is (metrics and
    /// logs label by it).
    pub service: NsName,
    pub port_name: String,
    /// Every endpoint the listener may forward to: for a TLS passthrough
    /// listener the union of its SNI choices (health checks and draining
    /// follow it).
    pub upstream: Arc<Upstream>,
    /// TLS passthrough (a Gateway's TLS listeners on this socket): the
    /// upstream is chosen by the ClientHello's server name.
    pub sni: Option<Arc<super::gateway::SniRoutes>>,
    /// A Gateway route's share refused for invalid or empty backendRefs
    /// (TCP: the connection is closed; UDP: the datagram is dropped).
    pub refusals: Option<Arc<super::gateway::Refusals>>,
    pub options: RouteOptions,
    /// An HTTP or HTTPS listener of a Gateway with its own address: its
    /// connections go to the HTTP edge, not to `upstream` (empty).
    pub edge: Option<EdgeListener>,
}

/// A Gateway listener socket served by the HTTP edge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeListener {
    /// TLS terminated (HTTPS) with the shared listener's certificates.
    pub tls: bool,
    /// The Gateway whose routes at this port the requests see.
    pub gateway: NsName,
}

/// The compiled L4 state: every listener that should exist.
#[derive(Debug, Default)]
pub struct L4Table {
    pub generation: u64,
    pub listeners: BTreeMap<ListenerKey, Arc<Route>>,
}

/// Whether `service` is one teapot serves at L4.
pub fn is_l4_service(service: &CompactService, serve_classless: bool) -> bool {
    let Some(spec) = &service.spec else {
        return false;
    };
    spec.type_.as_deref() == Some("LoadBalancer")
        && match spec.load_balancer_class.as_deref() {
            Some(class) => class == LOAD_BALANCER_CLASS,
            None => serve_classless,
        }
}

/// What asks for listeners.
enum Owner<'s> {
    Service,
    Gateway(super::gateway::Plan<'s>),
}

/// One eligible Service or Gateway before allocation.
struct Candidate<'s> {
    id: &'s NsName,
    owner: Owner<'s>,
    /// The key of its holding (a Gateway's differs from its name).
    holder: NsName,
    created: Option<&'s k8s_openapi::jiff::Timestamp>,
    /// What counts against the tenant's `l4.maxListeners`: a Service's
    /// ports, a Gateway's L4 listeners (as the webhook counts them).
    counted: u32,
    pool: Option<String>,
    /// `(port, protocol, name)`, deduplicated on `(port, protocol)`.
    ports: Vec<(u16, Protocol, &'s str)>,
    requested: Option<IpAddr>,
    hint: Option<super::allocation::Holding>,
    /// `ipFamilies` and `ipFamilyPolicy`: how many addresses, of which
    /// families.
    families: Vec<Family>,
    policy: FamilyPolicy,
    options: RouteOptions,
    problems: Vec<String>,
    refused: Option<(&'static str, String)>,
    /// Why `spec.loadBalancerSourceRanges` cannot be enforced (the
    /// Service is then refused).
    ranges_refused: Option<String>,
}

/// Builds the table, the report and the new holdings; allocates from
/// `previous`.
pub(super) fn build<'s>(
    config: &L4Config,
    previous: &BTreeMap<NsName, super::allocation::Holding>,
    runtime: &Arc<Runtime>,
    store: &'s Store,
    hosts: &mut TenantHosts<'_, '_>,
    generation: u64,
    mut resolve: impl FnMut(&'s str, &'s str, i32, &'s str, bool) -> Arc<Upstream>,
) -> (
    L4Table,
    L4Report,
    BTreeMap<NsName, super::allocation::Holding>,
) {
    let tenancy = hosts.tenancy;
    let mut candidates: Vec<Candidate<'s>> = store
        .services
        .iter()
        // A tenant's Service must name teapot's class whatever the flag
        // says: the webhook requires it, and the proxy re-checks.
        .filter(|(id, s)| {
            let classless = config.serve_classless && tenancy.get(&id.namespace).is_none();
            is_l4_service(&s.object, classless)
        })
        .map(|(id, s)| candidate(config, tenancy, id, &s.object))
        .collect();
    let plans = super::gateway::plans(store, tenancy, config.gateway_own_addresses);
    let attached = super::gateway::attach(store, hosts, &plans, &mut resolve);
    candidates.extend(
        plans
            .into_iter()
            .filter(|plan| !plan.listeners.is_empty())
            .map(|plan| gateway_candidate(config, tenancy, plan)),
    );
    candidates.sort_by(|a, b| age(a).cmp(&age(b)));

    // Tenant caps, oldest Service first.
    let mut used: HashMap<&str, u32> = HashMap::new();
    for c in &mut candidates {
        if c.refused.is_some() {
            continue;
        }
        let Some(t) = tenancy.get(&c.id.namespace) else {
            continue;
        };
        let max = t
            .tenant
            .spec
            .l4
            .as_ref()
            .and_then(|l| l.max_listeners)
            .unwrap_or(DEFAULT_MAX_LISTENERS);
        let count = used.entry(t.cluster).or_default();
        let wanted = *count + c.counted;
        if wanted > max {
            c.refused = Some((
                "ListenerLimit",
                format!(
                    "tenant {} would hold {wanted} L4 listeners, more than l4.maxListeners = {max}",
                    t.cluster
                ),
            ));
        } else {
            *count = wanted;
        }
    }

    let claimants: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].refused.is_none())
        .collect();
    let claims: Vec<Claim<'_>> = claimants
        .iter()
        .map(|&i| {
            let c = &candidates[i];
            Claim {
                service: &c.holder,
                pool: c.pool.as_deref().unwrap_or_default(),
                ports: c.ports.iter().map(|&(p, proto, _)| (p, proto)).collect(),
                requested: c.requested,
                hint: c.hint.clone(),
                families: c.families.clone(),
                policy: c.policy,
            }
        })
        .collect();
    let outcomes = super::allocation::allocate(&config.pools, &config.reserved, previous, &claims);
    let holdings = super::allocation::holdings(&claims, &outcomes);
    drop(claims);
    let mut outcome_of: Vec<Option<Outcome>> = vec![None; candidates.len()];
    for (i, o) in claimants.into_iter().zip(outcomes) {
        outcome_of[i] = Some(o);
    }

    let mut table = L4Table {
        generation,
        listeners: BTreeMap::new(),
    };
    let mut services = Vec::with_capacity(candidates.len());
    let mut gateways = Vec::new();
    for (c, outcome) in candidates.into_iter().zip(outcome_of) {
        let c = match c.owner {
            Owner::Gateway(ref plan) => {
                let result = match (&c.refused, &outcome) {
                    (Some((reason, message)), _) => Err((*reason, message.clone())),
                    (None, Some(Outcome::Refused { reason, message })) => {
                        Err((*reason, message.clone()))
                    }
                    // A Gateway claims one address (single-stack).
                    (None, Some(Outcome::Allocated { addrs, .. })) => {
                        Ok((addrs[0].addr, addrs[0].refused_ports.as_slice()))
                    }
                    (None, None) => Err(("NoPorts", "no listener to serve".to_string())),
                };
                let (sockets, report) =
                    super::gateway::serve(plan, &attached, c.pool.clone(), result, runtime);
                for (key, target) in sockets {
                    let mut edge = None;
                    let (upstream, sni, refusals) = match target {
                        super::gateway::Target::Backends(u, refusals) => (u, None, refusals),
                        super::gateway::Target::Sni(sni) => (
                            super::gateway::union(&c.id.to_string(), &sni),
                            Some(Arc::new(sni)),
                            None,
                        ),
                        super::gateway::Target::Edge { tls } => {
                            edge = Some(EdgeListener {
                                tls,
                                gateway: c.id.clone(),
                            });
                            (
                                Arc::new(Upstream::new(
                                    format!("{} {}", if tls { "HTTPS" } else { "HTTP" }, c.id),
                                    Vec::new(),
                                    None,
                                )),
                                None,
                                None,
                            )
                        }
                    };
                    table.listeners.insert(
                        key,
                        Arc::new(Route {
                            service: c.id.clone(),
                            port_name: String::new(),
                            upstream,
                            sni,
                            refusals,
                            options: c.options.clone(),
                            edge,
                        }),
                    );
                }
                gateways.push(report);
                continue;
            }
            Owner::Service => c,
        };
        let mut conditions = Vec::new();
        let mut listeners = Vec::new();
        let mut addresses = Vec::new();
        let mut ingress = Vec::new();
        let mut unready = Vec::new();
        let refusal = match (c.refused.clone(), &outcome) {
            (Some(r), _) => Some(r),
            (None, Some(Outcome::Refused { reason, message })) => Some((*reason, message.clone())),
            _ => None,
        };
        match (refusal, outcome) {
            (Some((reason, message)), _) => {
                tracing::debug!(service = %c.id, reason, %message, "L4 allocation refused");
                conditions.push(Condition::new("Allocated", false, reason, message));
            }
            (None, Some(Outcome::Allocated { addrs, missing })) => {
                // A family left out (PreferDualStack, none of its addresses
                // free) is said, not hidden: the Service is served on the
                // others.
                conditions.push(Condition::new(
                    "Allocated",
                    true,
                    "Allocated",
                    missing
                        .iter()
                        .map(|why| format!("{why}: served without that family"))
                        .collect::<Vec<_>>()
                        .join("; "),
                ));
                let mut port_problems = Vec::new();
                // One upstream per port, shared by its listeners on every
                // address.
                let mut upstreams: Vec<Option<Arc<Upstream>>> = vec![None; c.ports.len()];
                for granted in addrs {
                    let addr = granted.addr;
                    addresses.push(addr);
                    let mut ingress_ports = Vec::new();
                    for (n, &(port, protocol, port_name)) in c.ports.iter().enumerate() {
                        let key = ListenerKey {
                            addr,
                            port,
                            protocol,
                        };
                        if let Some((_, why)) = granted
                            .refused_ports
                            .iter()
                            .find(|(p, _)| *p == (port, protocol))
                        {
                            port_problems.push(why.clone());
                            ingress_ports.push(PortStatus {
                                port: port.into(),
                                protocol: protocol.as_str().into(),
                                error: Some(teapot_api::status::port_error("AddressTaken")),
                            });
                            continue;
                        }
                        let upstream = upstreams[n]
                            .get_or_insert_with(|| {
                                let u = resolve(
                                    &c.id.namespace,
                                    &c.id.name,
                                    port.into(),
                                    port_name,
                                    false,
                                );
                                for why in u.unavailable.iter().chain(&u.refused) {
                                    if !unready.contains(why) {
                                        unready.push(why.clone());
                                    }
                                }
                                u
                            })
                            .clone();
                        listeners.push(ListenerReport {
                            listener: key,
                            port_name: port_name.to_string(),
                            endpoints: upstream
                                .endpoints
                                .compile_from()
                                .iter()
                                .map(|e| e.addr.to_string())
                                .collect(),
                            state: LiveState::new(runtime.clone(), key),
                        });
                        ingress_ports.push(PortStatus {
                            port: port.into(),
                            protocol: protocol.as_str().into(),
                            error: None,
                        });
                        table.listeners.insert(
                            key,
                            Arc::new(Route {
                                service: c.id.clone(),
                                port_name: port_name.to_string(),
                                upstream,
                                sni: None,
                                refusals: None,
                                options: c.options.clone(),
                                edge: None,
                            }),
                        );
                    }
                    ingress.push(LoadBalancerIngress {
                        ip: Some(addr.to_string()),
                        ip_mode: Some("VIP".into()),
                        ports: Some(ingress_ports),
                        ..Default::default()
                    });
                }
                conditions.push(Condition::unless_problems(
                    "PortsAllocated",
                    &port_problems,
                    "PortsAllocated",
                    "AddressTaken",
                ));
            }
            (None, _) => {}
        }
        let address = addresses.first().copied();
        if address.is_some() {
            conditions.push(Condition::unless_problems(
                "BackendsReady",
                &unready,
                "EndpointsReady",
                "NoReadyEndpoints",
            ));
        }
        if let Some(c) =
            source_ranges_condition(&c.options, c.ranges_refused.as_deref(), address.is_some())
        {
            conditions.push(c);
        }
        if !c.problems.is_empty() {
            conditions.push(Condition::new(
                "Configured",
                false,
                "InvalidSettings",
                c.problems.join("; "),
            ));
        }
        let status = LoadBalancerStatus {
            ingress: address.is_some().then_some(ingress),
        };
        services.push(ServiceReport {
            namespace: c.id.namespace.clone(),
            name: c.id.name.clone(),
            pool: c.pool,
            address,
            addresses,
            status,
            listeners,
            conditions,
        });
    }
    services.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let pools = config
        .pools
        .iter()
        .map(|p| PoolReport {
            name: p.name.clone(),
            addresses: p.addresses.len(),
            in_use: {
                let mut used: Vec<IpAddr> = table
                    .listeners
                    .keys()
                    .map(|k| k.addr)
                    .filter(|a| p.contains(*a))
                    .collect();
                used.dedup();
                used.len()
            },
        })
        .collect();
    let report = L4Report {
        applied_generation: AppliedGeneration(runtime.clone()),
        pools,
        services,
        gateways,
        routes: attached.reports,
    };
    (table, report, holdings)
}

/// The condition type that says whether a Service's source ranges are
/// enforced; present only when the Service has some.
pub const SOURCE_RANGES_ENFORCED: &str = "SourceRangesEnforced";

/// `served`: the Service has an address, so its listeners exist to
/// enforce them on.
fn source_ranges_condition(
    options: &RouteOptions,
    refused: Option<&str>,
    served: bool,
) -> Option<Condition> {
    if let Some(why) = refused {
        return Some(Condition::new(
            SOURCE_RANGES_ENFORCED,
            false,
            "InvalidSourceRanges",
            format!("{why}: the Service is not served rather than served to every client"),
        ));
    }
    let ranges = options.source_ranges.as_ref().filter(|_| served)?;
    let nets: Vec<String> = ranges.networks().iter().map(|n| n.to_string()).collect();
    Some(Condition::new(
        SOURCE_RANGES_ENFORCED,
        true,
        "Enforced",
        format!(
            "only clients in {} reach its listeners; others are refused at accept (TCP) or dropped (UDP)",
            nets.join(", ")
        ),
    ))
}

fn age<'a>(c: &'a Candidate<'_>) -> (bool, Option<&'a k8s_openapi::jiff::Timestamp>, &'a NsName) {
    (c.created.is_none(), c.created, &c.holder)
}

/// A Gateway's claim: its L4 listeners' sockets on one address of its
/// namespace's pool, as a Service's ports.
fn gateway_candidate<'s>(
    config: &L4Config,
    tenancy: &Tenancy<'_>,
    plan: super::gateway::Plan<'s>,
) -> Candidate<'s> {
    let mut refused = None;
    let pool = match tenancy.get(&plan.id.namespace) {
        Some(t) => {
            let pool = t.tenant.spec.l4.as_ref().and_then(|l| l.pool.clone());
            if pool.is_none() {
                refused = Some((
                    "NoPool",
                    format!(
                        "Tenant {} has no spec.l4.pool: its Gateways get no address of their own (TCP, UDP and TLS listeners, HTTP and HTTPS ones on their own address)",
                        t.cluster
                    ),
                ));
            }
            pool
        }
        None => Some(config.default_pool.clone()),
    };
    let ports: Vec<(u16, Protocol, &'s str)> = super::gateway::ports(&plan.listeners)
        .into_iter()
        .map(|(p, proto)| (p, proto, ""))
        .collect();
    if ports.is_empty() && refused.is_none() {
        refused = Some((
            "NoPorts",
            "no listener of the Gateway can be served on its address".to_string(),
        ));
    }
    let requested = match requested_addresses(plan.gateway) {
        // A tenant names no address, as on a Service (the webhook refuses
        // it): claims share an address when their ports differ, so a
        // named one could be another tenant's VIP.
        Ok(named) if !named.is_empty() && tenancy.get(&plan.id.namespace).is_some() => {
            refused.get_or_insert((
                "InvalidAddress",
                "spec.addresses: a tenant's Gateway gets any address of its pool; leave the value empty"
                    .to_string(),
            ));
            None
        }
        Ok(named) => match gateway_request(config, pool.as_deref(), &named) {
            Ok(ip) => ip,
            Err(why) => {
                refused.get_or_insert(why);
                None
            }
        },
        Err(why) => {
            refused.get_or_insert(("InvalidAddress", why));
            None
        }
    };
    let counted = plan
        .listeners
        .iter()
        .filter(|l| l.problem.is_none())
        .count() as u32;
    Candidate {
        id: plan.id,
        holder: super::allocation::holder_key(plan.id),
        created: plan
            .gateway
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| &t.0),
        counted,
        hint: super::gateway::status_holding(plan.gateway),
        owner: Owner::Gateway(plan),
        pool,
        ports,
        requested,
        families: Vec::new(),
        policy: FamilyPolicy::SingleStack,
        options: RouteOptions {
            // Gateway listeners have no source ranges in the Gateway API.
            source_ranges: None,
            proxy_protocol: false,
            tcp_idle_timeout: config.tcp_idle_timeout,
            udp_idle_timeout: config.udp_idle_timeout,
            health: config.health,
        },
        problems: Vec::new(),
        refused,
        ranges_refused: None,
    }
}

/// At most this many `spec.addresses` entries are read: each named one
/// is checked against the pool, so the list is bounded before that work.
const MAX_GATEWAY_ADDRESSES: usize = 16;

/// The addresses `spec.addresses` names, distinct, in order: none for any
/// of the pool's (no entry, or `IPAddress` entries with empty values).
/// More than [`MAX_GATEWAY_ADDRESSES`] entries, another type or a value
/// that is not an IP address is refused (the specification's
/// `AddressNotAssigned`).
fn requested_addresses(gateway: &teapot_gateway_api::Gateway) -> Result<Vec<IpAddr>, String> {
    let addresses = gateway.spec.addresses.as_deref().unwrap_or_default();
    if addresses.len() > MAX_GATEWAY_ADDRESSES {
        return Err(format!(
            "spec.addresses: {} entries, at most {MAX_GATEWAY_ADDRESSES}",
            addresses.len()
        ));
    }
    let mut named = Vec::new();
    for (i, one) in addresses.iter().enumerate() {
        let kind = one.r#type.as_deref().unwrap_or("IPAddress");
        if kind != "IPAddress" {
            return Err(format!(
                "spec.addresses[{i}].type: {kind} is not served; an IPAddress from the pool is"
            ));
        }
        match one.value.as_deref().unwrap_or("") {
            "" => {}
            text => {
                let ip: IpAddr = text.parse().map_err(|_| {
                    format!("spec.addresses[{i}].value: {text:?} is not an IP address")
                })?;
                if !named.contains(&ip) {
                    named.push(ip);
                }
            }
        }
    }
    Ok(named)
}

/// The one address a Gateway's claim asks for, from the addresses its
/// `spec.addresses` names (`named`): the allocation then refuses one that
/// is taken. teapot binds a Gateway to one address, so several are
/// refused whole, an address outside the Gateway's pool first
/// (`AddressNotInPool`, which the Gateway reports as `AddressNotUsable`):
/// the one to remove is named.
fn gateway_request(
    config: &L4Config,
    pool: Option<&str>,
    named: &[IpAddr],
) -> Result<Option<IpAddr>, (&'static str, String)> {
    match named {
        [] => Ok(None),
        [one] => Ok(Some(*one)),
        several => {
            let pool = config.pools.iter().find(|p| Some(p.name.as_str()) == pool);
            let outside: Vec<String> = several
                .iter()
                .filter(|ip| pool.is_some_and(|p| !p.contains(**ip)))
                .map(ToString::to_string)
                .collect();
            if !outside.is_empty() {
                return Err((
                    "AddressNotInPool",
                    format!(
                        "spec.addresses: {} not in address pool {:?}",
                        outside.join(", "),
                        pool.map(|p| p.name.as_str()).unwrap_or_default()
                    ),
                ));
            }
            Err((
                "AddressNotAssigned",
                format!(
                    "spec.addresses names {} addresses; teapot serves a Gateway on one",
                    several.len()
                ),
            ))
        }
    }
}

fn candidate<'s>(
    config: &L4Config,
    tenancy: &Tenancy<'_>,
    id: &'s NsName,
    service: &'s CompactService,
) -> Candidate<'s> {
    let spec = service.spec.as_ref();
    let mut problems = Vec::new();
    let mut refused = None;
    let pool = match tenancy.get(&id.namespace) {
        Some(t) => {
            let pool = t.tenant.spec.l4.as_ref().and_then(|l| l.pool.clone());
            if pool.is_none() {
                refused = Some((
                    "NoPool",
                    format!(
                        "Tenant {} has no spec.l4.pool: its LoadBalancer Services get no address",
                        t.cluster
                    ),
                ));
            }
            pool
        }
        None => Some(config.default_pool.clone()),
    };
    let mut ports: Vec<(u16, Protocol, &str)> = Vec::new();
    for (i, p) in spec
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let protocol = match Protocol::from_service(p.protocol.as_deref()) {
            Ok(proto) => proto,
            Err(why) => {
                problems.push(format!("spec.ports[{i}].protocol: {why}; port skipped"));
                continue;
            }
        };
        let Ok(port) = u16::try_from(p.port) else {
            continue;
        };
        if port == 0 || ports.iter().any(|(q, pr, _)| *q == port && *pr == protocol) {
            continue;
        }
        ports.push((port, protocol, p.name.as_deref().unwrap_or("")));
    }
    if ports.is_empty() && refused.is_none() {
        refused = Some(("NoPorts", "the Service has no TCP or UDP port".to_string()));
    }
    let requested = match spec.and_then(|s| s.load_balancer_ip()) {
        None | Some("") => None,
        Some(text) => match text.parse() {
            Ok(ip) => Some(ip),
            Err(_) => {
                refused.get_or_insert((
                    "InvalidAddress",
                    format!("spec.loadBalancerIP {text:?} is not an IP address"),
                ));
                None
            }
        },
    };
    let hint = status_holding(service);
    let (families, policy) = families(service, &mut problems);
    let mut options = route_options(config, service, &mut problems);
    // A restriction that cannot be read is not served without: the
    // Service gets no listener at all (the webhook refuses such a list for
    // tenants; this holds for operator namespaces and older objects).
    let mut ranges_refused = None;
    match spec.and_then(|s| s.load_balancer_source_ranges()) {
        None | Some([]) => {}
        Some(list) => match teapot_api::admission::source_ranges(list) {
            Ok(nets) => options.source_ranges = Some(Arc::new(SourceRanges::new(nets))),
            Err(violations) => {
                let why: Vec<String> = violations.iter().map(|v| v.to_string()).collect();
                let why = why.join("; ");
                ranges_refused = Some(why.clone());
                refused = Some(("InvalidSourceRanges", why));
            }
        },
    }
    Candidate {
        id,
        owner: Owner::Service,
        holder: id.clone(),
        created: service.metadata.creation_timestamp.as_ref().map(|t| &t.0),
        counted: ports.len() as u32,
        pool,
        ports,
        requested,
        hint,
        families,
        policy,
        options,
        problems,
        refused,
        ranges_refused,
    }
}

/// What `status.loadBalancer` says the Service holds: its addresses (one,
/// or one of each family), and on each the ports written there without an
/// error (teapot writes both; a status without ports tells the address
/// only).
fn status_holding(service: &CompactService) -> Option<super::allocation::Holding> {
    let ingress = service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?;
    let mut addresses: Vec<super::allocation::HeldAddress> = Vec::new();
    for entry in ingress {
        let Some(addr) = entry.ip.as_deref().and_then(|ip| ip.parse().ok()) else {
            continue;
        };
        if addresses.iter().any(|a| a.addr == addr) {
            continue;
        }
        let ports = entry.ports.as_ref().filter(|p| !p.is_empty()).map(|ports| {
            ports
                .iter()
                .filter(|p| p.error.is_none())
                .filter_map(|p| {
                    let port = u16::try_from(p.port).ok()?;
                    Some((port, Protocol::from_service(Some(&p.protocol)).ok()?))
                })
                .collect()
        });
        addresses.push(super::allocation::HeldAddress { addr, ports });
    }
    (!addresses.is_empty()).then_some(super::allocation::Holding { addresses })
}

/// How many addresses a Service asks for, and of which families: the
/// annotations when set (the agent writes them on a tenant Service's LB
/// copy; an operator Service may set them to ask for a family its LB
/// cluster's API server would not admit in the spec), else the spec
/// (where the LB cluster's API server may have defaulted them to its own
/// family). A value that cannot be read is reported and the spec used
/// instead.
fn families(service: &CompactService, problems: &mut Vec<String>) -> (Vec<Family>, FamilyPolicy) {
    let spec = service.spec.as_ref();
    let mut annotation = |key: &str| -> Option<&'static str> {
        let value = service.metadata.annotations.as_ref()?.get(key)?;
        match annotations::parse(ObjectKind::Service, key, value) {
            Ok(AnnotationValue::Word(w)) => Some(w),
            Ok(_) => None,
            Err(e) => {
                problems.push(format!("metadata.annotations[{key:?}]: {e}"));
                None
            }
        }
    };
    let listed = annotation(annotations::IP_FAMILIES);
    let asked = annotation(annotations::IP_FAMILY_POLICY);
    let mut families = Vec::new();
    let mut add = |name: &str, field: &str| match Family::parse(name) {
        Some(f) if !families.contains(&f) => families.push(f),
        Some(_) => {}
        None => problems.push(format!("{field}: {name:?} is not IPv4 or IPv6")),
    };
    match listed {
        Some(list) => list
            .split(',')
            .for_each(|f| add(f, annotations::IP_FAMILIES)),
        None => spec
            .and_then(|s| s.ip_families.as_ref())
            .into_iter()
            .flatten()
            .for_each(|f| add(f, "spec.ipFamilies")),
    }
    let policy = match asked {
        Some(p) => FamilyPolicy::parse(p),
        None => spec
            .and_then(|s| s.ip_family_policy.as_deref())
            .and_then(|p| {
                let parsed = FamilyPolicy::parse(p);
                if parsed.is_none() {
                    problems.push(format!(
                        "spec.ipFamilyPolicy: {p:?} is not SingleStack, PreferDualStack or RequireDualStack"
                    ));
                }
                parsed
            }),
    };
    (families, policy.unwrap_or_default())
}

/// Reads the L4 annotations; a bad value keeps the default and is
/// reported (the webhook refuses it for tenants before it gets here).
fn route_options(
    config: &L4Config,
    service: &CompactService,
    problems: &mut Vec<String>,
) -> RouteOptions {
    let mut o = RouteOptions {
        source_ranges: None,
        proxy_protocol: false,
        tcp_idle_timeout: config.tcp_idle_timeout,
        udp_idle_timeout: config.udp_idle_timeout,
        health: config.health,
    };
    for (key, value) in service.metadata.annotations.iter().flatten() {
        let known = matches!(
            key,
            "teapot.dev/proxy-protocol"
                | "teapot.dev/udp-idle-timeout"
                | "teapot.dev/tcp-idle-timeout"
                | "teapot.dev/health-check-interval"
                | "teapot.dev/health-check-unhealthy-threshold"
                | "teapot.dev/health-check-healthy-threshold"
        );
        if !known {
            continue;
        }
        match annotations::parse(ObjectKind::Service, key, value) {
            Ok(v) => match (key, v) {
                ("teapot.dev/proxy-protocol", AnnotationValue::Word("v2")) => {
                    o.proxy_protocol = true
                }
                ("teapot.dev/udp-idle-timeout", AnnotationValue::Duration(d)) => {
                    o.udp_idle_timeout = d
                }
                ("teapot.dev/tcp-idle-timeout", AnnotationValue::Duration(d)) => {
                    o.tcp_idle_timeout = d
                }
                ("teapot.dev/health-check-interval", AnnotationValue::Duration(d)) => {
                    o.health.interval = d
                }
                ("teapot.dev/health-check-unhealthy-threshold", AnnotationValue::Count(n)) => {
                    o.health.unhealthy_threshold = n
                }
                ("teapot.dev/health-check-healthy-threshold", AnnotationValue::Count(n)) => {
                    o.health.healthy_threshold = n
                }
                _ => {}
            },
            Err(e) => problems.push(format!("metadata.annotations[{key:?}]: {e}")),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::CompileOptions;
    use crate::compile::l4::L4Inputs;
    use crate::compile::snapshot::Snapshot;
    use crate::compile::tests::compile_test_docs;

    const TENANTS: &str = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec:
  cluster: acme
  nodeCIDRs: [10.1.0.0/24]
  l4: {pool: edge, maxListeners: 2}
---
apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: beta}
spec:
  cluster: beta
  nodeCIDRs: [10.2.0.0/24]
";

    fn service(ns: &str, name: &str, class: &str, ports: &str, annotations: &str) -> String {
        let class = if class.is_empty() {
            String::new()
        } else {
            format!("  loadBalancerClass: {class}\n")
        };
        format!(
            "apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: {ns}
  annotations: {{{annotations}}}
spec:
  type: LoadBalancer
{class}  ports: {ports}
"
        )
    }

    fn slice(ns: &str, service: &str, ports: &str, ips: &[&str]) -> String {
        let endpoints: Vec<String> = ips
            .iter()
            .map(|ip| format!("{{addresses: [\"{ip}\"]}}"))
            .collect();
        format!(
            "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {service}-1, namespace: {ns}, labels: {{kubernetes.io/service-name: {service}}}}}
addressType: IPv4
ports: {ports}
endpoints: [{}]
",
            endpoints.join(", ")
        )
    }

    /// A first compile: nothing held before, no listener bound yet.
    fn compile_with(config: L4Config, docs: &[String]) -> Snapshot {
        let options = CompileOptions {
            l4: Some(L4Inputs {
                config: Arc::new(config),
                previous: Arc::default(),
                runtime: Arc::default(),
            }),
            ..CompileOptions::default()
        };
        compile_test_docs(docs, &options)
    }

    fn config() -> L4Config {
        L4Config {
            pools: vec![
                "default=127.0.0.1".parse().unwrap(),
                "edge=192.0.2.10,192.0.2.11".parse().unwrap(),
            ],
            ..L4Config::default()
        }
    }

    fn report<'a>(s: &'a Snapshot, ns: &str, name: &str) -> &'a ServiceReport {
        s.report
            .l4
            .as_ref()
            .unwrap()
            .services
            .iter()
            .find(|r| r.namespace == ns && r.name == name)
            .unwrap_or_else(|| panic!("{ns}/{name} not reported"))
    }

    fn allocated(r: &ServiceReport) -> &Condition {
        r.conditions
            .iter()
            .find(|c| c.type_ == "Allocated")
            .unwrap()
    }

    fn table(s: &Snapshot) -> Arc<L4Table> {
        s.l4.as_ref().expect("L4 compiled").table.clone()
    }

    #[test]
    fn tenants_use_their_pool_their_cap_and_the_endpoint_rules() {
        let dns_ports =
            "[{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]";
        let s = compile_with(
            config(),
            &[
                TENANTS.into(),
                service("tenant-acme", "dns", LOAD_BALANCER_CLASS, dns_ports, ""),
                slice(
                    "tenant-acme",
                    "dns",
                    "[{name: dns, port: 30053, protocol: UDP}, {name: dns-tcp, port: 30054, protocol: TCP}]",
                    &["10.1.0.5", "127.0.0.1"],
                ),
                service(
                    "tenant-acme",
                    "game",
                    LOAD_BALANCER_CLASS,
                    "[{name: game, port: 7777, protocol: UDP}]",
                    "",
                ),
                service("tenant-beta", "x", LOAD_BALANCER_CLASS, "[{port: 80}]", ""),
                service("tenant-beta", "classless", "", "[{port: 81}]", ""),
                service("ops", "db", "", "[{port: 5432}]", ""),
                slice("ops", "db", "[{port: 5432}]", &["127.0.0.1"]),
                service("ops", "foreign", "example.com/lb", "[{port: 81}]", ""),
            ],
        );
        let dns = report(&s, "tenant-acme", "dns");
        assert_eq!(dns.address, Some("192.0.2.10".parse().unwrap()));
        assert_eq!(dns.pool.as_deref(), Some("edge"));
        assert_eq!(dns.listeners.len(), 2);
        for l in &dns.listeners {
            // Loopback is refused in a tenant namespace; the node address
            // passes.
            assert_eq!(l.endpoints.len(), 1, "{l:?}");
            assert!(l.endpoints[0].starts_with("10.1.0.5:"), "{l:?}");
        }
        let ready = dns
            .conditions
            .iter()
            .find(|c| c.type_ == "BackendsReady")
            .unwrap();
        assert!(ready.message.contains("loopback"), "{ready:?}");
        let ingress = &dns.status.ingress.as_ref().unwrap()[0];
        assert_eq!(ingress.ip.as_deref(), Some("192.0.2.10"));
        assert_eq!(ingress.ports.as_ref().unwrap().len(), 2);

        let game = allocated(report(&s, "tenant-acme", "game"));
        assert_eq!((game.status, game.reason), ("False", "ListenerLimit"));
        assert!(game.message.contains("maxListeners = 2"), "{game:?}");
        let beta = allocated(report(&s, "tenant-beta", "x"));
        assert_eq!((beta.status, beta.reason), ("False", "NoPool"));

        let db = report(&s, "ops", "db");
        assert_eq!(db.address, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(db.listeners[0].endpoints, ["127.0.0.1:5432"]);
        for name in ["foreign", "classless"] {
            let served = s
                .report
                .l4
                .as_ref()
                .unwrap()
                .services
                .iter()
                .any(|r| r.name == name);
            assert!(
                !served,
                "{name}: another class, or none in a tenant namespace"
            );
        }

        let t = table(&s);
        let keys: Vec<String> = t.listeners.keys().map(|k| k.to_string()).collect();
        assert_eq!(
            keys,
            [
                "127.0.0.1:5432/TCP",
                "192.0.2.10:53/TCP",
                "192.0.2.10:53/UDP"
            ]
        );
        let json = serde_json::to_value(&s.report).unwrap();
        assert_eq!(
            json["l4"]["services"][1]["listeners"][0]["state"],
            "pending"
        );
    }

    /// `ipFamilyPolicy`/`ipFamilies` (or the agent's annotations, which
    /// win over a spec the LB cluster's API server defaulted): an address
    /// of each family, every port listening on both, both in the status
    /// primary first, one upstream per port; RequireDualStack on a pool
    /// of one family serves nothing.
    #[test]
    fn dual_stack_services_listen_on_an_address_of_each_family() {
        let config = L4Config {
            pools: vec![
                "default=192.0.2.10,2001:db8::10".parse().unwrap(),
                "edge=198.51.100.10".parse().unwrap(),
            ],
            ..L4Config::default()
        };
        let ports = "[{name: dns, port: 53, protocol: UDP}, {name: web, port: 80}]";
        let with_spec = |name: &str, policy: &str, families: &str| {
            format!(
                "{}  ipFamilyPolicy: {policy}\n  ipFamilies: {families}\n",
                service("ops", name, "", ports, "")
            )
        };
        let s = compile_with(
            config,
            &[
                TENANTS.into(),
                with_spec("db", "PreferDualStack", "[IPv6, IPv4]"),
                slice(
                    "ops",
                    "db",
                    "[{name: dns, port: 5353, protocol: UDP}, {name: web, port: 8080}]",
                    &["127.0.0.1"],
                ),
                // The LB cluster defaulted the spec to its single family;
                // the agent's annotations say what the tenant asked.
                with_spec("defaulted", "SingleStack", "[IPv4]").replace(
                    "annotations: {}",
                    "annotations: {teapot.dev/ip-family-policy: PreferDualStack, teapot.dev/ip-families: \"IPv4,IPv6\"}",
                ),
                service(
                    "tenant-acme",
                    "strict",
                    LOAD_BALANCER_CLASS,
                    "[{port: 5432}]",
                    "teapot.dev/ip-family-policy: RequireDualStack, teapot.dev/ip-families: \"IPv4,IPv6\"",
                ),
                // Sorted first (no creation times, by name): other ports.
                with_spec("bad", "SingleStack", "[IPv7]").replace(ports, "[{port: 81}]"),
            ],
        );
        let db = report(&s, "ops", "db");
        let both: Vec<IpAddr> = vec![
            "2001:db8::10".parse().unwrap(),
            "192.0.2.10".parse().unwrap(),
        ];
        assert_eq!(db.addresses, both);
        assert_eq!(db.address, Some(both[0]));
        let ingress = db.status.ingress.as_ref().unwrap();
        let ips: Vec<&str> = ingress.iter().map(|i| i.ip.as_deref().unwrap()).collect();
        assert_eq!(ips, ["2001:db8::10", "192.0.2.10"]);
        assert!(ingress.iter().all(|i| i.ports.as_ref().unwrap().len() == 2));
        assert_eq!(db.listeners.len(), 4);
        let t = table(&s);
        let of = |key: &str| {
            t.listeners
                .iter()
                .find(|(k, _)| k.to_string() == key)
                .unwrap_or_else(|| panic!("{key} in {:?}", t.listeners.keys()))
                .1
                .clone()
        };
        let (v6, v4) = (of("[2001:db8::10]:53/UDP"), of("192.0.2.10:53/UDP"));
        assert!(
            Arc::ptr_eq(&v6.upstream, &v4.upstream),
            "one upstream per port"
        );
        assert_eq!(
            v4.upstream.endpoints.load()[0].addr.to_string(),
            "127.0.0.1:5353"
        );

        // Both addresses of the pool hold db's ports: the annotated
        // Service asking the same ports finds none free.
        let defaulted = allocated(report(&s, "ops", "defaulted"));
        assert_eq!(
            (defaulted.status, defaulted.reason),
            ("False", "PoolExhausted")
        );
        assert!(defaulted.message.contains("IPv4"), "{defaulted:?}");

        let strict = report(&s, "tenant-acme", "strict");
        let a = allocated(strict);
        assert_eq!((a.status, a.reason), ("False", "NoAddressOfFamily"));
        assert!(a.message.contains("\"edge\" holds no IPv6"), "{a:?}");
        assert!(strict.addresses.is_empty() && strict.listeners.is_empty());
        assert!(strict.status.ingress.is_none());
        assert!(!t.listeners.keys().any(|k| k.port == 5432), "fail closed");

        let bad = report(&s, "ops", "bad");
        let configured = condition(bad, "Configured").unwrap();
        assert!(
            configured.message.contains("spec.ipFamilies"),
            "{configured:?}"
        );
    }

    #[test]
    fn classless_services_follow_the_flag() {
        let docs = [service("ops", "db", "", "[{port: 5432}]", "")];
        let s = compile_with(config(), &docs);
        assert_eq!(s.report.l4.as_ref().unwrap().services.len(), 1);
        let s = compile_with(
            L4Config {
                serve_classless: false,
                ..config()
            },
            &docs,
        );
        assert!(s.report.l4.as_ref().unwrap().services.is_empty());
    }

    fn condition<'a>(r: &'a ServiceReport, type_: &str) -> Option<&'a Condition> {
        r.conditions.iter().find(|c| c.type_ == type_)
    }

    #[test]
    fn source_ranges_reach_every_listener_of_the_service_and_the_report() {
        let ranged = format!(
            "{}  loadBalancerSourceRanges: [\"198.51.100.7/24\", \"2001:db8::/32\"]\n",
            service(
                "ops",
                "db",
                "",
                "[{port: 5432}, {port: 5432, protocol: UDP}]",
                ""
            )
        );
        let s = compile_with(
            config(),
            &[ranged, service("ops", "open", "", "[{port: 80}]", "")],
        );
        let t = table(&s);
        let mut restricted = 0;
        for route in t.listeners.values() {
            match route.service.name.as_str() {
                "db" => {
                    let r = route.options.source_ranges.as_ref().expect("ranges");
                    assert!(r.admits("198.51.100.200".parse().unwrap()));
                    assert!(!r.admits("127.0.0.1".parse().unwrap()));
                    restricted += 1;
                }
                _ => assert_eq!(route.options.source_ranges, None, "no list: everyone"),
            }
        }
        assert_eq!(restricted, 2, "the TCP and the UDP listener");
        let db = condition(report(&s, "ops", "db"), SOURCE_RANGES_ENFORCED).unwrap();
        assert_eq!((db.status, db.reason), ("True", "Enforced"));
        assert!(
            db.message.contains("198.51.100.0/24, 2001:db8::/32"),
            "{db:?}"
        );
        assert!(condition(report(&s, "ops", "open"), SOURCE_RANGES_ENFORCED).is_none());
    }

    #[test]
    fn unreadable_source_ranges_keep_the_service_from_being_served() {
        let bad = format!(
            "{}  loadBalancerSourceRanges: [10.0.0.0/8, office]\n",
            service("ops", "db", "", "[{port: 5432}]", "")
        );
        let s = compile_with(config(), &[bad]);
        assert!(
            table(&s).listeners.is_empty(),
            "no listener without its ranges"
        );
        let r = report(&s, "ops", "db");
        assert_eq!(r.address, None);
        let a = allocated(r);
        assert_eq!((a.status, a.reason), ("False", "InvalidSourceRanges"));
        let c = condition(r, SOURCE_RANGES_ENFORCED).unwrap();
        assert_eq!((c.status, c.reason), ("False", "InvalidSourceRanges"));
        assert!(
            c.message.contains("spec.loadBalancerSourceRanges[1]"),
            "{c:?}"
        );
    }

    #[test]
    fn annotations_set_route_options_and_bad_values_are_reported() {
        let s = compile_with(
            config(),
            &[service(
                "ops",
                "db",
                "",
                "[{port: 5432}, {port: 5433, protocol: SCTP}]",
                "teapot.dev/proxy-protocol: v2, teapot.dev/udp-idle-timeout: 5s, teapot.dev/health-check-unhealthy-threshold: \"4\", teapot.dev/tcp-idle-timeout: forever",
            )],
        );
        let route = table(&s).listeners.values().next().unwrap().clone();
        assert!(route.options.proxy_protocol);
        assert_eq!(route.options.udp_idle_timeout, Duration::from_secs(5));
        assert_eq!(route.options.health.unhealthy_threshold, 4);
        assert_eq!(
            route.options.tcp_idle_timeout,
            L4Config::default().tcp_idle_timeout
        );
        let r = report(&s, "ops", "db");
        let configured = r
            .conditions
            .iter()
            .find(|c| c.type_ == "Configured")
            .unwrap();
        assert!(
            configured.message.contains("tcp-idle-timeout"),
            "{configured:?}"
        );
        assert!(configured.message.contains("SCTP"), "{configured:?}");
        assert_eq!(r.listeners.len(), 1);
    }
}
