//! AG-Kit outbound: we are the v0 client (`specs/ag-kit.md` §5). A turn becomes one `POST` of what the
//! agent has not seen (`History::Delta`: the hub sends only the client's new messages) under the
//! conversation's `conversationId`, or the `resume` of the interrupt the agent paused on; the v0 stream is
//! decoded into canonical events, tolerating what legacy servers send (§5.2).

mod decode;
mod encode;

pub use decode::Decoder;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::body;
use crate::error::{Error, Result};
use crate::face::OutboundFace;
use crate::model::{Event, History, Interrupt, InterruptKind, Turn};
use crate::relay::{relay, UpstreamEvents};
use crate::sse;
use crate::store::{Record, UpstreamId, UpstreamState};
use crate::translate::RunContext;
use crate::upstream::Upstream;
use encode::request;

/// How much of an answer that is not an event stream is read to explain it.
const MAX_BODY_BYTES: usize = 64 * 1024;

pub struct Outbound {
    upstream: Upstream,
}

/// What a conversation remembers of its AG-Kit agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Conversation {
    /// The `conversationId` it has upstream.
    conversation_id: Option<String>,
    /// The interrupt the agent paused on: a `resume` of it is the next request.
    waiting: Option<WaitingInterrupt>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct WaitingInterrupt {
    id: String,
    /// An approval is answered `{"approved": …}`.
    approval: bool,
}

impl UpstreamState for Conversation {
    const OWNER: &'static str = "ag_kit";
    const IDS: &'static [(&'static str, &'static str)] =
        &[("conversation_id", "ag_kit.conversation.id")];
}

impl Outbound {
    pub fn new(upstream: Upstream) -> Self {
        Self { upstream }
    }
}

fn remember_interrupt(interrupt: &Interrupt, record: &mut Record) {
    record.update_upstream(|conversation: &mut Conversation| {
        conversation.waiting = Some(WaitingInterrupt {
            id: interrupt.id.clone(),
            approval: matches!(interrupt.kind, InterruptKind::Approval { .. }),
        });
    });
}

impl OutboundFace for Outbound {
    fn upstream_ids(&self, record: &Record) -> Vec<UpstreamId> {
        record.upstream_ids::<Conversation>()
    }

    fn history(&self) -> History {
        super::ROW.history
    }

    async fn run(&self, turn: &Turn, context: &mut RunContext) -> Result<()> {
        // A temporary: the request is not kept while the answer streams.
        let body = serde_json::to_vec(&request(turn, &mut context.record)?).map_err(|e| {
            Error::internal(format!("encoding the send-message request failed: {e}"))
        })?;
        let response = self
            .upstream
            .post_json(Bytes::from(body), "text/event-stream")
            .await?;
        if !sse::is_event_stream(response.headers()) {
            let body = body::read_limited(response.into_body(), MAX_BODY_BYTES)
                .await
                .unwrap_or_default();
            return Err(Error::upstream_malformed(format!(
                "the AG-Kit upstream answered without an event stream: {}",
                String::from_utf8_lossy(&body).trim()
            )));
        }
        // v0 has no event for it: the stream being open is the sign the agent took the run.
        context.emit(Event::RunStarted).await?;
        let mut events = UpstreamEvents::new(response.into_body(), "AG-Kit", sse::MAX_EVENT_BYTES);
        relay(
            &mut events,
            &mut Decoder::default(),
            context,
            |_, events, record| {
                for event in events {
                    if let Event::Interrupt(interrupt) = event {
                        remember_interrupt(interrupt, record);
                    }
                }
            },
        )
        .await
    }
}
