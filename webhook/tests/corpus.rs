//! The corpus: every malicious object under `tests/corpus/deny` is denied
//! with the expected field named in `status.message`, every valid object
//! under `tests/corpus/allow` is allowed, each sent as a real
//! AdmissionReview through the validator. Plus the latency of a 100-rule
//! Ingress (printed, not asserted: `cargo test -p teapot-webhook --test
//! corpus -- --nocapture latency`).

mod common;

use std::time::Instant;

use common::{Case, admission_review, cases, state, validator};
use serde_json::{Value, json};
use teapot_webhook::offline::validate_text;

fn answer(body: &[u8]) -> Value {
    serde_json::from_slice::<Value>(body).unwrap()["response"].clone()
}

#[test]
fn every_malicious_object_is_denied_with_its_field() {
    let (v, state) = (validator(), state());
    let cases = cases("deny");
    assert!(cases.len() >= 60, "only {} deny cases", cases.len());
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        assert!(
            !case.about.is_empty() && !case.expect.is_empty(),
            "{}: needs `# attack:` and `# expect:` lines",
            case.name()
        );
        let uid = format!("deny-{i}");
        let r = answer(&v.review(Some(&state), &case.review_body(&uid)).body);
        assert_eq!(r["uid"], uid.as_str());
        let message = r["status"]["message"].as_str().unwrap_or("");
        if r["allowed"] != false {
            failures.push(format!("{}: ALLOWED ({})", case.name(), case.about));
            continue;
        }
        for field in &case.expect {
            if !message.contains(&format!("{field}: ")) {
                failures.push(format!(
                    "{}: denied, but not for {field}: {message}",
                    case.name()
                ));
            }
        }
        assert_eq!(r["status"]["code"], 403, "{}", case.name());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("{} malicious objects denied", cases.len());
}

#[test]
fn every_valid_object_is_allowed() {
    let (v, state) = (validator(), state());
    let cases = cases("allow");
    assert!(cases.len() >= 30, "only {} allow cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        assert!(
            !case.about.is_empty(),
            "{}: needs a `# case:` line",
            case.name()
        );
        let r = answer(&v.review(Some(&state), &case.review_body("allow")).body);
        if r["allowed"] != true {
            failures.push(format!("{}: {}", case.name(), r["status"]["message"]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("{} valid objects allowed", cases.len());
}

#[test]
fn custom_domains_are_admitted_with_a_warning() {
    let (v, state) = (validator(), state());
    let case = cases("allow")
        .into_iter()
        .find(|c| c.name() == "ingress-custom-domain.yaml")
        .unwrap();
    let r = answer(&v.review(Some(&state), &case.review_body("w")).body);
    let warning = r["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("www.acme-shop.com is a custom domain"),
        "{warning}"
    );
    assert!(
        warning.contains("CNAME to web-shop.acme.lb.example.net"),
        "{warning}"
    );
}

/// `teapot validate` applies the same rules: the offline path agrees
/// with the webhook on every corpus file it can express (not the ones
/// that set the request's namespace or operation apart from the object).
#[test]
fn offline_validation_agrees() {
    let (v, state) = (validator(), state());
    let judge = |case: &Case| {
        let text = std::fs::read_to_string(&case.file).unwrap();
        let reports = validate_text(&v, &state, &text, None);
        assert_eq!(reports.len(), 1, "{}", case.name());
        reports[0].verdict.allowed
    };
    for case in cases("deny") {
        if case.request_namespace.is_none() {
            assert!(!judge(&case), "{} allowed offline", case.name());
        }
    }
    for case in cases("allow") {
        assert!(judge(&case), "{} denied offline", case.name());
    }
}

#[test]
fn latency_of_a_100_rule_ingress() {
    let (v, state) = (validator(), state());
    let rules: Vec<Value> = (0..100)
        .map(|i| {
            json!({"host": format!("h{i:03}.globex.lb.example.net"), "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}},
                {"path": format!("/api/v{i}"), "pathType": "Exact", "backend": {"service": {"name": "api", "port": {"name": "http"}}}}
            ]}})
        })
        .collect();
    let ingress = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "big.default", "namespace": "tenant-globex",
                     "annotations": {"teapot.dev/ssl-redirect": "true"}},
        "spec": {"ingressClassName": "teapot", "rules": rules}
    });
    let body = admission_review("lat", &ingress, "CREATE", None);
    let first = answer(&v.review(Some(&state), &body).body);
    assert_eq!(first["allowed"], true, "{}", first["status"]["message"]);
    let mut samples: Vec<f64> = (0..1000)
        .map(|_| {
            let start = Instant::now();
            let r = v.review(Some(&state), &body);
            std::hint::black_box(r);
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    let p = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!(
        "100-rule Ingress ({} bytes), 1000 validations: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} build)",
        body.len(),
        p(0.5),
        p(0.99),
        samples[samples.len() - 1],
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
}
