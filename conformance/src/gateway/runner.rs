//! One test: a manifests directory, echo processes, a proxy, and every case
//! judged as its upstream helper does.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use teapot_testkit::client::{self, Proto, Request, Response, Transport};
use teapot_testkit::echo::{EchoIdentity, EchoServer, canonical_header_name};
use teapot_testkit::process::ProxyProcess;
use tokio::time::{Instant, sleep};

use super::data::{Case, TestFile};
use super::grpc::{self, GrpcCase, GrpcEchoServer};
use super::judge::{self, CapturedRequest, CapturedResponse, SentRequest};
use super::manifests::{self, Backend, Prepared};
use crate::admin::Status;

/// The upstream Go client's User-Agent.
const USER_AGENT: &str = "Go-http-client/1.1";
/// Per-request timeout (`RequestTimeout` upstream).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Between attempts (`DefaultPollInterval`).
const POLL: Duration = Duration::from_millis(100);
/// `RequiredConsecutiveSuccesses`.
const CONSECUTIVE_SUCCESSES: usize = 3;
/// How long the proxy may take to show its first snapshot.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(20);
/// Redirects followed when the case does not say `UnfollowRedirect`.
const MAX_REDIRECTS: usize = 10;
/// The query parameter `AddRequestIDQueryParam` adds to mirrored requests.
const REQUEST_ID_PARAM: &str = "gateway-api-conformance-request-id";
/// What the Host header says when the case names no host: the Gateway's
/// address as `http.CalculateHost` writes it for port 80 and 443 (without
/// port); the proxy's listeners stand in for those ports.
const GATEWAY_ADDRESS: &str = "127.0.0.1";

/// How a test run behaves.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub teapot: PathBuf,
    /// Upstream `conformance/` (holds `base/manifests.yaml` and `tests/`).
    pub upstream: PathBuf,
    pub keep: bool,
    /// How long one case may take to become consistent.
    pub case_timeout: Duration,
    /// Cases of one test in flight at once (upstream runs them in parallel).
    pub parallel: usize,
    /// Added to `teapot proxy --manifests DIR --http ... --https ... --admin ...`.
    pub proxy_args: Vec<String>,
}

/// The proxy's arguments beyond the listeners: cleartext HTTP/2 on the
/// plain listener, which the gRPC clients and the H2C test speak (prior
/// knowledge), as a Gateway serving GRPCRoutes must accept.
pub const DEFAULT_PROXY_ARGS: &[&str] = &["--h2c"];

/// One case's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseOutcome {
    pub name: String,
    pub failure: Option<String>,
}

/// One echo process and the pod it plays: echo-basic's HTTP echo, or its
/// gRPC echo when the Deployment sets `GRPC_ECHO_SERVER`.
enum Pod {
    Http(EchoServer),
    Grpc(GrpcEchoServer),
}

impl Pod {
    fn addr(&self) -> SocketAddr {
        match self {
            Pod::Http(echo) => echo.addr(),
            Pod::Grpc(echo) => echo.addr(),
        }
    }

    /// The port a Service port reaches: echo-basic's TLS listener for
    /// `targetPort: 8443` when the pod serves TLS, else its one port.
    fn port_for(&self, backend: &Backend) -> u16 {
        let tls = match self {
            Pod::Grpc(echo) => echo.tls_addr(),
            Pod::Http(_) => None,
        };
        match tls {
            Some(addr) if backend.ports.iter().any(|p| p.is_echo_tls()) => addr.port(),
            _ => self.addr().port(),
        }
    }

    fn targets(&self) -> Vec<String> {
        match self {
            Pod::Http(echo) => echo.targets(),
            Pod::Grpc(_) => Vec::new(),
        }
    }
}

/// The running pieces of one test.
struct Fixture {
    dir: tempfile::TempDir,
    proxy: Option<ProxyProcess>,
    pods: Vec<Pod>,
    /// Pod indexes by Service `namespace/name`.
    services: BTreeMap<(String, String), Vec<usize>>,
    /// What echo-basic serves on its TLS port (`TLS_SERVER_CERT`): the
    /// harness's backend certificate.
    backend_tls: Option<std::sync::Arc<rustls::ServerConfig>>,
}

/// Runs every case of `test`. `Err` is a setup failure (no case ran).
/// `skip`: indices of cases not to run (out of scope one by one).
pub async fn run_test(
    config: &RunConfig,
    test: &TestFile,
    skip: &[usize],
) -> Result<Vec<CaseOutcome>, String> {
    let fixture = Fixture::set_up(config, test).await?;
    let result = fixture.run_cases(config, test, skip).await;
    fixture.tear_down(config.keep, &test.name).await;
    Ok(result)
}

impl Fixture {
    async fn set_up(config: &RunConfig, test: &TestFile) -> Result<Fixture, String> {
        let base = config.upstream.join("base/manifests.yaml");
        let mut files = vec![base];
        files.extend(test.manifests.iter().map(|m| config.upstream.join(m)));
        let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        let prepared = manifests::prepare(&paths).map_err(|e| e.to_string())?;
        check_gateways(test, &prepared)?;

        let dir = tempfile::Builder::new()
            .prefix("teapot-gateway-conformance-")
            .tempdir()
            .map_err(|e| format!("creating the manifests directory: {e}"))?;
        let mut fixture = Fixture {
            dir,
            proxy: None,
            pods: Vec::new(),
            services: BTreeMap::new(),
            backend_tls: None,
        };
        let mut writer = Writer {
            dir: fixture.dir.path().to_path_buf(),
            counter: 0,
        };
        writer.write(
            "GatewayClass",
            "",
            manifests::GATEWAY_CLASS,
            &manifests::gateway_class(),
        )?;
        for (namespace, name, hosts) in manifests::HARNESS_SECRETS {
            let pem = teapot_testkit::certs::self_signed(hosts);
            let yaml = teapot_testkit::certs::tls_secret_yaml(namespace, name, &pem);
            writer.write_text("Secret", namespace, name, &yaml)?;
        }
        fixture.backend_tls = Some(backend_certificates(&mut writer)?);
        for object in &prepared.objects {
            writer.write(&object.kind, &object.namespace, &object.name, &object.value)?;
        }
        fixture
            .start_backends(&prepared.backends, &mut writer)
            .await?;

        let proxy_args: Vec<&str> = config.proxy_args.iter().map(String::as_str).collect();
        let proxy = ProxyProcess::start(&config.teapot, fixture.dir.path(), &proxy_args)
            .await
            .map_err(|e| format!("starting {} proxy: {e}", config.teapot.display()))?;
        wait_for_snapshot(&proxy, &prepared.backends, &fixture.services).await?;
        fixture.proxy = Some(proxy);
        Ok(fixture)
    }

    /// One echo process per pod of every Deployment a Service selects
    /// (Services sharing a Deployment share its pods), one EndpointSlice
    /// per Service and pod.
    async fn start_backends(
        &mut self,
        backends: &[Backend],
        writer: &mut Writer,
    ) -> Result<(), String> {
        let mut by_workload: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
        for backend in backends {
            let workload = &backend.workload;
            let key = (workload.namespace.clone(), workload.name.clone());
            if !by_workload.contains_key(&key) {
                let mut pods = Vec::new();
                // Like a ReplicaSet's pods: `<deployment>-<hash>-<suffix>`.
                let hash = random_suffix(10);
                for _ in 0..workload.replicas {
                    let identity = EchoIdentity {
                        namespace: workload.namespace.clone(),
                        ingress: String::new(),
                        service: backend.service.clone(),
                        pod: format!("{}-{hash}-{}", workload.name, random_suffix(5)),
                    };
                    let started = if workload.modes.iter().any(|m| m == "GRPC_ECHO_SERVER") {
                        let tls = workload
                            .modes
                            .iter()
                            .any(|m| m == "TLS_SERVER_CERT")
                            .then(|| self.backend_tls.clone())
                            .flatten();
                        GrpcEchoServer::start(identity, tls).await.map(Pod::Grpc)
                    } else {
                        EchoServer::start_echo_basic(identity).await.map(Pod::Http)
                    };
                    let pod = started.map_err(|e| {
                        format!("starting an echo for Deployment {}/{}: {e}", key.0, key.1)
                    })?;
                    self.pods.push(pod);
                    pods.push(self.pods.len() - 1);
                }
                by_workload.insert(key.clone(), pods);
            }
            let pods = by_workload.get(&key).cloned().unwrap_or_default();
            for (i, pod) in pods.iter().enumerate() {
                let slice_name = format!("{}-{i}", backend.service);
                let slice = manifests::endpoint_slice(
                    backend,
                    &slice_name,
                    self.pods[*pod].port_for(backend),
                );
                writer.write("EndpointSlice", &backend.namespace, &slice_name, &slice)?;
            }
            self.services
                .insert((backend.namespace.clone(), backend.service.clone()), pods);
        }
        Ok(())
    }

    async fn run_cases(
        &self,
        config: &RunConfig,
        test: &TestFile,
        skip: &[usize],
    ) -> Vec<CaseOutcome> {
        let Some(proxy) = &self.proxy else {
            return Vec::new();
        };
        let context = CaseContext {
            http: proxy.http,
            https: proxy.https,
            timeout: config.case_timeout,
            fixture: self,
        };
        let cases = test.cases.iter().enumerate();
        futures::stream::iter(cases.filter(|(index, _)| !skip.contains(index)))
            .map(|(index, case)| {
                let context = &context;
                async move {
                    CaseOutcome {
                        name: case_name(case, index),
                        failure: context.run(case).await.err(),
                    }
                }
            })
            .buffered(config.parallel.max(1))
            .collect()
            .await
    }

    async fn tear_down(mut self, keep: bool, test: &str) {
        if let Some(mut proxy) = self.proxy.take() {
            if proxy.terminate().is_ok() {
                let _ = proxy.wait(Duration::from_secs(3)).await;
            }
            drop(proxy);
        }
        for pod in std::mem::take(&mut self.pods) {
            match pod {
                Pod::Http(echo) => echo.stop().await,
                Pod::Grpc(echo) => drop(echo),
            }
        }
        if keep {
            let dir = self.dir.keep();
            eprintln!("kept the manifests of {test} in {}", dir.display());
        }
    }
}

/// The backend certificate authorities `suite.go` creates: ConfigMap
/// `tls-checks-ca-certificate` with the CA that signs the certificate the
/// echo pods serve on their TLS port, ConfigMap `mismatch-ca-certificate`
/// with another one. Returns the echo pods' TLS configuration (ALPN h2,
/// the gRPC echo's only TLS user).
fn backend_certificates(
    writer: &mut Writer,
) -> Result<std::sync::Arc<rustls::ServerConfig>, String> {
    use teapot_testkit::certs::TestCa;
    let ca = TestCa::new("gateway-conformance backend CA");
    let mismatch = TestCa::new("gateway-conformance mismatch CA");
    let (uris, hosts): (Vec<&str>, Vec<&str>) = manifests::BACKEND_TLS_HOSTS
        .iter()
        .partition(|h| h.contains("://"));
    let leaf = ca.issue_with_uris(&hosts, &uris);
    for (name, pem) in [
        (manifests::BACKEND_TLS_CA, ca.cert_pem()),
        (manifests::BACKEND_TLS_MISMATCH_CA, mismatch.cert_pem()),
    ] {
        let config_map: serde_yaml::Value = serde_yaml::from_str(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {}}}\n",
            manifests::BACKEND_TLS_NAMESPACE
        ))
        .map_err(|e| e.to_string())?;
        let mut config_map = config_map;
        if let serde_yaml::Value::Mapping(map) = &mut config_map {
            let mut data = serde_yaml::Mapping::new();
            data.insert("ca.crt".into(), pem.into());
            map.insert("data".into(), serde_yaml::Value::Mapping(data));
        }
        writer.write(
            "ConfigMap",
            manifests::BACKEND_TLS_NAMESPACE,
            name,
            &config_map,
        )?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf.key_der.clone().into());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            b.with_no_client_auth()
                .with_single_cert(vec![leaf.cert_der.clone().into()], key)
        })
        .map_err(|e| format!("the backend TLS configuration: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(std::sync::Arc::new(config))
}

/// The Gateways a test addresses must be among its objects: a data file
/// naming another is a setup error, not a failing case.
fn check_gateways(test: &TestFile, prepared: &Prepared) -> Result<(), String> {
    for gateway in &test.gateways {
        let defined = prepared.objects.iter().any(|o| {
            o.kind == "Gateway" && o.name == gateway.name && o.namespace == gateway.namespace
        });
        if !defined {
            return Err(format!(
                "the test addresses Gateway {}/{}, which neither the base nor the test manifests define",
                gateway.namespace, gateway.name
            ));
        }
    }
    Ok(())
}

/// Waits until `/status` reports a generation (the first snapshot is
/// built), then (best effort) until every echo-backed Service it lists shows
/// all its pods.
async fn wait_for_snapshot(
    proxy: &ProxyProcess,
    backends: &[Backend],
    services: &BTreeMap<(String, String), Vec<usize>>,
) -> Result<(), String> {
    let deadline = Instant::now() + SNAPSHOT_TIMEOUT;
    let mut last = String::from("no answer");
    loop {
        match proxy.admin_get("/status").await {
            Ok((200, body)) => match Status::parse(&body) {
                Ok(status) if status.generation.is_some() => {
                    let settled = backends.iter().all(|b| {
                        let listed = status
                            .backends
                            .iter()
                            .any(|s| s.namespace == b.namespace && s.service == b.service);
                        let want = services
                            .get(&(b.namespace.clone(), b.service.clone()))
                            .map_or(0, Vec::len);
                        !listed || status.endpoints(&b.namespace, &b.service).len() == want
                    });
                    if settled || Instant::now() >= deadline {
                        return Ok(());
                    }
                }
                Ok(_) => last = "no generation in /status yet".into(),
                Err(e) => last = e,
            },
            Ok((code, body)) => last = format!("GET /status answered {code}: {body}"),
            Err(e) => last = format!("GET /status: {e}"),
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the proxy showed no snapshot within {SNAPSHOT_TIMEOUT:?}: {last}"
            ));
        }
        sleep(POLL).await;
    }
}

struct Writer {
    dir: PathBuf,
    counter: usize,
}

impl Writer {
    fn write(
        &mut self,
        kind: &str,
        namespace: &str,
        name: &str,
        value: &serde_yaml::Value,
    ) -> Result<(), String> {
        let text = serde_yaml::to_string(value)
            .map_err(|e| format!("serializing {kind} {namespace}/{name}: {e}"))?;
        self.write_text(kind, namespace, name, &text)
    }

    fn write_text(
        &mut self,
        kind: &str,
        namespace: &str,
        name: &str,
        text: &str,
    ) -> Result<(), String> {
        self.counter += 1;
        let file = format!(
            "{:03}-{}-{}-{}.yaml",
            self.counter,
            kind.to_ascii_lowercase(),
            sanitize(namespace),
            sanitize(name)
        );
        let path = self.dir.join(file);
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))
    }
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn random_suffix(n: usize) -> String {
    crate::scenario::random_suffix(n)
}

/// The upstream sub-test name of a case.
fn case_name(case: &Case, index: usize) -> String {
    if case.protocol == "grpc"
        && let Ok(grpc) = GrpcCase::from_case(case)
    {
        return grpc.name(index, &case.test_case_name);
    }
    case.name(index)
}

/// How a helper judges a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judgement {
    /// `WaitForConsistentResponse`: `CompareRoundTrip` must pass.
    Consistent,
    /// The same, then the mirror backends must have seen the request.
    ConsistentAndMirrored,
    /// `WaitForConsistentFailureResponse`: any answer but 200 (timeouts
    /// retried).
    FailureStatus,
    /// The TLS helpers' failure: the request itself must fail.
    RequestFails,
    /// gRPC's `compareResponse`, eventually consistent.
    Grpc,
    /// gRPC's eventual failure: any code but OK.
    GrpcFailure,
}

/// The helpers this runner knows: their name, listener scheme (gRPC goes
/// to the HTTP listener over h2c) and judgement.
const HELPERS: &[(&str, &str, Judgement)] = &[
    (
        "grpc.MakeRequestAndExpectEventuallyConsistentResponse",
        "http",
        Judgement::Grpc,
    ),
    (
        "grpc.MakeRequestAndExpectEventuallyConsistentFailure",
        "http",
        Judgement::GrpcFailure,
    ),
    (
        "http.MakeRequestAndExpectEventuallyConsistentResponse",
        "http",
        Judgement::Consistent,
    ),
    // `http.MakeRequest` only builds the request; the tests then judge the
    // same expectation with `CompareRoundTrip`, as here.
    ("http.MakeRequest", "http", Judgement::Consistent),
    (
        "http.ExpectMirroredRequest",
        "http",
        Judgement::ConsistentAndMirrored,
    ),
    (
        "http.MakeRequestAndExpectFailure",
        "http",
        Judgement::FailureStatus,
    ),
    (
        "tls.MakeTLSRequestAndExpectEventuallyConsistentResponse",
        "https",
        Judgement::Consistent,
    ),
    (
        "tls.MakeTLSRequestAndExpectEventuallyConsistentFailureResponse",
        "https",
        Judgement::RequestFails,
    ),
];

/// The helper's scheme and judgement; an unknown helper is an error
/// naming it.
fn helper(case: &Case) -> Result<(&'static str, Judgement), String> {
    let (_, scheme, judgement) = HELPERS
        .iter()
        .find(|(name, _, _)| *name == case.helper)
        .ok_or_else(|| {
            format!(
                "helper {} ({} case) is not supported by this runner",
                if case.helper.is_empty() {
                    "(none)"
                } else {
                    &case.helper
                },
                case.protocol
            )
        })?;
    let protocol = if case.helper.starts_with("grpc.") {
        "grpc"
    } else {
        "http"
    };
    if case.protocol != protocol {
        return Err(format!(
            "helper {} with a {} case is not supported by this runner",
            case.helper, case.protocol
        ));
    }
    Ok((scheme, *judgement))
}

/// `roundtripper` protocols (the value or the Go constant's name).
fn protocol(name: &str, scheme: &str) -> Result<Proto, String> {
    match name.rsplit('.').next().unwrap_or_default() {
        "" | "HTTP" | "HTTPS" | "HTTPSProtocol" => Ok(Proto::Http1),
        "H2C_PRIOR_KNOWLEDGE" | "H2CPriorKnowledgeProtocol" if scheme == "http" => Ok(Proto::Http2),
        "H2" | "H2Protocol" if scheme == "https" => Ok(Proto::Http2),
        _ => Err(format!(
            "request protocol {name:?} over {scheme} is not supported by this runner"
        )),
    }
}

/// Adds the request-id parameter as `AddRequestIDQueryParam` does (the
/// mirror tests call it so the mirrored request can be told apart).
fn with_request_id(case: &Case, id: &str) -> Case {
    let add = |path: &str| {
        let separator = if path.contains('?') { '&' } else { '?' };
        format!("{path}{separator}{REQUEST_ID_PARAM}={id}")
    };
    let mut case = case.clone();
    case.request.path = add(&case.request.path);
    if let Some(expected) = &mut case.expected_request {
        expected.request.path = if expected.request.path.is_empty() {
            case.request.path.clone()
        } else {
            add(&expected.request.path)
        };
    }
    case
}

struct CaseContext<'a> {
    http: SocketAddr,
    https: SocketAddr,
    timeout: Duration,
    fixture: &'a Fixture,
}

/// One round trip's result.
struct Exchange {
    sent: SentRequest,
    request: CapturedRequest,
    response: CapturedResponse,
}

impl CaseContext<'_> {
    async fn run(&self, case: &Case) -> Result<(), String> {
        let (scheme, judgement) = helper(case)?;
        let unjudged = case.unjudged_fields();
        if !unjudged.is_empty() {
            return Err(format!(
                "the case has fields this runner does not judge: {}",
                unjudged.join(", ")
            ));
        }
        if matches!(judgement, Judgement::Grpc | Judgement::GrpcFailure) {
            return self.run_grpc(case, judgement).await;
        }
        let case = if judgement == Judgement::ConsistentAndMirrored {
            with_request_id(case, &request_id())
        } else {
            case.clone()
        };
        let proto = protocol(&case.request.protocol, scheme)?;
        let case_ref = &case;
        self.eventually(move || async move {
            let case = case_ref;
            let result = self.round_trip(case, scheme, proto).await;
            match judgement {
                Judgement::Consistent | Judgement::ConsistentAndMirrored => {
                    let exchange = result?;
                    judge::compare(case, &exchange.sent, &exchange.request, &exchange.response)
                        .map_err(Attempt::Retry)
                }
                Judgement::FailureStatus => match result?.response.status {
                    200 => Err(Attempt::Fatal(
                        "the request should have failed, returned HTTP Status OK (200) instead"
                            .into(),
                    )),
                    code if judge::is_timeout(code) => {
                        Err(Attempt::Retry(format!("timeout status {code}")))
                    }
                    _ => Ok(()),
                },
                Judgement::Grpc | Judgement::GrpcFailure => {
                    Err(Attempt::Fatal("a gRPC case judged as HTTP".into()))
                }
                Judgement::RequestFails => match result {
                    Err(_) => Ok(()),
                    Ok(exchange) => Err(Attempt::Retry(format!(
                        "the request unexpectedly succeeded with status {}",
                        exchange.response.status
                    ))),
                },
            }
        })
        .await?;
        if judgement == Judgement::ConsistentAndMirrored {
            self.mirrored(&case).await?;
        }
        Ok(())
    }

    /// The gRPC helpers: calls over h2c to the HTTP listener, with the
    /// client's default `:authority` (the Gateway address, port 80) unless
    /// the case sets one.
    async fn run_grpc(&self, case: &Case, judgement: Judgement) -> Result<(), String> {
        let expected = GrpcCase::from_case(case)?;
        let expected = &expected;
        let authority = format!("{GATEWAY_ADDRESS}:80");
        let authority = authority.as_str();
        self.eventually(move || async move {
            // Upstream gives each RPC the time left to consistency.
            let got = grpc::call(self.http, authority, expected, self.timeout.max(POLL)).await;
            match judgement {
                Judgement::GrpcFailure => match got {
                    Err(e) => Err(Attempt::Retry(e)),
                    Ok(got) if got.code == 0 => Err(Attempt::Fatal(
                        "the request should have failed, but got status OK".into(),
                    )),
                    Ok(_) => Ok(()),
                },
                _ => grpc::compare(expected, &got.map_err(Attempt::Retry)?).map_err(Attempt::Retry),
            }
        })
        .await
        .map(|_| ())
    }

    /// `AwaitConvergence`: retries until [`CONSECUTIVE_SUCCESSES`] in a row,
    /// within the case timeout; the last failure is the reason.
    async fn eventually<F, Fut>(&self, mut attempt: F) -> Result<usize, String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), Attempt>>,
    {
        let start = Instant::now();
        let mut successes = 0;
        let mut attempts = 0;
        loop {
            attempts += 1;
            match attempt().await {
                Ok(()) => {
                    successes += 1;
                    if successes >= CONSECUTIVE_SUCCESSES {
                        return Ok(attempts);
                    }
                    continue;
                }
                Err(Attempt::Fatal(reason)) => return Err(reason),
                Err(Attempt::Retry(reason)) => {
                    successes = 0;
                    if start.elapsed() >= self.timeout {
                        return Err(format!(
                            "{reason} (after {attempts} attempts in {:.1?})",
                            start.elapsed()
                        ));
                    }
                }
            }
            sleep(POLL).await;
        }
    }

    /// `ExpectMirroredRequest`: every mirror backend's pods together saw a
    /// request to the case's path (with its request id).
    async fn mirrored(&self, case: &Case) -> Result<(), String> {
        for mirror in &case.mirrored_to {
            let key = (
                mirror.backend_ref.namespace.clone(),
                mirror.backend_ref.name.clone(),
            );
            let pods = self.fixture.services.get(&key).ok_or_else(|| {
                format!(
                    "the mirror backend {}/{} is no Service backed by a Deployment",
                    key.0, key.1
                )
            })?;
            let deadline = Instant::now() + self.timeout;
            loop {
                let seen = pods.iter().any(|&pod| {
                    self.fixture.pods[pod]
                        .targets()
                        .contains(&case.request.path)
                });
                if seen {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "the mirror backend {}/{} saw no request to {} within {:?}",
                        key.0, key.1, case.request.path, self.timeout
                    ));
                }
                sleep(POLL).await;
            }
        }
        Ok(())
    }

    /// One request as `http.MakeRequest` and the roundtripper make it,
    /// redirects followed unless the case says `UnfollowRedirect`.
    async fn round_trip(
        &self,
        case: &Case,
        scheme: &str,
        proto: Proto,
    ) -> Result<Exchange, Attempt> {
        let method = if case.request.method.is_empty() {
            "GET".to_string()
        } else {
            case.request.method.clone()
        };
        let mut headers = vec![("User-Agent".to_string(), USER_AGENT.to_string())];
        for (name, value) in case.request.headers.iter().flatten() {
            let name = canonical_header_name(name);
            headers.retain(|(n, _)| *n != name);
            headers.push((name, value.clone()));
        }
        let set_headers: Vec<String> = case
            .backend_set_response_headers
            .iter()
            .flatten()
            .map(|(name, value)| format!("{name}:{value}"))
            .collect();
        headers.push(("X-Echo-Set-Header".to_string(), set_headers.join(",")));

        let mut scheme = scheme.to_string();
        let mut host = if case.request.host.is_empty() {
            GATEWAY_ADDRESS.to_string()
        } else {
            case.request.host.clone()
        };
        let mut target = if case.request.path.starts_with('/') {
            case.request.path.clone()
        } else {
            format!("/{}", case.request.path)
        };
        let mut method = method;
        let mut body = case.request.body.clone().into_bytes();
        let mut redirects = 0;
        loop {
            let sni = [&case.server_name, &case.request.sni, &host]
                .into_iter()
                .find(|s| !s.is_empty())
                .map(|s| judge::split_host_port(s).0.to_string())
                .unwrap_or_default();
            let (addr, transport) = if scheme == "https" {
                (self.https, Transport::tls_insecure(&sni))
            } else {
                (self.http, Transport::Plain)
            };
            let request = Request {
                method: method.clone(),
                target: target.clone(),
                host: host.clone(),
                headers: headers.clone(),
                body: body.clone(),
                proto,
            };
            let response = send(addr, &transport, &request).await?;
            let path = target.split('?').next().unwrap_or_default().to_string();
            let redirect = if judge::is_redirect(response.status) {
                let location = header(&response, "location").unwrap_or_default();
                Some(
                    judge::parse_location(&location, &scheme, &host, &path).map_err(|e| {
                        Attempt::Retry(format!("{} answered {}: {e}", target, response.status))
                    })?,
                )
            } else {
                None
            };
            let follow = matches!(response.status, 301 | 302 | 303 | 307 | 308)
                && !case.request.unfollow_redirect;
            if follow && let Some(next) = &redirect {
                redirects += 1;
                if redirects > MAX_REDIRECTS {
                    return Err(Attempt::Retry(format!(
                        "more than {MAX_REDIRECTS} redirects"
                    )));
                }
                if response.status != 307 && response.status != 308 && method != "HEAD" {
                    method = "GET".into();
                    body.clear();
                }
                scheme = next.scheme.clone();
                host = if next.port.is_empty() {
                    next.host.clone()
                } else {
                    format!("{}:{}", next.host, next.port)
                };
                target = if next.path.is_empty() {
                    "/".into()
                } else {
                    next.path.clone()
                };
                continue;
            }
            let content_type = header(&response, "content-type");
            let captured =
                judge::captured_request(content_type.as_deref(), &response.body, &method)
                    .map_err(Attempt::Retry)?;
            let mut response_headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (name, value) in &response.headers {
                response_headers
                    .entry(name.as_str().to_string())
                    .or_default()
                    .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
            }
            return Ok(Exchange {
                sent: SentRequest { scheme, path },
                request: captured,
                response: CapturedResponse {
                    status: response.status,
                    protocol: proto_name(response.version).to_string(),
                    headers: response_headers,
                    redirect,
                },
            });
        }
    }
}

/// Why one attempt did not pass.
enum Attempt {
    /// Try again until the case times out.
    Retry(String),
    /// Fails the case at once (as `t.Fatalf` inside the upstream loop).
    Fatal(String),
}

async fn send(
    addr: SocketAddr,
    transport: &Transport,
    request: &Request,
) -> Result<Response, Attempt> {
    let what = || {
        format!(
            "{} {} (Host {}, via {addr})",
            request.method, request.target, request.host
        )
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, client::send(addr, transport, request)).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => Err(Attempt::Retry(format!("{} failed: {e}", what()))),
        Err(_) => Err(Attempt::Retry(format!(
            "{} got no response within {REQUEST_TIMEOUT:?}",
            what()
        ))),
    }
}

fn header(response: &Response, name: &str) -> Option<String> {
    response
        .headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

fn proto_name(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// A random UUID-shaped id, as `uuid.NewString()`.
fn request_id() -> String {
    let hex = crate::scenario::random_suffix(32)
        .chars()
        .map(|c| {
            let n = c as u32 % 16;
            char::from_digit(n, 16).unwrap_or('0')
        })
        .collect::<String>();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(json: &str) -> Case {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn helpers_are_known_by_name() {
        let c = case(
            r#"{"helper": "tls.MakeTLSRequestAndExpectEventuallyConsistentResponse", "protocol": "http"}"#,
        );
        assert_eq!(helper(&c).unwrap(), ("https", Judgement::Consistent));
        let c = case(r#"{"helper": "http.ExpectMirroredRequest", "protocol": "http"}"#);
        assert_eq!(
            helper(&c).unwrap(),
            ("http", Judgement::ConsistentAndMirrored)
        );
        let c = case(
            r#"{"helper": "grpc.MakeRequestAndExpectEventuallyConsistentResponse", "protocol": "grpc"}"#,
        );
        assert_eq!(helper(&c).unwrap(), ("http", Judgement::Grpc));
        let c = case(
            r#"{"helper": "grpc.MakeRequestAndExpectEventuallyConsistentFailure", "protocol": "http"}"#,
        );
        assert!(helper(&c).unwrap_err().contains("with a http case"));
        let c = case(
            r#"{"helper": "tcp.MakeTCPRequestAndExpectEventuallyValidResponse", "protocol": "tcp"}"#,
        );
        assert_eq!(
            helper(&c).unwrap_err(),
            "helper tcp.MakeTCPRequestAndExpectEventuallyValidResponse (tcp case) is not supported by this runner"
        );
        let c = case(r#"{"helper": "http.MakeRequest", "protocol": "tcp"}"#);
        assert!(helper(&c).unwrap_err().contains("with a tcp case"));
        let c = case(r#"{"protocol": "http"}"#);
        assert!(helper(&c).unwrap_err().contains("helper (none)"));
    }

    /// The echo-basic hooks the judges rely on, over the wire.
    #[tokio::test]
    async fn echo_basic_hooks() {
        let echo = EchoServer::start_echo_basic(EchoIdentity::new("ns", "", "svc", "pod-1"))
            .await
            .unwrap();
        let request = |target: &str| {
            Request::get("h.example", target).header("X-Echo-Set-Header", "X-A: 1,x-a:2,X-B:b")
        };
        let started = Instant::now();
        let response = client::send(echo.addr(), &Transport::Plain, &request("/d?delay=300ms"))
            .await
            .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(response.status, 200);
        assert_eq!(response.headers["x-a"], "1,2");
        assert_eq!(response.headers["x-b"], "b");
        let captured = judge::captured_request(
            header(&response, "content-type").as_deref(),
            &response.body,
            "GET",
        )
        .unwrap();
        assert_eq!(captured.path, "/d?delay=300ms");
        assert_eq!(
            (captured.namespace.as_str(), captured.pod.as_str()),
            ("ns", "pod-1")
        );
        let response = client::send(echo.addr(), &Transport::Plain, &request("/?delay=soon"))
            .await
            .unwrap();
        assert_eq!(response.status, 500);
        assert!(
            response.text().contains("time: invalid duration"),
            "{}",
            response.text()
        );
        assert_eq!(echo.targets(), vec!["/d?delay=300ms", "/?delay=soon"]);
        echo.stop().await;

        // The ingress echo keeps its contract: no echo-basic hooks.
        let plain = EchoServer::start(EchoIdentity::new("ns", "", "svc", "pod-2"))
            .await
            .unwrap();
        let started = Instant::now();
        let response = client::send(plain.addr(), &Transport::Plain, &request("/?delay=2s"))
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(response.headers.get("x-a").is_none());
        plain.stop().await;
    }

    #[test]
    fn protocols() {
        assert_eq!(protocol("", "http").unwrap(), Proto::Http1);
        assert_eq!(
            protocol("roundtripper.H2CPriorKnowledgeProtocol", "http").unwrap(),
            Proto::Http2
        );
        assert_eq!(
            protocol("H2C_PRIOR_KNOWLEDGE", "http").unwrap(),
            Proto::Http2
        );
        assert_eq!(protocol("H2", "https").unwrap(), Proto::Http2);
        assert!(protocol("H2C_PRIOR_KNOWLEDGE", "https").is_err());
        assert!(protocol("QUIC", "http").is_err());
    }

    #[test]
    fn request_ids_go_into_both_paths() {
        let c = case(
            r#"{"Request": {"Path": "/mirror"}, "ExpectedRequest": {"Request": {"Path": ""}}}"#,
        );
        let with = with_request_id(&c, "id-1");
        assert_eq!(
            with.request.path,
            "/mirror?gateway-api-conformance-request-id=id-1"
        );
        assert_eq!(
            with.expected_request.unwrap().request.path,
            "/mirror?gateway-api-conformance-request-id=id-1"
        );
        let c = case(
            r#"{"Request": {"Path": "/m?a=1"}, "ExpectedRequest": {"Request": {"Path": "/n"}}}"#,
        );
        let with = with_request_id(&c, "x");
        assert_eq!(
            with.request.path,
            "/m?a=1&gateway-api-conformance-request-id=x"
        );
        assert_eq!(
            with.expected_request.unwrap().request.path,
            "/n?gateway-api-conformance-request-id=x"
        );
        let id = request_id();
        assert_eq!(id.len(), 36);
        assert_eq!(id.matches('-').count(), 4);
    }
}
