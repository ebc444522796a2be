//! An in-process Kubernetes API double, reachable as a real [`kube::Client`]
//! (and, through the kubeconfig file it writes, by a spawned `teapot`).
//!
//! It is an HTTP/1.1 server on `127.0.0.1:0` that keeps JSON objects in
//! memory, generic over resources: any `/api/v1/...` or
//! `/apis/GROUP/VERSION/...` path works, namespaced or cluster-scoped, by
//! plural name, without registration. What it implements:
//!
//! - list (`labelSelector` with `=`, `==`, `!=`, `in`, `notin`, exists and
//!   `!key`; `fieldSelector` with `=`, `==`, `!=` on any dotted path such as
//!   `metadata.name`, `metadata.namespace` or `type`), one page, the
//!   current `resourceVersion` in the list metadata;
//! - watch (`?watch=true`) from a `resourceVersion` (or, without one, from
//!   the current state as synthetic `ADDED` events), `ADDED` / `MODIFIED` /
//!   `DELETED`, `BOOKMARK` when `allowWatchBookmarks=true` (after the
//!   backlog and then every [`BOOKMARK_INTERVAL`]), `sendInitialEvents`
//!   with the `k8s.io/initial-events-end` bookmark, `timeoutSeconds`, and a
//!   410 `Expired` ERROR event for versions older than the last
//!   [`ApiServer::compact`]; an object leaving or entering a selector is a
//!   `DELETED` / `ADDED` for that watch, as with the real server;
//! - get, create (409 when it exists; `generateName`), replace (409 on a
//!   stale `metadata.resourceVersion`), patch (`merge-patch+json`,
//!   `json-patch+json`, `strategic-merge-patch+json` handled as a merge
//!   patch, and server-side apply `apply-patch+yaml`), delete;
//! - `metadata`: monotonically increasing `resourceVersion` (one counter
//!   for everything, as etcd's), `uid`, `creationTimestamp`, `generation`
//!   (bumped when anything outside `metadata` and `status` changes);
//! - the `/status` subresource: writes to the main resource keep the stored
//!   `status`, writes to `/status` change nothing else (what the real
//!   server does for every kind with a status subresource);
//! - finalizers: a delete with finalizers left only sets
//!   `deletionTimestamp`; the write that removes the last finalizer deletes;
//! - an admission hook ([`ApiServer::set_admission`]) that sees every write
//!   through HTTP and may refuse it with a 4xx `Status`;
//! - a log of every request ([`ApiServer::requests`]);
//! - fault injection: [`ApiServer::drop_watches`] ends open watches,
//!   [`ApiServer::delete_unannounced`] makes a change no watch sees,
//!   [`ApiServer::hold_lists`] keeps the lists of one resource unanswered
//!   (a slow listing) until its guard is dropped.
//!
//! Simplifications (documented in docs/kube.md too): server-side apply is
//! a JSON merge of the applied object into the stored one (lists are
//! replaced whole, no field-ownership conflicts, `force` is accepted and
//! ignored, `managedFields` gets one entry per manager); strategic merge is
//! a plain merge; no authentication, discovery, pagination, defaulting or
//! schema validation; `resourceVersion` on list and get is ignored (always
//! the current state). Helper writes ([`ApiServer::apply`],
//! [`ApiServer::delete`]) stand for the operator's setup: they skip the
//! admission hook and may set `status` directly.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

/// How often an open watch that asked for bookmarks gets one.
pub const BOOKMARK_INTERVAL: Duration = Duration::from_secs(2);

/// A resource as its URL names it: `v1` or `GROUP/VERSION`, and the plural.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resource {
    pub group_version: String,
    pub plural: String,
}

impl Resource {
    pub fn new(group_version: &str, plural: &str) -> Resource {
        Resource {
            group_version: group_version.to_string(),
            plural: plural.to_string(),
        }
    }

    /// The resource of an object's `apiVersion` and `kind`.
    pub fn of_kind(api_version: &str, kind: &str) -> Resource {
        Resource::new(api_version, &plural_of(kind))
    }
}

/// The plural of a kind, for the kinds teapot meets (and most others).
pub fn plural_of(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    match lower.as_str() {
        "endpoints" => lower,
        l if l.ends_with('s') || l.ends_with('x') => format!("{l}es"),
        // A vowel before the `y` keeps it: Gateway -> gateways (added for
        // the Gateway API kinds).
        l if l.ends_with("ay") || l.ends_with("oy") || l.ends_with("uy") => format!("{l}s"),
        l if l.ends_with('y') && !l.ends_with("ey") => format!("{}ies", &l[..l.len() - 1]),
        l => format!("{l}s"),
    }
}

/// One request as the double received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub content_type: Option<String>,
    /// The body, when it was JSON (or YAML for apply).
    pub body: Option<Value>,
}

impl RecordedRequest {
    /// Value of a query parameter, percent-decoded.
    pub fn param(&self, name: &str) -> Option<String> {
        query_pairs(&self.query).remove(name)
    }
}

/// A write the admission hook judges.
#[derive(Clone, Debug)]
pub struct AdmissionRequest {
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'static str,
    pub resource: Resource,
    /// `Some("status")` for writes to the status subresource.
    pub subresource: Option<String>,
    pub namespace: String,
    pub name: String,
    /// The object as it would be stored (`None` for DELETE).
    pub object: Option<Value>,
    pub old_object: Option<Value>,
}

/// Why the admission hook refused a write: becomes a `Status` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: u16,
    pub message: String,
}

impl Refusal {
    /// 403, as the API server answers for a denying webhook.
    pub fn forbidden(message: impl Into<String>) -> Refusal {
        Refusal {
            code: 403,
            message: message.into(),
        }
    }
}

type AdmissionHook = dyn Fn(&AdmissionRequest) -> Result<(), Refusal> + Send + Sync;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventType {
    Added,
    Modified,
    Deleted,
}

#[derive(Debug)]
struct Change {
    rv: u64,
    resource: Resource,
    event: EventType,
    object: Value,
    /// The version before, for selector transitions.
    old: Option<Value>,
}

type ObjectMap = BTreeMap<(String, String), Value>;

#[derive(Debug, Default)]
struct State {
    rv: u64,
    uids: u64,
    objects: HashMap<Resource, ObjectMap>,
    /// Kinds learned from writes, for list and bookmark type fields.
    kinds: HashMap<Resource, String>,
    log: Vec<Arc<Change>>,
    /// Watches from an older version get 410 Gone.
    compacted: u64,
}

struct Inner {
    state: Mutex<State>,
    changes: broadcast::Sender<Arc<Change>>,
    /// Bumped by [`ApiServer::drop_watches`]: open watches end.
    watch_epoch: watch::Sender<u64>,
    /// Resources whose lists wait ([`ApiServer::hold_lists`]).
    held_lists: watch::Sender<Vec<Resource>>,
    admission: Mutex<Option<Arc<AdmissionHook>>>,
    requests: Mutex<Vec<RecordedRequest>>,
}

/// The running double. Dropping it stops the server and ends open watches.
pub struct ApiServer {
    addr: SocketAddr,
    inner: Arc<Inner>,
    stop: watch::Sender<bool>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// An error answer, shaped as the API server's `Status`.
#[derive(Debug)]
struct Failure {
    code: StatusCode,
    reason: &'static str,
    message: String,
}

impl Failure {
    fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            code,
            reason,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Failure {
        Failure::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    fn not_found(resource: &Resource, name: &str) -> Failure {
        Failure::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("{} \"{name}\" not found", resource.plural),
        )
    }

    fn status(&self) -> Value {
        status_json(self.code.as_u16(), self.reason, &self.message)
    }
}

fn status_json(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

type Body = BoxBody<Bytes, Infallible>;

impl ApiServer {
    /// Binds `127.0.0.1:0`, writes a kubeconfig pointing at it and serves
    /// until dropped.
    pub async fn start() -> ApiServer {
        ApiServer::start_on("127.0.0.1:0".parse().expect("loopback")).await
    }

    /// Like [`ApiServer::start`] on `addr`: an address of a veth or bridge
    /// makes the double reachable from network namespaces, where the
    /// replicas of the announcement tests run.
    pub async fn start_on(addr: SocketAddr) -> ApiServer {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("bind the API double");
        let addr = listener.local_addr().expect("local addr");
        let (changes, _) = broadcast::channel(4096);
        let inner = Arc::new(Inner {
            state: Mutex::new(State::default()),
            changes,
            watch_epoch: watch::channel(0).0,
            held_lists: watch::channel(Vec::new()).0,
            admission: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
        });
        let (stop, stop_rx) = watch::channel(false);
        let dir = tempfile::Builder::new()
            .prefix("teapot-apiserver-")
            .tempdir()
            .expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_text(addr)).expect("write kubeconfig");
        tokio::spawn(serve(listener, inner.clone(), stop_rx));
        ApiServer {
            addr,
            inner,
            stop,
            kubeconfig,
            _dir: dir,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client for the double (default namespace `default`).
    pub fn client(&self) -> kube::Client {
        let uri: http::Uri = self.url().parse().expect("double URL");
        kube::Client::try_from(kube::Config::new(uri)).expect("kube client for the double")
    }

    /// A kubeconfig file whose current context is the double, for child
    /// processes (`KUBECONFIG=...`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Registers the hook every HTTP write goes through (replacing any
    /// previous one).
    pub fn set_admission(
        &self,
        hook: impl Fn(&AdmissionRequest) -> Result<(), Refusal> + Send + Sync + 'static,
    ) {
        *self.inner.admission.lock() = Some(Arc::new(hook));
    }

    pub fn clear_admission(&self) {
        *self.inner.admission.lock() = None;
    }

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.requests.lock().clone()
    }

    /// The current resourceVersion counter.
    pub fn resource_version(&self) -> u64 {
        self.inner.state.lock().rv
    }

    /// Creates or replaces an object (from its `apiVersion`, `kind`,
    /// `metadata.namespace` and `metadata.name`), as the operator's
    /// `kubectl apply` would: no admission, `status` taken when given.
    /// Returns the stored object.
    pub fn apply(&self, object: Value) -> Value {
        let (resource, namespace, name) = identity(&object);
        let mut state = self.inner.state.lock();
        let old = state
            .objects
            .get(&resource)
            .and_then(|m| m.get(&(namespace.clone(), name.clone())))
            .cloned();
        let result = match old {
            None => create_object(&mut state, &resource, &namespace, object),
            Some(old) => {
                let mut new = object;
                if new.get("status").is_none()
                    && let Some(status) = old.get("status")
                {
                    new["status"] = status.clone();
                }
                update_object(&mut state, &resource, &namespace, &name, &old, new)
            }
        };
        let (stored, changes) = result.expect("apply to the double");
        self.publish(changes);
        stored
    }

    /// Deletes an object as the API server would (finalizers respected).
    /// Returns whether it existed.
    pub fn delete(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> bool {
        let resource = Resource::of_kind(api_version, kind);
        let mut state = self.inner.state.lock();
        match delete_object(&mut state, &resource, namespace, name) {
            Ok((_, changes)) => {
                self.publish(changes);
                true
            }
            Err(_) => false,
        }
    }

    /// The stored object, if any.
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let resource = Resource::of_kind(api_version, kind);
        self.inner
            .state
            .lock()
            .objects
            .get(&resource)
            .and_then(|m| m.get(&(namespace.to_string(), name.to_string())))
            .cloned()
    }

    /// Forgets the change history: watches from an older
    /// `resourceVersion` get 410 Gone and must re-list.
    /// Ends every open watch (as an API server restart or a load balancer
    /// timeout would); clients re-watch from their last version.
    pub fn drop_watches(&self) {
        self.inner.watch_epoch.send_modify(|e| *e += 1);
    }

    /// Removes an object without any watch event (a change the clients
    /// miss, as across a compaction while they were away): only a re-list
    /// shows it. Returns whether it existed.
    pub fn delete_unannounced(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> bool {
        let resource = Resource::of_kind(api_version, kind);
        let mut state = self.inner.state.lock();
        let key = (namespace.to_string(), name.to_string());
        let existed = state
            .objects
            .get_mut(&resource)
            .and_then(|m| m.remove(&key))
            .is_some();
        if existed {
            state.rv += 1;
        }
        existed
    }

    /// Lists of `group_version`/`plural` are not answered until the
    /// returned guard is dropped (watches and other requests carry on), as
    /// a large collection on a busy API server lists slowly: clients see
    /// their other resources listed first.
    pub fn hold_lists(&self, group_version: &str, plural: &str) -> ListHold {
        let resource = Resource::new(group_version, plural);
        self.inner
            .held_lists
            .send_modify(|held| held.push(resource.clone()));
        ListHold {
            inner: self.inner.clone(),
            resource,
        }
    }

    pub fn compact(&self) {
        let mut state = self.inner.state.lock();
        state.compacted = state.rv;
        state.log.clear();
    }

    fn publish(&self, changes: Vec<Arc<Change>>) {
        for c in changes {
            let _ = self.inner.changes.send(c);
        }
    }
}

/// Keeps the lists of one resource waiting; see [`ApiServer::hold_lists`].
#[must_use = "the lists are released when the guard is dropped"]
pub struct ListHold {
    inner: Arc<Inner>,
    resource: Resource,
}

impl Drop for ListHold {
    fn drop(&mut self) {
        self.inner.held_lists.send_modify(|held| {
            if let Some(i) = held.iter().position(|r| *r == self.resource) {
                held.remove(i);
            }
        });
    }
}

/// Resolves once the server stops (the guard `wait_for` returns is not
/// `Send`, so it must not live in a `select!` of a spawned task).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn kubeconfig_text(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: http://{addr}\nusers:\n- name: double\n  user: {{}}\ncontexts:\n- name: double\n  context:\n    cluster: double\n    user: double\n    namespace: default\ncurrent-context: double\n"
    )
}

fn identity(object: &Value) -> (Resource, String, String) {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    let resource = Resource::of_kind(&s(object.get("apiVersion")), &s(object.get("kind")));
    let meta = object.get("metadata");
    (
        resource,
        s(meta.and_then(|m| m.get("namespace"))),
        s(meta.and_then(|m| m.get("name"))),
    )
}

async fn serve(listener: tokio::net::TcpListener, inner: Arc<Inner>, stop: watch::Receiver<bool>) {
    let mut stop_accept = stop.clone();
    loop {
        let (tcp, _) = tokio::select! {
            _ = stopped(&mut stop_accept) => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(_) => continue,
            },
        };
        let (inner, stop) = (inner.clone(), stop.clone());
        tokio::spawn(async move {
            let mut stop_conn = stop.clone();
            let service = service_fn(move |req| {
                let (inner, stop) = (inner.clone(), stop.clone());
                async move { Ok::<_, Infallible>(handle(inner, req, stop).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(tcp), service);
            tokio::select! {
                _ = conn => {}
                _ = stopped(&mut stop_conn) => {}
            }
        });
    }
}

/// Parsed request target.
struct Target {
    resource: Resource,
    /// `None` for a cluster-wide collection or a cluster-scoped object.
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse_target(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group_version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => (v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (format!("{g}/{v}"), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let (plural, name, sub) = match rest {
        [plural] => (plural, None, None),
        [plural, name] => (plural, Some(name.to_string()), None),
        [plural, name, sub] => (plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return None,
    };
    Some(Target {
        resource: Resource::new(&group_version, plural),
        namespace,
        name,
        subresource: sub,
    })
}

async fn handle(
    inner: Arc<Inner>,
    req: Request<Incoming>,
    stop: watch::Receiver<bool>,
) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let raw = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => return failure(Failure::bad_request(format!("cannot read body: {e}"))),
    };
    let body = parse_body(&raw, content_type.as_deref());
    inner.requests.lock().push(RecordedRequest {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        content_type: content_type.clone(),
        body: body.as_ref().ok().cloned().flatten(),
    });
    if path == "/version" {
        return json_response(
            StatusCode::OK,
            &json!({"major": "1", "minor": "34", "gitVersion": "v1.34.0-teapot-double", "platform": "linux/amd64"}),
        );
    }
    let Some(target) = parse_target(&path) else {
        return failure(Failure::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("the double serves no {path}"),
        ));
    };
    let params = query_pairs(&query);
    let body = match body {
        Ok(b) => b,
        Err(e) => return failure(Failure::bad_request(e)),
    };
    let result = match (&method, &target.name) {
        (&Method::GET, None)
            if matches!(params.get("watch").map(String::as_str), Some("true" | "1")) =>
        {
            return watch_response(&inner, &target, &params, stop);
        }
        (&Method::GET, None) => {
            let mut held = inner.held_lists.subscribe();
            let _ = held.wait_for(|h| !h.contains(&target.resource)).await;
            list(&inner, &target, &params)
        }
        (&Method::GET, Some(name)) => get(&inner, &target, name),
        (&Method::POST, None) => match body {
            Some(b) => create(&inner, &target, b),
            None => Err(Failure::bad_request("a body is required")),
        },
        (&Method::PUT, Some(name)) => match body {
            Some(b) => replace(&inner, &target, name, b),
            None => Err(Failure::bad_request("a body is required")),
        },
        (&Method::PATCH, Some(name)) => match body {
            Some(b) => patch(&inner, &target, name, content_type.as_deref(), &params, b),
            None => Err(Failure::bad_request("a body is required")),
        },
        (&Method::DELETE, Some(name)) => delete(&inner, &target, name),
        _ => Err(Failure::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("{method} is not supported on {path}"),
        )),
    };
    match result {
        Ok((code, v)) => json_response(code, &v),
        Err(f) => failure(f),
    }
}

fn parse_body(raw: &[u8], content_type: Option<&str>) -> Result<Option<Value>, String> {
    if raw.is_empty() {
        return Ok(None);
    }
    if content_type.is_some_and(|c| c.starts_with("application/apply-patch+yaml")) {
        return serde_yaml::from_slice(raw)
            .map(Some)
            .map_err(|e| format!("invalid YAML: {e}"));
    }
    serde_json::from_slice(raw)
        .map(Some)
        .map_err(|e| format!("invalid JSON: {e}"))
}

fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

fn failure(f: Failure) -> Response<Body> {
    json_response(f.code, &f.status())
}

fn query_pairs(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------------------
// Selectors

#[derive(Debug)]
enum Requirement {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// Splits on commas outside parentheses.
fn split_terms(s: &str) -> Vec<String> {
    let (mut terms, mut cur, mut depth) = (Vec::new(), String::new(), 0usize);
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    terms.push(cur);
    terms
        .into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

fn parse_selector(s: &str) -> Result<Vec<Requirement>, Failure> {
    let set = |v: &str| -> Vec<String> {
        v.trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .split(',')
            .map(|x| x.trim().to_string())
            .collect()
    };
    split_terms(s)
        .into_iter()
        .map(|t| {
            if let Some((k, v)) = t.split_once("!=") {
                Ok(Requirement::Ne(k.trim().into(), v.trim().into()))
            } else if let Some((k, v)) = t.split_once("==") {
                Ok(Requirement::Eq(k.trim().into(), v.trim().into()))
            } else if let Some((k, v)) = t.split_once('=') {
                Ok(Requirement::Eq(k.trim().into(), v.trim().into()))
            } else if let Some((k, v)) = t.split_once(" notin ") {
                Ok(Requirement::NotIn(k.trim().into(), set(v)))
            } else if let Some((k, v)) = t.split_once(" in ") {
                Ok(Requirement::In(k.trim().into(), set(v)))
            } else if let Some(k) = t.strip_prefix('!') {
                Ok(Requirement::NotExists(k.trim().into()))
            } else if t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Ok(Requirement::Exists(t))
            } else {
                Err(Failure::bad_request(format!(
                    "cannot parse selector term {t:?}"
                )))
            }
        })
        .collect()
}

fn matches(reqs: &[Requirement], lookup: impl Fn(&str) -> Option<String>) -> bool {
    reqs.iter().all(|r| match r {
        Requirement::Eq(k, v) => lookup(k).as_deref() == Some(v.as_str()),
        Requirement::Ne(k, v) => lookup(k).as_deref() != Some(v.as_str()),
        Requirement::In(k, vs) => lookup(k).is_some_and(|x| vs.contains(&x)),
        Requirement::NotIn(k, vs) => !lookup(k).is_some_and(|x| vs.contains(&x)),
        Requirement::Exists(k) => lookup(k).is_some(),
        Requirement::NotExists(k) => lookup(k).is_none(),
    })
}

/// What a list or watch keeps: namespace, label and field selectors.
struct Filter {
    namespace: Option<String>,
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
}

impl Filter {
    fn new(target: &Target, params: &HashMap<String, String>) -> Result<Filter, Failure> {
        Ok(Filter {
            namespace: target.namespace.clone(),
            labels: parse_selector(params.get("labelSelector").map_or("", String::as_str))?,
            fields: parse_selector(params.get("fieldSelector").map_or("", String::as_str))?,
        })
    }

    fn keeps(&self, object: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("")
                != ns
        {
            return false;
        }
        let labels = object.pointer("/metadata/labels");
        matches(&self.labels, |k| {
            labels
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        }) && matches(&self.fields, |path| {
            let pointer = format!("/{}", path.replace('.', "/"));
            match object.pointer(&pointer) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Null) | None => Some(String::new()),
                Some(v) => Some(v.to_string()),
            }
        })
    }
}

// ---------------------------------------------------------------------------
// Reads

fn list_kind(state: &State, resource: &Resource) -> String {
    state
        .kinds
        .get(resource)
        .cloned()
        .unwrap_or_else(|| kind_guess(&resource.plural))
}

/// `ingresses` -> `Ingress`, good enough for resources never written.
fn kind_guess(plural: &str) -> String {
    let singular = plural
        .strip_suffix("ies")
        .map(|s| format!("{s}y"))
        .or_else(|| {
            plural
                .strip_suffix("sses")
                .or_else(|| plural.strip_suffix("xes"))
                .map(|s| format!("{s}{}", &plural[s.len()..plural.len() - 2]))
        })
        .or_else(|| plural.strip_suffix('s').map(str::to_string))
        .unwrap_or_else(|| plural.to_string());
    let mut c = singular.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

type Answer = Result<(StatusCode, Value), Failure>;

fn list(inner: &Inner, target: &Target, params: &HashMap<String, String>) -> Answer {
    let filter = Filter::new(target, params)?;
    let state = inner.state.lock();
    let items: Vec<Value> = state
        .objects
        .get(&target.resource)
        .into_iter()
        .flat_map(|m| m.values())
        .filter(|o| filter.keeps(o))
        .cloned()
        .collect();
    Ok((
        StatusCode::OK,
        json!({
            "kind": format!("{}List", list_kind(&state, &target.resource)),
            "apiVersion": target.resource.group_version,
            "metadata": {"resourceVersion": state.rv.to_string()},
            "items": items,
        }),
    ))
}

fn get(inner: &Inner, target: &Target, name: &str) -> Answer {
    let state = inner.state.lock();
    let ns = target.namespace.clone().unwrap_or_default();
    state
        .objects
        .get(&target.resource)
        .and_then(|m| m.get(&(ns, name.to_string())))
        .map(|o| (StatusCode::OK, o.clone()))
        .ok_or_else(|| Failure::not_found(&target.resource, name))
}

// ---------------------------------------------------------------------------
// Writes

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Everything but `metadata` and `status`: what `generation` counts.
fn spec_part(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
    }
    v
}

fn has_finalizers(v: &Value) -> bool {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

fn record(
    state: &mut State,
    resource: &Resource,
    event: EventType,
    object: Value,
    old: Option<Value>,
) -> Arc<Change> {
    let change = Arc::new(Change {
        rv: state.rv,
        resource: resource.clone(),
        event,
        object,
        old,
    });
    state.log.push(change.clone());
    change
}

type Written = Result<(Value, Vec<Arc<Change>>), Failure>;

fn create_object(
    state: &mut State,
    resource: &Resource,
    namespace: &str,
    mut object: Value,
) -> Written {
    if !object.is_object() {
        return Err(Failure::bad_request("the body must be an object"));
    }
    if object.get("metadata").is_none_or(|m| !m.is_object()) {
        object["metadata"] = json!({});
    }
    let meta = &mut object["metadata"];
    let mut name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if name.is_empty() {
        let Some(prefix) = meta.get("generateName").and_then(Value::as_str) else {
            return Err(Failure::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                "metadata.name: Required value: name or generateName is required",
            ));
        };
        name = format!("{prefix}{:05x}", (state.uids * 7919 + 4099) % 0xfffff);
        meta["name"] = json!(name);
    }
    if !namespace.is_empty() {
        meta["namespace"] = json!(namespace);
    }
    let key = (namespace.to_string(), name.clone());
    if state
        .objects
        .get(resource)
        .is_some_and(|m| m.contains_key(&key))
    {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", resource.plural),
        ));
    }
    state.rv += 1;
    state.uids += 1;
    meta["uid"] = json!(format!("00000000-0000-4000-8000-{:012x}", state.uids));
    meta["creationTimestamp"] = json!(now());
    meta["resourceVersion"] = json!(state.rv.to_string());
    meta["generation"] = json!(1);
    if let Some(m) = meta.as_object_mut() {
        m.remove("deletionTimestamp");
    }
    if let Some(kind) = object.get("kind").and_then(Value::as_str) {
        state.kinds.insert(resource.clone(), kind.to_string());
    }
    state
        .objects
        .entry(resource.clone())
        .or_default()
        .insert(key, object.clone());
    let change = record(state, resource, EventType::Added, object.clone(), None);
    Ok((object, vec![change]))
}

/// Stores `new` over `old` (same key), keeping identity fields; deletes
/// when the last finalizer of a deleting object went away.
fn update_object(
    state: &mut State,
    resource: &Resource,
    namespace: &str,
    name: &str,
    old: &Value,
    mut new: Value,
) -> Written {
    if !new.is_object() {
        return Err(Failure::bad_request("the body must be an object"));
    }
    if let Some(rv) = new
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        && !rv.is_empty()
        && Some(rv)
            != old
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
    {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                resource.plural
            ),
        ));
    }
    if new.get("metadata").is_none_or(|m| !m.is_object()) {
        new["metadata"] = json!({});
    }
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "name",
        "namespace",
    ] {
        match old["metadata"].get(field) {
            Some(v) => new["metadata"][field] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(field);
                }
            }
        }
    }
    let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
    let bump = spec_part(old) != spec_part(&new);
    new["metadata"]["generation"] = json!(if bump { generation + 1 } else { generation });
    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    if new == *old {
        // A no-op write changes nothing, as on the real server.
        return Ok((new, Vec::new()));
    }
    state.rv += 1;
    new["metadata"]["resourceVersion"] = json!(state.rv.to_string());
    let key = (namespace.to_string(), name.to_string());
    if new["metadata"].get("deletionTimestamp").is_some() && !has_finalizers(&new) {
        state
            .objects
            .entry(resource.clone())
            .or_default()
            .remove(&key);
        let change = record(
            state,
            resource,
            EventType::Deleted,
            new.clone(),
            Some(old.clone()),
        );
        return Ok((new, vec![change]));
    }
    state
        .objects
        .entry(resource.clone())
        .or_default()
        .insert(key, new.clone());
    let change = record(
        state,
        resource,
        EventType::Modified,
        new.clone(),
        Some(old.clone()),
    );
    Ok((new, vec![change]))
}

fn delete_object(state: &mut State, resource: &Resource, namespace: &str, name: &str) -> Written {
    let key = (namespace.to_string(), name.to_string());
    let Some(old) = state
        .objects
        .get(resource)
        .and_then(|m| m.get(&key))
        .cloned()
    else {
        return Err(Failure::not_found(resource, name));
    };
    state.rv += 1;
    if has_finalizers(&old) {
        if old["metadata"].get("deletionTimestamp").is_some() {
            return Ok((old, Vec::new()));
        }
        let mut new = old.clone();
        new["metadata"]["deletionTimestamp"] = json!(now());
        new["metadata"]["resourceVersion"] = json!(state.rv.to_string());
        state
            .objects
            .entry(resource.clone())
            .or_default()
            .insert(key, new.clone());
        let change = record(state, resource, EventType::Modified, new.clone(), Some(old));
        return Ok((new, vec![change]));
    }
    state
        .objects
        .entry(resource.clone())
        .or_default()
        .remove(&key);
    let mut gone = old.clone();
    gone["metadata"]["resourceVersion"] = json!(state.rv.to_string());
    let change = record(state, resource, EventType::Deleted, gone.clone(), Some(old));
    Ok((gone, vec![change]))
}

fn admit(inner: &Inner, request: AdmissionRequest) -> Result<(), Failure> {
    let hook = inner.admission.lock().clone();
    match hook {
        Some(hook) => hook(&request).map_err(|r| {
            let code = StatusCode::from_u16(r.code).unwrap_or(StatusCode::FORBIDDEN);
            let reason = match r.code {
                400 => "BadRequest",
                409 => "Conflict",
                422 => "Invalid",
                _ => "Forbidden",
            };
            Failure::new(
                code,
                reason,
                format!(
                    "admission webhook \"double.teapot.dev\" denied the request: {}",
                    r.message
                ),
            )
        }),
        None => Ok(()),
    }
}

/// Runs one write under the state lock and publishes its changes while
/// still holding it, so watches never see them out of order.
fn write(inner: &Inner, f: impl FnOnce(&mut State) -> Written) -> Result<Value, Failure> {
    let mut state = inner.state.lock();
    let (value, changes) = f(&mut state)?;
    for c in changes {
        let _ = inner.changes.send(c);
    }
    Ok(value)
}

fn stored(inner: &Inner, resource: &Resource, namespace: &str, name: &str) -> Option<Value> {
    inner
        .state
        .lock()
        .objects
        .get(resource)
        .and_then(|m| m.get(&(namespace.to_string(), name.to_string())))
        .cloned()
}

fn create(inner: &Inner, target: &Target, mut body: Value) -> Answer {
    let ns = target.namespace.clone().unwrap_or_default();
    if let Some(o) = body.as_object_mut() {
        o.remove("status");
    }
    let name = body
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    admit(
        inner,
        AdmissionRequest {
            operation: "CREATE",
            resource: target.resource.clone(),
            subresource: None,
            namespace: ns.clone(),
            name,
            object: Some(body.clone()),
            old_object: None,
        },
    )?;
    let v = write(inner, |s| create_object(s, &target.resource, &ns, body))?;
    Ok((StatusCode::CREATED, v))
}

/// The object a write to the main resource or `/status` stores.
fn merge_for(target: &Target, old: &Value, mut new: Value) -> Result<Value, Failure> {
    match target.subresource.as_deref() {
        None => {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            Ok(new)
        }
        Some("status") => {
            let mut out = old.clone();
            out["status"] = new.get("status").cloned().unwrap_or(Value::Null);
            if let Some(rv) = new.pointer("/metadata/resourceVersion") {
                out["metadata"]["resourceVersion"] = rv.clone();
            }
            Ok(out)
        }
        Some(other) => Err(Failure::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("the double has no subresource {other:?}"),
        )),
    }
}

fn update_with(inner: &Inner, target: &Target, name: &str, old: Value, new: Value) -> Answer {
    let ns = target.namespace.clone().unwrap_or_default();
    let new = merge_for(target, &old, new)?;
    admit(
        inner,
        AdmissionRequest {
            operation: "UPDATE",
            resource: target.resource.clone(),
            subresource: target.subresource.clone(),
            namespace: ns.clone(),
            name: name.to_string(),
            object: Some(new.clone()),
            old_object: Some(old.clone()),
        },
    )?;
    let v = write(inner, |s| {
        // Re-read under the lock: a write in between is a conflict only
        // when the client named a version.
        let current = s
            .objects
            .get(&target.resource)
            .and_then(|m| m.get(&(ns.clone(), name.to_string())))
            .cloned()
            .ok_or_else(|| Failure::not_found(&target.resource, name))?;
        update_object(s, &target.resource, &ns, name, &current, new)
    })?;
    Ok((StatusCode::OK, v))
}

fn replace(inner: &Inner, target: &Target, name: &str, body: Value) -> Answer {
    let ns = target.namespace.clone().unwrap_or_default();
    let old = stored(inner, &target.resource, &ns, name)
        .ok_or_else(|| Failure::not_found(&target.resource, name))?;
    update_with(inner, target, name, old, body)
}

fn patch(
    inner: &Inner,
    target: &Target,
    name: &str,
    content_type: Option<&str>,
    params: &HashMap<String, String>,
    body: Value,
) -> Answer {
    let ns = target.namespace.clone().unwrap_or_default();
    let content_type = content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim();
    let old = stored(inner, &target.resource, &ns, name);
    if content_type == "application/apply-patch+yaml" {
        let Some(manager) = params.get("fieldManager").filter(|m| !m.is_empty()) else {
            return Err(Failure::bad_request(
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            ));
        };
        let entry = json!({
            "manager": manager,
            "operation": "Apply",
            "apiVersion": body.get("apiVersion").cloned().unwrap_or(Value::Null),
            "time": now(),
        });
        let Some(old) = old else {
            let mut body = body;
            if body.get("metadata").is_none_or(|m| !m.is_object()) {
                body["metadata"] = json!({});
            }
            body["metadata"]["name"] = json!(name);
            body["metadata"]["managedFields"] = json!([entry]);
            if target.subresource.is_some() {
                return Err(Failure::not_found(&target.resource, name));
            }
            return create(inner, target, body);
        };
        let mut new = old.clone();
        let mut applied = body;
        if let Some(m) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
            // Apply never sets identity fields or optimistic locks.
            m.remove("resourceVersion");
        }
        json_patch::merge(&mut new, &applied);
        let mut fields: Vec<Value> = new
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        fields.retain(|f| {
            f.get("manager") != entry.get("manager") || f.get("operation") != entry.get("operation")
        });
        fields.push(entry);
        new["metadata"]["managedFields"] = Value::Array(fields);
        return update_with(inner, target, name, old, new);
    }
    let old = old.ok_or_else(|| Failure::not_found(&target.resource, name))?;
    let mut new = old.clone();
    match content_type {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            json_patch::merge(&mut new, &body);
        }
        "application/json-patch+json" => {
            let ops: json_patch::Patch = serde_json::from_value(body)
                .map_err(|e| Failure::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut new, &ops).map_err(|e| {
                Failure::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    format!("JSON patch failed: {e}"),
                )
            })?;
        }
        other => {
            return Err(Failure::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                format!("the double does not support patch type {other:?}"),
            ));
        }
    }
    update_with(inner, target, name, old, new)
}

fn delete(inner: &Inner, target: &Target, name: &str) -> Answer {
    let ns = target.namespace.clone().unwrap_or_default();
    let old = stored(inner, &target.resource, &ns, name)
        .ok_or_else(|| Failure::not_found(&target.resource, name))?;
    admit(
        inner,
        AdmissionRequest {
            operation: "DELETE",
            resource: target.resource.clone(),
            subresource: None,
            namespace: ns.clone(),
            name: name.to_string(),
            object: None,
            old_object: Some(old),
        },
    )?;
    let v = write(inner, |s| delete_object(s, &target.resource, &ns, name))?;
    Ok((StatusCode::OK, v))
}

// ---------------------------------------------------------------------------
// Watch

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn watch_response(
    inner: &Arc<Inner>,
    target: &Target,
    params: &HashMap<String, String>,
    mut stop: watch::Receiver<bool>,
) -> Response<Body> {
    let filter = match Filter::new(target, params) {
        Ok(f) => f,
        Err(f) => return failure(f),
    };
    let bookmarks = params
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true");
    let initial_events = params.get("sendInitialEvents").is_some_and(|v| v == "true");
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    let from: Option<u64> = params
        .get("resourceVersion")
        .filter(|v| !v.is_empty() && v.as_str() != "0")
        .and_then(|v| v.parse().ok());

    let (mut tx, rx) = futures::channel::mpsc::channel::<Bytes>(64);
    let resource = target.resource.clone();
    // Subscribe and take the backlog under one lock: nothing falls between.
    let (backlog, mut live, mut last, kind) = {
        let state = inner.state.lock();
        let live = inner.changes.subscribe();
        let kind = list_kind(&state, &resource);
        let mut backlog = Vec::new();
        match from {
            Some(rv) if rv < state.compacted => {
                let status = status_json(
                    410,
                    "Expired",
                    &format!("too old resource version: {rv} ({})", state.compacted),
                );
                backlog.push(event_line("ERROR", &status));
            }
            Some(rv) => {
                for c in state
                    .log
                    .iter()
                    .filter(|c| c.rv > rv && c.resource == resource)
                {
                    if let Some(line) = change_line(&filter, c) {
                        backlog.push(line);
                    }
                }
            }
            None => {
                for o in state
                    .objects
                    .get(&resource)
                    .into_iter()
                    .flat_map(|m| m.values())
                {
                    if filter.keeps(o) {
                        backlog.push(event_line("ADDED", o));
                    }
                }
            }
        }
        let expired = matches!(from, Some(rv) if rv < state.compacted);
        if !expired && (bookmarks || initial_events) {
            let mut meta = json!({"resourceVersion": state.rv.to_string()});
            if initial_events {
                meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            backlog.push(event_line(
                "BOOKMARK",
                &json!({"kind": kind, "apiVersion": resource.group_version, "metadata": meta}),
            ));
        }
        (
            backlog,
            live,
            if expired { None } else { Some(state.rv) },
            kind,
        )
    };
    let mut epoch = inner.watch_epoch.subscribe();
    tokio::spawn(async move {
        use futures::SinkExt;
        for line in backlog {
            if tx.send(line).await.is_err() {
                return;
            }
        }
        let Some(mut last_rv) = last.take() else {
            return; // 410: the client re-lists
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let mut tick = tokio::time::interval(BOOKMARK_INTERVAL);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = stopped(&mut stop) => return,
                _ = epoch.changed() => return,
                _ = tick.tick(), if bookmarks => {
                    let b = json!({"kind": kind, "apiVersion": resource.group_version,
                        "metadata": {"resourceVersion": last_rv.to_string()}});
                    if tx.send(event_line("BOOKMARK", &b)).await.is_err() { return }
                }
                change = live.recv() => match change {
                    Ok(c) => {
                        if c.rv <= last_rv || c.resource != resource { continue }
                        last_rv = c.rv;
                        if let Some(line) = change_line(&filter, &c)
                            && tx.send(line).await.is_err() { return }
                    }
                    // A watcher too slow for the buffer ends; it resumes
                    // from its last version like after any dropped watch.
                    Err(_) => return,
                },
            }
        }
    });
    let body = StreamBody::new(rx.map(|b| Ok::<_, Infallible>(Frame::data(b))));
    let mut r = Response::new(BodyExt::boxed(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// The event one change is for a watch with `filter`, if any.
fn change_line(filter: &Filter, c: &Change) -> Option<Bytes> {
    let now = filter.keeps(&c.object);
    let before = c.old.as_ref().is_some_and(|o| filter.keeps(o));
    let kind = match (c.event, before, now) {
        (EventType::Deleted, true, _) | (EventType::Deleted, false, true) => "DELETED",
        (EventType::Deleted, false, false) => return None,
        (EventType::Added, _, true) => "ADDED",
        (EventType::Modified, true, true) => "MODIFIED",
        (EventType::Modified, false, true) => "ADDED",
        (EventType::Modified, true, false) => "DELETED",
        _ => return None,
    };
    Some(event_line(kind, &c.object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
    use kube::runtime::watcher;

    fn cm(name: &str, labels: Value) -> ConfigMap {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels},
            "data": {"k": "v"},
        }))
        .unwrap()
    }

    #[test]
    fn plurals_and_kinds() {
        assert_eq!(plural_of("Ingress"), "ingresses");
        assert_eq!(plural_of("IngressClass"), "ingressclasses");
        assert_eq!(plural_of("EndpointSlice"), "endpointslices");
        assert_eq!(plural_of("Policy"), "policies");
        assert_eq!(plural_of("Endpoints"), "endpoints");
        assert_eq!(plural_of("Gateway"), "gateways");
        assert_eq!(plural_of("HTTPRoute"), "httproutes");
        assert_eq!(plural_of("ReferenceGrant"), "referencegrants");
        assert_eq!(kind_guess("ingresses"), "Ingress");
        assert_eq!(kind_guess("ingressclasses"), "Ingressclass");
        assert_eq!(kind_guess("leases"), "Lease");
    }

    #[test]
    fn selectors() {
        let labels = json!({"a": "1", "b": "2"});
        let look = |k: &str| labels.get(k).and_then(Value::as_str).map(str::to_string);
        let m = |s: &str| matches(&parse_selector(s).unwrap(), look);
        assert!(m(""));
        assert!(m("a=1,b==2"));
        assert!(!m("a!=1"));
        assert!(m("a in (1, 3),c notin (x)"));
        assert!(m("b,!c"));
        assert!(!m("c"));
        assert_eq!(percent_decode("a%3Db%2Cc"), "a=b,c");
    }

    #[tokio::test]
    async fn crud_through_a_real_client() {
        let server = ApiServer::start().await;
        let api: Api<ConfigMap> = Api::namespaced(server.client(), "ns");
        let created = api
            .create(&PostParams::default(), &cm("a", json!({"app": "x"})))
            .await
            .unwrap();
        let meta = &created.metadata;
        assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
        assert_eq!(meta.generation, Some(1));
        let err = api
            .create(&PostParams::default(), &cm("a", json!({})))
            .await
            .unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 409),
            "{err}"
        );
        api.create(&PostParams::default(), &cm("b", json!({"app": "y"})))
            .await
            .unwrap();

        let listed = api
            .list(&ListParams::default().labels("app=x"))
            .await
            .unwrap();
        assert_eq!(listed.items.len(), 1);
        let listed = api
            .list(&ListParams::default().fields("metadata.name=b"))
            .await
            .unwrap();
        assert_eq!(listed.items[0].metadata.name.as_deref(), Some("b"));

        let patched = api
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"k2": "v2"}})),
            )
            .await
            .unwrap();
        assert_eq!(patched.data.unwrap().len(), 2);
        let rv_a: u64 = patched.metadata.resource_version.unwrap().parse().unwrap();
        assert!(
            rv_a > created
                .metadata
                .resource_version
                .clone()
                .unwrap()
                .parse()
                .unwrap()
        );

        let applied = api
            .patch(
                "c",
                &PatchParams::apply("tester").force(),
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"x": "1"}})),
            )
            .await
            .unwrap();
        assert_eq!(
            applied.metadata.managed_fields.unwrap()[0]
                .manager
                .as_deref(),
            Some("tester")
        );

        // A stale resourceVersion conflicts.
        let mut stale = created.clone();
        stale.data = Some([("k".to_string(), "z".to_string())].into());
        let err = api
            .replace("a", &PostParams::default(), &stale)
            .await
            .unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 409),
            "{err}"
        );

        api.delete("b", &DeleteParams::default()).await.unwrap();
        let err = api.get("b").await.unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 404),
            "{err}"
        );
        assert!(
            server
                .requests()
                .iter()
                .any(|r| r.method == Method::DELETE && r.path.ends_with("/configmaps/b"))
        );
    }

    #[tokio::test]
    async fn finalizers_delay_deletion_and_status_is_separate() {
        let server = ApiServer::start().await;
        let o = server.apply(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "i", "namespace": "ns", "finalizers": ["x/y"]},
            "spec": {"rules": []},
        }));
        assert_eq!(o["metadata"]["generation"], 1);
        let api: Api<k8s_openapi::api::networking::v1::Ingress> =
            Api::namespaced(server.client(), "ns");
        // Status through the main resource is ignored; through /status it lands.
        api.patch(
            "i",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"hostname": "a"}]}}})),
        )
        .await
        .unwrap();
        assert!(
            server
                .get("networking.k8s.io/v1", "Ingress", "ns", "i")
                .unwrap()
                .get("status")
                .is_none()
        );
        api.patch_status(
            "i",
            &PatchParams::apply("teapot").force(),
            &Patch::Apply(json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "status": {"loadBalancer": {"ingress": [{"hostname": "a"}]}},
            })),
        )
        .await
        .unwrap();
        let now = server
            .get("networking.k8s.io/v1", "Ingress", "ns", "i")
            .unwrap();
        assert_eq!(now["status"]["loadBalancer"]["ingress"][0]["hostname"], "a");
        assert_eq!(now["metadata"]["generation"], 1);

        api.delete("i", &DeleteParams::default()).await.unwrap();
        let deleting = api.get("i").await.unwrap();
        assert!(deleting.metadata.deletion_timestamp.is_some());
        api.patch(
            "i",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
        assert!(
            server
                .get("networking.k8s.io/v1", "Ingress", "ns", "i")
                .is_none()
        );
    }

    #[tokio::test]
    async fn admission_hook_refuses_writes() {
        let server = ApiServer::start().await;
        server.set_admission(|r| {
            if r.name == "bad" {
                Err(Refusal::forbidden("no bad names"))
            } else {
                Ok(())
            }
        });
        let api: Api<ConfigMap> = Api::namespaced(server.client(), "ns");
        let err = api
            .create(&PostParams::default(), &cm("bad", json!({})))
            .await
            .unwrap_err();
        match err {
            kube::Error::Api(s) => {
                assert_eq!(s.code, 403);
                assert!(s.message.contains("no bad names"), "{}", s.message);
            }
            other => panic!("{other}"),
        }
        api.create(&PostParams::default(), &cm("good", json!({})))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn watcher_sees_adds_changes_and_deletes_with_a_field_selector() {
        let server = ApiServer::start().await;
        let tls = |name: &str, kind: &str| {
            json!({"apiVersion": "v1", "kind": "Secret", "type": kind,
                "metadata": {"name": name, "namespace": "ns"}, "data": {"a": "Yg=="}})
        };
        server.apply(tls("before", "kubernetes.io/tls"));
        server.apply(tls("opaque", "Opaque"));
        let api: Api<Secret> = Api::all(server.client());
        let config = watcher::Config::default().fields("type=kubernetes.io/tls");
        let mut events = Box::pin(watcher(api, config));
        let mut seen = Vec::new();
        let timeout = Duration::from_secs(30);
        let mut next = async || {
            tokio::time::timeout(timeout, events.try_next())
                .await
                .expect("watch event in time")
                .expect("watch ok")
                .expect("stream open")
        };
        loop {
            match next().await {
                watcher::Event::InitApply(s) => seen.push(s.metadata.name.unwrap()),
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        assert_eq!(seen, ["before"]);
        server.apply(tls("after", "kubernetes.io/tls"));
        server.apply(tls("opaque2", "Opaque"));
        server.delete("v1", "Secret", "ns", "before");
        let mut got = Vec::new();
        while got.len() < 2 {
            match next().await {
                watcher::Event::Apply(s) => got.push(format!("apply {}", s.metadata.name.unwrap())),
                watcher::Event::Delete(s) => {
                    got.push(format!("delete {}", s.metadata.name.unwrap()))
                }
                _ => {}
            }
        }
        assert_eq!(got, ["apply after", "delete before"]);
        // After a compaction the watcher re-lists (410) and carries on.
        server.compact();
        drop(events);
        let raw = server.requests();
        assert!(
            raw.iter()
                .any(|r| r.param("watch").as_deref() == Some("true")
                    && r.param("fieldSelector").as_deref() == Some("type=kubernetes.io/tls"))
        );
    }

    #[tokio::test]
    async fn too_old_watches_get_410() {
        let server = ApiServer::start().await;
        server.apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}));
        server.compact();
        let api: Api<ConfigMap> = Api::all(server.client());
        let mut stream = api
            .watch(&kube::api::WatchParams::default(), "0")
            .await
            .unwrap()
            .boxed();
        // "0" is "the current state, then changes"; a version from before
        // the compaction is gone.
        let first = stream.try_next().await.unwrap().unwrap();
        assert!(matches!(first, kube::api::WatchEvent::Added(_)));
        server.apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "n"}}));
        server.compact();
        let mut stale = api
            .watch(&kube::api::WatchParams::default(), "1")
            .await
            .unwrap()
            .boxed();
        match stale.try_next().await.unwrap().unwrap() {
            kube::api::WatchEvent::Error(e) => assert_eq!(e.code, 410),
            other => panic!("{other:?}"),
        }
    }
}
