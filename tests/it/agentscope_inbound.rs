//! The AgentScope inbound through the real server on a real socket: in front of the built-in echo agent, and
//! in front of a scripted AG-UI upstream that can be held mid-run (for the run lock). One test per behaviour.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use serde_json::{json, Value};

use crate::support::ag_ui::{finished, started, text, text_run};
use crate::support::{post_json, send, Proxy, Reply, Route, SseStream, Upstream};

const PATH: &str = "/agents/as";

/// An AgentScope route to the echo agent.
fn echo_route() -> Route {
    Route::new("as-echo", PATH, "agentscope", "echo")
}

async fn echo_proxy() -> Proxy {
    Proxy::start(echo_route()).await
}

/// An AgentScope route to a scripted AG-UI upstream.
async fn agui_proxy(upstream: &Upstream) -> Proxy {
    Proxy::start(Route::new("as-agui", PATH, "agentscope", "ag-ui").upstream(&upstream.url())).await
}

fn user(id: &str, text: &str) -> Value {
    json!({"object": "message", "status": "created", "id": id, "type": "message", "role": "user",
           "content": [{"object": "content", "type": "text", "delta": false, "text": text}]})
}

/// A request as the shipped `HTTPAgentAPIClient` builds it.
fn request(session: &str, input: Value) -> Value {
    json!({"input": input, "stream": true, "n": 1, "session_id": session, "user_id": "u1"})
}

fn change_background() -> Value {
    json!([{"type": "function", "function": {"name": "change_background", "description": "Paints the page",
            "parameters": {"type": "object", "properties": {"color": {"type": "string"}}}}}])
}

async fn start(url: &str, body: &Value) -> SseStream {
    let response = post_json(url, body).await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        "text/event-stream; charset=utf-8"
    );
    assert_eq!(response.header("cache-control"), "no-cache");
    response.sse()
}

/// Runs one request to its end; checks the lifecycle and returns the events.
async fn run(url: &str, body: &Value) -> Vec<Value> {
    let events = start(url, body).await.rest().await;
    check(&events, body);
    events
}

/// What every stream must be: sequence numbers 0, 1, 2, …; `response` created, in_progress, then one
/// terminal response, last, in the request's session.
fn check(events: &[Value], body: &Value) {
    assert!(events.len() >= 3, "{events:#?}");
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], json!(n), "{event}");
    }
    assert_eq!(events[0]["status"], "created");
    assert_eq!(events[1]["status"], "in_progress");
    let last = events.last().unwrap();
    assert_eq!(last["object"], "response");
    assert!(matches!(
        last["status"].as_str(),
        Some("completed" | "failed" | "canceled")
    ));
    for event in events.iter().filter(|e| e["object"] == "response") {
        assert_eq!(event["id"], events[0]["id"]);
        assert_eq!(event["session_id"], body["session_id"]);
    }
}

/// The completed messages of a run (the completed response's `output`).
fn output(events: &[Value]) -> Vec<Value> {
    let last = events.last().unwrap();
    assert_eq!(last["status"], "completed", "{last}");
    last["output"].as_array().cloned().unwrap_or_default()
}

/// The text of the run's `message` messages, joined.
fn reply_text(events: &[Value]) -> String {
    output(events)
        .iter()
        .filter(|m| m["type"] == "message")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(str::to_owned))
        .collect()
}

/// The only message of `kind` in the run's output.
fn only(events: &[Value], kind: &str) -> Value {
    let found: Vec<Value> = output(events)
        .into_iter()
        .filter(|m| m["type"] == kind)
        .collect();
    assert_eq!(found.len(), 1, "one {kind}: {events:#?}");
    found.into_iter().next().unwrap()
}

#[tokio::test]
async fn text_streams_as_deltas_then_the_whole_message_and_the_completed_response() {
    let proxy = echo_proxy().await;
    let body = request("s-text", json!([user("msg_u1", "hello big world")]));
    let events = run(&proxy.url(&format!("{PATH}/process")), &body).await;
    let deltas: Vec<&str> = events
        .iter()
        .filter(|e| e["object"] == "content" && e["delta"] == true)
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, ["hello ", "big ", "world"]);
    let message = only(&events, "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["content"][0]["text"], "hello big world");
    assert_eq!(message["content"][0]["status"], "completed");
    assert!(events.last().unwrap()["completed_at"].is_i64());
}

#[tokio::test]
async fn the_mount_point_serves_too_and_a_second_turn_carries_the_history() {
    let proxy = echo_proxy().await;
    let first = request("s-two", json!([user("msg_u1", "hello")]));
    let events = run(&proxy.url(PATH), &first).await;
    assert_eq!(reply_text(&events), "hello");

    // The client resends the history with the reply it received, and says something new.
    let mut input = first["input"].as_array().unwrap().clone();
    input.extend(output(&events));
    input.push(user("msg_u2", "again please"));
    let second = request("s-two", Value::Array(input));
    let events = run(&proxy.url(&format!("{PATH}/process")), &second).await;
    assert_eq!(reply_text(&events), "again please");
}

#[tokio::test]
async fn stream_false_is_answered_with_the_stream_all_the_same() {
    let proxy = echo_proxy().await;
    let mut body = request("s-nostream", json!([user("msg_u1", "hi")]));
    body["stream"] = json!(false);
    let events = run(&proxy.url(&format!("{PATH}/process")), &body).await;
    assert_eq!(reply_text(&events), "hi");
}

#[tokio::test]
async fn a_client_tool_call_is_a_function_call_and_its_output_is_read_next_turn() {
    let proxy = echo_proxy().await;
    let url = proxy.url(&format!("{PATH}/process"));
    let mut first = request(
        "s-tool",
        json!([user(
            "msg_u1",
            "/tool change_background {\"color\":\"blue\"}"
        )]),
    );
    first["tools"] = change_background();
    let events = run(&url, &first).await;
    let call = only(&events, "function_call");
    assert_eq!(call["role"], "assistant");
    let data = &call["content"][0]["data"];
    assert_eq!(data["name"], "change_background");
    assert_eq!(data["arguments"], "{\"color\":\"blue\"}");
    let call_id = data["call_id"].as_str().unwrap().to_owned();
    // Each streamed content of the call carries the whole arguments so far.
    let streamed: Vec<&Value> = events
        .iter()
        .filter(|e| e["object"] == "content" && e["msg_id"] == call["id"])
        .collect();
    assert_eq!(streamed.first().unwrap()["data"]["arguments"], "");
    assert_eq!(
        streamed.last().unwrap()["data"]["arguments"],
        "{\"color\":\"blue\"}"
    );

    let mut input = first["input"].as_array().unwrap().clone();
    input.extend(output(&events));
    input.push(json!({"type": "function_call_output", "role": "tool", "content": [
        {"type": "data", "data": {"call_id": call_id, "name": "change_background", "output": "done"}}]}));
    let mut second = request("s-tool", Value::Array(input));
    second["tools"] = change_background();
    let events = run(&url, &second).await;
    assert_eq!(
        reply_text(&events),
        "Tool `change_background` returned: done"
    );
}

#[tokio::test]
async fn a_question_pauses_as_an_mcp_approval_request_and_the_approval_response_answers_it() {
    let proxy = echo_proxy().await;
    let url = proxy.url(&format!("{PATH}/process"));
    let first = request("s-ask", json!([user("msg_u1", "/ask Which city?")]));
    let events = run(&url, &first).await;
    let request_message = only(&events, "mcp_approval_request");
    let data = &request_message["content"][0]["data"];
    assert_eq!(data["name"], "ask_user");
    assert_eq!(data["server_label"], "agent-bridge");
    assert_eq!(
        serde_json::from_str::<Value>(data["arguments"].as_str().unwrap()).unwrap(),
        json!({"question": "Which city?"})
    );
    assert_eq!(request_message["metadata"]["prompt"], "Which city?");
    let interrupt_id = data["id"].as_str().unwrap().to_owned();

    let mut input = first["input"].as_array().unwrap().clone();
    input.extend(output(&events));
    input.push(json!({"type": "mcp_approval_response", "role": "user", "content": [
        {"type": "data", "data": {"approval_request_id": interrupt_id, "approve": true, "reason": "Paris"}}]}));
    let second = request("s-ask", Value::Array(input.clone()));
    let events = run(&url, &second).await;
    assert_eq!(reply_text(&events), "You answered: Paris");

    // The answer stays in the history; it does not answer again.
    input.extend(output(&events));
    input.push(user("msg_u3", "thanks"));
    let third = request("s-ask", Value::Array(input));
    let events = run(&url, &third).await;
    assert_eq!(reply_text(&events), "thanks");
}

#[tokio::test]
async fn a_second_request_while_the_session_runs_gets_the_runtimes_lock_error() {
    // The first run is held until `release`; the others run through.
    let plain = text_run("m1", &["Hi"]);
    let held = Reply::sse()
        .event(started())
        .events(text("m1", &["Hel"]))
        .gate()
        .events(text("m2", &["lo"]))
        .event(finished());
    let upstream = Upstream::serve([held, plain]).await;
    let proxy = agui_proxy(&upstream).await;
    let url = proxy.url(&format!("{PATH}/process"));
    let body = request("s-busy", json!([user("msg_u1", "hi")]));
    let mut first = start(&url, &body).await;
    // The run is under way once its first text arrived.
    loop {
        let event = first.next().await.expect("the run goes on");
        if event["object"] == "content" {
            break;
        }
    }

    let busy = post_json(&url, &body).await;
    assert_eq!(busy.status, 200);
    assert_eq!(
        busy.header("content-type"),
        "text/event-stream; charset=utf-8"
    );
    assert_eq!(
        busy.bytes().await,
        Bytes::from_static(
            b"data: {\"error\": \"Task u1:s-busy is already in RUNNING state.\"}\n\n"
        )
    );
    // Another session is not held up.
    let other = run(&url, &request("s-other", json!([user("msg_u1", "hi")]))).await;
    assert_eq!(other.last().unwrap()["object"], "response");

    upstream.release();
    let rest = first.rest().await;
    assert_eq!(rest.last().unwrap()["status"], "completed");
    let again = run(&url, &body).await;
    assert_eq!(again.last().unwrap()["status"], "completed");
}

#[tokio::test]
async fn a_client_that_leaves_cancels_the_upstream_run_and_frees_its_session() {
    let plain = text_run("m1", &["Hi"]);
    let held = Reply::sse()
        .event(started())
        .events(text("m1", &["Hel"]))
        .gate()
        .event(finished());
    let upstream = Upstream::serve([held, plain]).await;
    let proxy = agui_proxy(&upstream).await;
    let url = proxy.url(&format!("{PATH}/process"));
    let body = request("s-leave", json!([user("msg_u1", "hi")]));
    let mut first = start(&url, &body).await;
    while first.next().await.expect("the run goes on")["object"] != "content" {}
    drop(first);

    assert!(
        upstream.client_left_within(Duration::from_secs(5)).await,
        "the upstream request is closed"
    );
    // The session is free again (the lock goes with the stream).
    let again = run(&url, &body).await;
    assert_eq!(again.last().unwrap()["status"], "completed");
}

#[tokio::test]
async fn bad_json_is_a_422_and_a_bad_request_one_error_frame() {
    let proxy = echo_proxy().await;
    let url = proxy.url(&format!("{PATH}/process"));
    let response = send(
        Request::post(&url)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(b"{\"input\": [")))
            .unwrap(),
    )
    .await;
    assert_eq!(response.status, 422);
    assert_eq!(response.header("content-type"), "application/json");
    let body = response.json().await;
    assert_eq!(body["detail"][0]["type"], "json_invalid");
    assert_eq!(body["detail"][0]["loc"], json!(["body", 11]));

    let response = post_json(&url, &json!({"input": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        "text/event-stream; charset=utf-8"
    );
    assert_eq!(
        response.bytes().await,
        Bytes::from_static(b"data: {\"error\": \"1 validation error for AgentRequest\\ninput.0.content\\n  Input should be a valid list [type=list_type, input_value='hi', input_type=str]\"}\n\n")
    );

    let response = send(
        Request::post(&url)
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from_static(b"hello")))
            .unwrap(),
    )
    .await;
    assert_eq!(response.status, 422);
    assert_eq!(
        response.json().await,
        json!({"detail": [{"type": "dict_type", "loc": ["body"], "msg": "Input should be a valid dictionary", "input": "hello"}]})
    );
}

#[tokio::test]
async fn unknown_paths_other_methods_and_large_bodies_are_refused_like_fastapi() {
    let proxy = Proxy::start(echo_route().max_body(64)).await;
    let response = post_json(&proxy.url(&format!("{PATH}/stream")), &json!({})).await;
    assert_eq!(response.status, 404);
    assert_eq!(response.json().await, json!({"detail": "Not Found"}));

    let response = send(
        Request::builder()
            .method(Method::GET)
            .uri(proxy.url(&format!("{PATH}/process")))
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(response.status, 405);
    assert_eq!(response.header("allow"), "POST");
    assert_eq!(
        response.json().await,
        json!({"detail": "Method Not Allowed"})
    );

    let big = request("s-big", json!([user("msg_u1", &"x".repeat(200))]));
    let response = post_json(&proxy.url(&format!("{PATH}/process")), &big).await;
    assert_eq!(response.status, 413);
    let body = response.json().await;
    assert!(
        body["detail"].as_str().unwrap().contains("64 bytes"),
        "{body}"
    );
}
