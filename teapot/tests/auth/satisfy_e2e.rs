//! `satisfy: any` (ingress-nginx's satisfy.go) through the real `teapot
//! proxy` binary, over HTTP/1.1 and HTTP/2: one passing check of the
//! allow-list, basic authentication and `auth-url` is enough.
//!
//! - an address the allow-list names needs no credentials; one it does
//!   not name needs them (401 without, the backend with);
//! - without `any` (the default `all`) both are asked;
//! - basic authentication with `auth-url`: the user's credentials pass
//!   without the service's yes; without them the service decides, and
//!   its refusal with `auth-signin` is the sign-in redirect (satisfy.go);
//! - the deny-list is not overturned by credentials.
//!
//! Every client here is 127.0.0.1.
//!
//! Run with `cargo test -p teapot --test auth satisfy_e2e::`.

use crate::common;

use common::auth_service::AuthService;
use common::*;
use serde_json::json;
use teapot_testkit::client::{Proto, Request};

const BOTH: [Proto; 2] = [Proto::Http1, Proto::Http2];
const NS: &str = "satisfy";

const ANSWERS: &[common::auth_service::Answer] = &[
    ("/allow", 200, &[]),
    (
        "/unauthorized",
        401,
        &[("www-authenticate", "Basic realm=\"sso\"")],
    ),
];

/// `Authorization: Basic` for `uname:pwd` (satisfy.go's user).
const UNAME_PWD: &str = "Basic dW5hbWU6cHdk";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_one_passing_check_lets_a_request_in() {
    let auth = AuthService::start("127.0.0.1".parse().unwrap(), ANSWERS, "/hold").await;
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    objects.extend(auth.service(NS));
    let bcrypt = bcrypt::hash("pwd", 5).unwrap().replace("$2b$", "$2y$");
    objects.push(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "basic-secret", "namespace": NS},
        "stringData": {"auth": format!("uname:{bcrypt}\n")},
    }));
    let basic = [("auth-type", "basic"), ("auth-secret", "basic-secret")];
    let url = |path: &str| format!("http://auth.{NS}.svc.cluster.local/{path}");
    let (allow, unauthorized) = (url("allow"), url("unauthorized"));
    let with = |extra: &[(&'static str, &str)]| {
        let mut pairs: Vec<(&str, String)> =
            basic.iter().map(|(k, v)| (*k, v.to_string())).collect();
        pairs.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        pairs
    };
    let sites: Vec<(&str, Vec<(&str, String)>)> = vec![
        (
            "listed.test",
            with(&[
                ("satisfy", "any"),
                ("allowlist-source-range", "127.0.0.1/32"),
            ]),
        ),
        (
            "unlisted.test",
            with(&[("satisfy", "any"), ("allowlist-source-range", "10.0.0.0/8")]),
        ),
        (
            "all.test",
            with(&[("allowlist-source-range", "127.0.0.1/32")]),
        ),
        (
            "signin.test",
            with(&[
                ("satisfy", "any"),
                ("auth-url", &unauthorized),
                ("auth-signin", "http://$host/auth/start"),
            ]),
        ),
        (
            "either.test",
            with(&[("satisfy", "any"), ("auth-url", &allow)]),
        ),
        (
            "denied.test",
            with(&[
                ("satisfy", "any"),
                ("denylist-source-range", "127.0.0.1/32"),
            ]),
        ),
    ];
    for (host, pairs) in &sites {
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        objects.push(annotated(NS, host, "web", &pairs));
    }
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;
    for proto in BOTH {
        let status = |host: &'static str, authorization: Option<&'static str>| {
            let h = &h;
            async move {
                let mut req = Request::get(host, "/?a=b&c=d");
                if let Some(a) = authorization {
                    req = req.header("Authorization", a);
                }
                let resp = over(h, proto, req).await;
                (resp.status, resp)
            }
        };
        let what = |host: &str| format!("{proto:?} {host}");
        // The allow-list names the client: no credentials asked.
        assert_eq!(
            status("listed.test", None).await.0,
            200,
            "{}",
            what("listed")
        );
        // It does not: the credentials decide.
        let (s, resp) = status("unlisted.test", None).await;
        assert_eq!(s, 401, "{}", what("unlisted"));
        assert!(header(&resp, "www-authenticate").starts_with("Basic"));
        assert_eq!(
            status("unlisted.test", Some(UNAME_PWD)).await.0,
            200,
            "{}",
            what("unlisted")
        );
        // `all`: listed and still asked.
        assert_eq!(status("all.test", None).await.0, 401, "{}", what("all"));
        assert_eq!(status("all.test", Some(UNAME_PWD)).await.0, 200);
        // satisfy.go: basic credentials are enough; without them the
        // service refuses, which is the sign-in redirect.
        assert_eq!(status("signin.test", Some(UNAME_PWD)).await.0, 200);
        let (s, resp) = status("signin.test", None).await;
        assert_eq!(s, 302, "{}", what("signin"));
        let location = header(&resp, "location");
        assert!(
            location.starts_with("http://signin.test/auth/start?rd=http"),
            "{location}"
        );
        // The service's yes is enough without credentials.
        assert_eq!(
            status("either.test", None).await.0,
            200,
            "{}",
            what("either")
        );
        // The deny-list is not a check credentials overturn.
        assert_eq!(
            status("denied.test", Some(UNAME_PWD)).await.0,
            403,
            "{}",
            what("denied")
        );
    }
}
