//! The AgentScope outbound through the real server on a real socket: an AG-UI client in front of a scripted
//! agentscope-runtime `/process` endpoint that frames its streams like 1.1.6.post2 (`data: <json>\n\n`, every
//! field written). One test per behaviour; each checks what reached the runtime as well as what the client
//! saw.

use serde_json::{json, Value};

use crate::support::ag_ui::{self, assistant_call, input, tool, tool_result, user};
use crate::support::{Proxy, Received, Reply, Route, Upstream};

const PATH: &str = "/agents/scope";

/// Its AG-UI clients answer pauses as calls of `confirmAction` without declaring it: the route pins the tool
/// mode.
async fn agui_to_agentscope(upstream: &Upstream) -> Proxy {
    let route = Route::new("scope", PATH, "ag-ui", "agentscope")
        .upstream(&upstream.url())
        .translate("model", "route-model")
        .translate("agui_interrupts", "tool");
    Proxy::start(route).await
}

// --- What the scripted runtime streams -----------------------------------------------------------------------

fn response(status: &str) -> Value {
    json!({"sequence_number": null, "object": "response", "status": status, "error": null,
           "id": "response_1", "created_at": 1795311189, "completed_at": null, "output": null,
           "usage": null, "session_id": "echoed"})
}

fn message(id: &str, kind: &str, role: &str, status: &str, content: Value) -> Value {
    json!({"sequence_number": null, "object": "message", "status": status, "error": null, "id": id,
           "type": kind, "role": role, "content": content, "code": null, "message": null, "usage": null,
           "metadata": {}})
}

fn text_delta(message_id: &str, text: &str) -> Value {
    json!({"sequence_number": null, "object": "content", "status": "in_progress", "error": null,
           "type": "text", "index": 0, "delta": true, "msg_id": message_id, "text": text})
}

fn data(message_id: &str, status: &str, data: Value) -> Value {
    json!({"sequence_number": null, "object": "content", "status": status, "error": null,
           "type": "data", "index": 0, "delta": false, "msg_id": message_id, "data": data})
}

/// A whole assistant text turn.
fn text_turn(message_id: &str, text: &str) -> Reply {
    Reply::sse().events([
        response("created"),
        response("in_progress"),
        message(
            message_id,
            "message",
            "assistant",
            "in_progress",
            Value::Null,
        ),
        text_delta(message_id, text),
        message(
            message_id,
            "message",
            "assistant",
            "completed",
            json!([{"object": "content", "type": "text", "text": text, "status": "completed"}]),
        ),
        response("completed"),
    ])
}

fn bodies(upstream: &Upstream) -> Vec<Value> {
    upstream.received().into_iter().map(|r| r.body).collect()
}

fn types(input: &Value) -> Vec<&str> {
    input
        .as_array()
        .expect("input is a list")
        .iter()
        .map(|m| m["type"].as_str().unwrap_or("?"))
        .collect()
}

// --- Tests ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn agui_to_agentscope_sends_full_history_with_one_session_per_thread() {
    let upstream = Upstream::serve([
        text_turn("msg_a", "Hello!"),
        text_turn("msg_b", "Still here."),
        text_turn("msg_c", "New thread."),
    ])
    .await;
    let proxy = agui_to_agentscope(&upstream).await;
    let url = proxy.url(PATH);

    let mut first = input("thread-1", "run-1", json!([user("u1", "Hi")]));
    first["tools"] = json!([tool("change_background")]);
    let events = ag_ui::run(&url, &first).await;
    assert_eq!(ag_ui::text_of(&events), "Hello!");
    let reply_id = ag_ui::only(&events, "TEXT_MESSAGE_START")["messageId"].clone();

    let second = input(
        "thread-1",
        "run-2",
        json!([user("u1", "Hi"), {"id": reply_id, "role": "assistant", "content": "Hello!"},
               user("u2", "Still there?")]),
    );
    assert_eq!(
        ag_ui::text_of(&ag_ui::run(&url, &second).await),
        "Still here."
    );
    let other = input("thread-2", "run-3", json!([user("u9", "Hi")]));
    assert_eq!(
        ag_ui::text_of(&ag_ui::run(&url, &other).await),
        "New thread."
    );

    let received: Vec<Received> = upstream.received();
    assert_eq!(received[0].path, "/agent");
    assert_eq!(received[0].header("accept"), "text/event-stream");
    assert_eq!(received[0].header("content-type"), "application/json");
    let bodies = bodies(&upstream);
    let (one, two, three) = (&bodies[0], &bodies[1], &bodies[2]);

    assert_eq!(one["stream"], true);
    assert_eq!(one["model"], "route-model");
    assert_eq!(
        one["input"],
        json!([{"sequence_number": null, "object": "message", "status": "completed", "error": null,
                "id": "u1", "type": "message", "role": "user",
                "content": [{"sequence_number": null, "object": "content", "status": null, "error": null,
                             "type": "text", "text": "Hi", "index": null, "delta": false, "msg_id": null}],
                "code": null, "message": null, "usage": null, "metadata": null}])
    );
    assert_eq!(
        one["tools"],
        json!([{"type": "function", "function": {"name": "change_background",
               "description": "change_background (client side)",
               "parameters": {"type": "object", "properties": {}}}}])
    );

    // The whole history, every turn.
    assert_eq!(types(&two["input"]), ["message", "message", "message"]);
    assert_eq!(two["input"][1]["role"], "assistant");
    assert_eq!(two["input"][1]["content"][0]["text"], "Hello!");
    assert_eq!(two["input"][2]["content"][0]["text"], "Still there?");

    // One session per thread: stable across its turns, never shared with another thread.
    for body in [one, two, three] {
        assert!(
            body["session_id"].as_str().is_some_and(|s| !s.is_empty()),
            "{body}"
        );
        assert!(
            body["user_id"].as_str().is_some_and(|s| !s.is_empty()),
            "{body}"
        );
    }
    assert_eq!(one["session_id"], two["session_id"]);
    assert_eq!(one["user_id"], two["user_id"]);
    assert_ne!(one["session_id"], three["session_id"]);
    assert_ne!(one["user_id"], three["user_id"]);
}

#[tokio::test]
async fn agui_to_agentscope_client_tool_call_result_returns_as_function_call_output() {
    let call = json!({"call_id": "call_bg", "name": "change_background", "arguments": "{\"color\": \"blue\"}"});
    let upstream = Upstream::serve([
        Reply::sse().events([
            response("created"),
            message("msg_fc", "function_call", "assistant", "in_progress", Value::Null),
            data(
                "msg_fc",
                "in_progress",
                json!({"call_id": "call_bg", "name": "change_background", "arguments": "{\"color\": \"bl\"}"}),
            ),
            data("msg_fc", "completed", call.clone()),
            message(
                "msg_fc",
                "function_call",
                "assistant",
                "completed",
                json!([{"type": "data", "data": call}]),
            ),
            response("completed"),
        ]),
        text_turn("msg_done", "Done, it is blue."),
    ])
    .await;
    let proxy = agui_to_agentscope(&upstream).await;
    let url = proxy.url(PATH);

    let mut first = input("thread-1", "run-1", json!([user("u1", "Make it blue")]));
    first["tools"] = json!([tool("change_background")]);
    let events = ag_ui::run(&url, &first).await;
    assert_eq!(
        ag_ui::calls(&events),
        [(
            "call_bg".to_owned(),
            "change_background".to_owned(),
            json!({"color": "blue"})
        )]
    );

    let mut second = input(
        "thread-1",
        "run-2",
        json!([
            user("u1", "Make it blue"),
            assistant_call(
                "a1",
                "call_bg",
                "change_background",
                "{\"color\": \"blue\"}"
            ),
            tool_result("t1", "call_bg", "done")
        ]),
    );
    second["tools"] = first["tools"].clone();
    assert_eq!(
        ag_ui::text_of(&ag_ui::run(&url, &second).await),
        "Done, it is blue."
    );

    let input = &bodies(&upstream)[1]["input"];
    assert_eq!(
        types(input),
        ["message", "function_call", "function_call_output"]
    );
    assert_eq!(input[1]["role"], "assistant");
    assert_eq!(
        input[1]["content"][0]["data"],
        json!({"call_id": "call_bg", "name": "change_background", "arguments": "{\"color\": \"blue\"}"})
    );
    assert_eq!(input[2]["role"], "tool");
    assert_eq!(
        input[2]["content"][0]["data"],
        json!({"call_id": "call_bg", "name": "change_background", "output": "done"})
    );
}

#[tokio::test]
async fn agui_to_agentscope_approval_is_answered_with_mcp_approval_response() {
    let request = json!({"id": "apr_1", "name": "Shell", "arguments": "{\"command\":\"rm -rf ./old-logs\"}",
                         "server_label": "agent-bridge"});
    let upstream = Upstream::serve([
        Reply::sse().events([
            response("created"),
            message(
                "msg_apr1",
                "mcp_approval_request",
                "assistant",
                "completed",
                json!([{"object": "content", "type": "data", "index": 0, "status": "completed",
                        "data": request}]),
            ),
            response("completed"),
        ]),
        text_turn("msg_ok", "Cleaned up."),
    ])
    .await;
    let proxy = agui_to_agentscope(&upstream).await;
    let url = proxy.url(PATH);

    let first = input("thread-1", "run-1", json!([user("u1", "Clean the logs")]));
    let events = ag_ui::run(&url, &first).await;
    let calls = ag_ui::calls(&events);
    assert_eq!(calls.len(), 1, "{events:#?}");
    let (call_id, name, args) = &calls[0];
    assert_eq!(
        (call_id.as_str(), name.as_str()),
        ("apr_1", "confirmAction")
    );
    assert_eq!(args["tool"], "Shell");
    assert_eq!(args["arguments"], json!({"command": "rm -rf ./old-logs"}));

    let second = input(
        "thread-1",
        "run-2",
        json!([
            user("u1", "Clean the logs"),
            assistant_call("a1", "apr_1", "confirmAction", &args.to_string()),
            tool_result("t1", "apr_1", "{\"approved\": true}")
        ]),
    );
    assert_eq!(
        ag_ui::text_of(&ag_ui::run(&url, &second).await),
        "Cleaned up."
    );

    let input = &bodies(&upstream)[1]["input"];
    // The synthetic confirmAction call and its answer stay out of the runtime's history.
    assert_eq!(
        types(input),
        ["message", "mcp_approval_request", "mcp_approval_response"]
    );
    assert_eq!(input[1]["id"], "msg_apr1");
    assert_eq!(input[1]["content"][0]["data"], request);
    assert_eq!(input[2]["role"], "user");
    assert_eq!(
        input[2]["content"][0]["data"]["approval_request_id"],
        "apr_1"
    );
    assert_eq!(input[2]["content"][0]["data"]["approve"], true);
}

#[tokio::test]
async fn agui_to_agentscope_failed_run_and_busy_session_are_run_errors() {
    let upstream = Upstream::serve([
        Reply::sse().events([
            response("created"),
            json!({"object": "response", "status": "failed", "id": "response_2",
                   "error": {"code": "AGENT_UNKNOWN_ERROR", "message": "Unknown agent error: ValueError: boom"}}),
        ]),
        Reply::sse().frame("data: {\"error\": \"Task u1:c1 is already in RUNNING state.\"}\n\n"),
    ])
    .await;
    let proxy = agui_to_agentscope(&upstream).await;
    let url = proxy.url(PATH);

    let events = ag_ui::run(
        &url,
        &input("thread-1", "run-1", json!([user("u1", "boom")])),
    )
    .await;
    let error = ag_ui::run_error(&events);
    assert_eq!(error["code"], "AGENT_UNKNOWN_ERROR");
    assert_eq!(error["message"], "Unknown agent error: ValueError: boom");

    let events = ag_ui::run(
        &url,
        &input("thread-1", "run-2", json!([user("u1", "again")])),
    )
    .await;
    let error = ag_ui::run_error(&events);
    assert_eq!(error["code"], "AGENTSCOPE_ERROR");
    assert_eq!(error["message"], "Task u1:c1 is already in RUNNING state.");
}

#[tokio::test]
async fn agui_to_agentscope_cut_streams_http_errors_and_json_answers_are_run_errors() {
    let upstream = Upstream::serve([
        Reply::sse()
            .events([
                response("created"),
                message(
                    "msg_cut",
                    "message",
                    "assistant",
                    "in_progress",
                    Value::Null,
                ),
                text_delta("msg_cut", "Counting: 1, 2, "),
            ])
            .close_mid_stream(),
        Reply::sse().events([response("created"), response("in_progress")]),
        Reply::status(422).body("{\"detail\":[{\"type\":\"json_invalid\"}]}"),
        Reply::status(200)
            .header("content-type", "application/json")
            .body("{\"error\": \"Runner not initialized\"}"),
    ])
    .await;
    let proxy = agui_to_agentscope(&upstream).await;
    let url = proxy.url(PATH);
    let turn = |run: &str| input("thread-1", run, json!([user("u1", "count")]));

    let events = ag_ui::run(&url, &turn("run-1")).await;
    assert_eq!(ag_ui::text_of(&events), "Counting: 1, 2, ");
    assert_eq!(ag_ui::run_error(&events)["code"], "UPSTREAM_EOF");

    let events = ag_ui::run(&url, &turn("run-2")).await;
    assert_eq!(ag_ui::run_error(&events)["code"], "UPSTREAM_EOF");

    let events = ag_ui::run(&url, &turn("run-3")).await;
    let error = ag_ui::run_error(&events);
    assert_eq!(error["code"], "UPSTREAM_HTTP_ERROR");
    assert!(
        error["message"].as_str().unwrap().contains("422"),
        "{error}"
    );

    let events = ag_ui::run(&url, &turn("run-4")).await;
    let error = ag_ui::run_error(&events);
    assert_eq!(error["code"], "AGENTSCOPE_ERROR");
    assert_eq!(error["message"], "Runner not initialized");
}

#[tokio::test]
async fn agui_to_agentscope_text_frames_end_with_the_body_unless_it_ends_inside_a_frame() {
    let upstream = Upstream::serve([
        Reply::sse().events([json!({"text": "1, "}), json!({"text": "2"})]),
        Reply::sse()
            .event(json!({"text": "1, "}))
            .frame("data: {\"text\": \"2\"}\n"),
    ])
    .await;
    let proxy = agui_to_agentscope(&upstream).await;
    let url = proxy.url(PATH);
    let turn = |run: &str| input("thread-1", run, json!([user("u1", "count")]));

    let events = ag_ui::run(&url, &turn("run-1")).await;
    assert_eq!(ag_ui::text_of(&events), "1, 2");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");

    let events = ag_ui::run(&url, &turn("run-2")).await;
    assert_eq!(ag_ui::run_error(&events)["code"], "UPSTREAM_EOF");
}
