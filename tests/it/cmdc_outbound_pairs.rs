//! The CMDC outbound through the real server on a real socket, one test per behaviour: AG-UI -> CMDC (a
//! CopilotKit-style frontend in front of a CMDC gateway), AG-Kit -> CMDC (a CMDC gateway exposed as an AG-Kit
//! endpoint), A2A -> CMDC and AgentScope -> CMDC, across text, server tools, turns of one session, approvals
//! and questions, gateway failures and client disconnect.
//!
//! The gateway is `support::cmdc::Gateway`, scripted per prompt and written to `specs/cmdc.md`: stateful
//! sessions, `POST …/prompt` only enqueues, the events come on `GET …/events`, and — as the real gateway —
//! events published while no subscriber is attached are lost. Every AG-UI stream the proxy serves must pass
//! the AG-UI conservative profile.

use http::Method;
use serde_json::{json, Value};

use crate::support;
use crate::support::ag_kit::Chat;
use crate::support::ag_ui;
use crate::support::cmdc::{self, Gateway, History, Options, Step, KEY};
use crate::support::{a2a, agentscope as scope, CmdcClient, Proxy, Received, Route};

const PATH: &str = "/agents/pair";
const MODEL: &str = "deepseek:deepseek-chat";

/// A route from `inbound` to the CMDC gateway at `upstream`, with `key` and [`MODEL`].
fn route(inbound: &str, upstream: &str, key: &str) -> Route {
    let route = Route::new("pair", PATH, inbound, "cmdc")
        .upstream(upstream)
        .upstream_headers(&[("X-API-Key", key)])
        .translate("model", MODEL);
    // The AG-UI clients here answer pauses as calls of `confirmAction` / `ask_user` without declaring those
    // tools (as frontends before outcome interrupts did): the route pins the tool mode.
    if inbound == "ag-ui" {
        route.translate("agui_interrupts", "tool")
    } else {
        route
    }
}

/// A route from `inbound` to `gateway`, with the right key and [`MODEL`].
async fn proxy(inbound: &str, gateway: &Gateway) -> Proxy {
    Proxy::start(route(inbound, &gateway.url(), KEY)).await
}

/// The AG-UI inbound's run URL.
fn agui(proxy: &Proxy) -> String {
    proxy.url(PATH)
}

/// The AG-Kit inbound's `send-message` URL.
fn send_message(proxy: &Proxy) -> String {
    proxy.url(&format!("{PATH}/send-message"))
}

/// The AgentScope inbound's `/process` URL.
fn process(proxy: &Proxy) -> String {
    proxy.url(&format!("{PATH}/process"))
}

/// Whether `request` is `method` on `/v1/sessions/<session><suffix>`.
fn is(request: &Received, method: &str, session: &str, suffix: &str) -> bool {
    request.method == method && request.path == format!("/v1/sessions/{session}{suffix}")
}

/// A conversation's first AG-UI run (`thread-1`, `run-1`): the user's `text` alone.
async fn first_agui_run(proxy: &Proxy, text: &str) -> Vec<Value> {
    ag_ui::run(
        &agui(proxy),
        &ag_ui::input("thread-1", "run-1", json!([ag_ui::user("u1", text)])),
    )
    .await
}

/// The next AG-UI run of a conversation: `history` as it stands.
fn run_input(run_id: &str, history: &[Value]) -> Value {
    ag_ui::input("thread-1", run_id, Value::Array(history.to_vec()))
}

// --- Scripts ---------------------------------------------------------------------------------------------

/// "Clean the logs" asks to approve `rm -rf ./old-logs`; approved, it deletes them, rejected, it leaves them;
/// any other prompt is answered "It is noon.".
fn cleaner(text: &str, _: &History) -> Vec<Step> {
    if !text.contains("Clean the logs") {
        return cmdc::reply(&["It is noon."]);
    }
    vec![cmdc::approval(
        "apr_1",
        "Shell",
        json!({"command": "rm -rf ./old-logs"}),
        "dangerous: deletes files",
        cmdc::reply(&["Deleted ", "the old logs."]),
        cmdc::reply(&["Left them ", "alone."]),
    )]
}

/// "Weather?" asks which city (Paris or Rome), then reports the weather of the answer (an empty answer:
/// "No city, no weather."); any other prompt is answered "It is noon.".
fn asker(text: &str, _: &History) -> Vec<Step> {
    if !text.contains("Weather?") {
        return cmdc::reply(&["It is noon."]);
    }
    vec![cmdc::ask(
        "ask_001",
        "Which city?",
        Some(&["Paris", "Rome"]),
        |city| match city {
            "" => cmdc::reply(&["No city, no weather."]),
            city => cmdc::reply(&[city, " is sunny."]),
        },
    )]
}

// --- AG-UI -> CMDC -----------------------------------------------------------------------------------------

#[tokio::test]
async fn agui_to_cmdc_streams_text_in_order() {
    let gateway = Gateway::replying(&["The weather ", "in Paris ", "is sunny."]).await;
    let proxy = proxy("ag-ui", &gateway).await;

    let events = first_agui_run(&proxy, "Weather in Paris?").await;

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
        ]
    );
    assert_eq!(
        ag_ui::deltas(&events),
        ["The weather ", "in Paris ", "is sunny."]
    );
    assert_eq!(events[1]["role"], "assistant");
    assert_eq!(gateway.prompts(), ["Weather in Paris?"]);
}

#[tokio::test]
async fn agui_to_cmdc_creates_the_session_once_with_the_routes_model_and_the_system_prompt() {
    let gateway = Gateway::replying(&["Sunny."]).await;
    let proxy = proxy("ag-ui", &gateway).await;
    let system = json!({"id": "s1", "role": "system", "content": "You are a terse weather bot."});
    let mut history = vec![system, ag_ui::user("u1", "Weather in Paris?")];

    let first = ag_ui::run(&agui(&proxy), &run_input("run-1", &history)).await;
    history.push(ag_ui::kept_text(&first));
    history.push(ag_ui::user("u2", "And in Rome?"));
    ag_ui::run(&agui(&proxy), &run_input("run-2", &history)).await;

    let created = gateway.requests("POST sessions");
    assert_eq!(created.len(), 1, "one session for the conversation");
    assert_eq!(created[0].body["model"], MODEL);
    assert_eq!(
        created[0].body["systemPrompt"],
        "You are a terse weather bot."
    );
    assert_eq!(created[0].header("x-api-key"), KEY);
    assert_eq!(created[0].header("content-type"), "application/json");
    let session = gateway.session();
    let history = gateway.history(&session).expect("the session lives");
    assert_eq!(history.model, MODEL);
    assert_eq!(
        gateway.log(),
        [
            "POST sessions",
            "GET events",
            "POST prompt",
            "GET events",
            "POST prompt"
        ]
    );
    assert!(
        gateway
            .received()
            .iter()
            .skip(1)
            .all(|r| r.path.starts_with(&format!("/v1/sessions/{session}/"))),
        "every call goes to the one session: {:?}",
        gateway.received()
    );
    assert!(
        gateway
            .received()
            .iter()
            .all(|r| r.header("x-api-key") == KEY),
        "the key goes with every call"
    );
}

#[tokio::test]
async fn agui_to_cmdc_second_turn_prompts_only_the_new_text_and_the_session_remembers() {
    let gateway = Gateway::start(cmdc::memory).await;
    let proxy = proxy("ag-ui", &gateway).await;
    let mut history = vec![ag_ui::user("u1", "Hi, my name is Ada.")];

    let first = ag_ui::run(&agui(&proxy), &run_input("run-1", &history)).await;
    assert_eq!(ag_ui::text_of(&first), "Nice to meet you.");
    history.push(ag_ui::kept_text(&first));
    history.push(ag_ui::user("u2", "What is my name?"));
    let second = ag_ui::run(&agui(&proxy), &run_input("run-2", &history)).await;

    assert_eq!(ag_ui::text_of(&second), "Your name is Ada.");
    assert_eq!(
        gateway.prompts(),
        ["Hi, my name is Ada.", "What is my name?"],
        "the gateway keeps the history: each turn sends only its new text"
    );
    assert_eq!(gateway.sessions().len(), 1);

    // Another thread is another session, which knows nothing.
    let elsewhere = ag_ui::run(
        &agui(&proxy),
        &ag_ui::input(
            "thread-2",
            "run-1",
            json!([ag_ui::user("u1", "What is my name?")]),
        ),
    )
    .await;
    assert_eq!(ag_ui::text_of(&elsewhere), "I do not know your name.");
    assert_eq!(gateway.sessions().len(), 2);
}

#[tokio::test]
async fn agui_to_cmdc_subscribes_before_prompting_so_a_fast_run_loses_nothing() {
    // No delay anywhere: the run is published the moment the prompt is accepted, and this gateway, like the
    // real one, drops what is published while nobody listens.
    let gateway = Gateway::start(|_, _| {
        [
            vec![cmdc::event("thinking_start", json!({}))],
            cmdc::text(&["first ", "and ", "last"]),
            vec![cmdc::end("first and last")],
        ]
        .concat()
    })
    .await;
    let proxy = proxy("ag-ui", &gateway).await;

    let events = first_agui_run(&proxy, "Go").await;

    assert_eq!(ag_ui::text_of(&events), "first and last");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    assert_eq!(
        gateway.lost(),
        [],
        "no event was published before the proxy subscribed"
    );
    let session = gateway.session();
    assert_eq!(
        gateway.published(&session)[..2],
        ["prompt_received", "agent_start"]
    );
    let received = gateway.received();
    let subscribed = received
        .iter()
        .position(|r| is(r, "GET", &session, "/events"))
        .expect("a subscription");
    let prompted = received
        .iter()
        .position(|r| is(r, "POST", &session, "/prompt"))
        .expect("a prompt");
    assert!(
        subscribed < prompted,
        "subscribe, then prompt: {:?}",
        gateway.log()
    );
    assert_eq!(received[subscribed].header("accept"), "text/event-stream");
}

#[tokio::test]
async fn agui_to_cmdc_server_tool_execution_is_a_tool_call_with_its_result_then_text() {
    let gateway = Gateway::start(|_, _| {
        [
            cmdc::text(&["Let me check."]),
            cmdc::tool_execution(
                "tc_a1b2c3",
                "Shell",
                json!({"command": "date +%A"}),
                "Monday",
            ),
            cmdc::reply(&["It is ", "Monday."]),
        ]
        .concat()
    })
    .await;
    let proxy = proxy("ag-ui", &gateway).await;

    let events = first_agui_run(&proxy, "What day is it?").await;

    assert_eq!(
        ag_ui::calls(&events),
        [(
            "tc_a1b2c3".to_owned(),
            "Shell".to_owned(),
            json!({"command": "date +%A"})
        )]
    );
    let result = ag_ui::only(&events, "TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], "tc_a1b2c3");
    assert_eq!(result["content"], "Monday");
    assert_eq!(ag_ui::text_of(&events), "Let me check.It is Monday.");
    let kinds = ag_ui::types(&events);
    let at = |kind: &str| kinds.iter().position(|k| *k == kind).unwrap();
    assert!(at("TOOL_CALL_START") < at("TOOL_CALL_RESULT"));
    assert!(
        kinds
            .iter()
            .rposition(|k| *k == "TEXT_MESSAGE_START")
            .unwrap()
            > at("TOOL_CALL_RESULT"),
        "the text after the tool follows its result: {kinds:?}"
    );
    assert_eq!(
        ag_ui::all(&events, "TEXT_MESSAGE_START").len(),
        2,
        "each LLM step is its own message"
    );
}

/// Runs "Clean the logs" against a [`cleaner`] gateway and returns the first run's history and events.
async fn agui_approval_asked(proxy: &Proxy) -> (Vec<Value>, Vec<Value>) {
    let history = vec![ag_ui::user("u1", "Clean the logs")];
    let events = ag_ui::run(&agui(proxy), &run_input("run-1", &history)).await;
    (history, events)
}

/// The client's history after [`agui_approval_asked`]: the prompt and the `confirmAction` call `apr_1` it
/// kept, for the next run to answer (or ignore).
async fn agui_approval_call_kept(proxy: &Proxy) -> Vec<Value> {
    let (mut history, asked) = agui_approval_asked(proxy).await;
    history.push(ag_ui::kept_call(&asked, "apr_1"));
    history
}

#[tokio::test]
async fn agui_to_cmdc_approval_is_a_confirm_action_call_whose_id_is_the_approval_id() {
    let gateway = Gateway::start(cleaner).await;
    let proxy = proxy("ag-ui", &gateway).await;

    let (_, events) = agui_approval_asked(&proxy).await;

    let calls = ag_ui::calls(&events);
    assert_eq!(calls.len(), 1, "{events:#?}");
    let (call_id, name, args) = &calls[0];
    assert_eq!(call_id, "apr_1");
    assert_eq!(name, "confirmAction");
    assert_eq!(args["tool"], "Shell");
    assert_eq!(args["arguments"], json!({"command": "rm -rf ./old-logs"}));
    assert_eq!(args["action"], "dangerous: deletes files");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    assert!(ag_ui::all(&events, "TOOL_CALL_RESULT").is_empty());
    assert_eq!(
        gateway.requests("POST approve").len() + gateway.requests("POST reject").len(),
        0,
        "nothing is decided for the user"
    );
}

#[tokio::test]
async fn agui_to_cmdc_yes_to_confirm_action_approves_and_the_run_goes_on() {
    let gateway = Gateway::start(cleaner).await;
    let proxy = proxy("ag-ui", &gateway).await;
    let mut history = agui_approval_call_kept(&proxy).await;
    history.push(ag_ui::tool_result("t1", "apr_1", "yes"));

    let events = ag_ui::run(&agui(&proxy), &run_input("run-2", &history)).await;

    assert_eq!(ag_ui::text_of(&events), "Deleted the old logs.");
    let session = gateway.session();
    let approve = gateway.wait_for_request("POST approve").await;
    assert!(is(&approve, "POST", &session, "/approve"));
    assert_eq!(approve.body, json!({"approvalId": "apr_1"}));
    assert_eq!(
        gateway.log(),
        [
            "POST sessions",
            "GET events",
            "POST prompt",
            "GET events",
            "POST approve"
        ],
        "subscribed before approving; the answer is not also a prompt"
    );
    assert_eq!(gateway.lost(), []);
    assert!(gateway
        .published(&session)
        .contains(&"approval_resolved".to_owned()));
}

#[tokio::test]
async fn agui_to_cmdc_no_to_confirm_action_rejects_and_the_run_goes_on() {
    let gateway = Gateway::start(cleaner).await;
    let proxy = proxy("ag-ui", &gateway).await;
    let mut history = agui_approval_call_kept(&proxy).await;
    history.push(ag_ui::tool_result("t1", "apr_1", "no"));

    let events = ag_ui::run(&agui(&proxy), &run_input("run-2", &history)).await;

    assert_eq!(ag_ui::text_of(&events), "Left them alone.");
    let reject = gateway.wait_for_request("POST reject").await;
    assert_eq!(reject.body, json!({"approvalId": "apr_1"}));
    assert!(gateway.requests("POST approve").is_empty());
    assert_eq!(
        gateway.log(),
        [
            "POST sessions",
            "GET events",
            "POST prompt",
            "GET events",
            "POST reject"
        ]
    );
}

#[tokio::test]
async fn agui_to_cmdc_ask_user_is_a_question_tool_call_and_the_answer_is_responded() {
    let gateway = Gateway::start(asker).await;
    let proxy = proxy("ag-ui", &gateway).await;
    let mut history = vec![ag_ui::user("u1", "Weather?")];

    let asked = ag_ui::run(&agui(&proxy), &run_input("run-1", &history)).await;

    let calls = ag_ui::calls(&asked);
    assert_eq!(calls.len(), 1, "{asked:#?}");
    let (call_id, name, args) = &calls[0];
    assert_eq!(call_id, "ask_001");
    assert_eq!(name, "ask_user");
    assert_eq!(args["question"], "Which city?");
    assert_eq!(args["options"], json!(["Paris", "Rome"]));

    history.push(ag_ui::kept_call(&asked, "ask_001"));
    history.push(ag_ui::tool_result("t1", "ask_001", "Paris"));
    let answered = ag_ui::run(&agui(&proxy), &run_input("run-2", &history)).await;

    assert_eq!(ag_ui::text_of(&answered), "Paris is sunny.");
    let respond = gateway.wait_for_request("POST respond").await;
    assert_eq!(respond.body, json!({"ref": "ask_001", "response": "Paris"}));
    assert_eq!(
        gateway.prompts(),
        ["Weather?"],
        "the answer is not a prompt"
    );
    assert_eq!(
        gateway.log()[3..],
        ["GET events", "POST respond"],
        "subscribed before responding"
    );
}

#[tokio::test]
async fn agui_to_cmdc_new_message_instead_of_an_answer_rejects_the_approval_then_prompts() {
    let gateway = Gateway::start(cleaner).await;
    let proxy = proxy("ag-ui", &gateway).await;
    let mut history = agui_approval_call_kept(&proxy).await;
    // The user ignores the confirmation and asks something else.
    history.push(ag_ui::user("u2", "What time is it?"));

    let events = ag_ui::run(&agui(&proxy), &run_input("run-2", &history)).await;

    assert!(
        ag_ui::text_of(&events).ends_with("It is noon."),
        "the new question is answered: {events:#?}"
    );
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    assert_eq!(
        gateway.log()[3..],
        ["GET events", "POST reject", "GET events", "POST prompt"],
        "the paused run is declined first, so the prompt is not queued behind it"
    );
    assert_eq!(
        gateway.requests("POST reject")[0].body,
        json!({"approvalId": "apr_1"})
    );
    assert_eq!(gateway.prompts(), ["Clean the logs", "What time is it?"]);
}

#[tokio::test]
async fn agui_to_cmdc_agent_abort_max_turns_exceeded_is_a_run_error() {
    let gateway = Gateway::start(|_, _| {
        [
            cmdc::tool_execution("tc_1", "Shell", json!({"command": "ls"}), "a b"),
            vec![cmdc::abort("max_turns_exceeded")],
        ]
        .concat()
    })
    .await;
    let proxy = proxy("ag-ui", &gateway).await;

    let events = first_agui_run(&proxy, "Go").await;

    let error = ag_ui::run_error(&events);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("max_turns_exceeded"),
        "{error}"
    );
}

#[tokio::test]
async fn agui_to_cmdc_wrong_api_key_is_a_run_error_naming_401() {
    let gateway = Gateway::replying(&["Hi"]).await;
    let proxy = Proxy::start(route("ag-ui", &gateway.url(), "sk-wrong")).await;

    let events = first_agui_run(&proxy, "Hello").await;

    let error = ag_ui::run_error(&events);
    assert!(
        error["message"].as_str().unwrap().contains("401"),
        "{error}"
    );
    assert_eq!(gateway.log(), ["POST sessions"]);
    assert!(gateway.sessions().is_empty());
}

#[tokio::test]
async fn agui_to_cmdc_client_disconnect_mid_run_aborts_the_gateway_run() {
    let gateway = Gateway::start(|text, _| {
        if text == "Never mind" {
            return cmdc::reply(&["OK."]);
        }
        [cmdc::text(&["Working on it"]), vec![cmdc::hang()]].concat()
    })
    .await;
    let proxy = proxy("ag-ui", &gateway).await;
    let input = ag_ui::input("thread-1", "run-1", json!([ag_ui::user("u1", "Long job")]));

    let mut stream = ag_ui::start(&agui(&proxy), &input).await;
    let events = stream.until("TEXT_MESSAGE_CONTENT").await;
    assert_eq!(ag_ui::deltas(&events), ["Working on it"]);
    drop(stream);

    let session = gateway.session();
    let abort = gateway
        .wait_for("the run's abort", |r| is(r, "POST", &session, "/abort"))
        .await;
    assert_eq!(abort.header("x-api-key"), KEY);
    support::within("the gateway run to end", async {
        while !gateway
            .published(&session)
            .contains(&"agent_abort".to_owned())
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        !gateway.log().iter().any(|r| r.starts_with("DELETE")),
        "the session (its history) is kept: {:?}",
        gateway.log()
    );

    // The conversation goes on in the same session.
    let next = ag_ui::input(
        "thread-1",
        "run-2",
        json!([
            ag_ui::user("u1", "Long job"),
            ag_ui::user("u2", "Never mind")
        ]),
    );
    let events = ag_ui::run(&agui(&proxy), &next).await;
    assert_eq!(ag_ui::text_of(&events), "OK.");
    assert_eq!(gateway.sessions(), [session]);
    assert_eq!(gateway.prompts(), ["Long job", "Never mind"]);
}

#[tokio::test]
async fn agui_to_cmdc_killed_session_is_created_again_and_the_turn_succeeds() {
    let gateway = Gateway::replying(&["Sunny."]).await;
    let proxy = proxy("ag-ui", &gateway).await;
    let mut history = vec![ag_ui::user("u1", "Weather in Paris?")];
    let first = ag_ui::run(&agui(&proxy), &run_input("run-1", &history)).await;
    let old = gateway.session();
    gateway.kill(&old);

    history.push(ag_ui::kept_text(&first));
    history.push(ag_ui::user("u2", "And tomorrow?"));
    let second = ag_ui::run(&agui(&proxy), &run_input("run-2", &history)).await;

    assert_eq!(ag_ui::text_of(&second), "Sunny.");
    let sessions = gateway.sessions();
    assert_eq!(sessions.len(), 2, "a new session: {:?}", gateway.log());
    let new = &sessions[1];
    assert_ne!(new, &old);
    assert_eq!(
        gateway.requests("POST sessions")[1].body["model"],
        MODEL,
        "created with the route's model"
    );
    let history = gateway.history(new).expect("the new session lives");
    assert_eq!(history.prompts, ["And tomorrow?"]);
    // A third turn stays in the new session.
    let mut third = run_input("run-3", &[]);
    third["messages"] = json!([
        ag_ui::user("u1", "Weather in Paris?"),
        ag_ui::kept_text(&first),
        ag_ui::user("u2", "And tomorrow?"),
        ag_ui::kept_text(&second),
        ag_ui::user("u3", "Thanks")
    ]);
    ag_ui::run(&agui(&proxy), &third).await;
    assert_eq!(gateway.sessions().len(), 2);
    assert_eq!(
        gateway.history(new).unwrap().prompts,
        ["And tomorrow?", "Thanks"]
    );
}

#[tokio::test]
async fn agui_to_cmdc_recreated_session_keeps_the_conversations_system_prompt() {
    let gateway = Gateway::replying(&["Sunny."]).await;
    let proxy = proxy("ag-ui", &gateway).await;
    let mut history = vec![
        json!({"id": "s1", "role": "system", "content": "You are a terse weather bot."}),
        ag_ui::user("u1", "Weather in Paris?"),
    ];
    let first = ag_ui::run(&agui(&proxy), &run_input("run-1", &history)).await;
    gateway.kill(&gateway.session());

    history.push(ag_ui::kept_text(&first));
    history.push(ag_ui::user("u2", "And tomorrow?"));
    ag_ui::run(&agui(&proxy), &run_input("run-2", &history)).await;

    let created = gateway.requests("POST sessions");
    assert_eq!(created.len(), 2);
    assert_eq!(
        created[1].body["systemPrompt"], "You are a terse weather bot.",
        "the client's system message still holds for the new session"
    );
}

#[tokio::test]
async fn agui_to_cmdc_turn_after_an_answered_approval_prompts_only_the_new_message() {
    let gateway = Gateway::start(|text, _| {
        if !text.contains("Clean the logs") {
            return cmdc::reply(&["You are welcome."]);
        }
        [
            cmdc::text(&["I will delete them."]),
            vec![cmdc::approval(
                "apr_1",
                "Shell",
                json!({"command": "rm -rf ./old-logs"}),
                "",
                cmdc::reply(&["Deleted."]),
                cmdc::reply(&["Kept."]),
            )],
        ]
        .concat()
    })
    .await;
    let proxy = proxy("ag-ui", &gateway).await;
    let mut history = vec![ag_ui::user("u1", "Clean the logs")];

    let asked = ag_ui::run(&agui(&proxy), &run_input("run-1", &history)).await;
    assert_eq!(ag_ui::text_of(&asked), "I will delete them.");
    // The client keeps the text and the confirmation call in one assistant message (the call's parent).
    let mut kept = ag_ui::kept_text(&asked);
    kept["toolCalls"] = ag_ui::kept_call(&asked, "apr_1")["toolCalls"].clone();
    history.push(kept);
    history.push(ag_ui::tool_result("t1", "apr_1", "yes"));
    let answered = ag_ui::run(&agui(&proxy), &run_input("run-2", &history)).await;
    assert_eq!(ag_ui::text_of(&answered), "Deleted.");
    history.push(ag_ui::kept_text(&answered));
    history.push(ag_ui::user("u3", "Thanks"));
    let after = ag_ui::run(&agui(&proxy), &run_input("run-3", &history)).await;

    assert_eq!(ag_ui::text_of(&after), "You are welcome.");
    assert_eq!(gateway.prompts(), ["Clean the logs", "Thanks"]);
    assert_eq!(gateway.requests("POST approve").len(), 1, "answered once");
    assert!(gateway.requests("POST reject").is_empty());
    assert_eq!(gateway.sessions().len(), 1);
}

#[tokio::test]
async fn agui_to_cmdc_new_message_instead_of_an_answer_responds_empty_then_prompts() {
    let gateway = Gateway::start(asker).await;
    let proxy = proxy("ag-ui", &gateway).await;
    let mut history = vec![ag_ui::user("u1", "Weather?")];
    let asked = ag_ui::run(&agui(&proxy), &run_input("run-1", &history)).await;
    history.push(ag_ui::kept_call(&asked, "ask_001"));
    history.push(ag_ui::user("u2", "What time is it?"));

    let events = ag_ui::run(&agui(&proxy), &run_input("run-2", &history)).await;

    assert!(
        ag_ui::text_of(&events).ends_with("It is noon."),
        "the new question is answered: {events:#?}"
    );
    assert_eq!(
        gateway.log()[3..],
        ["GET events", "POST respond", "GET events", "POST prompt"],
        "the question is declined first, so the prompt is not queued behind it"
    );
    assert_eq!(
        gateway.requests("POST respond")[0].body,
        json!({"ref": "ask_001", "response": ""})
    );
}

#[tokio::test]
async fn agui_to_cmdc_heartbeats_and_unknown_events_do_not_disturb_the_text() {
    let options = Options {
        heartbeat: std::time::Duration::from_millis(10),
        ..Options::default()
    };
    let gateway = Gateway::start_with(options, |_, _| {
        vec![
            cmdc::event("message_start", json!({})),
            cmdc::event("message_delta", json!({"delta": "Hel"})),
            cmdc::event("model_switched", json!({"from": "a", "to": "b"})),
            cmdc::delay(60),
            cmdc::event("plugin_event", json!({"name": "x", "data": {}})),
            cmdc::event("message_delta", json!({"delta": ""})),
            cmdc::event("message_delta", json!({"delta": "lo"})),
            cmdc::end("Hello"),
        ]
    })
    .await;
    let proxy = proxy("ag-ui", &gateway).await;

    let events = first_agui_run(&proxy, "Hi").await;

    assert_eq!(ag_ui::deltas(&events), ["Hel", "lo"]);
    assert_eq!(ag_ui::all(&events, "TEXT_MESSAGE_START").len(), 1);
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
}

#[tokio::test]
async fn agui_to_cmdc_session_killed_mid_run_is_a_run_error() {
    let gateway =
        Gateway::start(|_, _| [cmdc::text(&["Working"]), vec![cmdc::hang()]].concat()).await;
    let proxy = proxy("ag-ui", &gateway).await;
    let input = ag_ui::input("thread-1", "run-1", json!([ag_ui::user("u1", "Long job")]));
    let mut stream = ag_ui::start(&agui(&proxy), &input).await;
    let mut events = stream.until("TEXT_MESSAGE_CONTENT").await;

    gateway.kill(&gateway.session());
    events.extend(stream.rest().await);

    ag_ui::check(&stream.raw, &events, &input, ag_ui::Profile::CONSERVATIVE);
    let error = ag_ui::run_error(&events);
    assert_eq!(error["code"], "UPSTREAM_EOF", "{error}");
    assert_eq!(ag_ui::text_of(&events), "Working");
}

#[tokio::test]
async fn agui_to_cmdc_prompt_queued_behind_an_unaborted_run_reads_only_its_own_run() {
    // A 0.1 gateway has no /abort: the run the client left keeps going when the next prompt comes.
    let options = Options {
        abort_endpoint: false,
        ..Options::default()
    };
    let gateway = Gateway::start_with(options, |text, _| {
        if text.contains("Second") {
            return cmdc::reply(&["Second ", "answer."]);
        }
        [
            cmdc::text(&["Working"]),
            vec![cmdc::delay(1500)],
            cmdc::reply(&["First ", "answer."]),
        ]
        .concat()
    })
    .await;
    let proxy = proxy("ag-ui", &gateway).await;
    let first = ag_ui::input("thread-1", "run-1", json!([ag_ui::user("u1", "First job")]));
    let mut stream = ag_ui::start(&agui(&proxy), &first).await;
    stream.until("TEXT_MESSAGE_CONTENT").await;
    drop(stream);
    gateway.wait_for_request("POST abort").await;

    let second = ag_ui::input(
        "thread-1",
        "run-2",
        json!([
            ag_ui::user("u1", "First job"),
            ag_ui::user("u2", "Second job")
        ]),
    );
    let events = ag_ui::run(&agui(&proxy), &second).await;

    assert_eq!(
        ag_ui::text_of(&events),
        "Second answer.",
        "the earlier run's end is not this turn's answer"
    );
    assert_eq!(gateway.prompts(), ["First job", "Second job"]);
    let session = gateway.session();
    let published = gateway.published(&session);
    let ends: Vec<usize> = published
        .iter()
        .enumerate()
        .filter(|(_, e)| *e == "agent_end")
        .map(|(i, _)| i)
        .collect();
    let second_prompt = published
        .iter()
        .rposition(|e| e == "prompt_received")
        .unwrap();
    assert!(
        ends[0] < second_prompt,
        "the second prompt was queued behind the first run: {published:?}"
    );
}

#[tokio::test]
async fn agui_to_cmdc_second_approval_in_the_same_run_pauses_again() {
    let gateway = Gateway::start(|_, _| {
        vec![cmdc::approval(
            "apr_1",
            "Shell",
            json!({"command": "rm -rf ./old-logs"}),
            "deletes the logs",
            vec![cmdc::approval(
                "apr_2",
                "Shell",
                json!({"command": "rm -rf ./tmp"}),
                "deletes tmp",
                cmdc::reply(&["Both gone."]),
                cmdc::reply(&["Only the logs are gone."]),
            )],
            cmdc::reply(&["Nothing deleted."]),
        )]
    })
    .await;
    let proxy = proxy("ag-ui", &gateway).await;
    let mut history = vec![ag_ui::user("u1", "Clean everything")];
    let first = ag_ui::run(&agui(&proxy), &run_input("run-1", &history)).await;
    history.push(ag_ui::kept_call(&first, "apr_1"));
    history.push(ag_ui::tool_result("t1", "apr_1", "yes"));

    let second = ag_ui::run(&agui(&proxy), &run_input("run-2", &history)).await;

    let calls = ag_ui::calls(&second);
    assert_eq!(calls.len(), 1, "{second:#?}");
    assert_eq!(calls[0].0, "apr_2");
    assert_eq!(calls[0].1, "confirmAction");
    assert_eq!(calls[0].2["arguments"], json!({"command": "rm -rf ./tmp"}));
    history.push(ag_ui::kept_call(&second, "apr_2"));
    history.push(ag_ui::tool_result("t2", "apr_2", "no"));

    let third = ag_ui::run(&agui(&proxy), &run_input("run-3", &history)).await;

    assert_eq!(ag_ui::text_of(&third), "Only the logs are gone.");
    assert_eq!(
        gateway.log()[3..],
        ["GET events", "POST approve", "GET events", "POST reject"]
    );
    assert_eq!(
        gateway.requests("POST reject")[0].body,
        json!({"approvalId": "apr_2"})
    );
}

#[tokio::test]
async fn agui_to_cmdc_answer_and_new_message_in_one_turn_approve_then_prompt() {
    let gateway = Gateway::start(cleaner).await;
    let proxy = proxy("ag-ui", &gateway).await;
    let mut history = agui_approval_call_kept(&proxy).await;
    history.push(ag_ui::tool_result("t1", "apr_1", "yes"));
    history.push(ag_ui::user("u2", "And what time is it?"));

    let events = ag_ui::run(&agui(&proxy), &run_input("run-2", &history)).await;

    assert_eq!(ag_ui::text_of(&events), "Deleted the old logs.It is noon.");
    assert_eq!(
        gateway.log()[3..],
        ["GET events", "POST approve", "GET events", "POST prompt"]
    );
    assert_eq!(
        gateway.prompts(),
        ["Clean the logs", "And what time is it?"]
    );
}

#[tokio::test]
async fn agui_to_cmdc_route_timeout_is_a_run_error_and_aborts_the_gateway_run() {
    let gateway =
        Gateway::start(|_, _| [cmdc::text(&["Thinking"]), vec![cmdc::hang()]].concat()).await;
    let proxy = Proxy::start(route("ag-ui", &gateway.url(), KEY).timeout("1s")).await;

    let events = first_agui_run(&proxy, "Long job").await;

    assert_eq!(ag_ui::run_error(&events)["code"], "UPSTREAM_TIMEOUT");
    let session = gateway.session();
    gateway
        .wait_for("the run's abort", |r| is(r, "POST", &session, "/abort"))
        .await;
}

#[tokio::test]
async fn agui_to_cmdc_frontend_tool_is_a_callback_tool_answered_by_the_clients_result() {
    let gateway = Gateway::start(|_, _| {
        vec![cmdc::call_tool(
            "tc_bg",
            "change_background",
            json!({"color": "blue"}),
            |result| cmdc::reply(&["Done: ", result]),
        )]
    })
    .await;
    let proxy = proxy("ag-ui", &gateway).await;
    let mut history = vec![ag_ui::user("u1", "Make the background blue")];
    let mut first = run_input("run-1", &history);
    first["tools"] = json!([ag_ui::tool("change_background")]);

    let called = ag_ui::run(&agui(&proxy), &first).await;

    assert_eq!(
        ag_ui::calls(&called),
        [(
            "tc_bg".to_owned(),
            "change_background".to_owned(),
            json!({"color": "blue"})
        )],
        "{called:#?}"
    );
    assert!(ag_ui::all(&called, "TOOL_CALL_RESULT").is_empty());
    let registered = gateway.wait_for_request("POST tools").await;
    assert_eq!(registered.body["name"], "change_background");
    assert!(
        registered.body["callbackUrl"]
            .as_str()
            .is_some_and(|u| u.starts_with("http://")),
        "{registered:?}"
    );

    history.push(ag_ui::kept_call(&called, "tc_bg"));
    history.push(ag_ui::tool_result("t1", "tc_bg", "Background is blue"));
    let mut second = run_input("run-2", &history);
    second["tools"] = first["tools"].clone();
    let events = ag_ui::run(&agui(&proxy), &second).await;

    assert_eq!(ag_ui::text_of(&events), "Done: Background is blue");
    assert_eq!(
        gateway.prompts(),
        ["Make the background blue"],
        "the result is not a prompt"
    );
    assert_eq!(gateway.requests("POST tools").len(), 1, "registered once");
}

// --- AG-Kit -> CMDC (a CMDC gateway exposed as AG-Kit) ----------------------------------------------------

#[tokio::test]
async fn agkit_to_cmdc_streams_text_in_order() {
    let gateway = Gateway::replying(&["The weather ", "in Paris ", "is sunny."]).await;
    let proxy = proxy("ag-kit", &gateway).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let exchange = chat.say("Weather in Paris?").await;

    assert_eq!(exchange.types(), ["text", "text", "text"]);
    let contents: Vec<&str> = exchange
        .events()
        .filter_map(|e| e["content"].as_str())
        .collect();
    assert_eq!(contents, ["The weather ", "in Paris ", "is sunny."]);
    assert_eq!(gateway.prompts(), ["Weather in Paris?"]);
    assert_eq!(gateway.requests("POST sessions")[0].body["model"], MODEL);
}

#[tokio::test]
async fn agkit_to_cmdc_approval_is_an_interrupt_and_resume_approved_approves() {
    let gateway = Gateway::start(cleaner).await;
    let proxy = proxy("ag-kit", &gateway).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let asked = chat.say("Clean the logs").await;

    assert_eq!(asked.types(), ["interrupt"]);
    let interrupt = asked.only("interrupt");
    assert_eq!(interrupt["id"], "apr_1");
    assert_eq!(interrupt["reason"], "approval");
    assert_eq!(
        interrupt["payload"],
        json!({"toolName": "Shell", "args": {"command": "rm -rf ./old-logs"},
               "hint": "dangerous: deletes files"})
    );

    let answered = chat.resume(json!({"approved": true})).await;

    assert_eq!(answered.text(), "Deleted the old logs.");
    let approve = gateway.wait_for_request("POST approve").await;
    assert_eq!(approve.body, json!({"approvalId": "apr_1"}));
    assert_eq!(gateway.prompts(), ["Clean the logs"]);
    assert_eq!(gateway.log()[3..], ["GET events", "POST approve"]);
}

#[tokio::test]
async fn agkit_to_cmdc_ask_user_is_a_question_interrupt_and_the_response_is_responded() {
    let gateway = Gateway::start(asker).await;
    let proxy = proxy("ag-kit", &gateway).await;
    let mut chat = Chat::new(&send_message(&proxy));

    let asked = chat.say("Weather?").await;

    let interrupt = asked.only("interrupt");
    assert_eq!(interrupt["id"], "ask_001");
    assert_eq!(interrupt["reason"], "question");
    assert_eq!(
        interrupt["payload"],
        json!({"question": "Which city?", "options": ["Paris", "Rome"]})
    );

    let answered = chat.resume(json!({"response": "Paris"})).await;

    assert_eq!(answered.text(), "Paris is sunny.");
    assert_eq!(
        gateway.wait_for_request("POST respond").await.body,
        json!({"ref": "ask_001", "response": "Paris"}),
        "the answer's text, not its JSON wrapper"
    );
}

#[tokio::test]
async fn agkit_to_cmdc_the_session_remembers_across_turns() {
    let gateway = Gateway::start(cmdc::memory).await;
    let proxy = proxy("ag-kit", &gateway).await;
    let mut ada = Chat::new(&send_message(&proxy));

    assert_eq!(
        ada.say("Hi, my name is Ada.").await.text(),
        "Nice to meet you."
    );
    assert_eq!(
        ada.say("what is my name?").await.text(),
        "Your name is Ada."
    );
    assert_eq!(gateway.sessions().len(), 1);
    assert_eq!(
        gateway.prompts(),
        ["Hi, my name is Ada.", "what is my name?"]
    );

    let mut stranger = Chat::new(&send_message(&proxy));
    assert_eq!(
        stranger.say("what is my name?").await.text(),
        "I do not know your name.",
        "another conversationId is another session"
    );
    assert_eq!(gateway.sessions().len(), 2);
}

// --- A2A -> CMDC -------------------------------------------------------------------------------------------

#[tokio::test]
async fn a2a_to_cmdc_ask_user_is_input_required_and_the_answer_is_responded() {
    let gateway = Gateway::start(asker).await;
    let proxy = proxy("a2a", &gateway).await;
    let url = proxy.url(PATH);

    let paused = a2a::stream_to_end(&url, a2a::message("Weather?")).await;

    let status = a2a::final_status(&paused);
    assert_eq!(status["state"], "input-required");
    assert_eq!(a2a::status_text(status), "Which city?");

    let resumed = a2a::stream_to_end(&url, a2a::answer_to(paused.last().unwrap(), "Paris")).await;

    assert_eq!(a2a::streamed_text(&resumed), "Paris is sunny.");
    assert_eq!(a2a::final_status(&resumed)["state"], "completed");
    assert_eq!(
        gateway.wait_for_request("POST respond").await.body,
        json!({"ref": "ask_001", "response": "Paris"})
    );
    assert_eq!(
        gateway.prompts(),
        ["Weather?"],
        "the answer is not a prompt"
    );
}

// --- AgentScope -> CMDC ------------------------------------------------------------------------------------

#[tokio::test]
async fn agentscope_to_cmdc_text_completes_with_the_gateways_token_usage() {
    let gateway = Gateway::replying(&["It is ", "sunny."]).await;
    let proxy = proxy("agentscope", &gateway).await;

    let events = scope::run(
        &process(&proxy),
        &scope::request("s-1", json!([scope::user("msg_u1", "Weather?")])),
    )
    .await;

    assert_eq!(scope::status(&events), "completed");
    assert_eq!(scope::deltas(&events), ["It is ", "sunny."]);
    assert_eq!(scope::text(&events), "It is sunny.");
    let (prompt, completion, total) = cmdc::USAGE;
    assert_eq!(
        scope::terminal(&events)["usage"],
        json!({"input_tokens": prompt, "output_tokens": completion, "total_tokens": total})
    );
}

#[tokio::test]
async fn agentscope_to_cmdc_approval_is_an_mcp_approval_request_and_its_response_approves() {
    let gateway = Gateway::start(cleaner).await;
    let proxy = proxy("agentscope", &gateway).await;
    let first = scope::request("s-1", json!([scope::user("msg_u1", "Clean the logs")]));

    let events = scope::run(&process(&proxy), &first).await;

    assert_eq!(scope::kinds(&events), ["mcp_approval_request"]);
    let request = scope::only(&events, "mcp_approval_request");
    let data = scope::data(&request);
    assert_eq!(data["id"], "apr_1");
    assert_eq!(data["name"], "Shell");
    assert_eq!(
        serde_json::from_str::<Value>(data["arguments"].as_str().unwrap()).unwrap(),
        json!({"command": "rm -rf ./old-logs"})
    );

    let second = scope::next_request(
        &first,
        &events,
        [scope::approval_response("apr_1", true, None)],
    );
    let events = scope::run(&process(&proxy), &second).await;

    assert_eq!(scope::status(&events), "completed");
    assert_eq!(scope::text(&events), "Deleted the old logs.");
    assert_eq!(
        gateway.wait_for_request("POST approve").await.body,
        json!({"approvalId": "apr_1"})
    );
    assert_eq!(gateway.prompts(), ["Clean the logs"]);
    assert_eq!(gateway.sessions().len(), 1);
}

// --- The scripted gateway itself ---------------------------------------------------------------------------

/// A client of the scripted gateway, with its key.
fn gateway_client(gateway: &Gateway) -> CmdcClient {
    CmdcClient::new(gateway.url()).with_key(KEY)
}

#[tokio::test]
async fn scripted_gateway_loses_what_is_published_before_a_subscriber() {
    let gateway = Gateway::replying(&["Hi"]).await;
    let client = gateway_client(&gateway);
    let created = client
        .call(Method::POST, "/v1/sessions", Some(json!({"model": MODEL})))
        .await;
    assert_eq!(created.status, 201);
    let session = created.json().await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();

    // The SDK's order: prompt, then subscribe. The whole fast run is gone by then.
    let prompted = client
        .call(
            Method::POST,
            &format!("/v1/sessions/{session}/prompt"),
            Some(json!({"text": "hello"})),
        )
        .await;
    assert_eq!(prompted.status, 202);
    assert_eq!(prompted.json().await["queued"], false);
    support::within("the run to end", async {
        while !gateway
            .published(&session)
            .contains(&"agent_end".to_owned())
        {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;

    let lost: Vec<String> = gateway.lost().into_iter().map(|(_, event)| event).collect();
    assert_eq!(
        lost,
        [
            "prompt_received",
            "agent_start",
            "message_start",
            "message_delta",
            "agent_end"
        ]
    );
}

#[tokio::test]
async fn scripted_gateway_answers_errors_in_the_gateways_shape() {
    let gateway = Gateway::replying(&["Hi"]).await;
    let base = gateway.url();
    let client = gateway_client(&gateway);

    let unauthorized =
        support::post_json(&format!("{base}/v1/sessions"), &json!({"model": MODEL})).await;
    assert_eq!(unauthorized.status, 401);
    assert_eq!(
        unauthorized.json().await,
        json!({"error": "unauthorized", "message": "Missing or invalid API key"})
    );
    let no_model = client
        .call(Method::POST, "/v1/sessions", Some(json!({})))
        .await;
    assert_eq!(no_model.status, 422);
    assert_eq!(no_model.json().await["error"], "create_failed");
    let unknown = client
        .call(
            Method::POST,
            "/v1/sessions/nope/prompt",
            Some(json!({"text": "hi"})),
        )
        .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(
        unknown.json().await,
        json!({"error": "not_found", "message": "Session nope not found"})
    );
    let created = client
        .call(Method::POST, "/v1/sessions", Some(json!({"model": MODEL})))
        .await;
    let session = created.json().await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let empty = client
        .call(
            Method::POST,
            &format!("/v1/sessions/{session}/prompt"),
            Some(json!({})),
        )
        .await;
    assert_eq!(empty.status, 400);
    assert_eq!(empty.json().await["error"], "bad_request");
    let events = client
        .call(Method::GET, &format!("/v1/sessions/{session}/events"), None)
        .await;
    assert_eq!(events.status, 200);
    assert_eq!(
        events.header("content-type"),
        "text/event-stream; charset=utf-8"
    );
}

/// An A2A client asked to approve a CMDC `approval_required` answers in its own words.
async fn a2a_answers_the_cleaner(answer: &str) -> (Gateway, Vec<Value>, Proxy) {
    let gateway = Gateway::start(cleaner).await;
    let proxy = proxy("a2a", &gateway).await;
    let url = proxy.url(PATH);
    let paused = a2a::stream_to_end(&url, a2a::message("Clean the logs")).await;
    let status = a2a::final_status(&paused);
    assert_eq!(status["state"], "input-required");
    let answered = a2a::stream_to_end(&url, a2a::answer_to(paused.last().unwrap(), answer)).await;
    (gateway, answered, proxy)
}

#[tokio::test]
async fn a2a_to_cmdc_free_text_yes_approves() {
    for answer in ["yes, approve", "OK!", "好的，删除吧"] {
        let (gateway, answered, _proxy) = a2a_answers_the_cleaner(answer).await;
        assert_eq!(
            a2a::streamed_text(&answered),
            "Deleted the old logs.",
            "{answer}"
        );
        assert_eq!(
            gateway.wait_for_request("POST approve").await.body,
            json!({"approvalId": "apr_1"}),
            "{answer}"
        );
        assert!(gateway.requests("POST reject").is_empty(), "{answer}");
    }
}

#[tokio::test]
async fn a2a_to_cmdc_free_text_no_rejects() {
    for answer in ["no, keep them", "不要"] {
        let (gateway, answered, _proxy) = a2a_answers_the_cleaner(answer).await;
        assert_eq!(
            a2a::streamed_text(&answered),
            "Left them alone.",
            "{answer}"
        );
        gateway.wait_for_request("POST reject").await;
        assert!(gateway.requests("POST approve").is_empty(), "{answer}");
    }
}

#[tokio::test]
async fn a2a_to_cmdc_a_data_part_answer_decides_as_it_says() {
    for (approved, request) in [(true, "POST approve"), (false, "POST reject")] {
        let gateway = Gateway::start(cleaner).await;
        let proxy = proxy("a2a", &gateway).await;
        let url = proxy.url(PATH);
        let paused = a2a::stream_to_end(&url, a2a::message("Clean the logs")).await;
        let mut answer = a2a::answer_to(paused.last().unwrap(), "");
        answer["parts"] = json!([{"kind": "data", "data": {"approved": approved}}]);

        let answered = a2a::stream_to_end(&url, answer).await;

        let expected = if approved {
            "Deleted the old logs."
        } else {
            "Left them alone."
        };
        assert_eq!(a2a::streamed_text(&answered), expected);
        gateway.wait_for_request(request).await;
        assert_eq!(
            gateway.prompts(),
            ["Clean the logs"],
            "the answer is not a prompt"
        );
    }
}
