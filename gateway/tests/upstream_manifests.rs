//! Every Gateway API object in the upstream conformance manifests (and in
//! any further file of the same format put beside them) reads into its
//! typed form: the generated types cover what the conformance suite uses.
//! The manifests are data, from `../shared/conformance-upstream`.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn manifests() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/conformance-upstream/gateway-api/conformance");
    let mut out = Vec::new();
    for dir in ["base", "tests"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "yaml") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Parses `value` as the typed kind it names; `None` for kinds not here.
fn typed(value: &Value) -> Option<Result<(), String>> {
    let api = value["apiVersion"].as_str().unwrap_or("");
    if !api.starts_with("gateway.networking.k8s.io/") {
        return None;
    }
    fn parse<T: serde::de::DeserializeOwned>(v: &Value) -> Result<(), String> {
        serde_json::from_value::<T>(v.clone())
            .map(drop)
            .map_err(|e| e.to_string())
    }
    use teapot_gateway_api::*;
    Some(match value["kind"].as_str().unwrap_or("") {
        "GatewayClass" => parse::<GatewayClass>(value),
        "Gateway" => parse::<Gateway>(value),
        "ListenerSet" => parse::<ListenerSet>(value),
        "HTTPRoute" => parse::<HttpRoute>(value),
        "GRPCRoute" => parse::<GrpcRoute>(value),
        "ReferenceGrant" => parse::<ReferenceGrant>(value),
        "TLSRoute" => parse::<TlsRoute>(value),
        "TCPRoute" => parse::<TcpRoute>(value),
        "UDPRoute" => parse::<UdpRoute>(value),
        _ => return None,
    })
}

#[test]
fn every_conformance_object_reads_into_its_type() {
    let files = manifests();
    if files.is_empty() {
        // A clone without ../shared beside it: nothing to read.
        eprintln!("no upstream conformance manifests found; skipped");
        return;
    }
    let (mut read, mut failures) = (0, Vec::new());
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let Ok(value) = <Value as serde::Deserialize>::deserialize(doc) else {
                continue;
            };
            match typed(&value) {
                None => {}
                Some(Ok(())) => read += 1,
                Some(Err(e)) => failures.push(format!("{}#{i}: {e}", file.display())),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(read > 100, "only {read} Gateway API objects found");
    println!("{read} Gateway API objects from {} files", files.len());
}
