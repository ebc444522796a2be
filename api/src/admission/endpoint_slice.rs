//! EndpointSlice rules.

use std::net::IpAddr;

use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::meta::{check_label_names_local, check_metadata};
use super::service::{check_app_protocol, check_protocol};
use super::strings::key_field;
use super::{
    AdmissionContext, MANAGED_BY_LABEL, MANAGED_BY_SYNC, MAX_ADDRESSES_PER_ENDPOINT, MAX_PORTS,
    SLICES_PER_SERVICE, Violation, check_endpoint_address, quote,
};
use crate::annotations::ObjectKind;
use crate::names::SERVICE_NAME_LABEL;

/// Checks an EndpointSlice a tenant writes into `namespace`: it belongs to
/// a Service of the namespace and was written by the agent; IP addresses
/// only (no FQDN), each allowed by [`check_endpoint_address`]; ports in
/// range; endpoints and slices within the tenant's limits.
pub fn check_endpoint_slice(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    slice: &EndpointSlice,
) -> Vec<Violation> {
    let mut out = Vec::new();
    check_metadata(
        ctx,
        namespace,
        &slice.metadata,
        ObjectKind::EndpointSlice,
        &mut out,
    );
    out.extend(ctx.over_limit(
        |e| e.endpoint_slices,
        ctx.limits.max_services.saturating_mul(SLICES_PER_SERVICE),
        "EndpointSlices",
        "maxServices x 10",
    ));
    let labels = slice.metadata.labels.as_ref();
    check_label_names_local(labels, SERVICE_NAME_LABEL, &mut out);
    if labels
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .map(String::as_str)
        != Some(MANAGED_BY_SYNC)
    {
        out.push(Violation::new(
            key_field("metadata.labels", MANAGED_BY_LABEL),
            format!(
                "must be {MANAGED_BY_SYNC:?}: tenant EndpointSlices are written by the teapot agent"
            ),
        ));
    }
    let v6 = match slice.address_type.as_str() {
        "IPv4" => false,
        "IPv6" => true,
        "FQDN" => {
            out.push(Violation::new(
                "addressType",
                "FQDN endpoints are refused: a DNS name can point anywhere; use IPv4 or IPv6 addresses of your nodes",
            ));
            return out;
        }
        other => {
            out.push(Violation::new(
                "addressType",
                format!("{} is not IPv4 or IPv6", quote(other)),
            ));
            return out;
        }
    };
    let ports = slice.ports.as_deref().unwrap_or_default();
    if ports.len() > MAX_PORTS {
        out.push(Violation::new(
            "ports",
            format!("{} ports, more than {MAX_PORTS}", ports.len()),
        ));
    }
    for (i, p) in ports.iter().enumerate() {
        match p.port {
            Some(n) if (1..=65535).contains(&n) => {}
            Some(n) => out.push(Violation::new(
                format!("ports[{i}].port"),
                format!("{n} is not a port (1-65535)"),
            )),
            None => out.push(Violation::new(
                format!("ports[{i}].port"),
                "a port number is required (an unset port would mean every port)",
            )),
        }
        check_protocol(
            p.protocol.as_deref(),
            &format!("ports[{i}].protocol"),
            &mut out,
        );
        check_app_protocol(
            p.app_protocol.as_deref(),
            &format!("ports[{i}].appProtocol"),
            &mut out,
        );
    }
    let endpoints = slice.endpoints.as_deref().unwrap_or_default();
    let max = ctx.limits.max_endpoints_per_slice as usize;
    if endpoints.len() > max {
        out.push(Violation::new(
            "endpoints",
            format!(
                "{} endpoints, more than the limit (maxEndpointsPerSlice = {max})",
                endpoints.len()
            ),
        ));
    }
    for (i, e) in endpoints.iter().enumerate() {
        if e.addresses.is_empty() || e.addresses.len() > MAX_ADDRESSES_PER_ENDPOINT {
            out.push(Violation::new(
                format!("endpoints[{i}].addresses"),
                format!("an endpoint has 1 to {MAX_ADDRESSES_PER_ENDPOINT} addresses"),
            ));
        }
        for (j, a) in e.addresses.iter().enumerate() {
            let field = format!("endpoints[{i}].addresses[{j}]");
            let ip = match a.parse::<IpAddr>() {
                Ok(ip) if ip.is_ipv6() == v6 => ip,
                Ok(_) => {
                    out.push(Violation::new(
                        field,
                        format!("{} is not an {} address", quote(a), slice.address_type),
                    ));
                    continue;
                }
                Err(_) => {
                    out.push(Violation::new(
                        field,
                        format!("{} is not an IP address", quote(a)),
                    ));
                    continue;
                }
            };
            if let Err(e) = check_endpoint_address(ctx, ip) {
                out.push(Violation::new(field, e));
            }
        }
        if let Some(target) = &e.target_ref
            && target
                .namespace
                .as_deref()
                .is_some_and(|ns| ns != namespace)
        {
            out.push(Violation::new(
                format!("endpoints[{i}].targetRef.namespace"),
                "must be this namespace",
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn check(body: &str) -> Vec<String> {
        let f = Fixture::new();
        fields(&check_endpoint_slice(&f.ctx(), NS, &endpoint_slice(body)))
    }

    #[test]
    fn good_slices() {
        assert!(check("addressType: IPv4\nports: [{port: 30080, protocol: TCP, name: http}]\nendpoints:\n- addresses: [10.1.0.5]\n  conditions: {ready: true}\n- addresses: [10.1.0.6]\n").is_empty());
        assert!(check("addressType: IPv6\nports: [{port: 30080}]\nendpoints:\n- addresses: [\"fd00:1::5\"]\n").is_empty());
    }

    #[test]
    fn addresses_outside_the_tenant() {
        assert_eq!(
            check(
                "addressType: IPv4\nports: [{port: 80}]\nendpoints:\n- addresses: [127.0.0.1]\n- addresses: [169.254.169.254]\n- addresses: [10.2.0.5]\n- addresses: [10.96.0.1]\n- addresses: [\"fd00:1::5\"]\n- addresses: [\"not-an-ip\"]\n"
            ),
            [
                "endpoints[0].addresses[0]",
                "endpoints[1].addresses[0]",
                "endpoints[2].addresses[0]",
                "endpoints[3].addresses[0]",
                "endpoints[4].addresses[0]",
                "endpoints[5].addresses[0]",
            ]
        );
        assert_eq!(
            check("addressType: FQDN\nendpoints:\n- addresses: [metadata.google.internal]\n"),
            ["addressType"]
        );
    }

    /// A dual-stack tenant's IPv6 slice meets the same rules in its
    /// family: inside the Tenant's IPv6 nodeCIDRs, never loopback,
    /// link-local, outside its ranges or an IPv4 address.
    #[test]
    fn ipv6_addresses_outside_the_tenant() {
        assert_eq!(
            check(
                "addressType: IPv6\nports: [{port: 30080}]\nendpoints:\n- addresses: [\"fd00:1::5\"]\n- addresses: [\"::1\"]\n- addresses: [\"fe80::1\"]\n- addresses: [\"fd00:2::5\"]\n- addresses: [10.1.0.5]\n"
            ),
            [
                "endpoints[1].addresses[0]",
                "endpoints[2].addresses[0]",
                "endpoints[3].addresses[0]",
                "endpoints[4].addresses[0]",
            ]
        );
    }

    #[test]
    fn ports_and_labels() {
        assert_eq!(
            check(
                "addressType: IPv4\nports: [{port: 0}, {name: all}, {port: 80, protocol: SCTP}]\nendpoints: []\n"
            ),
            ["ports[0].port", "ports[1].port", "ports[2].protocol"]
        );
        let f = Fixture::new();
        let mut slice = endpoint_slice("addressType: IPv4\nendpoints: []\n");
        slice.metadata.labels = None;
        assert_eq!(
            fields(&check_endpoint_slice(&f.ctx(), NS, &slice)),
            [
                r#"metadata.labels["kubernetes.io/service-name"]"#,
                r#"metadata.labels["endpointslice.kubernetes.io/managed-by"]"#
            ]
        );
    }
}
