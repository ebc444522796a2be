//! The corpus: every malicious object under `tests/corpus/deny` is denied
//! with the expected field named in `status.message`, every valid object
//! under `tests/corpus/allow` is allowed, each sent as a real
//! AdmissionReview through the validator. The latency of a 100-rule
//! Ingress is measured over HTTPS by `admission-report` in benches/.

mod common;

use common::{Case, admission_review, cases, state, validator};
use serde_json::Value;
use teapot_testkit::admission::many_rule_ingress;
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

#[test]
fn custom_route_hostnames_are_admitted_with_a_warning() {
    let (v, state) = (validator(), state());
    let case = cases("allow")
        .into_iter()
        .find(|c| c.name() == "httproute-custom-domain.yaml")
        .unwrap();
    let r = answer(&v.review(Some(&state), &case.review_body("w")).body);
    assert_eq!(r["allowed"], true, "{}", r["status"]["message"]);
    let warning = r["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with("spec.hostnames[0]: www.acme-shop.com is a custom domain"),
        "{warning}"
    );
    // The CNAME target is the parent Gateway's assigned hostname.
    assert!(
        warning.contains("CNAME to shop-default.acme.lb.example.net"),
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
fn a_100_rule_ingress_is_allowed() {
    // Its latency is measured over HTTPS by `admission-report` (benches/).
    let (v, state) = (validator(), state());
    let body = admission_review("big", &many_rule_ingress(100), "CREATE", None);
    let answer = answer(&v.review(Some(&state), &body).body);
    assert_eq!(answer["allowed"], true, "{}", answer["status"]["message"]);
}
