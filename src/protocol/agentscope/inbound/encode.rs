//! One run's canonical events as the runtime's stream of `response` / `message` / `content` objects
//! (`specs/agentscope.md` §1.4, §2.3–2.4, §4).
//!
//! `sequence_number` counts every frame from 0. The response goes `created` → `in_progress` → … → one
//! terminal `response`; each message `in_progress` → its contents → `completed` repeating its content; the
//! completed response repeats every completed message in `output`. Every field is written, `null`s included,
//! as `model_dump_json()` writes them. Two differences from the runtime's bytes, both invisible to a JSON
//! reader: a content's own field (`text`, `data`, …) comes right after `type` rather than last, and the keys
//! of a `data` object are sorted (see `wire/stream.rs`).
//!
//! | canonical | AgentScope |
//! | --- | --- |
//! | `RunStarted` | `response` `created`, then `in_progress` |
//! | text / reasoning message | `message` (`type` `message` / `reasoning`) `in_progress` at its first non-empty delta; a `text` content per delta (`delta:true`, `status:in_progress`, `index:0`); the `completed` content with the whole text (`delta:null`); the `completed` message. An empty message is not sent |
//! | tool call | `function_call` (its name is one of the request's tools: the client runs it) or `plugin_call` message, `role:assistant`; one `data` content `{call_id, name, arguments}` re-sent whole at its start (`arguments:""`) and at every args delta (replace, not append), then `completed` |
//! | tool result | `plugin_call_output` (`function_call_output` for a client tool's call) message, `role:tool`, its id the result's message id; `data` `{call_id, name, output:""}` then `completed` with the output; an error result has `metadata.is_error:true` |
//! | `Interrupt` | an `mcp_approval_request` message, `data` `{id: the interrupt id, name, arguments, server_label:"agent-bridge"}`, `metadata {interrupt: approval\|question\|input_required, prompt}`. Approvals: the tool and its arguments; questions and input requests: the route's `question_tool` with `{"question", "options"}` |
//! | `Artifact` | a `message` with one completed content per part, `metadata {artifact_id, artifact_name}` |
//! | `Usage` (or `RunFinished.usage`) | the completed response's `usage` `{input_tokens, output_tokens, total_tokens}` |
//! | `RunFinished` completed / interrupted | `response` `completed` with `completed_at` and `output` |
//! | `RunFinished` cancelled | `response` `canceled` (the runtime just ends its stream; a status says more) |
//! | `RunError` | `response` `failed`, `error {code, message}`, `completed_at:null` |
//! | state, messages snapshots, steps, custom, raw | no AgentScope form: not sent (debug log) |

use std::collections::{HashMap, HashSet};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use serde::Serialize;
use serde_json::{Map, Value};
use tracing::debug;

use super::decode::SERVER_LABEL;
use crate::error::Error;
use crate::face::EventEncoder;
use crate::model::{Artifact, Event, MediaKind, MediaSource, Outcome, Part, Role, Turn, Usage};
use crate::protocol::agentscope::wire::{
    self, ContentBody, MessageType, RunStatus, SequenceNumber,
};
use crate::sse;

mod calls;

/// What the route's options change in the output.
#[derive(Debug, Clone)]
pub struct EncodeOptions {
    /// The `name` of the approval request that carries a question.
    pub question_tool: String,
}

/// Encodes one run's events; holds what the completed response repeats.
pub struct Encoder<G = ()> {
    options: EncodeOptions,
    sequence: i64,
    response_id: String,
    session_id: String,
    created_at: i64,
    /// Names of the tools the client runs itself.
    client_tools: HashSet<String>,
    /// Call id → (name, client-side), for the results that answer them.
    calls: HashMap<String, (String, bool)>,
    open: Option<Open>,
    output: Vec<wire::Message>,
    usage: Option<Usage>,
    done: bool,
    /// Held until the run's event stream ends (the route's run lock).
    guard: Option<G>,
    buf: BytesMut,
}

/// The message being streamed.
struct Open {
    message: wire::Message,
    kind: OpenKind,
    /// Its `in_progress` frame was written.
    announced: bool,
}

enum OpenKind {
    /// Text or reasoning: the text so far.
    Text(String),
    Call {
        call_id: String,
        name: String,
        arguments: String,
    },
}

impl<G> EventEncoder for Encoder<G> {
    type Out = BytesMut;

    /// The frames for one event; none after the terminal one.
    fn encode(&mut self, event: Event, out: &mut BytesMut) {
        if !self.done {
            self.writing_to(out, |encoder| encoder.event(event));
        }
    }

    /// A stream that ended without a terminal event fails the response. The run lock is let go.
    fn finish(&mut self, out: &mut BytesMut) {
        if !self.done {
            self.writing_to(out, |encoder| {
                encoder.fail(&Error::internal("the run ended without a result"))
            });
        }
        self.guard = None;
    }
}

impl Encoder<()> {
    /// An encoder that goes on with the response a run's stream in `session_id` started: `first` and `last`,
    /// the first and the last of its frames a client got (SSE events), name it and number what follows (a
    /// detached run's follower, told the run failed).
    pub fn after(first: &[u8], last: &[u8], session_id: &str, options: EncodeOptions) -> Self {
        let data = |frame: &[u8]| {
            let mut decoder = sse::SseDecoder::new(frame.len() + 1);
            decoder.push(frame);
            let event = decoder.next_event().ok().flatten();
            event.or_else(|| decoder.finish().ok().flatten())
        };
        let started = data(first)
            .and_then(|event| serde_json::from_str::<wire::Response>(&event.data).ok())
            .filter(|response| response.object == "response" && response.id.is_some());
        let last_sequence = data(last)
            .and_then(|event| serde_json::from_str::<Value>(&event.data).ok())
            .and_then(|frame| frame["sequence_number"].as_i64());
        // Nothing read yet: a response of its own.
        let turn = Turn {
            run_id: started
                .as_ref()
                .and_then(|response| response.id.clone())
                .unwrap_or_else(|| format!("response_{}", uuid::Uuid::new_v4())),
            ..Turn::default()
        };
        let mut encoder = Encoder::new(&turn, session_id, options, ());
        if let Some(response) = started {
            encoder.created_at = response.created_at;
        }
        encoder.sequence = last_sequence.map_or(0, |sequence| sequence + 1);
        encoder
    }
}

impl<G> Encoder<G> {
    /// An encoder for the run of `turn` in `session_id`; `guard` is dropped when the run's event stream
    /// ends, which is after the run saved its conversation record, and before the client sees the end.
    pub fn new(turn: &Turn, session_id: &str, options: EncodeOptions, guard: G) -> Self {
        Self {
            options,
            sequence: 0,
            response_id: turn.run_id.clone(),
            session_id: session_id.to_owned(),
            created_at: unix_now(),
            client_tools: turn.tools.iter().map(|tool| tool.name.clone()).collect(),
            calls: HashMap::new(),
            open: None,
            output: Vec::new(),
            usage: None,
            done: false,
            guard: Some(guard),
            buf: BytesMut::new(),
        }
    }

    /// Runs `write` with `out` as the buffer the encoder's writes go to: the caller's own, for one call.
    fn writing_to(&mut self, out: &mut BytesMut, write: impl FnOnce(&mut Self)) {
        std::mem::swap(&mut self.buf, out);
        write(self);
        std::mem::swap(&mut self.buf, out);
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::RunStarted => {
                self.response(RunStatus::Created, None, None);
                self.response(RunStatus::InProgress, None, None);
            }
            Event::TextStart { message_id, role } => {
                self.open_text(message_id, MessageType::Message, role_to_wire(role))
            }
            Event::ReasoningStart { message_id } => {
                self.open_text(message_id, MessageType::Reasoning, wire::Role::Assistant)
            }
            Event::TextDelta { delta, .. } | Event::ReasoningDelta { delta, .. } => {
                self.text_delta(delta)
            }
            Event::TextEnd { .. } | Event::ReasoningEnd { .. } | Event::ToolCallEnd { .. } => {
                self.close()
            }
            Event::ToolCallStart { call_id, name, .. } => self.open_call(call_id, name),
            Event::ToolCallArgs { delta, .. } => self.call_args(&delta),
            Event::ToolResult {
                call_id,
                message_id,
                content,
                is_error,
            } => self.tool_result(call_id, message_id, content, is_error),
            Event::Interrupt(interrupt) => self.interrupt(interrupt),
            Event::Artifact(artifact) => self.artifact(artifact),
            Event::Usage(usage) => self.usage = Some(usage),
            Event::RunFinished { outcome, usage } => self.run_finished(outcome, usage),
            Event::RunError(error) => self.fail(&error),
            other => debug!(
                event = %crate::logging::clipped(&format!("{other:?}")),
                "agentscope: no AgentScope form; not sent"
            ),
        }
    }

    fn next_sequence(&mut self) -> Option<SequenceNumber> {
        let sequence = self.sequence;
        self.sequence += 1;
        Some(SequenceNumber::Number(sequence))
    }

    fn write<T: Serialize>(&mut self, object: &T) {
        sse::write_json_event(&mut self.buf, object);
    }

    fn response(&mut self, status: RunStatus, error: Option<&Error>, completed_at: Option<i64>) {
        let terminal = matches!(
            status,
            RunStatus::Completed | RunStatus::Canceled | RunStatus::Failed
        );
        let response = wire::Response {
            sequence_number: self.next_sequence(),
            status,
            error: error.map(|error| wire::ErrorBody {
                code: error.code().to_owned(),
                message: error.message().to_owned(),
            }),
            id: Some(self.response_id.clone()),
            created_at: self.created_at,
            completed_at,
            output: (terminal && !self.output.is_empty()).then(|| self.output.clone()),
            usage: if terminal {
                self.usage.as_ref().map(usage_to_wire)
            } else {
                None
            },
            session_id: Some(self.session_id.clone()),
            ..wire::Response::default()
        };
        self.write(&response);
    }

    /// A new message, announced at once (`in_progress`, no content).
    fn start_message(
        &mut self,
        id: String,
        kind: MessageType,
        role: wire::Role,
        metadata: Map<String, Value>,
    ) -> wire::Message {
        let message = wire::Message {
            status: RunStatus::InProgress,
            id,
            kind,
            role: Some(role),
            metadata: Some(metadata),
            ..wire::Message::default()
        };
        let mut announced = message.clone();
        announced.sequence_number = self.next_sequence();
        self.write(&announced);
        message
    }

    /// The first content of `message_id`, with the next sequence number.
    fn content(
        &mut self,
        message_id: &str,
        body: ContentBody,
        status: RunStatus,
        delta: Option<bool>,
    ) -> wire::Content {
        self.content_at(0, message_id, body, status, delta)
    }

    /// A content of `message_id` at `index`, with the next sequence number.
    fn content_at(
        &mut self,
        index: u32,
        message_id: &str,
        body: ContentBody,
        status: RunStatus,
        delta: Option<bool>,
    ) -> wire::Content {
        let content = wire::Content {
            sequence_number: self.next_sequence(),
            status: Some(status),
            body,
            index: Some(index),
            delta,
            msg_id: Some(message_id.to_owned()),
            ..wire::Content::new(ContentBody::Unknown)
        };
        self.write(&content);
        content
    }

    /// The `completed` message repeating its content; kept for the response's `output`.
    fn complete_message(&mut self, mut message: wire::Message, content: Vec<wire::Content>) {
        message.status = RunStatus::Completed;
        message.content = Some(content);
        message.sequence_number = self.next_sequence();
        self.write(&message);
        self.output.push(message);
    }

    fn open_text(&mut self, id: String, kind: MessageType, role: wire::Role) {
        self.close();
        let message = wire::Message {
            status: RunStatus::InProgress,
            id,
            kind,
            role: Some(role),
            metadata: Some(Map::new()),
            ..wire::Message::default()
        };
        self.open = Some(Open {
            message,
            kind: OpenKind::Text(String::new()),
            announced: false,
        });
    }

    fn text_delta(&mut self, delta: String) {
        let Some(open) = &mut self.open else { return };
        let OpenKind::Text(text) = &mut open.kind else {
            return;
        };
        if delta.is_empty() {
            return;
        }
        text.push_str(&delta);
        let announce = !open.announced;
        open.announced = true;
        let mut message = open.message.clone();
        if announce {
            message.sequence_number = self.next_sequence();
            self.write(&message);
        }
        self.content(
            &message.id,
            ContentBody::Text { text: Some(delta) },
            RunStatus::InProgress,
            Some(true),
        );
    }

    /// Completes the open message, if any.
    fn close(&mut self) {
        let Some(open) = self.open.take() else { return };
        if !open.announced {
            return; // nothing was said: the message is not sent
        }
        let id = open.message.id.clone();
        match open.kind {
            OpenKind::Text(text) => {
                let completed = self.content(
                    &id,
                    ContentBody::Text { text: Some(text) },
                    RunStatus::Completed,
                    None,
                );
                self.complete_message(open.message, vec![completed]);
            }
            OpenKind::Call {
                call_id,
                name,
                arguments,
            } => {
                let body = call_body(&call_id, &name, &arguments);
                self.content(&id, body.clone(), RunStatus::Completed, Some(false));
                self.complete_message(open.message, vec![kept_data(body)]);
            }
        }
    }

    fn artifact(&mut self, artifact: Artifact) {
        self.close();
        let mut metadata = Map::new();
        metadata.insert("artifact_id".to_owned(), Value::from(artifact.id));
        if let Some(name) = artifact.name {
            metadata.insert("artifact_name".to_owned(), Value::from(name));
        }
        let message = self.start_message(
            new_message_id(),
            MessageType::Message,
            wire::Role::Assistant,
            metadata,
        );
        let mut contents = Vec::new();
        for (index, part) in (0..).zip(artifact.parts) {
            let body = part_to_wire(part);
            // As the runtime completes them: text with `delta:null`, a whole value with `delta:false`.
            let delta = (!matches!(body, ContentBody::Text { .. })).then_some(false);
            contents.push(self.content_at(index, &message.id, body, RunStatus::Completed, delta));
        }
        self.complete_message(message, contents);
    }

    fn run_finished(&mut self, outcome: Outcome, usage: Option<Usage>) {
        self.close();
        if usage.is_some() {
            self.usage = usage;
        }
        let status = match outcome {
            Outcome::Completed | Outcome::Interrupted => RunStatus::Completed,
            Outcome::Cancelled => RunStatus::Canceled,
        };
        self.response(status, None, Some(unix_now()));
        self.end();
    }

    fn fail(&mut self, error: &Error) {
        self.close();
        self.response(RunStatus::Failed, Some(error), None);
        self.end();
    }

    fn end(&mut self) {
        self.done = true;
    }
}

/// A fresh message id the way the runtime mints them (`msg_<uuid4>`).
fn new_message_id() -> String {
    format!("msg_{}", uuid::Uuid::new_v4())
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn role_to_wire(role: Role) -> wire::Role {
    match role {
        Role::Assistant => wire::Role::Assistant,
        Role::User => wire::Role::User,
        Role::System | Role::Developer => wire::Role::System,
        Role::Tool => wire::Role::Tool,
    }
}

fn data_body(payload: impl Serialize) -> ContentBody {
    wire::Content::data(payload).body
}

fn call_body(call_id: &str, name: &str, arguments: &str) -> ContentBody {
    data_body(wire::FunctionCall {
        call_id: Some(call_id.to_owned()),
        name: Some(name.to_owned()),
        arguments: Some(arguments.to_owned()),
    })
}

/// A data content as a completed message repeats it: the runtime keeps the bare copy (no sequence number,
/// status, index or owner; observed, `specs/agentscope.md` §3.2).
fn kept_data(body: ContentBody) -> wire::Content {
    wire::Content::new(body)
}

fn usage_to_wire(usage: &Usage) -> Map<String, Value> {
    let mut map = Map::new();
    for (key, value) in [
        ("input_tokens", usage.input_tokens),
        ("output_tokens", usage.output_tokens),
        ("total_tokens", usage.total_tokens),
    ] {
        if let Some(value) = value {
            map.insert(key.to_owned(), Value::from(value));
        }
    }
    map
}

/// An artifact part as a content: text, data (an object; anything else as `{"value": …}`), image, audio,
/// video, or file.
fn part_to_wire(part: Part) -> ContentBody {
    match part {
        Part::Text(text) => ContentBody::Text { text: Some(text) },
        Part::Data(Value::Object(data)) => ContentBody::Data { data: Some(data) },
        Part::Data(other) => ContentBody::Data {
            data: Some(Map::from_iter([("value".to_owned(), other)])),
        },
        Part::Media(media) => {
            let url = |source: &MediaSource| match source {
                MediaSource::Url(url) => url.clone(),
                MediaSource::Data(data) => format!(
                    "data:{};base64,{data}",
                    media
                        .mime_type
                        .as_deref()
                        .unwrap_or("application/octet-stream")
                ),
                MediaSource::File { id, .. } => id.clone(),
            };
            match media.kind {
                MediaKind::Image => ContentBody::Image {
                    image_url: Some(url(&media.source)),
                },
                MediaKind::Video => ContentBody::Video {
                    video_url: Some(url(&media.source)),
                },
                MediaKind::Audio => ContentBody::Audio {
                    data: Some(url(&media.source)),
                    format: media
                        .mime_type
                        .as_deref()
                        .and_then(|m| m.strip_prefix("audio/"))
                        .map(str::to_owned),
                },
                MediaKind::Document => {
                    let (file_url, file_id, file_data) = match &media.source {
                        MediaSource::Url(url) => (Some(url.clone()), None, None),
                        MediaSource::File { id, .. } => (None, Some(id.clone()), None),
                        MediaSource::Data(_) => (None, None, Some(url(&media.source))),
                    };
                    ContentBody::File {
                        file_url,
                        file_id,
                        filename: media.filename.clone(),
                        file_data,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Tool;
    use serde_json::json;

    fn encoder(tools: &[&str]) -> Encoder {
        let turn = Turn {
            run_id: "response_1".into(),
            tools: tools
                .iter()
                .map(|name| Tool {
                    name: (*name).into(),
                    description: String::new(),
                    parameters: Value::Null,
                })
                .collect(),
            ..Turn::default()
        };
        let options = EncodeOptions {
            question_tool: "ask_user".into(),
        };
        Encoder::new(&turn, "s1", options, ())
    }

    /// The frames of some events, parsed.
    fn frames(encoder: &mut Encoder, events: Vec<Option<Event>>) -> Vec<Value> {
        let mut out = Vec::new();
        for event in events {
            let mut bytes = BytesMut::new();
            match event {
                Some(event) => encoder.encode(event, &mut bytes),
                None => encoder.finish(&mut bytes),
            }
            let text = std::str::from_utf8(&bytes).unwrap();
            for frame in text.split_terminator("\n\n") {
                out.push(serde_json::from_str(frame.strip_prefix("data: ").unwrap()).unwrap());
            }
        }
        out
    }

    #[test]
    fn a_stream_that_ends_without_a_result_fails_and_nothing_follows_the_end() {
        let mut encoder = encoder(&[]);
        let out = frames(&mut encoder, vec![Some(Event::RunStarted), None, None]);
        assert_eq!(out.len(), 3);
        assert_eq!(out[2]["status"], "failed");
        assert_eq!(out[2]["error"]["code"], "INTERNAL_ERROR");
        let after = frames(
            &mut encoder,
            vec![Some(Event::RunFinished {
                outcome: Outcome::Completed,
                usage: None,
            })],
        );
        assert!(after.is_empty());
    }

    #[test]
    fn an_open_message_is_completed_before_the_next_one_and_the_end() {
        let mut encoder = encoder(&["paint"]);
        let out = frames(
            &mut encoder,
            vec![
                Some(Event::RunStarted),
                Some(Event::TextStart {
                    message_id: "m1".into(),
                    role: Role::Assistant,
                }),
                Some(Event::TextDelta {
                    message_id: "m1".into(),
                    delta: "Hi".into(),
                }),
                // No TextEnd: the call closes the text first.
                Some(Event::ToolCallStart {
                    call_id: "c1".into(),
                    name: "paint".into(),
                    parent_message_id: Some("m1".into()),
                }),
                Some(Event::RunFinished {
                    outcome: Outcome::Completed,
                    usage: Some(Usage {
                        input_tokens: Some(1),
                        output_tokens: None,
                        total_tokens: None,
                    }),
                }),
            ],
        );
        let kinds: Vec<String> = out
            .iter()
            .map(|f| {
                format!(
                    "{} {}",
                    f["object"].as_str().unwrap(),
                    f["status"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "response created",
                "response in_progress",
                "message in_progress",
                "content in_progress",
                "content completed",
                "message completed",
                "message in_progress",
                "content in_progress",
                "content completed",
                "message completed",
                "response completed",
            ]
        );
        assert_eq!(out[6]["type"], "function_call", "paint is a client tool");
        assert_eq!(out[9]["content"][0]["data"]["arguments"], "");
        assert_eq!(out[10]["usage"], json!({"input_tokens": 1}));
        assert_eq!(out[10]["output"].as_array().unwrap().len(), 2);
    }
}
