//! AgentScope Runtime (`/process`, agentscope-runtime 1.1.6.post2) for the tests: a scripted runtime (the
//! upstream of an AgentScope outbound) and a client (against an AgentScope inbound route).
//!
//! The scripted runtime answers the n-th request with the n-th scripted [`Run`] (the last one repeats),
//! framed as the real runtime frames it: `data: <json>\n\n`, `sequence_number` 0, 1, 2, …, every field
//! written (`null`s included), `response` created → in_progress → messages → completed, the response echoing
//! the request's `session_id`.
//!
//! ```ignore
//! let runtime = agentscope::runtime([
//!     Run::new().plugin_call("call_1", "get_weather", &["{\"city\": ", "{\"city\": \"Paris\"}"])
//!         .plugin_output("call_1", "get_weather", "sunny")
//!         .text(&["It is ", "sunny."])
//!         .completed(),
//! ]).await;
//! ```

use serde_json::{json, Value};

use super::{post_json, Received, Reply, SseStream, Upstream};

// --- The scripted runtime -----------------------------------------------------------------------------------

/// One scripted answer of the runtime, played in order.
#[derive(Clone, Debug, Default)]
pub struct Run {
    steps: Vec<Step>,
    /// A framework failure before any run: one bare `{"error": …}` frame and nothing else.
    bare: bool,
}

#[derive(Clone, Debug)]
enum Step {
    /// Starts an assistant text message and streams these deltas into it.
    TextOpen(Vec<String>),
    /// Streams these deltas into the open text message, then completes it.
    TextClose(Vec<String>),
    Call {
        kind: &'static str,
        call_id: String,
        name: String,
        snapshots: Vec<String>,
    },
    Output {
        kind: &'static str,
        call_id: String,
        name: String,
        output: String,
    },
    Approval {
        id: String,
        name: String,
        arguments: String,
    },
    Completed,
    Failed(String, String),
    BareError(String),
    Gate,
    Hang,
    Cut,
}

impl Run {
    /// A run: `response` created and in_progress come first.
    pub fn new() -> Run {
        Run::default()
    }

    /// Just the bare frame `{"error": text}` (no `object`), as the runtime answers a busy session.
    pub fn bare_error(text: &str) -> Run {
        Run {
            steps: vec![Step::BareError(text.to_owned())],
            bare: true,
        }
    }

    /// An assistant text message: a delta content each, the completed content, the completed message.
    pub fn text(self, deltas: &[&str]) -> Run {
        self.open_text(deltas).close_text(&[])
    }

    /// Starts an assistant text message with a delta content each, leaving it open (for a gate, a hang or
    /// a failure in the middle of a message).
    pub fn open_text(mut self, deltas: &[&str]) -> Run {
        self.steps.push(Step::TextOpen(owned(deltas)));
        self
    }

    /// A delta content each in the open text message, then its completed content and completed message.
    pub fn close_text(mut self, deltas: &[&str]) -> Run {
        self.steps.push(Step::TextClose(owned(deltas)));
        self
    }

    /// A `plugin_call` message (a server-side tool); `snapshots` are the whole arguments so far, each
    /// replacing the one before (the runtime's replace semantics), after the first `arguments: ""`.
    pub fn plugin_call(self, call_id: &str, name: &str, snapshots: &[&str]) -> Run {
        self.call("plugin_call", call_id, name, snapshots)
    }

    /// A `function_call` message (how the runtime's OpenAI mapping calls a client's tool).
    pub fn function_call(self, call_id: &str, name: &str, snapshots: &[&str]) -> Run {
        self.call("function_call", call_id, name, snapshots)
    }

    fn call(mut self, kind: &'static str, call_id: &str, name: &str, snapshots: &[&str]) -> Run {
        self.steps.push(Step::Call {
            kind,
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            snapshots: snapshots.iter().map(|s| (*s).to_owned()).collect(),
        });
        self
    }

    /// A `plugin_call_output` message; `text` is serialized as the runtime does (a JSON list of text blocks).
    pub fn plugin_output(mut self, call_id: &str, name: &str, text: &str) -> Run {
        self.steps.push(Step::Output {
            kind: "plugin_call_output",
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            output: json!([{"type": "text", "text": text}]).to_string(),
        });
        self
    }

    /// An `mcp_approval_request` message, completed at once (the project's HITL form, spec §3.4).
    pub fn approval_request(mut self, id: &str, name: &str, arguments: &Value) -> Run {
        self.steps.push(Step::Approval {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments: arguments.to_string(),
        });
        self
    }

    /// The `response` completed, with every completed message as its `output`.
    pub fn completed(mut self) -> Run {
        self.steps.push(Step::Completed);
        self
    }

    /// The `response` failed with `error {code, message}` (an exception in the agent).
    pub fn failed(mut self, code: &str, message: &str) -> Run {
        self.steps
            .push(Step::Failed(code.to_owned(), message.to_owned()));
        self
    }

    /// Waits here until the test calls [`Upstream::release`].
    pub fn gate(mut self) -> Run {
        self.steps.push(Step::Gate);
        self
    }

    /// Keeps the stream open until the client leaves.
    pub fn hang(mut self) -> Run {
        self.steps.push(Step::Hang);
        self
    }

    /// Cuts the connection in the middle of the body.
    pub fn cut(mut self) -> Run {
        self.steps.push(Step::Cut);
        self
    }

    /// The reply to a request in `session_id` (the n-th run gets `response_<n>` and `msg_<n>_<m>` ids).
    fn reply(&self, session_id: &Value, nth: usize) -> Reply {
        let mut frames = Frames {
            reply: Reply::sse(),
            sequence: 0,
            output: Vec::new(),
            response_id: format!("response_{nth}"),
            session_id: session_id.clone(),
            messages: 0,
            nth,
            open_text: None,
        };
        if !self.bare {
            frames.send(frames.response("created"));
            frames.send(frames.response("in_progress"));
        }
        for step in &self.steps {
            frames.play(step);
        }
        frames.reply
    }
}

/// Renders a run's steps as frames, numbering them and keeping the completed messages.
struct Frames {
    reply: Reply,
    sequence: u64,
    output: Vec<Value>,
    response_id: String,
    session_id: Value,
    messages: usize,
    nth: usize,
    /// The id and text so far of the text message left open.
    open_text: Option<(String, String)>,
}

impl Frames {
    fn with(&mut self, step: impl FnOnce(Reply) -> Reply) {
        let reply = std::mem::replace(&mut self.reply, Reply::sse());
        self.reply = step(reply);
    }

    /// Numbers `event` and sends it; returns it as sent.
    fn send(&mut self, mut event: Value) -> Value {
        event["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.with(|reply| reply.event(event.clone()));
        event
    }

    fn response(&self, status: &str) -> Value {
        json!({"sequence_number": null, "object": "response", "status": status, "error": null,
               "id": self.response_id, "created_at": 1795311189, "completed_at": null, "output": null,
               "usage": null, "session_id": self.session_id})
    }

    fn new_message_id(&mut self) -> String {
        self.messages += 1;
        format!("msg_{}_{}", self.nth, self.messages)
    }

    fn message(id: &str, kind: &str, role: &str, status: &str, content: Value) -> Value {
        json!({"sequence_number": null, "object": "message", "status": status, "error": null, "id": id,
               "type": kind, "role": role, "content": content, "code": null, "message": null,
               "usage": null, "metadata": {}})
    }

    fn content(
        id: &str,
        status: &str,
        delta: Value,
        kind: &str,
        field: &str,
        value: Value,
    ) -> Value {
        let mut content = json!({"sequence_number": null, "object": "content", "status": status,
                                 "error": null, "type": kind, "index": 0, "delta": delta, "msg_id": id});
        content[field] = value;
        content
    }

    /// The completed message repeats a data content bare, as observed: no number, status, index or msg_id.
    fn bare_data(data: Value) -> Value {
        json!({"sequence_number": null, "object": "content", "status": null, "error": null, "type": "data",
               "index": null, "delta": false, "msg_id": null, "data": data})
    }

    /// The whole message (in_progress, contents, completed) of `kind` with data contents `snapshots`.
    fn data_message(&mut self, kind: &str, role: &str, snapshots: Vec<Value>) {
        let id = self.new_message_id();
        self.send(Self::message(&id, kind, role, "in_progress", Value::Null));
        let last = snapshots.last().cloned().unwrap_or(Value::Null);
        for data in snapshots {
            self.send(Self::content(
                &id,
                "in_progress",
                json!(false),
                "data",
                "data",
                data,
            ));
        }
        self.send(Self::content(
            &id,
            "completed",
            json!(false),
            "data",
            "data",
            last.clone(),
        ));
        self.complete(Self::message(
            &id,
            kind,
            role,
            "completed",
            json!([Self::bare_data(last)]),
        ));
    }

    fn complete(&mut self, message: Value) {
        let sent = self.send(message);
        self.output.push(sent);
    }

    /// Streams `deltas` into the open text message.
    fn text_deltas(&mut self, deltas: &[String]) {
        let (id, text) = self.open_text.clone().expect("a text message is open");
        for delta in deltas {
            self.send(Self::content(
                &id,
                "in_progress",
                json!(true),
                "text",
                "text",
                json!(delta),
            ));
        }
        self.open_text = Some((id, text + &deltas.concat()));
    }

    fn play(&mut self, step: &Step) {
        match step {
            Step::TextOpen(deltas) => {
                let id = self.new_message_id();
                self.send(Self::message(
                    &id,
                    "message",
                    "assistant",
                    "in_progress",
                    Value::Null,
                ));
                self.open_text = Some((id, String::new()));
                self.text_deltas(deltas);
            }
            Step::TextClose(deltas) => {
                self.text_deltas(deltas);
                let (id, text) = self.open_text.take().expect("close_text after open_text");
                let whole =
                    Self::content(&id, "completed", Value::Null, "text", "text", json!(text));
                let whole = self.send(whole);
                self.complete(Self::message(
                    &id,
                    "message",
                    "assistant",
                    "completed",
                    json!([whole]),
                ));
            }
            Step::Call {
                kind,
                call_id,
                name,
                snapshots,
            } => {
                let data = |arguments: &str| json!({"call_id": call_id, "name": name, "arguments": arguments});
                let snapshots = std::iter::once("")
                    .chain(snapshots.iter().map(String::as_str))
                    .map(data)
                    .collect();
                self.data_message(kind, "assistant", snapshots);
            }
            Step::Output {
                kind,
                call_id,
                name,
                output,
            } => {
                let data =
                    |output: &str| json!({"call_id": call_id, "name": name, "output": output});
                self.data_message(kind, "tool", vec![data(""), data(output)]);
            }
            Step::Approval {
                id,
                name,
                arguments,
            } => {
                let message_id = self.new_message_id();
                let data =
                    json!({"id": id, "name": name, "arguments": arguments, "server_label": "mcp"});
                let content =
                    Self::content(&message_id, "completed", json!(false), "data", "data", data);
                self.complete(Self::message(
                    &message_id,
                    "mcp_approval_request",
                    "assistant",
                    "completed",
                    json!([content]),
                ));
            }
            Step::Completed => {
                let mut response = self.response("completed");
                response["completed_at"] = json!(1795311190);
                response["output"] = json!(self.output);
                self.send(response);
            }
            Step::Failed(code, message) => {
                let mut response = self.response("failed");
                response["error"] = json!({"code": code, "message": message});
                self.send(response);
            }
            Step::BareError(text) => {
                let frame = format!("data: {}\n\n", json!({"error": text}));
                self.with(|reply| reply.frame(&frame));
            }
            Step::Gate => self.with(Reply::gate),
            Step::Hang => self.with(Reply::hang),
            Step::Cut => self.with(Reply::close_mid_stream),
        }
    }
}

/// A scripted runtime answering the n-th request with the n-th run (the last one repeats).
pub async fn runtime(runs: impl IntoIterator<Item = Run>) -> Upstream {
    let runs: Vec<Run> = runs.into_iter().collect();
    assert!(!runs.is_empty(), "a scripted runtime needs a run");
    Upstream::answer_with(move |request, nth| {
        runs[nth.min(runs.len() - 1)].reply(&request.body["session_id"], nth + 1)
    })
    .await
}

/// A runtime over two turns: it answers "Sunny.", then "Rain.".
pub async fn sunny_then_rain() -> Upstream {
    runtime([
        Run::new().text(&["Sunny."]).completed(),
        Run::new().text(&["Rain."]).completed(),
    ])
    .await
}

/// A scripted runtime answering each request with the run `pick` chooses for it (an answer that depends on
/// the request's `input` or `tools`).
pub async fn runtime_with(pick: impl Fn(&Received) -> Run + Send + Sync + 'static) -> Upstream {
    Upstream::answer_with(move |request, nth| {
        pick(request).reply(&request.body["session_id"], nth + 1)
    })
    .await
}

fn owned(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| (*t).to_owned()).collect()
}

/// The `input` the runtime received in its n-th request.
pub fn input_of(runtime: &Upstream, nth: usize) -> Vec<Value> {
    let received = runtime.received();
    let request = received
        .get(nth)
        .unwrap_or_else(|| panic!("no request {nth}: {received:#?}"));
    request.body["input"]
        .as_array()
        .unwrap_or_else(|| panic!("input is a list: {}", request.body))
        .clone()
}

/// `(type, role, text or data)` of each input message: what a test compares.
pub fn summary(input: &[Value]) -> Vec<(String, String, Value)> {
    input
        .iter()
        .map(|m| {
            let content = &m["content"][0];
            let body = content
                .get("text")
                .filter(|t| t.is_string())
                .or_else(|| content.get("data"))
                .cloned()
                .unwrap_or(Value::Null);
            let field = |name: &str| m[name].as_str().unwrap_or("").to_owned();
            (field("type"), field("role"), body)
        })
        .collect()
}

/// The `type` of each message of a runtime's input, in order.
pub fn input_types(input: &[Value]) -> Vec<&str> {
    input.iter().map(|m| m["type"].as_str().unwrap()).collect()
}

/// The [`summary`] of the weather conversation's second input: "Weather in Paris?", the answer "Sunny.",
/// then "And tomorrow?".
pub fn sunny_then_tomorrow() -> Vec<(String, String, Value)> {
    vec![
        ("message".into(), "user".into(), json!("Weather in Paris?")),
        ("message".into(), "assistant".into(), json!("Sunny.")),
        ("message".into(), "user".into(), json!("And tomorrow?")),
    ]
}

// --- The client -------------------------------------------------------------------------------------------------

/// A user text message, as `HTTPAgentAPIClient` writes it.
pub fn user(id: &str, text: &str) -> Value {
    json!({"object": "message", "status": "created", "id": id, "type": "message", "role": "user",
           "content": [{"object": "content", "type": "text", "delta": false, "text": text}]})
}

/// An `AgentRequest` in `session_id` with these input messages.
pub fn request(session_id: &str, input: Value) -> Value {
    json!({"input": input, "stream": true, "n": 1, "session_id": session_id, "user_id": "u1"})
}

/// A client tool in the request's `tools`.
pub fn tool(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name, "description": format!("{name} (client side)"),
           "parameters": {"type": "object", "properties": {"color": {"type": "string"}}}}})
}

/// The input message answering a client tool call.
pub fn function_output(call_id: &str, name: &str, output: &str) -> Value {
    json!({"type": "function_call_output", "role": "tool", "content": [
        {"type": "data", "data": {"call_id": call_id, "name": name, "output": output}}]})
}

/// The input message answering an `mcp_approval_request`.
pub fn approval_response(request_id: &str, approve: bool, reason: Option<&str>) -> Value {
    json!({"type": "mcp_approval_response", "role": "user", "content": [
        {"type": "data", "data": {"approval_request_id": request_id, "approve": approve, "reason": reason}}]})
}

/// The next request of a conversation: the last one's input, the run's output, then `more`.
pub fn next_request(
    last: &Value,
    events: &[Value],
    more: impl IntoIterator<Item = Value>,
) -> Value {
    let mut input = last["input"].as_array().cloned().unwrap_or_default();
    input.extend(output(events));
    input.extend(more);
    let mut next = last.clone();
    next["input"] = Value::Array(input);
    next
}

/// The client-tool scenario's first request in `session_id`: "Make it blue", with the client tool
/// `change_background` declared.
pub fn make_it_blue(session_id: &str) -> Value {
    let mut first = request(session_id, json!([user("msg_u1", "Make it blue")]));
    first["tools"] = json!([tool("change_background")]);
    first
}

/// The client-tool scenario's second request: after `first` and its run's `events`, the client's answer
/// "done" to its `change_background` call `call_bg`.
pub fn background_changed(first: &Value, events: &[Value]) -> Value {
    next_request(
        first,
        events,
        [function_output("call_bg", "change_background", "done")],
    )
}

/// `POST url` (the route's `/process`): the stream once the head arrived, checked: 200, the runtime's SSE
/// headers.
pub async fn start(url: &str, body: &Value) -> SseStream {
    let response = post_json(url, body).await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        "text/event-stream; charset=utf-8"
    );
    response.sse()
}

/// Runs one request to its end; checks the lifecycle and returns the objects.
pub async fn run(url: &str, body: &Value) -> Vec<Value> {
    let events = start(url, body).await.rest().await;
    check(&events, body);
    events
}

/// What every stream must be: sequence numbers 0, 1, 2, …; `response` created, in_progress, then exactly one
/// terminal response, last, all with one id and the request's session; every field of a response written.
pub fn check(events: &[Value], body: &Value) {
    assert!(events.len() >= 3, "{events:#?}");
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], json!(n), "{event}");
    }
    assert_eq!(events[0]["status"], "created", "{events:#?}");
    assert_eq!(events[1]["status"], "in_progress", "{events:#?}");
    let terminal = |e: &Value| {
        e["object"] == "response"
            && matches!(
                e["status"].as_str(),
                Some("completed" | "failed" | "canceled")
            )
    };
    assert_eq!(
        events.iter().filter(|e| terminal(e)).count(),
        1,
        "one terminal response: {events:#?}"
    );
    assert!(terminal(events.last().unwrap()), "{events:#?}");
    for event in events.iter().filter(|e| e["object"] == "response") {
        assert_eq!(event["id"], events[0]["id"]);
        assert_eq!(event["session_id"], body["session_id"]);
        for field in ["error", "created_at", "completed_at", "output", "usage"] {
            assert!(event.get(field).is_some(), "{field} is written: {event}");
        }
    }
}

/// The terminal response (the last object).
pub fn terminal(events: &[Value]) -> &Value {
    events.last().expect("a stream")
}

/// The status of the terminal response.
pub fn status(events: &[Value]) -> &str {
    terminal(events)["status"].as_str().unwrap_or("?")
}

/// The `error {code, message}` of a `failed` run.
pub fn error(events: &[Value]) -> &Value {
    let last = terminal(events);
    assert_eq!(last["status"], "failed", "{events:#?}");
    &last["error"]
}

/// The completed messages of a run (its terminal response's `output`).
pub fn output(events: &[Value]) -> Vec<Value> {
    terminal(events)["output"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The streamed text deltas, in order.
pub fn deltas(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .filter(|e| e["object"] == "content" && e["type"] == "text" && e["delta"] == true)
        .map(|e| e["text"].as_str().unwrap_or(""))
        .collect()
}

/// The text of the completed `message` messages, joined.
pub fn text(events: &[Value]) -> String {
    output(events)
        .iter()
        .filter(|m| m["type"] == "message")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(str::to_owned))
        .collect()
}

/// The completed messages of `kind`, in order.
pub fn messages(events: &[Value], kind: &str) -> Vec<Value> {
    output(events)
        .into_iter()
        .filter(|m| m["type"] == kind)
        .collect()
}

/// The only completed message of `kind`.
pub fn only(events: &[Value], kind: &str) -> Value {
    let found = messages(events, kind);
    assert_eq!(found.len(), 1, "one {kind}: {events:#?}");
    found.into_iter().next().unwrap()
}

/// The data of a message's first content.
pub fn data(message: &Value) -> &Value {
    &message["content"][0]["data"]
}

/// The `type` of each completed message, in order.
pub fn kinds(events: &[Value]) -> Vec<String> {
    output(events)
        .iter()
        .map(|m| m["type"].as_str().unwrap_or("?").to_owned())
        .collect()
}
