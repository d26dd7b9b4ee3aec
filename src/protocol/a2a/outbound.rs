//! A2A outbound: we are the A2A 0.2.5 client (`specs/a2a.md` §5).
//!
//! A [`Turn`] becomes one JSON-RPC `message/stream` (or `message/send` when the agent card says the agent does
//! not stream) carrying only what the agent has not seen: A2A agents keep the history themselves. The answer —
//! SSE events or one JSON body, each a JSON-RPC response — is decoded by [`Decoder`] into canonical events.
//!
//! Conversation state lives in the conversation record under keys this module owns: the upstream `contextId`
//! (kept across turns), and while a task waits for input its `taskId`, the id of the interrupt we emitted for
//! it, and the artifact text it had shown (so that continuing it does not show that text again).
//!
//! If the run is dropped (the client went away, the route's timeout) or given up while the upstream task
//! still runs, a `tasks/cancel` is sent for it in the background.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use tracing::{debug, info};

use super::{part_from_wire, part_to_wire, wire};
use crate::config::Translate;
use crate::error::{Error, Result, Source};
use crate::json::null_as_default;
use crate::model::{
    new_id, Artifact, Event, Interrupt, InterruptKind, Message, Outcome, Part, Resume,
    ResumeStatus, Role, Turn,
};
use crate::sse::{self, SseReadError, SseReader};
use crate::store::Record;
use crate::translate::RunContext;
use crate::upstream::{self, redacted, Upstream};

/// Record key: the upstream `contextId` of the conversation.
const CONTEXT_ID: &str = "a2a.context_id";
/// Record key: the upstream task waiting for input (`input-required` / `auth-required`).
const TASK_ID: &str = "a2a.task_id";
/// Record key: the interrupt emitted for that task; `resume` entries answering it are sent to the task.
const INTERRUPT_ID: &str = "a2a.interrupt_id";
/// Record key: the artifacts that task had shown when it paused (JSON), so its next answer shows only what
/// is new.
const SHOWN_ARTIFACTS: &str = "a2a.shown_artifacts";

/// The largest SSE event accepted from an upstream.
const MAX_EVENT_BYTES: usize = 10 * 1024 * 1024;
/// The largest JSON answer accepted from an upstream (a blocking `message/send` result).
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// The largest agent card accepted.
const MAX_CARD_BYTES: usize = 1024 * 1024;
/// How much of a small JSON-RPC answer (`tasks/cancel`) is read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How long reading the agent card may take (both well-known paths together).
const CARD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the `tasks/get` after a stream that ended early may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a `tasks/cancel` may take (it runs in the background when the run was dropped).
const CANCEL_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the agent card comes from (`[routes.translate] a2a_card`).
#[derive(Debug, Clone, PartialEq)]
enum CardSource {
    /// No card: the agent is taken to stream.
    Assume,
    /// `<upstream>/.well-known/agent-card.json`, then `agent.json`.
    Auto,
    Url(Uri),
    /// Not a URL (config validation should have caught it).
    Invalid(String),
}

/// What the card told us about how to talk to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dialect {
    streaming: bool,
}

pub struct Outbound {
    upstream: Upstream,
    card: CardSource,
    /// Learned once per route from the card; a failed read is not kept, so the next run tries again.
    dialect: OnceCell<Dialect>,
}

impl Outbound {
    pub fn new(upstream: Upstream, translate: &Translate) -> Self {
        let card = match translate.a2a_card.as_deref() {
            None => CardSource::Assume,
            Some("auto") => CardSource::Auto,
            Some(url) => url
                .parse()
                .map_or_else(|_| CardSource::Invalid(url.to_owned()), CardSource::Url),
        };
        Self {
            upstream,
            card,
            dialect: OnceCell::new(),
        }
    }

    pub async fn run(&self, turn: &Turn, context: &mut RunContext) -> Result<()> {
        let dialect = self.dialect().await?;
        let outgoing = outgoing(turn, &context.record)?;
        if !turn.tools.is_empty() {
            debug!(
                tools = turn.tools.len(),
                "client tools cannot be offered to an A2A agent; not sent"
            );
        }
        if let Some(task_id) = &outgoing.cancel {
            // The client declined the paused task's question.
            forget_paused_task(&mut context.record);
            cancel_task(&self.upstream, task_id).await;
        }
        let Some(message) = outgoing.message else {
            context
                .emit(Event::RunFinished {
                    outcome: Outcome::Cancelled,
                    usage: None,
                })
                .await?;
            return Ok(());
        };
        let mut decoder = Decoder::default();
        if message.task_id.is_some() {
            if let Some(shown) = context.record.upstream.get(SHOWN_ARTIFACTS) {
                decoder.seed_shown_artifacts(shown);
            }
        }
        let (method, accept) = if dialect.streaming {
            ("message/stream", "text/event-stream")
        } else {
            ("message/send", "application/json")
        };
        let continues = message.task_id.is_some();
        let params = wire::MessageSendParams {
            message,
            configuration: None,
            metadata: None,
        };
        let response = self
            .upstream
            .post_json_any_status(rpc_request(method, &params)?, accept)
            .await?;
        if continues {
            // The agent has the answer now; the task is remembered again only if it pauses again.
            forget_paused_task(&mut context.record);
        }
        let mut guard = CancelGuard {
            upstream: self.upstream.clone(),
            task_id: None,
        };
        let result = self.read(response, &mut decoder, &mut guard, context).await;
        remember(&decoder, &mut context.record);
        result
    }

    /// How to talk to the agent: from its card, read once.
    async fn dialect(&self) -> Result<Dialect> {
        let discover = async {
            tokio::time::timeout(CARD_TIMEOUT, self.discover())
                .await
                .unwrap_or_else(|_| {
                    Err(Error::upstream_timeout(format!(
                        "reading the A2A agent card took longer than {CARD_TIMEOUT:?}"
                    )))
                })
        };
        self.dialect.get_or_try_init(|| discover).await.copied()
    }

    async fn discover(&self) -> Result<Dialect> {
        match &self.card {
            CardSource::Assume => Ok(Dialect { streaming: true }),
            CardSource::Invalid(card) => Err(Error::config(format!(
                "a2a_card must be \"auto\" or an absolute http(s) URL, not {card:?}"
            ))),
            CardSource::Url(uri) => self.read_card(uri.clone()).await,
            CardSource::Auto => {
                let mut failures = Vec::new();
                for name in ["agent-card.json", "agent.json"] {
                    let uri = well_known(self.upstream.uri(), name)?;
                    match self.read_card(uri.clone()).await {
                        Ok(dialect) => return Ok(dialect),
                        // A card that says "not 0.2.5", or an agent that cannot be reached at all.
                        Err(error)
                            if error.source() == Source::Config
                                || matches!(
                                    error.code(),
                                    "UPSTREAM_UNREACHABLE" | "UPSTREAM_TIMEOUT"
                                ) =>
                        {
                            return Err(error)
                        }
                        Err(error) => failures.push(format!("{}: {error}", redacted(&uri))),
                    }
                }
                Err(Error::config(format!(
                    "a2a_card = \"auto\" found no A2A agent card ({}); set a2a_card to the card's URL, or \
                     remove it to assume the agent streams",
                    failures.join("; ")
                )))
            }
        }
    }

    async fn read_card(&self, uri: Uri) -> Result<Dialect> {
        let response = self.upstream.get(uri.clone(), "application/json").await?;
        let body = read_body(response.into_body(), MAX_CARD_BYTES).await?;
        let shown = redacted(&uri);
        let card: DiscoveredCard = serde_json::from_slice(&body).map_err(|e| {
            Error::upstream_malformed(format!("the A2A agent card at {shown} is not a card: {e}"))
        })?;
        let dialect = card.dialect(&uri)?;
        info!(card = %shown, streaming = dialect.streaming, "read the A2A agent card");
        if let Some(url) = card.url.as_deref() {
            if url.trim_end_matches('/') != self.upstream.uri().to_string().trim_end_matches('/') {
                debug!(card_url = url, upstream = %redacted(self.upstream.uri()),
                    "the card names another endpoint; the route's upstream URL is used");
            }
        }
        Ok(dialect)
    }

    /// Reads the answer to `message/send` or `message/stream`, whatever its framing.
    async fn read(
        &self,
        response: http::Response<Incoming>,
        decoder: &mut Decoder,
        guard: &mut CancelGuard,
        context: &mut RunContext,
    ) -> Result<()> {
        let status = response.status();
        if !status.is_success() {
            return Err(error_answer(response).await);
        }
        let mut events = Vec::new();
        if sse::is_event_stream(response.headers()) {
            let mut reader = SseReader::new(response.into_body(), MAX_EVENT_BYTES);
            loop {
                let frame = match reader.next().await {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(SseReadError::Body(cause)) => {
                        debug!("the upstream A2A stream broke off: {cause}");
                        break;
                    }
                    Err(SseReadError::Frame(e)) => {
                        return Err(Error::upstream_malformed(format!(
                            "reading the upstream A2A stream failed: {e}"
                        )))
                    }
                };
                let over = decoder.decode(&frame.data, &mut events)?;
                // Before emitting: the run may be dropped while it waits for a slow client.
                guard.track(decoder.running_task());
                emit_all(context, &mut events).await?;
                if over {
                    break;
                }
            }
        } else {
            // One JSON-RPC response: the `message/send` answer, or a stream request answered as JSON.
            let body = read_body(response.into_body(), MAX_BODY_BYTES).await?;
            let text = std::str::from_utf8(&body)
                .map_err(|_| Error::upstream_malformed("the upstream A2A answer is not UTF-8"))?;
            decoder.decode(text, &mut events)?;
            guard.track(decoder.running_task());
            emit_all(context, &mut events).await?;
        }
        if let Some(task_id) = decoder.end_of_stream(&mut events) {
            emit_all(context, &mut events).await?;
            if let Some(answer) = query_task(&self.upstream, &task_id).await {
                decoder.decode_task_query(&answer, &mut events);
            }
        }
        guard.track(decoder.running_task());
        emit_all(context, &mut events).await
    }
}

async fn emit_all(context: &mut RunContext, events: &mut Vec<Event>) -> Result<()> {
    for event in events.drain(..) {
        context.emit(event).await?;
    }
    Ok(())
}

// --- The request -----------------------------------------------------------------------------------------

/// What a turn sends upstream.
#[derive(Debug, PartialEq)]
struct Outgoing {
    /// A paused task to cancel first: the client declined its question.
    cancel: Option<String>,
    /// The message to send; `None` when, after declining, there is nothing else to say.
    message: Option<wire::Message>,
}

/// The turn as one A2A message: the answers to the paused task's question (if any) and the new messages
/// (`turn.messages` is what the agent has not seen), in the conversation's `contextId`, continuing the paused
/// task when there is one.
fn outgoing(turn: &Turn, record: &Record) -> Result<Outgoing> {
    let context_id = record.upstream.get(CONTEXT_ID).cloned();
    let paused = record.upstream.get(TASK_ID).cloned();
    let interrupt_id = record.upstream.get(INTERRUPT_ID);
    let (answers, stale): (Vec<&Resume>, Vec<&Resume>) = turn
        .resume
        .iter()
        .partition(|r| interrupt_id.map_or(true, |id| r.interrupt_id == *id));
    if !stale.is_empty() {
        debug!(
            count = stale.len(),
            "resume entries for interrupts this A2A conversation is not waiting on; ignored"
        );
    }
    let mut parts = Vec::new();
    let mut cancel = None;
    let mut task_id = None;
    match paused {
        Some(task)
            if !answers.is_empty()
                && answers.iter().all(|r| r.status == ResumeStatus::Cancelled) =>
        {
            cancel = Some(task);
        }
        Some(task) => {
            task_id = Some(task);
            parts.extend(
                answers
                    .iter()
                    .filter(|r| r.status == ResumeStatus::Resolved)
                    .map(|r| wire::Part::text(answer_text(r.payload.as_ref()))),
            );
        }
        None if !answers.is_empty() => {
            debug!("resume entries but no A2A task is waiting for input; ignored");
        }
        None => {}
    }
    for message in &turn.messages {
        message_parts(message, &mut parts);
    }
    parts.retain(|part| !matches!(part, wire::Part::Text { text, .. } if text.is_empty()));
    if parts.is_empty() {
        if cancel.is_some() {
            return Ok(Outgoing {
                cancel,
                message: None,
            });
        }
        return Err(Error::bad_request(
            "the turn has nothing new for the A2A agent: no user message and no answer to its question",
        ));
    }
    Ok(Outgoing {
        cancel,
        message: Some(wire::Message {
            kind: wire::MessageKind::Message,
            role: wire::MessageRole::User,
            message_id: new_id("msg"),
            parts,
            context_id,
            task_id,
            reference_task_ids: Vec::new(),
            metadata: None,
        }),
    })
}

/// An answer to the agent's question as message text: a JSON string is the text itself, other JSON its text.
/// An answer with no payload (an AgentScope client approving the question, say) is a plain go-ahead: "yes" —
/// dropped, it left the turn with nothing to send.
fn answer_text(payload: Option<&serde_json::Value>) -> String {
    match payload {
        None | Some(serde_json::Value::Null) => "yes".to_owned(),
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

/// Appends what one new message contributes to the outgoing A2A message.
fn message_parts(message: &Message, parts: &mut Vec<wire::Part>) {
    match message.role {
        Role::User => parts.extend(message.content.iter().map(part_to_wire)),
        Role::Tool => {
            // A2A has no tool results: the agent reads them as text.
            let call = message
                .name
                .clone()
                .or_else(|| message.tool_call_id.clone())
                .unwrap_or_default();
            info!(call = %call, "A2A has no tool results; sent as user text");
            let what = if message.is_error {
                "Error from tool call"
            } else {
                "Result of tool call"
            };
            parts.push(wire::Part::text(format!(
                "[{what} {call}]\n{}",
                message.text()
            )));
        }
        Role::System | Role::Developer => {
            info!(message = %message.id,
                "A2A agents take no system or developer messages (they keep their own instructions); not sent");
        }
        Role::Assistant => {
            debug!(message = %message.id, "assistant messages are not sent to an A2A agent");
        }
    }
}

/// One JSON-RPC request with a fresh string id.
fn rpc_request<P: Serialize>(method: &str, params: &P) -> Result<Bytes> {
    let id = new_id("req");
    let request = wire::Request {
        jsonrpc: "2.0",
        id: &id,
        method,
        params,
    };
    serde_json::to_vec(&request)
        .map(Bytes::from)
        .map_err(|e| Error::internal(format!("encoding the A2A {method} request failed: {e}")))
}

// --- Conversation state -----------------------------------------------------------------------------------

fn forget_paused_task(record: &mut Record) {
    record.upstream.remove(TASK_ID);
    record.upstream.remove(INTERRUPT_ID);
    record.upstream.remove(SHOWN_ARTIFACTS);
}

/// Keeps what the run learned: the context, and the task if it paused.
fn remember(decoder: &Decoder, record: &mut Record) {
    if let Some(context_id) = decoder.context_id() {
        record
            .upstream
            .insert(CONTEXT_ID.to_owned(), context_id.to_owned());
    }
    if let Some((task_id, interrupt_id)) = decoder.paused() {
        record
            .upstream
            .insert(TASK_ID.to_owned(), task_id.to_owned());
        record
            .upstream
            .insert(INTERRUPT_ID.to_owned(), interrupt_id.to_owned());
        record
            .upstream
            .insert(SHOWN_ARTIFACTS.to_owned(), decoder.shown_artifacts());
    }
}

// --- Talking to the agent -------------------------------------------------------------------------------

/// Reads a whole body, up to `limit` bytes.
async fn read_body(body: Incoming, limit: usize) -> Result<Bytes> {
    Limited::new(body, limit)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|e| {
            Error::upstream_malformed(format!("reading the upstream A2A answer failed: {e}"))
        })
}

/// A non-2xx answer: the JSON-RPC error in its body if there is one (@a2a-js/sdk answers unhandled
/// exceptions with HTTP 500 and a JSON-RPC error), else the status and the start of the body.
async fn error_answer(response: http::Response<Incoming>) -> Error {
    let (status, body) = upstream::error_body(response).await;
    match serde_json::from_slice::<wire::RawResponse<serde::de::IgnoredAny>>(&body) {
        Ok(wire::RawResponse {
            error: Some(error), ..
        }) => rpc_error(error),
        _ => Error::upstream_status(status, &String::from_utf8_lossy(&body)),
    }
}

/// A JSON-RPC error from the agent as a run error; its code, as text, is the error's code.
fn rpc_error(error: wire::JsonRpcError) -> Error {
    let message = if error.message.is_empty() {
        format!("the A2A agent answered JSON-RPC error {}", error.code)
    } else {
        error.message
    };
    Error::upstream_agent(error.code.to_string(), message)
}

/// `tasks/get` for a task whose stream ended early; the answer's text, or `None` if there is none to read.
async fn query_task(upstream: &Upstream, task_id: &str) -> Option<String> {
    let query = async {
        let params = wire::TaskQueryParams {
            id: task_id.to_owned(),
            history_length: None,
        };
        let response = upstream
            .post_json(rpc_request("tasks/get", &params)?, "application/json")
            .await?;
        let body = read_body(response.into_body(), MAX_BODY_BYTES).await?;
        String::from_utf8(body.to_vec())
            .map_err(|_| Error::upstream_malformed("the tasks/get answer is not UTF-8"))
    };
    match tokio::time::timeout(QUERY_TIMEOUT, query).await {
        Ok(Ok(answer)) => Some(answer),
        Ok(Err(error)) => {
            debug!(
                task = task_id,
                "tasks/get after the stream ended failed: {error}"
            );
            None
        }
        Err(_) => {
            debug!(task = task_id, "tasks/get after the stream ended timed out");
            None
        }
    }
}

/// `tasks/cancel`, bounded; the outcome is only logged (a task that already ended cannot be canceled).
async fn cancel_task(upstream: &Upstream, task_id: &str) {
    let cancel = async {
        let params = wire::TaskIdParams {
            id: task_id.to_owned(),
        };
        let response = upstream
            .post_json(rpc_request("tasks/cancel", &params)?, "application/json")
            .await?;
        let body = read_body(response.into_body(), MAX_ANSWER_BYTES).await?;
        match serde_json::from_slice::<wire::RawResponse<serde::de::IgnoredAny>>(&body) {
            Ok(wire::RawResponse {
                error: Some(error), ..
            }) => Err(rpc_error(error)),
            _ => Ok(()),
        }
    };
    match tokio::time::timeout(CANCEL_TIMEOUT, cancel).await {
        Ok(Ok(())) => debug!(task = task_id, "canceled the upstream A2A task"),
        Ok(Err(error)) => debug!(task = task_id, "tasks/cancel failed: {error}"),
        Err(_) => debug!(task = task_id, "tasks/cancel timed out"),
    }
}

/// Cancels the upstream task if the run ends — dropped by a client that went away or by the route's timeout,
/// or given up on — while that task still runs. Drop must not block: the cancel runs as its own task.
struct CancelGuard {
    upstream: Upstream,
    task_id: Option<String>,
}

impl CancelGuard {
    fn track(&mut self, running: Option<&str>) {
        if self.task_id.as_deref() != running {
            self.task_id = running.map(str::to_owned);
        }
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        let Some(task_id) = self.task_id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            debug!(task = %task_id, "no runtime to cancel the upstream A2A task on");
            return;
        };
        let upstream = self.upstream.clone();
        debug!(task = %task_id, "the run ended while its A2A task runs; canceling it");
        runtime.spawn(async move { cancel_task(&upstream, &task_id).await });
    }
}

// --- The agent card --------------------------------------------------------------------------------------

/// `<upstream URL>/.well-known/<name>` (the query dropped).
fn well_known(upstream: &Uri, name: &str) -> Result<Uri> {
    let (Some(scheme), Some(authority)) = (upstream.scheme_str(), upstream.authority()) else {
        return Err(Error::config(format!(
            "a2a_card = \"auto\" needs an absolute upstream URL, not {upstream}"
        )));
    };
    let path = upstream.path().trim_end_matches('/');
    format!("{scheme}://{authority}{path}/.well-known/{name}")
        .parse()
        .map_err(|e| Error::config(format!("no agent card URL from {upstream}: {e}")))
}

/// What discovery reads of a card, loosely: 0.2.x cards, 0.3 / 1.x "hybrid" cards (top-level `url` and
/// `protocolVersion` 0.3 plus `supportedInterfaces`), and 1.0-only cards (refused).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DiscoveredCard {
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    protocol_version: Option<String>,
    #[serde(default)]
    capabilities: Option<wire::AgentCapabilities>,
    #[serde(default, deserialize_with = "null_as_default")]
    supported_interfaces: Vec<AgentInterface>,
}

/// A 1.x `supportedInterfaces` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AgentInterface {
    #[serde(default)]
    protocol_binding: Option<String>,
    #[serde(default)]
    protocol_version: Option<String>,
}

impl DiscoveredCard {
    /// The dialect, or a configuration error for an agent that does not speak 0.2/0.3 JSON-RPC.
    fn dialect(&self, uri: &Uri) -> Result<Dialect> {
        let legacy = |version: &str| version.trim().starts_with("0.");
        let top_level = self.url.is_some() && self.protocol_version.as_deref().map_or(true, legacy);
        let interface = self.supported_interfaces.iter().any(|i| {
            i.protocol_binding
                .as_deref()
                .is_some_and(|b| b.eq_ignore_ascii_case("JSONRPC"))
                && i.protocol_version.as_deref().is_some_and(legacy)
        });
        if !(top_level || interface) {
            let version = self
                .protocol_version
                .as_deref()
                .or_else(|| {
                    self.supported_interfaces
                        .iter()
                        .find_map(|i| i.protocol_version.as_deref())
                })
                .unwrap_or("1.0");
            return Err(Error::config(format!(
                "the A2A agent card at {} describes an A2A {version} agent with no 0.2/0.3 JSON-RPC \
                 interface; agent-bridge speaks A2A 0.2.5 (the 1.0 dialect is not supported)",
                redacted(uri)
            )));
        }
        Ok(Dialect {
            streaming: self
                .capabilities
                .as_ref()
                .and_then(|c| c.streaming)
                .unwrap_or(false),
        })
    }
}

// --- The answer ------------------------------------------------------------------------------------------

/// Decodes an upstream A2A answer into canonical events. Each SSE `data:` payload of `message/stream`, or the
/// JSON body of `message/send`, is one JSON-RPC response ([`Decoder::decode`]); when the stream ends without
/// settling the run, [`Decoder::end_of_stream`] names the task to ask about, and
/// [`Decoder::decode_task_query`] reads the `tasks/get` answer.
///
/// - artifact text → assistant text, one message per artifact: `append` adds to it (an unknown artifact is
///   created), a replacement (`append` false) of a known artifact shows only the new suffix when it extends
///   the old text and otherwise starts a new message; `lastChunk` ends the message;
/// - data and file parts → [`Event::Artifact`];
/// - status message text → assistant text (only the new suffix when it extends the task's previous status
///   text; nothing when it repeats an artifact's text); `submitted`/`working` alone → nothing;
/// - `input-required` / `auth-required` → an input-required interrupt, then the run finishes interrupted;
///   `completed` → finished; `canceled` → cancelled; `failed` / `rejected` / `unknown` → a run error with
///   that code and the status message; a JSON-RPC error → a run error with its code (`"-32001"`, ...);
/// - a `Message` result → its text, and the run is finished.
#[derive(Debug, Default)]
pub struct Decoder {
    /// The upstream conversation, as the agent last named it.
    context_id: Option<String>,
    /// The run's task, once the agent named one.
    task_id: Option<String>,
    /// The task's last state.
    state: Option<wire::TaskState>,
    /// The question of a paused status that did not end the stream (`final` absent): it settles the run if
    /// nothing moves the task on before the stream ends.
    pending_pause: Option<String>,
    /// The run's terminal event was produced.
    settled: bool,
    /// The stream said it is over (`final`) without a state that settles the run.
    over: bool,
    /// The interrupt the run ended with.
    interrupt_id: Option<String>,
    /// What each artifact has shown, by artifactId.
    artifacts: HashMap<String, ShownArtifact>,
    /// The last status message text of each task ("" for none), and the message showing it.
    status_texts: HashMap<String, StatusText>,
}

/// What one artifact has shown so far.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ShownArtifact {
    /// The canonical message showing its text.
    #[serde(skip)]
    message_id: String,
    text: String,
    /// How many data and file parts were emitted.
    data_parts: usize,
}

#[derive(Debug)]
struct StatusText {
    message_id: String,
    text: String,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one JSON-RPC response. Returns `true` when the stream has nothing more to say: the run is
    /// settled (its terminal event is in `out`), or the agent said `final`.
    pub fn decode(&mut self, data: &str, out: &mut Vec<Event>) -> Result<bool> {
        if self.settled || self.over {
            debug!("dropping an A2A event after the end of the run");
            return Ok(true);
        }
        if data.trim().is_empty() {
            return Ok(false);
        }
        let response = wire::RawResponse::<wire::StreamResult>::parse(data).map_err(|e| {
            Error::upstream_malformed(format!(
                "upstream sent something that is not an A2A 0.2.5 JSON-RPC response: {e}"
            ))
        })?;
        match response {
            wire::RawResponse {
                error: Some(error), ..
            } => self.settle(Event::RunError(rpc_error(error)), out),
            wire::RawResponse {
                result: Some(result),
                ..
            } => self.result(result, out),
            _ => {
                return Err(Error::upstream_malformed(
                    "upstream sent a JSON-RPC response with neither result nor error",
                ))
            }
        }
        Ok(self.settled || self.over)
    }

    /// The stream ended (closed, broken off, or `final`). Settles the run on a paused task; otherwise returns
    /// the task a `tasks/get` could tell the state of, if the run is not settled.
    pub fn end_of_stream(&mut self, out: &mut Vec<Event>) -> Option<String> {
        if self.settled {
            return None;
        }
        if let Some(text) = self.pending_pause.take() {
            self.pause(text, out);
            return None;
        }
        self.task_id.clone()
    }

    /// Decodes the `tasks/get` answer for that task: a state that settles the run settles it (with what the
    /// task shows that the stream did not); a task still running, or an error, leaves the run unsettled, and
    /// the run ends as cut short.
    pub fn decode_task_query(&mut self, data: &str, out: &mut Vec<Event>) {
        if self.settled {
            return;
        }
        match serde_json::from_str::<wire::RawResponse<wire::Task>>(data) {
            Ok(wire::RawResponse {
                error: Some(error), ..
            }) => debug!(
                "tasks/get answered an error: {}",
                crate::logging::clipped(&error.message)
            ),
            Ok(wire::RawResponse {
                result: Some(task), ..
            }) => {
                self.over = false;
                self.task(task, out);
                if let Some(text) = self.pending_pause.take() {
                    self.pause(text, out);
                }
            }
            Ok(_) => debug!("tasks/get answered neither a task nor an error"),
            Err(e) => debug!("tasks/get answered something that is not a task: {e}"),
        }
    }

    /// The upstream conversation, once the agent named it.
    pub fn context_id(&self) -> Option<&str> {
        self.context_id.as_deref()
    }

    /// The run's task, once the agent named it.
    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }

    /// The task and the interrupt, when the run ended with the task waiting for input.
    pub fn paused(&self) -> Option<(&str, &str)> {
        match (&self.task_id, &self.interrupt_id, self.state) {
            (Some(task), Some(interrupt), Some(state)) if state.is_paused() => {
                Some((task, interrupt))
            }
            _ => None,
        }
    }

    /// The task while it still runs upstream: known, not settled, not in a terminal or paused state.
    fn running_task(&self) -> Option<&str> {
        match self.state {
            _ if self.settled => None,
            Some(state) if state.is_terminal() || state.is_paused() => None,
            _ => self.task_id.as_deref(),
        }
    }

    /// What the artifacts have shown, as kept in the conversation record while the task waits for input.
    fn shown_artifacts(&self) -> String {
        let shown: BTreeMap<&String, &ShownArtifact> = self.artifacts.iter().collect();
        serde_json::to_string(&shown).unwrap_or_default()
    }

    /// Starts from what a paused task had shown, so continuing it shows only what is new.
    fn seed_shown_artifacts(&mut self, shown: &str) {
        match serde_json::from_str::<HashMap<String, ShownArtifact>>(shown) {
            Ok(shown) => {
                self.artifacts = shown
                    .into_iter()
                    .map(|(id, mut artifact)| {
                        artifact.message_id = new_id("msg");
                        (id, artifact)
                    })
                    .collect();
            }
            Err(e) => debug!("ignoring unreadable shown artifacts: {e}"),
        }
    }

    fn result(&mut self, result: wire::StreamResult, out: &mut Vec<Event>) {
        match result {
            wire::StreamResult::Task(task) => self.task(task, out),
            wire::StreamResult::Message(message) => self.message(message, out),
            wire::StreamResult::StatusUpdate(update) => {
                self.note_ids(&update.context_id, &update.task_id);
                self.status(&update.task_id, update.status, update.is_final, out);
            }
            wire::StreamResult::ArtifactUpdate(update) => {
                self.note_ids(&update.context_id, &update.task_id);
                self.artifact_update(update.artifact, update.append, update.last_chunk, out);
            }
        }
    }

    fn note_ids(&mut self, context_id: &str, task_id: &str) {
        if !context_id.is_empty() && self.context_id.as_deref() != Some(context_id) {
            self.context_id = Some(context_id.to_owned());
        }
        if !task_id.is_empty() && self.task_id.as_deref() != Some(task_id) {
            self.task_id = Some(task_id.to_owned());
        }
    }

    /// A whole task (the `message/send` result, a stream's first event, the `tasks/get` answer): its artifacts
    /// as snapshots (duplicate artifactIds concatenated in order), then its status.
    fn task(&mut self, task: wire::Task, out: &mut Vec<Event>) {
        self.note_ids(&task.context_id, &task.id);
        let complete = task.status.state.is_terminal();
        for artifact in merge_artifacts(task.artifacts) {
            self.artifact_snapshot(artifact, complete, out);
        }
        // A task is not a stream's `final`: a paused one may still move on (a continued task starts out
        // paused), so its pause settles the run only at the end of the stream.
        self.status(&task.id, task.status, false, out);
    }

    /// A `Message` result: the whole answer, no task.
    fn message(&mut self, message: wire::Message, out: &mut Vec<Event>) {
        if let Some(context_id) = &message.context_id {
            self.context_id = Some(context_id.clone());
        }
        let (text, data) = split_parts(message.parts);
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            let message_id = new_id("msg");
            out.push(Event::TextDelta {
                message_id: message_id.clone(),
                delta: text,
            });
            out.push(Event::TextEnd { message_id });
        }
        if !data.is_empty() {
            out.push(Event::Artifact(Artifact {
                id: message.message_id,
                name: None,
                parts: data,
                append: false,
                last_chunk: true,
            }));
        }
        self.settle(
            Event::RunFinished {
                outcome: Outcome::Completed,
                usage: None,
            },
            out,
        );
    }

    fn status(
        &mut self,
        task_id: &str,
        status: wire::TaskStatus,
        is_final: bool,
        out: &mut Vec<Event>,
    ) {
        use wire::TaskState as S;
        let state = status.state;
        let previous = self.state.replace(state);
        let (text, data) = match status.message {
            Some(message) => {
                let id = message.message_id.clone();
                let (text, data) = split_parts(message.parts);
                (text.unwrap_or_default(), Some((id, data)))
            }
            None => (String::new(), None),
        };
        if let Some((id, data)) = data.filter(|(_, data)| !data.is_empty()) {
            out.push(Event::Artifact(Artifact {
                id,
                name: None,
                parts: data,
                append: false,
                last_chunk: true,
            }));
        }
        if !state.is_paused() {
            self.pending_pause = None;
        }
        match state {
            S::Submitted | S::Working => {
                // Said at once, not left to the first content: a client shows the run as started while
                // the agent thinks.
                if !matches!(previous, Some(S::Submitted | S::Working)) {
                    out.push(Event::RunStarted);
                }
                self.status_text(task_id, text, out);
                if is_final {
                    debug!(
                        state = state.as_str(),
                        "A2A stream ended on a task still running"
                    );
                    self.over = true;
                }
            }
            S::InputRequired | S::AuthRequired => {
                // The question goes into the interrupt, not the chat: clients show the interrupt.
                let text = if !text.is_empty() {
                    text
                } else if state == S::AuthRequired {
                    "The agent needs authorization to go on.".to_owned()
                } else {
                    "The agent needs more input to go on.".to_owned()
                };
                if is_final {
                    self.pause(text, out);
                } else {
                    self.pending_pause = Some(text);
                }
            }
            S::Completed => {
                self.status_text(task_id, text, out);
                self.settle(
                    Event::RunFinished {
                        outcome: Outcome::Completed,
                        usage: None,
                    },
                    out,
                );
            }
            S::Canceled => {
                self.status_text(task_id, text, out);
                self.settle(
                    Event::RunFinished {
                        outcome: Outcome::Cancelled,
                        usage: None,
                    },
                    out,
                );
            }
            S::Failed | S::Rejected | S::Unknown => {
                let message = if !text.is_empty() {
                    text
                } else {
                    match state {
                        S::Failed => "the A2A agent's task failed".to_owned(),
                        S::Rejected => "the A2A agent rejected the task".to_owned(),
                        _ => "the A2A agent's task ended in state unknown".to_owned(),
                    }
                };
                let error = Error::upstream_agent(state.as_str(), message);
                self.settle(Event::RunError(error), out);
            }
        }
    }

    /// Status message text as assistant text: only what is new.
    fn status_text(&mut self, task_id: &str, text: String, out: &mut Vec<Event>) {
        if text.is_empty() {
            return;
        }
        if self.artifacts.values().any(|a| a.text == text) {
            debug!("status message repeats an artifact's text; not shown twice");
            return;
        }
        match self.status_texts.get_mut(task_id) {
            Some(previous) if previous.text == text => {}
            Some(previous) if text.starts_with(&previous.text) => {
                out.push(Event::TextDelta {
                    message_id: previous.message_id.clone(),
                    delta: text[previous.text.len()..].to_owned(),
                });
                previous.text = text;
            }
            _ => {
                let message_id = new_id("msg");
                out.push(Event::TextDelta {
                    message_id: message_id.clone(),
                    delta: text.clone(),
                });
                self.status_texts
                    .insert(task_id.to_owned(), StatusText { message_id, text });
            }
        }
    }

    /// A streamed chunk of an artifact.
    fn artifact_update(
        &mut self,
        artifact: wire::Artifact,
        append: bool,
        last_chunk: bool,
        out: &mut Vec<Event>,
    ) {
        let wire::Artifact {
            artifact_id,
            name,
            parts,
            ..
        } = artifact;
        let (text, data) = split_parts(parts);
        let shown = self.artifacts.entry(artifact_id.clone()).or_default();
        let known = !shown.message_id.is_empty();
        if !known {
            shown.message_id = new_id("msg");
        }
        if let Some(text) = text {
            if append || !known {
                // Appending, or creating (an unknown artifact with `append`, as the seed vendor sends).
                if !text.is_empty() {
                    out.push(Event::TextDelta {
                        message_id: shown.message_id.clone(),
                        delta: text.clone(),
                    });
                }
                shown.text.push_str(&text);
            } else {
                replace_text(shown, text, out);
            }
        }
        let appends_data = append && shown.data_parts > 0;
        if !appends_data {
            shown.data_parts = 0;
        }
        if !data.is_empty() {
            shown.data_parts += data.len();
            out.push(Event::Artifact(Artifact {
                id: artifact_id,
                name,
                parts: data,
                append: appends_data,
                last_chunk,
            }));
        }
        if last_chunk && !shown.text.is_empty() {
            out.push(Event::TextEnd {
                message_id: shown.message_id.clone(),
            });
        }
    }

    /// An artifact as a task shows it whole: only what was not shown yet.
    fn artifact_snapshot(
        &mut self,
        artifact: wire::Artifact,
        complete: bool,
        out: &mut Vec<Event>,
    ) {
        let (text, data) = split_parts(artifact.parts);
        let shown = self
            .artifacts
            .entry(artifact.artifact_id.clone())
            .or_default();
        if shown.message_id.is_empty() {
            shown.message_id = new_id("msg");
        }
        if let Some(text) = text {
            replace_text(shown, text, out);
        }
        if data.len() > shown.data_parts {
            let append = shown.data_parts > 0;
            let new = data[shown.data_parts..].to_vec();
            shown.data_parts = data.len();
            out.push(Event::Artifact(Artifact {
                id: artifact.artifact_id,
                name: artifact.name,
                parts: new,
                append,
                last_chunk: complete,
            }));
        }
    }

    /// The run pauses: the question as an interrupt, then the end of the run.
    fn pause(&mut self, text: String, out: &mut Vec<Event>) {
        let id = new_id("int");
        self.interrupt_id = Some(id.clone());
        out.push(Event::Interrupt(Interrupt {
            id,
            kind: InterruptKind::InputRequired { text },
        }));
        self.settle(
            Event::RunFinished {
                outcome: Outcome::Interrupted,
                usage: None,
            },
            out,
        );
    }

    fn settle(&mut self, terminal: Event, out: &mut Vec<Event>) {
        self.settled = true;
        out.push(terminal);
    }
}

/// An artifact's text replaced by `text`: only the suffix when it extends what was shown, nothing when it is
/// the same, otherwise a new message (the old one ends).
fn replace_text(shown: &mut ShownArtifact, text: String, out: &mut Vec<Event>) {
    if text == shown.text {
        return;
    }
    if text.starts_with(&shown.text) {
        out.push(Event::TextDelta {
            message_id: shown.message_id.clone(),
            delta: text[shown.text.len()..].to_owned(),
        });
    } else {
        if !shown.text.is_empty() {
            out.push(Event::TextEnd {
                message_id: shown.message_id.clone(),
            });
            shown.message_id = new_id("msg");
        }
        out.push(Event::TextDelta {
            message_id: shown.message_id.clone(),
            delta: text.clone(),
        });
    }
    shown.text = text;
}

/// The text of the text parts (`None` when there are none) and the other parts as canonical parts.
fn split_parts(parts: Vec<wire::Part>) -> (Option<String>, Vec<Part>) {
    let mut text: Option<String> = None;
    let mut data = Vec::new();
    for part in parts {
        match part {
            wire::Part::Text { text: t, .. } => text.get_or_insert_with(String::new).push_str(&t),
            other => data.push(part_from_wire(other)),
        }
    }
    (text, data)
}

/// Artifacts by artifactId, in order of first appearance, the parts of repeated ids concatenated.
fn merge_artifacts(artifacts: Vec<wire::Artifact>) -> Vec<wire::Artifact> {
    let mut merged: Vec<wire::Artifact> = Vec::with_capacity(artifacts.len());
    for artifact in artifacts {
        match merged
            .iter_mut()
            .find(|m| m.artifact_id == artifact.artifact_id)
        {
            Some(existing) => {
                existing.parts.extend(artifact.parts);
                if existing.name.is_none() {
                    existing.name = artifact.name;
                }
            }
            None => merged.push(artifact),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{History, Media, MediaKind, MediaSource};
    use serde_json::{json, Value};

    fn user(text: &str) -> Message {
        Message::text_message(new_id("u"), Role::User, text)
    }

    fn turn(messages: Vec<Message>) -> Turn {
        Turn {
            conversation: "conv-1".to_owned(),
            run_id: "run-1".to_owned(),
            messages,
            history: History::Delta,
            ..Default::default()
        }
    }

    fn record(entries: &[(&str, &str)]) -> Record {
        let mut record = Record::default();
        for (key, value) in entries {
            record
                .upstream
                .insert((*key).to_owned(), (*value).to_owned());
        }
        record
    }

    fn message_json(outgoing: &Outgoing) -> Value {
        serde_json::to_value(outgoing.message.as_ref().expect("a message")).unwrap()
    }

    // --- The request -------------------------------------------------------------------------------------

    #[test]
    fn request_is_a_json_rpc_message_stream_with_a_string_id_and_no_configuration() {
        let outgoing = outgoing(&turn(vec![user("hi")]), &Record::default()).unwrap();
        let params = wire::MessageSendParams {
            message: outgoing.message.unwrap(),
            configuration: None,
            metadata: None,
        };
        let body: Value =
            serde_json::from_slice(&rpc_request("message/stream", &params).unwrap()).unwrap();
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["method"], "message/stream");
        assert!(body["id"].as_str().is_some_and(|id| id.starts_with("req_")));
        let params = body["params"].as_object().unwrap();
        assert_eq!(params.keys().collect::<Vec<_>>(), ["message"]);
        let message = &params["message"];
        assert_eq!(message["kind"], "message");
        assert_eq!(message["role"], "user");
        assert!(message["messageId"]
            .as_str()
            .is_some_and(|id| !id.is_empty()));
        assert_eq!(message["parts"], json!([{"kind": "text", "text": "hi"}]));
        assert!(message.get("contextId").is_none());
        assert!(message.get("taskId").is_none());
    }

    #[test]
    fn new_messages_become_parts_of_one_message_in_the_known_context() {
        let image = Message::new(
            "u2",
            Role::User,
            vec![
                Part::Text("and this:".to_owned()),
                Part::Media(Media {
                    kind: MediaKind::Image,
                    source: MediaSource::Url("https://example.com/a.png".to_owned()),
                    mime_type: Some("image/png".to_owned()),
                    filename: None,
                }),
                Part::Data(json!({"city": "Paris"})),
            ],
        );
        let system = Message::text_message("s1", Role::System, "Be brief.");
        let assistant = Message::text_message("a1", Role::Assistant, "Earlier answer");
        let messages = vec![system, user("look at"), assistant, image];
        let outgoing = outgoing(&turn(messages), &record(&[(CONTEXT_ID, "ctx-1")])).unwrap();
        let message = message_json(&outgoing);
        assert_eq!(message["contextId"], "ctx-1");
        assert!(message.get("taskId").is_none());
        assert_eq!(
            message["parts"],
            json!([
                {"kind": "text", "text": "look at"},
                {"kind": "text", "text": "and this:"},
                {"kind": "file", "file": {"mimeType": "image/png", "uri": "https://example.com/a.png"}},
                {"kind": "data", "data": {"city": "Paris"}},
            ])
        );
    }

    #[test]
    fn tool_results_are_sent_as_labelled_text() {
        let mut result = Message::text_message("t1", Role::Tool, "{\"temp\":21}");
        result.tool_call_id = Some("call_7".to_owned());
        let outgoing = outgoing(&turn(vec![result]), &Record::default()).unwrap();
        assert_eq!(
            message_json(&outgoing)["parts"],
            json!([{"kind": "text", "text": "[Result of tool call call_7]\n{\"temp\":21}"}])
        );
    }

    #[test]
    fn resume_answers_continue_the_paused_task() {
        let paused = record(&[
            (CONTEXT_ID, "ctx-1"),
            (TASK_ID, "task-1"),
            (INTERRUPT_ID, "int_1"),
        ]);
        let mut resumed = turn(Vec::new());
        resumed.resume = vec![
            Resume {
                interrupt_id: "int_1".to_owned(),
                status: ResumeStatus::Resolved,
                payload: Some(json!("Paris, on Friday")),
            },
            Resume {
                interrupt_id: "int_old".to_owned(),
                status: ResumeStatus::Resolved,
                payload: Some(json!("stale")),
            },
        ];
        let message = message_json(&outgoing(&resumed, &paused).unwrap());
        assert_eq!(message["taskId"], "task-1");
        assert_eq!(message["contextId"], "ctx-1");
        assert_eq!(
            message["parts"],
            json!([{"kind": "text", "text": "Paris, on Friday"}])
        );

        resumed.resume = vec![Resume {
            interrupt_id: "int_1".to_owned(),
            status: ResumeStatus::Resolved,
            payload: Some(json!({"approved": true})),
        }];
        let message = message_json(&outgoing(&resumed, &paused).unwrap());
        assert_eq!(
            message["parts"],
            json!([{"kind": "text", "text": "{\"approved\":true}"}])
        );

        resumed.resume[0].payload = None;
        let message = message_json(&outgoing(&resumed, &paused).unwrap());
        assert_eq!(
            message["parts"],
            json!([{"kind": "text", "text": "yes"}]),
            "an answer without words is a go-ahead"
        );
    }

    #[test]
    fn a_new_message_while_a_task_waits_continues_that_task() {
        let paused = record(&[(CONTEXT_ID, "ctx-1"), (TASK_ID, "task-1")]);
        let message = message_json(&outgoing(&turn(vec![user("Paris")]), &paused).unwrap());
        assert_eq!(message["taskId"], "task-1");
    }

    #[test]
    fn declining_the_question_cancels_the_paused_task() {
        let paused = record(&[(TASK_ID, "task-1"), (INTERRUPT_ID, "int_1")]);
        let mut declined = turn(Vec::new());
        declined.resume = vec![Resume {
            interrupt_id: "int_1".to_owned(),
            status: ResumeStatus::Cancelled,
            payload: None,
        }];
        let outgoing_ = outgoing(&declined, &paused).unwrap();
        assert_eq!(
            outgoing_,
            Outgoing {
                cancel: Some("task-1".to_owned()),
                message: None
            }
        );
        declined.messages = vec![user("something else")];
        let outgoing_ = outgoing(&declined, &paused).unwrap();
        assert_eq!(outgoing_.cancel.as_deref(), Some("task-1"));
        assert!(message_json(&outgoing_).get("taskId").is_none());
    }

    #[test]
    fn a_turn_with_nothing_new_is_a_client_error() {
        let error = outgoing(&turn(Vec::new()), &Record::default()).unwrap_err();
        assert!(error.is_client());
        let system_only = turn(vec![Message::text_message("s", Role::System, "x")]);
        assert!(outgoing(&system_only, &Record::default()).is_err());
    }

    // --- The agent card ----------------------------------------------------------------------------------

    fn dialect(card: Value) -> Result<Dialect> {
        let card: DiscoveredCard = serde_json::from_value(card).unwrap();
        card.dialect(&"http://agent/.well-known/agent.json".parse().unwrap())
    }

    #[test]
    fn cards_say_whether_the_agent_streams() {
        let sdk_card = json!({"capabilities":{"streaming":true},"defaultInputModes":["text/plain"],
            "defaultOutputModes":["text/plain"],"description":"echo agent","name":"Echo025",
            "protocolVersion":"0.2.5","skills":[],"url":"http://127.0.0.1:9391/","version":"1.0.0"});
        assert_eq!(dialect(sdk_card).unwrap(), Dialect { streaming: true });
        let blocking = json!({"url": "http://a/", "protocolVersion": "0.2.5", "capabilities": {}});
        assert_eq!(dialect(blocking).unwrap(), Dialect { streaming: false });
        let hybrid = json!({"url": "http://a/", "protocolVersion": "0.3", "capabilities": {"streaming": true},
            "supportedInterfaces": [{"url": "http://a/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "signatures": []});
        assert_eq!(dialect(hybrid).unwrap(), Dialect { streaming: true });
        let interface_only = json!({"capabilities": {"streaming": false}, "supportedInterfaces": [
            {"url": "http://a/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]});
        assert_eq!(
            dialect(interface_only).unwrap(),
            Dialect { streaming: false }
        );
    }

    #[test]
    fn a_1_0_only_card_is_a_configuration_error() {
        let card = json!({"name": "modern", "capabilities": {"streaming": true}, "supportedInterfaces": [
            {"url": "http://a/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "http://a/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]});
        let error = dialect(card).unwrap_err();
        assert_eq!(error.source(), Source::Config);
        assert!(error.message().contains("1.0"), "{error}");
        assert!(error.message().contains("0.2.5"), "{error}");
    }

    #[test]
    fn well_known_card_urls_sit_under_the_upstream_path() {
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        assert_eq!(
            well_known(&uri("http://h:9001/"), "agent.json").unwrap(),
            uri("http://h:9001/.well-known/agent.json")
        );
        assert_eq!(
            well_known(&uri("https://h/a2a/demo/v1/?k=1"), "agent-card.json").unwrap(),
            uri("https://h/a2a/demo/v1/.well-known/agent-card.json")
        );
    }

    // --- The decoder -------------------------------------------------------------------------------------

    fn decode_all(decoder: &mut Decoder, results: &[Value]) -> Vec<Event> {
        let mut out = Vec::new();
        for result in results {
            let data = json!({"jsonrpc": "2.0", "id": "r", "result": result}).to_string();
            decoder.decode(&data, &mut out).unwrap();
        }
        out
    }

    fn status(state: &str, text: Option<&str>, is_final: bool) -> Value {
        let mut status = json!({"state": state});
        if let Some(text) = text {
            status["message"] = json!({"kind": "message", "role": "agent", "messageId": "s",
                "parts": [{"kind": "text", "text": text}]});
        }
        json!({"kind": "status-update", "taskId": "t", "contextId": "c", "status": status, "final": is_final})
    }

    fn chunk(id: &str, text: &str, append: Option<bool>, last: bool) -> Value {
        let mut update = json!({"kind": "artifact-update", "taskId": "t", "contextId": "c",
            "artifact": {"artifactId": id, "parts": [{"kind": "text", "text": text}]}, "lastChunk": last});
        if let Some(append) = append {
            update["append"] = json!(append);
        }
        update
    }

    fn texts(events: &[Event]) -> Vec<(String, String)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::TextDelta { message_id, delta } => Some((message_id.clone(), delta.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn artifact_chunks_append_to_one_message_and_the_last_chunk_ends_it() {
        let mut decoder = Decoder::new();
        let out = decode_all(
            &mut decoder,
            &[
                chunk("a1", "Hel", Some(true), false),
                chunk("a1", "lo", Some(true), true),
            ],
        );
        let deltas = texts(&out);
        assert_eq!(deltas.len(), 2);
        assert_eq!(deltas[0].0, deltas[1].0);
        assert_eq!(
            out.last(),
            Some(&Event::TextEnd {
                message_id: deltas[0].0.clone()
            })
        );
    }

    #[test]
    fn replacing_an_artifact_shows_the_suffix_or_starts_a_new_message() {
        let mut decoder = Decoder::new();
        let out = decode_all(
            &mut decoder,
            &[
                chunk("a1", "It is", None, false),
                chunk("a1", "It is sunny", Some(false), false),
                chunk("a1", "Actually, rain", None, false),
            ],
        );
        let deltas = texts(&out);
        assert_eq!(deltas[1], (deltas[0].0.clone(), " sunny".to_owned()));
        assert_ne!(deltas[2].0, deltas[0].0);
        assert_eq!(deltas[2].1, "Actually, rain");
    }

    #[test]
    fn a_paused_status_without_final_settles_only_at_the_end_of_the_stream() {
        let mut decoder = Decoder::new();
        let mut out = decode_all(
            &mut decoder,
            &[status("input-required", Some("Which city?"), false)],
        );
        assert!(out.is_empty());
        assert_eq!(decoder.end_of_stream(&mut out), None);
        assert!(matches!(&out[0], Event::Interrupt(Interrupt {
            kind: InterruptKind::InputRequired { text }, ..
        }) if text == "Which city?"));
        let interrupt_id = match &out[0] {
            Event::Interrupt(interrupt) => interrupt.id.clone(),
            _ => unreachable!(),
        };
        assert_eq!(decoder.paused(), Some(("t", interrupt_id.as_str())));
        assert_eq!(decoder.context_id(), Some("c"));

        // A continued task starts out paused, then works: that is no pause.
        let mut decoder = Decoder::new();
        let mut out = decode_all(
            &mut decoder,
            &[
                status("input-required", None, false),
                status("working", None, false),
            ],
        );
        assert_eq!(decoder.running_task(), Some("t"));
        assert_eq!(decoder.end_of_stream(&mut out), Some("t".to_owned()));
        assert!(matches!(out[..], [Event::RunStarted]), "{out:?}");
    }

    #[test]
    fn final_with_a_running_state_asks_for_the_task() {
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        let data = json!({"jsonrpc": "2.0", "id": "r", "result": status("working", None, true)});
        assert!(decoder.decode(&data.to_string(), &mut out).unwrap());
        assert_eq!(decoder.end_of_stream(&mut out), Some("t".to_owned()));
        assert!(matches!(out[..], [Event::RunStarted]), "{out:?}");
        out.clear();
        let answer = json!({"jsonrpc": "2.0", "id": "q", "result": {"kind": "task", "id": "t",
            "contextId": "c", "status": {"state": "auth-required"}}});
        decoder.decode_task_query(&answer.to_string(), &mut out);
        assert!(matches!(&out[0], Event::Interrupt(Interrupt {
            kind: InterruptKind::InputRequired { text }, ..
        }) if text.contains("authorization")));
        assert!(matches!(
            out[1],
            Event::RunFinished {
                outcome: Outcome::Interrupted,
                ..
            }
        ));
    }

    #[test]
    fn json_rpc_errors_are_run_errors_with_their_code() {
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        let data = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"Task t is in terminal state: TaskState.canceled","data":null}}"#;
        assert!(decoder.decode(data, &mut out).unwrap());
        let Event::RunError(error) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(error.code(), "-32602");
        assert!(error.is_upstream());
        assert!(error.message().contains("terminal state"));
    }

    #[test]
    fn what_is_not_a_json_rpc_response_is_malformed() {
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        for data in [
            "not json",
            r#"{"jsonrpc":"2.0","id":"r"}"#,
            r#"{"jsonrpc":"2.0","id":"r","result":{"task":{"id":"t"}}}"#,
        ] {
            let error = decoder.decode(data, &mut out).unwrap_err();
            assert_eq!(error.code(), "UPSTREAM_MALFORMED", "{data}");
        }
        // Keep-alive data with nothing in it is skipped.
        assert!(!decoder.decode("  ", &mut out).unwrap());
    }

    #[test]
    fn a_continued_task_shows_only_what_it_had_not_shown() {
        let mut first = Decoder::new();
        let mut out = decode_all(
            &mut first,
            &[
                chunk("a1", "Let me book that. ", None, false),
                status("input-required", Some("Where to?"), true),
            ],
        );
        assert!(first.paused().is_some());
        let shown = first.shown_artifacts();

        let mut next = Decoder::new();
        next.seed_shown_artifacts(&shown);
        out.clear();
        let blocking = json!({"kind": "task", "id": "t", "contextId": "c",
            "status": {"state": "completed"},
            "artifacts": [{"artifactId": "a1", "parts": [{"kind": "text", "text": "Let me book that. "},
                                                          {"kind": "text", "text": "Booked Paris."}]}]});
        let out = decode_all(&mut next, &[blocking]);
        assert_eq!(
            texts(&out)
                .into_iter()
                .map(|(_, delta)| delta)
                .collect::<Vec<_>>(),
            ["Booked Paris."]
        );
    }

    #[test]
    fn data_parts_of_a_snapshot_are_emitted_once() {
        let mut decoder = Decoder::new();
        let data_chunk = json!({"kind": "artifact-update", "taskId": "t", "contextId": "c",
            "artifact": {"artifactId": "d", "parts": [{"kind": "data", "data": {"n": 1}}]}});
        let out = decode_all(&mut decoder, &[data_chunk]);
        assert!(matches!(&out[0], Event::Artifact(a) if a.id == "d" && !a.append));
        let mut out = Vec::new();
        assert_eq!(decoder.end_of_stream(&mut out), Some("t".to_owned()));
        let answer = json!({"jsonrpc": "2.0", "id": "q", "result": {"kind": "task", "id": "t",
            "contextId": "c", "status": {"state": "completed"}, "artifacts": [{"artifactId": "d",
            "parts": [{"kind": "data", "data": {"n": 1}}, {"kind": "data", "data": {"n": 2}}]}]}});
        decoder.decode_task_query(&answer.to_string(), &mut out);
        assert!(
            matches!(&out[0], Event::Artifact(a) if a.append && a.last_chunk && a.parts == [Part::Data(json!({"n": 2}))]),
            "{out:?}"
        );
    }

    // --- Whole runs against an in-process agent -----------------------------------------------------------

    mod runs {
        use std::convert::Infallible;
        use std::sync::{Arc, Mutex};

        use futures_util::StreamExt;
        use http::header::CONTENT_TYPE;
        use http::HeaderMap;
        use http_body_util::StreamBody;
        use hyper::body::Frame;
        use hyper_util::rt::TokioIo;
        use tokio::net::TcpListener;

        use super::*;
        use crate::store::MemoryStore;
        use crate::translate::Translator;

        /// The longest any step waits.
        const WAIT: Duration = Duration::from_secs(10);

        /// One request the agent received.
        #[derive(Debug, Clone)]
        struct Seen {
            method: http::Method,
            path: String,
            headers: HeaderMap,
            body: Value,
        }

        impl Seen {
            fn rpc(&self) -> &str {
                self.body["method"].as_str().unwrap_or("")
            }
        }

        /// An answer: status, content type, body chunks; `hang` keeps the body open afterwards.
        struct Reply {
            status: u16,
            content_type: &'static str,
            chunks: Vec<String>,
            hang: bool,
        }

        impl Reply {
            fn sse(results: &[Value]) -> Reply {
                Reply {
                    status: 200,
                    content_type: "text/event-stream; charset=utf-8",
                    chunks: results
                        .iter()
                        .map(|r| {
                            let response = json!({"jsonrpc": "2.0", "id": "r", "result": r});
                            format!("data: {response}\r\n\r\n")
                        })
                        .collect(),
                    hang: false,
                }
            }

            fn json(status: u16, body: Value) -> Reply {
                Reply {
                    status,
                    content_type: "application/json",
                    chunks: vec![body.to_string()],
                    hang: false,
                }
            }

            fn hang(mut self) -> Reply {
                self.hang = true;
                self
            }
        }

        type Handler = dyn Fn(&Seen, usize) -> Reply + Send + Sync;

        /// An in-process agent: answers each request with `handler(request, index among its kind)`.
        struct Agent {
            url: String,
            seen: Arc<Mutex<Vec<Seen>>>,
            task: tokio::task::JoinHandle<()>,
        }

        impl Drop for Agent {
            fn drop(&mut self) {
                self.task.abort();
            }
        }

        impl Agent {
            async fn serve(
                handler: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static,
            ) -> Agent {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let url = format!("http://{}/a2a", listener.local_addr().unwrap());
                let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
                let handler: Arc<Handler> = Arc::new(handler);
                let state = Arc::clone(&seen);
                let task = tokio::spawn(async move {
                    while let Ok((stream, _)) = listener.accept().await {
                        let seen = Arc::clone(&state);
                        let handler = Arc::clone(&handler);
                        let service = hyper::service::service_fn(move |request| {
                            let seen = Arc::clone(&seen);
                            let handler = Arc::clone(&handler);
                            async move { Ok::<_, Infallible>(answer(request, &seen, &*handler).await) }
                        });
                        tokio::spawn(async move {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                });
                Agent { url, seen, task }
            }

            fn seen(&self) -> Vec<Seen> {
                self.seen.lock().unwrap().clone()
            }

            fn rpc_calls(&self, method: &str) -> Vec<Seen> {
                self.seen()
                    .into_iter()
                    .filter(|s| s.rpc() == method)
                    .collect()
            }

            /// Waits until a request for `method` arrived.
            async fn wait_for(&self, method: &str) -> Seen {
                tokio::time::timeout(WAIT, async {
                    loop {
                        if let Some(seen) = self.rpc_calls(method).pop() {
                            return seen;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                })
                .await
                .unwrap_or_else(|_| panic!("no {method} arrived: {:#?}", self.seen()))
            }
        }

        type ReplyBody = StreamBody<
            futures_util::stream::BoxStream<'static, std::result::Result<Frame<Bytes>, Infallible>>,
        >;

        async fn answer(
            request: http::Request<Incoming>,
            seen: &Mutex<Vec<Seen>>,
            handler: &Handler,
        ) -> http::Response<ReplyBody> {
            let (head, body) = request.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let request = Seen {
                method: head.method,
                path: head.uri.path().to_owned(),
                headers: head.headers,
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let reply = {
                let mut seen = seen.lock().unwrap();
                let index = seen
                    .iter()
                    .filter(|s| s.path == request.path && s.rpc() == request.rpc())
                    .count();
                seen.push(request.clone());
                handler(&request, index)
            };
            let frames = futures_util::stream::iter(
                reply
                    .chunks
                    .into_iter()
                    .map(|chunk| Ok(Frame::data(Bytes::from(chunk)))),
            );
            let body = if reply.hang {
                frames.chain(futures_util::stream::pending()).boxed()
            } else {
                frames.boxed()
            };
            http::Response::builder()
                .status(reply.status)
                .header(CONTENT_TYPE, reply.content_type)
                .body(StreamBody::new(body))
                .unwrap()
        }

        fn translator(agent: &Agent, translate: &Translate, timeout: Duration) -> Arc<Translator> {
            let upstream = Upstream::new(agent.url.parse().unwrap(), Vec::new(), WAIT);
            let outbound = crate::protocol::Outbound::A2a(Outbound::new(upstream, translate));
            let store = Arc::new(MemoryStore::new(Duration::from_secs(3600)));
            Arc::new(Translator::new("r".to_owned(), outbound, store, timeout))
        }

        async fn run_turn(translator: &Arc<Translator>, turn: Turn) -> Vec<Event> {
            let stream = translator.start(turn);
            tokio::time::timeout(WAIT, stream.collect::<Vec<_>>())
                .await
                .expect("the run ends")
        }

        fn task(id: &str, context: &str, state: &str) -> Value {
            json!({"kind": "task", "id": id, "contextId": context, "status": {"state": state}})
        }

        fn update(task: &str, context: &str, state: &str, text: Option<&str>) -> Value {
            let is_final = !matches!(state, "submitted" | "working");
            let mut update = super::status(state, text, is_final);
            update["taskId"] = json!(task);
            update["contextId"] = json!(context);
            update
        }

        fn terminal(events: &[Event]) -> &Event {
            events.last().expect("events")
        }

        #[tokio::test]
        async fn turns_keep_the_context_and_an_answer_resumes_the_paused_task() {
            let agent = Agent::serve(|_, index| match index {
                0 => Reply::sse(&[
                    task("task-1", "ctx-1", "submitted"),
                    update("task-1", "ctx-1", "input-required", Some("Where to?")),
                ]),
                1 => Reply::sse(&[
                    update("task-1", "ctx-1", "working", None),
                    chunk("a1", "Booked.", None, true),
                    update("task-1", "ctx-1", "completed", None),
                ]),
                _ => Reply::sse(
                    &[json!({"kind": "message", "role": "agent", "messageId": "m",
                    "contextId": "ctx-1", "parts": [{"kind": "text", "text": "Anything else?"}]})],
                ),
            })
            .await;
            let translator = translator(&agent, &Translate::default(), WAIT);

            let events = run_turn(&translator, turn(vec![user("Book a flight")])).await;
            let Some(Event::Interrupt(interrupt)) =
                events.iter().find(|e| matches!(e, Event::Interrupt(_)))
            else {
                panic!("no interrupt: {events:?}")
            };
            assert!(matches!(
                terminal(&events),
                Event::RunFinished {
                    outcome: Outcome::Interrupted,
                    ..
                }
            ));
            let first = agent.only_one("message/stream", 0);
            assert_eq!(first.headers["accept"], "text/event-stream");
            assert!(first.headers.get("a2a-version").is_none());
            assert!(first.body["params"]["message"].get("contextId").is_none());

            let mut answer = turn(Vec::new());
            answer.resume = vec![Resume {
                interrupt_id: interrupt.id.clone(),
                status: ResumeStatus::Resolved,
                payload: Some(json!("Paris")),
            }];
            let events = run_turn(&translator, answer).await;
            assert!(!texts(&events).is_empty(), "{events:?}");
            assert!(events.contains(&Event::TextDelta {
                message_id: texts(&events)[0].0.clone(),
                delta: "Booked.".to_owned()
            }));
            assert!(matches!(
                terminal(&events),
                Event::RunFinished {
                    outcome: Outcome::Completed,
                    ..
                }
            ));
            let second = &agent.only_one("message/stream", 1).body["params"]["message"];
            assert_eq!(second["taskId"], "task-1");
            assert_eq!(second["contextId"], "ctx-1");
            assert_eq!(second["parts"], json!([{"kind": "text", "text": "Paris"}]));

            let events = run_turn(&translator, turn(vec![user("Thanks")])).await;
            assert_eq!(texts(&events)[0].1, "Anything else?");
            let third = &agent.only_one("message/stream", 2).body["params"]["message"];
            assert_eq!(third["contextId"], "ctx-1");
            assert!(third.get("taskId").is_none(), "{third}");
        }

        impl Agent {
            /// The `index`-th request for `method`.
            fn only_one(&self, method: &str, index: usize) -> Seen {
                self.rpc_calls(method)
                    .get(index)
                    .cloned()
                    .unwrap_or_else(|| panic!("no {method} #{index}: {:#?}", self.seen()))
            }
        }

        #[tokio::test]
        async fn auto_card_falls_back_to_agent_json_is_read_once_and_picks_message_send() {
            let agent = Agent::serve(|seen, _| {
                if seen.path.ends_with("/.well-known/agent-card.json") {
                    return Reply::json(404, json!({"detail": "Not Found"}));
                }
                if seen.path.ends_with("/.well-known/agent.json") {
                    return Reply::json(200, json!({"name": "Echo", "description": "echo",
                        "url": "http://elsewhere/", "version": "1", "protocolVersion": "0.2.5",
                        "capabilities": {"streaming": false}, "defaultInputModes": [],
                        "defaultOutputModes": [], "skills": []}));
                }
                let result = json!({"kind": "task", "id": "t", "contextId": "c",
                    "status": {"state": "completed"},
                    "artifacts": [{"artifactId": "a", "parts": [{"kind": "text", "text": "echo"}]}]});
                Reply::json(200, json!({"jsonrpc": "2.0", "id": "r", "result": result}))
            })
            .await;
            let translate = Translate {
                a2a_card: Some("auto".to_owned()),
                ..Translate::default()
            };
            let translator = translator(&agent, &translate, WAIT);
            for _ in 0..2 {
                let events = run_turn(&translator, turn(vec![user("hi")])).await;
                assert_eq!(texts(&events)[0].1, "echo");
                assert!(matches!(terminal(&events), Event::RunFinished { .. }));
            }
            let gets: Vec<String> = agent
                .seen()
                .iter()
                .filter(|s| s.method == http::Method::GET)
                .map(|s| s.path.clone())
                .collect();
            assert_eq!(
                gets,
                [
                    "/a2a/.well-known/agent-card.json",
                    "/a2a/.well-known/agent.json"
                ]
            );
            let send = agent.only_one("message/send", 1);
            assert_eq!(
                send.path, "/a2a",
                "the route's upstream URL, not the card's"
            );
            assert_eq!(send.headers["accept"], "application/json");
        }

        #[tokio::test]
        async fn a_1_0_only_card_fails_the_run_with_a_configuration_error() {
            let agent = Agent::serve(|_, _| {
                Reply::json(
                    200,
                    json!({"name": "new", "capabilities": {"streaming": true},
                    "supportedInterfaces": [{"url": "http://x/", "protocolBinding": "JSONRPC",
                    "protocolVersion": "1.0"}]}),
                )
            })
            .await;
            let translate = Translate {
                a2a_card: Some(format!("{}/card.json", agent.url)),
                ..Translate::default()
            };
            let translator = translator(&agent, &translate, WAIT);
            let events = run_turn(&translator, turn(vec![user("hi")])).await;
            let Event::RunError(error) = terminal(&events) else {
                panic!("{events:?}")
            };
            assert_eq!(error.code(), "CONFIG_ERROR");
            assert!(agent.rpc_calls("message/stream").is_empty());
        }

        #[tokio::test]
        async fn http_500_with_a_json_rpc_error_body_is_the_agents_error() {
            let agent = Agent::serve(|_, _| {
                Reply::json(
                    500,
                    json!({"jsonrpc": "2.0", "id": "r",
                    "error": {"code": -32603, "message": "executor exploded"}}),
                )
            })
            .await;
            let translator = translator(&agent, &Translate::default(), WAIT);
            let events = run_turn(&translator, turn(vec![user("hi")])).await;
            let Event::RunError(error) = terminal(&events) else {
                panic!("{events:?}")
            };
            assert_eq!(error.code(), "-32603");
            assert_eq!(error.message(), "executor exploded");
        }

        #[tokio::test]
        async fn a_stream_request_answered_as_json_is_read_as_one_response() {
            let agent = Agent::serve(|_, _| {
                Reply::json(
                    200,
                    json!({"jsonrpc": "2.0", "id": "r",
                    "error": {"code": -32600, "message": "Request payload validation error"}}),
                )
            })
            .await;
            let translator = translator(&agent, &Translate::default(), WAIT);
            let events = run_turn(&translator, turn(vec![user("hi")])).await;
            let Event::RunError(error) = terminal(&events) else {
                panic!("{events:?}")
            };
            assert_eq!(error.code(), "-32600");
        }

        #[tokio::test]
        async fn a_stream_ending_without_final_asks_tasks_get_once() {
            let agent = Agent::serve(|seen, _| match seen.rpc() {
                "tasks/get" => Reply::json(
                    200,
                    json!({"jsonrpc": "2.0", "id": "q",
                    "result": task("t", "c", "completed")}),
                ),
                _ => Reply::sse(&[
                    task("t", "c", "working"),
                    chunk("a", "partial", None, false),
                ]),
            })
            .await;
            let translator = translator(&agent, &Translate::default(), WAIT);
            let events = run_turn(&translator, turn(vec![user("hi")])).await;
            assert!(matches!(
                terminal(&events),
                Event::RunFinished {
                    outcome: Outcome::Completed,
                    ..
                }
            ));
            let query = agent.only_one("tasks/get", 0);
            assert_eq!(query.body["params"], json!({"id": "t"}));
            assert!(agent.rpc_calls("tasks/cancel").is_empty());
        }

        #[tokio::test]
        async fn a_client_that_goes_away_cancels_the_running_task() {
            let agent = Agent::serve(|seen, _| match seen.rpc() {
                "tasks/cancel" => Reply::json(
                    200,
                    json!({"jsonrpc": "2.0", "id": "x",
                    "result": task("t", "c", "canceled")}),
                ),
                _ => Reply::sse(&[
                    task("t", "c", "working"),
                    chunk("a", "thinking", None, false),
                ])
                .hang(),
            })
            .await;
            let translator = translator(&agent, &Translate::default(), WAIT);
            let mut stream = translator.start(turn(vec![user("hi")]));
            tokio::time::timeout(WAIT, async {
                while let Some(event) = stream.next().await {
                    if matches!(event, Event::TextDelta { .. }) {
                        break;
                    }
                }
            })
            .await
            .expect("the text arrives");
            drop(stream);
            let cancel = agent.wait_for("tasks/cancel").await;
            assert_eq!(cancel.body["params"], json!({"id": "t"}));
            assert!(cancel.body["id"].is_string());
        }

        #[tokio::test]
        async fn the_routes_timeout_cancels_the_running_task() {
            let agent = Agent::serve(|seen, _| match seen.rpc() {
                "tasks/cancel" => Reply::json(
                    200,
                    json!({"jsonrpc": "2.0", "id": "x",
                    "result": task("t-7", "c", "canceled")}),
                ),
                _ => Reply::sse(&[task("t-7", "c", "submitted")]).hang(),
            })
            .await;
            let translator = translator(&agent, &Translate::default(), Duration::from_millis(300));
            let events = run_turn(&translator, turn(vec![user("hi")])).await;
            let Event::RunError(error) = terminal(&events) else {
                panic!("{events:?}")
            };
            assert!(error.is_timeout());
            let cancel = agent.wait_for("tasks/cancel").await;
            assert_eq!(cancel.body["params"], json!({"id": "t-7"}));
        }

        #[tokio::test]
        async fn declining_the_question_cancels_the_task_and_finishes_cancelled() {
            let agent = Agent::serve(|seen, _| match seen.rpc() {
                "tasks/cancel" => Reply::json(
                    200,
                    json!({"jsonrpc": "2.0", "id": "x",
                    "result": task("t-3", "c", "canceled")}),
                ),
                _ => Reply::sse(&[update("t-3", "c", "input-required", Some("Sure?"))]),
            })
            .await;
            let translator = translator(&agent, &Translate::default(), WAIT);
            let events = run_turn(&translator, turn(vec![user("delete it")])).await;
            let Some(Event::Interrupt(interrupt)) =
                events.iter().find(|e| matches!(e, Event::Interrupt(_)))
            else {
                panic!("{events:?}")
            };
            let mut declined = turn(Vec::new());
            declined.resume = vec![Resume {
                interrupt_id: interrupt.id.clone(),
                status: ResumeStatus::Cancelled,
                payload: None,
            }];
            let events = run_turn(&translator, declined).await;
            assert!(matches!(
                terminal(&events),
                Event::RunFinished {
                    outcome: Outcome::Cancelled,
                    ..
                }
            ));
            assert_eq!(
                agent.only_one("tasks/cancel", 0).body["params"],
                json!({"id": "t-3"})
            );
            assert_eq!(agent.rpc_calls("message/stream").len(), 1);
        }
    }
}
