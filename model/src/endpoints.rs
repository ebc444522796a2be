//! EndpointSlices as the proxy keeps them: a compact form made once, when
//! the slice is parsed, so one tenant's endpoints cost every replica
//! what they must and no more.
//!
//! A typed `EndpointSlice` costs about 950 bytes per endpoint in memory
//! (strings for each address, node name, zone, `targetRef`; a map per
//! endpoint's conditions), 6x its JSON. The proxy routes on the address,
//! the port and the `ready` condition only, so the stored form keeps per
//! endpoint one [`IpAddr`] per address and one byte of conditions: 19 bytes
//! for a one-address endpoint ([`CompactSlice::heap_bytes`] counts it).
//! Per slice it keeps the metadata as written in the form Services share
//! ([`crate::meta::CompactMeta`]: labels and annotations as a list rather
//! than the map's 540-byte node a single label costs) and the ports.
//!
//! What is dropped (`hostname`, `nodeName`, `zone`, `targetRef`, `hints`,
//! `deprecatedTopology`) is never read by teapot, but the proxy's second
//! check ([`crate::tenancy::admit`]) must still refuse what the webhook
//! refuses. So the rules that need no tenant are run on the dropped fields
//! once, here, and their violations kept ([`CompactSlice::dropped_violations`]);
//! a `targetRef` into another namespace is kept as written (the tenant rule
//! refuses it; one into the slice's own namespace says nothing teapot
//! needs). The re-check runs the tenant rules on [`CompactSlice::to_typed`]
//! plus those violations, and counts the slice's JSON size as written
//! against the tenant's byte quota.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use teapot_api::admission::Violation;
use teapot_api::names::SERVICE_NAME_LABEL;

use crate::meta::CompactMeta;

/// The API server's bound on addresses per endpoint, which the compact form
/// relies on (a count in one byte).
pub const MAX_ADDRESSES_PER_ENDPOINT: usize = 100;

/// One endpoint's conditions and address count, in two bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointInfo {
    addresses: u8,
    /// Two bits per condition (ready, serving, terminating): 0 unset,
    /// 1 false, 2 true.
    conditions: u8,
}

impl EndpointInfo {
    fn condition(self, shift: u8) -> Option<bool> {
        match (self.conditions >> shift) & 0b11 {
            1 => Some(false),
            2 => Some(true),
            _ => None,
        }
    }

    /// `ready` as written; unset means ready (discovery.k8s.io/v1).
    pub fn ready(self) -> Option<bool> {
        self.condition(0)
    }

    pub fn serving(self) -> Option<bool> {
        self.condition(2)
    }

    pub fn terminating(self) -> Option<bool> {
        self.condition(4)
    }
}

fn bits(value: Option<bool>, shift: u8) -> u8 {
    match value {
        None => 0,
        Some(false) => 1 << shift,
        Some(true) => 2 << shift,
    }
}

pub use crate::meta::CompactMap;

/// An EndpointSlice in the form the store keeps.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactSlice {
    /// The metadata as written, labels and annotations as lists.
    pub metadata: CompactMeta,
    /// `IPv4`, `IPv6` or `FQDN` (kept as written: the tenant policy judges it).
    pub address_type: String,
    pub ports: Vec<EndpointPort>,
    endpoints: Box<[EndpointInfo]>,
    /// Every endpoint's addresses, in order; empty for FQDN slices, whose
    /// names teapot never routes to.
    addresses: Box<[IpAddr]>,
    /// `targetRef.namespace` of endpoints (by index) whose target is in
    /// another namespace than the slice's: kept for the tenant rule that
    /// refuses them. Empty for any slice the agent writes.
    foreign_targets: Box<[(u32, String)]>,
    /// What the tenant-independent rules found in the dropped fields.
    dropped_violations: Box<[Violation]>,
    /// The JSON size of the slice as written, for `maxTotalBytes`.
    source_bytes: u32,
}

impl CompactSlice {
    /// The compact form of a slice that passed [`crate::validate`]: IP
    /// addresses parse, at most [`MAX_ADDRESSES_PER_ENDPOINT`] per endpoint.
    /// `namespace` is the slice's own.
    pub fn new(slice: EndpointSlice, namespace: &str) -> CompactSlice {
        let source_bytes =
            u32::try_from(teapot_api::admission::json_size(&slice)).unwrap_or(u32::MAX);
        let fqdn = slice.address_type == "FQDN";
        let mut list = slice.endpoints.unwrap_or_default();
        let mut foreign_targets = Vec::new();
        for (i, e) in list.iter_mut().enumerate() {
            if let Some(ns) = e.target_ref.as_mut().and_then(|t| t.namespace.take())
                && ns != namespace
            {
                foreign_targets.push((i as u32, ns));
            }
        }
        let dropped_violations = dropped_violations(&list);
        let mut endpoints = Vec::with_capacity(list.len());
        let mut addresses = Vec::with_capacity(if fqdn { 0 } else { list.len() });
        for e in list {
            let before = addresses.len();
            if !fqdn {
                addresses.extend(e.addresses.iter().filter_map(|a| a.parse::<IpAddr>().ok()));
            }
            let c = e.conditions.unwrap_or_default();
            endpoints.push(EndpointInfo {
                addresses: u8::try_from(addresses.len() - before).unwrap_or(u8::MAX),
                conditions: bits(c.ready, 0) | bits(c.serving, 2) | bits(c.terminating, 4),
            });
        }
        CompactSlice {
            metadata: CompactMeta::new(slice.metadata),
            address_type: slice.address_type,
            ports: slice.ports.unwrap_or_default(),
            endpoints: endpoints.into_boxed_slice(),
            addresses: addresses.into_boxed_slice(),
            foreign_targets: foreign_targets.into_boxed_slice(),
            dropped_violations: dropped_violations.into_boxed_slice(),
            source_bytes,
        }
    }

    /// Violations of the tenant-independent rules in the fields the compact
    /// form dropped; a tenant namespace refuses the slice for them.
    pub fn dropped_violations(&self) -> &[Violation] {
        &self.dropped_violations
    }

    /// The Service this slice belongs to (`kubernetes.io/service-name`).
    pub fn service_name(&self) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)
    }

    /// `metadata.labels` as written.
    pub fn labels(&self) -> Option<&CompactMap> {
        self.metadata.labels.as_ref()
    }

    /// `metadata.annotations` as written.
    pub fn annotations(&self) -> Option<&CompactMap> {
        self.metadata.annotations.as_ref()
    }

    /// Each endpoint with its addresses.
    pub fn endpoints(&self) -> impl Iterator<Item = (EndpointInfo, &[IpAddr])> {
        let mut at = 0;
        self.endpoints.iter().map(move |info| {
            let n = info.addresses as usize;
            let addrs = self.addresses.get(at..at + n).unwrap_or_default();
            at += n;
            (*info, addrs)
        })
    }

    pub fn endpoint_count(&self) -> usize {
        self.endpoints.len()
    }

    /// Bytes of the slice's JSON as written (what `maxTotalBytes` counts).
    pub fn source_bytes(&self) -> usize {
        self.source_bytes as usize
    }

    /// Heap bytes of the per-endpoint part (the part that grows with a
    /// slice): what "bytes per endpoint" in docs/capacity.md counts.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.endpoints) + std::mem::size_of_val(&*self.addresses)
    }

    /// The slice as a typed object again, holding what the proxy kept: for
    /// the tenant policy's re-check and for serializing.
    pub fn to_typed(&self) -> EndpointSlice {
        let mut foreign = self.foreign_targets.iter().peekable();
        let endpoints = self
            .endpoints()
            .enumerate()
            .map(|(i, (info, addrs))| Endpoint {
                target_ref: foreign.next_if(|(at, _)| *at as usize == i).map(|(_, ns)| {
                    ObjectReference {
                        namespace: Some(ns.clone()),
                        ..ObjectReference::default()
                    }
                }),
                addresses: addrs.iter().map(IpAddr::to_string).collect(),
                conditions: (info.conditions != 0).then(|| EndpointConditions {
                    ready: info.ready(),
                    serving: info.serving(),
                    terminating: info.terminating(),
                }),
                ..Endpoint::default()
            })
            .collect();
        EndpointSlice {
            metadata: self.metadata.to_typed(),
            address_type: self.address_type.clone(),
            ports: (!self.ports.is_empty()).then(|| self.ports.clone()),
            endpoints: Some(endpoints),
        }
    }
}

/// The string rules (control characters, lengths) over the fields the
/// compact form drops, at their place in the slice.
fn dropped_violations(endpoints: &[Endpoint]) -> Vec<Violation> {
    let dropped = |e: &Endpoint| Endpoint {
        addresses: Vec::new(),
        conditions: None,
        deprecated_topology: e.deprecated_topology.clone(),
        hints: e.hints.clone(),
        hostname: e.hostname.clone(),
        node_name: e.node_name.clone(),
        target_ref: e.target_ref.clone(),
        zone: e.zone.clone(),
    };
    let only = EndpointSlice {
        endpoints: Some(endpoints.iter().map(dropped).collect()),
        ..EndpointSlice::default()
    };
    teapot_api::admission::check_strings(&only, None)
}

/// Serialized as the typed slice of what is kept (a report or a tool that
/// writes the store back out); the original's size is [`CompactSlice::source_bytes`].
impl serde::Serialize for CompactSlice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_typed().serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(endpoints: usize) -> EndpointSlice {
        let text = format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: s-1, namespace: t, labels: {{kubernetes.io/service-name: s}}}}\naddressType: IPv4\nports: [{{name: http, port: 30080, protocol: TCP}}]\nendpoints: [{}]\n",
            (0..endpoints)
                .map(|i| format!(
                    "{{addresses: [10.1.{}.{}], conditions: {{ready: {}, serving: true}}, nodeName: node-{i:05}.eu-west-1.compute.internal, zone: eu-west-1a, targetRef: {{kind: Pod, namespace: shop, name: web-{i:05}, uid: 8d3c1a64-0b7f-4b0e-9a59-{i:012}}}}}",
                    i / 250,
                    i % 250,
                    i % 7 != 0
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        serde_yaml::from_str(&text).unwrap()
    }

    /// Labels and annotations are kept as lists, not maps, and come back
    /// as written.
    #[test]
    fn labels_and_annotations_are_kept_as_lists() {
        let mut typed = slice(2);
        typed.metadata.labels.as_mut().unwrap().extend([
            (
                "endpointslice.kubernetes.io/managed-by".into(),
                "sync.teapot.dev".into(),
            ),
            ("app".into(), "web".into()),
        ]);
        typed.metadata.annotations = Some(
            [(
                "endpoints.kubernetes.io/last-change-trigger-time".into(),
                "2026-11-29T00:00:00Z".into(),
            )]
            .into(),
        );
        let compact = CompactSlice::new(typed.clone(), "t");
        assert!(compact.metadata.rest().is_none());
        assert_eq!(compact.service_name(), Some("s"));
        assert_eq!(compact.labels().unwrap().get("app"), Some("web"));
        assert_eq!(compact.labels().unwrap().get("ap"), None);
        assert_eq!(compact.to_typed().metadata, typed.metadata);
        let bare = CompactSlice::new(EndpointSlice::default(), "t");
        assert_eq!(
            bare.to_typed().metadata,
            k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta::default()
        );
        assert_eq!(bare.service_name(), None);
    }

    #[test]
    fn keeps_addresses_conditions_and_ports_in_19_bytes_an_endpoint() {
        let typed = slice(1000);
        let compact = CompactSlice::new(typed.clone(), "t");
        assert_eq!(compact.endpoint_count(), 1000);
        assert_eq!(compact.service_name(), Some("s"));
        assert_eq!(compact.ports, typed.ports.clone().unwrap());
        for ((info, addrs), e) in compact.endpoints().zip(typed.endpoints.as_ref().unwrap()) {
            let want: Vec<IpAddr> = e.addresses.iter().map(|a| a.parse().unwrap()).collect();
            assert_eq!(addrs, &want[..]);
            let c = e.conditions.as_ref().unwrap();
            assert_eq!(info.ready(), c.ready);
            assert_eq!(info.serving(), c.serving);
            assert_eq!(info.terminating(), None);
        }
        let per_endpoint = compact.heap_bytes() / 1000;
        assert_eq!(per_endpoint, 19, "{per_endpoint} bytes an endpoint");
        assert_eq!(
            compact.source_bytes(),
            teapot_api::admission::json_size(&typed)
        );
        // The JSON is at least ten times the kept form.
        assert!(compact.source_bytes() > 10 * compact.heap_bytes());
    }

    #[test]
    fn the_typed_form_again_holds_what_was_kept() {
        let typed = slice(3);
        let again = CompactSlice::new(typed.clone(), "t").to_typed();
        assert_eq!(again.metadata, typed.metadata);
        assert_eq!(again.ports, typed.ports);
        let endpoints = again.endpoints.unwrap();
        assert_eq!(endpoints.len(), 3);
        assert_eq!(endpoints[1].addresses, ["10.1.0.1"]);
        assert_eq!(endpoints[1].node_name, None);
        let c = endpoints[0].conditions.as_ref().unwrap();
        assert_eq!(
            (c.ready, c.serving, c.terminating),
            (Some(false), Some(true), None)
        );
        // A compact slice of the compact slice is the same.
        assert_eq!(
            CompactSlice::new(CompactSlice::new(typed.clone(), "t").to_typed(), "t")
                .endpoints()
                .count(),
            3
        );
    }

    #[test]
    fn several_addresses_and_unset_conditions_survive() {
        let text = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s-1, labels: {kubernetes.io/service-name: s}}\naddressType: IPv6\nendpoints: [{addresses: ['fd00::1', 'fd00::2']}, {addresses: ['fd00::3']}]\n";
        let compact = CompactSlice::new(serde_yaml::from_str(text).unwrap(), "t");
        let all: Vec<(Option<bool>, Vec<IpAddr>)> = compact
            .endpoints()
            .map(|(i, a)| (i.ready(), a.to_vec()))
            .collect();
        assert_eq!(
            all,
            [
                (
                    None,
                    vec!["fd00::1".parse().unwrap(), "fd00::2".parse().unwrap()]
                ),
                (None, vec!["fd00::3".parse().unwrap()]),
            ]
        );
        assert!(
            compact.to_typed().endpoints.unwrap()[0]
                .conditions
                .is_none()
        );
    }

    #[test]
    fn what_the_rules_refuse_in_dropped_fields_is_kept() {
        let text = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s-1, labels: {kubernetes.io/service-name: s}}\naddressType: IPv4\nendpoints: [{addresses: [10.0.0.1], targetRef: {kind: Pod, namespace: t, name: a}}, {addresses: [10.0.0.2], nodeName: \"bad\\u0007name\", targetRef: {kind: Pod, namespace: other, name: b}}]\n";
        let compact = CompactSlice::new(serde_yaml::from_str(text).unwrap(), "t");
        let fields: Vec<&str> = compact
            .dropped_violations()
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(fields, ["endpoints[1].nodeName"]);
        let endpoints = compact.to_typed().endpoints.unwrap();
        assert_eq!(endpoints[0].target_ref, None);
        let foreign = endpoints[1].target_ref.as_ref().unwrap();
        assert_eq!(foreign.namespace.as_deref(), Some("other"));
    }
}
