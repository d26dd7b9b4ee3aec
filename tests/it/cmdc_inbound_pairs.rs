//! The CMDC inbound (we are a CMDC gateway) in front of real upstreams, through the real server on a real
//! socket, one test per behaviour: CMDC -> A2A, CMDC -> CMDC, CMDC -> AG-Kit (v0) and CMDC -> AgentScope,
//! across text, turns of one session, approvals and questions (REST and WebSocket), the client's callback
//! tools, upstream failure, deleted sessions and bad client input.
//!
//! The client behaves as cmdc-sdk 0.1.0 does (`specs/cmdc.md` §4.1): it creates a session, POSTs a prompt
//! (202), then reads the run on `GET …/events` until `agent_end`/`agent_abort`; pauses are answered with
//! `POST …/approve` / `…/respond` while the stream stays open. Upstreams are the scripted ones of
//! `tests/it/support`: `a2a::Agent`, the CMDC `Gateway`, AG-Kit v0 replies and `kit::memory_agent`, and the
//! AgentScope `scope::runtime`.

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support;
use crate::support::a2a::{self, Agent};
use crate::support::ag_kit as kit;
use crate::support::agentscope::{self as scope, Run};
use crate::support::cmdc::{
    self, all, names, recv_ws, streamed_text, until, Gateway, History, Step, Ws, KEY as GATEWAY_KEY,
};
use crate::support::{CmdcClient, Proxy, Route, SseStream, Upstream};

const PATH: &str = "/gw";
/// The API key of the CMDC client (tenant `acme`).
const CLIENT_KEY: &str = "sk-client";
const MODEL: &str = "deepseek:deepseek-chat";

// --- Routes ----------------------------------------------------------------------------------------------

/// A CMDC inbound route toward `outbound` at `upstream`, open to [`CLIENT_KEY`] (tenant `acme`). Its clients
/// serve their callback tools on this machine.
fn route(outbound: &str, upstream: &str) -> Route {
    Route::new("pair", PATH, "cmdc", outbound)
        .upstream(upstream)
        .callback_allow(&["127.0.0.1"])
        .api_keys(&[(CLIENT_KEY, "acme")])
}

/// CMDC -> `outbound` toward a scripted upstream.
async fn proxy(outbound: &str, upstream: &Upstream) -> Proxy {
    Proxy::start(route(outbound, &upstream.url())).await
}

/// CMDC -> CMDC toward the scripted gateway, with its key (and no model).
fn cmdc_route(gateway: &Gateway) -> Route {
    route("cmdc", &gateway.url()).upstream_headers(&[("X-API-Key", GATEWAY_KEY)])
}

/// CMDC -> CMDC toward the scripted gateway, with its key and [`MODEL`].
async fn cmdc_proxy(gateway: &Gateway) -> Proxy {
    Proxy::start(cmdc_route(gateway).translate("model", MODEL)).await
}

// --- The CMDC client ---------------------------------------------------------------------------------------

/// The client, with [`CLIENT_KEY`].
fn client(proxy: &Proxy) -> CmdcClient {
    CmdcClient::new(proxy.url(PATH)).with_key(CLIENT_KEY)
}

/// A session with only a model (no system prompt).
async fn session(proxy: &Proxy) -> String {
    client(proxy).create(json!({"model": MODEL})).await
}

/// `POST …/prompt {text}`: 202, not queued.
async fn prompt(proxy: &Proxy, session: &str, text: &str) {
    let accepted = client(proxy).prompt(session, text).await;
    assert_eq!(accepted["sessionId"], session);
    assert_eq!(accepted["queued"], false, "{accepted}");
}

/// A new session, its first prompt `text` sent and the run's stream open, as cmdc-sdk does for a run it
/// means to follow (create, POST, then `GET …/events`).
async fn start_run(proxy: &Proxy, text: &str) -> (String, SseStream) {
    let session = session(proxy).await;
    prompt(proxy, &session, text).await;
    let events = client(proxy).subscribe(&session).await;
    (session, events)
}

/// Reads the run until it pauses on `ask_user`: the question's `ref`.
async fn until_question(events: &mut SseStream) -> String {
    until_pause(events, "ask_user", "ref").await
}

/// Reads the run until it pauses on `approval_required`: its `approvalId`.
async fn until_approval(events: &mut SseStream) -> String {
    until_pause(events, "approval_required", "approvalId").await
}

/// Reads the run until the pause event `name`: the id in its `id_field`, to answer the pause with.
async fn until_pause(events: &mut SseStream, name: &str, id_field: &str) -> String {
    let asked = until(events, name).await;
    data(&asked, name)[id_field]
        .as_str()
        .unwrap_or_else(|| panic!("no {id_field} in {name}: {asked:?}"))
        .to_owned()
}

/// `DELETE /v1/sessions/{session}`.
async fn delete_session(proxy: &Proxy, session: &str) -> support::Response {
    client(proxy)
        .call(Method::DELETE, &format!("/v1/sessions/{session}"), None)
        .await
}

/// Waits (as `what`) until the proxy asks the gateway to abort its session's run.
async fn wait_for_gateway_abort(gateway: &Gateway, what: &str) {
    let upstream = gateway.session();
    gateway
        .wait_for(what, |r| {
            r.method == Method::POST && r.path == format!("/v1/sessions/{upstream}/abort")
        })
        .await;
}

/// A prompt and its whole run, as cmdc-sdk's `prompt()` reads it (POST, then the stream to its end).
async fn turn(proxy: &Proxy, session: &str, text: &str) -> Vec<(String, Value)> {
    prompt(proxy, session, text).await;
    all(&mut client(proxy).subscribe(session).await).await
}

/// The data of the first event named `name`.
fn data<'a>(frames: &'a [(String, Value)], name: &str) -> &'a Value {
    &frames
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name} in {frames:?}"))
        .1
}

fn count(frames: &[(String, Value)], name: &str) -> usize {
    frames.iter().filter(|(n, _)| n == name).count()
}

/// The text of the `message_delta`s.
/// A whole run, as one run: one `prompt_received`, one `agent_start`, and `agent_end` last.
fn assert_one_completed_run(seen: &[(String, Value)]) {
    assert_eq!(count(seen, "prompt_received"), 1, "{seen:?}");
    assert_eq!(count(seen, "agent_start"), 1, "{seen:?}");
    assert_eq!(names(seen).last(), Some(&"agent_end"), "{seen:?}");
    assert_eq!(count(seen, "agent_end"), 1, "{seen:?}");
    assert_eq!(count(seen, "agent_abort"), 0, "{seen:?}");
}

/// An A2A agent over three calls: task `task-1` (context `ctx-up-1`) asks "Which city?", the answer
/// completes it with "Paris is sunny.", and the next prompt is a new task `task-2` in the same context that
/// answers "Rain tomorrow.".
async fn asking_agent_with_a_next_task() -> Upstream {
    let task = a2a::task("task-1", "ctx-up-1");
    let next = a2a::task("task-2", "ctx-up-1");
    Agent::new()
        .on(
            "message/stream",
            a2a::stream([task.submitted(), task.working()])
                .then(task.input_required("Which city?")),
        )
        .on(
            "message/stream",
            a2a::stream([task.in_state("input-required"), task.working()])
                .chunks(&task, "a2", &["Paris is sunny."])
                .then(task.completed()),
        )
        .on("message/stream", next.streams(&["Rain tomorrow."]))
        .serve()
        .await
}

// --- CMDC -> A2A -------------------------------------------------------------------------------------------

#[tokio::test]
async fn cmdc_to_a2a_artifact_chunks_stream_as_message_deltas_and_the_run_ends_with_agent_end() {
    let task = a2a::task("task-1", "ctx-up-1");
    let agent = Agent::new()
        .on(
            "message/stream",
            task.streams(&["The weather ", "in Beijing ", "is sunny."]),
        )
        .serve()
        .await;
    let proxy = proxy("a2a", &agent).await;
    let session = session(&proxy).await;

    let seen = turn(&proxy, &session, "Weather in Beijing?").await;

    assert_eq!(
        data(&seen, "prompt_received")["text"],
        "Weather in Beijing?"
    );
    assert_eq!(
        seen.iter()
            .filter(|(n, _)| n == "message_delta")
            .map(|(_, d)| d["delta"].clone())
            .collect::<Vec<_>>(),
        [
            json!("The weather "),
            json!("in Beijing "),
            json!("is sunny.")
        ],
        "one delta per chunk, in order"
    );
    assert_one_completed_run(&seen);
    let end = data(&seen, "agent_end");
    assert_eq!(
        end["lastMessage"],
        json!({"content": "The weather in Beijing is sunny.", "role": "assistant"})
    );
    let calls = a2a::calls(&agent, "message/stream");
    assert_eq!(calls.len(), 1);
    assert_eq!(
        a2a::message_text(a2a::sent_message(&calls[0])),
        "Weather in Beijing?"
    );
}

#[tokio::test]
async fn cmdc_to_a2a_input_required_is_ask_user_with_the_question() {
    let agent = a2a::asking_agent().await;
    let proxy = proxy("a2a", &agent).await;
    let (_session, mut events) = start_run(&proxy, "Weather?").await;

    let asked = until(&mut events, "ask_user").await;

    let ask = data(&asked, "ask_user");
    assert_eq!(ask["question"], "Which city?");
    assert!(ask["ref"].as_str().is_some_and(|r| !r.is_empty()), "{ask}");
    assert_eq!(ask["options"], Value::Null, "free text");
    assert_eq!(
        count(&asked, "agent_end"),
        0,
        "the run is paused: {asked:?}"
    );
    assert_eq!(count(&asked, "agent_abort"), 0, "{asked:?}");
}

#[tokio::test]
async fn cmdc_to_a2a_answer_continues_the_paused_task() {
    let agent = a2a::asking_agent().await;
    let proxy = proxy("a2a", &agent).await;
    let (session, mut events) = start_run(&proxy, "Weather?").await;
    let reference = until_question(&mut events).await;

    let answered = client(&proxy).respond(&session, &reference, "Paris").await;

    assert_eq!(answered.status, StatusCode::OK);
    assert_eq!(
        answered.json().await,
        json!({"ok": true, "action": "respond", "ref": reference})
    );
    let seen = all(&mut events).await;
    assert_one_completed_run(&seen);
    assert_eq!(streamed_text(&seen), "Paris is sunny.");
    let calls = a2a::calls(&agent, "message/stream");
    assert_eq!(calls.len(), 2);
    let answer = a2a::sent_message(&calls[1]);
    assert_eq!(answer["taskId"], "task-1", "the paused task continues");
    assert_eq!(answer["contextId"], "ctx-up-1");
    assert_eq!(a2a::message_text(answer), "Paris");
}

#[tokio::test]
async fn cmdc_to_a2a_failed_task_is_an_error_event_then_agent_abort() {
    let agent = a2a::failing_agent("task-1").await;
    let proxy = proxy("a2a", &agent).await;
    let session = session(&proxy).await;

    let seen = turn(&proxy, &session, "Weather?").await;

    assert_eq!(
        names(&seen),
        ["prompt_received", "agent_start", "error", "agent_abort"]
    );
    let reason = data(&seen, "error")["reason"].as_str().expect("a reason");
    assert!(
        reason.contains("The weather service is down."),
        "the task's status text: {reason}"
    );
    assert_eq!(data(&seen, "agent_abort"), &json!({"reason": "error"}));
}

// --- CMDC -> CMDC ------------------------------------------------------------------------------------------

#[tokio::test]
async fn cmdc_to_cmdc_streams_the_gateways_text() {
    let gateway = Gateway::replying(&["The weather ", "in Paris ", "is sunny."]).await;
    let proxy = cmdc_proxy(&gateway).await;
    let session = session(&proxy).await;

    let seen = turn(&proxy, &session, "Weather in Paris?").await;

    assert_eq!(streamed_text(&seen), "The weather in Paris is sunny.");
    assert_eq!(count(&seen, "message_delta"), 3, "{seen:?}");
    assert_one_completed_run(&seen);
    assert_eq!(
        data(&seen, "agent_end")["lastMessage"]["content"],
        "The weather in Paris is sunny."
    );
    assert_eq!(gateway.prompts(), ["Weather in Paris?"]);
    assert!(
        gateway.lost().is_empty(),
        "the outbound subscribes before it prompts: {:?}",
        gateway.lost()
    );
}

#[tokio::test]
async fn cmdc_to_cmdc_the_clients_model_creates_the_upstream_session_and_wins_over_the_routes() {
    let gateway = Gateway::replying(&["Hi"]).await;
    let open = Proxy::start(cmdc_route(&gateway)).await;
    let session = client(&open)
        .create(json!({"model": "client:model-x"}))
        .await;
    assert_eq!(streamed_text(&turn(&open, &session, "Hello").await), "Hi");

    let routed = cmdc_proxy(&gateway).await;
    let session = client(&routed)
        .create(json!({"model": "client:model-y"}))
        .await;
    assert_eq!(streamed_text(&turn(&routed, &session, "Hello").await), "Hi");

    let models: Vec<Value> = gateway
        .requests("POST sessions")
        .iter()
        .map(|created| created.body["model"].clone())
        .collect();
    assert_eq!(models, [json!("client:model-x"), json!("client:model-y")]);
}

/// "Clean the logs" asks to approve `rm -rf ./old-logs`; approved, it deletes them; other prompts: "OK.".
fn cleaner(text: &str, _: &History) -> Vec<Step> {
    if !text.contains("Clean the logs") {
        return cmdc::reply(&["OK."]);
    }
    vec![cmdc::approval(
        "apr_gw_7",
        "Shell",
        json!({"command": "rm -rf ./old-logs"}),
        "dangerous: deletes files",
        cmdc::reply(&["Deleted ", "the old logs."]),
        cmdc::reply(&["Left them ", "alone."]),
    )]
}

#[tokio::test]
async fn cmdc_to_cmdc_approval_passes_through_and_approve_reaches_the_gateways_approval() {
    let gateway = Gateway::start(cleaner).await;
    let proxy = cmdc_proxy(&gateway).await;
    let (session, mut events) = start_run(&proxy, "Clean the logs").await;

    let asked = until(&mut events, "approval_required").await;
    let required = data(&asked, "approval_required").clone();
    assert_eq!(required["toolName"], "Shell");
    assert_eq!(required["args"], json!({"command": "rm -rf ./old-logs"}));
    assert_eq!(required["hint"], "dangerous: deletes files");
    let approval_id = required["approvalId"]
        .as_str()
        .expect("an approvalId")
        .to_owned();

    let approved = client(&proxy).approve(&session, &approval_id).await;

    assert_eq!(approved.status, StatusCode::OK);
    assert_eq!(
        approved.json().await,
        json!({"ok": true, "action": "approve", "approvalId": approval_id})
    );
    let seen = all(&mut events).await;
    assert_one_completed_run(&seen);
    assert_eq!(
        data(&seen, "approval_resolved"),
        &json!({"approvalId": approval_id, "status": "approved"})
    );
    assert_eq!(streamed_text(&seen), "Deleted the old logs.");
    let upstream = gateway.session();
    let decided = gateway.requests("POST approve");
    assert_eq!(decided.len(), 1, "{:?}", gateway.log());
    assert_eq!(
        decided[0].path,
        format!("/v1/sessions/{upstream}/approve"),
        "the gateway's own session"
    );
    assert_eq!(
        decided[0].body["approvalId"], "apr_gw_7",
        "the gateway's own approvalId"
    );
    assert!(gateway.requests("POST reject").is_empty());
}

/// "Weather?" asks which city, then reports the weather of the answer; other prompts: "OK.".
fn asker(text: &str, _: &History) -> Vec<Step> {
    if !text.contains("Weather?") {
        return cmdc::reply(&["OK."]);
    }
    vec![cmdc::ask(
        "ask_gw_3",
        "Which city?",
        Some(&["Paris", "Rome"]),
        |city| cmdc::reply(&[city, " is sunny."]),
    )]
}

#[tokio::test]
async fn cmdc_to_cmdc_ask_user_is_answered_by_respond() {
    let gateway = Gateway::start(asker).await;
    let proxy = cmdc_proxy(&gateway).await;
    let (session, mut events) = start_run(&proxy, "Weather?").await;

    let asked = until(&mut events, "ask_user").await;
    let ask = data(&asked, "ask_user").clone();
    assert_eq!(ask["question"], "Which city?");
    assert_eq!(ask["options"], json!(["Paris", "Rome"]));
    let reference = ask["ref"].as_str().expect("a ref").to_owned();

    let answered = client(&proxy).respond(&session, &reference, "Rome").await;

    assert_eq!(answered.status, StatusCode::OK);
    let seen = all(&mut events).await;
    assert_one_completed_run(&seen);
    assert_eq!(streamed_text(&seen), "Rome is sunny.");
    let responded = gateway.requests("POST respond");
    assert_eq!(responded.len(), 1, "{:?}", gateway.log());
    assert_eq!(
        responded[0].body,
        json!({"ref": "ask_gw_3", "response": "Rome"})
    );
}

#[tokio::test]
async fn cmdc_to_cmdc_each_client_session_has_one_distinct_upstream_session() {
    let gateway = Gateway::start(cmdc::memory).await;
    let proxy = cmdc_proxy(&gateway).await;
    let first = session(&proxy).await;

    let hello = turn(&proxy, &first, "my name is Ada").await;
    let asked = turn(&proxy, &first, "what is my name?").await;

    assert_eq!(streamed_text(&hello), "Nice to meet you.");
    assert_eq!(streamed_text(&asked), "Your name is Ada.");
    let upstream = gateway.session();
    assert_ne!(upstream, first, "each side has its own session id");
    assert_eq!(gateway.requests("POST sessions").len(), 1);
    let prompts: Vec<String> = gateway
        .requests("POST prompt")
        .iter()
        .map(|r| {
            assert_eq!(r.path, format!("/v1/sessions/{upstream}/prompt"));
            r.body["text"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(
        prompts,
        ["my name is Ada", "what is my name?"],
        "only the new text each time"
    );

    // Another client session is another upstream session, with its own history.
    let second = session(&proxy).await;
    let elsewhere = turn(&proxy, &second, "what is my name?").await;
    assert_eq!(streamed_text(&elsewhere), "I do not know your name.");
    let sessions = gateway.sessions();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    assert_eq!(sessions[0], upstream);
    assert_ne!(sessions[1], upstream);
    assert_ne!(sessions[1], second);
}

// --- CMDC -> AG-Kit (v0) ------------------------------------------------------------------------------------

#[tokio::test]
async fn cmdc_to_agkit_streams_the_agents_text() {
    let agent = kit::reply([kit::text("Hello"), kit::text(" there!")])
        .serve()
        .await;
    let proxy = proxy("ag-kit", &agent).await;
    let session = session(&proxy).await;

    let seen = turn(&proxy, &session, "Hi").await;

    assert_eq!(streamed_text(&seen), "Hello there!");
    assert_one_completed_run(&seen);
    assert_eq!(
        kit::messages_of(&agent, 0),
        json!([{"role": "user", "content": "Hi"}])
    );
}

/// The `conversationId` of the n-th request a v0 agent received.
fn conversation_of(agent: &Upstream, nth: usize) -> String {
    let received = agent.received();
    received[nth].body["conversationId"]
        .as_str()
        .unwrap_or_else(|| {
            panic!(
                "request {nth} has a conversationId: {:#}",
                received[nth].body
            )
        })
        .to_owned()
}

#[tokio::test]
async fn cmdc_to_agkit_agent_remembers_across_prompts_with_one_conversation_and_only_new_text() {
    let agent = kit::memory_agent().await;
    let proxy = proxy("ag-kit", &agent).await;
    let session = session(&proxy).await;

    let hello = turn(&proxy, &session, "my name is Ada").await;
    let asked = turn(&proxy, &session, "what is my name?").await;

    assert_eq!(streamed_text(&hello), "Nice to meet you.");
    assert_eq!(streamed_text(&asked), "Your name is Ada.");
    assert_one_completed_run(&asked);
    assert_eq!(agent.received().len(), 2);
    assert_eq!(
        kit::messages_of(&agent, 0),
        json!([{"role": "user", "content": "my name is Ada"}])
    );
    assert_eq!(
        kit::messages_of(&agent, 1),
        json!([{"role": "user", "content": "what is my name?"}]),
        "only the new text: the agent keeps the history"
    );
    assert_eq!(conversation_of(&agent, 1), conversation_of(&agent, 0));
}

#[tokio::test]
async fn cmdc_to_agkit_approval_interrupt_is_approval_required_and_approve_resumes_it() {
    let agent = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_9",
            "approval",
            json!({"toolName": "delete_file", "args": {"path": "/tmp/old.log"}}),
        )]),
        kit::reply([kit::text("Deleted.")]),
    ])
    .await;
    let proxy = proxy("ag-kit", &agent).await;
    let (session, mut events) = start_run(&proxy, "Clean up the logs").await;

    let asked = until(&mut events, "approval_required").await;
    let required = data(&asked, "approval_required").clone();
    assert_eq!(required["toolName"], "delete_file");
    assert_eq!(required["args"], json!({"path": "/tmp/old.log"}));
    let approval_id = required["approvalId"].as_str().expect("an approvalId");

    let approved = client(&proxy).approve(&session, approval_id).await;

    assert_eq!(approved.status, StatusCode::OK);
    let seen = all(&mut events).await;
    assert_one_completed_run(&seen);
    assert_eq!(data(&seen, "approval_resolved")["status"], "approved");
    assert_eq!(streamed_text(&seen), "Deleted.");
    let received = agent.received();
    assert_eq!(received.len(), 2, "{received:#?}");
    let resumed = &received[1].body;
    assert_eq!(
        resumed["resume"],
        json!({"interruptId": "int_9", "payload": "{\"approved\":true}"})
    );
    assert_eq!(conversation_of(&agent, 1), conversation_of(&agent, 0));
}

// --- CMDC -> AgentScope -------------------------------------------------------------------------------------

#[tokio::test]
async fn cmdc_to_agentscope_streams_the_runtimes_text() {
    let runtime = scope::runtime([Run::new().text(&["It is ", "sunny."]).completed()]).await;
    let proxy = proxy("agentscope", &runtime).await;
    let session = session(&proxy).await;

    let seen = turn(&proxy, &session, "Weather in Paris?").await;

    assert_eq!(streamed_text(&seen), "It is sunny.");
    assert_one_completed_run(&seen);
    assert_eq!(
        scope::summary(&scope::input_of(&runtime, 0)),
        [("message".into(), "user".into(), json!("Weather in Paris?"))]
    );
}

#[tokio::test]
async fn cmdc_to_agentscope_second_prompt_sends_the_full_history() {
    let runtime = scope::sunny_then_rain().await;
    let proxy = proxy("agentscope", &runtime).await;
    let session = session(&proxy).await;

    turn(&proxy, &session, "Weather in Paris?").await;
    let seen = turn(&proxy, &session, "And tomorrow?").await;

    assert_eq!(streamed_text(&seen), "Rain.");
    assert_eq!(
        scope::summary(&scope::input_of(&runtime, 1)),
        scope::sunny_then_tomorrow(),
        "a full-history upstream gets the conversation so far"
    );
    let received = runtime.received();
    assert_eq!(
        received[1].body["session_id"], received[0].body["session_id"],
        "one runtime session"
    );
}

#[tokio::test]
async fn cmdc_to_agentscope_approval_request_is_approval_required_and_approve_answers_it() {
    let runtime = scope::runtime([
        Run::new()
            .approval_request("apr_1", "Shell", &json!({"command": "rm -rf ./old-logs"}))
            .completed(),
        Run::new().text(&["Cleaned up."]).completed(),
    ])
    .await;
    let proxy = proxy("agentscope", &runtime).await;
    let (session, mut events) = start_run(&proxy, "Clean the logs").await;

    let asked = until(&mut events, "approval_required").await;
    let required = data(&asked, "approval_required").clone();
    assert_eq!(required["toolName"], "Shell");
    assert_eq!(required["args"], json!({"command": "rm -rf ./old-logs"}));
    let approval_id = required["approvalId"].as_str().expect("an approvalId");

    let approved = client(&proxy).approve(&session, approval_id).await;

    assert_eq!(approved.status, StatusCode::OK);
    let seen = all(&mut events).await;
    assert_one_completed_run(&seen);
    assert_eq!(data(&seen, "approval_resolved")["status"], "approved");
    assert_eq!(streamed_text(&seen), "Cleaned up.");
    let input = scope::input_of(&runtime, 1);
    let kinds = scope::input_types(&input);
    assert_eq!(
        kinds,
        ["message", "mcp_approval_request", "mcp_approval_response"]
    );
    let response = scope::data(&input[2]);
    assert_eq!(response["approval_request_id"], "apr_1");
    assert_eq!(response["approve"], true);
}

// --- Bad input with a real upstream ----------------------------------------------------------------------------

#[tokio::test]
async fn cmdc_approve_of_an_unknown_approval_is_404_and_the_session_keeps_working() {
    let task = a2a::task("task-1", "ctx-up-1");
    let agent = Agent::new()
        .on("message/stream", task.streams(&["Still here."]))
        .serve()
        .await;
    let proxy = proxy("a2a", &agent).await;
    let session = session(&proxy).await;

    let refused = client(&proxy).approve(&session, "apr_nope").await;

    assert_eq!(refused.status, StatusCode::NOT_FOUND);
    let body = refused.json().await;
    assert_eq!(body["error"], "not_found", "{body}");
    assert!(body["message"].is_string(), "{body}");
    assert!(agent.received().is_empty(), "the agent is not called");

    let seen = turn(&proxy, &session, "Are you there?").await;
    assert_eq!(streamed_text(&seen), "Still here.");
    assert_one_completed_run(&seen);
    assert_eq!(a2a::calls(&agent, "message/stream").len(), 1);
}

#[tokio::test]
async fn cmdc_approve_of_an_unknown_approval_while_paused_is_404_and_the_pause_still_waits() {
    let gateway = Gateway::start(cleaner).await;
    let proxy = cmdc_proxy(&gateway).await;
    let (session, mut events) = start_run(&proxy, "Clean the logs").await;
    let approval_id = until_approval(&mut events).await;

    let refused = client(&proxy).approve(&session, "apr_nope").await;

    assert_eq!(refused.status, StatusCode::NOT_FOUND);
    let body = refused.json().await;
    assert_eq!(body["error"], "not_found", "{body}");
    assert!(body["message"].is_string(), "{body}");
    assert!(
        gateway.requests("POST approve").is_empty(),
        "the gateway is not called: {:?}",
        gateway.log()
    );

    let approved = client(&proxy).approve(&session, &approval_id).await;
    assert_eq!(approved.status, StatusCode::OK);
    let seen = all(&mut events).await;
    assert_one_completed_run(&seen);
    assert_eq!(streamed_text(&seen), "Deleted the old logs.");
    let decided = gateway.requests("POST approve");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0].body["approvalId"], "apr_gw_7");
}

// --- More round trips ----------------------------------------------------------------------------------------

#[tokio::test]
async fn cmdc_to_a2a_prompt_after_an_answered_question_is_a_new_task_in_the_same_context() {
    let agent = asking_agent_with_a_next_task().await;
    let proxy = proxy("a2a", &agent).await;
    let (session, mut events) = start_run(&proxy, "Weather?").await;
    let reference = until_question(&mut events).await;
    client(&proxy).respond(&session, &reference, "Paris").await;
    all(&mut events).await;

    let seen = turn(&proxy, &session, "And tomorrow?").await;

    assert_eq!(streamed_text(&seen), "Rain tomorrow.");
    assert_one_completed_run(&seen);
    let calls = a2a::calls(&agent, "message/stream");
    assert_eq!(calls.len(), 3);
    let message = a2a::sent_message(&calls[2]);
    assert_eq!(message["contextId"], "ctx-up-1");
    assert!(
        message.get("taskId").is_none(),
        "the answered task is done: {message}"
    );
    assert_eq!(a2a::message_text(message), "And tomorrow?");
}

#[tokio::test]
async fn cmdc_to_a2a_session_state_follows_the_pause_and_the_message_log_keeps_the_turn() {
    let agent = a2a::asking_agent().await;
    let proxy = proxy("a2a", &agent).await;
    let (session, mut events) = start_run(&proxy, "Weather?").await;
    let reference = until_question(&mut events).await;

    let info = client(&proxy)
        .call(Method::GET, &format!("/v1/sessions/{session}"), None)
        .await
        .json()
        .await;
    assert_eq!(info["state"], "waiting_input", "{info}");

    client(&proxy).respond(&session, &reference, "Paris").await;
    all(&mut events).await;
    let messages = client(&proxy).messages(&session).await;
    let log = messages["messages"].as_array().expect("messages");
    let first = &log[0];
    assert_eq!(first["role"], "user");
    assert_eq!(first["content"], "Weather?");
    let last = log.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"], "Paris is sunny.");
}

#[tokio::test]
async fn cmdc_respond_with_an_unknown_ref_is_404_and_the_paused_task_still_waits() {
    let agent = a2a::asking_agent().await;
    let proxy = proxy("a2a", &agent).await;
    let (session, mut events) = start_run(&proxy, "Weather?").await;
    let reference = until_question(&mut events).await;

    let refused = client(&proxy).respond(&session, "ask_nope", "Paris").await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND);
    let body = refused.json().await;
    assert_eq!(body["error"], "not_found", "{body}");
    assert!(body["message"].is_string(), "{body}");
    let missing = client(&proxy)
        .call(
            Method::POST,
            &format!("/v1/sessions/{session}/respond"),
            Some(json!({"ref": reference})),
        )
        .await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing.json().await["error"], "bad_request");
    assert_eq!(
        a2a::calls(&agent, "message/stream").len(),
        1,
        "the agent is not called"
    );

    client(&proxy).respond(&session, &reference, "Paris").await;
    let seen = all(&mut events).await;
    assert_one_completed_run(&seen);
    assert_eq!(streamed_text(&seen), "Paris is sunny.");
}

#[tokio::test]
async fn cmdc_to_cmdc_reject_reaches_the_gateway_and_the_run_takes_the_rejected_branch() {
    let gateway = Gateway::start(cleaner).await;
    let proxy = cmdc_proxy(&gateway).await;
    let (session, mut events) = start_run(&proxy, "Clean the logs").await;
    let approval_id = until_approval(&mut events).await;

    let rejected = client(&proxy).reject(&session, &approval_id).await;

    assert_eq!(rejected.status, StatusCode::OK);
    assert_eq!(
        rejected.json().await,
        json!({"ok": true, "action": "reject", "approvalId": approval_id})
    );
    let seen = all(&mut events).await;
    assert_one_completed_run(&seen);
    assert_eq!(data(&seen, "approval_resolved")["status"], "rejected");
    assert_eq!(streamed_text(&seen), "Left them alone.");
    let decided = gateway.requests("POST reject");
    assert_eq!(decided.len(), 1, "{:?}", gateway.log());
    assert_eq!(decided[0].body["approvalId"], "apr_gw_7");
    assert!(gateway.requests("POST approve").is_empty());
}

#[tokio::test]
async fn cmdc_to_cmdc_system_prompt_becomes_the_gateway_sessions_system_prompt() {
    let gateway = Gateway::replying(&["Hi."]).await;
    let proxy = cmdc_proxy(&gateway).await;
    let session = client(&proxy)
        .create(json!({"model": MODEL, "systemPrompt": "be brief"}))
        .await;

    turn(&proxy, &session, "hello").await;

    let created = gateway.requests("POST sessions");
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].body["systemPrompt"], "be brief");
    assert_eq!(
        gateway.prompts(),
        ["hello"],
        "the system prompt is not a prompt"
    );
}

#[tokio::test]
async fn cmdc_to_agkit_question_interrupt_is_ask_user_and_respond_resumes_it() {
    let agent = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_q",
            "question",
            json!({"question": "Which city?", "options": ["Paris", "Rome"]}),
        )]),
        kit::reply([kit::text("Rome is sunny.")]),
    ])
    .await;
    let proxy = proxy("ag-kit", &agent).await;
    let (session, mut events) = start_run(&proxy, "Weather?").await;

    let asked = until(&mut events, "ask_user").await;
    let ask = data(&asked, "ask_user").clone();
    assert_eq!(ask["question"], "Which city?");
    assert_eq!(ask["options"], json!(["Paris", "Rome"]));
    let answered = client(&proxy)
        .respond(&session, ask["ref"].as_str().unwrap(), "Rome")
        .await;

    assert_eq!(answered.status, StatusCode::OK);
    let seen = all(&mut events).await;
    assert_one_completed_run(&seen);
    assert_eq!(streamed_text(&seen), "Rome is sunny.");
    let received = agent.received();
    assert_eq!(received.len(), 2, "{received:#?}");
    assert_eq!(
        received[1].body["resume"],
        json!({"interruptId": "int_q", "payload": "\"Rome\""}),
        "the payload is the JSON text of the answer"
    );
    assert_eq!(conversation_of(&agent, 1), conversation_of(&agent, 0));
}

#[tokio::test]
async fn cmdc_to_agkit_custom_interrupt_is_ask_user_and_the_answer_is_the_resume_payload() {
    let agent = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_1",
            "waiting_for_user_selection",
            json!({"steps": [{"description": "Dig hole", "status": "enabled"}]}),
        )]),
        kit::reply([kit::text("Digging the hole.")]),
    ])
    .await;
    let proxy = proxy("ag-kit", &agent).await;
    let (session, mut events) = start_run(&proxy, "Plan my garden").await;

    let asked = until(&mut events, "ask_user").await;
    let ask = data(&asked, "ask_user").clone();
    assert!(
        ask["question"]
            .as_str()
            .is_some_and(|q| q.contains("waiting_for_user_selection")),
        "{ask}"
    );
    client(&proxy)
        .respond(&session, ask["ref"].as_str().unwrap(), "Dig the hole first")
        .await;

    let seen = all(&mut events).await;
    assert_one_completed_run(&seen);
    assert_eq!(streamed_text(&seen), "Digging the hole.");
    assert_eq!(
        agent.received()[1].body["resume"],
        json!({"interruptId": "int_1", "payload": "\"Dig the hole first\""}),
        "the payload is the JSON text of the answer (a bare JSON string, specs/ag-kit.md §4.3)"
    );
}

#[tokio::test]
async fn cmdc_to_agkit_upstream_failure_is_an_error_event_then_agent_abort_and_the_session_goes_on()
{
    let agent = Upstream::serve([
        support::Reply::status(500).body("internal failure"),
        kit::reply([kit::text("Fine now.")]),
    ])
    .await;
    let proxy = proxy("ag-kit", &agent).await;
    let session = session(&proxy).await;

    let failed = turn(&proxy, &session, "hi").await;

    assert_eq!(
        names(&failed),
        ["prompt_received", "agent_start", "error", "agent_abort"]
    );
    assert!(
        data(&failed, "error")["reason"]
            .as_str()
            .unwrap()
            .contains("500"),
        "{failed:?}"
    );
    assert_eq!(data(&failed, "agent_abort"), &json!({"reason": "error"}));
    let next = turn(&proxy, &session, "again").await;
    assert_eq!(streamed_text(&next), "Fine now.");
    assert_one_completed_run(&next);
}

#[tokio::test]
async fn cmdc_to_agentscope_failed_response_is_an_error_event_then_agent_abort() {
    let runtime = scope::runtime([Run::new().text(&["Half an "]).failed(
        "AGENT_UNKNOWN_ERROR",
        "Unknown agent error: ValueError: boom",
    )])
    .await;
    let proxy = proxy("agentscope", &runtime).await;
    let session = session(&proxy).await;

    let seen = turn(&proxy, &session, "boom").await;

    assert_eq!(streamed_text(&seen), "Half an ");
    let tail: Vec<&str> = names(&seen).into_iter().rev().take(2).collect();
    assert_eq!(tail, ["agent_abort", "error"], "{seen:?}");
    assert!(
        data(&seen, "error")["reason"]
            .as_str()
            .unwrap()
            .contains("ValueError: boom"),
        "{seen:?}"
    );
    assert_eq!(data(&seen, "agent_abort"), &json!({"reason": "error"}));
}

#[tokio::test]
async fn cmdc_to_agentscope_prompt_after_an_answered_approval_does_not_answer_it_again() {
    let runtime = scope::runtime([
        Run::new()
            .approval_request("apr_1", "Shell", &json!({"command": "rm -rf ./old-logs"}))
            .completed(),
        Run::new().text(&["Cleaned up."]).completed(),
        Run::new().text(&["You are welcome."]).completed(),
    ])
    .await;
    let proxy = proxy("agentscope", &runtime).await;
    let (session, mut events) = start_run(&proxy, "Clean the logs").await;
    let approval_id = until_approval(&mut events).await;
    client(&proxy).approve(&session, &approval_id).await;
    all(&mut events).await;

    let seen = turn(&proxy, &session, "Thanks").await;

    assert_eq!(streamed_text(&seen), "You are welcome.");
    let input = scope::input_of(&runtime, 2);
    assert!(
        !input.iter().any(|m| m["type"] == "mcp_approval_response"),
        "an answered approval is not answered again: {input:#?}"
    );
    let said: Vec<(String, String, Value)> = scope::summary(&input)
        .into_iter()
        .filter(|(kind, _, _)| kind == "message")
        .collect();
    assert_eq!(
        said,
        [
            ("message".into(), "user".into(), json!("Clean the logs")),
            ("message".into(), "assistant".into(), json!("Cleaned up.")),
            ("message".into(), "user".into(), json!("Thanks")),
        ],
        "the conversation so far"
    );
}

// --- Callback tools (the client's tools) -----------------------------------------------------------------

/// The client's callback endpoint: answers every call with `{"result": "Background is blue"}`.
async fn painter() -> Upstream {
    support::Reply::status(200)
        .header("content-type", "application/json")
        .body(r#"{"result":"Background is blue"}"#)
        .serve()
        .await
}

/// Registers the client's `change_background` callback tool on `session`.
async fn register_painter(proxy: &Proxy, session: &str, callback: &Upstream) {
    let registered = client(proxy)
        .call(
            Method::POST,
            &format!("/v1/sessions/{session}/tools"),
            Some(
                json!({"name": "change_background", "callbackUrl": callback.url(),
                    "parameters": {"type": "object", "properties": {"color": {"type": "string"}}}}),
            ),
        )
        .await;
    assert_eq!(registered.status, StatusCode::CREATED);
}

/// The call the client's callback endpoint received, checked against the call announced on the stream.
fn assert_painted(seen: &[(String, Value)], callback: &Upstream, session: &str, call_id: &str) {
    let request = callback.only_request();
    assert_eq!(request.body["toolName"], "change_background");
    assert_eq!(request.body["args"], json!({"color": "blue"}));
    assert_eq!(request.body["callId"], call_id);
    assert_eq!(
        request.body["sessionId"], session,
        "the client's own session"
    );
    let start = data(seen, "tool_execution_start");
    assert_eq!(start["toolName"], "change_background");
    assert_eq!(start["callId"], call_id);
    let end = data(seen, "tool_execution_end");
    assert_eq!(end["status"], "ok");
    assert_eq!(end["result"], "Background is blue");
}

#[tokio::test]
async fn cmdc_to_cmdc_callback_tool_is_called_by_the_gateway_through_the_proxy() {
    let gateway = Gateway::start(|_, _| {
        vec![cmdc::call_tool(
            "tc_bg",
            "change_background",
            json!({"color": "blue"}),
            |result| cmdc::reply(&["Done: ", result]),
        )]
    })
    .await;
    let callback = painter().await;
    let proxy = cmdc_proxy(&gateway).await;
    let session = session(&proxy).await;
    register_painter(&proxy, &session, &callback).await;

    let seen = turn(&proxy, &session, "Make the background blue").await;

    assert_one_completed_run(&seen);
    assert_eq!(streamed_text(&seen), "Done: Background is blue");
    assert_painted(&seen, &callback, &session, "tc_bg");
    let registered = gateway.requests("POST tools");
    assert_eq!(registered.len(), 1, "{:?}", gateway.log());
    assert_eq!(registered[0].body["name"], "change_background");
    assert_ne!(
        registered[0].body["callbackUrl"],
        callback.url(),
        "the gateway calls the proxy, which calls the client"
    );
    assert_eq!(gateway.prompts(), ["Make the background blue"]);
}

#[tokio::test]
async fn cmdc_to_agkit_callback_tool_call_is_called_back_and_its_result_sent_as_a_tool_message() {
    let mut called = vec![];
    called.extend(kit::call(
        "call_bg",
        "change_background",
        &["{\"color\":", "\"blue\"}"],
    ));
    let agent = Upstream::serve([
        kit::reply(called),
        kit::reply([kit::text("Done, it is blue.")]),
    ])
    .await;
    let callback = painter().await;
    let proxy = proxy("ag-kit", &agent).await;
    let session = session(&proxy).await;
    register_painter(&proxy, &session, &callback).await;

    let seen = turn(&proxy, &session, "Make it blue").await;

    assert_one_completed_run(&seen);
    assert_eq!(streamed_text(&seen), "Done, it is blue.");
    assert_painted(&seen, &callback, &session, "call_bg");
    let received = agent.received();
    assert_eq!(received.len(), 2, "{received:#?}");
    assert_eq!(
        received[0].body["tools"][0]["name"], "change_background",
        "the callback tool is the agent's client tool"
    );
    let answer = &received[1].body["messages"];
    assert_eq!(
        answer,
        &json!([{"role": "tool", "content": "Background is blue", "toolCallId": "call_bg"}]),
        "{:#}",
        received[1].body
    );
    assert_eq!(conversation_of(&agent, 1), conversation_of(&agent, 0));
}

#[tokio::test]
async fn cmdc_to_agentscope_function_call_is_called_back_and_its_output_sent() {
    let runtime = scope::runtime([
        Run::new()
            .function_call(
                "call_bg",
                "change_background",
                &["{\"color\": \"bl", "{\"color\": \"blue\"}"],
            )
            .completed(),
        Run::new().text(&["Done, it is blue."]).completed(),
    ])
    .await;
    let callback = painter().await;
    let proxy = proxy("agentscope", &runtime).await;
    let session = session(&proxy).await;
    register_painter(&proxy, &session, &callback).await;

    let seen = turn(&proxy, &session, "Make it blue").await;

    assert_one_completed_run(&seen);
    assert_eq!(streamed_text(&seen), "Done, it is blue.");
    assert_painted(&seen, &callback, &session, "call_bg");
    let received = runtime.received();
    assert_eq!(
        received[0].body["tools"][0]["function"]["name"],
        "change_background"
    );
    let input = scope::input_of(&runtime, 1);
    let kinds = scope::input_types(&input);
    assert_eq!(kinds, ["message", "function_call", "function_call_output"]);
    assert_eq!(
        scope::data(&input[2]),
        &json!({"call_id": "call_bg", "name": "change_background", "output": "Background is blue"})
    );
}

// --- The WebSocket ----------------------------------------------------------------------------------------

async fn connect_ws(proxy: &Proxy, session: &str) -> Ws {
    let url = format!(
        "ws://{}{PATH}/v1/sessions/{session}/ws?api_key={CLIENT_KEY}",
        proxy.addr()
    );
    let (ws, _) = support::within(
        "the WebSocket handshake",
        tokio_tungstenite::connect_async(url),
    )
    .await
    .expect("the WebSocket connects");
    ws
}

async fn send_ws(ws: &mut Ws, frame: Value) {
    use futures_util::SinkExt;
    ws.send(tokio_tungstenite::tungstenite::Message::text(
        frame.to_string(),
    ))
    .await
    .expect("send");
}

/// Event frames until one named `name`; returns them all, that one last.
async fn ws_until(ws: &mut Ws, name: &str) -> Vec<Value> {
    let mut frames = Vec::new();
    loop {
        let frame = recv_ws(ws).await;
        let found = frame["event"] == name;
        frames.push(frame);
        if found {
            return frames;
        }
    }
}

#[tokio::test]
async fn cmdc_to_cmdc_approval_over_the_websocket_reaches_the_gateway() {
    let gateway = Gateway::start(cleaner).await;
    let proxy = cmdc_proxy(&gateway).await;
    let session = session(&proxy).await;
    let mut ws = connect_ws(&proxy, &session).await;

    send_ws(
        &mut ws,
        json!({"action": "prompt", "text": "Clean the logs"}),
    )
    .await;
    assert_eq!(
        recv_ws(&mut ws).await,
        json!({"ok": true, "action": "prompt"})
    );
    let asked = ws_until(&mut ws, "approval_required").await;
    let approval_id = asked.last().unwrap()["data"]["approvalId"]
        .as_str()
        .unwrap()
        .to_owned();
    send_ws(
        &mut ws,
        json!({"action": "approve", "approvalId": approval_id}),
    )
    .await;
    assert_eq!(
        recv_ws(&mut ws).await,
        json!({"ok": true, "action": "approve"}),
        "the ack is the next frame"
    );
    let rest = ws_until(&mut ws, "agent_end").await;

    assert_eq!(
        rest[0],
        json!({"event": "approval_resolved", "data": {"approvalId": approval_id, "status": "approved"}})
    );
    let said: String = rest
        .iter()
        .filter(|f| f["event"] == "message_delta")
        .map(|f| f["data"]["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(said, "Deleted the old logs.");
    let decided = gateway.requests("POST approve");
    assert_eq!(decided.len(), 1, "{:?}", gateway.log());
    assert_eq!(decided[0].body["approvalId"], "apr_gw_7");
}

#[tokio::test]
async fn cmdc_to_a2a_question_answered_over_the_websocket_continues_the_task() {
    let agent = a2a::asking_agent().await;
    let proxy = proxy("a2a", &agent).await;
    let session = session(&proxy).await;
    let mut ws = connect_ws(&proxy, &session).await;

    send_ws(&mut ws, json!({"action": "prompt", "text": "Weather?"})).await;
    assert_eq!(
        recv_ws(&mut ws).await,
        json!({"ok": true, "action": "prompt"})
    );
    let asked = ws_until(&mut ws, "ask_user").await;
    let ask = &asked.last().unwrap()["data"];
    assert_eq!(ask["question"], "Which city?");
    let reference = ask["ref"].as_str().unwrap().to_owned();
    send_ws(
        &mut ws,
        json!({"action": "respond", "ref": reference, "response": "Paris"}),
    )
    .await;
    assert_eq!(
        recv_ws(&mut ws).await,
        json!({"ok": true, "action": "respond"})
    );
    let rest = ws_until(&mut ws, "agent_end").await;

    let said: String = rest
        .iter()
        .filter(|f| f["event"] == "message_delta")
        .map(|f| f["data"]["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(said, "Paris is sunny.");
    let calls = a2a::calls(&agent, "message/stream");
    assert_eq!(calls.len(), 2);
    assert_eq!(a2a::sent_message(&calls[1])["taskId"], "task-1");
}

// --- More of what a client sees ------------------------------------------------------------------------------

#[tokio::test]
async fn cmdc_to_cmdc_server_side_tools_and_token_usage_pass_through() {
    let gateway = Gateway::start(|_, _| {
        let mut steps = cmdc::tool_execution(
            "tc_1",
            "Shell",
            json!({"command": "python3 sort.py"}),
            "[1, 2, 3]",
        );
        steps.extend(cmdc::reply(&["Sorted."]));
        steps
    })
    .await;
    let proxy = cmdc_proxy(&gateway).await;
    let session = session(&proxy).await;

    let seen = turn(&proxy, &session, "Sort it").await;

    assert_one_completed_run(&seen);
    assert_eq!(data(&seen, "tool_calls"), &json!({"count": 1}));
    assert_eq!(
        data(&seen, "tool_execution_start"),
        &json!({"toolName": "Shell", "callId": "tc_1", "args": {"command": "python3 sort.py"}})
    );
    assert_eq!(
        data(&seen, "tool_execution_end"),
        &json!({"toolName": "Shell", "callId": "tc_1", "status": "ok", "result": "[1, 2, 3]"})
    );
    assert_eq!(streamed_text(&seen), "Sorted.");
    let (prompt_tokens, completion_tokens, total_tokens) = cmdc::USAGE;
    assert_eq!(
        data(&seen, "agent_end")["tokenUsage"],
        json!({"promptTokens": prompt_tokens, "completionTokens": completion_tokens,
               "totalTokens": total_tokens})
    );
}

#[tokio::test]
async fn cmdc_to_cmdc_gateway_error_is_an_error_event_then_agent_abort() {
    let gateway = Gateway::start(|text, _| {
        if text == "boom" {
            vec![
                cmdc::error("Provider stream failed: connection timeout"),
                cmdc::abort("error"),
            ]
        } else {
            cmdc::reply(&["Fine now."])
        }
    })
    .await;
    let proxy = cmdc_proxy(&gateway).await;
    let session = session(&proxy).await;

    let failed = turn(&proxy, &session, "boom").await;

    assert_eq!(
        names(&failed),
        ["prompt_received", "agent_start", "error", "agent_abort"]
    );
    assert!(
        data(&failed, "error")["reason"]
            .as_str()
            .unwrap()
            .contains("Provider stream failed: connection timeout"),
        "{failed:?}"
    );
    let next = turn(&proxy, &session, "again").await;
    assert_eq!(streamed_text(&next), "Fine now.");
    assert_eq!(gateway.sessions().len(), 1, "the same upstream session");
}

#[tokio::test]
async fn cmdc_deleting_a_paused_session_aborts_the_run_and_stops_the_gateways_run() {
    let gateway = Gateway::start(cleaner).await;
    let proxy = cmdc_proxy(&gateway).await;
    let (session, mut events) = start_run(&proxy, "Clean the logs").await;
    until(&mut events, "approval_required").await;

    let deleted = delete_session(&proxy, &session).await;

    assert_eq!(deleted.status, StatusCode::OK);
    let seen = all(&mut events).await;
    assert_eq!(
        seen.last().unwrap(),
        &("agent_abort".to_owned(), json!({"reason": "aborted"}))
    );
    wait_for_gateway_abort(&gateway, "the paused run's abort").await;
    assert!(
        gateway.requests("POST approve").is_empty(),
        "nobody approved: {:?}",
        gateway.log()
    );
}

#[tokio::test]
async fn cmdc_to_agentscope_system_prompt_leads_the_runtimes_input() {
    let runtime = scope::runtime([Run::new().text(&["Hi."]).completed()]).await;
    let proxy = proxy("agentscope", &runtime).await;
    let session = client(&proxy)
        .create(json!({"model": MODEL, "systemPrompt": "be brief"}))
        .await;

    turn(&proxy, &session, "hello").await;

    assert_eq!(
        scope::summary(&scope::input_of(&runtime, 0)),
        [
            ("message".into(), "system".into(), json!("be brief")),
            ("message".into(), "user".into(), json!("hello")),
        ]
    );
}

#[tokio::test]
async fn cmdc_to_a2a_prompt_while_paused_is_queued_and_runs_after_the_answer() {
    let agent = asking_agent_with_a_next_task().await;
    let proxy = proxy("a2a", &agent).await;
    let (session, mut events) = start_run(&proxy, "Weather?").await;
    let reference = until_question(&mut events).await;

    let queued = client(&proxy)
        .call(
            Method::POST,
            &format!("/v1/sessions/{session}/prompt"),
            Some(json!({"text": "And tomorrow?"})),
        )
        .await;
    assert_eq!(queued.status, StatusCode::ACCEPTED);
    assert_eq!(queued.json().await["queued"], true);
    assert_eq!(
        a2a::calls(&agent, "message/stream").len(),
        1,
        "the queued prompt waits"
    );
    client(&proxy).respond(&session, &reference, "Paris").await;
    let answered = all(&mut events).await;
    assert_eq!(streamed_text(&answered), "Paris is sunny.");

    let later = all(&mut client(&proxy).subscribe(&session).await).await;

    assert_eq!(data(&later, "prompt_received")["text"], "And tomorrow?");
    assert_eq!(streamed_text(&later), "Rain tomorrow.");
    assert_one_completed_run(&later);
    let calls = a2a::calls(&agent, "message/stream");
    assert_eq!(calls.len(), 3);
    let message = a2a::sent_message(&calls[2]);
    assert_eq!(message["contextId"], "ctx-up-1");
    assert!(message.get("taskId").is_none(), "{message}");
    assert_eq!(a2a::message_text(message), "And tomorrow?");
}

#[tokio::test]
async fn cmdc_deleting_a_running_session_aborts_the_gateways_run() {
    let gateway =
        Gateway::start(|_, _| [cmdc::text(&["Working"]), vec![cmdc::hang()]].concat()).await;
    let proxy = cmdc_proxy(&gateway).await;
    let (session, mut events) = start_run(&proxy, "Work").await;
    until(&mut events, "message_delta").await;

    let deleted = delete_session(&proxy, &session).await;

    assert_eq!(deleted.status, StatusCode::OK);
    let seen = all(&mut events).await;
    assert_eq!(
        seen.last().unwrap(),
        &("agent_abort".to_owned(), json!({"reason": "aborted"}))
    );
    wait_for_gateway_abort(&gateway, "the run's abort").await;
}

#[tokio::test]
async fn cmdc_to_cmdc_a_session_created_again_with_a_deleted_id_gets_a_fresh_upstream_session() {
    let gateway = Gateway::start(cmdc::memory).await;
    let proxy = cmdc_proxy(&gateway).await;
    let session = client(&proxy)
        .create(json!({"model": MODEL, "sessionId": "my-session"}))
        .await;
    turn(&proxy, &session, "my name is Ada").await;
    let deleted = delete_session(&proxy, &session).await;
    assert_eq!(deleted.status, StatusCode::OK);

    let again = client(&proxy)
        .create(json!({"model": MODEL, "sessionId": "my-session"}))
        .await;
    let seen = turn(&proxy, &again, "what is my name?").await;

    assert_eq!(
        streamed_text(&seen),
        "I do not know your name.",
        "a deleted session takes its history with it (specs/cmdc.md §3.5)"
    );
    assert_eq!(gateway.sessions().len(), 2, "{:?}", gateway.log());
}

#[tokio::test]
async fn cmdc_to_agentscope_a_session_created_again_with_a_deleted_id_starts_with_no_history() {
    let runtime = scope::runtime([Run::new().text(&["Hi."]).completed()]).await;
    let proxy = proxy("agentscope", &runtime).await;
    let session = client(&proxy)
        .create(json!({"model": MODEL, "sessionId": "my-session"}))
        .await;
    turn(&proxy, &session, "my name is Ada").await;
    delete_session(&proxy, &session).await;

    let again = client(&proxy)
        .create(json!({"model": MODEL, "sessionId": "my-session"}))
        .await;
    turn(&proxy, &again, "what is my name?").await;

    assert_eq!(
        scope::summary(&scope::input_of(&runtime, 1)),
        [("message".into(), "user".into(), json!("what is my name?"))],
        "a deleted session takes its history with it (specs/cmdc.md §3.5)"
    );
}

#[tokio::test]
async fn cmdc_to_cmdc_two_tenants_with_the_same_session_id_have_distinct_upstream_sessions() {
    let gateway = Gateway::start(cmdc::memory).await;
    let route = cmdc_route(&gateway)
        .api_keys(&[("sk-other", "globex")])
        .translate("model", MODEL);
    let proxy = Proxy::start(route).await;
    let ours = client(&proxy)
        .create(json!({"model": MODEL, "sessionId": "shared"}))
        .await;
    turn(&proxy, &ours, "my name is Ada").await;

    let created = client(&proxy)
        .with_key("sk-other")
        .call(
            Method::POST,
            "/v1/sessions",
            Some(json!({"model": MODEL, "sessionId": "shared"})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let prompted = client(&proxy)
        .with_key("sk-other")
        .call(
            Method::POST,
            "/v1/sessions/shared/prompt",
            Some(json!({"text": "what is my name?"})),
        )
        .await;
    assert_eq!(prompted.status, StatusCode::ACCEPTED);
    let events = client(&proxy)
        .with_key("sk-other")
        .call(Method::GET, "/v1/sessions/shared/events", None)
        .await;
    let theirs = all(&mut events.sse()).await;

    assert_eq!(streamed_text(&theirs), "I do not know your name.");
    assert_eq!(gateway.sessions().len(), 2, "{:?}", gateway.log());
}

// --- CMDC -> AG-UI: the agent's confirmAction ---------------------------------------------------------------

#[tokio::test]
async fn cmdc_to_agui_confirm_action_is_approval_required_and_approve_is_the_tools_result() {
    use crate::support::ag_ui::{call as agui_call, finished, started, text_run};
    use crate::support::Reply;
    let upstream = Upstream::serve([
        Reply::sse()
            .event(started())
            .events(agui_call(
                "call_confirm_1",
                "confirmAction",
                &[r#"{"action":"delete the temp files"}"#],
            ))
            .event(finished()),
        text_run("m2", &["Deleted them."]),
    ])
    .await;
    let proxy = proxy("ag-ui", &upstream).await;
    let (session, mut events) = start_run(&proxy, "Clean up").await;

    let asked = until(&mut events, "approval_required").await;
    let required = data(&asked, "approval_required").clone();
    assert_eq!(required["approvalId"], "call_confirm_1");
    assert_eq!(required["toolName"], "confirmAction");
    assert_eq!(required["args"], json!({"action": "delete the temp files"}));
    let approved = client(&proxy).approve(&session, "call_confirm_1").await;
    assert_eq!(approved.status, StatusCode::OK);

    let seen = all(&mut events).await;
    assert_one_completed_run(&seen);
    assert_eq!(streamed_text(&seen), "Deleted them.");
    let received = upstream.received();
    let offered = received[0].body["tools"].to_string();
    assert!(
        offered.contains("confirmAction") && offered.contains("ask_user"),
        "{offered}"
    );
    let answer = received[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(answer["toolCallId"], "call_confirm_1");
    assert_eq!(answer["content"], r#"{"approved":true}"#);
}

#[tokio::test]
async fn cmdc_to_agui_ask_user_call_is_ask_user_and_respond_is_the_tools_result() {
    use crate::support::ag_ui::{call as agui_call, finished, started, text_run};
    use crate::support::Reply;
    let upstream = Upstream::serve([
        Reply::sse()
            .event(started())
            .events(agui_call(
                "ask_1",
                "ask_user",
                &[r#"{"question":"Which colour?","options":["blue","red"]}"#],
            ))
            .event(finished()),
        text_run("m2", &["Blue it is."]),
    ])
    .await;
    let proxy = proxy("ag-ui", &upstream).await;
    let (session, mut events) = start_run(&proxy, "Paint it").await;

    let asked = until(&mut events, "ask_user").await;
    let question = data(&asked, "ask_user").clone();
    assert_eq!(question["ref"], "ask_1");
    assert_eq!(question["question"], "Which colour?");
    assert_eq!(question["options"], json!(["blue", "red"]));
    assert_eq!(
        client(&proxy)
            .respond(&session, "ask_1", "blue")
            .await
            .status,
        StatusCode::OK
    );

    let seen = all(&mut events).await;
    assert_one_completed_run(&seen);
    assert_eq!(streamed_text(&seen), "Blue it is.");
    let answer = upstream.received()[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(answer["toolCallId"], "ask_1");
    assert_eq!(answer["content"], "blue");
}
