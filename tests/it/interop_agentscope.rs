//! Interop: the proxy's AgentScope faces against the real AgentScope Runtime, `agentscope-runtime` 1.1.6.post2
//! (with agentscope 1.0.x).
//!
//! - AgentScope outbound: the runtime's own `AgentApp` serving a scripted agent without an LLM
//!   (`tests/interop/agentscope/agentscope_server.py`: text, a tool call with its output, a failure) is our
//!   upstream, driven through the proxy by the real `@ag-ui/client` (1.0.0 and 0.0.59, through
//!   `tests/interop/ag-ui/drive.mjs`: AG-UI → AgentScope) and by the real `a2a-sdk` 0.2.13 client
//!   (`tests/interop/a2a/a2a_client.py`: A2A → AgentScope).
//! - AgentScope inbound: the runtime's shipped client, `HTTPAgentAPIClient`
//!   (`tests/interop/agentscope/agentscope_client.py`), talks to the proxy in front of the built-in echo agent
//!   (text, two turns of one session), of the real `AgentApp` above (AgentScope → AgentScope: the tool call,
//!   the failure, the one-run-per-session lock) and of the real `a2a-sdk` 0.2.13 server
//!   (`tests/interop/a2a/a2a_server.py`: AgentScope → A2A).
//!
//! Every assertion is on what a real client saw (texts, the tool's name, arguments and result, error codes and
//! messages) or on what the real server logged it received. Needs what `bash .ci/run` installs: `npm ci` in
//! `tests/interop/*/client-*/`, the Python venv `tests/interop/.venv` (a2a-sdk 0.2.13) and the AgentScope venv
//! `tests/interop/agentscope/.venv` (agentscope-runtime needs a2a-sdk 0.3, so it has a venv of its own);
//! without them the tests fail and say so.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::Command;

use crate::support::interop::{require_installed_with, route, run_driver, Process};
use crate::support::Proxy;

/// The pinned `@ag-ui/client` versions installed for `tests/it/interop_ag_ui.rs`.
const AG_UI_CLIENTS: [&str; 2] = ["1.0.0", "0.0.59"];

/// The longest one client run (every step of a spec) may take.
const DRIVE_LIMIT: Duration = Duration::from_secs(45);
/// The longest a Python server may take to print its port (agentscope-runtime imports a lot first).
const START_LIMIT: Duration = Duration::from_secs(60);

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

fn agentscope_dir() -> PathBuf {
    interop_dir().join("agentscope")
}

/// The AgentScope venv's python (agentscope-runtime 1.1.6.post2).
fn agentscope_python() -> PathBuf {
    let python = agentscope_dir().join(".venv/bin/python");
    require_installed(
        &python,
        "the AgentScope venv with agentscope-runtime 1.1.6.post2",
    );
    python
}

/// The main interop venv's python (a2a-sdk 0.2.13).
fn a2a_python() -> PathBuf {
    let python = interop_dir().join(".venv/bin/python");
    require_installed(&python, "the Python venv with a2a-sdk 0.2.13");
    python
}

/// Fails the test unless `path` exists, naming the command that installs it.
fn require_installed(path: &Path, what: &str) {
    require_installed_with(
        path,
        what,
        "the Python venvs tests/interop/.venv and tests/interop/agentscope/.venv",
    );
}

// ---------------------------------------------------------------------------------------------------------
// The real servers

/// A server process that printed `{"port": N}` as its first stdout line; killed when dropped. Its stderr,
/// where it logs every request it received, is kept.
struct Peer {
    what: &'static str,
    process: Process,
}

impl Peer {
    async fn start(what: &'static str, command: Command, dir: PathBuf) -> Peer {
        Peer {
            what,
            process: Process::start(what, command, dir, START_LIMIT).await,
        }
    }

    /// The real `AgentApp` (agentscope-runtime 1.1.6.post2) with the scripted agent.
    async fn agentscope() -> Peer {
        let mut command = Command::new(agentscope_python());
        command.arg("agentscope_server.py");
        Peer::start(
            "the AgentScope Runtime AgentApp (agentscope_server.py)",
            command,
            agentscope_dir(),
        )
        .await
    }

    /// The real A2A 0.2.5 server (a2a-sdk 0.2.13).
    async fn a2a() -> Peer {
        let mut command = Command::new(a2a_python());
        command.arg("a2a_server.py");
        Peer::start(
            "the a2a-sdk 0.2.13 server (a2a_server.py)",
            command,
            interop_dir().join("a2a"),
        )
        .await
    }

    fn url(&self, path: &str) -> String {
        self.process.url(path)
    }

    fn log(&self) -> String {
        format!("{} log:\n{}", self.what, self.process.stderr())
    }

    /// The log lines `{"<kind>": {...}}`, in order.
    fn logged(&self, kind: &str) -> Vec<Value> {
        self.process
            .stderr()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|v| v.get(kind).cloned())
            .collect()
    }

    /// The Agent API requests the AgentApp received whose last input message says exactly `text`.
    fn requests_ending(&self, text: &str) -> Vec<Value> {
        self.logged("request")
            .into_iter()
            .filter(|r| {
                r["input"]
                    .as_array()
                    .and_then(|input| input.last())
                    .is_some_and(|m| m["text"] == text)
            })
            .collect()
    }

    /// The one request whose last input message says `text`.
    fn request_ending(&self, text: &str) -> Value {
        let requests = self.requests_ending(text);
        assert_eq!(
            requests.len(),
            1,
            "expected one request ending with {text:?}; {}",
            self.log()
        );
        requests.into_iter().next().unwrap()
    }
}

/// (type, role, text) of the input messages of a logged request.
fn input_of(request: &Value) -> Vec<(String, String, String)> {
    request["input"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let field = |k: &str| m[k].as_str().unwrap_or("").to_owned();
            (field("type"), field("role"), field("text"))
        })
        .collect()
}

/// Fails unless the request carried a session_id and a user_id (the runtime's lock key is
/// `user_id:session_id`; requests without them all share `None:None`).
fn assert_identified(request: &Value, context: &str) {
    for key in ["session_id", "user_id"] {
        assert!(
            request[key].as_str().is_some_and(|v| !v.is_empty()),
            "the request to the runtime has no {key}: {request}\n{context}"
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// Running a client process

/// What one client process printed: its exit code, its last JSON line, its stderr.
struct Report {
    client: String,
    code: Option<i32>,
    report: Value,
    stderr: String,
}

impl Report {
    async fn collect(client: String, command: Command, target: &str) -> Report {
        let output = run_driver(
            command,
            DRIVE_LIMIT,
            &format!("the {client} client"),
            target,
            &format!("cannot run the {client} client"),
            "the client ran",
        )
        .await;
        Report {
            client,
            code: output.code,
            report: output.report,
            stderr: output.stderr,
        }
    }

    fn context(&self) -> String {
        format!(
            "client {} (exit {:?})\nreport: {}\nstderr: {}",
            self.client, self.code, self.report, self.stderr
        )
    }
}

// ---------------------------------------------------------------------------------------------------------
// The real AG-UI client (tests/interop/ag-ui/drive.mjs)

/// Runs `@ag-ui/client` `version` against `url` (`spec` as documented in drive.mjs); fails unless every run
/// resolved without a client-side warning about the proxy's stream.
async fn ag_ui(version: &str, url: &str, spec: Value) -> Report {
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
        .env("DRIVE_TIMEOUT_MS", "40000");
    let drive = Report::collect(format!("@ag-ui/client {version}"), command, url).await;
    assert!(
        drive.code == Some(0) && drive.report["rejected"].is_null(),
        "the client rejected the stream: {}",
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
        "the client warned about the stream: {warnings:?}\n{}",
        drive.context()
    );
    drive
}

/// One `runAgent` call as the AG-UI client saw it.
struct AgUiRun<'a> {
    drive: &'a Report,
    value: &'a Value,
}

impl<'a> AgUiRun<'a> {
    fn of(drive: &'a Report, index: usize) -> AgUiRun<'a> {
        let value = &drive.report["runs"][index];
        assert!(value.is_object(), "no run {index}: {}", drive.context());
        AgUiRun { drive, value }
    }

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

    /// (id, name, parsed arguments) of every tool call in the new messages.
    fn tool_calls(&self) -> Vec<(String, String, Value)> {
        self.new_messages()
            .iter()
            .flat_map(|m| m["toolCalls"].as_array().into_iter().flatten())
            .map(|call| {
                let id = call["id"].as_str().unwrap_or("").to_owned();
                let name = call["function"]["name"].as_str().unwrap_or("").to_owned();
                let args = call["function"]["arguments"].as_str().unwrap_or("");
                let args = serde_json::from_str(args).unwrap_or_else(|e| {
                    panic!(
                        "tool call arguments are not JSON ({e}): {args}\n{}",
                        self.context()
                    )
                });
                (id, name, args)
            })
            .collect()
    }

    /// (toolCallId, content) of the new tool messages (results the run reported).
    fn tool_results(&self) -> Vec<(String, String)> {
        self.new_messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| {
                (
                    m["toolCallId"].as_str().unwrap_or("").to_owned(),
                    m["content"].as_str().unwrap_or("").to_owned(),
                )
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

    fn assert_finished(&self) {
        let events = self.events();
        assert_eq!(events.first(), Some(&"RUN_STARTED"), "{}", self.context());
        assert_eq!(events.last(), Some(&"RUN_FINISHED"), "{}", self.context());
        assert!(self.run_errors().is_empty(), "{}", self.context());
    }
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": text})
}

// ---------------------------------------------------------------------------------------------------------
// The real A2A client (tests/interop/a2a/a2a_client.py, a2a-sdk 0.2.13)

/// Runs the a2a-sdk 0.2.13 client against the agent at `base` (`spec` as documented in a2a_client.py); fails
/// unless the SDK accepted everything it got.
async fn a2a(base: &str, spec: Value) -> Report {
    let mut command = Command::new(a2a_python());
    command
        .arg("a2a_client.py")
        .arg(base)
        .arg(spec.to_string())
        .current_dir(interop_dir().join("a2a"))
        .env("CLIENT_TIMEOUT_S", "40");
    let report = Report::collect("a2a-sdk 0.2.13".to_owned(), command, base).await;
    assert!(
        report.code == Some(0) && report.report["sdkError"].is_null(),
        "the SDK failed: {}",
        report.context()
    );
    report
}

/// The step named `name` of an a2a_client.py report; fails if it got a JSON-RPC error.
fn a2a_step<'a>(report: &'a Report, name: &str) -> &'a Value {
    let step = report.report["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {}", report.context()));
    assert!(
        step["error"].is_null(),
        "step {name} got a JSON-RPC error: {}",
        report.context()
    );
    step
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

/// A stream's text: the artifact chunks applied with their append semantics, every artifact in order.
fn streamed_text(events: &[Value]) -> String {
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

// ---------------------------------------------------------------------------------------------------------
// The real AgentScope client (tests/interop/agentscope/agentscope_client.py, HTTPAgentAPIClient)

/// Runs the shipped `HTTPAgentAPIClient` against `url` (`spec` as documented in agentscope_client.py); fails
/// unless every step ran and the client's models accepted every event (it logs, then drops, one they reject).
async fn agentscope_client(url: &str, spec: Value) -> Report {
    let mut command = Command::new(agentscope_python());
    command
        .arg("agentscope_client.py")
        .arg(url)
        .arg(spec.to_string())
        .current_dir(agentscope_dir())
        .env("CLIENT_TIMEOUT_S", "40");
    let report = Report::collect("HTTPAgentAPIClient".to_owned(), command, url).await;
    assert!(
        report.code == Some(0) && report.report["error"].is_null(),
        "the client failed: {}",
        report.context()
    );
    let warnings = &report.report["warnings"];
    assert!(
        warnings.as_array().is_some_and(Vec::is_empty),
        "the client logged warnings (it drops events it cannot parse): {}",
        report.context()
    );
    report
}

/// One request as the shipped client saw it.
struct Seen<'a> {
    report: &'a Report,
    step: &'a Value,
}

impl<'a> Seen<'a> {
    fn step(report: &'a Report, index: usize) -> Seen<'a> {
        let step = &report.report["steps"][index];
        assert!(step.is_object(), "no step {index}: {}", report.context());
        Seen { report, step }
    }

    fn context(&self) -> String {
        self.report.context()
    }

    /// The events the client yielded, as (class, event).
    fn events(&self) -> Vec<(&'a str, &'a Value)> {
        self.step["events"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| (e["class"].as_str().unwrap_or(""), &e["event"]))
            .collect()
    }

    /// The `response` events' statuses, in order.
    fn response_statuses(&self) -> Vec<&'a str> {
        self.events()
            .into_iter()
            .filter(|(_, e)| e["object"] == "response")
            .filter_map(|(_, e)| e["status"].as_str())
            .collect()
    }

    /// The last `response` event: the run's outcome.
    fn terminal(&self) -> &'a Value {
        self.events()
            .into_iter()
            .rev()
            .find(|(_, e)| e["object"] == "response")
            .map(|(_, e)| e)
            .unwrap_or_else(|| panic!("no response event: {}", self.context()))
    }

    /// The text of the completed assistant `message`s (what `extract_text_from_event` gives for them).
    fn answer(&self) -> String {
        self.events()
            .into_iter()
            .filter(|(class, e)| {
                *class == "Message"
                    && e["status"] == "completed"
                    && e["type"] == "message"
                    && e["role"] == "assistant"
            })
            .flat_map(|(_, e)| e["content"].as_array().into_iter().flatten())
            .filter_map(|c| c["text"].as_str())
            .collect()
    }

    /// The text deltas (`content` events with `delta: true`), as the client's TextContent objects.
    fn deltas(&self) -> Vec<&'a str> {
        self.events()
            .into_iter()
            .filter(|(class, e)| *class == "TextContent" && e["delta"] == true)
            .filter_map(|(_, e)| e["text"].as_str())
            .collect()
    }

    /// The `data` of the completed messages of one type (`plugin_call`, `plugin_call_output`, …).
    fn completed_data(&self, kind: &str) -> Vec<&'a Value> {
        self.events()
            .into_iter()
            .filter(|(_, e)| {
                e["object"] == "message" && e["status"] == "completed" && e["type"] == kind
            })
            .flat_map(|(_, e)| e["content"].as_array().into_iter().flatten())
            .map(|c| &c["data"])
            .collect()
    }

    /// The completed run, with no error.
    fn assert_completed(&self) {
        let statuses = self.response_statuses();
        assert_eq!(
            statuses,
            ["created", "in_progress", "completed"],
            "{}",
            self.context()
        );
        assert!(self.terminal()["error"].is_null(), "{}", self.context());
    }
}

/// A session id no other test (or earlier run of this one) uses.
fn fresh(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

// =========================================================================================================
// (a) The real AgentApp as our upstream

/// AG-UI → AgentScope: both `@ag-ui/client` versions see the runtime's text, in two runs of one thread, and
/// the runtime gets the whole history every time with a session of the thread's own.
#[tokio::test]
async fn ag_ui_clients_talk_to_the_real_agentscope_runtime() {
    let runtime = Peer::agentscope().await;
    let proxy =
        Proxy::start(route("as", "ag-ui", "agentscope").upstream(&runtime.url("/process"))).await;
    let mut sessions = HashSet::new();
    for version in AG_UI_CLIENTS {
        let first = format!("hello from {version}");
        let second = format!("and again from {version}");
        let drive = ag_ui(
            version,
            &proxy.url("/as"),
            json!({
                "threadId": fresh("thread"),
                "messages": [user("u1", &first)],
                "runs": [{}, {"append": [user("u2", &second)]}],
            }),
        )
        .await;
        let run = AgUiRun::of(&drive, 0);
        run.assert_finished();
        assert_eq!(
            run.assistant_text(),
            format!("echo: {first}"),
            "{}",
            run.context()
        );
        let run = AgUiRun::of(&drive, 1);
        run.assert_finished();
        assert_eq!(
            run.assistant_text(),
            format!("echo: {second}"),
            "{}",
            run.context()
        );

        let context = format!("{}\n{}", drive.context(), runtime.log());
        let one = runtime.request_ending(&first);
        let two = runtime.request_ending(&second);
        assert_identified(&one, &context);
        assert_identified(&two, &context);
        assert_eq!(one["session_id"], two["session_id"], "{context}");
        assert_eq!(one["user_id"], two["user_id"], "{context}");
        assert!(
            sessions.insert(one["session_id"].to_string()),
            "two threads share a session: {context}"
        );
        assert_eq!(
            input_of(&one),
            [("message".into(), "user".into(), first.clone())],
            "{context}"
        );
        // The full history: the first question, the runtime's answer, the second question.
        assert_eq!(
            input_of(&two),
            [
                ("message".into(), "user".into(), first.clone()),
                (
                    "message".into(),
                    "assistant".into(),
                    format!("echo: {first}")
                ),
                ("message".into(), "user".into(), second.clone()),
            ],
            "{context}"
        );
    }
}

/// AG-UI → AgentScope: the runtime's own tool call (a `plugin_call` and its `plugin_call_output`) reaches the
/// AG-UI clients as a tool call with its name and arguments and a tool message with its result, then the text.
#[tokio::test]
async fn ag_ui_clients_see_the_real_runtimes_tool_call_and_result() {
    let runtime = Peer::agentscope().await;
    let proxy =
        Proxy::start(route("as", "ag-ui", "agentscope").upstream(&runtime.url("/process"))).await;
    for version in AG_UI_CLIENTS {
        let text = format!("use tool ({version})");
        let drive = ag_ui(
            version,
            &proxy.url("/as"),
            json!({"threadId": fresh("thread"), "messages": [user("u1", &text)]}),
        )
        .await;
        let run = AgUiRun::of(&drive, 0);
        run.assert_finished();
        let calls = run.tool_calls();
        assert_eq!(calls.len(), 1, "{}", run.context());
        let (id, name, args) = &calls[0];
        assert_eq!(name, "get_weather", "{}", run.context());
        assert_eq!(args, &json!({"city": "Beijing"}), "{}", run.context());
        let results = run.tool_results();
        assert_eq!(results.len(), 1, "{}", run.context());
        assert_eq!(&results[0].0, id, "{}", run.context());
        assert!(
            results[0].1.contains("sunny"),
            "the tool's result: {}",
            run.context()
        );
        assert_eq!(
            run.assistant_text(),
            format!("echo: {text}"),
            "{}",
            run.context()
        );
        let events = run.events();
        let call_end = events.iter().position(|e| *e == "TOOL_CALL_END");
        let text_start = events.iter().position(|e| *e == "TEXT_MESSAGE_START");
        assert!(
            call_end.is_some() && call_end < text_start,
            "the call comes before the answer: {}",
            run.context()
        );
    }
}

/// AG-UI → AgentScope: the agent raising is the runtime's `failed` response; the AG-UI clients get one
/// RUN_ERROR with the runtime's code and message.
#[tokio::test]
async fn ag_ui_clients_get_the_real_runtimes_failure_as_run_error() {
    let runtime = Peer::agentscope().await;
    let proxy =
        Proxy::start(route("as", "ag-ui", "agentscope").upstream(&runtime.url("/process"))).await;
    for version in AG_UI_CLIENTS {
        let drive = ag_ui(
            version,
            &proxy.url("/as"),
            json!({"threadId": fresh("thread"), "messages": [user("u1", "boom, please")]}),
        )
        .await;
        let run = AgUiRun::of(&drive, 0);
        let events = run.events();
        assert_eq!(events.first(), Some(&"RUN_STARTED"), "{}", run.context());
        assert_eq!(events.last(), Some(&"RUN_ERROR"), "{}", run.context());
        let errors = run.run_errors();
        assert_eq!(errors.len(), 1, "{}", run.context());
        assert_eq!(errors[0].0, "AGENT_UNKNOWN_ERROR", "{}", run.context());
        assert!(
            errors[0].1.contains("ValueError: boom requested"),
            "{}",
            run.context()
        );
    }
}

/// A2A → AgentScope: the a2a-sdk 0.2.13 client sends and streams to the real runtime behind the proxy: the
/// text, a second message of the same context (one session upstream, the whole history), the runtime's tool
/// call, its failure.
#[tokio::test]
async fn a2a_client_talks_to_the_real_agentscope_runtime() {
    let runtime = Peer::agentscope().await;
    let proxy =
        Proxy::start(route("as", "a2a", "agentscope").upstream(&runtime.url("/process"))).await;
    let report = a2a(
        &proxy.url("/as"),
        json!({"steps": [
            {"op": "send", "name": "hello", "text": "hello a2a"},
            {"op": "send", "name": "again", "context": "hello", "text": "/turns"},
            {"op": "stream", "name": "streamed", "text": "stream to me"},
            {"op": "send", "name": "tool", "text": "use tool via a2a"},
            {"op": "send", "name": "boom", "text": "boom via a2a"},
        ]}),
    )
    .await;
    let context = format!("{}\n{}", report.context(), runtime.log());

    let hello = &a2a_step(&report, "hello")["result"];
    assert_eq!(hello["status"]["state"], "completed", "{context}");
    assert_eq!(artifact_text(hello), "echo: hello a2a", "{context}");

    // The second message of the context: the runtime saw both user messages (and its answer) in one session.
    let again = &a2a_step(&report, "again")["result"];
    assert_eq!(again["status"]["state"], "completed", "{context}");
    assert_eq!(again["contextId"], hello["contextId"], "{context}");
    assert_eq!(artifact_text(again), "turns: 2", "{context}");
    let first = runtime.request_ending("hello a2a");
    let second = runtime.request_ending("/turns");
    assert_identified(&first, &context);
    assert_eq!(first["session_id"], second["session_id"], "{context}");
    assert_eq!(
        input_of(&second),
        [
            ("message".into(), "user".into(), "hello a2a".into()),
            (
                "message".into(),
                "assistant".into(),
                "echo: hello a2a".into()
            ),
            ("message".into(), "user".into(), "/turns".into()),
        ],
        "{context}"
    );

    let streamed = a2a_step(&report, "streamed");
    let events: Vec<Value> = streamed["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(streamed_text(&events), "echo: stream to me", "{context}");
    let last = events.last().expect("stream events");
    assert_eq!(last["kind"], "status-update", "{context}");
    assert_eq!(last["status"]["state"], "completed", "{context}");
    assert_eq!(last["final"], true, "{context}");
    let other = runtime.request_ending("stream to me");
    assert_ne!(other["session_id"], first["session_id"], "{context}");

    let tool = &a2a_step(&report, "tool")["result"];
    assert_eq!(tool["status"]["state"], "completed", "{context}");
    assert!(
        artifact_text(tool).ends_with("echo: use tool via a2a"),
        "{context}"
    );

    let boom = &a2a_step(&report, "boom")["result"];
    assert_eq!(boom["status"]["state"], "failed", "{context}");
    let why = message_text(&boom["status"]["message"]);
    assert!(why.contains("boom requested"), "{why:?}\n{context}");
}

// =========================================================================================================
// (b) The shipped HTTPAgentAPIClient against our inbound

/// AgentScope → echo: the shipped client (both its `stream` and `astream`) reads the proxy's stream as the
/// runtime's own: the lifecycle, the word-by-word deltas, the completed message's text.
#[tokio::test]
async fn shipped_client_reads_the_echo_agent() {
    let proxy = Proxy::start(route("echo", "agentscope", "echo")).await;
    for url in [proxy.url("/echo/process"), proxy.url("/echo")] {
        let report = agentscope_client(
            &url,
            json!({"steps": [
                {"text": "the quick brown 狐狸", "session_id": fresh("s"), "user_id": "u1"},
                {"text": "synchronously now", "session_id": fresh("s"), "sync": true},
            ]}),
        )
        .await;
        let seen = Seen::step(&report, 0);
        seen.assert_completed();
        assert_eq!(
            seen.deltas(),
            ["the ", "quick ", "brown ", "狐狸"],
            "{}",
            seen.context()
        );
        assert_eq!(seen.answer(), "the quick brown 狐狸", "{}", seen.context());
        let texts: Vec<&str> = seen.step["texts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            texts.last(),
            Some(&"the quick brown 狐狸"),
            "extract_text_from_event: {}",
            seen.context()
        );
        let session = seen.step["session_id"].as_str().unwrap();
        for (_, event) in seen.events() {
            if event["object"] == "response" {
                assert_eq!(event["session_id"], session, "{}", seen.context());
            }
        }
        let seen = Seen::step(&report, 1);
        seen.assert_completed();
        assert_eq!(seen.answer(), "synchronously now", "{}", seen.context());
    }
}

/// AgentScope → echo: two requests of one session are one conversation: the echo agent's question (`/ask`)
/// reaches the shipped client as an `mcp_approval_request` naming the question tool; the next request of the
/// session answers it (the request resent, then an `mcp_approval_response` whose `reason` is the answer).
#[tokio::test]
async fn shipped_client_answers_a_question_in_its_session() {
    let proxy = Proxy::start(route("echo", "agentscope", "echo")).await;
    let session = fresh("s");
    let report = agentscope_client(
        &proxy.url("/echo/process"),
        json!({"steps": [
            {"text": "/ask Which colour?", "session_id": session, "user_id": "u1"},
            {"answer": {"approve": true, "reason": "blue"}, "session_id": session, "user_id": "u1"},
        ]}),
    )
    .await;
    let ask = Seen::step(&report, 0);
    ask.assert_completed();
    let requests = ask.completed_data("mcp_approval_request");
    assert_eq!(requests.len(), 1, "{}", ask.context());
    assert_eq!(requests[0]["name"], "ask_user", "{}", ask.context());
    let arguments: Value = serde_json::from_str(requests[0]["arguments"].as_str().unwrap_or(""))
        .unwrap_or_else(|e| panic!("the arguments are not JSON ({e}): {}", ask.context()));
    assert_eq!(arguments["question"], "Which colour?", "{}", ask.context());
    let answer = Seen::step(&report, 1);
    answer.assert_completed();
    assert_eq!(
        answer.answer(),
        "You answered: blue",
        "{}",
        answer.context()
    );
}

/// AgentScope → AgentScope: the shipped client in front of the real runtime, through the proxy: the text,
/// the runtime's tool call and result as `plugin_call` / `plugin_call_output` messages, its failure with the
/// runtime's code and message.
#[tokio::test]
async fn shipped_client_through_the_proxy_to_the_real_runtime() {
    let runtime = Peer::agentscope().await;
    let proxy =
        Proxy::start(route("as", "agentscope", "agentscope").upstream(&runtime.url("/process")))
            .await;
    let report = agentscope_client(
        &proxy.url("/as/process"),
        json!({"steps": [
            {"text": "hello runtime", "session_id": fresh("s"), "user_id": "u1"},
            {"text": "use tool here", "session_id": fresh("s"), "user_id": "u1"},
            {"text": "boom here", "session_id": fresh("s"), "user_id": "u1"},
        ]}),
    )
    .await;
    let context = format!("{}\n{}", report.context(), runtime.log());

    let hello = Seen::step(&report, 0);
    hello.assert_completed();
    assert_eq!(hello.answer(), "echo: hello runtime", "{context}");
    assert_eq!(hello.deltas().concat(), "echo: hello runtime", "{context}");
    assert_identified(&runtime.request_ending("hello runtime"), &context);

    let tool = Seen::step(&report, 1);
    tool.assert_completed();
    let calls = tool.completed_data("plugin_call");
    assert_eq!(calls.len(), 1, "{context}");
    assert_eq!(calls[0]["name"], "get_weather", "{context}");
    let args: Value = serde_json::from_str(calls[0]["arguments"].as_str().unwrap_or(""))
        .unwrap_or_else(|e| panic!("the arguments are not JSON ({e}): {context}"));
    assert_eq!(args, json!({"city": "Beijing"}), "{context}");
    let outputs = tool.completed_data("plugin_call_output");
    assert_eq!(outputs.len(), 1, "{context}");
    assert_eq!(outputs[0]["call_id"], calls[0]["call_id"], "{context}");
    assert!(
        outputs[0]["output"]
            .as_str()
            .is_some_and(|o| o.contains("sunny")),
        "{context}"
    );
    assert_eq!(tool.answer(), "echo: use tool here", "{context}");

    let boom = Seen::step(&report, 2);
    assert_eq!(
        boom.response_statuses(),
        ["created", "in_progress", "failed"],
        "{context}"
    );
    let error = &boom.terminal()["error"];
    assert_eq!(error["code"], "AGENT_UNKNOWN_ERROR", "{context}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("ValueError: boom requested")),
        "{context}"
    );
}

/// The one-run-per-session lock, as the runtime has it: a second request for a session whose run still
/// streams gets the runtime's bare `{"error": "Task … is already in RUNNING state."}` frame — from the real
/// runtime directly and from the proxy in front of it alike — which the shipped client drops (it yields
/// nothing); the first run is not disturbed.
#[tokio::test]
async fn shipped_client_meets_the_session_lock_as_the_runtime_has_it() {
    let runtime = Peer::agentscope().await;
    let proxy =
        Proxy::start(route("as", "agentscope", "agentscope").upstream(&runtime.url("/process")))
            .await;
    for url in [runtime.url("/process"), proxy.url("/as/process")] {
        let session = fresh("s");
        let report = agentscope_client(
            &url,
            json!({"steps": [{
                "text": "slow one", "session_id": session, "user_id": "u1",
                "while": {"text": "meanwhile", "session_id": session, "user_id": "u1"},
            }]}),
        )
        .await;
        let context = format!("{url}\n{}\n{}", report.context(), runtime.log());
        let first = Seen::step(&report, 0);
        first.assert_completed();
        assert_eq!(first.answer(), "echo: slow one", "{context}");
        let second = &first.step["while"];
        assert!(second.is_object(), "the second request ran: {context}");
        assert_eq!(
            second["events"].as_array().map(Vec::len),
            Some(0),
            "the shipped client yields nothing for the lock's frame: {context}"
        );
        assert_eq!(
            second["raw"],
            json!([{"error": format!("Task u1:{session} is already in RUNNING state.")}]),
            "{context}"
        );
    }
}

/// AgentScope → A2A: the shipped client in front of the real a2a-sdk 0.2.13 server: the text, two requests of
/// one session in one A2A context (and another session in another), the agent's failure as a failed response.
/// The second request carries the session's history (the proxy's AgentScope inbound takes `input` as the
/// whole conversation, as the runtime's AG-UI adapter sends it); a request with only the new message is taken
/// as a rewritten history and starts a new A2A context.
#[tokio::test]
async fn shipped_client_through_the_proxy_to_the_real_a2a_server() {
    let server = Peer::a2a().await;
    let proxy = Proxy::start(route("a2a", "agentscope", "a2a").upstream(&server.url("/"))).await;
    let session = fresh("s");
    let report = agentscope_client(
        &proxy.url("/a2a/process"),
        json!({"steps": [
            {"text": "hello a2a", "session_id": session, "user_id": "u1"},
            {"text": "/turns", "session_id": session, "user_id": "u1", "withHistory": true},
            {"text": "/turns", "session_id": fresh("s"), "user_id": "u1"},
            {"text": "/fail", "session_id": fresh("s"), "user_id": "u1"},
        ]}),
    )
    .await;
    let context = format!("{}\n{}", report.context(), server.log());
    let hello = Seen::step(&report, 0);
    hello.assert_completed();
    assert_eq!(hello.answer(), "echo: hello a2a", "{context}");
    let again = Seen::step(&report, 1);
    again.assert_completed();
    assert_eq!(again.answer(), "turn 2 of this context", "{context}");
    let other = Seen::step(&report, 2);
    other.assert_completed();
    assert_eq!(other.answer(), "turn 1 of this context", "{context}");
    let failed = Seen::step(&report, 3);
    assert_eq!(
        failed.response_statuses(),
        ["created", "in_progress", "failed"],
        "{context}"
    );
    let error = &failed.terminal()["error"];
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("the agent failed on purpose")),
        "{context}"
    );
}
