//! AG-UI in front of a scripted AG-UI upstream, and AG-UI in front of the built-in echo agent: the proxy on a
//! real socket, one test per behaviour. Every stream a client receives must also pass the AG-UI
//! conservative profile (`support::ag_ui::check`).

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::ag_ui::{self, call, finished, input, started, text, tool, user, Profile};
use crate::support::{Proxy, Reply, Route, Upstream};

const PATH: &str = "/agents/pair";

/// An AG-UI -> AG-UI route to `upstream_url`.
fn pair_route(upstream_url: &str) -> Route {
    Route::new("pair", PATH, "ag-ui", "ag-ui").upstream(upstream_url)
}

async fn pair(upstream: &Upstream) -> Proxy {
    Proxy::start(pair_route(&upstream.url())).await
}

fn hello(run_id: &str) -> Value {
    input("thread-1", run_id, json!([user("u1", "Hello")]))
}

/// Runs [`hello`] through an AG-UI -> AG-UI proxy in front of the scripted `upstream`: the events the client
/// received.
async fn run_hello(upstream: Reply) -> Vec<Value> {
    let upstream = upstream.serve().await;
    let proxy = pair(&upstream).await;
    ag_ui::run(&proxy.url(PATH), &hello("run-1")).await
}

/// An AG-UI agent that starts and finishes its run without a word: for tests of what it receives.
async fn wordless_agent() -> Upstream {
    Reply::sse()
        .event(started())
        .event(finished())
        .serve()
        .await
}

/// An AG-UI agent's run that pauses on an interrupt outcome asking "Which city?" (interrupt `int-1`).
fn asks_which_city() -> Reply {
    Reply::sse()
        .event(started())
        .event(json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "interrupt",
            "interrupts": [{"id": "int-1", "reason": "input", "message": "Which city?"}]}}))
}

// --- Streams ------------------------------------------------------------------------------------------------

#[tokio::test]
async fn agui_to_agui_streams_text_in_order() {
    let upstream = ag_ui::text_run("m1", &["The weather ", "in Beijing ", "is sunny."]);

    let events = run_hello(upstream).await;

    assert_eq!(
        ag_ui::types(&events),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(
        ag_ui::deltas(&events),
        ["The weather ", "in Beijing ", "is sunny."]
    );
    assert_eq!(events[1]["messageId"], "m1");
    assert_eq!(events[1]["role"], "assistant");
}

#[tokio::test]
async fn agui_to_agui_server_side_tool_call_reports_its_result_then_text() {
    let upstream = Reply::sse()
        .event(started())
        .events(text("m1", &["Let me check."]))
        .events(call(
            "call-1",
            "get_weather",
            &["{\"city\":", "\"Beijing\"}"],
        ))
        .event(
            json!({"type": "TOOL_CALL_RESULT", "messageId": "tool-msg-1", "toolCallId": "call-1",
                      "content": "sunny, 25C"}),
        )
        .events(text("m2", &["Beijing is sunny, 25C."]))
        .event(finished());

    let events = run_hello(upstream).await;

    let calls = ag_ui::calls(&events);
    assert_eq!(calls.len(), 1);
    let (id, name, args) = &calls[0];
    assert_eq!((id.as_str(), name.as_str()), ("call-1", "get_weather"));
    assert_eq!(*args, json!({"city": "Beijing"}));
    let start = ag_ui::only(&events, "TOOL_CALL_START");
    assert_eq!(start["parentMessageId"], "m1");

    let result = ag_ui::only(&events, "TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], "call-1");
    assert_eq!(result["content"], "sunny, 25C");
    let types = ag_ui::types(&events);
    let result_at = types.iter().position(|t| *t == "TOOL_CALL_RESULT").unwrap();
    let last_text_at = types
        .iter()
        .rposition(|t| *t == "TEXT_MESSAGE_CONTENT")
        .unwrap();
    assert!(
        result_at < last_text_at,
        "the answer follows the result: {types:?}"
    );
    assert_eq!(
        ag_ui::text_of(&events),
        "Let me check.Beijing is sunny, 25C."
    );
}

#[tokio::test]
async fn agui_to_agui_interleaved_upstream_tool_calls_reach_the_client_one_at_a_time() {
    let upstream = Reply::sse()
        .event(started())
        .event(json!({"type": "TOOL_CALL_START", "toolCallId": "a", "toolCallName": "weather"}))
        .event(json!({"type": "TOOL_CALL_START", "toolCallId": "b", "toolCallName": "news"}))
        .event(
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "b", "delta": "{\"topic\":\"tech\"}"}),
        )
        .event(json!({"type": "TOOL_CALL_ARGS", "toolCallId": "a", "delta": "{\"city\":\"Oslo\"}"}))
        .event(json!({"type": "TOOL_CALL_END", "toolCallId": "b"}))
        .event(json!({"type": "TOOL_CALL_END", "toolCallId": "a"}))
        .event(finished());

    let events = run_hello(upstream).await;

    let calls = ag_ui::calls(&events);
    assert_eq!(
        calls,
        [
            (
                "a".to_owned(),
                "weather".to_owned(),
                json!({"city": "Oslo"})
            ),
            ("b".to_owned(), "news".to_owned(), json!({"topic": "tech"})),
        ]
    );
}

#[tokio::test]
async fn agui_to_agui_text_left_open_is_closed_before_a_tool_call_and_the_call_points_at_it() {
    let upstream = Reply::sse()
        .event(started())
        .event(json!({"type": "TEXT_MESSAGE_START", "messageId": "m1"}))
        .event(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Checking"}))
        .events(call("c1", "get_weather", &[]))
        .event(json!({"type": "STEP_STARTED", "stepName": "lookup"}))
        .event(finished());

    let events = run_hello(upstream).await;

    assert_eq!(
        ag_ui::types(&events),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "STEP_STARTED",
            "STEP_FINISHED",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(
        events[1]["role"], "assistant",
        "an absent role is assistant"
    );
    assert_eq!(events[4]["parentMessageId"], "m1");
    assert_eq!(
        ag_ui::calls(&events)[0].2,
        json!({}),
        "a call without args gets {{}}"
    );
}

#[tokio::test]
async fn agui_to_agui_client_tool_call_round_trip_sends_the_result_upstream_in_full_history() {
    let upstream = Upstream::serve([
        Reply::sse()
            .event(started())
            .events(call(
                "call-2",
                "search_local_files",
                &["{\"keyword\":\"report\"}"],
            ))
            .event(finished()),
        ag_ui::text_run("m3", &["You have 2 reports."]),
    ])
    .await;
    let proxy = pair(&upstream).await;
    let mut run1 = input(
        "thread-3",
        "run-3",
        json!([user("u1", "Find my report files")]),
    );
    run1["tools"] = json!([tool("search_local_files")]);

    let events = ag_ui::run(&proxy.url(PATH), &run1).await;

    let calls = ag_ui::calls(&events);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1, "search_local_files");
    assert_eq!(calls[0].2, json!({"keyword": "report"}));
    assert!(
        ag_ui::all(&events, "TOOL_CALL_RESULT").is_empty(),
        "the client runs it"
    );
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");

    let mut run2 = run1.clone();
    run2["runId"] = json!("run-4");
    run2["messages"] = json!([
        user("u1", "Find my report files"),
        ag_ui::assistant_call(
            "a1",
            "call-2",
            "search_local_files",
            "{\"keyword\":\"report\"}"
        ),
        ag_ui::tool_result(
            "t1",
            "call-2",
            "[\"2024 annual report.pdf\",\"Q3 report.docx\"]"
        ),
    ]);
    let events = ag_ui::run(&proxy.url(PATH), &run2).await;
    assert_eq!(ag_ui::text_of(&events), "You have 2 reports.");

    let received = upstream.received();
    assert_eq!(received.len(), 2);
    let sent = &received[1].body;
    assert_eq!(sent["runId"], "run-4");
    assert_eq!(
        sent["messages"],
        json!([
            {"id": "u1", "role": "user", "content": "Find my report files"},
            {"id": "a1", "role": "assistant", "toolCalls": [{"id": "call-2", "type": "function",
                "function": {"name": "search_local_files", "arguments": "{\"keyword\":\"report\"}"}}]},
            {"id": "t1", "role": "tool", "toolCallId": "call-2",
             "content": "[\"2024 annual report.pdf\",\"Q3 report.docx\"]"},
        ])
    );
    assert_eq!(sent["tools"][0]["name"], "search_local_files");
}

/// Reasoning in both spellings an upstream may use: 1.0 `REASONING_*` and pre-1.0 `THINKING_*`.
fn reasoning_upstream() -> Reply {
    Reply::sse()
        .event(started())
        .event(json!({"type": "REASONING_START", "messageId": "r1"}))
        .event(json!({"type": "REASONING_MESSAGE_START", "messageId": "r1", "role": "reasoning"}))
        .event(json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "r1", "delta": "The user wants weather."}))
        .event(json!({"type": "REASONING_MESSAGE_END", "messageId": "r1"}))
        .event(json!({"type": "REASONING_END", "messageId": "r1"}))
        .event(json!({"type": "THINKING_START", "title": "more"}))
        .event(json!({"type": "THINKING_TEXT_MESSAGE_START"}))
        .event(json!({"type": "THINKING_TEXT_MESSAGE_CONTENT", "delta": "Beijing it is."}))
        .event(json!({"type": "THINKING_TEXT_MESSAGE_END"}))
        .event(json!({"type": "THINKING_END"}))
        .events(text("m1", &["Sunny."]))
        .event(finished())
}

#[tokio::test]
async fn agui_to_agui_reasoning_reaches_the_client_as_reasoning_events_when_the_route_allows() {
    let upstream = reasoning_upstream().serve().await;
    let proxy = Proxy::start(pair_route(&upstream.url()).translate("agui_reasoning", true)).await;
    let profile = Profile {
        reasoning: true,
        ..Profile::CONSERVATIVE
    };

    let events = ag_ui::run_with(&proxy.url(PATH), &hello("run-1"), profile).await;

    let reasoning: Vec<&str> = ag_ui::all(&events, "REASONING_MESSAGE_CONTENT")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(reasoning, ["The user wants weather.", "Beijing it is."]);
    assert_eq!(ag_ui::all(&events, "REASONING_START").len(), 2);
    assert_eq!(ag_ui::all(&events, "REASONING_END").len(), 2);
    assert!(!ag_ui::types(&events)
        .iter()
        .any(|t| t.starts_with("THINKING")));
    assert_eq!(ag_ui::text_of(&events), "Sunny.");
}

#[tokio::test]
async fn agui_to_agui_reasoning_defaults_to_custom_events() {
    let upstream = reasoning_upstream().serve().await;
    let proxy = pair(&upstream).await;

    let events = ag_ui::run(&proxy.url(PATH), &hello("run-1")).await;

    let custom = ag_ui::all(&events, "CUSTOM");
    assert!(custom.iter().all(|e| e["name"] == "agent-bridge.reasoning"));
    let deltas: Vec<&str> = custom
        .iter()
        .filter_map(|e| e["value"]["delta"].as_str())
        .collect();
    assert_eq!(deltas, ["The user wants weather.", "Beijing it is."]);
    let phases: Vec<&str> = custom
        .iter()
        .filter_map(|e| e["value"]["phase"].as_str())
        .collect();
    assert_eq!(phases, ["start", "end", "start", "end"]);
    assert_eq!(ag_ui::text_of(&events), "Sunny.");
}

#[tokio::test]
async fn agui_to_agui_state_snapshot_and_delta_pass_through() {
    let upstream = Reply::sse()
        .event(started())
        .event(json!({"type": "STATE_SNAPSHOT", "snapshot": {"count": 0, "city": "Beijing"}}))
        .event(json!({"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/count", "value": 1}]}))
        .event(finished());

    let events = run_hello(upstream).await;

    assert_eq!(
        ag_ui::only(&events, "STATE_SNAPSHOT")["snapshot"],
        json!({"count": 0, "city": "Beijing"})
    );
    assert_eq!(
        ag_ui::only(&events, "STATE_DELTA")["delta"],
        json!([{"op": "replace", "path": "/count", "value": 1}])
    );
}

#[tokio::test]
async fn agui_to_agui_chunk_events_are_expanded_to_start_content_end() {
    let upstream = Reply::sse()
        .event(started())
        .event(json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "role": "assistant", "delta": "Hel"}))
        .event(json!({"type": "TEXT_MESSAGE_CHUNK", "delta": "lo"}))
        .event(json!({"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "toolCallName": "get_weather",
                      "delta": "{\"city\":"}))
        .event(json!({"type": "TOOL_CALL_CHUNK", "delta": "\"Paris\"}"}))
        .event(finished());

    let events = run_hello(upstream).await;

    assert_eq!(
        ag_ui::types(&events),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(events[1]["messageId"], "m1");
    assert_eq!(ag_ui::text_of(&events), "Hello");
    let calls = ag_ui::calls(&events);
    assert_eq!(calls[0].0, "c1");
    assert_eq!(calls[0].1, "get_weather");
    assert_eq!(calls[0].2, json!({"city": "Paris"}));
}

#[tokio::test]
async fn agui_to_agui_tolerates_crlf_comments_and_data_without_space() {
    let upstream = Reply::sse()
        .frame(": upstream keep-alive\r\n\r\n")
        .frame("event: message\r\nid: 1\r\nretry: 1000\r\ndata:{\"type\":\"RUN_STARTED\",\"threadId\":\"x\",\"runId\":\"y\"}\r\n\r\n")
        .frame("data:{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m1\"}\r\n\r\n")
        .frame("data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"Hello\"}\r\n\r\n")
        // One event over two data lines, its frame split across two writes.
        .frame("data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\r\ndata: \"messageId\":\"m1\",")
        .frame("\"delta\":\" there\"}\r\n\r\n")
        // CR-only line ends.
        .frame("data: {\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m1\"}\r\r")
        .frame(": done\n\ndata:{\"type\":\"RUN_FINISHED\",\"threadId\":\"x\",\"runId\":\"y\"}\r\n\r\n");

    let events = run_hello(upstream).await;

    assert_eq!(ag_ui::text_of(&events), "Hello there");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
}

#[tokio::test]
async fn agui_to_agui_tolerates_nulls_and_snake_case_extras_from_pre_1_0_servers() {
    let upstream = Reply::sse()
        .event(json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r", "parentRunId": null,
                      "timestamp": null, "rawEvent": null}))
        .event(json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": null}))
        .event(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hi"}))
        .event(json!({"type": "TEXT_MESSAGE_END", "messageId": "m1"}))
        .event(json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "lookup",
                      "parentMessageId": null}))
        .event(json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"}))
        .event(json!({"type": "TOOL_CALL_END", "toolCallId": "c1"}))
        .event(json!({"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "c1", "role": "tool",
                      "content": [{"type": "text", "text": "found "}, {"type": "text", "text": "it"}]}))
        .event(json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": null, "result": null,
                      "thread_id": "t", "run_id": "r"}));

    let events = run_hello(upstream).await;

    assert_eq!(ag_ui::text_of(&events), "Hi");
    assert_eq!(
        ag_ui::only(&events, "TOOL_CALL_RESULT")["content"],
        "found it",
        "content parts are flattened to a string"
    );
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
}

#[tokio::test]
async fn agui_to_agui_double_run_error_reaches_the_client_once() {
    // cloudbase-agent-server 0.1.22 on an agent exception.
    let upstream = Reply::sse()
        .event(started())
        .events(text("m1", &["Working on it"]))
        .event(json!({"type": "RUN_ERROR", "message": "boom requested", "run_id": "r", "thread_id": "t"}))
        .event(json!({"type": "RUN_ERROR", "message": "Failed to process agent request: boom requested",
                      "code": "INTERNAL_ERROR", "run_id": "r", "thread_id": "t"}));

    let events = run_hello(upstream).await;

    let error = ag_ui::run_error(&events);
    assert_eq!(error["message"], "boom requested");
    assert_eq!(ag_ui::text_of(&events), "Working on it");
}

#[tokio::test]
async fn agui_to_agui_merges_several_upstream_runs_into_one() {
    // @ag-ui/a2a-middleware: RUN_FINISHED, then another run in the same response.
    let upstream = ag_ui::text_run("m1", &["Part one. "])
        .event(started())
        .events(text("m2", &["Part two."]))
        .event(finished());

    let events = run_hello(upstream).await;

    assert_eq!(ag_ui::text_of(&events), "Part one. Part two.");
    assert_eq!(ag_ui::all(&events, "RUN_STARTED").len(), 1);
    assert_eq!(ag_ui::all(&events, "RUN_FINISHED").len(), 1);
}

#[tokio::test]
async fn agui_upstream_that_stays_open_after_run_finished_still_finishes_the_run() {
    let upstream = ag_ui::text_run("m1", &["Done."]).hang().serve().await;
    // The route timeout is far longer than the wait for a second run: finishing must not wait for it.
    let proxy = Proxy::start(pair_route(&upstream.url()).timeout("60s")).await;

    let events = ag_ui::run(&proxy.url(PATH), &hello("run-1")).await;

    assert_eq!(ag_ui::text_of(&events), "Done.");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    assert!(
        upstream.client_left_within(Duration::from_secs(5)).await,
        "the proxy closes the finished upstream request"
    );
}

#[tokio::test]
async fn agui_to_agui_drops_event_types_outside_the_profile() {
    let upstream = Reply::sse()
        .event(started())
        .event(
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a1", "activityType": "plan",
                      "content": {"steps": 2}}),
        )
        .event(json!({"type": "VENDOR_THING", "x": 1}))
        .events(text("m1", &["Done."]))
        .event(finished());

    let events = run_hello(upstream).await;

    assert_eq!(
        ag_ui::types(&events),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
}

// --- Human in the loop -------------------------------------------------------------------------------

/// An AG-UI -> AG-UI route to `upstream` that pauses through the client's own approval and question tools.
async fn pair_with_hitl_tools(upstream: &Upstream) -> Proxy {
    let route = pair_route(&upstream.url())
        .translate("approval_tool", "approve_action")
        .translate("question_tool", "ask_human");
    Proxy::start(route).await
}

#[tokio::test]
async fn agui_to_agui_question_interrupt_calls_the_question_tool_and_the_answer_resumes_upstream() {
    let upstream = Upstream::serve([
        Reply::sse()
            .event(started())
            .events(text("m1", &["I need one detail."]))
            .event(json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "interrupt",
                "interrupts": [{"id": "int-1", "reason": "input", "message": "Which city?"}]}})),
        ag_ui::text_run("m2", &["Paris is sunny."]),
    ])
    .await;
    let proxy = pair_with_hitl_tools(&upstream).await;
    let mut run1 = input("thread-9", "run-1", json!([user("u1", "Weather?")]));
    run1["tools"] = json!([tool("ask_human")]);

    let events = ag_ui::run(&proxy.url(PATH), &run1).await;

    let calls = ag_ui::calls(&events);
    assert_eq!(calls.len(), 1);
    let (call_id, name, args) = &calls[0];
    assert_eq!(name, "ask_human");
    assert_eq!(args["question"], "Which city?");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");

    let mut run2 = run1.clone();
    run2["runId"] = json!("run-2");
    run2["messages"] = json!([
        user("u1", "Weather?"),
        {"id": "a1", "role": "assistant", "content": "I need one detail."},
        ag_ui::assistant_call("a2", call_id, "ask_human", &args.to_string()),
        ag_ui::tool_result("t1", call_id, "Paris"),
    ]);
    let events = ag_ui::run(&proxy.url(PATH), &run2).await;
    assert_eq!(ag_ui::text_of(&events), "Paris is sunny.");

    let sent = &upstream.received()[1].body;
    assert_eq!(
        sent["resume"],
        json!([{"interruptId": "int-1", "status": "resolved", "payload": "Paris"}])
    );
    assert_eq!(
        sent["messages"],
        json!([
            {"id": "u1", "role": "user", "content": "Weather?"},
            {"id": "a1", "role": "assistant", "content": "I need one detail."},
        ]),
        "the synthetic question call and its answer stay out of the upstream history"
    );
}

#[tokio::test]
async fn agui_to_agui_answered_question_stays_out_of_the_upstream_history_in_later_runs() {
    let upstream = Upstream::serve([
        asks_which_city(),
        ag_ui::text_run("m2", &["Paris is sunny."]),
    ])
    .await;
    let proxy = pair_with_hitl_tools(&upstream).await;
    let mut run = input("thread-12", "run-1", json!([user("u1", "Weather?")]));
    run["tools"] = json!([tool("ask_human")]);
    let events = ag_ui::run(&proxy.url(PATH), &run).await;
    let (call_id, _, args) = ag_ui::calls(&events).remove(0);
    let answered = json!([
        user("u1", "Weather?"),
        ag_ui::assistant_call("a1", &call_id, "ask_human", &args.to_string()),
        ag_ui::tool_result("t1", &call_id, "Paris"),
    ]);
    run["runId"] = json!("run-2");
    run["messages"] = answered.clone();
    ag_ui::run(&proxy.url(PATH), &run).await;

    let mut history = answered.as_array().unwrap().clone();
    history.push(json!({"id": "a2", "role": "assistant", "content": "Paris is sunny."}));
    history.push(user("u2", "And tomorrow?"));
    run["runId"] = json!("run-3");
    run["messages"] = json!(history);
    ag_ui::run(&proxy.url(PATH), &run).await;

    let sent = &upstream.received()[2].body;
    assert_eq!(
        sent["messages"],
        json!([
            {"id": "u1", "role": "user", "content": "Weather?"},
            {"id": "a2", "role": "assistant", "content": "Paris is sunny."},
            {"id": "u2", "role": "user", "content": "And tomorrow?"},
        ]),
    );
    assert!(
        sent.get("resume").is_none(),
        "the interrupt was answered once"
    );
}

#[tokio::test]
async fn agui_to_agui_approval_interrupt_calls_the_approval_tool_and_the_decision_resumes_upstream()
{
    let upstream = Upstream::serve([
        Reply::sse()
            .event(started())
            .events(call("c9", "delete_files", &["{\"pattern\":\"*.tmp\"}"]))
            .event(json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "interrupt",
                "interrupts": [{"id": "int-2", "reason": "approval", "message": "Delete 15 temp files?",
                                "toolCallId": "c9"}]}})),
        ag_ui::text_run("m2", &["Deleted."]),
    ])
    .await;
    let proxy = pair_with_hitl_tools(&upstream).await;
    let mut run1 = input("thread-10", "run-1", json!([user("u1", "Clean up")]));
    run1["tools"] = json!([tool("approve_action")]);

    let events = ag_ui::run(&proxy.url(PATH), &run1).await;

    let calls = ag_ui::calls(&events);
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].1, "delete_files");
    let (call_id, name, args) = &calls[1];
    assert_eq!(name, "approve_action");
    assert_eq!(args["action"], "Delete 15 temp files?");
    assert_eq!(args["tool"], "delete_files");
    assert_eq!(args["arguments"], json!({"pattern": "*.tmp"}));

    let mut run2 = run1.clone();
    run2["runId"] = json!("run-2");
    run2["messages"] = json!([
        user("u1", "Clean up"),
        {"id": "a1", "role": "assistant", "toolCalls": [
            {"id": "c9", "type": "function", "function": {"name": "delete_files", "arguments": "{\"pattern\":\"*.tmp\"}"}},
            {"id": call_id, "type": "function", "function": {"name": "approve_action", "arguments": args.to_string()}},
        ]},
        ag_ui::tool_result("t1", call_id, "{\"approved\":true}"),
    ]);
    let events = ag_ui::run(&proxy.url(PATH), &run2).await;
    assert_eq!(ag_ui::text_of(&events), "Deleted.");

    let sent = &upstream.received()[1].body;
    assert_eq!(
        sent["resume"],
        json!([{"interruptId": "int-2", "status": "resolved", "payload": {"approved": true}}])
    );
    let history = sent["messages"].to_string();
    assert!(
        !history.contains("approve_action") && !history.contains(call_id.as_str()),
        "the synthetic approval call stays out of the upstream history: {history}"
    );
    assert_eq!(
        sent["messages"][1]["toolCalls"],
        json!([{"id": "c9", "type": "function",
                "function": {"name": "delete_files", "arguments": "{\"pattern\":\"*.tmp\"}"}}])
    );
}

#[tokio::test]
async fn agui_to_agui_interrupt_route_passes_the_interrupt_outcome_and_resume_through() {
    let upstream = Upstream::serve([
        asks_which_city(),
        ag_ui::text_run("m2", &["Paris is sunny."]),
    ])
    .await;
    let route = pair_route(&upstream.url()).translate("agui_interrupts", "outcome");
    let proxy = Proxy::start(route).await;
    let profile = Profile {
        interrupts: true,
        ..Profile::CONSERVATIVE
    };
    let run1 = input("thread-11", "run-1", json!([user("u1", "Weather?")]));

    let events = ag_ui::run_with(&proxy.url(PATH), &run1, profile).await;

    assert_eq!(
        ag_ui::text_of(&events),
        "Which city?",
        "the question is shown as text too"
    );
    let outcome = &events.last().unwrap()["outcome"];
    assert_eq!(outcome["type"], "interrupt");
    assert_eq!(outcome["interrupts"][0]["id"], "int-1");
    assert_eq!(outcome["interrupts"][0]["message"], "Which city?");

    let mut run2 = input(
        "thread-11",
        "run-2",
        json!([user("u1", "Weather?"), {"id": "a1", "role": "assistant", "content": "Which city?"}]),
    );
    run2["resume"] = json!([{"interruptId": "int-1", "status": "resolved", "payload": "Paris"}]);
    let events = ag_ui::run_with(&proxy.url(PATH), &run2, profile).await;
    assert_eq!(ag_ui::text_of(&events), "Paris is sunny.");
    assert_eq!(
        upstream.received()[1].body["resume"],
        json!([{"interruptId": "int-1", "status": "resolved", "payload": "Paris"}])
    );
}

// --- What the upstream receives ------------------------------------------------------------------------

#[tokio::test]
async fn agui_to_agui_upstream_receives_the_whole_run_input_and_the_route_headers() {
    std::env::set_var("AGENT_BRIDGE_PAIRS_TEST_KEY", "s3cret");
    let upstream = wordless_agent().await;
    let headers = pair_route(&upstream.url()).upstream_headers(&[
        ("Authorization", "Bearer ${AGENT_BRIDGE_PAIRS_TEST_KEY}"),
        ("X-Team", "pairs"),
    ]);
    let proxy = Proxy::start(headers).await;
    let messages = json!([
        {"id": "s1", "role": "system", "content": "Be brief."},
        {"id": "u1", "role": "user", "content": "Weather in Beijing?"},
        {"id": "a1", "role": "assistant", "content": "Checking."},
        {"id": "u2", "role": "user", "content": [
            {"type": "text", "text": "And this picture?"},
            {"type": "image", "source": {"type": "url", "value": "https://example.com/a.png", "mimeType": "image/png"}}
        ]},
    ]);
    let mut run = input("thread-5", "run-5", messages.clone());
    run["tools"] = json!([{"name": "confirm", "description": "ask the user",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]);
    run["context"] = json!([{"description": "locale", "value": "en"}]);

    ag_ui::run(&proxy.url(PATH), &run).await;

    let request = upstream.only_request();
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/agent");
    assert_eq!(request.header("accept"), "text/event-stream");
    assert_eq!(request.header("content-type"), "application/json");
    assert_eq!(request.header("authorization"), "Bearer s3cret");
    assert_eq!(request.header("x-team"), "pairs");
    assert_eq!(
        request.body,
        json!({
            "threadId": "thread-5",
            "runId": "run-5",
            "messages": messages,
            "tools": run["tools"],
            "context": [{"description": "locale", "value": "en"}],
            "state": {},
            "forwardedProps": {},
        })
    );
}

#[tokio::test]
async fn agui_to_agui_client_state_and_forwarded_props_reach_the_upstream() {
    let upstream = wordless_agent().await;
    let proxy = pair(&upstream).await;
    let mut run = hello("run-1");
    run["state"] = json!({"count": 3, "tags": ["a"]});
    run["forwardedProps"] = json!({"model": "fast"});

    ag_ui::run(&proxy.url(PATH), &run).await;

    let sent = upstream.only_request().body;
    assert_eq!(sent["state"], json!({"count": 3, "tags": ["a"]}));
    assert_eq!(sent["forwardedProps"], json!({"model": "fast"}));
}

#[tokio::test]
async fn agui_to_agui_activity_and_reasoning_messages_stay_out_of_the_upstream_history() {
    let upstream = wordless_agent().await;
    let proxy = pair(&upstream).await;
    let run = input(
        "thread-1",
        "run-1",
        json!([
            user("u1", "Plan my trip"),
            {"id": "act1", "role": "activity", "activityType": "plan", "content": {"steps": 3}},
            {"id": "r1", "role": "reasoning", "content": "thinking..."},
            {"id": "a1", "role": "assistant", "content": "Here is the plan."},
        ]),
    );

    ag_ui::run(&proxy.url(PATH), &run).await;

    let ids: Vec<Value> = upstream.only_request().body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(ids, [json!("u1"), json!("a1")]);
}

// --- Upstream failures -----------------------------------------------------------------------------------

/// [`failed_run`] through an AG-UI pair in front of the scripted `upstream`.
async fn failed_run_in_front_of(upstream: Reply) -> (Vec<Value>, Value) {
    let upstream = upstream.serve().await;
    let proxy = pair(&upstream).await;
    failed_run(&proxy).await
}

/// Runs against a failing upstream: 200, `RUN_STARTED`, then exactly one `RUN_ERROR` (returned), nothing
/// after it.
async fn failed_run(proxy: &Proxy) -> (Vec<Value>, Value) {
    let events = ag_ui::run(&proxy.url(PATH), &hello("run-1")).await;
    assert_eq!(events[0]["type"], "RUN_STARTED");
    let error = ag_ui::run_error(&events).clone();
    (events, error)
}

#[tokio::test]
async fn agui_upstream_refusing_connections_is_reported_as_upstream_unreachable() {
    let refused = Upstream::refused_url().await;
    let proxy = Proxy::start(pair_route(&refused)).await;

    let (events, error) = failed_run(&proxy).await;

    assert_eq!(events.len(), 2);
    assert_eq!(error["code"], "UPSTREAM_UNREACHABLE");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(&refused), "names the upstream: {message}");
}

#[tokio::test]
async fn agui_upstream_run_error_keeps_its_code_and_message() {
    let upstream = Reply::sse()
        .event(started())
        .event(json!({"type": "RUN_ERROR", "message": "quota exhausted", "code": "RATE_LIMITED"}));

    let (_, error) = failed_run_in_front_of(upstream).await;

    assert_eq!(error["code"], "RATE_LIMITED");
    assert_eq!(error["message"], "quota exhausted");
}

#[tokio::test]
async fn agui_upstream_slower_than_the_route_timeout_is_reported_as_upstream_timeout() {
    let upstream = Reply::sse()
        .event(started())
        .events(text("m1", &["Thinking"]).into_iter().take(2))
        .hang()
        .serve()
        .await;
    let proxy = Proxy::start(pair_route(&upstream.url()).timeout("300ms")).await;

    let (events, error) = failed_run(&proxy).await;

    assert_eq!(error["code"], "UPSTREAM_TIMEOUT");
    assert!(error["message"].as_str().unwrap().contains("300ms"));
    assert_eq!(
        ag_ui::text_of(&events),
        "Thinking",
        "what came before the timeout is kept"
    );
    assert!(
        upstream.client_left_within(Duration::from_secs(5)).await,
        "the proxy closes the timed-out upstream request"
    );
}

#[tokio::test]
async fn agui_upstream_http_500_is_reported_with_its_status_and_body() {
    let upstream = Reply::status(500).body("model overloaded, try later");

    let (events, error) = failed_run_in_front_of(upstream).await;

    assert_eq!(events.len(), 2);
    assert_eq!(error["code"], "UPSTREAM_HTTP_ERROR");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("500"), "{message}");
    assert!(message.contains("model overloaded, try later"), "{message}");
}

#[tokio::test]
async fn agui_upstream_sending_non_json_data_is_reported_as_malformed() {
    let upstream = Reply::sse()
        .event(started())
        .frame("data: this is not JSON\n\n")
        .event(finished());

    let (_, error) = failed_run_in_front_of(upstream).await;

    assert_eq!(error["code"], "UPSTREAM_MALFORMED");
}

#[tokio::test]
async fn agui_upstream_ending_without_run_finished_is_reported_as_upstream_eof() {
    let upstream = Reply::sse()
        .event(started())
        .events(text("m1", &["Half an ans"]).into_iter().take(2));

    let (events, error) = failed_run_in_front_of(upstream).await;

    assert_eq!(error["code"], "UPSTREAM_EOF");
    assert_eq!(ag_ui::text_of(&events), "Half an ans");
}

#[tokio::test]
async fn agui_upstream_connection_cut_mid_stream_is_reported_as_upstream_eof() {
    let upstream = Reply::sse()
        .event(started())
        .events(text("m1", &["Half an ans"]).into_iter().take(2))
        .close_mid_stream();

    let (events, error) = failed_run_in_front_of(upstream).await;

    assert_eq!(error["code"], "UPSTREAM_EOF");
    assert_eq!(ag_ui::text_of(&events), "Half an ans");
}

// --- AG-UI -> echo ---------------------------------------------------------------------------------------

fn echo_route() -> Route {
    Route::new("echo", "/echo/ag-ui", "ag-ui", "echo")
}

#[tokio::test]
async fn agui_to_echo_streams_the_last_user_message_word_by_word() {
    let proxy = Proxy::start(echo_route()).await;
    let run = input(
        "thread-e1",
        "run-1",
        json!([user("u0", "earlier"), {"id": "a0", "role": "assistant", "content": "earlier"},
               user("u1", "hello brave new world")]),
    );

    let events = ag_ui::run(&proxy.url("/echo/ag-ui"), &run).await;

    assert_eq!(
        ag_ui::deltas(&events),
        ["hello ", "brave ", "new ", "world"]
    );
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
}

#[tokio::test]
async fn agui_to_echo_interrupt_route_pauses_with_an_outcome_and_resume_answers_it() {
    let proxy = Proxy::start(echo_route().translate("agui_interrupts", "outcome")).await;
    let url = proxy.url("/echo/ag-ui");
    let profile = Profile {
        interrupts: true,
        ..Profile::CONSERVATIVE
    };
    let run1 = input(
        "thread-e4",
        "run-1",
        json!([user("u1", "/ask Which city?")]),
    );

    let events = ag_ui::run_with(&url, &run1, profile).await;

    assert!(ag_ui::calls(&events).is_empty());
    let interrupt = &events.last().unwrap()["outcome"]["interrupts"][0];
    assert_eq!(interrupt["message"], "Which city?");
    let mut run2 = input(
        "thread-e4",
        "run-2",
        json!([user("u1", "/ask Which city?"), {"id": "a1", "role": "assistant", "content": "Which city?"}]),
    );
    run2["resume"] =
        json!([{"interruptId": interrupt["id"], "status": "resolved", "payload": "Oslo"}]);
    let events = ag_ui::run_with(&url, &run2, profile).await;
    assert_eq!(ag_ui::text_of(&events), "You answered: Oslo");
}
