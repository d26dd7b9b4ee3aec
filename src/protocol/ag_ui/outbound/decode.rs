//! AG-UI outbound, the response: the upstream's SSE stream becomes canonical events, tolerating what real
//! servers send (`specs/ag-ui.md` §5.2).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use super::empty_object;
use super::pause_tools::Diverter;
use crate::error::{Error, Result};
use crate::face::{StreamEnd, UpstreamDecoder};
use crate::model::{new_id, Event, Interrupt, InterruptKind, Outcome, Role};
use crate::protocol::ag_ui::{message_from_wire, wire};
use crate::sse::SseEvent;

/// How long to wait, after `RUN_FINISHED`, for another run in the same response before finishing.
const NEXT_RUN_GRACE: Duration = Duration::from_secs(2);

/// Decodes an upstream AG-UI stream, one `data:` payload at a time, into canonical events.
#[derive(Default)]
pub struct Decoder {
    /// Turns calls of the pause tools the proxy answers into interrupts.
    pub(super) pauses: Diverter,
    /// The call opened by `TOOL_CALL_CHUNK` events: it ends at the first event that is not one of its chunks.
    chunk_call: Option<String>,
    /// The reasoning message opened by a pre-1.0 `THINKING_TEXT_MESSAGE_START`.
    thinking_id: Option<String>,
    /// `RUN_FINISHED` is held until the stream ends: a server may start another run in the same response.
    held_finish: Option<Event>,
    /// Names and arguments of the calls seen, to describe an approval interrupt that points at one.
    calls: HashMap<String, (String, String)>,
}

impl UpstreamDecoder for Decoder {
    fn frame(&mut self, frame: &SseEvent, out: &mut Vec<Event>) -> Result<bool> {
        self.decode(&frame.data, out)
    }

    fn end(&mut self, end: StreamEnd, out: &mut Vec<Event>) -> Result<()> {
        match end {
            StreamEnd::BrokeOff => Err(Error::upstream_eof()),
            // The AG-UI clients read a last event without its blank line; so does the proxy.
            StreamEnd::InsideEvent(Some(frame)) => {
                if !self.decode(&frame.data, out)? {
                    self.finish(out);
                }
                Ok(())
            }
            StreamEnd::Whole | StreamEnd::InsideEvent(None) => {
                self.finish(out);
                Ok(())
            }
        }
    }

    /// After `RUN_FINISHED` another run may follow in the same response, but a server that keeps the
    /// connection open must not keep the client waiting.
    fn patience(&self) -> Option<Duration> {
        self.holds_finish().then_some(NEXT_RUN_GRACE)
    }
}

impl Decoder {
    /// A decoder that reads calls of the pause tools `pauses` names as interrupts.
    pub(super) fn diverting(pauses: Diverter) -> Self {
        Self {
            pauses,
            ..Self::default()
        }
    }

    /// Decodes one event. Returns `true` when the run is over (an error) and the rest can be ignored.
    pub fn decode(&mut self, data: &str, out: &mut Vec<Event>) -> Result<bool> {
        let event: wire::Event<'_> = serde_json::from_str(data).map_err(|e| {
            Error::upstream_malformed(format!("upstream sent an event that is not AG-UI: {e}"))
        })?;
        let from = out.len();
        if !matches!(event, wire::Event::ToolCallChunk { .. }) {
            self.end_chunk_call(out);
        }
        self.translate(event, out);
        self.pauses.divert(out, from);
        Ok(matches!(out.last(), Some(Event::RunError(_))))
    }

    /// Whether a `RUN_FINISHED` is held back, waiting to see whether another run follows.
    pub fn holds_finish(&self) -> bool {
        self.held_finish.is_some()
    }

    /// At the end of the stream: the held finish, if any. Without one, the run was cut short.
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        let from = out.len();
        self.end_chunk_call(out);
        self.pauses.divert(out, from);
        out.extend(self.held_finish.take());
    }

    fn end_chunk_call(&mut self, out: &mut Vec<Event>) {
        if let Some(call_id) = self.chunk_call.take() {
            out.push(Event::ToolCallEnd { call_id });
        }
    }

    fn translate(&mut self, event: wire::Event<'_>, out: &mut Vec<Event>) {
        use wire::Event as W;
        // After RUN_FINISHED only a new run or an error may follow (the clients' own rule): anything else is a
        // buggy adapter's late event, dropped rather than merged into the finished run.
        let may_follow = matches!(event, W::RunStarted { .. } | W::RunError { .. });
        if self.held_finish.is_some() && !may_follow {
            return tracing::debug!("dropping an AG-UI event after RUN_FINISHED");
        }
        let event = match event {
            W::RunStarted { .. } => {
                if self.held_finish.take().is_some() {
                    tracing::debug!("upstream started another run in the same response; merging");
                }
                Event::RunStarted
            }
            W::RunFinished { outcome, .. } => {
                let outcome = self.outcome(outcome, out);
                self.held_finish = Some(Event::RunFinished {
                    outcome,
                    usage: None,
                });
                return;
            }
            W::RunError { message, code } => Event::RunError(Error::upstream_agent(
                code.map_or_else(|| "UPSTREAM_ERROR".to_owned(), |c| c.into_owned()),
                message.into_owned(),
            )),
            W::StepStarted { step_name } => Event::StepStarted {
                name: step_name.into_owned(),
            },
            W::StepFinished { step_name } => Event::StepFinished {
                name: step_name.into_owned(),
            },
            W::TextMessageStart { message_id, role } => Event::TextStart {
                message_id: message_id.into_owned(),
                role: match role {
                    Some(wire::TextRole::Developer) => Role::Developer,
                    Some(wire::TextRole::System) => Role::System,
                    Some(wire::TextRole::User) => Role::User,
                    Some(wire::TextRole::Assistant) | None => Role::Assistant,
                },
            },
            W::TextMessageContent { message_id, delta } => Event::TextDelta {
                message_id: message_id.into_owned(),
                delta: delta.into_owned(),
            },
            W::TextMessageEnd { message_id } => Event::TextEnd {
                message_id: message_id.into_owned(),
            },
            W::TextMessageChunk { message_id, delta } => Event::TextDelta {
                message_id: message_id.map(|id| id.into_owned()).unwrap_or_default(),
                delta: delta.map(|d| d.into_owned()).unwrap_or_default(),
            },
            W::ToolCallStart {
                tool_call_id,
                tool_call_name,
                parent_message_id,
            } => {
                let call_id = tool_call_id.into_owned();
                self.calls
                    .insert(call_id.clone(), (tool_call_name.to_string(), String::new()));
                Event::ToolCallStart {
                    call_id,
                    name: tool_call_name.into_owned(),
                    parent_message_id: parent_message_id.map(|id| id.into_owned()),
                }
            }
            W::ToolCallArgs {
                tool_call_id,
                delta,
            } => {
                self.note_args(&tool_call_id, &delta);
                Event::ToolCallArgs {
                    call_id: tool_call_id.into_owned(),
                    delta: delta.into_owned(),
                }
            }
            W::ToolCallEnd { tool_call_id } => Event::ToolCallEnd {
                call_id: tool_call_id.into_owned(),
            },
            W::ToolCallChunk {
                tool_call_id,
                tool_call_name,
                parent_message_id,
                delta,
            } => {
                return self.tool_call_chunk(
                    tool_call_id,
                    tool_call_name,
                    parent_message_id,
                    delta,
                    out,
                );
            }
            W::ToolCallResult {
                message_id,
                tool_call_id,
                content,
            } => Event::ToolResult {
                call_id: tool_call_id.into_owned(),
                message_id: message_id.into_owned(),
                content: flatten_result(content),
                is_error: false,
            },
            W::StateSnapshot { snapshot } => Event::StateSnapshot(snapshot),
            W::StateDelta { delta } => Event::StateDelta(delta),
            W::MessagesSnapshot { messages } => Event::MessagesSnapshot(
                messages.into_iter().filter_map(message_from_wire).collect(),
            ),
            W::Raw { event, source } => Event::Raw {
                source: source.map(|s| s.into_owned()),
                event,
            },
            W::Custom { name, value } => Event::Custom {
                name: name.into_owned(),
                value,
            },
            W::ReasoningMessageStart { message_id, .. } => Event::ReasoningStart {
                message_id: message_id.into_owned(),
            },
            W::ReasoningMessageContent { message_id, delta } => Event::ReasoningDelta {
                message_id: message_id.into_owned(),
                delta: delta.into_owned(),
            },
            W::ReasoningMessageEnd { message_id } => Event::ReasoningEnd {
                message_id: message_id.into_owned(),
            },
            W::ReasoningMessageChunk { message_id, delta } => Event::ReasoningDelta {
                message_id: message_id.map(|id| id.into_owned()).unwrap_or_default(),
                delta: delta.map(|d| d.into_owned()).unwrap_or_default(),
            },
            W::ThinkingTextMessageStart => {
                let message_id = new_id("reasoning");
                self.thinking_id = Some(message_id.clone());
                Event::ReasoningStart { message_id }
            }
            W::ThinkingTextMessageContent { delta } => Event::ReasoningDelta {
                message_id: self.thinking_id.clone().unwrap_or_default(),
                delta: delta.into_owned(),
            },
            W::ThinkingTextMessageEnd => match self.thinking_id.take() {
                Some(message_id) => Event::ReasoningEnd { message_id },
                None => return,
            },
            // Reasoning spans and thinking brackets only group what the messages already say.
            W::ReasoningStart { .. }
            | W::ReasoningEnd { .. }
            | W::ThinkingStart
            | W::ThinkingEnd => return,
            W::Unknown => {
                tracing::debug!("dropping an AG-UI event type this proxy does not translate");
                return;
            }
        };
        out.push(event);
    }

    fn note_args(&mut self, call_id: &str, delta: &str) {
        if let Some((_, args)) = self.calls.get_mut(call_id) {
            args.push_str(delta);
        }
    }

    /// `TOOL_CALL_CHUNK`: the first chunk of a call carries its id and name; later ones may carry only args.
    fn tool_call_chunk(
        &mut self,
        call_id: Option<std::borrow::Cow<'_, str>>,
        name: Option<std::borrow::Cow<'_, str>>,
        parent_message_id: Option<std::borrow::Cow<'_, str>>,
        delta: Option<std::borrow::Cow<'_, str>>,
        out: &mut Vec<Event>,
    ) {
        let call_id = match call_id {
            Some(id) if self.chunk_call.as_deref() != Some(&*id) => {
                self.end_chunk_call(out);
                let id = id.into_owned();
                let name = name.map(|n| n.into_owned()).unwrap_or_default();
                self.calls.insert(id.clone(), (name.clone(), String::new()));
                out.push(Event::ToolCallStart {
                    call_id: id.clone(),
                    name,
                    parent_message_id: parent_message_id.map(|p| p.into_owned()),
                });
                self.chunk_call = Some(id.clone());
                id
            }
            _ => match &self.chunk_call {
                Some(open) => open.clone(),
                None => return tracing::debug!("dropping a TOOL_CALL_CHUNK with no call open"),
            },
        };
        if let Some(delta) = delta.filter(|d| !d.is_empty()) {
            self.note_args(&call_id, &delta);
            out.push(Event::ToolCallArgs {
                call_id,
                delta: delta.into_owned(),
            });
        }
    }

    /// The canonical outcome of `RUN_FINISHED`; its interrupts are pushed as events first.
    fn outcome(&self, outcome: Option<wire::RunOutcome>, out: &mut Vec<Event>) -> Outcome {
        match outcome {
            Some(wire::RunOutcome::Interrupt { interrupts }) => {
                out.extend(
                    interrupts
                        .into_iter()
                        .map(|i| Event::Interrupt(self.interrupt(i))),
                );
                Outcome::Interrupted
            }
            Some(wire::RunOutcome::Cancelled) => Outcome::Cancelled,
            Some(wire::RunOutcome::Success) | None => Outcome::Completed,
        }
    }

    /// An AG-UI interrupt is an approval when its reason says so (described by the call it points at),
    /// otherwise a question.
    fn interrupt(&self, interrupt: wire::Interrupt) -> Interrupt {
        let kind = if interrupt.reason.to_ascii_lowercase().contains("approv") {
            let call = interrupt
                .tool_call_id
                .as_ref()
                .and_then(|id| self.calls.get(id));
            InterruptKind::Approval {
                tool: call.map_or_else(|| interrupt.reason.clone(), |(name, _)| name.clone()),
                args: call
                    .and_then(|(_, args)| serde_json::from_str(args).ok())
                    .unwrap_or_else(empty_object),
                hint: interrupt.message,
            }
        } else {
            InterruptKind::Question {
                text: interrupt.message.unwrap_or(interrupt.reason),
                options: Vec::new(),
            }
        };
        Interrupt {
            id: interrupt.id,
            kind,
        }
    }
}

/// Tool results are strings in the canonical model: text parts joined, anything else as JSON.
fn flatten_result(content: wire::ToolResultContent<'_>) -> String {
    match content {
        wire::ToolResultContent::Text(text) => text.into_owned(),
        wire::ToolResultContent::Parts(parts) => {
            let texts: Option<Vec<&str>> = parts
                .iter()
                .map(|part| match (part.get("type"), part.get("text")) {
                    (Some(kind), Some(Value::String(text))) if kind == "text" => {
                        Some(text.as_str())
                    }
                    _ => None,
                })
                .collect();
            texts.map_or_else(
                || Value::Array(parts.clone()).to_string(),
                |texts| texts.concat(),
            )
        }
    }
}
