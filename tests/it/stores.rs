//! The durable stores' faults and limits, with the binary as users run it: Redis going away and coming
//! back, Redis unreachable at start or configured to evict, a tenant's quota counted across replicas, and a
//! redb file another proxy holds; A2A tasks and CMDC sessions across kills and replicas, a paused CMDC run
//! carried on when its replica dies. That conversations outlive their proxy, pair by pair, is the matrix's
//! scenario 8 (`matrix::two_turns_outlive_the_proxy`, `matrix::approval_outlives_the_proxy`,
//! `matrix::question_outlives_the_proxy`).

use std::time::{Duration, Instant};

use agent_bridge::config::{StoreBackend, StoreConfig};
use agent_bridge::store::{Admission, Documents, Followed};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{json, Value};
use toml::{Table, Value as Toml};

use crate::support::ag_ui::{self, finished, input, started, text, user};
use crate::support::binary::{agent_bridge, serve_command, AgentBridge};
use crate::support::stores::{
    Deployment, RedisCluster, RedisServer, SharedRedis, TempDir, Topology,
};
use crate::support::{a2a, cmdc, CmdcClient};
use crate::support::{within, Reply, Route, Routes, Upstream, WAIT};

const PATH: &str = "/chat";

/// One replica's documents on the Redis at `url`.
async fn replica_documents(url: &str) -> Documents {
    let config = StoreConfig {
        backend: StoreBackend::Redis,
        url: Some(url.to_owned()),
        ..StoreConfig::default()
    };
    let store = within("the store opens", agent_bridge::store::open(&config))
        .await
        .expect("the store opens");
    Documents::new(store, "route")
}

#[tokio::test]
async fn a_request_pushed_to_a_log_its_writer_ended_is_refused_not_lost() {
    let redis = RedisServer::start();
    let (writing, asking) = (
        replica_documents(&redis.url()).await,
        replica_documents(&redis.url()).await,
    );
    let writer = writing
        .open_log("inbox", "acme", "run")
        .await
        .expect("a log");
    let push = |event: &'static str| {
        asking.push_to_log("inbox", "acme", "run", Bytes::from_static(event.as_bytes()))
    };
    assert_eq!(push("taken").await, Ok(true));
    writer.end().await;
    assert_eq!(push("too late").await, Ok(false));

    let log = writing.read_log("inbox", "acme", "run", 0).await;
    let page = log.expect("Redis answers").expect("the log");
    assert_eq!(page.events, vec![Bytes::from_static(b"taken")]);
    assert_eq!(page.ended, Some(agent_bridge::store::LogEnd::Whole));
}

#[tokio::test]
async fn a_log_opened_again_is_the_newer_runs_and_its_older_writer_ending_leaves_it_and_its_lease_alone(
) {
    let redis = RedisServer::start();
    let (here, there) = (
        replica_documents(&redis.url()).await,
        replica_documents(&redis.url()).await,
    );
    let older = here
        .open_log("events", "acme", "task")
        .await
        .expect("a log");
    older.push(Bytes::from_static(b"older run")).await;
    // A client answered the task here while its older run was still trying to keep it.
    let newer = within(
        "the newer run's log",
        here.open_log("events", "acme", "task"),
    )
    .await
    .expect("a log");
    newer.push(Bytes::from_static(b"newer run")).await;
    within("the newer run's event kept", newer.durable()).await;
    within("the older run ending", older.end()).await;

    let page = within("the log appended", async {
        loop {
            let page = there.read_log("events", "acme", "task", 0).await;
            // No log reads as none until its first append.
            let page = page.expect("Redis answers").unwrap_or_default();
            if !page.events.is_empty() {
                return page;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(page.events, vec![Bytes::from_static(b"newer run")]);
    assert_eq!(
        page.ended, None,
        "the older writer ended the newer run's log"
    );
    assert_eq!(
        there.run_live("events", "acme", "task").await,
        Ok(true),
        "the older writer let go of the newer run's lease"
    );

    within("the newer run ending", newer.end()).await;
    let page = there.read_log("events", "acme", "task", 0).await;
    let page = page.expect("Redis answers").expect("the log");
    assert_eq!(page.events, vec![Bytes::from_static(b"newer run")]);
    assert_eq!(page.ended, Some(agent_bridge::store::LogEnd::Whole));
    assert_eq!(there.run_live("events", "acme", "task").await, Ok(false));
}

#[tokio::test]
async fn a_document_let_in_again_and_not_saved_since_is_held_not_evicted_to_make_room() {
    let redis = RedisServer::start();
    let documents = replica_documents(&redis.url()).await;
    let admit = |id: &'static str| {
        // Paused tasks may make room; running ones may not.
        let rank = |task: &Value| (task["state"] == "paused").then_some(1);
        documents.admit_making_room("task", "acme", id, 2, rank)
    };
    for (id, state) in [("paused", "paused"), ("running", "running")] {
        assert!(matches!(admit(id).await, Ok(Admission::Admitted(_))));
        let task = json!({ "state": state });
        documents.save("task", "acme", id, &task).await.unwrap();
    }
    // The paused task is answered: let in again, and its run is about to save it running.
    assert_eq!(admit("paused").await, Ok(Admission::Admitted(Vec::new())));

    let refused = admit("new").await.expect("Redis answers");
    let Admission::Refused(mut held) = refused else {
        panic!("the continued task made room: {refused:?}");
    };
    held.sort();
    assert_eq!(held, ["paused", "running"]);
    let task = documents.load::<Value>("task", "acme", "paused").await;
    assert_eq!(task, Ok(Some(json!({ "state": "paused" }))));
}

/// How many reads of a run log (`LRANGE`) `servers` have served.
fn log_reads(servers: &[RedisServer]) -> u64 {
    servers
        .iter()
        .filter_map(|server| {
            server
                .cli(&["info", "commandstats"])
                .lines()
                .find_map(|line| line.strip_prefix("cmdstat_lrange:calls="))
                .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
        })
        .sum()
}

#[tokio::test]
async fn a_run_logs_idle_follower_waits_for_another_replicas_append_instead_of_polling_redis() {
    let redis = RedisServer::start();
    idle_follower_waits_for_another_replicas_append(&redis.url(), std::slice::from_ref(&redis))
        .await
}

#[tokio::test]
async fn a_run_logs_idle_follower_on_a_redis_cluster_is_told_of_another_replicas_append() {
    let cluster = RedisCluster::start();
    idle_follower_waits_for_another_replicas_append(&cluster.url(), cluster.nodes()).await
}

/// A follower of a run log on one replica of the Redis at `url` (its nodes `servers`): it reads the log
/// once, is told of another replica's append and reads it at once, and between reads waits for a notice
/// rather than poll.
async fn idle_follower_waits_for_another_replicas_append(url: &str, servers: &[RedisServer]) {
    let (here, there) = (replica_documents(url).await, replica_documents(url).await);
    let _writer = here.open_log("inbox", "acme", "run").await.expect("a log");
    let (sender, mut followed) = tokio::sync::mpsc::unbounded_channel();
    let follower = tokio::spawn({
        let log = here.follow_log("inbox", "acme", "run", 0);
        async move {
            tokio::pin!(log);
            while let Some(next) = log.next().await {
                let _ = sender.send(next);
            }
        }
    });
    // Subscribed and read once; it would look again on its own 3 s later (FALLBACK).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    there
        .push_to_log(
            "inbox",
            "acme",
            "run",
            Bytes::from_static(b"from the other replica"),
        )
        .await
        .expect("pushed");
    let first = tokio::time::timeout(Duration::from_secs(1), followed.recv())
        .await
        .expect("the follower is told of the append, not left to find it at its next look");
    assert_eq!(
        first,
        Some(Followed::Event(
            1,
            Bytes::from_static(b"from the other replica")
        ))
    );

    // Then idle again.
    let before = log_reads(servers);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let idle_reads = log_reads(servers) - before;
    assert!(
        idle_reads <= 5,
        "an idle follower read its log {idle_reads} times in 2.5 s (polling every 100 ms would be 25)"
    );
    follower.abort();
}

fn redis_store(url: &str) -> Toml {
    let mut store = Table::new();
    store.insert("backend".into(), "redis".into());
    store.insert("url".into(), url.into());
    Toml::Table(store)
}

/// The routes file `routes` with `[store]` = `store`, written in `folder`.
fn write_config(folder: &TempDir, store: Toml, route: Route) -> std::path::PathBuf {
    let text = Routes::default()
        .set("store", store)
        .route(route)
        .to_string();
    let path = folder.path().join("routes.toml");
    std::fs::write(&path, text).expect("write the routes file");
    path
}

fn url(proxy: &AgentBridge) -> String {
    format!("http://{}{PATH}", proxy.address)
}

fn say(thread: &str, run: &str, text: &str) -> Value {
    input(thread, run, json!([user(&format!("{run}-u"), text)]))
}

/// The run's events, however it ended (a `RUN_ERROR` included).
async fn run(url: &str, body: &Value) -> Vec<Value> {
    within("the run", ag_ui::start(url, body))
        .await
        .rest()
        .await
}

fn error_code(events: &[Value]) -> Option<&str> {
    events
        .iter()
        .find(|event| event["type"] == "RUN_ERROR")
        .and_then(|error| error["code"].as_str())
}

/// Runs `body` until it completes, for up to [`WAIT`]: the proxy is expected to get its store back.
async fn run_until_it_completes(url: &str, body: &Value) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let events = run(url, body).await;
        if error_code(&events).is_none() {
            return events;
        }
        assert!(
            Instant::now() < deadline,
            "the proxy did not get its store back within {WAIT:?}: {events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn redis_gone_fails_new_turns_at_once_with_the_protocols_error_and_the_proxy_recovers() {
    redis_gone_fails_new_turns_and_the_proxy_recovers(SharedRedis::Server(RedisServer::start()))
        .await
}

#[tokio::test]
async fn a_redis_cluster_gone_fails_new_turns_at_once_and_the_proxy_recovers() {
    redis_gone_fails_new_turns_and_the_proxy_recovers(SharedRedis::Cluster(RedisCluster::start()))
        .await
}

async fn redis_gone_fails_new_turns_and_the_proxy_recovers(mut redis: SharedRedis) {
    let folder = TempDir::new("redis-gone");
    let route = Route::new("chat", PATH, "ag-ui", "echo");
    let proxy = AgentBridge::start(serve_command(&write_config(
        &folder,
        redis_store(&redis.url()),
        route,
    )));

    let first = run(&url(&proxy), &say("t1", "r1", "hello")).await;
    assert_eq!(ag_ui::text_of(&first), "hello");

    redis.kill();
    let asked = Instant::now();
    let refused = run(&url(&proxy), &say("t1", "r2", "still there?")).await;
    let waited = asked.elapsed();
    let error = ag_ui::run_error(&refused);
    assert_eq!(error["code"], "STORE_UNAVAILABLE", "{refused:#?}");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("conversation store"),
        "{error}"
    );
    // Bounded by the store's response and connect timeouts, not by the route's.
    assert!(
        waited < WAIT,
        "a turn waited {waited:?} on a Redis that is gone"
    );

    redis.restart();
    let back = run_until_it_completes(&url(&proxy), &say("t2", "r3", "back again")).await;
    assert_eq!(ag_ui::text_of(&back), "back again");
}

#[tokio::test]
async fn a_run_under_way_when_redis_dies_still_streams_to_its_end() {
    let mut redis = RedisServer::start();
    let agent = Upstream::serve([Reply::sse()
        .event(started())
        .events(text("m1", &["all ", "of ", "it"]))
        .event(finished())
        .gate()])
    .await;
    let folder = TempDir::new("redis-mid-run");
    let route = Route::new("chat", PATH, "ag-ui", "ag-ui").upstream(&agent.url());
    let proxy = AgentBridge::start(serve_command(&write_config(
        &folder,
        redis_store(&redis.url()),
        route,
    )));

    let mut stream = within(
        "the run to start",
        ag_ui::start(&url(&proxy), &say("t1", "r1", "tell me")),
    )
    .await;
    stream.until("RUN_STARTED").await;
    agent.wait_for("the turn reaches the agent", |_| true).await;
    redis.kill();
    agent.release();
    let events = within("the rest of the run", stream.rest()).await;

    assert_eq!(ag_ui::text_of(&events), "all of it", "{events:#?}");
    assert_eq!(
        events.last().map(|event| &event["type"]),
        Some(&json!("RUN_FINISHED"))
    );
    // The record it could not keep is logged, not hidden.
    proxy.logged("saving the conversation failed").await;
}

#[tokio::test]
async fn an_a2a_task_that_ends_while_redis_is_gone_is_kept_once_redis_is_back() {
    let mut redis = RedisServer::start();
    let agent = Upstream::serve([Reply::sse()
        .event(started())
        .gate()
        .events(text("m1", &["all ", "of ", "it"]))
        .event(finished())])
    .await;
    let folder = TempDir::new("redis-task-ended");
    let route = Route::new("tasks", PATH, "a2a", "ag-ui").upstream(&agent.url());
    let config = write_config(&folder, redis_store(&redis.url()), route);
    let running = AgentBridge::start(serve_command(&config));
    let other = AgentBridge::start(serve_command(&config));
    let params = json!({"message": a2a::message("tell me"), "configuration": {"blocking": false}});
    let task = a2a::result(&url(&running), "message/send", params).await;
    let task_id = task["id"].as_str().expect("a task id");
    agent.wait_for("the run reaches the agent", |_| true).await;

    redis.kill();
    agent.release();
    running
        .logged("the task could not be kept in the store")
        .await;
    // Its tries come 0.25, 0.5, 1, 2 and 4 s apart: after 5 s the next is seconds away once Redis is back,
    // and empty (it keeps nothing on disk).
    tokio::time::sleep(Duration::from_secs(5)).await;
    redis.restart();

    // The replica that ran it serves it as it ended, not the store's copy, which is gone.
    let served = a2a::get_task(&url(&running), task_id).await;
    assert_eq!(served["status"]["state"], "completed", "{served}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let kept = loop {
        let got = a2a::call(&url(&other), "tasks/get", json!({"id": task_id})).await;
        if got["result"]["status"]["state"] == "completed" {
            break got["result"].clone();
        }
        assert!(Instant::now() < deadline, "not kept as it ended: {got}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(a2a::artifact_text(&kept), "all of it", "{kept}");
}

#[tokio::test]
async fn an_answer_to_a_paused_a2a_task_while_redis_is_gone_fails_the_task_instead_of_leaving_it_stuck(
) {
    let mut redis = RedisServer::start();
    let folder = TempDir::new("redis-gone-answer");
    let route = Route::new("tasks", PATH, "a2a", "echo").quota("tasks", 5);
    let proxy = AgentBridge::start(serve_command(&write_config(
        &folder,
        redis_store(&redis.url()),
        route,
    )));
    let paused = a2a::send_message(&url(&proxy), a2a::message("/ask Which city?")).await;
    assert_eq!(paused["status"]["state"], "input-required", "{paused}");

    redis.kill();
    let answered = a2a::call(
        &url(&proxy),
        "message/send",
        json!({"message": a2a::answer_to(&paused, "Paris")}),
    )
    .await;
    let task_id = paused["id"].as_str().unwrap();
    let got = a2a::get_task(&url(&proxy), task_id).await;
    assert_eq!(
        got["status"]["state"], "failed",
        "answered: {answered}, then: {got}"
    );
    assert!(
        a2a::status_text(&got["status"]).contains("STORE_UNAVAILABLE"),
        "{got}"
    );
}

#[test]
fn redis_unreachable_at_start_is_an_error_naming_the_key_and_the_proxy_does_not_start() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let folder = TempDir::new("redis-unreachable");
    let route = Route::new("chat", PATH, "ag-ui", "echo");
    let config = write_config(
        &folder,
        redis_store(&format!("redis://:secret-password@127.0.0.1:{port}")),
        route,
    );

    let output = serve_command(&config)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run agent-bridge");

    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("store.url"), "{stderr}");
    assert!(stderr.contains("cannot be reached"), "{stderr}");
    assert!(
        !stderr.contains("secret-password"),
        "the URL's password is logged: {stderr}"
    );
}

#[tokio::test]
async fn a_redis_that_may_evict_is_warned_about_at_start() {
    let redis = RedisServer::start_with(&[("maxmemory-policy", "allkeys-lru")]);
    let folder = TempDir::new("redis-evicts");
    let route = Route::new("chat", PATH, "ag-ui", "echo");
    let proxy = AgentBridge::start(serve_command(&write_config(
        &folder,
        redis_store(&redis.url()),
        route,
    )));

    let log = proxy.logged("maxmemory-policy allkeys-lru").await;
    assert!(log.contains("set maxmemory-policy noeviction"), "{log}");
}

#[tokio::test]
async fn a_tenants_conversations_quota_is_counted_across_replicas() {
    let redis = RedisServer::start();
    conversations_quota_holds_across_replicas(&redis.url()).await
}

#[tokio::test]
async fn a_tenants_conversations_quota_is_counted_across_replicas_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    conversations_quota_holds_across_replicas(&cluster.url()).await
}

/// Two replicas on the Redis at `redis_url`, a tenant's quota of two conversations: an idle one makes room
/// for a new one, and those paused on their users do not.
async fn conversations_quota_holds_across_replicas(redis_url: &str) {
    let folder = TempDir::new("redis-quota");
    let route = Route::new("chat", PATH, "ag-ui", "echo").quota("conversations", 2);
    let config = write_config(&folder, redis_store(redis_url), route);
    let one = AgentBridge::start(serve_command(&config));
    let other = AgentBridge::start(serve_command(&config));

    let done = run(&url(&one), &say("done", "r1", "hello")).await;
    assert_eq!(error_code(&done), None, "{done:#?}");
    let paused = run(&url(&other), &say("waiting", "r2", "/ask Which city?")).await;
    assert_eq!(error_code(&paused), None, "{paused:#?}");
    // The idle conversation, saved on the other replica, makes room.
    let paused = run(&url(&one), &say("waiting too", "r3", "/ask Which day?")).await;
    assert_eq!(error_code(&paused), None, "{paused:#?}");

    // Conversations paused on either replica wait on their users: they cannot make room.
    let refused = run(&url(&other), &say("another", "r4", "hello")).await;
    let error = ag_ui::run_error(&refused);
    assert_eq!(error["code"], "RATE_LIMITED", "{refused:#?}");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("quota"),
        "{error}"
    );
}

#[test]
fn a_redb_file_held_by_another_proxy_stops_the_second_with_an_error_naming_it() {
    let folder = TempDir::new("redb-held");
    let mut store = Table::new();
    store.insert("backend".into(), "redb".into());
    store.insert("path".into(), "held.redb".into());
    let route = Route::new("chat", PATH, "ag-ui", "echo");
    let config = write_config(&folder, Toml::Table(store), route);
    let _first = AgentBridge::start(serve_command(&config));

    let second = serve_command(&config)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run agent-bridge");

    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    let file = folder.path().join("held.redb");
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    assert!(stderr.contains("held by another process"), "{stderr}");
}

#[tokio::test]
async fn the_shipped_routes_keep_a_paused_question_across_a_kill_and_restart() {
    // The built-in routes.toml, as `cargo run` serves it in a folder with no routes file: its redb store is
    // ./data/agent-bridge.redb.
    let folder = TempDir::new("shipped-restart");
    let start = || {
        let mut command = agent_bridge();
        command
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .current_dir(folder.path());
        AgentBridge::start(command)
    };
    let echo = |proxy: &AgentBridge| format!("http://{}/echo/ag-ui", proxy.address);
    let proxy = start();
    let question = json!([user("u1", "/ask Which city?")]);
    let paused = run(&echo(&proxy), &input("t1", "r1", question.clone())).await;
    let finished = ag_ui::only(&paused, "RUN_FINISHED");
    let interrupt = &finished["outcome"]["interrupts"][0];
    assert_eq!(interrupt["message"], "Which city?", "{paused:#?}");
    assert!(folder.path().join("data/agent-bridge.redb").exists());

    drop(proxy); // SIGKILL
    let restarted = start();
    let mut answer = input("t1", "r2", question);
    answer["resume"] =
        json!([{"interruptId": interrupt["id"], "status": "resolved", "payload": "Paris"}]);
    let done = run(&echo(&restarted), &answer).await;

    assert_eq!(error_code(&done), None, "{done:#?}");
    assert_eq!(ag_ui::text_of(&done), "You answered: Paris");
}

/// The next request's URL, on the other proxy: the other replica, or this one killed and started again.
fn next(deployment: &mut Deployment) -> String {
    deployment.between_turns();
    deployment.url(PATH)
}

async fn a2a_task_is_read_answered_and_cancelled_on_another_proxy(topology: Topology) {
    let route = Route::new("tasks", PATH, "a2a", "echo");
    let mut deployment = Deployment::start(topology, route);
    let first = deployment.url(PATH);
    let paused = a2a::send_message(&first, a2a::message("/ask Which city?")).await;
    assert_eq!(paused["status"]["state"], "input-required", "{paused}");
    let task_id = paused["id"].as_str().unwrap().to_owned();

    let got = a2a::get_task(&next(&mut deployment), &task_id).await;
    assert_eq!(got["status"]["state"], "input-required", "{got}");
    assert_eq!(got["contextId"], paused["contextId"]);
    assert_eq!(a2a::status_text(&got["status"]), "Which city?");
    let waiting = resubscribed(&next(&mut deployment), &task_id).await;
    assert_eq!(waiting["status"]["state"], "input-required", "{waiting}");
    assert_eq!(a2a::status_text(&waiting["status"]), "Which city?");

    let done = a2a::send_message(&next(&mut deployment), a2a::answer_to(&paused, "Paris")).await;
    assert_eq!(done["id"], paused["id"]);
    assert_eq!(done["status"]["state"], "completed", "{done}");
    assert_eq!(a2a::artifact_text(&done), "You answered: Paris");
    let got = a2a::get_task(&next(&mut deployment), &task_id).await;
    assert_eq!(got["status"]["state"], "completed", "{got}");
    let ended = resubscribed(&next(&mut deployment), &task_id).await;
    assert_eq!(ended["status"]["state"], "completed", "{ended}");

    let asked = a2a::send_message(&next(&mut deployment), a2a::message("/ask Which day?")).await;
    let other = asked["id"].as_str().unwrap().to_owned();
    let canceled = a2a::cancel_task(&next(&mut deployment), &other).await;
    assert_eq!(canceled["status"]["state"], "canceled", "{canceled}");
    let got = a2a::get_task(&next(&mut deployment), &other).await;
    assert_eq!(got["status"]["state"], "canceled", "{got}");
}

/// What `tasks/resubscribe` to a task that is not running gives: one final status update, the task as it
/// is kept.
async fn resubscribed(url: &str, task_id: &str) -> Value {
    let mut followed = resubscribe(url, task_id).await;
    let mut results = followed.rest().await;
    assert_eq!(results.len(), 1, "{results:#?}");
    let update = results[0]["result"].take();
    assert_eq!(update["taskId"], task_id, "{update}");
    assert_eq!(update["final"], true, "{update}");
    update
}

#[tokio::test]
async fn an_a2a_task_is_read_answered_and_canceled_after_kills_and_restarts_on_redb() {
    a2a_task_is_read_answered_and_cancelled_on_another_proxy(Topology::Restarted).await;
}

#[tokio::test]
async fn an_a2a_task_is_read_answered_and_canceled_on_either_of_two_replicas() {
    a2a_task_is_read_answered_and_cancelled_on_another_proxy(Topology::Replicas).await;
}

#[tokio::test]
async fn an_a2a_task_is_read_answered_and_canceled_on_either_of_two_replicas_on_a_redis_cluster() {
    a2a_task_is_read_answered_and_cancelled_on_another_proxy(Topology::Clustered).await;
}

/// An A2A route to an AG-UI agent that starts a run and never ends it.
fn hanging_agent_route(agent: &Upstream) -> Route {
    Route::new("tasks", PATH, "a2a", "ag-ui").upstream(&agent.url())
}

async fn start_a_task_that_never_ends(url: &str) -> String {
    let params =
        json!({"message": a2a::message("think forever"), "configuration": {"blocking": false}});
    let task = a2a::result(url, "message/send", params).await;
    task["id"].as_str().expect("a task id").to_owned()
}

/// Reads the task until its state is `state`, for up to `limit`; the task.
async fn in_state_within(url: &str, task_id: &str, state: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let task = a2a::get_task(url, task_id).await;
        if task["status"]["state"] == state {
            return task;
        }
        assert!(
            Instant::now() < deadline,
            "not {state} within {limit:?}: {task}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads the task until it is `failed`, for up to `limit`; its final status message.
async fn failed_within(url: &str, task_id: &str, limit: Duration) -> String {
    let task = in_state_within(url, task_id, "failed", limit).await;
    a2a::status_text(&task["status"])
}

#[tokio::test]
async fn an_a2a_task_cut_short_by_a_kill_reads_failed_after_the_restart_on_redb() {
    let agent = Upstream::serve([Reply::sse().event(started()).hang()]).await;
    let mut deployment = Deployment::start(Topology::Restarted, hanging_agent_route(&agent));
    let task_id = start_a_task_that_never_ends(&deployment.url(PATH)).await;
    agent.wait_for("the run reaches the agent", |_| true).await;
    // The task turns working once the proxy has read the agent's first event, just after the request.
    in_state_within(&deployment.url(PATH), &task_id, "working", WAIT).await;

    // SIGKILL, mid-run, and a start on the same file. It is this process's alone: a run it does not drive
    // is dead at once.
    let restarted = next(&mut deployment);
    let why = failed_within(&restarted, &task_id, Duration::from_secs(1)).await;
    assert!(why.contains("stopped before the task ended"), "{why}");
}

#[tokio::test]
async fn an_a2a_task_whose_replica_died_reads_failed_on_the_other_once_its_lease_lapses() {
    let redis = RedisServer::start();
    let agent = Upstream::serve([Reply::sse().event(started()).hang()]).await;
    let folder = TempDir::new("a2a-replica-died");
    let config = write_config(
        &folder,
        redis_store(&redis.url()),
        hanging_agent_route(&agent),
    );
    let running = AgentBridge::start(serve_command(&config));
    let other = AgentBridge::start(serve_command(&config));
    let task_id = start_a_task_that_never_ends(&url(&running)).await;
    agent.wait_for("the run reaches the agent", |_| true).await;

    // Renewed every 3 s, the lease holds on the other replica while the run goes on: the task reads as it
    // was last kept, its run going on.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let going_on = a2a::get_task(&url(&other), &task_id).await;
    assert_eq!(going_on["status"]["state"], "submitted", "{going_on}");

    drop(running); // SIGKILL
    let why = failed_within(&url(&other), &task_id, Duration::from_secs(20)).await;
    assert!(why.contains("stopped before the task ended"), "{why}");
}

/// Two replicas on one Redis, and an A2A route to an agent whose run waits after its first words, with a
/// task of it under way on the first.
struct TaskUnderWay {
    _redis: RedisServer,
    _folder: TempDir,
    agent: Upstream,
    running: AgentBridge,
    other: AgentBridge,
    task_id: String,
}

/// `limit`: what the route holds to besides (a quota).
async fn a_task_under_way_on_one_of_two_replicas(
    name: &str,
    agent: Upstream,
    limit: impl FnOnce(Route) -> Route,
) -> TaskUnderWay {
    let redis = RedisServer::start();
    let folder = TempDir::new(name);
    let route = limit(hanging_agent_route(&agent));
    let config = write_config(&folder, redis_store(&redis.url()), route);
    let running = AgentBridge::start(serve_command(&config));
    let other = AgentBridge::start(serve_command(&config));
    let task_id = start_a_task_that_never_ends(&url(&running)).await;
    agent.wait_for("the run reaches the agent", |_| true).await;
    TaskUnderWay {
        _redis: redis,
        _folder: folder,
        agent,
        running,
        other,
        task_id,
    }
}

/// `tasks/resubscribe` to `task_id` at `url`: the results as they come.
async fn resubscribe(url: &str, task_id: &str) -> crate::support::SseStream {
    let request = json!({"jsonrpc": "2.0", "id": "r1", "method": "tasks/resubscribe",
                         "params": {"id": task_id}});
    let response = crate::support::post_json(url, &request).await;
    assert_eq!(response.header("content-type"), "text/event-stream");
    response.sse()
}

#[tokio::test]
async fn an_a2a_resubscribe_on_the_other_replica_follows_the_running_task_live() {
    let setup = a_task_under_way_on_one_of_two_replicas(
        "a2a-resubscribe",
        ag_ui::held_agent().await,
        |r| r,
    )
    .await;
    let mut followed = resubscribe(&url(&setup.other), &setup.task_id).await;
    // The run so far, from the replica that does not drive it, before the agent says more.
    let mut results = Vec::new();
    while a2a::streamed_text(&results) != "Hel" {
        let mut next = followed.next().await.expect("the run so far");
        results.push(next["result"].take());
    }
    setup.agent.release();
    while let Some(mut next) = followed.next().await {
        results.push(next["result"].take());
    }
    assert!(results
        .iter()
        .all(|r| r["taskId"] == setup.task_id.as_str()));
    assert_eq!(a2a::streamed_text(&results), "Hello", "{results:#?}");
    let last = results.last().unwrap();
    assert_eq!(last["status"]["state"], "completed", "{results:#?}");
    assert_eq!(last["final"], true);
    let got = a2a::get_task(&url(&setup.other), &setup.task_id).await;
    assert_eq!(got["status"]["state"], "completed", "{got}");
    drop(setup.running);
}

#[tokio::test]
async fn an_a2a_resubscribe_on_the_other_replica_ends_failed_when_the_running_replica_dies() {
    let agent = Upstream::serve([Reply::sse().event(started()).hang()]).await;
    let setup = a_task_under_way_on_one_of_two_replicas("a2a-resubscribe-lost", agent, |r| r).await;
    let mut followed = resubscribe(&url(&setup.other), &setup.task_id).await;
    drop(setup.running); // SIGKILL
    let mut last = Value::Null;
    // The lease lapses within 10 s of the last renewal.
    while let Some(next) = followed.next_within(Duration::from_secs(20)).await {
        last = next;
    }
    assert_eq!(last["result"]["status"]["state"], "failed", "{last}");
    assert_eq!(last["result"]["final"], true);
    let why = a2a::status_text(&last["result"]["status"]);
    assert!(why.contains("stopped before the task ended"), "{why}");
}

/// The session's WebSocket on the proxy that serves `deployment`'s next request.
async fn open_ws(deployment: &Deployment, session: &str) -> cmdc::Ws {
    let ws_url = deployment
        .url(&format!("/gw/v1/sessions/{session}/ws"))
        .replacen("http://", "ws://", 1);
    let (ws, _) = within(
        "the WebSocket handshake",
        tokio_tungstenite::connect_async(ws_url),
    )
    .await
    .expect("the WebSocket connects");
    ws
}

/// The CMDC gateway's client on the proxy that serves `deployment`'s next request.
fn cmdc_on(deployment: &Deployment) -> CmdcClient {
    CmdcClient::new(deployment.url("/gw"))
}

#[tokio::test]
async fn a_cmdc_session_is_prompted_on_one_replica_followed_and_answered_on_the_other() {
    let route = Route::new("cmdc", "/gw", "cmdc", "echo");
    let mut deployment = Deployment::start(Topology::Replicas, route);
    let session = cmdc_on(&deployment).create(json!({"model": "m"})).await;
    deployment.between_turns();
    // The other replica drives the run; this one follows it and takes the answer.
    let accepted = cmdc_on(&deployment)
        .prompt(&session, "/ask Which city?")
        .await;
    assert_eq!(accepted["queued"], false, "{accepted}");
    deployment.between_turns();
    let follower = cmdc_on(&deployment);
    let mut events = follower.subscribe(&session).await;
    let asked = cmdc::until(&mut events, "ask_user").await;
    let ask = &asked.last().unwrap().1;
    assert_eq!(ask["question"], "Which city?");
    follower.wait_state(&session, "waiting_input").await;
    let reference = ask["ref"].as_str().unwrap();
    let answered = follower.respond(&session, reference, "Paris").await;
    assert_eq!(answered.status, 200);

    let seen = cmdc::all(&mut events).await;
    assert_eq!(
        cmdc::names(&seen)
            .iter()
            .filter(|name| **name == "prompt_received")
            .count(),
        1,
        "the whole run, once: {seen:?}"
    );
    assert_eq!(cmdc::streamed_text(&seen), "You answered: Paris");
    assert_eq!(cmdc::names(&seen).last(), Some(&"agent_end"), "{seen:?}");
    let idle = follower.wait_state(&session, "idle").await;
    assert_eq!(idle["turns"], 1, "{idle}");
    let messages = follower.messages(&session).await;
    let texts: Vec<&str> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|message| message["content"].as_str())
        .collect();
    assert_eq!(texts.last(), Some(&"You answered: Paris"), "{messages}");
}

/// A CMDC run paused on its user on a replica that dies: the other replica carries it on once the dead
/// one's lease lapses. `answer_early`: the answer is posted while that lease still holds (it is handed to
/// the replica that died, and taken from there); else once the other replica carries the run on.
async fn a_cmdc_run_paused_on_a_replica_that_dies_is_carried_on_by_the_other(answer_early: bool) {
    let route = Route::new("cmdc", "/gw", "cmdc", "echo");
    let mut deployment = Deployment::start(Topology::Replicas, route);
    let session = cmdc_on(&deployment).create(json!({"model": "m"})).await;
    cmdc_on(&deployment)
        .prompt(&session, "/ask Which city?")
        .await;
    cmdc_on(&deployment)
        .wait_state(&session, "waiting_input")
        .await;
    deployment.between_turns();
    let other = cmdc_on(&deployment);
    let mut events = other.subscribe(&session).await;
    let asked = cmdc::until(&mut events, "ask_user").await;
    let reference = asked.last().unwrap().1["ref"].as_str().unwrap().to_owned();
    deployment.kill_the_last_turns_replica();
    if !answer_early {
        // Past the dead replica's lease (10 s): the answer's request finds the run to carry on.
        tokio::time::sleep(Duration::from_secs(11)).await;
    }
    let answered = other.respond(&session, &reference, "Paris").await;
    assert_eq!(answered.status, 200);
    // The follower here looks every 3 s once the lease lapsed.
    while events
        .next_data_within(Duration::from_secs(20))
        .await
        .is_some()
    {}
    let seen = cmdc::frames(&events.raw);
    let names = cmdc::names(&seen);
    assert_eq!(
        names.iter().filter(|name| **name == "ask_user").count(),
        1,
        "the run once: {seen:?}"
    );
    assert!(!names.contains(&"error"), "{seen:?}");
    assert_eq!(cmdc::streamed_text(&seen), "You answered: Paris");
    assert_eq!(names.last(), Some(&"agent_end"), "{seen:?}");
    let idle = other.wait_state(&session, "idle").await;
    assert_eq!(idle["turns"], 1, "{idle}");
}

#[tokio::test]
async fn a_cmdc_run_paused_on_a_replica_that_dies_is_carried_on_by_the_other_and_answered_there() {
    a_cmdc_run_paused_on_a_replica_that_dies_is_carried_on_by_the_other(false).await
}

#[tokio::test]
async fn an_answer_handed_to_a_replica_as_it_died_is_taken_by_the_one_carrying_its_paused_run_on() {
    a_cmdc_run_paused_on_a_replica_that_dies_is_carried_on_by_the_other(true).await
}

#[tokio::test]
async fn a_cmdc_run_that_ended_on_one_replica_is_replayed_once_to_a_subscriber_on_the_other() {
    let route = Route::new("cmdc", "/gw", "cmdc", "echo");
    let mut deployment = Deployment::start(Topology::Replicas, route);
    let session = cmdc_on(&deployment).create(json!({"model": "m"})).await;
    cmdc_on(&deployment).prompt(&session, "hello there").await;
    cmdc_on(&deployment).wait_state(&session, "idle").await;
    deployment.between_turns();
    // cmdc-sdk posts the prompt before it opens the events: the run it missed, from its start.
    let mut events = cmdc_on(&deployment).subscribe(&session).await;
    let seen = cmdc::all(&mut events).await;
    assert_eq!(
        cmdc::names(&seen).first(),
        Some(&"prompt_received"),
        "{seen:?}"
    );
    assert_eq!(cmdc::streamed_text(&seen), "hello there");
    assert_eq!(cmdc::names(&seen).last(), Some(&"agent_end"), "{seen:?}");

    // Read once: the next subscriber waits for the next run, which the other replica drives.
    let mut next = cmdc_on(&deployment).subscribe(&session).await;
    deployment.between_turns();
    cmdc_on(&deployment).prompt(&session, "again").await;
    let seen = cmdc::all(&mut next).await;
    assert_eq!(cmdc::streamed_text(&seen), "again", "{seen:?}");
}

#[tokio::test]
async fn a_client_tool_called_back_on_the_other_replica_gets_the_clients_result_from_this_one() {
    let redis = RedisServer::start();
    let gateway = cmdc::Gateway::start(|_, _| {
        vec![cmdc::call_tool(
            "tc_bg",
            "change_background",
            json!({"color": "blue"}),
            |result| cmdc::reply(&["Done: ", result]),
        )]
    })
    .await;
    let route = |proxy_url: Option<String>| {
        let route = Route::new("pair", PATH, "ag-ui", "cmdc")
            .upstream(&gateway.url())
            .upstream_headers(&[("X-API-Key", cmdc::KEY)])
            .translate("model", "m")
            .translate("agui_interrupts", "tool");
        match proxy_url {
            Some(url) => route.translate("proxy_url", url.as_str()),
            None => route,
        }
    };
    // The replica the gateway calls back, started first so that the other's callback URLs can name it.
    let called_folder = TempDir::new("cmdc-called-back");
    let called_config = write_config(&called_folder, redis_store(&redis.url()), route(None));
    let called = AgentBridge::start(serve_command(&called_config));
    let driving_folder = TempDir::new("cmdc-driving");
    let called_url = format!("http://{}", called.address);
    let driving_config = write_config(
        &driving_folder,
        redis_store(&redis.url()),
        route(Some(called_url.clone())),
    );
    let driving = AgentBridge::start(serve_command(&driving_config));

    let mut history = vec![user("u1", "Make the background blue")];
    let mut first = input("thread-1", "run-1", Value::Array(history.clone()));
    first["tools"] = json!([ag_ui::tool("change_background")]);
    let called_for = ag_ui::run(&url(&driving), &first).await;
    assert_eq!(
        ag_ui::calls(&called_for),
        [(
            "tc_bg".to_owned(),
            "change_background".to_owned(),
            json!({"color": "blue"})
        )],
        "{called_for:#?}"
    );
    let registered = gateway.wait_for_request("POST tools").await;
    let callback = registered.body["callbackUrl"].as_str().unwrap_or_default();
    assert!(callback.starts_with(&called_url), "{registered:?}");

    // The result reaches the replica that read the run, not the one holding the gateway's call.
    history.push(ag_ui::kept_call(&called_for, "tc_bg"));
    history.push(ag_ui::tool_result("t1", "tc_bg", "Background is blue"));
    let mut second = input("thread-1", "run-2", Value::Array(history));
    second["tools"] = first["tools"].clone();
    let events = ag_ui::run(&url(&driving), &second).await;
    assert_eq!(
        ag_ui::text_of(&events),
        "Done: Background is blue",
        "{events:#?}"
    );
}

#[tokio::test]
async fn a_cmdc_sessions_later_runs_move_between_replicas_and_its_delete_holds_on_both() {
    let route = Route::new("cmdc", "/gw", "cmdc", "echo");
    let mut deployment = Deployment::start(Topology::Replicas, route);
    let first = cmdc_on(&deployment);
    let session = first.create(json!({"model": "m"})).await;
    first.prompt(&session, "one").await;
    first.wait_state(&session, "idle").await;
    for (n, city) in ["Paris", "Rome"].into_iter().enumerate() {
        // Each run is driven by one replica and answered on the other.
        deployment.between_turns();
        let driving = cmdc_on(&deployment);
        driving.prompt(&session, "/ask Which city?").await;
        let mut events = driving.subscribe(&session).await;
        let asked = cmdc::until(&mut events, "ask_user").await;
        let reference = asked.last().unwrap().1["ref"].as_str().unwrap().to_owned();
        deployment.between_turns();
        let answering = cmdc_on(&deployment);
        answering.wait_state(&session, "waiting_input").await;
        let answered = answering.respond(&session, &reference, city).await;
        assert_eq!(answered.status, 200);
        let seen = cmdc::all(&mut events).await;
        assert_eq!(cmdc::streamed_text(&seen), format!("You answered: {city}"));
        let idle = answering.wait_state(&session, "idle").await;
        assert_eq!(idle["turns"], n + 2, "{idle}");
        deployment.between_turns();
    }

    let deleted = cmdc_on(&deployment)
        .call(
            http::Method::DELETE,
            &format!("/v1/sessions/{session}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, 200);
    for _ in 0..2 {
        deployment.between_turns();
        let gone = cmdc_on(&deployment)
            .call(http::Method::GET, &format!("/v1/sessions/{session}"), None)
            .await;
        assert_eq!(gone.status, 404, "deleted on every replica");
    }
}

#[tokio::test]
async fn a_cmdc_websocket_on_one_replica_gets_the_runs_the_other_drives() {
    let route = Route::new("cmdc", "/gw", "cmdc", "echo");
    let mut deployment = Deployment::start(Topology::Replicas, route);
    let session = cmdc_on(&deployment).create(json!({"model": "m"})).await;
    let mut ws = open_ws(&deployment, &session).await;
    deployment.between_turns();
    for text in ["first run", "second run"] {
        cmdc_on(&deployment).prompt(&session, text).await;
        let mut names = Vec::new();
        let mut said = String::new();
        while names.last().map(String::as_str) != Some("agent_end") {
            let frame = cmdc::recv_ws(&mut ws).await;
            names.push(frame["event"].as_str().unwrap_or_default().to_owned());
            said.push_str(frame["data"]["delta"].as_str().unwrap_or_default());
        }
        assert_eq!(names.first().map(String::as_str), Some("prompt_received"));
        assert_eq!(said, text, "{names:?}");
        cmdc_on(&deployment).wait_state(&session, "idle").await;
    }
}

/// `POST /v1/sessions` of a session `id` for the tenant of `key`, on the replica serving the next turn.
async fn create_session(deployment: &Deployment, key: &str, id: &str) -> crate::support::Response {
    cmdc_on(deployment)
        .with_key(key)
        .call(
            http::Method::POST,
            "/v1/sessions",
            Some(json!({"model": "m", "sessionId": id})),
        )
        .await
}

#[tokio::test]
async fn a_cmdc_session_redis_refuses_to_keep_is_not_made_and_its_client_gets_503() {
    let redis = RedisServer::start();
    let folder = TempDir::new("redis-full");
    let route = Route::new("cmdc", "/gw", "cmdc", "echo").api_keys(&[("sk-a", "acme")]);
    let config = write_config(&folder, redis_store(&redis.url()), route);
    let proxy = AgentBridge::start(serve_command(&config));
    let client = CmdcClient::new(format!("http://{}/gw", proxy.address)).with_key("sk-a");
    let create = |id: &str| {
        let body = json!({"model": "m", "sessionId": id});
        client.call(http::Method::POST, "/v1/sessions", Some(body))
    };
    assert_eq!(create("s1").await.status, 201);

    // Full: Redis still answers reads, and refuses every write.
    assert_eq!(redis.cli(&["config", "set", "maxmemory", "1"]).trim(), "OK");
    let refused = create("s2").await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.json().await["error"], "unavailable");
    assert_eq!(redis.cli(&["config", "set", "maxmemory", "0"]).trim(), "OK");
    let session = client
        .call(http::Method::GET, "/v1/sessions/s2", None)
        .await;
    assert_eq!(session.status, 404, "a session made on this replica alone");
    assert_eq!(create("s2").await.status, 201);
}

/// A tenant's sessions quota, each request on `topology`'s next proxy (the other replica, or this one
/// killed and started again).
async fn a_tenants_cmdc_sessions_quota_holds(topology: Topology) {
    let route = Route::new("cmdc", "/gw", "cmdc", "echo")
        .api_keys(&[("sk-a", "acme"), ("sk-b", "globex")])
        .quota("sessions", 2);
    let mut deployment = Deployment::start(topology, route);
    for id in ["a1", "a2"] {
        assert_eq!(create_session(&deployment, "sk-a", id).await.status, 201);
        deployment.between_turns();
    }
    // Each replica (or process) made one of the tenant's two sessions; none lets it make a third.
    for _ in 0..2 {
        let over = create_session(&deployment, "sk-a", "a3").await;
        assert_eq!(over.status, 422);
        assert_eq!(
            over.json().await,
            json!({"error": "create_failed", "message": ":too_many_sessions"})
        );
        deployment.between_turns();
    }
    assert_eq!(create_session(&deployment, "sk-b", "b1").await.status, 201);

    // A session deleted on one replica makes room on the other.
    let deleted = cmdc_on(&deployment)
        .with_key("sk-a")
        .call(http::Method::DELETE, "/v1/sessions/a1", None)
        .await;
    assert_eq!(deleted.status, 200);
    deployment.between_turns();
    assert_eq!(create_session(&deployment, "sk-a", "a3").await.status, 201);
}

#[tokio::test]
async fn a_tenants_cmdc_sessions_quota_is_counted_across_replicas() {
    a_tenants_cmdc_sessions_quota_holds(Topology::Replicas).await
}

#[tokio::test]
async fn a_tenants_cmdc_sessions_quota_counts_what_redb_kept_before_a_kill_and_restart() {
    a_tenants_cmdc_sessions_quota_holds(Topology::Restarted).await
}

#[tokio::test]
async fn a_tenants_cmdc_sessions_quota_is_counted_across_replicas_on_a_redis_cluster() {
    a_tenants_cmdc_sessions_quota_holds(Topology::Clustered).await
}

/// The text of the next run a gateway's WebSocket shows, from `prompt_received` to `agent_end` (acks of
/// the client's actions skipped).
async fn next_ws_run(ws: &mut cmdc::Ws) -> String {
    let mut said = None::<String>;
    loop {
        let frame = cmdc::recv_ws(ws).await;
        match frame["event"].as_str() {
            Some("prompt_received") => said = Some(String::new()),
            Some("agent_end") if said.is_some() => return said.unwrap_or_default(),
            _ => {}
        }
        if let (Some(said), Some(delta)) = (&mut said, frame["data"]["delta"].as_str()) {
            said.push_str(delta);
        }
    }
}

#[tokio::test]
async fn a_prompt_on_a_websocket_after_the_other_replicas_run_ended_runs_where_it_was_sent() {
    use futures_util::SinkExt;
    let route = Route::new("cmdc", "/gw", "cmdc", "echo");
    let mut deployment = Deployment::start(Topology::Replicas, route);
    let session = cmdc_on(&deployment).create(json!({"model": "m"})).await;
    deployment.between_turns();
    let mut ws = open_ws(&deployment, &session).await;
    deployment.between_turns();
    let other = cmdc_on(&deployment);
    other.prompt(&session, "first run").await;
    assert_eq!(next_ws_run(&mut ws).await, "first run");
    other.wait_state(&session, "idle").await;

    // The socket's replica last saw the session running on the other one, which has since let it go:
    // the prompt is not handed to a run that ended, but runs here.
    let prompt = json!({"action": "prompt", "text": "second run"});
    ws.send(tokio_tungstenite::tungstenite::Message::text(
        prompt.to_string(),
    ))
    .await
    .expect("the prompt is sent");
    assert_eq!(next_ws_run(&mut ws).await, "second run");
}

#[tokio::test]
async fn a_tenants_streams_quota_is_counted_across_replicas() {
    streams_quota_holds_across(Topology::Replicas).await
}

#[tokio::test]
async fn a_tenants_streams_quota_is_counted_across_replicas_on_a_redis_cluster() {
    streams_quota_holds_across(Topology::Clustered).await
}

/// A tenant's quota of one stream on `topology`'s two replicas: a run on one is counted on the other, and
/// its end leaves room at once.
async fn streams_quota_holds_across(topology: Topology) {
    let agent = Reply::sse()
        .events([started()])
        .events(text("m1", &["slow"]))
        .gate()
        .event(finished())
        .serve()
        .await;
    let route = Route::new("chat", PATH, "ag-ui", "ag-ui")
        .upstream(&agent.url())
        .quota("streams", 1);
    let mut deployment = Deployment::start(topology, route);
    let mut first = within(
        "the first run starts",
        ag_ui::start(&deployment.url(PATH), &say("t1", "r1", "hi")),
    )
    .await;
    // Streaming: its text arrived, its end waits on the agent.
    while !first.next_data().await.expect("the text").contains("slow") {}

    // The other replica streams nothing of this tenant's, but counts the run the first one streams.
    deployment.between_turns();
    let refused = run(&deployment.url(PATH), &say("t2", "r2", "hi")).await;
    assert_eq!(error_code(&refused), Some("RATE_LIMITED"), "{refused:#?}");

    // Its end leaves its slot at once, not when the slot's lease lapses (10 s).
    agent.release();
    while first.next_data().await.is_some() {}
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let after = run(&deployment.url(PATH), &say("t2", "r3", "hi")).await;
        if error_code(&after).is_none() {
            let last = after.last().map(|event| &event["type"]);
            assert_eq!(last, Some(&json!("RUN_FINISHED")), "{after:#?}");
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {after:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_runs_of_a_replica_that_died_stop_counting_against_the_streams_quota_once_their_leases_lapse(
) {
    let redis = RedisServer::start();
    let agent = Upstream::serve([
        Reply::sse().event(started()).hang(),
        Reply::sse().events([started(), finished()]),
    ])
    .await;
    let folder = TempDir::new("streams-replica-died");
    let route = Route::new("chat", PATH, "ag-ui", "ag-ui")
        .upstream(&agent.url())
        .quota("streams", 1);
    let config = write_config(&folder, redis_store(&redis.url()), route);
    let streaming = AgentBridge::start(serve_command(&config));
    let other = AgentBridge::start(serve_command(&config));
    let _held = within(
        "the first run starts",
        ag_ui::start(&url(&streaming), &say("t1", "r1", "hi")),
    )
    .await;
    agent.wait_for("the run reaches the agent", |_| true).await;

    // Renewed every 3 s, the run's slot outlasts its first lease (10 s) while its replica lives.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let refused = run(&url(&other), &say("t2", "r2", "hi")).await;
    assert_eq!(error_code(&refused), Some("RATE_LIMITED"), "{refused:#?}");

    drop(streaming); // SIGKILL: nobody leaves the slot; it lapses.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let events = run(&url(&other), &say("t2", "r3", "hi")).await;
        if error_code(&events).is_none() {
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {events:#?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A tenant's tasks quota, each request on `topology`'s next proxy (the other replica, or this one killed
/// and started again): the oldest finished task makes room, and a paused one stays.
async fn a_tenants_a2a_tasks_quota_holds(topology: Topology) {
    let route = Route::new("tasks", PATH, "a2a", "echo").quota("tasks", 2);
    let mut deployment = Deployment::start(topology, route);
    let paused = a2a::send_message(&deployment.url(PATH), a2a::message("/ask Which city?")).await;
    assert_eq!(paused["status"]["state"], "input-required", "{paused}");
    let finished = a2a::send_message(&next(&mut deployment), a2a::message("hello")).await;
    assert_eq!(finished["status"]["state"], "completed", "{finished}");

    // The third task, on a proxy that made only one of them (or none, since it started): the finished task
    // makes room, and the paused one (a person may still answer it) stays.
    let third = a2a::send_message(&next(&mut deployment), a2a::message("again")).await;
    assert_eq!(third["status"]["state"], "completed", "{third}");
    // Gone on both: the replica that made it no longer serves it from its memory.
    for _ in 0..2 {
        let gone = a2a::call(
            &next(&mut deployment),
            "tasks/get",
            json!({"id": finished["id"]}),
        )
        .await;
        assert_eq!(gone["error"]["code"], -32001, "{gone}");
    }
    let kept = a2a::get_task(&next(&mut deployment), paused["id"].as_str().unwrap()).await;
    assert_eq!(kept["status"]["state"], "input-required", "{kept}");
}

#[tokio::test]
async fn a_tenants_a2a_tasks_quota_is_counted_across_replicas_its_oldest_finished_task_making_room()
{
    a_tenants_a2a_tasks_quota_holds(Topology::Replicas).await
}

#[tokio::test]
async fn a_tenants_a2a_tasks_quota_counts_what_redb_kept_before_a_kill_and_restart() {
    a_tenants_a2a_tasks_quota_holds(Topology::Restarted).await
}

#[tokio::test]
async fn a_tenants_a2a_tasks_quota_is_counted_across_replicas_on_a_redis_cluster() {
    a_tenants_a2a_tasks_quota_holds(Topology::Clustered).await
}

#[tokio::test]
async fn a_task_cut_short_by_a_kill_stops_holding_its_tenants_quota_after_the_restart_on_redb() {
    let agent = Upstream::serve([Reply::sse().event(started()).hang()]).await;
    let route = hanging_agent_route(&agent).quota("tasks", 1);
    let mut deployment = Deployment::start(Topology::Restarted, route);
    let orphan = start_a_task_that_never_ends(&deployment.url(PATH)).await;
    in_state_within(&deployment.url(PATH), &orphan, "working", WAIT).await;

    // The file shows the tenant's one task running; the restarted proxy, which does not drive it, fails it
    // and lets it make room.
    let restarted = next(&mut deployment);
    let params = json!({"message": a2a::message("one more"), "configuration": {"blocking": false}});
    let admitted = a2a::call(&restarted, "message/send", params.clone()).await;
    assert!(admitted.get("error").is_none(), "{admitted}");
    // The task now running holds the quota: it does not make room as the failed one did.
    let refused = a2a::call(&restarted, "message/send", params).await;
    assert_eq!(refused["error"]["code"], -32051, "{refused}");
    // Gone from the file too: the next start does not bring it back.
    let gone = a2a::call(&next(&mut deployment), "tasks/get", json!({"id": orphan})).await;
    assert_eq!(gone["error"]["code"], -32001, "{gone}");
}

#[tokio::test]
async fn a_tenant_whose_a2a_tasks_all_run_on_another_replica_is_refused_a_new_one() {
    let agent = Upstream::serve([Reply::sse().event(started()).hang()]).await;
    let setup =
        a_task_under_way_on_one_of_two_replicas("a2a-tasks-quota", agent, |r| r.quota("tasks", 1))
            .await;

    let params = json!({"message": a2a::message("one more"), "configuration": {"blocking": false}});
    let refused = a2a::call(&url(&setup.other), "message/send", params).await;
    assert_eq!(refused["error"]["code"], -32051, "{refused}");
    let running_task = a2a::get_task(&url(&setup.running), &setup.task_id).await;
    let state = running_task["status"]["state"].as_str().unwrap_or_default();
    assert!(matches!(state, "submitted" | "working"), "{running_task}");
}

#[tokio::test]
async fn prompts_to_an_idle_cmdc_session_on_two_replicas_at_once_both_run_one_after_the_other() {
    let route = Route::new("cmdc", "/gw", "cmdc", "echo");
    let mut deployment = Deployment::start(Topology::Replicas, route);
    let first = cmdc_on(&deployment);
    let session = first.create(json!({"model": "m"})).await;
    deployment.between_turns();
    let second = cmdc_on(&deployment);

    tokio::join!(
        first.prompt(&session, "one"),
        second.prompt(&session, "two")
    );

    // Both replicas found the session idle; one claimed its next run and the other's prompt followed it.
    // Had both run it, each would have kept the session as one turn on top of none.
    let info = within("both runs", async {
        loop {
            let info = first.info(&session).await;
            if info["state"] == "idle" && info["turns"] == 2 {
                return info;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(info["turns"], 2, "{info}");
}

#[tokio::test]
async fn a_task_whose_replica_died_stops_holding_its_tenants_quota_once_its_lease_lapses() {
    let agent = Upstream::serve([Reply::sse().event(started()).hang()]).await;
    let setup = a_task_under_way_on_one_of_two_replicas("a2a-quota-replica-died", agent, |r| {
        r.quota("tasks", 1)
    })
    .await;
    let (other, orphan) = (setup.other, setup.task_id);

    drop(setup.running); // SIGKILL: its task shows a run nobody drives.
    let params = json!({"message": a2a::message("one more"), "configuration": {"blocking": false}});
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let answer = a2a::call(&url(&other), "message/send", params.clone()).await;
        if answer.get("error").is_none() {
            break;
        }
        assert_eq!(answer["error"]["code"], -32051, "{answer}");
        assert!(Instant::now() < deadline, "still refused: {answer}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The orphan was failed, and so made room.
    let gone = a2a::call(&url(&other), "tasks/get", json!({"id": orphan})).await;
    assert_eq!(gone["error"]["code"], -32001, "{gone}");
}

/// One turn of an AgentScope client (`/scope`) or of an AG-Kit client (`/kit`) on `proxy`, saying "hi": the
/// HTTP status and the data of each event.
async fn turn_of(proxy: &AgentBridge, inbound: &str) -> (http::StatusCode, Vec<String>) {
    let (path, body) = match inbound {
        "agentscope" => (
            "/scope/process",
            crate::support::agentscope::request(
                "s-1",
                json!([crate::support::agentscope::user("u1", "hi")]),
            ),
        ),
        _ => (
            "/kit/send-message",
            json!({"messages": [{"role": "user", "content": "hi"}], "conversationId": "c-1"}),
        ),
    };
    let response =
        crate::support::post_json(&format!("http://{}{path}", proxy.address), &body).await;
    let status = response.status;
    if !status.is_success() {
        return (
            status,
            vec![String::from_utf8_lossy(&response.bytes().await).into_owned()],
        );
    }
    let mut stream = response.sse();
    let mut events = Vec::new();
    while let Some(data) = stream.next_data().await {
        events.push(data);
    }
    (status, events)
}

/// Redis gone, AgentScope and AG-Kit clients get their protocol's own error at once (AgentScope: its
/// response `failed`; AG-Kit: HTTP 503), and their turns work again once Redis is back.
#[tokio::test]
async fn redis_gone_fails_agentscope_and_ag_kit_turns_in_their_own_shape_and_the_proxy_recovers() {
    let mut redis = RedisServer::start();
    let folder = TempDir::new("redis-gone-shapes");
    let routes = Routes::default()
        .set("store", redis_store(&redis.url()))
        .route(Route::new("scope", "/scope", "agentscope", "echo"))
        .route(Route::new("kit", "/kit", "ag-kit", "echo"));
    let config = folder.path().join("routes.toml");
    std::fs::write(&config, routes.to_string()).expect("write the routes file");
    let proxy = AgentBridge::start(serve_command(&config));
    redis.kill();

    let (status, scope) = turn_of(&proxy, "agentscope").await;
    assert_eq!(status, 200);
    let last: Value = serde_json::from_str(scope.last().expect("a frame")).expect("JSON");
    assert_eq!(last["status"], "failed", "{scope:#?}");
    assert_eq!(last["error"]["code"], "STORE_UNAVAILABLE", "{scope:#?}");
    let (status, kit) = turn_of(&proxy, "ag-kit").await;
    assert_eq!(status, 503, "{kit:#?}");
    let refused: Value = serde_json::from_str(&kit[0]).expect("a JSON error");
    assert_eq!(refused["error"]["code"], "STORE_UNAVAILABLE", "{refused}");

    redis.restart();
    for inbound in ["agentscope", "ag-kit"] {
        let deadline = Instant::now() + WAIT;
        loop {
            let (status, events) = turn_of(&proxy, inbound).await;
            if status == 200 && !events.concat().contains("STORE_UNAVAILABLE") {
                let events: Vec<Value> = events
                    .iter()
                    .filter_map(|data| serde_json::from_str(data).ok())
                    .collect();
                let said = match inbound {
                    "agentscope" => crate::support::agentscope::deltas(&events).concat(),
                    _ => events
                        .iter()
                        .filter(|event| event["type"] == "text")
                        .filter_map(|event| event["content"].as_str())
                        .collect(),
                };
                assert_eq!(said, "hi", "{inbound}: {events:#?}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{inbound}: the proxy did not get its store back"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
