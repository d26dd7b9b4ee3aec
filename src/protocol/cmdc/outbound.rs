//! CMDC outbound: we are the client of a CMDC gateway (`specs/cmdc.md` §5). The route's `upstream` is the
//! gateway's base URL; `X-API-Key` (or `Authorization`) comes from the route's `upstream_headers`.
//!
//! A conversation is a gateway session, created on its first turn (`model` from the turn or the route's
//! `[routes.translate] model`, `systemPrompt` from the turn's system messages) and kept in the record. The
//! gateway keeps the history, so a turn sends only its new user text. Every action that makes the agent
//! run (a prompt, an approval, an answer) is one step: **subscribe to `/events` first**, then act, then read
//! the run until it ends (`agent_end` / `agent_abort`) or pauses (`approval_required` / `ask_user`). A pause
//! ends our run as an interrupt, and the gateway's run stays paused: the next turn answers it
//! (`approve` / `reject` / `respond`) and reads on. A turn that moves on without answering declines it first
//! (`reject`, or an empty answer), so that its prompt is not queued behind a run that waits forever.

use bytes::Bytes;
use http::{StatusCode, Uri};
use serde::Serialize;
use serde_json::Value;
use tracing::{debug, info};

use super::wire;
use crate::config::Translate;
use crate::error::{Error, Result};
use crate::model::{new_id, Event, Interrupt, InterruptKind, Message, Outcome, Role, Turn, Usage};
use crate::sse::{SseReadError, SseReader};
use crate::store::Record;
use crate::translate::RunContext;
use crate::upstream::{self, Upstream};

/// Record key: the gateway session of this conversation.
const SESSION_ID: &str = "cmdc.session_id";
/// Record key: the pause the session's run waits on, as `approval:<approvalId>` or `ask:<ref>`.
const WAITING: &str = "cmdc.waiting";
/// The largest event accepted from the gateway.
const MAX_EVENT_BYTES: usize = 10 * 1024 * 1024;

pub struct Outbound {
    upstream: Upstream,
    model: Option<String>,
}

/// One thing that makes the agent run.
#[derive(Debug, Clone, PartialEq)]
enum Action {
    Prompt(String),
    Approve(String),
    Reject(String),
    Respond { reference: String, response: String },
}

/// The pause a gateway run waits on.
#[derive(Debug, Clone, PartialEq)]
enum Waiting {
    Approval(String),
    Question(String),
}

/// How one step's run went.
#[derive(Debug, PartialEq)]
enum StepEnd {
    Finished(Option<Usage>),
    Paused(Waiting),
    Cancelled,
}

impl Outbound {
    pub fn new(upstream: Upstream, translate: &Translate) -> Self {
        Self {
            upstream,
            model: translate.model.clone(),
        }
    }

    pub async fn run(&self, turn: &Turn, context: &mut RunContext) -> Result<()> {
        let actions = plan(turn, &mut context.record)?;
        if !turn.tools.is_empty() {
            debug!(
                tools = turn.tools.len(),
                "client tools are not offered to a CMDC gateway yet (callback tools); not sent"
            );
        }
        let mut session = match context.record.upstream.get(SESSION_ID) {
            Some(session) => session.clone(),
            None => self.create_session(turn, &mut context.record).await?,
        };
        let mut usage = None;
        for action in actions {
            let end = match self.step(&session, &action, context).await {
                Err(gone) if gone.is_session_gone() && matches!(action, Action::Prompt(_)) => {
                    info!(session = %session, "the CMDC session is gone (its history with it); creating a new one");
                    session = self.create_session(turn, &mut context.record).await?;
                    self.step(&session, &action, context)
                        .await
                        .map_err(StepError::into_error)?
                }
                other => other.map_err(StepError::into_error)?,
            };
            match end {
                StepEnd::Finished(step_usage) => usage = step_usage.or(usage),
                StepEnd::Paused(waiting) => {
                    context
                        .record
                        .upstream
                        .insert(WAITING.to_owned(), waiting.to_record());
                    return context
                        .emit(Event::RunFinished {
                            outcome: Outcome::Interrupted,
                            usage,
                        })
                        .await;
                }
                StepEnd::Cancelled => {
                    return context
                        .emit(Event::RunFinished {
                            outcome: Outcome::Cancelled,
                            usage,
                        })
                        .await;
                }
            }
        }
        context
            .emit(Event::RunFinished {
                outcome: Outcome::Completed,
                usage,
            })
            .await
    }

    /// `POST /v1/sessions`; the session id is kept for the conversation.
    async fn create_session(&self, turn: &Turn, record: &mut Record) -> Result<String> {
        let model = turn
            .options
            .model
            .clone()
            .or_else(|| self.model.clone())
            .ok_or_else(|| {
                Error::config(
                    "a CMDC upstream needs a model: set `model` in the route's [routes.translate]",
                )
            })?;
        let system: Vec<String> = turn
            .messages
            .iter()
            .filter(|m| matches!(m.role, Role::System | Role::Developer))
            .map(Message::text)
            .collect();
        let request = wire::CreateSession {
            model: Some(model),
            system_prompt: (!system.is_empty()).then(|| system.join("\n\n")),
            ..wire::CreateSession::default()
        };
        let response = self
            .upstream
            .post_json_to(
                self.upstream.join("/v1/sessions")?,
                json_body(&request)?,
                "application/json",
            )
            .await?;
        let response = upstream::check_status(response).await?;
        let body = crate::body::read_limited(response.into_body(), 64 * 1024)
            .await
            .map_err(|e| {
                Error::upstream_malformed(format!("reading the CMDC session failed: {e}"))
            })?;
        let created: wire::SessionCreated = serde_json::from_slice(&body).map_err(|e| {
            Error::upstream_malformed(format!("the CMDC gateway's session answer is not one: {e}"))
        })?;
        record
            .upstream
            .insert(SESSION_ID.to_owned(), created.session_id.clone());
        Ok(created.session_id)
    }

    /// Subscribes to the session's events, performs `action`, and reads the run it causes.
    async fn step(
        &self,
        session: &str,
        action: &Action,
        context: &mut RunContext,
    ) -> Result<StepEnd, StepError> {
        let events = self
            .upstream
            .get(self.session_uri(session, "/events")?, "text/event-stream")
            .await
            .map_err(StepError::from_status)?;
        let mut reader = SseReader::new(events.into_body(), MAX_EVENT_BYTES);
        let queued = self.act(session, action).await?;
        let mut guard = AbortGuard {
            upstream: self.upstream.clone(),
            session: session.to_owned(),
            armed: true,
        };
        let mut decoder = Decoder::default();
        if queued {
            if let Action::Prompt(text) = action {
                // The gateway runs our prompt after another run: its events come first.
                decoder.skip_until_prompt = Some(text.clone());
            }
        }
        let mut out = Vec::new();
        loop {
            let frame = match reader.next().await {
                Ok(Some(frame)) => frame,
                Ok(None) | Err(SseReadError::Body(_)) => return Err(Error::upstream_eof().into()),
                Err(SseReadError::Frame(e)) => {
                    return Err(Error::upstream_malformed(format!(
                        "reading the CMDC event stream failed: {e}"
                    ))
                    .into())
                }
            };
            let Some(name) = frame.event.as_deref() else {
                debug!("dropping a CMDC frame without an event name");
                continue;
            };
            let event = wire::Event::from_sse(name, &frame.data).map_err(|e| {
                Error::upstream_malformed(format!("the CMDC event `{name}` does not read: {e}"))
            })?;
            let Some(event) = event else {
                debug!(
                    event = name,
                    "dropping a CMDC event this proxy does not translate"
                );
                continue;
            };
            let end = decoder.decode(event, &mut out);
            for event in out.drain(..) {
                context.emit(event).await?;
            }
            match end {
                Ok(None) => {}
                Ok(Some(end)) => {
                    guard.armed = false;
                    return Ok(end);
                }
                Err(error) => {
                    guard.armed = false;
                    return Err(error.into());
                }
            }
        }
    }

    /// Performs one action; whether the gateway queued the prompt behind another run.
    async fn act(&self, session: &str, action: &Action) -> Result<bool, StepError> {
        let (path, body) = match action {
            Action::Prompt(text) => (
                "/prompt",
                json_body(&wire::Prompt {
                    text: Some(text.clone()),
                })?,
            ),
            Action::Approve(id) | Action::Reject(id) => (
                if matches!(action, Action::Approve(_)) {
                    "/approve"
                } else {
                    "/reject"
                },
                json_body(&wire::Decision {
                    approval_id: Some(id.clone()),
                })?,
            ),
            Action::Respond {
                reference,
                response,
            } => (
                "/respond",
                json_body(&wire::Answer {
                    reference: Some(reference.clone()),
                    response: Some(response.clone()),
                })?,
            ),
        };
        let response = self
            .upstream
            .post_json_to(self.session_uri(session, path)?, body, "application/json")
            .await?;
        let response = upstream::check_status(response)
            .await
            .map_err(StepError::from_status)?;
        if !matches!(action, Action::Prompt(_)) {
            return Ok(false);
        }
        let body = crate::body::read_limited(response.into_body(), 64 * 1024)
            .await
            .unwrap_or_default();
        Ok(serde_json::from_slice::<wire::PromptAccepted>(&body)
            .is_ok_and(|accepted| accepted.queued))
    }

    fn session_uri(&self, session: &str, path: &str) -> Result<Uri> {
        self.upstream.join(&format!("/v1/sessions/{session}{path}"))
    }
}

fn json_body<T: Serialize>(value: &T) -> Result<Bytes> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| Error::internal(format!("encoding a CMDC request failed: {e}")))
}

/// A step's failure: a session the gateway no longer has (404) can be created again; anything else is the
/// run's error.
#[derive(Debug)]
enum StepError {
    SessionGone(Error),
    Other(Error),
}

impl StepError {
    fn from_status(error: Error) -> Self {
        if error.upstream_status_code() == Some(StatusCode::NOT_FOUND.as_u16()) {
            Self::SessionGone(error)
        } else {
            Self::Other(error)
        }
    }

    fn is_session_gone(&self) -> bool {
        matches!(self, Self::SessionGone(_))
    }

    fn into_error(self) -> Error {
        match self {
            Self::SessionGone(error) | Self::Other(error) => error,
        }
    }
}

impl From<Error> for StepError {
    fn from(error: Error) -> Self {
        Self::Other(error)
    }
}

/// Asks the gateway to abort the session's run when a step is dropped mid-run (the client went away, the
/// route's timeout): `POST …/abort` (gateway 0.2+; a 0.1 gateway answers 404, which changes nothing).
struct AbortGuard {
    upstream: Upstream,
    session: String,
    armed: bool,
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let upstream = self.upstream.clone();
        let session = self.session.clone();
        tokio::spawn(async move {
            let Ok(uri) = upstream.join(&format!("/v1/sessions/{session}/abort")) else {
                return;
            };
            let body = Bytes::from_static(b"{\"reason\":\"user_cancelled\"}");
            let sent = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                upstream.post_json_to(uri, body, "application/json"),
            )
            .await;
            debug!(session = %session, answered = sent.is_ok(), "asked the CMDC gateway to abort the run");
        });
    }
}

// --- The turn ---------------------------------------------------------------------------------------------

impl Waiting {
    fn to_record(&self) -> String {
        match self {
            Self::Approval(id) => format!("approval:{id}"),
            Self::Question(reference) => format!("ask:{reference}"),
        }
    }

    fn from_record(text: &str) -> Option<Self> {
        match text.split_once(':')? {
            ("approval", id) => Some(Self::Approval(id.to_owned())),
            ("ask", reference) => Some(Self::Question(reference.to_owned())),
            _ => None,
        }
    }

    fn id(&self) -> &str {
        match self {
            Self::Approval(id) | Self::Question(id) => id,
        }
    }
}

/// What a turn asks of the gateway, in order: the answer to the paused run (or, when the turn moves on
/// without one, declining it), then the new text as a prompt.
fn plan(turn: &Turn, record: &mut Record) -> Result<Vec<Action>> {
    let mut actions = Vec::new();
    if let Some(waiting) = record
        .upstream
        .remove(WAITING)
        .as_deref()
        .and_then(Waiting::from_record)
    {
        let answer = turn.resume.iter().find(|r| r.interrupt_id == waiting.id());
        if answer.is_none() {
            info!(
                pause = waiting.id(),
                "the client moved on without answering the CMDC agent; declining"
            );
        }
        actions.push(match waiting {
            Waiting::Approval(id) => match answer.map(|a| a.approval().0) {
                Some(true) => Action::Approve(id),
                _ => Action::Reject(id),
            },
            Waiting::Question(reference) => Action::Respond {
                reference,
                response: answer
                    .and_then(|a| a.payload.as_ref())
                    .map(answer_text)
                    .unwrap_or_default(),
            },
        });
    }
    let text = new_text(&turn.messages);
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

/// An answer as the text CMDC takes: a JSON string is the text itself, other JSON its text.
fn answer_text(payload: &Value) -> String {
    match payload {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The turn's new user text (CMDC prompts are text only), blank-line separated. Tool results reach the
/// agent as labelled text; system messages only shape a new session.
fn new_text(messages: &[Message]) -> String {
    let mut parts = Vec::new();
    for message in messages {
        match message.role {
            Role::User => parts.push(message.text()),
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

// --- The events -------------------------------------------------------------------------------------------

/// Decodes one step's CMDC events into canonical events.
#[derive(Default)]
pub struct Decoder {
    /// The text message the deltas go to; a `message_start` begins a new one.
    text_id: Option<String>,
    reasoning_id: Option<String>,
    /// A queued prompt: the events of the runs before it are not ours.
    skip_until_prompt: Option<String>,
}

impl Decoder {
    /// Decodes one event. `Ok(Some(_))` when the step's run ended or paused; `Err` when it failed.
    fn decode(&mut self, event: wire::Event, out: &mut Vec<Event>) -> Result<Option<StepEnd>> {
        use wire::Event as W;
        if let Some(prompt) = &self.skip_until_prompt {
            if matches!(&event, W::PromptReceived { text } if text == prompt) {
                self.skip_until_prompt = None;
            }
            return Ok(None);
        }
        match event {
            W::PromptReceived { .. } | W::ToolCalls { .. } | W::ApprovalResolved { .. } => {}
            W::AgentStart {} => out.push(Event::RunStarted),
            W::MessageStart {} => self.text_id = None,
            W::MessageDelta { delta } if !delta.is_empty() => {
                let message_id = self.text_id.get_or_insert_with(|| new_id("msg")).clone();
                out.push(Event::TextDelta { message_id, delta });
            }
            W::ThinkingStart {} => self.reasoning_id = None,
            W::ThinkingDelta { delta } if !delta.is_empty() => {
                let message_id = self
                    .reasoning_id
                    .get_or_insert_with(|| new_id("reasoning"))
                    .clone();
                out.push(Event::ReasoningDelta { message_id, delta });
            }
            W::MessageDelta { .. } | W::ThinkingDelta { .. } => {}
            W::ToolExecutionStart {
                tool_name,
                call_id,
                args,
            } => {
                out.push(Event::ToolCallStart {
                    call_id: call_id.clone(),
                    name: tool_name,
                    parent_message_id: None,
                });
                out.push(Event::ToolCallArgs {
                    call_id: call_id.clone(),
                    delta: args.to_string(),
                });
                out.push(Event::ToolCallEnd { call_id });
            }
            W::ToolExecutionEnd {
                call_id,
                status,
                result,
                ..
            } => out.push(Event::ToolResult {
                call_id,
                message_id: String::new(),
                content: answer_text(&result),
                is_error: status == "error",
            }),
            W::ApprovalRequired {
                approval_id,
                tool_name,
                args,
                hint,
                ..
            } => {
                out.push(Event::Interrupt(Interrupt {
                    id: approval_id.clone(),
                    kind: InterruptKind::Approval {
                        tool: tool_name,
                        args,
                        hint: Some(hint).filter(|hint| !hint.is_empty()),
                    },
                }));
                return Ok(Some(StepEnd::Paused(Waiting::Approval(approval_id))));
            }
            W::AskUser {
                reference,
                question,
                options,
            } => {
                out.push(Event::Interrupt(Interrupt {
                    id: reference.clone(),
                    kind: InterruptKind::Question {
                        text: question,
                        options: options.unwrap_or_default(),
                    },
                }));
                return Ok(Some(StepEnd::Paused(Waiting::Question(reference))));
            }
            W::Error { reason } => return Err(Error::upstream_agent("CMDC_ERROR", reason)),
            W::AgentEnd { token_usage, .. } => {
                let usage = token_usage.map(|usage| Usage {
                    input_tokens: Some(usage.prompt_tokens),
                    output_tokens: Some(usage.completion_tokens),
                    total_tokens: Some(usage.total_tokens),
                });
                return Ok(Some(StepEnd::Finished(usage)));
            }
            W::AgentAbort { reason } => {
                return match reason.as_str() {
                    "user_cancelled" | "aborted" => Ok(Some(StepEnd::Cancelled)),
                    _ => Err(Error::upstream_agent("agent_abort", reason)),
                };
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::{Resume, ResumeStatus};

    fn user(text: &str) -> Message {
        Message::text_message(new_id("msg"), Role::User, text)
    }

    fn waiting(pause: &str) -> Record {
        let mut record = Record::default();
        record.upstream.insert(WAITING.to_owned(), pause.to_owned());
        record
    }

    fn answer(id: &str, payload: Value) -> Resume {
        Resume {
            interrupt_id: id.into(),
            status: ResumeStatus::Resolved,
            payload: Some(payload),
        }
    }

    #[test]
    fn new_user_text_is_one_prompt_and_system_messages_stay_out() {
        let turn = Turn {
            messages: vec![
                Message::text_message("s", Role::System, "be brief"),
                user("hello"),
                user("and more"),
            ],
            ..Turn::default()
        };
        assert_eq!(
            plan(&turn, &mut Record::default()).unwrap(),
            [Action::Prompt("hello\n\nand more".into())]
        );
        assert!(plan(&Turn::default(), &mut Record::default())
            .unwrap_err()
            .is_client());
    }

    #[test]
    fn answers_resolve_the_paused_run_before_anything_else() {
        let approved = Turn {
            resume: vec![answer("apr_1", json!("yes"))],
            messages: vec![user("then this")],
            ..Turn::default()
        };
        let mut record = waiting("approval:apr_1");
        assert_eq!(
            plan(&approved, &mut record).unwrap(),
            [
                Action::Approve("apr_1".into()),
                Action::Prompt("then this".into())
            ]
        );
        assert!(!record.upstream.contains_key(WAITING));

        let answered = Turn {
            resume: vec![answer("ask_1", json!("Paris"))],
            ..Turn::default()
        };
        assert_eq!(
            plan(&answered, &mut waiting("ask:ask_1")).unwrap(),
            [Action::Respond {
                reference: "ask_1".into(),
                response: "Paris".into()
            }]
        );
    }

    #[test]
    fn moving_on_without_an_answer_declines_the_pause() {
        let moved_on = Turn {
            messages: vec![user("something else")],
            ..Turn::default()
        };
        assert_eq!(
            plan(&moved_on, &mut waiting("approval:apr_1")).unwrap(),
            [
                Action::Reject("apr_1".into()),
                Action::Prompt("something else".into())
            ]
        );
    }

    fn decode_all(events: &[(&str, Value)]) -> (Vec<Event>, Option<Result<StepEnd>>) {
        let mut decoder = Decoder::default();
        let mut out = Vec::new();
        for (name, data) in events {
            let event = wire::Event::from_sse(name, &data.to_string())
                .unwrap()
                .unwrap();
            match decoder.decode(event, &mut out) {
                Ok(None) => {}
                end => return (out, Some(end.map(|end| end.unwrap()))),
            }
        }
        (out, None)
    }

    #[test]
    fn a_run_becomes_text_tool_calls_and_its_end() {
        let (events, end) = decode_all(&[
            ("prompt_received", json!({"text": "hi"})),
            ("agent_start", json!({})),
            ("message_start", json!({})),
            ("message_delta", json!({"delta": "Let me "})),
            ("message_delta", json!({"delta": "check."})),
            ("tool_calls", json!({"count": 1})),
            (
                "tool_execution_start",
                json!({"toolName": "Shell", "callId": "tc_1", "args": {"command": "ls"}}),
            ),
            (
                "tool_execution_end",
                json!({"toolName": "Shell", "callId": "tc_1", "status": "error", "result": "denied"}),
            ),
            ("message_start", json!({})),
            ("message_delta", json!({"delta": "Done"})),
            (
                "agent_end",
                json!({"messageCount": 2, "lastMessage": null,
                       "tokenUsage": {"promptTokens": 5, "completionTokens": 3, "totalTokens": 8}}),
            ),
        ]);
        assert_eq!(events.len(), 8, "{events:#?}");
        let Event::TextDelta {
            message_id: first, ..
        } = &events[1]
        else {
            panic!("{events:?}")
        };
        let Event::TextDelta {
            message_id: second, ..
        } = &events[7]
        else {
            panic!("{events:?}")
        };
        assert_ne!(first, second, "a message_start begins a new message");
        assert!(
            matches!(&events[4], Event::ToolCallArgs { delta, .. } if delta == r#"{"command":"ls"}"#)
        );
        assert!(
            matches!(&events[6], Event::ToolResult { content, is_error: true, .. } if content == "denied")
        );
        let Some(Ok(StepEnd::Finished(Some(usage)))) = end else {
            panic!("{end:?}")
        };
        assert_eq!(usage.total_tokens, Some(8));
    }

    #[test]
    fn pauses_are_interrupts_named_by_the_gateways_ids() {
        let (events, end) = decode_all(&[(
            "approval_required",
            json!({"approvalId": "apr_1", "toolName": "Shell", "args": {"command": "rm"},
                   "hint": "", "requestedAt": null}),
        )]);
        assert!(
            matches!(&events[0], Event::Interrupt(Interrupt { id, kind: InterruptKind::Approval { tool, hint: None, .. } })
            if id == "apr_1" && tool == "Shell")
        );
        assert!(matches!(end, Some(Ok(StepEnd::Paused(Waiting::Approval(id)))) if id == "apr_1"));

        let (events, _) = decode_all(&[(
            "ask_user",
            json!({"ref": "ask_1", "question": "Which?", "options": null}),
        )]);
        assert!(
            matches!(&events[0], Event::Interrupt(Interrupt { id, kind: InterruptKind::Question { options, .. } })
            if id == "ask_1" && options.is_empty())
        );
    }

    #[test]
    fn errors_and_aborts_end_the_step() {
        let (_, end) = decode_all(&[("error", json!({"reason": "provider down"}))]);
        assert!(matches!(end, Some(Err(e)) if e.message() == "provider down"));
        let (_, end) = decode_all(&[("agent_abort", json!({"reason": "user_cancelled"}))]);
        assert!(matches!(end, Some(Ok(StepEnd::Cancelled))));
        let (_, end) = decode_all(&[("agent_abort", json!({"reason": "max_turns_exceeded"}))]);
        assert!(matches!(end, Some(Err(e)) if e.message() == "max_turns_exceeded"));
    }

    #[test]
    fn a_queued_prompt_skips_the_runs_before_it() {
        let mut decoder = Decoder {
            skip_until_prompt: Some("mine".into()),
            ..Decoder::default()
        };
        let mut out = Vec::new();
        for (name, data) in [
            ("message_delta", json!({"delta": "someone else's"})),
            ("agent_end", json!({})),
            ("prompt_received", json!({"text": "mine"})),
            ("message_delta", json!({"delta": "ours"})),
        ] {
            let event = wire::Event::from_sse(name, &data.to_string())
                .unwrap()
                .unwrap();
            assert!(decoder.decode(event, &mut out).unwrap().is_none());
        }
        assert!(matches!(&out[..], [Event::TextDelta { delta, .. }] if delta == "ours"));
    }
}
