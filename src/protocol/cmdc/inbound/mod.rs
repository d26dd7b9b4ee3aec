//! CMDC inbound: we are a CMDC gateway (`specs/cmdc.md` §4) for cmdc-sdk 0.1.0 and anything written to the
//! seed API. Everything is served under the route path P: `GET P/healthz`, `P/v1/sessions/...` and the
//! WebSocket `GET P/v1/sessions/:id/ws?api_key=`.
//!
//! Choices:
//! - a route without `[routes.api_keys]` is open: any key, or none, for one tenant (src/auth.rs);
//! - `rate_limit` counts every `/v1` request and every WebSocket action (`prompt`, `approve`, `reject`,
//!   `respond`); an action over the limit is answered `{"error":"rate_limited","message","retryAfter"}` and
//!   not carried out;
//! - sessions live per route and tenant; another tenant's session is a 404. Where the store keeps documents
//!   they are kept there too, and with a store replicas share any replica serves any request of a session:
//!   what a client asks of a run another replica drives is handed there (`run::Runner::hand_over`), or,
//!   when that run ended before its replica took it, served here; an `/events` subscriber or a WebSocket
//!   follows that run from its log in the store (`follow.rs`);
//! - `queued:true` prompts run after the current run, each a run of its own;
//! - `POST …/abort` (gateway 0.2; cmdc-sdk 0.1.0 only has `DELETE`) ends the running run with
//!   `agent_abort {reason:"user_cancelled"}`, cancelling its upstream work, and keeps the session;
//! - WebSocket actions are acknowledged by the very next frame: the socket's one task writes the ack before
//!   it reads another event; keep-alive is WS pings only;
//! - a WebSocket is closed after `ws_idle` without a frame from the client (a pong counts, as in the
//!   gateway), and with code 1009 on a message or frame larger than the route's `max_body`.

mod decode;
mod follow;
mod socket;

pub use decode::Reader;

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http::header::CONTENT_TYPE;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

use super::run::{self, Opened, Runner};
use super::sessions::{
    Control, CreateError, KeptTool, RegisteredTool, Session, Sessions, Unanswered, SESSION_DOCUMENT,
};
use super::wire;
use crate::auth::{self, Caller, KeySources};
use crate::body::{self, Body, BodyLimit};
use crate::config::{RouteConfig, DEFAULT_RUN_BUFFER, DEFAULT_WS_IDLE};
use crate::egress::{Egress, Policy, Requester};
use crate::error::Error;
use crate::face::{InboundFace, RequestDecoder};
use crate::mount::Mount;
use crate::route_state::RouteState;
use crate::sse;
use decode::is_blank;
use socket::{upgrade, SocketClient, SocketLimits};

const HEARTBEAT_FRAME: &[u8] = b": heartbeat\n\n";
/// The gateway version `GET /healthz` reports.
const VERSION: &str = "0.1.0";
/// The meter key of clients of an open route that sent no key.
const ANONYMOUS: &str = "anonymous";

pub struct Inbound {
    runner: std::sync::OnceLock<Arc<Runner>>,
    /// Where the session's callback tools are called: checked against the route's `callback_allow`.
    callbacks: Egress,
    socket: SocketLimits,
    /// The route's sessions, kept across its reloads.
    sessions: Arc<Sessions>,
    /// `[routes.quota]` sessions.
    per_tenant: Option<NonZeroUsize>,
}

/// The API key a caller's prompts and tokens are metered under (`stats.meter`).
fn meter_key(caller: &Caller) -> &str {
    caller.key.as_deref().unwrap_or(ANONYMOUS)
}

/// A CMDC error answer: `{"error","message"}` (+ `retryAfter` and `Retry-After` on 429). The one place
/// errors take CMDC's shape.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// The authenticator's refusal this answers: its `retryAfter`, and its headers (`WWW-Authenticate`,
    /// `Retry-After`).
    refusal: Option<Error>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            refusal: None,
        }
    }
    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    fn session_not_found(id: &str) -> Self {
        Self::not_found(format!("Session {id} not found"))
    }

    fn body(&self) -> Vec<u8> {
        let body = wire::ErrorBody {
            error: self.code.to_owned(),
            message: self.message.clone(),
            retry_after: self.refusal.as_ref().and_then(Error::retry_after),
        };
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The error frame a WebSocket action gets.
    fn frame(&self) -> WsMessage {
        WsMessage::text(String::from_utf8_lossy(&self.body()).into_owned())
    }

    fn into_response(self) -> Response<Body> {
        let response = json(self.status, self.body());
        match &self.refusal {
            Some(refusal) => auth::with_refusal_headers(response, refusal),
            None => response,
        }
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        if error.is_unauthorized() || error.retry_after().is_some() {
            let code = if error.is_unauthorized() {
                "unauthorized"
            } else {
                "rate_limited"
            };
            let mut answer = Self::new(error.http_status(), code, error.message());
            answer.refusal = Some(error);
            answer
        } else if error.is_forbidden() {
            Self::new(error.http_status(), "forbidden", error.message())
        } else if error.is_client() {
            Self::new(error.http_status(), "bad_request", error.message())
        } else if error.is_unavailable() {
            Self::new(error.http_status(), "unavailable", error.message())
        } else {
            Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                error.message(),
            )
        }
    }
}

type Answer = Result<Response<Body>, ApiError>;

impl Inbound {
    /// `listen` is the address the proxy listens on: callback tools never lead there. The sessions are
    /// `kept` across the route's reloads (held to the new `run_buffer` and `[routes.quota]` sessions).
    pub fn new(route: &RouteConfig, listen: SocketAddr, kept: &RouteState) -> Self {
        let run_buffer = route.run_buffer.unwrap_or(DEFAULT_RUN_BUFFER);
        Self {
            runner: std::sync::OnceLock::new(),
            callbacks: Egress::new(
                Policy::new(route.callback_allow.clone(), listen),
                route.connect_timeout,
            ),
            socket: SocketLimits {
                idle: route.ws_idle.unwrap_or(DEFAULT_WS_IDLE),
                max_message: route.max_body,
            },
            sessions: {
                let sessions = kept.keep((), Sessions::default);
                sessions.limit(run_buffer);
                sessions
            },
            per_tenant: route.quota.sessions,
        }
    }

    /// The route's sessions and runs, made on first use (the translator belongs to the route).
    fn runner(&self, mount: &Mount) -> Arc<Runner> {
        Arc::clone(self.runner.get_or_init(|| {
            Arc::new(Runner {
                sessions: Arc::clone(&self.sessions),
                translator: Arc::clone(&mount.translator),
                callbacks: self.callbacks.clone(),
                documents: mount.documents.clone(),
                per_tenant: self.per_tenant,
            })
        }))
    }

    async fn serve(&self, request: Request<Incoming>, mount: &Mount) -> Answer {
        let method = request.method().clone();
        let path = mount.subpath(request.uri().path()).unwrap_or("").to_owned();
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let no_route = || {
            ApiError::not_found(format!(
                "No route matches {method} {}",
                if path.is_empty() { "/" } else { &path }
            ))
        };
        if segments == ["healthz"] && method == Method::GET {
            return Ok(self.health());
        }
        if segments.first() != Some(&"v1") || segments.get(1) != Some(&"sessions") {
            return Err(no_route());
        }
        let ws = segments.len() == 4 && segments[3] == "ws" && method == Method::GET;
        let sources = if ws {
            KeySources::HeadersAndQuery
        } else {
            KeySources::Headers
        };
        let caller = mount.access.admit(&request, sources).await?;
        let runner = self.runner(mount);
        match (&method, &segments[2..]) {
            (&Method::POST, []) => create(&runner, &caller, request, mount.body_limit).await,
            (&Method::GET, [id]) => {
                let session = find(&runner, &caller, id).await?;
                Ok(ok(info(&session)))
            }
            (&Method::DELETE, [id]) => {
                let session = find(&runner, &caller, id).await?;
                delete(&runner, &caller, &session).await?;
                Ok(ok(json!({"sessionId": id, "status": "deleted"})))
            }
            (&Method::POST, [id, "prompt"]) => {
                let session = find(&runner, &caller, id).await?;
                let prompt: wire::Prompt = read_json(request, mount.body_limit).await?;
                let text = prompt
                    .text
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| ApiError::bad_request("Missing 'text' field"))?;
                let queued =
                    accept_prompt(&runner, &caller, &session, text, meter_key(&caller)).await?;
                let accepted = wire::PromptAccepted {
                    request_id: request_id(),
                    session_id: session.id.clone(),
                    queued,
                };
                Ok(json(StatusCode::ACCEPTED, to_vec(&accepted)))
            }
            (&Method::POST, [id, action @ ("approve" | "reject")]) => {
                let session = find(&runner, &caller, id).await?;
                let decision: wire::Decision = read_json(request, mount.body_limit).await?;
                let approval_id = decision
                    .approval_id
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| ApiError::bad_request("Missing 'approvalId' field"))?;
                let approved = *action == "approve";
                answer(
                    &runner,
                    &caller,
                    &session,
                    run::approval_answer(&approval_id, approved),
                )
                .await?;
                Ok(ok(
                    json!({"ok": true, "action": action, "approvalId": approval_id}),
                ))
            }
            (&Method::POST, [id, "respond"]) => {
                let session = find(&runner, &caller, id).await?;
                let reply: wire::Answer = read_json(request, mount.body_limit).await?;
                let (Some(reference), Some(response)) =
                    (reply.reference.filter(|r| !r.is_empty()), reply.response)
                else {
                    return Err(ApiError::bad_request("Missing 'ref' or 'response' field"));
                };
                let resume = run::text_answer(&reference, &response);
                answer(&runner, &caller, &session, resume).await?;
                Ok(ok(
                    json!({"ok": true, "action": "respond", "ref": reference}),
                ))
            }
            (&Method::POST, [id, "abort"]) => {
                // Gateway 0.2+: ends the running run (`agent_abort {reason:"user_cancelled"}`) and keeps the
                // session; the body (`reason`, `kill_tools`) changes nothing here.
                let session = find(&runner, &caller, id).await?;
                let _: Value = read_json(request, mount.body_limit).await?;
                let here = hand_over(&runner, &caller, &session, &Control::Abort).await?;
                if let Some(run) = here.and_then(|session| session.current_run()) {
                    run.abort();
                }
                let aborted = json!({"ok": true, "action": "abort", "sessionId": session.id});
                Ok(json(StatusCode::ACCEPTED, to_vec(&aborted)))
            }
            (&Method::POST, [id, "tools"]) => {
                let session = find(&runner, &caller, id).await?;
                let policy = self.callbacks.policy();
                register_tool(
                    &runner,
                    &caller,
                    &session,
                    request,
                    mount.body_limit,
                    policy,
                )
                .await
            }
            (&Method::GET, [id, "events"]) => {
                let session = find(&runner, &caller, id).await?;
                Ok(events(&runner, &session).await)
            }
            (&Method::GET, [id, "stats"]) => {
                let session = find(&runner, &caller, id).await?;
                Ok(ok(stats(&runner, &caller, &session)))
            }
            (&Method::GET, [id, "messages"]) => {
                let session = find(&runner, &caller, id).await?;
                let messages = session.state().messages.clone();
                Ok(ok(json!({"sessionId": session.id, "messages": messages})))
            }
            (&Method::GET, [id, "ws"]) => {
                mount.cors.check_websocket(request.headers())?;
                let session = find(&runner, &caller, id).await.map_err(|error| {
                    if error.status == StatusCode::NOT_FOUND {
                        ApiError::new(error.status, "session_not_found", error.message)
                    } else {
                        error
                    }
                })?;
                let client = SocketClient {
                    caller,
                    access: Arc::clone(&mount.access),
                };
                upgrade(runner, session, client, request, self.socket)
            }
            _ => Err(no_route()),
        }
    }

    fn health(&self) -> Response<Body> {
        let (active, tracked) = self.runner.get().map_or((0, 0), |runner| {
            (runner.sessions.active(), runner.sessions.tracked_keys())
        });
        ok(json!({
            "status": "ok",
            "version": VERSION,
            "sessions": {"active": active},
            "meter": {"tracked_keys": tracked},
            "timestamp": run::timestamp(SystemTime::now(), true),
        }))
    }
}

/// The caller's session `id`. Where the store keeps sessions, one no run of which goes on here is brought up
/// to date from the store (another replica, or this one before a restart, may have changed or made it).
async fn find(runner: &Arc<Runner>, caller: &Caller, id: &str) -> Result<Arc<Session>, ApiError> {
    let local = runner.sessions.get(&caller.tenant, id);
    if !runner.documents.kept() || local.as_ref().is_some_and(|s| s.state().busy) {
        return local.ok_or_else(|| ApiError::session_not_found(id));
    }
    match runner.recall(&caller.tenant, id).await {
        Ok(Some(kept)) => Ok(runner.sessions.adopt(&caller.tenant, id, kept)),
        Ok(None) => {
            // Deleted on another replica, or expired.
            if let Some(session) = runner.sessions.remove(&caller.tenant, id) {
                session.close();
            }
            Err(ApiError::session_not_found(id))
        }
        Err(error) => {
            tracing::warn!(session = %id, "cmdc: a kept session could not be read: {error}");
            local.ok_or_else(|| ApiError::from(error))
        }
    }
}

/// Whether a run of the session goes on on another replica: what its clients ask is handed there.
fn elsewhere(session: &Session) -> bool {
    session.state().elsewhere
}

async fn create(
    runner: &Arc<Runner>,
    caller: &Caller,
    request: Request<Incoming>,
    limit: BodyLimit,
) -> Answer {
    let create: wire::CreateSession = read_json(request, limit).await?;
    let model = create
        .model
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "create_failed",
                ":missing_model",
            )
        })?;
    let named = create.session_id.filter(|id| !id.is_empty());
    // A name minted here is no other session's: not looked for.
    let look_for = named.is_some();
    // 128 random bits (the gateway mints 16 hex digits): on an open route the id is the only secret.
    let id = named.unwrap_or_else(crate::model::random_hex);
    if id.contains(['/', '?', '#', '%']) || id.chars().any(char::is_whitespace) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "create_failed",
            format!("invalid sessionId {id:?}"),
        ));
    }
    let kernel: Vec<&String> = create.kernel.keys().collect();
    if !kernel.is_empty() || create.max_turns.is_some() || create.max_tokens.is_some() {
        tracing::debug!(session = %id, ?kernel, "CMDC kernel fields have no upstream equivalent; ignored");
    }
    let create_failed =
        |reason| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "create_failed", reason);
    let known = look_for
        && (runner.sessions.get(&caller.tenant, &id).is_some()
            || (runner.documents.kept() && runner.recall(&caller.tenant, &id).await?.is_some()));
    if known {
        return Err(create_failed(":already_started"));
    }
    let session = runner
        .open(&caller.tenant, &id, model, create.system_prompt)
        .await
        .map_err(|error| match error {
            Opened::Refused(CreateError::Exists) => create_failed(":already_started"),
            Opened::Refused(CreateError::Full) => create_failed(":too_many_sessions"),
            Opened::Store(error) => ApiError::from(error),
        })?;
    let created = wire::SessionCreated {
        session_id: session.id.clone(),
        status: "created".into(),
    };
    Ok(json(StatusCode::CREATED, to_vec(&created)))
}

fn info(session: &Session) -> Value {
    let state = session.state();
    json!({
        "sessionId": session.id,
        "state": state.status.name(),
        "turns": state.turns,
        "toolCalls": state.tool_calls,
        "totalTokens": state.usage.total_tokens,
        "uptimeMs": session.uptime_ms(),
    })
}

/// Both shapes: the seed's `meter` (per API key) and the SDK's top-level fields.
fn stats(runner: &Runner, caller: &Caller, session: &Session) -> Value {
    let mut body = info(session);
    let meter = runner.sessions.meter(meter_key(caller));
    let usage = session.state().usage;
    body["meter"] = json!({
        "promptCount": meter.prompts,
        "totalPromptTokens": meter.usage.prompt_tokens,
        "totalCompletionTokens": meter.usage.completion_tokens,
        "totalTokens": meter.usage.total_tokens,
    });
    body["promptCount"] = json!(meter.prompts);
    body["costUsd"] = json!(0);
    body["tokenUsage"] = serde_json::to_value(usage).unwrap_or_default();
    body
}

/// How many runs of a session, one after another on other replicas, a request follows before giving up.
const HAND_OVER_ATTEMPTS: usize = 3;

/// Hands `control` to the replica that drives the session's run, while one does and its run waits for
/// `control`. `None`: a replica took it. Else the session as the store keeps it now (no replica drives it,
/// or the run it drives is not the one `control` was meant for, which ended while it was handed over): the
/// request is served here.
async fn hand_over(
    runner: &Arc<Runner>,
    caller: &Caller,
    session: &Arc<Session>,
    control: &Control,
) -> Result<Option<Arc<Session>>, ApiError> {
    let mut session = Arc::clone(session);
    for _ in 0..HAND_OVER_ATTEMPTS {
        if !elsewhere(&session) || !control.is_awaited_by(&session) {
            return Ok(Some(session));
        }
        if runner.hand_over(&session, control).await? {
            return Ok(None);
        }
        session = find(runner, caller, &session.id).await?;
    }
    Err(moving_between_replicas())
}

/// How long a prompt waits for the replica that claimed the session's next run to show it running in the
/// store, and how often it looks.
const CLAIMED_WAIT: Duration = Duration::from_secs(2);
const CLAIMED_POLL: Duration = Duration::from_millis(20);

fn moving_between_replicas() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "The session's runs moved between replicas faster than the request could follow; try again",
    )
}

/// Hands an answer to the paused run, here or on the replica that runs it; unknown ids are a 404.
async fn answer(
    runner: &Arc<Runner>,
    caller: &Caller,
    session: &Arc<Session>,
    resume: crate::model::Resume,
) -> Result<(), ApiError> {
    let interrupt = resume.interrupt_id.clone();
    let not_pending = || {
        ApiError::not_found(format!(
            "No pending request {interrupt} in session {}",
            session.id
        ))
    };
    let control = Control::Answer(resume.clone());
    let Some(here) = hand_over(runner, caller, session, &control).await? else {
        return Ok(());
    };
    here.answer(resume).map_err(|why| match why {
        Unanswered::NotPending => not_pending(),
        Unanswered::RunEnded => ApiError::not_found("The run waiting for this answer has ended"),
    })
}

/// Runs the prompt here, or queues it here or on the replica that runs the session's run. Whether it
/// was queued.
async fn accept_prompt(
    runner: &Arc<Runner>,
    caller: &Caller,
    session: &Arc<Session>,
    text: String,
    api_key: &str,
) -> Result<bool, ApiError> {
    let control = Control::Prompt {
        text: text.clone(),
        api_key: api_key.to_owned(),
    };
    let deadline = Instant::now() + CLAIMED_WAIT;
    let mut session = Arc::clone(session);
    loop {
        let Some(here) = hand_over(runner, caller, &session, &control).await? else {
            return Ok(true);
        };
        if runner.claim_next_run(&here).await? {
            return Ok(runner.prompt(&here, text, api_key).await);
        }
        // Another replica claimed the session's next run: the prompt goes there once the store shows it.
        if Instant::now() >= deadline {
            return Err(moving_between_replicas());
        }
        tokio::time::sleep(CLAIMED_POLL).await;
        session = find(runner, caller, &here.id).await?;
    }
}

/// Deletes the session, here and in the store; a run of it on another replica is ended there.
async fn delete(
    runner: &Arc<Runner>,
    caller: &Caller,
    session: &Arc<Session>,
) -> Result<(), ApiError> {
    hand_over(runner, caller, session, &Control::Close).await?;
    if let Some(local) = runner.sessions.remove(&session.tenant, &session.id) {
        local.close();
    }
    if runner.documents.kept() {
        runner
            .documents
            .delete(SESSION_DOCUMENT, &session.tenant, &session.id)
            .await?;
    }
    Ok(())
}

/// `POST …/tools`: a callback URL its literal host already shows to be refused by the route's policy is
/// refused now (422); the authoritative check is at each call, when names are resolved.
async fn register_tool(
    runner: &Arc<Runner>,
    caller: &Caller,
    session: &Arc<Session>,
    request: Request<Incoming>,
    limit: BodyLimit,
    policy: &Policy,
) -> Answer {
    let registration_failed = |message: String| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "registration_failed",
            message,
        )
    };
    let requester = Requester::of(&request)
        .ok_or_else(|| registration_failed("the client's address is unknown".to_owned()))?;
    let tool: wire::CallbackTool = serde_json::from_slice(&read_json_bytes(request, limit).await?)
        .map_err(|e| registration_failed(format!("invalid tool: {e}")))?;
    let uri = tool
        .callback_url
        .parse::<http::Uri>()
        .ok()
        .filter(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
    let (false, Some(uri)) = (tool.name.is_empty(), uri) else {
        return Err(registration_failed(
            "a tool needs a name and an absolute http(s) callbackUrl".to_owned(),
        ));
    };
    policy
        .check_literal(&uri, &requester)
        .map_err(|e| registration_failed(e.message().to_owned()))?;
    let name = tool.name.clone();
    let registered = RegisteredTool { tool, requester };
    // The replica running the session's run keeps it with the rest of the session.
    let control = Control::Tool(KeptTool::of(&registered));
    match hand_over(runner, caller, session, &control).await? {
        None => session.state().register(registered),
        Some(here) => {
            here.state().register(registered);
            runner.keep(&here).await;
        }
    }
    Ok(json(
        StatusCode::CREATED,
        to_vec(&json!({"ok": true, "sessionId": session.id, "toolName": name})),
    ))
}

/// `GET …/events`: the current run (replayed from its start), then live; closes after its terminal event.
async fn events(runner: &Arc<Runner>, session: &Arc<Session>) -> Response<Body> {
    let frames = follow::one_run(runner, session).await.map(|event| {
        let mut frame = BytesMut::new();
        event.write_sse(&mut frame);
        frame.freeze()
    });
    sse::stream_response(frames, sse::EVENT_STREAM_UTF8, HEARTBEAT_FRAME)
}

/// A JSON body: declared `application/json` (with any parameters, or a `+json` type), or empty with no
/// type at all. Anything else (`text/plain`, a form) is refused before it is read: a browser sends those
/// cross-origin without asking.
async fn read_json_bytes(request: Request<Incoming>, limit: BodyLimit) -> Result<Bytes, ApiError> {
    let declared = request.headers().contains_key(CONTENT_TYPE);
    if declared {
        body::expect_json(request.headers()).map_err(|e| {
            ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                e.message(),
            )
        })?;
    }
    let bytes = body::read_request(request.into_body(), limit).await?;
    if !declared && !is_blank(&bytes) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "missing Content-Type; send application/json",
        ));
    }
    Ok(bytes)
}

/// The JSON body; an empty body reads as `{}`.
async fn read_json<T: DeserializeOwned>(
    request: Request<Incoming>,
    limit: BodyLimit,
) -> Result<T, ApiError> {
    Reader::new().decode(&read_json_bytes(request, limit).await?)
}

fn request_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_owned()
}

fn to_vec<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

fn json(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    body::json_response(status, body)
}

fn ok(body: Value) -> Response<Body> {
    json(StatusCode::OK, to_vec(&body))
}

impl InboundFace for Inbound {
    async fn handle(&self, request: Request<Incoming>, mount: &Mount) -> Response<Body> {
        match self.serve(request, mount).await {
            Ok(response) => response,
            Err(error) => error.into_response(),
        }
    }
}
