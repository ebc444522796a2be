//! The Gateway API conformance data (`conformance/gateway/data`) is what
//! `conformance/gateway/port.py` makes of the upstream test files today,
//! and it reads as a runner will read it.
//!
//! Needs `python3` (the script is standard library only) and the upstream
//! copy at `<workspace>/../shared/conformance-upstream/gateway-api`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn upstream() -> PathBuf {
    repo().join("../shared/conformance-upstream/gateway-api")
}

fn data() -> PathBuf {
    repo().join("conformance/gateway/data")
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `port.py` on the upstream copy `up` into `out_dir`; its errors
/// fail the test.
fn port(up: &Path, out_dir: &Path) {
    let out = Command::new("python3")
        .arg(repo().join("conformance/gateway/port.py"))
        .arg("--upstream")
        .arg(up)
        .arg("--out")
        .arg(out_dir)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_committed_data_is_current() {
    assert!(
        upstream().is_dir(),
        "the upstream Gateway API copy is missing: {}",
        upstream().display()
    );
    let out = Command::new("python3")
        .arg(repo().join("conformance/gateway/port.py"))
        .arg("--check")
        .arg("--upstream")
        .arg(upstream())
        .output()
        .expect("python3 runs conformance/gateway/port.py");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{}", String::from_utf8_lossy(&out.stdout).trim());
}

#[test]
fn every_data_file_is_a_runnable_test() {
    let index = read(&data().join("index.json"));
    let tests = index["tests"].as_object().unwrap();
    assert!(tests.len() >= 60, "only {} tests ported", tests.len());
    let files = std::fs::read_dir(data())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != "index.json")
        .count();
    assert_eq!(files, tests.len(), "files vs index");
    let mut cases = 0;
    let mut checks = 0;
    for (name, entry) in tests {
        let test = read(&data().join(entry["file"].as_str().unwrap()));
        assert_eq!(test["name"], name.as_str());
        let manifests = test["manifests"].as_array().unwrap();
        assert!(!manifests.is_empty(), "{name}: no manifests");
        for m in manifests {
            let path = upstream().join("conformance").join(m.as_str().unwrap());
            assert!(path.is_file(), "{name}: {} missing", path.display());
        }
        let ported = test["cases"].as_array().unwrap();
        assert_eq!(entry["cases"], ported.len(), "{name}");
        for (i, case) in ported.iter().enumerate() {
            let protocol = case["protocol"].as_str().unwrap();
            assert!(
                case["helper"].is_string(),
                "{name}[{i}]: which helper judges it?"
            );
            assert!(
                ["http", "grpc", "tcp", "udp", "websocket"].contains(&protocol),
                "{name}[{i}]: {protocol}"
            );
            // Every HTTP case says what to send and what must come back
            // (or goes to a helper that expects a failure).
            let failure = case["helper"]
                .as_str()
                .is_some_and(|h| h.contains("Failure"));
            if protocol == "http" && !failure {
                assert!(case["Request"].is_object(), "{name}[{i}]: no Request");
                let expects = ["Response", "Backend", "ExpectedRequest", "RedirectRequest"]
                    .iter()
                    .any(|k| !case[k].is_null());
                assert!(expects, "{name}[{i}]: nothing expected: {case}");
            }
        }
        cases += ported.len();
        for u in test["unported_cases"].as_array().unwrap() {
            assert!(
                !u["reason"].as_str().unwrap_or("").is_empty(),
                "{name}: unported case without a reason"
            );
        }
        // Every status check names its upstream helper and sub-test, with
        // the arguments evaluated, or says why it is not ported.
        let ported_checks = test["checks"].as_array().unwrap();
        let unported_checks = test["unported_checks"].as_array().unwrap();
        assert_eq!(entry["checks"], ported_checks.len(), "{name}");
        assert_eq!(entry["unported_checks"], unported_checks.len(), "{name}");
        for check in ported_checks.iter().chain(unported_checks) {
            let helper = check["helper"].as_str().unwrap();
            assert!(helper.starts_with("kubernetes."), "{name}: {check}");
            assert!(check["subtest"].is_string(), "{name}: {check}");
        }
        for check in ported_checks {
            assert!(check["arguments"].is_array(), "{name}: {check}");
            assert!(!check.to_string().contains("Unresolved"), "{name}: {check}");
        }
        for check in unported_checks {
            assert!(
                !check["reason"].as_str().unwrap_or("").is_empty(),
                "{name}: unported check without a reason"
            );
        }
        checks += ported_checks.len();
        assert!(
            !ported.is_empty() || !ported_checks.is_empty() || !unported_checks.is_empty(),
            "{name}: neither a case nor a check"
        );
    }
    // Tests without ported cases are listed with their reason.
    for (name, reason) in index["unported"].as_object().unwrap() {
        assert!(!reason.as_str().unwrap().is_empty(), "{name}");
        assert!(!tests.contains_key(name), "{name} both ported and not");
    }
    assert!(cases >= 300, "only {cases} cases");
    assert!(checks >= 400, "only {checks} status checks");
}

#[test]
fn a_known_test_is_ported_field_for_field() {
    // httproute-simple-same-namespace.go: one request to /, 200 from
    // infra-backend-v1 in gateway-conformance-infra, through Gateway
    // same-namespace.
    let t = read(&data().join("HTTPRouteSimpleSameNamespace.json"));
    assert_eq!(
        t["cases"],
        serde_json::json!([{
            "protocol": "http",
            "helper": "http.MakeRequestAndExpectEventuallyConsistentResponse",
            "Request": {"Path": "/"},
            "Response": {"StatusCode": 200},
            "Backend": "infra-backend-v1",
            "Namespace": "gateway-conformance-infra",
            // gwAddr := kubernetes.GatewayAndHTTPRoutesMustBeAccepted(...,
            // kubernetes.NewGatewayRef(gwNN), routeNN): the first listener.
            "gateway": {"Name": "same-namespace", "Namespace": "gateway-conformance-infra",
                        "Listener": "", "UsePort": true},
        }])
    );
    assert_eq!(t["provisional"], false);
    assert_eq!(
        t["gateways"],
        serde_json::json!([{"Name": "same-namespace", "Namespace": "gateway-conformance-infra"}])
    );
    assert_eq!(
        t["manifests"],
        serde_json::json!(["tests/httproute-simple-same-namespace.yaml"])
    );
    // GatewayAndHTTPRoutesMustBeAccepted is a check of its own, and the
    // route's ResolvedRefs condition another.
    let ns = "gateway-conformance-infra";
    assert_eq!(
        t["checks"],
        serde_json::json!([
            {
                "helper": "kubernetes.GatewayAndHTTPRoutesMustBeAccepted",
                "subtest": "",
                "arguments": [
                    {"Suite": "ControllerName"},
                    {"Name": "same-namespace", "Namespace": ns, "Listeners": []},
                    {"Name": "gateway-conformance-infra-test", "Namespace": ns},
                ],
            },
            {
                "helper": "kubernetes.HTTPRouteMustHaveResolvedRefsConditionsTrue",
                "subtest": "",
                "arguments": [
                    {"Name": "gateway-conformance-infra-test", "Namespace": ns},
                    {"Name": "same-namespace", "Namespace": ns},
                ],
            },
        ])
    );
    assert_eq!(t["unported_checks"], serde_json::json!([]));
}

#[test]
fn a_status_only_test_is_ported_field_for_field() {
    // gateway-invalid-route-kind.go: two sub-tests, each one listener
    // status of a Gateway, with a `(*v1.Group)(&v1.GroupVersion.Group)`
    // pointer and the condition constants by value.
    let t = read(&data().join("GatewayInvalidRouteKind.json"));
    let listener = |kinds: Value| {
        serde_json::json!([{
            "Name": "http",
            "SupportedKinds": kinds,
            "Conditions": [{"Type": "ResolvedRefs", "Status": "False", "Reason": "InvalidRouteKinds"}],
            "AttachedRoutes": 0,
        }])
    };
    let gateway =
        |name: &str| serde_json::json!({"Name": name, "Namespace": "gateway-conformance-infra"});
    assert_eq!(
        t["checks"],
        serde_json::json!([
            {
                "helper": "kubernetes.GatewayStatusMustHaveListeners",
                "subtest": "Gateway listener should have a false ResolvedRefs condition with reason InvalidRouteKinds and no supportedKinds",
                "arguments": [gateway("gateway-only-invalid-route-kind"), listener(serde_json::json!([]))],
            },
            {
                "helper": "kubernetes.GatewayStatusMustHaveListeners",
                "subtest": "Gateway listener should have a false ResolvedRefs condition with reason InvalidRouteKinds and HTTPRoute must be put in the supportedKinds",
                "arguments": [
                    gateway("gateway-supported-and-invalid-route-kind"),
                    listener(serde_json::json!([{"Group": "gateway.networking.k8s.io", "Kind": "HTTPRoute"}])),
                ],
            },
        ])
    );
    assert_eq!(t["cases"], serde_json::json!([]));
    let index = read(&data().join("index.json"));
    assert_eq!(index["tests"]["GatewayInvalidRouteKind"]["checks"], 2);
    assert!(index["unported"].get("GatewayInvalidRouteKind").is_none());
}

/// The script reads upstream files as data: a further test file of the same
/// format is ported the same way, and what it cannot evaluate is listed,
/// not guessed.
#[test]
fn a_further_test_file_is_ported_as_data() {
    let dir = tempfile::tempdir().unwrap();
    let up = dir.path().join("up");
    std::fs::create_dir_all(up.join("conformance/tests")).unwrap();
    std::fs::create_dir_all(up.join("conformance/base")).unwrap();
    std::fs::copy(
        upstream().join("conformance/base/manifests.yaml"),
        up.join("conformance/base/manifests.yaml"),
    )
    .unwrap();
    std::fs::write(up.join("conformance/tests/teapot-extra.yaml"), "{}\n").unwrap();
    std::fs::write(
        up.join("conformance/tests/teapot-extra.go"),
        r#"package tests

var TeapotExtra = confsuite.ConformanceTest{
	ShortName:   "TeapotExtra",
	Description: "further file",
	Features:    []features.FeatureName{features.SupportHTTPRoute},
	Manifests:   []string{"tests/teapot-extra.yaml"},
	Test: func(t *testing.T, suite *confsuite.ConformanceTestSuite) {
		ns := confsuite.InfrastructureNamespace
		gwNN := types.NamespacedName{Name: "same-namespace", Namespace: ns}
		cases := []http.ExpectedResponse{{
			Request:   http.Request{Host: "a." + "example.com", Path: `/raw`, Method: "POST"},
			Response:  http.Response{StatusCodes: []int{301, 302}},
			Backend:   confsuite.InfraBackendServiceNameV2,
			Namespace: ns,
		}, {
			Request:  http.Request{Path: fmt.Sprintf("/%s/%d", "v", 1)},
			Response: http.Response{StatusCode: 404},
		}, {
			Request:  http.Request{Path: fmt.Sprintf("/%d", runtime.NumCPU())},
			Response: http.Response{StatusCode: 404},
		}}
		for i := range cases {
			tc := cases[i]
			http.MakeRequestAndExpectEventuallyConsistentResponse(t, suite.RoundTripper, suite.TimeoutConfig, gwAddr, tc)
		}
	},
}

var TeapotExtraL4 = confsuite.ConformanceTest{
	ShortName:   "TeapotExtraL4",
	Features:    []features.FeatureName{features.SupportGateway, features.SupportTLSRoute},
	Manifests:   []string{"tests/teapot-extra.yaml"},
	Provisional: true,
	Test: func(t *testing.T, suite *confsuite.ConformanceTestSuite) {
		ns := confsuite.InfrastructureNamespace
		gwNN := types.NamespacedName{Name: "l4-gateway", Namespace: ns}
		routes := []types.NamespacedName{{Namespace: ns, Name: "route-a"}, {Namespace: ns, Name: "route-b"}}
		gwAddr, hostnames := kubernetes.GatewayAndTLSRoutesMustBeAccepted(t, suite.Client, suite.TimeoutConfig, suite.ControllerName,
			kubernetes.NewGatewayRef(gwNN, "tls"), routes...)
		serverStr := string(hostnames[1])
		portless := kubernetes.GatewayAndRoutesMustBeAccepted(t, suite.Client, suite.TimeoutConfig, suite.ControllerName,
			kubernetes.NewGatewayRef(gwNN), &gatewayv1.HTTPRoute{}, false, routes[0])
		tcp.MakeTCPRequestAndExpectEventuallyValidResponse(t, suite.TimeoutConfig, gwAddr, []byte(caString), serverStr, true,
			tcp.ExpectedResponse{BackendIsTLS: true, Backend: "tcp-backend", Namespace: ns, Hostname: serverStr})
		tcp.MakeTCPRequestAndExpectEventuallyValidResponse(t, suite.TimeoutConfig, gwAddr, nil, someName(), false,
			tcp.ExpectedResponse{Backend: "tcp-backend", Namespace: ns})
		http.MakeRequestAndExpectEventuallyConsistentResponse(t, suite.RoundTripper, suite.TimeoutConfig, portless,
			http.ExpectedResponse{Request: http.Request{Path: "/"}, Backend: "b", Namespace: ns})
	},
}
"#,
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    port(&up, &out_dir);
    let t = read(&out_dir.join("TeapotExtra.json"));
    assert_eq!(
        t["cases"],
        serde_json::json!([{
            "protocol": "http",
            "helper": "http.MakeRequestAndExpectEventuallyConsistentResponse",
            "Request": {"Host": "a.example.com", "Path": "/raw", "Method": "POST"},
            "Response": {"StatusCodes": [301, 302]},
            "Backend": "infra-backend-v2",
            "Namespace": "gateway-conformance-infra",
        }, {
            // fmt.Sprintf of known values is evaluated.
            "protocol": "http",
            "helper": "http.MakeRequestAndExpectEventuallyConsistentResponse",
            "Request": {"Path": "/v/1"},
            "Response": {"StatusCode": 404},
        }])
    );
    assert_eq!(t["features"], serde_json::json!(["SupportHTTPRoute"]));
    assert_eq!(t["gateways"][0]["Name"], "same-namespace");
    let unported = &t["unported_cases"][0];
    assert_eq!(unported["index"], 2);
    assert!(
        unported["reason"].as_str().unwrap().contains("fmt.Sprintf"),
        "{unported}"
    );

    // The Gateway a helper's gwAddr names, the plain arguments it passes,
    // and the routes' hostnames the TLS variant returns, as data.
    let l4 = read(&out_dir.join("TeapotExtraL4.json"));
    assert_eq!(l4["provisional"], true);
    let hostname = serde_json::json!({"RouteHostname": {
        "Routes": [
            {"Name": "route-a", "Namespace": "gateway-conformance-infra"},
            {"Name": "route-b", "Namespace": "gateway-conformance-infra"},
        ],
        "Index": 1,
    }});
    assert_eq!(
        l4["cases"],
        serde_json::json!([
            {
                "protocol": "tcp",
                "helper": "tcp.MakeTCPRequestAndExpectEventuallyValidResponse",
                "BackendIsTLS": true, "Backend": "tcp-backend",
                "Namespace": "gateway-conformance-infra", "Hostname": hostname,
                "gateway": {"Name": "l4-gateway", "Namespace": "gateway-conformance-infra",
                            "Listener": "tls", "UsePort": true},
                "arguments": {"serverName": hostname, "useTLS": true},
            },
            {
                "protocol": "http",
                "helper": "http.MakeRequestAndExpectEventuallyConsistentResponse",
                "Request": {"Path": "/"}, "Backend": "b",
                "Namespace": "gateway-conformance-infra",
                "gateway": {"Name": "l4-gateway", "Namespace": "gateway-conformance-infra",
                            "Listener": "", "UsePort": false},
            },
        ])
    );
    let unported = &l4["unported_cases"][0];
    assert_eq!(unported["index"], 1);
    assert!(
        unported["reason"]
            .as_str()
            .unwrap()
            .contains("argument serverName: someName()"),
        "{unported}"
    );
}

#[test]
fn a_client_certificate_test_is_ported_as_data() {
    let dir = tempfile::tempdir().unwrap();
    let up = dir.path().join("up");
    std::fs::create_dir_all(up.join("conformance/tests")).unwrap();
    std::fs::create_dir_all(up.join("conformance/base")).unwrap();
    std::fs::copy(
        upstream().join("conformance/base/manifests.yaml"),
        up.join("conformance/base/manifests.yaml"),
    )
    .unwrap();
    std::fs::write(up.join("conformance/tests/teapot-mtls.yaml"), "{}\n").unwrap();
    std::fs::write(
        up.join("conformance/tests/teapot-mtls.go"),
        r#"package tests

var TeapotMTLS = confsuite.ConformanceTest{
	ShortName: "TeapotMTLS",
	Manifests: []string{"tests/teapot-mtls.yaml"},
	Test: func(t *testing.T, suite *confsuite.ConformanceTestSuite) {
		ns := confsuite.InfrastructureNamespace
		gwNN := types.NamespacedName{Name: "mtls-gw", Namespace: ns}
		gwAddr := kubernetes.GatewayAndRoutesMustBeAccepted(t, suite.Client, suite.TimeoutConfig, suite.ControllerName, kubernetes.NewGatewayRef(gwNN), &gatewayv1.HTTPRoute{}, false, routeNNs...)
		certNN := types.NamespacedName{Name: "server-cert", Namespace: ns}
		serverCertPem, _, err := kubernetes.GetTLSSecret(suite.Client, certNN)
		clientNN := types.NamespacedName{Name: "client-cert", Namespace: ns}
		clientPem, clientKey, err := kubernetes.GetTLSSecret(suite.Client, clientNN)
		perPortAddr := net.JoinHostPort(gwAddr, "8443")
		expected := http.ExpectedResponse{
			Request:   http.Request{Host: "example.org", Path: "/"},
			Response:  http.Response{StatusCode: 200},
			Namespace: ns,
		}
		t.Run("with", func(t *testing.T) {
			tls.MakeTLSRequestAndExpectEventuallyConsistentResponse(t, suite.RoundTripper, suite.TimeoutConfig, perPortAddr, serverCertPem, clientPem, clientKey, "example.org", expected)
		})
		t.Run("without", func(t *testing.T) {
			tls.MakeTLSRequestAndExpectEventuallyConsistentResponse(t, suite.RoundTripper, suite.TimeoutConfig, perPortAddr, serverCertPem, nil, nil, "example.org", expected)
		})
		hostOnly, _, err := net.SplitHostPort(gwAddr)
		tls.MakeTLSRequestAndExpectEventuallyConsistentFailureResponse(t, suite.RoundTripper, suite.TimeoutConfig, hostOnly, serverCertPem, clientPem, loadKey(), "example.org",
			http.ExpectedResponse{Request: http.Request{Host: "example.org", Path: "/"}, Namespace: ns})
	},
}
"#,
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    port(&up, &out_dir);
    let t = read(&out_dir.join("TeapotMTLS.json"));
    let secret = |name: &str, key: &str| serde_json::json!({"Secret": {"Name": name, "Namespace": "gateway-conformance-infra"}, "Key": key});
    let gateway = serde_json::json!({"Name": "mtls-gw", "Namespace": "gateway-conformance-infra", "Listener": "", "UsePort": true, "Port": 8443});
    let cases = t["cases"].as_array().unwrap();
    // One literal, two calls: two cases, with and without the client
    // certificate, both at the port the test joined.
    assert_eq!(cases.len(), 2, "{cases:?}");
    assert_eq!(cases[0]["gateway"], gateway);
    assert_eq!(cases[1]["gateway"], gateway);
    assert_eq!(
        cases[0]["arguments"],
        serde_json::json!({
            "serverName": "example.org",
            "serverCertificate": secret("server-cert", "tls.crt"),
            "clientCertificate": secret("client-cert", "tls.crt"),
            "clientCertificateKey": secret("client-cert", "tls.key"),
        })
    );
    assert_eq!(
        cases[1]["arguments"],
        serde_json::json!({
            "serverName": "example.org",
            "serverCertificate": secret("server-cert", "tls.crt"),
        })
    );
    // A key computed at run time leaves the case unported, with why.
    let unported = t["unported_cases"].as_array().unwrap();
    assert_eq!(unported.len(), 1, "{unported:?}");
    assert!(
        unported[0]["reason"]
            .as_str()
            .unwrap()
            .contains("clientCertificateKey"),
        "{unported:?}"
    );
}

/// Writes one test file of the upstream format (and its manifest) into a
/// copy of the upstream layout, runs port.py on it and returns the data
/// file it made for `name`.
fn port_one(name: &str, file: &str, go: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let up = dir.path().join("up");
    std::fs::create_dir_all(up.join("conformance/tests")).unwrap();
    std::fs::create_dir_all(up.join("conformance/base")).unwrap();
    std::fs::copy(
        upstream().join("conformance/base/manifests.yaml"),
        up.join("conformance/base/manifests.yaml"),
    )
    .unwrap();
    std::fs::write(up.join(format!("conformance/tests/{file}.yaml")), "{}\n").unwrap();
    std::fs::write(up.join(format!("conformance/tests/{file}.go")), go).unwrap();
    let out_dir = dir.path().join("out");
    port(&up, &out_dir);
    let index = read(&out_dir.join("index.json"));
    let test = read(&out_dir.join(format!("{name}.json")));
    assert_eq!(
        index["tests"][name]["checks"],
        test["checks"].as_array().unwrap().len()
    );
    assert_eq!(
        index["tests"][name]["unported_checks"],
        test["unported_checks"].as_array().unwrap().len()
    );
    test
}

/// The status helpers a test calls are data too: each `kubernetes.*` call
/// with its sub-test and its arguments after `t`, the client and the
/// timeouts, evaluated (the suite imported as `suite` with the parameter
/// `s`, Gateway API constants by name, status structs with Go's zero
/// values, a package function and a local one, a `var (...)` block); a
/// check the reader cannot evaluate, or one after the test changed its
/// objects, is listed with the reason, not guessed.
#[test]
fn status_checks_are_ported_as_data() {
    let t = port_one(
        "TeapotStatus",
        "teapot-status",
        r#"package tests

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "sigs.k8s.io/gateway-api/apis/v1"
	h "sigs.k8s.io/gateway-api/conformance/utils/http"
	"sigs.k8s.io/gateway-api/conformance/utils/kubernetes"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
)

const routePrefix = "route-"

var TeapotStatus = suite.ConformanceTest{
	ShortName: "TeapotStatus",
	Manifests: []string{"tests/teapot-status.yaml"},
	Test: func(t *testing.T, s *suite.ConformanceTestSuite) {
		var (
			ns   = suite.InfrastructureNamespace
			gwNN = types.NamespacedName{Name: "status-gw", Namespace: ns}
		)
		routes := []types.NamespacedName{{Name: routePrefix + "a", Namespace: ns}, {Name: fmt.Sprintf("%sb", routePrefix), Namespace: ns}}
		kubernetes.NamespacesMustBeReady(t, s.Client, s.TimeoutConfig, []string{ns})
		kubernetes.GatewayAndRoutesMustBeAccepted(t, s.Client, s.TimeoutConfig, s.ControllerName, kubernetes.NewGatewayRef(gwNN, "http"), &v1.HTTPRoute{}, false, routes...)
		_, err := kubernetes.WaitForGatewayAddress(t, s.Client, s.TimeoutConfig, kubernetes.NewGatewayRef(gwNN))
		addr, err := kubernetes.WaitForGatewayAddress(t, s.Client, s.TimeoutConfig, kubernetes.NewGatewayRef(gwNN))
		h.MakeRequestAndExpectEventuallyConsistentResponse(t, s.RoundTripper, s.TimeoutConfig, addr, h.ExpectedResponse{
			Request:   h.Request{Path: "/"},
			Namespace: ns,
		})
		t.Run("listeners", func(t *testing.T) {
			kubernetes.GatewayStatusMustHaveListeners(t, s.Client, s.TimeoutConfig, gwNN, []v1.ListenerStatus{{
				Name:           v1.SectionName("http"),
				SupportedKinds: []v1.RouteGroupKind{{Group: (*v1.Group)(&v1.GroupVersion.Group), Kind: v1.Kind("HTTPRoute")}},
				Conditions:     acceptedConditions(),
			}})
			kubernetes.HTTPRouteMustHaveCondition(t, s.Client, s.TimeoutConfig, types.NamespacedName{Name: "route-a", Namespace: ns}, gwNN, metav1.Condition{
				Type:   string(v1.RouteConditionAccepted),
				Status: metav1.ConditionFalse,
				Reason: string(v1.RouteReasonNotAllowedByListeners),
			})
		})
		gwcNN := types.NamespacedName{Name: "class"}
		kubernetes.GatewayClassMustHaveLatestConditions(t, s.Client, s.TimeoutConfig, gwcNN)
		t.Run("other", func(t *testing.T) {
			gwNN := types.NamespacedName{Name: "other-gw", Namespace: ns}
			kubernetes.GatewayMustHaveZeroRoutes(t, s.Client, s.TimeoutConfig, gwNN)
		})
		parent := func(section string) v1.RouteParentStatus {
			return v1.RouteParentStatus{
				ParentRef:      v1.ParentReference{Name: v1.ObjectName(gwNN.Name), SectionName: new(v1.SectionName(section))},
				ControllerName: v1.GatewayController(s.ControllerName),
			}
		}
		kubernetes.HTTPRouteMustHaveParents(t, s.Client, s.TimeoutConfig, gwNN, []v1.RouteParentStatus{parent("http")}, true)
		policy := &v1.BackendTLSPolicy{}
		err = s.Client.Get(ctx, gwNN, policy)
		kubernetes.BackendTLSPolicyMustHaveLatestConditions(t, policy)
		kubernetes.ListenerSetMustHaveCondition(t, s.Client, s.TimeoutConfig, gwNN, currentCondition(t))
		err = s.Client.Update(ctx, gw)
		kubernetes.GatewayMustHaveLatestConditions(t, s.Client, s.TimeoutConfig, gwNN)
	},
}

func acceptedConditions() []metav1.Condition {
	return []metav1.Condition{{Type: string(v1.ListenerConditionAccepted), Status: metav1.ConditionTrue}}
}
"#,
    );
    let ns = "gateway-conformance-infra";
    let gw = serde_json::json!({"Name": "status-gw", "Namespace": ns});
    assert_eq!(
        t["checks"],
        serde_json::json!([
            {
                "helper": "kubernetes.GatewayAndRoutesMustBeAccepted",
                "subtest": "",
                "arguments": [
                    {"Suite": "ControllerName"},
                    {"Name": "status-gw", "Namespace": ns, "Listeners": ["http"]},
                    {"Kind": "HTTPRoute"},
                    false,
                    // The variadic route names, one argument each.
                    {"Name": "route-a", "Namespace": ns},
                    {"Name": "route-b", "Namespace": ns},
                ],
            },
            {
                // A bare WaitForGatewayAddress asserts an address; the one
                // whose address is kept is a case's Gateway, not a check.
                "helper": "kubernetes.WaitForGatewayAddress",
                "subtest": "",
                "arguments": [{"Name": "status-gw", "Namespace": ns, "Listeners": []}],
            },
            {
                "helper": "kubernetes.GatewayStatusMustHaveListeners",
                "subtest": "listeners",
                "arguments": [gw, [{
                    "Name": "http",
                    "SupportedKinds": [{"Group": "gateway.networking.k8s.io", "Kind": "HTTPRoute"}],
                    "Conditions": [{"Type": "Accepted", "Status": "True", "Reason": ""}],
                    "AttachedRoutes": 0,
                }]],
            },
            {
                "helper": "kubernetes.HTTPRouteMustHaveCondition",
                "subtest": "listeners",
                "arguments": [
                    {"Name": "route-a", "Namespace": ns},
                    gw,
                    {"Type": "Accepted", "Status": "False", "Reason": "NotAllowedByListeners"},
                ],
            },
            {
                // A GatewayClass's name, with Go's zero namespace (and no
                // Gateway of the test's).
                "helper": "kubernetes.GatewayClassMustHaveLatestConditions",
                "subtest": "",
                "arguments": [{"Name": "class", "Namespace": ""}],
            },
            {
                // The sub-test's own gwNN, which ends with it.
                "helper": "kubernetes.GatewayMustHaveZeroRoutes",
                "subtest": "other",
                "arguments": [{"Name": "other-gw", "Namespace": ns}],
            },
            {
                "helper": "kubernetes.HTTPRouteMustHaveParents",
                "subtest": "",
                "arguments": [gw, [{
                    "ParentRef": {"Group": null, "Kind": null, "Namespace": null, "Name": "status-gw",
                                  "SectionName": "http", "Port": null},
                    "ControllerName": {"Suite": "ControllerName"},
                    "Conditions": null,
                }], true],
            },
            {
                // An object the test read from the cluster, given whole:
                // the name it was read by.
                "helper": "kubernetes.BackendTLSPolicyMustHaveLatestConditions",
                "subtest": "",
                "arguments": [gw],
            },
        ])
    );
    let unported = t["unported_checks"].as_array().unwrap();
    let reasons: Vec<(&str, &str)> = unported
        .iter()
        .map(|u| (u["helper"].as_str().unwrap(), u["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(reasons.len(), 2, "{unported:?}");
    assert_eq!(reasons[0].0, "kubernetes.ListenerSetMustHaveCondition");
    assert!(reasons[0].1.contains("currentCondition(t)"), "{reasons:?}");
    // An update of an object the reader does not know is no step.
    assert_eq!(reasons[1].0, "kubernetes.GatewayMustHaveLatestConditions");
    assert!(
        reasons[1]
            .1
            .contains("Client.Update (gw is not an object the reader knows)"),
        "{reasons:?}"
    );
    assert!(t.get("steps").is_none(), "{t}");
    // The http helper package imported as `h`.
    assert_eq!(
        t["cases"],
        serde_json::json!([{
            "protocol": "http",
            "helper": "http.MakeRequestAndExpectEventuallyConsistentResponse",
            "Request": {"Path": "/"},
            "Namespace": ns,
            "gateway": {"Name": "status-gw", "Namespace": ns, "Listener": "", "UsePort": true},
        }])
    );
    assert_eq!(
        t["gateways"],
        serde_json::json!([gw, {"Name": "other-gw", "Namespace": ns}])
    );
}

/// A test that changes objects between its cases and checks is ported as
/// `steps`: a patch of a fetched object's DeepCopy (its field assignments
/// as JSON Patch operations, a filtering loop as `keep`), a deletion, an
/// object literal applied, a test-package function that patches through
/// the client it is given, and a value read from a fetched object; a
/// change of a value computed at run time leaves what follows unported.
#[test]
fn steps_are_ported_as_data() {
    let t = port_one(
        "TeapotSteps",
        "teapot-steps",
        r#"package tests

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/apis/v1alpha2"
	"sigs.k8s.io/gateway-api/conformance/utils/http"
	"sigs.k8s.io/gateway-api/conformance/utils/kubernetes"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
)

var TeapotSteps = suite.ConformanceTest{
	ShortName: "TeapotSteps",
	Manifests: []string{"tests/teapot-steps.yaml"},
	Test: func(t *testing.T, s *suite.ConformanceTestSuite) {
		ns := suite.InfrastructureNamespace
		gwNN := types.NamespacedName{Name: "gw", Namespace: ns}
		kubernetes.GatewayMustHaveLatestConditions(t, s.Client, s.TimeoutConfig, gwNN)
		original := &v1.Gateway{}
		err := s.Client.Get(ctx, gwNN, original)
		all := v1.NamespacesFromAll
		mutate := original.DeepCopy()
		mutate.Spec.Listeners = append(mutate.Spec.Listeners, v1.Listener{
			Name:          "extra",
			Hostname:      ptr.To[v1.Hostname]("foo.com"),
			Port:          80,
			Protocol:      v1.HTTPProtocolType,
			AllowedRoutes: &v1.AllowedRoutes{Namespaces: &v1.RouteNamespaces{From: &all}},
		})
		mutate.Spec.Listeners[0].Port = 8080
		err = s.Client.Patch(ctx, mutate, client.MergeFrom(original))
		kubernetes.GatewayMustHaveLatestConditions(t, s.Client, s.TimeoutConfig, gwNN)
		cm := &corev1.ConfigMap{}
		err = s.Client.Get(ctx, types.NamespacedName{Name: "ca", Namespace: ns}, cm)
		copied := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: ns},
			Data:       map[string]string{"ca.crt": cm.Data["ca.crt"]},
		}
		route := &v1alpha2.TCPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: "newer", Namespace: ns},
			Spec: v1alpha2.TCPRouteSpec{
				CommonRouteSpec: v1.CommonRouteSpec{ParentRefs: []v1.ParentReference{{Name: v1.ObjectName(gwNN.Name)}}},
				Rules: []v1alpha2.TCPRouteRule{{BackendRefs: []v1.BackendRef{{
					BackendObjectReference: v1.BackendObjectReference{Name: "b", Port: ptr.To(v1.PortNumber(3000))},
				}}}},
			},
		}
		s.Applier.MustApplyObjectsWithCleanup(t, s.Client, s.TimeoutConfig, []client.Object{copied, route}, s.CleanupTestResources)
		t.Run("after", func(t *testing.T) {
			http.MakeRequestAndExpectEventuallyConsistentResponse(t, s.RoundTripper, s.TimeoutConfig, "addr", http.ExpectedResponse{
				Request:  http.Request{Path: "/"},
				Response: http.Response{StatusCode: 500},
			})
		})
		emptyCA(ctx, t, s.Client, types.NamespacedName{Name: "copy", Namespace: ns})
		rg := v1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Name: "grant", Namespace: ns}}
		require.NoError(t, s.Client.Delete(ctx, &rg))
		current := &v1.Gateway{}
		err = s.Client.Get(ctx, gwNN, current)
		kept := current.DeepCopy()
		var only []v1.Listener
		for _, l := range kept.Spec.Listeners {
			if l.Name == "extra" {
				only = append(only, l)
			}
		}
		kept.Spec.Listeners = only
		err = s.Client.Patch(ctx, kept, client.MergeFrom(current))
		kubernetes.GatewayMustHaveLatestConditions(t, s.Client, s.TimeoutConfig, gwNN)
		odd := current.DeepCopy()
		odd.Spec.Addresses = filterAddr(current.Spec.Addresses)
		err = s.Client.Patch(ctx, odd, client.MergeFrom(current))
		kubernetes.GatewayMustHaveLatestConditions(t, s.Client, s.TimeoutConfig, gwNN)
	},
}

func emptyCA(ctx context.Context, t *testing.T, c client.Client, nn types.NamespacedName) {
	current := &corev1.ConfigMap{}
	err := c.Get(ctx, nn, current)
	patched := current.DeepCopy()
	patched.Data["ca.crt"] = ""
	err = c.Patch(ctx, patched, client.MergeFrom(current))
}

func filterAddr(addrs []v1.GatewaySpecAddress) (out []v1.GatewaySpecAddress) {
	for _, a := range addrs {
		out = append(out, a)
	}
	return
}
"#,
    );
    let ns = "gateway-conformance-infra";
    assert_eq!(t["checks"].as_array().unwrap().len(), 3, "{t}");
    assert_eq!(t["cases"].as_array().unwrap().len(), 1, "{t}");
    assert_eq!(
        t["steps"],
        serde_json::json!([
            {"check": 0},
            {"change": "patch", "kind": "Gateway", "namespace": ns, "name": "gw", "jsonPatch": [
                {"op": "add", "path": "/spec/listeners/-", "value": {
                    "name": "extra", "hostname": "foo.com", "port": 80, "protocol": "HTTP",
                    "allowedRoutes": {"namespaces": {"from": "All"}},
                }},
                {"op": "add", "path": "/spec/listeners/0/port", "value": 8080},
            ]},
            {"check": 1},
            {"change": "apply", "kind": "ConfigMap", "namespace": ns, "name": "copy", "object": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "copy", "namespace": ns},
                "data": {"ca.crt": {"FromObject": {"Kind": "ConfigMap", "Namespace": ns, "Name": "ca", "Path": "/data/ca.crt"}}},
            }},
            {"change": "apply", "kind": "TCPRoute", "namespace": ns, "name": "newer", "object": {
                "apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TCPRoute",
                "metadata": {"name": "newer", "namespace": ns},
                // Embedded structs inlined, nil pointers left out.
                "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "b", "port": 3000}]}]},
            }},
            {"case": 0},
            {"change": "patch", "kind": "ConfigMap", "namespace": ns, "name": "copy", "jsonPatch": [
                {"op": "add", "path": "/data/ca.crt", "value": ""},
            ]},
            {"change": "delete", "kind": "ReferenceGrant", "namespace": ns, "name": "grant"},
            {"change": "patch", "kind": "Gateway", "namespace": ns, "name": "gw", "jsonPatch": [
                {"op": "keep", "path": "/spec/listeners", "where": {"name": "extra"}},
            ]},
            {"check": 2},
        ])
    );
    let unported = t["unported_checks"].as_array().unwrap();
    assert_eq!(unported.len(), 1, "{unported:?}");
    let reason = unported[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains(
            "after Client.Patch (odd.Spec.Addresses is set to a value computed at run time"
        ),
        "{reason}"
    );
}

/// A list filtered by a function of the test package (a loop keeping the
/// elements whose member equals, or differs from, a value) is a step:
/// `keep` or `drop` of the elements with that member, its value data or
/// one the test read before its first change; a value read after a
/// change is not data (the runner reads values as the manifests held them
/// before the first step), so what follows it is unported.
#[test]
fn a_list_filtered_by_a_package_function_is_a_step() {
    let t = port_one(
        "TeapotFilter",
        "teapot-filter",
        r#"package tests

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gw1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/conformance/utils/kubernetes"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
)

var TeapotFilter = suite.ConformanceTest{
	ShortName: "TeapotFilter",
	Manifests: []string{"tests/teapot-filter.yaml"},
	Test: func(t *testing.T, s *suite.ConformanceTestSuite) {
		nn := types.NamespacedName{Name: "gw", Namespace: "gateway-conformance-infra"}
		live := &gw1.Gateway{}
		_ = s.Client.Get(ctx, nn, live)
		first := live.Spec.Addresses[0]
		next := live.DeepCopy()
		next.Spec.Addresses = without(live.Spec.Addresses, first)
		_ = s.Client.Patch(ctx, next, client.MergeFrom(live))
		kubernetes.GatewayMustHaveLatestConditions(t, s.Client, s.TimeoutConfig, nn)
		_ = s.Client.Get(ctx, nn, live)
		later := live.Spec.Addresses[0]
		next = live.DeepCopy()
		next.Spec.Listeners = onlyNamed(live.Spec.Listeners, "web")
		_ = s.Client.Patch(ctx, next, client.MergeFrom(live))
		kubernetes.GatewayMustHaveLatestConditions(t, s.Client, s.TimeoutConfig, nn)
		next = live.DeepCopy()
		next.Spec.Addresses = without(live.Spec.Addresses, later)
		_ = s.Client.Patch(ctx, next, client.MergeFrom(live))
		kubernetes.GatewayMustHaveLatestConditions(t, s.Client, s.TimeoutConfig, nn)
	},
}

func without(list []gw1.GatewaySpecAddress, gone gw1.GatewaySpecAddress) (kept []gw1.GatewaySpecAddress) {
	for _, each := range list {
		if gone.Value != each.Value {
			kept = append(kept, each)
		}
	}
	return kept
}

func onlyNamed(ls []gw1.Listener, name gw1.SectionName) []gw1.Listener {
	var out []gw1.Listener
	for _, l := range ls {
		if l.Name == name {
			out = append(out, l)
		}
	}
	return out
}
"#,
    );
    let ns = "gateway-conformance-infra";
    let gateway = serde_json::json!({"kind": "Gateway", "namespace": ns, "name": "gw"});
    let patch = |ops: Value| {
        let mut step = gateway.clone();
        step["change"] = "patch".into();
        step["jsonPatch"] = ops;
        step
    };
    assert_eq!(
        t["steps"],
        serde_json::json!([
            patch(serde_json::json!([{"op": "drop", "path": "/spec/addresses", "where": {"value":
                {"FromObject": {"Kind": "Gateway", "Namespace": ns, "Name": "gw", "Path": "/spec/addresses/0/value"}}}}])),
            {"check": 0},
            patch(serde_json::json!([{"op": "keep", "path": "/spec/listeners", "where": {"name": "web"}}])),
            {"check": 1},
        ]),
        "{t}"
    );
    let unported = t["unported_checks"].as_array().unwrap();
    assert_eq!(unported.len(), 1, "{unported:?}");
    let reason = unported[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("without compares with later, computed at run time"),
        "{reason}"
    );
}

/// A loop of captured round trips of a request `http.MakeRequest` made,
/// each judged on a request header the backend saw prefixing the pod's
/// name, is a case of its own (`http.CaptureRoundTrip`); a loop that
/// judges something else is unported with the reason.
#[test]
fn a_loop_of_captured_round_trips_is_a_case() {
    let t = port_one(
        "TeapotCapture",
        "teapot-capture",
        r#"package tests

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	h "sigs.k8s.io/gateway-api/conformance/utils/http"
	"sigs.k8s.io/gateway-api/conformance/utils/kubernetes"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
)

var TeapotCapture = suite.ConformanceTest{
	ShortName: "TeapotCapture",
	Manifests: []string{"tests/teapot-capture.yaml"},
	Test: func(t *testing.T, s *suite.ConformanceTestSuite) {
		gw := types.NamespacedName{Name: "teapot-gw", Namespace: "gateway-conformance-infra"}
		addr := kubernetes.GatewayAndHTTPRoutesMustBeAccepted(t, s.Client, s.TimeoutConfig, s.ControllerName, kubernetes.NewGatewayRef(gw), types.NamespacedName{Name: "r", Namespace: "gateway-conformance-infra"})
		want := h.ExpectedResponse{Request: h.Request{Path: "/split"}, Namespace: "gateway-conformance-infra"}
		probe := h.MakeRequest(t, &want, addr, "HTTP", "http")
		for k := 0; k < 7; k++ {
			seen, _, failed := s.RoundTripper.CaptureRoundTrip(probe)
			if failed != nil {
				t.Fatal(failed)
			}
			pods := seen.Headers["X-Pod"]
			if !strings.HasPrefix(seen.Pod, pods[0]) {
				t.Fatalf("wrong pod")
			}
		}
		for range 3 {
			seen, _, failed := s.RoundTripper.CaptureRoundTrip(probe)
			if failed != nil || seen.Path != "/split" {
				t.Fatal("odd")
			}
		}
	},
}
"#,
    );
    let cases = t["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2, "{t}");
    let capture = &cases[1];
    assert_eq!(capture["helper"], "http.CaptureRoundTrip", "{t}");
    assert_eq!(capture["Request"]["Path"], "/split");
    assert_eq!(capture["gateway"]["Name"], "teapot-gw");
    assert_eq!(
        capture["arguments"],
        serde_json::json!({"repeat": 7, "scheme": "http", "podPrefixHeader": "X-Pod", "oneValue": false})
    );
    let unported = t["unported_cases"].as_array().unwrap();
    assert_eq!(unported.len(), 1, "{t}");
    let reason = unported[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("the loop judges failed != nil || seen . Path != \"/split\""),
        "{reason}"
    );
}

// The checks upstream writes as code (not helper calls) are read into
// cases: a request whose expectation holds a value made anew per attempt,
// a WebSocket dial with its messages, a DNS exchange. The test file here
// is self-made, in the upstream format, with other names than the
// upstream tests use, so the reader is shown to follow the shapes, not
// the tests it was written against.

const GO: &str = r#"package tests

import (
	"bytes"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/miekg/dns"
	"golang.org/x/net/websocket"
	"k8s.io/apimachinery/pkg/types"

	h "sigs.k8s.io/gateway-api/conformance/utils/http"
	"sigs.k8s.io/gateway-api/conformance/utils/kubernetes"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"
)

var TeapotCode = suite.ConformanceTest{
	ShortName: "TeapotCode",
	Manifests: []string{"tests/teapot-code.yaml"},
	Features:  []features.FeatureName{features.SupportGateway},
	Test: func(t *testing.T, s *suite.ConformanceTestSuite) {
		ns := "gateway-conformance-infra"
		gw := types.NamespacedName{Name: "teapot-gw", Namespace: ns}
		addr := kubernetes.GatewayAndHTTPRoutesMustBeAccepted(t, s.Client, s.TimeoutConfig, s.ControllerName, kubernetes.NewGatewayRef(gw), types.NamespacedName{Name: "r", Namespace: ns})

		type probe struct {
			prefix string
			query  url.Values
		}
		probes := []struct {
			title string
			p     probe
			code  int
		}{
			{title: "flaky", p: probe{prefix: "/flaky", query: url.Values{"n": []string{"2"}, "a b": []string{"x&y"}}}, code: 200},
		}
		for k := range probes {
			one := probes[k]
			t.Run(fmt.Sprintf("%d %s", k, one.title), func(t *testing.T) {
				eachAttempt(t, s, addr, one.p.prefix, one.p.query, one.code)
			})
		}
		once := uuid.NewString()
		expected := h.ExpectedResponse{Request: h.Request{Path: "/once/" + once}, Namespace: ns}
		h.MakeRequestAndExpectEventuallyConsistentResponse(t, s.RoundTripper, s.TimeoutConfig, addr, expected)

		t.Run("socket", func(t *testing.T) {
			h.AwaitConvergence(t, s.TimeoutConfig, func(_ time.Duration) bool {
				conn, err := s.WebSocketDialer.Dial(fmt.Sprintf("ws://%s/echo", addr), "", "ws://origin/")
				if err != nil {
					return false
				}
				var (
					hello = "hi"
					back  string
				)
				if err := websocket.Message.Send(conn, hello); err != nil {
					return false
				}
				if err := websocket.Message.Receive(conn, &back); err != nil {
					return false
				}
				if hello != back {
					return false
				}
				var (
					raw   = []byte{9, 8}
					rawIn []byte
				)
				_ = websocket.Message.Send(conn, raw)
				_ = websocket.Message.Receive(conn, &rawIn)
				return bytes.Equal(rawIn, raw)
			})
		})
		t.Run("dns", func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion("teapot.example.", dns.TypeAAAA)
			_, _ = dns.Exchange(m, addr)
		})
		t.Run("socket not compared", func(t *testing.T) {
			c, _ := s.WebSocketDialer.Dial(fmt.Sprintf("ws://%s/x", addr), "", "ws://origin/")
			var got string
			_ = websocket.Message.Send(c, "ping")
			_ = websocket.Message.Receive(c, &got)
		})
	},
}

func eachAttempt(t *testing.T, s *suite.ConformanceTestSuite, addr string, prefix string, query url.Values, code int) {
	h.AwaitConvergence(t, s.TimeoutConfig, func(_ time.Duration) bool {
		query.Set("id", uuid.New().String())
		want := h.ExpectedResponse{
			Request:  h.Request{Path: prefix + "?" + query.Encode(), Headers: map[string]string{"X-Id": query.Get("id")}},
			Response: h.Response{StatusCode: code},
		}
		req := h.MakeRequest(t, &want, addr, "HTTP", "http")
		_ = req
		return true
	})
}
"#;

#[test]
fn checks_written_as_code_are_cases() {
    let t = port_one("TeapotCode", "teapot-code", GO);
    let cases = t["cases"].as_array().unwrap();
    let gateway = json!({"Name": "teapot-gw", "Namespace": "gateway-conformance-infra", "Listener": "", "UsePort": true});
    // The package function called per table row, with the row's fields:
    // the UUID made inside the poll is one per attempt, the same value in
    // the query (encoded as Go does: keys sorted, values escaped) and in
    // the header read back with `Get`.
    let flaky = &cases[0];
    assert_eq!(
        flaky["Request"],
        json!({"Path": "/flaky?a+b=x%26y&id={uuid.New().String()}&n=2", "Headers": {"X-Id": "{uuid.New().String()}"}})
    );
    assert_eq!(
        flaky["per_attempt"],
        json!({"{uuid.New().String()}": "uuid"})
    );
    assert!(flaky.get("per_case").is_none());
    assert_eq!(flaky["helper"], "http.MakeRequest");
    assert_eq!(flaky["Response"], json!({"StatusCode": 200}));
    assert_eq!(flaky["gateway"], gateway);
    // The UUID made once, outside any poll: once per case.
    let once = &cases[1];
    assert_eq!(
        once["helper"],
        "http.MakeRequestAndExpectEventuallyConsistentResponse"
    );
    assert_eq!(once["Request"]["Path"], "/once/{uuid.NewString()}");
    assert_eq!(once["per_case"], json!({"{uuid.NewString()}": "uuid"}));
    assert!(once.get("per_attempt").is_none());
    // The WebSocket dial inside AwaitConvergence, both replies compared.
    assert_eq!(
        cases[2],
        json!({
            "protocol": "websocket", "helper": "websocket.Dial", "subtest": "socket",
            "gateway": gateway, "Request": {"Path": "/echo"},
            "arguments": {"messages": [{"Text": "hi"}, {"Binary": [9, 8]}], "poll": "http.AwaitConvergence"},
        })
    );
    // The DNS exchange, run once (no poll around it).
    assert_eq!(
        cases[3],
        json!({
            "protocol": "udp", "helper": "dns.Exchange", "subtest": "dns", "gateway": gateway,
            "arguments": {"question": {"Name": "teapot.example.", "Type": "AAAA"}},
        })
    );
    assert_eq!(cases.len(), 4, "{cases:?}");
    // A dial whose reply is not compared with what was sent is not a
    // check: the case is left unported, with why.
    let unported = t["unported_cases"].as_array().unwrap();
    assert_eq!(unported.len(), 1, "{unported:?}");
    assert!(
        unported[0]["reason"]
            .as_str()
            .unwrap()
            .contains("the reply to message 0 is not compared"),
        "{unported:?}"
    );
}

/// EndpointSlices filled with the pods a test lists (HTTPRouteServiceTypes'
/// `setupEndpointSlices`, in another shape): `Client.List` with its
/// namespace and labels, `patch := client.MergeFrom(obj.DeepCopy())`, a
/// loop over the listed pods and their IPs appending to the object's list
/// (`forEach`), the IP family a method expression passed in (`where`), the
/// patch skipped when nothing was appended (`when`); a loop body with a
/// statement the reader does not read leaves the cases after it unported.
#[test]
fn endpoint_slices_of_listed_pods_are_a_step() {
    let go = |name: &str, extra: &str| {
        format!(
            r#"package tests

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/gateway-api/conformance/utils/http"
	"sigs.k8s.io/gateway-api/conformance/utils/kubernetes"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
)

var {name} = suite.ConformanceTest{{
	ShortName: "{name}",
	Manifests: []string{{"tests/teapot-slices.yaml"}},
	Test: func(t *testing.T, s *suite.ConformanceTestSuite) {{
		ns := "gateway-conformance-infra"
		gwNN := types.NamespacedName{{Name: "same-namespace", Namespace: ns}}
		gwAddr := kubernetes.GatewayAndHTTPRoutesMustBeAccepted(t, s.Client, s.TimeoutConfig, s.ControllerName, kubernetes.NewGatewayRef(gwNN), types.NamespacedName{{Name: "r", Namespace: ns}})
		pods := &corev1.PodList{{}}
		_ = s.Client.List(context.TODO(), pods, client.InNamespace(ns), client.MatchingLabels{{"app": "infra-backend-v2"}})
		fill(t, s.Client, []string{{"mine-v4"}}, ns, pods, netip.Addr.Is4)
		http.MakeRequestAndExpectEventuallyConsistentResponse(t, s.RoundTripper, s.TimeoutConfig, gwAddr, http.ExpectedResponse{{
			Request: http.Request{{Path: "/mine"}}, Backend: "infra-backend-v2", Namespace: ns,
		}})
	}},
}}

func fill(t *testing.T, c client.Client, names []string, ns string, pods *corev1.PodList, family func(netip.Addr) bool) {{
	for _, name := range names {{
		slice := &discoveryv1.EndpointSlice{{}}
		_ = c.Get(context.TODO(), client.ObjectKey{{Name: name, Namespace: ns}}, slice)
		patch := client.MergeFrom(slice.DeepCopy())
		for _, p := range pods.Items {{
			for _, a := range p.Status.PodIPs {{
				ip, _ := netip.ParseAddr(a.IP)
				if !family(ip) {{
					continue
				}}
				{extra}
				slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{{
					Addresses: []string{{a.IP}},
					TargetRef: &corev1.ObjectReference{{Name: p.GetName(), UID: p.GetUID()}},
				}})
			}}
		}}
		if len(slice.Endpoints) == 0 {{
			continue
		}}
		_ = c.Patch(context.TODO(), slice, patch)
	}}
}}
"#
        )
    };
    let t = port_one("TeapotSlices", "teapot-slices", &go("TeapotSlices", ""));
    let ns = "gateway-conformance-infra";
    let each = |var: &str, path: &str| serde_json::json!({"Each": var, "Path": path});
    assert_eq!(
        t["steps"],
        serde_json::json!([
            {"check": 0},
            {"change": "patch", "kind": "EndpointSlice", "namespace": ns, "name": "mine-v4",
             "jsonPatch": [{
                "op": "add", "path": "/endpoints/-",
                "forEach": [
                    {"Each": "p", "In": {"List": {"Kind": "Pod", "Namespace": ns,
                        "Selector": {"matchLabels": {"app": "infra-backend-v2"}}}}},
                    {"Each": "a", "In": each("p", "/status/podIPs")},
                ],
                "where": [{"Func": "netip.Addr.Is4", "Args": [each("a", "/ip")]}],
                "value": {"addresses": [each("a", "/ip")],
                          "targetRef": {"name": each("p", "/metadata/name"), "uid": each("p", "/metadata/uid")}},
             }],
             "when": {"NotEmpty": "/endpoints"}},
            {"case": 0},
        ]),
        "{t}"
    );
    assert_eq!(t["cases"][0]["Request"]["Path"], "/mine");
    assert_eq!(t["unported_cases"], serde_json::json!([]));

    let t = port_one(
        "TeapotSlicesCounted",
        "teapot-slices",
        &go("TeapotSlicesCounted", "seen++"),
    );
    assert!(t.get("steps").is_none(), "{t}");
    let unported = t["unported_cases"].as_array().unwrap();
    assert_eq!(unported.len(), 1, "{t}");
    let reason = unported[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("seen ++") && reason.contains("not read in a loop over run-time values"),
        "{reason}"
    );
}
