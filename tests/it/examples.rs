//! The walk-throughs of `examples/`, end to end over real sockets: each test starts the example's peer as its
//! README says (bound to port 0), serves the example's own `routes.toml` (its `${…_PORT}` set to the peer's
//! port, `listen` moved to `127.0.0.1:0`), runs the client the README runs, and checks what the README says
//! you should see.
//!
//! - `copilotkit-to-a2a`: the real `@ag-ui/client` 1.0.0 `HttpAgent` (`tests/interop/ag-ui/drive.mjs`) → the
//!   real `a2a-sdk` 0.2.13 agent (`tests/interop/a2a/a2a_server.py`);
//! - `cmdc-as-ag-kit`: the useChat-like client (`tests/interop/ag-kit/agkit_client.py`) → the example's
//!   scripted CMDC gateway (`examples/cmdc-as-ag-kit/cmdc_gateway.py`), with an approval round trip;
//! - `agkit-agent-as-agui`: the real `@ag-ui/client` 1.0.0 → the scripted AG-Kit v0 agent
//!   (`tests/interop/ag-kit/agkit_upstream.py`), with text and a client tool round trip.
//!
//! Needs what `bash .ci/run` installs (the venv `tests/interop/.venv`, `npm ci` in
//! `tests/interop/ag-ui/client-1.0.0`); without it the tests fail and say so.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_bridge::config::Config;
use agent_bridge::server::Server;
use serde_json::{json, Value};
use tokio::process::Command;
use tokio::sync::oneshot;

use crate::support::interop::{require_installed, run_driver, Process};

/// The longest a peer may take to print its port (the A2A server imports a2a-sdk and uvicorn first).
const START_LIMIT: Duration = Duration::from_secs(30);
/// The longest one client run may take.
const DRIVE_LIMIT: Duration = Duration::from_secs(40);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn example_dir(name: &str) -> PathBuf {
    root().join("examples").join(name)
}

fn venv_python() -> PathBuf {
    let python = root().join("tests/interop/.venv/bin/python");
    require_installed(&python, "the Python venv with a2a-sdk 0.2.13");
    python
}

fn ag_ui_client_dir() -> PathBuf {
    let dir = root().join("tests/interop/ag-ui/client-1.0.0");
    require_installed(
        &dir.join("node_modules/@ag-ui/client/package.json"),
        "@ag-ui/client@1.0.0",
    );
    dir
}

// ---------------------------------------------------------------------------------------------------------
// The example's routes.toml, served in process

/// The proxy serving an example's routes.toml on `127.0.0.1:0`; stops when dropped.
struct Proxy {
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl Proxy {
    /// Serves `examples/<example>/routes.toml` with `${var}` set to `port` and `listen` on `127.0.0.1:0`.
    async fn example(example: &str, var: &str, port: u16) -> Proxy {
        let path = example_dir(example).join("routes.toml");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let placeholder = format!("${{{var}}}");
        assert!(
            text.contains(&placeholder),
            "{} does not use {placeholder}",
            path.display()
        );
        let mut replaced_listen = false;
        let text: String = text
            .replace(&placeholder, &port.to_string())
            .lines()
            .map(|line| {
                if line.trim_start().starts_with("listen ")
                    || line.trim_start().starts_with("listen=")
                {
                    replaced_listen = true;
                    "listen = \"127.0.0.1:0\"".to_owned()
                } else {
                    line.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert!(replaced_listen, "{} has no listen line", path.display());
        let config = Config::parse(&text, &path.display().to_string())
            .unwrap_or_else(|e| panic!("{} does not parse: {e}\n{text}", path.display()));
        let server = Server::bind(&config)
            .await
            .unwrap_or_else(|e| panic!("the proxy cannot start: {e}"))
            .with_shutdown_grace(Duration::from_secs(1));
        let addr = server.local_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        Proxy { addr, _stop: stop }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// Starts `script` (a path under the repository) with the venv's python, in `dir`.
async fn python_peer(what: &str, script: &Path, dir: &Path) -> Process {
    let mut command = Command::new(venv_python());
    command.arg(script);
    Process::start(what, command, dir, START_LIMIT).await
}

// ---------------------------------------------------------------------------------------------------------
// The clients

/// Runs `drive.mjs` with `@ag-ui/client` 1.0.0 against `url`; fails unless every run resolved.
async fn ag_ui_drive(url: &str, spec: Value, peer: &Process) -> Value {
    let mut command = Command::new("node");
    command
        .arg(root().join("tests/interop/ag-ui/drive.mjs"))
        .arg(ag_ui_client_dir())
        .arg(url)
        .arg(spec.to_string())
        .env("DRIVE_TIMEOUT_MS", "30000");
    let output = run_driver(
        command,
        DRIVE_LIMIT,
        "@ag-ui/client 1.0.0",
        url,
        "cannot run `node` (Node.js 20+ is needed for the examples' tests)",
        "the driver ran",
    )
    .await;
    assert!(
        output.code == Some(0) && output.report["rejected"].is_null(),
        "@ag-ui/client failed (exit {:?})\nreport: {}\nstderr: {}\npeer's log:\n{}",
        output.code,
        output.report,
        output.stderr,
        peer.stderr()
    );
    output.report
}

/// The text of every `TEXT_MESSAGE_CONTENT` of one run of a `drive.mjs` report.
fn run_text(run: &Value) -> String {
    run["log"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

/// Runs `agkit_client.py` with `steps` against `url`; fails unless every step ran and nothing would trip
/// `useChat`.
async fn ag_kit_chat(url: &str, steps: Value, peer: &Process) -> Value {
    let mut command = Command::new(venv_python());
    command
        .arg(root().join("tests/interop/ag-kit/agkit_client.py"))
        .arg(url)
        .arg(steps.to_string())
        .env("CLIENT_TIMEOUT_S", "30");
    let output = run_driver(
        command,
        DRIVE_LIMIT,
        "the useChat-like client (agkit_client.py)",
        url,
        "cannot run the useChat-like client",
        "the client ran",
    )
    .await;
    assert!(
        output.code == Some(0)
            && output.report["failure"].is_null()
            && output.report["violations"] == json!([]),
        "the client failed (exit {:?})\nreport: {}\nstderr: {}\npeer's log:\n{}",
        output.code,
        output.report,
        output.stderr,
        peer.stderr()
    );
    output.report
}

// ---------------------------------------------------------------------------------------------------------
// (1) examples/copilotkit-to-a2a

#[tokio::test]
async fn copilotkit_to_a2a_the_http_agent_gets_the_a2a_agents_text() {
    let agent = python_peer(
        "the a2a-sdk agent (a2a_server.py)",
        &root().join("tests/interop/a2a/a2a_server.py"),
        &root().join("tests/interop/a2a"),
    )
    .await;
    let proxy = Proxy::example("copilotkit-to-a2a", "A2A_PORT", agent.port).await;
    let report = ag_ui_drive(
        &proxy.url("/agents/a2a"),
        json!({"threadId": "example-1",
               "messages": [{"id": "u1", "role": "user", "content": "hello from CopilotKit"}]}),
        &agent,
    )
    .await;
    let run = &report["runs"][0];
    assert_eq!(
        run_text(run),
        "echo: hello from CopilotKit",
        "{report}\nagent's log:\n{}",
        agent.stderr()
    );
    assert_eq!(run["events"][0], "RUN_STARTED", "{report}");
    assert_eq!(
        run["events"].as_array().and_then(|e| e.last()),
        Some(&json!("RUN_FINISHED")),
        "{report}"
    );
    // The agent keeps the assistant message in its history, as CopilotKit shows it.
    let last = report["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned();
    let last = last.unwrap_or_default();
    assert_eq!(last["role"], "assistant", "{report}");
    assert_eq!(last["content"], "echo: hello from CopilotKit", "{report}");
}

// ---------------------------------------------------------------------------------------------------------
// (2) examples/cmdc-as-ag-kit

#[tokio::test]
async fn cmdc_as_ag_kit_text_and_an_approval_round_trip() {
    let dir = example_dir("cmdc-as-ag-kit");
    let gateway = python_peer(
        "the example's CMDC gateway (cmdc_gateway.py)",
        &dir.join("cmdc_gateway.py"),
        &dir,
    )
    .await;
    let proxy = Proxy::example("cmdc-as-ag-kit", "CMDC_PORT", gateway.port).await;
    let report = ag_kit_chat(
        &proxy.url("/agents/cmdc/send-message"),
        json!([{"say": "hello"},
               {"say": "danger: clean the scratch dir"},
               {"resume": {"approved": true}}]),
        &gateway,
    )
    .await;
    let context = format!("{report}\ngateway's log:\n{}", gateway.stderr());
    let steps = report["steps"].as_array().expect("steps");
    let request = |step: usize| &steps[step]["requests"][0];

    // A plain turn: the gateway's text.
    assert_eq!(request(0)["status"], 200, "{context}");
    assert_eq!(request(0)["text"], "echo: hello", "{context}");
    assert_eq!(request(0)["done"], true, "{context}");

    // "danger": the run pauses on an interrupt asking for approval, and no text has come yet.
    let asked = request(1);
    assert_eq!(asked["status"], 200, "{context}");
    let interrupts = asked["interrupts"].as_array().expect("interrupts");
    assert_eq!(interrupts.len(), 1, "{context}");
    assert_eq!(interrupts[0]["reason"], "approval", "{context}");
    assert_eq!(asked["text"], "", "{context}");
    assert_eq!(asked["done"], true, "{context}");

    // Resumed with {"approved": true}: the gateway was told, and the text after approval arrives.
    let resumed = request(2);
    assert_eq!(resumed["status"], 200, "{context}");
    assert_eq!(
        resumed["body"]["resume"]["interruptId"], interrupts[0]["id"],
        "{context}"
    );
    assert_eq!(
        resumed["text"], "Done: danger: clean the scratch dir",
        "{context}"
    );
    assert_eq!(resumed["done"], true, "{context}");
    assert!(
        gateway.stderr().contains("/approve"),
        "the gateway got no approve: {context}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// (3) examples/agkit-agent-as-agui

#[tokio::test]
async fn agkit_agent_as_agui_text_and_a_client_tool_round_trip() {
    let agent = python_peer(
        "the scripted AG-Kit v0 agent (agkit_upstream.py)",
        &root().join("tests/interop/ag-kit/agkit_upstream.py"),
        &root().join("tests/interop/ag-kit"),
    )
    .await;
    let proxy = Proxy::example("agkit-agent-as-agui", "AGKIT_PORT", agent.port).await;
    let url = proxy.url("/agents/legacy");

    // Text.
    let report = ag_ui_drive(
        &url,
        json!({"threadId": "example-3-text",
               "messages": [{"id": "u1", "role": "user", "content": "hi"}]}),
        &agent,
    )
    .await;
    assert_eq!(
        run_text(&report["runs"][0]),
        "Hello there!",
        "{report}\nagent's log:\n{}",
        agent.stderr()
    );

    // A client tool: the v0 agent calls the frontend's tool, the frontend answers it in the next run, and the
    // agent reports the result.
    let tool = json!({"name": "change-background-color", "description": "Change the background color",
                      "parameters": {"type": "object", "properties": {"color": {"type": "string"}}}});
    let report = ag_ui_drive(
        &url,
        json!({"threadId": "example-3-tool",
               "messages": [{"id": "u1", "role": "user", "content": "use a tool"}],
               "tools": [tool],
               "runs": [{}, {"answerToolCalls": "Background changed to blue"}]}),
        &agent,
    )
    .await;
    let context = format!("{report}\nagent's log:\n{}", agent.stderr());
    let first = &report["runs"][0];
    let log = first["log"].as_array().expect("log");
    let start = log
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START")
        .unwrap_or_else(|| panic!("no TOOL_CALL_START: {context}"));
    assert_eq!(
        start["toolCallName"], "change-background-color",
        "{context}"
    );
    let args: String = log
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_ARGS")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    let args: Value = serde_json::from_str(&args).unwrap_or_else(|e| panic!("{e}: {context}"));
    assert_eq!(args, json!({"color": "blue"}), "{context}");
    assert_eq!(
        run_text(&report["runs"][1]),
        "tool said: Background changed to blue",
        "{context}"
    );
}
