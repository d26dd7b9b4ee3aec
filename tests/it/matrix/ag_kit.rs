//! AG-Kit send-message v0 in the matrix (`specs/ag-kit.md`).
//!
//! The client behaves as `useChat` of `@cloudbase/agent-ui-web` 0.0.24: it posts only what is new under one
//! `conversationId` of its own, offers [`CLIENT_TOOL`] with its `parameters` as JSON text on every request,
//! reads the stream to `data: [DONE]`, answers an `interrupt` with `resume {interruptId, payload}` (payload
//! as JSON text) and a call of its tool with a tool message. It fails on what the hook would choke on:
//! unknown frames, `tool-call-args` after a `tool-result`, arguments that are not JSON.
//!
//! The agent is a scripted v0 server: it keeps each conversation's user messages itself (v0 sends only the
//! new ones), asks approvals and questions with the interrupt reasons the proxy reads as such, and answers a
//! request that breaks v0 with an `error` frame saying why, so that the scenario shows it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::peers::{
    answered, approval_arguments, client_tool_arguments, client_tool_parameters, tool_returned,
    weather_arguments, you_said, Heard, Input, Pause, Script, Seen, ToolSeen, APPROVAL_TOOL,
    APPROVED_TEXT, CLIENT_TOOL, CLIENT_TOOL_DESCRIPTION, FAILURE, GREETING, HELLO, NO_TOOLS,
    QUESTION, REJECTED_TEXT, WEATHER_RESULT, WEATHER_TEXT, WEATHER_TOOL,
};
use crate::support::ag_kit::{call, interrupt, reply, result, text};
use crate::support::{post_json, Reply, SseStream, Upstream};

pub const INBOUND_TRANSLATE: &[(&str, &str)] = &[];
pub const OUTBOUND_TRANSLATE: &[(&str, &str)] = &[];
pub const UPSTREAM_HEADERS: &[(&str, &str)] = &[];
/// The code of the agent's error frame in [`Script::FailMidStream`].
pub const FAILURE_CODE: &str = "AGENT_FAILED";

/// The end of every v0 stream.
const DONE: &str = "[DONE]";
/// The interrupt reason the proxy's AG-Kit faces read as an approval (with `payload.toolName`).
const APPROVAL_REASON: &str = "approval";

// --- The client -------------------------------------------------------------------------------------------

/// A `useChat` conversation with the proxy.
pub struct Client {
    url: String,
    conversation_id: String,
    /// What the last exchange left for the client to answer.
    pending: Option<Pending>,
}

#[derive(Debug)]
enum Pending {
    /// An `interrupt`, resumed by its id; an approval when its reason says so.
    Interrupt { id: String, approval: bool },
    /// A call of the client's tool, answered by a tool message naming it.
    Call(String),
}

impl Client {
    /// The same conversation, now through the route served at `url` (another replica, a restarted proxy).
    pub fn retarget(&mut self, url: String) {
        self.url = format!("{url}/send-message");
    }

    pub fn new(url: String) -> Client {
        Client {
            // `useChat` posts to `<base>/send-message`, under a conversation id it mints itself.
            url: format!("{url}/send-message"),
            conversation_id: uuid::Uuid::new_v4().to_string(),
            pending: None,
        }
    }

    /// Posts `input`; a non-200 answer is the exchange's one error, as `useChat` throws it.
    pub async fn start(&mut self, input: Input) -> Run<'_> {
        let body = self.body(input);
        let response = post_json(&self.url, &body).await;
        let mut run = Run {
            client: self,
            stream: None,
            seen: Seen::default(),
            calls: Vec::new(),
            interrupt: None,
            after_result: false,
        };
        if response.status == 200 {
            assert_eq!(response.header("content-type"), "text/event-stream");
            run.stream = Some(response.sse());
        } else {
            let status = response.status;
            let body = response.bytes().await;
            let error = format!("{status}: {}", String::from_utf8_lossy(&body));
            run.seen.errors.push(error);
        }
        run
    }

    /// The request body for `input`: a delta or a resume, with the tool and the conversation id.
    fn body(&mut self, input: Input) -> Value {
        let pending = self.pending.take();
        let mut body = match (input, pending) {
            (Input::Say(words), _) => json!({"messages": [{"role": "user", "content": words}]}),
            (Input::Approve(approved), Some(Pending::Interrupt { id, .. })) => {
                resume(&id, json!({ "approved": approved }))
            }
            // Words for an approval are the payload itself (a JSON string); a question asks for
            // `{"response": "…"}`.
            (Input::Answer(words), Some(Pending::Interrupt { id, approval: true })) => {
                resume(&id, json!(words))
            }
            (Input::Answer(words), Some(Pending::Interrupt { id, .. })) => {
                resume(&id, json!({ "response": words }))
            }
            (Input::ToolResult(content), Some(Pending::Call(id))) => json!({"messages": [
                {"role": "tool", "content": content, "toolCallId": id}
            ]}),
            (Input::Cancel, _) => {
                panic!("a v0 client cannot dismiss an interrupt: it can only go away")
            }
            (input, pending) => panic!("{input:?} answers nothing pending ({pending:?})"),
        };
        body["tools"] = json!([{
            "name": CLIENT_TOOL,
            "description": CLIENT_TOOL_DESCRIPTION,
            "parameters": client_tool_parameters().to_string(),
        }]);
        body["conversationId"] = json!(self.conversation_id);
        body
    }
}

/// A `resume` of interrupt `id` with `answer` as JSON text (`JSON.stringify`).
fn resume(id: &str, answer: Value) -> Value {
    json!({"resume": {"interruptId": id, "payload": answer.to_string()}})
}

/// One request's stream being read.
pub struct Run<'a> {
    client: &'a mut Client,
    /// `None` once `[DONE]` arrived, or when the request was refused.
    stream: Option<SseStream>,
    seen: Seen,
    calls: Vec<Call>,
    /// The last `interrupt` frame.
    interrupt: Option<Value>,
    /// Whether the last frame was a `tool-result` (the hook's last message is then a tool message).
    after_result: bool,
}

/// A tool call as its frames arrive.
struct Call {
    id: String,
    name: String,
    arguments: String,
    result: Option<String>,
}

impl Run<'_> {
    pub async fn until_text(&mut self) -> String {
        loop {
            let Some(frame) = self.next_frame().await else {
                panic!("the exchange ended before any text: {:#?}", self.seen);
            };
            if let Some(words) = self.apply(&frame) {
                return words;
            }
        }
    }

    pub async fn finish(mut self) -> Seen {
        while let Some(frame) = self.next_frame().await {
            self.apply(&frame);
        }
        self.settle()
    }

    /// `useChat` has no abort: closing the connection is all a v0 client can do.
    pub async fn leave(self) {
        drop(self);
    }

    /// The next v0 frame, `None` after `[DONE]`, which must be the last thing on the stream.
    async fn next_frame(&mut self) -> Option<Value> {
        let stream = self.stream.as_mut()?;
        let Some(data) = stream.next_data().await else {
            panic!("the stream ended without data: {DONE}: {:#?}", self.seen);
        };
        if data == DONE {
            assert_eq!(stream.next_data().await, None, "nothing may follow {DONE}");
            self.stream = None;
            return None;
        }
        let frame = serde_json::from_str(&data)
            .unwrap_or_else(|e| panic!("a v0 frame is not JSON ({e}): {data}"));
        Some(frame)
    }

    /// What the hook makes of one frame; the words of a `text` frame.
    fn apply(&mut self, frame: &Value) -> Option<String> {
        let kind = frame["type"].as_str().unwrap_or_default();
        let after_result = std::mem::replace(&mut self.after_result, kind == "tool-result");
        match kind {
            "text" => {
                let words = field(frame, "content");
                self.seen.text.push_str(words);
                return Some(words.to_owned());
            }
            "tool-call-start" => self.calls.push(Call {
                id: field(frame, "toolCallId").to_owned(),
                name: field(frame, "toolCallName").to_owned(),
                arguments: String::new(),
                result: None,
            }),
            "tool-call-args" => {
                assert!(
                    !after_result,
                    "useChat throws on tool-call-args after a tool-result: {frame}"
                );
                self.call(frame).arguments.push_str(field(frame, "delta"));
            }
            "tool-call-end" => {
                let call = self.call(frame);
                assert!(
                    serde_json::from_str::<Value>(&call.arguments).is_ok(),
                    "the arguments of {} are not JSON: {:?}",
                    call.id,
                    call.arguments
                );
            }
            "tool-result" => self.call(frame).result = Some(field(frame, "result").to_owned()),
            "interrupt" => self.interrupt = Some(frame.clone()),
            "error" => self.seen.errors.push(field(frame, "message").to_owned()),
            _ => panic!("useChat knows no v0 frame like this: {frame}"),
        }
        None
    }

    /// The started call a frame names.
    fn call(&mut self, frame: &Value) -> &mut Call {
        let id = field(frame, "toolCallId");
        self.calls
            .iter_mut()
            .find(|call| call.id == id)
            .unwrap_or_else(|| panic!("a frame for a call that did not start: {frame}"))
    }

    /// The exchange as seen: calls with a result were the agent's; one without is the client's to run; an
    /// interrupt is the client's to answer.
    fn settle(mut self) -> Seen {
        let (answered, unanswered): (Vec<Call>, Vec<Call>) =
            self.calls.drain(..).partition(|call| call.result.is_some());
        self.seen.tools = answered.into_iter().map(ToolSeen::from).collect();
        assert!(
            unanswered.len() <= 1,
            "a round of several client calls: {:?}",
            self.seen
        );
        let pause = match (self.interrupt.take(), unanswered.into_iter().next()) {
            (Some(interrupt), _) => Some(self.paused_on(&interrupt)),
            (None, Some(call)) => {
                self.client.pending = Some(Pending::Call(call.id));
                Some(Pause::ClientTool {
                    name: call.name,
                    arguments: arguments(&call.arguments),
                })
            }
            (None, None) => None,
        };
        self.seen.pause = pause;
        self.seen
    }

    /// An `interrupt` as the client shows it: its reason and payload; an approval when the reason says so.
    fn paused_on(&mut self, interrupt: &Value) -> Pause {
        let reason = field(interrupt, "reason");
        self.client.pending = Some(Pending::Interrupt {
            id: field(interrupt, "id").to_owned(),
            approval: reason == APPROVAL_REASON,
        });
        let text = format!("{reason}: {}", interrupt["payload"]);
        if reason == APPROVAL_REASON {
            Pause::Approval { text }
        } else {
            Pause::Question { text }
        }
    }
}

impl From<Call> for ToolSeen {
    fn from(call: Call) -> ToolSeen {
        ToolSeen {
            arguments: arguments(&call.arguments),
            name: call.name,
            result: call.result.unwrap_or_default(),
        }
    }
}

/// A call's concatenated arguments (checked to be JSON at `tool-call-end`).
fn arguments(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// A string field a v0 frame must have.
fn field<'v>(frame: &'v Value, name: &str) -> &'v str {
    frame[name]
        .as_str()
        .unwrap_or_else(|| panic!("`{name}` is not a string in {frame}"))
}

// --- The agent --------------------------------------------------------------------------------------------

/// A scripted v0 agent. Dropping it stops it.
pub struct Agent {
    upstream: Upstream,
}

const APPROVAL_ID: &str = "int_approval";
const QUESTION_ID: &str = "int_question";
const WEATHER_CALL: &str = "call_weather";
const TIME_CALL: &str = "call_time";

impl Agent {
    pub async fn serve(script: Script) -> Agent {
        let memory = Memory::default();
        let upstream = Upstream::answer_with(move |request, _| {
            play(script, &request.body, &memory).unwrap_or_else(refuse)
        })
        .await;
        Agent { upstream }
    }

    pub fn url(&self) -> String {
        format!("{}/send-message", self.upstream.url())
    }

    pub fn release(&self) {
        self.upstream.release();
    }

    /// Per request, its `resume` (`null` dismisses the interrupt), else its newest message.
    pub fn heard(&self) -> Vec<Heard> {
        let received = self.upstream.received();
        received
            .iter()
            .filter_map(|request| heard(&request.body))
            .collect()
    }

    /// v0 has no cancel: the agent's work ends when the proxy closes the request.
    pub async fn cancelled(&self, wait: std::time::Duration) -> bool {
        self.upstream.client_left_within(wait).await
    }
}

/// The script's answer to one request, or why the request breaks v0.
fn play(script: Script, body: &Value, memory: &Memory) -> Result<Reply, String> {
    Ok(match script {
        Script::Text => Reply::sse()
            .event(text(HELLO))
            .gate()
            .event(text(&GREETING[HELLO.len()..]))
            .frame(&format!("data: {DONE}\n\n")),
        Script::ServerTool => reply(
            split_call(WEATHER_CALL, WEATHER_TOOL, &weather_arguments())
                .into_iter()
                .chain([result(WEATHER_CALL, WEATHER_RESULT), text(WEATHER_TEXT)]),
        ),
        Script::Memory => reply([text(&memory.add(body)?)]),
        Script::Approval => approval(body)?,
        Script::Question => question(body)?,
        Script::ClientTool => client_tool(body)?,
        Script::FailMidStream => reply([text(HELLO), error_frame(FAILURE_CODE, FAILURE)]),
        Script::Hang => Reply::sse().event(text(HELLO)).hang(),
    })
}

/// What one request told the agent.
fn heard(body: &Value) -> Option<Heard> {
    if let Some(resume) = body.get("resume") {
        let payload = resume["payload"].as_str().unwrap_or_default();
        let answer: Value = serde_json::from_str(payload).unwrap_or_else(|_| json!(payload));
        return Some(match answer {
            Value::Null => Heard::Cancelled,
            Value::String(words) => Heard::Answer(words),
            answer => match (answer["approved"].as_bool(), answer["response"].as_str()) {
                (Some(approved), _) => Heard::Decision(approved),
                (None, Some(words)) => Heard::Answer(words.to_owned()),
                (None, None) => Heard::Answer(answer.to_string()),
            },
        });
    }
    let last = body["messages"].as_array()?.last()?;
    let content = last["content"].as_str().unwrap_or_default().to_owned();
    match last["role"].as_str()? {
        "user" => Some(Heard::Said(content)),
        "tool" => Some(Heard::Answer(content)),
        _ => None,
    }
}

/// A request that breaks v0, answered with an `error` frame saying why.
fn refuse(why: String) -> Reply {
    reply([error_frame("BAD_REQUEST", &why)])
}

fn error_frame(code: &str, message: &str) -> Value {
    json!({"type": "error", "code": code, "message": message})
}

/// A tool call whose arguments stream in two fragments, as a model produces them.
fn split_call(id: &str, name: &str, arguments: &Value) -> Vec<Value> {
    let arguments = arguments.to_string();
    let (head, tail) = arguments.split_at(arguments.len() / 2);
    call(id, name, &[head, tail])
}

/// Asks approval to call [`APPROVAL_TOOL`]; the resume decides with `{"approved": bool}`.
fn approval(body: &Value) -> Result<Reply, String> {
    let Some(answer) = resumed(body, APPROVAL_ID)? else {
        let asked = json!({"toolName": APPROVAL_TOOL, "args": approval_arguments()});
        return Ok(reply([interrupt(APPROVAL_ID, APPROVAL_REASON, asked)]));
    };
    let approved = answer["approved"]
        .as_bool()
        .ok_or_else(|| format!("an approval answered without a boolean `approved`: {answer}"))?;
    Ok(reply([text(if approved {
        APPROVED_TEXT
    } else {
        REJECTED_TEXT
    })]))
}

/// Asks [`QUESTION`]; the resume answers with a JSON string or `{"response": "…"}`.
fn question(body: &Value) -> Result<Reply, String> {
    let Some(answer) = resumed(body, QUESTION_ID)? else {
        let asked = json!({"question": QUESTION});
        return Ok(reply([interrupt(QUESTION_ID, "question", asked)]));
    };
    let words = answer
        .as_str()
        .or(answer["response"].as_str())
        .ok_or_else(|| format!("a question answered without words: {answer}"))?;
    Ok(reply([text(&answered(words))]))
}

/// The parsed payload of a `resume` of interrupt `id`; `None` when the request resumes nothing.
fn resumed(body: &Value, id: &str) -> Result<Option<Value>, String> {
    let Some(resume) = body.get("resume") else {
        return Ok(None);
    };
    if resume["interruptId"] != id {
        return Err(format!("a resume of an interrupt never asked: {resume}"));
    }
    let payload = resume["payload"]
        .as_str()
        .ok_or_else(|| format!("resume.payload is not JSON text: {resume}"))?;
    serde_json::from_str(payload)
        .map(Some)
        .map_err(|e| format!("resume.payload is not JSON ({e}): {payload}"))
}

/// Calls the client's [`CLIENT_TOOL`] when offered; reports the tool message that answers the call.
fn client_tool(body: &Value) -> Result<Reply, String> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if let Some(answer) = messages.iter().find(|m| m["role"] == "tool") {
        if answer["toolCallId"] != TIME_CALL {
            return Err(format!("a tool message for a call never made: {answer}"));
        }
        let content = answer["content"].as_str().unwrap_or_default();
        return Ok(reply([text(&tool_returned(content))]));
    }
    if !offered(body)? {
        return Ok(reply([text(NO_TOOLS)]));
    }
    Ok(reply(split_call(
        TIME_CALL,
        CLIENT_TOOL,
        &client_tool_arguments(),
    )))
}

/// Whether the request offers [`CLIENT_TOOL`], with its schema as JSON text, as v0 clients send it.
fn offered(body: &Value) -> Result<bool, String> {
    let tools = body["tools"].as_array().cloned().unwrap_or_default();
    let Some(tool) = tools.iter().find(|tool| tool["name"] == CLIENT_TOOL) else {
        return Ok(false);
    };
    let schema = tool["parameters"]
        .as_str()
        .and_then(|text| serde_json::from_str::<Value>(text).ok());
    if schema != Some(client_tool_parameters()) {
        return Err(format!(
            "`{CLIENT_TOOL}` offered without its schema as JSON text: {tool}"
        ));
    }
    Ok(true)
}

/// The user messages of each conversation, keyed by `conversationId`: v0 sends only the new ones.
#[derive(Clone, Default)]
struct Memory(Arc<Mutex<HashMap<String, Vec<String>>>>);

impl Memory {
    /// Adds the request's user messages to its conversation; [`you_said`] of all of them.
    fn add(&self, body: &Value) -> Result<String, String> {
        let conversation = body["conversationId"]
            .as_str()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| "a send-message request without a conversationId".to_owned())?;
        let mut conversations = self.0.lock().expect("lock");
        let said = conversations.entry(conversation.to_owned()).or_default();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        // The agent keeps the conversation: it must be sent only the new user message, not its own replies.
        if !matches!(&messages[..], [only] if only["role"] == "user") {
            return Err(format!("not only the new user message: {messages:?}"));
        }
        said.extend(
            messages
                .iter()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["content"].as_str())
                .map(str::to_owned),
        );
        Ok(you_said(said))
    }
}
