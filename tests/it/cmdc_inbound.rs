//! The CMDC inbound (we are a CMDC gateway), in-process over real sockets, with the built-in echo agent or
//! scripted upstreams: what a cmdc-sdk client sees.

use std::time::Duration;

use bytes::Bytes;
use futures_util::SinkExt;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::support::cmdc::{all, frames, names, recv_ws, streamed_text, until, Ws};
use crate::support::{send, within, CmdcClient, Proxy, Reply, Route, SseStream, Upstream};

/// Two tenants, one key each.
const KEYS: &[(&str, &str)] = &[("sk-a", "acme"), ("sk-b", "globex")];

/// A CMDC gateway at `/gw` in front of `outbound`, open to [`KEYS`].
fn gateway_route(outbound: &str) -> Route {
    Route::new("cmdc", "/gw", "cmdc", outbound).api_keys(KEYS)
}

fn echo_route() -> Route {
    gateway_route("echo")
}

async fn echo_gateway() -> Proxy {
    Proxy::start(echo_route()).await
}

/// The echo gateway letting callback tools reach this machine, where the tests serve them.
async fn echo_gateway_with_local_callbacks() -> Proxy {
    Proxy::start(echo_route().callback_allow(&["127.0.0.1"])).await
}

/// The gateway's client with the key of tenant `acme`.
fn acme(proxy: &Proxy) -> CmdcClient {
    anonymous(proxy).with_key("sk-a")
}

/// The gateway's client with the key of tenant `globex`.
fn globex(proxy: &Proxy) -> CmdcClient {
    anonymous(proxy).with_key("sk-b")
}

/// The gateway's client sending no key.
fn anonymous(proxy: &Proxy) -> CmdcClient {
    CmdcClient::new(proxy.url("/gw"))
}

#[tokio::test]
async fn a_subscriber_too_late_for_a_run_past_run_buffer_gets_an_error_not_part_of_it() {
    let proxy = Proxy::start(echo_route().run_buffer("4KiB")).await;
    let session = acme(&proxy).create(json!({"model": "m"})).await;
    // The echo answers a delta per word: far more than 4 KiB of events.
    acme(&proxy).prompt(&session, &"word ".repeat(2_000)).await;
    acme(&proxy).wait_state(&session, "idle").await;

    let mut events = acme(&proxy).subscribe(&session).await;
    let seen = all(&mut events).await;

    assert_eq!(names(&seen), ["error"], "{seen:?}");
    let reason = seen[0].1["reason"].as_str().unwrap();
    assert!(reason.starts_with("run_buffer_exceeded: "), "{reason}");
    assert!(reason.contains("too late to replay this run"), "{reason}");
}

#[tokio::test]
async fn a_subscriber_connecting_after_the_prompt_gets_the_whole_run() {
    let proxy = echo_gateway().await;
    let session = acme(&proxy)
        .create(json!({"model": "deepseek:deepseek-chat", "systemPrompt": "be brief"}))
        .await;
    let accepted = acme(&proxy).prompt(&session, "hello world").await;
    assert_eq!(accepted["sessionId"], session.as_str());
    assert_eq!(accepted["queued"], false);
    assert_eq!(accepted["requestId"].as_str().unwrap().len(), 16);
    acme(&proxy).wait_state(&session, "idle").await;

    let mut events = acme(&proxy).subscribe(&session).await;
    let seen = all(&mut events).await;

    assert_eq!(
        names(&seen),
        [
            "prompt_received",
            "agent_start",
            "message_start",
            "message_delta",
            "message_delta",
            "agent_end"
        ]
    );
    assert_eq!(seen[0].1, json!({"text": "hello world"}));
    assert_eq!(streamed_text(&seen), "hello world");
    let end = &seen.last().unwrap().1;
    assert_eq!(
        end["lastMessage"],
        json!({"content": "hello world", "role": "assistant"})
    );
    assert_eq!(end["messageCount"], 3, "system, user, assistant");
    assert!(end["tokenUsage"]["totalTokens"].is_u64());
}

#[tokio::test]
async fn two_subscribers_both_get_every_event() {
    both_subscribers_get_the_prompted_run(&echo_gateway().await).await;
}

#[tokio::test]
async fn on_serving_threads_a_prompt_streams_to_subscribers_on_other_connections() {
    let proxy = Proxy::start_on_threads(echo_route(), Duration::from_secs(5), 2).await;
    both_subscribers_get_the_prompted_run(&proxy).await;
}

/// Two subscribers to a new session, then a prompt: each gets the whole run.
async fn both_subscribers_get_the_prompted_run(proxy: &Proxy) {
    let session = acme(proxy).create(json!({"model": "m"})).await;
    let mut first = acme(proxy).subscribe(&session).await;
    let mut second = acme(proxy).subscribe(&session).await;
    acme(proxy).prompt(&session, "one two three").await;

    let a = all(&mut first).await;
    let b = all(&mut second).await;
    assert_eq!(a, b);
    assert_eq!(streamed_text(&a), "one two three");
    assert_eq!(names(&a).last(), Some(&"agent_end"));
}

#[tokio::test]
async fn a_prompt_while_busy_is_queued_and_runs_next() {
    let proxy = echo_gateway().await;
    let session = acme(&proxy).create(json!({"model": "m"})).await;
    acme(&proxy).prompt(&session, "/ask Which city?").await;
    let mut events = acme(&proxy).subscribe(&session).await;
    until(&mut events, "ask_user").await;
    let queued = acme(&proxy).prompt(&session, "later").await;
    assert_eq!(queued["queued"], true);
    let asked = frames(&events.raw);
    let reference = asked.iter().find(|(n, _)| n == "ask_user").unwrap().1["ref"]
        .as_str()
        .unwrap()
        .to_owned();
    let answered = acme(&proxy).respond(&session, &reference, "Paris").await;
    assert_eq!(answered.status, StatusCode::OK);
    all(&mut events).await;
    let mut next = acme(&proxy).subscribe(&session).await;
    let seen = all(&mut next).await;
    assert_eq!(seen[0].1["text"], "later");
    assert_eq!(streamed_text(&seen), "later");
}

#[tokio::test]
async fn ask_user_pauses_the_run_and_respond_continues_it() {
    let proxy = echo_gateway().await;
    let session = acme(&proxy).create(json!({"model": "m"})).await;
    acme(&proxy).prompt(&session, "/ask Which city?").await;
    let mut events = acme(&proxy).subscribe(&session).await;
    let asked = until(&mut events, "ask_user").await;
    let ask = &asked.last().unwrap().1;
    assert_eq!(ask["question"], "Which city?");
    assert_eq!(ask["options"], Value::Null);
    acme(&proxy).wait_state(&session, "waiting_input").await;

    let unknown = acme(&proxy).respond(&session, "ask_nope", "x").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.json().await["error"], "not_found");
    let missing = acme(&proxy)
        .call(
            Method::POST,
            &format!("/v1/sessions/{session}/respond"),
            Some(json!({"response": "x"})),
        )
        .await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing.json().await["error"], "bad_request");

    let reference = ask["ref"].as_str().unwrap();
    let answered = acme(&proxy).respond(&session, reference, "Paris").await;
    assert_eq!(answered.status, StatusCode::OK);
    assert_eq!(
        answered.json().await,
        json!({"ok": true, "action": "respond", "ref": reference})
    );

    let seen = all(&mut events).await;
    assert_eq!(
        names(&seen).iter().filter(|n| **n == "agent_start").count(),
        1,
        "{seen:?}"
    );
    assert_eq!(
        names(&seen)
            .iter()
            .filter(|n| **n == "prompt_received")
            .count(),
        1
    );
    assert_eq!(streamed_text(&seen), "You answered: Paris");
    assert_eq!(names(&seen).last(), Some(&"agent_end"));
    acme(&proxy).wait_state(&session, "idle").await;
}

/// An AG-UI upstream that asks for approval, then answers with text once resumed.
async fn approving_upstream() -> Upstream {
    Upstream::serve([
        Reply::sse()
            .event(json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r1"}))
            .event(json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r1",
                "outcome": {"type": "interrupt", "interrupts": [
                    {"id": "apr_1", "reason": "tool_approval", "message": "dangerous: deletes files"}]}})),
        Reply::sse()
            .event(json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r2"}))
            .event(json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}))
            .event(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "deleted"}))
            .event(json!({"type": "TEXT_MESSAGE_END", "messageId": "m"}))
            .event(json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r2"})),
    ])
    .await
}

async fn agui_gateway(upstream: &Upstream) -> Proxy {
    Proxy::start(gateway_route("ag-ui").upstream(&upstream.url())).await
}

#[tokio::test]
async fn approval_required_pauses_and_approve_continues_the_same_run() {
    let upstream = approving_upstream().await;
    let proxy = agui_gateway(&upstream).await;
    let session = acme(&proxy).create(json!({"model": "m"})).await;
    acme(&proxy).prompt(&session, "delete the logs").await;
    let mut events = acme(&proxy).subscribe(&session).await;
    let asked = until(&mut events, "approval_required").await;
    let required = &asked.last().unwrap().1;
    assert_eq!(required["approvalId"], "apr_1");
    assert_eq!(required["hint"], "dangerous: deletes files");
    assert!(required["requestedAt"].is_string());
    acme(&proxy).wait_state(&session, "waiting_approval").await;

    let approved = acme(&proxy).approve(&session, "apr_1").await;
    assert_eq!(approved.status, StatusCode::OK);
    assert_eq!(
        approved.json().await,
        json!({"ok": true, "action": "approve", "approvalId": "apr_1"})
    );

    let seen = all(&mut events).await;
    let after: Vec<&str> = names(&seen)
        .into_iter()
        .skip_while(|n| *n != "approval_required")
        .collect();
    assert_eq!(
        after,
        [
            "approval_required",
            "approval_resolved",
            "message_start",
            "message_delta",
            "agent_end"
        ]
    );
    let resolved = &seen
        .iter()
        .find(|(n, _)| n == "approval_resolved")
        .unwrap()
        .1;
    assert_eq!(
        resolved,
        &json!({"approvalId": "apr_1", "status": "approved"})
    );
    let resumed = upstream
        .wait_for("the resumed run", |r| r.body.to_string().contains("apr_1"))
        .await;
    assert!(
        resumed.body.to_string().contains("approved"),
        "{}",
        resumed.body
    );
}

#[tokio::test]
async fn approvals_over_the_websocket_are_acked_by_the_next_frame() {
    let upstream = approving_upstream().await;
    let proxy = agui_gateway(&upstream).await;
    let session = acme(&proxy).create(json!({"model": "m"})).await;
    let mut ws = connect_ws(&proxy, &session, "sk-a").await;

    send_ws(&mut ws, json!({"action": "reject", "approvalId": "apr_1"})).await;
    assert_eq!(
        recv_ws(&mut ws).await["error"],
        "not_found",
        "nothing is pending yet"
    );
    send_ws(&mut ws, json!({"action": "prompt", "text": "delete"})).await;
    assert_eq!(
        recv_ws(&mut ws).await,
        json!({"ok": true, "action": "prompt"})
    );
    loop {
        let frame = recv_ws(&mut ws).await;
        if frame["event"] == "approval_required" {
            break;
        }
    }
    send_ws(&mut ws, json!({"action": "reject", "approvalId": "apr_1"})).await;
    assert_eq!(
        recv_ws(&mut ws).await,
        json!({"ok": true, "action": "reject"})
    );
    let resolved = recv_ws(&mut ws).await;
    assert_eq!(
        resolved,
        json!({"event": "approval_resolved", "data": {"approvalId": "apr_1", "status": "rejected"}})
    );
    loop {
        let frame = recv_ws(&mut ws).await;
        if frame["event"] == "agent_end" {
            break;
        }
    }
    let resumed = upstream
        .wait_for("the resumed run", |r| r.body.to_string().contains("apr_1"))
        .await;
    assert!(
        resumed.body.to_string().contains("false"),
        "{}",
        resumed.body
    );
}

async fn connect_ws(proxy: &Proxy, session: &str, key: &str) -> Ws {
    let url = format!(
        "ws://{}/gw/v1/sessions/{session}/ws?api_key={key}",
        proxy.addr()
    );
    let (ws, _) = within(
        "the WebSocket handshake",
        tokio_tungstenite::connect_async(url),
    )
    .await
    .expect("the WebSocket connects");
    ws
}

async fn send_ws(ws: &mut Ws, frame: Value) {
    ws.send(WsMessage::text(frame.to_string()))
        .await
        .expect("send");
}

async fn send_raw(ws: &mut Ws, text: &str) {
    ws.send(WsMessage::text(text.to_owned()))
        .await
        .expect("send");
}

#[tokio::test]
async fn websocket_acks_come_first_and_bad_frames_keep_the_session_working() {
    let proxy = echo_gateway().await;
    let session = acme(&proxy).create(json!({"model": "m"})).await;
    let mut ws = connect_ws(&proxy, &session, "sk-a").await;

    send_raw(&mut ws, "{not json").await;
    assert_eq!(
        recv_ws(&mut ws).await,
        json!({"error": "invalid_json", "message": "Failed to parse JSON"})
    );
    send_ws(&mut ws, json!({"text": "hi"})).await;
    assert_eq!(
        recv_ws(&mut ws).await,
        json!({"error": "missing_action", "message": "Message must contain 'action' field"})
    );
    send_ws(&mut ws, json!({"action": "xxx"})).await;
    assert_eq!(
        recv_ws(&mut ws).await,
        json!({"error": "unknown_action", "action": "xxx"})
    );

    send_ws(
        &mut ws,
        json!({"action": "prompt", "text": "a b c d e f g h"}),
    )
    .await;
    assert_eq!(
        recv_ws(&mut ws).await,
        json!({"ok": true, "action": "prompt"})
    );
    // A second action while the first run's events flow: its ack still arrives, in order.
    send_ws(&mut ws, json!({"action": "prompt", "text": "again"})).await;
    let mut frames = Vec::new();
    let mut ends = 0;
    while ends < 2 {
        let frame = recv_ws(&mut ws).await;
        if frame["event"] == "agent_end" {
            ends += 1;
        }
        frames.push(frame);
    }
    assert_eq!(
        frames.iter().filter(|f| f["ok"] == true).count(),
        1,
        "{frames:?}"
    );
    assert_eq!(frames[0]["event"], "prompt_received");
    let said: String = frames
        .iter()
        .filter(|f| f["event"] == "message_delta")
        .map(|f| f["data"]["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(said, "a b c d e f g hagain");
}

#[tokio::test]
async fn websocket_connections_need_a_key_and_a_session() {
    let proxy = echo_gateway().await;
    let session = acme(&proxy).create(json!({"model": "m"})).await;
    let no_key = format!("ws://{}/gw/v1/sessions/{session}/ws", proxy.addr());
    match tokio_tungstenite::connect_async(no_key).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 401)
        }
        other => panic!("expected a 401, got {other:?}"),
    }
    let unknown = format!("ws://{}/gw/v1/sessions/nope/ws?api_key=sk-a", proxy.addr());
    match tokio_tungstenite::connect_async(unknown).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 404)
        }
        other => panic!("expected a 404, got {other:?}"),
    }
}

#[tokio::test]
async fn callback_tools_are_called_and_their_result_continues_the_run() {
    let callback = Upstream::serve([Reply::status(200)
        .header("content-type", "application/json")
        .body(r#"{"result":"42 rows"}"#)])
    .await;
    let proxy = echo_gateway_with_local_callbacks().await;
    let session = acme(&proxy).create(json!({"model": "m"})).await;
    let registered = acme(&proxy)
        .register(
            &session,
            json!({"name": "query_database", "callbackUrl": callback.url(),
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}),
        )
        .await;
    assert_eq!(registered.status, StatusCode::CREATED);
    assert_eq!(
        registered.json().await,
        json!({"ok": true, "sessionId": session, "toolName": "query_database"})
    );

    acme(&proxy)
        .prompt(&session, r#"/tool query_database {"query":"SELECT 1"}"#)
        .await;
    let mut events = acme(&proxy).subscribe(&session).await;
    let seen = all(&mut events).await;

    let request = callback.only_request();
    let posted = request.body;
    assert_eq!(posted["toolName"], "query_database");
    assert_eq!(posted["args"], json!({"query": "SELECT 1"}));
    assert_eq!(posted["sessionId"], session.as_str());
    let call_id = posted["callId"].as_str().unwrap();
    let start = &seen
        .iter()
        .find(|(n, _)| n == "tool_execution_start")
        .unwrap()
        .1;
    assert_eq!(start["callId"], call_id);
    assert_eq!(start["args"], json!({"query": "SELECT 1"}));
    let end = &seen
        .iter()
        .find(|(n, _)| n == "tool_execution_end")
        .unwrap()
        .1;
    assert_eq!(end["status"], "ok");
    assert_eq!(end["result"], "42 rows");
    assert_eq!(
        streamed_text(&seen),
        "Tool `query_database` returned: 42 rows"
    );
    assert_eq!(
        names(&seen).iter().filter(|n| **n == "agent_start").count(),
        1
    );

    let messages = acme(&proxy).messages(&session).await;
    let roles: Vec<&str> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    let tool = &messages["messages"][2];
    assert_eq!(tool["callId"], call_id);
    assert_eq!(tool["content"], "42 rows");
    assert_eq!(
        messages["messages"][1]["toolCalls"][0]["name"],
        "query_database"
    );
}

#[tokio::test]
async fn a_failing_callback_is_a_failed_tool_execution() {
    let callback = Upstream::serve([Reply::status(500).body("boom")]).await;
    let proxy = echo_gateway_with_local_callbacks().await;
    let session = acme(&proxy).create(json!({"model": "m"})).await;
    acme(&proxy)
        .register(
            &session,
            json!({"name": "t", "callbackUrl": callback.url(), "timeoutMs": 2000}),
        )
        .await;
    acme(&proxy).prompt(&session, "/tool t").await;
    let seen = all(&mut acme(&proxy).subscribe(&session).await).await;
    let end = &seen
        .iter()
        .find(|(n, _)| n == "tool_execution_end")
        .unwrap()
        .1;
    assert_eq!(end["status"], "error");
    assert_eq!(names(&seen).last(), Some(&"agent_end"));
}

#[tokio::test]
async fn sessions_are_visible_only_to_their_tenant() {
    let proxy = echo_gateway().await;
    let session = acme(&proxy)
        .create(json!({"model": "m", "sessionId": "shared-name"}))
        .await;
    assert_eq!(session, "shared-name");
    let other = globex(&proxy)
        .call(Method::GET, "/v1/sessions/shared-name", None)
        .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    let body = other.json().await;
    assert_eq!(
        body,
        json!({"error": "not_found", "message": "Session shared-name not found"})
    );
    let again = acme(&proxy)
        .call(
            Method::POST,
            "/v1/sessions",
            Some(json!({"model": "m", "sessionId": "shared-name"})),
        )
        .await;
    assert_eq!(again.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(again.json().await["error"], "create_failed");
    // The other tenant may use the same id for a session of its own.
    globex(&proxy)
        .create(json!({"model": "m", "sessionId": "shared-name"}))
        .await;
    globex(&proxy).prompt("shared-name", "globex says").await;
    let theirs = all(&mut globex(&proxy).subscribe("shared-name").await).await;
    assert_eq!(streamed_text(&theirs), "globex says");
    let ours = acme(&proxy)
        .call(Method::GET, "/v1/sessions/shared-name/messages", None)
        .await
        .json()
        .await;
    assert_eq!(ours["messages"], json!([]));
}

#[tokio::test]
async fn rest_errors_take_the_cmdc_shape() {
    let proxy = echo_gateway().await;
    let missing = anonymous(&proxy)
        .call(Method::POST, "/v1/sessions", Some(json!({"model": "m"})))
        .await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        missing.json().await,
        json!({"error": "unauthorized", "message": "Missing or invalid API key"})
    );
    let wrong = anonymous(&proxy)
        .with_key("sk-wrong")
        .call(Method::GET, "/v1/sessions/x", None)
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);

    let no_model = acme(&proxy)
        .call(
            Method::POST,
            "/v1/sessions",
            Some(json!({"systemPrompt": "x"})),
        )
        .await;
    assert_eq!(no_model.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(no_model.json().await["error"], "create_failed");

    let session = acme(&proxy)
        .create(json!({"model": "m", "tools": ["CMDC.Tool.Shell"], "maxTurns": 5}))
        .await;
    assert_eq!(session.len(), 32, "128 random bits");
    let no_text = acme(&proxy)
        .call(
            Method::POST,
            &format!("/v1/sessions/{session}/prompt"),
            Some(json!({})),
        )
        .await;
    assert_eq!(no_text.status, StatusCode::BAD_REQUEST);
    assert_eq!(no_text.json().await["error"], "bad_request");
    let alias = acme(&proxy)
        .call(
            Method::POST,
            &format!("/v1/sessions/{session}/prompt"),
            Some(json!({"prompt": "via alias"})),
        )
        .await;
    assert_eq!(alias.status, StatusCode::ACCEPTED);
    let no_id = acme(&proxy)
        .call(
            Method::POST,
            &format!("/v1/sessions/{session}/approve"),
            Some(json!({})),
        )
        .await;
    assert_eq!(no_id.status, StatusCode::BAD_REQUEST);
    let unknown_id = acme(&proxy).approve(&session, "apr_nope").await;
    assert_eq!(unknown_id.status, StatusCode::NOT_FOUND);
    let no_route = acme(&proxy).call(Method::GET, "/v1/unknown", None).await;
    assert_eq!(no_route.status, StatusCode::NOT_FOUND);
    assert_eq!(
        no_route.json().await["message"],
        "No route matches GET /v1/unknown"
    );
    let unknown_session = acme(&proxy)
        .call(
            Method::POST,
            "/v1/sessions/nope/prompt",
            Some(json!({"text": "x"})),
        )
        .await;
    assert_eq!(unknown_session.status, StatusCode::NOT_FOUND);

    // The session still works after all that.
    let seen = all(&mut acme(&proxy).subscribe(&session).await).await;
    assert_eq!(streamed_text(&seen), "via alias");
    let deleted = acme(&proxy)
        .call(Method::DELETE, &format!("/v1/sessions/{session}"), None)
        .await;
    assert_eq!(
        deleted.json().await,
        json!({"sessionId": session, "status": "deleted"})
    );
    let gone = acme(&proxy)
        .call(Method::GET, &format!("/v1/sessions/{session}"), None)
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bearer_keys_work_and_the_rate_limit_answers_429_with_retry_after() {
    let proxy = Proxy::start(echo_route().rate_limit(2)).await;
    let bearer = |path: &str| {
        Request::builder()
            .method(Method::GET)
            .uri(proxy.url(&format!("/gw{path}")))
            .header("authorization", "Bearer sk-a")
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    assert_eq!(
        send(bearer("/v1/sessions/x")).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        send(bearer("/v1/sessions/x")).await.status,
        StatusCode::NOT_FOUND
    );
    let limited = send(bearer("/v1/sessions/x")).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = limited
        .header("retry-after")
        .parse()
        .expect("a Retry-After header");
    assert!(retry >= 1);
    let body = limited.json().await;
    assert_eq!(body["error"], "rate_limited");
    assert_eq!(body["retryAfter"], retry);
    // Another key has its own bucket.
    let other = globex(&proxy)
        .call(Method::GET, "/v1/sessions/x", None)
        .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn health_info_stats_and_messages_have_the_shapes_clients_read() {
    let proxy = echo_gateway().await;
    let health = anonymous(&proxy).call(Method::GET, "/healthz", None).await;
    assert_eq!(health.status, StatusCode::OK);
    let health = health.json().await;
    assert_eq!(health["status"], "ok");
    assert_eq!(health["version"], "0.1.0");
    assert!(health["timestamp"].as_str().unwrap().ends_with('Z'));

    let session = acme(&proxy)
        .create(json!({"model": "m", "systemPrompt": "be brief"}))
        .await;
    acme(&proxy).prompt(&session, "hi").await;
    all(&mut acme(&proxy).subscribe(&session).await).await;

    let health = anonymous(&proxy)
        .call(Method::GET, "/healthz", None)
        .await
        .json()
        .await;
    assert_eq!(health["sessions"]["active"], 1);
    assert_eq!(health["meter"]["tracked_keys"], 1);
    let info = acme(&proxy).wait_state(&session, "idle").await;
    for field in [
        "sessionId",
        "state",
        "turns",
        "toolCalls",
        "totalTokens",
        "uptimeMs",
    ] {
        assert!(info.get(field).is_some(), "{field} in {info}");
    }
    assert_eq!(info["turns"], 1);
    let stats = acme(&proxy)
        .call(Method::GET, &format!("/v1/sessions/{session}/stats"), None)
        .await
        .json()
        .await;
    assert_eq!(stats["promptCount"], 1);
    assert_eq!(stats["costUsd"], 0);
    assert!(stats["tokenUsage"]["promptTokens"].is_u64());
    assert_eq!(stats["meter"]["promptCount"], 1);
    for field in ["totalPromptTokens", "totalCompletionTokens", "totalTokens"] {
        assert!(stats["meter"][field].is_u64(), "{field} in {stats}");
    }
    let messages = acme(&proxy).messages(&session).await;
    let log = messages["messages"].as_array().unwrap();
    assert_eq!(log.len(), 3);
    assert_eq!(log[0]["role"], "system");
    assert_eq!(log[0]["content"], "be brief");
    assert_eq!(
        log[2],
        json!({"id": log[2]["id"], "role": "assistant", "content": "hi", "toolCalls": null, "callId": null, "name": null, "isError": false})
    );
}

/// A session of tenant `sk-a` whose run waits on a question, and its open event stream.
async fn paused_session(proxy: &Proxy) -> (String, SseStream) {
    let session = acme(proxy).create(json!({"model": "m"})).await;
    acme(proxy).prompt(&session, "/ask Anything?").await;
    let mut events = acme(proxy).subscribe(&session).await;
    until(&mut events, "ask_user").await;
    (session, events)
}

#[tokio::test]
async fn deleting_a_session_aborts_its_paused_run_and_closes_the_stream() {
    let proxy = echo_gateway().await;
    let (session, mut events) = paused_session(&proxy).await;

    let deleted = acme(&proxy)
        .call(Method::DELETE, &format!("/v1/sessions/{session}"), None)
        .await;
    assert_eq!(deleted.status, StatusCode::OK);

    let seen = all(&mut events).await;
    assert_eq!(
        seen.last().unwrap(),
        &("agent_abort".to_owned(), json!({"reason": "aborted"}))
    );
}

#[tokio::test]
async fn abort_ends_a_paused_run_and_the_session_goes_on() {
    let proxy = echo_gateway().await;
    let (session, mut events) = paused_session(&proxy).await;

    let aborted = acme(&proxy)
        .call(Method::POST, &format!("/v1/sessions/{session}/abort"), None)
        .await;
    assert_eq!(aborted.status, StatusCode::ACCEPTED);
    assert_eq!(
        aborted.json().await,
        json!({"ok": true, "action": "abort", "sessionId": session})
    );
    let seen = all(&mut events).await;
    assert_eq!(
        seen.last().unwrap(),
        &(
            "agent_abort".to_owned(),
            json!({"reason": "user_cancelled"})
        )
    );
    acme(&proxy).wait_state(&session, "idle").await;

    acme(&proxy).prompt(&session, "still here").await;
    let mut events = acme(&proxy).subscribe(&session).await;
    assert_eq!(streamed_text(&all(&mut events).await), "still here");
}

#[tokio::test]
async fn reasoning_and_server_side_tools_become_thinking_and_tool_execution_events() {
    let upstream = Reply::sse()
        .event(json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}))
        .event(json!({"type": "REASONING_START", "messageId": "th"}))
        .event(json!({"type": "REASONING_MESSAGE_START", "messageId": "th", "role": "reasoning"}))
        .event(json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "th", "delta": "look it up"}))
        .event(json!({"type": "REASONING_MESSAGE_END", "messageId": "th"}))
        .event(json!({"type": "REASONING_END", "messageId": "th"}))
        .event(json!({"type": "TOOL_CALL_START", "toolCallId": "call-1", "toolCallName": "get_weather"}))
        .event(json!({"type": "TOOL_CALL_ARGS", "toolCallId": "call-1", "delta": "{\"city\":\"Beijing\"}"}))
        .event(json!({"type": "TOOL_CALL_END", "toolCallId": "call-1"}))
        .event(json!({"type": "TOOL_CALL_RESULT", "messageId": "tm", "toolCallId": "call-1", "content": "sunny"}))
        .event(json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}))
        .event(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "It is sunny."}))
        .event(json!({"type": "TEXT_MESSAGE_END", "messageId": "m"}))
        .event(json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}))
        .serve()
        .await;
    let proxy = agui_gateway(&upstream).await;
    let session = acme(&proxy).create(json!({"model": "m"})).await;
    acme(&proxy).prompt(&session, "weather?").await;
    let seen = all(&mut acme(&proxy).subscribe(&session).await).await;

    assert_eq!(
        names(&seen),
        [
            "prompt_received",
            "agent_start",
            "thinking_start",
            "thinking_delta",
            "tool_calls",
            "tool_execution_start",
            "tool_execution_end",
            "message_start",
            "message_delta",
            "agent_end"
        ]
    );
    let data = |name: &str| &seen.iter().find(|(n, _)| n == name).unwrap().1;
    assert_eq!(data("thinking_delta"), &json!({"delta": "look it up"}));
    assert_eq!(data("tool_calls"), &json!({"count": 1}));
    assert_eq!(
        data("tool_execution_start"),
        &json!({"toolName": "get_weather", "callId": "call-1", "args": {"city": "Beijing"}})
    );
    assert_eq!(
        data("tool_execution_end"),
        &json!({"toolName": "get_weather", "callId": "call-1", "status": "ok", "result": "sunny"})
    );
    let info = acme(&proxy).wait_state(&session, "idle").await;
    assert_eq!(info["toolCalls"], 1);
}

#[tokio::test]
async fn an_upstream_failure_is_an_error_event_then_agent_abort_and_the_session_goes_on() {
    let upstream = Upstream::serve([
        Reply::status(500).body("model overloaded"),
        Reply::sse()
            .event(json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}))
            .event(json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}))
            .event(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "fine now"}))
            .event(json!({"type": "TEXT_MESSAGE_END", "messageId": "m"}))
            .event(json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"})),
    ])
    .await;
    let proxy = agui_gateway(&upstream).await;
    let session = acme(&proxy).create(json!({"model": "m"})).await;
    acme(&proxy).prompt(&session, "hi").await;
    let failed = all(&mut acme(&proxy).subscribe(&session).await).await;
    assert_eq!(
        names(&failed),
        ["prompt_received", "agent_start", "error", "agent_abort"]
    );
    assert!(
        failed[2].1["reason"].as_str().unwrap().contains("500"),
        "{failed:?}"
    );
    assert_eq!(failed[3].1, json!({"reason": "error"}));

    acme(&proxy).prompt(&session, "again").await;
    let next = all(&mut acme(&proxy).subscribe(&session).await).await;
    assert_eq!(streamed_text(&next), "fine now");
}
