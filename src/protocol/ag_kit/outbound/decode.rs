//! AG-Kit outbound, the response: the v0 stream becomes canonical events, tolerating what legacy servers
//! send (`specs/ag-kit.md` §5.2).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{json, Value};
use tracing::{debug, warn};

use crate::error::{Error, Result};
use crate::face::{StreamEnd, UpstreamDecoder};
use crate::model::{Event, Interrupt, InterruptKind, Outcome};
use crate::protocol::ag_kit::{wire, APPROVAL, INPUT_REQUIRED, QUESTION};
use crate::protocol::ag_ui;
use crate::sse::SseEvent;

/// Decodes an upstream v0 stream, one `data:` payload at a time, into canonical events. A stream whose first
/// event is AG-UI (a current CloudBase server on the same path) is read as AG-UI from then on.
#[derive(Default)]
pub struct Decoder {
    dialect: Dialect,
    interrupted: bool,
    /// Tool calls started and not ended: a stream that ends while one is open was cut off.
    open_calls: Vec<String>,
    finished: bool,
}

#[derive(Default)]
enum Dialect {
    #[default]
    Undetected,
    V0,
    AgUi(Box<ag_ui::Decoder>),
}

/// Only the `type` of an event, to tell the two dialects apart.
#[derive(Deserialize)]
struct Kind<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
}

impl UpstreamDecoder for Decoder {
    fn frame(&mut self, frame: &SseEvent, out: &mut Vec<Event>) -> Result<bool> {
        Ok(self.decode(&frame.data, out))
    }

    fn end(&mut self, end: StreamEnd, out: &mut Vec<Event>) -> Result<()> {
        match end {
            StreamEnd::Whole => {
                self.end_of_stream(out);
                Ok(())
            }
            // Without a blank line after it, only the end marker is known to be whole.
            StreamEnd::InsideEvent(Some(frame)) if is_done(&frame.data) => {
                self.decode(&frame.data, out);
                Ok(())
            }
            // v0 has no end marker to miss: an event cut short is the sign of a stream that broke off.
            StreamEnd::InsideEvent(_) => {
                debug!("the upstream AG-Kit stream ended inside an event");
                Err(Error::upstream_eof())
            }
            StreamEnd::BrokeOff => Err(Error::upstream_eof()),
        }
    }
}

impl Decoder {
    /// Decodes one payload. Returns `true` when the turn is over (`[DONE]` or an error).
    pub fn decode(&mut self, data: &str, out: &mut Vec<Event>) -> bool {
        if is_done(data) {
            self.finish(out);
            return true;
        }
        // The seed's own example pads payloads with tabs.
        let data = data.trim();
        if let Dialect::Undetected = self.dialect {
            self.dialect = detect(data);
        }
        if let Dialect::AgUi(decoder) = &mut self.dialect {
            let over = decoder.decode(data, out).unwrap_or_else(|error| {
                out.push(Event::RunError(error));
                true
            });
            // Finished: a server that keeps the connection open must not keep the client waiting.
            if decoder.holds_finish() {
                self.finish(out);
                return true;
            }
            return over;
        }
        self.decode_v0(data, out)
    }

    /// At the end of the body: the end of the run, as `[DONE]` is (v0 does not require it), unless a tool call
    /// is still open — then the stream was cut off.
    pub fn end_of_stream(&mut self, out: &mut Vec<Event>) {
        if let Some(call_id) = self.open_calls.first().filter(|_| !self.finished) {
            debug!(call = %call_id, "the upstream AG-Kit stream ended inside a tool call");
            self.finished = true;
            out.push(Event::RunError(Error::upstream_eof()));
            return;
        }
        self.finish(out);
    }

    /// At `[DONE]` or the end of the body: the end of the run.
    fn finish(&mut self, out: &mut Vec<Event>) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        match &mut self.dialect {
            Dialect::AgUi(decoder) => decoder.finish(out),
            Dialect::V0 | Dialect::Undetected => out.push(Event::RunFinished {
                outcome: if self.interrupted {
                    Outcome::Interrupted
                } else {
                    Outcome::Completed
                },
                usage: None,
            }),
        }
    }

    fn decode_v0(&mut self, data: &str, out: &mut Vec<Event>) -> bool {
        let event: wire::Event<'_> = match serde_json::from_str(data) {
            Ok(event) => event,
            Err(e) => {
                out.push(Event::RunError(undecodable(data, e)));
                return true;
            }
        };
        let event = match event {
            wire::Event::Text { content } => Event::TextDelta {
                message_id: String::new(),
                delta: content.into_owned(),
            },
            wire::Event::Thinking { content } => Event::ReasoningDelta {
                message_id: String::new(),
                delta: content.into_owned(),
            },
            wire::Event::ToolCallStart {
                tool_call_id,
                tool_call_name,
            } => {
                self.open_calls.push(tool_call_id.to_string());
                Event::ToolCallStart {
                    call_id: tool_call_id.into_owned(),
                    name: tool_call_name.into_owned(),
                    parent_message_id: None,
                }
            }
            wire::Event::ToolCallArgs {
                tool_call_id,
                delta,
            } => Event::ToolCallArgs {
                call_id: tool_call_id.into_owned(),
                delta: delta.into_owned(),
            },
            wire::Event::ToolCallEnd { tool_call_id } => {
                self.open_calls.retain(|open| **open != *tool_call_id);
                Event::ToolCallEnd {
                    call_id: tool_call_id.into_owned(),
                }
            }
            wire::Event::ToolResult {
                tool_call_id,
                result,
            } => Event::ToolResult {
                call_id: tool_call_id.into_owned(),
                message_id: String::new(),
                content: match result {
                    Value::String(text) => text,
                    other => other.to_string(),
                },
                is_error: false,
            },
            wire::Event::Interrupt {
                id,
                reason,
                payload,
            } => {
                self.interrupted = true;
                Event::Interrupt(interrupt_from_wire(id, reason, payload))
            }
            wire::Event::Error { code, message } => {
                out.push(Event::RunError(agent_error(code, message)));
                return true;
            }
            wire::Event::Unknown => {
                debug!("dropping an AG-Kit event type this proxy does not translate");
                return false;
            }
        };
        out.push(event);
        false
    }
}

/// Why a payload that is no v0 event ends the run: an error object (`{"error": …}`, shape unconfirmed) is the
/// agent's error; anything else (not JSON, a v0 type whose fields do not fit) is a broken stream. An event of
/// a type this proxy does not know is no such payload: it reads as [`wire::Event::Unknown`], skipped.
fn undecodable(data: &str, cause: serde_json::Error) -> Error {
    #[derive(Deserialize)]
    struct ErrorObject {
        error: Value,
    }
    match serde_json::from_str::<ErrorObject>(data) {
        Ok(ErrorObject { error }) => error_object(error),
        Err(_) => Error::upstream_malformed(format!(
            "upstream sent a frame that is not an AG-Kit v0 event ({cause}): {}",
            crate::logging::clipped(data)
        )),
    }
}

/// Whether a payload is the end marker, whatever whitespace pads it.
fn is_done(data: &str) -> bool {
    data.trim() == wire::DONE
}

/// The agent's error from the value of an `{"error": …}` object: a message, or `{code, message}`.
fn error_object(error: Value) -> Error {
    let (code, message) = match error {
        Value::String(message) => (None, message),
        Value::Object(fields) => (
            fields.get("code").map(|code| match code {
                Value::String(code) => code.clone(),
                other => other.to_string(),
            }),
            fields
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| Value::Object(fields.clone()).to_string(), str::to_owned),
        ),
        other => (None, other.to_string()),
    };
    agent_error(code, message)
}

/// The dialect of a stream, from its first event: AG-UI event types are upper case.
fn detect(data: &str) -> Dialect {
    let kind = serde_json::from_str::<Kind<'_>>(data)
        .ok()
        .and_then(|k| k.kind);
    if kind.is_some_and(|kind| kind.starts_with(|c: char| c.is_ascii_uppercase())) {
        warn!("the AG-Kit upstream answers with AG-UI events (a current CloudBase server); reading AG-UI. Configure the route with outbound = \"ag-ui\" to send it the whole history");
        return Dialect::AgUi(Box::default());
    }
    Dialect::V0
}

fn agent_error(code: Option<String>, message: String) -> Error {
    Error::upstream_agent(code.unwrap_or_else(|| "UPSTREAM_ERROR".to_owned()), message)
}

/// An upstream interrupt: the canonical pauses this proxy's own AG-Kit inbound writes are read back as
/// such (`specs/ag-kit.md` §4.3); any other reason is the agent's own, passed through.
fn interrupt_from_wire(id: String, reason: String, payload: Value) -> Interrupt {
    let text = |key: &str| payload.get(key).and_then(Value::as_str).map(str::to_owned);
    let kind = match reason.as_str() {
        APPROVAL if text("toolName").is_some() => InterruptKind::Approval {
            tool: text("toolName").unwrap_or_default(),
            args: payload.get("args").cloned().unwrap_or_else(|| json!({})),
            hint: text("hint"),
        },
        QUESTION if text("question").is_some() => InterruptKind::Question {
            text: text("question").unwrap_or_default(),
            options: payload
                .get("options")
                .and_then(Value::as_array)
                .map(|options| {
                    options
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        },
        INPUT_REQUIRED if text("message").is_some() => InterruptKind::InputRequired {
            text: text("message").unwrap_or_default(),
        },
        _ => InterruptKind::Custom { reason, payload },
    };
    Interrupt { id, kind }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(frames: &[&str]) -> Vec<Event> {
        let mut decoder = Decoder::default();
        let mut out = Vec::new();
        for frame in frames {
            if decoder.decode(frame, &mut out) {
                return out;
            }
        }
        decoder.end_of_stream(&mut out);
        out
    }

    #[test]
    fn v0_events_become_canonical_events() {
        let events = decode_all(&[
            r#"{"type":"text","content":"Hello"}"#,
            "\t{\"type\":\"tool-call-start\",\"toolCallId\":\"s1\",\"toolCallName\":\"get_weather\"}\t",
            r#"{"type":"tool-call-args","toolCallId":"s1","delta":"{}"}"#,
            r#"{"type":"tool-call-end","toolCallId":"s1"}"#,
            r#"{"type":"tool-result","toolCallId":"s1","result":{"sky":"clear"}}"#,
            r#"{"type":"mystery"}"#,
            "[DONE]",
        ]);
        assert_eq!(events.len(), 6, "{events:#?}");
        assert!(matches!(&events[0], Event::TextDelta { delta, .. } if delta == "Hello"));
        assert!(
            matches!(&events[1], Event::ToolCallStart { call_id, name, .. } if call_id == "s1" && name == "get_weather")
        );
        assert!(
            matches!(&events[4], Event::ToolResult { content, .. } if content == r#"{"sky":"clear"}"#)
        );
        assert!(matches!(
            &events[5],
            Event::RunFinished {
                outcome: Outcome::Completed,
                ..
            }
        ));
    }

    #[test]
    fn interrupts_keep_their_id_and_the_run_pauses() {
        let mut decoder = Decoder::default();
        let mut out = Vec::new();
        decoder.decode(
            r#"{"type":"interrupt","id":"int_1","reason":"waiting_for_user_selection","payload":{"steps":[]}}"#,
            &mut out,
        );
        decoder.end_of_stream(&mut out);
        assert!(
            matches!(&out[0], Event::Interrupt(Interrupt { id, kind: InterruptKind::Custom { reason, payload } })
            if id == "int_1" && reason == "waiting_for_user_selection" && payload == &json!({"steps": []}))
        );
        assert!(matches!(
            &out[1],
            Event::RunFinished {
                outcome: Outcome::Interrupted,
                ..
            }
        ));
    }

    #[test]
    fn the_proxys_own_interrupt_reasons_read_back_as_canonical_pauses() {
        let approval = interrupt_from_wire(
            "i".into(),
            "approval".into(),
            json!({"toolName": "Shell", "args": {"command": "ls"}}),
        );
        assert!(
            matches!(approval.kind, InterruptKind::Approval { tool, args, hint: None } if tool == "Shell" && args == json!({"command": "ls"}))
        );
        let question = interrupt_from_wire(
            "i".into(),
            "question".into(),
            json!({"question": "Which city?", "options": ["Paris", "Rome"]}),
        );
        assert!(
            matches!(question.kind, InterruptKind::Question { text, options } if text == "Which city?" && options == ["Paris", "Rome"])
        );
        let bare = interrupt_from_wire("i".into(), "approval".into(), json!("yes?"));
        assert!(matches!(bare.kind, InterruptKind::Custom { .. }));
    }

    #[test]
    fn error_frames_end_the_run_with_the_agents_error() {
        for frame in [
            r#"{"type":"error","code":"RATE_LIMIT","message":"slow down"}"#,
            r#"{"error":{"code":"RATE_LIMIT","message":"slow down"}}"#,
        ] {
            let events = decode_all(&[frame, r#"{"type":"text","content":"late"}"#]);
            assert_eq!(events.len(), 1);
            let Event::RunError(error) = &events[0] else {
                panic!("{events:?}")
            };
            assert_eq!(error.code(), "RATE_LIMIT");
            assert_eq!(error.message(), "slow down");
        }
    }

    fn the_error(events: &[Event]) -> &Error {
        match events.last() {
            Some(Event::RunError(error)) => error,
            _ => panic!("the run did not end with an error: {events:#?}"),
        }
    }

    #[test]
    fn a_frame_that_is_not_a_v0_event_is_a_malformed_stream() {
        for frame in [
            "not json",
            r#"{"type":"text","content":"trunc"#,
            r#"{"type":"tool-call-start","toolCallId":"c1"}"#,
            r#"{"content":"no type"}"#,
        ] {
            let events = decode_all(&[
                r#"{"type":"text","content":"Hi"}"#,
                frame,
                r#"{"type":"text","content":"late"}"#,
            ]);
            assert_eq!(events.len(), 2, "{frame}: {events:#?}");
            assert_eq!(the_error(&events).code(), "UPSTREAM_MALFORMED", "{frame}");
        }
    }

    #[test]
    fn a_clean_end_inside_a_tool_call_is_a_cut_stream() {
        let start = r#"{"type":"tool-call-start","toolCallId":"c1","toolCallName":"paint"}"#;
        let args = r#"{"type":"tool-call-args","toolCallId":"c1","delta":"{}"}"#;
        let events = decode_all(&[start, args]);
        assert_eq!(the_error(&events).code(), "UPSTREAM_EOF");

        let ended = decode_all(&[start, args, r#"{"type":"tool-call-end","toolCallId":"c1"}"#]);
        assert!(matches!(
            ended.last(),
            Some(Event::RunFinished {
                outcome: Outcome::Completed,
                ..
            })
        ));
        let marked = decode_all(&[start, args, "[DONE]"]);
        assert!(
            matches!(marked.last(), Some(Event::RunFinished { .. })),
            "[DONE] is the agent's word that the turn is over"
        );
    }

    #[test]
    fn an_ag_ui_stream_on_the_path_is_read_as_ag_ui() {
        let events = decode_all(&[
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"Hi"}"#,
            r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r"}"#,
        ]);
        assert!(matches!(&events[1], Event::TextDelta { delta, .. } if delta == "Hi"));
        assert!(events.last().is_some_and(Event::is_terminal));
    }
}
