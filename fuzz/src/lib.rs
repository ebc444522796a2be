//! The fuzzed functions, shared by the libFuzzer targets (`cargo +nightly
//! fuzz run NAME`) and by `tests/seeds.rs`, which runs each over its seed
//! corpus plus deterministic mutations on stable Rust. Every function must
//! return without panicking for any input; that is the whole oracle.

use std::path::Path;
use std::sync::OnceLock;

use teapot_proxy::compile::{CompileOptions, compile};
use teapot_proxy::plane::edge::{EdgeConfig, scan_h1};
use teapot_model::manifests::{Loaded, load_text};
use teapot_proxy::compile::snapshot::Snapshot;
use teapot_model::store::Store;
use teapot_proxy::compile::upstream::EndpointRegistry;
use teapot_webhook::offline::validate_text;
use teapot_webhook::{PolicyConfig, PolicyState, Validator};

/// The HTTP/1 framing scan on arbitrary bytes; a valid verdict must be
/// stable (scanning twice agrees).
pub fn h1_scan(data: &[u8]) {
    let limits = EdgeConfig::default().head_limits();
    let first = scan_h1(data, &limits);
    assert_eq!(first, scan_h1(data, &limits));
    if let Ok(f) = first {
        assert!(
            !(f.chunked && f.content_length.is_some()),
            "both framings accepted"
        );
    }
}

fn load(text: &str) -> Loaded {
    let mut loaded = Loaded::default();
    load_text(Path::new("fuzz.yaml"), text, &Store::default(), &mut loaded);
    loaded
}

/// Manifest loader + route compiler + matcher on arbitrary YAML.
pub fn manifests(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let loaded = load(&text);
    let snapshot = compile(
        &loaded.store,
        loaded.problems,
        1,
        &CompileOptions::default(),
        &EndpointRegistry::default(),
    );
    for (host, path) in [
        ("a.example", "/"),
        ("", ""),
        ("x.localhost:8080", "/a/b/../c"),
    ] {
        let _ = snapshot.routes.lookup(host, path);
    }
}

fn demo_snapshot() -> &'static Snapshot {
    static SNAPSHOT: OnceLock<Snapshot> = OnceLock::new();
    SNAPSHOT.get_or_init(|| {
        let mut loaded = Loaded::default();
        for (name, text) in [
            (
                "services.yaml",
                include_str!("../../examples/demo/10-services.yaml"),
            ),
            (
                "ingress.yaml",
                include_str!("../../examples/demo/20-ingress.yaml"),
            ),
            (
                "class.yaml",
                include_str!("../../examples/demo/00-ingressclass.yaml"),
            ),
        ] {
            load_text(Path::new(name), text, &Store::default(), &mut loaded);
        }
        compile(
            &loaded.store,
            loaded.problems,
            1,
            &CompileOptions::default(),
            &EndpointRegistry::default(),
        )
    })
}

/// The matcher on arbitrary authority and path (split at the first NUL).
pub fn route_match(data: &[u8]) {
    let (authority, path) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b"/"[..]),
    };
    let authority = String::from_utf8_lossy(authority);
    let path = String::from_utf8_lossy(path);
    let _ = demo_snapshot().routes.lookup(&authority, &path);
}

fn webhook() -> &'static (Validator, PolicyState) {
    static STATE: OnceLock<(Validator, PolicyState)> = OnceLock::new();
    STATE.get_or_init(|| {
        let loaded = load(concat!(
            include_str!("../../webhook/tests/corpus/state/tenants.yaml"),
            "\n---\n",
            include_str!("../../webhook/tests/corpus/state/held.yaml"),
        ));
        let state = PolicyState::from_store(&loaded.store, 0);
        let config = PolicyConfig::new("example.net", vec!["10.96.0.0/12".parse().expect("CIDR")])
            .expect("policy config");
        (Validator::new(config), state)
    })
}

/// The webhook's validators on arbitrary YAML, as the operator's and as a
/// tenant's objects.
pub fn webhook_validate(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (validator, state) = webhook();
    let _ = validate_text(validator, state, &text, None);
    let _ = validate_text(validator, state, &text, Some("acme"));
}
