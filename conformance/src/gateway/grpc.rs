//! gRPC for the GRPCRoute tests: echo-basic's gRPC echo
//! (`GRPC_ECHO_SERVER`, service `gateway_api_conformance.echo_basic.grpcecho.GrpcEcho`
//! of `grpcecho.proto` in kubernetes-sigs/gateway-api-conformance-images),
//! a client that makes the upstream `grpc.DefaultClient`'s unary calls over
//! h2c, and `compareResponse` (`conformance/utils/grpc/grpc.go`).
//!
//! The messages are small and fixed, so they are encoded and decoded by
//! hand (protobuf wire format: varint keys, length-delimited strings and
//! messages); no code generation is involved.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use teapot_testkit::echo::EchoIdentity;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use super::data::Case;

/// The echo service's package and name.
pub const SERVICE: &str = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";

/// `codes.Code` names, by number.
const CODES: &[&str] = &[
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

const UNIMPLEMENTED: u32 = 12;
const INTERNAL: u32 = 13;

/// A code's name (`Unimplemented`), or its number for unknown ones.
pub fn code_name(code: u32) -> String {
    usize::try_from(code)
        .ok()
        .and_then(|i| CODES.get(i))
        .map_or_else(|| format!("Code({code})"), |n| (*n).to_string())
}

/// `codes.Unimplemented`, `Unimplemented` or a number.
pub fn parse_code(value: &serde_json::Value) -> Result<u32, String> {
    if let Some(n) = value.as_u64() {
        return u32::try_from(n).map_err(|_| format!("gRPC code {n} out of range"));
    }
    let text = value.as_str().unwrap_or_default();
    let name = text.strip_prefix("codes.").unwrap_or(text);
    CODES
        .iter()
        .position(|c| *c == name)
        .and_then(|i| u32::try_from(i).ok())
        .ok_or_else(|| format!("unknown gRPC code {value}"))
}

/// What a gRPC case asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcCase {
    /// `Echo`, `EchoTwo` or `EchoThree`.
    pub method: String,
    /// `:authority`; empty for the client's default (the Gateway address).
    pub authority: String,
    /// Metadata (lower-case keys, as `metadata.New`).
    pub metadata: BTreeMap<String, String>,
    pub code: u32,
    pub backend: String,
    pub namespace: String,
}

impl GrpcCase {
    /// Reads the gRPC fields of a ported `grpc.ExpectedResponse`.
    pub fn from_case(case: &Case) -> Result<GrpcCase, String> {
        let present = |key: &str| case.other.get(key).is_some_and(|v| !v.is_null());
        let methods: Vec<&str> = [
            ("EchoRequest", "Echo"),
            ("EchoTwoRequest", "EchoTwo"),
            ("EchoThreeRequest", "EchoThree"),
        ]
        .into_iter()
        .filter(|(key, _)| present(key))
        .map(|(_, method)| method)
        .collect();
        let [method] = methods.as_slice() else {
            return Err(format!(
                "expected only one request type to be set, but found {}",
                methods.len()
            ));
        };
        let metadata_value = case.other.get("RequestMetadata");
        let authority = metadata_value
            .and_then(|m| m.get("Authority"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string();
        let metadata = metadata_value
            .and_then(|m| m.get("Metadata"))
            .and_then(serde_json::Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        (
                            k.to_ascii_lowercase(),
                            v.as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let code = match &case.response.code {
            None => 0,
            Some(value) => parse_code(value)?,
        };
        Ok(GrpcCase {
            method: (*method).to_string(),
            authority,
            metadata,
            code,
            backend: case.backend.clone(),
            namespace: case.namespace.clone(),
        })
    }

    /// `/package.Service/Method`.
    pub fn fully_qualified_method(&self) -> String {
        format!("/{SERVICE}/{}", self.method)
    }

    /// The upstream sub-test name (`grpc.ExpectedResponse.GetTestCaseName`).
    pub fn name(&self, index: usize, test_case_name: &str) -> String {
        if !test_case_name.is_empty() {
            return test_case_name.to_string();
        }
        let headers = if self.metadata.is_empty() {
            String::new()
        } else {
            let pairs: Vec<String> = self
                .metadata
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            format!(" with headers '{{{}}}'", pairs.join(","))
        };
        let request = format!(
            "{index} request to '{}{}'{headers}",
            self.authority,
            self.fully_qualified_method()
        );
        if self.backend.is_empty() {
            format!(
                "{request} should receive a {} ({})",
                code_name(self.code),
                self.code
            )
        } else {
            format!("{request} should go to {}", self.backend)
        }
    }
}

/// What came back from one call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrpcResponse {
    pub code: u32,
    pub message: String,
    /// From `EchoResponse.assertions`.
    pub fully_qualified_method: String,
    pub namespace: String,
    pub pod: String,
}

/// `compareResponse`.
pub fn compare(expected: &GrpcCase, got: &GrpcResponse) -> Result<(), String> {
    if expected.code != got.code {
        return Err(format!(
            "expected status code to be {} ({}), but got {} ({}){}",
            code_name(expected.code),
            expected.code,
            code_name(got.code),
            got.code,
            if got.message.is_empty() {
                String::new()
            } else {
                format!(": {}", got.message)
            }
        ));
    }
    if got.code == 0 {
        let method = expected.fully_qualified_method();
        if method != got.fully_qualified_method {
            return Err(format!(
                "expected path to be {method}, got {}",
                got.fully_qualified_method
            ));
        }
        if !expected.namespace.is_empty() && expected.namespace != got.namespace {
            return Err(format!(
                "expected namespace to be {}, got {}",
                expected.namespace, got.namespace
            ));
        }
        if !got.pod.starts_with(&expected.backend) {
            return Err(format!(
                "expected pod name to start with {}, got {}",
                expected.backend, got.pod
            ));
        }
    }
    Ok(())
}

/// One unary call over a fresh h2c connection to `addr`.
pub async fn call(
    addr: SocketAddr,
    default_authority: &str,
    case: &GrpcCase,
    timeout: Duration,
) -> Result<GrpcResponse, String> {
    tokio::time::timeout(timeout, call_inner(addr, default_authority, case))
        .await
        .map_err(|_| format!("the RPC via {addr} got no answer within {timeout:?}"))?
}

async fn call_inner(
    addr: SocketAddr,
    default_authority: &str,
    case: &GrpcCase,
) -> Result<GrpcResponse, String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .map_err(|e| format!("h2c handshake with {addr}: {e}"))?;
    let driver = tokio::spawn(connection);
    let authority = if case.authority.is_empty() {
        default_authority
    } else {
        case.authority.as_str()
    };
    let mut request = Request::builder()
        .method("POST")
        .uri(format!(
            "http://{authority}{}",
            case.fully_qualified_method()
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", "grpc-go/teapot-gateway-conformance");
    for (key, value) in &case.metadata {
        request = request.header(key.as_str(), value.as_str());
    }
    // An empty `EchoRequest`: an uncompressed frame of length 0.
    let request = request
        .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))
        .map_err(|e| format!("building the RPC: {e}"))?;
    let result = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("the RPC via {addr} failed: {e}"))?;
        let (parts, body) = response.into_parts();
        let collected = body
            .collect()
            .await
            .map_err(|e| format!("reading the RPC's answer via {addr}: {e}"))?;
        let trailers = collected.trailers().cloned().unwrap_or_default();
        let data = collected.to_bytes();
        Ok::<_, String>(read_response(
            parts.status,
            &parts.headers,
            &trailers,
            &data,
        ))
    }
    .await;
    driver.abort();
    result?
}

/// The status as grpc-go derives it: `grpc-status` from the trailers (or a
/// trailers-only answer's headers), else from the HTTP status.
fn read_response(
    status: StatusCode,
    headers: &HeaderMap,
    trailers: &HeaderMap,
    data: &[u8],
) -> Result<GrpcResponse, String> {
    let grpc_status = trailers
        .get("grpc-status")
        .or_else(|| headers.get("grpc-status"))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok());
    let message = trailers
        .get("grpc-message")
        .or_else(|| headers.get("grpc-message"))
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let code = match grpc_status {
        Some(code) => code,
        None if status != StatusCode::OK => {
            // grpc-go's HTTPStatusConvTab.
            let code = match status.as_u16() {
                400 => INTERNAL,
                401 => 16,
                403 => 7,
                404 => UNIMPLEMENTED,
                429 | 502 | 503 | 504 => 14,
                _ => 2,
            };
            return Ok(GrpcResponse {
                code,
                message: format!("unexpected HTTP status code {status}"),
                ..GrpcResponse::default()
            });
        }
        None => {
            return Ok(GrpcResponse {
                code: INTERNAL,
                message: "server closed the stream without sending trailers".into(),
                ..GrpcResponse::default()
            });
        }
    };
    let mut response = GrpcResponse {
        code,
        message,
        ..GrpcResponse::default()
    };
    if code == 0 {
        let message = unframe(data)?;
        decode_echo_response(message, &mut response)?;
    }
    Ok(response)
}

/// The one message of a unary answer (5-byte prefix: compressed flag and
/// big-endian length).
fn unframe(data: &[u8]) -> Result<&[u8], String> {
    let (prefix, rest) = data
        .split_at_checked(5)
        .ok_or("the RPC's answer has no message")?;
    if prefix[0] != 0 {
        return Err("the RPC's answer is compressed".into());
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    rest.get(..len)
        .ok_or_else(|| "the RPC's answer is shorter than its frame says".to_string())
}

fn decode_echo_response(message: &[u8], out: &mut GrpcResponse) -> Result<(), String> {
    for (field, value) in fields(message)? {
        if field == 1 {
            for (field, value) in fields(value)? {
                match field {
                    1 => out.fully_qualified_method = utf8(value),
                    4 => {
                        for (field, value) in fields(value)? {
                            match field {
                                1 => out.namespace = utf8(value),
                                4 => out.pod = utf8(value),
                                _ => {}
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

fn utf8(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The length-delimited fields of a message (others are skipped).
fn fields(mut message: &[u8]) -> Result<Vec<(u64, &[u8])>, String> {
    let mut out = Vec::new();
    while !message.is_empty() {
        let key = varint(&mut message)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                varint(&mut message)?;
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                message = message.get(n..).ok_or("truncated fixed-size field")?;
            }
            2 => {
                let len = usize::try_from(varint(&mut message)?).map_err(|e| e.to_string())?;
                let value = message
                    .get(..len)
                    .ok_or("truncated length-delimited field")?;
                out.push((field, value));
                message = &message[len..];
            }
            other => return Err(format!("unsupported protobuf wire type {other}")),
        }
    }
    Ok(out)
}

fn varint(input: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = input.split_first().ok_or("truncated varint")?;
        *input = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint too long".into())
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A length-delimited field; empty strings are left out, as proto3 does.
fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8], always: bool) {
    if bytes.is_empty() && !always {
        return;
    }
    put_varint(out, (field << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// echo-basic's `EchoResponse` for one request.
fn encode_echo_response(
    method: &str,
    headers: &HeaderMap,
    authority: &str,
    identity: &EchoIdentity,
) -> Vec<u8> {
    let mut context = Vec::new();
    put_bytes(&mut context, 1, identity.namespace.as_bytes(), false);
    put_bytes(&mut context, 2, identity.ingress.as_bytes(), false);
    put_bytes(&mut context, 3, identity.service.as_bytes(), false);
    put_bytes(&mut context, 4, identity.pod.as_bytes(), false);
    let mut assertions = Vec::new();
    put_bytes(&mut assertions, 1, method.as_bytes(), false);
    for (name, value) in headers {
        let mut header = Vec::new();
        put_bytes(&mut header, 1, name.as_str().as_bytes(), false);
        put_bytes(&mut header, 2, value.as_bytes(), false);
        put_bytes(&mut assertions, 2, &header, true);
    }
    put_bytes(&mut assertions, 3, authority.as_bytes(), false);
    put_bytes(&mut assertions, 4, &context, true);
    let mut response = Vec::new();
    put_bytes(&mut response, 1, &assertions, true);
    put_bytes(&mut response, 2, &[], true);
    response
}

/// echo-basic in gRPC mode on the pod's address at a random port, h2c: `Echo`
/// and `EchoTwo` answer with the assertions, anything else is
/// `Unimplemented`; with a TLS configuration (echo-basic's
/// `TLS_SERVER_CERT`), the same over TLS on a second port. Dropping it
/// stops it and its connections.
#[derive(Debug)]
pub struct GrpcEchoServer {
    addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

impl GrpcEchoServer {
    pub async fn start(
        ip: std::net::IpAddr,
        identity: EchoIdentity,
        tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    ) -> std::io::Result<GrpcEchoServer> {
        let identity = std::sync::Arc::new(identity);
        let (addr, plain) = serve(ip, identity.clone(), None).await?;
        let mut server = GrpcEchoServer {
            addr,
            tls_addr: None,
            tasks: vec![plain],
        };
        if let Some(config) = tls {
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            let (addr, task) = serve(ip, identity, Some(acceptor)).await?;
            server.tls_addr = Some(addr);
            server.tasks.push(task);
        }
        Ok(server)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The TLS listener's address, when it has one.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }
}

/// One listener answering gRPC over HTTP/2, in cleartext or over TLS.
async fn serve(
    ip: std::net::IpAddr,
    identity: std::sync::Arc<EchoIdentity>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind((ip, 0)).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        // Dropped with the task: aborting the server closes every connection.
        let mut connections = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let identity = identity.clone();
            let tls = tls.clone();
            connections.spawn(async move {
                let service = service_fn(move |req| {
                    let identity = identity.clone();
                    async move { Ok::<_, Infallible>(answer(&req, &identity)) }
                });
                let builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                match tls {
                    None => {
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            let _ = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                    }
                }
            });
        }
    });
    Ok((addr, task))
}

impl Drop for GrpcEchoServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

type GrpcBody =
    StreamBody<futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

fn answer(req: &Request<Incoming>, identity: &EchoIdentity) -> Response<GrpcBody> {
    let method = req.uri().path().to_string();
    let known = [format!("/{SERVICE}/Echo"), format!("/{SERVICE}/EchoTwo")];
    let mut frames = Vec::new();
    let mut response_headers = HeaderMap::new();
    response_headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    if known.contains(&method) {
        let authority = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let message = encode_echo_response(&method, req.headers(), &authority, identity);
        let mut data = vec![0u8];
        data.extend_from_slice(&(message.len() as u32).to_be_bytes());
        data.extend_from_slice(&message);
        frames.push(Ok(Frame::data(Bytes::from(data))));
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        frames.push(Ok(Frame::trailers(trailers)));
    } else {
        // Trailers-only, as grpc-go answers an unknown method.
        response_headers.insert("grpc-status", HeaderValue::from_static("12"));
        response_headers.insert("grpc-message", HeaderValue::from_static("unknown method"));
    }
    let mut response = Response::new(StreamBody::new(futures::stream::iter(frames)));
    *response.headers_mut() = response_headers;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(json: &str) -> Case {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn reads_ported_grpc_cases() {
        let c = GrpcCase::from_case(&case(
            r#"{"Backend": "grpc-infra-backend-v1", "EchoRequest": [], "Namespace": "ns",
                "RequestMetadata": {"Authority": "bar.com", "Metadata": {"Version": "one", "Color": "red"}},
                "helper": "grpc.MakeRequestAndExpectEventuallyConsistentResponse", "protocol": "grpc"}"#,
        ))
        .unwrap();
        assert_eq!(c.method, "Echo");
        assert_eq!(c.authority, "bar.com");
        assert_eq!(c.code, 0);
        assert_eq!(
            c.name(3, ""),
            "3 request to 'bar.com/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho/Echo' with headers '{color:red,version:one}' should go to grpc-infra-backend-v1"
        );
        let c = GrpcCase::from_case(&case(
            r#"{"EchoThreeRequest": [], "Response": {"Code": "codes.Unimplemented"}, "protocol": "grpc"}"#,
        ))
        .unwrap();
        assert_eq!((c.method.as_str(), c.code), ("EchoThree", 12));
        assert_eq!(
            c.name(0, ""),
            "0 request to '/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho/EchoThree' should receive a Unimplemented (12)"
        );
        assert!(
            GrpcCase::from_case(&case(r#"{"EchoRequest": [], "EchoTwoRequest": []}"#))
                .unwrap_err()
                .contains("found 2")
        );
        assert!(
            GrpcCase::from_case(&case(
                r#"{"EchoRequest": [], "Response": {"Code": "codes.Nope"}}"#
            ))
            .is_err()
        );
        assert_eq!(parse_code(&serde_json::json!(14)).unwrap(), 14);
        assert_eq!(code_name(99), "Code(99)");
    }

    /// GRPCRouteWeight's weighted distribution is ported with its gRPC
    /// sender: each sample is the test's `Echo` call, expected OK.
    #[test]
    fn the_weighted_distribution_samples_with_the_grpc_echo() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("gateway/data/GRPCRouteWeight.json");
        let test = crate::gateway::data::TestFile::load(&path).unwrap();
        let weights = test
            .cases
            .iter()
            .find(|c| c.helper == "weight.TestWeightedDistribution")
            .expect("the weighted distribution is a ported case");
        assert_eq!(weights.protocol, "grpc");
        assert_eq!(weights.arguments["sender"], "grpc.SendRPC");
        assert_eq!(
            weights.arguments["expectedWeights"]["grpc-infra-backend-v1"],
            0.7
        );
        assert!(weights.unjudged_fields().is_empty());
        let sample = GrpcCase::from_case(weights).unwrap();
        assert_eq!((sample.method.as_str(), sample.code), ("Echo", 0));
        assert_eq!(sample.namespace, "gateway-conformance-infra");
    }

    #[test]
    fn echo_response_round_trips_and_is_judged() {
        let identity = EchoIdentity::new("ns", "", "svc", "grpc-infra-backend-v1-abc-x");
        let mut headers = HeaderMap::new();
        headers.insert("version", HeaderValue::from_static("one"));
        let method = format!("/{SERVICE}/Echo");
        let message = encode_echo_response(&method, &headers, "bar.com", &identity);
        let mut data = vec![0u8];
        data.extend_from_slice(&(message.len() as u32).to_be_bytes());
        data.extend_from_slice(&message);
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let got = read_response(StatusCode::OK, &HeaderMap::new(), &trailers, &data).unwrap();
        assert_eq!(got.fully_qualified_method, method);
        assert_eq!(got.namespace, "ns");
        assert_eq!(got.pod, "grpc-infra-backend-v1-abc-x");

        let mut expected = GrpcCase {
            method: "Echo".into(),
            authority: String::new(),
            metadata: BTreeMap::new(),
            code: 0,
            backend: "grpc-infra-backend-v1".into(),
            namespace: "ns".into(),
        };
        assert_eq!(compare(&expected, &got), Ok(()));
        expected.backend = "grpc-infra-backend-v2".into();
        assert!(
            compare(&expected, &got)
                .unwrap_err()
                .contains("pod name to start with grpc-infra-backend-v2")
        );
        expected.method = "EchoTwo".into();
        assert!(
            compare(&expected, &got)
                .unwrap_err()
                .contains("expected path to be")
        );
        expected.code = 12;
        assert_eq!(
            compare(&expected, &got).unwrap_err(),
            "expected status code to be Unimplemented (12), but got OK (0)"
        );
    }

    #[test]
    fn statuses_without_grpc_status_map_like_grpc_go() {
        let none = HeaderMap::new();
        let code = |status: u16| {
            read_response(StatusCode::from_u16(status).unwrap(), &none, &none, &[])
                .unwrap()
                .code
        };
        assert_eq!(code(404), 12);
        assert_eq!(code(503), 14);
        assert_eq!(code(500), 2);
        assert_eq!(code(200), 13);
        let mut headers = HeaderMap::new();
        headers.insert("grpc-status", HeaderValue::from_static("12"));
        assert_eq!(
            read_response(StatusCode::OK, &headers, &none, &[])
                .unwrap()
                .code,
            12
        );
        assert!(unframe(&[0, 0, 0, 0, 9, 1]).is_err());
        assert!(unframe(&[1, 0, 0, 0, 0]).is_err());
    }

    #[tokio::test]
    async fn the_echo_answers_the_client() {
        let server = GrpcEchoServer::start(
            std::net::Ipv4Addr::LOCALHOST.into(),
            EchoIdentity::new("ns", "", "svc", "pod-1"),
            None,
        )
        .await
        .unwrap();
        let mut case = GrpcCase {
            method: "EchoTwo".into(),
            authority: "foo.example".into(),
            metadata: BTreeMap::from([("version".to_string(), "two".to_string())]),
            code: 0,
            backend: "pod".into(),
            namespace: "ns".into(),
        };
        let got = call(server.addr(), "127.0.0.1:80", &case, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(compare(&case, &got), Ok(()), "{got:?}");
        case.method = "EchoThree".into();
        let got = call(server.addr(), "127.0.0.1:80", &case, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(got.code, 12);
    }
}
