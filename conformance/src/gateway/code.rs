//! The checks upstream writes as code rather than as helper calls, which
//! `port.py` reads into cases of their own: a WebSocket dial whose
//! messages must come back (`websocket.Dial`, [`websocket`]), a DNS
//! exchange (`dns.Exchange`, [`dns`]), a loop of captured round trips
//! each judged on what the backend saw (`http.CaptureRoundTrip`), and, for
//! any HTTP case, the values
//! a test makes anew per attempt or per case (`per_attempt`, `per_case`:
//! echo-basic's retry simulation counts the attempts of each UUID).

use std::collections::BTreeMap;

use super::{Attempt, CONSECUTIVE_SUCCESSES, CaseContext, request_id};
use crate::gateway::data::Case;

#[path = "dns.rs"]
pub(super) mod dns;
#[path = "websocket.rs"]
mod websocket;

/// `websocket.Dial`: a WebSocket dial and its messages.
const WEBSOCKET: &str = "websocket.Dial";
/// `dns.Exchange`: one DNS query over UDP.
const DNS: &str = "dns.Exchange";
/// `rt.CaptureRoundTrip(req)` in a loop: requests judged on the echo.
const CAPTURE: &str = "http.CaptureRoundTrip";

impl CaseContext<'_> {
    /// A case of a check written as code, judged; None for any other case.
    pub(super) async fn run_code(&self, case: &Case) -> Option<Result<(), String>> {
        if ![WEBSOCKET, DNS, CAPTURE].contains(&case.helper.as_str()) {
            return None;
        }
        let unjudged = case.unjudged_fields();
        if !unjudged.is_empty() {
            return Some(Err(format!(
                "the case has fields this runner does not judge: {}",
                unjudged.join(", ")
            )));
        }
        let needed = match poll_successes(case) {
            Ok(needed) => needed,
            Err(e) => return Some(Err(e)),
        };
        Some(match case.helper.as_str() {
            WEBSOCKET => self.run_websocket(case, needed).await,
            CAPTURE => self.polled(needed, || self.run_captures(case)).await,
            _ => self.run_dns(case, needed).await,
        })
    }

    /// The loop of `arguments.repeat` captured round trips of the case's
    /// request (`http.MakeRequest`'s, at `arguments.scheme`), one after
    /// the other as the loop sends them, each judged as its body judges:
    /// the round trip succeeds (any status: the loop reads what the echo
    /// reported, and an answer that is not the echo's reports nothing),
    /// the request header `arguments.podPrefixHeader` reached the backend
    /// (once, with `arguments.oneValue`), and the pod that answered is
    /// named with its value as prefix. The first failure ends the loop, as
    /// `t.Fatalf` does.
    async fn run_captures(&self, case: &Case) -> Result<(), String> {
        let argument = |name: &str| {
            case.arguments
                .get(name)
                .ok_or_else(|| format!("arguments.{name} is missing"))
        };
        let repeat = argument("repeat")?
            .as_u64()
            .ok_or("arguments.repeat is not a count")?;
        let scheme = match argument("scheme")?.as_str() {
            Some("http") => "http",
            Some("https") => "https",
            other => return Err(format!("arguments.scheme {other:?} is not http or https")),
        };
        let header = argument("podPrefixHeader")?
            .as_str()
            .ok_or("arguments.podPrefixHeader is not a header name")?;
        let one_value = argument("oneValue")?.as_bool().unwrap_or(false);
        let case = per_case(case)?;
        let proto = super::protocol(&case.request.protocol, scheme)?;
        for n in 0..repeat {
            let exchange = self.round_trip(&case, scheme, proto).await.map_err(|e| {
                let (super::Attempt::Retry(e) | super::Attempt::Fatal(e)) = e;
                format!("request {n}: failed to roundtrip request: {e}")
            })?;
            judge_capture(&exchange.request, header, one_value)
                .map_err(|e| format!("request {n}: {e}"))?;
        }
        Ok(())
    }

    /// Runs `attempt` as the case's upstream poll does: until `needed`
    /// attempts in a row pass, within the case timeout; with no poll
    /// (`needed` None), once.
    async fn polled<F, Fut>(&self, needed: Option<usize>, mut attempt: F) -> Result<(), String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        match needed {
            None => attempt().await,
            Some(needed) => self
                .eventually(needed, move || {
                    let attempt = attempt();
                    async move { attempt.await.map_err(Attempt::Retry) }
                })
                .await
                .map(drop),
        }
    }
}

/// One captured request judged as the loop's body does: the values of the
/// request header `header` the backend saw (exactly one when `one_value`),
/// the first of which prefixes the pod's name.
fn judge_capture(
    captured: &crate::gateway::judge::CapturedRequest,
    header: &str,
    one_value: bool,
) -> Result<(), String> {
    let values: &[String] = captured
        .headers
        .as_ref()
        .and_then(|h| h.get(&header.to_ascii_lowercase()))
        .map(Vec::as_slice)
        .unwrap_or_default();
    if one_value && values.len() != 1 {
        return Err(format!(
            "expected a single {header:?} header to have been set, got {}",
            values.len()
        ));
    }
    let Some(prefix) = values.first() else {
        return Err(format!("no {header:?} header reached the backend"));
    };
    if !captured.pod.starts_with(prefix.as_str()) {
        return Err(format!(
            "the request went to pod {:?}, not one named {prefix:?}...",
            captured.pod
        ));
    }
    Ok(())
}

/// How many passing attempts in a row the upstream poll around the case
/// wants (`arguments.poll`): `http.AwaitConvergence` the suite's
/// RequiredConsecutiveSuccesses, the others' first pass; None without a
/// poll (the code runs once).
fn poll_successes(case: &Case) -> Result<Option<usize>, String> {
    let Some(poll) = case.arguments.get("poll") else {
        return Ok(None);
    };
    match poll.as_str().unwrap_or_default() {
        "http.AwaitConvergence" => Ok(Some(CONSECUTIVE_SUCCESSES)),
        "wait.PollUntilContextTimeout"
        | "wait.PollImmediate"
        | "assert.Eventually"
        | "require.Eventually" => Ok(Some(1)),
        other => Err(format!(
            "the poll {other:?} around the case is not supported by this runner"
        )),
    }
}

/// The case with its `per_case` placeholders filled, once; an unknown kind
/// of value (in either map) is an error naming it.
pub(super) fn per_case(case: &Case) -> Result<Case, String> {
    for kind in case.per_attempt.values().chain(case.per_case.values()) {
        if kind != "uuid" {
            return Err(format!(
                "a value of kind {kind:?} made by the test is not supported by this runner"
            ));
        }
    }
    Ok(fill(case, &case.per_case).unwrap_or_else(|| case.clone()))
}

/// The case for one attempt, its `per_attempt` placeholders filled with
/// new values; None when it has none.
pub(super) fn per_attempt(case: &Case) -> Option<Case> {
    fill(case, &case.per_attempt)
}

/// Every placeholder of `values` in the request's text replaced by a new
/// value of its kind (the same value wherever one placeholder appears, as
/// the test's variable is one value). Kinds were checked by [`per_case`].
fn fill(case: &Case, values: &BTreeMap<String, String>) -> Option<Case> {
    if values.is_empty() {
        return None;
    }
    let made: Vec<(&String, String)> = values.keys().map(|p| (p, request_id())).collect();
    let replace = |text: &mut String| {
        for (placeholder, value) in &made {
            if text.contains(placeholder.as_str()) {
                *text = text.replace(placeholder.as_str(), value);
            }
        }
    };
    let mut case = case.clone();
    let request = |r: &mut crate::gateway::data::Request| {
        replace(&mut r.path);
        replace(&mut r.host);
        for value in r.headers.iter_mut().flat_map(|h| h.values_mut()) {
            replace(value);
        }
    };
    request(&mut case.request);
    if let Some(expected) = &mut case.expected_request {
        request(&mut expected.request);
    }
    Some(case)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(json: &str) -> Case {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn fresh_values_are_new_per_attempt_and_one_within_it() {
        let c = case(
            r#"{"Request": {"Path": "/retry/x?succeedAfter=2&uuid={u}", "Headers": {"Id": "{u}"}},
                "per_attempt": {"{u}": "uuid"}, "helper": "http.MakeRequest", "protocol": "http"}"#,
        );
        assert!(c.unjudged_fields().is_empty());
        let same = per_case(&c).unwrap();
        assert_eq!(same.request.path, c.request.path);
        let first = per_attempt(&same).unwrap();
        let second = per_attempt(&same).unwrap();
        let id = first.request.path.rsplit('=').next().unwrap().to_string();
        assert_eq!(id.len(), 36, "{id}");
        assert!(!first.request.path.contains("{u}"));
        assert_eq!(first.request.headers.as_ref().unwrap()["Id"], id);
        assert_ne!(first.request.path, second.request.path);
        assert!(per_attempt(&case(r#"{"Request": {"Path": "/"}}"#)).is_none());
    }

    #[test]
    fn per_case_values_are_made_once_and_unknown_kinds_refused() {
        let c = case(r#"{"Request": {"Path": "/a/{n}"}, "per_case": {"{n}": "uuid"}}"#);
        let filled = per_case(&c).unwrap();
        assert!(!filled.request.path.contains("{n}"));
        assert!(per_attempt(&filled).is_none());
        let odd = case(r#"{"Request": {"Path": "/{n}"}, "per_attempt": {"{n}": "time"}}"#);
        assert!(per_case(&odd).unwrap_err().contains("\"time\""));
    }

    #[test]
    fn captures_are_judged_on_the_header_the_backend_saw() {
        let captured = |pod: &str, values: &[&str]| crate::gateway::judge::CapturedRequest {
            pod: pod.into(),
            headers: Some(BTreeMap::from([(
                "backend".to_string(),
                values.iter().map(|v| (*v).to_string()).collect(),
            )])),
            ..Default::default()
        };
        assert_eq!(
            judge_capture(
                &captured("infra-backend-v2-abc-1", &["infra-backend-v2"]),
                "Backend",
                true
            ),
            Ok(())
        );
        assert!(
            judge_capture(
                &captured("infra-backend-v1-abc-1", &["infra-backend-v2"]),
                "Backend",
                true
            )
            .unwrap_err()
            .contains("not one named \"infra-backend-v2\"")
        );
        assert!(
            judge_capture(
                &captured("infra-backend-v1-x", &["infra-backend-v1", "x"]),
                "Backend",
                true
            )
            .unwrap_err()
            .contains("got 2")
        );
        assert_eq!(
            judge_capture(
                &captured("infra-backend-v1-x", &["infra-backend-v1", "x"]),
                "Backend",
                false
            ),
            Ok(())
        );
        assert!(
            judge_capture(
                &crate::gateway::judge::CapturedRequest::default(),
                "Backend",
                false
            )
            .is_err()
        );
    }

    #[test]
    fn polls_are_known_by_name() {
        let with = |poll: &str| {
            case(&format!(
                r#"{{"helper": "dns.Exchange", "protocol": "udp", "arguments": {{"poll": "{poll}"}}}}"#
            ))
        };
        assert_eq!(
            poll_successes(&with("http.AwaitConvergence")),
            Ok(Some(CONSECUTIVE_SUCCESSES))
        );
        assert_eq!(
            poll_successes(&with("wait.PollUntilContextTimeout")),
            Ok(Some(1))
        );
        assert!(poll_successes(&with("retry.Do")).is_err());
        assert_eq!(poll_successes(&case("{}")), Ok(None));
    }
}
