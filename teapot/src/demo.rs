//! `teapot demo`: the embedded example (examples/demo) served by the real
//! proxy, with built-in echo backends standing in for a tenant's pods.
//!
//! The static manifests are compiled into the binary; what depends on this
//! run (EndpointSlices pointing at the echo backends' ports, a self-signed
//! certificate Secret) is written next to them into the demo directory, and
//! the proxy watches that directory like any other.

use std::path::PathBuf;

use anyhow::Context;
use teapot_echo::certs;
use teapot_echo::{EchoIdentity, EchoServer};

use crate::{ListenArgs, TuningArgs};

const NAMESPACE: &str = "demo";

/// The example, as shipped in examples/demo.
const EXAMPLE: &[(&str, &str)] = &[
    (
        "00-ingressclass.yaml",
        include_str!("../../examples/demo/00-ingressclass.yaml"),
    ),
    (
        "10-services.yaml",
        include_str!("../../examples/demo/10-services.yaml"),
    ),
    (
        "20-ingress.yaml",
        include_str!("../../examples/demo/20-ingress.yaml"),
    ),
];

/// Backends per Service.
const BACKENDS: &[(&str, &str, usize)] = &[("web", "http", 2), ("api", "", 1)];

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Where to write the demo manifests (default: a temporary directory). Edit them while the demo runs to see hot reload.
    #[arg(long)]
    dir: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1:8080")]
    http: String,
    #[arg(long, default_value = "127.0.0.1:8443")]
    https: String,
    #[arg(long, default_value = "127.0.0.1:9080")]
    admin: String,
    /// Stop after this many seconds (0: run until Ctrl-C). Used by the README check.
    #[arg(long, default_value_t = 0)]
    exit_after: u64,
}

pub async fn run(args: DemoArgs, threads: usize) -> anyhow::Result<()> {
    let temp;
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            d.clone()
        }
        None => {
            temp = TempDir::new()?;
            temp.0.clone()
        }
    };
    for (name, text) in EXAMPLE {
        std::fs::write(dir.join(name), text)?;
    }
    let mut echoes = Vec::new();
    for (service, port_name, replicas) in BACKENDS {
        for i in 0..*replicas {
            let echo = EchoServer::start(EchoIdentity {
                namespace: NAMESPACE.into(),
                ingress: "shop".into(),
                service: (*service).into(),
                pod: format!("{service}-{i}"),
            })
            .await?;
            std::fs::write(
                dir.join(format!("30-endpointslice-{service}-{i}.yaml")),
                endpoint_slice(service, port_name, i, echo.addr().port()),
            )?;
            echoes.push(echo);
        }
    }
    let cert = certs::self_signed(&["shop.demo.localhost"]);
    std::fs::write(
        dir.join("40-secret-shop-tls.yaml"),
        certs::tls_secret_yaml(NAMESPACE, "shop-tls", &cert),
    )?;

    let listen = ListenArgs {
        http: args.http.clone(),
        https: args.https.clone(),
        admin: args.admin.clone(),
    };
    // `teapot proxy`'s defaults, from its own flag definitions, with the
    // demo's shorter grace period and pool.
    let mut tuning = {
        use clap::{Args, FromArgMatches};
        let command = TuningArgs::augment_args(clap::Command::new("demo"));
        TuningArgs::from_arg_matches(&command.get_matches_from(["demo"]))?
    };
    let (listeners, addrs) = crate::bind(&listen, None, tuning.http3())?;
    tuning.grace_period = 5;
    tuning.upstream_pool_size = 128;
    let mut config = crate::proxy_config(dir.clone(), &tuning, &addrs);
    config.serving_threads = threads;
    let http = addrs.http.map(|a| a.port()).unwrap_or(0);
    let https = addrs.https.map(|a| a.port()).unwrap_or(0);
    eprintln!(
        "\nteapot demo: manifests in {dir}\n\
         try:\n  \
         curl -s http://127.0.0.1:{http}/ -H 'Host: shop.demo.localhost'          # web (2 backends, round-robin)\n  \
         curl -s http://127.0.0.1:{http}/api/orders -H 'Host: shop.demo.localhost' # api\n  \
         curl -s http://127.0.0.1:{http}/ -H 'Host: anything.demo.localhost'       # wildcard -> web\n  \
         curl -si http://127.0.0.1:{http}/ -H 'Host: unknown.example'              # 404\n  \
         curl -sk --resolve shop.demo.localhost:{https}:127.0.0.1 https://shop.demo.localhost:{https}/  # TLS by SNI\n  \
         curl -s http://{admin}/status                                              # Ingress status\n",
        dir = dir.display(),
        admin = addrs.admin,
    );
    let exit_after = args.exit_after;
    let shutdown = async move {
        if exit_after > 0 {
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_secs(exit_after)) => {}
                _ = crate::shutdown_signal() => {}
            }
        } else {
            crate::shutdown_signal().await
        }
    };
    teapot_proxy::run(config, listeners, shutdown).await?;
    for echo in echoes {
        echo.stop().await;
    }
    Ok(())
}

fn endpoint_slice(service: &str, port_name: &str, index: usize, port: u16) -> String {
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {service}-{index}\n  namespace: {NAMESPACE}\n  labels:\n    kubernetes.io/service-name: {service}\naddressType: IPv4\nendpoints:\n  - addresses: [\"127.0.0.1\"]\n    conditions: {{ready: true}}\nports:\n  - name: \"{port_name}\"\n    port: {port}\n    protocol: TCP\n"
    )
}

/// A directory removed when the demo ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<TempDir> {
        let dir = std::env::temp_dir().join(format!("teapot-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
