//! The authentication service ingress-nginx's external-auth e2e cases ask
//! (`auth-url`): the paths of httpbun (httpbin) they use, on loopback.
//!
//! - `/basic-auth/USER/PASSWORD`: 200 when the request's `Authorization`
//!   is `Basic` with those credentials, else 401 with `WWW-Authenticate`;
//! - `/status/CODE`: CODE, no body; after any path prefix too, so that a
//!   Service that an Ingress routes under a prefix answers the same;
//! - `/response-headers?NAME=VALUE&...`: 200 with those response fields
//!   (query values taken as they are, not percent-decoded);
//! - `/cookies/set/NAME/VALUE`: 200 with `Set-Cookie: NAME=VALUE` (the
//!   nginx that ingress-nginx's auth cookie cases start answers so);
//! - anything else: 404.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// A running authentication service; stopped when dropped.
pub struct AuthService {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AuthService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AuthService {
    /// Listens on 127.0.0.1, a port of its own.
    pub async fn start() -> std::io::Result<AuthService> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            // The connections live in the accept task's set, so that
            // stopping the service closes the proxy's kept-alive ones too.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                while connections.try_join_next().is_some() {}
                connections.spawn(async move {
                    let service =
                        service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                            Ok::<_, Infallible>(answer(req.uri(), req.headers()))
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(AuthService { addr, task })
    }

    /// Stops listening and closes every connection.
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

fn answer(uri: &http::Uri, headers: &http::HeaderMap) -> hyper::Response<Full<Bytes>> {
    let path = uri.path();
    let respond = |status: u16, fields: &[(&str, &str)], body: String| {
        let mut r = hyper::Response::builder().status(status);
        for (name, value) in fields {
            r = r.header(*name, *value);
        }
        r.body(Full::new(Bytes::from(body)))
            .unwrap_or_else(|_| hyper::Response::new(Full::new(Bytes::new())))
    };
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["basic-auth", user, password] => {
            let expected = format!("Basic {}", base64(format!("{user}:{password}").as_bytes()));
            let sent = headers.get(http::header::AUTHORIZATION);
            if sent.is_some_and(|v| v.as_bytes() == expected.as_bytes()) {
                let body = format!("{{\"authenticated\":true,\"user\":\"{user}\"}}");
                respond(200, &[("content-type", "application/json")], body)
            } else {
                let challenge = [("www-authenticate", "Basic realm=\"Fake Realm\"")];
                respond(401, &challenge, String::new())
            }
        }
        ["response-headers"] => {
            let fields: Vec<(&str, &str)> = uri
                .query()
                .unwrap_or("")
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .filter(|(name, value)| {
                    http::HeaderName::from_bytes(name.as_bytes()).is_ok()
                        && http::HeaderValue::from_str(value).is_ok()
                })
                .collect();
            respond(200, &fields, "{}".into())
        }
        ["cookies", "set", name, value] => {
            let cookie = format!("{name}={value}");
            respond(200, &[("set-cookie", cookie.as_str())], "OK\n".into())
        }
        [.., "status", code] => match code.parse::<u16>() {
            Ok(code) if (200..600).contains(&code) => respond(code, &[], String::new()),
            _ => respond(400, &[], String::new()),
        },
        _ => respond(404, &[], String::new()),
    }
}

/// Standard base64 with padding.
fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> http::Uri {
        s.parse().unwrap()
    }

    #[test]
    fn basic_credentials() {
        assert_eq!(base64(b"user:password"), "dXNlcjpwYXNzd29yZA==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        let mut headers = http::HeaderMap::new();
        assert_eq!(
            answer(&uri("/basic-auth/user/password"), &headers).status(),
            401
        );
        headers.insert(
            "authorization",
            "Basic dXNlcjpwYXNzd29yZA==".parse().unwrap(),
        );
        assert_eq!(
            answer(&uri("/basic-auth/user/password"), &headers).status(),
            200
        );
        assert_eq!(
            answer(&uri("/basic-auth/user/other"), &headers).status(),
            401
        );
        assert_eq!(answer(&uri("/status/418"), &headers).status(), 418);
        assert_eq!(answer(&uri("/else/status/503"), &headers).status(), 503);
        assert_eq!(answer(&uri("/status"), &headers).status(), 404);
        let cookie = answer(&uri("/cookies/set/alma/armud"), &headers);
        assert_eq!(cookie.status(), 200);
        assert_eq!(cookie.headers()["set-cookie"], "alma=armud");
        let fields = answer(
            &uri("/response-headers?authorization=foo&x-a=1&b@d=2"),
            &headers,
        );
        assert_eq!(fields.status(), 200);
        assert_eq!(fields.headers()["authorization"], "foo");
        assert_eq!(fields.headers()["x-a"], "1");
        assert_eq!(fields.headers().len(), 2);
    }
}
