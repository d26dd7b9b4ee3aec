//! The four A2A pairs through the real server on a real socket, one test per behaviour: AG-UI -> A2A (the
//! flagship: a CopilotKit-style frontend in front of an A2A agent), A2A -> AG-UI, A2A -> A2A and A2A -> echo,
//! each across text, turns of one conversation, input-required round trips, upstream failure and cancel.
//!
//! The A2A upstreams are scripted agents (`support::a2a::Agent`) framing their streams like a2a-sdk 0.2.13;
//! the AG-UI upstreams are the scripted `Reply` streams of `support::ag_ui`. Every AG-UI stream the proxy
//! serves must pass the AG-UI conservative profile.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::a2a::{self, Agent};
use crate::support::ag_ui::{self, finished, input, started, text, tool, user};
use crate::support::{Proxy, Reply, Route, Upstream};

const PATH: &str = "/agents/pair";

/// A route from `inbound` to `outbound` at [`PATH`].
fn route(inbound: &str, outbound: &str) -> Route {
    Route::new("pair", PATH, inbound, outbound)
}

fn agui_to_a2a_route(agent: &Upstream) -> Route {
    route("ag-ui", "a2a").upstream(&agent.url())
}

async fn agui_to_a2a(agent: &Upstream) -> Proxy {
    Proxy::start(agui_to_a2a_route(agent)).await
}

async fn a2a_to_agui(upstream: &Upstream) -> Proxy {
    Proxy::start(route("a2a", "ag-ui").upstream(&upstream.url())).await
}

async fn a2a_to_a2a(agent: &Upstream) -> Proxy {
    Proxy::start(route("a2a", "a2a").upstream(&agent.url())).await
}

async fn a2a_to_echo() -> Proxy {
    Proxy::start(route("a2a", "echo")).await
}

/// An AG-UI run asking about the weather.
fn weather(thread_id: &str, run_id: &str) -> Value {
    input(
        thread_id,
        run_id,
        json!([user("u1", "Weather in Beijing?")]),
    )
}

/// An AG-UI upstream's pause: `RUN_FINISHED` with an interrupt outcome asking `question`.
fn agui_interrupt(id: &str, question: &str) -> Value {
    json!({"type": "RUN_FINISHED", "threadId": "upstream-thread", "runId": "upstream-run",
           "outcome": {"type": "interrupt", "interrupts": [{"id": id, "reason": "input", "message": question}]}})
}

// --- AG-UI -> A2A (the flagship) -----------------------------------------------------------------------------

#[tokio::test]
async fn agui_to_a2a_artifact_chunks_stream_as_agui_text_messages() {
    let task = a2a::task("task-1", "ctx-up-1");
    let agent = Agent::new()
        .on(
            "message/stream",
            a2a::stream([task.submitted(), task.working()])
                .ping()
                .chunks(&task, "a1", &["The weather ", "in Beijing ", "is sunny."])
                .then(task.completed()),
        )
        .serve()
        .await;
    let proxy = agui_to_a2a(&agent).await;

    let events = ag_ui::run(&proxy.url(PATH), &weather("thread-1", "run-1")).await;

    assert_eq!(
        ag_ui::types(&events),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ],
        "text messages, not RAW or CUSTOM events"
    );
    assert_eq!(
        ag_ui::deltas(&events),
        ["The weather ", "in Beijing ", "is sunny."]
    );
    assert_eq!(events[1]["role"], "assistant");
}

#[tokio::test]
async fn agui_to_a2a_run_starts_when_the_agent_works_not_at_its_first_words() {
    let task = a2a::task("task-1", "ctx-up-1");
    let agent = Agent::new()
        .on(
            "message/stream",
            a2a::stream([task.submitted(), task.working()])
                .gate()
                .chunks(&task, "a1", &["Sunny."])
                .then(task.completed()),
        )
        .serve()
        .await;
    let proxy = agui_to_a2a(&agent).await;
    let input = weather("thread-1", "run-1");

    // The agent is held at its gate, working but silent.
    let events = ag_ui::run_starting_before(&proxy.url(PATH), &input, || agent.release()).await;
    assert_eq!(ag_ui::text_of(&events), "Sunny.");
}

#[tokio::test]
async fn agui_to_a2a_agent_receives_only_the_new_user_message_and_no_version_header() {
    let task = a2a::task("task-1", "ctx-up-1");
    let agent = Agent::new()
        .on("message/stream", task.streams(&["Sunny."]))
        .serve()
        .await;
    let proxy = agui_to_a2a(&agent).await;
    let mut run = input(
        "thread-2",
        "run-1",
        json!([{"id": "s1", "role": "system", "content": "Be brief."}, user("u1", "Weather in Beijing?")]),
    );
    run["tools"] = json!([tool("ask_user")]);

    ag_ui::run(&proxy.url(PATH), &run).await;

    let call = agent.only_request();
    assert_eq!(a2a::rpc_method(&call), "message/stream");
    assert!(
        call.header("a2a-version").is_empty(),
        "no A2A-Version header to a 0.2.5 agent"
    );
    assert_eq!(call.header("content-type"), "application/json");
    assert_eq!(call.header("accept"), "text/event-stream");
    assert_eq!(call.body["jsonrpc"], "2.0");
    assert!(call.body["id"].is_string());
    let params = call.body["params"].as_object().unwrap();
    assert_eq!(params.keys().collect::<Vec<_>>(), ["message"]);
    let message = a2a::sent_message(&call);
    let mut fields: Vec<&String> = message.as_object().unwrap().keys().collect();
    fields.sort();
    assert_eq!(
        fields,
        ["kind", "messageId", "parts", "role"],
        "a new conversation: no contextId, no taskId"
    );
    assert_eq!(message["kind"], "message");
    assert_eq!(message["role"], "user");
    assert!(message["messageId"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));
    assert_eq!(
        message["parts"],
        json!([{"kind": "text", "text": "Weather in Beijing?"}])
    );
}

#[tokio::test]
async fn agui_to_a2a_input_required_calls_the_ask_user_tool_with_the_question() {
    let agent = a2a::asking_agent().await;
    let proxy = agui_to_a2a(&agent).await;
    let mut run = weather("thread-4", "run-1");
    run["tools"] = json!([tool("ask_user")]);

    let events = ag_ui::run(&proxy.url(PATH), &run).await;

    let calls = ag_ui::calls(&events);
    assert_eq!(calls.len(), 1, "{events:#?}");
    let (_, name, args) = &calls[0];
    assert_eq!(name, "ask_user");
    assert_eq!(args["question"], "Which city?");
    assert_eq!(
        ag_ui::text_of(&events),
        "",
        "the question is in the call, not repeated as text"
    );
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
}

#[tokio::test]
async fn agui_to_a2a_input_required_calls_the_routes_own_question_tool() {
    let agent = a2a::asking_agent().await;
    let tools = agui_to_a2a_route(&agent)
        .translate("approval_tool", "approveIt")
        .translate("question_tool", "askHuman");
    let proxy = Proxy::start(tools).await;
    let mut run = weather("thread-5", "run-1");
    run["tools"] = json!([tool("approveIt"), tool("askHuman")]);

    let events = ag_ui::run(&proxy.url(PATH), &run).await;

    let calls = ag_ui::calls(&events);
    assert_eq!(calls.len(), 1, "{events:#?}");
    assert_eq!(
        calls[0].1, "askHuman",
        "input-required is a question, not an approval"
    );
    assert_eq!(calls[0].2["question"], "Which city?");
}

#[tokio::test]
async fn agui_to_a2a_answering_the_question_resumes_the_paused_task() {
    let agent = a2a::asking_agent().await;
    let proxy = agui_to_a2a(&agent).await;
    let mut run1 = weather("thread-6", "run-1");
    run1["tools"] = json!([tool("ask_user")]);
    let events = ag_ui::run(&proxy.url(PATH), &run1).await;
    let (call_id, name, args) = ag_ui::calls(&events).remove(0);

    let mut run2 = run1.clone();
    run2["runId"] = json!("run-2");
    run2["messages"] = json!([
        user("u1", "Weather in Beijing?"),
        ag_ui::assistant_call("a1", &call_id, &name, &args.to_string()),
        ag_ui::tool_result("t1", &call_id, "Paris"),
    ]);
    let events = ag_ui::run(&proxy.url(PATH), &run2).await;

    assert_eq!(ag_ui::text_of(&events), "Paris is sunny.");
    assert!(ag_ui::calls(&events).is_empty());
    let calls = a2a::calls(&agent, "message/stream");
    assert_eq!(calls.len(), 2);
    let answer = a2a::sent_message(&calls[1]);
    assert_eq!(answer["taskId"], "task-1", "the paused task continues");
    assert_eq!(answer["contextId"], "ctx-up-1");
    assert_eq!(
        answer["parts"],
        json!([{"kind": "text", "text": "Paris"}]),
        "the answer is the message: the synthetic call stays out of it"
    );
}

#[tokio::test]
async fn agui_to_a2a_failed_task_is_one_run_error_with_the_status_text() {
    let agent = a2a::failing_agent("task-1").await;
    let proxy = agui_to_a2a(&agent).await;

    let events = ag_ui::run(&proxy.url(PATH), &weather("thread-7", "run-1")).await;

    let error = ag_ui::run_error(&events);
    assert_eq!(error["message"], "The weather service is down.");
    assert_eq!(error["code"], "failed");
    assert_eq!(events.len(), 2, "RUN_STARTED, RUN_ERROR: {events:#?}");
}

#[tokio::test]
async fn agui_to_a2a_json_rpc_error_answer_is_a_run_error_with_its_code() {
    let agent = Agent::new()
        .on(
            "message/stream",
            a2a::error(-32602, "Invalid parameters: message.parts"),
        )
        .serve()
        .await;
    let proxy = agui_to_a2a(&agent).await;

    let events = ag_ui::run(&proxy.url(PATH), &weather("thread-8", "run-1")).await;

    let error = ag_ui::run_error(&events);
    assert_eq!(error["code"], "-32602");
    assert_eq!(error["message"], "Invalid parameters: message.parts");
}

#[tokio::test]
async fn agui_to_a2a_json_rpc_error_event_mid_stream_ends_the_run_with_a_run_error() {
    let task = a2a::task("task-1", "ctx-up-1");
    let agent = Agent::new()
        .on(
            "message/stream",
            a2a::stream([task.submitted(), task.working()])
                .then(task.chunk("a1", "Half an ", false, false))
                .error(-32603, "Internal error"),
        )
        .serve()
        .await;
    let proxy = agui_to_a2a(&agent).await;

    let events = ag_ui::run(&proxy.url(PATH), &weather("thread-9", "run-1")).await;

    assert_eq!(
        ag_ui::text_of(&events),
        "Half an ",
        "what came before is kept"
    );
    let error = ag_ui::run_error(&events);
    assert_eq!(error["code"], "-32603");
    assert_eq!(error["message"], "Internal error");
}

#[tokio::test]
async fn agui_to_a2a_client_disconnect_cancels_the_running_task_upstream() {
    let agent = a2a::thinking_forever("task-1").await;
    let proxy = agui_to_a2a(&agent).await;
    let mut stream = ag_ui::start(&proxy.url(PATH), &weather("thread-11", "run-1")).await;
    stream.until("TEXT_MESSAGE_CONTENT").await;
    assert!(a2a::calls(&agent, "tasks/cancel").is_empty());

    drop(stream);

    let cancel = a2a::wait_for_call(&agent, "tasks/cancel").await;
    assert_eq!(cancel.body["params"], json!({"id": "task-1"}));
    assert!(
        agent.client_left_within(Duration::from_secs(5)).await,
        "the upstream stream is closed too"
    );
}

#[tokio::test]
async fn agui_to_a2a_rewritten_history_starts_a_fresh_upstream_conversation() {
    let first = a2a::task("task-1", "ctx-up-1");
    let second = a2a::task("task-2", "ctx-up-2");
    let agent = Agent::new()
        .on("message/stream", first.streams(&["Hi!"]))
        .on("message/stream", second.streams(&["Hello!"]))
        .serve()
        .await;
    let proxy = agui_to_a2a(&agent).await;
    let run1 = input("thread-12", "run-1", json!([user("u1", "Hi")]));
    ag_ui::run(&proxy.url(PATH), &run1).await;

    // The user edited the first message: the conversation the agent knows is no longer this one.
    let run2 = input(
        "thread-12",
        "run-2",
        json!([user("u1-edited", "Hello instead")]),
    );
    let events = ag_ui::run(&proxy.url(PATH), &run2).await;

    assert_eq!(ag_ui::text_of(&events), "Hello!");
    let calls = a2a::calls(&agent, "message/stream");
    let message = a2a::sent_message(&calls[1]);
    assert!(
        message.get("contextId").is_none(),
        "a fresh upstream conversation: {message}"
    );
    assert_eq!(a2a::message_text(message), "Hello instead");
}

#[tokio::test]
async fn agui_to_a2a_agent_card_without_streaming_switches_to_message_send() {
    let task = a2a::task("task-1", "ctx-up-1");
    let mut answered = task.in_state("completed");
    // Two artifacts with one id, as the seed vendor sends them: concatenated.
    answered["artifacts"] = json!([
        {"artifactId": "a1", "parts": [{"kind": "text", "text": "Sunny "}]},
        {"artifactId": "a1", "parts": [{"kind": "text", "text": "and warm."}]},
    ]);
    let agent = Agent::new()
        .card(
            json!({"name": "Weather", "description": "weather", "url": "http://example/",
                     "version": "1.0.0", "protocolVersion": "0.2.5",
                     "capabilities": {"streaming": false}, "defaultInputModes": ["text/plain"],
                     "defaultOutputModes": ["text/plain"], "skills": []}),
        )
        .on("message/send", a2a::reply(answered))
        .serve()
        .await;
    let proxy = Proxy::start(agui_to_a2a_route(&agent).translate("a2a_card", "auto")).await;

    let events = ag_ui::run(&proxy.url(PATH), &weather("thread-13", "run-1")).await;

    assert_eq!(ag_ui::text_of(&events), "Sunny and warm.");
    let send = a2a::wait_for_call(&agent, "message/send").await;
    assert_eq!(send.header("accept"), "application/json");
    assert!(a2a::calls(&agent, "message/stream").is_empty());
    assert!(agent.received()[0]
        .path
        .ends_with("/.well-known/agent-card.json"));
}

// --- A2A -> AG-UI ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a2a_to_agui_message_send_returns_the_text_merged_into_one_artifact() {
    let upstream = ag_ui::text_run("m1", &["Sunny ", "and warm."])
        .serve()
        .await;
    let proxy = a2a_to_agui(&upstream).await;

    let task = a2a::send_message(&proxy.url(PATH), a2a::message("Weather?")).await;

    assert_eq!(task["kind"], "task");
    assert_eq!(task["status"]["state"], "completed");
    assert_eq!(
        task["artifacts"].as_array().unwrap().len(),
        1,
        "one artifact per message"
    );
    assert_eq!(
        task["artifacts"][0]["parts"],
        json!([{"kind": "text", "text": "Sunny and warm."}])
    );
}

#[tokio::test]
async fn a2a_to_agui_second_turn_sends_the_full_history_with_a_stable_thread_id() {
    let upstream = Upstream::serve([
        ag_ui::text_run("m1", &["Sunny."]),
        ag_ui::text_run("m2", &["Rain."]),
    ])
    .await;
    let proxy = a2a_to_agui(&upstream).await;
    let url = proxy.url(PATH);

    let one =
        a2a::stream_to_end(&url, a2a::message_in("ctx-client-1", "Weather in Beijing?")).await;
    let two = a2a::stream_to_end(&url, a2a::message_in("ctx-client-1", "And tomorrow?")).await;

    assert_eq!(a2a::streamed_text(&two), "Rain.");
    assert_eq!(one[0]["contextId"], "ctx-client-1");
    assert_eq!(two[0]["contextId"], "ctx-client-1");
    let received = upstream.received();
    assert_eq!(received.len(), 2);
    let thread = &received[0].body["threadId"];
    assert!(thread.as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(
        &received[1].body["threadId"], thread,
        "one thread per context"
    );
    let history: Vec<(&str, &str)> = received[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        history,
        [
            ("user", "Weather in Beijing?"),
            ("assistant", "Sunny."),
            ("user", "And tomorrow?")
        ],
        "a full-history upstream gets the conversation so far"
    );
}

#[tokio::test]
async fn a2a_to_agui_run_error_fails_the_task_with_its_message() {
    let upstream = Reply::sse()
        .event(started())
        .event(json!({"type": "RUN_ERROR", "message": "quota exhausted", "code": "RATE_LIMITED"}))
        .serve()
        .await;
    let proxy = a2a_to_agui(&upstream).await;

    let results = a2a::stream_to_end(&proxy.url(PATH), a2a::message("Weather?")).await;

    let status = a2a::final_status(&results);
    assert_eq!(status["state"], "failed");
    let why = a2a::status_text(status);
    assert!(why.contains("quota exhausted"), "{why}");
}

/// An AG-UI upstream that asks "Which city?" first, then answers "Paris is sunny.".
async fn asking_agui_upstream() -> Upstream {
    Upstream::serve([
        Reply::sse()
            .event(started())
            .event(agui_interrupt("int-1", "Which city?")),
        ag_ui::text_run("m2", &["Paris is sunny."]),
    ])
    .await
}

#[tokio::test]
async fn a2a_to_agui_interrupt_is_input_required_with_the_question() {
    let upstream = asking_agui_upstream().await;
    let proxy = a2a_to_agui(&upstream).await;

    let results = a2a::stream_to_end(&proxy.url(PATH), a2a::message("Weather?")).await;

    let status = a2a::final_status(&results);
    assert_eq!(status["state"], "input-required");
    assert_eq!(status["message"]["role"], "agent");
    assert_eq!(a2a::status_text(status), "Which city?");
}

#[tokio::test]
async fn a2a_to_agui_answer_on_the_paused_task_resumes_the_upstream() {
    let upstream = asking_agui_upstream().await;
    let proxy = a2a_to_agui(&upstream).await;
    let url = proxy.url(PATH);
    let paused = a2a::stream_to_end(&url, a2a::message("Weather?")).await;
    let question = paused.last().unwrap();

    let resumed = a2a::stream_to_end(&url, a2a::answer_to(question, "Paris")).await;

    assert_eq!(
        resumed[0]["id"], question["taskId"],
        "the same task continues"
    );
    assert_eq!(a2a::streamed_text(&resumed), "Paris is sunny.");
    assert_eq!(a2a::final_status(&resumed)["state"], "completed");
    let sent = &upstream.received()[1].body;
    assert_eq!(
        sent["resume"],
        json!([{"interruptId": "int-1", "status": "resolved", "payload": "Paris"}])
    );
    assert_eq!(sent["threadId"], upstream.received()[0].body["threadId"]);
    assert_eq!(
        sent["messages"],
        json!([{"id": upstream.received()[0].body["messages"][0]["id"], "role": "user", "content": "Weather?"}]),
        "the answer travels as the resume, not again as a new user message"
    );
}

// --- A2A -> A2A ------------------------------------------------------------------------------------------------

#[tokio::test]
async fn a2a_to_a2a_contexts_are_kept_on_each_side_across_turns() {
    let agent = a2a::sunny_then_rain("task-up-1", "task-up-2").await;
    let proxy = a2a_to_a2a(&agent).await;
    let url = proxy.url(PATH);

    let one = a2a::stream_to_end(&url, a2a::message_in("ctx-client-1", "Weather?")).await;
    let two = a2a::stream_to_end(&url, a2a::message_in("ctx-client-1", "And tomorrow?")).await;

    assert_eq!(a2a::streamed_text(&two), "Rain.");
    for result in one.iter().chain(&two) {
        assert_eq!(
            result["contextId"], "ctx-client-1",
            "the client's context on the inbound side"
        );
    }
    assert_ne!(one[0]["id"], two[0]["id"], "each message is a new task");
    let calls = a2a::calls(&agent, "message/stream");
    assert!(
        a2a::sent_message(&calls[0]).get("contextId").is_none(),
        "the agent names its own context"
    );
    let message = a2a::sent_message(&calls[1]);
    assert_eq!(
        message["contextId"], "ctx-up-1",
        "the agent's context upstream"
    );
    assert!(message.get("taskId").is_none());
    assert_eq!(a2a::message_text(message), "And tomorrow?");
}

#[tokio::test]
async fn a2a_to_a2a_input_required_round_trip_continues_the_agents_task() {
    let agent = a2a::asking_agent().await;
    let proxy = a2a_to_a2a(&agent).await;
    let url = proxy.url(PATH);
    let paused = a2a::stream_to_end(&url, a2a::message_in("ctx-client-2", "Weather?")).await;
    let status = a2a::final_status(&paused);
    assert_eq!(status["state"], "input-required");
    assert_eq!(a2a::status_text(status), "Which city?");

    let question = paused.last().unwrap();
    let resumed = a2a::stream_to_end(&url, a2a::answer_to(question, "Paris")).await;

    assert_eq!(
        resumed[0]["id"], question["taskId"],
        "the same task continues"
    );
    assert_eq!(resumed[0]["contextId"], "ctx-client-2");
    assert_eq!(a2a::streamed_text(&resumed), "Paris is sunny.");
    assert_eq!(a2a::final_status(&resumed)["state"], "completed");
    let calls = a2a::calls(&agent, "message/stream");
    assert_eq!(calls.len(), 2);
    let answer = a2a::sent_message(&calls[1]);
    assert_eq!(
        answer["taskId"], "task-1",
        "the agent's paused task continues"
    );
    assert_eq!(answer["contextId"], "ctx-up-1");
    assert_eq!(
        answer["parts"],
        json!([{"kind": "text", "text": "Paris"}]),
        "the answer once"
    );
}

#[tokio::test]
async fn a2a_to_a2a_failed_agent_task_fails_the_task_with_its_reason() {
    let agent = a2a::failing_agent("task-up-1").await;
    let proxy = a2a_to_a2a(&agent).await;

    let task = a2a::send_message(&proxy.url(PATH), a2a::message("Weather?")).await;

    assert_eq!(task["status"]["state"], "failed");
    let why = a2a::status_text(&task["status"]);
    assert!(why.contains("The weather service is down."), "{why}");
}

#[tokio::test]
async fn a2a_to_a2a_tasks_cancel_cancels_the_agents_task() {
    let agent = a2a::thinking_forever("task-up-1").await;
    let proxy = a2a_to_a2a(&agent).await;
    let url = proxy.url(PATH);
    let mut stream = a2a::stream_message(&url, a2a::message("Weather?")).await;
    let mut results = stream.until("artifact-update").await;
    let task_id = results[0]["id"].as_str().unwrap().to_owned();

    let canceled = a2a::cancel_task(&url, &task_id).await;

    assert_eq!(canceled["status"]["state"], "canceled");
    let cancel = a2a::wait_for_call(&agent, "tasks/cancel").await;
    assert_eq!(cancel.body["params"], json!({"id": "task-up-1"}));
    results.extend(stream.rest().await);
    assert_eq!(a2a::final_status(&results)["state"], "canceled");
}

#[tokio::test]
async fn a2a_to_a2a_tasks_cancel_of_a_paused_task_cancels_the_agents_task() {
    let agent = a2a::asking_agent().await;
    let proxy = a2a_to_a2a(&agent).await;
    let url = proxy.url(PATH);
    let paused = a2a::stream_to_end(&url, a2a::message_in("ctx-client-3", "Weather?")).await;
    let question = paused.last().unwrap();

    let canceled = a2a::cancel_task(&url, question["taskId"].as_str().unwrap()).await;

    assert_eq!(canceled["status"]["state"], "canceled");
    let cancel = a2a::wait_for_call(&agent, "tasks/cancel").await;
    assert_eq!(cancel.body["params"], json!({"id": "task-1"}));
    // The next message is a new question, not an answer to the canceled task.
    a2a::stream_to_end(&url, a2a::message_in("ctx-client-3", "Weather in Oslo?")).await;
    let calls = a2a::calls(&agent, "message/stream");
    let message = a2a::sent_message(&calls[1]);
    assert!(message.get("taskId").is_none(), "{message}");
    assert_eq!(message["contextId"], "ctx-up-1");
}

// --- A2A -> echo -----------------------------------------------------------------------------------------------

#[tokio::test]
async fn a2a_to_echo_two_turns_share_the_context_as_two_tasks() {
    let proxy = a2a_to_echo().await;
    let url = proxy.url(PATH);

    let one = a2a::send_message(&url, a2a::message("first")).await;
    let context = one["contextId"].as_str().unwrap().to_owned();
    let two = a2a::stream_to_end(&url, a2a::message_in(&context, "second")).await;

    assert_eq!(a2a::artifact_text(&one), "first");
    assert_eq!(a2a::streamed_text(&two), "second");
    assert_eq!(
        two[0]["contextId"],
        context.as_str(),
        "the minted context is kept"
    );
    assert_ne!(two[0]["id"], one["id"]);
}

#[tokio::test]
async fn a2a_to_echo_ask_pauses_and_the_answer_resumes_the_task() {
    let proxy = a2a_to_echo().await;
    let url = proxy.url(PATH);

    let paused = a2a::stream_to_end(&url, a2a::message("/ask Which city?")).await;
    let status = a2a::final_status(&paused);
    assert_eq!(status["state"], "input-required");
    assert_eq!(a2a::status_text(status), "Which city?");

    let question = paused.last().unwrap();
    let resumed = a2a::stream_to_end(&url, a2a::answer_to(question, "Paris")).await;

    assert_eq!(resumed[0]["id"], question["taskId"]);
    assert_eq!(a2a::streamed_text(&resumed), "You answered: Paris");
    assert_eq!(a2a::final_status(&resumed)["state"], "completed");
    let task = a2a::get_task(&url, question["taskId"].as_str().unwrap()).await;
    let roles: Vec<&str> = task["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "agent", "user"]);
}

/// An AG-UI agent that asks approval the way real ones do: it says what it found, calls the frontend tool
/// `confirmAction` it was offered, and finishes its run; the next run acts on the answer.
async fn agent_asking_confirm_action(then: &[&str]) -> Upstream {
    Upstream::serve([
        Reply::sse()
            .event(started())
            .events(text("m1", &["I found 15 temp files."]))
            .events(ag_ui::call(
                "call_confirm_1",
                "confirmAction",
                &[r#"{"action":"delete the temp files"}"#],
            ))
            .event(finished()),
        ag_ui::text_run("m2", then),
    ])
    .await
}

#[tokio::test]
async fn a2a_to_agui_confirm_action_is_offered_asked_as_input_required_and_answered_as_the_tools_result(
) {
    let upstream = agent_asking_confirm_action(&["Deleted them."]).await;
    let proxy = a2a_to_agui(&upstream).await;
    let url = proxy.url(PATH);

    let paused = a2a::stream_to_end(&url, a2a::message("Clean up")).await;

    let status = a2a::final_status(&paused);
    assert_eq!(status["state"], "input-required", "{paused:#?}");
    assert_eq!(
        a2a::status_text(status),
        "Approve: delete the temp files? Answer yes or no."
    );
    let first = upstream.received()[0].body.clone();
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        offered,
        ["confirmAction", "ask_user"],
        "offered to the agent"
    );

    let done =
        a2a::stream_to_end(&url, a2a::answer_to(paused.last().unwrap(), "yes, approve")).await;

    assert_eq!(a2a::streamed_text(&done), "Deleted them.");
    assert_eq!(a2a::final_status(&done)["state"], "completed");
    let second = &upstream.received()[1].body;
    let messages = second["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 2]["role"], "assistant");
    assert_eq!(messages[n - 2]["toolCalls"][0]["id"], "call_confirm_1");
    assert_eq!(
        messages[n - 2]["toolCalls"][0]["function"]["name"],
        "confirmAction"
    );
    assert_eq!(messages[n - 1]["role"], "tool");
    assert_eq!(messages[n - 1]["toolCallId"], "call_confirm_1");
    assert_eq!(messages[n - 1]["content"], r#"{"approved":true}"#);
    assert!(
        second["resume"].as_array().is_none_or(Vec::is_empty),
        "answered as the tool's result, not as resume: {second}"
    );
}

#[tokio::test]
async fn a2a_to_agui_a_rejected_confirm_action_reaches_the_agent_as_approved_false() {
    let upstream = agent_asking_confirm_action(&["Kept them."]).await;
    let proxy = a2a_to_agui(&upstream).await;
    let url = proxy.url(PATH);
    let paused = a2a::stream_to_end(&url, a2a::message("Clean up")).await;

    let done = a2a::stream_to_end(
        &url,
        a2a::answer_to(paused.last().unwrap(), "no, keep them"),
    )
    .await;

    assert_eq!(a2a::streamed_text(&done), "Kept them.");
    let messages = upstream.received()[1].body["messages"].clone();
    let answer = messages.as_array().unwrap().last().unwrap().clone();
    assert_eq!(answer["toolCallId"], "call_confirm_1");
    assert_eq!(
        answer["content"],
        r#"{"approved":false,"reason":"no, keep them"}"#
    );
}
