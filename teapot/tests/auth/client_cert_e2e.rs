//! Gateway frontend client-certificate validation through the real binary
//! (docs/gateway-api.md, "Client certificates (frontend validation)"), on
//! HTTP/1.1 and HTTP/2 over TLS: `AllowValidOnly` serves a certificate of
//! the referenced CA and refuses in the handshake a missing one, another
//! CA's, an expired one and a chain deeper than teapot allows;
//! `AllowInsecureFallback` serves them all; a request whose Host's setting
//! is not the one its connection's SNI was checked under is refused (421)
//! both ways; a client's own `ssl-client-*` fields never reach a backend.

use crate::common;

use common::client_cert::{ClientIdentity, Version, get};
use common::*;
use serde_json::{Value, json};
use teapot_testkit::certs::{TestCa, tls_secret_yaml};

const NS: &str = "infra";

/// A CA of the client PKI, able to sign below it.
struct Pki {
    cert: rcgen::Certificate,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Pki {
    fn root(cn: &str) -> Pki {
        Pki::signed(cn, None)
    }

    fn below(&self, cn: &str) -> Pki {
        Pki::signed(cn, Some(self))
    }

    fn signed(cn: &str, parent: Option<&Pki>) -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = match parent {
            Some(p) => params.signed_by(&key, &p.issuer).unwrap(),
            None => params.self_signed(&key).unwrap(),
        };
        Pki {
            cert,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A client certificate `cn` (clientAuth), valid now or long expired,
    /// with the chain up to (not including) the root: `chain` are the
    /// intermediates between this CA and the root, nearest first.
    fn client(&self, cn: &str, valid: bool, chain: &[&Pki]) -> ClientIdentity {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        (params.not_before, params.not_after) = if valid {
            (
                rcgen::date_time_ymd(2020, 1, 1),
                rcgen::date_time_ymd(2090, 1, 1),
            )
        } else {
            (
                rcgen::date_time_ymd(2000, 1, 1),
                rcgen::date_time_ymd(2001, 1, 1),
            )
        };
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let mut certs = vec![cert.der().clone()];
        certs.extend(chain.iter().map(|p| p.cert.der().clone()));
        ClientIdentity {
            chain: certs,
            key: key.serialize_der(),
        }
    }
}

/// The echo's fields named `name`, whatever their case.
fn echoed<'a>(echo: &'a Value, name: &str) -> Vec<&'a str> {
    echo["headers"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .flat_map(|(_, v)| v.as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect()
}

/// Gateway `name` with one HTTPS listener for `host` and `frontend` as
/// its `spec.tls.frontend` (none when null), and its route to `web`.
fn gateway_and_route(name: &str, host: &str, frontend: Value) -> Vec<Value> {
    let mut spec = json!({
        "gatewayClassName": "teapot",
        "listeners": [{
            "name": "https", "protocol": "HTTPS", "port": 443, "hostname": host,
            "tls": { "certificateRefs": [{ "name": "site" }] },
        }],
    });
    if !frontend.is_null() {
        spec["tls"] = json!({ "frontend": frontend });
    }
    vec![
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": { "name": name, "namespace": NS },
            "spec": spec,
        }),
        http_route(
            NS,
            name,
            json!({ "name": name }),
            &[host],
            json!([{ "backendRefs": [{ "name": "web", "port": 80 }] }]),
        ),
    ]
}

fn validation(mode: &str) -> Value {
    json!({ "default": { "validation": {
        "mode": mode,
        "caCertificateRefs": [{ "group": "", "kind": "ConfigMap", "name": "client-ca" }],
    } } })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_client_certificates_on_both_http_versions() {
    let server_ca = TestCa::new("site CA");
    let site = server_ca.issue(&["strict.test", "fallback.test", "open.test"]);
    let clients = Pki::root("client CA");
    let strangers = Pki::root("another CA");
    let valid = clients.client("alice", true, &[]);
    let foreign = strangers.client("mallory", true, &[]);
    let expired = clients.client("old", false, &[]);
    // Three intermediates below the bundle's CA: one more than a
    // Gateway's validation allows (depth 3).
    let i1 = clients.below("issuing 1");
    let i2 = i1.below("issuing 2");
    let i3 = i2.below("issuing 3");
    let deep = i3.client("deep", true, &[&i3, &i2, &i1]);
    // Two intermediates: within the depth.
    let within = i2.client("within", true, &[&i2, &i1]);

    let backend = echo(NS, "web", "web-0").await;
    let mut objects = vec![gateway_class()];
    objects.extend(echo_service(NS, "web", &[&backend]));
    objects.push(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": "client-ca", "namespace": NS },
        "data": { "ca.crt": clients.cert.pem() },
    }));
    objects.extend(gateway_and_route(
        "strict",
        "strict.test",
        validation("AllowValidOnly"),
    ));
    objects.extend(gateway_and_route(
        "fallback",
        "fallback.test",
        validation("AllowInsecureFallback"),
    ));
    objects.extend(gateway_and_route("open", "open.test", Value::Null));
    let manifests = format!(
        "{}\n---\n{}",
        docs(&objects),
        tls_secret_yaml(NS, "site", &site)
    );
    let h = Harness::start(&[("manifests.yaml", manifests)]).await;
    let addr = h.proxy.https;
    eventually(
        "strict.test serves a valid certificate",
        RELOAD_TIMEOUT,
        || async {
            match get(
                addr,
                &server_ca,
                ("strict.test", "strict.test"),
                Some(&valid),
                Version::Http1,
                &[],
            )
            .await
            {
                Ok(a) if a.status == 200 => Ok(()),
                Ok(a) => Err(format!("{}", a.status)),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    let status = h.status().await;
    let gateways = status["gatewayAPI"]["gateways"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let fallback = gateways
        .iter()
        .find(|g| g["name"] == "fallback")
        .expect("the fallback Gateway's status");
    assert!(
        fallback["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "InsecureFrontendValidationMode" && c["status"] == "True"),
        "{fallback:#}"
    );

    let forged = [
        ("ssl-client-cert", "-----BEGIN%20CERTIFICATE-----forged"),
        ("ssl-client-verify", "SUCCESS"),
        ("ssl_client_subject_dn", "CN=admin"),
    ];
    for version in [Version::Http1, Version::Http2] {
        let served = get(
            addr,
            &server_ca,
            ("strict.test", "strict.test"),
            Some(&valid),
            version,
            &forged,
        )
        .await
        .unwrap();
        assert_eq!(served.status, 200, "{version:?}");
        let echo = served.echo();
        for (name, _) in forged {
            assert!(
                echoed(&echo, name).is_empty(),
                "{version:?}: {name} reached the backend: {echo:#}"
            );
            assert!(
                echoed(&echo, &name.replace('_', "-")).is_empty(),
                "{version:?}: {name}"
            );
        }
        let ok = get(
            addr,
            &server_ca,
            ("strict.test", "strict.test"),
            Some(&within),
            version,
            &[],
        )
        .await;
        assert_eq!(
            ok.map(|a| a.status).ok(),
            Some(200),
            "{version:?}: two intermediates are within the depth"
        );
        for (what, client) in [
            ("no certificate", None),
            ("another CA's", Some(&foreign)),
            ("an expired one", Some(&expired)),
            ("a chain too deep", Some(&deep)),
        ] {
            let refused = get(
                addr,
                &server_ca,
                ("strict.test", "strict.test"),
                client,
                version,
                &[],
            )
            .await;
            assert!(
                refused.is_err(),
                "{version:?} {what}: AllowValidOnly refuses in the handshake, got {:?}",
                refused.map(|a| a.status)
            );
        }
        for (what, client) in [
            ("a valid one", Some(&valid)),
            ("no certificate", None),
            ("another CA's", Some(&foreign)),
        ] {
            let served = get(
                addr,
                &server_ca,
                ("fallback.test", "fallback.test"),
                client,
                version,
                &[],
            )
            .await
            .unwrap_or_else(|e| panic!("{version:?} {what}: AllowInsecureFallback serves: {e}"));
            assert_eq!(served.status, 200, "{version:?} {what}");
        }
        // A client's own copies reach no backend, on a host without a
        // setting either.
        let open = get(
            addr,
            &server_ca,
            ("open.test", "open.test"),
            None,
            version,
            &forged,
        )
        .await
        .unwrap();
        assert_eq!(open.status, 200, "{version:?}");
        let echo = open.echo();
        for (name, _) in forged {
            assert!(
                echoed(&echo, name).is_empty(),
                "{version:?}: {name} reached the backend"
            );
        }
        // SNI of a host without a setting, Host of one with it: the
        // connection was never asked for a certificate.
        let sneaked = get(
            addr,
            &server_ca,
            ("open.test", "strict.test"),
            None,
            version,
            &[],
        )
        .await
        .unwrap();
        assert_eq!(
            sneaked.status, 421,
            "{version:?}: SNI open.test, Host strict.test"
        );
        // The reverse: verified for strict.test, asking for open.test.
        let carried = get(
            addr,
            &server_ca,
            ("strict.test", "open.test"),
            Some(&valid),
            version,
            &[],
        )
        .await
        .unwrap();
        assert_eq!(
            carried.status, 421,
            "{version:?}: SNI strict.test, Host open.test"
        );
        // Verified for strict.test, asking for fallback.test (same CA,
        // another mode): not the check fallback.test asks.
        let other_mode = get(
            addr,
            &server_ca,
            ("strict.test", "fallback.test"),
            Some(&valid),
            version,
            &[],
        )
        .await
        .unwrap();
        assert_eq!(
            other_mode.status, 421,
            "{version:?}: SNI strict.test, Host fallback.test"
        );
    }
    let metrics = h.metrics().await;
    assert!(
        metrics.contains(
            "client_cert_handshakes_total{outcome=\"refused\",reason=\"unknown issuer\"}"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("client_cert_handshakes_total{outcome=\"verified\",reason=\"verified\"}"),
        "{metrics}"
    );
}
