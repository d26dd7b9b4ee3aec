//! The hub: the canonical model every protocol decodes into and encodes from.
//!
//! A [`Turn`] is what one inbound request asks the agent to do; an [`Event`] is one thing the agent did, in
//! stream order. Each protocol module translates between its wire and these types, and nothing else.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::answers::AnswerWords;
use crate::error::Error;

/// What one inbound request asks the agent to do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    /// The inbound's conversation key (AG-UI threadId, A2A contextId, ...).
    pub conversation: String,
    /// Who the conversation belongs to, for inbounds that authenticate their clients (a CMDC API key's
    /// tenant); empty otherwise. Conversation records are kept per (route, tenant, conversation).
    pub tenant: String,
    /// The inbound's id for this run.
    pub run_id: String,
    pub messages: Vec<Message>,
    /// Whether `messages` is the whole conversation or only what is new.
    pub history: History,
    /// Tools the client executes itself.
    pub tools: Vec<Tool>,
    pub context: Vec<ContextItem>,
    pub state: Option<Value>,
    pub options: GenerationOptions,
    /// Answers to interrupts of an earlier run.
    pub resume: Vec<Resume>,
    /// Pass-through metadata (e.g. AG-UI `forwardedProps`).
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum History {
    /// Every message of the conversation, every turn (AG-UI, AgentScope).
    #[default]
    Full,
    /// Only the messages that are new since the last turn (A2A, AG-Kit, CMDC).
    Delta,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextItem {
    pub description: String,
    pub value: String,
}

/// A tool the client offers, described by a JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
}

pub fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub id: String,
    pub role: Role,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Part>,
    /// Calls an assistant message made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A tool message that reports a failure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    pub fn new(id: impl Into<String>, role: Role, content: Vec<Part>) -> Self {
        Self {
            id: id.into(),
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            is_error: false,
            name: None,
        }
    }

    pub fn text_message(id: impl Into<String>, role: Role, text: impl Into<String>) -> Self {
        Self::new(id, role, vec![Part::Text(text.into())])
    }

    /// The concatenated text parts.
    pub fn text(&self) -> String {
        parts_text(&self.content)
    }
}

/// The concatenated text of some parts.
pub fn parts_text(parts: &[Part]) -> String {
    let mut text = String::new();
    for part in parts {
        if let Part::Text(t) = part {
            text.push_str(t);
        }
    }
    text
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// A piece of message content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Part {
    Text(String),
    Media(Media),
    /// Structured data.
    Data(Value),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Media {
    pub kind: MediaKind,
    pub source: MediaSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaKind {
    Image,
    Audio,
    Video,
    Document,
}

impl MediaKind {
    /// The kind a MIME type suggests; documents when it says nothing better.
    pub fn from_mime(mime: &str) -> Self {
        match mime.split('/').next() {
            Some("image") => Self::Image,
            Some("audio") => Self::Audio,
            Some("video") => Self::Video,
            _ => Self::Document,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum MediaSource {
    Url(String),
    /// Base64 data.
    Data(String),
    /// A provider's file id.
    File {
        id: String,
        provider: Option<String>,
    },
}

/// An answer to an interrupt of an earlier run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    pub interrupt_id: String,
    pub status: ResumeStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

impl Resume {
    /// What a resume entry says about an approval: `(approve, reason)`.
    ///
    /// - status `cancelled` → not approved;
    /// - no payload (or `null`) → approved: resolving an approval without saying more is taken as consent;
    /// - `true` / `false`; a number (non-zero approves);
    /// - a string: read by the rule of [`crate::answers`] with the built-in words; a rejection or an unclear
    ///   answer refuses, and unclear text is passed on as the `reason` (the hub reads free text with the
    ///   route's words first, and asks again when it is unclear);
    /// - an object: the first boolean of `approved`, `approve`, `accepted`, `confirmed`, else the first string of
    ///   `status`, `decision`, `answer` read as above; `reason` (or `message`, `comment`) becomes the reason. An
    ///   object that says none of this refuses.
    ///
    /// Anything unclear refuses: an unintended approval can run a tool the user did not agree to.
    pub fn approval(&self) -> (bool, Option<String>) {
        if self.status == ResumeStatus::Cancelled {
            return (false, None);
        }
        match self.payload.as_ref().unwrap_or(&Value::Null) {
            Value::Null => (true, None),
            Value::Bool(approve) => (*approve, None),
            Value::Number(n) => (n.as_f64().is_some_and(|n| n != 0.0), None),
            Value::String(text) => match word_answer(text) {
                Some(approve) => (approve, None),
                None => (false, Some(text.clone())),
            },
            Value::Object(map) => {
                let reason = ["reason", "message", "comment"]
                    .iter()
                    .find_map(|key| map.get(*key).and_then(Value::as_str))
                    .map(str::to_owned);
                let flag = ["approved", "approve", "accepted", "confirmed"]
                    .iter()
                    .find_map(|key| map.get(*key).and_then(Value::as_bool));
                let word = ["status", "decision", "answer"]
                    .iter()
                    .find_map(|key| map.get(*key).and_then(Value::as_str))
                    .and_then(word_answer);
                (flag.or(word).unwrap_or(false), reason)
            }
            Value::Array(_) => (false, None),
        }
    }
}

fn word_answer(text: &str) -> Option<bool> {
    AnswerWords::default().approves(text)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// The tool a question pause is called as, where a protocol pauses with a tool call, when the route's
/// `question_tool` names none.
pub const QUESTION_TOOL: &str = "ask_user";

/// The agent paused and waits for the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    pub id: String,
    pub kind: InterruptKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InterruptKind {
    /// Approve or reject a tool call.
    Approval {
        tool: String,
        args: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hint: Option<String>,
    },
    /// A question, optionally with choices.
    Question {
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        options: Vec<String>,
    },
    /// Free input is needed to go on.
    InputRequired { text: String },
    /// A pause only the upstream's own protocol describes (an AG-Kit `interrupt` with a reason of its own):
    /// its reason and payload as the upstream gave them, passed through to an inbound that carries them and
    /// shown as a question elsewhere.
    Custom { reason: String, payload: Value },
}

impl InterruptKind {
    /// The text a person reads, as a question: the hint, the question, the question a custom pause's payload
    /// carries, or a sentence built from the tool and its arguments. Programs get the raw reason and payload
    /// beside it (an A2A data part, AG-Kit's own `interrupt`).
    pub fn prompt(&self) -> String {
        match self {
            Self::Approval {
                hint: Some(hint), ..
            } => hint.clone(),
            Self::Approval { tool, args, .. } => approval_question(tool, args),
            Self::Question { text, .. } | Self::InputRequired { text } => text.clone(),
            Self::Custom { reason, payload } => match payload_question(payload) {
                Some(question) => question.to_owned(),
                None if payload.is_null() => reason.clone(),
                None => format!("{reason}: {payload}"),
            },
        }
    }
}

/// "Approve `delete_temp_files` with {"path":"/tmp"}? Answer yes or no."
fn approval_question(tool: &str, args: &Value) -> String {
    let empty = args.is_null() || args.as_object().is_some_and(Map::is_empty);
    if empty {
        format!("Approve `{tool}`? Answer yes or no.")
    } else {
        format!("Approve `{tool}` with {args}? Answer yes or no.")
    }
}

/// The question a pause's payload spells out for a person, if any.
fn payload_question(payload: &Value) -> Option<&str> {
    ["question", "message", "prompt", "text"]
        .iter()
        .find_map(|key| payload.get(*key)?.as_str())
        .filter(|text| !text.trim().is_empty())
}

/// How a run ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Outcome {
    #[default]
    Completed,
    /// Paused on one or more interrupts.
    Interrupted,
    Cancelled,
}

/// Token counts, as far as the upstream reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
}

/// One thing the agent did, in stream order.
///
/// Decoders may produce loose streams (deltas without a start, ids left empty, nothing closed);
/// `normalize` makes every stream well formed before an encoder sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    RunStarted,
    RunFinished {
        outcome: Outcome,
        usage: Option<Usage>,
    },
    RunError(Error),

    TextStart {
        message_id: String,
        role: Role,
    },
    TextDelta {
        message_id: String,
        delta: String,
    },
    TextEnd {
        message_id: String,
    },

    ReasoningStart {
        message_id: String,
    },
    ReasoningDelta {
        message_id: String,
        delta: String,
    },
    ReasoningEnd {
        message_id: String,
    },

    ToolCallStart {
        call_id: String,
        name: String,
        parent_message_id: Option<String>,
    },
    ToolCallArgs {
        call_id: String,
        delta: String,
    },
    ToolCallEnd {
        call_id: String,
    },
    ToolResult {
        call_id: String,
        message_id: String,
        content: String,
        is_error: bool,
    },

    StateSnapshot(Value),
    /// An RFC 6902 JSON Patch (an array of operations).
    StateDelta(Value),
    MessagesSnapshot(Vec<Message>),
    StepStarted {
        name: String,
    },
    StepFinished {
        name: String,
    },

    Interrupt(Interrupt),
    /// An output that is not chat text.
    Artifact(Artifact),
    Usage(Usage),
    /// Something with no canonical form, under a name.
    Custom {
        name: String,
        value: Value,
    },
    /// The upstream's original event, when nothing else fits.
    Raw {
        source: Option<String>,
        event: Value,
    },
}

/// Families of [`Event::KINDS`], as the protocols' rows name the events their clients are not shown.
pub mod kinds {
    pub const REASONING: &[&str] = &["reasoning_start", "reasoning_delta", "reasoning_end"];
    pub const TOOL_CALLS: &[&str] = &[
        "tool_call_start",
        "tool_call_args",
        "tool_call_end",
        "tool_result",
    ];
    /// State, messages snapshots and steps.
    pub const STATE_AND_STEPS: &[&str] = &[
        "state_snapshot",
        "state_delta",
        "messages_snapshot",
        "step_started",
        "step_finished",
    ];
    pub const ARTIFACT: &[&str] = &["artifact"];
    pub const USAGE: &[&str] = &["usage"];
    pub const CUSTOM_AND_RAW: &[&str] = &["custom", "raw"];
}

impl Event {
    /// Every kind of event, as metrics name them; [`Event::kind`] indexes it.
    pub const KINDS: [&'static str; 23] = [
        "run_started",
        "run_finished",
        "run_error",
        "text_start",
        "text_delta",
        "text_end",
        "reasoning_start",
        "reasoning_delta",
        "reasoning_end",
        "tool_call_start",
        "tool_call_args",
        "tool_call_end",
        "tool_result",
        "state_snapshot",
        "state_delta",
        "messages_snapshot",
        "step_started",
        "step_finished",
        "interrupt",
        "artifact",
        "usage",
        "custom",
        "raw",
    ];

    /// Whether this event ends the run.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::RunFinished { .. } | Self::RunError(_))
    }

    /// The event's kind: its index in [`Event::KINDS`].
    pub fn kind(&self) -> usize {
        match self {
            Self::RunStarted => 0,
            Self::RunFinished { .. } => 1,
            Self::RunError(_) => 2,
            Self::TextStart { .. } => 3,
            Self::TextDelta { .. } => 4,
            Self::TextEnd { .. } => 5,
            Self::ReasoningStart { .. } => 6,
            Self::ReasoningDelta { .. } => 7,
            Self::ReasoningEnd { .. } => 8,
            Self::ToolCallStart { .. } => 9,
            Self::ToolCallArgs { .. } => 10,
            Self::ToolCallEnd { .. } => 11,
            Self::ToolResult { .. } => 12,
            Self::StateSnapshot(_) => 13,
            Self::StateDelta(_) => 14,
            Self::MessagesSnapshot(_) => 15,
            Self::StepStarted { .. } => 16,
            Self::StepFinished { .. } => 17,
            Self::Interrupt(_) => 18,
            Self::Artifact(_) => 19,
            Self::Usage(_) => 20,
            Self::Custom { .. } => 21,
            Self::Raw { .. } => 22,
        }
    }
}

/// How many events of each kind ([`Event::KINDS`]) a run passed: counted per event without a lock or an
/// atomic, and added to the metrics once, when the run ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventCounts([u64; Event::KINDS.len()]);

impl EventCounts {
    pub fn count(&mut self, event: &Event) {
        self.count_kind(event.kind());
    }

    /// Counts one event of kind `kind` (its [`Event::kind`]).
    pub fn count_kind(&mut self, kind: usize) {
        self.0[kind] += 1;
    }

    /// Every event counted.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Each kind counted at least once, and how many.
    pub fn counted(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Event::KINDS
            .iter()
            .zip(self.0)
            .filter(|(_, count)| *count > 0)
            .map(|(kind, count)| (*kind, count))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub id: String,
    pub name: Option<String>,
    pub parts: Vec<Part>,
    /// Adds to an earlier chunk of the same artifact instead of replacing it.
    pub append: bool,
    pub last_chunk: bool,
}

/// A fresh unique id with a readable prefix (`msg_…`, `call_…`).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_hex())
}

/// 128 random bits as 32 hex digits. On an open route the ids the proxy mints are bearer capabilities:
/// whoever knows one may use it, so none may be guessable.
pub fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // The system's randomness is not expected to fail; uuid reads it the same way (122 random bits).
        bytes = uuid::Uuid::new_v4().into_bytes();
    }
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn minted_ids_carry_128_random_bits() {
        let (a, b) = (random_hex(), random_hex());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert!(new_id("msg").starts_with("msg_"));
    }

    fn resume(status: ResumeStatus, payload: Option<Value>) -> Resume {
        Resume {
            interrupt_id: "apr_1".into(),
            status,
            payload,
        }
    }

    #[test]
    fn approval_answers_read_booleans_words_and_objects() {
        use ResumeStatus::{Cancelled, Resolved};
        let cases = [
            (resume(Resolved, None), (true, None)),
            (resume(Resolved, Some(json!(true))), (true, None)),
            (resume(Resolved, Some(json!(false))), (false, None)),
            (resume(Resolved, Some(json!("Yes"))), (true, None)),
            (resume(Resolved, Some(json!(" no "))), (false, None)),
            (
                resume(Resolved, Some(json!("only on Fridays"))),
                (false, Some("only on Fridays".to_owned())),
            ),
            (
                resume(Resolved, Some(json!({"approved": true, "reason": "fine"}))),
                (true, Some("fine".to_owned())),
            ),
            (
                resume(Resolved, Some(json!({"status": "rejected"}))),
                (false, None),
            ),
            (
                resume(Resolved, Some(json!({"something": 1}))),
                (false, None),
            ),
            (resume(Resolved, Some(json!(1))), (true, None)),
            (resume(Cancelled, Some(json!(true))), (false, None)),
        ];
        for (resume, expected) in cases {
            assert_eq!(resume.approval(), expected, "{resume:?}");
        }
    }
}
