//! The L4 plane in the end-to-end tests: a proxy with an address pool and
//! a state file, Services and Gateways whose backends are on loopback, and
//! byte-exact exchanges through a listener.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Harness;

/// Upper bound for one exchange through an L4 listener.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// A proxy serving `files` that allocates from the pool `127.0.0.1` and
/// keeps its allocations in a state file of the returned directory,
/// started with `extra` arguments too.
pub async fn start(files: &[(&str, String)], extra: &[&str]) -> (Harness, tempfile::TempDir) {
    let state = tempfile::tempdir().expect("state dir");
    let state_file = state.path().join("l4-state.json");
    let mut args = vec![
        "--l4-pool",
        "default=127.0.0.1",
        "--l4-state",
        state_file.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    (Harness::start_with_args(files, &args).await, state)
}

/// A ClusterIP Service `name` of `namespace` with one port (`p`, `port`,
/// `protocol`), and its EndpointSlice on loopback port `target`.
pub fn backend(namespace: &str, name: &str, port: u16, protocol: &str, target: u16) -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": "p", "port": port, "protocol": protocol}]},
        }),
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-1"), "namespace": namespace,
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"name": "p", "port": target, "protocol": protocol}],
            "endpoints": [{"addresses": ["127.0.0.1"]}],
        }),
    ]
}

/// The `/status` report of the L4 Gateway `namespace`/`name`.
pub fn gateway_report<'a>(status: &'a Value, namespace: &str, name: &str) -> Option<&'a Value> {
    status["l4"]["gateways"]
        .as_array()?
        .iter()
        .find(|g| g["namespace"] == namespace && g["name"] == name)
}

/// The entry of `listener` in a Gateway report's (or status's) listeners.
pub fn listener_entry<'a>(gateway: &'a Value, listener: &str) -> &'a Value {
    gateway["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == listener)
        .unwrap_or_else(|| panic!("no listener {listener} in {gateway}"))
}

/// Writes `data` on `stream` and half-closes while reading to its end (at
/// once: a large payload must not deadlock on full socket buffers).
pub async fn exchange<S>(stream: S, data: &[u8]) -> std::io::Result<Vec<u8>>
where
    S: AsyncRead + AsyncWrite,
{
    let (mut r, mut w) = tokio::io::split(stream);
    let writer = async {
        w.write_all(data).await?;
        w.shutdown().await
    };
    let reader = async {
        let mut back = Vec::with_capacity(data.len());
        r.read_to_end(&mut back).await?;
        Ok::<_, std::io::Error>(back)
    };
    let ((), back) = tokio::try_join!(writer, reader)?;
    Ok(back)
}

/// [`exchange`] over a new TCP connection to `addr`, bounded by
/// [`IO_TIMEOUT`].
pub async fn tcp_exchange(addr: SocketAddr, data: &[u8]) -> std::io::Result<Vec<u8>> {
    tokio::time::timeout(IO_TIMEOUT, async {
        exchange(TcpStream::connect(addr).await?, data).await
    })
    .await
    .map_err(|_| std::io::Error::other("TCP exchange timed out"))?
}
