//! The CMDC inbound's WebSocket (`WS /v1/sessions/:id/ws`): the fuzzer's messages sent to a session of a
//! fresh echo route (see the harness in src/lib.rs), each once the proxy is done with the one before (the
//! echo agent's runs included), then a close, while everything the proxy sends back is read until it closes
//! too.
//!
//! Input: the messages, one per line; a line that is not UTF-8 goes as a binary message.
//! Any answer is fine, error frames included; a panic, or a socket that never closes, is a finding.
#![no_main]

use std::time::Duration;

use agent_bridge_fuzz::{connect, create_session, run, send, SESSION};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{header, Request, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use libfuzzer_sys::fuzz_target;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

fuzz_target!(|input: &[u8]| {
    run(async {
        let mut sender = connect("cmdc").await;
        create_session(&mut sender).await;
        let upgrade = Request::get(format!("/cmdc/v1/sessions/{SESSION}/ws"))
            .header(header::HOST, "proxy.test")
            .header(header::CONNECTION, "Upgrade")
            .header(header::UPGRADE, "websocket")
            .header(header::SEC_WEBSOCKET_VERSION, "13")
            .header(header::SEC_WEBSOCKET_KEY, "dGhlIHNhbXBsZSBub25jZQ==")
            .body(Full::new(Bytes::new()))
            .expect("a valid request");
        let response = send(&mut sender, upgrade).await;
        assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
        let upgraded = hyper::upgrade::on(response)
            .await
            .expect("the upgraded connection");
        let socket =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await;
        let (mut outgoing, mut incoming) = socket.split();
        // Both at once: a proxy writing events into a full pipe reads no more actions.
        let send = async {
            for line in input.split(|&byte| byte == b'\n') {
                let message = match std::str::from_utf8(line) {
                    Ok(text) => Message::text(text),
                    Err(_) => Message::binary(line.to_vec()),
                };
                if outgoing.send(message).await.is_err() {
                    return;
                }
                // On the paused clock this returns once every other task waits.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let _ = outgoing.close().await;
        };
        let receive = async { while let Some(Ok(_)) = incoming.next().await {} };
        tokio::join!(send, receive);
    });
});
