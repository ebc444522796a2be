//! `teapot validate --from ingress-nginx` as an operator runs it: the real
//! binary on Ingress files written for ingress-nginx, and on the Ingresses
//! of a cluster (the in-process API double behind a kubeconfig).
//!
//! Run: `cargo test -p teapot --test agent_kube migrate_e2e::`.

use std::process::{Command, Output};

use serde_json::{Value, json};
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::process::teapot_bin;

const NGINX_INGRESS: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: admin
  namespace: shop
  annotations:
    nginx.ingress.kubernetes.io/whitelist-source-range: 10.0.0.0/8
    nginx.ingress.kubernetes.io/enable-cors: "true"
    nginx.ingress.kubernetes.io/ssl-redirect: "true"
    nginx.ingress.kubernetes.io/configuration-snippet: "more_set_headers 'X: y';"
    nginx.ingress.kubernetes.io/mirror-target: http://mirror/
spec:
  ingressClassName: nginx
  rules:
  - host: admin.shop.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: admin, port: {number: 80}}}}
---
apiVersion: v1
kind: Service
metadata: {name: admin, namespace: shop}
"#;

const TEAPOT_READY: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: shop
  annotations:
    nginx.ingress.kubernetes.io/limit-burst-multiplier: "3"
spec:
  ingressClassName: teapot
  rules:
  - host: shop.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"#;

fn validate(args: &[&str]) -> Output {
    Command::new(teapot_bin())
        .args(["validate", "--from", "ingress-nginx"])
        .args(args)
        .env_remove("TEAPOT_MANIFESTS")
        .env_remove("TEAPOT_DOMAIN")
        .output()
        .expect("teapot runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn files_get_a_verdict_per_ingress_and_refusals_fail_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let nginx = dir.path().join("admin.yaml");
    std::fs::write(&nginx, NGINX_INGRESS).unwrap();
    let ready = dir.path().join("web.yaml");
    std::fs::write(&ready, TEAPOT_READY).unwrap();

    let out = validate(&["-f", nginx.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.starts_with(&format!(
            "Ingress shop/admin ({}): refused until changed\n  served as before: enable-cors, ssl-redirect, whitelist-source-range\n",
            nginx.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("  changed: spec.ingressClassName: is \"nginx\": set it to \"teapot\""),
        "{stdout}"
    );
    // Served as ingress-nginx serves it (on by default for TLS hosts).
    assert!(!stdout.contains("  changed: ssl-redirect: "), "{stdout}");
    assert!(
        stdout.contains("  refused: configuration-snippet: ")
            && stdout.contains("injects configuration"),
        "{stdout}"
    );
    // The migration page's reason and what to use instead.
    assert!(
        stdout.contains("  refused: mirror-target: not served by teapot: ")
            && stdout.contains("    instead: HTTPRoute `RequestMirror`"),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).contains("1 Ingresses: 0 move as they are, 0 with changes, 1 refused"),
        "{}",
        text(&out.stderr)
    );

    let out = validate(&["-f", ready.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "Ingress shop/web ({}): moves as it is\n  served as before: limit-burst-multiplier\n",
            ready.display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusters_ingresses_are_read_through_its_kubeconfig() {
    let api = ApiServer::start().await;
    let mut ingress: Value = serde_yaml::from_str(NGINX_INGRESS.split("---").next().unwrap())
        .expect("the fixture's Ingress");
    ingress["metadata"]["annotations"] = json!({
        "nginx.ingress.kubernetes.io/affinity": "cookie",
        "nginx.ingress.kubernetes.io/use-regex": "true",
    });
    api.apply(ingress);
    let kubeconfig = api.kubeconfig_path().to_str().unwrap().to_string();
    let out = tokio::task::spawn_blocking(move || {
        validate(&["--cluster", "--kubeconfig", &kubeconfig, "--output", "json"])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report[0]["source"], "cluster");
    assert_eq!(report[0]["verdict"], "with-changes");
    assert_eq!(report[0]["move"]["ingress"], "shop/admin");
    assert_eq!(report[0]["move"]["served"], json!(["affinity"]));
    let changed: Vec<&str> = report[0]["move"]["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["what"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["spec.ingressClassName", "use-regex"]);
}

#[test]
fn the_webhook_check_still_needs_its_domain() {
    let out = Command::new(teapot_bin())
        .args(["validate", "-f", "-", "--manifests", "/nonexistent"])
        .env_remove("TEAPOT_DOMAIN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--domain"),
        "{}",
        text(&out.stderr)
    );
}
