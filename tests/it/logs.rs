//! The proxy's log as an operator reads it: text or one JSON object per line, never a color code in a file,
//! one line per finished run that says what the run did, and no secret in any line.

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{Method, Request};
use http_body_util::Full;
use serde_json::{json, Value};

use crate::support::ag_ui::{self, finished, input, started, text, user};
use crate::support::binary::{serve_command, AgentBridge, TempConfig};
use crate::support::send;
use crate::support::{within, Reply, Route, Routes, Upstream};

const PATH: &str = "/chat";
const CLIENT_KEY: &str = "client-key-5f1c9a0e7d";
const UPSTREAM_SECRET: &str = "upstream-secret-b83e02c4a1";

/// An AG-UI route to a scripted AG-UI agent that streams "all of it", behind an API key, with a secret
/// upstream header.
async fn agent_behind_a_key() -> (Upstream, Route) {
    let agent = Upstream::serve([Reply::sse()
        .event(started())
        .events(text("m1", &["all ", "of ", "it"]))
        .event(finished())])
    .await;
    let route = Route::new("chat", PATH, "ag-ui", "ag-ui")
        .upstream(&agent.url())
        .api_keys(&[(CLIENT_KEY, "acme")])
        .upstream_headers(&[("Authorization", &format!("Bearer {UPSTREAM_SECRET}"))]);
    (agent, route)
}

/// Runs one turn of thread `t1` with the client's key; its events.
async fn run_with_key(proxy: &AgentBridge) -> Vec<Value> {
    let body = input("t1", "r1", json!([user("u1", "hello")]));
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{}{PATH}", proxy.address))
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream")
        .header(AUTHORIZATION, format!("Bearer {CLIENT_KEY}"))
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a valid request");
    let response = within("the run", send(request)).await;
    assert_eq!(response.status, 200);
    within("the run's events", response.sse().rest()).await
}

#[tokio::test]
async fn json_logs_are_one_object_per_line_and_a_finished_run_says_what_it_did() {
    let (agent, route) = agent_behind_a_key().await;
    let config = TempConfig::new("logs-json", &Routes::default().route(route).to_string());
    let mut command = serve_command(&config.0);
    command.args(["--log-format", "json"]);
    let proxy = AgentBridge::start(command);

    let events = run_with_key(&proxy).await;
    assert_eq!(ag_ui::text_of(&events), "all of it");
    let log = proxy.logged("run finished").await;

    assert!(!log.contains('\u{1b}'), "no escape codes in a file: {log}");
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: not JSON: {line}")))
        .collect();
    let run = lines
        .iter()
        .find(|line| line["message"] == "run finished")
        .expect("a line for the run");
    assert_eq!(run["level"], "INFO");
    assert_eq!(run["route"], "chat");
    assert_eq!(run["pair"], "ag-ui->ag-ui");
    assert_eq!(run["conversation"], "t1");
    assert_eq!(run["outcome"], "completed");
    // RUN_STARTED, TEXT_MESSAGE_START, three deltas, TEXT_MESSAGE_END, RUN_FINISHED.
    assert_eq!(run["events"], 7, "{run}");
    assert!(run["duration_ms"].is_u64(), "{run}");
    // Every frame the agent wrote, as it wrote them (`data: <json>\n\n`).
    let frames = std::iter::once(started())
        .chain(text("m1", &["all ", "of ", "it"]))
        .chain([finished()]);
    let written: usize = frames.map(|event| format!("data: {event}\n\n").len()).sum();
    assert_eq!(run["upstream_bytes"], written, "{run}");
    assert_eq!(agent.received().len(), 1);
}

#[tokio::test]
async fn a_failed_run_logs_its_outcome_and_code_as_text_without_color() {
    let agent = Upstream::serve([Reply::status(500).body("boom")]).await;
    let route = Route::new("chat", PATH, "ag-ui", "ag-ui").upstream(&agent.url());
    let config = TempConfig::new("logs-text", &Routes::default().route(route).to_string());
    let proxy = AgentBridge::start(serve_command(&config.0));

    let events = ag_ui::run(
        &format!("http://{}{PATH}", proxy.address),
        &input("t9", "r1", json!([user("u1", "hi")])),
    )
    .await;
    assert!(ag_ui::types(&events).contains(&"RUN_ERROR"), "{events:#?}");
    let log = proxy.logged("run finished").await;

    assert!(!log.contains('\u{1b}'), "no escape codes in a file: {log}");
    let line = log
        .lines()
        .find(|line| line.contains("run finished"))
        .expect("the run's line");
    for field in [
        "route=chat",
        "pair=ag-ui->ag-ui",
        "conversation=\"t9\"",
        "outcome=\"failed\"",
        "code=\"UPSTREAM_HTTP_ERROR\"",
    ] {
        assert!(line.contains(field), "{field} in {line}");
    }
}

#[tokio::test]
async fn no_api_key_upstream_header_or_authorization_value_is_ever_logged() {
    let (agent, route) = agent_behind_a_key().await;
    let config = TempConfig::new("logs-secrets", &Routes::default().route(route).to_string());
    let mut command = serve_command(&config.0);
    // Every line every part of the proxy can write.
    command.env("RUST_LOG", "trace");
    let proxy = AgentBridge::start(command);

    let events = run_with_key(&proxy).await;
    assert_eq!(ag_ui::text_of(&events), "all of it");
    let received = agent.only_request();
    assert_eq!(
        received.header("authorization"),
        format!("Bearer {UPSTREAM_SECRET}"),
        "the secret header went upstream"
    );
    let log = proxy.logged("run finished").await;

    assert!(
        log.contains("TRACE"),
        "the log is at its most detailed:\n{log}"
    );
    for secret in [CLIENT_KEY, UPSTREAM_SECRET] {
        assert!(!log.contains(secret), "{secret} logged:\n{log}");
    }
}
