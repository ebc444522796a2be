//! HTTP/3 is served by default: a proxy started without any HTTP/3 flag
//! answers an independent HTTP/3 client (aioquic) and holds the HTTPS
//! port's UDP side; `--no-http3` binds no UDP socket. A UDP port another
//! process holds leaves HTTPS over TCP serving alone by default, and
//! stops the start when `--http3` asks for HTTP/3 by name.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;
use teapot_testkit::client::{Request, Transport};
use teapot_testkit::process::ProxyProcess;

use crate::http3_e2e::{aioquic_python, get, h3, one_ingress_served, web_behind_a_test};

const NS: &str = "h3default";

/// Whether this process can bind UDP at the proxy's HTTPS address: only
/// if the proxy holds no socket there.
fn udp_side_free(proxy: &ProxyProcess) -> bool {
    std::net::UdpSocket::bind(proxy.https).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_without_http3_flags_serves_http3() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let (_backend, objects) = web_behind_a_test(NS).await;
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;
    one_ingress_served(&h).await;
    assert!(
        !udp_side_free(&h.proxy),
        "the HTTPS port's UDP side is held"
    );
    let addr = format!("127.0.0.1:{}", h.proxy.https.port());
    let answers = h3(
        &python,
        json!({ "addr": addr, "sni": "a.test", "requests": [get("a.test", "/")] }),
    )
    .await;
    assert_eq!(answers[0]["status"], 200, "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_http3_binds_no_udp_socket() {
    let (_backend, objects) = web_behind_a_test(NS).await;
    let h = Harness::start_with_args(&[("manifests.yaml", docs(&objects))], &["--no-http3"]).await;
    one_ingress_served(&h).await;
    assert!(udp_side_free(&h.proxy), "--no-http3 holds a UDP socket");
    assert!(
        !h.metrics().await.contains("teapot_http3_handshakes_total"),
        "an HTTP/3 endpoint runs"
    );
}

/// A UDP port and the TCP port of the same number both free at the time
/// of asking, the UDP side then held by the test (as another process
/// would hold UDP 443).
fn port_with_udp_held() -> (u16, std::net::UdpSocket) {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return (port, udp);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_udp_port_held_elsewhere_leaves_https_alone_or_stops_an_http3_start() {
    let (_backend, objects) = web_behind_a_test(NS).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("manifests.yaml"), docs(&objects)).unwrap();
    let (port, _held) = port_with_udp_held();
    let https = format!("127.0.0.1:{port}");

    // Default: the proxy starts, HTTPS answers over TCP, nothing probes
    // or advertises HTTP/3.
    let mut proxy = ProxyProcess::start_on(
        &teapot_bin(),
        dir.path(),
        ("127.0.0.1:0", &https, "127.0.0.1:0"),
        &["--http3-probe-interval", "1"],
    )
    .await
    .expect("the proxy starts without HTTP/3");
    assert_eq!(proxy.https.port(), port);
    let answer = eventually("HTTPS answers a.test", REQUEST_TIMEOUT, || async {
        let r = send(
            proxy.https,
            &Transport::tls_insecure("a.test"),
            &Request::get("a.test", "/"),
        )
        .await;
        if r.status == 200 {
            Ok(r)
        } else {
            Err(r.status)
        }
    })
    .await;
    assert!(
        answer.headers.get("alt-svc").is_none(),
        "{:?}",
        answer.headers
    );
    let (code, metrics) = proxy.admin_get("/metrics").await.unwrap();
    assert_eq!(code, 200);
    assert!(!metrics.contains("teapot_http3_probes_total"), "{metrics}");
    // Gone before the next start binds the same TCP port.
    proxy.terminate().unwrap();
    proxy.wait(Duration::from_secs(30)).await.unwrap();

    // `--http3`: the start fails, and says why.
    let out = tokio::process::Command::new(teapot_bin())
        .arg("proxy")
        .arg("--manifests")
        .arg(dir.path())
        .args(["--http", "127.0.0.1:0", "--https", &https])
        .args(["--admin", "127.0.0.1:0", "--http3"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .expect("the proxy exits")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("http3 (UDP)") && stderr.contains(&https),
        "{stderr}"
    );
}
