//! The AgentScope Runtime Agent API (agentscope-runtime 1.1.6.post2, `POST /process`) on the wire, spelled
//! exactly as the runtime spells it (snake_case fields, lowercase enum values). See `specs/agentscope.md`
//! §1–2 and the runtime's `engine/schemas/agent_schemas.py`.
//!
//! One set of types serves both directions.
//!
//! Reading: `null` is read as absent everywhere (the runtime writes every field, `null`s included:
//! `model_dump_json()`), `sequence_number` may be an integer or a string, unknown enum values are kept
//! (`Other`), unknown content types decode as [`ContentBody::Unknown`], extra fields are ignored.
//!
//! Writing, decided per type:
//! - the streamed objects — [`Response`], [`Message`], [`Content`] and the `data` payloads — write **every
//!   field, `null` included**, like the runtime's `model_dump_json()`, so that a stream we serve looks like
//!   the real one. The runtime accepts these `null`s back in a request (every such field is `Optional`);
//!   the fields it does not accept as `null` (`Message.id`, `type`, `status`, `object`) are never `None`
//!   here.
//! - the request, [`AgentRequest`], writes only what is set, like the shipped client
//!   (`{"input":[…],"stream":true,"session_id":"s1","user_id":"u1"}`).
//! - the bare error frame, [`BareError`], writes `{"error": "<text>"}` and its optional keys only when set.

use std::borrow::Cow;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::json::null_as_default;

// --- Request ----------------------------------------------------------------------------------------------

/// The body of `POST /process`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentRequest {
    /// Required; a list of typed messages.
    pub input: Vec<Message>,
    /// The runtime streams regardless; defaults to `true`.
    #[serde(default = "yes", deserialize_with = "null_as_true")]
    pub stream: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The conversation key (the runtime mints a uuid4 when absent and echoes it in every `response`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Defaults to `session_id` on the runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// 1..=5 on the runtime (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// Fields the runtime's model allows beyond its own (it is `extra="allow"`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn yes() -> bool {
    true
}

fn null_as_true<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(deserializer)?.unwrap_or(true))
}

/// `stop`: one sequence or several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `{"type":"function","function":{"name","description","parameters"}}` (OpenAI function form).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    #[serde(
        rename = "type",
        default = "function_type",
        deserialize_with = "null_as_function"
    )]
    pub kind: String,
    #[serde(default)]
    pub function: Option<FunctionTool>,
}

impl Tool {
    pub fn function(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        Self {
            kind: function_type(),
            function: Some(FunctionTool {
                name: name.into(),
                description: description.into(),
                parameters,
            }),
        }
    }
}

fn function_type() -> String {
    "function".to_owned()
}

fn null_as_function<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_else(function_type))
}

/// `name`, `description` and `parameters` are all required by the runtime: always written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionTool {
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub description: String,
    /// A JSON Schema; an empty object schema when absent.
    #[serde(
        default = "crate::model::empty_object_schema",
        deserialize_with = "null_as_schema"
    )]
    pub parameters: Value,
}

fn null_as_schema<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
    Ok(Option::<Value>::deserialize(deserializer)?
        .filter(|v| !v.is_null())
        .unwrap_or_else(crate::model::empty_object_schema))
}

// --- Stream frames ----------------------------------------------------------------------------------------

/// One SSE `data:` payload of a `/process` answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Frame {
    /// A protocol object (`object` is `response`, `message` or `content`); boxed, being far the largest.
    Object(Box<Object>),
    /// A framework-level failure without `object`: `{"error": "<text>"}` (also with `error_type`/`message`).
    Error(BareError),
    /// `{"text": "<…>"}` from custom-function apps.
    Text(TextFrame),
    /// Anything else that is JSON (an `object` kind we do not know, …).
    Other(Value),
}

impl Frame {
    /// Parses one payload. `Err` only when it is not JSON at all.
    ///
    /// `Frame` is untagged and `Object` internally tagged: serde would buffer every frame twice before
    /// reading it (about half of the decoding time per event). So a protocol object's `object` is read
    /// first, with a scan that keeps nothing, and the object parsed as that type; `object` matches the tag
    /// exactly as the untagged parse would. Anything else (no `object`, an unknown one, an object that does
    /// not read as its type) takes the untagged parse.
    pub fn parse(payload: &str) -> serde_json::Result<Self> {
        let object = match peek_object(payload).as_deref() {
            Some("content") => parse_object(payload, Object::Content),
            Some("message") => parse_object(payload, Object::Message),
            Some("response") => parse_object(payload, Object::Response),
            _ => None,
        };
        object.map_or_else(|| serde_json::from_str(payload), Ok)
    }
}

/// The `object` of a payload, if it is a JSON object with one.
fn peek_object(payload: &str) -> Option<Cow<'_, str>> {
    #[derive(Deserialize)]
    struct Peek<'a> {
        #[serde(borrow)]
        object: Option<Cow<'a, str>>,
    }
    serde_json::from_str::<Peek>(payload).ok()?.object
}

/// The payload read as one kind of protocol object; `None` when it does not read as that kind.
fn parse_object<T: DeserializeOwned>(payload: &str, kind: fn(T) -> Object) -> Option<Frame> {
    let object = serde_json::from_str(payload).ok()?;
    Some(Frame::Object(Box::new(kind(object))))
}

/// A protocol object, told apart by its `object` key. Read only: each struct writes its own `object`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "object", rename_all = "lowercase")]
pub enum Object {
    Response(Response),
    Message(Message),
    Content(Content),
}

/// `{"code", "message"}` of a failed response (or message, or content).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(default, deserialize_with = "null_as_default")]
    pub code: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub message: String,
}

/// The runtime's `sequence_number`: an integer from 0 (the seed document says a string; both are read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SequenceNumber {
    Number(i64),
    Text(String),
}

/// `object: "response"` (the runtime's `AgentResponse`). Fields in the runtime's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    #[serde(default)]
    pub sequence_number: Option<SequenceNumber>,
    /// Always `"response"`; written so that a `Response` serialized on its own is a whole frame.
    #[serde(default = "response_object", deserialize_with = "null_as_response")]
    pub object: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: RunStatus,
    #[serde(default)]
    pub error: Option<ErrorBody>,
    /// `response_<uuid4>`.
    #[serde(default)]
    pub id: Option<String>,
    /// Unix seconds.
    #[serde(default, deserialize_with = "null_as_default")]
    pub created_at: i64,
    #[serde(default)]
    pub completed_at: Option<i64>,
    /// The completed response repeats every message of the run here.
    #[serde(default)]
    pub output: Option<Vec<Message>>,
    #[serde(default)]
    pub usage: Option<Map<String, Value>>,
    #[serde(default)]
    pub session_id: Option<String>,
}

impl Default for Response {
    fn default() -> Self {
        Self {
            sequence_number: None,
            object: response_object(),
            status: RunStatus::Created,
            error: None,
            id: None,
            created_at: 0,
            completed_at: None,
            output: None,
            usage: None,
            session_id: None,
        }
    }
}

fn response_object() -> String {
    "response".to_owned()
}

fn null_as_response<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_else(response_object))
}

/// `object: "message"`: one message of the conversation, in a request's `input` or streamed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    #[serde(default)]
    pub sequence_number: Option<SequenceNumber>,
    /// Always `"message"`.
    #[serde(default = "message_object", deserialize_with = "null_as_message")]
    pub object: String,
    /// Required by the runtime (`created` by default); never `null`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: RunStatus,
    #[serde(default)]
    pub error: Option<ErrorBody>,
    /// `msg_<uuid4>`; required by the runtime (it mints one when absent). Empty when a peer sent none.
    #[serde(default, deserialize_with = "null_as_default")]
    pub id: String,
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    pub kind: MessageType,
    #[serde(default)]
    pub role: Option<Role>,
    /// `null` on the opening `in_progress` event; the completed message repeats its full content.
    #[serde(default)]
    pub content: Option<Vec<Content>>,
    /// A message-level error code (`type:"error"` messages).
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub usage: Option<Map<String, Value>>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

impl Default for Message {
    fn default() -> Self {
        Self {
            sequence_number: None,
            object: message_object(),
            status: RunStatus::Created,
            error: None,
            id: String::new(),
            kind: MessageType::Message,
            role: None,
            content: None,
            code: None,
            message: None,
            usage: None,
            metadata: None,
        }
    }
}

fn message_object() -> String {
    "message".to_owned()
}

fn null_as_message<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_else(message_object))
}

impl Message {
    /// A message of `kind` by `role` with `content`, `status: completed` (how a request carries history).
    pub fn new(
        id: impl Into<String>,
        kind: MessageType,
        role: Role,
        content: Vec<Content>,
    ) -> Self {
        Self {
            status: RunStatus::Completed,
            id: id.into(),
            kind,
            role: Some(role),
            content: Some(content),
            ..Self::default()
        }
    }

    /// The contents, or none.
    pub fn contents(&self) -> &[Content] {
        self.content.as_deref().unwrap_or_default()
    }
}

/// `object: "content"`: one content of a message, streamed on its own (with `msg_id`/`index`) or nested in a
/// message's `content`.
///
/// Field order on the wire differs from the runtime's in one respect: the type's own fields are written
/// right after `type` (the runtime writes them last). JSON readers do not care.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Content {
    #[serde(default)]
    pub sequence_number: Option<SequenceNumber>,
    /// Always `"content"`.
    #[serde(default = "content_object", deserialize_with = "null_as_content")]
    pub object: String,
    #[serde(default)]
    pub status: Option<RunStatus>,
    #[serde(default)]
    pub error: Option<ErrorBody>,
    /// `type` and the type's own fields.
    #[serde(flatten)]
    pub body: ContentBody,
    /// The content's slot in its message.
    #[serde(default)]
    pub index: Option<u32>,
    /// `true`: text to append. `false`/`null`: a whole value (data contents are full snapshots; the
    /// completed text content repeats the full text with `delta: null`).
    #[serde(default)]
    pub delta: Option<bool>,
    /// The owning message.
    #[serde(default)]
    pub msg_id: Option<String>,
}

fn content_object() -> String {
    "content".to_owned()
}

fn null_as_content<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_else(content_object))
}

impl Content {
    /// A whole (non-delta) content, as a request's history carries it.
    pub fn new(body: ContentBody) -> Self {
        Self {
            sequence_number: None,
            object: content_object(),
            status: None,
            error: None,
            body,
            index: None,
            delta: Some(false),
            msg_id: None,
        }
    }

    pub fn text(text: impl Into<String>) -> Self {
        Self::new(ContentBody::Text {
            text: Some(text.into()),
        })
    }

    /// A `data` content holding `data` (a payload struct of this module, serialized).
    pub fn data(data: impl Serialize) -> Self {
        let data = match serde_json::to_value(data) {
            Ok(Value::Object(map)) => Some(map),
            _ => None,
        };
        Self::new(ContentBody::Data { data })
    }

    /// Whether this content is text to append (`delta: true`).
    pub fn is_delta(&self) -> bool {
        self.delta == Some(true)
    }

    /// The `data` object of a data content.
    pub fn data_object(&self) -> Option<&Map<String, Value>> {
        match &self.body {
            ContentBody::Data { data } => data.as_ref(),
            _ => None,
        }
    }

    /// Reads the `data` object of a data content as `T`; `None` when this is not a data content or the
    /// payload does not fit.
    pub fn data_as<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        let map = self.data_object()?;
        T::deserialize(serde::de::value::MapDeserializer::new(
            map.iter().map(|(k, v)| (k.as_str(), v)),
        ))
        .ok()
    }
}

/// `type` and the type's own fields. Every field is written, `null` included. The keys of a `data` object are
/// written in sorted order (a JSON object; the runtime's order is not meaningful).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ContentBody {
    Text {
        #[serde(default)]
        text: Option<String>,
    },
    /// An object (`Dict`): tool calls, results and approvals (see the payload structs below).
    Data {
        #[serde(default)]
        data: Option<Map<String, Value>>,
    },
    Image {
        #[serde(default)]
        image_url: Option<String>,
    },
    Audio {
        /// A URL or base64 data.
        #[serde(default)]
        data: Option<String>,
        #[serde(default)]
        format: Option<String>,
    },
    Video {
        #[serde(default)]
        video_url: Option<String>,
    },
    File {
        #[serde(default)]
        file_url: Option<String>,
        #[serde(default)]
        file_id: Option<String>,
        #[serde(default)]
        filename: Option<String>,
        /// Base64 data.
        #[serde(default)]
        file_data: Option<String>,
    },
    Refusal {
        #[serde(default)]
        refusal: Option<String>,
    },
    /// A content type this module does not know; read only (writing it is an error).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl ContentBody {
    /// The `type`; `None` for a type this module does not know.
    pub fn kind(&self) -> Option<ContentType> {
        Some(match self {
            Self::Text { .. } => ContentType::Text,
            Self::Data { .. } => ContentType::Data,
            Self::Image { .. } => ContentType::Image,
            Self::Audio { .. } => ContentType::Audio,
            Self::Video { .. } => ContentType::Video,
            Self::File { .. } => ContentType::File,
            Self::Refusal { .. } => ContentType::Refusal,
            Self::Unknown => return None,
        })
    }
}

/// `{"error": "<text>"}` — no `object` key. Custom streaming endpoints add `error_type` and `message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BareError {
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `{"text": "<…>"}` from custom-function apps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextFrame {
    pub text: String,
}

// --- Data payloads ----------------------------------------------------------------------------------------

/// `function_call` / `plugin_call`: `{call_id, name, arguments}`; `arguments` is JSON text, and in a stream
/// the whole accumulated text every time (replace, not append).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    #[serde(default)]
    pub call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// JSON text; a JSON value that is not a string is read as its JSON text.
    #[serde(default, deserialize_with = "opt_string_or_json")]
    pub arguments: Option<String>,
}

/// `function_call_output` / `plugin_call_output` / `mcp_call_output`: `{call_id, name?, output}`; `output` is
/// a string (real servers write the JSON text of the result blocks, `[{"type":"text","text":"sunny"}]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCallOutput {
    #[serde(default, deserialize_with = "null_as_default")]
    pub call_id: String,
    #[serde(default)]
    pub name: Option<String>,
    /// A JSON value that is not a string is read as its JSON text.
    #[serde(default, deserialize_with = "string_or_json")]
    pub output: String,
}

/// `mcp_call`: `{call_id?, name?, arguments?, server_label?}`; the runtime's `McpCall` model spells the call
/// id `id` and may carry `output`/`error`. Written with `null`s like the others.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpCall {
    #[serde(default)]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "opt_string_or_json")]
    pub arguments: Option<String>,
    #[serde(default)]
    pub server_label: Option<String>,
    #[serde(
        default,
        deserialize_with = "opt_string_or_json",
        skip_serializing_if = "Option::is_none"
    )]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl McpCall {
    /// `call_id`, else `id`.
    pub fn call_id(&self) -> Option<&str> {
        self.call_id.as_deref().or(self.id.as_deref())
    }
}

/// `mcp_approval_request`: `{id, name, arguments, server_label}` (all required by the runtime's model).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpApprovalRequest {
    #[serde(default, deserialize_with = "null_as_default")]
    pub id: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// JSON text of the tool's arguments.
    #[serde(default, deserialize_with = "string_or_json")]
    pub arguments: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub server_label: String,
}

/// `mcp_approval_response`: `{approval_request_id, approve, id?, reason?}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpApprovalResponse {
    #[serde(default, deserialize_with = "null_as_default")]
    pub approval_request_id: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub approve: bool,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// A string as itself; any other JSON value as its JSON text; `null`/absent as empty.
fn string_or_json<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(opt_string_or_json(deserializer)?.unwrap_or_default())
}

fn opt_string_or_json<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(deserializer)? {
        Value::Null => None,
        Value::String(s) => Some(s),
        other => Some(other.to_string()),
    })
}

// --- Enums ------------------------------------------------------------------------------------------------

macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        $name:ident, default $default:ident = $default_text:literal {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal,)*
        }
    ) => {
        $(#[$meta])*
        /// Values this module does not know are kept as `Other` and written back as they came.
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
        pub enum $name {
            #[default]
            $default,
            $($(#[$vmeta])* $variant,)*
            Other(String),
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                match self {
                    Self::$default => $default_text,
                    $(Self::$variant => $text,)*
                    Self::Other(s) => s,
                }
            }

            pub fn parse(s: &str) -> Self {
                match s {
                    $default_text => Self::$default,
                    $($text => Self::$variant,)*
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let s = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
                Ok(Self::parse(&s))
            }
        }
    };
}

open_enum! {
    /// A message's `type`.
    MessageType, default Message = "message" {
        FunctionCall = "function_call",
        FunctionCallOutput = "function_call_output",
        PluginCall = "plugin_call",
        PluginCallOutput = "plugin_call_output",
        ComponentCall = "component_call",
        ComponentCallOutput = "component_call_output",
        McpListTools = "mcp_list_tools",
        McpApprovalRequest = "mcp_approval_request",
        McpCall = "mcp_call",
        McpApprovalResponse = "mcp_approval_response",
        McpCallOutput = "mcp_call_output",
        Reasoning = "reasoning",
        Heartbeat = "heartbeat",
        Error = "error",
        A2uiResponse = "a2ui_response",
        A2uiAction = "a2ui_action",
    }
}

impl MessageType {
    /// `function_call`, `plugin_call`, `mcp_call`, `component_call`.
    pub fn is_call(&self) -> bool {
        matches!(
            self,
            Self::FunctionCall | Self::PluginCall | Self::McpCall | Self::ComponentCall
        )
    }

    /// `function_call_output`, `plugin_call_output`, `mcp_call_output`, `component_call_output`.
    pub fn is_call_output(&self) -> bool {
        matches!(
            self,
            Self::FunctionCallOutput
                | Self::PluginCallOutput
                | Self::McpCallOutput
                | Self::ComponentCallOutput
        )
    }
}

open_enum! {
    /// The `status` of a response, message or content.
    RunStatus, default Created = "created" {
        InProgress = "in_progress",
        Completed = "completed",
        Canceled = "canceled",
        Failed = "failed",
        Rejected = "rejected",
        Unknown = "unknown",
        Queued = "queued",
        Incomplete = "incomplete",
    }
}

open_enum! {
    /// A content's `type` (see [`ContentBody`] for the fields of each).
    ContentType, default Text = "text" {
        Data = "data",
        Image = "image",
        Audio = "audio",
        Video = "video",
        File = "file",
        Refusal = "refusal",
    }
}

/// A message's `role`. The runtime accepts only these four (`developer` is not one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Assistant,
    User,
    System,
    Tool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_content_event_reads_with_nulls() {
        let frame = Frame::parse(r#"{"sequence_number":5,"object":"content","status":"completed","error":null,"type":"text","index":0,"delta":null,"msg_id":"msg_1","text":"echo: hello"}"#).unwrap();
        let Frame::Object(object) = frame else {
            panic!("{frame:?}")
        };
        let Object::Content(content) = *object else {
            panic!()
        };
        assert_eq!(content.status, Some(RunStatus::Completed));
        assert!(!content.is_delta());
        assert_eq!(
            content.body,
            ContentBody::Text {
                text: Some("echo: hello".into())
            }
        );
        assert_eq!(content.msg_id.as_deref(), Some("msg_1"));
    }

    #[test]
    fn response_failed_reads_error() {
        let frame = Frame::parse(r#"{"sequence_number":2,"object":"response","status":"failed","error":{"code":"AGENT_UNKNOWN_ERROR","message":"boom"},"id":"response_1","created_at":1795311194,"completed_at":null,"output":null,"usage":null,"session_id":"s3"}"#).unwrap();
        let Frame::Object(object) = frame else {
            panic!("{frame:?}")
        };
        let Object::Response(response) = *object else {
            panic!()
        };
        assert_eq!(response.status, RunStatus::Failed);
        assert_eq!(response.error.unwrap().code, "AGENT_UNKNOWN_ERROR");
        assert_eq!(response.object, "response");
    }

    #[test]
    fn bare_error_and_text_frames_read() {
        assert_eq!(
            Frame::parse(r#"{"error": "Task u1:c1 is already in RUNNING state."}"#).unwrap(),
            Frame::Error(BareError {
                error: "Task u1:c1 is already in RUNNING state.".into(),
                error_type: None,
                message: None
            })
        );
        assert_eq!(
            Frame::parse(r#"{"text": "42"}"#).unwrap(),
            Frame::Text(TextFrame { text: "42".into() })
        );
        assert!(matches!(
            Frame::parse(r#"{"object":"event","status":null}"#).unwrap(),
            Frame::Other(_)
        ));
    }

    #[test]
    fn unknown_types_and_string_sequence_numbers_are_kept() {
        let frame = Frame::parse(r#"{"sequence_number":"7","object":"message","status":"weird","id":"m","type":"a2ui_thing","role":"assistant","content":[{"object":"content","type":"hologram","x":1}]}"#).unwrap();
        let Frame::Object(object) = frame else {
            panic!("{frame:?}")
        };
        let Object::Message(message) = *object else {
            panic!()
        };
        assert_eq!(
            message.sequence_number,
            Some(SequenceNumber::Text("7".into()))
        );
        assert_eq!(message.status, RunStatus::Other("weird".into()));
        assert_eq!(message.kind, MessageType::Other("a2ui_thing".into()));
        assert_eq!(message.contents()[0].body, ContentBody::Unknown);
    }

    #[test]
    fn message_writes_every_field_like_model_dump_json() {
        let message = Message {
            status: RunStatus::InProgress,
            id: "msg_1".into(),
            role: Some(Role::Assistant),
            metadata: Some(Map::new()),
            ..Message::default()
        };
        assert_eq!(
            serde_json::to_string(&message).unwrap(),
            r#"{"sequence_number":null,"object":"message","status":"in_progress","error":null,"id":"msg_1","type":"message","role":"assistant","content":null,"code":null,"message":null,"usage":null,"metadata":{}}"#
        );
    }

    #[test]
    fn data_content_round_trips_payloads() {
        let content = Content::data(FunctionCall {
            call_id: Some("call_1".into()),
            name: Some("get_weather".into()),
            arguments: Some("{}".into()),
        });
        assert_eq!(
            serde_json::to_string(&content).unwrap(),
            r#"{"sequence_number":null,"object":"content","status":null,"error":null,"type":"data","data":{"arguments":"{}","call_id":"call_1","name":"get_weather"},"index":null,"delta":false,"msg_id":null}"#
        );
        let back: Content =
            serde_json::from_str(&serde_json::to_string(&content).unwrap()).unwrap();
        let call: FunctionCall = back.data_as().unwrap();
        assert_eq!(call.name.as_deref(), Some("get_weather"));
        // Arguments sent as an object are read as JSON text.
        let odd: Content =
            serde_json::from_str(r#"{"type":"data","data":{"call_id":"c","arguments":{"a":1}}}"#)
                .unwrap();
        assert_eq!(
            odd.data_as::<FunctionCall>().unwrap().arguments.as_deref(),
            Some(r#"{"a":1}"#)
        );
    }

    #[test]
    fn request_writes_only_what_is_set() {
        let request = AgentRequest {
            input: vec![],
            stream: true,
            session_id: Some("s1".into()),
            user_id: Some("u1".into()),
            ..AgentRequest::default()
        };
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"input":[],"stream":true,"session_id":"s1","user_id":"u1"}"#
        );
        let read: AgentRequest =
            serde_json::from_str(r#"{"input":[],"stream":null,"custom":1,"stop":["a"]}"#).unwrap();
        assert!(read.stream);
        assert_eq!(read.stop, Some(Stop::Many(vec!["a".into()])));
        assert_eq!(read.extra.get("custom"), Some(&Value::from(1)));
    }
}
