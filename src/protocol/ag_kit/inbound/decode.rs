//! AG-Kit inbound, the request: a `SendMessageInput` body becomes a [`Turn`] of what is new, or a refusal.

use serde_json::Value;
use tracing::debug;

use http::Response;

use crate::body::{self, Body};
use crate::error::{Error, Result};
use crate::face::RequestDecoder;
use crate::json::from_body;
use crate::model::{
    new_id, History, InterruptKind, Message, Part, Resume, ResumeStatus, Role, Tool, Turn,
};
use crate::protocol::ag_kit::wire;

/// Reads a `SendMessageInput` body into a turn of what is new; a refusal is an HTTP error with a JSON body.
pub struct Reader;

impl RequestDecoder for Reader {
    type Request = Turn;
    type Refusal = Error;

    fn decode(&self, body: &[u8]) -> Result<Turn> {
        turn_from_input(from_body(body, "send-message request")?)
    }

    fn refuse(&self, refusal: Error) -> Response<Body> {
        body::error_response(&refusal, "POST")
    }
}

fn turn_from_input(input: wire::SendMessageInput) -> Result<Turn> {
    let messages = input
        .messages
        .unwrap_or_default()
        .into_iter()
        .map(message_from_wire)
        .collect::<Result<Vec<_>>>()?;
    let resume: Vec<Resume> = input.resume.map(resume_from_wire).into_iter().collect();
    if messages.is_empty() && resume.is_empty() {
        return Err(Error::bad_request(
            "invalid send-message request: no `messages` and no `resume`: nothing to send",
        ));
    }
    let conversation = match input.conversation_id.filter(|id| !id.is_empty()) {
        Some(id) => id,
        None => {
            let minted = crate::model::random_hex();
            debug!(conversation = %minted, "send-message without conversationId; minted one");
            minted
        }
    };
    Ok(Turn {
        conversation,
        run_id: new_id("run"),
        messages,
        history: History::Delta,
        tools: input
            .tools
            .into_iter()
            .map(tool_from_wire)
            .collect::<Result<_>>()?,
        resume,
        ..Turn::default()
    })
}

fn message_from_wire(message: wire::Message) -> Result<Message> {
    let role = match message.role {
        wire::Role::User => Role::User,
        wire::Role::System => Role::System,
        wire::Role::Assistant => Role::Assistant,
        wire::Role::Tool => Role::Tool,
    };
    let mut canonical = Message::new(new_id("msg"), role, vec![Part::Text(message.content)]);
    if role == Role::Tool {
        let call_id = message.tool_call_id.filter(|id| !id.is_empty());
        if call_id.is_none() {
            return Err(Error::bad_request(
                "invalid send-message request: a tool message needs its `toolCallId`",
            ));
        }
        canonical.tool_call_id = call_id;
    }
    Ok(canonical)
}

/// `parameters` is JSON Schema as JSON text (what `useChat` sends) or, leniently, as an object.
fn tool_from_wire(tool: wire::Tool) -> Result<Tool> {
    let parameters = match tool.parameters {
        None | Some(Value::Null) => crate::model::empty_object_schema(),
        Some(Value::String(text)) => serde_json::from_str(&text).map_err(|e| {
            Error::bad_request(format!(
                "invalid send-message request: the `parameters` of tool `{}` is not JSON text: {e}",
                tool.name
            ))
        })?,
        Some(schema) => schema,
    };
    Ok(Tool {
        name: tool.name,
        description: tool.description,
        parameters,
    })
}

/// `payload` is JSON text; text that is not JSON is taken as the answer itself.
fn resume_from_wire(resume: wire::Resume) -> Resume {
    let payload = match resume.payload {
        Value::String(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        other => other,
    };
    Resume {
        interrupt_id: resume.interrupt_id,
        status: ResumeStatus::Resolved,
        payload: Some(payload),
    }
}

/// An answer in the shape our question interrupts ask for (`{"response": "…"}`) is its text, as every other
/// inbound gives it — for an approval too, whose words are then read as the decision they state. Other
/// answers, and every answer to an upstream's own interrupt, stay as the client wrote them.
pub(super) fn read_answer(asked: &InterruptKind, payload: &mut Value) {
    if matches!(asked, InterruptKind::Custom { .. }) {
        return;
    }
    if let Value::Object(fields) = payload {
        if let (1, Some(Value::String(text))) = (fields.len(), fields.get_mut("response")) {
            *payload = Value::String(std::mem::take(text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode_json(body: Value) -> Result<Turn> {
        Reader.decode(body.to_string().as_bytes())
    }

    #[test]
    fn a_turn_is_the_delta_of_its_conversation_with_minted_ids() {
        let turn = decode_json(json!({
            "messages": [{"role": "user", "content": "hi"}],
            "conversationId": "c1"
        }))
        .unwrap();
        assert_eq!(turn.conversation, "c1");
        assert_eq!(turn.history, History::Delta);
        assert_eq!(turn.messages[0].text(), "hi");
        assert!(turn.messages[0].id.starts_with("msg_"));
    }

    #[test]
    fn tool_parameters_are_json_text_or_an_object() {
        let turn = decode_json(json!({
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [
                {"name": "a", "description": "A", "parameters": "{\"type\":\"object\"}"},
                {"name": "b", "description": "B", "parameters": {"type": "object"}},
                {"name": "c", "description": "C"}
            ],
            "conversationId": "c1"
        }))
        .unwrap();
        assert_eq!(turn.tools[0].parameters, json!({"type": "object"}));
        assert_eq!(turn.tools[1].parameters, json!({"type": "object"}));
        assert_eq!(turn.tools[2].parameters["type"], "object");
    }

    #[test]
    fn tool_parameters_that_are_not_json_text_are_refused() {
        let error = decode_json(json!({
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "paint", "description": "", "parameters": "{type: object"}],
            "conversationId": "c1"
        }))
        .unwrap_err();
        assert!(error.is_client());
        assert!(error.message().contains("`paint`"), "{error}");
    }

    #[test]
    fn resume_payload_is_json_text_and_a_question_answer_is_its_text() {
        let resume = |payload: &str| {
            decode_json(
                json!({"resume": {"interruptId": "int_1", "payload": payload}, "conversationId": "c"}),
            )
            .unwrap()
            .resume
            .remove(0)
        };
        assert_eq!(
            resume("{\"approved\":true}").payload,
            Some(json!({"approved": true}))
        );
        assert_eq!(resume("\"Paris\"").payload, Some(json!("Paris")));
        assert_eq!(resume("not json").payload, Some(json!("not json")));
        assert_eq!(resume("{\"selected\":[0,2]}").interrupt_id, "int_1");
    }

    #[test]
    fn a_question_answered_in_the_asked_shape_is_its_text_other_answers_stay_whole() {
        let question = InterruptKind::Question {
            text: "Which city?".into(),
            options: Vec::new(),
        };
        let mut answer = json!({"response": "Paris"});
        read_answer(&question, &mut answer);
        assert_eq!(answer, json!("Paris"));

        let approval = InterruptKind::Approval {
            tool: "Shell".into(),
            args: json!({}),
            hint: None,
        };
        let mut answer = json!({"response": "yes, approve"});
        read_answer(&approval, &mut answer);
        assert_eq!(
            answer,
            json!("yes, approve"),
            "words, read as the decision they state"
        );
        let mut decided = json!({"approved": true});
        read_answer(&approval, &mut decided);
        assert_eq!(decided, json!({"approved": true}));

        let custom = InterruptKind::Custom {
            reason: "waiting_for_user_selection".into(),
            payload: json!({}),
        };
        let mut answer = json!({"response": "Paris"});
        read_answer(&custom, &mut answer);
        assert_eq!(answer, json!({"response": "Paris"}));
    }

    #[test]
    fn requests_without_anything_to_say_or_with_anonymous_tool_messages_are_refused() {
        for body in [
            json!({"conversationId": "c"}),
            json!({"messages": [], "conversationId": "c"}),
            json!({"messages": [{"role": "tool", "content": "ok"}], "conversationId": "c"}),
            json!({"messages": [{"role": "robot", "content": "ok"}], "conversationId": "c"}),
            json!([1, 2]),
        ] {
            let error = decode_json(body.clone()).unwrap_err();
            assert!(error.is_client(), "{body}: {error}");
        }
    }

    #[test]
    fn a_missing_conversation_id_is_minted() {
        let turn = decode_json(json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap();
        assert!(uuid::Uuid::parse_str(&turn.conversation).is_ok());
    }
}
