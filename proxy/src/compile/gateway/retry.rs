//! An HTTPRoute rule's `retry` (GEP-1731) as the engines' retry policy
//! (`teapot_h1::retry`): `codes` are the statuses retried (400 to 599),
//! `attempts` the retries (so `attempts + 1` tries at most), `backoff` the
//! wait between tries; a connection error (connect refused or reset, the
//! backend closing before its answer) and a try running past
//! `timeouts.backendRequest` are retried whenever `retry` is set;
//! `timeouts.request` bounds all tries together (504 when spent).
//!
//! A rule asking more than teapot gives (more than
//! [`teapot_h1::retry::MAX_RETRIES`] retries, a backoff over
//! [`teapot_h1::retry::MAX_BACKOFF`], a code outside 400-599) is not
//! served, its route `PartiallyInvalid` with the field named: routes are
//! tenants' and a silent clamp would hide what the rule does.

use std::sync::Arc;
use std::time::Duration;

use teapot_gateway_api::generated::http_routes::HttpRouteRulesRetry;
use teapot_h1::RetryPolicy;
use teapot_h1::retry::{MAX_BACKOFF, MAX_RETRIES, RETRYABLE_CODES};

/// Retries when `attempts` is not given (the specification leaves it to
/// the implementation): one.
pub(super) const DEFAULT_RETRIES: u32 = 1;

/// The policy of a rule's `retry`, with its `timeouts.request` as the
/// budget of all tries; `None` without `retry`. `Err` names the field
/// teapot does not serve as written.
pub(super) fn policy(
    retry: Option<&HttpRouteRulesRetry>,
    request_timeout: Option<Duration>,
) -> Result<Option<Arc<RetryPolicy>>, String> {
    let Some(retry) = retry else {
        return Ok(None);
    };
    let retries = match retry.attempts {
        None => DEFAULT_RETRIES,
        Some(n) if n < 0 => return Err(format!("retry.attempts {n} is negative")),
        Some(n) if n > i64::from(MAX_RETRIES) => {
            return Err(format!(
                "retry.attempts {n} is more than the {MAX_RETRIES} retries teapot makes per request"
            ));
        }
        Some(n) => n as u32,
    };
    let mut policy = RetryPolicy::new(retries);
    for &code in retry.codes.iter().flatten() {
        let ok = u16::try_from(code).is_ok_and(|c| policy.retry_status(c));
        if !ok {
            return Err(format!(
                "retry.codes {code} is not a status from {} to {}",
                RETRYABLE_CODES.start(),
                RETRYABLE_CODES.end()
            ));
        }
    }
    if let Some(text) = &retry.backoff {
        let backoff = teapot_model::gateway::parse_duration(text)
            .map_err(|e| format!("retry.backoff: {e}"))?;
        if backoff > MAX_BACKOFF {
            return Err(format!(
                "retry.backoff {text} is longer than teapot's {}s",
                MAX_BACKOFF.as_secs()
            ));
        }
        policy = policy.with_backoff(backoff);
    }
    policy.on_error = true;
    policy.on_timeout = true;
    // The route owner listed what to retry; the request is sent again
    // only when teapot holds all of it (docs/reference.md, Retries).
    policy.any_method = true;
    policy.same_endpoint_again = true;
    // Retries spent on connection errors: 503, as the conformance tests
    // expect (500 or 503) and Envoy-based gateways answer.
    policy.connection_error_status = Some(503);
    Ok(Some(Arc::new(policy.with_budget(request_timeout))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(attempts: Option<i64>, codes: &[i64], backoff: Option<&str>) -> HttpRouteRulesRetry {
        HttpRouteRulesRetry {
            attempts,
            codes: Some(codes.to_vec()),
            backoff: backoff.map(Into::into),
        }
    }

    #[test]
    fn the_conformance_rules_read_as_the_specification_says() {
        let p = policy(Some(&retry(Some(3), &[500], None)), None)
            .unwrap()
            .unwrap();
        assert_eq!(p.retries(), 3);
        assert_eq!(p.statuses().collect::<Vec<_>>(), [500]);
        assert!(p.on_error && p.on_timeout && p.same_endpoint_again);
        assert_eq!(p.backoff(), Duration::ZERO);
        let p = policy(
            Some(&retry(Some(5), &[500], Some("100ms"))),
            Some(Duration::from_millis(400)),
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.budget(), Some(Duration::from_millis(400)));
        assert_eq!(p.backoff(), Duration::from_millis(100));
        // No codes: connection errors only; no attempts: one retry.
        let p = policy(Some(&retry(None, &[], None)), None)
            .unwrap()
            .unwrap();
        assert_eq!(p.retries(), DEFAULT_RETRIES);
        assert_eq!(p.statuses().count(), 0);
        assert!(policy(None, None).unwrap().is_none());
    }

    /// A tenant's route asking for more than the bounds is refused with
    /// the field named, never served with a silently different meaning.
    #[test]
    fn hostile_values_are_refused_naming_the_field() {
        let e = policy(Some(&retry(Some(1_000_000), &[], None)), None).unwrap_err();
        assert!(e.contains("retry.attempts 1000000"), "{e}");
        let e = policy(Some(&retry(Some(-1), &[], None)), None).unwrap_err();
        assert!(e.contains("retry.attempts"), "{e}");
        let e = policy(Some(&retry(Some(1), &[200], None)), None).unwrap_err();
        assert!(e.contains("retry.codes 200"), "{e}");
        let e = policy(Some(&retry(Some(1), &[70000], None)), None).unwrap_err();
        assert!(e.contains("retry.codes 70000"), "{e}");
        let e = policy(Some(&retry(Some(1), &[], Some("1h"))), None).unwrap_err();
        assert!(e.contains("retry.backoff 1h"), "{e}");
        let e = policy(Some(&retry(Some(1), &[], Some("soon"))), None).unwrap_err();
        assert!(e.contains("retry.backoff"), "{e}");
        // The bounds themselves are served.
        let p = policy(Some(&retry(Some(5), &[599], Some("10s"))), None)
            .unwrap()
            .unwrap();
        assert_eq!((p.retries(), p.backoff()), (5, Duration::from_secs(10)));
    }
}
