//! A2A 0.2.5 in the matrix: its client (the inbound face's peer) and its scripted agent (the outbound face's
//! peer).
//!
//! The client streams each message with `message/stream`, keeps the `contextId` the first answer names, and
//! answers an `input-required` task with a message on that task. It reads what a user would read: artifact
//! text as it grows (a snapshot or a replaced artifact shows only what is new), status messages that do not
//! repeat the artifacts, a paused task's question as the pause, a failed task's reason as the error.
//!
//! The agent plays a [`Script`] the A2A way: it keeps each context's user messages (A2A sends only the new
//! message), asks approvals and questions with `input-required` and reads the answer on the paused task, has
//! no tool calls, and fails with a `failed` status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::peers::{
    answered, approval_arguments, decides, you_said, Heard, Input, Pause, Script, Seen,
    APPROVAL_TOOL, APPROVED_TEXT, FAILURE, GREETING, HELLO, NO_TOOLS, QUESTION, REJECTED_TEXT,
    WEATHER_TEXT,
};
use crate::support::a2a::{self as wire, Answer, ResultStream, StreamAnswer, Task};
use crate::support::{Response, Upstream};

pub const INBOUND_TRANSLATE: &[(&str, &str)] = &[];
pub const OUTBOUND_TRANSLATE: &[(&str, &str)] = &[];
pub const UPSTREAM_HEADERS: &[(&str, &str)] = &[];
/// The code the proxy gives a `failed` task ([`Script::FailMidStream`]): A2A errors have none, the state
/// stands for it.
pub const FAILURE_CODE: &str = "failed";

// --- The client ------------------------------------------------------------------------------------------------

pub struct Client {
    url: String,
    /// The conversation, as the first answer named it.
    context_id: Option<String>,
    /// The task of the latest exchange.
    task_id: Option<String>,
    /// Whether that task waits for the user's answer (`input-required`).
    paused: bool,
    /// The text of each artifact of that task so far, in order of appearance.
    artifacts: Vec<(String, String)>,
}

impl Client {
    /// The same conversation, now through the route served at `url` (another replica, a restarted proxy).
    pub fn retarget(&mut self, url: String) {
        self.url = url;
    }

    pub fn new(url: String) -> Client {
        Client {
            url,
            context_id: None,
            task_id: None,
            paused: false,
            artifacts: Vec::new(),
        }
    }

    pub async fn start(&mut self, input: Input) -> Run<'_> {
        let message = match input {
            Input::Say(text) => self.new_message(&text),
            Input::Answer(text) => self.answer(&text),
            Input::Approve(_) => panic!(
                "an A2A client is never asked for an approval: approvals reach it as input-required \
                 questions, answered in words"
            ),
            Input::ToolResult(_) => {
                panic!("an A2A client offers no tools, so it never owes a tool result")
            }
            Input::Cancel => return self.cancel().await,
        };
        let mut seen = Seen::default();
        let results = match wire::try_stream_message(&self.url, message).await {
            StreamAnswer::Stream(results) => Some(results),
            StreamAnswer::Other(response) => {
                seen.errors.push(error_of(response).await);
                None
            }
        };
        Run {
            client: self,
            results,
            seen,
            settled: false,
            results_seen: Vec::new(),
        }
    }

    /// `tasks/cancel` of the paused task: the exchange is its answer, which must be the task, canceled.
    async fn cancel(&mut self) -> Run<'_> {
        let task_id = match (&self.task_id, self.paused) {
            (Some(task_id), true) => task_id.clone(),
            _ => panic!("a cancel, but no A2A task is paused: {:?}", self.task_id),
        };
        let answer = wire::call(&self.url, "tasks/cancel", json!({ "id": task_id })).await;
        let mut seen = Seen::default();
        match answer.get("error") {
            Some(error) => seen.errors.push(error["message"].to_string()),
            None if answer["result"]["status"]["state"] != "canceled" => {
                seen.errors.push(format!("tasks/cancel answered {answer}"))
            }
            None => {
                let task = wire::get_task(&self.url, &task_id).await;
                assert_eq!(
                    task["status"]["state"], "canceled",
                    "tasks/get after the cancel: {task}"
                );
            }
        }
        Run {
            client: self,
            results: None,
            seen,
            settled: true,
            results_seen: Vec::new(),
        }
    }

    /// A user message in the conversation (a new one until the agent named it).
    fn new_message(&self, text: &str) -> Value {
        match &self.context_id {
            Some(context_id) => wire::message_in(context_id, text),
            None => wire::message(text),
        }
    }

    /// The answer to the paused task's question: a message on that task.
    fn answer(&mut self, text: &str) -> Value {
        let task_id = match (&self.task_id, self.paused) {
            (Some(task_id), true) => task_id,
            _ => panic!(
                "an answer, but no A2A task waits for one: {:?}",
                self.task_id
            ),
        };
        wire::answer_to(
            &json!({"taskId": task_id, "contextId": self.context_id}),
            text,
        )
    }

    /// Takes the ids an answer names; a new task starts with no artifacts shown.
    fn note_ids(&mut self, task_id: &Value, context_id: &Value) {
        if let Some(context_id) = context_id.as_str().filter(|id| !id.is_empty()) {
            self.context_id = Some(context_id.to_owned());
        }
        let Some(task_id) = task_id.as_str() else {
            return;
        };
        if self.task_id.as_deref() != Some(task_id) {
            self.task_id = Some(task_id.to_owned());
            self.artifacts.clear();
        }
    }

    /// Artifact `id` now reads `text`: returns what the user sees appear (a replaced artifact that does not
    /// extend the old text shows the new text whole).
    fn show_artifact(&mut self, id: &str, text: &str, append: bool) -> String {
        let index = match self.artifacts.iter().position(|(known, _)| known == id) {
            Some(index) => index,
            None => {
                self.artifacts.push((id.to_owned(), String::new()));
                self.artifacts.len() - 1
            }
        };
        let shown = &mut self.artifacts[index].1;
        let now = if append {
            format!("{shown}{text}")
        } else {
            text.to_owned()
        };
        let new = now.strip_prefix(shown.as_str()).unwrap_or(&now).to_owned();
        *shown = now;
        new
    }

    /// Whether a status message only repeats the artifacts' text (agents that put the answer in both).
    fn repeats_artifacts(&self, text: &str) -> bool {
        let texts: Vec<&str> = self
            .artifacts
            .iter()
            .map(|(_, text)| text.as_str())
            .collect();
        texts.concat().contains(text) || texts.join("\n").contains(text)
    }
}

/// The error a non-stream answer tells: its JSON-RPC error message, else its HTTP status and body.
async fn error_of(response: Response) -> String {
    let status = response.status;
    let body = response.bytes().await;
    match serde_json::from_slice::<Value>(&body) {
        Ok(answer) if answer["error"]["message"].is_string() => answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        _ => format!("HTTP {status}: {}", String::from_utf8_lossy(&body)),
    }
}

pub struct Run<'a> {
    client: &'a mut Client,
    /// The stream being read; `None` once it ended (or when the answer was not a stream).
    results: Option<ResultStream>,
    seen: Seen,
    /// Whether a final status arrived.
    settled: bool,
    /// Every stream result read, in order.
    results_seen: Vec<Value>,
}

impl Run<'_> {
    pub async fn until_text(&mut self) -> String {
        while self.seen.text.is_empty() {
            if !self.read_one().await {
                panic!("the exchange ended before any text: {:#?}", self.seen);
            }
        }
        self.seen.text.clone()
    }

    pub async fn finish(mut self) -> Seen {
        while self.read_one().await {}
        self.client.paused = self.seen.pause.is_some();
        if !self.results_seen.is_empty() {
            self.check_framing();
        }
        self.seen
    }

    /// Fails unless the stream is framed as an A2A task's: a new task shows `submitted` then `working`, each
    /// artifact's first chunk creates it and the others append to it, and it ends with a final status,
    /// `completed` unless the task paused or failed.
    fn check_framing(&self) {
        let results = &self.results_seen;
        if results[0]["kind"] == "task" && results[0]["status"]["state"] == "submitted" {
            assert_eq!(
                results.get(1).map(|r| &r["status"]["state"]),
                Some(&json!("working")),
                "A2A stream: {results:#?}"
            );
        }
        let chunks = results.iter().filter(|r| r["kind"] == "artifact-update");
        let mut artifacts: Vec<&Value> = Vec::new();
        for chunk in chunks {
            let id = &chunk["artifact"]["artifactId"];
            let new = !artifacts.contains(&id);
            assert_eq!(chunk["append"] == true, !new, "A2A stream: {results:#?}");
            if new {
                artifacts.push(id);
            }
        }
        assert!(
            artifacts.len() <= 1,
            "A2A stream: one text, one artifact: {results:#?}"
        );
        let last_chunk = results
            .iter()
            .rev()
            .find(|r| r["kind"] == "artifact-update");
        if let Some(last) = last_chunk {
            assert_eq!(last["lastChunk"], true, "A2A stream: {results:#?}");
        }
        let Some(last) = results.last().filter(|r| r["final"] == true) else {
            return; // a `message` answer, or no final status (an error the client reports)
        };
        if self.seen.errors.is_empty() && self.seen.pause.is_none() {
            assert_eq!(
                last["status"]["state"], "completed",
                "A2A stream: {results:#?}"
            );
        }
    }

    /// Cancels the running task, as an A2A client stops work: the answer is the task, `canceled`, the stream
    /// ends with that final status, and `tasks/get` says so.
    pub async fn leave(mut self) {
        let task_id = self
            .client
            .task_id
            .clone()
            .expect("a running task to cancel");
        let url = self.client.url.clone();
        let answer = wire::call(&url, "tasks/cancel", json!({ "id": task_id })).await;
        assert_eq!(
            answer["result"]["status"]["state"], "canceled",
            "tasks/cancel answered {answer}"
        );
        crate::support::within("the canceled stream's end", async {
            while self.read_one().await {}
        })
        .await;
        let last = self.results_seen.last().expect("the stream's results");
        assert_eq!(
            (&last["kind"], &last["final"], &last["status"]["state"]),
            (&json!("status-update"), &json!(true), &json!("canceled")),
            "the canceled task's stream: {:#?}",
            self.results_seen
        );
        let task = wire::get_task(&url, &task_id).await;
        assert_eq!(
            task["status"]["state"], "canceled",
            "tasks/get after the cancel: {task}"
        );
    }

    /// Reads one response into `seen`; false once the stream ended.
    async fn read_one(&mut self) -> bool {
        let Some(results) = self.results.as_mut() else {
            return false;
        };
        match results.next_response().await {
            Some(response) => {
                self.take(response);
                true
            }
            None => {
                self.results = None;
                if !self.settled && self.seen.errors.is_empty() {
                    let error = "the stream ended without a final status".to_owned();
                    self.seen.errors.push(error);
                }
                false
            }
        }
    }

    fn take(&mut self, response: Value) {
        if let Some(error) = response.get("error") {
            let message = error["message"].as_str().unwrap_or_default();
            return self.seen.errors.push(message.to_owned());
        }
        let result = &response["result"];
        self.results_seen.push(result.clone());
        match result["kind"].as_str().unwrap_or_default() {
            "task" => {
                self.client.note_ids(&result["id"], &result["contextId"]);
                for artifact in result["artifacts"].as_array().into_iter().flatten() {
                    self.artifact(artifact, false);
                }
                self.status(&result["status"], false);
            }
            "status-update" => {
                self.client
                    .note_ids(&result["taskId"], &result["contextId"]);
                self.status(&result["status"], result["final"] == true);
            }
            "artifact-update" => {
                self.client
                    .note_ids(&result["taskId"], &result["contextId"]);
                self.artifact(&result["artifact"], result["append"] == true);
            }
            "message" => {
                self.client.note_ids(&Value::Null, &result["contextId"]);
                self.seen.text.push_str(&wire::message_text(result));
                self.settled = true;
            }
            other => panic!("not an A2A stream result ({other:?}): {response}"),
        }
    }

    fn artifact(&mut self, artifact: &Value, append: bool) {
        let id = artifact["artifactId"].as_str().unwrap_or_default();
        let text = wire::message_text(artifact);
        let new = self.client.show_artifact(id, &text, append);
        self.seen.text.push_str(&new);
    }

    /// A status: a paused task's question is the pause, a failed task's reason the error, any other message
    /// text the user reads (unless it repeats the artifacts).
    fn status(&mut self, status: &Value, is_final: bool) {
        let text = wire::status_text(status);
        let state = status["state"].as_str().unwrap_or_default();
        self.seen.pause = None;
        match state {
            "input-required" | "auth-required" => {
                let text = shown_parts(&status["message"]);
                self.seen.pause = Some(Pause::Question { text });
            }
            "failed" | "rejected" | "unknown" if text.is_empty() => {
                self.seen.errors.push(format!("the task is {state}"))
            }
            "failed" | "rejected" | "unknown" => self.seen.errors.push(text),
            _ if text.is_empty() || self.client.repeats_artifacts(&text) => {}
            _ => self.seen.text.push_str(&text),
        }
        self.settled |= is_final;
    }
}

/// Everything a message shows, one part a line: text parts as they are, data parts as their JSON (where the
/// proxy puts what an approval is about when the prompt is only the agent's hint).
fn shown_parts(message: &Value) -> String {
    let parts = message["parts"].as_array().into_iter().flatten();
    let shown: Vec<String> = parts
        .map(|part| match part["kind"].as_str() {
            Some("text") => part["text"].as_str().unwrap_or_default().to_owned(),
            _ => part.get("data").unwrap_or(part).to_string(),
        })
        .collect();
    shown.join("\n")
}

// --- The agent -------------------------------------------------------------------------------------------------

pub struct Agent {
    upstream: Upstream,
    state: Arc<Mutex<Memory>>,
}

/// What the agent remembers across requests.
#[derive(Default)]
struct Memory {
    /// Each context's user messages, oldest first: A2A sends only the new message.
    said: HashMap<String, Vec<String>>,
    /// Each task the agent started, with its context.
    tasks: HashMap<String, String>,
    /// Tasks waiting in `input-required`.
    paused: Vec<String>,
    /// Tasks left running ([`Script::Hang`]).
    running: Vec<String>,
    /// Whether a `tasks/cancel` named a running or paused task.
    cancelled: bool,
    minted: u64,
}

impl Agent {
    pub async fn serve(script: Script) -> Agent {
        let state = Arc::new(Mutex::new(Memory::default()));
        let memory = Arc::clone(&state);
        let upstream = Upstream::answer_with(move |request, _| {
            let mut memory = memory.lock().expect("lock");
            let params = &request.body["params"];
            let answer = match wire::rpc_method(request) {
                "message/stream" => memory.play(script, &params["message"]),
                "tasks/cancel" => memory.cancel(params["id"].as_str().unwrap_or_default()),
                _ => wire::error(-32601, "Method not found"),
            };
            answer.reply(&request.body["id"])
        })
        .await;
        Agent { upstream, state }
    }

    pub fn url(&self) -> String {
        self.upstream.url()
    }

    pub fn release(&self) {
        self.upstream.release();
    }

    /// Each new message as said, each message on a task as the answer to its question, each `tasks/cancel`.
    pub fn heard(&self) -> Vec<Heard> {
        let received = self.upstream.received();
        let heard = received.iter().filter_map(|request| {
            let params = &request.body["params"];
            match wire::rpc_method(request) {
                "message/stream" if params["message"]["taskId"].is_string() => {
                    Some(Heard::Answer(wire::message_text(&params["message"])))
                }
                "message/stream" => Some(Heard::Said(wire::message_text(&params["message"]))),
                "tasks/cancel" => Some(Heard::Cancelled),
                _ => None,
            }
        });
        heard.collect()
    }

    /// Whether a `tasks/cancel` for an unfinished (running or paused) task arrived within `wait`.
    pub async fn cancelled(&self, wait: Duration) -> bool {
        let cancelled = async {
            while !self.state.lock().expect("lock").cancelled {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(wait, cancelled).await.is_ok()
    }
}

impl Memory {
    fn mint(&mut self, prefix: &str) -> String {
        self.minted += 1;
        format!("{prefix}-{}", self.minted)
    }

    /// The answer to a `message/stream` carrying `message`: a new task, or the paused task it answers.
    fn play(&mut self, script: Script, message: &Value) -> Answer {
        let text = wire::message_text(message);
        let context_id = match message["contextId"].as_str() {
            Some(context_id) => context_id.to_owned(),
            None => self.mint("ctx"),
        };
        // A message on a task continues it, which only a paused task can be.
        let (task_id, continued) = match message["taskId"].as_str() {
            Some(task_id) if self.unpause(task_id) => (task_id.to_owned(), true),
            Some(task_id) => {
                return wire::error(-32602, &format!("Task {task_id} is not waiting for input"))
            }
            None => (self.mint("task"), false),
        };
        self.tasks.insert(task_id.clone(), context_id.clone());
        let task = wire::task(&task_id, &context_id);
        match script {
            Script::Text => {
                let rest = GREETING
                    .strip_prefix(HELLO)
                    .expect("the greeting starts with hello");
                let (hello, artifact) = self.hello(&task);
                hello
                    .gate()
                    .then(task.chunk(&artifact, rest, true, true))
                    .then(task.completed())
            }
            Script::ServerTool => self.says(&task, continued, WEATHER_TEXT),
            Script::Memory => {
                let said = self.said.entry(context_id).or_default();
                said.push(text);
                let answer = you_said(said);
                self.says(&task, continued, &answer)
            }
            Script::Approval if continued => match decides(&text) {
                Some(true) => self.says(&task, continued, APPROVED_TEXT),
                Some(false) => self.says(&task, continued, REJECTED_TEXT),
                // Neither yes nor no: the agent asks again, as the proxy does for agents that ask in forms.
                None => self.asks_again(&task, &approval_question()),
            },
            Script::Approval => self.asks(&task, &approval_question()),
            Script::Question if continued => self.says(&task, continued, &answered(&text)),
            Script::Question => self.asks(&task, QUESTION),
            Script::ClientTool => self.says(&task, continued, NO_TOOLS),
            Script::FailMidStream => self.hello(&task).0.then(task.failed(FAILURE)),
            Script::Hang => {
                self.running.push(task_id);
                self.hello(&task).0.hang()
            }
        }
    }

    /// Starts the task and streams [`HELLO`] as the start of an artifact, returned with the artifact's id.
    fn hello(&mut self, task: &Task) -> (Answer, String) {
        let artifact = self.mint("artifact");
        let hello = opening(task, false).then(task.chunk(&artifact, HELLO, false, false));
        (hello, artifact)
    }

    /// Whether `task_id` was paused; it no longer is.
    fn unpause(&mut self, task_id: &str) -> bool {
        let paused = self.paused.len();
        self.paused.retain(|t| t != task_id);
        self.paused.len() < paused
    }

    /// Says `text` as one artifact and completes the task.
    fn says(&mut self, task: &Task, continued: bool, text: &str) -> Answer {
        let artifact = self.mint("artifact");
        opening(task, continued)
            .chunks(task, &artifact, &[text])
            .then(task.completed())
    }

    /// Pauses the task in `input-required`, asking `question`.
    fn asks(&mut self, task: &Task, question: &str) -> Answer {
        self.paused.push(task.id.clone());
        opening(task, false).then(task.input_required(question))
    }

    /// Pauses the continued task in `input-required` again, asking `question`.
    fn asks_again(&mut self, task: &Task, question: &str) -> Answer {
        self.paused.push(task.id.clone());
        opening(task, true).then(task.input_required(question))
    }

    /// `tasks/cancel`: the task, canceled.
    fn cancel(&mut self, task_id: &str) -> Answer {
        let Some(context_id) = self.tasks.get(task_id) else {
            return wire::error(-32001, "Task not found");
        };
        let task = wire::task(task_id, context_id);
        self.cancelled |= self
            .running
            .iter()
            .chain(&self.paused)
            .any(|t| t == task_id);
        wire::reply(task.in_state("canceled"))
    }
}

/// How a stream starts: the task as it is (a continued task, like a2a-sdk's, still shows paused), `working`.
fn opening(task: &Task, continued: bool) -> Answer {
    let first = if continued {
        task.in_state("input-required")
    } else {
        task.submitted()
    };
    wire::stream([first, task.working()])
}

/// The approval the agent asks for, in words.
fn approval_question() -> String {
    format!(
        "May I call `{APPROVAL_TOOL}` with {}? Answer yes or no.",
        approval_arguments()
    )
}
