//! A2A 0.2.5 for the tests: a scripted A2A agent (the upstream of an A2A outbound) and an A2A client (against
//! an A2A inbound route).
//!
//! The scripted agent answers JSON-RPC calls by method: the n-th `message/stream` gets the n-th scripted
//! [`Answer`] for that method (the last one repeats), every JSON-RPC response echoing the request's `id`.
//! Streams are framed like a2a-sdk 0.2.13: `data: <json>\r\n\r\n` (CRLF), `text/event-stream; charset=utf-8`.
//!
//! ```ignore
//! let task = a2a::task("task-1", "ctx-1");
//! let agent = a2a::Agent::new()
//!     .on("message/stream", task.streams(&["Hel", "lo"]))
//!     .serve()
//!     .await;
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{Method, Request};
use http_body_util::Full;
use serde_json::{json, Value};

use super::{send, Received, Reply, SseStream, Upstream};

// --- The scripted agent ------------------------------------------------------------------------------------

/// A scripted A2A agent, built with [`Agent::on`] and started with [`Agent::serve`].
///
/// Unscripted calls: `tasks/cancel` answers the named task as `canceled`; anything else is a -32601 error.
/// `GET …/.well-known/agent.json` serves the [`Agent::card`] when there is one (404 otherwise).
#[derive(Default)]
pub struct Agent {
    answers: HashMap<String, Vec<Answer>>,
    card: Option<Value>,
}

impl Agent {
    pub fn new() -> Agent {
        Agent::default()
    }

    /// The answer to the next call of `method` (the last one answers every later call).
    pub fn on(mut self, method: &str, answer: Answer) -> Agent {
        self.answers
            .entry(method.to_owned())
            .or_default()
            .push(answer);
        self
    }

    /// The agent card, served at both well-known paths.
    pub fn card(mut self, card: Value) -> Agent {
        self.card = Some(card);
        self
    }

    pub async fn serve(self) -> Upstream {
        let calls: Mutex<HashMap<String, usize>> = Mutex::new(HashMap::new());
        Upstream::answer_with(move |request, _| {
            if request.method == Method::GET {
                return match &self.card {
                    Some(card) if request.path.contains("/.well-known/") => Reply::status(200)
                        .header("content-type", "application/json")
                        .body(&card.to_string()),
                    _ => Reply::status(404).body("no such card"),
                };
            }
            let method = rpc_method(request).to_owned();
            let nth = {
                let mut calls = calls.lock().expect("lock");
                let count = calls.entry(method.clone()).or_default();
                *count += 1;
                *count - 1
            };
            let id = &request.body["id"];
            match self.answers.get(&method) {
                Some(answers) => answers[nth.min(answers.len() - 1)].reply(id),
                None if method == "tasks/cancel" => {
                    let task_id = request.body["params"]["id"].as_str().unwrap_or("");
                    reply(json!({"kind": "task", "id": task_id, "contextId": "",
                                 "status": {"state": "canceled"}}))
                    .reply(id)
                }
                None => error(-32601, "Method not found").reply(id),
            }
        })
        .await
    }
}

/// What the agent answers to one call: an SSE stream of JSON-RPC responses ([`stream`]) or one JSON
/// response ([`reply`], [`error`]).
#[derive(Clone, Debug)]
pub struct Answer {
    stream: bool,
    steps: Vec<Step>,
}

#[derive(Clone, Debug)]
enum Step {
    Result(Value),
    Error(i64, String),
    Ping,
    Gate,
    Hang,
}

/// A `message/stream` answer: one SSE event per result.
pub fn stream(results: impl IntoIterator<Item = Value>) -> Answer {
    Answer {
        stream: true,
        steps: results.into_iter().map(Step::Result).collect(),
    }
}

/// A JSON answer holding `result` (a `message/send`, `tasks/get` or `tasks/cancel` result).
pub fn reply(result: Value) -> Answer {
    Answer {
        stream: false,
        steps: vec![Step::Result(result)],
    }
}

/// A JSON answer holding a JSON-RPC error (HTTP 200).
pub fn error(code: i64, message: &str) -> Answer {
    Answer {
        stream: false,
        steps: vec![Step::Error(code, message.to_owned())],
    }
}

impl Answer {
    /// One more result event.
    pub fn then(mut self, result: Value) -> Answer {
        self.steps.push(Step::Result(result));
        self
    }

    /// An event holding a JSON-RPC error (what agents send when a stream fails after it started).
    pub fn error(mut self, code: i64, message: &str) -> Answer {
        self.steps.push(Step::Error(code, message.to_owned()));
        self
    }

    /// An a2a-sdk keep-alive comment, `: ping - <timestamp>`.
    pub fn ping(mut self) -> Answer {
        self.steps.push(Step::Ping);
        self
    }

    /// Waits here until the test calls [`Upstream::release`].
    pub fn gate(mut self) -> Answer {
        self.steps.push(Step::Gate);
        self
    }

    /// Keeps the stream open until the client leaves.
    pub fn hang(mut self) -> Answer {
        self.steps.push(Step::Hang);
        self
    }

    /// The HTTP reply to the request with this `id` (for agents that pick their answer by what was asked).
    pub fn reply(&self, id: &Value) -> Reply {
        let response = |step: &Step| match step {
            Step::Result(result) => Some(json!({"id": id, "jsonrpc": "2.0", "result": result})),
            Step::Error(code, message) => Some(
                json!({"id": id, "jsonrpc": "2.0", "error": {"code": code, "message": message}}),
            ),
            _ => None,
        };
        if !self.stream {
            let body = self.steps.iter().find_map(response).expect("a JSON answer");
            return Reply::status(200)
                .header("content-type", "application/json")
                .body(&body.to_string());
        }
        let mut reply = Reply::sse().header("content-type", "text/event-stream; charset=utf-8");
        for step in &self.steps {
            reply = match step {
                Step::Result(_) | Step::Error(..) => {
                    let response = response(step).expect("a response");
                    reply.frame(&format!("data: {response}\r\n\r\n"))
                }
                Step::Ping => reply.frame(": ping - 2025-07-15 14:50:28.575338+00:00\r\n\r\n"),
                Step::Gate => reply.gate(),
                Step::Hang => reply.hang(),
            };
        }
        reply
    }
}

/// One upstream task, to script what the agent says about it.
#[derive(Clone, Debug)]
pub struct Task {
    pub id: String,
    pub context_id: String,
}

pub fn task(id: &str, context_id: &str) -> Task {
    Task {
        id: id.to_owned(),
        context_id: context_id.to_owned(),
    }
}

impl Task {
    /// The whole task in `state` (a stream's first event, a `tasks/*` result).
    pub fn in_state(&self, state: &str) -> Value {
        json!({"kind": "task", "id": self.id, "contextId": self.context_id, "status": {"state": state}})
    }

    pub fn submitted(&self) -> Value {
        self.in_state("submitted")
    }

    pub fn working(&self) -> Value {
        self.status("working", None, false)
    }

    /// A text chunk of artifact `artifact`.
    pub fn chunk(&self, artifact: &str, text: &str, append: bool, last_chunk: bool) -> Value {
        json!({"kind": "artifact-update", "taskId": self.id, "contextId": self.context_id,
               "artifact": {"artifactId": artifact, "name": "response", "parts": [{"kind": "text", "text": text}]},
               "append": append, "lastChunk": last_chunk})
    }

    pub fn completed(&self) -> Value {
        self.status("completed", None, true)
    }

    /// The final `input-required` status asking `question`.
    pub fn input_required(&self, question: &str) -> Value {
        self.status("input-required", Some(question), true)
    }

    /// The final `failed` status explaining why.
    pub fn failed(&self, why: &str) -> Value {
        self.status("failed", Some(why), true)
    }

    /// A `status-update`, with an agent message holding `text` if given.
    pub fn status(&self, state: &str, text: Option<&str>, is_final: bool) -> Value {
        let mut status = json!({"state": state, "timestamp": "2025-07-15T14:50:28.575338+00:00"});
        if let Some(text) = text {
            status["message"] = json!({"kind": "message", "role": "agent",
                "messageId": format!("{}-status", self.id), "taskId": self.id,
                "contextId": self.context_id, "parts": [{"kind": "text", "text": text}]});
        }
        json!({"kind": "status-update", "taskId": self.id, "contextId": self.context_id,
               "status": status, "final": is_final})
    }

    /// The usual streamed answer: the task, `working`, `chunks` as one artifact, `completed`.
    pub fn streams(&self, chunks: &[&str]) -> Answer {
        stream([self.submitted(), self.working()])
            .chunks(self, "a1", chunks)
            .then(self.completed())
    }
}

impl Answer {
    /// `chunks` of one artifact: the first one creates it, the others append, the last says so.
    pub fn chunks(self, task: &Task, artifact: &str, chunks: &[&str]) -> Answer {
        let count = chunks.len();
        chunks.iter().enumerate().fold(self, |answer, (i, text)| {
            answer.then(task.chunk(artifact, text, i > 0, i + 1 == count))
        })
    }
}

/// An agent that asks "Which city?" on the first call (task `task-1` in context `ctx-up-1` pauses in
/// `input-required`) and answers "Paris is sunny." on the second.
pub async fn asking_agent() -> Upstream {
    let task = task("task-1", "ctx-up-1");
    Agent::new()
        .on(
            "message/stream",
            stream([task.submitted(), task.working()]).then(task.input_required("Which city?")),
        )
        .on(
            "message/stream",
            // a2a-sdk first shows the continued task as it was: still paused.
            stream([task.in_state("input-required"), task.working()])
                .chunks(&task, "a2", &["Paris ", "is sunny."])
                .then(task.completed()),
        )
        .serve()
        .await
}

/// An agent over two turns of one context `ctx-up-1`: task `first_id` answers "Sunny.", then task
/// `second_id` answers "Rain.".
pub async fn sunny_then_rain(first_id: &str, second_id: &str) -> Upstream {
    let first = task(first_id, "ctx-up-1");
    let second = task(second_id, "ctx-up-1");
    Agent::new()
        .on("message/stream", first.streams(&["Sunny."]))
        .on("message/stream", second.streams(&["Rain."]))
        .serve()
        .await
}

/// An agent whose task `task_id` (context `ctx-up-1`) fails: "The weather service is down.".
pub async fn failing_agent(task_id: &str) -> Upstream {
    let task = task(task_id, "ctx-up-1");
    Agent::new()
        .on(
            "message/stream",
            stream([task.submitted(), task.working()])
                .then(task.failed("The weather service is down.")),
        )
        .serve()
        .await
}

/// [`failing_agent`] (task `task-1`), after streaming "Half an " of an answer.
pub async fn failing_after_half_an_answer() -> Upstream {
    let task = task("task-1", "ctx-up-1");
    Agent::new()
        .on(
            "message/stream",
            stream([task.submitted(), task.working()])
                .then(task.chunk("a1", "Half an ", false, false))
                .then(task.failed("The weather service is down.")),
        )
        .serve()
        .await
}

/// An agent whose task `task_id` (context `ctx-up-1`) streams "Thinking" and then never ends: for tests of
/// what a client leaving does upstream.
pub async fn thinking_forever(task_id: &str) -> Upstream {
    let task = task(task_id, "ctx-up-1");
    Agent::new()
        .on(
            "message/stream",
            stream([task.submitted(), task.working()])
                .then(task.chunk("a1", "Thinking", false, false))
                .hang(),
        )
        .serve()
        .await
}

/// The JSON-RPC method of a request the agent received.
pub fn rpc_method(request: &Received) -> &str {
    request.body["method"].as_str().unwrap_or("")
}

/// The calls of `method` the agent received, in order.
pub fn calls(agent: &Upstream, method: &str) -> Vec<Received> {
    agent
        .received()
        .into_iter()
        .filter(|r| rpc_method(r) == method)
        .collect()
}

/// The first call of `method`, waiting for it (bounded).
pub async fn wait_for_call(agent: &Upstream, method: &str) -> Received {
    agent
        .wait_for(&format!("a {method} call"), |r| rpc_method(r) == method)
        .await
}

/// The message a `message/send` or `message/stream` call carried.
pub fn sent_message(call: &Received) -> &Value {
    &call.body["params"]["message"]
}

/// The text of a message's text parts, concatenated.
pub fn message_text(message: &Value) -> String {
    message["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["text"].as_str())
        .collect()
}

// --- The client -----------------------------------------------------------------------------------------------

/// A user message with a fresh `messageId`.
pub fn message(text: &str) -> Value {
    json!({"kind": "message", "role": "user", "messageId": agent_bridge::model::new_id("m"),
           "parts": [{"kind": "text", "text": text}]})
}

/// A user message in a conversation.
pub fn message_in(context_id: &str, text: &str) -> Value {
    let mut message = message(text);
    message["contextId"] = json!(context_id);
    message
}

/// A user message that answers `task` (a Task or a stream result naming it): its `taskId` and `contextId`.
pub fn answer_to(task: &Value, text: &str) -> Value {
    let mut message = message(text);
    message["taskId"] = task.get("taskId").unwrap_or(&task["id"]).clone();
    message["contextId"] = task["contextId"].clone();
    message
}

fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

async fn post(url: &str, body: &Value, accept: &str) -> super::Response {
    let request = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, accept)
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a valid request");
    send(request).await
}

/// A JSON-RPC call answered with JSON: the whole response, checked: HTTP 200, `application/json`, the id
/// echoed.
pub async fn call(url: &str, method: &str, params: Value) -> Value {
    let id = next_id();
    let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let response = post(url, &request, "application/json").await;
    assert_eq!(response.status, 200, "JSON-RPC answers are HTTP 200");
    assert_eq!(response.header("content-type"), "application/json");
    let body = response.json().await;
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["id"], id, "the response echoes the request id");
    body
}

/// A JSON-RPC call's `result`; fails on an error.
pub async fn result(url: &str, method: &str, params: Value) -> Value {
    let mut body = call(url, method, params).await;
    assert!(body.get("error").is_none(), "{method} failed: {body}");
    body["result"].take()
}

/// `message/send`: the task it returns.
pub async fn send_message(url: &str, message: Value) -> Value {
    result(url, "message/send", json!({"message": message})).await
}

/// `tasks/get`.
pub async fn get_task(url: &str, task_id: &str) -> Value {
    result(url, "tasks/get", json!({"id": task_id})).await
}

/// `tasks/cancel`: the canceled task.
pub async fn cancel_task(url: &str, task_id: &str) -> Value {
    result(url, "tasks/cancel", json!({"id": task_id})).await
}

/// `message/stream`: its stream once the head arrived, checked: HTTP 200, `text/event-stream`.
pub async fn stream_message(url: &str, message: Value) -> ResultStream {
    let (id, response) = post_stream(url, message).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), "text/event-stream");
    ResultStream {
        id,
        sse: response.sse(),
    }
}

/// What a `message/stream` call got back, unchecked, for clients that report it rather than assert it.
pub enum StreamAnswer {
    /// HTTP 200 `text/event-stream`: the results (or errors) as they come.
    Stream(ResultStream),
    /// Anything else: a JSON-RPC error answered as JSON, an HTTP error.
    Other(super::Response),
}

/// `message/stream`, whatever comes back.
pub async fn try_stream_message(url: &str, message: Value) -> StreamAnswer {
    let (id, response) = post_stream(url, message).await;
    if response.status == 200
        && response
            .header("content-type")
            .starts_with("text/event-stream")
    {
        StreamAnswer::Stream(ResultStream {
            id,
            sse: response.sse(),
        })
    } else {
        StreamAnswer::Other(response)
    }
}

/// Sends `message/stream`: the request's id and the response.
async fn post_stream(url: &str, message: Value) -> (u64, super::Response) {
    let id = next_id();
    let request = json!({"jsonrpc": "2.0", "id": id, "method": "message/stream",
                         "params": {"message": message}});
    (id, post(url, &request, "text/event-stream").await)
}

/// The results of a `message/stream` answer, read as they come.
pub struct ResultStream {
    id: u64,
    pub sse: SseStream,
}

impl ResultStream {
    /// The next result, `None` at the end. Fails on an error event or an id that is not the request's.
    pub async fn next(&mut self) -> Option<Value> {
        let mut response = self.next_response().await?;
        assert!(
            response.get("error").is_none(),
            "an error event: {response}"
        );
        Some(response["result"].take())
    }

    /// The next JSON-RPC response whole (a result or an error), `None` at the end. Fails on an id that is not
    /// the request's.
    pub async fn next_response(&mut self) -> Option<Value> {
        let response = self.sse.next().await?;
        assert_eq!(response["jsonrpc"], "2.0");
        assert_eq!(response["id"], self.id, "every event echoes the request id");
        Some(response)
    }

    /// Reads results until one of `kind` (`task`, `status-update`, `artifact-update`) arrives; returns all
    /// read, that one last.
    pub async fn until(&mut self, kind: &str) -> Vec<Value> {
        let mut results = Vec::new();
        loop {
            let result = self
                .next()
                .await
                .unwrap_or_else(|| panic!("the stream ended before a {kind}: {results:#?}"));
            let found = result["kind"] == kind;
            results.push(result);
            if found {
                return results;
            }
        }
    }

    /// Every remaining result, until the stream ends; checks that the last one is the only final status.
    pub async fn rest(&mut self) -> Vec<Value> {
        let mut results = Vec::new();
        while let Some(result) = self.next().await {
            results.push(result);
        }
        let finals = results.iter().filter(|r| r["final"] == true).count();
        assert_eq!(finals, 1, "one final status: {results:#?}");
        assert_eq!(
            results.last().map(|r| &r["final"]),
            Some(&json!(true)),
            "the final status is last: {results:#?}"
        );
        assert!(
            !String::from_utf8_lossy(&self.sse.raw).contains('\r'),
            "LF framing"
        );
        results
    }
}

/// Runs a `message/stream` to its end: every result, the final status last.
pub async fn stream_to_end(url: &str, message: Value) -> Vec<Value> {
    stream_message(url, message).await.rest().await
}

/// The final status of a stream's results (its last result).
pub fn final_status(results: &[Value]) -> &Value {
    let last = results.last().expect("results");
    assert_eq!(last["kind"], "status-update");
    assert_eq!(last["final"], true);
    &last["status"]
}

/// The text of a stream's artifact updates, concatenated.
pub fn streamed_text(results: &[Value]) -> String {
    results
        .iter()
        .filter(|r| r["kind"] == "artifact-update")
        .map(|r| message_text(&r["artifact"]))
        .collect()
}

/// The text of a task's artifacts, concatenated.
pub fn artifact_text(task: &Value) -> String {
    task["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(message_text)
        .collect()
}

/// The text of a status's message ("" when it has none).
pub fn status_text(status: &Value) -> String {
    message_text(&status["message"])
}
