//! The `[routes.translate]` options of AgentScope's two faces.

use serde::Deserialize;

use crate::config::non_empty;
use crate::face::FaceOptions;
use crate::model::QUESTION_TOOL;

/// What an AgentScope inbound reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct InboundOptions {
    /// The tool a question pause is shown as (an `mcp_approval_request` of it), and whose answer resumes it.
    #[serde(deserialize_with = "non_empty")]
    pub question_tool: String,
    /// The client sends only its new messages and relies on `session_id` for memory (as the shipped client's
    /// `create_simple_text_request` does); the proxy keeps the session's history. Default: `input` is the
    /// whole conversation.
    pub agentscope_session_memory: bool,
}

impl Default for InboundOptions {
    fn default() -> Self {
        InboundOptions {
            question_tool: QUESTION_TOOL.to_owned(),
            agentscope_session_memory: false,
        }
    }
}

impl FaceOptions for InboundOptions {}

/// What an AgentScope outbound reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct OutboundOptions {
    /// The model the request names, for agents that take one.
    pub model: Option<String>,
}

impl FaceOptions for OutboundOptions {}
