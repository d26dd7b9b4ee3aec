//! A2A outbound: we are the A2A 0.2.5 client (`specs/a2a.md` §5).
//!
//! A [`Turn`] becomes one JSON-RPC `message/stream` (or `message/send` when the agent card says the agent does
//! not stream) carrying only what the agent has not seen: A2A agents keep the history themselves. The answer —
//! SSE events or one JSON body, each a JSON-RPC response — is decoded by [`Decoder`] into canonical events.
//!
//! What a conversation remembers of its agent is a [`Conversation`] in its record: the upstream `contextId`
//! (kept across turns), and while a task waits for input its `taskId`, the id of the interrupt we emitted for
//! it, and the artifact text it had shown (so that continuing it does not show that text again).
//!
//! If the run is dropped (the client went away, the route's timeout) or given up while the upstream task
//! still runs, a `tasks/cancel` is sent for it in the background.

mod decode;
mod encode;
#[cfg(test)]
mod tests;

pub use decode::Decoder;
use decode::ShownArtifact;
use encode::{outgoing, rpc_request};

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body_util::{BodyExt, Limited};
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use tracing::{debug, info};

use super::{wire, OutboundOptions};
use crate::error::{Error, Result, Source};
use crate::face::OutboundFace;
use crate::json::null_as_default;
use crate::model::{Event, History, Outcome, Turn};
use crate::relay::{relay, UpstreamEvents};
use crate::sse;
use crate::store::{Record, UpstreamId, UpstreamState};
use crate::translate::RunContext;
use crate::upstream::{self, redacted, Upstream, UpstreamBody};

/// What a conversation remembers of its A2A agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Conversation {
    /// The upstream `contextId`.
    context_id: Option<String>,
    /// The task waiting for input (`input-required` / `auth-required`).
    task_id: Option<String>,
    /// The interrupt emitted for that task; `resume` entries answering it are sent to the task.
    interrupt_id: Option<String>,
    /// The artifacts that task had shown when it paused, so its next answer shows only what is new.
    shown_artifacts: BTreeMap<String, ShownArtifact>,
}

impl UpstreamState for Conversation {
    const OWNER: &'static str = "a2a";
    const IDS: &'static [(&'static str, &'static str)] =
        &[("context_id", "a2a.context.id"), ("task_id", "a2a.task.id")];
}

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
    pub fn new(upstream: Upstream, options: OutboundOptions) -> Self {
        let card = match options.a2a_card.as_deref() {
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

    /// How to talk to the agent: from its card, read once.
    async fn dialect(&self) -> Result<Dialect> {
        let discover = || async {
            tokio::time::timeout(CARD_TIMEOUT, self.discover())
                .await
                .unwrap_or_else(|_| {
                    Err(Error::upstream_timeout(format!(
                        "reading the A2A agent card took longer than {CARD_TIMEOUT:?}"
                    )))
                })
        };
        // Boxed: reading the card, once per agent, would otherwise size every run's future.
        self.dialect
            .get_or_try_init(|| Box::pin(discover()))
            .await
            .copied()
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
        response: http::Response<UpstreamBody>,
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
            let mut stream = UpstreamEvents::new(response.into_body(), "A2A", sse::MAX_EVENT_BYTES);
            // The task is tracked before the events go out: the run may be dropped while it waits for a
            // slow client.
            relay(&mut stream, decoder, context, |decoder, _, _| {
                guard.track(decoder.running_task())
            })
            .await?;
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

// --- Conversation state -----------------------------------------------------------------------------------

fn forget_paused_task(record: &mut Record) {
    record.update_upstream(|conversation: &mut Conversation| {
        *conversation = Conversation {
            context_id: conversation.context_id.take(),
            ..Conversation::default()
        }
    });
}

/// Keeps what the run learned: the context, and the task if it paused.
fn remember(decoder: &Decoder, record: &mut Record) {
    record.update_upstream(|conversation: &mut Conversation| {
        if let Some(context_id) = decoder.context_id() {
            conversation.context_id = Some(context_id.to_owned());
        }
        if let Some((task_id, interrupt_id)) = decoder.paused() {
            conversation.task_id = Some(task_id.to_owned());
            conversation.interrupt_id = Some(interrupt_id.to_owned());
            conversation.shown_artifacts = decoder.shown_artifacts();
        }
    });
}

// --- Talking to the agent -------------------------------------------------------------------------------

/// Reads a whole body, up to `limit` bytes.
async fn read_body(body: UpstreamBody, limit: usize) -> Result<Bytes> {
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
async fn error_answer(response: http::Response<UpstreamBody>) -> Error {
    let (status, body) = upstream::error_body(response).await;
    match serde_json::from_slice::<wire::RawResponse<serde::de::IgnoredAny>>(&body) {
        Ok(wire::RawResponse {
            error: Some(error), ..
        }) => rpc_error(error),
        _ => Error::upstream_status(status, &String::from_utf8_lossy(&body)),
    }
}

/// A JSON-RPC error from the agent as a run error; its code, as text, is the error's code.
pub(super) fn rpc_error(error: wire::JsonRpcError) -> Error {
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
        // In the run's trace, whichever task sends it.
        let cancel = async move { cancel_task(&upstream, &task_id).await };
        runtime.spawn(opentelemetry::context::FutureExt::with_current_context(
            cancel,
        ));
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
        let top_level = self.url.is_some() && self.protocol_version.as_deref().is_none_or(legacy);
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

impl OutboundFace for Outbound {
    fn upstream_ids(&self, record: &Record) -> Vec<UpstreamId> {
        record.upstream_ids::<Conversation>()
    }

    fn history(&self) -> History {
        super::ROW.history
    }

    async fn run(&self, turn: &Turn, context: &mut RunContext) -> Result<()> {
        let dialect = self.dialect().await?;
        let outgoing = outgoing(turn, &context.record.upstream_state())?;
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
            let conversation: Conversation = context.record.upstream_state();
            decoder.seed_shown_artifacts(conversation.shown_artifacts);
        }
        let (method, accept) = if dialect.streaming {
            ("message/stream", "text/event-stream")
        } else {
            ("message/send", "application/json")
        };
        let continues = message.task_id.is_some();
        // A temporary: the message is not kept while the answer streams.
        let body = rpc_request(
            method,
            &wire::MessageSendParams {
                message,
                configuration: None,
                metadata: None,
            },
        )?;
        let response = self.upstream.post_json_any_status(body, accept).await?;
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
}
