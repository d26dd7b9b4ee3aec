//! Canonical events as the tests of the encoders write them: an assistant text message, a tool call, the end
//! of a run.

use agent_bridge::model::{Event, Outcome, Role};

/// An assistant text message `id`, in `deltas`.
pub fn text(id: &str, deltas: &[&str]) -> Vec<Event> {
    let mut events = vec![Event::TextStart {
        message_id: id.to_owned(),
        role: Role::Assistant,
    }];
    events.extend(deltas.iter().map(|delta| Event::TextDelta {
        message_id: id.to_owned(),
        delta: (*delta).to_owned(),
    }));
    events.push(Event::TextEnd {
        message_id: id.to_owned(),
    });
    events
}

/// A call of `name`, its arguments in `args`.
pub fn call(call_id: &str, name: &str, args: &[&str]) -> Vec<Event> {
    let mut events = vec![Event::ToolCallStart {
        call_id: call_id.to_owned(),
        name: name.to_owned(),
        parent_message_id: None,
    }];
    events.extend(args.iter().map(|delta| Event::ToolCallArgs {
        call_id: call_id.to_owned(),
        delta: (*delta).to_owned(),
    }));
    events.push(Event::ToolCallEnd {
        call_id: call_id.to_owned(),
    });
    events
}

/// The end of a run, without usage.
pub fn finished(outcome: Outcome) -> Event {
    Event::RunFinished {
        outcome,
        usage: None,
    }
}
