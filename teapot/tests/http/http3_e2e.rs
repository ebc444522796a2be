//! HTTP/3 through the real binary (`teapot proxy --http3`), spoken by an
//! independent client: Python's aioquic (`tests/fixtures/h3client.py`,
//! installed by `scripts/setup.sh` into its own venv). Routing, the
//! certificate chosen by SNI, a policy, a 404, bodies larger than a
//! stream's window both ways, the access log, a request in flight
//! across SIGTERM, and the bounds a hostile client meets: streams per
//! connection, connections per address (shared with TCP), a stream's
//! head within the header timeout, the idle timeout.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use teapot_echo::certs::{self_signed, tls_secret_yaml};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "quic";

/// More than one stream window (64 KiB) and than the connection's.
const LARGE: usize = 300 * 1024;

/// The venv's Python with aioquic, or `None` (the test skips, unless
/// TEAPOT_REQUIRE_AIOQUIC=1).
pub(crate) fn aioquic_python() -> Option<PathBuf> {
    let venv = match std::env::var_os("TEAPOT_PYENV") {
        Some(v) => PathBuf::from(v),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
            cache.join("teapot").join("pyenv")
        }
    };
    let python = venv.join("bin").join("python3");
    let ok = std::process::Command::new(&python)
        .args(["-c", "import aioquic"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    assert!(
        std::env::var("TEAPOT_REQUIRE_AIOQUIC").as_deref() != Ok("1"),
        "aioquic is not installed in {}: run scripts/setup.sh",
        venv.display()
    );
    eprintln!("SKIP: aioquic is not installed (scripts/setup.sh installs it)");
    None
}

/// Runs the aioquic client on `spec`.
pub(crate) async fn run_client(python: &PathBuf, spec: Value) -> std::process::Output {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/h3client.py");
    let out = tokio::process::Command::new(python)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg(script)
        .arg(spec.to_string())
        .output();
    tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("the client ends")
        .expect("the client runs")
}

/// The client's results on `spec`, one per request.
pub(crate) async fn h3(python: &PathBuf, spec: Value) -> Vec<Value> {
    let out = run_client(python, spec).await;
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "client output ({e}): {text} / {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        out.status.success(),
        "{parsed} / {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parsed.as_array().cloned().expect("a list")
}

/// The echo backend `web` behind the Ingress `a.test` in `namespace`: what
/// most HTTP/3 tests serve.
pub(crate) async fn web_behind_a_test(
    namespace: &str,
) -> (teapot_testkit::echo::EchoServer, Vec<Value>) {
    let backend = echo(namespace, "web", "web-0").await;
    let mut objects = echo_service(namespace, "web", &[&backend]);
    objects.push(simple_ingress(namespace, "a.test", "a.test", "web"));
    (backend, objects)
}

/// Waits until the proxy serves its one Ingress.
pub(crate) async fn one_ingress_served(h: &Harness) {
    h.wait_status("the ingress served", |s| {
        s["ingresses"]
            .as_array()
            .is_some_and(|i| i.len() == 1 && i[0]["served"] == true)
    })
    .await;
}

pub(crate) fn get(authority: &str, path: &str) -> Value {
    json!({ "method": "GET", "authority": authority, "path": path })
}

/// An HTTP/1.1 backend that answers each request with its own body.
pub(crate) async fn body_echo() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 16 * 1024];
                let end = loop {
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                let mut body = buf[end..].to_vec();
                while body.len() < length {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => body.extend_from_slice(&chunk[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.write_all(&body).await;
            });
        }
    });
    port
}

/// Two TLS hosts with certificates of their own, a host behind
/// `whitelist-source-range`, and the body echo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_serves_the_same_routes_certificates_and_policies() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    let bodies = body_echo().await;
    objects.extend(loopback_service(NS, "bodies", bodies));
    let mut certs = Vec::new();
    for (host, service) in [("a.test", "web"), ("b.test", "bodies")] {
        let mut ingress = simple_ingress(NS, host, host, service);
        ingress["spec"]["tls"] = json!([{ "hosts": [host], "secretName": host }]);
        objects.push(ingress);
        certs.push((host, self_signed(&[host])));
    }
    objects.push(annotated(
        NS,
        "walled.test",
        "web",
        &[("whitelist-source-range", "10.0.0.0/8")],
    ));
    let secrets: Vec<String> = certs
        .iter()
        .map(|(host, pem)| tls_secret_yaml(NS, host, pem))
        .collect();
    let manifests = format!("{}\n---\n{}", docs(&objects), secrets.join("\n---\n"));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let h = Harness::start_with_args(
        &[("manifests.yaml", manifests)],
        &[
            "--http3",
            "--access-log",
            "all",
            "--access-log-file",
            log.to_str().unwrap(),
        ],
    )
    .await;
    h.wait_status("all ingresses served", |s| {
        s["ingresses"]
            .as_array()
            .is_some_and(|i| i.len() == 3 && i.iter().all(|r| r["served"] == true))
    })
    .await;
    let addr = format!("127.0.0.1:{}", h.proxy.https.port());
    let mut cafiles = Vec::new();
    for (host, pem) in &certs {
        let path = dir.path().join(format!("{host}.pem"));
        std::fs::write(&path, &pem.cert_pem).unwrap();
        cafiles.push(path);
    }

    // Each host's own certificate, verified by the client against that
    // certificate alone and the SNI name; the routed backend answers.
    let a = h3(
        &python,
        json!({ "addr": addr, "sni": "a.test", "cafile": cafiles[0],
                "requests": [get("a.test", "/hello?x=1")] }),
    )
    .await;
    assert_eq!(a[0]["status"], 200, "{a:?}");
    let seen: Value = serde_json::from_str(a[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(seen["host"], "a.test");
    assert_eq!(seen["path"], "/hello?x=1");
    assert_eq!(seen["headers"]["X-Forwarded-Proto"][0], "https");
    assert_eq!(
        seen["headers"]["X-Request-Id"][0].as_str().unwrap().len(),
        32
    );

    // b.test's certificate for b.test; a body of several windows each
    // way, through the HTTP/1 backend path.
    let b = h3(
        &python,
        json!({ "addr": addr, "sni": "b.test", "cafile": cafiles[1],
                "requests": [{ "method": "POST", "authority": "b.test", "path": "/up",
                               "body_size": LARGE }] }),
    )
    .await;
    assert_eq!(b[0]["status"], 200, "{b:?}");
    assert_eq!(b[0]["body_len"], LARGE);
    assert_eq!(b[0]["echoed"], true);

    // The certificate is the SNI's: a.test's is not b.test's.
    let wrong = run_client(
        &python,
        json!({ "addr": addr, "sni": "a.test", "cafile": cafiles[1],
                "requests": [get("a.test", "/")] }),
    )
    .await;
    assert!(
        !wrong.status.success(),
        "b.test's CA accepted a.test's certificate"
    );

    // An unrouted host, and the policy: 127.0.0.1 is not in 10.0.0.0/8.
    let refused = h3(
        &python,
        json!({ "addr": addr, "sni": "nobody.test",
                "requests": [get("nobody.test", "/"), get("walled.test", "/")] }),
    )
    .await;
    assert_eq!(refused[0]["status"], 404, "{refused:?}");
    assert_eq!(refused[1]["status"], 403, "{refused:?}");
    assert_eq!(backend.requests(), 1, "only a.test's request reached it");

    // Every request's line, protocol h3.
    let lines = eventually("the access log's h3 lines", REQUEST_TIMEOUT, || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|l: &Value| l["protocol"] == "h3")
            .collect();
        if lines.len() >= 4 {
            Ok(lines)
        } else {
            Err(text)
        }
    })
    .await;
    let find = |host: &str| {
        lines
            .iter()
            .find(|l| l["host"] == host)
            .unwrap_or_else(|| panic!("no h3 line for {host}: {lines:#?}"))
    };
    assert_eq!(find("a.test")["status"], 200);
    assert_eq!(find("a.test")["tls"], "TLSv1.3");
    assert_eq!(find("b.test")["bytes_in"], LARGE);
    assert_eq!(find("nobody.test")["status"], 404);
    assert_eq!(find("walled.test")["status"], 403);
}

/// SIGTERM while a request is at its backend: the answer still reaches
/// the HTTP/3 client, and the proxy exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_an_http3_request_in_flight() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let held = HeldBackend::start().await;
    let mut objects = held.service(NS, "held");
    objects.push(simple_ingress(NS, "held.test", "held.test", "held"));
    let mut h = Harness::start_with_args(
        &[("manifests.yaml", docs(&objects))],
        &["--http3", "--grace-period", "20"],
    )
    .await;
    h.wait_status("the ingress served", |s| {
        s["ingresses"]
            .as_array()
            .is_some_and(|i| i.len() == 1 && i[0]["served"] == true)
    })
    .await;
    let addr = format!("127.0.0.1:{}", h.proxy.https.port());
    let client = tokio::spawn({
        let python = python.clone();
        async move {
            h3(
                &python,
                json!({ "addr": addr, "sni": "held.test",
                        "requests": [get("held.test", "/slow")] }),
            )
            .await
        }
    });
    let request = held.next().await;
    h.proxy.terminate().expect("SIGTERM");
    // The admin listener stops on the same signal as the HTTP/3
    // endpoint: once it is gone, the connection has its GOAWAY.
    eventually("the admin listener to stop", REQUEST_TIMEOUT, || async {
        match h.proxy.admin_get("/readyz").await {
            Err(_) => Ok(()),
            Ok(answer) => Err(format!("{answer:?}")),
        }
    })
    .await;
    request.answer(true);
    let answered = client.await.unwrap();
    assert_eq!(answered[0]["status"], 200, "{answered:?}");
    assert_eq!(answered[0]["body"], "held");
    let exit = h.proxy.wait(Duration::from_secs(30)).await.expect("exits");
    assert!(exit.success(), "{exit:?}");
}

/// A greedy client against the per-connection stream cap
/// (`--h2-max-concurrent-streams`, the QUIC MAX_STREAMS teapot grants)
/// and the per-address connection cap its QUIC connections share with
/// TCP's (`--max-connections-per-client`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_streams_and_connections_beyond_their_caps_wait_or_are_refused() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let held = HeldBackend::start().await;
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = held.service(NS, "held");
    objects.push(simple_ingress(NS, "held.test", "held.test", "held"));
    objects.extend(echo_service(NS, "web", &[&backend]));
    objects.push(simple_ingress(NS, "a.test", "a.test", "web"));
    let h = Harness::start_with_args(
        &[("manifests.yaml", docs(&objects))],
        &[
            "--http3",
            "--h2-max-concurrent-streams",
            "2",
            "--max-connections-per-client",
            "2",
        ],
    )
    .await;
    h.wait_status("both ingresses served", |s| {
        s["ingresses"]
            .as_array()
            .is_some_and(|i| i.len() == 2 && i.iter().all(|r| r["served"] == true))
    })
    .await;
    let addr = format!("127.0.0.1:{}", h.proxy.https.port());
    let held_client = |paths: &[&str]| {
        let python = python.clone();
        let requests: Vec<Value> = paths.iter().map(|p| get("held.test", p)).collect();
        let spec = json!({ "addr": addr, "sni": "held.test", "requests": requests });
        tokio::spawn(async move { h3(&python, spec).await })
    };
    let served = json!({ "addr": addr, "sni": "a.test", "requests": [get("a.test", "/")] });

    // Three requests at once on one connection: two reach the backend,
    // the third waits for a stream of the connection to end.
    let greedy = held_client(&["/1", "/2", "/3"]);
    let first = held.next().await;
    let second = held.next().await;
    // Another connection is served meanwhile; by its answer the third
    // stream would have reached the backend too, were it let through.
    let other = h3(&python, served.clone()).await;
    assert_eq!(other[0]["status"], 200, "{other:?}");
    assert!(held.idle(), "a stream beyond the cap reached the backend");
    first.answer(true);
    let third = held.next().await;

    // The greedy connection and a second one from the same address are
    // open: a third connection is refused.
    let holder = held_client(&["/4"]);
    let fourth = held.next().await;
    let refused = run_client(&python, served.clone()).await;
    assert!(
        !refused.status.success(),
        "a third connection was served: {}",
        String::from_utf8_lossy(&refused.stdout)
    );
    assert!(
        String::from_utf8_lossy(&refused.stdout).contains("error"),
        "{refused:?}"
    );

    fourth.answer(true);
    assert_eq!(holder.await.unwrap()[0]["status"], 200);
    let admitted = || async {
        let out = run_client(&python, served.clone()).await;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stdout).into_owned())
        }
    };
    // The second connection's slot is free again once it closed.
    eventually("a second connection admitted", REQUEST_TIMEOUT, admitted).await;

    // A TCP connection takes the second slot (a request head begun and
    // not finished keeps it open): QUIC and TCP share the count.
    let mut tcp = tokio::net::TcpStream::connect(h.proxy.http).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    eventually("the TCP connection counted", REQUEST_TIMEOUT, || async {
        let out = run_client(&python, served.clone()).await;
        if out.status.success() {
            Err("a QUIC connection admitted beside two others".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    drop(tcp);

    for request in [second, third] {
        request.answer(true);
    }
    let greedy = greedy.await.unwrap();
    assert!(
        greedy
            .iter()
            .all(|r| r["status"] == 200 && r["body"] == "held"),
        "{greedy:?}"
    );
    eventually("a connection admitted again", REQUEST_TIMEOUT, admitted).await;
}

/// A request stream that never completes its HEADERS frame is ended
/// after `--header-read-timeout` while its connection keeps serving, and
/// a connection left idle is closed after the idle timeout
/// (`--h2-idle-timeout`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_a_headless_stream_and_an_idle_connection_are_closed() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let (_backend, objects) = web_behind_a_test(NS).await;
    let h = Harness::start_with_args(
        &[("manifests.yaml", docs(&objects))],
        &[
            "--http3",
            "--header-read-timeout",
            "1",
            "--h2-idle-timeout",
            "3",
        ],
    )
    .await;
    one_ingress_served(&h).await;
    let addr = format!("127.0.0.1:{}", h.proxy.https.port());
    // The client waits up to 10 s for each (its own idle timeout is
    // 120 s): far beyond the 1 s and 3 s given, far below the defaults.
    let results = h3(
        &python,
        json!({ "addr": addr, "sni": "a.test", "probe": true, "probe_wait": 10,
                "requests": [get("a.test", "/after")], "idle_wait": 10, "timeout": 40 }),
    )
    .await;
    // The request on the same connection is answered while the probe
    // is open, and the probe is ended.
    assert_eq!(results[0]["status"], 200, "{results:?}");
    assert_eq!(results[1]["while_probe_open"], true, "{results:?}");
    assert_eq!(results[1]["probe"], "closed", "{results:?}");
    assert_eq!(results[2]["terminated"], true, "{results:?}");
}

/// A GET whose stream never ends (no Content-Length, no FIN): teapot
/// reads ahead for a body or the end only for `--header-read-timeout`,
/// then forwards it, so a backend that answers at once is heard after
/// that second, not after whatever the client holds back; the
/// connection's other request is answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_a_get_that_never_ends_waits_for_its_end_only_the_header_timeout() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let bodies = body_echo().await;
    let mut objects = loopback_service(NS, "bodies", bodies);
    objects.push(simple_ingress(NS, "bodies", "bodies.test", "bodies"));
    let h = Harness::start_with_args(
        &[("manifests.yaml", docs(&objects))],
        &["--http3", "--header-read-timeout", "1"],
    )
    .await;
    one_ingress_served(&h).await;
    let addr = format!("127.0.0.1:{}", h.proxy.https.port());
    let mut held = get("bodies.test", "/held");
    held["hold_end"] = json!(true);
    let results = h3(
        &python,
        json!({ "addr": addr, "sni": "bodies.test",
                "requests": [held, get("bodies.test", "/plain")], "timeout": 30 }),
    )
    .await;
    assert_eq!(results[0]["status"], 200, "{results:?}");
    assert_eq!(results[1]["status"], 200, "{results:?}");
    let waited = results[0]["seconds"].as_f64().expect("seconds");
    // At least the read-ahead's second (it waited for the end), and far
    // below the client's 30 s (the read-ahead was cut).
    assert!((0.9..15.0).contains(&waited), "{results:?}");
}
