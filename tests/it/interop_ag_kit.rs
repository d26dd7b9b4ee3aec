//! Interop: the proxy's AG-Kit send-message v0 faces, over real sockets, against peers running as processes.
//!
//! No runnable v0 peer exists (`specs/ag-kit.md` §6: the real client, `useChat` of `@cloudbase/agent-ui-web`
//! 0.0.24, needs a React bundle and a package the registry no longer serves; the v0 servers are gone), so two
//! Python stdlib scripts built from the spec note's §6 stand in for them:
//!
//! - `tests/interop/ag-kit/agkit_client.py`, a `useChat`-like client: delta messages, string tool schemas, the
//!   stream read until `data: [DONE]`, client tools run and only their results re-posted, interrupts resumed
//!   with JSON-text payloads; it reports what it saw, and what `useChat` would choke on ("violations");
//! - `tests/interop/ag-kit/agkit_upstream.py`, a scripted v0 agent keeping each conversation's history under
//!   its `conversationId` (text, a client tool, a server tool, an interrupt, memory, error frames); it logs
//!   every request it received.
//!
//! The client drives the proxy's AG-Kit inbound in front of the scripted agent (AG-Kit → AG-Kit), in front of
//! the built-in echo agent, and in front of the real CloudBase AG-UI server (`cloudbase-agent-server` 0.1.22,
//! `tests/interop/ag-ui/cloudbase_upstream.py`) configured as an AG-Kit upstream on its `/send-message` path:
//! the proxy must see the AG-UI answer for what it is (§5.2).
//!
//! Every assertion is on what the client saw (texts, tool calls and their arguments, interrupts, errors, HTTP
//! statuses) or on what the upstream logged it received. Runs the scripts with the Python of the venv
//! `bash .ci/run` makes (`tests/interop/.venv`, which also holds `cloudbase-agent-server`); without it the
//! tests fail and say so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::Command;

use crate::support::interop::{require_installed, route, run_driver, Process};
use crate::support::Proxy;

/// The longest one client run (every step of a scenario) may take.
const DRIVE_LIMIT: Duration = Duration::from_secs(40);
/// The longest an upstream may take to print its port (the CloudBase server imports FastAPI first).
const START_LIMIT: Duration = Duration::from_secs(30);

/// The client tool `agkit_client.py` offers, and what its handler answers for `{"color": "blue"}`.
const CLIENT_TOOL: &str = "change-background-color";

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

fn ag_kit_dir() -> PathBuf {
    interop_dir().join("ag-kit")
}

/// The venv's python: the scripts need only the standard library, but the CloudBase server needs the venv,
/// and `bash .ci/run` guarantees this one interpreter.
fn venv_python() -> PathBuf {
    let python = interop_dir().join(".venv/bin/python");
    require_installed(
        &python,
        "the Python venv with cloudbase-agent-server 0.1.22",
    );
    python
}

// ---------------------------------------------------------------------------------------------------------
// The proxy, in process

/// The AG-Kit endpoint of the route `name` (its `send-message` path, `useChat`'s default).
fn send_message(proxy: &Proxy, name: &str) -> String {
    proxy.url(&format!("/{name}/send-message"))
}

// ---------------------------------------------------------------------------------------------------------
// The upstreams

/// An upstream process that printed `{"port": N}`; killed when dropped. Its stderr is kept.
struct Peer {
    what: &'static str,
    process: Process,
}

impl Peer {
    /// The scripted v0 agent (`agkit_upstream.py`).
    async fn scripted() -> Peer {
        let what = "the scripted AG-Kit v0 agent (agkit_upstream.py)";
        let mut command = Command::new(venv_python());
        command.arg("agkit_upstream.py");
        Peer {
            what,
            process: Process::start(what, command, ag_kit_dir(), START_LIMIT).await,
        }
    }

    /// The real CloudBase AG-UI server (`cloudbase_upstream.py`, cloudbase-agent-server 0.1.22).
    async fn cloudbase() -> Peer {
        let what = "the CloudBase AG-UI server (cloudbase_upstream.py)";
        let mut command = Command::new(venv_python());
        command.arg("cloudbase_upstream.py");
        Peer {
            what,
            process: Process::start(what, command, interop_dir().join("ag-ui"), START_LIMIT).await,
        }
    }

    fn url(&self, path: &str) -> String {
        self.process.url(path)
    }

    fn log(&self) -> String {
        format!("{} log:\n{}", self.what, self.process.stderr())
    }

    /// The request bodies the scripted agent logged (`{"request": {"path", "body"}}`), in order.
    fn requests(&self) -> Vec<Value> {
        self.process
            .stderr()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|v| v.get("request").map(|r| r["body"].clone()))
            .collect()
    }

    /// The logged requests whose last message says exactly `text`.
    fn requests_saying(&self, text: &str) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|body| {
                body["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .is_some_and(|m| m["content"] == text)
            })
            .collect()
    }

    /// The one logged request whose last message says `text`.
    fn request_saying(&self, text: &str) -> Value {
        let requests = self.requests_saying(text);
        assert_eq!(
            requests.len(),
            1,
            "expected one request saying {text:?}; {}",
            self.log()
        );
        requests.into_iter().next().unwrap()
    }

    /// The logged requests in the upstream conversation `id`.
    fn requests_in(&self, id: &Value) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|body| &body["conversationId"] == id)
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------------------
// The useChat-like client (tests/interop/ag-kit/agkit_client.py)

/// What one client run printed.
struct Chat {
    code: Option<i32>,
    report: Value,
    stderr: String,
    /// The upstream's log (or anything else worth showing when an assertion fails).
    context: String,
}

impl Chat {
    /// Runs `scenario` (a name in `agkit_client.py`'s `SCENARIOS`, or a JSON list of steps) against `url`;
    /// fails unless every step ran and nothing the client got would trip `useChat`.
    async fn run(url: &str, scenario: &str) -> Chat {
        let mut command = Command::new(venv_python());
        command
            .arg("agkit_client.py")
            .arg(url)
            .arg(scenario)
            .current_dir(ag_kit_dir())
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
        let chat = Chat {
            code: output.code,
            report: output.report,
            stderr: output.stderr,
            context: String::new(),
        };
        assert!(
            chat.code == Some(0) && chat.report["failure"].is_null(),
            "the client failed: {}",
            chat.context()
        );
        assert_eq!(
            chat.report["violations"],
            json!([]),
            "the client got what useChat would choke on: {}",
            chat.context()
        );
        chat
    }

    /// Adds `context` (an upstream's log) to failure messages.
    fn with(mut self, context: String) -> Chat {
        self.context = context;
        self
    }

    fn context(&self) -> String {
        format!(
            "client exit {:?}\nreport: {}\nstderr: {}\n{}",
            self.code, self.report, self.stderr, self.context
        )
    }

    /// The requests of step `index` (the first POST, then the automatic re-posts).
    fn step(&self, index: usize) -> Vec<Seen<'_>> {
        let requests = self.report["steps"][index]["requests"]
            .as_array()
            .unwrap_or_else(|| panic!("no step {index}: {}", self.context()));
        requests
            .iter()
            .map(|value| Seen { chat: self, value })
            .collect()
    }

    /// The one request of step `index`, which must have been the only one.
    fn only(&self, index: usize) -> Seen<'_> {
        let mut requests = self.step(index);
        assert_eq!(
            requests.len(),
            1,
            "step {index} made one request: {}",
            self.context()
        );
        requests.remove(0)
    }

    fn conversation_ids(&self) -> Vec<String> {
        self.report["conversationIds"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    }
}

/// One request as the client saw it.
#[derive(Clone, Copy)]
struct Seen<'a> {
    chat: &'a Chat,
    value: &'a Value,
}

impl<'a> Seen<'a> {
    fn context(&self) -> String {
        self.chat.context()
    }

    fn status(&self) -> u64 {
        self.value["status"].as_u64().unwrap_or_default()
    }

    /// The request's stream completed normally: 200, an event stream, `[DONE]`, no error frame.
    fn assert_streamed(&self) -> Seen<'a> {
        assert_eq!(self.status(), 200, "{}", self.context());
        assert!(
            self.value["headers"]["content-type"]
                .as_str()
                .is_some_and(|t| t.starts_with("text/event-stream")),
            "{}",
            self.context()
        );
        assert_eq!(self.value["done"], true, "{}", self.context());
        assert_eq!(self.value["errors"], json!([]), "{}", self.context());
        *self
    }

    /// The concatenated `text` contents.
    fn text(&self) -> &'a str {
        self.value["text"].as_str().unwrap_or_default()
    }

    /// The `text` contents, one per event.
    fn texts(&self) -> Vec<&'a str> {
        self.events()
            .iter()
            .filter(|e| e["type"] == "text")
            .filter_map(|e| e["content"].as_str())
            .collect()
    }

    fn events(&self) -> Vec<&'a Value> {
        self.value["events"]
            .as_array()
            .into_iter()
            .flatten()
            .collect()
    }

    /// The event types, in order.
    fn types(&self) -> Vec<&'a str> {
        self.events()
            .iter()
            .filter_map(|e| e["type"].as_str())
            .collect()
    }

    /// (id, name, parsed arguments) of every tool call.
    fn tool_calls(&self) -> Vec<(String, String, Value)> {
        self.value["toolCalls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|call| {
                (
                    call["id"].as_str().unwrap_or_default().to_owned(),
                    call["name"].as_str().unwrap_or_default().to_owned(),
                    call["args"].clone(),
                )
            })
            .collect()
    }

    /// (toolCallId, result) of every `tool-result`.
    fn tool_results(&self) -> Vec<(String, Value)> {
        self.value["toolResults"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["toolCallId"].as_str().unwrap_or_default().to_owned(),
                    r["result"].clone(),
                )
            })
            .collect()
    }

    /// (toolCallId, result) of the client tools the client ran after this request's stream.
    fn ran_tools(&self) -> Vec<(String, String)> {
        self.value["ranTools"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["toolCallId"].as_str().unwrap_or_default().to_owned(),
                    r["result"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    fn interrupts(&self) -> Vec<&'a Value> {
        self.value["interrupts"]
            .as_array()
            .into_iter()
            .flatten()
            .collect()
    }

    fn errors(&self) -> Vec<&'a Value> {
        self.value["errors"]
            .as_array()
            .into_iter()
            .flatten()
            .collect()
    }

    /// What the client sent.
    fn body(&self) -> &'a Value {
        &self.value["body"]
    }

    /// The body of a refused request.
    fn error_body(&self) -> &'a Value {
        &self.value["errorBody"]
    }
}

// ---------------------------------------------------------------------------------------------------------
// (1) useChat-like client → AG-Kit inbound → AG-Kit outbound → the scripted v0 agent

async fn scripted_route(agent: &Peer) -> Proxy {
    Proxy::start(route("kit", "ag-kit", "ag-kit").upstream(&agent.url("/send-message"))).await
}

#[tokio::test]
async fn text_streams_through_to_the_client_and_the_agent_gets_a_v0_delta() {
    let agent = Peer::scripted().await;
    let proxy = scripted_route(&agent).await;
    let chat = Chat::run(&send_message(&proxy, "kit"), "text")
        .await
        .with(agent.log());

    let hi = chat.only(0).assert_streamed();
    assert_eq!(hi.texts(), ["Hello", " there!"], "{}", chat.context());
    assert_eq!(hi.text(), "Hello there!", "{}", chat.context());
    assert_eq!(
        hi.value["headers"]["cache-control"],
        "no-cache",
        "{}",
        chat.context()
    );
    assert_eq!(
        hi.value["headers"]["x-conversation-id"],
        hi.body()["conversationId"],
        "the response names the client's conversation: {}",
        chat.context()
    );

    // What the agent received is a v0 request: the new message only, the tool's schema as JSON text, a
    // conversationId the proxy keeps for this conversation.
    let request = agent.request_saying("hi");
    let ctx = format!("{request}\n{}", chat.context());
    assert_eq!(
        request["messages"],
        json!([{"role": "user", "content": "hi"}]),
        "{ctx}"
    );
    assert!(
        request["conversationId"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{ctx}"
    );
    let tools = request["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 1, "{ctx}");
    assert_eq!(tools[0]["name"], CLIENT_TOOL, "{ctx}");
    let sent_schema = hi.body()["tools"][0]["parameters"]
        .as_str()
        .expect("schema");
    let schema = tools[0]["parameters"]
        .as_str()
        .unwrap_or_else(|| panic!("the schema is not JSON text: {ctx}"));
    assert_eq!(
        serde_json::from_str::<Value>(schema).unwrap(),
        serde_json::from_str::<Value>(sent_schema).unwrap(),
        "{ctx}"
    );
}

#[tokio::test]
async fn a_client_tool_call_runs_in_the_client_and_only_its_result_is_reposted() {
    let agent = Peer::scripted().await;
    let proxy = scripted_route(&agent).await;
    let chat = Chat::run(&send_message(&proxy, "kit"), "client-tool")
        .await
        .with(agent.log());
    let ctx = chat.context();

    let requests = chat.step(0);
    assert_eq!(requests.len(), 2, "the call and the re-post: {ctx}");
    let call = requests[0].assert_streamed();
    assert_eq!(
        call.types(),
        [
            "tool-call-start",
            "tool-call-args",
            "tool-call-args",
            "tool-call-end"
        ],
        "{ctx}"
    );
    let calls = call.tool_calls();
    assert_eq!(calls.len(), 1, "{ctx}");
    let (call_id, name, args) = &calls[0];
    assert_eq!(name, CLIENT_TOOL, "{ctx}");
    assert_eq!(args, &json!({"color": "blue"}), "{ctx}");
    assert!(call.tool_results().is_empty(), "{ctx}");
    let result = "Background color successfully changed to: blue";
    assert_eq!(call.ran_tools(), [(call_id.clone(), result.to_owned())]);

    // The re-post carries only the tool message, and the agent answers it.
    let answer = requests[1].assert_streamed();
    assert_eq!(
        answer.body()["messages"],
        json!([{"role": "tool", "content": result, "toolCallId": call_id}]),
        "{ctx}"
    );
    assert_eq!(answer.text(), format!("tool said: {result}"), "{ctx}");

    // Upstream: one conversation; the second request is the tool message alone, for the agent's own call.
    let first = agent.request_saying("use the tool please");
    let conversation = agent.requests_in(&first["conversationId"]);
    assert_eq!(conversation.len(), 2, "{}", agent.log());
    assert_eq!(
        conversation[1]["messages"],
        json!([{"role": "tool", "content": result, "toolCallId": "c1"}]),
        "{}",
        agent.log()
    );
}

#[tokio::test]
async fn a_server_tool_call_arrives_with_its_result_and_nothing_is_reposted() {
    let agent = Peer::scripted().await;
    let proxy = scripted_route(&agent).await;
    let chat = Chat::run(&send_message(&proxy, "kit"), "server-tool")
        .await
        .with(agent.log());
    let ctx = chat.context();

    let weather = chat.only(0).assert_streamed();
    assert_eq!(
        weather.types(),
        [
            "tool-call-start",
            "tool-call-args",
            "tool-call-end",
            "tool-result",
            "text"
        ],
        "{ctx}"
    );
    let calls = weather.tool_calls();
    assert_eq!(calls.len(), 1, "{ctx}");
    assert_eq!(calls[0].1, "get_weather", "{ctx}");
    assert_eq!(calls[0].2, json!({"city": "Beijing"}), "{ctx}");
    assert_eq!(
        weather.tool_results(),
        [(calls[0].0.clone(), json!("sunny, 25C"))],
        "{ctx}"
    );
    assert_eq!(weather.text(), "Sunny in Beijing.", "{ctx}");
    assert!(weather.ran_tools().is_empty(), "{ctx}");
    let asked = agent.request_saying("what is the weather in Beijing?");
    assert_eq!(
        agent.requests_in(&asked["conversationId"]).len(),
        1,
        "{}",
        agent.log()
    );
}

#[tokio::test]
async fn an_interrupt_reaches_the_client_and_its_resume_continues_the_run() {
    let agent = Peer::scripted().await;
    let proxy = scripted_route(&agent).await;
    let chat = Chat::run(&send_message(&proxy, "kit"), "interrupt")
        .await
        .with(agent.log());
    let ctx = chat.context();

    let plan = chat.only(0).assert_streamed();
    assert_eq!(plan.types(), ["interrupt"], "{ctx}");
    let interrupt = plan.interrupts()[0];
    assert_eq!(interrupt["reason"], "waiting_for_user_selection", "{ctx}");
    assert_eq!(
        interrupt["payload"],
        json!({"steps": [{"description": "Dig hole", "status": "enabled"},
                         {"description": "Plant tree", "status": "enabled"}]}),
        "{ctx}"
    );

    let resumed = chat.only(1).assert_streamed();
    assert_eq!(
        resumed.body()["resume"],
        json!({"interruptId": interrupt["id"], "payload": "{\"selected\":[0,1]}"}),
        "{ctx}"
    );
    assert_eq!(resumed.text(), "resumed with {\"selected\":[0,1]}", "{ctx}");

    // Upstream: a resume of the agent's own interrupt, no messages, in the same conversation.
    let first = agent.request_saying("plan my garden");
    let conversation = agent.requests_in(&first["conversationId"]);
    assert_eq!(conversation.len(), 2, "{}", agent.log());
    let resume = &conversation[1];
    assert_eq!(
        resume["resume"],
        json!({"interruptId": "int_1", "payload": "{\"selected\":[0,1]}"}),
        "{}",
        agent.log()
    );
    assert!(resume.get("messages").is_none(), "{}", agent.log());
}

#[tokio::test]
async fn the_agent_remembers_a_conversation_and_only_that_one() {
    let agent = Peer::scripted().await;
    let proxy = scripted_route(&agent).await;
    let chat = Chat::run(&send_message(&proxy, "kit"), "memory")
        .await
        .with(agent.log());
    let ctx = chat.context();

    assert_eq!(
        chat.only(0).assert_streamed().text(),
        "Nice to meet you, Ada.",
        "{ctx}"
    );
    assert_eq!(
        chat.only(1).assert_streamed().text(),
        "Your name is Ada.",
        "{ctx}"
    );
    // Step 2 starts a new conversation, which knows nothing of Ada.
    assert_eq!(chat.conversation_ids().len(), 2, "{ctx}");
    assert_eq!(
        chat.only(3).assert_streamed().text(),
        "I don't know your name yet.",
        "{ctx}"
    );

    // Upstream: the two turns of the first conversation share one conversationId, each with its delta only;
    // the second conversation has another.
    let introduced = agent.request_saying("my name is Ada");
    let asked = agent.requests_saying("what is my name?");
    assert_eq!(asked.len(), 2, "{}", agent.log());
    assert_eq!(
        asked[0]["conversationId"],
        introduced["conversationId"],
        "{}",
        agent.log()
    );
    assert_eq!(
        asked[0]["messages"],
        json!([{"role": "user", "content": "what is my name?"}]),
        "{}",
        agent.log()
    );
    assert_ne!(
        asked[1]["conversationId"],
        introduced["conversationId"],
        "{}",
        agent.log()
    );
}

#[tokio::test]
async fn an_agent_error_before_any_event_is_an_http_502_with_its_code_and_the_conversation_goes_on()
{
    let agent = Peer::scripted().await;
    let proxy = scripted_route(&agent).await;
    let chat = Chat::run(&send_message(&proxy, "kit"), "fail")
        .await
        .with(agent.log());
    let ctx = chat.context();

    let failed = chat.only(0);
    assert_eq!(failed.status(), 502, "{ctx}");
    let error = &failed.error_body()["error"];
    assert_eq!(error["code"], "AGENT_FAILED", "{ctx}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("the agent failed on purpose")),
        "{ctx}"
    );
    assert_eq!(
        chat.only(1).assert_streamed().text(),
        "Hello there!",
        "{ctx}"
    );
}

#[tokio::test]
async fn an_agent_error_after_text_is_an_error_frame_then_done() {
    let agent = Peer::scripted().await;
    let proxy = scripted_route(&agent).await;
    let chat = Chat::run(&send_message(&proxy, "kit"), "fail-after-text")
        .await
        .with(agent.log());
    let ctx = chat.context();

    let failed = chat.only(0);
    assert_eq!(failed.status(), 200, "{ctx}");
    assert_eq!(failed.types(), ["text", "error"], "{ctx}");
    assert_eq!(failed.text(), "Working on it.", "{ctx}");
    let error = failed.errors()[0];
    assert_eq!(error["code"], "AGENT_FAILED", "{ctx}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("the agent failed on purpose")),
        "{ctx}"
    );
    assert_eq!(failed.value["done"], true, "{ctx}");
}

/// A resume of an id the conversation never saw, or of an interrupt already answered, is refused by the proxy
/// (HTTP 400 in the AG-Kit error shape) and never forwarded; the conversation goes on.
#[tokio::test]
async fn resumes_of_interrupts_that_are_not_pending_are_a_400_and_never_reach_the_agent() {
    let agent = Peer::scripted().await;
    let proxy = scripted_route(&agent).await;
    let chat = Chat::run(&send_message(&proxy, "kit"), "stale-resume")
        .await
        .with(agent.log());
    let ctx = chat.context();

    chat.only(0).assert_streamed();
    for refused in [chat.only(1), chat.only(4)] {
        assert_eq!(refused.status(), 400, "{ctx}");
        assert_eq!(
            refused.error_body()["error"]["code"],
            "INVALID_REQUEST",
            "{ctx}"
        );
    }
    let plan = chat.only(2).assert_streamed();
    assert_eq!(plan.types(), ["interrupt"], "{ctx}");
    assert_eq!(
        chat.only(3).assert_streamed().text(),
        "resumed with {\"selected\":[1]}",
        "{ctx}"
    );
    assert_eq!(
        chat.only(4).body()["resume"]["interruptId"],
        plan.interrupts()[0]["id"],
        "the second resume answers the same interrupt again: {ctx}"
    );
    assert_eq!(
        chat.only(5).assert_streamed().text(),
        "Hello there!",
        "{ctx}"
    );

    // Upstream: hi, plan, the one resume, hi.
    let requests = agent.requests();
    assert_eq!(requests.len(), 4, "{}", agent.log());
    let resumes: Vec<&Value> = requests
        .iter()
        .filter_map(|body| body.get("resume"))
        .collect();
    assert_eq!(
        resumes,
        [&json!({"interruptId": "int_1", "payload": "{\"selected\":[1]}"})],
        "{}",
        agent.log()
    );
}

// ---------------------------------------------------------------------------------------------------------
// (2) useChat-like client → AG-Kit inbound → the built-in echo agent

#[tokio::test]
async fn the_echo_agent_answers_text_calls_a_client_tool_and_asks_a_question() {
    let proxy = Proxy::start(route("echo", "ag-kit", "echo")).await;
    let chat = Chat::run(&send_message(&proxy, "echo"), "echo").await;
    let ctx = chat.context();

    assert_eq!(chat.only(0).assert_streamed().text(), "hello echo", "{ctx}");

    // `/tool NAME {args}`: a call of the client tool, run by the client, its result re-posted and reported.
    let requests = chat.step(1);
    assert_eq!(requests.len(), 2, "the call and the re-post: {ctx}");
    let calls = requests[0].assert_streamed().tool_calls();
    assert_eq!(calls.len(), 1, "{ctx}");
    assert_eq!(calls[0].1, CLIENT_TOOL, "{ctx}");
    assert_eq!(calls[0].2, json!({"color": "red"}), "{ctx}");
    assert_eq!(
        requests[1].assert_streamed().text(),
        format!("Tool `{CLIENT_TOOL}` returned: Background color successfully changed to: red"),
        "{ctx}"
    );

    // `/ask`: a question as an interrupt; the resume's `{"response": …}` is the answer.
    let asked = chat.only(2).assert_streamed();
    let interrupts = asked.interrupts();
    assert_eq!(interrupts.len(), 1, "{ctx}");
    assert_eq!(interrupts[0]["reason"], "question", "{ctx}");
    assert_eq!(interrupts[0]["payload"]["question"], "Which city?", "{ctx}");
    assert_eq!(
        chat.only(3).assert_streamed().text(),
        "You answered: Paris",
        "{ctx}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// (3) useChat-like client → AG-Kit inbound → AG-Kit outbound → the real CloudBase AG-UI server

async fn cloudbase_route(server: &Peer) -> Proxy {
    Proxy::start(route("cloudbase", "ag-kit", "ag-kit").upstream(&server.url("/send-message")))
        .await
}

#[tokio::test]
async fn an_ag_ui_answer_on_an_ag_kit_upstream_is_detected_and_read_as_ag_ui() {
    let server = Peer::cloudbase().await;
    let proxy = cloudbase_route(&server).await;
    let chat = Chat::run(&send_message(&proxy, "cloudbase"), "cloudbase")
        .await
        .with(server.log());
    let ctx = chat.context();

    let text = chat.only(0).assert_streamed();
    assert_eq!(text.types(), ["text", "text", "text"], "{ctx}");
    assert_eq!(text.text(), "Hello from CloudBase.", "{ctx}");

    // A server-side tool call: the call, its result, the text around it, as v0 events.
    let tool = chat.only(1).assert_streamed();
    assert_eq!(
        tool.types(),
        [
            "text",
            "tool-call-start",
            "tool-call-args",
            "tool-call-args",
            "tool-call-end",
            "tool-result",
            "text"
        ],
        "{ctx}"
    );
    assert_eq!(
        tool.texts(),
        ["Let me check.", "Beijing is sunny, 25C."],
        "{ctx}"
    );
    let calls = tool.tool_calls();
    assert_eq!(calls.len(), 1, "{ctx}");
    assert_eq!(calls[0].1, "get_weather", "{ctx}");
    assert_eq!(calls[0].2, json!({"city": "Beijing"}), "{ctx}");
    assert_eq!(
        tool.tool_results(),
        [(calls[0].0.clone(), json!("sunny, 25C"))],
        "{ctx}"
    );
}

/// Through a route that still says `ag-kit`, the proxy sends CloudBase v0 deltas: the client tool's call
/// arrives and its result is re-posted and answered, but alone (the server sees no history, hence no name for
/// the call: the route should be reconfigured as `ag-ui`, as the proxy's warning says).
#[tokio::test]
async fn a_client_tool_round_trips_through_a_cloudbase_server_behind_an_ag_kit_route() {
    let server = Peer::cloudbase().await;
    let proxy = cloudbase_route(&server).await;
    let chat = Chat::run(&send_message(&proxy, "cloudbase"), "cloudbase-client-tool")
        .await
        .with(server.log());
    let ctx = chat.context();

    let requests = chat.step(0);
    assert_eq!(requests.len(), 2, "the call and the re-post: {ctx}");
    let calls = requests[0].assert_streamed().tool_calls();
    assert_eq!(calls.len(), 1, "{ctx}");
    assert_eq!(calls[0].1, CLIENT_TOOL, "{ctx}");
    assert_eq!(calls[0].2, json!({"action": "deploy"}), "{ctx}");
    let ran = requests[0].ran_tools();
    assert_eq!(ran.len(), 1, "{ctx}");
    let answer = requests[1].assert_streamed().text();
    assert!(
        answer.starts_with("Tool ") && answer.ends_with(&format!(" returned: {}", ran[0].1)),
        "{ctx}"
    );
}

#[tokio::test]
async fn a_cloudbase_run_error_after_text_is_an_error_frame_then_done() {
    let server = Peer::cloudbase().await;
    let proxy = cloudbase_route(&server).await;
    let chat = Chat::run(&send_message(&proxy, "cloudbase"), "cloudbase-boom")
        .await
        .with(server.log());
    let ctx = chat.context();

    let boom = chat.only(0);
    assert_eq!(boom.status(), 200, "{ctx}");
    assert_eq!(boom.text(), "About to fail.", "{ctx}");
    let errors = boom.errors();
    assert_eq!(errors.len(), 1, "one error frame, not two: {ctx}");
    assert_eq!(errors[0]["code"], "UPSTREAM_ERROR", "{ctx}");
    assert_eq!(errors[0]["message"], "boom requested", "{ctx}");
    assert_eq!(boom.value["done"], true, "{ctx}");
}
