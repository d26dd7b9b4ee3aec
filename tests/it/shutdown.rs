//! Graceful shutdown, as each inbound's client sees it: a stream still running when the shutdown's grace is
//! over is not just cut; its run ends with a `SHUTTING_DOWN` error that reaches the client as its protocol's
//! terminal error event, then the stream closes, within a bound.
//!
//! Every case runs one inbound against the same AG-UI agent that says a word and then never ends.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use crate::support::ag_kit::{self as kit};
use crate::support::ag_ui::{self, started, user};
use crate::support::{
    a2a, agentscope, cmdc, post_json, within, CmdcClient, Proxy, Reply, Route, Upstream,
};

const PATH: &str = "/agents/goodbye";
/// How long the proxy lets open streams run after the shutdown signal.
const GRACE: Duration = Duration::from_millis(300);
/// How soon after the grace a client must have read its terminal event and the end of its stream.
const GOODBYE: Duration = Duration::from_millis(1500);

/// An AG-UI agent that starts a text and never ends it.
async fn endless_agent() -> Upstream {
    Reply::sse()
        .event(started())
        .events(ag_ui::text("m1", &["working"]).into_iter().take(2))
        .hang()
        .serve()
        .await
}

/// A proxy serving `inbound` clients at [`PATH`] from `agent`, with a short grace.
async fn proxy(inbound: &str, agent: &Upstream) -> Proxy {
    let route = Route::new("goodbye", PATH, inbound, "ag-ui").upstream(&agent.url());
    Proxy::start_with_grace(route, GRACE).await
}

/// Shuts `proxy` down, awaits `rest` (the client reading its stream to the end) and checks it ended after the
/// grace, within [`GOODBYE`], and that the proxy stopped with no run left.
async fn shut_down_reading<T>(mut proxy: Proxy, rest: impl std::future::Future<Output = T>) -> T {
    let shutdown_at = Instant::now();
    proxy.shutdown();
    let rest = within("the stream to end after the shutdown", rest).await;
    let took = shutdown_at.elapsed();
    assert!(took >= GRACE, "the stream had its grace: {took:?}");
    assert!(took < GRACE + GOODBYE, "and ended right after it: {took:?}");
    proxy.stopped().await;
    assert_eq!(proxy.gauges().runs_in_flight(), 0);
    rest
}

#[tokio::test]
async fn agui_stream_cut_by_shutdown_ends_with_run_error_shutting_down() {
    let agent = endless_agent().await;
    let proxy = proxy("ag-ui", &agent).await;
    let run = ag_ui::input("t1", "r1", json!([user("u1", "hi")]));
    let mut stream = ag_ui::start(&proxy.url(PATH), &run).await;
    let mut events = stream.until("TEXT_MESSAGE_CONTENT").await;

    events.extend(shut_down_reading(proxy, stream.rest()).await);

    ag_ui::check(&stream.raw, &events, &run, ag_ui::Profile::CONSERVATIVE);
    assert_eq!(ag_ui::run_error(&events)["code"], "SHUTTING_DOWN");
    assert_eq!(ag_ui::text_of(&events), "working");
}

#[tokio::test]
async fn a2a_stream_cut_by_shutdown_ends_with_a_final_failed_status() {
    let agent = endless_agent().await;
    let proxy = proxy("a2a", &agent).await;
    let mut stream = a2a::stream_message(&proxy.url(PATH), a2a::message("hi")).await;
    stream.until("artifact-update").await;

    let results = shut_down_reading(proxy, stream.rest()).await;

    let status = a2a::final_status(&results);
    assert_eq!(status["state"], "failed");
    assert!(
        a2a::status_text(status).contains("SHUTTING_DOWN"),
        "{status}"
    );
}

#[tokio::test]
async fn agkit_stream_cut_by_shutdown_ends_with_an_error_frame_then_done() {
    let agent = endless_agent().await;
    let proxy = proxy("ag-kit", &agent).await;
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "conversationId": "c1"});
    let mut stream = post_json(&proxy.url(&format!("{PATH}/send-message")), &body)
        .await
        .sse();
    assert_eq!(stream.next().await, Some(kit::text("working")));

    let rest = shut_down_reading(proxy, async {
        let mut rest = Vec::new();
        while let Some(data) = stream.next_data().await {
            rest.push(data);
        }
        rest
    })
    .await;

    let error: Value = serde_json::from_str(&rest[0]).expect("an error frame");
    assert_eq!(error["type"], "error");
    assert_eq!(error["code"], "SHUTTING_DOWN");
    assert_eq!(rest[1..], ["[DONE]"]);
}

#[tokio::test]
async fn agentscope_stream_cut_by_shutdown_ends_with_a_failed_response() {
    let agent = endless_agent().await;
    let proxy = proxy("agentscope", &agent).await;
    let body = agentscope::request("s1", json!([agentscope::user("u1", "hi")]));
    let mut stream = agentscope::start(&proxy.url(&format!("{PATH}/process")), &body).await;
    let mut events = Vec::new();
    while !agentscope::deltas(&events).contains(&"working") {
        events.push(stream.next().await.expect("the agent's word"));
    }

    events.extend(shut_down_reading(proxy, stream.rest()).await);

    agentscope::check(&events, &body);
    assert_eq!(agentscope::error(&events)["code"], "SHUTTING_DOWN");
}

#[tokio::test]
async fn cmdc_stream_cut_by_shutdown_ends_with_error_then_agent_abort() {
    let agent = endless_agent().await;
    let proxy = proxy("cmdc", &agent).await;
    let client = CmdcClient::new(proxy.url(PATH));
    let session = client.create(json!({"model": "m"})).await;
    let mut events = client.subscribe(&session).await;
    client.prompt(&session, "hi").await;
    cmdc::until(&mut events, "message_delta").await;

    let seen = shut_down_reading(proxy, cmdc::all(&mut events)).await;

    let names = cmdc::names(&seen);
    assert_eq!(
        names[names.len() - 2..],
        ["error", "agent_abort"],
        "{seen:?}"
    );
    assert!(seen[names.len() - 2].1["reason"]
        .as_str()
        .is_some_and(|reason| reason.contains("shutting down")));
}
