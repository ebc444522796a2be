//! `Alt-Svc: h3=":PORT"` through the real binary: on HTTPS answers over
//! HTTP/1.1 and HTTP/2 (the backend's and teapot's own for a route) while
//! the HTTP/3 endpoint answers the replica's self-probe; never on plain
//! HTTP, on an answer about no route, for a host that asks for client
//! certificates, for an Ingress that turns it off, with `--no-http3`, or
//! with `--http3-advertise=false`; withdrawn within two probe intervals
//! once the UDP path stops answering, and back when it answers again.
//! However many requests arrive, the replica probes once per interval.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::client_cert::{ClientIdentity, Version, get};
use common::*;
use serde_json::{Value, json};
use teapot_testkit::certs::{TestCa, ca_secret_yaml, tls_secret_yaml};
use teapot_testkit::client::{Proto, Request, Transport};
use teapot_testkit::echo::EchoServer;
use tokio::net::UdpSocket;

const NS: &str = "altsvc";

/// The hosts: served, a policy that refuses (teapot's own 403), an
/// Ingress with `teapot.dev/alt-svc: "false"`, and client certificates
/// (optional, so the request is answered without one).
const PLAIN: &str = "web.altsvc.test";
const WALLED: &str = "walled.altsvc.test";
const QUIET: &str = "quiet.altsvc.test";
const CERTS: &str = "certs.altsvc.test";

struct Site {
    h: Harness,
    ca: TestCa,
    client: ClientIdentity,
    _backend: EchoServer,
}

/// The four hosts, each with TLS from one CA, and `args` for the proxy.
async fn site(args: &[&str]) -> Site {
    let ca = TestCa::new("site CA");
    let clients = TestCa::new("client CA");
    let client = ClientIdentity::from(&clients.issue_client("alice"));
    let hosts = [PLAIN, WALLED, QUIET, CERTS];
    let pem = ca.issue(&hosts);
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    let nginx = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (format!("nginx.ingress.kubernetes.io/{k}"), v.to_string()))
            .collect()
    };
    let annotations: [(&str, Vec<(String, String)>); 4] = [
        (PLAIN, Vec::new()),
        (WALLED, nginx(&[("whitelist-source-range", "10.0.0.0/8")])),
        (
            QUIET,
            vec![("teapot.dev/alt-svc".to_string(), "false".to_string())],
        ),
        (
            CERTS,
            nginx(&[
                ("auth-tls-secret", "altsvc/client-ca"),
                ("auth-tls-verify-client", "optional"),
            ]),
        ),
    ];
    for (host, pairs) in annotations {
        let mut ingress = simple_ingress(NS, host, host, "web");
        ingress["spec"]["tls"] = json!([{ "hosts": [host], "secretName": "site" }]);
        let map: serde_json::Map<String, Value> =
            pairs.into_iter().map(|(k, v)| (k, json!(v))).collect();
        ingress["metadata"]["annotations"] = Value::Object(map);
        objects.push(ingress);
    }
    let manifests = format!(
        "{}\n---\n{}\n---\n{}",
        docs(&objects),
        tls_secret_yaml(NS, "site", &pem),
        ca_secret_yaml(NS, "client-ca", clients.cert_pem()),
    );
    let h = Harness::start_with_args(&[("manifests.yaml", manifests)], args).await;
    h.wait_status("every Ingress served", |s| {
        hosts
            .iter()
            .all(|host| ingress_report(s, NS, host).is_some_and(|r| r["served"] == true))
    })
    .await;
    Site {
        h,
        ca,
        client,
        _backend: backend,
    }
}

/// The `alt-svc` fields of an HTTPS GET of `host` over `version`.
async fn alt_svc_of(site: &Site, host: &str, version: Version) -> (u16, Vec<String>) {
    let answer = get(
        site.h.proxy.https,
        &site.ca,
        (host, host),
        None,
        version,
        &[],
    )
    .await
    .unwrap_or_else(|e| panic!("GET https://{host}/ over {version:?}: {e}"));
    let fields = answer
        .headers
        .get_all("alt-svc")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    (answer.status, fields)
}

/// Waits for the first probe's success: the served host's answers
/// carry the field.
async fn advertised(site: &Site, want: &str) {
    eventually("Alt-Svc on HTTPS answers", REQUEST_TIMEOUT, || async {
        let (status, fields) = alt_svc_of(site, PLAIN, Version::Http1).await;
        if status == 200 && fields == [want] {
            Ok(())
        } else {
            Err((status, fields))
        }
    })
    .await;
}

/// Every way an answer may go out, on a replica that advertises: the
/// field where it belongs, and nowhere else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alt_svc_goes_on_https_answers_of_routes_that_advertise() {
    let site = site(&["--http3", "--http3-probe-interval", "3600"]).await;
    let want = format!("h3=\":{}\"; ma=3600", site.h.proxy.https.port());
    advertised(&site, &want).await;
    for version in [Version::Http1, Version::Http2] {
        // The backend's answer and teapot's own 403 for a route.
        for host in [PLAIN, WALLED] {
            let (status, fields) = alt_svc_of(&site, host, version).await;
            let expected = if host == WALLED { 403 } else { 200 };
            assert_eq!(status, expected, "{host} {version:?}");
            assert_eq!(fields, [want.as_str()], "{host} {version:?}");
        }
        // Turned off by the Ingress; a host that asks for client
        // certificates (its HTTP/3 answers are 421: clients must stay
        // on TCP).
        for host in [QUIET, CERTS] {
            let (status, fields) = alt_svc_of(&site, host, version).await;
            assert_eq!(status, 200, "{host} {version:?}");
            assert!(fields.is_empty(), "{host} {version:?}: {fields:?}");
        }
        // An answer about no route (the certificate does not serve the
        // host: 421).
        let none = get(
            site.h.proxy.https,
            &site.ca,
            (PLAIN, "nowhere.altsvc.test"),
            None,
            version,
            &[],
        )
        .await
        .unwrap();
        assert!(matches!(none.status, 404 | 421), "{}", none.status);
        assert!(none.headers.get("alt-svc").is_none(), "{:?}", none.headers);
        // With a certificate too.
        let with_cert = get(
            site.h.proxy.https,
            &site.ca,
            (CERTS, CERTS),
            Some(&site.client),
            version,
            &[],
        )
        .await
        .unwrap();
        assert!(
            with_cert.headers.get("alt-svc").is_none(),
            "{:?}",
            with_cert.headers
        );
    }
    // Plain HTTP: browsers take Alt-Svc from https origins only.
    let plain = site.h.get(PLAIN, "/").await;
    assert_eq!(plain.status, 308, "the TLS host redirects to HTTPS");
    assert!(
        plain.headers.get("alt-svc").is_none(),
        "{:?}",
        plain.headers
    );
    let metrics = site.h.metrics().await;
    assert_eq!(
        metric(&metrics, "teapot_http3_alt_svc_advertised"),
        Some(1.0)
    );
}

/// Hostile input: requests cannot make the replica probe more often
/// than once per interval (here an hour: only the probe at start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_requests_does_not_make_the_replica_probe() {
    let site = site(&["--http3", "--http3-probe-interval", "3600"]).await;
    let want = format!("h3=\":{}\"; ma=3600", site.h.proxy.https.port());
    advertised(&site, &want).await;
    let transport = Transport::tls_insecure(PLAIN);
    let mut clients = Vec::new();
    for _ in 0..8 {
        let https = site.h.proxy.https;
        let transport = transport.clone();
        clients.push(tokio::spawn(async move {
            for _ in 0..50 {
                let req = Request::get(PLAIN, "/").proto(Proto::Http2);
                let resp = send(https, &transport, &req).await;
                assert_eq!(resp.status, 200);
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    let metrics = site.h.metrics().await;
    assert_eq!(
        metric(&metrics, "teapot_http3_probes_total{result=\"ok\"}"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "teapot_http3_probes_total{result=\"failed\"}"),
        None
    );
}

/// No field without HTTP/3, or with it turned off fleet-wide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alt_svc_is_absent_without_http3_or_when_turned_off() {
    for args in [
        &["--no-http3", "--http3-probe-interval", "1"][..],
        &[
            "--http3",
            "--http3-advertise=false",
            "--http3-probe-interval",
            "1",
        ][..],
    ] {
        let site = site(args).await;
        // Longer than a probe takes: one would have run by now.
        tokio::time::sleep(Duration::from_secs(2)).await;
        for version in [Version::Http1, Version::Http2] {
            for _ in 0..3 {
                let (status, fields) = alt_svc_of(&site, PLAIN, version).await;
                assert_eq!(status, 200);
                assert!(fields.is_empty(), "{args:?} {version:?}: {fields:?}");
            }
        }
        let metrics = site.h.metrics().await;
        assert!(!metrics.contains("teapot_http3_probes_total"), "{args:?}");
    }
}

/// A UDP relay in front of the HTTP/3 endpoint, as a load balancer's
/// UDP port would be: clients (the probe) are told its port.
struct Relay {
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(port: u16, to: SocketAddr) -> Relay {
        let front = UdpSocket::bind(("127.0.0.1", port)).await.unwrap();
        let task = tokio::spawn(async move {
            let back = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            back.connect(to).await.unwrap();
            let mut client: Option<SocketAddr> = None;
            let (mut a, mut b) = (vec![0u8; 65536], vec![0u8; 65536]);
            loop {
                tokio::select! {
                    got = front.recv_from(&mut a) => {
                        let Ok((n, from)) = got else { return };
                        client = Some(from);
                        let _ = back.send(&a[..n]).await;
                    }
                    got = back.recv(&mut b) => {
                        // An ICMP error from the endpoint: ignored.
                        let Ok(n) = got else { continue };
                        if let Some(c) = client {
                            let _ = front.send_to(&b[..n], c).await;
                        }
                    }
                }
            }
        });
        Relay { task }
    }

    /// Closes its port: nothing answers there any more.
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// The UDP path dies (the relay goes): the field goes within two probe
/// intervals of the last answered probe, and stays gone while requests
/// go on; it comes back once the path answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alt_svc_is_withdrawn_when_the_udp_path_stops_answering() {
    // The relay's port first: the proxy is told it before it runs.
    let placeholder = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = placeholder.local_addr().unwrap().port();
    drop(placeholder);
    let port_arg = port.to_string();
    let site = site(&[
        "--http3",
        "--http3-advertise-port",
        &port_arg,
        "--http3-probe-interval",
        "1",
    ])
    .await;
    let endpoint = site.h.proxy.https;
    let relay = Relay::start(port, endpoint).await;
    let want = format!("h3=\":{port}\"; ma=3600");
    // Nothing answered at start: the field comes with the first probe
    // that goes through the relay.
    advertised(&site, &want).await;
    for version in [Version::Http1, Version::Http2] {
        assert_eq!(alt_svc_of(&site, PLAIN, version).await.1, [want.as_str()]);
    }

    relay.stop().await;
    let stopped = tokio::time::Instant::now();
    let gone = eventually("Alt-Svc withdrawn", REQUEST_TIMEOUT, || async {
        let (_, fields) = alt_svc_of(&site, PLAIN, Version::Http2).await;
        if fields.is_empty() {
            Ok(tokio::time::Instant::now())
        } else {
            Err(fields)
        }
    })
    .await;
    // Two intervals after the last answered probe, plus a loaded
    // machine's slack for the requests that observe it.
    assert!(
        gone - stopped < Duration::from_secs(6),
        "withdrawn after {:?}",
        gone - stopped
    );
    for version in [Version::Http1, Version::Http2] {
        for _ in 0..5 {
            let (status, fields) = alt_svc_of(&site, PLAIN, version).await;
            assert_eq!(status, 200);
            assert!(fields.is_empty(), "{version:?}: {fields:?}");
        }
    }
    // The probe that found the path dead ends within its timeout.
    eventually("a failed probe counted", REQUEST_TIMEOUT, || async {
        let metrics = site.h.metrics().await;
        let failed = metric(&metrics, "teapot_http3_probes_total{result=\"failed\"}");
        let advertised = metric(&metrics, "teapot_http3_alt_svc_advertised");
        match (failed, advertised) {
            (Some(n), Some(a)) if n >= 1.0 && a == 0.0 => Ok(()),
            other => Err(other),
        }
    })
    .await;

    // The path answers again: advertised again after the next probe.
    let relay = Relay::start(port, endpoint).await;
    advertised(&site, &want).await;
    relay.stop().await;
}

/// A Gateway `protocol: HTTPS` listener on the shared HTTPS listener
/// follows the Ingress's rules; a RouteTrafficPolicy's `altSvc: false`
/// keeps the field off the route it targets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_https_routes_are_advertised_unless_their_policy_says_not() {
    const GW_NS: &str = "altsvc-gw";
    const OPEN: &str = "open.gw-altsvc.test";
    const HUSHED: &str = "hushed.gw-altsvc.test";
    let ca = TestCa::new("gateway alt-svc");
    let pem = ca.issue(&["*.gw-altsvc.test"]);
    let backend = echo(GW_NS, "web", "web-0").await;
    let to_web = json!([{ "backendRefs": [{ "name": "web", "port": 80 }] }]);
    let mut objects = vec![
        gateway_gw(
            GW_NS,
            json!([{
                "name": "https", "protocol": "HTTPS", "port": 443, "hostname": "*.gw-altsvc.test",
                "tls": { "mode": "Terminate", "certificateRefs": [{ "name": "wildcard" }] },
            }]),
        ),
        http_route(
            GW_NS,
            "open",
            json!({ "name": "gw" }),
            &[OPEN],
            to_web.clone(),
        ),
        http_route(GW_NS, "hushed", json!({ "name": "gw" }), &[HUSHED], to_web),
        json!({
            "apiVersion": "teapot.dev/v1alpha1",
            "kind": "RouteTrafficPolicy",
            "metadata": { "name": "no-h3", "namespace": GW_NS },
            "spec": {
                "targetRefs": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "hushed" }],
                "altSvc": false,
            },
        }),
    ];
    objects.extend(echo_service(GW_NS, "web", &[&backend]));
    let h = Harness::start_with_args(
        &[
            ("gw.yaml", docs(&objects)),
            ("secret.yaml", tls_secret_yaml(GW_NS, "wildcard", &pem)),
        ],
        &["--http3", "--http3-probe-interval", "3600"],
    )
    .await;
    let status = h.wait_route_traffic_policies(1).await;
    let condition = &status["routeTrafficPolicies"][0]["status"]["targets"][0]["conditions"][0];
    assert_eq!(
        (&condition["type"], &condition["status"]),
        (&json!("Accepted"), &json!("True")),
        "{status:#}"
    );
    let want = format!("h3=\":{}\"; ma=3600", h.proxy.https.port());
    let fields = |host: &'static str, version: Version| {
        let (h, ca) = (&h, &ca);
        async move {
            let answer = get(h.proxy.https, ca, (host, host), None, version, &[])
                .await
                .unwrap_or_else(|e| panic!("GET https://{host}/: {e}"));
            let fields: Vec<String> = answer
                .headers
                .get_all("alt-svc")
                .iter()
                .map(|v| v.to_str().unwrap().to_string())
                .collect();
            (answer.status, fields)
        }
    };
    eventually("Alt-Svc on the Gateway route", REQUEST_TIMEOUT, || async {
        match fields(OPEN, Version::Http1).await {
            (200, f) if f == [want.clone()] => Ok(()),
            other => Err(other),
        }
    })
    .await;
    for version in [Version::Http1, Version::Http2] {
        assert_eq!(fields(OPEN, version).await, (200, vec![want.clone()]));
        assert_eq!(
            fields(HUSHED, version).await,
            (200, Vec::new()),
            "{version:?}"
        );
    }
}
