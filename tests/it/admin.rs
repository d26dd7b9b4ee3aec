//! The admin listener as an operator uses it: Prometheus scrapes `/metrics` there (never on the traffic
//! port), and a balancer or Kubernetes reads `/readyz`.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};

use crate::support::ag_ui::{self, finished, input, started, text, user};
use crate::support::binary::{serve_command, AgentBridge, TempConfig};
use crate::support::stores::{RedisCluster, RedisServer};
use crate::support::{send, within, Reply, Route, Routes, Upstream};

async fn get(url: &str) -> (StatusCode, String) {
    let request = Request::builder()
        .method(Method::GET)
        .uri(url)
        .body(Full::new(Bytes::new()))
        .expect("a valid request");
    let response = within(&format!("GET {url}"), send(request)).await;
    let status = response.status;
    let body = within("its body", response.bytes()).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn say(thread: &str) -> Value {
    input(thread, "r1", json!([user("u1", "hello")]))
}

/// `/readyz` once it answers `status` (bounded by [`within`]); its body.
async fn readyz_once(proxy: &AgentBridge, status: StatusCode) -> String {
    let url = format!("http://{}/readyz", proxy.admin);
    within(&format!("/readyz to answer {status}"), async {
        loop {
            let (answered, body) = get(&url).await;
            if answered == status {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test]
async fn metrics_count_each_routes_runs_by_outcome_on_the_admin_port_only() {
    let agent = Upstream::serve([Reply::sse()
        .event(started())
        .events(text("m1", &["all ", "of ", "it"]))
        .event(finished())])
    .await;
    let broken = Upstream::serve([Reply::status(500).body("boom")]).await;
    let routes = Routes::default()
        .route(Route::new("chat", "/chat", "ag-ui", "ag-ui").upstream(&agent.url()))
        .route(Route::new("broken", "/broken", "ag-ui", "ag-ui").upstream(&broken.url()));
    let config = TempConfig::new("admin-metrics", &routes.to_string());
    let proxy = AgentBridge::start(serve_command(&config.0));

    let chat = ag_ui::run(&format!("http://{}/chat", proxy.address), &say("t1")).await;
    assert_eq!(ag_ui::text_of(&chat), "all of it");
    let failed = ag_ui::run(&format!("http://{}/broken", proxy.address), &say("t2")).await;
    assert!(ag_ui::types(&failed).contains(&"RUN_ERROR"), "{failed:#?}");
    proxy.logged("route=broken").await;

    let (status, metrics) = get(&format!("http://{}/metrics", proxy.admin)).await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        r#"agent_bridge_runs_total{route="chat",pair="ag-ui->ag-ui",outcome="completed"} 1"#,
        r#"agent_bridge_runs_total{route="broken",pair="ag-ui->ag-ui",outcome="failed"} 1"#,
        r#"agent_bridge_errors_total{route="broken",pair="ag-ui->ag-ui",source="upstream",code="UPSTREAM_HTTP_ERROR"} 1"#,
        r#"agent_bridge_events_out_total{route="chat",pair="ag-ui->ag-ui",type="text_delta"} 3"#,
        r#"agent_bridge_events_in_total{route="chat",pair="ag-ui->ag-ui",type="run_started"} 1"#,
        r#"agent_bridge_time_to_first_event_seconds_count{route="chat",pair="ag-ui->ag-ui"} 1"#,
        r#"agent_bridge_upstream_first_byte_seconds_count{route="chat",pair="ag-ui->ag-ui"} 1"#,
        r#"agent_bridge_upstream_first_byte_seconds_count{route="broken",pair="ag-ui->ag-ui"} 1"#,
        r#"agent_bridge_run_duration_seconds_count{route="chat",pair="ag-ui->ag-ui"} 1"#,
        r#"agent_bridge_requests_total{route="chat",pair="ag-ui->ag-ui",code="200"} 1"#,
        r#"agent_bridge_open_runs{route="chat",pair="ag-ui->ag-ui"} 0"#,
        "agent_bridge_runs_in_flight 0",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(
        !metrics.contains("t1"),
        "no conversation id is a label:\n{metrics}"
    );

    let (status, _) = get(&format!("http://{}/metrics", proxy.address)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not on the traffic port");
}

#[tokio::test]
async fn downgrades_count_what_each_lossy_pair_could_not_carry() {
    // An AG-UI agent that reasons and steps, in front of AG-Kit v0 clients (no form for either).
    let thinking = Upstream::serve([Reply::sse()
        .event(started())
        .event(json!({"type": "STEP_STARTED", "stepName": "look"}))
        .event(json!({"type": "REASONING_START", "messageId": "r1"}))
        .event(json!({"type": "REASONING_MESSAGE_START", "messageId": "r1", "role": "reasoning"}))
        .event(json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "r1", "delta": "hmm"}))
        .event(json!({"type": "REASONING_MESSAGE_END", "messageId": "r1"}))
        .event(json!({"type": "REASONING_END", "messageId": "r1"}))
        .event(json!({"type": "STEP_FINISHED", "stepName": "look"}))
        .events(text("m1", &["shown"]))
        .event(finished())])
    .await;
    // An A2A agent, which cannot be offered an AG-UI client's tools.
    let a2a = crate::support::a2a::sunny_then_rain("task-1", "task-2").await;
    let routes = Routes::default()
        .route(Route::new("kit", "/kit", "ag-kit", "ag-ui").upstream(&thinking.url()))
        .route(Route::new("tools", "/tools", "ag-ui", "a2a").upstream(&a2a.url()))
        .route(Route::new("same", "/same", "ag-ui", "echo"));
    let config = TempConfig::new("admin-downgrades", &routes.to_string());
    let proxy = AgentBridge::start(serve_command(&config.0));

    let mut chat = crate::support::ag_kit::Chat::new(&format!("http://{}/kit", proxy.address));
    assert_eq!(chat.say("look it up").await.text(), "shown");
    let mut offered = input(
        "t1",
        "r1",
        json!([{"id": "s1", "role": "system", "content": "Be brief."}, user("u1", "hello")]),
    );
    offered["tools"] = json!([ag_ui::tool("confirmAction")]);
    offered["context"] = json!([{"description": "city", "value": "Paris"}]);
    offered["state"] = json!({});
    let sunny = ag_ui::run(&format!("http://{}/tools", proxy.address), &offered).await;
    assert_eq!(ag_ui::text_of(&sunny), "Sunny.");
    ag_ui::run(&format!("http://{}/same", proxy.address), &offered).await;
    proxy.logged("route=same").await;

    let (_, metrics) = get(&format!("http://{}/metrics", proxy.admin)).await;
    for line in [
        r#"agent_bridge_downgrades_total{route="kit",what="reasoning_delta"} 1"#,
        r#"agent_bridge_downgrades_total{route="kit",what="step_started"} 1"#,
        r#"agent_bridge_downgrades_total{route="tools",what="client_tools"} 1"#,
        r#"agent_bridge_downgrades_total{route="tools",what="system_messages"} 1"#,
        r#"agent_bridge_downgrades_total{route="tools",what="context"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(
        !metrics.contains(r#"downgrades_total{route="same""#),
        "AG-UI to echo loses nothing:\n{metrics}"
    );
    assert!(
        !metrics.contains(r#"what="state""#),
        "an empty state loses nothing:\n{metrics}"
    );
}

#[tokio::test]
async fn readyz_turns_503_the_moment_the_drain_starts() {
    let agent = Upstream::serve([Reply::sse().event(started()).gate().event(finished())]).await;
    let route = Route::new("chat", "/chat", "ag-ui", "ag-ui").upstream(&agent.url());
    let config = TempConfig::new("admin-drain", &Routes::default().route(route).to_string());
    let proxy = AgentBridge::start(serve_command(&config.0));
    assert!(readyz_once(&proxy, StatusCode::OK).await.contains("ready"));

    // A run under way keeps the drain going.
    let mut run = ag_ui::start(&format!("http://{}/chat", proxy.address), &say("t1")).await;
    run.until("RUN_STARTED").await;
    proxy.signal(libc::SIGTERM);
    let draining = readyz_once(&proxy, StatusCode::SERVICE_UNAVAILABLE).await;
    assert!(draining.contains("draining"), "{draining}");

    agent.release();
    let rest = within("the run's end", run.rest()).await;
    assert_eq!(ag_ui::types(&rest), ["RUN_FINISHED"]);
}

/// A proxy on the Redis at `url`, with its routes file.
fn proxy_on_redis(url: &str) -> (AgentBridge, TempConfig) {
    let route = Route::new("chat", "/chat", "ag-ui", "echo");
    let mut store = toml::Table::new();
    store.insert("backend".into(), "redis".into());
    store.insert("url".into(), url.into());
    let routes = Routes::default()
        .set("store", toml::Value::Table(store))
        .route(route);
    let config = TempConfig::new("admin-redis", &routes.to_string());
    (AgentBridge::start(serve_command(&config.0)), config)
}

#[tokio::test]
async fn readyz_is_503_while_redis_is_gone_and_ready_again_when_it_returns() {
    let mut redis = RedisServer::start();
    let (proxy, _config) = proxy_on_redis(&redis.url());
    readyz_once(&proxy, StatusCode::OK).await;

    redis.kill();
    let gone = readyz_once(&proxy, StatusCode::SERVICE_UNAVAILABLE).await;
    assert!(gone.contains("store"), "{gone}");
    redis.restart();
    readyz_once(&proxy, StatusCode::OK).await;
}

#[tokio::test]
async fn readyz_on_a_redis_cluster_stays_ready_while_a_primary_answers() {
    let mut cluster = RedisCluster::start();
    let (proxy, _config) = proxy_on_redis(&cluster.url());
    readyz_once(&proxy, StatusCode::OK).await;

    // One node down: its slots' conversations fail, the others' go on, and so does the replica.
    cluster.kill_node(2);
    let url = format!("http://{}/readyz", proxy.admin);
    for _ in 0..10 {
        let (status, body) = get(&url).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.kill_node(0);
    cluster.kill_node(1);
    let gone = readyz_once(&proxy, StatusCode::SERVICE_UNAVAILABLE).await;
    assert!(gone.contains("store"), "{gone}");
}

/// A route to an A2A agent whose URL, header and key carry secrets.
fn secret_laden_routes() -> String {
    let route = Route::new("weather", "/weather", "ag-ui", "a2a")
        .upstream("http://127.0.0.1:9/a2a?key=url-query-secret")
        .upstream_headers(&[("Authorization", "Bearer header-secret")])
        .api_keys(&[("api-key-secret", "acme")]);
    Routes::default().route(route).to_string()
}

const SECRETS: [&str; 3] = ["url-query-secret", "header-secret", "api-key-secret"];

#[tokio::test]
async fn routes_show_each_pair_and_its_downgrades_and_no_secret() {
    let config = TempConfig::new("admin-routes", &secret_laden_routes());
    let proxy = AgentBridge::start(serve_command(&config.0));

    let (status, body) = get(&format!("http://{}/routes", proxy.admin)).await;
    assert_eq!(status, StatusCode::OK);
    for secret in SECRETS {
        assert!(!body.contains(secret), "{secret} in {body}");
    }
    let routes: Value = serde_json::from_str(&body).expect("JSON");
    let weather = &routes["routes"][0];
    assert_eq!(weather["name"], "weather");
    assert_eq!(weather["pair"], "ag-ui->a2a");
    assert_eq!(weather["upstream"], "http://127.0.0.1:9/a2a");
    assert_eq!(weather["upstream_headers"]["authorization"], "[redacted]");
    assert_eq!(weather["api_keys"], 1);
    let downgrades = weather["downgrades"].to_string();
    assert!(downgrades.contains("are not sent"), "{downgrades}");

    let printed = crate::support::binary::agent_bridge()
        .args(["routes", "--config"])
        .arg(&config.0)
        .output()
        .expect("run agent-bridge routes");
    assert!(printed.status.success());
    let table = String::from_utf8_lossy(&printed.stdout);
    assert!(
        table.contains("weather") && table.contains("ag-ui->a2a"),
        "{table}"
    );
    assert!(table.contains("downgrade: "), "{table}");
    for secret in SECRETS {
        assert!(!table.contains(secret), "{secret} in {table}");
    }
}

#[tokio::test]
async fn an_admin_address_in_use_is_a_start_up_error_naming_admin_listen() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = taken.local_addr().expect("its address").to_string();
    let config = TempConfig::new("admin-taken", &Routes::default().to_string());

    let mut process = crate::support::binary::agent_bridge()
        .args(["--config"])
        .arg(&config.0)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", &address])
        .env("RUST_LOG", "warn")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run agent-bridge");
    // Bounded: a proxy that started after all is killed, and the test fails.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = process.try_wait().expect("its status") {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = process.kill();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let output = process.wait_with_output().expect("its output");

    assert!(status.is_some_and(|status| !status.success()), "{status:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on admin_listen {address}")),
        "{stderr}"
    );
}
