//! AG-UI on the wire, spelled exactly as the protocol spells it (camelCase fields, SCREAMING_SNAKE_CASE
//! event types). See `specs/ag-ui.md` §1–2.
//!
//! One set of types serves both directions. Strings are `Cow` so encoding borrows from the canonical
//! events and decoding borrows from the frame where it can. `null` is read as absent everywhere; absent
//! optionals are never written.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::json::null_as_default;
use serde_json::Value;

/// The body of a run request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    pub thread_id: String,
    pub run_id: String,
    pub messages: Vec<Message>,
    // Always written: servers on ≤0.0.59 schemas reject a body without them.
    #[serde(default, deserialize_with = "null_as_default")]
    pub tools: Vec<Tool>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub context: Vec<Context>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_props: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resume: Vec<ResumeEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Context {
    pub description: String,
    pub value: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeEntry {
    pub interrupt_id: String,
    pub status: ResumeStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// A message, discriminated by `role`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    Developer(PlainMessage),
    System(PlainMessage),
    User(UserMessage),
    Assistant(AssistantMessage),
    Tool(ToolMessage),
    /// UI-only messages (1.0); never sent to an agent.
    Activity(IgnoredMessage),
    /// Reasoning the agent showed (1.0); never sent back to an agent.
    Reasoning(IgnoredMessage),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlainMessage {
    pub id: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserMessage {
    pub id: String,
    pub content: Content,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssistantMessage {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolMessage {
    pub id: String,
    pub content: Content,
    pub tool_call_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IgnoredMessage {
    pub id: String,
}

/// `ToolCall` = `{"id", "type":"function", "function":{"name", "arguments"}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_owned()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// JSON text.
    #[serde(default, deserialize_with = "null_as_default")]
    pub arguments: String,
}

/// Message content: a string, or parts.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ContentPart {
    Text {
        text: String,
    },
    Image(SourcePart),
    Audio(SourcePart),
    Video(SourcePart),
    Document(SourcePart),
    /// The pre-1.0 part (seed document).
    #[serde(rename_all = "camelCase")]
    Binary {
        mime_type: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourcePart {
    pub source: Source,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Source {
    #[serde(rename_all = "camelCase")]
    Data {
        value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Url {
        value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    File {
        value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
}

/// One event of a run's stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "SCREAMING_SNAKE_CASE",
    rename_all_fields = "camelCase"
)]
pub enum Event<'a> {
    RunStarted {
        #[serde(borrow)]
        thread_id: Cow<'a, str>,
        #[serde(borrow)]
        run_id: Cow<'a, str>,
    },
    RunFinished {
        #[serde(borrow)]
        thread_id: Cow<'a, str>,
        #[serde(borrow)]
        run_id: Cow<'a, str>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<RunOutcome>,
    },
    RunError {
        #[serde(borrow)]
        message: Cow<'a, str>,
        #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
        code: Option<Cow<'a, str>>,
    },
    StepStarted {
        #[serde(borrow)]
        step_name: Cow<'a, str>,
    },
    StepFinished {
        #[serde(borrow)]
        step_name: Cow<'a, str>,
    },
    TextMessageStart {
        #[serde(borrow)]
        message_id: Cow<'a, str>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<TextRole>,
    },
    TextMessageContent {
        #[serde(borrow)]
        message_id: Cow<'a, str>,
        #[serde(borrow)]
        delta: Cow<'a, str>,
    },
    TextMessageEnd {
        #[serde(borrow)]
        message_id: Cow<'a, str>,
    },
    TextMessageChunk {
        #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
        message_id: Option<Cow<'a, str>>,
        #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
        delta: Option<Cow<'a, str>>,
    },
    ToolCallStart {
        #[serde(borrow)]
        tool_call_id: Cow<'a, str>,
        #[serde(borrow)]
        tool_call_name: Cow<'a, str>,
        #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<Cow<'a, str>>,
    },
    ToolCallArgs {
        #[serde(borrow)]
        tool_call_id: Cow<'a, str>,
        #[serde(borrow)]
        delta: Cow<'a, str>,
    },
    ToolCallEnd {
        #[serde(borrow)]
        tool_call_id: Cow<'a, str>,
    },
    ToolCallChunk {
        #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
        tool_call_id: Option<Cow<'a, str>>,
        #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
        tool_call_name: Option<Cow<'a, str>>,
        #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<Cow<'a, str>>,
        #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
        delta: Option<Cow<'a, str>>,
    },
    ToolCallResult {
        #[serde(borrow)]
        message_id: Cow<'a, str>,
        #[serde(borrow)]
        tool_call_id: Cow<'a, str>,
        content: ToolResultContent<'a>,
    },
    StateSnapshot {
        snapshot: Value,
    },
    StateDelta {
        delta: Value,
    },
    MessagesSnapshot {
        messages: Vec<Message>,
    },
    Raw {
        event: Value,
        #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
        source: Option<Cow<'a, str>>,
    },
    Custom {
        #[serde(borrow)]
        name: Cow<'a, str>,
        value: Value,
    },
    ReasoningStart {
        #[serde(borrow)]
        message_id: Cow<'a, str>,
    },
    ReasoningEnd {
        #[serde(borrow)]
        message_id: Cow<'a, str>,
    },
    ReasoningMessageStart {
        #[serde(borrow)]
        message_id: Cow<'a, str>,
        role: ReasoningRole,
    },
    ReasoningMessageContent {
        #[serde(borrow)]
        message_id: Cow<'a, str>,
        #[serde(borrow)]
        delta: Cow<'a, str>,
    },
    ReasoningMessageEnd {
        #[serde(borrow)]
        message_id: Cow<'a, str>,
    },
    ReasoningMessageChunk {
        #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
        message_id: Option<Cow<'a, str>>,
        #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
        delta: Option<Cow<'a, str>>,
    },
    /// Pre-1.0 servers' reasoning events.
    ThinkingStart,
    ThinkingEnd,
    ThinkingTextMessageStart,
    ThinkingTextMessageContent {
        #[serde(borrow)]
        delta: Cow<'a, str>,
    },
    ThinkingTextMessageEnd,
    /// Any type this proxy does not translate (activity, subagents, vendor types).
    #[serde(other)]
    Unknown,
}

/// `TEXT_MESSAGE_START.role`: absent means assistant; `tool` is not allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextRole {
    Developer,
    System,
    Assistant,
    User,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningRole {
    Reasoning,
}

/// A tool result: a string (what we always write), or parts (1.0 servers).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolResultContent<'a> {
    #[serde(borrow)]
    Text(Cow<'a, str>),
    Parts(Vec<Value>),
}

/// `RUN_FINISHED.outcome`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RunOutcome {
    Success,
    Interrupt { interrupts: Vec<Interrupt> },
    Cancelled,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interrupt {
    pub id: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
}

/// Token counts, as AG-UI 1.0 spells them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
}
