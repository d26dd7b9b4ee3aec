//! Golden tests of the A2A outbound decoder, reviewed as files under `tests/fixtures/a2a/upstream/`:
//!
//! `<case>.sse` (a `message/stream` answer as real servers send it) or `<case>.json` (a `message/send` answer,
//! or a stream request answered as JSON) → `SseDecoder` → [`Decoder`] → `Normalizer` → `<case>.expected`: the
//! canonical events the inbound face would encode, one line per event, then what the conversation record
//! keeps. When the answer ends without settling the run, the outbound asks `tasks/get` once: its answer is
//! `<case>.tasks_get.json` (no such file: the query failed).
//!
//! Ids the proxy mints (`msg_<uuid>`, `int_<uuid>`) are replaced by numbered placeholders (`msg_#1`, ...) in
//! order of first appearance. `UPDATE_GOLDEN=1 cargo test --test it a2a_outbound_codec::` rewrites the
//! expected files instead of comparing; review the diff before keeping it: the expected output is the
//! assertion.

use std::fs;
use std::path::{Path, PathBuf};

use agent_bridge::error::Error;
use agent_bridge::model::{Event, InterruptKind, Outcome};
use agent_bridge::normalize::Normalizer;
use agent_bridge::protocol::a2a::Decoder;
use agent_bridge::sse::SseDecoder;

use crate::support::golden;

#[test]
fn a2a_sdk_crlf_stream_with_pings_becomes_one_text_message() {
    golden("a2a_sdk_stream");
}

#[test]
fn a2a_js_event_error_frame_ends_the_run_with_its_json_rpc_code() {
    golden("a2a_js_event_error");
}

#[test]
fn seed_vendor_append_on_the_first_chunk_creates_the_artifact() {
    golden("seed_vendor_append_first_chunk");
}

#[test]
fn seed_vendor_duplicate_artifact_ids_in_a_blocking_task_are_concatenated() {
    golden("seed_vendor_duplicate_artifacts");
}

#[test]
fn input_required_becomes_an_interrupt_and_keeps_the_task() {
    golden("input_required");
}

#[test]
fn failed_task_is_a_run_error_with_the_status_message() {
    golden("failed_with_message");
}

#[test]
fn rejected_task_is_a_run_error_coded_rejected() {
    golden("rejected");
}

#[test]
fn canceled_task_finishes_the_run_cancelled() {
    golden("canceled");
}

#[test]
fn message_result_is_the_whole_answer() {
    golden("message_result");
}

#[test]
fn json_rpc_error_without_id_is_a_run_error() {
    golden("jsonrpc_error");
}

#[test]
fn stream_without_final_is_settled_by_tasks_get() {
    golden("stream_without_final");
}

#[test]
fn stream_cut_off_with_the_task_still_working_ends_as_upstream_eof() {
    golden("stream_cut_off");
}

#[test]
fn status_messages_show_only_new_text() {
    golden("status_messages");
}

#[test]
fn artifact_replacement_and_data_parts() {
    golden("artifact_replace_and_data");
}

const CASES: &[&str] = &[
    "a2a_sdk_stream",
    "a2a_js_event_error",
    "seed_vendor_append_first_chunk",
    "seed_vendor_duplicate_artifacts",
    "input_required",
    "failed_with_message",
    "rejected",
    "canceled",
    "message_result",
    "jsonrpc_error",
    "stream_without_final",
    "stream_cut_off",
    "status_messages",
    "artifact_replace_and_data",
];

#[test]
fn every_upstream_fixture_has_a_golden_test() {
    let mut inputs = Vec::new();
    for entry in fs::read_dir(fixture("")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let case = name.split('.').next().unwrap().to_owned();
        assert!(CASES.contains(&case.as_str()), "orphan fixture {name}");
        if !name.ends_with(".expected") && !name.ends_with(".tasks_get.json") {
            inputs.push(case);
        }
    }
    inputs.sort();
    let mut known: Vec<String> = CASES.iter().map(|c| (*c).to_owned()).collect();
    known.sort();
    assert_eq!(inputs, known, "one .sse or .json answer per case");
}

fn golden(case: &str) {
    assert!(CASES.contains(&case), "add {case} to CASES");
    let (events, decoder) = pipeline(case);
    let mut text = render(&events);
    text.push_str(&format!(
        "-- record: context={} paused_task={}\n",
        decoder.context_id().unwrap_or("-"),
        decoder.paused().map_or("-", |(task, _)| task),
    ));
    let text = golden::stable_ids(&text, &["msg_", "int_", "req_"]);
    golden::check(&fixture(&format!("{case}.expected")), &text);
}

/// What the outbound does with an upstream answer: decode each JSON-RPC response (stopping when the stream
/// has nothing more to say), settle at the end of the stream or ask `tasks/get`, and normalize.
fn pipeline(case: &str) -> (Vec<Event>, Decoder) {
    let mut decoder = Decoder::new();
    let mut normalizer = Normalizer::new();
    let mut out = Vec::new();
    let result = decode_case(case, &mut decoder, &mut normalizer, &mut out);
    normalizer.finish(result, &mut out);
    (out, decoder)
}

fn decode_case(
    case: &str,
    decoder: &mut Decoder,
    normalizer: &mut Normalizer,
    out: &mut Vec<Event>,
) -> Result<(), Error> {
    let mut decoded = Vec::new();
    let sse = fixture(&format!("{case}.sse"));
    if sse.exists() {
        let mut framer = SseDecoder::new(10 * 1024 * 1024);
        framer.push(&fs::read(&sse).unwrap());
        while let Some(frame) = framer
            .finish()
            .map_err(|e| Error::upstream_malformed(e.to_string()))?
        {
            let over = decoder.decode(&frame.data, &mut decoded)?;
            drain(&mut decoded, normalizer, out);
            if over {
                break;
            }
        }
    } else {
        let body = read(&fixture(&format!("{case}.json")));
        decoder.decode(&body, &mut decoded)?;
    }
    if decoder.end_of_stream(&mut decoded).is_some() {
        let answer = fixture(&format!("{case}.tasks_get.json"));
        if answer.exists() {
            decoder.decode_task_query(&read(&answer), &mut decoded);
        }
    }
    drain(&mut decoded, normalizer, out);
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
            Event::RunFinished { outcome, .. } => format!(
                "RunFinished {}",
                match outcome {
                    Outcome::Completed => "completed",
                    Outcome::Interrupted => "interrupted",
                    Outcome::Cancelled => "cancelled",
                }
            ),
            Event::RunError(error) => format!("RunError {} {:?}", error.code(), error.message()),
            Event::TextStart { message_id, role } => format!("TextStart {message_id} {role:?}"),
            Event::TextDelta { message_id, delta } => format!("TextDelta {message_id} {delta:?}"),
            Event::TextEnd { message_id } => format!("TextEnd {message_id}"),
            Event::Interrupt(interrupt) => match &interrupt.kind {
                InterruptKind::InputRequired { text } => {
                    format!("Interrupt {} input_required {text:?}", interrupt.id)
                }
                other => format!("Interrupt {} {other:?}", interrupt.id),
            },
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
        .join("tests/fixtures/a2a/upstream")
        .join(name)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
