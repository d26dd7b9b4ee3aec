//! A scripted CMDC gateway for the tests (the upstream of a CMDC outbound), written to `specs/cmdc.md`
//! §1–3 and §6: an in-process HTTP/1.1 server on `127.0.0.1:0`, stopped when dropped.
//!
//! It behaves as the real gateway does where it matters to a client:
//!
//! - every `/v1/*` call needs the API key ([`KEY`]) as `X-API-Key` or `Authorization: Bearer` (401
//!   `unauthorized` otherwise); errors are `{"error": "<code>", "message": "<text>"}`;
//! - `POST /v1/sessions` needs `model` (422 `create_failed`) and answers 201 `{sessionId, status}`;
//! - `POST …/prompt` only enqueues (202 `{requestId, sessionId, queued}`; 400 without `text`, 404
//!   `not_found` for an unknown session); one run at a time per session, later prompts queue;
//! - the run's events go to `GET …/events` (SSE, `text/event-stream; charset=utf-8`, every frame
//!   `event: <name>\ndata: <json>\n\n`, closed after `agent_end`/`agent_abort`) and are **subscribe-on-connect**:
//!   an event published while no subscriber is attached is lost (and counted, [`Gateway::lost`]) — a client
//!   that prompts before it subscribes misses the head of the run, or all of a fast one;
//! - a run pauses on `approval_required` until `POST …/approve|reject {approvalId}` and on `ask_user` until
//!   `POST …/respond {ref, response}`, inside the same run; `POST …/abort` ends the active run with
//!   `agent_abort {reason:"user_cancelled"}` (202);
//! - callback tools registered with `POST …/tools` are called over HTTP by a [`Step::CallTool`];
//! - [`Options`] make it a 0.1.x gateway (no `/abort`) or change the heartbeat.
//!
//! What a run does is scripted per prompt: `script(prompt text, the session's history)` returns the
//! [`Step`]s played after the gateway's own `prompt_received` and `agent_start`. The history holds the
//! session's earlier prompts, so a script can answer from what the session was told ([`memory`]).
//!
//! ```ignore
//! let gateway = Gateway::start(|text, _history| {
//!     [cmdc::text(&["Hel", "lo"]), vec![cmdc::end("Hello")]].concat()
//! })
//! .await;
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{AbortHandle, JoinHandle};

use super::{within, Received, SseStream, WAIT};

type Body = BoxBody<Bytes, io::Error>;

/// The API key the gateway accepts.
pub const KEY: &str = "sk-cmdc-test-key";

/// The token usage every [`end`] reports.
pub const USAGE: (u64, u64, u64) = (50, 5, 55);

/// What a session has been told before the prompt being answered.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub model: String,
    /// The session's earlier prompts, oldest first.
    pub prompts: Vec<String>,
    /// The callback tools registered on the session (`POST …/tools`), in order.
    pub tools: Vec<String>,
}

/// Picks the steps of a run: the prompt's text and the session's history in.
type Script = dyn Fn(&str, &History) -> Vec<Step> + Send + Sync;

/// What an answered question does next: the answer's text in.
type Then = Arc<dyn Fn(&str) -> Vec<Step> + Send + Sync>;

/// One step of a scripted run.
#[derive(Clone)]
pub enum Step {
    /// Publishes one event (`agent_end`/`agent_abort` end the run).
    Publish(String, Value),
    Delay(Duration),
    /// Publishes `approval_required`, waits for `approve`/`reject` of `id`, publishes `approval_resolved`,
    /// then plays the branch the answer chose.
    Approval {
        id: String,
        tool: String,
        args: Value,
        hint: String,
        then_approved: Vec<Step>,
        then_rejected: Vec<Step>,
    },
    /// Publishes `ask_user`, waits for `respond` to `reference`, then plays `then(answer)`.
    Ask {
        reference: String,
        question: String,
        options: Option<Vec<String>>,
        then: Then,
    },
    /// Calls a callback tool registered on the session (`POST …/tools`): `tool_calls`,
    /// `tool_execution_start`, the POST of `{callId, toolName, args, sessionId}` to its `callbackUrl` (held
    /// up to its `timeoutMs`, at most [`WAIT`]), `tool_execution_end` (`ok` with the `result`, `error` for an
    /// `{"error"}` answer, a failed call or an unknown tool), then `then(result or error text)`.
    CallTool {
        call_id: String,
        tool: String,
        args: Value,
        then: Then,
    },
    /// Never goes on (until the run is aborted or the session killed).
    Hang,
    /// Waits until the gate is opened ([`Gate::open`]), at most [`WAIT`].
    Wait(Gate),
}

/// Where a [`Step::Wait`] holds its run until the test opens it; open once, open for good.
#[derive(Clone)]
pub struct Gate(Arc<watch::Sender<bool>>);

impl Default for Gate {
    fn default() -> Gate {
        Gate(Arc::new(watch::channel(false).0))
    }
}

impl Gate {
    /// Lets every run waiting at this gate, and every later one, go on.
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    async fn opened(&self) -> Result<(), watch::error::RecvError> {
        self.0.subscribe().wait_for(|open| *open).await.map(|_| ())
    }
}

// --- Steps ------------------------------------------------------------------------------------------------

/// One event.
pub fn event(name: &str, data: Value) -> Step {
    Step::Publish(name.to_owned(), data)
}

pub fn delay(millis: u64) -> Step {
    Step::Delay(Duration::from_millis(millis))
}

pub fn hang() -> Step {
    Step::Hang
}

/// Waits at `gate` until it is opened.
pub fn wait(gate: &Gate) -> Step {
    Step::Wait(gate.clone())
}

/// One LLM reply: `message_start`, then a `message_delta` per delta.
pub fn text(deltas: &[&str]) -> Vec<Step> {
    let mut steps = vec![event("message_start", json!({}))];
    steps.extend(
        deltas
            .iter()
            .map(|delta| event("message_delta", json!({ "delta": delta }))),
    );
    steps
}

/// One server-side tool execution: `tool_calls {count:1}`, `tool_execution_start`, `tool_execution_end`
/// (`status` `ok`).
pub fn tool_execution(call_id: &str, tool: &str, args: Value, result: &str) -> Vec<Step> {
    vec![
        event("tool_calls", json!({"count": 1})),
        event(
            "tool_execution_start",
            json!({"toolName": tool, "callId": call_id, "args": args}),
        ),
        event(
            "tool_execution_end",
            json!({"toolName": tool, "callId": call_id, "status": "ok", "result": result}),
        ),
    ]
}

/// A pause for approval of `tool(args)`, then the branch the answer chose.
pub fn approval(
    id: &str,
    tool: &str,
    args: Value,
    hint: &str,
    then_approved: Vec<Step>,
    then_rejected: Vec<Step>,
) -> Step {
    Step::Approval {
        id: id.to_owned(),
        tool: tool.to_owned(),
        args,
        hint: hint.to_owned(),
        then_approved,
        then_rejected,
    }
}

/// A question (`options` `None` = free text), then what `then` makes of the answer.
pub fn ask(
    reference: &str,
    question: &str,
    options: Option<&[&str]>,
    then: impl Fn(&str) -> Vec<Step> + Send + Sync + 'static,
) -> Step {
    Step::Ask {
        reference: reference.to_owned(),
        question: question.to_owned(),
        options: options.map(|options| options.iter().map(|o| (*o).to_owned()).collect()),
        then: Arc::new(then),
    }
}

/// A call of the client's callback tool `tool`, then what `then` makes of its result.
pub fn call_tool(
    call_id: &str,
    tool: &str,
    args: Value,
    then: impl Fn(&str) -> Vec<Step> + Send + Sync + 'static,
) -> Step {
    Step::CallTool {
        call_id: call_id.to_owned(),
        tool: tool.to_owned(),
        args,
        then: Arc::new(then),
    }
}

/// A runtime `error {reason}`.
pub fn error(reason: &str) -> Step {
    event("error", json!({ "reason": reason }))
}

/// `agent_end` with the assistant's last message and [`USAGE`].
pub fn end(last_message: &str) -> Step {
    let (prompt, completion, total) = USAGE;
    event(
        "agent_end",
        json!({"messageCount": 2, "lastMessage": {"content": last_message, "role": "assistant"},
               "tokenUsage": {"promptTokens": prompt, "completionTokens": completion, "totalTokens": total}}),
    )
}

/// `agent_abort {reason}`.
pub fn abort(reason: &str) -> Step {
    event("agent_abort", json!({ "reason": reason }))
}

/// A whole reply: the deltas as one LLM message, then `agent_end`.
pub fn reply(deltas: &[&str]) -> Vec<Step> {
    let mut steps = text(deltas);
    steps.push(end(&deltas.concat()));
    steps
}

/// A script for a session with memory: "my name is X" is remembered; "what is my name?" is answered from
/// the session's own earlier prompts ("Your name is X." or "I do not know your name."); anything else is
/// "Nice to meet you.".
pub fn memory(text: &str, history: &History) -> Vec<Step> {
    if !text.to_lowercase().contains("what is my name") {
        return reply(&["Nice to ", "meet you."]);
    }
    let name = history.prompts.iter().find_map(|said| {
        let at = said.to_lowercase().find("my name is ")?;
        Some(
            said[at + "my name is ".len()..]
                .trim_end_matches('.')
                .to_owned(),
        )
    });
    match name {
        Some(name) => reply(&["Your name is ", &name, "."]),
        None => reply(&["I do not know your name."]),
    }
}

// --- The gateway --------------------------------------------------------------------------------------------

/// A running scripted CMDC gateway. Dropping it stops it, its runs and its streams.
pub struct Gateway {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

/// How the gateway differs from the default (gateway 0.2+, heartbeats every 30 s).
#[derive(Clone, Debug)]
pub struct Options {
    /// How often an open stream gets a `: heartbeat` comment.
    pub heartbeat: Duration,
    /// Whether `POST …/abort` exists (gateway ≥ 0.2.0); without it, it is 404 "No route matches", as on 0.1.x.
    pub abort_endpoint: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            heartbeat: Duration::from_secs(30),
            abort_endpoint: true,
        }
    }
}

struct State {
    script: Box<Script>,
    options: Options,
    received: Mutex<Vec<Received>>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Every session created, in order.
    created: Mutex<Vec<String>>,
    /// `(session, event)` of every event published while nobody listened.
    lost: Mutex<Vec<(String, String)>>,
    /// Session workers and runs, aborted with the gateway.
    tasks: Mutex<Vec<AbortHandle>>,
    next_id: AtomicU64,
}

struct Session {
    id: String,
    prompts: mpsc::UnboundedSender<String>,
    inner: Mutex<SessionState>,
}

#[derive(Default)]
struct SessionState {
    history: History,
    subscribers: Vec<mpsc::UnboundedSender<(String, Value)>>,
    /// Every event published, in order.
    published: Vec<(String, Value)>,
    waiting: Option<Waiting>,
    /// Prompts accepted and not finished (the active run's included).
    busy: usize,
    /// The active run.
    current: Option<AbortHandle>,
    /// Callback tools: name → (`callbackUrl`, `timeoutMs`).
    tools: HashMap<String, (String, Option<u64>)>,
}

enum Waiting {
    Approval {
        id: String,
        answer: oneshot::Sender<bool>,
    },
    Question {
        reference: String,
        answer: oneshot::Sender<String>,
    },
}

impl Gateway {
    /// Serves with `script` picking each run's steps.
    pub async fn start(
        script: impl Fn(&str, &History) -> Vec<Step> + Send + Sync + 'static,
    ) -> Gateway {
        Self::start_with(Options::default(), script).await
    }

    /// Serves with `options` and `script`.
    pub async fn start_with(
        options: Options,
        script: impl Fn(&str, &History) -> Vec<Step> + Send + Sync + 'static,
    ) -> Gateway {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the CMDC gateway");
        let addr = listener.local_addr().expect("gateway address");
        let state = Arc::new(State {
            script: Box::new(script),
            options,
            received: Mutex::default(),
            sessions: Mutex::default(),
            created: Mutex::default(),
            lost: Mutex::default(),
            tasks: Mutex::default(),
            next_id: AtomicU64::new(1),
        });
        let task = tokio::spawn(accept(listener, Arc::clone(&state)));
        Gateway { addr, state, task }
    }

    /// Answers every prompt with `deltas`, then `agent_end`.
    pub async fn replying(deltas: &[&str]) -> Gateway {
        let deltas: Vec<String> = deltas.iter().map(|d| (*d).to_owned()).collect();
        Self::start(move |_, _| {
            let deltas: Vec<&str> = deltas.iter().map(String::as_str).collect();
            reply(&deltas)
        })
        .await
    }

    /// The base URL, the route's `upstream`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in order (those refused included).
    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().expect("lock").clone()
    }

    /// Every request as `"<METHOD> <last path segment>"` (`POST sessions`, `GET events`, `POST prompt`,
    /// `POST approve`, …), in order: the shape of an exchange at a glance.
    pub fn log(&self) -> Vec<String> {
        self.received().iter().map(summary).collect()
    }

    /// The requests `"<METHOD> <last path segment>"` names, in order.
    pub fn requests(&self, what: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| summary(r) == what)
            .collect()
    }

    /// The text of every prompt posted, in order.
    pub fn prompts(&self) -> Vec<String> {
        self.requests("POST prompt")
            .iter()
            .map(|r| r.body["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// The first request received that `matches`, waiting for it up to [`WAIT`].
    pub async fn wait_for(&self, what: &str, matches: impl Fn(&Received) -> bool) -> Received {
        within(&format!("the CMDC gateway to receive {what}"), async {
            loop {
                if let Some(found) = self.received().into_iter().find(|r| matches(r)) {
                    return found;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
    }

    /// The first request `"<METHOD> <last path segment>"` names, waiting for it up to [`WAIT`].
    pub async fn wait_for_request(&self, what: &str) -> Received {
        self.wait_for(what, |r| summary(r) == what).await
    }

    /// Every session created, in order.
    pub fn sessions(&self) -> Vec<String> {
        self.state.created.lock().expect("lock").clone()
    }

    /// The only session created; fails unless exactly one was.
    pub fn session(&self) -> String {
        let sessions = self.sessions();
        assert_eq!(sessions.len(), 1, "expected one CMDC session: {sessions:?}");
        sessions.into_iter().next().expect("one session")
    }

    /// What `session` has been told (`None` once it is gone).
    pub fn history(&self, session: &str) -> Option<History> {
        let session = self.state.session(session)?;
        let history = session.inner.lock().expect("lock").history.clone();
        Some(history)
    }

    /// The names of the events published in `session`, in order.
    pub fn published(&self, session: &str) -> Vec<String> {
        let Some(session) = self.state.session(session) else {
            return Vec::new();
        };
        let inner = session.inner.lock().expect("lock");
        inner
            .published
            .iter()
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// `(session, event)` of every event published while no subscriber was attached: lost, as the real
    /// gateway loses them.
    pub fn lost(&self) -> Vec<(String, String)> {
        self.state.lost.lock().expect("lock").clone()
    }

    /// The session's agent process dies: the session becomes unknown (404), its run stops and its open
    /// streams end without a terminal event.
    pub fn kill(&self, session: &str) {
        let removed = self.state.sessions.lock().expect("lock").remove(session);
        let session = removed.unwrap_or_else(|| panic!("no CMDC session {session} to kill"));
        let mut inner = session.inner.lock().expect("lock");
        if let Some(run) = inner.current.take() {
            run.abort();
        }
        inner.waiting = None;
        inner.subscribers.clear();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.task.abort();
        for task in self.state.tasks.lock().expect("lock").drain(..) {
            task.abort();
        }
        // Open streams end with their senders.
        self.state.sessions.lock().expect("lock").clear();
    }
}

/// `"<METHOD> <last path segment>"` of a request.
fn summary(request: &Received) -> String {
    let last = request.path.rsplit('/').next().unwrap_or_default();
    format!("{} {last}", request.method)
}

impl State {
    fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions.lock().expect("lock").get(id).cloned()
    }

    fn keep(&self, task: AbortHandle) {
        self.tasks.lock().expect("lock").push(task);
    }

    /// Publishes one event to the session's current subscribers; lost when there is none.
    fn publish(&self, session: &Session, name: &str, data: Value) {
        let mut inner = session.inner.lock().expect("lock");
        inner.published.push((name.to_owned(), data.clone()));
        inner.subscribers.retain(|s| !s.is_closed());
        if inner.subscribers.is_empty() {
            self.lost
                .lock()
                .expect("lock")
                .push((session.id.clone(), name.to_owned()));
        }
        for subscriber in &inner.subscribers {
            let _ = subscriber.send((name.to_owned(), data.clone()));
        }
        if is_terminal(name) {
            // Each stream closes after the run's end.
            inner.subscribers.clear();
        }
    }
}

fn is_terminal(name: &str) -> bool {
    matches!(name, "agent_end" | "agent_abort")
}

// --- HTTP ---------------------------------------------------------------------------------------------------

async fn accept(listener: TcpListener, state: Arc<State>) {
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        let state = Arc::clone(&state);
        let service = service_fn(move |request| {
            let state = Arc::clone(&state);
            async move { Ok::<_, Infallible>(answer(request, &state).await) }
        });
        // Aborted with the accept task, so no connection outlives the gateway.
        connections.spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(request: Request<Incoming>, state: &Arc<State>) -> http::Response<Body> {
    let (head, body) = request.into_parts();
    let bytes = within("the CMDC gateway request body", body.collect())
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    let request = Received {
        method: head.method,
        path: head.uri.path().to_owned(),
        headers: head.headers,
        body,
    };
    state.received.lock().expect("lock").push(request.clone());
    route(&request, state)
}

fn route(request: &Received, state: &Arc<State>) -> http::Response<Body> {
    let path = request.path.trim_end_matches('/');
    if request.method == Method::GET && path == "/healthz" {
        let active = state.sessions.lock().expect("lock").len();
        return json_response(
            StatusCode::OK,
            json!({"status": "ok", "version": "0.1.0", "sessions": {"active": active},
                   "meter": {"tracked_keys": 1}, "timestamp": "2026-04-08T12:00:00.000000Z"}),
        );
    }
    if !path.starts_with("/v1/") {
        return no_route(request);
    }
    if !authorized(request) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Missing or invalid API key",
        );
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (&request.method, segments.as_slice()) {
        (&Method::POST, ["v1", "sessions"]) => create(request, state),
        (method, ["v1", "sessions", id, rest @ ..]) => {
            let Some(session) = state.session(id) else {
                return refuse(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    &format!("Session {id} not found"),
                );
            };
            match (method, rest) {
                (&Method::GET, []) => info(&session),
                (&Method::DELETE, []) => delete(state, &session),
                (&Method::GET, ["events"]) => events(state, &session),
                (&Method::POST, ["prompt"]) => prompt(request, state, &session),
                (&Method::POST, [action @ ("approve" | "reject")]) => {
                    decide(request, &session, action)
                }
                (&Method::POST, ["respond"]) => respond(request, &session),
                (&Method::POST, ["tools"]) => register(request, &session),
                (&Method::POST, ["abort"]) if state.options.abort_endpoint => {
                    abort_run(state, &session)
                }
                _ => no_route(request),
            }
        }
        _ => no_route(request),
    }
}

fn authorized(request: &Received) -> bool {
    request.header("x-api-key") == KEY || request.header("authorization") == format!("Bearer {KEY}")
}

fn json_response(status: StatusCode, body: Value) -> http::Response<Body> {
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(
            Full::new(Bytes::from(body.to_string()))
                .map_err(|never| match never {})
                .boxed(),
        )
        .expect("a valid response")
}

fn refuse(status: StatusCode, code: &str, message: &str) -> http::Response<Body> {
    json_response(status, json!({"error": code, "message": message}))
}

fn no_route(request: &Received) -> http::Response<Body> {
    refuse(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("No route matches {} {}", request.method, request.path),
    )
}

/// A string field of the body, when present and not empty.
fn field<'a>(request: &'a Received, name: &str) -> Option<&'a str> {
    request.body[name].as_str().filter(|s| !s.is_empty())
}

fn create(request: &Received, state: &Arc<State>) -> http::Response<Body> {
    let Some(model) = field(request, "model") else {
        return refuse(
            StatusCode::UNPROCESSABLE_ENTITY,
            "create_failed",
            ":missing_model",
        );
    };
    let id = match field(request, "sessionId") {
        Some(id) => id.to_owned(),
        None => format!(
            "{:016x}",
            0x5e55_0000_0000_0000 + state.next_id.fetch_add(1, Ordering::SeqCst)
        ),
    };
    if state.session(&id).is_some() {
        return refuse(
            StatusCode::UNPROCESSABLE_ENTITY,
            "create_failed",
            ":already_started",
        );
    }
    let (prompts, queue) = mpsc::unbounded_channel();
    let session = Arc::new(Session {
        id: id.clone(),
        prompts,
        inner: Mutex::new(SessionState {
            history: History {
                model: model.to_owned(),
                prompts: Vec::new(),
                tools: Vec::new(),
            },
            ..SessionState::default()
        }),
    });
    state
        .sessions
        .lock()
        .expect("lock")
        .insert(id.clone(), Arc::clone(&session));
    state.created.lock().expect("lock").push(id.clone());
    let worker = tokio::spawn(work(Arc::clone(state), session, queue));
    state.keep(worker.abort_handle());
    json_response(
        StatusCode::CREATED,
        json!({"sessionId": id, "status": "created"}),
    )
}

fn info(session: &Session) -> http::Response<Body> {
    let inner = session.inner.lock().expect("lock");
    let state = match &inner.waiting {
        Some(Waiting::Approval { .. }) => "waiting_approval",
        Some(Waiting::Question { .. }) => "waiting_input",
        None if inner.busy > 0 => "working",
        None => "idle",
    };
    json_response(
        StatusCode::OK,
        json!({"sessionId": session.id, "state": state, "turns": inner.history.prompts.len(),
               "toolCalls": 0, "totalTokens": 0, "uptimeMs": 1}),
    )
}

fn delete(state: &Arc<State>, session: &Session) -> http::Response<Body> {
    state.sessions.lock().expect("lock").remove(&session.id);
    {
        let mut inner = session.inner.lock().expect("lock");
        if let Some(run) = inner.current.take() {
            run.abort();
        }
        inner.waiting = None;
    }
    state.publish(session, "agent_abort", json!({"reason": "aborted"}));
    json_response(
        StatusCode::OK,
        json!({"sessionId": session.id, "status": "deleted"}),
    )
}

/// `GET …/events`: subscribes now (before the head goes out), then streams what is published from here on.
fn events(state: &Arc<State>, session: &Session) -> http::Response<Body> {
    let (sender, receiver) = mpsc::unbounded_channel();
    session.inner.lock().expect("lock").subscribers.push(sender);
    let mut heartbeat = tokio::time::interval(state.options.heartbeat);
    heartbeat.reset();
    let frames = futures_util::stream::unfold(
        (receiver, heartbeat, false),
        |(mut receiver, mut heartbeat, done)| async move {
            if done {
                return None;
            }
            tokio::select! {
                event = receiver.recv() => {
                    let (name, data) = event?;
                    let frame = format!("event: {name}\ndata: {data}\n\n");
                    let done = is_terminal(&name);
                    Some((Ok(Frame::data(Bytes::from(frame))), (receiver, heartbeat, done)))
                }
                _ = heartbeat.tick() => {
                    let frame = Bytes::from_static(b": heartbeat\n\n");
                    Some((Ok(Frame::data(frame)), (receiver, heartbeat, false)))
                }
            }
        },
    );
    http::Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .header("x-accel-buffering", "no")
        .body(BodyExt::boxed(StreamBody::new(frames)))
        .expect("a valid response")
}

fn prompt(request: &Received, state: &Arc<State>, session: &Session) -> http::Response<Body> {
    let Some(text) = field(request, "text").or_else(|| field(request, "prompt")) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "Missing 'text' field",
        );
    };
    let queued = {
        let mut inner = session.inner.lock().expect("lock");
        inner.busy += 1;
        inner.busy > 1
    };
    let _ = session.prompts.send(text.to_owned());
    let request_id = format!(
        "{:016x}",
        0x4e40_0000_0000_0000 + state.next_id.fetch_add(1, Ordering::SeqCst)
    );
    json_response(
        StatusCode::ACCEPTED,
        json!({"requestId": request_id, "sessionId": session.id, "queued": queued}),
    )
}

fn decide(request: &Received, session: &Session, action: &str) -> http::Response<Body> {
    let Some(id) = field(request, "approvalId") else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "Missing 'approvalId'",
        );
    };
    let mut inner = session.inner.lock().expect("lock");
    if matches!(&inner.waiting, Some(Waiting::Approval { id: waiting, .. }) if waiting == id) {
        if let Some(Waiting::Approval { answer, .. }) = inner.waiting.take() {
            let _ = answer.send(action == "approve");
        }
    }
    json_response(
        StatusCode::OK,
        json!({"ok": true, "action": action, "approvalId": id}),
    )
}

fn respond(request: &Received, session: &Session) -> http::Response<Body> {
    let (Some(reference), Some(response)) =
        (field(request, "ref"), request.body["response"].as_str())
    else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "Missing 'ref' or 'response'",
        );
    };
    let mut inner = session.inner.lock().expect("lock");
    if matches!(&inner.waiting, Some(Waiting::Question { reference: waiting, .. }) if waiting == reference)
    {
        if let Some(Waiting::Question { answer, .. }) = inner.waiting.take() {
            let _ = answer.send(response.to_owned());
        }
    }
    json_response(
        StatusCode::OK,
        json!({"ok": true, "action": "respond", "ref": reference}),
    )
}

/// `POST …/tools`: a callback tool the agent may call.
fn register(request: &Received, session: &Session) -> http::Response<Body> {
    let (Some(name), Some(url)) = (field(request, "name"), field(request, "callbackUrl")) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "Missing 'name' or 'callbackUrl'",
        );
    };
    let timeout = request.body["timeoutMs"].as_u64();
    let mut inner = session.inner.lock().expect("lock");
    let known = inner
        .tools
        .insert(name.to_owned(), (url.to_owned(), timeout))
        .is_some();
    if !known {
        inner.history.tools.push(name.to_owned());
    }
    drop(inner);
    json_response(
        StatusCode::CREATED,
        json!({"ok": true, "sessionId": session.id, "toolName": name}),
    )
}

/// `POST …/abort` (gateway ≥ 0.2): ends the active run with `agent_abort {reason:"user_cancelled"}`.
fn abort_run(state: &Arc<State>, session: &Session) -> http::Response<Body> {
    let active = {
        let mut inner = session.inner.lock().expect("lock");
        inner.waiting = None;
        match inner.current.take() {
            Some(run) if !run.is_finished() => {
                run.abort();
                true
            }
            _ => false,
        }
    };
    if active {
        state.publish(session, "agent_abort", json!({"reason": "user_cancelled"}));
    }
    json_response(
        StatusCode::ACCEPTED,
        json!({"ok": true, "action": "abort", "sessionId": session.id}),
    )
}

// --- Runs ---------------------------------------------------------------------------------------------------

/// Runs the session's prompts one at a time, in the order they were accepted.
async fn work(
    state: Arc<State>,
    session: Arc<Session>,
    mut queue: mpsc::UnboundedReceiver<String>,
) {
    while let Some(text) = queue.recv().await {
        let history = {
            let mut inner = session.inner.lock().expect("lock");
            let before = inner.history.clone();
            inner.history.prompts.push(text.clone());
            before
        };
        let steps = (state.script)(&text, &history);
        let run = tokio::spawn(run(Arc::clone(&state), Arc::clone(&session), text, steps));
        state.keep(run.abort_handle());
        session.inner.lock().expect("lock").current = Some(run.abort_handle());
        // Ends when the run does, or is aborted.
        let _ = run.await;
        let mut inner = session.inner.lock().expect("lock");
        inner.current = None;
        inner.waiting = None;
        inner.busy = inner.busy.saturating_sub(1);
    }
}

async fn run(state: Arc<State>, session: Arc<Session>, text: String, steps: Vec<Step>) {
    state.publish(&session, "prompt_received", json!({ "text": text }));
    state.publish(&session, "agent_start", json!({}));
    play(&state, &session, steps).await;
}

/// Plays steps; `true` once the run ended (a terminal event was published).
fn play<'a>(
    state: &'a Arc<State>,
    session: &'a Arc<Session>,
    steps: Vec<Step>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
    Box::pin(async move {
        for step in steps {
            match step {
                Step::Publish(name, data) => {
                    state.publish(session, &name, data);
                    if is_terminal(&name) {
                        return true;
                    }
                }
                Step::Delay(delay) => tokio::time::sleep(delay).await,
                Step::Hang => std::future::pending::<()>().await,
                Step::Wait(gate) => {
                    if unanswered(state, session, gate.opened()).await.is_none() {
                        return true;
                    }
                }
                Step::CallTool {
                    call_id,
                    tool,
                    args,
                    then,
                } => {
                    state.publish(session, "tool_calls", json!({"count": 1}));
                    state.publish(
                        session,
                        "tool_execution_start",
                        json!({"toolName": tool, "callId": call_id, "args": args}),
                    );
                    let (ok, result) = call_back(session, &call_id, &tool, &args).await;
                    let status = if ok { "ok" } else { "error" };
                    state.publish(
                        session,
                        "tool_execution_end",
                        json!({"toolName": tool, "callId": call_id, "status": status, "result": result}),
                    );
                    if play(state, session, then(&result)).await {
                        return true;
                    }
                }
                Step::Approval {
                    id,
                    tool,
                    args,
                    hint,
                    then_approved,
                    then_rejected,
                } => {
                    let (answer, answered) = oneshot::channel();
                    session.inner.lock().expect("lock").waiting = Some(Waiting::Approval {
                        id: id.clone(),
                        answer,
                    });
                    state.publish(
                        session,
                        "approval_required",
                        json!({"approvalId": id, "toolName": tool, "args": args, "hint": hint,
                               "requestedAt": "2026-04-08T12:00:00Z"}),
                    );
                    let Some(approved) = unanswered(state, session, answered).await else {
                        return true;
                    };
                    let status = if approved { "approved" } else { "rejected" };
                    state.publish(
                        session,
                        "approval_resolved",
                        json!({"approvalId": id, "status": status}),
                    );
                    let branch = if approved {
                        then_approved
                    } else {
                        then_rejected
                    };
                    if play(state, session, branch).await {
                        return true;
                    }
                }
                Step::Ask {
                    reference,
                    question,
                    options,
                    then,
                } => {
                    let (answer, answered) = oneshot::channel();
                    session.inner.lock().expect("lock").waiting = Some(Waiting::Question {
                        reference: reference.clone(),
                        answer,
                    });
                    state.publish(
                        session,
                        "ask_user",
                        json!({"ref": reference, "question": question, "options": options}),
                    );
                    let Some(response) = unanswered(state, session, answered).await else {
                        return true;
                    };
                    if play(state, session, then(&response)).await {
                        return true;
                    }
                }
            }
        }
        false
    })
}

/// Waits (up to [`WAIT`]) for the answer to a pause (or a gate to open); `None` when nobody answered,
/// after ending the run with an error.
async fn unanswered<T, E>(
    state: &Arc<State>,
    session: &Arc<Session>,
    answered: impl std::future::Future<Output = Result<T, E>>,
) -> Option<T> {
    match tokio::time::timeout(WAIT, answered).await {
        Ok(Ok(answer)) => Some(answer),
        _ => {
            state.publish(
                session,
                "error",
                json!({"reason": "scripted gateway: the pause was never answered"}),
            );
            state.publish(session, "agent_abort", json!({"reason": "aborted"}));
            None
        }
    }
}

/// POSTs one call to a callback tool: `(ok, result or error text)`.
async fn call_back(session: &Session, call_id: &str, tool: &str, args: &Value) -> (bool, String) {
    let registered = session.inner.lock().expect("lock").tools.get(tool).cloned();
    let Some((url, timeout_ms)) = registered else {
        return (false, format!("unknown tool {tool}"));
    };
    let limit = Duration::from_millis(timeout_ms.unwrap_or(30_000)).min(WAIT);
    let body = json!({"callId": call_id, "toolName": tool, "args": args, "sessionId": session.id});
    let request = Request::builder()
        .method(Method::POST)
        .uri(&url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a valid callback request");
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(hyper_util::client::legacy::connect::HttpConnector::new());
    let call = async {
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("callback answered HTTP {status}"));
        }
        let answer: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        match (answer["result"].as_str(), answer["error"].as_str()) {
            (Some(result), _) => Ok(result.to_owned()),
            (None, Some(error)) => Err(error.to_owned()),
            _ => Err(format!("callback answer without result or error: {answer}")),
        }
    };
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(result)) => (true, result),
        Ok(Err(error)) => (false, error),
        Err(_) => (false, format!("callback timed out after {limit:?}")),
    }
}

// --- Reading a gateway's event stream, as a client ---------------------------------------------------------

/// Every complete frame received so far, as (event name, data); every frame must have an `event:` line.
pub fn frames(raw: &[u8]) -> Vec<(String, Value)> {
    let text = String::from_utf8_lossy(raw);
    let Some(end) = text.rfind("\n\n") else {
        return Vec::new();
    };
    let mut frames = Vec::new();
    for frame in text[..end].split("\n\n") {
        let mut name = None;
        let mut data = None;
        for line in frame.lines() {
            if let Some(n) = line.strip_prefix("event: ") {
                name = Some(n.to_owned());
            } else if let Some(d) = line.strip_prefix("data: ") {
                data = Some(d.to_owned());
            }
        }
        if let Some(data) = data {
            let name = name.unwrap_or_else(|| panic!("a frame without an event line: {frame:?}"));
            frames.push((name, serde_json::from_str(&data).expect("JSON data")));
        }
    }
    frames
}

/// Reads until an event named `name` arrived; returns every frame so far.
pub async fn until(stream: &mut SseStream, name: &str) -> Vec<(String, Value)> {
    loop {
        let seen = frames(&stream.raw);
        if seen.iter().any(|(n, _)| n == name) {
            return seen;
        }
        stream
            .next_data()
            .await
            .unwrap_or_else(|| panic!("the stream ended before {name}: {seen:?}"));
    }
}

/// Reads the whole stream (it closes after the terminal event).
pub async fn all(stream: &mut SseStream) -> Vec<(String, Value)> {
    while stream.next_data().await.is_some() {}
    frames(&stream.raw)
}

pub fn names(frames: &[(String, Value)]) -> Vec<&str> {
    frames.iter().map(|(n, _)| n.as_str()).collect()
}

/// The text of the `message_delta` events, in order.
pub fn streamed_text(frames: &[(String, Value)]) -> String {
    frames
        .iter()
        .filter(|(n, _)| n == "message_delta")
        .map(|(_, d)| d["delta"].as_str().unwrap_or_default())
        .collect()
}

/// A client's WebSocket to a gateway.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next data frame of a gateway's WebSocket, as JSON (pings and other control frames skipped).
pub async fn recv_ws(ws: &mut Ws) -> Value {
    use futures_util::StreamExt;
    loop {
        let message = super::within("a WebSocket frame", ws.next())
            .await
            .expect("the socket is open")
            .expect("a frame");
        if let tokio_tungstenite::tungstenite::Message::Text(text) = message {
            return serde_json::from_str(text.as_str()).expect("JSON frames");
        }
    }
}
