//! A2A inbound, the request: a JSON-RPC call is read, and a client's message is checked and becomes the
//! [`Turn`] of its task.

use http::Response;
use serde_json::Value;

use crate::body::Body;
use crate::face::RequestDecoder;
use crate::model::{History, Part, Resume, ResumeStatus, Turn};
use crate::protocol::a2a::message_from_wire;
use crate::protocol::a2a::rpc::{self, Envelope, RpcError};
use crate::protocol::a2a::tasks::Started;
use crate::protocol::a2a::wire;
use crate::protocol::a2a::wire::RequestId;

/// Reads a JSON-RPC request body into its call; a refusal is a JSON-RPC error answered with HTTP 200, with
/// the request's id when it could be read. The call's params are read by its method.
pub struct Reader;

impl RequestDecoder for Reader {
    type Request = Envelope;
    type Refusal = (RequestId, RpcError);

    fn decode(&self, body: &[u8]) -> Result<Envelope, (RequestId, RpcError)> {
        rpc::envelope(body)
    }

    fn refuse(&self, (id, error): (RequestId, RpcError)) -> Response<Body> {
        super::json_error(&id, &error)
    }
}

/// What the params' types do not say: a user message with a non-empty id and at least one part, files by
/// exactly one of `bytes` or `uri`.
pub(super) fn check_message(message: &wire::Message) -> Result<(), RpcError> {
    if message.message_id.trim().is_empty() {
        return Err(RpcError::invalid_params(
            "`message.messageId` must not be empty",
        ));
    }
    if message.role != wire::MessageRole::User {
        return Err(RpcError::invalid_params("`message.role` must be \"user\""));
    }
    if message.parts.is_empty() {
        return Err(RpcError::invalid_params(
            "`message.parts` must not be empty",
        ));
    }
    for (index, part) in message.parts.iter().enumerate() {
        if let wire::Part::File { file, .. } = part {
            if file.bytes.is_some() == file.uri.is_some() {
                return Err(RpcError::invalid_params(format!(
                    "`message.parts[{index}].file` must have exactly one of `bytes` or `uri`"
                )));
            }
        }
    }
    Ok(())
}

/// The turn of an accepted message: the message as a delta in the task's context. When it continues a
/// paused task, its text is the answer to the interrupt the task waits on (as a JSON string) and travels only
/// as that `resume`, like an answer from any other inbound: sent again as a new message it would reach the
/// upstream twice. A message with no text whose one data part answers (`{"approved": true}`) is that
/// structured answer. What else the text cannot carry (file and data parts) stays a message.
pub(super) fn turn_for(started: &Started, message: wire::Message) -> Turn {
    let mut message = message_from_wire(message);
    let resume = started.resume.as_ref().map(|interrupt_id| Resume {
        interrupt_id: interrupt_id.clone(),
        status: ResumeStatus::Resolved,
        payload: Some(answer_of(&mut message)),
    });
    if resume.is_some() {
        message
            .content
            .retain(|part| !matches!(part, Part::Text(_)));
    }
    let messages = if message.content.is_empty() {
        Vec::new()
    } else {
        vec![message]
    };
    Turn {
        conversation: started.context_id.clone(),
        tenant: started.tenant.clone(),
        run_id: started.task_id.clone(),
        messages,
        history: History::Delta,
        resume: resume.into_iter().collect(),
        ..Turn::default()
    }
}

/// The answer a continuing message gives: its one data part when it has no text (taken out of the message),
/// else its text.
fn answer_of(message: &mut crate::model::Message) -> Value {
    let text = message.text();
    let data: Vec<usize> = (0..message.content.len())
        .filter(|&i| matches!(message.content[i], Part::Data(_)))
        .collect();
    match (text.is_empty(), data.as_slice()) {
        (true, [only]) => match message.content.remove(*only) {
            Part::Data(data) => data,
            _ => Value::Null,
        },
        _ => Value::String(text),
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::a2a::tasks::Registry;
    use serde_json::json;

    fn message(value: Value) -> wire::Message {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn messages_must_be_user_messages_with_parts_and_files_with_one_source() {
        let ok = json!({"kind": "message", "role": "user", "messageId": "m", "parts": [{"kind": "text", "text": "x"}]});
        assert!(check_message(&message(ok.clone())).is_ok());
        let mut agent = ok.clone();
        agent["role"] = json!("agent");
        assert!(check_message(&message(agent))
            .unwrap_err()
            .message
            .contains("message.role"));
        let mut empty = ok.clone();
        empty["parts"] = json!([]);
        assert!(check_message(&message(empty))
            .unwrap_err()
            .message
            .contains("message.parts"));
        let mut file = ok;
        file["parts"] = json!([{"kind": "file", "file": {"name": "a"}}]);
        assert!(check_message(&message(file))
            .unwrap_err()
            .message
            .contains("`message.parts[0].file`"));
    }

    #[test]
    fn a_continuing_message_answers_the_interrupt_with_its_text() {
        let registry = Registry::new();
        let mut started = registry
            .begin(
                "",
                message(json!({"kind": "message", "role": "user", "messageId": "m",
                                   "parts": [{"kind": "text", "text": "Paris"}]})),
            )
            .unwrap();
        started.resume = Some("int-1".into());
        let turn = turn_for(
            &started,
            message(json!({"kind": "message", "role": "user", "messageId": "m",
                           "parts": [{"kind": "text", "text": "Paris"}]})),
        );
        assert_eq!(turn.conversation, started.context_id);
        assert_eq!(turn.run_id, started.task_id);
        assert_eq!(turn.history, History::Delta);
        assert!(turn.messages.is_empty(), "the answer is not sent twice");
        assert_eq!(
            turn.resume,
            [Resume {
                interrupt_id: "int-1".into(),
                status: ResumeStatus::Resolved,
                payload: Some(json!("Paris")),
            }]
        );
    }
}
