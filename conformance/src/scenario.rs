//! Running one scenario: a namespace directory, echo backends, a proxy
//! process, and the steps in order.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value as Json;
use teapot_testkit::client::{self, Proto, Request, Response, Transport};
use teapot_testkit::echo::{EchoIdentity, EchoServer};
use teapot_testkit::process::ProxyProcess;
use tokio::time::{Instant, sleep};

use crate::admin::Status;
use crate::auth_service::AuthService;
use crate::feature::PickleStep;
use crate::manifests::{self, BackendService};
use crate::steps::{self, Argument, HeaderCheck, Step};
use crate::target::{self, Scheme, Target};

/// The User-Agent of the upstream Go client.
pub const USER_AGENT: &str = "Go-http-client/1.1";
/// The User-Agent of grpc-go, for gRPC calls.
pub const GRPC_USER_AGENT: &str = "grpc-go/1.72.0";
/// Per-request timeout, as upstream (`HTTPClientTimeout`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Redirects followed per request.
const MAX_REDIRECTS: usize = 10;
/// How long "The Ingress status shows ..." and scaling wait for the proxy.
const STATUS_TIMEOUT: Duration = Duration::from_secs(20);
/// How long to wait for the proxy to pick up a manifest change.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Poll interval against the admin API.
const POLL: Duration = Duration::from_millis(100);

/// Why a step failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFailure {
    /// The step's text (without keyword).
    pub step: String,
    /// What was observed.
    pub reason: String,
}

/// One running echo instance (a "pod").
struct Instance {
    echo: EchoServer,
    /// The EndpointSlice file that names it.
    slice_file: PathBuf,
}

/// One backend Service and its running instances (a "deployment").
struct Backend {
    spec: BackendService,
    ingress: String,
    next_index: usize,
    instances: Vec<Instance>,
}

/// The last request's outcome.
struct Exchange {
    response: Response,
    /// The echo server's JSON answer, when the body is a JSON object.
    echo: Option<Json>,
    /// Every URL visited, redirects included.
    visited: Vec<String>,
    /// From sending the first request to the last response's end.
    elapsed: Duration,
}

/// The state of one scenario run. Cleaned up by [`ScenarioRun::finish`]
/// (and, as a fallback, by dropping: the proxy is killed, echo servers stop).
pub struct ScenarioRun {
    teapot: PathBuf,
    dir: Option<tempfile::TempDir>,
    dir_path: PathBuf,
    namespace: String,
    file_counter: usize,
    ingress: Option<String>,
    backends: Vec<Backend>,
    proxy: Option<ProxyProcess>,
    last: Option<Exchange>,
    batch: Option<Vec<(u16, Option<String>)>>,
    /// The service that answered each response of the last `I send N
    /// requests` batch (empty when not an echo).
    batch_services: Vec<String>,
    /// Cookies responses have set (`name=value`), kept as a client keeps
    /// them for [`Step::SendRequestWithCookie`].
    cookies: Vec<String>,
    /// The scenario's authentication service (`auth-url`), when it has one.
    auth: Option<AuthService>,
    /// Each Ingress's file, by name: an update writes over it.
    ingress_files: BTreeMap<String, PathBuf>,
    /// The client certificate and key (PEM) of the scenario's mutual TLS
    /// Secret, presented on request.
    client_certificate: Option<(String, String)>,
    /// Services whose endpoint is the authentication service (httpbun);
    /// true once their Service and EndpointSlice are written.
    httpbun_services: BTreeMap<String, bool>,
    /// The address of the authentication service once stopped.
    stopped_auth: Option<SocketAddr>,
    /// The last gRPC call's outcome: `Err` says why it failed.
    grpc: Option<Result<(), String>>,
    /// Pods remembered by name.
    pods: BTreeMap<String, String>,
}

impl ScenarioRun {
    /// A fresh namespace directory holding the default IngressClass.
    pub fn new(teapot: &Path) -> Result<ScenarioRun, String> {
        let dir = tempfile::Builder::new()
            .prefix("teapot-conformance-")
            .tempdir()
            .map_err(|e| format!("creating the namespace directory: {e}"))?;
        let mut run = ScenarioRun {
            teapot: teapot.to_path_buf(),
            dir_path: dir.path().to_path_buf(),
            dir: Some(dir),
            namespace: format!("conf-{}", random_suffix(8)),
            file_counter: 0,
            ingress: None,
            backends: Vec::new(),
            proxy: None,
            last: None,
            batch: None,
            batch_services: Vec::new(),
            cookies: Vec::new(),
            auth: None,
            ingress_files: BTreeMap::new(),
            client_certificate: None,
            httpbun_services: BTreeMap::new(),
            stopped_auth: None,
            grpc: None,
            pods: BTreeMap::new(),
        };
        run.write_file(
            "ingressclass",
            manifests::INGRESS_CLASS,
            &manifests::ingress_class_yaml(),
        )?;
        Ok(run)
    }

    /// The namespace name.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The namespace directory.
    pub fn dir(&self) -> &Path {
        &self.dir_path
    }

    /// Runs every step in order; stops at the first failure.
    pub async fn run_steps(&mut self, steps: &[PickleStep]) -> Result<(), StepFailure> {
        for step in steps {
            self.step(step).await.map_err(|reason| StepFailure {
                step: step.text.clone(),
                reason,
            })?;
        }
        Ok(())
    }

    /// Stops the proxy and every echo server; keeps the directory when `keep`
    /// and returns its path then.
    pub async fn finish(mut self, keep: bool) -> Option<PathBuf> {
        if let Some(mut proxy) = self.proxy.take() {
            if proxy.terminate().is_ok() {
                let _ = proxy.wait(Duration::from_secs(3)).await;
            }
            drop(proxy);
        }
        for backend in std::mem::take(&mut self.backends) {
            for instance in backend.instances {
                instance.echo.stop().await;
            }
        }
        let dir = self.dir.take()?;
        if keep { Some(dir.keep()) } else { None }
    }

    async fn step(&mut self, step: &PickleStep) -> Result<(), String> {
        let parsed = steps::parse(&step.text)?;
        let doc = step.docstring.as_deref();
        let table = step.table.as_deref();
        match parsed.argument() {
            Argument::DocString if doc.is_none() => {
                return Err("this step needs a docstring (\"\"\" block)".into());
            }
            Argument::Table if table.is_none() => {
                return Err("this step needs a data table".into());
            }
            _ => {}
        }
        match parsed {
            // The scenario's namespace exists from the start.
            Step::NewNamespace => Ok(()),
            Step::IngressNamedWithSpec { name } => {
                let doc = self.with_auth_address(doc.unwrap_or(""));
                let ingress = manifests::ingress_from_spec(&name, &self.namespace, &doc)?;
                self.install_ingress(ingress, name).await
            }
            Step::IngressResource | Step::IngressInNewNamespace => {
                let doc = self.with_auth_address(doc.unwrap_or(""));
                let (ingress, name) = manifests::ingress_from_manifest(&self.namespace, &doc)?;
                self.install_ingress(ingress, name).await
            }
            Step::UpdateIngress { name } => {
                let doc = self.with_auth_address(doc.unwrap_or(""));
                let (ingress, named) = manifests::ingress_from_manifest(&self.namespace, &doc)?;
                if named != name {
                    return Err(format!(
                        "the manifest names the Ingress {named:?}, not {name:?}"
                    ));
                }
                if !self.ingress_files.contains_key(&name) {
                    return Err(format!("no Ingress named {name:?} was created before"));
                }
                self.install_ingress(ingress, name).await
            }
            Step::ObjectResource { kind } => {
                let doc = self.with_auth_address(doc.unwrap_or(""));
                let (object, name) = manifests::object_from_manifest(&kind, &self.namespace, &doc)?;
                let before = self.generation().await;
                self.write_file(
                    &kind.to_ascii_lowercase(),
                    &name,
                    &manifests::to_string(&object),
                )?;
                self.wait_reload(before).await;
                Ok(())
            }
            Step::MutualTlsSecret { name, host } => self.mutual_tls_secret(&name, &host).await,
            Step::ResponseBody { text, contains } => {
                let last = self.last()?;
                let body = last.response.text();
                if body.contains(&text) == contains {
                    Ok(())
                } else {
                    Err(format!(
                        "expected the response body {}to contain {text:?} ({})",
                        if contains { "" } else { "not " },
                        describe(last)
                    ))
                }
            }
            Step::TookAtLeast { millis } => {
                let last = self.last()?;
                if last.elapsed >= Duration::from_millis(millis) {
                    Ok(())
                } else {
                    Err(format!(
                        "expected the exchange to take at least {millis} ms but it took {} ms ({})",
                        last.elapsed.as_millis(),
                        describe(last)
                    ))
                }
            }
            Step::AuthService => {
                let service = AuthService::start()
                    .await
                    .map_err(|e| format!("starting the authentication service: {e}"))?;
                self.auth = Some(service);
                Ok(())
            }
            Step::SendGrpc { url, headers } => {
                let target = Target::parse(&url)?;
                self.batch = None;
                self.last = None;
                let outcome = match self.grpc_call(target, &headers).await {
                    Ok(exchange) => {
                        let status = exchange.response.status;
                        let grpc_status = exchange
                            .response
                            .headers
                            .get("grpc-status")
                            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
                        let outcome = match (status, grpc_status.as_deref()) {
                            (200, None | Some("0")) => Ok(()),
                            (200, Some(code)) => Err(format!("grpc-status {code}")),
                            (status, _) => Err(format!("HTTP status {status}")),
                        };
                        self.last = Some(exchange);
                        outcome
                    }
                    Err(e) => Err(e),
                };
                self.grpc = Some(outcome);
                Ok(())
            }
            Step::GrpcOutcome { succeed } => {
                let outcome = self
                    .grpc
                    .as_ref()
                    .ok_or("no gRPC request has been sent in this scenario yet")?;
                match (succeed, outcome) {
                    (true, Ok(())) | (false, Err(_)) => Ok(()),
                    (true, Err(why)) => Err(format!("expected the gRPC call to succeed: {why}")),
                    (false, Ok(())) => {
                        Err("expected the gRPC call to fail but it succeeded".to_string())
                    }
                }
            }
            Step::SendConcurrent {
                count,
                url,
                headers,
            } => {
                let target = Target::parse(&url)?;
                let (http, https) = self.ensure_proxy().await?;
                let addr = match target.scheme {
                    Scheme::Http => http,
                    Scheme::Https => https,
                };
                let sends = (0..count)
                    .map(|_| send_once(addr, "GET", &target, &headers, &[], None, Proto::Http1));
                let mut batch = Vec::with_capacity(count);
                for response in futures::future::join_all(sends).await {
                    let response = response?;
                    let echo = serde_json::from_slice::<Json>(&response.body).ok();
                    let pod = echo
                        .as_ref()
                        .and_then(|e| e.get("pod"))
                        .and_then(Json::as_str)
                        .map(str::to_string);
                    batch.push((response.status, pod));
                }
                self.batch = Some(batch);
                Ok(())
            }
            Step::RememberPod(name) => {
                let pod = echo_string(self.last()?, "pod")?;
                self.pods.insert(name, pod);
                Ok(())
            }
            Step::ServedByPod { name, same } => {
                let want = self
                    .pods
                    .get(&name)
                    .ok_or_else(|| format!("no pod was remembered as {name:?}"))?;
                let got = echo_string(self.last()?, "pod")?;
                match (same, &got == want) {
                    (true, true) | (false, false) => Ok(()),
                    (true, false) => Err(format!(
                        "expected the response from the pod {want:?} ({name}) but {got:?} served it"
                    )),
                    (false, true) => Err(format!(
                        "expected the response from another pod than {want:?} ({name})"
                    )),
                }
            }
            Step::ServiceSpread { services, at_least } => {
                if self.batch.is_none() || self.batch_services.is_empty() {
                    return Err("no batch of requests (\"I send N requests to ...\") was sent before this step".into());
                }
                let mut by_service: BTreeMap<&str, usize> = BTreeMap::new();
                for service in &self.batch_services {
                    *by_service.entry(service.as_str()).or_default() += 1;
                }
                let spread = by_service
                    .iter()
                    .map(|(service, n)| format!("{n}x {service:?}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                if by_service.len() == services && by_service.values().all(|n| *n >= at_least) {
                    Ok(())
                } else {
                    Err(format!(
                        "expected {services} services with at least {at_least} responses each, got {spread}"
                    ))
                }
            }
            Step::ResponsesWithStatus { count, status } => {
                let batch = self
                    .batch
                    .as_ref()
                    .ok_or("no batch of requests was sent before this step")?;
                let got = batch.iter().filter(|(code, _)| *code == status).count();
                if got == count {
                    Ok(())
                } else {
                    let mut by_status: BTreeMap<u16, usize> = BTreeMap::new();
                    for (code, _) in batch {
                        *by_status.entry(*code).or_default() += 1;
                    }
                    Err(format!(
                        "expected {count} responses with status {status}, got {}",
                        by_status
                            .iter()
                            .map(|(code, n)| format!("{n}x {code}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }
            }
            Step::StopAuthService => match self.auth.take() {
                Some(auth) => {
                    let addr = auth.addr;
                    auth.stop().await;
                    // Later docstrings keep naming the stopped address.
                    self.stopped_auth = Some(addr);
                    Ok(())
                }
                None => Err("no httpbun authentication service is running".into()),
            },
            Step::HttpbunBackend(service) => {
                if self.auth.is_none() {
                    return Err(
                        "the httpbun authentication service must be started before this step"
                            .into(),
                    );
                }
                self.httpbun_services.insert(service, false);
                Ok(())
            }
            Step::TlsSecret { name, host } => self.tls_secret(&name, &host).await,
            Step::StatusShowsAddress => self.status_shows_address().await,
            Step::StatusHasNoAddress => self.status_has_no_address().await,
            Step::SendRequestParts { method, host, path } => {
                let target = Target::from_parts(Scheme::Http, &host, &path);
                self.batch = None;
                self.last = Some(self.exchange(&method, target).await?);
                Ok(())
            }
            Step::SendRequest { method, url } => {
                let target = Target::parse(&url)?;
                self.batch = None;
                self.last = Some(self.exchange(&method, target).await?);
                Ok(())
            }
            Step::SendRequestWith {
                method,
                url,
                headers,
                follow,
                body,
                client_certificate,
            } => {
                let target = Target::parse(&url)?;
                self.batch = None;
                let send = Send {
                    headers: &headers,
                    follow,
                    body: &vec![b'x'; body],
                    client_certificate,
                };
                let exchange = self.exchange_full(&method, target, send);
                self.last = Some(exchange.await?);
                Ok(())
            }
            Step::SendRequestWithCookie {
                method,
                url,
                cookie,
            } => {
                let target = Target::parse(&url)?;
                let last = response_headers(&self.last()?.response);
                for (_, set) in last.iter().filter(|(name, _)| name == "set-cookie") {
                    let Some(pair) = set.split(';').next().map(str::trim) else {
                        continue;
                    };
                    let name = pair.split('=').next().unwrap_or("");
                    self.cookies
                        .retain(|kept| kept.split('=').next() != Some(name));
                    self.cookies.push(pair.to_string());
                }
                let prefix = format!("{cookie}=");
                let pair = self
                    .cookies
                    .iter()
                    .find(|kept| kept.starts_with(&prefix))
                    .cloned()
                    .ok_or_else(|| format!("no response has set the cookie {cookie:?}"))?;
                self.batch = None;
                let headers = [("Cookie".to_string(), pair)];
                let exchange = self.exchange_with(&method, target, &headers, true);
                self.last = Some(exchange.await?);
                Ok(())
            }
            Step::SendRequests { count, url } => {
                let target = Target::parse(&url)?;
                let mut batch = Vec::with_capacity(count);
                self.batch_services.clear();
                for _ in 0..count {
                    let exchange = self.exchange("GET", target.clone()).await?;
                    let pod = echo_field(&exchange, "pod");
                    batch.push((exchange.response.status, pod));
                    self.batch_services
                        .push(echo_field(&exchange, "service").unwrap_or_default());
                    self.last = Some(exchange);
                }
                self.batch = Some(batch);
                Ok(())
            }
            Step::AllResponses { status, pods } => self.all_responses(status, pods),
            Step::VerifyTlsHostname { host } => verify_tls(self.last()?, &host),
            Step::ResponseStatus(want) => {
                let last = self.last()?;
                if last.response.status == want {
                    Ok(())
                } else {
                    Err(format!(
                        "expected status code {want} but {} was returned ({})",
                        last.response.status,
                        describe(last)
                    ))
                }
            }
            Step::ServedBy(service) => {
                let last = self.last()?;
                let got = echo_string(last, "service")?;
                expect_eq("the request to be served by", &service, &got)
            }
            Step::ResponseProto(want) => {
                let got = proto_name(self.last()?.response.version);
                expect_eq("the response protocol to be", &want, got)
            }
            Step::ResponseHeadersTable => {
                let last = self.last()?;
                for (key, value) in header_rows(table.unwrap_or(&[]))? {
                    check_header(
                        "response",
                        &response_headers(&last.response),
                        &key,
                        &value,
                        if value == "*" {
                            HeaderCheck::Present
                        } else {
                            HeaderCheck::Equals
                        },
                    )?;
                }
                Ok(())
            }
            Step::ResponseHeader { name, value, check } => {
                let last = self.last()?;
                check_header(
                    "response",
                    &response_headers(&last.response),
                    &name,
                    &value,
                    check,
                )
            }
            Step::RequestMethod(want) => {
                let got = echo_string(self.last()?, "method")?;
                expect_eq("the request method to be", &want, &got)
            }
            Step::RequestPath(want) => {
                let got = echo_string(self.last()?, "path")?;
                check_request_path(&want, &got)
            }
            Step::RequestProto(want) => {
                let got = echo_string(self.last()?, "proto")?;
                expect_eq("the request protocol to be", &want, &got)
            }
            Step::RequestHost(want) => {
                let got = echo_string(self.last()?, "host")?;
                expect_eq("the request host to be", &want, &got)
            }
            Step::RequestHeadersTable => {
                let headers = echo_headers(self.last()?)?;
                for (key, value) in header_rows(table.unwrap_or(&[]))? {
                    let check = if value == "*" {
                        HeaderCheck::Present
                    } else {
                        HeaderCheck::Equals
                    };
                    check_header("request", &headers, &key, &value, check)?;
                }
                Ok(())
            }
            Step::RequestHeader { name, value, check } => {
                let headers = echo_headers(self.last()?)?;
                check_header("request", &headers, &name, &value, check)
            }
            Step::ScaleBackend { service, replicas } => self.scale(&service, replicas).await,
        }
    }

    fn last(&self) -> Result<&Exchange, String> {
        self.last
            .as_ref()
            .ok_or_else(|| "no request has been sent in this scenario yet".to_string())
    }

    // ----- manifests -------------------------------------------------------

    /// A docstring with `${HTTPBUN}` replaced by the authentication
    /// service's address (ingress-nginx's e2e cases name its pod IP).
    fn with_auth_address(&self, doc: &str) -> String {
        match self.auth.as_ref().map(|a| a.addr).or(self.stopped_auth) {
            Some(addr) => doc.replace("${HTTPBUN}", &addr.to_string()),
            None => doc.to_string(),
        }
    }

    /// Writes `NN-kind-name.yaml` atomically (dot-prefixed temp file, then
    /// rename: the proxy ignores dot-files). Returns the final path.
    fn write_file(&mut self, kind: &str, name: &str, contents: &str) -> Result<PathBuf, String> {
        self.file_counter += 1;
        let file = format!("{:03}-{kind}-{}.yaml", self.file_counter, sanitize(name));
        let path = self.dir_path.join(&file);
        write_atomically(&path, contents)?;
        Ok(path)
    }

    async fn install_ingress(
        &mut self,
        ingress: serde_yaml::Value,
        name: String,
    ) -> Result<(), String> {
        let before = self.generation().await;
        // Backends first, as upstream: Services and ready endpoints exist
        // before the Ingress does.
        for spec in manifests::backend_services(&ingress) {
            if let Some(written) = self.httpbun_services.get(&spec.name) {
                if !written {
                    let port = self
                        .auth
                        .as_ref()
                        .map(|a| a.addr.port())
                        .ok_or("the httpbun service is not running")?;
                    let service = manifests::service_yaml(&self.namespace, &spec);
                    self.write_file("service", &spec.name, &service)?;
                    let yaml = manifests::endpoint_slice_yaml(
                        &self.namespace,
                        &spec.name,
                        &spec,
                        Some(port),
                    );
                    self.write_file("endpointslice", &spec.name, &yaml)?;
                    self.httpbun_services.insert(spec.name.clone(), true);
                }
                continue;
            }
            if self.backends.iter().any(|b| b.spec.name == spec.name) {
                continue;
            }
            let service = manifests::service_yaml(&self.namespace, &spec);
            self.write_file("service", &spec.name, &service)?;
            self.backends.push(Backend {
                spec,
                ingress: name.clone(),
                next_index: 0,
                instances: Vec::new(),
            });
            let index = self.backends.len() - 1;
            self.add_instance(index).await?;
        }
        let contents = manifests::to_string(&ingress);
        match self.ingress_files.get(&name) {
            Some(path) => write_atomically(path, &contents)?,
            None => {
                let path = self.write_file("ingress", &name, &contents)?;
                self.ingress_files.insert(name.clone(), path);
            }
        }
        self.ingress = Some(name);
        self.wait_reload(before).await;
        Ok(())
    }

    /// Starts one more echo instance for a backend and writes its EndpointSlice.
    async fn add_instance(&mut self, backend: usize) -> Result<(), String> {
        let namespace = self.namespace.clone();
        let b = &mut self.backends[backend];
        let index = b.next_index;
        b.next_index += 1;
        let pod = format!("{}-{index}-{}", b.spec.name, random_suffix(5));
        let identity = EchoIdentity {
            namespace: namespace.clone(),
            ingress: b.ingress.clone(),
            service: b.spec.name.clone(),
            pod: pod.clone(),
        };
        let echo = EchoServer::start(identity)
            .await
            .map_err(|e| format!("starting an echo backend for {}: {e}", b.spec.name))?;
        let slice_name = format!("{}-{index}", b.spec.name);
        let yaml = manifests::endpoint_slice_yaml(
            &namespace,
            &slice_name,
            &b.spec,
            Some(echo.addr().port()),
        );
        let slice_file = self.write_file("endpointslice", &slice_name, &yaml)?;
        self.backends[backend]
            .instances
            .push(Instance { echo, slice_file });
        Ok(())
    }

    async fn tls_secret(&mut self, name: &str, host: &str) -> Result<(), String> {
        let host_owned = host.to_string();
        let pem = std::panic::catch_unwind(move || {
            teapot_testkit::certs::self_signed(&[host_owned.as_str()])
        })
        .map_err(|_| format!("cannot make a certificate for {host:?}"))?;
        let yaml = teapot_testkit::certs::tls_secret_yaml(&self.namespace, name, &pem);
        let before = self.generation().await;
        self.write_file("secret", name, &yaml)?;
        self.wait_reload(before).await;
        Ok(())
    }

    /// ingress-nginx's `CreateIngressMASecret`: a CA, a server certificate
    /// for `host` it signs (the Secret's `tls.crt`/`tls.key`, with the CA
    /// as `ca.crt`), and a client certificate named `HOST-client` that the
    /// scenario presents when asked.
    async fn mutual_tls_secret(&mut self, name: &str, host: &str) -> Result<(), String> {
        let host_owned = host.to_string();
        let (yaml, client) = std::panic::catch_unwind(move || {
            let ca = teapot_testkit::certs::TestCa::new(&format!("{host_owned}-ca"));
            let server = ca.issue(&[host_owned.as_str()]);
            let client = ca.issue_client(&format!("{host_owned}-client"));
            (server, client, ca.cert_pem().to_string())
        })
        .map(|(server, client, ca)| {
            let yaml =
                teapot_testkit::certs::tls_secret_with_ca_yaml(&self.namespace, name, &server, &ca);
            (yaml, (client.cert_pem, client.key_pem))
        })
        .map_err(|_| format!("cannot make certificates for {host:?}"))?;
        self.client_certificate = Some(client);
        let before = self.generation().await;
        self.write_file("secret", name, &yaml)?;
        self.wait_reload(before).await;
        Ok(())
    }

    // ----- proxy and admin API ---------------------------------------------

    /// Starts the proxy on first use (the manifests written so far are its
    /// initial state) and returns its (http, https) addresses.
    async fn ensure_proxy(&mut self) -> Result<(SocketAddr, SocketAddr), String> {
        if self.proxy.is_none() {
            let proxy = ProxyProcess::start(&self.teapot, &self.dir_path, &[])
                .await
                .map_err(|e| format!("starting {} proxy: {e}", self.teapot.display()))?;
            self.proxy = Some(proxy);
            self.wait_settled().await;
        }
        let proxy = self
            .proxy
            .as_ref()
            .ok_or_else(|| "the proxy is not running".to_string())?;
        Ok((proxy.http, proxy.https))
    }

    /// `GET /status` (the proxy must be running).
    async fn status(&self) -> Result<Status, String> {
        let proxy = self
            .proxy
            .as_ref()
            .ok_or_else(|| "the proxy is not running".to_string())?;
        let (code, body) = tokio::time::timeout(REQUEST_TIMEOUT, proxy.admin_get("/status"))
            .await
            .map_err(|_| "GET /status on the admin listener timed out".to_string())?
            .map_err(|e| format!("GET /status on the admin listener: {e}"))?;
        if code != 200 {
            return Err(format!("GET /status answered {code}: {body}"));
        }
        Status::parse(&body)
    }

    /// The current generation, or `None` when the proxy is not running yet
    /// (nothing to wait for then) or does not report one.
    async fn generation(&self) -> Option<i64> {
        self.proxy.as_ref()?;
        self.status().await.ok().and_then(|s| s.generation)
    }

    /// After a manifest change with the proxy running: waits until the
    /// generation moves past `before` (≤ 5 s); without a reported generation,
    /// gives the watcher a second.
    async fn wait_reload(&self, before: Option<i64>) {
        if self.proxy.is_none() {
            return;
        }
        let Some(before) = before else {
            sleep(Duration::from_secs(1)).await;
            return;
        };
        let deadline = Instant::now() + RELOAD_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(generation)) = self.status().await.map(|s| s.generation)
                && generation > before
            {
                return;
            }
            sleep(POLL).await;
        }
    }

    /// Right after start: waits (≤ 5 s) until every backend that the proxy
    /// lists shows as many endpoints as instances run. Best effort: the steps
    /// report what they observe.
    async fn wait_settled(&self) {
        let deadline = Instant::now() + RELOAD_TIMEOUT;
        while Instant::now() < deadline {
            let Ok(status) = self.status().await else {
                sleep(POLL).await;
                continue;
            };
            let settled = self.backends.iter().all(|b| {
                let listed = status
                    .backends
                    .iter()
                    .any(|s| s.namespace == self.namespace && s.service == b.spec.name);
                !listed
                    || status.endpoints(&self.namespace, &b.spec.name).len() == b.instances.len()
            });
            if settled {
                return;
            }
            sleep(POLL).await;
        }
    }

    fn current_ingress(&self) -> Result<String, String> {
        self.ingress
            .clone()
            .ok_or_else(|| "no Ingress has been created in this scenario".to_string())
    }

    async fn status_shows_address(&mut self) -> Result<(), String> {
        let name = self.current_ingress()?;
        self.ensure_proxy().await?;
        let deadline = Instant::now() + STATUS_TIMEOUT;
        loop {
            let status = self.status().await?;
            let entry = status.ingress(&self.namespace, &name);
            if let Some(entry) = entry
                && !entry.addresses.is_empty()
                && entry.served != Some(false)
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let seen = entry.map_or_else(
                    || format!("Ingress {}/{name} is not listed by /status", self.namespace),
                    |e| e.describe(),
                );
                return Err(format!(
                    "no address in the Ingress status after {STATUS_TIMEOUT:?}: {seen}{}",
                    problems_suffix(&status, &self.namespace)
                ));
            }
            sleep(POLL).await;
        }
    }

    async fn status_has_no_address(&mut self) -> Result<(), String> {
        let name = self.current_ingress()?;
        self.ensure_proxy().await?;
        for round in 0..5 {
            if round > 0 {
                sleep(Duration::from_millis(250)).await;
            }
            let status = self.status().await?;
            if let Some(entry) = status.ingress(&self.namespace, &name)
                && !entry.addresses.is_empty()
            {
                return Err(format!(
                    "the Ingress status shows an address: {}",
                    entry.describe()
                ));
            }
        }
        Ok(())
    }

    async fn scale(&mut self, service: &str, replicas: usize) -> Result<(), String> {
        let index = self
            .backends
            .iter()
            .position(|b| b.spec.name == service)
            .ok_or_else(|| {
                let known: Vec<&str> = self.backends.iter().map(|b| b.spec.name.as_str()).collect();
                format!(
                    "there is no backend deployment {service:?} (backends of this scenario: {})",
                    known.join(", ")
                )
            })?;
        self.ensure_proxy().await?;
        let before = self.generation().await;
        let changed = self.backends[index].instances.len() != replicas;
        while self.backends[index].instances.len() < replicas {
            self.add_instance(index).await?;
        }
        let mut removed = Vec::new();
        while self.backends[index].instances.len() > replicas {
            if let Some(instance) = self.backends[index].instances.pop() {
                std::fs::remove_file(&instance.slice_file)
                    .map_err(|e| format!("removing {}: {e}", instance.slice_file.display()))?;
                removed.push(instance);
            }
        }
        let want: BTreeSet<String> = self.backends[index]
            .instances
            .iter()
            .map(|i| i.echo.addr().to_string())
            .collect();
        let deadline = Instant::now() + STATUS_TIMEOUT;
        let result = loop {
            let status = self.status().await?;
            let got = status.endpoints(&self.namespace, service);
            let generation_moved = match (before, status.generation) {
                (Some(b), Some(g)) if changed => g > b,
                _ => true,
            };
            // Endpoints are compared as `ip:port`, which says the change is
            // served whether or not a new generation carried it (teapot
            // stores an endpoint change in place); a proxy that reports them
            // some other way is held to the count and a new generation.
            let matches = if got.iter().all(|e| e.parse::<SocketAddr>().is_ok()) {
                got == want
            } else {
                got.len() == replicas && generation_moved
            };
            if matches {
                break Ok(());
            }
            if Instant::now() >= deadline {
                break Err(format!(
                    "the proxy reports {} endpoint(s) for {}/{service} after {STATUS_TIMEOUT:?}, want {replicas}: [{}]{}",
                    got.len(),
                    self.namespace,
                    got.into_iter().collect::<Vec<_>>().join(", "),
                    problems_suffix(&status, &self.namespace)
                ));
            }
            sleep(POLL).await;
        };
        // Scaled-down pods stop only once the proxy no longer routes to them.
        for instance in removed {
            instance.echo.stop().await;
        }
        result
    }

    // ----- requests ---------------------------------------------------------

    /// Sends one request as the upstream Go client does, following redirects.
    async fn exchange(&mut self, method: &str, target: Target) -> Result<Exchange, String> {
        self.exchange_with(method, target, &[], true).await
    }

    /// [`Self::exchange`] with more request headers, and redirects
    /// followed or not.
    async fn exchange_with(
        &mut self,
        method: &str,
        target: Target,
        headers: &[(String, String)],
        follow: bool,
    ) -> Result<Exchange, String> {
        let send = Send {
            headers,
            follow,
            body: &[],
            client_certificate: false,
        };
        self.exchange_full(method, target, send).await
    }

    /// [`Self::exchange_with`] with a body and the scenario's client
    /// certificate when asked.
    async fn exchange_full(
        &mut self,
        method: &str,
        mut target: Target,
        send: Send<'_>,
    ) -> Result<Exchange, String> {
        let Send {
            headers,
            follow,
            body,
            client_certificate,
        } = send;
        let client = if client_certificate {
            let (cert, key) = self.client_certificate.as_ref().ok_or(
                "no mutual TLS secret (\"a mutual TLS secret named ...\") was made before this step",
            )?;
            Some(crate::gateway::tls_client::client_config(
                None,
                Some((cert, key)),
            )?)
        } else {
            None
        };
        let (http, https) = self.ensure_proxy().await?;
        let started = Instant::now();
        let mut visited = Vec::new();
        for _ in 0..=MAX_REDIRECTS {
            let addr = match target.scheme {
                Scheme::Http => http,
                Scheme::Https => https,
            };
            visited.push(target.display());
            let response = send_once(
                addr,
                method,
                &target,
                headers,
                body,
                client.as_ref(),
                Proto::Http1,
            )
            .await?;
            if follow && target::is_redirect(response.status) {
                let location = response
                    .headers
                    .get(http::header::LOCATION)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                    .unwrap_or_default();
                target = target.redirect(&location).map_err(|e| {
                    format!("{} answered {}: {e}", target.display(), response.status)
                })?;
                continue;
            }
            let echo = serde_json::from_slice::<Json>(&response.body)
                .ok()
                .filter(Json::is_object);
            return Ok(Exchange {
                response,
                echo,
                visited,
                elapsed: started.elapsed(),
            });
        }
        Err(format!(
            "more than {MAX_REDIRECTS} redirects: {}",
            visited.join(" -> ")
        ))
    }

    /// One unary gRPC call: HTTP/2 to the listener of the URL's scheme.
    async fn grpc_call(
        &mut self,
        target: Target,
        metadata: &[(String, String)],
    ) -> Result<Exchange, String> {
        let (http, https) = self.ensure_proxy().await?;
        let addr = match target.scheme {
            Scheme::Http => http,
            Scheme::Https => https,
        };
        let mut headers = vec![
            ("content-type".to_string(), "application/grpc".to_string()),
            ("te".to_string(), "trailers".to_string()),
        ];
        headers.extend(metadata.iter().cloned());
        let started = Instant::now();
        // An empty message: no compression flag, length 0.
        let frame = [0u8; 5];
        let response =
            send_once(addr, "POST", &target, &headers, &frame, None, Proto::Http2).await?;
        let echo = serde_json::from_slice::<Json>(&response.body)
            .ok()
            .filter(Json::is_object);
        Ok(Exchange {
            response,
            echo,
            visited: vec![target.display()],
            elapsed: started.elapsed(),
        })
    }

    fn all_responses(&self, status: u16, pods: usize) -> Result<(), String> {
        let batch = self.batch.as_ref().ok_or(
            "no batch of requests (\"I send N requests to ...\") was sent before this step",
        )?;
        let mut by_status: BTreeMap<u16, usize> = BTreeMap::new();
        for (code, _) in batch {
            *by_status.entry(*code).or_default() += 1;
        }
        let histogram = by_status
            .iter()
            .map(|(code, n)| format!("{n}x {code}"))
            .collect::<Vec<_>>()
            .join(", ");
        if batch.is_empty() || by_status.keys().any(|code| *code != status) {
            return Err(format!(
                "expected all {} responses to have status {status}, got {histogram}",
                batch.len()
            ));
        }
        let distinct: BTreeSet<&str> = batch
            .iter()
            .filter(|(code, _)| *code == status)
            .filter_map(|(_, pod)| pod.as_deref())
            .collect();
        if distinct.len() != pods {
            return Err(format!(
                "expected {pods} different pods for status code {status} but {} answered: [{}]",
                distinct.len(),
                distinct.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        Ok(())
    }
}

/// What a request carries besides its method and target.
struct Send<'a> {
    headers: &'a [(String, String)],
    follow: bool,
    body: &'a [u8],
    client_certificate: bool,
}

async fn send_once(
    addr: SocketAddr,
    method: &str,
    target: &Target,
    extra: &[(String, String)],
    body: &[u8],
    client: Option<&rustls::ClientConfig>,
    proto: Proto,
) -> Result<Response, String> {
    let fallback = addr.to_string();
    let user_agent = match proto {
        Proto::Http1 => USER_AGENT,
        Proto::Http2 => GRPC_USER_AGENT,
    };
    let mut headers = vec![("User-Agent".to_string(), user_agent.to_string())];
    headers.extend(extra.iter().cloned());
    let request = Request {
        method: method.to_string(),
        target: target.path.clone(),
        host: target.host_header(&fallback).to_string(),
        headers,
        body: body.to_vec(),
        proto,
    };
    let transport = match target.scheme {
        Scheme::Http => Transport::Plain,
        Scheme::Https => Transport::Tls {
            sni: target
                .sni()
                .map_or_else(|| addr.ip().to_string(), str::to_string),
            roots: None,
        },
    };
    let exchange = async {
        match (client, &transport) {
            (Some(config), Transport::Tls { sni, .. }) => {
                let mut connection =
                    client::Connection::open_with_tls_config(addr, sni, config, proto).await?;
                connection.send(&request).await
            }
            _ => client::send(addr, &transport, &request).await,
        }
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => Err(format!(
            "{method} {} (via {addr}) failed: {e}",
            target.display()
        )),
        Err(_) => Err(format!(
            "{method} {} (via {addr}) got no response within {REQUEST_TIMEOUT:?}",
            target.display()
        )),
    }
}

// ----- assertions ------------------------------------------------------------

fn expect_eq(what: &str, want: &str, got: &str) -> Result<(), String> {
    if want == got {
        Ok(())
    } else {
        Err(format!("expected {what} {want:?} but it was {got:?}"))
    }
}

/// As upstream: a missing leading slash is added to the expectation. The
/// query string (which this runner forwards) is ignored when the expectation
/// has none.
fn check_request_path(want: &str, got: &str) -> Result<(), String> {
    let want = if want.starts_with('/') {
        want.to_string()
    } else {
        format!("/{want}")
    };
    let got_without_query = got.split('?').next().unwrap_or(got);
    if got == want || (!want.contains('?') && got_without_query == want) {
        Ok(())
    } else {
        Err(format!(
            "expected the request path to be {want:?} but it was {got:?}"
        ))
    }
}

fn echo_field(exchange: &Exchange, key: &str) -> Option<String> {
    exchange
        .echo
        .as_ref()
        .and_then(|e| e.get(key))
        .and_then(Json::as_str)
        .map(str::to_string)
}

fn echo_string(exchange: &Exchange, key: &str) -> Result<String, String> {
    if exchange.echo.is_none() {
        return Err(format!(
            "the response did not come from an echo backend ({})",
            describe(exchange)
        ));
    }
    Ok(echo_field(exchange, key).unwrap_or_default())
}

fn echo_headers(exchange: &Exchange) -> Result<Vec<(String, String)>, String> {
    let echo = exchange.echo.as_ref().ok_or_else(|| {
        format!(
            "the response did not come from an echo backend ({})",
            describe(exchange)
        )
    })?;
    let mut out = Vec::new();
    if let Some(map) = echo.get("headers").and_then(Json::as_object) {
        for (name, values) in map {
            match values {
                Json::Array(values) => {
                    for v in values {
                        out.push((name.clone(), v.as_str().unwrap_or_default().to_string()));
                    }
                }
                Json::String(v) => out.push((name.clone(), v.clone())),
                _ => {}
            }
        }
    }
    Ok(out)
}

fn response_headers(response: &Response) -> Vec<(String, String)> {
    response
        .headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The rows of a `| key | value |` table; the first row is the header row
/// (upstream skips it, complaining only when neither cell is `key`/`value`).
fn header_rows(table: &[Vec<String>]) -> Result<Vec<(String, String)>, String> {
    let Some((head, rows)) = table.split_first() else {
        return Err("expected a table with at least one row".into());
    };
    if head.len() != 2 || (head[0] != "key" && head[1] != "value") {
        return Err(format!(
            "expected a table with a header row of 'key' and 'value' but got {head:?}"
        ));
    }
    rows.iter()
        .map(|row| match row.as_slice() {
            [key, value] => Ok((key.clone(), value.clone())),
            _ => Err(format!(
                "expected a table with 2 cells, it contained {}",
                row.len()
            )),
        })
        .collect()
}

/// Case-insensitive header check over `(name, value)` pairs.
pub fn check_header(
    side: &str,
    headers: &[(String, String)],
    name: &str,
    value: &str,
    check: HeaderCheck,
) -> Result<(), String> {
    let values: Vec<&str> = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect();
    let all = || {
        headers
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(", ")
    };
    match check {
        HeaderCheck::Absent => {
            if values.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "expected no {name} {side} header but it contained {values:?}"
                ))
            }
        }
        _ if values.is_empty() => Err(format!(
            "expected {side} headers to contain {name} but it only contained [{}]",
            all()
        )),
        HeaderCheck::Present => Ok(()),
        HeaderCheck::Equals if value == "*" || values.contains(&value) => Ok(()),
        HeaderCheck::Contains if values.iter().any(|v| v.contains(value)) => Ok(()),
        HeaderCheck::NotContains if !values.iter().any(|v| v.contains(value)) => Ok(()),
        HeaderCheck::NotContains => Err(format!(
            "expected {side} header {name} not to contain {value:?} but it had {values:?}"
        )),
        HeaderCheck::Equals => Err(format!(
            "expected {side} header {name} to have the value {value:?} but it had {values:?}"
        )),
        HeaderCheck::Contains => Err(format!(
            "expected {side} header {name} to contain {value:?} but it had {values:?}"
        )),
    }
}

fn verify_tls(exchange: &Exchange, host: &str) -> Result<(), String> {
    let Some(leaf) = exchange.response.peer_certificates.first() else {
        return Err(format!(
            "no server certificate: the request did not use TLS ({})",
            exchange.visited.join(" -> ")
        ));
    };
    if teapot_testkit::certs::cert_matches_hostname(leaf, host) {
        Ok(())
    } else {
        Err(format!(
            "the server certificate is not valid for {host:?} (its names: {})",
            certificate_names(leaf)
        ))
    }
}

/// Subject alternative names (or the subject) of a DER certificate, for messages.
fn certificate_names(der: &[u8]) -> String {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return "unparsable certificate".into();
    };
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(n) => names.push((*n).to_string()),
                GeneralName::IPAddress(ip) => names.push(format!("IP {ip:?}")),
                _ => {}
            }
        }
    }
    if names.is_empty() {
        format!("no SANs, subject {}", cert.subject())
    } else {
        names.join(", ")
    }
}

fn proto_name(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "unknown",
    }
}

/// `status, route, first bytes of the body` for failure messages.
fn describe(exchange: &Exchange) -> String {
    let body = exchange.response.text();
    let mut body: String = body.chars().take(160).collect();
    if body.len() < exchange.response.body.len() {
        body.push('…');
    }
    format!(
        "{} {} -> {} {:?}",
        exchange.visited.join(" -> "),
        proto_name(exchange.response.version),
        exchange.response.status,
        body.trim()
    )
}

fn problems_suffix(status: &Status, namespace: &str) -> String {
    let problems = status.problems_in(namespace);
    if problems.is_empty() {
        String::new()
    } else {
        format!("; problems: {}", problems.join("; "))
    }
}

fn write_atomically(path: &Path, contents: &str) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, contents).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("renaming to {}: {e}", path.display()))
}

/// File-name-safe version of an object name.
fn sanitize(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned.is_empty() {
        "unnamed".into()
    } else {
        cleaned
    }
}

/// `n` random lowercase letters and digits.
pub fn random_suffix(n: usize) -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..n)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn header_checks() {
        let headers = pairs(&[
            ("content-type", "application/json"),
            ("x-multi", "a"),
            ("x-multi", "b, c"),
        ]);
        use HeaderCheck::*;
        assert!(check_header("response", &headers, "Content-Type", "*", Equals).is_ok());
        assert!(
            check_header(
                "response",
                &headers,
                "Content-Type",
                "application/json",
                Equals
            )
            .is_ok()
        );
        assert!(check_header("response", &headers, "Content-Type", "json", Contains).is_ok());
        assert!(check_header("response", &headers, "X-Multi", "b, c", Equals).is_ok());
        assert!(check_header("response", &headers, "X-Multi", "c", Contains).is_ok());
        assert!(check_header("response", &headers, "X-Multi", "c", Equals).is_err());
        assert!(check_header("response", &headers, "Server", "", Present).is_err());
        assert!(check_header("response", &headers, "Server", "", Absent).is_ok());
        assert!(check_header("response", &headers, "x-multi", "", Absent).is_err());
        let err = check_header("request", &headers, "Date", "*", Equals).unwrap_err();
        assert!(err.contains("request headers to contain Date"), "{err}");
        assert!(err.contains("content-type, x-multi"), "{err}");
    }

    #[test]
    fn header_tables() {
        let table = vec![
            vec!["key".to_string(), "value".to_string()],
            vec!["X-A".to_string(), "1".to_string()],
        ];
        assert_eq!(header_rows(&table).unwrap(), pairs(&[("X-A", "1")]));
        assert!(header_rows(&[]).is_err());
        assert!(header_rows(&[vec!["name".into(), "val".into()]]).is_err());
        assert!(header_rows(&[vec!["key".into(), "value".into()], vec!["only".into()]]).is_err());
    }

    #[test]
    fn request_paths() {
        assert!(check_request_path("", "/").is_ok());
        assert!(check_request_path("v1/items", "/v1/items").is_ok());
        assert!(check_request_path("/v1/items", "/v1/items?x=1").is_ok());
        assert!(check_request_path("/v1/items?x=1", "/v1/items?x=1").is_ok());
        assert!(check_request_path("/v1/items?x=2", "/v1/items?x=1").is_err());
        assert!(check_request_path("/v1", "/v1/items").is_err());
    }

    #[test]
    fn names() {
        assert_eq!(sanitize("a.b-c_d"), "a.b-c_d");
        assert_eq!(sanitize("../x y"), ".._x_y");
        assert_eq!(sanitize(""), "unnamed");
        let s = random_suffix(8);
        assert_eq!(s.len(), 8);
        assert!(
            s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_eq!(proto_name(http::Version::HTTP_11), "HTTP/1.1");
        assert_eq!(proto_name(http::Version::HTTP_2), "HTTP/2.0");
    }

    /// The namespace directory after the setup steps, read back as YAML.
    #[tokio::test]
    async fn namespace_directory_contents() {
        let mut run = ScenarioRun::new(Path::new("/nonexistent/teapot")).unwrap();
        let ns = run.namespace().to_string();
        assert!(ns.starts_with("conf-") && ns.len() == 13, "{ns}");
        let manifest = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: shop\nspec:\n  defaultBackend:\n    service:\n      name: fallback\n      port:\n        number: 9000\n  rules:\n  - host: cart.example\n    http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend:\n          service:\n            name: cart\n            port:\n              name: web\n      - path: /x\n        pathType: Exact\n        backend:\n          service:\n            name: cart\n            port:\n              name: web\n";
        let steps = vec![
            PickleStep {
                keyword: "Given".into(),
                text: "a new random namespace".into(),
                docstring: None,
                table: None,
            },
            PickleStep {
                keyword: "Given".into(),
                text:
                    r#"a self-signed TLS secret named "cart-tls" for the "cart.example" hostname"#
                        .into(),
                docstring: None,
                table: None,
            },
            PickleStep {
                keyword: "Given".into(),
                text: "an Ingress resource".into(),
                docstring: Some(manifest.into()),
                table: None,
            },
        ];
        run.run_steps(&steps).await.unwrap();

        let mut docs: Vec<serde_yaml::Value> = Vec::new();
        let mut names: Vec<String> = std::fs::read_dir(run.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in &names {
            assert!(!name.starts_with('.'), "temp file left behind: {name}");
            let text = std::fs::read_to_string(run.dir().join(name)).unwrap();
            docs.push(serde_yaml::from_str(&text).unwrap());
        }
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            vec![
                "IngressClass",
                "Secret",
                "Service",
                "EndpointSlice",
                "Service",
                "EndpointSlice",
                "Ingress"
            ]
        );
        for doc in &docs[1..] {
            assert_eq!(doc["metadata"]["namespace"].as_str(), Some(ns.as_str()));
        }
        assert_eq!(docs[1]["type"].as_str(), Some("kubernetes.io/tls"));
        // fallback: numbered port, unnamed.
        assert_eq!(docs[2]["metadata"]["name"].as_str(), Some("fallback"));
        assert_eq!(docs[2]["spec"]["ports"][0]["port"].as_i64(), Some(9000));
        assert_eq!(docs[3]["ports"][0]["name"].as_str(), Some(""));
        // cart: named port "web" on 8080; the slice's port is the echo's.
        assert_eq!(docs[4]["metadata"]["name"].as_str(), Some("cart"));
        assert_eq!(docs[4]["spec"]["ports"][0]["port"].as_i64(), Some(8080));
        assert_eq!(docs[4]["spec"]["ports"][0]["name"].as_str(), Some("web"));
        let slice = &docs[5];
        assert_eq!(
            slice["metadata"]["labels"]["kubernetes.io/service-name"].as_str(),
            Some("cart")
        );
        assert_eq!(slice["ports"][0]["name"].as_str(), Some("web"));
        let echo_port = slice["ports"][0]["port"].as_u64().unwrap();
        let cart = &run.backends[1];
        assert_eq!(cart.instances.len(), 1);
        assert_eq!(u64::from(cart.instances[0].echo.addr().port()), echo_port);
        assert_eq!(cart.instances[0].echo.identity().service, "cart");
        assert_eq!(cart.instances[0].echo.identity().ingress, "shop");
        assert_eq!(cart.instances[0].echo.identity().namespace, ns);
        assert!(cart.instances[0].echo.identity().pod.starts_with("cart-0-"));
        // The echo instance answers directly.
        let response = client::send(
            cart.instances[0].echo.addr(),
            &Transport::Plain,
            &Request::get("cart.example", "/hello"),
        )
        .await
        .unwrap();
        assert_eq!(response.json().unwrap()["service"], "cart");
        assert_eq!(docs[6]["metadata"]["name"].as_str(), Some("shop"));
        assert!(run.finish(false).await.is_none());
    }

    #[test]
    fn atomic_write_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("001-x.yaml");
        write_atomically(&path, "a: 1\n").unwrap();
        write_atomically(&path, "a: 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a: 2\n");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("001-x.yaml")]);
    }
}
