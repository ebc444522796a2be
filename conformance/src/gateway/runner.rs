//! One test: a manifests directory, echo processes, a proxy, and every case
//! judged as its upstream helper does.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use teapot_testkit::client::{self, Proto, Request, Response, Transport};
use teapot_testkit::echo::{EchoIdentity, EchoServer, canonical_header_name};
use teapot_testkit::process::ProxyProcess;
use tokio::time::{Instant, sleep};

use serde_json::Value;

use super::data::{Case, GatewayAddress, TestFile};
use super::grpc::{self, GrpcCase, GrpcEchoServer};
use super::judge::{self, CapturedRequest, CapturedResponse, SentRequest};
use super::l4::{self, PodContext, TcpEcho, TcpExpected, TlsFront, UdpEcho};
use super::manifests::{self, Backend, Object, Prepared, ServicePort};
use super::outcome::CaseOutcome;
use super::status;
use super::tls_client;
use crate::admin::Status;

// The helpers called with plain arguments: a child module, so that it
// judges with this runner's clients and endpoints.
#[path = "plain.rs"]
mod plain;

// The checks upstream writes as code (a WebSocket dial, a DNS exchange,
// values made anew per attempt): a child module, for the same reason.
#[path = "code.rs"]
mod code;

// A test's steps (object changes between its cases and checks): a child
// module, so that it runs groups of them with this runner's fixture.
#[path = "steps.rs"]
pub mod steps;

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
    /// The L4 address pool (a CIDR under 127.0.0.0/8, all local on Linux)
    /// given to the proxy as `--l4-pool` and `--l4-default-pool` for the
    /// conformance namespaces: Gateways with TCP, UDP or TLS listeners get
    /// their own address from it. Empty: no pool flags.
    pub l4_pool: String,
}

/// The default [`RunConfig::l4_pool`].
pub const DEFAULT_L4_POOL: &str = "127.48.0.0/24";
/// The pool's name on the proxy's command line.
const L4_POOL_NAME: &str = "conformance";
/// The annotation upstream's harness skips a Gateway's readiness wait by.
const READINESS_SKIP: &str = "gateway-api/skip-this-for-readiness";
/// How long a Gateway a case addresses may take to show an address.
const ADDRESS_TIMEOUT: Duration = Duration::from_secs(20);

/// The proxy's arguments beyond the listeners: cleartext HTTP/2 on the
/// plain listener, which the gRPC clients and the H2C test speak (prior
/// knowledge), as a Gateway serving GRPCRoutes must accept; and every
/// Gateway on an address of its own, as upstream expects (it sends each
/// request to its Gateway's status address, and tests such as
/// HTTPRouteMultipleGateways tell hostname-less Gateways on one port apart
/// by it). Without it, Gateways that ask for no address share the
/// fleet's 80/443 and are told apart by hostname.
pub const DEFAULT_PROXY_ARGS: &[&str] = &["--h2c", "--gateway-own-addresses"];

/// One echo process and the pod it plays: echo-basic's HTTP echo (with
/// its HTTPS port when the Deployment sets `TLS_SERVER_CERT`), or its gRPC,
/// TCP or UDP echo when the Deployment sets `GRPC_ECHO_SERVER`,
/// `TCP_ECHO_SERVER` or `UDP_ECHO_SERVER`.
enum Pod {
    Http(EchoServer, Option<TlsFront>),
    Grpc(GrpcEchoServer),
    Tcp(TcpEcho),
    Udp(UdpEcho),
    Dns(code::dns::DnsEcho),
}

impl Pod {
    /// The port a Service port reaches: echo-basic's TLS listener for
    /// `targetPort: 8443` when the pod serves TLS, else its one port.
    fn port_for(&self, port: &ServicePort) -> u16 {
        let tls = port.is_echo_tls();
        match self {
            Pod::Http(_, Some(front)) if tls => front.addr.port(),
            Pod::Http(echo, _) => echo.addr().port(),
            Pod::Grpc(echo) => match echo.tls_addr() {
                Some(addr) if tls => addr.port(),
                _ => echo.addr().port(),
            },
            Pod::Tcp(echo) => match echo.tls {
                Some(addr) if tls => addr.port(),
                _ => echo.plain.port(),
            },
            Pod::Udp(echo) => echo.addr.port(),
            Pod::Dns(server) => server.addr.port(),
        }
    }

    /// The pod's address (every listener of it is there).
    fn ip(&self) -> IpAddr {
        match self {
            Pod::Http(echo, _) => echo.addr().ip(),
            Pod::Grpc(echo) => echo.addr().ip(),
            Pod::Tcp(echo) => echo.plain.ip(),
            Pod::Udp(echo) => echo.addr.ip(),
            Pod::Dns(server) => server.addr.ip(),
        }
    }

    fn targets(&self) -> Vec<String> {
        match self {
            Pod::Http(echo, _) => echo.targets(),
            _ => Vec::new(),
        }
    }
}

/// echo-basic's port (its container's `containerPort`, the Services'
/// `targetPort`), where the runner's HTTP echo pods listen on their own
/// address, so an EndpointSlice a test writes with the pods' IPs reaches
/// them as in a cluster.
const ECHO_BASIC_PORT: u16 = 3000;

/// Where the pods' addresses come from: loopback (Linux routes all of
/// 127.0.0.0/8 to `lo`, nothing is configured), apart from the L4 pools
/// the proxy is given (127.48.0.0/24 and its neighbours) and from
/// 127.0.0.1. Each pod gets a random one, so runs at the same time do not
/// meet (one that does is tried again).
pub const POD_NETWORK: &str = "127.128.0.0/9";

/// A random address of [`POD_NETWORK`], neither its first nor its last.
fn pod_address() -> IpAddr {
    let host: u32 = rand::random_range(1..(1 << 23) - 1);
    IpAddr::V4(std::net::Ipv4Addr::from((127 << 24) | (1 << 23) | host))
}

/// The Pod object of a runner pod, as a cluster would list it: its name,
/// namespace and labels (the Deployment's pod template's), a UID, no node,
/// and its address as `status.podIP(s)`.
fn pod_object(workload: &manifests::Workload, name: &str, ip: IpAddr) -> Value {
    let uid: u128 = rand::random();
    let uid = format!("{uid:032x}");
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": workload.namespace,
            "labels": workload.labels,
            "uid": format!("{}-{}-{}-{}-{}", &uid[..8], &uid[8..12], &uid[12..16], &uid[16..20], &uid[20..]),
        },
        "spec": {"nodeName": ""},
        "status": {"podIP": ip.to_string(), "podIPs": [{"ip": ip.to_string()}]},
    })
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
    /// The serving certificates the harness made (`namespace/name` →
    /// certificate and key PEM), which TLS echo pods mount.
    secrets: BTreeMap<(String, String), (String, String)>,
    /// The objects written (Gateways' listeners, routes' hostnames).
    objects: Vec<Object>,
    /// Objects a cluster holds that are not in the manifests directory
    /// (teapot reads none of them): the workloads the manifests declare
    /// (Deployments, ...) and the runner's pods, which a test reads
    /// (`Client.Get`, `Client.List`) to write objects from them (steps).
    cluster_only: Vec<Value>,
    /// `status.addresses` of the Gateways the cases address.
    addresses: BTreeMap<(String, String), Vec<String>>,
    /// When the manifests were written (seconds since the epoch): their
    /// objects' `creationTimestamp`.
    created: u64,
}

/// Runs every case and status check of `test`: (cases, checks). `Err` is
/// a setup failure (nothing ran). `skip`: indices of cases not to run (out
/// of scope one by one).
pub async fn run_test(
    config: &RunConfig,
    test: &TestFile,
    skip: &[usize],
) -> Result<(Vec<CaseOutcome>, Vec<CaseOutcome>), String> {
    steps::validate(test)?;
    let fixture = Fixture::set_up(config, test).await?;
    let result = if test.steps.is_empty() {
        futures::join!(
            fixture.run_cases(config, test, skip),
            fixture.run_checks(config, test)
        )
    } else {
        steps::run(&fixture, config, test, skip).await
    };
    fixture.tear_down(config.keep, &test.name).await;
    Ok(result)
}

impl Fixture {
    /// Judges the test's status checks against the proxy's `/status`
    /// ([`super::status`]), each within `--case-timeout`.
    async fn run_checks(&self, config: &RunConfig, test: &TestFile) -> Vec<CaseOutcome> {
        self.run_check_list(config, &test.checks, &generations(&self.objects))
            .await
    }

    /// Judges `checks` with the objects at `generations`.
    async fn run_check_list(
        &self,
        config: &RunConfig,
        checks: &[super::data::Check],
        generations: &status::Generations,
    ) -> Vec<CaseOutcome> {
        let Some(proxy) = &self.proxy else {
            return Vec::new();
        };
        if checks.is_empty() {
            return Vec::new();
        }
        status::run_checks(checks, generations, config.case_timeout, || async {
            match proxy.admin_get("/status").await {
                Ok((200, body)) => serde_json::from_str::<Value>(&body)
                    .map_err(|e| format!("/status is not JSON: {e}")),
                Ok((code, body)) => Err(format!("GET /status answered {code}: {body}")),
                Err(e) => Err(format!("GET /status: {e}")),
            }
        })
        .await
    }
}

/// `metadata.generation` of the objects written (0 when unset).
fn generations(objects: &[Object]) -> status::Generations {
    objects
        .iter()
        .map(|o| {
            let generation = o
                .value
                .get("metadata")
                .and_then(|m| m.get("generation"))
                .and_then(serde_yaml::Value::as_i64)
                .unwrap_or(0);
            (
                (o.kind.clone(), o.namespace.clone(), o.name.clone()),
                generation,
            )
        })
        .collect()
}

impl Fixture {
    async fn set_up(config: &RunConfig, test: &TestFile) -> Result<Fixture, String> {
        let base = config.upstream.join("base/manifests.yaml");
        let mut files = vec![base];
        files.extend(test.manifests.iter().map(|m| config.upstream.join(m)));
        let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        let prepared = manifests::prepare(
            &paths,
            &manifests::NetworkAddresses::for_pool(&config.l4_pool),
        )
        .map_err(|e| e.to_string())?;
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
            secrets: BTreeMap::new(),
            objects: prepared.objects.clone(),
            cluster_only: prepared
                .unwritten
                .iter()
                .filter_map(|o| serde_json::to_value(&o.value).ok())
                .collect(),
            addresses: BTreeMap::new(),
            created: steps::now_secs(),
        };
        let mut writer = Writer {
            dir: fixture.dir.path().to_path_buf(),
            counter: 0,
            ca_bundles: BTreeMap::new(),
        };
        writer.write(
            "GatewayClass",
            "",
            manifests::GATEWAY_CLASS,
            &manifests::gateway_class(),
        )?;
        let mut harness = Certificates::new();
        for (namespace, name, hosts) in manifests::HARNESS_SECRETS {
            let pem = teapot_testkit::certs::self_signed(hosts);
            let yaml = teapot_testkit::certs::tls_secret_yaml(namespace, name, &pem);
            writer.write_text("Secret", namespace, name, &yaml)?;
            harness.insert(
                (namespace.to_string(), name.to_string()),
                (pem.cert_pem, pem.key_pem),
            );
        }
        harness.extend(client_certificates(&mut writer)?);
        let (backend_tls, secrets) = backend_certificates(&mut writer)?;
        fixture.backend_tls = Some(backend_tls);
        fixture.secrets = secrets;
        fixture.secrets.extend(harness);
        for object in &prepared.objects {
            let value = steps::created_at(&object.value, fixture.created);
            writer.write(&object.kind, &object.namespace, &object.name, &value)?;
        }
        fixture
            .start_backends(&prepared.backends, &mut writer)
            .await?;

        let mut proxy_args: Vec<String> = config.proxy_args.clone();
        proxy_args.extend(l4_pool_args(&config.l4_pool));
        let proxy_args: Vec<&str> = proxy_args.iter().map(String::as_str).collect();
        let proxy = ProxyProcess::start(&config.teapot, fixture.dir.path(), &proxy_args)
            .await
            .map_err(|e| format!("starting {} proxy: {e}", config.teapot.display()))?;
        wait_for_snapshot(&proxy, &prepared.backends, &fixture.services).await?;
        let mut gateways: Vec<(String, String)> = test
            .cases
            .iter()
            .filter_map(|c| c.gateway.as_ref())
            .map(|g| (g.namespace.clone(), g.name.clone()))
            .collect();
        // As the harness, which waits for no Gateway annotated
        // `gateway-api/skip-this-for-readiness` (one the test expects
        // to get no address first, GatewayStaticAddresses').
        let skipped = |g: &&super::data::ObjectRef| {
            prepared.objects.iter().any(|o| {
                o.kind == "Gateway"
                    && o.name == g.name
                    && o.namespace == g.namespace
                    && o.value["metadata"]["annotations"][READINESS_SKIP].as_str() == Some("true")
            })
        };
        gateways.extend(
            test.gateways
                .iter()
                .filter(|g| !skipped(g))
                .map(|g| (g.namespace.clone(), g.name.clone())),
        );
        fixture.addresses = wait_for_addresses(&proxy, &gateways).await;
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
                    let name = identity.pod.clone();
                    let (pod, ip) =
                        self.start_pod(workload, identity, writer)
                            .await
                            .map_err(|e| {
                                format!("starting an echo for Deployment {}/{}: {e}", key.0, key.1)
                            })?;
                    self.cluster_only.push(pod_object(workload, &name, ip));
                    self.pods.push(pod);
                    pods.push(self.pods.len() - 1);
                }
                by_workload.insert(key.clone(), pods);
            }
            let pods = by_workload.get(&key).cloned().unwrap_or_default();
            for (i, pod) in pods.iter().enumerate() {
                let slice_name = format!("{}-{i}", backend.service);
                let echo = &self.pods[*pod];
                let slice = manifests::endpoint_slice(backend, &slice_name, echo.ip(), |port| {
                    echo.port_for(port)
                });
                writer.write("EndpointSlice", &backend.namespace, &slice_name, &slice)?;
            }
            self.services
                .insert((backend.namespace.clone(), backend.service.clone()), pods);
        }
        Ok(())
    }

    /// One pod of `workload` on an address of its own in [`POD_NETWORK`]
    /// (an address another run of the runner holds is tried again with
    /// another): echo-basic's HTTP echo at its port 3000 (and its TLS port
    /// 8443), the others at ports of the kernel's choice.
    async fn start_pod(
        &self,
        workload: &manifests::Workload,
        identity: EchoIdentity,
        writer: &Writer,
    ) -> Result<(Pod, IpAddr), String> {
        let mode = |m: &str| workload.modes.iter().any(|n| n == m);
        let context = PodContext {
            namespace: identity.namespace.clone(),
            service: identity.service.clone(),
            pod: identity.pod.clone(),
        };
        let mut tries = 0;
        loop {
            tries += 1;
            let ip = pod_address();
            let started = if mode("GRPC_ECHO_SERVER") {
                let tls = mode("TLS_SERVER_CERT")
                    .then(|| self.backend_tls.clone())
                    .flatten();
                GrpcEchoServer::start(ip, identity.clone(), tls)
                    .await
                    .map(Pod::Grpc)
            } else if mode("TCP_ECHO_SERVER") {
                let tls = self.mounted_certificate(workload, writer)?;
                TcpEcho::start(ip, context.clone(), tls).await.map(Pod::Tcp)
            } else if mode(code::dns::COREDNS_MODE) {
                code::dns::DnsEcho::start(ip).await.map(Pod::Dns)
            } else if mode("UDP_ECHO_SERVER") {
                UdpEcho::start(ip, context.clone()).await.map(Pod::Udp)
            } else {
                let tls = self.mounted_certificate(workload, writer)?;
                match EchoServer::start_echo_basic_at(
                    (ip, ECHO_BASIC_PORT).into(),
                    identity.clone(),
                )
                .await
                {
                    Err(e) => Err(e),
                    Ok(echo) => match tls {
                        None => Ok(Pod::Http(echo, None)),
                        Some(tls) => {
                            let addr = (ip, manifests::ECHO_TLS_PORT as u16).into();
                            match TlsFront::start(addr, echo.intake(), tls).await {
                                Ok(front) => Ok(Pod::Http(echo, Some(front))),
                                Err(e) => {
                                    echo.stop().await;
                                    Err(e)
                                }
                            }
                        }
                    },
                }
            };
            match started {
                Ok(pod) => return Ok((pod, ip)),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 8 => continue,
                Err(e) => return Err(format!("on {ip}: {e}")),
            }
        }
    }

    /// The certificate a `TLS_SERVER_CERT` pod serves: the Secret it mounts,
    /// when the harness made it (`CA_SIGNED_SECRETS`, `HARNESS_SECRETS`);
    /// a pod without `TLS_SERVER_CERT` serves no TLS. With
    /// `TLS_CLIENT_CACERTS` the pod asks for a client certificate and
    /// verifies one if given against the `ca.crt` of the ConfigMap it
    /// mounts, as echo-basic does.
    fn mounted_certificate(
        &self,
        workload: &manifests::Workload,
        writer: &Writer,
    ) -> Result<Option<std::sync::Arc<rustls::ServerConfig>>, String> {
        if !workload.modes.iter().any(|m| m == "TLS_SERVER_CERT") {
            return Ok(None);
        }
        let Some(secret) = &workload.tls_secret else {
            return Err(format!(
                "Deployment {}/{} sets TLS_SERVER_CERT but mounts no Secret",
                workload.namespace, workload.name
            ));
        };
        let key = (workload.namespace.clone(), secret.clone());
        let (cert, key_pem) = self.secrets.get(&key).ok_or_else(|| {
            format!(
                "Deployment {}/{} serves the certificate of Secret {}/{}, which the harness does not make",
                workload.namespace, workload.name, key.0, key.1
            )
        })?;
        let client_cas = if workload.modes.iter().any(|m| m == "TLS_CLIENT_CACERTS") {
            let config_map = workload.config_map.clone().unwrap_or_default();
            let bundle = writer
                .ca_bundles
                .get(&(workload.namespace.clone(), config_map.clone()))
                .ok_or_else(|| {
                    format!(
                        "Deployment {}/{} sets TLS_CLIENT_CACERTS but mounts no ConfigMap with a ca.crt ({config_map:?})",
                        workload.namespace, workload.name
                    )
                })?;
            Some(bundle.as_str())
        } else {
            None
        };
        l4::server_config_for_clients(cert, key_pem, client_cas).map(Some)
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
        let context = |only_gateway| CaseContext {
            http: proxy.http,
            https: proxy.https,
            only_gateway,
            timeout: config.case_timeout,
            fixture: self,
        };
        // One context per Gateway of the test: a case the port gave no
        // `gwAddr` goes to each in turn, as upstream sends the same
        // expectations to each of its Gateways (GatewayHTTPListenerIsolation);
        // a case with its own address uses the first.
        let contexts: Vec<CaseContext<'_>> = match test_gateways(test, &self.objects).as_slice() {
            [] => vec![context(None)],
            all => all.iter().map(|g| context(Some(g.clone()))).collect(),
        };
        let cases = test.cases.iter().enumerate();
        futures::stream::iter(cases.filter(|(index, _)| !skip.contains(index)))
            .map(|(index, case)| {
                let contexts = match case.gateway {
                    Some(_) => &contexts[..1],
                    None => &contexts[..],
                };
                async move {
                    let mut failure = None;
                    for context in contexts {
                        if let Err(e) = context.run(case).await {
                            failure = Some(match (&context.only_gateway, contexts.len()) {
                                (Some((ns, name)), 2..) => format!("on Gateway {ns}/{name}: {e}"),
                                _ => e,
                            });
                            break;
                        }
                    }
                    CaseOutcome {
                        name: case_name(case, index),
                        failure,
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
                Pod::Http(echo, _) => echo.stop().await,
                Pod::Grpc(echo) => drop(echo),
                Pod::Tcp(echo) => drop(echo),
                Pod::Udp(echo) => drop(echo),
                Pod::Dns(server) => drop(server),
            }
        }
        if keep {
            let dir = self.dir.keep();
            eprintln!("kept the manifests of {test} in {}", dir.display());
        }
    }
}

/// The client certificate authorities of frontend validation
/// (`CLIENT_CERTIFICATE_AUTHORITIES`): each CA in its ConfigMap's `ca.crt`,
/// and the client certificate it signs (clientAuth) in a TLS Secret.
/// Returns the client certificates made (`namespace/name` → certificate,
/// key PEM).
fn client_certificates(writer: &mut Writer) -> Result<Certificates, String> {
    use teapot_testkit::certs::TestCa;
    let mut secrets = Certificates::new();
    for (namespace, config_map, secret) in manifests::CLIENT_CERTIFICATE_AUTHORITIES {
        let ca = TestCa::new(config_map);
        writer.write(
            "ConfigMap",
            namespace,
            config_map,
            &ca_config_map(namespace, config_map, ca.cert_pem())?,
        )?;
        let pem = ca.issue_client(secret);
        let yaml = teapot_testkit::certs::tls_secret_yaml(namespace, secret, &pem);
        writer.write_text("Secret", namespace, secret, &yaml)?;
        secrets.insert(
            (namespace.to_string(), secret.to_string()),
            (pem.cert_pem, pem.key_pem),
        );
    }
    Ok(secrets)
}

/// A ConfigMap holding a CA bundle under `ca.crt`.
fn ca_config_map(namespace: &str, name: &str, pem: &str) -> Result<serde_yaml::Value, String> {
    let mut config_map: serde_yaml::Value = serde_yaml::from_str(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {namespace}}}\n"
    ))
    .map_err(|e| e.to_string())?;
    if let serde_yaml::Value::Mapping(map) = &mut config_map {
        let mut data = serde_yaml::Mapping::new();
        data.insert("ca.crt".into(), pem.into());
        map.insert("data".into(), serde_yaml::Value::Mapping(data));
    }
    Ok(config_map)
}

/// The backend certificate authorities `suite.go` creates: ConfigMap
/// `tls-checks-ca-certificate` with the CA that signs the certificate the
/// echo pods serve on their TLS port, ConfigMap `mismatch-ca-certificate`
/// with another one, and the Secrets that CA signs (`CA_SIGNED_SECRETS`).
/// Returns the gRPC echo pods' TLS configuration (ALPN h2) and every
/// serving certificate made (`namespace/name` → certificate, key PEM).
type Certificates = BTreeMap<(String, String), (String, String)>;

fn backend_certificates(
    writer: &mut Writer,
) -> Result<(std::sync::Arc<rustls::ServerConfig>, Certificates), String> {
    use teapot_testkit::certs::TestCa;
    let ca = TestCa::new("gateway-conformance backend CA");
    let mismatch = TestCa::new("gateway-conformance mismatch CA");
    let (uris, hosts): (Vec<&str>, Vec<&str>) = manifests::BACKEND_TLS_HOSTS
        .iter()
        .partition(|h| h.contains("://"));
    let leaf = ca.issue_with_uris(&hosts, &uris);
    let mut secrets = Certificates::new();
    for (namespace, name, names) in manifests::CA_SIGNED_SECRETS {
        let (uris, hosts): (Vec<&str>, Vec<&str>) = names.iter().partition(|h| h.contains("://"));
        let pem = ca.issue_with_uris(&hosts, &uris);
        let yaml = teapot_testkit::certs::tls_secret_yaml(namespace, name, &pem);
        writer.write_text("Secret", namespace, name, &yaml)?;
        secrets.insert(
            (namespace.to_string(), name.to_string()),
            (pem.cert_pem, pem.key_pem),
        );
    }
    // `MustCreateCASignedClientCertSecret(.., "tls-checks-client-certificate",
    // ca, ..)`: the client certificate a Gateway presents to its backends
    // (`spec.tls.backend.clientCertificateRef`), signed by the backend CA.
    let client = ca.issue_client(BACKEND_CLIENT_CERTIFICATE);
    let yaml = teapot_testkit::certs::tls_secret_yaml(
        manifests::BACKEND_TLS_NAMESPACE,
        BACKEND_CLIENT_CERTIFICATE,
        &client,
    );
    writer.write_text(
        "Secret",
        manifests::BACKEND_TLS_NAMESPACE,
        BACKEND_CLIENT_CERTIFICATE,
        &yaml,
    )?;
    secrets.insert(
        (
            manifests::BACKEND_TLS_NAMESPACE.to_string(),
            BACKEND_CLIENT_CERTIFICATE.to_string(),
        ),
        (client.cert_pem, client.key_pem),
    );
    for (name, pem) in [
        (manifests::BACKEND_TLS_CA, ca.cert_pem()),
        (manifests::BACKEND_TLS_MISMATCH_CA, mismatch.cert_pem()),
    ] {
        let config_map = ca_config_map(manifests::BACKEND_TLS_NAMESPACE, name, pem)?;
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
    Ok((std::sync::Arc::new(config), secrets))
}

/// The Secret of the backend client certificate `suite.go` makes.
const BACKEND_CLIENT_CERTIFICATE: &str = "tls-checks-client-certificate";

/// `--l4-pool conformance=CIDR --l4-default-pool conformance --l4-state
/// off`: the conformance namespaces belong to no Tenant, so the default
/// pool is theirs; no state file (each test starts afresh).
fn l4_pool_args(pool: &str) -> Vec<String> {
    if pool.is_empty() {
        return Vec::new();
    }
    [
        "--l4-pool".to_string(),
        format!("{L4_POOL_NAME}={pool}"),
        "--l4-default-pool".to_string(),
        L4_POOL_NAME.to_string(),
        "--l4-state".to_string(),
        "off".to_string(),
    ]
    .into()
}

/// Waits (at most [`ADDRESS_TIMEOUT`]) until every Gateway the cases
/// address shows an address in the admin status, as upstream's
/// `WaitForGatewayAddress`; returns what each shows (a Gateway without
/// any is left out: its cases report it).
async fn wait_for_addresses(
    proxy: &ProxyProcess,
    gateways: &[(String, String)],
) -> BTreeMap<(String, String), Vec<String>> {
    let deadline = Instant::now() + ADDRESS_TIMEOUT;
    let mut found = BTreeMap::new();
    loop {
        if let Ok((200, body)) = proxy.admin_get("/status").await
            && let Ok(status) = Status::parse(&body)
        {
            found = status
                .gateways
                .iter()
                .filter(|g| !g.addresses.is_empty())
                .map(|g| ((g.namespace.clone(), g.name.clone()), g.addresses.clone()))
                .collect();
        }
        let all = gateways.iter().all(|g| found.contains_key(g));
        if all || Instant::now() >= deadline {
            return found;
        }
        sleep(POLL).await;
    }
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
    /// The `ca.crt` of every ConfigMap written (`namespace/name`): what a
    /// pod mounting one verifies clients with (`TLS_CLIENT_CACERTS`).
    ca_bundles: BTreeMap<(String, String), String>,
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
        if let ("ConfigMap", Some(serde_yaml::Value::String(bundle))) =
            (kind, value.get("data").and_then(|d| d.get("ca.crt")))
        {
            self.ca_bundles
                .insert((namespace.to_string(), name.to_string()), bundle.clone());
        }
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

/// A name as a file name part: other characters than `[A-Za-z0-9.-]`
/// become `_`, and at most 100 of them are kept (a Kubernetes name may be
/// 253 characters long, a file name at most 255 bytes; the counter keeps
/// file names apart).
fn sanitize(name: &str) -> String {
    name.chars()
        .take(100)
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
        && case.subtest.is_empty()
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
    /// `tcp.WaitForValidTCPResponse`: echo-basic's TCP dialogue.
    Tcp,
    /// `udp.ExpectEchoResponseFromBackend`.
    Udp,
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
    (
        "tcp.MakeTCPRequestAndExpectEventuallyValidResponse",
        "tcp",
        Judgement::Tcp,
    ),
    ("udp.ExpectEchoResponseFromBackend", "udp", Judgement::Udp),
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
    let protocol = match case.helper.split('.').next().unwrap_or_default() {
        "grpc" => "grpc",
        "tcp" => "tcp",
        "udp" => "udp",
        _ => "http",
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
    /// The test's Gateway (`namespace`, `name`) a case without `gwAddr`
    /// goes to ([`test_gateways`], one context each), if any.
    only_gateway: Option<(String, String)>,
    timeout: Duration,
    fixture: &'a Fixture,
}

/// Where a case goes: its own address (`None`: the fleet's listener by
/// scheme), the Host header `http.CalculateHost` makes of the Gateway
/// address, and that address as gRPC's target (`:authority`).
struct Endpoint {
    addr: Option<SocketAddr>,
    host: String,
    gw_addr: String,
}

impl Endpoint {
    fn new(
        addr: Option<SocketAddr>,
        ip: std::net::IpAddr,
        port: Option<u16>,
        scheme: &str,
    ) -> Endpoint {
        let ip_text = match ip {
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            std::net::IpAddr::V4(v4) => v4.to_string(),
        };
        let gw_addr = match port {
            Some(port) => format!("{ip_text}:{port}"),
            None => ip_text.clone(),
        };
        Endpoint {
            addr,
            host: calculate_host(&gw_addr, scheme),
            gw_addr,
        }
    }
}

/// `http.CalculateHost`: the address without its port for HTTP on 80 and
/// HTTPS on 443, else as given.
fn calculate_host(gw_addr: &str, scheme: &str) -> String {
    let (host, port) = judge::split_host_port(gw_addr);
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => "80",
        "https" => "443",
        _ => "",
    };
    if !port.is_empty() && port == default {
        // `Ipv6SafeHost`: SplitHostPort took the brackets off.
        if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        }
    } else {
        gw_addr.to_string()
    }
}

/// The Gateways of a test, whose address a case without `gwAddr` goes to
/// (upstream sends every request to a Gateway's address): those the test
/// names, or when it names none, those its routes name as parents (a
/// test whose `gwAddr` the port could not read still applies routes to
/// the Gateway it sends to).
fn test_gateways(test: &TestFile, objects: &[Object]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = test
        .gateways
        .iter()
        .map(|g| (g.namespace.clone(), g.name.clone()))
        .collect();
    if !out.is_empty() {
        return out;
    }
    for route in objects.iter().filter(|o| o.kind.ends_with("Route")) {
        let parents = route
            .value
            .get("spec")
            .and_then(|s| s.get("parentRefs"))
            .and_then(serde_yaml::Value::as_sequence)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for parent in parents {
            let text = |key| parent.get(key).and_then(serde_yaml::Value::as_str);
            let gateway = text("kind").is_none_or(|k| k == "Gateway")
                && text("group").is_none_or(|g| g == "gateway.networking.k8s.io");
            let Some(name) = text("name").filter(|_| gateway) else {
                continue;
            };
            let key = (
                text("namespace").unwrap_or(&route.namespace).to_string(),
                name.to_string(),
            );
            if !out.contains(&key) {
                out.push(key);
            }
        }
    }
    out
}

/// The port of the Gateway's listener the address names (its first
/// listener when it names none or none of that name), as
/// `WaitForGatewayAddress` takes it.
fn listener_port(objects: &[Object], gateway: &GatewayAddress) -> Result<u16, String> {
    let object = objects
        .iter()
        .find(|o| o.kind == "Gateway" && o.namespace == gateway.namespace && o.name == gateway.name)
        .ok_or_else(|| {
            format!(
                "the case addresses Gateway {}/{}, which the manifests do not define",
                gateway.namespace, gateway.name
            )
        })?;
    let listeners = object
        .value
        .get("spec")
        .and_then(|s| s.get("listeners"))
        .and_then(serde_yaml::Value::as_sequence)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let named = listeners.iter().find(|l| {
        l.get("name").and_then(serde_yaml::Value::as_str) == Some(gateway.listener.as_str())
    });
    named
        .or(listeners.first())
        .and_then(|l| l.get("port"))
        .and_then(serde_yaml::Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| {
            format!(
                "Gateway {}/{} has no listener with a port",
                gateway.namespace, gateway.name
            )
        })
}

/// A route hostname the port recorded: `{"Routes": [{"Name", "Namespace"}],
/// "Index": n}`, the routes' `spec.hostnames` concatenated in order (as
/// `GatewayAndTLSRoutesMustBeAccepted` returns them), the n-th.
fn route_hostname(objects: &[Object], value: &Value) -> Result<String, String> {
    let index = value
        .get("Index")
        .and_then(Value::as_u64)
        .ok_or("RouteHostname without an Index")?;
    let mut hostnames = Vec::new();
    for route in value
        .get("Routes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = route
            .get("Name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let namespace = route
            .get("Namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let object = objects
            .iter()
            .find(|o| o.kind.ends_with("Route") && o.namespace == namespace && o.name == name)
            .ok_or_else(|| format!("no route {namespace}/{name} among the manifests"))?;
        hostnames.extend(
            object
                .value
                .get("spec")
                .and_then(|s| s.get("hostnames"))
                .and_then(serde_yaml::Value::as_sequence)
                .into_iter()
                .flatten()
                .filter_map(|h| h.as_str().map(str::to_string)),
        );
    }
    usize::try_from(index)
        .ok()
        .and_then(|i| hostnames.get(i).cloned())
        .ok_or_else(|| {
            format!(
                "the routes have {} hostnames, none at index {index}",
                hostnames.len()
            )
        })
}

/// One round trip's result.
struct Exchange {
    sent: SentRequest,
    request: CapturedRequest,
    response: CapturedResponse,
}

impl CaseContext<'_> {
    async fn run(&self, case: &Case) -> Result<(), String> {
        if let Some(result) = self.run_plain(case).await {
            return result;
        }
        if let Some(result) = self.run_code(case).await {
            return result;
        }
        let (scheme, judgement) = helper(case)?;
        let unjudged = case.unjudged_fields();
        if !unjudged.is_empty() {
            return Err(format!(
                "the case has fields this runner does not judge: {}",
                unjudged.join(", ")
            ));
        }
        if judgement == Judgement::Tcp {
            return self.run_tcp(case).await;
        }
        if judgement == Judgement::Udp {
            return self.run_udp(case).await;
        }
        if matches!(judgement, Judgement::Grpc | Judgement::GrpcFailure) {
            return self.run_grpc(case, judgement).await;
        }
        let case = self.with_client_certs(case)?;
        let case = if judgement == Judgement::ConsistentAndMirrored {
            with_request_id(&case, &request_id())
        } else {
            case
        };
        let case = code::per_case(&case)?;
        let proto = protocol(&case.request.protocol, scheme)?;
        let case_ref = &case;
        self.eventually(CONSECUTIVE_SUCCESSES, move || async move {
            // Values the test makes anew for each attempt (a UUID that
            // echo-basic's retry simulation counts attempts by).
            let fresh = code::per_attempt(case_ref);
            let case = fresh.as_ref().unwrap_or(case_ref);
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
                Judgement::Grpc | Judgement::GrpcFailure | Judgement::Tcp | Judgement::Udp => Err(
                    Attempt::Fatal(format!("a {} case judged as HTTP", case.protocol)),
                ),
                // As `WaitForConsistentFailureTLSResponse`: any error of the
                // round trip (a refused handshake, an unverified server
                // certificate, a reset) is the failure expected; the case's
                // own errors (a Secret the harness does not make) are not.
                Judgement::RequestFails => match result {
                    Err(Attempt::Fatal(e)) => Err(Attempt::Fatal(e)),
                    Err(Attempt::Retry(_)) => Ok(()),
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

    /// Where a case's first request goes, as upstream's `gwAddr` says: the
    /// Gateway's own status address at its listener's port, or, for a
    /// Gateway that shows only the fleet's address (or a case naming none),
    /// the fleet's `--http`/`--https` listener by scheme.
    ///
    /// A case whose `gwAddr` the port could not read (computed at run
    /// time) goes to the test's Gateway when the test names exactly one, at
    /// the port its Host names (an HTTP client connects where the Host
    /// says), else the scheme's; with more or none, to the fleet.
    fn endpoint(&self, case: &Case, scheme: &str) -> Result<Endpoint, String> {
        let default_port = if scheme == "https" { 443 } else { 80 };
        let fleet = self.http.ip();
        let (key, port) = match (&case.gateway, &self.only_gateway) {
            (Some(gateway), _) => {
                let port = match gateway.port {
                    Some(port) => Some(port),
                    None => {
                        let listener = listener_port(&self.fixture.objects, gateway)?;
                        gateway.use_port.then_some(listener)
                    }
                };
                ((gateway.namespace.clone(), gateway.name.clone()), port)
            }
            (None, Some(only)) => {
                let port = judge::split_host_port(&case.request.host)
                    .1
                    .parse::<u16>()
                    .unwrap_or(default_port);
                (only.clone(), Some(port))
            }
            (None, None) => return Ok(Endpoint::new(None, fleet, Some(default_port), scheme)),
        };
        let addresses = self
            .fixture
            .addresses
            .get(&key)
            .cloned()
            .unwrap_or_default();
        let own = addresses
            .iter()
            .filter_map(|a| a.parse::<std::net::IpAddr>().ok())
            .find(|ip| *ip != fleet);
        Ok(match own {
            Some(ip) => {
                let connect = SocketAddr::new(ip, port.unwrap_or(default_port));
                Endpoint::new(Some(connect), ip, port, scheme)
            }
            None => Endpoint::new(None, fleet, port, scheme),
        })
    }

    /// A redirect's next hop: an address of its own when the `Location`
    /// names an IP that is not the fleet's, else the fleet's listener.
    fn redirect_target(&self, host: &str, port: &str, scheme: &str) -> Option<SocketAddr> {
        let ip = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .ok()
            .filter(|ip| *ip != self.http.ip())?;
        let default_port = if scheme == "https" { 443 } else { 80 };
        Some(SocketAddr::new(ip, port.parse().unwrap_or(default_port)))
    }

    /// A helper argument or case field as text: a string, or the route
    /// hostname the port recorded (`{"RouteHostname": {"Routes": [...],
    /// "Index": n}}`: the routes' `spec.hostnames`, concatenated, at n).
    fn text(&self, value: &Value) -> Result<String, String> {
        match value {
            Value::String(s) => Ok(s.clone()),
            Value::Object(map) if map.contains_key("RouteHostname") => {
                route_hostname(&self.fixture.objects, &map["RouteHostname"])
            }
            other => Err(format!("{other} is not text this runner can read")),
        }
    }

    /// A certificate argument's PEM: `{"Secret": {"Name", "Namespace"},
    /// "Key": "tls.crt" | "tls.key"}`, read from the Secret the runner
    /// wrote (what `kubernetes.GetTLSSecret` returns); None when the case
    /// passes none (`nil`).
    fn certificate_argument(&self, case: &Case, name: &str) -> Result<Option<String>, String> {
        let Some(value) = case.arguments.get(name) else {
            return Ok(None);
        };
        self.secret_part(&format!("argument {name}"), value)
            .map(Some)
    }

    /// A Secret part a case or argument names (`{"Secret": {"Name",
    /// "Namespace"}, "Key": "tls.crt" | "tls.key"}`), as the runner wrote
    /// it; `name` says which field, for errors.
    fn secret_part(&self, name: &str, value: &Value) -> Result<String, String> {
        let field = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
        let secret = value.get("Secret").cloned().unwrap_or_default();
        let (Some(secret_name), Some(namespace), Some(key)) = (
            field(&secret, "Name"),
            field(&secret, "Namespace"),
            field(value, "Key"),
        ) else {
            return Err(format!("{name}: {value} names no Secret and key"));
        };
        let (cert, private) = self
            .fixture
            .secrets
            .get(&(namespace.clone(), secret_name.clone()))
            .ok_or_else(|| {
                format!("{name}: Secret {namespace}/{secret_name}, which the harness does not make")
            })?;
        match key.as_str() {
            "tls.crt" => Ok(cert.clone()),
            "tls.key" => Ok(private.clone()),
            other => Err(format!("{name}: key {other:?} of a TLS Secret")),
        }
    }

    /// The case with its `Request.ClientCert` (and `ExpectedRequest`'s)
    /// read from the Secret it names: the PEM `kubernetes.GetTLSSecret`
    /// returns, which the judge looks for among the backend's peer
    /// certificates.
    fn with_client_certs(&self, case: &Case) -> Result<Case, String> {
        let mut case = case.clone();
        let mut requests = vec![("Request", &mut case.request)];
        if let Some(expected) = case.expected_request.as_mut() {
            requests.push(("ExpectedRequest.Request", &mut expected.request));
        }
        for (parent, request) in requests {
            if let Some(value) = request.client_cert.as_mut()
                && value.is_object()
            {
                *value = Value::String(self.secret_part(&format!("{parent}.ClientCert"), value)?);
            }
        }
        Ok(case)
    }

    /// The TLS client of a case (`tls` helpers' arguments): the server
    /// certificate as the only root, the client certificate presented;
    /// without them, any certificate accepted and none presented.
    fn tls_config(&self, case: &Case) -> Result<rustls::ClientConfig, String> {
        let server = self.certificate_argument(case, "serverCertificate")?;
        let client = match (
            self.certificate_argument(case, "clientCertificate")?,
            self.certificate_argument(case, "clientCertificateKey")?,
        ) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(
                    "a client certificate without its key, or a key without its certificate".into(),
                );
            }
        };
        tls_client::client_config(
            server.as_deref(),
            client.as_ref().map(|(c, k)| (c.as_str(), k.as_str())),
        )
    }

    fn argument_text(&self, case: &Case, name: &str) -> Result<String, String> {
        case.arguments
            .get(name)
            .map(|v| self.text(v))
            .transpose()
            .map(Option::unwrap_or_default)
    }

    /// The L4 address of a case: the Gateway's own address at its
    /// listener's port; the fleet serves no TCP or UDP listener of a
    /// Gateway.
    fn l4_address(&self, case: &Case) -> Result<SocketAddr, String> {
        let gateway = case.gateway.as_ref().ok_or_else(|| {
            "the case names no Gateway (gwAddr is computed at run time): nowhere to send it"
                .to_string()
        })?;
        let endpoint = self.endpoint(case, "tcp")?;
        match endpoint.addr {
            Some(addr) if gateway.use_port => Ok(addr),
            _ => Err(format!(
                "Gateway {}/{} shows no address of its own (status addresses: [{}]); its L4 listeners are served only there",
                gateway.namespace,
                gateway.name,
                self.fixture
                    .addresses
                    .get(&(gateway.namespace.clone(), gateway.name.clone()))
                    .map(|a| a.join(", "))
                    .unwrap_or_default()
            )),
        }
    }

    /// `tcp.MakeTCPRequestAndExpectEventuallyValidResponse`: TLS with the
    /// `serverName` argument when `useTLS`, then echo-basic's TCP dialogue
    /// until one attempt passes.
    async fn run_tcp(&self, case: &Case) -> Result<(), String> {
        let addr = self.l4_address(case)?;
        let use_tls = match case.arguments.get("useTLS") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(format!("useTLS is {other}, not a bool")),
        };
        let server_name = self.argument_text(case, "serverName")?;
        let field = |name: &str| -> Result<String, String> {
            case.other
                .get(name)
                .map(|v| self.text(v))
                .transpose()
                .map(Option::unwrap_or_default)
        };
        let expected = TcpExpected {
            backend_is_tls: case
                .other
                .get("BackendIsTLS")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            backend: case.backend.clone(),
            namespace: case.namespace.clone(),
            tls_protocol: field("TLSProtocol")?,
            hostname: field("Hostname")?,
        };
        let expected = &expected;
        let sni = use_tls.then_some(server_name.as_str());
        self.eventually(1, move || async move {
            let got = l4::tcp_exchange(addr, sni, REQUEST_TIMEOUT)
                .await
                .map_err(Attempt::Retry)?;
            l4::compare_tcp(expected, &got).map_err(Attempt::Retry)
        })
        .await
        .map(|_| ())
    }

    /// `udp.ExpectEchoResponseFromBackend`: the probe until an answer from
    /// the expected Service and namespace.
    async fn run_udp(&self, case: &Case) -> Result<(), String> {
        let addr = self.l4_address(case)?;
        let service = case
            .other
            .get("Service")
            .map(|v| self.text(v))
            .transpose()?
            .unwrap_or_default();
        let (service, namespace) = (service.as_str(), case.namespace.as_str());
        self.eventually(1, move || async move {
            l4::udp_exchange(addr, service, namespace, REQUEST_TIMEOUT)
                .await
                .map_err(Attempt::Retry)
        })
        .await
        .map(|_| ())
    }

    /// The gRPC helpers: calls over h2c to the HTTP listener, with the
    /// client's default `:authority` (the Gateway address, port 80) unless
    /// the case sets one.
    async fn run_grpc(&self, case: &Case, judgement: Judgement) -> Result<(), String> {
        let expected = GrpcCase::from_case(case)?;
        let expected = &expected;
        let endpoint = self.endpoint(case, "http")?;
        let addr = endpoint.addr.unwrap_or(self.http);
        let authority = endpoint.gw_addr.as_str();
        self.eventually(CONSECUTIVE_SUCCESSES, move || async move {
            // Upstream gives each RPC the time left to consistency.
            let got = grpc::call(addr, authority, expected, self.timeout.max(POLL)).await;
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

    /// `AwaitConvergence`: retries until `needed` successes in a row
    /// ([`CONSECUTIVE_SUCCESSES`]; the TCP and UDP helpers' `Eventually`
    /// wants one), within the case timeout; the last failure is the reason.
    async fn eventually<F, Fut>(&self, needed: usize, mut attempt: F) -> Result<usize, String>
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
                    if successes >= needed {
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

        let endpoint = self.endpoint(case, scheme).map_err(Attempt::Fatal)?;
        let mut connect = endpoint.addr;
        let mut scheme = scheme.to_string();
        let mut host = if case.request.host.is_empty() {
            endpoint.host.clone()
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
            let server_name = self
                .argument_text(case, "serverName")
                .map_err(Attempt::Fatal)?;
            let sni = [&server_name, &case.server_name, &case.request.sni, &host]
                .into_iter()
                .find(|s| !s.is_empty())
                .map(|s| judge::split_host_port(s).0.to_string())
                .unwrap_or_default();
            let addr = connect.unwrap_or(if scheme == "https" {
                self.https
            } else {
                self.http
            });
            let tls = if scheme == "https" {
                Some((sni.as_str(), self.tls_config(case).map_err(Attempt::Fatal)?))
            } else {
                None
            };
            let request = Request {
                method: method.clone(),
                target: target.clone(),
                host: host.clone(),
                headers: headers.clone(),
                body: body.clone(),
                proto,
            };
            let response = send(addr, tls.as_ref().map(|(s, c)| (*s, c)), &request).await?;
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
                connect = self.redirect_target(&next.host, &next.port, &scheme);
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

/// One request on a fresh connection: over TLS with `tls` (SNI, client
/// configuration), else in the clear.
async fn send(
    addr: SocketAddr,
    tls: Option<(&str, &rustls::ClientConfig)>,
    request: &Request,
) -> Result<Response, Attempt> {
    let what = || {
        format!(
            "{} {} (Host {}, via {addr})",
            request.method, request.target, request.host
        )
    };
    let exchange = async {
        match tls {
            Some((sni, config)) => {
                client::Connection::open_with_tls_config(addr, sni, config, request.proto)
                    .await?
                    .send(request)
                    .await
            }
            None => client::send(addr, &Transport::Plain, request).await,
        }
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
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
    use serde::Deserialize;

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
        assert_eq!(helper(&c).unwrap(), ("tcp", Judgement::Tcp));
        let c = case(r#"{"helper": "udp.ExpectEchoResponse", "protocol": "udp"}"#);
        assert_eq!(
            helper(&c).unwrap_err(),
            "helper udp.ExpectEchoResponse (udp case) is not supported by this runner"
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

    fn objects(yaml: &str) -> Vec<Object> {
        serde_yaml::Deserializer::from_str(yaml)
            .map(|doc| {
                let value = serde_yaml::Value::deserialize(doc).unwrap();
                let text = |k: &str| {
                    value
                        .get("metadata")
                        .and_then(|m| m.get(k))
                        .and_then(serde_yaml::Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                Object {
                    kind: value["kind"].as_str().unwrap().to_string(),
                    namespace: text("namespace"),
                    name: text("name"),
                    value: value.clone(),
                }
            })
            .collect()
    }

    const GATEWAY_AND_ROUTES: &str = "
kind: Gateway
metadata: {namespace: ns, name: gw}
spec:
  listeners:
  - {name: http, port: 80, protocol: HTTP}
  - {name: tcp, port: 9000, protocol: TCP}
---
kind: TLSRoute
metadata: {namespace: ns, name: a}
spec: {hostnames: [a.example.com, b.example.com]}
---
kind: TLSRoute
metadata: {namespace: ns, name: b}
spec: {hostnames: [c.example.com]}
";

    #[test]
    fn listener_ports_and_route_hostnames_come_from_the_manifests() {
        let objects = objects(GATEWAY_AND_ROUTES);
        let address = |listener: &str, name: &str| GatewayAddress {
            name: name.into(),
            namespace: "ns".into(),
            listener: listener.into(),
            use_port: true,
            port: None,
        };
        assert_eq!(listener_port(&objects, &address("tcp", "gw")), Ok(9000));
        // No name, or a name no listener has: the first listener.
        assert_eq!(listener_port(&objects, &address("", "gw")), Ok(80));
        assert_eq!(listener_port(&objects, &address("nope", "gw")), Ok(80));
        assert!(
            listener_port(&objects, &address("", "other"))
                .unwrap_err()
                .contains("ns/other")
        );
        let hostname = |index: u64| serde_json::json!({"Routes": [{"Name": "a", "Namespace": "ns"}, {"Name": "b", "Namespace": "ns"}], "Index": index});
        assert_eq!(
            route_hostname(&objects, &hostname(2)).unwrap(),
            "c.example.com"
        );
        assert_eq!(
            route_hostname(&objects, &hostname(1)).unwrap(),
            "b.example.com"
        );
        assert!(
            route_hostname(&objects, &hostname(3))
                .unwrap_err()
                .contains("3 hostnames")
        );
    }

    /// `http.CalculateHost`, and the Gateway address a case is given.
    #[test]
    fn gateway_addresses_as_upstream_writes_them() {
        assert_eq!(calculate_host("10.0.0.1:80", "http"), "10.0.0.1");
        assert_eq!(calculate_host("10.0.0.1:443", "https"), "10.0.0.1");
        assert_eq!(calculate_host("10.0.0.1:443", "http"), "10.0.0.1:443");
        assert_eq!(calculate_host("10.0.0.1:8080", "http"), "10.0.0.1:8080");
        assert_eq!(calculate_host("10.0.0.1", "http"), "10.0.0.1");
        let ip = "127.48.0.1".parse().unwrap();
        let own = Endpoint::new(Some(SocketAddr::new(ip, 8080)), ip, Some(8080), "http");
        assert_eq!(
            (own.host.as_str(), own.gw_addr.as_str()),
            ("127.48.0.1:8080", "127.48.0.1:8080")
        );
        let portless = Endpoint::new(None, ip, None, "https");
        assert_eq!(
            (portless.host.as_str(), portless.gw_addr.as_str()),
            ("127.48.0.1", "127.48.0.1")
        );
        let v6 = "::1".parse().unwrap();
        assert_eq!(Endpoint::new(None, v6, Some(443), "https").host, "[::1]");
    }

    /// Objects with the longest names Kubernetes allows still get a file.
    #[test]
    fn long_names_make_short_file_names() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = Writer {
            dir: dir.path().to_path_buf(),
            counter: 0,
            ca_bundles: BTreeMap::new(),
        };
        let name = "a".repeat(253);
        writer
            .write_text("Gateway", &"n".repeat(63), &name, "kind: Gateway\n")
            .unwrap();
        assert_eq!(sanitize("x/y"), "x_y");
        assert_eq!(sanitize(&name).len(), 100);
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
