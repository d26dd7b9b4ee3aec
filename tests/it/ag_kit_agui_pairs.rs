//! The AG-Kit send-message v0 pairs through the real server on a real socket, one test per behaviour:
//! AG-Kit -> AG-UI (a legacy `useChat` frontend in front of an AG-UI agent), AG-UI -> AG-Kit (a legacy v0
//! agent served as AG-UI) and AG-Kit -> AG-Kit, across text, server-side and client-side tool calls, turns of
//! one conversation, human in the loop, upstream failure and client disconnect.
//!
//! AG-Kit clients are `support::ag_kit::Chat` (it behaves as `useChat` and fails on anything the hook would
//! choke on); v0 upstreams are scripted (`kit::reply`) or `kit::memory_agent()`, which keeps its own history
//! per `conversationId`. Every AG-UI stream the proxy serves must pass the AG-UI conservative profile.
//!
//! The history boundary under test (DESIGN §3): AG-Kit sends only what is new, so toward a full-history AG-UI
//! upstream the proxy keeps the log and sends the whole conversation; toward an AG-Kit upstream from a
//! full-history AG-UI client it sends only the messages the agent has not seen, under a stable
//! `conversationId` of its own, and a rewritten history starts a fresh upstream conversation.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::ag_kit::{self as kit, Chat};
use crate::support::ag_ui::{self, finished, started};
use crate::support::{post_json, Proxy, Reply, Route, Upstream};

const PATH: &str = "/agents/pair";

/// A route from `inbound` to `outbound` at [`PATH`], toward `upstream`.
async fn proxy(inbound: &str, outbound: &str, upstream: &Upstream) -> Proxy {
    Proxy::start(Route::new("pair", PATH, inbound, outbound).upstream(&upstream.url())).await
}

/// A run of a frontend that handles the route's pause tools (`confirmAction`, `ask_user`): pauses reach it as
/// calls of them.
fn pausable_input(thread_id: &str, run_id: &str, messages: Value) -> Value {
    let mut input = ag_ui::input(thread_id, run_id, messages);
    input["tools"] = json!([ag_ui::tool("confirmAction"), ag_ui::tool("ask_user")]);
    input
}

/// The AG-Kit inbound's `send-message` URL.
fn send_message(proxy: &Proxy) -> String {
    proxy.url(&format!("{PATH}/send-message"))
}

/// The AG-UI inbound's run URL.
fn agui(proxy: &Proxy) -> String {
    proxy.url(PATH)
}

/// A `Chat` offering the client tool `change-background-color`, which reports the color it was given.
fn painting_chat(proxy: &Proxy) -> Chat {
    Chat::new(&send_message(proxy)).tool("change-background-color", |args| {
        format!(
            "Background color changed to: {}",
            args["color"].as_str().unwrap_or("?")
        )
    })
}

/// The `type` of every v0 event of one stream.
fn kit_types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect()
}

/// The `conversationId` of the n-th request an AG-Kit upstream received.
fn conversation_of(upstream: &Upstream, nth: usize) -> String {
    let received = upstream.received();
    received[nth].body["conversationId"]
        .as_str()
        .unwrap_or_else(|| {
            panic!(
                "request {nth} has a conversationId: {:#?}",
                received[nth].body
            )
        })
        .to_owned()
}

/// An AG-UI agent's answer to "what is my name?".
fn your_name_is_ada() -> Reply {
    ag_ui::text_run("m2", &["Your name is Ada."])
}

/// The role and text of each message of an AG-UI request.
fn said(request: &Value) -> Vec<(&str, &str)> {
    let messages = request["messages"].as_array().expect("messages");
    messages
        .iter()
        .map(|m| {
            let text = |key: &str| m[key].as_str().unwrap_or("?");
            (text("role"), text("content"))
        })
        .collect()
}

/// An AG-UI upstream's pause: `RUN_FINISHED` with an interrupt outcome.
fn agui_interrupt(id: &str, reason: &str, message: &str) -> Value {
    json!({"type": "RUN_FINISHED", "threadId": "upstream-thread", "runId": "upstream-run",
           "outcome": {"type": "interrupt", "interrupts": [{"id": id, "reason": reason, "message": message}]}})
}

// --- AG-Kit -> AG-UI ---------------------------------------------------------------------------------------

#[tokio::test]
async fn agkit_to_agui_streams_text_in_order() {
    let upstream = ag_ui::text_run("m1", &["The weather ", "in Paris ", "is sunny."])
        .serve()
        .await;
    let proxy = proxy("ag-kit", "ag-ui", &upstream).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let exchange = chat.say("Weather in Paris?").await;

    assert_eq!(exchange.types(), ["text", "text", "text"]);
    let contents: Vec<&str> = exchange
        .events()
        .filter_map(|e| e["content"].as_str())
        .collect();
    assert_eq!(contents, ["The weather ", "in Paris ", "is sunny."]);
    let request = upstream.only_request().body;
    assert_eq!(request["threadId"], chat.conversation_id.as_str());
    let messages = request["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{request:#}");
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["content"], "Weather in Paris?");
    assert!(
        messages[0]["id"].as_str().is_some_and(|id| !id.is_empty()),
        "AG-UI messages need ids: {request:#}"
    );
}

#[tokio::test]
async fn agkit_to_agui_server_tool_call_reaches_the_client_with_its_result_then_text() {
    let upstream = Reply::sse()
        .event(started())
        .events(ag_ui::call(
            "call-1",
            "get_weather",
            &["{\"city\":", "\"Paris\"}"],
        ))
        .event(
            json!({"type": "TOOL_CALL_RESULT", "messageId": "res-1", "toolCallId": "call-1",
                   "content": "sunny, 25C"}),
        )
        .events(ag_ui::text("m2", &["Paris is sunny."]))
        .event(finished())
        .serve()
        .await;
    let proxy = proxy("ag-kit", "ag-ui", &upstream).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let exchange = chat.say("Weather in Paris?").await;

    assert_eq!(exchange.streams.len(), 1, "a server tool is not re-posted");
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
    assert_eq!(start["toolCallId"], "call-1");
    assert_eq!(start["toolCallName"], "get_weather");
    let arguments: String = exchange
        .events()
        .filter(|e| e["type"] == "tool-call-args")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        json!({"city": "Paris"})
    );
    let result = exchange.only("tool-result");
    assert_eq!(result["toolCallId"], "call-1");
    assert_eq!(result["result"], "sunny, 25C");
    assert_eq!(exchange.text(), "Paris is sunny.");
}

#[tokio::test]
async fn agkit_to_agui_client_tool_result_reaches_the_agent_after_its_call() {
    let upstream = Upstream::serve([
        Reply::sse()
            .event(started())
            .events(ag_ui::call(
                "call-7",
                "change-background-color",
                &["{\"color\":", "\"blue\"}"],
            ))
            .event(finished()),
        ag_ui::text_run("m2", &["The background is blue now."]),
    ])
    .await;
    let proxy = proxy("ag-kit", "ag-ui", &upstream).await;
    let mut chat = painting_chat(&proxy);

    let exchange = chat.say("Make the background blue").await;

    assert_eq!(
        exchange.streams.len(),
        2,
        "the hook re-posts the result once"
    );
    assert_eq!(
        kit_types(&exchange.streams[0].events),
        [
            "tool-call-start",
            "tool-call-args",
            "tool-call-args",
            "tool-call-end"
        ]
    );
    assert_eq!(
        exchange.streams[1].request["messages"],
        json!([{"role": "tool", "content": "Background color changed to: blue", "toolCallId": "call-7"}]),
        "the client re-posts only the tool message"
    );
    assert_eq!(exchange.text(), "The background is blue now.");

    let received = upstream.received();
    assert_eq!(received.len(), 2);
    let second = &received[1].body;
    assert_eq!(second["threadId"], chat.conversation_id.as_str());
    let messages = second["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 3, "the whole history: {second:#}");
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["content"], "Make the background blue");
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(
        messages[1]["toolCalls"],
        json!([{"id": "call-7", "type": "function",
                "function": {"name": "change-background-color", "arguments": "{\"color\":\"blue\"}"}}])
    );
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["toolCallId"], "call-7");
    assert_eq!(messages[2]["content"], "Background color changed to: blue");
    assert_eq!(
        messages[0]["id"], received[0].body["messages"][0]["id"],
        "the user message keeps its id across requests"
    );
    // The tool is offered to the AG-UI agent with its schema as an object.
    assert_eq!(second["tools"][0]["name"], "change-background-color");
    assert_eq!(second["tools"][0]["parameters"]["type"], "object");
}

#[tokio::test]
async fn agkit_to_agui_client_tool_called_after_text_is_logged_in_that_text_message() {
    let upstream = Upstream::serve([
        Reply::sse()
            .event(started())
            .events(ag_ui::text("m1", &["Let me paint."]))
            .events(ag_ui::call(
                "call-7",
                "change-background-color",
                &["{\"color\":\"red\"}"],
            ))
            .event(finished()),
        ag_ui::text_run("m2", &["Red it is."]),
    ])
    .await;
    let proxy = proxy("ag-kit", "ag-ui", &upstream).await;
    let mut chat = painting_chat(&proxy);

    let exchange = chat.say("Paint it red").await;

    assert_eq!(exchange.text(), "Let me paint.Red it is.");
    let received = upstream.received();
    assert_eq!(received.len(), 2);
    let messages = received[1].body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["content"], "Let me paint.");
    assert_eq!(messages[1]["toolCalls"][0]["id"], "call-7");
    assert_eq!(
        messages[1]["toolCalls"][0]["function"]["arguments"],
        "{\"color\":\"red\"}"
    );
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["toolCallId"], "call-7");
    assert_eq!(messages[2]["content"], "Background color changed to: red");
}

#[tokio::test]
async fn agkit_to_agui_second_turn_sends_the_agent_the_full_history_in_the_same_thread() {
    let upstream = Upstream::serve([
        ag_ui::text_run("m1", &["Nice to meet you, ", "Ada."]),
        your_name_is_ada(),
    ])
    .await;
    let proxy = proxy("ag-kit", "ag-ui", &upstream).await;
    let mut chat = Chat::new(&send_message(&proxy));

    assert_eq!(
        chat.say("my name is Ada").await.text(),
        "Nice to meet you, Ada."
    );
    let second = chat.say("what is my name?").await;

    assert_eq!(second.text(), "Your name is Ada.");
    assert_eq!(
        second.streams[0].request["messages"],
        json!([{"role": "user", "content": "what is my name?"}]),
        "the client sent only the new message"
    );
    let received = upstream.received();
    assert_eq!(received.len(), 2);
    for request in &received {
        assert_eq!(request.body["threadId"], chat.conversation_id.as_str());
    }
    assert_eq!(
        said(&received[1].body),
        [
            ("user", "my name is Ada"),
            ("assistant", "Nice to meet you, Ada."),
            ("user", "what is my name?")
        ]
    );
    assert_eq!(
        received[1].body["messages"][0]["id"],
        received[0].body["messages"][0]["id"]
    );
}

#[tokio::test]
async fn agkit_to_agui_interrupt_is_resumed_with_the_clients_answer() {
    let upstream = Upstream::serve([
        Reply::sse()
            .event(started())
            .event(agui_interrupt("int-7", "input", "Which city?")),
        ag_ui::text_run("m2", &["Paris it is."]),
    ])
    .await;
    let proxy = proxy("ag-kit", "ag-ui", &upstream).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let asked = chat.say("Book me a trip").await;

    assert_eq!(asked.types(), ["interrupt"]);
    let interrupt = asked.only("interrupt");
    assert_eq!(interrupt["id"], "int-7");
    assert_eq!(interrupt["reason"], "question");
    assert_eq!(interrupt["payload"]["question"], "Which city?");

    let answered = chat.resume(json!({"city": "Paris"})).await;

    assert_eq!(answered.text(), "Paris it is.");
    let received = upstream.received();
    assert_eq!(received.len(), 2);
    let resumed = &received[1].body;
    assert_eq!(
        resumed["resume"],
        json!([{"interruptId": "int-7", "status": "resolved", "payload": {"city": "Paris"}}])
    );
    assert_eq!(resumed["threadId"], chat.conversation_id.as_str());
    assert_eq!(
        resumed["messages"][0]["content"], "Book me a trip",
        "the history goes along: {resumed:#}"
    );
}

#[tokio::test]
async fn agkit_to_agui_run_error_mid_stream_is_one_error_frame_then_done() {
    let upstream = Reply::sse()
        .event(started())
        .events(ag_ui::text("m1", &["Thinking"]).into_iter().take(2))
        .event(json!({"type": "RUN_ERROR", "message": "model overloaded", "code": "OVERLOADED"}))
        .serve()
        .await;
    let proxy = proxy("ag-kit", "ag-ui", &upstream).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let exchange = chat.say("hi").await;

    assert_eq!(exchange.types(), ["text", "error"]);
    assert_eq!(exchange.text(), "Thinking");
    let error = exchange.only("error");
    assert_eq!(error["code"], "OVERLOADED");
    assert_eq!(error["message"], "model overloaded");
}

#[tokio::test]
async fn agkit_to_agui_upstream_http_500_before_any_event_is_an_http_502_naming_it() {
    let upstream = Reply::status(500).body("internal failure").serve().await;
    let proxy = proxy("ag-kit", "ag-ui", &upstream).await;
    let chat = Chat::new(&send_message(&proxy));

    let (status, body) = kit::refused(
        &send_message(&proxy),
        &chat.body(json!({"messages": [{"role": "user", "content": "hi"}]})),
    )
    .await;

    assert_eq!(status, 502);
    assert_eq!(body["error"]["code"], "UPSTREAM_HTTP_ERROR");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("500") && message.contains("internal failure"),
        "{body}"
    );
}

#[tokio::test]
async fn agkit_to_agui_a_turn_the_client_left_mid_stream_stays_in_the_history() {
    let upstream = Upstream::serve([
        Reply::sse()
            .event(started())
            .events(ag_ui::text("m1", &["Nice to meet you"]).into_iter().take(2))
            .hang(),
        your_name_is_ada(),
    ])
    .await;
    let proxy = proxy("ag-kit", "ag-ui", &upstream).await;
    let mut chat = Chat::new(&send_message(&proxy));
    let first = post_json(
        &send_message(&proxy),
        &chat.body(json!({"messages": [{"role": "user", "content": "my name is Ada"}]})),
    )
    .await;
    let mut stream = first.sse();
    assert!(stream.next_data().await.is_some(), "a first frame");
    drop(stream);
    assert!(
        upstream.client_left_within(Duration::from_secs(5)).await,
        "the upstream request is closed"
    );

    let second = chat.say("what is my name?").await;

    assert_eq!(second.text(), "Your name is Ada.");
    let received = upstream.received();
    assert_eq!(
        said(&received[1].body),
        [
            ("user", "my name is Ada"),
            ("assistant", "Nice to meet you"),
            ("user", "what is my name?")
        ],
        "the left turn and what the agent said of it are kept"
    );
}

// --- AG-UI -> AG-Kit ---------------------------------------------------------------------------------------

#[tokio::test]
async fn agui_to_agkit_streams_text_in_order() {
    let upstream = kit::reply([
        kit::text("The weather "),
        kit::text("in Paris "),
        kit::text("is sunny."),
    ])
    .serve()
    .await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let run = ag_ui::input(
        "thread-1",
        "run-1",
        json!([ag_ui::user("u1", "Weather in Paris?")]),
    );

    let events = ag_ui::run(&agui(&proxy), &run).await;

    assert_eq!(
        ag_ui::deltas(&events),
        ["The weather ", "in Paris ", "is sunny."]
    );
    assert_eq!(
        ag_ui::all(&events, "TEXT_MESSAGE_START").len(),
        1,
        "one answer is one message: {events:#?}"
    );
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    let request = upstream.only_request().body;
    assert_eq!(
        request["messages"],
        json!([{"role": "user", "content": "Weather in Paris?"}])
    );
    let conversation = request["conversationId"].as_str().expect("conversationId");
    assert!(
        uuid::Uuid::parse_str(conversation).is_ok(),
        "{conversation:?}"
    );
    assert!(
        request.get("tools").is_none(),
        "no tools, no key: {request:#}"
    );
    assert!(request.get("resume").is_none());
}

#[tokio::test]
async fn agui_to_agkit_run_starts_when_the_agent_answers_not_at_its_first_words() {
    // v0 has no event for a started run: the agent's open stream is the sign.
    let upstream = Reply::sse()
        .gate()
        .event(kit::text("Sunny."))
        .frame("data: [DONE]\n\n")
        .serve()
        .await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let input = ag_ui::input(
        "thread-1",
        "run-1",
        json!([ag_ui::user("u1", "Weather in Paris?")]),
    );

    let events = ag_ui::run_starting_before(&agui(&proxy), &input, || upstream.release()).await;
    assert_eq!(ag_ui::text_of(&events), "Sunny.");
}

#[tokio::test]
async fn agui_to_agkit_server_tool_call_and_its_result_arrive_then_text() {
    let mut events = kit::call("s1", "get_weather", &["{\"city\":\"Beijing\"}"]);
    events.push(kit::result("s1", "sunny, 25C"));
    events.push(kit::text("Sunny in Beijing."));
    let upstream = kit::reply(events).serve().await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let run = ag_ui::input(
        "thread-1",
        "run-1",
        json!([ag_ui::user("u1", "Weather in Beijing?")]),
    );

    let events = ag_ui::run(&agui(&proxy), &run).await;

    assert_eq!(
        ag_ui::calls(&events),
        [(
            "s1".to_owned(),
            "get_weather".to_owned(),
            json!({"city": "Beijing"})
        )]
    );
    let result = ag_ui::only(&events, "TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], "s1");
    assert_eq!(result["content"], "sunny, 25C");
    let types = ag_ui::types(&events);
    let result_at = types.iter().position(|t| *t == "TOOL_CALL_RESULT").unwrap();
    let text_at = types
        .iter()
        .position(|t| *t == "TEXT_MESSAGE_CONTENT")
        .unwrap();
    assert!(
        result_at < text_at,
        "the answer follows the result: {types:?}"
    );
    assert_eq!(ag_ui::text_of(&events), "Sunny in Beijing.");
}

#[tokio::test]
async fn agui_to_agkit_client_tool_result_is_sent_alone_in_the_same_conversation() {
    let upstream = Upstream::serve([
        kit::reply(kit::call(
            "c1",
            "change_background",
            &["{\"color\":", "\"blue\"}"],
        )),
        kit::reply([kit::text("The background is blue now.")]),
    ])
    .await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let mut first = ag_ui::input(
        "thread-1",
        "run-1",
        json!([ag_ui::user("u1", "Make the background blue")]),
    );
    first["tools"] = json!([ag_ui::tool("change_background")]);

    let events = ag_ui::run(&agui(&proxy), &first).await;

    assert_eq!(
        ag_ui::calls(&events),
        [(
            "c1".to_owned(),
            "change_background".to_owned(),
            json!({"color": "blue"})
        )]
    );
    let types = ag_ui::types(&events);
    assert_eq!(
        &types[types.len() - 2..],
        ["TOOL_CALL_END", "RUN_FINISHED"],
        "the run ends after the client's call: {types:?}"
    );
    assert!(ag_ui::all(&events, "TOOL_CALL_RESULT").is_empty());
    let asked = upstream.only_request().body;
    assert_eq!(
        asked["messages"],
        json!([{"role": "user", "content": "Make the background blue"}])
    );
    assert_eq!(asked["tools"][0]["name"], "change_background");
    let schema = asked["tools"][0]["parameters"]
        .as_str()
        .expect("v0 tool parameters are JSON text");
    assert_eq!(
        serde_json::from_str::<Value>(schema).unwrap(),
        ag_ui::tool("change_background")["parameters"]
    );

    let mut second = ag_ui::input(
        "thread-1",
        "run-2",
        json!([
            ag_ui::user("u1", "Make the background blue"),
            ag_ui::kept_call(&events, "c1"),
            ag_ui::tool_result("t1", "c1", "Background color changed to: blue"),
        ]),
    );
    second["tools"] = json!([ag_ui::tool("change_background")]);
    let events = ag_ui::run(&agui(&proxy), &second).await;

    assert_eq!(ag_ui::text_of(&events), "The background is blue now.");
    let received = upstream.received();
    assert_eq!(received.len(), 2);
    assert_eq!(
        received[1].body["messages"],
        json!([{"role": "tool", "content": "Background color changed to: blue", "toolCallId": "c1"}]),
        "only the tool message, never the history or the assistant's call"
    );
    assert_eq!(conversation_of(&upstream, 1), conversation_of(&upstream, 0));
}

#[tokio::test]
async fn agui_to_agkit_turn_after_a_client_tool_round_sends_only_the_new_message() {
    let upstream = Upstream::serve([
        kit::reply(kit::call(
            "c1",
            "change_background",
            &["{\"color\":\"blue\"}"],
        )),
        kit::reply([kit::text("It is blue now.")]),
        kit::reply([kit::text("You are welcome.")]),
    ])
    .await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let tools = json!([ag_ui::tool("change_background")]);
    let mut history = vec![ag_ui::user("u1", "Make the background blue")];
    let run = |run_id: &str, history: &[Value]| {
        let mut input = ag_ui::input("thread-1", run_id, Value::Array(history.to_vec()));
        input["tools"] = tools.clone();
        input
    };

    let called = ag_ui::run(&agui(&proxy), &run("run-1", &history)).await;
    history.push(ag_ui::kept_call(&called, "c1"));
    history.push(ag_ui::tool_result("t1", "c1", "done"));
    let answered = ag_ui::run(&agui(&proxy), &run("run-2", &history)).await;
    history.push(ag_ui::kept_text(&answered));
    history.push(ag_ui::user("u3", "Thanks!"));
    let thanked = ag_ui::run(&agui(&proxy), &run("run-3", &history)).await;

    assert_eq!(ag_ui::text_of(&thanked), "You are welcome.");
    assert_eq!(
        kit::messages_of(&upstream, 2),
        json!([{"role": "user", "content": "Thanks!"}]),
        "the call, its result and the agent's own reply are not sent again"
    );
    assert_eq!(conversation_of(&upstream, 2), conversation_of(&upstream, 0));
}

#[tokio::test]
async fn agui_to_agkit_second_turn_sends_only_the_new_message_to_an_agent_that_remembers() {
    let upstream = kit::memory_agent().await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let greeting = json!([ag_ui::user("u1", "my name is Ada")]);

    let first = ag_ui::run(
        &agui(&proxy),
        &ag_ui::input("thread-ada", "run-1", greeting),
    )
    .await;
    assert_eq!(ag_ui::text_of(&first), "Nice to meet you.");

    let history = json!([
        ag_ui::user("u1", "my name is Ada"),
        ag_ui::kept_text(&first),
        ag_ui::user("u2", "what is my name?"),
    ]);
    let second = ag_ui::run(&agui(&proxy), &ag_ui::input("thread-ada", "run-2", history)).await;

    assert_eq!(ag_ui::text_of(&second), "Your name is Ada.");
    assert_eq!(
        kit::messages_of(&upstream, 1),
        json!([{"role": "user", "content": "what is my name?"}])
    );
    assert_eq!(conversation_of(&upstream, 1), conversation_of(&upstream, 0));

    // Another thread is another conversation for the agent.
    let elsewhere = ag_ui::run(
        &agui(&proxy),
        &ag_ui::input(
            "thread-other",
            "run-1",
            json!([ag_ui::user("u1", "what is my name?")]),
        ),
    )
    .await;
    assert_eq!(ag_ui::text_of(&elsewhere), "I do not know your name.");
    assert_ne!(conversation_of(&upstream, 2), conversation_of(&upstream, 0));
}

#[tokio::test]
async fn agui_to_agkit_agent_interrupt_is_an_ask_user_call_answered_by_a_resume() {
    let steps = json!({"steps": [{"description": "Dig hole", "status": "enabled"},
                                 {"description": "Plant tree", "status": "enabled"}]});
    let upstream = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_1",
            "waiting_for_user_selection",
            steps.clone(),
        )]),
        kit::reply([kit::text("Digging the hole.")]),
    ])
    .await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let ask = json!([ag_ui::user("u1", "Plan my garden")]);

    let events = ag_ui::run(&agui(&proxy), &pausable_input("thread-1", "run-1", ask)).await;

    let calls = ag_ui::calls(&events);
    assert_eq!(calls.len(), 1, "{events:#?}");
    let (call_id, name, args) = &calls[0];
    assert_eq!(call_id, "int_1");
    assert_eq!(name, "ask_user");
    assert_eq!(args["reason"], "waiting_for_user_selection");
    assert_eq!(args["payload"], steps);
    assert!(args["question"].is_string(), "{args}");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");

    let answer = json!([
        ag_ui::user("u1", "Plan my garden"),
        ag_ui::kept_call(&events, "int_1"),
        ag_ui::tool_result("t1", "int_1", "{\"selected\":[0]}"),
    ]);
    let events = ag_ui::run(&agui(&proxy), &pausable_input("thread-1", "run-2", answer)).await;

    assert_eq!(ag_ui::text_of(&events), "Digging the hole.");
    let resumed = upstream.received()[1].body.clone();
    assert_eq!(
        resumed["resume"],
        json!({"interruptId": "int_1", "payload": "{\"selected\":[0]}"})
    );
    assert!(
        resumed.get("messages").is_none(),
        "a resume carries no messages: {resumed:#}"
    );
    assert_eq!(conversation_of(&upstream, 1), conversation_of(&upstream, 0));
}

#[tokio::test]
async fn agui_to_agkit_turn_after_an_answered_interrupt_sends_only_the_new_message() {
    let upstream = Upstream::serve([
        kit::reply([
            kit::text("Pick the steps."),
            kit::interrupt("int_1", "waiting_for_user_selection", json!({"steps": []})),
        ]),
        kit::reply([kit::text("Digging.")]),
        kit::reply([kit::text("Anything else?")]),
    ])
    .await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let mut history = vec![ag_ui::user("u1", "Plan my garden")];
    let input = |run_id: &str, history: &[Value]| {
        pausable_input("thread-1", run_id, Value::Array(history.to_vec()))
    };

    let asked = ag_ui::run(&agui(&proxy), &input("run-1", &history)).await;
    assert_eq!(ag_ui::text_of(&asked), "Pick the steps.");
    // The client keeps the text and the pause's call in one assistant message (the call's parent).
    let mut kept = ag_ui::kept_text(&asked);
    kept["toolCalls"] = ag_ui::kept_call(&asked, "int_1")["toolCalls"].clone();
    history.push(kept);
    history.push(ag_ui::tool_result("t1", "int_1", "{\"selected\":[]}"));
    let answered = ag_ui::run(&agui(&proxy), &input("run-2", &history)).await;
    history.push(ag_ui::kept_text(&answered));
    history.push(ag_ui::user("u3", "Thanks"));
    let after = ag_ui::run(&agui(&proxy), &input("run-3", &history)).await;

    assert_eq!(ag_ui::text_of(&after), "Anything else?");
    let third = upstream.received()[2].body.clone();
    assert_eq!(
        third["messages"],
        json!([{"role": "user", "content": "Thanks"}]),
        "neither the pause nor its answer is sent again: {third:#}"
    );
    assert!(third.get("resume").is_none(), "answered once: {third:#}");
    assert_eq!(conversation_of(&upstream, 2), conversation_of(&upstream, 0));
}

#[tokio::test]
async fn agui_to_agkit_approval_interrupt_is_a_confirm_action_call_answered_by_a_resume() {
    let upstream = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_9",
            "approval",
            json!({"toolName": "delete_file", "args": {"path": "/tmp/old.log"}}),
        )]),
        kit::reply([kit::text("Deleted.")]),
    ])
    .await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let ask = json!([ag_ui::user("u1", "Clean up the logs")]);

    let events = ag_ui::run(&agui(&proxy), &pausable_input("thread-1", "run-1", ask)).await;

    let calls = ag_ui::calls(&events);
    assert_eq!(calls.len(), 1, "{events:#?}");
    let (call_id, name, args) = &calls[0];
    assert_eq!(call_id, "int_9");
    assert_eq!(name, "confirmAction");
    assert_eq!(args["tool"], "delete_file");
    assert_eq!(args["arguments"], json!({"path": "/tmp/old.log"}));

    let answer = json!([
        ag_ui::user("u1", "Clean up the logs"),
        ag_ui::kept_call(&events, "int_9"),
        ag_ui::tool_result("t1", "int_9", "{\"approved\":true}"),
    ]);
    let events = ag_ui::run(&agui(&proxy), &pausable_input("thread-1", "run-2", answer)).await;

    assert_eq!(ag_ui::text_of(&events), "Deleted.");
    let resumed = upstream.received()[1].body.clone();
    assert_eq!(
        resumed["resume"],
        json!({"interruptId": "int_9", "payload": "{\"approved\":true}"})
    );
    assert!(resumed.get("messages").is_none(), "{resumed:#}");
}

#[tokio::test]
async fn agui_to_agkit_edited_history_starts_a_fresh_agent_conversation() {
    let upstream = kit::reply([kit::text("Hello")]).serve().await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;

    ag_ui::run(
        &agui(&proxy),
        &ag_ui::input("thread-1", "run-1", json!([ag_ui::user("u1", "Hi")])),
    )
    .await;
    // The user edits the first message: the history no longer holds what the agent was told.
    let edited = ag_ui::run(
        &agui(&proxy),
        &ag_ui::input(
            "thread-1",
            "run-2",
            json!([ag_ui::user("u1-edited", "Hello instead")]),
        ),
    )
    .await;
    // Going on from the edit stays in the new conversation.
    ag_ui::run(
        &agui(&proxy),
        &ag_ui::input(
            "thread-1",
            "run-3",
            json!([
                ag_ui::user("u1-edited", "Hello instead"),
                ag_ui::kept_text(&edited),
                ag_ui::user("u3", "And then?"),
            ]),
        ),
    )
    .await;

    assert_eq!(upstream.received().len(), 3);
    assert_ne!(
        conversation_of(&upstream, 1),
        conversation_of(&upstream, 0),
        "a rewritten history is a fresh agent conversation"
    );
    assert_eq!(
        kit::messages_of(&upstream, 1),
        json!([{"role": "user", "content": "Hello instead"}])
    );
    assert_eq!(conversation_of(&upstream, 2), conversation_of(&upstream, 1));
    assert_eq!(
        kit::messages_of(&upstream, 2),
        json!([{"role": "user", "content": "And then?"}])
    );
}

#[tokio::test]
async fn agui_to_agkit_regenerated_answer_starts_a_fresh_agent_conversation() {
    let upstream = Upstream::serve([
        kit::reply([kit::text("Hello")]),
        kit::reply([kit::text("Hi there")]),
    ])
    .await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let history = json!([ag_ui::user("u1", "Hi")]);

    ag_ui::run(
        &agui(&proxy),
        &ag_ui::input("thread-1", "run-1", history.clone()),
    )
    .await;
    // The user asks for another answer: the client drops the agent's reply and runs the same history again.
    let again = ag_ui::run(&agui(&proxy), &ag_ui::input("thread-1", "run-2", history)).await;

    assert_eq!(ag_ui::text_of(&again), "Hi there", "{again:#?}");
    assert_eq!(upstream.received().len(), 2);
    assert_eq!(
        kit::messages_of(&upstream, 1),
        json!([{"role": "user", "content": "Hi"}])
    );
    assert_ne!(
        conversation_of(&upstream, 1),
        conversation_of(&upstream, 0),
        "the agent's conversation holds the dropped reply: a fresh one starts"
    );
}

#[tokio::test]
async fn agui_to_agkit_error_frame_is_a_run_error_with_the_agents_code() {
    let upstream = kit::reply([
        kit::text("Let me"),
        json!({"type": "error", "code": "RATE_LIMIT", "message": "slow down"}),
        kit::text(" never sent"),
    ])
    .serve()
    .await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let run = ag_ui::input("thread-1", "run-1", json!([ag_ui::user("u1", "Hi")]));

    let events = ag_ui::run(&agui(&proxy), &run).await;

    let error = ag_ui::run_error(&events);
    assert_eq!(error["code"], "RATE_LIMIT");
    assert_eq!(error["message"], "slow down");
    assert_eq!(
        ag_ui::text_of(&events),
        "Let me",
        "what came before is kept"
    );
}

#[tokio::test]
async fn agui_to_agkit_http_500_is_a_run_error_naming_the_status_and_body() {
    let upstream = Reply::status(500).body("internal failure").serve().await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let run = ag_ui::input("thread-1", "run-1", json!([ag_ui::user("u1", "Hi")]));

    let events = ag_ui::run(&agui(&proxy), &run).await;

    assert_eq!(ag_ui::types(&events), ["RUN_STARTED", "RUN_ERROR"]);
    let error = ag_ui::run_error(&events);
    assert_eq!(error["code"], "UPSTREAM_HTTP_ERROR");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("500") && message.contains("internal failure"),
        "{error}"
    );
}

/// An AG-UI run against an AG-Kit agent answering `reply`: the events the client saw.
async fn agui_run_against(reply: Reply) -> Vec<Value> {
    let upstream = reply.serve().await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let run = ag_ui::input("thread-1", "run-1", json!([ag_ui::user("u1", "Hi")]));
    ag_ui::run(&agui(&proxy), &run).await
}

#[tokio::test]
async fn agui_to_agkit_clean_end_without_done_finishes_the_run() {
    let events = agui_run_against(Reply::sse().event(kit::text("Hello"))).await;

    assert_eq!(ag_ui::text_of(&events), "Hello");
    assert_eq!(
        events.last().unwrap()["type"],
        "RUN_FINISHED",
        "{events:#?}"
    );
}

#[tokio::test]
async fn agui_to_agkit_frame_that_is_not_json_is_a_run_error_upstream_malformed() {
    let events = agui_run_against(
        Reply::sse()
            .event(kit::text("Let me"))
            .frame("data: <html>Bad Gateway</html>\n\n")
            .event(kit::text(" never sent")),
    )
    .await;

    assert_eq!(ag_ui::run_error(&events)["code"], "UPSTREAM_MALFORMED");
    assert_eq!(
        ag_ui::text_of(&events),
        "Let me",
        "what came before is kept"
    );
}

#[tokio::test]
async fn agui_to_agkit_stream_ending_inside_a_tool_call_is_a_run_error_upstream_eof() {
    let open_call = kit::call("c1", "get_weather", &["{}"]);
    let events = agui_run_against(Reply::sse().events(open_call[..2].iter().cloned())).await;

    assert_eq!(ag_ui::run_error(&events)["code"], "UPSTREAM_EOF");
}

#[tokio::test]
async fn agui_to_agkit_stream_ending_inside_an_event_is_a_run_error_upstream_eof() {
    for cut in [
        "data: {\"type\":\"text\",\"content\":\" wor",
        "data: {\"type\":\"text\",\"content\":\" world\"}\n",
    ] {
        let events = agui_run_against(Reply::sse().event(kit::text("Hello")).frame(cut)).await;

        assert_eq!(ag_ui::run_error(&events)["code"], "UPSTREAM_EOF", "{cut}");
        assert_eq!(ag_ui::text_of(&events), "Hello", "{cut}");
    }
}

#[tokio::test]
async fn agui_to_agkit_done_without_its_blank_line_still_finishes_the_run() {
    let events =
        agui_run_against(Reply::sse().event(kit::text("Hello")).frame("data: [DONE]")).await;

    assert_eq!(
        events.last().unwrap()["type"],
        "RUN_FINISHED",
        "{events:#?}"
    );
}

#[tokio::test]
async fn agui_to_agkit_upstream_answering_with_agui_events_is_read_as_agui() {
    let upstream = ag_ui::text_run("m1", &["Hello ", "from a current server"])
        .serve()
        .await;
    let proxy = proxy("ag-ui", "ag-kit", &upstream).await;
    let run = ag_ui::input("thread-1", "run-1", json!([ag_ui::user("u1", "Hi")]));

    let events = ag_ui::run(&agui(&proxy), &run).await;

    assert_eq!(ag_ui::text_of(&events), "Hello from a current server");
    assert_eq!(ag_ui::all(&events, "RUN_STARTED").len(), 1);
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    assert_eq!(
        upstream.only_request().body["messages"],
        json!([{"role": "user", "content": "Hi"}]),
        "the request was still a v0 send-message"
    );
}

#[tokio::test]
async fn agui_to_agkit_upstream_answering_with_agui_events_finishes_without_waiting_for_it_to_close(
) {
    let upstream = ag_ui::text_run("m1", &["Done."]).hang().serve().await;
    // The route timeout is far longer than any wait here: finishing must not wait for it.
    let route = Route::new("pair", PATH, "ag-ui", "ag-kit")
        .upstream(&upstream.url())
        .timeout("60s");
    let proxy = Proxy::start(route).await;
    let run = ag_ui::input("thread-1", "run-1", json!([ag_ui::user("u1", "Hi")]));

    let events = ag_ui::run(&agui(&proxy), &run).await;

    assert_eq!(ag_ui::text_of(&events), "Done.");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    assert!(
        upstream.client_left_within(Duration::from_secs(5)).await,
        "the upstream request is closed once the run finished"
    );
}

// --- AG-Kit -> AG-Kit --------------------------------------------------------------------------------------

#[tokio::test]
async fn agkit_to_agkit_streams_text_in_order() {
    let upstream = kit::reply([kit::text("Hello"), kit::text(" there!")])
        .serve()
        .await;
    let proxy = proxy("ag-kit", "ag-kit", &upstream).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let exchange = chat.say("hi").await;

    assert_eq!(
        exchange.streams[0].events,
        [kit::text("Hello"), kit::text(" there!")]
    );
    assert_eq!(
        upstream.only_request().body["messages"],
        json!([{"role": "user", "content": "hi"}])
    );
}

#[tokio::test]
async fn agkit_to_agkit_server_tool_call_and_result_pass_through_then_text() {
    let mut events = kit::call("s1", "get_weather", &["{\"city\":", "\"Beijing\"}"]);
    events.push(kit::result("s1", "sunny, 25C"));
    events.push(kit::text("Sunny in Beijing."));
    let upstream = kit::reply(events.clone()).serve().await;
    let proxy = proxy("ag-kit", "ag-kit", &upstream).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let exchange = chat.say("Weather in Beijing?").await;

    assert_eq!(exchange.streams.len(), 1, "nothing for the client to run");
    assert_eq!(exchange.streams[0].events, events);
}

#[tokio::test]
async fn agkit_to_agkit_client_tool_round_trip_sends_the_result_in_the_same_conversation() {
    let upstream = Upstream::serve([
        kit::reply(kit::call(
            "c1",
            "change-background-color",
            &["{\"color\":", " \"blue\"}"],
        )),
        kit::reply([kit::text("Done, it is blue.")]),
    ])
    .await;
    let proxy = proxy("ag-kit", "ag-kit", &upstream).await;
    let mut chat = painting_chat(&proxy);

    let exchange = chat.say("Make the background blue").await;

    assert_eq!(
        exchange.streams.len(),
        2,
        "the hook re-posts the result once"
    );
    assert_eq!(exchange.text(), "Done, it is blue.");
    let received = upstream.received();
    assert_eq!(received.len(), 2);
    assert_eq!(
        received[0].body["tools"], exchange.streams[0].request["tools"],
        "the client's tools reach the agent as the client sent them"
    );
    assert_eq!(
        received[1].body["messages"],
        json!([{"role": "tool", "content": "Background color changed to: blue", "toolCallId": "c1"}])
    );
    assert_eq!(conversation_of(&upstream, 1), conversation_of(&upstream, 0));
}

#[tokio::test]
async fn agkit_to_agkit_interrupt_passes_through_and_its_resume_reaches_the_agent_unchanged() {
    let steps = json!({"steps": [{"description": "Dig hole", "status": "enabled"}]});
    let upstream = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_1",
            "waiting_for_user_selection",
            steps.clone(),
        )]),
        kit::reply([kit::text("Digging.")]),
    ])
    .await;
    let proxy = proxy("ag-kit", "ag-kit", &upstream).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let asked = chat.say("Plan my garden").await;

    assert_eq!(
        asked.streams[0].events,
        [kit::interrupt("int_1", "waiting_for_user_selection", steps)]
    );

    let answered = chat.resume(json!({"selected": [0, 2]})).await;

    assert_eq!(answered.text(), "Digging.");
    let resumed = upstream.received()[1].body.clone();
    assert_eq!(
        resumed["resume"],
        json!({"interruptId": "int_1", "payload": "{\"selected\":[0,2]}"})
    );
    assert!(resumed.get("messages").is_none(), "{resumed:#}");
    assert_eq!(conversation_of(&upstream, 1), conversation_of(&upstream, 0));
}

#[tokio::test]
async fn agkit_to_agkit_resume_payload_shaped_as_a_response_reaches_the_agent_unchanged() {
    let upstream = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_1",
            "waiting_for_user_input",
            json!({"prompt": "Which city?"}),
        )]),
        kit::reply([kit::text("Noted.")]),
    ])
    .await;
    let proxy = proxy("ag-kit", "ag-kit", &upstream).await;
    let mut chat = Chat::new(&send_message(&proxy));
    chat.say("Book me a trip").await.only("interrupt");

    let sent = json!({"response": "Paris"});
    chat.resume(sent.clone()).await;

    // The agent's own interrupt is answered with exactly the JSON text the client sent.
    assert_eq!(
        upstream.received()[1].body["resume"]["payload"],
        sent.to_string()
    );
}

#[tokio::test]
async fn agkit_to_agkit_conversation_id_is_the_proxys_own_and_stable_per_client_conversation() {
    let upstream = kit::memory_agent().await;
    let proxy = proxy("ag-kit", "ag-kit", &upstream).await;
    let mut ada = Chat::new(&send_message(&proxy));
    let mut stranger = Chat::new(&send_message(&proxy));

    assert_eq!(ada.say("my name is Ada").await.text(), "Nice to meet you.");
    assert_eq!(
        ada.say("what is my name?").await.text(),
        "Your name is Ada."
    );
    assert_eq!(
        stranger.say("what is my name?").await.text(),
        "I do not know your name."
    );

    let ada_upstream = conversation_of(&upstream, 0);
    assert!(
        uuid::Uuid::parse_str(&ada_upstream).is_ok(),
        "{ada_upstream:?}"
    );
    assert_ne!(
        ada_upstream, ada.conversation_id,
        "the proxy's own id, not the client's"
    );
    assert_eq!(conversation_of(&upstream, 1), ada_upstream);
    assert_eq!(
        kit::messages_of(&upstream, 1),
        json!([{"role": "user", "content": "what is my name?"}])
    );
    let stranger_upstream = conversation_of(&upstream, 2);
    assert_ne!(stranger_upstream, ada_upstream);
    assert_ne!(stranger_upstream, stranger.conversation_id);
}

#[tokio::test]
async fn agkit_to_agkit_error_frame_reaches_the_client_as_an_error_frame() {
    let upstream = kit::reply([
        kit::text("Half an answer"),
        json!({"type": "error", "code": "RATE_LIMIT", "message": "slow down"}),
    ])
    .serve()
    .await;
    let proxy = proxy("ag-kit", "ag-kit", &upstream).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let exchange = chat.say("hi").await;

    assert_eq!(exchange.types(), ["text", "error"]);
    assert_eq!(exchange.text(), "Half an answer");
    let error = exchange.only("error");
    assert_eq!(error["code"], "RATE_LIMIT");
    assert_eq!(error["message"], "slow down");
}
