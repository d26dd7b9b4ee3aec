//! Runs that outlive their client (`detach_grace`), on each inbound that resumes by `Last-Event-ID` (AG-UI,
//! AG-Kit, AgentScope): a client that reconnects with it gets every event exactly once and in order, without
//! a second upstream run; the same request without it (or with an id the run never gave) replays the live
//! run from its start, and after the run's end starts another; a client that does not come back within the
//! grace cancels the upstream work. A client that comes back to the other replica (two on one Redis) follows
//! the run from the store, live, and is told the run failed, in its protocol's own error, when the replica
//! driving it dies; one that comes back after a `kill -9` and a restart on redb gets the rest of a run that
//! ended.

use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Method, Request};
use http_body_util::Full;
use serde_json::{json, Value};

use crate::support::ag_ui::{self, finished, input, started, text, user};
use crate::support::stores::{Deployment, Topology};
use crate::support::{
    agentscope, send, within, within_for, Proxy, Reply, Route, SseStream, Upstream, WAIT,
};

const PATH: &str = "/chat";

/// An inbound protocol as this file drives it.
#[derive(Clone, Copy)]
struct Inbound {
    name: &'static str,
    /// Where its clients post, below the route's path.
    endpoint: &'static str,
    /// A request that asks the agent to count.
    request: fn() -> Value,
    /// The text the assistant streamed in `events`.
    text: fn(&[Value]) -> String,
    /// The message of `event`, if it is the protocol's error that ends a run.
    error: fn(&Value) -> Option<&str>,
    /// Whether `error` goes on with the run of which the client `read` these events (AgentScope: the same
    /// response, numbered after them).
    continues: fn(read: &[Value], error: &Value) -> bool,
}

const AG_UI: Inbound = Inbound {
    name: "ag-ui",
    endpoint: "",
    request: || input("thread-1", "run-1", json!([user("u1", "count to four")])),
    text: ag_ui::text_of,
    error: |event| {
        (event["type"] == "RUN_ERROR")
            .then(|| event["message"].as_str())
            .flatten()
    },
    continues: |_, _| true,
};

const AG_KIT: Inbound = Inbound {
    name: "ag-kit",
    endpoint: "/send-message",
    request: || json!({"messages": [{"role": "user", "content": "count to four"}], "conversationId": "c-1"}),
    text: |events| {
        events
            .iter()
            .filter(|event| event["type"] == "text")
            .filter_map(|event| event["content"].as_str())
            .collect()
    },
    error: |event| {
        (event["type"] == "error")
            .then(|| event["message"].as_str())
            .flatten()
    },
    continues: |_, _| true,
};

const AGENTSCOPE: Inbound = Inbound {
    name: "agentscope",
    endpoint: "/process",
    request: || agentscope::request("s-1", json!([agentscope::user("u1", "count to four")])),
    text: |events| agentscope::deltas(events).concat(),
    error: |event| {
        (event["object"] == "response" && event["status"] == "failed")
            .then(|| event["error"]["message"].as_str())
            .flatten()
    },
    continues: |read, error| {
        let numbers = read
            .iter()
            .filter_map(|event| event["sequence_number"].as_i64());
        let started = read.iter().find(|event| event["object"] == "response");
        started.is_some_and(|response| response["id"] == error["id"])
            && numbers.max() < error["sequence_number"].as_i64()
    },
};

impl Inbound {
    fn route(self, agent: &Upstream, grace: &str) -> Route {
        Route::new("chat", PATH, self.name, "ag-ui")
            .upstream(&agent.url())
            .set("detach_grace", grace)
    }

    fn url(self, proxy: &Proxy) -> String {
        proxy.url(&self.path())
    }

    fn path(self) -> String {
        format!("{PATH}{}", self.endpoint)
    }
}

/// Posts `body`, with `Last-Event-ID` when given; the event stream.
async fn post(url: &str, body: &Value, last_event_id: Option<u64>) -> SseStream {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header(CONTENT_TYPE, "application/json");
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a valid request");
    let response = within("the run's response", send(request)).await;
    assert_eq!(response.status, 200);
    response.sse()
}

/// Posts `inbound`'s request to the proxy of `deployment` that serves the next turn.
async fn post_on(
    deployment: &Deployment,
    inbound: Inbound,
    last_event_id: Option<u64>,
) -> SseStream {
    post(
        &deployment.url(&inbound.path()),
        &(inbound.request)(),
        last_event_id,
    )
    .await
}

/// Every whole event in `raw`, with its `id:`, in order.
fn received(raw: &[u8]) -> Vec<(u64, Value)> {
    let text = String::from_utf8_lossy(raw);
    let whole = &text[..text.rfind("\n\n").map_or(0, |end| end + 2)];
    whole
        .split("\n\n")
        .filter(|event| !event.trim().is_empty())
        .map(|event| {
            let field = |name: &str| {
                event
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .unwrap_or_else(|| panic!("no {name} in {event:?}"))
                    .to_owned()
            };
            let id = field("id: ").parse().expect("a numeric id");
            let data = field("data: ");
            // AG-Kit ends with `data: [DONE]`.
            let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
            (id, data)
        })
        .collect()
}

fn ids(events: &[(u64, Value)]) -> Vec<u64> {
    events.iter().map(|(id, _)| *id).collect()
}

/// An agent that says "one two " and waits for the test before "three four".
async fn paused_agent() -> Upstream {
    Upstream::serve([Reply::sse()
        .event(started())
        .events(text("m1", &["one ", "two "]))
        .gate()
        .events(text("m2", &["three ", "four"]))
        .event(finished())])
    .await
}

/// The next event's data, as JSON (AG-Kit's last, `[DONE]`, as a string); `None` at the end.
async fn next_event(stream: &mut SseStream) -> Option<Value> {
    next_event_within(stream, WAIT).await
}

/// [`next_event`], waiting up to `limit` for it.
async fn next_event_within(stream: &mut SseStream, limit: Duration) -> Option<Value> {
    let data = stream.next_data_within(limit).await?;
    Some(serde_json::from_str(&data).unwrap_or(Value::String(data)))
}

/// Every event left, to the end of the stream.
async fn rest(stream: &mut SseStream) -> Vec<Value> {
    let mut events = Vec::new();
    while let Some(event) = next_event(stream).await {
        events.push(event);
    }
    events
}

/// Reads events until the assistant said "one two ".
async fn until_two(inbound: Inbound, stream: &mut SseStream) -> Vec<Value> {
    let mut events = Vec::new();
    while (inbound.text)(&events) != "one two " {
        events.push(next_event(stream).await.expect("the stream goes on"));
    }
    events
}

async fn a_client_that_reconnects_with_last_event_id_gets_every_event_once_in_order(
    inbound: Inbound,
) {
    let agent = paused_agent().await;
    let proxy = Proxy::start(inbound.route(&agent, "10s")).await;
    let url = inbound.url(&proxy);

    let mut first = post(&url, &(inbound.request)(), None).await;
    until_two(inbound, &mut first).await;
    // Everything whole that arrived before the network blip, parsed or not.
    let mut events = received(&first.raw);
    let last = events.last().expect("events before the blip").0;
    drop(first);

    agent.release();
    let mut again = post(&url, &(inbound.request)(), Some(last)).await;
    rest(&mut again).await;
    events.extend(received(&again.raw));

    let all = ids(&events);
    let expected: Vec<u64> = (1..=all.len() as u64).collect();
    assert_eq!(all, expected, "{}: each id once, in order", inbound.name);
    let events: Vec<Value> = events.into_iter().map(|(_, event)| event).collect();
    assert_eq!((inbound.text)(&events), "one two three four", "{events:#?}");
    assert_eq!(agent.received().len(), 1, "one upstream run");
}

/// The same request again, without `Last-Event-ID` or with one the run never gave (`last_event_id`).
async fn the_same_request_naming_no_event_of_it_replays_the_live_run_from_its_start(
    inbound: Inbound,
    last_event_id: Option<u64>,
) {
    let agent = paused_agent().await;
    let proxy = Proxy::start(inbound.route(&agent, "10s")).await;
    let url = inbound.url(&proxy);

    let mut first = post(&url, &(inbound.request)(), None).await;
    let before = until_two(inbound, &mut first).await;
    let mut second = post(&url, &(inbound.request)(), last_event_id).await;
    let replayed = until_two(inbound, &mut second).await;
    assert_eq!(replayed, before, "the same events, from the start");

    agent.release();
    let first_rest = rest(&mut first).await;
    let second_rest = rest(&mut second).await;
    assert_eq!(first_rest, second_rest, "both follow the one run");
    assert_eq!((inbound.text)(&first_rest), "three four");
    assert_eq!(agent.received().len(), 1, "one upstream run");
}

/// A run read to its end, then the same request with the id just past the run's last event (a client's
/// earlier run's): that names no event of the ended run, so another upstream run answers it, here
/// (`restart`: after a `kill -9` and a restart, from the store). The run is longer than one page of the
/// store's log.
async fn an_id_past_an_ended_run_s_last_event_starts_another_run(inbound: Inbound, restart: bool) {
    let dots = ["."; 300];
    let counting = || {
        Reply::sse()
            .event(started())
            .events(text("m1", &dots))
            .event(finished())
    };
    let agent = Upstream::serve([counting(), counting()]).await;
    let mut deployment = Deployment::start(Topology::Restarted, inbound.route(&agent, "10s"));
    let mut first = post_on(&deployment, inbound, None).await;
    rest(&mut first).await;
    let last = received(&first.raw).last().expect("the run's events").0;
    if restart {
        deployment.between_turns();
    }

    let url = deployment.url(&inbound.path());
    let mut again = post(&url, &(inbound.request)(), Some(last + 1)).await;
    let events = rest(&mut again).await;
    assert_eq!((inbound.text)(&events), dots.concat(), "{events:#?}");
    assert_eq!(agent.received().len(), 2, "another upstream run");
}

async fn a_client_that_does_not_come_back_within_the_grace_cancels_the_upstream_work(
    inbound: Inbound,
) {
    // An agent that keeps talking: what it says does not keep a run nobody follows alive.
    let mut talking = Reply::sse()
        .event(started())
        .events(text("m1", &["one ", "two "]))
        .event(json!({"type": "TEXT_MESSAGE_START", "messageId": "m2", "role": "assistant"}));
    for _ in 0..200 {
        talking = talking
            .delay(50)
            .event(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m2", "delta": "."}));
    }
    let agent = Upstream::serve([talking.hang()]).await;
    let proxy = Proxy::start(inbound.route(&agent, "300ms")).await;

    let mut stream = post(&inbound.url(&proxy), &(inbound.request)(), None).await;
    until_two(inbound, &mut stream).await;
    drop(stream);

    // Not at once: the run outlives its client for the grace.
    assert!(!agent.client_left_within(Duration::from_millis(100)).await);
    assert!(agent.client_left_within(Duration::from_secs(5)).await);
}

/// The events before a blip on one proxy, the rest after it on `deployment`'s next (the other replica,
/// or this one killed and restarted); `settle` runs between the two.
async fn the_events_around_a_move(
    inbound: Inbound,
    deployment: &mut Deployment,
    agent: &Upstream,
) -> Vec<(u64, Value)> {
    let mut first = post_on(deployment, inbound, None).await;
    until_two(inbound, &mut first).await;
    let mut events = received(&first.raw);
    let last = events.last().expect("events before the blip").0;
    drop(first);
    agent.release();
    if matches!(deployment.topology(), Topology::Restarted) {
        // The run ends on this proxy (read to its end from here), then the proxy is killed.
        let mut here = post_on(deployment, inbound, Some(last)).await;
        rest(&mut here).await;
    }
    deployment.between_turns();
    let mut again = post_on(deployment, inbound, Some(last)).await;
    rest(&mut again).await;
    events.extend(received(&again.raw));
    events
}

async fn a_client_that_comes_back_to_another_proxy_gets_every_event_once_in_order(
    inbound: Inbound,
    topology: Topology,
) {
    let agent = paused_agent().await;
    let mut deployment = Deployment::start(topology, inbound.route(&agent, "10s"));
    let events = the_events_around_a_move(inbound, &mut deployment, &agent).await;

    let all = ids(&events);
    let expected: Vec<u64> = (1..=all.len() as u64).collect();
    assert_eq!(all, expected, "{}: each id once, in order", inbound.name);
    let events: Vec<Value> = events.into_iter().map(|(_, event)| event).collect();
    assert_eq!((inbound.text)(&events), "one two three four", "{events:#?}");
    assert_eq!(agent.received().len(), 1, "one upstream run");
}

async fn a_client_following_from_the_other_replica_is_told_the_run_failed_when_its_replica_dies(
    inbound: Inbound,
) {
    let agent = paused_agent().await;
    let mut deployment = Deployment::start(Topology::Replicas, inbound.route(&agent, "30s"));
    let mut first = post_on(&deployment, inbound, None).await;
    let read = until_two(inbound, &mut first).await;
    let last = received(&first.raw)
        .last()
        .expect("events before the move")
        .0;
    // A replica appends a run nobody follows from the store once a second: what it had not appended when
    // it died is lost (its client read it from there).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    deployment.between_turns();
    let mut following = post_on(&deployment, inbound, Some(last)).await;
    deployment.kill_the_last_turns_replica();

    // The dead replica's lease on the run lapses within 10 s; the follower looks every 3 s.
    let rest = within_for(Duration::from_secs(30), "the run's failure", async {
        let mut rest = Vec::new();
        while let Some(event) = next_event_within(&mut following, Duration::from_secs(20)).await {
            rest.push(event);
        }
        rest
    })
    .await;
    // AG-Kit ends every stream with `[DONE]`.
    let events: Vec<&Value> = rest.iter().filter(|event| **event != "[DONE]").collect();
    let (failure, before) = events.split_last().expect("an event");
    let error = (inbound.error)(failure);
    assert!(
        error.is_some_and(|error| error.contains("the proxy running it stopped")),
        "{}: the last event is the protocol's error: {rest:#?}",
        inbound.name
    );
    assert!(
        before.iter().all(|event| (inbound.error)(event).is_none()),
        "{}: one error: {rest:#?}",
        inbound.name
    );
    assert!(
        (inbound.continues)(&read, failure),
        "{}: the error does not go on with the run read: {failure:#}, after {read:#?}",
        inbound.name
    );
}

macro_rules! inbounds {
    ($($name:ident: $inbound:ident;)*) => {$(
        mod $name {
            use super::*;

            #[tokio::test]
            async fn reconnecting_with_last_event_id_gets_every_event_once_in_order_from_one_run() {
                a_client_that_reconnects_with_last_event_id_gets_every_event_once_in_order($inbound).await
            }

            #[tokio::test]
            async fn the_same_request_without_last_event_id_replays_the_live_run() {
                the_same_request_naming_no_event_of_it_replays_the_live_run_from_its_start($inbound, None)
                    .await
            }

            #[tokio::test]
            async fn a_last_event_id_past_the_live_run_s_last_event_replays_it_from_its_start() {
                the_same_request_naming_no_event_of_it_replays_the_live_run_from_its_start(
                    $inbound,
                    Some(999),
                )
                .await
            }

            #[tokio::test]
            async fn a_last_event_id_past_an_ended_run_s_last_event_starts_another_run() {
                an_id_past_an_ended_run_s_last_event_starts_another_run($inbound, false).await
            }

            #[tokio::test]
            async fn after_a_restart_on_redb_an_id_past_the_ended_run_s_end_starts_another_run() {
                an_id_past_an_ended_run_s_last_event_starts_another_run($inbound, true).await
            }

            #[tokio::test]
            async fn coming_back_to_the_other_replica_follows_the_run_from_the_store() {
                a_client_that_comes_back_to_another_proxy_gets_every_event_once_in_order(
                    $inbound,
                    Topology::Replicas,
                )
                .await
            }

            #[tokio::test]
            async fn coming_back_after_a_kill_and_restart_on_redb_gets_the_rest_of_the_ended_run() {
                a_client_that_comes_back_to_another_proxy_gets_every_event_once_in_order(
                    $inbound,
                    Topology::Restarted,
                )
                .await
            }

            #[tokio::test]
            async fn following_from_the_other_replica_ends_in_an_error_when_the_running_replica_dies() {
                a_client_following_from_the_other_replica_is_told_the_run_failed_when_its_replica_dies(
                    $inbound,
                )
                .await
            }

            #[tokio::test]
            async fn a_client_gone_past_the_grace_cancels_the_upstream_work() {
                a_client_that_does_not_come_back_within_the_grace_cancels_the_upstream_work($inbound)
                    .await
            }
        }
    )*};
}

inbounds! {
    ag_ui_clients: AG_UI;
    ag_kit_clients: AG_KIT;
    agentscope_clients: AGENTSCOPE;
}
