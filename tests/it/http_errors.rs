//! Requests the proxy must refuse before any stream starts (each with its status and a JSON body naming the
//! problem, and nothing sent upstream), the health check, HTTP/2 clients, graceful shutdown, and
//! `agent-bridge check`.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Method, Request};
use http_body_util::Full;
use serde_json::json;
use tokio::net::TcpStream;

use crate::support::ag_ui::{self, finished, input, started, text, user, Profile};
use crate::support::binary::{agent_bridge, AgentBridge, TempConfig};
use crate::support::stores::TempDir;
use crate::support::{send, send_over_http2, within, Proxy, Reply, Response, Route, Upstream};

const PATH: &str = "/agents/pair";

fn pair_route(upstream: &Upstream) -> Route {
    Route::new("pair", PATH, "ag-ui", "ag-ui").upstream(&upstream.url())
}

/// A proxy in front of an upstream that answers every run with a short text.
async fn proxy_and_upstream() -> (Proxy, Upstream) {
    proxy_and_upstream_with(|route| route).await
}

/// [`proxy_and_upstream`] with the route as `configure` makes it.
async fn proxy_and_upstream_with(configure: impl FnOnce(Route) -> Route) -> (Proxy, Upstream) {
    let upstream = ag_ui::text_run("m1", &["ok"]).serve().await;
    let proxy = Proxy::start(configure(pair_route(&upstream))).await;
    (proxy, upstream)
}

fn request(
    method: Method,
    url: &str,
    content_type: Option<&str>,
    body: &str,
) -> Request<Full<Bytes>> {
    let mut request = Request::builder().method(method).uri(url);
    if let Some(content_type) = content_type {
        request = request.header(CONTENT_TYPE, content_type);
    }
    request
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("a valid request")
}

fn post(url: &str, body: &str) -> Request<Full<Bytes>> {
    request(Method::POST, url, Some("application/json"), body)
}

/// Checks a refusal: the status, a JSON `{"error":{"code","message"}}` body with that code; returns the
/// message.
async fn refused(response: Response, status: u16, code: &str) -> String {
    assert_eq!(response.status, status);
    assert_eq!(response.header("content-type"), "application/json");
    let body = response.json().await;
    assert_eq!(body["error"]["code"], code, "{body}");
    body["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("the error names the problem: {body}"))
        .to_owned()
}

/// Nothing reached the upstream: a valid run sent now is the first and only request it ever received.
async fn nothing_was_forwarded(proxy: &Proxy, upstream: &Upstream) {
    let control = input("thread-control", "run-control", json!([user("u1", "hi")]));
    ag_ui::run(&proxy.url(PATH), &control).await;
    let request = upstream.only_request();
    assert_eq!(request.body["runId"], "run-control");
    assert_eq!(upstream.connections(), 1);
}

#[tokio::test]
async fn ag_ui_invalid_json_is_refused_with_400() {
    let (proxy, upstream) = proxy_and_upstream().await;

    let response = send(post(&proxy.url(PATH), r#"{"threadId": "t1", "runId": "#)).await;

    let message = refused(response, 400, "INVALID_REQUEST").await;
    assert!(message.contains("EOF while parsing"), "{message}");
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn ag_ui_body_that_is_not_an_object_is_refused_with_400() {
    let (proxy, upstream) = proxy_and_upstream().await;

    let response = send(post(&proxy.url(PATH), r#"["threadId"]"#)).await;

    let message = refused(response, 400, "INVALID_REQUEST").await;
    assert!(message.contains("RunAgentInput"), "{message}");
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn ag_ui_wrong_field_type_is_refused_with_400_naming_the_field() {
    let (proxy, upstream) = proxy_and_upstream().await;
    let body = json!({"threadId": 42, "runId": "r1", "messages": []});

    let response = send(post(&proxy.url(PATH), &body.to_string())).await;

    let message = refused(response, 400, "INVALID_REQUEST").await;
    assert!(message.contains("`threadId`"), "{message}");
    assert!(message.contains("invalid type: integer `42`"), "{message}");
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn ag_ui_wrong_type_inside_a_message_is_refused_with_400_naming_where() {
    let (proxy, upstream) = proxy_and_upstream().await;
    let body = json!({"threadId": "t1", "runId": "r1",
                      "messages": [{"id": "u1", "role": "user", "content": "hi"},
                                   {"id": "t1", "role": "tool", "content": "x", "toolCallId": 7}]});

    let response = send(post(&proxy.url(PATH), &body.to_string())).await;

    let message = refused(response, 400, "INVALID_REQUEST").await;
    assert!(message.contains("messages[1]"), "{message}");
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn ag_ui_unknown_message_role_is_refused_with_400() {
    let (proxy, upstream) = proxy_and_upstream().await;
    let body = json!({"threadId": "t1", "runId": "r1", "messages": [{"id": "u1", "role": "robot", "content": "hi"}]});

    let response = send(post(&proxy.url(PATH), &body.to_string())).await;

    let message = refused(response, 400, "INVALID_REQUEST").await;
    assert!(message.contains("robot"), "{message}");
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn ag_ui_missing_messages_is_refused_with_400_naming_the_field() {
    let (proxy, upstream) = proxy_and_upstream().await;
    let body = json!({"threadId": "t1", "runId": "r1"});

    let response = send(post(&proxy.url(PATH), &body.to_string())).await;

    let message = refused(response, 400, "INVALID_REQUEST").await;
    assert!(message.contains("missing field `messages`"), "{message}");
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn ag_ui_missing_thread_id_is_refused_with_400_naming_the_field() {
    let (proxy, upstream) = proxy_and_upstream().await;
    let body = json!({"runId": "r1", "messages": []});

    let response = send(post(&proxy.url(PATH), &body.to_string())).await;

    let message = refused(response, 400, "INVALID_REQUEST").await;
    assert!(message.contains("missing field `threadId`"), "{message}");
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn ag_ui_empty_run_id_is_refused_with_400() {
    let (proxy, upstream) = proxy_and_upstream().await;
    let body = json!({"threadId": "t1", "runId": "", "messages": []});

    let response = send(post(&proxy.url(PATH), &body.to_string())).await;

    let message = refused(response, 400, "INVALID_REQUEST").await;
    assert!(message.contains("`runId`"), "{message}");
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn ag_ui_body_over_the_route_limit_is_refused_with_413() {
    let (proxy, upstream) = proxy_and_upstream_with(|route| route.max_body("1KiB")).await;
    let long = "x".repeat(2048);
    let body = input("t1", "r1", json!([user("u1", &long)]));

    let response = send(post(&proxy.url(PATH), &body.to_string())).await;

    let message = refused(response, 413, "PAYLOAD_TOO_LARGE").await;
    assert!(message.contains("1024 bytes"), "{message}");
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn ag_ui_body_within_the_route_limit_is_served() {
    let (proxy, upstream) = proxy_and_upstream_with(|route| route.max_body("1KiB")).await;
    let body = input("t1", "r1", json!([user("u1", &"x".repeat(800))]));

    let events = ag_ui::run(&proxy.url(PATH), &body).await;

    assert_eq!(ag_ui::text_of(&events), "ok");
    assert_eq!(
        upstream.only_request().body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .len(),
        800
    );
}

#[tokio::test]
async fn ag_ui_wrong_method_is_refused_with_405_and_allow() {
    let (proxy, upstream) = proxy_and_upstream().await;

    for method in [Method::GET, Method::PUT, Method::DELETE] {
        let response = send(request(method.clone(), &proxy.url(PATH), None, "")).await;
        assert_eq!(response.header("allow"), "POST", "{method}");
        let message = refused(response, 405, "METHOD_NOT_ALLOWED").await;
        assert!(message.contains(method.as_str()), "{message}");
    }
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn ag_ui_wrong_content_type_is_refused_with_415() {
    let (proxy, upstream) = proxy_and_upstream().await;
    let body = input("t1", "r1", json!([user("u1", "hi")])).to_string();

    let response = send(request(
        Method::POST,
        &proxy.url(PATH),
        Some("text/plain"),
        &body,
    ))
    .await;

    let message = refused(response, 415, "UNSUPPORTED_MEDIA_TYPE").await;
    assert!(message.contains("text/plain"), "{message}");
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn ag_ui_missing_content_type_is_refused_with_415() {
    let (proxy, upstream) = proxy_and_upstream().await;
    let body = input("t1", "r1", json!([user("u1", "hi")])).to_string();

    let response = send(request(Method::POST, &proxy.url(PATH), None, &body)).await;

    let message = refused(response, 415, "UNSUPPORTED_MEDIA_TYPE").await;
    assert!(message.contains("missing Content-Type"), "{message}");
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn ag_ui_json_content_type_with_parameters_is_served() {
    let (proxy, upstream) = proxy_and_upstream().await;
    let body = input("t1", "r1", json!([user("u1", "hi")])).to_string();

    let response = send(request(
        Method::POST,
        &proxy.url(PATH),
        Some("Application/JSON; charset=utf-8"),
        &body,
    ))
    .await;

    assert_eq!(response.status, 200);
    let mut stream = response.sse();
    let events = stream.rest().await;
    ag_ui::check(
        &stream.raw,
        &events,
        &serde_json::from_str(&body).unwrap(),
        Profile::CONSERVATIVE,
    );
    assert_eq!(upstream.received().len(), 1);
}

#[tokio::test]
async fn unknown_path_is_refused_with_404() {
    let (proxy, upstream) = proxy_and_upstream().await;

    for path in ["/nope", "/agents", "/agents/pairs", "/agents/pair/extra"] {
        let body = input("t1", "r1", json!([user("u1", "hi")])).to_string();
        let response = send(post(&proxy.url(path), &body)).await;
        let message = refused(response, 404, "NOT_FOUND").await;
        assert!(message.contains(path), "{path}: {message}");
    }
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn healthz_answers_200() {
    let (proxy, upstream) = proxy_and_upstream().await;

    let response = send(request(Method::GET, &proxy.url("/healthz"), None, "")).await;

    assert_eq!(response.status, 200);
    assert_eq!(response.json().await, json!({"status": "ok"}));
    assert_eq!(upstream.connections(), 0);
}

// --- HTTP/2 ----------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_client_speaking_http2_from_the_first_byte_gets_the_stream() {
    let (proxy, upstream) = proxy_and_upstream().await;
    let run = input("t1", "r1", json!([user("u1", "hi")]));

    let response = send_over_http2(post(&proxy.url(PATH), &run.to_string())).await;

    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), "text/event-stream");
    let mut stream = response.sse();
    let events = stream.rest().await;
    ag_ui::check(&stream.raw, &events, &run, Profile::CONSERVATIVE);
    assert_eq!(ag_ui::text_of(&events), "ok");
    assert_eq!(upstream.connections(), 1);
}

// --- Graceful shutdown -----------------------------------------------------------------------------------

/// Waits until connecting to `proxy` fails.
async fn refuses_connections(proxy: &Proxy) {
    within("the proxy to refuse new connections", async {
        while TcpStream::connect(proxy.addr()).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// The test's proxy: on the test's runtime, or on `threads` threads of its own as `agent-bridge` serves.
async fn proxy_on(routes: Route, grace: Duration, threads: Option<usize>) -> Proxy {
    match threads {
        Some(threads) => Proxy::start_on_threads(routes, grace, threads).await,
        None => Proxy::start_with_grace(routes, grace).await,
    }
}

#[tokio::test]
async fn shutdown_lets_a_running_stream_finish_and_refuses_new_connections() {
    a_running_stream_finishes_after_shutdown(None).await;
}

#[tokio::test]
async fn on_serving_threads_shutdown_lets_a_running_stream_finish_and_refuses_new_connections() {
    a_running_stream_finishes_after_shutdown(Some(2)).await;
}

async fn a_running_stream_finishes_after_shutdown(threads: Option<usize>) {
    let upstream = Reply::sse()
        .event(started())
        .event(json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}))
        .event(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "before "}))
        .gate()
        .event(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "after"}))
        .event(json!({"type": "TEXT_MESSAGE_END", "messageId": "m1"}))
        .event(finished())
        .serve()
        .await;
    let mut proxy = proxy_on(pair_route(&upstream), Duration::from_secs(5), threads).await;
    let run = input("t1", "r1", json!([user("u1", "hi")]));
    let mut stream = ag_ui::start(&proxy.url(PATH), &run).await;
    let mut events = stream.until("TEXT_MESSAGE_CONTENT").await;

    proxy.shutdown();
    refuses_connections(&proxy).await;
    upstream.release();
    events.extend(stream.rest().await);

    ag_ui::check(&stream.raw, &events, &run, Profile::CONSERVATIVE);
    assert_eq!(ag_ui::text_of(&events), "before after");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    proxy.stopped().await;
}

#[tokio::test]
async fn shutdown_stops_waiting_for_a_stream_after_the_grace_period() {
    a_hanging_stream_is_closed_after_the_grace_period(None).await;
}

#[tokio::test]
async fn on_serving_threads_shutdown_stops_waiting_for_a_stream_after_the_grace_period() {
    a_hanging_stream_is_closed_after_the_grace_period(Some(2)).await;
}

async fn a_hanging_stream_is_closed_after_the_grace_period(threads: Option<usize>) {
    let upstream = Reply::sse()
        .event(started())
        .events(text("m1", &["forever"]).into_iter().take(2))
        .hang()
        .serve()
        .await;
    let grace = Duration::from_millis(300);
    let mut proxy = proxy_on(pair_route(&upstream), grace, threads).await;
    let run = input("t1", "r1", json!([user("u1", "hi")]));
    let mut stream = ag_ui::start(&proxy.url(PATH), &run).await;
    stream.until("TEXT_MESSAGE_CONTENT").await;

    let shutdown_at = tokio::time::Instant::now();
    proxy.shutdown();
    proxy.stopped().await;

    let took = shutdown_at.elapsed();
    assert!(took >= grace, "the stream had its grace period: {took:?}");
    assert!(
        took < grace + Duration::from_secs(2),
        "the server stopped at the end of it: {took:?}"
    );
}

#[tokio::test]
async fn on_serving_threads_concurrent_streams_each_get_their_whole_reply() {
    let upstream = ag_ui::text_run("m1", &["one ", "two ", "three"])
        .serve()
        .await;
    let proxy = Proxy::start_on_threads(pair_route(&upstream), Duration::from_secs(5), 2).await;

    let runs = (0..16).map(|i| {
        let url = proxy.url(PATH);
        async move {
            let run = input(
                &format!("t{i}"),
                &format!("r{i}"),
                json!([user("u1", "hi")]),
            );
            let mut stream = ag_ui::start(&url, &run).await;
            let events = stream.rest().await;
            ag_ui::check(&stream.raw, &events, &run, Profile::CONSERVATIVE);
            (
                ag_ui::text_of(&events),
                events.last().map(|e| e["type"].clone()),
            )
        }
    });
    let replies = within("16 streams at once", futures_util::future::join_all(runs)).await;

    for (text, last) in replies {
        assert_eq!(text, "one two three");
        assert_eq!(last, Some(json!("RUN_FINISHED")));
    }
    assert_eq!(upstream.received().len(), 16, "every run reached the agent");
}

// --- agent-bridge check ----------------------------------------------------------------------------------

fn check_command(config: &std::path::Path) -> std::process::Output {
    agent_bridge()
        .args(["check", "--config"])
        .arg(config)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run agent-bridge check")
}

#[test]
fn without_a_routes_file_the_built_in_echo_routes_are_used() {
    let empty = std::env::temp_dir().join(format!("agent-bridge-empty-dir-{}", std::process::id()));
    std::fs::create_dir_all(&empty).expect("create an empty directory");

    let output = agent_bridge()
        .arg("check")
        .current_dir(&empty)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run agent-bridge check");
    let _ = std::fs::remove_dir(&empty);

    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("ok (5 routes)"),
        "the shipped echo routes: {stdout}"
    );
}

#[test]
fn check_accepts_the_shipped_routes_file() {
    let shipped = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("routes.toml");

    let output = check_command(&shipped);

    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("ok"), "{stdout}");
}

#[test]
fn check_rejects_an_unknown_key_naming_file_line_and_key() {
    let config = TempConfig::new(
        "unknown-key",
        "listen = \"127.0.0.1:0\"\n\n[[routes]]\nname = \"echo\"\npath = \"/echo\"\ninbound = \"ag-ui\"\noutbound = \"echo\"\ntimout = \"5s\"\n",
    );

    let output = check_command(&config.0);

    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = format!("{}:8: routes[0].timout", config.0.display());
    assert!(
        stderr.contains(&expected),
        "expected {expected:?} in {stderr}"
    );
}

#[test]
fn check_warns_about_an_option_the_pair_does_not_read_and_accepts_the_file() {
    let config = TempConfig::new(
        "unread-option",
        "[[routes]]\nname = \"echo\"\npath = \"/echo\"\ninbound = \"ag-ui\"\noutbound = \"echo\"\n[routes.translate]\na2a_card = \"auto\"\n",
    );

    let output = check_command(&config.0);

    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let expected = format!(
        "{}:7: routes[0].translate.a2a_card: not read by a route from ag-ui to echo; ignored",
        config.0.display()
    );
    assert!(
        stderr.contains(&expected),
        "expected {expected:?} in {stderr}"
    );
}

#[test]
fn check_rejects_a_bad_value_naming_file_line_and_key() {
    let config = TempConfig::new(
        "bad-value",
        "[[routes]]\nname = \"echo\"\npath = \"/echo\"\ninbound = \"ag-ui\"\noutbound = \"echo\"\n\n[[routes]]\nname = \"pair\"\npath = \"/pair\"\ninbound = \"ag-ui\"\noutbound = \"ag-ui\"\nupstream = \"http://127.0.0.1:9/\"\ntimeout = \"soon\"\n",
    );

    let output = check_command(&config.0);

    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = format!("{}:13: routes[1].timeout", config.0.display());
    assert!(
        stderr.contains(&expected),
        "expected {expected:?} in {stderr}"
    );
}

#[tokio::test]
async fn ag_ui_body_over_the_default_one_mib_limit_is_refused_with_413() {
    let (proxy, upstream) = proxy_and_upstream().await;
    let body = input(
        "t1",
        "r1",
        json!([user("u1", &"x".repeat(3 * 1024 * 1024))]),
    );

    let response = send(post(&proxy.url(PATH), &body.to_string())).await;

    let message = refused(response, 413, "PAYLOAD_TOO_LARGE").await;
    assert!(message.contains("1048576 bytes"), "{message}");
    nothing_was_forwarded(&proxy, &upstream).await;
}

#[tokio::test]
async fn healthz_with_another_method_is_refused_with_405_and_allow() {
    let (proxy, _upstream) = proxy_and_upstream().await;

    let response = send(post(&proxy.url("/healthz"), "{}")).await;

    assert_eq!(response.header("allow"), "GET");
    refused(response, 405, "METHOD_NOT_ALLOWED").await;
}

// --- agent-bridge serve ----------------------------------------------------------------------------------

#[cfg(unix)]
#[tokio::test]
async fn agent_bridge_serves_the_echo_routes_on_its_threads_and_stops_on_sigterm() {
    // The built-in routes keep their store in ./data/ of this folder, removed with it.
    let empty = TempDir::new("serve-dir");
    let mut command = agent_bridge();
    command
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--threads",
            "2",
        ])
        .current_dir(empty.path());
    let mut process = AgentBridge::start(command);
    let address = process.address.clone();

    let run = input("t1", "r1", json!([user("u1", "hello from a client")]));
    let events = ag_ui::run(&format!("http://{address}/echo/ag-ui"), &run).await;
    assert_eq!(ag_ui::text_of(&events), "hello from a client");

    process.signal(libc::SIGTERM);
    let status = within("agent-bridge to exit after SIGTERM", async {
        loop {
            if let Some(status) = process.process.try_wait().expect("its status") {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(status.success(), "agent-bridge exited with {status}");
}
