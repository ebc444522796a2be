//! The Gateway API conformance runner against the real `teapot` binary:
//!
//! - every ported test of `conformance/gateway/data` runs (its manifests
//!   load, its echo backends and proxy start, every case is judged), except
//!   the ones `conformance/gateway/out-of-scope.txt` names with a reason,
//!   and a score is printed; the tests of `conformance/gateway/expected-pass.txt`
//!   pass;
//! - a self-made test file of the same format (not upstream) runs through
//!   the same code, which shows the runner treats the files as data; a
//!   self-made L4 file's cases go to their Gateway's own pool address;
//! - the binary writes the upstream-format report where `--report` says.
//!
//! The binary is `$TEAPOT_BIN` when set; otherwise it is built first (see
//! `common`).

// `common::run_all` serves the Ingress suites.
#[allow(dead_code)]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use teapot_conformance::gateway::{self, Options, RunConfig, TestResult};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn upstream() -> PathBuf {
    crate_dir().join("../../shared/conformance-upstream/gateway-api/conformance")
}

fn names_in(list: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(list)
        .unwrap_or_else(|e| panic!("reading {}: {e}", list.display()))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
        .collect()
}

fn options(paths: Vec<PathBuf>, upstream: PathBuf, skip: BTreeMap<String, String>) -> Options {
    Options {
        config: RunConfig {
            teapot: common::teapot(),
            upstream,
            keep: false,
            // Short: the proxy has its snapshot before the first request, so
            // a passing case passes at once; failing cases wait this long.
            case_timeout: Duration::from_secs(2),
            parallel: 16,
            proxy_args: gateway::DEFAULT_PROXY_ARGS
                .iter()
                .map(|a| a.to_string())
                .collect(),
            l4_pool: gateway::DEFAULT_L4_POOL.to_string(),
        },
        filter: None,
        skip,
        paths,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ported_test_runs_and_the_expected_ones_pass() {
    let data = crate_dir().join("gateway/data");
    assert!(
        upstream().join("base/manifests.yaml").is_file(),
        "the upstream Gateway API conformance files are missing: {}",
        upstream().display()
    );
    let skip = gateway::read_skip_list(&crate_dir().join("gateway/out-of-scope.txt")).unwrap();
    let expected_pass = names_in(&crate_dir().join("gateway/expected-pass.txt"));

    let mut ported = BTreeMap::new();
    for file in gateway::data::discover(std::slice::from_ref(&data)).unwrap() {
        let test = gateway::data::TestFile::load(&file).unwrap();
        ported.insert(test.name.clone(), test.cases.len());
    }
    for name in skip.keys().chain(&expected_pass) {
        // `<Test>#<case>` skips one case: the test must have it.
        let (test, case) = match name.split_once('#') {
            Some((test, case)) => (test, Some(case.parse::<usize>().unwrap())),
            None => (name.as_str(), None),
        };
        let cases = ported.get(test);
        assert!(
            cases.is_some_and(|&n| case.is_none_or(|c| c < n)),
            "{name} is listed but is no test or case of {}",
            data.display()
        );
    }
    for name in &expected_pass {
        assert!(
            !skip.contains_key(name),
            "{name} is both expected to pass and skipped"
        );
    }

    let summary = gateway::run(&options(vec![data], upstream(), skip.clone()), |o| {
        println!("{}", o.line())
    })
    .await
    .unwrap();
    let [tests_line, cases_line, checks_line] = summary.closing_lines();
    println!("{tests_line}\n{cases_line}\n{checks_line}");
    assert!(tests_line.starts_with("tests: ") && tests_line.contains(" passed, "));
    assert!(cases_line.starts_with("cases: ") && cases_line.contains(" passed, "));

    let outcomes: BTreeMap<&str, &gateway::TestOutcome> = summary
        .outcomes
        .iter()
        .map(|o| (o.name.as_str(), o))
        .collect();
    assert_eq!(
        outcomes
            .keys()
            .map(|k| k.to_string())
            .collect::<BTreeSet<_>>(),
        ported.keys().cloned().collect::<BTreeSet<_>>(),
        "one outcome per ported test"
    );
    let mut problems = Vec::new();
    for (name, cases) in &ported {
        let outcome = outcomes[name.as_str()];
        match &outcome.result {
            TestResult::Skipped(_) if skip.contains_key(name) => {}
            TestResult::Empty(_) if *cases == 0 => {}
            TestResult::Ran(ran)
                if !skip.contains_key(name)
                    && ran.len() + gateway::skipped_cases(&skip, name).len() == *cases =>
            {
                for case in ran {
                    if case.failure.as_deref() == Some("") {
                        problems.push(format!("{name}: {} failed without a reason", case.name));
                    }
                }
            }
            _ => problems.push(format!(
                "{name} did not run as it should: {}",
                outcome.line()
            )),
        }
        if expected_pass.contains(name) && outcome.passed() != Some(true) {
            problems.push(format!("expected to pass: {}", outcome.line()));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

const SELF_MADE_BASE: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: self-made
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: self-gateway
  namespace: self-made
spec:
  gatewayClassName: "{GATEWAY_CLASS_NAME}"
  listeners:
  - name: http
    port: 80
    protocol: HTTP
---
apiVersion: v1
kind: Service
metadata:
  name: self-backend
  namespace: self-made
spec:
  selector:
    app: self-backend
  ports:
  - name: web
    port: 8080
    targetPort: 3000
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: self-backend
  namespace: self-made
spec:
  replicas: 2
  selector:
    matchLabels:
      app: self-backend
  template:
    metadata:
      labels:
        app: self-backend
    spec:
      containers:
      - name: echo
        image: echo-basic
"#;

/// Not a Gateway API test: an Ingress (which teapot serves today) next to an
/// HTTPRoute, so the echo pods behind the Deployment answer either way.
const SELF_MADE_TEST: &str = r#"
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: self-class
spec:
  controller: teapot.dev/ingress-controller
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: self-ingress
  namespace: self-made
spec:
  ingressClassName: self-class
  rules:
  - host: ingress.self-made.example
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: self-backend
            port:
              name: web
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: self-route
  namespace: self-made
spec:
  parentRefs:
  - name: self-gateway
  hostnames:
  - route.self-made.example
  rules:
  - backendRefs:
    - name: self-backend
      port: 8080
"#;

const SELF_MADE_DATA: &str = r#"{
  "name": "SelfMadeIngressAndRoute",
  "description": "not upstream: a file of the same format",
  "manifests": ["tests/self-made.yaml"],
  "gateways": [{"Name": "self-gateway", "Namespace": "self-made"}],
  "features": ["SupportGateway", "SupportHTTPRoute"],
  "cases": [
    {"Request": {"Host": "ingress.self-made.example", "Path": "/hello?x=1",
                 "Headers": {"x-probe": "one"}},
     "ExpectedRequest": {"Request": {"Path": "/hello?x=1", "Headers": {"X-Probe": "one"}},
                         "AbsentHeaders": ["X-Never"]},
     "BackendSetResponseHeaders": {"X-From-Backend": "set"},
     "Response": {"Headers": {"X-From-Backend": "set"}},
     "Backend": "self-backend", "Namespace": "self-made",
     "helper": "http.MakeRequestAndExpectEventuallyConsistentResponse", "protocol": "http"},
    {"Request": {"Host": "nowhere.self-made.example", "Path": "/"},
     "Response": {"StatusCode": 404},
     "helper": "http.MakeRequestAndExpectEventuallyConsistentResponse", "protocol": "http"},
    {"Request": {"Host": "ingress.self-made.example", "Path": "/"},
     "Backend": "another-backend", "Namespace": "self-made",
     "helper": "http.MakeRequestAndExpectEventuallyConsistentResponse", "protocol": "http"},
    {"Request": {"Path": "/"}, "helper": "http.MakeRequestTheNewWay", "protocol": "http"},
    {"Request": {"Host": "route.self-made.example", "Path": "/"},
     "Backend": "self-backend", "Namespace": "self-made",
     "helper": "http.MakeRequestAndExpectEventuallyConsistentResponse", "protocol": "http"}
  ],
  "unported_cases": []
}"#;

/// The proxy's arguments without `--gateway-own-addresses`: Gateways that
/// ask for no address share the fleet's listeners.
fn shared_listeners(options: &mut Options) {
    options.config.proxy_args = vec!["--h2c".into()];
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_made_test_file_is_run_as_data() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = dir.path().join("upstream");
    std::fs::create_dir_all(upstream.join("base")).unwrap();
    std::fs::create_dir_all(upstream.join("tests")).unwrap();
    std::fs::write(upstream.join("base/manifests.yaml"), SELF_MADE_BASE).unwrap();
    std::fs::write(upstream.join("tests/self-made.yaml"), SELF_MADE_TEST).unwrap();
    let data = dir.path().join("SelfMade.json");
    std::fs::write(&data, SELF_MADE_DATA).unwrap();

    // On the fleet's shared listeners, where the Ingress and the Gateway
    // that asks for no address (its HTTPRoute, the last case) are both
    // served.
    let mut options = options(vec![data], upstream, BTreeMap::new());
    shared_listeners(&mut options);
    let summary = gateway::run(&options, |o| println!("{}", o.line()))
        .await
        .unwrap();
    assert_eq!(summary.outcomes.len(), 1);
    let outcome = &summary.outcomes[0];
    assert_eq!(outcome.name, "SelfMadeIngressAndRoute");
    let TestResult::Ran(cases) = &outcome.result else {
        panic!("the self-made test did not run: {}", outcome.line());
    };
    let failures: Vec<Option<&str>> = cases.iter().map(|c| c.failure.as_deref()).collect();
    assert_eq!(failures[0], None, "{}", outcome.line());
    assert_eq!(failures[1], None, "{}", outcome.line());
    assert!(
        failures[2]
            .is_some_and(|f| f
                .starts_with("expected pod name to start with another-backend, got self-backend-")),
        "{failures:?}"
    );
    assert_eq!(
        failures[3],
        Some("helper http.MakeRequestTheNewWay (http case) is not supported by this runner")
    );
    assert_eq!(failures[4], None, "{}", outcome.line());
    assert_eq!(
        cases[0].name,
        "0 request to 'ingress.self-made.example/hello?x=1' with headers should go to self-backend"
    );
    assert!(
        outcome.line().starts_with(
            "FAIL SelfMadeIngressAndRoute: 3/5 cases — 2 request to 'ingress.self-made.example/' should go to another-backend: "
        ),
        "{}",
        outcome.line()
    );
    assert_eq!(summary.closing_lines()[1], "cases: 3 passed, 2 failed");
}

const SELF_MADE_L4: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: self-l4
  namespace: gateway-conformance-infra
spec:
  gatewayClassName: "{GATEWAY_CLASS_NAME}"
  listeners:
  - name: tcp
    protocol: TCP
    port: 7001
    allowedRoutes:
      kinds:
      - kind: TCPRoute
  - name: udp
    protocol: UDP
    port: 7002
    allowedRoutes:
      kinds:
      - kind: UDPRoute
  - name: tls
    protocol: TLS
    port: 7443
    hostname: abc.example.com
    tls:
      mode: Passthrough
    allowedRoutes:
      kinds:
      - kind: TLSRoute
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata:
  name: self-tcp
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: self-l4
    sectionName: tcp
  rules:
  - backendRefs:
    - name: self-tcp-echo
      port: 3000
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata:
  name: self-udp
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: self-l4
    sectionName: udp
  rules:
  - backendRefs:
    - name: self-udp-echo
      port: 8080
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata:
  name: self-tls
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: self-l4
    sectionName: tls
  hostnames:
  - abc.example.com
  rules:
  - backendRefs:
    - name: self-tcp-echo
      port: 8443
---
apiVersion: v1
kind: Service
metadata:
  name: self-tcp-echo
  namespace: gateway-conformance-infra
spec:
  selector:
    app: self-tcp-echo
  ports:
  - name: plain
    port: 3000
    targetPort: 3000
  - name: tls
    port: 8443
    targetPort: 8443
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: self-tcp-echo
  namespace: gateway-conformance-infra
spec:
  replicas: 1
  selector:
    matchLabels:
      app: self-tcp-echo
  template:
    metadata:
      labels:
        app: self-tcp-echo
    spec:
      containers:
      - name: echo
        image: echo-basic
        env:
        - name: TCP_ECHO_SERVER
          value: "1"
        - name: TLS_SERVER_CERT
          value: /etc/secret-volume/crt
      volumes:
      - name: secret-volume
        secret:
          secretName: tls-passthrough-checks-certificate
---
apiVersion: v1
kind: Service
metadata:
  name: self-udp-echo
  namespace: gateway-conformance-infra
spec:
  selector:
    app: self-udp-echo
  ports:
  - protocol: UDP
    port: 8080
    targetPort: 8080
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: self-udp-echo
  namespace: gateway-conformance-infra
spec:
  replicas: 1
  selector:
    matchLabels:
      app: self-udp-echo
  template:
    metadata:
      labels:
        app: self-udp-echo
    spec:
      containers:
      - name: echo
        image: echo-basic
        env:
        - name: UDP_ECHO_SERVER
          value: "1"
"#;

const SELF_MADE_L4_DATA: &str = r#"{
  "name": "SelfMadeL4",
  "manifests": ["tests/self-made-l4.yaml"],
  "gateways": [{"Name": "self-l4", "Namespace": "gateway-conformance-infra"}],
  "features": ["SupportGateway", "SupportTCPRoute"],
  "cases": [
    {"Backend": "self-tcp-echo", "Namespace": "gateway-conformance-infra",
     "gateway": {"Name": "self-l4", "Namespace": "gateway-conformance-infra", "Listener": "tcp"},
     "arguments": {"serverName": "", "useTLS": false},
     "helper": "tcp.MakeTCPRequestAndExpectEventuallyValidResponse", "protocol": "tcp"},
    {"Backend": "self-tcp-echo", "Namespace": "gateway-conformance-infra", "BackendIsTLS": true,
     "Hostname": {"RouteHostname": {"Routes": [{"Name": "self-tls", "Namespace": "gateway-conformance-infra"}], "Index": 0}},
     "gateway": {"Name": "self-l4", "Namespace": "gateway-conformance-infra", "Listener": "tls"},
     "arguments": {"serverName": "abc.example.com", "useTLS": true},
     "helper": "tcp.MakeTCPRequestAndExpectEventuallyValidResponse", "protocol": "tcp"},
    {"Service": "self-udp-echo", "Namespace": "gateway-conformance-infra",
     "gateway": {"Name": "self-l4", "Namespace": "gateway-conformance-infra", "Listener": "udp"},
     "helper": "udp.ExpectEchoResponseFromBackend", "protocol": "udp"},
    {"Backend": "another-echo", "Namespace": "gateway-conformance-infra",
     "gateway": {"Name": "self-l4", "Namespace": "gateway-conformance-infra", "Listener": "tcp"},
     "helper": "tcp.MakeTCPRequestAndExpectEventuallyValidResponse", "protocol": "tcp"},
    {"Backend": "self-tcp-echo", "Namespace": "gateway-conformance-infra",
     "gateway": {"Name": "same-namespace", "Namespace": "gateway-conformance-infra"},
     "helper": "tcp.MakeTCPRequestAndExpectEventuallyValidResponse", "protocol": "tcp"}
  ],
  "unported_cases": []
}"#;

/// A self-made file of the same format with L4 cases: each goes to its
/// Gateway's own address from the L4 pool, at the listener it names, and
/// is judged as the upstream TCP and UDP helpers judge (echo-basic's TCP
/// dialogue in the clear and through TLS passthrough, the UDP echo's
/// backend); a Gateway that shows only the fleet's address gets no L4
/// case. The report counts the test in GATEWAY-TCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l4_cases_go_to_their_gateways_own_address() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = dir.path().join("upstream");
    std::fs::create_dir_all(upstream.join("base")).unwrap();
    std::fs::create_dir_all(upstream.join("tests")).unwrap();
    std::fs::copy(
        self::upstream().join("base/manifests.yaml"),
        upstream.join("base/manifests.yaml"),
    )
    .unwrap();
    std::fs::write(upstream.join("tests/self-made-l4.yaml"), SELF_MADE_L4).unwrap();
    let data = dir.path().join("SelfMadeL4.json");
    std::fs::write(&data, SELF_MADE_L4_DATA).unwrap();

    let mut options = options(vec![data], upstream, BTreeMap::new());
    // Not the pool of the suite's test, which may run at the same time.
    options.config.l4_pool = "127.49.0.0/24".into();
    // The base Gateway same-namespace (HTTP on 80) asks for no address:
    // on the shared listeners it has only the fleet's.
    shared_listeners(&mut options);
    let summary = gateway::run(&options, |o| println!("{}", o.line()))
        .await
        .unwrap();
    let outcome = &summary.outcomes[0];
    let TestResult::Ran(cases) = &outcome.result else {
        panic!("the self-made L4 test did not run: {}", outcome.line());
    };
    let failures: Vec<Option<&str>> = cases.iter().map(|c| c.failure.as_deref()).collect();
    assert_eq!(failures[..3], [None, None, None], "{failures:?}");
    assert!(
        failures[3]
            .is_some_and(|f| f
                .starts_with("backend name does not match with pod prefix. pod=self-tcp-echo-")),
        "{failures:?}"
    );
    assert!(
        failures[4].is_some_and(|f| f.starts_with(
            "Gateway gateway-conformance-infra/same-namespace shows no address of its own"
        )),
        "{failures:?}"
    );

    let meta = gateway::report::Meta {
        implementation: gateway::report::Implementation {
            organization: "o".into(),
            project: "p".into(),
            url: "u".into(),
            version: "v".into(),
            contact: vec!["c".into()],
        },
        date: "d".into(),
        gateway_api_version: "v".into(),
        gateway_api_channel: "c".into(),
        mode: "default".into(),
    };
    let report = gateway::report::report(&summary.outcomes, &meta);
    let profiles = report["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), 1, "{report}");
    assert_eq!(profiles[0]["name"], "GATEWAY-TCP");
    assert_eq!(profiles[0]["core"]["failedTests"][0], "SelfMadeL4");
}

/// `--report FILE` writes the upstream-format report of the run and says
/// where; a test whose setup failed is a core failure of its profile.
#[test]
fn the_binary_writes_the_report_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = dir.path().join("upstream");
    std::fs::create_dir_all(upstream.join("base")).unwrap();
    std::fs::create_dir_all(upstream.join("tests")).unwrap();
    std::fs::write(upstream.join("base/manifests.yaml"), SELF_MADE_BASE).unwrap();
    std::fs::write(upstream.join("tests/self-made.yaml"), SELF_MADE_TEST).unwrap();
    let data = dir.path().join("SelfMade.json");
    std::fs::write(&data, SELF_MADE_DATA).unwrap();
    let report = dir.path().join("report.yaml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_teapot-gateway-conformance"))
        .arg("--teapot")
        .arg(dir.path().join("no-teapot"))
        .arg("--upstream")
        .arg(&upstream)
        .arg("--crds")
        .arg(
            crate_dir()
                .join("../../shared/conformance-upstream/gateway-api/config/crd/experimental"),
        )
        .arg("--report")
        .arg(&report)
        .arg("--report-only")
        .arg(&data)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("report: {}", report.display())),
        "{stdout}"
    );
    let written: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(written["apiVersion"], "gateway.networking.k8s.io/v1");
    assert_eq!(written["kind"], "ConformanceReport");
    assert_eq!(written["implementation"]["project"], "teapot");
    assert_eq!(written["gatewayAPIChannel"], "experimental");
    let profile = &written["profiles"][0];
    assert_eq!(profile["name"], "GATEWAY-HTTP");
    assert_eq!(profile["core"]["result"], "failure");
    assert_eq!(profile["core"]["failedTests"][0], "SelfMadeIngressAndRoute");
    assert_eq!(profile["core"]["statistics"]["Failed"], 1);
}
