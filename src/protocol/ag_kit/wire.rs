//! The AG-Kit send-message v0 wire, spelled as `@cloudbase/agent-ui-web` 0.0.24's `useChat` sends and reads
//! it (`specs/ag-kit.md` §1–2).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::null_as_default;

/// One request: a turn (`messages`, only what is new) or the answer to an interrupt (`resume`).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tools: Vec<Tool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Resume>,
}

/// `{role, content}`, and `toolCallId` on a tool message. No ids: the server keeps the history.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub role: Role,
    #[serde(default, deserialize_with = "null_as_default")]
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    System,
    Assistant,
    Tool,
}

/// A client tool. `parameters` is a JSON Schema serialized to a **string** (`JSON.stringify`); an object is
/// accepted too.
#[derive(Debug, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
}

/// `resume {interruptId, payload}`; `payload` is JSON text (`JSON.stringify(answer)`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resume {
    pub interrupt_id: String,
    #[serde(default)]
    pub payload: Value,
}

/// One `data:` frame of the response (`[DONE]` is not JSON and is written or read as it is).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Event<'a> {
    Text {
        #[serde(borrow)]
        content: Cow<'a, str>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallStart {
        #[serde(borrow)]
        tool_call_id: Cow<'a, str>,
        #[serde(borrow)]
        tool_call_name: Cow<'a, str>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallArgs {
        #[serde(borrow)]
        tool_call_id: Cow<'a, str>,
        #[serde(borrow, default)]
        delta: Cow<'a, str>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallEnd {
        #[serde(borrow)]
        tool_call_id: Cow<'a, str>,
    },
    /// A server-side tool's result. We write a string; peers may send any JSON.
    #[serde(rename_all = "camelCase")]
    ToolResult {
        #[serde(borrow)]
        tool_call_id: Cow<'a, str>,
        #[serde(default)]
        result: Value,
    },
    Interrupt {
        id: String,
        #[serde(default)]
        reason: String,
        #[serde(default)]
        payload: Value,
    },
    /// Our in-stream error (the spec note's choice: v0 defines none).
    Error {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
        #[serde(default)]
        message: String,
    },
    /// First-generation CloudBase AI Bot reasoning on the same path; read, never written.
    Thinking {
        #[serde(borrow, default)]
        content: Cow<'a, str>,
    },
    #[serde(other)]
    Unknown,
}

/// The end of a response stream.
pub const DONE: &str = "[DONE]";
