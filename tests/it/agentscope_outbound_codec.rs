//! Golden tests of the AgentScope outbound decoder, reviewed as files under
//! `tests/fixtures/agentscope/upstream/`:
//!
//! `<case>.sse` (a `/process` answer as agentscope-runtime 1.1.6.post2 sends it, from `specs/agentscope.md`)
//! → `SseDecoder` → [`Decoder`] → `Normalizer` → `<case>.expected`: the canonical events the inbound face
//! would encode, one line per event, then the approval requests the conversation record keeps. A fixture may
//! start with a comment line `: client-tools: a, b` naming the tools the client executes.
//!
//! Ids the proxy mints (`msg_<uuid>`, `call_<uuid>`) are replaced by numbered placeholders (`msg_#1`, ...) in
//! order of first appearance. `UPDATE_GOLDEN=1 cargo test --test it agentscope_outbound_codec::` rewrites
//! the expected files instead of comparing; review the diff before keeping it: the expected output is the
//! assertion.

use std::fs;
use std::path::{Path, PathBuf};

use agent_bridge::error::Error;
use agent_bridge::model::{Event, Outcome};
use agent_bridge::normalize::Normalizer;
use agent_bridge::protocol::agentscope::Decoder;
use agent_bridge::sse::SseDecoder;

use crate::support::golden;

#[test]
fn text_turn_streams_deltas_once_and_finishes_with_usage() {
    golden("text_turn");
}

#[test]
fn plugin_call_snapshots_become_one_call_its_output_a_result_then_text() {
    golden("plugin_call_tool");
}

#[test]
fn failed_response_is_a_run_error_with_the_runtimes_code() {
    golden("failed_run");
}

#[test]
fn bare_error_frame_is_a_run_error() {
    golden("bare_error");
}

#[test]
fn reasoning_message_becomes_reasoning_events() {
    golden("reasoning");
}

#[test]
fn mcp_approval_request_interrupts_the_run_and_is_kept() {
    golden("mcp_approval");
}

#[test]
fn stream_ending_mid_run_is_upstream_eof() {
    golden("eof_mid_run");
}

#[test]
fn client_tool_call_arguments_are_sent_whole_when_the_call_completes() {
    golden("client_tool_call");
}

#[test]
fn server_call_arguments_stream_as_far_as_snapshots_agree() {
    golden("streamed_arguments");
}

#[test]
fn canceled_response_finishes_cancelled() {
    golden("canceled");
}

#[test]
fn incomplete_response_is_a_run_error() {
    golden("incomplete");
}

#[test]
fn custom_function_text_frames_are_assistant_text_and_end_at_eof() {
    golden("text_frames");
}

#[test]
fn whole_contents_without_deltas_are_shown_once() {
    golden("whole_contents");
}

const CASES: &[&str] = &[
    "text_turn",
    "plugin_call_tool",
    "failed_run",
    "bare_error",
    "reasoning",
    "mcp_approval",
    "eof_mid_run",
    "client_tool_call",
    "streamed_arguments",
    "canceled",
    "incomplete",
    "text_frames",
    "whole_contents",
];

#[test]
fn every_upstream_fixture_has_a_golden_test() {
    let mut inputs = Vec::new();
    for entry in fs::read_dir(fixture("")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let case = name.split('.').next().unwrap().to_owned();
        assert!(CASES.contains(&case.as_str()), "orphan fixture {name}");
        if name.ends_with(".sse") {
            inputs.push(case);
        }
    }
    inputs.sort();
    let mut known: Vec<String> = CASES.iter().map(|c| (*c).to_owned()).collect();
    known.sort();
    assert_eq!(inputs, known, "one .sse answer per case");
}

fn golden(case: &str) {
    assert!(CASES.contains(&case), "add {case} to CASES");
    let (events, decoder) = pipeline(case);
    let mut text = render(&events);
    let approvals = decoder.approvals();
    text.push_str(&format!(
        "-- record: approvals={}\n",
        if approvals.is_empty() {
            "-".to_owned()
        } else {
            approvals.join(",")
        }
    ));
    let text = golden::stable_ids(&text, &["msg_", "call_"]);
    golden::check(&fixture(&format!("{case}.expected")), &text);
}

/// What the outbound does with an upstream answer: decode each payload (stopping at the terminal one), note
/// the end of the body, and normalize.
fn pipeline(case: &str) -> (Vec<Event>, Decoder) {
    let raw = read(&fixture(&format!("{case}.sse")));
    let client_tools: Vec<String> = raw
        .lines()
        .find_map(|line| line.strip_prefix(": client-tools:"))
        .map(|names| names.split(',').map(|n| n.trim().to_owned()).collect())
        .unwrap_or_default();
    let mut decoder = Decoder::with_client_tools(client_tools);
    let mut normalizer = Normalizer::new();
    let mut out = Vec::new();
    let result = decode_case(&raw, &mut decoder, &mut normalizer, &mut out);
    normalizer.finish(result, &mut out);
    (out, decoder)
}

fn decode_case(
    raw: &str,
    decoder: &mut Decoder,
    normalizer: &mut Normalizer,
    out: &mut Vec<Event>,
) -> Result<(), Error> {
    let mut decoded = Vec::new();
    let mut framer = SseDecoder::new(16 * 1024 * 1024);
    framer.push(raw.as_bytes());
    let mut over = false;
    while let Some(frame) = framer
        .finish()
        .map_err(|e| Error::upstream_malformed(e.to_string()))?
    {
        over = decoder.decode(&frame.data, &mut decoded)?;
        drain(&mut decoded, normalizer, out);
        if over {
            break;
        }
    }
    if !over {
        decoder.end_of_stream(&mut decoded);
        drain(&mut decoded, normalizer, out);
    }
    Ok(())
}

fn drain(decoded: &mut Vec<Event>, normalizer: &mut Normalizer, out: &mut Vec<Event>) {
    for event in decoded.drain(..) {
        normalizer.push(event, out);
    }
}

/// One line per event.
fn render(events: &[Event]) -> String {
    let mut text = String::new();
    for event in events {
        let line = match event {
            Event::RunStarted => "RunStarted".to_owned(),
            Event::RunFinished { outcome, usage } => format!(
                "RunFinished {}{}",
                match outcome {
                    Outcome::Completed => "completed",
                    Outcome::Interrupted => "interrupted",
                    Outcome::Cancelled => "cancelled",
                },
                usage
                    .as_ref()
                    .map(|u| format!(" usage={}", serde_json::to_string(u).unwrap()))
                    .unwrap_or_default()
            ),
            Event::RunError(error) => format!("RunError {} {:?}", error.code(), error.message()),
            Event::TextStart { message_id, role } => format!("TextStart {message_id} {role:?}"),
            Event::TextDelta { message_id, delta } => format!("TextDelta {message_id} {delta:?}"),
            Event::TextEnd { message_id } => format!("TextEnd {message_id}"),
            Event::ReasoningStart { message_id } => format!("ReasoningStart {message_id}"),
            Event::ReasoningDelta { message_id, delta } => {
                format!("ReasoningDelta {message_id} {delta:?}")
            }
            Event::ReasoningEnd { message_id } => format!("ReasoningEnd {message_id}"),
            Event::ToolCallStart {
                call_id,
                name,
                parent_message_id,
            } => format!(
                "ToolCallStart {call_id} {name} parent={}",
                parent_message_id.as_deref().unwrap_or("-")
            ),
            Event::ToolCallArgs { call_id, delta } => format!("ToolCallArgs {call_id} {delta:?}"),
            Event::ToolCallEnd { call_id } => format!("ToolCallEnd {call_id}"),
            Event::ToolResult {
                call_id,
                message_id,
                content,
                is_error,
            } => format!("ToolResult {call_id} {message_id} {content:?} is_error={is_error}"),
            Event::Interrupt(interrupt) => format!(
                "Interrupt {} {}",
                interrupt.id,
                serde_json::to_string(&interrupt.kind).unwrap()
            ),
            Event::Artifact(artifact) => format!(
                "Artifact {} name={:?} append={} last_chunk={} parts={}",
                artifact.id,
                artifact.name.as_deref().unwrap_or(""),
                artifact.append,
                artifact.last_chunk,
                serde_json::to_string(&artifact.parts).unwrap()
            ),
            other => format!("{other:?}"),
        };
        text.push_str(&line);
        text.push('\n');
    }
    text
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agentscope/upstream")
        .join(name)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
