//! Shared by the corpus and server tests: the corpus files, the LB-cluster
//! state they are judged against, and AdmissionReview request bodies.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::Value;
use teapot_model::manifests::load_dir;
use teapot_model::store::Store;
use teapot_webhook::{PolicyConfig, PolicyState, Validator, corpus_dir};

pub const DOMAIN: &str = "example.net";
pub const LB_CIDRS: [&str; 2] = ["10.96.0.0/12", "192.168.100.0/24"];

/// The policy settings the corpus is written for.
pub fn policy() -> PolicyConfig {
    PolicyConfig::new(
        DOMAIN,
        LB_CIDRS.iter().map(|c| c.parse().unwrap()).collect(),
    )
    .unwrap()
}

pub fn validator() -> Validator {
    Validator::new(policy())
}

/// The corpus state, loaded with the proxy's loader.
pub fn state() -> PolicyState {
    let loaded = load_dir(&corpus_dir().join("state"), &Store::default());
    assert!(
        loaded.problems.is_empty(),
        "corpus state: {:?}",
        loaded.problems
    );
    PolicyState::from_store(&loaded.store, 0)
}

/// One corpus file.
#[derive(Debug)]
pub struct Case {
    pub file: PathBuf,
    /// `# attack:` (deny) or `# case:` (allow).
    pub about: String,
    /// `# expect:` fields.
    pub expect: Vec<String>,
    /// `# operation:` (default CREATE).
    pub operation: String,
    /// `# request-namespace:` (default: the object's namespace).
    pub request_namespace: Option<String>,
    pub object: Value,
}

/// Every `*.yaml` in `corpus/<which>`, sorted.
pub fn cases(which: &str) -> Vec<Case> {
    let dir = corpus_dir().join(which);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files.iter().map(|f| read_case(f)).collect()
}

fn read_case(file: &Path) -> Case {
    let text = std::fs::read_to_string(file).unwrap();
    let mut case = Case {
        file: file.to_path_buf(),
        about: String::new(),
        expect: Vec::new(),
        operation: "CREATE".into(),
        request_namespace: None,
        object: Value::Null,
    };
    for line in text.lines().take_while(|l| l.starts_with('#')) {
        let line = line.trim_start_matches('#').trim();
        let Some((key, value)) = line.split_once(": ") else {
            continue;
        };
        match key {
            "attack" | "case" => case.about = value.to_string(),
            "expect" => case.expect.push(value.to_string()),
            "operation" => case.operation = value.to_string(),
            "request-namespace" => case.request_namespace = Some(value.to_string()),
            _ => {}
        }
    }
    let yaml: serde_yaml::Value =
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    case.object = serde_json::to_value(yaml).unwrap();
    case
}

impl Case {
    pub fn name(&self) -> String {
        self.file
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    /// A real AdmissionReview v1 request body for this case, as the API
    /// server would send it.
    pub fn review_body(&self, uid: &str) -> Vec<u8> {
        admission_review(
            uid,
            &self.object,
            &self.operation,
            self.request_namespace.as_deref(),
        )
    }
}

pub use teapot_testkit::admission::review_request as admission_review;

/// The name the webhook's test certificate is issued for.
pub const SNI: &str = "teapot-webhook.teapot-system.svc";

/// A webhook started in-process on 127.0.0.1:0, reached over TLS.
pub struct Webhook {
    pub addr: std::net::SocketAddr,
    pub ca: teapot_testkit::certs::TestCa,
    /// Holds the certificate files (and manifests) of this instance.
    pub dir: tempfile::TempDir,
    /// How long one request may take.
    pub timeout: std::time::Duration,
    /// How long the shutdown may take.
    pub stop_timeout: std::time::Duration,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), teapot_webhook::Error>>,
}

impl Webhook {
    /// Serves `config` until [`Webhook::stop`]; does not wait for readiness.
    pub async fn spawn(
        config: teapot_webhook::WebhookConfig,
        ca: teapot_testkit::certs::TestCa,
        dir: tempfile::TempDir,
        timeout: std::time::Duration,
        stop_timeout: std::time::Duration,
    ) -> Webhook {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(teapot_webhook::run(config, listener, async move {
            let _ = stopped.await;
        }));
        Webhook {
            addr,
            ca,
            dir,
            timeout,
            stop_timeout,
            stop: Some(stop),
            task,
        }
    }

    pub fn transport(&self) -> teapot_testkit::client::Transport {
        teapot_testkit::client::Transport::tls_verified(SNI, &[self.ca.cert_der()])
    }

    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
        proto: teapot_testkit::client::Proto,
    ) -> teapot_testkit::client::Response {
        let req = teapot_testkit::client::Request {
            method: method.into(),
            target: path.into(),
            host: SNI.into(),
            headers: vec![("content-type".into(), "application/json".into())],
            body,
            proto,
        };
        tokio::time::timeout(
            self.timeout,
            teapot_testkit::client::send(self.addr, &self.transport(), &req),
        )
        .await
        .expect("request timed out")
        .expect("request failed")
    }

    pub async fn get(&self, path: &str) -> teapot_testkit::client::Response {
        self.request(
            "GET",
            path,
            Vec::new(),
            teapot_testkit::client::Proto::Http1,
        )
        .await
    }

    /// POSTs an AdmissionReview and returns its `response`.
    pub async fn review(&self, body: Vec<u8>) -> Value {
        let r = self
            .request(
                "POST",
                "/validate?timeout=10s",
                body,
                teapot_testkit::client::Proto::Http1,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.headers.get("content-type").unwrap(), "application/json");
        let v: Value = r.json().unwrap();
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["kind"], "AdmissionReview");
        v["response"].clone()
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let result = tokio::time::timeout(self.stop_timeout, self.task)
            .await
            .expect("webhook did not stop");
        result.unwrap().unwrap();
    }
}
