//! AdmissionReview v1 request bodies as the API server sends them, for the
//! webhook's tests and the admission latency benchmark.

use serde_json::{Value, json};

/// An AdmissionReview v1 request for `object`, from a tenant agent's
/// service account. `namespace` overrides the object's own (the API server
/// sends the request's namespace, which may differ from a stale manifest's).
pub fn review_request(
    uid: &str,
    object: &Value,
    operation: &str,
    namespace: Option<&str>,
) -> Vec<u8> {
    let api_version = object["apiVersion"].as_str().unwrap_or("");
    let kind = object["kind"].as_str().unwrap_or("");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind_lower = kind.to_ascii_lowercase();
    let resource = if kind_lower.ends_with('s') {
        format!("{kind_lower}es")
    } else {
        format!("{kind_lower}s")
    };
    let namespace = namespace
        .map(str::to_string)
        .or_else(|| object["metadata"]["namespace"].as_str().map(str::to_string));
    let mut request = json!({
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": object["metadata"]["name"],
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:tenant-acme:teapot-agent", "groups": ["system:serviceaccounts"]},
        "object": object,
        "oldObject": null,
        "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
    });
    if let Some(ns) = namespace {
        request["namespace"] = json!(ns);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
        .to_string()
        .into_bytes()
}

/// The latency case: an Ingress of tenant `globex` (of the webhook
/// corpus state, DOMAIN `example.net`) with `rules` host rules of two paths
/// each, every host inside the tenant's assigned domain so it is allowed.
pub fn many_rule_ingress(rules: usize) -> Value {
    let rules: Vec<Value> = (0..rules)
        .map(|i| {
            json!({"host": format!("h{i:03}.globex.lb.example.net"), "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}},
                {"path": format!("/api/v{i}"), "pathType": "Exact", "backend": {"service": {"name": "api", "port": {"name": "http"}}}}
            ]}})
        })
        .collect();
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "big.default", "namespace": "tenant-globex",
                     "annotations": {"teapot.dev/ssl-redirect": "true"}},
        "spec": {"ingressClassName": "teapot", "rules": rules}
    })
}

/// The hostile tenant's stalling route: an HTTPRoute of tenant acme
/// (webhook corpus state) named `name`, with `patterns` RegularExpression
/// path matches in rules of 64 (inside the CRD maxima), each a pattern
/// whose automaton does not fit (`/\w{4}...`, distinct per `name` so no
/// compiled pattern is shared): each costs a whole determinization if it
/// is ever compiled. With 3,072 of them a path, a header and a query
/// pattern per match was ~12 s of CPU before admission counted first.
pub fn regex_heavy_route(name: &str, patterns: usize) -> Value {
    let matches: Vec<Value> = (0..patterns)
        .map(|i| json!({"path": {"type": "RegularExpression", "value": format!("/\\w{{4}}{name}N{i}")}}))
        .collect();
    let rules: Vec<Value> = matches
        .chunks(64)
        .map(|m| json!({"matches": m, "backendRefs": [{"name": "web", "port": 80}]}))
        .collect();
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "tenant-acme"},
        "spec": {"parentRefs": [{"name": "shop.default"}], "rules": rules}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_names_the_plural_resource_and_the_request_namespace() {
        let object = json!({"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": "tls", "namespace": "a"}});
        let review: Value =
            serde_json::from_slice(&review_request("u", &object, "CREATE", Some("b"))).unwrap();
        assert_eq!(review["request"]["resource"]["resource"], "secrets");
        assert_eq!(review["request"]["resource"]["group"], "");
        assert_eq!(review["request"]["namespace"], "b");
        let ingress = many_rule_ingress(3);
        let review: Value =
            serde_json::from_slice(&review_request("u", &ingress, "UPDATE", None)).unwrap();
        assert_eq!(review["request"]["resource"]["resource"], "ingresses");
        assert_eq!(review["request"]["kind"]["group"], "networking.k8s.io");
        assert_eq!(review["request"]["namespace"], "tenant-globex");
        assert_eq!(ingress["spec"]["rules"].as_array().unwrap().len(), 3);
    }
}
