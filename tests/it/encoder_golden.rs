//! Golden files for the AG-Kit and CMDC inbound encoders (AG-UI, A2A and AgentScope have theirs in their
//! `*_codec` modules): canonical runs, normalized as the hub normalizes them, encoded as the inbound writes
//! them to its client, compared with `tests/fixtures/<protocol>/encoder/<case>.expected.sse`.
//! `UPDATE_GOLDEN=1 cargo test --test it encoder_golden::` rewrites the files; review the diff.

use std::path::PathBuf;

use bytes::BytesMut;
use serde_json::json;

use agent_bridge::error::Error;
use agent_bridge::face::EventEncoder;
use agent_bridge::model::{Event, Interrupt, InterruptKind, Outcome, Usage};
use agent_bridge::normalize::Normalizer;
use agent_bridge::protocol::{ag_kit, cmdc};

use crate::support::canonical::{call, finished, text};
use crate::support::golden;

/// The canonical runs, by case name: the events an upstream produced (before the normalizer) and how the
/// run ended.
fn run(case: &str) -> (Vec<Event>, Result<(), Error>) {
    let mut events = vec![Event::RunStarted];
    let ended = match case {
        "text_reply" => {
            events.extend(text("m1", &["Hello", ", world!"]));
            events.push(Event::Usage(Usage {
                input_tokens: Some(12),
                output_tokens: Some(3),
                total_tokens: Some(15),
            }));
            events.push(finished(Outcome::Completed));
            Ok(())
        }
        "tool_call_and_result" => {
            events.extend(call("call_1", "weather", &[r#"{"city":"#, r#""Paris"}"#]));
            events.extend([Event::ToolResult {
                call_id: "call_1".into(),
                message_id: "m_result".into(),
                content: "sunny".into(),
                is_error: false,
            }]);
            events.extend(text("m2", &["It is sunny in Paris."]));
            events.push(finished(Outcome::Completed));
            Ok(())
        }
        "reasoning_then_text" => {
            events.extend([
                Event::ReasoningStart {
                    message_id: "r1".into(),
                },
                Event::ReasoningDelta {
                    message_id: "r1".into(),
                    delta: "The user greets me.".into(),
                },
                Event::ReasoningEnd {
                    message_id: "r1".into(),
                },
            ]);
            events.extend(text("m1", &["Hi!"]));
            events.push(finished(Outcome::Completed));
            Ok(())
        }
        "approval_pause" => {
            events.extend(text("m1", &["I need to delete a file."]));
            events.push(Event::Interrupt(Interrupt {
                id: "int_1".into(),
                kind: InterruptKind::Approval {
                    tool: "delete_file".into(),
                    args: json!({"path": "/tmp/x"}),
                    hint: Some("Delete /tmp/x?".into()),
                },
            }));
            events.push(finished(Outcome::Interrupted));
            Ok(())
        }
        "error_after_text" => {
            events.extend(text("m1", &["Let me check"]));
            Err(Error::upstream_agent("AGENT_FAILED", "disk on fire"))
        }
        "cancelled" => {
            events.extend(text("m1", &["Partial"]));
            events.push(finished(Outcome::Cancelled));
            Ok(())
        }
        other => panic!("no canonical run named {other}"),
    };
    (events, ended)
}

const CASES: &[&str] = &[
    "text_reply",
    "tool_call_and_result",
    "reasoning_then_text",
    "approval_pause",
    "error_after_text",
    "cancelled",
];

/// The run as the hub hands it to an encoder.
fn normalized(case: &str) -> Vec<Event> {
    let (events, ended) = run(case);
    let mut normalizer = Normalizer::new();
    let mut out = Vec::new();
    for event in events {
        normalizer.push(event, &mut out);
    }
    normalizer.finish(ended, &mut out);
    out
}

fn fixture(protocol: &str, case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(protocol)
        .join("encoder")
        .join(format!("{case}.expected.sse"))
}

#[test]
fn ag_kit_frames_match_their_golden_files() {
    for case in CASES {
        let mut frames = BytesMut::new();
        let mut encoder = ag_kit::Encoder;
        for event in normalized(case) {
            encoder.encode(event, &mut frames);
        }
        encoder.finish(&mut frames);
        let text = String::from_utf8(frames.to_vec()).expect("UTF-8 frames");
        golden::check(&fixture("ag-kit", case), &text);
    }
}

/// The CMDC encoder writes a turn's own events, as a session's subscribers read them (`GET …/events`). The run
/// around them (`prompt_received`, `agent_start`, the end, an error, a pause and its answer) is the session
/// runner's, asserted where a session runs (`cmdc_inbound`): the golden files here are the runs whose events
/// are all the encoder's.
#[test]
fn cmdc_events_match_their_golden_files() {
    for case in ["text_reply", "tool_call_and_result", "reasoning_then_text"] {
        let mut encoder = cmdc::Encoder::new(Vec::new());
        let mut events = Vec::new();
        for event in normalized(case) {
            encoder.encode(event, &mut events);
        }
        encoder.finish(&mut events);
        let mut frames = BytesMut::new();
        for event in &events {
            event.write_sse(&mut frames);
        }
        let text = String::from_utf8(frames.to_vec()).expect("UTF-8 frames");
        golden::check(&fixture("cmdc", case), &text);
    }
}
