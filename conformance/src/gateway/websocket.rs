//! `websocket.Dial` cases (HTTPRouteBackendProtocolWebSocket): the
//! client of `golang.org/x/net/websocket` as the test uses it. It dials
//! `ws://<gwAddr><path>` (Host: the Gateway address with its port, as the
//! Go client writes the URL's host), sends each message in a frame of its
//! own (text for a string, binary for bytes) and reads the reply, which
//! must hold the same bytes (the test compares them; the frame type is
//! not judged, as `websocket.Message.Receive` reads either into its
//! variable). An attempt passes when every reply came back.
//!
//! The Origin header is `ws://gateway/<subtest>` (upstream: the Go test's
//! name, known only when it runs; echo-basic reads nothing from it).

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::super::REQUEST_TIMEOUT;
use super::CaseContext;
use crate::gateway::data::Case;

/// The handshake key of RFC 6455 §1.3's example, and the accept value it
/// must be answered with: any 16 bytes in base64 make a valid key.
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";
/// The longest handshake answer and frame read.
const MAX_HEAD: usize = 16 * 1024;
const MAX_FRAME: u64 = 1 << 20;

/// A message sent on the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Message {
    Text(String),
    Binary(Vec<u8>),
}

impl CaseContext<'_> {
    pub(super) async fn run_websocket(
        &self,
        case: &Case,
        needed: Option<usize>,
    ) -> Result<(), String> {
        let messages = messages(case)?;
        let endpoint = self.endpoint(case, "http")?;
        let addr = endpoint.addr.unwrap_or(self.http);
        let host = endpoint.gw_addr.clone();
        let origin = format!("ws://gateway/{}", case.subtest.replace(' ', "_"));
        let path = if case.request.path.is_empty() {
            "/".to_string()
        } else {
            case.request.path.clone()
        };
        let (host, origin, path, messages) = (&host, &origin, &path, &messages);
        self.polled(needed, move || async move {
            let attempt = async {
                let mut stream = TcpStream::connect(addr)
                    .await
                    .map_err(|e| format!("failed to dial ws://{host}{path}: {e}"))?;
                handshake(&mut stream, host, path, origin).await?;
                for (n, message) in messages.iter().enumerate() {
                    let (opcode, payload) = match message {
                        Message::Text(text) => (1, text.as_bytes()),
                        Message::Binary(bytes) => (2, bytes.as_slice()),
                    };
                    stream
                        .write_all(&frame(opcode, payload, n as u32))
                        .await
                        .map_err(|e| format!("failed to send frame {n}: {e}"))?;
                    let reply = read_message(&mut stream)
                        .await
                        .map_err(|e| format!("failed to receive frame {n}: {e}"))?;
                    if reply != payload {
                        return Err(format!(
                            "unexpected reply - want: {payload:?} got: {reply:?}"
                        ));
                    }
                }
                // A close frame, as `ws.Close()` sends.
                let _ = stream.write_all(&frame(8, &[3, 232], 0)).await;
                Ok(())
            };
            tokio::time::timeout(REQUEST_TIMEOUT, attempt)
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "no WebSocket answer from {addr} within {REQUEST_TIMEOUT:?}"
                    ))
                })
        })
        .await
    }
}

/// The case's `arguments.messages`: `{"Text": "..."}` or `{"Binary": [bytes]}`.
fn messages(case: &Case) -> Result<Vec<Message>, String> {
    let Some(Value::Array(items)) = case.arguments.get("messages") else {
        return Err("the WebSocket case has no messages".into());
    };
    items
        .iter()
        .map(|item| {
            if let Some(text) = item.get("Text").and_then(Value::as_str) {
                return Ok(Message::Text(text.to_string()));
            }
            item.get("Binary")
                .and_then(Value::as_array)
                .and_then(|bytes| {
                    bytes
                        .iter()
                        .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                        .collect::<Option<Vec<u8>>>()
                })
                .map(Message::Binary)
                .ok_or_else(|| format!("message {item} is neither Text nor Binary bytes"))
        })
        .collect()
}

/// The opening handshake (RFC 6455 §4.1) as the Go client makes it; the
/// answer must be a 101 that upgrades to websocket with the right accept
/// value.
async fn handshake(
    stream: &mut TcpStream,
    host: &str,
    path: &str,
    origin: &str,
) -> Result<(), String> {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nOrigin: {origin}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("failed to dial: {e}"))?;
    // Byte by byte up to the blank line: the frames after it stay unread.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD {
            return Err("failed to dial: a handshake answer without end".into());
        }
        let byte = stream
            .read_u8()
            .await
            .map_err(|e| format!("failed to dial: reading the handshake answer: {e}"))?;
        head.push(byte);
    }
    check_answer(&String::from_utf8_lossy(&head))
}

/// `hybiClientHandshake`'s checks of the server's answer.
fn check_answer(head: &str) -> Result<(), String> {
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    if status.split(' ').nth(1) != Some("101") {
        return Err(format!("failed to dial: bad status {status:?}"));
    }
    let field = |name: &str| {
        head.split("\r\n").skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let upgrade = field("upgrade").unwrap_or_default();
    let connection = field("connection").unwrap_or_default();
    if !upgrade.eq_ignore_ascii_case("websocket")
        || !connection
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
    {
        return Err(format!(
            "failed to dial: bad upgrade (Upgrade {upgrade:?}, Connection {connection:?})"
        ));
    }
    match field("sec-websocket-accept") {
        Some(accept) if accept == ACCEPT => Ok(()),
        other => Err(format!(
            "failed to dial: mismatch challenge/response ({other:?})"
        )),
    }
}

/// One final frame from the client: masked, as a client must (RFC 6455
/// §5.3); `salt` varies the mask.
fn frame(opcode: u8, payload: &[u8], salt: u32) -> Vec<u8> {
    let mask = (0x5a17_c0de_u32 ^ salt.wrapping_mul(0x9e37_79b9)).to_be_bytes();
    let mut out = vec![0x80 | opcode];
    match payload.len() {
        n @ 0..=125 => out.push(0x80 | n as u8),
        n @ 126..=0xffff => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

/// The next data message's payload: its frames joined until the final
/// one; ping and pong frames skipped, a close frame an error.
async fn read_message<R: AsyncRead + Unpin>(stream: &mut R) -> Result<Vec<u8>, String> {
    let mut message = Vec::new();
    loop {
        let mut head = [0u8; 2];
        stream
            .read_exact(&mut head)
            .await
            .map_err(|e| e.to_string())?;
        let fin = head[0] & 0x80 != 0;
        let opcode = head[0] & 0x0f;
        let masked = head[1] & 0x80 != 0;
        let len = match head[1] & 0x7f {
            126 => u64::from(stream.read_u16().await.map_err(|e| e.to_string())?),
            127 => stream.read_u64().await.map_err(|e| e.to_string())?,
            n => u64::from(n),
        };
        if len > MAX_FRAME {
            return Err(format!("a frame of {len} bytes"));
        }
        let mut mask = [0u8; 4];
        if masked {
            stream
                .read_exact(&mut mask)
                .await
                .map_err(|e| e.to_string())?;
        }
        let mut payload = vec![0u8; len as usize];
        stream
            .read_exact(&mut payload)
            .await
            .map_err(|e| e.to_string())?;
        if masked {
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= mask[i % 4];
            }
        }
        match opcode {
            8 => return Err("the server closed the connection".into()),
            9 | 10 => continue,
            0..=2 => message.extend_from_slice(&payload),
            other => return Err(format!("a frame of unknown opcode {other}")),
        }
        if fin {
            return Ok(message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_frames_are_masked_and_sized() {
        let small = frame(1, b"hi", 0);
        assert_eq!(small[0], 0x81);
        assert_eq!(small[1], 0x82);
        let mask = &small[2..6];
        assert_eq!([small[6] ^ mask[0], small[7] ^ mask[1]], *b"hi");
        let big = frame(2, &[7u8; 300], 1);
        assert_eq!((big[1], u16::from_be_bytes([big[2], big[3]])), (0xfe, 300));
        assert_eq!(big.len(), 4 + 4 + 300);
    }

    #[tokio::test]
    async fn server_frames_are_joined_and_control_frames_skipped() {
        // A ping, then "ab" in two fragments (text, continuation).
        let wire: Vec<u8> = [&[0x89, 0x00][..], &[0x01, 0x01, b'a'], &[0x80, 0x01, b'b']].concat();
        assert_eq!(read_message(&mut &wire[..]).await.unwrap(), b"ab");
        let close = [0x88u8, 0x00];
        assert!(read_message(&mut &close[..]).await.is_err());
    }

    #[test]
    fn answers_are_checked_as_the_go_client_does() {
        let good = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\n\r\n"
        );
        assert_eq!(check_answer(&good), Ok(()));
        assert!(
            check_answer("HTTP/1.1 200 OK\r\n\r\n")
                .unwrap_err()
                .contains("bad status")
        );
        let wrong = good.replace(ACCEPT, "x");
        assert!(check_answer(&wrong).unwrap_err().contains("mismatch"));
    }

    #[test]
    fn messages_are_text_or_bytes() {
        let case: Case = serde_json::from_str(
            r#"{"helper": "websocket.Dial", "protocol": "websocket",
                "arguments": {"messages": [{"Text": "a"}, {"Binary": [1, 2]}]}}"#,
        )
        .unwrap();
        assert!(case.unjudged_fields().is_empty());
        assert_eq!(
            messages(&case).unwrap(),
            vec![Message::Text("a".into()), Message::Binary(vec![1, 2])]
        );
        let odd: Case =
            serde_json::from_str(r#"{"arguments": {"messages": [{"Binary": [300]}]}}"#).unwrap();
        assert!(messages(&odd).is_err());
    }
}
