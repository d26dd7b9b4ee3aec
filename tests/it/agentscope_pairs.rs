//! The AgentScope pairs through the real server on a real socket, one test per behaviour: AgentScope -> AG-UI,
//! AG-UI -> AgentScope, AgentScope -> A2A, A2A -> AgentScope, AgentScope -> AgentScope and AgentScope -> echo,
//! each across text, server-side tool calls, turns of one conversation, human in the loop, client tools,
//! upstream failure and client disconnect.
//!
//! AgentScope upstreams are scripted runtimes (`support::agentscope::runtime`) streaming like
//! agentscope-runtime 1.1.6.post2; AgentScope clients read the stream with `support::agentscope` and every
//! stream must keep the runtime's lifecycle (sequence numbers from 0, created → in_progress → one terminal
//! response). Every AG-UI stream the proxy serves must pass the AG-UI conservative profile.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::a2a::{self, Agent};
use crate::support::ag_ui::{self, finished, started};
use crate::support::agentscope::{self as scope, Run};
use crate::support::{Proxy, Reply, Route, Upstream};

const PATH: &str = "/agents/pair";

/// A route from `inbound` to `outbound` at [`PATH`].
fn route(inbound: &str, outbound: &str, upstream: Option<&str>) -> Route {
    let route = Route::new("pair", PATH, inbound, outbound).upstream_if(upstream);
    pause_as_tool_calls(inbound, route)
}

async fn proxy(inbound: &str, outbound: &str, upstream: Option<&str>) -> Proxy {
    Proxy::start(route(inbound, outbound, upstream)).await
}

/// The AG-UI clients here answer pauses as calls of `confirmAction` / `ask_user` without declaring those
/// tools (as frontends before outcome interrupts did): their routes pin the tool mode.
fn pause_as_tool_calls(inbound: &str, route: Route) -> Route {
    if inbound == "ag-ui" {
        route.translate("agui_interrupts", "tool")
    } else {
        route
    }
}

/// The AgentScope inbound's `/process` URL.
fn process(proxy: &Proxy) -> String {
    proxy.url(&format!("{PATH}/process"))
}

/// An AgentScope request asking about the weather.
fn weather(session: &str) -> Value {
    scope::request(session, json!([scope::user("msg_u1", "Weather in Paris?")]))
}

/// What a scripted AG-UI upstream sends for a server-side call of `get_weather` and its result.
fn agui_weather_call() -> Vec<Value> {
    let mut events = ag_ui::call("call_1", "get_weather", &["{\"city\":", "\"Paris\"}"]);
    events.push(
        json!({"type": "TOOL_CALL_RESULT", "messageId": "res_1", "toolCallId": "call_1",
                       "content": "sunny"}),
    );
    events
}

/// An AG-UI upstream's pause: `RUN_FINISHED` with an interrupt outcome asking `question`.
fn agui_interrupt(id: &str, question: &str) -> Value {
    json!({"type": "RUN_FINISHED", "threadId": "upstream-thread", "runId": "upstream-run",
           "outcome": {"type": "interrupt", "interrupts": [{"id": id, "reason": "input", "message": question}]}})
}

/// A runtime run asking to approve a shell command.
fn shell_approval() -> Run {
    Run::new()
        .approval_request("apr_1", "Shell", &json!({"command": "rm -rf ./old-logs"}))
        .completed()
}

/// The plugin call, its output and the text a weather-tool runtime streams.
fn weather_tool_run() -> Run {
    Run::new()
        .plugin_call(
            "call_1",
            "get_weather",
            &["{\"city\": \"Par", "{\"city\": \"Paris\"}"],
        )
        .plugin_output("call_1", "get_weather", "sunny")
        .text(&["It is ", "sunny."])
        .completed()
}

/// The `data` of every streamed content of the message `id`, in order.
fn streamed_data(events: &[Value], id: &Value) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["object"] == "content" && &e["msg_id"] == id)
        .map(|e| e["data"].clone())
        .collect()
}

/// The `arguments` of every streamed content of the tool call `call`, in order.
fn streamed_arguments(events: &[Value], call: &Value) -> Vec<Value> {
    streamed_data(events, &call["id"])
        .into_iter()
        .map(|d| d["arguments"].clone())
        .collect()
}

// --- AgentScope -> AG-UI -------------------------------------------------------------------------------------

#[tokio::test]
async fn agentscope_to_agui_streams_the_text_in_order() {
    let upstream = ag_ui::text_run("m1", &["The weather ", "in Paris ", "is sunny."])
        .serve()
        .await;
    let proxy = proxy("agentscope", "ag-ui", Some(&upstream.url())).await;

    let events = scope::run(&process(&proxy), &weather("s-1")).await;

    assert_eq!(
        scope::deltas(&events),
        ["The weather ", "in Paris ", "is sunny."]
    );
    assert_eq!(scope::status(&events), "completed");
    assert_eq!(scope::text(&events), "The weather in Paris is sunny.");
    assert_eq!(scope::only(&events, "message")["role"], "assistant");
}

#[tokio::test]
async fn agentscope_to_agui_server_tool_call_is_a_plugin_call_with_its_output_then_text() {
    let upstream = Reply::sse()
        .event(started())
        .events(agui_weather_call())
        .events(ag_ui::text("m1", &["It is sunny."]))
        .event(finished())
        .serve()
        .await;
    let proxy = proxy("agentscope", "ag-ui", Some(&upstream.url())).await;

    let events = scope::run(&process(&proxy), &weather("s-2")).await;

    assert_eq!(
        scope::kinds(&events),
        ["plugin_call", "plugin_call_output", "message"]
    );
    let call = scope::only(&events, "plugin_call");
    assert_eq!(
        scope::data(&call),
        &json!({"call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"})
    );
    let arguments = streamed_arguments(&events, &call);
    assert_eq!(
        arguments.first(),
        Some(&json!("")),
        "the call starts with no arguments"
    );
    assert!(
        arguments.contains(&json!("{\"city\":")),
        "each content carries the whole arguments so far: {arguments:?}"
    );
    let output = scope::only(&events, "plugin_call_output");
    assert_eq!(output["role"], "tool");
    assert_eq!(scope::data(&output)["call_id"], "call_1");
    assert_eq!(scope::data(&output)["output"], "sunny");
    assert_eq!(scope::text(&events), "It is sunny.");
}

#[tokio::test]
async fn agentscope_to_agui_second_turn_sends_the_agent_the_full_history() {
    let upstream = Upstream::serve([
        ag_ui::text_run("m1", &["Sunny."]),
        ag_ui::text_run("m2", &["Rain."]),
    ])
    .await;
    let proxy = proxy("agentscope", "ag-ui", Some(&upstream.url())).await;
    let url = process(&proxy);
    let first = weather("s-3");
    let events = scope::run(&url, &first).await;

    let second = scope::next_request(&first, &events, [scope::user("msg_u2", "And tomorrow?")]);
    let events = scope::run(&url, &second).await;

    assert_eq!(scope::text(&events), "Rain.");
    let received = upstream.received();
    let history: Vec<(&str, &str)> = received[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        history,
        [
            ("user", "Weather in Paris?"),
            ("assistant", "Sunny."),
            ("user", "And tomorrow?")
        ]
    );
    assert_eq!(received[0].body["threadId"], received[1].body["threadId"]);
}

#[tokio::test]
async fn agentscope_to_agui_second_turn_after_a_tool_call_carries_the_call_and_its_result() {
    let upstream = Upstream::serve([
        Reply::sse()
            .event(started())
            .events(agui_weather_call())
            .events(ag_ui::text("m1", &["It is sunny."]))
            .event(finished()),
        ag_ui::text_run("m2", &["Rain tomorrow."]),
    ])
    .await;
    let proxy = proxy("agentscope", "ag-ui", Some(&upstream.url())).await;
    let url = process(&proxy);
    let first = weather("s-9");
    let events = scope::run(&url, &first).await;

    let second = scope::next_request(&first, &events, [scope::user("msg_u2", "And tomorrow?")]);
    let events = scope::run(&url, &second).await;

    assert_eq!(scope::text(&events), "Rain tomorrow.");
    let messages = upstream.received()[1].body["messages"]
        .as_array()
        .unwrap()
        .clone();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant", "user"],
        "{messages:#?}"
    );
    assert_eq!(messages[1]["toolCalls"][0]["id"], "call_1");
    assert_eq!(
        messages[1]["toolCalls"][0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(messages[2]["toolCallId"], "call_1");
    assert_eq!(messages[2]["content"], "sunny");
    assert_eq!(messages[3]["content"], "It is sunny.");
}

#[tokio::test]
async fn agentscope_to_agui_interrupt_is_an_approval_request_answered_by_mcp_approval_response() {
    let upstream = Upstream::serve([
        Reply::sse()
            .event(started())
            .event(agui_interrupt("int-1", "Which city?")),
        ag_ui::text_run("m2", &["Paris is sunny."]),
    ])
    .await;
    let proxy = proxy("agentscope", "ag-ui", Some(&upstream.url())).await;
    let url = process(&proxy);
    let first = scope::request("s-4", json!([scope::user("msg_u1", "Weather?")]));

    let events = scope::run(&url, &first).await;
    assert_eq!(scope::status(&events), "completed");
    let request = scope::only(&events, "mcp_approval_request");
    assert_eq!(request["metadata"]["prompt"], "Which city?");
    let data = scope::data(&request);
    assert_eq!(data["name"], "ask_user");
    assert_eq!(data["id"], "int-1");

    let second = scope::next_request(
        &first,
        &events,
        [scope::approval_response("int-1", true, Some("Paris"))],
    );
    let events = scope::run(&url, &second).await;

    assert_eq!(scope::text(&events), "Paris is sunny.");
    let sent = &upstream.received()[1].body;
    assert_eq!(
        sent["resume"],
        json!([{"interruptId": "int-1", "status": "resolved", "payload": "Paris"}])
    );
    let roles: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user"],
        "the answer is the resume, not a message: {sent}"
    );
}

#[tokio::test]
async fn agentscope_to_agui_client_tool_is_a_function_call_and_its_output_returns_as_a_tool_message(
) {
    let upstream = Upstream::serve([
        Reply::sse()
            .event(started())
            .events(ag_ui::call(
                "call_bg",
                "change_background",
                &["{\"color\":", "\"blue\"}"],
            ))
            .event(finished()),
        ag_ui::text_run("m2", &["Done, it is blue."]),
    ])
    .await;
    let proxy = proxy("agentscope", "ag-ui", Some(&upstream.url())).await;
    let url = process(&proxy);
    let first = scope::make_it_blue("s-5");

    let events = scope::run(&url, &first).await;
    assert_eq!(scope::status(&events), "completed");
    assert_eq!(scope::kinds(&events), ["function_call"]);
    let call = scope::only(&events, "function_call");
    assert_eq!(scope::data(&call)["call_id"], "call_bg");
    assert_eq!(scope::data(&call)["name"], "change_background");
    assert_eq!(scope::data(&call)["arguments"], "{\"color\":\"blue\"}");

    let second = scope::background_changed(&first, &events);
    let events = scope::run(&url, &second).await;

    assert_eq!(scope::text(&events), "Done, it is blue.");
    let received = upstream.received();
    assert_eq!(received[0].body["tools"][0]["name"], "change_background");
    let messages = received[1].body["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["toolCalls"][0]["id"], "call_bg");
    assert_eq!(
        messages[1]["toolCalls"][0]["function"]["name"],
        "change_background"
    );
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["toolCallId"], "call_bg");
    assert_eq!(messages[2]["content"], "done");
}

#[tokio::test]
async fn agentscope_to_agui_run_error_mid_stream_is_one_failed_response() {
    let upstream = Reply::sse()
        .event(started())
        .events(ag_ui::text("m1", &["Half an "]))
        .event(json!({"type": "RUN_ERROR", "message": "quota exhausted", "code": "RATE_LIMITED"}))
        .serve()
        .await;
    let proxy = proxy("agentscope", "ag-ui", Some(&upstream.url())).await;

    let events = scope::run(&process(&proxy), &weather("s-6")).await;

    assert_eq!(scope::deltas(&events), ["Half an "]);
    assert_eq!(
        scope::error(&events),
        &json!({"code": "RATE_LIMITED", "message": "quota exhausted"})
    );
    assert_eq!(scope::terminal(&events)["completed_at"], Value::Null);
}

#[tokio::test]
async fn agentscope_to_agui_unreachable_agent_is_a_failed_response() {
    let refused = Upstream::refused_url().await;
    let proxy = proxy("agentscope", "ag-ui", Some(&refused)).await;

    let events = scope::run(&process(&proxy), &weather("s-7")).await;

    assert_eq!(events.len(), 3, "created, in_progress, failed: {events:#?}");
    let error = scope::error(&events);
    assert_eq!(error["code"], "UPSTREAM_UNREACHABLE");
    assert!(
        error["message"].as_str().unwrap().contains(&refused),
        "{error}"
    );
}

// --- AG-UI -> AgentScope -------------------------------------------------------------------------------------

#[tokio::test]
async fn agui_to_agentscope_run_starts_when_the_runtime_does_not_at_its_first_words() {
    let runtime = scope::runtime([Run::new().gate().text(&["Sunny."]).completed()]).await;
    let proxy = proxy("ag-ui", "agentscope", Some(&runtime.url())).await;
    let input = ag_ui::input(
        "thread-1",
        "run-1",
        json!([ag_ui::user("u1", "Weather in Paris?")]),
    );

    // The runtime is held at its gate after `created` and `in_progress`.
    let events = ag_ui::run_starting_before(&proxy.url(PATH), &input, || runtime.release()).await;
    assert_eq!(ag_ui::text_of(&events), "Sunny.");
}

#[tokio::test]
async fn agui_to_agentscope_plugin_call_and_output_are_a_tool_call_and_result_then_text() {
    let runtime = scope::runtime([weather_tool_run()]).await;
    let proxy = proxy("ag-ui", "agentscope", Some(&runtime.url())).await;

    let run = ag_ui::input(
        "thread-2",
        "run-1",
        json!([ag_ui::user("u1", "Weather in Paris?")]),
    );
    let events = ag_ui::run(&proxy.url(PATH), &run).await;

    assert_eq!(
        ag_ui::calls(&events),
        [(
            "call_1".to_owned(),
            "get_weather".to_owned(),
            json!({"city": "Paris"})
        )],
        "replaced snapshots add up to the final arguments"
    );
    let result = ag_ui::only(&events, "TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], "call_1");
    assert_eq!(result["content"], "sunny");
    assert_eq!(ag_ui::text_of(&events), "It is sunny.");
    let kinds = ag_ui::types(&events);
    let result_at = kinds.iter().position(|k| *k == "TOOL_CALL_RESULT").unwrap();
    let text_at = kinds
        .iter()
        .position(|k| *k == "TEXT_MESSAGE_START")
        .unwrap();
    assert!(result_at < text_at, "the result, then the text: {kinds:?}");
}

#[tokio::test]
async fn agui_to_agentscope_second_turn_sends_the_full_history_in_one_session() {
    let runtime = scope::sunny_then_rain().await;
    let proxy = proxy("ag-ui", "agentscope", Some(&runtime.url())).await;
    let url = proxy.url(PATH);
    let first = ag_ui::input(
        "thread-3",
        "run-1",
        json!([ag_ui::user("u1", "Weather in Paris?")]),
    );
    let events = ag_ui::run(&url, &first).await;
    let reply_id = ag_ui::only(&events, "TEXT_MESSAGE_START")["messageId"].clone();

    let second = ag_ui::input(
        "thread-3",
        "run-2",
        json!([ag_ui::user("u1", "Weather in Paris?"),
               {"id": reply_id, "role": "assistant", "content": "Sunny."},
               ag_ui::user("u2", "And tomorrow?")]),
    );
    assert_eq!(ag_ui::text_of(&ag_ui::run(&url, &second).await), "Rain.");

    assert_eq!(
        scope::summary(&scope::input_of(&runtime, 1)),
        scope::sunny_then_tomorrow()
    );
    let received = runtime.received();
    assert_eq!(
        received[0].body["session_id"],
        received[1].body["session_id"]
    );
    assert_eq!(received[0].body["user_id"], received[1].body["user_id"]);
}

/// An AG-UI client's second run answering the `confirmAction` call of `events` with `answer`.
fn confirm(first: &Value, events: &[Value], answer: &str) -> Value {
    let (call_id, name, args) = ag_ui::calls(events).remove(0);
    assert_eq!(name, "confirmAction");
    let mut second = first.clone();
    second["runId"] = json!("run-2");
    second["messages"] = json!([
        first["messages"][0],
        ag_ui::assistant_call("a1", &call_id, &name, &args.to_string()),
        ag_ui::tool_result("t1", &call_id, answer),
    ]);
    second
}

#[tokio::test]
async fn agui_to_agentscope_approval_approved_by_the_confirm_action_answer() {
    let runtime = scope::runtime([
        shell_approval(),
        Run::new().text(&["Cleaned up."]).completed(),
    ])
    .await;
    let proxy = proxy("ag-ui", "agentscope", Some(&runtime.url())).await;
    let url = proxy.url(PATH);
    let first = ag_ui::input(
        "thread-4",
        "run-1",
        json!([ag_ui::user("u1", "Clean the logs")]),
    );
    let events = ag_ui::run(&url, &first).await;
    assert_eq!(ag_ui::calls(&events)[0].2["tool"], "Shell");

    let events = ag_ui::run(&url, &confirm(&first, &events, "{\"approved\": true}")).await;

    assert_eq!(ag_ui::text_of(&events), "Cleaned up.");
    let input = scope::input_of(&runtime, 1);
    let kinds = scope::input_types(&input);
    assert_eq!(
        kinds,
        ["message", "mcp_approval_request", "mcp_approval_response"]
    );
    assert_eq!(scope::data(&input[2])["approval_request_id"], "apr_1");
    assert_eq!(scope::data(&input[2])["approve"], true);
}

#[tokio::test]
async fn agui_to_agentscope_approval_rejected_by_the_confirm_action_answer() {
    let runtime = scope::runtime([
        shell_approval(),
        Run::new().text(&["Left alone."]).completed(),
    ])
    .await;
    let proxy = proxy("ag-ui", "agentscope", Some(&runtime.url())).await;
    let url = proxy.url(PATH);
    let first = ag_ui::input(
        "thread-5",
        "run-1",
        json!([ag_ui::user("u1", "Clean the logs")]),
    );
    let events = ag_ui::run(&url, &first).await;

    let answer = "{\"approved\": false, \"reason\": \"keep them\"}";
    let events = ag_ui::run(&url, &confirm(&first, &events, answer)).await;

    assert_eq!(ag_ui::text_of(&events), "Left alone.");
    let input = scope::input_of(&runtime, 1);
    let response = scope::data(input.last().unwrap());
    assert_eq!(response["approval_request_id"], "apr_1");
    assert_eq!(response["approve"], false);
    assert_eq!(response["reason"], "keep them");
}

#[tokio::test]
async fn agui_to_agentscope_failed_response_mid_stream_is_one_run_error() {
    let runtime = scope::runtime([Run::new().text(&["Half an "]).failed(
        "AGENT_UNKNOWN_ERROR",
        "Unknown agent error: ValueError: boom",
    )])
    .await;
    let proxy = proxy("ag-ui", "agentscope", Some(&runtime.url())).await;

    let run = ag_ui::input("thread-6", "run-1", json!([ag_ui::user("u1", "boom")]));
    let events = ag_ui::run(&proxy.url(PATH), &run).await;

    assert_eq!(ag_ui::text_of(&events), "Half an ");
    let error = ag_ui::run_error(&events);
    assert_eq!(error["code"], "AGENT_UNKNOWN_ERROR");
    assert_eq!(error["message"], "Unknown agent error: ValueError: boom");
}

// --- AgentScope -> A2A ---------------------------------------------------------------------------------------

#[tokio::test]
async fn agentscope_to_a2a_artifact_chunks_stream_as_text_in_order() {
    let task = a2a::task("task-1", "ctx-up-1");
    let agent = Agent::new()
        .on(
            "message/stream",
            task.streams(&["The weather ", "in Paris ", "is sunny."]),
        )
        .serve()
        .await;
    let proxy = proxy("agentscope", "a2a", Some(&agent.url())).await;

    let events = scope::run(&process(&proxy), &weather("s-a1")).await;

    assert_eq!(
        scope::deltas(&events),
        ["The weather ", "in Paris ", "is sunny."]
    );
    assert_eq!(scope::status(&events), "completed");
    assert_eq!(scope::text(&events), "The weather in Paris is sunny.");
}

#[tokio::test]
async fn agentscope_to_a2a_second_turn_sends_only_the_new_message_in_the_agents_context() {
    let agent = a2a::sunny_then_rain("task-1", "task-2").await;
    let proxy = proxy("agentscope", "a2a", Some(&agent.url())).await;
    let url = process(&proxy);
    let one = weather("s-a2");
    let events = scope::run(&url, &one).await;

    let two = scope::next_request(&one, &events, [scope::user("msg_u2", "And tomorrow?")]);
    let events = scope::run(&url, &two).await;

    assert_eq!(scope::text(&events), "Rain.");
    let calls = a2a::calls(&agent, "message/stream");
    assert_eq!(calls.len(), 2);
    assert!(a2a::sent_message(&calls[0]).get("contextId").is_none());
    let message = a2a::sent_message(&calls[1]);
    assert_eq!(
        message["contextId"], "ctx-up-1",
        "the agent's context is kept"
    );
    assert!(message.get("taskId").is_none(), "a new task in it");
    assert_eq!(
        message["parts"],
        json!([{"kind": "text", "text": "And tomorrow?"}]),
        "only the new message: the agent keeps the history"
    );
}

#[tokio::test]
async fn agentscope_session_memory_keeps_the_agents_context_when_clients_send_only_new_messages() {
    // The shipped client's `create_simple_text_request`: each request holds only the new message.
    let agent = a2a::sunny_then_rain("task-1", "task-2").await;
    let route = route("agentscope", "a2a", Some(&agent.url()));
    let proxy = Proxy::start(route.translate("agentscope_session_memory", true)).await;
    let url = process(&proxy);
    scope::run(&url, &weather("s-mem")).await;

    let only_new = scope::request("s-mem", json!([scope::user("msg_u2", "And tomorrow?")]));
    let events = scope::run(&url, &only_new).await;

    assert_eq!(scope::text(&events), "Rain.");
    let calls = a2a::calls(&agent, "message/stream");
    let message = a2a::sent_message(&calls[1]);
    assert_eq!(message["contextId"], "ctx-up-1", "the conversation goes on");
    assert_eq!(
        message["parts"],
        json!([{"kind": "text", "text": "And tomorrow?"}])
    );
}

#[tokio::test]
async fn agentscope_to_a2a_input_required_is_answered_by_mcp_approval_response_on_the_task() {
    let agent = a2a::asking_agent().await;
    let proxy = proxy("agentscope", "a2a", Some(&agent.url())).await;
    let url = process(&proxy);
    let first = scope::request("s-a3", json!([scope::user("msg_u1", "Weather?")]));

    let events = scope::run(&url, &first).await;
    assert_eq!(scope::status(&events), "completed");
    let request = scope::only(&events, "mcp_approval_request");
    assert_eq!(request["metadata"]["prompt"], "Which city?");
    assert_eq!(request["metadata"]["interrupt"], "input_required");
    let id = scope::data(&request)["id"].as_str().unwrap().to_owned();

    let second = scope::next_request(
        &first,
        &events,
        [scope::approval_response(&id, true, Some("Paris"))],
    );
    let events = scope::run(&url, &second).await;

    assert_eq!(scope::text(&events), "Paris is sunny.");
    let calls = a2a::calls(&agent, "message/stream");
    assert_eq!(calls.len(), 2);
    let answer = a2a::sent_message(&calls[1]);
    assert_eq!(answer["taskId"], "task-1", "the paused task continues");
    assert_eq!(answer["contextId"], "ctx-up-1");
    assert_eq!(answer["parts"], json!([{"kind": "text", "text": "Paris"}]));
}

#[tokio::test]
async fn agentscope_to_a2a_client_tools_are_not_offered_to_the_agent() {
    let task = a2a::task("task-1", "ctx-up-1");
    let agent = Agent::new()
        .on("message/stream", task.streams(&["I cannot paint."]))
        .serve()
        .await;
    let proxy = proxy("agentscope", "a2a", Some(&agent.url())).await;
    let body = scope::make_it_blue("s-a4");

    let events = scope::run(&process(&proxy), &body).await;

    assert_eq!(scope::text(&events), "I cannot paint.");
    let call = agent.only_request();
    assert!(
        !call.body.to_string().contains("change_background"),
        "an A2A agent cannot be offered client tools: {}",
        call.body
    );
    assert_eq!(a2a::message_text(a2a::sent_message(&call)), "Make it blue");
}

#[tokio::test]
async fn agentscope_to_a2a_failed_task_mid_stream_is_one_failed_response() {
    let agent = a2a::failing_after_half_an_answer().await;
    let proxy = proxy("agentscope", "a2a", Some(&agent.url())).await;

    let events = scope::run(&process(&proxy), &weather("s-a5")).await;

    assert_eq!(scope::deltas(&events), ["Half an "]);
    assert_eq!(
        scope::error(&events),
        &json!({"code": "failed", "message": "The weather service is down."})
    );
}

#[tokio::test]
async fn agentscope_to_a2a_client_disconnect_cancels_the_agents_task() {
    let agent = a2a::thinking_forever("task-1").await;
    let proxy = proxy("agentscope", "a2a", Some(&agent.url())).await;
    let mut stream = scope::start(&process(&proxy), &weather("s-a7")).await;
    while stream.next().await.expect("the run goes on")["object"] != "content" {}
    assert!(a2a::calls(&agent, "tasks/cancel").is_empty());

    drop(stream);

    let cancel = a2a::wait_for_call(&agent, "tasks/cancel").await;
    assert_eq!(cancel.body["params"], json!({"id": "task-1"}));
    assert!(
        agent.client_left_within(Duration::from_secs(5)).await,
        "the upstream stream is closed too"
    );
}

// --- A2A -> AgentScope ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a2a_to_agentscope_second_turn_sends_the_conversation_log_in_one_session() {
    let runtime = scope::sunny_then_rain().await;
    let proxy = proxy("a2a", "agentscope", Some(&runtime.url())).await;
    let url = proxy.url(PATH);

    a2a::stream_to_end(&url, a2a::message_in("ctx-client-1", "Weather in Paris?")).await;
    let two = a2a::stream_to_end(&url, a2a::message_in("ctx-client-1", "And tomorrow?")).await;

    assert_eq!(a2a::streamed_text(&two), "Rain.");
    assert_eq!(
        scope::summary(&scope::input_of(&runtime, 1)),
        scope::sunny_then_tomorrow(),
        "a full-history upstream gets the conversation so far"
    );
    let received = runtime.received();
    assert_eq!(
        received[0].body["session_id"],
        received[1].body["session_id"]
    );
}

/// Runs an approval round trip from an A2A client answering `answer`; returns the runtime's second input.
async fn a2a_approval_answered(answer: &str) -> Vec<Value> {
    let runtime = scope::runtime([shell_approval(), Run::new().text(&["Done."]).completed()]).await;
    let proxy = proxy("a2a", "agentscope", Some(&runtime.url())).await;
    let url = proxy.url(PATH);
    let paused = a2a::stream_to_end(&url, a2a::message("Clean the logs")).await;
    let status = a2a::final_status(&paused);
    assert_eq!(status["state"], "input-required");
    assert!(a2a::status_text(status).contains("Shell"), "{status}");

    let resumed = a2a::stream_to_end(&url, a2a::answer_to(paused.last().unwrap(), answer)).await;

    assert_eq!(resumed[0]["id"], paused.last().unwrap()["taskId"]);
    assert_eq!(a2a::streamed_text(&resumed), "Done.");
    scope::input_of(&runtime, 1)
}

#[tokio::test]
async fn a2a_to_agentscope_approval_approved_by_a_message_on_the_paused_task() {
    let input = a2a_approval_answered("yes").await;

    let kinds = scope::input_types(&input);
    assert_eq!(
        kinds,
        ["message", "mcp_approval_request", "mcp_approval_response"]
    );
    assert_eq!(scope::data(&input[1])["id"], "apr_1");
    assert_eq!(scope::data(&input[2])["approval_request_id"], "apr_1");
    assert_eq!(scope::data(&input[2])["approve"], true);
}

#[tokio::test]
async fn a2a_to_agentscope_failed_response_fails_the_task_with_its_message() {
    let runtime = scope::runtime([Run::new().text(&["Half an "]).failed(
        "AGENT_UNKNOWN_ERROR",
        "Unknown agent error: ValueError: boom",
    )])
    .await;
    let proxy = proxy("a2a", "agentscope", Some(&runtime.url())).await;

    let results = a2a::stream_to_end(&proxy.url(PATH), a2a::message("boom")).await;

    let status = a2a::final_status(&results);
    assert_eq!(status["state"], "failed");
    let why = a2a::status_text(status);
    assert!(why.contains("ValueError: boom"), "{why}");
    assert!(why.contains("AGENT_UNKNOWN_ERROR"), "{why}");
}

#[tokio::test]
async fn a2a_to_agentscope_bare_error_frame_fails_the_task() {
    let runtime =
        scope::runtime([Run::bare_error("Task u1:s1 is already in RUNNING state.")]).await;
    let proxy = proxy("a2a", "agentscope", Some(&runtime.url())).await;

    let results = a2a::stream_to_end(&proxy.url(PATH), a2a::message("Hi")).await;

    let status = a2a::final_status(&results);
    assert_eq!(status["state"], "failed");
    assert!(
        a2a::status_text(status).contains("already in RUNNING state"),
        "{status}"
    );
}

// --- AgentScope -> AgentScope --------------------------------------------------------------------------------

#[tokio::test]
async fn agentscope_to_agentscope_streams_the_text_in_order() {
    let runtime = scope::runtime([Run::new()
        .text(&["The weather ", "in Paris ", "is sunny."])
        .completed()])
    .await;
    let proxy = proxy("agentscope", "agentscope", Some(&runtime.url())).await;

    let events = scope::run(&process(&proxy), &weather("s-s1")).await;

    assert_eq!(
        scope::deltas(&events),
        ["The weather ", "in Paris ", "is sunny."]
    );
    assert_eq!(scope::text(&events), "The weather in Paris is sunny.");
    assert_eq!(scope::status(&events), "completed");
}

#[tokio::test]
async fn agentscope_to_agentscope_plugin_call_and_output_pass_through_then_text() {
    let runtime = scope::runtime([weather_tool_run()]).await;
    let proxy = proxy("agentscope", "agentscope", Some(&runtime.url())).await;

    let events = scope::run(&process(&proxy), &weather("s-s2")).await;

    assert_eq!(
        scope::kinds(&events),
        ["plugin_call", "plugin_call_output", "message"]
    );
    let call = scope::only(&events, "plugin_call");
    assert_eq!(
        scope::data(&call),
        &json!({"call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"})
    );
    let arguments = streamed_arguments(&events, &call);
    assert_eq!(arguments.first(), Some(&json!("")));
    assert_eq!(arguments.last(), Some(&json!("{\"city\": \"Paris\"}")));
    assert_eq!(
        scope::data(&scope::only(&events, "plugin_call_output"))["output"],
        "sunny"
    );
    assert_eq!(scope::text(&events), "It is sunny.");
}

#[tokio::test]
async fn agentscope_to_agentscope_second_turn_sends_the_full_history_in_the_upstreams_own_session()
{
    let runtime = scope::sunny_then_rain().await;
    let proxy = proxy("agentscope", "agentscope", Some(&runtime.url())).await;
    let url = process(&proxy);
    let first = weather("s-s3");
    let events = scope::run(&url, &first).await;

    let second = scope::next_request(&first, &events, [scope::user("msg_u2", "And tomorrow?")]);
    let events = scope::run(&url, &second).await;

    assert_eq!(scope::text(&events), "Rain.");
    assert_eq!(
        scope::summary(&scope::input_of(&runtime, 1)),
        scope::sunny_then_tomorrow()
    );
    let received = runtime.received();
    let session = &received[0].body["session_id"];
    assert!(session.as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(
        &received[1].body["session_id"], session,
        "one session per conversation"
    );
    assert_eq!(received[0].body["user_id"], received[1].body["user_id"]);
}

#[tokio::test]
async fn agentscope_to_agentscope_second_turn_after_a_tool_call_carries_the_call_and_its_output() {
    let runtime = scope::runtime([
        weather_tool_run(),
        Run::new().text(&["Rain tomorrow."]).completed(),
    ])
    .await;
    let proxy = proxy("agentscope", "agentscope", Some(&runtime.url())).await;
    let url = process(&proxy);
    let first = weather("s-s12");
    let events = scope::run(&url, &first).await;

    let second = scope::next_request(&first, &events, [scope::user("msg_u2", "And tomorrow?")]);
    let events = scope::run(&url, &second).await;

    assert_eq!(scope::text(&events), "Rain tomorrow.");
    let input = scope::input_of(&runtime, 1);
    let kinds = scope::input_types(&input);
    assert_eq!(
        kinds,
        [
            "message",
            "function_call",
            "function_call_output",
            "message",
            "message"
        ]
    );
    assert_eq!(
        scope::data(&input[1]),
        &json!({"call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"})
    );
    assert_eq!(scope::data(&input[2])["call_id"], "call_1");
    assert_eq!(scope::data(&input[2])["output"], "sunny");
    assert_eq!(input[3]["content"][0]["text"], "It is sunny.");
    assert_eq!(input[4]["content"][0]["text"], "And tomorrow?");
}

/// Runs an approval round trip from an AgentScope client answering `approve`; returns the runtime's second
/// input.
async fn agentscope_approval_answered(session: &str, approve: bool) -> Vec<Value> {
    let runtime = scope::runtime([shell_approval(), Run::new().text(&["Done."]).completed()]).await;
    let proxy = proxy("agentscope", "agentscope", Some(&runtime.url())).await;
    let url = process(&proxy);
    let first = scope::request(session, json!([scope::user("msg_u1", "Clean the logs")]));
    let events = scope::run(&url, &first).await;
    let request = scope::only(&events, "mcp_approval_request");
    assert_eq!(scope::data(&request)["id"], "apr_1");
    assert_eq!(scope::data(&request)["name"], "Shell");
    assert_eq!(
        serde_json::from_str::<Value>(scope::data(&request)["arguments"].as_str().unwrap())
            .unwrap(),
        json!({"command": "rm -rf ./old-logs"})
    );

    let second = scope::next_request(
        &first,
        &events,
        [scope::approval_response("apr_1", approve, None)],
    );
    let events = scope::run(&url, &second).await;

    assert_eq!(scope::text(&events), "Done.");
    scope::input_of(&runtime, 1)
}

#[tokio::test]
async fn agentscope_to_agentscope_approval_approved_reaches_the_runtime_as_mcp_approval_response() {
    let input = agentscope_approval_answered("s-s4", true).await;

    let kinds = scope::input_types(&input);
    assert_eq!(
        kinds,
        ["message", "mcp_approval_request", "mcp_approval_response"]
    );
    assert_eq!(
        scope::data(&input[1]),
        &json!({"id": "apr_1", "name": "Shell", "arguments": "{\"command\":\"rm -rf ./old-logs\"}",
                "server_label": "mcp"}),
        "the runtime's own request, not the one the proxy showed its client"
    );
    assert_eq!(scope::data(&input[2])["approval_request_id"], "apr_1");
    assert_eq!(scope::data(&input[2])["approve"], true);
}

#[tokio::test]
async fn agentscope_to_agentscope_client_tool_call_and_its_output_round_trip() {
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
    let proxy = proxy("agentscope", "agentscope", Some(&runtime.url())).await;
    let url = process(&proxy);
    let first = scope::make_it_blue("s-s6");

    let events = scope::run(&url, &first).await;
    let call = scope::only(&events, "function_call");
    assert_eq!(
        scope::data(&call),
        &json!({"call_id": "call_bg", "name": "change_background", "arguments": "{\"color\": \"blue\"}"})
    );

    let second = scope::background_changed(&first, &events);
    let events = scope::run(&url, &second).await;

    assert_eq!(scope::text(&events), "Done, it is blue.");
    let received = runtime.received();
    assert_eq!(
        received[0].body["tools"][0]["function"]["name"],
        "change_background"
    );
    let input = scope::input_of(&runtime, 1);
    let kinds = scope::input_types(&input);
    assert_eq!(kinds, ["message", "function_call", "function_call_output"]);
    assert_eq!(scope::data(&input[1])["call_id"], "call_bg");
    assert_eq!(
        scope::data(&input[2]),
        &json!({"call_id": "call_bg", "name": "change_background", "output": "done"})
    );
}

#[tokio::test]
async fn agentscope_to_agentscope_failed_response_mid_stream_keeps_the_runtimes_error() {
    let runtime = scope::runtime([Run::new().text(&["Half an "]).failed(
        "AGENT_UNKNOWN_ERROR",
        "Unknown agent error: ValueError: boom",
    )])
    .await;
    let proxy = proxy("agentscope", "agentscope", Some(&runtime.url())).await;

    let events = scope::run(&process(&proxy), &weather("s-s7")).await;

    assert_eq!(scope::deltas(&events), ["Half an "]);
    assert_eq!(
        scope::error(&events),
        &json!({"code": "AGENT_UNKNOWN_ERROR", "message": "Unknown agent error: ValueError: boom"})
    );
}

#[tokio::test]
async fn agentscope_to_agentscope_bare_error_frame_is_a_failed_response() {
    let runtime =
        scope::runtime([Run::bare_error("Task u1:s1 is already in RUNNING state.")]).await;
    let proxy = proxy("agentscope", "agentscope", Some(&runtime.url())).await;

    let events = scope::run(&process(&proxy), &weather("s-s8")).await;

    assert_eq!(
        scope::error(&events),
        &json!({"code": "AGENTSCOPE_ERROR", "message": "Task u1:s1 is already in RUNNING state."})
    );
}

#[tokio::test]
async fn agentscope_to_agentscope_cut_stream_is_a_failed_response() {
    let runtime = scope::runtime([Run::new().text(&["Counting: 1, 2, "]).cut()]).await;
    let proxy = proxy("agentscope", "agentscope", Some(&runtime.url())).await;

    let events = scope::run(&process(&proxy), &weather("s-s9")).await;

    assert_eq!(scope::deltas(&events), ["Counting: 1, 2, "]);
    assert_eq!(scope::error(&events)["code"], "UPSTREAM_EOF");
}

// --- AgentScope -> echo --------------------------------------------------------------------------------------

#[tokio::test]
async fn agentscope_to_echo_ask_refused_answers_no() {
    let proxy = proxy("agentscope", "echo", None).await;
    let url = process(&proxy);
    let first = scope::request("s-e5", json!([scope::user("msg_u1", "/ask Which city?")]));
    let events = scope::run(&url, &first).await;
    let id = scope::data(&scope::only(&events, "mcp_approval_request"))["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let second = scope::next_request(
        &first,
        &events,
        [scope::approval_response(&id, false, None)],
    );
    let events = scope::run(&url, &second).await;

    assert_eq!(
        scope::text(&events),
        "You answered: no",
        "a no, not a cancel"
    );
}
