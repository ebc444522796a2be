//! `proxy.http3` in the LB chart, rendered by the pinned helm
//! (`scripts/helm.sh`, as in `charts.rs`): by default UDP on the HTTPS
//! port beside TCP (the container's port, and in deployment mode the
//! Service's UDP 443 beside TCP 443) and the flags that advertise HTTP/3
//! (accepted by this build's `teapot`); with `enabled: false` no UDP port
//! and `--no-http3`.

use std::path::Path;

use k8s_openapi::api::core::v1::Service;
use serde_json::{Value, json};

use crate::chart_tools;
use crate::charts::assert_flags_exist;
use chart_tools::{chart, helm, strs, try_render};

fn render(helm: &Path, values: &str, set: &[&str]) -> Vec<Value> {
    let values = chart("teapot-lb").join("ci").join(values);
    let mut args = vec!["-f", values.to_str().expect("utf-8 path")];
    for s in set {
        args.extend(["--set", s]);
    }
    try_render(helm, "teapot-lb", &args).unwrap_or_else(|e| panic!("helm template {args:?}: {e}"))
}

fn proxy_container(docs: &[Value]) -> &Value {
    let workload = docs
        .iter()
        .find(|d| {
            (d["kind"] == "DaemonSet" || d["kind"] == "Deployment")
                && d["metadata"]["labels"]["app.kubernetes.io/component"] == "proxy"
        })
        .expect("proxy workload");
    &workload["spec"]["template"]["spec"]["containers"][0]
}

fn proxy_service(docs: &[Value]) -> &Value {
    docs.iter()
        .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == "teapot-proxy")
        .expect("the proxy's Service")
}

fn port<'a>(ports: &'a Value, name: &str) -> Option<&'a Value> {
    ports.as_array()?.iter().find(|p| p["name"] == name)
}

#[test]
fn http3_opens_udp_beside_tcp_and_advertises_the_clients_port() {
    let Some(helm) = helm() else { return };
    for (values, pod_port, advertised) in [
        (
            "deployment-values.yaml",
            8443,
            Some("--http3-advertise-port=443"),
        ),
        ("daemonset-values.yaml", 443, None),
    ] {
        // Nothing set about HTTP/3 but where the probe goes: on by default.
        let docs = render(
            &helm,
            values,
            &["proxy.http3.probeAddress=lb.example.com:443"],
        );
        let container = proxy_container(&docs);
        let tcp = port(&container["ports"], "https").expect("https");
        let udp = port(&container["ports"], "https-udp").expect("https-udp");
        assert_eq!(tcp["containerPort"], pod_port, "{values}");
        assert_eq!(
            udp,
            &json!({"name": "https-udp", "containerPort": pod_port, "protocol": "UDP"}),
            "{values}"
        );
        let args = strs(&container["args"]);
        // teapot serves HTTP/3 by default: no flag turns it on, and none
        // makes a UDP port held by another process stop the start.
        assert!(
            !args.iter().any(|a| a == "--http3" || a == "--no-http3"),
            "{values}: {args:?}"
        );
        for flag in [
            "--http3-advertise=true",
            "--http3-probe-interval=30",
            "--http3-probe-address=lb.example.com:443",
        ] {
            assert!(
                args.iter().any(|a| a == flag),
                "{values}: {flag} in {args:?}"
            );
        }
        let port_flags: Vec<&String> = args
            .iter()
            .filter(|a| a.starts_with("--http3-advertise-port"))
            .collect();
        assert_eq!(
            port_flags.first().map(|s| s.as_str()),
            advertised,
            "{values}: {args:?}"
        );
        assert_flags_exist(&args, "proxy.http3");
        let service = proxy_service(&docs);
        let typed: Service = serde_json::from_value(service.clone()).expect("a Service");
        let ports = typed.spec.and_then(|s| s.ports).unwrap_or_default();
        let udp = ports
            .iter()
            .find(|p| p.name.as_deref() == Some("https-udp"));
        if values.starts_with("deployment") {
            // One LoadBalancer address, TCP and UDP 443.
            let udp = udp.expect("the Service's UDP 443");
            assert_eq!(udp.port, 443);
            assert_eq!(udp.protocol.as_deref(), Some("UDP"));
            let tcp = ports
                .iter()
                .find(|p| p.name.as_deref() == Some("https"))
                .expect("TCP 443");
            assert_eq!((tcp.port, tcp.protocol.as_deref()), (443, Some("TCP")));
        } else {
            // hostNetwork: the node's own UDP port, no Service port.
            assert!(udp.is_none(), "{values}");
        }
    }
}

#[test]
fn http3_off_opens_nothing_and_advertise_false_is_passed() {
    let Some(helm) = helm() else { return };
    for values in ["deployment-values.yaml", "daemonset-values.yaml"] {
        let docs = render(&helm, values, &["proxy.http3.enabled=false"]);
        let container = proxy_container(&docs);
        assert!(port(&container["ports"], "https-udp").is_none(), "{values}");
        assert!(
            port(&proxy_service(&docs)["spec"]["ports"], "https-udp").is_none(),
            "{values}"
        );
        let args = strs(&container["args"]);
        assert!(args.iter().any(|a| a == "--no-http3"), "{args:?}");
        assert!(!args.iter().any(|a| a.starts_with("--http3")), "{args:?}");
        assert_flags_exist(&args, "proxy.http3");

        let docs = render(
            &helm,
            values,
            &[
                "proxy.http3.advertise=false",
                "proxy.http3.probeIntervalSeconds=5",
            ],
        );
        let args = strs(&proxy_container(&docs)["args"]);
        for flag in ["--http3-advertise=false", "--http3-probe-interval=5"] {
            assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
        }
        assert!(!args.iter().any(|a| a.starts_with("--http3-probe-address")));
        assert_flags_exist(&args, "proxy.http3");
    }
}

#[test]
fn http3_values_outside_their_bounds_are_refused() {
    let Some(helm) = helm() else { return };
    let values = chart("teapot-lb").join("ci/deployment-values.yaml");
    for bad in [
        "proxy.http3.probeIntervalSeconds=0",
        "proxy.http3.probeIntervalSeconds=3601",
        "proxy.http3.enabled=yes",
        "proxy.http3.unknown=1",
    ] {
        let flag = if bad.ends_with("=yes") {
            "--set-string"
        } else {
            "--set"
        };
        let err = try_render(
            &helm,
            "teapot-lb",
            &["-f", values.to_str().expect("utf-8"), flag, bad],
        )
        .expect_err(bad);
        assert!(err.contains("http3"), "{bad}: {err}");
    }
}
