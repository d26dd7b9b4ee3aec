//! Where the history an inbound sends meets the history an upstream wants (DESIGN §3).
//!
//! | inbound gives \ upstream wants | full                               | delta                                 |
//! | ------------------------------ | ---------------------------------- | ------------------------------------- |
//! | full                           | pass through                       | only what the upstream has not seen   |
//! | delta                          | append to the log, send the log    | pass through                          |
//!
//! Protocol-free: it works on the canonical turn and the conversation record.

use std::collections::HashSet;

use crate::model::{Event, History, Message, Part, Role, ToolCall, Turn};
use crate::store::Record;

/// Shapes `turn.messages` into the history the upstream wants, and says what of the reply must be
/// remembered for the next turn.
pub fn prepare(turn: &mut Turn, record: &mut Record, upstream: History) -> ReplyLog {
    match (turn.history, upstream) {
        (History::Full, History::Delta) => {
            keep_unseen(turn, record);
            ReplyLog::Ids
        }
        (History::Delta, History::Full) => {
            record.log.append(&mut turn.messages);
            turn.messages = record.log.clone();
            turn.history = History::Full;
            ReplyLog::Messages(Transcript::default())
        }
        (History::Full, History::Full) | (History::Delta, History::Delta) => ReplyLog::Nothing,
    }
}

/// What the proxy remembers of a reply as it streams.
#[derive(Debug)]
pub enum ReplyLog {
    /// Both sides keep history the same way: nothing.
    Nothing,
    /// The ids of the messages the client builds from the reply (it sends them back next turn).
    Ids,
    /// The reply itself, for the log sent to a full-history upstream.
    Messages(Transcript),
}

impl ReplyLog {
    pub fn observe(&mut self, event: &Event, record: &mut Record) {
        match self {
            Self::Nothing => {}
            Self::Ids => record
                .produced
                .extend(produced_id(event).map(str::to_owned)),
            Self::Messages(transcript) => transcript.observe(event),
        }
    }

    /// At the end of the run.
    pub fn finish(self, record: &mut Record) {
        if let Self::Messages(transcript) = self {
            record.log.extend(transcript.into_messages());
        }
    }
}

/// Full history toward an upstream that keeps its own: only the client's messages not sent before, and
/// none of the messages the proxy itself streamed to the client. A history that no longer holds a message
/// already sent was rewritten (an edit, a branch), and one with nothing new and no answer asks again for an
/// answer the upstream already gave (a regenerate, a retry): either way the upstream conversation starts
/// afresh, and the whole history is new to it.
fn keep_unseen(turn: &mut Turn, record: &mut Record) {
    let is_new = |m: &Message, record: &Record| {
        !record.sent.contains(&m.id) && !record.produced.contains(&m.id)
    };
    let ids: HashSet<&str> = turn.messages.iter().map(|m| m.id.as_str()).collect();
    let rewritten = record.sent.iter().find(|id| !ids.contains(id.as_str()));
    let asks_again = !record.sent.is_empty()
        && turn.resume.is_empty()
        && !turn.messages.iter().any(|m| is_new(m, record));
    if let Some(missing) = rewritten {
        tracing::info!(
            conversation = %turn.conversation,
            "history no longer holds message {missing}; starting a fresh upstream conversation"
        );
        forget_upstream(record);
    } else if asks_again {
        tracing::info!(
            conversation = %turn.conversation,
            "history has nothing new and answers nothing (a regenerated answer); starting a fresh upstream conversation"
        );
        forget_upstream(record);
    }
    turn.messages.retain(|m| is_new(m, record));
    record
        .sent
        .extend(turn.messages.iter().map(|m| m.id.clone()));
    turn.history = History::Delta;
}

fn forget_upstream(record: &mut Record) {
    record.upstream = None;
    record.sent.clear();
    record.produced.clear();
}

/// The ids of the messages a client builds from the events the proxy streamed to it, so that they are not
/// mistaken for new client messages next turn.
fn produced_id(event: &Event) -> Option<&str> {
    match event {
        Event::TextStart { message_id, .. } | Event::ToolResult { message_id, .. } => {
            Some(message_id)
        }
        Event::ToolCallStart {
            call_id,
            parent_message_id: None,
            ..
        } => Some(call_id),
        _ => None,
    }
}

/// The reply of one run as canonical messages, built from its events: text messages, assistant tool calls
/// and tool results. Reasoning and everything else stays out of the log.
#[derive(Debug, Default)]
pub struct Transcript {
    messages: Vec<Message>,
}

impl Transcript {
    pub fn observe(&mut self, event: &Event) {
        match event {
            Event::TextStart { message_id, role } => {
                self.messages
                    .push(Message::text_message(message_id.clone(), *role, ""));
            }
            Event::TextDelta { message_id, delta } => {
                if let Some(Part::Text(text)) =
                    self.message(message_id).and_then(|m| m.content.first_mut())
                {
                    text.push_str(delta);
                }
            }
            Event::ToolCallStart {
                call_id,
                name,
                parent_message_id,
            } => {
                let call = ToolCall {
                    id: call_id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                };
                let parent = parent_message_id.as_deref().unwrap_or(call_id);
                match self.message(parent) {
                    Some(message) => message.tool_calls.push(call),
                    None => {
                        let mut message = Message::new(parent, Role::Assistant, Vec::new());
                        message.tool_calls.push(call);
                        self.messages.push(message);
                    }
                }
            }
            Event::ToolCallArgs { call_id, delta } => {
                let call = self
                    .messages
                    .iter_mut()
                    .rev()
                    .flat_map(|m| &mut m.tool_calls)
                    .find(|c| &c.id == call_id);
                if let Some(call) = call {
                    call.arguments.push_str(delta);
                }
            }
            Event::ToolResult {
                call_id,
                message_id,
                content,
                is_error,
            } => {
                let mut message =
                    Message::text_message(message_id.clone(), Role::Tool, content.clone());
                message.tool_call_id = Some(call_id.clone());
                message.is_error = *is_error;
                self.messages.push(message);
            }
            _ => {}
        }
    }

    fn message(&mut self, id: &str) -> Option<&mut Message> {
        self.messages.iter_mut().rev().find(|m| m.id == id)
    }

    /// The messages, without text messages that stayed empty.
    pub fn into_messages(self) -> Vec<Message> {
        self.messages
            .into_iter()
            .filter(|m| !m.tool_calls.is_empty() || m.role == Role::Tool || !m.text().is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::UpstreamState;

    /// An outbound's upstream conversation id.
    #[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Context {
        id: Option<String>,
    }

    impl UpstreamState for Context {
        const OWNER: &'static str = "test";
        const IDS: &'static [(&'static str, &'static str)] = &[];
    }

    fn user(id: &str, text: &str) -> Message {
        Message::text_message(id, Role::User, text)
    }

    fn full_turn(messages: Vec<Message>) -> Turn {
        Turn {
            conversation: "t1".into(),
            messages,
            history: History::Full,
            ..Turn::default()
        }
    }

    fn ids(turn: &Turn) -> Vec<&str> {
        turn.messages.iter().map(|m| m.id.as_str()).collect()
    }

    #[test]
    fn full_history_toward_a_delta_upstream_sends_only_unseen_client_messages() {
        let mut record = Record::default();
        let mut first = full_turn(vec![user("u1", "Hi")]);
        let mut reply = prepare(&mut first, &mut record, History::Delta);
        assert_eq!(ids(&first), ["u1"]);
        assert_eq!(first.history, History::Delta);
        reply.observe(
            &Event::TextStart {
                message_id: "reply-1".into(),
                role: Role::Assistant,
            },
            &mut record,
        );
        record.update_upstream(|state: &mut Context| state.id = Some("ctx".into()));

        let assistant = Message::text_message("reply-1", Role::Assistant, "Hello");
        let mut second = full_turn(vec![user("u1", "Hi"), assistant, user("u2", "Weather?")]);
        prepare(&mut second, &mut record, History::Delta);

        assert_eq!(ids(&second), ["u2"]);
        assert_eq!(
            record.upstream_state::<Context>().id.as_deref(),
            Some("ctx")
        );
    }

    #[test]
    fn rewritten_history_starts_a_fresh_upstream_conversation() {
        let mut record = Record::default();
        prepare(
            &mut full_turn(vec![user("u1", "Hi")]),
            &mut record,
            History::Delta,
        );
        record.update_upstream(|state: &mut Context| state.id = Some("ctx".into()));

        let mut edited = full_turn(vec![user("u1-edited", "Hello instead")]);
        prepare(&mut edited, &mut record, History::Delta);

        assert_eq!(ids(&edited), ["u1-edited"]);
        assert_eq!(
            record.upstream_state::<Context>(),
            Context::default(),
            "the old upstream conversation is forgotten"
        );
        assert_eq!(record.sent, ["u1-edited"]);
    }

    #[test]
    fn asking_again_with_nothing_new_starts_a_fresh_upstream_conversation() {
        let mut record = Record::default();
        let mut reply = prepare(
            &mut full_turn(vec![user("u1", "Hi")]),
            &mut record,
            History::Delta,
        );
        reply.observe(
            &Event::TextStart {
                message_id: "reply-1".into(),
                role: Role::Assistant,
            },
            &mut record,
        );
        record.update_upstream(|state: &mut Context| state.id = Some("c1".into()));

        // The client dropped the reply and runs the same history again (regenerate).
        let mut again = full_turn(vec![user("u1", "Hi")]);
        prepare(&mut again, &mut record, History::Delta);

        assert_eq!(
            ids(&again),
            ["u1"],
            "the whole history is new to a fresh conversation"
        );
        assert_eq!(record.upstream_state::<Context>(), Context::default());
    }

    #[test]
    fn delta_toward_a_full_upstream_sends_the_log_and_logs_the_reply() {
        let mut record = Record::default();
        let mut first = Turn {
            messages: vec![user("u1", "Hi")],
            history: History::Delta,
            ..Turn::default()
        };
        let mut reply = prepare(&mut first, &mut record, History::Full);
        assert_eq!(ids(&first), ["u1"]);
        for event in [
            Event::TextStart {
                message_id: "m1".into(),
                role: Role::Assistant,
            },
            Event::TextDelta {
                message_id: "m1".into(),
                delta: "Hel".into(),
            },
            Event::TextDelta {
                message_id: "m1".into(),
                delta: "lo".into(),
            },
            Event::TextEnd {
                message_id: "m1".into(),
            },
            Event::ToolCallStart {
                call_id: "c1".into(),
                name: "search".into(),
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
                content: "found".into(),
                is_error: false,
            },
        ] {
            reply.observe(&event, &mut record);
        }
        reply.finish(&mut record);

        let mut second = Turn {
            messages: vec![user("u2", "More")],
            history: History::Delta,
            ..Turn::default()
        };
        prepare(&mut second, &mut record, History::Full);

        assert_eq!(ids(&second), ["u1", "m1", "r1", "u2"]);
        assert_eq!(second.history, History::Full);
        assert_eq!(second.messages[1].text(), "Hello");
        assert_eq!(second.messages[1].tool_calls[0].arguments, "{}");
        assert_eq!(second.messages[2].tool_call_id.as_deref(), Some("c1"));
    }

    #[test]
    fn matching_histories_pass_through() {
        let mut record = Record::default();
        let mut turn = full_turn(vec![user("u1", "Hi")]);
        assert!(matches!(
            prepare(&mut turn, &mut record, History::Full),
            ReplyLog::Nothing
        ));
        assert_eq!(ids(&turn), ["u1"]);
        assert!(record.sent.is_empty());
    }
}
