//! An `AgentRequest` body as a [`Turn`], or the answer the real runtime gives to a body it refuses
//! (`specs/agentscope.md` §1.3, §1.5, §3.3–3.5).
//!
//! Refusals come in the runtime's two shapes: FastAPI's HTTP 422 `{"detail":[…]}` when the body is not a
//! JSON object (the route takes `request: dict`), and, for an object that does not fit `AgentRequest`, a
//! `200` stream of one bare `{"error": "<pydantic's text>"}` frame ([`crate::protocol::agentscope::validate`]).
//!
//! What the `input` messages become:
//!
//! | `type` | canonical |
//! | --- | --- |
//! | `message` | a message of its role (none: user) with its contents as parts |
//! | `function_call`, `plugin_call`, `mcp_call`, `component_call` | assistant tool calls, one per `data` content; added to the assistant message just before, else an assistant message whose id is the first call id |
//! | `function_call_output`, `plugin_call_output`, `mcp_call_output`, `component_call_output` | one tool message per `data` content (`tool_call_id` = `call_id`, text = `output`) |
//! | `mcp_approval_response` after the last message of the agent | `Turn.resume` of the interrupt `approval_request_id`; not a message |
//! | `mcp_approval_request` (the proxy's own pause), `reasoning`, `heartbeat`, `error`, `mcp_list_tools`, others | dropped |

use http::Response;
use serde_json::{json, Map, Value};
use tracing::debug;

use crate::body::Body;
use crate::face::RequestDecoder;
use crate::model::{
    GenerationOptions, History, Media, MediaKind, MediaSource, Message, Part, Resume, ResumeStatus,
    Role, Tool, ToolCall, Turn,
};
use crate::protocol::agentscope::validate;
use crate::protocol::agentscope::wire::{self, ContentBody, MessageType};

/// The `server_label` of the approval requests the proxy sends.
pub const SERVER_LABEL: &str = "agent-bridge";

/// A request that reads as a turn.
#[derive(Debug)]
pub struct Accepted {
    pub turn: Turn,
    /// The request's, or a minted one.
    pub session_id: String,
    /// The request's, else the session id.
    pub user_id: String,
}

/// A request the runtime would refuse, and how.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// HTTP 422 with this FastAPI `{"detail": [...]}` body.
    Unprocessable(Value),
    /// HTTP 200, one bare `{"error": <text>}` frame.
    Frame(String),
}

/// Reads a request body as the runtime would, refusing in the runtime's two shapes.
pub struct Reader<'a> {
    /// The name the proxy gives question interrupts (see the inbound's encoder), which tells the answer to a
    /// question from the answer to an approval.
    pub question_tool: &'a str,
}

impl RequestDecoder for Reader<'_> {
    type Request = Accepted;
    type Refusal = Refusal;

    fn decode(&self, body: &[u8]) -> Result<Accepted, Refusal> {
        decode(body, self.question_tool)
    }

    fn refuse(&self, refusal: Refusal) -> Response<Body> {
        super::refusal(refusal)
    }
}

fn decode(bytes: &[u8], question_tool: &str) -> Result<Accepted, Refusal> {
    let mut body = parse_body(bytes)?;
    validate::check_request(&mut body).map_err(Refusal::Frame)?;
    // Any object is a valid tool to the runtime (`Union[Tool, Dict]`); only function tools mean something.
    let tools = body.remove("tools");
    let request: wire::AgentRequest = serde_path_to_error::deserialize(Value::Object(body))
        .map_err(|e| {
            Refusal::Frame(format!(
                "Request parsing error at `{}`: {}",
                e.path(),
                e.inner()
            ))
        })?;
    Ok(accept(request, tools, question_tool))
}

/// FastAPI's reading of a `request: dict` body.
fn parse_body(bytes: &[u8]) -> Result<Map<String, Value>, Refusal> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(detail(
            json!({"type": "missing", "loc": ["body"], "msg": "Field required", "input": null}),
        ));
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(body)) => Ok(body),
        Ok(other) => Err(not_a_dict(other)),
        Err(error) => Err(json_invalid(bytes, &error)),
    }
}

fn detail(error: Value) -> Refusal {
    Refusal::Unprocessable(json!({ "detail": [error] }))
}

/// FastAPI's answer to a body that is not a JSON object.
pub fn not_a_dict(input: Value) -> Refusal {
    detail(
        json!({"type": "dict_type", "loc": ["body"], "msg": "Input should be a valid dictionary", "input": input}),
    )
}

/// FastAPI's answer to a body that is not JSON: the position (in characters) and the words of Python's
/// `json` module where serde's error maps onto one of them.
fn json_invalid(bytes: &[u8], error: &serde_json::Error) -> Refusal {
    let text = String::from_utf8_lossy(bytes);
    // At the end of the input Python points past the last character; serde at it.
    let position = if error.is_eof() {
        text.chars().count()
    } else {
        char_offset(&text, error.line(), error.column())
    };
    let message = error.to_string();
    let last = text.trim_end().chars().last();
    let python = if error.is_eof() && message.contains("string") {
        "Unterminated string starting at"
    } else if error.is_eof() && message.contains("list") {
        match last {
            Some('[' | ',') => "Expecting value",
            _ => "Expecting ',' delimiter",
        }
    } else if error.is_eof() && message.contains("object") {
        match last {
            Some('{' | ',') => "Expecting property name enclosed in double quotes",
            Some(':') => "Expecting value",
            _ => "Expecting ',' delimiter",
        }
    } else if message.starts_with("expected value")
        || message.starts_with("EOF while parsing a value")
        || message.starts_with("expected ident")
    {
        "Expecting value"
    } else if message.starts_with("key must be a string") {
        "Expecting property name enclosed in double quotes"
    } else if message.starts_with("expected `,` or") {
        "Expecting ',' delimiter"
    } else if message.starts_with("expected `:`") {
        "Expecting ':' delimiter"
    } else if message.starts_with("trailing characters") {
        "Extra data"
    } else if message.starts_with("control character") {
        "Invalid control character at"
    } else {
        // serde's own words, without its " at line L column C".
        return detail(
            json!({"type": "json_invalid", "loc": ["body", position], "msg": "JSON decode error", "input": {}, "ctx": {"error": message.split(" at line ").next().unwrap_or_default()}}),
        );
    };
    detail(
        json!({"type": "json_invalid", "loc": ["body", position], "msg": "JSON decode error", "input": {}, "ctx": {"error": python}}),
    )
}

/// The 0-based character offset of serde's 1-based line and column (a column counts bytes).
fn char_offset(text: &str, line: usize, column: usize) -> usize {
    let mut offset = 0;
    for (number, content) in text.split_inclusive('\n').enumerate() {
        if number + 1 == line {
            let upto = column.saturating_sub(1).min(content.len());
            let mut end = upto;
            while !content.is_char_boundary(end) {
                end -= 1;
            }
            return offset + content[..end].chars().count();
        }
        offset += content.chars().count();
    }
    offset
}

fn accept(request: wire::AgentRequest, tools: Option<Value>, question_tool: &str) -> Accepted {
    let session_id = request
        .session_id
        .clone()
        .filter(|id| !id.is_empty())
        .unwrap_or_else(crate::model::random_hex);
    let user_id = request
        .user_id
        .clone()
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| session_id.clone());
    let (messages, resume) = messages_from_input(&request.input, question_tool);
    let options = GenerationOptions {
        model: request.model.clone(),
        temperature: request.temperature,
        max_tokens: request.max_tokens,
    };
    let extra = passthrough(&request);
    Accepted {
        turn: Turn {
            conversation: session_id.clone(),
            tenant: String::new(),
            run_id: format!("response_{}", uuid::Uuid::new_v4()),
            messages,
            history: History::Full,
            tools: tools_from(tools),
            context: Vec::new(),
            state: None,
            options,
            resume,
            extra,
        },
        session_id,
        user_id,
    }
}

/// The generation options the canonical turn has no field for, under their own names in `extra` (where an
/// AgentScope outbound looks for them). Unknown top-level fields and the request `id` are not kept.
fn passthrough(request: &wire::AgentRequest) -> Map<String, Value> {
    let mut extra = Map::new();
    let mut keep = |name: &str, value: Option<Value>| {
        if let Some(value) = value {
            extra.insert(name.to_owned(), value);
        }
    };
    keep("top_p", request.top_p.map(Value::from));
    keep(
        "frequency_penalty",
        request.frequency_penalty.map(Value::from),
    );
    keep(
        "presence_penalty",
        request.presence_penalty.map(Value::from),
    );
    keep(
        "stop",
        request
            .stop
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok()),
    );
    keep("seed", request.seed.map(Value::from));
    keep("n", request.n.filter(|n| *n != 1).map(Value::from));
    if !request.extra.is_empty() {
        let names: Vec<&String> = request.extra.keys().collect();
        debug!(
            ?names,
            "agentscope: request fields the proxy does not know; not sent upstream"
        );
    }
    extra
}

/// The function tools of `tools`; other entries (any object is valid to the runtime) are skipped.
fn tools_from(tools: Option<Value>) -> Vec<Tool> {
    let Some(Value::Array(items)) = tools else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|item| {
            let tool = serde_json::from_value::<wire::Tool>(item.clone())
                .ok()
                .and_then(|tool| tool.function);
            if tool.is_none() {
                debug!(tool = %item, "agentscope: a tool that is not a function tool is not offered upstream");
            }
            tool
        })
        .map(|function| Tool {
            name: function.name,
            description: function.description,
            parameters: function.parameters,
        })
        .collect()
}

/// The input messages as canonical messages, and the answers to interrupts they carry.
fn messages_from_input(
    input: &[wire::Message],
    question_tool: &str,
) -> (Vec<Message>, Vec<Resume>) {
    // Approval answers count only after the agent's last message: full history repeats old answers.
    let last_of_agent = input.iter().rposition(is_from_agent);
    let mut messages: Vec<Message> = Vec::new();
    let mut resume = Vec::new();
    for (index, message) in input.iter().enumerate() {
        let id = message_id(index, message);
        match &message.kind {
            MessageType::Message => messages.push(Message::new(
                id,
                role_from_wire(message.role),
                message
                    .contents()
                    .iter()
                    .filter_map(part_from_wire)
                    .collect(),
            )),
            kind if kind.is_call() => add_calls(&mut messages, id, message),
            kind if kind.is_call_output() => add_outputs(&mut messages, &id, message),
            MessageType::McpApprovalResponse => {
                if last_of_agent.is_some_and(|last| index < last) {
                    debug!(message = %id, "agentscope: an approval answer of an earlier turn; not resent");
                    continue;
                }
                resume.extend(
                    message
                        .contents()
                        .iter()
                        .filter_map(|c| c.data_as::<wire::McpApprovalResponse>())
                        .filter(|answer| !answer.approval_request_id.is_empty())
                        .map(|answer| answer_to(answer, input, question_tool)),
                );
            }
            kind => {
                debug!(message = %id, kind = %kind, "agentscope: input message not sent upstream")
            }
        }
    }
    (messages, resume)
}

/// Whether a message is one the agent (or the proxy) produced.
fn is_from_agent(message: &wire::Message) -> bool {
    matches!(message.role, Some(wire::Role::Assistant))
        || message.kind.is_call()
        || message.kind == MessageType::Reasoning
        || message.kind == MessageType::McpApprovalRequest
}

/// A message's id; one derived from its position and content when it has none, so that the same message
/// resent with the history keeps its id.
fn message_id(index: usize, message: &wire::Message) -> String {
    if !message.id.is_empty() {
        return message.id.clone();
    }
    let text = serde_json::to_string(message).unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in index.to_le_bytes().iter().chain(text.as_bytes()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("msg_{hash:016x}")
}

fn role_from_wire(role: Option<wire::Role>) -> Role {
    match role {
        Some(wire::Role::Assistant) => Role::Assistant,
        Some(wire::Role::System) => Role::System,
        Some(wire::Role::Tool) => Role::Tool,
        Some(wire::Role::User) | None => Role::User,
    }
}

/// Tool calls join the assistant message they follow (OpenAI's shape), else start one named by the first
/// call id (the id the proxy records for a call it streamed without a parent message).
fn add_calls(messages: &mut Vec<Message>, id: String, message: &wire::Message) {
    let calls: Vec<ToolCall> = message
        .contents()
        .iter()
        .filter_map(|content| {
            let (call_id, name, arguments) = if message.kind == MessageType::McpCall {
                let call: wire::McpCall = content.data_as()?;
                (call.call_id().map(str::to_owned), call.name, call.arguments)
            } else {
                let call: wire::FunctionCall = content.data_as()?;
                (call.call_id, call.name, call.arguments)
            };
            Some(ToolCall {
                id: call_id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| format!("{id}-call")),
                name: name.unwrap_or_default(),
                arguments: arguments
                    .filter(|a| !a.is_empty())
                    .unwrap_or_else(|| "{}".to_owned()),
            })
        })
        .collect();
    if calls.is_empty() {
        return;
    }
    match messages.last_mut() {
        Some(last) if last.role == Role::Assistant => last.tool_calls.extend(calls),
        _ => {
            let mut assistant = Message::new(calls[0].id.clone(), Role::Assistant, Vec::new());
            assistant.tool_calls = calls;
            messages.push(assistant);
        }
    }
}

/// One tool message per output; the first keeps the wire message's id.
fn add_outputs(messages: &mut Vec<Message>, id: &str, message: &wire::Message) {
    let outputs = message
        .contents()
        .iter()
        .filter_map(|content| content.data_as::<wire::FunctionCallOutput>());
    for (n, output) in outputs.enumerate() {
        let id = if n == 0 {
            id.to_owned()
        } else {
            format!("{id}-{n}")
        };
        let mut tool = Message::text_message(id, Role::Tool, output.output);
        tool.tool_call_id = Some(output.call_id);
        tool.name = output.name;
        messages.push(tool);
    }
}

/// An `mcp_approval_response` as the answer to its interrupt. An approval's payload is
/// `{"approved": bool}` (plus `"reason"` when given). The answer to a question the proxy asked (its request,
/// resent in `input`, names the route's question tool) is the `reason` text; `approve:false` answers it
/// "no" (with the reason after it): a refusal is the agent's to act on, not a cancel of its work.
fn answer_to(
    answer: wire::McpApprovalResponse,
    input: &[wire::Message],
    question_tool: &str,
) -> Resume {
    let reason = answer.reason.filter(|r| !r.is_empty());
    if is_question(&answer.approval_request_id, input, question_tool) {
        let payload = match (answer.approve, reason) {
            (true, reason) => reason,
            (false, None) => Some("no".to_owned()),
            (false, Some(reason)) => Some(format!("no, {reason}")),
        };
        return Resume {
            interrupt_id: answer.approval_request_id,
            status: ResumeStatus::Resolved,
            payload: payload.map(Value::String),
        };
    }
    let mut payload = json!({ "approved": answer.approve });
    if let Some(reason) = reason {
        payload["reason"] = Value::String(reason);
    }
    Resume {
        interrupt_id: answer.approval_request_id,
        status: ResumeStatus::Resolved,
        payload: Some(payload),
    }
}

/// Whether the approval request `id` in `input` is a question the proxy asked.
fn is_question(id: &str, input: &[wire::Message], question_tool: &str) -> bool {
    input
        .iter()
        .filter(|m| m.kind == MessageType::McpApprovalRequest)
        .any(|m| {
            let kind = m
                .metadata
                .as_ref()
                .and_then(|meta| meta.get("interrupt"))
                .and_then(Value::as_str);
            m.contents()
                .iter()
                .filter_map(|c| c.data_as::<wire::McpApprovalRequest>())
                .any(|request| {
                    request.id == id
                        && request.server_label == SERVER_LABEL
                        && match kind {
                            Some(kind) => kind != "approval",
                            None => request.name == question_tool,
                        }
                })
        })
}

fn part_from_wire(content: &wire::Content) -> Option<Part> {
    let media = |kind: MediaKind,
                 source: MediaSource,
                 mime_type: Option<String>,
                 filename: Option<String>| {
        Some(Part::Media(Media {
            kind,
            source,
            mime_type,
            filename,
        }))
    };
    match &content.body {
        ContentBody::Text { text } => Some(Part::Text(text.clone().unwrap_or_default())),
        ContentBody::Refusal { refusal } => Some(Part::Text(refusal.clone().unwrap_or_default())),
        ContentBody::Data { data } => {
            Some(Part::Data(Value::Object(data.clone().unwrap_or_default())))
        }
        ContentBody::Image { image_url } => {
            let (source, mime) = url_source(image_url.as_deref()?);
            media(MediaKind::Image, source, mime, None)
        }
        ContentBody::Video { video_url } => {
            let (source, mime) = url_source(video_url.as_deref()?);
            media(MediaKind::Video, source, mime, None)
        }
        ContentBody::Audio { data, format } => {
            let (source, mime) = url_source(data.as_deref()?);
            let mime = mime.or_else(|| format.as_ref().map(|f| format!("audio/{f}")));
            media(MediaKind::Audio, source, mime, None)
        }
        ContentBody::File {
            file_url,
            file_id,
            filename,
            file_data,
        } => {
            let (source, mime) = match (file_data, file_url, file_id) {
                (Some(data), _, _) => url_source(data),
                (None, Some(url), _) => url_source(url),
                (None, None, Some(id)) => (
                    MediaSource::File {
                        id: id.clone(),
                        provider: None,
                    },
                    None,
                ),
                (None, None, None) => return None,
            };
            let kind = mime
                .as_deref()
                .map_or(MediaKind::Document, MediaKind::from_mime);
            media(kind, source, mime, filename.clone())
        }
        ContentBody::Unknown => None,
    }
}

/// A URL, or the base64 data and MIME type of a `data:` URL.
fn url_source(url: &str) -> (MediaSource, Option<String>) {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((head, data)) = rest.split_once(',') {
            if let Some(mime) = head.strip_suffix(";base64") {
                let mime = (!mime.is_empty()).then(|| mime.to_owned());
                return (MediaSource::Data(data.to_owned()), mime);
            }
        }
    }
    (MediaSource::Url(url.to_owned()), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_json(body: Value) -> Result<Accepted, Refusal> {
        decode(body.to_string().as_bytes(), "ask_user")
    }

    fn user(text: &str) -> Value {
        json!({"type": "message", "role": "user", "content": [{"type": "text", "text": text}]})
    }

    #[test]
    fn the_shipped_clients_request_is_a_full_history_turn_in_its_session() {
        let body = json!({"input":[{"object":"message","status":"created","id":"msg_1","type":"message","role":"user","content":[{"object":"content","type":"text","delta":false,"text":"hi"}]}],"stream":true,"n":1,"session_id":"s1","user_id":"u1"});
        let accepted = decode_json(body).unwrap();
        assert_eq!(accepted.session_id, "s1");
        assert_eq!(accepted.user_id, "u1");
        let turn = accepted.turn;
        assert_eq!(turn.conversation, "s1");
        assert!(turn.run_id.starts_with("response_"));
        assert_eq!(turn.history, History::Full);
        assert_eq!(
            turn.messages,
            [Message::text_message("msg_1", Role::User, "hi")]
        );
        assert!(turn.extra.is_empty(), "{:?}", turn.extra);
    }

    #[test]
    fn a_missing_session_is_minted_and_is_also_the_user() {
        let accepted = decode_json(json!({"input": [user("hi")]})).unwrap();
        // The runtime mints a uuid4; on an open route the id is the conversation's only key, so the proxy's
        // carries 128 random bits.
        assert_eq!(
            accepted.session_id.len(),
            32,
            "128 bits in hex: {}",
            accepted.session_id
        );
        assert_eq!(accepted.user_id, accepted.session_id);
        assert_eq!(accepted.turn.conversation, accepted.session_id);
    }

    #[test]
    fn messages_without_ids_get_the_same_id_each_time() {
        let first = decode_json(json!({"input": [user("hi")]})).unwrap().turn;
        let again = decode_json(json!({"input": [user("hi"), user("more")]}))
            .unwrap()
            .turn;
        assert_eq!(first.messages[0].id, again.messages[0].id);
        assert_ne!(again.messages[0].id, again.messages[1].id);
    }

    #[test]
    fn tools_options_and_the_rest_are_read() {
        let body = json!({
            "input": [user("hi")],
            "tools": [
                {"type": "function", "function": {"name": "change_background", "description": "Paint", "parameters": {"type": "object", "properties": {"color": {"type": "string"}}}}},
                {"type": "web_search"},
                {"function": "odd"}
            ],
            "model": "qwen-max", "temperature": "0.5", "max_tokens": 100, "top_p": 0.9, "seed": 3, "stop": "END",
            "id": "req-1", "custom": {"a": 1}
        });
        let turn = decode_json(body).unwrap().turn;
        assert_eq!(turn.tools.len(), 1);
        assert_eq!(turn.tools[0].name, "change_background");
        assert_eq!(turn.tools[0].description, "Paint");
        assert_eq!(turn.options.model.as_deref(), Some("qwen-max"));
        assert_eq!(turn.options.temperature, Some(0.5));
        assert_eq!(turn.options.max_tokens, Some(100));
        assert_eq!(
            Value::Object(turn.extra),
            json!({"top_p": 0.9, "seed": 3, "stop": "END"})
        );
    }

    #[test]
    fn calls_join_the_assistant_message_and_outputs_answer_them() {
        let body = json!({"input": [
            user("Change the background to blue"),
            {"id": "msg_a", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "Sure."}]},
            {"id": "msg_c", "type": "function_call", "role": "assistant", "content": [{"type": "data", "data": {"call_id": "call_1", "name": "change_background", "arguments": "{\"color\":\"blue\"}"}}]},
            {"id": "msg_o", "type": "function_call_output", "role": "tool", "content": [{"type": "data", "data": {"call_id": "call_1", "name": "change_background", "output": "done"}}]},
            {"id": "msg_p", "type": "plugin_call", "role": "assistant", "content": [{"type": "data", "data": {"call_id": "call_2", "name": "get_weather", "arguments": ""}}]},
        ]});
        let messages = decode_json(body).unwrap().turn.messages;
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[1].id, "msg_a");
        assert_eq!(messages[1].text(), "Sure.");
        assert_eq!(
            messages[1].tool_calls,
            [ToolCall {
                id: "call_1".into(),
                name: "change_background".into(),
                arguments: "{\"color\":\"blue\"}".into()
            }]
        );
        assert_eq!(messages[2].role, Role::Tool);
        assert_eq!(messages[2].id, "msg_o");
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(messages[2].text(), "done");
        // A call after a tool result starts a message named by its call id; empty arguments are `{}`.
        assert_eq!(messages[3].id, "call_2");
        assert_eq!(messages[3].tool_calls[0].arguments, "{}");
    }

    #[test]
    fn media_contents_become_media_parts() {
        let body = json!({"input": [{"role": "user", "content": [
            {"type": "image", "image_url": "https://x/cat.png"},
            {"type": "image", "image_url": "data:image/png;base64,iVBO"},
            {"type": "audio", "data": "UklG", "format": "wav"},
            {"type": "file", "file_url": "https://x/a.pdf", "filename": "a.pdf"},
            {"type": "file", "file_id": "file-1"},
            {"type": "data", "data": {"k": 1}},
            {"type": "refusal", "refusal": "no"},
        ]}]});
        let parts = decode_json(body).unwrap().turn.messages.remove(0).content;
        assert_eq!(parts.len(), 7);
        assert!(
            matches!(&parts[0], Part::Media(m) if m.kind == MediaKind::Image && m.source == MediaSource::Url("https://x/cat.png".into()))
        );
        assert!(
            matches!(&parts[1], Part::Media(m) if m.source == MediaSource::Data("iVBO".into()) && m.mime_type.as_deref() == Some("image/png"))
        );
        assert!(
            matches!(&parts[2], Part::Media(m) if m.kind == MediaKind::Audio && m.mime_type.as_deref() == Some("audio/wav"))
        );
        assert!(
            matches!(&parts[3], Part::Media(m) if m.kind == MediaKind::Document && m.filename.as_deref() == Some("a.pdf"))
        );
        assert!(
            matches!(&parts[4], Part::Media(m) if matches!(&m.source, MediaSource::File { id, .. } if id == "file-1"))
        );
        assert_eq!(parts[5], Part::Data(json!({"k": 1})));
        assert_eq!(parts[6], Part::Text("no".into()));
    }

    fn approval_request(id: &str, name: &str, metadata: Value) -> Value {
        json!({"id": format!("msg_{id}"), "type": "mcp_approval_request", "role": "assistant", "status": "completed", "metadata": metadata,
               "content": [{"type": "data", "data": {"id": id, "name": name, "arguments": "{}", "server_label": "agent-bridge"}}]})
    }

    fn approval_response(id: &str, approve: bool, reason: Option<&str>) -> Value {
        json!({"type": "mcp_approval_response", "role": "user",
               "content": [{"type": "data", "data": {"approval_request_id": id, "approve": approve, "reason": reason}}]})
    }

    #[test]
    fn an_approval_response_resumes_its_interrupt_and_is_not_a_message() {
        let body = json!({"input": [
            user("clean up"),
            approval_request("int_1", "Shell", json!({"interrupt": "approval"})),
            approval_response("int_1", false, Some("too risky")),
        ]});
        let turn = decode_json(body).unwrap().turn;
        assert_eq!(turn.messages.len(), 1, "{:?}", turn.messages);
        assert_eq!(
            turn.resume,
            [Resume {
                interrupt_id: "int_1".into(),
                status: ResumeStatus::Resolved,
                payload: Some(json!({"approved": false, "reason": "too risky"})),
            }]
        );
        // Without the request in the input it is read as an approval too.
        let turn = decode_json(json!({"input": [approval_response("int_2", true, None)]}))
            .unwrap()
            .turn;
        assert_eq!(turn.resume[0].payload, Some(json!({"approved": true})));
    }

    #[test]
    fn the_answer_to_a_question_is_its_reason() {
        let body = json!({"input": [
            user("/ask Which city?"),
            approval_request("int_q", "ask_user", json!({"interrupt": "question"})),
            approval_response("int_q", true, Some("Paris")),
        ]});
        let resume = decode_json(body).unwrap().turn.resume;
        assert_eq!(resume[0].status, ResumeStatus::Resolved);
        assert_eq!(resume[0].payload, Some(json!("Paris")));

        let body = json!({"input": [
            approval_request("int_q", "ask_user", Value::Null),
            approval_response("int_q", false, None),
        ]});
        let resume = decode_json(body).unwrap().turn.resume;
        assert_eq!(
            resume[0].status,
            ResumeStatus::Resolved,
            "a no, not a cancel"
        );
        assert_eq!(resume[0].payload, Some(json!("no")));

        let body = json!({"input": [
            approval_request("int_q", "ask_user", Value::Null),
            approval_response("int_q", false, Some("keep them")),
        ]});
        let resume = decode_json(body).unwrap().turn.resume;
        assert_eq!(resume[0].payload, Some(json!("no, keep them")));
    }

    #[test]
    fn approval_answers_of_earlier_turns_are_not_resent() {
        let body = json!({"input": [
            user("clean up"),
            approval_request("int_1", "Shell", Value::Null),
            approval_response("int_1", true, None),
            {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            user("thanks"),
        ]});
        let turn = decode_json(body).unwrap().turn;
        assert!(turn.resume.is_empty());
        assert_eq!(turn.messages.len(), 3);
    }

    #[test]
    fn refusals_take_the_runtimes_two_shapes() {
        let Err(Refusal::Unprocessable(body)) = decode(b"{\"input\": [", "ask_user") else {
            panic!("invalid JSON is a 422")
        };
        assert_eq!(body["detail"][0]["type"], "json_invalid");
        assert_eq!(body["detail"][0]["loc"], json!(["body", 11]));
        assert_eq!(body["detail"][0]["ctx"]["error"], "Expecting value");
        assert_eq!(
            decode(b"[1]", "ask_user").unwrap_err(),
            Refusal::Unprocessable(
                json!({"detail": [{"type": "dict_type", "loc": ["body"], "msg": "Input should be a valid dictionary", "input": [1]}]})
            )
        );
        assert_eq!(
            decode(b"", "ask_user").unwrap_err(),
            Refusal::Unprocessable(
                json!({"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": null}]})
            )
        );
        assert!(
            matches!(decode_json(json!({"input": "hi"})), Err(Refusal::Frame(text)) if text.contains("Input should be a valid list"))
        );
    }
}
