//! echo-basic's retry simulation (`/retry/...` in
//! kubernetes-sigs/gateway-api-conformance-images `echo-basic.go`), with
//! which the Gateway API conformance tests judge a route's retries: a
//! request names itself with `uuid`, and its first `succeedAfter` attempts
//! fail, each after `delayRetry` (a Go duration) when given, with the
//! status `responseCode` when given, else by the connection closing
//! without an answer (echo-basic resets it; either is a connection error
//! to the proxy). Later attempts are echoed as any request.
//!
//! A missing `uuid` or an unreadable `succeedAfter` is a 400, an
//! unreadable `delayRetry` a 500 with `{"message": ...}`, as echo-basic
//! answers. echo-basic holds one lock across all ids while a failing
//! attempt waits out its delay; here the count is taken under the lock
//! and the wait is each attempt's own, so attempts of other ids (the
//! suite's concurrent cases) do not queue behind it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;

use super::{MAX_DELAY, Shared, echo_basic_error, go_duration, query_value, text};

/// Ids remembered at most; past it the counts start over (a test run
/// makes a few hundred).
const MAX_IDS: usize = 100_000;

/// The attempts seen per `uuid`.
#[derive(Debug, Default)]
pub(crate) struct Retries(Mutex<HashMap<String, u64>>);

/// What the simulation does with a request under `/retry/`.
pub(crate) enum Step {
    /// Answer with this (a failing status, or a refusal).
    Answer(Response<Full<Bytes>>),
    /// Close the connection without an answer.
    Drop,
    /// Echo the request as any other.
    Echo,
}

/// The connection ends without an answer: the service's error, on which
/// hyper closes it.
#[derive(Debug)]
pub(crate) struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("retry simulation: the attempt fails without an answer")
    }
}

impl std::error::Error for Dropped {}

/// The simulation's answer to a request of an echo-basic server under
/// `/retry/`: `Err` closes the connection; None echoes the request (any
/// other path, or an attempt past `succeedAfter`).
pub(crate) async fn simulate<B>(
    request: &http::Request<B>,
    shared: &Shared,
) -> Option<Result<Response<Full<Bytes>>, Dropped>> {
    if !shared.extras.echo_basic || !request.uri().path().starts_with("/retry/") {
        return None;
    }
    let query = request.uri().query().unwrap_or_default();
    let answer = match shared.extras.retries.attempt(query).await {
        Step::Echo => return None,
        Step::Answer(response) => Ok(response),
        Step::Drop => Err(Dropped),
    };
    // A failing attempt is a request served, as an echoed one is.
    shared.requests.fetch_add(1, Ordering::Relaxed);
    Some(answer)
}

impl Retries {
    /// The step for a request with this query string.
    pub(crate) async fn attempt(&self, query: &str) -> Step {
        let uuid = query_value(query, "uuid").unwrap_or_default();
        if uuid.is_empty() {
            return Step::Answer(text(StatusCode::BAD_REQUEST, "uuid is required"));
        }
        let Some(succeed_after) =
            query_value(query, "succeedAfter").and_then(|v| v.parse::<u64>().ok())
        else {
            return Step::Answer(text(StatusCode::BAD_REQUEST, "succeedAfter is required"));
        };
        let failing = {
            let mut attempts = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if attempts.len() >= MAX_IDS && !attempts.contains_key(&uuid) {
                attempts.clear();
            }
            let seen = attempts.entry(uuid).or_default();
            let failing = *seen < succeed_after;
            if failing {
                *seen += 1;
            }
            failing
        };
        if !failing {
            return Step::Echo;
        }
        if let Some(delay) = query_value(query, "delayRetry").filter(|d| !d.is_empty()) {
            match go_duration(&delay) {
                Ok(wait) => tokio::time::sleep(wait.min(MAX_DELAY)).await,
                Err(msg) => return Step::Answer(echo_basic_error(&msg)),
            }
        }
        let code = query_value(query, "responseCode").and_then(|c| c.parse::<u16>().ok());
        match code.map(StatusCode::from_u16) {
            Some(Ok(status)) => {
                let mut response = Response::new(Full::default());
                *response.status_mut() = status;
                Step::Answer(response)
            }
            // echo-basic writes whatever number it read; one that is no
            // status at all fails the attempt as a broken answer would.
            Some(Err(_)) => Step::Drop,
            None => Step::Drop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(step: &Step) -> Option<u16> {
        match step {
            Step::Answer(r) => Some(r.status().as_u16()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn the_first_attempts_fail_then_the_request_is_echoed() {
        let retries = Retries::default();
        let q = "responseCode=503&succeedAfter=2&uuid=a";
        assert_eq!(status(&retries.attempt(q).await), Some(503));
        assert_eq!(status(&retries.attempt(q).await), Some(503));
        assert!(matches!(retries.attempt(q).await, Step::Echo));
        // Another id counts on its own; without a code the connection drops.
        let other = "succeedAfter=1&uuid=b";
        assert!(matches!(retries.attempt(other).await, Step::Drop));
        assert!(matches!(retries.attempt(other).await, Step::Echo));
    }

    #[tokio::test]
    async fn an_echo_basic_server_closes_a_failing_attempt_and_echoes_the_next() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let server =
            crate::EchoServer::start_echo_basic(crate::EchoIdentity::new("ns", "", "s", "p"))
                .await
                .unwrap();
        let request = b"GET /retry/x?succeedAfter=1&uuid=z HTTP/1.1\r\nHost: h\r\n\r\n";
        let mut answers = Vec::new();
        for _ in 0..2 {
            let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
            stream.write_all(request).await.unwrap();
            let mut answer = Vec::new();
            let mut chunk = [0u8; 4096];
            // The echo keeps the connection: read until the JSON body ends.
            while !answer.ends_with(b"}") {
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => answer.extend_from_slice(&chunk[..n]),
                }
            }
            answers.push(String::from_utf8_lossy(&answer).into_owned());
        }
        assert_eq!(answers[0], "", "the first attempt gets no answer");
        assert!(answers[1].starts_with("HTTP/1.1 200"), "{}", answers[1]);
        assert!(
            answers[1].contains("\"path\":\"/retry/x?succeedAfter=1&uuid=z\""),
            "{}",
            answers[1]
        );
        assert_eq!(server.requests(), 2);
        server.stop().await;
    }

    #[tokio::test]
    async fn refusals_as_echo_basic_answers_them() {
        let retries = Retries::default();
        assert_eq!(status(&retries.attempt("succeedAfter=1").await), Some(400));
        assert_eq!(status(&retries.attempt("uuid=x").await), Some(400));
        assert_eq!(
            status(
                &retries
                    .attempt("uuid=x&succeedAfter=1&delayRetry=soon")
                    .await
            ),
            Some(500)
        );
    }

    #[tokio::test]
    async fn a_failing_attempt_waits_its_delay() {
        let retries = Retries::default();
        let start = tokio::time::Instant::now();
        let q = "responseCode=500&succeedAfter=1&delayRetry=300ms&uuid=c";
        assert_eq!(status(&retries.attempt(q).await), Some(500));
        assert!(start.elapsed() >= std::time::Duration::from_millis(300));
        assert!(matches!(retries.attempt(q).await, Step::Echo));
    }
}
