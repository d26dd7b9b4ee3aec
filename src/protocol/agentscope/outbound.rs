//! AgentScope outbound: we are the client of an agentscope-runtime 1.1.x `POST /process` endpoint
//! (`specs/agentscope.md` §5).
//!
//! A [`Turn`] becomes one [`wire::AgentRequest`]: the **full history** in `input` (the runtime keeps none we
//! can rely on), the client's tools in OpenAI function form, the generation options, `stream: true`, and
//! always a `session_id` and `user_id` of the conversation's own. The SSE answer is decoded by [`Decoder`],
//! one `data:` payload at a time, into canonical events.
//!
//! Conversation state lives in the record under keys this module owns:
//! - `agentscope.session_id` / `agentscope.user_id`: minted on the conversation's first turn and kept, so
//!   every turn of a conversation uses the same pair and no two conversations share one. (The runtime runs
//!   one request per `user_id:session_id` at a time, and requests without them all share the key
//!   `None:None`.) A turn with no conversation key gets a fresh pair that is not kept.
//! - `agentscope.approvals`: the `mcp_approval_request`s of the last run, which the next turn may answer.
//!
//! Choices where the protocol leaves room (see also `docs/translation.md`, "AgentScope ↔ canonical"):
//! - Tool-call `arguments` arrive as whole snapshots (replace, not append). Downstream only ever gets
//!   appended text, so a snapshot is streamed only as far as it agrees with the snapshot before it (a
//!   partial-JSON snapshot such as `{"city": "Bei"}` repairs its closing characters, which the next one
//!   rewrites); the rest follows when the call completes (its content or message is `completed`, its
//!   output arrives, or the response completes). A completed value that rewrites text already sent cannot be
//!   taken back: it is logged at warn level and only what extends the sent text is added. Calls of client
//!   tools (named in `turn.tools`) are never streamed: their arguments are sent once, whole, when the call
//!   completes, since the client acts on them.
//! - Text contents: `delta: true` appends; a non-delta text (the completed content, the completed message's
//!   repeat, a snapshot) adds only what extends the text already sent, so nothing is shown twice and a
//!   stream of whole texts still shows.
//! - Response `completed` → `RunFinished` (with usage); `failed` → `RunError` with the runtime's
//!   `code`/`message`; `canceled` → `RunFinished(cancelled)`; `rejected` / `incomplete` → `RunError`
//!   (`AGENTSCOPE_REJECTED` / `AGENTSCOPE_INCOMPLETE`): a truncated answer is not a success. A bare
//!   `{"error": …}` frame → `RunError` coded `AGENTSCOPE_ERROR`. A stream that ends without a terminal
//!   `response` (the runtime's `stop_chat`, a dropped connection) is left to the normalizer, which reports
//!   `UPSTREAM_EOF`: an interrupted run is never a success.
//! - `mcp_approval_request` → `Interrupt` (approval, id = the request's `id`); the answer goes back, in the
//!   next turn, as the request message followed by an `mcp_approval_response` (see [`Resume::approval`]).

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tracing::{debug, warn};

use super::wire;
use crate::body;
use crate::config::Translate;
use crate::error::{Error, Result};
use crate::model::{
    new_id, Artifact, Event, Interrupt, InterruptKind, Media, MediaKind, MediaSource, Message,
    Outcome, Part, Resume, Role, Turn, Usage,
};
use crate::sse::{self, SseReadError, SseReader};
use crate::store::Record;
use crate::translate::RunContext;
use crate::upstream::Upstream;

/// Record key: the `session_id` of the conversation upstream.
const SESSION_ID: &str = "agentscope.session_id";
/// Record key: the `user_id` of the conversation upstream.
const USER_ID: &str = "agentscope.user_id";
/// Record key: the approval requests of the last run (JSON array of [`PendingApproval`]).
const APPROVALS: &str = "agentscope.approvals";

/// The largest SSE event accepted: more than [`sse::MAX_EVENT_BYTES`], as a completed `response` repeats the
/// whole run.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;
/// The largest non-SSE answer read (to explain it).
const MAX_BODY_BYTES: usize = 64 * 1024;
/// The code of a failure the runtime reports without one (bare `{"error": …}` frames, a failed response
/// without `error`).
const AGENTSCOPE_ERROR: &str = "AGENTSCOPE_ERROR";

pub struct Outbound {
    upstream: Upstream,
    /// The route's model, for turns that name none.
    model: Option<String>,
}

impl Outbound {
    pub fn new(upstream: Upstream, translate: &Translate) -> Self {
        Self {
            upstream,
            model: translate.model.clone(),
        }
    }

    pub async fn run(&self, turn: &Turn, context: &mut RunContext) -> Result<()> {
        let identity = identity(turn, &mut context.record);
        // Approvals of the last run are answered now or lapse: the client moved on.
        let approvals = take_approvals(&mut context.record);
        let request = request(turn, &identity, self.model.as_deref(), &approvals);
        let body = serde_json::to_vec(&request)
            .map_err(|e| Error::internal(format!("encoding the AgentRequest failed: {e}")))?;
        let response = self
            .upstream
            .post_json(Bytes::from(body), "text/event-stream")
            .await?;
        let mut decoder = Decoder::with_client_tools(turn.tools.iter().map(|t| t.name.clone()));
        let mut events = Vec::new();
        if !sse::is_event_stream(response.headers()) {
            // The runtime always streams; a JSON answer is most likely a bare error object.
            let body = body::read_limited(response.into_body(), MAX_BODY_BYTES)
                .await
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&body);
            if decoder.decode(&text, &mut events).is_err() {
                return Err(Error::upstream_malformed(format!(
                    "the AgentScope upstream answered without an event stream: {}",
                    text.trim()
                )));
            }
            return emit_all(&mut decoder, &mut events, context).await;
        }
        let mut reader = SseReader::new(response.into_body(), MAX_EVENT_BYTES);
        loop {
            let frame = match reader.next().await {
                Ok(Some(frame)) => frame,
                // Text frames have no end marker: the end of the body after a whole event finishes their run, an
                // end inside one is a cut stream.
                Ok(None) => {
                    if !reader.ended_inside_event() {
                        decoder.end_of_stream(&mut events);
                    }
                    break;
                }
                // The connection failed mid-body: the run ends without its terminal response.
                Err(SseReadError::Body(cause)) => {
                    debug!("the upstream AgentScope stream broke off: {cause}");
                    break;
                }
                Err(SseReadError::Frame(e)) => {
                    return Err(Error::upstream_malformed(format!(
                        "reading the upstream AgentScope stream failed: {e}"
                    )))
                }
            };
            let over = decoder.decode(&frame.data, &mut events)?;
            emit_all(&mut decoder, &mut events, context).await?;
            if over {
                return Ok(());
            }
        }
        // Without a terminal response the normalizer reports UPSTREAM_EOF.
        emit_all(&mut decoder, &mut events, context).await
    }
}

/// Emits decoded events, keeping the approval requests among them first (so an answer can find them even
/// when the client goes away meanwhile).
async fn emit_all(
    decoder: &mut Decoder,
    events: &mut Vec<Event>,
    context: &mut RunContext,
) -> Result<()> {
    remember_approvals(decoder.take_approvals(), &mut context.record);
    for event in events.drain(..) {
        context.emit(event).await?;
    }
    Ok(())
}

// --- Conversation identity ---------------------------------------------------------------------------------

/// The `session_id` / `user_id` a conversation uses upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    session_id: String,
    user_id: String,
}

/// The conversation's pair: kept in the record from its first turn on. Without a conversation key every
/// turn would share one record, so such a turn gets a fresh pair that is not kept.
fn identity(turn: &Turn, record: &mut Record) -> Identity {
    if let (Some(session_id), Some(user_id)) = (
        record.upstream.get(SESSION_ID),
        record.upstream.get(USER_ID),
    ) {
        if !turn.conversation.is_empty() {
            return Identity {
                session_id: session_id.clone(),
                user_id: user_id.clone(),
            };
        }
    }
    let identity = Identity {
        session_id: new_id("session"),
        user_id: new_id("user"),
    };
    if !turn.conversation.is_empty() {
        record
            .upstream
            .insert(SESSION_ID.to_owned(), identity.session_id.clone());
        record
            .upstream
            .insert(USER_ID.to_owned(), identity.user_id.clone());
    }
    identity
}

// --- Approvals ---------------------------------------------------------------------------------------------

/// An `mcp_approval_request` the client may answer next turn, and the message that carried it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingApproval {
    message_id: String,
    request: wire::McpApprovalRequest,
}

fn take_approvals(record: &mut Record) -> Vec<PendingApproval> {
    record
        .upstream
        .remove(APPROVALS)
        .and_then(|json| serde_json::from_str(&json).ok())
        .unwrap_or_default()
}

fn remember_approvals(new: Vec<PendingApproval>, record: &mut Record) {
    if new.is_empty() {
        return;
    }
    let mut all: Vec<PendingApproval> = record
        .upstream
        .get(APPROVALS)
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_default();
    all.extend(new);
    if let Ok(json) = serde_json::to_string(&all) {
        record.upstream.insert(APPROVALS.to_owned(), json);
    }
}

// --- The request -------------------------------------------------------------------------------------------

/// The `/process` body of a turn.
fn request(
    turn: &Turn,
    identity: &Identity,
    route_model: Option<&str>,
    approvals: &[PendingApproval],
) -> wire::AgentRequest {
    let mut input = input_messages(&turn.messages);
    input.extend(approval_messages(&turn.resume, approvals));
    if turn.state.is_some() || !turn.context.is_empty() {
        debug!(
            context = turn.context.len(),
            "the AgentScope Agent API has no place for client context or state; not sent"
        );
    }
    let extra = |key: &str| turn.extra.get(key);
    wire::AgentRequest {
        input,
        stream: true,
        id: (!turn.run_id.is_empty()).then(|| turn.run_id.clone()),
        session_id: Some(identity.session_id.clone()),
        user_id: Some(identity.user_id.clone()),
        tools: (!turn.tools.is_empty()).then(|| {
            turn.tools
                .iter()
                .map(|tool| {
                    wire::Tool::function(&tool.name, &tool.description, tool.parameters.clone())
                })
                .collect()
        }),
        // The client's choice first; the route's model is the default.
        model: turn
            .options
            .model
            .clone()
            .or_else(|| route_model.map(str::to_owned)),
        temperature: turn.options.temperature,
        max_tokens: turn.options.max_tokens,
        // Options the canonical model has no field for, under their AgentScope names (an AgentScope inbound
        // keeps them in `extra`).
        top_p: extra("top_p").and_then(Value::as_f64),
        frequency_penalty: extra("frequency_penalty").and_then(Value::as_f64),
        presence_penalty: extra("presence_penalty").and_then(Value::as_f64),
        stop: extra("stop").and_then(|v| serde_json::from_value(v.clone()).ok()),
        seed: extra("seed").and_then(Value::as_i64),
        n: None,
        extra: Map::new(),
    }
}

/// The canonical history as AgentScope messages: text and media as `message` contents, each assistant tool
/// call as a `function_call` message, each tool result as a `function_call_output` message.
pub fn input_messages(messages: &[Message]) -> Vec<wire::Message> {
    let call_names: HashMap<&str, &str> = messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .map(|call| (call.id.as_str(), call.name.as_str()))
        .collect();
    let mut input = Vec::with_capacity(messages.len());
    for message in messages {
        let contents: Vec<wire::Content> = message.content.iter().map(content_from_part).collect();
        match message.role {
            Role::Tool => {
                let Some(call_id) = &message.tool_call_id else {
                    // A tool message that answers no call: its text, from the tool.
                    input.push(wire::Message::new(
                        &message.id,
                        wire::MessageType::Message,
                        wire::Role::Tool,
                        contents,
                    ));
                    continue;
                };
                if message.is_error {
                    debug!(call = %call_id, "AgentScope tool outputs have no error flag; sent as output");
                }
                let output = wire::FunctionCallOutput {
                    call_id: call_id.clone(),
                    name: message
                        .name
                        .clone()
                        .or_else(|| call_names.get(call_id.as_str()).map(|n| (*n).to_owned())),
                    output: tool_output(&message.content),
                };
                input.push(wire::Message::new(
                    &message.id,
                    wire::MessageType::FunctionCallOutput,
                    wire::Role::Tool,
                    vec![wire::Content::data(output)],
                ));
            }
            role => {
                let role = match role {
                    Role::User => wire::Role::User,
                    Role::Assistant => wire::Role::Assistant,
                    // The runtime knows no `developer` role.
                    _ => wire::Role::System,
                };
                if !contents.is_empty() {
                    input.push(wire::Message::new(
                        &message.id,
                        wire::MessageType::Message,
                        role,
                        contents,
                    ));
                }
                for call in &message.tool_calls {
                    let data = wire::FunctionCall {
                        call_id: Some(call.id.clone()),
                        name: Some(call.name.clone()),
                        arguments: Some(call.arguments.clone()),
                    };
                    input.push(wire::Message::new(
                        format!("{}:{}", message.id, call.id),
                        wire::MessageType::FunctionCall,
                        wire::Role::Assistant,
                        vec![wire::Content::data(data)],
                    ));
                }
            }
        }
    }
    input
}

/// A tool message's content as the `output` string: its text, or JSON for what is not text.
fn tool_output(parts: &[Part]) -> String {
    match parts {
        [Part::Data(value)] => value.to_string(),
        parts => crate::model::parts_text(parts),
    }
}

/// One canonical part as an AgentScope content.
fn content_from_part(part: &Part) -> wire::Content {
    match part {
        Part::Text(text) => wire::Content::text(text),
        Part::Data(Value::Object(map)) => wire::Content::new(wire::ContentBody::Data {
            data: Some(map.clone()),
        }),
        // `data` is an object on the runtime.
        Part::Data(other) => {
            let mut map = Map::new();
            map.insert("value".to_owned(), other.clone());
            wire::Content::new(wire::ContentBody::Data { data: Some(map) })
        }
        Part::Media(media) => wire::Content::new(media_body(media)),
    }
}

fn media_body(media: &Media) -> wire::ContentBody {
    let mime = media.mime_type.as_deref();
    // Inline data as a data: URL (the OpenAI convention the runtime's adapters follow).
    let url = match &media.source {
        MediaSource::Url(url) => Some(url.clone()),
        MediaSource::Data(data) => Some(format!(
            "data:{};base64,{data}",
            mime.unwrap_or("application/octet-stream")
        )),
        MediaSource::File { .. } => None,
    };
    match (media.kind, &media.source) {
        (MediaKind::Image, MediaSource::Url(_) | MediaSource::Data(_)) => {
            wire::ContentBody::Image { image_url: url }
        }
        (MediaKind::Video, MediaSource::Url(_) | MediaSource::Data(_)) => {
            wire::ContentBody::Video { video_url: url }
        }
        (MediaKind::Audio, MediaSource::Url(_) | MediaSource::Data(_)) => {
            wire::ContentBody::Audio {
                data: match &media.source {
                    MediaSource::Data(data) => Some(data.clone()),
                    _ => url,
                },
                format: mime
                    .and_then(|m| m.split('/').nth(1))
                    .map(|f| f.split(';').next().unwrap_or(f).trim().to_owned()),
            }
        }
        (_, source) => wire::ContentBody::File {
            file_url: match source {
                MediaSource::Url(url) => Some(url.clone()),
                _ => None,
            },
            file_id: match source {
                MediaSource::File { id, .. } => Some(id.clone()),
                _ => None,
            },
            filename: media.filename.clone(),
            file_data: match source {
                MediaSource::Data(_) => url,
                _ => None,
            },
        },
    }
}

/// The answers to the last run's approval requests: for each answered one, the request message again
/// (with full history and no response id, the app needs it to know what is being answered) and an
/// `mcp_approval_response`. Resume entries for anything else are not ours and are ignored.
fn approval_messages(resume: &[Resume], approvals: &[PendingApproval]) -> Vec<wire::Message> {
    let mut messages = Vec::new();
    for answer in resume {
        let Some(approval) = approvals
            .iter()
            .find(|a| a.request.id == answer.interrupt_id)
        else {
            debug!(interrupt = %answer.interrupt_id,
                "resume entry for no approval this AgentScope conversation waits on; ignored");
            continue;
        };
        let (approve, reason) = answer.approval();
        let mut request = wire::Message::new(
            &approval.message_id,
            wire::MessageType::McpApprovalRequest,
            wire::Role::Assistant,
            vec![wire::Content::data(&approval.request)],
        );
        request.status = wire::RunStatus::Completed;
        messages.push(request);
        messages.push(wire::Message::new(
            new_id("msg"),
            wire::MessageType::McpApprovalResponse,
            wire::Role::User,
            vec![wire::Content::data(wire::McpApprovalResponse {
                approval_request_id: approval.request.id.clone(),
                approve,
                id: None,
                reason,
            })],
        ));
    }
    messages
}

// --- Decoding ----------------------------------------------------------------------------------------------

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

    /// One content of message `message_id` at slot `index` (streamed, or repeated by a settled message).
    fn content(
        &mut self,
        message_id: &str,
        index: u32,
        content: &wire::Content,
        out: &mut Vec<Event>,
    ) {
        let kind = match self.messages.get(message_id) {
            Some(open) => open.kind.clone(),
            None => {
                // A content before (or without) its message: an assistant text message.
                self.messages.insert(
                    message_id.to_owned(),
                    OpenMessage::new(wire::MessageType::Message, Role::Assistant),
                );
                wire::MessageType::Message
            }
        };
        let completed = content.status.as_ref().is_some_and(is_settled);
        match (&kind, &content.body) {
            (
                wire::MessageType::Message | wire::MessageType::Reasoning,
                wire::ContentBody::Text { text: Some(text) }
                | wire::ContentBody::Refusal {
                    refusal: Some(text),
                },
            ) => self.text(message_id, index, text, content.is_delta(), out),
            (wire::MessageType::Message | wire::MessageType::Reasoning, body) => {
                if completed && !matches!(body, wire::ContentBody::Text { .. }) {
                    self.artifact(message_id, index, body, out);
                }
            }
            (kind, wire::ContentBody::Data { .. }) if kind.is_call() => {
                self.call(message_id, index, content, completed, out)
            }
            (kind, wire::ContentBody::Data { .. }) if kind.is_call_output() => {
                if completed {
                    self.result(message_id, index, content, out);
                }
            }
            (wire::MessageType::McpApprovalRequest, wire::ContentBody::Data { .. }) => {
                if completed {
                    self.approval(message_id, index, content, out);
                }
            }
            (kind, _) => {
                debug!(%kind, "an AgentScope content this proxy does not translate; skipped")
            }
        }
    }

    /// Text of a text-like message: deltas append; whole texts add only what extends what was sent.
    fn text(
        &mut self,
        message_id: &str,
        index: u32,
        text: &str,
        delta: bool,
        out: &mut Vec<Event>,
    ) {
        let Some(open) = self.messages.get_mut(message_id) else {
            return;
        };
        let sent = open.texts.entry(index).or_default();
        let new = if delta {
            text
        } else if let Some(rest) = text.strip_prefix(sent.as_str()) {
            rest
        } else {
            debug!(message = %message_id, "a whole AgentScope text that differs from the streamed one; not shown again");
            return;
        };
        if new.is_empty() {
            return;
        }
        sent.push_str(new);
        let reasoning = open.kind == wire::MessageType::Reasoning;
        if !open.started {
            open.started = true;
            out.push(if reasoning {
                Event::ReasoningStart {
                    message_id: message_id.to_owned(),
                }
            } else {
                Event::TextStart {
                    message_id: message_id.to_owned(),
                    role: open.role,
                }
            });
        }
        let message_id = message_id.to_owned();
        let delta = new.to_owned();
        out.push(if reasoning {
            Event::ReasoningDelta { message_id, delta }
        } else {
            Event::TextDelta { message_id, delta }
        });
    }

    /// A completed non-text content of a message: an artifact, once.
    fn artifact(
        &mut self,
        message_id: &str,
        index: u32,
        body: &wire::ContentBody,
        out: &mut Vec<Event>,
    ) {
        let Some(part) = part_from_body(body) else {
            return debug!(message = %message_id, "an empty or unknown AgentScope content; skipped");
        };
        if !self.settled.insert((message_id.to_owned(), index)) {
            return;
        }
        out.push(Event::Artifact(Artifact {
            id: format!("{message_id}:{index}"),
            name: None,
            parts: vec![part],
            append: false,
            last_chunk: true,
        }));
    }

    /// A snapshot of a call's `{call_id, name, arguments}`.
    fn call(
        &mut self,
        message_id: &str,
        index: u32,
        content: &wire::Content,
        completed: bool,
        out: &mut Vec<Event>,
    ) {
        let snapshot: wire::McpCall = content.data_as().unwrap_or_default();
        let key = (message_id.to_owned(), index);
        if !self.calls.contains_key(&key) {
            let call_id = snapshot
                .call_id()
                .filter(|id| !id.is_empty())
                .map_or_else(|| new_id("call"), str::to_owned);
            self.calls.insert(
                key.clone(),
                Call {
                    call_id,
                    name: String::new(),
                    client: false,
                    started: false,
                    sent: String::new(),
                    latest: String::new(),
                    ended: false,
                },
            );
            self.call_order.push(key.clone());
        }
        let Some(call) = self.calls.get_mut(&key) else {
            return;
        };
        if call.ended {
            return;
        }
        if let Some(name) = snapshot.name.as_deref().filter(|n| !n.is_empty()) {
            if !call.started {
                call.name = name.to_owned();
                call.client = self.client_tools.contains(name);
            }
        }
        if !call.started && !call.name.is_empty() {
            call.started = true;
            out.push(Event::ToolCallStart {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                parent_message_id: None,
            });
        }
        let arguments = snapshot.arguments.unwrap_or_default();
        if completed {
            let output = (snapshot.output, snapshot.error);
            self.end_call(&key, Some(arguments), out);
            // An `mcp_call` may carry its own outcome.
            let (output, error) = output;
            if let Some((content, is_error)) =
                error.map(|e| (e, true)).or(output.map(|o| (o, false)))
            {
                let call_id = self.calls[&key].call_id.clone();
                self.push_result(message_id, call_id, result_text(&content), is_error, out);
            }
            return;
        }
        let previous = std::mem::replace(&mut call.latest, arguments);
        if call.client || !call.started {
            return;
        }
        // Stream only what two snapshots in a row agree on.
        let stable = common_prefix(&previous, &call.latest);
        if stable.len() > call.sent.len() && stable.starts_with(call.sent.as_str()) {
            let delta = stable[call.sent.len()..].to_owned();
            call.sent.push_str(&delta);
            out.push(Event::ToolCallArgs {
                call_id: call.call_id.clone(),
                delta,
            });
        }
    }

    /// Ends a call with its final arguments (`None`: the latest snapshot): starts it if its name never came,
    /// sends what is missing of its arguments, then its end.
    fn end_call(&mut self, key: &(String, u32), arguments: Option<String>, out: &mut Vec<Event>) {
        let Some(call) = self.calls.get_mut(key) else {
            return;
        };
        if call.ended {
            return;
        }
        call.ended = true;
        if let Some(arguments) = arguments {
            call.latest = arguments;
        }
        if !call.started {
            call.started = true;
            debug!(call = %call.call_id, "an AgentScope call without a name");
            out.push(Event::ToolCallStart {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                parent_message_id: None,
            });
        }
        match call.latest.strip_prefix(call.sent.as_str()) {
            Some(rest) if !rest.is_empty() => out.push(Event::ToolCallArgs {
                call_id: call.call_id.clone(),
                delta: rest.to_owned(),
            }),
            Some(_) => {}
            None => warn!(
                call = %call.call_id,
                sent = %call.sent,
                final_arguments = %call.latest,
                "AgentScope rewrote arguments already streamed; the client keeps the streamed text"
            ),
        }
        out.push(Event::ToolCallEnd {
            call_id: call.call_id.clone(),
        });
    }

    /// Ends every call still open (at the end of the run).
    fn end_calls(&mut self, out: &mut Vec<Event>) {
        for key in self.call_order.clone() {
            self.end_call(&key, None, out);
        }
    }

    /// A completed `*_call_output` content: the call's result, once.
    fn result(
        &mut self,
        message_id: &str,
        index: u32,
        content: &wire::Content,
        out: &mut Vec<Event>,
    ) {
        if !self.settled.insert((message_id.to_owned(), index)) {
            return;
        }
        let Some(output) = content.data_as::<wire::FunctionCallOutput>() else {
            return debug!(message = %message_id, "an AgentScope call output that is not {{call_id, output}}; skipped");
        };
        // The result ends its call, whatever the upstream said before.
        if let Some(key) = self
            .call_order
            .iter()
            .find(|key| self.calls[*key].call_id == output.call_id)
            .cloned()
        {
            self.end_call(&key, None, out);
        }
        let text = result_text(&output.output);
        self.push_result(message_id, output.call_id, text, false, out);
    }

    fn push_result(
        &mut self,
        message_id: &str,
        call_id: String,
        content: String,
        is_error: bool,
        out: &mut Vec<Event>,
    ) {
        let n = self.messages.get_mut(message_id).map_or(0, |open| {
            open.results += 1;
            open.results - 1
        });
        // Clients key messages by id: a second result of one message gets an id of its own.
        let result_id = if n == 0 {
            message_id.to_owned()
        } else {
            format!("{message_id}:{n}")
        };
        out.push(Event::ToolResult {
            call_id,
            message_id: result_id,
            content,
            is_error,
        });
    }

    /// A completed `mcp_approval_request` content: an approval interrupt, once.
    fn approval(
        &mut self,
        message_id: &str,
        index: u32,
        content: &wire::Content,
        out: &mut Vec<Event>,
    ) {
        if !self.settled.insert((message_id.to_owned(), index)) {
            return;
        }
        let Some(mut request) = content.data_as::<wire::McpApprovalRequest>() else {
            return debug!(message = %message_id, "an AgentScope approval request without its fields; skipped");
        };
        if request.id.is_empty() {
            request.id = if index == 0 {
                message_id.to_owned()
            } else {
                format!("{message_id}:{index}")
            };
        }
        let args = serde_json::from_str(&request.arguments)
            .unwrap_or_else(|_| Value::String(request.arguments.clone()));
        out.push(Event::Interrupt(Interrupt {
            id: request.id.clone(),
            kind: InterruptKind::Approval {
                tool: request.name.clone(),
                args,
                hint: None,
            },
        }));
        self.approval_ids.push(request.id.clone());
        self.approvals.push(PendingApproval {
            message_id: message_id.to_owned(),
            request,
        });
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
fn common_prefix<'a>(a: &'a str, b: &str) -> &'a str {
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
fn result_text(output: &str) -> String {
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

/// A non-text content as a canonical part.
fn part_from_body(body: &wire::ContentBody) -> Option<Part> {
    let media = |kind: MediaKind, url: &Option<String>, mime: Option<String>| {
        url.as_ref().map(|url| {
            Part::Media(Media {
                kind,
                source: MediaSource::Url(url.clone()),
                mime_type: mime,
                filename: None,
            })
        })
    };
    match body {
        wire::ContentBody::Data { data } => data.clone().map(|d| Part::Data(Value::Object(d))),
        wire::ContentBody::Image { image_url } => media(MediaKind::Image, image_url, None),
        wire::ContentBody::Video { video_url } => media(MediaKind::Video, video_url, None),
        wire::ContentBody::Audio { data, format } => {
            let mime = format.as_ref().map(|f| format!("audio/{f}"));
            let data = data.as_ref()?;
            let source = if data.contains("://") || data.starts_with("data:") {
                MediaSource::Url(data.clone())
            } else {
                MediaSource::Data(data.clone())
            };
            Some(Part::Media(Media {
                kind: MediaKind::Audio,
                source,
                mime_type: mime,
                filename: None,
            }))
        }
        wire::ContentBody::File {
            file_url,
            file_id,
            filename,
            file_data,
        } => {
            let source = match (file_url, file_data, file_id) {
                (Some(url), _, _) => MediaSource::Url(url.clone()),
                (None, Some(data), _) if data.starts_with("data:") => {
                    MediaSource::Url(data.clone())
                }
                (None, Some(data), _) => MediaSource::Data(data.clone()),
                (None, None, Some(id)) => MediaSource::File {
                    id: id.clone(),
                    provider: Some("agentscope".to_owned()),
                },
                (None, None, None) => return None,
            };
            Some(Part::Media(Media {
                kind: MediaKind::Document,
                source,
                mime_type: None,
                filename: filename.clone(),
            }))
        }
        wire::ContentBody::Text { .. }
        | wire::ContentBody::Refusal { .. }
        | wire::ContentBody::Unknown => None,
    }
}

/// The runtime's `usage` (`{input_tokens, output_tokens, …}`) as canonical usage; `None` when it has no
/// counts.
fn usage(map: &Map<String, Value>) -> Option<Usage> {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::{ContextItem, GenerationOptions, ResumeStatus, Tool, ToolCall};

    fn identity() -> Identity {
        Identity {
            session_id: "session_1".into(),
            user_id: "user_1".into(),
        }
    }

    fn turn(messages: Vec<Message>) -> Turn {
        Turn {
            conversation: "thread-1".into(),
            run_id: "run-1".into(),
            messages,
            ..Turn::default()
        }
    }

    fn decode_all(decoder: &mut Decoder, frames: &[Value]) -> Vec<Event> {
        let mut out = Vec::new();
        for frame in frames {
            decoder.decode(&frame.to_string(), &mut out).unwrap();
        }
        out
    }

    fn call_snapshot(message: &str, index: u32, status: &str, arguments: &str) -> Value {
        json!({"object": "content", "status": status, "type": "data", "index": index, "delta": false,
               "msg_id": message, "data": {"call_id": format!("call_{index}"), "name": "search",
               "arguments": arguments}})
    }

    fn args_of(events: &[Event], call: &str) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                Event::ToolCallArgs { call_id, delta } if call_id == call => Some(delta.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn history_becomes_typed_messages_with_content_lists() {
        let mut user = Message::text_message("u1", Role::User, "What is this?");
        user.content.push(Part::Media(Media {
            kind: MediaKind::Image,
            source: MediaSource::Data("iVBOR".into()),
            mime_type: Some("image/png".into()),
            filename: None,
        }));
        let mut assistant = Message::text_message("a1", Role::Assistant, "Let me look.");
        assistant.tool_calls.push(ToolCall {
            id: "call_1".into(),
            name: "lookup".into(),
            arguments: r#"{"q":"x"}"#.into(),
        });
        let mut result = Message::text_message("t1", Role::Tool, "found");
        result.tool_call_id = Some("call_1".into());
        let developer = Message::text_message("d1", Role::Developer, "Be brief.");
        let input =
            serde_json::to_value(input_messages(&[developer, user, assistant, result])).unwrap();

        assert_eq!(input[0]["role"], "system");
        assert_eq!(input[0]["type"], "message");
        assert_eq!(input[1]["role"], "user");
        assert_eq!(input[1]["status"], "completed");
        assert_eq!(input[1]["content"][0]["type"], "text");
        assert_eq!(input[1]["content"][0]["text"], "What is this?");
        assert_eq!(input[1]["content"][1]["type"], "image");
        assert_eq!(
            input[1]["content"][1]["image_url"],
            "data:image/png;base64,iVBOR"
        );
        assert_eq!(input[2]["type"], "message");
        assert_eq!(input[2]["content"][0]["text"], "Let me look.");
        assert_eq!(input[3]["type"], "function_call");
        assert_eq!(input[3]["role"], "assistant");
        assert_eq!(
            input[3]["content"][0]["data"],
            json!({"call_id": "call_1", "name": "lookup", "arguments": r#"{"q":"x"}"#})
        );
        assert_eq!(input[4]["type"], "function_call_output");
        assert_eq!(input[4]["role"], "tool");
        assert_eq!(
            input[4]["content"][0]["data"],
            json!({"call_id": "call_1", "name": "lookup", "output": "found"})
        );
        assert_eq!(input.as_array().unwrap().len(), 5);
        // Every message has the fields the runtime requires non-null.
        for message in input.as_array().unwrap() {
            assert_eq!(message["object"], "message");
            assert!(message["id"].as_str().is_some_and(|id| !id.is_empty()));
        }
    }

    #[test]
    fn request_has_identity_tools_options_and_streams() {
        let mut turn = turn(vec![Message::text_message("u1", Role::User, "hi")]);
        turn.tools = vec![Tool {
            name: "change_background".into(),
            description: "Change it".into(),
            parameters: json!({"type": "object", "properties": {"color": {"type": "string"}}}),
        }];
        turn.options = GenerationOptions {
            model: None,
            temperature: Some(0.2),
            max_tokens: Some(100),
        };
        turn.extra.insert("top_p".into(), json!(0.9));
        turn.extra.insert("stop".into(), json!(["END"]));
        turn.context = vec![ContextItem {
            description: "d".into(),
            value: "v".into(),
        }];
        let body =
            serde_json::to_value(request(&turn, &identity(), Some("qwen-max"), &[])).unwrap();
        assert_eq!(body["stream"], true);
        assert_eq!(body["id"], "run-1");
        assert_eq!(body["session_id"], "session_1");
        assert_eq!(body["user_id"], "user_1");
        assert_eq!(body["model"], "qwen-max");
        assert_eq!(body["temperature"], 0.2);
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["top_p"], 0.9);
        assert_eq!(body["stop"], json!(["END"]));
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {"name": "change_background",
                "description": "Change it",
                "parameters": {"type": "object", "properties": {"color": {"type": "string"}}}}}])
        );
        assert!(body.get("n").is_none());

        turn.options.model = Some("client-model".into());
        turn.tools.clear();
        let body =
            serde_json::to_value(request(&turn, &identity(), Some("qwen-max"), &[])).unwrap();
        assert_eq!(body["model"], "client-model", "the turn's model wins");
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn identity_is_kept_per_conversation_and_fresh_without_one() {
        let mut record = Record::default();
        let first = identity_of(&turn(Vec::new()), &mut record);
        let again = identity_of(&turn(Vec::new()), &mut record);
        assert_eq!(first, again);
        assert_ne!(first.session_id, first.user_id);
        assert_ne!(
            first,
            identity_of(&turn(Vec::new()), &mut Record::default())
        );

        let mut anonymous = turn(Vec::new());
        anonymous.conversation.clear();
        let mut shared = Record::default();
        let a = identity_of(&anonymous, &mut shared);
        let b = identity_of(&anonymous, &mut shared);
        assert_ne!(a, b, "turns without a conversation never share a session");
        assert!(shared.upstream.is_empty());
    }

    fn identity_of(turn: &Turn, record: &mut Record) -> Identity {
        super::identity(turn, record)
    }

    fn resume(status: ResumeStatus, payload: Option<Value>) -> Resume {
        Resume {
            interrupt_id: "apr_1".into(),
            status,
            payload,
        }
    }

    #[test]
    fn an_answered_approval_sends_the_request_and_the_response() {
        let pending = PendingApproval {
            message_id: "msg_apr1".into(),
            request: wire::McpApprovalRequest {
                id: "apr_1".into(),
                name: "Shell".into(),
                arguments: r#"{"command":"ls"}"#.into(),
                server_label: "agent-bridge".into(),
            },
        };
        let mut turn = turn(vec![Message::text_message("u1", Role::User, "clean up")]);
        turn.resume = vec![
            resume(ResumeStatus::Resolved, Some(json!("yes"))),
            Resume {
                interrupt_id: "someone-else".into(),
                status: ResumeStatus::Resolved,
                payload: None,
            },
        ];
        let body = serde_json::to_value(request(&turn, &identity(), None, &[pending])).unwrap();
        let input = body["input"].as_array().unwrap();
        assert_eq!(input.len(), 3, "{input:#?}");
        assert_eq!(input[1]["type"], "mcp_approval_request");
        assert_eq!(input[1]["id"], "msg_apr1");
        assert_eq!(input[1]["content"][0]["data"]["id"], "apr_1");
        assert_eq!(input[2]["type"], "mcp_approval_response");
        assert_eq!(input[2]["role"], "user");
        assert_eq!(
            input[2]["content"][0]["data"],
            json!({"approval_request_id": "apr_1", "approve": true, "id": null, "reason": null})
        );
    }

    #[test]
    fn approvals_are_kept_until_the_next_turn_takes_them() {
        let mut decoder = Decoder::new();
        let events = decode_all(
            &mut decoder,
            &[
                json!({"object": "message", "status": "completed", "id": "m", "type": "mcp_approval_request",
                "content": [{"type": "data", "data": {"id": "apr_9", "name": "rm", "arguments": "not json",
                "server_label": "s"}}]}),
            ],
        );
        assert_eq!(
            events,
            [Event::Interrupt(Interrupt {
                id: "apr_9".into(),
                kind: InterruptKind::Approval {
                    tool: "rm".into(),
                    args: json!("not json"),
                    hint: None
                }
            })]
        );
        let mut record = Record::default();
        remember_approvals(decoder.take_approvals(), &mut record);
        assert!(decoder.take_approvals().is_empty());
        let taken = take_approvals(&mut record);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].message_id, "m");
        assert!(take_approvals(&mut record).is_empty());
    }

    #[test]
    fn rewritten_arguments_keep_the_streamed_text_and_add_only_an_extension() {
        let mut decoder = Decoder::new();
        let message =
            json!({"object": "message", "status": "in_progress", "id": "m", "type": "plugin_call"});
        let events = decode_all(
            &mut decoder,
            &[
                message,
                call_snapshot("m", 0, "in_progress", r#"{"a": 1}"#),
                call_snapshot("m", 0, "in_progress", r#"{"a": 12}"#),
                call_snapshot("m", 0, "in_progress", r#"{"a": 123}"#),
                // Rewrites "{\"a\": 12" which was already sent.
                call_snapshot("m", 0, "completed", r#"{"b": 2}"#),
            ],
        );
        assert_eq!(args_of(&events, "call_0"), r#"{"a": 12"#);
        assert!(matches!(events.last(), Some(Event::ToolCallEnd { .. })));
    }

    #[test]
    fn parallel_calls_of_one_message_are_kept_apart_and_ended_by_the_response() {
        let mut decoder = Decoder::new();
        let events = decode_all(
            &mut decoder,
            &[
                json!({"object": "message", "status": "in_progress", "id": "m", "type": "function_call"}),
                call_snapshot("m", 0, "in_progress", r#"{"q": "a"}"#),
                call_snapshot("m", 1, "in_progress", r#"{"q": "b"}"#),
                json!({"object": "response", "status": "completed"}),
            ],
        );
        assert_eq!(args_of(&events, "call_0"), r#"{"q": "a"}"#);
        assert_eq!(args_of(&events, "call_1"), r#"{"q": "b"}"#);
        assert!(matches!(
            events.last(),
            Some(Event::RunFinished {
                outcome: Outcome::Completed,
                usage: None
            })
        ));
    }

    #[test]
    fn two_results_of_one_message_get_distinct_message_ids() {
        let mut decoder = Decoder::new();
        let output = |index: u32| {
            json!({"type": "data", "index": index, "status": "completed",
                   "data": {"call_id": format!("c{index}"), "output": "ok"}})
        };
        let events = decode_all(
            &mut decoder,
            &[
                json!({"object": "message", "status": "completed", "id": "m",
                     "type": "function_call_output", "content": [output(0), output(1)]}),
            ],
        );
        let ids: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                Event::ToolResult { message_id, .. } => Some(message_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["m", "m:1"]);
    }

    #[test]
    fn error_frames_with_a_type_and_non_json_payloads() {
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        assert!(decoder
            .decode(r#"{"error": "boom", "error_type": "ValueError", "message": "Error in streaming generator"}"#, &mut out)
            .unwrap());
        let Some(Event::RunError(error)) = out.last() else {
            panic!("{out:?}")
        };
        assert_eq!(error.code(), "AGENTSCOPE_ERROR");
        assert_eq!(error.message(), "boom (ValueError)");

        let mut decoder = Decoder::new();
        assert!(!decoder.decode("[DONE]", &mut out).unwrap());
        let error = decoder.decode("<html>", &mut out).unwrap_err();
        assert_eq!(error.code(), "UPSTREAM_MALFORMED");
    }

    #[test]
    fn heartbeats_are_ignored_and_unknown_messages_are_custom() {
        let mut decoder = Decoder::new();
        let events = decode_all(
            &mut decoder,
            &[
                json!({"object": "message", "status": "completed", "id": "h", "type": "heartbeat"}),
                json!({"object": "message", "status": "completed", "id": "x", "type": "a2ui_response",
                       "content": [{"type": "data", "data": {"ui": 1}}]}),
            ],
        );
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(
            matches!(&events[0], Event::Custom { name, .. } if name == "agentscope.a2ui_response")
        );
    }

    #[test]
    fn helpers() {
        assert_eq!(
            common_prefix("{\"a\": \"北京\"}", "{\"a\": \"北海\"}"),
            "{\"a\": \"北"
        );
        assert_eq!(common_prefix("abc", "abcdef"), "abc");
        assert_eq!(
            result_text(r#"[{"type": "text", "text": "sun"}, {"type": "text", "text": "ny"}]"#),
            "sunny"
        );
        assert_eq!(
            result_text(r#"[{"type": "image", "url": "x"}]"#),
            r#"[{"type": "image", "url": "x"}]"#
        );
        assert_eq!(result_text("plain"), "plain");
        let mut map = Map::new();
        map.insert("input_tokens".into(), json!(3));
        assert_eq!(
            usage(&map),
            Some(Usage {
                input_tokens: Some(3),
                output_tokens: None,
                total_tokens: None
            })
        );
        assert_eq!(usage(&Map::new()), None);
    }
}
