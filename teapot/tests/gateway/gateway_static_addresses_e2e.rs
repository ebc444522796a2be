//! End-to-end test of the addresses a Gateway names in `spec.addresses`
//! (docs/gateway-api.md, "Gateways with their own address"), through the
//! real `teapot proxy` binary on a pool of loopback addresses: one outside
//! the pool keeps the Gateway unprogrammed (`AddressNotUsable`, naming
//! it) and unserved while its listeners still report; removed, the
//! Gateway is programmed and served on the usable one alone, which its
//! status lists. As upstream's GatewayStaticAddresses asks.
//!
//! Run with `cargo test -p teapot --test gateway gateway_static_addresses_e2e::`.

use crate::common;

use std::net::{IpAddr, SocketAddr};

use common::*;
use serde_json::{Value, json};
use teapot_testkit::client::{self, Request, Transport};

const NS: &str = "static-e2e";
const POOL: &str = "default=127.0.78.0/29";
/// In the pool.
const USABLE: &str = "127.0.78.6";
/// In no pool (RFC 5737).
const UNUSABLE: &str = "192.0.2.1";

fn objects(addresses: &[&str], echo: &teapot_testkit::echo::EchoServer) -> String {
    let addresses: Vec<Value> = addresses
        .iter()
        .map(|a| json!({"type": "IPAddress", "value": a}))
        .collect();
    let mut objects = vec![
        gateway_class(),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "static", "namespace": NS},
               "spec": {"gatewayClassName": "teapot", "addresses": addresses,
                        "listeners": [{"name": "http", "protocol": "HTTP", "port": 8080}]}}),
        http_route(
            NS,
            "web",
            json!({"name": "static"}),
            &["a.example.com"],
            json!([{"backendRefs": [{"name": "web", "port": 80}]}]),
        ),
    ];
    objects.extend(echo_service(NS, "web", &[echo]));
    docs(&objects)
}

fn gateway_status(status: &Value) -> Value {
    status["gatewayAPI"]["gateways"]
        .as_array()
        .and_then(|gs| {
            gs.iter()
                .find(|g| g["namespace"] == NS && g["name"] == "static")
        })
        .map(|g| g["status"].clone())
        .unwrap_or(Value::Null)
}

fn condition(status: &Value, type_: &str) -> Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_named_address_is_said_and_removing_it_serves_the_usable_one() {
    let echo = echo(NS, "web", "web-0").await;
    let h = Harness::start_with_args(
        &[("gateways.yaml", objects(&[UNUSABLE, USABLE], &echo))],
        &["--l4-pool", POOL, "--l4-state", "off"],
    )
    .await;

    let status = h
        .wait_status("the Gateway says its address is not usable", |s| {
            condition(&gateway_status(s), "Programmed")["reason"] == "AddressNotUsable"
        })
        .await;
    let gw = gateway_status(&status);
    let programmed = condition(&gw, "Programmed");
    assert_eq!(programmed["status"], "False", "{gw}");
    assert!(
        programmed["message"].as_str().unwrap().contains(UNUSABLE),
        "{gw}"
    );
    assert_eq!(condition(&gw, "Accepted")["status"], "True", "{gw}");
    assert_eq!(gw["listeners"][0]["name"], "http", "{gw}");
    let usable: IpAddr = USABLE.parse().unwrap();
    let at = SocketAddr::new(usable, 8080);
    assert!(
        tokio::net::TcpStream::connect(at).await.is_err(),
        "nothing listens on {at} while the Gateway is refused"
    );

    let before = h.status().await["generation"].as_u64().unwrap();
    h.write("gateways.yaml", &objects(&[USABLE], &echo));
    h.wait_generation_after(before).await;
    let status = h
        .wait_status("the Gateway programmed on the usable address", |s| {
            condition(&gateway_status(s), "Programmed")["status"] == "True"
        })
        .await;
    let gw = gateway_status(&status);
    let addresses: Vec<&str> = gw["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["type"] == "IPAddress")
        .map(|a| a["value"].as_str().unwrap())
        .collect();
    assert_eq!(addresses, [USABLE], "{gw}");
    // Listening follows the status by a moment (the socket is bound
    // after the snapshot): a refused connection is tried again.
    let req = Request::get("a.example.com", "/");
    let resp = eventually(
        "the route served on the usable address",
        RELOAD_TIMEOUT,
        || async {
            match client::send(at, &Transport::Plain, &req).await {
                Ok(resp) if resp.status == 200 => Ok(resp),
                Ok(resp) => Err(resp.status.to_string()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    assert_eq!(resp.json().unwrap()["service"], "web");
}
