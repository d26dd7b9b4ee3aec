//! Makes loose canonical event streams well formed.
//!
//! Decoders translate what an upstream sends as directly as they can: deltas without a start, ids left
//! empty, messages never closed, parallel tool calls interleaved, two terminal events, events after the end.
//! [`Normalizer`] sits between a decoder and an encoder and turns any such stream into one that the
//! strictest client accepts (the AG-UI conservative output profile), so that encoders stay simple:
//!
//! - `RunStarted` first, exactly once; exactly one terminal event, last;
//! - every text or reasoning delta inside a start/end of its id, a closed id never reopened;
//! - at most one of text, reasoning or a tool call open at a time;
//! - tool calls strictly serialized (`start → args… → end`), a call without arguments given `{}` (arguments
//!   stream as they come: ones an upstream cut short stay cut short, see fuzz/README.md);
//! - a tool result only after the end of its call; steps balanced and closed before the end.
//!
//! It is a plain synchronous state machine: one event in, zero or more events out.

use std::collections::{HashMap, HashSet, VecDeque};

use tracing::debug;

use crate::error::Error;
use crate::model::{new_id, Event, Outcome, Role};

/// Guarantees a well-formed canonical event stream; see the module documentation.
#[derive(Debug)]
pub struct Normalizer {
    /// `RunStarted` was emitted.
    started: bool,
    /// A terminal event was emitted; everything after it is dropped.
    done: bool,
    text: Channel,
    reasoning: Channel,
    /// Every text and reasoning id opened so far: a closed id is never reopened, and one id never names both
    /// a text and a reasoning message (clients keep both in one list of messages).
    used_messages: HashSet<String>,
    /// The tool call currently open in the output.
    call: Option<OpenCall>,
    /// Every call id started upstream (after minting), so a restart or stray args can be recognised.
    started_calls: HashSet<String>,
    /// The id of the last call started upstream: where args/end with an empty id belong.
    last_call: Option<String>,
    /// Events held back while a tool call is open, in upstream order.
    deferred: VecDeque<Event>,
    /// The id of the last assistant text message, the parent of the tool calls that follow it.
    last_assistant_text: Option<String>,
    /// Open steps, in the order they started.
    steps: Vec<String>,
    /// An interrupt was emitted: the run pauses rather than completes.
    interrupted: bool,
}

/// The open tool call of the output.
#[derive(Debug)]
struct OpenCall {
    id: String,
    /// A non-empty args delta was emitted (otherwise the call gets `"{}"` before its end).
    had_args: bool,
}

/// The bookkeeping of one kind of streamed message (text or reasoning).
#[derive(Debug)]
struct Channel {
    /// The prefix of minted ids.
    prefix: &'static str,
    /// The message currently open in the output.
    open: Option<String>,
    /// An upstream id that came back after it was closed (or that names a message of the other kind) -> the
    /// fresh id of its new segment.
    replaced: HashMap<String, String>,
}

/// Where a start or delta of a channel goes.
enum Target {
    /// Into the message that is open, under this id.
    Open(String),
    /// Into a message that must be opened first, under this id.
    Fresh(String),
}

impl Channel {
    fn new(prefix: &'static str) -> Self {
        Self {
            prefix,
            open: None,
            replaced: HashMap::new(),
        }
    }

    /// Maps the id of an upstream start or delta to the output message it belongs to; `used` holds the ids
    /// opened so far.
    fn target(&mut self, id: String, used: &HashSet<String>) -> Target {
        // An empty id means "the message being streamed", if there is one.
        if id.is_empty() {
            return match &self.open {
                Some(open) => Target::Open(open.clone()),
                None => Target::Fresh(new_id(self.prefix)),
            };
        }
        // The common case first. An open upstream id is never a key of `replaced` (those are closed ids).
        if self.open.as_ref() == Some(&id) {
            return Target::Open(id);
        }
        // A reopened id continues its replacement segment while that one is open.
        if let Some(replacement) = self.replaced.get(&id) {
            if self.open.as_ref() == Some(replacement) {
                return Target::Open(replacement.clone());
            }
            return Target::Fresh(self.replace(id));
        }
        if used.contains(&id) {
            // Clients discard content for a closed id, or fail on it: start a new message instead.
            debug!(message_id = %id, "normalize: content for a closed message goes to a new one");
            return Target::Fresh(self.replace(id));
        }
        Target::Fresh(id)
    }

    /// Mints the id of a new segment for a closed upstream id.
    fn replace(&mut self, id: String) -> String {
        let fresh = new_id(self.prefix);
        self.replaced.insert(id, fresh.clone());
        fresh
    }

    /// Whether an upstream end event with this id ends the open message.
    fn ends_open(&self, id: &str) -> bool {
        let Some(open) = &self.open else { return false };
        id.is_empty() || self.replaced.get(id).map_or(id, String::as_str) == open
    }
}

impl Default for Normalizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Normalizer {
    pub fn new() -> Self {
        Self {
            started: false,
            done: false,
            text: Channel::new("msg"),
            reasoning: Channel::new("reasoning"),
            used_messages: HashSet::new(),
            call: None,
            started_calls: HashSet::new(),
            last_call: None,
            deferred: VecDeque::new(),
            last_assistant_text: None,
            steps: Vec::new(),
            interrupted: false,
        }
    }

    /// Feeds one upstream event; appends 0..n well-formed events to `out`.
    pub fn push(&mut self, event: Event, out: &mut Vec<Event>) {
        if self.done {
            debug!(?event, "normalize: event after the terminal event dropped");
            return;
        }
        self.ensure_started(out);
        match event {
            // Several upstream runs in one response are merged into the one run.
            Event::RunStarted => {}
            Event::RunFinished { .. } | Event::RunError(_) => self.terminate(event, out),
            Event::ToolCallStart {
                call_id,
                name,
                parent_message_id,
            } => {
                let call_id = if call_id.is_empty() {
                    new_id("call")
                } else {
                    call_id
                };
                if self.started_calls.contains(&call_id) {
                    // A client would run the call twice, or fail on a reused id.
                    debug!(%call_id, "normalize: second start of a tool call dropped");
                    return;
                }
                self.started_calls.insert(call_id.clone());
                self.last_call = Some(call_id.clone());
                self.route(
                    Event::ToolCallStart {
                        call_id,
                        name,
                        parent_message_id,
                    },
                    out,
                );
            }
            Event::ToolCallArgs { call_id, delta } => {
                if let Some(call_id) = self.known_call(call_id) {
                    self.route(Event::ToolCallArgs { call_id, delta }, out);
                }
            }
            Event::ToolCallEnd { call_id } => {
                if let Some(call_id) = self.known_call(call_id) {
                    self.route(Event::ToolCallEnd { call_id }, out);
                }
            }
            event => self.route(event, out),
        }
    }

    /// The upstream is done (the outbound returned): `result` is its outcome. Appends what is needed so the
    /// stream ends with exactly one terminal event. After a terminal, does nothing.
    pub fn finish(&mut self, result: Result<(), Error>, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        self.ensure_started(out);
        let error = match result {
            Ok(()) => Error::upstream_eof(),
            Err(error) => error,
        };
        self.terminate(Event::RunError(error), out);
    }

    /// Whether a terminal event has been emitted.
    pub fn is_done(&self) -> bool {
        self.done
    }

    fn ensure_started(&mut self, out: &mut Vec<Event>) {
        if !self.started {
            self.started = true;
            out.push(Event::RunStarted);
        }
    }

    /// Resolves the call id of an args or end event as the upstream meant it, or `None` to drop the event.
    ///
    /// This is done when the event arrives, not when it is replayed: an empty id means the call the upstream
    /// started last, even if that call is still deferred behind another one.
    fn known_call(&self, call_id: String) -> Option<String> {
        // The common case first: a delta of the open call.
        if self.call.as_ref().is_some_and(|call| call.id == call_id) {
            return Some(call_id);
        }
        let call_id = if call_id.is_empty() {
            match &self.last_call {
                Some(last) => last.clone(),
                None => {
                    debug!("normalize: tool call event with no id and no call started dropped");
                    return None;
                }
            }
        } else {
            call_id
        };
        if !self.started_calls.contains(&call_id) {
            debug!(%call_id, "normalize: event of a tool call never started dropped");
            return None;
        }
        Some(call_id)
    }

    /// Applies an event now if no tool call blocks it, else defers it until the open call ends.
    fn route(&mut self, event: Event, out: &mut Vec<Event>) {
        if self.result_of_open_call(&event) {
            self.end_call(out);
            self.replay(out);
        }
        if self.is_ready(&event) {
            let had_call = self.call.is_some();
            self.apply(event, out);
            if had_call && self.call.is_none() {
                self.replay(out);
            }
        } else {
            self.deferred.push_back(event);
        }
    }

    /// Applies the deferred events that are no longer blocked, in order.
    ///
    /// Events of the open call are taken out from among the others; when a call ends, the scan starts over
    /// because everything it skipped may now go.
    fn replay(&mut self, out: &mut Vec<Event>) {
        let mut i = 0;
        while i < self.deferred.len() {
            if self.result_of_open_call(&self.deferred[i]) {
                self.end_call(out);
                i = 0;
                continue;
            }
            if !self.is_ready(&self.deferred[i]) {
                i += 1;
                continue;
            }
            let Some(event) = self.deferred.remove(i) else {
                break;
            };
            let had_call = self.call.is_some();
            self.apply(event, out);
            if had_call && self.call.is_none() {
                i = 0;
            }
        }
    }

    /// Whether an event may be applied now: anything when no call is open, else only that call's args/end.
    fn is_ready(&self, event: &Event) -> bool {
        let Some(call) = &self.call else { return true };
        match event {
            Event::ToolCallArgs { call_id, .. } | Event::ToolCallEnd { call_id } => {
                *call_id == call.id
            }
            _ => false,
        }
    }

    /// Whether an event is the result of the open call (which it implicitly ends).
    fn result_of_open_call(&self, event: &Event) -> bool {
        match (event, &self.call) {
            (Event::ToolResult { call_id, .. }, Some(call)) => *call_id == call.id,
            _ => false,
        }
    }

    /// Applies one event that no tool call blocks (see [`Self::is_ready`]).
    fn apply(&mut self, event: Event, out: &mut Vec<Event>) {
        match event {
            // Handled in `push`; never routed here.
            Event::RunStarted | Event::RunFinished { .. } | Event::RunError(_) => {}
            Event::TextStart { message_id, role } => {
                self.text_target(message_id, role, out);
            }
            Event::TextDelta { message_id, delta } => {
                if delta.is_empty() {
                    return;
                }
                let message_id = self.text_target(message_id, Role::Assistant, out);
                out.push(Event::TextDelta { message_id, delta });
            }
            Event::TextEnd { message_id } => {
                if self.text.ends_open(&message_id) {
                    self.close_text(out);
                }
            }
            Event::ReasoningStart { message_id } => {
                self.reasoning_target(message_id, out);
            }
            Event::ReasoningDelta { message_id, delta } => {
                if delta.is_empty() {
                    return;
                }
                let message_id = self.reasoning_target(message_id, out);
                out.push(Event::ReasoningDelta { message_id, delta });
            }
            Event::ReasoningEnd { message_id } => {
                if self.reasoning.ends_open(&message_id) {
                    self.close_reasoning(out);
                }
            }
            Event::ToolCallStart {
                call_id,
                name,
                parent_message_id,
            } => {
                self.close_messages(out);
                // An empty parent is no parent (it would reach clients as `parentMessageId: ""`).
                let parent_message_id = parent_message_id
                    .filter(|parent| !parent.is_empty())
                    .or_else(|| self.last_assistant_text.clone());
                self.call = Some(OpenCall {
                    id: call_id.clone(),
                    had_args: false,
                });
                out.push(Event::ToolCallStart {
                    call_id,
                    name,
                    parent_message_id,
                });
            }
            Event::ToolCallArgs { call_id, delta } => match &mut self.call {
                Some(call) if call.id == call_id => {
                    if !delta.is_empty() {
                        call.had_args = true;
                        out.push(Event::ToolCallArgs { call_id, delta });
                    }
                }
                _ => debug!(%call_id, "normalize: args of a tool call that is not open dropped"),
            },
            Event::ToolCallEnd { call_id } => match &self.call {
                Some(call) if call.id == call_id => self.end_call(out),
                _ => debug!(%call_id, "normalize: end of a tool call that is not open dropped"),
            },
            Event::ToolResult {
                call_id,
                message_id,
                content,
                is_error,
            } => {
                let message_id = if message_id.is_empty() {
                    new_id("msg")
                } else {
                    message_id
                };
                self.emit(
                    Event::ToolResult {
                        call_id,
                        message_id,
                        content,
                        is_error,
                    },
                    out,
                );
            }
            Event::StepStarted { name } => {
                if self.steps.contains(&name) {
                    debug!(%name, "normalize: start of an open step dropped");
                    return;
                }
                self.steps.push(name.clone());
                self.emit(Event::StepStarted { name }, out);
            }
            Event::StepFinished { name } => {
                match self.steps.iter().position(|open| *open == name) {
                    Some(index) => {
                        self.steps.remove(index);
                        self.emit(Event::StepFinished { name }, out);
                    }
                    None => debug!(%name, "normalize: end of a step that is not open dropped"),
                }
            }
            Event::Interrupt(interrupt) => {
                self.interrupted = true;
                self.emit(Event::Interrupt(interrupt), out);
            }
            event @ (Event::StateSnapshot(_)
            | Event::StateDelta(_)
            | Event::MessagesSnapshot(_)
            | Event::Artifact(_)
            | Event::Usage(_)
            | Event::Custom { .. }
            | Event::Raw { .. }) => self.emit(event, out),
        }
    }

    /// Emits an event that is neither text nor reasoning nor a tool call: it ends the open messages.
    fn emit(&mut self, event: Event, out: &mut Vec<Event>) {
        self.close_messages(out);
        out.push(event);
    }

    /// The id a text start or delta goes to, opening that message (and closing any other) first if needed.
    fn text_target(&mut self, message_id: String, role: Role, out: &mut Vec<Event>) -> String {
        match self.text.target(message_id, &self.used_messages) {
            Target::Open(id) => id,
            Target::Fresh(id) => {
                self.close_messages(out);
                if role == Role::Assistant {
                    self.last_assistant_text = Some(id.clone());
                }
                self.used_messages.insert(id.clone());
                self.text.open = Some(id.clone());
                out.push(Event::TextStart {
                    message_id: id.clone(),
                    role,
                });
                id
            }
        }
    }

    /// The id a reasoning start or delta goes to, opening that message (and closing any other) first if needed.
    fn reasoning_target(&mut self, message_id: String, out: &mut Vec<Event>) -> String {
        match self.reasoning.target(message_id, &self.used_messages) {
            Target::Open(id) => id,
            Target::Fresh(id) => {
                self.close_messages(out);
                self.used_messages.insert(id.clone());
                self.reasoning.open = Some(id.clone());
                out.push(Event::ReasoningStart {
                    message_id: id.clone(),
                });
                id
            }
        }
    }

    fn close_text(&mut self, out: &mut Vec<Event>) {
        if let Some(message_id) = self.text.open.take() {
            out.push(Event::TextEnd { message_id });
        }
    }

    fn close_reasoning(&mut self, out: &mut Vec<Event>) {
        if let Some(message_id) = self.reasoning.open.take() {
            out.push(Event::ReasoningEnd { message_id });
        }
    }

    /// Closes the open text and reasoning messages: only one thing streams at a time.
    fn close_messages(&mut self, out: &mut Vec<Event>) {
        self.close_text(out);
        self.close_reasoning(out);
    }

    /// Ends the open tool call, if any, giving it `"{}"` arguments if it had none: clients parse the
    /// concatenated arguments as JSON.
    fn end_call(&mut self, out: &mut Vec<Event>) {
        let Some(call) = self.call.take() else { return };
        if !call.had_args {
            out.push(Event::ToolCallArgs {
                call_id: call.id.clone(),
                delta: "{}".to_owned(),
            });
        }
        out.push(Event::ToolCallEnd { call_id: call.id });
    }

    /// Closes everything, replays what was deferred, closes again, finishes the steps, then emits the
    /// terminal event.
    fn terminate(&mut self, terminal: Event, out: &mut Vec<Event>) {
        self.close_messages(out);
        // Each round ends the open call and replays until the next deferred call opens, so it terminates.
        while self.call.is_some() || !self.deferred.is_empty() {
            self.end_call(out);
            self.replay(out);
        }
        self.close_messages(out);
        while let Some(name) = self.steps.pop() {
            out.push(Event::StepFinished { name });
        }
        let terminal = match terminal {
            Event::RunFinished {
                outcome: Outcome::Completed,
                usage,
            } if self.interrupted => Event::RunFinished {
                outcome: Outcome::Interrupted,
                usage,
            },
            terminal => terminal,
        };
        out.push(terminal);
        self.done = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Interrupt, InterruptKind};
    use serde_json::json;

    fn run(events: Vec<Event>) -> Vec<Event> {
        let mut normalizer = Normalizer::new();
        let mut out = Vec::new();
        for event in events {
            normalizer.push(event, &mut out);
        }
        normalizer.finish(Ok(()), &mut out);
        check(&out);
        out
    }

    fn text_start(id: &str) -> Event {
        Event::TextStart {
            message_id: id.into(),
            role: Role::Assistant,
        }
    }
    fn text(id: &str, delta: &str) -> Event {
        Event::TextDelta {
            message_id: id.into(),
            delta: delta.into(),
        }
    }
    fn text_end(id: &str) -> Event {
        Event::TextEnd {
            message_id: id.into(),
        }
    }
    fn reasoning(id: &str, delta: &str) -> Event {
        Event::ReasoningDelta {
            message_id: id.into(),
            delta: delta.into(),
        }
    }
    fn call_start(id: &str, name: &str) -> Event {
        Event::ToolCallStart {
            call_id: id.into(),
            name: name.into(),
            parent_message_id: None,
        }
    }
    fn args(id: &str, delta: &str) -> Event {
        Event::ToolCallArgs {
            call_id: id.into(),
            delta: delta.into(),
        }
    }
    fn call_end(id: &str) -> Event {
        Event::ToolCallEnd { call_id: id.into() }
    }
    fn result(call: &str) -> Event {
        Event::ToolResult {
            call_id: call.into(),
            message_id: String::new(),
            content: "ok".into(),
            is_error: false,
        }
    }
    fn step_start(name: &str) -> Event {
        Event::StepStarted { name: name.into() }
    }
    fn step_end(name: &str) -> Event {
        Event::StepFinished { name: name.into() }
    }
    fn finished() -> Event {
        Event::RunFinished {
            outcome: Outcome::Completed,
            usage: None,
        }
    }
    fn interrupt() -> Event {
        Event::Interrupt(Interrupt {
            id: "int_1".into(),
            kind: InterruptKind::Question {
                text: "go on?".into(),
                options: Vec::new(),
            },
        })
    }
    fn custom(name: &str) -> Event {
        Event::Custom {
            name: name.into(),
            value: json!(null),
        }
    }

    /// The id of a text or reasoning start/delta/end, or of a tool call event.
    fn id_of(event: &Event) -> &str {
        match event {
            Event::TextStart { message_id, .. }
            | Event::TextDelta { message_id, .. }
            | Event::TextEnd { message_id }
            | Event::ReasoningStart { message_id }
            | Event::ReasoningDelta { message_id, .. }
            | Event::ReasoningEnd { message_id } => message_id,
            Event::ToolCallStart { call_id, .. }
            | Event::ToolCallArgs { call_id, .. }
            | Event::ToolCallEnd { call_id }
            | Event::ToolResult { call_id, .. } => call_id,
            _ => "",
        }
    }

    /// Asserts every guarantee of a normalized stream.
    fn check(out: &[Event]) {
        assert!(
            matches!(out.first(), Some(Event::RunStarted)),
            "RunStarted first: {out:#?}"
        );
        assert_eq!(
            out.iter()
                .filter(|e| matches!(e, Event::RunStarted))
                .count(),
            1,
            "{out:#?}"
        );
        assert_eq!(
            out.iter().filter(|e| e.is_terminal()).count(),
            1,
            "one terminal: {out:#?}"
        );
        assert!(
            out.last().is_some_and(Event::is_terminal),
            "terminal last: {out:#?}"
        );

        let mut text: Option<&str> = None;
        let mut reasoning: Option<&str> = None;
        let mut call: Option<(&str, bool)> = None;
        let mut seen_messages = HashSet::new();
        let mut seen_calls = HashSet::new();
        let mut ended_calls = HashSet::new();
        let mut steps: Vec<&str> = Vec::new();
        let mut interrupted = false;
        for (i, event) in out.iter().enumerate() {
            let ctx = || format!("event {i} {event:?} in {out:#?}");
            // Strict serialization: while a call is open, only its args and end.
            if let Some((open, _)) = call {
                let of_call = matches!(
                    event,
                    Event::ToolCallArgs { .. } | Event::ToolCallEnd { .. }
                );
                assert!(
                    of_call && id_of(event) == open,
                    "interleaved with call {open}: {}",
                    ctx()
                );
            }
            match event {
                Event::TextStart { message_id, .. } => {
                    assert!(text.is_none() && reasoning.is_none(), "two open: {}", ctx());
                    assert!(!message_id.is_empty(), "empty id: {}", ctx());
                    assert!(
                        seen_messages.insert(message_id.as_str()),
                        "reopened: {}",
                        ctx()
                    );
                    text = Some(message_id);
                }
                Event::TextDelta { message_id, delta } => {
                    assert_eq!(text, Some(message_id.as_str()), "delta outside: {}", ctx());
                    assert!(!delta.is_empty(), "empty delta: {}", ctx());
                }
                Event::TextEnd { message_id } => {
                    assert_eq!(
                        text.take(),
                        Some(message_id.as_str()),
                        "end outside: {}",
                        ctx()
                    );
                }
                Event::ReasoningStart { message_id } => {
                    assert!(text.is_none() && reasoning.is_none(), "two open: {}", ctx());
                    assert!(!message_id.is_empty(), "empty id: {}", ctx());
                    assert!(
                        seen_messages.insert(message_id.as_str()),
                        "reopened: {}",
                        ctx()
                    );
                    reasoning = Some(message_id);
                }
                Event::ReasoningDelta { message_id, delta } => {
                    assert_eq!(
                        reasoning,
                        Some(message_id.as_str()),
                        "delta outside: {}",
                        ctx()
                    );
                    assert!(!delta.is_empty(), "empty delta: {}", ctx());
                }
                Event::ReasoningEnd { message_id } => {
                    assert_eq!(
                        reasoning.take(),
                        Some(message_id.as_str()),
                        "end outside: {}",
                        ctx()
                    );
                }
                Event::ToolCallStart { call_id, .. } => {
                    assert!(
                        text.is_none() && reasoning.is_none(),
                        "message open: {}",
                        ctx()
                    );
                    assert!(!call_id.is_empty(), "empty id: {}", ctx());
                    assert!(
                        seen_calls.insert(call_id.as_str()),
                        "call restarted: {}",
                        ctx()
                    );
                    call = Some((call_id, false));
                }
                Event::ToolCallArgs { delta, .. } => {
                    assert!(!delta.is_empty(), "empty args: {}", ctx());
                    let Some((_, had_args)) = &mut call else {
                        panic!("args outside a call: {}", ctx())
                    };
                    *had_args = true;
                }
                Event::ToolCallEnd { call_id } => {
                    assert_eq!(
                        call.take(),
                        Some((call_id.as_str(), true)),
                        "end without args: {}",
                        ctx()
                    );
                    ended_calls.insert(call_id.as_str());
                }
                other => {
                    assert!(
                        text.is_none() && reasoning.is_none(),
                        "message left open: {}",
                        ctx()
                    );
                    match other {
                        Event::ToolResult {
                            call_id,
                            message_id,
                            ..
                        } => {
                            assert!(!message_id.is_empty(), "result without id: {}", ctx());
                            let pending = seen_calls.contains(call_id.as_str())
                                && !ended_calls.contains(call_id.as_str());
                            assert!(!pending, "result before its call ended: {}", ctx());
                        }
                        Event::StepStarted { name } => {
                            assert!(!steps.contains(&name.as_str()), "step restarted: {}", ctx());
                            steps.push(name);
                        }
                        Event::StepFinished { name } => {
                            let index = steps.iter().position(|s| s == name);
                            assert!(index.is_some(), "step not open: {}", ctx());
                            steps.retain(|s| s != name);
                        }
                        Event::Interrupt(_) => interrupted = true,
                        Event::RunFinished { outcome, .. } => {
                            assert!(!interrupted || *outcome != Outcome::Completed, "{}", ctx());
                        }
                        _ => {}
                    }
                }
            }
        }
        assert!(steps.is_empty(), "steps left open: {out:#?}");
    }

    /// The events of `out` without the ids minted by the normalizer, for comparing shapes.
    fn kinds(out: &[Event]) -> Vec<String> {
        out.iter()
            .map(|e| {
                let name = format!("{e:?}");
                let kind = name.split([' ', '(']).next().unwrap_or_default().to_owned();
                kind
            })
            .collect()
    }

    #[test]
    fn first_event_is_run_started_even_for_an_error() {
        let mut normalizer = Normalizer::new();
        let mut out = Vec::new();
        normalizer.finish(Err(Error::upstream_timeout("slow")), &mut out);
        assert_eq!(
            out,
            vec![
                Event::RunStarted,
                Event::RunError(Error::upstream_timeout("slow"))
            ]
        );
        assert!(normalizer.is_done());
    }

    #[test]
    fn several_upstream_runs_are_merged() {
        let out = run(vec![
            Event::RunStarted,
            text("m1", "a"),
            Event::RunStarted,
            text("m1", "b"),
            finished(),
        ]);
        assert_eq!(
            out,
            vec![
                Event::RunStarted,
                text_start("m1"),
                text("m1", "a"),
                text("m1", "b"),
                text_end("m1"),
                finished(),
            ]
        );
    }

    #[test]
    fn delta_without_start_opens_a_message() {
        let out = run(vec![text("m1", "hi"), finished()]);
        assert_eq!(
            out,
            vec![
                Event::RunStarted,
                text_start("m1"),
                text("m1", "hi"),
                text_end("m1"),
                finished()
            ]
        );
    }

    #[test]
    fn empty_ids_go_to_the_open_message_or_a_minted_one() {
        let out = run(vec![text("", "a"), text("", "b"), finished()]);
        assert_eq!(
            kinds(&out),
            [
                "RunStarted",
                "TextStart",
                "TextDelta",
                "TextDelta",
                "TextEnd",
                "RunFinished"
            ]
        );
        let id = id_of(&out[1]);
        assert!(id.starts_with("msg_"));
        assert!(out[2..5].iter().all(|e| id_of(e) == id));

        let out = run(vec![
            text_start("m1"),
            text("", "a"),
            text_end(""),
            finished(),
        ]);
        assert_eq!(out[2], text("m1", "a"));
    }

    #[test]
    fn empty_deltas_are_dropped_and_open_nothing() {
        let out = run(vec![
            text("m1", ""),
            reasoning("r1", ""),
            args("", ""),
            finished(),
        ]);
        assert_eq!(out, vec![Event::RunStarted, finished()]);
    }

    #[test]
    fn start_of_the_open_message_is_dropped_and_another_start_closes_it() {
        let out = run(vec![
            text_start("m1"),
            text_start("m1"),
            text("m1", "a"),
            text_start("m2"),
            finished(),
        ]);
        assert_eq!(
            out,
            vec![
                Event::RunStarted,
                text_start("m1"),
                text("m1", "a"),
                text_end("m1"),
                text_start("m2"),
                text_end("m2"),
                finished(),
            ]
        );
    }

    #[test]
    fn end_of_a_message_not_open_is_dropped() {
        let out = run(vec![
            text_end("m1"),
            text("m2", "a"),
            text_end("m1"),
            finished(),
        ]);
        assert_eq!(
            out,
            vec![
                Event::RunStarted,
                text_start("m2"),
                text("m2", "a"),
                text_end("m2"),
                finished()
            ]
        );
    }

    #[test]
    fn closed_message_id_is_not_reopened() {
        let out = run(vec![
            text("m1", "a"),
            text_end("m1"),
            text("m1", "b"),
            text("m1", "c"),
            text_end("m1"),
            text("m1", "d"),
            finished(),
        ]);
        assert_eq!(
            kinds(&out),
            [
                "RunStarted",
                "TextStart",
                "TextDelta",
                "TextEnd",
                "TextStart",
                "TextDelta",
                "TextDelta",
                "TextEnd",
                "TextStart",
                "TextDelta",
                "TextEnd",
                "RunFinished"
            ]
        );
        let (first, second, third) = (id_of(&out[1]), id_of(&out[4]), id_of(&out[8]));
        assert_eq!(first, "m1");
        assert!(second.starts_with("msg_") && second != first);
        assert!(
            out[5..8].iter().all(|e| id_of(e) == second),
            "the reopened segment keeps its new id"
        );
        assert!(third.starts_with("msg_") && third != second);
    }

    #[test]
    fn text_and_reasoning_close_each_other() {
        let out = run(vec![
            reasoning("r1", "think"),
            text("m1", "say"),
            reasoning("r1", "more"),
            finished(),
        ]);
        assert_eq!(
            kinds(&out),
            [
                "RunStarted",
                "ReasoningStart",
                "ReasoningDelta",
                "ReasoningEnd",
                "TextStart",
                "TextDelta",
                "TextEnd",
                "ReasoningStart",
                "ReasoningDelta",
                "ReasoningEnd",
                "RunFinished"
            ]
        );
        assert!(
            id_of(&out[7]).starts_with("reasoning_"),
            "r1 was closed: a new id"
        );
    }

    #[test]
    fn one_id_never_names_text_and_reasoning() {
        let out = run(vec![
            reasoning("m1", "think"),
            text("m1", "say"),
            finished(),
        ]);
        assert_eq!(id_of(&out[1]), "m1");
        assert!(
            matches!(&out[4], Event::TextStart { message_id, .. } if message_id.starts_with("msg_"))
        );
    }

    #[test]
    fn text_left_open_is_closed_before_tool_call() {
        let out = run(vec![
            text("m1", "let me look"),
            call_start("c1", "search"),
            args("c1", "{}"),
            call_end("c1"),
        ]);
        assert_eq!(
            out,
            vec![
                Event::RunStarted,
                text_start("m1"),
                text("m1", "let me look"),
                text_end("m1"),
                Event::ToolCallStart {
                    call_id: "c1".into(),
                    name: "search".into(),
                    parent_message_id: Some("m1".into()),
                },
                args("c1", "{}"),
                call_end("c1"),
                Event::RunError(Error::upstream_eof()),
            ]
        );
    }

    #[test]
    fn other_events_close_open_text() {
        let out = run(vec![
            text("m1", "a"),
            step_start("s"),
            text("m1", "b"),
            custom("x"),
            finished(),
        ]);
        assert_eq!(
            kinds(&out),
            [
                "RunStarted",
                "TextStart",
                "TextDelta",
                "TextEnd",
                "StepStarted",
                "TextStart",
                "TextDelta",
                "TextEnd",
                "Custom",
                "StepFinished",
                "RunFinished"
            ]
        );
    }

    #[test]
    fn parallel_tool_calls_are_serialized() {
        let out = run(vec![
            call_start("c1", "a"),
            call_start("c2", "b"),
            args("c1", "{\"x\":"),
            args("c2", "{\"y\":2}"),
            text("m1", "meanwhile"),
            args("c1", "1}"),
            call_end("c1"),
            call_end("c2"),
            finished(),
        ]);
        assert_eq!(
            out,
            vec![
                Event::RunStarted,
                call_start("c1", "a"),
                args("c1", "{\"x\":"),
                args("c1", "1}"),
                call_end("c1"),
                call_start("c2", "b"),
                args("c2", "{\"y\":2}"),
                call_end("c2"),
                text_start("m1"),
                text("m1", "meanwhile"),
                text_end("m1"),
                finished(),
            ]
        );
    }

    #[test]
    fn deferred_events_keep_their_order_across_several_calls() {
        // c2 opens from the queue while c3 waits behind it; c3's end arrives before c2's.
        let out = run(vec![
            call_start("c1", "a"),
            call_start("c2", "b"),
            custom("x"),
            call_start("c3", "c"),
            call_end("c1"),
            custom("y"),
            call_end("c3"),
            call_end("c2"),
            finished(),
        ]);
        let names: Vec<String> = out
            .iter()
            .map(|e| match e {
                Event::ToolCallStart { call_id, .. } => format!("start {call_id}"),
                Event::ToolCallEnd { call_id } => format!("end {call_id}"),
                Event::Custom { name, .. } => name.clone(),
                _ => String::new(),
            })
            .filter(|s| !s.is_empty())
            .collect();
        assert_eq!(
            names,
            ["start c1", "end c1", "start c2", "end c2", "x", "start c3", "end c3", "y"]
        );
    }

    #[test]
    fn args_with_empty_id_belong_to_the_last_started_call() {
        let out = run(vec![
            call_start("", "a"),
            args("", "{}"),
            call_end(""),
            finished(),
        ]);
        assert_eq!(
            kinds(&out),
            [
                "RunStarted",
                "ToolCallStart",
                "ToolCallArgs",
                "ToolCallEnd",
                "RunFinished"
            ]
        );
        let id = id_of(&out[1]);
        assert!(id.starts_with("call_"));
        assert!(out[2..4].iter().all(|e| id_of(e) == id));
    }

    #[test]
    fn args_of_a_call_never_started_are_dropped() {
        let out = run(vec![
            args("c9", "{}"),
            call_end("c9"),
            args("", "{}"),
            finished(),
        ]);
        assert_eq!(out, vec![Event::RunStarted, finished()]);
    }

    #[test]
    fn second_start_of_a_call_is_dropped() {
        let out = run(vec![
            call_start("c1", "a"),
            call_end("c1"),
            call_start("c1", "a"),
            args("c1", "{}"),
            finished(),
        ]);
        assert_eq!(
            kinds(&out),
            [
                "RunStarted",
                "ToolCallStart",
                "ToolCallArgs",
                "ToolCallEnd",
                "RunFinished"
            ]
        );
    }

    #[test]
    fn call_without_args_gets_empty_object() {
        let out = run(vec![
            call_start("c1", "a"),
            args("c1", ""),
            call_end("c1"),
            finished(),
        ]);
        assert_eq!(
            out,
            vec![
                Event::RunStarted,
                call_start("c1", "a"),
                args("c1", "{}"),
                call_end("c1"),
                finished()
            ]
        );
    }

    #[test]
    fn tool_result_ends_its_open_call() {
        let out = run(vec![
            call_start("c1", "a"),
            args("c1", "{}"),
            result("c1"),
            finished(),
        ]);
        assert_eq!(
            kinds(&out),
            [
                "RunStarted",
                "ToolCallStart",
                "ToolCallArgs",
                "ToolCallEnd",
                "ToolResult",
                "RunFinished"
            ]
        );
        assert!(
            matches!(&out[4], Event::ToolResult { message_id, .. } if message_id.starts_with("msg_"))
        );
    }

    #[test]
    fn tool_result_of_a_deferred_call_waits_for_it() {
        let out = run(vec![
            call_start("c1", "a"),
            call_start("c2", "b"),
            result("c2"),
            call_end("c1"),
            finished(),
        ]);
        assert_eq!(
            kinds(&out),
            [
                "RunStarted",
                "ToolCallStart",
                "ToolCallArgs",
                "ToolCallEnd",
                "ToolCallStart",
                "ToolCallArgs",
                "ToolCallEnd",
                "ToolResult",
                "RunFinished"
            ]
        );
        assert_eq!(id_of(&out[7]), "c2");
    }

    #[test]
    fn open_steps_close_before_finish() {
        let out = run(vec![
            step_start("a"),
            step_start("b"),
            step_start("a"),
            step_end("c"),
            finished(),
        ]);
        assert_eq!(
            out,
            vec![
                Event::RunStarted,
                step_start("a"),
                step_start("b"),
                step_end("b"),
                step_end("a"),
                finished()
            ]
        );
    }

    #[test]
    fn everything_open_is_closed_before_the_terminal() {
        let out = run(vec![
            step_start("s"),
            call_start("c1", "a"),
            call_start("c2", "b"),
            text("m1", "queued"),
            Event::RunError(Error::upstream_agent("boom", "it broke")),
        ]);
        assert_eq!(
            kinds(&out),
            [
                "RunStarted",
                "StepStarted",
                "ToolCallStart",
                "ToolCallArgs",
                "ToolCallEnd",
                "ToolCallStart",
                "ToolCallArgs",
                "ToolCallEnd",
                "TextStart",
                "TextDelta",
                "TextEnd",
                "StepFinished",
                "RunError"
            ]
        );
    }

    #[test]
    fn events_after_terminal_are_dropped() {
        let mut normalizer = Normalizer::new();
        let mut out = Vec::new();
        normalizer.push(finished(), &mut out);
        assert!(normalizer.is_done());
        normalizer.push(text("m1", "late"), &mut out);
        normalizer.push(Event::RunStarted, &mut out);
        normalizer.finish(Err(Error::internal("late")), &mut out);
        assert_eq!(out, vec![Event::RunStarted, finished()]);
    }

    #[test]
    fn second_run_error_is_dropped() {
        let first = Error::upstream_agent("AGENT_ERROR", "boom requested");
        let second = Error::upstream_agent(
            "INTERNAL_ERROR",
            "Failed to process agent request: boom requested",
        );
        let out = run(vec![
            Event::RunError(first.clone()),
            Event::RunError(second),
        ]);
        assert_eq!(out, vec![Event::RunStarted, Event::RunError(first)]);
    }

    #[test]
    fn eof_without_terminal_becomes_upstream_eof_error() {
        let out = run(vec![text("m1", "cut")]);
        assert_eq!(out.last(), Some(&Event::RunError(Error::upstream_eof())));
        assert_eq!(out[out.len() - 2], text_end("m1"));
    }

    #[test]
    fn interrupt_makes_a_completed_run_interrupted() {
        let out = run(vec![text("m1", "question"), interrupt(), finished()]);
        assert_eq!(
            kinds(&out),
            [
                "RunStarted",
                "TextStart",
                "TextDelta",
                "TextEnd",
                "Interrupt",
                "RunFinished"
            ]
        );
        assert_eq!(
            out[5],
            Event::RunFinished {
                outcome: Outcome::Interrupted,
                usage: None
            }
        );

        let cancelled = Event::RunFinished {
            outcome: Outcome::Cancelled,
            usage: None,
        };
        let out = run(vec![interrupt(), cancelled.clone()]);
        assert_eq!(out.last(), Some(&cancelled));
    }

    #[test]
    fn explicit_parent_message_id_is_kept() {
        let start = Event::ToolCallStart {
            call_id: "c1".into(),
            name: "a".into(),
            parent_message_id: Some("p".into()),
        };
        let out = run(vec![text("m1", "a"), start.clone(), finished()]);
        assert_eq!(out[4], start);
    }

    /// A small deterministic pseudo-random generator (Knuth's MMIX LCG).
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len() as u64) as usize]
        }
    }

    /// One loose event; `n` is its index, which makes its text unique so that the order can be checked.
    fn random_event(rng: &mut Lcg, n: u64) -> Event {
        const MESSAGES: &[&str] = &["", "m1", "m2", "m3"];
        const CALLS: &[&str] = &["", "c1", "c2", "c3"];
        const STEPS: &[&str] = &["s1", "s2"];
        let delta = if rng.below(4) == 0 {
            String::new()
        } else {
            n.to_string()
        };
        match rng.below(30) {
            0 => Event::RunStarted,
            1 => finished(),
            2 => Event::RunError(Error::upstream_agent("E", "boom")),
            3..=5 => Event::TextStart {
                message_id: rng.pick(MESSAGES).into(),
                role: Role::Assistant,
            },
            6..=9 => text(rng.pick(MESSAGES), &delta),
            10 | 11 => text_end(rng.pick(MESSAGES)),
            12 => Event::ReasoningStart {
                message_id: rng.pick(MESSAGES).into(),
            },
            13 | 14 => reasoning(rng.pick(MESSAGES), &delta),
            15 => Event::ReasoningEnd {
                message_id: rng.pick(MESSAGES).into(),
            },
            16 | 17 => call_start(rng.pick(CALLS), "tool"),
            18..=20 => args(rng.pick(CALLS), &delta),
            21 | 22 => call_end(rng.pick(CALLS)),
            23 => result(rng.pick(CALLS)),
            24 => step_start(rng.pick(STEPS)),
            25 => step_end(rng.pick(STEPS)),
            26 => interrupt(),
            27 => Event::StateDelta(json!([])),
            28 => Event::Usage(Default::default()),
            _ => custom(&delta),
        }
    }

    /// The non-empty text and reasoning deltas and the custom events, in order: the content the normalizer
    /// must neither lose nor reorder (deferring keeps the order of everything that is not a tool call).
    fn content(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::TextDelta { delta, .. } => Some(format!("t{delta}")),
                Event::ReasoningDelta { delta, .. } => Some(format!("r{delta}")),
                Event::Custom { name, .. } => Some(format!("c{name}")),
                _ => None,
            })
            .filter(|d| d != "t" && d != "r")
            .collect()
    }

    /// The args the upstream sent for each named call after its first start, resolving an empty call id to
    /// the call started last (calls started with an empty id get minted ids and are left out).
    fn upstream_call_args(events: &[Event]) -> HashMap<String, String> {
        let mut args: HashMap<String, String> = HashMap::new();
        let mut last: Option<&str> = None;
        for event in events {
            match event {
                Event::ToolCallStart { call_id, .. } if call_id.is_empty() => last = None,
                Event::ToolCallStart { call_id, .. } => {
                    last = Some(call_id);
                    args.entry(call_id.clone()).or_default();
                }
                Event::ToolCallArgs { call_id, delta } => {
                    let call_id = if call_id.is_empty() {
                        last
                    } else {
                        Some(call_id.as_str())
                    };
                    if let Some(sent) = call_id.and_then(|id| args.get_mut(id)) {
                        sent.push_str(delta);
                    }
                }
                _ => {}
            }
        }
        args
    }

    /// The args of each call in the output, in order.
    fn call_args(events: &[Event]) -> HashMap<&str, String> {
        let mut args: HashMap<&str, String> = HashMap::new();
        for event in events {
            if let Event::ToolCallArgs { call_id, delta } = event {
                args.entry(call_id.as_str()).or_default().push_str(delta);
            }
        }
        args
    }

    #[test]
    fn random_loose_streams_come_out_well_formed() {
        let mut rng = Lcg(42);
        for _ in 0..3000 {
            let len = rng.below(40);
            let events: Vec<Event> = (0..len).map(|n| random_event(&mut rng, n)).collect();
            // The content pushed before the first terminal event must all come out.
            let before_terminal = events
                .iter()
                .position(Event::is_terminal)
                .unwrap_or(events.len());
            let expected = content(&events[..before_terminal]);
            let expected_args = upstream_call_args(&events[..before_terminal]);

            let mut normalizer = Normalizer::new();
            let mut out = Vec::new();
            for event in events {
                normalizer.push(event, &mut out);
            }
            let result = if rng.below(2) == 0 {
                Ok(())
            } else {
                Err(Error::upstream_timeout("slow"))
            };
            normalizer.finish(result, &mut out);
            assert!(normalizer.is_done());
            check(&out);
            assert_eq!(content(&out), expected, "content lost in {out:#?}");
            // A call's args come out in order, cut only where the call ended ("{}" when none came).
            for (call_id, got) in call_args(&out) {
                if let Some(sent) = expected_args.get(call_id) {
                    assert!(
                        got == "{}" || sent.starts_with(&got),
                        "args of {call_id} lost: {out:#?}"
                    );
                }
            }
        }
    }
}
