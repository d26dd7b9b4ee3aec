//! Interop: the real `@ag-ui/client` `HttpAgent` (npm, 1.0.0 and 0.0.59 — the one CopilotKit pins) drives the
//! proxy's AG-UI inbound, in front of the built-in echo agent, a scripted AG-UI upstream
//! (`tests/interop/ag-ui/upstream.mjs`) and the real CloudBase AG-UI server (`cloudbase-agent-server` 0.1.22,
//! `tests/interop/ag-ui/cloudbase_upstream.py`). Every assertion is on what the client saw, as printed by
//! `tests/interop/ag-ui/drive.mjs`; a verification error in the client (ZodError, AGUIError) fails the test.
//!
//! Needs what `bash .ci/run` installs: `npm ci` in `tests/interop/ag-ui/client-*/` and the Python venv
//! `tests/interop/.venv` (shared with the A2A interop tests). Without them the tests fail and say so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::Command;

use crate::support::interop::{require_installed, route, run_driver, Process};
use crate::support::{Proxy, Routes};

/// Every pinned client version; each lives in `tests/interop/ag-ui/client-VERSION/`.
const CLIENTS: [&str; 2] = ["1.0.0", "0.0.59"];

/// The longest one driver run (one or two `runAgent` calls) may take.
const DRIVE_LIMIT: Duration = Duration::from_secs(30);
/// The longest an upstream process may take to print its port (Python imports FastAPI first).
const START_LIMIT: Duration = Duration::from_secs(30);

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/ag-ui")
}

fn client_dir(version: &str) -> PathBuf {
    let dir = interop_dir().join(format!("client-{version}"));
    require_installed(
        &dir.join("node_modules/@ag-ui/client/package.json"),
        &format!("@ag-ui/client@{version}"),
    );
    dir
}

// ---------------------------------------------------------------------------------------------------------
// Upstream processes

/// An upstream process that printed `{"port": N}`; killed when dropped. Its stderr is kept for failure
/// messages.
struct UpstreamProcess(Process);

impl UpstreamProcess {
    async fn start(what: &str, command: Command) -> UpstreamProcess {
        UpstreamProcess(Process::start(what, command, interop_dir(), START_LIMIT).await)
    }

    /// The scripted AG-UI upstream (`upstream.mjs`).
    async fn scripted() -> UpstreamProcess {
        let mut command = Command::new("node");
        command.arg("upstream.mjs");
        UpstreamProcess::start("the scripted AG-UI upstream (node upstream.mjs)", command).await
    }

    /// The real CloudBase AG-UI server (`cloudbase_upstream.py`) in the venv `.ci/run` makes.
    async fn cloudbase() -> UpstreamProcess {
        let python = interop_dir().join("../.venv/bin/python");
        require_installed(&python, "the Python venv with cloudbase-agent-server");
        let mut command = Command::new(python);
        command.arg("cloudbase_upstream.py");
        UpstreamProcess::start(
            "the CloudBase AG-UI server (cloudbase_upstream.py)",
            command,
        )
        .await
    }

    fn url(&self, path: &str) -> String {
        self.0.url(path)
    }

    fn log(&self) -> String {
        self.0.stderr()
    }
}

/// A local port nothing listens on: bound, then released.
fn refused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

// ---------------------------------------------------------------------------------------------------------
// The real client

/// What one `node drive.mjs` run printed: the client's view of every run.
struct Drive {
    client: String,
    code: Option<i32>,
    report: Value,
    stderr: String,
}

impl Drive {
    /// Runs the driver with the client `version` against `url`; `spec` as documented in drive.mjs.
    async fn run(version: &str, url: &str, spec: Value) -> Drive {
        let dir = client_dir(version);
        let mut command = Command::new("node");
        command
            .arg(interop_dir().join("drive.mjs"))
            .arg(&dir)
            .arg(url)
            .arg(spec.to_string())
            .env("DRIVE_TIMEOUT_MS", "25000");
        let output = run_driver(
            command,
            DRIVE_LIMIT,
            &format!("@ag-ui/client {version}"),
            url,
            "cannot run `node` (Node.js 20+ is needed for the interop tests)",
            "the driver ran",
        )
        .await;
        Drive {
            client: version.to_owned(),
            code: output.code,
            report: output.report,
            stderr: output.stderr,
        }
    }

    /// Runs the driver and fails unless every run resolved without a client-side warning about our output.
    async fn accepted(version: &str, url: &str, spec: Value) -> Drive {
        let drive = Drive::run(version, url, spec).await;
        drive.assert_accepted();
        drive
    }

    fn assert_accepted(&self) {
        assert!(
            self.code == Some(0) && self.report["rejected"].is_null(),
            "@ag-ui/client {} rejected the stream: {}\n{}",
            self.client,
            self.report["rejected"],
            self.context()
        );
        // The 1.0 client strips fields and drops event types it does not know, with a warning: the proxy
        // must send neither.
        let warnings: Vec<&str> = self.report["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|w| w.contains("[ag-ui]") || w.contains("AG-UI"))
            .collect();
        assert!(
            warnings.is_empty(),
            "@ag-ui/client {} warned about the stream: {warnings:?}\n{}",
            self.client,
            self.context()
        );
    }

    fn context(&self) -> String {
        format!("report: {}\nstderr: {}", self.report, self.stderr)
    }

    fn run_at(&self, index: usize) -> Run<'_> {
        let value = &self.report["runs"][index];
        assert!(
            value.is_object(),
            "@ag-ui/client {}: no run {index}\n{}",
            self.client,
            self.context()
        );
        Run { drive: self, value }
    }

    fn only_run(&self) -> Run<'_> {
        self.run_at(0)
    }

    fn rejection(&self) -> &str {
        self.report["rejected"]["message"].as_str().unwrap_or("")
    }
}

/// One `runAgent` call as the client saw it.
#[derive(Clone, Copy)]
struct Run<'a> {
    drive: &'a Drive,
    value: &'a Value,
}

impl<'a> Run<'a> {
    fn events(&self) -> Vec<&'a str> {
        self.value["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect()
    }

    /// The parsed events of one type, in order.
    fn logged(&self, kind: &str) -> Vec<&'a Value> {
        self.value["log"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|event| event["type"] == kind)
            .collect()
    }

    fn new_messages(&self) -> Vec<&'a Value> {
        self.value["newMessages"]
            .as_array()
            .into_iter()
            .flatten()
            .collect()
    }

    /// The text of the new assistant messages, joined.
    fn assistant_text(&self) -> String {
        self.new_messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// (name, parsed arguments) of every tool call in the new messages.
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

    /// The content of the new tool messages (results the run reported).
    fn tool_results(&self) -> Vec<&'a str> {
        self.new_messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .filter_map(|m| m["content"].as_str())
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

    fn state(&self) -> &'a Value {
        &self.value["state"]
    }

    fn context(&self) -> String {
        format!("client {}: {}", self.drive.client, self.drive.context())
    }

    fn assert_events(&self, expected: &[&str]) {
        assert_eq!(self.events(), expected, "{}", self.context());
    }

    /// The run finished normally: RUN_STARTED first, RUN_FINISHED last, no RUN_ERROR.
    fn assert_finished(&self) {
        let events = self.events();
        assert_eq!(events.first(), Some(&"RUN_STARTED"), "{}", self.context());
        assert_eq!(events.last(), Some(&"RUN_FINISHED"), "{}", self.context());
        assert!(self.run_errors().is_empty(), "{}", self.context());
    }

    /// The run ended with exactly one RUN_ERROR, last, and the client resolved.
    fn assert_run_error(&self, code: &str) -> String {
        let events = self.events();
        assert_eq!(events.first(), Some(&"RUN_STARTED"), "{}", self.context());
        assert_eq!(events.last(), Some(&"RUN_ERROR"), "{}", self.context());
        let errors = self.run_errors();
        assert_eq!(errors.len(), 1, "exactly one RUN_ERROR: {}", self.context());
        assert_eq!(errors[0].0, code, "{}", self.context());
        errors[0].1.clone()
    }
}

fn user(text: &str) -> Value {
    json!([{"id": "u1", "role": "user", "content": text}])
}

fn confirm_tool() -> Value {
    json!([{
        "name": "confirmAction",
        "description": "Ask the user to confirm an action",
        "parameters": {"type": "object", "properties": {"action": {"type": "string"}, "count": {"type": "number"}}}
    }])
}

/// A frontend that handles both of the route's pause tools: `confirmAction` and `ask_user`.
fn pause_tools() -> Value {
    let mut tools = confirm_tool();
    tools.as_array_mut().unwrap().push(json!({
        "name": "ask_user",
        "description": "Ask the user a question",
        "parameters": {"type": "object", "properties": {"question": {"type": "string"}}}
    }));
    tools
}

// ---------------------------------------------------------------------------------------------------------
// The harness itself

/// A green test means something only if the driver catches a client's rejection: the scripted upstream's
/// double RUN_ERROR, sent to the clients directly (no proxy), is refused by both versions.
#[tokio::test]
async fn the_driver_reports_what_the_real_clients_reject() {
    let upstream = UpstreamProcess::scripted().await;
    for version in CLIENTS {
        let drive = Drive::run(
            version,
            &upstream.url("/agent"),
            json!({"messages": user("scenario:double-error")}),
        )
        .await;
        assert_eq!(drive.code, Some(1), "{}", drive.context());
        assert!(
            drive.rejection().contains("already errored"),
            "{}",
            drive.context()
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// (a) The echo route

#[tokio::test]
async fn real_clients_see_echo_text_word_by_word() {
    let proxy = Proxy::start(route("echo", "ag-ui", "echo")).await;
    for version in CLIENTS {
        let drive = Drive::accepted(
            version,
            &proxy.url("/echo"),
            json!({"threadId": format!("echo-text-{version}"), "messages": user("the quick brown 狐狸 🦊")}),
        )
        .await;
        let run = drive.only_run();
        run.assert_events(&[
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED",
        ]);
        let deltas: Vec<&str> = run
            .logged("TEXT_MESSAGE_CONTENT")
            .iter()
            .filter_map(|e| e["delta"].as_str())
            .collect();
        assert_eq!(
            deltas,
            ["the ", "quick ", "brown ", "狐狸 ", "🦊"],
            "{}",
            run.context()
        );
        assert_eq!(run.assistant_text(), "the quick brown 狐狸 🦊");
        let started = run.logged("RUN_STARTED");
        assert_eq!(started[0]["threadId"], format!("echo-text-{version}"));
        assert_eq!(started[0]["runId"], "run-1");
    }
}

#[tokio::test]
async fn real_clients_round_trip_an_echo_client_tool_call() {
    let proxy = Proxy::start(route("echo", "ag-ui", "echo")).await;
    for version in CLIENTS {
        let drive = Drive::accepted(
            version,
            &proxy.url("/echo"),
            json!({
                "threadId": format!("echo-tool-{version}"),
                "messages": user(r#"/tool confirmAction {"action":"delete temp files","count":15}"#),
                "tools": confirm_tool(),
                "runs": [{}, {"answerToolCalls": "confirmed"}],
            }),
        )
        .await;
        let first = drive.run_at(0);
        first.assert_events(&[
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_FINISHED",
        ]);
        assert_eq!(
            first.tool_calls(),
            [(
                "confirmAction".to_owned(),
                json!({"action": "delete temp files", "count": 15})
            )],
            "{}",
            first.context()
        );
        let second = drive.run_at(1);
        second.assert_finished();
        assert_eq!(
            second.assistant_text(),
            "Tool `confirmAction` returned: confirmed",
            "{}",
            second.context()
        );
    }
}

#[tokio::test]
async fn real_clients_declaring_the_question_tool_answer_an_echo_question_through_it() {
    let proxy = Proxy::start(route("echo", "ag-ui", "echo")).await;
    for version in CLIENTS {
        let drive = Drive::accepted(
            version,
            &proxy.url("/echo"),
            json!({
                "threadId": format!("echo-ask-{version}"),
                "messages": user("/ask Which colour?"),
                "tools": pause_tools(),
                "runs": [{}, {"answerToolCalls": "blue"}],
            }),
        )
        .await;
        let first = drive.run_at(0);
        first.assert_finished();
        // The client handles `ask_user`: the question pauses the run as a call of it.
        let calls = first.tool_calls();
        assert_eq!(calls.len(), 1, "{}", first.context());
        assert_eq!(calls[0].0, "ask_user");
        assert_eq!(calls[0].1["question"], "Which colour?");
        let second = drive.run_at(1);
        second.assert_finished();
        assert_eq!(
            second.assistant_text(),
            "You answered: blue",
            "{}",
            second.context()
        );
    }
}

#[tokio::test]
async fn real_clients_resume_an_echo_question_paused_as_an_interrupt() {
    let proxy = Proxy::start(
        Routes::default()
            .route(route("outcome", "ag-ui", "echo").translate("agui_interrupts", "outcome"))
            .route(route("auto", "ag-ui", "echo")),
    )
    .await;
    // Paused by the route's choice, and (auto) because the client declared only `confirmAction`: it has no
    // handler for `ask_user`.
    for (path, tools) in [("/outcome", json!([])), ("/auto", confirm_tool())] {
        for version in CLIENTS {
            resume_an_echo_question(&proxy.url(path), version, tools.clone()).await;
        }
    }
}

async fn resume_an_echo_question(url: &str, version: &str, tools: Value) {
    let drive = Drive::accepted(
        version,
        url,
        json!({
            "threadId": format!("echo-interrupt-{version}"),
            "messages": user("/ask Which colour?"),
            "tools": tools,
            "runs": [{}, {"resumeInterrupts": "green"}],
        }),
    )
    .await;
    let first = drive.run_at(0);
    first.assert_finished();
    // The question shows as text (for clients that ignore `outcome`) and as the run's interrupt.
    assert_eq!(
        first.assistant_text(),
        "Which colour?",
        "{}",
        first.context()
    );
    let finished = first.logged("RUN_FINISHED");
    let outcome = &finished[0]["outcome"];
    assert_eq!(outcome["type"], "interrupt", "{}", first.context());
    assert_eq!(outcome["interrupts"][0]["reason"], "question");
    assert_eq!(outcome["interrupts"][0]["message"], "Which colour?");
    let second = drive.run_at(1);
    second.assert_finished();
    assert_eq!(
        second.assistant_text(),
        "You answered: green",
        "{}",
        second.context()
    );
}

// ---------------------------------------------------------------------------------------------------------
// (b) A scripted AG-UI upstream

/// The routes in front of the scripted upstream: with `REASONING_*` (both versions accept them), with the
/// conservative default (reasoning as `CUSTOM agent-bridge.reasoning`, pauses as calls of the tools a client
/// declares), and with pauses as `RUN_FINISHED.outcome.interrupt`.
async fn scripted_proxy(upstream: &UpstreamProcess) -> Proxy {
    let url = upstream.url("/agent");
    Proxy::start(
        Routes::default()
            .route(
                route("scripted", "ag-ui", "ag-ui")
                    .upstream(&url)
                    .translate("agui_reasoning", true),
            )
            .route(route("conservative", "ag-ui", "ag-ui").upstream(&url))
            .route(
                route("interrupts", "ag-ui", "ag-ui")
                    .upstream(&url)
                    .translate("agui_interrupts", "outcome"),
            ),
    )
    .await
}

async fn scenario(proxy: &Proxy, path: &str, version: &str, name: &str) -> Drive {
    Drive::accepted(
        version,
        &proxy.url(path),
        json!({"threadId": format!("{name}-{version}"), "messages": user(&format!("scenario:{name}"))}),
    )
    .await
}

#[tokio::test]
async fn real_clients_accept_text_tools_state_and_reasoning_from_an_ag_ui_upstream() {
    let upstream = UpstreamProcess::scripted().await;
    let proxy = scripted_proxy(&upstream).await;
    for version in CLIENTS {
        let text = scenario(&proxy, "/scripted", version, "text").await;
        let run = text.only_run();
        run.assert_finished();
        assert_eq!(run.assistant_text(), "Hello from upstream.");
        assert_eq!(
            run.logged("TEXT_MESSAGE_CONTENT").len(),
            3,
            "{}",
            run.context()
        );

        let tool = scenario(&proxy, "/scripted", version, "tool").await;
        let run = tool.only_run();
        run.assert_events(&[
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED",
        ]);
        assert_eq!(
            run.tool_calls(),
            [("get_weather".to_owned(), json!({"city": "Beijing"}))]
        );
        assert_eq!(run.tool_results(), ["sunny, 25C"], "{}", run.context());
        assert_eq!(
            run.assistant_text(),
            "Let me check.\nBeijing is sunny, 25C."
        );

        let state = scenario(&proxy, "/scripted", version, "state").await;
        let run = state.only_run();
        run.assert_finished();
        assert!(run.events().contains(&"STATE_SNAPSHOT") && run.events().contains(&"STATE_DELTA"));
        assert_eq!(
            run.state(),
            &json!({"count": 1, "items": ["apple"]}),
            "{}",
            run.context()
        );

        let reasoning = scenario(&proxy, "/scripted", version, "reasoning").await;
        let run = reasoning.only_run();
        run.assert_events(&[
            "RUN_STARTED",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED",
        ]);
        let thoughts: Vec<&str> = run
            .new_messages()
            .iter()
            .filter(|m| m["role"] == "reasoning")
            .filter_map(|m| m["content"].as_str())
            .collect();
        assert_eq!(
            thoughts,
            ["The user wants a short answer."],
            "{}",
            run.context()
        );
        assert_eq!(run.assistant_text(), "Short answer.");

        // Pre-1.0 THINKING_* upstream events reach the client as REASONING_*.
        let thinking = scenario(&proxy, "/scripted", version, "thinking").await;
        let run = thinking.only_run();
        run.assert_finished();
        assert!(!run.events().iter().any(|e| e.starts_with("THINKING")));
        assert_eq!(
            run.logged("REASONING_MESSAGE_CONTENT").len(),
            1,
            "{}",
            run.context()
        );
        assert_eq!(run.assistant_text(), "Thought through.");

        // Without the switch reasoning travels as namespaced CUSTOM events.
        let conservative = scenario(&proxy, "/conservative", version, "reasoning").await;
        let run = conservative.only_run();
        run.assert_finished();
        assert!(
            !run.events().iter().any(|e| e.starts_with("REASONING")),
            "{}",
            run.context()
        );
        let customs = run.logged("CUSTOM");
        assert!(
            !customs.is_empty()
                && customs
                    .iter()
                    .all(|e| e["name"] == "agent-bridge.reasoning"),
            "{}",
            run.context()
        );
        let deltas: String = customs
            .iter()
            .filter_map(|e| e["value"]["delta"].as_str())
            .collect();
        assert_eq!(deltas, "The user wants a short answer.");
    }
}

#[tokio::test]
async fn real_clients_accept_what_the_proxy_makes_of_upstream_quirks() {
    let upstream = UpstreamProcess::scripted().await;
    let proxy = scripted_proxy(&upstream).await;
    for version in CLIENTS {
        // TEXT_MESSAGE_CHUNK / TOOL_CALL_CHUNK are expanded to START / CONTENT / END.
        let chunks = scenario(&proxy, "/scripted", version, "chunks").await;
        let run = chunks.only_run();
        run.assert_finished();
        assert!(
            !run.events().iter().any(|e| e.ends_with("_CHUNK")),
            "{}",
            run.context()
        );
        assert_eq!(run.assistant_text(), "Chunked text.");
        assert_eq!(run.tool_calls(), [("lookup".to_owned(), json!({"q": "x"}))]);
        assert_eq!(run.tool_results(), ["found"]);

        // CRLF / CR line ends, comments, event: and id: lines, `data:` without a space, nulls.
        let quirks = scenario(&proxy, "/scripted", version, "quirks").await;
        let run = quirks.only_run();
        run.assert_finished();
        assert_eq!(
            run.assistant_text(),
            "Quirky but fine.",
            "{}",
            run.context()
        );

        // An upstream that stops mid-message: the open message is closed, then one RUN_ERROR.
        let eof = scenario(&proxy, "/scripted", version, "eof").await;
        let run = eof.only_run();
        run.assert_run_error("UPSTREAM_EOF");
        assert_eq!(run.assistant_text(), "Cut off");

        // Two RUN_ERROR frames upstream (cloudbase-agent-server's habit): the client sees the first, once.
        let double = scenario(&proxy, "/scripted", version, "double-error").await;
        let message = double.only_run().assert_run_error("UPSTREAM_ERROR");
        assert_eq!(message, "boom requested");

        // A non-2xx answer: RUN_ERROR carrying the status and the upstream's body.
        let refused = scenario(&proxy, "/scripted", version, "http-500").await;
        let message = refused.only_run().assert_run_error("UPSTREAM_HTTP_ERROR");
        assert!(
            message.contains("500") && message.contains("scripted failure"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn real_clients_round_trip_a_client_tool_call_through_an_ag_ui_upstream() {
    let upstream = UpstreamProcess::scripted().await;
    let proxy = scripted_proxy(&upstream).await;
    for version in CLIENTS {
        let drive = Drive::accepted(
            version,
            &proxy.url("/scripted"),
            json!({
                "threadId": format!("client-tool-{version}"),
                "messages": user("scenario:client-tool"),
                "tools": confirm_tool(),
                "runs": [{}, {"answerToolCalls": "approved"}],
            }),
        )
        .await;
        let first = drive.run_at(0);
        first.assert_events(&[
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_FINISHED",
        ]);
        assert_eq!(
            first.tool_calls(),
            [("confirmAction".to_owned(), json!({"action": "deploy"}))]
        );
        // The upstream answers from the tool message the client sent in the second run.
        let second = drive.run_at(1);
        second.assert_finished();
        assert_eq!(
            second.assistant_text(),
            "Tool confirmAction returned: approved",
            "{}\nupstream log:\n{}",
            second.context(),
            upstream.log()
        );
    }
}

#[tokio::test]
async fn real_clients_answer_an_upstream_interrupt_as_a_tool_call_or_with_resume() {
    let upstream = UpstreamProcess::scripted().await;
    let proxy = scripted_proxy(&upstream).await;
    let resumed = r#"Resumed with int-1=resolved:{"approved":true}"#;
    for version in CLIENTS {
        // A client that declares the approval tool: the pause is a call of it; the answer is a tool message.
        let drive = Drive::accepted(
            version,
            &proxy.url("/conservative"),
            json!({
                "threadId": format!("interrupt-tool-{version}"),
                "messages": user("scenario:interrupt"),
                "tools": pause_tools(),
                "runs": [{}, {"answerToolCalls": r#"{"approved":true}"#}],
            }),
        )
        .await;
        let first = drive.run_at(0);
        first.assert_finished();
        let calls = first.tool_calls();
        assert_eq!(calls.len(), 1, "{}", first.context());
        assert_eq!(calls[0].0, "confirmAction");
        assert_eq!(calls[0].1["action"], "Delete 15 temp files?");
        let second = drive.run_at(1);
        second.assert_finished();
        assert_eq!(
            second.assistant_text(),
            resumed,
            "{}\nupstream log:\n{}",
            second.context(),
            upstream.log()
        );

        // agui_interrupts: the pause is the run's outcome; the answer goes back in `resume`.
        let drive = Drive::accepted(
            version,
            &proxy.url("/interrupts"),
            json!({
                "threadId": format!("interrupt-resume-{version}"),
                "messages": user("scenario:interrupt"),
                "runs": [{}, {"resumeInterrupts": {"approved": true}}],
            }),
        )
        .await;
        let first = drive.run_at(0);
        first.assert_finished();
        let finished = first.logged("RUN_FINISHED");
        let interrupts = &finished[0]["outcome"]["interrupts"];
        assert_eq!(interrupts[0]["id"], "int-1", "{}", first.context());
        assert_eq!(interrupts[0]["reason"], "approval");
        assert!(first.assistant_text().contains("Delete 15 temp files?"));
        let second = drive.run_at(1);
        second.assert_finished();
        assert_eq!(
            second.assistant_text(),
            resumed,
            "{}\nupstream log:\n{}",
            second.context(),
            upstream.log()
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// (b') The real CloudBase AG-UI server as the upstream

#[tokio::test]
async fn real_clients_talk_to_a_real_cloudbase_agent_server_through_the_proxy() {
    let upstream = UpstreamProcess::cloudbase().await;
    let proxy = Proxy::start(
        route("cloudbase", "ag-ui", "ag-ui")
            .upstream(&upstream.url("/send-message"))
            .translate("agui_reasoning", true),
    )
    .await;
    let url = proxy.url("/cloudbase");
    for version in CLIENTS {
        let text = scenario(&proxy, "/cloudbase", version, "text").await;
        let run = text.only_run();
        run.assert_finished();
        assert_eq!(
            run.assistant_text(),
            "Hello from CloudBase.",
            "{}",
            run.context()
        );

        // CloudBase drops parentMessageId and adds role:"tool" to the result.
        let tool = scenario(&proxy, "/cloudbase", version, "tool").await;
        let run = tool.only_run();
        run.assert_finished();
        assert_eq!(
            run.tool_calls(),
            [("get_weather".to_owned(), json!({"city": "Beijing"}))]
        );
        assert_eq!(run.tool_results(), ["sunny, 25C"]);
        assert_eq!(
            run.assistant_text(),
            "Let me check.\nBeijing is sunny, 25C."
        );

        // CloudBase streams reasoning as pre-1.0 THINKING_* events.
        let thinking = scenario(&proxy, "/cloudbase", version, "thinking").await;
        let run = thinking.only_run();
        run.assert_finished();
        assert!(
            run.events().contains(&"REASONING_MESSAGE_CONTENT"),
            "{}",
            run.context()
        );
        assert_eq!(run.assistant_text(), "Thought through.");

        let state = scenario(&proxy, "/cloudbase", version, "state").await;
        let run = state.only_run();
        run.assert_finished();
        assert_eq!(
            run.state(),
            &json!({"count": 1, "items": ["apple"]}),
            "{}",
            run.context()
        );

        // An agent that raises: CloudBase sends two RUN_ERROR frames; the client sees one.
        let boom = scenario(&proxy, "/cloudbase", version, "boom").await;
        let run = boom.only_run();
        let message = run.assert_run_error("UPSTREAM_ERROR");
        assert_eq!(message, "boom requested", "{}", run.context());
        assert_eq!(run.assistant_text(), "About to fail.");

        // A client tool round trip: the history the proxy sends passes CloudBase's pydantic validation.
        let drive = Drive::accepted(
            version,
            &url,
            json!({
                "threadId": format!("cloudbase-client-tool-{version}"),
                "messages": user("scenario:client-tool"),
                "tools": confirm_tool(),
                "runs": [{}, {"answerToolCalls": "approved"}],
            }),
        )
        .await;
        assert_eq!(
            drive.run_at(0).tool_calls(),
            [("confirmAction".to_owned(), json!({"action": "deploy"}))]
        );
        let second = drive.run_at(1);
        second.assert_finished();
        assert_eq!(
            second.assistant_text(),
            "Tool confirmAction returned: approved",
            "{}\nCloudBase log:\n{}",
            second.context(),
            upstream.log()
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// (c) Upstream failure, (d) bad requests

#[tokio::test]
async fn real_clients_get_run_error_when_the_upstream_refuses_connections() {
    let dead = format!("http://127.0.0.1:{}/agent", refused_port());
    let proxy = Proxy::start(route("dead", "ag-ui", "ag-ui").upstream(&dead)).await;
    for version in CLIENTS {
        // runAgent resolves; only onRunErrorEvent fires.
        let drive = Drive::accepted(
            version,
            &proxy.url("/dead"),
            json!({"threadId": format!("dead-{version}"), "messages": user("hello")}),
        )
        .await;
        let run = drive.only_run();
        run.assert_events(&["RUN_STARTED", "RUN_ERROR"]);
        let message = run.assert_run_error("UPSTREAM_UNREACHABLE");
        assert!(message.contains("127.0.0.1"), "{message}");
    }
}

#[tokio::test]
async fn real_clients_reject_a_bad_request_with_http_400() {
    let proxy = Proxy::start(route("echo", "ag-ui", "echo")).await;
    for version in CLIENTS {
        // Both versions send an empty threadId as given; the proxy refuses it before any stream.
        let drive = Drive::run(
            version,
            &proxy.url("/echo"),
            json!({"threadId": "", "messages": user("hello")}),
        )
        .await;
        assert_eq!(drive.code, Some(1), "{}", drive.context());
        assert_eq!(
            drive.report["rejected"]["status"],
            400,
            "{}",
            drive.context()
        );
        let message = drive.rejection();
        assert!(
            message.starts_with("HTTP 400: ")
                && message.contains("INVALID_REQUEST")
                && message.contains("threadId"),
            "{}",
            drive.context()
        );
        assert!(
            drive.only_run().events().is_empty(),
            "no stream after a 400"
        );
    }

    // A tool message without toolCallId: 0.0.59 sends it and gets the proxy's 400 naming the field; 1.0
    // refuses to send it (its own ZodError), so the proxy never sees it.
    let messages = json!([
        {"id": "u1", "role": "user", "content": "hello"},
        {"id": "t1", "role": "tool", "content": "orphan"},
    ]);
    let old = Drive::run(
        "0.0.59",
        &proxy.url("/echo"),
        json!({"threadId": "bad-tool-0.0.59", "messages": messages}),
    )
    .await;
    assert_eq!(old.report["rejected"]["status"], 400, "{}", old.context());
    assert!(
        old.rejection().starts_with("HTTP 400: ") && old.rejection().contains("toolCallId"),
        "{}",
        old.context()
    );
    let new = Drive::run(
        "1.0.0",
        &proxy.url("/echo"),
        json!({"threadId": "bad-tool-1.0.0", "messages": messages}),
    )
    .await;
    assert_eq!(new.code, Some(1), "{}", new.context());
    assert_eq!(
        new.report["rejected"]["name"],
        "ZodError",
        "{}",
        new.context()
    );
}
