//! The CMDC gateway wire, spelled as the gateway reference (seed `003`) and cmdc-sdk 0.1.0 spell it
//! (`specs/cmdc.md` §1–2). One set of types serves both faces.

use bytes::BytesMut;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::json::null_as_default;
use crate::sse;

/// `POST /v1/sessions`. Only `model` is required; the kernel's own fields (`tools`, `plugins`, `blueprint`,
/// `skillsDirs`, `workingDir`, `providerOpts`) are kept as they came, for an inbound to log and ignore.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSession {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(flatten)]
    pub kernel: Map<String, Value>,
}

/// `201 {"sessionId","status":"created"}`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCreated {
    pub session_id: String,
    #[serde(default)]
    pub status: String,
}

/// `GET /v1/sessions/:id` (the stats add to it).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session_id: String,
    /// `idle`, `working`, `waiting_approval` or `waiting_input`.
    pub state: String,
    #[serde(default)]
    pub turns: u64,
    #[serde(default)]
    pub tool_calls: u64,
    #[serde(default)]
    pub total_tokens: u64,
    #[serde(default)]
    pub uptime_ms: u64,
}

/// `POST …/prompt {"text"}` (`prompt` is an alias).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Prompt {
    #[serde(default, alias = "prompt", skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// `202 {"requestId","sessionId","queued"}`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptAccepted {
    pub request_id: String,
    pub session_id: String,
    #[serde(default)]
    pub queued: bool,
}

/// `POST …/approve` and `…/reject`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

/// `POST …/respond`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Answer {
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
}

/// `POST …/tools`: a callback tool the gateway calls over HTTP.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallbackTool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub callback_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// What the gateway POSTs to a callback tool's `callbackUrl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallback {
    pub call_id: String,
    pub tool_name: String,
    #[serde(default)]
    pub args: Value,
    #[serde(default)]
    pub session_id: String,
}

/// The callback's answer: `{"result"}` or `{"error"}` (a business error the agent sees).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallbackAnswer {
    Result(String),
    Error(String),
}

/// Every error body: `{"error": "<code>", "message": "<text>"}` (`retryAfter` on 429).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    pub error: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

/// `tokenUsage` of `agent_end` (and of the stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    #[serde(default, deserialize_with = "null_as_default")]
    pub prompt_tokens: u64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub completion_tokens: u64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub total_tokens: u64,
}

/// `lastMessage` of `agent_end`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastMessage {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub role: String,
}

/// One event of a run: the SSE `event:` name and its `data`, or a WebSocket `{event, data}` frame. The
/// names are the gateway's 15 public events (§2); unknown ones (later gateways add some) are kept by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", content = "data", rename_all = "snake_case")]
pub enum Event {
    PromptReceived {
        #[serde(default)]
        text: String,
    },
    AgentStart {},
    MessageStart {},
    MessageDelta {
        #[serde(default)]
        delta: String,
    },
    ThinkingStart {},
    ThinkingDelta {
        #[serde(default)]
        delta: String,
    },
    ToolCalls {
        #[serde(default)]
        count: u64,
    },
    #[serde(rename_all = "camelCase")]
    ToolExecutionStart {
        #[serde(default)]
        tool_name: String,
        #[serde(default)]
        call_id: String,
        #[serde(default)]
        args: Value,
    },
    #[serde(rename_all = "camelCase")]
    ToolExecutionEnd {
        #[serde(default)]
        tool_name: String,
        #[serde(default)]
        call_id: String,
        #[serde(default)]
        status: String,
        #[serde(default)]
        result: Value,
    },
    #[serde(rename_all = "camelCase")]
    ApprovalRequired {
        approval_id: String,
        #[serde(default)]
        tool_name: String,
        #[serde(default)]
        args: Value,
        #[serde(default, deserialize_with = "null_as_default")]
        hint: String,
        #[serde(default)]
        requested_at: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ApprovalResolved {
        approval_id: String,
        #[serde(default)]
        status: String,
    },
    AskUser {
        #[serde(rename = "ref")]
        reference: String,
        #[serde(default)]
        question: String,
        #[serde(default)]
        options: Option<Vec<String>>,
    },
    Error {
        #[serde(default)]
        reason: String,
    },
    #[serde(rename_all = "camelCase")]
    AgentEnd {
        #[serde(default)]
        message_count: u64,
        #[serde(default)]
        last_message: Option<LastMessage>,
        #[serde(default)]
        token_usage: Option<TokenUsage>,
    },
    AgentAbort {
        #[serde(default)]
        reason: String,
    },
}

impl Event {
    /// The event name, as the SSE `event:` line and the WebSocket `event` field spell it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::PromptReceived { .. } => "prompt_received",
            Self::AgentStart {} => "agent_start",
            Self::MessageStart {} => "message_start",
            Self::MessageDelta { .. } => "message_delta",
            Self::ThinkingStart {} => "thinking_start",
            Self::ThinkingDelta { .. } => "thinking_delta",
            Self::ToolCalls { .. } => "tool_calls",
            Self::ToolExecutionStart { .. } => "tool_execution_start",
            Self::ToolExecutionEnd { .. } => "tool_execution_end",
            Self::ApprovalRequired { .. } => "approval_required",
            Self::ApprovalResolved { .. } => "approval_resolved",
            Self::AskUser { .. } => "ask_user",
            Self::Error { .. } => "error",
            Self::AgentEnd { .. } => "agent_end",
            Self::AgentAbort { .. } => "agent_abort",
        }
    }

    /// Whether the run ends with this event (the gateway closes the SSE stream after it).
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::AgentEnd { .. } | Self::AgentAbort { .. })
    }

    /// Reads one SSE frame: the `event:` name and the `data` (`{}` when empty). `None` for an event this
    /// proxy does not know (later gateways add some).
    pub fn from_sse(name: &str, data: &str) -> Result<Option<Self>, serde_json::Error> {
        let data = match data.trim() {
            "" => "{}",
            data => data,
        };
        // The frame as the WebSocket spells it, parsed once: no intermediate `Value`.
        let name_json = serde_json::to_string(name)?;
        let framed = format!("{{\"event\":{name_json},\"data\":{data}}}");
        match serde_json::from_str(&framed) {
            Ok(event) => Ok(Some(event)),
            Err(_) if !KNOWN.contains(&name) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The WebSocket frame `{"event": …, "data": {…}}`.
    pub fn to_frame(&self) -> String {
        // Serializing our own wire types cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Appends the event as an SSE frame: `event: <name>\ndata: <data>\n\n`.
    pub fn write_sse(&self, buf: &mut BytesMut) {
        sse::write_event(buf, Some(self.name()), &self.data_json());
    }

    /// The `data` object alone, as an SSE frame carries it: the frame without its envelope (serde writes the
    /// tag first, then the content).
    pub fn data_json(&self) -> String {
        let frame = self.to_frame();
        let envelope = format!("{{\"event\":\"{}\",\"data\":", self.name());
        match frame
            .strip_prefix(&envelope)
            .and_then(|rest| rest.strip_suffix('}'))
        {
            Some(data) => data.to_owned(),
            None => "{}".to_owned(),
        }
    }
}

const KNOWN: &[&str] = &[
    "prompt_received",
    "agent_start",
    "message_start",
    "message_delta",
    "thinking_start",
    "thinking_delta",
    "tool_calls",
    "tool_execution_start",
    "tool_execution_end",
    "approval_required",
    "approval_resolved",
    "ask_user",
    "error",
    "agent_end",
    "agent_abort",
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sse_frames_read_by_name_with_empty_data_as_an_empty_object() {
        assert_eq!(
            Event::from_sse("agent_start", "").unwrap(),
            Some(Event::AgentStart {})
        );
        assert_eq!(
            Event::from_sse("message_delta", r#"{"delta":"Hi"}"#).unwrap(),
            Some(Event::MessageDelta { delta: "Hi".into() })
        );
        assert_eq!(
            Event::from_sse("model_switched", r#"{"to":"x"}"#).unwrap(),
            None
        );
        assert!(Event::from_sse("ask_user", r#"{"question":"no ref"}"#).is_err());
    }

    #[test]
    fn data_is_the_frame_without_its_envelope() {
        let event = Event::AskUser {
            reference: "ask_1".into(),
            question: "Which?".into(),
            options: None,
        };
        assert_eq!(
            event.to_frame(),
            r#"{"event":"ask_user","data":{"ref":"ask_1","question":"Which?","options":null}}"#
        );
        assert_eq!(
            event.data_json(),
            r#"{"ref":"ask_1","question":"Which?","options":null}"#
        );
        assert_eq!(Event::AgentStart {}.data_json(), "{}");
        let end: Value = serde_json::from_str(
            &Event::AgentEnd {
                message_count: 2,
                last_message: None,
                token_usage: Some(TokenUsage::default()),
            }
            .data_json(),
        )
        .unwrap();
        assert_eq!(
            end["tokenUsage"],
            json!({"promptTokens": 0, "completionTokens": 0, "totalTokens": 0})
        );
    }
}
