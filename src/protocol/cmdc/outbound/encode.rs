//! The turn: what the gateway is asked, in order: the answer to what the session waits on, then the new text.

use serde_json::Value;
use tracing::info;

use crate::error::{Error, Result};
use crate::model::{Message, ResumeStatus, Role, Turn};
use crate::store::Record;

use super::{Action, CallbackAnswer, Conversation, Waiting};

impl Waiting {
    fn id(&self) -> &str {
        match self {
            Self::Approval(id) | Self::Question(id) | Self::Callback(id) => id,
        }
    }
}

/// What a turn asks of the gateway, in order: the answer to what the session's run waits on (or, when the
/// turn moves on without one, declining it), then the new text as a prompt.
pub(super) fn plan(turn: &Turn, record: &mut Record) -> Result<Vec<Action>> {
    let mut actions = Vec::new();
    let waiting =
        record.update_upstream(|conversation: &mut Conversation| conversation.waiting.take());
    if let Some(waiting) = &waiting {
        actions.push(answer(turn, waiting));
    }
    let answered = match &waiting {
        Some(Waiting::Callback(call_id)) => Some(call_id.as_str()),
        _ => None,
    };
    let text = new_text(&turn.messages, answered);
    if !text.is_empty() {
        actions.push(Action::Prompt(text));
    }
    if actions.is_empty() {
        return Err(Error::bad_request(
            "the turn has nothing new for the CMDC agent: no user message and no answer to its question",
        ));
    }
    Ok(actions)
}

/// The turn's answer to what the run waits on; a turn that brings none declines it.
fn answer(turn: &Turn, waiting: &Waiting) -> Action {
    let resume = || {
        let answer = turn.resume.iter().find(|r| r.interrupt_id == waiting.id());
        if answer.is_none() {
            info!(
                pause = waiting.id(),
                "the client moved on without answering the CMDC agent; declining"
            );
        }
        answer
    };
    let dismissed = || resume().is_some_and(|r| r.status == ResumeStatus::Cancelled);
    match waiting {
        Waiting::Approval(_) | Waiting::Question(_) if dismissed() => Action::Abort {
            decline: Box::new(decline(waiting)),
        },
        Waiting::Approval(id) => match resume().map(|a| a.approval().0) {
            Some(true) => Action::Approve(id.clone()),
            _ => Action::Reject(id.clone()),
        },
        Waiting::Question(reference) => Action::Respond {
            reference: reference.clone(),
            response: resume()
                .and_then(|a| a.payload.as_ref())
                .map(answer_text)
                .unwrap_or_default(),
        },
        Waiting::Callback(call_id) => Action::Callback {
            call_id: call_id.clone(),
            answer: callback_answer(turn, call_id),
        },
    }
}

/// What declines a pause: rejecting the approval, an empty answer to the question, a failed tool.
fn decline(waiting: &Waiting) -> Action {
    match waiting {
        Waiting::Approval(id) => Action::Reject(id.clone()),
        Waiting::Question(reference) => Action::Respond {
            reference: reference.clone(),
            response: String::new(),
        },
        Waiting::Callback(call_id) => Action::Callback {
            call_id: call_id.clone(),
            answer: CallbackAnswer::Error("the user dismissed the tool call".to_owned()),
        },
    }
}

/// The client's result of a callback tool's call: its tool message.
fn callback_answer(turn: &Turn, call_id: &str) -> CallbackAnswer {
    let result = turn
        .messages
        .iter()
        .find(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some(call_id));
    match result {
        Some(message) if message.is_error => CallbackAnswer::Error(message.text()),
        Some(message) => CallbackAnswer::Result(message.text()),
        None => {
            info!(call = %call_id, "the client moved on without running the tool");
            CallbackAnswer::Error("the user moved on without running the tool".to_owned())
        }
    }
}

/// An answer as the text CMDC takes: a JSON string is the text itself, other JSON its text.
pub(super) fn answer_text(payload: &Value) -> String {
    match payload {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The turn's new user text (CMDC prompts are text only), blank-line separated. Tool results other than the
/// callback's `answered` reach the agent as labelled text; system messages only shape a new session.
fn new_text(messages: &[Message], answered: Option<&str>) -> String {
    let mut parts = Vec::new();
    for message in messages {
        match message.role {
            Role::User => parts.push(message.text()),
            Role::Tool if message.tool_call_id.as_deref() == answered => {}
            Role::Tool => {
                let call = message.tool_call_id.as_deref().unwrap_or_default();
                info!(call = %call, "a CMDC prompt has no tool results; sent as text");
                parts.push(format!("[Result of tool call {call}]\n{}", message.text()));
            }
            Role::System | Role::Developer | Role::Assistant => {}
        }
    }
    parts.retain(|part| !part.is_empty());
    parts.join("\n\n")
}
