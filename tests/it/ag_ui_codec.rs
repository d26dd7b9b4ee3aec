//! Golden tests of the AG-UI codec, reviewed as files under `tests/fixtures/ag-ui/`:
//!
//! - `requests/<case>.json` → `Reader` → `requests/<case>.turn.json` (the canonical turn), and
//!   `requests/invalid.json`: bodies that must be rejected, each with a substring of the error message;
//! - `upstream/<case>.sse` (an upstream AG-UI stream as real servers send it) → `SseDecoder` → `Decoder` →
//!   `Normalizer` → `Encoder` → `upstream/<case>[.<variant>].expected.sse` (what our AG-UI inbound sends);
//! - `encoder/<case>.expected.sse`: canonical events no AG-UI upstream produces (interrupts, artifacts,
//!   usage, proxy errors), normalized and encoded.
//!
//! Every `.expected.sse` is also checked against the conservative output profile (`specs/ag-ui.md` §4.2).
//! Ids the proxy mints (`msg_<uuid>`, ...) are replaced by numbered placeholders (`msg_#1`, ...) in order of
//! first appearance. `UPDATE_GOLDEN=1 cargo test --test it ag_ui_codec::` rewrites the expected files
//! instead of comparing; review the diff before keeping it: the expected output is the assertion.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use bytes::BytesMut;

use agent_bridge::error::Error;
use agent_bridge::face::EventEncoder;
use agent_bridge::face::RequestDecoder;
use agent_bridge::model::{
    Artifact, Event, Interrupt, InterruptKind, Message, Outcome, Part, Role, Turn, Usage,
};
use agent_bridge::normalize::Normalizer;
use agent_bridge::protocol::ag_ui::{AguiInterrupts, InboundOptions};
use agent_bridge::protocol::ag_ui::{Decoder, Encoder, Reader};
use agent_bridge::sse::SseDecoder;
use serde_json::{json, Value};

use crate::support::golden;

// ---------------------------------------------------------------------------------------------------------
// Request decoding

#[test]
fn request_from_the_1_0_client_decodes_to_a_full_history_turn() {
    request_golden("client_1_0");
}

#[test]
fn request_with_legacy_binary_parts_decodes_to_media() {
    request_golden("legacy_binary_parts");
}

#[test]
fn request_with_1_0_source_parts_decodes_to_media() {
    request_golden("source_parts");
}

#[test]
fn request_with_tool_calls_and_tool_messages_keeps_the_call_history() {
    request_golden("tool_call_history");
}

#[test]
fn request_drops_activity_and_reasoning_messages() {
    request_golden("activity_and_reasoning_dropped");
}

#[test]
fn request_reads_null_as_absent() {
    request_golden("nulls_as_absent");
}

#[test]
fn request_resume_entries_become_turn_resume() {
    request_golden("resume");
}

#[test]
fn invalid_requests_are_client_errors_naming_the_field() {
    let cases: Vec<Value> = serde_json::from_str(&read(&fixture("requests/invalid.json")))
        .expect("invalid.json is a JSON array");
    assert!(!cases.is_empty());
    let mut names = HashSet::new();
    for case in &cases {
        let name = case["name"].as_str().expect("case name");
        assert!(names.insert(name), "duplicate case {name}");
        let body = match (&case["raw"], &case["body"]) {
            (Value::String(raw), Value::Null) => raw.clone().into_bytes(),
            (Value::Null, body) => serde_json::to_vec(body).unwrap(),
            _ => panic!("{name}: give exactly one of `raw` (text) or `body` (JSON)"),
        };
        let expected = case["error"].as_str().expect("expected error substring");
        let error = match Reader.decode(&body) {
            Ok(turn) => panic!("{name}: accepted as {turn:?}"),
            Err(error) => error,
        };
        assert!(error.is_client(), "{name}: not a client error: {error:?}");
        assert_eq!(error.code(), "INVALID_REQUEST", "{name}");
        assert_eq!(error.http_status(), 400, "{name}");
        assert!(
            error.message().contains(expected),
            "{name}: message {:?} does not contain {expected:?}",
            error.message()
        );
    }
}

#[test]
fn every_request_fixture_has_a_golden_test() {
    let mut inputs = list("requests", ".json");
    inputs.retain(|name| !name.ends_with(".turn.json") && name != "invalid.json");
    let mut turns = list("requests", ".turn.json");
    turns
        .iter_mut()
        .for_each(|n| *n = n.replace(".turn.json", ".json"));
    let mut known: Vec<String> = REQUEST_CASES.iter().map(|c| format!("{c}.json")).collect();
    known.sort();
    assert_eq!(inputs, known, "request fixtures and REQUEST_CASES differ");
    assert_eq!(
        turns, known,
        "every request needs its .turn.json, and only those"
    );
}

const REQUEST_CASES: &[&str] = &[
    "client_1_0",
    "legacy_binary_parts",
    "source_parts",
    "tool_call_history",
    "activity_and_reasoning_dropped",
    "nulls_as_absent",
    "resume",
];

fn request_golden(case: &str) {
    assert!(REQUEST_CASES.contains(&case), "add {case} to REQUEST_CASES");
    let body = read(&fixture(&format!("requests/{case}.json")));
    let turn = Reader
        .decode(body.as_bytes())
        .unwrap_or_else(|e| panic!("{case}: {e:?}"));
    let mut rendered = serde_json::to_string_pretty(&render_turn(&turn)).unwrap();
    rendered.push('\n');
    golden::check(&fixture(&format!("requests/{case}.turn.json")), &rendered);
}

/// The turn as stable JSON (keys sorted). Absent optionals are left out; collections are always shown.
fn render_turn(turn: &Turn) -> Value {
    let mut out = json!({
        "conversation": turn.conversation,
        "run_id": turn.run_id,
        "history": turn.history,
        "messages": turn.messages.iter().map(render_message).collect::<Vec<_>>(),
        "tools": turn.tools,
        "context": turn.context,
        "options": turn.options,
        "resume": turn.resume,
        "extra": turn.extra,
    });
    if let Some(state) = &turn.state {
        out["state"] = state.clone();
    }
    out
}

fn render_message(message: &Message) -> Value {
    let mut out = json!({
        "id": message.id,
        "role": message.role,
        "content": message.content.iter().map(render_part).collect::<Vec<_>>(),
    });
    if !message.tool_calls.is_empty() {
        out["tool_calls"] = json!(message.tool_calls);
    }
    if let Some(call_id) = &message.tool_call_id {
        out["tool_call_id"] = json!(call_id);
    }
    if message.is_error {
        out["is_error"] = json!(true);
    }
    if let Some(name) = &message.name {
        out["name"] = json!(name);
    }
    out
}

fn render_part(part: &Part) -> Value {
    match part {
        Part::Text(text) => json!({"text": text}),
        Part::Media(media) => json!({"media": media}),
        Part::Data(data) => json!({"data": data}),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Upstream streams through the whole pipeline

#[test]
fn upstream_spec_server_tool_call_passes_through_unchanged() {
    upstream_golden("spec_server_tool_call");
}

#[test]
fn upstream_frontend_call_without_args_gets_empty_object_args() {
    upstream_golden("spec_frontend_tool_call");
}

#[test]
fn upstream_crlf_comments_and_unspaced_data_come_out_as_lf_frames() {
    upstream_golden("generic_sse_framing");
}

#[test]
fn upstream_chunk_events_are_expanded_to_start_content_end() {
    upstream_golden("chunk_events");
}

#[test]
fn upstream_thinking_events_become_reasoning() {
    upstream_golden("thinking_events");
    upstream_variant("thinking_events", "agui_reasoning");
}

#[test]
fn upstream_reasoning_events_are_custom_unless_the_route_allows_them() {
    upstream_golden("reasoning_events");
    upstream_variant("reasoning_events", "agui_reasoning");
}

#[test]
fn upstream_agentscope_quirks_get_role_and_parent() {
    upstream_golden("agentscope_quirks");
}

#[test]
fn upstream_tool_result_parts_are_flattened_to_a_string() {
    upstream_golden("tool_result_parts");
}

#[test]
fn upstream_null_optionals_are_read_as_absent_and_never_written() {
    upstream_golden("null_optionals");
}

#[test]
fn upstream_cloudbase_double_run_error_keeps_only_the_first() {
    upstream_golden("cloudbase_double_run_error");
}

#[test]
fn upstream_run_started_input_echo_is_ignored() {
    upstream_golden("run_started_input_echo");
}

#[test]
fn upstream_multi_run_response_is_merged_into_one_run() {
    upstream_golden("multi_run");
}

#[test]
fn upstream_unknown_event_types_are_dropped() {
    upstream_golden("unknown_event_types");
}

#[test]
fn upstream_interrupt_outcome_becomes_a_frontend_call_or_an_interrupt() {
    upstream_golden("interrupt_outcome");
    upstream_variant("interrupt_outcome", "agui_interrupts");
}

#[test]
fn upstream_question_interrupt_becomes_an_ask_user_call_or_an_interrupt() {
    upstream_golden("interrupt_question");
    upstream_variant("interrupt_question", "agui_interrupts");
}

#[test]
fn upstream_eof_without_terminal_ends_with_upstream_eof_error() {
    upstream_golden("eof_without_terminal");
}

#[test]
fn upstream_malformed_frame_ends_with_upstream_malformed_error() {
    upstream_golden("malformed_frame");
}

#[test]
fn upstream_buggy_sequences_are_normalized() {
    upstream_golden("buggy_adapter_sequences");
}

#[test]
fn upstream_state_steps_and_snapshots_pass_through_with_text_closed_first() {
    upstream_golden("state_steps_and_snapshots");
}

#[test]
fn every_upstream_fixture_has_a_golden_test() {
    let mut inputs = list("upstream", ".sse");
    inputs.retain(|name| !name.ends_with(".expected.sse"));
    let mut known: Vec<String> = UPSTREAM_CASES.iter().map(|c| format!("{c}.sse")).collect();
    known.sort();
    assert_eq!(inputs, known, "upstream fixtures and UPSTREAM_CASES differ");
    for expected in list("upstream", ".expected.sse") {
        let case = expected.split('.').next().unwrap();
        assert!(UPSTREAM_CASES.contains(&case), "orphan golden {expected}");
    }
}

const UPSTREAM_CASES: &[&str] = &[
    "spec_server_tool_call",
    "spec_frontend_tool_call",
    "generic_sse_framing",
    "chunk_events",
    "thinking_events",
    "reasoning_events",
    "agentscope_quirks",
    "tool_result_parts",
    "null_optionals",
    "cloudbase_double_run_error",
    "run_started_input_echo",
    "multi_run",
    "unknown_event_types",
    "interrupt_outcome",
    "interrupt_question",
    "eof_without_terminal",
    "malformed_frame",
    "buggy_adapter_sequences",
    "state_steps_and_snapshots",
];

/// The ids of the inbound request every upstream case answers (the outbound sends them upstream, so real
/// servers echo them; the encoder writes these, whatever the upstream wrote).
fn inbound_turn() -> Turn {
    Turn {
        conversation: "thread-1".to_owned(),
        run_id: "run-1".to_owned(),
        ..Default::default()
    }
}

/// The run of a client that declares the route's approval and question tools (it handles them), as the
/// goldens' clients do: with `agui_interrupts = "auto"` its pauses are calls of those tools.
fn inbound_turn_with_pause_tools(translate: &InboundOptions) -> Turn {
    let tool = |name: &str| agent_bridge::model::Tool {
        name: name.to_owned(),
        description: String::new(),
        parameters: json!({"type": "object"}),
    };
    Turn {
        tools: vec![
            tool(&translate.approval_tool),
            tool(&translate.question_tool),
        ],
        ..inbound_turn()
    }
}

fn upstream_golden(case: &str) {
    upstream_case(case, None);
}

/// The route options a golden may be made with (`<case>.<variant>.expected.sse`).
const VARIANTS: &[&str] = &["agui_reasoning", "agui_interrupts", "custom_tools"];

/// The same upstream stream through a route with an option that changes the output.
fn upstream_variant(case: &str, variant: &str) {
    upstream_case(case, Some(variant));
}

fn translate_for(variant: &str) -> InboundOptions {
    let mut translate = InboundOptions::default();
    match variant {
        "agui_reasoning" => translate.agui_reasoning = true,
        "agui_interrupts" => translate.agui_interrupts = AguiInterrupts::Outcome,
        "custom_tools" => {
            translate.approval_tool = "approve".to_owned();
            translate.question_tool = "askHuman".to_owned();
        }
        other => panic!("unknown variant {other}"),
    }
    translate
}

fn upstream_case(case: &str, variant: Option<&str>) {
    assert!(
        UPSTREAM_CASES.contains(&case),
        "add {case} to UPSTREAM_CASES"
    );
    let input = fs::read(fixture(&format!("upstream/{case}.sse"))).unwrap();
    let translate = variant.map_or_else(InboundOptions::default, translate_for);
    let turn = inbound_turn_with_pause_tools(&translate);
    let sse = stable_ids(&encode(&turn, &translate, pipeline(&input)));
    let profile = Profile::for_variant(variant);
    if let Err(problem) = profile.check(&sse) {
        panic!("{case}: output breaks the conservative profile: {problem}\n{sse}");
    }
    golden::check(&fixture(&expected_name("upstream", case, variant)), &sse);
}

/// `<dir>/<case>.expected.sse`, or `<dir>/<case>.<variant>.expected.sse` for a route option.
fn expected_name(dir: &str, case: &str, variant: Option<&str>) -> String {
    match variant {
        Some(variant) => format!("{dir}/{case}.{variant}.expected.sse"),
        None => format!("{dir}/{case}.expected.sse"),
    }
}

/// The variant an expected file is named after, if any.
fn variant_of(name: &str) -> Option<&str> {
    VARIANTS
        .iter()
        .copied()
        .find(|v| name.ends_with(&format!(".{v}.expected.sse")))
}

/// What the AG-UI outbound and the translator do with an upstream response body: frame it, decode each
/// event (stopping at an error event or a malformed one), and normalize.
fn pipeline(input: &[u8]) -> Vec<Event> {
    let mut framer = SseDecoder::new(10 * 1024 * 1024);
    framer.push(input);
    let mut decoder = Decoder::default();
    let mut normalizer = Normalizer::new();
    let mut decoded = Vec::new();
    let mut out = Vec::new();
    let result = loop {
        let frame = match framer.finish() {
            Ok(frame) => frame,
            Err(e) => break Err(Error::upstream_malformed(e.to_string())),
        };
        let done = match frame {
            Some(frame) => match decoder.decode(&frame.data, &mut decoded) {
                Ok(done) => done,
                Err(error) => break Err(error),
            },
            None => {
                decoder.finish(&mut decoded);
                true
            }
        };
        for event in decoded.drain(..) {
            normalizer.push(event, &mut out);
        }
        if done {
            break Ok(());
        }
    };
    normalizer.finish(result, &mut out);
    out
}

fn encode(turn: &Turn, translate: &InboundOptions, events: Vec<Event>) -> String {
    let mut encoder = Encoder::new(turn, translate);
    let mut bytes = BytesMut::new();
    for event in events {
        encoder.encode(event, &mut bytes);
    }
    String::from_utf8(bytes.to_vec()).expect("the encoder writes UTF-8")
}

// ---------------------------------------------------------------------------------------------------------
// Canonical events no AG-UI upstream produces

#[test]
fn encoder_approval_interrupt_is_a_confirm_action_call_by_default() {
    encoder_golden("interrupt_approval", None, approval_run());
}

#[test]
fn encoder_approval_interrupt_is_an_outcome_interrupt_when_the_route_allows() {
    encoder_golden(
        "interrupt_approval",
        Some("agui_interrupts"),
        approval_run(),
    );
}

#[test]
fn encoder_question_interrupt_is_an_ask_user_call_by_default() {
    encoder_golden("interrupt_question", None, question_run());
}

#[test]
fn encoder_question_interrupt_is_an_outcome_interrupt_when_the_route_allows() {
    encoder_golden(
        "interrupt_question",
        Some("agui_interrupts"),
        question_run(),
    );
}

#[test]
fn encoder_interrupt_tools_are_the_routes() {
    let mut events = approval_run();
    events.insert(
        events.len() - 1,
        Event::Interrupt(Interrupt {
            id: "int_input".to_owned(),
            kind: InterruptKind::InputRequired {
                text: "Your API key, please.".to_owned(),
            },
        }),
    );
    encoder_golden("interrupt_route_tools", Some("custom_tools"), events);
}

#[test]
fn encoder_artifact_and_usage_are_namespaced_custom_events() {
    let events = vec![
        Event::RunStarted,
        Event::Artifact(Artifact {
            id: "art-1".to_owned(),
            name: Some("report.md".to_owned()),
            parts: vec![Part::Text("# Report\n".to_owned())],
            append: false,
            last_chunk: false,
        }),
        Event::Artifact(Artifact {
            id: "art-1".to_owned(),
            name: None,
            parts: vec![
                Part::Text("All good.".to_owned()),
                Part::Data(json!({"rows": 3})),
            ],
            append: true,
            last_chunk: true,
        }),
        Event::Usage(Usage {
            input_tokens: Some(12),
            output_tokens: Some(30),
            total_tokens: Some(42),
        }),
        Event::Usage(Usage {
            output_tokens: Some(5),
            ..Usage::default()
        }),
        Event::RunFinished {
            outcome: Outcome::Completed,
            usage: None,
        },
    ];
    encoder_golden("artifact_and_usage", None, events);
}

#[test]
fn encoder_run_error_after_text_closes_the_text_first() {
    let events = vec![
        Event::RunStarted,
        Event::TextStart {
            message_id: "m1".to_owned(),
            role: Role::Assistant,
        },
        Event::TextDelta {
            message_id: "m1".to_owned(),
            delta: "Thinking about".to_owned(),
        },
        Event::RunError(Error::upstream_timeout(
            "upstream run took longer than the route's timeout of 30s",
        )),
    ];
    encoder_golden("run_error_timeout_after_text", None, events);
}

#[test]
fn encoder_cancelled_run_is_a_plain_finish() {
    let events = vec![
        Event::RunStarted,
        Event::RunFinished {
            outcome: Outcome::Cancelled,
            usage: None,
        },
    ];
    encoder_golden("run_cancelled", None, events);
}

#[test]
fn encoder_run_error_carries_the_error_code() {
    let cases = [
        (Error::upstream_timeout("slow"), "UPSTREAM_TIMEOUT"),
        (
            Error::upstream_unreachable("refused"),
            "UPSTREAM_UNREACHABLE",
        ),
        (
            Error::upstream_status(400, r#"{"error":{"code":"INVALID_REQUEST"}}"#),
            "UPSTREAM_HTTP_ERROR",
        ),
        (Error::upstream_malformed("not JSON"), "UPSTREAM_MALFORMED"),
        (Error::upstream_eof(), "UPSTREAM_EOF"),
        (
            Error::upstream_agent("INTERNAL_ERROR", "boom"),
            "INTERNAL_ERROR",
        ),
        (Error::cancelled("client went away"), "cancelled"),
        (Error::internal("bug"), "INTERNAL_ERROR"),
    ];
    for (error, code) in cases {
        let message = error.message().to_owned();
        let sse = encode(
            &inbound_turn(),
            &InboundOptions::default(),
            normalize(vec![Event::RunError(error)]),
        );
        Profile::conservative()
            .check(&sse)
            .unwrap_or_else(|p| panic!("{code}: {p}\n{sse}"));
        let expected = format!(
            "data: {{\"type\":\"RUN_STARTED\",\"threadId\":\"thread-1\",\"runId\":\"run-1\"}}\n\n\
             data: {{\"type\":\"RUN_ERROR\",\"message\":{},\"code\":\"{code}\"}}\n\n",
            json!(message)
        );
        assert_eq!(sse, expected);
    }
}

#[test]
fn every_encoder_golden_has_a_test() {
    for expected in list("encoder", ".expected.sse") {
        let case = expected.split('.').next().unwrap();
        assert!(ENCODER_CASES.contains(&case), "orphan golden {expected}");
    }
}

const ENCODER_CASES: &[&str] = &[
    "interrupt_approval",
    "interrupt_question",
    "interrupt_route_tools",
    "artifact_and_usage",
    "run_error_timeout_after_text",
    "run_cancelled",
];

#[test]
fn auto_pauses_are_tool_calls_only_for_the_tools_the_client_declared() {
    let translate = InboundOptions::default();
    assert_eq!(translate.agui_interrupts, AguiInterrupts::Auto);
    let only_confirm = Turn {
        tools: inbound_turn_with_pause_tools(&translate).tools[..1].to_vec(),
        ..inbound_turn()
    };
    assert_eq!(only_confirm.tools[0].name, "confirmAction");

    let approval = encode(&only_confirm, &translate, normalize(approval_run()));
    assert!(
        approval.contains(r#""toolCallName":"confirmAction""#),
        "{approval}"
    );
    assert!(!approval.contains(r#""outcome""#), "{approval}");

    let question = encode(&only_confirm, &translate, normalize(question_run()));
    assert!(
        !question.contains("TOOL_CALL_START"),
        "no ask_user handler: {question}"
    );
    assert!(
        question.contains(r#""delta":"Which city?""#),
        "the question is stated as text for clients that ignore outcome: {question}"
    );
    assert!(
        question.contains(r#""outcome":{"type":"interrupt""#)
            && question.contains(r#""id":"int_2""#),
        "{question}"
    );

    let bare = encode(&inbound_turn(), &translate, normalize(approval_run()));
    assert!(!bare.contains("TOOL_CALL_START"), "{bare}");
    assert!(bare.contains(r#""reason":"approval""#), "{bare}");
}

/// Text, then an approval pause: what an A2A or AgentScope upstream asking to approve a call turns into.
fn approval_run() -> Vec<Event> {
    vec![
        Event::RunStarted,
        Event::TextStart {
            message_id: "m1".to_owned(),
            role: Role::Assistant,
        },
        Event::TextDelta {
            message_id: "m1".to_owned(),
            delta: "I found 15 temp files.".to_owned(),
        },
        Event::Interrupt(Interrupt {
            id: "int_1".to_owned(),
            kind: InterruptKind::Approval {
                tool: "delete_files".to_owned(),
                args: json!({"pattern": "*.tmp"}),
                hint: Some("Delete 15 temp files?".to_owned()),
            },
        }),
        Event::RunFinished {
            outcome: Outcome::Interrupted,
            usage: None,
        },
    ]
}

/// A question with choices, the run reported as completed (the normalizer makes it interrupted).
fn question_run() -> Vec<Event> {
    vec![
        Event::RunStarted,
        Event::Interrupt(Interrupt {
            id: "int_2".to_owned(),
            kind: InterruptKind::Question {
                text: "Which city?".to_owned(),
                options: vec!["Beijing".to_owned(), "Shanghai".to_owned()],
            },
        }),
        Event::RunFinished {
            outcome: Outcome::Completed,
            usage: None,
        },
    ]
}

fn encoder_golden(case: &str, variant: Option<&str>, events: Vec<Event>) {
    assert!(ENCODER_CASES.contains(&case), "add {case} to ENCODER_CASES");
    let translate = variant.map_or_else(InboundOptions::default, translate_for);
    let turn = inbound_turn_with_pause_tools(&translate);
    let sse = stable_ids(&encode(&turn, &translate, normalize(events)));
    if let Err(problem) = Profile::for_variant(variant).check(&sse) {
        panic!("{case}: output breaks the conservative profile: {problem}\n{sse}");
    }
    golden::check(&fixture(&expected_name("encoder", case, variant)), &sse);
}

fn normalize(events: Vec<Event>) -> Vec<Event> {
    let mut normalizer = Normalizer::new();
    let mut out = Vec::new();
    for event in events {
        normalizer.push(event, &mut out);
    }
    normalizer.finish(Ok(()), &mut out);
    out
}

// ---------------------------------------------------------------------------------------------------------
// The conservative output profile (specs/ag-ui.md §4.2), checked on every expected file

#[test]
fn every_expected_stream_follows_the_conservative_profile() {
    let mut checked = 0;
    for dir in ["upstream", "encoder"] {
        for name in list(dir, ".expected.sse") {
            let variant = variant_of(&name);
            let sse = read(&fixture(&format!("{dir}/{name}")));
            if let Err(problem) = Profile::for_variant(variant).check(&sse) {
                panic!("{dir}/{name}: {problem}");
            }
            checked += 1;
        }
    }
    assert!(checked > 0);
}

#[test]
fn profile_check_rejects_streams_outside_the_profile() {
    let started = r#"data: {"type":"RUN_STARTED","threadId":"thread-1","runId":"run-1"}"#;
    let finished = r#"data: {"type":"RUN_FINISHED","threadId":"thread-1","runId":"run-1"}"#;
    let stream = |frames: &[&str]| {
        let mut sse = String::new();
        for frame in frames {
            sse.push_str(frame);
            sse.push_str("\n\n");
        }
        sse
    };
    let ok = stream(&[started, finished]);
    Profile::conservative().check(&ok).unwrap();
    let text_start = r#"data: {"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}"#;
    let call_start = r#"data: {"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f"}"#;
    let call_end = r#"data: {"type":"TOOL_CALL_END","toolCallId":"c"}"#;
    let bad = [
        ("CRLF", ok.replace('\n', "\r\n")),
        ("data: without the space", ok.replace("data: ", "data:")),
        (
            "a null",
            ok.replace(r#""run-1"}"#, r#""run-1","parentRunId":null}"#),
        ),
        ("an unknown type", ok.replace("RUN_FINISHED", "RUN_DONE")),
        (
            "a chunk event",
            stream(&[
                started,
                r#"data: {"type":"TEXT_MESSAGE_CHUNK","delta":"x"}"#,
                finished,
            ]),
        ),
        ("two runs", format!("{ok}{ok}")),
        (
            "no RUN_STARTED first",
            stream(&[text_start, started, finished]),
        ),
        (
            "other ids",
            ok.replace(r#""threadId":"thread-1""#, r#""threadId":"thread-2""#),
        ),
        (
            "a step left open",
            stream(&[
                started,
                r#"data: {"type":"STEP_STARTED","stepName":"s"}"#,
                finished,
            ]),
        ),
        (
            "a tool call inside text",
            stream(&[started, text_start, call_start, call_end, finished]),
        ),
        (
            "args that are not JSON",
            stream(&[started, call_start, call_end, finished]),
        ),
        (
            "an empty delta",
            stream(&[
                started,
                text_start,
                r#"data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":""}"#,
                r#"data: {"type":"TEXT_MESSAGE_END","messageId":"m"}"#,
                finished,
            ]),
        ),
        (
            "a cancelled outcome",
            ok.replace(r#""run-1"}"#, r#""run-1","outcome":{"type":"cancelled"}}"#),
        ),
    ];
    for (what, sse) in bad {
        assert!(
            Profile::conservative().check(&sse).is_err(),
            "accepted {what}: {sse:?}"
        );
    }
}

/// The AG-UI 1.0 event types (`specs/ag-ui.md` §2.2).
const EVENT_TYPES_1_0: &[&str] = &[
    "RUN_STARTED",
    "RUN_FINISHED",
    "RUN_ERROR",
    "STEP_STARTED",
    "STEP_FINISHED",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_END",
    "TEXT_MESSAGE_CHUNK",
    "TOOL_CALL_START",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_END",
    "TOOL_CALL_CHUNK",
    "TOOL_CALL_RESULT",
    "STATE_SNAPSHOT",
    "STATE_DELTA",
    "MESSAGES_SNAPSHOT",
    "ACTIVITY_SNAPSHOT",
    "ACTIVITY_DELTA",
    "RAW",
    "CUSTOM",
    "REASONING_START",
    "REASONING_END",
    "REASONING_MESSAGE_START",
    "REASONING_MESSAGE_CONTENT",
    "REASONING_MESSAGE_END",
    "REASONING_MESSAGE_CHUNK",
    "REASONING_ENCRYPTED_VALUE",
    "SUBAGENT_STARTED",
    "SUBAGENT_FINISHED",
    "SUBAGENT_ERROR",
];

/// What a stream may contain: the conservative profile, widened by a route switch.
struct Profile {
    /// `REASONING_*` events (`agui_reasoning`).
    reasoning: bool,
    /// `RUN_FINISHED.outcome.interrupt` (`agui_interrupts`).
    interrupts: bool,
}

impl Profile {
    fn conservative() -> Self {
        Self {
            reasoning: false,
            interrupts: false,
        }
    }

    fn for_variant(variant: Option<&str>) -> Self {
        Self {
            reasoning: variant == Some("agui_reasoning"),
            interrupts: variant == Some("agui_interrupts"),
        }
    }

    fn allows(&self, kind: &str) -> bool {
        if !EVENT_TYPES_1_0.contains(&kind) {
            return false;
        }
        if kind.starts_with("REASONING_") {
            return self.reasoning
                && kind != "REASONING_ENCRYPTED_VALUE"
                && !kind.ends_with("_CHUNK");
        }
        // Behind switches we do not have, or never sent (they break 0.0.36/0.0.59 clients).
        !(kind.ends_with("_CHUNK")
            || kind.starts_with("ACTIVITY_")
            || kind.starts_with("SUBAGENT_"))
    }

    /// Framing, types, no nulls, and the sequencing rules of the strictest client (0.0.36).
    fn check(&self, sse: &str) -> Result<(), String> {
        if sse.contains('\r') {
            return Err("CR in the stream: LF only".into());
        }
        let Some(body) = sse.strip_suffix("\n\n") else {
            return Err("the stream must end with a blank line".into());
        };
        let mut events = Vec::new();
        for frame in body.split("\n\n") {
            if frame.contains('\n') {
                return Err(format!("one single-line `data: ` per frame: {frame:?}"));
            }
            let Some(data) = frame.strip_prefix("data: ") else {
                return Err(format!("not `data: ` with the space: {frame:?}"));
            };
            let event: Value =
                serde_json::from_str(data).map_err(|e| format!("not JSON: {data}: {e}"))?;
            if serde_json::to_string(&event).unwrap().len() != data.len() {
                return Err(format!("not compact JSON: {data}"));
            }
            if contains_null(&without_payload(&event)) {
                return Err(format!("null in {data}"));
            }
            let kind = event["type"].as_str().ok_or(format!("no type: {data}"))?;
            if !self.allows(kind) {
                return Err(format!("event type {kind} is not in the profile"));
            }
            events.push(event);
        }
        Sequence::default().check(self, &events)
    }
}

/// The event without the application data it carries (a state, a patch, a custom value, a raw event): a
/// `null` there is data, not an absent field, and passes through unchanged.
fn without_payload(event: &Value) -> Value {
    let mut event = event.clone();
    let payload = match event["type"].as_str().unwrap_or_default() {
        "STATE_SNAPSHOT" => "snapshot",
        "STATE_DELTA" => "delta",
        "CUSTOM" => "value",
        "RAW" => "event",
        _ => return event,
    };
    event.as_object_mut().unwrap().remove(payload);
    event
}

fn contains_null(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.iter().any(contains_null),
        Value::Object(map) => map.values().any(contains_null),
        _ => false,
    }
}

/// The state of the sequencing check.
#[derive(Default)]
struct Sequence {
    text: Option<String>,
    reasoning: Option<String>,
    reasoning_spans: Vec<String>,
    call: Option<String>,
    args: String,
    ended_calls: HashSet<String>,
    message_ids: HashSet<String>,
    steps: Vec<String>,
}

impl Sequence {
    fn check(mut self, profile: &Profile, events: &[Value]) -> Result<(), String> {
        let kind = |e: &Value| e["type"].as_str().unwrap_or_default().to_owned();
        match events.first().map(kind).as_deref() {
            Some("RUN_STARTED") => {}
            other => return Err(format!("first event must be RUN_STARTED, not {other:?}")),
        }
        let started = &events[0];
        if started["threadId"] != "thread-1" || started["runId"] != "run-1" {
            return Err(format!("RUN_STARTED must echo the request ids: {started}"));
        }
        let terminals = events
            .iter()
            .filter(|e| matches!(kind(e).as_str(), "RUN_FINISHED" | "RUN_ERROR"))
            .count();
        let last = events.last().map(kind).unwrap_or_default();
        if terminals != 1 || !matches!(last.as_str(), "RUN_FINISHED" | "RUN_ERROR") {
            return Err("exactly one RUN_FINISHED or RUN_ERROR, last".into());
        }
        for (i, event) in events.iter().enumerate() {
            self.event(profile, i, event)
                .map_err(|problem| format!("event {i} {event}: {problem}"))?;
        }
        Ok(())
    }

    fn event(&mut self, profile: &Profile, i: usize, e: &Value) -> Result<(), String> {
        let kind = e["type"].as_str().unwrap();
        let str_field = |name: &str| -> Result<String, String> {
            e[name]
                .as_str()
                .map(str::to_owned)
                .ok_or(format!("`{name}` must be a string"))
        };
        if let Some(timestamp) = e.get("timestamp") {
            if !timestamp.is_u64() {
                return Err("timestamp must be integer milliseconds".into());
            }
        }
        // 0.0.36: nothing but its content and end inside an open text message; tool calls strictly serialized.
        if let Some(open) = &self.text {
            if !matches!(kind, "TEXT_MESSAGE_CONTENT" | "TEXT_MESSAGE_END") {
                return Err(format!("text message {open} still open"));
            }
        }
        if let Some(open) = &self.call {
            if !matches!(kind, "TOOL_CALL_ARGS" | "TOOL_CALL_END") || e["toolCallId"] != **open {
                return Err(format!("tool call {open} still open"));
            }
        }
        if let Some(open) = &self.reasoning {
            if !matches!(kind, "REASONING_MESSAGE_CONTENT" | "REASONING_MESSAGE_END") {
                return Err(format!("reasoning message {open} still open"));
            }
        }
        match kind {
            "RUN_STARTED" if i > 0 => return Err("a second RUN_STARTED".into()),
            "TEXT_MESSAGE_START" => {
                let id = str_field("messageId")?;
                if !self.message_ids.insert(id.clone()) {
                    return Err(format!("message id {id} reused"));
                }
                if e["role"] != "assistant" {
                    return Err("role must be assistant".into());
                }
                self.text = Some(id);
            }
            "TEXT_MESSAGE_CONTENT" | "TEXT_MESSAGE_END" => {
                if self.text.as_deref() != Some(&str_field("messageId")?) {
                    return Err("no open text message with that id".into());
                }
                if kind == "TEXT_MESSAGE_END" {
                    self.text = None;
                } else if str_field("delta")?.is_empty() {
                    return Err("empty delta".into());
                }
            }
            "REASONING_MESSAGE_START" => {
                let id = str_field("messageId")?;
                if !self.message_ids.insert(id.clone()) {
                    return Err(format!("message id {id} reused"));
                }
                self.reasoning = Some(id);
            }
            "REASONING_MESSAGE_CONTENT" | "REASONING_MESSAGE_END" => {
                if self.reasoning.as_deref() != Some(&str_field("messageId")?) {
                    return Err("no open reasoning message with that id".into());
                }
                if kind == "REASONING_MESSAGE_END" {
                    self.reasoning = None;
                } else if str_field("delta")?.is_empty() {
                    return Err("empty delta".into());
                }
            }
            "REASONING_START" => self.reasoning_spans.push(str_field("messageId")?),
            "REASONING_END" => {
                let id = str_field("messageId")?;
                if self.reasoning_spans.pop() != Some(id) {
                    return Err("no open reasoning span with that id".into());
                }
            }
            "TOOL_CALL_START" => {
                let id = str_field("toolCallId")?;
                str_field("toolCallName")?;
                if self.ended_calls.contains(&id) {
                    return Err(format!("tool call id {id} reused"));
                }
                self.call = Some(id);
                self.args.clear();
            }
            "TOOL_CALL_ARGS" => self.args.push_str(&str_field("delta")?),
            "TOOL_CALL_END" => {
                serde_json::from_str::<Value>(&self.args)
                    .map_err(|err| format!("args {:?} are not JSON: {err}", self.args))?;
                self.ended_calls.insert(self.call.take().unwrap());
            }
            "TOOL_CALL_RESULT" => {
                if !self.ended_calls.contains(&str_field("toolCallId")?) {
                    return Err("result before the end of its call".into());
                }
                let id = str_field("messageId")?;
                if !self.message_ids.insert(id.clone()) {
                    return Err(format!("message id {id} reused"));
                }
                str_field("content").map_err(|_| "content must be a string".to_owned())?;
                if e.get("role").is_some() {
                    return Err("no role on TOOL_CALL_RESULT".into());
                }
            }
            "STEP_STARTED" => {
                let name = str_field("stepName")?;
                if self.steps.contains(&name) {
                    return Err(format!("step {name} already active"));
                }
                self.steps.push(name);
            }
            "STEP_FINISHED" => {
                let name = str_field("stepName")?;
                let Some(index) = self.steps.iter().position(|s| *s == name) else {
                    return Err(format!("step {name} not active"));
                };
                self.steps.remove(index);
            }
            "CUSTOM" => {
                str_field("name")?;
                if e.get("value").is_none() {
                    return Err("CUSTOM needs a value".into());
                }
            }
            "RUN_FINISHED" => {
                if e["threadId"] != "thread-1" || e["runId"] != "run-1" {
                    return Err("RUN_FINISHED must echo the request ids".into());
                }
                if !self.steps.is_empty() || !self.reasoning_spans.is_empty() {
                    return Err("steps or reasoning spans still active".into());
                }
                match e.get("outcome") {
                    None => {}
                    Some(o) if o["type"] == "interrupt" && profile.interrupts => {
                        let interrupts = o["interrupts"].as_array().ok_or("no interrupts")?;
                        if interrupts.is_empty() {
                            return Err("an interrupt outcome needs an interrupt".into());
                        }
                    }
                    Some(o) => return Err(format!("outcome {o} is not in the profile")),
                }
            }
            "RUN_ERROR" => {
                str_field("message")?;
                str_field("code")?;
            }
            _ => {}
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------------------
// Files

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ag-ui")
        .join(path)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The sorted names of the files in a fixture directory that end with `suffix`.
fn list(dir: &str, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(fixture(dir))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(suffix))
        .collect();
    names.sort();
    names
}

/// Replaces the ids the proxy mints (`msg_`, `call_`, `reasoning_` or `int_` and 32 hex digits) by
/// `<prefix>#<n>`, numbered per prefix in order of first appearance.
fn stable_ids(text: &str) -> String {
    const PREFIXES: &[&str] = &["msg_", "call_", "reasoning_", "int_"];
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'scan: while !rest.is_empty() {
        for prefix in PREFIXES {
            let after_word = !out.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
            let Some(tail) = rest.strip_prefix(prefix) else {
                continue;
            };
            let hex = tail.bytes().take_while(u8::is_ascii_hexdigit).count();
            if after_word && hex == 32 {
                let id = &rest[..prefix.len() + 32];
                let placeholder = seen.entry(id.to_owned()).or_insert_with(|| {
                    let n = counts.entry(prefix).or_default();
                    *n += 1;
                    format!("{prefix}#{n}")
                });
                out.push_str(placeholder);
                rest = &rest[id.len()..];
                continue 'scan;
            }
        }
        let c = rest.chars().next().unwrap();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[test]
fn stable_ids_number_minted_ids_in_order_of_appearance() {
    let a = "msg_0123456789abcdef0123456789abcdef";
    let b = "msg_fedcba9876543210fedcba9876543210";
    let c = "call_0123456789abcdef0123456789abcdef";
    let text = format!("{b} {a} {c} {b} msg_2 tool_{a} msg_0123");
    assert_eq!(
        stable_ids(&text),
        format!("msg_#1 msg_#2 call_#1 msg_#1 msg_2 tool_{a} msg_0123")
    );
}
