//! Basic authentication on the request path (a route's
//! [`BasicAuth`], crate::compile::basic_auth), after the route's other
//! policy answers (crate::plane::traffic) and before its `auth-url`
//! sub-request, as nginx's `auth_basic` runs in the access phase:
//!
//! - no `Authorization: Basic` field, or one that does not decode: 401
//!   with `WWW-Authenticate: Basic realm="..."`, nothing counted;
//! - a credential verified within the cache's time: forwarded (two keyed
//!   hashes and a lookup, crate::live::basic_auth);
//! - a client or owner past its failures: 429 with `Retry-After`, nothing
//!   hashed;
//! - an unknown user: 401, counted as a failure, nothing hashed;
//! - else the password is checked (bcrypt and MD5-crypt on the owner's
//!   places of the hashing pool: 503 when they are all taken): 401 and a
//!   failure, or forwarded and remembered.
//!
//! The client's `Authorization` goes on to the backend, as nginx passes
//! it. A setting that could not be compiled answers 503.

use std::net::IpAddr;
use std::sync::Arc;

use base64::Engine;

use super::TrafficAnswer;
use crate::compile::basic_auth::BasicAuth;
use crate::live::basic_auth::{Refused, credential_key};

pub const UNAUTHORIZED_BODY: &str = "401 authorization required\n";
pub const TOO_MANY_FAILURES_BODY: &str =
    "429 too many failed sign-ins from this client for this route\n";
pub const BUSY_BODY: &str = "503 too many sign-ins being checked for this route\n";
pub const UNAVAILABLE_BODY: &str = "503 this route's sign-in is not available\n";

/// Longest `Authorization` value read: a user and password of a few
/// hundred bytes each; anything longer is answered 401 undecoded.
pub const MAX_AUTHORIZATION: usize = 4096;

/// The user and password of an `Authorization: Basic` value.
pub fn credentials(value: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    if value.len() > MAX_AUTHORIZATION {
        return None;
    }
    let value = value.trim_ascii();
    let (scheme, token) = value.split_at(value.iter().position(|b| *b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim_ascii())
        .ok()?;
    let colon = decoded.iter().position(|b| *b == b':')?;
    let (user, password) = decoded.split_at(colon);
    Some((user.to_vec(), password[1..].to_vec()))
}

fn unauthorized(auth: &BasicAuth, reason: &'static str) -> TrafficAnswer {
    TrafficAnswer {
        status: 401,
        reason,
        body: UNAUTHORIZED_BODY,
        headers: vec![("www-authenticate", auth.challenge.to_string())],
    }
}

/// The verdict for a request carrying `authorization` (its first such
/// field) from `client`.
pub async fn check(
    auth: &Arc<BasicAuth>,
    authorization: Option<&[u8]>,
    client: Option<IpAddr>,
) -> Result<(), TrafficAnswer> {
    if auth.refused.is_some() {
        return Err(TrafficAnswer {
            status: 503,
            reason: "basic_auth_unavailable",
            body: UNAVAILABLE_BODY,
            headers: Vec::new(),
        });
    }
    let Some((user, password)) = authorization.and_then(credentials) else {
        return Err(unauthorized(auth, "basic_auth_required"));
    };
    let key = credential_key(auth.id, &user, &password);
    let tenant = &auth.tenant;
    if tenant.cached(key) {
        return Ok(());
    }
    if let Err(Refused::TooManyFailures(seconds)) = tenant.admits(client) {
        return Err(TrafficAnswer {
            status: 429,
            reason: "basic_auth_failures_limited",
            body: TOO_MANY_FAILURES_BODY,
            headers: vec![("retry-after", seconds.to_string())],
        });
    }
    let Some(credential) = std::str::from_utf8(&user)
        .ok()
        .and_then(|u| auth.users.get(u))
    else {
        tenant.failed(client);
        return Err(unauthorized(auth, "basic_auth_failed"));
    };
    let verified = if credential.costly() {
        let (auth, user) = (auth.clone(), String::from_utf8_lossy(&user).into_owned());
        let checked = tenant
            .run(move || {
                auth.users
                    .get(user.as_str())
                    .is_some_and(|c| c.verify(&password))
            })
            .await;
        match checked {
            Ok(verified) => verified,
            Err(_) => {
                return Err(TrafficAnswer {
                    status: 503,
                    reason: "basic_auth_busy",
                    body: BUSY_BODY,
                    headers: Vec::new(),
                });
            }
        }
    } else {
        credential.verify(&password)
    };
    if verified {
        tenant.remember(key);
        Ok(())
    } else {
        tenant.failed(client);
        Err(unauthorized(auth, "basic_auth_failed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::basic_auth::{CLIENT_FAILURES, QUEUE_SLOTS};
    use crate::plane::traffic::Applied;
    use teapot_api::htpasswd::parse_file;

    fn basic(user: &str, password: &str) -> Vec<u8> {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {token}").into_bytes()
    }

    fn setting(lines: &str, owner: &str) -> Arc<BasicAuth> {
        Arc::new(BasicAuth::new(
            &parse_file(lines.as_bytes()).unwrap(),
            "Staff",
            owner,
        ))
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn credentials_decode_as_rfc_7617() {
        assert_eq!(
            credentials(&basic("alice", "pa:ss")),
            Some((b"alice".to_vec(), b"pa:ss".to_vec()))
        );
        assert_eq!(
            credentials(b"basic YWxpY2U6cHc="),
            Some((b"alice".to_vec(), b"pw".to_vec()))
        );
        assert_eq!(credentials(b"Bearer YWxpY2U6cHc="), None);
        assert_eq!(credentials(b"Basic !!!"), None);
        assert_eq!(credentials(b"Basic bm9jb2xvbg=="), None);
        let long = basic("alice", &"x".repeat(MAX_AUTHORIZATION));
        assert_eq!(credentials(&long), None);
    }

    #[tokio::test]
    async fn answers_with_the_realm_and_forwards_the_right_password() {
        let auth = setting("alice:{PLAIN}s3cret\n", "answers-test");
        let client = ip("192.0.2.1");
        let none = check(&auth, None, client).await.unwrap_err();
        assert_eq!((none.status, none.reason), (401, "basic_auth_required"));
        assert_eq!(
            none.headers,
            [("www-authenticate", "Basic realm=\"Staff\"".to_string())]
        );
        let wrong = check(&auth, Some(&basic("alice", "nope")), client)
            .await
            .unwrap_err();
        assert_eq!((wrong.status, wrong.reason), (401, "basic_auth_failed"));
        let unknown = check(&auth, Some(&basic("mallory", "s3cret")), client).await;
        assert_eq!(unknown.unwrap_err().status, 401);
        assert_eq!(
            check(&auth, Some(&basic("alice", "s3cret")), client).await,
            Ok(())
        );
        let refused = Arc::new(BasicAuth::refused("gone".into(), "", "answers-test"));
        let closed = check(&refused, Some(&basic("alice", "s3cret")), client).await;
        assert_eq!(closed.unwrap_err().status, 503);
    }

    /// A brute force: past the client's failures the answer is 429
    /// without a check, while a credential verified before still passes
    /// (from that address too: a user behind the guesser's NAT).
    #[tokio::test]
    async fn failures_are_limited_before_hashing() {
        let bcrypt = bcrypt::hash("s3cret", 4).unwrap();
        let auth = setting(&format!("alice:{bcrypt}\n"), "failures-test");
        let (guesser, user) = (ip("192.0.2.66"), ip("192.0.2.7"));
        assert_eq!(
            check(&auth, Some(&basic("alice", "s3cret")), user).await,
            Ok(())
        );
        assert_eq!(auth.tenant.cache_len(), 1);
        for _ in 0..CLIENT_FAILURES.burst {
            let r = check(&auth, Some(&basic("alice", "guess")), guesser).await;
            assert_eq!(r.unwrap_err().status, 401);
        }
        let limited = check(&auth, Some(&basic("alice", "guess2")), guesser)
            .await
            .unwrap_err();
        assert_eq!(
            (limited.status, limited.reason),
            (429, "basic_auth_failures_limited")
        );
        assert_eq!(limited.headers[0].0, "retry-after");
        assert_eq!(
            check(&auth, Some(&basic("alice", "s3cret")), guesser).await,
            Ok(())
        );
        assert_eq!(
            check(&auth, Some(&basic("alice", "s3cret")), user).await,
            Ok(())
        );
    }

    /// An owner whose places are taken is answered 503 without a check.
    #[tokio::test]
    async fn a_full_owner_is_answered_503() {
        let bcrypt = bcrypt::hash("s3cret", 4).unwrap();
        let auth = setting(&format!("alice:{bcrypt}\n"), "full-test");
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        let mut waiting = Vec::new();
        for _ in 0..QUEUE_SLOTS {
            let held = held.clone();
            let tenant = auth.tenant.clone();
            waiting.push(tokio::spawn(async move {
                tenant
                    .run(move || held.lock().unwrap().recv().is_ok())
                    .await
            }));
        }
        while auth.tenant.queued() < QUEUE_SLOTS {
            tokio::task::yield_now().await;
        }
        let busy = check(&auth, Some(&basic("alice", "s3cret")), ip("192.0.2.1"))
            .await
            .unwrap_err();
        assert_eq!((busy.status, busy.reason), (503, "basic_auth_busy"));
        for _ in 0..QUEUE_SLOTS {
            release.send(()).unwrap();
        }
        for w in waiting {
            assert_eq!(w.await.unwrap(), Ok(true));
        }
        assert_eq!(
            check(&auth, Some(&basic("alice", "s3cret")), ip("192.0.2.1")).await,
            Ok(())
        );
    }

    #[test]
    fn cors_fields_go_onto_the_refusal() {
        let auth = setting("alice:{PLAIN}x\n", "cors-test");
        let mut answer = unauthorized(&auth, "basic_auth_required");
        let applied = Applied {
            response_headers: vec![
                ("access-control-allow-origin", "*".into()),
                ("set-cookie", "route=1".into()),
            ],
            ..Applied::default()
        };
        crate::plane::traffic::cors::onto_answer(&mut answer, Some(&applied));
        let names: Vec<&str> = answer.headers.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["www-authenticate", "access-control-allow-origin"]);
    }
}
