//! The README's first command runs `teapot demo`; this checks that what it
//! promises (routing by host and path, round-robin, 404, TLS by SNI, status)
//! holds, on port 0.

use std::process::Stdio;
use std::time::Duration;

use teapot_testkit::certs::cert_matches_hostname;
use teapot_testkit::client::{Request, Transport, send};
use teapot_testkit::process::parse_listening_line;
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test]
async fn demo_serves_the_embedded_example() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_teapot"))
        .arg("demo")
        .args(teapot_testkit::process::LOOPBACK_LISTENERS)
        .arg("--dir")
        .arg(dir.path())
        .args(["--exit-after", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addrs = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("demo exited early");
            if let Some(a) = parse_listening_line(&line) {
                return a;
            }
        }
    })
    .await
    .expect("no listening line");

    let mut pods = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let r = send(
            addrs.http,
            &Transport::Plain,
            &Request::get("shop.demo.localhost", "/"),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200);
        let body = r.json().unwrap();
        assert_eq!(body["service"], "web");
        pods.insert(body["pod"].as_str().unwrap().to_string());
    }
    assert_eq!(
        pods.len(),
        2,
        "round-robin over both web backends: {pods:?}"
    );

    let get = async |host: &str, path: &str| {
        send(addrs.http, &Transport::Plain, &Request::get(host, path))
            .await
            .unwrap()
    };
    let api = get("shop.demo.localhost", "/api/orders").await;
    assert_eq!(api.json().unwrap()["service"], "api");
    let wildcard = get("x.demo.localhost", "/").await;
    assert_eq!(wildcard.json().unwrap()["service"], "web");
    let miss = get("unknown.example", "/").await;
    assert_eq!(miss.status, 404);

    let tls = Transport::Tls {
        sni: "shop.demo.localhost".into(),
        roots: None,
    };
    let secure = send(addrs.https, &tls, &Request::get("shop.demo.localhost", "/"))
        .await
        .unwrap();
    assert_eq!(secure.status, 200);
    assert!(cert_matches_hostname(
        &secure.peer_certificates[0],
        "shop.demo.localhost"
    ));
    assert_eq!(
        secure.json().unwrap()["headers"]["X-Forwarded-Proto"][0],
        "https"
    );

    let status = send(
        addrs.admin,
        &Transport::Plain,
        &Request::get("admin", "/status"),
    )
    .await
    .unwrap()
    .json()
    .unwrap();
    assert_eq!(
        status["ingresses"][0]["status"]["loadBalancer"]["ingress"][0]["ip"],
        "127.0.0.1"
    );
    assert_eq!(status["problems"].as_array().unwrap().len(), 0, "{status}");
    child.start_kill().unwrap();
}
