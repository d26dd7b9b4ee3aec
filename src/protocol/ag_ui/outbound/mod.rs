//! AG-UI outbound: we are the AG-UI client. A [`Turn`] becomes one `POST` of `RunAgentInput`; the upstream's
//! SSE stream is decoded into canonical events, tolerating what real servers send (`specs/ag-ui.md` §5.2).

mod decode;
mod encode;
mod pause_tools;

pub use decode::Decoder;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::OutboundOptions;
use crate::config::Protocol;
use crate::error::{Error, Result};
use crate::face::OutboundFace;
use crate::model::{Event, History, Interrupt, InterruptKind, Turn};
use crate::relay::{relay, UpstreamEvents};
use crate::sse;
use crate::store::{Record, UpstreamState};
use crate::translate::RunContext;
use crate::upstream::Upstream;
use pause_tools::{PauseTools, Paused};

/// What the last run of a conversation left for the next turn to answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Conversation {
    /// The ids of the run's interrupts read as approvals, answered `{"approved": …}` in the next `resume`.
    approvals: Vec<String>,
    /// The pause tools' calls the run paused on.
    paused: Paused,
}

impl UpstreamState for Conversation {
    const OWNER: &'static str = "ag_ui";
    const IDS: &'static [(&'static str, &'static str)] = &[];
}

pub struct Outbound {
    upstream: Upstream,
    protocol_version: Option<String>,
    pause_tools: PauseTools,
}

impl Outbound {
    /// `inbound` is the protocol of the route's clients: whether the proxy stands in for them as the
    /// frontend of the pause tools.
    pub fn new(upstream: Upstream, options: OutboundOptions, inbound: Protocol) -> Self {
        Self {
            upstream,
            pause_tools: PauseTools::new(&options, inbound),
            protocol_version: options.agui_protocol_version,
        }
    }
}

/// The id of the interrupt `event` asks an approval with, if it does.
fn approval_asked(event: &Event) -> Option<String> {
    match event {
        Event::Interrupt(Interrupt {
            id,
            kind: InterruptKind::Approval { .. },
        }) => Some(id.clone()),
        _ => None,
    }
}

fn take_conversation(record: &mut Record) -> Conversation {
    record.update_upstream(std::mem::take)
}

fn remember(conversation: Conversation, record: &mut Record) {
    record.update_upstream(|kept: &mut Conversation| *kept = conversation);
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

impl OutboundFace for Outbound {
    fn history(&self) -> History {
        super::ROW.history
    }

    async fn run(&self, turn: &Turn, context: &mut RunContext) -> Result<()> {
        // The last run's approvals and pause calls are answered now or lapse.
        let Conversation { approvals, paused } = take_conversation(&mut context.record);
        let answers = self.pause_tools.answers(&paused.calls, &turn.resume);
        let at = paused.position(&turn.messages);
        // When the proxy keeps this conversation's history for the agent, the answered calls belong in it.
        let logged = !answers.is_empty() && !context.record.log.is_empty();
        if logged {
            context.record.log.splice(at..at, answers.iter().cloned());
        }
        let seen = turn.messages.len() + if logged { answers.len() } else { 0 };
        // A temporary: the request (the conversation, copied) is not kept while the answer streams.
        let body =
            serde_json::to_vec(&self.request(turn, &approvals, &paused.calls, (at, answers)))
                .map_err(|e| Error::internal(format!("encoding RunAgentInput failed: {e}")))?;
        let response = self
            .upstream
            .post_json(body.into(), "text/event-stream")
            .await?;
        let mut events = UpstreamEvents::new(response.into_body(), "AG-UI", sse::MAX_EVENT_BYTES);
        let mut decoder = Decoder::diverting(self.pause_tools.diverter(turn));
        let mut asked = Vec::new();
        relay(&mut events, &mut decoder, context, |_, events, _| {
            asked.extend(events.iter().filter_map(approval_asked));
        })
        .await?;
        let calls = decoder.pauses.take_asked();
        let paused = match calls.is_empty() {
            true => Paused::default(),
            false => Paused { seen, calls },
        };
        remember(
            Conversation {
                approvals: asked,
                paused,
            },
            &mut context.record,
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_approvals_asked_are_remembered_for_the_next_turn_only() {
        let mut record = Record::default();
        let asked = Conversation {
            approvals: vec!["int-1".to_owned()],
            ..Conversation::default()
        };
        remember(asked, &mut record);
        assert_eq!(take_conversation(&mut record).approvals, ["int-1"]);
        assert!(take_conversation(&mut record).approvals.is_empty());
    }
}
