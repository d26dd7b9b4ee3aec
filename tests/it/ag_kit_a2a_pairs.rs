//! The two AG-Kit ↔ A2A pairs through the real server on a real socket, one test per behaviour:
//! AG-Kit -> A2A (a legacy `useChat` frontend in front of an A2A agent) and A2A -> AG-Kit (a legacy v0 agent
//! served to A2A clients), across text, turns of one conversation, human in the loop, tool calls, upstream
//! failure and client disconnect.
//!
//! Both protocols send deltas and keep the history on the agent's side, so messages pass through; what the
//! proxy keeps per conversation is the upstream identity (the agent's A2A `contextId`, the proxy's own v0
//! `conversationId`) and the pause to resume. The AG-Kit client is `support::ag_kit::Chat` (it fails on
//! anything `useChat` would choke on); A2A agents are scripted like a2a-sdk 0.2.13; v0 agents are scripted
//! `kit::reply` streams or `kit::memory_agent`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::a2a::{self, Agent};
use crate::support::ag_kit::{self as kit, Chat};
use crate::support::{post_json, Proxy, Reply, Route, Upstream};

const PATH: &str = "/agents/pair";

/// A route from `inbound` to `outbound` at [`PATH`].
async fn proxy(inbound: &str, outbound: &str, upstream: &str) -> Proxy {
    Proxy::start(Route::new("pair", PATH, inbound, outbound).upstream(upstream)).await
}

/// An AG-Kit route in front of the A2A `agent`, and a `useChat` client of it.
async fn agkit_to_a2a(agent: &Upstream) -> (Proxy, Chat) {
    let proxy = proxy("ag-kit", "a2a", &agent.url()).await;
    let chat = Chat::new(&proxy.url(&format!("{PATH}/send-message")));
    (proxy, chat)
}

/// An A2A route in front of the v0 `agent`.
async fn a2a_to_agkit(agent: &Upstream) -> Proxy {
    proxy("a2a", "ag-kit", &agent.url()).await
}

/// An A2A agent that keeps each context's history itself, as a2a-sdk agents do: it answers "Your name is
/// X." when asked for a name it was told ("my name is X"), "Nice to meet you." otherwise. A message without
/// a `contextId` starts a context the agent names (`ctx-mem-<n>`).
async fn memory_a2a_agent() -> Upstream {
    let histories: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    Upstream::answer_with(move |request, nth| {
        let message = a2a::sent_message(request);
        let context = message["contextId"]
            .as_str()
            .map_or_else(|| format!("ctx-mem-{nth}"), str::to_owned);
        let said = a2a::message_text(message);
        let mut histories = histories.lock().expect("lock");
        let history = histories.entry(context.clone()).or_default();
        history.push(said.clone());
        let answer = if said.to_lowercase().contains("what is my name") {
            history
                .iter()
                .find_map(|line| {
                    let at = line.to_lowercase().find("my name is ")?;
                    Some(format!(
                        "Your name is {}.",
                        line[at + "my name is ".len()..].trim_end_matches('.')
                    ))
                })
                .unwrap_or_else(|| "I do not know your name.".to_owned())
        } else {
            "Nice to meet you.".to_owned()
        };
        let task = a2a::task(&format!("task-mem-{nth}"), &context);
        let results = [
            task.submitted(),
            task.working(),
            task.chunk("a1", &answer, false, true),
            task.completed(),
        ];
        // Framed as a2a-sdk 0.2.13 frames it (CRLF).
        results.into_iter().fold(
            Reply::sse().header("content-type", "text/event-stream; charset=utf-8"),
            |reply, result| {
                let response =
                    json!({"id": request.body["id"], "jsonrpc": "2.0", "result": result});
                reply.frame(&format!("data: {response}\r\n\r\n"))
            },
        )
    })
    .await
}

/// The data parts of a message, in order.
fn data_parts(message: &Value) -> Vec<Value> {
    message["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["kind"] == "data")
        .map(|p| p["data"].clone())
        .collect()
}

// --- AG-Kit -> A2A ----------------------------------------------------------------------------------------

#[tokio::test]
async fn agkit_to_a2a_artifact_chunks_arrive_in_order_as_text_events() {
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
    let (_proxy, mut chat) = agkit_to_a2a(&agent).await;

    let exchange = chat.say("Weather in Beijing?").await;

    assert_eq!(exchange.types(), ["text", "text", "text"]);
    let contents: Vec<&str> = exchange
        .events()
        .filter_map(|e| e["content"].as_str())
        .collect();
    assert_eq!(contents, ["The weather ", "in Beijing ", "is sunny."]);
    assert_eq!(
        chat.messages.last().unwrap(),
        &json!({"role": "assistant", "content": "The weather in Beijing is sunny.", "toolCalls": []}),
        "useChat builds one assistant message from the deltas"
    );
    let call = agent.only_request();
    assert_eq!(a2a::rpc_method(&call), "message/stream");
    let message = a2a::sent_message(&call);
    assert_eq!(
        message["parts"],
        json!([{"kind": "text", "text": "Weather in Beijing?"}])
    );
    assert!(
        message.get("contextId").is_none(),
        "a new conversation: the agent names its context"
    );
}

#[tokio::test]
async fn agkit_to_a2a_two_agkit_conversations_are_two_agent_contexts() {
    let agent = memory_a2a_agent().await;
    let (proxy, mut ada) = agkit_to_a2a(&agent).await;
    let mut other = Chat::new(&proxy.url(&format!("{PATH}/send-message")));

    ada.say("my name is Ada").await;
    assert_eq!(
        other.say("what is my name?").await.text(),
        "I do not know your name.",
        "another conversationId is another context"
    );
    assert_eq!(
        ada.say("what is my name?").await.text(),
        "Your name is Ada."
    );
}

#[tokio::test]
async fn agkit_to_a2a_input_required_is_an_interrupt_whose_resume_continues_the_task() {
    let agent = a2a::asking_agent().await;
    let (_proxy, mut chat) = agkit_to_a2a(&agent).await;

    let asked = chat.say("Weather?").await;
    assert_eq!(
        asked.types(),
        ["interrupt"],
        "the question is not also text"
    );
    let interrupt = asked.only("interrupt");
    assert_eq!(interrupt["reason"], "input_required");
    assert_eq!(interrupt["payload"]["message"], "Which city?");
    assert!(interrupt["id"].as_str().is_some_and(|id| !id.is_empty()));

    let answered = chat.resume(json!({"response": "Paris"})).await;

    assert_eq!(answered.text(), "Paris is sunny.");
    assert!(chat.interrupt.is_none());
    let calls = a2a::calls(&agent, "message/stream");
    assert_eq!(calls.len(), 2);
    let answer = a2a::sent_message(&calls[1]);
    assert_eq!(answer["taskId"], "task-1", "the paused task continues");
    assert_eq!(answer["contextId"], "ctx-up-1");
    assert_eq!(
        answer["parts"],
        json!([{"kind": "text", "text": "Paris"}]),
        "the answer's text, not its JSON wrapper"
    );
}

#[tokio::test]
async fn agkit_to_a2a_resume_with_a_bare_json_string_is_the_answer_text() {
    let agent = a2a::asking_agent().await;
    let (_proxy, mut chat) = agkit_to_a2a(&agent).await;
    chat.say("Weather?").await;

    let answered = chat.resume(json!("Paris")).await;

    assert_eq!(answered.text(), "Paris is sunny.");
    let calls = a2a::calls(&agent, "message/stream");
    assert_eq!(a2a::message_text(a2a::sent_message(&calls[1])), "Paris");
}

#[tokio::test]
async fn agkit_to_a2a_turn_after_an_answered_question_is_a_new_task_in_the_context() {
    let task = a2a::task("task-1", "ctx-up-1");
    let next = a2a::task("task-2", "ctx-up-1");
    let agent = Agent::new()
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
        .await;
    let (_proxy, mut chat) = agkit_to_a2a(&agent).await;
    chat.say("Weather?").await;
    chat.resume(json!({"response": "Paris"})).await;

    let third = chat.say("And tomorrow?").await;

    assert_eq!(third.text(), "Rain tomorrow.");
    let calls = a2a::calls(&agent, "message/stream");
    assert_eq!(calls.len(), 3);
    let message = a2a::sent_message(&calls[2]);
    assert_eq!(message["contextId"], "ctx-up-1");
    assert!(
        message.get("taskId").is_none(),
        "the answered task is over: {message}"
    );
    assert_eq!(a2a::message_text(message), "And tomorrow?");
}

#[tokio::test]
async fn agkit_to_a2a_resuming_an_answered_interrupt_again_is_a_400_never_forwarded() {
    let agent = a2a::asking_agent().await;
    let (proxy, mut chat) = agkit_to_a2a(&agent).await;
    let asked = chat.say("Weather?").await;
    let interrupt_id = asked.only("interrupt")["id"].clone();
    chat.resume(json!({"response": "Paris"})).await;

    let (status, body) = kit::refused(
        &proxy.url(&format!("{PATH}/send-message")),
        &chat.body(json!({"resume": {"interruptId": interrupt_id, "payload": "\"Rome\""}})),
    )
    .await;

    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "INVALID_REQUEST");
    assert_eq!(
        a2a::calls(&agent, "message/stream").len(),
        2,
        "the agent is not asked again"
    );
}

#[tokio::test]
async fn agkit_to_a2a_a_new_message_instead_of_the_answer_goes_to_the_paused_task() {
    let agent = a2a::asking_agent().await;
    let (_proxy, mut chat) = agkit_to_a2a(&agent).await;
    chat.say("Weather?").await;

    // The user ignores the question and types; v0 has no way to decline an interrupt.
    let exchange = chat.say("Paris, please").await;

    assert_eq!(exchange.text(), "Paris is sunny.");
    let calls = a2a::calls(&agent, "message/stream");
    let message = a2a::sent_message(&calls[1]);
    assert_eq!(
        message["taskId"], "task-1",
        "the agent's paused task takes the next message (documented)"
    );
    assert_eq!(a2a::message_text(message), "Paris, please");
}

#[tokio::test]
async fn agkit_to_a2a_task_failed_before_any_text_is_an_http_502_with_the_reason() {
    let agent = a2a::failing_agent("task-1").await;
    let (proxy, chat) = agkit_to_a2a(&agent).await;

    let (status, body) = kit::refused(
        &proxy.url(&format!("{PATH}/send-message")),
        &chat.body(json!({"messages": [{"role": "user", "content": "Weather?"}]})),
    )
    .await;

    assert_eq!(status, 502, "useChat shows a non-2xx answer: {body}");
    assert_eq!(body["error"]["code"], "failed");
    assert_eq!(body["error"]["message"], "The weather service is down.");
}

#[tokio::test]
async fn agkit_to_a2a_task_failed_after_text_is_an_error_frame_then_done() {
    let agent = a2a::failing_after_half_an_answer().await;
    let (_proxy, mut chat) = agkit_to_a2a(&agent).await;

    let exchange = chat.say("Weather?").await;

    assert_eq!(exchange.types(), ["text", "error"]);
    assert_eq!(exchange.text(), "Half an ");
    let error = exchange.only("error");
    assert_eq!(error["code"], "failed");
    assert_eq!(error["message"], "The weather service is down.");
}

#[tokio::test]
async fn agkit_to_a2a_json_rpc_error_answer_is_an_http_502_with_its_code() {
    let agent = Agent::new()
        .on(
            "message/stream",
            a2a::error(-32602, "Invalid parameters: message.parts"),
        )
        .serve()
        .await;
    let (proxy, chat) = agkit_to_a2a(&agent).await;

    let (status, body) = kit::refused(
        &proxy.url(&format!("{PATH}/send-message")),
        &chat.body(json!({"messages": [{"role": "user", "content": "Weather?"}]})),
    )
    .await;

    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "-32602");
    assert_eq!(
        body["error"]["message"],
        "Invalid parameters: message.parts"
    );
}

#[tokio::test]
async fn agkit_to_a2a_client_disconnect_cancels_the_agents_task() {
    let agent = a2a::thinking_forever("task-1").await;
    let (proxy, chat) = agkit_to_a2a(&agent).await;
    let response = post_json(
        &proxy.url(&format!("{PATH}/send-message")),
        &chat.body(json!({"messages": [{"role": "user", "content": "Weather?"}]})),
    )
    .await;
    assert_eq!(response.status, 200);
    let mut stream = response.sse();
    assert_eq!(
        stream.next().await.expect("a first frame"),
        json!({"type": "text", "content": "Thinking"})
    );
    assert!(a2a::calls(&agent, "tasks/cancel").is_empty());

    drop(stream);

    let cancel = a2a::wait_for_call(&agent, "tasks/cancel").await;
    assert_eq!(cancel.body["params"], json!({"id": "task-1"}));
    assert!(
        agent.client_left_within(Duration::from_secs(5)).await,
        "the upstream stream is closed too"
    );
}

// --- A2A -> AG-Kit ----------------------------------------------------------------------------------------

#[tokio::test]
async fn a2a_to_agkit_text_streams_as_chunks_of_one_artifact() {
    let agent = kit::reply([
        kit::text("The weather "),
        kit::text("in Beijing "),
        kit::text("is sunny."),
    ])
    .serve()
    .await;
    let proxy = a2a_to_agkit(&agent).await;

    let results = a2a::stream_to_end(&proxy.url(PATH), a2a::message("Weather in Beijing?")).await;

    assert_eq!(results[0]["kind"], "task");
    let chunks: Vec<&Value> = results
        .iter()
        .filter(|r| r["kind"] == "artifact-update")
        .collect();
    let texts: Vec<String> = chunks
        .iter()
        .map(|c| a2a::message_text(&c["artifact"]))
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(texts, ["The weather ", "in Beijing ", "is sunny."]);
    let artifact = &chunks[0]["artifact"]["artifactId"];
    assert!(
        chunks
            .iter()
            .all(|c| &c["artifact"]["artifactId"] == artifact),
        "one artifact for the one message"
    );
    assert_eq!(chunks.last().unwrap()["lastChunk"], true);
    assert_eq!(a2a::final_status(&results)["state"], "completed");
    let request = agent.only_request();
    assert_eq!(
        request.body["messages"],
        json!([{"role": "user", "content": "Weather in Beijing?"}])
    );
    assert!(
        request.body["conversationId"]
            .as_str()
            .is_some_and(|id| uuid::Uuid::parse_str(id).is_ok()),
        "{}",
        request.body
    );
    assert_eq!(request.header("accept"), "text/event-stream");
}

#[tokio::test]
async fn a2a_to_agkit_message_send_returns_the_text_as_the_tasks_artifact() {
    let agent = kit::reply([kit::text("Sunny "), kit::text("and warm.")])
        .serve()
        .await;
    let proxy = a2a_to_agkit(&agent).await;

    let task = a2a::send_message(&proxy.url(PATH), a2a::message("Weather?")).await;

    assert_eq!(task["status"]["state"], "completed");
    assert_eq!(a2a::artifact_text(&task), "Sunny and warm.");
}

#[tokio::test]
async fn a2a_to_agkit_one_context_is_one_conversation_id_with_only_new_messages() {
    let agent = kit::memory_agent().await;
    let proxy = a2a_to_agkit(&agent).await;
    let url = proxy.url(PATH);

    let one = a2a::stream_to_end(&url, a2a::message_in("ctx-client-1", "my name is Ada")).await;
    let two = a2a::stream_to_end(&url, a2a::message_in("ctx-client-1", "what is my name?")).await;

    assert_eq!(a2a::streamed_text(&one), "Nice to meet you.");
    assert_eq!(a2a::streamed_text(&two), "Your name is Ada.");
    assert_eq!(two[0]["contextId"], "ctx-client-1");
    let received = agent.received();
    assert_eq!(received.len(), 2);
    let conversation = &received[0].body["conversationId"];
    assert!(conversation.as_str().is_some_and(|c| !c.is_empty()));
    assert_eq!(
        &received[1].body["conversationId"], conversation,
        "one conversationId per A2A context"
    );
    assert_eq!(
        kit::messages_of(&agent, 1),
        json!([{"role": "user", "content": "what is my name?"}]),
        "only the new message: the v0 agent keeps the history"
    );
}

#[tokio::test]
async fn a2a_to_agkit_two_contexts_are_two_conversation_ids() {
    let agent = kit::memory_agent().await;
    let proxy = a2a_to_agkit(&agent).await;
    let url = proxy.url(PATH);

    a2a::stream_to_end(&url, a2a::message_in("ctx-ada", "my name is Ada")).await;
    let other = a2a::stream_to_end(&url, a2a::message_in("ctx-other", "what is my name?")).await;

    assert_eq!(a2a::streamed_text(&other), "I do not know your name.");
    let received = agent.received();
    assert_ne!(
        received[0].body["conversationId"],
        received[1].body["conversationId"]
    );
}

/// A v0 agent that asks "Which city?" (a question interrupt) and answers "Paris is sunny." once resumed.
async fn asking_v0_agent() -> Upstream {
    Upstream::serve([
        kit::reply([kit::interrupt(
            "int_1",
            "question",
            json!({"question": "Which city?", "options": ["Paris", "Rome"]}),
        )]),
        kit::reply([kit::text("Paris "), kit::text("is sunny.")]),
    ])
    .await
}

#[tokio::test]
async fn a2a_to_agkit_interrupt_is_input_required_with_the_question() {
    let agent = asking_v0_agent().await;
    let proxy = a2a_to_agkit(&agent).await;

    let results = a2a::stream_to_end(&proxy.url(PATH), a2a::message("Weather?")).await;

    let status = a2a::final_status(&results);
    assert_eq!(status["state"], "input-required");
    assert_eq!(status["message"]["role"], "agent");
    assert_eq!(a2a::status_text(status), "Which city?");
    assert_eq!(
        data_parts(&status["message"]),
        [json!({"options": ["Paris", "Rome"]})],
        "the choices follow as a data part"
    );
    assert_eq!(a2a::streamed_text(&results), "", "not also shown as text");
}

#[tokio::test]
async fn a2a_to_agkit_answer_on_the_paused_task_is_the_v0_resume() {
    let agent = asking_v0_agent().await;
    let proxy = a2a_to_agkit(&agent).await;
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
    let received = agent.received();
    assert_eq!(received.len(), 2);
    let sent = &received[1].body;
    assert_eq!(
        sent["resume"],
        json!({"interruptId": "int_1", "payload": "\"Paris\""}),
        "the answer as JSON text"
    );
    assert!(
        sent.get("messages").is_none(),
        "the answer is the resume, not also a message: {sent}"
    );
    assert_eq!(sent["conversationId"], received[0].body["conversationId"]);
}

#[tokio::test]
async fn a2a_to_agkit_message_after_the_resumed_task_is_a_plain_delta() {
    let agent = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_1",
            "question",
            json!({"question": "Which city?"}),
        )]),
        kit::reply([kit::text("Paris is sunny.")]),
        kit::reply([kit::text("Rain tomorrow.")]),
    ])
    .await;
    let proxy = a2a_to_agkit(&agent).await;
    let url = proxy.url(PATH);
    let paused = a2a::stream_to_end(&url, a2a::message_in("ctx-client-9", "Weather?")).await;
    a2a::stream_to_end(&url, a2a::answer_to(paused.last().unwrap(), "Paris")).await;

    let next = a2a::stream_to_end(&url, a2a::message_in("ctx-client-9", "And tomorrow?")).await;

    assert_eq!(a2a::streamed_text(&next), "Rain tomorrow.");
    assert_ne!(next[0]["id"], paused[0]["id"], "a new task");
    let received = agent.received();
    assert_eq!(received.len(), 3);
    let sent = &received[2].body;
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": "And tomorrow?"}])
    );
    assert!(sent.get("resume").is_none(), "{sent}");
    assert_eq!(sent["conversationId"], received[0].body["conversationId"]);
}

#[tokio::test]
async fn a2a_to_agkit_agents_own_interrupt_carries_its_reason_and_payload_as_data() {
    let steps = json!({"steps": [{"description": "Dig hole", "status": "enabled"}]});
    let agent = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_7",
            "waiting_for_user_selection",
            steps.clone(),
        )]),
        kit::reply([kit::text("Digging.")]),
    ])
    .await;
    let proxy = a2a_to_agkit(&agent).await;
    let url = proxy.url(PATH);

    let paused = a2a::stream_to_end(&url, a2a::message("Plan the garden")).await;
    let status = a2a::final_status(&paused);
    assert_eq!(status["state"], "input-required");
    assert_eq!(
        data_parts(&status["message"]),
        [json!({"reason": "waiting_for_user_selection", "payload": steps})]
    );

    let resumed = a2a::stream_to_end(&url, a2a::answer_to(paused.last().unwrap(), "step 1")).await;

    assert_eq!(a2a::streamed_text(&resumed), "Digging.");
    assert_eq!(
        agent.received()[1].body["resume"],
        json!({"interruptId": "int_7", "payload": "\"step 1\""})
    );
}

#[tokio::test]
async fn a2a_to_agkit_canceling_the_paused_task_declines_the_interrupt_with_a_null_payload() {
    let agent = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_1",
            "question",
            json!({"question": "Which city?"}),
        )]),
        kit::reply([kit::text("Never mind then.")]),
        kit::reply([kit::text("Rain tomorrow.")]),
    ])
    .await;
    let proxy = a2a_to_agkit(&agent).await;
    let url = proxy.url(PATH);
    let paused = a2a::stream_to_end(&url, a2a::message_in("ctx-client-c", "Weather?")).await;
    let task_id = paused.last().unwrap()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();

    let canceled = a2a::cancel_task(&url, &task_id).await;

    assert_eq!(canceled["status"]["state"], "canceled");
    let declined = agent
        .wait_for("the declined interrupt", |r| r.body.get("resume").is_some())
        .await;
    assert_eq!(
        declined.body["resume"],
        json!({"interruptId": "int_1", "payload": "null"})
    );
    let next = a2a::stream_to_end(&url, a2a::message_in("ctx-client-c", "And tomorrow?")).await;
    assert_eq!(a2a::streamed_text(&next), "Rain tomorrow.");
    let sent = &agent.received()[2].body;
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": "And tomorrow?"}])
    );
    assert!(sent.get("resume").is_none(), "{sent}");
}

#[tokio::test]
async fn a2a_to_agkit_approval_refused_in_words_keeps_them_as_the_reason() {
    let agent = Upstream::serve([
        kit::reply([kit::interrupt(
            "int_1",
            "approval",
            json!({"toolName": "Shell", "args": {"command": "rm -rf ./old-logs"}}),
        )]),
        kit::reply([kit::text("Left them alone.")]),
    ])
    .await;
    let proxy = a2a_to_agkit(&agent).await;
    let url = proxy.url(PATH);
    let paused = a2a::stream_to_end(&url, a2a::message("Clean the logs")).await;

    a2a::stream_to_end(
        &url,
        a2a::answer_to(paused.last().unwrap(), "no, not today"),
    )
    .await;

    assert_eq!(
        agent.received()[1].body["resume"]["payload"],
        "{\"approved\":false,\"reason\":\"no, not today\"}"
    );
}

#[tokio::test]
async fn a2a_to_agkit_error_frame_fails_the_task_with_its_message() {
    let agent = kit::reply([
        kit::text("Half an "),
        json!({"type": "error", "code": "RATE_LIMIT", "message": "slow down"}),
    ])
    .serve()
    .await;
    let proxy = a2a_to_agkit(&agent).await;

    let results = a2a::stream_to_end(&proxy.url(PATH), a2a::message("Weather?")).await;

    assert_eq!(a2a::streamed_text(&results), "Half an ");
    let status = a2a::final_status(&results);
    assert_eq!(status["state"], "failed");
    let why = a2a::status_text(status);
    assert!(why.contains("slow down"), "{why}");
    assert!(why.contains("RATE_LIMIT"), "{why}");
}

#[tokio::test]
async fn a2a_to_agkit_server_tool_calls_are_dropped_and_the_text_arrives() {
    let mut events = kit::call("s1", "get_weather", &["{\"city\":", "\"Beijing\"}"]);
    events.push(kit::result("s1", "sunny, 25C"));
    events.push(kit::text("Sunny in Beijing."));
    let agent = kit::reply(events).serve().await;
    let proxy = a2a_to_agkit(&agent).await;

    let results = a2a::stream_to_end(&proxy.url(PATH), a2a::message("Weather?")).await;

    assert_eq!(a2a::streamed_text(&results), "Sunny in Beijing.");
    assert!(
        !results.iter().any(|r| {
            let text = r.to_string();
            text.contains("get_weather") || text.contains("sunny, 25C")
        }),
        "tool calls and results have no A2A form: {results:#?}"
    );
    assert_eq!(a2a::final_status(&results)["state"], "completed");
}
