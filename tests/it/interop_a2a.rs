//! Interop: the proxy's A2A faces against the real A2A 0.2.5 SDKs.
//!
//! - A2A inbound: the real clients `a2a-sdk` 0.2.13 (Python, `tests/interop/a2a/a2a_client.py`) and
//!   `@a2a-js/sdk` 0.2.5 (`tests/interop/a2a/drive.mjs`) resolve the card the proxy serves and talk to the
//!   built-in echo agent: `message/send`, `message/stream`, `tasks/get`, the `/ask` pause (input-required) and
//!   its answer, a second message in the same context, the spec's error codes.
//! - A2A outbound: the real `a2a-sdk` 0.2.13 server (`tests/interop/a2a/a2a_server.py`) behind the proxy, driven
//!   by the real `@ag-ui/client` (1.0.0 and 0.0.59, through `tests/interop/ag-ui/drive.mjs`: AG-UI → A2A, the
//!   flagship pair: text, the question as an `ask_user` call or an interrupt, context, failures) and by both
//!   SDK clients (A2A → A2A, cancel included).
//!
//! Every assertion is on what a real client saw (texts, task states, the tool the frontend is asked to run) or
//! on what the real server logged it received. Needs what `bash .ci/run` installs: `npm ci` in
//! `tests/interop/*/client-*/` and the Python venv `tests/interop/.venv`; without them the tests fail and say so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::Command;

use crate::support::interop::{require_installed, route, run_driver, Process};
use crate::support::{Proxy, Routes};

/// The pinned `@ag-ui/client` versions installed for `tests/it/interop_ag_ui.rs`.
const AG_UI_CLIENTS: [&str; 2] = ["1.0.0", "0.0.59"];
/// The pinned `@a2a-js/sdk` version: `tests/interop/a2a/client-js-VERSION/`.
const A2A_JS_VERSION: &str = "0.2.5";

/// The longest one client run (every step of a spec) may take.
const DRIVE_LIMIT: Duration = Duration::from_secs(40);
/// The longest the A2A server may take to print its port (Python imports a2a-sdk, grpc, pydantic first).
const START_LIMIT: Duration = Duration::from_secs(40);

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

fn a2a_dir() -> PathBuf {
    interop_dir().join("a2a")
}

fn venv_python() -> PathBuf {
    let python = interop_dir().join(".venv/bin/python");
    require_installed(&python, "the Python venv with a2a-sdk 0.2.13");
    python
}

// ---------------------------------------------------------------------------------------------------------
// The real A2A server

/// `a2a_server.py` (a2a-sdk 0.2.13) on a port of its choosing; killed when dropped. Its stderr, where it logs
/// every JSON-RPC request it received, is kept.
struct A2aServer(Process);

impl A2aServer {
    async fn start(streaming: bool) -> A2aServer {
        let what = "the a2a-sdk 0.2.13 server (a2a_server.py)";
        let mut command = Command::new(venv_python());
        command.arg("a2a_server.py");
        if !streaming {
            command.arg("--no-streaming");
        }
        A2aServer(Process::start(what, command, a2a_dir(), START_LIMIT).await)
    }

    /// The JSON-RPC endpoint (the card's `url`).
    fn url(&self) -> String {
        self.0.url("/")
    }

    fn log(&self) -> String {
        self.0.stderr()
    }

    /// The server's log lines `{"<kind>": {...}}`, in order.
    fn logged(&self, kind: &str) -> Vec<Value> {
        self.log()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|v| v.get(kind).cloned())
            .collect()
    }

    /// The JSON-RPC requests that carried a message with exactly this text.
    fn requests_saying(&self, text: &str) -> Vec<Value> {
        self.logged("rpc")
            .into_iter()
            .filter(|r| r["text"] == text)
            .collect()
    }

    /// The run the agent started for a message with exactly this text.
    fn run_for(&self, text: &str) -> Value {
        self.logged("run")
            .into_iter()
            .rfind(|r| r["text"] == text)
            .unwrap_or_else(|| {
                panic!(
                    "the A2A server ran nothing for {text:?}; its log:\n{}",
                    self.log()
                )
            })
    }
}

// ---------------------------------------------------------------------------------------------------------
// The real A2A clients

#[derive(Clone, Copy, Debug)]
enum A2aClient {
    /// `a2a-sdk` 0.2.13, `a2a_client.py`.
    Python,
    /// `@a2a-js/sdk` 0.2.5, `drive.mjs`.
    Js,
}

const A2A_CLIENTS: [A2aClient; 2] = [A2aClient::Python, A2aClient::Js];

impl A2aClient {
    fn name(self) -> String {
        match self {
            A2aClient::Python => "a2a-sdk 0.2.13".to_owned(),
            A2aClient::Js => format!("@a2a-js/sdk {A2A_JS_VERSION}"),
        }
    }

    fn command(self) -> Command {
        match self {
            A2aClient::Python => {
                let mut command = Command::new(venv_python());
                command.arg("a2a_client.py");
                command
            }
            A2aClient::Js => {
                let dir = a2a_dir().join(format!("client-js-{A2A_JS_VERSION}"));
                require_installed(
                    &dir.join("node_modules/@a2a-js/sdk/package.json"),
                    &format!("@a2a-js/sdk@{A2A_JS_VERSION}"),
                );
                let mut command = Command::new("node");
                command.arg("drive.mjs").arg(dir);
                command
            }
        }
    }

    /// Runs the client against the agent at `base` (card at `<base>/<cardPath>`), `spec` as documented in
    /// `a2a_client.py` and `drive.mjs`.
    async fn run(self, base: &str, spec: Value) -> A2aReport {
        let mut command = self.command();
        command
            .arg(base)
            .arg(spec.to_string())
            .current_dir(a2a_dir())
            .env("CLIENT_TIMEOUT_S", "30")
            .env("DRIVE_TIMEOUT_MS", "30000");
        let output = run_driver(
            command,
            DRIVE_LIMIT,
            &format!("the {} client", self.name()),
            base,
            &format!("cannot run the {} client", self.name()),
            "the client ran",
        )
        .await;
        A2aReport {
            client: self.name(),
            code: output.code,
            report: output.report,
            stderr: output.stderr,
        }
    }

    /// Runs the client and fails unless the SDK accepted everything it got.
    async fn accepted(self, base: &str, spec: Value) -> A2aReport {
        let report = self.run(base, spec).await;
        assert!(
            report.code == Some(0) && report.report["sdkError"].is_null(),
            "the {} client failed: {}",
            report.client,
            report.context()
        );
        let warnings = &report.report["warnings"];
        assert!(
            warnings.as_array().is_none_or(Vec::is_empty),
            "the {} client warned: {}",
            report.client,
            report.context()
        );
        report
    }
}

/// What one client run printed.
struct A2aReport {
    client: String,
    code: Option<i32>,
    report: Value,
    stderr: String,
}

impl A2aReport {
    fn context(&self) -> String {
        format!(
            "client {} (exit {:?})\nreport: {}\nstderr: {}",
            self.client, self.code, self.report, self.stderr
        )
    }

    fn card(&self) -> &Value {
        &self.report["card"]
    }

    /// The step named `name` (or, for unnamed steps, its index as a string); fails unless it got no JSON-RPC
    /// error.
    fn step(&self, name: &str) -> &Value {
        let steps = self.report["steps"].as_array();
        let step = steps
            .into_iter()
            .flatten()
            .enumerate()
            .find(|(index, s)| s["name"] == name || index.to_string() == name)
            .map(|(_, s)| s)
            .unwrap_or_else(|| panic!("no step {name}: {}", self.context()));
        assert!(
            step["error"].is_null(),
            "step {name} got a JSON-RPC error: {}",
            self.context()
        );
        step
    }

    /// The JSON-RPC error a step got.
    fn error(&self, name: &str) -> &Value {
        let step = self.report["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no step {name}: {}", self.context()));
        assert!(
            step["error"].is_object(),
            "step {name} got no JSON-RPC error: {}",
            self.context()
        );
        &step["error"]
    }

    /// The task a `send` or `get` step returned.
    fn task(&self, name: &str) -> &Value {
        let task = &self.step(name)["result"];
        assert_eq!(
            task["kind"],
            "task",
            "step {name} returned no task: {}",
            self.context()
        );
        task
    }

    /// The events a `stream` step saw.
    fn events(&self, name: &str) -> Vec<&Value> {
        self.step(name)["events"]
            .as_array()
            .into_iter()
            .flatten()
            .collect()
    }
}

/// The text of a task's artifacts, every text part in order.
fn artifact_text(task: &Value) -> String {
    task["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["parts"].as_array().into_iter().flatten())
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// The text of a message's text parts.
fn message_text(message: &Value) -> String {
    message["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// The text chunks of a stream's artifact updates, in order, as (text, append, lastChunk).
fn chunks(events: &[&Value]) -> Vec<(String, bool, bool)> {
    events
        .iter()
        .filter(|e| e["kind"] == "artifact-update")
        .map(|e| {
            (
                message_text(&e["artifact"]),
                e["append"].as_bool().unwrap_or(false),
                e["lastChunk"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// The stream's text: the chunks applied with their append semantics, every artifact in order.
fn streamed_text(events: &[&Value]) -> String {
    let mut artifacts: Vec<(String, String)> = Vec::new();
    for event in events.iter().filter(|e| e["kind"] == "artifact-update") {
        let id = event["artifact"]["artifactId"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let text = message_text(&event["artifact"]);
        match artifacts.iter_mut().find(|(known, _)| *known == id) {
            Some((_, existing)) if event["append"] == true => existing.push_str(&text),
            Some((_, existing)) => *existing = text,
            None => artifacts.push((id, text)),
        }
    }
    artifacts.into_iter().map(|(_, text)| text).collect()
}

/// The status updates of a stream as (state, final).
fn statuses(events: &[&Value]) -> Vec<(String, bool)> {
    events
        .iter()
        .filter(|e| e["kind"] == "status-update")
        .map(|e| {
            (
                e["status"]["state"].as_str().unwrap_or("").to_owned(),
                e["final"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------------------
// The real AG-UI client (tests/interop/ag-ui/drive.mjs, as in tests/it/interop_ag_ui.rs)

/// What one `node drive.mjs` run of `@ag-ui/client` printed.
struct AgUiDrive {
    client: String,
    code: Option<i32>,
    report: Value,
    stderr: String,
}

impl AgUiDrive {
    /// Runs the driver with the client `version` against `url`; fails unless every run resolved without a
    /// client-side warning about the proxy's stream.
    async fn accepted(version: &str, url: &str, spec: Value) -> AgUiDrive {
        let dir = interop_dir().join(format!("ag-ui/client-{version}"));
        require_installed(
            &dir.join("node_modules/@ag-ui/client/package.json"),
            &format!("@ag-ui/client@{version}"),
        );
        let mut command = Command::new("node");
        command
            .arg(interop_dir().join("ag-ui/drive.mjs"))
            .arg(&dir)
            .arg(url)
            .arg(spec.to_string())
            .env("DRIVE_TIMEOUT_MS", "30000");
        let output = run_driver(
            command,
            DRIVE_LIMIT,
            &format!("@ag-ui/client {version}"),
            url,
            "cannot run `node` (Node.js 20+ is needed for the interop tests)",
            "the driver ran",
        )
        .await;
        let drive = AgUiDrive {
            client: version.to_owned(),
            code: output.code,
            report: output.report,
            stderr: output.stderr,
        };
        assert!(
            drive.code == Some(0) && drive.report["rejected"].is_null(),
            "@ag-ui/client {version} rejected the stream: {}",
            drive.context()
        );
        let warnings: Vec<&str> = drive.report["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|w| w.contains("[ag-ui]") || w.contains("AG-UI"))
            .collect();
        assert!(
            warnings.is_empty(),
            "@ag-ui/client {version} warned about the stream: {warnings:?}\n{}",
            drive.context()
        );
        drive
    }

    fn context(&self) -> String {
        format!(
            "@ag-ui/client {} (exit {:?})\nreport: {}\nstderr: {}",
            self.client, self.code, self.report, self.stderr
        )
    }

    fn run_at(&self, index: usize) -> AgUiRun<'_> {
        let value = &self.report["runs"][index];
        assert!(value.is_object(), "no run {index}: {}", self.context());
        AgUiRun { drive: self, value }
    }
}

/// One `runAgent` call as the client saw it.
struct AgUiRun<'a> {
    drive: &'a AgUiDrive,
    value: &'a Value,
}

impl<'a> AgUiRun<'a> {
    fn context(&self) -> String {
        self.drive.context()
    }

    fn events(&self) -> Vec<&'a str> {
        self.value["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect()
    }

    /// The TEXT_MESSAGE_CONTENT deltas, in order.
    fn deltas(&self) -> Vec<String> {
        self.value["log"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
            .filter_map(|e| e["delta"].as_str())
            .map(str::to_owned)
            .collect()
    }

    fn new_messages(&self) -> Vec<&'a Value> {
        self.value["newMessages"]
            .as_array()
            .into_iter()
            .flatten()
            .collect()
    }

    fn assistant_text(&self) -> String {
        self.new_messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn tool_calls(&self) -> Vec<(String, Value)> {
        self.new_messages()
            .iter()
            .flat_map(|m| m["toolCalls"].as_array().into_iter().flatten())
            .map(|call| {
                let name = call["function"]["name"].as_str().unwrap_or("").to_owned();
                let args = call["function"]["arguments"].as_str().unwrap_or("");
                let args = serde_json::from_str(args).unwrap_or_else(|e| {
                    panic!(
                        "tool call arguments are not JSON ({e}): {args}\n{}",
                        self.context()
                    )
                });
                (name, args)
            })
            .collect()
    }

    fn run_errors(&self) -> Vec<(String, String)> {
        self.value["runErrors"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["code"].as_str().unwrap_or("").to_owned(),
                    e["message"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    /// RUN_STARTED first, RUN_FINISHED last, no RUN_ERROR, and the text travelled as AG-UI text messages.
    fn assert_finished(&self) {
        let events = self.events();
        assert_eq!(events.first(), Some(&"RUN_STARTED"), "{}", self.context());
        assert_eq!(events.last(), Some(&"RUN_FINISHED"), "{}", self.context());
        assert!(self.run_errors().is_empty(), "{}", self.context());
        assert!(
            !events.iter().any(|e| *e == "RAW" || *e == "CUSTOM"),
            "A2A text must reach AG-UI as text messages, not RAW/CUSTOM: {}",
            self.context()
        );
    }
}

fn user(text: &str) -> Value {
    json!([{"id": "u1", "role": "user", "content": text}])
}

// ---------------------------------------------------------------------------------------------------------
// (1) a2a-sdk 0.2.13 and @a2a-js/sdk 0.2.5 clients → A2A inbound → echo

#[tokio::test]
async fn sdk_clients_resolve_the_card_on_both_well_known_paths() {
    let skill = toml::toml! {
        id = "echo"
        name = "Echo"
        description = "Repeats what you say"
        tags = ["echo"]
    };
    let route = route("echo", "a2a", "echo")
        .card("name", "Echo")
        .card("description", "Streams your words back")
        .card("version", "2.1.0")
        .card("skills", vec![skill]);
    let proxy = Proxy::start(route).await;
    let base = proxy.url("/echo");
    for client in A2A_CLIENTS {
        for (path, version) in [
            ("/.well-known/agent.json", "0.2.5"),
            ("/.well-known/agent-card.json", "0.3.0"),
        ] {
            // Each card is used for a real call: the SDKs post to the card's `url`.
            let report = client
                .accepted(
                    &base,
                    json!({"cardPath": path, "steps": [{"op": "send", "name": "a", "text": "card check"}]}),
                )
                .await;
            let card = report.card();
            assert_eq!(card["name"], "Echo", "{}", report.context());
            assert_eq!(card["description"], "Streams your words back");
            assert_eq!(card["version"], "2.1.0");
            assert_eq!(card["protocolVersion"], version, "{}", report.context());
            assert_eq!(card["url"], base, "{}", report.context());
            assert_eq!(card["capabilities"]["streaming"], true);
            assert_eq!(card["skills"][0]["id"], "echo");
            assert_eq!(card["skills"][0]["tags"], json!(["echo"]));
            assert_eq!(card["defaultInputModes"], json!(["text/plain"]));
            let task = report.task("a");
            assert_eq!(task["status"]["state"], "completed");
            assert_eq!(artifact_text(task), "card check", "{}", report.context());
        }
    }
}

#[tokio::test]
async fn sdk_clients_send_stream_and_get_through_a2a_inbound() {
    let proxy = Proxy::start(route("echo", "a2a", "echo")).await;
    let base = proxy.url("/echo");
    for client in A2A_CLIENTS {
        let report = client
            .accepted(
                &base,
                json!({"steps": [
                    {"op": "send", "name": "sent", "text": "the quick brown 狐狸 🦊"},
                    {"op": "stream", "name": "streamed", "text": "stream these words"},
                    {"op": "get", "name": "got", "task": "sent"},
                    {"op": "get", "name": "got-stream", "task": "streamed"},
                    {"op": "send", "name": "again", "context": "sent", "text": "same context"},
                ]}),
            )
            .await;
        let ctx = report.context();

        // message/send: the completed task, the echoed text merged into its artifact.
        let sent = report.task("sent");
        assert_eq!(sent["status"]["state"], "completed", "{ctx}");
        assert_eq!(artifact_text(sent), "the quick brown 狐狸 🦊", "{ctx}");
        assert_eq!(sent["artifacts"].as_array().map(Vec::len), Some(1), "{ctx}");
        assert_eq!(message_text(&sent["history"][0]), "the quick brown 狐狸 🦊");
        let task_id = sent["id"].as_str().expect("task id");
        let context_id = sent["contextId"].as_str().expect("context id");

        // message/stream: the Task, working, one artifact in chunks, a final completed status.
        let events = report.events("streamed");
        assert_eq!(
            events.first().map(|e| &e["kind"]),
            Some(&json!("task")),
            "{ctx}"
        );
        assert_eq!(events[0]["status"]["state"], "submitted", "{ctx}");
        assert_eq!(
            statuses(&events),
            [
                ("working".to_owned(), false),
                ("completed".to_owned(), true)
            ],
            "{ctx}"
        );
        assert_eq!(
            events.last().map(|e| &e["kind"]),
            Some(&json!("status-update"))
        );
        let chunks = chunks(&events);
        let words: Vec<&str> = chunks
            .iter()
            .map(|(text, _, _)| text.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        assert_eq!(words, ["stream ", "these ", "words"], "{ctx}");
        assert!(!chunks[0].1, "the first chunk replaces: {ctx}");
        assert!(
            chunks[1..].iter().all(|c| c.1),
            "later chunks append: {ctx}"
        );
        assert!(
            chunks.last().is_some_and(|c| c.2),
            "lastChunk at the end: {ctx}"
        );
        assert_eq!(streamed_text(&events), "stream these words", "{ctx}");

        // tasks/get: both tasks, as they ended.
        let got = report.task("got");
        assert_eq!(got["id"], task_id, "{ctx}");
        assert_eq!(got["status"]["state"], "completed");
        assert_eq!(artifact_text(got), "the quick brown 狐狸 🦊", "{ctx}");
        let got_stream = report.task("got-stream");
        assert_eq!(got_stream["id"], events[0]["id"], "{ctx}");
        assert_eq!(got_stream["status"]["state"], "completed");
        assert_eq!(artifact_text(got_stream), "stream these words", "{ctx}");

        // A second message with the same contextId: a new task in the same context.
        let again = report.task("again");
        assert_eq!(again["contextId"], context_id, "{ctx}");
        assert_ne!(again["id"], task_id, "{ctx}");
        assert_eq!(again["status"]["state"], "completed");
        assert_eq!(artifact_text(again), "same context", "{ctx}");
    }
}

#[tokio::test]
async fn sdk_clients_answer_an_input_required_task() {
    let proxy = Proxy::start(route("echo", "a2a", "echo")).await;
    let base = proxy.url("/echo");
    for client in A2A_CLIENTS {
        let report = client
            .accepted(
                &base,
                json!({"steps": [
                    {"op": "send", "name": "asked", "text": "/ask Which colour?"},
                    {"op": "get", "name": "paused", "task": "asked"},
                    {"op": "send", "name": "answered", "task": "asked", "text": "blue"},
                    {"op": "stream", "name": "asked-stream", "text": "/ask Which size?"},
                    {"op": "stream", "name": "answered-stream", "task": "asked-stream", "text": "large"},
                    {"op": "send", "name": "asked-data", "text": "/ask Which city?"},
                    {"op": "send", "name": "answered-data", "task": "asked-data", "data": {"city": "Paris"}},
                ]}),
            )
            .await;
        let ctx = report.context();

        // message/send: the task pauses with the question as its status message.
        let asked = report.task("asked");
        assert_eq!(asked["status"]["state"], "input-required", "{ctx}");
        assert_eq!(asked["status"]["message"]["role"], "agent");
        assert_eq!(
            message_text(&asked["status"]["message"]),
            "Which colour?",
            "{ctx}"
        );
        assert_eq!(report.task("paused")["status"]["state"], "input-required");

        // The answer on the same task (taskId + contextId) completes it.
        let answered = report.task("answered");
        assert_eq!(answered["id"], asked["id"], "{ctx}");
        assert_eq!(answered["contextId"], asked["contextId"]);
        assert_eq!(answered["status"]["state"], "completed", "{ctx}");
        assert_eq!(artifact_text(answered), "You answered: blue", "{ctx}");

        // The same over message/stream: the pause is the final event.
        let events = report.events("asked-stream");
        let last = events.last().expect("events");
        assert_eq!(last["kind"], "status-update", "{ctx}");
        assert_eq!(last["status"]["state"], "input-required", "{ctx}");
        assert_eq!(last["final"], true);
        assert_eq!(message_text(&last["status"]["message"]), "Which size?");
        let events = report.events("answered-stream");
        assert_eq!(
            statuses(&events).last(),
            Some(&("completed".to_owned(), true)),
            "{ctx}"
        );
        assert_eq!(streamed_text(&events), "You answered: large", "{ctx}");
        let task_ids: Vec<&Value> = events
            .iter()
            .map(|e| {
                if e["kind"] == "task" {
                    &e["id"]
                } else {
                    &e["taskId"]
                }
            })
            .collect();
        let paused_id = &report.events("asked-stream")[0]["id"];
        assert!(task_ids.iter().all(|id| *id == paused_id), "{ctx}");

        // A data part answers as the structured value it is.
        let answered = report.task("answered-data");
        assert_eq!(answered["status"]["state"], "completed", "{ctx}");
        assert_eq!(
            artifact_text(answered),
            r#"You answered: {"city":"Paris"}"#,
            "{ctx}"
        );
    }
}

#[tokio::test]
async fn sdk_clients_get_the_spec_error_codes() {
    let proxy = Proxy::start(route("echo", "a2a", "echo")).await;
    let base = proxy.url("/echo");
    for (index, client) in A2A_CLIENTS.into_iter().enumerate() {
        let own_id = format!("task-chosen-by-client-{index}");
        let report = client
            .accepted(
                &base,
                json!({"steps": [
                    {"op": "get", "name": "get-unknown", "taskId": "task-that-never-was"},
                    {"op": "send", "name": "send-unsafe-id", "taskId": "task/that never was", "text": "hi"},
                    {"op": "send", "name": "send-own-id", "taskId": own_id, "text": "mine"},
                    {"op": "send", "name": "done", "text": "finish me"},
                    {"op": "send", "name": "send-terminal", "task": "done", "text": "once more"},
                ]}),
            )
            .await;
        let ctx = report.context();
        assert_eq!(report.error("get-unknown")["code"], -32001, "{ctx}");
        assert_eq!(report.error("send-unsafe-id")["code"], -32602, "{ctx}");
        let own = report.task("send-own-id");
        assert_eq!(own["id"], own_id.as_str(), "{ctx}");
        assert_eq!(own["status"]["state"], "completed", "{ctx}");
        let terminal = report.error("send-terminal");
        assert_eq!(terminal["code"], -32602, "{ctx}");
        assert!(
            terminal["message"]
                .as_str()
                .is_some_and(|m| m.contains("terminal state")),
            "{ctx}"
        );
    }

    // message/stream with invalid params (a task id that cannot name a new task): 200 text/event-stream
    // with one error event. a2a-sdk hands it over as an error response; @a2a-js/sdk 0.2.5 throws it.
    let spec = json!({"steps": [
        {"op": "stream", "name": "stream-unknown", "taskId": "task/that never was", "text": "hi"},
    ]});
    let python = A2aClient::Python.accepted(&base, spec.clone()).await;
    assert_eq!(
        python.error("stream-unknown")["code"],
        -32602,
        "{}",
        python.context()
    );
    let js = A2aClient::Js.run(&base, spec).await;
    assert_eq!(js.code, Some(1), "{}", js.context());
    let thrown = js.report["sdkError"]["message"].as_str().unwrap_or("");
    assert!(
        thrown.contains("SSE event contained an error") && thrown.contains("-32602"),
        "{}",
        js.context()
    );
}

#[tokio::test]
async fn sdk_clients_read_the_reply_in_the_status_message_when_the_route_says_so() {
    let proxy =
        Proxy::start(route("echo", "a2a", "echo").translate("a2a_status_message", true)).await;
    let base = proxy.url("/echo");
    for client in A2A_CLIENTS {
        let report = client
            .accepted(
                &base,
                json!({"steps": [
                    {"op": "send", "name": "sent", "text": "said twice"},
                    {"op": "stream", "name": "streamed", "text": "streamed twice"},
                ]}),
            )
            .await;
        let ctx = report.context();
        let sent = report.task("sent");
        assert_eq!(
            message_text(&sent["status"]["message"]),
            "said twice",
            "{ctx}"
        );
        assert_eq!(artifact_text(sent), "said twice", "{ctx}");
        let events = report.events("streamed");
        let last = events.last().expect("events");
        assert_eq!(last["status"]["state"], "completed", "{ctx}");
        assert_eq!(
            message_text(&last["status"]["message"]),
            "streamed twice",
            "{ctx}"
        );
        assert_eq!(streamed_text(&events), "streamed twice", "{ctx}");
    }
}

/// A green test means something only if the drivers report what the SDKs refuse: a base URL with no card
/// behind it fails both clients (exit 1, the SDK's error in the report).
#[tokio::test]
async fn the_drivers_report_what_the_sdks_reject() {
    let proxy = Proxy::start(route("echo", "a2a", "echo")).await;
    for client in A2A_CLIENTS {
        let report = client
            .run(
                &proxy.url("/nowhere"),
                json!({"steps": [{"op": "send", "text": "hi"}]}),
            )
            .await;
        assert_eq!(report.code, Some(1), "{}", report.context());
        let message = report.report["sdkError"]["message"].as_str().unwrap_or("");
        assert!(message.contains("404"), "{}", report.context());
    }
}

// ---------------------------------------------------------------------------------------------------------
// (2) @ag-ui/client → AG-UI inbound → A2A outbound → the a2a-sdk 0.2.13 server

/// AG-UI routes to the A2A servers: `/assumed` assumes a streaming agent without reading its card;
/// `/auto` and `/auto-blocking` read it (`a2a_card = "auto"`) and find a streaming and a blocking one.
fn assumed_and_auto_routes(streaming: &A2aServer, blocking: &A2aServer) -> Routes {
    let auto = |name: &str, server: &A2aServer| {
        route(name, "ag-ui", "a2a")
            .upstream(&server.url())
            .translate("a2a_card", "auto")
    };
    Routes::default()
        .route(route("assumed", "ag-ui", "a2a").upstream(&streaming.url()))
        .route(auto("auto", streaming))
        .route(auto("auto-blocking", blocking))
}

#[tokio::test]
async fn ag_ui_clients_get_a2a_text_as_text_messages() {
    let streaming = A2aServer::start(true).await;
    let blocking = A2aServer::start(false).await;
    let proxy = Proxy::start(assumed_and_auto_routes(&streaming, &blocking)).await;
    for version in AG_UI_CLIENTS {
        for (path, server, method) in [
            ("/assumed", &streaming, "message/stream"),
            ("/auto", &streaming, "message/stream"),
            ("/auto-blocking", &blocking, "message/send"),
        ] {
            let text = format!("hello via {path} from {version}");
            let drive = AgUiDrive::accepted(
                version,
                &proxy.url(path),
                json!({"threadId": format!("text{path}-{version}"), "messages": user(&text)}),
            )
            .await;
            let run = drive.run_at(0);
            run.assert_finished();
            // One text message: the agent's two chunks as they streamed, or its merged artifact.
            let expected = if method == "message/stream" {
                vec!["echo: ".to_owned(), text.clone()]
            } else {
                vec![format!("echo: {text}")]
            };
            assert_eq!(run.deltas(), expected, "{}", run.context());
            let starts = run
                .events()
                .iter()
                .filter(|e| **e == "TEXT_MESSAGE_START")
                .count();
            assert_eq!(starts, 1, "{}", run.context());
            assert_eq!(
                run.assistant_text(),
                format!("echo: {text}"),
                "{}\nA2A server log:\n{}",
                run.context(),
                server.log()
            );
            // What the agent received: the user's text, with the method its card allows.
            let requests = server.requests_saying(&text);
            assert_eq!(requests.len(), 1, "{}", server.log());
            assert_eq!(requests[0]["method"], method, "{}", server.log());
        }
    }
}

#[tokio::test]
async fn ag_ui_clients_answer_an_a2a_question_through_the_ask_user_tool() {
    let streaming = A2aServer::start(true).await;
    let blocking = A2aServer::start(false).await;
    let proxy = Proxy::start(assumed_and_auto_routes(&streaming, &blocking)).await;
    for version in AG_UI_CLIENTS {
        for (path, server) in [
            ("/assumed", &streaming),
            ("/auto", &streaming),
            ("/auto-blocking", &blocking),
        ] {
            let question = format!("Which colour ({version}{path})?");
            let answer = format!("blue for {version}{path}");
            let drive = AgUiDrive::accepted(
                version,
                &proxy.url(path),
                json!({
                    "threadId": format!("ask{path}-{version}"),
                    "messages": user(&format!("/ask {question}")),
                    "tools": [{"name": "ask_user", "description": "Ask the user",
                               "parameters": {"type": "object", "properties": {"question": {"type": "string"}}}}],
                    "runs": [{}, {"answerToolCalls": answer}],
                }),
            )
            .await;
            // The pause is a call of the route's question tool, the question its argument.
            let first = drive.run_at(0);
            first.assert_finished();
            let calls = first.tool_calls();
            assert_eq!(calls.len(), 1, "{}", first.context());
            assert_eq!(calls[0].0, "ask_user", "{}", first.context());
            assert_eq!(
                calls[0].1["question"],
                question.as_str(),
                "{}",
                first.context()
            );

            // The tool's answer resumes the A2A task.
            let second = drive.run_at(1);
            second.assert_finished();
            assert_eq!(
                second.assistant_text(),
                format!("You answered: {answer}"),
                "{}\nA2A server log:\n{}",
                second.context(),
                server.log()
            );
            assert_resumed(server, &question, &answer);
        }
    }
}

#[tokio::test]
async fn ag_ui_clients_resume_an_a2a_question_paused_as_an_interrupt() {
    let server = A2aServer::start(true).await;
    let proxy = Proxy::start(
        route("a2a", "ag-ui", "a2a")
            .upstream(&server.url())
            .translate("agui_interrupts", "outcome"),
    )
    .await;
    for version in AG_UI_CLIENTS {
        let question = format!("Which size ({version})?");
        let answer = format!("large for {version}");
        let drive = AgUiDrive::accepted(
            version,
            &proxy.url("/a2a"),
            json!({
                "threadId": format!("interrupt-{version}"),
                "messages": user(&format!("/ask {question}")),
                "runs": [{}, {"resumeInterrupts": answer}],
            }),
        )
        .await;
        let first = drive.run_at(0);
        first.assert_finished();
        let finished = first.value["finished"][0].clone();
        let interrupt = &finished["outcome"]["interrupts"][0];
        assert_eq!(interrupt["reason"], "input_required", "{}", first.context());
        assert_eq!(
            interrupt["message"],
            question.as_str(),
            "{}",
            first.context()
        );
        assert_eq!(first.assistant_text(), question, "{}", first.context());

        let second = drive.run_at(1);
        second.assert_finished();
        assert_eq!(
            second.assistant_text(),
            format!("You answered: {answer}"),
            "{}\nA2A server log:\n{}",
            second.context(),
            server.log()
        );
        assert_resumed(&server, &question, &answer);
    }
}

/// The answer went to the paused task: the server received its taskId and contextId, and resumed it.
fn assert_resumed(server: &A2aServer, question: &str, answer: &str) {
    let paused = server.run_for(&format!("/ask {question}"));
    let requests = server.requests_saying(answer);
    assert_eq!(requests.len(), 1, "{}", server.log());
    assert_eq!(requests[0]["taskId"], paused["task"], "{}", server.log());
    assert_eq!(
        requests[0]["contextId"],
        paused["context"],
        "{}",
        server.log()
    );
    assert_eq!(server.run_for(answer)["resumed"], true, "{}", server.log());
}

#[tokio::test]
async fn ag_ui_clients_keep_the_a2a_context_across_runs() {
    let server = A2aServer::start(true).await;
    let proxy = Proxy::start(route("a2a", "ag-ui", "a2a").upstream(&server.url())).await;
    for version in AG_UI_CLIENTS {
        let drive = AgUiDrive::accepted(
            version,
            &proxy.url("/a2a"),
            json!({
                "threadId": format!("turns-{version}"),
                "messages": user("/turns"),
                "runs": [{}, {"append": [{"id": "u2", "role": "user", "content": "/turns"}]}],
            }),
        )
        .await;
        drive.run_at(0).assert_finished();
        assert_eq!(drive.run_at(0).assistant_text(), "turn 1 of this context");
        let second = drive.run_at(1);
        second.assert_finished();
        assert_eq!(
            second.assistant_text(),
            "turn 2 of this context",
            "{}\nA2A server log:\n{}",
            second.context(),
            server.log()
        );
        // Only the new message went upstream, in the context the agent minted on the first run.
        let requests = server.requests_saying("/turns");
        let runs: Vec<Value> = server
            .logged("run")
            .into_iter()
            .filter(|r| r["text"] == "/turns")
            .collect();
        let (first_request, second_request) =
            (&requests[requests.len() - 2], &requests[requests.len() - 1]);
        assert!(first_request["contextId"].is_null(), "{}", server.log());
        assert_eq!(
            second_request["contextId"],
            runs[runs.len() - 2]["context"],
            "{}",
            server.log()
        );
    }
}

#[tokio::test]
async fn ag_ui_clients_get_run_error_when_the_a2a_agent_fails() {
    let streaming = A2aServer::start(true).await;
    let blocking = A2aServer::start(false).await;
    let proxy = Proxy::start(
        Routes::default()
            .route(route("a2a", "ag-ui", "a2a").upstream(&streaming.url()))
            .route(
                route("blocking", "ag-ui", "a2a")
                    .upstream(&blocking.url())
                    .translate("a2a_card", "auto"),
            ),
    )
    .await;
    for version in AG_UI_CLIENTS {
        for path in ["/a2a", "/blocking"] {
            // A failed task: its state is the code, its status message the message. A JSON-RPC error from the
            // agent (message/send: the answer; message/stream: an SSE event after the Task): its code.
            for (said, code, message) in [
                ("/fail", "failed", "the agent failed on purpose"),
                ("/raise", "-32004", "the agent refused the request"),
            ] {
                let drive = AgUiDrive::accepted(
                    version,
                    &proxy.url(path),
                    json!({"threadId": format!("{said}{path}-{version}"), "messages": user(said)}),
                )
                .await;
                let run = drive.run_at(0);
                let events = run.events();
                assert_eq!(events.first(), Some(&"RUN_STARTED"), "{}", run.context());
                assert_eq!(events.last(), Some(&"RUN_ERROR"), "{}", run.context());
                assert_eq!(
                    run.run_errors(),
                    [(code.to_owned(), message.to_owned())],
                    "{}",
                    run.context()
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// (3) a2a-sdk / @a2a-js/sdk client → A2A inbound → A2A outbound → the a2a-sdk 0.2.13 server

#[tokio::test]
async fn sdk_clients_reach_a_real_a2a_server_through_the_proxy() {
    let server = A2aServer::start(true).await;
    let proxy = Proxy::start(
        route("relay", "a2a", "a2a")
            .upstream(&server.url())
            .translate("a2a_card", "auto"),
    )
    .await;
    let base = proxy.url("/relay");
    for client in A2A_CLIENTS {
        let report = client
            .accepted(
                &base,
                json!({"steps": [
                    {"op": "send", "name": "sent", "text": "hello relay"},
                    {"op": "stream", "name": "streamed", "text": "stream relay"},
                    {"op": "get", "name": "got", "task": "sent"},
                    {"op": "send", "name": "turns", "context": "sent", "text": "/turns"},
                    {"op": "send", "name": "asked", "text": "/ask Which colour?"},
                    {"op": "send", "name": "answered", "task": "asked", "text": "green"},
                    {"op": "send", "name": "failed", "text": "/fail"},
                    {"op": "stream", "name": "raised", "text": "/raise"},
                    {"op": "send", "name": "asked-again", "text": "/ask Which size?"},
                    {"op": "cancel", "name": "canceled", "task": "asked-again"},
                    {"op": "send", "name": "after-cancel", "context": "asked-again", "text": "fresh start"},
                ]}),
            )
            .await;
        let ctx = format!("{}\nA2A server log:\n{}", report.context(), server.log());

        let sent = report.task("sent");
        assert_eq!(sent["status"]["state"], "completed", "{ctx}");
        assert_eq!(artifact_text(sent), "echo: hello relay", "{ctx}");

        let events = report.events("streamed");
        assert_eq!(events[0]["kind"], "task", "{ctx}");
        assert_eq!(
            statuses(&events).last(),
            Some(&("completed".to_owned(), true)),
            "{ctx}"
        );
        assert_eq!(streamed_text(&events), "echo: stream relay", "{ctx}");

        let got = report.task("got");
        assert_eq!(got["id"], sent["id"], "{ctx}");
        assert_eq!(artifact_text(got), "echo: hello relay", "{ctx}");

        // The same client context is the same upstream context: the agent counts the second message.
        let turns = report.task("turns");
        assert_eq!(turns["contextId"], sent["contextId"], "{ctx}");
        assert_eq!(artifact_text(turns), "turn 2 of this context", "{ctx}");

        let asked = report.task("asked");
        assert_eq!(asked["status"]["state"], "input-required", "{ctx}");
        assert_eq!(
            message_text(&asked["status"]["message"]),
            "Which colour?",
            "{ctx}"
        );
        let answered = report.task("answered");
        assert_eq!(answered["id"], asked["id"], "{ctx}");
        assert_eq!(answered["status"]["state"], "completed", "{ctx}");
        assert_eq!(artifact_text(answered), "You answered: green", "{ctx}");
        let paused = server.run_for("/ask Which colour?");
        let requests = server.requests_saying("green");
        assert_eq!(
            requests.last().map(|r| &r["taskId"]),
            Some(&paused["task"]),
            "{ctx}"
        );

        let failed = report.task("failed");
        assert_eq!(failed["status"]["state"], "failed", "{ctx}");
        assert!(
            message_text(&failed["status"]["message"]).contains("the agent failed on purpose"),
            "{ctx}"
        );

        // A JSON-RPC error of the agent fails the task, its code in the status message.
        let events = report.events("raised");
        let last = events.last().expect("events");
        assert_eq!(last["status"]["state"], "failed", "{ctx}");
        assert_eq!(last["final"], true, "{ctx}");
        assert_eq!(
            message_text(&last["status"]["message"]),
            "the agent refused the request (-32004)",
            "{ctx}"
        );

        // Canceling the paused task cancels the agent's task; the next message in the context is a new task,
        // not an answer to the canceled question.
        let canceled = report.task("canceled");
        assert_eq!(canceled["status"]["state"], "canceled", "{ctx}");
        let paused = server.run_for("/ask Which size?");
        let cancels: Vec<Value> = server
            .logged("rpc")
            .into_iter()
            .filter(|r| r["method"] == "tasks/cancel")
            .collect();
        assert_eq!(
            cancels.last().map(|r| &r["taskId"]),
            Some(&paused["task"]),
            "{ctx}"
        );
        let after = report.task("after-cancel");
        assert_eq!(after["contextId"], canceled["contextId"], "{ctx}");
        assert_eq!(after["status"]["state"], "completed", "{ctx}");
        assert_eq!(artifact_text(after), "echo: fresh start", "{ctx}");
    }
}
