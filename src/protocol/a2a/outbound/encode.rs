//! The request: a turn as the JSON-RPC call that carries what the agent has not seen.

use bytes::Bytes;
use serde::Serialize;
use tracing::{debug, info};

use crate::error::{Error, Result};
use crate::model::{new_id, Message, Resume, ResumeStatus, Role, Turn};
use crate::protocol::a2a::{part_to_wire, wire};

use super::Conversation;

/// What a turn sends upstream.
#[derive(Debug, PartialEq)]
pub(super) struct Outgoing {
    /// A paused task to cancel first: the client declined its question.
    pub(super) cancel: Option<String>,
    /// The message to send; `None` when, after declining, there is nothing else to say.
    pub(super) message: Option<wire::Message>,
}

/// The turn as one A2A message: the answers to the paused task's question (if any) and the new messages
/// (`turn.messages` is what the agent has not seen), in the conversation's `contextId`, continuing the paused
/// task when there is one.
pub(super) fn outgoing(turn: &Turn, conversation: &Conversation) -> Result<Outgoing> {
    let context_id = conversation.context_id.clone();
    let paused = conversation.task_id.clone();
    let interrupt_id = conversation.interrupt_id.as_ref();
    let (answers, stale): (Vec<&Resume>, Vec<&Resume>) = turn
        .resume
        .iter()
        .partition(|r| interrupt_id.is_none_or(|id| r.interrupt_id == *id));
    if !stale.is_empty() {
        debug!(
            count = stale.len(),
            "resume entries for interrupts this A2A conversation is not waiting on; ignored"
        );
    }
    let mut parts = Vec::new();
    let mut cancel = None;
    let mut task_id = None;
    match paused {
        Some(task)
            if !answers.is_empty()
                && answers.iter().all(|r| r.status == ResumeStatus::Cancelled) =>
        {
            cancel = Some(task);
        }
        Some(task) => {
            task_id = Some(task);
            parts.extend(
                answers
                    .iter()
                    .filter(|r| r.status == ResumeStatus::Resolved)
                    .map(|r| wire::Part::text(answer_text(r.payload.as_ref()))),
            );
        }
        None if !answers.is_empty() => {
            debug!("resume entries but no A2A task is waiting for input; ignored");
        }
        None => {}
    }
    for message in &turn.messages {
        message_parts(message, &mut parts);
    }
    parts.retain(|part| !matches!(part, wire::Part::Text { text, .. } if text.is_empty()));
    if parts.is_empty() {
        if cancel.is_some() {
            return Ok(Outgoing {
                cancel,
                message: None,
            });
        }
        return Err(Error::bad_request(
            "the turn has nothing new for the A2A agent: no user message and no answer to its question",
        ));
    }
    Ok(Outgoing {
        cancel,
        message: Some(wire::Message {
            kind: wire::MessageKind::Message,
            role: wire::MessageRole::User,
            message_id: new_id("msg"),
            parts,
            context_id,
            task_id,
            reference_task_ids: Vec::new(),
            metadata: None,
        }),
    })
}

/// An answer to the agent's question as message text: a JSON string is the text itself, other JSON its text.
/// An answer with no payload (an AgentScope client approving the question, say) is a plain go-ahead: "yes" —
/// dropped, it left the turn with nothing to send.
fn answer_text(payload: Option<&serde_json::Value>) -> String {
    match payload {
        None | Some(serde_json::Value::Null) => "yes".to_owned(),
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

/// Appends what one new message contributes to the outgoing A2A message.
fn message_parts(message: &Message, parts: &mut Vec<wire::Part>) {
    match message.role {
        Role::User => parts.extend(message.content.iter().map(part_to_wire)),
        Role::Tool => {
            // A2A has no tool results: the agent reads them as text.
            let call = message
                .name
                .clone()
                .or_else(|| message.tool_call_id.clone())
                .unwrap_or_default();
            info!(call = %call, "A2A has no tool results; sent as user text");
            let what = if message.is_error {
                "Error from tool call"
            } else {
                "Result of tool call"
            };
            parts.push(wire::Part::text(format!(
                "[{what} {call}]\n{}",
                message.text()
            )));
        }
        Role::System | Role::Developer => {
            info!(message = %message.id,
                "A2A agents take no system or developer messages (they keep their own instructions); not sent");
        }
        Role::Assistant => {
            debug!(message = %message.id, "assistant messages are not sent to an A2A agent");
        }
    }
}

/// One JSON-RPC request with a fresh string id.
pub(super) fn rpc_request<P: Serialize>(method: &str, params: &P) -> Result<Bytes> {
    let id = new_id("req");
    let request = wire::Request {
        jsonrpc: "2.0",
        id: &id,
        method,
        params,
    };
    serde_json::to_vec(&request)
        .map(Bytes::from)
        .map_err(|e| Error::internal(format!("encoding the A2A {method} request failed: {e}")))
}
