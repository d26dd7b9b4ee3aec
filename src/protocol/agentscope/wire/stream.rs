//! The streamed objects: the SSE frames of a run ([`Frame`]) and the `response`, `message` and `content`
//! objects they carry.

use std::borrow::Cow;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::{ContentType, MessageType, Role, RunStatus};
use crate::json::null_as_default;

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
