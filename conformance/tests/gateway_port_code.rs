//! `conformance/gateway/port.py` reads the checks upstream writes as code
//! (not helper calls) into cases: a request whose expectation holds a value
//! made anew per attempt, a WebSocket dial with its messages, a DNS
//! exchange. The test file here is self-made, in the upstream format, with
//! other names than the upstream tests use, so the reader is shown to
//! follow the shapes, not the tests it was written against.
//!
//! Needs `python3` and the upstream copy at
//! `<workspace>/../shared/conformance-upstream/gateway-api` (its base
//! manifests).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// port.py's data file for `name`, made from one Go file in a copy of
/// the upstream layout.
fn port_one(name: &str, go: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let up = dir.path().join("up");
    std::fs::create_dir_all(up.join("conformance/tests")).unwrap();
    std::fs::create_dir_all(up.join("conformance/base")).unwrap();
    std::fs::copy(
        repo().join("../shared/conformance-upstream/gateway-api/conformance/base/manifests.yaml"),
        up.join("conformance/base/manifests.yaml"),
    )
    .unwrap();
    std::fs::write(up.join("conformance/tests/teapot-code.yaml"), "{}\n").unwrap();
    std::fs::write(up.join("conformance/tests/teapot-code.go"), go).unwrap();
    let out_dir = dir.path().join("out");
    let out = Command::new("python3")
        .arg(repo().join("conformance/gateway/port.py"))
        .arg("--upstream")
        .arg(&up)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    read(&out_dir.join(format!("{name}.json")))
}

const GO: &str = r#"package tests

import (
	"bytes"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/miekg/dns"
	"golang.org/x/net/websocket"
	"k8s.io/apimachinery/pkg/types"

	h "sigs.k8s.io/gateway-api/conformance/utils/http"
	"sigs.k8s.io/gateway-api/conformance/utils/kubernetes"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"
)

var TeapotCode = suite.ConformanceTest{
	ShortName: "TeapotCode",
	Manifests: []string{"tests/teapot-code.yaml"},
	Features:  []features.FeatureName{features.SupportGateway},
	Test: func(t *testing.T, s *suite.ConformanceTestSuite) {
		ns := "gateway-conformance-infra"
		gw := types.NamespacedName{Name: "teapot-gw", Namespace: ns}
		addr := kubernetes.GatewayAndHTTPRoutesMustBeAccepted(t, s.Client, s.TimeoutConfig, s.ControllerName, kubernetes.NewGatewayRef(gw), types.NamespacedName{Name: "r", Namespace: ns})

		type probe struct {
			prefix string
			query  url.Values
		}
		probes := []struct {
			title string
			p     probe
			code  int
		}{
			{title: "flaky", p: probe{prefix: "/flaky", query: url.Values{"n": []string{"2"}, "a b": []string{"x&y"}}}, code: 200},
		}
		for k := range probes {
			one := probes[k]
			t.Run(fmt.Sprintf("%d %s", k, one.title), func(t *testing.T) {
				eachAttempt(t, s, addr, one.p.prefix, one.p.query, one.code)
			})
		}
		once := uuid.NewString()
		expected := h.ExpectedResponse{Request: h.Request{Path: "/once/" + once}, Namespace: ns}
		h.MakeRequestAndExpectEventuallyConsistentResponse(t, s.RoundTripper, s.TimeoutConfig, addr, expected)

		t.Run("socket", func(t *testing.T) {
			h.AwaitConvergence(t, s.TimeoutConfig, func(_ time.Duration) bool {
				conn, err := s.WebSocketDialer.Dial(fmt.Sprintf("ws://%s/echo", addr), "", "ws://origin/")
				if err != nil {
					return false
				}
				var (
					hello = "hi"
					back  string
				)
				if err := websocket.Message.Send(conn, hello); err != nil {
					return false
				}
				if err := websocket.Message.Receive(conn, &back); err != nil {
					return false
				}
				if hello != back {
					return false
				}
				var (
					raw   = []byte{9, 8}
					rawIn []byte
				)
				_ = websocket.Message.Send(conn, raw)
				_ = websocket.Message.Receive(conn, &rawIn)
				return bytes.Equal(rawIn, raw)
			})
		})
		t.Run("dns", func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion("teapot.example.", dns.TypeAAAA)
			_, _ = dns.Exchange(m, addr)
		})
		t.Run("socket not compared", func(t *testing.T) {
			c, _ := s.WebSocketDialer.Dial(fmt.Sprintf("ws://%s/x", addr), "", "ws://origin/")
			var got string
			_ = websocket.Message.Send(c, "ping")
			_ = websocket.Message.Receive(c, &got)
		})
	},
}

func eachAttempt(t *testing.T, s *suite.ConformanceTestSuite, addr string, prefix string, query url.Values, code int) {
	h.AwaitConvergence(t, s.TimeoutConfig, func(_ time.Duration) bool {
		query.Set("id", uuid.New().String())
		want := h.ExpectedResponse{
			Request:  h.Request{Path: prefix + "?" + query.Encode(), Headers: map[string]string{"X-Id": query.Get("id")}},
			Response: h.Response{StatusCode: code},
		}
		req := h.MakeRequest(t, &want, addr, "HTTP", "http")
		_ = req
		return true
	})
}
"#;

#[test]
fn checks_written_as_code_are_cases() {
    let t = port_one("TeapotCode", GO);
    let cases = t["cases"].as_array().unwrap();
    let gateway = json!({"Name": "teapot-gw", "Namespace": "gateway-conformance-infra", "Listener": "", "UsePort": true});
    // The package function called per table row, with the row's fields:
    // the UUID made inside the poll is one per attempt, the same value in
    // the query (encoded as Go does: keys sorted, values escaped) and in
    // the header read back with `Get`.
    let flaky = &cases[0];
    assert_eq!(
        flaky["Request"],
        json!({"Path": "/flaky?a+b=x%26y&id={uuid.New().String()}&n=2", "Headers": {"X-Id": "{uuid.New().String()}"}})
    );
    assert_eq!(
        flaky["per_attempt"],
        json!({"{uuid.New().String()}": "uuid"})
    );
    assert!(flaky.get("per_case").is_none());
    assert_eq!(flaky["helper"], "http.MakeRequest");
    assert_eq!(flaky["Response"], json!({"StatusCode": 200}));
    assert_eq!(flaky["gateway"], gateway);
    // The UUID made once, outside any poll: once per case.
    let once = &cases[1];
    assert_eq!(
        once["helper"],
        "http.MakeRequestAndExpectEventuallyConsistentResponse"
    );
    assert_eq!(once["Request"]["Path"], "/once/{uuid.NewString()}");
    assert_eq!(once["per_case"], json!({"{uuid.NewString()}": "uuid"}));
    assert!(once.get("per_attempt").is_none());
    // The WebSocket dial inside AwaitConvergence, both replies compared.
    assert_eq!(
        cases[2],
        json!({
            "protocol": "websocket", "helper": "websocket.Dial", "subtest": "socket",
            "gateway": gateway, "Request": {"Path": "/echo"},
            "arguments": {"messages": [{"Text": "hi"}, {"Binary": [9, 8]}], "poll": "http.AwaitConvergence"},
        })
    );
    // The DNS exchange, run once (no poll around it).
    assert_eq!(
        cases[3],
        json!({
            "protocol": "udp", "helper": "dns.Exchange", "subtest": "dns", "gateway": gateway,
            "arguments": {"question": {"Name": "teapot.example.", "Type": "AAAA"}},
        })
    );
    assert_eq!(cases.len(), 4, "{cases:?}");
    // A dial whose reply is not compared with what was sent is not a
    // check: the case is left unported, with why.
    let unported = t["unported_cases"].as_array().unwrap();
    assert_eq!(unported.len(), 1, "{unported:?}");
    assert!(
        unported[0]["reason"]
            .as_str()
            .unwrap()
            .contains("the reply to message 0 is not compared"),
        "{unported:?}"
    );
}
