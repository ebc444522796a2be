//! The validator: one `AdmissionReview` in, one out.
//!
//! Dispatch: a namespaced object in a namespace some Tenant owns is judged
//! by [`teapot_api::admission::check_object`] (plus the certificate/key check
//! for Secrets); one in any other namespace belongs to the operator and is
//! allowed; a `Tenant` is judged by [`teapot_api::admission::check_tenant`].
//! Deletions are allowed. Everything that cannot be read is refused.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use teapot_api::Tenant;
use teapot_api::admission::{
    self, AdmissionContext, OBJECT_FIELD, TenantObject, Violation, check_strings, check_tenant,
    object_kind, quote, summarize, tls_secret_data, unknown_fields,
};
use teapot_api::annotations::ObjectKind;
use teapot_model::certificate::TlsCertificate;

use crate::state::{PolicyConfig, PolicyState};

/// Most violations listed in one `status.message`.
pub const MAX_LISTED: usize = 100;

const REVIEW_V1: &str = "admission.k8s.io/v1";

/// What is being done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    fn parse(s: &str) -> Option<Operation> {
        match s {
            "CREATE" => Some(Operation::Create),
            "UPDATE" => Some(Operation::Update),
            "DELETE" => Some(Operation::Delete),
            "CONNECT" => Some(Operation::Connect),
            _ => None,
        }
    }
}

/// One object under review.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// API group (`""` for the core group).
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub operation: Operation,
    /// The object as written (`None` for deletions).
    pub object: Option<&'a Value>,
}

/// The answer for one object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub violations: Vec<Violation>,
    pub warnings: Vec<String>,
    /// The tenant (CLUSTER) whose namespace it is, if any.
    pub tenant: Option<String>,
}

impl Verdict {
    fn allow() -> Verdict {
        Verdict {
            allowed: true,
            ..Verdict::default()
        }
    }

    fn deny(field: &str, message: impl Into<String>) -> Verdict {
        Verdict {
            allowed: false,
            violations: vec![Violation::new(field, message)],
            ..Verdict::default()
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.allowed {
            f.write_str("allowed")
        } else {
            let n = self.violations.len();
            write!(
                f,
                "{n} violation{}: {}",
                if n == 1 { "" } else { "s" },
                summarize(&self.violations, MAX_LISTED)
            )
        }
    }
}

/// The rules plus the operator's settings.
#[derive(Clone, Debug)]
pub struct Validator {
    config: PolicyConfig,
}

/// The answer to one HTTP request body.
#[derive(Clone, Debug)]
pub struct Reviewed {
    /// The `AdmissionReview` JSON to send back.
    pub body: Vec<u8>,
    pub allowed: bool,
    /// The reviewed kind for metrics: one of a fixed set, `other` or
    /// `invalid`.
    pub kind: &'static str,
    /// For logs: uid, namespace/name, number of violations.
    pub uid: String,
    pub object: String,
    pub violations: usize,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<RequestIn>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestIn {
    uid: String,
    kind: Gvk,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: String,
    #[serde(default)]
    object: Option<Value>,
}

/// A review read from its request body, not judged yet.
pub struct ReviewRequest {
    api_version: &'static str,
    operation: Operation,
    request: RequestIn,
}

impl ReviewRequest {
    /// The namespace of the object under review (`None` for a
    /// cluster-scoped one).
    pub fn namespace(&self) -> Option<&str> {
        self.request.namespace.as_deref().filter(|n| !n.is_empty())
    }

    /// What the refusal of this review needs if it cannot be judged in
    /// time (the review itself moves to the worker).
    pub fn busy_template(&self) -> BusyRefusal {
        BusyRefusal {
            api_version: self.api_version,
            uid: self.request.uid.clone(),
            kind: metrics_kind(&self.request.kind.group, &self.request.kind.kind),
        }
    }
}

/// The refusal of a review that could not be judged in time: the API
/// server's caller is told to retry (429); nothing is admitted.
pub struct BusyRefusal {
    api_version: &'static str,
    uid: String,
    kind: &'static str,
}

impl BusyRefusal {
    pub fn refuse(self, message: String) -> Reviewed {
        let mut r = refuse(self.api_version, self.uid, 429, message);
        r.kind = self.kind;
        r
    }
}

#[derive(Deserialize)]
struct Gvk {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'a str,
    kind: &'static str,
    response: ResponseOut,
}

#[derive(Serialize)]
struct ResponseOut {
    uid: String,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

#[derive(Serialize)]
struct StatusOut {
    status: &'static str,
    code: u16,
    reason: &'static str,
    message: String,
}

impl Validator {
    pub fn new(config: PolicyConfig) -> Validator {
        Validator { config }
    }

    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// Judges one object against `state`.
    pub fn validate(&self, state: &PolicyState, s: &Subject<'_>) -> Verdict {
        if s.group == "teapot.dev" && s.kind == "Tenant" {
            return self.validate_tenant(state, s);
        }
        let Some(namespace) = s.namespace.filter(|n| !n.is_empty()) else {
            return Verdict::allow(); // cluster-scoped: the operator's
        };
        let Some(tenant) = state.tenant_for_namespace(namespace) else {
            return Verdict::allow(); // a namespace no Tenant owns
        };
        let cluster = tenant.spec.cluster.clone();
        let mut verdict = self.validate_tenant_object(state, tenant, namespace, s);
        verdict.tenant = Some(cluster);
        verdict
    }

    fn validate_tenant_object(
        &self,
        state: &PolicyState,
        tenant: &Tenant,
        namespace: &str,
        s: &Subject<'_>,
    ) -> Verdict {
        let Some(object) = s.object else {
            return Verdict::allow(); // a deletion
        };
        let api_version = if s.group.is_empty() {
            s.version.to_string()
        } else {
            format!("{}/{}", s.group, s.version)
        };
        let Some(kind) = object_kind(&api_version, s.kind) else {
            return Verdict::deny(
                "kind",
                admission::refused_kind_message(&api_version, s.kind),
            );
        };
        let text = |k: &str| object.get(k).and_then(Value::as_str).unwrap_or("");
        if text("apiVersion") != api_version || text("kind") != s.kind {
            return Verdict::deny(
                "kind",
                format!(
                    "the object says {} {}, the request {api_version} {}",
                    quote(text("apiVersion")),
                    quote(text("kind")),
                    s.kind
                ),
            );
        }
        let is_new = match s.operation {
            Operation::Create => true,
            Operation::Update | Operation::Delete | Operation::Connect => false,
        };
        let existing = state.existing(namespace, kind, s.name, is_new);
        let ctx = AdmissionContext::new(
            tenant,
            &self.config.domain,
            &self.config.lb_networks,
            state.holdings(),
        )
        .with_existing(existing);
        let checked = admission::check_object(&ctx, namespace, object);
        let mut violations = checked.violations;
        // The shape rules ran in check_object; what needs a crypto provider
        // (the chain parses, the key matches it) is checked here.
        if let Some(TenantObject::Secret(secret)) = &checked.object
            && let Ok(tls) = tls_secret_data(secret)
            && let Err(e) = TlsCertificate::from_pem(tls.cert_chain, tls.key)
        {
            violations.push(Violation::new(e.field(), e.to_string()));
        }
        debug_assert!(checked.object.as_ref().is_none_or(|o| o.kind() == kind));
        Verdict {
            allowed: violations.is_empty(),
            violations,
            warnings: checked.warnings,
            tenant: None,
        }
    }

    fn validate_tenant(&self, state: &PolicyState, s: &Subject<'_>) -> Verdict {
        let Some(object) = s.object else {
            return Verdict::allow();
        };
        if s.version != "v1alpha1" {
            return Verdict::deny(
                "apiVersion",
                format!(
                    "teapot.dev/{} is not served; use teapot.dev/v1alpha1",
                    quote(s.version)
                ),
            );
        }
        let mut violations = check_strings(object, None);
        let tenant: Tenant = match serde_path_to_error::deserialize(object) {
            Ok(t) => t,
            Err(e) => {
                let path = e.path().to_string();
                violations.push(Violation::new(
                    if path == "." {
                        OBJECT_FIELD.to_string()
                    } else {
                        path
                    },
                    format!("cannot be read: {}", e.into_inner()),
                ));
                return Verdict {
                    allowed: false,
                    violations,
                    ..Verdict::default()
                };
            }
        };
        match serde_json::to_value(&tenant) {
            Ok(known) => violations.extend(unknown_fields(object, &known)),
            Err(e) => violations.push(Violation::new(OBJECT_FIELD, e.to_string())),
        }
        let others: Vec<&Tenant> = state.tenants().collect();
        violations.extend(check_tenant(
            &tenant,
            &self.config.domain,
            &self.config.lb_networks,
            &others,
            state.holdings(),
        ));
        Verdict {
            allowed: violations.is_empty(),
            violations,
            ..Verdict::default()
        }
    }

    /// Answers one HTTP request body. `state` is `None` until the first
    /// load: then everything is refused, since without the Tenants a tenant
    /// namespace cannot be told from the operator's.
    pub fn review(&self, state: Option<&PolicyState>, body: &[u8]) -> Reviewed {
        match Validator::read(body) {
            Ok(request) => self.judge(state, request),
            Err(refused) => refused,
        }
    }

    /// Reads one HTTP request body into the review it asks for (cheap: the
    /// JSON is parsed, no rule runs), or the refusal of one that cannot be
    /// read.
    pub fn read(body: &[u8]) -> Result<ReviewRequest, Reviewed> {
        let review: ReviewIn = match serde_json::from_slice(body) {
            Ok(r) => r,
            Err(e) => {
                // Echo the uid when the body is JSON at all, so the API
                // server can match the refusal to its request.
                let uid = serde_json::from_slice::<Value>(body)
                    .ok()
                    .and_then(|v| Some(v.get("request")?.get("uid")?.as_str()?.to_string()))
                    .unwrap_or_default();
                let what = match e.classify() {
                    serde_json::error::Category::Data => "the request is not an AdmissionReview",
                    _ => "the request body is not JSON",
                };
                return Err(refuse(REVIEW_V1, uid, 400, format!("{what}: {e}")));
            }
        };
        let uid = review
            .request
            .as_ref()
            .map(|r| r.uid.clone())
            .unwrap_or_default();
        let api_version = match review.api_version.as_str() {
            "admission.k8s.io/v1" => "admission.k8s.io/v1",
            "admission.k8s.io/v1beta1" => "admission.k8s.io/v1beta1",
            _ => {
                return Err(refuse(
                    REVIEW_V1,
                    uid,
                    400,
                    format!(
                        "apiVersion {} is not admission.k8s.io/v1",
                        quote(&review.api_version)
                    ),
                ));
            }
        };
        let Some(request) = review.request.filter(|_| review.kind == "AdmissionReview") else {
            return Err(refuse(
                api_version,
                uid,
                400,
                "the AdmissionReview has no request".into(),
            ));
        };
        let Some(operation) = Operation::parse(&request.operation) else {
            return Err(refuse(
                api_version,
                uid,
                400,
                format!("operation {} is unknown", quote(&request.operation)),
            ));
        };
        Ok(ReviewRequest {
            api_version,
            operation,
            request,
        })
    }

    /// Judges a review [`read`](Validator::read) before: the rules run.
    pub fn judge(&self, state: Option<&PolicyState>, review: ReviewRequest) -> Reviewed {
        let ReviewRequest {
            api_version,
            operation,
            request,
        } = review;
        let Some(state) = state else {
            return refuse(
                api_version,
                request.uid,
                503,
                "the teapot webhook has not loaded its tenant state yet; retry shortly".into(),
            );
        };
        let namespace = request.namespace.as_deref().filter(|n| !n.is_empty());
        let object_name = format!("{}/{}", namespace.unwrap_or(""), request.name);
        let metrics_kind = metrics_kind(&request.kind.group, &request.kind.kind);
        let verdict = if request.sub_resource.as_deref() == Some("status") {
            // Status is written by teapot itself and never routed on.
            Verdict::allow()
        } else {
            self.validate(
                state,
                &Subject {
                    group: &request.kind.group,
                    version: &request.kind.version,
                    kind: &request.kind.kind,
                    namespace,
                    name: &request.name,
                    operation,
                    object: request.object.as_ref(),
                },
            )
        };
        let status = (!verdict.allowed).then(|| StatusOut {
            status: "Failure",
            code: 403,
            reason: "Forbidden",
            message: format!(
                "{} {} refused by teapot, {verdict}",
                request.kind.kind,
                quote(&object_name)
            ),
        });
        let body = encode(
            api_version,
            &request.uid,
            verdict.allowed,
            status,
            verdict.warnings.clone(),
        );
        Reviewed {
            body,
            allowed: verdict.allowed,
            kind: metrics_kind,
            uid: request.uid,
            object: object_name,
            violations: verdict.violations.len(),
        }
    }
}

fn metrics_kind(group: &str, kind: &str) -> &'static str {
    match (group, kind) {
        ("networking.k8s.io", "Ingress") => "Ingress",
        ("", "Service") => "Service",
        ("discovery.k8s.io", "EndpointSlice") => "EndpointSlice",
        ("", "Secret") => "Secret",
        ("", "ConfigMap") => "ConfigMap",
        ("teapot.dev", "Tenant") => "Tenant",
        ("teapot.dev", "RouteTrafficPolicy") => "RouteTrafficPolicy",
        (admission::GATEWAY_GROUP, "Gateway") => "Gateway",
        (admission::GATEWAY_GROUP, "HTTPRoute") => "HTTPRoute",
        (admission::GATEWAY_GROUP, "GRPCRoute") => "GRPCRoute",
        (admission::GATEWAY_GROUP, "TLSRoute") => "TLSRoute",
        (admission::GATEWAY_GROUP, "TCPRoute") => "TCPRoute",
        (admission::GATEWAY_GROUP, "UDPRoute") => "UDPRoute",
        (admission::GATEWAY_GROUP, "ReferenceGrant") => "ReferenceGrant",
        (admission::GATEWAY_GROUP, "BackendTLSPolicy") => "BackendTLSPolicy",
        _ => "other",
    }
}

fn encode(
    api_version: &str,
    uid: &str,
    allowed: bool,
    status: Option<StatusOut>,
    warnings: Vec<String>,
) -> Vec<u8> {
    let out = ReviewOut {
        api_version,
        kind: "AdmissionReview",
        response: ResponseOut {
            uid: uid.to_string(),
            allowed,
            status,
            warnings,
        },
    };
    // Plain structs of strings and numbers always serialize.
    serde_json::to_vec(&out).unwrap_or_default()
}

fn refuse(api_version: &str, uid: String, code: u16, message: String) -> Reviewed {
    let reason = match code {
        400 => "BadRequest",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "Forbidden",
    };
    let body = encode(
        api_version,
        &uid,
        false,
        Some(StatusOut {
            status: "Failure",
            code,
            reason,
            message: format!("refused by teapot: {message}"),
        }),
        Vec::new(),
    );
    Reviewed {
        body,
        allowed: false,
        kind: "invalid",
        uid,
        object: String::new(),
        violations: 1,
    }
}

/// The kind name for an [`ObjectKind`], for callers building subjects.
pub fn group_version(kind: ObjectKind) -> (&'static str, &'static str) {
    match kind {
        ObjectKind::Ingress => ("networking.k8s.io", "v1"),
        ObjectKind::Service | ObjectKind::Secret | ObjectKind::ConfigMap => ("", "v1"),
        ObjectKind::EndpointSlice => ("discovery.k8s.io", "v1"),
        ObjectKind::Gateway
        | ObjectKind::ListenerSet
        | ObjectKind::HttpRoute
        | ObjectKind::GrpcRoute
        | ObjectKind::TlsRoute
        | ObjectKind::TcpRoute
        | ObjectKind::UdpRoute
        | ObjectKind::ReferenceGrant
        | ObjectKind::BackendTlsPolicy => (admission::GATEWAY_GROUP, "v1"),
        ObjectKind::RouteTrafficPolicy => ("teapot.dev", "v1alpha1"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;
    use teapot_model::manifests::{Loaded, load_text};
    use teapot_model::store::Store;

    const STATE: &str = "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: acme}\nspec: {cluster: acme, nodeCIDRs: [10.1.0.0/24]}\n";

    fn setup() -> (Validator, PolicyState) {
        let mut loaded = Loaded::default();
        load_text(Path::new("s.yaml"), STATE, &Store::default(), &mut loaded);
        let state = PolicyState::from_store(&loaded.store, 0);
        let v = Validator::new(PolicyConfig::new("example.net", Vec::new()).unwrap());
        (v, state)
    }

    fn review_json(ns: &str, object: Value) -> Vec<u8> {
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": "Service"},
                "resource": {"group": "", "version": "v1", "resource": "services"},
                "name": "web", "namespace": ns, "operation": "CREATE",
                "userInfo": {"username": "agent"},
                "object": object, "oldObject": null, "dryRun": false
            }
        })
        .to_string()
        .into_bytes()
    }

    fn answer(r: &Reviewed) -> Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn reviews_tenant_and_operator_namespaces() {
        let (v, state) = setup();
        let bad = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "tenant-acme"},
                         "spec": {"type": "ExternalName", "externalName": "evil.example.com"}});
        let r = v.review(Some(&state), &review_json("tenant-acme", bad.clone()));
        assert!(!r.allowed);
        let a = answer(&r);
        assert_eq!(a["response"]["uid"], "u-1");
        assert_eq!(a["response"]["allowed"], false);
        assert_eq!(a["response"]["status"]["code"], 403);
        let msg = a["response"]["status"]["message"].as_str().unwrap();
        assert!(
            msg.contains("spec.type: ExternalName") && msg.contains("spec.externalName"),
            "{msg}"
        );
        assert!(
            msg.starts_with("Service \"tenant-acme/web\" refused by teapot, 2 violations: "),
            "{msg}"
        );
        // The same object in the operator's namespace is the operator's business.
        let mut op = bad;
        op["metadata"]["namespace"] = json!("kube-system");
        let r = v.review(Some(&state), &review_json("kube-system", op));
        assert!(r.allowed);
        assert_eq!(
            answer(&r)["response"],
            json!({"uid": "u-1", "allowed": true})
        );
    }

    #[test]
    fn fails_closed() {
        let (v, state) = setup();
        for body in [
            &b"not json"[..],
            b"{}",
            b"[]",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x"}}"#,
            br#"{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Service"},"operation":"CREATE"}}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Service"},"operation":"EXPLODE"}}"#,
        ] {
            let r = v.review(Some(&state), body);
            assert!(!r.allowed, "{}", String::from_utf8_lossy(body));
            assert_eq!(answer(&r)["response"]["allowed"], false);
        }
        let r = v.review(Some(&state), br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x"}}"#);
        assert_eq!(
            answer(&r)["response"]["uid"],
            "x",
            "the uid is echoed when readable"
        );
        // An object that does not parse as its kind.
        let r = v.review(Some(&state), &review_json("tenant-acme", json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"ports": "all"}})));
        assert!(!r.allowed);
        // An object whose kind differs from the request's.
        let r = v.review(
            Some(&state),
            &review_json(
                "tenant-acme",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}}),
            ),
        );
        assert!(!r.allowed);
        // No state yet: everything is refused.
        let ok = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}});
        let r = v.review(None, &review_json("kube-system", ok.clone()));
        assert!(!r.allowed);
        assert_eq!(answer(&r)["response"]["status"]["code"], 503);
        let r = v.review(Some(&state), &review_json("tenant-acme", ok));
        assert!(r.allowed, "{}", String::from_utf8_lossy(&r.body));
    }

    #[test]
    fn tenants_are_checked_and_deletions_allowed() {
        let (v, state) = setup();
        let body = |op: &str, object: Value| {
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "t", "kind": {"group": "teapot.dev", "version": "v1alpha1", "kind": "Tenant"},
                "name": "x", "operation": op, "object": object}})
            .to_string()
        };
        let t = json!({"apiVersion": "teapot.dev/v1alpha1", "kind": "Tenant", "metadata": {"name": "x"},
                       "spec": {"cluster": "x", "nodeCIDRs": ["10.1.0.0/16"], "bogus": 1}});
        let r = v.review(Some(&state), body("CREATE", t).as_bytes());
        let msg = answer(&r)["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            msg.contains("spec.bogus") && msg.contains("spec.nodeCIDRs[0]"),
            "{msg}"
        );
        let r = v.review(Some(&state), body("DELETE", Value::Null).as_bytes());
        assert!(r.allowed);
    }

    #[test]
    fn answers_read_as_kube_admission_reviews() {
        use kube::core::DynamicObject;
        use kube::core::admission::AdmissionReview;
        let (v, state) = setup();
        let r = v.review(Some(&state), &review_json("tenant-acme", json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"selector": {"a": "b"}}})));
        let parsed: AdmissionReview<DynamicObject> = serde_json::from_slice(&r.body).unwrap();
        let resp = parsed.response.unwrap();
        assert!(!resp.allowed);
        assert_eq!(resp.uid, "u-1");
        assert!(resp.result.message.contains("spec.selector"));
        // And kube's own request type parses what the tests send.
        let req: AdmissionReview<DynamicObject> = serde_json::from_slice(&review_json(
            "tenant-acme",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}),
        ))
        .unwrap();
        assert!(req.request.is_some());
    }
}
