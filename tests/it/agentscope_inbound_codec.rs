//! Golden tests of the AgentScope inbound, reviewed as files under `tests/fixtures/agentscope/inbound/`. Each
//! goes through `Inbound::serve` (request decoding, the run lock and the run's encoder, without HTTP), with a
//! scripted canonical event stream standing in for the route's translator:
//!
//! - `errors.json`: bad requests, each with the exact answer: `{"status": 422, "json": …}` (FastAPI's
//!   answer to a body that is not a JSON object) or `{"status": 200, "frame": "<data>"}` (the runtime's one
//!   bare error frame for a body that does not fit `AgentRequest`);
//! - `streams/<case>.sse`: a canonical event sequence as the SSE answer, checked against the runtime's
//!   lifecycle (`specs/agentscope.md` §1.4, §2.3) before it is compared.
//!
//! Minted ids (`response_<uuid>`, `msg_<uuid>`) are replaced by numbered placeholders (`response_#1`, …) in
//! order of first appearance, and unix timestamps (`created_at`, `completed_at`) by `<timestamp>`.
//! `UPDATE_GOLDEN=1 cargo test --test it agentscope_inbound_codec::` rewrites the expected output instead
//! of comparing; review the diff before keeping it.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_bridge::error::Error;
use agent_bridge::model::{
    Artifact, Event, Interrupt, InterruptKind, Outcome, Part, ResumeStatus, Turn, Usage,
};
use agent_bridge::protocol::agentscope::{Inbound, InboundOptions};
use agent_bridge::route_state::RouteState;
use futures_util::stream;
use http_body_util::BodyExt;
use serde_json::{json, Value};

use crate::support::canonical::{call, finished, text};
use crate::support::golden;

// ---------------------------------------------------------------------------------------------------------
// The harness

fn inbound() -> Inbound {
    Inbound::new(InboundOptions::default(), &RouteState::default())
}

/// One answer of the inbound.
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

impl Answer {
    /// The `data` of every SSE frame, parsed.
    fn events(&self) -> Vec<Value> {
        assert_eq!(
            self.content_type, "text/event-stream; charset=utf-8",
            "{}",
            self.body
        );
        assert!(self.body.ends_with("\n\n"), "whole frames: {:?}", self.body);
        self.body
            .split_terminator("\n\n")
            .map(|frame| {
                let data = frame
                    .strip_prefix("data: ")
                    .expect("one data line per frame");
                assert!(!data.contains('\n'), "one line: {frame:?}");
                serde_json::from_str(data).expect("JSON data")
            })
            .collect()
    }
}

async fn serve(inbound: &Inbound, body: &str, events: Vec<Event>) -> Answer {
    let response = inbound
        .serve(body.as_bytes(), "", None, move |_turn| stream::iter(events))
        .await;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = tokio::time::timeout(Duration::from_secs(10), response.into_body().collect())
        .await
        .expect("the answer ends")
        .expect("infallible")
        .to_bytes();
    Answer {
        status,
        content_type,
        body: String::from_utf8(bytes.to_vec()).expect("UTF-8"),
    }
}

fn user(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "text", "text": text}]})
}

fn request(input: Value) -> Value {
    json!({"input": input, "stream": true, "session_id": "s1", "user_id": "u1"})
}

fn run(middle: Vec<Event>, last: Event) -> Vec<Event> {
    let mut events = vec![Event::RunStarted];
    events.extend(middle);
    events.push(last);
    events
}

// ---------------------------------------------------------------------------------------------------------
// Bad requests

#[tokio::test]
async fn bad_requests_get_the_runtimes_exact_answer() {
    let inbound = inbound();
    let path = fixture("errors.json");
    let mut cases: Vec<Value> =
        serde_json::from_str(&fs::read_to_string(&path).unwrap()).expect("errors.json is an array");
    let mut names = HashSet::new();
    for case in &mut cases {
        let name = case["name"].as_str().expect("a case name").to_owned();
        assert!(names.insert(name.clone()), "duplicate case {name}");
        let body = match (&case["raw"], &case["body"]) {
            (Value::String(raw), Value::Null) => raw.clone(),
            (Value::Null, body) => body.to_string(),
            _ => panic!("{name}: give exactly one of `raw` (text) or `body` (JSON)"),
        };
        // A run that started would hang: only refusals may answer.
        let answer = serve(&inbound, &body, Vec::new()).await;
        let got = match answer.status {
            422 => {
                assert_eq!(answer.content_type, "application/json", "{name}");
                json!({"status": 422, "json": serde_json::from_str::<Value>(&answer.body).unwrap()})
            }
            200 => {
                let events = answer.events();
                assert_eq!(events.len(), 1, "{name}: one frame, then the end");
                assert!(events[0].get("object").is_none(), "{name}: a bare frame");
                let data = answer.body.strip_prefix("data: ").unwrap().trim_end();
                json!({"status": 200, "frame": data})
            }
            other => panic!("{name}: unexpected status {other}: {}", answer.body),
        };
        if golden::updating() {
            case["expected"] = got;
        } else {
            assert_eq!(got, case["expected"], "{name}");
        }
    }
    if golden::updating() {
        let mut text = serde_json::to_string_pretty(&cases).unwrap();
        text.push('\n');
        fs::write(&path, text).unwrap();
    }
}

#[tokio::test]
async fn a_second_request_for_a_running_session_gets_the_runtimes_lock_error() {
    let inbound = inbound();
    let body = request(json!([user("hi")])).to_string();
    let running = inbound
        .serve(body.as_bytes(), "", None, |_| stream::pending::<Event>())
        .await;
    let second = serve(&inbound, &body, Vec::new()).await;
    assert_eq!(second.status, 200);
    assert_eq!(
        second.body,
        "data: {\"error\": \"Task u1:s1 is already in RUNNING state.\"}\n\n"
    );
    drop(running);
    let third = serve(
        &inbound,
        &body,
        run(text("m1", &["ok"]), finished(Outcome::Completed)),
    )
    .await;
    assert_eq!(third.events().last().unwrap()["status"], "completed");
}

// ---------------------------------------------------------------------------------------------------------
// Event sequences as the stream

#[tokio::test]
async fn text_streams_as_deltas_then_the_completed_content_message_and_response() {
    stream_golden(
        "text_completed",
        request(json!([user("hello")])),
        run(
            text("msg_fa8a", &["echo: ", "hello"]),
            finished(Outcome::Completed),
        ),
    )
    .await;
}

#[tokio::test]
async fn a_server_side_tool_call_is_a_plugin_call_with_whole_arguments_then_its_output() {
    let mut middle = call("call_1", "get_weather", &["{\"city\": ", "\"Beijing\"}"]);
    middle.push(Event::ToolResult {
        call_id: "call_1".to_owned(),
        message_id: "msg_result".to_owned(),
        content: "[{\"type\": \"text\", \"text\": \"sunny\"}]".to_owned(),
        is_error: false,
    });
    middle.extend(text("msg_text", &["It is ", "sunny."]));
    stream_golden(
        "plugin_call",
        request(json!([user("use tool")])),
        run(middle, finished(Outcome::Completed)),
    )
    .await;
}

#[tokio::test]
async fn a_client_tool_call_is_a_function_call_and_the_response_completes() {
    let mut body = request(json!([user("Change the background to blue")]));
    body["tools"] = json!([{"type": "function", "function": {"name": "change_background", "description": "Paint", "parameters": {"type": "object", "properties": {"color": {"type": "string"}}}}}]);
    let mut middle = text("msg_a", &["Sure."]);
    middle.extend(call(
        "call_1",
        "change_background",
        &["{\"color\":\"blue\"}"],
    ));
    stream_golden(
        "function_call",
        body,
        run(middle, finished(Outcome::Completed)),
    )
    .await;
}

#[tokio::test]
async fn reasoning_is_a_reasoning_message_and_empty_messages_are_not_sent() {
    let mut middle = vec![
        Event::ReasoningStart {
            message_id: "r1".to_owned(),
        },
        Event::ReasoningDelta {
            message_id: "r1".to_owned(),
            delta: "The user wants ".to_owned(),
        },
        Event::ReasoningDelta {
            message_id: "r1".to_owned(),
            delta: "a greeting.".to_owned(),
        },
        Event::ReasoningEnd {
            message_id: "r1".to_owned(),
        },
    ];
    middle.extend(text("empty", &[]));
    middle.extend(text("m1", &["Hi!"]));
    stream_golden(
        "reasoning",
        request(json!([user("hi")])),
        run(middle, finished(Outcome::Completed)),
    )
    .await;
}

#[tokio::test]
async fn an_approval_interrupt_is_an_mcp_approval_request_then_the_response_completes() {
    let middle = vec![Event::Interrupt(Interrupt {
        id: "int_1".to_owned(),
        kind: InterruptKind::Approval {
            tool: "Shell".to_owned(),
            args: json!({"command": "rm -rf ./old-logs"}),
            hint: Some("Delete the old logs?".to_owned()),
        },
    })];
    stream_golden(
        "interrupt_approval",
        request(json!([user("clean up")])),
        run(middle, finished(Outcome::Interrupted)),
    )
    .await;
}

#[tokio::test]
async fn a_question_is_an_approval_request_of_the_question_tool() {
    let mut middle = text("m1", &["Let me check."]);
    middle.push(Event::Interrupt(Interrupt {
        id: "int_q".to_owned(),
        kind: InterruptKind::Question {
            text: "Which city?".to_owned(),
            options: vec!["Paris".to_owned(), "Rome".to_owned()],
        },
    }));
    stream_golden(
        "interrupt_question",
        request(json!([user("weather")])),
        run(middle, finished(Outcome::Interrupted)),
    )
    .await;
}

#[tokio::test]
async fn an_agent_error_fails_the_response_like_the_runtime() {
    stream_golden(
        "agent_error",
        request(json!([user("boom")])),
        run(
            Vec::new(),
            Event::RunError(Error::upstream_agent(
                "AGENT_UNKNOWN_ERROR",
                "Unknown agent error: ValueError: boom requested",
            )),
        ),
    )
    .await;
}

#[tokio::test]
async fn an_upstream_failure_after_some_text_fails_the_response_with_that_output() {
    stream_golden(
        "upstream_timeout",
        request(json!([user("slow")])),
        run(
            text("m1", &["Partial "]),
            Event::RunError(Error::upstream_timeout(
                "upstream run took longer than the route's timeout of 120s",
            )),
        ),
    )
    .await;
}

#[tokio::test]
async fn usage_and_artifacts_are_kept_and_events_without_a_form_are_dropped() {
    let middle = vec![
        Event::StepStarted {
            name: "plan".to_owned(),
        },
        Event::StateSnapshot(json!({"city": "Beijing"})),
        Event::Custom {
            name: "vendor.thing".to_owned(),
            value: json!(1),
        },
        Event::Artifact(Artifact {
            id: "chart-1".to_owned(),
            name: Some("chart".to_owned()),
            parts: vec![
                Part::Text("Rain by day".to_owned()),
                Part::Data(json!({"kind": "bar", "values": [1, 2]})),
            ],
            append: false,
            last_chunk: true,
        }),
        Event::StepFinished {
            name: "plan".to_owned(),
        },
        Event::Usage(Usage {
            input_tokens: Some(3),
            output_tokens: Some(4),
            total_tokens: Some(7),
        }),
    ];
    stream_golden(
        "usage_artifact_dropped",
        request(json!([user("chart")])),
        run(middle, finished(Outcome::Completed)),
    )
    .await;
}

#[tokio::test]
async fn a_cancelled_run_ends_with_a_canceled_response() {
    stream_golden(
        "cancelled",
        request(json!([user("stop")])),
        run(Vec::new(), finished(Outcome::Cancelled)),
    )
    .await;
}

#[tokio::test]
async fn stream_false_streams_all_the_same() {
    let mut body = request(json!([user("hello")]));
    body["stream"] = json!(false);
    stream_golden(
        "stream_false",
        body,
        run(text("m1", &["hello"]), finished(Outcome::Completed)),
    )
    .await;
}

const STREAM_CASES: &[&str] = &[
    "text_completed",
    "plugin_call",
    "function_call",
    "reasoning",
    "interrupt_approval",
    "interrupt_question",
    "agent_error",
    "upstream_timeout",
    "usage_artifact_dropped",
    "cancelled",
    "stream_false",
];

#[test]
fn every_stream_fixture_has_a_golden_test() {
    let mut found: Vec<String> = fs::read_dir(fixture("streams"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    found.sort();
    let mut known: Vec<String> = STREAM_CASES
        .iter()
        .map(|case| format!("{case}.sse"))
        .collect();
    known.sort();
    assert_eq!(found, known, "stream fixtures and STREAM_CASES differ");
}

async fn stream_golden(case: &str, body: Value, events: Vec<Event>) {
    assert!(STREAM_CASES.contains(&case), "add {case} to STREAM_CASES");
    let answer = serve(&inbound(), &body.to_string(), events).await;
    assert_eq!(answer.status, 200);
    check_stream(&answer.events(), &body);
    golden(&format!("streams/{case}.sse"), &mask(&answer.body));
}

/// The runtime's lifecycle (`specs/agentscope.md` §1.4, §2.3): sequence numbers 0, 1, 2, …; `response`
/// created, in_progress, then messages each opened (`in_progress`, no content) before its contents and
/// closed (`completed`, repeating them) before the next, then exactly one terminal response, last, whose
/// `output` repeats every completed message.
fn check_stream(events: &[Value], request: &Value) {
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], json!(n), "{event}");
        for field in ["object", "status", "error"] {
            assert!(event.get(field).is_some(), "{field} is written: {event}");
        }
    }
    let response_id = &events[0]["id"];
    assert!(response_id.as_str().unwrap().starts_with("response_"));
    for (event, status) in events.iter().zip(["created", "in_progress"]) {
        assert_eq!(event["object"], "response");
        assert_eq!(event["status"], status);
        assert_eq!(event["output"], Value::Null);
    }
    let last = events.last().unwrap();
    assert_eq!(last["object"], "response");
    for event in events {
        if event["object"] == "response" {
            assert_eq!(&event["id"], response_id);
            assert_eq!(event["session_id"], request["session_id"]);
            for field in ["created_at", "completed_at", "output", "usage"] {
                assert!(event.get(field).is_some(), "{field} is written: {event}");
            }
        }
    }
    let terminal: Vec<_> = events
        .iter()
        .filter(|e| {
            e["object"] == "response"
                && !matches!(e["status"].as_str(), Some("created" | "in_progress"))
        })
        .collect();
    assert_eq!(terminal.len(), 1, "one terminal response");
    let mut open: Option<&Value> = None;
    let mut completed = Vec::new();
    for event in &events[2..events.len() - 1] {
        match event["object"].as_str() {
            Some("message") if event["status"] == "in_progress" => {
                assert!(
                    open.is_none(),
                    "a message opens after the last one closed: {event}"
                );
                assert_eq!(event["content"], Value::Null);
                assert!(event["id"].as_str().is_some_and(|id| !id.is_empty()));
                open = Some(event);
            }
            Some("message") => {
                assert_eq!(event["status"], "completed", "{event}");
                let opened = open.take().expect("a completed message was opened");
                assert_eq!(event["id"], opened["id"]);
                assert_eq!(event["type"], opened["type"]);
                assert!(!event["content"].as_array().unwrap().is_empty());
                completed.push(event.clone());
            }
            Some("content") => {
                let opened = open.expect("content inside a message");
                assert_eq!(event["msg_id"], opened["id"], "{event}");
                let delta = event["delta"] == true;
                assert_eq!(
                    delta,
                    event["status"] == "in_progress" && event["type"] == "text"
                );
            }
            other => panic!("unexpected object {other:?}: {event}"),
        }
    }
    assert!(open.is_none(), "every message is completed before the end");
    let output = &last["output"];
    if completed.is_empty() {
        assert_eq!(output, &Value::Null);
    } else {
        assert_eq!(
            output,
            &Value::Array(completed),
            "output repeats the completed messages"
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// Turns

#[tokio::test]
async fn the_request_becomes_a_full_history_turn_and_an_approval_answer_its_resume() {
    let inbound = inbound();
    let turns: Arc<Mutex<Vec<Turn>>> = Arc::default();
    let seen = Arc::clone(&turns);
    let body = json!({
        "input": [
            user("clean up"),
            {"id": "msg_apr", "type": "mcp_approval_request", "role": "assistant", "status": "completed", "content": [{"type": "data", "data": {"id": "int_1", "name": "Shell", "arguments": "{}", "server_label": "agent-bridge"}}]},
            {"type": "mcp_approval_response", "role": "user", "content": [{"type": "data", "data": {"approval_request_id": "int_1", "approve": true}}]}
        ],
        "session_id": "s9", "model": "qwen-max", "temperature": 0.2, "max_tokens": 64
    });
    let response = inbound
        .serve(body.to_string().as_bytes(), "", None, move |turn| {
            seen.lock().unwrap().push(turn);
            stream::iter(run(Vec::new(), finished(Outcome::Completed)))
        })
        .await;
    let _ = response.into_body().collect().await.unwrap();
    let turns = turns.lock().unwrap();
    let turn = &turns[0];
    assert_eq!(turn.conversation, "s9");
    assert!(turn.run_id.starts_with("response_"));
    assert_eq!(
        turn.messages.len(),
        1,
        "only the user message: {:?}",
        turn.messages
    );
    assert_eq!(turn.messages[0].text(), "clean up");
    assert_eq!(turn.options.model.as_deref(), Some("qwen-max"));
    assert_eq!(turn.options.temperature, Some(0.2));
    assert_eq!(turn.options.max_tokens, Some(64));
    assert_eq!(turn.resume.len(), 1);
    assert_eq!(turn.resume[0].interrupt_id, "int_1");
    assert_eq!(turn.resume[0].status, ResumeStatus::Resolved);
    assert_eq!(turn.resume[0].payload, Some(json!({"approved": true})));
}

// ---------------------------------------------------------------------------------------------------------
// Files

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agentscope/inbound")
        .join(name)
}

fn golden(name: &str, actual: &str) {
    golden::check(&fixture(name), actual);
}

/// Minted uuids (`8-4-4-4-12` hex) become `#<n>` by first appearance; unix timestamps `<timestamp>`.
fn mask(text: &str) -> String {
    let mut numbers: HashMap<String, usize> = HashMap::new();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(uuid) = rest.get(..36).filter(|s| is_uuid(s)) {
            let next = numbers.len() + 1;
            let n = *numbers.entry(uuid.to_owned()).or_insert(next);
            out.push_str(&format!("#{n}"));
            rest = &rest[36..];
            continue;
        }
        let mut masked = false;
        for key in ["\"created_at\":", "\"completed_at\":"] {
            if let Some(after) = rest.strip_prefix(key) {
                let digits =
                    after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                if digits > 0 {
                    out.push_str(key);
                    out.push_str("<timestamp>");
                    rest = &after[digits..];
                    masked = true;
                }
                break;
            }
        }
        if masked {
            continue;
        }
        let ch = rest.chars().next().unwrap();
        out.push(ch);
        rest = &rest[ch.len_utf8()..];
    }
    out
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit() && !c.is_ascii_uppercase(),
        })
}
