//! A2A 0.2.5 on the wire, spelled exactly as the protocol spells it (camelCase fields, `kind`
//! discriminators, kebab-case task states). See `specs/a2a.md` §1–2 and `specs/a2a-v0.2.5.schema.json`.
//!
//! One set of types serves both directions. `null` is read as absent; absent optionals are never written;
//! booleans the SDKs omit when false (`final`, `append`, `lastChunk`) default to false.

use serde::{Deserialize, Serialize};

use crate::json::null_as_default;
use serde_json::{Map, Value};

/// The protocol version this module speaks.
pub const PROTOCOL_VERSION: &str = "0.2.5";

// --- JSON-RPC 2.0 --------------------------------------------------------------------------------------------

/// A request id: a string or an integer, echoed with its type. `Null` when it could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    Number(i64),
    String(String),
    Null,
}

/// A request envelope, read loosely so that every defect can be answered with its own error code.
#[derive(Debug, Deserialize)]
pub struct RawRequest {
    #[serde(default)]
    pub jsonrpc: Option<Value>,
    #[serde(default)]
    pub id: Option<Value>,
    #[serde(default)]
    pub method: Option<Value>,
    #[serde(default)]
    pub params: Option<Value>,
}

/// A request as we send it.
#[derive(Debug, Serialize)]
pub struct Request<'a, P> {
    pub jsonrpc: &'static str,
    pub id: &'a str,
    pub method: &'a str,
    pub params: P,
}

/// A response as we write it: `result` or `error`.
#[derive(Debug, Serialize)]
pub struct Response<'a, R> {
    pub jsonrpc: &'static str,
    pub id: &'a RequestId,
    #[serde(flatten)]
    pub body: ResponseBody<R>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResponseBody<R> {
    Result(R),
    Error(JsonRpcError),
}

/// A response as we read it from an upstream: either member may be missing or null.
// `default` on a generic field would otherwise make serde require `R: Default`.
#[derive(Debug, Deserialize)]
#[serde(bound(deserialize = "R: Deserialize<'de>"))]
pub struct RawResponse<R> {
    #[serde(default)]
    pub result: Option<R>,
    #[serde(default)]
    pub error: Option<JsonRpcError>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// The error codes of JSON-RPC and A2A 0.2.5 (§1.9).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const TASK_NOT_FOUND: i64 = -32001;
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    pub const PUSH_NOTIFICATION_NOT_SUPPORTED: i64 = -32003;
    pub const UNSUPPORTED_OPERATION: i64 = -32004;
    pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
    pub const INVALID_AGENT_RESPONSE: i64 = -32006;
    /// agent-bridge's own, in the server range clear of A2A's codes: no or a wrong API key (HTTP 401).
    pub const UNAUTHORIZED: i64 = -32050;
    /// agent-bridge's own: over the route's rate limit (HTTP 429).
    pub const RATE_LIMITED: i64 = -32051;
}

// --- Params ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MessageSendParams {
    pub message: Message,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<MessageSendConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// `acceptedOutputModes` is required by the 0.2.5 schema but omitted by real clients: never enforced.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageSendConfiguration {
    #[serde(default, deserialize_with = "null_as_default")]
    pub accepted_output_modes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocking: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_notification_config: Option<Value>,
}

/// `tasks/get` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskQueryParams {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<u64>,
}

/// `tasks/cancel` and `tasks/resubscribe` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskIdParams {
    pub id: String,
}

// --- Messages and parts --------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub kind: MessageKind,
    pub role: MessageRole,
    pub message_id: String,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub reference_task_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// The literal `"message"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageKind {
    Message,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    User,
    Agent,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", try_from = "PartFields")]
pub enum Part {
    Text {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Map<String, Value>>,
    },
    File {
        file: File,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Map<String, Value>>,
    },
    Data {
        data: Map<String, Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Map<String, Value>>,
    },
}

impl Part {
    pub fn text(text: impl Into<String>) -> Self {
        Part::Text {
            text: text.into(),
            metadata: None,
        }
    }
}

/// Every member a [`Part`] may have. Read in one pass, then told apart by `kind`, wherever `kind` stands:
/// serde's own reading of a tagged enum buffers the whole object first. A member of another kind of part
/// must still have its type (as every A2A part's does).
#[derive(Deserialize)]
struct PartFields {
    kind: PartKind,
    text: Option<String>,
    file: Option<File>,
    data: Option<Map<String, Value>>,
    metadata: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum PartKind {
    Text,
    File,
    Data,
}

impl TryFrom<PartFields> for Part {
    type Error = MissingField;

    fn try_from(fields: PartFields) -> Result<Self, MissingField> {
        let PartFields {
            kind,
            text,
            file,
            data,
            metadata,
        } = fields;
        Ok(match kind {
            PartKind::Text => Part::Text {
                text: required(text, "text")?,
                metadata,
            },
            PartKind::File => Part::File {
                file: required(file, "file")?,
                metadata,
            },
            PartKind::Data => Part::Data {
                data: required(data, "data")?,
                metadata,
            },
        })
    }
}

/// `value`, or the error naming the member `name` it came from.
fn required<T>(value: Option<T>, name: &'static str) -> Result<T, MissingField> {
    value.ok_or(MissingField(name))
}

/// A member the variant `kind` names must have, in serde's own words (`rpc` reads them).
#[derive(Debug)]
struct MissingField(&'static str);

impl std::fmt::Display for MissingField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "missing field `{}`", self.0)
    }
}

/// A file by value (`bytes`, base64) or by reference (`uri`); exactly one of the two.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct File {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

// --- Tasks -------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub kind: TaskKind,
    pub id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub artifacts: Vec<Artifact>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub history: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// The literal `"task"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    Task,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStatus {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// ISO-8601; any offset is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    AuthRequired,
    Completed,
    Canceled,
    Failed,
    Rejected,
    Unknown,
}

impl TaskState {
    /// A task in a terminal state cannot be continued or canceled.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Canceled | Self::Failed | Self::Rejected | Self::Unknown
        )
    }

    /// The task waits for the user.
    pub fn is_paused(self) -> bool {
        matches!(self, Self::InputRequired | Self::AuthRequired)
    }

    /// A run of the task goes on (submitted, working).
    pub fn is_running(self) -> bool {
        !self.is_terminal() && !self.is_paused()
    }

    /// The spelling on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submitted => "submitted",
            Self::Working => "working",
            Self::InputRequired => "input-required",
            Self::AuthRequired => "auth-required",
            Self::Completed => "completed",
            Self::Canceled => "canceled",
            Self::Failed => "failed",
            Self::Rejected => "rejected",
            Self::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

// --- Streaming events --------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    pub kind: StatusUpdateKind,
    pub task_id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(rename = "final", default, deserialize_with = "null_as_default")]
    pub is_final: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// The literal `"status-update"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StatusUpdateKind {
    StatusUpdate,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    pub kind: ArtifactUpdateKind,
    pub task_id: String,
    pub context_id: String,
    pub artifact: Artifact,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub append: bool,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub last_chunk: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// The literal `"artifact-update"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArtifactUpdateKind {
    ArtifactUpdate,
}

/// What a `message/send` result or a stream event holds, told apart by `kind`. Written as the variant itself
/// (`untagged` only shapes the writing); read through [`ResultFields`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, try_from = "ResultFields")]
pub enum StreamResult {
    Task(Task),
    Message(Message),
    StatusUpdate(TaskStatusUpdateEvent),
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// Every member a [`StreamResult`] variant may have, read in one pass and then told apart by `kind`. serde's
/// own reading of an untagged enum buffers the object and tries each variant in turn (an artifact chunk, the
/// fourth, cost 9 times an AG-UI event); `kind` cannot be read first, as peers write it anywhere (sorted
/// keys put it after `artifact`). A member of another variant must still have its type: the variants share no
/// member name with different types, so what A2A 0.2.5 allows reads as before.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResultFields {
    kind: ResultKind,
    id: Option<String>,
    task_id: Option<String>,
    context_id: Option<String>,
    status: Option<TaskStatus>,
    #[serde(default, deserialize_with = "null_as_default")]
    artifacts: Vec<Artifact>,
    #[serde(default, deserialize_with = "null_as_default")]
    history: Vec<Message>,
    role: Option<MessageRole>,
    message_id: Option<String>,
    parts: Option<Vec<Part>>,
    #[serde(default, deserialize_with = "null_as_default")]
    reference_task_ids: Vec<String>,
    artifact: Option<Artifact>,
    #[serde(default, deserialize_with = "null_as_default")]
    append: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    last_chunk: bool,
    #[serde(rename = "final", default, deserialize_with = "null_as_default")]
    is_final: bool,
    metadata: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
enum ResultKind {
    Task,
    Message,
    StatusUpdate,
    ArtifactUpdate,
}

impl TryFrom<ResultFields> for StreamResult {
    type Error = MissingField;

    fn try_from(fields: ResultFields) -> Result<Self, MissingField> {
        Ok(match fields.kind {
            ResultKind::Task => StreamResult::Task(Task {
                kind: TaskKind::Task,
                id: required(fields.id, "id")?,
                context_id: required(fields.context_id, "contextId")?,
                status: required(fields.status, "status")?,
                artifacts: fields.artifacts,
                history: fields.history,
                metadata: fields.metadata,
            }),
            ResultKind::Message => StreamResult::Message(Message {
                kind: MessageKind::Message,
                role: required(fields.role, "role")?,
                message_id: required(fields.message_id, "messageId")?,
                parts: required(fields.parts, "parts")?,
                context_id: fields.context_id,
                task_id: fields.task_id,
                reference_task_ids: fields.reference_task_ids,
                metadata: fields.metadata,
            }),
            ResultKind::StatusUpdate => StreamResult::StatusUpdate(TaskStatusUpdateEvent {
                kind: StatusUpdateKind::StatusUpdate,
                task_id: required(fields.task_id, "taskId")?,
                context_id: required(fields.context_id, "contextId")?,
                status: required(fields.status, "status")?,
                is_final: fields.is_final,
                metadata: fields.metadata,
            }),
            ResultKind::ArtifactUpdate => StreamResult::ArtifactUpdate(TaskArtifactUpdateEvent {
                kind: ArtifactUpdateKind::ArtifactUpdate,
                task_id: required(fields.task_id, "taskId")?,
                context_id: required(fields.context_id, "contextId")?,
                artifact: required(fields.artifact, "artifact")?,
                append: fields.append,
                last_chunk: fields.last_chunk,
                metadata: fields.metadata,
            }),
        })
    }
}

// --- Agent card ----------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    pub name: String,
    pub description: String,
    pub url: String,
    pub version: String,
    pub protocol_version: String,
    pub capabilities: AgentCapabilities,
    #[serde(default, deserialize_with = "null_as_default")]
    pub default_input_modes: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub default_output_modes: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub skills: Vec<AgentSkill>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_transport: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_schemes: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<Vec<Value>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_notifications: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_transition_history: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    pub id: String,
    pub name: String,
    pub description: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub tags: Vec<String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub examples: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    #[test]
    fn each_result_is_told_by_its_kind_wherever_kind_stands() {
        let message = json!({"role": "agent", "parts": [{"text": "hi", "kind": "text"}],
            "messageId": "m1", "taskId": "t1", "kind": "message"});
        let results = [
            json!({"id": "t1", "contextId": "c1", "status": {"state": "working"},
                "history": [message], "kind": "task"}),
            message.clone(),
            json!({"taskId": "t1", "contextId": "c1", "final": true, "kind": "status-update",
                "status": {"state": "input-required", "message": message}}),
            json!({"append": true, "artifact": {"artifactId": "a1", "parts": [
                    {"data": {"n": 1}, "kind": "data"},
                    {"file": {"uri": "https://example.com/f"}, "kind": "file"}]},
                "contextId": "c1", "kind": "artifact-update", "lastChunk": null, "taskId": "t1"}),
        ];
        let kinds: Vec<_> = results
            .into_iter()
            .map(|value| {
                let result: StreamResult = read(value.clone()).unwrap();
                // What is read is what was sent (`null` read as absent).
                let mut sent = value;
                sent.as_object_mut().unwrap().remove("lastChunk");
                assert_eq!(serde_json::to_value(&result).unwrap(), sent);
                std::mem::discriminant(&result)
            })
            .collect();
        let distinct: std::collections::HashSet<_> = kinds.iter().collect();
        assert_eq!(distinct.len(), 4, "four variants");
    }

    #[test]
    fn a_result_or_part_without_a_member_its_kind_needs_names_it() {
        let update = json!({"kind": "artifact-update", "taskId": "t1", "contextId": "c1"});
        assert_eq!(
            read::<StreamResult>(update).unwrap_err(),
            "missing field `artifact`"
        );
        let task = json!({"kind": "task", "id": "t1", "status": {"state": "working"}});
        assert_eq!(
            read::<StreamResult>(task).unwrap_err(),
            "missing field `contextId`"
        );
        assert_eq!(
            read::<Part>(json!({"kind": "text", "data": {}})).unwrap_err(),
            "missing field `text`"
        );
        let unknown = read::<StreamResult>(json!({"kind": "note", "taskId": "t1"})).unwrap_err();
        assert!(unknown.starts_with("unknown variant `note`"), "{unknown}");
        let untold = read::<Part>(json!({"text": "hi"})).unwrap_err();
        assert_eq!(untold, "missing field `kind`");
    }
}
