//! The AG-Kit inbound through the real server on a real socket, against the built-in echo agent and scripted
//! upstreams: what a `useChat` client (`support::ag_kit::Chat`) sees, and how the inbound refuses bad
//! requests (HTTP 400 `{"error":{"code","message"}}`, never forwarded, the conversation still usable).

use serde_json::{json, Value};

use crate::support;
use crate::support::ag_kit::{self as kit, Chat};
use crate::support::{post_json, Proxy, Reply, Route, Upstream};

const PATH: &str = "/agents/kit";

/// An AG-Kit route at [`PATH`] to `outbound`.
async fn proxy(outbound: &str, upstream: Option<&str>) -> Proxy {
    Proxy::start(Route::new("kit", PATH, "ag-kit", outbound).upstream_if(upstream)).await
}

fn send_message(proxy: &Proxy) -> String {
    proxy.url(&format!("{PATH}/send-message"))
}

// --- Against the echo agent -----------------------------------------------------------------------------

#[tokio::test]
async fn agkit_to_echo_streams_text_events_and_done() {
    let proxy = proxy("echo", None).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let exchange = chat.say("hello from useChat").await;

    assert_eq!(exchange.text(), "hello from useChat");
    assert!(
        exchange.types().iter().all(|t| *t == "text"),
        "{:?}",
        exchange.types()
    );
    assert_eq!(exchange.streams.len(), 1);
}

#[tokio::test]
async fn agkit_to_echo_mount_point_serves_send_message_too() {
    let proxy = proxy("echo", None).await;
    let mut chat = Chat::new(&proxy.url(PATH));

    assert_eq!(
        chat.say("at the mount point").await.text(),
        "at the mount point"
    );
}

#[tokio::test]
async fn agkit_to_echo_client_tool_runs_and_its_result_is_reposted_as_a_delta() {
    let proxy = proxy("echo", None).await;
    let mut chat = Chat::new(&send_message(&proxy)).tool("change-background-color", |args| {
        format!("Background color changed to: {}", args["color"])
    });

    let exchange = chat
        .say(r#"/tool change-background-color {"color": "blue"}"#)
        .await;

    assert_eq!(
        exchange.streams.len(),
        2,
        "the hook re-posts the tool result once"
    );
    let call = &exchange.streams[0].events;
    assert_eq!(
        kit_types(call),
        ["tool-call-start", "tool-call-args", "tool-call-end"]
    );
    assert_eq!(call[0]["toolCallName"], "change-background-color");
    let repost = &exchange.streams[1].request;
    assert_eq!(
        repost["messages"],
        json!([{"role": "tool", "content": "Background color changed to: \"blue\"", "toolCallId": call[0]["toolCallId"]}]),
        "only the tool message, never the assistant's call"
    );
    assert_eq!(
        exchange.text(),
        "Tool `change-background-color` returned: Background color changed to: \"blue\""
    );
}

#[tokio::test]
async fn agkit_to_echo_question_is_an_interrupt_resumed_with_its_answer() {
    let proxy = proxy("echo", None).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let asked = chat.say("/ask Which city?").await;
    let interrupt = asked.only("interrupt").clone();
    assert_eq!(interrupt["reason"], "question");
    assert_eq!(interrupt["payload"]["question"], "Which city?");

    let answered = chat.resume(json!({"response": "Paris"})).await;

    assert_eq!(answered.text(), "You answered: Paris");
}

#[tokio::test]
async fn agkit_to_echo_tool_result_finds_its_call_in_the_conversation_log() {
    let proxy = proxy("echo", None).await;
    let mut chat = Chat::new(&send_message(&proxy)).tool("paint", |_| "painted".to_owned());

    let exchange = chat.say("/tool paint {}").await;

    // The re-post carries only the tool message; the echo agent names the tool from the call it finds in
    // the history, which the proxy kept for this conversation.
    assert_eq!(exchange.text(), "Tool `paint` returned: painted");
}

fn kit_types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect()
}

// --- Bad input: refused in AG-Kit's shape, never forwarded --------------------------------------------

/// A scripted upstream that would answer anything; the tests check that it is never asked.
async fn untouched_upstream() -> Upstream {
    kit::reply([kit::text("should not be asked")]).serve().await
}

#[tokio::test]
async fn tools_whose_parameters_are_not_json_text_are_a_400_naming_the_tool() {
    let upstream = untouched_upstream().await;
    let proxy = proxy("ag-kit", Some(&upstream.url())).await;

    let (status, body) = kit::refused(
        &send_message(&proxy),
        &json!({"messages": [{"role": "user", "content": "hi"}], "conversationId": "c1",
                "tools": [{"name": "paint", "description": "Paints", "parameters": "{type: object"}]}),
    )
    .await;

    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "INVALID_REQUEST");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`paint`"),
        "{body}"
    );
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn resume_of_an_unknown_interrupt_is_a_400_and_never_forwarded() {
    let upstream = untouched_upstream().await;
    let proxy = proxy("ag-kit", Some(&upstream.url())).await;

    let (status, body) = kit::refused(
        &send_message(&proxy),
        &json!({"resume": {"interruptId": "int_404", "payload": "{}"}, "conversationId": "c1"}),
    )
    .await;

    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "INVALID_REQUEST");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("int_404"),
        "{body}"
    );
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn tool_message_for_an_unknown_call_is_a_400_and_the_conversation_goes_on() {
    let upstream = kit::reply([kit::text("Hello")]).serve().await;
    let proxy = proxy("ag-kit", Some(&upstream.url())).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let (status, body) = kit::refused(
        &send_message(&proxy),
        &chat.body(json!({"messages": [{"role": "tool", "content": "done", "toolCallId": "call_nobody_made"}]})),
    )
    .await;

    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("call_nobody_made"),
        "{body}"
    );
    assert!(upstream.received().is_empty(), "never forwarded");
    assert_eq!(chat.say("hi").await.text(), "Hello");
}

#[tokio::test]
async fn malformed_requests_are_400_in_the_ag_kit_error_shape() {
    let proxy = proxy("echo", None).await;
    let url = send_message(&proxy);
    for body in [
        json!("not an object"),
        json!({"messages": "hi", "conversationId": "c"}),
        json!({"conversationId": "c"}),
        json!({"messages": [], "conversationId": "c"}),
        json!({"messages": [{"role": "tool", "content": "x"}], "conversationId": "c"}),
    ] {
        let (status, error) = kit::refused(&url, &body).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(error["error"]["code"], "INVALID_REQUEST", "{body}");
        assert!(error["error"]["message"].is_string());
    }
}

#[tokio::test]
async fn a_request_without_conversation_id_gets_one_minted_in_a_header() {
    let proxy = proxy("echo", None).await;
    let url = send_message(&proxy);

    let response = post_json(
        &url,
        &json!({"messages": [{"role": "user", "content": "/ask Name?"}]}),
    )
    .await;
    assert_eq!(response.status, 200);
    let minted = response.header("x-conversation-id").to_owned();
    assert!(uuid::Uuid::parse_str(&minted).is_ok(), "{minted:?}");
    let mut stream = response.sse();
    let interrupt: Value = serde_json::from_str(&stream.next_data().await.unwrap()).unwrap();

    // The minted id names a conversation the client can go on with.
    let response = post_json(
        &url,
        &json!({"resume": {"interruptId": interrupt["id"], "payload": "\"Ada\""}, "conversationId": minted}),
    )
    .await;
    assert_eq!(response.header("x-conversation-id"), minted);
    let answer: Value = serde_json::from_str(&response.sse().next_data().await.unwrap()).unwrap();
    assert_eq!(answer["content"], "You ");
}

#[tokio::test]
async fn other_methods_paths_and_media_types_are_refused() {
    let proxy = proxy("echo", None).await;
    let get = support::send(
        http::Request::get(send_message(&proxy))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(get.status, 405);
    assert_eq!(get.header("allow"), "POST");

    let (status, _) = kit::refused(&proxy.url(&format!("{PATH}/elsewhere")), &json!({})).await;
    assert_eq!(status, 404);

    let text = support::send(
        http::Request::post(send_message(&proxy))
            .header("content-type", "text/plain")
            .body(http_body_util::Full::new(bytes::Bytes::from_static(b"hi")))
            .unwrap(),
    )
    .await;
    assert_eq!(text.status, 415);
    assert_eq!(text.json().await["error"]["code"], "UNSUPPORTED_MEDIA_TYPE");
}

// --- Upstream failures ------------------------------------------------------------------------------------

#[tokio::test]
async fn an_upstream_that_fails_before_any_event_is_an_http_502_with_the_reason() {
    let upstream = Reply::status(503).body("overloaded").serve().await;
    let proxy = proxy("ag-kit", Some(&upstream.url())).await;

    let (status, body) = kit::refused(
        &send_message(&proxy),
        &json!({"messages": [{"role": "user", "content": "hi"}], "conversationId": "c1"}),
    )
    .await;

    assert_eq!(status, 502);
    assert_eq!(body["error"]["code"], "UPSTREAM_HTTP_ERROR");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("overloaded"),
        "{body}"
    );
}

#[tokio::test]
async fn an_unreachable_upstream_is_an_http_502() {
    let proxy = proxy("ag-kit", Some(&Upstream::refused_url().await)).await;

    let (status, body) = kit::refused(
        &send_message(&proxy),
        &json!({"messages": [{"role": "user", "content": "hi"}], "conversationId": "c1"}),
    )
    .await;

    assert_eq!(status, 502);
    assert_eq!(body["error"]["code"], "UPSTREAM_UNREACHABLE");
}

#[tokio::test]
async fn a_failure_after_the_stream_started_is_one_error_frame_then_done() {
    let upstream = Reply::sse()
        .event(kit::text("Half an answer"))
        .close_mid_stream()
        .serve()
        .await;
    let proxy = proxy("ag-kit", Some(&upstream.url())).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let exchange = chat.say("hi").await;

    assert_eq!(exchange.types(), ["text", "error"]);
    assert_eq!(exchange.only("error")["code"], "UPSTREAM_EOF");
}
