//! AG-Kit inbound: we are the v0 server that `useChat` of `@cloudbase/agent-ui-web` talks to
//! (`specs/ag-kit.md` §4). `POST path` and `POST path/send-message` take a `SendMessageInput`; its
//! `messages` are what is new in the conversation (`History::Delta`: the hub keeps the log for upstreams
//! that want it all). The run streams back as v0 events and ends with `data: [DONE]`.
//!
//! Choices where v0 says nothing (the spec note's):
//! - no `conversationId`: one is minted; the request is a conversation of its own, and the id is in the
//!   `x-conversation-id` response header so that a client may go on with it;
//! - the response head waits for the first frame (at most one heartbeat interval), so a run that fails
//!   before it produced anything is answered with an HTTP error, which `useChat` shows; later failures are an
//!   `error` frame and then `[DONE]`;
//! - bad requests are HTTP 400 `{"error":{"code":"INVALID_REQUEST","message"}}`, never forwarded: a body
//!   that does not parse, a tool whose `parameters` is not JSON text, nothing new to say, and (refused by the
//!   hub before the upstream is asked) a `resume` of an interrupt that is not pending or a tool message for
//!   a call nobody waits on.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::{stream, Stream, StreamExt};
use http::header::HeaderValue;
use http::{HeaderName, Method, Request, Response};
use hyper::body::Incoming;
use serde_json::{json, Value};
use tokio::time::Instant;
use tracing::debug;

use super::{wire, APPROVAL, INPUT_REQUIRED, QUESTION};
use crate::auth::KeySources;
use crate::body::{self, Body};
use crate::error::{Error, Result};
use crate::face::{encode_frames, EventEncoder};
use crate::model::{
    new_id, Event, History, Interrupt, InterruptKind, Message, Part, Resume, ResumeStatus, Role,
    Tool, Turn,
};
use crate::mount::Mount;
use crate::sse::{self, HEARTBEAT};

/// The conversation a request was served in (minted when the request named none).
const CONVERSATION_HEADER: HeaderName = HeaderName::from_static("x-conversation-id");

#[derive(Default)]
pub struct Inbound;

impl Inbound {
    pub fn new() -> Self {
        Self
    }

    pub async fn handle(&self, request: Request<Incoming>, mount: &Mount) -> Response<Body> {
        match self.start(request, mount).await {
            Ok(response) => response,
            Err(error) => body::error_response(&error, "POST"),
        }
    }

    async fn start(&self, request: Request<Incoming>, mount: &Mount) -> Result<Response<Body>> {
        if !matches!(
            mount.subpath(request.uri().path()),
            Some("" | "/send-message")
        ) {
            return Err(Error::not_found(format!(
                "no AG-Kit endpoint at {}; POST to {1} or {1}/send-message",
                request.uri().path(),
                mount.path
            )));
        }
        let caller = mount.access.admit(&request, KeySources::Headers).await?;
        body::expect_method(&request, Method::POST)?;
        body::expect_json(request.headers())?;
        let bytes = body::read_request(request.into_body(), mount.body_limit).await?;
        let mut turn = decode(&bytes)?;
        turn.tenant = caller.tenant;
        let translator = Arc::clone(&mount.translator);
        for resume in &mut turn.resume {
            let asked = translator
                .pending_interrupt(&turn.tenant, &turn.conversation, &resume.interrupt_id)
                .await;
            if let (Some(asked), Some(payload)) = (asked, &mut resume.payload) {
                read_answer(&asked.kind, payload);
            }
        }
        let conversation = HeaderValue::from_str(&turn.conversation).ok();
        let mut response = respond(translator.start(turn)).await?;
        if let Some(conversation) = conversation {
            response
                .headers_mut()
                .insert(CONVERSATION_HEADER, conversation);
        }
        Ok(response)
    }
}

/// The response to a run: v0 frames as the events come. The head waits for the first frame (or one
/// heartbeat interval); an error before any frame is the HTTP error answer instead.
async fn respond<S>(mut events: S) -> Result<Response<Body>>
where
    S: Stream<Item = Event> + Send + Unpin + 'static,
{
    let mut encoder = Encoder;
    let first = first_frame(&mut events, &mut encoder).await?;
    let frames = stream::once(std::future::ready(first))
        .filter(|frame| std::future::ready(!frame.is_empty()))
        .chain(encode_frames(events, encoder));
    Ok(sse::stream_response(frames, sse::EVENT_STREAM, sse::PING))
}

/// The first non-empty frame of the run, a heartbeat if none is ready within one interval, or the error the
/// run failed with before it said anything.
async fn first_frame<S>(events: &mut S, encoder: &mut Encoder) -> Result<Bytes>
where
    S: Stream<Item = Event> + Unpin,
{
    let deadline = Instant::now() + HEARTBEAT;
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Err(_) => {
                let mut ping = BytesMut::new();
                sse::write_comment(&mut ping, "ping");
                return Ok(ping.freeze());
            }
            Ok(None) => return Ok(Bytes::new()),
            Ok(Some(Event::RunError(error))) => return Err(error),
            Ok(Some(event)) => {
                let mut frame = BytesMut::new();
                encoder.encode(event, &mut frame);
                if !frame.is_empty() {
                    return Ok(frame.freeze());
                }
            }
        }
    }
}

/// Decodes a `SendMessageInput` body into a turn of what is new.
pub fn decode(bytes: &[u8]) -> Result<Turn> {
    let deserializer = &mut serde_json::Deserializer::from_slice(bytes);
    let input: wire::SendMessageInput =
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." || inner.is_syntax() || inner.is_eof() {
                Error::bad_request(format!("invalid send-message request: {inner}"))
            } else {
                Error::bad_request(format!("invalid send-message request at `{path}`: {inner}"))
            }
        })?;
    turn_from_input(input)
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
fn read_answer(asked: &InterruptKind, payload: &mut Value) {
    if matches!(asked, InterruptKind::Custom { .. }) {
        return;
    }
    if let Value::Object(fields) = payload {
        if let (1, Some(Value::String(text))) = (fields.len(), fields.get_mut("response")) {
            *payload = Value::String(std::mem::take(text));
        }
    }
}

/// Encodes one run's canonical events as v0 frames. The normalizer already serialized tool calls and made
/// their arguments JSON, which is what `useChat` needs.
pub struct Encoder;

impl EventEncoder for Encoder {
    type Out = BytesMut;

    /// The frames for one event; none for events v0 has no form for.
    fn encode(&mut self, event: Event, out: &mut BytesMut) {
        match event {
            Event::TextDelta { delta, .. } if !delta.is_empty() => {
                write(
                    out,
                    &wire::Event::Text {
                        content: delta.into(),
                    },
                );
            }
            Event::ToolCallStart { call_id, name, .. } => write(
                out,
                &wire::Event::ToolCallStart {
                    tool_call_id: call_id.into(),
                    tool_call_name: name.into(),
                },
            ),
            Event::ToolCallArgs { call_id, delta } if !delta.is_empty() => {
                write(
                    out,
                    &wire::Event::ToolCallArgs {
                        tool_call_id: call_id.into(),
                        delta: delta.into(),
                    },
                );
            }
            Event::ToolCallEnd { call_id } => write(
                out,
                &wire::Event::ToolCallEnd {
                    tool_call_id: call_id.into(),
                },
            ),
            Event::ToolResult {
                call_id, content, ..
            } => write(
                out,
                &wire::Event::ToolResult {
                    tool_call_id: call_id.into(),
                    result: Value::String(content),
                },
            ),
            Event::Interrupt(interrupt) => write(out, &interrupt_to_wire(interrupt)),
            Event::RunFinished { .. } => done(out),
            Event::RunError(error) => {
                write(
                    out,
                    &wire::Event::Error {
                        code: Some(error.code().to_owned()),
                        message: error.message().to_owned(),
                    },
                );
                done(out);
            }
            Event::RunStarted
            | Event::TextStart { .. }
            | Event::TextDelta { .. }
            | Event::TextEnd { .. }
            | Event::ToolCallArgs { .. } => {}
            other => debug!(
                event = %crate::logging::clipped(&format!("{other:?}")),
                "AG-Kit v0 has no event for this; not sent"
            ),
        }
    }
}

fn write(out: &mut BytesMut, event: &wire::Event<'_>) {
    // Serializing our own wire types cannot fail.
    let json = serde_json::to_string(event).unwrap_or_default();
    sse::write_event(out, None, &json);
}

fn done(out: &mut BytesMut) {
    sse::write_event(out, None, wire::DONE);
}

/// A canonical pause as an `interrupt` event (`specs/ag-kit.md` §4.3).
fn interrupt_to_wire(interrupt: Interrupt) -> wire::Event<'static> {
    let (reason, payload) = match interrupt.kind {
        InterruptKind::Approval { tool, args, hint } => {
            let mut payload = json!({"toolName": tool, "args": args});
            if let Some(hint) = hint {
                payload["hint"] = Value::String(hint);
            }
            (APPROVAL.to_owned(), payload)
        }
        InterruptKind::Question { text, options } => (
            QUESTION.to_owned(),
            json!({"question": text, "options": options}),
        ),
        InterruptKind::InputRequired { text } => {
            (INPUT_REQUIRED.to_owned(), json!({"message": text}))
        }
        InterruptKind::Custom { reason, payload } => (reason, payload),
    };
    wire::Event::Interrupt {
        id: interrupt.id,
        reason,
        payload,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_json(body: Value) -> Result<Turn> {
        decode(body.to_string().as_bytes())
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

    fn frames(events: Vec<Event>) -> String {
        let mut bytes = BytesMut::new();
        for event in events {
            Encoder.encode(event, &mut bytes);
        }
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn events_become_v0_frames_ending_with_done() {
        let text = frames(vec![
            Event::RunStarted,
            Event::TextStart {
                message_id: "m1".into(),
                role: Role::Assistant,
            },
            Event::TextDelta {
                message_id: "m1".into(),
                delta: "Hello".into(),
            },
            Event::TextEnd {
                message_id: "m1".into(),
            },
            Event::ReasoningDelta {
                message_id: "r1".into(),
                delta: "hmm".into(),
            },
            Event::ToolCallStart {
                call_id: "c1".into(),
                name: "get_weather".into(),
                parent_message_id: Some("m1".into()),
            },
            Event::ToolCallArgs {
                call_id: "c1".into(),
                delta: "{}".into(),
            },
            Event::ToolCallEnd {
                call_id: "c1".into(),
            },
            Event::ToolResult {
                call_id: "c1".into(),
                message_id: "r1".into(),
                content: "sunny".into(),
                is_error: false,
            },
            Event::RunFinished {
                outcome: crate::model::Outcome::Completed,
                usage: None,
            },
        ]);
        assert_eq!(
            text,
            concat!(
                "data: {\"type\":\"text\",\"content\":\"Hello\"}\n\n",
                "data: {\"type\":\"tool-call-start\",\"toolCallId\":\"c1\",\"toolCallName\":\"get_weather\"}\n\n",
                "data: {\"type\":\"tool-call-args\",\"toolCallId\":\"c1\",\"delta\":\"{}\"}\n\n",
                "data: {\"type\":\"tool-call-end\",\"toolCallId\":\"c1\"}\n\n",
                "data: {\"type\":\"tool-result\",\"toolCallId\":\"c1\",\"result\":\"sunny\"}\n\n",
                "data: [DONE]\n\n",
            )
        );
    }

    #[test]
    fn pauses_are_interrupts_with_the_documented_reasons() {
        let approval = frames(vec![Event::Interrupt(Interrupt {
            id: "int_1".into(),
            kind: InterruptKind::Approval {
                tool: "Shell".into(),
                args: json!({"command": "ls"}),
                hint: None,
            },
        })]);
        assert_eq!(
            approval,
            "data: {\"type\":\"interrupt\",\"id\":\"int_1\",\"reason\":\"approval\",\"payload\":{\"args\":{\"command\":\"ls\"},\"toolName\":\"Shell\"}}\n\n"
        );
        let custom = frames(vec![Event::Interrupt(Interrupt {
            id: "int_2".into(),
            kind: InterruptKind::Custom {
                reason: "waiting_for_user_selection".into(),
                payload: json!({"steps": []}),
            },
        })]);
        assert!(
            custom.contains("\"reason\":\"waiting_for_user_selection\",\"payload\":{\"steps\":[]}")
        );
    }

    #[test]
    fn an_error_is_an_error_frame_then_done() {
        let text = frames(vec![Event::RunError(Error::upstream_eof())]);
        assert_eq!(
            text,
            "data: {\"type\":\"error\",\"code\":\"UPSTREAM_EOF\",\"message\":\"upstream stream ended before the run finished\"}\n\ndata: [DONE]\n\n"
        );
    }
}
