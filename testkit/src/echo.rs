//! The echo backend (`teapot-echo`), under the path the tests have always
//! used. Its behaviour over the wire is tested here, where the test client is.

pub use teapot_echo::*;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use http::header;
    use tokio::net::TcpListener;
    use tokio::sync::oneshot;
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    use super::*;
    use crate::client::{self, Proto, Request as ClientRequest, Transport};

    fn identity() -> EchoIdentity {
        EchoIdentity::new("ns1", "ing1", "svc1", "pod1")
    }

    fn get(host: &str, target: &str, proto: Proto) -> ClientRequest {
        ClientRequest {
            proto,
            ..ClientRequest::get(host, target)
        }
    }

    #[tokio::test]
    async fn json_contract_over_http1() {
        let echo = EchoServer::start(identity()).await.unwrap();
        let mut req = get("foo.bar.com", "/a/b?c=d&e", Proto::Http1);
        req.method = "POST".into();
        req.headers = vec![
            ("user-agent".into(), "Go-http-client/1.1".into()),
            ("x-forwarded-for".into(), "10.0.0.1".into()),
            ("x-multi".into(), "one".into()),
            ("x-multi".into(), "two".into()),
        ];
        req.body = b"hello".to_vec();
        let resp = client::send(echo.addr(), &Transport::Plain, &req)
            .await
            .unwrap();

        assert_eq!(resp.status, 200);
        assert_eq!(resp.version, http::Version::HTTP_11);
        assert_eq!(resp.headers[header::CONTENT_TYPE], "application/json");
        assert!(resp.headers.get(header::SERVER).is_none());
        let json = resp.json().unwrap();
        assert_eq!(json["path"], "/a/b?c=d&e");
        assert_eq!(json["host"], "foo.bar.com");
        assert_eq!(json["method"], "POST");
        assert_eq!(json["proto"], "HTTP/1.1");
        assert_eq!(
            json["headers"]["User-Agent"],
            serde_json::json!(["Go-http-client/1.1"])
        );
        assert_eq!(
            json["headers"]["X-Forwarded-For"],
            serde_json::json!(["10.0.0.1"])
        );
        assert_eq!(
            json["headers"]["X-Multi"],
            serde_json::json!(["one", "two"])
        );
        assert!(
            json["headers"].get("Host").is_none(),
            "Go moves Host out of the headers"
        );
        assert_eq!(json["namespace"], "ns1");
        assert_eq!(json["ingress"], "ing1");
        assert_eq!(json["service"], "svc1");
        assert_eq!(json["pod"], "pod1");
        assert_eq!(json["bodyLength"], 5);
        assert_eq!(echo.requests(), 1);
        echo.stop().await;
    }

    #[tokio::test]
    async fn json_contract_over_http2_prior_knowledge() {
        let echo = EchoServer::start(identity()).await.unwrap();
        let req = get("foo.bar.com:8080", "/x?y=1", Proto::Http2);
        let resp = client::send(echo.addr(), &Transport::Plain, &req)
            .await
            .unwrap();

        assert_eq!(resp.status, 200);
        assert_eq!(resp.version, http::Version::HTTP_2);
        let json = resp.json().unwrap();
        assert_eq!(json["path"], "/x?y=1");
        assert_eq!(json["host"], "foo.bar.com:8080");
        assert_eq!(json["method"], "GET");
        assert_eq!(json["proto"], "HTTP/2.0");
        assert_eq!(
            json["headers"],
            serde_json::json!({}),
            "the client adds no headers"
        );
        assert_eq!(json["bodyLength"], 0);
        echo.stop().await;
    }

    #[tokio::test]
    async fn keeps_alive_and_counts_requests() {
        let echo = EchoServer::start(identity()).await.unwrap();
        for proto in [Proto::Http1, Proto::Http2] {
            let mut conn = client::Connection::open(echo.addr(), &Transport::Plain, proto)
                .await
                .unwrap();
            for _ in 0..3 {
                let resp = conn.send(&get("h", "/", proto)).await.unwrap();
                assert_eq!(resp.status, 200);
            }
        }
        assert_eq!(echo.requests(), 6);
        echo.stop().await;
    }

    #[tokio::test]
    async fn health() {
        let echo = EchoServer::start(identity()).await.unwrap();
        let resp = client::send(
            echo.addr(),
            &Transport::Plain,
            &ClientRequest::get("h", "/health"),
        )
        .await
        .unwrap();
        assert_eq!(resp.status, 200);
        assert_eq!(resp.text(), "OK");
        echo.stop().await;
    }

    #[tokio::test]
    async fn status_and_delay_hooks() {
        let echo = EchoServer::start(identity()).await.unwrap();

        let mut req = ClientRequest::get("h", "/teapot");
        req.headers = vec![("X-Echo-Status".into(), "418".into())];
        let resp = client::send(echo.addr(), &Transport::Plain, &req)
            .await
            .unwrap();
        assert_eq!(resp.status, 418);
        assert_eq!(resp.json().unwrap()["path"], "/teapot");

        req.headers = vec![("X-Echo-Status".into(), "banana".into())];
        let resp = client::send(echo.addr(), &Transport::Plain, &req)
            .await
            .unwrap();
        assert_eq!(resp.status, 400);

        req.headers = vec![("X-Echo-Delay-Ms".into(), "300".into())];
        let started = std::time::Instant::now();
        let resp = client::send(echo.addr(), &Transport::Plain, &req)
            .await
            .unwrap();
        assert_eq!(resp.status, 200);
        assert!(started.elapsed() >= Duration::from_millis(300));
        echo.stop().await;
    }

    #[tokio::test]
    async fn stop_lets_in_flight_requests_finish() {
        let echo = EchoServer::start(identity()).await.unwrap();
        let addr = echo.addr();
        let mut req = ClientRequest::get("h", "/slow");
        req.headers = vec![("X-Echo-Delay-Ms".into(), "300".into())];
        let in_flight =
            tokio::spawn(async move { client::send(addr, &Transport::Plain, &req).await });
        // Let the request reach the server before stopping it.
        while echo.requests() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        echo.stop().await;
        let resp = in_flight.await.unwrap().unwrap();
        assert_eq!(resp.status, 200);
        // Stopped means no longer accepting.
        assert!(
            client::send(addr, &Transport::Plain, &ClientRequest::get("h", "/"))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn stop_closes_idle_connections_and_websockets() {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;

        let echo = EchoServer::start(identity()).await.unwrap();
        let addr = echo.addr();
        let mut h1 = client::Connection::open(addr, &Transport::Plain, Proto::Http1)
            .await
            .unwrap();
        let mut h2 = client::Connection::open(addr, &Transport::Plain, Proto::Http2)
            .await
            .unwrap();
        assert_eq!(
            h1.send(&get("h", "/", Proto::Http1)).await.unwrap().status,
            200
        );
        assert_eq!(
            h2.send(&get("h", "/", Proto::Http2)).await.unwrap().status,
            200
        );
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = "ws://h/ws".into_client_request().unwrap();
        let (mut ws, _) = tokio_tungstenite::client_async(request, tcp).await.unwrap();

        // Idle keep-alive connections and an open WebSocket must not hold stop() up.
        tokio::time::timeout(Duration::from_secs(5), echo.stop())
            .await
            .unwrap();
        match ws.next().await {
            Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::Away),
            other => panic!("expected a close frame, got {other:?}"),
        }
        assert!(h1.send(&get("h", "/", Proto::Http1)).await.is_err());
        assert!(h2.send(&get("h", "/", Proto::Http2)).await.is_err());
    }

    #[tokio::test]
    async fn websocket_echo() {
        let echo = EchoServer::start(identity()).await.unwrap();
        let echoed = client::websocket_echo(
            echo.addr(),
            "ws.example.com",
            "/chat",
            &["hello", "", "wörld"],
        )
        .await
        .unwrap();
        assert_eq!(echoed, vec!["hello", "", "wörld"]);
        echo.stop().await;
    }

    #[tokio::test]
    async fn run_with_own_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(run(listener, identity(), async move {
            let _ = stopped.await;
        }));
        let resp = client::send(addr, &Transport::Plain, &ClientRequest::get("h", "/"))
            .await
            .unwrap();
        assert_eq!(resp.json().unwrap()["pod"], "pod1");
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
