//! AgentScope outbound: we are the client of an agentscope-runtime 1.1.x `POST /process` endpoint
//! (`specs/agentscope.md` §5).
//!
//! A [`Turn`] becomes one [`wire::AgentRequest`]: the **full history** in `input` (the runtime keeps none we
//! can rely on), the client's tools in OpenAI function form, the generation options, `stream: true`, and
//! always a `session_id` and `user_id` of the conversation's own. The SSE answer is decoded by [`Decoder`],
//! one `data:` payload at a time, into canonical events.
//!
//! What a conversation remembers of its runtime is a [`Conversation`] in its record:
//! - its `session_id` / `user_id`: minted on the conversation's first turn and kept, so every turn of a
//!   conversation uses the same pair and no two conversations share one. (The runtime runs one request per
//!   `user_id:session_id` at a time, and requests without them all share the key `None:None`.) A turn with
//!   no conversation key gets a fresh pair that is not kept.
//! - the `mcp_approval_request`s of the last run, which the next turn may answer.
//!
//! Choices where the protocol leaves room (see also `docs/translation.md`, "AgentScope ↔ canonical"):
//! - Tool-call `arguments` arrive as whole snapshots (replace, not append). Downstream only ever gets
//!   appended text, so a snapshot is streamed only as far as it agrees with the snapshot before it (a
//!   partial-JSON snapshot such as `{"city": "Bei"}` repairs its closing characters, which the next one
//!   rewrites); the rest follows when the call completes (its content or message is `completed`, its
//!   output arrives, or the response completes). A completed value that rewrites text already sent cannot be
//!   taken back: it is logged at warn level and only what extends the sent text is added. Calls of client
//!   tools (named in `turn.tools`) are never streamed: their arguments are sent once, whole, when the call
//!   completes, since the client acts on them.
//! - Text contents: `delta: true` appends; a non-delta text (the completed content, the completed message's
//!   repeat, a snapshot) adds only what extends the text already sent, so nothing is shown twice and a
//!   stream of whole texts still shows.
//! - Response `completed` → `RunFinished` (with usage); `failed` → `RunError` with the runtime's
//!   `code`/`message`; `canceled` → `RunFinished(cancelled)`; `rejected` / `incomplete` → `RunError`
//!   (`AGENTSCOPE_REJECTED` / `AGENTSCOPE_INCOMPLETE`): a truncated answer is not a success. A bare
//!   `{"error": …}` frame → `RunError` coded `AGENTSCOPE_ERROR`. A stream that ends without a terminal
//!   `response` (the runtime's `stop_chat`, a dropped connection) is left to the normalizer, which reports
//!   `UPSTREAM_EOF`: an interrupted run is never a success.
//! - `mcp_approval_request` → `Interrupt` (approval, id = the request's `id`); the answer goes back, in the
//!   next turn, as the request message followed by an `mcp_approval_response` (see [`Resume::approval`]).

mod decode;
mod encode;
#[cfg(test)]
mod tests;

pub use decode::Decoder;
use encode::request;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{wire, OutboundOptions};
use crate::body;
use crate::error::{Error, Result};
use crate::face::OutboundFace;
use crate::model::{new_id, Event, History, Turn};
use crate::relay::{relay, UpstreamEvents};
use crate::sse;
use crate::store::{Record, UpstreamId, UpstreamState};
use crate::translate::RunContext;
use crate::upstream::Upstream;

/// What a conversation remembers of its AgentScope runtime.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Conversation {
    /// The `session_id` / `user_id` it uses upstream.
    identity: Option<Identity>,
    /// The approval requests of the last run, which the next turn may answer.
    approvals: Vec<PendingApproval>,
}

impl UpstreamState for Conversation {
    const OWNER: &'static str = "agentscope";
    const IDS: &'static [(&'static str, &'static str)] =
        &[("identity", "agentscope.session.identity")];
}

/// The largest SSE event accepted: more than [`sse::MAX_EVENT_BYTES`], as a completed `response` repeats the
/// whole run.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;
/// The largest non-SSE answer read (to explain it).
const MAX_BODY_BYTES: usize = 64 * 1024;
/// The code of a failure the runtime reports without one (bare `{"error": …}` frames, a failed response
/// without `error`).
pub(super) const AGENTSCOPE_ERROR: &str = "AGENTSCOPE_ERROR";

pub struct Outbound {
    upstream: Upstream,
    /// The route's model, for turns that name none.
    model: Option<String>,
}

impl Outbound {
    pub fn new(upstream: Upstream, options: OutboundOptions) -> Self {
        Self {
            upstream,
            model: options.model,
        }
    }
}

/// Emits decoded events, keeping the approval requests among them first (so an answer can find them even
/// when the client goes away meanwhile).
async fn emit_all(
    decoder: &mut Decoder,
    events: &mut Vec<Event>,
    context: &mut RunContext,
) -> Result<()> {
    remember_approvals(decoder.take_approvals(), &mut context.record);
    for event in events.drain(..) {
        context.emit(event).await?;
    }
    Ok(())
}

// --- Conversation identity ---------------------------------------------------------------------------------

/// The `session_id` / `user_id` a conversation uses upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Identity {
    pub(super) session_id: String,
    pub(super) user_id: String,
}

/// The conversation's pair: kept in the record from its first turn on. Without a conversation key every
/// turn would share one record, so such a turn gets a fresh pair that is not kept.
fn identity(turn: &Turn, record: &mut Record) -> Identity {
    let fresh = || Identity {
        session_id: new_id("session"),
        user_id: new_id("user"),
    };
    if turn.conversation.is_empty() {
        return fresh();
    }
    record.update_upstream(|conversation: &mut Conversation| {
        conversation.identity.get_or_insert_with(fresh).clone()
    })
}

// --- Approvals ---------------------------------------------------------------------------------------------

/// An `mcp_approval_request` the client may answer next turn, and the message that carried it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingApproval {
    message_id: String,
    request: wire::McpApprovalRequest,
}

fn take_approvals(record: &mut Record) -> Vec<PendingApproval> {
    record.update_upstream(|conversation: &mut Conversation| {
        std::mem::take(&mut conversation.approvals)
    })
}

fn remember_approvals(new: Vec<PendingApproval>, record: &mut Record) {
    if !new.is_empty() {
        record
            .update_upstream(|conversation: &mut Conversation| conversation.approvals.extend(new));
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
        let identity = identity(turn, &mut context.record);
        // Approvals of the last run are answered now or lapse: the client moved on.
        let approvals = take_approvals(&mut context.record);
        // A temporary: the request (the conversation, copied) is not kept while the answer streams.
        let body = serde_json::to_vec(&request(turn, &identity, self.model.as_deref(), &approvals))
            .map_err(|e| Error::internal(format!("encoding the AgentRequest failed: {e}")))?;
        let response = self
            .upstream
            .post_json(Bytes::from(body), "text/event-stream")
            .await?;
        let mut decoder = Decoder::with_client_tools(turn.tools.iter().map(|t| t.name.clone()));
        let mut events = Vec::new();
        if !sse::is_event_stream(response.headers()) {
            // The runtime always streams; a JSON answer is most likely a bare error object.
            let body = body::read_limited(response.into_body(), MAX_BODY_BYTES)
                .await
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&body);
            if decoder.decode(&text, &mut events).is_err() {
                return Err(Error::upstream_malformed(format!(
                    "the AgentScope upstream answered without an event stream: {}",
                    text.trim()
                )));
            }
            return emit_all(&mut decoder, &mut events, context).await;
        }
        let mut events = UpstreamEvents::new(response.into_body(), "AgentScope", MAX_EVENT_BYTES);
        relay(&mut events, &mut decoder, context, |decoder, _, record| {
            remember_approvals(decoder.take_approvals(), record)
        })
        .await
    }
}
