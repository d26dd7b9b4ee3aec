//! AgentScope Runtime (`/process`) in the matrix: its client (the inbound face's peer) and its scripted runtime
//! (the outbound face's peer).
//!
//! The protocol sends the whole conversation every time: the client keeps it (its user messages, every
//! message the runtime completed, its answers) and sends it all as `input`, in one `session_id`, offering
//! [`CLIENT_TOOL`]; the scripted runtime answers from the request alone.

use serde_json::{json, Value};
use uuid::Uuid;

use super::peers::{
    approval_arguments, client_tool_arguments, client_tool_parameters, tool_returned,
    weather_arguments, you_said, Heard, Input, Pause, Script, Seen, ToolSeen, APPROVAL_TOOL,
    APPROVED_TEXT, CLIENT_TOOL, CLIENT_TOOL_DESCRIPTION, FAILURE, GREETING, HELLO, NO_TOOLS,
    REJECTED_TEXT, WEATHER_RESULT, WEATHER_TEXT, WEATHER_TOOL,
};
use crate::support::agentscope::{self as scope, data, Run as Reply};
use crate::support::{post_json, Received, SseStream, Upstream};

pub const INBOUND_TRANSLATE: &[(&str, &str)] = &[];
pub const OUTBOUND_TRANSLATE: &[(&str, &str)] = &[];
pub const UPSTREAM_HEADERS: &[(&str, &str)] = &[];
/// The code of the runtime's failed response in [`Script::FailMidStream`].
pub const FAILURE_CODE: &str = "AGENT_UNKNOWN_ERROR";

// --- The client -----------------------------------------------------------------------------------------------

/// A client of an AgentScope route: one session, its whole conversation, and the pause it must answer.
pub struct Client {
    process: String,
    session_id: String,
    /// Every message of the conversation so far, sent as `input` with each request.
    conversation: Vec<Value>,
    pending: Option<Pending>,
}

/// What the last run stopped on, which the next input answers.
#[derive(Debug)]
enum Pending {
    Approval { request_id: String },
    ToolCall { call_id: String, name: String },
}

impl Client {
    /// The same conversation, now through the route served at `url` (another replica, a restarted proxy).
    pub fn retarget(&mut self, url: String) {
        self.process = format!("{url}/process");
    }

    pub fn new(url: String) -> Client {
        Client {
            process: format!("{url}/process"),
            session_id: format!("session_{}", Uuid::new_v4()),
            conversation: Vec::new(),
            pending: None,
        }
    }

    /// Adds `input` to the conversation and posts the whole of it.
    pub async fn start(&mut self, input: Input) -> Run<'_> {
        let message = self.message_for(input);
        self.conversation.push(message);
        let mut request = scope::request(&self.session_id, json!(self.conversation));
        request["tools"] = offered_tools();
        let response = post_json(&self.process, &request).await;
        let stream = if response.status == 200 {
            Ok(response.sse())
        } else {
            let status = response.status;
            let body = response.bytes().await;
            Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)))
        };
        Run {
            client: self,
            request,
            stream,
            events: Vec::new(),
            seen: Seen::default(),
        }
    }

    /// The input message saying `input`: a user message, or the answer to the pending pause.
    fn message_for(&mut self, input: Input) -> Value {
        let pending = self.pending.take();
        match (input, pending) {
            (Input::Say(text), _) => scope::user(&format!("msg_{}", Uuid::new_v4()), &text),
            (Input::Approve(approve), Some(Pending::Approval { request_id })) => {
                scope::approval_response(&request_id, approve, None)
            }
            // A question reaches this protocol as an approval request: approved, the answer its reason.
            (Input::Answer(text), Some(Pending::Approval { request_id })) => {
                scope::approval_response(&request_id, true, Some(&text))
            }
            (Input::ToolResult(output), Some(Pending::ToolCall { call_id, name })) => {
                scope::function_output(&call_id, &name, &output)
            }
            (Input::Cancel, _) => {
                panic!("an AgentScope client cannot dismiss a pause: it can only go away")
            }
            (input, pending) => panic!("{input:?} answers nothing pending ({pending:?})"),
        }
    }

    /// Reads a finished run: its errors, the tool calls and the pause it shows, and the messages it
    /// completed, which join the conversation.
    fn read_run(&mut self, request: &Value, events: &[Value], seen: &mut Seen) {
        // A refusal is one bare frame and nothing else.
        if let Some(error) = events.iter().find_map(bare_error) {
            seen.errors.push(error);
            return;
        }
        scope::check(events, request);
        if scope::status(events) == "failed" {
            let error = scope::error(events);
            seen.errors
                .push(error["message"].as_str().unwrap_or_default().to_owned());
            seen.codes
                .push(error["code"].as_str().unwrap_or_default().to_owned());
        }
        let output = scope::output(events);
        if scope::status(events) == "completed" {
            // The terminal response repeats the text streamed, in the assistant's messages.
            assert_eq!(
                scope::text(events),
                seen.text,
                "the output's text: {events:#?}"
            );
            let mut messages = output.iter().filter(|m| m["type"] == "message");
            assert!(
                messages.all(|m| m["role"] == "assistant"),
                "the output's messages: {output:#?}"
            );
        }
        seen.tools = tools_shown(&output);
        if let Some((pending, pause)) = pause_of(&output) {
            self.pending = Some(pending);
            seen.pause = Some(pause);
        }
        self.conversation.extend(output);
    }
}

/// The client's own tool, offered with every request.
fn offered_tools() -> Value {
    json!([{"type": "function", "function": {"name": CLIENT_TOOL, "description": CLIENT_TOOL_DESCRIPTION,
                                             "parameters": client_tool_parameters()}}])
}

/// One request's answer being read.
pub struct Run<'a> {
    client: &'a mut Client,
    request: Value,
    /// The SSE answer, or the error a non-200 answer is.
    stream: Result<SseStream, String>,
    events: Vec<Value>,
    seen: Seen,
}

impl Run<'_> {
    pub async fn until_text(&mut self) -> String {
        loop {
            let Some(event) = self.next().await else {
                panic!(
                    "no text before the end: {:?} {:#?}",
                    self.stream.as_ref().err(),
                    self.events
                );
            };
            if let Some(text) = text_delta(&event) {
                return text.to_owned();
            }
        }
    }

    pub async fn finish(mut self) -> Seen {
        while self.next().await.is_some() {}
        let Run {
            client,
            request,
            stream,
            events,
            mut seen,
        } = self;
        match stream {
            Ok(_) => client.read_run(&request, &events, &mut seen),
            Err(error) => seen.errors.push(error),
        }
        seen
    }

    /// Drops the connection, as a client that goes away does.
    pub async fn leave(self) {
        drop(self.stream);
    }

    /// The next event, its text (a delta) added to what the user read.
    async fn next(&mut self) -> Option<Value> {
        let event = self.stream.as_mut().ok()?.next().await?;
        if let Some(text) = text_delta(&event) {
            self.seen.text.push_str(text);
        }
        self.events.push(event.clone());
        Some(event)
    }
}

/// The text of a streamed text delta. The completed content and message repeat the whole text: a user reads
/// the deltas only.
fn text_delta(event: &Value) -> Option<&str> {
    let is_delta =
        event["object"] == "content" && event["type"] == "text" && event["delta"] == true;
    is_delta.then(|| event["text"].as_str().unwrap_or_default())
}

/// A bare `{"error": …}` frame's text (the runtime's framework-level refusal, without `object`).
fn bare_error(event: &Value) -> Option<String> {
    let error = event.get("error").filter(|_| event.get("object").is_none());
    error.map(text_of)
}

/// A call's arguments: its JSON text parsed (the text itself when it is not JSON).
fn arguments(call: &Value) -> Value {
    let text = data(call)["arguments"].as_str().unwrap_or_default();
    serde_json::from_str(text).unwrap_or_else(|_| json!(text))
}

fn is_call(message: &Value) -> bool {
    message["type"]
        .as_str()
        .is_some_and(|t| t.ends_with("_call"))
}

/// The output of the call `call_id` among `output`.
fn output_of<'a>(output: &'a [Value], call_id: &Value) -> Option<&'a Value> {
    output
        .iter()
        .filter(|m| {
            m["type"]
                .as_str()
                .is_some_and(|t| t.ends_with("_call_output"))
        })
        .map(data)
        .find(|d| &d["call_id"] == call_id)
        .map(|d| &d["output"])
}

/// The calls the agent made on its side, each with its result (a call the client does not run and that got
/// no result shows with an empty one).
fn tools_shown(output: &[Value]) -> Vec<ToolSeen> {
    output
        .iter()
        .filter(|m| is_call(m))
        .filter_map(|call| {
            let result = output_of(output, &data(call)["call_id"]);
            let name = data(call)["name"].as_str().unwrap_or_default();
            (result.is_some() || name != CLIENT_TOOL).then(|| ToolSeen {
                name: name.to_owned(),
                arguments: arguments(call),
                result: result.map(text_of).unwrap_or_default(),
            })
        })
        .collect()
}

fn text_of(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// Where the run stopped for the client: an approval request, or a call of its own tool left unanswered.
fn pause_of(output: &[Value]) -> Option<(Pending, Pause)> {
    output
        .iter()
        .find_map(|message| approval(message).or_else(|| client_call(output, message)))
}

/// An `mcp_approval_request`: shown as its tool's name, its arguments and its prompt (a question the proxy
/// asks this way has its words in both).
fn approval(message: &Value) -> Option<(Pending, Pause)> {
    if message["type"] != "mcp_approval_request" {
        return None;
    }
    let data = data(message);
    let shown: Vec<&str> = [
        &data["name"],
        &data["arguments"],
        &message["metadata"]["prompt"],
    ]
    .into_iter()
    .filter_map(Value::as_str)
    .collect();
    let pending = Pending::Approval {
        request_id: text_of(&data["id"]),
    };
    Some((
        pending,
        Pause::Approval {
            text: shown.join("\n"),
        },
    ))
}

/// A call of the client's own tool that got no output: the client is to run it.
fn client_call(output: &[Value], message: &Value) -> Option<(Pending, Pause)> {
    let data = data(message);
    let name = data["name"].as_str()?;
    let unanswered = is_call(message) && output_of(output, &data["call_id"]).is_none();
    (unanswered && name == CLIENT_TOOL).then(|| {
        let pending = Pending::ToolCall {
            call_id: text_of(&data["call_id"]),
            name: name.to_owned(),
        };
        let pause = Pause::ClientTool {
            name: name.to_owned(),
            arguments: arguments(message),
        };
        (pending, pause)
    })
}

// --- The scripted runtime ---------------------------------------------------------------------------------------

/// The id of the scripted runtime's approval request.
const APPROVAL_ID: &str = "apr_1";
/// The id of the scripted runtime's call of the client's tool.
const CLIENT_CALL_ID: &str = "call_time";

/// A scripted agentscope-runtime playing a [`Script`] against each request's whole `input`.
pub struct Agent {
    runtime: Upstream,
}

impl Agent {
    pub async fn serve(script: Script) -> Agent {
        assert!(
            script != Script::Question,
            "an AgentScope runtime asks no questions (only approvals): the matrix never plays \
             Script::Question against it"
        );
        let runtime = scope::runtime_with(move |request| play(script, request)).await;
        Agent { runtime }
    }

    pub fn url(&self) -> String {
        self.runtime.url()
    }

    pub fn release(&self) {
        self.runtime.release()
    }

    /// Per request, what its input says after the last user message (a decision, a tool's output), else that
    /// user message.
    pub fn heard(&self) -> Vec<Heard> {
        let received = self.runtime.received();
        let heard = received.iter().filter_map(|request| {
            let input = request.body["input"].as_array()?;
            let new = since_last_user_message(input);
            if let Some(approve) = decision(new) {
                return Some(Heard::Decision(approve));
            }
            if let Some(output) = tool_output(new) {
                return Some(Heard::Answer(output));
            }
            user_texts(input).pop().map(Heard::Said)
        });
        heard.collect()
    }

    /// Whether the runtime's `/process` request was closed before its answer ended.
    pub async fn cancelled(&self, wait: std::time::Duration) -> bool {
        self.runtime.client_left_within(wait).await
    }
}

/// The runtime's answer to `request` under `script`.
fn play(script: Script, request: &Received) -> Reply {
    let input = request.body["input"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let new = since_last_user_message(&input);
    match script {
        Script::Text => Reply::new()
            .open_text(&[HELLO])
            .gate()
            .close_text(&[GREETING
                .strip_prefix(HELLO)
                .expect("the greeting opens with hello")])
            .completed(),
        // A partial snapshot of the arguments first, then the whole: the runtime replaces, not appends.
        Script::ServerTool => Reply::new()
            .plugin_call(
                "call_weather",
                WEATHER_TOOL,
                &["{\"city\": \"Par", &weather_arguments().to_string()],
            )
            .plugin_output("call_weather", WEATHER_TOOL, WEATHER_RESULT)
            .text(&[WEATHER_TEXT])
            .completed(),
        Script::Memory => Reply::new()
            .text(&[&you_said(&user_texts(&input))])
            .completed(),
        Script::Approval => match decision(new) {
            Some(true) => Reply::new().text(&[APPROVED_TEXT]).completed(),
            Some(false) => Reply::new().text(&[REJECTED_TEXT]).completed(),
            None => Reply::new()
                .approval_request(APPROVAL_ID, APPROVAL_TOOL, &approval_arguments())
                .completed(),
        },
        Script::ClientTool => match tool_output(new) {
            Some(output) => Reply::new().text(&[&tool_returned(&output)]).completed(),
            None if offers(&request.body, CLIENT_TOOL) => Reply::new()
                .function_call(
                    CLIENT_CALL_ID,
                    CLIENT_TOOL,
                    &[&client_tool_arguments().to_string()],
                )
                .completed(),
            None => Reply::new().text(&[NO_TOOLS]).completed(),
        },
        Script::FailMidStream => Reply::new()
            .open_text(&[HELLO])
            .failed(FAILURE_CODE, FAILURE),
        Script::Hang => Reply::new().open_text(&[HELLO]).hang(),
        Script::Question => unreachable!("refused by Agent::serve"),
    }
}

fn is_user_message(message: &Value) -> bool {
    message["type"] == "message" && message["role"] == "user"
}

/// The messages after the last user message: what answers the runtime's last pause.
fn since_last_user_message(input: &[Value]) -> &[Value] {
    let last = input.iter().rposition(is_user_message);
    &input[last.map_or(0, |n| n + 1)..]
}

/// The text of every user message, oldest first.
fn user_texts(input: &[Value]) -> Vec<String> {
    input
        .iter()
        .filter(|m| is_user_message(m))
        .map(|m| {
            let contents = m["content"].as_array().cloned().unwrap_or_default();
            contents.iter().filter_map(|c| c["text"].as_str()).collect()
        })
        .collect()
}

/// The client's decision on the runtime's approval request, if it answered it.
fn decision(new: &[Value]) -> Option<bool> {
    new.iter()
        .filter(|m| m["type"] == "mcp_approval_response")
        .map(data)
        .find(|d| d["approval_request_id"] == APPROVAL_ID)
        .map(|d| d["approve"] == true)
}

/// The output of the runtime's client tool call, if the client sent it.
fn tool_output(new: &[Value]) -> Option<String> {
    new.iter()
        .filter(|m| m["type"] == "function_call_output")
        .map(data)
        .find(|d| d["call_id"] == CLIENT_CALL_ID)
        .map(|d| text_of(&d["output"]))
}

/// Whether the request offers the function tool `name`.
fn offers(request: &Value, name: &str) -> bool {
    request["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == name))
}
