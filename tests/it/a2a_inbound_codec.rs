//! Golden tests of the A2A inbound, reviewed as files under `tests/fixtures/a2a/inbound/`. Each goes through
//! `Inbound::call` (the whole JSON-RPC layer, the task registry and the run's encoder, without HTTP), with a
//! scripted canonical event stream standing in for the route's translator:
//!
//! - `errors.json`: bad requests, each with the exact JSON-RPC error answer (`"sse": true` for the streaming
//!   methods, answered as one SSE event). `{{completed}}`, `{{canceled}}`, `{{running}}` and `{{paused}}`
//!   stand for the ids of tasks the test creates first;
//! - `streams/<case>.stream.sse` and `streams/<case>.send.json`: a canonical event sequence as the
//!   `message/stream` answer and as the blocking `message/send` result.
//!
//! Ids the proxy mints (`task_<uuid>`, ...) are replaced by numbered placeholders (`task_#1`, ...) in order of
//! first appearance, and timestamps by `<timestamp>`. `UPDATE_GOLDEN=1 cargo test --test it
//! a2a_inbound_codec::` rewrites the expected output instead of comparing; review the diff before keeping it.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_bridge::config::{Config, RouteConfig};
use agent_bridge::error::Error;
use agent_bridge::model::{
    Artifact, Event, History, Interrupt, InterruptKind, Outcome, Part, ResumeStatus, Role, Turn,
    Usage,
};
use agent_bridge::protocol::a2a::Inbound;
use agent_bridge::route_state::RouteState;
use agent_bridge::store::Documents;
use futures_util::stream::{self, BoxStream, StreamExt};
use http_body_util::BodyExt;
use serde_json::{json, Value};

use crate::support::canonical::{finished, text};
use crate::support::golden;
use crate::support::Route;

// ---------------------------------------------------------------------------------------------------------
// The harness

fn route(translate: &[(&str, bool)]) -> RouteConfig {
    let route = Route::new("a2a", "/a2a", "a2a", "echo").translate_all(translate);
    Config::parse(&route.to_string(), "test.toml")
        .expect("the test route parses")
        .routes
        .remove(0)
}

/// The inbound of a route from A2A to echo with the `translate` options.
fn inbound(translate: &[(&str, bool)]) -> Inbound {
    let route = route(translate);
    Inbound::new(
        &route,
        route.translate.read().expect("the options read"),
        &RouteState::default(),
    )
}

/// One answer of the inbound.
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        assert_eq!(self.content_type, "application/json", "{}", self.body);
        serde_json::from_str(&self.body).expect("a JSON body")
    }

    /// The `data` of every SSE frame, parsed.
    fn events(&self) -> Vec<Value> {
        assert_eq!(self.content_type, "text/event-stream", "{}", self.body);
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

/// Events a script runs: these, then the end of the stream or a stream that never ends.
fn script(events: Vec<Event>, then_hang: bool) -> BoxStream<'static, Event> {
    let events = stream::iter(events);
    if then_hang {
        events.chain(stream::pending()).boxed()
    } else {
        events.boxed()
    }
}

async fn call_with(inbound: &Inbound, body: &str, events: BoxStream<'static, Event>) -> Answer {
    let response = inbound
        .call(body.as_bytes(), "", &Documents::in_memory(), move |_turn| {
            events
        })
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

async fn call(inbound: &Inbound, body: &Value, events: Vec<Event>) -> Answer {
    call_with(inbound, &body.to_string(), script(events, false)).await
}

fn request(id: Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn user_message(text: &str) -> Value {
    json!({"kind": "message", "role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": text}]})
}

fn send(message: Value) -> Value {
    request(json!("r1"), "message/send", json!({"message": message}))
}

fn question(id: &str, text: &str) -> Event {
    Event::Interrupt(Interrupt {
        id: id.to_owned(),
        kind: InterruptKind::Question {
            text: text.to_owned(),
            options: Vec::new(),
        },
    })
}

fn completed_run(words: &[&str]) -> Vec<Event> {
    let mut events = vec![Event::RunStarted];
    events.extend(text("m1", words));
    events.push(finished(Outcome::Completed));
    events
}

fn paused_run(interrupt_id: &str) -> Vec<Event> {
    vec![
        Event::RunStarted,
        question(interrupt_id, "Which city?"),
        finished(Outcome::Interrupted),
    ]
}

// ---------------------------------------------------------------------------------------------------------
// The JSON-RPC error table

#[tokio::test]
async fn bad_requests_get_the_exact_json_rpc_error() {
    let inbound = inbound(&[]);
    let ids = seed_tasks(&inbound).await;
    let path = fixture("errors.json");
    let mut cases: Vec<Value> =
        serde_json::from_str(&fs::read_to_string(&path).unwrap()).expect("errors.json is an array");
    let mut names = std::collections::HashSet::new();
    for case in &mut cases {
        let name = case["name"].as_str().expect("a case name").to_owned();
        assert!(names.insert(name.clone()), "duplicate case {name}");
        let body = match (&case["raw"], &case["body"]) {
            (Value::String(raw), Value::Null) => raw.clone(),
            (Value::Null, body) => body.to_string(),
            _ => panic!("{name}: give exactly one of `raw` (text) or `body` (JSON)"),
        };
        let answer = call_with(&inbound, &substitute(&body, &ids), script(Vec::new(), true)).await;
        assert_eq!(answer.status, 200, "{name}: JSON-RPC errors are HTTP 200");
        let got = if case["sse"] == true {
            let events = answer.events();
            assert_eq!(events.len(), 1, "{name}: one SSE event, then the end");
            events.into_iter().next().unwrap()
        } else {
            answer.json()
        };
        assert!(got["error"]["code"].is_i64(), "{name}: an error: {got}");
        let got: Value = serde_json::from_str(&unsubstitute(&got.to_string(), &ids)).unwrap();
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

/// Creates the tasks the error cases refer to; their ids by placeholder name.
async fn seed_tasks(inbound: &Inbound) -> Vec<(&'static str, String)> {
    let completed = call(inbound, &send(user_message("hi")), completed_run(&["ok"])).await;
    let completed = completed.json()["result"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let to_cancel = call(inbound, &send(user_message("hi")), paused_run("int-1")).await;
    let canceled = to_cancel.json()["result"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = call(
        inbound,
        &request(json!(2), "tasks/cancel", json!({"id": canceled})),
        Vec::new(),
    )
    .await;
    assert_eq!(answer.json()["result"]["status"]["state"], "canceled");

    let message = user_message("hi");
    let mut paused_message = message.clone();
    paused_message["contextId"] = json!("ctx-paused");
    let paused = call(inbound, &send(paused_message), paused_run("int-2")).await;
    let paused = paused.json()["result"]["id"].as_str().unwrap().to_owned();

    let background = request(
        json!("r1"),
        "message/send",
        json!({"message": message, "configuration": {"blocking": false}}),
    );
    let running = call_with(
        inbound,
        &background.to_string(),
        script(vec![Event::RunStarted], true),
    )
    .await;
    let running = running.json()["result"]["id"].as_str().unwrap().to_owned();
    wait_for_state(inbound, &running, "working").await;
    vec![
        ("completed", completed),
        ("canceled", canceled),
        ("paused", paused),
        ("running", running),
    ]
}

async fn wait_for_state(inbound: &Inbound, task_id: &str, state: &str) {
    for _ in 0..200 {
        let get = request(json!(1), "tasks/get", json!({"id": task_id}));
        if call(inbound, &get, Vec::new()).await.json()["result"]["status"]["state"] == state {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("task {task_id} never became {state}");
}

fn substitute(text: &str, ids: &[(&str, String)]) -> String {
    ids.iter().fold(text.to_owned(), |text, (name, id)| {
        text.replace(&format!("{{{{{name}}}}}"), id)
    })
}

fn unsubstitute(text: &str, ids: &[(&str, String)]) -> String {
    ids.iter().fold(text.to_owned(), |text, (name, id)| {
        text.replace(id, &format!("{{{{{name}}}}}"))
    })
}

// ---------------------------------------------------------------------------------------------------------
// Event sequences as the stream and as the blocking result

#[tokio::test]
async fn text_streams_as_artifact_chunks_and_completes() {
    stream_golden(
        "text_completed",
        &[],
        completed_run(&["The weather ", "in Beijing ", "is sunny."]),
    )
    .await;
}

#[tokio::test]
async fn two_messages_are_two_artifacts_and_the_status_message_option_repeats_the_reply() {
    let mut events = vec![Event::RunStarted];
    events.extend(text("m1", &["Looking it up."]));
    events.extend(text("m2", &["It is ", "sunny."]));
    events.push(finished(Outcome::Completed));
    stream_golden(
        "two_messages_status_message",
        &[("a2a_status_message", true)],
        events,
    )
    .await;
}

#[tokio::test]
async fn a_question_pauses_the_task_as_input_required() {
    let mut events = vec![Event::RunStarted];
    events.extend(text("m1", &["Let me check."]));
    events.push(Event::Interrupt(Interrupt {
        id: "int-1".to_owned(),
        kind: InterruptKind::Question {
            text: "Which city?".to_owned(),
            options: vec!["Paris".to_owned(), "Rome".to_owned()],
        },
    }));
    events.push(finished(Outcome::Interrupted));
    stream_golden("interrupt_question", &[], events).await;
}

#[tokio::test]
async fn an_upstream_error_fails_the_task_with_an_explanation() {
    let mut events = vec![Event::RunStarted];
    events.push(Event::TextStart {
        message_id: "m1".to_owned(),
        role: Role::Assistant,
    });
    events.push(Event::TextDelta {
        message_id: "m1".to_owned(),
        delta: "Partial ".to_owned(),
    });
    events.push(Event::TextEnd {
        message_id: "m1".to_owned(),
    });
    events.push(Event::RunError(Error::upstream_timeout(
        "upstream run took longer than the route's timeout of 120s",
    )));
    stream_golden("upstream_error", &[], events).await;
}

#[tokio::test]
async fn artifacts_pass_and_events_without_an_a2a_form_are_dropped() {
    let events = vec![
        Event::RunStarted,
        Event::StepStarted {
            name: "plan".to_owned(),
        },
        Event::ReasoningStart {
            message_id: "r1".to_owned(),
        },
        Event::ReasoningDelta {
            message_id: "r1".to_owned(),
            delta: "thinking".to_owned(),
        },
        Event::ReasoningEnd {
            message_id: "r1".to_owned(),
        },
        Event::ToolCallStart {
            call_id: "call-1".to_owned(),
            name: "search".to_owned(),
            parent_message_id: None,
        },
        Event::ToolCallArgs {
            call_id: "call-1".to_owned(),
            delta: "{\"q\":\"rain\"}".to_owned(),
        },
        Event::ToolCallEnd {
            call_id: "call-1".to_owned(),
        },
        Event::ToolResult {
            call_id: "call-1".to_owned(),
            message_id: "tr-1".to_owned(),
            content: "{\"rain\":false}".to_owned(),
            is_error: false,
        },
        Event::StateSnapshot(json!({"city": "Beijing"})),
        Event::Custom {
            name: "vendor.thing".to_owned(),
            value: json!(1),
        },
        Event::Artifact(Artifact {
            id: "chart-1".to_owned(),
            name: Some("chart".to_owned()),
            parts: vec![Part::Data(json!({"kind": "bar", "values": [1, 2]}))],
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
        finished(Outcome::Completed),
    ];
    stream_golden("artifact_and_dropped_events", &[], events).await;
}

#[tokio::test]
async fn a_run_cancelled_upstream_cancels_the_task() {
    stream_golden(
        "run_cancelled",
        &[],
        vec![Event::RunStarted, finished(Outcome::Cancelled)],
    )
    .await;
}

const STREAM_CASES: &[&str] = &[
    "text_completed",
    "two_messages_status_message",
    "interrupt_question",
    "upstream_error",
    "artifact_and_dropped_events",
    "run_cancelled",
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
        .flat_map(|case| [format!("{case}.send.json"), format!("{case}.stream.sse")])
        .collect();
    known.sort();
    assert_eq!(found, known, "stream fixtures and STREAM_CASES differ");
}

/// The events as a `message/stream` answer and as a blocking `message/send` result (its artifacts merged).
async fn stream_golden(case: &str, translate: &[(&str, bool)], events: Vec<Event>) {
    assert!(STREAM_CASES.contains(&case), "add {case} to STREAM_CASES");
    let inbound = inbound(translate);
    let message = user_message("What is the weather?");

    let streamed = call(
        &inbound,
        &request(json!("r1"), "message/stream", json!({"message": message})),
        events.clone(),
    )
    .await;
    assert_eq!(streamed.status, 200);
    check_stream(&streamed.events());
    golden(&format!("streams/{case}.stream.sse"), &mask(&streamed.body));

    let sent = call(
        &inbound,
        &request(json!(2), "message/send", json!({"message": message})),
        events,
    )
    .await;
    assert_eq!(sent.status, 200);
    let result = sent.json();
    let mut pretty = serde_json::to_string_pretty(&result).unwrap();
    pretty.push('\n');
    golden(&format!("streams/{case}.send.json"), &mask(&pretty));
}

/// §4.4: the Task first (submitted, history = the user message), then `working`, then updates of that task,
/// exactly one final status, last.
fn check_stream(events: &[Value]) {
    for event in events {
        assert_eq!(event["jsonrpc"], "2.0");
        assert_eq!(event["id"], "r1");
    }
    let results: Vec<&Value> = events.iter().map(|e| &e["result"]).collect();
    let task = results[0];
    assert_eq!(task["kind"], "task");
    assert_eq!(task["status"]["state"], "submitted");
    assert_eq!(task["history"].as_array().unwrap().len(), 1);
    assert_eq!(results[1]["kind"], "status-update");
    assert_eq!(results[1]["status"]["state"], "working");
    assert_eq!(results[1]["final"], false);
    for result in &results[1..] {
        assert_eq!(result["taskId"], task["id"]);
        assert_eq!(result["contextId"], task["contextId"]);
    }
    let finals: Vec<_> = results.iter().filter(|r| r["final"] == true).collect();
    assert_eq!(finals.len(), 1, "one final status");
    assert_eq!(
        results.last().unwrap()["final"],
        true,
        "the final status is last"
    );
}

// ---------------------------------------------------------------------------------------------------------
// Turns

#[tokio::test]
async fn a_message_becomes_a_delta_turn_in_its_context_and_an_answer_resumes_the_interrupt() {
    let inbound = inbound(&[]);
    let turns: Arc<Mutex<Vec<Turn>>> = Arc::default();
    let run = |events: Vec<Event>| {
        let turns = Arc::clone(&turns);
        move |turn: Turn| {
            turns.lock().unwrap().push(turn);
            script(events, false)
        }
    };
    let mut message = user_message("Will it rain?");
    message["contextId"] = json!("ctx-client");
    let answer = inbound
        .call(
            send(message).to_string().as_bytes(),
            "",
            &Documents::in_memory(),
            run(paused_run("int-9")),
        )
        .await;
    let task: Value =
        serde_json::from_slice(&answer.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let task = &task["result"];
    assert_eq!(task["status"]["state"], "input-required");
    assert_eq!(task["contextId"], "ctx-client");
    {
        let turns = turns.lock().unwrap();
        let turn = &turns[0];
        assert_eq!(turn.conversation, "ctx-client");
        assert_eq!(turn.run_id, task["id"].as_str().unwrap());
        assert_eq!(turn.history, History::Delta);
        assert_eq!(turn.messages.len(), 1);
        assert_eq!(turn.messages[0].text(), "Will it rain?");
        assert_eq!(turn.messages[0].id, "m1");
        assert!(turn.resume.is_empty());
    }

    // The answer names only the context: the paused task continues.
    let mut reply = user_message("Beijing");
    reply["contextId"] = json!("ctx-client");
    reply["messageId"] = json!("m2");
    let answer = inbound
        .call(
            send(reply).to_string().as_bytes(),
            "",
            &Documents::in_memory(),
            run(completed_run(&["ok"])),
        )
        .await;
    let again: Value =
        serde_json::from_slice(&answer.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(again["result"]["id"], task["id"]);
    assert_eq!(again["result"]["status"]["state"], "completed");
    let history: Vec<&str> = again["result"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(history, ["user", "agent", "user"]);
    let turns = turns.lock().unwrap();
    let turn = &turns[1];
    assert_eq!(turn.run_id, task["id"].as_str().unwrap());
    assert_eq!(turn.resume.len(), 1);
    assert_eq!(turn.resume[0].interrupt_id, "int-9");
    assert_eq!(turn.resume[0].status, ResumeStatus::Resolved);
    assert_eq!(turn.resume[0].payload, Some(json!("Beijing")));
}

// ---------------------------------------------------------------------------------------------------------
// Files

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/a2a/inbound")
        .join(name)
}

fn golden(name: &str, actual: &str) {
    golden::check(&fixture(name), actual);
}

/// Minted ids (`<prefix>_<32 hex>`) become `<prefix>_#<n>` by first appearance; timestamps `<timestamp>`.
fn mask(text: &str) -> String {
    let mut numbers: HashMap<String, usize> = HashMap::new();
    let mut counts: HashMap<String, usize> = HashMap::new();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'_'
            && i + 33 <= bytes.len()
            && bytes[i + 1..i + 33]
                .iter()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            let start = text[..i]
                .rfind(|c: char| !c.is_ascii_lowercase())
                .map_or(0, |p| p + 1);
            let prefix = &text[start..i];
            let id = &text[start..i + 33];
            if !prefix.is_empty() && out.ends_with(prefix) {
                let n = *numbers.entry(id.to_owned()).or_insert_with(|| {
                    let count = counts.entry(prefix.to_owned()).or_default();
                    *count += 1;
                    *count
                });
                out.push_str(&format!("_#{n}"));
                i += 33;
                continue;
            }
        }
        let ch = text[i..].chars().next().unwrap();
        out.push(ch);
        i += ch.len_utf8();
    }
    mask_timestamps(&out)
}

fn mask_timestamps(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let found = ["\"timestamp\":\"", "\"timestamp\": \""]
            .iter()
            .filter_map(|key| rest.find(key).map(|at| (at, key.len())))
            .min();
        let Some((at, len)) = found else { break };
        out.push_str(&rest[..at + len]);
        rest = &rest[at + len..];
        let end = rest.find('"').expect("a closing quote");
        out.push_str("<timestamp>");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}
