//! The answer: each `data:` payload of the runtime's SSE stream, as canonical events.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde_json::{Map, Value};
use tracing::debug;

use crate::error::{Error, Result};
use crate::face::{StreamEnd, UpstreamDecoder};
use crate::model::{new_id, Event, Outcome, Role, Usage};
use crate::protocol::agentscope::wire;
use crate::sse::SseEvent;

use super::{PendingApproval, AGENTSCOPE_ERROR};

mod calls;
mod content;

/// Decodes an upstream `/process` stream, one `data:` payload at a time, into canonical events (loose:
/// the normalizer makes them well formed).
#[derive(Debug, Default)]
pub struct Decoder {
    /// Names of the tools the client executes: their calls are not streamed.
    client_tools: HashSet<String>,
    /// Messages seen, by id.
    messages: HashMap<String, OpenMessage>,
    /// The message the last message event named: where contents without `msg_id` belong.
    last_message: Option<String>,
    /// Tool calls, by `(message id, content index)`.
    calls: HashMap<(String, u32), Call>,
    /// Call ids in the order they started, to end them at the end of the run.
    call_order: Vec<(String, u32)>,
    /// Contents dealt with once and for all (results, approvals, artifacts), by `(message id, index)`.
    settled: HashSet<(String, u32)>,
    /// Approval requests decoded since the last [`Decoder::take_approvals`].
    approvals: Vec<PendingApproval>,
    /// Every approval id seen in this run.
    approval_ids: Vec<String>,
    /// The message `{"text": …}` frames of custom-function apps stream into.
    text_frames: Option<String>,
    /// A protocol object (`response`, `message`, `content`) was decoded.
    saw_object: bool,
    /// A terminal event was decoded.
    done: bool,
}

#[derive(Debug)]
struct OpenMessage {
    kind: wire::MessageType,
    role: Role,
    /// The text or reasoning start was emitted.
    started: bool,
    /// Text sent so far per content index (text-like messages).
    texts: HashMap<u32, String>,
    /// Tool results emitted from this message (the first takes the message's id).
    results: u32,
    completed: bool,
}

#[derive(Debug)]
struct Call {
    call_id: String,
    name: String,
    client: bool,
    started: bool,
    /// Arguments sent downstream.
    sent: String,
    /// The latest snapshot.
    latest: String,
    ended: bool,
}

impl UpstreamDecoder for Decoder {
    fn frame(&mut self, frame: &SseEvent, out: &mut Vec<Event>) -> Result<bool> {
        self.decode(&frame.data, out)
    }

    /// Text frames have no end marker: the end of the body after a whole event finishes their run. An end
    /// inside an event, or a connection that broke off, leaves the run without its terminal response, which
    /// the hub reports as `UPSTREAM_EOF`.
    fn end(&mut self, end: StreamEnd, out: &mut Vec<Event>) -> Result<()> {
        match end {
            StreamEnd::Whole => self.end_of_stream(out),
            StreamEnd::InsideEvent(Some(frame)) => {
                self.decode(&frame.data, out)?;
            }
            StreamEnd::InsideEvent(None) | StreamEnd::BrokeOff => {}
        }
        Ok(())
    }
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder for a turn whose client executes these tools.
    pub fn with_client_tools(names: impl IntoIterator<Item = String>) -> Self {
        Self {
            client_tools: names.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Decodes one payload. Returns `true` when the run is over (a terminal response or an error frame) and
    /// the rest of the stream can be ignored.
    pub fn decode(&mut self, data: &str, out: &mut Vec<Event>) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        let frame = match wire::Frame::parse(data) {
            Ok(frame) => frame,
            // Not the runtime's, but some proxies end streams this way.
            Err(_) if data.trim() == "[DONE]" => return Ok(false),
            Err(e) => {
                return Err(Error::upstream_malformed(format!(
                    "upstream sent an event that is not AgentScope JSON: {e}"
                )))
            }
        };
        if matches!(frame, wire::Frame::Object(_)) {
            self.saw_object = true;
        }
        match frame {
            wire::Frame::Object(object) => self.object(*object, out),
            wire::Frame::Error(error) => {
                let message = match &error.error_type {
                    Some(kind) => format!("{} ({kind})", error.error),
                    None => error.error,
                };
                self.fail(Error::upstream_agent(AGENTSCOPE_ERROR, message), out);
            }
            wire::Frame::Text(frame) => {
                let id = self
                    .text_frames
                    .get_or_insert_with(|| new_id("msg"))
                    .clone();
                if !self.messages.contains_key(&id) {
                    self.messages.insert(
                        id.clone(),
                        OpenMessage::new(wire::MessageType::Message, Role::Assistant),
                    );
                }
                self.text(&id, 0, &frame.text, true, out);
            }
            wire::Frame::Other(event) => {
                debug!("an AgentScope frame this proxy does not know; passed on raw");
                out.push(Event::Raw {
                    source: Some("agentscope".to_owned()),
                    event,
                });
            }
        }
        Ok(self.done)
    }

    fn object(&mut self, object: wire::Object, out: &mut Vec<Event>) {
        match object {
            wire::Object::Response(response) => self.response(response, out),
            wire::Object::Message(message) => self.message(message, out),
            wire::Object::Content(content) => {
                let message_id = content
                    .msg_id
                    .clone()
                    .or_else(|| self.last_message.clone())
                    .unwrap_or_default();
                let index = content.index.unwrap_or(0);
                self.content(&message_id, index, &content, out);
            }
        }
    }

    /// At the end of the body. A protocol stream that ends here ended without its terminal `response`: nothing
    /// is added, and the normalizer reports `UPSTREAM_EOF`. A custom-function app (`{"text": …}` frames only)
    /// has no terminal object: the end of its body is the end of its run.
    pub fn end_of_stream(&mut self, out: &mut Vec<Event>) {
        if self.done || self.saw_object {
            return;
        }
        if let Some(message_id) = self.text_frames.take() {
            out.push(Event::TextEnd { message_id });
            self.finish(
                Event::RunFinished {
                    outcome: Outcome::Completed,
                    usage: None,
                },
                out,
            );
        }
    }

    /// The ids of the approval requests of this run.
    pub fn approvals(&self) -> &[String] {
        &self.approval_ids
    }

    /// The approval requests decoded since the last call, to keep in the record.
    pub(crate) fn take_approvals(&mut self) -> Vec<PendingApproval> {
        std::mem::take(&mut self.approvals)
    }

    fn response(&mut self, response: wire::Response, out: &mut Vec<Event>) {
        let error = |default_code: &str, default_message: &str| match &response.error {
            Some(e) => Error::upstream_agent(
                if e.code.is_empty() {
                    default_code
                } else {
                    &e.code
                },
                if e.message.is_empty() {
                    default_message
                } else {
                    &e.message
                },
            ),
            None => Error::upstream_agent(default_code, default_message),
        };
        match &response.status {
            wire::RunStatus::Completed => {
                self.end_calls(out);
                self.finish(
                    Event::RunFinished {
                        outcome: Outcome::Completed,
                        usage: response.usage.as_ref().and_then(usage),
                    },
                    out,
                );
            }
            wire::RunStatus::Failed => self.fail(
                error(
                    AGENTSCOPE_ERROR,
                    "the AgentScope run failed without an error",
                ),
                out,
            ),
            wire::RunStatus::Canceled => self.finish(
                Event::RunFinished {
                    outcome: Outcome::Cancelled,
                    usage: response.usage.as_ref().and_then(usage),
                },
                out,
            ),
            wire::RunStatus::Rejected => self.fail(
                error(
                    "AGENTSCOPE_REJECTED",
                    "the AgentScope runtime rejected the run",
                ),
                out,
            ),
            wire::RunStatus::Incomplete => self.fail(
                error(
                    "AGENTSCOPE_INCOMPLETE",
                    "the AgentScope run ended incomplete",
                ),
                out,
            ),
            // Said at once, not left to the first content: a client shows the run as started while the
            // agent thinks. Repeats are the normalizer's to drop.
            wire::RunStatus::Created | wire::RunStatus::InProgress | wire::RunStatus::Queued => {
                out.push(Event::RunStarted)
            }
            wire::RunStatus::Unknown => {}
            wire::RunStatus::Other(status) => {
                debug!(%status, "an AgentScope response status this proxy does not know; ignored")
            }
        }
    }

    fn finish(&mut self, terminal: Event, out: &mut Vec<Event>) {
        self.done = true;
        out.push(terminal);
    }

    fn fail(&mut self, error: Error, out: &mut Vec<Event>) {
        self.finish(Event::RunError(error), out);
    }

    fn message(&mut self, message: wire::Message, out: &mut Vec<Event>) {
        if message.kind == wire::MessageType::Heartbeat {
            return;
        }
        if message.kind == wire::MessageType::Error {
            // A message-level error (defined by the schema; no real stream was seen using it).
            return self.fail(
                Error::upstream_agent(
                    message.code.as_deref().unwrap_or(AGENTSCOPE_ERROR),
                    message
                        .message
                        .as_deref()
                        .unwrap_or("the AgentScope agent reported an error"),
                ),
                out,
            );
        }
        let id = if message.id.is_empty() {
            self.last_message.clone().unwrap_or_else(|| new_id("msg"))
        } else {
            message.id.clone()
        };
        self.last_message = Some(id.clone());
        let role = match message.role {
            Some(wire::Role::User) => Role::User,
            Some(wire::Role::System) => Role::System,
            Some(wire::Role::Tool) => Role::Tool,
            Some(wire::Role::Assistant) | None => Role::Assistant,
        };
        self.messages
            .entry(id.clone())
            .or_insert_with(|| OpenMessage::new(message.kind.clone(), role));
        if !is_settled(&message.status) {
            return;
        }
        // The completed message repeats its contents (nested ones without `msg_id`/`index`): whatever was
        // not streamed is taken from here, nothing twice.
        for (position, content) in message.contents().iter().enumerate() {
            let index = content.index.unwrap_or(position as u32);
            let mut content = content.clone();
            content.status = Some(wire::RunStatus::Completed);
            self.content(&id, index, &content, out);
        }
        self.complete_message(&id, &message, out);
    }

    /// Ends a settled message: its text, its calls, or (for kinds without a canonical form) the whole
    /// message as a custom event.
    fn complete_message(&mut self, id: &str, message: &wire::Message, out: &mut Vec<Event>) {
        let Some(open) = self.messages.get_mut(id) else {
            return;
        };
        if open.completed {
            return;
        }
        open.completed = true;
        match &open.kind {
            wire::MessageType::Message if open.started => out.push(Event::TextEnd {
                message_id: id.to_owned(),
            }),
            wire::MessageType::Reasoning if open.started => out.push(Event::ReasoningEnd {
                message_id: id.to_owned(),
            }),
            kind if kind.is_call() => {
                let keys: Vec<(String, u32)> = self
                    .call_order
                    .iter()
                    .filter(|(message_id, _)| message_id == id)
                    .cloned()
                    .collect();
                for key in keys {
                    self.end_call(&key, None, out);
                }
            }
            wire::MessageType::Message
            | wire::MessageType::Reasoning
            | wire::MessageType::FunctionCallOutput
            | wire::MessageType::PluginCallOutput
            | wire::MessageType::McpCallOutput
            | wire::MessageType::ComponentCallOutput
            | wire::MessageType::McpApprovalRequest => {}
            kind => {
                debug!(%kind, "an AgentScope message type without a canonical form; passed on as custom");
                out.push(Event::Custom {
                    name: format!("agentscope.{kind}"),
                    value: serde_json::to_value(message).unwrap_or(Value::Null),
                });
            }
        }
    }
}

impl OpenMessage {
    fn new(kind: wire::MessageType, role: Role) -> Self {
        Self {
            kind,
            role,
            started: false,
            texts: HashMap::new(),
            results: 0,
            completed: false,
        }
    }
}

/// Whether a message or content status means "this is the whole thing".
fn is_settled(status: &wire::RunStatus) -> bool {
    matches!(
        status,
        wire::RunStatus::Completed
            | wire::RunStatus::Failed
            | wire::RunStatus::Canceled
            | wire::RunStatus::Incomplete
            | wire::RunStatus::Rejected
    )
}

/// The longest common prefix of two strings, cut on a character boundary.
pub(super) fn common_prefix<'a>(a: &'a str, b: &str) -> &'a str {
    let end = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or_else(|| a.len().min(b.len()), |((i, _), _)| i);
    let mut end = end.min(a.len());
    while !a.is_char_boundary(end) {
        end -= 1;
    }
    &a[..end]
}

/// A tool's `output`: the runtime writes the JSON text of its result blocks
/// (`[{"type": "text", "text": "sunny"}]`); when it is a list of text blocks only, their text is the result,
/// otherwise the string as it came.
pub(super) fn result_text(output: &str) -> String {
    #[derive(Deserialize)]
    struct Block {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default)]
        text: Option<String>,
    }
    if !output.trim_start().starts_with('[') {
        return output.to_owned();
    }
    match serde_json::from_str::<Vec<Block>>(output) {
        Ok(blocks) if !blocks.is_empty() && blocks.iter().all(|b| b.kind == "text") => blocks
            .into_iter()
            .filter_map(|b| b.text)
            .collect::<Vec<_>>()
            .concat(),
        _ => output.to_owned(),
    }
}

/// The runtime's `usage` (`{input_tokens, output_tokens, …}`) as canonical usage; `None` when it has no
/// counts.
pub(super) fn usage(map: &Map<String, Value>) -> Option<Usage> {
    let count = |key: &str| map.get(key).and_then(Value::as_u64);
    let input_tokens = count("input_tokens");
    let output_tokens = count("output_tokens");
    let total_tokens = count("total_tokens").or(match (input_tokens, output_tokens) {
        (Some(i), Some(o)) => Some(i + o),
        _ => None,
    });
    (input_tokens.is_some() || output_tokens.is_some() || total_tokens.is_some()).then_some(Usage {
        input_tokens,
        output_tokens,
        total_tokens,
    })
}
