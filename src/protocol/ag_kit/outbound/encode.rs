//! AG-Kit outbound, the request: a turn becomes one send-message request of what the agent has not seen.

use serde_json::{json, Value};
use tracing::{debug, info};

use super::Conversation;
use crate::error::{Error, Result};
use crate::model::{MediaSource, Message, Part, Resume, ResumeStatus, Role, Turn};
use crate::protocol::ag_kit::wire;
use crate::store::Record;

/// The turn as one send-message request: the answer to the interrupt the agent waits on, if the turn has
/// one, and the new messages, in the conversation's `conversationId` (minted on its first turn).
pub(super) fn request(turn: &Turn, record: &mut Record) -> Result<wire::SendMessageInput> {
    let (conversation_id, waiting) = record.update_upstream(|conversation: &mut Conversation| {
        let id = conversation
            .conversation_id
            .get_or_insert_with(crate::model::random_hex)
            .clone();
        // The agent's interrupt is answered now or lapses: the client moved on.
        (id, conversation.waiting.take())
    });
    let approval = waiting.as_ref().is_some_and(|waiting| waiting.approval);
    let resume =
        waiting.and_then(|waiting| turn.resume.iter().find(|r| r.interrupt_id == waiting.id));
    if turn.resume.len() > usize::from(resume.is_some()) {
        debug!("resume entries for interrupts this AG-Kit conversation is not waiting on; ignored");
    }
    let messages: Vec<wire::Message> = turn.messages.iter().filter_map(message_to_wire).collect();
    if messages.is_empty() && resume.is_none() {
        return Err(Error::bad_request(
            "the turn has nothing new for the AG-Kit agent: no user message, tool result or answer to its interrupt",
        ));
    }
    Ok(wire::SendMessageInput {
        messages: (!messages.is_empty() || resume.is_none()).then_some(messages),
        tools: turn
            .tools
            .iter()
            .map(|tool| wire::Tool {
                name: tool.name.clone(),
                description: tool.description.clone(),
                // v0 clients send the schema as JSON text.
                parameters: Some(Value::String(tool.parameters.to_string())),
            })
            .collect(),
        conversation_id: Some(conversation_id),
        resume: resume.map(|resume| resume_to_wire(resume, approval)),
    })
}

/// `payload` is the answer as JSON text. An approval is answered `{"approved": …}` (with the `reason` the
/// answer gave), whatever words the client used (`specs/ag-kit.md` §4.3), unless the client already answered
/// in that shape; another dismissed interrupt is answered `null`.
fn resume_to_wire(resume: &Resume, approval: bool) -> wire::Resume {
    let answered = resume.payload.as_ref().filter(|payload| {
        resume.status == ResumeStatus::Resolved
            && (!approval || payload.get("approved").is_some_and(Value::is_boolean))
    });
    let payload = match answered {
        Some(payload) => payload.clone(),
        None if approval => {
            let (approved, reason) = resume.approval();
            let mut decision = json!({ "approved": approved });
            if let Some(reason) = reason {
                decision["reason"] = Value::String(reason);
            }
            decision
        }
        None => Value::Null,
    };
    wire::Resume {
        interrupt_id: resume.interrupt_id.clone(),
        payload: Value::String(payload.to_string()),
    }
}

/// A new message as v0 sends it: user text and tool results. The agent keeps its own instructions and its
/// own replies, so system and assistant messages are not sent.
fn message_to_wire(message: &Message) -> Option<wire::Message> {
    let (role, tool_call_id) = match message.role {
        Role::User => (wire::Role::User, None),
        Role::Tool => (wire::Role::Tool, message.tool_call_id.clone()),
        Role::System | Role::Developer => {
            info!(message = %message.id,
                "AG-Kit agents take no system or developer messages (they keep their own instructions); not sent");
            return None;
        }
        Role::Assistant => {
            debug!(message = %message.id, "assistant messages are not sent to an AG-Kit agent");
            return None;
        }
    };
    Some(wire::Message {
        role,
        content: flatten(&message.content),
        tool_call_id,
    })
}

/// v0 content is a string: text as it is, data as JSON text, media by its URL (or a placeholder naming it).
fn flatten(parts: &[Part]) -> String {
    let mut text = String::new();
    for part in parts {
        match part {
            Part::Text(t) => text.push_str(t),
            Part::Data(value) => text.push_str(&value.to_string()),
            Part::Media(media) => {
                info!("AG-Kit v0 messages are text only; an attachment is sent as its URL or name");
                match &media.source {
                    MediaSource::Url(url) => text.push_str(url),
                    _ => {
                        let name = media.filename.as_deref().or(media.mime_type.as_deref());
                        text.push_str(&format!("[attachment: {}]", name.unwrap_or("file")));
                    }
                }
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Interrupt, InterruptKind};
    use crate::protocol::ag_kit::outbound::{remember_interrupt, WaitingInterrupt};

    fn user(text: &str) -> Message {
        Message::text_message("u", Role::User, text)
    }

    #[test]
    fn the_request_is_the_delta_in_one_conversation_with_string_schemas() {
        let mut record = Record::default();
        let mut answer = Message::text_message("t", Role::Tool, "blue");
        answer.tool_call_id = Some("c1".into());
        let turn = Turn {
            messages: vec![
                Message::text_message("s", Role::System, "be brief"),
                user("hi"),
                answer,
            ],
            tools: vec![crate::model::Tool {
                name: "paint".into(),
                description: "Paints".into(),
                parameters: json!({"type": "object"}),
            }],
            ..Turn::default()
        };
        let first = serde_json::to_value(request(&turn, &mut record).unwrap()).unwrap();
        let conversation = first["conversationId"].as_str().unwrap().to_owned();
        assert!(uuid::Uuid::parse_str(&conversation).is_ok());
        assert_eq!(
            first["messages"],
            json!([{"role": "user", "content": "hi"}, {"role": "tool", "content": "blue", "toolCallId": "c1"}])
        );
        assert_eq!(
            first["tools"],
            json!([{"name": "paint", "description": "Paints", "parameters": "{\"type\":\"object\"}"}])
        );
        assert!(first.get("resume").is_none());

        let second = serde_json::to_value(
            request(
                &Turn {
                    messages: vec![user("again")],
                    ..Turn::default()
                },
                &mut record,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(second["conversationId"], conversation.as_str());
        assert!(second.get("tools").is_none(), "no tools, no key");
    }

    #[test]
    fn an_answer_to_the_waiting_interrupt_is_a_resume_without_messages() {
        let mut record = Record::default();
        record.update_upstream(|conversation: &mut Conversation| {
            conversation.waiting = Some(WaitingInterrupt {
                id: "int_1".into(),
                approval: false,
            })
        });
        let turn = Turn {
            resume: vec![Resume {
                interrupt_id: "int_1".into(),
                status: ResumeStatus::Resolved,
                payload: Some(json!({"selected": [0, 2]})),
            }],
            ..Turn::default()
        };
        let body = serde_json::to_value(request(&turn, &mut record).unwrap()).unwrap();
        assert_eq!(
            body["resume"],
            json!({"interruptId": "int_1", "payload": "{\"selected\":[0,2]}"})
        );
        assert!(body.get("messages").is_none());
        assert_eq!(record.upstream_state::<Conversation>().waiting, None);

        let error = request(&turn, &mut record).unwrap_err();
        assert!(error.is_client(), "answered once, the interrupt is gone");
    }

    #[test]
    fn an_approval_is_answered_approved_true_or_false_whatever_the_words() {
        let approval = Interrupt {
            id: "int_1".into(),
            kind: InterruptKind::Approval {
                tool: "Shell".into(),
                args: json!({}),
                hint: None,
            },
        };
        let answer = |payload: Value| {
            let mut record = Record::default();
            remember_interrupt(&approval, &mut record);
            let turn = Turn {
                resume: vec![Resume {
                    interrupt_id: "int_1".into(),
                    status: ResumeStatus::Resolved,
                    payload: Some(payload),
                }],
                ..Turn::default()
            };
            let body = serde_json::to_value(request(&turn, &mut record).unwrap()).unwrap();
            body["resume"]["payload"].as_str().unwrap().to_owned()
        };
        assert_eq!(answer(json!("yes")), r#"{"approved":true}"#);
        assert_eq!(
            answer(json!("only on Fridays")),
            r#"{"approved":false,"reason":"only on Fridays"}"#
        );
        assert_eq!(
            answer(json!({"approved": true, "editedArgs": {"n": 1}})),
            r#"{"approved":true,"editedArgs":{"n":1}}"#,
            "an answer in the asked shape stays whole"
        );
    }
}
