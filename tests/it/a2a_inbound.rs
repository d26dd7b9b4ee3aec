//! The A2A inbound through the real server on a real socket: in front of the built-in echo agent, and in front
//! of a scripted AG-UI upstream that can be held mid-run (for what happens while a task runs). One test per
//! behaviour.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use serde_json::{json, Value};

use crate::support;
use crate::support::ag_ui::{self, text_run};
use crate::support::{post_json, send, within, Proxy, Route, Routes, Upstream};

const PATH: &str = "/agents/a2a";

/// An A2A route to the echo agent.
fn echo_route() -> Route {
    Route::new("a2a-echo", PATH, "a2a", "echo")
}

async fn echo_proxy() -> Proxy {
    Proxy::start(echo_route()).await
}

/// An A2A route to a scripted AG-UI upstream.
async fn agui_proxy(upstream: &Upstream) -> Proxy {
    Proxy::start(Route::new("a2a-agui", PATH, "a2a", "ag-ui").upstream(&upstream.url())).await
}

fn message(text: &str) -> Value {
    json!({"kind": "message", "role": "user", "messageId": uuid(), "parts": [{"kind": "text", "text": text}]})
}

fn uuid() -> String {
    agent_bridge::model::new_id("m")
}

fn request(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": "r1", "method": method, "params": params})
}

/// A JSON-RPC call answered with JSON: its `result` (fails on an error).
async fn rpc(proxy: &Proxy, method: &str, params: Value) -> Value {
    let response = post_json(&proxy.url(PATH), &request(method, params)).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), "application/json");
    let mut body = response.json().await;
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["id"], "r1");
    assert!(body.get("error").is_none(), "an error: {body}");
    body["result"].take()
}

/// A JSON-RPC call answered with SSE, read to the end: every `result`.
async fn rpc_stream(proxy: &Proxy, path: &str, method: &str, params: Value) -> Vec<Value> {
    let response = post_json(&proxy.url(path), &request(method, params)).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), "text/event-stream");
    let mut stream = response.sse();
    let events = stream.rest().await;
    assert!(
        !String::from_utf8_lossy(&stream.raw).contains('\r'),
        "LF framing"
    );
    events
        .into_iter()
        .map(|mut event| {
            assert_eq!(event["id"], "r1");
            assert!(event.get("error").is_none(), "an error: {event}");
            event["result"].take()
        })
        .collect()
}

async fn get(url: &str, headers: &[(&str, &str)]) -> support::Response {
    let mut builder = Request::builder().method(Method::GET).uri(url);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    send(builder.body(Full::new(Bytes::new())).unwrap()).await
}

/// The text of a task's artifacts, concatenated.
fn artifact_text(task: &Value) -> String {
    task["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["parts"].as_array().unwrap())
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// The text of a stream's artifact updates, concatenated.
fn streamed_text(results: &[Value]) -> String {
    results
        .iter()
        .filter(|r| r["kind"] == "artifact-update")
        .flat_map(|r| r["artifact"]["parts"].as_array().unwrap())
        .filter_map(|p| p["text"].as_str())
        .collect()
}

async fn wait_for_state(proxy: &Proxy, task_id: &str, state: &str) -> Value {
    within(&format!("task {task_id} to be {state}"), async {
        loop {
            let task = rpc(proxy, "tasks/get", json!({"id": task_id})).await;
            if task["status"]["state"] == state {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

// --- Card ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn a2a_card_is_served_at_both_well_known_paths_with_the_route_url() {
    let skill = toml::toml! { id = "echo" name = "Echo" tags = ["demo"] };
    let route = echo_route()
        .card("name", "Echo")
        .card("description", "Echoes")
        .card("version", "0.9.0")
        .card("skills", vec![skill]);
    let proxy = Proxy::start(route).await;
    let base = proxy.url(PATH);

    let response = get(&format!("{base}/.well-known/agent.json"), &[]).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), "application/json");
    let card = response.json().await;
    assert_eq!(card["url"], base);
    assert_eq!(card["protocolVersion"], "0.2.5");
    assert_eq!(card["name"], "Echo");
    assert_eq!(card["description"], "Echoes");
    assert_eq!(card["version"], "0.9.0");
    assert_eq!(
        card["capabilities"],
        json!({"streaming": true, "pushNotifications": false})
    );
    assert_eq!(card["defaultInputModes"], json!(["text/plain"]));
    assert_eq!(card["defaultOutputModes"], json!(["text/plain"]));
    assert_eq!(card["security"], json!([]));
    assert_eq!(card["skills"][0]["tags"], json!(["demo"]));

    let modern = get(&format!("{base}/.well-known/agent-card.json"), &[])
        .await
        .json()
        .await;
    assert_eq!(modern["protocolVersion"], "0.3.0");
    assert_eq!(modern["url"], base);

    // Behind a proxy it trusts, the url is the one the client reached.
    let behind = Routes::default()
        .set("trusted_proxies", vec!["127.0.0.1"])
        .route(echo_route());
    let behind = Proxy::start(behind).await;
    let forwarded = get(
        &behind.url(&format!("{PATH}/.well-known/agent.json")),
        &[
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "agents.example.com"),
        ],
    )
    .await
    .json()
    .await;
    assert_eq!(
        forwarded["url"],
        format!("https://agents.example.com{PATH}")
    );
}

#[tokio::test]
async fn a2a_card_without_configuration_has_defaults_and_one_skill() {
    let proxy = echo_proxy().await;
    let card = get(&proxy.url(&format!("{PATH}/.well-known/agent.json")), &[])
        .await
        .json()
        .await;
    assert_eq!(card["name"], "a2a-echo");
    assert_eq!(card["skills"].as_array().unwrap().len(), 1);
    assert_eq!(card["skills"][0]["id"], "a2a-echo");
}

#[tokio::test]
async fn a2a_route_at_the_root_serves_the_card_and_rpc_while_healthz_and_longer_routes_win() {
    let routes = Routes::default()
        .route(Route::new("root", "/", "a2a", "echo"))
        .route(Route::new("agui", "/agui", "ag-ui", "echo"));
    let proxy = Proxy::start(routes).await;
    let origin = proxy.url("");
    for card in ["/.well-known/agent.json", "/.well-known/agent-card.json"] {
        let response = get(&proxy.url(card), &[]).await;
        assert_eq!(response.status, 200, "{card}");
        assert_eq!(response.json().await["url"], format!("{origin}/"), "{card}");
    }
    for path in ["/", "/stream"] {
        let answer = post_json(
            &proxy.url(path),
            &request("message/send", json!({"message": message("at the root")})),
        )
        .await
        .json()
        .await;
        assert_eq!(artifact_text(&answer["result"]), "at the root", "{path}");
    }
    let health = get(&proxy.url("/healthz"), &[]).await;
    assert_eq!(health.json().await["status"], "ok");
    let agui = post_json(
        &proxy.url("/agui"),
        &json!({"threadId": "t", "runId": "r", "messages": [{"id": "u", "role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(agui.header("content-type"), "text/event-stream");
    assert_eq!(get(&proxy.url("/elsewhere"), &[]).await.status, 404);
}

// --- Text -------------------------------------------------------------------------------------------------

#[tokio::test]
async fn a2a_to_echo_message_send_returns_the_completed_task_with_the_text() {
    let proxy = echo_proxy().await;
    let task = rpc(
        &proxy,
        "message/send",
        json!({"message": message("hello a2a world")}),
    )
    .await;
    assert_eq!(task["kind"], "task");
    assert_eq!(task["status"]["state"], "completed");
    assert_eq!(artifact_text(&task), "hello a2a world");
    assert_eq!(task["artifacts"].as_array().unwrap().len(), 1);
    assert_eq!(task["history"][0]["role"], "user");
}

#[tokio::test]
async fn a2a_to_echo_message_stream_on_the_stream_path_streams_artifact_chunks() {
    let proxy = echo_proxy().await;
    let results = rpc_stream(
        &proxy,
        &format!("{PATH}/stream"),
        "message/stream",
        json!({"message": message("one two three")}),
    )
    .await;
    assert_eq!(results[0]["kind"], "task");
    assert_eq!(results[0]["status"]["state"], "submitted");
    assert_eq!(results[1]["status"]["state"], "working");
    assert_eq!(streamed_text(&results), "one two three");
    let last = results.last().unwrap();
    assert_eq!(last["kind"], "status-update");
    assert_eq!(last["status"]["state"], "completed");
    assert_eq!(last["final"], true);
    // Every method on both paths: a plain send on `/stream` is answered with JSON.
    let response = post_json(
        &proxy.url(&format!("{PATH}/stream")),
        &request("message/send", json!({"message": message("x")})),
    )
    .await;
    assert_eq!(response.header("content-type"), "application/json");
}

#[tokio::test]
async fn a2a_client_context_id_is_kept_across_turns_and_a_minted_one_is_reusable() {
    let proxy = echo_proxy().await;
    let mut first = message("first");
    first["contextId"] = json!("ctx-client-1");
    let one = rpc(&proxy, "message/send", json!({"message": first})).await;
    let mut second = message("second");
    second["contextId"] = json!("ctx-client-1");
    let two = rpc(&proxy, "message/send", json!({"message": second})).await;
    assert_eq!(one["contextId"], "ctx-client-1");
    assert_eq!(two["contextId"], "ctx-client-1");
    assert_ne!(one["id"], two["id"], "each message is a new task");
    assert_eq!(artifact_text(&two), "second");

    let minted = rpc(&proxy, "message/send", json!({"message": message("a")})).await;
    let context = minted["contextId"].as_str().unwrap().to_owned();
    assert!(!context.is_empty());
    let mut again = message("b");
    again["contextId"] = json!(context);
    let next = rpc(&proxy, "message/send", json!({"message": again})).await;
    assert_eq!(next["contextId"], context.as_str());
}

#[tokio::test]
async fn a2a_task_id_chosen_by_the_client_names_the_new_task() {
    let proxy = echo_proxy().await;
    let mut first = message("mine");
    first["taskId"] = json!("client-task-1");
    let task = rpc(&proxy, "message/send", json!({"message": first})).await;
    assert_eq!(task["id"], "client-task-1");
    assert_eq!(task["status"]["state"], "completed");
    assert_eq!(artifact_text(&task), "mine");
    let got = rpc(&proxy, "tasks/get", json!({"id": "client-task-1"})).await;
    assert_eq!(got["contextId"], task["contextId"]);

    let mut streamed = message("streamed");
    streamed["taskId"] = json!("client-task-2");
    streamed["contextId"] = json!("client-ctx");
    let results = rpc_stream(&proxy, PATH, "message/stream", json!({"message": streamed})).await;
    assert_eq!(results[0]["id"], "client-task-2");
    assert_eq!(results[0]["contextId"], "client-ctx");
    assert_eq!(streamed_text(&results), "streamed");

    let mut again = message("again");
    again["taskId"] = json!("client-task-1");
    let refused = post_json(
        &proxy.url(PATH),
        &request("message/send", json!({"message": again})),
    )
    .await
    .json()
    .await;
    assert_eq!(
        refused["error"]["code"], -32602,
        "a completed task takes no message"
    );
}

// --- Human in the loop ------------------------------------------------------------------------------------

#[tokio::test]
async fn a2a_echo_ask_pauses_as_input_required_and_the_task_id_resumes_it() {
    let proxy = echo_proxy().await;
    let paused = rpc(
        &proxy,
        "message/send",
        json!({"message": message("/ask Which city?")}),
    )
    .await;
    assert_eq!(paused["status"]["state"], "input-required");
    assert_eq!(paused["status"]["message"]["role"], "agent");
    assert_eq!(
        paused["status"]["message"]["parts"][0]["text"],
        "Which city?"
    );

    let mut answer = message("Paris");
    answer["taskId"] = paused["id"].clone();
    answer["contextId"] = paused["contextId"].clone();
    let resumed = rpc(&proxy, "message/send", json!({"message": answer})).await;
    assert_eq!(resumed["id"], paused["id"], "the same task continues");
    assert_eq!(resumed["status"]["state"], "completed");
    assert_eq!(artifact_text(&resumed), "You answered: Paris");
    let roles: Vec<&str> = resumed["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "agent", "user"]);
}

#[tokio::test]
async fn a2a_echo_ask_resumes_from_the_context_id_alone_when_streaming() {
    let proxy = echo_proxy().await;
    let results = rpc_stream(
        &proxy,
        PATH,
        "message/stream",
        json!({"message": message("/ask Ready?")}),
    )
    .await;
    let last = results.last().unwrap();
    assert_eq!(last["status"]["state"], "input-required");
    assert_eq!(last["final"], true);
    let mut answer = message("yes");
    answer["contextId"] = last["contextId"].clone();
    let results = rpc_stream(&proxy, PATH, "message/stream", json!({"message": answer})).await;
    assert_eq!(results[0]["id"], last["taskId"]);
    assert_eq!(streamed_text(&results), "You answered: yes");
    assert_eq!(results.last().unwrap()["status"]["state"], "completed");
}

#[tokio::test]
async fn a2a_echo_ask_resumes_from_the_context_id_alone_on_message_send() {
    let proxy = echo_proxy().await;
    let mut ask = message("/ask Which port?");
    ask["contextId"] = json!("ctx-ask");
    let paused = rpc(&proxy, "message/send", json!({"message": ask})).await;
    assert_eq!(paused["status"]["state"], "input-required");
    let mut answer = message("8080");
    answer["contextId"] = json!("ctx-ask");
    let resumed = rpc(&proxy, "message/send", json!({"message": answer})).await;
    assert_eq!(
        resumed["id"], paused["id"],
        "the paused task of the context continues"
    );
    assert_eq!(artifact_text(&resumed), "You answered: 8080");
    let mut next = message("a new turn");
    next["contextId"] = json!("ctx-ask");
    let fresh = rpc(&proxy, "message/send", json!({"message": next})).await;
    assert_ne!(
        fresh["id"], paused["id"],
        "no paused task: a new task in the context"
    );
    assert_eq!(fresh["contextId"], "ctx-ask");
}

// --- Tasks while they run --------------------------------------------------------------------------------

#[tokio::test]
async fn a2a_tasks_get_shows_a_running_task_and_then_its_result() {
    let upstream = ag_ui::held_agent().await;
    let proxy = agui_proxy(&upstream).await;
    let task = rpc(
        &proxy,
        "message/send",
        json!({"message": message("hi"), "configuration": {"blocking": false}}),
    )
    .await;
    assert!(matches!(
        task["status"]["state"].as_str(),
        Some("submitted" | "working")
    ));
    let id = task["id"].as_str().unwrap().to_owned();

    let during = wait_for_state(&proxy, &id, "working").await;
    within("the first chunk", async {
        while artifact_text(&rpc(&proxy, "tasks/get", json!({"id": id})).await) != "Hel" {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(during["history"].as_array().unwrap().len(), 1);

    upstream.release();
    let after = wait_for_state(&proxy, &id, "completed").await;
    assert_eq!(artifact_text(&after), "Hello");
    assert_eq!(
        after["artifacts"].as_array().unwrap().len(),
        2,
        "one artifact per message"
    );
    let short = rpc(&proxy, "tasks/get", json!({"id": id, "historyLength": 0})).await;
    assert!(short.get("history").is_none());
}

#[tokio::test]
async fn a2a_tasks_cancel_stops_the_upstream_and_cancels_the_task() {
    let upstream = ag_ui::held_agent().await;
    let proxy = agui_proxy(&upstream).await;
    let task = rpc(
        &proxy,
        "message/send",
        json!({"message": message("hi"), "configuration": {"blocking": false}}),
    )
    .await;
    let id = task["id"].as_str().unwrap().to_owned();
    wait_for_state(&proxy, &id, "working").await;

    let canceled = rpc(&proxy, "tasks/cancel", json!({"id": id})).await;
    assert_eq!(canceled["id"], id.as_str());
    assert_eq!(canceled["status"]["state"], "canceled");
    assert!(
        upstream.client_left_within(Duration::from_secs(5)).await,
        "the upstream request is closed"
    );
    assert_eq!(
        rpc(&proxy, "tasks/get", json!({"id": id})).await["status"]["state"],
        "canceled"
    );
    let again = post_json(
        &proxy.url(PATH),
        &request("tasks/cancel", json!({"id": id})),
    )
    .await
    .json()
    .await;
    assert_eq!(again["error"]["code"], -32002);
    let resubscribed = rpc_stream(&proxy, PATH, "tasks/resubscribe", json!({"id": id})).await;
    assert_eq!(resubscribed.len(), 1);
    assert_eq!(resubscribed[0]["status"]["state"], "canceled");
    assert_eq!(resubscribed[0]["final"], true);
}

#[tokio::test]
async fn a2a_resubscribe_to_a_running_task_gets_the_later_events() {
    let upstream = ag_ui::held_agent().await;
    let proxy = agui_proxy(&upstream).await;
    let task = rpc(
        &proxy,
        "message/send",
        json!({"message": message("hi"), "configuration": {"blocking": false}}),
    )
    .await;
    let id = task["id"].as_str().unwrap().to_owned();
    wait_for_state(&proxy, &id, "working").await;

    let response = post_json(
        &proxy.url(PATH),
        &request("tasks/resubscribe", json!({"id": id})),
    )
    .await;
    assert_eq!(response.header("content-type"), "text/event-stream");
    let mut stream = response.sse();
    upstream.release();
    let results: Vec<Value> = stream
        .rest()
        .await
        .into_iter()
        .map(|mut e| e["result"].take())
        .collect();
    assert!(results.iter().all(|r| r["taskId"] == id.as_str()));
    assert!(streamed_text(&results).ends_with("lo"));
    let last = results.last().unwrap();
    assert_eq!(last["status"]["state"], "completed");
    assert_eq!(last["final"], true);
    // A finished task: its status, once.
    let done = rpc_stream(&proxy, PATH, "tasks/resubscribe", json!({"id": id})).await;
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["status"]["state"], "completed");
}

#[tokio::test]
async fn a2a_stream_client_disconnect_cancels_the_task_and_the_upstream() {
    let upstream = ag_ui::held_agent().await;
    let proxy = agui_proxy(&upstream).await;
    let response = post_json(
        &proxy.url(PATH),
        &request("message/stream", json!({"message": message("hi")})),
    )
    .await;
    let mut stream = response.sse();
    let task = stream.next().await.unwrap()["result"].take();
    let id = task["id"].as_str().unwrap().to_owned();
    assert_eq!(
        stream.next().await.unwrap()["result"]["status"]["state"],
        "working"
    );
    drop(stream);

    assert!(
        upstream.client_left_within(Duration::from_secs(5)).await,
        "the upstream request is closed"
    );
    let canceled = wait_for_state(&proxy, &id, "canceled").await;
    assert_eq!(canceled["status"]["state"], "canceled");
}

// --- HTTP-level refusals -----------------------------------------------------------------------------------

#[tokio::test]
async fn a2a_http_refusals_have_their_status_and_a_json_rpc_body() {
    let proxy = Proxy::start(Route::new("small", PATH, "a2a", "echo").max_body(256)).await;

    let response = get(&proxy.url(PATH), &[]).await;
    assert_eq!(response.status, 405);
    assert_eq!(response.header("allow"), "POST");
    assert_eq!(response.json().await["error"]["code"], -32600);

    let wrong_type = Request::builder()
        .method(Method::POST)
        .uri(proxy.url(PATH))
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let response = send(wrong_type).await;
    assert_eq!(response.status, 415);
    let body = response.json().await;
    assert_eq!(body["id"], Value::Null);
    assert_eq!(body["error"]["code"], -32600);

    let big = request(
        "message/send",
        json!({"message": message(&"x".repeat(1000))}),
    );
    let response = post_json(&proxy.url(PATH), &big).await;
    assert_eq!(response.status, 413);
    assert_eq!(response.json().await["error"]["code"], -32600);

    let response = get(&proxy.url(&format!("{PATH}/elsewhere")), &[]).await;
    assert_eq!(response.status, 404);
    assert_eq!(response.json().await["error"]["code"], "NOT_FOUND");

    let response = post_json(
        &proxy.url(&format!("{PATH}/.well-known/agent.json")),
        &json!({}),
    )
    .await;
    assert_eq!(response.status, 405);
    assert_eq!(response.header("allow"), "GET");
}

#[tokio::test]
async fn a2a_blocking_send_client_disconnect_cancels_the_upstream_run() {
    let upstream = ag_ui::held_agent().await;
    let proxy = agui_proxy(&upstream).await;
    let body = request("message/send", json!({"message": message("hi")}));
    let left = tokio::time::timeout(
        Duration::from_millis(300),
        post_json(&proxy.url(PATH), &body),
    )
    .await;
    assert!(left.is_err(), "the blocking send waits for the held run");

    assert!(
        upstream.client_left_within(Duration::from_secs(5)).await,
        "the upstream request is closed"
    );
}

#[tokio::test]
async fn a2a_to_agui_second_turn_in_a_context_carries_the_first_in_its_history() {
    let upstream = text_run("a1", &["Sunny."]).serve().await;
    let proxy = agui_proxy(&upstream).await;
    for words in ["Weather in Beijing?", "And tomorrow?"] {
        let mut turn = message(words);
        turn["contextId"] = json!("ctx-history");
        let task = rpc(&proxy, "message/send", json!({"message": turn})).await;
        assert_eq!(task["status"]["state"], "completed");
        assert_eq!(artifact_text(&task), "Sunny.");
    }
    let received = upstream.received();
    assert_eq!(received.len(), 2);
    let second = received[1].body["messages"].to_string();
    assert!(
        second.contains("Weather in Beijing?")
            && second.contains("Sunny.")
            && second.contains("And tomorrow?"),
        "the conversation so far goes to a full-history upstream: {second}"
    );
}
