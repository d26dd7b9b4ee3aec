//! AG-UI in the matrix: its client (the inbound face's peer) and its scripted agent (the outbound face's
//! peer).
//!
//! The client is stateless the AG-UI way: every run POSTs a `RunAgentInput` with the conversation's
//! `threadId`, a new `runId`, the WHOLE history (its user messages, the replies and tool calls as they arrived,
//! tool results) and its tool `get_time`. A call left without a result when the run ends is a pause, answered
//! next run by a `tool` message, or dismissed by a run whose only news is a `resume` entry with status
//! `cancelled` (AG-UI 1.0). Every stream it reads must pass the conservative profile
//! (`support::ag_ui::check`), as the strict AG-UI clients require.
//!
//! The agent is an AG-UI server: it answers from the request (the whole history, the offered tools, the
//! `resume` of its interrupts) and pauses natively, with `RUN_FINISHED.outcome.interrupt`.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Value};

use super::peers::*;
use crate::support::ag_ui::{self, call, finished, started, text, user, Profile};
use crate::support::{post_json, Reply, SseStream, Upstream};

/// The matrix's client answers pauses as calls of the route's pause tools without declaring them (as
/// frontends before outcome interrupts did): its routes pin the tool mode. Outcome pauses are covered by
/// tests/it/ag_ui_codec.rs and the interop tests with the real clients.
pub const INBOUND_TRANSLATE: &[(&str, &str)] = &[("agui_interrupts", "tool")];
pub const OUTBOUND_TRANSLATE: &[(&str, &str)] = &[];
pub const UPSTREAM_HEADERS: &[(&str, &str)] = &[];
/// The code of the agent's `RUN_ERROR` in [`Script::FailMidStream`].
pub const FAILURE_CODE: &str = "AGENT_ERROR";

/// The route's pause tools: `approval_tool` and `question_tool` at their defaults (`INBOUND_TRANSLATE` sets
/// neither).
const APPROVAL_PAUSE_TOOL: &str = "confirmAction";
const QUESTION_PAUSE_TOOL: &str = "ask_user";

// --- Client ----------------------------------------------------------------------------------------------

/// Gives each client a thread of its own.
static THREADS: AtomicUsize = AtomicUsize::new(0);

pub struct Client {
    url: String,
    thread_id: String,
    /// Runs started, for new `runId`s and message ids.
    runs: usize,
    /// The whole conversation, sent with every run.
    history: Vec<Value>,
    /// The call the last run paused on, answered by the next input.
    pending_call: Option<String>,
}

impl Client {
    /// The same conversation, now through the route served at `url` (another replica, a restarted proxy).
    pub fn retarget(&mut self, url: String) {
        self.url = url;
    }

    pub fn new(url: String) -> Client {
        let thread = THREADS.fetch_add(1, Ordering::Relaxed);
        Client {
            url,
            thread_id: format!("matrix-thread-{thread}"),
            runs: 0,
            history: Vec::new(),
            pending_call: None,
        }
    }

    pub async fn start(&mut self, input: Input) -> Run<'_> {
        self.runs += 1;
        let request = match input {
            // AG-UI 1.0 dismisses an interrupt with a `resume` entry, the run's only news.
            Input::Cancel => {
                let call_id = self
                    .pending_call
                    .take()
                    .expect("a cancel needs a pending call to dismiss");
                let mut request = self.request();
                request["resume"] = json!([{"interruptId": call_id, "status": "cancelled"}]);
                request
            }
            input => {
                let message = self.message(input);
                self.history.push(message);
                self.request()
            }
        };
        let response = post_json(&self.url, &request).await;
        let stream = if response.status == 200 {
            Ok(Box::new(response.sse()))
        } else {
            // As `@ag-ui/client` reports it.
            let status = response.status.as_u16();
            let body = response.bytes().await;
            Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)))
        };
        Run {
            client: self,
            request,
            stream,
            events: Vec::new(),
        }
    }

    /// The message `input` adds to the history: a user message, or the `tool` message answering the pause.
    fn message(&mut self, input: Input) -> Value {
        let id = format!("client-{}", self.runs);
        let answer = match input {
            Input::Say(text) => return user(&id, &text),
            // The shape the route's approval tool asks for (`{"approved": boolean}`).
            Input::Approve(approved) => json!({ "approved": approved }).to_string(),
            Input::Answer(text) | Input::ToolResult(text) => text,
            Input::Cancel => unreachable!("a cancel is a resume entry, not a message"),
        };
        let call_id = self
            .pending_call
            .take()
            .expect("an answer needs a pending call to answer");
        ag_ui::tool_result(&id, &call_id, &answer)
    }

    fn request(&self) -> Value {
        let run_id = format!("{}-run-{}", self.thread_id, self.runs);
        let mut request = ag_ui::input(&self.thread_id, &run_id, json!(self.history));
        request["tools"] = json!([{
            "name": CLIENT_TOOL,
            "description": CLIENT_TOOL_DESCRIPTION,
            "parameters": client_tool_parameters(),
        }]);
        request
    }
}

pub struct Run<'a> {
    client: &'a mut Client,
    request: Value,
    /// The run's events (boxed: a stream is large), or the failed HTTP answer as the error the client
    /// reports.
    stream: Result<Box<SseStream>, String>,
    events: Vec<Value>,
}

impl Run<'_> {
    pub async fn until_text(&mut self) -> String {
        let stream = match &mut self.stream {
            Ok(stream) => stream,
            Err(refused) => panic!("the run was refused before any text: {refused}"),
        };
        loop {
            let event = stream
                .next()
                .await
                .unwrap_or_else(|| panic!("the run ended before any text: {:#?}", self.events));
            let delta = (event["type"] == "TEXT_MESSAGE_CONTENT").then(|| event["delta"].clone());
            self.events.push(event);
            if let Some(delta) = delta {
                return delta.as_str().unwrap_or_default().to_owned();
            }
        }
    }

    pub async fn finish(mut self) -> Seen {
        let stream = match &mut self.stream {
            Ok(stream) => stream,
            Err(refused) => {
                return Seen {
                    errors: vec![refused.clone()],
                    ..Seen::default()
                }
            }
        };
        self.events.extend(stream.rest().await);
        ag_ui::check(
            &stream.raw,
            &self.events,
            &self.request,
            Profile::CONSERVATIVE,
        );
        let mut reading = Reading::default();
        self.events.iter().for_each(|event| reading.apply(event));
        let (seen, pending_call) = reading.seen();
        self.client.history.extend(reading.messages);
        self.client.pending_call = pending_call;
        seen
    }

    /// Drops the connection mid-run.
    pub async fn leave(self) {
        drop(self.stream);
    }
}

/// A run's events as the client reads them: what it shows, and the messages it keeps.
#[derive(Default)]
struct Reading {
    text: String,
    errors: Vec<String>,
    codes: Vec<String>,
    /// Every call, in order, as `(id, name, arguments)`.
    calls: Vec<(String, String, String)>,
    /// Results by call id.
    results: Vec<(String, String)>,
    /// The messages the run adds to the history, built the way `@ag-ui/client` builds them.
    messages: Vec<Value>,
}

impl Reading {
    fn apply(&mut self, event: &Value) {
        let field = |name: &str| event[name].as_str().unwrap_or_default().to_owned();
        match event["type"].as_str().unwrap_or_default() {
            "TEXT_MESSAGE_START" => self.messages.push(json!({
                "id": field("messageId"), "role": "assistant", "content": "",
            })),
            "TEXT_MESSAGE_CONTENT" => {
                let delta = field("delta");
                self.text.push_str(&delta);
                if let Some(message) = self.message_mut(&field("messageId")) {
                    let content = format!("{}{delta}", message["content"].as_str().unwrap_or(""));
                    message["content"] = json!(content);
                }
            }
            "TOOL_CALL_START" => self.start_call(field("toolCallId"), field("toolCallName"), event),
            "TOOL_CALL_ARGS" => self.add_args(&field("toolCallId"), &field("delta")),
            "TOOL_CALL_RESULT" => {
                let (id, call_id, content) =
                    (field("messageId"), field("toolCallId"), field("content"));
                self.messages
                    .push(ag_ui::tool_result(&id, &call_id, &content));
                self.results.push((call_id, content));
            }
            "RUN_ERROR" => {
                self.errors.push(field("message"));
                self.codes.push(field("code"));
            }
            _ => {}
        }
    }

    fn message_mut(&mut self, id: &str) -> Option<&mut Value> {
        self.messages.iter_mut().rev().find(|m| m["id"] == id)
    }

    /// A call joins the assistant message it names when that message is the last one, otherwise starts one.
    fn start_call(&mut self, id: String, name: String, event: &Value) {
        let parent = event["parentMessageId"].as_str().unwrap_or(&id).to_owned();
        let call =
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": ""}});
        match self.messages.last_mut() {
            Some(last) if last["id"] == parent.as_str() && last["role"] == "assistant" => {
                match last["toolCalls"].as_array_mut() {
                    Some(calls) => calls.push(call),
                    None => last["toolCalls"] = json!([call]),
                }
            }
            _ => self
                .messages
                .push(json!({"id": parent, "role": "assistant", "toolCalls": [call]})),
        }
        self.calls.push((id, name, String::new()));
    }

    fn add_args(&mut self, id: &str, delta: &str) {
        if let Some((_, _, args)) = self.calls.iter_mut().find(|(call, ..)| call == id) {
            args.push_str(delta);
        }
        let kept = self
            .messages
            .iter_mut()
            .filter_map(|m| m["toolCalls"].as_array_mut())
            .flatten()
            .find(|call| call["id"] == id);
        if let Some(call) = kept {
            let args = format!(
                "{}{delta}",
                call["function"]["arguments"].as_str().unwrap_or("")
            );
            call["function"]["arguments"] = json!(args);
        }
    }

    /// What the client saw, and the call it must answer next, if the run paused on one. A call without a result
    /// pauses the client when it is one of the route's pause tools or the client's own tool; any other call
    /// without a result (the agent's call an approval is about) is only kept in the history.
    fn seen(&self) -> (Seen, Option<String>) {
        let mut seen = Seen {
            text: self.text.clone(),
            errors: self.errors.clone(),
            codes: self.codes.clone(),
            ..Seen::default()
        };
        let mut pauses = Vec::new();
        for (id, name, args) in &self.calls {
            let arguments = serde_json::from_str(args).unwrap_or(Value::String(args.clone()));
            match self.results.iter().find(|(call, _)| call == id) {
                Some((_, result)) => seen.tools.push(ToolSeen {
                    name: name.clone(),
                    arguments,
                    result: result.clone(),
                }),
                None => pauses.extend(pause(name, arguments).map(|p| (id.clone(), p))),
            }
        }
        assert!(pauses.len() <= 1, "a run paused twice: {pauses:#?}");
        let (pending_call, pause) = pauses.pop().unzip();
        seen.pause = pause;
        (seen, pending_call)
    }
}

/// The pause a call without a result means, if it is one.
fn pause(name: &str, arguments: Value) -> Option<Pause> {
    let shown = || format!("{name} {arguments}");
    match name {
        APPROVAL_PAUSE_TOOL => Some(Pause::Approval { text: shown() }),
        QUESTION_PAUSE_TOOL => Some(Pause::Question { text: shown() }),
        CLIENT_TOOL => Some(Pause::ClientTool {
            name: name.to_owned(),
            arguments,
        }),
        _ => None,
    }
}

// --- Agent -----------------------------------------------------------------------------------------------

/// The agent's interrupt ids and call ids.
const APPROVAL_INTERRUPT: &str = "interrupt-approval";
const QUESTION_INTERRUPT: &str = "interrupt-question";
const APPROVAL_CALL: &str = "call-delete";
const WEATHER_CALL: &str = "call-weather";
const CLIENT_TOOL_CALL: &str = "call-time";
const MESSAGE: &str = "agent-message";

pub struct Agent {
    upstream: Upstream,
}

impl Agent {
    pub async fn serve(script: Script) -> Agent {
        let upstream = Upstream::answer_with(move |request, _| answer(script, &request.body)).await;
        Agent { upstream }
    }

    pub fn url(&self) -> String {
        self.upstream.url()
    }

    pub fn release(&self) {
        self.upstream.release()
    }

    pub async fn cancelled(&self, wait: std::time::Duration) -> bool {
        self.upstream.client_left_within(wait).await
    }

    /// Per run: its answer to an interrupt (`resume`), else the newest message of the history it was sent.
    pub fn heard(&self) -> Vec<Heard> {
        let received = self.upstream.received();
        received.iter().filter_map(|run| heard(&run.body)).collect()
    }
}

/// What one run request told the agent.
fn heard(request: &Value) -> Option<Heard> {
    if let Some(answer) = request["resume"].as_array().and_then(|r| r.first()) {
        return Some(match &answer["payload"] {
            _ if answer["status"] == "cancelled" => Heard::Cancelled,
            payload if answer["interruptId"] == APPROVAL_INTERRUPT => {
                match payload["approved"].as_bool() {
                    Some(approved) => Heard::Decision(approved),
                    None => Heard::Answer(payload.to_string()),
                }
            }
            Value::String(words) => Heard::Answer(words.clone()),
            payload => Heard::Answer(payload.to_string()),
        });
    }
    let last = messages(request).last()?;
    match last["role"].as_str()? {
        "user" => user_texts(request).pop().map(Heard::Said),
        "tool" => Some(Heard::Answer(
            last["content"].as_str().unwrap_or_default().to_owned(),
        )),
        _ => None,
    }
}

/// The agent's answer to one run request.
fn answer(script: Script, request: &Value) -> Reply {
    if let Err(problem) = valid_run_input(request) {
        return Reply::status(400).body(&problem);
    }
    let run = Reply::sse().event(started());
    match script {
        Script::Text => {
            let events = text(MESSAGE, &[HELLO, &GREETING[HELLO.len()..]]);
            run.events(events[..2].to_vec())
                .gate()
                .events(events[2..].to_vec())
                .event(finished())
        }
        Script::ServerTool => run
            .events(call(
                WEATHER_CALL,
                WEATHER_TOOL,
                &[&weather_arguments().to_string()],
            ))
            .event(
                json!({"type": "TOOL_CALL_RESULT", "messageId": "weather-result",
                          "toolCallId": WEATHER_CALL, "content": WEATHER_RESULT, "role": "tool"}),
            )
            .events(text(MESSAGE, &[WEATHER_TEXT]))
            .event(finished()),
        Script::Memory => says(run, &you_said(&user_texts(request))),
        Script::Approval => match resume_of(request, APPROVAL_INTERRUPT) {
            None => asks_approval(run),
            Some(answer) => match decision(answer) {
                Ok(approved) => says(
                    run,
                    if approved {
                        APPROVED_TEXT
                    } else {
                        REJECTED_TEXT
                    },
                ),
                Err(problem) => fails(run, &problem),
            },
        },
        Script::Question => match resume_of(request, QUESTION_INTERRUPT) {
            None => run.event(interrupted(json!({
                "id": QUESTION_INTERRUPT, "reason": "input", "message": QUESTION,
                "responseSchema": {"type": "string"},
            }))),
            Some(answer) => match answer["payload"].as_str() {
                Some(text) if answer["status"] == "resolved" => says(run, &answered(text)),
                _ => fails(run, &format!("the question was answered with {answer}")),
            },
        },
        Script::ClientTool => match (offers_client_tool(request), client_tool_result(request)) {
            (false, _) => says(run, NO_TOOLS),
            (true, Some(result)) => says(run, &tool_returned(&result)),
            (true, None) => run
                .events(call(
                    CLIENT_TOOL_CALL,
                    CLIENT_TOOL,
                    &[&client_tool_arguments().to_string()],
                ))
                .event(finished()),
        },
        Script::FailMidStream => run
            .events(text(MESSAGE, &[HELLO])[..2].to_vec())
            .event(json!({"type": "RUN_ERROR", "message": FAILURE, "code": FAILURE_CODE})),
        Script::Hang => run.events(text(MESSAGE, &[HELLO])[..2].to_vec()).hang(),
    }
}

/// What every AG-UI server requires of a run request, and what a model behind it requires of the history:
/// no `tool` message without the call it answers.
fn valid_run_input(request: &Value) -> Result<(), String> {
    let id = |name: &str| request[name].as_str().is_some_and(|id| !id.is_empty());
    let array = |name: &str| request[name].is_array();
    if !(id("threadId") && id("runId") && array("messages") && array("tools") && array("context")) {
        return Err(format!("not a RunAgentInput: {request}"));
    }
    let called = |call_id: &Value| calls(request).any(|call| call["id"] == *call_id);
    match messages(request).find(|m| m["role"] == "tool" && !called(&m["toolCallId"])) {
        Some(orphan) => Err(format!(
            "a tool message answers no call in the history: {orphan}"
        )),
        None => Ok(()),
    }
}

/// One text message, then the end of the run.
fn says(run: Reply, words: &str) -> Reply {
    run.events(text(MESSAGE, &[words])).event(finished())
}

fn fails(run: Reply, message: &str) -> Reply {
    run.event(json!({"type": "RUN_ERROR", "message": message, "code": "BAD_RESUME"}))
}

/// The end of a run paused on `interrupt`.
fn interrupted(interrupt: Value) -> Value {
    let mut finish = finished();
    finish["outcome"] = json!({"type": "interrupt", "interrupts": [interrupt]});
    finish
}

/// The agent announces the call it wants to make, then pauses for approval of that call.
fn asks_approval(run: Reply) -> Reply {
    run.events(call(
        APPROVAL_CALL,
        APPROVAL_TOOL,
        &[&approval_arguments().to_string()],
    ))
    .event(interrupted(json!({
        "id": APPROVAL_INTERRUPT, "reason": "approval", "message": "Delete /tmp/x?",
        "toolCallId": APPROVAL_CALL,
        "responseSchema": {"type": "object", "properties": {"approved": {"type": "boolean"}}},
    })))
}

/// The decision in a resume entry, in the shape the approval interrupt's `responseSchema` asks for.
fn decision(answer: &Value) -> Result<bool, String> {
    match (
        answer["status"].as_str(),
        answer["payload"]["approved"].as_bool(),
    ) {
        (Some("cancelled"), _) => Ok(false),
        (Some("resolved"), Some(approved)) => Ok(approved),
        _ => Err(format!("the approval was answered with {answer}")),
    }
}

/// The request's answer to `interrupt`.
fn resume_of<'a>(request: &'a Value, interrupt: &str) -> Option<&'a Value> {
    request["resume"]
        .as_array()?
        .iter()
        .find(|entry| entry["interruptId"] == interrupt)
}

/// The text of every user message in the history, oldest first.
fn user_texts(request: &Value) -> Vec<String> {
    messages(request)
        .filter(|message| message["role"] == "user")
        .map(|message| match &message["content"] {
            Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
            content => content.as_str().unwrap_or_default().to_owned(),
        })
        .collect()
}

fn offers_client_tool(request: &Value) -> bool {
    request["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|tool| tool["name"] == CLIENT_TOOL))
}

/// The result of the agent's call of the client's tool, from the history's `tool` message answering it.
fn client_tool_result(request: &Value) -> Option<String> {
    let call_id =
        calls(request).find(|call| call["function"]["name"] == CLIENT_TOOL)?["id"].clone();
    messages(request)
        .find(|message| message["role"] == "tool" && message["toolCallId"] == call_id)
        .map(|message| message["content"].as_str().unwrap_or_default().to_owned())
}

fn messages(request: &Value) -> impl Iterator<Item = &Value> {
    request["messages"].as_array().into_iter().flatten()
}

/// The tool calls of the history's assistant messages.
fn calls(request: &Value) -> impl Iterator<Item = &Value> {
    messages(request)
        .filter_map(|message| message["toolCalls"].as_array())
        .flatten()
}
