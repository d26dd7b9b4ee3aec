//! AG-Kit inbound, the response: canonical events become v0 frames ending with `data: [DONE]`.

use bytes::BytesMut;
use serde_json::{json, Value};
use tracing::debug;

use crate::face::EventEncoder;
use crate::model::{Event, Interrupt, InterruptKind};
use crate::protocol::ag_kit::{wire, APPROVAL, INPUT_REQUIRED, QUESTION};
use crate::sse;

/// Encodes one run's canonical events as v0 frames. The normalizer already serialized tool calls and made
/// their arguments JSON, which is what `useChat` needs.
pub struct Encoder;

impl EventEncoder for Encoder {
    type Out = BytesMut;

    /// The frames for one event; none for events v0 has no form for.
    fn encode(&mut self, event: Event, out: &mut BytesMut) {
        match event {
            Event::TextDelta { delta, .. } if !delta.is_empty() => {
                write(
                    out,
                    &wire::Event::Text {
                        content: delta.into(),
                    },
                );
            }
            Event::ToolCallStart { call_id, name, .. } => write(
                out,
                &wire::Event::ToolCallStart {
                    tool_call_id: call_id.into(),
                    tool_call_name: name.into(),
                },
            ),
            Event::ToolCallArgs { call_id, delta } if !delta.is_empty() => {
                write(
                    out,
                    &wire::Event::ToolCallArgs {
                        tool_call_id: call_id.into(),
                        delta: delta.into(),
                    },
                );
            }
            Event::ToolCallEnd { call_id } => write(
                out,
                &wire::Event::ToolCallEnd {
                    tool_call_id: call_id.into(),
                },
            ),
            Event::ToolResult {
                call_id, content, ..
            } => write(
                out,
                &wire::Event::ToolResult {
                    tool_call_id: call_id.into(),
                    result: Value::String(content),
                },
            ),
            Event::Interrupt(interrupt) => write(out, &interrupt_to_wire(interrupt)),
            Event::RunFinished { .. } => done(out),
            Event::RunError(error) => {
                write(
                    out,
                    &wire::Event::Error {
                        code: Some(error.code().to_owned()),
                        message: error.message().to_owned(),
                    },
                );
                done(out);
            }
            Event::RunStarted
            | Event::TextStart { .. }
            | Event::TextDelta { .. }
            | Event::TextEnd { .. }
            | Event::ToolCallArgs { .. } => {}
            other => debug!(
                event = %crate::logging::clipped(&format!("{other:?}")),
                "AG-Kit v0 has no event for this; not sent"
            ),
        }
    }
}

fn write(out: &mut BytesMut, event: &wire::Event<'_>) {
    sse::write_json_event(out, event);
}

fn done(out: &mut BytesMut) {
    sse::write_event(out, None, wire::DONE);
}

/// A canonical pause as an `interrupt` event (`specs/ag-kit.md` §4.3).
fn interrupt_to_wire(interrupt: Interrupt) -> wire::Event<'static> {
    let (reason, payload) = match interrupt.kind {
        InterruptKind::Approval { tool, args, hint } => {
            let mut payload = json!({"toolName": tool, "args": args});
            if let Some(hint) = hint {
                payload["hint"] = Value::String(hint);
            }
            (APPROVAL.to_owned(), payload)
        }
        InterruptKind::Question { text, options } => (
            QUESTION.to_owned(),
            json!({"question": text, "options": options}),
        ),
        InterruptKind::InputRequired { text } => {
            (INPUT_REQUIRED.to_owned(), json!({"message": text}))
        }
        InterruptKind::Custom { reason, payload } => (reason, payload),
    };
    wire::Event::Interrupt {
        id: interrupt.id,
        reason,
        payload,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::model::Role;

    fn frames(events: Vec<Event>) -> String {
        let mut bytes = BytesMut::new();
        for event in events {
            Encoder.encode(event, &mut bytes);
        }
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn events_become_v0_frames_ending_with_done() {
        let text = frames(vec![
            Event::RunStarted,
            Event::TextStart {
                message_id: "m1".into(),
                role: Role::Assistant,
            },
            Event::TextDelta {
                message_id: "m1".into(),
                delta: "Hello".into(),
            },
            Event::TextEnd {
                message_id: "m1".into(),
            },
            Event::ReasoningDelta {
                message_id: "r1".into(),
                delta: "hmm".into(),
            },
            Event::ToolCallStart {
                call_id: "c1".into(),
                name: "get_weather".into(),
                parent_message_id: Some("m1".into()),
            },
            Event::ToolCallArgs {
                call_id: "c1".into(),
                delta: "{}".into(),
            },
            Event::ToolCallEnd {
                call_id: "c1".into(),
            },
            Event::ToolResult {
                call_id: "c1".into(),
                message_id: "r1".into(),
                content: "sunny".into(),
                is_error: false,
            },
            Event::RunFinished {
                outcome: crate::model::Outcome::Completed,
                usage: None,
            },
        ]);
        assert_eq!(
            text,
            concat!(
                "data: {\"type\":\"text\",\"content\":\"Hello\"}\n\n",
                "data: {\"type\":\"tool-call-start\",\"toolCallId\":\"c1\",\"toolCallName\":\"get_weather\"}\n\n",
                "data: {\"type\":\"tool-call-args\",\"toolCallId\":\"c1\",\"delta\":\"{}\"}\n\n",
                "data: {\"type\":\"tool-call-end\",\"toolCallId\":\"c1\"}\n\n",
                "data: {\"type\":\"tool-result\",\"toolCallId\":\"c1\",\"result\":\"sunny\"}\n\n",
                "data: [DONE]\n\n",
            )
        );
    }

    #[test]
    fn pauses_are_interrupts_with_the_documented_reasons() {
        let approval = frames(vec![Event::Interrupt(Interrupt {
            id: "int_1".into(),
            kind: InterruptKind::Approval {
                tool: "Shell".into(),
                args: json!({"command": "ls"}),
                hint: None,
            },
        })]);
        assert_eq!(
            approval,
            "data: {\"type\":\"interrupt\",\"id\":\"int_1\",\"reason\":\"approval\",\"payload\":{\"args\":{\"command\":\"ls\"},\"toolName\":\"Shell\"}}\n\n"
        );
        let custom = frames(vec![Event::Interrupt(Interrupt {
            id: "int_2".into(),
            kind: InterruptKind::Custom {
                reason: "waiting_for_user_selection".into(),
                payload: json!({"steps": []}),
            },
        })]);
        assert!(
            custom.contains("\"reason\":\"waiting_for_user_selection\",\"payload\":{\"steps\":[]}")
        );
    }

    #[test]
    fn an_error_is_an_error_frame_then_done() {
        let text = frames(vec![Event::RunError(Error::upstream_eof())]);
        assert_eq!(
            text,
            "data: {\"type\":\"error\",\"code\":\"UPSTREAM_EOF\",\"message\":\"upstream stream ended before the run finished\"}\n\ndata: [DONE]\n\n"
        );
    }
}
