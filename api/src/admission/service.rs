//! Service rules.

use ipnet::{IpNet, Ipv4Net};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::meta::check_metadata;
use super::names::port_name;
use super::{AdmissionContext, MAX_PORTS, Violation, quote};
use crate::annotations::ObjectKind;
use crate::names::LOAD_BALANCER_CLASS;

/// `appProtocol` values teapot understands (on Service and EndpointSlice
/// ports).
pub(crate) const APP_PROTOCOLS: &[&str] = &[
    "http",
    "https",
    "h2c",
    "kubernetes.io/h2c",
    "kubernetes.io/ws",
    "kubernetes.io/wss",
];

/// Most entries of one Service's `spec.loadBalancerSourceRanges`. Matching
/// is a binary search, so the bound is on the object and the compile, not
/// on the per-connection check: 64 covers an organisation's offices and
/// VPN exits (AWS allows 60 rules per security group) while keeping one
/// Service's set under 2 KiB on every listener of every replica.
pub const MAX_SOURCE_RANGES: usize = 64;

const SOURCE_RANGES: &str = "spec.loadBalancerSourceRanges";

/// Reads `spec.loadBalancerSourceRanges` as the L4 plane enforces it: at
/// most [`MAX_SOURCE_RANGES`] entries, each `ADDRESS/PREFIX` (IPv4 or
/// IPv6; blanks around it ignored, as Kubernetes does), normalised: host
/// bits cleared (`10.1.2.3/8` is `10.0.0.0/8`, as Kubernetes reads it) and
/// an IPv4-mapped IPv6 network (`::ffff:10.0.0.0/104`) as the IPv4 network
/// it names, since the plane compares an IPv4 client in IPv4 whatever the
/// socket's family. Every bad entry is reported with its index; the count
/// is checked before any entry is parsed.
pub fn source_ranges(ranges: &[String]) -> Result<Vec<IpNet>, Vec<Violation>> {
    if ranges.len() > MAX_SOURCE_RANGES {
        return Err(vec![Violation::new(
            SOURCE_RANGES,
            format!(
                "{} entries, more than {MAX_SOURCE_RANGES}: merge them into wider networks",
                ranges.len()
            ),
        )]);
    }
    let mut nets = Vec::with_capacity(ranges.len());
    let mut out = Vec::new();
    for (i, text) in ranges.iter().enumerate() {
        match source_range(text) {
            Ok(net) => nets.push(net),
            Err(why) => out.push(Violation::new(format!("{SOURCE_RANGES}[{i}]"), why)),
        }
    }
    if out.is_empty() { Ok(nets) } else { Err(out) }
}

fn source_range(text: &str) -> Result<IpNet, String> {
    let trimmed = text.trim();
    let net: IpNet = match trimmed.parse() {
        Ok(net) => net,
        Err(_) if trimmed.parse::<std::net::IpAddr>().is_ok() => {
            return Err(format!(
                "{} is an address, not a network: write it with its prefix length (/32 or /128)",
                quote(text)
            ));
        }
        Err(_) => {
            return Err(format!(
                "{} is not an IPv4 or IPv6 network (ADDRESS/PREFIX, such as 192.0.2.0/24 or 2001:db8::/32)",
                quote(text)
            ));
        }
    };
    Ok(match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => IpNet::V4(
                Ipv4Net::new(v4, v6.prefix_len() - 96)
                    .expect("a prefix of at most 32")
                    .trunc(),
            ),
            None => net.trunc(),
        },
        _ => net.trunc(),
    })
}

/// Checks a Service a tenant writes into `namespace`: no selector (its
/// endpoints are the mirrored EndpointSlices), type `ClusterIP` or
/// `LoadBalancer` of class `teapot.dev/lb` without node ports; no
/// `ExternalName`, `NodePort`, `externalIPs` or `loadBalancerIP`; source
/// ranges only on a LoadBalancer Service, each a network, at most
/// [`MAX_SOURCE_RANGES`]; ports in range; Services and L4 listeners within
/// the tenant's limits.
pub fn check_service(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    service: &Service,
) -> Vec<Violation> {
    let mut out = Vec::new();
    check_metadata(
        ctx,
        namespace,
        &service.metadata,
        ObjectKind::Service,
        &mut out,
    );
    out.extend(ctx.over_limit(
        |e| e.services,
        ctx.limits.max_services,
        "Services",
        "maxServices",
    ));
    let Some(spec) = &service.spec else {
        return out;
    };
    let ty = spec.type_.as_deref().unwrap_or("ClusterIP");
    let lb = ty == "LoadBalancer";
    match ty {
        "ClusterIP" | "LoadBalancer" => {}
        "ExternalName" => out.push(Violation::new(
            "spec.type",
            "ExternalName Services are refused: they turn a DNS name into a backend, which could be anything",
        )),
        "NodePort" => out.push(Violation::new(
            "spec.type",
            "NodePort Services are refused: they would open ports on the LB cluster's nodes",
        )),
        other => out.push(Violation::new(
            "spec.type",
            format!("{} is not ClusterIP or LoadBalancer", quote(other)),
        )),
    }
    if spec.external_name.is_some() {
        out.push(Violation::new(
            "spec.externalName",
            "externalName is refused: backends are the endpoints of your nodes only",
        ));
    }
    if spec.selector.as_ref().is_some_and(|s| !s.is_empty()) {
        out.push(Violation::new(
            "spec.selector",
            "a Service in a tenant namespace has no selector: its endpoints are the EndpointSlices the agent mirrors (a selector would pick the LB cluster's own pods)",
        ));
    }
    if spec
        .external_ips
        .as_ref()
        .is_some_and(|ips| !ips.is_empty())
    {
        out.push(Violation::new(
            "spec.externalIPs",
            "externalIPs are refused: they let a Service capture traffic for any address (CVE-2020-8554)",
        ));
    }
    if spec
        .load_balancer_ip
        .as_ref()
        .is_some_and(|ip| !ip.is_empty())
    {
        out.push(Violation::new(
            "spec.loadBalancerIP",
            "addresses are allocated by teapot from your Tenant's pool; remove loadBalancerIP",
        ));
    }
    if lb {
        if spec.load_balancer_class.as_deref() != Some(LOAD_BALANCER_CLASS) {
            out.push(Violation::new(
                "spec.loadBalancerClass",
                format!("a LoadBalancer Service in a tenant namespace must have loadBalancerClass {LOAD_BALANCER_CLASS:?}"),
            ));
        }
        if spec.allocate_load_balancer_node_ports != Some(false) {
            out.push(Violation::new(
                "spec.allocateLoadBalancerNodePorts",
                "must be false: teapot listens itself, and node ports would open the LB cluster's nodes",
            ));
        }
        if spec.external_traffic_policy.as_deref() == Some("Local") {
            out.push(Violation::new(
                "spec.externalTrafficPolicy",
                "Local would allocate a health-check node port on the LB cluster; use Cluster (teapot passes the client address with teapot.dev/proxy-protocol)",
            ));
        }
    } else if spec.load_balancer_class.is_some() {
        out.push(Violation::new(
            "spec.loadBalancerClass",
            "only a LoadBalancer Service has a loadBalancerClass",
        ));
    }
    let ranges = spec
        .load_balancer_source_ranges
        .as_deref()
        .unwrap_or_default();
    if !ranges.is_empty() {
        if lb {
            if let Err(v) = source_ranges(ranges) {
                out.extend(v);
            }
        } else {
            // Kubernetes refuses it too; on a ClusterIP copy (an Ingress
            // backend) it would restrict nothing, and an access control
            // that is admitted but not served is worse than a refusal.
            out.push(Violation::new(
                SOURCE_RANGES,
                "only a LoadBalancer Service has source ranges: they restrict who reaches its L4 listeners",
            ));
        }
    }
    if spec.health_check_node_port.is_some_and(|p| p != 0) {
        out.push(Violation::new(
            "spec.healthCheckNodePort",
            "node ports on the LB cluster are refused",
        ));
    }
    let ports = spec.ports.as_deref().unwrap_or_default();
    if ports.len() > MAX_PORTS {
        out.push(Violation::new(
            "spec.ports",
            format!("{} ports, more than {MAX_PORTS}", ports.len()),
        ));
    }
    for (i, p) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        if !(1..=65535).contains(&p.port) {
            out.push(Violation::new(
                format!("{at}.port"),
                format!("{} is not a port (1-65535)", p.port),
            ));
        }
        if p.node_port.is_some_and(|n| n != 0) {
            out.push(Violation::new(
                format!("{at}.nodePort"),
                "node ports on the LB cluster are refused",
            ));
        }
        match &p.target_port {
            Some(IntOrString::Int(n)) if !(1..=65535).contains(n) => out.push(Violation::new(
                format!("{at}.targetPort"),
                format!("{n} is not a port (1-65535)"),
            )),
            Some(IntOrString::String(name)) => {
                if let Err(e) = port_name(name) {
                    out.push(Violation::new(format!("{at}.targetPort"), e));
                }
            }
            _ => {}
        }
        check_protocol(p.protocol.as_deref(), &format!("{at}.protocol"), &mut out);
        check_app_protocol(
            p.app_protocol.as_deref(),
            &format!("{at}.appProtocol"),
            &mut out,
        );
        if let Some(name) = &p.name
            && !name.is_empty()
            && let Err(e) = super::names::dns_label(name)
        {
            out.push(Violation::new(format!("{at}.name"), e));
        }
    }
    if lb && let Some(existing) = ctx.existing {
        let max = ctx.max_listeners();
        let total = existing.lb_listeners as usize + ports.len();
        if total > max as usize {
            out.push(Violation::new(
                "spec.ports",
                format!(
                    "your tenant would have {total} L4 listeners, more than the limit (l4.maxListeners = {max})"
                ),
            ));
        }
    }
    out
}

pub(crate) fn check_protocol(protocol: Option<&str>, field: &str, out: &mut Vec<Violation>) {
    if let Some(p) = protocol
        && p != "TCP"
        && p != "UDP"
    {
        out.push(Violation::new(
            field,
            format!("{} is not TCP or UDP", quote(p)),
        ));
    }
}

pub(crate) fn check_app_protocol(app: Option<&str>, field: &str, out: &mut Vec<Violation>) {
    if let Some(a) = app
        && !APP_PROTOCOLS.contains(&a)
    {
        out.push(Violation::new(
            field,
            format!("{} is not one of {}", quote(a), APP_PROTOCOLS.join(", ")),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::ExistingObjects;
    use super::super::testing::*;
    use super::*;

    fn check(spec: &str) -> Vec<String> {
        let f = Fixture::new();
        fields(&check_service(&f.ctx(), NS, &service(spec)))
    }

    #[test]
    fn plain_and_lb_services() {
        assert!(
            check("  ports: [{port: 80, targetPort: 30080, name: http, appProtocol: http}]\n")
                .is_empty()
        );
        assert!(check("  type: LoadBalancer\n  loadBalancerClass: teapot.dev/lb\n  allocateLoadBalancerNodePorts: false\n  ports: [{port: 53, protocol: UDP}]\n").is_empty());
    }

    #[test]
    fn dangerous_services() {
        assert_eq!(
            check("  type: ExternalName\n  externalName: metadata.google.internal\n"),
            ["spec.type", "spec.externalName"]
        );
        assert_eq!(
            check("  selector: {app: ingress-nginx}\n  ports: [{port: 80}]\n"),
            ["spec.selector"]
        );
        assert_eq!(
            check("  type: NodePort\n  ports: [{port: 80, nodePort: 30000}]\n"),
            ["spec.type", "spec.ports[0].nodePort"]
        );
        assert_eq!(
            check("  externalIPs: [8.8.8.8]\n  ports: [{port: 53}]\n"),
            ["spec.externalIPs"]
        );
        assert_eq!(
            check(
                "  type: LoadBalancer\n  loadBalancerIP: 1.2.3.4\n  externalTrafficPolicy: Local\n  ports: [{port: 80}]\n"
            ),
            [
                "spec.loadBalancerIP",
                "spec.loadBalancerClass",
                "spec.allocateLoadBalancerNodePorts",
                "spec.externalTrafficPolicy"
            ]
        );
        assert_eq!(
            check(
                "  ports: [{port: 0}, {port: 70000}, {port: 80, targetPort: 0}, {port: 81, protocol: SCTP}, {port: 82, appProtocol: \"nginx.org/snippet\"}]\n"
            ),
            [
                "spec.ports[0].port",
                "spec.ports[1].port",
                "spec.ports[2].targetPort",
                "spec.ports[3].protocol",
                "spec.ports[4].appProtocol"
            ]
        );
    }

    const LB: &str = "  type: LoadBalancer\n  loadBalancerClass: teapot.dev/lb\n  allocateLoadBalancerNodePorts: false\n  ports: [{port: 5432}]\n";

    #[test]
    fn source_ranges_are_networks_on_load_balancers_only() {
        assert!(
            check(&format!(
                "{LB}  loadBalancerSourceRanges: [198.51.100.0/24, \" 2001:db8::/32 \"]\n"
            ))
            .is_empty()
        );
        let f = Fixture::new();
        let v = check_service(
            &f.ctx(),
            NS,
            &service(&format!(
                "{LB}  loadBalancerSourceRanges: [10.0.0.0/8, 192.0.2.1, office, 10.0.0.0/33, \"\"]\n"
            )),
        );
        assert_eq!(
            fields(&v),
            [
                "spec.loadBalancerSourceRanges[1]",
                "spec.loadBalancerSourceRanges[2]",
                "spec.loadBalancerSourceRanges[3]",
                "spec.loadBalancerSourceRanges[4]"
            ]
        );
        assert!(v[0].message.contains("/32"), "{v:?}");
        assert!(v[1].message.contains("\"office\""), "{v:?}");
        // A ClusterIP Service would carry them to a copy nothing enforces
        // them on.
        assert_eq!(
            check("  ports: [{port: 80}]\n  loadBalancerSourceRanges: [10.0.0.0/8]\n"),
            ["spec.loadBalancerSourceRanges"]
        );
    }

    #[test]
    fn source_ranges_are_counted_before_they_are_parsed() {
        let many: Vec<String> = (0..=MAX_SOURCE_RANGES)
            .map(|i| format!("10.{i}.0.0/16"))
            .collect();
        let v = source_ranges(&many).unwrap_err();
        assert_eq!(fields(&v), ["spec.loadBalancerSourceRanges"]);
        assert!(v[0].message.contains("65 entries, more than 64"), "{v:?}");
        // The count alone decides: a hostile list of garbage is not parsed
        // entry by entry (one violation, not 65).
        let garbage = vec!["x".repeat(1000); MAX_SOURCE_RANGES + 1];
        assert_eq!(source_ranges(&garbage).unwrap_err().len(), 1);
        assert_eq!(source_ranges(&many[..MAX_SOURCE_RANGES]).unwrap().len(), 64);
    }

    #[test]
    fn source_ranges_are_normalised() {
        let nets = source_ranges(&[
            " 10.1.2.3/8".to_string(),
            "::ffff:192.0.2.128/121".to_string(),
            "2001:db8::1/32".to_string(),
            "::ffff:0:0/96".to_string(),
        ])
        .unwrap();
        let shown: Vec<String> = nets.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            shown,
            ["10.0.0.0/8", "192.0.2.128/25", "2001:db8::/32", "0.0.0.0/0"]
        );
    }

    #[test]
    fn listener_limit() {
        let mut f = Fixture::new();
        f.max_listeners(2);
        let ctx = f.ctx().with_existing(ExistingObjects {
            lb_listeners: 1,
            ..ExistingObjects::default()
        });
        let svc = service(
            "  type: LoadBalancer\n  loadBalancerClass: teapot.dev/lb\n  allocateLoadBalancerNodePorts: false\n  ports: [{port: 80}, {port: 443}]\n",
        );
        assert_eq!(fields(&check_service(&ctx, NS, &svc)), ["spec.ports"]);
    }
}
