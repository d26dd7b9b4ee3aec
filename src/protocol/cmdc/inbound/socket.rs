//! The WebSocket of a session (`GET …/ws`): actions in, their acks and the session's events out.

/// WebSocket ping interval.
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role as WsRole, WebSocketConfig};
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::WebSocketStream;

use super::{accept_prompt, answer, follow, meter_key, Answer, ApiError};
use crate::auth::{Access, Caller};
use crate::body;
use crate::protocol::cmdc::run::{self, Runner};
use crate::protocol::cmdc::sessions::Session;

const WS_PING: Duration = Duration::from_secs(30);

/// What bounds a WebSocket: the client's silence (`ws_idle`), and its messages' size (`max_body`).
#[derive(Clone, Copy)]
pub(super) struct SocketLimits {
    pub(super) idle: Duration,
    pub(super) max_message: usize,
}

/// A WebSocket's client, and the gate each of its actions passes.
pub(super) struct SocketClient {
    pub(super) caller: Caller,
    pub(super) access: Arc<Access>,
}

/// `GET …/ws`: the WebSocket handshake, then the socket in a task of its own.
pub(super) fn upgrade(
    runner: Arc<Runner>,
    session: Arc<Session>,
    client: SocketClient,
    mut request: Request<Incoming>,
    limits: SocketLimits,
) -> Answer {
    let headers = request.headers();
    let is_upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let key = headers.get(header::SEC_WEBSOCKET_KEY).cloned();
    let (true, Some(key)) = (is_upgrade, key) else {
        return Err(ApiError::bad_request(
            "expected a WebSocket upgrade (Upgrade: websocket)",
        ));
    };
    let accept = derive_accept_key(key.as_bytes());
    let upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let config = WebSocketConfig::default()
                    .max_message_size(Some(limits.max_message))
                    .max_frame_size(Some(limits.max_message));
                let io = TokioIo::new(upgraded);
                let socket =
                    WebSocketStream::from_raw_socket(io, WsRole::Server, Some(config)).await;
                serve_socket(runner, session, client, socket, limits.idle).await;
            }
            Err(error) => tracing::debug!("WebSocket upgrade failed: {error}"),
        }
    });
    let mut response = Response::new(body::full(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    Ok(response)
}

/// One WebSocket: actions in, acks and events out, all written by this one task, so an action's ack is the
/// next frame after the action was read.
async fn serve_socket<S>(
    runner: Arc<Runner>,
    session: Arc<Session>,
    client: SocketClient,
    mut socket: WebSocketStream<S>,
    idle: Duration,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut runs = follow::every_run(&runner, &session);
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + WS_PING, WS_PING);
    let silence = tokio::time::sleep(idle);
    tokio::pin!(silence);
    let close = loop {
        let outgoing = tokio::select! {
            biased;
            incoming = socket.next() => {
                silence.as_mut().reset(tokio::time::Instant::now() + idle);
                match incoming {
                    Some(Ok(WsMessage::Text(text))) => {
                        action(&runner, &session, &client, text.as_str()).await
                    }
                    Some(Ok(WsMessage::Binary(bytes))) => {
                        action(&runner, &session, &client, &String::from_utf8_lossy(&bytes)).await
                    }
                    Some(Err(WsError::Capacity(error))) => {
                        break Some(close_frame(CloseCode::Size, &error.to_string()))
                    }
                    Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => break None,
                    Some(Ok(_)) => continue,
                }
            },
            event = runs.next() => match event {
                Some(event) => WsMessage::text(event.to_frame()),
                None => break None,
            },
            _ = ping.tick() => WsMessage::Ping(Bytes::new()),
            () = &mut silence => break Some(close_frame(CloseCode::Normal, "idle")),
        };
        if socket.send(outgoing).await.is_err() {
            return;
        }
    };
    let _ = socket.close(close).await;
}

fn close_frame(code: CloseCode, reason: &str) -> CloseFrame {
    CloseFrame {
        code,
        reason: reason.into(),
    }
}

/// One WebSocket action, and its ack or error frame.
async fn action(
    runner: &Arc<Runner>,
    session: &Arc<Session>,
    client: &SocketClient,
    text: &str,
) -> WsMessage {
    let reply = match serde_json::from_str::<Value>(text) {
        Err(_) => json!({"error": "invalid_json", "message": "Failed to parse JSON"}),
        Ok(frame) => match frame.get("action") {
            None | Some(Value::Null) => {
                json!({"error": "missing_action", "message": "Message must contain 'action' field"})
            }
            Some(action) => {
                let name = action.as_str().unwrap_or_default().to_owned();
                match ws_action(runner, session, client, &name, &frame).await {
                    Ok(()) => json!({"ok": true, "action": name}),
                    Err(Some(error)) => return error.frame(),
                    Err(None) => json!({"error": "unknown_action", "action": action}),
                }
            }
        },
    };
    WsMessage::text(reply.to_string())
}

/// `Err(None)`: not an action of ours. Each action of ours is a request against the rate limit.
async fn ws_action(
    runner: &Arc<Runner>,
    session: &Arc<Session>,
    client: &SocketClient,
    name: &str,
    frame: &Value,
) -> Result<(), Option<ApiError>> {
    if matches!(name, "prompt" | "approve" | "reject" | "respond") {
        client
            .access
            .charge(&client.caller)
            .map_err(|error| Some(ApiError::from(error)))?;
    }
    let field = |key: &str| {
        frame
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    match name {
        "prompt" => {
            let text = field("text")
                .or_else(|| field("prompt"))
                .ok_or_else(|| Some(ApiError::bad_request("Missing 'text' field")))?;
            let api_key = meter_key(&client.caller);
            accept_prompt(runner, &client.caller, session, text.to_owned(), api_key)
                .await
                .map(drop)
                .map_err(Some)
        }
        "approve" | "reject" => {
            let id = field("approvalId")
                .ok_or_else(|| Some(ApiError::bad_request("Missing 'approvalId' field")))?;
            let resume = run::approval_answer(id, name == "approve");
            answer(runner, &client.caller, session, resume)
                .await
                .map_err(Some)
        }
        "respond" => {
            let (Some(reference), Some(response)) = (field("ref"), frame.get("response")) else {
                return Err(Some(ApiError::bad_request(
                    "Missing 'ref' or 'response' field",
                )));
            };
            let response = match response {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            let resume = run::text_answer(reference, &response);
            answer(runner, &client.caller, session, resume)
                .await
                .map_err(Some)
        }
        _ => Err(None),
    }
}
