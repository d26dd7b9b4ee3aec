//! AG-UI for the tests: run requests, what a scripted AG-UI upstream sends, reading a run's events, and
//! the check every stream the proxy serves must pass: the conservative output profile of
//! `specs/ag-ui.md` §4.2 (what @ag-ui/client 0.0.36, 0.0.59 and 1.0.0 all accept).

use std::collections::HashSet;

use serde_json::{json, Value};

use super::{post_json, Reply, SseStream};

/// The assistant message an AG-UI client keeps for a call it received: under the call's parent message, or
/// under the call's own id when it has none (what `@ag-ui/client` does).
pub fn kept_call(events: &[Value], call_id: &str) -> Value {
    let start = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START" && e["toolCallId"] == call_id)
        .unwrap_or_else(|| panic!("a TOOL_CALL_START of {call_id}: {events:#?}"));
    let message_id = start["parentMessageId"].as_str().unwrap_or(call_id);
    let name = start["toolCallName"].as_str().expect("toolCallName");
    let arguments: String = events
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_ARGS" && e["toolCallId"] == call_id)
        .map(|e| e["delta"].as_str().unwrap_or(""))
        .collect();
    assistant_call(message_id, call_id, name, &arguments)
}

/// The assistant text message an AG-UI client keeps from a run's text (under its first message's id).
pub fn kept_text(events: &[Value]) -> Value {
    let start = all(events, "TEXT_MESSAGE_START")[0];
    json!({"id": start["messageId"], "role": "assistant", "content": text_of(events)})
}

/// A `RunAgentInput` with no tools and no context.
pub fn input(thread_id: &str, run_id: &str, messages: Value) -> Value {
    json!({"threadId": thread_id, "runId": run_id, "messages": messages, "tools": [], "context": []})
}

pub fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": text})
}

/// A frontend tool the client offers.
pub fn tool(name: &str) -> Value {
    json!({"name": name, "description": format!("{name} (client side)"),
           "parameters": {"type": "object", "properties": {}}})
}

/// The assistant message a client keeps for a call it received.
pub fn assistant_call(id: &str, call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": id, "role": "assistant", "toolCalls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    ]})
}

/// The tool message that answers a call.
pub fn tool_result(id: &str, call_id: &str, content: &str) -> Value {
    json!({"id": id, "role": "tool", "toolCallId": call_id, "content": content})
}

// --- What a scripted AG-UI upstream sends (its own ids; the proxy answers with the client's) ------------

pub fn started() -> Value {
    json!({"type": "RUN_STARTED", "threadId": "upstream-thread", "runId": "upstream-run"})
}

pub fn finished() -> Value {
    json!({"type": "RUN_FINISHED", "threadId": "upstream-thread", "runId": "upstream-run"})
}

/// One assistant text message: start, a content event per delta, end.
pub fn text(message_id: &str, deltas: &[&str]) -> Vec<Value> {
    let mut events =
        vec![json!({"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"})];
    events.extend(deltas.iter().map(
        |delta| json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": delta}),
    ));
    events.push(json!({"type": "TEXT_MESSAGE_END", "messageId": message_id}));
    events
}

/// A whole scripted run that only answers in text: `RUN_STARTED`, the message [`text`], `RUN_FINISHED`.
pub fn text_run(message_id: &str, deltas: &[&str]) -> Reply {
    Reply::sse()
        .event(started())
        .events(text(message_id, deltas))
        .event(finished())
}

/// One tool call: start, an args event per fragment, end.
pub fn call(call_id: &str, name: &str, args: &[&str]) -> Vec<Value> {
    let mut events =
        vec![json!({"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": name})];
    events.extend(
        args.iter()
            .map(|delta| json!({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": delta})),
    );
    events.push(json!({"type": "TOOL_CALL_END", "toolCallId": call_id}));
    events
}

// --- Running and reading ---------------------------------------------------------------------------------

/// What a route may send beyond the conservative profile (per-route switches, `specs/ag-ui.md` §4.2.10).
#[derive(Clone, Copy, Debug, Default)]
pub struct Profile {
    /// `REASONING_*` events (`agui_reasoning = true`).
    pub reasoning: bool,
    /// `RUN_FINISHED.outcome.interrupt` (`agui_interrupts = "outcome"`).
    pub interrupts: bool,
}

impl Profile {
    pub const CONSERVATIVE: Profile = Profile {
        reasoning: false,
        interrupts: false,
    };
}

/// Posts a run and returns its stream once the head arrived, checked: `200` and the SSE headers.
pub async fn start(url: &str, input: &Value) -> SseStream {
    let response = post_json(url, input).await;
    assert_eq!(response.status, 200, "a valid run is answered 200");
    assert_eq!(response.header("content-type"), "text/event-stream");
    assert_eq!(response.header("cache-control"), "no-cache");
    assert_eq!(response.header("x-accel-buffering"), "no");
    response.sse()
}

/// Runs `input` to the end and returns its events, which must pass the conservative profile.
pub async fn run(url: &str, input: &Value) -> Vec<Value> {
    run_with(url, input, Profile::CONSERVATIVE).await
}

/// Runs `input` to the end and returns its events, which must pass `profile`.
pub async fn run_with(url: &str, input: &Value, profile: Profile) -> Vec<Value> {
    let mut stream = start(url, input).await;
    let events = stream.rest().await;
    check(&stream.raw, &events, input, profile);
    events
}

/// Runs `input` against an agent held silent until `release`: `RUN_STARTED`, and nothing else, must arrive
/// before the agent is let go. Returns every event of the run, which must pass the conservative profile.
pub async fn run_starting_before(url: &str, input: &Value, release: impl FnOnce()) -> Vec<Value> {
    let mut stream = start(url, input).await;
    let mut events = stream.until("RUN_STARTED").await;
    assert_eq!(types(&events), ["RUN_STARTED"]);
    release();
    events.extend(stream.rest().await);
    check(&stream.raw, &events, input, Profile::CONSERVATIVE);
    events
}

/// The `type` of every event.
pub fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect()
}

/// The events of one type.
pub fn all<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// The only event of a type; fails unless there is exactly one.
pub fn only<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    let found = all(events, kind);
    assert_eq!(found.len(), 1, "expected exactly one {kind} in {events:#?}");
    found[0]
}

/// The text deltas, in order.
pub fn deltas(events: &[Value]) -> Vec<&str> {
    all(events, "TEXT_MESSAGE_CONTENT")
        .into_iter()
        .map(|e| e["delta"].as_str().unwrap_or(""))
        .collect()
}

/// All the text the client would show, concatenated.
pub fn text_of(events: &[Value]) -> String {
    deltas(events).concat()
}

/// Every tool call as `(id, name, parsed arguments)`, in order.
pub fn calls(events: &[Value]) -> Vec<(String, String, Value)> {
    all(events, "TOOL_CALL_START")
        .into_iter()
        .map(|start| {
            let id = start["toolCallId"].as_str().unwrap_or("").to_owned();
            let args: String = events
                .iter()
                .filter(|e| e["type"] == "TOOL_CALL_ARGS" && e["toolCallId"] == id.as_str())
                .map(|e| e["delta"].as_str().unwrap_or(""))
                .collect();
            let args = serde_json::from_str(&args).unwrap_or(Value::String(args));
            let name = start["toolCallName"].as_str().unwrap_or("").to_owned();
            (id, name, args)
        })
        .collect()
}

/// The run's error: the last event, which must be the only `RUN_ERROR` (and nothing follows it).
pub fn run_error(events: &[Value]) -> &Value {
    let error = only(events, "RUN_ERROR");
    assert_eq!(
        events.last(),
        Some(error),
        "RUN_ERROR is the last event: {events:#?}"
    );
    error
}

// --- The conservative profile ----------------------------------------------------------------------------

const TYPES: &[&str] = &[
    "RUN_STARTED",
    "RUN_FINISHED",
    "RUN_ERROR",
    "STEP_STARTED",
    "STEP_FINISHED",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_END",
    "TOOL_CALL_START",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_END",
    "TOOL_CALL_RESULT",
    "STATE_SNAPSHOT",
    "STATE_DELTA",
    "MESSAGES_SNAPSHOT",
    "RAW",
    "CUSTOM",
];

const REASONING_TYPES: &[&str] = &[
    "REASONING_START",
    "REASONING_MESSAGE_START",
    "REASONING_MESSAGE_CONTENT",
    "REASONING_MESSAGE_END",
    "REASONING_END",
];

/// Fields whose value is the agent's own JSON (state, patches, custom values): they may hold `null`.
const OPAQUE: &[&str] = &["snapshot", "delta", "value", "event", "messages"];

/// Checks a whole response against the profile: framing (`raw`) and events. `input` is the run request.
pub fn check(raw: &[u8], events: &[Value], input: &Value, profile: Profile) {
    check_framing(raw);
    let thread_id = input["threadId"].as_str().expect("input threadId");
    let run_id = input["runId"].as_str().expect("input runId");
    let mut state = Sequence::default();
    for (i, event) in events.iter().enumerate() {
        if let Err(problem) = state.check(i, event, events.len(), profile, (thread_id, run_id)) {
            panic!("event {i} breaks the AG-UI conservative profile: {problem}\n{event}\nin {events:#?}");
        }
    }
    assert!(
        events
            .last()
            .is_some_and(|e| e["type"] == "RUN_FINISHED" || e["type"] == "RUN_ERROR"),
        "the stream ends with RUN_FINISHED or RUN_ERROR: {events:#?}"
    );
}

/// LF only, each frame one `data: ` line of compact JSON, or a comment.
fn check_framing(raw: &[u8]) {
    let text = std::str::from_utf8(raw).expect("the stream is UTF-8");
    assert!(!text.contains('\r'), "LF framing only (no CR): {text:?}");
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "the stream ends with a whole frame: {text:?}"
    );
    for frame in text.split_terminator("\n\n") {
        if frame.starts_with(':') {
            assert!(
                frame.split('\n').all(|l| l.starts_with(':')),
                "a comment frame: {frame:?}"
            );
            continue;
        }
        let data = frame
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("a frame is `data: ` with the space: {frame:?}"));
        assert!(!data.contains('\n'), "one data line per frame: {frame:?}");
        assert!(!data.starts_with(' '), "compact JSON: {frame:?}");
    }
}

#[derive(Default)]
struct Sequence {
    started: bool,
    ended: bool,
    text: Option<String>,
    /// The open reasoning message and whether its message (inside the span) is open.
    reasoning: Option<(String, bool)>,
    /// The open tool call and its arguments so far.
    call: Option<(String, String)>,
    message_ids: HashSet<String>,
    call_ids: HashSet<String>,
    ended_calls: HashSet<String>,
    steps: Vec<String>,
}

impl Sequence {
    fn check(
        &mut self,
        index: usize,
        event: &Value,
        count: usize,
        profile: Profile,
        (thread_id, run_id): (&str, &str),
    ) -> Result<(), String> {
        let object = event.as_object().ok_or("not an object")?;
        no_nulls(event, "")?;
        if let Some(timestamp) = object.get("timestamp") {
            timestamp
                .as_u64()
                .ok_or("timestamp is not integer milliseconds")?;
        }
        let kind = str_field(event, "type")?;
        let known = TYPES.contains(&kind) || (profile.reasoning && REASONING_TYPES.contains(&kind));
        if !known {
            return Err(format!("event type {kind} is not in the profile"));
        }
        if self.ended {
            return Err("an event after the terminal event".into());
        }
        if index == 0 {
            if kind != "RUN_STARTED" {
                return Err("the first event must be RUN_STARTED".into());
            }
        } else if kind == "RUN_STARTED" {
            return Err("a second RUN_STARTED (one run per response)".into());
        }
        // While a text message, a reasoning message or a tool call is open, only its own events may come.
        if let Some(open) = &self.text {
            let own = matches!(kind, "TEXT_MESSAGE_CONTENT" | "TEXT_MESSAGE_END")
                && str_field(event, "messageId")? == open;
            if !own {
                return Err(format!("text message {open} is still open"));
            }
        }
        if let Some((open, _)) = &self.reasoning {
            let own = kind.starts_with("REASONING_") && str_field(event, "messageId")? == open;
            if !own {
                return Err(format!("reasoning {open} is still open"));
            }
        }
        if let Some((open, _)) = &self.call {
            let own = matches!(kind, "TOOL_CALL_ARGS" | "TOOL_CALL_END")
                && str_field(event, "toolCallId")? == open;
            if !own {
                return Err(format!("tool call {open} is still open"));
            }
        }
        match kind {
            "RUN_STARTED" | "RUN_FINISHED" => {
                if str_field(event, "threadId")? != thread_id
                    || str_field(event, "runId")? != run_id
                {
                    return Err("threadId/runId must echo the request".into());
                }
                if kind == "RUN_STARTED" {
                    self.started = true;
                } else {
                    if !self.steps.is_empty() {
                        return Err(format!("steps still open: {:?}", self.steps));
                    }
                    match event.get("outcome") {
                        None => {}
                        Some(outcome) if profile.interrupts && outcome["type"] == "interrupt" => {
                            let interrupts =
                                outcome["interrupts"].as_array().ok_or("interrupts")?;
                            if interrupts.is_empty() {
                                return Err("an interrupt outcome needs an interrupt".into());
                            }
                        }
                        Some(outcome) => {
                            return Err(format!("outcome {outcome} is not in the profile"))
                        }
                    }
                    self.terminal(index, count)?;
                }
            }
            "RUN_ERROR" => {
                str_field(event, "message")?;
                if event.get("code").is_some() {
                    str_field(event, "code")?;
                }
                self.terminal(index, count)?;
            }
            "STEP_STARTED" => {
                let name = str_field(event, "stepName")?.to_owned();
                if self.steps.contains(&name) {
                    return Err(format!("step {name} started twice"));
                }
                self.steps.push(name);
            }
            "STEP_FINISHED" => {
                let name = str_field(event, "stepName")?;
                let at = self
                    .steps
                    .iter()
                    .position(|s| s == name)
                    .ok_or("finish of a step not started")?;
                self.steps.remove(at);
            }
            "TEXT_MESSAGE_START" => {
                let id = self.new_message(event)?;
                if let Some(role) = event.get("role") {
                    if !matches!(
                        role.as_str(),
                        Some("assistant" | "user" | "system" | "developer")
                    ) {
                        return Err(format!("role {role} is not allowed"));
                    }
                }
                self.text = Some(id);
            }
            "TEXT_MESSAGE_CONTENT" => {
                if self.text.is_none() {
                    return Err("content without an open text message".into());
                }
                if str_field(event, "delta")?.is_empty() {
                    return Err("an empty delta".into());
                }
            }
            "TEXT_MESSAGE_END" => {
                self.text.take().ok_or("end without an open text message")?;
            }
            "REASONING_START" => {
                let id = self.new_message(event)?;
                self.reasoning = Some((id, false));
            }
            "REASONING_MESSAGE_START" => {
                match &mut self.reasoning {
                    Some((_, open @ false)) => *open = true,
                    _ => return Err("a reasoning message outside its span, or twice".into()),
                }
                if event["role"] != "reasoning" {
                    return Err("a reasoning message has role \"reasoning\"".into());
                }
            }
            "REASONING_MESSAGE_CONTENT" => {
                if !matches!(self.reasoning, Some((_, true))) {
                    return Err("reasoning content without an open reasoning message".into());
                }
                if str_field(event, "delta")?.is_empty() {
                    return Err("an empty delta".into());
                }
            }
            "REASONING_MESSAGE_END" => match &mut self.reasoning {
                Some((_, open @ true)) => *open = false,
                _ => return Err("reasoning message end without a start".into()),
            },
            "REASONING_END" => {
                self.reasoning
                    .take()
                    .filter(|(_, message_open)| !message_open)
                    .ok_or("reasoning end without a span, or while its message is open")?;
            }
            "TOOL_CALL_START" => {
                let id = str_field(event, "toolCallId")?.to_owned();
                if id.is_empty() || !self.call_ids.insert(id.clone()) {
                    return Err(format!("tool call id {id:?} is empty or reused"));
                }
                if str_field(event, "toolCallName")?.is_empty() {
                    return Err("a tool call without a name".into());
                }
                if event.get("parentMessageId").is_some()
                    && str_field(event, "parentMessageId")?.is_empty()
                {
                    return Err("an empty parentMessageId".into());
                }
                self.call = Some((id, String::new()));
            }
            "TOOL_CALL_ARGS" => {
                let delta = str_field(event, "delta")?;
                match &mut self.call {
                    Some((_, args)) => args.push_str(delta),
                    None => return Err("args without an open tool call".into()),
                }
            }
            "TOOL_CALL_END" => {
                let (id, args) = self.call.take().ok_or("end without an open tool call")?;
                serde_json::from_str::<Value>(&args)
                    .map_err(|e| format!("the arguments of {id} are not JSON ({e}): {args:?}"))?;
                self.ended_calls.insert(id);
            }
            "TOOL_CALL_RESULT" => {
                let call = str_field(event, "toolCallId")?;
                if !self.ended_calls.contains(call) {
                    return Err(format!("a result for {call}, which has not ended"));
                }
                str_field(event, "messageId")?;
                str_field(event, "content").map_err(|_| "result content must be a string")?;
            }
            "STATE_SNAPSHOT" => {
                event
                    .get("snapshot")
                    .ok_or("a snapshot without `snapshot`")?;
            }
            "STATE_DELTA" => {
                event["delta"]
                    .as_array()
                    .ok_or("a state delta is a JSON Patch array")?;
            }
            "MESSAGES_SNAPSHOT" => {
                event["messages"]
                    .as_array()
                    .ok_or("messages must be an array")?;
            }
            "CUSTOM" => {
                str_field(event, "name")?;
                event.get("value").ok_or("a custom event without `value`")?;
            }
            "RAW" => {
                event.get("event").ok_or("a raw event without `event`")?;
            }
            _ => {}
        }
        Ok(())
    }

    fn new_message(&mut self, event: &Value) -> Result<String, String> {
        let id = str_field(event, "messageId")?.to_owned();
        if id.is_empty() || !self.message_ids.insert(id.clone()) {
            return Err(format!("message id {id:?} is empty or reopened"));
        }
        Ok(id)
    }

    fn terminal(&mut self, index: usize, count: usize) -> Result<(), String> {
        if !self.started {
            return Err("a terminal event before RUN_STARTED".into());
        }
        if self.text.is_some() || self.reasoning.is_some() || self.call.is_some() {
            return Err("the run ends with a message or tool call open".into());
        }
        self.ended = true;
        if index + 1 != count {
            return Err("events follow the terminal event".into());
        }
        Ok(())
    }
}

fn str_field<'a>(event: &'a Value, field: &str) -> Result<&'a str, String> {
    event
        .get(field)
        .ok_or_else(|| format!("missing `{field}`"))?
        .as_str()
        .ok_or_else(|| format!("`{field}` is not a string"))
}

/// No `null` anywhere, except inside the agent's own JSON payloads.
fn no_nulls(value: &Value, path: &str) -> Result<(), String> {
    match value {
        Value::Null => Err(format!("null at {path}")),
        Value::Object(map) => map
            .iter()
            .filter(|(key, _)| !(path.is_empty() && OPAQUE.contains(&key.as_str())))
            .try_for_each(|(key, v)| no_nulls(v, &format!("{path}/{key}"))),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| no_nulls(v, &format!("{path}/{i}"))),
        _ => Ok(()),
    }
}

/// An AG-UI upstream that streams "Hel", waits for [`super::Upstream::release`], then streams "lo" and
/// finishes.
pub async fn held_agent() -> super::Upstream {
    Reply::sse()
        .event(started())
        .events(text("m1", &["Hel"]))
        .gate()
        .events(text("m2", &["lo"]))
        .event(finished())
        .serve()
        .await
}
