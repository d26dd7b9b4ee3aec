//! AG-UI outbound, the request: a [`Turn`] (and what the last run left to answer) becomes a `RunAgentInput`.

use serde_json::{json, Value};

use super::pause_tools::PauseCall;
use super::{empty_object, Outbound};
use crate::model::{new_id, Message, Resume, ResumeStatus, Turn};
use crate::protocol::ag_ui::{message_to_wire, wire};

impl Outbound {
    /// The run request: the whole history (with the `answers` to the pause calls at `at`), and always `tools`,
    /// `context`, `state` and `forwardedProps` (servers on ≤0.0.59 schemas reject a body without them).
    pub(super) fn request(
        &self,
        turn: &Turn,
        approvals: &[String],
        pause_calls: &[PauseCall],
        (at, answers): (usize, Vec<Message>),
    ) -> wire::RunAgentInput {
        let (before, since) = turn.messages.split_at(at);
        let answered = |resume: &Resume| pause_calls.iter().any(|c| c.id == resume.interrupt_id);
        wire::RunAgentInput {
            thread_id: turn.conversation.clone(),
            run_id: if turn.run_id.is_empty() {
                new_id("run")
            } else {
                turn.run_id.clone()
            },
            messages: before
                .iter()
                .chain(&answers)
                .chain(since)
                .map(message_to_wire)
                .collect(),
            tools: turn
                .tools
                .iter()
                .map(|tool| wire::Tool {
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    parameters: Some(tool.parameters.clone()),
                })
                .chain(self.pause_tools.offered(turn))
                .collect(),
            context: turn
                .context
                .iter()
                .map(|c| wire::Context {
                    description: c.description.clone(),
                    value: c.value.clone(),
                })
                .collect(),
            state: Some(turn.state.clone().unwrap_or_else(empty_object)),
            forwarded_props: Some(
                turn.extra
                    .get("forwardedProps")
                    .cloned()
                    .unwrap_or_else(empty_object),
            ),
            parent_run_id: None,
            protocol_version: self.protocol_version.clone(),
            resume: turn
                .resume
                .iter()
                .filter(|resume| !answered(resume))
                .map(|resume| resume_to_wire(resume, approvals.contains(&resume.interrupt_id)))
                .collect(),
        }
    }
}

/// A resume entry as sent. An approval the client resolved is answered `{"approved": …}` (plus the `reason`
/// its answer gave), the shape an approval interrupt asks for, whatever words the client used (an A2A client
/// answers in words, an AG-UI client's tool message may say `confirmed`); an answer already in that shape goes
/// as it is. Anything else goes as the client gave it.
fn resume_to_wire(resume: &Resume, approval: bool) -> wire::ResumeEntry {
    let decided = resume
        .payload
        .as_ref()
        .is_some_and(|payload| payload.get("approved").is_some_and(Value::is_boolean));
    let payload = match resume.status {
        ResumeStatus::Resolved if approval && !decided => {
            let (approved, reason) = resume.approval();
            let mut decision = json!({ "approved": approved });
            if let Some(reason) = reason {
                decision["reason"] = Value::String(reason);
            }
            Some(decision)
        }
        _ => resume.payload.clone(),
    };
    wire::ResumeEntry {
        interrupt_id: resume.interrupt_id.clone(),
        status: match resume.status {
            ResumeStatus::Resolved => wire::ResumeStatus::Resolved,
            ResumeStatus::Cancelled => wire::ResumeStatus::Cancelled,
        },
        payload,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(payload: Value) -> Resume {
        Resume {
            interrupt_id: "int-1".to_owned(),
            status: ResumeStatus::Resolved,
            payload: Some(payload),
        }
    }

    fn approval_answer(payload: Value) -> Option<Value> {
        resume_to_wire(&resolved(payload), true).payload
    }

    #[test]
    fn an_approval_is_answered_approved_true_or_false_whatever_the_words() {
        assert_eq!(
            approval_answer(json!("yes")),
            Some(json!({"approved": true}))
        );
        assert_eq!(
            approval_answer(json!("confirmed")),
            Some(json!({"approved": true}))
        );
        assert_eq!(
            approval_answer(json!("no")),
            Some(json!({"approved": false}))
        );
        assert_eq!(
            approval_answer(json!("only on Fridays")),
            Some(json!({"approved": false, "reason": "only on Fridays"}))
        );
        let decided = json!({"approved": true, "editedArgs": {"n": 1}});
        assert_eq!(approval_answer(decided.clone()), Some(decided));
    }

    #[test]
    fn other_answers_go_as_the_client_gave_them() {
        let answer = resume_to_wire(&resolved(json!("Paris")), false);
        assert_eq!(answer.payload, Some(json!("Paris")));
        let cancelled = Resume {
            status: ResumeStatus::Cancelled,
            payload: None,
            ..resolved(Value::Null)
        };
        let answer = resume_to_wire(&cancelled, true);
        assert_eq!(answer.status, wire::ResumeStatus::Cancelled);
        assert_eq!(answer.payload, None);
    }
}
