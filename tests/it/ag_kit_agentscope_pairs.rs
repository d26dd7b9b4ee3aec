//! The two AG-Kit ↔ AgentScope pairs through the real server on a real socket, one test per behaviour:
//! AG-Kit -> AgentScope (a legacy `useChat` frontend in front of an AgentScope runtime) and AgentScope ->
//! AG-Kit (a legacy v0 agent served to AgentScope clients), across text, turns of one conversation, human in
//! the loop, tool calls, upstream failure and client disconnect.
//!
//! The histories differ: AG-Kit sends deltas while an AgentScope runtime wants the whole conversation, so
//! AG-Kit -> AgentScope sends the proxy's log; an AgentScope client sends the whole conversation while a v0
//! agent keeps its own, so AgentScope -> AG-Kit sends only what the agent has not seen. The AG-Kit client is
//! `support::ag_kit::Chat`; runtimes are scripted like agentscope-runtime 1.1.6.post2 and every AgentScope
//! stream the proxy serves must keep the runtime's lifecycle (`scope::run` checks it).

use serde_json::{json, Value};

use crate::support::ag_kit::{self as kit, Chat};
use crate::support::agentscope::{self as scope, Run};
use crate::support::{Proxy, Route, Upstream};

const PATH: &str = "/agents/pair";

/// A route from `inbound` to `outbound` at [`PATH`].
async fn proxy(inbound: &str, outbound: &str, upstream: &str) -> Proxy {
    Proxy::start(Route::new("pair", PATH, inbound, outbound).upstream(upstream)).await
}

fn send_message(proxy: &Proxy) -> String {
    proxy.url(&format!("{PATH}/send-message"))
}

/// An AG-Kit route in front of the AgentScope `runtime`, and a `useChat` client of it.
async fn agkit_to_agentscope(runtime: &Upstream) -> (Proxy, Chat) {
    let proxy = proxy("ag-kit", "agentscope", &runtime.url()).await;
    let chat = Chat::new(&send_message(&proxy));
    (proxy, chat)
}

/// An AgentScope route in front of the v0 `agent`; returns it and its `/process` URL.
async fn agentscope_to_agkit(agent: &Upstream) -> (Proxy, String) {
    let proxy = proxy("agentscope", "ag-kit", &agent.url()).await;
    let process = proxy.url(&format!("{PATH}/process"));
    (proxy, process)
}

/// A runtime run asking to approve a shell command.
fn shell_approval() -> Run {
    Run::new()
        .approval_request("apr_1", "Shell", &json!({"command": "rm -rf ./old-logs"}))
        .completed()
}

/// An AgentScope request asking about the weather.
fn weather(session: &str) -> Value {
    scope::request(session, json!([scope::user("msg_u1", "Weather in Paris?")]))
}

/// The arguments a v0 stream gave the call `id`, concatenated.
fn call_arguments(events: &[&Value], id: &str) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "tool-call-args" && e["toolCallId"] == id)
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

// --- AG-Kit -> AgentScope ---------------------------------------------------------------------------------

#[tokio::test]
async fn agkit_to_agentscope_text_deltas_arrive_in_order_as_text_events() {
    let runtime = scope::runtime([Run::new()
        .text(&["The weather ", "in Paris ", "is sunny."])
        .completed()])
    .await;
    let (_proxy, mut chat) = agkit_to_agentscope(&runtime).await;

    let exchange = chat.say("Weather in Paris?").await;

    let contents: Vec<&str> = exchange
        .events()
        .filter_map(|e| e["content"].as_str())
        .collect();
    assert_eq!(
        contents,
        ["The weather ", "in Paris ", "is sunny."],
        "the completed content and message do not repeat the text"
    );
    assert!(exchange.types().iter().all(|t| *t == "text"));
    assert_eq!(
        scope::summary(&scope::input_of(&runtime, 0)),
        [("message".into(), "user".into(), json!("Weather in Paris?"))]
    );
}

#[tokio::test]
async fn agkit_to_agentscope_second_turn_sends_the_whole_conversation_in_one_session() {
    let runtime = scope::sunny_then_rain().await;
    let (_proxy, mut chat) = agkit_to_agentscope(&runtime).await;

    assert_eq!(chat.say("Weather in Paris?").await.text(), "Sunny.");
    let second = chat.say("And tomorrow?").await;

    assert_eq!(
        second.streams[0].request["messages"],
        json!([{"role": "user", "content": "And tomorrow?"}]),
        "the AG-Kit client sends only what is new"
    );
    assert_eq!(second.text(), "Rain.");
    assert_eq!(
        scope::summary(&scope::input_of(&runtime, 1)),
        scope::sunny_then_tomorrow(),
        "the runtime gets the conversation so far from the proxy's log"
    );
    let received = runtime.received();
    assert_eq!(
        received[0].body["session_id"],
        received[1].body["session_id"]
    );
    assert_eq!(received[0].body["user_id"], received[1].body["user_id"]);
}

#[tokio::test]
async fn agkit_to_agentscope_approval_request_is_an_approval_interrupt() {
    let runtime = scope::runtime([shell_approval()]).await;
    let (_proxy, mut chat) = agkit_to_agentscope(&runtime).await;

    let asked = chat.say("Clean the logs").await;

    assert_eq!(asked.types(), ["interrupt"]);
    let interrupt = asked.only("interrupt");
    assert_eq!(interrupt["id"], "apr_1");
    assert_eq!(interrupt["reason"], "approval");
    assert_eq!(interrupt["payload"]["toolName"], "Shell");
    assert_eq!(
        interrupt["payload"]["args"],
        json!({"command": "rm -rf ./old-logs"})
    );
}

#[tokio::test]
async fn agkit_to_agentscope_approved_resume_is_an_mcp_approval_response_approving_it() {
    let runtime = scope::runtime([
        shell_approval(),
        Run::new().text(&["Cleaned up."]).completed(),
    ])
    .await;
    let (_proxy, mut chat) = agkit_to_agentscope(&runtime).await;
    chat.say("Clean the logs").await;

    let answered = chat.resume(json!({"approved": true})).await;

    assert_eq!(answered.text(), "Cleaned up.");
    let input = scope::input_of(&runtime, 1);
    let kinds = scope::input_types(&input);
    assert_eq!(
        kinds,
        ["message", "mcp_approval_request", "mcp_approval_response"]
    );
    assert_eq!(input[0]["content"][0]["text"], "Clean the logs");
    assert_eq!(scope::data(&input[1])["id"], "apr_1");
    assert_eq!(scope::data(&input[2])["approval_request_id"], "apr_1");
    assert_eq!(scope::data(&input[2])["approve"], true);
}

#[tokio::test]
async fn agkit_to_agentscope_rejected_resume_is_an_mcp_approval_response_refusing_it() {
    let runtime = scope::runtime([
        shell_approval(),
        Run::new().text(&["Left alone."]).completed(),
    ])
    .await;
    let (_proxy, mut chat) = agkit_to_agentscope(&runtime).await;
    chat.say("Clean the logs").await;

    let answered = chat
        .resume(json!({"approved": false, "reason": "keep them"}))
        .await;

    assert_eq!(answered.text(), "Left alone.");
    let input = scope::input_of(&runtime, 1);
    let response = scope::data(input.last().unwrap());
    assert_eq!(response["approval_request_id"], "apr_1");
    assert_eq!(response["approve"], false);
    assert_eq!(response["reason"], "keep them");
}

#[tokio::test]
async fn agkit_to_agentscope_turn_after_an_answered_approval_does_not_answer_it_again() {
    let runtime = scope::runtime([
        shell_approval(),
        Run::new().text(&["Cleaned up."]).completed(),
        Run::new().text(&["You are welcome."]).completed(),
    ])
    .await;
    let (_proxy, mut chat) = agkit_to_agentscope(&runtime).await;
    chat.say("Clean the logs").await;
    chat.resume(json!({"approved": true})).await;

    assert_eq!(chat.say("Thanks").await.text(), "You are welcome.");

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
        ]
    );
    let received = runtime.received();
    assert_eq!(
        received[0].body["session_id"],
        received[2].body["session_id"]
    );
}

#[tokio::test]
async fn agkit_to_agentscope_plugin_call_and_output_are_tool_call_events_and_a_tool_result() {
    let runtime = scope::runtime([Run::new()
        .plugin_call(
            "call_1",
            "get_weather",
            &["{\"city\": \"Par", "{\"city\": \"Paris\"}"],
        )
        .plugin_output("call_1", "get_weather", "sunny")
        .text(&["It is ", "sunny."])
        .completed()])
    .await;
    let (_proxy, mut chat) = agkit_to_agentscope(&runtime).await;

    let exchange = chat.say("Weather in Paris?").await;

    assert_eq!(
        exchange.streams.len(),
        1,
        "a server tool: nothing to re-post"
    );
    let mut types = exchange.types();
    types.dedup();
    assert_eq!(
        types,
        [
            "tool-call-start",
            "tool-call-args",
            "tool-call-end",
            "tool-result",
            "text"
        ]
    );
    let start = exchange.only("tool-call-start");
    assert_eq!(start["toolCallId"], "call_1");
    assert_eq!(start["toolCallName"], "get_weather");
    let events: Vec<&Value> = exchange.events().collect();
    let arguments = call_arguments(&events, "call_1");
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        json!({"city": "Paris"}),
        "replaced snapshots add up to the final arguments: {arguments:?}"
    );
    let result = exchange.only("tool-result");
    assert_eq!(result["toolCallId"], "call_1");
    assert_eq!(result["result"], "sunny");
    assert_eq!(exchange.text(), "It is sunny.");
}

#[tokio::test]
async fn agkit_to_agentscope_second_turn_after_a_tool_call_carries_the_call_and_its_output() {
    let runtime = scope::runtime([
        Run::new()
            .plugin_call("call_1", "get_weather", &["{\"city\": \"Paris\"}"])
            .plugin_output("call_1", "get_weather", "sunny")
            .text(&["It is sunny."])
            .completed(),
        Run::new().text(&["Rain tomorrow."]).completed(),
    ])
    .await;
    let (_proxy, mut chat) = agkit_to_agentscope(&runtime).await;
    chat.say("Weather in Paris?").await;

    assert_eq!(chat.say("And tomorrow?").await.text(), "Rain tomorrow.");

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
        ],
        "{input:#?}"
    );
    assert_eq!(scope::data(&input[1])["call_id"], "call_1");
    assert_eq!(scope::data(&input[1])["name"], "get_weather");
    assert_eq!(
        serde_json::from_str::<Value>(scope::data(&input[1])["arguments"].as_str().unwrap())
            .unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(scope::data(&input[2])["call_id"], "call_1");
    assert_eq!(scope::data(&input[2])["output"], "sunny");
    assert_eq!(input[3]["role"], "assistant");
    assert_eq!(input[3]["content"][0]["text"], "It is sunny.");
    assert_eq!(input[4]["content"][0]["text"], "And tomorrow?");
}

#[tokio::test]
async fn agkit_to_agentscope_client_tool_call_runs_in_use_chat_and_its_result_reaches_the_runtime()
{
    let runtime = scope::runtime([
        Run::new()
            .function_call(
                "call_bg",
                "change-background-color",
                &["{\"color\": \"bl", "{\"color\": \"blue\"}"],
            )
            .completed(),
        Run::new().text(&["Done, it is blue."]).completed(),
    ])
    .await;
    let (_proxy, chat) = agkit_to_agentscope(&runtime).await;
    let mut chat = chat.tool("change-background-color", |args| {
        format!("Background color changed to: {}", args["color"])
    });

    let exchange = chat.say("Make it blue").await;

    assert_eq!(
        exchange.streams.len(),
        2,
        "useChat re-posts the tool result once"
    );
    assert_eq!(
        exchange.streams[1].request["messages"],
        json!([{"role": "tool", "content": "Background color changed to: \"blue\"", "toolCallId": "call_bg"}])
    );
    assert_eq!(exchange.text(), "Done, it is blue.");
    let offered = &runtime.received()[0].body["tools"];
    assert_eq!(offered[0]["function"]["name"], "change-background-color");
    assert_eq!(
        offered[0]["function"]["parameters"]["properties"]["color"]["type"], "string",
        "the stringified schema is offered as JSON: {offered}"
    );
    let input = scope::input_of(&runtime, 1);
    let kinds = scope::input_types(&input);
    assert_eq!(kinds, ["message", "function_call", "function_call_output"]);
    assert_eq!(scope::data(&input[1])["call_id"], "call_bg");
    assert_eq!(scope::data(&input[2])["call_id"], "call_bg");
    assert_eq!(
        scope::data(&input[2])["output"],
        "Background color changed to: \"blue\""
    );
}

#[tokio::test]
async fn agkit_to_agentscope_failed_response_after_text_is_an_error_frame_then_done() {
    let runtime = scope::runtime([Run::new().text(&["Half an "]).failed(
        "AGENT_UNKNOWN_ERROR",
        "Unknown agent error: ValueError: boom",
    )])
    .await;
    let (_proxy, mut chat) = agkit_to_agentscope(&runtime).await;

    let exchange = chat.say("boom").await;

    assert_eq!(exchange.types(), ["text", "error"]);
    assert_eq!(exchange.text(), "Half an ");
    let error = exchange.only("error");
    assert_eq!(error["code"], "AGENT_UNKNOWN_ERROR");
    assert_eq!(error["message"], "Unknown agent error: ValueError: boom");
}

#[tokio::test]
async fn agkit_to_agentscope_failed_response_before_any_text_is_an_http_502() {
    let runtime = scope::runtime([Run::new().failed(
        "AGENT_UNKNOWN_ERROR",
        "Unknown agent error: ValueError: boom",
    )])
    .await;
    let (proxy, chat) = agkit_to_agentscope(&runtime).await;

    let (status, body) = kit::refused(
        &send_message(&proxy),
        &chat.body(json!({"messages": [{"role": "user", "content": "boom"}]})),
    )
    .await;

    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "AGENT_UNKNOWN_ERROR");
    assert_eq!(
        body["error"]["message"],
        "Unknown agent error: ValueError: boom"
    );
}

// --- AgentScope -> AG-Kit ---------------------------------------------------------------------------------

#[tokio::test]
async fn agentscope_to_agkit_text_streams_in_order_as_one_assistant_message() {
    let agent = kit::reply([
        kit::text("The weather "),
        kit::text("in Paris "),
        kit::text("is sunny."),
    ])
    .serve()
    .await;
    let (_proxy, process) = agentscope_to_agkit(&agent).await;

    let events = scope::run(&process, &weather("s-1")).await;

    assert_eq!(
        scope::deltas(&events),
        ["The weather ", "in Paris ", "is sunny."]
    );
    assert_eq!(scope::status(&events), "completed");
    assert_eq!(scope::text(&events), "The weather in Paris is sunny.");
    assert_eq!(scope::only(&events, "message")["role"], "assistant");
    assert_eq!(
        kit::messages_of(&agent, 0),
        json!([{"role": "user", "content": "Weather in Paris?"}])
    );
}

#[tokio::test]
async fn agentscope_to_agkit_two_sessions_are_two_conversation_ids() {
    let agent = kit::memory_agent().await;
    let (_proxy, process) = agentscope_to_agkit(&agent).await;

    scope::run(
        &process,
        &scope::request("s-ada", json!([scope::user("msg_u1", "my name is Ada")])),
    )
    .await;
    let events = scope::run(
        &process,
        &scope::request(
            "s-other",
            json!([scope::user("msg_u1", "what is my name?")]),
        ),
    )
    .await;

    assert_eq!(scope::text(&events), "I do not know your name.");
}

#[tokio::test]
async fn agentscope_to_agkit_rewritten_history_starts_a_fresh_conversation_id() {
    let agent = kit::memory_agent().await;
    let (_proxy, process) = agentscope_to_agkit(&agent).await;
    let first = scope::request("s-12", json!([scope::user("msg_u1", "my name is Ada")]));
    scope::run(&process, &first).await;

    // The user edited the first message: the conversation the agent knows is no longer this one.
    let edited = scope::request("s-12", json!([scope::user("msg_u1b", "what is my name?")]));
    let events = scope::run(&process, &edited).await;

    assert_eq!(scope::text(&events), "I do not know your name.");
    let received = agent.received();
    assert_ne!(
        received[0].body["conversationId"],
        received[1].body["conversationId"]
    );
    assert_eq!(
        received[1].body["messages"],
        json!([{"role": "user", "content": "what is my name?"}])
    );
}

/// A v0 agent that asks to approve a shell command, then reports what it was told.
async fn approving_v0_agent() -> Upstream {
    Upstream::serve([
        kit::reply([kit::interrupt(
            "int_1",
            "approval",
            json!({"toolName": "Shell", "args": {"command": "rm -rf ./old-logs"}}),
        )]),
        kit::reply([kit::text("Cleaned up.")]),
    ])
    .await
}

#[tokio::test]
async fn agentscope_to_agkit_approval_interrupt_is_an_mcp_approval_request() {
    let agent = approving_v0_agent().await;
    let (_proxy, process) = agentscope_to_agkit(&agent).await;

    let events = scope::run(
        &process,
        &scope::request("s-3", json!([scope::user("msg_u1", "Clean the logs")])),
    )
    .await;

    assert_eq!(scope::status(&events), "completed");
    assert_eq!(scope::kinds(&events), ["mcp_approval_request"]);
    let request = scope::only(&events, "mcp_approval_request");
    assert_eq!(request["metadata"]["interrupt"], "approval");
    let data = scope::data(&request);
    assert_eq!(data["id"], "int_1");
    assert_eq!(data["name"], "Shell");
    assert_eq!(
        serde_json::from_str::<Value>(data["arguments"].as_str().unwrap()).unwrap(),
        json!({"command": "rm -rf ./old-logs"})
    );
}

#[tokio::test]
async fn agentscope_to_agkit_approval_response_is_the_v0_resume_with_approved_true() {
    let agent = approving_v0_agent().await;
    let (_proxy, process) = agentscope_to_agkit(&agent).await;
    let first = scope::request("s-4", json!([scope::user("msg_u1", "Clean the logs")]));
    let events = scope::run(&process, &first).await;

    let second = scope::next_request(
        &first,
        &events,
        [scope::approval_response("int_1", true, None)],
    );
    let events = scope::run(&process, &second).await;

    assert_eq!(scope::text(&events), "Cleaned up.");
    let received = agent.received();
    assert_eq!(received.len(), 2);
    let sent = &received[1].body;
    assert_eq!(sent["resume"]["interruptId"], "int_1");
    let payload = sent["resume"]["payload"]
        .as_str()
        .expect("the payload is JSON text");
    assert_eq!(
        serde_json::from_str::<Value>(payload).unwrap(),
        json!({"approved": true})
    );
    assert!(
        sent.get("messages").is_none(),
        "nothing new besides the answer: {sent}"
    );
    assert_eq!(sent["conversationId"], received[0].body["conversationId"]);
}

#[tokio::test]
async fn agentscope_to_agkit_refused_approval_is_the_v0_resume_with_approved_false() {
    let agent = approving_v0_agent().await;
    let (_proxy, process) = agentscope_to_agkit(&agent).await;
    let first = scope::request("s-5", json!([scope::user("msg_u1", "Clean the logs")]));
    let events = scope::run(&process, &first).await;

    let second = scope::next_request(
        &first,
        &events,
        [scope::approval_response("int_1", false, Some("keep them"))],
    );
    scope::run(&process, &second).await;

    let payload = agent.received()[1].body["resume"]["payload"]
        .as_str()
        .expect("the payload is JSON text")
        .to_owned();
    assert_eq!(
        serde_json::from_str::<Value>(&payload).unwrap(),
        json!({"approved": false, "reason": "keep them"})
    );
}

#[tokio::test]
async fn agentscope_to_agkit_turn_after_an_answered_approval_sends_only_the_new_message() {
    let agent = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_1",
            "approval",
            json!({"toolName": "Shell", "args": {"command": "rm -rf ./old-logs"}}),
        )]),
        kit::reply([kit::text("Cleaned up.")]),
        kit::reply([kit::text("You are welcome.")]),
    ])
    .await;
    let (_proxy, process) = agentscope_to_agkit(&agent).await;
    let first = scope::request("s-9", json!([scope::user("msg_u1", "Clean the logs")]));
    let events = scope::run(&process, &first).await;
    let second = scope::next_request(
        &first,
        &events,
        [scope::approval_response("int_1", true, None)],
    );
    let events = scope::run(&process, &second).await;

    let third = scope::next_request(&second, &events, [scope::user("msg_u3", "Thanks")]);
    let events = scope::run(&process, &third).await;

    assert_eq!(scope::text(&events), "You are welcome.");
    let sent = &agent.received()[2].body;
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": "Thanks"}]),
        "the earlier answer is not resent: {sent}"
    );
    assert!(sent.get("resume").is_none(), "{sent}");
}

#[tokio::test]
async fn agentscope_to_agkit_question_interrupt_is_answered_by_the_approval_reason() {
    let agent = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_q",
            "question",
            json!({"question": "Which city?", "options": []}),
        )]),
        kit::reply([kit::text("Paris is sunny.")]),
    ])
    .await;
    let (_proxy, process) = agentscope_to_agkit(&agent).await;
    let first = scope::request("s-10", json!([scope::user("msg_u1", "Weather?")]));
    let events = scope::run(&process, &first).await;
    let request = scope::only(&events, "mcp_approval_request");
    assert_eq!(request["metadata"]["interrupt"], "question");
    assert_eq!(request["metadata"]["prompt"], "Which city?");
    assert_eq!(scope::data(&request)["id"], "int_q");

    let second = scope::next_request(
        &first,
        &events,
        [scope::approval_response("int_q", true, Some("Paris"))],
    );
    let events = scope::run(&process, &second).await;

    assert_eq!(scope::text(&events), "Paris is sunny.");
    assert_eq!(
        agent.received()[1].body["resume"],
        json!({"interruptId": "int_q", "payload": "\"Paris\""})
    );
}

#[tokio::test]
async fn agentscope_to_agkit_client_tool_is_a_function_call_and_its_output_a_v0_tool_message() {
    let mut call = kit::call(
        "call_bg",
        "change_background",
        &["{\"color\":", "\"blue\"}"],
    );
    call.truncate(4);
    let agent = Upstream::serve([
        kit::reply(call),
        kit::reply([kit::text("Done, it is blue.")]),
    ])
    .await;
    let (_proxy, process) = agentscope_to_agkit(&agent).await;
    let first = scope::make_it_blue("s-11");

    let events = scope::run(&process, &first).await;
    assert_eq!(scope::kinds(&events), ["function_call"]);
    let call = scope::only(&events, "function_call");
    assert_eq!(
        scope::data(&call),
        &json!({"call_id": "call_bg", "name": "change_background", "arguments": "{\"color\":\"blue\"}"})
    );

    let second = scope::background_changed(&first, &events);
    let events = scope::run(&process, &second).await;

    assert_eq!(scope::text(&events), "Done, it is blue.");
    let received = agent.received();
    let tools = &received[0].body["tools"];
    assert_eq!(tools[0]["name"], "change_background");
    assert!(
        tools[0]["parameters"].is_string(),
        "v0 takes the schema as JSON text: {tools}"
    );
    assert_eq!(
        received[1].body["messages"],
        json!([{"role": "tool", "content": "done", "toolCallId": "call_bg"}]),
        "only the tool result: the agent keeps its own call"
    );
    assert_eq!(
        received[1].body["conversationId"],
        received[0].body["conversationId"]
    );
}

#[tokio::test]
async fn agentscope_to_agkit_server_tool_call_is_a_plugin_call_with_its_output_then_text() {
    let mut events = kit::call("s1", "get_weather", &["{\"city\":", "\"Paris\"}"]);
    events.push(kit::result("s1", "sunny"));
    events.push(kit::text("It is sunny."));
    let agent = kit::reply(events).serve().await;
    let (_proxy, process) = agentscope_to_agkit(&agent).await;

    let events = scope::run(&process, &weather("s-6")).await;

    assert_eq!(
        scope::kinds(&events),
        ["plugin_call", "plugin_call_output", "message"]
    );
    let call = scope::only(&events, "plugin_call");
    assert_eq!(
        scope::data(&call),
        &json!({"call_id": "s1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"})
    );
    let output = scope::only(&events, "plugin_call_output");
    assert_eq!(scope::data(&output)["call_id"], "s1");
    assert_eq!(scope::data(&output)["output"], "sunny");
    assert_eq!(scope::text(&events), "It is sunny.");
}

#[tokio::test]
async fn agentscope_to_agkit_error_frame_is_a_failed_response_with_its_code() {
    let agent = kit::reply([
        kit::text("Half an "),
        json!({"type": "error", "code": "RATE_LIMIT", "message": "slow down"}),
    ])
    .serve()
    .await;
    let (_proxy, process) = agentscope_to_agkit(&agent).await;

    let events = scope::run(&process, &weather("s-7")).await;

    assert_eq!(scope::deltas(&events), ["Half an "]);
    assert_eq!(
        scope::error(&events),
        &json!({"code": "RATE_LIMIT", "message": "slow down"})
    );
}
