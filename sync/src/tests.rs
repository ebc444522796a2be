use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

use super::*;

fn service(annotations: serde_json::Value, node_port: bool) -> Service {
    let mut port = json!({"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080});
    if node_port {
        port["nodePort"] = json!(30080);
    }
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop", "uid": "1234-abcd", "annotations": annotations},
        "spec": {"type": if node_port { "NodePort" } else { "ClusterIP" }, "ports": [port]},
    }))
    .unwrap()
}

fn slice(name: &str, endpoints: serde_json::Value) -> Arc<EndpointSlice> {
    slice_of("IPv4", name, endpoints)
}

fn slice_of(family: &str, name: &str, endpoints: serde_json::Value) -> Arc<EndpointSlice> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": family,
            "endpoints": endpoints,
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }))
        .unwrap(),
    )
}

fn nodes(name: &str) -> Vec<IpAddr> {
    let ips: &[&str] = match name {
        "n1" => &["10.0.0.1", "fd00::1"],
        "n2" => &["10.0.0.2"],
        "n6" => &["fd00::6"],
        _ => &[],
    };
    ips.iter().map(|ip| ip.parse().unwrap()).collect()
}

/// The one LB slice of an IPv4-only Service.
fn desired_slice(
    service: &Service,
    slices: &[Arc<EndpointSlice>],
    node_ips: &dyn Fn(&str) -> Vec<IpAddr>,
    mode: Mode,
    lb_namespace: &str,
) -> Result<EndpointSlice, Error> {
    let mut out = desired_slices(service, slices, node_ips, mode, lb_namespace)?;
    assert_eq!(out.len(), 1, "{out:?}");
    Ok(out.remove(0))
}

fn addresses(s: &EndpointSlice) -> Vec<String> {
    s.endpoints
        .iter()
        .flatten()
        .flat_map(|e| e.addresses.clone())
        .collect()
}

#[test]
fn nodeport_mode_lists_each_node_with_a_ready_endpoint_once() {
    let slices = [
        slice(
            "web-a",
            json!([
                {"addresses": ["10.244.1.5"], "nodeName": "n1", "conditions": {"ready": true}},
                {"addresses": ["10.244.1.6"], "nodeName": "n1"},
                {"addresses": ["10.244.2.5"], "nodeName": "n2", "conditions": {"ready": false}},
            ]),
        ),
        slice(
            "web-b",
            json!([{"addresses": ["10.244.9.9"], "nodeName": "unknown"}]),
        ),
    ];
    let s = desired_slice(
        &service(json!({}), true),
        &slices,
        &nodes,
        Mode::NodePort,
        "tenant-acme",
    )
    .unwrap();
    let mirrored = mirrored_service_name("shop", "web");
    assert_eq!(s.metadata.name.as_deref(), Some(mirrored.as_str()));
    assert_eq!(s.metadata.namespace.as_deref(), Some("tenant-acme"));
    assert_eq!(addresses(&s), ["10.0.0.1"]);
    let ports = s.ports.unwrap();
    assert_eq!(ports[0].port, Some(30080));
    assert_eq!(ports[0].name.as_deref(), Some("http"));
    let labels = s.metadata.labels.unwrap();
    assert_eq!(labels[SERVICE_NAME_LABEL], mirrored);
    assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY_SYNC);
    assert_eq!(labels[SOURCE_NAMESPACE_LABEL], "shop");
    assert_eq!(labels[SOURCE_NAME_LABEL], "web");
    assert_eq!(
        s.metadata.annotations.unwrap()[SOURCE_UID_ANNOTATION],
        "1234-abcd"
    );
}

#[test]
fn pod_mode_lists_ready_pod_ips_and_target_ports() {
    let slices = [slice(
        "web-a",
        json!([
            {"addresses": ["10.244.1.5"], "nodeName": "n1"},
            {"addresses": ["10.244.2.5"], "nodeName": "n2", "conditions": {"ready": false}},
        ]),
    )];
    // The annotation overrides the agent's default.
    let svc = service(json!({MODE_ANNOTATION: "pod"}), false);
    let mode = mode_of(&svc, Mode::NodePort).unwrap();
    assert_eq!(mode, Mode::Pod);
    let s = desired_slice(&svc, &slices, &nodes, mode, "tenant-acme").unwrap();
    assert_eq!(addresses(&s), ["10.244.1.5"]);
    assert_eq!(s.ports.unwrap()[0].port, Some(8080));
}

#[test]
fn bad_input_names_the_object_and_field() {
    let err = desired_slice(&service(json!({}), false), &[], &nodes, Mode::NodePort, "t")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("Service shop/web: spec.ports[].nodePort:"),
        "{err}"
    );
    let err = mode_of(&service(json!({MODE_ANNOTATION: "magic"}), true), Mode::Pod)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("metadata.annotations[teapot.dev/endpoints]"),
        "{err}"
    );
}

#[test]
fn failures_count_per_key_until_cleared() {
    let failures = Failures::default();
    assert_eq!(failures.record("shop/web".into()), 1);
    assert_eq!(failures.record("shop/web".into()), 2);
    assert_eq!(failures.record("shop/api".into()), 1, "counted per key");
    failures.clear("shop/web");
    assert_eq!(
        failures.record("shop/web".into()),
        1,
        "a success starts over"
    );
    assert_eq!(failures.record("shop/api".into()), 2);
}

#[test]
fn backoff_grows_and_caps() {
    assert_eq!(backoff(1), Duration::from_secs(1));
    assert_eq!(backoff(3), Duration::from_secs(4));
    assert_eq!(backoff(40), Duration::from_secs(300));
}

/// The override is a tenant-facing annotation, so it is in the api crate's
/// allowlist (documented with the others); the words must agree.
#[test]
fn the_mode_annotation_is_allowlisted_with_the_same_words() {
    let spec = teapot_api::annotations::spec(MODE_ANNOTATION).expect("in the allowlist");
    let teapot_api::annotations::ValueType::OneOf(words) = spec.value else {
        panic!("{MODE_ANNOTATION} is not a word list");
    };
    let modes: Vec<Mode> = words.iter().map(|w| w.parse().unwrap()).collect();
    assert_eq!(modes, [Mode::NodePort, Mode::Pod]);
    for (word, mode) in words.iter().zip(&modes) {
        assert_eq!(mode.to_string(), *word);
    }
}

fn written(ago_ms: u64, interval_ms: u64, deferred: bool) -> Written {
    Written {
        slice: serde_json::Value::Null,
        at: std::time::Instant::now() - Duration::from_millis(ago_ms),
        interval: Duration::from_millis(interval_ms),
        deferred,
    }
}

#[test]
fn writes_space_out_during_a_rollout_and_not_otherwise() {
    let min = Duration::from_millis(500);
    // An isolated change after a quiet spell: at once, minimum spacing.
    let (wait, next) = written(10_000, 2000, false).spacing(min);
    assert_eq!((wait, next), (Duration::ZERO, min));
    // A change within the spacing waits, and its write doubles it.
    let (wait, next) = written(100, 500, false).spacing(min);
    assert!(wait > Duration::ZERO && wait <= min, "{wait:?}");
    assert_eq!(next, Duration::from_millis(1000));
    // The deferred write itself (the wait is over) keeps doubling...
    let (wait, next) = written(1000, 1000, true).spacing(min);
    assert_eq!((wait, next), (Duration::ZERO, Duration::from_millis(2000)));
    // ...up to the cap.
    let (_, next) = written(4000, 4000, true).spacing(min);
    assert_eq!(next, min * MAX_INTERVAL_FACTOR);
}

fn dual_stack(mut svc: Service, families: &[&str]) -> Service {
    let spec = svc.spec.as_mut().unwrap();
    spec.ip_families = Some(families.iter().map(|f| f.to_string()).collect());
    spec.ip_family_policy = Some(
        if families.len() > 1 {
            "PreferDualStack"
        } else {
            "SingleStack"
        }
        .into(),
    );
    svc
}

fn by_family(slices: &[EndpointSlice]) -> Vec<(String, String, Vec<String>)> {
    slices
        .iter()
        .map(|s| {
            (
                s.address_type.clone(),
                s.metadata.name.clone().unwrap(),
                addresses(s),
            )
        })
        .collect()
}

#[test]
fn a_dual_stack_service_gets_a_slice_per_family_with_node_addresses_of_that_family() {
    let svc = dual_stack(service(json!({}), true), &["IPv4", "IPv6"]);
    let slices = [
        slice(
            "web-v4",
            json!([
                {"addresses": ["10.244.1.5"], "nodeName": "n1"},
                {"addresses": ["10.244.2.5"], "nodeName": "n2"},
            ]),
        ),
        slice_of(
            "IPv6",
            "web-v6",
            json!([
                {"addresses": ["fd10::5"], "nodeName": "n1"},
                // n2 has no IPv6 InternalIP: nothing to dial in this family.
                {"addresses": ["fd10::6"], "nodeName": "n2"},
                {"addresses": ["fd10::7"], "nodeName": "n6", "conditions": {"ready": false}},
            ]),
        ),
    ];
    let out = desired_slices(&svc, &slices, &nodes, Mode::NodePort, "tenant-acme").unwrap();
    let mirrored = mirrored_service_name("shop", "web");
    assert_eq!(
        by_family(&out),
        [
            (
                "IPv4".into(),
                mirrored.clone(),
                vec!["10.0.0.1".into(), "10.0.0.2".into()]
            ),
            (
                "IPv6".into(),
                format!("{mirrored}-ipv6"),
                vec!["fd00::1".into()]
            ),
        ]
    );
    assert_eq!(out[1].ports.as_ref().unwrap()[0].port, Some(30080));
    assert_eq!(
        out[1].metadata.labels, out[0].metadata.labels,
        "both select the mirrored Service"
    );
    assert_eq!(
        slice_names("shop", "web"),
        [mirrored.clone(), format!("{mirrored}-ipv6")]
    );
}

#[test]
fn an_ipv6_only_service_in_pod_mode_mirrors_its_pod_ips() {
    let svc = dual_stack(service(json!({MODE_ANNOTATION: "pod"}), false), &["IPv6"]);
    let slices = [slice_of(
        "IPv6",
        "web-v6",
        json!([
            {"addresses": ["fd10::5"], "nodeName": "n6"},
            {"addresses": ["fd10::6"], "conditions": {"ready": false}},
        ]),
    )];
    let out = desired_slices(&svc, &slices, &nodes, Mode::Pod, "tenant-acme").unwrap();
    let mirrored = mirrored_service_name("shop", "web");
    assert_eq!(
        by_family(&out),
        [
            // The IPv4 slice is kept (empty) so that a Service going back to
            // IPv4 finds it, and older readers of the plain name see no change.
            ("IPv4".into(), mirrored.clone(), vec![]),
            (
                "IPv6".into(),
                format!("{mirrored}-ipv6"),
                vec!["fd10::5".into()]
            ),
        ]
    );
    assert_eq!(out[1].ports.as_ref().unwrap()[0].port, Some(8080));
    // The family comes from the tenant slices too when ipFamilies is unset.
    let mut unset = svc.clone();
    unset.spec.as_mut().unwrap().ip_families = None;
    assert_eq!(
        desired_slices(&unset, &slices, &nodes, Mode::Pod, "t")
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn a_node_lists_its_first_internal_ip_of_each_family() {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1"},
        "status": {"addresses": [
            {"type": "InternalIP", "address": "fd00::1"},
            {"type": "ExternalIP", "address": "203.0.113.1"},
            {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "InternalIP", "address": "fd00::2"},
            {"type": "Hostname", "address": "n1"},
        ]},
    }))
    .unwrap();
    let ips: Vec<String> = internal_ips(&node)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(ips, ["10.0.0.1", "fd00::1"]);
}

/// `n` ready pods in tenant slices of 100, as the EndpointSlice controller
/// cuts them.
fn many_pods(n: usize) -> Vec<Arc<EndpointSlice>> {
    (0..n.div_ceil(100))
        .map(|s| {
            let endpoints: Vec<serde_json::Value> = (s * 100..((s + 1) * 100).min(n))
                .map(|p| json!({"addresses": [format!("10.{}.{}.{}", p / 65536, p / 256 % 256, p % 256)]}))
                .collect();
            slice(&format!("web-{s}"), json!(endpoints))
        })
        .collect()
}

#[test]
fn a_family_past_one_slice_is_split_into_named_parts_of_at_most_a_thousand() {
    let svc = service(json!({MODE_ANNOTATION: "pod"}), false);
    let out = desired_slices(&svc, &many_pods(2500), &nodes, Mode::Pod, "t").unwrap();
    let mirrored = mirrored_service_name("shop", "web");
    let parts: Vec<(String, usize)> = out
        .iter()
        .map(|s| {
            (
                s.metadata.name.clone().unwrap(),
                s.endpoints.as_ref().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(
        parts,
        [
            (mirrored.clone(), 1000),
            (format!("{mirrored}.2"), 1000),
            (format!("{mirrored}.3"), 500),
        ]
    );
    for s in &out {
        assert_eq!(s.metadata.labels, out[0].metadata.labels, "one Service");
        assert_eq!(s.ports, out[0].ports);
    }
    // No address twice across the parts.
    let all: BTreeSet<&String> = out
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .flat_map(|e| &e.addresses)
        .collect();
    assert_eq!(all.len(), 2500);
    // Parts never take the name of another Service's slices.
    let others: Vec<String> = ["web-2", "web-3", "web-ipv6-2"]
        .iter()
        .flat_map(|n| all_slice_names("shop", n))
        .collect();
    assert!(
        all_slice_names("shop", "web")
            .iter()
            .all(|n| !others.contains(n))
    );
    let names = all_slice_names("shop", "web");
    assert_eq!(names.len(), 2 * MAX_SLICES_PER_FAMILY);
    assert!(
        out.iter()
            .all(|s| names.contains(s.metadata.name.as_ref().unwrap()))
    );
}

#[test]
fn a_hostile_service_is_mirrored_up_to_the_bound_of_slices_per_family() {
    let svc = service(json!({MODE_ANNOTATION: "pod"}), false);
    let out = desired_slices(&svc, &many_pods(20_000), &nodes, Mode::Pod, "t").unwrap();
    assert_eq!(out.len(), MAX_SLICES_PER_FAMILY);
    assert_eq!(MAX_SLICES_PER_FAMILY, 5);
    assert!(
        out.iter()
            .all(|s| s.endpoints.as_ref().unwrap().len() == MAX_ENDPOINTS_PER_SLICE)
    );
}

#[test]
fn an_empty_family_keeps_its_one_empty_slice() {
    let svc = service(json!({MODE_ANNOTATION: "pod"}), false);
    let out = desired_slices(&svc, &[], &nodes, Mode::Pod, "t").unwrap();
    assert_eq!(out.len(), 1);
    assert!(out[0].endpoints.as_ref().unwrap().is_empty());
}
