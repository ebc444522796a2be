//! The upstream helpers a test calls with plain arguments and no
//! expectation literal (`port.py`'s PLAIN_HELPERS), judged as upstream's
//! `conformance/utils/{tls,tcp,udp,weight}` judge them: a TLS connection
//! the Gateway must eventually reject, a TCP address that accepts
//! connections, a TCP or UDP echo that answers, and a weighted distribution
//! of samples over a route's backends.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use futures::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::{Attempt, CaseContext, REQUEST_TIMEOUT, l4, protocol};
use crate::gateway::data::Case;
use crate::gateway::grpc::{self, GrpcCase};
use crate::gateway::judge;

/// `tls.MakeTLSConnectionAndExpectEventuallyConnectionRejection`.
const TLS_REJECTION: &str = "tls.MakeTLSConnectionAndExpectEventuallyConnectionRejection";
/// `weight.TestWeightedDistribution`.
const WEIGHTS: &str = "weight.TestWeightedDistribution";

/// `weight.TestWeightedDistribution`'s constants: samples per attempt, in
/// flight at once, and the tolerance on each backend's share.
const TOTAL_REQUESTS: usize = 500;
const CONCURRENT_REQUESTS: usize = 10;
const TOLERANCE: f64 = 0.05;
/// `weight.MaxTestRetries`: the tests try the distribution this often
/// before failing (statistical variance).
const MAX_TEST_RETRIES: usize = 10;

/// The probe upstream's `udpEchoSendOnce` (UDPRouteWeightedRouting) sends.
const UDP_WEIGHT_PROBE: &str = "gateway-api-conformance-udp-weight\n";

impl CaseContext<'_> {
    /// A case of a plain-argument helper, judged; None for any other case.
    pub(super) async fn run_plain(&self, case: &Case) -> Option<Result<(), String>> {
        let known = [
            TLS_REJECTION,
            "tcp.ExpectAddressBeAvailable",
            "tcp.ExpectEchoResponse",
            "udp.ExpectEchoResponse",
            WEIGHTS,
        ];
        if !known.contains(&case.helper.as_str()) {
            return None;
        }
        let unjudged = case.unjudged_fields();
        if !unjudged.is_empty() {
            return Some(Err(format!(
                "the case has fields this runner does not judge: {}",
                unjudged.join(", ")
            )));
        }
        Some(match case.helper.as_str() {
            WEIGHTS => self.run_weights(case).await,
            helper => self.run_probe(case, helper).await,
        })
    }

    /// The probes: each polls until one attempt passes (`assert.Eventually`,
    /// `wait.PollUntilContextTimeout`).
    async fn run_probe(&self, case: &Case, helper: &str) -> Result<(), String> {
        let addr = self.l4_address(case)?;
        let server_name = self.argument_text(case, "serverName")?;
        let server_name = server_name.as_str();
        self.eventually(1, move || async move {
            match helper {
                TLS_REJECTION => tls_rejected(addr, server_name).await,
                "tcp.ExpectAddressBeAvailable" => TcpStream::connect(addr)
                    .await
                    .map(drop)
                    .map_err(|e| format!("failed to establish TCP connection to {addr}: {e}")),
                "tcp.ExpectEchoResponse" => tcp_echo_pod(addr).await.map(drop),
                _ => l4::udp_exchange(addr, "", "", REQUEST_TIMEOUT).await,
            }
            .map_err(Attempt::Retry)
        })
        .await
        .map(drop)
    }

    /// `weight.TestWeightedDistribution`, tried `MaxTestRetries` times as
    /// the tests loop over it.
    async fn run_weights(&self, case: &Case) -> Result<(), String> {
        let expected = expected_weights(case)?;
        let sender = case
            .arguments
            .get("sender")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let sample = self.sampler(case, sender)?;
        let mut last = String::new();
        for attempt in 1..=MAX_TEST_RETRIES {
            let pods: Vec<Result<String, String>> = futures::stream::iter(0..TOTAL_REQUESTS)
                .map(|_| sample.send(self))
                .buffer_unordered(CONCURRENT_REQUESTS)
                .collect()
                .await;
            let result = pods
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("error while sending requests: {e}"))
                .and_then(|pods| distribution(&pods, &expected));
            match result {
                Ok(()) => return Ok(()),
                Err(e) => last = format!("attempt {attempt}/{MAX_TEST_RETRIES}: {e}"),
            }
        }
        Err(format!(
            "weighted distribution did not converge within tolerance ({last})"
        ))
    }

    fn sampler<'c>(&self, case: &'c Case, sender: &str) -> Result<Sampler<'c>, String> {
        Ok(match (sender, case.protocol.as_str()) {
            ("tcp.EchoSendOnce", "tcp") => Sampler::Tcp(self.l4_address(case)?),
            (_, "udp") => Sampler::Udp(self.l4_address(case)?),
            ("http.MakeRequest", "http") => {
                Sampler::Http(case, protocol(&case.request.protocol, "http")?)
            }
            ("grpc.SendRPC", "grpc") => {
                let endpoint = self.endpoint(case, "http")?;
                Sampler::Grpc(
                    GrpcCase::from_case(case)?,
                    endpoint.addr.unwrap_or(self.http),
                    endpoint.gw_addr,
                )
            }
            (sender, protocol) => {
                return Err(format!(
                    "a weighted distribution sampled by {sender:?} over {protocol} is not supported by this runner"
                ));
            }
        })
    }
}

/// What one sample of a weighted distribution sends; it answers the pod
/// that served it.
enum Sampler<'c> {
    /// `tcp.EchoSendOnce`.
    Tcp(SocketAddr),
    /// The test's `udpEchoSendOnce`.
    Udp(SocketAddr),
    /// `http.MakeRequest` of the case, `CompareRoundTrip`ed, the echo's pod.
    Http(&'c Case, teapot_testkit::client::Proto),
    /// A gRPC client's `SendRPC` of the case: code OK, the echo's pod.
    Grpc(GrpcCase, SocketAddr, String),
}

impl Sampler<'_> {
    async fn send(&self, context: &CaseContext<'_>) -> Result<String, String> {
        match self {
            Sampler::Tcp(addr) => tcp_echo_pod(*addr).await,
            Sampler::Udp(addr) => udp_echo_pod(*addr).await,
            Sampler::Http(case, proto) => {
                let exchange =
                    context
                        .round_trip(case, "http", *proto)
                        .await
                        .map_err(|e| match e {
                            Attempt::Retry(e) | Attempt::Fatal(e) => {
                                format!("failed to roundtrip request: {e}")
                            }
                        })?;
                judge::compare(case, &exchange.sent, &exchange.request, &exchange.response)
                    .map_err(|e| format!("response expectation failed for request: {e}"))?;
                Ok(exchange.request.pod)
            }
            Sampler::Grpc(expected, addr, authority) => {
                let got = grpc::call(*addr, authority, expected, context.timeout)
                    .await
                    .map_err(|e| format!("failed to send gRPC request: {e}"))?;
                if got.code != 0 {
                    return Err(format!(
                        "expected OK response, got code {} ({})",
                        got.code, got.message
                    ));
                }
                Ok(got.pod)
            }
        }
    }
}

/// The case's `expectedWeights`: backend (Deployment) name to share.
fn expected_weights(case: &Case) -> Result<BTreeMap<String, f64>, String> {
    let Some(Value::Object(map)) = case.arguments.get("expectedWeights") else {
        return Err("the case has no expectedWeights".into());
    };
    map.iter()
        .map(|(backend, share)| {
            share
                .as_f64()
                .map(|share| (backend.clone(), share))
                .ok_or_else(|| format!("expectedWeights[{backend:?}] is {share}, not a number"))
        })
        .collect()
}

/// `extractBackendName`: a pod's Deployment, its name without the last two
/// dash-separated parts (`{deployment}-{rs-hash}-{pod-hash}`).
fn backend_name(pod: &str) -> &str {
    let parts: Vec<&str> = pod.split('-').collect();
    if parts.len() < 3 {
        return pod;
    }
    let cut: usize = parts[parts.len() - 2..].iter().map(|p| p.len() + 1).sum();
    &pod[..pod.len() - cut]
}

/// `TestWeightedDistribution`'s judgement of the pods that served the
/// samples: every sample on an expected backend, as many backends served
/// as have a weight above 0, each share within the tolerance.
fn distribution(pods: &[String], expected: &BTreeMap<String, f64>) -> Result<(), String> {
    let mut seen: BTreeMap<&str, f64> = BTreeMap::new();
    for pod in pods {
        let backend = backend_name(pod);
        if !expected.contains_key(backend) {
            return Err(format!(
                "request was handled by an unexpected pod {pod:?} (extracted backend: {backend:?})"
            ));
        }
        *seen.entry(backend).or_default() += 1.0;
    }
    let total = pods.len() as f64;
    let active = expected.values().filter(|w| **w > 0.0).count();
    let mut errors = Vec::new();
    if seen.len() != active {
        errors.push(format!(
            "expected {active} backends to receive traffic, but got {}",
            seen.len()
        ));
    }
    for (backend, want) in expected {
        let got = seen.get(backend.as_str()).copied();
        if got.is_none() && *want != 0.0 {
            errors.push(format!(
                "expect traffic to hit backend {backend:?} - but none was received"
            ));
            continue;
        }
        let share = got.unwrap_or(0.0) / total;
        if (share - want).abs() > TOLERANCE {
            errors.push(format!(
                "backend {backend:?} weighted traffic of {share} not within tolerance {want} (+/-{TOLERANCE:.6})"
            ));
        }
    }
    errors.sort();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// One attempt of `MakeTLSConnectionAndExpectEventuallyConnectionRejection`:
/// a TLS handshake with the SNI given must end in a reset or a close
/// (`isConnectionRejected`: EOF or ECONNRESET). A refused TCP connection,
/// a TLS alert, a timeout or a completed handshake is no rejection.
async fn tls_rejected(addr: SocketAddr, server_name: &str) -> Result<(), String> {
    let attempt = async {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("client could not connect: {e}"))?;
        let server = rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|e| format!("server name {server_name:?}: {e}"))?;
        match TlsConnector::from(l4::insecure_client_config())
            .connect(server, stream)
            .await
        {
            Ok(_) => Err("client could connect".to_string()),
            Err(e) if is_rejection(&e) => Ok(()),
            Err(e) => Err(format!("client could not connect: {e}")),
        }
    };
    tokio::time::timeout(REQUEST_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no TLS answer from {addr} within {REQUEST_TIMEOUT:?}"
            ))
        })
}

fn is_rejection(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
    )
}

/// `tcp.EchoSendOnce`: the welcome line, `TEST`, the pod of its JSON.
async fn tcp_echo_pod(addr: SocketAddr) -> Result<String, String> {
    let attempt = async {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("dialing TCP {addr}: {e}"))?;
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::new(read.take(64 * 1024));
        let mut welcome = String::new();
        reader
            .read_line(&mut welcome)
            .await
            .map_err(|e| format!("reading TCP welcome message: {e}"))?;
        if welcome != l4::WELCOME {
            return Err(format!("unexpected TCP welcome message: {welcome:?}"));
        }
        write
            .write_all(b"TEST\n")
            .await
            .map_err(|e| format!("writing TEST: {e}"))?;
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .await
            .map_err(|e| format!("reading TEST response: {e}"))?;
        pod_of(&line, "TCP")
    };
    tokio::time::timeout(REQUEST_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no TCP answer from {addr} within {REQUEST_TIMEOUT:?}"
            ))
        })
}

/// The test's `udpEchoSendOnce`: one datagram, the pod of the answer.
async fn udp_echo_pod(addr: SocketAddr) -> Result<String, String> {
    let attempt = async {
        let answer = l4::udp_round_trip(addr, UDP_WEIGHT_PROBE.as_bytes()).await?;
        pod_of(&String::from_utf8_lossy(&answer), "UDP")
    };
    // As the test: two seconds per datagram.
    tokio::time::timeout(std::time::Duration::from_secs(2), attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no UDP answer from {addr} within 2s")))
}

fn pod_of(answer: &str, what: &str) -> Result<String, String> {
    let json: Value = serde_json::from_str(answer)
        .map_err(|e| format!("decoding {what} echo response {answer:?}: {e}"))?;
    match json.get("pod").and_then(Value::as_str) {
        Some(pod) if !pod.is_empty() => Ok(pod.to_string()),
        _ => Err(format!("{what} echo response missing pod name: {answer:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(b, w)| (b.to_string(), *w)).collect()
    }

    fn pods(pairs: &[(&str, usize)]) -> Vec<String> {
        pairs
            .iter()
            .flat_map(|(pod, n)| std::iter::repeat_n(pod.to_string(), *n))
            .collect()
    }

    #[test]
    fn backend_names_drop_the_replica_set_and_pod_hashes() {
        assert_eq!(backend_name("tcp-backend-v1-5d8f-abcde"), "tcp-backend-v1");
        assert_eq!(backend_name("infra-backend-v2-7c9-x1"), "infra-backend-v2");
        assert_eq!(backend_name("a-b"), "a-b");
    }

    #[test]
    fn a_distribution_within_tolerance_passes() {
        let expected = weights(&[("v1", 0.7), ("v2", 0.3), ("v3", 0.0)]);
        let got = pods(&[("v1-a-b", 340), ("v2-a-b", 160)]);
        assert_eq!(distribution(&got, &expected), Ok(()));
    }

    #[test]
    fn a_share_off_by_more_than_five_percent_fails() {
        let expected = weights(&[("v1", 0.7), ("v2", 0.3), ("v3", 0.0)]);
        let got = pods(&[("v1-a-b", 250), ("v2-a-b", 250)]);
        let err = distribution(&got, &expected).unwrap_err();
        assert!(
            err.contains("backend \"v1\" weighted traffic of 0.5"),
            "{err}"
        );
        assert!(err.contains("backend \"v2\""), "{err}");
    }

    #[test]
    fn traffic_to_a_zero_weight_backend_fails() {
        let expected = weights(&[("v1", 0.7), ("v2", 0.3), ("v3", 0.0)]);
        let got = pods(&[("v1-a-b", 349), ("v2-a-b", 150), ("v3-a-b", 1)]);
        let err = distribution(&got, &expected).unwrap_err();
        assert!(
            err.contains("expected 2 backends to receive traffic, but got 3"),
            "{err}"
        );
    }

    #[test]
    fn an_unexpected_or_missing_backend_fails() {
        let expected = weights(&[("v1", 0.7), ("v2", 0.3)]);
        let err = distribution(&pods(&[("other-a-b", 1)]), &expected).unwrap_err();
        assert!(err.contains("unexpected pod"), "{err}");
        let err = distribution(&pods(&[("v1-a-b", 500)]), &expected).unwrap_err();
        assert!(err.contains("but none was received"), "{err}");
    }

    #[tokio::test]
    async fn a_closed_handshake_is_a_rejection_and_an_answer_is_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            // Reads the ClientHello and closes: a FIN during the handshake.
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buffer = [0u8; 512];
            let _ = stream.read(&mut buffer).await;
            drop(stream);
            // Answers with bytes that are no TLS record: not a rejection.
            let (mut stream, _) = listener.accept().await.unwrap();
            let _ = stream.read(&mut buffer).await;
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            let _ = stream.read(&mut buffer).await;
        });
        assert_eq!(tls_rejected(addr, "non.matching.com").await, Ok(()));
        let err = tls_rejected(addr, "non.matching.com").await.unwrap_err();
        assert!(err.contains("could not connect"), "{err}");
        server.abort();
    }
}
