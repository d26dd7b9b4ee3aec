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
//!
//! Client tools are bridged as callback tools: each is registered on the session with a `callbackUrl` under
//! the route's own path on the proxy. When the gateway calls one, the proxy holds the callback open, shows
//! the client the tool call (the turn ends, as any client tool call ends it), and answers the held
//! callback with the result the client's next turn carries; then it reads on.
//!
//! Anyone who reaches the proxy can POST to the callback endpoint, so each session's callback URLs carry a
//! random 128-bit token (`?token=`), and the endpoint takes only a call of a tool registered on that session,
//! while a step reads the session's run. Anything else is refused (403) and never shown to the client.

mod decode;
mod encode;
mod handover;
#[cfg(test)]
mod tests;

pub use decode::Decoder;
use encode::plan;
use handover::{Accepts, Elsewhere, HandedAnswer};

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info};

use super::{wire, OutboundOptions};
use crate::body::{self, Body, BodyLimit};
use crate::config::RouteConfig;
use crate::error::{Error, Result};
use crate::face::{OutboundFace, UpstreamDecoder};
use crate::model::{Event, History, Message, Outcome, Role, Turn, Usage};
use crate::relay::{Next, UpstreamEvents};
use crate::route_state::RouteState;
use crate::sse;
use crate::store::{Documents, Record, UpstreamId, UpstreamState};
use crate::sync::lock;
use crate::translate::RunContext;
use crate::upstream::{self, Upstream, UpstreamBody};

/// What a conversation remembers of its gateway session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Conversation {
    /// The gateway session.
    session_id: Option<String>,
    /// What the session's run waits on.
    waiting: Option<Waiting>,
    /// Set while a step reads a run: left behind when the client went away mid-run, so the next turn knows
    /// the gateway may still be running it.
    running: bool,
    /// The system prompt the session was created with, for a session created again.
    system_prompt: Option<String>,
    /// The client tools registered on the session as callback tools.
    registered: BTreeSet<String>,
    /// The token of the session's callback URLs (32 hex digits).
    callback_token: Option<String>,
}

impl UpstreamState for Conversation {
    const OWNER: &'static str = "cmdc";
    const IDS: &'static [(&'static str, &'static str)] = &[("session_id", "cmdc.session.id")];
}

/// Where under the route the gateway calls the client's tools.
const CALLBACK_PATH: &str = "/agent-bridge/cmdc-callback";
/// The largest callback body accepted.
const MAX_CALLBACK_BYTES: usize = 1024 * 1024;

pub struct Outbound {
    upstream: Upstream,
    model: Option<String>,
    /// The route's callback endpoint: its path on the proxy, and its URL as the gateway reaches it.
    callback_path: String,
    callback_url: String,
    /// How long a held callback may wait for the client (the route's whole-run timeout).
    callback_timeout: Duration,
    /// The callback body: [`MAX_CALLBACK_BYTES`], within the route's `body_timeout`.
    callback_body: BodyLimit,
    callbacks: Arc<Callbacks>,
}

/// The callbacks of the route's sessions.
#[derive(Default)]
struct Callbacks {
    /// The step reading each session's run, by session id: where that session's callbacks go.
    listening: Mutex<HashMap<String, Listener>>,
    /// Callbacks held open until the client answers, by call id.
    held: Mutex<HashMap<String, oneshot::Sender<wire::CallbackAnswer>>>,
    /// The store replicas share, where the route has one: calls and results reaching another replica.
    elsewhere: std::sync::OnceLock<Elsewhere>,
}

/// A step reading a session's run, and which callbacks it takes.
#[derive(Clone)]
struct Listener {
    accepts: Accepts,
    sender: mpsc::Sender<wire::ToolCallback>,
}

impl Callbacks {
    fn listen(&self, session: &str, listener: Listener) {
        lock(&self.listening).insert(session.to_owned(), listener);
    }

    fn stop_listening(&self, session: &str) {
        lock(&self.listening).remove(session);
    }

    fn listener(&self, session: &str) -> Option<Listener> {
        lock(&self.listening).get(session).cloned()
    }

    /// Holds a call until the client answers it; `None` when a call of that id is held already.
    fn hold(&self, call_id: &str) -> Option<oneshot::Receiver<wire::CallbackAnswer>> {
        let mut held = lock(&self.held);
        if held.contains_key(call_id) {
            return None;
        }
        let (sender, receiver) = oneshot::channel();
        held.insert(call_id.to_owned(), sender);
        Some(receiver)
    }

    fn release(&self, call_id: &str) -> Option<oneshot::Sender<wire::CallbackAnswer>> {
        lock(&self.held).remove(call_id)
    }
}

/// One thing that makes the agent run.
#[derive(Debug, Clone, PartialEq)]
enum Action {
    Prompt(String),
    Approve(String),
    Reject(String),
    Respond {
        reference: String,
        response: String,
    },
    /// The client's answer to a held callback.
    Callback {
        call_id: String,
        answer: CallbackAnswer,
    },
    /// The client dismissed the pause: the run is aborted (gateway 0.2+), or else declined.
    Abort {
        decline: Box<Action>,
    },
}

/// What a held callback is answered with (`{"result"}` / `{"error"}`).
#[derive(Debug, Clone, PartialEq)]
enum CallbackAnswer {
    Result(String),
    Error(String),
}

/// The pause a gateway run waits on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Waiting {
    Approval(String),
    Question(String),
    /// A client tool's call, held open by the proxy.
    Callback(String),
}

/// How one step's run went.
#[derive(Debug, PartialEq)]
pub enum StepEnd {
    Finished(Option<Usage>),
    Paused(Waiting),
    Cancelled,
}

impl Outbound {
    /// `local` is the address the proxy listens on: the callback URL's default host. The callbacks awaited
    /// are `kept` across the route's reloads.
    pub fn new(
        upstream: Upstream,
        route: &RouteConfig,
        options: OutboundOptions,
        local: SocketAddr,
        kept: &RouteState,
    ) -> Result<Self> {
        let callback_path = format!("{}{CALLBACK_PATH}", route.path.trim_end_matches('/'));
        let base = match &options.proxy_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None if local.ip().is_unspecified() => format!("http://127.0.0.1:{}", local.port()),
            None => format!("http://{local}"),
        };
        Ok(Self {
            upstream,
            model: options.model,
            callback_url: format!("{base}{callback_path}"),
            callback_path,
            callback_timeout: route.timeout,
            callback_body: BodyLimit {
                max_bytes: MAX_CALLBACK_BYTES,
                timeout: route.body_timeout,
            },
            // A run the route's previous build started still takes its callbacks.
            callbacks: kept.keep((), Callbacks::default),
        })
    }

    async fn callback(&self, request: Request<Incoming>) -> Result<wire::CallbackAnswer> {
        body::expect_method(&request, Method::POST)?;
        let token = query_token(request.uri().query().unwrap_or("")).to_owned();
        let bytes = body::read_request(request.into_body(), self.callback_body).await?;
        let call: wire::ToolCallback = serde_json::from_slice(&bytes)
            .map_err(|e| Error::bad_request(format!("not a CMDC tool callback: {e}")))?;
        let listener = self
            .callbacks
            .listener(&call.session_id)
            .filter(|listener| listener.accepts.takes(&token, &call));
        let call_id = call.call_id.clone();
        let handed = match (&listener, self.callbacks.elsewhere.get()) {
            (None, Some(elsewhere)) => elsewhere.hand_call(&token, &call).await,
            _ => None,
        };
        if listener.is_none() && handed.is_none() {
            return Err(Error::forbidden(
                "no call of this tool is awaited with this token",
            ));
        }
        let held = self
            .callbacks
            .hold(&call_id)
            .ok_or_else(|| Error::forbidden("this call is held already"))?;
        if let Some(listener) = listener {
            if listener.sender.send(call).await.is_err() {
                self.callbacks.release(&call_id);
                return Err(Error::cancelled("the client went away"));
            }
        }
        let answer = answered(held, handed);
        let answered = tokio::time::timeout(self.callback_timeout, answer).await;
        self.callbacks.release(&call_id);
        match answered {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err(Error::cancelled(
                "the client moved on without running the tool",
            )),
            Err(_) => Err(Error::upstream_timeout(
                "the client did not run the tool in time",
            )),
        }
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
        let system_prompt = record.update_upstream(|conversation: &mut Conversation| {
            // A session created again (the first one died) keeps the instructions of the first.
            if !system.is_empty() {
                conversation.system_prompt = Some(system.join("\n\n"));
            }
            // A new session has none of the client's tools yet, and gets a token of its own for them.
            conversation.registered.clear();
            conversation.callback_token = None;
            conversation.system_prompt.clone()
        });
        let request = wire::CreateSession {
            model: Some(model),
            system_prompt,
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
        record.update_upstream(|conversation: &mut Conversation| {
            conversation.session_id = Some(created.session_id.clone())
        });
        Ok(created.session_id)
    }

    /// Registers the turn's client tools not registered on the session yet as callback tools.
    async fn register_tools(&self, session: &str, turn: &Turn, record: &mut Record) -> Result<()> {
        let registered = record.upstream_state::<Conversation>().registered;
        let new: Vec<_> = turn
            .tools
            .iter()
            .filter(|t| !registered.contains(&t.name))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let token = record.update_upstream(|conversation: &mut Conversation| {
            conversation
                .callback_token
                // 128 random bits: the token is the callback endpoint's only credential.
                .get_or_insert_with(crate::model::random_hex)
                .clone()
        });
        for tool in new {
            let request = wire::CallbackTool {
                name: tool.name.clone(),
                description: Some(tool.description.clone()).filter(|d| !d.is_empty()),
                callback_url: format!("{}?token={token}", self.callback_url),
                parameters: Some(tool.parameters.clone()),
                timeout_ms: Some(
                    u64::try_from(self.callback_timeout.as_millis()).unwrap_or(u64::MAX),
                ),
            };
            let uri = self.session_uri(session, "/tools")?;
            let response = self
                .upstream
                .post_json_to(uri, json_body(&request)?, "application/json")
                .await?;
            upstream::check_status(response).await?;
            record.update_upstream(|conversation: &mut Conversation| {
                conversation.registered.insert(tool.name.clone())
            });
        }
        Ok(())
    }

    /// Subscribes to the session's events, performs `action`, and reads the run it causes. While it reads,
    /// the record says so: a step dropped mid-run (the client went away) leaves that behind.
    async fn step(
        &self,
        session: &str,
        action: &Action,
        context: &mut RunContext,
    ) -> Result<StepEnd, StepError> {
        set_running(&mut context.record, true);
        let end = self.read_step(session, action, context).await;
        set_running(&mut context.record, false);
        end
    }

    async fn read_step(
        &self,
        session: &str,
        action: &Action,
        context: &mut RunContext,
    ) -> Result<StepEnd, StepError> {
        let mut reader = self.subscribe(session).await?;
        let (callback_sender, mut callbacks) = mpsc::channel(4);
        let conversation: Conversation = context.record.upstream_state();
        let accepts = Accepts {
            token: conversation.callback_token,
            tools: conversation.registered,
        };
        let mut handed = match self.callbacks.elsewhere.get() {
            Some(elsewhere) => elsewhere.listen(session, &accepts).await,
            None => None,
        };
        let listener = Listener {
            accepts,
            sender: callback_sender,
        };
        self.callbacks.listen(session, listener);
        let _listening = StopListening {
            callbacks: &self.callbacks,
            session,
        };
        let mut guard = AbortGuard {
            upstream: self.upstream.clone(),
            session: session.to_owned(),
            armed: true,
        };
        let queued = self.act(session, action).await.inspect_err(|_| {
            guard.armed = false;
        })?;
        let mut decoder = Decoder::default();
        if let Action::Callback { call_id, .. } = action {
            // The client ran the tool itself: the gateway's report of its end is not news to the client.
            decoder.answered.insert(call_id.clone());
        }
        if queued {
            if let Action::Prompt(text) = action {
                // The gateway runs our prompt after another run: its events come first.
                decoder.skip_until_prompt = Some(text.clone());
            }
        }
        let mut out = Vec::new();
        loop {
            let next = tokio::select! {
                next = reader.next_of(context) => next,
                Some(call) = next_call(&mut callbacks, handed.as_mut()) => {
                    let waiting = decoder.callback(call, &mut out);
                    for event in out.drain(..) {
                        context.emit(event).await?;
                    }
                    guard.armed = false;
                    return Ok(StepEnd::Paused(waiting));
                }
            };
            // A body that ends early, or a frame that does not read, leaves the gateway's run to the guard.
            let over = match next? {
                Next::Frame(frame) => decoder.frame(&frame, &mut out)?,
                Next::End(end) => {
                    decoder.end(end, &mut out)?;
                    true
                }
            };
            if std::mem::take(&mut decoder.resubscribe) {
                reader = self.subscribe(session).await?;
            }
            for event in out.drain(..) {
                context.emit(event).await?;
            }
            if over {
                // The run ended, paused or failed on the gateway's side: nothing is left to abort.
                guard.armed = false;
                return decoder.take_end().map_err(StepError::from);
            }
        }
    }

    /// A run the client left may still be going (a 0.1 gateway cannot abort it): a prompt now would be
    /// queued behind it and start as soon as it ends, before a new subscription could see it. So the rest of
    /// that run is read (and dropped) first.
    async fn await_abandoned_run(&self, session: &str) -> Result<()> {
        let uri = self.session_uri(session, "")?;
        let response = self.upstream.get(uri, "application/json").await?;
        let body = crate::body::read_limited(response.into_body(), 64 * 1024)
            .await
            .unwrap_or_default();
        let working = serde_json::from_slice::<wire::SessionInfo>(&body)
            .is_ok_and(|info| info.state == "working");
        if !working {
            return Ok(());
        }
        info!(session = %session, "the CMDC session still runs the turn the client left; waiting for its end");
        let mut reader = self
            .subscribe(session)
            .await
            .map_err(StepError::into_error)?;
        loop {
            match reader.next().await {
                Ok(Next::Frame(frame))
                    if matches!(frame.event.as_deref(), Some("agent_end" | "agent_abort")) =>
                {
                    return Ok(())
                }
                Ok(Next::Frame(_)) => {}
                // The stream closes after the run's end.
                Ok(Next::End(_)) | Err(_) => return Ok(()),
            }
        }
    }

    /// `GET …/events`: the session's event stream, from now on.
    async fn subscribe(&self, session: &str) -> Result<UpstreamEvents<UpstreamBody>, StepError> {
        let events = self
            .upstream
            .get(self.session_uri(session, "/events")?, "text/event-stream")
            .await
            .map_err(StepError::from_status)?;
        Ok(UpstreamEvents::new(
            events.into_body(),
            "CMDC",
            sse::MAX_EVENT_BYTES,
        ))
    }

    /// Performs one action; whether the gateway queued the prompt behind another run.
    async fn act(&self, session: &str, action: &Action) -> Result<bool, StepError> {
        let (path, body) = match action {
            Action::Callback { call_id, answer } => {
                self.answer_callback(call_id, answer).await;
                return Ok(false);
            }
            action => request_of(action)?,
        };
        let mut response = self
            .upstream
            .post_json_to(self.session_uri(session, path)?, body, "application/json")
            .await?;
        if let Action::Abort { decline } = action {
            if response.status() == StatusCode::NOT_FOUND {
                debug!("the CMDC gateway has no abort (0.1); declining instead");
                let (path, body) = request_of(decline)?;
                response = self
                    .upstream
                    .post_json_to(self.session_uri(session, path)?, body, "application/json")
                    .await?;
            }
        }
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

    /// Answers a held callback with the client's result (a callback the gateway stopped waiting for is
    /// gone: the agent went on without it).
    /// Another replica may hold it: then the result is handed over, and that replica answers it if the
    /// gateway still waits.
    async fn answer_callback(&self, call_id: &str, answer: &CallbackAnswer) {
        let answer = match answer {
            CallbackAnswer::Result(text) => wire::CallbackAnswer::Result(text.clone()),
            CallbackAnswer::Error(text) => wire::CallbackAnswer::Error(text.clone()),
        };
        match (
            self.callbacks.release(call_id),
            self.callbacks.elsewhere.get(),
        ) {
            // The callback's request may have ended meanwhile (the gateway gave up).
            (Some(held), _) => drop(held.send(answer)),
            (None, Some(elsewhere)) => elsewhere.answer(call_id, &answer).await,
            (None, None) => {
                info!(call = %call_id, "the CMDC gateway no longer waits for this tool's result");
            }
        }
    }

    fn session_uri(&self, session: &str, path: &str) -> Result<Uri> {
        self.upstream.join(&format!("/v1/sessions/{session}{path}"))
    }
}

/// The next call for a step: from the gateway's request to this replica, or handed over by another.
async fn next_call(
    here: &mut mpsc::Receiver<wire::ToolCallback>,
    handed: Option<&mut handover::HandedCalls>,
) -> Option<wire::ToolCallback> {
    match handed {
        Some(handed) => tokio::select! {
            call = here.recv() => call,
            call = handed.next() => Some(call),
        },
        None => here.recv().await,
    }
}

/// The client's result for a held call: given to this replica, or handed over by another.
async fn answered(
    held: oneshot::Receiver<wire::CallbackAnswer>,
    handed: Option<HandedAnswer>,
) -> Option<wire::CallbackAnswer> {
    match handed {
        Some(mut handed) => tokio::select! {
            answer = held => answer.ok(),
            answer = handed.next() => Some(answer),
        },
        None => held.await.ok(),
    }
}

/// The endpoint under the session and the body of an action that is a gateway request.
fn request_of(action: &Action) -> Result<(&'static str, Bytes)> {
    match action {
        Action::Prompt(text) => Ok((
            "/prompt",
            json_body(&wire::Prompt {
                text: Some(text.clone()),
            })?,
        )),
        Action::Approve(id) => Ok(("/approve", decision(id)?)),
        Action::Reject(id) => Ok(("/reject", decision(id)?)),
        Action::Respond {
            reference,
            response,
        } => Ok((
            "/respond",
            json_body(&wire::Answer {
                reference: Some(reference.clone()),
                response: Some(response.clone()),
            })?,
        )),
        Action::Abort { .. } => Ok((
            "/abort",
            Bytes::from_static(br#"{"reason":"user_cancelled"}"#),
        )),
        Action::Callback { .. } => {
            Err(Error::internal("a callback's answer is no gateway request"))
        }
    }
}

fn decision(approval_id: &str) -> Result<Bytes> {
    json_body(&wire::Decision {
        approval_id: Some(approval_id.to_owned()),
    })
}

/// The `token` parameter of a callback's query ("" when absent).
fn query_token(query: &str) -> &str {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
        .unwrap_or("")
}

fn set_running(record: &mut Record, running: bool) {
    record.update_upstream(|conversation: &mut Conversation| conversation.running = running);
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

/// Stops handing a session's callbacks to a step when the step ends.
struct StopListening<'a> {
    callbacks: &'a Callbacks,
    session: &'a str,
}

impl Drop for StopListening<'_> {
    fn drop(&mut self) {
        self.callbacks.stop_listening(self.session);
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
        let abort = async move {
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
        };
        // In the run's trace, whichever task sends it.
        tokio::spawn(opentelemetry::context::FutureExt::with_current_context(
            abort,
        ));
    }
}

impl OutboundFace for Outbound {
    fn upstream_ids(&self, record: &Record) -> Vec<UpstreamId> {
        record.upstream_ids::<Conversation>()
    }

    fn history(&self) -> History {
        super::ROW.history
    }

    async fn run(&self, turn: &Turn, context: &mut RunContext) -> Result<()> {
        let actions = plan(turn, &mut context.record)?;
        let mut session = match context.record.upstream_state::<Conversation>().session_id {
            Some(session) => session,
            None => self.create_session(turn, &mut context.record).await?,
        };
        self.register_tools(&session, turn, &mut context.record)
            .await?;
        let abandoned = context
            .record
            .update_upstream(|conversation: &mut Conversation| {
                std::mem::take(&mut conversation.running)
            });
        if abandoned {
            self.await_abandoned_run(&session).await?;
        }
        let mut usage = None;
        for action in actions {
            let end = match self.step(&session, &action, context).await {
                Err(gone) if gone.is_session_gone() && matches!(action, Action::Prompt(_)) => {
                    info!(session = %session, "the CMDC session is gone (its history with it); creating a new one");
                    session = self.create_session(turn, &mut context.record).await?;
                    self.register_tools(&session, turn, &mut context.record)
                        .await?;
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
                        .update_upstream(|conversation: &mut Conversation| {
                            conversation.waiting = Some(waiting.clone())
                        });
                    // A client tool's call ends the turn as any client tool call does; the others pause it.
                    let outcome = match waiting {
                        Waiting::Callback(_) => Outcome::Completed,
                        Waiting::Approval(_) | Waiting::Question(_) => Outcome::Interrupted,
                    };
                    return context.emit(Event::RunFinished { outcome, usage }).await;
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

    fn serves_callback(&self, path: &str) -> bool {
        path == self.callback_path
    }

    fn keep_in(&self, documents: &Documents) {
        if let Some(elsewhere) = Elsewhere::new(documents.clone()) {
            let _ = self.callbacks.elsewhere.set(elsewhere);
        }
    }

    /// A call of a client tool by the gateway: handed to the step reading that session's run, and held
    /// open until the client answers (within the route's timeout). Always `{"error"}` on failure, which the
    /// agent sees as the tool's failure: 200 when the client did not answer, the error's status (403, 400)
    /// for a call that is refused.
    async fn serve_callback(&self, request: Request<Incoming>) -> Response<Body> {
        let (status, answer) = match self.callback(request).await {
            Ok(answer) => (StatusCode::OK, answer),
            Err(error) if error.is_client() => {
                info!("a CMDC tool callback was refused: {error}");
                let status = error.http_status();
                (
                    status,
                    wire::CallbackAnswer::Error(error.message().to_owned()),
                )
            }
            Err(error) => {
                info!("a CMDC tool callback was not answered by the client: {error}");
                let answer = wire::CallbackAnswer::Error(error.message().to_owned());
                (StatusCode::OK, answer)
            }
        };
        let json = serde_json::to_vec(&answer).unwrap_or_default();
        body::json_response(status, json)
    }
}
