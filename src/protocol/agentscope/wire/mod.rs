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

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::json::null_as_default;

mod stream;

pub use stream::*;

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
